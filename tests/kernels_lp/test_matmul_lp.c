/* test_matmul_lp.c — bf16 / fp16 GEMM and linear forward/backward (src/kernels/matmul_lp.c)
 * against a naive reference in double.
 *
 * Reference: widen every 16-bit operand to fp32 with the scalar conversions (exact) and
 * multiply-add in double, so the reference sees exactly the kernel's inputs.
 * Tolerances, per output element with S = sum over k of |a_k b_k| (in double):
 * - fp32 accumulation: |err| <= K * 2^-24 * S (the worst-case bound of a recursive fp32 sum;
 *   bf16 x bf16 and fp16 x fp16 products are exact in fp32), plus
 * - a 16-bit output's single final rounding: half an ulp of the fp32 sum, at most
 *   u_out * (|ref| + accumulation error), u_out = 2^-8 (bf16) or 2^-11 (fp16), plus the
 *   smallest subnormal for fp16.
 * A second, looser check compares with the product of the ORIGINAL fp32 data (before rounding to
 * 16 bits): each input carries a relative rounding error of at most u (2^-8 bf16, 2^-11 fp16), so
 * |err| <= (2u + u^2) * S on top of the bounds above; this is what the format costs.
 * Covered: all four transpose combinations with padded strides, fp32 and 16-bit outputs,
 * accumulate and overwrite, bias, every backward gradient with fp32 and 16-bit gradient dtypes,
 * 1 and 2 threads, K = 0, and two threads sharing cached primitives concurrently.
 */
#include "kernels/kernels_lp.h"
#include "zero/core.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "check.h"

static double worst; /* largest |err| / tol seen: shows the tolerance is not vacuous */
static char worst_what[256];

#define LP_TEST_SEED 0x243f6a8885a308d3ull
#include "lp_test_util.h"
static double unit_roundoff(zero_dtype_t dt) {
    return dt == ZERO_DTYPE_BF16 ? ldexp(1.0, -8) : ldexp(1.0, -11);
}

/* A 16-bit matrix with its original fp32 values. */
typedef struct {
    float *orig;
    uint16_t *h;
    size_t n;
} mat_t;

static mat_t mat_rand(size_t n, zero_dtype_t dt) {
    mat_t m = {malloc((n + 1) * sizeof(float)), malloc((n + 1) * sizeof(uint16_t)), n};
    if (!m.orig || !m.h) exit(2);
    for (size_t i = 0; i < n; i++) {
        m.orig[i] = frand();
        m.h[i] = to16(m.orig[i], dt);
    }
    return m;
}
static void mat_free(mat_t *m) {
    free(m->orig);
    free(m->h);
}

/* Element (i, p) of op(X) for stored X with leading dimension ld. */
static size_t at(int trans, size_t i, size_t p, size_t ld) {
    return trans ? p * ld + i : i * ld + p;
}

/* Check C (c_dtype, ld ldc) against C0 + op(A) op(B) (+ bias), C0 the destination before the
 * call (NULL = overwrite). Returns the number of bad elements. */
