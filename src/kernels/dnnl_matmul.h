/* dnnl_matmul.h — oneDNN matmul primitives, cached by everything they depend on, shared by the
 * fp32 linear forward (matmul.c) and the 16-bit GEMMs (matmul_lp.c).
 *
 * Primitives are immutable after creation and run with a user scratchpad (the calling thread's
 * zero__kscratch), so one cached primitive is executed by several rank threads at once
 * (oneDNN's default "library" scratchpad would tie it to the thread that created it).
 * Only built with oneDNN (ZERO_HAVE_DNNL).
 */
#ifndef ZERO_KERNELS_DNNL_MATMUL_H
#define ZERO_KERNELS_DNNL_MATMUL_H

#include <stddef.h>

#if defined(ZERO_HAVE_DNNL)
#include <dnnl.h>

/* C(M, N) = op(A)(M, K) · op(B)(K, N) [+ bias(N)] [+ C when acc], row-major with leading
 * dimensions lda, ldb, ldc; op transposes when ta / tb. A, B and the bias are of ab_dt, C of
 * c_dt. threads: the caller's OpenMP thread count (1 is used inside a parallel region): oneDNN
 * sizes a primitive's work split for the count it was created with, so it is part of the key.
 * no_ref: refuse oneDNN's reference loops (orders of magnitude slower than dnnl_sgemm).
 * Zero-filled before use so that memcmp sees no padding. */
typedef struct zero__mm_key {
    int ta, tb, acc, bias, threads, no_ref;
    dnnl_data_type_t ab_dt, c_dt;
    size_t M, N, K, lda, ldb, ldc;
} zero__mm_key_t;

/* Run the GEMM of k on its cached primitive (created on the first call). Returns 0, with C
 * untouched, when oneDNN has no (acceptable) implementation for it. */
int zero__dnnl_matmul(const zero__mm_key_t *k, const void *A, const void *B, void *C,
                      const void *bias);

/* The implementation oneDNN chose for k, into buf; 0 when it has none. */
int zero__dnnl_matmul_impl(const zero__mm_key_t *k, char *buf, size_t n);

/* Free every cached primitive. Only when no call is in flight (tests, before exit). */
void zero__dnnl_matmul_cache_clear(void);
#endif

#endif /* ZERO_KERNELS_DNNL_MATMUL_H */
