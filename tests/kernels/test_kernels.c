/* test_kernels.c — every kernel against its naive twin (reference.c) and every backward against
 * central finite differences of an independent double-precision forward written here.
 *
 * Shapes are odd on purpose (B=3, T=7, C=12, NH=3, V=37, Vp=40, OC=29) and a second, larger set
 * crosses the kernels' threading thresholds and attention's 128-row blocks, run with 1 and 2
 * threads. Also: two threads of one process each running matmuls with their own thread count
 * (the ranks-as-threads case), and the linear forward's two library paths (dnnl_sgemm, the
 * cached matmul primitive) under concurrency; `--matmul-ranks` runs only those.
 * Prints "N passed, M failed" and fails through the exit code.
 */
#include "check.h"
#include "kernels/kernels.h"

#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/krand.h"
static float *rand_buf(size_t n, float scale) {
    float *p = malloc((n ? n : 1) * sizeof(float));
    if (!p) abort();
    for (size_t i = 0; i < n; i++) p[i] = frand() * scale;
    return p;
}
static float *dup_buf(const float *a, size_t n) {
    float *p = malloc((n ? n : 1) * sizeof(float));
    if (!p) abort();
    memcpy(p, a, n * sizeof(float));
    return p;
}

/* |got - want| <= atol + rtol |want| elementwise; reports the worst element. */
static void check_close(const char *what, const float *got, const float *want, size_t n,
                        double rtol, double atol) {
    size_t worst = 0;
    double worst_excess = -1.0;
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        double err = fabs((double)got[i] - want[i]);
        double lim = atol + rtol * fabs((double)want[i]);
        if (!(err <= lim)) bad = 1;
        double excess = err - lim;
        if (excess > worst_excess || got[i] != got[i]) {
            worst_excess = excess;
            worst = i;
        }
    }
    CHECK(!bad, "%s: element %zu got %.9g want %.9g", what, worst, (double)got[worst],
          (double)want[worst]);
}

/* ---------------------------------------------------------------- double forwards (for FD) */

/* Each returns the scalar loss sum(out * R) for the op at the given (float) inputs, computed in
 * double. The FD driver perturbs one input element at a time. */

typedef double (*loss_fn)(void *ctx);

/* central differences of f w.r.t. x[i] for every i (or a stride of them), compared with grad. */
static void check_fd(const char *what, loss_fn f, void *ctx, float *x, size_t n, const float *grad,
                     size_t stride) {
    float *fd = malloc(n * sizeof(float));
    float *g = malloc(n * sizeof(float));
    size_t k = 0;
    for (size_t i = 0; i < n; i += stride) {
        float x0 = x[i];
        /* step relative to the value; float inputs are perturbed in float, so use the actual
         * difference of the perturbed floats as the step */
        float h = 1e-3f * (fabsf(x0) > 1.0f ? fabsf(x0) : 1.0f);
        x[i] = x0 + h;
        double fp = f(ctx);
        float xp = x[i];
        x[i] = x0 - h;
        double fm = f(ctx);
        float xm = x[i];
        x[i] = x0;
        fd[k] = (float)((fp - fm) / ((double)xp - (double)xm));
        g[k] = grad[i];
        k++;
    }
    /* FD error is O(h^2 f''') ~ 1e-6 relative; the float kernels ~1e-6: 1e-3 is loose enough
     * for rounding and tight enough to catch any wrong term. */
    check_close(what, g, fd, k, 2e-3, 2e-4);
    free(fd);
    free(g);
}

typedef struct mm_ctx {
    const float *inp, *w, *b, *R;
    size_t BT, C, OC;
} mm_ctx_t;
static double mm_loss(void *p) {
    mm_ctx_t *c = p;
    double L = 0.0;
    for (size_t i = 0; i < c->BT; i++)
        for (size_t o = 0; o < c->OC; o++) {
            double y = c->b[o];
            for (size_t k = 0; k < c->C; k++)
                y += (double)c->inp[i * c->C + k] * c->w[o * c->C + k];
            L += y * c->R[i * c->OC + o];
        }
    return L;
}

typedef struct ln_ctx {
    const float *x, *w, *b, *R;
    size_t BT, C;
} ln_ctx_t;
static double ln_loss(void *p) {
    ln_ctx_t *c = p;
    double L = 0.0;
    for (size_t i = 0; i < c->BT; i++) {
        const float *x = c->x + i * c->C;
        double mu = 0, var = 0;
        for (size_t j = 0; j < c->C; j++) mu += x[j];
        mu /= (double)c->C;
        for (size_t j = 0; j < c->C; j++) var += (x[j] - mu) * (x[j] - mu);
        var /= (double)c->C;
        for (size_t j = 0; j < c->C; j++)
            L += ((x[j] - mu) / sqrt(var + 1e-5) * c->w[j] + c->b[j]) * c->R[i * c->C + j];
    }
    return L;
}

typedef struct gelu_ctx {
    const float *x, *R;
    size_t n;
} gelu_ctx_t;
static double gelu_loss(void *p) {
    gelu_ctx_t *c = p;
    double L = 0.0;
    for (size_t i = 0; i < c->n; i++) {
        double x = c->x[i];
        double y = 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
        L += y * c->R[i];
    }
    return L;
}

typedef struct att_ctx {
    const float *qkv, *R;
    size_t B, T, C, NH;
} att_ctx_t;
static double att_loss(void *p) {
    att_ctx_t *c = p;
    size_t B = c->B, T = c->T, C = c->C, NH = c->NH, hs = C / NH;
    double L = 0.0, *sc = malloc(T * sizeof(double));
    for (size_t b = 0; b < B; b++)
        for (size_t h = 0; h < NH; h++)
            for (size_t t = 0; t < T; t++) {
                double mx = -1e300, sum = 0;
                for (size_t s = 0; s <= t; s++) {
                    double d = 0;
                    for (size_t i = 0; i < hs; i++)
                        d += (double)c->qkv[(b * T + t) * 3 * C + h * hs + i] *
                             c->qkv[(b * T + s) * 3 * C + C + h * hs + i];
                    sc[s] = d / sqrt((double)hs);
                    if (sc[s] > mx) mx = sc[s];
                }
                for (size_t s = 0; s <= t; s++) sum += exp(sc[s] - mx);
                for (size_t i = 0; i < hs; i++) {
                    double o = 0;
                    for (size_t s = 0; s <= t; s++)
                        o += exp(sc[s] - mx) / sum *
                             c->qkv[(b * T + s) * 3 * C + 2 * C + h * hs + i];
                    L += o * c->R[(b * T + t) * C + h * hs + i];
                }
            }
    free(sc);
    return L;
}

