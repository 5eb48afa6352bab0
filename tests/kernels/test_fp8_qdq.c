/* test_fp8_qdq.c — FP8 quantize-dequantize of GEMM inputs, amax and the delayed-scaling update
 * (src/kernels/fp8_qdq.c) against references written here.
 *
 * References: quantize-dequantize element by element with the one-element conversions
 * (zero__fp8_encode1 / decode1, checked against the format's definition and ml_dtypes by
 * test_fp8), scales computed here: per tensor dec(enc(x * s)) * (1 / s); per tile a naive pass over
 * the tile's rectangle for its amax, s = max(amax, floor) / FP8_MAX, dec(enc(x / s)) * s. Shapes
 * with ragged tiles at both edges (1 x 128 and 128 x 128), fp32 and bf16, 1 and 2 threads (bitwise
 * alike), a zero tile, magnitudes over 12 decades. A closed-form bound besides: E4M3 keeps 3
 * mantissa bits, so a scaled normal value is off by at most 2^-4 of itself after the round trip.
 * The delayed update against a replay of Transformer Engine's kernel as it is written
 * (delayed_scaling.cu: a_i = old[i + 1] for i < L - 1, else the step's amax; amax = max a_i;
 * new[i] = a_i for i > 0, new[0] = 0; scale from amax unless it is 0 or not finite; infinite ->
 * FLT_MAX), over amax sequences with zeros, NaN-as-Inf, +Inf and a value small enough to make the
 * scale overflow, history lengths 1, 2, 5 and margins 0 and 3.
 * Weights on the E4M3 grid (power-of-two block scales): each block's scale found by counting
 * k up from -126 until amax <= 448 x 2^k in double, values dec(enc(x / s)) x s element by element;
 * a second rounding gives the first one's bits back (idempotence), and codes sent and decoded give
 * the rounded values.
 */
#include "check.h"
#include "kernels/fp8_qdq.h"
#include "krand.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#define MIN_(a, b) ((a) < (b) ? (a) : (b))

/* x (n) of dt from fp32 values (bf16: rounded). */
static void *make(zero_dtype_t dt, const float *v, size_t n) {
    void *x = xmalloc(n * zero_dtype_size(dt));
    if (dt == ZERO_DTYPE_BF16)
        for (size_t i = 0; i < n; i++) ((uint16_t *)x)[i] = zero_fp32_to_bf16(v[i]);
    else
        memcpy(x, v, n * sizeof *v);
    return x;
}
static float get(zero_dtype_t dt, const void *x, size_t i) {
    return dt == ZERO_DTYPE_BF16 ? zero_bf16_to_fp32(((const uint16_t *)x)[i])
                                 : ((const float *)x)[i];
}
static float round_to(zero_dtype_t dt, float v) {
    return dt == ZERO_DTYPE_BF16 ? zero_bf16_to_fp32(zero_fp32_to_bf16(v)) : v;
}
static int same_bits(float a, float b) { return memcmp(&a, &b, sizeof a) == 0; }

/* values over 12 decades with both signs, some exact zeros */
static void fill(float *v, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float m = frand();
        int e = (int)((frand() + 1.0f) * 6.0f) - 8; /* 2^-8 .. 2^4 */
        v[i] = i % 97 == 5 ? 0.0f : ldexpf(m, e);
    }
}

