/* gemv_bf16.c — the linear forward of a few bf16 rows (decoding), on the AVX512-BF16 dot-product
 * instruction (zero__gemv_bf16, kernels_lp.h).
 *
 * Decoding one token per sequence multiplies a handful of rows by every weight matrix: the
 * time is the weights read. oneDNN's matmul primitive pays a packing of B for a GEMM it then
 * runs on one row (0.44 of the bandwidth bound measured); this reads each weight row once, as it
 * lies in memory, and dots it with every input row. Threads take contiguous slices of output
 * features (16-aligned: no shared cache lines of out).
 * Order of the sums, for output o of row r: vdpbf16ps over 32 elements at a time into one
 * 16-lane fp32 accumulator (each lane adds its pair of products), the tail (C % 32) through a
 * masked load of zeros; then the 16 lanes in _mm512_reduce_add_ps's fixed tree; then + bias
 * (widened), rounded once into a bf16 out. So a row's result depends on neither the other rows,
 * nor the thread count, nor the slice. The instruction flushes denormal inputs and results to
 * zero (the bf16 GEMM's oneDNN kernel on this ISA does the same).
 * Not here: CPUs without AVX512-BF16 and more than ZERO__GEMV_ROWS rows (the caller's GEMM).
 */
#include "kernels_lp.h"

#include "core/core_internal.h"
#include "isa.h"
#include "kmath.h"

#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_BF16_PATH 1

#define TARGET __attribute__((target("avx512f,avx512bw,avx512bf16")))

/* The dot product of C bf16 elements of x and w. */
TARGET static float dot_avx512bf16(const uint16_t *x, const uint16_t *w, size_t C) {
    __m512 acc = _mm512_setzero_ps();
    size_t k = 0;
    for (; k + 32 <= C; k += 32)
        acc = _mm512_dpbf16_ps(acc, (__m512bh)_mm512_loadu_si512(x + k),
                               (__m512bh)_mm512_loadu_si512(w + k));
    if (k < C) {
        const __mmask32 m = (__mmask32)((1ull << (C - k)) - 1);
        acc = _mm512_dpbf16_ps(acc, (__m512bh)_mm512_maskz_loadu_epi16(m, x + k),
                               (__m512bh)_mm512_maskz_loadu_epi16(m, w + k));
    }
    return _mm512_reduce_add_ps(acc);
}

static void features(void *out, zero_dtype_t out_dtype, const uint16_t *inp, const uint16_t *w,
                     const uint16_t *bias, size_t rows, size_t C, size_t OC, size_t o0, size_t o1) {
    for (size_t o = o0; o < o1; o++) {
        const float b = bias ? zero_bf16_to_fp32(bias[o]) : 0.0f;
        for (size_t r = 0; r < rows; r++) {
            const float v = dot_avx512bf16(inp + r * C, w + o * C, C) + b;
            if (out_dtype == ZERO_DTYPE_FP32)
                ((float *)out)[r * OC + o] = v;
            else
                ((uint16_t *)out)[r * OC + o] = zero_fp32_to_bf16(v);
        }
    }
}

static int available(void) {
    return zero__isa_selected() == ZERO__ISA_AVX512 && __builtin_cpu_supports("avx512bf16");
}
#else
#define HAVE_BF16_PATH 0
#endif

int zero__gemv_bf16(void *out, zero_dtype_t out_dtype, const void *inp, const void *w,
                    const void *bias, size_t rows, size_t C, size_t OC, int threads) {
#if HAVE_BF16_PATH
    ZERO_ASSERT(out_dtype == ZERO_DTYPE_FP32 || out_dtype == ZERO_DTYPE_BF16);
    if (rows == 0 || rows > ZERO__GEMV_ROWS || C == 0 || !available()) return 0;
    const int nt = kthreads(rows * C * OC / 16, threads);
    if (nt == 1) {
        features(out, out_dtype, inp, w, bias, rows, C, OC, 0, OC);
        return 1;
    }
#pragma omp parallel num_threads(nt)
    {
        size_t o0, o1;
        kslice(OC, 16, &o0, &o1);
        if (o1 > o0) features(out, out_dtype, inp, w, bias, rows, C, OC, o0, o1);
    }
    return 1;
#else
    (void)out, (void)out_dtype, (void)inp, (void)w, (void)bias, (void)rows, (void)C, (void)OC,
        (void)threads;
    return 0;
#endif
}