typedef struct emb_ctx {
    const float *wte, *wpe, *R;
    const int32_t *tok;
    size_t B, T, C;
} emb_ctx_t;
static double emb_loss(void *p) {
    emb_ctx_t *c = p;
    double L = 0.0;
    for (size_t i = 0; i < c->B * c->T; i++)
        for (size_t j = 0; j < c->C; j++)
            L += ((double)c->wte[(size_t)c->tok[i] * c->C + j] + c->wpe[(i % c->T) * c->C + j]) *
                 c->R[i * c->C + j];
    return L;
}

typedef struct ce_ctx {
    const float *logits, *dl;
    const int32_t *tg;
    size_t BT, V, Vp;
} ce_ctx_t;
static double ce_loss(void *p) {
    ce_ctx_t *c = p;
    double L = 0.0;
    for (size_t i = 0; i < c->BT; i++) {
        if (c->tg[i] < 0) continue;
        const float *x = c->logits + i * c->Vp;
        double s = 0;
        for (size_t j = 0; j < c->V; j++) s += exp((double)x[j]);
        L += (log(s) - x[c->tg[i]]) * c->dl[i];
    }
    return L;
}

typedef struct res_ctx {
    const float *a, *b, *R;
    size_t n;
} res_ctx_t;
static double res_loss(void *p) {
    res_ctx_t *c = p;
    double L = 0.0;
    for (size_t i = 0; i < c->n; i++) L += ((double)c->a[i] + c->b[i]) * c->R[i];
    return L;
}

/* ---------------------------------------------------------------- per-kernel tests */

static void test_matmul(size_t BT, size_t C, size_t OC, int threads, int fd) {
    char nm[96];
    float *inp = rand_buf(BT * C, 1), *w = rand_buf(OC * C, 0.5f), *b = rand_buf(OC, 1);
    float *R = rand_buf(BT * OC, 1);
    float *out = rand_buf(BT * OC, 9), *ref = malloc(BT * OC * sizeof(float));
    zero__matmul_forward(out, inp, w, b, BT, C, OC, threads);
    zero__ref_matmul_forward(ref, inp, w, b, BT, C, OC);
    snprintf(nm, sizeof nm, "matmul_forward BT=%zu C=%zu OC=%zu thr=%d", BT, C, OC, threads);
    check_close(nm, out, ref, BT * OC, 1e-5, 1e-5);
    zero__matmul_forward(out, inp, w, NULL, BT, C, OC, threads);
    zero__ref_matmul_forward(ref, inp, w, NULL, BT, C, OC);
    snprintf(nm, sizeof nm, "matmul_forward nobias BT=%zu thr=%d", BT, threads);
    check_close(nm, out, ref, BT * OC, 1e-5, 1e-5);

    /* backward accumulates: start from a nonzero gradient in both */
    float *di = rand_buf(BT * C, 1), *dw = rand_buf(OC * C, 1), *db = rand_buf(OC, 1);
    float *di_r = dup_buf(di, BT * C), *dw_r = dup_buf(dw, OC * C), *db_r = dup_buf(db, OC);
    float *di0 = dup_buf(di, BT * C), *dw0 = dup_buf(dw, OC * C), *db0 = dup_buf(db, OC);
    zero__matmul_backward(di, dw, db, R, inp, w, BT, C, OC, threads);
    zero__ref_matmul_backward(di_r, dw_r, db_r, R, inp, w, BT, C, OC);
    snprintf(nm, sizeof nm, "matmul_backward dinp BT=%zu thr=%d", BT, threads);
    check_close(nm, di, di_r, BT * C, 1e-5, 1e-5);
    snprintf(nm, sizeof nm, "matmul_backward dweight BT=%zu thr=%d", BT, threads);
    check_close(nm, dw, dw_r, OC * C, 1e-5, 1e-5);
    snprintf(nm, sizeof nm, "matmul_backward dbias BT=%zu thr=%d", BT, threads);
    check_close(nm, db, db_r, OC, 1e-5, 1e-5);
    if (fd) {
        /* gradient alone = accumulated - initial */
        for (size_t i = 0; i < BT * C; i++) di[i] -= di0[i];
        for (size_t i = 0; i < OC * C; i++) dw[i] -= dw0[i];
        for (size_t i = 0; i < OC; i++) db[i] -= db0[i];
        mm_ctx_t c = {inp, w, b, R, BT, C, OC};
        check_fd("matmul dinp vs FD", mm_loss, &c, inp, BT * C, di, 1);
        check_fd("matmul dweight vs FD", mm_loss, &c, w, OC * C, dw, 1);
        check_fd("matmul dbias vs FD", mm_loss, &c, b, OC, db, 1);
    }
    free(inp), free(w), free(b), free(R), free(out), free(ref), free(di), free(dw), free(db);
    free(di_r), free(dw_r), free(db_r), free(di0), free(dw0), free(db0);
}

