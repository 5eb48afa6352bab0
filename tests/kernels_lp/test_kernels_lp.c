/* test_kernels_lp.c — the 16-bit I/O kernels (kernels_lp.h: layernorm, GELU, residual,
 * attention, embedding, softmax + cross-entropy) against the fp32 kernels on widened inputs.
 *
 * Oracle: every 16-bit input is widened to fp32 (exact) and the fp32 kernel of kernels.h (itself
 * tested against naive references in tests/kernels) runs on it; an accumulating output starts
 * from its widened 16-bit value. The 16-bit kernel promises one rounding of that fp32 result, so:
 * - elementwise kernels (GELU forward/backward, residual) run the very same fp32 code per
 *   element: output == round(fp32 result), bitwise;
 * - row kernels (layernorm, attention, softmax) compute the same formula on a copy of the row
 *   whose alignment and leading dimension differ, so the fp32 result may differ in its last bits
 *   (vectorised sums in another order): output within 1 ulp of the 16-bit format of
 *   round(fp32 result), or within an absolute 1e-5 of the tensor's largest value where a sum
 *   cancels (there the fp32 rounding noise is no longer small against the value);
 * - embedding backward is checked against a naive double sum (the kernel sums a token's rows in
 *   fp32 and rounds once: within 1 ulp + the fp32 sum's error).
 * Also: results are bitwise independent of the thread count (1 vs 3). Odd shapes throughout.
 * Regression: zero__gemm_lp with K = 63 on two threads (oneDNN 2.6.3's AMX bf16 kernel summed
 * wrongly or died of SIGILL there; matmul_lp.c routes odd K around it) against a double sum,
 * within the fp32 accumulation bound K 2^-24 sum|a b|.
 */
#include "kernels/kernels.h"
#include "kernels/kernels_lp.h"
#include "zero/core.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "check.h"

#define LP_TEST_SEED 0x9e3779b97f4a7c15ull
#include "lp_test_util.h"

/* A 16-bit tensor and its exact fp32 widening. */
typedef struct {
    uint16_t *h;
    float *f;
    size_t n;
} t16_t;

static t16_t t16(size_t n, float scale, zero_dtype_t dt) {
    t16_t t = {malloc((n + 1) * 2), malloc((n + 1) * 4), n};
    if (!t.h || !t.f) exit(2);
    for (size_t i = 0; i < n; i++) {
        t.h[i] = to16(frand() * scale, dt);
        t.f[i] = from16(t.h[i], dt);
    }
    return t;
}
static t16_t t16_copy(const t16_t *s) {
    t16_t t = {malloc((s->n + 1) * 2), malloc((s->n + 1) * 4), s->n};
    if (!t.h || !t.f) exit(2);
    memcpy(t.h, s->h, s->n * 2);
    memcpy(t.f, s->f, s->n * 4);
    return t;
}
static void t16_free(t16_t *t) {
    free(t->h);
    free(t->f);
}

/* Order 16-bit patterns on a line so that neighbours differ by 1 (across zero too). */
static long ordered(uint16_t h) { return (h & 0x8000) ? -(long)(h & 0x7fff) : (long)h; }

static double worst_ulp;

/* got (n, 16-bit) against round(ref (n, fp32)): max_ulp ulps, or |diff| <= atol_rel * max|ref|. */
static void cmp(const char *what, const uint16_t *got, const float *ref, size_t n, zero_dtype_t dt,
                int max_ulp, double atol_rel) {
    double mx = 0;
    for (size_t i = 0; i < n; i++) mx = fmax(mx, fabs(ref[i]));
    size_t bad = 0, exact = 0, first = n;
    for (size_t i = 0; i < n; i++) {
        uint16_t e = to16(ref[i], dt);
        long d = labs(ordered(got[i]) - ordered(e));
        exact += d == 0;
        if (d > worst_ulp && d <= 1000) worst_ulp = (double)d;
        int ok = d <= max_ulp || fabs((double)from16(got[i], dt) - ref[i]) <= atol_rel * mx;
        if (!ok && bad++ == 0) first = i;
    }
    CHECK(bad == 0, "%s %s: %zu of %zu outside %d ulp (first at %zu: got %g, expected %g)", what,
          zero_dtype_name(dt), bad, n, max_ulp, first, first < n ? from16(got[first], dt) : 0.0,
          first < n ? ref[first] : 0.0);
    if (max_ulp > 0)
        CHECK(exact * 10 >= n * 9, "%s %s: only %zu of %zu exact (expected most)", what,
              zero_dtype_name(dt), exact, n);
}

