/* manifest.c — `manifest.json` of a checkpoint: written from a layout and the trainer's opaque
 * metadata, and parsed back with every field checked (type, range, consistency of the layout).
 *
 * Counts are JSON numbers (exact up to 2^53 elements); the checkpoint id is a 16-digit hex
 * string because it uses all 64 bits. The opaque sections (model, training, data, rng,
 * lr_schedule, loss_scaler) are embedded as JSON values and returned re-serialised.
 */
#include "ckpt/ckpt_internal.h"
#include "core/core_internal.h"

#include <cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <time.h>

static const char *const opaque_keys[] = {"model", "training",    "data",
                                          "rng",   "lr_schedule", "loss_scaler"};
enum { OPAQUE_COUNT = ZERO_ARRAY_LEN(opaque_keys) };

static const char **opaque_field(zero_ckpt_meta_t *m, int i) {
    const char **f[] = {&m->model_json, &m->training_json,    &m->data_json,
                        &m->rng_json,   &m->lr_schedule_json, &m->loss_scaler_json};
    _Static_assert(ZERO_ARRAY_LEN(f) == OPAQUE_COUNT, "a field for every opaque key");
    return f[i];
}

zero_status_t zero__manifest_build(char **out, int world, int with_optim, uint64_t nonce,
                                   const zero_ckpt_layout_t *layout, const zero_ckpt_meta_t *meta) {
    zero_status_t st = ZERO_OK;
    cJSON *root = cJSON_CreateObject();
    if (!root) return zero__error(ZERO_ERR_OUT_OF_MEMORY, "manifest: out of memory");
    char id[17];
    snprintf(id, sizeof id, "%016" PRIx64, nonce);
    cJSON_AddStringToObject(root, "format", "zero-checkpoint");
    cJSON_AddNumberToObject(root, "format_version", ZERO_CKPT_FORMAT_VERSION);
    cJSON_AddStringToObject(root, "id", id);
    cJSON_AddNumberToObject(root, "step", (double)meta->step);
    cJSON_AddNumberToObject(root, "world_size", world);
    cJSON_AddNumberToObject(root, "stage", meta->stage);
    cJSON_AddBoolToObject(root, "with_optim", with_optim);
    cJSON_AddNumberToObject(root, "shard_align_elems", ZERO_CKPT_ALIGN_ELEMS);
    cJSON_AddNumberToObject(root, "chunk_elems", (double)ZERO__CKPT_CHUNK_ELEMS);
    /* Who saved it and when: keep-last deletes only the saver's run's checkpoints, oldest saves
     * first, and a save directory without `latest` resumes from its newest save. */
    char run[17];
    snprintf(run, sizeof run, "%016" PRIx64, meta->run_id);
    cJSON_AddStringToObject(root, "run_id", run);
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    cJSON_AddNumberToObject(root, "saved_unix_us",
                            (double)((int64_t)now.tv_sec * 1000000 + now.tv_nsec / 1000));
    zero_ckpt_meta_t m = *meta;
    for (int i = 0; i < OPAQUE_COUNT; i++) {
        const char *text = *opaque_field(&m, i);
        cJSON *v = text ? cJSON_Parse(text) : cJSON_CreateNull();
        if (!v) {
            st = zero__error(ZERO_ERR_INVALID_ARG,
                             "checkpoint metadata '%s' is not valid JSON (expected a JSON value, "
                             "found \"%.60s\")",
                             opaque_keys[i], text);
            goto done;
        }
        cJSON_AddItemToObject(root, opaque_keys[i], v);
    }
    cJSON *units = cJSON_AddArrayToObject(root, "units");
    for (int u = 0; u < layout->unit_count; u++) {
        const zero_ckpt_unit_t *U = &layout->units[u];
        cJSON *ju = cJSON_CreateObject();
        cJSON_AddItemToArray(units, ju);
        cJSON_AddStringToObject(ju, "name", U->name);
        cJSON_AddNumberToObject(ju, "param_count", (double)U->param_count);
        cJSON_AddNumberToObject(ju, "padded_count",
                                (double)zero_ckpt_padded_count(U->param_count, world));
        if (U->copies > 1) cJSON_AddNumberToObject(ju, "copies", U->copies);
        cJSON *jt = cJSON_AddArrayToObject(ju, "tensors");
        for (int t = 0; t < U->tensor_count; t++) {
            const zero_ckpt_tensor_t *T = &U->tensors[t];
            cJSON *o = cJSON_CreateObject();
            cJSON_AddItemToArray(jt, o);
            cJSON_AddStringToObject(o, "name", T->name);
            cJSON *shape = cJSON_AddArrayToObject(o, "shape");
            for (int d = 0; d < T->ndim; d++)
                cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)T->shape[d]));
            cJSON_AddNumberToObject(o, "offset", (double)T->offset);
            cJSON_AddNumberToObject(o, "flags", T->flags);
        }
    }
    cJSON *files = cJSON_AddArrayToObject(root, "files");
    for (int r = 0; r < world; r++)
        for (int k = 0; k < (with_optim ? 2 : 1); k++) {
            char name[64];
            snprintf(name, sizeof name, "rank-%05d.%s", r, k ? "optim" : "params");
            cJSON_AddItemToArray(files, cJSON_CreateString(name));
        }
    *out = cJSON_Print(root);
    if (!*out) st = zero__error(ZERO_ERR_OUT_OF_MEMORY, "manifest: out of memory");