static int check_gemm(const char *what, int ta, int tb, size_t M, size_t N, size_t K,
                      const mat_t *A, size_t lda, const mat_t *B, size_t ldb, zero_dtype_t dt,
                      const float *C0, const void *C, size_t ldc, zero_dtype_t cdt,
                      const mat_t *bias) {
    double u = unit_roundoff(dt);
    double uout = cdt == ZERO_DTYPE_FP32 ? 0.0 : unit_roundoff(cdt);
    double tiny = cdt == ZERO_DTYPE_FP16 ? ldexp(1.0, -24) : 0.0;
    int bad = 0;
    for (size_t i = 0; i < M; i++) {
        for (size_t j = 0; j < N; j++) {
            double ref = 0.0, ref_orig = 0.0, S = 0.0;
            for (size_t p = 0; p < K; p++) {
                double a = from16(A->h[at(ta, i, p, lda)], dt);
                double b = from16(B->h[at(tb, p, j, ldb)], dt);
                ref += a * b;
                ref_orig += (double)A->orig[at(ta, i, p, lda)] * B->orig[at(tb, p, j, ldb)];
                S += fabs(a * b);
            }
            double base = C0 ? C0[i * ldc + j] : 0.0;
            if (bias) {
                base += from16(bias->h[j], dt);
                S += fabs((double)from16(bias->h[j], dt));
            }
            ref += base;
            ref_orig += base;
            S += fabs(base);
            double got = cdt == ZERO_DTYPE_FP32 ? ((const float *)C)[i * ldc + j]
                                                : from16(((const uint16_t *)C)[i * ldc + j], cdt);
            double acc_tol = (double)(K + 2) * ldexp(1.0, -24) * S;
            double tol = acc_tol * (1.0 + uout) + uout * fabs(ref) + tiny;
            double tol_orig = tol + (2.0 * u + u * u) * S + uout * fabs(ref - ref_orig);
            if (tol > 0 && fabs(got - ref) / tol > worst) {
                worst = fabs(got - ref) / tol;
                snprintf(worst_what, sizeof worst_what, "%s at (%zu,%zu)", what, i, j);
            }
            if (!(fabs(got - ref) <= tol) || !(fabs(got - ref_orig) <= tol_orig)) {
                if (bad < 3)
                    fprintf(
                        stderr,
                        "  %s (%zu,%zu): got %.9g ref %.9g (tol %.3g) ref_orig %.9g (tol %.3g)\n",
                        what, i, j, got, ref, tol, ref_orig, tol_orig);
                bad++;
            }
        }
    }
    return bad;
}

/* A destination buffer (M, ldc) of cdt filled with random values; C0 gets their fp32 values. */
static void *dest_rand(size_t M, size_t ldc, zero_dtype_t cdt, float **C0) {
    size_t n = M * ldc;
    *C0 = malloc(n * sizeof(float));
    void *C = malloc(n * (cdt == ZERO_DTYPE_FP32 ? 4 : 2));
    if (!*C0 || !C) exit(2);
    for (size_t i = 0; i < n; i++) {
        float x = frand();
        if (cdt == ZERO_DTYPE_FP32) {
            ((float *)C)[i] = x;
            (*C0)[i] = x;
        } else {
            ((uint16_t *)C)[i] = to16(x, cdt);
            (*C0)[i] = from16(((uint16_t *)C)[i], cdt);
        }
    }
    return C;
}

static void test_gemm(zero_dtype_t dt) {
    const size_t shapes[][3] = {{7, 5, 13}, {33, 40, 96}, {64, 48, 200}};
    for (size_t s = 0; s < 3; s++) {
        size_t M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
        for (int ta = 0; ta <= 1; ta++)
            for (int tb = 0; tb <= 1; tb++)
                for (int ci = 0; ci < 2; ci++)
                    for (int acc = 0; acc <= 1; acc++) {
                        zero_dtype_t cdt = ci ? dt : ZERO_DTYPE_FP32;
                        size_t lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 1, ldc = N + 2;
                        mat_t A = mat_rand((ta ? K : M) * lda, dt);
                        mat_t B = mat_rand((tb ? N : K) * ldb, dt);
                        float *C0;
                        void *C = dest_rand(M, ldc, cdt, &C0);
                        int threads = 1 + (int)((s + (size_t)ta) % 2);
                        zero__gemm_lp(ta, tb, M, N, K, A.h, lda, B.h, ldb, dt, acc, C, ldc, cdt,
                                      threads);
                        char what[96];
                        snprintf(what, sizeof what, "%s gemm %c%c M%zu N%zu K%zu c=%s acc=%d",
                                 zero_dtype_name(dt), ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K,
                                 zero_dtype_name(cdt), acc);
                        int bad = check_gemm(what, ta, tb, M, N, K, &A, lda, &B, ldb, dt,
                                             acc ? C0 : NULL, C, ldc, cdt, NULL);
                        /* the padding columns of C must be untouched */
                        int pad_ok = 1;
                        for (size_t i = 0; i < M; i++)
                            for (size_t j = N; j < ldc; j++) {
                                float v = cdt == ZERO_DTYPE_FP32
                                              ? ((float *)C)[i * ldc + j]
                                              : from16(((uint16_t *)C)[i * ldc + j], cdt);
                                pad_ok &= v == C0[i * ldc + j];
                            }
                        CHECK(bad == 0 && pad_ok, "%s: %d bad elements, padding %s", what, bad,
                              pad_ok ? "ok" : "written");
                        mat_free(&A);
                        mat_free(&B);
                        free(C);
                        free(C0);
                    }
    }
}

