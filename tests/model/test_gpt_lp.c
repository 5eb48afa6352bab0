/* test_gpt_lp.c — the GPT model in bf16 and fp16 compute (src/model/gpt.c over kernels_lp.h).
 *
 * Oracles:
 * - the fp32 model (itself checked against a naive double reference and finite differences in
 *   test_gpt.c) on the SAME weights: the 16-bit engine rounds random weights, and those rounded
 *   values are written into an fp32 engine. Loss and every weight gradient must agree within a
 *   tolerance argued from the format: each block rounds about ten activations once (unit
 *   roundoff u = 2^-8 bf16, 2^-11 fp16), errors of independent roundings add in quadrature and
 *   the backward roughly doubles the chain, so over two blocks the relative error of a gradient
 *   tensor (L2 norm) should sit near sqrt(40) u: 0.025 bf16, 0.003 fp16; the bounds below are
 *   3x that. fp16 gradients carry the engine's loss scale, divided out here.
 * - the initial loss of the default init is close to ln(V) (small weights: near-uniform logits);
 * - activation checkpointing gives bitwise the same loss and gradients (the recompute runs the
 *   same deterministic 16-bit kernels);
 * - accuracy: bf16 training of a small GPT on tinyshakespeare ($ZERO_SHARED_DIR/data/
 *   tinyshakespeare.txt, the built-in corpus when absent) ends within 3% of the fp32 run's
 *   validation loss, same seed, data order and steps.
 */
#include "check.h"
#include "model/gpt.h"

#define MODEL_TEST_SEED 0x2545f4914f6cdd1dull
#include "model_test_util.h"
#include "train/data.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static zero_engine_t *make_engine(zero_dtype_t dt, float lr, int warmup_steps, int steps,
                                  int threads) {
    zero_engine_params_t p = zero_engine_params_default();
    p.compute_dtype = dt;
    p.lr = lr;
    p.min_lr = lr * 0.1f;
    p.warmup_steps = warmup_steps;
    p.total_steps = steps;
    p.threads = threads;
    zero_engine_t *eng = NULL;
    if (zero_engine_init(&eng, &p)) {
        fprintf(stderr, "engine init (%s): %s\n", zero_dtype_name(dt), zero_last_error());
        exit(1);
    }
    return eng;
}

static zero_gpt_t *make_model(const zero_gpt_config_t *c, zero_engine_t *eng, int B, int ckpt) {
    zero_gpt_t *g = NULL;
    if (zero__gpt_init(&g, c, eng, B, ckpt, zero_engine_params(eng)->threads)) {
        fprintf(stderr, "gpt init: %s\n", zero_last_error());
        exit(1);
    }
    return g;
}

/* dst's parameters = src's (as the model sees them: widened 16-bit values, exact in fp32). */
static void copy_params(zero_engine_t *dst, const zero_engine_t *src) {
    for (int u = 0; u < zero_engine_unit_count(src); u++) {
        size_t n = zero_engine_unit_param_count(src, u);
        float *v = malloc(n * sizeof *v);
        CHECK(zero_engine_params_read(src, u, 0, n, v) == ZERO_OK, "params_read unit %d", u);
        CHECK(zero_engine_params_write(dst, u, 0, n, v) == ZERO_OK, "params_write unit %d", u);
        free(v);
    }
}

static float *read_grads(zero_engine_t *eng, int u, size_t *n) {
    *n = zero_engine_unit_param_count(eng, u);
    float *v = malloc(*n * sizeof *v);
    CHECK(zero_engine_grads_read(eng, u, 0, *n, v) == ZERO_OK, "grads_read unit %d", u);
    return v;
}

static void random_batch(int32_t *tok, int32_t *tgt, int n, int V) {
    for (int i = 0; i < n; i++) {
        tok[i] = (int32_t)(urand() * V);
        tgt[i] = (int32_t)(urand() * V);
    }
}

/* ------------------------------------------------------------------------------ vs fp32 */

