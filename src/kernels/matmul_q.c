/* matmul_q.c — the linear forward on group-quantized weights (quant.h, zero__matmul_forward_q).
 *
 * Batch-1 decoding reads every weight once per token, so its speed is the bytes read: the
 * weights stay int8 (or int4) in memory and are never widened as a whole. Threads take
 * contiguous slices of output features. For one feature o and up to RB input rows at once, a
 * fused dot product converts 16 int8 weights to fp32 in registers and multiplies them into each
 * row's sums (the conversion is shared by the RB rows; the scale is applied once per group):
 *   per group g of [lo, hi): its first 16 floor((hi - lo) / 16) elements go to 4 chains of 16
 *   lanes, element lo + i to chain (i / 16) % 4, lane i % 16, P = fma(x, q, P); then
 *   A = fma(s_g, (P0 + P1) + (P2 + P3), A) lane by lane; the remaining elements (groups whose
 *   length is not a multiple of 16) go one by one to a scalar t = fma(x, q, t), then
 *   T = fma(s_g, t, T);
 *   out = bias + ((sum of A's 16 lanes in a fixed tree) + T).
 * The portable loop (dot_ref) and the AVX-512 one (dot_avx512, chosen with the other kernels'
 * level, isa.h) compute exactly these operations, so they agree bitwise; a row's result does
 * not depend on the other rows, on `threads` or on RB. int4 rows are first unpacked into an int8
 * row (the same values, C bytes in the thread's scratch), then take the same path.
 * Not here: the quantization and its format (quant.c), activations (fp32 only).
 */
#include "kernels/quant.h"

#include "core/core_internal.h"
#include "isa.h"
#include "kmath.h"

#include <math.h>
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

/* The 16 lanes of a, added in a fixed tree (8 + 8, 4 + 4, 2 + 2, 1 + 1). */
static inline float tree16(float *a) {
    for (int w = 8; w > 0; w /= 2)
        for (int j = 0; j < w; j++) a[j] += a[j + w];
    return a[0];
}

/* out[r] = bias + x_r . (q s) for the nr (<= RB) rows x + r * ldx: the file comment's order,
 * with fmaf (a single rounding, as the vector FMA), so every level gives the same bits. */
static void dot_ref(float *out, size_t ldo, const float *x, size_t ldx, size_t nr, const int8_t *q,
                    const unsigned char *scales, size_t C, size_t G, float bias) {
    for (size_t r = 0; r < nr; r++) {
        const float *xr = x + r * ldx;
        float A[16] = {0}, T = 0.0f;
        for (size_t g = 0, lo = 0; lo < C; g++, lo += G) {
            const size_t n = ZERO_MIN(G, C - lo), full = n / 16 * 16;
            const float s = scale_at(scales, g);
            float P[4][16] = {{0}};
            for (size_t i = 0; i < full; i++)
                P[(i / 16) % 4][i % 16] =
                    fmaf(xr[lo + i], (float)q[lo + i], P[(i / 16) % 4][i % 16]);
            for (int j = 0; j < 16; j++)
                A[j] = fmaf(s, (P[0][j] + P[1][j]) + (P[2][j] + P[3][j]), A[j]);
            if (full == n) continue;
            float t = 0.0f;
            for (size_t i = full; i < n; i++) t = fmaf(xr[lo + i], (float)q[lo + i], t);
            T = fmaf(s, t, T);
        }
        out[r * ldo] = bias + (tree16(A) + T);
    }
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_X86 1

/* dot_ref with the chains in registers: nr is a constant after inlining, so the arrays of
 * vectors below become registers (4 rows x 5 vectors). */
__attribute__((target("avx512f"), always_inline)) static inline void
dot_avx512_rows(float *out, size_t ldo, const float *x, size_t ldx, const size_t nr,
                const int8_t *q, const unsigned char *scales, size_t C, size_t G, float bias) {
    __m512 A[RB], P[RB][4];
    float T[RB];
    for (size_t r = 0; r < nr; r++) A[r] = _mm512_setzero_ps(), T[r] = 0.0f;
    for (size_t g = 0, lo = 0; lo < C; g++, lo += G) {
        const size_t n = ZERO_MIN(G, C - lo), full = n / 16 * 16;
        const float s = scale_at(scales, g);
        for (size_t r = 0; r < nr; r++)
            for (int c = 0; c < 4; c++) P[r][c] = _mm512_setzero_ps();
        size_t i = 0;
        for (; i + 64 <= full; i += 64)
            for (int c = 0; c < 4; c++) {
                const __m512 w = _mm512_cvtepi32_ps(
                    _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(q + lo + i + 16 * c))));
                for (size_t r = 0; r < nr; r++)
                    P[r][c] =
                        _mm512_fmadd_ps(_mm512_loadu_ps(x + r * ldx + lo + i + 16 * c), w, P[r][c]);
            }
        for (int c = 0; i < full; i += 16, c++) {
            const __m512 w = _mm512_cvtepi32_ps(
                _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(q + lo + i))));
            for (size_t r = 0; r < nr; r++)
                P[r][c] = _mm512_fmadd_ps(_mm512_loadu_ps(x + r * ldx + lo + i), w, P[r][c]);
        }
        const __m512 vs = _mm512_set1_ps(s);
        for (size_t r = 0; r < nr; r++)
            A[r] = _mm512_fmadd_ps(
                vs, _mm512_add_ps(_mm512_add_ps(P[r][0], P[r][1]), _mm512_add_ps(P[r][2], P[r][3])),
                A[r]);
        if (full == n) continue;
        for (size_t r = 0; r < nr; r++) {
            float t = 0.0f;
            for (size_t k = full; k < n; k++) t = fmaf(x[r * ldx + lo + k], (float)q[lo + k], t);
            T[r] = fmaf(s, t, T[r]);
        }
    }
    for (size_t r = 0; r < nr; r++) {
        float a[16];
        _mm512_storeu_ps(a, A[r]);
        out[r * ldo] = bias + (tree16(a) + T[r]);
    }
}