static void same_bits(const char *what, const uint16_t *a, const uint16_t *b, size_t n,
                      zero_dtype_t dt) {
    CHECK(memcmp(a, b, n * 2) == 0, "%s %s: 1 and 3 threads differ", what, zero_dtype_name(dt));
}

/* ------------------------------------------------------------------------------ elementwise */

static void test_elementwise(zero_dtype_t dt, size_t n) {
    t16_t x = t16(n, 4.0f, dt), y = t16(n, 1.0f, dt), acc = t16(n, 1.0f, dt);
    float *ref = malloc(n * 4);
    uint16_t *o = malloc(n * 2), *o1 = malloc(n * 2);

    zero__gelu_forward(ref, x.f, n, 2);
    zero__gelu_forward_lp(o, x.h, dt, n, 2);
    cmp("gelu forward", o, ref, n, dt, 0, 0);
    zero__gelu_forward_lp(o1, x.h, dt, n, 1);
    same_bits("gelu forward", o, o1, n, dt);

    memcpy(ref, acc.f, n * 4);
    memcpy(o, acc.h, n * 2);
    zero__gelu_backward(ref, x.f, y.f, n, 2);
    zero__gelu_backward_lp(o, x.h, y.h, dt, n, 3);
    cmp("gelu backward (+=)", o, ref, n, dt, 0, 0);

    zero__residual_forward(ref, x.f, y.f, n, 2);
    zero__residual_forward_lp(o, x.h, y.h, dt, n, 2);
    cmp("residual forward", o, ref, n, dt, 0, 0);
    memcpy(o1, x.h, n * 2); /* out aliasing a */
    zero__residual_forward_lp(o1, o1, y.h, dt, n, 2);
    CHECK(memcmp(o, o1, n * 2) == 0, "residual forward in place %s", zero_dtype_name(dt));

    free(ref);
    free(o);
    free(o1);
    t16_free(&x);
    t16_free(&y);
    t16_free(&acc);
}

/* ------------------------------------------------------------------------------ layernorm */

