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
 * Ownership of a save directory: every checkpoint carries its run's id (random for a fresh run,
 * inherited by a resume), so keep-last deletes only the run's own saves; a fresh run does not
 * save into a directory holding other checkpoints unless told to (train.overwrite). A resume
 * checks the model's shape keys by name before loading: model.heads changes no tensor's shape,
 * so the layout check alone would let it through.
 */
#include "train/checkpoint.h"

#include "core/core_internal.h"
#include "zero/ckpt.h"

#include <cJSON.h>
#include <dirent.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

/* The trainer's sampler seeds (trainer.c draws from them; kept here so the manifest states them).
 */
#define DATA_SEED 0xda7aull
#define EVAL_SEED 0x5eedull
#define SAMPLE_SEED 0xa11ce5ull

uint64_t zero__train_data_rng_seed(const zero_train_config_t *cfg) {
    /* sequential windows: the state counts them from the first */
    if (!strcmp(cfg->data_order, "sequential")) return 0;
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

zero_train_position_t zero__train_position_fresh(const zero_train_config_t *cfg) {
    zero_train_position_t p = {0, zero__train_data_rng_seed(cfg), 0.0, 0, 0.0};
    /* A random id: two fresh runs into one directory must differ, whatever their configs. */
    if (getrandom(&p.run_id, sizeof p.run_id, 0) != (ssize_t)sizeof p.run_id || !p.run_id) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        p.run_id =
            ((uint64_t)ts.tv_sec * 1000000007u ^ (uint64_t)ts.tv_nsec ^ (uint64_t)getpid() << 40) |
            1;
    }
    return p;
}

/* The manifest's JSON sections for a save at *pos (NULL members: out of memory). */
typedef struct save_meta {
    char *model, *data, *rng, *lr, *ls; /* cJSON_free */
    char *train;                        /* free */
} save_meta_t;

static void save_meta_free(save_meta_t *m) {
    cJSON_free(m->model);
    cJSON_free(m->data);
    cJSON_free(m->rng);
    cJSON_free(m->lr);
    cJSON_free(m->ls);
    free(m->train);
}

/* The fp8 delayed recipe's state (zero__fp8_save: scales, then histories) as one hex string of
 * the floats' bits, 8 digits each (exact, and a tenth of the size of decimal JSON numbers). */
static void add_fp8(cJSON *ls, const zero_train_config_t *cfg, const zero_fp8_t *fp8) {
    const size_t n = zero__fp8_saved_count(fp8);
    if (!n) return;
    float *v = malloc(n * sizeof *v);
    char *hex = malloc(8 * n + 1);
    cJSON *o = cJSON_AddObjectToObject(ls, "fp8");
    if (v && hex && o) {
        zero__fp8_save(fp8, v);
        for (size_t i = 0; i < n; i++) {
            uint32_t b;
            memcpy(&b, &v[i], sizeof b);
            snprintf(hex + 8 * i, 9, "%08" PRIx32, b);
        }
        cJSON_AddStringToObject(o, "recipe", cfg->fp8_recipe);
        cJSON_AddNumberToObject(o, "amax_history_len", cfg->model.fp8.history_len);
        cJSON_AddNumberToObject(o, "count", (double)n);
        cJSON_AddStringToObject(o, "scales_then_histories", hex);
    }
    free(v);
    free(hex);
}

