/* test_moe_mlp.c — the MoE MLP of src/model/moe_mlp.c: router, routed experts, shared experts.
 *
 * Oracles: (1) a naive twin written here in double from the definitions (moe_mlp.h, kernels/moe.h)
 * with token-by-token loops over the experts: softmax, top-k with ties to the lowest index, GShard
 * renormalised gates, slots handed out choice by choice and token by token, drops, then each kept
 * choice's expert MLP and the shared experts; compared with the module in fp32 and bf16 (the
 * twin on the bf16-rounded inputs); (2) central finite differences of
 * L = sum(out * R) + aux_coef * aux + z_coef * z through the module's own fp32 forward, for every
 * element of the router weight, the expert and shared weights and biases, and the input; (3) the
 * bf16 backward against the fp32 one on the same rounded values; (4) bad configs are refused
 * naming the key. Cases: top-2 with drops and a shared expert, top-1 without dropping.
 */
#include "check.h"
#include "core/core_internal.h"
#include "model/moe_mlp.h"

#define MODEL_TEST_SEED 0x0e0f17ab12cdull
#include "model_test_util.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { T_ROUTER, T_SFCW, T_SFCB, T_SPROJW, T_SPROJB, T_FCW, T_FCB, T_PROJW, T_PROJB, T_COUNT };
static const char *const tnames[T_COUNT] = {"router_w",      "shared_fc_w",   "shared_fc_b",
                                            "shared_proj_w", "shared_proj_b", "fc_w",
                                            "fc_b",          "proj_w",        "proj_b"};

typedef struct tcase {
    zero_moe_config_t m;
    int C;
    size_t T;
} tcase_t;

/* Every tensor of one layer as fp32 arrays, and its element counts. */
typedef struct params {
    float *t[T_COUNT];
    size_t n[T_COUNT];
} params_t;

static void params_sizes(const tcase_t *tc, size_t n[T_COUNT]) {
    const size_t C = (size_t)tc->C, H = zero__moe_hidden(&tc->m, tc->C);
    const size_t E = (size_t)tc->m.experts, S = (size_t)tc->m.shared_experts;
    const size_t sz[T_COUNT] = {E * C,     S * H * C, S * H,     S * C * H, S * C,
                                E * H * C, E * H,     E * C * H, E * C};
    memcpy(n, sz, sizeof sz);
}

static void params_init(params_t *p, const tcase_t *tc, double scale) {
    params_sizes(tc, p->n);
    for (int i = 0; i < T_COUNT; i++) {
        p->t[i] = calloc(p->n[i] + 1, sizeof(float));
        for (size_t j = 0; j < p->n[i]; j++) p->t[i][j] = (float)(scale * nrand());
    }
}

static void params_free(params_t *p) {
    for (int i = 0; i < T_COUNT; i++) free(p->t[i]);
}

/* Views in dtype dt: fp32 uses the arrays, 16-bit ones get rounded copies in store. */
static zero_moe_weights_t views(params_t *p, zero_dtype_t dt, void *store[T_COUNT]) {
    void *v[T_COUNT];
    for (int i = 0; i < T_COUNT; i++) {
        if (dt == ZERO_DTYPE_FP32) {
            v[i] = p->t[i];
            store[i] = NULL;
        } else {
            store[i] = calloc(p->n[i] + 1, 2);
            zero__narrow(store[i], p->t[i], p->n[i], dt);
            v[i] = store[i];
        }
    }
    zero_moe_weights_t w = {v[T_ROUTER], v[T_SFCW], v[T_SFCB],  v[T_SPROJW], v[T_SPROJB],
                            v[T_FCW],    v[T_FCB],  v[T_PROJW], v[T_PROJB],  0};
    return w;
}

/* ---------------------------------------------------------------- naive double twin */

static double gelu(double x) {
    return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}

