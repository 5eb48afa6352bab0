/* checkpoint.c — `zero train`'s checkpoints: the manifest's JSON (model, training config, data
 * position, RNG states, learning-rate schedule) around src/ckpt's save, load and import.
 *
 * Not here: file formats, atomicity and resharding (src/ckpt), when to save (trainer.c).
 * Invariants: a resumed run continues bitwise like an uninterrupted one because everything that
 * feeds the arithmetic comes back: fp32 master, Adam m and v, the engine's step count (schedule
 * and bias correction), the loss scaler's state (fp16's scale and hysteresis; the skip count of
 * every dtype) and the sampler's 64-bit state (the next batches). A checkpoint of another
 * compute dtype resumes too (the master weights are fp32 whatever the dtype): its weights and
 * moments carry over and the loss scaler starts afresh, with a warning. Evaluation and
 * sampling draw from fixed seeds per call, so they hold no state. 64-bit values are stored as
 * hex strings: JSON numbers are doubles.
 */
#include "train/checkpoint.h"

#include "core/core_internal.h"
#include "zero/ckpt.h"

#include <cJSON.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The trainer's sampler seeds (trainer.c draws from them; kept here so the manifest states them).
 */
#define DATA_SEED 0xda7aull
#define EVAL_SEED 0x5eedull
#define SAMPLE_SEED 0xa11ce5ull

uint64_t zero__train_data_rng_seed(const zero_train_config_t *cfg) {
    return DATA_SEED + (uint64_t)cfg->seed;
}

static void add_hex(cJSON *o, const char *name, uint64_t v) {
    char hex[32];
    snprintf(hex, sizeof hex, "0x%016" PRIx64, v);
    cJSON_AddStringToObject(o, name, hex);
}

/* cJSON text of o (NULL when out of memory); o is deleted. */
static char *print_json(cJSON *o) {
    char *text = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    return text;
}

static char *config_json(const zero_train_config_t *cfg) {
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    if (!m) return NULL;
    zero__train_config_print(cfg, m);
    if (fclose(m) != 0) {
        free(text);
        return NULL;
    }
    return text;
}