static void test_against_fp32(zero_dtype_t dt, double tol) {
    const zero_gpt_config_t c = {2, 4, 64, 37, 24, {0}, {0}};
    const int B = 3, T = 21; /* T < seq: a prefix of every activation buffer */
    zero_engine_t *e16 = make_engine(dt, 1e-3f, 0, 10, 2),
                  *e32 = make_engine(ZERO_DTYPE_FP32, 1e-3f, 0, 10, 2);
    zero_gpt_t *g16 = make_model(&c, e16, B, 0), *g32 = make_model(&c, e32, B, 0);
    randomize(e16, 0.1);
    copy_params(e32, e16);
    int32_t tok[B * T], tgt[B * T];
    random_batch(tok, tgt, B * T, c.vocab);
    tgt[5] = -1;
    float l16 = 0, l32 = 0;
    CHECK(zero__gpt_forward(g16, tok, tgt, B, T, &l16) == ZERO_OK, "forward %s",
          zero_dtype_name(dt));
    CHECK(zero__gpt_forward(g32, tok, tgt, B, T, &l32) == ZERO_OK, "forward fp32");
    /* the logits are fp32 in every dtype; compare them too */
    const float *lg16 = zero__gpt_logits(g16), *lg32 = zero__gpt_logits(g32);
    double num = 0, den = 0;
    for (size_t i = 0; i < (size_t)B * T * c.vocab; i++) {
        num += (lg16[i] - lg32[i]) * (double)(lg16[i] - lg32[i]);
        den += (double)lg32[i] * lg32[i];
    }
    double lerr = sqrt(num / den);
    CHECK(lerr < tol, "%s logits: relative L2 error %.4g (expected < %.3g)", zero_dtype_name(dt),
          lerr, tol);
    CHECK(fabs(l16 - l32) < tol * l32, "%s loss %.6f vs fp32 %.6f (expected within %.3g)",
          zero_dtype_name(dt), l16, l32, tol);
    CHECK(zero__gpt_backward(g16) == ZERO_OK, "backward %s", zero_dtype_name(dt));
    CHECK(zero__gpt_backward(g32) == ZERO_OK, "backward fp32");
    const double scale = zero_engine_loss_scale(e16);
    double worst = 0;
    for (int u = 0; u < zero_engine_unit_count(e16); u++) {
        size_t n16, n32;
        float *a = read_grads(e16, u, &n16), *b = read_grads(e32, u, &n32);
        for (int t = 0; t < zero_engine_tensor_count(e16, u); t++) {
            const zero_tensor_desc_t *d = zero_engine_tensor_desc(e16, u, t);
            size_t off = zero_engine_tensor_offset(e16, u, t), n = 1;
            for (int k = 0; k < d->ndim; k++) n *= d->shape[k];
            double s = 0, r = 0;
            for (size_t i = off; i < off + n; i++) {
                double x = a[i] / scale - b[i];
                s += x * x;
                r += (double)b[i] * b[i];
            }
            double err = r > 0 ? sqrt(s / r) : sqrt(s);
            worst = fmax(worst, err);
            CHECK(err < tol, "%s gradient of %s.%s: relative L2 error %.4g (expected < %.3g)",
                  zero_dtype_name(dt), zero_engine_unit_name(e16, u), d->name, err, tol);
        }
        free(a);
        free(b);
    }
    printf("%s vs fp32: loss %.6f vs %.6f, logits error %.3g, worst gradient error %.3g (bound "
           "%.3g), loss scale %g\n",
           zero_dtype_name(dt), l16, l32, lerr, worst, tol, scale);
    zero__gpt_free(g16);
    zero__gpt_free(g32);
    zero_engine_free(e16);
    zero_engine_free(e32);
}

/* ------------------------------------------------------------------------------ init, ckpt */

static void test_init_and_checkpointing(zero_dtype_t dt) {
    const zero_gpt_config_t c = {3, 2, 32, 61, 16, {0}, {0}};
    const int B = 2, T = 16;
    /* same seed: the same default init in both engines */
    zero_engine_t *ea = make_engine(dt, 1e-3f, 0, 10, 2), *eb = make_engine(dt, 1e-3f, 0, 10, 2);
    zero_gpt_t *ga = make_model(&c, ea, B, 0), *gb = make_model(&c, eb, B, 1);
    int32_t tok[B * T], tgt[B * T];
    random_batch(tok, tgt, B * T, c.vocab);
    float la = 0, lb = 0;
    CHECK(zero__gpt_forward(ga, tok, tgt, B, T, &la) == ZERO_OK, "forward");
    CHECK(zero__gpt_forward(gb, tok, tgt, B, T, &lb) == ZERO_OK, "forward (checkpointing)");
    CHECK(fabs(la - log((double)c.vocab)) < 0.05,
          "%s initial loss %.4f, expected about ln %d = %.4f", zero_dtype_name(dt), la, c.vocab,
          log((double)c.vocab));
    CHECK(la == lb, "%s loss with checkpointing %.9g != %.9g", zero_dtype_name(dt), lb, la);
    CHECK(zero__gpt_backward(ga) == ZERO_OK && zero__gpt_backward(gb) == ZERO_OK, "backward");
    int same = 1;
    for (int u = 0; u < zero_engine_unit_count(ea); u++) {
        size_t na, nb;
        float *a = read_grads(ea, u, &na), *b = read_grads(eb, u, &nb);
        same &= na == nb && memcmp(a, b, na * sizeof *a) == 0;
        free(a);
        free(b);
    }
    CHECK(same, "%s gradients with activation checkpointing differ", zero_dtype_name(dt));
    /* the activation memory holds 16-bit activations: about half the fp32 model's */
    zero_engine_t *e32 = make_engine(ZERO_DTYPE_FP32, 1e-3f, 0, 10, 2);
    zero_gpt_t *g32 = make_model(&c, e32, B, 0);
    double ratio = (double)zero__gpt_activation_bytes(ga) / (double)zero__gpt_activation_bytes(g32);
    CHECK(ratio < 0.8, "%s activations %zu bytes vs fp32 %zu (expected well under fp32's)",
          zero_dtype_name(dt), zero__gpt_activation_bytes(ga), zero__gpt_activation_bytes(g32));
    zero__gpt_free(g32);
    zero_engine_free(e32);
    zero__gpt_free(ga);
    zero__gpt_free(gb);
    zero_engine_free(ea);
    zero_engine_free(eb);
}