/* y(C) += g * MLP(x): fc (H, C) + b, GELU, proj (C, H) + b. */
static void ref_mlp(double *y, const float *x, const float *fw, const float *fb, const float *pw,
                    const float *pb, size_t C, size_t H, double g) {
    double *h = malloc(H * sizeof *h);
    for (size_t j = 0; j < H; j++) {
        double s = fb[j];
        for (size_t c = 0; c < C; c++) s += (double)fw[j * C + c] * x[c];
        h[j] = gelu(s);
    }
    for (size_t c = 0; c < C; c++) {
        double s = pb[c];
        for (size_t j = 0; j < H; j++) s += (double)pw[c * H + j] * h[j];
        y[c] += g * s;
    }
    free(h);
}

/* out (T, C) and the aux and z losses, token by token. */
static void ref_forward(double *out, double *aux, double *z, const tcase_t *tc, const params_t *p,
                        const float *x, int eval) {
    const size_t C = (size_t)tc->C, H = zero__moe_hidden(&tc->m, tc->C), T = tc->T;
    const size_t E = (size_t)tc->m.experts, S = (size_t)tc->m.shared_experts;
    const int k = tc->m.top_k;
    const double cf = eval ? tc->m.eval_capacity_factor : tc->m.capacity_factor;
    size_t cap = T;
    if (tc->m.drop_tokens) {
        cap = (size_t)ceil(cf * (double)T * k / (double)E);
        if (cap < (size_t)tc->m.min_capacity) cap = (size_t)tc->m.min_capacity;
    }
    double *pr = calloc(T * E, sizeof *pr), *gate = calloc(T * 2, sizeof *gate);
    int *choice = calloc(T * 2, sizeof *choice), *fill = calloc(E, sizeof *fill);
    double *first = calloc(E, sizeof *first), *psum = calloc(E, sizeof *psum);
    *z = 0.0;
    for (size_t t = 0; t < T; t++) {
        double mx = -INFINITY, s = 0.0, lg[64];
        for (size_t e = 0; e < E; e++) {
            lg[e] = 0.0;
            for (size_t c = 0; c < C; c++)
                lg[e] += (double)p->t[T_ROUTER][e * C + c] * x[t * C + c];
            mx = lg[e] > mx ? lg[e] : mx;
        }
        for (size_t e = 0; e < E; e++) s += exp(lg[e] - mx);
        *z += (mx + log(s)) * (mx + log(s)) / (double)T;
        for (size_t e = 0; e < E; e++) pr[t * E + e] = exp(lg[e] - mx) / s;
        for (int c = 0; c < k; c++) { /* the c-th best, ties to the lowest index */
            int best = -1;
            for (size_t e = 0; e < E; e++)
                if ((c == 0 || (int)e != choice[t * 2]) &&
                    (best < 0 || pr[t * E + e] > pr[t * E + (size_t)best]))
                    best = (int)e;
            choice[t * 2 + c] = best;
        }
        first[choice[t * 2]] += 1.0 / (double)T;
        for (size_t e = 0; e < E; e++) psum[e] += pr[t * E + e] / (double)T;
        if (k == 1) {
            gate[t * 2] = pr[t * E + (size_t)choice[t * 2]];
        } else {
            double a = pr[t * E + (size_t)choice[t * 2]], b = pr[t * E + (size_t)choice[t * 2 + 1]];
            gate[t * 2] = a / (a + b);
            gate[t * 2 + 1] = b / (a + b);
        }
    }
    *aux = 0.0;
    for (size_t e = 0; e < E; e++) *aux += (double)E * first[e] * psum[e];
    memset(out, 0, T * C * sizeof *out);
    for (int c = 0; c < k; c++) /* first choices of all tokens, then second choices */
        for (size_t t = 0; t < T; t++) {
            size_t e = (size_t)choice[t * 2 + c];
            if ((size_t)fill[e] >= cap) continue; /* dropped */
            fill[e]++;
            ref_mlp(out + t * C, x + t * C, p->t[T_FCW] + e * H * C, p->t[T_FCB] + e * H,
                    p->t[T_PROJW] + e * C * H, p->t[T_PROJB] + e * C, C, H, gate[t * 2 + c]);
        }
    for (size_t t = 0; t < T; t++)
        for (size_t j = 0; j < S; j++)
            ref_mlp(out + t * C, x + t * C, p->t[T_SFCW] + j * H * C, p->t[T_SFCB] + j * H,
                    p->t[T_SPROJW] + j * C * H, p->t[T_SPROJB] + j * C, C, H, 1.0);
    free(pr);
    free(gate);
    free(choice);
    free(fill);
    free(first);
    free(psum);
}

