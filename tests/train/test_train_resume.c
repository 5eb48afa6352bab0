/* test_train_resume.c — `zero train` checkpoints end to end on the threads backend, in process
 * (src/train/trainer.c + checkpoint.c over src/ckpt and the engine's state hooks).
 *
 * Oracles: (1) for every stage 0-3 on 2 ranks, the weights_fingerprint after N+M steps with a
 * save at N and a resume from it equals that of one uninterrupted N+M-step run (the reference);
 * a resume that restored less (no Adam moments, no step, another data position) would differ.
 * (2) Resharding: a checkpoint of 2 ranks at stage 3 (and 2 ranks at stage 2) loaded by 3 ranks at
 * stage 1 (1 rank at stage 0) with no step left gives the fingerprint the saving run reported,
 * and training then continues and changes the weights. (3) --init-from: a checkpoint converted by
 * `zero convert` to safetensors initialises a fresh run to the same fingerprint; a model of
 * another shape fails naming the tensor (wpe.weight). (4) Flag checks: --save-every without
 * --save-dir, --resume latest without --save-dir, --resume with --init-from; --keep-last keeps
 * the newest checkpoints only. (5) Mixed precision: the exact resume of (1) in bf16 (stages 1
 * and 3) and in fp16 (stage 2 with hysteresis 1 and a growth window of 1, so the dynamic scale
 * overflows, halves and doubles again around the resume point: a resume that did not restore the
 * scaler's state starts at 2^16 again, skips another step and differs — checked by disabling the
 * restore once); an fp32 checkpoint resumed in bf16 loads the same fp32 master weights (the bf16
 * run's fingerprint, a hash of its fp32 master, equals the saving run's) and trains on. (6)
 * ZeRO++ qwZ at stage 3, fp32 and bf16: the exact resume of (1), and its checkpoint loaded with
 * qwZ off holds the saving run's weights. (9) 8-bit Adam states (AdamW8bit): the exact resume of
 * (1) at stage 1 (fp32) and stage 3 (bf16); a 2-rank checkpoint loaded at 4 and 1 ranks holds its
 * weights, and loads into fp32 states too (test_zero_q8 checks the states' exact resharding).
 */
#include "check.h"
#include "cli/cli.h"
#include "train/trainer.h"
#include "zero/zero.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[256];

/* N = 3 saved steps, M = 3 more. The schedule's total is fixed in the config, as it must be for
 * a continuation to follow the same learning-rate curve as the uninterrupted run. */
static const char *tiny =
    "{\"model\": {\"layers\": 2, \"heads\": 2, \"dim\": 32, \"seq\": 32},\n"
    " \"data\": {\"builtin_bytes\": 65536},\n"
    " \"train_micro_batch_size_per_gpu\": 4, \"gradient_accumulation_steps\": 2,\n"
    " \"optimizer\": {\"params\": {\"lr\": 0.003}}, \"gradient_clipping\": 1.0,\n"
    " \"scheduler\": {\"type\": \"WarmupCosineLR\", \"params\": {\"warmup_num_steps\": 2, "
    "\"total_num_steps\": 6}},\n"
    " \"zero_optimization\": {\"reduce_bucket_size\": 5000,\n"
    "     \"stage3_param_persistence_threshold\": 100},\n"
    " \"train\": {\"steps\": 6, \"eval_interval\": 2, \"eval_batches\": 1, \"samples\": 0}}\n";

typedef struct opts {
    int ranks, stage, steps, save_every, keep_last;
    const char *save_dir, *resume, *init_from;
    const char *seq;   /* model.seq override, or NULL */
    const char *dtype; /* --dtype: fp32, bf16, fp16 (NULL: the config's, fp32) */
    int busy_scaler;   /* fp16: hysteresis 1, window 1: the scale moves at every step */
    int qwz;           /* zero_optimization.zero_quantized_weights (ZeRO++ qwZ) */
    int hpz;           /* zero_optimization.zero_hpz_partition_size (ZeRO++ hpZ), 0: unset */
    int per_node;      /* train.ranks_per_node, 0: unset */
    int qgz;           /* zero_optimization.zero_quantized_gradients (ZeRO++ qgZ) */
    int loco_reset;    /* zeropp_loco_param.reset_T (LoCo on), 0: LoCo off */
    int q8;            /* optimizer.type AdamW8bit (8-bit Adam states) */
} opts_t;

