/* test_ds_configs.c — real-world-shaped DeepSpeed configs (tests/train/ds_configs/NAME.json: the
 * shapes of Hugging Face's auto-filled ZeRO-2/3 examples and its ZeRO-3 test config, Megatron-
 * DeepSpeed's ZeRO-2/3, offload blocks in old and new spellings, the legacy `bfloat16` block,
 * DeepSpeedExamples' CIFAR and BERT configs) read through the trainer's reader and mapping, and
 * the effective values compared with NAME.expect. The expectations were written by hand from
 * DeepSpeed's documented semantics (each file says which rule gives which value), not from zero's
 * output.
 *
 * NAME.expect: `world N` (the world size the batch sizes resolve over), `FIELD VALUE` (numbers
 * compare to 1e-6 relative, names exactly), `warn TEXT` (a logged line must contain TEXT),
 * `nowarn TEXT` (none may). Every config must also log no "unknown key": DeepSpeed's keys are all
 * known. A config without its .expect, or a FIELD this test does not know, fails.
 *
 * Argument 1: the ds_configs directory. Argument 2 (optional): the `zero` program, run on one of
 * the configs for one step with OMP_WAIT_POLICY unset (so that it restarts itself to set it):
 * each warning must be printed once.
 */
#include "check.h"
#include "train/config.h"
#include "zero/zero.h"

#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char logged[16384];

static void capture(zero_log_level_t level, int rank, int world, const char *msg, void *user) {
    (void)rank, (void)world, (void)user, (void)level;
    strncat(logged, msg, sizeof logged - strlen(logged) - 2);
    strcat(logged, "\n");
}

/* The effective value of FIELD as text, or 0 if FIELD is unknown. */
static int field(const zero_train_config_t *c, const zero_engine_params_t *e, const char *name,
                 char *out, size_t n) {
#define NUM(f, v)                                                                                  \
    if (!strcmp(name, f)) return snprintf(out, n, "%.17g", (double)(v)), 1
#define STR(f, v)                                                                                  \
    if (!strcmp(name, f)) return snprintf(out, n, "%s", (v)), 1
    NUM("stage", e->stage);
    STR("compute_dtype", zero_dtype_name(e->compute_dtype));
    STR("grad_accum_dtype", zero_dtype_name(e->grad_accum_dtype));
    NUM("lr", e->lr);
    NUM("min_lr", e->min_lr);
    NUM("beta1", e->beta1);
    NUM("beta2", e->beta2);
    NUM("eps", e->eps);
    NUM("weight_decay", e->weight_decay);
    STR("schedule", zero_lr_schedule_name(e->schedule));
    NUM("warmup_steps", e->warmup_steps);
    NUM("warmup_min_lr", e->warmup_min_lr);
    STR("warmup_type", e->warmup_type == ZERO_WARMUP_LOG ? "log" : "linear");
    NUM("total_steps", e->total_steps);
    NUM("grad_clip", e->grad_clip);
    NUM("grad_accum_steps", e->grad_accum_steps);
    NUM("reduce_bucket_elements", c->reduce_bucket_elems);
    NUM("reduce_bucket_bytes", e->reduce_bucket_bytes);
    NUM("overlap_comm", e->overlap_comm);
    NUM("prefetch_bucket_elems", e->prefetch_bucket_elems);
    NUM("persistence_threshold_elems", e->persistence_threshold_elems);
    NUM("max_live_elems", e->max_live_elems);
    NUM("micro_batch", c->micro_batch);
    NUM("train_batch_size", c->train_batch_size);
    NUM("activation_checkpointing", c->checkpointing);
    NUM("loss_scale", e->loss_scaler.loss_scale);
    NUM("initial_scale_power", e->loss_scaler.initial_scale_power);
    NUM("loss_scale_window", e->loss_scaler.loss_scale_window);
    NUM("hysteresis", e->loss_scaler.hysteresis);
    NUM("min_loss_scale", e->loss_scaler.min_loss_scale);
    STR("offload_optimizer", zero_offload_device_name(e->offload_optimizer.device));
    NUM("buffer_count", e->offload_optimizer.buffer_count);
    NUM("pipeline_read", e->offload_optimizer.pipeline_read);
    NUM("pipeline_write", e->offload_optimizer.pipeline_write);
    STR("offload_param", zero_offload_device_name(e->offload_param.device));
    NUM("param_buffer_count", e->offload_param.buffer_count);
    NUM("sub_group_elems", e->sub_group_elems);
    NUM("aio_block_size", e->aio.block_size);
    NUM("aio_queue_depth", e->aio.queue_depth);
    NUM("aio_threads", e->aio.intra_op_parallelism);
    NUM("aio_single_submit", e->aio.single_submit);
    NUM("aio_overlap_events", e->aio.overlap_events);
#undef NUM
#undef STR
    return 0;
}

static int same_value(const char *got, const char *want) {
    char *end1, *end2;
    double g = strtod(got, &end1), w = strtod(want, &end2);
    if (*want && !*end2 && *got && !*end1) return fabs(g - w) <= 1e-6 * fabs(w) + 1e-30;
    return !strcmp(got, want);
}

