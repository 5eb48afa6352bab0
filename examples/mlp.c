/* mlp.c — a two-layer perceptron trained with ZeRO stage 3 on two ranks, through the public
 * header zero/zero.h only: proof that the engine knows nothing about GPT.
 *
 * Task: regression of y = sin(a . x) + 0.5 x0 x1 over x ~ U(-1, 1)^8 (fresh samples each step,
 * different on each rank). Model: h = tanh(W1 x + b1) (32 hidden), yhat = w2 . h + b2; loss is
 * the mean squared error. Each layer is one engine unit; the model asks the engine for its
 * parameters before use, hands back gradients after backward, and calls zero_engine_step.
 * Ranks are threads of this process (the threads backend). Exit code 0 when the loss falls to
 * less than half of its first value and both ranks end with the same weights fingerprint.
 *
 * `example_mlp bf16` trains the same model with bf16 compute: the engine then hands out bf16
 * parameters (uint16_t bit patterns) and takes bf16 gradients, keeping fp32 master weights and
 * Adam moments itself. The model widens what it fetches, computes in fp32, and adds its fp32
 * gradient into the bf16 buffer (widen, add, round) — the pattern any 16-bit model follows.
 *
 * Options (docs/api.md walks through all of this):
 *   --config FILE   engine settings from a DeepSpeed ds_config.json (zero_ds_config_load)
 *   --save DIR      save a checkpoint of weights and optimizer into DIR after the last step
 *   --stop N        stop after step N (with --save: a checkpoint to resume from)
 *   --resume DIR    continue from DIR's newest checkpoint (its step, weights, Adam moments)
 *   --export FILE   with --save: export the saved weights to a safetensors file under this
 *                   model's own names (hidden.weight stored [in, out], hidden.bias,
 *                   out.weight, out.bias), through zero_ckpt_export_safetensors and the map below
 *   --import FILE   start from the weights of such a file (zero_ckpt_import_safetensors)
 * Each step's samples depend only on the step and the rank, so a run stopped, saved and resumed
 * ends with the same weights, bit for bit, as one that ran straight through (a CTest test), and
 * weights exported and imported again are bitwise the ones exported (another).
 */
#include "zero/zero.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { RANKS = 2, D = 8, H = 32, BATCH = 64, STEPS = 150 };

typedef struct result {
    float first_loss, last_loss;
    uint64_t fingerprint;
    zero_status_t status;
    int stage, first_step, last_step;
    zero_dtype_t dtype;
} result_t;

typedef struct options {
    zero_dtype_t dtype;
    const char *config;      /* ds_config.json, or NULL */
    const char *save;        /* checkpoint directory to save into, or NULL */
    const char *resume;      /* checkpoint (or save directory) to resume from, or NULL */
    const char *export_file; /* safetensors file to export the saved weights to, or NULL */
    const char *import_file; /* safetensors file to take the initial weights from, or NULL */
    int stop;                /* last step to run (STEPS unless --stop) */
} options_t;

typedef struct job {
    zero_comm_t *comm;
    result_t *res;
    const options_t *opt;
} job_t;

/* bf16 compute: fp32 copies of the fetched parameters and fp32 gradients the model fills. */
enum { N1 = H * D + H + 16, N2 = H + 1 + 16 }; /* unit sizes with room for padding */

/* The parameters of a unit as fp32: the engine's buffer itself, or a widened copy. */
static const float *as_fp32(const void *p, float *copy, size_t n, zero_dtype_t dt) {
    if (dt == ZERO_DTYPE_FP32) return p;
    zero_bf16_to_fp32_array(copy, p, n);
    return copy;
}

/* g (bf16) += add (fp32), rounded once per element. */
static void add_bf16(uint16_t *g, const float *add, size_t n) {
    for (size_t i = 0; i < n; i++) g[i] = zero_fp32_to_bf16(zero_bf16_to_fp32(g[i]) + add[i]);
}

static uint64_t next_u64(uint64_t *s) { /* xorshift64* */
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ull;
}
static float uniform(uint64_t *s) { return (float)(next_u64(s) >> 40) / 16777216.0f * 2 - 1; }

/* The sample generator of (step, rank): never zero, independent of what ran before. */
static uint64_t step_seed(int step, int rank) {
    uint64_t s = 0x9e3779b97f4a7c15ull ^ ((uint64_t)(rank + 1) << 32) ^ (uint64_t)(step + 1);
    next_u64(&s);
    return s;
}

/* Save the engine's weights and Adam moments after `step` steps into save_dir/step-<step>/.
 * Collective: every rank calls it; each writes its own shards. */