/* Run the trainer in process; returns the status, *fp the weights fingerprint. */
static zero_status_t train(const opts_t *o, uint64_t *fp) {
    zero_train_config_t c;
    zero__train_config_default(&c);
    zero_status_t st = zero__train_config_parse(&c, tiny, "tiny.json");
    CHECK(st == ZERO_OK, "config: %s", zero_last_error());
    char num[32];
    snprintf(num, sizeof num, "%d", o->ranks);
    if (!st) st = zero__train_config_set(&c, "train.ranks", num);
    snprintf(num, sizeof num, "%d", o->stage);
    if (!st) st = zero__train_config_set(&c, "zero_optimization.stage", num);
    snprintf(num, sizeof num, "%d", o->steps);
    if (!st) st = zero__train_config_set(&c, "train.steps", num);
    snprintf(num, sizeof num, "%d", o->save_every);
    if (!st) st = zero__train_config_set(&c, "train.save_every", num);
    snprintf(num, sizeof num, "%d", o->keep_last);
    if (!st) st = zero__train_config_set(&c, "train.keep_last", num);
    if (!st && o->save_dir) st = zero__train_config_set(&c, "train.save_dir", o->save_dir);
    if (!st && o->resume) st = zero__train_config_set(&c, "train.resume", o->resume);
    if (!st && o->init_from) st = zero__train_config_set(&c, "train.init_from", o->init_from);
    if (!st && o->seq) st = zero__train_config_set(&c, "model.seq", o->seq);
    if (!st && o->dtype) st = zero__train_config_set_dtype(&c, o->dtype);
    if (!st && o->busy_scaler) st = zero__train_config_set(&c, "fp16.initial_scale_power", "16");
    if (!st && o->busy_scaler) st = zero__train_config_set(&c, "fp16.hysteresis", "1");
    if (!st && o->busy_scaler) st = zero__train_config_set(&c, "fp16.loss_scale_window", "1");
    if (!st && o->qwz)
        st = zero__train_config_set(&c, "zero_optimization.zero_quantized_weights", "true");
    snprintf(num, sizeof num, "%d", o->hpz);
    if (!st && o->hpz)
        st = zero__train_config_set(&c, "zero_optimization.zero_hpz_partition_size", num);
    if (!st && o->qgz)
        st = zero__train_config_set(&c, "zero_optimization.zero_quantized_gradients", "true");
    snprintf(num, sizeof num, "%d", o->loco_reset);
    if (!st && o->loco_reset)
        st = zero__train_config_set(&c, "zero_optimization.zeropp_loco_param.reset_T", num);
    snprintf(num, sizeof num, "%d", o->per_node);
    if (!st && o->per_node) st = zero__train_config_set(&c, "train.ranks_per_node", num);
    if (!st && o->q8) st = zero__train_config_set(&c, "optimizer.type", "AdamW8bit");
    if (st) return st;
    zero_train_io_t io = {.out = NULL}; /* silent, no peak measurement */
    zero_train_report_t rep;
    st = zero__train_run(&c, &io, &rep);
    if (!st) {
        *fp = rep.weights_fingerprint;
        zero__train_report_free(&rep);
    }
    return st;
}

static void path(char *out, size_t n, const char *name) { snprintf(out, n, "%s/%s", dir, name); }

