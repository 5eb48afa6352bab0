/* test_quant.c — the blockwise int8 quantization of ZeRO++ qwZ and the int4 one of qgZ
 * (src/kernels/quant.c).
 *
 * Oracles: (1) bitwise, a naive scalar quantizer and dequantizer written here from the format's
 * definition (quant.h: per block of 256, s = max|x| / 127, q = rint(x / s) clamped to
 * [-127, 127], x' = q s), element by element with no blocking or threads; (2) closed forms: the
 * wire size 4 ceil(n / 256) + n, the error bound |x - x'| <= s / 2 (plus the fp32 rounding of the
 * division and product, and with 16-bit dtypes half an ulp of the result), exact round trips
 * of values that are integer multiples of their block's scale; (3) the edge cases the format
 * promises: zero blocks give zeros (no division by zero), an inf or NaN makes its whole block
 * NaN and never a finite value, blocks too small for max / 127 to be a normal number come back
 * exactly. Sizes 1, 7, 255, 256, 257, 1000003 (short last blocks, across the threading
 * threshold); fp32, bf16, fp16; 1 and 2 threads (the bits must not change).
 * int4 the same way (s = max|x| / 7, q in [-7, 7]): the wire bytes bitwise against a naive
 * quantizer and a packing written from the format (element 2i in the low nibble of byte i), the
 * values read back nibble by nibble, dequantize and dequantize-add against q s, the bound
 * |x - q s| <= s / 2, sizes 0, 1, 2, 3, 255 .. 257, 511, 1000, 1000003, 1e6 + 3 (odd, short and
 * empty blocks), the same edge cases.
 * The matmul on group-quantized weight rows (matmul_q.c): bitwise its documented order, against
 * a dequantize-then-matmul twin in double within the activations' int16 rounding and against
 * the unquantized weights within that plus the bound the group scales give.
 */
#include "check.h"
#include "core/core_internal.h"
#include "kernels/isa.h"
#include "kernels/quant.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/krand.h"

static const zero_dtype_t dtypes[] = {ZERO_DTYPE_FP32, ZERO_DTYPE_BF16, ZERO_DTYPE_FP16};

/* x as stored in dt, and back (the value the quantizer sees). */
static float in_dtype(float x, zero_dtype_t dt) {
    if (dt == ZERO_DTYPE_BF16) return zero_bf16_to_fp32(zero_fp32_to_bf16(x));
    if (dt == ZERO_DTYPE_FP16) return zero_fp16_to_fp32(zero_fp32_to_fp16(x));
    return x;
}

static void store(void *buf, size_t i, float x, zero_dtype_t dt) {
    if (dt == ZERO_DTYPE_FP32)
        ((float *)buf)[i] = x;
    else
        ((uint16_t *)buf)[i] = dt == ZERO_DTYPE_BF16 ? zero_fp32_to_bf16(x) : zero_fp32_to_fp16(x);
}

static float load(const void *buf, size_t i, zero_dtype_t dt) {
    if (dt == ZERO_DTYPE_FP32) return ((const float *)buf)[i];
    uint16_t h = ((const uint16_t *)buf)[i];
    return dt == ZERO_DTYPE_BF16 ? zero_bf16_to_fp32(h) : zero_fp16_to_fp32(h);
}

/* The naive reference: scales (nb) and q (n) of the n values x (already in fp32). */
static void ref_quantize(float *scales, int8_t *q, const float *x, size_t n) {
    for (size_t b = 0; b * 256 < n; b++) {
        size_t lo = b * 256, hi = lo + 256 < n ? lo + 256 : n;
        float amax = 0.0f;
        int finite = 1;
        for (size_t i = lo; i < hi; i++) {
            if (!isfinite(x[i])) finite = 0;
            if (fabsf(x[i]) > amax) amax = fabsf(x[i]);
        }
        float s = !finite ? NAN : amax == 0.0f ? 0.0f : amax / 127.0f;
        if (finite && amax > 0.0f && s == 0.0f) s = FLT_TRUE_MIN;
        scales[b] = s;
        for (size_t i = lo; i < hi; i++) {
            if (!(s > 0.0f)) {
                q[i] = 0;
                continue;
            }
            float v = nearbyintf(x[i] / s);
            if (v > 127.0f) v = 127.0f;
            if (v < -127.0f) v = -127.0f;
            q[i] = (int8_t)v;
        }
    }
}