static void test_layernorm(zero_dtype_t dt, size_t BT, size_t C) {
    t16_t x = t16(BT * C, 2.0f, dt), w = t16(C, 1.0f, dt), b = t16(C, 0.5f, dt);
    for (size_t i = 0; i < BT * C; i++) { /* rows with a mean: the two-pass variance matters */
        x.h[i] = to16(x.f[i] + (float)(i / C % 5), dt);
        x.f[i] = from16(x.h[i], dt);
    }
    float *ref = malloc(BT * C * 4), *m = malloc(BT * 4), *r = malloc(BT * 4);
    float *m16 = malloc(BT * 4), *r16 = malloc(BT * 4);
    uint16_t *o = malloc(BT * C * 2), *o1 = malloc(BT * C * 2);
    zero__layernorm_forward(ref, m, r, x.f, w.f, b.f, BT, C, 2);
    zero__layernorm_forward_lp(o, m16, r16, x.h, w.h, b.h, dt, BT, C, 2);
    cmp("layernorm forward", o, ref, BT * C, dt, 1, 1e-5);
    double dm = 0;
    for (size_t i = 0; i < BT; i++)
        dm = fmax(
            dm, fmax(fabs(m[i] - m16[i]) / (fabs(m[i]) + 1e-3), fabs(r[i] - r16[i]) / fabs(r[i])));
    CHECK(dm < 1e-5, "layernorm mean/rstd %s: relative difference %g (expected < 1e-5)",
          zero_dtype_name(dt), dm);
    zero__layernorm_forward_lp(o1, m16, r16, x.h, w.h, b.h, dt, BT, C, 1);
    same_bits("layernorm forward", o, o1, BT * C, dt);

    /* backward, accumulating into random dinp, dweight, dbias */
    t16_t dy = t16(BT * C, 1.0f, dt), dx = t16(BT * C, 1.0f, dt);
    t16_t dw = t16(C, 1.0f, dt), db = t16(C, 1.0f, dt);
    t16_t dx2 = t16_copy(&dx), dw2 = t16_copy(&dw), db2 = t16_copy(&db);
    zero__layernorm_backward(dx.f, dw.f, db.f, dy.f, x.f, w.f, m, r, BT, C, 2);
    zero__layernorm_backward_lp(dx.h, dw.h, db.h, dy.h, x.h, w.h, m, r, dt, BT, C, 2);
    cmp("layernorm backward dinp", dx.h, dx.f, BT * C, dt, 1, 1e-5);
    cmp("layernorm backward dweight", dw.h, dw.f, C, dt, 1, 1e-5);
    cmp("layernorm backward dbias", db.h, db.f, C, dt, 1, 1e-5);
    zero__layernorm_backward_lp(dx2.h, dw2.h, db2.h, dy.h, x.h, w.h, m, r, dt, BT, C, 1);
    same_bits("layernorm backward dinp", dx.h, dx2.h, BT * C, dt);
    /* dweight/dbias sum over threads' row blocks: only the thread count's order may differ */
    cmp("layernorm backward dweight (1 thread)", dw2.h, dw.f, C, dt, 1, 1e-5);

    free(ref);
    free(m);
    free(r);
    free(m16);
    free(r16);
    free(o);
    free(o1);
    t16_t *all[] = {&x, &w, &b, &dy, &dx, &dw, &db, &dx2, &dw2, &db2};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) t16_free(all[i]);
}

/* ------------------------------------------------------------------------------ attention */

static void test_attention(zero_dtype_t dt, size_t B, size_t T, size_t C, size_t NH) {
    const size_t n3 = B * T * 3 * C, n = B * T * C, na = B * NH * T * T;
    t16_t qkv = t16(n3, 1.5f, dt), dout = t16(n, 1.0f, dt), din = t16(n3, 0.5f, dt);
    t16_t din2 = t16_copy(&din);
    float *ref = malloc(n * 4), *att = calloc(na, 4), *att16 = calloc(na, 4);
    float *scr = malloc(zero__attention_scratch_count(T, 3) * 4);
    float *scr16 = malloc(zero__attention_scratch_count_lp(T, C / NH, 3) * 4);
    uint16_t *o = malloc(n * 2), *o1 = malloc(n * 2);
    zero__attention_forward(ref, att, qkv.f, B, T, C, NH, 2);
    zero__attention_forward_lp(o, att16, qkv.h, scr16, dt, B, T, C, NH, 3);
    cmp("attention forward", o, ref, n, dt, 1, 1e-5);
    double da = 0;
    for (size_t bh = 0; bh < B * NH; bh++)
        for (size_t t = 0; t < T; t++)
            for (size_t s = 0; s <= t; s++) {
                size_t i = (bh * T + t) * T + s;
                da = fmax(da, fabs(att[i] - att16[i]));
            }
    CHECK(da < 1e-6, "attention probabilities %s differ by %g (expected < 1e-6)",
          zero_dtype_name(dt), da);
    zero__attention_forward_lp(o1, att16, qkv.h, scr16, dt, B, T, C, NH, 1);
    same_bits("attention forward", o, o1, n, dt);

    zero__attention_backward(din.f, scr, dout.f, qkv.f, att, B, T, C, NH, 2);
    zero__attention_backward_lp(din.h, scr16, dout.h, qkv.h, att16, dt, B, T, C, NH, 3);
    cmp("attention backward (+=)", din.h, din.f, n3, dt, 1, 1e-5);
    zero__attention_backward_lp(din2.h, scr16, dout.h, qkv.h, att16, dt, B, T, C, NH, 1);
    same_bits("attention backward", din.h, din2.h, n3, dt);

    free(ref);
    free(att);
    free(att16);
    free(scr);
    free(scr16);
    free(o);
    free(o1);
    t16_free(&qkv);
    t16_free(&dout);
    t16_free(&din);
    t16_free(&din2);
}

