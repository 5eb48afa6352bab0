/* matmul_lp.c — bf16 / fp16 linear layer and GEMM with fp32 accumulation.
 *
 * Two paths, chosen per dtype at build time by what exists (docs/mixed-precision.md):
 * - bf16 on oneDNN's dnnl_matmul primitive. On this CPU oneDNN 2.6.3 runs it on AMX-BF16
 *   (brg:avx512_core_amx_bf16), elsewhere on AVX512-BF16 or its own emulation. Accumulation
 *   (+=) is a sum post-op, so a 16-bit destination is rounded once. The primitives are cached
 *   in dnnl_matmul.c, shared with the fp32 linear forward.
 * - fp16 (oneDNN 2.6 has no f16 matmul on CPU: primitive creation returns "unimplemented"), and
 *   bf16 when oneDNN is missing: widen both operands to fp32 (exact) into per-thread scratch and
 *   call zero__sgemm; a 16-bit destination goes through an fp32 scratch tile and is rounded once.
 * Invariants: per-thread scratch only grows and is freed when its thread exits (lp_io.c).
 * Allocation failure of scratch is fatal (ZERO_ASSERT): these kernels return void like every
 * kernel in kernels.h.
 */
#include "kernels_lp.h"

#include "core/core_internal.h"
#include "dnnl_matmul.h"
#include "kernels.h"
#include "kmath.h"
#include "lp_io.h"

#include <pthread.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* ------------------------------------------------------------------------------ helpers */

/* dst(rows, cols; ld dld) <- src(rows, cols; ld sld), 16-bit -> fp32. */
static void widen_rows(float *dst, size_t dld, const uint16_t *src, size_t sld, size_t rows,
                       size_t cols, zero_dtype_t dt, int threads) {
#pragma omp parallel for num_threads(threads) schedule(static) if (rows * cols >= 65536)
    for (size_t i = 0; i < rows; i++) zero__widen(dst + i * dld, src + i * sld, cols, dt);
}

static void narrow_rows(uint16_t *dst, size_t dld, const float *src, size_t sld, size_t rows,
                        size_t cols, zero_dtype_t dt, int threads) {
#pragma omp parallel for num_threads(threads) schedule(static) if (rows * cols >= 65536)
    for (size_t i = 0; i < rows; i++) zero__narrow(dst + i * dld, src + i * sld, cols, dt);
}

static int is16(zero_dtype_t dt) { return dt == ZERO_DTYPE_BF16 || dt == ZERO_DTYPE_FP16; }

/* ------------------------------------------------------------------------------ widening path */

/* C = op(A) op(B) (+ C) (+ bias row) through fp32 copies of the operands and zero__sgemm. */
static void gemm_widen(int ta, int tb, size_t M, size_t N, size_t K, const uint16_t *A, size_t lda,
                       const uint16_t *B, size_t ldb, zero_dtype_t dt, int acc, void *C, size_t ldc,
                       zero_dtype_t cdt, const uint16_t *bias, int threads) {
    size_t ar = ta ? K : M, ac = ta ? M : K; /* stored shape of A */
    size_t br = tb ? N : K, bc = tb ? K : N;
    float *a = zero__kscratch(ZERO__KS_MM_A, ar * ac * sizeof(float));
    float *b = zero__kscratch(ZERO__KS_MM_B, br * bc * sizeof(float));
    widen_rows(a, ac, A, lda, ar, ac, dt, threads);
    widen_rows(b, bc, B, ldb, br, bc, dt, threads);
    float *c;
    size_t cld;
    if (cdt == ZERO_DTYPE_FP32) {
        c = C;
        cld = ldc;
    } else {
        c = zero__kscratch(ZERO__KS_MM_C, M * N * sizeof(float));
        cld = N;
        if (acc) widen_rows(c, cld, C, ldc, M, N, cdt, threads);
    }
    float beta = acc ? 1.0f : 0.0f;
    if (bias) {
        float *fb = zero__kscratch(ZERO__KS_MM_BIAS, N * sizeof(float));
        zero__widen(fb, bias, N, dt);
        /* Seed (or add to) C with the bias and let the GEMM accumulate: one pass over C. */
#pragma omp parallel for num_threads(threads) schedule(static) if (M * N >= 65536)
        for (size_t i = 0; i < M; i++) {
            float *row = c + i * cld;
            if (acc)
                for (size_t j = 0; j < N; j++) row[j] += fb[j];
            else
                memcpy(row, fb, N * sizeof(float));
        }
        beta = 1.0f;
    }
    zero__sgemm(ta, tb, M, N, K, 1.0f, a, ac, b, bc, beta, c, cld, threads);
    if (cdt != ZERO_DTYPE_FP32) narrow_rows(C, ldc, c, cld, M, N, cdt, threads);
}

/* ------------------------------------------------------------------------------ oneDNN path */

#if defined(ZERO_HAVE_DNNL)
static dnnl_data_type_t dnnl_dt(zero_dtype_t dt) {
    return dt == ZERO_DTYPE_FP32 ? dnnl_f32 : dnnl_bf16;
}

