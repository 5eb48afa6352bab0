/* krand.h — the kernels tests' pseudo-random inputs (xorshift64, reproducible) and an aborting
 * malloc. A test may #define KRAND_SEED before including it for its own stream. */
#ifndef ZERO_TESTS_KRAND_H
#define ZERO_TESTS_KRAND_H

#include <stdint.h>
#include <stdlib.h>

#ifndef KRAND_SEED
#define KRAND_SEED 0x9e3779b97f4a7c15ull
#endif

static uint64_t rng_state = KRAND_SEED;

/* uniform in [-1, 1) */
static inline float frand(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((rng_state >> 41) * (1.0 / 8388608.0)) * 2.0f - 1.0f;
}

static inline void *xmalloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) abort();
    return p;
}

#endif