static void run_one(const char *dir, const char *name) {
    char path[1024], expect[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    snprintf(expect, sizeof expect, "%s/%.*s.expect", dir, (int)(strlen(name) - 5), name);
    FILE *f = fopen(expect, "r");
    CHECK(f != NULL, "%s: no expectations file %s", name, expect);
    if (!f) return;
    /* first pass: the world size */
    char line[1024];
    int world = 1;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "world ", 6)) world = atoi(line + 6);
    rewind(f);
    logged[0] = 0;
    zero_train_config_t c;
    zero__train_config_default(&c);
    zero_status_t st = zero__train_config_load(&c, path);
    if (!st) st = zero__train_config_check(&c, world);
    zero_engine_params_t e = zero_engine_params_default();
    if (!st) st = zero__train_config_engine_params(&c, &e);
    CHECK(st == ZERO_OK, "%s: %s", name, zero_last_error());
    if (st) {
        fclose(f);
        return;
    }
    int checked = 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        if (!line[0] || line[0] == '#' || !strncmp(line, "world ", 6)) continue;
        if (!strncmp(line, "warn ", 5)) {
            CHECK(strstr(logged, line + 5) != NULL, "%s: no log line with '%s' in:\n%s", name,
                  line + 5, logged);
        } else if (!strncmp(line, "nowarn ", 7)) {
            CHECK(strstr(logged, line + 7) == NULL, "%s: a log line has '%s':\n%s", name, line + 7,
                  logged);
        } else {
            char *sp = strchr(line, ' ');
            CHECK(sp != NULL, "%s: bad expectation line '%s'", name, line);
            if (!sp) continue;
            *sp = 0;
            char got[128];
            int known = field(&c, &e, line, got, sizeof got);
            CHECK(known, "%s: unknown field '%s' in the expectations", name, line);
            if (known)
                CHECK(same_value(got, sp + 1), "%s: %s = %s, DeepSpeed would use %s", name, line,
                      got, sp + 1);
        }
        checked++;
    }
    fclose(f);
    CHECK(checked >= 5, "%s: only %d expectations", name, checked);
    CHECK(strstr(logged, "unknown key") == NULL, "%s: a DeepSpeed key is unknown:\n%s", name,
          logged);
    printf("%-22s world %d: %d expectations\n", name, world, checked);

    /* The public call gives the same engine parameters (on one rank: world-1 configs only). */
    if (world == 1) {
        zero_engine_params_t p = zero_engine_params_default();
        CHECK(zero_ds_config_load(path, &p) == ZERO_OK && p.stage == e.stage &&
                  p.compute_dtype == e.compute_dtype && p.lr == e.lr && p.min_lr == e.min_lr &&
                  p.schedule == e.schedule && p.grad_clip == e.grad_clip,
              "%s: zero_ds_config_load differs from the trainer's mapping: %s", name,
              zero_last_error());
    }
}

/* `zero train` restarts itself to set OMP_WAIT_POLICY; the config's warnings come once. */
static void test_printed_once(const char *zero, const char *dir) {
    char cmd[4096];
    /* its offload_param nvme_path (/local_nvme) moved to a temporary directory */
    char swap[] = "/tmp/zero-dsc-XXXXXX";
    CHECK(mkdtemp(swap) != NULL, "cannot make a temporary directory");
    snprintf(cmd, sizeof cmd,
             "env -u OMP_WAIT_POLICY '%s' train --config '%s/offload_legacy.json' --ranks 2 "
             "--steps=1 -q --no-peak --set model.layers=1 --set model.dim=32 --set model.heads=2 "
             "--set model.seq=16 --set train.samples=0 --set train.eval_batches=1 "
             "--set data.builtin_bytes=65536 --set zero_optimization.offload_param.nvme_path=%s "
             "2>&1",
             zero, dir, swap);
    FILE *p = popen(cmd, "r");
    CHECK(p != NULL, "cannot run %s", zero);
    if (!p) return;
    char out[16384];
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = 0;
    int rc = pclose(p);
    CHECK(rc == 0, "zero train on offload_legacy.json failed (%d):\n%s", rc, out);
    const char *lines[] = {"'zero_optimization.cpu_offload_param' = true ignored"};
    for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++) {
        int count = 0;
        for (const char *q = out; (q = strstr(q, lines[i])); q++) count++;
        CHECK(count == 1, "'%s' printed %d times (expected once):\n%s", lines[i], count, out);
    }
    CHECK(rmdir(swap) == 0, "%s: parameter swap files left behind (or gone)", swap);
}

static int by_name(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_ds_configs DIR\n");
        return 2;
    }
    zero_log_set_callback(capture, NULL);
    DIR *d = opendir(argv[1]);
    CHECK(d != NULL, "cannot open %s", argv[1]);
    if (!d) return check_report();
    char *names[256];
    int n = 0;
    for (struct dirent *de; (de = readdir(d)) && n < 256;) {
        size_t len = strlen(de->d_name);
        if (len > 5 && !strcmp(de->d_name + len - 5, ".json")) names[n++] = strdup(de->d_name);
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof names[0], by_name);
    CHECK(n >= 8, "only %d configs in %s", n, argv[1]);
    for (int i = 0; i < n; i++) {
        run_one(argv[1], names[i]);
        free(names[i]);
    }
    if (argc > 2) test_printed_once(argv[2], argv[1]);
    return check_report();
}
