/* test_generate.c — the generator (zero/generate.h) and the sampler.
 *
 * - The decode attention kernel against zero__attention_forward on the same q, k, v: one row at
 *   a time, a whole prefill and a chunk after a prefix; bitwise where the softmax runs on AVX2
 *   or above (kernels.h), else within 1e-6.
 *   The same in bf16 against zero__attention_forward_lp.
 * - KV-cache decoding against the training forward (zero__gpt_forward over the whole sequence)
 *   of a random 2-layer model saved as a checkpoint at world 2: at every position of two
 *   sequences, stepping token by token, and after prefills of 1..160 tokens (two chunks). fp32:
 *   the tolerance, 1e-5 of the largest logit, allows the matmul library's other blocking for
 *   fewer rows. bf16 (both sides in bf16 on the same rounded weights): 1e-2 of the largest logit
 *   (a flipped bf16 rounding of an activation); on this machine the run is bitwise. The run
 *   prints the largest difference and how many positions matched bitwise.
 * - A model trained for 30 steps on 2 ranks and saved: greedy decoding from the checkpoint and
 *   from its safetensors export (zero_ckpt_export_safetensors) gives the same tokens and the
 *   same logits bitwise, twice; sampling with a seed repeats; top-k 1 is greedy.
 * - The sampler against closed forms: top-k 1 and a tiny top-p are the arg-max (first index on
 *   ties); frequencies of 40000 draws within 4.5 sigma of softmax(logits / T) restricted by
 *   top-k and top-p (Hugging Face's rule, edge cases worked out by hand).
 * - Bad input, each a status and a message naming the thing: an empty prompt, a prompt longer
 *   than the cache, a token outside the vocabulary, a missing path, a truncated safetensors file,
 *   a truncated checkpoint shard, an MoE checkpoint, heads other than the checkpoint's, bad
 *   sampler parameters; max_seq beyond the context is the context.
 */
#include "check.h"
#include "core/core_internal.h"
#include "kernels/isa.h"
#include "kernels/kernels.h"
#include "kernels/kernels_lp.h"
#include "model/gpt.h"
#include "train/harness.h"
#include "zero/zero.h"

#define MODEL_TEST_SEED 0x9e1e7a7eull
#include "model/model_test_util.h"
#include "random_model.h"

#include <math.h>
#include <string.h>
#include <sys/stat.h>

static char dir[256];

static float max_abs(const float *a, size_t n) {
    float m = 0.0f;
    for (size_t i = 0; i < n; i++) m = fmaxf(m, fabsf(a[i]));
    return m;
}

/* ------------------------------------------------------------------------------ kernel */

