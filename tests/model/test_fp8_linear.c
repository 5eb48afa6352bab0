/* test_fp8_linear.c — a linear layer with FP8 GEMM inputs (src/model/fp8.c, as gpt.c runs its
 * blocks' linears: forward y = q(X) q(W)^T, backward dX = q(dY) q(W), dW = q(dY)^T q(X), GEMMs in
 * fp32) against the exact double result on the unquantized values, within a bound derived from
 * the formats' precision, not from the code:
 *
 *   each input element q(v) = v + e with |e| <= max(u |v|, h / S) for a per-tensor scale S
 *   (delayed) or max(u |v|, h s) for a tile scale s = amax / FP8_MAX (blockwise), where u is half
 *   the format's relative spacing (E4M3 2^-4, E5M2 2^-3) and h half its smallest subnormal (E4M3
 *   2^-10, E5M2 2^-17), nothing saturating (the scales come from the same tensors);
 *   |sum_k q(a_k) q(b_k) - sum_k a_k b_k| <= sum_k (|a_k| eb_k + |b_k| ea_k + ea_k eb_k)
 *   + K 2^-23 sum_k |q(a_k)| |q(b_k)| (the fp32 GEMM's own rounding, generously).
 *
 * Recipes: delayed (one step records the amax, the update makes the scales, the next uses them)
 * in hybrid and e4m3, blockwise with ragged 1 x 128 tiles and 128 x 128 blocks. Shapes: BT 37,
 * C 200, OC 150. Each case also checks that the error is not zero (the inputs were quantized)
 * and that the largest error uses a fair part of the bound (above 1%: the bound is not vacuous).
 */
#define MODEL_TEST_SEED 0xf8f8f8f8f8ull
#include "check.h"
#include "kernels/kernels.h"
#include "model/fp8.h"
#include "model_test_util.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

enum { BT = 37, C = 200, OC = 150 };

typedef struct {
    double u, h;
} fmt_t;
static fmt_t fmt(zero__fp8_format_t f) {
    return f == ZERO__FP8_E4M3 ? (fmt_t){0x1p-4, 0x1p-10} : (fmt_t){0x1p-3, 0x1p-17};
}

/* Per-element error bounds of q(v) for v (rows, cols): per tensor (scale S > 0) or per tile. */
static void bounds(double *e, const float *v, size_t rows, size_t cols, zero__fp8_format_t f,
                   double S, size_t tile_rows) {
    const fmt_t F = fmt(f);
    if (S > 0) {
        for (size_t i = 0; i < rows * cols; i++) e[i] = fmax(F.u * fabs(v[i]), F.h / S);
        return;
    }
    for (size_t r0 = 0; r0 < rows; r0 += tile_rows)
        for (size_t c0 = 0; c0 < cols; c0 += 128) {
            double amax = 0;
            for (size_t r = r0; r < rows && r < r0 + tile_rows; r++)
                for (size_t c = c0; c < cols && c < c0 + 128; c++)
                    amax = fmax(amax, fabs(v[r * cols + c]));
            const double s = fmax(amax, 1e-4) / zero__fp8_max(f);
            for (size_t r = r0; r < rows && r < r0 + tile_rows; r++)
                for (size_t c = c0; c < cols && c < c0 + 128; c++)
                    e[r * cols + c] = fmax(F.u * fabs(v[r * cols + c]), F.h * s);
        }
}

/* out (M, N) from a (M, K) row-major and b: b_t ? (N, K) : (K, N); got against the exact double
 * sum of a b within the bound; returns the largest error / bound. */
static double check_gemm(const char *what, const float *got, const float *a, const double *ea,
                         const float *qa, const float *b, const double *eb, const float *qb,
                         size_t M, size_t N, size_t K, int a_t, int b_t) {
    double worst = 0, any = 0;
    size_t bad = 0;
    for (size_t i = 0; i < M; i++)
        for (size_t j = 0; j < N; j++) {
            double exact = 0, tol = 0, mag = 0;
            for (size_t k = 0; k < K; k++) {
                size_t ia = a_t ? k * M + i : i * K + k, ib = b_t ? j * K + k : k * N + j;
                exact += (double)a[ia] * b[ib];
                tol += fabs(a[ia]) * eb[ib] + fabs(b[ib]) * ea[ia] + ea[ia] * eb[ib];
                mag += fabs(qa[ia]) * fabs(qb[ib]);
            }
            tol += (double)K * 0x1p-23 * mag;
            double err = fabs(got[i * N + j] - exact);
            bad += err > tol;
            worst = fmax(worst, err / tol);
            any = fmax(any, err);
        }
    CHECK(!bad, "%s: %zu of %zu outputs beyond the bound (worst %.3g of it)", what, bad, M * N,
          worst);
    CHECK(any > 0 && worst > 0.01, "%s: largest error %.3g, %.3g of the bound (vacuous?)", what,
          any, worst);
    return worst;
}

static void fill(float *v, size_t n, double sd) {
    for (size_t i = 0; i < n; i++) v[i] = (float)(sd * nrand());
}