/* ---------------------------------------------------------------- the module */

typedef struct mod {
    zero_moe_mlp_t *mm;
    void *mem;
    zero_dtype_t dt;
} mod_t;

static int mod_init(mod_t *md, const tcase_t *tc, zero_dtype_t dt) {
    size_t bytes = zero__moe_mlp_bytes(&tc->m, tc->C, tc->T, 1, dt);
    md->mem = aligned_alloc(64, (bytes + 63) / 64 * 64);
    md->dt = dt;
    zero_status_t st = zero__moe_mlp_init(&md->mm, &tc->m, tc->C, tc->T, 1, dt, 2, NULL, md->mem);
    CHECK(st == ZERO_OK, "init: %s", zero_last_error());
    return st == ZERO_OK;
}

static void mod_free(mod_t *md) {
    zero__moe_mlp_free(md->mm);
    free(md->mem);
}

/* The module's fp32 output (T, C) for x (fp32 values, rounded to dt when dt is 16-bit). */
static void mod_forward(mod_t *md, const tcase_t *tc, params_t *p, const float *x, float *out,
                        zero_moe_layer_stats_t *ms) {
    const size_t n = tc->T * (size_t)tc->C, es = zero_dtype_size(md->dt);
    void *store[T_COUNT];
    zero_moe_weights_t w = views(p, md->dt, store);
    void *xd = malloc(n * es), *od = malloc(n * es);
    zero__narrow(xd, x, n, md->dt);
    zero__moe_mlp_forward(md->mm, 0, &w, od, xd, tc->T, NULL, ms);
    zero__widen(out, od, n, md->dt);
    free(xd);
    free(od);
    for (int i = 0; i < T_COUNT; i++) free(store[i]);
}

static double loss_of(const float *out, const float *R, size_t n, const zero_moe_layer_stats_t *ms,
                      const zero_moe_config_t *m) {
    double l = 0.0;
    for (size_t i = 0; i < n; i++) l += (double)out[i] * R[i];
    return l + (double)m->aux_loss_coef * ms->aux_loss + (double)m->z_loss_coef * ms->z_loss;
}

/* Backward of the last forward with dout = R: the weights' gradients (fp32, grads) and the
 * input's (dx). */
static void mod_backward(mod_t *md, const tcase_t *tc, params_t *p, const float *x, const float *R,
                         params_t *grads, float *dx) {
    const size_t n = tc->T * (size_t)tc->C, es = zero_dtype_size(md->dt);
    void *store[T_COUNT], *gstore[T_COUNT];
    zero_moe_weights_t w = views(p, md->dt, store), gw = views(grads, md->dt, gstore);
    void *xd = malloc(n * es), *rd = malloc(n * es), *dxd = malloc(n * es);
    zero__narrow(xd, x, n, md->dt);
    zero__narrow(rd, R, n, md->dt);
    zero__moe_mlp_backward(md->mm, 0, &w, &gw, dxd, rd, xd, tc->T, 1.0f);
    zero__widen(dx, dxd, n, md->dt);
    for (int i = 0; i < T_COUNT; i++)
        if (gstore[i]) zero__widen(grads->t[i], gstore[i], grads->n[i], md->dt);
    free(xd);
    free(rd);
    free(dxd);
    for (int i = 0; i < T_COUNT; i++) {
        free(store[i]);
        free(gstore[i]);
    }
}