/* Quantize x (n values of dt) with the kernel on `threads` threads, compare the wire bytes with
 * the reference bitwise, dequantize and compare with q s rounded into dt; check the bound.
 * Returns the wire bytes (owned by the caller) for further checks. */
static unsigned char *round_trip(const char *what, const void *x, zero_dtype_t dt, size_t n,
                                 int threads, void *y) {
    const size_t nb = (n + 255) / 256;
    CHECK(zero__q8_blocks(n) == nb && zero__q8_bytes(n) == 4 * nb + n,
          "%s: n=%zu: %zu bytes on the wire (expected 4 x %zu + %zu)", what, n, zero__q8_bytes(n),
          nb, n);
    unsigned char *wire = xmalloc(4 * nb + n);
    zero__q8_quantize(wire, x, dt, n, threads);
    float *xf = xmalloc(n * sizeof *xf), *rs = xmalloc(nb * sizeof *rs);
    int8_t *rq = xmalloc(n);
    for (size_t i = 0; i < n; i++) xf[i] = load(x, i, dt);
    ref_quantize(rs, rq, xf, n);
    const float *ks = (const float *)wire;
    const int8_t *kq = (const int8_t *)(wire + 4 * nb);
    size_t bad_s = 0, bad_q = 0;
    for (size_t b = 0; b < nb; b++) bad_s += memcmp(&ks[b], &rs[b], 4) != 0;
    for (size_t i = 0; i < n; i++) bad_q += kq[i] != rq[i];
    CHECK(!bad_s && !bad_q,
          "%s: %s n=%zu threads=%d: %zu scales and %zu values differ from the "
          "naive reference",
          what, zero_dtype_name(dt), n, threads, bad_s, bad_q);
    zero__q8_dequantize(y, dt, wire, n, threads);
    size_t bad_y = 0, bad_bound = 0;
    for (size_t i = 0; i < n; i++) {
        const float s = rs[i / 256];
        const float want = in_dtype((float)rq[i] * s, dt);
        const float got = load(y, i, dt);
        if (memcmp(&want, &got, 4) && !(isnan(want) && isnan(got))) bad_y++;
        if (isfinite(s)) {
            /* s/2, the fp32 rounding of x/s and q s (relative 2^-23 of |x|), half an ulp of dt */
            const double ulp = dt == ZERO_DTYPE_FP32   ? 0x1p-24
                               : dt == ZERO_DTYPE_BF16 ? 0x1p-8
                                                       : 0x1p-11;
            const double tol = s / 2.0 * (1.0 + 0x1p-20) + fabs(xf[i]) * (0x1p-22 + ulp) + s * ulp +
                               (dt == ZERO_DTYPE_FP16 ? 0x1p-24 : FLT_TRUE_MIN);
            if (!(fabs((double)got - (double)xf[i]) <= tol)) bad_bound++;
        }
    }
    CHECK(!bad_y, "%s: %s n=%zu threads=%d: %zu dequantized values are not q x scale", what,
          zero_dtype_name(dt), n, threads, bad_y);
    CHECK(!bad_bound, "%s: %s n=%zu threads=%d: %zu values off by more than scale / 2", what,
          zero_dtype_name(dt), n, threads, bad_bound);
    free(xf);
    free(rs);
    free(rq);
    return wire;
}

