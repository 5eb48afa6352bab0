/* test_kernels_isa.c — the kernels built once per instruction-set level (src/kernels/isa.h).
 *
 * For every level this CPU can run (baseline x86-64, AVX2 + FMA, AVX-512), each GELU span is
 * checked against
 *   - a scalar re-derivation of the same formula written here (with fmaf where the level has
 *     FMA, with separate multiply and add where it has not): bitwise, since each element is a
 *     fixed sequence of IEEE operations whatever the vector width;
 *   - the double-precision tanh formula (zero__ref_gelu_*): within the accuracy gelu.c states;
 *   - the baseline table: within twice the stated error (fused and unfused roundings differ);
 * and the AVX2 and AVX-512 tables must agree bitwise. The softmax rows: exp(x - lse) * d
 * bitwise against kmath.h's kexp written out elementwise (no FMA in it, so every level gives the
 * same bits), the log-sum-exp against a double-precision sum. Then the start-up choice: the best
 * level the CPU supports, or the one ZERO_ISA caps it to (this binary also runs with
 * ZERO_ISA=baseline).
 */
#include "check.h"
#include "kernels/isa.h"
#include "kernels/kernels.h"
#include "kernels/kmath.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint32_t bits(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

/* a b + c, fused or as two roundings (-std=c11: the compiler does not contract a * b + c) */
static float mad(int fused, float a, float b, float c) { return fused ? fmaf(a, b, c) : a * b + c; }

/* kexp_nonpos of src/kernels/kmath.h, written out again */
static float exp_nonpos(int fused, float x) {
    const float lo = -87.3365478515625f;
    float xc = x > lo ? x : lo;
    xc = xc < 0.0f ? xc : 0.0f;
    float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = mad(fused, n, -0.693359375f, xc);
    r = mad(fused, n, 2.12194440e-4f, r);
    float p = 1.9875691500e-4f;
    p = mad(fused, p, r, 1.3981999507e-3f);
    p = mad(fused, p, r, 8.3334519073e-3f);
    p = mad(fused, p, r, 4.1665795894e-2f);
    p = mad(fused, p, r, 1.6666665459e-1f);
    p = mad(fused, p, r, 5.0000001201e-1f);
    p = mad(fused, p * r, r, r) + 1.0f;
    int32_t b = ((int32_t)n + 127) << 23;
    float sc;
    memcpy(&sc, &b, sizeof sc);
    float y = x < lo ? 0.0f : p * sc;
    return x != x ? x : y;
}

#define S 0.7978845608028654f
#define C 0.044715f

static float gelu_e(int fused, float x) {
    return exp_nonpos(fused, fabsf(x) * mad(fused, x * x, -2.0f * S * C, -2.0f * S));
}

static float gelu_fwd(int fused, float x) {
    float e = gelu_e(fused, x);
    return (x < 0.0f ? x * e : x) / (1.0f + e);
}

static float gelu_bwd(int fused, float x, float dout, float dinp) {
    float e = gelu_e(fused, x);
    float r = 1.0f / (1.0f + e);
    float er = e * r;
    float sg = x < 0.0f ? er : r;
    float du2 = mad(fused, x * x, 6.0f * S * C, 2.0f * S);
    float g = mad(fused, (er * r) * du2, x, sg);
    return mad(fused, g, dout, dinp);
}

static float urand(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((*s >> 40) * (1.0 / 16777216.0));
}

/* ulp distance of two finite floats of the same sign (or both zero) */
static uint32_t ulps(float a, float b) {
    if (a == b) return 0;
    if ((a < 0) != (b < 0)) return UINT32_MAX;
    uint32_t x = bits(fabsf(a)), y = bits(fabsf(b));
    return x > y ? x - y : y - x;
}

