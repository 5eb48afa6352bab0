/* test_moe.c — the Mixture-of-Experts routing kernels (src/kernels/moe.c): router with capacity,
 * aux and z losses, dispatch, combine, and their backward.
 *
 * Oracles: (1) a naive reference written here in double from the definitions in moe.h, by other
 * means than the kernel (an expert's rank among a token's probabilities is a count of who beats
 * it; a choice's slot is a count of the earlier (choice, token) pairs on the same expert), compared
 * exactly on indices, slots, counts and dropped, closely on probabilities, gates and losses;
 * (2) central finite differences of every backward: the router's d logits of
 * sum w*gates + a*aux + b*z (on the double reference, expert choices held fixed as the kernel
 * does), the dispatch's d x and the combine's d y and d gates (on the kernels themselves: they are
 * linear in each argument); (3) hand-worked cases: ties go to the lowest index, capacity 1,
 * every token to one expert, no dropping, the capacity formula; (4) bad arguments (top_k > E,
 * E 0, capacity 0, top_k 3) return ZERO_ERR_INVALID_ARG with a message naming the argument.
 * Shapes: T in {1, 7, 32}, E in {1, 2, 4, 8}, k in {1, 2}, dim 8, capacity factors that drop and
 * that do not.
 */
#include "check.h"
#include "core/core_internal.h"
#include "kernels/moe.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KRAND_SEED 0x5eed0e0f17ull
#include "kernels/krand.h"

/* ---------------------------------------------------------------- naive double reference */

typedef struct {
    double *probs; /* (T, E) */
    int *idx;      /* (T, k) */
    int *slot;     /* (T, k) */
    double *gates; /* (T, k) */
    int *count;    /* (E) */
    size_t dropped;
    double aux, z;
} ref_t;

static void ref_alloc(ref_t *r, size_t T, size_t E, int k) {
    r->probs = xmalloc(T * E * sizeof(double));
    r->idx = xmalloc(T * (size_t)k * sizeof(int));
    r->slot = xmalloc(T * (size_t)k * sizeof(int));
    r->gates = xmalloc(T * (size_t)k * sizeof(double));
    r->count = xmalloc(E * sizeof(int));
}

static void ref_free(ref_t *r) {
    free(r->probs);
    free(r->idx);
    free(r->slot);
    free(r->gates);
    free(r->count);
}

/* The losses and gates for given logits with the expert choices `fixed` (T, k) if not NULL
 * (then f_e comes from fixed's first column), else chosen here. Returns the scalar
 * sum w*gates + a*aux + b*z (w may be NULL). */
static double ref_router(ref_t *r, const double *logits, const int *fixed, const double *w,
                         double a, double b, size_t T, size_t E, int k, size_t C) {
    double zsum = 0.0;
    for (size_t t = 0; t < T; t++) {
        const double *x = logits + t * E;
        double sum = 0.0;
        for (size_t e = 0; e < E; e++) sum += exp(x[e]);
        for (size_t e = 0; e < E; e++) r->probs[t * E + e] = exp(x[e]) / sum;
        zsum += log(sum) * log(sum);
        for (size_t j = 0; j < E; j++) {
            /* rank of j: how many experts beat it (higher prob, or equal and lower index) */
            size_t rank = 0;
            for (size_t i = 0; i < E; i++) {
                double pi = r->probs[t * E + i], pj = r->probs[t * E + j];
                if (pi > pj || (pi == pj && i < j)) rank++;
            }
            if (rank < (size_t)k) r->idx[t * k + rank] = (int)j;
        }
        if (fixed)
            for (int c = 0; c < k; c++) r->idx[t * k + c] = fixed[t * k + c];
        double s = 0.0;
        for (int c = 0; c < k; c++) s += r->probs[t * E + r->idx[t * k + c]];
        for (int c = 0; c < k; c++)
            r->gates[t * k + c] =
                k == 1 ? r->probs[t * E + r->idx[t]] : r->probs[t * E + r->idx[t * k + c]] / s;
    }
    /* slot of (t, c): the earlier pairs (c' < c, or c' == c and t' < t) on the same expert */
    r->dropped = 0;
    for (size_t e = 0; e < E; e++) r->count[e] = 0;
    for (int c = 0; c < k; c++)
        for (size_t t = 0; t < T; t++) {
            int e = r->idx[t * k + c];
            size_t before = 0;
            for (int c2 = 0; c2 <= c; c2++)
                for (size_t t2 = 0; t2 < (c2 < c ? T : t); t2++) before += r->idx[t2 * k + c2] == e;
            if (before < C) {
                r->slot[t * k + c] = (int)before;
                r->count[e]++;
            } else {
                r->slot[t * k + c] = -1;
                r->dropped++;
            }
        }
    r->aux = 0.0;
    for (size_t e = 0; e < E; e++) {
        double f = 0.0, P = 0.0;
        for (size_t t = 0; t < T; t++) {
            f += r->idx[t * k] == (int)e ? 1.0 / (double)T : 0.0;
            P += r->probs[t * E + e] / (double)T;
        }
        r->aux += (double)E * f * P;
    }
    r->z = T ? zsum / (double)T : 0.0;
    double L = a * r->aux + b * r->z;
    if (w)
        for (size_t i = 0; i < T * (size_t)k; i++) L += w[i] * r->gates[i];
    return L;
}