static void test_layernorm(size_t BT, size_t C, int threads, int fd) {
    char nm[96];
    float *x = rand_buf(BT * C, 2), *w = rand_buf(C, 1), *b = rand_buf(C, 1),
          *R = rand_buf(BT * C, 1);
    for (size_t i = 0; i < BT * C; i++) x[i] += 3.0f; /* a mean far from 0 */
    float *out = malloc(BT * C * 4), *ref = malloc(BT * C * 4), *mean = malloc(BT * 4),
          *rstd = malloc(BT * 4), *mean_r = malloc(BT * 4), *rstd_r = malloc(BT * 4);
    zero__layernorm_forward(out, mean, rstd, x, w, b, BT, C, threads);
    zero__ref_layernorm_forward(ref, mean_r, rstd_r, x, w, b, BT, C);
    snprintf(nm, sizeof nm, "layernorm_forward BT=%zu C=%zu thr=%d", BT, C, threads);
    check_close(nm, out, ref, BT * C, 1e-5, 1e-5);
    check_close("layernorm mean", mean, mean_r, BT, 1e-6, 1e-6);
    check_close("layernorm rstd", rstd, rstd_r, BT, 1e-5, 1e-6);
    float *dx = rand_buf(BT * C, 1), *dw = rand_buf(C, 1), *db = rand_buf(C, 1);
    float *dx_r = dup_buf(dx, BT * C), *dw_r = dup_buf(dw, C), *db_r = dup_buf(db, C);
    float *dx0 = dup_buf(dx, BT * C), *dw0 = dup_buf(dw, C), *db0 = dup_buf(db, C);
    zero__layernorm_backward(dx, dw, db, R, x, w, mean, rstd, BT, C, threads);
    zero__ref_layernorm_backward(dx_r, dw_r, db_r, R, x, w, mean_r, rstd_r, BT, C);
    snprintf(nm, sizeof nm, "layernorm_backward dinp BT=%zu thr=%d", BT, threads);
    check_close(nm, dx, dx_r, BT * C, 1e-4, 1e-5);
    snprintf(nm, sizeof nm, "layernorm_backward dweight BT=%zu thr=%d", BT, threads);
    check_close(nm, dw, dw_r, C, 1e-4, 1e-4);
    snprintf(nm, sizeof nm, "layernorm_backward dbias BT=%zu thr=%d", BT, threads);
    check_close(nm, db, db_r, C, 1e-4, 1e-4);
    if (fd) {
        for (size_t i = 0; i < BT * C; i++) dx[i] -= dx0[i];
        for (size_t i = 0; i < C; i++) dw[i] -= dw0[i], db[i] -= db0[i];
        ln_ctx_t c = {x, w, b, R, BT, C};
        check_fd("layernorm dinp vs FD", ln_loss, &c, x, BT * C, dx, 1);
        check_fd("layernorm dweight vs FD", ln_loss, &c, w, C, dw, 1);
        check_fd("layernorm dbias vs FD", ln_loss, &c, b, C, db, 1);
    }
    free(x), free(w), free(b), free(R), free(out), free(ref), free(mean), free(rstd);
    free(mean_r), free(rstd_r), free(dx), free(dw), free(db), free(dx_r), free(dw_r), free(db_r);
    free(dx0), free(dw0), free(db0);
}

static void test_gelu(size_t n, int threads, int fd) {
    char nm[96];
    float *x = rand_buf(n, 4), *R = rand_buf(n, 1), *out = malloc(n * 4), *ref = malloc(n * 4);
    if (n > 4) x[0] = 30.0f, x[1] = -30.0f, x[2] = 0.0f; /* saturation and zero */
    zero__gelu_forward(out, x, n, threads);
    zero__ref_gelu_forward(ref, x, n);
    snprintf(nm, sizeof nm, "gelu_forward n=%zu thr=%d", n, threads);
    /* gelu.c states ~1 ulp absolute at the largest |x| here and 1.1e-6 relative down to
     * |gelu| = 1e-3; the atol covers the tail below that (|gelu| < 1e-4 for x < -3.5) */
    check_close(nm, out, ref, n, 2e-6, 1e-7);
    float *dx = rand_buf(n, 1), *dx_r = dup_buf(dx, n), *dx0 = dup_buf(dx, n);
    zero__gelu_backward(dx, x, R, n, threads);
    zero__ref_gelu_backward(dx_r, x, R, n);
    snprintf(nm, sizeof nm, "gelu_backward n=%zu thr=%d", n, threads);
    /* gelu' within 2.5e-7 absolute, plus the reference's own float rounding of g * dout and of
     * the += (each up to half an ulp of values <= 2 here), where dx cancels to ~0 */
    check_close(nm, dx, dx_r, n, 2e-6, 5e-7);
    {
        /* elementwise: the bits must not depend on the thread split (3: uneven slices) */
        float *o3 = malloc(n * 4), *dx3 = dup_buf(dx0, n);
        zero__gelu_forward(o3, x, n, 3);
        zero__gelu_backward(dx3, x, R, n, 3);
        CHECK(memcmp(o3, out, n * 4) == 0 && memcmp(dx3, dx, n * 4) == 0,
              "gelu n=%zu: 3 threads differ from %d bitwise", n, threads);
        free(o3), free(dx3);
    }
    {
        /* NaN must reach dinp too (the engine's overflow check); large |x| saturates exactly */
        float xs[4] = {NAN, 1e10f, -1e10f, 0.0f}, one[4] = {1, 1, 1, 1}, o[4], d[4] = {0};
        zero__gelu_forward(o, xs, 4, threads);
        zero__gelu_backward(d, xs, one, 4, threads);
        CHECK(isnan(o[0]) && o[1] == 1e10f && o[2] == 0.0f && o[3] == 0.0f && isnan(d[0]) &&
                  d[1] == 1.0f && d[2] == 0.0f && d[3] == 0.5f,
              "gelu special values: fwd %g %g %g %g, bwd %g %g %g %g", o[0], o[1], o[2], o[3], d[0],
              d[1], d[2], d[3]);
    }
    if (fd) {
        for (size_t i = 0; i < n; i++) dx[i] -= dx0[i];
        gelu_ctx_t c = {x, R, n};
        check_fd("gelu dinp vs FD", gelu_loss, &c, x, n, dx, 1);
    }
    free(x), free(R), free(out), free(ref), free(dx), free(dx_r), free(dx0);
}

/* The attention results must not depend on the thread count: fixed summation order per
 * element. Bitwise comparison of 1, 2 and 3 threads (forward output and probabilities, backward
 * gradient). */