/* (1) N + M with a resume at N against N + M uninterrupted, for one stage on 2 ranks. */
static void test_exact(int stage, const char *dtype, int q8) {
    char save[512], name[64];
    snprintf(name, sizeof name, "exact-%d-%s%s", stage, dtype, q8 ? "-q8" : "");
    path(save, sizeof save, name);
    uint64_t ref = 0, mid = 0, resumed = 0;
    opts_t o = {.ranks = 2,
                .stage = stage,
                .steps = 6,
                .dtype = dtype,
                .busy_scaler = !strcmp(dtype, "fp16"),
                .q8 = q8};
    CHECK(train(&o, &ref) == ZERO_OK, "stage %d: uninterrupted run: %s", stage, zero_last_error());
    o.steps = 3;
    o.save_dir = save;
    CHECK(train(&o, &mid) == ZERO_OK, "stage %d: first 3 steps: %s", stage, zero_last_error());
    o.steps = 6;
    o.resume = "latest";
    CHECK(train(&o, &resumed) == ZERO_OK, "stage %d: resume: %s", stage, zero_last_error());
    printf("stage %d %s: uninterrupted %016llx, resumed at 3 %016llx (at 3: %016llx)\n", stage,
           dtype, (unsigned long long)ref, (unsigned long long)resumed, (unsigned long long)mid);
    CHECK(ref == resumed, "stage %d %s: resumed run %016llx differs from uninterrupted %016llx",
          stage, dtype, (unsigned long long)resumed, (unsigned long long)ref);
    CHECK(mid != ref, "stage %d %s: the last 3 steps did not change the weights", stage, dtype);
}

/* (5) An fp32 checkpoint resumed in bf16: the master weights are fp32 in both. */
static void test_dtype_change(void) {
    char save[512];
    path(save, sizeof save, "fp32-to-bf16");
    uint64_t saved = 0, loaded = 0, more = 0;
    opts_t o = {.ranks = 2, .stage = 2, .steps = 3, .save_dir = save, .dtype = "fp32"};
    CHECK(train(&o, &saved) == ZERO_OK, "fp32 save: %s", zero_last_error());
    opts_t l = {.ranks = 2, .stage = 3, .steps = 3, .resume = save, .dtype = "bf16"};
    CHECK(train(&l, &loaded) == ZERO_OK, "bf16 resume of an fp32 checkpoint: %s",
          zero_last_error());
    CHECK(saved == loaded, "fp32 checkpoint %016llx loaded in bf16 as %016llx",
          (unsigned long long)saved, (unsigned long long)loaded);
    l.steps = 5;
    CHECK(train(&l, &more) == ZERO_OK && more != loaded, "bf16 training after an fp32 resume: %s",
          zero_last_error());
    printf("fp32 checkpoint %016llx, resumed in bf16 %016llx, continued %016llx\n",
           (unsigned long long)saved, (unsigned long long)loaded, (unsigned long long)more);
}

/* (6) ZeRO++ qwZ at stage 3 (int8 parameter gathers): a checkpoint of a qwZ run resumed with
 * qwZ on continues bitwise like the uninterrupted qwZ run; its last checkpoint loaded with qwZ
 * off and no step left holds the saving run's exact weights (only the wire was quantized); and the
 * qwZ run differs from the plain one (it was on). */
static void test_qwz(const char *dtype) {
    char save[512], name[64];
    snprintf(name, sizeof name, "qwz-%s", dtype);
    path(save, sizeof save, name);
    uint64_t plain = 0, ref = 0, mid = 0, resumed = 0, loaded = 0;
    opts_t o = {.ranks = 2, .stage = 3, .steps = 6, .dtype = dtype};
    CHECK(train(&o, &plain) == ZERO_OK, "qwZ %s: plain run: %s", dtype, zero_last_error());
    o.qwz = 1;
    CHECK(train(&o, &ref) == ZERO_OK, "qwZ %s: uninterrupted run: %s", dtype, zero_last_error());
    o.steps = 3;
    o.save_dir = save;
    CHECK(train(&o, &mid) == ZERO_OK, "qwZ %s: first 3 steps: %s", dtype, zero_last_error());
    o.steps = 6;
    o.resume = "latest";
    CHECK(train(&o, &resumed) == ZERO_OK, "qwZ %s: resume: %s", dtype, zero_last_error());
    opts_t l = {.ranks = 2, .stage = 3, .steps = 6, .resume = save, .dtype = dtype};
    CHECK(train(&l, &loaded) == ZERO_OK, "qwZ %s: load with qwZ off: %s", dtype, zero_last_error());
    printf("qwZ %s: plain %016llx, uninterrupted %016llx, resumed %016llx, at 3 %016llx, step 6 "
           "loaded without qwZ %016llx\n",
           dtype, (unsigned long long)plain, (unsigned long long)ref, (unsigned long long)resumed,
           (unsigned long long)mid, (unsigned long long)loaded);
    CHECK(ref == resumed, "qwZ %s: resumed run %016llx differs from uninterrupted %016llx", dtype,
          (unsigned long long)resumed, (unsigned long long)ref);
    CHECK(mid != ref, "qwZ %s: the last 3 steps did not change the weights", dtype);
    CHECK(plain != ref, "qwZ %s: the weights equal the plain run's: was qwZ on?", dtype);
    /* the resumed run saved its last step (6) there too: that is the checkpoint loaded */
    CHECK(loaded == resumed,
          "qwZ %s: the checkpoint loaded without qwZ holds %016llx, saved %016llx", dtype,
          (unsigned long long)loaded, (unsigned long long)resumed);
}

