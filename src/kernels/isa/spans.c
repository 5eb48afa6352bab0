/* spans.c — the kernels' inner loops that are built once per instruction-set level (isa.h).
 *
 * CMake compiles this file several times, each with one level's flags (-mavx2 -mfma, ...) and
 * ZERO_ISA_TABLE naming the table it defines (zero__isa_table_baseline, _avx2, _avx512); the
 * loops are plain C that the compiler vectorises for that level, and kmath.h's KFMA is a fused
 * multiply-add exactly where the level has FMA. Nothing here may be called except through a
 * table that zero__isa_supported() allows on this CPU.
 * GELU (tanh approximation), moved here from gelu.c, whose header describes the formulation;
 * the row loops of softmax + cross-entropy, moved here from softmax_ce.c; the FP8 array
 * conversions (fp8.c's, on fp8_elem.h: integer selects and exact products, so every level gives
 * the scalar form's bits).
 */
#include "kernels/fp8_elem.h"
#include "kernels/isa.h"
#include "kernels/kmath.h"

#ifndef ZERO_ISA_TABLE
#error "spans.c is compiled once per level with -DZERO_ISA_TABLE=zero__isa_table_<level>"
#endif

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

/* log-sum-exp of x(n): max first, so exp never overflows (moved here from softmax_ce.c). */
static float row_lse(const float *x, size_t n) {
    float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
    for (size_t j = 0; j < n; j++) mx = x[j] > mx ? x[j] : mx;
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (size_t j = 0; j < n; j++) s += kexp(x[j] - mx);
    return mx + logf(s);
}

/* out(n) = exp(x(n) - lse) * d: softmax times the loss gradient. Reads x[j] before writing
 * out[j], so out may alias x. */
static void row_exp_scale(float *out, const float *x, float lse, float d, size_t n) {
#pragma omp simd
    for (size_t j = 0; j < n; j++) out[j] = kexp(x[j] - lse) * d;
}

static void fp8_encode(uint8_t *out, const float *x, size_t n, float scale, int f) {
    const zero__fp8_fmt_t t = zero__fp8_fmts[f]; /* a local copy: constants the loop hoists */
    for (size_t i = 0; i < n; i++) out[i] = zero__fp8_enc(x[i] * scale, &t);
}

static void fp8_decode(float *out, const uint8_t *c, size_t n, float scale, int f) {
    const zero__fp8_fmt_t t = zero__fp8_fmts[f];
    if (f == ZERO__FP8_E4M3) /* one loop per format: the NaN / infinity select is fixed */
        for (size_t i = 0; i < n; i++) out[i] = zero__fp8_dec(c[i], &t, 1) * scale;
    else
        for (size_t i = 0; i < n; i++) out[i] = zero__fp8_dec(c[i], &t, 0) * scale;
}

extern const zero__isa_kernels_t ZERO_ISA_TABLE;
const zero__isa_kernels_t ZERO_ISA_TABLE = {
    .gelu_forward = gelu_fwd_span,
    .gelu_backward = gelu_bwd_span,
    .row_lse = row_lse,
    .row_exp_scale = row_exp_scale,
    .fp8_encode = fp8_encode,
    .fp8_decode = fp8_decode,
};
