/* st_header.c — the checks of a safetensors header before any tensor is read: every entry has a
 * dtype, a shape of whole numbers and data_offsets [begin, end) inside the data section; for a
 * dtype of the safetensors specification the range holds exactly shape product x dtype size
 * bytes; and no two tensors share a byte.
 *
 * Kept apart from safetensors.c (which also exports checkpoints, through ckpt.c and the
 * communicator) so that the fuzz target links it with nothing but cJSON and the status code.
 * Not here: whether the tensors are the model's (safetensors.c matches names, dtypes and shapes).
 * Invariant: every count is checked against the data section's size before use, so a hostile
 * header gives ZERO_ERR_FORMAT, never an overflow or a huge allocation.
 */
#include "ckpt/ckpt_internal.h"
#include "core/core_internal.h"

#include <cJSON.h>
#include <stdlib.h>

/* Element sizes of the specification's dtypes. Other names (newer sub-byte types) are accepted
 * without the size check: the importer only ever reads F32 and BF16. */
static const struct {
    const char *name;
    unsigned bytes;
} st_dtypes[] = {{"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1},
                 {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
                 {"U32", 4},  {"F32", 4}, {"F64", 8}, {"I64", 8},     {"U64", 8}};

static unsigned dtype_bytes(const char *name) {
    for (size_t i = 0; i < ZERO_ARRAY_LEN(st_dtypes); i++)
        if (!strcmp(name, st_dtypes[i].name)) return st_dtypes[i].bytes;
    return 0;
}

/* A JSON number that is a whole number in [0, 2^53]. */
static int whole(const cJSON *x, uint64_t *out) {
    if (!cJSON_IsNumber(x) || !(x->valuedouble >= 0) || x->valuedouble > 9007199254740992.0)
        return 0;
    *out = (uint64_t)x->valuedouble;
    return (double)*out == x->valuedouble;
}

typedef struct {
    const char *name;
    uint64_t begin, end;
} range_t;

static int by_begin(const void *a, const void *b) {
    const range_t *x = a, *y = b;
    return x->begin < y->begin   ? -1
           : x->begin > y->begin ? 1
                                 : (x->end > y->end) - (x->end < y->end);
}

static zero_status_t check_entry(const cJSON *e, uint64_t data_bytes, const char *path,
                                 range_t *r) {
    const char *name = e->string;
    if (!cJSON_IsObject(e))
        return zero__error(ZERO_ERR_FORMAT, "%s: tensor %s is not a JSON object", path, name);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *js = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *off = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsString(dt))
        return zero__error(ZERO_ERR_FORMAT, "%s: tensor %s has no dtype (expected a string)", path,
                           name);
    if (!cJSON_IsArray(js))
        return zero__error(ZERO_ERR_FORMAT, "%s: tensor %s has no shape (expected an array)", path,
                           name);
    /* product of the shape, saturated above the data section (nothing larger can fit) */
    uint64_t numel = 1, dim;
    int nd = cJSON_GetArraySize(js), big = 0;
    char shape[160];
    size_t o = (size_t)snprintf(shape, sizeof shape, "[");
    for (int d = 0; d < nd; d++) {
        const cJSON *x = cJSON_GetArrayItem(js, d);
        if (!whole(x, &dim))
            return zero__error(ZERO_ERR_FORMAT,
                               "%s: tensor %s: shape entry %d is %s%.17g, expected a whole number "
                               ">= 0",
                               path, name, d, cJSON_IsNumber(x) ? "" : "not a number: ",
                               cJSON_IsNumber(x) ? x->valuedouble : 0.0);
        if (o < sizeof shape)
            o += (size_t)snprintf(shape + o, sizeof shape - o, "%s%llu", d ? ", " : "",
                                  (unsigned long long)dim);
        if (dim && numel > data_bytes / dim)
            big = 1;
        else
            numel *= dim;
    }
    if (o < sizeof shape) snprintf(shape + o, sizeof shape - o, "]");
    uint64_t b, en;
    if (!cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2 ||
        !whole(cJSON_GetArrayItem(off, 0), &b) || !whole(cJSON_GetArrayItem(off, 1), &en))
        return zero__error(ZERO_ERR_FORMAT,
                           "%s: tensor %s: data_offsets must be [begin, end], two whole numbers",
                           path, name);
    if (b > en || en > data_bytes)
        return zero__error(ZERO_ERR_FORMAT,
                           "%s: tensor %s: data_offsets [%llu, %llu) leave the data section of "
                           "%llu bytes (expected begin <= end <= %llu)",
                           path, name, (unsigned long long)b, (unsigned long long)en,
                           (unsigned long long)data_bytes, (unsigned long long)data_bytes);
    unsigned es = dtype_bytes(dt->valuestring);
    if (es && (big || numel * es != en - b))
        return zero__error(ZERO_ERR_FORMAT,
                           "%s: tensor %s: data_offsets [%llu, %llu) hold %llu bytes = %.17g "
                           "elements of %s, expected shape %s = %s%llu elements = %s%llu bytes",
                           path, name, (unsigned long long)b, (unsigned long long)en,
                           (unsigned long long)(en - b), (double)(en - b) / es, dt->valuestring,
                           shape, big ? "more than " : "",
                           (unsigned long long)(big ? data_bytes : numel), big ? "more than " : "",
                           (unsigned long long)(big ? data_bytes : numel * es));
    *r = (range_t){name, b, en};
    return ZERO_OK;
}

zero_status_t zero__st_header_check(const struct cJSON *hdr, uint64_t data_bytes,
                                    const char *path) {
    if (!cJSON_IsObject(hdr))
        return zero__error(ZERO_ERR_FORMAT, "%s: the header is not a JSON object", path);
    int n = cJSON_GetArraySize(hdr), k = 0;
    range_t *r = calloc(n > 0 ? (size_t)n : 1, sizeof *r);
    if (!r) return zero__error(ZERO_ERR_OUT_OF_MEMORY, "safetensors header: out of memory");
    zero_status_t st = ZERO_OK;
    for (const cJSON *e = hdr->child; e && !st; e = e->next) {
        if (e->string && !strcmp(e->string, "__metadata__")) continue;
        st = check_entry(e, data_bytes, path, &r[k]);
        if (!st && r[k].end > r[k].begin) k++; /* empty tensors share no byte */
    }
    if (!st) {
        qsort(r, (size_t)k, sizeof *r, by_begin);
        /* widest: the range that reaches furthest among those before i */
        for (int i = 1, widest = 0; i < k && !st; i++) {
            if (r[widest].end > r[i].begin)
                st = zero__error(ZERO_ERR_FORMAT,
                                 "%s: tensors %s [%llu, %llu) and %s [%llu, %llu) overlap in the "
                                 "data section (expected disjoint byte ranges)",
                                 path, r[widest].name, (unsigned long long)r[widest].begin,
                                 (unsigned long long)r[widest].end, r[i].name,
                                 (unsigned long long)r[i].begin, (unsigned long long)r[i].end);
            if (r[i].end > r[widest].end) widest = i;
        }
    }
    free(r);
    return st;
}

zero_status_t zero__st_header_parse(struct cJSON **out, const char *text, size_t hlen,
                                    uint64_t data_bytes, const char *path) {
    *out = NULL;
    cJSON *hdr = cJSON_ParseWithLength(text, hlen);
    if (!hdr)
        return zero__error(ZERO_ERR_FORMAT, "%s: the header of %zu bytes is not valid JSON", path,
                           hlen);
    zero_status_t st = zero__st_header_check(hdr, data_bytes, path);
    if (st) {
        cJSON_Delete(hdr);
        return st;
    }
    *out = hdr;
    return ZERO_OK;
}

zero_status_t zero_ckpt_parse_safetensors_header(const void *data, size_t size) {
    if (!data && size) return zero__error(ZERO_ERR_INVALID_ARG, "safetensors header: NULL data");
    if (size < 8)
        return zero__error(ZERO_ERR_FORMAT, "safetensors: %zu bytes, expected at least 8", size);
    uint64_t hlen = zero__get_u64(data);
    if (hlen > size - 8)
        return zero__error(ZERO_ERR_FORMAT,
                           "safetensors: header length %llu, expected at most %zu (file size)",
                           (unsigned long long)hlen, size - 8);
    cJSON *hdr = NULL;
    zero_status_t st = zero__st_header_parse(&hdr, (const char *)data + 8, (size_t)hlen,
                                             size - 8 - hlen, "safetensors");
    cJSON_Delete(hdr);
    return st;
}
