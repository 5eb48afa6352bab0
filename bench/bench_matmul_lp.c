/* bench_matmul_lp.c — 16-bit matmul (src/kernels/matmul_lp.c) against the fp32 GEMM.
 *
 * Modes per GEMM: fp32 (zero__sgemm = dnnl_sgemm), bf16 with fp32 output, bf16 with bf16 output
 * (oneDNN matmul primitive, cached), fp16 with fp32 output (widening to fp32 + sgemm: oneDNN 2.6
 * has no f16 matmul). Shapes: GPT-2 small layers at M = B*T = 1024 tokens, weight stored
 * [out, in]: forward Y = X·Wᵀ (NT), backward-data dX += dY·W (NN), backward-weight
 * dW += dYᵀ·X (TN); backward ones accumulate (beta 1), as the kernels do.
 * Method: one warm-up call (creates and caches the primitive), then `reps` repetitions of
 * back-to-back calls for >= time/reps seconds each; GFLOP/s = 2mnk / call time; the median and
 * the best repetition are printed. The 16-bit operands are converted once, outside the timing.
 * The machine is shared: compare columns within one run, and rerun when in doubt.
 *
 * Usage: bench_matmul_lp [--threads t] [--time seconds] [--tokens M]
 */
#include "kernels/kernels.h"
#include "kernels/kernels_lp.h"
#include "zero/core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *name;
    int ta, tb;
    size_t m, n, k;
    int acc;
} shape_t;

enum { MODE_F32, MODE_BF16_F32, MODE_BF16_BF16, MODE_FP16_F32, MODE_COUNT };
static const char *const mode_names[] = {"fp32 sgemm", "bf16->f32", "bf16->bf16", "fp16->f32"};
_Static_assert(sizeof mode_names / sizeof mode_names[0] == MODE_COUNT, "mode name table");