static void zero_params(params_t *g, const tcase_t *tc) {
    params_sizes(tc, g->n);
    for (int i = 0; i < T_COUNT; i++) g->t[i] = calloc(g->n[i] + 1, sizeof(float));
}

/* ---------------------------------------------------------------- cases */

static void round_to(float *v, size_t n, zero_dtype_t dt) {
    uint16_t *tmp = malloc(n * 2 + 2);
    zero__narrow(tmp, v, n, dt);
    zero__widen(v, tmp, n, dt);
    free(tmp);
}

/* The module against the twin; in bf16 the twin sees the same rounded x and weights. */
static void check_twin(const tcase_t *tc, zero_dtype_t dt) {
    const size_t n = tc->T * (size_t)tc->C;
    params_t p;
    params_init(&p, tc, 0.5);
    float *x = malloc(n * sizeof *x), *out = malloc(n * sizeof *out);
    for (size_t i = 0; i < n; i++) x[i] = (float)nrand();
    if (dt != ZERO_DTYPE_FP32) {
        round_to(x, n, dt);
        for (int i = 0; i < T_COUNT; i++) round_to(p.t[i], p.n[i], dt);
    }
    double *ref = malloc(n * sizeof *ref), aux, z;
    mod_t md;
    if (!mod_init(&md, tc, dt)) return;
    for (int eval = 0; eval < 2; eval++) {
        zero__moe_mlp_set_eval(md.mm, eval);
        zero_moe_layer_stats_t ms;
        mod_forward(&md, tc, &p, x, out, &ms);
        ref_forward(ref, &aux, &z, tc, &p, x, eval);
        /* bf16: the module rounds each expert's hidden activations and its output once */
        const double tol = dt == ZERO_DTYPE_FP32 ? 2e-5 : 3e-2;
        double worst = 0.0, scale = 0.0;
        for (size_t i = 0; i < n; i++) {
            worst = fmax(worst, fabs((double)out[i] - ref[i]));
            scale = fmax(scale, fabs(ref[i]));
        }
        CHECK(worst <= tol * (1.0 + scale), "%s k=%d eval %d: |out - twin| %.3g (scale %.3g)",
              zero_dtype_name(dt), tc->m.top_k, eval, worst, scale);
        CHECK(fabs(ms.aux_loss - aux) <= 1e-5 * (1 + aux) && fabs(ms.z_loss - z) <= 1e-4 * (1 + z),
              "%s: aux %.6f z %.6f, twin %.6f %.6f", zero_dtype_name(dt), (double)ms.aux_loss,
              (double)ms.z_loss, aux, z);
    }
    mod_free(&md);
    params_free(&p);
    free(x);
    free(out);
    free(ref);
}