static void test_attention_threads(size_t B, size_t T, size_t C, size_t NH) {
    size_t n_in = B * T * 3 * C, n_out = B * T * C, n_att = B * NH * T * T;
    float *qkv = rand_buf(n_in, 1.5f), *R = rand_buf(n_out, 1);
    float *out[3], *att[3], *d[3];
    float *scratch = malloc(zero__attention_scratch_count(T, 3) * sizeof(float));
    int ok = 1;
    for (int k = 0; k < 3; k++) {
        out[k] = malloc(n_out * 4), att[k] = calloc(n_att, 4), d[k] = calloc(n_in, 4);
        zero__attention_forward(out[k], att[k], qkv, B, T, C, NH, k + 1);
        zero__attention_backward(d[k], scratch, R, qkv, att[k], B, T, C, NH, k + 1);
        if (k > 0)
            ok = ok && !memcmp(out[k], out[0], n_out * 4) && !memcmp(att[k], att[0], n_att * 4) &&
                 !memcmp(d[k], d[0], n_in * 4);
    }
    CHECK(ok, "attention T=%zu C=%zu: results differ between 1, 2, 3 threads", T, C);
    for (int k = 0; k < 3; k++) free(out[k]), free(att[k]), free(d[k]);
    free(qkv), free(R), free(scratch);
}

/* fd: 0 = no finite differences, else check every fd-th input element */
static void test_attention(size_t B, size_t T, size_t C, size_t NH, int threads, int fd) {
    char nm[96];
    size_t n_in = B * T * 3 * C, n_out = B * T * C, n_att = B * NH * T * T;
    float *qkv = rand_buf(n_in, 1.5f), *R = rand_buf(n_out, 1);
    float *out = rand_buf(n_out, 1), *ref = malloc(n_out * 4);
    float *att = rand_buf(n_att, 7), *att_r = malloc(n_att * 4);
    zero__attention_forward(out, att, qkv, B, T, C, NH, threads);
    zero__ref_attention_forward(ref, att_r, qkv, B, T, C, NH);
    snprintf(nm, sizeof nm, "attention_forward B=%zu T=%zu C=%zu NH=%zu thr=%d", B, T, C, NH,
             threads);
    check_close(nm, out, ref, n_out, 1e-4, 1e-5);
    /* compare att on and below the diagonal only (above is unspecified) */
    float *a_lo = calloc(n_att, 4), *r_lo = calloc(n_att, 4);
    for (size_t bh = 0; bh < B * NH; bh++)
        for (size_t t = 0; t < T; t++)
            for (size_t s = 0; s <= t; s++) {
                a_lo[(bh * T + t) * T + s] = att[(bh * T + t) * T + s];
                r_lo[(bh * T + t) * T + s] = att_r[(bh * T + t) * T + s];
            }
    check_close("attention att (lower triangle)", a_lo, r_lo, n_att, 1e-4, 1e-6);
    float *d = rand_buf(n_in, 1), *d_r = dup_buf(d, n_in), *d0 = dup_buf(d, n_in);
    size_t ns = zero__attention_scratch_count(T, threads);
    float *scratch = rand_buf(ns, 5);
    zero__attention_backward(d, scratch, R, qkv, att, B, T, C, NH, threads);
    zero__ref_attention_backward(d_r, R, qkv, att_r, B, T, C, NH);
    snprintf(nm, sizeof nm, "attention_backward B=%zu T=%zu thr=%d", B, T, threads);
    check_close(nm, d, d_r, n_in, 1e-4, 1e-5);
    if (fd) {
        for (size_t i = 0; i < n_in; i++) d[i] -= d0[i];
        att_ctx_t c = {qkv, R, B, T, C, NH};
        check_fd("attention dqkv vs FD", att_loss, &c, qkv, n_in, d, (size_t)fd);
    }
    free(qkv), free(R), free(out), free(ref), free(att), free(att_r), free(a_lo), free(r_lo);
    free(d), free(d_r), free(d0), free(scratch);
}

static void test_residual(size_t n, int threads, int fd) {
    char nm[96];
    float *a = rand_buf(n, 1), *b = rand_buf(n, 1), *R = rand_buf(n, 1);
    float *out = malloc(n * 4), *ref = malloc(n * 4);
    zero__residual_forward(out, a, b, n, threads);
    zero__ref_residual_forward(ref, a, b, n);
    snprintf(nm, sizeof nm, "residual_forward n=%zu thr=%d", n, threads);
    check_close(nm, out, ref, n, 0, 0);
    float *da = rand_buf(n, 1), *db = rand_buf(n, 1);
    float *da_r = dup_buf(da, n), *db_r = dup_buf(db, n), *da0 = dup_buf(da, n),
          *db0 = dup_buf(db, n);
    zero__residual_backward(da, db, R, n, threads);
    zero__ref_residual_backward(da_r, db_r, R, n);
    snprintf(nm, sizeof nm, "residual_backward n=%zu thr=%d", n, threads);
    check_close(nm, da, da_r, n, 0, 0);
    check_close(nm, db, db_r, n, 0, 0);
    if (fd) {
        for (size_t i = 0; i < n; i++) da[i] -= da0[i], db[i] -= db0[i];
        res_ctx_t c = {a, b, R, n};
        check_fd("residual da vs FD", res_loss, &c, a, n, da, 1);
        check_fd("residual db vs FD", res_loss, &c, b, n, db, 1);
    }
    free(a), free(b), free(R), free(out), free(ref), free(da), free(db), free(da_r), free(db_r);
    free(da0), free(db0);
}