/* Zero blocks (no division by zero), blocks that underflow, non-finite values. */
static void edge_blocks(void) {
    const size_t n = 1000; /* blocks 0..3, the last one 232 long */
    float *x = xmalloc(n * sizeof *x), *y = xmalloc(n * sizeof *y);
    for (size_t i = 0; i < n; i++) x[i] = frand();
    for (size_t i = 256; i < 512; i++) x[i] = (i % 2) ? -0.0f : 0.0f; /* block 1: zeros */
    for (size_t i = 512; i < 768; i++)
        x[i] = (float)((int)(i % 9) - 4) * FLT_TRUE_MIN; /* block 2: tiny */
    x[800] = INFINITY;                                   /* block 3: one inf */
    unsigned char *w = round_trip("edges", x, ZERO_DTYPE_FP32, n, 1, y);
    const float *sc = (const float *)w;
    CHECK(sc[1] == 0.0f, "zero block: scale %g (expected 0)", (double)sc[1]);
    int zeros = 1, tiny = 1, nans = 1, finite0 = 1;
    for (size_t i = 256; i < 512; i++) zeros &= y[i] == 0.0f;
    for (size_t i = 512; i < 768; i++) tiny &= y[i] == x[i];
    for (size_t i = 768; i < n; i++) nans &= isnan(y[i]);
    for (size_t i = 0; i < 256; i++) finite0 &= isfinite(y[i]);
    CHECK(zeros, "zero block: not zeros back");
    CHECK(sc[2] == FLT_TRUE_MIN && tiny, "tiny block: scale %g, not exact back", (double)sc[2]);
    CHECK(isnan(sc[3]) && nans, "block with an inf: scale %g, every element NaN: %d", (double)sc[3],
          nans);
    CHECK(finite0, "the blocks beside a non-finite one stay finite");
    free(w);
    /* NaN and -inf, in bf16 too; the first element of a one-element tensor */
    const float specials[] = {NAN, -INFINITY, INFINITY};
    for (size_t d = 0; d < ZERO_ARRAY_LEN(dtypes); d++)
        for (size_t k = 0; k < ZERO_ARRAY_LEN(specials); k++) {
            const zero_dtype_t dt = dtypes[d];
            const size_t es = zero_dtype_size(dt), m = 257;
            void *xs = xmalloc(m * es), *ys = xmalloc(m * es);
            for (size_t i = 0; i < m; i++) store(xs, i, 0.5f, dt);
            store(xs, 3, specials[k], dt);
            store(xs, 256, specials[k], dt); /* the short last block of one */
            free(round_trip("non-finite", xs, dt, m, 1, ys));
            int all_nan = 1;
            for (size_t i = 0; i < m; i++) all_nan &= isnan(load(ys, i, dt));
            CHECK(all_nan, "%s %g: a non-finite value's block must come back NaN",
                  zero_dtype_name(dt), (double)specials[k]);
            free(xs);
            free(ys);
        }
    free(x);
    free(y);
}

/* ------------------------------------------------------------------------------ int4 */

/* The naive int4 reference: scales (nb) and q (n, in [-7, 7]) of the n values x. */
static void ref_quantize4(float *scales, int8_t *q, const float *x, size_t n) {
    for (size_t b = 0; b * 256 < n; b++) {
        size_t lo = b * 256, hi = lo + 256 < n ? lo + 256 : n;
        float amax = 0.0f;
        int finite = 1;
        for (size_t i = lo; i < hi; i++) {
            if (!isfinite(x[i])) finite = 0;
            if (fabsf(x[i]) > amax) amax = fabsf(x[i]);
        }
        float s = !finite ? NAN : amax == 0.0f ? 0.0f : amax / 7.0f;
        if (finite && amax > 0.0f && s == 0.0f) s = FLT_TRUE_MIN;
        scales[b] = s;
        for (size_t i = lo; i < hi; i++) {
            float v = s > 0.0f ? nearbyintf(x[i] / s) : 0.0f;
            if (v > 7.0f) v = 7.0f;
            if (v < -7.0f) v = -7.0f;
            q[i] = (int8_t)v;
        }
    }
}

/* Element i's value on the wire (nibble i % 2 of byte i / 2 after the scales, sign-extended). */
static int wire_q4(const unsigned char *wire, size_t nb, size_t i) {
    const unsigned byte = wire[4 * nb + i / 2];
    const int v = (int)(i % 2 ? byte >> 4 : byte & 15u);
    return v >= 8 ? v - 16 : v;
}

