/* embedding.c — token + position embedding forward and backward.
 *
 * Forward is a gather, rows split across threads. Backward scatters into dwte: two positions
 * with the same token touch the same dwte row, so instead of locks each thread owns a slice of
 * the C channels and walks every position in order: no races, and the summation order per
 * element is fixed (positions 0..BT-1) whatever the thread count. dwpe rows are owned by one
 * thread each (split over t). Both accumulate (+=). Invariant: tokens are in [0, V); the kernel
 * does not know V, the model validates tokens when it loads data.
 */
#include "kernels.h"
#include "kmath.h"

#include "core/core_internal.h"

#ifdef _OPENMP
#include <omp.h>
#endif

void zero__embedding_forward(float *out, const int32_t *tokens, const float *wte, const float *wpe,
                             size_t B, size_t T, size_t C, int threads) {
    ZERO_ASSERT(out && tokens && wte && wpe);
    int nt = kthreads(B * T * C, threads);
#pragma omp parallel for num_threads(nt) schedule(static)
    for (size_t i = 0; i < B * T; i++) {
        ZERO_DEBUG_ASSERT(tokens[i] >= 0);
        const float *e = wte + (size_t)tokens[i] * C;
        const float *p = wpe + (i % T) * C;
        float *o = out + i * C;
#pragma omp simd
        for (size_t j = 0; j < C; j++) o[j] = e[j] + p[j];
    }
}

void zero__embedding_backward(float *dwte, float *dwpe, const float *dout, const int32_t *tokens,
                              size_t B, size_t T, size_t C, int threads) {
    ZERO_ASSERT(dout && tokens);
    int nt = kthreads(B * T * C, threads);
    if (dwte) {
#pragma omp parallel num_threads(nt)
        {
            size_t c0, c1; /* channel slices: threads never share a cache line */
            kslice(C, 16, &c0, &c1);
            for (size_t i = 0; i < B * T && c1 > c0; i++) {
                float *d = dwte + (size_t)tokens[i] * C;
                const float *g = dout + i * C;
#pragma omp simd
                for (size_t j = c0; j < c1; j++) d[j] += g[j];
            }
        }
    }
    if (dwpe) {
#pragma omp parallel for num_threads(nt) schedule(static)
        for (size_t t = 0; t < T; t++) {
            float *d = dwpe + t * C;
            for (size_t b = 0; b < B; b++) {
                const float *g = dout + (b * T + t) * C;
#pragma omp simd
                for (size_t j = 0; j < C; j++) d[j] += g[j];
            }
        }
    }
}