static zero_status_t save_meta_build(save_meta_t *m, const zero_train_config_t *cfg,
                                     zero_engine_t *eng, const zero_fp8_t *fp8,
                                     const zero_train_position_t *pos) {
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
        /* MoE: the keys that decide the tensors' shapes (experts, every, shared_experts, the
         * experts' hidden width as used, 4C for 0), which a resume checks, and the routing
         * (top_k) and ep_size, which may change on resume. experts 0: a dense model. */
        const zero_moe_config_t *moe = &cfg->model.moe;
        cJSON *mo = cJSON_AddObjectToObject(model, "moe");
        if (mo) {
            cJSON_AddNumberToObject(mo, "experts", moe->experts);
            cJSON_AddNumberToObject(mo, "every", moe->every);
            cJSON_AddNumberToObject(mo, "shared_experts", moe->shared_experts);
            cJSON_AddNumberToObject(mo, "hidden", (double)zero__moe_hidden(moe, cfg->model.dim));
            cJSON_AddNumberToObject(mo, "top_k", moe->top_k);
            cJSON_AddNumberToObject(mo, "ep_size", moe->ep_size);
        }
    }
    if (data) {
        cJSON_AddNumberToObject(data, "step", (double)pos->step);
        add_hex(data, "sampler_state", pos->data_rng);
        cJSON_AddNumberToObject(data, "tokens", pos->tokens);
        cJSON_AddStringToObject(data, "path", cfg->data_path);
        cJSON_AddStringToObject(data, "val_path", cfg->val_path);
        cJSON_AddStringToObject(data, "order", cfg->data_order);
        cJSON_AddNumberToObject(data, "elapsed_s", pos->elapsed_s);
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
        add_fp8(ls, cfg, fp8);
    }
    m->model = print_json(model);
    m->data = print_json(data);
    m->rng = print_json(rng);
    m->lr = print_json(lr);
    m->ls = print_json(ls);
    m->train = config_json(cfg);
    if (!m->model || !m->data || !m->rng || !m->lr || !m->ls || !m->train)
        return zero__error(ZERO_ERR_OUT_OF_MEMORY, "checkpoint: out of memory for the manifest");
    return ZERO_OK;
}

static zero_ckpt_save_params_t save_params(const zero_train_config_t *cfg, zero_comm_t *comm) {
    zero_ckpt_save_params_t sp = zero_ckpt_save_params_default();
    sp.save_dir = cfg->save_dir;
    sp.comm = comm;
    sp.world = 0;
    sp.with_optim = 1;
    sp.keep_last = cfg->keep_last;
    return sp;
}

static zero_ckpt_meta_t meta_of(const zero_train_config_t *cfg, const save_meta_t *m,
                                const zero_train_position_t *pos) {
    zero_ckpt_meta_t meta = {pos->step, cfg->stage, m->model, m->train,   m->data,
                             m->rng,    m->lr,      m->ls,    pos->run_id};
    return meta;
}

zero_status_t zero__train_ckpt_save(const zero_train_config_t *cfg, zero_engine_t *eng,
                                    const zero_fp8_t *fp8, zero_comm_t *comm,
                                    const zero_train_position_t *pos, char *path_out,
                                    size_t path_out_size) {
    save_meta_t m = {0};
    zero_ckpt_engine_layout_t L;
    zero_ckpt_engine_save_t *sv = NULL;
    int have_layout = 0;
    zero_status_t st = save_meta_build(&m, cfg, eng, fp8, pos);
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
    /* Stacked units (experts) are saved as their logical tensors: each rank's shard of them is
     * gathered first (collective; every rank fails alike). */
    zero_ckpt_save_params_t sp = save_params(cfg, comm);
    if ((st = zero_ckpt_engine_save_init(&sv, eng, sp.with_optim))) goto done;
    zero_ckpt_shard_io_t io = zero_ckpt_engine_save_io(sv);
    zero_ckpt_meta_t meta = meta_of(cfg, &m, pos);
    st = zero_ckpt_save(&sp, &L.layout, &meta, &io, path_out, path_out_size);
done:
    zero_ckpt_engine_save_free(sv);
    if (have_layout) zero_ckpt_engine_layout_free(&L);
    save_meta_free(&m);
    return st;
}