/* Quantize x (n values of dt), compare with the reference bitwise (scales, packed bytes, read
 * back values), dequantize (into dt, and added into an fp32 accumulator) against q s, check the
 * bound. Returns the wire bytes. */
static unsigned char *round_trip4(const char *what, const void *x, zero_dtype_t dt, size_t n,
                                  int threads, void *y) {
    const size_t nb = (n + 255) / 256, bytes = 4 * nb + (n + 1) / 2;
    CHECK(zero__q4_blocks(n) == nb && zero__q4_bytes(n) == bytes,
          "%s: n=%zu: %zu int4 bytes on the wire (expected 4 x %zu + %zu)", what, n,
          zero__q4_bytes(n), nb, (n + 1) / 2);
    unsigned char *wire = xmalloc(bytes + 1);
    wire[bytes] = 0xa5; /* a guard: the kernel writes exactly `bytes` */
    zero__q4_quantize(wire, x, dt, n, threads);
    CHECK(wire[bytes] == 0xa5, "%s: n=%zu: int4 quantize wrote past its %zu bytes", what, n, bytes);
    float *xf = xmalloc(n * sizeof *xf), *rs = xmalloc(nb * sizeof *rs);
    int8_t *rq = xmalloc(n + 1);
    for (size_t i = 0; i < n; i++) xf[i] = load(x, i, dt);
    ref_quantize4(rs, rq, xf, n);
    /* the reference's bytes, packed from the format's definition */
    unsigned char *rw = xmalloc(bytes);
    memcpy(rw, rs, 4 * nb);
    for (size_t j = 0; j < (n + 1) / 2; j++) {
        const unsigned lo = (unsigned)(rq[2 * j] & 15);
        const unsigned hi = 2 * j + 1 < n ? (unsigned)(rq[2 * j + 1] & 15) : 0u;
        rw[4 * nb + j] = (unsigned char)(lo | hi << 4);
    }
    size_t bad_q = 0;
    for (size_t i = 0; i < n; i++) bad_q += wire_q4(wire, nb, i) != rq[i];
    CHECK(!memcmp(wire, rw, bytes) && !bad_q,
          "%s: %s n=%zu threads=%d: int4 wire differs from the naive reference (%zu values)", what,
          zero_dtype_name(dt), n, threads, bad_q);
    zero__q4_dequantize(y, dt, wire, n, threads);
    float *acc = xmalloc(n * sizeof *acc);
    for (size_t i = 0; i < n; i++) acc[i] = (float)(i % 5) * 0.25f;
    zero__q4_dequantize_add(acc, wire, n, threads);
    size_t bad_y = 0, bad_add = 0, bad_bound = 0;
    for (size_t i = 0; i < n; i++) {
        const float s = rs[i / 256], qs = (float)rq[i] * s;
        const float want = in_dtype(qs, dt), got = load(y, i, dt);
        if (memcmp(&want, &got, 4) && !(isnan(want) && isnan(got))) bad_y++;
        const float want_add = (float)(i % 5) * 0.25f + qs;
        if (memcmp(&want_add, &acc[i], 4) && !(isnan(want_add) && isnan(acc[i]))) bad_add++;
        if (isfinite(s)) {
            const double ulp = dt == ZERO_DTYPE_FP32   ? 0x1p-24
                               : dt == ZERO_DTYPE_BF16 ? 0x1p-8
                                                       : 0x1p-11;
            const double tol = s / 2.0 * (1.0 + 0x1p-20) + fabs(xf[i]) * (0x1p-22 + ulp) + s * ulp +
                               (dt == ZERO_DTYPE_FP16 ? 0x1p-24 : FLT_TRUE_MIN);
            if (!(fabs((double)got - (double)xf[i]) <= tol)) bad_bound++;
        }
    }
    CHECK(!bad_y, "%s: %s n=%zu threads=%d: %zu int4 dequantized values are not q x scale", what,
          zero_dtype_name(dt), n, threads, bad_y);
    CHECK(!bad_add, "%s: n=%zu threads=%d: %zu int4 dequantize-adds are not acc + q x scale", what,
          n, threads, bad_add);
    CHECK(!bad_bound, "%s: %s n=%zu threads=%d: %zu int4 values off by more than scale / 2", what,
          zero_dtype_name(dt), n, threads, bad_bound);
    free(acc);
    free(rw);
    free(xf);
    free(rs);
    free(rq);
    return wire;
}

