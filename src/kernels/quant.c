/* quant.c — blockwise symmetric int8 quantization (quant.h has the format and its guarantees).
 *
 * One block at a time: widened to fp32 in a stack buffer, its max |x| found (with a flag for
 * inf/NaN, which a max would hide), then the division and rounding loop, which the compiler
 * vectorises. Threads take contiguous runs of whole blocks, so every block is computed the same
 * way whatever the team: the bits never depend on `threads`.
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
static float block_scale(const float *x, size_t k) {
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
    const float s = amax / 127.0f;
    return s > 0.0f ? s : FLT_TRUE_MIN; /* underflow: the values are multiples of 2^-149 */
}

static void quantize_blocks(unsigned char *out, const void *x, zero_dtype_t dt, size_t n, size_t b0,
                            size_t b1) {
    float buf[ZERO__Q8_BLOCK];
    float *scales = (float *)out;
    int8_t *q = (int8_t *)(out + 4 * zero__q8_blocks(n));
    const size_t es = zero_dtype_size(dt);
    for (size_t b = b0; b < b1; b++) {
        const size_t lo = b * ZERO__Q8_BLOCK, k = ZERO_MIN((size_t)ZERO__Q8_BLOCK, n - lo);
        const float *xf = buf;
        if (dt == ZERO_DTYPE_FP32)
            xf = (const float *)x + lo;
        else
            zero__widen(buf, (const unsigned char *)x + lo * es, k, dt);
        const float s = block_scale(xf, k);
        scales[b] = s;
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

static void dequantize_blocks(void *y, zero_dtype_t dt, const unsigned char *in, size_t n,
                              size_t b0, size_t b1) {
    float buf[ZERO__Q8_BLOCK];
    const float *scales = (const float *)in;
    const int8_t *q = (const int8_t *)(in + 4 * zero__q8_blocks(n));
    const size_t es = zero_dtype_size(dt);
    for (size_t b = b0; b < b1; b++) {
        const size_t lo = b * ZERO__Q8_BLOCK, k = ZERO_MIN((size_t)ZERO__Q8_BLOCK, n - lo);
        const float s = scales[b];
        float *yf = dt == ZERO_DTYPE_FP32 ? (float *)y + lo : buf;
        const int8_t *qb = q + lo;
        for (size_t i = 0; i < k; i++) yf[i] = (float)qb[i] * s;
        if (dt != ZERO_DTYPE_FP32) zero__narrow((unsigned char *)y + lo * es, buf, k, dt);
    }
}

void zero__q8_quantize(void *out, const void *x, zero_dtype_t dt, size_t n, int threads) {
    const size_t nb = zero__q8_blocks(n);
    const int nt = kthreads(n, threads);
    if (nt == 1) {
        quantize_blocks(out, x, dt, n, 0, nb);
        return;
    }
#pragma omp parallel num_threads(nt)
    {
        size_t lo, hi;
        kslice(nb, GRANULE, &lo, &hi);
        if (hi > lo) quantize_blocks(out, x, dt, n, lo, hi);
    }
}

void zero__q8_dequantize(void *y, zero_dtype_t dt, const void *in, size_t n, int threads) {
    const size_t nb = zero__q8_blocks(n);
    const int nt = kthreads(n, threads);
    if (nt == 1) {
        dequantize_blocks(y, dt, in, n, 0, nb);
        return;
    }
#pragma omp parallel num_threads(nt)
    {
        size_t lo, hi;
        kslice(nb, GRANULE, &lo, &hi);
        if (hi > lo) dequantize_blocks(y, dt, in, n, lo, hi);
    }
}