static void test_linear(zero_dtype_t dt) {
    const size_t shapes[][3] = {{7, 13, 5}, {64, 96, 80}, {128, 768, 96}}; /* BT, C, OC */
    for (size_t s = 0; s < 3; s++) {
        size_t BT = shapes[s][0], C = shapes[s][1], OC = shapes[s][2];
        int threads = s == 1 ? 1 : 2;
        mat_t inp = mat_rand(BT * C, dt), w = mat_rand(OC * C, dt), bias = mat_rand(OC, dt);
        mat_t dout = mat_rand(BT * OC, dt);
        for (int oi = 0; oi < 2; oi++) {
            zero_dtype_t odt = oi ? dt : ZERO_DTYPE_FP32;
            for (int with_bias = 0; with_bias <= 1; with_bias++) {
                float *C0;
                void *out = dest_rand(BT, OC, odt, &C0); /* garbage: forward overwrites */
                zero__matmul_forward_lp(out, odt, inp.h, w.h, with_bias ? bias.h : NULL, dt, BT, C,
                                        OC, threads);
                char what[96];
                snprintf(what, sizeof what, "%s forward BT%zu C%zu OC%zu out=%s bias=%d",
                         zero_dtype_name(dt), BT, C, OC, zero_dtype_name(odt), with_bias);
                /* out = inp · wᵀ: op(A) = inp (BT, C), op(B) = wᵀ with w stored (OC, C) */
                int bad = check_gemm(what, 0, 1, BT, OC, C, &inp, C, &w, C, dt, NULL, out, OC, odt,
                                     with_bias ? &bias : NULL);
                CHECK(bad == 0, "%s: %d bad", what, bad);
                free(out);
                free(C0);
            }
            /* backward: gradients of dtype odt (fp32 or 16-bit), accumulated onto random data */
            float *dinp0, *dw0, *db0;
            void *dinp = dest_rand(BT, C, odt, &dinp0);
            void *dw = dest_rand(OC, C, odt, &dw0);
            void *db = dest_rand(1, OC, odt, &db0);
            zero__matmul_backward_lp(dinp, odt, dw, db, odt, dout.h, inp.h, w.h, dt, BT, C, OC,
                                     threads);
            char what[96];
            snprintf(what, sizeof what, "%s backward BT%zu C%zu OC%zu grads=%s",
                     zero_dtype_name(dt), BT, C, OC, zero_dtype_name(odt));
            /* dinp += dout(BT, OC) · w(OC, C) */
            int bad =
                check_gemm(what, 0, 0, BT, C, OC, &dout, OC, &w, C, dt, dinp0, dinp, C, odt, NULL);
            /* dw += dout(BT, OC)ᵀ · inp(BT, C) */
            bad += check_gemm(what, 1, 0, OC, C, BT, &dout, OC, &inp, C, dt, dw0, dw, C, odt, NULL);
            /* dbias += column sums: a GEMM with a row of ones */
            mat_t ones = mat_rand(BT, dt);
            for (size_t i = 0; i < BT; i++) {
                ones.h[i] = to16(1.0f, dt);
                ones.orig[i] = 1.0f;
            }
            bad +=
                check_gemm(what, 0, 0, 1, OC, BT, &ones, BT, &dout, OC, dt, db0, db, OC, odt, NULL);
            CHECK(bad == 0, "%s: %d bad", what, bad);
            mat_free(&ones);
            /* NULL gradients are skipped */
            zero__matmul_backward_lp(NULL, odt, NULL, NULL, odt, dout.h, NULL, NULL, dt, BT, C, OC,
                                     threads);
            free(dinp);
            free(dw);
            free(db);
            free(dinp0);
            free(dw0);
            free(db0);
        }
        mat_free(&inp);
        mat_free(&w);
        mat_free(&bias);
        mat_free(&dout);
    }
}

