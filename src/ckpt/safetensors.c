/* safetensors.c — export of a checkpoint's fp32 master weights to one safetensors file, each
 * tensor under the name and in the layout the model's name map gives (zero_ckpt_name_map_t), and
 * import of such a file into a layout.
 *
 * safetensors: 8-byte little-endian header length N, N bytes of JSON ({name: {dtype, shape,
 * data_offsets: [begin, end]}} plus "__metadata__"), then the raw little-endian data; offsets are
 * relative to the end of the header. We pad the header with spaces to a multiple of 8.
 *
 * Memory is bounded: tensors that keep their layout stream in 4 MiB chunks; tensors the map
 * stores transposed ([cols, rows] for our [rows, cols]) are read whole once and written
 * transposed band by band, so the peak is one such tensor plus a few chunk buffers.
 *
 * The import trusts nothing it has not checked: the header (st_header.c), then the model's
 * tensors by name and shape, then every value finite, reading the data twice, and only then
 * delivers anything.
 *
 * Not here: any model's names (each model hands its map in); a tensor the map does not name
 * fails, naming it.
 */
#include "ckpt/ckpt_internal.h"
#include "core/core_internal.h"

#include <cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#define BAND_ELEMS ((size_t)1 << 20)

/* The file's name of tensor T of unit U from the model's map, and whether it is transposed (only
 * 2-D tensors can be). */
static zero_status_t file_name(const zero_ckpt_name_map_t *names, const zero_ckpt_unit_t *U,
                               const zero_ckpt_tensor_t *T, char *out, size_t out_size, int *tr) {
    *tr = 0;
    out[0] = '\0';
    if (!names->name(names->user, U->name, T->name, out, out_size, tr))
        return zero__error(ZERO_ERR_INVALID_ARG,
                           "tensor %s of unit %s has no name in the %s name map (expected a "
                           "tensor of that model)",
                           T->name, U->name, names->model ? names->model : "model's");
    if (*tr && T->ndim != 2)
        return zero__error(ZERO_ERR_FORMAT,
                           "tensor %s of unit %s: expected 2 dimensions, found %d (the %s name "
                           "map stores it transposed)",
                           T->name, U->name, T->ndim, names->model ? names->model : "model's");
    return ZERO_OK;
}

static size_t numel(const zero_ckpt_tensor_t *t) {
    size_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
    return n;
}

/* The file's shape of a tensor: a transposed one has its two dimensions swapped. */
static void file_shape(const zero_ckpt_tensor_t *t, int transposed, size_t *shape) {
    for (int d = 0; d < t->ndim; d++) shape[d] = t->shape[d];
    if (transposed) shape[0] = t->shape[1], shape[1] = t->shape[0];
}

static void to_dtype(void *dst, const float *src, size_t n, zero_dtype_t dtype) {
    if (dtype == ZERO_DTYPE_FP32) {
        memcpy(dst, src, n * sizeof(float));
    } else {
        uint16_t *o = dst;
        for (size_t i = 0; i < n; i++) o[i] = zero_fp32_to_bf16(src[i]);
    }
}

/* dst (cols, rows) = transpose of src (rows, cols), for dst rows [r0, r1): tiles of 32 x 32 keep
 * both sides in cache. */
static void transpose_band(float *dst, const float *src, size_t rows, size_t cols, size_t r0,
                           size_t r1) {
    for (size_t i0 = r0; i0 < r1; i0 += 32)
        for (size_t j0 = 0; j0 < rows; j0 += 32)
            for (size_t i = i0; i < ZERO_MIN(i0 + 32, r1); i++)
                for (size_t j = j0; j < ZERO_MIN(j0 + 32, rows); j++)
                    dst[(i - r0) * rows + j] = src[j * cols + i];
}