/* (7) ZeRO++ hpZ at stage 3 on 4 ranks as 2 nodes of 2, hpZ 2 (the tiny config evaluates
 * between steps, so evaluation gathers run between the secondary shards' invalidation and the
 * next step): bitwise the plain stage-3 run; a checkpoint of an hpZ run resumed with hpZ on
 * continues bitwise like the uninterrupted run, and loaded with hpZ off holds the same weights. */
static void test_hpz(const char *dtype) {
    char save[512], name[64];
    snprintf(name, sizeof name, "hpz-%s", dtype);
    path(save, sizeof save, name);
    uint64_t plain = 0, ref = 0, mid = 0, resumed = 0, loaded = 0;
    opts_t o = {.ranks = 4, .stage = 3, .steps = 6, .dtype = dtype, .per_node = 2};
    CHECK(train(&o, &plain) == ZERO_OK, "hpZ %s: plain run: %s", dtype, zero_last_error());
    o.hpz = 2;
    CHECK(train(&o, &ref) == ZERO_OK, "hpZ %s: uninterrupted run: %s", dtype, zero_last_error());
    o.steps = 3;
    o.save_dir = save;
    CHECK(train(&o, &mid) == ZERO_OK, "hpZ %s: first 3 steps: %s", dtype, zero_last_error());
    o.steps = 6;
    o.resume = "latest";
    CHECK(train(&o, &resumed) == ZERO_OK, "hpZ %s: resume: %s", dtype, zero_last_error());
    opts_t l = {.ranks = 4, .stage = 3, .steps = 6, .resume = save, .dtype = dtype, .per_node = 2};
    CHECK(train(&l, &loaded) == ZERO_OK, "hpZ %s: load with hpZ off: %s", dtype, zero_last_error());
    printf("hpZ %s: plain %016llx, uninterrupted %016llx, resumed %016llx, at 3 %016llx, step 6 "
           "loaded without hpZ %016llx\n",
           dtype, (unsigned long long)plain, (unsigned long long)ref, (unsigned long long)resumed,
           (unsigned long long)mid, (unsigned long long)loaded);
    CHECK(plain == ref, "hpZ %s: %016llx differs from plain stage 3's %016llx", dtype,
          (unsigned long long)ref, (unsigned long long)plain);
    CHECK(ref == resumed, "hpZ %s: resumed run %016llx differs from uninterrupted %016llx", dtype,
          (unsigned long long)resumed, (unsigned long long)ref);
    CHECK(mid != ref, "hpZ %s: the last 3 steps did not change the weights", dtype);
    CHECK(loaded == resumed,
          "hpZ %s: the checkpoint loaded without hpZ holds %016llx, saved %016llx", dtype,
          (unsigned long long)loaded, (unsigned long long)resumed);
}

/* (8) ZeRO++ qgZ on 4 ranks as 2 nodes of 2 (int4 gradient reduce-scatters): a checkpoint of a
 * qgZ run resumed with qgZ on continues bitwise like the uninterrupted run (qgZ keeps no state);
 * loaded with qgZ off it holds the same weights; the run differs from the plain one. With LoCo
 * (loco_reset > 0) the error buffers are not checkpointed: they start at zero after a resume, so
 * a resume at step 3 continues bitwise only when reset_T = 3 zeroes them there in the
 * uninterrupted run too, and differs with reset_T = 1000. */
