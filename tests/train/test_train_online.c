/* test_train_online.c — online tuning (autotuning.online, src/train/online_tune.c) through the
 * trainer on 2 thread ranks (its decisions on a simulated machine: test_online_tune).
 *
 * Oracles: a tuned run ends with the weights fingerprint of the same run untuned at stages 2
 * and 3 (the knobs it turns must not change the numbers), with bucket / overlap / prefetch
 * changes applied every other step in between: its log shows a decision at the end of every
 * trial (steps 2k x interval), the first halving the configured bucket and, at stage 3, the third
 * taking the prefetch from 15000 to none (half of it, 7500, is below the largest gathered unit, a
 * block's 4 x 32 x 32 + 8 x 32 x 32 + 9 x 32 + 4 x 32 = 12704 elements), each kept or undone. One
 * rank at stage 2 has nothing to tune and says so. Bad values of the keys and of
 * zero_engine_retune's fields are refused, naming them, as are a retune inside a step and a bucket
 * change under qgZ.
 */
#include "check.h"
#include "train/trainer.h"
#include "zero/zero.h"

#include <stdlib.h>
#include <string.h>

static const char *tiny =
    "{\n"
    "  \"model\": {\"layers\": 2, \"heads\": 2, \"dim\": 32, \"seq\": 32},\n"
    "  \"data\": {\"builtin_bytes\": 65536},\n"
    "  \"train_micro_batch_size_per_gpu\": 4,\n"
    "  \"gradient_accumulation_steps\": 2,\n"
    "  \"zero_optimization\": {\"reduce_bucket_size\": 20000,\n"
    "      \"stage3_prefetch_bucket_size\": 15000, \"stage3_param_persistence_threshold\": 1000},\n"
    "  \"train\": {\"steps\": 16, \"samples\": 0, \"eval_interval\": 5, \"eval_batches\": 1}\n"
    "}\n";

enum { INTERVAL = 2 };

/* Train the tiny config; its fingerprint, and (log != NULL) its output. */
static int run(int ranks, int stage, int online, uint64_t *fp, char *log, size_t n) {
    zero_train_config_t c;
    zero__train_config_default(&c);
    CHECK(zero__train_config_parse(&c, tiny, "tiny.json") == ZERO_OK, "tiny config: %s",
          zero_last_error());
    c.ranks = ranks;
    c.stage = stage;
    c.tune_online = online;
    c.tune_online_interval = INTERVAL;
    FILE *out = tmpfile();
    zero_train_io_t io = {.out = out};
    zero_train_report_t rep;
    zero_status_t st = zero__train_run(&c, &io, &rep);
    CHECK(st == ZERO_OK, "%d ranks stage %d online %d: %s", ranks, stage, online,
          zero_last_error());
    if (log && out) {
        rewind(out);
        size_t got = fread(log, 1, n - 1, out);
        log[got] = 0;
    }
    if (out) fclose(out);
    if (st) return 0;
    *fp = rep.weights_fingerprint;
    zero__train_report_free(&rep);
    return 1;
}

/* The decision lines: each at a trial's end, kept or undone; returns their count. */
static int check_decisions(const char *log, int stage) {
    int n = 0;
    for (const char *p = strstr(log, "tune-online: step "); p;
         p = strstr(p + 1, "tune-online: step ")) {
        const char *eol = strchr(p, '\n');
        char line[256];
        snprintf(line, sizeof line, "%.*s", eol ? (int)(eol - p) : (int)strlen(p), p);
        int step = atoi(p + strlen("tune-online: step "));
        CHECK(step % (2 * INTERVAL) == 0, "stage %d: a line at step %d, not at a trial's end: %s",
              stage, step, line);
        if (strstr(line, "settled")) continue;
        CHECK(strstr(line, ", kept") || strstr(line, ", undone"), "stage %d: '%s'", stage, line);
        if (n == 0)
            CHECK(strstr(line, "step 4: reduce_bucket_size 20000 -> 10000:") != NULL,
                  "stage %d: first decision '%s' (expected the bucket halved at step 4)", stage,
                  line);
        if (n == 2 && stage == 3)
            CHECK(strstr(line, "step 12: stage3_prefetch_bucket_size 15000 -> 0:") != NULL,
                  "stage 3: third decision '%s' (expected the prefetch 15000 -> 0 at step 12)",
                  line);
        n++;
    }
    return n;
}