static void test_attention_decode(void) {
    const size_t B = 2, T = 70, C = 64, NH = 4, hs = C / NH, S = 80;
    float *qkv = malloc(B * T * 3 * C * sizeof(float)), *ref = malloc(B * T * C * sizeof(float));
    float *att = malloc(B * NH * T * T * sizeof(float)), *out = malloc(B * T * C * sizeof(float));
    float *kc = calloc(B * NH * S * hs, sizeof(float)),
          *vc = calloc(B * NH * S * hs, sizeof(float));
    float *scr = malloc(zero__attention_decode_scratch_count(S, 2) * sizeof(float));
    for (size_t i = 0; i < B * T * 3 * C; i++) qkv[i] = (float)nrand();
    zero__attention_forward(ref, att, qkv, B, T, C, NH, 2);
    for (size_t b = 0; b < B; b++)
        for (size_t t = 0; t < T; t++)
            for (size_t h = 0; h < NH; h++) {
                const float *row = qkv + (b * T + t) * 3 * C + h * hs;
                memcpy(kc + ((b * NH + h) * S + t) * hs, row + C, hs * sizeof(float));
                memcpy(vc + ((b * NH + h) * S + t) * hs, row + 2 * C, hs * sizeof(float));
            }
    const int exact = zero__isa_selected() >= ZERO__ISA_AVX2;
    /* (pos, rows) pieces: one prefill; a prefix then a chunk; then rows one at a time */
    const size_t pieces[][2] = {{0, T}, {0, 30}, {30, T - 30}};
    for (size_t k = 0; k < 3 + T; k++) {
        size_t pos = k < 3 ? pieces[k][0] : k - 3, n = k < 3 ? pieces[k][1] : 1;
        /* the queries of rows [pos, pos + n) of each sequence, (B, n, 3C) */
        float *q = malloc(B * n * 3 * C * sizeof(float));
        for (size_t b = 0; b < B; b++)
            memcpy(q + b * n * 3 * C, qkv + (b * T + pos) * 3 * C, n * 3 * C * sizeof(float));
        zero__attention_decode(out, scr, q, 3 * C, kc, vc, S * hs, B, n, pos, C, NH, 2);
        size_t diff = 0;
        double worst = 0;
        for (size_t b = 0; b < B; b++)
            for (size_t i = 0; i < n * C; i++) {
                float x = out[b * n * C + i], y = ref[(b * T + pos) * C + i];
                diff += memcmp(&x, &y, sizeof x) != 0;
                worst = fmax(worst, fabs((double)x - y));
            }
        if (exact)
            CHECK(diff == 0,
                  "decode attention rows [%zu, %zu): %zu of %zu elements differ from "
                  "the training forward (largest %.3g)",
                  pos, pos + n, diff, B * n * C, worst);
        else
            CHECK(worst <= 1e-6, "decode attention rows [%zu, %zu): largest difference %.3g", pos,
                  pos + n, worst);
        free(q);
    }
    free(qkv), free(ref), free(att), free(out), free(kc), free(vc), free(scr);
}

/* The same in bf16: zero__attention_decode_lp against zero__attention_forward_lp, bitwise (both
 * widen, run the fp32 block and round once). */
static void test_attention_decode_lp(void) {
    const size_t B = 2, T = 70, C = 64, NH = 4, hs = C / NH, S = 80;
    const zero_dtype_t dt = ZERO_DTYPE_BF16;
    uint16_t *qkv = malloc(B * T * 3 * C * 2), *ref = malloc(B * T * C * 2);
    uint16_t *out = malloc(B * T * C * 2), *kc = calloc(B * NH * S * hs, 2);
    uint16_t *vc = calloc(B * NH * S * hs, 2);
    float *att = malloc(B * NH * T * T * sizeof(float));
    float *scr = malloc(ZERO_MAX(zero__attention_scratch_count_lp(T, hs, 2),
                                 zero__attention_decode_scratch_count_lp(S, hs, 2)) *
                        sizeof(float));
    for (size_t i = 0; i < B * T * 3 * C; i++) qkv[i] = zero_fp32_to_bf16((float)nrand());
    zero__attention_forward_lp(ref, att, qkv, scr, dt, B, T, C, NH, 2);
    for (size_t b = 0; b < B; b++)
        for (size_t t = 0; t < T; t++)
            for (size_t h = 0; h < NH; h++) {
                const uint16_t *row = qkv + (b * T + t) * 3 * C + h * hs;
                memcpy(kc + ((b * NH + h) * S + t) * hs, row + C, hs * 2);
                memcpy(vc + ((b * NH + h) * S + t) * hs, row + 2 * C, hs * 2);
            }
    const size_t pieces[][2] = {{0, T}, {0, 30}, {30, T - 30}, {69, 1}, {5, 1}};
    for (size_t k = 0; k < ZERO_ARRAY_LEN(pieces); k++) {
        const size_t pos = pieces[k][0], n = pieces[k][1];
        uint16_t *q = malloc(B * n * 3 * C * 2);
        for (size_t b = 0; b < B; b++)
            memcpy(q + b * n * 3 * C, qkv + (b * T + pos) * 3 * C, n * 3 * C * 2);
        zero__attention_decode_lp(out, scr, q, 3 * C, kc, vc, S * hs, dt, B, n, pos, C, NH, S, 2);
        size_t diff = 0;
        for (size_t b = 0; b < B; b++)
            for (size_t i = 0; i < n * C; i++)
                diff += out[b * n * C + i] != ref[(b * T + pos) * C + i];
        CHECK(diff == 0 || zero__isa_selected() < ZERO__ISA_AVX2,
              "bf16 decode attention rows [%zu, %zu): %zu elements differ", pos, pos + n, diff);
        free(q);
    }
    free(qkv), free(ref), free(out), free(kc), free(vc), free(att), free(scr);
}