static void *xmalloc(size_t bytes) {
    void *p = zero_mem_alloc(NULL, ZERO_MEM_OTHER, bytes, 64);
    if (!p) {
        fprintf(stderr, "bench_matmul_lp: out of memory (%zu bytes)\n", bytes);
        exit(1);
    }
    return p;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct {
    float *a32, *b32, *c32;
    uint16_t *a16, *b16, *af16, *bf16_, *c16;
} bufs_t;

static void run_once(int mode, const shape_t *s, bufs_t *b, int threads) {
    size_t lda = s->ta ? s->m : s->k, ldb = s->tb ? s->k : s->n, ldc = s->n;
    switch (mode) {
    case MODE_F32:
        zero__sgemm(s->ta, s->tb, s->m, s->n, s->k, 1.0f, b->a32, lda, b->b32, ldb,
                    s->acc ? 1.0f : 0.0f, b->c32, ldc, threads);
        break;
    case MODE_BF16_F32:
        zero__gemm_lp(s->ta, s->tb, s->m, s->n, s->k, b->a16, lda, b->b16, ldb, ZERO_DTYPE_BF16,
                      s->acc, b->c32, ldc, ZERO_DTYPE_FP32, threads);
        break;
    case MODE_BF16_BF16:
        zero__gemm_lp(s->ta, s->tb, s->m, s->n, s->k, b->a16, lda, b->b16, ldb, ZERO_DTYPE_BF16,
                      s->acc, b->c16, ldc, ZERO_DTYPE_BF16, threads);
        break;
    case MODE_FP16_F32:
        zero__gemm_lp(s->ta, s->tb, s->m, s->n, s->k, b->af16, lda, b->bf16_, ldb, ZERO_DTYPE_FP16,
                      s->acc, b->c32, ldc, ZERO_DTYPE_FP32, threads);
        break;
    }
}

int main(int argc, char **argv) {
    int threads = 1;
    double seconds = 0.3;
    size_t M = 1024;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (strcmp(argv[i], "--time") == 0 && i + 1 < argc)
            seconds = atof(argv[++i]);
        else if (strcmp(argv[i], "--tokens") == 0 && i + 1 < argc)
            M = (size_t)atol(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--threads t] [--time seconds] [--tokens M]\n", argv[0]);
            return 2;
        }
    }
    if (threads < 1 || seconds <= 0 || M == 0) {
        fprintf(stderr, "bench_matmul_lp: bad --threads, --time or --tokens\n");
        return 2;
    }
    const shape_t shapes[] = {
        {"qkv 768->2304 fwd NT", 0, 1, M, 2304, 768, 0},
        {"qkv 768->2304 bwdX NN", 0, 0, M, 768, 2304, 1},
        {"qkv 768->2304 bwdW TN", 1, 0, 2304, 768, M, 1},
        {"attproj 768->768 fwd NT", 0, 1, M, 768, 768, 0},
        {"attproj 768->768 bwdX NN", 0, 0, M, 768, 768, 1},
        {"attproj 768->768 bwdW TN", 1, 0, 768, 768, M, 1},
        {"fc 768->3072 fwd NT", 0, 1, M, 3072, 768, 0},
        {"fc 768->3072 bwdX NN", 0, 0, M, 768, 3072, 1},
        {"fc 768->3072 bwdW TN", 1, 0, 3072, 768, M, 1},
        {"proj 3072->768 fwd NT", 0, 1, M, 768, 3072, 0},
        {"proj 3072->768 bwdX NN", 0, 0, M, 3072, 768, 1},
        {"proj 3072->768 bwdW TN", 1, 0, 768, 3072, M, 1},
    };
    const size_t nshapes = sizeof shapes / sizeof shapes[0];
    size_t max_el = 0;
    for (size_t i = 0; i < nshapes; i++) {
        const shape_t *s = &shapes[i];
        size_t e[3] = {s->m * s->k, s->k * s->n, s->m * s->n};
        for (int j = 0; j < 3; j++)
            if (e[j] > max_el) max_el = e[j];
    }
    bufs_t b = {xmalloc(max_el * 4), xmalloc(max_el * 4), xmalloc(max_el * 4), xmalloc(max_el * 2),
                xmalloc(max_el * 2), xmalloc(max_el * 2), xmalloc(max_el * 2), xmalloc(max_el * 2)};
    for (size_t i = 0; i < max_el; i++) {
        b.a32[i] = (float)((i * 7) % 17) * 0.0625f - 0.5f;
        b.b32[i] = (float)((i * 3) % 19) * 0.03125f - 0.25f;
        b.c32[i] = 0.0f;
    }
    zero_fp32_to_bf16_array(b.a16, b.a32, max_el);
    zero_fp32_to_bf16_array(b.b16, b.b32, max_el);
    zero_fp32_to_fp16_array(b.af16, b.a32, max_el);
    zero_fp32_to_fp16_array(b.bf16_, b.b32, max_el);
    memset(b.c16, 0, max_el * 2);

    printf("# bench_matmul_lp: threads %d, tokens %zu, %.2f s per cell\n", threads, M, seconds);
    printf("# fp32: %s\n# bf16: %s\n# fp16: %s\n", zero__matmul_library(),
           zero__matmul_lp_impl(ZERO_DTYPE_BF16), zero__matmul_lp_impl(ZERO_DTYPE_FP16));
    printf("# GFLOP/s median (best) of 7 repetitions\n");
    printf("| case (m,n,k) | thr |");
    for (int mo = 0; mo < MODE_COUNT; mo++) printf(" %s |", mode_names[mo]);
    printf(" bf16->f32 / fp32 |\n|---|---|");
    for (int mo = 0; mo <= MODE_COUNT; mo++) printf("---|");
    printf("\n");
    enum { REPS = 7 };
    for (size_t si = 0; si < nshapes; si++) {
        const shape_t *s = &shapes[si];
        double flop = 2.0 * (double)s->m * (double)s->n * (double)s->k;
        double med[MODE_COUNT];
        printf("| %s (%zu,%zu,%zu) | %d |", s->name, s->m, s->n, s->k, threads);
        for (int mo = 0; mo < MODE_COUNT; mo++) {
            run_once(mo, s, &b, threads); /* warm-up: primitive creation, scratch growth */
            double g[REPS];
            for (int r = 0; r < REPS; r++) {
                int calls = 0;
                double t0 = zero_time_now(), t1;
                do {
                    run_once(mo, s, &b, threads);
                    calls++;
                    t1 = zero_time_now();
                } while (t1 - t0 < seconds / REPS);
                g[r] = flop * calls / (t1 - t0) * 1e-9;
            }
            qsort(g, REPS, sizeof g[0], cmp_double);
            med[mo] = g[REPS / 2];
            printf(" %.0f (%.0f) |", g[REPS / 2], g[REPS - 1]);
            fflush(stdout);
        }
        printf(" %.2fx |\n", med[MODE_BF16_F32] / med[MODE_F32]);
    }
    zero_mem_free(b.a32);
    zero_mem_free(b.b32);
    zero_mem_free(b.c32);
    zero_mem_free(b.a16);
    zero_mem_free(b.b16);
    zero_mem_free(b.af16);
    zero_mem_free(b.bf16_);
    zero_mem_free(b.c16);
    return 0;
}
