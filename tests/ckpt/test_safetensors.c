/* test_safetensors.c — `zero convert`'s export and the import: a GPT-shaped checkpoint (names and
 * shapes of src/model/gpt.c, saved at world 2) is exported to safetensors in fp32 and bf16;
 * a naive reader here checks every value at its Hugging Face position (Conv1D weights
 * transposed), tools/safetensors_check.py checks the structure independently, the import gives
 * the values back, a model of another shape is refused naming the first tensor, and the peak RSS
 * of exporting a 54M-parameter model is reported against 2x the largest tensor + 64 MiB.
 * Files crafted here must be refused before anything is delivered, naming the tensor and what
 * was expected: a fractional or negative shape, data_offsets that do not hold shape x dtype
 * size bytes (or not whole elements) or leave the data, overlapping tensors (the model's or
 * not), and NaN / +Inf / -Inf weights in F32 and BF16 (the first bad element named by index and
 * position, placed by the naive reader).
 *
 * usage: test_safetensors [PYTHON CHECKER.py]   (the Python check is skipped without them)
 */
#include "model/gpt.h"
#include "zero/zero.h"

#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "check.h"

/* ---- a GPT layout, written from the GPT-2 description (not from gpt.c's code) */
typedef struct gpt {
    int L, C, V, T;
    zero_ckpt_layout_t layout;
    zero_ckpt_unit_t units[64];
    zero_ckpt_tensor_t tensors[64][12];
    char names[64][24];
} gpt_t;

static void add(zero_ckpt_unit_t *u, zero_ckpt_tensor_t *ts, const char *name, size_t a, size_t b) {
    zero_ckpt_tensor_t *t = &ts[u->tensor_count++];
    t->name = name;
    t->ndim = b ? 2 : 1;
    t->shape[0] = a;
    t->shape[1] = b;
    t->offset = u->param_count;
    u->param_count += a * (b ? b : 1);
    /* the engine aligns tensors to 16 elements */
    u->param_count = (u->param_count + 15) / 16 * 16;
}

static void gpt_init(gpt_t *g, int L, int C, int V, int T) {
    memset(g, 0, sizeof *g);
    g->L = L, g->C = C, g->V = V, g->T = T;
    size_t c = (size_t)C;
    zero_ckpt_unit_t *u = &g->units[0];
    u->name = "embeddings";
    u->tensors = g->tensors[0];
    add(u, g->tensors[0], "wte", (size_t)V, c);
    add(u, g->tensors[0], "wpe", (size_t)T, c);
    for (int l = 0; l < L; l++) {
        u = &g->units[1 + l];
        snprintf(g->names[l], sizeof g->names[l], "block.%d", l);
        u->name = g->names[l];
        zero_ckpt_tensor_t *ts = g->tensors[1 + l];
        u->tensors = ts;
        add(u, ts, "ln1.weight", c, 0);
        add(u, ts, "ln1.bias", c, 0);
        add(u, ts, "attn.qkv.weight", 3 * c, c);
        add(u, ts, "attn.qkv.bias", 3 * c, 0);
        add(u, ts, "attn.proj.weight", c, c);
        add(u, ts, "attn.proj.bias", c, 0);
        add(u, ts, "ln2.weight", c, 0);
        add(u, ts, "ln2.bias", c, 0);
        add(u, ts, "mlp.fc.weight", 4 * c, c);
        add(u, ts, "mlp.fc.bias", 4 * c, 0);
        add(u, ts, "mlp.proj.weight", c, 4 * c);
        add(u, ts, "mlp.proj.bias", c, 0);
    }
    u = &g->units[1 + L];
    u->name = "final";
    u->tensors = g->tensors[1 + L];
    add(u, g->tensors[1 + L], "lnf.weight", c, 0);
    add(u, g->tensors[1 + L], "lnf.bias", c, 0);
    g->layout.unit_count = L + 2;
    g->layout.units = g->units;
}

static float value(int unit, size_t i) {
    uint32_t x = (uint32_t)(i * 2654435761u) ^ (uint32_t)(unit * 0x9E3779B9u);
    x ^= x >> 13;
    x *= 0x5bd1e995u;
    x ^= x >> 15;
    return ((float)(x & 0xFFFFF) - 524288.0f) / 131072.0f;
}

