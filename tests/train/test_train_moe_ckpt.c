/* test_train_moe_ckpt.c — checkpoints of MoE-GPT runs through the trainer (src/train/checkpoint.c
 * over src/ckpt), on the built-in corpus with thread ranks: a 2-layer model whose layer 1 is MoE
 * (4 experts, top-2, one shared expert, capacity factor 1 so that tokens are dropped, aux and z
 * losses on).
 *
 * Oracles: (1) exact resume: N + M steps with a save at N and a resume from it give the
 * uninterrupted run's weights fingerprint and last-step loss, bitwise (fp32 and bf16, stages 1 and
 * 3 on 2 ranks; fp32 stages 1 and 3 at ep 2 on 4 ranks); a resume that restored less (an expert's
 * moments, the step, the data position) would differ. (2) Reshard: the 2-rank stage-3 checkpoint
 * loaded at world 1 (stage 0) and world 4 (stage 1) with no step left holds the saving run's
 * fingerprint; continued with the same global batches (micro x accumulation x world = 4 sequences
 * drawn in the same order; no dropping and no aux loss, so that the micro-batch grouping changes
 * nothing but the summation order) its validation and last-step losses equal the uninterrupted
 * run's to 1e-5 relative (other summation orders over 3 steps; measured: 0 at world 1, 1e-7 at
 * world 4). (2b) Across ep (gradient clipping on): a 4-rank ep-2 stage-3 checkpoint loaded at ep 1
 * (stage 1) and ep 4 (stage 3) on 4 ranks holds the saving run's fingerprint and continues to the
 * uninterrupted run's weights and loss bitwise (the same batch layout, and every ep gives the same
 * bits); at 2 ranks with ep 2 and ep 1 (micro 2: the same global batch) to 1e-5 as in (2). (3) A
 * checkpoint of another model fails before training with ZERO_ERR_MISMATCH naming the key: another
 * expert count, hidden width, shared expert count or MoE interval, a dense checkpoint into an MoE
 * run and back; another top_k resumes. (4) `zero convert`: the safetensors file holds the
 * closed-form list of names and shapes (experts stacked (E, ...), GPT-2 names for the rest, no
 * dense MLP in the MoE layer), imports back through
 * --init-from to the same fingerprint at stages 0 and 3, evaluates to the saving run's validation
 * loss bitwise, samples (its report: no routing lines of zeros, "no training step" instead), and
 * into a model with 8 experts fails naming h.1.moe.router.weight.
 *
 * The ep column of the tables is model.moe.ep_size.
 */
#include "check.h"
#include "cli/cli.h"
#include "train/trainer.h"
#include "zero/zero.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define E 4
#define C 32
#define H (4 * C) /* model.moe.hidden 0: the dense MLP's 4C */
#define S 1       /* shared experts */

static char dir[256];

/* N = 3 saved steps, M = 3 more; the schedule's total is fixed so that a continuation follows the
 * same learning-rate curve. */
static const char *tiny =
    "{\"model\": {\"layers\": 2, \"heads\": 2, \"dim\": 32, \"seq\": 16,\n"
    "    \"moe\": {\"experts\": 4, \"top_k\": 2, \"every\": 2, \"shared_experts\": 1,\n"
    "              \"capacity_factor\": 1, \"min_capacity\": 0, \"z_loss_coef\": 0.001}},\n"
    " \"data\": {\"builtin_bytes\": 65536},\n"
    " \"optimizer\": {\"params\": {\"lr\": 0.003}}, \"gradient_clipping\": 1.0,\n"
    " \"scheduler\": {\"type\": \"WarmupCosineLR\", \"params\": {\"warmup_num_steps\": 2, "
    "\"total_num_steps\": 6}},\n"
    " \"zero_optimization\": {\"reduce_bucket_size\": 5000,\n"
    "     \"stage3_param_persistence_threshold\": 100},\n"
    " \"train\": {\"steps\": 6, \"eval_interval\": 0, \"samples\": 0}}\n";

typedef struct run {
    int ranks, stage, ep, steps;
    int micro, accum, eval_batches; /* 0: 2, 1, 1 */
    const char *dtype;              /* NULL: fp32 */
    const char *save_dir, *resume, *init_from;
    const char *const *sets; /* more key/value pairs, NULL-terminated (may be NULL) */
    FILE *out;               /* progress and samples (NULL: silent) */
} run_t;

