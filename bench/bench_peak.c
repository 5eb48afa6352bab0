/* bench_peak.c — the CPU's arithmetic peaks beside the GEMM rates the run report divides by.
 *
 * The report's MFU is against the best 2048^3 GEMM of the run's dtype (zero__matmul_peak_flops:
 * dnnl_sgemm for fp32, the oneDNN bf16 matmul for bf16). This prints how that figure compares with
 * what the cores can issue at all: register-only loops of independent 512-bit FMAs (vfmadd, 32
 * FLOP each) and bf16 dot products (vdpbf16ps, 64 FLOP each: 16 lanes x 2 products x 2), on
 * 1 thread and on --threads threads, each the best of --reps timed passes. Then, in the same run,
 * the two GEMM peaks, and the ratios: GEMM / instruction peak (how close the library gets) and
 * bf16 / fp32 (the hardware's ratio, which bounds a bf16 run's speed-up over fp32).
 *
 * The loops keep 24 accumulators in flight, more than latency x issue width (4-6 cycles x 2 per
 * cycle) on the machines this runs on, so the issue rate, not a dependency, sets the pace.
 * Without AVX-512 (or AVX512-BF16) the row says "n/a".
 *
 * Usage: bench_peak [--threads T] [--reps R] [--seconds S]   (S: length of one pass, default 0.2)
 */
#include "kernels/kernels.h"
#include "zero/core.h"

#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define CHAINS 24

/* The chains' sum: a value that depends on every one of them. */
__attribute__((target("avx512f"))) static float sum_chains_avx512(const __m512 *a) {
    __m512 s = a[0];
    for (int i = 1; i < CHAINS; i++) s = _mm512_add_ps(s, a[i]);
    return _mm512_reduce_add_ps(s);
}

/* One pass of `iters` x CHAINS FMAs on registers; returns their sum. */
__attribute__((target("avx512f"))) static float fma_loop_avx512(long iters) {
    __m512 a[CHAINS];
    for (int i = 0; i < CHAINS; i++) a[i] = _mm512_set1_ps((float)i * 1e-3f);
    const __m512 b = _mm512_set1_ps(0.999f), c = _mm512_set1_ps(1e-4f);
    for (long k = 0; k < iters; k++)
#pragma GCC unroll 24
        for (int i = 0; i < CHAINS; i++) a[i] = _mm512_fmadd_ps(a[i], b, c);
    return sum_chains_avx512(a);
}

__attribute__((target("avx512f,avx512bf16"))) static float dot_loop_avx512bf16(long iters) {
    __m512 a[CHAINS];
    for (int i = 0; i < CHAINS; i++) a[i] = _mm512_set1_ps((float)i * 1e-3f);
    const __m512bh x = (__m512bh)_mm512_set1_epi16(0x3f80), y = (__m512bh)_mm512_set1_epi16(0x3a80);
    for (long k = 0; k < iters; k++)
#pragma GCC unroll 24
        for (int i = 0; i < CHAINS; i++) a[i] = _mm512_dpbf16_ps(a[i], x, y);
    return sum_chains_avx512(a);
}

static volatile float sink;

/* Best FLOP/s of `reps` passes of the loop on `threads` threads (all run the same pass; the pass
 * time is the slowest thread's, as the region's end waits for it). */
static double loop_peak(int bf16, int threads, int reps, double seconds) {
    const double flop_per_iter = CHAINS * (bf16 ? 64.0 : 32.0);
    long iters = 1 << 16;
    for (;;) { /* size one pass to about `seconds` on one thread */
        double t0 = zero_time_now();
        sink = bf16 ? dot_loop_avx512bf16(iters) : fma_loop_avx512(iters);
        if (zero_time_now() - t0 > seconds / 4 || iters > (1L << 40)) break;
        iters *= 2;
    }
    iters *= 4;
    double best = 0.0;
    for (int r = 0; r < reps; r++) {
        double t0 = zero_time_now();
#pragma omp parallel num_threads(threads)
        {
            float v = bf16 ? dot_loop_avx512bf16(iters) : fma_loop_avx512(iters);
            if (v == 1234.5f) sink = v; /* keeps the loop */
        }
        double f = (double)threads * (double)iters * flop_per_iter / (zero_time_now() - t0);
        if (f > best) best = f;
    }
    return best;
}

static void row(const char *what, double v, double over) {
    if (v <= 0) {
        printf("| %-42s | n/a | |\n", what);
        return;
    }
    if (over > 0)
        printf("| %-42s | %8.1f | %.2f |\n", what, v * 1e-9, v / over);
    else
        printf("| %-42s | %8.1f | |\n", what, v * 1e-9);
}

int main(int argc, char **argv) {
    int threads = 2, reps = 5;
    double seconds = 0.2;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            threads = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
            reps = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--seconds") && i + 1 < argc) {
            seconds = atof(argv[++i]);
        } else {
            fprintf(stderr, "usage: bench_peak [--threads T] [--reps R] [--seconds S]\n");
            return 2;
        }
    }
    if (threads < 1 || reps < 1 || !(seconds > 0)) {
        fprintf(stderr, "bench_peak: --threads and --reps must be >= 1, --seconds > 0\n");
        return 2;
    }
    __builtin_cpu_init();
    const int avx512 = __builtin_cpu_supports("avx512f");
    const int bf16 = avx512 && __builtin_cpu_supports("avx512bf16");
    printf("# bench_peak: best of %d passes of %.2f s; %d threads; GFLOP/s\n", reps, seconds,
           threads);
    printf("| figure | GFLOP/s | ratio |\n|---|---|---|\n");
    double fma1 = avx512 ? loop_peak(0, 1, reps, seconds) : 0;
    double dot1 = bf16 ? loop_peak(1, 1, reps, seconds) : 0;
    double fmaT = avx512 ? loop_peak(0, threads, reps, seconds) : 0;
    double dotT = bf16 ? loop_peak(1, threads, reps, seconds) : 0;
    double gemm32 = zero__matmul_peak_flops(ZERO_DTYPE_FP32, threads);
    double gemm16 = zero__matmul_peak_flops(ZERO_DTYPE_BF16, threads);
    row("fp32 FMA, 1 thread", fma1, 0);
    row("bf16 dot, 1 thread (ratio: / fp32 FMA)", dot1, fma1);
    row("fp32 FMA, all threads", fmaT, 0);
    row("bf16 dot, all threads (ratio: / fp32 FMA)", dotT, fmaT);
    row("fp32 GEMM 2048^3 (ratio: / fp32 FMA)", gemm32, fmaT);
    row("bf16 GEMM 2048^3 (ratio: / bf16 dot)", gemm16, dotT);
    row("bf16 GEMM / fp32 GEMM (ratio)", gemm16, gemm32);
    printf("{\"fma_fp32\": %.4g, \"dot_bf16\": %.4g, \"gemm_fp32\": %.4g, \"gemm_bf16\": %.4g, "
           "\"threads\": %d}\n",
           fmaT, dotT, gemm32, gemm16, threads);
    return 0;
}
