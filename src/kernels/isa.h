/* isa.h — kernels built once per x86-64 instruction-set level, one chosen at start-up
 * (private to src/kernels).
 *
 * What it is: src/kernels/isa/spans.c holds the compute-bound inner loops whose speed depends on
 * the vector ISA (GELU forward and backward: a polynomial exp with fused multiply-adds; the
 * exponentials of softmax + cross-entropy over the vocabulary; FP8 conversions). CMake
 * compiles that file once per level (baseline x86-64; AVX2 + FMA; AVX-512 F/BW/VL + AVX2 + FMA)
 * into one table each; zero__isa_selected() picks the best level this CPU runs, once per
 * process, and logs it once (debug level). attention.c's hand-written AVX2 and AVX-512 paths
 * follow the same choice. So a build without -march=native (ZERO_NATIVE=OFF) runs on any x86-64
 * and still uses AVX-512 where the CPU has it. Other architectures have the baseline only.
 * The environment variable ZERO_ISA (baseline, avx2, avx512) caps the choice: tests use it to
 * run the portable paths on a machine with AVX-512.
 * Results: each level computes the same operations, but the baseline has no FMA (a b + c is two
 * roundings there), so GELU differs from the AVX2 / AVX-512 result by a few ulp, and a row's
 * sum of exponentials is added in as many lanes as the level's vectors hold (the order differs,
 * each order is fixed); within one process the level never changes, so runs stay bitwise
 * reproducible on one machine.
 */
#ifndef ZERO_KERNELS_ISA_H
#define ZERO_KERNELS_ISA_H

#include "lp_io.h"

typedef enum zero__isa {
    ZERO__ISA_BASELINE, /* x86-64 (SSE2), or the target's default elsewhere */
    ZERO__ISA_AVX2,     /* AVX2 + FMA */
    ZERO__ISA_AVX512,   /* AVX-512 F, BW, VL + AVX2 + FMA */
    ZERO__ISA_COUNT
} zero__isa_t;

/* One level's kernels: span functions in zero__span_fn's shape (lp_io.h). */
typedef struct zero__isa_kernels {
    zero__span_fn gelu_forward;  /* out(n) = gelu(a(n)); b unused */
    zero__span_fn gelu_backward; /* out(n) += gelu'(a(n)) * b(n) */
    /* softmax + cross-entropy rows (softmax_ce.c): log(sum_j exp(x[j])) of x(n), the maximum
     * taken out first; and out(n) = exp(x(n) - lse) * d, elementwise (out may be x) */
    float (*row_lse)(const float *x, size_t n);
    void (*row_exp_scale)(float *out, const float *x, float lse, float d, size_t n);
    /* FP8 arrays (fp8.h; f a zero__fp8_format_t): out(n) = enc(x(n) * scale), and
     * out(n) = dec(c(n)) * scale, bitwise the scalar forms at every level */
    void (*fp8_encode)(uint8_t *out, const float *x, size_t n, float scale, int f);
    void (*fp8_decode)(float *out, const uint8_t *c, size_t n, float scale, int f);
} zero__isa_kernels_t;

/* "baseline", "avx2", "avx512". */
const char *zero__isa_name(zero__isa_t isa);

/* 1 if this build has the level's table and this CPU can run it. */
int zero__isa_supported(zero__isa_t isa);

/* The level in use: the best supported one, capped by ZERO_ISA; decided on the first call
 * (thread-safe), logged once. An unknown ZERO_ISA value is ignored with a warning. */
zero__isa_t zero__isa_selected(void);

/* The table of `isa` (which must be supported), or of the selected level. Static storage. */
const zero__isa_kernels_t *zero__isa_kernels(zero__isa_t isa);
const zero__isa_kernels_t *zero__isa_current(void);

#endif /* ZERO_KERNELS_ISA_H */