done:
    cJSON_Delete(root);
    return st;
}

void zero__manifest_free(zero__manifest_t *m) {
    if (m->units)
        for (int u = 0; u < m->layout.unit_count; u++) free((char *)m->units[u].name);
    if (m->tensors) {
        size_t nt = 0;
        for (int u = 0; u < m->layout.unit_count; u++) nt += (size_t)m->units[u].tensor_count;
        for (size_t t = 0; t < nt; t++) free((char *)m->tensors[t].name);
    }
    free(m->units);
    free(m->tensors);
    for (int i = 0; i < OPAQUE_COUNT; i++) free((char *)*opaque_field(&m->meta, i));
    memset(m, 0, sizeof *m);
}

/* A non-negative integer field (<= max). */
static zero_status_t get_count(const cJSON *obj, const char *key, double max, uint64_t *out,
                               const char *what, const char *where) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0) || v->valuedouble > max ||
        v->valuedouble != floor(v->valuedouble))
        return zero__error(ZERO_ERR_FORMAT, "%s: %s'%s' is %s, expected an integer in [0, %.0f]",
                           what, where, key,
                           !v                  ? "missing"
                           : cJSON_IsNumber(v) ? "out of range"
                                               : "not a number",
                           max);
    *out = (uint64_t)v->valuedouble;
    return ZERO_OK;
}

static char *dup_str(const char *s) {
    size_t n = strlen(s);
    char *d = malloc(n + 1);
    if (d) memcpy(d, s, n + 1);
    return d;
}