/* Run the trainer in process; returns the status, *rep filled on success (free it). */
static zero_status_t train(const run_t *r, zero_train_report_t *rep) {
    zero_train_config_t c;
    zero__train_config_default(&c);
    zero_status_t st = zero__train_config_parse(&c, tiny, "tiny.json");
    const struct {
        const char *key;
        int v;
    } nums[] = {{"train.ranks", r->ranks},
                {"zero_optimization.stage", r->stage},
                {"model.moe.ep_size", r->ep ? r->ep : 1},
                {"train.steps", r->steps},
                {"train_micro_batch_size_per_gpu", r->micro ? r->micro : 2},
                {"gradient_accumulation_steps", r->accum ? r->accum : 1},
                {"train.eval_batches", r->eval_batches ? r->eval_batches : 1}};
    char num[32];
    for (size_t i = 0; !st && i < sizeof nums / sizeof *nums; i++) {
        snprintf(num, sizeof num, "%d", nums[i].v);
        st = zero__train_config_set(&c, nums[i].key, num);
    }
    if (!st && r->dtype) st = zero__train_config_set_dtype(&c, r->dtype);
    if (!st && r->save_dir) st = zero__train_config_set(&c, "train.save_dir", r->save_dir);
    if (!st && r->resume) st = zero__train_config_set(&c, "train.resume", r->resume);
    if (!st && r->init_from) st = zero__train_config_set(&c, "train.init_from", r->init_from);
    for (int i = 0; !st && r->sets && r->sets[i]; i += 2)
        st = zero__train_config_set(&c, r->sets[i], r->sets[i + 1]);
    if (st) return st;
    zero_train_io_t io = {.out = r->out};
    return zero__train_run(&c, &io, rep);
}

/* train() keeping the fingerprint and the last step's loss. */
static zero_status_t train_fp(const run_t *r, uint64_t *fp, float *loss) {
    zero_train_report_t rep;
    zero_status_t st = train(r, &rep);
    if (st) return st;
    *fp = rep.weights_fingerprint;
    if (loss) *loss = rep.last_step_loss;
    zero__train_report_free(&rep);
    return ZERO_OK;
}

static void path(char *out, size_t n, const char *name) { snprintf(out, n, "%s/%s", dir, name); }

/* (1) */
static const struct {
    int ranks, stage, ep;
    const char *dtype;
} exact_cases[] = {
    {2, 3, 1, "fp32"}, {2, 1, 1, "fp32"}, {2, 3, 1, "bf16"},
    {2, 1, 1, "bf16"}, {4, 3, 2, "fp32"}, /* expert parallelism: stacked experts in the checkpoint
                                             and the resume */
    {4, 1, 2, "fp32"},
};

static void test_exact(int ranks, int stage, int ep, const char *dtype) {
    char save[512], name[64];
    snprintf(name, sizeof name, "exact-%d-%d-%d-%s", ranks, stage, ep, dtype);
    path(save, sizeof save, name);
    uint64_t ref = 0, mid = 0, resumed = 0;
    float ref_loss = 0, resumed_loss = 1;
    run_t r = {.ranks = ranks, .stage = stage, .ep = ep, .steps = 6, .dtype = dtype};
    CHECK(train_fp(&r, &ref, &ref_loss) == ZERO_OK, "%s: uninterrupted run: %s", name,
          zero_last_error());
    r.steps = 3;
    r.save_dir = save;
    CHECK(train_fp(&r, &mid, NULL) == ZERO_OK, "%s: first 3 steps: %s", name, zero_last_error());
    r.steps = 6;
    r.resume = "latest";
    CHECK(train_fp(&r, &resumed, &resumed_loss) == ZERO_OK, "%s: resume: %s", name,
          zero_last_error());
    printf("%s: uninterrupted %016llx loss %.7f, resumed at 3 %016llx loss %.7f (at 3: %016llx)\n",
           name, (unsigned long long)ref, (double)ref_loss, (unsigned long long)resumed,
           (double)resumed_loss, (unsigned long long)mid);
    CHECK(ref == resumed, "%s: resumed run %016llx differs from uninterrupted %016llx", name,
          (unsigned long long)resumed, (unsigned long long)ref);
    CHECK(ref_loss == resumed_loss, "%s: last step's loss %.9g resumed, %.9g uninterrupted", name,
          (double)resumed_loss, (double)ref_loss);
    CHECK(mid != ref, "%s: the last 3 steps did not change the weights", name);
}