/* The bf16 GEMM as a oneDNN matmul (dnnl_matmul.c caches the primitive). */
static void bf16_key(zero__mm_key_t *k, int ta, int tb, size_t M, size_t N, size_t K, size_t lda,
                     size_t ldb, int acc, size_t ldc, zero_dtype_t cdt, int bias, int threads) {
    memset(k, 0, sizeof *k);
    k->ta = ta != 0;
    k->tb = tb != 0;
    k->acc = acc != 0;
    k->bias = bias;
    k->threads = threads;
    k->ab_dt = dnnl_bf16;
    k->c_dt = dnnl_dt(cdt);
    k->M = M;
    k->N = N;
    k->K = K;
    k->lda = lda;
    k->ldb = ldb;
    k->ldc = ldc;
}

/* Returns 0 if oneDNN could not take this GEMM (the caller falls back to widening). */
static int gemm_dnnl(int ta, int tb, size_t M, size_t N, size_t K, const void *A, size_t lda,
                     const void *B, size_t ldb, int acc, void *C, size_t ldc, zero_dtype_t cdt,
                     const void *bias, int threads) {
    /* oneDNN 2.6.3's AMX bf16 matmul returns wrong sums (or dies of SIGILL in a worker thread
     * whose tile configuration was skipped) for K = 63 with two threads and M >= 37, every
     * transpose combination (found by an exhaustive scan of M, K <= 70; oneDNN issue #1661 shows
     * the same K = 63 crash). No even K failed, so odd K takes the exact widening path: the model
     * only meets one when B x T or the width is odd. */
    if (K % 2) return 0;
    zero__mm_key_t k;
    bf16_key(&k, ta, tb, M, N, K, lda, ldb, acc, ldc, cdt, bias != NULL, threads);
    return zero__dnnl_matmul(&k, A, B, C, bias);
}
#endif /* ZERO_HAVE_DNNL */

void zero__matmul_lp_cache_clear(void) {
#if defined(ZERO_HAVE_DNNL)
    zero__dnnl_matmul_cache_clear();
#endif
}

const char *zero__matmul_lp_impl(zero_dtype_t dtype) {
    ZERO_ASSERT(is16(dtype));
#if defined(ZERO_HAVE_DNNL)
    if (dtype == ZERO_DTYPE_BF16) {
        /* Build (and cache) a small NT primitive and report what oneDNN chose for it. */
        zero__mm_key_t k;
#if defined(_OPENMP)
        int threads = omp_get_max_threads();
#else
        int threads = 1;
#endif
        bf16_key(&k, 0, 1, 64, 64, 64, 64, 64, 0, 64, ZERO_DTYPE_FP32, 0, threads);
        char impl[64];
        if (zero__dnnl_matmul_impl(&k, impl, sizeof impl)) {
            static char name[96];
            static pthread_mutex_t name_lock = PTHREAD_MUTEX_INITIALIZER;
            pthread_mutex_lock(&name_lock);
            snprintf(name, sizeof name, "oneDNN matmul (%s)", impl);
            pthread_mutex_unlock(&name_lock);
            return name;
        }
    }
#endif
    return "fp32 widening + zero__sgemm";
}

const char *zero__matmul_lp_path(zero_dtype_t dtype) {
    const char *impl = zero__matmul_lp_impl(dtype);
    /* oneDNN names its kernels by ISA: brg:avx512_core_amx..., brg:avx512_core_bf16, ... */
    if (strncmp(impl, "oneDNN", 6)) return "widening";
    if (strstr(impl, "amx")) return "AMX";
    if (strstr(impl, "bf16")) return "AVX512-BF16";
    return "oneDNN";
}

/* ------------------------------------------------------------------------------ public */

void zero__gemm_lp(int trans_a, int trans_b, size_t M, size_t N, size_t K, const void *A,
                   size_t lda, const void *B, size_t ldb, zero_dtype_t ab_dtype, int accumulate,
                   void *C, size_t ldc, zero_dtype_t c_dtype, int threads) {
    ZERO_ASSERT(is16(ab_dtype) && (c_dtype == ZERO_DTYPE_FP32 || c_dtype == ab_dtype));
    ZERO_ASSERT(threads >= 1);
    if (M == 0 || N == 0) return;
    ZERO_ASSERT(C != NULL && (K == 0 || (A != NULL && B != NULL)));
    if (K == 0) { /* C = 0 or unchanged, as BLAS with beta = accumulate */
        if (!accumulate)
            for (size_t i = 0; i < M; i++)
                memset((char *)C + i * ldc * zero_dtype_size(c_dtype), 0,
                       N * zero_dtype_size(c_dtype));
        return;
    }
    zero__matmul_set_threads(threads);
#if defined(ZERO_HAVE_DNNL)
    if (ab_dtype == ZERO_DTYPE_BF16 && gemm_dnnl(trans_a, trans_b, M, N, K, A, lda, B, ldb,
                                                 accumulate, C, ldc, c_dtype, NULL, threads))
        return;
#endif
    gemm_widen(trans_a, trans_b, M, N, K, A, lda, B, ldb, ab_dtype, accumulate, C, ldc, c_dtype,
               NULL, threads);
}