static zero_status_t get(void *user, int rank, int unit, zero_ckpt_state_t state, size_t offset,
                         size_t count, float *out) {
    const gpt_t *g = user;
    (void)rank;
    (void)state;
    size_t pc = g->units[unit].param_count;
    for (size_t i = 0; i < count; i++) out[i] = offset + i < pc ? value(unit, offset + i) : 0.0f;
    return ZERO_OK;
}

typedef struct {
    long long puts, bad;
    int bf16;
} import_check_t;

static uint16_t naive_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t lsb = (u >> 16) & 1;
    return (uint16_t)((u + 0x7FFF + lsb) >> 16); /* finite inputs only */
}
static float bf16_val(float f) {
    uint32_t u = (uint32_t)naive_bf16(f) << 16;
    float r;
    memcpy(&r, &u, 4);
    return r;
}

static zero_status_t put(void *user, int rank, int unit, zero_ckpt_state_t state, size_t offset,
                         size_t count, const float *in) {
    import_check_t *k = user;
    (void)rank;
    k->puts++;
    if (state != ZERO_CKPT_PARAMS) k->bad++;
    for (size_t i = 0; i < count; i++) {
        float want = value(unit, offset + i);
        if (k->bf16) want = bf16_val(want);
        if (memcmp(&want, &in[i], 4)) k->bad++;
    }
    return ZERO_OK;
}

/* ---- a naive reader: find "name":{ in the header, parse shape, dtype and offsets */
typedef struct {
    unsigned char *data;
    size_t size, hlen;
} file_t;

static int read_whole(const char *path, file_t *f) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return 0;
    fseek(fp, 0, SEEK_END);
    f->size = (size_t)ftell(fp);
    fseek(fp, 0, SEEK_SET);
    f->data = malloc(f->size + 1);
    size_t got = fread(f->data, 1, f->size, fp);
    fclose(fp);
    if (got != f->size || f->size < 8) return 0;
    f->hlen = 0;
    for (int i = 7; i >= 0; i--) f->hlen = (f->hlen << 8) | f->data[i];
    return 8 + f->hlen <= f->size;
}

/* Returns a pointer to the tensor's data or NULL; fills dims and dtype. */
static const unsigned char *find(const file_t *f, const char *name, size_t *d0, size_t *d1, int *nd,
                                 char *dtype) {
    char key[300];
    snprintf(key, sizeof key, "\"%s\":{", name);
    char *hdr = malloc(f->hlen + 1);
    memcpy(hdr, f->data + 8, f->hlen);
    hdr[f->hlen] = '\0';
    const char *p = strstr(hdr, key);
    const unsigned char *res = NULL;
    unsigned long long b, e, a0 = 0, a1 = 0;
    if (p) {
        const char *dt = strstr(p, "\"dtype\":\"");
        const char *sh = strstr(p, "\"shape\":[");
        const char *of = strstr(p, "\"data_offsets\":[");
        if (dt && sh && of && sscanf(dt + 9, "%7[A-Z0-9]", dtype) == 1 &&
            sscanf(of + 16, "%llu,%llu", &b, &e) == 2) {
            *nd = sscanf(sh + 9, "%llu,%llu", &a0, &a1);
            if (sh[9] == ']') *nd = 0;
            *d0 = (size_t)a0;
            *d1 = (size_t)a1;
            if (8 + f->hlen + e <= f->size) res = f->data + 8 + f->hlen + b;
        }
    }
    free(hdr);
    return res;
}

/* Hugging Face GPT-2 name of tensor `tensor` of unit `unit` (g's names), written from
 * transformers' GPT2Model here (not taken from gpt.c's map): Conv1D weights are transposed.
 * 0 when there is none. */
