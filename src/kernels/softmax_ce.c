/* softmax_ce.c — fused softmax + cross-entropy over the vocabulary (first V of Vp columns).
 *
 * The probabilities are never stored: forward keeps only each row's log-sum-exp (BT floats
 * instead of a (BT, Vp) tensor) and backward recomputes softmax from the logits while writing
 * dlogits, in place over the logits if the caller wants. Forward reads each row twice (max, then
 * sum of exp); a row of V = 50257 floats is 200 KB and stays in L2 for the second read.
 * Rows are split across threads; every row is independent, so results do not depend on the
 * thread count. Targets < 0 are ignored positions (loss 0, gradient 0).
 * zero__softmax_ce_forward_backward fuses both for a known, uniform dloss: one DRAM read of each
 * row instead of two (measured at V = 50257: see docs/kernels-matmul.md).
 * The 16-bit variant reads fp32 logits (the model keeps them fp32) and rounds the row's fp32
 * gradient, computed by the same row function into per-thread scratch, into a 16-bit dlogits.
 */
#include "isa.h"
#include "kernels.h"
#include "kernels_lp.h"
#include "kmath.h"
#include "lp_io.h"

#include "core/core_internal.h"

#include <math.h>

/* The row loops (log-sum-exp, exp times the gradient) are built per instruction-set level in
 * isa/spans.c; this file drives them over rows and threads. */
void zero__softmax_ce_forward(float *losses, float *lse, const float *logits,
                              const int32_t *targets, size_t BT, size_t V, size_t Vp, int threads) {
    ZERO_ASSERT(losses && logits && targets && V > 0 && Vp >= V);
    int nt = kthreads(BT * V, threads);
    const zero__isa_kernels_t *k = zero__isa_current();
#pragma omp parallel for num_threads(nt) schedule(static)
    for (size_t i = 0; i < BT; i++) {
        const float *x = logits + i * Vp;
        float l = k->row_lse(x, V);
        if (lse) lse[i] = l;
        int32_t tg = targets[i];
        ZERO_DEBUG_ASSERT(tg < (int32_t)V);
        losses[i] = tg < 0 ? 0.0f : l - x[tg];
    }
}

void zero__softmax_ce_backward(float *dlogits, const float *logits, const float *lse,
                               const float *dlosses, const int32_t *targets, size_t BT, size_t V,
                               size_t Vp, int threads) {
    ZERO_ASSERT(dlogits && logits && lse && dlosses && targets && V > 0 && Vp >= V);
    int nt = kthreads(BT * V, threads);
    const zero__isa_kernels_t *k = zero__isa_current();
#pragma omp parallel for num_threads(nt) schedule(static)
    for (size_t i = 0; i < BT; i++) {
        const float *x = logits + i * Vp;
        float *dx = dlogits + i * Vp;
        int32_t tg = targets[i];
        float d = tg < 0 ? 0.0f : dlosses[i];
        float l = lse[i];
        /* reads x[j] before writing dx[j]: safe when dlogits == logits */
        k->row_exp_scale(dx, x, l, d, V);
        for (size_t j = V; j < Vp; j++) dx[j] = 0.0f;
        if (tg >= 0) dx[tg] -= d;
    }
}

/* One row of the fused forward + backward: returns the loss, writes dx(Vp). */
static inline float ce_row(const zero__isa_kernels_t *k, float *dx, const float *x, int32_t tg,
                           float dloss, size_t V, size_t Vp) {
    float l = k->row_lse(x, V);
    ZERO_DEBUG_ASSERT(tg < (int32_t)V);
    /* read x[tg] before the row is overwritten (dlogits may alias logits) */
    float loss = tg < 0 ? 0.0f : l - x[tg];
    float d = tg < 0 ? 0.0f : dloss;
    k->row_exp_scale(dx, x, l, d, V);
    for (size_t j = V; j < Vp; j++) dx[j] = 0.0f;
    if (tg >= 0) dx[tg] -= d;
    return loss;
}

void zero__softmax_ce_forward_backward(float *losses, float *dlogits, const float *logits,
                                       const int32_t *targets, float dloss, size_t BT, size_t V,
                                       size_t Vp, int threads) {
    ZERO_ASSERT(losses && dlogits && logits && targets && V > 0 && Vp >= V);
    int nt = kthreads(BT * V, threads);
    const zero__isa_kernels_t *k = zero__isa_current();
#pragma omp parallel for num_threads(nt) schedule(static)
    for (size_t i = 0; i < BT; i++)
        losses[i] = ce_row(k, dlogits + i * Vp, logits + i * Vp, targets[i], dloss, V, Vp);
}

void zero__softmax_ce_forward_backward_lp(float *losses, void *dlogits, zero_dtype_t dt,
                                          const float *logits, const int32_t *targets, float dloss,
                                          size_t BT, size_t V, size_t Vp, int threads) {
    ZERO_ASSERT(losses && dlogits && logits && targets && V > 0 && Vp >= V);
    const size_t es = zero_dtype_size(dt);
    int nt = kthreads(BT * V, threads);
    const zero__isa_kernels_t *k = zero__isa_current();
#pragma omp parallel num_threads(nt)
    {
        /* the row's fp32 gradient, rounded once (a V = 50257 row is 200 KB: stays in L2) */
        float *dx = zero__kscratch(ZERO__KS_ROWS, Vp * sizeof(float));
#pragma omp for schedule(static)
        for (size_t i = 0; i < BT; i++) {
            losses[i] = ce_row(k, dx, logits + i * Vp, targets[i], dloss, V, Vp);
            zero__narrow((char *)dlogits + i * Vp * es, dx, Vp, dt);
        }
    }
}