zero_status_t zero__train_ckpt_save(const zero_train_config_t *cfg, zero_engine_t *eng,
                                    zero_comm_t *comm, const zero_train_position_t *pos,
                                    char *path_out, size_t path_out_size) {
    const zero_engine_params_t *ep = zero_engine_params(eng);
    cJSON *model = cJSON_CreateObject(), *data = cJSON_CreateObject(), *rng = cJSON_CreateObject(),
          *lr = cJSON_CreateObject(), *ls = cJSON_CreateObject();
    if (model) {
        cJSON_AddStringToObject(model, "type", "gpt");
        cJSON_AddNumberToObject(model, "layers", cfg->model.layers);
        cJSON_AddNumberToObject(model, "heads", cfg->model.heads);
        cJSON_AddNumberToObject(model, "dim", cfg->model.dim);
        cJSON_AddNumberToObject(model, "vocab", cfg->model.vocab);
        cJSON_AddNumberToObject(model, "seq", cfg->model.seq);
    }
    if (data) {
        cJSON_AddNumberToObject(data, "step", (double)pos->step);
        add_hex(data, "sampler_state", pos->data_rng);
        cJSON_AddNumberToObject(data, "tokens", pos->tokens);
        cJSON_AddStringToObject(data, "path", cfg->data_path);
    }
    if (rng) {
        add_hex(rng, "data_sampling", pos->data_rng);
        add_hex(rng, "evaluation_seed", EVAL_SEED + (uint64_t)cfg->seed);
        add_hex(rng, "sampling_seed", SAMPLE_SEED + (uint64_t)cfg->seed);
        cJSON_AddNullToObject(rng, "dropout");
    }
    if (lr) {
        cJSON_AddNumberToObject(lr, "optimizer_step", (double)zero_engine_step_count(eng));
        cJSON_AddStringToObject(lr, "schedule", zero_lr_schedule_name(ep->schedule));
        cJSON_AddNumberToObject(lr, "lr", ep->lr);
        cJSON_AddNumberToObject(lr, "min_lr", ep->min_lr);
        cJSON_AddNumberToObject(lr, "warmup_steps", ep->warmup_steps);
        cJSON_AddNumberToObject(lr, "total_steps", ep->total_steps);
        cJSON_AddNumberToObject(lr, "next_lr", zero_engine_lr_at(eng, zero_engine_step_count(eng)));
    }
    if (ls) {
        zero_loss_scaler_t *scaler = zero_engine_loss_scaler(eng);
        zero_loss_scaler_state_t lst;
        zero_loss_scaler_get_state(scaler, &lst);
        cJSON_AddStringToObject(ls, "compute_dtype", zero_dtype_name(ep->compute_dtype));
        cJSON_AddBoolToObject(ls, "dynamic", zero_loss_scaler_is_dynamic(scaler));
        cJSON_AddNumberToObject(ls, "scale", lst.scale);
        cJSON_AddNumberToObject(ls, "iter", (double)lst.iter);
        cJSON_AddNumberToObject(ls, "last_overflow_iter", (double)lst.last_overflow_iter);
        cJSON_AddNumberToObject(ls, "hysteresis_left", lst.hysteresis_left);
        cJSON_AddNumberToObject(ls, "skipped_steps", (double)lst.skipped_steps);
    }
    char *model_s = print_json(model), *data_s = print_json(data), *rng_s = print_json(rng),
         *lr_s = print_json(lr), *ls_s = print_json(ls), *train_s = config_json(cfg);
    zero_ckpt_engine_layout_t L;
    zero_status_t st = ZERO_OK;
    int have_layout = 0;
    if (!model_s || !data_s || !rng_s || !lr_s || !ls_s || !train_s)
        st = zero__error(ZERO_ERR_OUT_OF_MEMORY, "checkpoint: out of memory for the manifest");
    if (!st) {
        st = zero_ckpt_engine_layout_init(&L, eng);
        have_layout = !st;
    }
    /* The save is collective: ranks agree on their preparation first, so that a rank that
     * failed here does not leave the others waiting in the save for it. */
    if (comm && zero_comm_size(comm) > 1) {
        double bad = st ? 1.0 : 0.0;
        zero_status_t a = zero_comm_all_reduce(&bad, &bad, 1, ZERO_DTYPE_FP64, ZERO_OP_SUM, comm);
        if (!st && a) st = a;
        if (!st && bad > 0)
            st = zero__error(ZERO_ERR_INTERNAL,
                             "checkpoint at step %lld: another rank could not prepare its save",
                             (long long)pos->step);
    }
    if (st) goto done;
    zero_ckpt_shard_io_t io = zero_ckpt_engine_io(eng);
    zero_ckpt_save_params_t sp = zero_ckpt_save_params_default();
    sp.save_dir = cfg->save_dir;
    sp.comm = comm;
    sp.world = 0;
    sp.with_optim = 1;
    sp.keep_last = cfg->keep_last;
    zero_ckpt_meta_t meta = {pos->step, cfg->stage, model_s, train_s, data_s, rng_s, lr_s, ls_s, 0};
    st = zero_ckpt_save(&sp, &L.layout, &meta, &io, path_out, path_out_size);
done:
    if (have_layout) zero_ckpt_engine_layout_free(&L);
    cJSON_free(model_s);
    cJSON_free(data_s);
    cJSON_free(rng_s);
    cJSON_free(lr_s);
    cJSON_free(ls_s);
    free(train_s);
    return st;
}

/* Hex string member `name` of object o as a uint64; 0 on success. */
static int get_hex(const cJSON *o, const char *name, uint64_t *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!cJSON_IsString(v)) return -1;
    char *end = NULL;
    unsigned long long x = strtoull(v->valuestring, &end, 16);
    if (!end || *end) return -1;
    *out = (uint64_t)x;
    return 0;
}