static int hf_ref_name(const char *unit, const char *tensor, char *out, size_t size, int *tr) {
    static const char *const block[][2] = {
        {"ln1.weight", "ln_1.weight"},
        {"ln1.bias", "ln_1.bias"},
        {"attn.qkv.weight", "attn.c_attn.weight"},
        {"attn.qkv.bias", "attn.c_attn.bias"},
        {"attn.proj.weight", "attn.c_proj.weight"},
        {"attn.proj.bias", "attn.c_proj.bias"},
        {"ln2.weight", "ln_2.weight"},
        {"ln2.bias", "ln_2.bias"},
        {"mlp.fc.weight", "mlp.c_fc.weight"},
        {"mlp.fc.bias", "mlp.c_fc.bias"},
        {"mlp.proj.weight", "mlp.c_proj.weight"},
        {"mlp.proj.bias", "mlp.c_proj.bias"},
    };
    int l;
    *tr = 0;
    if (sscanf(unit, "block.%d", &l) == 1) {
        for (size_t i = 0; i < sizeof block / sizeof block[0]; i++)
            if (!strcmp(tensor, block[i][0])) {
                snprintf(out, size, "h.%d.%s", l, block[i][1]);
                /* the linear layers' weights are Conv1D; the layernorm gains are 1-D */
                *tr = strncmp(tensor, "ln", 2) && strstr(tensor, ".weight");
                return 1;
            }
        return 0;
    }
    const char *hf = !strcmp(tensor, "wte")          ? "wte.weight"
                     : !strcmp(tensor, "wpe")        ? "wpe.weight"
                     : !strcmp(tensor, "lnf.weight") ? "ln_f.weight"
                     : !strcmp(tensor, "lnf.bias")   ? "ln_f.bias"
                                                     : NULL;
    if (hf) snprintf(out, size, "%s", hf);
    return hf != NULL;
}

static void check_export(const gpt_t *g, const char *path, int bf16) {
    file_t f = {0};
    CHECK(read_whole(path, &f), "read %s", path);
    long long bad = 0, tensors = 0;
    for (int u = 0; u < g->layout.unit_count; u++)
        for (int t = 0; t < g->units[u].tensor_count; t++) {
            const zero_ckpt_tensor_t *T = &g->units[u].tensors[t];
            char hf[128], dtype[8] = "";
            int tr, nd = -1;
            size_t d0 = 0, d1 = 0;
            if (!hf_ref_name(g->units[u].name, T->name, hf, sizeof hf, &tr)) {
                bad++;
                continue;
            }
            const unsigned char *d = find(&f, hf, &d0, &d1, &nd, dtype);
            size_t rows = T->shape[0], cols = T->ndim == 2 ? T->shape[1] : 1;
            int shape_ok = T->ndim == 1 ? (nd == 1 && d0 == rows)
                           : tr         ? (nd == 2 && d0 == cols && d1 == rows)
                                        : (nd == 2 && d0 == rows && d1 == cols);
            if (!d || !shape_ok || strcmp(dtype, bf16 ? "BF16" : "F32")) {
                fprintf(stderr, "tensor %s: found %d dims [%zu, %zu] %s\n", hf, nd, d0, d1, dtype);
                bad++;
                continue;
            }
            tensors++;
            for (size_t r = 0; r < rows; r++)
                for (size_t c = 0; c < cols; c++) {
                    float want = value(u, T->offset + r * cols + c);
                    size_t pos = tr ? c * rows + r : r * cols + c; /* HF Conv1D: [in, out] */
                    if (bf16) {
                        uint16_t h = (uint16_t)(d[2 * pos] | d[2 * pos + 1] << 8);
                        bad += h != naive_bf16(want);
                    } else {
                        float got;
                        memcpy(&got, d + 4 * pos, 4);
                        bad += memcmp(&got, &want, 4) != 0;
                    }
                }
        }
    CHECK(bad == 0, "%s: %lld bad values or tensors (%lld tensors ok)", path, bad, tensors);
    free(f.data);
}

/* ---- crafted files: a header of our own in front of the data of a good export */

