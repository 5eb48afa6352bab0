/* test_fp8.c — FP8 E4M3 / E5M2 conversions (src/kernels/fp8.c) against references written from
 * the format's definition (OCP OFP8 v1.0), not from the bit tricks of the code under test.
 *
 * Reference decode: (-1)^s 2^(e - bias) (1 + m / 2^M), or 2^(1 - bias) m / 2^M for e = 0, the
 * format's NaN and infinity codes by the table of fp8.h, computed with ldexp in double. Reference
 * encode: the nearest of the 256 decoded values by a search over all of them (ties to the even
 * code), magnitudes beyond the largest finite one saturated, NaN to 0x7F with its sign.
 * Checks: every one of the 256 codes of each format decodes to the reference (and its closed-form
 * extremes: 448, 57344, 2^-6, 2^-9, 2^-14, 2^-16); every finite code survives encode(decode);
 * every midpoint between neighbouring values ties to the even code, and the fp32 values one ulp
 * either side of it go to the nearer code; a million fp32 bit patterns spread over all 2^32 agree
 * with the reference encode, scalar and array forms alike (with a scale); saturation and NaN.
 * With an argument PATH: also writes the sample and its codes for test_fp8_mldtypes.py.
 */
#include "check.h"
#include "kernels/fp8.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    int mbits, ebits, bias;
} def[ZERO__FP8_FORMAT_COUNT] = {{3, 4, 7}, {2, 5, 15}};

static double ref_decode(uint8_t c, zero__fp8_format_t f) {
    const int M = def[f].mbits, E = def[f].ebits, B = def[f].bias;
    const int s = c >> 7, e = (c >> M) & ((1 << E) - 1), m = c & ((1 << M) - 1);
    double v;
    if (f == ZERO__FP8_E4M3 && e == 15 && m == 7)
        v = NAN;
    else if (f == ZERO__FP8_E5M2 && e == 31)
        v = m ? NAN : INFINITY;
    else if (e == 0)
        v = ldexp((double)m, 1 - B - M);
    else
        v = ldexp(1.0 + (double)m / (1 << M), e - B);
    return s ? -v : v;
}

static uint8_t ref_encode(float x, zero__fp8_format_t f) {
    const uint8_t sign = signbit(x) ? 0x80 : 0;
    if (isnan(x)) return 0x7f | sign;
    const double a = fabs((double)x), max = ref_decode(f == ZERO__FP8_E4M3 ? 0x7e : 0x7b, f);
    if (a >= max) return (f == ZERO__FP8_E4M3 ? 0x7e : 0x7b) | sign;
    int best = 0;
    double best_d = INFINITY;
    for (int c = 0; c < 0x80; c++) {
        const double v = ref_decode((uint8_t)c, f);
        if (!isfinite(v)) continue;
        const double d = fabs(v - a);
        if (d < best_d || (d == best_d && (c & 1) == 0)) best = c, best_d = d;
    }
    return (uint8_t)best | sign;
}

static int same_float(float a, double b) {
    return (isnan(a) && isnan(b)) || ((double)a == b && !signbit(a) == !signbit(b));
}

static void codes(zero__fp8_format_t f) {
    const char *name = zero__fp8_name(f);
    for (int c = 0; c < 256; c++) {
        const float got = zero__fp8_decode1((uint8_t)c, f);
        const double want = ref_decode((uint8_t)c, f);
        CHECK(same_float(got, want), "%s: code 0x%02x decodes to %a, expected %a", name, c,
              (double)got, want);
        if (isfinite(want)) /* E5M2's infinities saturate: fp8.h */
            CHECK(zero__fp8_encode1(got, f) == c, "%s: code 0x%02x -> %a -> 0x%02x", name, c,
                  (double)got, zero__fp8_encode1(got, f));
        float arr;
        uint8_t cc = (uint8_t)c;
        zero__fp8_decode(&arr, &cc, 1, 1.0f, f);
        CHECK(same_float(arr, want), "%s: array decode of 0x%02x", name, c);
    }
    const double closed[2][4] = {{448, 0x1p-6, 0x1p-9, 0.013671875}, {57344, 0x1p-14, 0x1p-16, 0}};
    CHECK(zero__fp8_max(f) == closed[f][0] && ref_decode(f ? 0x7b : 0x7e, f) == closed[f][0],
          "%s max", name);
    CHECK(ref_decode(f ? 0x04 : 0x08, f) == closed[f][1], "%s min normal", name);
    CHECK(ref_decode(0x01, f) == closed[f][2], "%s min subnormal", name);
    if (f == ZERO__FP8_E4M3) CHECK(ref_decode(0x07, f) == closed[f][3], "e4m3 max subnormal");
}

