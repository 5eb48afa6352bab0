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
 */
#include "kernels.h"
#include "kmath.h"

#include "core/core_internal.h"

#include <math.h>

void zero__softmax_ce_forward(float *losses, float *lse, const float *logits,
                              const int32_t *targets, size_t BT, size_t V, size_t Vp, int threads) {
    ZERO_ASSERT(losses && logits && targets && V > 0 && Vp >= V);
    int nt = kthreads(BT * V, threads);
#pragma omp parallel for num_threads(nt) schedule(static)
    for (size_t i = 0; i < BT; i++) {
        const float *x = logits + i * Vp;
        float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
        for (size_t j = 0; j < V; j++) mx = x[j] > mx ? x[j] : mx;
        float s = 0.0f;
#pragma omp simd reduction(+ : s)
        for (size_t j = 0; j < V; j++) s += kexp(x[j] - mx);
        float l = mx + logf(s);
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
#pragma omp parallel for num_threads(nt) schedule(static)
    for (size_t i = 0; i < BT; i++) {
        const float *x = logits + i * Vp;
        float *dx = dlogits + i * Vp;
        int32_t tg = targets[i];
        float d = tg < 0 ? 0.0f : dlosses[i];
        float l = lse[i];
        /* reads x[j] before writing dx[j]: safe when dlogits == logits */
#pragma omp simd
        for (size_t j = 0; j < V; j++) dx[j] = kexp(x[j] - l) * d;
        for (size_t j = V; j < Vp; j++) dx[j] = 0.0f;
        if (tg >= 0) dx[tg] -= d;
    }
}

void zero__softmax_ce_forward_backward(float *losses, float *dlogits, const float *logits,
                                       const int32_t *targets, float dloss, size_t BT, size_t V,
                                       size_t Vp, int threads) {
    ZERO_ASSERT(losses && dlogits && logits && targets && V > 0 && Vp >= V);
    int nt = kthreads(BT * V, threads);
#pragma omp parallel for num_threads(nt) schedule(static)
    for (size_t i = 0; i < BT; i++) {
        const float *x = logits + i * Vp;
        float *dx = dlogits + i * Vp;
        float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
        for (size_t j = 0; j < V; j++) mx = x[j] > mx ? x[j] : mx;
        float s = 0.0f;
#pragma omp simd reduction(+ : s)
        for (size_t j = 0; j < V; j++) s += kexp(x[j] - mx);
        float l = mx + logf(s);
        int32_t tg = targets[i];
        ZERO_DEBUG_ASSERT(tg < (int32_t)V);
        /* read x[tg] before the row is overwritten (dlogits may alias logits) */
        losses[i] = tg < 0 ? 0.0f : l - x[tg];
        float d = tg < 0 ? 0.0f : dloss;
#pragma omp simd
        for (size_t j = 0; j < V; j++) dx[j] = kexp(x[j] - l) * d;
        for (size_t j = V; j < Vp; j++) dx[j] = 0.0f;
        if (tg >= 0) dx[tg] -= d;
    }
}