static void test_embedding(size_t B, size_t T, size_t C, size_t V, int threads, int fd) {
    char nm[96];
    size_t maxT = T + 3;
    int32_t *tok = malloc(B * T * sizeof(int32_t));
    for (size_t i = 0; i < B * T; i++) tok[i] = (int32_t)((frand() + 1.0f) * 0.5f * (float)V);
    for (size_t i = 0; i < B * T; i++) tok[i] = tok[i] >= (int32_t)V ? (int32_t)V - 1 : tok[i];
    if (B * T > 3) tok[1] = tok[0], tok[2] = tok[0]; /* repeated tokens: scatter collisions */
    float *wte = rand_buf(V * C, 1), *wpe = rand_buf(maxT * C, 1), *R = rand_buf(B * T * C, 1);
    float *out = malloc(B * T * C * 4), *ref = malloc(B * T * C * 4);
    zero__embedding_forward(out, tok, wte, wpe, B, T, C, threads);
    zero__ref_embedding_forward(ref, tok, wte, wpe, B, T, C);
    snprintf(nm, sizeof nm, "embedding_forward B=%zu T=%zu C=%zu thr=%d", B, T, C, threads);
    check_close(nm, out, ref, B * T * C, 0, 0);
    float *dte = rand_buf(V * C, 1), *dpe = rand_buf(maxT * C, 1);
    float *dte_r = dup_buf(dte, V * C), *dpe_r = dup_buf(dpe, maxT * C);
    float *dte0 = dup_buf(dte, V * C), *dpe0 = dup_buf(dpe, maxT * C);
    zero__embedding_backward(dte, dpe, R, tok, B, T, C, threads);
    zero__ref_embedding_backward(dte_r, dpe_r, R, tok, B, T, C);
    snprintf(nm, sizeof nm, "embedding_backward dwte thr=%d", threads);
    check_close(nm, dte, dte_r, V * C, 1e-6, 1e-6);
    snprintf(nm, sizeof nm, "embedding_backward dwpe thr=%d", threads);
    check_close(nm, dpe, dpe_r, maxT * C, 1e-6, 1e-6);
    if (fd) {
        for (size_t i = 0; i < V * C; i++) dte[i] -= dte0[i];
        for (size_t i = 0; i < maxT * C; i++) dpe[i] -= dpe0[i];
        emb_ctx_t c = {wte, wpe, R, tok, B, T, C};
        check_fd("embedding dwte vs FD", emb_loss, &c, wte, V * C, dte, 1);
        check_fd("embedding dwpe vs FD", emb_loss, &c, wpe, maxT * C, dpe, 1);
    }
    free(tok), free(wte), free(wpe), free(R), free(out), free(ref), free(dte), free(dpe);
    free(dte_r), free(dpe_r), free(dte0), free(dpe0);
}

static void test_softmax_ce(size_t BT, size_t V, size_t Vp, int threads, int fd) {
    char nm[96];
    float *logits = rand_buf(BT * Vp, 4), *dl = rand_buf(BT, 1);
    for (size_t i = 0; i < BT; i++)
        for (size_t j = V; j < Vp; j++) logits[i * Vp + j] = 1e30f; /* padding must be ignored */
    if (BT > 1) logits[Vp + 1] = 60.0f; /* a dominant logit: exercises max-subtraction */
    int32_t *tg = malloc(BT * sizeof(int32_t));
    for (size_t i = 0; i < BT; i++) tg[i] = (int32_t)(((frand() + 1.0f) * 0.5f) * (float)(V - 1));
    if (BT > 2) tg[2] = -1; /* ignored position */
    float *loss = malloc(BT * 4), *loss_r = malloc(BT * 4), *lse = malloc(BT * 4);
    zero__softmax_ce_forward(loss, lse, logits, tg, BT, V, Vp, threads);
    zero__ref_softmax_ce_forward(loss_r, NULL, logits, tg, BT, V, Vp);
    snprintf(nm, sizeof nm, "softmax_ce_forward BT=%zu V=%zu Vp=%zu thr=%d", BT, V, Vp, threads);
    check_close(nm, loss, loss_r, BT, 1e-5, 1e-5);
    float *dlog = rand_buf(BT * Vp, 3), *dlog_r = malloc(BT * Vp * 4);
    zero__softmax_ce_backward(dlog, logits, lse, dl, tg, BT, V, Vp, threads);
    zero__ref_softmax_ce_backward(dlog_r, logits, NULL, dl, tg, BT, V, Vp);
    snprintf(nm, sizeof nm, "softmax_ce_backward BT=%zu thr=%d", BT, threads);
    check_close(nm, dlog, dlog_r, BT * Vp, 1e-4, 1e-6);
    /* in place over the logits */
    float *inplace = dup_buf(logits, BT * Vp);
    zero__softmax_ce_backward(inplace, inplace, lse, dl, tg, BT, V, Vp, threads);
    check_close("softmax_ce_backward in place", inplace, dlog_r, BT * Vp, 1e-4, 1e-6);
    {
        /* fused forward + backward with a uniform dloss, out of place and in place */
        float *dlu = malloc(BT * 4), *lossf = malloc(BT * 4), *dlf = rand_buf(BT * Vp, 2);
        for (size_t i = 0; i < BT; i++) dlu[i] = 0.37f;
        zero__ref_softmax_ce_backward(dlog_r, logits, NULL, dlu, tg, BT, V, Vp);
        zero__softmax_ce_forward_backward(lossf, dlf, logits, tg, 0.37f, BT, V, Vp, threads);
        check_close("softmax_ce_forward_backward losses", lossf, loss_r, BT, 1e-5, 1e-5);
        check_close("softmax_ce_forward_backward dlogits", dlf, dlog_r, BT * Vp, 1e-4, 1e-6);
        memcpy(dlf, logits, BT * Vp * 4);
        zero__softmax_ce_forward_backward(lossf, dlf, dlf, tg, 0.37f, BT, V, Vp, threads);
        check_close("softmax_ce_forward_backward in place losses", lossf, loss_r, BT, 1e-5, 1e-5);
        check_close("softmax_ce_forward_backward in place", dlf, dlog_r, BT * Vp, 1e-4, 1e-6);
        free(dlu), free(lossf), free(dlf);
    }
    if (fd) {
        /* padding logits are 1e30: FD only over real columns (perturbing padding is a no-op) */
        ce_ctx_t c = {logits, dl, tg, BT, V, Vp};
        if (BT > 1) logits[Vp + 1] = 2.0f; /* keep FD well-conditioned */
        zero__softmax_ce_forward(loss, lse, logits, tg, BT, V, Vp, threads);
        zero__softmax_ce_backward(dlog, logits, lse, dl, tg, BT, V, Vp, threads);
        float *g = malloc(BT * V * 4), *xs = malloc(BT * V * 4);
        (void)xs;
        for (size_t i = 0; i < BT; i++) {
            size_t stride = 1;
            /* check_fd over one row's V real columns */
            check_fd("softmax_ce dlogits vs FD", ce_loss, &c, logits + i * Vp, V, dlog + i * Vp,
                     stride);
        }
        free(g), free(xs);
    }
    free(logits), free(dl), free(tg), free(loss), free(loss_r), free(lse), free(dlog);
    free(dlog_r), free(inplace);
}

