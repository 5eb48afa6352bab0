/* rng.c — the library's small pseudo-random stream (xorshift64*, Vigna 2016): data windows and
 * token sampling. Not for anything that needs statistical quality beyond that, nor for secrets.
 */
#include "core/core_internal.h"

uint64_t zero__rng_next(uint64_t *s) {
    uint64_t x = *s ? *s : 0x9e3779b97f4a7c15ull;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545f4914f6cdd1dull;
}

float zero__rng_float(uint64_t *s) { return (float)(zero__rng_next(s) >> 40) / 16777216.0f; }