static zero_status_t save_checkpoint(zero_engine_t *eng, zero_comm_t *comm, const char *save_dir,
                                     int step) {
    zero_ckpt_engine_layout_t lay;
    zero_status_t st = zero_ckpt_engine_layout_init(&lay, eng);
    if (st) return st;
    zero_ckpt_save_params_t sp = zero_ckpt_save_params_default();
    sp.save_dir = save_dir;
    sp.comm = comm;
    zero_ckpt_meta_t meta = {0};
    meta.step = step;
    meta.stage = zero_engine_params(eng)->stage;
    zero_ckpt_shard_io_t io = zero_ckpt_engine_io(eng);
    st = zero_ckpt_save(&sp, &lay.layout, &meta, &io, NULL, 0);
    zero_ckpt_engine_layout_free(&lay);
    return st;
}

/* Load a checkpoint into the engine and return the step to continue from in *step. Every rank
 * reads whole units (world 1, no communicator) and keeps what it holds, as `zero train` does;
 * the checkpoint's world size and stage may differ from this run's. */
static zero_status_t load_checkpoint(zero_engine_t *eng, const char *path, int *step) {
    zero_ckpt_engine_layout_t lay;
    zero_status_t st = zero_ckpt_engine_layout_init(&lay, eng);
    if (st) return st;
    zero_ckpt_t *ck = NULL;
    st = zero_ckpt_open(&ck, path);
    if (!st) {
        zero_ckpt_load_params_t lp = zero_ckpt_load_params_default();
        lp.world = 1;
        zero_ckpt_shard_io_t io = zero_ckpt_engine_io(eng);
        st = zero_ckpt_load(ck, &lp, &lay.layout, &io);
    }
    if (!st) {
        *step = (int)zero_ckpt_get_meta(ck)->step;
        st = zero_engine_set_step_count(eng, *step); /* the schedule and Adam's bias correction */
    }
    zero_ckpt_close(ck);
    zero_ckpt_engine_layout_free(&lay);
    return st;
}

/* The model's names in a safetensors file, handed to the export and the import (the checkpoint
 * code knows no model's names). The hidden layer's weight is stored transposed, [in, out], as
 * GPT-2's Conv1D layers are: the map says so and the export and import transpose it. */
static int mlp_name(const void *user, const char *unit, const char *tensor, char *out,
                    size_t out_size, int *transposed) {
    (void)user;
    const char *layer = !strcmp(unit, "layer1") ? "hidden" : !strcmp(unit, "layer2") ? "out" : NULL;
    if (!layer || (strcmp(tensor, "weight") && strcmp(tensor, "bias"))) return 0;
    snprintf(out, out_size, "%s.%s", layer, tensor);
    *transposed = !strcmp(unit, "layer1") && !strcmp(tensor, "weight");
    return 1;
}
static const zero_ckpt_name_map_t mlp_names = {"mlp example", mlp_name, NULL};

/* Export the newest checkpoint of save_dir (its fp32 master weights) to `file`. */
static zero_status_t export_weights(const char *save_dir, const char *file) {
    zero_ckpt_t *ck = NULL;
    zero_status_t st = zero_ckpt_open(&ck, save_dir);
    if (!st) st = zero_ckpt_export_safetensors(ck, &mlp_names, file, ZERO_DTYPE_FP32);
    zero_ckpt_close(ck);
    return st;
}

/* Fill the engine's weights from `file`: every rank reads the whole file and keeps what it
 * holds (as `zero train --init-from` does). */
static zero_status_t import_weights(zero_engine_t *eng, const char *file) {
    zero_ckpt_engine_layout_t lay;
    zero_status_t st = zero_ckpt_engine_layout_init(&lay, eng);
    if (st) return st;
    zero_ckpt_shard_io_t io = zero_ckpt_engine_io(eng);
    st = zero_ckpt_import_safetensors(file, &lay.layout, &mlp_names, &io);
    zero_ckpt_engine_layout_free(&lay);
    return st;
}

static float target(const float *x) {
    static const float a[D] = {0.9f, -0.7f, 0.5f, 0.3f, -0.4f, 0.8f, -0.2f, 0.6f};
    float dot = 0;
    for (int i = 0; i < D; i++) dot += a[i] * x[i];
    return sinf(dot) + 0.5f * x[0] * x[1];
}

