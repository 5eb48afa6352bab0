/* test_optim_fused.c — the fused optimizer-step and accumulation kernels (optim_fused.c) and the
 * 16-bit sum of squares (vector.c).
 *
 * Oracles: (1) bitwise, the unfused passes they replace, run one after another (zero__scale,
 * the engine's float AdamW written out here, core's RNE array conversions, zeroing; zero__sumsq
 * on widened chunks), since the engine's results must not change by a bit; (2) with a tolerance,
 * the naive double-precision twins (reference.c, zero__ref_*_fused), so that both paths being wrong
 * the same way is caught. Plus the argument behind the engine's overflow check: a float64 sum of
 * squares of finite values, even the largest, is finite, and one inf or NaN makes it non-finite.
 * Sizes cross the threading threshold (32768) and the 1024-element blocks; 1 and 2 threads.
 * Prints "N passed, M failed" and fails through the exit code.
 */
#include "check.h"
#include "kernels/kernels.h"
#include "kernels/optim_fused.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One check whose message is fmt with `what` in it. */
static void check(int ok, const char *fmt, const char *what) { CHECK(ok, fmt, what); }

#define KRAND_SEED 0x2545f4914f6cdd1dull
#include "kernels/krand.h"

/* A copy of bytes bytes of src, in a new buffer. */
static void *dup(const void *src, size_t bytes) { return memcpy(xmalloc(bytes), src, bytes); }

static size_t dsize(zero_dtype_t dt) { return dt == ZERO_DTYPE_FP32 ? 4 : 2; }
static const char *dname(zero_dtype_t dt) {
    return dt == ZERO_DTYPE_FP32 ? "fp32" : dt == ZERO_DTYPE_BF16 ? "bf16" : "fp16";
}

static void store(void *x, size_t i, zero_dtype_t dt, float f) {
    if (dt == ZERO_DTYPE_FP32)
        ((float *)x)[i] = f;
    else
        ((uint16_t *)x)[i] = dt == ZERO_DTYPE_BF16 ? zero_fp32_to_bf16(f) : zero_fp32_to_fp16(f);
}
static float load(const void *x, size_t i, zero_dtype_t dt) {
    if (dt == ZERO_DTYPE_FP32) return ((const float *)x)[i];
    uint16_t h = ((const uint16_t *)x)[i];
    return dt == ZERO_DTYPE_BF16 ? zero_bf16_to_fp32(h) : zero_fp16_to_fp32(h);
}

/* Gradient-like values with the corners mixed in: -0, +0, subnormal-sized, large. */
static void fill_grads(void *g, size_t n, zero_dtype_t dt, float scale) {
    for (size_t i = 0; i < n; i++) {
        float f = frand() * scale;
        switch (i % 97) {
        case 3: f = -0.0f; break;
        case 5: f = 0.0f; break;
        case 7: f = 1e-39f; break; /* fp32 subnormal; bf16 keeps it, fp16 flushes to 0 */
        case 11: f = dt == ZERO_DTYPE_FP16 ? 6e4f : 3e15f; break;
        default: break;
        }
        store(g, i, dt, f);
    }
}

static void widen(float *out, const void *in, size_t n, zero_dtype_t dt) {
    if (dt == ZERO_DTYPE_FP32)
        memcpy(out, in, n * sizeof(float));
    else if (dt == ZERO_DTYPE_BF16)
        zero_bf16_to_fp32_array(out, in, n);
    else
        zero_fp16_to_fp32_array(out, in, n);
}

/* --------------------------------------------------------------------------- AdamW, fused */

/* The engine's AdamW in float, written here from the formula in the order the engine has always
 * evaluated it (kernels.h, adamw.c before the fusion): the bits the fused pass must reproduce. */