/* ------------------------------------------------------------------------------ accuracy */

/* Train `steps` steps in dt on ds, return the validation loss over `vb` batches. */
static double train_val_loss(zero_dtype_t dt, const zero_dataset_t *ds, int steps, int vb,
                             double *secs) {
    const zero_gpt_config_t c = {2, 4, 64, 256, 64, {0}, {0}};
    const int B = 8, T = 64;
    /* one thread: with a model this small, two threads mostly wait for each other (and for the
     * other jobs of a shared machine) at every kernel's fork and join */
    zero_engine_t *eng = make_engine(dt, 4e-3f, 10, steps, 1);
    zero_gpt_t *g = make_model(&c, eng, B, 0);
    int32_t *x = malloc(sizeof(int32_t) * B * T), *y = malloc(sizeof(int32_t) * B * T);
    uint64_t rng = 1234;
    double t0 = zero_time_now();
    int skipped = 0;
    for (int s = 0; s < steps; s++) {
        zero__data_train_batch(ds, &rng, B, T, x, y, NULL);
        float loss;
        zero_step_stats_t st;
        if (zero__gpt_forward(g, x, y, B, T, &loss) || zero__gpt_backward(g) ||
            zero_engine_step(eng, &st)) {
            CHECK(0, "%s training step %d: %s", zero_dtype_name(dt), s, zero_last_error());
            break;
        }
        skipped += st.skipped;
    }
    *secs = zero_time_now() - t0;
    CHECK(skipped == 0, "%s: %d steps skipped (expected none)", zero_dtype_name(dt), skipped);
    double sum = 0;
    int n = 0;
    size_t windows = zero__data_val_windows(ds, T);
    for (int b = 0; b < vb && (size_t)(b + 1) * B <= windows; b++) {
        float loss;
        zero__data_val_batch(ds, (size_t)b, B, T, x, y);
        if (zero__gpt_forward(g, x, y, B, T, &loss) == ZERO_OK) {
            sum += loss;
            n++;
        }
    }
    free(x);
    free(y);
    zero__gpt_free(g);
    zero_engine_free(eng);
    return n ? sum / n : NAN;
}

static void test_accuracy(void) {
    zero_dataset_t ds;
    memset(&ds, 0, sizeof ds);
    const char *shared = getenv("ZERO_SHARED_DIR");
    char path[512] = "";
    if (shared && shared[0]) {
        snprintf(path, sizeof path, "%s/data/tinyshakespeare.txt", shared);
        if (access(path, R_OK) != 0) path[0] = 0;
    }
    zero_status_t st =
        path[0] ? zero__data_open(&ds, path, NULL, 256) : zero__data_builtin(&ds, 400000, 1);
    if (!st) st = zero__data_split(&ds, 0.1, 64);
    CHECK(st == ZERO_OK, "data: %s", zero_last_error());
    if (st) return;
    printf("data: %s (%zu tokens)\n", ds.source, ds.count);
    const int steps = 500, vb = 16;
    double s32, s16;
    double v32 = train_val_loss(ZERO_DTYPE_FP32, &ds, steps, vb, &s32);
    double v16 = train_val_loss(ZERO_DTYPE_BF16, &ds, steps, vb, &s16);
    printf("accuracy: %d steps, validation loss fp32 %.4f (%.1f s), bf16 %.4f (%.1f s), %+.2f%%\n",
           steps, v32, s32, v16, s16, 100.0 * (v16 - v32) / v32);
    printf("unigram entropy of the validation text: %.4f\n",
           zero__data_unigram_entropy(&ds, ds.train_count, ds.count));
    /* a model that ignores context cannot beat the unigram entropy: the runs must be past it */
    double uni = zero__data_unigram_entropy(&ds, ds.train_count, ds.count);
    CHECK(isfinite(v32) && v32 < uni - 0.5,
          "fp32 run did not learn: validation loss %.4f, unigram entropy %.4f", v32, uni);
    CHECK(fabs(v16 - v32) <= 0.03 * v32, "bf16 validation loss %.4f not within 3%% of fp32's %.4f",
          v16, v32);
    zero__data_free(&ds);
}

int main(int argc, char **argv) {
    int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    /* The accuracy run checks numerics, which a sanitizer build does not change, at 5-20x the
     * time: the other cases cover the memory and threading behaviour of the 16-bit path. */
    quick = 1;
    printf("sanitizer build: accuracy run skipped\n");
#endif
    test_against_fp32(ZERO_DTYPE_BF16, 0.075);
    test_against_fp32(ZERO_DTYPE_FP16, 0.01);
    test_init_and_checkpointing(ZERO_DTYPE_BF16);
    test_init_and_checkpointing(ZERO_DTYPE_FP16);
    if (!quick) test_accuracy();
    return check_report();
}