static void check_tensor(zero_dtype_t dt, zero__fp8_format_t f, size_t n, float scale) {
    float *v = xmalloc(n * sizeof *v);
    fill(v, n);
    void *x = make(dt, v, n), *o1 = xmalloc(n * 4), *o2 = xmalloc(n * 4);
    zero__fp8_qdq(o1, x, dt, n, scale, f, 1);
    zero__fp8_qdq(o2, x, dt, n, scale, f, 2);
    size_t bad = 0, bad_bound = 0, first = n;
    const float lo = ldexpf(1.0f, f == ZERO__FP8_E4M3 ? -6 : -14); /* min normal */
    const float u = f == ZERO__FP8_E4M3 ? 0x1p-4f : 0x1p-3f;
    for (size_t i = 0; i < n; i++) {
        float xi = get(dt, x, i);
        float ref =
            round_to(dt, zero__fp8_decode1(zero__fp8_encode1(xi * scale, f), f) * (1.0f / scale));
        if (!same_bits(ref, get(dt, o1, i)) || !same_bits(get(dt, o1, i), get(dt, o2, i))) {
            bad++;
            if (first == n) first = i;
        }
        float a = fabsf(xi * scale);
        if (a >= lo && a <= zero__fp8_max(f)) {
            /* the fp8 round trip within u of the value, then one rounding to dt */
            double err = fabs((double)get(dt, o1, i) - xi);
            double tol = u * fabs(xi) * 1.0000001 + (dt == ZERO_DTYPE_BF16 ? 0x1p-8 * fabs(xi) : 0);
            bad_bound += err > tol;
        }
    }
    CHECK(!bad, "%s %s per tensor n %zu scale %g: %zu of %zu differ from the reference (first %zu)",
          zero_dtype_name(dt), zero__fp8_name(f), n, (double)scale, bad, n, first);
    CHECK(!bad_bound, "%s %s per tensor: %zu normal values off by more than 2^-%d",
          zero_dtype_name(dt), zero__fp8_name(f), bad_bound, f == ZERO__FP8_E4M3 ? 4 : 3);
    free(v), free(x), free(o1), free(o2);
}

static void check_tiles(zero_dtype_t dt, zero__fp8_format_t f, size_t rows, size_t cols, size_t tr,
                        float floor) {
    const size_t n = rows * cols, T = (size_t)ZERO__FP8_TILE;
    float *v = xmalloc(n * sizeof *v);
    fill(v, n);
    /* one tile all zeros (the first), one tile of tiny values (below the floor) */
    for (size_t r = 0; r < MIN_(rows, tr); r++)
        for (size_t c = 0; c < MIN_(cols, T); c++) v[r * cols + c] = 0.0f;
    if (cols > T)
        for (size_t r = 0; r < MIN_(rows, tr); r++)
            for (size_t c = T; c < MIN_(cols, 2 * T); c++) v[r * cols + c] *= 1e-6f;
    void *x = make(dt, v, n), *o1 = xmalloc(n * 4), *o2 = xmalloc(n * 4);
    zero__fp8_qdq_tiles(o1, x, dt, rows, cols, tr, floor, f, 1);
    zero__fp8_qdq_tiles(o2, x, dt, rows, cols, tr, floor, f, 2);
    size_t bad = 0, first = n;
    for (size_t r0 = 0; r0 < rows; r0 += tr)
        for (size_t c0 = 0; c0 < cols; c0 += T) {
            double amax = 0;
            for (size_t r = r0; r < rows && r < r0 + tr; r++)
                for (size_t c = c0; c < cols && c < c0 + T; c++)
                    amax = fmax(amax, fabs(get(dt, x, r * cols + c)));
            float a = (float)amax > floor ? (float)amax : floor;
            float s = a > 0.0f ? a / zero__fp8_max(f) : 1.0f;
            for (size_t r = r0; r < rows && r < r0 + tr; r++)
                for (size_t c = c0; c < cols && c < c0 + T; c++) {
                    size_t i = r * cols + c;
                    float ref = round_to(
                        dt, zero__fp8_decode1(zero__fp8_encode1(get(dt, x, i) / s, f), f) * s);
                    if (!same_bits(ref, get(dt, o1, i)) ||
                        !same_bits(get(dt, o1, i), get(dt, o2, i))) {
                        bad++;
                        if (first == n) first = i;
                    }
                }
        }
    CHECK(!bad, "%s %s tiles %zu x 128 of (%zu, %zu), floor %g: %zu differ (first %zu)",
          zero_dtype_name(dt), zero__fp8_name(f), tr, rows, cols, (double)floor, bad, first);
    free(v), free(x), free(o1), free(o2);
}

