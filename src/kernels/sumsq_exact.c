/* sumsq_exact.c — the exact sum of squares (sumsq_exact.h).
 *
 * How: an fp32 value with exponent field e and fraction f is m 2^(e' - 150), m = f + 2^23 and
 * e' = e for a normal value, m = f and e' = 1 for a subnormal one; its square is m^2
 * 2^(2 e' - 300) = m^2 2^(2 e' - 2) units of 2^-298, m^2 < 2^48 an integer. The squares of a
 * block of at most 2^16 elements are added into one uint64 bin per exponent field e (so a bin
 * stays below 2^64), in XSUM_WAYS sets of bins taken in turn so that consecutive elements of one
 * exponent do not wait on each other's add. At the block's end every bin is added into the
 * 640-bit sum at bit 2 e' - 2. Threads sum blocks into their own sums, merged at the end: integer
 * additions, so who summed what does not matter. The one rounding to double takes the leading 53
 * bits of the integer, rounds to nearest even on the rest and scales by ldexp.
 */
#include "sumsq_exact.h"

#include "kmath.h"

#include "core/core_internal.h"

#include <math.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define XSUM_BINS 256    /* by the exponent field e: 0 (subnormal: e' = 1) .. 254, 255 unread */
#define XSUM_WAYS 4      /* bin sets, element i into set i % XSUM_WAYS (a ragged end into 0) */
#define XSUM_BLOCK 65536 /* elements per block: 2^16 squares below 2^48 sum below 2^64 */
#define XSUM_PIECE 1024  /* 16-bit values widened to fp32 bits this many at a time */

/* limb[k..] += v (carry propagated; the invariant keeps it inside the limbs). */
static void add_at(uint64_t *limb, int k, uint64_t v) {
    for (; v && k < ZERO__XSUM_LIMBS; k++) {
        const uint64_t t = limb[k] + v;
        v = t < v;
        limb[k] = t;
    }
}

/* sum += v 2^shift. */
static void add_shifted(uint64_t *limb, uint64_t v, unsigned shift) {
    const int k = (int)(shift / 64);
    const unsigned off = shift % 64;
    add_at(limb, k, v << off);
    if (off) add_at(limb, k + 1, v >> (64 - off));
}

/* The squares of the fp32 bit patterns b[0, n) into the bins, without a branch: a subnormal's
 * bin 0 weighs as e' = 1's, inf and NaN (e = 255) go to bin 255, which is never read; if one was
 * seen the piece is scanned again to tell inf from NaN into *flags (rare). */
static void bins_add(uint64_t bin[XSUM_WAYS][XSUM_BINS], const uint32_t *b, size_t n,
                     uint64_t *flags) {
    uint32_t top = 0;
    size_t i = 0;
    for (; i + XSUM_WAYS <= n; i += XSUM_WAYS)
        for (int w = 0; w < XSUM_WAYS; w++) {
            const uint32_t e = (b[i + w] >> 23) & 0xffu;
            const uint64_t m = (b[i + w] & 0x7fffffu) | (uint32_t)(e != 0) << 23;
            bin[w][e] += m * m;
            top |= e == 0xffu;
        }
    for (; i < n; i++) {
        const uint32_t e = (b[i] >> 23) & 0xffu;
        const uint64_t m = (b[i] & 0x7fffffu) | (uint32_t)(e != 0) << 23;
        bin[0][e] += m * m;
        top |= e == 0xffu;
    }
    for (size_t j = 0; top && j < n; j++)
        if (((b[j] >> 23) & 0xffu) == 0xffu) *flags |= b[j] & 0x7fffffu ? 2u : 1u;
}

