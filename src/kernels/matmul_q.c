/* matmul_q.c — the linear forward on group-quantized weights (quant.h, zero__matmul_forward_q).
 *
 * Batch-1 decoding reads every weight once per token, so its speed is the bytes read: the
 * weights stay int8 (or int4) in memory and are never widened as a whole. Converting each int8
 * weight to fp32 for an fp32 FMA (the first fused form) cost more instructions than the memory
 * left time for (0.38 of the bandwidth bound); so the activations are rounded to int16 once per
 * call and the dot products run in integers, 32 weights per multiply-add instruction, exact:
 *   per input row: a = max|x_i|; m = 32767 / a, x'_i = round_to_nearest_even(x_i m) (|x'_i| <=
 *   32767), sx = a / 32767 (a row of zeros: x' = 0, sx = 0; a non-finite a: sx = NaN, so the
 *   row's outputs are NaN);
 *   per group g of [lo, hi): 16 int32 lanes, element lo + i into lane (i % 32) / 2, D += x' q
 *   (exact: |D| <= 64 * 32767 * 127 < 2^31 for groups up to 1024); then
 *   A = fma(s_g, (float)D, A) lane by lane;
 *   out = fma(sx, (A's 16 lanes added in a fixed tree), bias).
 * The only rounding beyond the weights' is x's to 16 bits: |x_i - x'_i sx| <= sx / 2 (1.5e-5 of
 * the row's largest |x|), so an output moves by at most sum_i |q_i s_g(i)| sx / 2 more, and the
 * float sums are per group, not per element. The portable loop (dot_ref) and the AVX-512 one
 * (dot_avx512: vpmovsxbw, vpmaddwd, vpaddd) compute exactly these operations, so they agree
 * bitwise; a row's result does not depend on the other rows, on `threads` or on the 4 rows a
 * pass serves. int4 rows are first unpacked into an int8 row (the same values, C bytes in the
 * thread's scratch), then take the same path.
 * Not here: the quantization and its format (quant.c).
 */
#include "kernels/quant.h"

#include "core/core_internal.h"
#include "isa.h"
#include "kmath.h"
#include "tree16.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#define RB 4 /* input rows per pass over a weight row */

/* Scale g of a row's wire (rows pack end to end: any alignment). */
static inline float scale_at(const unsigned char *row, size_t g) {
    float s;
    memcpy(&s, row + 4 * g, sizeof s);
    return s;
}

/* xq (C) <- x rounded to int16 as the file comment says; returns sx. */
static float round_row(int16_t *xq, const float *x, size_t C) {
    float a = 0.0f;
    int finite = 1;
    for (size_t i = 0; i < C; i++) {
        const float v = fabsf(x[i]);
        finite &= v <= FLT_MAX; /* false for inf and NaN */
        a = v > a ? v : a;
    }
    if (!finite || a == 0.0f) {
        memset(xq, 0, C * sizeof *xq);
        return finite ? 0.0f : NAN;
    }
    const float m = 32767.0f / a;
    for (size_t i = 0; i < C; i++) xq[i] = (int16_t)nearbyintf(x[i] * m);
    return a / 32767.0f;
}