/* ------------------------------------------------------------------------------ parity */

/* dt: the generator's and the training forward's compute dtype; tol: of the largest logit */
static void test_parity(zero_dtype_t dt, double rel_tol) {
    const zero_gpt_config_t cfg = {.layers = 2, .heads = 4, .dim = 64, .vocab = 256, .seq = 160};
    const int B = 2, T = 160, V = cfg.vocab;
    zero_engine_params_t ep = zero_engine_params_default();
    ep.threads = 2;
    ep.compute_dtype = dt;
    zero_engine_t *eng = NULL;
    zero_gpt_t *gpt = NULL;
    CHECK(zero_engine_init(&eng, &ep) == ZERO_OK, "engine");
    CHECK(zero__gpt_init(&gpt, &cfg, eng, B, 0, 2) == ZERO_OK, "gpt");
    randomize(eng, 0.1);
    char save[300];
    snprintf(save, sizeof save, "%s/parity-%s", dir, zero_dtype_name(dt));
    char json[200];
    save_model(eng, gpt_json(&cfg, json), save, 2);
    int32_t *tok = malloc((size_t)B * T * sizeof *tok);
    for (int i = 0; i < B * T; i++) tok[i] = (int32_t)(urand() * V);
    CHECK(zero__gpt_forward(gpt, tok, NULL, B, T, NULL) == ZERO_OK, "full forward");
    const float *full = zero__gpt_logits(gpt);
    const float scale = max_abs(full, (size_t)B * T * V), tol = (float)rel_tol * scale;

    zero_generator_params_t gp = zero_generator_params_default();
    gp.batch = B;
    gp.threads = 2;
    gp.dtype = dt;
    zero_generator_t *g = NULL;
    CHECK(zero_generator_init(&g, save, &gp) == ZERO_OK, "generator from %s", save);
    if (!g) goto out;
    const zero_generator_info_t *in = zero_generator_info(g);
    CHECK(in->layers == 2 && in->heads == 4 && in->dim == 64 && in->vocab == 256 &&
              in->seq == 160 && in->max_seq == 160 && !strcmp(in->format, "checkpoint"),
          "info");
    CHECK(in->kv_cache_bytes == 2ull * 2 * B * 160 * 64 * zero_dtype_size(dt), "KV bytes %zu",
          in->kv_cache_bytes);
    CHECK(in->dtype == dt && in->weight_bytes >= in->param_count * zero_dtype_size(dt) &&
              in->weight_bytes < (in->param_count + 16 * 30) * zero_dtype_size(dt),
          "weight bytes %zu for %zu parameters of %s", in->weight_bytes, in->param_count,
          zero_dtype_name(dt));
    CHECK(in->param_count == zero__gpt_param_count(&cfg), "params");
    int32_t *col = malloc((size_t)B * T * sizeof *col);
    double worst = 0;
    int bitwise = 0, positions = 0;
    /* compare the generator's (B, V) logits with the full forward's row t of each sequence */
#define COMPARE(lg, t, what)                                                                       \
    do {                                                                                           \
        int same = 1;                                                                              \
        for (int b = 0; b < B; b++)                                                                \
            for (int v = 0; v < V; v++) {                                                          \
                float x = (lg)[(size_t)b * V + v], y = full[((size_t)b * T + (t)) * V + v];        \
                worst = fmax(worst, fabs((double)x - y));                                          \
                same &= x == y;                                                                    \
                if (fabsf(x - y) > tol) {                                                          \
                    CHECK(0, "%s: position %d sequence %d token %d: %.8g vs %.8g", what, (t), b,   \
                          v, x, y);                                                                \
                    b = B, v = V;                                                                  \
                }                                                                                  \
            }                                                                                      \
        bitwise += same, positions++;                                                              \
    } while (0)
    /* token by token */
    const float *lg = NULL;
    for (int t = 0; t < T; t++) {
        for (int b = 0; b < B; b++) col[b] = tok[b * T + t];
        zero_status_t st =
            t == 0 ? zero_generator_prefill(g, col, 1, &lg) : zero_generator_step(g, col, &lg);
        CHECK(st == ZERO_OK && zero_generator_position(g) == t + 1, "step %d", t);
        COMPARE(lg, t, "step");
    }
    /* prefills of n tokens (1..160; two chunks past 128), then the remaining steps after 150 */
    const int ns[] = {1, 2, 7, 64, 127, 128, 129, 150, 160};
    for (size_t k = 0; k < ZERO_ARRAY_LEN(ns); k++) {
        const int n = ns[k];
        for (int b = 0; b < B; b++) memcpy(col + b * n, tok + b * T, (size_t)n * sizeof *col);
        zero_generator_reset(g);
        CHECK(zero_generator_prefill(g, col, n, &lg) == ZERO_OK, "prefill %d", n);
        COMPARE(lg, n - 1, "prefill");
    }
    zero_generator_reset(g);
    for (int b = 0; b < B; b++) memcpy(col + b * 150, tok + b * T, 150 * sizeof *col);
    CHECK(zero_generator_prefill(g, col, 150, NULL) == ZERO_OK, "prefill 150");
    for (int t = 150; t < T; t++) {
        for (int b = 0; b < B; b++) col[b] = tok[b * T + t];
        CHECK(zero_generator_step(g, col, &lg) == ZERO_OK, "step %d after prefill", t);
        COMPARE(lg, t, "step after prefill");
    }
#undef COMPARE
    printf("%s KV-cache logits against the full forward: largest difference %.3g (%.2g of the "
           "largest logit), %d of %d positions bitwise\n",
           zero_dtype_name(dt), worst, worst / scale, bitwise, positions);
    /* the cache is full: one more token is refused, naming the sizes */
    zero_status_t st = zero_generator_step(g, col, &lg);
    CHECK(st == ZERO_ERR_INVALID_ARG && strstr(zero_last_error(), "160 positions"),
          "a step past the cache: %s", zero_last_error());
    free(col);
out:
    zero_generator_free(g);
    free(tok);
    zero__gpt_free(gpt);
    zero_engine_free(eng);
}