static void test_qgz(const char *dtype, int loco_reset) {
    char save[512], name[64];
    snprintf(name, sizeof name, "qgz-%s-%d", dtype, loco_reset);
    path(save, sizeof save, name);
    uint64_t plain = 0, ref = 0, mid = 0, resumed = 0, loaded = 0;
    opts_t o = {.ranks = 4, .stage = 3, .steps = 6, .dtype = dtype, .per_node = 2};
    CHECK(train(&o, &plain) == ZERO_OK, "qgZ %s: plain run: %s", dtype, zero_last_error());
    o.qgz = 1;
    o.loco_reset = loco_reset;
    CHECK(train(&o, &ref) == ZERO_OK, "qgZ %s: uninterrupted run: %s", dtype, zero_last_error());
    o.steps = 3;
    o.save_dir = save;
    CHECK(train(&o, &mid) == ZERO_OK, "qgZ %s: first 3 steps: %s", dtype, zero_last_error());
    o.steps = 6;
    o.resume = "latest";
    CHECK(train(&o, &resumed) == ZERO_OK, "qgZ %s: resume: %s", dtype, zero_last_error());
    opts_t l = {.ranks = 4, .stage = 3, .steps = 6, .resume = save, .dtype = dtype, .per_node = 2};
    CHECK(train(&l, &loaded) == ZERO_OK, "qgZ %s: load with qgZ off: %s", dtype, zero_last_error());
    printf("qgZ %s LoCo reset %d: plain %016llx, uninterrupted %016llx, resumed %016llx, at 3 "
           "%016llx, step 6 loaded without qgZ %016llx\n",
           dtype, loco_reset, (unsigned long long)plain, (unsigned long long)ref,
           (unsigned long long)resumed, (unsigned long long)mid, (unsigned long long)loaded);
    CHECK(plain != ref, "qgZ %s: the weights equal the plain run's: was qgZ on?", dtype);
    if (loco_reset == 0 || loco_reset == 3)
        CHECK(ref == resumed,
              "qgZ %s LoCo %d: resumed run %016llx differs from uninterrupted %016llx", dtype,
              loco_reset, (unsigned long long)resumed, (unsigned long long)ref);
    else
        CHECK(ref != resumed,
              "qgZ %s LoCo %d: the resumed run equals the uninterrupted one: were the error "
              "buffers restored?",
              dtype, loco_reset);
    CHECK(mid != ref, "qgZ %s: the last 3 steps did not change the weights", dtype);
    CHECK(loaded == resumed,
          "qgZ %s: the checkpoint loaded without qgZ holds %016llx, saved %016llx", dtype,
          (unsigned long long)loaded, (unsigned long long)resumed);
}

/* (9) 8-bit Adam states through the trainer's checkpoints at other world sizes (their exactness
 * is test_zero_q8's): a checkpoint of 2 ranks at stage 3 loaded by 4 ranks at stage 2 and by 1
 * rank at stage 0 with no step left holds the saving run's weights; an fp32-state run (AdamW)
 * loads it too (the documented conversion: the dequantized states) and trains on, as does an
 * 8-bit one at 1 rank. */
static void test_q8_reshard(void) {
    char save2[512];
    path(save2, sizeof save2, "q8-reshard-2");
    uint64_t saved = 0, at4 = 0, at1 = 0, fp32 = 0, q8 = 0;
    opts_t o = {.ranks = 2, .stage = 3, .steps = 3, .save_dir = save2, .q8 = 1};
    CHECK(train(&o, &saved) == ZERO_OK, "8-bit states: save at 2 ranks: %s", zero_last_error());
    opts_t f = {.ranks = 4, .stage = 2, .steps = 3, .resume = save2, .q8 = 1};
    CHECK(train(&f, &at4) == ZERO_OK && at4 == saved, "8-bit states: 2 -> 4 ranks: %016llx, %s",
          (unsigned long long)at4, zero_last_error());
    opts_t g = {.ranks = 1, .stage = 0, .steps = 3, .resume = save2, .q8 = 1};
    CHECK(train(&g, &at1) == ZERO_OK && at1 == saved, "8-bit states: 2 -> 1 rank: %016llx, %s",
          (unsigned long long)at1, zero_last_error());
    opts_t a = {.ranks = 1, .stage = 0, .steps = 5, .resume = save2};
    CHECK(train(&a, &fp32) == ZERO_OK && fp32 != saved, "8-bit checkpoint into fp32 states: %s",
          zero_last_error());
    opts_t b = {.ranks = 1, .stage = 0, .steps = 5, .resume = save2, .q8 = 1};
    CHECK(train(&b, &q8) == ZERO_OK && q8 != saved && q8 != fp32,
          "8-bit checkpoint continued with 8-bit states: %016llx (fp32 states %016llx): %s",
          (unsigned long long)q8, (unsigned long long)fp32, zero_last_error());
}