static void test_adamw(size_t n, int threads) {
    char nm[96];
    float *p = rand_buf(n, 1), *g = rand_buf(n, 0.1f), *m = rand_buf(n, 0.01f);
    float *v = rand_buf(n, 0.001f);
    for (size_t i = 0; i < n; i++) v[i] = fabsf(v[i]);
    float *p_r = dup_buf(p, n), *m_r = dup_buf(m, n), *v_r = dup_buf(v, n);
    for (int t = 1; t <= 3; t++) {
        zero__adamw_update(p, g, m, v, n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, t, threads);
        zero__ref_adamw_update(p_r, g, m_r, v_r, n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, t);
    }
    snprintf(nm, sizeof nm, "adamw params n=%zu thr=%d", n, threads);
    check_close(nm, p, p_r, n, 1e-5, 1e-6);
    check_close("adamw m", m, m_r, n, 1e-5, 1e-7);
    check_close("adamw v", v, v_r, n, 1e-5, 1e-9);
    /* closed form: from m = v = 0 at t = 1, mhat = g, vhat = g^2, so the step is
     * lr (sign(g) |g| / (|g| + eps) + wd p). */
    float *q = rand_buf(n, 1), *q0 = dup_buf(q, n), *want = malloc(n * 4);
    float *mz = calloc(n, 4), *vz = calloc(n, 4);
    zero__adamw_update(q, g, mz, vz, n, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 1, threads);
    for (size_t i = 0; i < n; i++) {
        double gi = g[i];
        want[i] = (float)(q0[i] - 1e-3 * (gi / (fabs(gi) + 1e-8) + 0.01 * q0[i]));
    }
    check_close("adamw closed form t=1", q, want, n, 1e-5, 1e-7);
    /* weight_decay 0 (NO_DECAY): pure Adam step */
    memcpy(q, q0, n * 4);
    memset(mz, 0, n * 4), memset(vz, 0, n * 4);
    zero__adamw_update(q, g, mz, vz, n, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f, 1, threads);
    for (size_t i = 0; i < n; i++)
        want[i] = (float)(q0[i] - 1e-3 * ((double)g[i] / (fabs((double)g[i]) + 1e-8)));
    check_close("adamw no decay closed form", q, want, n, 1e-5, 1e-7);
    free(p), free(g), free(m), free(v), free(p_r), free(m_r), free(v_r), free(q), free(q0);
    free(want), free(mz), free(vz);
}

/* ---------------------------------------------------------------- ranks as threads */

typedef struct rank_job {
    int threads;
    int ok;
    int icv_after;
} rank_job_t;

static void *rank_main(void *p) {
    rank_job_t *j = p;
    size_t BT = 257, C = 96, OC = 131;
    float *inp = malloc(BT * C * 4), *w = malloc(OC * C * 4), *b = malloc(OC * 4);
    float *out = malloc(BT * OC * 4), *ref = malloc(BT * OC * 4);
    uint64_t s = (uint64_t)j->threads * 77 + 1;
    for (size_t i = 0; i < BT * C; i++)
        inp[i] = (float)((s = s * 6364136223846793005ull + 1) >> 41) / 8388608.0f - 0.5f;
    for (size_t i = 0; i < OC * C; i++)
        w[i] = (float)((s = s * 6364136223846793005ull + 1) >> 41) / 8388608.0f - 0.5f;
    for (size_t i = 0; i < OC; i++) b[i] = 0.25f;
    zero__ref_matmul_forward(ref, inp, w, b, BT, C, OC);
    j->ok = 1;
    for (int r = 0; r < 20; r++) {
        zero__matmul_forward(out, inp, w, b, BT, C, OC, j->threads);
        for (size_t i = 0; i < BT * OC; i++)
            if (fabsf(out[i] - ref[i]) > 1e-4f * (1.0f + fabsf(ref[i]))) j->ok = 0;
    }
    j->icv_after = omp_get_max_threads();
    free(inp), free(w), free(b), free(out), free(ref);
    return NULL;
}

static void test_ranks_as_threads(void) {
    /* two "ranks", one with 1 thread and one with 2, concurrently: correct results, and each
     * thread's own OpenMP thread count is the one it asked for (not the other's). */
    int want[2] = {1, 2};
    pthread_t th[2];
    rank_job_t jobs[2];
    for (int r = 0; r < 2; r++) {
        jobs[r] = (rank_job_t){want[r], 0, 0};
        pthread_create(&th[r], NULL, rank_main, &jobs[r]);
    }
    for (int r = 0; r < 2; r++) pthread_join(th[r], NULL);
    for (int r = 0; r < 2; r++) {
        CHECK(jobs[r].ok && jobs[r].icv_after == want[r],
              "ranks-as-threads rank %d: ok=%d omp threads %d (asked %d)", r, jobs[r].ok,
              jobs[r].icv_after, want[r]);
    }
    /* and two ranks with 1 thread each */
    for (int r = 0; r < 2; r++) {
        jobs[r] = (rank_job_t){1, 0, 0};
        pthread_create(&th[r], NULL, rank_main, &jobs[r]);
    }
    for (int r = 0; r < 2; r++) pthread_join(th[r], NULL);
    for (int r = 0; r < 2; r++) {
        CHECK(jobs[r].ok && jobs[r].icv_after == 1, "ranks-as-threads 2x1 rank %d", r);
    }
}

/* ---------------------------------------------------------------- matmul paths and ranks */