static int close_to(double got, double want, double rtol, double atol) {
    return fabs(got - want) <= atol + rtol * fabs(want);
}

/* ---------------------------------------------------------------- kernel outputs */

typedef struct {
    float *probs, *gates;
    int32_t *idx, *slot, *count;
    size_t dropped;
    float aux, z;
} out_t;

static void out_alloc(out_t *o, size_t T, size_t E, int k) {
    o->probs = xmalloc(T * E * sizeof(float));
    o->gates = xmalloc(T * (size_t)k * sizeof(float));
    o->idx = xmalloc(T * (size_t)k * sizeof(int32_t));
    o->slot = xmalloc(T * (size_t)k * sizeof(int32_t));
    o->count = xmalloc(E * sizeof(int32_t));
}

static void out_free(out_t *o) {
    free(o->probs);
    free(o->gates);
    free(o->idx);
    free(o->slot);
    free(o->count);
}

static zero_status_t run_router(out_t *o, const float *logits, size_t T, size_t E, int k,
                                size_t C) {
    return zero__moe_router_forward(o->probs, o->idx, o->slot, o->gates, o->count, &o->dropped,
                                    &o->aux, &o->z, logits, T, E, k, C);
}

/* The kernel against the reference on the same logits: exact on the discrete outputs. */
static void compare_forward(const out_t *o, const ref_t *r, size_t T, size_t E, int k,
                            const char *what) {
    int idx_ok = 1, slot_ok = 1, count_ok = 1, p_ok = 1, g_ok = 1;
    for (size_t i = 0; i < T * E; i++) p_ok &= close_to(o->probs[i], r->probs[i], 1e-5, 1e-7);
    for (size_t i = 0; i < T * (size_t)k; i++) {
        idx_ok &= o->idx[i] == r->idx[i];
        slot_ok &= o->slot[i] == r->slot[i];
        g_ok &= close_to(o->gates[i], r->gates[i], 1e-5, 1e-7);
    }
    for (size_t e = 0; e < E; e++) count_ok &= o->count[e] == r->count[e];
    CHECK(p_ok, "%s: probs", what);
    CHECK(idx_ok, "%s: expert indices", what);
    CHECK(slot_ok, "%s: slots", what);
    CHECK(g_ok, "%s: gates", what);
    CHECK(count_ok, "%s: expert counts", what);
    CHECK(o->dropped == r->dropped, "%s: dropped %zu, want %zu", what, o->dropped, r->dropped);
    CHECK(close_to(o->aux, r->aux, 1e-5, 1e-6), "%s: aux %.8g, want %.8g", what, o->aux, r->aux);
    CHECK(close_to(o->z, r->z, 1e-5, 1e-6), "%s: z %.8g, want %.8g", what, o->z, r->z);
}

/* ---------------------------------------------------------------- random cases */

