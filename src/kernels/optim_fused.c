/* optim_fused.c — the optimizer step's fused pass (scale + AdamW + rounding into 16-bit
 * parameters + zeroing of the gradient) and gradient accumulation in one pass (widen + add +
 * zeroing of the source), multi-threaded; plus their naive twins for the tests.
 *
 * Why: each of those used to be its own streaming pass over hundreds of MiB (optim_fused.h).
 * Each thread walks its slice in blocks of BLOCK elements: a 16-bit operand is widened into a
 * stack buffer, the fp32 arithmetic runs on the block while it sits in L1, and the rounding and
 * zeroing touch the block again from cache, so memory sees one read and one write per operand.
 * Invariants: the arithmetic is zero__scale's and zero__adamw_update's, expression for
 * expression (the build uses ISO C, so no FMA contraction changes a rounding), and conversions
 * are core's RNE array functions; everything is elementwise, so the slicing by threads and
 * blocks cannot change a bit. Slices are cut on multiples of 32 elements (64 bytes of a 16-bit
 * array), so no two threads write one cache line.
 * Not here: the sum of squares (vector.c), which ranges to update (the engine).
 */
#include "optim_fused.h"

#include "kernels.h"
#include "kmath.h"

#include "core/core_internal.h"

#include <math.h>
#include <string.h>

enum { BLOCK = 1024, GRANULE = 32 };

static void *at(void *buf, size_t i, zero_dtype_t dt) {
    return (unsigned char *)buf + i * zero_dtype_size(dt);
}

/* fp32 view of k elements of x (dtype dt): x itself when fp32, else widened into buf. */
static const float *as_fp32(float *buf, const void *x, size_t k, zero_dtype_t dt) {
    if (dt == ZERO_DTYPE_FP32) return x;
    zero__widen(buf, x, k, dt);
    return buf;
}

/* The per-step constants of zero__adamw_update, computed the same way. */
typedef struct adamw_consts {
    float lr, beta1, beta2, eps, wd, bc1, bc2, b1c, b2c, gscale;
} adamw_consts_t;

/* zero__scale's multiply, then zero__adamw_update's loop body, over one block. */
static void adamw_block(float *restrict p, const float *restrict g, float *restrict m,
                        float *restrict v, size_t k, const adamw_consts_t *c) {
    const float lr = c->lr, beta1 = c->beta1, beta2 = c->beta2, eps = c->eps, wd = c->wd;
    const float bc1 = c->bc1, bc2 = c->bc2, b1c = c->b1c, b2c = c->b2c, s = c->gscale;
#pragma omp simd
    for (size_t i = 0; i < k; i++) {
        float gi = g[i] * s;
        float mi = beta1 * m[i] + b1c * gi;
        float vi = beta2 * v[i] + b2c * gi * gi;
        m[i] = mi;
        v[i] = vi;
        float pi = p[i];
        float upd = (mi * bc1) / (sqrtf(vi * bc2) + eps);
        p[i] = pi - lr * (upd + wd * pi);
    }
}

typedef struct adamw_args {
    float *master, *m, *v;
    void *params, *grads;
    zero_dtype_t param_dt, grad_dt;
    int zero_grads;
    adamw_consts_t c;
} adamw_args_t;

static void adamw_span(const adamw_args_t *a, size_t lo, size_t hi) {
    float gbuf[BLOCK];
    for (size_t i = lo; i < hi; i += BLOCK) {
        const size_t k = ZERO_MIN((size_t)BLOCK, hi - i);
        const float *g = as_fp32(gbuf, at(a->grads, i, a->grad_dt), k, a->grad_dt);
        adamw_block(a->master + i, g, a->m + i, a->v + i, k, &a->c);
        if (a->zero_grads) memset(at(a->grads, i, a->grad_dt), 0, k * zero_dtype_size(a->grad_dt));
        if (a->params) zero__narrow(at(a->params, i, a->param_dt), a->master + i, k, a->param_dt);
    }
}

void zero__adamw_fused(float *master, void *params, zero_dtype_t param_dt, void *grads,
                       zero_dtype_t grad_dt, float gscale, int zero_grads, float *m, float *v,
                       size_t n, const zero__adamw_hp_t *hp, int threads) {
    if (n == 0) return;
    ZERO_ASSERT(master && grads && m && v && hp && hp->t >= 1);
    ZERO_ASSERT(!params || param_dt == ZERO_DTYPE_BF16 || param_dt == ZERO_DTYPE_FP16);
    adamw_args_t a = {.master = master,
                      .m = m,
                      .v = v,
                      .params = params,
                      .grads = grads,
                      .param_dt = param_dt,
                      .grad_dt = grad_dt,
                      .zero_grads = zero_grads};
    a.c.lr = hp->lr;
    a.c.beta1 = hp->beta1;
    a.c.beta2 = hp->beta2;
    a.c.eps = hp->eps;
    a.c.wd = hp->weight_decay;
    /* as in zero__adamw_update: bias corrections in double, rounded once */
    a.c.bc1 = (float)(1.0 / (1.0 - pow((double)hp->beta1, (double)hp->t)));
    a.c.bc2 = (float)(1.0 / (1.0 - pow((double)hp->beta2, (double)hp->t)));
    a.c.b1c = 1.0f - hp->beta1;
    a.c.b2c = 1.0f - hp->beta2;
    a.c.gscale = gscale;
    const int nt = kthreads(n, threads);
    if (nt == 1) {
        adamw_span(&a, 0, n);
        return;
    }
#pragma omp parallel num_threads(nt)
    {
        size_t lo, hi;
        kslice(n, GRANULE, &lo, &hi);
        if (hi > lo) adamw_span(&a, lo, hi);
    }
}