/* The linear forward takes oneDNN's matmul primitive (cached per shape and thread count) on 2
 * threads for GEMMs of >= 2^25 multiply-adds, dnnl_sgemm otherwise (matmul.c). These cases
 * cross that rule with odd sizes: results against the naive reference, bitwise reproducible
 * whatever ran before (other shapes, a cache filling up, another rank thread with the same or
 * another thread count at the same time). */

enum { MR_BT = 301, MR_C = 515, MR_OC = 259 }; /* 40M multiply-adds: primitive on 2 threads */

typedef struct mr_data {
    float *inp, *w, *b;
    float *solo[3][2]; /* [threads][bias]: the result of a call made alone */
} mr_data_t;

typedef struct mr_job {
    const mr_data_t *d;
    int threads, churn, reps;
    int bad; /* results that differ bitwise from the solo call */
} mr_job_t;

/* Distinct shapes above the primitive threshold (64 x 512 x 1024 = 2^25 and up), enough to
 * create many cache entries while another rank runs. */
static void mr_churn(int threads, int n) {
    float *a = rand_buf((64 + (size_t)n) * 512, 1), *w = rand_buf(1024 * 512, 1);
    float *o = malloc((64 + (size_t)n) * 1024 * sizeof(float));
    for (int i = 0; i < n; i++)
        zero__matmul_forward(o, a, w, NULL, 64 + (size_t)i, 512, 1024, threads);
    free(a), free(w), free(o);
}

static void *mr_rank(void *p) {
    mr_job_t *j = p;
    const mr_data_t *d = j->d;
    float *out = malloc((size_t)MR_BT * MR_OC * sizeof(float));
    for (int r = 0; r < j->reps; r++) {
        for (int bias = 0; bias < 2; bias++) {
            memset(out, 0xff, (size_t)MR_BT * MR_OC * sizeof(float)); /* NaN: must be overwritten */
            zero__matmul_forward(out, d->inp, d->w, bias ? d->b : NULL, MR_BT, MR_C, MR_OC,
                                 j->threads);
            if (memcmp(out, d->solo[j->threads][bias], (size_t)MR_BT * MR_OC * sizeof(float)))
                j->bad++;
        }
        if (j->churn) mr_churn(j->threads, 40);
    }
    free(out);
    return NULL;
}

static void mr_expect(const char *what, const mr_job_t *j) {
    CHECK(j->bad == 0, "%s (threads %d): %d results differ bitwise from the solo call", what,
          j->threads, j->bad);
}

static void test_matmul_ranks(void) {
    mr_data_t d;
    d.inp = rand_buf((size_t)MR_BT * MR_C, 1);
    d.w = rand_buf((size_t)MR_OC * MR_C, 0.5f);
    d.b = rand_buf(MR_OC, 1);
    float *ref = malloc((size_t)MR_BT * MR_OC * sizeof(float));
    for (int bias = 0; bias < 2; bias++) {
        zero__ref_matmul_forward(ref, d.inp, d.w, bias ? d.b : NULL, MR_BT, MR_C, MR_OC);
        for (int thr = 1; thr <= 2; thr++) {
            float *o = rand_buf((size_t)MR_BT * MR_OC, 9);
            zero__matmul_forward(o, d.inp, d.w, bias ? d.b : NULL, MR_BT, MR_C, MR_OC, thr);
            char nm[96];
            snprintf(nm, sizeof nm, "matmul_forward solo %dx%dx%d bias=%d thr=%d", MR_BT, MR_OC,
                     MR_C, bias, thr);
            check_close(nm, o, ref, (size_t)MR_BT * MR_OC, 1e-5, 1e-4);
            d.solo[thr][bias] = o;
        }
    }
    free(ref);
    /* a lone 1-thread rank after the 2-thread primitive exists: the bits of its solo call */
    mr_job_t j1 = {&d, 1, 0, 2, 0};
    pthread_t th[2];
    pthread_create(&th[0], NULL, mr_rank, &j1);
    pthread_join(th[0], NULL);
    mr_expect("matmul lone 1-thread rank", &j1);
    /* two ranks at once: {2, 2} shares one cached primitive; {2 + churn, 1} and {2, 2 + churn}:
     * one rank adds 40 entries to the cache (under its lock) while the other looks up and runs
     * its own */
    int cfg[3][4] = {{2, 0, 2, 0}, {2, 1, 1, 0}, {2, 0, 2, 1}};
    for (int c = 0; c < 3; c++) {
        mr_job_t jobs[2] = {{&d, cfg[c][0], cfg[c][1], 3, 0}, {&d, cfg[c][2], cfg[c][3], 3, 0}};
        for (int r = 0; r < 2; r++) pthread_create(&th[r], NULL, mr_rank, &jobs[r]);
        for (int r = 0; r < 2; r++) pthread_join(th[r], NULL);
        for (int r = 0; r < 2; r++) mr_expect("matmul ranks at once", &jobs[r]);
    }
    /* after all that, the same call alone gives the same bits */
    mr_job_t j2 = {&d, 2, 0, 1, 0};
    mr_rank(&j2);
    mr_expect("matmul 2-thread call after the churn", &j2);
    free(d.inp), free(d.w), free(d.b);
    for (int t = 1; t <= 2; t++)
        for (int bias = 0; bias < 2; bias++) free(d.solo[t][bias]);
}

/* The optimizer step's vector passes against the naive twins; the sum of squares also bitwise
 * equal for 1 and 2 threads, and NaN/Inf propagating. */
