/* bench_matmul_kernels.c — time of the non-matmul kernels at GPT-2 small shapes, next to the
 * matmuls of one transformer block, to see what share of a step they take.
 *
 * Shapes: B=1, T=1024, C=768, NH=12, V=50257 (Vp=50304). Each kernel: one warm-up call, then
 * the median of 7 calls (wall time, and process CPU time, which is less sensitive to other
 * processes on a shared machine). Bandwidth = the bytes the kernel must move at least (each input
 * read once, each output written once; += outputs read and written). Not a test. Usage:
 * bench_matmul_kernels [--threads t] [--T T]
 */
#include "kernels/kernels.h"
#include "zero/core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

static size_t B = 1, T = 1024, C = 768, NH = 12, V = 50257, Vp = 50304;
static int thr = 1;

static float *buf(size_t n) {
    float *p = zero_mem_alloc(NULL, ZERO_MEM_OTHER, n * sizeof(float), 64);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    for (size_t i = 0; i < n; i++) p[i] = (float)((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
    return p;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Process CPU seconds (all threads): on a shared machine, CPU time per call divided by the
 * threads used is a load-insensitive estimate next to the wall time. */
static double cpu_now(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + (double)ru.ru_stime.tv_sec +
           ru.ru_stime.tv_usec * 1e-6;
}

#define TIME(label, bytes, flops, call)                                                            \
    do {                                                                                           \
        double ts[7], cs[7];                                                                       \
        call;                                                                                      \
        for (int r = 0; r < 7; r++) {                                                              \
            double c0 = cpu_now(), t0 = zero_time_now();                                           \
            call;                                                                                  \
            ts[r] = zero_time_now() - t0;                                                          \
            cs[r] = cpu_now() - c0;                                                                \
        }                                                                                          \
        qsort(ts, 7, sizeof(double), cmp_double);                                                  \
        qsort(cs, 7, sizeof(double), cmp_double);                                                  \
        printf("| %-30s | %d | %8.3f | %8.3f | %7.1f | %7.1f |\n", label, thr, ts[3] * 1e3,        \
               cs[3] * 1e3, (double)(bytes) / ts[3] * 1e-9, (double)(flops) / ts[3] * 1e-9);       \
        fflush(stdout);                                                                            \
    } while (0)

int main(int argc, char **argv) {
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--threads") == 0)
            thr = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--T") == 0)
            T = (size_t)atol(argv[i + 1]);
    }
    size_t BT = B * T, n = BT * C;
    float *x = buf(n), *y = buf(n), *dy = buf(n), *dx = buf(n), *w = buf(C), *b = buf(C);
    float *dw = buf(C), *db = buf(C), *mean = buf(BT), *rstd = buf(BT);
    float *h = buf(4 * n), *dh = buf(4 * n), *gh = buf(4 * n);
    float *qkv = buf(3 * n), *dqkv = buf(3 * n), *att = buf(B * NH * T * T);
    float *scratch = buf(zero__attention_scratch_count(T, thr));
    float *wte = buf(V * C), *wpe = buf(T * C), *dwte = buf(V * C), *dwpe = buf(T * C);
    float *logits = buf(BT * Vp), *losses = buf(BT), *lse = buf(BT), *dl = buf(BT);
    float *p = buf(n * 4), *g = buf(n * 4), *m = buf(n * 4), *v = buf(n * 4);
    int32_t *tok = malloc(BT * sizeof(int32_t));
    for (size_t i = 0; i < BT; i++) tok[i] = (int32_t)((i * 7919) % V), dl[i] = 1.0f / BT;
    for (size_t i = 0; i < n * 4; i++) v[i] = v[i] * v[i];
    double hs = (double)(C / NH), att_flops = 4.0 * B * NH * hs * T * (T + 1) / 2.0;
    double wlin = 12.0 * C * C, lin_flops = 2.0 * BT * wlin; /* qkv + proj + fc + fcproj */
    printf("| kernel (B=%zu T=%zu C=%zu) | thr | wall ms | CPU ms | GB/s | GFLOP/s |\n"
           "|---|---|---|---|---|---|\n",
           B, T, C);
    float *W = buf((size_t)wlin), *o4 = buf(4 * n);
    TIME("block matmuls fwd (4 linears)", 0, lin_flops, {
        zero__matmul_forward(qkv, x, W, NULL, BT, C, 3 * C, thr);
        zero__matmul_forward(y, x, W, NULL, BT, C, C, thr);
        zero__matmul_forward(o4, x, W, NULL, BT, C, 4 * C, thr);
        zero__matmul_forward(y, o4, W, NULL, BT, 4 * C, C, thr);
    });
    TIME("layernorm_forward", 4.0 * (2 * n + 2 * BT), 0,
         zero__layernorm_forward(y, mean, rstd, x, w, b, BT, C, thr));
    TIME("layernorm_backward", 4.0 * (4 * n + 2 * BT), 0,
         zero__layernorm_backward(dx, dw, db, dy, x, w, mean, rstd, BT, C, thr));
    TIME("gelu_forward (4C)", 4.0 * 8 * n, 0, zero__gelu_forward(gh, h, 4 * n, thr));
    TIME("gelu_backward (4C)", 4.0 * 16 * n, 0, zero__gelu_backward(dh, h, gh, 4 * n, thr));
    TIME("residual_forward", 4.0 * 3 * n, 0, zero__residual_forward(y, x, dy, n, thr));
    TIME("residual_backward", 4.0 * 5 * n, 0, zero__residual_backward(dx, y, dy, n, thr));
    TIME("attention_forward", 4.0 * (3 * n + n + B * NH * T * T / 2), att_flops,
         zero__attention_forward(y, att, qkv, B, T, C, NH, thr));
    TIME("attention_backward", 4.0 * (3 * n * 3 + n + B * NH * T * T / 2), 2 * att_flops,
         zero__attention_backward(dqkv, scratch, dy, qkv, att, B, T, C, NH, thr));
    TIME("embedding_forward", 4.0 * 3 * n, 0,
         zero__embedding_forward(y, tok, wte, wpe, B, T, C, thr));
    TIME("embedding_backward", 4.0 * 5 * n, 0,
         zero__embedding_backward(dwte, dwpe, dy, tok, B, T, C, thr));
    TIME("softmax_ce_forward", 4.0 * BT * V, 0,
         zero__softmax_ce_forward(losses, lse, logits, tok, BT, V, Vp, thr));
    TIME("softmax_ce_backward (in place)", 4.0 * 2 * BT * V, 0,
         zero__softmax_ce_backward(logits, logits, lse, dl, tok, BT, V, Vp, thr));
    TIME("softmax_ce_forward_backward", 4.0 * 2 * BT * V, 0,
         zero__softmax_ce_forward_backward(losses, logits, logits, tok, 1.0f / BT, BT, V, Vp, thr));
    TIME("adamw_update (4 BTC params)", 4.0 * 7 * 4 * n, 0,
         zero__adamw_update(p, g, m, v, 4 * n, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 3, thr));
    printf("matmul library: %s\n", zero__matmul_library());
    return 0;
}
