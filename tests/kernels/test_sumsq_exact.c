/* test_sumsq_exact — the exact sum of squares (src/kernels/sumsq_exact.c):
 *  - closed forms where a float64 sum in order is wrong: 2^53 + k ones rounded once (ties to
 *    even), the sticky bit of a subnormal's square deciding a tie, integers whose sum a double
 *    holds exactly;
 *  - random fp32 values over a wide exponent range (subnormals to 2^100): within one ulp of a
 *    twice-precision float64 reference (TwoSum over the exact squares), and bitwise the same for
 *    any thread count, any order of the elements and any cut into parts merged in any order;
 *  - bf16 and fp16 inputs give the sum of their fp32 widenings; inf gives +inf, NaN gives NaN.
 */
#include "check.h"
#include "core/core_internal.h"
#include "kernels/sumsq_exact.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/krand.h"

static double xsum_of(const void *x, size_t n, zero_dtype_t dt, int threads) {
    zero__xsum_t s;
    memset(&s, 0, sizeof s);
    zero__xsum_add_squares(&s, x, n, dt, threads);
    return zero__xsum_value(&s);
}

/* Sum of squares to about 2^-106 relative (Ogita, Rump and Oishi's Sum2 over the exact squares),
 * rounded once at the end: a reference computed without integers. */
static double twosum_ref(const float *x, size_t n) {
    double s = 0.0, c = 0.0;
    for (size_t i = 0; i < n; i++) {
        const double q = (double)x[i] * (double)x[i], t = s + q, z = t - s;
        c += (s - (t - z)) + (q - z);
        s = t;
    }
    return s + c;
}

static void closed_forms(void) {
    /* (2^26)^2 twice = 2^53, then k ones: in order a float64 sum stays 2^53; exactly it is
     * 2^53 + k, which rounds to 2^53 (k = 1: tie, even), 2^53 + 2, 2^53 + 4 (k = 3: tie, even) */
    const double p53 = 9007199254740992.0;
    for (int k = 1; k <= 3; k++) {
        float x[5] = {67108864.0f, 67108864.0f, 1.0f, 1.0f, 1.0f};
        const double want = k == 2 ? p53 + 2 : k == 1 ? p53 : p53 + 4;
        CHECK(xsum_of(x, (size_t)(2 + k), ZERO_DTYPE_FP32, 1) == want, "2^53 + %d -> %.17g", k,
              xsum_of(x, (size_t)(2 + k), ZERO_DTYPE_FP32, 1));
    }
    /* 1 + 2^-53 is a tie, to even: 1; a subnormal's square 2^-298 below it breaks the tie up */
    float t[4] = {1.0f, 0x1p-27f, 0x1p-27f, 0x1p-149f};
    CHECK(xsum_of(t, 3, ZERO_DTYPE_FP32, 1) == 1.0, "1 + 2^-53 -> 1");
    CHECK(xsum_of(t, 4, ZERO_DTYPE_FP32, 1) == 1.0 + 0x1p-52, "1 + 2^-53 + 2^-298 -> 1 + 2^-52");
    CHECK(xsum_of(t + 3, 1, ZERO_DTYPE_FP32, 1) == 0x1p-298, "the smallest square");
    /* integers: k^2 summed over k = 1 .. 1000 is 1000 1001 2001 / 6 */
    float ints[1000];
    for (int k = 1; k <= 1000; k++) ints[k - 1] = (float)(k % 2 ? k : -k);
    CHECK(xsum_of(ints, 1000, ZERO_DTYPE_FP32, 1) == 1000.0 * 1001.0 * 2001.0 / 6.0, "sum k^2");
    /* the largest squares: 3 FLT_MAX^2 rounded once */
    float big[3] = {FLT_MAX, -FLT_MAX, FLT_MAX};
    const double fm = (double)FLT_MAX;
    CHECK(xsum_of(big, 3, ZERO_DTYPE_FP32, 1) == 3.0 * (fm * fm), "3 FLT_MAX^2");
    float z[2] = {0.0f, -0.0f};
    CHECK(xsum_of(z, 2, ZERO_DTYPE_FP32, 1) == 0.0 && xsum_of(NULL, 0, ZERO_DTYPE_FP32, 1) == 0.0,
          "zeros");
    float bad[3] = {1.0f, INFINITY, 2.0f};
    CHECK(xsum_of(bad, 3, ZERO_DTYPE_FP32, 1) == INFINITY, "inf -> +inf");
    bad[1] = -INFINITY;
    CHECK(xsum_of(bad, 3, ZERO_DTYPE_FP32, 1) == INFINITY, "-inf -> +inf");
    bad[0] = NAN;
    CHECK(isnan(xsum_of(bad, 3, ZERO_DTYPE_FP32, 1)), "NaN and inf -> NaN");
}