/* Every gradient of the fp32 module against central differences of its own forward. */
static void check_fd(const tcase_t *tc) {
    const size_t n = tc->T * (size_t)tc->C;
    params_t p, g;
    params_init(&p, tc, 0.5);
    zero_params(&g, tc);
    float *x = malloc(n * sizeof *x), *R = malloc(n * sizeof *R), *dx = malloc(n * sizeof *dx);
    float *out = malloc(n * sizeof *out);
    for (size_t i = 0; i < n; i++) {
        x[i] = (float)nrand();
        R[i] = (float)nrand();
    }
    mod_t md;
    if (!mod_init(&md, tc, ZERO_DTYPE_FP32)) return;
    zero_moe_layer_stats_t ms;
    mod_forward(&md, tc, &p, x, out, &ms);
    CHECK(!tc->m.drop_tokens || ms.dropped > 0, "the case should drop tokens (dropped %zu)",
          ms.dropped);
    const double l0 = loss_of(out, R, n, &ms, &tc->m);
    mod_backward(&md, tc, &p, x, R, &g, dx);
    const float eps = 1e-2f;
    int bad = 0, total = 0, kinks = 0;
    for (int i = 0; i <= T_COUNT; i++) { /* i == T_COUNT: the input */
        float *v = i < T_COUNT ? p.t[i] : x;
        const float *an = i < T_COUNT ? g.t[i] : dx;
        size_t cnt = i < T_COUNT ? p.n[i] : n;
        for (size_t j = 0; j < cnt; j++) {
            float keep = v[j];
            v[j] = keep + eps;
            mod_forward(&md, tc, &p, x, out, &ms);
            double lp = loss_of(out, R, n, &ms, &tc->m);
            v[j] = keep - eps;
            mod_forward(&md, tc, &p, x, out, &ms);
            double lm = loss_of(out, R, n, &ms, &tc->m);
            v[j] = keep;
            /* A step that changed an expert choice or a drop jumps the loss (the aux loss's f_e
             * and the kept set are piecewise constant, and the backward holds them fixed, as
             * DeepSpeed does): a second difference far above the curvature's O(eps^2) says so,
             * and such an element is skipped. */
            if (fabs(lp - 2.0 * l0 + lm) > 3e-3) {
                kinks++;
                continue;
            }
            double fd = (lp - lm) / (2.0 * eps);
            total++;
            if (fabs(fd - an[j]) > 1e-2 * (1.0 + fabs(fd))) {
                if (++bad <= 3)
                    printf("  fd mismatch %s[%zu]: fd %.6f analytic %.6f\n",
                           i < T_COUNT ? tnames[i] : "x", j, fd, (double)an[j]);
            }
        }
    }
    printf("k=%d: %d gradient elements against finite differences, %d skipped\n", tc->m.top_k,
           total, kinks);
    CHECK(bad == 0 && kinks <= total / 10,
          "k=%d: %d of %d gradient elements differ from finite differences (%d skipped at a "
          "routing change)",
          tc->m.top_k, bad, total, kinks);
    mod_free(&md);
    params_free(&p);
    params_free(&g);
    free(x);
    free(R);
    free(dx);
    free(out);
}

/* bf16 gradients against fp32 ones on the same rounded values. */
static void check_bf16_backward(const tcase_t *tc) {
    const size_t n = tc->T * (size_t)tc->C;
    params_t p, g32, g16;
    params_init(&p, tc, 0.5);
    zero_params(&g32, tc);
    zero_params(&g16, tc);
    float *x = malloc(n * sizeof *x), *R = malloc(n * sizeof *R), *out = malloc(n * sizeof *out);
    float *dx32 = malloc(n * sizeof *dx32), *dx16 = malloc(n * sizeof *dx16);
    for (size_t i = 0; i < n; i++) {
        x[i] = (float)nrand();
        R[i] = (float)nrand();
    }
    round_to(x, n, ZERO_DTYPE_BF16);
    round_to(R, n, ZERO_DTYPE_BF16);
    for (int i = 0; i < T_COUNT; i++) round_to(p.t[i], p.n[i], ZERO_DTYPE_BF16);
    mod_t m32, m16;
    if (!mod_init(&m32, tc, ZERO_DTYPE_FP32) || !mod_init(&m16, tc, ZERO_DTYPE_BF16)) return;
    mod_forward(&m32, tc, &p, x, out, NULL);
    mod_backward(&m32, tc, &p, x, R, &g32, dx32);
    mod_forward(&m16, tc, &p, x, out, NULL);
    mod_backward(&m16, tc, &p, x, R, &g16, dx16);
    for (int i = 0; i <= T_COUNT; i++) {
        const float *a = i < T_COUNT ? g32.t[i] : dx32, *b = i < T_COUNT ? g16.t[i] : dx16;
        size_t cnt = i < T_COUNT ? p.n[i] : n;
        double worst = 0.0, scale = 0.0;
        for (size_t j = 0; j < cnt; j++) {
            worst = fmax(worst, fabs((double)a[j] - b[j]));
            scale = fmax(scale, fabs((double)a[j]));
        }
        CHECK(worst <= 5e-2 * (1.0 + scale), "bf16 backward %s: |bf16 - fp32| %.3g (scale %.3g)",
              i < T_COUNT ? tnames[i] : "x", worst, scale);
    }
    mod_free(&m32);
    mod_free(&m16);
    params_free(&p);
    params_free(&g32);
    params_free(&g16);
    free(x);
    free(R);
    free(out);
    free(dx32);
    free(dx16);
}

