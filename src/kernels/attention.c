/* attention.c — causal multi-head self-attention forward/backward on GEMMs per head.
 *
 * Per (batch b, head h) the T query rows are cut into blocks of QB rows; block [r0, r1) only
 * sees keys [0, r1), so the GEMMs skip the masked upper triangle except within a block
 * (computed, then zeroed). Forward per block: S = Q Kᵀ / sqrt(hs) written straight into att,
 * row-wise causal softmax in place, O = P V. Backward per (b, h), blocks in order: dP = dO Vᵀ
 * (scratch), dS = P ∘ (dP - rowsum(P ∘ dP)) in place, dV += Pᵀ dO, dQ += dS K / sqrt(hs),
 * dK += dSᵀ Q / sqrt(hs).
 * Threads: forward tasks are (b, h, block) and write disjoint outputs; backward tasks are (b, h)
 * because dK/dV of a head receive from all of its blocks. Each GEMM runs single-threaded inside
 * the task, so results do not depend on the thread count or the schedule.
 * Invariant: att entries s > t inside a computed block are written as 0, which backward relies
 * on (P beyond the diagonal contributes nothing to dV).
 */
#include "kernels.h"
#include "kmath.h"

#include "core/core_internal.h"

#include <math.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define QB 128 /* query rows per block: GEMMs of QB x r1 x hs */

size_t zero__attention_scratch_count(size_t T, int threads) {
    size_t nt = threads < 1 ? 1 : (size_t)threads;
    return nt * (size_t)QB * T;
}

/* softmax over s in [0, t] of row p (in place); p[s] = 0 for s in (t, n). */
static void causal_softmax_row(float *p, size_t t, size_t n) {
    float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
    for (size_t s = 0; s <= t; s++) mx = p[s] > mx ? p[s] : mx;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (size_t s = 0; s <= t; s++) {
        float e = kexp(p[s] - mx);
        p[s] = e;
        sum += e;
    }
    float inv = 1.0f / sum;
#pragma omp simd
    for (size_t s = 0; s <= t; s++) p[s] *= inv;
    for (size_t s = t + 1; s < n; s++) p[s] = 0.0f;
}

void zero__attention_forward(float *out, float *att, const float *inp, size_t B, size_t T, size_t C,
                             size_t NH, int threads) {
    ZERO_ASSERT(out && att && inp && NH > 0 && C % NH == 0 && threads >= 1);
    const size_t hs = C / NH, C3 = 3 * C;
    const float scale = 1.0f / sqrtf((float)hs);
    const size_t nblk = (T + QB - 1) / QB;
    const size_t ntask = B * NH * nblk;
    int nt = (int)ZERO_MIN((size_t)threads, ntask);
    if (nt < 1) nt = 1;
        /* dynamic: blocks late in the sequence cost up to T/QB times more than early ones */
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
    for (size_t task = 0; task < ntask; task++) {
        size_t blk = nblk - 1 - task % nblk; /* big blocks first for better balance */
        size_t bh = task / nblk, b = bh / NH, h = bh % NH;
        size_t r0 = blk * QB, r1 = ZERO_MIN(T, r0 + QB), m = r1 - r0;
        const float *q = inp + (b * T + r0) * C3 + h * hs;
        const float *k = inp + b * T * C3 + C + h * hs;
        const float *v = inp + b * T * C3 + 2 * C + h * hs;
        float *P = att + (bh * T + r0) * T;
        zero__sgemm(0, 1, m, r1, hs, scale, q, C3, k, C3, 0.0f, P, T, 1);
        for (size_t i = 0; i < m; i++) causal_softmax_row(P + i * T, r0 + i, r1);
        zero__sgemm(0, 0, m, hs, r1, 1.0f, P, T, v, C3, 0.0f, out + (b * T + r0) * C + h * hs, C,
                    1);
    }
}

void zero__attention_backward(float *dinp, float *scratch, const float *dout, const float *inp,
                              const float *att, size_t B, size_t T, size_t C, size_t NH,
                              int threads) {
    ZERO_ASSERT(dinp && scratch && dout && inp && att && NH > 0 && C % NH == 0 && threads >= 1);
    const size_t hs = C / NH, C3 = 3 * C;
    const float scale = 1.0f / sqrtf((float)hs);
    const size_t ntask = B * NH;
    int nt = (int)ZERO_MIN((size_t)threads, ntask);
    if (nt < 1) nt = 1;
#pragma omp parallel num_threads(nt)
    {
        int id = 0;
#ifdef _OPENMP
        id = omp_get_thread_num();
#endif
        float *dS = scratch + (size_t)id * QB * T;
#pragma omp for schedule(dynamic, 1)
        for (size_t bh = 0; bh < ntask; bh++) {
            size_t b = bh / NH, h = bh % NH;
            const float *kk = inp + b * T * C3 + C + h * hs;
            const float *vv = inp + b * T * C3 + 2 * C + h * hs;
            float *dk = dinp + b * T * C3 + C + h * hs;
            float *dv = dinp + b * T * C3 + 2 * C + h * hs;
            for (size_t r0 = 0; r0 < T; r0 += QB) {
                size_t r1 = ZERO_MIN(T, r0 + QB), m = r1 - r0;
                const float *q = inp + (b * T + r0) * C3 + h * hs;
                float *dq = dinp + (b * T + r0) * C3 + h * hs;
                const float *dO = dout + (b * T + r0) * C + h * hs;
                const float *P = att + (bh * T + r0) * T;
                /* dP(m, r1) = dO(m, hs) · V(r1, hs)ᵀ, leading dimension r1 */
                zero__sgemm(0, 1, m, r1, hs, 1.0f, dO, C, vv, C3, 0.0f, dS, r1, 1);
                for (size_t i = 0; i < m; i++) {
                    size_t t = r0 + i;
                    const float *p = P + i * T;
                    float *d = dS + i * r1;
                    float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
                    for (size_t s = 0; s <= t; s++) dot += p[s] * d[s];
#pragma omp simd
                    for (size_t s = 0; s <= t; s++) d[s] = p[s] * (d[s] - dot);
                    for (size_t s = t + 1; s < r1; s++) d[s] = 0.0f;
                }
                /* dV(r1, hs) += P(m, r1)ᵀ · dO(m, hs) */
                zero__sgemm(1, 0, r1, hs, m, 1.0f, P, T, dO, C, 1.0f, dv, C3, 1);
                /* dQ(m, hs) += scale dS(m, r1) · K(r1, hs) */
                zero__sgemm(0, 0, m, hs, r1, scale, dS, r1, kk, C3, 1.0f, dq, C3, 1);
                /* dK(r1, hs) += scale dS(m, r1)ᵀ · Q(m, hs) */
                zero__sgemm(1, 0, r1, hs, m, scale, dS, r1, q, C3, 1.0f, dk, C3, 1);
            }
        }
    }
}
