/* lm_head.c — the backward of the LM head fused with softmax + cross-entropy, chunked over the
 * vocabulary.
 *
 * Why: at GPT-2's vocabulary (V = 50257) the gradient of the logits is a (BT, V) fp32 tensor,
 * 51 MB at BT = 256, which the unfused model wrote in its forward and both backward GEMMs read
 * again. Here it is made ZERO__LM_HEAD_CHUNK columns (the weight's rows) at a time, from the
 * stored logits and each row's log-sum-exp, into a scratch that stays in cache, and both GEMMs
 * run on that chunk: dinp += dl · W(chunk), dW(chunk) += dlᵀ · inp. No GEMM is recomputed (the
 * chunks split the GEMMs' K and M dimensions, which adds no FLOPs), and the forward stays the
 * unfused one (one GEMM over the whole vocabulary, then zero__softmax_ce_forward): the loss is
 * bitwise the unfused loss. The forward is not chunked: on the machine of docs/benchmarks.md
 * the head GEMM in 1024-8192-column pieces cost more than the pass over the logits it saves.
 * Results: each dlogits element is computed as softmax_ce_forward_backward computes it
 * (row_exp_scale, then the target's -dloss); dinp is summed chunk by chunk (beta = 0, then 1) and
 * dW's rows come from GEMMs of the chunk's height, so both are the unfused values within float
 * rounding, and bitwise only when V fits one chunk (tests/kernels/test_lm_head.c).
 */
#include "isa.h"
#include "kernels.h"
#include "kmath.h"

#include "core/core_internal.h"

size_t zero__lm_head_scratch_count(size_t BT, size_t V) {
    return BT * ZERO_MIN(V, (size_t)ZERO__LM_HEAD_CHUNK);
}

void zero__lm_head_ce_backward(float *dinp, float *dweight, float *scratch, const float *logits,
                               const float *lse, const float *inp, const float *weight,
                               const int32_t *targets, float dloss, size_t BT, size_t C, size_t V,
                               int threads) {
    ZERO_ASSERT(dinp && dweight && scratch && logits && lse && inp && weight && targets && V > 0 &&
                threads >= 1);
    const zero__isa_kernels_t *k = zero__isa_current();
    float *dl = scratch;
    for (size_t v0 = 0; v0 < V; v0 += ZERO__LM_HEAD_CHUNK) {
        const size_t n = ZERO_MIN((size_t)ZERO__LM_HEAD_CHUNK, V - v0);
        const int nt = kthreads(BT * n, threads);
#pragma omp parallel for num_threads(nt) schedule(static)
        for (size_t i = 0; i < BT; i++) {
            const int32_t tg = targets[i];
            ZERO_DEBUG_ASSERT(tg < (int32_t)V);
            const float d = tg < 0 ? 0.0f : dloss;
            float *row = dl + i * n;
            k->row_exp_scale(row, logits + i * V + v0, lse[i], d, n);
            if (tg >= 0 && (size_t)tg >= v0 && (size_t)tg < v0 + n) row[(size_t)tg - v0] -= d;
        }
        /* dinp(BT, C) (=, then +=) dl(BT, n) · W(chunk)(n, C): NN */
        zero__sgemm(0, 0, BT, C, n, 1.0f, dl, n, weight + v0 * C, C, v0 == 0 ? 0.0f : 1.0f, dinp, C,
                    threads);
        /* dW(chunk)(n, C) += dl(BT, n)ᵀ · inp(BT, C): TN */
        zero__sgemm(1, 0, n, C, BT, 1.0f, dl, n, inp, C, 1.0f, dweight + v0 * C, C, threads);
    }
}
