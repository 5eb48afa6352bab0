/* layernorm.c — LayerNorm forward/backward over the last dimension (eps 1e-5), multi-threaded.
 *
 * Forward: rows split across threads; each row is read once from memory (its C floats stay in
 * L1 for the mean, variance and output loops). Backward: one pass over dout and inp computes
 * dinp (+=) and per-thread partial dweight/dbias over a contiguous block of rows; the partials
 * are then added in thread order, so the result is deterministic for a given thread count.
 * Invariant: mean/rstd are the forward's (biased variance, eps inside the sqrt).
 * 16-bit I/O (kernels_lp.h): each row is widened into per-thread fp32 scratch and goes through
 * the same row functions; mean/rstd and the dweight/dbias partials stay fp32, the partials are
 * rounded into the 16-bit gradient once.
 */
#include "kernels.h"
#include "kernels_lp.h"
#include "kmath.h"
#include "lp_io.h"

#include "core/core_internal.h"

#include <math.h>
#include <stdlib.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define LN_EPS 1e-5f

/* One row: o(C) = (x - mean) * rstd * w + b; *mean, *rstd saved. Shared by both dtypes. */
static inline void ln_row(float *o, float *mean, float *rstd, const float *x, const float *weight,
                          const float *bias, size_t C) {
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (size_t j = 0; j < C; j++) s += x[j];
    float m = s / (float)C;
    float v = 0.0f;
    /* two-pass variance (row is in cache): no cancellation for rows with a large mean */
#pragma omp simd reduction(+ : v)
    for (size_t j = 0; j < C; j++) {
        float d = x[j] - m;
        v += d * d;
    }
    float r = 1.0f / sqrtf(v / (float)C + LN_EPS);
#pragma omp simd
    for (size_t j = 0; j < C; j++) o[j] = (x[j] - m) * r * weight[j] + bias[j];
    *mean = m;
    *rstd = r;
}

void zero__layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                             const float *weight, const float *bias, size_t BT, size_t C,
                             int threads) {
    ZERO_ASSERT(out && mean && rstd && inp && weight && bias && C > 0);
    int nt = kthreads(BT * C, threads);
#pragma omp parallel for num_threads(nt) schedule(static)
    for (size_t i = 0; i < BT; i++)
        ln_row(out + i * C, mean + i, rstd + i, inp + i * C, weight, bias, C);
}

void zero__layernorm_forward_lp(void *out, float *mean, float *rstd, const void *inp,
                                const void *weight, const void *bias, zero_dtype_t dt, size_t BT,
                                size_t C, int threads) {
    ZERO_ASSERT(out && mean && rstd && inp && weight && bias && C > 0);
    const size_t es = zero_dtype_size(dt);
    int nt = kthreads(BT * C, threads);
#pragma omp parallel num_threads(nt)
    {
        /* x, o, w, b rows in fp32; w and b widened once per thread */
        float *x = zero__kscratch(ZERO__KS_ROWS, 4 * C * sizeof(float));
        float *o = x + C, *w = o + C, *b = w + C;
        zero__widen(w, weight, C, dt);
        zero__widen(b, bias, C, dt);
#pragma omp for schedule(static)
        for (size_t i = 0; i < BT; i++) {
            zero__widen(x, (const char *)inp + i * C * es, C, dt);
            ln_row(o, mean + i, rstd + i, x, w, b, C);
            zero__narrow((char *)out + i * C * es, o, C, dt);
        }
    }
}

/* Backward of rows [r0, r1): dinp += ..., and dweight/dbias += into dw/db (may be NULL). */
static inline void ln_backward_rows(float *dinp, float *dw, float *db, const float *dout,
                                    const float *inp, const float *weight, const float *mean,
                                    const float *rstd, size_t r0, size_t r1, size_t C) {
    for (size_t i = r0; i < r1; i++) {
        const float *dy = dout + i * C;
        const float *x = inp + i * C;
        float *dx = dinp + i * C;
        const float m = mean[i], r = rstd[i];
        float a = 0.0f, b = 0.0f; /* sum(w dy), sum(w dy xhat) */
#pragma omp simd reduction(+ : a, b)
        for (size_t j = 0; j < C; j++) {
            float xhat = (x[j] - m) * r;
            float wdy = weight[j] * dy[j];
            a += wdy;
            b += wdy * xhat;
        }
        a /= (float)C;
        b /= (float)C;
        if (dw) {
#pragma omp simd
            for (size_t j = 0; j < C; j++) {
                float xhat = (x[j] - m) * r;
                dx[j] += r * (weight[j] * dy[j] - a - xhat * b);
                dw[j] += xhat * dy[j];
                db[j] += dy[j];
            }
        } else {
#pragma omp simd
            for (size_t j = 0; j < C; j++) {
                float xhat = (x[j] - m) * r;
                dx[j] += r * (weight[j] * dy[j] - a - xhat * b);
            }
        }
    }
}