/* (2) Save at (from_ranks, from_stage), load at (to_ranks, to_stage). */
static void test_reshard(int from_ranks, int from_stage, int to_ranks, int to_stage) {
    char save[512], name[64];
    snprintf(name, sizeof name, "reshard-%d-%d", from_ranks, from_stage);
    path(save, sizeof save, name);
    uint64_t saved = 0, loaded = 0, more = 0;
    opts_t o = {.ranks = from_ranks, .stage = from_stage, .steps = 3, .save_dir = save};
    CHECK(train(&o, &saved) == ZERO_OK, "save at %d ranks stage %d: %s", from_ranks, from_stage,
          zero_last_error());
    opts_t l = {.ranks = to_ranks, .stage = to_stage, .steps = 3, .resume = save};
    CHECK(train(&l, &loaded) == ZERO_OK, "load at %d ranks stage %d: %s", to_ranks, to_stage,
          zero_last_error());
    CHECK(saved == loaded, "%d ranks stage %d -> %d ranks stage %d: loaded %016llx, saved %016llx",
          from_ranks, from_stage, to_ranks, to_stage, (unsigned long long)loaded,
          (unsigned long long)saved);
    l.steps = 5;
    CHECK(train(&l, &more) == ZERO_OK && more != loaded,
          "training after resharding to %d ranks stage %d: %s", to_ranks, to_stage,
          zero_last_error());
    printf("reshard %d/stage %d -> %d/stage %d: saved %016llx, loaded %016llx, continued %016llx\n",
           from_ranks, from_stage, to_ranks, to_stage, (unsigned long long)saved,
           (unsigned long long)loaded, (unsigned long long)more);
}

static int cli_convert(const char *ckpt, const char *out) {
    char *argv[] = {"convert", (char *)ckpt, (char *)out, NULL};
    fflush(stdout);
    return zero__cli_convert(3, argv);
}

/* (3) checkpoint -> zero convert -> --init-from. */
static void test_init_from(void) {
    char save[512], st_file[512];
    path(save, sizeof save, "init");
    path(st_file, sizeof st_file, "model.safetensors");
    uint64_t saved = 0, imported = 0, ignored = 0;
    opts_t o = {.ranks = 2, .stage = 2, .steps = 2, .save_dir = save};
    CHECK(train(&o, &saved) == ZERO_OK, "save for convert: %s", zero_last_error());
    CHECK(cli_convert(save, st_file) == 0, "zero convert %s %s failed", save, st_file);
    for (int stage = 0; stage <= 3; stage += 3) {
        opts_t i = {.ranks = 2, .stage = stage, .steps = 0, .init_from = st_file};
        CHECK(train(&i, &imported) == ZERO_OK, "--init-from at stage %d: %s", stage,
              zero_last_error());
        CHECK(imported == saved, "--init-from at stage %d: %016llx, checkpoint %016llx", stage,
              (unsigned long long)imported, (unsigned long long)saved);
    }
    opts_t bad = {.ranks = 1, .stage = 0, .steps = 0, .init_from = st_file, .seq = "16"};
    zero_status_t st = train(&bad, &ignored);
    CHECK(st == ZERO_ERR_MISMATCH && strstr(zero_last_error(), "wpe.weight"),
          "--init-from into seq 16: status %d, '%s' (expected a mismatch naming wpe.weight)",
          (int)st, zero_last_error());
    opts_t missing = {.ranks = 1, .stage = 0, .steps = 0, .init_from = "/nonexistent/x.st"};
    CHECK(train(&missing, &ignored) != ZERO_OK, "--init-from a missing file succeeded");
    printf("init-from: checkpoint %016llx, imported %016llx\n", (unsigned long long)saved,
           (unsigned long long)imported);
}

