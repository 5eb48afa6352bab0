/* matmul.c — linear layer forward/backward and a row-major SGEMM on the chosen library.
 *
 * The library is oneDNN (dnnl_sgemm), chosen by bench/bench_matmul.c (docs/kernels-matmul.md):
 * it is as fast as the alternatives on 1 thread, the steadiest on 2, and it reads its thread
 * count from the calling thread's OpenMP ICV (omp_get_max_threads), so every rank thread of one
 * process can run its own thread count. OpenBLAS's count is process-global
 * (openblas_set_num_threads) and would make ranks fight; it is only a build fallback.
 * One exception, by a fixed rule on (threads, M, N, K) (fwd_use_primitive): the linear forward
 * (NT) on 2 threads with 64 <= BT <= 512 runs on oneDNN's matmul primitive with the bias as an
 * input, which measured 3-20% faster there (bench_matmul_kernels --gemms, docs/kernels-matmul.md
 * section 6); every other GEMM and every 1-thread call stays on dnnl_sgemm. Never chosen by
 * run-time timing, so a call's result depends only on its arguments.
 * Not here: attention's small per-head GEMMs (attention.c calls zero__sgemm) and bf16.
 * Invariants: every dimension fits the library's 64-bit (dnnl) or int (cblas) index type.
 */
#include "dnnl_matmul.h"
#include "kernels.h"
#include "kernels_lp.h"
#include "kmath.h"

#include "core/core_internal.h"

#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#if defined(ZERO_HAVE_DNNL)
#include <dnnl.h>
#elif defined(ZERO_HAVE_CBLAS)
#include <cblas.h>
#endif

/* Make the calling thread's next library call use `threads` threads. Inside an OpenMP
 * parallel region (attention's per-head loop) the call must stay on the calling thread. */
int zero__matmul_set_threads(int threads) {
    ZERO_ASSERT(threads >= 1);
#if defined(_OPENMP)
    if (omp_in_parallel()) threads = 1;
    /* nthreads-var is a per-task ICV: this changes only the calling thread's later regions. */
    if (omp_get_max_threads() != threads) omp_set_num_threads(threads);
#endif
#if defined(ZERO_HAVE_CBLAS) && !defined(ZERO_HAVE_DNNL)
    openblas_set_num_threads(threads); /* process-global: see the file comment */
#endif
#if defined(_OPENMP)
    return threads;
#else
    return 1;
#endif
}

#if !defined(ZERO_HAVE_DNNL) && !defined(ZERO_HAVE_CBLAS)
/* Plain-loop fallback when no library was found at configure time. */
static void naive_sgemm(int ta, int tb, size_t M, size_t N, size_t K, float alpha, const float *A,
                        size_t lda, const float *B, size_t ldb, float beta, float *C, size_t ldc) {
    for (size_t i = 0; i < M; i++) {
        for (size_t j = 0; j < N; j++) {
            float acc = 0.0f;
            for (size_t p = 0; p < K; p++) {
                float a = ta ? A[p * lda + i] : A[i * lda + p];
                float b = tb ? B[j * ldb + p] : B[p * ldb + j];
                acc += a * b;
            }
            C[i * ldc + j] = alpha * acc + (beta == 0.0f ? 0.0f : beta * C[i * ldc + j]);
        }
    }
}
#endif

void zero__sgemm(int trans_a, int trans_b, size_t M, size_t N, size_t K, float alpha,
                 const float *A, size_t lda, const float *B, size_t ldb, float beta, float *C,
                 size_t ldc, int threads) {
    if (M == 0 || N == 0) return;
    if (K == 0) {
        /* Libraries differ on K == 0; BLAS semantics: C = beta * C. */
        for (size_t i = 0; i < M; i++)
            for (size_t j = 0; j < N; j++)
                C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
        return;
    }
    zero__matmul_set_threads(threads);
#if defined(ZERO_HAVE_DNNL)
    dnnl_status_t st = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', (dnnl_dim_t)M,
                                  (dnnl_dim_t)N, (dnnl_dim_t)K, alpha, A, (dnnl_dim_t)lda, B,
                                  (dnnl_dim_t)ldb, beta, C, (dnnl_dim_t)ldc);
    /* Only bad arguments (our bug) or an internal scratchpad allocation failure can fail here. */
    ZERO_ASSERT(st == dnnl_success);