void zero__layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                              const float *inp, const float *weight, const float *mean,
                              const float *rstd, size_t BT, size_t C, int threads) {
    ZERO_ASSERT(dinp && dout && inp && weight && mean && rstd && C > 0);
    ZERO_ASSERT((dweight == NULL) == (dbias == NULL));
    int nt = kthreads(BT * C, threads);
    if (nt > (int)BT) nt = BT > 0 ? (int)BT : 1;
    float *part = NULL;
    if (nt > 1 && dweight) {
        /* 2 C floats per thread, tiny next to the (BT, C) tensors read here. If it cannot be
         * allocated we fall back to one thread writing dweight/dbias directly. */
        part = calloc((size_t)nt * 2 * C, sizeof(float));
        if (!part) nt = 1;
    }
    if (nt == 1) {
        ln_backward_rows(dinp, dweight, dbias, dout, inp, weight, mean, rstd, 0, BT, C);
        free(part);
        return;
    }
#pragma omp parallel num_threads(nt)
    {
        int id, n;
        kteam(&id, &n);
        size_t r0 = BT * (size_t)id / (size_t)n, r1 = BT * (size_t)(id + 1) / (size_t)n;
        float *dw = part ? part + (size_t)id * 2 * C : NULL;
        float *db = part ? dw + C : NULL;
        ln_backward_rows(dinp, dw, db, dout, inp, weight, mean, rstd, r0, r1, C);
#pragma omp barrier
        if (part) {
            /* reduce the partials in thread order; columns split across threads */
            size_t c0 = C * (size_t)id / (size_t)n, c1 = C * (size_t)(id + 1) / (size_t)n;
            for (int k = 0; k < n; k++) {
                const float *pw = part + (size_t)k * 2 * C, *pb = pw + C;
                for (size_t j = c0; j < c1; j++) {
                    dweight[j] += pw[j];
                    dbias[j] += pb[j];
                }
            }
        }
    }
    free(part);
}

void zero__layernorm_backward_lp(void *dinp, void *dweight, void *dbias, const void *dout,
                                 const void *inp, const void *weight, const float *mean,
                                 const float *rstd, zero_dtype_t dt, size_t BT, size_t C,
                                 int threads) {
    ZERO_ASSERT(dinp && dout && inp && weight && mean && rstd && C > 0);
    ZERO_ASSERT((dweight == NULL) == (dbias == NULL));
    const size_t es = zero_dtype_size(dt);
    int nt = kthreads(BT * C, threads);
    if (nt > (int)BT) nt = BT > 0 ? (int)BT : 1;
    /* dweight/dbias: fp32 partials per thread over contiguous row blocks, added in thread order
     * and rounded once, so a 16-bit gradient sees one rounding whatever BT is. */
    float *part = NULL;
    if (dweight) {
        part = calloc((size_t)nt * 2 * C, sizeof(float));
        ZERO_ASSERT(part != NULL);
    }
#pragma omp parallel num_threads(nt)
    {
        int id, n;
        kteam(&id, &n);
        size_t r0 = BT * (size_t)id / (size_t)n, r1 = BT * (size_t)(id + 1) / (size_t)n;
        float *x = zero__kscratch(ZERO__KS_ROWS, 4 * C * sizeof(float));
        float *dy = x + C, *dx = dy + C, *w = dx + C;
        float *dw = part ? part + (size_t)id * 2 * C : NULL;
        float *db = part ? dw + C : NULL;
        zero__widen(w, weight, C, dt);
        for (size_t i = r0; i < r1; i++) {
            zero__widen(x, (const char *)inp + i * C * es, C, dt);
            zero__widen(dy, (const char *)dout + i * C * es, C, dt);
            zero__widen(dx, (const char *)dinp + i * C * es, C, dt);
            ln_backward_rows(dx, dw, db, dy, x, w, mean + i, rstd + i, 0, 1, C);
            zero__narrow((char *)dinp + i * C * es, dx, C, dt);
        }
#pragma omp barrier
        if (part) {
            size_t c0, c1;
            kslice(C, 32, &c0, &c1);
            for (size_t j0 = c0; j0 < c1; j0 += 256) {
                size_t wd = ZERO_MIN((size_t)256, c1 - j0);
                float aw[256], ab[256];
                zero__widen(aw, (const char *)dweight + j0 * es, wd, dt);
                zero__widen(ab, (const char *)dbias + j0 * es, wd, dt);
                float sw[256] = {0}, sb[256] = {0};
                for (int k = 0; k < n; k++) {
                    const float *pw = part + (size_t)k * 2 * C, *pb = pw + C;
                    for (size_t j = 0; j < wd; j++) {
                        sw[j] += pw[j0 + j];
                        sb[j] += pb[j0 + j];
                    }
                }
                for (size_t j = 0; j < wd; j++) {
                    aw[j] += sw[j];
                    ab[j] += sb[j];
                }
                zero__narrow((char *)dweight + j0 * es, aw, wd, dt);
                zero__narrow((char *)dbias + j0 * es, ab, wd, dt);
            }
        }
    }
    free(part);
}
