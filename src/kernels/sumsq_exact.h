/* sumsq_exact.h — the exact sum of squares of fp32, bf16 or fp16 values (sumsq_exact.c).
 *
 * Why: a float64 sum of squares depends on the order of its terms, so two layouts that cut the
 * same tensor into other shards (expert parallelism: a stacked unit at another ep) give norms
 * that differ in the last bits. This sum is exact, so it is one integer whatever the cut, the
 * order, the thread count or the ranks that contributed; it is rounded to a double once.
 * Not here: which units use it (the engine's step), communication (the engine gathers the
 * accumulators and merges them).
 * Invariant: every finite fp32 x is an integer multiple of 2^-149 below 2^128, so x^2 is an
 * integer multiple of 2^-298 below 2^256 and a sum of fewer than 2^64 of them is an integer
 * below 2^618 in units of 2^-298: ZERO__XSUM_LIMBS 64-bit limbs (640 bits) hold it exactly.
 * bf16 and fp16 values are fp32 values.
 */
#ifndef ZERO_KERNELS_SUMSQ_EXACT_H
#define ZERO_KERNELS_SUMSQ_EXACT_H

#include "zero/core.h"

#include <stddef.h>
#include <stdint.h>

#define ZERO__XSUM_LIMBS 10

/* An exact sum of squares: limb[0] the least significant, in units of 2^-298. Zero-initialise
 * (memset or = {0}) to start a sum. */
typedef struct zero__xsum {
    uint64_t limb[ZERO__XSUM_LIMBS];
    uint64_t nonfinite; /* bit 0: an inf was added, bit 1: a NaN */
} zero__xsum_t;

/* s += sum of x[i]^2, x: (n) of dtype dt (fp32, bf16 or fp16). Exact, so the result does not
 * depend on threads. */
void zero__xsum_add_squares(zero__xsum_t *s, const void *x, size_t n, zero_dtype_t dt, int threads);

/* dst += src, exactly (so merging any number of sums in any order gives the same dst). */
void zero__xsum_merge(zero__xsum_t *dst, const zero__xsum_t *src);

/* The sum rounded once to the nearest double (ties to even); NaN if a NaN was added, else +inf
 * if an inf was (as a float64 sum of the same squares would be). */
double zero__xsum_value(const zero__xsum_t *s);

#endif