zero_status_t zero__train_ckpt_save_check(const zero_train_config_t *cfg, zero_engine_t *eng,
                                          const zero_fp8_t *fp8, zero_comm_t *comm,
                                          const zero_train_position_t *pos) {
    save_meta_t m = {0};
    zero_ckpt_engine_layout_t L;
    zero_status_t st = save_meta_build(&m, cfg, eng, fp8, pos);
    if (!st && !(st = zero_ckpt_engine_layout_init(&L, eng))) {
        zero_ckpt_save_params_t sp = save_params(cfg, comm);
        zero_ckpt_meta_t meta = meta_of(cfg, &m, pos);
        st = zero_ckpt_save_check(&sp, &L.layout, &meta);
        zero_ckpt_engine_layout_free(&L);
    }
    save_meta_free(&m);
    return st;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

zero_status_t zero__train_ckpt_check_dir(const zero_train_config_t *cfg) {
    if (!cfg->save_dir[0] || cfg->resume[0] || cfg->overwrite) return ZERO_OK;
    DIR *d = opendir(cfg->save_dir);
    if (!d)
        return ZERO_OK; /* missing (created at the first save) or not a directory (the
                         * save directory's own check names it) */
    char *names[4096];
    size_t n = 0, total = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, "step-", 5) != 0) continue;
        total++;
        if (n < ZERO_ARRAY_LEN(names) && !(names[n] = strdup(e->d_name))) break;
        n++;
    }
    closedir(d);
    if (total == 0) return ZERO_OK;
    qsort(names, n, sizeof *names, cmp_str);
    char list[512] = "";
    size_t len = 0, shown = 0;
    for (; shown < n && len + strlen(names[shown]) + 16 < sizeof list; shown++)
        len += (size_t)snprintf(list + len, sizeof list - len, "%s%s", shown ? ", " : "",
                                names[shown]);
    if (shown < total) snprintf(list + len, sizeof list - len, " and %zu more", total - shown);
    for (size_t i = 0; i < n; i++) free(names[i]);
    return zero__error(ZERO_ERR_CONFIG,
                       "train.save_dir = \"%s\" already holds checkpoints of another run (%s): a "
                       "fresh run would replace them and repoint `latest` (expected an empty or "
                       "new directory; --resume latest to continue them, or --overwrite "
                       "(train.overwrite) to write beside them)",
                       cfg->save_dir, list);
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
        double elapsed = 0.0; /* absent in checkpoints older than it */
        if (get_number(data, "elapsed_s", &elapsed) || !(elapsed >= 0)) elapsed = 0.0;
        pos->step = meta->step;
        pos->data_rng = rng;
        pos->tokens = tokens;
        pos->elapsed_s = elapsed;
        if (meta->run_id) pos->run_id = meta->run_id; /* else a new id: older checkpoints */
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

/* ZERO_ERR_MISMATCH: the checkpoint's model key `key` (saved) differs from the run's (run). */
static zero_status_t key_mismatch(const zero_ckpt_t *c, const char *key, double saved, int run) {
    return zero__error(ZERO_ERR_MISMATCH,
                       "checkpoint %s was saved with %s = %.0f, this run has %s = %d (expected "
                       "the checkpoint's model: set %s = %.0f, or start a fresh run)",
                       zero_ckpt_path(c), key, saved, key, run, key, saved);
}

/* The checkpoint's model against the run's: ZERO_ERR_MISMATCH naming the first key that
 * differs. Shapes that the layout check would catch are named here by their key too, and
 * model.heads (which changes no tensor's shape, only what the weights mean) only here. MoE: the
 * expert count first (a dense checkpoint saved experts 0), then, for an MoE model, the keys that
 * shape its tensors; top_k, the capacities, the loss coefficients and ep_size may change (the
 * files hold every expert whatever the ep_size). Checkpoints from before MoE have no "moe":
 * the layout check names the first tensor that differs. */