/* out[r] = fma(sx[r], dot, bias) for the nr (<= RB) rows xq + r * C: the file comment's order. */
static void dot_ref(float *out, size_t ldo, const int16_t *xq, const float *sx, size_t nr,
                    const int8_t *q, const unsigned char *scales, size_t C, size_t G, float bias) {
    for (size_t r = 0; r < nr; r++) {
        const int16_t *xr = xq + r * C;
        float A[16] = {0};
        for (size_t g = 0, lo = 0; lo < C; g++, lo += G) {
            const size_t n = ZERO_MIN(G, C - lo);
            int32_t D[16] = {0};
            for (size_t i = 0; i < n; i++) D[(i % 32) / 2] += (int32_t)xr[lo + i] * q[lo + i];
            const float s = scale_at(scales, g);
            for (int j = 0; j < 16; j++) A[j] = fmaf(s, (float)D[j], A[j]);
        }
        out[r * ldo] = fmaf(sx[r], tree16(A), bias);
    }
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_X86 1
#define TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))

/* dot_ref with the lanes in registers: nr is a constant after inlining, so the arrays of
 * vectors become registers. Lane j of a multiply-add is x'_2j q_2j + x'_2j+1 q_2j+1 of the 32
 * elements it is given: dot_ref's lane (i % 32) / 2. A group's tail is loaded through a mask
 * (zeros beyond it). The step D += x' q is vpdpwssd where the CPU has AVX512-VNNI, else
 * vpmaddwd then vpaddd: the same exact integers, so the same bits. */
#define MADD_BW(D, x, w) _mm512_add_epi32((D), _mm512_madd_epi16((x), (w)))
#define MADD_VNNI(D, x, w) _mm512_dpwssd_epi32((D), (x), (w))
#define DOT_ROWS(NAME, TARGET, MADD)                                                               \
    TARGET __attribute__((always_inline)) static inline void NAME##_rows(                          \
        float *out, size_t ldo, const int16_t *xq, const float *sx, const size_t nr,               \
        const int8_t *q, const unsigned char *scales, size_t C, size_t G, float bias) {            \
        __m512 A[RB];                                                                              \
        __m512i D[RB];                                                                             \
        for (size_t r = 0; r < nr; r++) A[r] = _mm512_setzero_ps();                                \
        for (size_t g = 0, lo = 0; lo < C; g++, lo += G) {                                         \
            const size_t n = ZERO_MIN(G, C - lo);                                                  \
            for (size_t r = 0; r < nr; r++) D[r] = _mm512_setzero_si512();                         \
            size_t i = 0;                                                                          \
            for (; i + 32 <= n; i += 32) {                                                         \
                const __m512i w =                                                                  \
                    _mm512_cvtepi8_epi16(_mm256_loadu_si256((const void *)(q + lo + i)));          \
                for (size_t r = 0; r < nr; r++)                                                    \
                    D[r] = MADD(D[r], _mm512_loadu_si512(xq + r * C + lo + i), w);                 \
            }                                                                                      \
            if (i < n) {                                                                           \
                const __mmask32 m = (__mmask32)((1ull << (n - i)) - 1);                            \
                const __m512i w = _mm512_cvtepi8_epi16(_mm256_maskz_loadu_epi8(m, q + lo + i));    \
                for (size_t r = 0; r < nr; r++)                                                    \
                    D[r] = MADD(D[r], _mm512_maskz_loadu_epi16(m, xq + r * C + lo + i), w);        \
            }                                                                                      \
            const __m512 vs = _mm512_set1_ps(scale_at(scales, g));                                 \
            for (size_t r = 0; r < nr; r++)                                                        \
                A[r] = _mm512_fmadd_ps(vs, _mm512_cvtepi32_ps(D[r]), A[r]);                        \
        }                                                                                          \
        for (size_t r = 0; r < nr; r++) out[r * ldo] = fmaf(sx[r], tree16_avx512(A[r]), bias);     \
    }                                                                                              \
    TARGET static void NAME(float *out, size_t ldo, const int16_t *xq, const float *sx, size_t nr, \
                            const int8_t *q, const unsigned char *scales, size_t C, size_t G,      \
                            float bias) {                                                          \
        switch (nr) {                                                                              \
        case 4: NAME##_rows(out, ldo, xq, sx, 4, q, scales, C, G, bias); break;                    \
        case 3: NAME##_rows(out, ldo, xq, sx, 3, q, scales, C, G, bias); break;                    \
        case 2: NAME##_rows(out, ldo, xq, sx, 2, q, scales, C, G, bias); break;                    \
        default: NAME##_rows(out, ldo, xq, sx, 1, q, scales, C, G, bias); break;                   \
        }                                                                                          \
    }