/* ------------------------------------------------------------------------------ embedding */

static void test_embedding(zero_dtype_t dt, size_t B, size_t T, size_t C, size_t V) {
    const size_t BT = B * T;
    int32_t *tok = malloc(BT * sizeof *tok);
    for (size_t i = 0; i < BT; i++) /* skewed: token 1 occurs often, some never */
        tok[i] = (i % 3 == 0) ? 1 : (int32_t)((frand() * 0.5f + 0.5f) * (float)(V - 1));
    t16_t wte = t16(V * C, 1.0f, dt), wpe = t16(T * C, 1.0f, dt);
    float *ref = malloc(BT * C * 4);
    uint16_t *o = malloc(BT * C * 2), *o1 = malloc(BT * C * 2);
    zero__embedding_forward(ref, tok, wte.f, wpe.f, B, T, C, 2);
    zero__embedding_forward_lp(o, tok, wte.h, wpe.h, dt, B, T, C, 2);
    cmp("embedding forward", o, ref, BT * C, dt, 0, 0);
    zero__embedding_forward_lp(o1, tok, wte.h, wpe.h, dt, B, T, C, 1);
    same_bits("embedding forward", o, o1, BT * C, dt);

    /* backward against a naive double sum: old + sum of the token's (position's) rows */
    t16_t dout = t16(BT * C, 0.1f, dt), dwte = t16(V * C, 1.0f, dt), dwpe = t16(T * C, 1.0f, dt);
    t16_t dwte2 = t16_copy(&dwte), dwpe2 = t16_copy(&dwpe);
    double *sw = calloc(V * C, sizeof(double)), *sp = calloc(T * C, sizeof(double));
    for (size_t i = 0; i < BT; i++)
        for (size_t j = 0; j < C; j++) {
            sw[(size_t)tok[i] * C + j] += dout.f[i * C + j];
            sp[(i % T) * C + j] += dout.f[i * C + j];
        }
    float *ew = malloc(V * C * 4), *ep = malloc(T * C * 4);
    for (size_t i = 0; i < V * C; i++) ew[i] = (float)((double)dwte.f[i] + sw[i]);
    for (size_t i = 0; i < T * C; i++) ep[i] = (float)((double)dwpe.f[i] + sp[i]);
    zero__embedding_backward_lp(dwte.h, dwpe.h, dout.h, tok, dt, B, T, C, V, 2);
    cmp("embedding backward dwte", dwte.h, ew, V * C, dt, 1, 1e-6);
    cmp("embedding backward dwpe", dwpe.h, ep, T * C, dt, 1, 1e-6);
    zero__embedding_backward_lp(dwte2.h, dwpe2.h, dout.h, tok, dt, B, T, C, V, 1);
    same_bits("embedding backward dwte", dwte.h, dwte2.h, V * C, dt);
    same_bits("embedding backward dwpe", dwpe.h, dwpe2.h, T * C, dt);

    free(tok);
    free(ref);
    free(o);
    free(o1);
    free(sw);
    free(sp);
    free(ew);
    free(ep);
    t16_t *all[] = {&wte, &wpe, &dout, &dwte, &dwpe, &dwte2, &dwpe2};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) t16_free(all[i]);
}

/* ------------------------------------------------------------------------------ softmax + CE */