static void float_adamw(float *p, const float *g, float *m, float *v, size_t n,
                        const zero__adamw_hp_t *hp) {
    const float bc1 = (float)(1.0 / (1.0 - pow((double)hp->beta1, (double)hp->t)));
    const float bc2 = (float)(1.0 / (1.0 - pow((double)hp->beta2, (double)hp->t)));
    const float b1c = 1.0f - hp->beta1, b2c = 1.0f - hp->beta2;
    for (size_t i = 0; i < n; i++) {
        float mi = hp->beta1 * m[i] + b1c * g[i];
        float vi = hp->beta2 * v[i] + b2c * g[i] * g[i];
        m[i] = mi;
        v[i] = vi;
        float upd = (mi * bc1) / (sqrtf(vi * bc2) + hp->eps);
        p[i] = p[i] - hp->lr * (upd + hp->weight_decay * p[i]);
    }
}

static void test_adamw(size_t n, zero_dtype_t gdt, zero_dtype_t pdt, int with_params, float gscale,
                       int zero_grads, int threads) {
    const zero__adamw_hp_t hp = {1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 3};
    float *p0 = xmalloc(n * 4), *m0 = xmalloc(n * 4), *v0 = xmalloc(n * 4);
    void *g0 = xmalloc(n * dsize(gdt));
    for (size_t i = 0; i < n; i++) {
        p0[i] = frand();
        m0[i] = frand() * 1e-2f;
        v0[i] = fabsf(frand()) * 1e-4f;
    }
    fill_grads(g0, n, gdt, 0.5f);
    /* fused */
    float *p = dup(p0, n * 4), *m = dup(m0, n * 4), *v = dup(v0, n * 4);
    void *g = dup(g0, n * dsize(gdt)), *lp = with_params ? xmalloc(n * 2) : NULL;
    zero__adamw_fused(p, lp, pdt, g, gdt, gscale, zero_grads, m, v, n, &hp, threads);
    /* the unfused passes the engine ran before */
    float *pe = dup(p0, n * 4), *me = dup(m0, n * 4), *ve = dup(v0, n * 4), *ge = xmalloc(n * 4);
    uint16_t *lpe = xmalloc(n * 2);
    widen(ge, g0, n, gdt);
    if (gscale != 1.0f) zero__scale(ge, gscale, n, threads);
    float_adamw(pe, ge, me, ve, n, &hp);
    if (pdt == ZERO_DTYPE_BF16)
        zero_fp32_to_bf16_array(lpe, pe, n);
    else
        zero_fp32_to_fp16_array(lpe, pe, n);
    char what[160];
    snprintf(what, sizeof what, "adamw_fused n=%zu g=%s p=%s gscale=%g zero=%d threads=%d", n,
             dname(gdt), with_params ? dname(pdt) : "-", (double)gscale, zero_grads, threads);
    int same = !memcmp(p, pe, n * 4) && !memcmp(m, me, n * 4) && !memcmp(v, ve, n * 4);
    if (with_params) same = same && !memcmp(lp, lpe, n * 2);
    check(same, "%s: differs bitwise from scale + adamw_update + rounding", what);
    int grads_ok = 1;
    for (size_t i = 0; i < n * dsize(gdt); i++)
        grads_ok &= ((unsigned char *)g)[i] == (zero_grads ? 0 : ((unsigned char *)g0)[i]);
    check(grads_ok, "%s: gradient not zeroed / changed", what);
    /* the double-precision twin, within float rounding */
    float *pr = dup(p0, n * 4), *mr = dup(m0, n * 4), *vr = dup(v0, n * 4);
    void *gr = dup(g0, n * dsize(gdt)), *lpr = with_params ? xmalloc(n * 2) : NULL;
    zero__ref_adamw_fused(pr, lpr, pdt, gr, gdt, gscale, zero_grads, mr, vr, n, &hp);
    int close = 1;
    const double ptol = pdt == ZERO_DTYPE_BF16 ? 1.0 / 128 : 1.0 / 1024; /* one 16-bit ulp */
    for (size_t i = 0; i < n; i++) {
        close &= fabs((double)p[i] - pr[i]) <= 1e-6 + 1e-5 * fabs((double)pr[i]);
        close &= fabs((double)m[i] - mr[i]) <= 1e-9 + 1e-5 * fabs((double)mr[i]);
        close &= fabs((double)v[i] - vr[i]) <= 1e-12 + 1e-5 * fabs((double)vr[i]);
        if (with_params) {
            double a = load(lp, i, pdt), b = load(lpr, i, pdt);
            close &= fabs(a - b) <= ptol * fabs(b) + 1e-30;
        }
        close &= load(g, i, gdt) == load(gr, i, gdt);
    }
    check(close, "%s: far from the double-precision reference", what);
    free(p0), free(m0), free(v0), free(g0), free(p), free(m), free(v), free(g), free(lp);
    free(pe), free(me), free(ve), free(ge), free(lpe), free(pr), free(mr), free(vr), free(gr);
    free(lpr);
}

