/* kmath.h — vectorisable float math shared by the kernels (exp, tanh) and threading helpers.
 *
 * Why: without -ffast-math (which STYLE.md forbids) GCC calls glibc's scalar expf/tanhf one
 * element at a time, which made GELU and softmax compute-bound. These versions are plain C that
 * the compiler vectorises inside `#pragma omp simd` loops. Accuracy: kexp within ~2 ulp of expf
 * over its whole range (flushes to 0 below -87.3, saturates to +inf above 88.7; NaN gives NaN);
 * ktanh within ~1e-7 absolute. Not here: anything needing errno or exact libm results.
 */
#ifndef ZERO_KERNELS_KMATH_H
#define ZERO_KERNELS_KMATH_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* exp(x): x = n ln2 + r with |r| <= ln2/2, exp(r) by a degree-6 polynomial (Cephes expf
 * coefficients), times 2^n built in the exponent bits. */
static inline float kexp(float x) {
    const float hi = 88.3762626647949f, lo = -87.3365478515625f;
    /* written so that NaN clamps to hi (a finite n: converting NaN to int is undefined) */
    float xc = x < hi ? x : hi;
    xc = xc > lo ? xc : lo;
    /* round to nearest by the 1.5 * 2^23 trick: roundf/rintf calls would block vectorisation */
    float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    /* ln2 split in two so r = x - n ln2 stays exact to float precision */
    float r = xc - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    int32_t bits = ((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    float y = p * scale;
    /* saturate like expf: large x -> inf, tiny x -> 0, NaN -> NaN */
    y = x > hi ? INFINITY : y;
    y = x < lo ? 0.0f : y;
    return x != x ? x : y;
}

/* a b + c. -std=c11 turns floating-point contraction off, so a plain a * b + c is a multiply and
 * an add (half the FMA rate); fmaf is one instruction where the target has FMA (and then
 * vectorises) and a slow library call where it has not, so fall back to two roundings there. */
#ifdef __FMA__
#define KFMA(a, b, c) fmaf((a), (b), (c))
#else
#define KFMA(a, b, c) ((a) * (b) + (c))
#endif

/* exp(x) for x <= 0 or NaN (softmax scores minus their row maximum, GELU's exp(-|2u|)): kexp's
 * range reduction and polynomial with fused multiply-adds and without the overflow branch;
 * within ~2 ulp of expf, 0 below -87.3, NaN stays NaN. attention.c has an 8-lane twin that must
 * stay operation for operation the same. */
static inline float kexp_nonpos(float x) {
    const float lo = -87.3365478515625f;
    float xc = x > lo ? x : lo; /* NaN -> lo: keeps the integer conversion below defined */
    xc = xc < 0.0f ? xc : 0.0f;
    float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = KFMA(n, -0.693359375f, xc);
    r = KFMA(n, 2.12194440e-4f, r);
    float p = 1.9875691500e-4f;
    p = KFMA(p, r, 1.3981999507e-3f);
    p = KFMA(p, r, 8.3334519073e-3f);
    p = KFMA(p, r, 4.1665795894e-2f);
    p = KFMA(p, r, 1.6666665459e-1f);
    p = KFMA(p, r, 5.0000001201e-1f);
    p = KFMA(p * r, r, r) + 1.0f;
    int32_t bits = ((int32_t)n + 127) << 23;
    float sc;
    memcpy(&sc, &bits, sizeof sc);
    float y = x < lo ? 0.0f : p * sc;
    return x != x ? x : y;
}

/* tanh(u) = sign(u) (1 - e) / (1 + e), e = exp(-2|u|): no overflow for any u. */
static inline float ktanh(float u) {
    float a = u < 0.0f ? -u : u;
    float e = kexp(-2.0f * a);
    float t = (1.0f - e) / (1.0f + e);
    return u < 0.0f ? -t : t;
}

/* Threads worth using for `work` elements of streaming work: below ~32K elements the fork/join
 * of a parallel region costs more than it saves. */
static inline int kthreads(size_t work, int threads) {
    if (threads < 1) return 1;
    if (work < 32768) return 1;
    return threads;
}

/* The calling thread's number and team size (0 and 1 outside a parallel region). */
static inline void kteam(int *id, int *n) {
#ifdef _OPENMP
    *id = omp_get_thread_num();
    *n = omp_get_num_threads();
#else
    *id = 0;
    *n = 1;
#endif
}

/* Inside an OpenMP parallel region: the calling thread's contiguous slice [*begin, *end) of n
 * items, cut on multiples of `granule` items so that no two threads write the same cache line.
 * The split depends only on n, granule and the team size. */
static inline void kslice(size_t n, size_t granule, size_t *begin, size_t *end) {
    size_t id = 0, team = 1;
#ifdef _OPENMP
    id = (size_t)omp_get_thread_num();
    team = (size_t)omp_get_num_threads();
#endif
    size_t blocks = (n + granule - 1) / granule;
    size_t b = blocks * id / team * granule, e = blocks * (id + 1) / team * granule;
    *begin = b < n ? b : n;
    *end = e < n ? e : n;
}

#endif /* ZERO_KERNELS_KMATH_H */
