/* test_gpt.c — the GPT model of src/model/gpt.c against an independent naive reference.
 *
 * Oracles: a naive double-precision GPT-2 forward written here from the formulas (no kernels),
 * used (1) to check the model's loss and (2) through central finite differences to check every
 * gradient element of a tiny model, with random (not default) weights so no term is trivially
 * zero, an ignored target and a forward with fewer sequences than the model was sized for; at a
 * vocabulary of 11 and of more than one chunk of the fused LM head (kernels.h).
 * Also: activation checkpointing gives the same gradients, the initial loss is close to ln(V),
 * a tiny model overfits one batch to near zero loss, and bad inputs fail with clear messages.
 */
#include "check.h"
#include "kernels/kernels.h"
#include "model/gpt.h"

#define MODEL_TEST_SEED 88172645463325252ull
#include "model_test_util.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------------ naive model */

/* All parameters in double, one flat array per unit, same layout as the engine's buffers. */
typedef struct ref {
    zero_gpt_config_t c;
    int units;
    double **p;         /* p[u] */
    size_t *n;          /* elements in p[u] (padded) */
    size_t off[16][16]; /* tensor offsets */
} ref_t;

static void ref_from_engine(ref_t *r, const zero_engine_t *eng, const zero_gpt_config_t *c) {
    r->c = *c;
    r->units = zero_engine_unit_count(eng);
    r->p = calloc((size_t)r->units, sizeof *r->p);
    r->n = calloc((size_t)r->units, sizeof *r->n);
    for (int u = 0; u < r->units; u++) {
        int nt = zero_engine_tensor_count(eng, u);
        size_t last = zero_engine_tensor_offset(eng, u, nt - 1);
        const zero_tensor_desc_t *d = zero_engine_tensor_desc(eng, u, nt - 1);
        size_t cnt = 1;
        for (int k = 0; k < d->ndim; k++) cnt *= d->shape[k];
        r->n[u] = last + cnt;
        float *tmp = malloc(r->n[u] * sizeof *tmp);
        zero_engine_params_read(eng, u, 0, r->n[u], tmp);
        r->p[u] = malloc(r->n[u] * sizeof(double));
        for (size_t i = 0; i < r->n[u]; i++) r->p[u][i] = tmp[i];
        free(tmp);
        for (int t = 0; t < nt; t++) r->off[u][t] = zero_engine_tensor_offset(eng, u, t);
    }
}

static void ref_free(ref_t *r) {
    for (int u = 0; u < r->units; u++) free(r->p[u]);
    free(r->p);
    free(r->n);
}

static void ln(double *out, const double *x, const double *w, const double *b, int C) {
    double m = 0, v = 0;
    for (int i = 0; i < C; i++) m += x[i];
    m /= C;
    for (int i = 0; i < C; i++) v += (x[i] - m) * (x[i] - m);
    v /= C;
    double s = 1.0 / sqrt(v + 1e-5);
    for (int i = 0; i < C; i++) out[i] = (x[i] - m) * s * w[i] + b[i];
}

/* y(OC) = W(OC, IC) x(IC) + b */
static void lin(double *y, const double *x, const double *W, const double *b, int IC, int OC) {
    for (int o = 0; o < OC; o++) {
        double s = b ? b[o] : 0.0;
        for (int i = 0; i < IC; i++) s += W[(size_t)o * IC + i] * x[i];
        y[o] = s;
    }
}