static void q4_edge_blocks(void) {
    const size_t n = 1001; /* blocks 0..3, the last one 233 long */
    float *x = xmalloc(n * sizeof *x), *y = xmalloc(n * sizeof *y);
    for (size_t i = 0; i < n; i++) x[i] = frand();
    for (size_t i = 256; i < 512; i++) x[i] = (i % 2) ? -0.0f : 0.0f;
    for (size_t i = 512; i < 768; i++) x[i] = (float)((int)(i % 9) - 4) * FLT_TRUE_MIN;
    x[1000] = NAN; /* block 3, its last (odd) element */
    unsigned char *w = round_trip4("edges", x, ZERO_DTYPE_FP32, n, 1, y);
    float sc[4];
    memcpy(sc, w, sizeof sc);
    int zeros = 1, tiny = 1, nans = 1, finite0 = 1;
    for (size_t i = 256; i < 512; i++) zeros &= y[i] == 0.0f;
    for (size_t i = 512; i < 768; i++) tiny &= y[i] == x[i];
    for (size_t i = 768; i < n; i++) nans &= isnan(y[i]);
    for (size_t i = 0; i < 256; i++) finite0 &= isfinite(y[i]);
    CHECK(sc[1] == 0.0f && zeros, "int4 zero block: scale %g, zeros back: %d", (double)sc[1],
          zeros);
    CHECK(sc[2] == FLT_TRUE_MIN && tiny, "int4 tiny block: scale %g, not exact back",
          (double)sc[2]);
    CHECK(isnan(sc[3]) && nans, "int4 block with a NaN: scale %g, every element NaN: %d",
          (double)sc[3], nans);
    CHECK(finite0, "int4: the blocks beside a non-finite one stay finite");
    free(w);
    const float specials[] = {NAN, -INFINITY, INFINITY};
    for (size_t d = 0; d < ZERO_ARRAY_LEN(dtypes); d++)
        for (size_t k = 0; k < ZERO_ARRAY_LEN(specials); k++) {
            const zero_dtype_t dt = dtypes[d];
            const size_t es = zero_dtype_size(dt), m = 257;
            void *xs = xmalloc(m * es), *ys = xmalloc(m * es);
            for (size_t i = 0; i < m; i++) store(xs, i, 0.5f, dt);
            store(xs, 3, specials[k], dt);
            store(xs, 256, specials[k], dt);
            free(round_trip4("non-finite", xs, dt, m, 1, ys));
            int all_nan = 1;
            for (size_t i = 0; i < m; i++) all_nan &= isnan(load(ys, i, dt));
            CHECK(all_nan, "int4 %s %g: a non-finite value's block must come back NaN",
                  zero_dtype_name(dt), (double)specials[k]);
            free(xs);
            free(ys);
        }
    free(x);
    free(y);
}

/* What the size and multiples checks need of a wire format: int8 or int4. */
typedef struct {
    const char *name;
    unsigned char *(*round_trip)(const char *what, const void *x, zero_dtype_t dt, size_t n,
                                 int threads, void *y);
    size_t (*bytes)(size_t n);
    int qmax; /* the largest quantized magnitude: 127 or 7 */
} format_t;

static const format_t int8_format = {"int8", round_trip, zero__q8_bytes, 127};
static const format_t int4_format = {"int4", round_trip4, zero__q4_bytes, 7};

/* Random values of several magnitudes per block (a layernorm gain beside small weights), on 1
 * and 2 threads: the same bits. */