/* ------------------------------------------------------------------------------ trained */

/* greedy (or sampled) tokens from prompt into out[n]; and the logits of the first prediction */
static void decode(zero_generator_t *g, const int32_t *prompt, int plen, int n,
                   const zero_sample_params_t *sp, uint64_t seed, int32_t *out, float *first) {
    const float *lg = NULL;
    zero_generator_reset(g);
    CHECK(zero_generator_prefill(g, prompt, plen, &lg) == ZERO_OK, "prefill");
    if (!lg) return;
    const int V = zero_generator_info(g)->vocab;
    if (first) memcpy(first, lg, (size_t)V * sizeof *first);
    uint64_t rng = seed;
    for (int i = 0; i < n; i++) {
        CHECK(zero_sample(lg, V, sp, &rng, &out[i]) == ZERO_OK, "sample");
        if (i + 1 < n) CHECK(zero_generator_step(g, &out[i], &lg) == ZERO_OK, "step %d", i);
    }
}

static void test_trained(void) {
    char save[300], st_path[340], latest[320];
    snprintf(save, sizeof save, "%s/trained", dir);
    snprintf(st_path, sizeof st_path, "%s/trained.safetensors", dir);
    snprintf(latest, sizeof latest, "%s/latest", save);
    const char *args[] = {"train",
                          "-q",
                          "--no-peak",
                          "--steps",
                          "30",
                          "--ranks",
                          "2",
                          "--set",
                          "model.layers=2",
                          "--set",
                          "model.dim=32",
                          "--set",
                          "model.heads=2",
                          "--set",
                          "model.seq=64",
                          "--set",
                          "train.samples=0",
                          "--save-dir",
                          save,
                          NULL};
    CHECK(train_cli(args) == 0, "zero train --ranks 2 --save-dir %s", save);
    zero_ckpt_t *c = NULL;
    CHECK(zero_ckpt_open(&c, save) == ZERO_OK && zero_ckpt_world(c) == 2, "saved at world 2");
    CHECK(c && zero_ckpt_export_safetensors(c, zero__gpt_names(), st_path, ZERO_DTYPE_FP32) ==
                   ZERO_OK,
          "export %s", st_path);
    zero_ckpt_close(c);
    zero_generator_params_t gp = zero_generator_params_default();
    zero_generator_t *a = NULL, *b = NULL;
    CHECK(zero_generator_init(&a, latest, &gp) == ZERO_OK, "from %s", latest);
    CHECK(zero_generator_init(&b, st_path, &gp) == ZERO_OK, "from %s", st_path);
    if (!a || !b) goto out;
    CHECK(zero_generator_info(b)->heads == 2 &&
              !strcmp(zero_generator_info(b)->format, "safetensors"),
          "heads from zero convert's metadata");
    const char *text = "The cat ";
    int32_t prompt[8];
    for (int i = 0; i < 8; i++) prompt[i] = (unsigned char)text[i];
    enum { N = 40 };
    int32_t ga[N], gb[N], gc[N];
    float la[256], lb[256];
    zero_sample_params_t greedy = zero_sample_params_default();
    greedy.greedy = 1;
    decode(a, prompt, 8, N, &greedy, 1, ga, la);
    decode(b, prompt, 8, N, &greedy, 1, gb, lb);
    CHECK(!memcmp(ga, gb, sizeof ga), "greedy: checkpoint and safetensors give the same tokens");
    CHECK(!memcmp(la, lb, sizeof la), "the first logits bitwise equal");
    decode(a, prompt, 8, N, &greedy, 1, gc, NULL);
    CHECK(!memcmp(ga, gc, sizeof ga), "greedy twice: the same tokens");
    zero_sample_params_t sp = zero_sample_params_default();
    sp.temperature = 0.9f;
    decode(a, prompt, 8, N, &sp, 42, gb, NULL);
    decode(b, prompt, 8, N, &sp, 42, gc, NULL);
    CHECK(!memcmp(gb, gc, sizeof gb), "sampling with seed 42 repeats");
    sp.top_k = 1;
    decode(a, prompt, 8, N, &sp, 7, gc, NULL);
    CHECK(!memcmp(ga, gc, sizeof ga), "top-k 1 is greedy");
    printf("greedy after \"%s\": \"", text);
    for (int i = 0; i < N; i++) putchar(ga[i] >= 32 && ga[i] < 127 ? ga[i] : '.');
    printf("\"\n");
out:
    zero_generator_free(a);
    zero_generator_free(b);
}