static void test_softmax_ce(zero_dtype_t dt, size_t BT, size_t V, size_t Vp, float scale) {
    float *logits = malloc(BT * Vp * 4), *loss = malloc(BT * 4), *loss16 = malloc(BT * 4);
    float *dref = malloc(BT * Vp * 4);
    int32_t *tg = malloc(BT * sizeof *tg);
    for (size_t i = 0; i < BT * Vp; i++) logits[i] = frand() * 6.0f;
    for (size_t i = 0; i < BT; i++) tg[i] = i % 7 == 3 ? -1 : (int32_t)((i * 37) % V);
    uint16_t *d = malloc(BT * Vp * 2), *d1 = malloc(BT * Vp * 2);
    float dloss = scale / (float)BT;
    zero__softmax_ce_forward_backward(loss, dref, logits, tg, dloss, BT, V, Vp, 2);
    zero__softmax_ce_forward_backward_lp(loss16, d, dt, logits, tg, dloss, BT, V, Vp, 2);
    CHECK(memcmp(loss, loss16, BT * 4) == 0, "softmax_ce losses %s differ from fp32",
          zero_dtype_name(dt));
    cmp("softmax_ce dlogits", d, dref, BT * Vp, dt, 1, 1e-5);
    zero__softmax_ce_forward_backward_lp(loss16, d1, dt, logits, tg, dloss, BT, V, Vp, 1);
    same_bits("softmax_ce dlogits", d, d1, BT * Vp, dt);
    free(logits);
    free(loss);
    free(loss16);
    free(dref);
    free(tg);
    free(d);
    free(d1);
}

/* ------------------------------------------------------------------------------ gemm odd K */

static void test_gemm_odd_k(zero_dtype_t dt, size_t M, size_t N, size_t K) {
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            t16_t a = t16(M * K, 1.0f, dt), b = t16(K * N, 1.0f, dt);
            float *c = malloc(M * N * 4);
            size_t lda = ta ? M : K, ldb = tb ? K : N;
            zero__gemm_lp(ta, tb, M, N, K, a.h, lda, b.h, ldb, dt, 0, c, N, ZERO_DTYPE_FP32, 2);
            size_t bad = 0;
            for (size_t m = 0; m < M; m++)
                for (size_t n = 0; n < N; n++) {
                    double s = 0, sa = 0;
                    for (size_t k = 0; k < K; k++) {
                        double x = ta ? a.f[k * lda + m] : a.f[m * lda + k];
                        double y = tb ? b.f[n * ldb + k] : b.f[k * ldb + n];
                        s += x * y;
                        sa += fabs(x * y);
                    }
                    bad += fabs(c[m * N + n] - s) > (double)K * ldexp(1.0, -24) * sa + 1e-30;
                }
            CHECK(bad == 0, "gemm_lp %s ta %d tb %d (%zu, %zu, %zu): %zu of %zu wrong",
                  zero_dtype_name(dt), ta, tb, M, N, K, bad, M * N);
            free(c);
            t16_free(&a);
            t16_free(&b);
        }
}

int main(void) {
    const zero_dtype_t dts[2] = {ZERO_DTYPE_BF16, ZERO_DTYPE_FP16};
    for (int k = 0; k < 2; k++) {
        zero_dtype_t dt = dts[k];
        test_elementwise(dt, 100003); /* above the threading threshold, odd length */
        test_elementwise(dt, 37);
        test_layernorm(dt, 67, 193);
        test_layernorm(dt, 5, 768);
        test_attention(dt, 2, 131, 48, 3); /* T crosses a 128-row block */
        test_attention(dt, 1, 7, 20, 5);
        test_attention(dt, 2, 150, 128, 2); /* hs = 64: the full vector tiles */
        test_embedding(dt, 3, 45, 67, 29);
        test_embedding(dt, 2, 300, 96, 256);
        test_softmax_ce(dt, 33, 257, 261, 1.0f);
        test_softmax_ce(dt, 5, 50, 50, 1024.0f); /* an fp16 loss scale */
        test_gemm_odd_k(dt, 49, 64, 63);
        test_gemm_odd_k(dt, 37, 32, 63);
    }
    printf("largest ulp difference seen (row kernels): %g\n", worst_ulp);
    return check_report();
}
