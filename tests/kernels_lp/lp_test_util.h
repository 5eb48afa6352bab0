/* lp_test_util.h — what the 16-bit kernel tests share: a seeded uniform generator and scalar
 * conversions by dtype. Header-only; LP_TEST_SEED (defined before including) picks the stream.
 */
#ifndef ZERO_TESTS_LP_TEST_UTIL_H
#define ZERO_TESTS_LP_TEST_UTIL_H

#include "zero/core.h"

#include <stdint.h>

static uint64_t rng = LP_TEST_SEED;
static float frand(void) { /* uniform in [-1, 1), 64-bit LCG */
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(rng >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
}

static uint16_t to16(float x, zero_dtype_t dt) {
    return dt == ZERO_DTYPE_BF16 ? zero_fp32_to_bf16(x) : zero_fp32_to_fp16(x);
}
static float from16(uint16_t h, zero_dtype_t dt) {
    return dt == ZERO_DTYPE_BF16 ? zero_bf16_to_fp32(h) : zero_fp16_to_fp32(h);
}

#endif /* ZERO_TESTS_LP_TEST_UTIL_H */
