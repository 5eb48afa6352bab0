/* fp8_elem.h — one FP8 conversion, for fp8.c (scalar forms) and isa/spans.c (the array loops,
 * vectorised per instruction-set level): both compile the same code, so every level gives the
 * scalar form's bits (private to src/kernels; fp8.h describes the formats and the rounding).
 *
 * Encoding works on the fp32 bits. A normal result rounds the mantissa from 23 bits to M by
 * adding half an FP8 ulp less one plus the kept LSB (ties to even) to the magnitude's bits, so a
 * carry moves into the exponent by itself, then rebiases the exponent. A subnormal result (the
 * magnitude below 2^(1 - bias)) is the magnitude in units of the smallest subnormal (an exact
 * power-of-two product), rounded to an integer by adding 2^23 in fp32 (the FPU rounds to nearest
 * even); 2^M units come out as the smallest normal's code, as they should. Magnitudes above the
 * largest finite one saturate and a NaN becomes 0x7F, all selected without branches, so loops
 * vectorise.
 */
#ifndef ZERO_KERNELS_FP8_ELEM_H
#define ZERO_KERNELS_FP8_ELEM_H

#include "kernels/fp8.h"

#include <string.h>

typedef struct {
    int mbits, bias;
    uint32_t max_bits; /* fp32 bits of the largest finite magnitude */
    uint32_t max_code; /* its code */
    float sub_units;   /* 2^(bias + mbits - 1): one smallest subnormal is 1 */
    float sub_step;    /* its reciprocal, the smallest subnormal */
} zero__fp8_fmt_t;

static const zero__fp8_fmt_t zero__fp8_fmts[ZERO__FP8_FORMAT_COUNT] = {
    [ZERO__FP8_E4M3] = {3, 7, 0x43e00000u /* 448 */, 0x7e, 512.0f, 1.0f / 512},
    [ZERO__FP8_E5M2] = {2, 15, 0x47600000u /* 57344 */, 0x7b, 65536.0f, 1.0f / 65536},
};

static inline uint32_t zero__fp8_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}
static inline float zero__fp8_float(uint32_t u) {
    float x;
    memcpy(&x, &u, 4);
    return x;
}

static inline uint8_t zero__fp8_enc(float x, const zero__fp8_fmt_t *t) {
    const uint32_t u = zero__fp8_bits(x), sign = (u >> 24) & 0x80u, a = u & 0x7fffffffu;
    const int shift = 23 - t->mbits;
    /* normal: round the mantissa, rebias the exponent (127 -> bias) */
    const uint32_t rounded = a + ((1u << (shift - 1)) - 1u) + ((a >> shift) & 1u);
    const uint32_t normal = (rounded >> shift) - ((uint32_t)(127 - t->bias) << t->mbits);
    /* subnormal: the magnitude in smallest-subnormal units, rounded to nearest even */
    const uint32_t sub =
        zero__fp8_bits(zero__fp8_float(a) * t->sub_units + 8388608.0f) - 0x4b000000u;
    const uint32_t min_normal_bits = (uint32_t)(127 + 1 - t->bias) << 23;
    uint32_t code = a < min_normal_bits ? sub : normal;
    code = a > t->max_bits ? t->max_code : code;
    code = a > 0x7f800000u ? 0x7fu : code;
    return (uint8_t)(code | sign);
}

/* e4m3: 1 for E4M3 (its only NaN is S.1111.111; no infinity), 0 for E5M2 */
static inline float zero__fp8_dec(uint8_t c, const zero__fp8_fmt_t *t, int e4m3) {
    const uint32_t sign = (uint32_t)(c & 0x80u) << 24, mag = c & 0x7fu;
    const uint32_t e = mag >> t->mbits, m = mag & ((1u << t->mbits) - 1u);
    const uint32_t normal = ((e + (uint32_t)(127 - t->bias)) << 23) | (m << (23 - t->mbits));
    const uint32_t sub = zero__fp8_bits((float)m * t->sub_step);
    uint32_t v = e == 0 ? sub : normal;
    const uint32_t top = (1u << (7 - t->mbits)) - 1u; /* the all-ones exponent */
    if (e4m3)
        v = mag == 0x7fu ? 0x7fc00000u : v;
    else
        v = e == top ? (m ? 0x7fc00000u : 0x7f800000u) : v;
    return zero__fp8_float(v | sign);
}

#endif /* ZERO_KERNELS_FP8_ELEM_H */