__attribute__((target("avx512f"))) static void dot_avx512(float *out, size_t ldo, const float *x,
                                                          size_t ldx, size_t nr, const int8_t *q,
                                                          const unsigned char *scales, size_t C,
                                                          size_t G, float bias) {
    switch (nr) {
    case 4: dot_avx512_rows(out, ldo, x, ldx, 4, q, scales, C, G, bias); break;
    case 3: dot_avx512_rows(out, ldo, x, ldx, 3, q, scales, C, G, bias); break;
    case 2: dot_avx512_rows(out, ldo, x, ldx, 2, q, scales, C, G, bias); break;
    default: dot_avx512_rows(out, ldo, x, ldx, 1, q, scales, C, G, bias); break;
    }
}
#endif

typedef void (*dot_fn)(float *out, size_t ldo, const float *x, size_t ldx, size_t nr,
                       const int8_t *q, const unsigned char *scales, size_t C, size_t G,
                       float bias);

/* The dot product of the level chosen for all kernels (isa.h: ZERO_ISA caps it too). */
static dot_fn chosen_dot(void) {
#ifdef HAVE_X86
    if (zero__isa_selected() >= ZERO__ISA_AVX512) return dot_avx512;
#endif
    return dot_ref;
}

/* Output features [o0, o1) of every row; q8 (C bytes) unpacks an int4 row. */
static void features(dot_fn dot, float *out, const float *inp, const unsigned char *wq, int bits,
                     size_t G, const float *bias, size_t rows, size_t C, size_t OC, size_t o0,
                     size_t o1, int8_t *q8) {
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
            dot(out + r * OC + o, OC, inp + r * C, C, ZERO_MIN((size_t)RB, rows - r), q, row, C, G,
                b);
    }
}

void zero__matmul_forward_q(float *out, const float *inp, const void *wq, int bits, size_t group,
                            const float *bias, size_t rows, size_t C, size_t OC, void *scratch,
                            int threads) {
    ZERO_ASSERT(bits == 8 || bits == 4);
    const dot_fn dot = chosen_dot();
    const int nt = kthreads(rows * C * OC / 16, threads);
    if (nt == 1) {
        features(dot, out, inp, wq, bits, group, bias, rows, C, OC, 0, OC, scratch);
        return;
    }
#pragma omp parallel num_threads(nt)
    {
        int id, team;
        size_t o0, o1;
        kteam(&id, &team);
        kslice(OC, 16, &o0, &o1); /* 16 floats: threads never share a cache line of out */
        if (o1 > o0)
            features(dot, out, inp, wq, bits, group, bias, rows, C, OC, o0, o1,
                     (int8_t *)scratch + (size_t)id * C);
    }
}
