/* bench_sumsq_exact.c — the step's norm pass over a large stacked unit's gradient shard: the
 * exact sum of squares that units of zero_engine_add_unit_in take (src/kernels/sumsq_exact.c)
 * against the float64 sum that world units take (zero__sumsq; zero__sumsq_lp for bf16, in the
 * engine's chunks of 65536), on the same buffer.
 *
 * Gradient-like values (normal, magnitudes 1e-6 .. 1e-2, all exponents of a real gradient in a
 * handful of bins). Median of 7 repetitions of each pass, threads 1 and 2; the ratio is exact /
 * float64 time.
 *
 * Usage: bench_sumsq_exact [--elems N] (default 64 Mi: a 256 MiB fp32 shard)
 */
#include "kernels/kernels.h"
#include "kernels/optim_fused.h"
#include "kernels/sumsq_exact.h"
#include "zero/core.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REPS 7

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Seconds of one pass, the median of REPS; *out the last result. */
static double time_pass(int exact, const void *x, size_t n, zero_dtype_t dt, int threads,
                        double *out) {
    double t[REPS];
    for (int r = 0; r < REPS; r++) {
        const double t0 = zero_time_now();
        if (exact) {
            zero__xsum_t s;
            memset(&s, 0, sizeof s);
            zero__xsum_add_squares(&s, x, n, dt, threads);
            *out = zero__xsum_value(&s);
        } else {
            *out = dt == ZERO_DTYPE_FP32 ? zero__sumsq(x, n, threads)
                                         : zero__sumsq_lp(x, dt, n, 65536, threads);
        }
        t[r] = zero_time_now() - t0;
    }
    qsort(t, REPS, sizeof t[0], cmp_double);
    return t[REPS / 2];
}

int main(int argc, char **argv) {
    size_t n = (size_t)64 << 20;
    if (argc == 3 && strcmp(argv[1], "--elems") == 0)
        n = (size_t)strtoull(argv[2], NULL, 10);
    else if (argc != 1) {
        fprintf(stderr, "usage: %s [--elems N]\n", argv[0]);
        return 2;
    }
    float *f = zero_mem_alloc(NULL, ZERO_MEM_OTHER, n * sizeof(float), 64);
    uint16_t *h = zero_mem_alloc(NULL, ZERO_MEM_OTHER, n * sizeof(uint16_t), 64);
    if (!f || !h) {
        fprintf(stderr, "bench_sumsq_exact: out of memory\n");
        return 1;
    }
    uint64_t s = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        const double u = (double)(s >> 11) * 0x1p-53; /* [0, 1) */
        f[i] = (float)((s & 1 ? 1.0 : -1.0) * pow(10.0, -6.0 + 4.0 * u));
    }
    zero_fp32_to_bf16_array(h, f, n);
    printf("%zu elements; median of %d passes\n", n, REPS);
    for (int d = 0; d < 2; d++) {
        const zero_dtype_t dt = d ? ZERO_DTYPE_BF16 : ZERO_DTYPE_FP32;
        const void *x = d ? (const void *)h : (const void *)f;
        for (int threads = 1; threads <= 2; threads++) {
            double vf, vx;
            const double tf = time_pass(0, x, n, dt, threads, &vf);
            const double tx = time_pass(1, x, n, dt, threads, &vx);
            printf("%s threads %d: float64 %.1f ms (%.2f ns/elem), exact %.1f ms (%.2f ns/elem), "
                   "ratio %.2f; sums %.17g and %.17g\n",
                   zero_dtype_name(dt), threads, tf * 1e3, tf * 1e9 / (double)n, tx * 1e3,
                   tx * 1e9 / (double)n, tx / tf, vf, vx);
        }
    }
    zero_mem_free(f);
    zero_mem_free(h);
    return 0;
}