static void check_bad_configs(void) {
    const zero_moe_config_t ok = {4, 2, 2, 1.0, 1.0, 0, 1, 0.01f, 0.0f, 0, 0, 1};
    struct {
        const char *key;
        zero_moe_config_t m;
    } bad[12];
    int n = 0;
#define BAD(k, field, v)                                                                           \
    bad[n].key = k;                                                                                \
    bad[n].m = ok;                                                                                 \
    bad[n].m.field = v;                                                                            \
    n++
    BAD("model.moe.experts", experts, -1);
    BAD("model.moe.top_k", top_k, 3);
    BAD("model.moe.top_k", top_k, 0);
    BAD("model.moe.every", every, 0);
    BAD("model.moe.capacity_factor", capacity_factor, 0.0);
    BAD("model.moe.eval_capacity_factor", eval_capacity_factor, NAN);
    BAD("model.moe.min_capacity", min_capacity, -1);
    BAD("model.moe.aux_loss_coef", aux_loss_coef, -0.5f);
    BAD("model.moe.z_loss_coef", z_loss_coef, INFINITY);
    BAD("model.moe.shared_experts", shared_experts, -2);
    BAD("model.moe.ep_size", ep_size, 3);
    BAD("model.moe.ep_size", ep_size, 0);
#undef BAD
    CHECK(zero__moe_config_check(&ok, 8) == ZERO_OK, "the good config: %s", zero_last_error());
    for (int i = 0; i < n; i++) {
        zero_status_t st = zero__moe_config_check(&bad[i].m, 8);
        CHECK(st != ZERO_OK && strstr(zero_last_error(), bad[i].key), "%s: status %d, '%s'",
              bad[i].key, st, zero_last_error());
    }
    zero_moe_config_t one = ok;
    one.experts = 1; /* top_k 2 > 1 expert */
    CHECK(zero__moe_config_check(&one, 8) != ZERO_OK &&
              strstr(zero_last_error(), "exceeds model.moe.experts"),
          "top_k > experts: '%s'", zero_last_error());
    one.ep_size = 2;
    one.experts = 4;
    CHECK(zero__moe_config_check(&one, 8) == ZERO_OK, "ep_size 2 of 4 experts: '%s'",
          zero_last_error());
}

int main(void) {
    /* top-2, capacity factor 1 (drops), one shared expert, both losses on */
    const tcase_t top2 = {{4, 2, 1, 1.0, 2.0, 0, 1, 0.3f, 0.05f, 1, 12, 1}, 8, 24};
    /* top-1 without dropping, no shared expert, hidden 4C */
    const tcase_t top1 = {{3, 1, 1, 1.0, 1.0, 0, 0, 0.2f, 0.1f, 0, 0, 1}, 6, 17};
    check_bad_configs();
    check_twin(&top2, ZERO_DTYPE_FP32);
    check_twin(&top1, ZERO_DTYPE_FP32);
    check_twin(&top2, ZERO_DTYPE_BF16);
    check_twin(&top1, ZERO_DTYPE_BF16);
    check_fd(&top2);
    check_fd(&top1);
    check_bf16_backward(&top2);
    return check_report();
}