static void tuned_equals_untuned(void) {
    static char log[1 << 16];
    for (int stage = 2; stage <= 3; stage++) {
        uint64_t plain = 0, tuned = 0;
        if (!run(2, stage, 0, &plain, NULL, 0) || !run(2, stage, 1, &tuned, log, sizeof log))
            continue;
        CHECK(tuned == plain, "stage %d: tuned fingerprint %016llx, untuned %016llx", stage,
              (unsigned long long)tuned, (unsigned long long)plain);
        int n = check_decisions(log, stage);
        /* 16 steps in trials of 2 x 2 steps = 4 trials, unless it settled earlier */
        CHECK(n >= 1 && n <= 16 / (2 * INTERVAL), "stage %d: %d decisions logged", stage, n);
        /* the moves' order: bucket halved, overlap_comm toggled, (stage 3) prefetch less */
        CHECK(strstr(log, ": overlap_comm ") != NULL, "stage %d: overlap_comm never tried", stage);
        printf("stage %d: fingerprint %016llx tuned and untuned; %d decisions\n", stage,
               (unsigned long long)tuned, n);
    }
    uint64_t fp = 0;
    if (run(1, 2, 1, &fp, log, sizeof log))
        CHECK(strstr(log, "tune-online: step 1: nothing to tune (stage 2, 1 rank)") != NULL,
              "1 rank stage 2: %s", log);
}

static void refused(const char *json, const char *key) {
    zero_train_config_t c;
    zero__train_config_default(&c);
    zero_status_t st = zero__train_config_parse(&c, json, "bad.json");
    CHECK(st != ZERO_OK && strstr(zero_last_error(), key), "%s: status %d, '%s'", json, (int)st,
          zero_last_error());
}

static void bad_values(void) {
    refused("{\"autotuning\": {\"online\": \"yes\"}}", "autotuning.online");
    refused("{\"autotuning\": {\"online\": 2}}", "autotuning.online");
    refused("{\"autotuning\": {\"online_interval\": 1}}", "autotuning.online_interval");
    zero_engine_t *eng = NULL;
    CHECK(zero_engine_init(&eng, NULL) == ZERO_OK, "engine: %s", zero_last_error());
    if (!eng) return;
    zero_engine_tuning_t t0, t;
    zero_engine_get_tuning(eng, &t0);
    const struct {
        size_t bucket;
        int overlap;
        int64_t prefetch;
        const char *field;
    } bad[] = {{0, 1, 0, "reduce_bucket_bytes 0"},
               {4096, 2, 0, "overlap_comm 2"},
               {4096, 1, -1, "prefetch_bucket_elems -1"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        t = (zero_engine_tuning_t){bad[i].bucket, bad[i].overlap, bad[i].prefetch};
        zero_status_t st = zero_engine_retune(eng, &t);
        CHECK(st == ZERO_ERR_INVALID_ARG && strstr(zero_last_error(), bad[i].field),
              "retune %s: status %d, '%s'", bad[i].field, (int)st, zero_last_error());
        zero_engine_get_tuning(eng, &t);
        CHECK(t.reduce_bucket_bytes == t0.reduce_bucket_bytes &&
                  t.overlap_comm == t0.overlap_comm &&
                  t.prefetch_bucket_elems == t0.prefetch_bucket_elems,
              "retune %s changed the engine", bad[i].field);
    }
    /* inside a step (a gradient handed out, then reduced, until zero_engine_step): refused */
    zero_tensor_desc_t w = {"w", 1, {64}, 0, ZERO_INIT_NORMAL, 0.1f};
    CHECK(zero_engine_add_unit(eng, "u", &w, 1, NULL) == ZERO_OK, "unit: %s", zero_last_error());
    t = (zero_engine_tuning_t){4096, 0, 7};
    float *g = zero_unit_grads(eng, 0);
    CHECK(g != NULL, "grads: %s", zero_last_error());
    if (g) g[0] = 1.0f;
    CHECK(zero_engine_retune(eng, &t) == ZERO_ERR_INVALID_ARG &&
              strstr(zero_last_error(), "inside step"),
          "retune with a gradient handed out: '%s'", zero_last_error());
    CHECK(zero_unit_grads_done(eng, 0) == ZERO_OK, "grads_done: %s", zero_last_error());
    CHECK(zero_engine_retune(eng, &t) == ZERO_ERR_INVALID_ARG,
          "retune with a gradient reduced before the step: accepted");
    zero_step_stats_t ss;
    CHECK(zero_engine_step(eng, &ss) == ZERO_OK, "step: %s", zero_last_error());
    CHECK(zero_engine_retune(eng, &t) == ZERO_OK, "retune: %s", zero_last_error());
    zero_engine_get_tuning(eng, &t0);
    CHECK(t0.reduce_bucket_bytes == 4096 && t0.overlap_comm == 0 && t0.prefetch_bucket_elems == 7,
          "retune did not apply");
    zero_engine_free(eng);
    /* qgZ: its int4 blocks follow the packing, so the bucket stays */
    zero_engine_params_t p = zero_engine_params_default();
    p.quantized_gradients = 1;
    eng = NULL;
    CHECK(zero_engine_init(&eng, &p) == ZERO_OK, "qgZ engine: %s", zero_last_error());
    if (!eng) return;
    zero_engine_get_tuning(eng, &t);
    t.reduce_bucket_bytes /= 2;
    CHECK(zero_engine_retune(eng, &t) == ZERO_ERR_INVALID_ARG &&
              strstr(zero_last_error(), "zero_quantized_gradients"),
          "qgZ bucket change: '%s'", zero_last_error());
    zero_engine_free(eng);
}

int main(void) {
    bad_values();
    tuned_equals_untuned();
    return check_report();
}