/* Write `header` (padded with spaces to a multiple of 8) and `data` to path. */
static int write_st(const char *path, const char *header, const void *data, size_t data_bytes) {
    FILE *fp = fopen(path, "wb");
    if (!fp) return 0;
    size_t h = strlen(header), hp = (h + 7) / 8 * 8;
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)hp >> (8 * i));
    int ok = fwrite(len8, 1, 8, fp) == 8 && fwrite(header, 1, h, fp) == h &&
             fwrite("        ", 1, hp - h, fp) == hp - h &&
             (data_bytes == 0 || fwrite(data, 1, data_bytes, fp) == data_bytes);
    return fclose(fp) == 0 && ok;
}

/* A copy of the good file f at path with its header edited: the first `from` replaced by `to`
 * (from NULL: `to` inserted right after the opening brace). */
static int edit_header(const file_t *f, const char *path, const char *from, const char *to) {
    char *h = malloc(f->hlen + strlen(to) + 2);
    const char *src = (const char *)f->data + 8;
    size_t at = 1, skip = 0;
    if (from) {
        char *tmp = malloc(f->hlen + 1);
        memcpy(tmp, src, f->hlen);
        tmp[f->hlen] = '\0';
        char *p = strstr(tmp, from);
        at = p ? (size_t)(p - tmp) : 0;
        skip = p ? strlen(from) : 0;
        free(tmp);
        if (!p) {
            free(h);
            return 0;
        }
    }
    size_t hl = f->hlen;
    while (hl > 0 && src[hl - 1] == ' ') hl--; /* the old padding */
    memcpy(h, src, at);
    strcpy(h + at, to);
    size_t o = at + strlen(to);
    memcpy(h + o, src + at + skip, hl - at - skip);
    h[o + hl - at - skip] = '\0';
    int ok = write_st(path, h, f->data + 8 + f->hlen, f->size - 8 - f->hlen);
    free(h);
    return ok;
}

/* A map that names only wte (as "wte.weight"). */
static int partial_name(const void *user, const char *unit, const char *tensor, char *out,
                        size_t size, int *tr) {
    (void)user, (void)unit;
    *tr = 0;
    if (strcmp(tensor, "wte")) return 0;
    snprintf(out, size, "wte.weight");
    return 1;
}

/* Import `path` into g's layout: the status, with nothing delivered (k.puts) on failure. */
static zero_status_t import_fails(const gpt_t *g, const char *path, long long *puts) {
    import_check_t k = {0, 0, 0};
    zero_ckpt_shard_io_t iio = {NULL, put, &k};
    zero_status_t st = zero_ckpt_import_safetensors(path, &g->layout, zero__gpt_names(), &iio);
    *puts = k.puts;
    return st;
}

/* The header checks on files made here, through the memory parser (what the fuzz target sees)
 * and the import (which must refuse before delivering anything). */
