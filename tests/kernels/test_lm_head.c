/* test_lm_head.c — the LM head's backward fused with softmax + cross-entropy
 * (src/kernels/lm_head.c) against the unfused kernels it replaces (softmax_ce_forward_backward
 * into a (BT, V) dlogits, then the two backward GEMMs) and a naive double-precision reference.
 *
 * The forward is the unfused one, so the loss is bitwise. The gradients are bitwise within one
 * vocabulary chunk (V <= ZERO__LM_HEAD_CHUNK) and, over several (maxima in different chunks,
 * targets on chunk edges, ignored rows, a one-column last chunk), within a few float roundings;
 * both paths are within float rounding of the double reference, about equally close.
 * Run at every instruction-set level (CMake: ZERO_ISA).
 */
#include "check.h"
#include "kernels/kernels.h"
#include "krand.h"

#include <math.h>
#include <string.h>

typedef struct head_out {
    float *losses, *dinp, *dw;
} head_out_t;

static head_out_t out_alloc(size_t BT, size_t C, size_t V, const float *dw0) {
    head_out_t o = {xmalloc(BT * 4), xmalloc(BT * C * 4), xmalloc(V * C * 4)};
    memcpy(o.dw, dw0, V * C * 4); /* the weight gradient accumulates onto what it holds */
    return o;
}

static void out_free(head_out_t *o) {
    free(o->losses);
    free(o->dinp);
    free(o->dw);
}

/* max |a - b| / max |b| */
static double rel_diff(const float *a, const float *b, size_t n) {
    double d = 0.0, m = 0.0;
    for (size_t i = 0; i < n; i++) {
        d = fmax(d, fabs((double)a[i] - (double)b[i]));
        m = fmax(m, fabs((double)b[i]));
    }
    return m > 0.0 ? d / m : d;
}

/* max |a - ref| / max |ref| against a double reference */
static double rel_diff_d(const float *a, const double *ref, size_t n) {
    double d = 0.0, m = 0.0;
    for (size_t i = 0; i < n; i++) {
        d = fmax(d, fabs((double)a[i] - ref[i]));
        m = fmax(m, fabs(ref[i]));
    }
    return m > 0.0 ? d / m : d;
}