/* (2) Saved by 2 ranks at stage 3 (micro 2, accumulation 1); loaded with the same global batch. */
static const struct {
    int ranks, stage, ep, micro, accum, eval_batches;
} reshard_cases[] = {
    {1, 0, 1, 2, 2, 2}, /* world 1: 2 micro-batches of 2 */
    {4, 1, 1, 1, 1, 1}, /* world 4: one sequence per rank */
};

/* tokens are never dropped and the aux loss is off: each token's loss and gradient depend on it
 * alone, so the micro-batch grouping only reorders sums */
static const char *const separable[] = {"model.moe.drop_tokens", "false", "model.moe.aux_loss_coef",
                                        "0", NULL};

static void test_reshard(void) {
    char save[512];
    path(save, sizeof save, "reshard");
    zero_train_report_t rep;
    run_t r = {.ranks = 2, .stage = 3, .steps = 6, .sets = separable};
    CHECK(train(&r, &rep) == ZERO_OK, "reshard: uninterrupted run: %s", zero_last_error());
    const float ref_val = rep.final_val_loss, ref_loss = rep.last_step_loss;
    zero__train_report_free(&rep);
    uint64_t saved = 0;
    r.steps = 3;
    r.save_dir = save;
    CHECK(train_fp(&r, &saved, NULL) == ZERO_OK, "reshard: save: %s", zero_last_error());
    for (size_t i = 0; i < sizeof reshard_cases / sizeof *reshard_cases; i++) {
        run_t l = {.ranks = reshard_cases[i].ranks,
                   .stage = reshard_cases[i].stage,
                   .ep = reshard_cases[i].ep,
                   .micro = reshard_cases[i].micro,
                   .accum = reshard_cases[i].accum,
                   .eval_batches = reshard_cases[i].eval_batches,
                   .steps = 3,
                   .resume = save,
                   .sets = separable};
        uint64_t loaded = 0;
        CHECK(train_fp(&l, &loaded, NULL) == ZERO_OK, "load at %d ranks: %s", l.ranks,
              zero_last_error());
        CHECK(loaded == saved,
              "2 ranks stage 3 -> %d ranks stage %d: loaded %016llx, saved %016llx", l.ranks,
              l.stage, (unsigned long long)loaded, (unsigned long long)saved);
        l.steps = 6;
        zero_status_t st = train(&l, &rep);
        CHECK(st == ZERO_OK, "continue at %d ranks: %s", l.ranks, zero_last_error());
        if (st) continue;
        const double dv = fabs(rep.final_val_loss - ref_val) / ref_val;
        const double dl = fabs(rep.last_step_loss - ref_loss) / ref_loss;
        printf("reshard 2/stage 3 -> %d/stage %d: validation %.7f (uninterrupted %.7f, rel %.2g), "
               "last step %.7f (%.7f, rel %.2g)\n",
               l.ranks, l.stage, (double)rep.final_val_loss, (double)ref_val, dv,
               (double)rep.last_step_loss, (double)ref_loss, dl);
        CHECK(dv <= 1e-5 && dl <= 1e-5,
              "%d ranks: losses %.7f / %.7f after the resume, uninterrupted %.7f / %.7f", l.ranks,
              (double)rep.final_val_loss, (double)rep.last_step_loss, (double)ref_val,
              (double)ref_loss);
        zero__train_report_free(&rep);
    }
}

/* (2b) Across ep: saved by 4 ranks at ep 2 (stage 3, micro 1); loaded at ep 1 and 4 on 4 ranks,
 * the same batch layout, so the 6 uninterrupted steps' weights and loss bitwise (with gradient
 * clipping on: the norm is the same bits at every ep); at 2 ranks (ep 2 and 1, micro 2: the same
 * global batch) to rounding, as (2). */
static const struct {
    int ranks, stage, ep, micro;
} reshard_ep_cases[] = {
    {4, 1, 1, 1},
    {4, 3, 4, 1},
    {2, 3, 2, 2},
    {2, 1, 1, 2},
};

