/* bench_sgemm_order.c — can a GEMM of our own keep dnnl_sgemm's bits, and how fast is a plain one?
 *
 * The weights fingerprints are promises: a faster GEMM may replace the library only if it gives
 * the same bits. dnnl_sgemm (oneDNN 2.6, AVX-512, 2 threads) was found to compute every element
 * of C = A·B (+ C) as fmaf chains over K in blocks of 384, each block's chain started from 0 and
 * added to C in block order (beta 1: C's old value plus the first block's chain). This program
 * checks that on the GPT-2 124M step's backward GEMMs (NN: dX = dY·W; TN: dW += dYᵀ·X) with a
 * plain kernel that computes in exactly that order — 8 x 48 register tiles, one FMA chain per
 * element over each block, B packed per block in 48-column panels, A packed per block for TN,
 * columns split between the threads — and times both, interleaved, best of --reps rounds of 10
 * calls. It prints, per shape, both rates, their ratio and whether the results are bitwise equal.
 * The kernel needs AVX-512 (else: "n/a") and dimensions that are multiples of 8 (M), 96 (N) and
 * it keeps K whole; it is a measurement, not a library path.
 *
 * Usage: bench_sgemm_order [--reps R]
 */
#include "kernels/kernels.h"
#include "zero/core.h"

#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define KB 384 /* dnnl_sgemm's K block */
#define MR 8
#define NR 48

/* C(8 x 48) = (add ? C : 0) + A(8 x kc, rows lda apart) · Bp(kc x 48, packed), one chain per
 * element in k order. */