int main(void) {
    /* inputs: a sweep of [-12, 12], random ones, and the special values */
    enum { N = 40000 };
    float *x = malloc(N * 4), *g = malloc(N * 4), *d0 = malloc(N * 4);
    float *out[ZERO__ISA_COUNT], *dx[ZERO__ISA_COUNT], *ref = malloc(N * 4), *dref = malloc(N * 4);
    uint64_t seed = 7;
    for (size_t i = 0; i < N; i++) {
        x[i] = i < N / 2 ? -12.0f + 24.0f * (float)i / (N / 2) : 8.0f * (urand(&seed) - 0.5f);
        g[i] = urand(&seed) - 0.5f;
        d0[i] = urand(&seed) - 0.5f;
    }
    const float special[] = {0.0f, -0.0f, NAN, INFINITY, -INFINITY, 1e10f, -1e10f, 1e-30f, -88.0f};
    memcpy(x, special, sizeof special);
    zero__ref_gelu_forward(ref, x, N);
    memcpy(dref, d0, N * 4);
    zero__ref_gelu_backward(dref, x, g, N);

    int levels = 0;
    for (zero__isa_t isa = 0; isa < ZERO__ISA_COUNT; isa++) {
        out[isa] = dx[isa] = NULL;
        if (!zero__isa_supported(isa)) {
            printf("%s: not supported by this CPU or build, skipped\n", zero__isa_name(isa));
            continue;
        }
        levels++;
        const zero__isa_kernels_t *k = zero__isa_kernels(isa);
        int fused = isa != ZERO__ISA_BASELINE;
        out[isa] = malloc(N * 4), dx[isa] = malloc(N * 4);
        memcpy(dx[isa], d0, N * 4);
        /* odd offset and length: the vector loops' remainders and unaligned starts */
        k->gelu_forward(out[isa], x, NULL, 5);
        k->gelu_forward(out[isa] + 5, x + 5, NULL, N - 5);
        k->gelu_backward(dx[isa], x, g, 3);
        k->gelu_backward(dx[isa] + 3, x + 3, g + 3, N - 3);
        size_t bad_f = 0, bad_b = 0, far_f = 0, far_b = 0;
        for (size_t i = 0; i < N; i++) {
            float ef = gelu_fwd(fused, x[i]), eb = gelu_bwd(fused, x[i], g[i], d0[i]);
            if (bits(out[isa][i]) != bits(ef) && bad_f++ < 3)
                fprintf(stderr, "%s gelu(%a) = %a, the formula gives %a\n", zero__isa_name(isa),
                        x[i], out[isa][i], ef);
            if (bits(dx[isa][i]) != bits(eb) && bad_b++ < 3)
                fprintf(stderr, "%s gelu'(%a) = %a, the formula gives %a\n", zero__isa_name(isa),
                        x[i], dx[isa][i], eb);
            if (!isfinite(x[i])) continue;
            if (fabsf(out[isa][i] - ref[i]) > 1e-7f + 2e-6f * fabsf(ref[i])) far_f++;
            if (fabsf(dx[isa][i] - dref[i]) > 5e-7f + 2e-6f * fabsf(dref[i])) far_b++;
        }
        CHECK(bad_f == 0, "%s gelu forward: %zu of %d differ from the formula", zero__isa_name(isa),
              bad_f, N);
        CHECK(bad_b == 0, "%s gelu backward: %zu of %d differ from the formula",
              zero__isa_name(isa), bad_b, N);
        CHECK(far_f == 0, "%s gelu forward: %zu outside the tolerance of the double reference",
              zero__isa_name(isa), far_f);
        CHECK(far_b == 0, "%s gelu backward: %zu outside the tolerance of the double reference",
              zero__isa_name(isa), far_b);
        CHECK(isnan(out[isa][2]) && isnan(dx[isa][2]), "%s: NaN in, NaN out", zero__isa_name(isa));
        CHECK(out[isa][3] == INFINITY && out[isa][5] == 1e10f && out[isa][6] == 0.0f,
              "%s: saturation", zero__isa_name(isa));
    }
    CHECK(levels >= 1, "the baseline level is always there");

    /* levels against each other */
    if (out[ZERO__ISA_AVX2] && out[ZERO__ISA_AVX512])
        CHECK(memcmp(out[ZERO__ISA_AVX2], out[ZERO__ISA_AVX512], N * 4) == 0 &&
                  memcmp(dx[ZERO__ISA_AVX2], dx[ZERO__ISA_AVX512], N * 4) == 0,
              "avx2 and avx512 agree bitwise");
    for (zero__isa_t isa = ZERO__ISA_AVX2; isa < ZERO__ISA_COUNT; isa++) {
        if (!out[isa]) continue;
        /* each is within 1.1e-6 relative of the exact value there (gelu.c), so within twice
         * that of each other; the ulp count is printed for the record */
        double worst = 0.0;
        uint32_t worst_ulp = 0;
        for (size_t i = 0; i < N; i++) {
            if (!isfinite(x[i]) || fabsf(ref[i]) < 1e-3f) continue;
            double rel = fabs((double)out[isa][i] - out[ZERO__ISA_BASELINE][i]) / fabs(ref[i]);
            worst = rel > worst ? rel : worst;
            uint32_t u = ulps(out[isa][i], out[ZERO__ISA_BASELINE][i]);
            worst_ulp = u > worst_ulp ? u : worst_ulp;
        }
        printf("%s vs baseline: at most %.2g relative (%u ulp) where |gelu| >= 1e-3\n",
               zero__isa_name(isa), worst, worst_ulp);
        CHECK(worst <= 2.2e-6,
              "%s vs baseline: %.3g relative where |gelu| >= 1e-3 (at most 2.2e-6)",
              zero__isa_name(isa), worst);
    }

    /* softmax + cross-entropy rows: a vocabulary-sized row with a wide range, odd lengths */
    {
        enum { V = 50257 };
        float *row = malloc(V * 4), *o = malloc(V * 4), *e = malloc(V * 4);
        for (size_t j = 0; j < V; j++) row[j] = 30.0f * (urand(&seed) - 0.5f);
        double mx = -INFINITY, sum = 0.0;
        for (size_t j = 0; j < V; j++) mx = row[j] > mx ? row[j] : mx;
        for (size_t j = 0; j < V; j++) sum += exp(row[j] - mx);
        const double lse_ref = mx + log(sum);
        for (zero__isa_t isa = 0; isa < ZERO__ISA_COUNT; isa++) {
            if (!zero__isa_supported(isa)) continue;
            const zero__isa_kernels_t *k = zero__isa_kernels(isa);
            const char *nm = zero__isa_name(isa);
            for (size_t n = V - 3; n <= V; n += 3) {
                double want = n == V ? lse_ref : 0.0;
                if (n != V) {
                    double m2 = -INFINITY, s2 = 0.0;
                    for (size_t j = 0; j < n; j++) m2 = row[j] > m2 ? row[j] : m2;
                    for (size_t j = 0; j < n; j++) s2 += exp(row[j] - m2);
                    want = m2 + log(s2);
                }
                float l = k->row_lse(row, n);
                CHECK(fabs(l - want) <= 4e-6 * fabs(want), "%s row_lse(n=%zu) = %.9g, double %.9g",
                      nm, n, (double)l, want);
                k->row_exp_scale(o, row, l, 0.75f, n);
                size_t bad = 0;
                for (size_t j = 0; j < n; j++) bad += bits(o[j]) != bits(kexp(row[j] - l) * 0.75f);
                CHECK(bad == 0, "%s row_exp_scale(n=%zu): %zu of %zu differ from kexp", nm, n, bad,
                      n);
            }
            /* in place, as the backward runs over the logits */
            memcpy(e, row, V * 4);
            k->row_exp_scale(e, e, (float)lse_ref, 1.0f, V);
            k->row_exp_scale(o, row, (float)lse_ref, 1.0f, V);
            CHECK(memcmp(e, o, V * 4) == 0, "%s row_exp_scale in place", nm);
            double total = 0.0;
            for (size_t j = 0; j < V; j++) total += o[j];
            CHECK(fabs(total - 1.0) < 1e-4, "%s: softmax sums to %.7f", nm, total);
        }
        free(row), free(o), free(e);
    }

    /* the start-up choice */
    zero__isa_t best = ZERO__ISA_BASELINE;
    for (zero__isa_t isa = 0; isa < ZERO__ISA_COUNT; isa++)
        if (zero__isa_supported(isa)) best = isa;
    const char *env = getenv("ZERO_ISA");
    zero__isa_t want = best;
    for (zero__isa_t isa = 0; env && isa < ZERO__ISA_COUNT; isa++)
        if (strcmp(env, zero__isa_name(isa)) == 0 && isa < best) want = isa;
    CHECK(zero__isa_selected() == want, "selected %s, expected %s (ZERO_ISA=%s)",
          zero__isa_name(zero__isa_selected()), zero__isa_name(want), env ? env : "");
    CHECK(zero__isa_current() == zero__isa_kernels(want), "the current table is the selected one");
    /* and the public kernel goes through it: its output is the selected level's, bitwise */
    float *o = malloc(N * 4);
    zero__gelu_forward(o, x, N, 2);
    CHECK(memcmp(o, out[want], N * 4) == 0, "zero__gelu_forward uses the %s table",
          zero__isa_name(want));
    printf("levels run: %d, selected: %s\n", levels, zero__isa_name(zero__isa_selected()));

    free(o), free(x), free(g), free(d0), free(ref), free(dref);
    for (int i = 0; i < ZERO__ISA_COUNT; i++) free(out[i]), free(dx[i]);
    return check_report();
}