static zero_status_t check_model(const zero_ckpt_t *c, const zero_train_config_t *cfg) {
    cJSON *model = cJSON_Parse(zero_ckpt_get_meta(c)->model_json);
    const cJSON *moe = cJSON_GetObjectItemCaseSensitive(model, "moe");
    const zero_moe_config_t *m = &cfg->model.moe;
    const int hidden = m->experts > 0 ? (int)zero__moe_hidden(m, cfg->model.dim) : 0;
    const struct {
        const cJSON *in;
        const char *name, *key;
        int run;
    } keys[] = {{model, "layers", "model.layers", cfg->model.layers},
                {model, "heads", "model.heads", cfg->model.heads},
                {model, "dim", "model.dim", cfg->model.dim},
                {model, "vocab", "model.vocab", cfg->model.vocab},
                {model, "seq", "model.seq", cfg->model.seq},
                {moe, "experts", "model.moe.experts", m->experts},
                {moe, "every", "model.moe.every", m->every},
                {moe, "shared_experts", "model.moe.shared_experts", m->shared_experts},
                {moe, "hidden", "model.moe.hidden", hidden}};
    zero_status_t st = ZERO_OK;
    for (size_t i = 0; i < ZERO_ARRAY_LEN(keys) && !st; i++) {
        double saved = 0;
        if (get_number(keys[i].in, keys[i].name, &saved)) continue; /* not saved by `zero train` */
        if (saved != (double)keys[i].run) st = key_mismatch(c, keys[i].key, saved, keys[i].run);
        if (keys[i].in == moe && !strcmp(keys[i].name, "experts") && m->experts == 0)
            break; /* dense on both sides: the other MoE keys shape nothing */
    }
    cJSON_Delete(model);
    return st;
}

/* A checkpoint trained on another data file resumes (the sampler state carries over), but the
 * run is then no continuation of the same data: say so, naming both. */
static void check_data(const zero_ckpt_t *c, const zero_train_config_t *cfg) {
    cJSON *data = cJSON_Parse(zero_ckpt_get_meta(c)->data_json);
    const cJSON *path = cJSON_GetObjectItemCaseSensitive(data, "path");
    if (cJSON_IsString(path) && strcmp(path->valuestring, cfg->data_path) != 0)
        zero__log(ZERO_LOG_WARN, -1, 0,
                  "checkpoint %s was trained on data %s%s%s, this run reads %s%s%s (data.path): "
                  "the data position carries over to other data",
                  zero_ckpt_path(c), path->valuestring[0] ? "'" : "",
                  path->valuestring[0] ? path->valuestring : "the built-in corpus",
                  path->valuestring[0] ? "'" : "", cfg->data_path[0] ? "'" : "",
                  cfg->data_path[0] ? cfg->data_path : "the built-in corpus",
                  cfg->data_path[0] ? "'" : "");
    const cJSON *val = cJSON_GetObjectItemCaseSensitive(data, "val_path");
    if (cJSON_IsString(val) && strcmp(val->valuestring, cfg->val_path) != 0)
        zero__log(ZERO_LOG_WARN, -1, 0,
                  "checkpoint %s was validated on '%s', this run on '%s' (data.val_path): "
                  "validation losses are not comparable across the resume",
                  zero_ckpt_path(c), val->valuestring, cfg->val_path);
    /* The sampler state means a window index under one order and an RNG state under the other
     * (absent: a checkpoint older than data.order, drawn at random). */
    const cJSON *order = cJSON_GetObjectItemCaseSensitive(data, "order");
    const char *was = cJSON_IsString(order) ? order->valuestring : "random";
    if (strcmp(was, cfg->data_order) != 0)
        zero__log(ZERO_LOG_WARN, -1, 0,
                  "checkpoint %s drew its windows in data.order %s, this run in %s: its sampler "
                  "state does not continue that stream",
                  zero_ckpt_path(c), was, cfg->data_order);
    cJSON_Delete(data);
}

/* The fp8 delayed recipe's state from the manifest (add_fp8) into fp8. A run with that recipe
 * resuming a checkpoint without it starts its scales afresh (warned); another history length or
 * model fails naming both counts (zero__fp8_load). */
