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
 * 16-bit I/O: a task widens its head's q, k, v (and dO, dq, dk, dv) into per-thread fp32
 * scratch and runs the same block functions; the probabilities stay fp32 (one (B, NH, T, T)
 * buffer shared by all layers, so fp32 costs little memory and keeps the softmax exact), and
 * the GEMMs inside stay fp32 sgemm (about 3% of the model's FLOPs at T = 128).
 */
#include "kernels.h"
#include "kernels_lp.h"
#include "kmath.h"
#include "lp_io.h"

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

/* Forward of query rows [r0, r1) of one head. q (ld lq) and o (ld lo) point at row r0; k, v
 * (ld lkv) at row 0; P (ld T) at row r0 of the head's (T, T) probabilities. */
static void fwd_block(float *o, size_t lo, float *P, size_t T, const float *q, size_t lq,
                      const float *k, const float *v, size_t lkv, size_t r0, size_t r1, size_t hs,
                      float scale) {
    size_t m = r1 - r0;
    zero__sgemm(0, 1, m, r1, hs, scale, q, lq, k, lkv, 0.0f, P, T, 1);
    for (size_t i = 0; i < m; i++) causal_softmax_row(P + i * T, r0 + i, r1);
    zero__sgemm(0, 0, m, hs, r1, 1.0f, P, T, v, lkv, 0.0f, o, lo, 1);
}

/* Backward of one head, all query blocks in order. q, k, v (ld li), dq, dk, dv (ld ld) and dO
 * (ld lo) point at row 0; P at the head's (T, T) probabilities; dS: QB * T scratch floats. */
static void bwd_head(float *dq, float *dk, float *dv, size_t ld, float *dS, const float *dO,
                     size_t lo, const float *q, const float *k, const float *v, size_t li,
                     const float *P, size_t T, size_t hs, float scale) {
    for (size_t r0 = 0; r0 < T; r0 += QB) {
        size_t r1 = ZERO_MIN(T, r0 + QB), m = r1 - r0;
        const float *qb = q + r0 * li, *dOb = dO + r0 * lo, *Pb = P + r0 * T;
        float *dqb = dq + r0 * ld;
        /* dP(m, r1) = dO(m, hs) · V(r1, hs)ᵀ, leading dimension r1 */
        zero__sgemm(0, 1, m, r1, hs, 1.0f, dOb, lo, v, li, 0.0f, dS, r1, 1);
        for (size_t i = 0; i < m; i++) {
            size_t t = r0 + i;
            const float *p = Pb + i * T;
            float *d = dS + i * r1;
            float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
            for (size_t s = 0; s <= t; s++) dot += p[s] * d[s];
#pragma omp simd
            for (size_t s = 0; s <= t; s++) d[s] = p[s] * (d[s] - dot);
            for (size_t s = t + 1; s < r1; s++) d[s] = 0.0f;
        }
        /* dV(r1, hs) += P(m, r1)ᵀ · dO(m, hs) */
        zero__sgemm(1, 0, r1, hs, m, 1.0f, Pb, T, dOb, lo, 1.0f, dv, ld, 1);
        /* dQ(m, hs) += scale dS(m, r1) · K(r1, hs) */
        zero__sgemm(0, 0, m, hs, r1, scale, dS, r1, k, li, 1.0f, dqb, ld, 1);
        /* dK(r1, hs) += scale dS(m, r1)ᵀ · Q(m, hs) */
        zero__sgemm(1, 0, r1, hs, m, scale, dS, r1, qb, li, 1.0f, dk, ld, 1);
    }
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
        size_t r0 = blk * QB, r1 = ZERO_MIN(T, r0 + QB);
        const float *q = inp + (b * T + r0) * C3 + h * hs;
        const float *k = inp + b * T * C3 + C + h * hs;
        const float *v = inp + b * T * C3 + 2 * C + h * hs;
        float *P = att + (bh * T + r0) * T;
        fwd_block(out + (b * T + r0) * C + h * hs, C, P, T, q, C3, k, v, C3, r0, r1, hs, scale);
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
        int id, team;
        kteam(&id, &team);
        float *dS = scratch + (size_t)id * QB * T;
#pragma omp for schedule(dynamic, 1)
        for (size_t bh = 0; bh < ntask; bh++) {
            size_t b = bh / NH, h = bh % NH;
            const float *in = inp + b * T * C3 + h * hs;
            float *d = dinp + b * T * C3 + h * hs;
            bwd_head(d, d + C, d + 2 * C, C3, dS, dout + b * T * C + h * hs, C, in, in + C,
                     in + 2 * C, C3, att + bh * T * T, T, hs, scale);
        }
    }
}

/* ------------------------------------------------------------------------------ 16-bit I/O */

/* Per thread: dS (QB, T), then q, k, v, dO, dq, dk, dv (T, hs) each in fp32. The forward uses
 * the first q, k, v and o = dO's place. */
size_t zero__attention_scratch_count_lp(size_t T, size_t hs, int threads) {
    size_t nt = threads < 1 ? 1 : (size_t)threads;
    return nt * ((size_t)QB * T + 7 * T * hs);
}