static void test_bad_headers(const gpt_t *g, const char *good, const char *root) {
    static const float data[16] = {0};
    static const struct {
        const char *what, *header, *want1, *want2;
        size_t data_bytes;
    } bad[] = {
        {"fractional shape",
         "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,2.5],"
         "\"data_offsets\":[0,20]}}",
         "tensor a: shape entry 1 is 2.5, expected a whole number", "", 20},
        {"negative shape", "{\"a\":{\"dtype\":\"F32\",\"shape\":[-4],\"data_offsets\":[0,16]}}",
         "tensor a: shape entry 0 is -4", "", 16},
        {"range shorter than the shape",
         "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,12]}}",
         "tensor a: data_offsets [0, 12) hold 12 bytes = 3 elements of F32",
         "expected shape [2, 2] = 4 elements = 16 bytes", 16},
        {"range that is not whole elements",
         "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,10]}}",
         "hold 10 bytes = 2.5 elements of F32", "expected shape [2] = 2 elements = 8 bytes", 16},
        {"BF16 range of an F32 size",
         "{\"a\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[0,16]}}",
         "hold 16 bytes = 8 elements of BF16", "expected shape [4] = 4 elements = 8 bytes", 16},
        {"overlap",
         "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[8,24]}}",
         "tensors a [0, 16) and b [8, 24) overlap", "expected disjoint byte ranges", 32},
        {"overlap, listed backwards",
         "{\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[20,28]},"
         "\"c\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[28,32]},"
         "\"a\":{\"dtype\":\"F32\",\"shape\":[8],\"data_offsets\":[0,32]}}",
         "tensors a [0, 32) and b [20, 28) overlap", "", 32},
        {"range past the data", "{\"a\":{\"dtype\":\"F32\",\"shape\":[8],\"data_offsets\":[0,32]}}",
         "data_offsets [0, 32) leave the data section of 16 bytes", "", 16},
        {"offsets backwards", "{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,4]}}",
         "data_offsets [8, 4) leave", "", 16},
        {"fractional offset", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4.5]}}",
         "tensor a: data_offsets must be [begin, end], two whole numbers", "", 16},
        {"shape product overflow",
         "{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,16],"
         "\"data_offsets\":[0,16]}}",
         "expected shape [4294967296, 4294967296, 16] = more than 16 elements", "", 16},
        {"no shape", "{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,16]}}", "tensor a has no shape",
         "", 16},
    };
    char path[800];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(path, sizeof path, "%s/bad-%zu.safetensors", root, i);
        CHECK(write_st(path, bad[i].header, data, bad[i].data_bytes), "write %s", path);
        file_t f = {0};
        read_whole(path, &f);
        zero_status_t st = zero_ckpt_parse_safetensors_header(f.data, f.size);
        CHECK(st == ZERO_ERR_FORMAT && strstr(zero_last_error(), bad[i].want1) &&
                  strstr(zero_last_error(), bad[i].want2),
              "%s: status %d, message '%s', expected '%s' ... '%s'", bad[i].what, (int)st,
              zero_last_error(), bad[i].want1, bad[i].want2);
        printf("  %-34s -> %s\n", bad[i].what, zero_last_error());
        long long puts = 0;
        st = import_fails(g, path, &puts);
        CHECK(st == ZERO_ERR_FORMAT && puts == 0 && strstr(zero_last_error(), bad[i].want1),
              "%s: import status %d, %lld puts", bad[i].what, (int)st, puts);
        free(f.data);
    }
    /* Well-formed corner cases pass: a scalar, an empty tensor anywhere, touching ranges, a gap,
     * a dtype the specification adds later. */
    snprintf(path, sizeof path, "%s/fine.safetensors", root);
    write_st(path,
             "{\"__metadata__\":{\"format\":\"pt\"},\"s\":{\"dtype\":\"F32\",\"shape\":[],"
             "\"data_offsets\":[0,4]},\"e\":{\"dtype\":\"F32\",\"shape\":[0,3],"
             "\"data_offsets\":[4,4]},\"t\":{\"dtype\":\"I64\",\"shape\":[1],"
             "\"data_offsets\":[4,12]},\"n\":{\"dtype\":\"F4\",\"shape\":[2],"
             "\"data_offsets\":[16,17]}}",
             data, 20);
    file_t f = {0};
    read_whole(path, &f);
    CHECK(zero_ckpt_parse_safetensors_header(f.data, f.size) == ZERO_OK, "corner cases accepted");
    free(f.data);

    /* The same faults inside a real export: the model's tensor, or one it does not use. */
    file_t gf = {0};
    CHECK(read_whole(good, &gf), "read %s", good);
    CHECK(zero_ckpt_parse_safetensors_header(gf.data, gf.size) == ZERO_OK, "our export accepted");
    long long puts = 0;
    snprintf(path, sizeof path, "%s/edited.safetensors", root);
    CHECK(edit_header(&gf, path, "\"shape\":[40,48]", "\"shape\":[40,48.0001]") &&
              import_fails(g, path, &puts) == ZERO_ERR_FORMAT && puts == 0 &&
              strstr(zero_last_error(), "tensor wpe.weight: shape entry 1 is 48.0001"),
          "wpe with a fractional shape: '%s'", zero_last_error());
    CHECK(edit_header(&gf, path, NULL,
                      "\"zz.unused\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[8,24]},") &&
              import_fails(g, path, &puts) == ZERO_ERR_FORMAT && puts == 0 &&
              strstr(zero_last_error(), "and zz.unused [8, 24) overlap"),
          "an unused tensor overlapping wte.weight: '%s'", zero_last_error());
    printf("  %-34s -> %s\n", "unused tensor over wte", zero_last_error());
    free(gf.data);
}