static void test_reshard_ep(void) {
    char save[512];
    path(save, sizeof save, "reshard-ep");
    zero_train_report_t rep;
    run_t r = {.ranks = 4, .stage = 3, .ep = 2, .micro = 1, .steps = 6, .sets = separable};
    zero_status_t st = train(&r, &rep);
    CHECK(st == ZERO_OK, "reshard ep: uninterrupted run: %s", zero_last_error());
    if (st) return;
    const uint64_t ref = rep.weights_fingerprint;
    const float ref_val = rep.final_val_loss, ref_loss = rep.last_step_loss;
    zero__train_report_free(&rep);
    uint64_t saved = 0;
    r.steps = 3;
    r.save_dir = save;
    CHECK(train_fp(&r, &saved, NULL) == ZERO_OK, "reshard ep: save: %s", zero_last_error());
    for (size_t i = 0; i < sizeof reshard_ep_cases / sizeof *reshard_ep_cases; i++) {
        run_t l = {.ranks = reshard_ep_cases[i].ranks,
                   .stage = reshard_ep_cases[i].stage,
                   .ep = reshard_ep_cases[i].ep,
                   .micro = reshard_ep_cases[i].micro,
                   .steps = 3,
                   .resume = save,
                   .sets = separable};
        uint64_t loaded = 0;
        CHECK(train_fp(&l, &loaded, NULL) == ZERO_OK && loaded == saved,
              "4 ranks ep 2 stage 3 -> %d ranks ep %d stage %d: loaded %016llx, saved %016llx (%s)",
              l.ranks, l.ep, l.stage, (unsigned long long)loaded, (unsigned long long)saved,
              zero_last_error());
        l.steps = 6;
        st = train(&l, &rep);
        CHECK(st == ZERO_OK, "continue at %d ranks ep %d: %s", l.ranks, l.ep, zero_last_error());
        if (st) continue;
        const double dv = fabs(rep.final_val_loss - ref_val) / ref_val;
        const double dl = fabs(rep.last_step_loss - ref_loss) / ref_loss;
        printf("reshard 4/ep 2/stage 3 -> %d/ep %d/stage %d: %016llx (uninterrupted %016llx), "
               "validation %.7f (%.7f, rel %.2g), last step %.7f (%.7f, rel %.2g)\n",
               l.ranks, l.ep, l.stage, (unsigned long long)rep.weights_fingerprint,
               (unsigned long long)ref, (double)rep.final_val_loss, (double)ref_val, dv,
               (double)rep.last_step_loss, (double)ref_loss, dl);
        if (l.ranks == 4)
            CHECK(rep.weights_fingerprint == ref && rep.last_step_loss == ref_loss,
                  "4 ranks ep 2 -> ep %d stage %d: %016llx loss %.9g, uninterrupted %016llx "
                  "loss %.9g",
                  l.ep, l.stage, (unsigned long long)rep.weights_fingerprint,
                  (double)rep.last_step_loss, (unsigned long long)ref, (double)ref_loss);
        else
            CHECK(dv <= 1e-5 && dl <= 1e-5,
                  "4 ranks ep 2 -> %d ranks ep %d: losses %.7f / %.7f after the resume, "
                  "uninterrupted %.7f / %.7f",
                  l.ranks, l.ep, (double)rep.final_val_loss, (double)rep.last_step_loss,
                  (double)ref_val, (double)ref_loss);
        zero__train_report_free(&rep);
    }
}

/* (3) Resume `saved` (a save directory, at step 3) for a step with `sets`; expect a mismatch
 * naming `key`, or success when key is NULL. */
static void expect_resume(const char *saved, const char *const *sets, const char *key) {
    uint64_t fp = 0;
    run_t r = {.ranks = 2, .stage = 1, .steps = 4, .resume = saved, .sets = sets};
    zero_status_t st = train_fp(&r, &fp, NULL);
    if (key)
        CHECK(st == ZERO_ERR_MISMATCH && strstr(zero_last_error(), key),
              "resume of %s with %s = %s: status %d, '%s' (expected a mismatch naming %s)", saved,
              sets[0], sets[1], (int)st, zero_last_error(), key);
    else
        CHECK(st == ZERO_OK, "resume of %s with %s = %s: %s", saved, sets[0], sets[1],
              zero_last_error());
    if (key && st) printf("%s = %s: %s\n", sets[0], sets[1], zero_last_error());
}

