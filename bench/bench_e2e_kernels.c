/* bench_e2e_kernels.c — where one GPT training step's time goes, kernel by kernel, at the
 * shapes of the end-to-end benchmarks (docs/benchmarks.md, "GPT training throughput").
 *
 * It replays the kernel calls of src/model/gpt.c for one transformer block (forward and
 * backward), the head + loss (fused, and the unfused calls beside) and the AdamW update on the
 * model's parameter count, times each (median of --reps calls after one warm-up, wall clock), and
 * prints a table with each call's share of the estimated step (block calls x layers). Not a test,
 * and not the model: the engine (fetch, grad norm, zeroing) is not included. Defaults: the 85M
 * benchmark (L=12, NH=12, C=768, V=256, B=4, T=128). Usage: bench_e2e_kernels [--threads t] [--B b]
 * [--T t] [--C c] [--NH h] [--V v] [--L l] [--reps r]
 */
#include "kernels/kernels.h"
#include "zero/core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int thr = 2, reps = 9;

static float *buf(size_t n) {
    float *p = zero_mem_alloc(NULL, ZERO_MEM_OTHER, (n ? n : 1) * sizeof(float), 64);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    for (size_t i = 0; i < n; i++) p[i] = (float)((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
    return p;
}

static void refill(float *p, size_t n, float scale) {
    for (size_t i = 0; i < n; i++)
        p[i] = ((float)((i * 2654435761u) % 1000) * 1e-3f - 0.5f) * scale;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct row {
    const char *label;
    double ms, mult, flops;
} row_t;
static row_t rows[64];
static int nrows;

#define TIME(lab, mul, fl, call)                                                                   \
    do {                                                                                           \
        double ts[64];                                                                             \
        call;                                                                                      \
        for (int r = 0; r < reps; r++) {                                                           \
            double t0 = zero_time_now();                                                           \
            call;                                                                                  \
            ts[r] = zero_time_now() - t0;                                                          \
        }                                                                                          \
        qsort(ts, (size_t)reps, sizeof(double), cmp_double);                                       \
        rows[nrows].label = lab;                                                                   \
        rows[nrows].ms = ts[reps / 2] * 1e3;                                                       \
        rows[nrows].mult = mul;                                                                    \
        rows[nrows].flops = fl;                                                                    \
        nrows++;                                                                                   \
    } while (0)

int main(int argc, char **argv) {
    size_t B = 4, T = 128, C = 768, NH = 12, V = 256, L = 12;
    for (int i = 1; i + 1 < argc; i += 2) {
        size_t v = (size_t)atol(argv[i + 1]);
        if (!strcmp(argv[i], "--threads"))
            thr = (int)v;
        else if (!strcmp(argv[i], "--B"))
            B = v;
        else if (!strcmp(argv[i], "--T"))
            T = v;
        else if (!strcmp(argv[i], "--C"))
            C = v;
        else if (!strcmp(argv[i], "--NH"))
            NH = v;
        else if (!strcmp(argv[i], "--V"))
            V = v;
        else if (!strcmp(argv[i], "--L"))
            L = v;
        else if (!strcmp(argv[i], "--reps"))
            reps = (int)v;
        else {
            fprintf(stderr, "unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (reps < 1 || reps > 64 || thr < 1 || C % NH) {
        fprintf(stderr, "bad arguments\n");
        return 2;
    }
    const size_t BT = B * T, n = BT * C;
    const double Ld = (double)L;
    float *x = buf(n), *y = buf(n), *dres = buf(n), *dc = buf(n), *lnw = buf(C), *lnb = buf(C);
    float *dlnw = buf(C), *dlnb = buf(C), *mean = buf(BT), *rstd = buf(BT);
    float *qkv = buf(3 * n), *att = buf(B * NH * T * T), *atty = buf(n);
    float *fch = buf(4 * n), *fchg = buf(4 * n), *d4a = buf(4 * n), *d4b = buf(4 * n);
    float *wqkv = buf(3 * C * C), *wproj = buf(C * C), *wfc = buf(4 * C * C), *wfp = buf(4 * C * C);
    float *gw = buf(4 * C * C), *bias = buf(4 * C), *gb = buf(4 * C);
    float *scratch = buf(zero__attention_scratch_count(T, thr));
    float *wte = buf(V * C), *dwte = buf(V * C), *wpe = buf(T * C), *dwpe = buf(T * C);
    float *logits = buf(BT * V), *losses = buf(BT), *lse = buf(BT), *dl = buf(BT);
    int32_t *tok = malloc(BT * sizeof(int32_t));
    for (size_t i = 0; i < BT; i++) tok[i] = (int32_t)((i * 7919) % V), dl[i] = 1.0f / (float)BT;
    const double lin = 2.0 * (double)BT * (double)C * (double)C; /* FLOPs of a C->C linear */
    const double attf = 4.0 * (double)(B * NH) * (double)(C / NH) * (double)T * (double)(T + 1) / 2;

    /* forward of one block, in gpt.c's order */
    TIME("ln1 forward", Ld, 0, zero__layernorm_forward(x, mean, rstd, y, lnw, lnb, BT, C, thr));
    TIME("qkv matmul fwd", Ld, 3 * lin,
         zero__matmul_forward(qkv, x, wqkv, bias, BT, C, 3 * C, thr));
    TIME("attention fwd", Ld, attf, zero__attention_forward(atty, att, qkv, B, T, C, NH, thr));
    TIME("attn proj matmul fwd", Ld, lin,
         zero__matmul_forward(y, atty, wproj, bias, BT, C, C, thr));
    TIME("residual fwd (x2)", 2 * Ld, 0, zero__residual_forward(y, x, dc, n, thr));
    TIME("ln2 forward", Ld, 0, zero__layernorm_forward(x, mean, rstd, y, lnw, lnb, BT, C, thr));
    TIME("fc matmul fwd", Ld, 4 * lin, zero__matmul_forward(fch, x, wfc, bias, BT, C, 4 * C, thr));
    TIME("gelu fwd", Ld, 0, zero__gelu_forward(fchg, fch, 4 * n, thr));
    TIME("fc proj matmul fwd", Ld, 4 * lin,
         zero__matmul_forward(y, fchg, wfp, bias, BT, 4 * C, C, thr));
    /* backward of one block */
    TIME("memsets (d4a,d4b,3xdc,d4a3)", Ld, 0, {
        memset(d4a, 0, 4 * n * sizeof(float));
        memset(d4b, 0, 4 * n * sizeof(float));
        memset(dc, 0, n * sizeof(float));
        memset(dc, 0, n * sizeof(float));
        memset(d4a, 0, 3 * n * sizeof(float));
        memset(dc, 0, n * sizeof(float));
    });
    TIME("fc proj matmul bwd", Ld, 8 * lin,
         zero__matmul_backward(d4a, gw, gb, dres, fchg, wfp, BT, 4 * C, C, thr));
    TIME("gelu bwd", Ld, 0, zero__gelu_backward(d4b, fch, d4a, 4 * n, thr));
    TIME("fc matmul bwd", Ld, 8 * lin,
         zero__matmul_backward(dc, gw, gb, d4b, x, wfc, BT, C, 4 * C, thr));
    TIME("ln2 backward", Ld, 0,
         zero__layernorm_backward(dres, dlnw, dlnb, dc, y, lnw, mean, rstd, BT, C, thr));
    TIME("attn proj matmul bwd", Ld, 2 * lin,
         zero__matmul_backward(dc, gw, gb, dres, atty, wproj, BT, C, C, thr));
    TIME("attention bwd", Ld, 2 * attf,
         zero__attention_backward(d4a, scratch, dc, qkv, att, B, T, C, NH, thr));
    TIME("qkv matmul bwd", Ld, 6 * lin,
         zero__matmul_backward(dc, gw, gb, d4a, x, wqkv, BT, C, 3 * C, thr));
    TIME("ln1 backward", Ld, 0,
         zero__layernorm_backward(dres, dlnw, dlnb, dc, y, lnw, mean, rstd, BT, C, thr));
    /* embeddings, head, loss */
    TIME("embedding fwd+bwd", 1, 0, {
        zero__embedding_forward(y, tok, wte, wpe, B, T, C, thr);
        zero__embedding_backward(dwte, dwpe, dres, tok, B, T, C, thr);
    });
    const double headf = 2.0 * (double)BT * (double)C * (double)V;
    /* Fresh inputs: the repeated in-place calls above leave subnormal values behind, which
     * slow the GEMM ~50x and would not be there in training. */
    refill(x, n, 1.0f);
    /* the head and the loss as gpt.c runs them in fp32: the head GEMM, the loss with each
     * row's lse, and the fused backward, chunked over the vocabulary */
    float *hscr = buf(zero__lm_head_scratch_count(BT, V)), *dlog = buf(BT * V);
    TIME("head matmul fwd", 1, headf, zero__matmul_forward(logits, x, wte, NULL, BT, C, V, thr));
    TIME("softmax_ce fwd", 1, 0, zero__softmax_ce_forward(losses, lse, logits, tok, BT, V, V, thr));
    TIME("head matmul + loss bwd (fused)", 1, 2 * headf,
         zero__lm_head_ce_backward(dc, dwte, hscr, logits, lse, x, wte, tok, dl[0], BT, C, V, thr));
    /* The unfused calls the fused backward replaced (matmul forward, softmax + cross-entropy
     * into a (BT, V) dlogits, the two backward GEMMs over it), timed aside: not in the total;
     * compare with the three rows above. */
    double head_unfused;
    {
        int r0 = nrows;
        TIME("head + loss unfused", 1, 3 * headf, {
            zero__matmul_forward(logits, x, wte, NULL, BT, C, V, thr);
            zero__softmax_ce_forward_backward(losses, dlog, logits, tok, dl[0], BT, V, V, thr);
            zero__sgemm(0, 0, BT, C, V, 1.0f, dlog, V, wte, C, 0.0f, dc, C, thr);
            zero__matmul_backward(NULL, dwte, NULL, dlog, x, wte, BT, C, V, thr);
        });
        head_unfused = rows[r0].ms;
        nrows = r0;
    }
    /* optimizer on every parameter, in chunks of the largest buffer we have */
    const size_t P = L * 12 * C * C + V * C + T * C;
    {
        size_t chunk = 4 * C * C;
        float *m = buf(chunk), *v = buf(chunk);
        for (size_t i = 0; i < chunk; i++) v[i] = v[i] * v[i];
        TIME("adamw (per 4C*C chunk)", (double)P / (double)chunk, 0,
             zero__adamw_update(gw, wfc, m, v, chunk, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 3, thr));
    }

    /* The engine's per-step passes over the gradient (src/zero/step.c and buckets.c, stage 0,
     * one rank): add the micro-step gradient into the accumulator, zero the work buffer, the
     * float64 sum of squares, the clip scale, zero the accumulator. As the engine does them
     * (one thread; the norm as one serial chain) and with vector.c's kernels. Not part of the
     * total above: the engine is not in it. */
    double eng_serial, eng_kernels;
    {
        float *acc = buf(P), *work = buf(P);
        double sink = 0;
        int r0 = nrows;
        TIME("engine passes, serial", 1, 0, {
            for (size_t i = 0; i < P; i++) acc[i] += work[i];
            memset(work, 0, P * sizeof(float));
            double ss = 0;
            for (size_t i = 0; i < P; i++) ss += (double)acc[i] * acc[i];
            sink += ss;
            for (size_t i = 0; i < P; i++) acc[i] *= 0.5f;
            memset(acc, 0, P * sizeof(float));
        });
        TIME("engine passes, vector.c", 1, 0, {
            zero__add_into(acc, work, P, thr);
            zero__zero(work, P, thr);
            sink += zero__sumsq(acc, P, thr);
            zero__scale(acc, 0.5f, P, thr);
            zero__zero(acc, P, thr);
        });
        eng_serial = rows[r0].ms;
        eng_kernels = rows[r0 + 1].ms;
        nrows = r0;
        if (sink < 0) printf("(sink %g)\n", sink);
    }

    double total = 0, mm = 0, mmf = 0;
    for (int i = 0; i < nrows; i++) {
        total += rows[i].ms * rows[i].mult;
        if (rows[i].flops > 0 && strstr(rows[i].label, "matmul")) {
            mm += rows[i].ms * rows[i].mult;
            mmf += rows[i].flops * rows[i].mult;
        }
    }
    printf("step budget: B=%zu T=%zu C=%zu NH=%zu V=%zu L=%zu, %d threads, median of %d\n", B, T, C,
           NH, V, L, thr, reps);
    printf(
        "| call | ms per call | x | ms per step | share | GFLOP/s |\n|---|---|---|---|---|---|\n");
    for (int i = 0; i < nrows; i++) {
        double s = rows[i].ms * rows[i].mult;
        printf("| %s | %.3f | %g | %.1f | %.1f%% |", rows[i].label, rows[i].ms, rows[i].mult, s,
               100.0 * s / total);
        if (rows[i].flops > 0)
            printf(" %.0f |\n", rows[i].flops / rows[i].ms * 1e-6);
        else
            printf(" |\n");
    }
    printf("total %.1f ms; matmuls %.1f ms (%.1f%%) at %.0f GFLOP/s; other %.1f ms\n", total, mm,
           100.0 * mm / total, mmf / mm * 1e-6, total - mm);
    printf("head + loss unfused (not in the total; the fused rows replace it): %.1f ms at %.0f "
           "GFLOP/s\n",
           head_unfused, 3 * headf / head_unfused * 1e-6);
    printf("engine passes over %zu gradient elements (not in the total): %.1f ms as in "
           "src/zero (one thread), %.1f ms with vector.c's kernels\n",
           P, eng_serial, eng_kernels);
    printf("matmul peak (2048^3): %.0f GFLOP/s on %d threads\n",
           zero__matmul_peak_flops(ZERO_DTYPE_FP32, thr) * 1e-9, thr);
    return 0;
}
