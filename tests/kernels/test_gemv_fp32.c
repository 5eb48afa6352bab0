/* test_gemv_fp32.c — the fp32 decode GEMV (zero__gemv_fp32, kernels.h).
 *
 * Oracles: (1) bitwise, the documented order re-derived in scalar code (element k into lane
 * k % 16 with fmaf in order, the lanes in a tree of 8, 4, 2, 1, then + bias); (2) a double dot
 * product of the same values, within the summation bound (C / 16 + 4 roundings of at most 2^-24
 * of sum |x w| each, plus the bias's one); (3) a row's result is bitwise the same alone and
 * among 16 rows, on 1 and 2 threads; (4) more than ZERO__GEMV_FP32_ROWS rows are declined. C
 * covers the 16-element steps and every tail (1, 15, 16, 17, 100, 768); OC 3 (a short tile
 * only) and 4099 (short tiles at each thread's slice end); rows 1 .. 16 (short row tiles); with
 * and without a bias. Where ZERO_ISA caps the level below avx512 (or the CPU lacks it) the
 * function declines and the test says so.
 */
#include "check.h"
#include "kernels/kernels.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned seed = 777;
static float rnd(void) {
    seed = seed * 1103515245u + 12345u;
    return ((int)(seed >> 8 & 0xffff) - 32768) / 16384.0f;
}

static float documented_order(const float *x, const float *w, size_t C, const float *bias) {
    float lane[16] = {0};
    for (size_t k = 0; k < C; k++) lane[k % 16] = fmaf(x[k], w[k], lane[k % 16]);
    for (int s = 8; s > 0; s /= 2)
        for (int j = 0; j < s; j++) lane[j] += lane[j + s];
    return bias ? lane[0] + *bias : lane[0];
}

int main(void) {
    const size_t Cs[] = {1, 15, 16, 17, 100, 768}, OCs[] = {3, 4099}, R = ZERO__GEMV_FP32_ROWS;
    float probe = 1.0f, probe_out;
    if (!zero__gemv_fp32(&probe_out, &probe, &probe, NULL, 1, 1, 1, 1)) {
        printf("zero__gemv_fp32 does not apply here (ZERO_ISA or the CPU below avx512): nothing "
               "to test\n");
        return check_report();
    }
    CHECK(!zero__gemv_fp32(&probe_out, &probe, &probe, NULL, R + 1, 1, 1, 1),
          "more than ZERO__GEMV_FP32_ROWS rows must be declined");
    for (size_t ci = 0; ci < sizeof Cs / sizeof Cs[0]; ci++)
        for (size_t oi = 0; oi < sizeof OCs / sizeof OCs[0]; oi++)
            for (int with_bias = 0; with_bias < 2; with_bias++) {
                const size_t C = Cs[ci], OC = OCs[oi];
                float *x = malloc(R * C * 4), *w = malloc(OC * C * 4), *b = malloc(OC * 4);
                float *o16 = malloc(R * OC * 4), *o16t = malloc(R * OC * 4), *o1 = malloc(OC * 4);
                for (size_t i = 0; i < R * C; i++) x[i] = rnd();
                for (size_t i = 0; i < OC * C; i++) w[i] = rnd();
                for (size_t i = 0; i < OC; i++) b[i] = rnd();
                const float *bias = with_bias ? b : NULL;
                size_t bad_order = 0, bad_bound = 0, bad_rows = 0;
                for (size_t rows = 1; rows <= R; rows += rows < 5 ? 1 : 11) { /* 1-5, 16 */
                    CHECK(zero__gemv_fp32(o16, x, w, bias, rows, C, OC, 1), "rows %zu", rows);
                    zero__gemv_fp32(o16t, x, w, bias, rows, C, OC, 2);
                    CHECK(!memcmp(o16, o16t, rows * OC * 4), "C %zu OC %zu rows %zu: threads", C,
                          OC, rows);
                    zero__gemv_fp32(o1, x + (rows - 1) * C, w, bias, 1, C, OC, 2);
                    bad_rows += memcmp(o1, o16 + (rows - 1) * OC, OC * 4) != 0;
                    for (size_t r = 0; r < rows; r++)
                        for (size_t o = 0; o < OC; o++) {
                            const float want =
                                documented_order(x + r * C, w + o * C, C, bias ? b + o : NULL);
                            const float got = o16[r * OC + o];
                            bad_order += memcmp(&want, &got, 4) != 0;
                            double s = bias ? b[o] : 0, a = 0;
                            for (size_t k = 0; k < C; k++) {
                                s += (double)x[r * C + k] * w[o * C + k];
                                a += fabs((double)x[r * C + k] * w[o * C + k]);
                            }
                            const double tol =
                                (double)(C / 16 + 5) * ldexp(a, -24) + ldexp(fabs(s), -24);
                            bad_bound += fabs(got - s) > tol;
                        }
                }
                CHECK(!bad_order && !bad_bound && !bad_rows,
                      "C %zu OC %zu bias %d: %zu outputs not the documented order, %zu beyond "
                      "the summation bound, %zu row counts where the last row alone differs",
                      C, OC, with_bias, bad_order, bad_bound, bad_rows);
                free(x), free(w), free(b), free(o16), free(o16t), free(o1);
            }
    printf("zero__gemv_fp32: rows 1-5 and 16, C 1-768, OC 3 and 4099, bitwise the documented "
           "order\n");
    return check_report();
}