/* Mean cross-entropy over the targets >= 0 of a batch (B, T). */
static double ref_loss(const ref_t *r, const int32_t *tok, const int32_t *tgt, int B, int T) {
    const int C = r->c.dim, NH = r->c.heads, hs = C / NH, V = r->c.vocab, L = r->c.layers;
    double *x = malloc(sizeof(double) * T * C), *h = malloc(sizeof(double) * T * C);
    double *qkv = malloc(sizeof(double) * T * 3 * C), *ay = malloc(sizeof(double) * T * C);
    double *f = malloc(sizeof(double) * 4 * C), *o = malloc(sizeof(double) * C);
    double *att = malloc(sizeof(double) * T), *lg = malloc(sizeof(double) * V);
    double total = 0;
    int count = 0;
    for (int b = 0; b < B; b++) {
        const double *wte = r->p[0] + r->off[0][0], *wpe = r->p[0] + r->off[0][1];
        for (int t = 0; t < T; t++)
            for (int i = 0; i < C; i++)
                x[t * C + i] = wte[(size_t)tok[b * T + t] * C + i] + wpe[t * C + i];
        for (int l = 0; l < L; l++) {
            const double *P = r->p[1 + l];
            const size_t *O = r->off[1 + l];
            for (int t = 0; t < T; t++) {
                ln(h + t * C, x + t * C, P + O[0], P + O[1], C);
                lin(qkv + t * 3 * C, h + t * C, P + O[2], P + O[3], C, 3 * C);
            }
            for (int hd = 0; hd < NH; hd++)
                for (int t = 0; t < T; t++) {
                    double mx = -1e300, sum = 0;
                    for (int s = 0; s <= t; s++) {
                        double d = 0;
                        for (int i = 0; i < hs; i++)
                            d += qkv[t * 3 * C + hd * hs + i] * qkv[s * 3 * C + C + hd * hs + i];
                        att[s] = d / sqrt((double)hs);
                        if (att[s] > mx) mx = att[s];
                    }
                    for (int s = 0; s <= t; s++) sum += (att[s] = exp(att[s] - mx));
                    for (int i = 0; i < hs; i++) {
                        double a = 0;
                        for (int s = 0; s <= t; s++)
                            a += att[s] / sum * qkv[s * 3 * C + 2 * C + hd * hs + i];
                        ay[t * C + hd * hs + i] = a;
                    }
                }
            for (int t = 0; t < T; t++) {
                lin(o, ay + t * C, P + O[4], P + O[5], C, C);
                for (int i = 0; i < C; i++) x[t * C + i] += o[i];
                ln(h + t * C, x + t * C, P + O[6], P + O[7], C);
                lin(f, h + t * C, P + O[8], P + O[9], C, 4 * C);
                for (int i = 0; i < 4 * C; i++) {
                    double z = f[i];
                    f[i] = 0.5 * z *
                           (1 + tanh(sqrt(2 / 3.141592653589793) * (z + 0.044715 * z * z * z)));
                }
                lin(o, f, P + O[10], P + O[11], 4 * C, C);
                for (int i = 0; i < C; i++) x[t * C + i] += o[i];
            }
        }
        const double *F = r->p[1 + L];
        for (int t = 0; t < T; t++) {
            int y = tgt[b * T + t];
            if (y < 0) continue;
            ln(h, x + t * C, F + r->off[1 + L][0], F + r->off[1 + L][1], C);
            lin(lg, h, wte, NULL, C, V);
            double mx = -1e300, s = 0;
            for (int v = 0; v < V; v++) mx = lg[v] > mx ? lg[v] : mx;
            for (int v = 0; v < V; v++) s += exp(lg[v] - mx);
            total += log(s) + mx - lg[y];
            count++;
        }
    }
    free(x), free(h), free(qkv), free(ay), free(f), free(o), free(att), free(lg);
    return total / count;
}

/* ------------------------------------------------------------------------------ helpers */

static zero_engine_t *make_engine(float lr) {
    zero_engine_params_t p = zero_engine_params_default();
    p.lr = lr;
    p.min_lr = lr;
    p.schedule = ZERO_LR_CONSTANT;
    p.weight_decay = 0.0f;
    p.grad_clip = 0.0f;
    p.threads = 2;
    zero_engine_t *eng = NULL;
    if (zero_engine_init(&eng, &p)) {
        fprintf(stderr, "engine init: %s\n", zero_last_error());
        exit(1);
    }
    return eng;
}

/* ------------------------------------------------------------------------------ tests */

