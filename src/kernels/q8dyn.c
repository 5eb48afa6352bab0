/* q8dyn.c — bitsandbytes' dynamic map, 8-bit block-wise quantization and the 8-bit Adam step
 * (q8dyn.h).
 *
 * The code of a value is the number of the 255 midpoints between neighbouring map entries that
 * lie strictly below it (a 256th "midpoint" of +inf pads the table), which is the nearest entry
 * with ties to the lower code. Encoding starts from a table indexed by the top 16 bits of the
 * value's fp32 pattern (sign, exponent, 7 mantissa bits), which holds that count for the
 * smallest value sharing those bits, and steps up past the midpoints still below the value: at
 * most a few steps, since the map's entries are farther apart than 2^-8 relative. (A binary
 * search over the midpoints took 8 dependent loads per value, the step's largest cost.)
 */
#include "kernels/q8dyn.h"

#include "core/core_internal.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static float maps[2][256], mids[2][256];
/* start[s][k]: the midpoints of map s below the smallest value whose fp32 bits begin with k */
static uint8_t start[2][65536];
static pthread_once_t maps_once = PTHREAD_ONCE_INIT;

/* The number of midpoints strictly below y (branch-free binary search; the table's build). */
static unsigned count_below(float y, const float *mid) {
    unsigned idx = 0;
    for (unsigned step = 128; step; step >>= 1) idx += mid[idx + step - 1] < y ? step : 0;
    return idx;
}

static float from_bits(uint32_t b) {
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

static int cmp_float(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static void build_maps(void) {
    for (int s = 0; s < 2; s++) { /* 0: unsigned, 1: signed */
        float *m = maps[s];
        int k = 0;
        for (int i = 0; i < 7; i++) {
            const int parts = s ? 1 << i : 2 << i;
            for (int j = 0; j < parts; j++) {
                /* the midpoint of the j-th part of [0.1, 1], in decade 10^(i - 6) */
                const double v = pow(10.0, i - 6) * (0.1 + 0.9 * (2 * j + 1) / (2.0 * parts));
                m[k++] = (float)v;
                if (s) m[k++] = (float)-v;
            }
        }
        m[k++] = 0.0f;
        m[k++] = 1.0f;
        ZERO_ASSERT(k == 256);
        qsort(m, 256, sizeof *m, cmp_float);
        for (int j = 0; j < 255; j++) mids[s][j] = 0.5f * (m[j] + m[j + 1]);
        mids[s][255] = INFINITY;
        for (uint32_t key = 0; key < 65536; key++) {
            /* the smallest value of the bucket: its first pattern if positive, its last if not */
            const float lo = from_bits(key < 0x8000 ? key << 16 : (key << 16) | 0xffffu);
            start[s][key] = (uint8_t)(isfinite(lo) ? count_below(lo, mids[s]) : 0);
        }
    }
}

const float *zero__q8dyn_map(int is_signed) {
    pthread_once(&maps_once, build_maps);
    return maps[!!is_signed];
}

/* y finite, in [-1, 1]; start: start[s] of the map whose midpoints are mid */
static inline uint8_t encode(float y, const float *mid, const uint8_t *from) {
    uint32_t b;
    memcpy(&b, &y, sizeof b);
    unsigned idx = from[b >> 16];
    while (mid[idx] < y) idx++;
    return (uint8_t)idx;
}

/* Inputs are finite (q8dyn.h), so plain comparisons give fmaxf's and fminf's results. */
static float block_absmax(const float *x, size_t k) {
    float a = 0.0f;
    for (size_t i = 0; i < k; i++) {
        const float v = fabsf(x[i]);
        a = v > a ? v : a;
    }
    return a > 1e-38f ? a : 1e-38f;
}

static void quantize_block(uint8_t *codes, float *absmax, const float *x, size_t k, int s) {
    const float a = block_absmax(x, k);
    *absmax = a;
    for (size_t i = 0; i < k; i++) {
        float y = x[i] / a;
        y = y > 1.0f ? 1.0f : y < -1.0f ? -1.0f : y;
        codes[i] = encode(y, mids[s], start[s]);
    }
}

void zero__q8dyn_quantize(uint8_t *codes, float *absmax, const float *x, size_t n, int is_signed) {
    pthread_once(&maps_once, build_maps);
    for (size_t b = 0; b * ZERO__Q8DYN_BLOCK < n; b++) {
        const size_t lo = b * ZERO__Q8DYN_BLOCK, k = ZERO_MIN((size_t)ZERO__Q8DYN_BLOCK, n - lo);
        quantize_block(codes + lo, absmax + b, x + lo, k, !!is_signed);
    }
}

void zero__q8dyn_dequantize(float *x, const uint8_t *codes, const float *absmax, size_t n,
                            int is_signed) {
    const float *map = zero__q8dyn_map(is_signed);
    for (size_t i = 0; i < n; i++) x[i] = map[codes[i]] * absmax[i / ZERO__Q8DYN_BLOCK];
}

void zero__adam8_update(float *params, const float *grads, float gscale, uint8_t *m_codes,
                        float *m_absmax, uint8_t *v_codes, float *v_absmax, size_t n,
                        const zero__adamw_hp_t *hp) {
    pthread_once(&maps_once, build_maps);
    const float b1 = hp->beta1, b2 = hp->beta2, lr = hp->lr, eps = hp->eps, wd = hp->weight_decay;
    /* zero's AdamW constants, as optim_fused.c computes them */
    const float b1c = 1.0f - b1, b2c = 1.0f - b2;
    const float bc1 = (float)(1.0 / (1.0 - pow((double)b1, (double)hp->t)));
    const float bc2 = (float)(1.0 / (1.0 - pow((double)b2, (double)hp->t)));
    float m[ZERO__Q8DYN_BLOCK], v[ZERO__Q8DYN_BLOCK];
    for (size_t b = 0; b * ZERO__Q8DYN_BLOCK < n; b++) {
        const size_t lo = b * ZERO__Q8DYN_BLOCK, k = ZERO_MIN((size_t)ZERO__Q8DYN_BLOCK, n - lo);
        const float ma = m_absmax[b], va = v_absmax[b];
        for (size_t i = 0; i < k; i++) {
            const float g = grads[lo + i] * gscale;
            const float mi = b1 * (maps[1][m_codes[lo + i]] * ma) + b1c * g;
            const float vi = b2 * (maps[0][v_codes[lo + i]] * va) + b2c * g * g;
            m[i] = mi;
            v[i] = vi;
            const float p = params[lo + i];
            const float upd = (mi * bc1) / (sqrtf(vi * bc2) + eps);
            params[lo + i] = p - lr * (upd + wd * p);
        }
        quantize_block(m_codes + lo, m_absmax + b, m, k, 1);
        quantize_block(v_codes + lo, v_absmax + b, v, k, 0);
    }
}
