/* lp_io.h — shared plumbing of the 16-bit (bf16 / fp16) I/O kernels (private to src/kernels).
 *
 * What it is: per-thread scratch buffers, 16-bit <-> fp32 conversion of a span by dtype, and a
 * streaming driver that runs an fp32 span function over 16-bit arrays tile by tile. Every 16-bit
 * kernel widens its inputs into fp32 scratch, runs the same fp32 math as its kernels.h twin and
 * rounds each output once (to nearest even, zero_fp32_to_{bf16,fp16}_array).
 * What it is not: no kernel math lives here.
 * Invariants: scratch contents are not kept between calls; a slot is used by one kernel at a time
 * on a thread (kernels do not nest, except that they may call zero__sgemm, which uses none).
 */
#ifndef ZERO_KERNELS_LP_IO_H
#define ZERO_KERNELS_LP_IO_H

#include "zero/core.h"

#include <stddef.h>
#include <stdint.h>

/* Scratch slots: the matmul's (matmul_lp.c) and the other kernels' own. */
enum {
    ZERO__KS_MM_A,
    ZERO__KS_MM_B,
    ZERO__KS_MM_C,
    ZERO__KS_MM_BIAS,
    ZERO__KS_MM_DNNL,
    ZERO__KS_ROWS, /* row tiles of layernorm, softmax, embedding, attention */
    ZERO__KS_COUNT
};

/* A 64-byte aligned buffer of at least `bytes` owned by the calling thread for `slot`; freed
 * when the thread exits. Allocation failure trips ZERO_ASSERT (kernels cannot fail). */
void *zero__kscratch(int slot, size_t bytes);

/* fp32 span function: out(n) = f(a(n), b(n)) or out += ..., as the fp32 kernel it wraps. */
typedef void (*zero__span_fn)(float *out, const float *a, const float *b, size_t n);

/* Run fn over 16-bit arrays of dt in tiles: widen a (and b unless NULL; and out when
 * `accumulate`, for functions that add into out), call fn on the fp32 tile, round into out.
 * Elementwise only (fn must not look across elements). Threads split n in cache-line slices. */
void zero__stream_lp(void *out, int accumulate, const void *a, const void *b, zero_dtype_t dt,
                     size_t n, zero__span_fn fn, int threads);

#endif /* ZERO_KERNELS_LP_IO_H */