static void acc_span(void *acc, zero_dtype_t acc_dt, void *src, zero_dtype_t src_dt, size_t lo,
                     size_t hi, int overwrite, int zero_src) {
    float abuf[BLOCK], sbuf[BLOCK];
    for (size_t i = lo; i < hi; i += BLOCK) {
        const size_t k = ZERO_MIN((size_t)BLOCK, hi - i);
        void *sp = at(src, i, src_dt);
        if (acc_dt == ZERO_DTYPE_FP32) {
            float *restrict ap = (float *)acc + i;
            if (overwrite) {
                if (src_dt == ZERO_DTYPE_FP32)
                    memcpy(ap, sp, k * sizeof(float));
                else
                    (void)as_fp32(ap, sp, k, src_dt); /* widens straight into acc */
            } else {
                const float *restrict s = as_fp32(sbuf, sp, k, src_dt);
#pragma omp simd
                for (size_t j = 0; j < k; j++) ap[j] += s[j];
            }
        } else {
            ZERO_ASSERT(!overwrite);
            void *apv = at(acc, i, acc_dt);
            float *restrict a = abuf;
            (void)as_fp32(a, apv, k, acc_dt);
            const float *restrict s = as_fp32(sbuf, sp, k, src_dt);
#pragma omp simd
            for (size_t j = 0; j < k; j++) a[j] += s[j];
            zero__narrow(apv, a, k, acc_dt);
        }
        if (zero_src) memset(sp, 0, k * zero_dtype_size(src_dt));
    }
}

void zero__acc_add_fused(void *acc, zero_dtype_t acc_dt, void *src, zero_dtype_t src_dt, size_t n,
                         int overwrite, int zero_src, int threads) {
    if (n == 0) return;
    ZERO_ASSERT(acc && src && acc != src);
    ZERO_ASSERT(!overwrite || acc_dt == ZERO_DTYPE_FP32);
    const int nt = kthreads(n, threads);
    if (nt == 1) {
        acc_span(acc, acc_dt, src, src_dt, 0, n, overwrite, zero_src);
        return;
    }
#pragma omp parallel num_threads(nt)
    {
        size_t lo, hi;
        kslice(n, GRANULE, &lo, &hi);
        if (hi > lo) acc_span(acc, acc_dt, src, src_dt, lo, hi, overwrite, zero_src);
    }
}

/* ------------------------------------------------------------------------------ references */

static float ref_widen(const void *x, size_t i, zero_dtype_t dt) {
    if (dt == ZERO_DTYPE_FP32) return ((const float *)x)[i];
    uint16_t h = ((const uint16_t *)x)[i];
    return dt == ZERO_DTYPE_BF16 ? zero_bf16_to_fp32(h) : zero_fp16_to_fp32(h);
}

static void ref_store(void *x, size_t i, zero_dtype_t dt, float f) {
    if (dt == ZERO_DTYPE_FP32)
        ((float *)x)[i] = f;
    else
        ((uint16_t *)x)[i] = dt == ZERO_DTYPE_BF16 ? zero_fp32_to_bf16(f) : zero_fp32_to_fp16(f);
}

void zero__ref_adamw_fused(float *master, void *params, zero_dtype_t param_dt, void *grads,
                           zero_dtype_t grad_dt, float gscale, int zero_grads, float *m, float *v,
                           size_t n, const zero__adamw_hp_t *hp) {
    for (size_t i = 0; i < n; i++) {
        float g = ref_widen(grads, i, grad_dt);
        zero__ref_scale(&g, gscale, 1);
        zero__ref_adamw_update(&master[i], &g, &m[i], &v[i], 1, hp->lr, hp->beta1, hp->beta2,
                               hp->eps, hp->weight_decay, hp->t);
        if (params) ref_store(params, i, param_dt, master[i]);
        if (zero_grads) ref_store(grads, i, grad_dt, 0.0f);
    }
}

void zero__ref_acc_add_fused(void *acc, zero_dtype_t acc_dt, void *src, zero_dtype_t src_dt,
                             size_t n, int overwrite, int zero_src) {
    for (size_t i = 0; i < n; i++) {
        float s = ref_widen(src, i, src_dt);
        ref_store(acc, i, acc_dt, overwrite ? s : ref_widen(acc, i, acc_dt) + s);
        if (zero_src) ref_store(src, i, src_dt, 0.0f);
    }
}