static void case_random(size_t T, size_t E, int k, double cf, int drop) {
    const size_t dim = 8;
    char what[128];
    snprintf(what, sizeof what, "T=%zu E=%zu k=%d cf=%g drop=%d", T, E, k, cf, drop);
    size_t C = 0;
    CHECK(zero__moe_capacity(&C, T, E, k, cf, 1, drop) == ZERO_OK, "%s: capacity", what);
    if (!drop) CHECK(C == T, "%s: no-drop capacity %zu, want %zu", what, C, T);

    float *logits = xmalloc(T * E * sizeof(float));
    double *dlog = xmalloc(T * E * sizeof(double));
    for (size_t i = 0; i < T * E; i++) {
        logits[i] = 2.0f * frand();
        dlog[i] = logits[i];
    }
    out_t o;
    ref_t r;
    out_alloc(&o, T, E, k);
    ref_alloc(&r, T, E, k);
    CHECK(run_router(&o, logits, T, E, k, C) == ZERO_OK, "%s: router", what);
    ref_router(&r, dlog, NULL, NULL, 0, 0, T, E, k, C);
    compare_forward(&o, &r, T, E, k, what);
    size_t kept = 0;
    for (size_t e = 0; e < E; e++) {
        CHECK((size_t)o.count[e] <= C, "%s: count %d > capacity %zu", what, o.count[e], C);
        kept += (size_t)o.count[e];
    }
    CHECK(kept + o.dropped == T * (size_t)k, "%s: kept + dropped", what);
    if (!drop) CHECK(o.dropped == 0, "%s: dropped %zu without dropping", what, o.dropped);

    /* router backward against central differences of the reference, choices held fixed */
    const double a = 0.7, b = 0.3;
    size_t TK = T * (size_t)k;
    double *w = xmalloc(TK * sizeof(double));
    float *wf = xmalloc(TK * sizeof(float));
    for (size_t i = 0; i < TK; i++) wf[i] = frand(), w[i] = wf[i];
    float *dx = xmalloc(T * E * sizeof(float));
    for (size_t i = 0; i < T * E; i++) dx[i] = 0.5f; /* accumulates onto what is there */
    zero__moe_router_backward(dx, wf, logits, o.probs, o.idx, T, E, k, (float)a, (float)b);
    int *fixed = xmalloc(TK * sizeof(int));
    for (size_t i = 0; i < TK; i++) fixed[i] = o.idx[i];
    int fd_ok = 1;
    double worst = 0.0;
    for (size_t i = 0; i < T * E; i++) {
        const double h = 1e-5;
        double keep = dlog[i];
        dlog[i] = keep + h;
        double lp = ref_router(&r, dlog, fixed, w, a, b, T, E, k, C);
        dlog[i] = keep - h;
        double lm = ref_router(&r, dlog, fixed, w, a, b, T, E, k, C);
        dlog[i] = keep;
        double fd = (lp - lm) / (2 * h), got = (double)dx[i] - 0.5;
        if (!close_to(got, fd, 1e-3, 2e-5)) fd_ok = 0;
        if (fabs(got - fd) > worst) worst = fabs(got - fd);
    }
    CHECK(fd_ok, "%s: router backward vs finite differences (worst |diff| %.3g)", what, worst);

    /* each loss term alone is a separate oracle of its own scaling */
    for (int term = 0; term < 3; term++) {
        double ta = term == 1 ? 1.0 : 0.0, tb = term == 2 ? 1.0 : 0.0;
        for (size_t i = 0; i < T * E; i++) dx[i] = 0.0f;
        zero__moe_router_backward(dx, term == 0 ? wf : NULL, logits, o.probs, o.idx, T, E, k,
                                  (float)ta, (float)tb);
        int ok = 1;
        for (size_t i = 0; i < T * E; i++) {
            const double h = 1e-5;
            double keep = dlog[i];
            dlog[i] = keep + h;
            double lp = ref_router(&r, dlog, fixed, term == 0 ? w : NULL, ta, tb, T, E, k, C);
            dlog[i] = keep - h;
            double lm = ref_router(&r, dlog, fixed, term == 0 ? w : NULL, ta, tb, T, E, k, C);
            dlog[i] = keep;
            if (!close_to(dx[i], (lp - lm) / (2 * h), 1e-3, 2e-5)) ok = 0;
        }
        CHECK(ok, "%s: router backward of term %d alone", what, term);
    }

    ref_router(&r, dlog, NULL, NULL, 0, 0, T, E, k, C); /* restore r after the differences */

    /* dispatch: forward against plain loops, backward by differences (linear: h = 1 is exact) */
    float *x = xmalloc(T * dim * sizeof(float));
    for (size_t i = 0; i < T * dim; i++) x[i] = frand();
    size_t B = E * C * dim;
    float *buf = xmalloc(B * sizeof(float));
    for (size_t i = 0; i < B; i++) buf[i] = 99.0f; /* overwritten, empty slots zeroed */
    zero__moe_dispatch_forward(buf, x, o.idx, o.slot, T, E, k, C, dim);
    int disp_ok = 1;
    for (size_t e = 0; e < E; e++)
        for (size_t s = 0; s < C; s++) {
            long owner = -1;
            for (size_t i = 0; i < TK; i++)
                if (r.idx[i] == (int)e && r.slot[i] == (int)s) owner = (long)(i / (size_t)k);
            for (size_t j = 0; j < dim; j++) {
                float want = owner < 0 ? 0.0f : x[(size_t)owner * dim + j];
                disp_ok &= buf[(e * C + s) * dim + j] == want;
            }
        }
    CHECK(disp_ok, "%s: dispatch forward", what);
    float *wb = xmalloc(B * sizeof(float));
    for (size_t i = 0; i < B; i++) wb[i] = frand();
    float *gx = xmalloc(T * dim * sizeof(float));
    memset(gx, 0, T * dim * sizeof(float));
    zero__moe_dispatch_backward(gx, wb, o.idx, o.slot, T, E, k, C, dim);
    int dback_ok = 1;
    for (size_t i = 0; i < T * dim; i++) {
        double L[2];
        for (int sgn = 0; sgn < 2; sgn++) {
            float keep = x[i];
            x[i] = keep + (sgn ? -1.0f : 1.0f);
            zero__moe_dispatch_forward(buf, x, o.idx, o.slot, T, E, k, C, dim);
            x[i] = keep;
            L[sgn] = 0.0;
            for (size_t j = 0; j < B; j++) L[sgn] += (double)wb[j] * buf[j];
        }
        dback_ok &= close_to(gx[i], (L[0] - L[1]) / 2.0, 1e-5, 1e-5);
    }
    CHECK(dback_ok, "%s: dispatch backward vs differences", what);

    /* combine: forward against plain loops over the reference, backward by differences */
    float *y = xmalloc(B * sizeof(float));
    for (size_t i = 0; i < B; i++) y[i] = frand();
    float *out = xmalloc(T * dim * sizeof(float));
    zero__moe_combine_forward(out, y, o.gates, o.idx, o.slot, T, E, k, C, dim);
    int comb_ok = 1;
    for (size_t t = 0; t < T; t++)
        for (size_t j = 0; j < dim; j++) {
            double want = 0.0;
            for (int c = 0; c < k; c++) {
                int s = r.slot[t * k + c];
                if (s >= 0)
                    want += r.gates[t * k + c] * y[((size_t)r.idx[t * k + c] * C + s) * dim + j];
            }
            comb_ok &= close_to(out[t * dim + j], want, 1e-5, 1e-6);
        }
    CHECK(comb_ok, "%s: combine forward", what);
    float *wo = xmalloc(T * dim * sizeof(float));
    for (size_t i = 0; i < T * dim; i++) wo[i] = frand();
    float *gy = xmalloc(B * sizeof(float));
    float *gg = xmalloc(TK * sizeof(float));
    memset(gy, 0, B * sizeof(float));
    memset(gg, 0, TK * sizeof(float));
    zero__moe_combine_backward(gy, gg, wo, y, o.gates, o.idx, o.slot, T, E, k, C, dim);
    float *gates = o.gates;
    int cy_ok = 1, cg_ok = 1;
    for (int which = 0; which < 2; which++) {
        float *v = which == 0 ? y : gates;
        size_t n = which == 0 ? B : TK;
        for (size_t i = 0; i < n; i++) {
            double L[2];
            for (int sgn = 0; sgn < 2; sgn++) {
                float keep = v[i];
                v[i] = keep + (sgn ? -1.0f : 1.0f);
                zero__moe_combine_forward(out, y, gates, o.idx, o.slot, T, E, k, C, dim);
                v[i] = keep;
                L[sgn] = 0.0;
                for (size_t j = 0; j < T * dim; j++) L[sgn] += (double)wo[j] * out[j];
            }
            double fd = (L[0] - L[1]) / 2.0;
            if (which == 0)
                cy_ok &= close_to(gy[i], fd, 1e-4, 1e-5);
            else
                cg_ok &= close_to(gg[i], fd, 1e-4, 1e-5);
        }
    }
    CHECK(cy_ok, "%s: combine backward d y vs differences", what);
    CHECK(cg_ok, "%s: combine backward d gates vs differences", what);

    free(logits), free(dlog), free(w), free(wf), free(dx), free(fixed), free(x), free(buf);
    free(wb), free(gx), free(y), free(out), free(wo), free(gy), free(gg);
    out_free(&o);
    ref_free(&r);
}