/* K = 0: overwrite gives zeros (plus bias for the linear layer), accumulate leaves C alone. */
static void test_empty(zero_dtype_t dt) {
    float c[6] = {1, 2, 3, 4, 5, 6};
    zero__gemm_lp(0, 0, 2, 3, 0, NULL, 1, NULL, 3, dt, 1, c, 3, ZERO_DTYPE_FP32, 1);
    CHECK(c[0] == 1 && c[5] == 6, "K=0 accumulate changed C");
    zero__gemm_lp(0, 0, 2, 3, 0, NULL, 1, NULL, 3, dt, 0, c, 3, ZERO_DTYPE_FP32, 1);
    CHECK(c[0] == 0 && c[5] == 0, "K=0 overwrite did not zero C");
    uint16_t bias[3] = {to16(1.5f, dt), to16(-2.0f, dt), to16(0.25f, dt)}, in[1] = {0}, w[1] = {0};
    float out[6];
    zero__matmul_forward_lp(out, ZERO_DTYPE_FP32, in, w, bias, dt, 2, 0, 3, 1);
    CHECK(out[0] == 1.5f && out[4] == -2.0f && out[5] == 0.25f, "C=0 forward is not the bias");
}

/* Two threads run the same shapes at once: shared cached primitives, own scratch. */
typedef struct {
    zero_dtype_t dt;
    int bad;
} conc_arg_t;

static void *conc_worker(void *arg) {
    conc_arg_t *a = arg;
    enum { BT = 48, C = 64, OC = 40 };
    static const size_t n_in = BT * C, n_w = OC * C;
    uint16_t *inp = malloc(n_in * 2), *w = malloc(n_w * 2);
    float *out = malloc(BT * OC * sizeof(float)), *ref = malloc(BT * OC * sizeof(float));
    if (!inp || !w || !out || !ref) exit(2);
    for (size_t i = 0; i < n_in; i++) inp[i] = to16((float)((i * 7) % 11) * 0.125f - 0.5f, a->dt);
    for (size_t i = 0; i < n_w; i++) w[i] = to16((float)((i * 5) % 13) * 0.0625f - 0.25f, a->dt);
    /* small integers times powers of two: every sum is exact, so results must be equal */
    for (size_t i = 0; i < BT; i++)
        for (size_t j = 0; j < OC; j++) {
            double s = 0;
            for (size_t p = 0; p < C; p++)
                s += (double)from16(inp[i * C + p], a->dt) * from16(w[j * C + p], a->dt);
            ref[i * OC + j] = (float)s;
        }
    for (int it = 0; it < 50; it++) {
        zero__matmul_forward_lp(out, ZERO_DTYPE_FP32, inp, w, NULL, a->dt, BT, C, OC, 1);
        a->bad += memcmp(out, ref, BT * OC * sizeof(float)) != 0;
    }
    free(inp);
    free(w);
    free(out);
    free(ref);
    return NULL;
}

static void test_concurrent(zero_dtype_t dt) {
    pthread_t th[2];
    conc_arg_t args[2] = {{dt, 0}, {dt, 0}};
    for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, conc_worker, &args[i]);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    CHECK(args[0].bad == 0 && args[1].bad == 0, "%s concurrent: %d + %d wrong results",
          zero_dtype_name(dt), args[0].bad, args[1].bad);
}

int main(void) {
    printf("bf16: %s\nfp16: %s\n", zero__matmul_lp_impl(ZERO_DTYPE_BF16),
           zero__matmul_lp_impl(ZERO_DTYPE_FP16));
    const zero_dtype_t dts[2] = {ZERO_DTYPE_BF16, ZERO_DTYPE_FP16};
    for (int d = 0; d < 2; d++) {
        test_gemm(dts[d]);
        test_linear(dts[d]);
        test_empty(dts[d]);
        test_concurrent(dts[d]);
    }
    zero__matmul_lp_cache_clear();
    printf("largest error / tolerance: %.3f (%s)\n", worst, worst_what);
    return check_report();
}
