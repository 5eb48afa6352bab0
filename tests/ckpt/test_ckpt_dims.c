/* test_ckpt_dims.c — checkpoints of GPTs of every width 1..64, most of which are not multiples
 * of 16: the engine starts each tensor at a multiple of 16 elements, so their units have gaps
 * between tensors and end past their parameter count. Through the trainer in process
 * (zero__train_run over the threads backend), for each width d (heads: the largest of 4, 3, 2, 1
 * dividing d; ranks 1 + d % 3; stage d % 4, so shard boundaries fall inside, between and after
 * tensors at every stage):
 *   - save: a 4-step run saving at steps 2 and 4 succeeds, and its final weights equal those of
 *     a 4-step run without saves (the reference: saving must not touch the state);
 *   - resume: 2 more steps from the step-2 checkpoint end on the reference's fingerprint
 *     bitwise (weights, Adam moments and step restored in full, gaps and tails included);
 *   - convert: the step-4 checkpoint exports to safetensors (zero_ckpt_export_safetensors, what
 *     `zero convert` calls);
 *   - init-from: a fresh run of another rank count and stage initialised from that file, with no
 *     step, reports the reference's fingerprint.
 * Oracle: the engine's weights fingerprint of the uninterrupted run, a hash over the tensors only
 * (not the layout), so a lost or shifted tensor element changes it.
 */
#include "check.h"
#include "model/gpt.h"
#include "train/trainer.h"
#include "zero/zero.h"

#include <stdlib.h>
#include <string.h>

static char dir[256];

static const char *tiny = "{\"model\": {\"layers\": 1, \"vocab\": 256, \"seq\": 8},\n"
                          " \"data\": {\"builtin_bytes\": 8192},\n"
                          " \"train_micro_batch_size_per_gpu\": 2,\n"
                          " \"optimizer\": {\"params\": {\"lr\": 0.01}},\n"
                          " \"scheduler\": {\"params\": {\"warmup_num_steps\": 1, "
                          "\"total_num_steps\": 4}},\n"
                          " \"zero_optimization\": {\"reduce_bucket_size\": 3000,\n"
                          "     \"stage3_param_persistence_threshold\": 100},\n"
                          " \"train\": {\"eval_interval\": 0, \"eval_batches\": 1, \"samples\": 0,"
                          " \"threads\": 1}}\n";

typedef struct opts {
    int dim, ranks, stage, steps, save_every;
    const char *save_dir, *resume, *init_from;
} opts_t;

static int heads_for(int dim) {
    for (int h = 4; h > 1; h--)
        if (dim % h == 0) return h;
    return 1;
}

static zero_status_t set_int(zero_train_config_t *c, const char *key, int v) {
    char num[32];
    snprintf(num, sizeof num, "%d", v);
    return zero__train_config_set(c, key, num);
}

/* Run the trainer in process; returns the status, *fp the weights fingerprint. */
static zero_status_t train(const opts_t *o, uint64_t *fp) {
    zero_train_config_t c;
    zero__train_config_default(&c);
    zero_status_t st = zero__train_config_parse(&c, tiny, "tiny.json");
    if (!st) st = set_int(&c, "model.dim", o->dim);
    if (!st) st = set_int(&c, "model.heads", heads_for(o->dim));
    if (!st) st = set_int(&c, "train.ranks", o->ranks);
    if (!st) st = set_int(&c, "zero_optimization.stage", o->stage);
    if (!st) st = set_int(&c, "train.steps", o->steps);
    if (!st) st = set_int(&c, "train.save_every", o->save_every);
    if (!st && o->save_dir) st = zero__train_config_set(&c, "train.save_dir", o->save_dir);
    if (!st && o->resume) st = zero__train_config_set(&c, "train.resume", o->resume);
    if (!st && o->init_from) st = zero__train_config_set(&c, "train.init_from", o->init_from);
    if (st) return st;
    zero_train_io_t io = {.out = NULL}; /* silent */
    zero_train_report_t rep;
    st = zero__train_run(&c, &io, &rep);
    if (!st) {
        *fp = rep.weights_fingerprint;
        zero__train_report_free(&rep);
    }
    return st;
}

static void one_dim(int d) {
    const int ranks = 1 + d % 3, stage = d % 4;
    char save[400], mid[450], last[450], st_file[450];
    snprintf(save, sizeof save, "%s/dim-%d", dir, d);
    snprintf(mid, sizeof mid, "%s/step-00000002", save);
    snprintf(last, sizeof last, "%s/step-00000004", save);
    snprintf(st_file, sizeof st_file, "%s/model.safetensors", save);
    uint64_t ref = 0, saved = 1, resumed = 2, init = 3;

    opts_t o = {.dim = d, .ranks = ranks, .stage = stage, .steps = 4};
    zero_status_t st = train(&o, &ref);
    CHECK(st == ZERO_OK, "dim %d: reference run (%d ranks, stage %d)", d, ranks, stage);
    if (st) return;

    o.save_dir = save;
    o.save_every = 2;
    st = train(&o, &saved);
    CHECK(st == ZERO_OK && saved == ref,
          "dim %d: the run saving at steps 2 and 4: status %d, "
          "fingerprint %016llx, expected %016llx",
          d, (int)st, (unsigned long long)saved, (unsigned long long)ref);

    o.save_every = 0;
    o.resume = mid;
    st = train(&o, &resumed);
    CHECK(st == ZERO_OK && resumed == ref,
          "dim %d: resumed at step 2: status %d, fingerprint %016llx, expected %016llx", d, (int)st,
          (unsigned long long)resumed, (unsigned long long)ref);

    zero_ckpt_t *c = NULL;
    st = zero_ckpt_open(&c, last);
    if (!st) st = zero_ckpt_export_safetensors(c, zero__gpt_names(), st_file, ZERO_DTYPE_FP32);
    zero_ckpt_close(c);
    CHECK(st == ZERO_OK, "dim %d: export of step 4 to safetensors", d);
    if (st) return;

    opts_t f = {.dim = d, .ranks = 1 + (d + 1) % 3, .stage = (d + 2) % 4, .steps = 0};
    f.init_from = st_file;
    st = train(&f, &init);
    CHECK(st == ZERO_OK && init == ref,
          "dim %d: init-from the export: status %d, fingerprint %016llx, expected %016llx", d,
          (int)st, (unsigned long long)init, (unsigned long long)ref);
}

int main(void) {
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/zero-test-ckdims-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    if (!mkdtemp(dir)) return 1;
    zero_log_set_level(ZERO_LOG_ERROR);
    for (int d = 1; d <= 64; d++) one_dim(d);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", dir);
    return check_report();
}