/* vocab: 11, or more than one chunk of the fused head's vocabulary (kernels.h) */
static void test_forward_and_gradients(int vocab) {
    zero_gpt_config_t c = {2, 2, 8, vocab, 5, {0}, {0}};
    const int B = 2, T = 5;
    int32_t tok[10], tgt[10];
    for (int i = 0; i < B * T; i++) {
        tok[i] = (int32_t)(urand() * c.vocab);
        tgt[i] = (int32_t)(urand() * c.vocab);
    }
    tgt[3] = -1; /* ignored position */
    zero_engine_t *eng[2];
    zero_gpt_t *gpt[2];
    for (int k = 0; k < 2; k++) {
        eng[k] = make_engine(1e-3f);
        zero_status_t st = zero__gpt_init(&gpt[k], &c, eng[k], 3, k, 1 + k);
        CHECK(st == ZERO_OK, "gpt init (checkpointing %d): %s", k, zero_last_error());
        if (st) return;
    }
    uint64_t saved = rng_state;
    for (int k = 0; k < 2; k++) {
        rng_state = saved; /* the same random weights in both models */
        randomize(eng[k], 0.3);
    }
    float loss[2], *logits = malloc(sizeof(float) * 10 * (size_t)vocab);
    const size_t logits_bytes = sizeof(float) * 10 * (size_t)vocab;
    for (int k = 0; k < 2; k++) {
        CHECK(zero__gpt_forward(gpt[k], tok, tgt, B, T, &loss[k]) == ZERO_OK, "forward: %s",
              zero_last_error());
        memcpy(logits, zero__gpt_logits(gpt[k]), logits_bytes);
        CHECK(zero__gpt_backward(gpt[k]) == ZERO_OK, "backward: %s", zero_last_error());
        /* gpt.h: backward leaves the logits alone; a second backward needs a new forward */
        CHECK(memcmp(logits, zero__gpt_logits(gpt[k]), logits_bytes) == 0,
              "backward changed the logits (checkpointing %d)", k);
        CHECK(zero__gpt_backward(gpt[k]) == ZERO_ERR_INVALID_ARG,
              "a second backward after one forward was accepted (checkpointing %d)", k);
    }
    ref_t r;
    ref_from_engine(&r, eng[0], &c);
    double want = ref_loss(&r, tok, tgt, B, T);
    CHECK(fabs(loss[0] - want) <= 1e-5 * fabs(want) + 1e-6, "loss %.8f, naive reference %.8f",
          (double)loss[0], want);
    CHECK(loss[0] == loss[1], "checkpointing changes the loss: %.9g vs %.9g", (double)loss[0],
          (double)loss[1]);

    /* Every gradient element against central differences of the naive double loss. */
    const double h = 1e-5;
    int bad = 0;
    double worst = 0;
    size_t checked = 0;
    for (int u = 0; u < r.units; u++) {
        float *g = malloc(r.n[u] * sizeof *g), *g2 = malloc(r.n[u] * sizeof *g2);
        zero_engine_grads_read(eng[0], u, 0, r.n[u], g);
        zero_engine_grads_read(eng[1], u, 0, r.n[u], g2);
        /* at the large vocabulary every 37th element of the (V, C) embeddings' unit: the cost
         * of the naive loss grows with V, the number of elements too */
        const size_t step = r.n[u] > 20000 ? 37 : 1;
        for (size_t i = 0; i < r.n[u]; i += step) {
            double keep = r.p[u][i];
            r.p[u][i] = keep + h;
            double lp = ref_loss(&r, tok, tgt, B, T);
            r.p[u][i] = keep - h;
            double lm = ref_loss(&r, tok, tgt, B, T);
            r.p[u][i] = keep;
            double fd = (lp - lm) / (2 * h);
            double err = fabs(g[i] - fd) / (1e-3 + fabs(fd));
            if (err > worst) worst = err;
            if (fabs(g[i] - fd) > 1e-4 + 2e-3 * fabs(fd)) {
                if (bad++ < 5)
                    fprintf(stderr, "  unit %s element %zu: grad %.7g, finite difference %.7g\n",
                            zero_engine_unit_name(eng[0], u), i, (double)g[i], fd);
            }
            if (fabs(g[i] - g2[i]) > 1e-6 + 1e-5 * fabs(g[i])) {
                if (bad++ < 5)
                    fprintf(stderr, "  unit %d element %zu: grad %.7g, checkpointed %.7g\n", u, i,
                            (double)g[i], (double)g2[i]);
            }
            checked++;
        }
        free(g);
        free(g2);
    }
    CHECK(bad == 0, "%d of %zu gradient elements disagree (worst relative error %.3g)", bad,
          checked, worst);
    printf("gradients: %zu elements vs finite differences, worst relative error %.2e\n", checked,
           worst);
    ref_free(&r);
    free(logits);
    for (int k = 0; k < 2; k++) {
        zero__gpt_free(gpt[k]);
        zero_engine_free(eng[k]);
    }
}