/* Midpoints between neighbouring finite values: ties to even, and one fp32 ulp either side. */
static void ties(zero__fp8_format_t f) {
    const char *name = zero__fp8_name(f);
    const uint8_t top = f == ZERO__FP8_E4M3 ? 0x7e : 0x7b;
    for (int c = 0; c < top; c++) {
        const double lo = ref_decode((uint8_t)c, f), hi = ref_decode((uint8_t)(c + 1), f);
        const float mid = (float)(0.5 * (lo + hi)); /* exact: few mantissa bits */
        for (int s = 0; s < 2; s++) {
            const float m = s ? -mid : mid;
            const uint8_t sg = s ? 0x80 : 0;
            const uint8_t even = (uint8_t)((c & 1) ? c + 1 : c) | sg;
            CHECK(zero__fp8_encode1(m, f) == even, "%s: tie %a -> 0x%02x, expected 0x%02x", name,
                  (double)m, zero__fp8_encode1(m, f), even);
            CHECK(zero__fp8_encode1(nextafterf(m, 0), f) == ((uint8_t)c | sg), "%s: below %a", name,
                  (double)m);
            CHECK(zero__fp8_encode1(nextafterf(m, s ? -INFINITY : INFINITY), f) ==
                      ((uint8_t)(c + 1) | sg),
                  "%s: above %a", name, (double)m);
        }
    }
    const float big[] = {zero__fp8_max(f) * 1.01f, 1e30f, INFINITY};
    for (size_t i = 0; i < 3; i++) {
        CHECK(zero__fp8_encode1(big[i], f) == top, "%s: %g saturates", name, (double)big[i]);
        CHECK(zero__fp8_encode1(-big[i], f) == (top | 0x80), "%s: -%g saturates", name,
              (double)big[i]);
    }
    CHECK(zero__fp8_encode1(NAN, f) == 0x7f && zero__fp8_encode1(-NAN, f) == 0xff, "%s: NaN", name);
    CHECK(zero__fp8_encode1(-0.0f, f) == 0x80 && zero__fp8_encode1(1e-30f, f) == 0, "%s: zeros",
          name);
}

enum { SAMPLE = 1 << 20 };

/* fp32 bit patterns spread over all 2^32 (a multiplicative walk), as floats */
static float *sample(void) {
    float *x = malloc(SAMPLE * sizeof *x);
    if (!x) return NULL;
    uint32_t u = 12345;
    for (size_t i = 0; i < SAMPLE; i++) {
        u = u * 2654435761u + 97u;
        memcpy(&x[i], &u, 4);
    }
    /* and a dense stretch around FP8's range */
    for (size_t i = 0; i < SAMPLE / 4; i++)
        x[i] = ldexpf((float)i / (SAMPLE / 4) - 0.5f, 17) * ldexpf(1.0f, -(int)(i % 30));
    return x;
}

static void random_bits(float *x, zero__fp8_format_t f, uint8_t *out) {
    const char *name = zero__fp8_name(f);
    int bad = 0;
    for (size_t i = 0; i < SAMPLE && bad < 5; i++) {
        const uint8_t want = ref_encode(x[i], f), got = zero__fp8_encode1(x[i], f);
        if (got != want) {
            bad++;
            CHECK(0, "%s: %a -> 0x%02x, reference 0x%02x", name, (double)x[i], got, want);
        }
    }
    CHECK(bad == 0, "%s: the sample agrees with the reference encode", name);
    zero__fp8_encode(out, x, SAMPLE, 1.0f, f);
    size_t diff = 0;
    for (size_t i = 0; i < SAMPLE; i++) diff += out[i] != zero__fp8_encode1(x[i], f);
    CHECK(diff == 0, "%s: the array encode differs from the scalar one at %zu elements", name,
          diff);
    /* a scale: one fp32 product, then the encode */
    uint8_t c[64];
    zero__fp8_encode(c, x, 64, 0.375f, f);
    for (int i = 0; i < 64; i++)
        CHECK(c[i] == zero__fp8_encode1(x[i] * 0.375f, f), "%s: scaled encode %d", name, i);
    float d[64];
    zero__fp8_decode(d, c, 64, 3.0f, f);
    for (int i = 0; i < 64; i++)
        CHECK(same_float(d[i], (double)(zero__fp8_decode1(c[i], f) * 3.0f)), "%s: scaled decode %d",
              name, i);
}

int main(int argc, char **argv) {
    float *x = sample();
    uint8_t *codes_out[2] = {malloc(SAMPLE), malloc(SAMPLE)};
    CHECK(x && codes_out[0] && codes_out[1], "out of memory");
    for (int f = 0; f < ZERO__FP8_FORMAT_COUNT && x && codes_out[1]; f++) {
        codes((zero__fp8_format_t)f);
        ties((zero__fp8_format_t)f);
        random_bits(x, (zero__fp8_format_t)f, codes_out[f]);
    }
    if (argc > 1 && x && codes_out[1]) { /* for test_fp8_mldtypes.py: n, floats, e4m3, e5m2 */
        FILE *out = fopen(argv[1], "wb");
        const uint32_t n = SAMPLE;
        CHECK(out && fwrite(&n, 4, 1, out) == 1 && fwrite(x, 4, SAMPLE, out) == SAMPLE &&
                  fwrite(codes_out[0], 1, SAMPLE, out) == SAMPLE &&
                  fwrite(codes_out[1], 1, SAMPLE, out) == SAMPLE,
              "cannot write %s", argv[1]);
        if (out) fclose(out);
    }
    free(x);
    free(codes_out[0]);
    free(codes_out[1]);
    return check_report();
}