/* ---------------------------------------------------------------------- accumulation, fused */

static void test_acc(size_t n, zero_dtype_t adt, zero_dtype_t sdt, int overwrite, int zero_src,
                     int threads) {
    void *a0 = xmalloc(n * dsize(adt)), *s0 = xmalloc(n * dsize(sdt));
    if (overwrite)
        memset(a0, 0, n * dsize(adt));
    else
        fill_grads(a0, n, adt, 2.0f);
    fill_grads(s0, n, sdt, 1.0f);
    void *a = dup(a0, n * dsize(adt)), *s = dup(s0, n * dsize(sdt));
    void *ar = dup(a0, n * dsize(adt)), *sr = dup(s0, n * dsize(sdt));
    zero__acc_add_fused(a, adt, s, sdt, n, overwrite, zero_src, threads);
    zero__ref_acc_add_fused(ar, adt, sr, sdt, n, overwrite, zero_src);
    char what[160];
    snprintf(what, sizeof what, "acc_add_fused n=%zu acc=%s src=%s overwrite=%d zero=%d threads=%d",
             n, dname(adt), dname(sdt), overwrite, zero_src, threads);
    /* one float add (and one rounding) per element: exactly the reference, bit for bit */
    check(!memcmp(a, ar, n * dsize(adt)) && !memcmp(s, sr, n * dsize(sdt)),
          "%s: differs bitwise from the reference", what);
    /* an fp32 accumulator: the engine's former add, zero__add_into on widened values */
    if (adt == ZERO_DTYPE_FP32) {
        float *e = dup(a0, n * 4), *w = xmalloc(n * 4);
        widen(w, s0, n, sdt);
        zero__add_into(e, w, n, threads);
        size_t differ = 0;
        for (size_t i = 0; i < n; i++) /* overwrite may keep -0 where 0 + -0 gives +0 */
            differ += overwrite ? e[i] != ((float *)a)[i] : memcmp(&e[i], (float *)a + i, 4) != 0;
        check(differ == 0, "%s: differs from zero__add_into", what);
        free(e), free(w);
    }
    free(a0), free(s0), free(a), free(s), free(ar), free(sr);
}

/* ------------------------------------------------------------------------ sum of squares */

static void test_sumsq_lp(size_t n, zero_dtype_t dt, size_t chunk, int threads) {
    uint16_t *x = xmalloc(n * 2);
    float *w = xmalloc((chunk < n ? chunk : n) * 4 + 4);
    fill_grads(x, n, dt, 3.0f);
    double got = zero__sumsq_lp(x, dt, n, chunk, threads);
    /* the engine's former loop: widen a chunk, zero__sumsq it, add the totals in order */
    double want = 0.0;
    for (size_t i = 0; i < n; i += chunk) {
        size_t k = n - i < chunk ? n - i : chunk;
        widen(w, x + i, k, dt);
        want += zero__sumsq(w, k, threads);
    }
    long double ref = 0.0L;
    for (size_t i = 0; i < n; i++) ref += (long double)load(x, i, dt) * load(x, i, dt);
    char what[128];
    snprintf(what, sizeof what, "sumsq_lp n=%zu %s chunk=%zu threads=%d", n, dname(dt), chunk,
             threads);
    check(!memcmp(&got, &want, sizeof got), "%s: differs bitwise from chunked zero__sumsq", what);
    check(fabsl((long double)got - ref) <= 1e-10L * ref + 1e-300L,
          "%s: far from the long double sum", what);
    free(x), free(w);
}