/* Forward and backward of one batch; gradients are added into g1 / g2. Returns the loss. */
static float train_batch(const float *p1, const float *p2, float *g1, float *g2, size_t b1_off,
                         size_t b2_off, uint64_t *rng) {
    const float *W1 = p1, *b1 = p1 + b1_off, *w2 = p2, *b2 = p2 + b2_off;
    double loss = 0;
    for (int n = 0; n < BATCH; n++) {
        float x[D], h[H];
        for (int i = 0; i < D; i++) x[i] = uniform(rng);
        float y = b2[0];
        for (int j = 0; j < H; j++) {
            float z = b1[j];
            for (int i = 0; i < D; i++) z += W1[j * D + i] * x[i];
            h[j] = tanhf(z);
            y += w2[j] * h[j];
        }
        float err = y - target(x);
        loss += (double)err * err;
        float dy = 2 * err / BATCH; /* d(mean squared error)/dy */
        if (g2) {
            g2[b2_off] += dy;
            for (int j = 0; j < H; j++) g2[j] += dy * h[j];
        }
        if (g1)
            for (int j = 0; j < H; j++) {
                float dz = dy * w2[j] * (1 - h[j] * h[j]);
                g1[b1_off + j] += dz;
                for (int i = 0; i < D; i++) g1[j * D + i] += dz * x[i];
            }
    }
    return (float)(loss / BATCH);
}

static void *rank_main(void *arg) {
    job_t *job = arg;
    result_t *res = job->res;
    const options_t *opt = job->opt;
    const int rank = zero_comm_rank(job->comm);
    zero_engine_params_t p = zero_engine_params_default();
    p.comm = job->comm; /* set before zero_ds_config_load, which keeps it */
    zero_status_t st = ZERO_OK;
    if (opt->config) {
        st = zero_ds_config_load(opt->config, &p);
    } else {
        p.stage = 3;
        p.lr = 1e-2f;
        p.min_lr = 1e-3f;
        p.weight_decay = 0.0f;
        p.warmup_steps = 10;
        p.total_steps = STEPS;
        p.persistence_threshold_elems = 0; /* shard even these small layers */
    }
    if (opt->dtype != ZERO_DTYPE_FP32) p.compute_dtype = opt->dtype;
    zero_engine_t *eng = NULL;
    if (!st) st = zero_engine_init(&eng, &p);
    int l1 = -1, l2 = -1;
    zero_tensor_desc_t t1[2] = {{"weight", 2, {H, D}, 0, ZERO_INIT_NORMAL, 0.35f},
                                {"bias", 1, {H}, ZERO_TENSOR_NO_DECAY, ZERO_INIT_ZEROS, 0}};
    zero_tensor_desc_t t2[2] = {{"weight", 2, {1, H}, 0, ZERO_INIT_NORMAL, 0.18f},
                                {"bias", 1, {1}, ZERO_TENSOR_NO_DECAY, ZERO_INIT_ZEROS, 0}};
    if (!st) st = zero_engine_add_unit(eng, "layer1", t1, 2, &l1);
    if (!st) st = zero_engine_add_unit(eng, "layer2", t2, 2, &l2);
    int first = 0;
    if (!st && opt->resume) st = load_checkpoint(eng, opt->resume, &first);
    if (!st && opt->import_file) st = import_weights(eng, opt->import_file);
    size_t b1 = st ? 0 : zero_engine_tensor_offset(eng, l1, 1);
    size_t b2 = st ? 0 : zero_engine_tensor_offset(eng, l2, 1);
    const zero_dtype_t dt = st ? ZERO_DTYPE_FP32 : zero_engine_params(eng)->compute_dtype;
    res->dtype = dt;
    res->stage = st ? -1 : zero_engine_params(eng)->stage;
    res->first_step = first;
    res->last_step = opt->stop;
    float w1[N1], w2[N2], d1[N1], d2[N2]; /* bf16 only: widened params, fp32 gradients */
    for (int step = first; step < opt->stop && !st; step++) {
        uint64_t rng = step_seed(step, rank);
        /* Forward: both layers' parameters, in use order. The forward and backward share one
         * sample here, so the backward fetches again (as a model with activations would). */
        const void *q1 = zero_unit_fetch(eng, l1), *q2 = zero_unit_fetch(eng, l2);
        if (!q1 || !q2) {
            st = ZERO_ERR_INTERNAL;
            break;
        }
        const float *p1 = as_fp32(q1, w1, b1 + H, dt), *p2 = as_fp32(q2, w2, b2 + 1, dt);
        uint64_t keep = rng;
        float loss = train_batch(p1, p2, NULL, NULL, b1, b2, &rng);
        zero_unit_release(eng, l2);
        zero_unit_release(eng, l1);
        /* Backward: fetch in reverse order, hand back gradients as they complete. */
        rng = keep;
        q2 = zero_unit_fetch(eng, l2);
        q1 = zero_unit_fetch(eng, l1);
        if (!q1 || !q2) {
            st = ZERO_ERR_INTERNAL;
            break;
        }
        p1 = as_fp32(q1, w1, b1 + H, dt);
        p2 = as_fp32(q2, w2, b2 + 1, dt);
        void *g1 = zero_unit_grads(eng, l1), *g2 = zero_unit_grads(eng, l2);
        if (dt == ZERO_DTYPE_FP32) {
            train_batch(p1, p2, g1, g2, b1, b2, &rng);
        } else {
            memset(d1, 0, sizeof d1);
            memset(d2, 0, sizeof d2);
            train_batch(p1, p2, d1, d2, b1, b2, &rng);
            add_bf16(g1, d1, b1 + H);
            add_bf16(g2, d2, b2 + 1);
        }
        if (!st) st = zero_unit_grads_done(eng, l2);
        zero_unit_release(eng, l2);
        if (!st) st = zero_unit_grads_done(eng, l1);
        zero_unit_release(eng, l1);
        if (!st) st = zero_engine_step(eng, NULL);
        if (step == first) res->first_loss = loss;
        res->last_loss = loss;
    }
    if (!st && opt->save) st = save_checkpoint(eng, job->comm, opt->save, opt->stop);
    if (!st) st = zero_engine_fingerprint(eng, &res->fingerprint);
    /* after the last collective: rank 0 reads the saved files, the other ranks need not wait */
    if (!st && opt->export_file && rank == 0) st = export_weights(opt->save, opt->export_file);
    if (st) fprintf(stderr, "rank %d: %s\n", rank, zero_last_error());
    res->status = st;
    zero_engine_free(eng);
    return NULL;
}