/* The per-block scratch (LayerNorm output, GELU output, attention probabilities) is shared by all
 * blocks and laid out as a prefix for shorter batches, so a step must not see what an earlier,
 * longer forward left there: a short step after a long forward must give bitwise the gradients
 * of the same short step on a fresh model, with and without checkpointing. */
static void test_short_after_long(void) {
    zero_gpt_config_t c = {3, 2, 16, 13, 9, {0}, {0}};
    int32_t tok[3 * 9], tgt[3 * 9];
    for (int i = 0; i < 3 * 9; i++) {
        tok[i] = (int32_t)(urand() * c.vocab);
        tgt[i] = (int32_t)(urand() * c.vocab);
    }
    uint64_t saved = rng_state;
    for (int ck = 0; ck < 2; ck++) {
        zero_engine_t *eng[2];
        zero_gpt_t *gpt[2];
        float loss[2];
        for (int k = 0; k < 2; k++) {
            eng[k] = make_engine(1e-3f);
            zero_status_t st = zero__gpt_init(&gpt[k], &c, eng[k], 3, ck, 2);
            CHECK(st == ZERO_OK, "gpt init (checkpointing %d): %s", ck, zero_last_error());
            if (st) return;
            rng_state = saved;
            randomize(eng[k], 0.3);
        }
        /* model 1 first runs the full batch and sequence, then both run B = 2, T = 4 */
        CHECK(zero__gpt_forward(gpt[1], tok, tgt, 3, 9, &loss[1]) == ZERO_OK, "long forward: %s",
              zero_last_error());
        for (int k = 0; k < 2; k++) {
            CHECK(zero__gpt_forward(gpt[k], tok, tgt, 2, 4, &loss[k]) == ZERO_OK, "forward: %s",
                  zero_last_error());
            CHECK(zero__gpt_backward(gpt[k]) == ZERO_OK, "backward: %s", zero_last_error());
        }
        CHECK(loss[0] == loss[1],
              "short loss after a long forward %.9g, fresh %.9g "
              "(checkpointing %d)",
              (double)loss[1], (double)loss[0], ck);
        size_t differ = 0, total = 0;
        for (int u = 0; u < zero_engine_unit_count(eng[0]); u++) {
            int nt = zero_engine_tensor_count(eng[0], u);
            const zero_tensor_desc_t *d = zero_engine_tensor_desc(eng[0], u, nt - 1);
            size_t n = zero_engine_tensor_offset(eng[0], u, nt - 1);
            size_t m = 1;
            for (int q = 0; q < d->ndim; q++) m *= d->shape[q];
            n += m; /* up to the end of the last tensor, like ref_from_engine */
            float *g0 = malloc(n * sizeof *g0), *g1 = malloc(n * sizeof *g1);
            zero_engine_grads_read(eng[0], u, 0, n, g0);
            zero_engine_grads_read(eng[1], u, 0, n, g1);
            for (size_t i = 0; i < n; i++) differ += memcmp(&g0[i], &g1[i], sizeof *g0) != 0;
            total += n;
            free(g0);
            free(g1);
        }
        CHECK(differ == 0,
              "%zu of %zu gradient elements differ after a longer forward "
              "(checkpointing %d)",
              differ, total, ck);
        for (int k = 0; k < 2; k++) {
            zero__gpt_free(gpt[k]);
            zero_engine_free(eng[k]);
        }
    }
}

static void test_init_loss(void) {
    zero_gpt_config_t c = {2, 4, 64, 256, 32, {0}, {0}};
    zero_engine_t *eng = make_engine(1e-3f);
    zero_gpt_t *gpt;
    CHECK(zero__gpt_init(&gpt, &c, eng, 4, 0, 2) == ZERO_OK, "init: %s", zero_last_error());
    int32_t tok[4 * 32], tgt[4 * 32];
    for (int i = 0; i < 4 * 32; i++) {
        tok[i] = (int32_t)(urand() * 256);
        tgt[i] = (int32_t)(urand() * 256);
    }
    float loss = 0;
    CHECK(zero__gpt_forward(gpt, tok, tgt, 4, 32, &loss) == ZERO_OK, "forward");
    CHECK(fabs(loss - log(256.0)) < 0.05, "initial loss %.4f, expected about ln(256) = %.4f",
          (double)loss, log(256.0));
    CHECK(zero__gpt_param_count(&c) == zero_engine_param_count(eng),
          "param count formula %zu, engine %zu", zero__gpt_param_count(&c),
          zero_engine_param_count(eng));
    zero__gpt_free(gpt);
    zero_engine_free(eng);
}

