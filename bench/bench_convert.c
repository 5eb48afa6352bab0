/* bench_convert.c — throughput of the fp32 <-> bf16 / fp16 array conversions (src/core/convert.c)
 * for every implementation this CPU supports.
 *
 * Two sizes: 32 Ki elements (in + out fit in L1/L2: instruction throughput) and 32 Mi elements
 * (128 MiB of fp32: DRAM bandwidth). GB/s counts bytes read + bytes written (6 per element).
 * Median of 7 repetitions, each back-to-back calls for >= time/7 seconds, one thread. Inputs are
 * normal numbers (the subnormal fix-up path of avx512bf16 is not exercised).
 *
 * Usage: bench_convert [--time seconds]
 */
#include "zero/core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    double seconds = 0.3;
    if (argc == 3 && strcmp(argv[1], "--time") == 0)
        seconds = atof(argv[2]);
    else if (argc != 1) {
        fprintf(stderr, "usage: %s [--time seconds]\n", argv[0]);
        return 2;
    }
    const size_t big = (size_t)32 << 20, sizes[2] = {(size_t)32 << 10, big};
    float *f = zero_mem_alloc(NULL, ZERO_MEM_OTHER, big * sizeof(float), 64);
    uint16_t *h = zero_mem_alloc(NULL, ZERO_MEM_OTHER, big * sizeof(uint16_t), 64);
    if (!f || !h) {
        fprintf(stderr, "bench_convert: out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < big; i++) f[i] = (float)(i % 1000) * 0.37f - 150.0f;
    zero_fp32_to_fp16_array(h, f, big); /* first touch outside the timing */

    const char *impls[] = {"scalar", "f16c", "avx512", "avx512bf16"};
    printf("# bench_convert: GB/s (read + write), median of 7, 1 thread; automatic choice: %s\n",
           zero_convert_impl());
    printf("| impl | elements | fp32->bf16 | bf16->fp32 | fp32->fp16 | fp16->fp32 |\n");
    printf("|---|---|---|---|---|---|\n");
    for (size_t k = 0; k < sizeof impls / sizeof impls[0]; k++) {
        if (zero_convert_set_impl(impls[k]) != ZERO_OK) continue;
        for (int si = 0; si < 2; si++) {
            size_t n = sizes[si];
            printf("| %s | %zu |", impls[k], n);
            for (int op = 0; op < 4; op++) {
                double g[7];
                for (int r = 0; r < 7; r++) {
                    int calls = 0;
                    double t0 = zero_time_now(), t1;
                    do {
                        switch (op) {
                        case 0: zero_fp32_to_bf16_array(h, f, n); break;
                        case 1: zero_bf16_to_fp32_array(f, h, n); break;
                        case 2: zero_fp32_to_fp16_array(h, f, n); break;
                        default: zero_fp16_to_fp32_array(f, h, n); break;
                        }
                        calls++;
                        t1 = zero_time_now();
                    } while (t1 - t0 < seconds / 7);
                    g[r] = 6.0 * (double)n * calls / (t1 - t0) * 1e-9;
                }
                qsort(g, 7, sizeof g[0], cmp_double);
                printf(" %.1f |", g[3]);
            }
            printf("\n");
            fflush(stdout);
        }
    }
    zero_convert_set_impl(NULL);
    zero_mem_free(f);
    zero_mem_free(h);
    return 0;
}