zero_status_t zero_ckpt_export_safetensors(const zero_ckpt_t *c, const zero_ckpt_name_map_t *names,
                                           const char *out_path, zero_dtype_t dtype) {
    if (!c || !names || !names->name || !out_path)
        return zero__error(ZERO_ERR_INVALID_ARG, "safetensors export: NULL argument");
    if (dtype != ZERO_DTYPE_FP32 && dtype != ZERO_DTYPE_BF16)
        return zero__error(ZERO_ERR_INVALID_ARG,
                           "safetensors export: dtype %s is not supported (expected fp32 or bf16)",
                           zero_dtype_name(dtype));
    const zero_ckpt_layout_t *L = zero_ckpt_get_layout(c);
    size_t es = zero_dtype_size(dtype);
    zero_status_t st = ZERO_OK;
    cJSON *hdr = cJSON_CreateObject();
    char *text = NULL;
    float *full = NULL, *buf = NULL;
    void *conv = NULL;
    int fd = -1;
    char tmp[4096 + 8];
    snprintf(tmp, sizeof tmp, "%s.tmp", out_path);
    if (!hdr) return zero__error(ZERO_ERR_OUT_OF_MEMORY, "safetensors export: out of memory");
    cJSON *meta = cJSON_AddObjectToObject(hdr, "__metadata__");
    cJSON_AddStringToObject(meta, "format", "pt");
    cJSON_AddStringToObject(meta, "source", "zero checkpoint");
    /* the model's shape as the checkpoint has it (heads is in no tensor's shape): what
     * zero generate reads back */
    const char *model = zero_ckpt_get_meta(c)->model_json;
    if (model && strcmp(model, "null") != 0) cJSON_AddStringToObject(meta, "zero_model", model);
    size_t pos = 0, largest_t = 0;
    for (int u = 0; u < L->unit_count && st == ZERO_OK; u++)
        for (int t = 0; t < L->units[u].tensor_count; t++) {
            const zero_ckpt_tensor_t *T = &L->units[u].tensors[t];
            char name[256];
            int tr;
            st = file_name(names, &L->units[u], T, name, sizeof name, &tr);
            if (st != ZERO_OK) break;
            size_t shape[ZERO_CKPT_MAX_DIMS], n = numel(T);
            file_shape(T, tr, shape);
            if (tr) largest_t = ZERO_MAX(largest_t, n);
            cJSON *o = cJSON_AddObjectToObject(hdr, name);
            cJSON_AddStringToObject(o, "dtype", dtype == ZERO_DTYPE_FP32 ? "F32" : "BF16");
            cJSON *js = cJSON_AddArrayToObject(o, "shape");
            for (int d = 0; d < T->ndim; d++)
                cJSON_AddItemToArray(js, cJSON_CreateNumber((double)shape[d]));
            cJSON *off = cJSON_AddArrayToObject(o, "data_offsets");
            cJSON_AddItemToArray(off, cJSON_CreateNumber((double)pos));
            pos += n * es;
            cJSON_AddItemToArray(off, cJSON_CreateNumber((double)pos));
        }
    if (st != ZERO_OK) goto done;
    text = cJSON_PrintUnformatted(hdr);
    size_t hlen = text ? strlen(text) : 0, padded = (hlen + 7) / 8 * 8;
    full = malloc((largest_t ? largest_t : 1) * sizeof(float));
    buf = malloc(BAND_ELEMS * sizeof(float));
    conv = malloc(BAND_ELEMS * es);
    if (!text || !full || !buf || !conv) {
        st = zero__error(ZERO_ERR_OUT_OF_MEMORY, "safetensors export: out of memory");
        goto done;
    }
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0) {
        st = zero__error(ZERO_ERR_IO, "cannot create %s: %s", tmp, strerror(errno));
        goto done;
    }
    unsigned char len8[8];
    zero__put_u64(len8, padded);
    if ((st = zero__write_all(fd, len8, 8, tmp)) != ZERO_OK) goto done;
    if ((st = zero__write_all(fd, text, hlen, tmp)) != ZERO_OK) goto done;
    if ((st = zero__write_all(fd, "        ", padded - hlen, tmp)) != ZERO_OK) goto done;
    for (int u = 0; u < L->unit_count && st == ZERO_OK; u++)
        for (int t = 0; t < L->units[u].tensor_count && st == ZERO_OK; t++) {
            const zero_ckpt_tensor_t *T = &L->units[u].tensors[t];
            char name[256];
            int tr;
            file_name(names, &L->units[u], T, name, sizeof name, &tr); /* checked above */
            size_t n = numel(T);
            if (!tr) {
                for (size_t i = 0; i < n && st == ZERO_OK; i += BAND_ELEMS) {
                    size_t k = ZERO_MIN(BAND_ELEMS, n - i);
                    st = zero_ckpt_read_range(c, u, ZERO_CKPT_PARAMS, T->offset + i, k, buf);
                    if (st != ZERO_OK) break;
                    to_dtype(conv, buf, k, dtype);
                    st = zero__write_all(fd, conv, k * es, tmp);
                }
                continue;
            }
            size_t rows = T->shape[0], cols = T->shape[1]; /* ours: (out, in) */
            st = zero_ckpt_read_range(c, u, ZERO_CKPT_PARAMS, T->offset, n, full);
            size_t band = ZERO_MAX((size_t)1, BAND_ELEMS / (rows ? rows : 1));
            for (size_t r0 = 0; r0 < cols && st == ZERO_OK; r0 += band) {
                size_t r1 = ZERO_MIN(cols, r0 + band);
                transpose_band(buf, full, rows, cols, r0, r1);
                to_dtype(conv, buf, (r1 - r0) * rows, dtype);
                st = zero__write_all(fd, conv, (r1 - r0) * rows * es, tmp);
            }
        }
    if (st != ZERO_OK) goto done;
    if (fsync(fd) != 0) {
        st = zero__error(ZERO_ERR_IO, "fsync of %s failed: %s", tmp, strerror(errno));
        goto done;
    }
    if (close(fd) != 0) {
        fd = -1;
        st = zero__error(ZERO_ERR_IO, "close of %s failed: %s", tmp, strerror(errno));
        goto done;
    }
    fd = -1;
    if (rename(tmp, out_path) != 0)
        st = zero__error(ZERO_ERR_IO, "cannot rename %s to %s: %s", tmp, out_path, strerror(errno));