/* NaN and Inf values in a good export: refused naming the tensor and the first bad element, with
 * nothing delivered. The element is placed by the naive reader (find), not by the importer. */
static void test_nonfinite(const gpt_t *g, const char *good, const char *root, int bf16) {
    static const struct {
        const char *tensor;
        size_t element;
        float value;
        const char *word;
    } cases[] = {
        {"h.1.attn.c_attn.weight", 1000, NAN, "NaN"},
        {"wte.weight", 300 * 48 - 1, INFINITY, "+Inf"},
        {"ln_f.bias", 0, -INFINITY, "-Inf"},
    };
    char path[800];
    snprintf(path, sizeof path, "%s/nonfinite.safetensors", root);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        file_t f = {0};
        CHECK(read_whole(good, &f), "read %s", good);
        size_t d0 = 0, d1 = 0;
        int nd = 0;
        char dtype[8] = "";
        unsigned char *d = (unsigned char *)find(&f, cases[i].tensor, &d0, &d1, &nd, dtype);
        CHECK(d != NULL, "%s in %s", cases[i].tensor, good);
        if (!d) {
            free(f.data);
            continue;
        }
        /* a second NaN further on: the first one must be named */
        for (int rep = 1; rep >= 0; rep--) {
            size_t at = cases[i].element + (size_t)rep * 7;
            if (at >= (nd == 2 ? d0 * d1 : d0)) continue;
            float v = rep ? NAN : cases[i].value;
            if (bf16) {
                uint32_t u;
                memcpy(&u, &v, 4);
                d[2 * at] = (unsigned char)(u >> 16), d[2 * at + 1] = (unsigned char)(u >> 24);
            } else {
                memcpy(d + 4 * at, &v, 4);
            }
        }
        FILE *fp = fopen(path, "wb");
        CHECK(fp && fwrite(f.data, 1, f.size, fp) == f.size && fclose(fp) == 0, "write %s", path);
        char want[200];
        if (nd == 2)
            snprintf(want, sizeof want, "tensor %s holds %s at element %zu [%zu, %zu] of %zu",
                     cases[i].tensor, cases[i].word, cases[i].element, cases[i].element / d1,
                     cases[i].element % d1, d0 * d1);
        else
            snprintf(want, sizeof want, "tensor %s holds %s at element %zu [%zu] of %zu",
                     cases[i].tensor, cases[i].word, cases[i].element, cases[i].element, d0);
        long long puts = 0;
        zero_status_t st = import_fails(g, path, &puts);
        CHECK(st == ZERO_ERR_FORMAT && puts == 0 && strstr(zero_last_error(), want),
              "%s %s: status %d, %lld puts, message '%s', expected '%s'", bf16 ? "BF16" : "F32",
              cases[i].tensor, (int)st, puts, zero_last_error(), want);
        printf("  %s %-29s -> %s\n", bf16 ? "BF16" : "F32 ", cases[i].word, zero_last_error());
        free(f.data);
    }
}

static void run_python(const char *python, const char *checker, const char *path, const gpt_t *g,
                       const char *dtype, int expect_ok) {
    if (!python || !checker) {
        printf("  python check skipped (no interpreter given)\n");
        return;
    }
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s' '%s' '%s' --gpt2 %d,%d,%d,%d --dtype %s --finite", python,
             checker, path, g->L, g->C, g->V, g->T, dtype);
    fflush(stdout);
    int rc = system(cmd);
    int ok = WIFEXITED(rc) && WEXITSTATUS(rc) == 0;
    CHECK(ok == expect_ok, "python checker on %s: exit %d, expected %s", path, WEXITSTATUS(rc),
          expect_ok ? "success" : "failure");
}