static void test_overfit(void) {
    zero_gpt_config_t c = {2, 2, 32, 32, 16, {0}, {0}};
    const int B = 4, T = 16;
    zero_engine_t *eng = make_engine(1e-2f);
    zero_gpt_t *gpt;
    CHECK(zero__gpt_init(&gpt, &c, eng, B, 1, 2) == ZERO_OK, "init: %s", zero_last_error());
    int32_t tok[4 * 16], tgt[4 * 16];
    for (int i = 0; i < B * T; i++) {
        tok[i] = (int32_t)(urand() * c.vocab);
        tgt[i] = (int32_t)(urand() * c.vocab);
    }
    float first = 0, loss = 0;
    for (int step = 0; step < 150; step++) {
        zero__gpt_forward(gpt, tok, tgt, B, T, &loss);
        if (step == 0) first = loss;
        zero__gpt_backward(gpt);
        zero_engine_step(eng, NULL);
    }
    zero__gpt_forward(gpt, tok, tgt, B, T, &loss);
    printf("overfit: loss %.4f -> %.4f after 150 steps\n", (double)first, (double)loss);
    CHECK(loss < 0.05f, "a tiny model did not overfit one batch: loss %.4f (from %.4f)",
          (double)loss, (double)first);
    zero__gpt_free(gpt);
    zero_engine_free(eng);
}

static void test_bad_input(void) {
    zero_gpt_config_t c = {2, 3, 8, 11, 5, {0}, {0}};
    zero_status_t st = zero__gpt_config_check(&c);
    CHECK(st == ZERO_ERR_CONFIG && strstr(zero_last_error(), "model.heads = 3") &&
              strstr(zero_last_error(), "model.dim = 8"),
          "heads not dividing dim: %d '%s'", st, zero_last_error());
    c.heads = 2;
    c.layers = 0;
    st = zero__gpt_config_check(&c);
    CHECK(st == ZERO_ERR_CONFIG && strstr(zero_last_error(), "model.layers"), "layers 0: '%s'",
          zero_last_error());
    c.layers = 1;
    zero_engine_t *eng = make_engine(1e-3f);
    zero_gpt_t *gpt;
    CHECK(zero__gpt_init(&gpt, &c, eng, 1, 0, 1) == ZERO_OK, "init");
    int32_t tok[6] = {1, 2, 3, 4, 5, 6}, tgt[6] = {1, 2, 3, 4, 5, 6};
    st = zero__gpt_forward(gpt, tok, tgt, 1, 6, NULL);
    CHECK(st == ZERO_ERR_INVALID_ARG && strstr(zero_last_error(), "6 tokens") &&
              strstr(zero_last_error(), "context of 5"),
          "sequence longer than the context: %d '%s'", st, zero_last_error());
    tok[2] = 11;
    st = zero__gpt_forward(gpt, tok, tgt, 1, 5, NULL);
    CHECK(st == ZERO_ERR_INVALID_ARG && strstr(zero_last_error(), "token 11"),
          "token outside the vocabulary: '%s'", zero_last_error());
    st = zero__gpt_backward(gpt);
    CHECK(st == ZERO_ERR_INVALID_ARG, "backward without a training forward: %d", st);
    zero__gpt_free(gpt);
    zero_engine_free(eng);
}

int main(void) {
    test_forward_and_gradients(11);
    {
        const uint64_t keep = rng_state; /* the later tests' inputs as without this case */
        test_forward_and_gradients(ZERO__LM_HEAD_CHUNK + 77);
        rng_state = keep;
    }
    test_short_after_long();
    test_init_loss();
    test_overfit();
    test_bad_input();
    return check_report();
}
