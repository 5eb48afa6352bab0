/* dtype.c — dtype sizes and names, and the fp16/bf16 <-> fp32 conversions.
 *
 * Conversions are scalar bit manipulation with round-to-nearest-even; they are the reference
 * every vectorised converter is tested against.
 */
#include "core_internal.h"

#include <assert.h>
#include <string.h>

static const struct {
    const char *name;
    size_t size;
} dtypes[] = {
    [ZERO_DTYPE_FP32] = {"fp32", 4},   [ZERO_DTYPE_FP64] = {"fp64", 8},
    [ZERO_DTYPE_FP16] = {"fp16", 2},   [ZERO_DTYPE_BF16] = {"bf16", 2},
    [ZERO_DTYPE_INT8] = {"int8", 1},   [ZERO_DTYPE_UINT8] = {"uint8", 1},
    [ZERO_DTYPE_INT32] = {"int32", 4},
};
static_assert(ZERO_ARRAY_LEN(dtypes) == ZERO_DTYPE_COUNT, "dtype table");

size_t zero_dtype_size(zero_dtype_t dtype) {
    return (unsigned)dtype < ZERO_DTYPE_COUNT ? dtypes[dtype].size : 0;
}

const char *zero_dtype_name(zero_dtype_t dtype) {
    return (unsigned)dtype < ZERO_DTYPE_COUNT ? dtypes[dtype].name : "?";
}

zero_status_t zero_dtype_parse(const char *name, zero_dtype_t *out) {
    for (int i = 0; i < ZERO_DTYPE_COUNT; i++) {
        if (name && strcmp(name, dtypes[i].name) == 0) {
            *out = (zero_dtype_t)i;
            return ZERO_OK;
        }
    }
    return zero__error(ZERO_ERR_INVALID_ARG,
                       "unknown dtype '%s' (expected fp32, fp64, fp16, bf16, int8, uint8 or int32)",
                       name ? name : "(null)");
}

static uint32_t float_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static float bits_float(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

uint16_t zero_fp32_to_bf16(float x) {
    uint32_t u = float_bits(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest, ties to even */
    return (uint16_t)(u >> 16);
}

float zero_bf16_to_fp32(uint16_t h) { return bits_float((uint32_t)h << 16); }

uint16_t zero_fp32_to_fp16(float x) {
    uint32_t u = float_bits(x);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return sign | 0x7e00u;  /* NaN */
    if (a >= 0x477ff000u) return sign | 0x7c00u; /* rounds to >= 65520: inf */
    if (a < 0x38800000u) {                       /* below 2^-14: fp16 subnormal or zero */
        /* Add 0.5 (as float) so the FPU rounds the fraction to 2^-24 units, ties to even. */
        float f = bits_float(a) + 0.5f;
        return sign | (uint16_t)(float_bits(f) - 0x3f000000u);
    }
    uint32_t mant_odd = (a >> 13) & 1u;
    a += ((uint32_t)(15 - 127) << 23) + 0xfffu + mant_odd;
    return sign | (uint16_t)(a >> 13);
}

float zero_fp16_to_fp32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    if (exp == 0x1f) return bits_float(sign | 0x7f800000u | (mant << 13));
    if (exp == 0) { /* zero or subnormal: mant * 2^-24, exact in fp32 */
        float f = (float)mant * 5.9604644775390625e-8f;
        return bits_float(sign | float_bits(f));
    }
    return bits_float(sign | ((exp + 112u) << 23) | (mant << 13));
}