/* s += the squares of x[a, b) (b - a <= XSUM_BLOCK) of dtype dt. */
static void block_add(zero__xsum_t *s, const void *x, zero_dtype_t dt, size_t a, size_t b) {
    uint64_t bin[XSUM_WAYS][XSUM_BINS];
    memset(bin, 0, sizeof bin);
    if (dt == ZERO_DTYPE_FP32) {
        bins_add(bin, (const uint32_t *)x + a, b - a, &s->nonfinite);
    } else {
        const uint16_t *h = (const uint16_t *)x;
        union {
            float f[XSUM_PIECE];
            uint32_t b[XSUM_PIECE];
        } piece;
        for (size_t i = a; i < b; i += XSUM_PIECE) {
            const size_t k = ZERO_MIN((size_t)XSUM_PIECE, b - i);
            if (dt == ZERO_DTYPE_BF16) /* bf16 is the top half of an fp32 */
                for (size_t j = 0; j < k; j++) piece.b[j] = (uint32_t)h[i + j] << 16;
            else /* exact: every fp16 is an fp32 */
                zero_fp16_to_fp32_array(piece.f, h + i, k);
            bins_add(bin, piece.b, k, &s->nonfinite);
        }
    }
    for (unsigned e = 0; e < XSUM_BINS - 1; e++) {
        uint64_t v = 0; /* the ways' bins share the block's bound: no overflow */
        for (int w = 0; w < XSUM_WAYS; w++) v += bin[w][e];
        if (v) add_shifted(s->limb, v, e ? 2 * e - 2 : 0);
    }
}

void zero__xsum_merge(zero__xsum_t *dst, const zero__xsum_t *src) {
    uint64_t carry = 0;
    for (int k = 0; k < ZERO__XSUM_LIMBS; k++) {
        const uint64_t t = dst->limb[k] + carry;
        const uint64_t c1 = t < carry;
        dst->limb[k] = t + src->limb[k];
        carry = c1 + (dst->limb[k] < src->limb[k]);
    }
    dst->nonfinite |= src->nonfinite;
}

void zero__xsum_add_squares(zero__xsum_t *s, const void *x, size_t n, zero_dtype_t dt,
                            int threads) {
    ZERO_ASSERT((x || n == 0) &&
                (dt == ZERO_DTYPE_FP32 || dt == ZERO_DTYPE_BF16 || dt == ZERO_DTYPE_FP16));
    const size_t blocks = (n + XSUM_BLOCK - 1) / XSUM_BLOCK;
    int nt = kthreads(n, threads);
    if ((size_t)nt > blocks) nt = (int)ZERO_MAX(blocks, (size_t)1);
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        int id, team;
        kteam(&id, &team);
        zero__xsum_t mine;
        memset(&mine, 0, sizeof mine);
        for (size_t k = (size_t)id; k < blocks; k += (size_t)team)
            block_add(&mine, x, dt, k * XSUM_BLOCK, ZERO_MIN(n, (k + 1) * XSUM_BLOCK));
#pragma omp critical(zero_xsum_merge)
        zero__xsum_merge(s, &mine);
    }
}

/* Bit i of the sum. */
static unsigned bit_at(const zero__xsum_t *s, int i) {
    return (unsigned)(s->limb[i / 64] >> (i % 64)) & 1u;
}

double zero__xsum_value(const zero__xsum_t *s) {
    if (s->nonfinite & 2u) return NAN;
    if (s->nonfinite & 1u) return INFINITY;
    int k = ZERO__XSUM_LIMBS - 1;
    while (k >= 0 && !s->limb[k]) k--;
    if (k < 0) return 0.0;
    int top = 64 * k + 63;
    while (!bit_at(s, top)) top--;
    if (top < 53) return ldexp((double)s->limb[0], -298); /* below 2^53: exact */
    const int lo = top - 52;                              /* the lowest of the 53 kept bits */
    uint64_t m = s->limb[lo / 64] >> (lo % 64);
    if (lo % 64 && lo / 64 + 1 < ZERO__XSUM_LIMBS) m |= s->limb[lo / 64 + 1] << (64 - lo % 64);
    m &= (UINT64_C(1) << 53) - 1;
    /* round to nearest, ties to even: the bit below, and whether anything under it is set */
    const unsigned half = bit_at(s, lo - 1);
    unsigned sticky = 0;
    for (int i = 0; i < (lo - 1) / 64 && !sticky; i++) sticky = s->limb[i] != 0;
    if (!sticky && (lo - 1) % 64)
        sticky = (s->limb[(lo - 1) / 64] & ((UINT64_C(1) << ((lo - 1) % 64)) - 1)) != 0;
    if (half && (sticky || (m & 1u))) m++; /* 2^53 at most: still exact in a double */
    return ldexp((double)m, lo - 298);
}