static void test_mismatch(void) {
    char moe[512], dense[512];
    path(moe, sizeof moe, "mismatch-moe");
    path(dense, sizeof dense, "mismatch-dense");
    uint64_t fp = 0;
    run_t r = {.ranks = 2, .stage = 1, .steps = 3, .save_dir = moe};
    CHECK(train_fp(&r, &fp, NULL) == ZERO_OK, "MoE save: %s", zero_last_error());
    const char *const dense_sets[] = {"model.moe.experts", "0", NULL};
    r.save_dir = dense;
    r.sets = dense_sets;
    CHECK(train_fp(&r, &fp, NULL) == ZERO_OK, "dense save: %s", zero_last_error());

    const char *const more_experts[] = {"model.moe.experts", "8", NULL};
    const char *const hidden[] = {"model.moe.hidden", "64", NULL};
    const char *const same_hidden[] = {"model.moe.hidden", "128", NULL}; /* 4C, as saved */
    const char *const shared[] = {"model.moe.shared_experts", "0", NULL};
    const char *const every[] = {"model.moe.every", "1", NULL};
    const char *const top1[] = {"model.moe.top_k", "1", NULL};
    expect_resume(moe, more_experts, "model.moe.experts");
    expect_resume(moe, hidden, "model.moe.hidden");
    expect_resume(moe, shared, "model.moe.shared_experts");
    expect_resume(moe, every, "model.moe.every");
    expect_resume(moe, dense_sets, "model.moe.experts"); /* MoE checkpoint, dense run */
    expect_resume(dense, more_experts, "model.moe.experts");
    expect_resume(moe, same_hidden, NULL);
    expect_resume(moe, top1, NULL); /* routing, not shapes */
}

/* (4) The safetensors header of `file` parsed (free with cJSON_Delete), or NULL. */
static cJSON *st_header(const char *file) {
    FILE *f = fopen(file, "rb");
    if (!f) return NULL;
    unsigned char len8[8];
    cJSON *h = NULL;
    if (fread(len8, 1, 8, f) == 8) {
        uint64_t n = 0;
        for (int i = 7; i >= 0; i--) n = n << 8 | len8[i];
        char *text = n < (1u << 24) ? calloc(1, n + 1) : NULL;
        if (text && fread(text, 1, n, f) == n) h = cJSON_Parse(text);
        free(text);
    }
    fclose(f);
    return h;
}

/* The file's shape of tensor `name` in header h equals shape (n dimensions). */
static int has_shape(const cJSON *h, const char *name, int n, const int *shape) {
    const cJSON *sh =
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(h, name), "shape");
    if (!cJSON_IsArray(sh) || cJSON_GetArraySize(sh) != n) return 0;
    for (int i = 0; i < n; i++)
        if (cJSON_GetArrayItem(sh, i)->valuedouble != shape[i]) return 0;
    return 1;
}

