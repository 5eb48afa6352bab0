/* vector.c — multi-threaded whole-buffer passes the optimizer step needs: float64 sum of
 * squares (gradient norm; also of a 16-bit buffer, widened piecewise), scale in place, add into,
 * zero.
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
#include "optim_fused.h"

#include "core/core_internal.h"

#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define SUMSQ_PARTS 64
#define SUMSQ_LANES 16

/* Adds the squares of x[0, n) into the lanes: element i into lane i % 16. Pieces of a part fed
 * in order, each but the last a multiple of 16 long, give the same lanes as the part at once. */
static void lanes_add(double lane[SUMSQ_LANES], const float *x, size_t n) {
    size_t i = 0;
    for (; i + SUMSQ_LANES <= n; i += SUMSQ_LANES)
#pragma omp simd
        for (size_t j = 0; j < SUMSQ_LANES; j++) lane[j] += (double)x[i + j] * (double)x[i + j];
    for (size_t j = 0; i + j < n; j++) lane[j] += (double)x[i + j] * (double)x[i + j];
}

/* fixed pairwise fold: 16 -> 8 -> 4 -> 2 -> 1 */
static double lanes_fold(double lane[SUMSQ_LANES]) {
    for (size_t w = SUMSQ_LANES / 2; w >= 1; w /= 2)
        for (size_t j = 0; j < w; j++) lane[j] += lane[j + w];
    return lane[0];
}

/* Sum of squares of x[0, n) in float64, lanes as described in the file comment. */
static double part_sumsq(const float *x, size_t n) {
    double lane[SUMSQ_LANES] = {0};
    lanes_add(lane, x, n);
    return lanes_fold(lane);
}

/* Part p of SUMSQ_PARTS of an n-element buffer: [*a, *b), from n alone. */
static void part_range(size_t n, int p, size_t *a, size_t *b) {
    /* part boundaries on multiples of 16 elements (64 bytes) */
    const size_t blocks = (n + 15) / 16;
    *a = ZERO_MIN(n, blocks * (size_t)p / SUMSQ_PARTS * 16);
    *b = ZERO_MIN(n, blocks * (size_t)(p + 1) / SUMSQ_PARTS * 16);
}

double zero__sumsq(const float *x, size_t n, int threads) {
    ZERO_ASSERT(x || n == 0);
    double part[SUMSQ_PARTS];
    int nt = kthreads(n, threads);
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int p = 0; p < SUMSQ_PARTS; p++) {
        size_t a, b;
        part_range(n, p, &a, &b);
        part[p] = b > a ? part_sumsq(x + a, b - a) : 0.0;
    }
    double s = 0.0;
    for (int p = 0; p < SUMSQ_PARTS; p++) s += part[p];
    return s;
}

/* zero__sumsq of the widened chunk x[0, n): its parts one after another, each widened in pieces
 * of SUMSQ_PIECE elements (a multiple of 16) into buf. */
#define SUMSQ_PIECE 1024
static double chunk_sumsq_lp(float *buf, const uint16_t *x, zero_dtype_t dt, size_t n) {
    double s = 0.0;
    for (int p = 0; p < SUMSQ_PARTS; p++) {
        size_t a, b;
        part_range(n, p, &a, &b);
        double lane[SUMSQ_LANES] = {0};
        for (size_t i = a; i < b; i += SUMSQ_PIECE) {
            size_t k = ZERO_MIN((size_t)SUMSQ_PIECE, b - i);
            if (dt == ZERO_DTYPE_BF16)
                zero_bf16_to_fp32_array(buf, x + i, k);
            else
                zero_fp16_to_fp32_array(buf, x + i, k);
            lanes_add(lane, buf, k);
        }
        s += b > a ? lanes_fold(lane) : 0.0; /* zero__sumsq adds 0.0 for an empty part */
    }
    return s;
}

double zero__sumsq_lp(const uint16_t *x, zero_dtype_t dt, size_t n, size_t chunk, int threads) {
    ZERO_ASSERT((x || n == 0) && chunk > 0);
    ZERO_ASSERT(dt == ZERO_DTYPE_BF16 || dt == ZERO_DTYPE_FP16);
    /* Chunk totals land in a fixed array and are added in chunk order after each group: who
     * computes a chunk does not matter. */
    enum { GROUP = 256 };
    double total[GROUP], s = 0.0;
    const size_t chunks = (n + chunk - 1) / chunk;
    for (size_t c0 = 0; c0 < chunks; c0 += GROUP) {
        const int cn = (int)ZERO_MIN((size_t)GROUP, chunks - c0);
        int nt = kthreads(ZERO_MIN(n - c0 * chunk, (size_t)cn * chunk), threads);
        if (nt > cn) nt = cn;
#pragma omp parallel num_threads(nt)
        {
            float buf[SUMSQ_PIECE];
#pragma omp for schedule(static)
            for (int c = 0; c < cn; c++) {
                size_t a = (c0 + (size_t)c) * chunk, k = ZERO_MIN(chunk, n - a);
                total[c] = chunk_sumsq_lp(buf, x + a, dt, k);
            }
        }
        for (int c = 0; c < cn; c++) s += total[c];
    }
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

void zero__copy(void *dst, const void *src, size_t bytes, int threads) {
    ZERO_ASSERT((dst && src) || bytes == 0);
    const size_t n = bytes / sizeof(float), tail = n * sizeof(float);
    int nt = kthreads(n, threads);
    if (nt == 1) {
        memcpy(dst, src, bytes);
        return;
    }
#pragma omp parallel num_threads(nt)
    {
        size_t a, b;
        kslice(n, 16, &a, &b);
        if (b > a) memcpy((float *)dst + a, (const float *)src + a, (b - a) * sizeof(float));
    }
    memcpy((char *)dst + tail, (const char *)src + tail, bytes - tail);
}