DOT_ROWS(dot_avx512, TARGET_AVX512, MADD_BW)
DOT_ROWS(dot_avx512vnni, __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"))), MADD_VNNI)
#endif

typedef void (*dot_fn)(float *out, size_t ldo, const int16_t *xq, const float *sx, size_t nr,
                       const int8_t *q, const unsigned char *scales, size_t C, size_t G,
                       float bias);

/* The dot product of the level chosen for all kernels (isa.h: ZERO_ISA caps it too). */
static dot_fn chosen_dot(void) {
#ifdef HAVE_X86
    if (zero__isa_selected() >= ZERO__ISA_AVX512) {
        const char *vnni = getenv("ZERO_VNNI"); /* "0": the BW form (tests run both) */
        const int off = vnni && !strcmp(vnni, "0");
        return __builtin_cpu_supports("avx512vnni") && !off ? dot_avx512vnni : dot_avx512;
    }
#endif
    return dot_ref;
}

/* Output features [o0, o1) of every row; q8 (C bytes) unpacks an int4 row. */
static void features(dot_fn dot, float *out, const int16_t *xq, const float *sx,
                     const unsigned char *wq, int bits, size_t G, const float *bias, size_t rows,
                     size_t C, size_t OC, size_t o0, size_t o1, int8_t *q8) {
    const size_t rb = zero__q_row_bytes(bits, C, G), sb = 4 * zero__q_groups(C, G);
    for (size_t o = o0; o < o1; o++) {
        const unsigned char *row = wq + o * rb;
        const int8_t *q = (const int8_t *)(row + sb);
        if (bits == 4) { /* element 2j in the low nibble of byte j; v - 2 (v & 8) sign-extends */
            const unsigned char *p = row + sb;
            for (size_t j = 0; j < C / 2; j++) {
                q8[2 * j] = (int8_t)((p[j] & 15) - 2 * (p[j] & 8));
                q8[2 * j + 1] = (int8_t)((p[j] >> 4) - 2 * ((p[j] >> 4) & 8));
            }
            if (C & 1) q8[C - 1] = (int8_t)((p[C / 2] & 15) - 2 * (p[C / 2] & 8));
            q = q8;
        }
        const float b = bias ? bias[o] : 0.0f;
        for (size_t r = 0; r < rows; r += RB)
            dot(out + r * OC + o, OC, xq + r * C, sx + r, ZERO_MIN((size_t)RB, rows - r), q, row, C,
                G, b);
    }
}

/* The scratch's parts: threads x C int8 (unpacked int4 rows), rows x C int16 (x'), rows fp32
 * (sx), each starting on a cache line. */
static size_t line_up(size_t bytes) { return (bytes + 63) / 64 * 64; }

size_t zero__matmul_q_scratch_bytes(size_t rows, size_t C, int threads) {
    const size_t nt = threads < 1 ? 1 : (size_t)threads;
    return line_up(nt * C) + line_up(rows * C * sizeof(int16_t)) + rows * sizeof(float);
}

void zero__matmul_forward_q(float *out, const float *inp, const void *wq, int bits, size_t group,
                            const float *bias, size_t rows, size_t C, size_t OC, void *scratch,
                            int threads) {
    ZERO_ASSERT(bits == 8 || bits == 4);
    ZERO_ASSERT(group >= 1 && group <= ZERO__Q_GROUP_MAX); /* the int32 lanes cannot overflow */
    const dot_fn dot = chosen_dot();
    const int nt = kthreads(rows * C * OC / 16, threads);
    int8_t *q8 = scratch;
    int16_t *xq = (int16_t *)((char *)scratch + line_up((size_t)(threads < 1 ? 1 : threads) * C));
    float *sx = (float *)((char *)xq + line_up(rows * C * sizeof *xq));
    for (size_t r = 0; r < rows; r++) sx[r] = round_row(xq + r * C, inp + r * C, C);
    if (nt == 1) {
        features(dot, out, xq, sx, wq, bits, group, bias, rows, C, OC, 0, OC, q8);
        return;
    }
#pragma omp parallel num_threads(nt)
    {
        int id, team;
        size_t o0, o1;
        kteam(&id, &team);
        kslice(OC, 16, &o0, &o1); /* 16 floats: threads never share a cache line of out */
        if (o1 > o0)
            features(dot, out, xq, sx, wq, bits, group, bias, rows, C, OC, o0, o1,
                     q8 + (size_t)id * C);
    }
}