static void test_vector(size_t n) {
    float *x = rand_buf(n, 3.0f), *y = rand_buf(n, 1.0f);
    double want = zero__ref_sumsq(x, n);
    double s1 = zero__sumsq(x, n, 1), s2 = zero__sumsq(x, n, 2);
    CHECK(fabs(s1 - want) <= 1e-13 * fabs(want) + 1e-300 && s1 == s2,
          "sumsq n=%zu: 1 thread %.17g, 2 threads %.17g, want %.17g", n, s1, s2, want);
    for (int thr = 1; thr <= 2; thr++) {
        float *a = dup_buf(x, n), *b = dup_buf(x, n);
        zero__scale(a, 0.37f, n, thr);
        zero__ref_scale(b, 0.37f, n);
        check_close("scale", a, b, n, 0.0, 0.0);
        memcpy(a, x, n * sizeof(float));
        memcpy(b, x, n * sizeof(float));
        zero__add_into(a, y, n, thr);
        zero__ref_add_into(b, y, n);
        check_close("add_into", a, b, n, 0.0, 0.0);
        zero__zero(a, n, thr);
        for (size_t i = 0; i < n; i++) b[i] = 0.0f;
        check_close("zero", a, b, n, 0.0, 0.0);
        if (n > 0) {
            /* a copy of a byte count that is not whole floats, to an odd byte offset: the
             * bytes around the destination stay as they were */
            const size_t bytes = n * sizeof(float) - 3;
            memset(a, 0x5a, n * sizeof(float));
            zero__copy((char *)a + 1, x, bytes - 1, thr);
            const unsigned char *ca = (const unsigned char *)a;
            int same = ca[0] == 0x5a && !memcmp(ca + 1, x, bytes - 1);
            for (size_t i = bytes; i < n * sizeof(float); i++) same = same && ca[i] == 0x5a;
            CHECK(same, "copy n=%zu, %d threads: bytes differ from the source or beside it", n,
                  thr);
        }
        free(a);
        free(b);
    }
    if (n > 10) {
        float keep = x[n / 2];
        x[n / 2] = NAN;
        int ok = isnan(zero__sumsq(x, n, 2));
        x[n / 2] = INFINITY;
        ok = ok && isinf(zero__sumsq(x, n, 2));
        x[n / 2] = keep;
        CHECK(ok, "sumsq n=%zu: NaN/Inf not propagated", n);
    }
    free(x);
    free(y);
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "--matmul-ranks") == 0) {
        /* only the concurrent matmul cases: the ThreadSanitizer job runs this (label tsan) */
        test_matmul_ranks();
        return check_report();
    }
    /* odd shapes, every backward also against finite differences */
    const size_t B = 3, T = 7, C = 12, NH = 3, V = 37, Vp = 40, OC = 29;
    for (int thr = 1; thr <= 2; thr++) {
        int fd = thr == 1;
        test_matmul(B * T, C, OC, thr, fd);
        test_layernorm(B * T, C, thr, fd);
        test_gelu(B * T * 4 * C, thr, fd);
        test_attention(B, T, C, NH, thr, fd);
        test_residual(B * T * C, thr, fd);
        test_embedding(B, T, C, V, thr, fd);
        test_softmax_ce(B * T, V, Vp, thr, fd);
        test_adamw(B * T * C + 5, thr);
    }
    /* larger shapes: threading thresholds, attention blocks (T > 128, not a multiple) */
    for (int thr = 1; thr <= 2; thr++) {
        test_matmul(301, 75, 130, thr, 0);
        test_matmul(MR_BT, MR_C, MR_OC, thr, 0); /* the forward's primitive path on 2 threads */
        test_layernorm(301, 130, thr, 0);
        test_gelu(100003, thr, 0);
        test_attention(2, 261, 48, 4, thr, 0);
        /* head size 64: full vector tiles, two query blocks, partial row and key tiles */
        test_attention(2, 150, 128, 2, thr, 0);
        test_attention(1, 70, 80, 2, thr, 0); /* hs = 40: a full and a partial column tile */
        test_residual(100003, thr, 0);
        test_embedding(3, 131, 96, 50, thr, 0);
        test_softmax_ce(37, 1001, 1008, thr, 0);
        test_adamw(100003, thr);
    }
    /* empty, shorter than a lane group, fewer blocks than parts, above the threading threshold */
    size_t vn[] = {0, 5, 17, 1000, 1000003};
    for (size_t i = 0; i < sizeof vn / sizeof vn[0]; i++) test_vector(vn[i]);
    test_attention(1, 133, 16, 2, 2, 37); /* FD across a block boundary, every 37th input */
    test_attention(1, 45, 96, 3, 2, 5);   /* FD through the full vector tiles (hs = 32) */
    test_attention_threads(2, 150, 128, 2);
    test_ranks_as_threads();
    test_matmul_ranks();
    {
        /* NaN and Inf must propagate (the engine's overflow check relies on it) */
        float xin[4] = {NAN, INFINITY, -INFINITY, 1.0f}, o[4];
        zero__gelu_forward(o, xin, 4, 1);
        int ok = isnan(o[0]) && isinf(o[1]) && (o[2] == 0.0f || isnan(o[2])) &&
                 fabsf(o[3] - 0.8411920f) < 1e-6f;
        float lg[3] = {0.0f, NAN, 1.0f}, loss, l;
        int32_t tg = 0;
        zero__softmax_ce_forward(&loss, &l, lg, &tg, 1, 3, 3, 1);
        ok = ok && isnan(loss);
        CHECK(ok, "NaN/Inf propagation: gelu %g %g %g, ce loss %g", o[0], o[1], o[2], loss);
    }
    {
        /* the MFU denominators, fp32's and bf16's (zero__gemm_lp, the GEMM the bf16 model
         * calls): sane positive rates (0.1 GFLOP/s .. 100 TFLOP/s); how long each measurement
         * took is printed, not asserted (timings are benchmarks, and a loaded machine stretches
         * it; CTest's timeout catches a hang) */
        const zero_dtype_t dts[] = {ZERO_DTYPE_FP32, ZERO_DTYPE_BF16};
        for (size_t i = 0; i < sizeof dts / sizeof *dts; i++) {
            const double t0 = omp_get_wtime();
            const double peak = zero__matmul_peak_flops(dts[i], 1);
            const double dt = omp_get_wtime() - t0;
            const char *name = zero_dtype_name(dts[i]);
            CHECK(peak > 1e8 && peak < 1e14, "matmul_peak_flops(%s, 1) = %g FLOP/s in %.2f s", name,
                  peak, dt);
            printf("%s matmul peak (1 thread): %.1f GFLOP/s, measured in %.2f s\n", name,
                   peak * 1e-9, dt);
        }
    }
    printf("matmul library: %s\n", zero__matmul_library());
    return check_report();
}