static void run(zero_fp8_recipe_t recipe, int hybrid) {
    const char *name = recipe == ZERO_FP8_DELAYED
                           ? (hybrid ? "delayed hybrid" : "delayed e4m3")
                           : (hybrid ? "blockwise hybrid" : "blockwise e4m3");
    zero_fp8_config_t cfg = {1, hybrid, recipe, 0, 4, 0};
    zero_fp8_t *s = NULL;
    CHECK(zero__fp8_init(&s, &cfg, 1, NULL) == ZERO_OK && s, "%s: init: %s", name,
          zero_last_error());
    if (!s) return;
    static float x[BT * C], w[OC * C], dy[BT * OC], qx[BT * C], qw[OC * C], qdy[BT * OC];
    static float y[BT * OC], dx[BT * C], dw[OC * C];
    static double ex[BT * C], ew[OC * C], edy[BT * OC];
    fill(x, BT * C, 1.0);
    fill(w, OC * C, 0.02);
    fill(dy, BT * OC, 1e-4);                           /* a mean loss's gradient is small */
    for (int c = 0; c < C; c++) x[5 * C + c] *= 20.0f; /* an outlier row (a tile of its own) */
    const zero__fp8_format_t fdy = hybrid ? ZERO__FP8_E5M2 : ZERO__FP8_E4M3;
    double sx = 0, sw = 0, sdy = 0; /* per-tensor scales (delayed); 0 for tiles */
    if (recipe == ZERO_FP8_DELAYED) {
        /* a step that records the amaxes (with scale 1), then the update */
        zero__fp8_input(s, qx, x, ZERO_DTYPE_FP32, BT, C, 0, 2, ZERO_FP8_X, 1, 1);
        zero__fp8_input(s, qw, w, ZERO_DTYPE_FP32, OC, C, 0, 2, ZERO_FP8_W, 1, 1);
        zero__fp8_input(s, qdy, dy, ZERO_DTYPE_FP32, BT, OC, 0, 2, ZERO_FP8_DY, 1, 1);
        zero__fp8_update(s);
        float saved[ZERO_FP8_LINEARS * ZERO_FP8_ROLE_COUNT * 5];
        CHECK(zero__fp8_saved_count(s) == sizeof saved / sizeof saved[0], "%s: saved count %zu",
              name, zero__fp8_saved_count(s));
        zero__fp8_save(s, saved);
        const size_t t = 2 * ZERO_FP8_ROLE_COUNT; /* linear 2 */
        sx = saved[t + ZERO_FP8_X], sw = saved[t + ZERO_FP8_W], sdy = saved[t + ZERO_FP8_DY];
        CHECK(sx == 448.0f / zero__fp8_amax(x, ZERO_DTYPE_FP32, BT * C, 1) &&
                  sdy == zero__fp8_max(fdy) / zero__fp8_amax(dy, ZERO_DTYPE_FP32, BT * OC, 1),
              "%s: scales %g, %g from the recorded amax", name, sx, sdy);
    }
    zero__fp8_input(s, qx, x, ZERO_DTYPE_FP32, BT, C, 0, 2, ZERO_FP8_X, 0, 2);
    zero__fp8_input(s, qw, w, ZERO_DTYPE_FP32, OC, C, 0, 2, ZERO_FP8_W, 0, 2);
    zero__fp8_input(s, qdy, dy, ZERO_DTYPE_FP32, BT, OC, 0, 2, ZERO_FP8_DY, 0, 2);
    bounds(ex, x, BT, C, ZERO__FP8_E4M3, sx, 1);
    bounds(ew, w, OC, C, ZERO__FP8_E4M3, sw, 128);
    bounds(edy, dy, BT, OC, fdy, sdy, 1);
    if (recipe == ZERO_FP8_BLOCKWISE) /* gradient tiles have no 1e-4 floor (fp8.c) */
        for (size_t r = 0; r < BT; r++)
            for (size_t c0 = 0; c0 < OC; c0 += 128) {
                double amax = 0;
                for (size_t c = c0; c < OC && c < c0 + 128; c++)
                    amax = fmax(amax, fabs(dy[r * OC + c]));
                for (size_t c = c0; c < OC && c < c0 + 128; c++)
                    edy[r * OC + c] = fmax(fmt(fdy).u * fabs(dy[r * OC + c]),
                                           fmt(fdy).h * amax / zero__fp8_max(fdy));
            }
    /* the layer: forward and backward on the quantized inputs, fp32 GEMMs */
    zero__matmul_forward(y, qx, qw, NULL, BT, C, OC, 2);
    memset(dx, 0, sizeof dx);
    memset(dw, 0, sizeof dw);
    zero__matmul_backward(dx, dw, NULL, qdy, qx, qw, BT, C, OC, 2);
    char what[96];
    snprintf(what, sizeof what, "%s forward y", name);
    double w1 = check_gemm(what, y, x, ex, qx, w, ew, qw, BT, OC, C, 0, 1);
    snprintf(what, sizeof what, "%s backward dX", name);
    double w2 = check_gemm(what, dx, dy, edy, qdy, w, ew, qw, BT, C, OC, 0, 0);
    snprintf(what, sizeof what, "%s backward dW", name);
    double w3 = check_gemm(what, dw, dy, edy, qdy, x, ex, qx, OC, C, BT, 1, 0);
    printf("%s: largest error / bound: y %.3f, dX %.3f, dW %.3f\n", name, w1, w2, w3);
    zero__fp8_free(s);
}

int main(void) {
    run(ZERO_FP8_DELAYED, 1);
    run(ZERO_FP8_DELAYED, 0);
    run(ZERO_FP8_BLOCKWISE, 1);
    run(ZERO_FP8_BLOCKWISE, 0);
    return check_report();
}
