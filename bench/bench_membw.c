/* bench_membw.c — read bandwidth of DRAM: the bound of batch-1 decoding, which reads every
 * weight once per token (docs/inference.md; bench/bench_generate.sh divides the weight bytes by
 * this).
 *
 * Sums a buffer of --mib MiB (default 512: far past the last-level cache, about a GPT-2 124M's
 * fp32 weights) with --threads OpenMP threads, each a contiguous slice, with enough independent
 * accumulators that the loads, not the adds, set the pace. Reports the best and the median of
 * --reps passes (default 7) in GB/s (1e9 bytes read per second) and one line of JSON. Nothing is
 * written during a pass (unlike memcpy, which `zero plan --calibrate` times: bytes copied, each
 * read and written).
 *
 * Usage: bench_membw [--threads N] [--mib M] [--reps R]
 */
#include "zero/core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Sum of x[0, n): 32 lanes of partial sums, which the compiler vectorises (no -ffast-math needed)
 * into four independent vector accumulators, so the add latency does not bound the loop. */
static float sum_slice(const float *x, size_t n) {
    float s[32] = {0}, t = 0;
    size_t i = 0;
    for (; i + 32 <= n; i += 32)
        for (int k = 0; k < 32; k++) s[k] += x[i + (size_t)k];
    for (; i < n; i++) t += x[i];
    for (int k = 0; k < 32; k++) t += s[k];
    return t;
}

int main(int argc, char **argv) {
    int threads = 1, reps = 7;
    size_t mib = 512;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--threads"))
            threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--mib"))
            mib = (size_t)atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--reps"))
            reps = atoi(argv[i + 1]);
        else
            argc = -1;
    }
    if (argc < 0 || argc % 2 == 0 || threads < 1 || mib < 1 || reps < 1 || reps > 100) {
        fprintf(stderr, "usage: %s [--threads N] [--mib M] [--reps R]\n", argv[0]);
        return 2;
    }
    const size_t n = mib << 18; /* floats */
    float *x = zero_mem_alloc(NULL, ZERO_MEM_OTHER, n * sizeof(float), 64);
    if (!x) {
        fprintf(stderr, "bench_membw: cannot allocate %zu MiB\n", mib);
        return 1;
    }
    for (size_t i = 0; i < n; i++) x[i] = (float)(i & 1023) * 1e-3f; /* touch every page */
    double gbs[100], sink = 0;
    for (int r = 0; r < reps; r++) {
        double t0 = zero_time_now(), total = 0;
#pragma omp parallel for num_threads(threads) reduction(+ : total) schedule(static)
        for (int t = 0; t < threads; t++) {
            size_t a = n / (size_t)threads * (size_t)t;
            size_t b = t + 1 == threads ? n : a + n / (size_t)threads;
            total += sum_slice(x + a, b - a);
        }
        gbs[r] = (double)n * sizeof(float) / (zero_time_now() - t0) / 1e9;
        sink += total;
    }
    double sorted[100];
    memcpy(sorted, gbs, (size_t)reps * sizeof *gbs);
    qsort(sorted, (size_t)reps, sizeof *sorted, cmp_double);
    printf("read bandwidth, %zu MiB, %d threads, %d passes: best %.2f GB/s, median %.2f GB/s "
           "(checksum %.3g)\n",
           mib, threads, reps, sorted[reps - 1], sorted[reps / 2], sink);
    printf("{\"threads\": %d, \"mib\": %zu, \"best_gb_s\": %.4f, \"median_gb_s\": %.4f}\n", threads,
           mib, sorted[reps - 1], sorted[reps / 2]);
    zero_mem_free(x);
    return 0;
}