static void check_amax(void) {
    float v[300];
    for (int i = 0; i < 300; i++) v[i] = (float)i * (i % 2 ? -0.01f : 0.005f);
    CHECK(zero__fp8_amax(v, ZERO_DTYPE_FP32, 300, 2) == 2.99f, "amax %g, expected 2.99",
          (double)zero__fp8_amax(v, ZERO_DTYPE_FP32, 300, 2));
    v[150] = NAN;
    CHECK(isinf(zero__fp8_amax(v, ZERO_DTYPE_FP32, 300, 1)), "a NaN's amax is +Inf");
    CHECK(zero__fp8_amax(v, ZERO_DTYPE_FP32, 0, 1) == 0.0f, "amax of nothing is 0");
}

/* Transformer Engine's amax-and-scale update as its kernel is written, one tensor. */
static void te_replay(float *scale, float *hist, int L, float last_amax, float fp8_max,
                      int margin) {
    float amax = 0.0f, a[8];
    for (int i = 0; i < L; i++) {
        a[i] = i < L - 1 ? hist[i + 1] : last_amax;
        amax = fmaxf(amax, a[i]);
    }
    for (int i = 0; i < L; i++) hist[i] = i > 0 ? a[i] : 0.0f;
    float s = *scale;
    if (isfinite(amax) && amax > 0.0f) s = (fp8_max / amax) / powf(2.0f, (float)margin);
    if (isinf(s)) s = FLT_MAX;
    *scale = s;
}

static void check_delayed(void) {
    const float seq[] = {3.0f, 0.5f, 0.0f, 7.0f, INFINITY, 0.25f, 0.0f, 1e-38f,
                         2.0f, 0.0f, 0.0f, 0.0f, 100.0f,   0.01f, 0.0f, 0.0f};
    const int lens[] = {1, 2, 5}, margins[] = {0, 3};
    for (int li = 0; li < 3; li++)
        for (int mi = 0; mi < 2; mi++)
            for (int fi = 0; fi < ZERO__FP8_FORMAT_COUNT; fi++) {
                const int L = lens[li], m = margins[mi];
                const float fmax = zero__fp8_max((zero__fp8_format_t)fi);
                float s1 = 1.0f, s2 = 1.0f, h1[8] = {0}, h2[8] = {0};
                int bad = 0;
                for (size_t k = 0; k < sizeof seq / sizeof seq[0]; k++) {
                    zero__fp8_delayed_update(&s1, h1, (size_t)L, seq[k], fmax, m);
                    te_replay(&s2, h2, L, seq[k], fmax, m);
                    bad += !same_bits(s1, s2) || memcmp(h1, h2, (size_t)L * sizeof *h1) != 0;
                }
                CHECK(!bad, "delayed update L %d margin %d %s: %d of the steps differ from TE's", L,
                      m, zero__fp8_name((zero__fp8_format_t)fi), bad);
            }
    /* closed forms: the first step's scale, margin 1; a zero step keeps the scale; a tiny amax
     * saturates the scale at FLT_MAX */
    float s = 1.0f, h[2] = {0};
    zero__fp8_delayed_update(&s, h, 2, 7.0f, 448.0f, 1);
    CHECK(s == 32.0f && h[0] == 0.0f && h[1] == 7.0f,
          "scale %g (expected 448/7/2 = 32), history %g %g", (double)s, (double)h[0], (double)h[1]);
    zero__fp8_delayed_update(&s, h, 2, 0.0f, 448.0f, 1);
    CHECK(s == 32.0f && h[1] == 0.0f, "the window keeps 7 one more step: scale %g", (double)s);
    zero__fp8_delayed_update(&s, h, 2, 0.0f, 448.0f, 1);
    CHECK(s == 32.0f, "an all-zero window keeps the old scale: %g", (double)s);
    zero__fp8_delayed_update(&s, h, 2, 1e-38f, 448.0f, 0);
    CHECK(s == FLT_MAX, "448 / 1e-38 overflows to FLT_MAX: %g", (double)s);
}

/* The naive power-of-two block rounding of v (n) in place, blocks of 128 from v[0]. */
static void pow2_reference(float *v, size_t n) {
    for (size_t b = 0; b < n; b += 128) {
        const size_t k = MIN_((size_t)128, n - b);
        double amax = 0.0;
        for (size_t i = b; i < b + k; i++) amax = fabs(v[i]) > amax ? fabs(v[i]) : amax;
        int e = -126;
        while (amax > 448.0 * ldexp(1.0, e)) e++;
        const float s = ldexpf(1.0f, e);
        for (size_t i = b; i < b + k; i++)
            v[i] =
                zero__fp8_decode1(zero__fp8_encode1(v[i] / s, ZERO__FP8_E4M3), ZERO__FP8_E4M3) * s;
    }
}