void zero__matmul_forward_lp(void *out, zero_dtype_t out_dtype, const void *inp, const void *weight,
                             const void *bias, zero_dtype_t dtype, size_t BT, size_t C, size_t OC,
                             int threads) {
    ZERO_ASSERT(out && inp && weight && threads >= 1);
    ZERO_ASSERT(is16(dtype) && (out_dtype == ZERO_DTYPE_FP32 || out_dtype == dtype));
    if (BT == 0 || OC == 0) return;
    if (C == 0) { /* out = bias (or 0), as the fp32 kernel */
        zero__gemm_lp(0, 1, BT, OC, 0, inp, C, weight, C, dtype, 0, out, OC, out_dtype, threads);
        if (!bias) return;
        float *fb = zero__kscratch(ZERO__KS_MM_BIAS, OC * sizeof(float));
        zero__widen(fb, bias, OC, dtype);
        for (size_t i = 0; i < BT; i++) {
            if (out_dtype == ZERO_DTYPE_FP32)
                memcpy((float *)out + i * OC, fb, OC * sizeof(float));
            else
                memcpy((uint16_t *)out + i * OC, bias, OC * sizeof(uint16_t));
        }
        return;
    }
    zero__matmul_set_threads(threads);
    /* out(BT, OC) = inp(BT, C) · weight(OC, C)ᵀ + bias: NT, bias fused. */
#if defined(ZERO_HAVE_DNNL)
    if (dtype == ZERO_DTYPE_BF16 &&
        gemm_dnnl(0, 1, BT, OC, C, inp, C, weight, C, 0, out, OC, out_dtype, bias, threads))
        return;
#endif
    gemm_widen(0, 1, BT, OC, C, inp, C, weight, C, dtype, 0, out, OC, out_dtype, bias, threads);
}

/* dbias(OC) += column sums of dout(BT, OC), in fp32, rows in order: each thread owns a slice of
 * columns, so the order per column does not depend on the thread count (as matmul.c). */
static void bias_backward(void *dbias, zero_dtype_t dbdt, const uint16_t *dout, zero_dtype_t dt,
                          size_t BT, size_t OC, int threads) {
#pragma omp parallel num_threads(threads)
    {
        size_t j0, j1;
        kslice(OC, 32, &j0, &j1); /* 32 16-bit values: one cache line */
        float acc[256], tmp[256];
        for (size_t jb = j0; jb < j1; jb += 256) {
            size_t w = ZERO_MIN((size_t)256, j1 - jb);
            for (size_t j = 0; j < w; j++) acc[j] = 0.0f;
            for (size_t i = 0; i < BT; i++) {
                zero__widen(tmp, dout + i * OC + jb, w, dt);
                for (size_t j = 0; j < w; j++) acc[j] += tmp[j];
            }
            if (dbdt == ZERO_DTYPE_FP32) {
                float *db = (float *)dbias + jb;
                for (size_t j = 0; j < w; j++) db[j] += acc[j];
            } else {
                uint16_t *db = (uint16_t *)dbias + jb;
                zero__widen(tmp, db, w, dbdt);
                for (size_t j = 0; j < w; j++) tmp[j] += acc[j];
                zero__narrow(db, tmp, w, dbdt);
            }
        }
    }
}

void zero__matmul_backward_lp(void *dinp, zero_dtype_t dinp_dtype, void *dweight, void *dbias,
                              zero_dtype_t dw_dtype, const void *dout, const void *inp,
                              const void *weight, zero_dtype_t dtype, size_t BT, size_t C,
                              size_t OC, int threads) {
    ZERO_ASSERT(dout && threads >= 1 && is16(dtype));
    if (dinp) {
        ZERO_ASSERT(weight && (dinp_dtype == ZERO_DTYPE_FP32 || dinp_dtype == dtype));
        /* dinp(BT, C) += dout(BT, OC) · weight(OC, C): NN. */
        zero__gemm_lp(0, 0, BT, C, OC, dout, OC, weight, C, dtype, 1, dinp, C, dinp_dtype, threads);
    }
    if (dweight || dbias) ZERO_ASSERT(dw_dtype == ZERO_DTYPE_FP32 || dw_dtype == dtype);
    if (dweight) {
        ZERO_ASSERT(inp);
        /* dweight(OC, C) += dout(BT, OC)ᵀ · inp(BT, C): TN. */
        zero__gemm_lp(1, 0, OC, C, BT, dout, OC, inp, C, dtype, 1, dweight, C, dw_dtype, threads);
    }
    if (dbias && OC > 0) bias_backward(dbias, dw_dtype, dout, dtype, BT, OC, threads);
}