/* The engine's overflow check is !isfinite(sum of squares): finite in, finite out; one
 * inf/NaN in, non-finite out. */
static void test_overflow_argument(int threads) {
    const size_t n = 100003;
    float *x = xmalloc(n * 4);
    uint16_t *h = xmalloc(n * 2);
    for (size_t i = 0; i < n; i++) x[i] = (i & 1) ? FLT_MAX : -FLT_MAX;
    check(isfinite(zero__sumsq(x, n, threads)), "%s: sum of squares of FLT_MAX is not finite",
          "sumsq fp32");
    const float bad[3] = {INFINITY, -INFINITY, NAN};
    for (int b = 0; b < 3; b++) {
        for (size_t at = 0; at < n; at += 49999) {
            float keep = x[at];
            x[at] = bad[b];
            check(!isfinite(zero__sumsq(x, n, threads)), "%s: inf/NaN not seen", "sumsq fp32");
            x[at] = keep;
        }
    }
    const zero_dtype_t dts[2] = {ZERO_DTYPE_BF16, ZERO_DTYPE_FP16};
    const uint16_t maxv[2] = {0x7f7f, 0x7bff}, infv[2] = {0x7f80, 0x7c00},
                   nanv[2] = {0xffc1, 0x7e01};
    for (int d = 0; d < 2; d++) {
        for (size_t i = 0; i < n; i++) h[i] = maxv[d] | (uint16_t)((i & 1) << 15);
        check(isfinite(zero__sumsq_lp(h, dts[d], n, 65536, threads)),
              "%s: sum of squares of the largest value is not finite", dname(dts[d]));
        h[n - 1] = infv[d];
        check(!isfinite(zero__sumsq_lp(h, dts[d], n, 65536, threads)), "%s: inf not seen",
              dname(dts[d]));
        h[n - 1] = maxv[d];
        h[70000] = nanv[d];
        check(!isfinite(zero__sumsq_lp(h, dts[d], n, 65536, threads)), "%s: NaN not seen",
              dname(dts[d]));
    }
    free(x), free(h);
}

int main(void) {
    const size_t sizes[] = {0, 1, 17, 1000, 1025, 40000, 100003};
    const zero_dtype_t dts[3] = {ZERO_DTYPE_FP32, ZERO_DTYPE_BF16, ZERO_DTYPE_FP16};
    for (int threads = 1; threads <= 2; threads++) {
        for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++) {
            const size_t n = sizes[si];
            for (int gd = 0; gd < 3; gd++) {
                test_adamw(n, dts[gd], ZERO_DTYPE_BF16, 0, 0.37f, 1, threads);
                test_adamw(n, dts[gd], ZERO_DTYPE_BF16, 1, 1.0f, 1, threads);
                test_adamw(n, dts[gd], ZERO_DTYPE_FP16, 1, 0.37f, 0, threads);
            }
            test_acc(n, ZERO_DTYPE_FP32, ZERO_DTYPE_FP32, 0, 1, threads);
            test_acc(n, ZERO_DTYPE_FP32, ZERO_DTYPE_FP32, 1, 0, threads);
            test_acc(n, ZERO_DTYPE_FP32, ZERO_DTYPE_BF16, 0, 0, threads);
            test_acc(n, ZERO_DTYPE_FP32, ZERO_DTYPE_BF16, 1, 1, threads);
            test_acc(n, ZERO_DTYPE_FP32, ZERO_DTYPE_FP16, 0, 1, threads);
            test_acc(n, ZERO_DTYPE_BF16, ZERO_DTYPE_BF16, 0, 1, threads);
            test_acc(n, ZERO_DTYPE_FP16, ZERO_DTYPE_FP16, 0, 0, threads);
            test_sumsq_lp(n, ZERO_DTYPE_BF16, 65536, threads);
            test_sumsq_lp(n, ZERO_DTYPE_FP16, 1000, threads);
        }
        test_sumsq_lp(300007, ZERO_DTYPE_BF16, 65536, threads);
        test_sumsq_lp(3000, ZERO_DTYPE_FP16, 7, threads);
        test_overflow_argument(threads);
    }
    return check_report();
}