done:
    if (fd >= 0) close(fd);
    if (st != ZERO_OK) unlink(tmp);
    cJSON_Delete(hdr);
    free(text);
    free(full);
    free(buf);
    free(conv);
    return st;
}

/* ------------------------------------------------------------------------------ import */

static void shape_text(char *out, size_t size, const size_t *shape, int nd) {
    size_t o = (size_t)snprintf(out, size, "[");
    for (int d = 0; d < nd && o < size; d++)
        o += (size_t)snprintf(out + o, size - o, "%s%zu", d ? ", " : "", shape[d]);
    if (o < size) snprintf(out + o, size - o, "]");
}

typedef struct {
    const cJSON *entry;
    int bf16;
    uint64_t begin;
} found_t;

/* Tensor t of unit U as stored at f (n elements, F32 or BF16, in the file's layout): fail naming
 * it, the first non-finite element (index and position in the file's shape) and its value. raw
 * and buf: BAND_ELEMS floats of scratch. */
static zero_status_t check_finite(int fd, const char *path, const zero_ckpt_name_map_t *names,
                                  const zero_ckpt_unit_t *U, int t, const found_t *f, uint16_t *raw,
                                  float *buf) {
    const zero_ckpt_tensor_t *T = &U->tensors[t];
    char name[256], pos[160];
    int tr;
    file_name(names, U, T, name, sizeof name, &tr); /* checked in pass 1 */
    size_t n = numel(T), es = f->bf16 ? 2 : 4, shape[ZERO_CKPT_MAX_DIMS];
    file_shape(T, tr, shape);
    for (size_t i = 0; i < n; i += BAND_ELEMS) {
        size_t m = ZERO_MIN(BAND_ELEMS, n - i);
        zero_status_t st = zero__pread_all(fd, raw, m * es, (int64_t)(f->begin + i * es), path);
        if (st != ZERO_OK) return st;
        if (f->bf16)
            for (size_t j = 0; j < m; j++) buf[j] = zero_bf16_to_fp32(raw[j]);
        else
            memcpy(buf, raw, m * sizeof(float));
        for (size_t j = 0; j < m; j++) {
            if (isfinite(buf[j])) continue;
            size_t idx[ZERO_CKPT_MAX_DIMS], r = i + j;
            for (int d = T->ndim - 1; d >= 0; d--) idx[d] = r % shape[d], r /= shape[d];
            shape_text(pos, sizeof pos, idx, T->ndim);
            return zero__error(ZERO_ERR_FORMAT,
                               "%s: tensor %s holds %s at element %zu %s of %zu (the first "
                               "non-finite value; expected finite weights)",
                               path, name, isnan(buf[j]) ? "NaN" : (buf[j] > 0 ? "+Inf" : "-Inf"),
                               i + j, pos, n);
        }
    }
    return ZERO_OK;
}