/* ------------------------------------------------------------------------------ sampler */

static void test_sampler(void) {
    const float l[6] = {1.0f, 3.0f, 3.0f, 2.0f, -1.0f, 0.5f};
    zero_sample_params_t p = zero_sample_params_default();
    uint64_t rng = 5;
    int32_t tk = -1;
    p.greedy = 1;
    CHECK(zero_sample(l, 6, &p, &rng, &tk) == ZERO_OK && tk == 1, "greedy: first maximal index");
    p = zero_sample_params_default();
    p.top_p = 1e-6f;
    CHECK(zero_sample(l, 6, &p, &rng, &tk) == ZERO_OK && tk == 1, "tiny top-p: the arg-max");
    /* frequencies: logits log(w) with w = (5, 3, 2, 0...) / T = 1; top_p 0.6 keeps 5 and 3
     * (ascending cumulative 0.2 <= 0.4 dropped, 0.5 > 0.4 kept); top_k 2 keeps the same */
    const float lw[4] = {logf(5.0f), logf(3.0f), logf(2.0f), -INFINITY};
    const struct {
        int top_k;
        float top_p, temperature;
        double want[4];
    } cases[] = {
        {0, 1.0f, 1.0f, {0.5, 0.3, 0.2, 0}},
        {0, 0.6f, 1.0f, {5 / 8., 3 / 8., 0, 0}},
        {2, 1.0f, 1.0f, {5 / 8., 3 / 8., 0, 0}},
        /* T = 0.5 squares the weights: 25, 9, 4 */
        {0, 1.0f, 0.5f, {25 / 38., 9 / 38., 4 / 38., 0}},
        {3, 0.9f, 1.0f, {0.5, 0.3, 0.2, 0}}, /* 0.2 > 0.1: all three stay */
    };
    for (size_t c = 0; c < ZERO_ARRAY_LEN(cases); c++) {
        p = zero_sample_params_default();
        p.top_k = cases[c].top_k;
        p.top_p = cases[c].top_p;
        p.temperature = cases[c].temperature;
        int n[4] = {0};
        const int draws = 40000;
        rng = 1000 + c;
        for (int i = 0; i < draws; i++) {
            CHECK(zero_sample(lw, 4, &p, &rng, &tk) == ZERO_OK, "sample");
            n[tk]++;
        }
        for (int k = 0; k < 4; k++) {
            double pk = cases[c].want[k], sd = sqrt(draws * pk * (1 - pk));
            CHECK(fabs(n[k] - draws * pk) <= 4.5 * sd + (pk == 0 ? 0 : 1),
                  "case %zu token %d: %d of %d draws, expected %.1f", c, k, n[k], draws,
                  draws * pk);
        }
    }
    p = zero_sample_params_default();
    p.top_p = 0.0f;
    CHECK(zero_sample(l, 6, &p, &rng, &tk) == ZERO_ERR_INVALID_ARG &&
              strstr(zero_last_error(), "top_p"),
          "top_p 0 refused");
    p = zero_sample_params_default();
    p.top_k = -2;
    CHECK(zero_sample(l, 6, &p, &rng, &tk) == ZERO_ERR_INVALID_ARG &&
              strstr(zero_last_error(), "top_k"),
          "negative top_k refused");
}

