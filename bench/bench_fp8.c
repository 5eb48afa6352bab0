/* bench_fp8.c — FP8 conversions of src/kernels/fp8.c (array forms, branch-free and vectorised by
 * the compiler) beside a straightforward scalar conversion of the same results (frexpf / ldexpf
 * and branches per element, as one writes it first), on the same buffer of 16 Mi activations.
 *
 * Prints, per format and direction, the median time of 7 passes of each and the ratio; checks
 * the two agree on every element. Usage: bench_fp8 [--elems N]
 */
#include "kernels/fp8.h"
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

static const int mbits[2] = {3, 2}, bias[2] = {7, 15};

/* The plain way: decompose, round with nearbyintf, reassemble. */
static uint8_t plain_encode(float x, zero__fp8_format_t f) {
    const uint8_t sign = signbit(x) ? 0x80 : 0;
    const float max = zero__fp8_max(f);
    float a = fabsf(x);
    if (isnan(x)) return 0x7f | sign;
    if (a >= max) return (f == ZERO__FP8_E4M3 ? 0x7e : 0x7b) | sign;
    int e;
    frexpf(a, &e); /* a = m 2^e, m in [0.5, 1) */
    const int M = mbits[f], B = bias[f];
    int exp = e - 1; /* a = 1.x 2^exp */
    if (a == 0 || exp < 1 - B) {
        const int q = (int)nearbyintf(ldexpf(a, B + M - 1));
        return (uint8_t)q | sign;
    }
    int q = (int)nearbyintf(ldexpf(a, M - exp)); /* in [2^M, 2^(M+1)] */
    if (q == 2 << M) q >>= 1, exp++;
    return (uint8_t)(((exp + B) << M) | (q - (1 << M))) | sign;
}

static float plain_decode(uint8_t c, zero__fp8_format_t f) {
    const int M = mbits[f], B = bias[f], e = (c & 0x7f) >> M, m = c & ((1 << M) - 1);
    float v;
    if (f == ZERO__FP8_E4M3 && (c & 0x7f) == 0x7f)
        v = NAN;
    else if (f == ZERO__FP8_E5M2 && e == 31)
        v = m ? NAN : INFINITY;
    else if (e == 0)
        v = ldexpf((float)m, 1 - B - M);
    else
        v = ldexpf(1.0f + (float)m / (float)(1 << M), e - B);
    return c & 0x80 ? -v : v;
}

int main(int argc, char **argv) {
    size_t n = (size_t)16 << 20;
    if (argc == 3 && !strcmp(argv[1], "--elems"))
        n = (size_t)strtoull(argv[2], NULL, 10);
    else if (argc != 1) {
        fprintf(stderr, "usage: %s [--elems N]\n", argv[0]);
        return 2;
    }
    float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y), *z = malloc(n * sizeof *z);
    uint8_t *a = malloc(n), *b = malloc(n);
    if (!x || !y || !z || !a || !b) {
        fprintf(stderr, "bench_fp8: out of memory\n");
        return 1;
    }
    uint64_t s = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < n; i++) { /* activation-like: normal, most within a few units */
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        const double u1 = ((double)(s >> 11) + 0.5) * 0x1p-53;
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        const double u2 = (double)(s >> 11) * 0x1p-53;
        x[i] = (float)(8.0 * sqrt(-2.0 * log(u1)) * cos(2 * M_PI * u2));
    }
    printf("%zu elements; median of %d passes; ns per element\n", n, REPS);
    int bad = 0;
    for (int f = 0; f < ZERO__FP8_FORMAT_COUNT; f++) {
        double t[2][2][REPS];
        for (int r = 0; r < REPS; r++) {
            double t0 = zero_time_now();
            zero__fp8_encode(a, x, n, 1.0f, (zero__fp8_format_t)f);
            t[0][0][r] = zero_time_now() - t0;
            t0 = zero_time_now();
            for (size_t i = 0; i < n; i++) b[i] = plain_encode(x[i], (zero__fp8_format_t)f);
            t[0][1][r] = zero_time_now() - t0;
            t0 = zero_time_now();
            zero__fp8_decode(y, a, n, 1.0f, (zero__fp8_format_t)f);
            t[1][0][r] = zero_time_now() - t0;
            t0 = zero_time_now();
            for (size_t i = 0; i < n; i++) z[i] = plain_decode(b[i], (zero__fp8_format_t)f);
            t[1][1][r] = zero_time_now() - t0;
        }
        bad += memcmp(a, b, n) != 0 || memcmp(y, z, n * sizeof *y) != 0;
        for (int d = 0; d < 2; d++) {
            qsort(t[d][0], REPS, sizeof(double), cmp_double);
            qsort(t[d][1], REPS, sizeof(double), cmp_double);
            const double ours = t[d][0][REPS / 2], plain = t[d][1][REPS / 2];
            printf("%s %s: zero %.3f, plain scalar %.3f: %.1fx\n",
                   zero__fp8_name((zero__fp8_format_t)f), d ? "decode" : "encode",
                   ours * 1e9 / (double)n, plain * 1e9 / (double)n, plain / ours);
        }
    }
    printf("results %s\n", bad ? "DIFFER" : "identical");
    free(x), free(y), free(z), free(a), free(b);
    return bad;
}