static void random_values(void) {
    enum { N = 300001 }; /* several blocks of the kernel and a ragged end */
    float *x = xmalloc(N * sizeof *x), *y = xmalloc(N * sizeof *y);
    for (size_t i = 0; i < N; i++) /* mantissa in [-1, 1), exponent -149 .. 100 */
        x[i] = ldexpf(frand(), (int)(rng_state % 250) - 149);
    const double v = xsum_of(x, N, ZERO_DTYPE_FP32, 1), ref = twosum_ref(x, N);
    CHECK(fabs(v - ref) <= nextafter(ref, INFINITY) - ref, "%.17g against %.17g", v, ref);
    for (int threads = 2; threads <= 4; threads++)
        CHECK(xsum_of(x, N, ZERO_DTYPE_FP32, threads) == v, "threads %d", threads);
    /* reversed, then every 7th element first: a permutation */
    size_t k = 0;
    for (size_t i = 0; i < N; i += 7) y[k++] = x[N - 1 - i];
    for (size_t i = 0; i < N; i++)
        if (i % 7) y[k++] = x[N - 1 - i];
    CHECK(k == N && xsum_of(y, N, ZERO_DTYPE_FP32, 2) == v, "a permutation");
    /* cut into 5 uneven parts summed apart, merged last to first */
    const size_t cut[6] = {0, 1, 70000, 70001, 250000, N};
    zero__xsum_t part[5], all;
    memset(part, 0, sizeof part);
    memset(&all, 0, sizeof all);
    for (int p = 0; p < 5; p++)
        zero__xsum_add_squares(&part[p], x + cut[p], cut[p + 1] - cut[p], ZERO_DTYPE_FP32, 1);
    for (int p = 4; p >= 0; p--) zero__xsum_merge(&all, &part[p]);
    CHECK(zero__xsum_value(&all) == v, "parts merged");
    free(x);
    free(y);
}

static void half_types(void) {
    enum { N = 70000 };
    uint16_t *h = xmalloc(N * sizeof *h);
    float *w = xmalloc(N * sizeof *w);
    for (int dt = 0; dt < 2; dt++) {
        const zero_dtype_t t = dt ? ZERO_DTYPE_FP16 : ZERO_DTYPE_BF16;
        for (size_t i = 0; i < N; i++) {
            const float f = ldexpf(frand(), (int)(rng_state % 30) - 20);
            h[i] = t == ZERO_DTYPE_BF16 ? zero_fp32_to_bf16(f) : zero_fp32_to_fp16(f);
            w[i] = t == ZERO_DTYPE_BF16 ? zero_bf16_to_fp32(h[i]) : zero_fp16_to_fp32(h[i]);
        }
        CHECK(xsum_of(h, N, t, 2) == xsum_of(w, N, ZERO_DTYPE_FP32, 1), "%s: the widened sum",
              zero_dtype_name(t));
    }
    free(h);
    free(w);
}

int main(void) {
    closed_forms();
    random_values();
    half_types();
    return check_report();
}