int main(int argc, char **argv) {
    const char *python = argc > 2 ? argv[1] : NULL, *checker = argc > 2 ? argv[2] : NULL;
    const char *tmpd = getenv("TMPDIR");
    char root[512], dir[600], out32[700], out16[700], path[800];
    snprintf(root, sizeof root, "%s/zero-st-test-XXXXXX", tmpd && *tmpd ? tmpd : "/tmp");
    if (!mkdtemp(root)) return 1;
    zero_log_set_level(ZERO_LOG_WARN);
    double t0 = zero_time_now();

    gpt_t *g = malloc(sizeof *g);
    gpt_init(g, 2, 48, 300, 40);
    snprintf(dir, sizeof dir, "%s/ck", root);
    zero_ckpt_save_params_t sp = zero_ckpt_save_params_default();
    sp.save_dir = dir;
    sp.world = 2;
    sp.with_optim = 0;
    zero_ckpt_meta_t meta = {.step = 5, .model_json = "{\"layers\":2}"};
    zero_ckpt_shard_io_t io = {get, NULL, g};
    CHECK(zero_ckpt_save(&sp, &g->layout, &meta, &io, path, sizeof path) == ZERO_OK, "save");
    zero_ckpt_t *c = NULL;
    CHECK(zero_ckpt_open(&c, dir) == ZERO_OK, "open");
    snprintf(out32, sizeof out32, "%s/model.safetensors", root);
    snprintf(out16, sizeof out16, "%s/model-bf16.safetensors", root);
    const zero_ckpt_name_map_t *names = zero__gpt_names(); /* the model's map */
    CHECK(zero_ckpt_export_safetensors(c, names, out32, ZERO_DTYPE_FP32) == ZERO_OK, "export fp32");
    CHECK(zero_ckpt_export_safetensors(c, names, out16, ZERO_DTYPE_BF16) == ZERO_OK, "export bf16");
    CHECK(zero_ckpt_export_safetensors(c, names, out16, ZERO_DTYPE_FP16) == ZERO_ERR_INVALID_ARG,
          "fp16 refused");
    /* A map without a name for a tensor fails naming it, its unit and the map; none at all is
     * refused. Neither leaves a file behind. */
    char none[800];
    snprintf(none, sizeof none, "%s/none.safetensors", root);
    zero_ckpt_name_map_t partial = {"test's partial", partial_name, NULL};
    zero_status_t sn = zero_ckpt_export_safetensors(c, &partial, none, ZERO_DTYPE_FP32);
    CHECK(sn == ZERO_ERR_INVALID_ARG &&
              strstr(zero_last_error(), "tensor wpe of unit embeddings has no name in the "
                                        "test's partial name map") &&
              access(none, F_OK) != 0,
          "a tensor the map does not name: status %d, %s", (int)sn, zero_last_error());
    printf("  partial map  -> %s\n", zero_last_error());
    CHECK(zero_ckpt_export_safetensors(c, NULL, none, ZERO_DTYPE_FP32) == ZERO_ERR_INVALID_ARG &&
              access(none, F_OK) != 0,
          "no map refused");
    zero_ckpt_close(c);
    check_export(g, out32, 0);
    check_export(g, out16, 1);
    run_python(python, checker, out32, g, "F32", 1);
    run_python(python, checker, out16, g, "BF16", 1);
    /* The checker must notice a wrong configuration (it is not a rubber stamp). */
    gpt_t *g3 = malloc(sizeof *g3);
    gpt_init(g3, 3, 48, 300, 40);
    run_python(python, checker, out32, g3, "F32", 0);

    /* Import: values back (fp32 exactly, bf16 rounded); another shape refused, nothing put. */
    import_check_t k = {0, 0, 0};
    zero_ckpt_shard_io_t iio = {NULL, put, &k};
    CHECK(zero_ckpt_import_safetensors(out32, &g->layout, names, &iio) == ZERO_OK && k.bad == 0 &&
              k.puts > 0,
          "import fp32: %lld bad in %lld puts", k.bad, k.puts);
    k = (import_check_t){0, 0, 1};
    CHECK(zero_ckpt_import_safetensors(out16, &g->layout, names, &iio) == ZERO_OK && k.bad == 0,
          "import bf16: %lld bad", k.bad);
    k = (import_check_t){0, 0, 0};
    zero_status_t st = zero_ckpt_import_safetensors(out32, &g->layout, &partial, &iio);
    CHECK(st == ZERO_ERR_INVALID_ARG && k.puts == 0 && strstr(zero_last_error(), "wpe"),
          "import with a partial map: status %d, %lld puts", (int)st, k.puts);
    st = zero_ckpt_import_safetensors(out32, &g3->layout, names, &iio);
    CHECK(st == ZERO_ERR_MISMATCH && k.puts == 0 && strstr(zero_last_error(), "h.2.ln_1.weight"),
          "more layers: missing tensor named (status %d)", (int)st);
    printf("  3 layers     -> %s\n", zero_last_error());
    gpt_t *gw = malloc(sizeof *gw);
    gpt_init(gw, 2, 48, 300, 64);
    st = zero_ckpt_import_safetensors(out32, &gw->layout, names, &iio);
    CHECK(st == ZERO_ERR_MISMATCH && k.puts == 0 &&
              strstr(zero_last_error(), "wpe.weight has shape [40, 48], expected [64, 48]"),
          "longer context: shape mismatch named (status %d)", (int)st);
    printf("  seq 64       -> %s\n", zero_last_error());
    test_bad_headers(g, out32, root);
    test_nonfinite(g, out32, root, 0);
    test_nonfinite(g, out16, root, 1);

    /* Peak RSS of an export of a 54M-parameter GPT (2 layers, C 768, V 50257, T 1024), measured
     * in a child that does nothing else. */
    gpt_t *gb = malloc(sizeof *gb);
    gpt_init(gb, 2, 768, 50257, 1024);
    snprintf(dir, sizeof dir, "%s/big", root);
    sp.save_dir = dir;
    sp.world = 1;
    io.user = gb;
    double ts = zero_time_now();
    CHECK(zero_ckpt_save(&sp, &gb->layout, &meta, &io, NULL, 0) == ZERO_OK, "save big");
    double save_s = zero_time_now() - ts;
    fflush(stdout);
    int pipefd[2];
    if (pipe(pipefd) != 0) return 1;
    pid_t pid = fork();
    if (pid == 0) {
        close(pipefd[0]);
        size_t before = zero_peak_rss_bytes();
        zero_ckpt_t *cb = NULL;
        char outb[800];
        snprintf(outb, sizeof outb, "%s/big.safetensors", root);
        double t = zero_time_now();
        zero_status_t s = zero_ckpt_open(&cb, dir);
        if (s == ZERO_OK) s = zero_ckpt_export_safetensors(cb, names, outb, ZERO_DTYPE_FP32);
        zero_ckpt_close(cb);
        double r[3] = {(double)before, (double)zero_peak_rss_bytes(), zero_time_now() - t};
        if (write(pipefd[1], r, sizeof r) != (ssize_t)sizeof r) _exit(3);
        _exit(s == ZERO_OK ? 0 : 1);
    }
    close(pipefd[1]);
    double r[3] = {0, 0, 0};
    ssize_t got = read(pipefd[0], r, sizeof r);
    int status;
    waitpid(pid, &status, 0);
    close(pipefd[0]);
    double largest = 50257.0 * 768 * 4, bound = 2 * largest + 64.0 * 1048576;
    CHECK(got == (ssize_t)sizeof r && WIFEXITED(status) && WEXITSTATUS(status) == 0,
          "big export in a child");
    printf("  export of %.1fM params: %.2f s (save %.2f s), peak RSS %.1f MiB (%.1f MiB at "
           "start), bound 2 x largest tensor %.1f MiB + 64 MiB = %.1f MiB\n",
           (double)(gb->units[0].param_count + 2 * gb->units[1].param_count) / 1e6, r[2], save_s,
           r[1] / 1048576, r[0] / 1048576, largest / 1048576, bound / 1048576);
    CHECK(r[1] <= bound, "peak RSS %.1f MiB within %.1f MiB", r[1] / 1048576, bound / 1048576);

    snprintf(path, sizeof path, "rm -rf '%s'", root);
    if (system(path) != 0) fprintf(stderr, "warning: could not remove %s\n", root);
    free(g);
    free(g3);
    free(gw);
    free(gb);
    printf("test_safetensors: %.1f s\n", zero_time_now() - t0);
    return check_report();
}
