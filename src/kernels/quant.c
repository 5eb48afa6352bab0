/* quant.c — blockwise symmetric int8 and int4 quantization (quant.h has the formats and their
 * guarantees).
 *
 * One block at a time: widened to fp32 in a stack buffer, its max |x| found (with a flag for
 * inf/NaN, which a max would hide), then the division and rounding loop, which the compiler
 * vectorises. Threads take contiguous runs of whole blocks, so every block is computed the same
 * way whatever the team: the bits never depend on `threads`. int4 rounds into a small int8 block
 * first and packs the pairs in a second loop (a block is 128 whole bytes, so no byte is shared
 * between threads); its unpacking sign-extends a nibble with integer arithmetic (v - 2 (v & 8)),
 * which vectorises like the rest.
 */
#include "kernels/quant.h"

#include "core/core_internal.h"
#include "kmath.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

/* Blocks per thread slice: 16 x 4 bytes of scales, one cache line. */
enum { GRANULE = 16 };

/* max|x| on the bits: |x| is x with the sign bit cleared, and non-negative floats order as their
 * bit patterns do, so an integer max (which vectorises, unlike a float max that must mind NaN)
 * finds it; a pattern above FLT_MAX's is an inf or a NaN. */
static float block_scale(const float *x, size_t k, float qmax) {
    uint32_t m = 0;
    for (size_t i = 0; i < k; i++) {
        uint32_t b;
        memcpy(&b, &x[i], sizeof b);
        b &= 0x7fffffffu;
        m = b > m ? b : m;
    }
    if (m > 0x7f7fffffu) return NAN; /* inf or NaN */
    float amax;
    memcpy(&amax, &m, sizeof amax);
    if (amax == 0.0f) return 0.0f;
    const float s = amax / qmax;
    return s > 0.0f ? s : FLT_TRUE_MIN; /* underflow: the values are multiples of 2^-149 */
}

/* The block functions share one signature, for over_blocks: blocks [b0, b1) of an n-element
 * call from src into dst (quantize: x into the wire; dequantize: the wire into y, += with add). */
typedef void (*blocks_fn)(void *dst, const void *src, zero_dtype_t dt, size_t n, size_t G,
                          size_t b0, size_t b1, int add);

/* fn over the call's nb blocks on up to `threads` threads, in contiguous runs of whole blocks. */
static void over_blocks(blocks_fn fn, void *dst, const void *src, zero_dtype_t dt, size_t n,
                        size_t G, int threads, int add) {
    ZERO_ASSERT(G >= 1 && G <= ZERO__Q_GROUP_MAX);
    const size_t nb = zero__q_groups(n, G);
    const int nt = kthreads(n, threads);
    if (nt == 1) {
        fn(dst, src, dt, n, G, 0, nb, add);
        return;
    }
#pragma omp parallel num_threads(nt)
    {
        size_t lo, hi;
        kslice(nb, GRANULE, &lo, &hi);
        if (hi > lo) fn(dst, src, dt, n, G, lo, hi, add);
    }
}

static void quantize_blocks(void *dst, const void *x, zero_dtype_t dt, size_t n, size_t G,
                            size_t b0, size_t b1, int add) {
    (void)add;
    unsigned char *out = dst;
    float buf[ZERO__Q_GROUP_MAX];
    int8_t *q = (int8_t *)(out + 4 * zero__q_groups(n, G));
    const size_t es = zero_dtype_size(dt);
    for (size_t b = b0; b < b1; b++) {
        const size_t lo = b * G, k = ZERO_MIN(G, n - lo);
        const float *xf = buf;
        if (dt == ZERO_DTYPE_FP32)
            xf = (const float *)x + lo;
        else
            zero__widen(buf, (const unsigned char *)x + lo * es, k, dt);
        const float s = block_scale(xf, k, 127.0f);
        memcpy(out + 4 * b, &s, sizeof s); /* any alignment: rows of a matrix pack end to end */
        int8_t *qb = q + lo;
        if (!(s > 0.0f)) { /* zeros, or NaN (the scale carries it) */
            memset(qb, 0, k);
            continue;
        }
        for (size_t i = 0; i < k; i++) {
            float v = rintf(xf[i] / s); /* the default rounding mode: to nearest even */
            v = v > 127.0f ? 127.0f : v < -127.0f ? -127.0f : v;
            qb[i] = (int8_t)v;
        }
    }
}

static void dequantize_blocks(void *y, const void *src, zero_dtype_t dt, size_t n, size_t G,
                              size_t b0, size_t b1, int add) {
    (void)add;
    const unsigned char *in = src;
    float buf[ZERO__Q_GROUP_MAX];
    const int8_t *q = (const int8_t *)(in + 4 * zero__q_groups(n, G));
    const size_t es = zero_dtype_size(dt);
    for (size_t b = b0; b < b1; b++) {
        const size_t lo = b * G, k = ZERO_MIN(G, n - lo);
        float s;
        memcpy(&s, in + 4 * b, sizeof s);
        float *yf = dt == ZERO_DTYPE_FP32 ? (float *)y + lo : buf;
        const int8_t *qb = q + lo;
        for (size_t i = 0; i < k; i++) yf[i] = (float)qb[i] * s;
        if (dt != ZERO_DTYPE_FP32) zero__narrow((unsigned char *)y + lo * es, buf, k, dt);
    }
}

void zero__q8_quantize_g(void *out, const void *x, zero_dtype_t dt, size_t n, size_t group,
                         int threads) {
    over_blocks(quantize_blocks, out, x, dt, n, group, threads, 0);
}

void zero__q8_dequantize_g(void *y, zero_dtype_t dt, const void *in, size_t n, size_t group,
                           int threads) {
    over_blocks(dequantize_blocks, y, in, dt, n, group, threads, 0);
}

