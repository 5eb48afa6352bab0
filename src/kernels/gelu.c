/* gelu.c — GELU (tanh approximation) forward and backward, elementwise, multi-threaded, in fp32
 * and with 16-bit I/O.
 *
 * One streaming pass each, written as x sigmoid(2u) (the same function as 0.5 x (1 + tanh u)).
 * The sigmoid is evaluated on e = exp(-|2u|) <= 1 only: sigmoid(|2u|) = 1 / (1 + e) and
 * sigmoid(-|2u|) = e / (1 + e), so nothing overflows, the denominator lies in [1, 2], the negative
 * tail keeps its relative accuracy (no 1 + tanh cancellation) and sigmoid (1 - sigmoid) = e / (1 +
 * e)^2 needs no 1 - sigmoid subtraction. Backward accumulates into dinp (llm.c semantics).
 * Accuracy against the double-precision tanh formula: see the comments above the span functions.
 * The fp32 and 16-bit kernels share the span functions below: the 16-bit ones run them on fp32
 * tiles (lp_io.c), so each 16-bit output is the fp32 result on the widened inputs, rounded once.
 * Invariant: each element's result is a fixed sequence of IEEE operations on that element alone
 * (explicit fmaf, no implicit contraction under -std=c11, correctly rounded division), so vector
 * body, remainder loop and any thread split give bitwise the same output.
 * Not here: the erf form of GELU.
 */
#include "kernels.h"
#include "kernels_lp.h"
#include "kmath.h"
#include "lp_io.h"

#include "core/core_internal.h"

#define GELU_S 0.7978845608028654f /* sqrt(2 / pi) */
#define GELU_C 0.044715f

/* e = exp(-|2u(x)|) with u = sqrt(2/pi) (x + 0.044715 x^3); -2|u| = |x| (-2s - 2sc x^2). */
static inline float gelu_e(float x) {
    float x2 = x * x;
    return kexp_nonpos(fabsf(x) * KFMA(x2, -2.0f * GELU_S * GELU_C, -2.0f * GELU_S));
}

/* out(n) = gelu(inp(n)) = x sigmoid(2u) = x / (1 + e) for x >= 0, x e / (1 + e) for x < 0;
 * b unused (zero__span_fn shape). One division and no separate reciprocal: fewer operations
 * and one rounding fewer. simdlen(16): one 512-bit vector where the target has it (GCC
 * otherwise prefers 256-bit vectors on these CPUs: half the throughput).
 * Error against the double tanh formula (every 61st float of [-12, 12], every 7th of [-2, 2]):
 * at most 5.2e-7 absolute (1.1 ulp of gelu(4.67)); relative <= 1.1e-6 where |gelu| >= 1e-3
 * (x >= -3.35), <= 8 ulp for |x| <= 2; further out the relative error grows like |2u| ulp (141
 * ulp at x = -9, gelu ~ -1e-33) because u itself is rounded to float, as in any fp32 GELU.
 * gelu(x) = x exactly for x >= 5.5, -0 below about -9.7, NaN for NaN and -inf, +inf for +inf. */
static void gelu_fwd_span(float *out, const float *inp, const float *b, size_t n) {
    (void)b;
#pragma omp simd simdlen(16)
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float e = gelu_e(x);
        out[i] = (x < 0.0f ? x * e : x) / (1.0f + e);
    }
}

/* dinp(n) += gelu'(inp(n)) * dout(n).
 * gelu' = sg + x sg (1 - sg) 2u'(x), sg = sigmoid(2u), sg (1 - sg) = e r^2 with r = 1 / (1 + e),
 * 2u' = 2s (1 + 3c x^2). The product is formed as (e r^2 2u') x: e r^2 is 0 once |x| > ~9.7,
 * so a large finite x gives 0 there, not inf * 0 (up to |x| ~ 1e19, where 2u' overflows).
 * Error of gelu' against the double formula: at most 2.5e-7 absolute over [-12, 12] (the old
 * 1 - sg form lost up to 2e-6 near x = 5); NaN x gives NaN. */
static void gelu_bwd_span(float *dinp, const float *inp, const float *dout, size_t n) {
#pragma omp simd simdlen(16)
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float e = gelu_e(x);
        float r = 1.0f / (1.0f + e);
        float er = e * r;
        float sg = x < 0.0f ? er : r;
        float du2 = KFMA(x * x, 6.0f * GELU_S * GELU_C, 2.0f * GELU_S);
        float g = KFMA((er * r) * du2, x, sg);
        dinp[i] = KFMA(g, dout[i], dinp[i]);
    }
}

/* fp32 driver: each thread one contiguous, cache-line aligned slice. */
static void stream_f32(float *out, const float *a, const float *b, size_t n, zero__span_fn fn,
                       int threads) {
    int nt = kthreads(n, threads);
#pragma omp parallel num_threads(nt)
    {
        size_t i0, i1;
        kslice(n, 16, &i0, &i1);
        if (i1 > i0) fn(out + i0, a + i0, b ? b + i0 : NULL, i1 - i0);
    }
}

void zero__gelu_forward(float *out, const float *inp, size_t n, int threads) {
    ZERO_ASSERT(out && inp);
    stream_f32(out, inp, NULL, n, gelu_fwd_span, threads);
}

void zero__gelu_backward(float *dinp, const float *inp, const float *dout, size_t n, int threads) {
    ZERO_ASSERT(dinp && inp && dout);
    stream_f32(dinp, inp, dout, n, gelu_bwd_span, threads);
}

void zero__gelu_forward_lp(void *out, const void *inp, zero_dtype_t dt, size_t n, int threads) {
    ZERO_ASSERT(out && inp);
    zero__stream_lp(out, 0, inp, NULL, dt, n, gelu_fwd_span, threads);
}

void zero__gelu_backward_lp(void *dinp, const void *inp, const void *dout, zero_dtype_t dt,
                            size_t n, int threads) {
    ZERO_ASSERT(dinp && inp && dout);
    zero__stream_lp(dinp, 1, inp, dout, dt, n, gelu_bwd_span, threads);
}

/* Residual forward lives here too: it is the same kind of streaming pass. */
static void add_span(float *out, const float *a, const float *b, size_t n) {
#pragma omp simd
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

void zero__residual_forward_lp(void *out, const void *a, const void *b, zero_dtype_t dt, size_t n,
                               int threads) {
    ZERO_ASSERT(out && a && b);
    zero__stream_lp(out, 0, a, b, dt, n, add_span, threads);
}