zero_status_t zero__manifest_parse(zero__manifest_t *m, const char *text, size_t size,
                                   const char *what) {
    memset(m, 0, sizeof *m);
    cJSON *root = cJSON_ParseWithLength(text, size);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return zero__error(ZERO_ERR_FORMAT, "%s is not a JSON object (expected a zero manifest)",
                           what);
    }
    zero_status_t st = ZERO_OK;
    uint64_t v = 0;
    const double MAXC = 9007199254740992.0; /* 2^53 */
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(root, "format");
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, "zero-checkpoint") != 0) {
        st = zero__error(ZERO_ERR_FORMAT, "%s: 'format' is %s, expected \"zero-checkpoint\"", what,
                         cJSON_IsString(fmt) ? fmt->valuestring : "missing or not a string");
        goto fail;
    }
    if ((st = get_count(root, "format_version", 1e9, &v, what, "")) != ZERO_OK) goto fail;
    if (v != ZERO_CKPT_FORMAT_VERSION) {
        st = zero__error(ZERO_ERR_FORMAT, "%s: format version %llu, expected %d", what,
                         (unsigned long long)v, ZERO_CKPT_FORMAT_VERSION);
        goto fail;
    }
    m->version = (int)v;
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(root, "id");
    char *end = NULL;
    if (!cJSON_IsString(id) || strlen(id->valuestring) != 16 ||
        (m->nonce = strtoull(id->valuestring, &end, 16), *end != '\0')) {
        st = zero__error(ZERO_ERR_FORMAT, "%s: 'id' is missing or not 16 hex digits", what);
        goto fail;
    }
    /* run_id and saved_unix_us are optional: checkpoints saved before them have neither. */
    const cJSON *run = cJSON_GetObjectItemCaseSensitive(root, "run_id");
    if (run && (!cJSON_IsString(run) || strlen(run->valuestring) != 16 ||
                (m->meta.run_id = strtoull(run->valuestring, &end, 16), *end != '\0'))) {
        st = zero__error(ZERO_ERR_FORMAT, "%s: 'run_id' is not 16 hex digits", what);
        goto fail;
    }
    if (cJSON_GetObjectItemCaseSensitive(root, "saved_unix_us")) {
        if ((st = get_count(root, "saved_unix_us", MAXC, &v, what, "")) != ZERO_OK) goto fail;
        m->saved_unix_us = (int64_t)v;
    }
    if ((st = get_count(root, "step", MAXC, &v, what, "")) != ZERO_OK) goto fail;
    m->meta.step = (int64_t)v;
    if ((st = get_count(root, "world_size", ZERO__CKPT_MAX_WORLD, &v, what, "")) != ZERO_OK)
        goto fail;
    if (v < 1) {
        st = zero__error(ZERO_ERR_FORMAT, "%s: 'world_size' is 0, expected >= 1", what);
        goto fail;
    }
    m->world = (int)v;
    if ((st = get_count(root, "stage", 3, &v, what, "")) != ZERO_OK) goto fail;
    m->meta.stage = (int)v;
    const cJSON *wo = cJSON_GetObjectItemCaseSensitive(root, "with_optim");
    if (!cJSON_IsBool(wo)) {
        st = zero__error(ZERO_ERR_FORMAT, "%s: 'with_optim' is missing or not a boolean", what);
        goto fail;
    }
    m->with_optim = cJSON_IsTrue(wo);
    if ((st = get_count(root, "shard_align_elems", 1e9, &v, what, "")) != ZERO_OK) goto fail;
    if (v != ZERO_CKPT_ALIGN_ELEMS) {
        st = zero__error(ZERO_ERR_FORMAT, "%s: 'shard_align_elems' is %llu, expected %d", what,
                         (unsigned long long)v, ZERO_CKPT_ALIGN_ELEMS);
        goto fail;
    }
    for (int i = 0; i < OPAQUE_COUNT; i++) {
        const cJSON *o = cJSON_GetObjectItemCaseSensitive(root, opaque_keys[i]);
        char *s = o ? cJSON_PrintUnformatted(o) : dup_str("null");
        if (!s) {
            st = zero__error(ZERO_ERR_OUT_OF_MEMORY, "%s: out of memory", what);
            goto fail;
        }
        *opaque_field(&m->meta, i) = s;
    }
    const cJSON *units = cJSON_GetObjectItemCaseSensitive(root, "units");
    if (!cJSON_IsArray(units)) {
        st = zero__error(ZERO_ERR_FORMAT, "%s: 'units' is missing or not an array", what);
        goto fail;
    }
    int nu = cJSON_GetArraySize(units);
    size_t nt = 0;
    const cJSON *ju;
    cJSON_ArrayForEach(ju, units) {
        const cJSON *jt = cJSON_GetObjectItemCaseSensitive(ju, "tensors");
        if (!cJSON_IsArray(jt)) {
            st = zero__error(ZERO_ERR_FORMAT, "%s: a unit has no 'tensors' array", what);
            goto fail;
        }
        nt += (size_t)cJSON_GetArraySize(jt);
    }
    m->units = calloc(nu ? (size_t)nu : 1, sizeof *m->units);
    m->tensors = calloc(nt ? nt : 1, sizeof *m->tensors);
    if (!m->units || !m->tensors) {
        st = zero__error(ZERO_ERR_OUT_OF_MEMORY, "%s: out of memory", what);
        goto fail;
    }
    m->layout.units = m->units;
    size_t ti = 0;
    int u = 0;
    cJSON_ArrayForEach(ju, units) {
        zero_ckpt_unit_t *U = &m->units[u];
        m->layout.unit_count = ++u;
        char where[160];
        snprintf(where, sizeof where, "unit %d ", u - 1);
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(ju, "name");
        if (!cJSON_IsString(name)) {
            st = zero__error(ZERO_ERR_FORMAT, "%s: %shas no 'name' string", what, where);
            goto fail;
        }
        if (!(U->name = dup_str(name->valuestring))) goto oom;
        snprintf(where, sizeof where, "unit %d (%.100s) ", u - 1, U->name);
        uint64_t pc, padded;
        if ((st = get_count(ju, "param_count", MAXC / 4, &pc, what, where)) != ZERO_OK) goto fail;
        if ((st = get_count(ju, "padded_count", MAXC / 2, &padded, what, where)) != ZERO_OK)
            goto fail;
        U->param_count = (size_t)pc;
        const cJSON *copies = cJSON_GetObjectItemCaseSensitive(ju, "copies");
        if (copies &&
            (!cJSON_IsNumber(copies) || copies->valuedouble < 1 || copies->valuedouble > 1048576 ||
             copies->valuedouble != (double)(int)copies->valuedouble)) {
            st = zero__error(ZERO_ERR_FORMAT,
                             "%s: %s'copies' is not a whole number in [1, 1048576]", what, where);
            goto fail;
        }
        U->copies = copies ? (int)copies->valuedouble : 1;
        if (padded != zero_ckpt_padded_count(U->param_count, m->world)) {
            st = zero__error(ZERO_ERR_FORMAT,
                             "%s: %s'padded_count' is %llu, expected %zu for %llu params at "
                             "world size %d",
                             what, where, (unsigned long long)padded,
                             zero_ckpt_padded_count(U->param_count, m->world),
                             (unsigned long long)pc, m->world);
            goto fail;
        }
        const cJSON *jt = cJSON_GetObjectItemCaseSensitive(ju, "tensors");
        U->tensors = &m->tensors[ti];
        const cJSON *o;
        cJSON_ArrayForEach(o, jt) {
            zero_ckpt_tensor_t *T = &m->tensors[ti++];
            U->tensor_count++;
            const cJSON *tn = cJSON_GetObjectItemCaseSensitive(o, "name");
            if (!cJSON_IsString(tn)) {
                st = zero__error(ZERO_ERR_FORMAT, "%s: %shas a tensor without a 'name'", what,
                                 where);
                goto fail;
            }
            if (!(T->name = dup_str(tn->valuestring))) goto oom;
            char tw[320];
            snprintf(tw, sizeof tw, "%stensor %.100s: ", where, T->name);
            const cJSON *shape = cJSON_GetObjectItemCaseSensitive(o, "shape");
            int nd = cJSON_IsArray(shape) ? cJSON_GetArraySize(shape) : -1;
            if (nd < 1 || nd > ZERO_CKPT_MAX_DIMS) {
                st = zero__error(ZERO_ERR_FORMAT,
                                 "%s: %s'shape' is not an array of 1 to %d dimensions", what, tw,
                                 ZERO_CKPT_MAX_DIMS);
                goto fail;
            }
            T->ndim = nd;
            uint64_t numel = 1;
            for (int d = 0; d < nd; d++) {
                const cJSON *x = cJSON_GetArrayItem(shape, d);
                if (!cJSON_IsNumber(x) || !(x->valuedouble >= 0) || x->valuedouble > MAXC ||
                    x->valuedouble != floor(x->valuedouble)) {
                    st = zero__error(ZERO_ERR_FORMAT, "%s: %sdimension %d is not a count", what, tw,
                                     d);
                    goto fail;
                }
                T->shape[d] = (size_t)x->valuedouble;
                /* keep numel <= pc + 1 so that the product cannot overflow */
                if (T->shape[d] != 0 && numel > pc / T->shape[d])
                    numel = pc + 1;
                else
                    numel *= T->shape[d];
            }
            uint64_t off, flags;
            if ((st = get_count(o, "offset", MAXC, &off, what, tw)) != ZERO_OK) goto fail;
            if ((st = get_count(o, "flags", 4294967295.0, &flags, what, tw)) != ZERO_OK) goto fail;
            T->offset = (size_t)off;
            T->flags = (unsigned)flags;
            if (numel > pc || off > pc - numel) {
                st = zero__error(ZERO_ERR_FORMAT,
                                 "%s: %slies outside the unit: offset %llu, expected offset + "
                                 "elements <= %llu",
                                 what, tw, (unsigned long long)off, (unsigned long long)pc);
                goto fail;
            }
        }
    }
    cJSON_Delete(root);
    return ZERO_OK;
oom:
    st = zero__error(ZERO_ERR_OUT_OF_MEMORY, "%s: out of memory", what);
fail:
    cJSON_Delete(root);
    zero__manifest_free(m);
    return st;
}

zero_status_t zero_ckpt_parse_manifest(const char *text, size_t size) {
    zero__manifest_t m;
    zero_status_t st = zero__manifest_parse(&m, text, size, "manifest");
    if (st == ZERO_OK) zero__manifest_free(&m);
    return st;
}
