/* fp8_qdq.c — FP8 quantize-dequantize of GEMM inputs, amax, TE's delayed-scaling update
 * (fp8_qdq.h).
 *
 * The encode and decode are fp8.h's array kernels on spans of at most ZERO__FP8_TILE elements
 * widened into a stack buffer, so nothing is allocated; rows are split over threads (kslice), and
 * every element's result depends on it and its scale only. Not here: the choice of scales (the
 * model's, model/fp8.c) and any GEMM.
 */
#include "kernels/fp8_qdq.h"

#include "core/core_internal.h"
#include "kernels/kmath.h"

#include <float.h>
#include <math.h>
#include <string.h>

enum { SPAN = ZERO__FP8_TILE };

/* buf[0..n) = x[i0..i0+n) widened to fp32 (core's zero__widen at an offset). */
static void widen(float *buf, const void *x, zero_dtype_t dt, size_t i0, size_t n) {
    zero__widen(buf, (const char *)x + i0 * zero_dtype_size(dt), n, dt);
}

/* out[i0..i0+n) = buf[0..n) rounded to dt (core's zero__narrow at an offset). */
static void narrow(void *out, const float *buf, zero_dtype_t dt, size_t i0, size_t n) {
    zero__narrow((char *)out + i0 * zero_dtype_size(dt), buf, n, dt);
}

static float span_amax(const float *buf, size_t n) {
    float m = 0.0f;
    for (size_t i = 0; i < n; i++) {
        float a = fabsf(buf[i]);
        if (a != a) a = INFINITY; /* NaN: carried as +Inf */
        m = a > m ? a : m;
    }
    return m;
}

float zero__fp8_amax(const void *x, zero_dtype_t dt, size_t n, int threads) {
    float best = 0.0f;
    const int nt = kthreads(n, threads);
#pragma omp parallel num_threads(nt)
    {
        size_t i0, i1;
        kslice(n, SPAN, &i0, &i1);
        float buf[SPAN], m = 0.0f;
        for (size_t i = i0; i < i1; i += SPAN) {
            size_t k = ZERO_MIN((size_t)SPAN, i1 - i);
            widen(buf, x, dt, i, k);
            float a = span_amax(buf, k);
            m = a > m ? a : m;
        }
#pragma omp critical(zero_fp8_amax)
        best = m > best ? m : best;
    }
    return best;
}

void zero__fp8_qdq(void *out, const void *x, zero_dtype_t dt, size_t n, float scale,
                   zero__fp8_format_t f, int threads) {
    const float inv = 1.0f / scale;
    const int nt = kthreads(n, threads);
#pragma omp parallel num_threads(nt)
    {
        size_t i0, i1;
        kslice(n, SPAN, &i0, &i1);
        float buf[SPAN];
        uint8_t q[SPAN];
        for (size_t i = i0; i < i1; i += SPAN) {
            size_t k = ZERO_MIN((size_t)SPAN, i1 - i);
            widen(buf, x, dt, i, k);
            zero__fp8_encode(q, buf, k, scale, f);
            zero__fp8_decode(buf, q, k, inv, f);
            narrow(out, buf, dt, i, k);
        }
    }
}

/* One tile's scale s from its amax (fp8_qdq.h). */
static float tile_scale(float amax, float floor, float fmax) {
    float a = amax > floor ? amax : floor;
    return a > 0.0f ? a / fmax : 1.0f;
}

/* The tile's values x / s quantized and dequantized (dec * s) in place in buf. */
static void tile_span(float *buf, size_t k, float s, zero__fp8_format_t f) {
    uint8_t q[SPAN];
    for (size_t j = 0; j < k; j++) buf[j] = buf[j] / s;
    zero__fp8_encode(q, buf, k, 1.0f, f);
    zero__fp8_decode(buf, q, k, s, f);
}

void zero__fp8_qdq_tiles(void *out, const void *x, zero_dtype_t dt, size_t rows, size_t cols,
                         size_t tile_rows, float floor, zero__fp8_format_t f, int threads) {
    ZERO_ASSERT(tile_rows >= 1);
    const float fmax = zero__fp8_max(f);
    const size_t bands = (rows + tile_rows - 1) / tile_rows;
    const int nt = kthreads(rows * cols, threads);
#pragma omp parallel num_threads(nt)
    {
        size_t b0, b1;
        kslice(bands, 1, &b0, &b1);
        float buf[SPAN];
        for (size_t b = b0; b < b1; b++) {
            const size_t r0 = b * tile_rows, r1 = ZERO_MIN(rows, r0 + tile_rows);
            for (size_t c0 = 0; c0 < cols; c0 += SPAN) {
                const size_t k = ZERO_MIN((size_t)SPAN, cols - c0);
                float amax = 0.0f;
                for (size_t r = r0; r < r1; r++) {
                    widen(buf, x, dt, r * cols + c0, k);
                    float a = span_amax(buf, k);
                    amax = a > amax ? a : amax;
                }
                const float s = tile_scale(amax, floor, fmax);
                for (size_t r = r0; r < r1; r++) {
                    widen(buf, x, dt, r * cols + c0, k);
                    tile_span(buf, k, s, f);
                    narrow(out, buf, dt, r * cols + c0, k);
                }
            }
        }
    }
}

float zero__fp8_pow2_scale(float amax) {
    if (!(amax > 0.0f) || !isfinite(amax)) return 1.0f;
    /* amax = f 2^e with f in [0.5, 1) and 448 = 0.875 2^9: exact, no division */
    int e;
    const float f = frexpf(amax, &e);
    const int k = f <= 0.875f ? e - 9 : e - 8;
    return ldexpf(1.0f, k < -126 ? -126 : k);
}

float zero__fp8_block_encode(uint8_t *codes, const float *x, size_t n) {
    ZERO_ASSERT(n <= SPAN);
    const float s = zero__fp8_pow2_scale(span_amax(x, n));
    zero__fp8_encode(codes, x, n, 1.0f / s, ZERO__FP8_E4M3);
    return s;
}

void zero__fp8_block_decode(float *x, const uint8_t *codes, size_t n, float s) {
    zero__fp8_decode(x, codes, n, s, ZERO__FP8_E4M3);
}

void zero__fp8_round_blocks(void *x, zero_dtype_t dt, size_t n) {
    float buf[SPAN];
    uint8_t q[SPAN];
    for (size_t i = 0; i < n; i += SPAN) {
        const size_t k = ZERO_MIN((size_t)SPAN, n - i);
        widen(buf, x, dt, i, k);
        const float s = zero__fp8_block_encode(q, buf, k);
        zero__fp8_block_decode(buf, q, k, s);
        narrow(x, buf, dt, i, k);
    }
}

void zero__fp8_delayed_update(float *scale, float *history, size_t len, float amax, float fp8_max,
                              int margin) {
    ZERO_ASSERT(len >= 1);
    history[0] = amax;
    float a = 0.0f;
    for (size_t i = 0; i < len; i++) a = fmaxf(a, history[i]);
    if (isfinite(a) && a > 0.0f) {
        float s = fp8_max / a / ldexpf(1.0f, margin);
        *scale = isinf(s) ? FLT_MAX : s;
    }
    const float first = history[0];
    for (size_t i = 1; i + 1 < len; i++) history[i] = history[i + 1];
    if (len > 1) history[len - 1] = first;
    history[0] = 0.0f;
}