static void run_case(size_t BT, size_t C, size_t V, float scale, int threads) {
    float *x = xmalloc(BT * C * 4), *w = xmalloc(V * C * 4), *dw0 = xmalloc(V * C * 4);
    int32_t *tg = xmalloc(BT * 4);
    for (size_t i = 0; i < BT * C; i++) x[i] = scale * frand();
    for (size_t i = 0; i < V * C; i++) w[i] = frand();
    for (size_t i = 0; i < V * C; i++) dw0[i] = 0.01f * frand();
    /* targets on the chunk edges, the first and last word, and two ignored rows */
    const size_t K = ZERO__LM_HEAD_CHUNK;
    const int32_t edges[] = {
        0, (int32_t)(V - 1), (int32_t)(K - 1) % (int32_t)V, (int32_t)K % (int32_t)V, -1, -100};
    for (size_t i = 0; i < BT; i++)
        tg[i] = i < 6 ? edges[i] : (int32_t)((frand() * 0.5f + 0.5f) * (float)(V - 1));
    size_t counted = 0;
    for (size_t i = 0; i < BT; i++) counted += tg[i] >= 0;
    const float dloss = 1.0f / (float)counted;

    /* the forward the model runs (fp32): the head GEMM, then the loss and each row's lse */
    float *logits = xmalloc(BT * V * 4), *lse = xmalloc(BT * 4), *losses = xmalloc(BT * 4);
    zero__matmul_forward(logits, x, w, NULL, BT, C, V, threads);
    zero__softmax_ce_forward(losses, lse, logits, tg, BT, V, V, threads);

    /* fused backward */
    head_out_t f = out_alloc(BT, C, V, dw0);
    float *scr = xmalloc(zero__lm_head_scratch_count(BT, V) * 4);
    zero__lm_head_ce_backward(f.dinp, f.dw, scr, logits, lse, x, w, tg, dloss, BT, C, V, threads);

    /* unfused: the calls gpt.c made before, through a (BT, V) dlogits */
    head_out_t u = out_alloc(BT, C, V, dw0);
    float *dlog = xmalloc(BT * V * 4);
    zero__softmax_ce_forward_backward(u.losses, dlog, logits, tg, dloss, BT, V, V, threads);
    zero__sgemm(0, 0, BT, C, V, 1.0f, dlog, V, w, C, 0.0f, u.dinp, C, threads);
    zero__matmul_backward(NULL, u.dw, NULL, dlog, x, w, BT, C, V, threads);

    char nm[96];
    snprintf(nm, sizeof nm, "BT=%zu C=%zu V=%zu scale=%g thr=%d", BT, C, V, (double)scale, threads);
    /* the loss the model reports: bitwise the unfused pass's */
    CHECK(!memcmp(losses, u.losses, BT * 4), "%s: losses not bitwise", nm);
    if (V <= K) {
        CHECK(!memcmp(f.dinp, u.dinp, BT * C * 4), "%s: dinp not bitwise", nm);
        CHECK(!memcmp(f.dw, u.dw, V * C * 4), "%s: dweight not bitwise", nm);
    }
    /* Over several chunks: dinp summed chunk by chunk, dW's rows by GEMMs of the chunk's
     * height (the library may pick another kernel for a narrow one): within a few roundings of
     * a float dot product of V or BT terms (with peaked rows each path is ~1e-6 off the exact
     * value in its own direction; how close each is to the exact values is checked below). */
    double r;
    CHECK((r = rel_diff(f.dinp, u.dinp, BT * C)) <= 4e-6, "%s: dinp rel %.3g", nm, r);
    CHECK((r = rel_diff(f.dw, u.dw, V * C)) <= 4e-6, "%s: dweight rel %.3g", nm, r);

    /* naive double reference */
    double *lg = xmalloc(BT * V * 8), *dl = xmalloc(BT * V * 8), *rdx = xmalloc(BT * C * 8);
    double *rdw = xmalloc(V * C * 8), *rloss = xmalloc(BT * 8);
    for (size_t i = 0; i < BT; i++) {
        double mx = -INFINITY, s = 0.0;
        for (size_t v = 0; v < V; v++) {
            double a = 0.0;
            for (size_t c = 0; c < C; c++) a += (double)x[i * C + c] * w[v * C + c];
            lg[i * V + v] = a;
            mx = fmax(mx, a);
        }
        for (size_t v = 0; v < V; v++) s += exp(lg[i * V + v] - mx);
        const double l = mx + log(s), d = tg[i] < 0 ? 0.0 : dloss;
        rloss[i] = tg[i] < 0 ? 0.0 : l - lg[i * V + (size_t)tg[i]];
        for (size_t v = 0; v < V; v++)
            dl[i * V + v] = (exp(lg[i * V + v] - l) - (v == (size_t)tg[i])) * d;
    }
    for (size_t i = 0; i < BT; i++)
        for (size_t c = 0; c < C; c++) {
            double a = 0.0;
            for (size_t v = 0; v < V; v++) a += dl[i * V + v] * w[v * C + c];
            rdx[i * C + c] = a;
        }
    for (size_t v = 0; v < V; v++)
        for (size_t c = 0; c < C; c++) {
            double a = dw0[v * C + c];
            for (size_t i = 0; i < BT; i++) a += dl[i * V + v] * x[i * C + c];
            rdw[v * C + c] = a;
        }
    /* float GEMMs over K = C or V terms and a float sum of V exponentials: ~1e-6; and the
     * fused path about as close to the exact values as the unfused one (within 2x: another
     * order of the same sums) */
    const double rtol = 5e-6;
    double ru;
    CHECK((r = rel_diff_d(losses, rloss, BT)) <= rtol, "%s: losses vs double rel %.3g", nm, r);
    CHECK((r = rel_diff_d(f.dinp, rdx, BT * C)) <= rtol, "%s: dinp vs double rel %.3g", nm, r);
    CHECK((r = rel_diff_d(f.dw, rdw, V * C)) <= rtol, "%s: dweight vs double rel %.3g", nm, r);
    CHECK((r = rel_diff_d(f.dinp, rdx, BT * C)) <=
              2.0 * (ru = rel_diff_d(u.dinp, rdx, BT * C)) + 1e-7,
          "%s: dinp vs double rel %.3g, unfused %.3g", nm, r, ru);
    CHECK((r = rel_diff_d(f.dw, rdw, V * C)) <= 2.0 * (ru = rel_diff_d(u.dw, rdw, V * C)) + 1e-7,
          "%s: dweight vs double rel %.3g, unfused %.3g", nm, r, ru);

    free(lg);
    free(dl);
    free(rdx);
    free(rdw);
    free(rloss);
    out_free(&f);
    out_free(&u);
    free(logits);
    free(lse);
    free(losses);
    free(dlog);
    free(scr);
    free(x);
    free(w);
    free(dw0);
    free(tg);
}

int main(void) {
    const size_t K = ZERO__LM_HEAD_CHUNK;
    for (int thr = 1; thr <= 2; thr++) {
        run_case(7, 40, 300, 1.0f, thr);        /* one chunk: bitwise the unfused path */
        run_case(5, 24, K, 1.0f, thr);          /* exactly one chunk */
        run_case(9, 48, 2 * K + 37, 1.0f, thr); /* three chunks, the last one short */
        run_case(9, 48, 2 * K + 37, 8.0f, thr); /* peaked rows: maxima far apart */
        run_case(3, 16, K + 1, 4.0f, thr);      /* a last chunk of one column */
    }
    return check_report();
}