/* ------------------------------------------------------------------------------ errors */

static void copy_prefix(const char *from, const char *to, long keep) {
    FILE *f = fopen(from, "rb"), *o = fopen(to, "wb");
    char buf[4096];
    long done = 0;
    size_t n;
    while (f && o && done < keep && (n = fread(buf, 1, sizeof buf, f)) > 0) {
        size_t m = (size_t)(keep - done) < n ? (size_t)(keep - done) : n;
        fwrite(buf, 1, m, o);
        done += (long)m;
    }
    if (f) fclose(f);
    if (o) fclose(o);
}

static long file_size(const char *p) {
    struct stat sb;
    return stat(p, &sb) ? -1 : (long)sb.st_size;
}

#define EXPECT_ERR(call, status, needle, what)                                                     \
    do {                                                                                           \
        zero_status_t st_ = (call);                                                                \
        CHECK(st_ == (status) && strstr(zero_last_error(), (needle)),                              \
              "%s: status %d, message '%s' (expected %d naming '%s')", what, st_,                  \
              zero_last_error(), status, needle);                                                  \
    } while (0)

static void test_errors(void) {
    char path[400], latest[340];
    snprintf(latest, sizeof latest, "%s/trained/latest", dir);
    zero_generator_params_t gp = zero_generator_params_default();
    zero_generator_t *g = NULL;
    snprintf(path, sizeof path, "%s/no-such-model", dir);
    EXPECT_ERR(zero_generator_init(&g, path, &gp), ZERO_ERR_IO, "no-such-model", "missing path");
    gp.max_seq = 65;
    CHECK(zero_generator_init(&g, latest, &gp) == ZERO_OK && zero_generator_info(g)->max_seq == 64,
          "max_seq past the context: the context");
    zero_generator_free(g);
    g = NULL;
    gp.max_seq = 0;
    gp.heads = 4;
    EXPECT_ERR(zero_generator_init(&g, latest, &gp), ZERO_ERR_CONFIG, "model.heads = 2",
               "heads other than the checkpoint's");
    gp = zero_generator_params_default();
    /* a truncated safetensors file: cut in the data, and cut in the header */
    char st_path[340];
    snprintf(st_path, sizeof st_path, "%s/trained.safetensors", dir);
    const long size = file_size(st_path);
    snprintf(path, sizeof path, "%s/cut.safetensors", dir);
    copy_prefix(st_path, path, size - 100);
    EXPECT_ERR(zero_generator_init(&g, path, &gp), ZERO_ERR_FORMAT, "cut.safetensors",
               "safetensors cut in its data");
    copy_prefix(st_path, path, 20);
    EXPECT_ERR(zero_generator_init(&g, path, &gp), ZERO_ERR_FORMAT, "cut.safetensors",
               "safetensors cut in its header");
    /* a checkpoint with a truncated shard */
    char ck[300], shard[400], cmd[1000];
    snprintf(ck, sizeof ck, "%s/cutckpt", dir);
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -r '%s/trained' '%s'", ck, dir, ck);
    CHECK(system(cmd) == 0, "%s", cmd);
    snprintf(cmd, sizeof cmd, "ls -d '%s'/step-* | head -1", ck);
    FILE *ls = popen(cmd, "r");
    char step[300] = "";
    if (ls && fgets(step, sizeof step, ls)) step[strcspn(step, "\n")] = 0;
    if (ls) pclose(ls);
    snprintf(shard, sizeof shard, "%s/rank-00001.params", step);
    CHECK(truncate(shard, file_size(shard) / 2) == 0, "truncate %s", shard);
    EXPECT_ERR(zero_generator_init(&g, step, &gp), ZERO_ERR_FORMAT, "rank-00001",
               "truncated checkpoint shard");
    /* an MoE checkpoint is refused, naming the key */
    {
        const zero_gpt_config_t cfg = {.layers = 1, .heads = 2, .dim = 32, .vocab = 64, .seq = 8};
        zero_engine_params_t ep = zero_engine_params_default();
        zero_engine_t *eng = NULL;
        zero_gpt_t *gpt = NULL;
        CHECK(zero_engine_init(&eng, &ep) == ZERO_OK &&
                  zero__gpt_init(&gpt, &cfg, eng, 1, 0, 1) == ZERO_OK,
              "tiny model");
        snprintf(path, sizeof path, "%s/moe", dir);
        save_model(eng,
                   "{\"layers\": 1, \"heads\": 2, \"dim\": 32, \"vocab\": 64, \"seq\": 8, "
                   "\"moe\": {\"experts\": 4}}",
                   path, 2);
        EXPECT_ERR(zero_generator_init(&g, path, &gp), ZERO_ERR_UNSUPPORTED, "model.moe.experts",
                   "MoE checkpoint");
        /* the same weights as a dense model: prompt errors */
        snprintf(path, sizeof path, "%s/small", dir);
        char json[200];
        save_model(eng, gpt_json(&cfg, json), path, 2);
        zero__gpt_free(gpt);
        zero_engine_free(eng);
    }
    CHECK(zero_generator_init(&g, path, &gp) == ZERO_OK, "small model");
    if (!g) return;
    int32_t toks[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    EXPECT_ERR(zero_generator_prefill(g, toks, 0, NULL), ZERO_ERR_INVALID_ARG, "empty",
               "empty prompt");
    EXPECT_ERR(zero_generator_prefill(g, toks, 9, NULL), ZERO_ERR_INVALID_ARG, "8 positions",
               "prompt longer than the context");
    toks[3] = 64;
    EXPECT_ERR(zero_generator_prefill(g, toks, 5, NULL), ZERO_ERR_INVALID_ARG, "token 64",
               "token outside the vocabulary");
    CHECK(zero_generator_position(g) == 0, "a refused prefill changes nothing");
    toks[3] = 63;
    CHECK(zero_generator_prefill(g, toks, 8, NULL) == ZERO_OK, "8 tokens fill the context");
    zero_generator_free(g);
}

int main(void) {
    snprintf(dir, sizeof dir, "test_generate.%d", (int)getpid());
    mkdir(dir, 0755);
    test_attention_decode();
    test_attention_decode_lp();
    test_sampler();
    test_parity(ZERO_DTYPE_FP32, 1e-5);
    test_parity(ZERO_DTYPE_BF16, 1e-2);
    test_trained();
    test_errors();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return check_report();
}
