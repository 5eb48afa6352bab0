/* tree16.h — the fixed-order sum of 16 fp32 lanes that the decode kernels share (matmul_q.c,
 * gemv_fp32.c): lane j + lane j + 8, then + 4, + 2, + 1. Private to src/kernels.
 */
#ifndef ZERO_KERNELS_TREE16_H
#define ZERO_KERNELS_TREE16_H

/* The 16 lanes of a, added in the tree above (a is overwritten). */
static inline float tree16(float *a) {
    for (int w = 8; w > 0; w /= 2)
        for (int j = 0; j < w; j++) a[j] += a[j + w];
    return a[0];
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

/* tree16 on a vector in registers: the same additions in the same order. */
__attribute__((target("avx512f"), always_inline)) static inline float tree16_avx512(__m512 a) {
    const __m256 h8 =
        _mm256_add_ps(_mm512_castps512_ps256(a),
                      _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1)));
    const __m128 h4 = _mm_add_ps(_mm256_castps256_ps128(h8), _mm256_extractf128_ps(h8, 1));
    const __m128 h2 = _mm_add_ps(h4, _mm_movehl_ps(h4, h4));
    return _mm_cvtss_f32(_mm_add_ss(h2, _mm_movehdup_ps(h2)));
}
#endif

#endif /* ZERO_KERNELS_TREE16_H */