/* Open a safetensors file and parse and check its header (zero__st_header_parse): *fd (the
 * caller closes it), *hdr (cJSON_Delete), the data section's file offset and size. Nothing is
 * left open or allocated on failure. */
static zero_status_t st_open(const char *path, int *fd_out, cJSON **hdr, uint64_t *data_start,
                             uint64_t *data_bytes) {
    *fd_out = -1;
    *hdr = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return zero__error(ZERO_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    struct stat sb;
    char *text = NULL;
    unsigned char len8[8];
    zero_status_t st = ZERO_OK;
    if (fstat(fd, &sb) != 0) {
        st = zero__error(ZERO_ERR_IO, "cannot stat %s: %s", path, strerror(errno));
        goto done;
    }
    uint64_t fsize = (uint64_t)sb.st_size;
    if (fsize < 8) {
        st = zero__error(ZERO_ERR_FORMAT, "%s is truncated: %llu bytes, expected at least 8", path,
                         (unsigned long long)fsize);
        goto done;
    }
    if ((st = zero__pread_all(fd, len8, 8, 0, path)) != ZERO_OK) goto done;
    uint64_t hlen = zero__get_u64(len8);
    if (hlen > fsize - 8 || hlen > ((uint64_t)100 << 20)) {
        st = zero__error(ZERO_ERR_FORMAT,
                         "%s: header length %llu, expected at most %llu (file size) and 100 MiB",
                         path, (unsigned long long)hlen, (unsigned long long)(fsize - 8));
        goto done;
    }
    text = malloc(hlen + 1);
    if (!text) {
        st = zero__error(ZERO_ERR_OUT_OF_MEMORY, "safetensors import: out of memory");
        goto done;
    }
    if ((st = zero__pread_all(fd, text, hlen, 8, path)) != ZERO_OK) goto done;
    text[hlen] = '\0';
    *data_start = 8 + hlen;
    *data_bytes = fsize - 8 - hlen;
    /* Every entry, the model's or not: consistent shapes and ranges, no overlaps. */
    st = zero__st_header_parse(hdr, text, hlen, *data_bytes, path);
done:
    free(text);
    if (st == ZERO_OK)
        *fd_out = fd;
    else
        close(fd);
    return st;
}

zero_status_t zero__st_header_read(const char *path, cJSON **hdr) {
    int fd;
    uint64_t data_start, data_bytes;
    zero_status_t st = st_open(path, &fd, hdr, &data_start, &data_bytes);
    if (st == ZERO_OK) close(fd);
    return st;
}

zero_status_t zero_ckpt_import_safetensors(const char *path, const zero_ckpt_layout_t *L,
                                           const zero_ckpt_name_map_t *names,
                                           const zero_ckpt_shard_io_t *io) {
    if (!path || !names || !names->name || !io || !io->put)
        return zero__error(ZERO_ERR_INVALID_ARG,
                           "safetensors import: NULL argument, no name map or no put");
    zero_status_t st = zero_ckpt_layout_check(L);
    if (st != ZERO_OK) return st;
    int fd = -1;
    cJSON *hdr = NULL;
    found_t *found = NULL;
    float *full = NULL, *buf = NULL;
    uint16_t *raw = NULL;
    uint64_t data_start = 0, data_bytes = 0;
    if ((st = st_open(path, &fd, &hdr, &data_start, &data_bytes)) != ZERO_OK) goto done;
    size_t nt = 0, largest_t = 0;
    for (int u = 0; u < L->unit_count; u++) nt += (size_t)L->units[u].tensor_count;
    found = calloc(nt ? nt : 1, sizeof *found);
    if (!found) {
        st = zero__error(ZERO_ERR_OUT_OF_MEMORY, "safetensors import: out of memory");
        goto done;
    }
    /* Pass 1: every tensor present with the expected shape, dtype and a consistent range. */
    size_t k = 0;
    for (int u = 0; u < L->unit_count && st == ZERO_OK; u++)
        for (int t = 0; t < L->units[u].tensor_count; t++, k++) {
            const zero_ckpt_tensor_t *T = &L->units[u].tensors[t];
            char name[256], want[128], got[128];
            int tr;
            st = file_name(names, &L->units[u], T, name, sizeof name, &tr);
            if (st != ZERO_OK) break;
            size_t shape[ZERO_CKPT_MAX_DIMS], n = numel(T);
            file_shape(T, tr, shape);
            shape_text(want, sizeof want, shape, T->ndim);
            if (tr) largest_t = ZERO_MAX(largest_t, n);
            const cJSON *e = cJSON_GetObjectItemCaseSensitive(hdr, name);
            if (!e) {
                st = zero__error(ZERO_ERR_MISMATCH, "%s: tensor %s is missing (expected shape %s)",
                                 path, name, want);
                break;
            }
            const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
            const cJSON *js = cJSON_GetObjectItemCaseSensitive(e, "shape");
            const cJSON *off = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
            int bf16 = cJSON_IsString(dt) && !strcmp(dt->valuestring, "BF16");
            if (!cJSON_IsString(dt) || (!bf16 && strcmp(dt->valuestring, "F32"))) {
                st = zero__error(ZERO_ERR_MISMATCH,
                                 "%s: tensor %s has dtype %s, expected F32 or "
                                 "BF16",
                                 path, name, cJSON_IsString(dt) ? dt->valuestring : "(missing)");
                break;
            }
            size_t fs[8] = {0};
            int fnd = cJSON_IsArray(js) ? cJSON_GetArraySize(js) : -1, same = fnd == T->ndim;
            for (int d = 0; d < fnd && d < 8; d++) {
                const cJSON *x = cJSON_GetArrayItem(js, d);
                fs[d] = cJSON_IsNumber(x) && x->valuedouble >= 0 && x->valuedouble < 1e15
                            ? (size_t)x->valuedouble
                            : (size_t)-1;
                if (d < T->ndim && fs[d] != shape[d]) same = 0;
            }
            if (!same) {
                shape_text(got, sizeof got, fs, fnd < 0 ? 0 : ZERO_MIN(fnd, 8));
                st = zero__error(ZERO_ERR_MISMATCH,
                                 "%s: tensor %s has shape %s, expected %s (the model's "
                                 "configuration differs from the file's)",
                                 path, name, fnd < 0 ? "(missing)" : got, want);
                break;
            }
            const cJSON *b = cJSON_IsArray(off) ? cJSON_GetArrayItem(off, 0) : NULL;
            const cJSON *en = cJSON_IsArray(off) ? cJSON_GetArrayItem(off, 1) : NULL;
            uint64_t need = (uint64_t)n * (bf16 ? 2 : 4);
            if (!cJSON_IsNumber(b) || !cJSON_IsNumber(en) || b->valuedouble < 0 ||
                en->valuedouble - b->valuedouble != (double)need ||
                en->valuedouble > (double)data_bytes) {
                st = zero__error(ZERO_ERR_FORMAT,
                                 "%s: tensor %s has data_offsets outside the file or not "
                                 "matching its %zu elements of %s",
                                 path, name, n, bf16 ? "BF16" : "F32");
                break;
            }
            found[k] = (found_t){e, bf16, (uint64_t)b->valuedouble + data_start};
        }
    if (st != ZERO_OK) goto done;
    full = malloc((largest_t ? largest_t : 1) * sizeof(float));
    buf = malloc(BAND_ELEMS * sizeof(float));
    raw = malloc(BAND_ELEMS * sizeof(float));
    if (!full || !buf || !raw) {
        st = zero__error(ZERO_ERR_OUT_OF_MEMORY, "safetensors import: out of memory");
        goto done;
    }
    /* Pass 2: every value finite, before anything is delivered (weights with NaN or Inf would
     * make every step's gradient non-finite, and every step would then be skipped). */
    k = 0;
    for (int u = 0; u < L->unit_count && st == ZERO_OK; u++)
        for (int t = 0; t < L->units[u].tensor_count && st == ZERO_OK; t++, k++)
            st = check_finite(fd, path, names, &L->units[u], t, &found[k], raw, buf);
    if (st != ZERO_OK) goto done;
    /* Pass 3: read (converting BF16), transpose what the map stores transposed back, deliver. */
    k = 0;
    for (int u = 0; u < L->unit_count && st == ZERO_OK; u++)
        for (int t = 0; t < L->units[u].tensor_count && st == ZERO_OK; t++, k++) {
            const zero_ckpt_tensor_t *T = &L->units[u].tensors[t];
            char name[256];
            int tr;
            file_name(names, &L->units[u], T, name, sizeof name, &tr); /* checked in pass 1 */
            size_t n = numel(T), es = found[k].bf16 ? 2 : 4;
            float *dst = tr ? full : buf;
            for (size_t i = 0; i < n && st == ZERO_OK; i += BAND_ELEMS) {
                size_t m = ZERO_MIN(BAND_ELEMS, n - i);
                st = zero__pread_all(fd, raw, m * es, (int64_t)(found[k].begin + i * es), path);
                if (st != ZERO_OK) break;
                float *o = tr ? full + i : buf;
                if (found[k].bf16)
                    for (size_t j = 0; j < m; j++) o[j] = zero_bf16_to_fp32(raw[j]);
                else
                    memcpy(o, raw, m * sizeof(float));
                if (!tr) st = io->put(io->user, 0, u, ZERO_CKPT_PARAMS, T->offset + i, m, dst);
            }
            if (!tr || st != ZERO_OK) continue;
            /* file: (in, out) = (cols, rows) of ours; ours row r = file column r */
            size_t rows = T->shape[0], cols = T->shape[1];
            size_t band = ZERO_MAX((size_t)1, BAND_ELEMS / (cols ? cols : 1));
            for (size_t r0 = 0; r0 < rows && st == ZERO_OK; r0 += band) {
                size_t r1 = ZERO_MIN(rows, r0 + band);
                transpose_band(buf, full, cols, rows, r0, r1);
                st = io->put(io->user, 0, u, ZERO_CKPT_PARAMS, T->offset + r0 * cols,
                             (r1 - r0) * cols, buf);
            }
        }
done:
    if (fd >= 0) close(fd);
    cJSON_Delete(hdr);
    free(found);
    free(full);
    free(buf);
    free(raw);
    return st;
}
