/* model_test_util.h — what the GPT tests share: a seeded normal generator and filling an
 * engine's parameters with random values. Header-only (each test is one translation unit).
 * MODEL_TEST_SEED (defined before including) picks the stream, so each test keeps its own.
 */
#ifndef ZERO_TESTS_MODEL_TEST_UTIL_H
#define ZERO_TESTS_MODEL_TEST_UTIL_H

#include "zero/zero.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

static uint64_t rng_state = MODEL_TEST_SEED;
/* xorshift64: uniform in [0, 1) */
static double urand(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) / 9007199254740992.0;
}
/* Box-Muller: standard normal */
static double nrand(void) {
    double u1 = urand() + 1e-12, u2 = urand();
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* Overwrite every parameter with scale * N(0, 1), LayerNorm weights (initialised to ones)
 * around 1; a 16-bit engine rounds them. */
static inline void randomize(zero_engine_t *eng, double scale) {
    for (int u = 0; u < zero_engine_unit_count(eng); u++)
        for (int t = 0; t < zero_engine_tensor_count(eng, u); t++) {
            const zero_tensor_desc_t *d = zero_engine_tensor_desc(eng, u, t);
            size_t n = 1;
            for (int k = 0; k < d->ndim; k++) n *= d->shape[k];
            float *v = malloc(n * sizeof *v);
            for (size_t i = 0; i < n; i++)
                v[i] = (float)((d->init == ZERO_INIT_ONES ? 1.0 : 0.0) + scale * nrand());
            zero_engine_params_write(eng, u, zero_engine_tensor_offset(eng, u, t), n, v);
            free(v);
        }
}

#endif /* ZERO_TESTS_MODEL_TEST_UTIL_H */
