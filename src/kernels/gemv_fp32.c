/* gemv_fp32.c — the fp32 linear forward of a few rows (decoding a batch), reading each weight
 * row once in place (zero__gemv_fp32, kernels.h).
 *
 * Decoding multiplies B rows (one token per sequence) by every weight matrix. The GEMM library
 * packs the weights for each call, a pass over them that costs more than the product when B is
 * small (at B = 16 the GPT-2 124M decode ran at 0.8x PyTorch's). Here threads take contiguous
 * slices of output features (16-aligned: no shared cache lines of out); a tile is 4 weight rows
 * by up to 4 input rows, 16 vector accumulators, so each weight vector loaded serves 4 rows and
 * each input vector 4 features.
 * Order of the sums, for output o of row r: element k into lane k % 16, acc = fma(x, w, acc)
 * over k in order (the tail of C % 16 through a masked load of zeros), then the 16 lanes in
 * tree16's fixed tree, then + bias (when there is one). So a row's result depends on neither the
 * other rows, nor the tile, nor the thread count. Not here: CPUs without AVX-512 (or ZERO_ISA below
 * avx512) and more than ZERO__GEMV_FP32_ROWS rows: the caller's GEMM.
 */
#include "kernels.h"

#include "core/core_internal.h"
#include "isa.h"
#include "kmath.h"
#include "tree16.h"

#ifdef _OPENMP
#include <omp.h>
#endif

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_AVX512_PATH 1
#define OB 4 /* weight rows (output features) a tile */
#define IB 4 /* input rows a tile */

/* Outputs [o, o + no) (no <= OB) of the nr (a constant after inlining, <= IB) rows x. A short
 * tile (no < OB) reads its last weight row again in place of the missing ones and stores
 * nothing for them. */
__attribute__((target("avx512f"), always_inline)) static inline void
tile_avx512_rows(float *out, size_t OC, const float *x, const float *w, const float *bias,
                 const size_t nr, size_t C, size_t o, size_t no) {
    const float *wr[OB];
    for (size_t j = 0; j < OB; j++) wr[j] = w + (o + (j < no ? j : no - 1)) * C;
    __m512 acc[IB][OB];
    for (size_t i = 0; i < nr; i++)
        for (size_t j = 0; j < OB; j++) acc[i][j] = _mm512_setzero_ps();
    size_t k = 0;
    for (; k + 16 <= C; k += 16) {
        __m512 wv[OB];
        for (size_t j = 0; j < OB; j++) wv[j] = _mm512_loadu_ps(wr[j] + k);
        for (size_t i = 0; i < nr; i++) {
            const __m512 xv = _mm512_loadu_ps(x + i * C + k);
            for (size_t j = 0; j < OB; j++) acc[i][j] = _mm512_fmadd_ps(xv, wv[j], acc[i][j]);
        }
    }
    if (k < C) {
        const __mmask16 m = (__mmask16)((1u << (C - k)) - 1u);
        __m512 wv[OB];
        for (size_t j = 0; j < OB; j++) wv[j] = _mm512_maskz_loadu_ps(m, wr[j] + k);
        for (size_t i = 0; i < nr; i++) {
            const __m512 xv = _mm512_maskz_loadu_ps(m, x + i * C + k);
            for (size_t j = 0; j < OB; j++) acc[i][j] = _mm512_fmadd_ps(xv, wv[j], acc[i][j]);
        }
    }
    for (size_t i = 0; i < nr; i++)
        for (size_t j = 0; j < no; j++) {
            const float v = tree16_avx512(acc[i][j]);
            out[i * OC + o + j] = bias ? v + bias[o + j] : v;
        }
}

__attribute__((target("avx512f"))) static void tile_avx512(float *out, size_t OC, const float *x,
                                                           const float *w, const float *bias,
                                                           size_t nr, size_t C, size_t o,
                                                           size_t no) {
    switch (nr) {
    case 4: tile_avx512_rows(out, OC, x, w, bias, 4, C, o, no); break;
    case 3: tile_avx512_rows(out, OC, x, w, bias, 3, C, o, no); break;
    case 2: tile_avx512_rows(out, OC, x, w, bias, 2, C, o, no); break;
    default: tile_avx512_rows(out, OC, x, w, bias, 1, C, o, no); break;
    }
}

/* Output features [o0, o1) of every row: each group of OB weight rows, read once from memory,
 * serves all rows from cache. */
static void features(float *out, const float *x, const float *w, const float *bias, size_t rows,
                     size_t C, size_t OC, size_t o0, size_t o1) {
    for (size_t o = o0; o < o1; o += OB)
        for (size_t r = 0; r < rows; r += IB)
            tile_avx512(out + r * OC, OC, x + r * C, w, bias, ZERO_MIN((size_t)IB, rows - r), C, o,
                        ZERO_MIN((size_t)OB, o1 - o));
}
#else
#define HAVE_AVX512_PATH 0
#endif

int zero__gemv_fp32(float *out, const float *inp, const float *w, const float *bias, size_t rows,
                    size_t C, size_t OC, int threads) {
#if HAVE_AVX512_PATH
    if (rows == 0 || rows > ZERO__GEMV_FP32_ROWS || C == 0 ||
        zero__isa_selected() < ZERO__ISA_AVX512)
        return 0;
    const int nt = kthreads(rows * C * OC / 16, threads);
    if (nt == 1) {
        features(out, inp, w, bias, rows, C, OC, 0, OC);
        return 1;
    }
#pragma omp parallel num_threads(nt)
    {
        size_t o0, o1;
        kslice(OC, 16, &o0, &o1);
        if (o1 > o0) features(out, inp, w, bias, rows, C, OC, o0, o1);
    }
    return 1;
#else
    (void)out, (void)inp, (void)w, (void)bias, (void)rows, (void)C, (void)OC, (void)threads;
    return 0;
#endif
}