static void sizes_and_threads(const format_t *f) {
    const size_t sizes[] = {0, 1, 2, 3, 7, 255, 256, 257, 511, 1000, 1000003};
    for (size_t d = 0; d < ZERO_ARRAY_LEN(dtypes); d++)
        for (size_t k = 0; k < ZERO_ARRAY_LEN(sizes); k++) {
            const zero_dtype_t dt = dtypes[d];
            const size_t n = sizes[k], es = zero_dtype_size(dt);
            void *x = xmalloc(n * es), *y1 = xmalloc(n * es), *y2 = xmalloc(n * es);
            for (size_t i = 0; i < n; i++) {
                float mag = (i / 300) % 3 == 0 ? 1.0f : (i / 300) % 3 == 1 ? 0.02f : 3e-5f;
                store(x, i, frand() * mag, dt);
            }
            unsigned char *w1 = f->round_trip("random", x, dt, n, 1, y1);
            unsigned char *w2 = f->round_trip("random", x, dt, n, 2, y2);
            CHECK(!memcmp(w1, w2, f->bytes(n)) && !memcmp(y1, y2, n * es),
                  "%s %s n=%zu: 1 and 2 threads give different bits", f->name, zero_dtype_name(dt),
                  n);
            free(w1);
            free(w2);
            free(x);
            free(y1);
            free(y2);
        }
}

/* Values k s of a block whose max is qmax s (s a power of two, so max / qmax is s exactly) come
 * back bitwise, |k| <= qmax; with s = 1, the integers -qmax..qmax. */
static void exact_multiples(const format_t *f) {
    const int span = 2 * f->qmax + 1;
    for (int e = -20; e <= 20; e += 5) {
        const size_t n = 701; /* the last block 189 long, an odd count */
        const float s = ldexpf(1.0f, e);
        float *x = xmalloc(n * sizeof *x), *y = xmalloc(n * sizeof *y);
        for (size_t i = 0; i < n; i++) x[i] = (float)((int)(i * 37 % span) - f->qmax) * s;
        for (size_t b = 0; b * 256 < n; b++) x[b * 256] = (float)(b % 2 ? -f->qmax : f->qmax) * s;
        free(f->round_trip("multiples", x, ZERO_DTYPE_FP32, n, 1, y));
        CHECK(!memcmp(x, y, n * sizeof *x), "%s multiples of 2^%d: not bitwise back", f->name, e);
        free(x);
        free(y);
    }
}

/* ------------------------------------------------------------------------------ matmul */

/* Scale g of a wire (rows pack end to end, so it may be unaligned). */
static float scale_at(const unsigned char *wire, size_t g) {
    float s;
    memcpy(&s, wire + 4 * g, sizeof s);
    return s;
}

/* The documented order of zero__matmul_forward_q (matmul_q.c's file comment), re-derived: the
 * row rounded to int16 with sx = max|x| / 32767; per group, 16 int32 lanes, element lo + i into
 * lane (i % 32) / 2; A = fma(s, (float)D, A); then fma(sx, the lanes in a tree of 8, 4, 2, 1,
 * bias). q: the row's int8 values (int4 unpacked). Returns sx through *sxp. */
static float documented_order(const float *x, const int8_t *q, const unsigned char *wire, size_t C,
                              size_t G, float bias, float *sxp) {
    float a = 0.0f;
    for (size_t i = 0; i < C; i++) a = fabsf(x[i]) > a ? fabsf(x[i]) : a;
    const float m = 32767.0f / a, sx = a / 32767.0f;
    float A[16] = {0};
    for (size_t lo = 0, g = 0; lo < C; lo += G, g++) {
        const size_t n = C - lo < G ? C - lo : G;
        int32_t D[16] = {0};
        for (size_t i = 0; i < n; i++) {
            const long xq = lrintf(x[lo + i] * m);
            CHECK(labs(xq) <= 32767, "x' %ld out of int16", xq);
            D[(i % 32) / 2] += (int32_t)xq * q[lo + i];
        }
        for (int j = 0; j < 16; j++) A[j] = fmaf(scale_at(wire, g), (float)D[j], A[j]);
    }
    for (int w = 8; w > 0; w /= 2)
        for (int j = 0; j < w; j++) A[j] += A[j + w];
    *sxp = sx;
    return fmaf(sx, A[0], bias);
}

