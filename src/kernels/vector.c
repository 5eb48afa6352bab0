/* vector.c — multi-threaded whole-buffer passes the optimizer step needs: float64 sum of
 * squares (gradient norm), scale in place, add into, zero.
 *
 * Why: on one rank a step does five or six passes over the full gradient (hundreds of MiB);
 * done by one thread (and the norm as one serial float64 chain, ~4 cycles per element) they
 * took ~20% of an 85M-parameter step on 2 cores (docs/benchmarks.md, "GPT training
 * throughput"). Not here: anything that needs a communicator.
 * Invariant: every result is bitwise independent of `threads`. The sum of squares cuts the
 * buffer into SUMSQ_PARTS fixed parts (by n only), sums each part in 16 float64 lanes (element
 * i goes to lane i % 16 of its part), folds the lanes in a fixed order, then adds the parts in
 * order; threads only decide who computes which part.
 */
#include "kernels.h"
#include "kmath.h"

#include "core/core_internal.h"

#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define SUMSQ_PARTS 64
#define SUMSQ_LANES 16

/* Sum of squares of x[0, n) in float64, lanes as described in the file comment. */
static double part_sumsq(const float *x, size_t n) {
    double lane[SUMSQ_LANES] = {0};
    size_t i = 0;
    for (; i + SUMSQ_LANES <= n; i += SUMSQ_LANES)
#pragma omp simd
        for (size_t j = 0; j < SUMSQ_LANES; j++) lane[j] += (double)x[i + j] * (double)x[i + j];
    for (size_t j = 0; i + j < n; j++) lane[j] += (double)x[i + j] * (double)x[i + j];
    /* fixed pairwise fold: 16 -> 8 -> 4 -> 2 -> 1 */
    for (size_t w = SUMSQ_LANES / 2; w >= 1; w /= 2)
        for (size_t j = 0; j < w; j++) lane[j] += lane[j + w];
    return lane[0];
}

double zero__sumsq(const float *x, size_t n, int threads) {
    ZERO_ASSERT(x || n == 0);
    double part[SUMSQ_PARTS];
    /* part boundaries on multiples of 16 elements (64 bytes), from n alone */
    const size_t blocks = (n + 15) / 16;
    int nt = kthreads(n, threads);
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int p = 0; p < SUMSQ_PARTS; p++) {
        size_t a = ZERO_MIN(n, blocks * (size_t)p / SUMSQ_PARTS * 16);
        size_t b = ZERO_MIN(n, blocks * (size_t)(p + 1) / SUMSQ_PARTS * 16);
        part[p] = b > a ? part_sumsq(x + a, b - a) : 0.0;
    }
    double s = 0.0;
    for (int p = 0; p < SUMSQ_PARTS; p++) s += part[p];
    return s;
}

void zero__scale(float *x, float s, size_t n, int threads) {
    ZERO_ASSERT(x || n == 0);
    int nt = kthreads(n, threads);
#pragma omp parallel for simd num_threads(nt) schedule(static)
    for (size_t i = 0; i < n; i++) x[i] *= s;
}

void zero__add_into(float *acc, const float *x, size_t n, int threads) {
    ZERO_ASSERT((acc && x) || n == 0);
    int nt = kthreads(n, threads);
#pragma omp parallel for simd num_threads(nt) schedule(static)
    for (size_t i = 0; i < n; i++) acc[i] += x[i];
}

void zero__zero(float *x, size_t n, int threads) {
    ZERO_ASSERT(x || n == 0);
    int nt = kthreads(n, threads);
    if (nt == 1) {
        memset(x, 0, n * sizeof(float));
        return;
    }
#pragma omp parallel num_threads(nt)
    {
        size_t a, b;
        kslice(n, 16, &a, &b);
        if (b > a) memset(x + a, 0, (b - a) * sizeof(float));
    }
}