#elif defined(ZERO_HAVE_CBLAS)
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, (int)M, (int)N, (int)K, alpha, A, (int)lda, B,
                (int)ldb, beta, C, (int)ldc);
#else
    naive_sgemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
#endif
}

#define ZERO_STR_(x) #x
#define ZERO_STR(x) ZERO_STR_(x)

const char *zero__matmul_library(void) {
#if defined(ZERO_HAVE_DNNL)
    /* the headers' version: Debian ships headers and library from one source package */
    return "oneDNN " ZERO_STR(DNNL_VERSION_MAJOR) "." ZERO_STR(DNNL_VERSION_MINOR) "." ZERO_STR(
        DNNL_VERSION_PATCH) " (dnnl_sgemm; 2-thread linear forward on the matmul primitive)";
#elif defined(ZERO_HAVE_CBLAS)
    return "OpenBLAS (cblas_sgemm)";
#else
    return "plain loops";
#endif
}

#if defined(ZERO_HAVE_DNNL)
/* ------------------------------------------------------------------ forward on the primitive */

/* The fixed dispatch rule, from bench_matmul_kernels --gemms (docs/kernels-matmul.md section 6).
 * On 2 threads, at the forward GEMMs of the 85M and 124M models (BT = 512 and 256), the
 * primitive with a bias input beat dnnl_sgemm with the bias pre-copy by 3-20% (the 4C->C
 * projection +13-20%, C->C +4-11%, C->3C +3-8%, C->4C and the heads even to +6%); the same held
 * for BT = 64 and 128. At BT = 1024 the two were even overall and at 2048 (and the 2048^3
 * square) dnnl_sgemm was 4-10% faster: hence the upper bound. On 1 thread, what ranks sharing
 * the cores use, the primitive was 0-7% slower; more threads were not measured (2-core
 * machine). Below ~2^25 multiply-adds a new shape's primitive creation (JIT) and each call's
 * memory objects are not worth it (and generation would churn the cache). */
static int fwd_use_primitive(size_t BT, size_t C, size_t OC, int threads) {
    return threads == 2 && BT >= 64 && BT <= 512 &&
           (double)BT * (double)C * (double)OC >= 33554432.0;
}

/* out(BT, OC) = inp(BT, C) · W(OC, C)ᵀ [+ bias] on a cached primitive (dnnl_matmul.c): the
 * weights described in their stored (OC, C) layout by strides (no reorder), out overwritten.
 * Returns 0 (nothing written) if oneDNN has no fast primitive for this shape. */
static int forward_primitive(float *out, const float *inp, const float *weight, const float *bias,
                             size_t BT, size_t C, size_t OC, int threads) {
    zero__mm_key_t k;
    memset(&k, 0, sizeof k);
    k.tb = 1;
    k.bias = bias != NULL;
    k.threads = threads;
    k.no_ref = 1;
    k.ab_dt = k.c_dt = dnnl_f32;
    k.M = BT;
    k.N = OC;
    k.K = C;
    k.lda = k.ldb = C;
    k.ldc = OC;
    return zero__dnnl_matmul(&k, inp, weight, out, bias);
}
#endif /* ZERO_HAVE_DNNL */

void zero__matmul_forward(float *out, const float *inp, const float *weight, const float *bias,
                          size_t BT, size_t C, size_t OC, int threads) {
    ZERO_ASSERT(out && inp && weight && threads >= 1);
#if defined(ZERO_HAVE_DNNL)
    if (BT > 0 && OC > 0 && C > 0) {
        int eff = zero__matmul_set_threads(threads); /* what the library will get */
        if (fwd_use_primitive(BT, C, OC, eff) &&
            forward_primitive(out, inp, weight, bias, BT, C, OC, eff))
            return;
    }
#endif
    float beta = 0.0f;
    if (bias) {
        /* Seed out with the bias and let the GEMM accumulate (beta = 1): the bias is then added
         * while each C tile is in cache instead of in a second pass over out. */
#pragma omp parallel for num_threads(threads) schedule(static)
        for (size_t i = 0; i < BT; i++) memcpy(out + i * OC, bias, OC * sizeof(float));
        beta = 1.0f;
    }
    /* out(BT, OC) = inp(BT, C) · weight(OC, C)ᵀ: NT. */
    zero__sgemm(0, 1, BT, OC, C, 1.0f, inp, C, weight, C, beta, out, OC, threads);
}

