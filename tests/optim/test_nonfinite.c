/* test_nonfinite.c — zero__has_nonfinite (src/optim/nonfinite.c) against a naive reference.
 *
 * Reference: widen each element to fp32 (exact, tested in test_dtype) and ask isfinite().
 * Buffers hold random finite values including the largest finite ones (FLT_MAX, bf16 0x7f7f,
 * fp16 65504) and subnormals; one inf or NaN (several payloads, both signs) is planted at
 * positions that hit the first element, vector and block (4096-element) boundaries and the
 * tail, for lengths 0..9000. Both the dispatched path and the scalar path are checked.
 */
#include "optim/optim_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "check.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t next_u32(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

static float u2f(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

static int ref_has_nonfinite(const void *buf, size_t n, zero_dtype_t dt) {
    for (size_t i = 0; i < n; i++) {
        float x;
        if (dt == ZERO_DTYPE_FP32)
            x = ((const float *)buf)[i];
        else if (dt == ZERO_DTYPE_BF16)
            x = zero_bf16_to_fp32(((const uint16_t *)buf)[i]);
        else
            x = zero_fp16_to_fp32(((const uint16_t *)buf)[i]);
        if (!isfinite(x)) return 1;
    }
    return 0;
}

/* A random finite element of the dtype, biased towards the extremes. */
static uint32_t random_finite(zero_dtype_t dt) {
    uint32_t r = next_u32(), pick = r % 8;
    uint32_t sign = (r >> 3) & 1;
    if (dt == ZERO_DTYPE_FP32) {
        uint32_t v = pick == 0   ? 0x7f7fffffu
                     : pick == 1 ? (next_u32() & 0x7fffffu)
                                 : next_u32() % 0x7f800000u;
        return v | (sign << 31);
    }
    uint16_t max = dt == ZERO_DTYPE_BF16 ? 0x7f7f : 0x7bff;
    uint16_t v = pick == 0 ? max : (uint16_t)(next_u32() % ((uint32_t)max + 1));
    return v | (sign << 15);
}

static uint32_t random_nonfinite(zero_dtype_t dt, int k) {
    uint32_t sign = (uint32_t)(k & 1);
    if (dt == ZERO_DTYPE_FP32) {
        uint32_t mant = (k / 2) % 3 == 0 ? 0 : (k / 2) % 3 == 1 ? 1 : 0x400000u;
        return (sign << 31) | 0x7f800000u | mant;
    }
    uint16_t e = dt == ZERO_DTYPE_BF16 ? 0x7f80 : 0x7c00;
    uint16_t mant = (k / 2) % 3 == 0 ? 0 : (k / 2) % 3 == 1 ? 1 : (uint16_t)(e >> 1 & ~e);
    return (sign << 15) | e | mant;
}

static void check_dtype(zero_dtype_t dt) {
    enum { MAXN = 9000 };
    size_t es = zero_dtype_size(dt);
    unsigned char *buf = malloc(MAXN * 4 + 64);
    if (!buf) exit(2);
    const size_t lens[] = {0,  1,   2,    15,   16,   17,   31,   32,
                           33, 100, 4095, 4096, 4097, 8191, 8192, 9000};
    int mism = 0, k = 0;
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
        size_t n = lens[li];
        for (int off = 0; off < 2; off++) { /* aligned and misaligned by one element */
            unsigned char *b = buf + off * es;
            for (size_t i = 0; i < n; i++) {
                uint32_t v = random_finite(dt);
                if (es == 4)
                    ((float *)b)[i] = u2f(v);
                else
                    ((uint16_t *)b)[i] = (uint16_t)v;
            }
            int want = ref_has_nonfinite(b, n, dt);
            mism += want != 0;
            mism += zero__has_nonfinite(b, n, dt) != want;
            mism += zero__has_nonfinite_scalar(b, n, dt) != want;
            /* plant one non-finite value at interesting positions */
            const size_t pos[] = {0, 1, 15, 16, 31, 32, 4095, 4096, n / 2, n - 1};
            for (size_t pi = 0; pi < sizeof pos / sizeof pos[0]; pi++) {
                if (n == 0 || pos[pi] >= n) continue;
                size_t at = pos[pi];
                uint32_t bad = random_nonfinite(dt, k++);
                uint32_t saved;
                if (es == 4) {
                    memcpy(&saved, b + at * 4, 4);
                    memcpy(b + at * 4, &bad, 4);
                } else {
                    uint16_t s16, b16 = (uint16_t)bad;
                    memcpy(&s16, b + at * 2, 2);
                    saved = s16;
                    memcpy(b + at * 2, &b16, 2);
                }
                int w = ref_has_nonfinite(b, n, dt);
                mism += w != 1;
                mism += zero__has_nonfinite(b, n, dt) != w;
                mism += zero__has_nonfinite_scalar(b, n, dt) != w;
                if (es == 4) {
                    memcpy(b + at * 4, &saved, 4);
                } else {
                    uint16_t s16 = (uint16_t)saved;
                    memcpy(b + at * 2, &s16, 2);
                }
            }
            /* the element just past the end is non-finite: must not be read */
            if (es == 4) {
                float inf = u2f(0x7f800000u);
                memcpy(b + n * 4, &inf, 4);
            } else {
                uint16_t inf = dt == ZERO_DTYPE_BF16 ? 0x7f80 : 0x7c00;
                memcpy(b + n * 2, &inf, 2);
            }
            mism += zero__has_nonfinite(b, n, dt) != 0;
        }
    }
    CHECK(mism == 0, "%s: %d disagreements with the reference", zero_dtype_name(dt), mism);
    free(buf);
}

int main(void) {
    check_dtype(ZERO_DTYPE_FP32);
    check_dtype(ZERO_DTYPE_BF16);
    check_dtype(ZERO_DTYPE_FP16);
    return check_report();
}