/* zero__matmul_forward_q against (1) the naive twin: every row dequantized (the _g round trip,
 * itself checked bitwise above for G = 256 and here against q s per group), then a double
 * matmul: within sum_i |w'_i| sx / 2 (the activations' rounding to int16) plus 1e-5 relative of
 * sum |x w'|; (2) the original fp32 weights: within that plus the bound sum_i |x_i| s_g(i) / 2
 * from the group scales; (3) bitwise, the documented order re-derived in scalar code: the
 * AVX-512 path here, and the portable one in the test_quant_baseline run (ZERO_ISA=baseline).
 * Shapes with C not a multiple of G or of 32 (short last groups and chunks), 1 and 5 rows, 1 and
 * 2 threads (bitwise equal). Then rows of zeros (zero dot products: the bias) and rows with an
 * inf or a NaN (NaN outputs, the other rows untouched). */
static void matmul_q(void) {
    const struct {
        size_t rows, C, OC, G;
    } shapes[] = {{1, 64, 48, 64},    {5, 64, 48, 32}, {1, 100, 33, 48},   {5, 256, 130, 64},
                  {3, 768, 200, 128}, {2, 6, 5, 2},    {4, 1030, 17, 1024}};
    for (int bits = 8; bits >= 4; bits -= 4)
        for (size_t k = 0; k < ZERO_ARRAY_LEN(shapes); k++) {
            const size_t R = shapes[k].rows, C = shapes[k].C, OC = shapes[k].OC, G = shapes[k].G;
            const size_t rb = zero__q_row_bytes(bits, C, G), ng = (C + G - 1) / G;
            CHECK(rb == 4 * ng + (bits == 8 ? C : (C + 1) / 2), "row bytes %zu", rb);
            float *w = xmalloc(OC * C * sizeof *w), *wd = xmalloc(OC * C * sizeof *wd);
            float *x = xmalloc(R * C * sizeof *x), *bias = xmalloc(OC * sizeof *bias);
            float *out = xmalloc(R * OC * sizeof *out), *out2 = xmalloc(R * OC * sizeof *out2);
            void *scratch = xmalloc(zero__matmul_q_scratch_bytes(R, C, 2));
            unsigned char *wq = xmalloc(OC * rb);
            for (size_t i = 0; i < OC * C; i++) w[i] = frand();
            for (size_t i = 0; i < R * C; i++) x[i] = frand();
            for (size_t i = 0; i < OC; i++) bias[i] = frand();
            size_t bad_deq = 0, bad_twin = 0, bad_bound = 0, bad_order = 0;
            int8_t *qv = xmalloc(OC * C);
            for (size_t o = 0; o < OC; o++) {
                if (bits == 8) {
                    zero__q8_quantize_g(wq + o * rb, w + o * C, ZERO_DTYPE_FP32, C, G, 1);
                    zero__q8_dequantize_g(wd + o * C, ZERO_DTYPE_FP32, wq + o * rb, C, G, 1);
                } else {
                    zero__q4_quantize_g(wq + o * rb, w + o * C, ZERO_DTYPE_FP32, C, G, 1);
                    zero__q4_dequantize_g(wd + o * C, ZERO_DTYPE_FP32, wq + o * rb, C, G, 1);
                }
                /* per group: s = max|w| / qmax, w' = q s with |q| <= qmax, |w - w'| <= s / 2 (up
                 * to the fp32 rounding of w / s and q s, as round_trip allows) */
                for (size_t i = 0; i < C; i++) {
                    const float s = scale_at(wq + o * rb, i / G), qmax = bits == 8 ? 127.0f : 7.0f;
                    const float q = wd[o * C + i] / s;
                    qv[o * C + i] = (int8_t)rintf(q);
                    if (fabsf(q - rintf(q)) > 1e-3f || fabsf(q) > qmax + 1e-3f ||
                        fabs((double)wd[o * C + i] - w[o * C + i]) >
                            s / 2.0 * (1.0 + 0x1p-20) + fabs(w[o * C + i]) * 0x1p-22 + s * 0x1p-24)
                        bad_deq++;
                }
            }
            zero__matmul_forward_q(out, x, wq, bits, G, bias, R, C, OC, scratch, 1);
            zero__matmul_forward_q(out2, x, wq, bits, G, bias, R, C, OC, scratch, 2);
            CHECK(!memcmp(out, out2, R * OC * sizeof *out), "int%d %zux%zux%zu G %zu: threads",
                  bits, R, C, OC, G);
            for (size_t r = 0; r < R; r++)
                for (size_t o = 0; o < OC; o++) {
                    float sx;
                    const float want =
                        documented_order(x + r * C, qv + o * C, wq + o * rb, C, G, bias[o], &sx);
                    double twin = bias[o], mag = fabs(bias[o]), exact = bias[o], wbound = 0,
                           xbound = 0;
                    for (size_t i = 0; i < C; i++) {
                        twin += (double)x[r * C + i] * wd[o * C + i];
                        exact += (double)x[r * C + i] * w[o * C + i];
                        mag += fabs((double)x[r * C + i] * wd[o * C + i]);
                        wbound += fabs((double)x[r * C + i]) * scale_at(wq + o * rb, i / G) / 2;
                        xbound += fabs((double)wd[o * C + i]) * sx / 2;
                    }
                    const double got = out[r * OC + o];
                    if (memcmp(&want, &out[r * OC + o], sizeof want)) bad_order++;
                    if (fabs(got - twin) > xbound * (1 + 1e-5) + 1e-5 * mag) bad_twin++;
                    if (fabs(got - exact) > (wbound + xbound) * (1 + 1e-5) + 1e-5 * mag)
                        bad_bound++;
                }
            CHECK(!bad_order,
                  "int%d %zux%zux%zu G %zu (%s): %zu outputs not bitwise the documented "
                  "order",
                  bits, R, C, OC, G, zero__isa_name(zero__isa_selected()), bad_order);
            CHECK(!bad_deq && !bad_twin && !bad_bound,
                  "int%d %zux%zux%zu G %zu: %zu weights off their group's grid, %zu outputs off "
                  "the dequantize-then-matmul twin, %zu beyond the group-scale bound",
                  bits, R, C, OC, G, bad_deq, bad_twin, bad_bound);
            /* row 0 all zeros: the bias exactly; row 1 (if any) with an inf, row 2 a NaN: NaN
             * outputs there, and the other rows' outputs unchanged */
            for (size_t i = 0; i < C; i++) x[i] = 0.0f;
            if (R > 2) x[C + C / 2] = INFINITY, x[2 * C + C - 1] = NAN;
            zero__matmul_forward_q(out2, x, wq, bits, G, bias, R, C, OC, scratch, 2);
            size_t bad_zero = 0, bad_nan = 0, bad_rest = 0;
            for (size_t r = 0; r < R; r++)
                for (size_t o = 0; o < OC; o++) {
                    const float v = out2[r * OC + o];
                    if (r == 0)
                        bad_zero += memcmp(&v, &bias[o], sizeof v) != 0;
                    else if (R > 2 && r <= 2)
                        bad_nan += !isnan(v);
                    else
                        bad_rest += memcmp(&v, &out[r * OC + o], sizeof v) != 0;
                }
            CHECK(!bad_zero && !bad_nan && !bad_rest,
                  "int%d %zux%zux%zu G %zu: %zu outputs of a zero row not the bias, %zu of a "
                  "row with inf / NaN not NaN, %zu of other rows changed",
                  bits, R, C, OC, G, bad_zero, bad_nan, bad_rest);
            free(qv);
            free(w);
            free(wd);
            free(x);
            free(bias);
            free(out);
            free(out2);
            free(scratch);
            free(wq);
        }
}

int main(void) {
    matmul_q();
    sizes_and_threads(&int8_format);
    exact_multiples(&int8_format);
    edge_blocks();
    sizes_and_threads(&int4_format);
    exact_multiples(&int4_format);
    q4_edge_blocks();
    return check_report();
}
