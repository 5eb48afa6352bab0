/* test_gemv_bf16.c — the decode GEMV on AVX512-BF16 (zero__gemv_bf16, kernels_lp.h).
 *
 * Oracle: a double-precision dot product of the same bf16 values. Every product of two bf16
 * numbers is exact in fp32 (8 + 8 significant bits), so the fp32 sum of C of them is within
 * C x 2^-24 x sum |x w| of the exact value (a generous form of the summation bound). Also: a bf16
 * out is the fp32 out rounded to nearest even; a row's result is bitwise the same alone, beside
 * 3 other rows, and on 1 or 2 threads (the order of its sums is fixed); the bias is added once.
 * C covers the 32-element steps and every tail (1, 31, 32, 33, 77, 768). Where the CPU lacks
 * AVX512-BF16 (or ZERO_ISA caps it) the function declines (returns 0) and the test says so.
 */
#include "check.h"
#include "kernels/kernels_lp.h"
#include "zero/core.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned seed = 12345;
static float rnd(void) {
    seed = seed * 1103515245u + 12345u;
    return ((int)(seed >> 9 & 0x3fff) - 8192) / 4096.0f;
}

int main(void) {
    const size_t Cs[] = {1, 31, 32, 33, 77, 768}, OC = 4099, R = ZERO__GEMV_ROWS;
    uint16_t probe = 0;
    float probe_out;
    if (!zero__gemv_bf16(&probe_out, ZERO_DTYPE_FP32, &probe, &probe, NULL, 1, 1, 1, 1)) {
        printf("zero__gemv_bf16 does not apply on this CPU (no AVX512-BF16, or ZERO_ISA below "
               "avx512): nothing to test\n");
        return check_report();
    }
    CHECK(!zero__gemv_bf16(&probe_out, ZERO_DTYPE_FP32, &probe, &probe, NULL, R + 1, 1, 1, 1),
          "more than ZERO__GEMV_ROWS rows must be declined");
    for (size_t ci = 0; ci < sizeof Cs / sizeof Cs[0]; ci++) {
        const size_t C = Cs[ci];
        uint16_t *x = malloc(R * C * 2), *w = malloc(OC * C * 2), *b = malloc(OC * 2);
        float *o4 = malloc(R * OC * 4), *o1 = malloc(OC * 4), *o2t = malloc(R * OC * 4);
        uint16_t *h4 = malloc(R * OC * 2);
        for (size_t i = 0; i < R * C; i++) x[i] = zero_fp32_to_bf16(rnd());
        for (size_t i = 0; i < OC * C; i++) w[i] = zero_fp32_to_bf16(rnd());
        for (size_t i = 0; i < OC; i++) b[i] = zero_fp32_to_bf16(rnd());
        CHECK(zero__gemv_bf16(o4, ZERO_DTYPE_FP32, x, w, b, R, C, OC, 1), "C %zu", C);
        zero__gemv_bf16(o2t, ZERO_DTYPE_FP32, x, w, b, R, C, OC, 2);
        zero__gemv_bf16(o1, ZERO_DTYPE_FP32, x + 2 * C, w, b, 1, C, OC, 2);
        zero__gemv_bf16(h4, ZERO_DTYPE_BF16, x, w, b, R, C, OC, 2);
        size_t bad = 0, rounded = 0;
        double worst = 0;
        for (size_t r = 0; r < R; r++)
            for (size_t o = 0; o < OC; o++) {
                double s = 0, a = 0;
                for (size_t k = 0; k < C; k++) {
                    const double p =
                        (double)zero_bf16_to_fp32(x[r * C + k]) * zero_bf16_to_fp32(w[o * C + k]);
                    s += p;
                    a += fabs(p);
                }
                const double bias = zero_bf16_to_fp32(b[o]), got = o4[r * OC + o];
                /* the dot product's bound, then the bias added in fp32 (one rounding) */
                const double tol = (double)C * ldexp(a, -24) + ldexp(fabs(s + bias), -24);
                worst = fmax(worst, fabs(got - (s + bias)) / (a + 1e-30));
                bad += fabs(got - (s + bias)) > tol;
                rounded += h4[r * OC + o] != zero_fp32_to_bf16(o4[r * OC + o]);
            }
        CHECK(bad == 0, "C %zu: %zu of %zu outputs outside the summation bound", C, bad, R * OC);
        CHECK(rounded == 0, "C %zu: %zu bf16 outputs are not the fp32 outputs rounded", C, rounded);
        CHECK(!memcmp(o4, o2t, R * OC * 4), "C %zu: 1 and 2 threads differ", C);
        CHECK(!memcmp(o1, o4 + 2 * OC, OC * 4), "C %zu: row 2 alone differs from row 2 of 4", C);
        printf("C %4zu: %zu x %zu outputs within the bound (largest error %.2g of sum |x w|)\n", C,
               R, OC, worst);
        free(x), free(w), free(b), free(o4), free(o1), free(o2t), free(h4);
    }
    return check_report();
}