__attribute__((target("avx512f"))) static void
tile_avx512(size_t kc, const float *A, size_t lda, const float *Bp, float *C, size_t ldc, int add) {
#define DECL(r)                                                                                    \
    __m512 c##r##0 = _mm512_setzero_ps(), c##r##1 = _mm512_setzero_ps(),                           \
           c##r##2 = _mm512_setzero_ps();                                                          \
    const float *a##r = A + (r)*lda
    DECL(0);
    DECL(1);
    DECL(2);
    DECL(3);
    DECL(4);
    DECL(5);
    DECL(6);
    DECL(7);
    for (size_t k = 0; k < kc; k++, Bp += NR) {
        const __m512 b0 = _mm512_load_ps(Bp), b1 = _mm512_load_ps(Bp + 16),
                     b2 = _mm512_load_ps(Bp + 32);
#define ROW(r)                                                                                     \
    do {                                                                                           \
        const __m512 a = _mm512_set1_ps(a##r[k]);                                                  \
        c##r##0 = _mm512_fmadd_ps(a, b0, c##r##0);                                                 \
        c##r##1 = _mm512_fmadd_ps(a, b1, c##r##1);                                                 \
        c##r##2 = _mm512_fmadd_ps(a, b2, c##r##2);                                                 \
    } while (0)
        ROW(0);
        ROW(1);
        ROW(2);
        ROW(3);
        ROW(4);
        ROW(5);
        ROW(6);
        ROW(7);
    }
#define STORE(r)                                                                                   \
    do {                                                                                           \
        float *c = C + (r)*ldc;                                                                    \
        if (add) {                                                                                 \
            c##r##0 = _mm512_add_ps(_mm512_loadu_ps(c), c##r##0);                                  \
            c##r##1 = _mm512_add_ps(_mm512_loadu_ps(c + 16), c##r##1);                             \
            c##r##2 = _mm512_add_ps(_mm512_loadu_ps(c + 32), c##r##2);                             \
        }                                                                                          \
        _mm512_storeu_ps(c, c##r##0);                                                              \
        _mm512_storeu_ps(c + 16, c##r##1);                                                         \
        _mm512_storeu_ps(c + 32, c##r##2);                                                         \
    } while (0)
    STORE(0);
    STORE(1);
    STORE(2);
    STORE(3);
    STORE(4);
    STORE(5);
    STORE(6);
    STORE(7);
#undef DECL
#undef ROW
#undef STORE
}

typedef struct {
    const char *name;
    int ta; /* A stored (K, M) */
    size_t M, N, K;
    float beta;
} shape_t;

/* C = op(A)·B + beta C in dnnl_sgemm's order, on 2 threads (column halves). pack: per thread,
 * KB x N/2 floats of B panels and M x KB of A. */
static void plain_gemm(const shape_t *s, const float *A, const float *B, float *C, float **pack) {
    const size_t M = s->M, N = s->N, K = s->K, lda = s->ta ? M : K;
#pragma omp parallel num_threads(2)
    {
        const int t = omp_get_thread_num();
        const size_t np = N / NR, p0 = t ? np / 2 : 0, p1 = t ? np : np / 2;
        float *bp = pack[t], *ap = pack[t] + KB * (np - np / 2) * NR;
        for (size_t k0 = 0; k0 < K; k0 += KB) {
            const size_t kc = K - k0 < KB ? K - k0 : KB;
            for (size_t p = p0; p < p1; p++)
                for (size_t k = 0; k < kc; k++)
                    memcpy(bp + ((p - p0) * KB + k) * NR, B + (k0 + k) * N + p * NR,
                           NR * sizeof(float));
            const float *a = A + k0;
            size_t ald = lda;
            if (s->ta) { /* A(i, k) = A[k][i]: this block as rows of kc */
                for (size_t i = 0; i < M; i++)
                    for (size_t k = 0; k < kc; k++) ap[i * kc + k] = A[(k0 + k) * lda + i];
                a = ap;
                ald = kc;
            }
            const int add = k0 > 0 || s->beta != 0.0f;
            for (size_t p = p0; p < p1; p++)
                for (size_t i = 0; i < M; i += MR)
                    tile_avx512(kc, a + i * ald, ald, bp + (p - p0) * KB * NR, C + i * N + p * NR,
                                N, add);
        }
    }
}

static void *xalloc(size_t bytes) {
    void *p = zero_mem_alloc(NULL, ZERO_MEM_OTHER, bytes, 64);
    if (!p) {
        fprintf(stderr, "bench_sgemm_order: out of memory (%zu bytes)\n", bytes);
        exit(1);
    }
    return p;
}

int main(int argc, char **argv) {
    int reps = 15;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--reps") && i + 1 < argc && atoi(argv[i + 1]) > 0) {
            reps = atoi(argv[++i]);
        } else {
            fprintf(stderr, "usage: bench_sgemm_order [--reps R]\n");
            return 2;
        }
    }
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512f")) {
        printf("bench_sgemm_order: n/a (no AVX-512)\n");
        return 0;
    }
    const shape_t shapes[] = {
        {"qkv dX NN", 0, 256, 768, 2304, 0.0f}, {"attproj dX NN", 0, 256, 768, 768, 0.0f},
        {"fc dX NN", 0, 256, 768, 3072, 0.0f},  {"fcproj dX NN", 0, 256, 3072, 768, 0.0f},
        {"qkv dW TN", 1, 2304, 768, 256, 1.0f}, {"attproj dW TN", 1, 768, 768, 256, 1.0f},
        {"fc dW TN", 1, 3072, 768, 256, 1.0f},  {"fcproj dW TN", 1, 768, 3072, 256, 1.0f},
    };
    printf("# bench_sgemm_order: dnnl_sgemm against a plain kernel in its order, 2 threads, best "
           "of %d rounds of 10 calls\n",
           reps);
    printf("| GEMM | M N K | beta | dnnl_sgemm GFLOP/s | plain GFLOP/s | plain / sgemm | "
           "bitwise |\n|---|---|---|---|---|---|---|\n");
    float *pack[2] = {xalloc((size_t)KB * 4096 * 4 + 4096 * KB * 4),
                      xalloc((size_t)KB * 4096 * 4 + 4096 * KB * 4)};
    int all_same = 1;
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        const shape_t *sh = &shapes[s];
        const size_t M = sh->M, N = sh->N, K = sh->K;
        float *A = xalloc(M * K * 4), *B = xalloc(K * N * 4), *C0 = xalloc(M * N * 4),
              *C1 = xalloc(M * N * 4), *C2 = xalloc(M * N * 4);
        uint64_t x = 88172645463325252ull; /* xorshift: values in [-0.5, 0.5) */
        float *fill[] = {A, B, C0};
        size_t count[] = {M * K, K * N, M * N};
        for (int f = 0; f < 3; f++)
            for (size_t i = 0; i < count[f]; i++) {
                x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                fill[f][i] = (float)(x >> 40) / (float)(1 << 24) - 0.5f;
            }
        memcpy(C1, C0, M * N * 4);
        memcpy(C2, C0, M * N * 4);
        const size_t lda = sh->ta ? M : K;
        zero__sgemm(sh->ta, 0, M, N, K, 1.0f, A, lda, B, N, sh->beta, C1, N, 2);
        plain_gemm(sh, A, B, C2, pack);
        const int same = !memcmp(C1, C2, M * N * 4);
        all_same &= same;
        double best[2] = {1e30, 1e30};
        for (int r = 0; r < reps; r++)
            for (int m = 0; m < 2; m++) {
                const double t0 = zero_time_now();
                for (int k = 0; k < 10; k++) {
                    if (m)
                        plain_gemm(sh, A, B, C2, pack);
                    else
                        zero__sgemm(sh->ta, 0, M, N, K, 1.0f, A, lda, B, N, sh->beta, C1, N, 2);
                }
                const double dt = (zero_time_now() - t0) / 10;
                if (dt < best[m]) best[m] = dt;
            }
        const double fl = 2.0 * (double)M * (double)N * (double)K;
        printf("| %s | %zu %zu %zu | %g | %.1f | %.1f | %.3f | %s |\n", sh->name, M, N, K,
               (double)sh->beta, fl / best[0] * 1e-9, fl / best[1] * 1e-9, best[0] / best[1],
               same ? "yes" : "NO");
        zero_mem_free(A);
        zero_mem_free(B);
        zero_mem_free(C0);
        zero_mem_free(C1);
        zero_mem_free(C2);
    }
    zero_mem_free(pack[0]);
    zero_mem_free(pack[1]);
    printf("bitwise on every shape: %s\n", all_same ? "yes" : "NO");
    return 0;
}