/* ---------------------------------------------------------------- hand-worked cases */

static void case_ties(void) {
    /* token 0: all equal -> experts 0, 1; token 1: 1 and 2 tie at the top -> 1, 2;
     * token 2: 3 on top, 0 and 2 tie for second -> 3, 0 */
    const float logits[3 * 4] = {0, 0, 0, 0, 1, 3, 3, 0, 1, -1, 1, 2};
    const int32_t want[3 * 2] = {0, 1, 1, 2, 3, 0};
    out_t o;
    out_alloc(&o, 3, 4, 2);
    CHECK(run_router(&o, logits, 3, 4, 2, 8) == ZERO_OK, "ties: router");
    CHECK(memcmp(o.idx, want, sizeof want) == 0, "ties: indices %d %d, %d %d, %d %d", o.idx[0],
          o.idx[1], o.idx[2], o.idx[3], o.idx[4], o.idx[5]);
    CHECK(o.gates[0] == 0.5f && o.gates[1] == 0.5f, "ties: equal gates %g %g", o.gates[0],
          o.gates[1]);
    out_free(&o);
    out_alloc(&o, 3, 4, 1);
    CHECK(run_router(&o, logits, 3, 4, 1, 8) == ZERO_OK, "ties k=1: router");
    CHECK(o.idx[0] == 0 && o.idx[1] == 1 && o.idx[2] == 3, "ties k=1: %d %d %d", o.idx[0], o.idx[1],
          o.idx[2]);
    CHECK(close_to(o.gates[0], 0.25, 1e-6, 0), "ties k=1: raw probability gate %g", o.gates[0]);
    out_free(&o);
}