static int get_number(const cJSON *o, const char *name, double *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!cJSON_IsNumber(v)) return -1;
    *out = v->valuedouble;
    return 0;
}

/* The trainer's part of the manifest: data position and schedule position. */
static zero_status_t parse_position(const zero_ckpt_t *c, zero_train_position_t *pos,
                                    int64_t *opt_step) {
    const zero_ckpt_meta_t *meta = zero_ckpt_get_meta(c);
    cJSON *data = cJSON_Parse(meta->data_json ? meta->data_json : "null");
    cJSON *lr = cJSON_Parse(meta->lr_schedule_json ? meta->lr_schedule_json : "null");
    double tokens = 0.0, ostep = 0.0;
    uint64_t rng = 0;
    zero_status_t st = ZERO_OK;
    if (get_hex(data, "sampler_state", &rng) || get_number(data, "tokens", &tokens))
        st = zero__error(ZERO_ERR_FORMAT,
                         "checkpoint %s: manifest data position is %s (expected an object with "
                         "\"sampler_state\" and \"tokens\", as `zero train` saves)",
                         zero_ckpt_path(c), meta->data_json ? meta->data_json : "null");
    else if (get_number(lr, "optimizer_step", &ostep) || ostep < 0 || ostep > (double)INT32_MAX)
        st = zero__error(ZERO_ERR_FORMAT,
                         "checkpoint %s: manifest learning-rate schedule is %s (expected an "
                         "object with \"optimizer_step\" in [0, %d])",
                         zero_ckpt_path(c),
                         meta->lr_schedule_json ? meta->lr_schedule_json : "null", INT32_MAX);
    else if (meta->step < 0 || meta->step > INT32_MAX)
        st = zero__error(ZERO_ERR_FORMAT, "checkpoint %s: step %lld is out of range",
                         zero_ckpt_path(c), (long long)meta->step);
    if (!st) {
        pos->step = meta->step;
        pos->data_rng = rng;
        pos->tokens = tokens;
        *opt_step = (int64_t)ostep;
    }
    cJSON_Delete(data);
    cJSON_Delete(lr);
    return st;
}

/* The loss scaler's state from the manifest (absent or null in checkpoints older than mixed
 * precision: nothing to restore). Restored only when the checkpoint was saved with this compute
 * dtype: an fp32 or bf16 run's static scale of 1 is no starting point for fp16's dynamic one. */
static zero_status_t restore_scaler(const zero_ckpt_t *c, zero_engine_t *eng) {
    const zero_ckpt_meta_t *meta = zero_ckpt_get_meta(c);
    if (!meta->loss_scaler_json) return ZERO_OK;
    cJSON *ls = cJSON_Parse(meta->loss_scaler_json);
    if (!ls || cJSON_IsNull(ls)) {
        cJSON_Delete(ls);
        return ZERO_OK;
    }
    const zero_dtype_t now = zero_engine_params(eng)->compute_dtype;
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(ls, "compute_dtype");
    double scale = 0, iter = 0, last = 0, hyst = 0, skipped = 0;
    zero_status_t st = ZERO_OK;
    if (!cJSON_IsString(dt) || get_number(ls, "scale", &scale) || get_number(ls, "iter", &iter) ||
        get_number(ls, "last_overflow_iter", &last) || get_number(ls, "hysteresis_left", &hyst) ||
        get_number(ls, "skipped_steps", &skipped)) {
        st = zero__error(ZERO_ERR_FORMAT,
                         "checkpoint %s: manifest loss scaler is %s (expected an object with "
                         "\"compute_dtype\", \"scale\", \"iter\", \"last_overflow_iter\", "
                         "\"hysteresis_left\" and \"skipped_steps\", as `zero train` saves)",
                         zero_ckpt_path(c), meta->loss_scaler_json);
    } else if (strcmp(dt->valuestring, zero_dtype_name(now)) != 0) {
        zero__log(ZERO_LOG_WARN, -1, 0,
                  "checkpoint %s was saved with compute dtype %s and resumes in %s: the fp32 "
                  "master weights and Adam moments carry over, the loss scaler starts afresh",
                  zero_ckpt_path(c), dt->valuestring, zero_dtype_name(now));
    } else {
        zero_loss_scaler_state_t s = {scale, (int64_t)iter, (int64_t)last, (int)hyst,
                                      (int64_t)skipped};
        st = zero_loss_scaler_set_state(zero_engine_loss_scaler(eng), &s);
        if (st) {
            char msg[512];
            snprintf(msg, sizeof msg, "%s", zero_last_error());
            st = zero__error(st,
                             "checkpoint %s: its loss scaler state does not fit this run's fp16 "
                             "settings (%s); resume with the fp16.* keys it was saved with",
                             zero_ckpt_path(c), msg);
        }
    }
    cJSON_Delete(ls);
    return st;
}