/* dst(rows, hs) fp32 contiguous <- src rows of dt with stride ld (elements). */
static void widen_rows(float *dst, const void *src, size_t ld, size_t rows, size_t hs,
                       zero_dtype_t dt) {
    const size_t es = zero_dtype_size(dt);
    for (size_t i = 0; i < rows; i++)
        zero__widen(dst + i * hs, (const char *)src + i * ld * es, hs, dt);
}

static void narrow_rows(void *dst, size_t ld, const float *src, size_t rows, size_t hs,
                        zero_dtype_t dt) {
    const size_t es = zero_dtype_size(dt);
    for (size_t i = 0; i < rows; i++) zero__narrow((char *)dst + i * ld * es, src + i * hs, hs, dt);
}

void zero__attention_forward_lp(void *out, float *att, const void *inp, float *scratch,
                                zero_dtype_t dt, size_t B, size_t T, size_t C, size_t NH,
                                int threads) {
    ZERO_ASSERT(out && att && inp && scratch && NH > 0 && C % NH == 0 && threads >= 1);
    const size_t hs = C / NH, C3 = 3 * C, es = zero_dtype_size(dt);
    const float scale = 1.0f / sqrtf((float)hs);
    const size_t nblk = (T + QB - 1) / QB;
    const size_t ntask = B * NH * nblk;
    const size_t per = zero__attention_scratch_count_lp(T, hs, 1);
    int nt = (int)ZERO_MIN((size_t)threads, ntask);
    if (nt < 1) nt = 1;
#pragma omp parallel num_threads(nt)
    {
        int id, team;
        kteam(&id, &team);
        float *q = scratch + (size_t)id * per + (size_t)QB * T;
        float *k = q + T * hs, *v = k + T * hs, *o = v + T * hs;
#pragma omp for schedule(dynamic, 1)
        for (size_t task = 0; task < ntask; task++) {
            size_t blk = nblk - 1 - task % nblk;
            size_t bh = task / nblk, b = bh / NH, h = bh % NH;
            size_t r0 = blk * QB, r1 = ZERO_MIN(T, r0 + QB), m = r1 - r0;
            const char *base = (const char *)inp + (b * T * C3 + h * hs) * es;
            widen_rows(q, base + r0 * C3 * es, C3, m, hs, dt);
            widen_rows(k, base + C * es, C3, r1, hs, dt);
            widen_rows(v, base + 2 * C * es, C3, r1, hs, dt);
            fwd_block(o, hs, att + (bh * T + r0) * T, T, q, hs, k, v, hs, r0, r1, hs, scale);
            narrow_rows((char *)out + ((b * T + r0) * C + h * hs) * es, C, o, m, hs, dt);
        }
    }
}

void zero__attention_backward_lp(void *dinp, float *scratch, const void *dout, const void *inp,
                                 const float *att, zero_dtype_t dt, size_t B, size_t T, size_t C,
                                 size_t NH, int threads) {
    ZERO_ASSERT(dinp && scratch && dout && inp && att && NH > 0 && C % NH == 0 && threads >= 1);
    const size_t hs = C / NH, C3 = 3 * C, es = zero_dtype_size(dt);
    const float scale = 1.0f / sqrtf((float)hs);
    const size_t ntask = B * NH, per = zero__attention_scratch_count_lp(T, hs, 1);
    int nt = (int)ZERO_MIN((size_t)threads, ntask);
    if (nt < 1) nt = 1;
#pragma omp parallel num_threads(nt)
    {
        int id, team;
        kteam(&id, &team);
        float *dS = scratch + (size_t)id * per;
        float *q = dS + (size_t)QB * T;
        float *k = q + T * hs, *v = k + T * hs, *dO = v + T * hs;
        float *dq = dO + T * hs, *dk = dq + T * hs, *dv = dk + T * hs;
#pragma omp for schedule(dynamic, 1)
        for (size_t bh = 0; bh < ntask; bh++) {
            size_t b = bh / NH, h = bh % NH;
            const char *in = (const char *)inp + (b * T * C3 + h * hs) * es;
            char *d = (char *)dinp + (b * T * C3 + h * hs) * es;
            widen_rows(q, in, C3, T, hs, dt);
            widen_rows(k, in + C * es, C3, T, hs, dt);
            widen_rows(v, in + 2 * C * es, C3, T, hs, dt);
            widen_rows(dO, (const char *)dout + (b * T * C + h * hs) * es, C, T, hs, dt);
            widen_rows(dq, d, C3, T, hs, dt);
            widen_rows(dk, d + C * es, C3, T, hs, dt);
            widen_rows(dv, d + 2 * C * es, C3, T, hs, dt);
            bwd_head(dq, dk, dv, hs, dS, dO, hs, q, k, v, hs, att + bh * T * T, T, hs, scale);
            narrow_rows(d, C3, dq, T, hs, dt);
            narrow_rows(d + C * es, C3, dk, T, hs, dt);
            narrow_rows(d + 2 * C * es, C3, dv, T, hs, dt);
        }
    }
}