static void case_one_expert_capacity_1(void) {
    /* every token prefers expert 2, then expert 3: with capacity 1 only token 0 keeps either */
    enum { T = 5, E = 4 };
    float logits[T * E];
    for (int t = 0; t < T; t++) {
        logits[t * E + 0] = 0.0f, logits[t * E + 1] = 0.1f * t;
        logits[t * E + 2] = 5.0f, logits[t * E + 3] = 4.0f;
    }
    out_t o;
    out_alloc(&o, T, E, 2);
    CHECK(run_router(&o, logits, T, E, 2, 1) == ZERO_OK, "capacity 1: router");
    int ok = 1;
    for (int t = 0; t < T; t++) {
        ok &= o.idx[t * 2] == 2 && o.idx[t * 2 + 1] == 3;
        ok &= o.slot[t * 2] == (t == 0 ? 0 : -1) && o.slot[t * 2 + 1] == (t == 0 ? 0 : -1);
    }
    CHECK(ok, "capacity 1: only token 0 keeps its choices");
    CHECK(o.dropped == 2 * (T - 1), "capacity 1: dropped %zu, want %d", o.dropped, 2 * (T - 1));
    CHECK(o.count[0] == 0 && o.count[1] == 0 && o.count[2] == 1 && o.count[3] == 1,
          "capacity 1: counts");
    /* aux: f = (0, 0, 1, 0), so aux = E * P_2 */
    double P2 = 0.0;
    for (int t = 0; t < T; t++) P2 += o.probs[t * E + 2] / T;
    CHECK(close_to(o.aux, E * P2, 1e-6, 0), "capacity 1: aux %g, want %g", o.aux, E * P2);
    /* a dropped token's row of the combine is zero, whatever its gates */
    float y[E * 1 * 2] = {1, 2, 3, 4, 5, 6, 7, 8}, out[T * 2];
    zero__moe_combine_forward(out, y, o.gates, o.idx, o.slot, T, E, 2, 1, 2);
    CHECK(out[2] == 0.0f && out[3] == 0.0f && out[8] == 0.0f, "capacity 1: dropped rows zero");
    CHECK(close_to(out[0], o.gates[0] * 5 + o.gates[1] * 7, 1e-6, 0), "capacity 1: kept row");
    out_free(&o);

    /* second choices queue after every first choice: capacity 2, tokens 0 and 1 keep the first
     * choice on expert 2; token 0's second choice (expert 3) is kept, so is token 1's */
    out_alloc(&o, T, E, 2);
    CHECK(run_router(&o, logits, T, E, 2, 2) == ZERO_OK, "capacity 2: router");
    CHECK(o.slot[0] == 0 && o.slot[2] == 1 && o.slot[4] == -1 && o.slot[1] == 0 && o.slot[3] == 1,
          "capacity 2: slots");
    out_free(&o);
}