zero_status_t zero__train_ckpt_resume(const zero_train_config_t *cfg, zero_engine_t *eng,
                                      zero_train_position_t *pos, char *path_out,
                                      size_t path_out_size) {
    const int latest = !strcmp(cfg->resume, "latest");
    const char *path = latest ? cfg->save_dir : cfg->resume;
    if (path_out && path_out_size) path_out[0] = 0;
    if (latest) {
        /* No checkpoint yet: a fresh start, so that one command line both starts a run and
         * continues it after an interruption. An explicit directory must exist. */
        char pointer[ZERO_CONFIG_STR_MAX + 16];
        snprintf(pointer, sizeof pointer, "%s/latest", cfg->save_dir);
        if (access(pointer, F_OK) != 0) return ZERO_OK;
    }
    zero_ckpt_t *c = NULL;
    zero_status_t st = zero_ckpt_open(&c, path);
    if (st) return st;
    zero_ckpt_engine_layout_t L;
    int have_layout = 0;
    zero_train_position_t p = *pos;
    int64_t opt_step = 0;
    st = parse_position(c, &p, &opt_step);
    if (!st && !zero_ckpt_has_optim(c))
        st = zero__error(ZERO_ERR_FORMAT,
                         "checkpoint %s has no optimizer state (Adam m, v): a resume would not "
                         "continue the run (expected a checkpoint saved by `zero train`; "
                         "--init-from takes weights only from safetensors)",
                         zero_ckpt_path(c));
    if (!st) {
        st = zero_ckpt_engine_layout_init(&L, eng);
        have_layout = !st;
    }
    if (!st) {
        /* World 1 without a communicator: every rank reads whole units and keeps what it holds
         * (engine_io.c clips), which re-slices from any saved world size and stage, and fills
         * stage 3's persistent units entirely on every rank. */
        zero_ckpt_shard_io_t io = zero_ckpt_engine_io(eng);
        zero_ckpt_load_params_t lp = zero_ckpt_load_params_default();
        lp.world = 1;
        lp.comm = NULL;
        lp.with_optim = 1;
        st = zero_ckpt_load(c, &lp, &L.layout, &io);
    }
    if (!st) st = zero_engine_set_step_count(eng, opt_step);
    if (!st) st = restore_scaler(c, eng);
    if (!st) {
        *pos = p;
        if (path_out && path_out_size) snprintf(path_out, path_out_size, "%s", zero_ckpt_path(c));
    }
    if (have_layout) zero_ckpt_engine_layout_free(&L);
    zero_ckpt_close(c);
    return st;
}

zero_status_t zero__train_init_from(const zero_train_config_t *cfg, zero_engine_t *eng) {
    zero_ckpt_engine_layout_t L;
    zero_status_t st = zero_ckpt_engine_layout_init(&L, eng);
    if (st) return st;
    zero_ckpt_shard_io_t io = zero_ckpt_engine_io(eng);
    st = zero_ckpt_import_safetensors(cfg->init_from, &L.layout, &io);
    zero_ckpt_engine_layout_free(&L);
    return st;
}