static zero_status_t restore_fp8(const zero_ckpt_t *c, zero_fp8_t *fp8, int rank) {
    const size_t n = zero__fp8_saved_count(fp8);
    if (!n) return ZERO_OK;
    const zero_ckpt_meta_t *meta = zero_ckpt_get_meta(c);
    cJSON *ls = meta->loss_scaler_json ? cJSON_Parse(meta->loss_scaler_json) : NULL;
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(ls, "fp8");
    const cJSON *hex = cJSON_GetObjectItemCaseSensitive(o, "scales_then_histories");
    zero_status_t st = ZERO_OK;
    if (!o) {
        if (rank == 0)
            zero__log(ZERO_LOG_WARN, -1, 0,
                      "checkpoint %s holds no fp8 delayed-scaling state: the scales start "
                      "afresh (1, empty amax histories)",
                      zero_ckpt_path(c));
    } else if (!cJSON_IsString(hex) || strlen(hex->valuestring) % 8) {
        st = zero__error(ZERO_ERR_FORMAT,
                         "checkpoint %s: manifest fp8 state has no hex string "
                         "\"scales_then_histories\" of 8 digits per value",
                         zero_ckpt_path(c));
    } else {
        const size_t count = strlen(hex->valuestring) / 8;
        float *v = malloc((count ? count : 1) * sizeof *v);
        if (!v) st = zero__error(ZERO_ERR_OUT_OF_MEMORY, "checkpoint: out of memory");
        for (size_t i = 0; !st && i < count; i++) {
            char digits[9];
            memcpy(digits, hex->valuestring + 8 * i, 8);
            digits[8] = 0;
            char *end = NULL;
            uint32_t b = (uint32_t)strtoul(digits, &end, 16);
            if (*end)
                st = zero__error(ZERO_ERR_FORMAT,
                                 "checkpoint %s: fp8 state value %zu is '%s' "
                                 "(expected 8 hex digits)",
                                 zero_ckpt_path(c), i, digits);
            memcpy(&v[i], &b, sizeof b);
        }
        if (!st) st = zero__fp8_load(fp8, v, count);
        free(v);
    }
    cJSON_Delete(ls);
    return st;
}

zero_status_t zero__train_ckpt_resume(const zero_train_config_t *cfg, zero_engine_t *eng,
                                      zero_fp8_t *fp8, int rank, zero_train_position_t *pos,
                                      char *path_out, size_t path_out_size) {
    const int latest = !strcmp(cfg->resume, "latest");
    const char *path = latest ? cfg->save_dir : cfg->resume;
    char newest[ZERO_CONFIG_STR_MAX + 32];
    if (path_out && path_out_size) path_out[0] = 0;
    if (latest) {
        /* No checkpoint yet: a fresh start, so that one command line both starts a run and
         * continues it after an interruption. An explicit directory must exist. Without a
         * `latest` file (lost, or deleted by hand) the newest complete save is the run's state:
         * starting afresh would throw it away and, with keep-last, delete it. */
        char pointer[ZERO_CONFIG_STR_MAX + 16];
        snprintf(pointer, sizeof pointer, "%s/latest", cfg->save_dir);
        if (access(pointer, F_OK) != 0) {
            zero_status_t st = zero_ckpt_find_newest(cfg->save_dir, newest, sizeof newest);
            if (st || !newest[0]) return st;
            if (rank == 0)
                zero__log(ZERO_LOG_WARN, -1, 0,
                          "%s has no `latest` file: resuming from its most recently saved "
                          "complete checkpoint, %s",
                          cfg->save_dir, newest);
            path = newest;
        }
    }
    zero_ckpt_t *c = NULL;
    zero_status_t st = zero_ckpt_open(&c, path);
    if (st) return st;
    zero_ckpt_engine_layout_t L;
    int have_layout = 0;
    zero_train_position_t p = *pos;
    int64_t opt_step = 0;
    st = check_model(c, cfg);
    if (!st && rank == 0) check_data(c, cfg);
    if (!st) st = parse_position(c, &p, &opt_step);
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
    if (!st) st = restore_fp8(c, fp8, rank);
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
    const zero_ckpt_name_map_t *names = NULL;
    st = zero__gpt_names_of_file(cfg->init_from, &names);
    if (!st) st = zero_ckpt_import_safetensors(cfg->init_from, &L.layout, names, &io);
    zero_ckpt_engine_layout_free(&L);
    return st;
}