static void case_first_choices_first(void) {
    /* token 0 picks (0, 1), token 1 picks (1, 0): with capacity 1 token 1's FIRST choice of
     * expert 1 wins over token 0's second choice of it (GShard order), though token 0 is first */
    const float logits[2 * 2] = {2, 1, 1, 2};
    out_t o;
    out_alloc(&o, 2, 2, 2);
    CHECK(run_router(&o, logits, 2, 2, 2, 1) == ZERO_OK, "first choices first: router");
    CHECK(o.slot[0] == 0 && o.slot[2] == 0 && o.slot[1] == -1 && o.slot[3] == -1,
          "first choices first: slots %d %d %d %d", o.slot[0], o.slot[1], o.slot[2], o.slot[3]);
    out_free(&o);
}

static void case_capacity_formula(void) {
    size_t C = 0;
    CHECK(zero__moe_capacity(&C, 32, 4, 2, 1.0, 4, 1) == ZERO_OK && C == 16, "C = %zu, want 16", C);
    CHECK(zero__moe_capacity(&C, 32, 4, 1, 1.25, 4, 1) == ZERO_OK && C == 10, "C = %zu, want 10",
          C);
    CHECK(zero__moe_capacity(&C, 32, 8, 1, 0.1, 4, 1) == ZERO_OK && C == 4,
          "C = %zu, want min_capacity 4", C);
    CHECK(zero__moe_capacity(&C, 7, 4, 2, 1.0, 0, 1) == ZERO_OK && C == 4, "C = %zu, want 4", C);
    CHECK(zero__moe_capacity(&C, 7, 4, 2, 1.0, 0, 0) == ZERO_OK && C == 7,
          "no dropping: C = %zu, want T = 7", C);
}

static void case_bad_args(void) {
    float logits[8] = {0}, probs[8], gates[8];
    int32_t idx[8], slot[8], count[4];
    size_t C = 123;
    struct {
        size_t E;
        int k;
        size_t cap;
        const char *word;
    } bad[] = {{2, 3, 4, "top_k"},
               {1, 2, 4, "top_k"},
               {0, 1, 4, "experts"},
               {4, 1, 0, "capacity"},
               {4, 0, 4, "top_k"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        count[0] = 77;
        zero_status_t st =
            zero__moe_router_forward(probs, idx, slot, gates, count, NULL, NULL, NULL, logits, 2,
                                     bad[i].E, bad[i].k, bad[i].cap);
        CHECK(st == ZERO_ERR_INVALID_ARG, "bad %zu: status %d", i, (int)st);
        CHECK(strstr(zero_last_error(), bad[i].word) != NULL, "bad %zu: message '%s' names %s", i,
              zero_last_error(), bad[i].word);
        CHECK(count[0] == 77, "bad %zu: nothing written", i);
    }
    CHECK(zero__moe_capacity(&C, 8, 2, 3, 1.0, 1, 1) == ZERO_ERR_INVALID_ARG && C == 123,
          "capacity: top_k 3");
    CHECK(zero__moe_capacity(&C, 8, 0, 1, 1.0, 1, 1) == ZERO_ERR_INVALID_ARG, "capacity: E 0");
    CHECK(zero__moe_capacity(&C, 8, 2, 1, 0.0, 1, 1) == ZERO_ERR_INVALID_ARG &&
              strstr(zero_last_error(), "capacity_factor"),
          "capacity: factor 0");
    CHECK(zero__moe_capacity(&C, 8, 2, 1, NAN, 1, 1) == ZERO_ERR_INVALID_ARG, "capacity: NaN");
    /* T == 0 is valid: nothing routed, losses 0 */
    float aux = 1, z = 1;
    size_t dropped = 5;
    CHECK(zero__moe_router_forward(probs, idx, slot, gates, count, &dropped, &aux, &z, logits, 0, 4,
                                   2, 1) == ZERO_OK &&
              aux == 0 && z == 0 && dropped == 0 && count[0] == 0,
          "T = 0");
}

int main(void) {
    static const size_t Ts[] = {1, 7, 32}, Es[] = {1, 2, 4, 8};
    for (size_t i = 0; i < 3; i++)
        for (size_t j = 0; j < 4; j++)
            for (int k = 1; k <= 2; k++) {
                if ((size_t)k > Es[j]) continue;
                case_random(Ts[i], Es[j], k, 1.0, 1); /* drops some */
                case_random(Ts[i], Es[j], k, 0.5, 1); /* drops more */
                case_random(Ts[i], Es[j], k, 1.0, 0); /* no dropping */
            }
    case_ties();
    case_one_expert_capacity_1();
    case_first_choices_first();
    case_capacity_formula();
    case_bad_args();
    return check_report();
}
