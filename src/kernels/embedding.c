/* embedding.c — token + position embedding forward and backward.
 *
 * Forward is a gather, rows split across threads. Backward scatters into dwte: two positions
 * with the same token touch the same dwte row, so instead of locks each thread owns a slice of
 * the C channels and walks every position in order: no races, and the summation order per
 * element is fixed (positions 0..BT-1) whatever the thread count. dwpe rows are owned by one
 * thread each (split over t). Both accumulate (+=). Invariant: tokens are in [0, V); the kernel
 * does not know V, the model validates tokens when it loads data.
 * 16-bit backward: positions are grouped by token (counting sort) so each gradient row is summed
 * in fp32 and rounded once, instead of once per occurrence of its token.
 */
#include "kernels.h"
#include "kernels_lp.h"
#include "kmath.h"
#include "lp_io.h"

#include "core/core_internal.h"

#include <stdlib.h>
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

/* ------------------------------------------------------------------------------ 16-bit I/O */

void zero__embedding_forward_lp(void *out, const int32_t *tokens, const void *wte, const void *wpe,
                                zero_dtype_t dt, size_t B, size_t T, size_t C, int threads) {
    ZERO_ASSERT(out && tokens && wte && wpe);
    const size_t es = zero_dtype_size(dt);
    int nt = kthreads(B * T * C, threads);
#pragma omp parallel num_threads(nt)
    {
        float *e = zero__kscratch(ZERO__KS_ROWS, 2 * C * sizeof(float)), *p = e + C;
#pragma omp for schedule(static)
        for (size_t i = 0; i < B * T; i++) {
            ZERO_DEBUG_ASSERT(tokens[i] >= 0);
            zero__widen(e, (const char *)wte + (size_t)tokens[i] * C * es, C, dt);
            zero__widen(p, (const char *)wpe + (i % T) * C * es, C, dt);
#pragma omp simd
            for (size_t j = 0; j < C; j++) e[j] += p[j];
            zero__narrow((char *)out + i * C * es, e, C, dt);
        }
    }
}

/* row(C) of dt += acc(C) fp32, rounded once; tmp: C floats. */
static void add_row_lp(void *row, const float *acc, float *tmp, size_t C, zero_dtype_t dt) {
    zero__widen(tmp, row, C, dt);
#pragma omp simd
    for (size_t j = 0; j < C; j++) tmp[j] += acc[j];
    zero__narrow(row, tmp, C, dt);
}

void zero__embedding_backward_lp(void *dwte, void *dwpe, const void *dout, const int32_t *tokens,
                                 zero_dtype_t dt, size_t B, size_t T, size_t C, size_t V,
                                 int threads) {
    ZERO_ASSERT(dout && tokens);
    const size_t es = zero_dtype_size(dt), BT = B * T;
    int nt = kthreads(BT * C, threads);
    if (dwte) {
        /* Group positions by token (a counting sort keeps them in increasing order within a
         * token), then each token's row is owned by one thread: summed in fp32 over its
         * positions and added to the 16-bit gradient once. Adding position by position into a
         * 16-bit row would round once per occurrence (hundreds of times for a byte vocabulary). */
        size_t *start = calloc(V + 1, sizeof *start);
        size_t *pos = malloc((BT ? BT : 1) * sizeof *pos);
        ZERO_ASSERT(start && pos);
        for (size_t i = 0; i < BT; i++) {
            ZERO_DEBUG_ASSERT(tokens[i] >= 0 && (size_t)tokens[i] < V);
            start[(size_t)tokens[i] + 1]++;
        }
        for (size_t v = 0; v < V; v++) start[v + 1] += start[v];
        size_t *fill = malloc((V ? V : 1) * sizeof *fill);
        ZERO_ASSERT(fill);
        memcpy(fill, start, V * sizeof *fill);
        for (size_t i = 0; i < BT; i++) pos[fill[tokens[i]]++] = i;
        free(fill);
#pragma omp parallel num_threads(nt)
        {
            float *acc = zero__kscratch(ZERO__KS_ROWS, 3 * C * sizeof(float));
            float *g = acc + C, *tmp = g + C;
#pragma omp for schedule(dynamic, 16)
            for (size_t v = 0; v < V; v++) {
                if (start[v] == start[v + 1]) continue;
                for (size_t j = 0; j < C; j++) acc[j] = 0.0f;
                for (size_t k = start[v]; k < start[v + 1]; k++) {
                    zero__widen(g, (const char *)dout + pos[k] * C * es, C, dt);
#pragma omp simd
                    for (size_t j = 0; j < C; j++) acc[j] += g[j];
                }
                add_row_lp((char *)dwte + v * C * es, acc, tmp, C, dt);
            }
        }
        free(pos);
        free(start);
    }
    if (dwpe) {
#pragma omp parallel num_threads(nt)
        {
            float *acc = zero__kscratch(ZERO__KS_ROWS, 3 * C * sizeof(float));
            float *g = acc + C, *tmp = g + C;
#pragma omp for schedule(static)
            for (size_t t = 0; t < T; t++) {
                for (size_t j = 0; j < C; j++) acc[j] = 0.0f;
                for (size_t b = 0; b < B; b++) {
                    zero__widen(g, (const char *)dout + (b * T + t) * C * es, C, dt);
#pragma omp simd
                    for (size_t j = 0; j < C; j++) acc[j] += g[j];
                }
                add_row_lp((char *)dwpe + t * C * es, acc, tmp, C, dt);
            }
        }
    }
}