static int count_steps(const char *save) {
    DIR *d = opendir(save);
    int n = 0;
    if (!d) return -1;
    for (struct dirent *e; (e = readdir(d));)
        if (!strncmp(e->d_name, "step-", 5)) n++;
    closedir(d);
    return n;
}

/* (4) flags and keep_last. */
static void test_flags(void) {
    char save[512];
    path(save, sizeof save, "keep");
    uint64_t fp = 0;
    opts_t o = {
        .ranks = 1, .stage = 1, .steps = 5, .save_every = 1, .keep_last = 2, .save_dir = save};
    CHECK(train(&o, &fp) == ZERO_OK, "save every step: %s", zero_last_error());
    CHECK(count_steps(save) == 2, "keep_last 2 left %d checkpoints", count_steps(save));
    opts_t e1 = {.ranks = 1, .steps = 1, .save_every = 2};
    CHECK(train(&e1, &fp) == ZERO_ERR_CONFIG && strstr(zero_last_error(), "train.save_dir"),
          "--save-every without --save-dir: '%s'", zero_last_error());
    opts_t e2 = {.ranks = 1, .steps = 1, .resume = "latest"};
    CHECK(train(&e2, &fp) == ZERO_ERR_CONFIG && strstr(zero_last_error(), "train.save_dir"),
          "--resume latest without --save-dir: '%s'", zero_last_error());
    opts_t e3 = {.ranks = 1, .steps = 1, .resume = save, .init_from = "x.safetensors"};
    CHECK(train(&e3, &fp) == ZERO_ERR_CONFIG && strstr(zero_last_error(), "train.init_from"),
          "--resume with --init-from: '%s'", zero_last_error());
    /* --resume latest before any checkpoint exists: a fresh start, saved at the end */
    char fresh[512];
    path(fresh, sizeof fresh, "fresh");
    uint64_t a = 0, b = 1;
    opts_t f1 = {.ranks = 1, .steps = 1};
    opts_t f2 = {.ranks = 1, .steps = 1, .save_dir = fresh, .resume = "latest"};
    CHECK(train(&f1, &a) == ZERO_OK && train(&f2, &b) == ZERO_OK && a == b,
          "--resume latest without a checkpoint: %016llx vs fresh %016llx (%s)",
          (unsigned long long)b, (unsigned long long)a, zero_last_error());
    CHECK(count_steps(fresh) == 1, "--resume latest without a checkpoint saved %d",
          count_steps(fresh));
    char empty[512];
    path(empty, sizeof empty, "no-checkpoint-here");
    opts_t e4 = {.ranks = 2, .steps = 1, .resume = empty};
    CHECK(train(&e4, &fp) != ZERO_OK, "--resume from a missing checkpoint succeeded");
}

int main(void) {
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/zero-test-resume-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    if (!mkdtemp(dir)) return 1;
    zero_log_set_level(ZERO_LOG_WARN);
    for (int stage = 0; stage <= 3; stage++) test_exact(stage, "fp32", 0);
    test_exact(1, "bf16", 0);
    test_exact(3, "bf16", 0);
    test_exact(2, "fp16", 0);
    test_exact(1, "fp32", 1);
    test_exact(3, "bf16", 1);
    test_q8_reshard();
    test_dtype_change();
    test_qwz("fp32");
    test_qwz("bf16");
    test_hpz("fp32");
    test_hpz("bf16");
    test_qgz("fp32", 0);
    test_qgz("bf16", 0);
    test_qgz("fp32", 3);
    test_qgz("fp32", 1000);
    test_reshard(2, 3, 3, 1);
    test_reshard(2, 2, 1, 0);
    test_init_from();
    test_flags();
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (failed == 0 && system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", dir);
    return check_report();
}