void zero__q8_quantize(void *out, const void *x, zero_dtype_t dt, size_t n, int threads) {
    zero__q8_quantize_g(out, x, dt, n, ZERO__Q8_BLOCK, threads);
}

void zero__q8_dequantize(void *y, zero_dtype_t dt, const void *in, size_t n, int threads) {
    zero__q8_dequantize_g(y, dt, in, n, ZERO__Q8_BLOCK, threads);
}

/* ------------------------------------------------------------------------------ int4 */

static void q4_quantize_blocks(void *dst, const void *x, zero_dtype_t dt, size_t n, size_t G,
                               size_t b0, size_t b1, int add) {
    (void)add;
    unsigned char *out = dst;
    float buf[ZERO__Q_GROUP_MAX];
    int8_t t[ZERO__Q_GROUP_MAX + 1];
    unsigned char *q = out + 4 * zero__q_groups(n, G);
    const size_t es = zero_dtype_size(dt);
    for (size_t b = b0; b < b1; b++) {
        const size_t lo = b * G, k = ZERO_MIN(G, n - lo);
        const size_t bytes = (k + 1) / 2;
        const float *xf = buf;
        if (dt == ZERO_DTYPE_FP32)
            xf = (const float *)x + lo;
        else
            zero__widen(buf, (const unsigned char *)x + lo * es, k, dt);
        const float s = block_scale(xf, k, 7.0f);
        memcpy(out + 4 * b, &s, sizeof s);
        unsigned char *qb = q + lo / 2; /* lo is even: blocks start on a byte */
        if (!(s > 0.0f)) {              /* zeros, or NaN (the scale carries it) */
            memset(qb, 0, bytes);
            continue;
        }
        for (size_t i = 0; i < k; i++) {
            float v = rintf(xf[i] / s); /* the default rounding mode: to nearest even */
            v = v > 7.0f ? 7.0f : v < -7.0f ? -7.0f : v;
            t[i] = (int8_t)v;
        }
        t[k] = 0; /* an odd block's last high nibble */
        for (size_t j = 0; j < bytes; j++)
            qb[j] = (unsigned char)(((unsigned)t[2 * j] & 0x0fu) |
                                    (((unsigned)t[2 * j + 1] & 0x0fu) << 4));
    }
}

/* The signed value of a 4-bit two's complement nibble v (0..15). */
static inline int nibble(unsigned v) { return (int)v - (int)((v & 8u) << 1); }

/* y (fp32, k elements) = q s of the block at qb; add: y += q s. */
static inline void q4_block_out(float *y, const unsigned char *qb, size_t k, float s, int add) {
    const size_t pairs = k / 2;
    if (add) {
        for (size_t j = 0; j < pairs; j++) {
            const float a = (float)nibble(qb[j] & 0x0fu) * s, c = (float)nibble(qb[j] >> 4) * s;
            y[2 * j] += a;
            y[2 * j + 1] += c;
        }
        if (k & 1) y[k - 1] += (float)nibble(qb[pairs] & 0x0fu) * s;
    } else {
        for (size_t j = 0; j < pairs; j++) {
            y[2 * j] = (float)nibble(qb[j] & 0x0fu) * s;
            y[2 * j + 1] = (float)nibble(qb[j] >> 4) * s;
        }
        if (k & 1) y[k - 1] = (float)nibble(qb[pairs] & 0x0fu) * s;
    }
}

/* Blocks [b0, b1) of in into y (n elements of dt); add: y (then fp32) += q s instead. */
static void q4_dequantize_blocks(void *y, const void *src, zero_dtype_t dt, size_t n, size_t G,
                                 size_t b0, size_t b1, int add) {
    const unsigned char *in = src;
    float buf[ZERO__Q_GROUP_MAX];
    const unsigned char *q = in + 4 * zero__q_groups(n, G);
    const size_t es = zero_dtype_size(dt);
    for (size_t b = b0; b < b1; b++) {
        const size_t lo = b * G, k = ZERO_MIN(G, n - lo);
        float s;
        memcpy(&s, in + 4 * b, sizeof s);
        float *yf = dt == ZERO_DTYPE_FP32 ? (float *)y + lo : buf;
        q4_block_out(yf, q + lo / 2, k, s, add);
        if (dt != ZERO_DTYPE_FP32) zero__narrow((unsigned char *)y + lo * es, buf, k, dt);
    }
}

void zero__q4_quantize_g(void *out, const void *x, zero_dtype_t dt, size_t n, size_t group,
                         int threads) {
    ZERO_ASSERT(group % 2 == 0);
    over_blocks(q4_quantize_blocks, out, x, dt, n, group, threads, 0);
}

void zero__q4_dequantize_g(void *y, zero_dtype_t dt, const void *in, size_t n, size_t group,
                           int threads) {
    ZERO_ASSERT(group % 2 == 0);
    over_blocks(q4_dequantize_blocks, y, in, dt, n, group, threads, 0);
}

void zero__q4_quantize(void *out, const void *x, zero_dtype_t dt, size_t n, int threads) {
    zero__q4_quantize_g(out, x, dt, n, ZERO__Q4_BLOCK, threads);
}

void zero__q4_dequantize(void *y, zero_dtype_t dt, const void *in, size_t n, int threads) {
    zero__q4_dequantize_g(y, dt, in, n, ZERO__Q4_BLOCK, threads);
}

void zero__q4_dequantize_add(float *acc, const void *in, size_t n, int threads) {
    over_blocks(q4_dequantize_blocks, acc, in, ZERO_DTYPE_FP32, n, ZERO__Q4_BLOCK, threads, 1);
}