void zero__matmul_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                           const float *inp, const float *weight, size_t BT, size_t C, size_t OC,
                           int threads) {
    ZERO_ASSERT(dout && threads >= 1);
    if (dinp) {
        ZERO_ASSERT(weight);
        /* dinp(BT, C) += dout(BT, OC) · weight(OC, C): NN. */
        zero__sgemm(0, 0, BT, C, OC, 1.0f, dout, OC, weight, C, 1.0f, dinp, C, threads);
    }
    if (dweight) {
        ZERO_ASSERT(inp);
        /* dweight(OC, C) += dout(BT, OC)ᵀ · inp(BT, C): TN. */
        zero__sgemm(1, 0, OC, C, BT, 1.0f, dout, OC, inp, C, 1.0f, dweight, C, threads);
    }
    if (dbias) {
        /* Column sums: each thread owns a slice of columns and walks all rows, so the sum order
         * per column is fixed (rows 0..BT-1) whatever the thread count. Rows are read once per
         * slice; slices are contiguous in a row, so each row's cache lines are read by one
         * thread only. */
#pragma omp parallel num_threads(threads)
        {
            size_t j0, j1;
            kslice(OC, 16, &j0, &j1); /* 16 floats: one cache line */
            if (j1 > j0) {
                float acc[256];
                for (size_t jb = j0; jb < j1; jb += 256) {
                    size_t w = ZERO_MIN((size_t)256, j1 - jb);
                    for (size_t j = 0; j < w; j++) acc[j] = 0.0f;
                    for (size_t i = 0; i < BT; i++) {
                        const float *row = dout + i * OC + jb;
                        for (size_t j = 0; j < w; j++) acc[j] += row[j];
                    }
                    for (size_t j = 0; j < w; j++) dbias[jb + j] += acc[j];
                }
            }
        }
    }
}

/* One 2048^3 GEMM of the peak's dtype: fp32 on zero__sgemm, bf16 (fp32 out) on zero__gemm_lp. */
static void peak_call(zero_dtype_t dt, const void *a, const void *b, float *c, size_t n,
                      int threads) {
    if (dt == ZERO_DTYPE_FP32)
        zero__sgemm(0, 0, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n, threads);
    else
        zero__gemm_lp(0, 0, n, n, n, a, n, b, n, dt, 0, c, n, ZERO_DTYPE_FP32, threads);
}

double zero__matmul_peak_flops(zero_dtype_t dt, int threads) {
    ZERO_ASSERT(dt == ZERO_DTYPE_FP32 || dt == ZERO_DTYPE_BF16);
    const size_t n = 2048, es = zero_dtype_size(dt);
    void *a = zero_mem_alloc(NULL, ZERO_MEM_OTHER, n * n * es, 64);
    void *b = zero_mem_alloc(NULL, ZERO_MEM_OTHER, n * n * es, 64);
    float *c = zero_mem_alloc(NULL, ZERO_MEM_OTHER, n * n * sizeof(float), 64);
    double best = 0.0;
    if (a && b && c) {
        for (size_t i = 0; i < n; i++) { /* c's first rows as fp32 staging; exact in bf16 */
            for (size_t j = 0; j < n; j++) {
                c[j] = (float)((i * n + j) % 7) * 0.125f;
                c[n + j] = (float)((i * n + j) % 5) * 0.25f;
            }
            zero__narrow((char *)a + i * n * es, c, n, dt);
            zero__narrow((char *)b + i * n * es, c + n, n, dt);
        }
        peak_call(dt, a, b, c, n, threads); /* warm-up (and a bf16 primitive's creation) */
        /* Best of several calls: the peak is what the library can do, noise only slows it. At
         * least 5 and up to 0.5 s: on a shared machine one call in several runs undisturbed,
         * and two runs' figures agree the more calls each takes the best of. `zero plan
         * --calibrate`'s file or --peak give a figure that does not move at all. */
        double t_start = zero_time_now();
        for (int r = 0; r < 16; r++) {
            double t0 = zero_time_now();
            peak_call(dt, a, b, c, n, threads);
            double t1 = zero_time_now();
            double f = 2.0 * (double)n * (double)n * (double)n / (t1 - t0);
            if (f > best) best = f;
            if (r >= 4 && t1 - t_start > 0.5) break;
        }
    }
    zero_mem_free(a);
    zero_mem_free(b);
    zero_mem_free(c);
    return best;
}