static void check_pow2_blocks(zero_dtype_t dt, size_t n) {
    float *v = xmalloc(n * sizeof *v);
    fill(v, n);
    for (size_t i = 0; i < n; i++) v[i] = round_to(dt, v[i]);
    v[n / 2] = 448.0f * 3.0f; /* a block whose amax is a power of two times 448 */
    for (size_t i = 256; i < 384 && i < n; i++) v[i] = 0.0f; /* a zero block */
    void *x = make(dt, v, n);
    pow2_reference(v, n);
    zero__fp8_round_blocks(x, dt, n);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += !same_bits(get(dt, x, i), round_to(dt, v[i]));
    CHECK(!bad, "%s pow2 blocks n %zu: %zu of %zu differ from the reference", zero_dtype_name(dt),
          n, bad, n);
    /* idempotent: rounding the rounded values changes no bit */
    void *y = xmalloc(n * zero_dtype_size(dt));
    memcpy(y, x, n * zero_dtype_size(dt));
    zero__fp8_round_blocks(y, dt, n);
    CHECK(!memcmp(x, y, n * zero_dtype_size(dt)), "%s pow2 blocks n %zu: rounding twice differs",
          zero_dtype_name(dt), n);
    /* codes and scale of the rounded values decode to them */
    size_t lost = 0;
    for (size_t b = 0; b < n; b += 128) {
        const size_t k = MIN_((size_t)128, n - b);
        float in[128], out[128];
        uint8_t c[128];
        for (size_t i = 0; i < k; i++) in[i] = get(dt, x, b + i);
        const float s = zero__fp8_block_encode(c, in, k);
        zero__fp8_block_decode(out, c, k, s);
        for (size_t i = 0; i < k; i++) lost += !same_bits(in[i], out[i]);
    }
    CHECK(!lost, "%s pow2 blocks n %zu: %zu rounded values not carried by their codes",
          zero_dtype_name(dt), n, lost);
    free(v);
    free(x);
    free(y);
}

int main(void) {
    const zero_dtype_t dts[] = {ZERO_DTYPE_FP32, ZERO_DTYPE_BF16};
    for (int d = 0; d < 2; d++)
        for (int f = 0; f < ZERO__FP8_FORMAT_COUNT; f++) {
            const zero__fp8_format_t F = (zero__fp8_format_t)f;
            check_tensor(dts[d], F, 70001, 1.0f);
            check_tensor(dts[d], F, 70001, 37.5f);
            check_tensor(dts[d], F, 1000, 1e-3f);
            check_tiles(dts[d], F, 300, 333, 1, ZERO__FP8_AMAX_FLOOR);   /* 1 x 128, ragged */
            check_tiles(dts[d], F, 260, 300, 128, ZERO__FP8_AMAX_FLOOR); /* 128 x 128, ragged */
            check_tiles(dts[d], F, 7, 129, 1, 0.0f);                     /* gradients */
            check_tiles(dts[d], F, 1, 100, 128, ZERO__FP8_AMAX_FLOOR);   /* one partial block */
        }
    check_amax();
    check_delayed();
    for (int d = 0; d < 2; d++) {
        check_pow2_blocks(dts[d], 1000); /* ragged last block */
        check_pow2_blocks(dts[d], 4096);
    }
    CHECK(zero__fp8_pow2_scale(448.0f) == 1.0f && zero__fp8_pow2_scale(449.0f) == 2.0f &&
              zero__fp8_pow2_scale(0.0f) == 1.0f && zero__fp8_pow2_scale(INFINITY) == 1.0f &&
              zero__fp8_pow2_scale(1e-45f) == ldexpf(1.0f, -126),
          "pow2 scales of 448, 449, 0, Inf, 1e-45");
    return check_report();
}