static void test_convert(void) {
    char save[512], file[512];
    path(save, sizeof save, "convert");
    path(file, sizeof file, "moe.safetensors");
    zero_train_report_t rep;
    run_t r = {.ranks = 2, .stage = 2, .steps = 2, .save_dir = save};
    CHECK(train(&r, &rep) == ZERO_OK, "save for convert: %s", zero_last_error());
    const uint64_t saved = rep.weights_fingerprint;
    const float saved_val = rep.final_val_loss;
    zero__train_report_free(&rep);
    char *argv[] = {"convert", save, file, NULL};
    fflush(stdout);
    CHECK(zero__cli_convert(3, argv) == 0, "zero convert %s %s failed", save, file);

    cJSON *h = st_header(file);
    CHECK(h != NULL, "%s: no safetensors header", file);
    static const struct {
        const char *name;
        int n, shape[3];
    } want[] = {
        {"h.0.mlp.c_fc.weight", 2, {C, 4 * C}}, /* layer 0 dense: GPT-2's names and layout */
        {"h.1.ln_2.weight", 1, {C}},
        {"h.1.attn.c_attn.weight", 2, {C, 3 * C}},
        {"h.1.moe.router.weight", 2, {E, C}},
        {"h.1.moe.shared.fc.weight", 3, {S, H, C}},
        {"h.1.moe.shared.fc.bias", 2, {S, H}},
        {"h.1.moe.shared.proj.weight", 3, {S, C, H}},
        {"h.1.moe.shared.proj.bias", 2, {S, C}},
        {"h.1.moe.experts.fc.weight", 3, {E, H, C}},
        {"h.1.moe.experts.fc.bias", 2, {E, H}},
        {"h.1.moe.experts.proj.weight", 3, {E, C, H}},
        {"h.1.moe.experts.proj.bias", 2, {E, C}},
    };
    for (size_t i = 0; h && i < sizeof want / sizeof *want; i++)
        CHECK(has_shape(h, want[i].name, want[i].n, want[i].shape), "%s: %s missing or misshapen",
              file, want[i].name);
    /* embeddings 2 + dense block 12 + MoE block (8 attention and LayerNorm + 9 MoE) + final 2,
     * and the metadata */
    CHECK(h && cJSON_GetArraySize(h) == 2 + 12 + 17 + 2 + 1, "%d entries, expected 34",
          h ? cJSON_GetArraySize(h) : -1);
    CHECK(h && !cJSON_GetObjectItemCaseSensitive(h, "h.1.mlp.c_fc.weight"),
          "the MoE layer has a dense MLP in the file");
    cJSON_Delete(h);

    for (int stage = 0; stage <= 3; stage += 3) {
        run_t i = {.ranks = 2, .stage = stage, .steps = 0, .init_from = file};
        zero_status_t st = train(&i, &rep);
        CHECK(st == ZERO_OK, "--init-from at stage %d: %s", stage, zero_last_error());
        if (st) continue;
        CHECK(rep.weights_fingerprint == saved, "--init-from at stage %d: %016llx, saved %016llx",
              stage, (unsigned long long)rep.weights_fingerprint, (unsigned long long)saved);
        CHECK(rep.final_val_loss == saved_val,
              "--init-from at stage %d: validation loss %.9g, the saving run's %.9g", stage,
              (double)rep.final_val_loss, (double)saved_val);
        zero__train_report_free(&rep);
    }
    /* sampling from the exported model */
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    const char *const one_sample[] = {"train.samples", "1", "train.sample_tokens", "8", NULL};
    run_t smp = {
        .ranks = 1, .stage = 0, .steps = 0, .init_from = file, .sets = one_sample, .out = out};
    zero_status_t st = train(&smp, &rep);
    fclose(out);
    CHECK(st == ZERO_OK && text && strstr(text, "samples ("), "sampling an exported model: %s",
          st ? zero_last_error() : "no samples printed");
    /* no training step: no routing lines of zeros, one line saying so, no figures in the report */
    CHECK(st == ZERO_OK && text && !strstr(text, "tokens per expert") &&
              strstr(text, "report: moe routing: no training step in this run") &&
              rep.moe_stats_count == 0 && !rep.moe_stats,
          "--steps 0: the routing report (%zu figures):\n%s", st ? 0 : rep.moe_stats_count,
          text ? text : "");
    if (!st) zero__train_report_free(&rep);
    free(text);

    const char *const more_experts[] = {"model.moe.experts", "8", NULL};
    run_t bad = {.ranks = 1, .stage = 0, .steps = 0, .init_from = file, .sets = more_experts};
    st = train(&bad, &rep);
    CHECK(st == ZERO_ERR_MISMATCH && strstr(zero_last_error(), "h.1.moe.router.weight"),
          "--init-from into 8 experts: status %d, '%s'", (int)st, zero_last_error());
    if (!st) zero__train_report_free(&rep);
    printf("convert: saved %016llx, validation %.7f; 8 experts: %s\n", (unsigned long long)saved,
           (double)saved_val, zero_last_error());
}

int main(void) {
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/zero-test-moe-ckpt-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    if (!mkdtemp(dir)) return 1;
    zero_log_set_level(ZERO_LOG_WARN);
    for (size_t i = 0; i < sizeof exact_cases / sizeof *exact_cases; i++)
        test_exact(exact_cases[i].ranks, exact_cases[i].stage, exact_cases[i].ep,
                   exact_cases[i].dtype);
    test_reshard();
    test_reshard_ep();
    test_mismatch();
    test_convert();
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (failed == 0 && system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", dir);
    return check_report();
}