int main(int argc, char **argv) {
    options_t opt = {ZERO_DTYPE_FP32, NULL, NULL, NULL, NULL, NULL, STEPS};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "bf16")) {
            opt.dtype = ZERO_DTYPE_BF16;
        } else if (v && !strcmp(a, "--config")) {
            opt.config = argv[++i];
        } else if (v && !strcmp(a, "--save")) {
            opt.save = argv[++i];
        } else if (v && !strcmp(a, "--resume")) {
            opt.resume = argv[++i];
        } else if (v && !strcmp(a, "--export")) {
            opt.export_file = argv[++i];
        } else if (v && !strcmp(a, "--import")) {
            opt.import_file = argv[++i];
        } else if (v && !strcmp(a, "--stop")) {
            opt.stop = atoi(argv[++i]);
        } else {
            fprintf(stderr, "usage: example_mlp [bf16] [--config ds_config.json] [--save DIR] "
                            "[--stop N] [--resume DIR] [--export FILE] [--import FILE]\n");
            return 2;
        }
    }
    if (opt.export_file && !opt.save) {
        fprintf(stderr, "example_mlp: --export exports the checkpoint --save writes: give both\n");
        return 2;
    }
    zero_comm_t *comms[RANKS];
    if (zero_comm_threads_init_all(RANKS, comms, NULL)) {
        fprintf(stderr, "threads backend: %s\n", zero_last_error());
        return 1;
    }
    pthread_t th[RANKS];
    job_t jobs[RANKS];
    result_t res[RANKS];
    memset(res, 0, sizeof res);
    for (int r = 0; r < RANKS; r++) {
        jobs[r] = (job_t){comms[r], &res[r], &opt};
        pthread_create(&th[r], NULL, rank_main, &jobs[r]);
    }
    for (int r = 0; r < RANKS; r++) pthread_join(th[r], NULL);
    for (int r = 0; r < RANKS; r++) zero_comm_free(comms[r]);
    int ok = 1;
    for (int r = 0; r < RANKS; r++) ok &= res[r].status == ZERO_OK;
    ok &= res[0].fingerprint == res[1].fingerprint;
    /* a full run must learn; a stopped or resumed part only has to run */
    if (!opt.resume && opt.stop == STEPS) ok &= res[0].last_loss < 0.5f * res[0].first_loss;
    printf("mlp, 2 ranks, ZeRO stage %d, %s, steps %d-%d: loss %.4f -> %.4f, fingerprints %016llx "
           "%016llx: %s\n",
           res[0].stage, zero_dtype_name(res[0].dtype), res[0].first_step, res[0].last_step,
           (double)res[0].first_loss, (double)res[0].last_loss,
           (unsigned long long)res[0].fingerprint, (unsigned long long)res[1].fingerprint,
           ok ? "ok" : "FAILED");
    printf("%d passed, %d failed\n", ok, !ok);
    return ok ? 0 : 1;
}
