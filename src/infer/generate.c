/* generate.c — the generator of zero/generate.h: a GPT-2 model's weights in RAM (fp32 or bf16)
 * loaded from a checkpoint or a safetensors file, and a forward that appends tokens to a KV
 * cache.
 *
 * Weights: one block holding the units of the training model (zero__gpt_unit_descs: embeddings,
 * block.N, final), each laid out by the engine's rule (every tensor at a multiple of 16
 * elements), so a checkpoint's units load as they are (zero_ckpt_load at world 1, the layout
 * checked) and the safetensors import fills the same layout through the GPT-2 name map; both
 * deliver fp32, rounded to nearest even into a bf16 generator's block.
 * KV cache: per layer, keys then values, (batch, heads, max_seq, head size) each, so the
 * attention of one (sequence, head) reads its rows contiguously (zero__attention_decode).
 * Forward of T new tokens at positions [pos, pos + T): the training block's kernels in its order
 * (layernorm, qkv, attention, projection, residual, layernorm, fc, GELU, projection, residual) on
 * T rows per sequence, the new keys and values copied into the cache before the attention; the
 * head only on each sequence's last row. Prompts longer than CHUNK run in chunks of CHUNK
 * tokens, so the working buffers are batch x CHUNK rows whatever the context. bf16: the
 * training model's 16-bit I/O kernels (kernels_lp.h) on bf16 weights, activations and cache,
 * fp32 logits, as gpt.c runs them, except that a matmul of at most ZERO__GEMV_ROWS rows (a
 * decode step of a small batch) runs on zero__gemv_bf16 where the CPU has AVX512-BF16; fp32
 * matmuls of at most ZERO__GEMV_FP32_ROWS rows on zero__gemv_fp32 (the GEMM library packs the
 * weights per call, more than a small batch's product costs).
 * Quantized weights (weight_bits 8 or 4): the units are stored tensor by tensor (each at a
 * multiple of 64 bytes), the matrices (is_quantized) as one quant.c wire per row, quantized as
 * the loaders deliver them (row by row, so the fp32 model is never held whole), and read by
 * zero__matmul_forward_q; wte's embedding rows are dequantized one by one.
 * Weights file (nvme_path): the blocks are staged one at a time as they load and written to a
 * file (stream.c); the forward acquires each block's region from there and releases it, which
 * posts the read of a later one. The embeddings and the final LayerNorm stay in w. Sharded over
 * ranks (comm): the same, each rank keeping its slice of every staged block and the fetch an
 * all-gather; every rank loads the whole file, so each rank's slices are the same bytes.
 * Not here: MoE layers (refused), sampling (sample.c), timing and printing (the CLI).
 */
#include "zero/generate.h"

#include "ckpt/ckpt_internal.h"
#include "core/core_internal.h"
#include "kernels/kernels.h"
#include "kernels/kernels_lp.h"
#include "kernels/quant.h"
#include "model/carve.h"
#include "model/gpt.h"
#include "stream.h"
#include "zero/ckpt.h"

#include <cJSON.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#define CHUNK 128 /* prompt tokens per forward: bounds the working buffers */

/* A block's weights, by the training model's tensor names. */
enum { LN1W, LN1B, QKVW, QKVB, APW, APB, LN2W, LN2B, FCW, FCB, FPW, FPB, BLOCK_TENSORS };
static const char *const block_names[BLOCK_TENSORS] = {
    "ln1.weight",       "ln1.bias",       "attn.qkv.weight", "attn.qkv.bias",
    "attn.proj.weight", "attn.proj.bias", "ln2.weight",      "ln2.bias",
    "mlp.fc.weight",    "mlp.fc.bias",    "mlp.proj.weight", "mlp.proj.bias"};
_Static_assert(BLOCK_TENSORS == ZERO_GPT_BLOCK_TENSORS, "a view for every block tensor");

struct zero_generator {
    zero_generator_info_t info;
    zero_gpt_config_t cfg;
    int threads, pos;
    zero_dtype_t dt; /* weights, activations and the cache: fp32 or bf16 */
    size_t es;       /* its element size */
    int wbits;       /* 0: every weight in dt; 8 or 4: the matrices quantized (is_quantized) */
    size_t group;    /* elements per scale of a quantized row */
    /* the layout: L + 2 units of the descriptions in descs */
    zero_tensor_desc_t
        descs[ZERO_GPT_EMB_TENSORS + ZERO_GPT_BLOCK_TENSORS + ZERO_GPT_FINAL_TENSORS];
    zero_ckpt_unit_t *units;     /* (L + 2) owned: the fp32 layout the loaders fill */
    zero_ckpt_tensor_t *tensors; /* owned, every unit's */
    char (*unit_names)[24];      /* (L + 2) owned */
    zero_ckpt_layout_t layout;
    /* Stored layout: unit u's region starts at byte region_off[u] of w (a streamed block's at
     * 0 of its buffer); tensor k (of tensors) at byte tbyte[k] of its unit's region, in dt or
     * quantized row by row. */
    size_t *region_off; /* (L + 2) owned */
    size_t *tbyte;      /* (tensors) owned */
    void *w; /* owned: every unit's region, or with a weights file the embeddings' and final's */
    const void *wte, *wpe, *lnfw, *lnfb; /* views into w */
    /* weights file (nvme_path): the blocks, block_bytes each; while loading, block `staged`
     * (a unit number, -1 none) is filled in `stage` */
    const char *nvme_path; /* borrowed during init only */
    zero_comm_t *comm;     /* more than one rank: the blocks sharded over them; else NULL */
    zero__wstream_t *stream;
    size_t block_bytes;
    int staged;
    void *stage;
    /* loading a quantized tensor: the row being assembled (largest row) and its filled count */
    float *rowbuf;
    size_t rowfill;
    void *kv; /* owned: (L, 2, B, NH, max_seq, hs) in dt */
    /* working buffers, one owned block: rows = batch x CHUNK */
    void *act;
    void *x, *ln, *atty, *res2, *qkv, *fch, *last; /* (rows, ...) in dt */
    float *mean, *rstd, *logits, *scratch;         /* fp32 */
    void *wrow;   /* the quantized matmuls' scratch (int4 rows unpacked, activations in int16) */
    int32_t *tok; /* (rows) the chunk's tokens, contiguous */
};

/* Element i of a dt buffer. */
static void *at(const zero_generator_t *g, const void *base, size_t i) {
    return (char *)(uintptr_t)base + i * g->es;
}

zero_generator_params_t zero_generator_params_default(void) {
    zero_generator_params_t p = {1, 0, 1, 0, ZERO_DTYPE_FP32, 0, 64, NULL, 4, NULL};
    return p;
}

/* ------------------------------------------------------------------------------ layout */

/* 1 when tensor t of unit u is stored quantized: with --weights int8|int4, the matrices the
 * matmuls read (qkv, attention projection, fc, MLP projection) and wte (the tied head, and the
 * embedding rows); wpe (one row read per token), biases and LayerNorms stay in dt. */
static int is_quantized(const zero_generator_t *g, int u, int t) {
    if (!g->wbits) return 0;
    if (u == 0) return t == 0;
    return u <= g->cfg.layers && (t == QKVW || t == APW || t == FCW || t == FPW);
}

/* Bytes of tensor t of unit u as stored. */
static size_t stored_bytes(const zero_generator_t *g, int u, int t) {
    const zero_ckpt_tensor_t *T = &g->units[u].tensors[t];
    if (is_quantized(g, u, t))
        return T->shape[0] * zero__q_row_bytes(g->wbits, T->shape[1], g->group);
    size_t n = 1;
    for (int i = 0; i < T->ndim; i++) n *= T->shape[i];
    return n * g->es;
}

/* Tensor t of unit u as stored, in the region at base. */
static const void *tensor_at(const zero_generator_t *g, const void *base, int u, int t) {
    return (const char *)base + g->tbyte[g->units[u].tensors + t - g->tensors];
}

/* Units and tensors of cfg in the engine's layout (what the loaders fill); the stored layout
 * (every tensor at a multiple of 64 bytes, in dt or quantized); the weight block and its views. */
static zero_status_t build_layout(zero_generator_t *g) {
    const int L = g->cfg.layers, nu = L + 2;
    zero_tensor_desc_t *emb = g->descs, *blk = emb + ZERO_GPT_EMB_TENSORS;
    zero_tensor_desc_t *fin = blk + ZERO_GPT_BLOCK_TENSORS;
    zero__gpt_unit_descs(&g->cfg, emb, blk, fin);
    for (int t = 0; t < BLOCK_TENSORS; t++) ZERO_ASSERT(!strcmp(blk[t].name, block_names[t]));
    const size_t nt =
        ZERO_GPT_EMB_TENSORS + (size_t)L * ZERO_GPT_BLOCK_TENSORS + ZERO_GPT_FINAL_TENSORS;
    g->units = calloc((size_t)nu, sizeof *g->units);
    g->tensors = calloc(nt, sizeof *g->tensors);
    g->unit_names = calloc((size_t)nu, sizeof *g->unit_names);
    g->region_off = calloc((size_t)nu, sizeof *g->region_off);
    g->tbyte = calloc(nt, sizeof *g->tbyte);
    g->rowbuf = malloc(4 * (size_t)ZERO_MAX(g->cfg.dim, 1) * sizeof *g->rowbuf);
    if (!g->units || !g->tensors || !g->unit_names || !g->region_off || !g->tbyte || !g->rowbuf)
        return zero__error(ZERO_ERR_OUT_OF_MEMORY, "generate: out of memory for the layout");
    size_t k = 0, total = 0, resident = 0;
    for (int u = 0; u < nu; u++) {
        const zero_tensor_desc_t *d = u == 0 ? emb : u == nu - 1 ? fin : blk;
        const int n = u == 0        ? ZERO_GPT_EMB_TENSORS
                      : u == nu - 1 ? ZERO_GPT_FINAL_TENSORS
                                    : ZERO_GPT_BLOCK_TENSORS;
        if (u == 0)
            snprintf(g->unit_names[u], sizeof g->unit_names[u], "embeddings");
        else if (u == nu - 1)
            snprintf(g->unit_names[u], sizeof g->unit_names[u], "final");
        else
            snprintf(g->unit_names[u], sizeof g->unit_names[u], "block.%d", u - 1);
        size_t off = 0;
        for (int t = 0; t < n; t++) {
            zero_ckpt_tensor_t *T = &g->tensors[k + (size_t)t];
            size_t count = 1;
            T->name = d[t].name;
            T->ndim = d[t].ndim;
            for (int i = 0; i < d[t].ndim; i++) count *= (T->shape[i] = d[t].shape[i]);
            T->offset = off;
            T->flags = d[t].flags;
            off = T->offset + (t + 1 < n ? zero__tensor_span(count) : count);
        }
        g->units[u] = (zero_ckpt_unit_t){g->unit_names[u], off, n, &g->tensors[k], 0};
        size_t bytes = 0;
        for (int t = 0; t < n; t++) {
            g->tbyte[k + (size_t)t] = bytes;
            bytes += zero__align_up(stored_bytes(g, u, t), 64);
        }
        /* streamed blocks: each region is a buffer of its own (offset 0), whole pages on disk,
         * or sharded a 64-byte slice per rank */
        const int streamed = (g->nvme_path || g->comm) && u > 0 && u < nu - 1;
        g->region_off[u] = streamed ? 0 : resident;
        if (streamed)
            g->block_bytes = zero__align_up(bytes, g->comm ? 64 * (size_t)g->info.ranks : 4096);
        else
            resident += bytes;
        total += bytes;
        k += (size_t)n;
    }
    g->layout = (zero_ckpt_layout_t){nu, g->units};
    g->info.weight_bytes = total;
    g->info.param_count = zero__gpt_param_count(&g->cfg);
    g->w = zero_mem_calloc(NULL, ZERO_MEM_PARAMS, resident, 64);
    if (!g->w)
        return zero__error(ZERO_ERR_OUT_OF_MEMORY,
                           "generate: cannot allocate %.1f MiB of weights (%zu parameters)",
                           (double)resident / 1048576.0, g->info.param_count);
    g->info.resident_weight_bytes = resident;
    g->wte = tensor_at(g, g->w, 0, 0);
    g->wpe = tensor_at(g, g->w, 0, 1);
    g->lnfw = tensor_at(g, (const char *)g->w + g->region_off[nu - 1], nu - 1, 0);
    g->lnfb = tensor_at(g, (const char *)g->w + g->region_off[nu - 1], nu - 1, 1);
    if (g->comm) { /* two layer buffers and this rank's slices */
        const int nbuf = ZERO_MIN(2, L);
        g->info.resident_weight_bytes +=
            (size_t)nbuf * g->block_bytes + (size_t)L * (g->block_bytes / (size_t)g->info.ranks);
        return zero__wstream_init_sharded(&g->stream, g->comm, L, g->block_bytes, nbuf);
    }
    if (!g->nvme_path) return ZERO_OK;
    const int nbuf = ZERO_MIN(g->info.buffer_count, L);
    g->info.buffer_count = nbuf;
    g->info.resident_weight_bytes += (size_t)nbuf * g->block_bytes;
    return zero__wstream_init(&g->stream, g->nvme_path, L, g->block_bytes, nbuf);
}

/* The region of unit u that put_params fills: in w, or with a weights file the staging buffer of
 * a block (the units arrive in order: moving to the next block writes the one before). */
static zero_status_t load_region(zero_generator_t *g, int u, char **region) {
    if (!g->stream || u == 0 || u == g->cfg.layers + 1) {
        *region = (char *)g->w + g->region_off[u];
        return ZERO_OK;
    }
    zero_status_t st = ZERO_OK;
    if (g->staged != u) {
        ZERO_ASSERT(u > g->staged); /* in order */
        if (g->staged > 0) st = zero__wstream_flush(g->stream);
        g->staged = u;
        g->stage = zero__wstream_stage(g->stream, u - 1);
    }
    *region = g->stage;
    return st;
}

/* After the loader: write the last staged block and start reading the first ones. */
static zero_status_t finish_load(zero_generator_t *g) {
    if (!g->stream) return ZERO_OK;
    zero_status_t st = g->staged > 0 ? zero__wstream_flush(g->stream) : ZERO_OK;
    g->staged = -1;
    if (!st) st = zero__wstream_start(g->stream);
    if (!g->comm) g->info.io_engine = zero__wstream_engine(g->stream);
    return st;
}

/* Elements [lo, hi) of quantized tensor t of unit u, arriving in order (both loaders deliver a
 * tensor front to back): gathered row by row in rowbuf, each full row quantized into place. */
static void put_quantized(zero_generator_t *g, char *dst, const zero_ckpt_tensor_t *T,
                          const float *in, size_t lo, size_t hi) {
    const size_t K = T->shape[1], rb = zero__q_row_bytes(g->wbits, K, g->group);
    for (size_t i = lo; i < hi;) {
        const size_t idx = i - T->offset, r = idx / K, c = idx % K, m = ZERO_MIN(K - c, hi - i);
        ZERO_ASSERT(c == g->rowfill); /* in order */
        memcpy(g->rowbuf + c, in + (i - lo), m * sizeof *in);
        g->rowfill += m;
        i += m;
        if (g->rowfill < K) continue;
        if (g->wbits == 8)
            zero__q8_quantize_g(dst + r * rb, g->rowbuf, ZERO_DTYPE_FP32, K, g->group, 1);
        else
            zero__q4_quantize_g(dst + r * rb, g->rowbuf, ZERO_DTYPE_FP32, K, g->group, 1);
        g->rowfill = 0;
    }
}

/* The loaders' io->put: elements of a unit's (unpadded) buffer, stored tensor by tensor (the
 * padding between tensors is dropped). */
static zero_status_t put_params(void *user, int rank, int unit, zero_ckpt_state_t state,
                                size_t offset, size_t count, const float *in) {
    zero_generator_t *g = user;
    (void)rank;
    if (state != ZERO_CKPT_PARAMS || unit < 0 || unit >= g->layout.unit_count ||
        offset + count > zero__padded_count(g->units[unit].param_count, 1))
        return zero__error(ZERO_ERR_INVALID_ARG,
                           "generate: load of %zu elements at %zu of unit %d outside the model",
                           count, offset, unit);
    const zero_ckpt_unit_t *U = &g->units[unit];
    char *region;
    const zero_status_t st = load_region(g, unit, &region);
    if (st) return st;
    for (int t = 0; t < U->tensor_count; t++) {
        const zero_ckpt_tensor_t *T = &U->tensors[t];
        size_t n = 1;
        for (int i = 0; i < T->ndim; i++) n *= T->shape[i];
        const size_t lo = ZERO_MAX(offset, T->offset), hi = ZERO_MIN(offset + count, T->offset + n);
        if (lo >= hi) continue;
        char *dst = region + g->tbyte[T - g->tensors];
        if (is_quantized(g, unit, t))
            put_quantized(g, dst, T, in + (lo - offset), lo, hi);
        else /* RNE into bf16 */
            zero__narrow(dst + (lo - T->offset) * g->es, in + (lo - offset), hi - lo, g->dt);
    }
    return ZERO_OK;
}

/* ------------------------------------------------------------------------------ sources */

/* A whole number >= 0 at key of obj into *out; 0 when present and valid. */
static int get_int(const cJSON *obj, const char *key, int *out) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!cJSON_IsNumber(x) || x->valuedouble < 0 || x->valuedouble > 1e9 ||
        x->valuedouble != (double)(int)x->valuedouble)
        return 1;
    *out = (int)x->valuedouble;
    return 0;
}

/* The model keys of a manifest's (or zero convert's metadata's) model JSON into g->cfg;
 * ZERO_ERR_UNSUPPORTED for an MoE model. `what` names the source in messages. */
static zero_status_t model_from_json(zero_generator_t *g, const char *json, const char *what) {
    cJSON *m = cJSON_Parse(json ? json : "null");
    const char *keys[] = {"layers", "heads", "dim", "vocab", "seq"};
    int *dst[] = {&g->cfg.layers, &g->cfg.heads, &g->cfg.dim, &g->cfg.vocab, &g->cfg.seq};
    zero_status_t st = ZERO_OK;
    for (size_t i = 0; i < ZERO_ARRAY_LEN(keys) && !st; i++)
        if (get_int(m, keys[i], dst[i]))
            st = zero__error(ZERO_ERR_FORMAT,
                             "%s has no model.%s (expected the model's shape, as zero train saves "
                             "it)",
                             what, keys[i]);
    int experts = 0;
    if (!st && !get_int(cJSON_GetObjectItemCaseSensitive(m, "moe"), "experts", &experts) &&
        experts > 0)
        st = zero__error(ZERO_ERR_UNSUPPORTED,
                         "%s holds an MoE model (model.moe.experts = %d): generation runs dense "
                         "models only for now",
                         what, experts);
    cJSON_Delete(m);
    return st;
}

static zero_status_t load_checkpoint(zero_generator_t *g, const char *path, int heads) {
    zero_ckpt_t *c = NULL;
    zero_status_t st = zero_ckpt_open(&c, path);
    if (st) return st;
    char what[1100];
    snprintf(what, sizeof what, "checkpoint %s", zero_ckpt_path(c));
    st = model_from_json(g, zero_ckpt_get_meta(c)->model_json, what);
    if (!st && heads > 0 && heads != g->cfg.heads)
        st = zero__error(ZERO_ERR_CONFIG,
                         "heads = %d but %s was trained with model.heads = %d (expected the "
                         "checkpoint's, or 0)",
                         heads, what, g->cfg.heads);
    if (!st) st = zero__gpt_config_check(&g->cfg);
    if (!st) st = build_layout(g);
    if (!st) {
        zero_ckpt_load_params_t lp = zero_ckpt_load_params_default();
        lp.world = 1;
        lp.with_optim = 0;
        zero_ckpt_shard_io_t io = {NULL, put_params, g};
        st = zero_ckpt_load(c, &lp, &g->layout, &io);
    }
    zero_ckpt_close(c);
    g->info.format = "checkpoint";
    return st;
}

/* The shape of file tensor `name`: its dims into shape[0..*nd); 0 when present. */
static int st_shape(const cJSON *hdr, const char *name, size_t *shape, int *nd) {
    const cJSON *js =
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(hdr, name), "shape");
    if (!cJSON_IsArray(js) || cJSON_GetArraySize(js) > 4) return 1;
    *nd = cJSON_GetArraySize(js);
    for (int d = 0; d < *nd; d++) shape[d] = (size_t)cJSON_GetArrayItem(js, d)->valuedouble;
    return 0;
}

/* Heads of a safetensors file's model: zero convert's metadata, then config.json beside it. */
static int st_heads(const cJSON *hdr, const char *path) {
    const cJSON *meta = cJSON_GetObjectItemCaseSensitive(hdr, "__metadata__");
    const cJSON *zm = cJSON_GetObjectItemCaseSensitive(meta, "zero_model");
    int heads = 0;
    if (cJSON_IsString(zm)) {
        cJSON *m = cJSON_Parse(zm->valuestring);
        if (get_int(m, "heads", &heads)) heads = 0;
        cJSON_Delete(m);
        if (heads > 0) return heads;
    }
    char cfg[4096];
    const char *slash = strrchr(path, '/');
    snprintf(cfg, sizeof cfg, "%.*sconfig.json", slash ? (int)(slash - path + 1) : 0, path);
    FILE *f = fopen(cfg, "rb");
    if (!f) return 0;
    char text[65536];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    cJSON *j = cJSON_Parse(text);
    if (get_int(j, "n_head", &heads)) heads = 0;
    cJSON_Delete(j);
    return heads;
}

static zero_status_t load_safetensors(zero_generator_t *g, const char *path, int heads) {
    cJSON *hdr = NULL;
    zero_status_t st = zero__st_header_read(path, &hdr);
    if (st) return st;
    g->info.format = "safetensors";
    const char *prefix = cJSON_GetObjectItemCaseSensitive(hdr, "wte.weight") ? ""
                         : cJSON_GetObjectItemCaseSensitive(hdr, "transformer.wte.weight")
                             ? "transformer."
                             : NULL;
    size_t wte[4], wpe[4];
    int nd1 = 0, nd2 = 0;
    char name[300];
    if (!prefix) {
        st = zero__error(ZERO_ERR_MISMATCH,
                         "%s: tensor wte.weight is missing (nor transformer.wte.weight; expected "
                         "Hugging Face GPT-2 names)",
                         path);
        goto done;
    }
    snprintf(name, sizeof name, "%swte.weight", prefix);
    if (st_shape(hdr, name, wte, &nd1) || nd1 != 2) {
        st = zero__error(ZERO_ERR_MISMATCH, "%s: tensor %s is not 2-D (expected (vocab, dim))",
                         path, name);
        goto done;
    }
    snprintf(name, sizeof name, "%swpe.weight", prefix);
    if (st_shape(hdr, name, wpe, &nd2) || nd2 != 2 || wpe[1] != wte[1]) {
        st = zero__error(ZERO_ERR_MISMATCH,
                         "%s: tensor %s is missing or not of shape (context, %zu) (expected "
                         "Hugging Face GPT-2 names and wte.weight's dim)",
                         path, name, wte[1]);
        goto done;
    }
    int L = 0;
    for (;; L++) {
        snprintf(name, sizeof name, "%sh.%d.ln_1.weight", prefix, L);
        if (!cJSON_GetObjectItemCaseSensitive(hdr, name)) break;
        snprintf(name, sizeof name, "%sh.%d.moe.router.weight", prefix, L);
        if (cJSON_GetObjectItemCaseSensitive(hdr, name)) {
            st = zero__error(ZERO_ERR_UNSUPPORTED,
                             "%s holds an MoE model (tensor %s): generation runs dense models "
                             "only for now",
                             path, name);
            goto done;
        }
    }
    if (L == 0) {
        st = zero__error(ZERO_ERR_MISMATCH,
                         "%s: tensor %sh.0.ln_1.weight is missing (expected at least one GPT-2 "
                         "block)",
                         path, prefix);
        goto done;
    }
    g->cfg.layers = L;
    g->cfg.vocab = wte[0] > (size_t)INT32_MAX ? -1 : (int)wte[0];
    g->cfg.dim = wte[1] > (size_t)INT32_MAX ? -1 : (int)wte[1];
    g->cfg.seq = wpe[0] > (size_t)INT32_MAX ? -1 : (int)wpe[0];
    g->cfg.heads = heads > 0 ? heads : st_heads(hdr, path);
    if (g->cfg.heads <= 0) {
        if (g->cfg.dim % 64) {
            st = zero__error(ZERO_ERR_CONFIG,
                             "%s does not say its attention heads and dim %d is not a multiple "
                             "of GPT-2's head size 64 (pass the heads: --heads N)",
                             path, g->cfg.dim);
            goto done;
        }
        g->cfg.heads = g->cfg.dim / 64;
    }
    if ((st = zero__gpt_config_check(&g->cfg)) != ZERO_OK) goto done;
    if ((st = build_layout(g)) != ZERO_OK) goto done;
    const zero_ckpt_name_map_t *names = NULL; /* the prefix's, and the LM head tied */
    if ((st = zero__gpt_names_of_file(path, &names)) != ZERO_OK) goto done;
    zero_ckpt_shard_io_t io = {NULL, put_params, g};
    st = zero_ckpt_import_safetensors(path, &g->layout, names, &io);
done:
    cJSON_Delete(hdr);
    return st;
}

/* ------------------------------------------------------------------------------ lifecycle */

/* The working buffers' views in one block (carve.h: base NULL counts the bytes). */
static size_t carve_buffers(zero_generator_t *g, char *base) {
    const size_t B = (size_t)g->info.batch, S = (size_t)g->info.max_seq, e = g->es;
    const size_t C = (size_t)g->cfg.dim, V = (size_t)g->cfg.vocab, f = sizeof(float);
    const size_t R = B * (size_t)ZERO_MIN(CHUNK, g->info.max_seq);
    const size_t scratch =
        g->dt == ZERO_DTYPE_FP32
            ? zero__attention_decode_scratch_count(S, g->threads)
            : zero__attention_decode_scratch_count_lp(S, C / (size_t)g->cfg.heads, g->threads);
    size_t off = 0;
    zero__carve(base, &off, R * C, e, &g->x);
    zero__carve(base, &off, R * C, e, &g->ln);
    zero__carve(base, &off, R * C, e, &g->atty);
    zero__carve(base, &off, R * C, e, &g->res2);
    zero__carve(base, &off, R * 3 * C, e, &g->qkv);
    zero__carve(base, &off, R * 4 * C, e, &g->fch);
    zero__carve(base, &off, B * C, e, &g->last);
    zero__carve(base, &off, R, f, &g->mean);
    zero__carve(base, &off, R, f, &g->rstd);
    zero__carve(base, &off, B * V, f, &g->logits);
    zero__carve(base, &off, scratch, f, &g->scratch);
    zero__carve(base, &off, g->wbits ? zero__matmul_q_scratch_bytes(R, 4 * C, g->threads) : 0, 1,
                &g->wrow);
    zero__carve(base, &off, R, sizeof(int32_t), &g->tok);
    return off;
}

static zero_status_t alloc_buffers(zero_generator_t *g) {
    const size_t B = (size_t)g->info.batch, S = (size_t)g->info.max_seq;
    g->info.kv_cache_bytes = 2 * (size_t)g->cfg.layers * B * S * (size_t)g->cfg.dim * g->es;
    g->info.activation_bytes = carve_buffers(g, NULL);
    g->kv = zero_mem_alloc(NULL, ZERO_MEM_ACTIVATIONS, g->info.kv_cache_bytes, 64);
    g->act = zero_mem_calloc(NULL, ZERO_MEM_ACTIVATIONS, g->info.activation_bytes, 64);
    if (!g->kv || !g->act)
        return zero__error(ZERO_ERR_OUT_OF_MEMORY,
                           "generate: cannot allocate the KV cache (%.1f MiB for batch %zu x %zu "
                           "positions) and %.1f MiB of working buffers (try a smaller --batch or "
                           "max_seq)",
                           (double)g->info.kv_cache_bytes / 1048576.0, B, S,
                           (double)g->info.activation_bytes / 1048576.0);
    carve_buffers(g, g->act);
    return ZERO_OK;
}

zero_status_t zero_generator_init(zero_generator_t **out, const char *path,
                                  const zero_generator_params_t *params) {
    if (!out || !path)
        return zero__error(ZERO_ERR_INVALID_ARG, "zero_generator_init: NULL argument");
    *out = NULL;
    zero_generator_params_t p = params ? *params : zero_generator_params_default();
    if (p.batch < 1 || p.threads < 1 || p.max_seq < 0 || p.heads < 0)
        return zero__error(ZERO_ERR_CONFIG,
                           "generate: batch = %d, threads = %d, max_seq = %d, heads = %d (expected "
                           "batch and threads >= 1, max_seq and heads >= 0)",
                           p.batch, p.threads, p.max_seq, p.heads);
    if (p.dtype != ZERO_DTYPE_FP32 && p.dtype != ZERO_DTYPE_BF16)
        return zero__error(ZERO_ERR_CONFIG,
                           "generate: dtype %s is not supported (expected fp32 or bf16)",
                           zero_dtype_name(p.dtype));
    if (p.weight_bits != 0 && p.weight_bits != 8 && p.weight_bits != 4)
        return zero__error(ZERO_ERR_CONFIG,
                           "generate: weight_bits = %d (expected 0 for weights in the dtype, 8 "
                           "for int8 or 4 for int4)",
                           p.weight_bits);
    if (p.weight_bits && (p.group_size < 2 || p.group_size > ZERO__Q_GROUP_MAX ||
                          p.group_size % 2 || p.dtype != ZERO_DTYPE_FP32))
        return zero__error(ZERO_ERR_CONFIG,
                           "generate: int%d weights with group_size %d and dtype %s (expected an "
                           "even group size in [2, %d] and dtype fp32: the activations of "
                           "quantized weights are fp32)",
                           p.weight_bits, p.group_size, zero_dtype_name(p.dtype),
                           ZERO__Q_GROUP_MAX);
    const int ranks = p.comm ? zero_comm_size(p.comm) : 1;
    if (ranks > 1 && p.nvme_path)
        return zero__error(ZERO_ERR_CONFIG,
                           "generate: nvme_path %s with the weights sharded over %d ranks "
                           "(expected one of the two: the blocks in a file, or sharded)",
                           p.nvme_path, ranks);
    if (p.nvme_path && p.buffer_count < 2)
        return zero__error(ZERO_ERR_CONFIG,
                           "generate: buffer_count = %d with nvme_path %s (expected at least 2: "
                           "one layer computing while the next is read)",
                           p.buffer_count, p.nvme_path);
    struct stat sb;
    if (stat(path, &sb) != 0)
        return zero__error(ZERO_ERR_IO,
                           "model %s does not exist (expected a checkpoint directory or a "
                           ".safetensors file)",
                           path);
    zero_generator_t *g = calloc(1, sizeof *g);
    if (!g) return zero__error(ZERO_ERR_OUT_OF_MEMORY, "generate: out of memory");
    g->threads = p.threads;
    g->dt = p.dtype;
    g->es = zero_dtype_size(p.dtype);
    g->info.dtype = p.dtype;
    g->wbits = p.weight_bits;
    g->group = g->wbits ? (size_t)p.group_size : 0;
    g->info.weight_bits = p.weight_bits;
    g->info.group_size = g->wbits ? p.group_size : 0;
    g->nvme_path = p.nvme_path;
    g->comm = ranks > 1 ? p.comm : NULL;
    g->info.ranks = ranks;
    g->staged = -1;
    g->info.offload = p.nvme_path ? "nvme" : "none";
    g->info.buffer_count = p.nvme_path ? p.buffer_count : 0;
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    zero_status_t st = S_ISDIR(sb.st_mode) || !strcmp(base, "latest")
                           ? load_checkpoint(g, path, p.heads)
                           : load_safetensors(g, path, p.heads);
    if (!st) st = finish_load(g);
    g->nvme_path = NULL; /* borrowed for init only */
    if (st) goto fail;
    g->info.layers = g->cfg.layers;
    g->info.heads = g->cfg.heads;
    g->info.dim = g->cfg.dim;
    g->info.vocab = g->cfg.vocab;
    g->info.seq = g->cfg.seq;
    g->info.batch = p.batch;
    g->info.max_seq = p.max_seq && p.max_seq < g->cfg.seq ? p.max_seq : g->cfg.seq;
    if ((st = alloc_buffers(g)) != ZERO_OK) goto fail;
    *out = g;
    return ZERO_OK;
fail:
    zero_generator_free(g);
    return st;
}

void zero_generator_free(zero_generator_t *g) {
    if (!g) return;
    zero_mem_free(g->act);
    zero_mem_free(g->kv);
    zero__wstream_free(g->stream);
    zero_mem_free(g->w);
    free(g->rowbuf);
    free(g->tbyte);
    free(g->region_off);
    free(g->unit_names);
    free(g->tensors);
    free(g->units);
    free(g);
}

const zero_generator_info_t *zero_generator_info(const zero_generator_t *g) {
    return g ? &g->info : NULL;
}
int zero_generator_position(const zero_generator_t *g) { return g ? g->pos : 0; }
void zero_generator_reset(zero_generator_t *g) {
    if (g) g->pos = 0;
}

/* ------------------------------------------------------------------------------ forward */

/* The kernels in the generator's dtype: the fp32 ones (kernels.h) or their 16-bit I/O twins
 * (kernels_lp.h), as the training model picks them (gpt.c). */
#define LP (g->dt != ZERO_DTYPE_FP32)

static void k_layernorm(zero_generator_t *g, void *out, const void *inp, const void *w,
                        const void *b, size_t rows) {
    const size_t C = (size_t)g->cfg.dim;
    if (LP)
        zero__layernorm_forward_lp(out, g->mean, g->rstd, inp, w, b, g->dt, rows, C, g->threads);
    else
        zero__layernorm_forward(out, g->mean, g->rstd, inp, w, b, rows, C, g->threads);
}

/* out (rows, OC) of out_dt: the dt of the activations, or fp32 for the logits (a 16-bit GEMM
 * accumulates in fp32; quantized and fp32 runs are fp32 throughout). */
static void k_matmul_to(const zero_generator_t *g, void *out, zero_dtype_t out_dt, const void *inp,
                        const void *w, const void *bias, size_t rows, size_t C, size_t OC) {
    if (g->wbits)
        zero__matmul_forward_q(out, inp, w, g->wbits, g->group, bias, rows, C, OC, g->wrow,
                               g->threads);
    else if (!LP) {
        if (!zero__gemv_fp32(out, inp, w, bias, rows, C, OC, g->threads))
            zero__matmul_forward(out, inp, w, bias, rows, C, OC, g->threads);
    } else if (!zero__gemv_bf16(out, out_dt, inp, w, bias, rows, C, OC, g->threads))
        zero__matmul_forward_lp(out, out_dt, inp, w, bias, g->dt, rows, C, OC, g->threads);
}

static void k_matmul(const zero_generator_t *g, void *out, const void *inp, const void *w,
                     const void *bias, size_t rows, size_t C, size_t OC) {
    k_matmul_to(g, out, g->dt, inp, w, bias, rows, C, OC);
}

static void k_residual(const zero_generator_t *g, void *out, const void *a, const void *b,
                       size_t n) {
    if (LP)
        zero__residual_forward_lp(out, a, b, g->dt, n, g->threads);
    else
        zero__residual_forward(out, a, b, n, g->threads);
}

/* T (<= CHUNK) new tokens per sequence, tokens[b * ld + t], at positions [pos, pos + T):
 * through every block into the cache, then the head on each sequence's last row. */
static zero_status_t forward(zero_generator_t *g, const int32_t *tokens, size_t ld, size_t T) {
    const size_t B = (size_t)g->info.batch, C = (size_t)g->cfg.dim, V = (size_t)g->cfg.vocab;
    const size_t NH = (size_t)g->cfg.heads, hs = C / NH, S = (size_t)g->info.max_seq;
    const size_t BT = B * T, pos = (size_t)g->pos, hstride = S * hs, es = g->es;
    const int th = g->threads;
    for (size_t b = 0; b < B; b++) memcpy(g->tok + b * T, tokens + b * ld, T * sizeof *g->tok);
    /* positions [pos, pos + T): wpe from row pos */
    if (g->wbits) /* wte's rows dequantized one by one, then wpe added (the kernel's sum) */
        for (size_t r = 0; r < BT; r++) {
            float *xr = (float *)g->x + r * C;
            const float *pe = (const float *)g->wpe + (pos + r % T) * C;
            const unsigned char *row = (const unsigned char *)g->wte +
                                       (size_t)g->tok[r] * zero__q_row_bytes(g->wbits, C, g->group);
            if (g->wbits == 8)
                zero__q8_dequantize_g(xr, ZERO_DTYPE_FP32, row, C, g->group, 1);
            else
                zero__q4_dequantize_g(xr, ZERO_DTYPE_FP32, row, C, g->group, 1);
            for (size_t i = 0; i < C; i++) xr[i] += pe[i];
        }
    else if (LP)
        zero__embedding_forward_lp(g->x, g->tok, g->wte, at(g, g->wpe, pos * C), g->dt, B, T, C,
                                   th);
    else
        zero__embedding_forward(g->x, g->tok, g->wte, at(g, g->wpe, pos * C), B, T, C, th);
    for (int l = 0; l < g->cfg.layers; l++) {
        const void *region = (const char *)g->w + g->region_off[l + 1], *w[BLOCK_TENSORS];
        if (g->stream) {
            const zero_status_t st = zero__wstream_acquire(g->stream, l, &region);
            if (st) return st;
        }
        for (int t = 0; t < BLOCK_TENSORS; t++) w[t] = tensor_at(g, region, l + 1, t);
        void *kc = at(g, g->kv, (size_t)l * 2 * B * NH * hstride);
        void *vc = at(g, kc, B * NH * hstride);
        k_layernorm(g, g->ln, g->x, w[LN1W], w[LN1B], BT);
        k_matmul(g, g->qkv, g->ln, w[QKVW], w[QKVB], BT, C, 3 * C);
        for (size_t b = 0; b < B; b++)
            for (size_t t = 0; t < T; t++) {
                const char *row = at(g, g->qkv, (b * T + t) * 3 * C);
                for (size_t h = 0; h < NH; h++) {
                    const size_t to = (b * NH + h) * hstride + (pos + t) * hs;
                    memcpy(at(g, kc, to), row + (C + h * hs) * es, hs * es);
                    memcpy(at(g, vc, to), row + (2 * C + h * hs) * es, hs * es);
                }
            }
        if (LP)
            zero__attention_decode_lp(g->atty, g->scratch, g->qkv, 3 * C, kc, vc, hstride, g->dt, B,
                                      T, pos, C, NH, S, th);
        else
            zero__attention_decode(g->atty, g->scratch, g->qkv, 3 * C, kc, vc, hstride, B, T, pos,
                                   C, NH, th);
        k_matmul(g, g->ln, g->atty, w[APW], w[APB], BT, C, C); /* ln: the projection */
        k_residual(g, g->res2, g->x, g->ln, BT * C);
        k_layernorm(g, g->ln, g->res2, w[LN2W], w[LN2B], BT);
        k_matmul(g, g->fch, g->ln, w[FCW], w[FCB], BT, C, 4 * C);
        if (LP)
            zero__gelu_forward_lp(g->fch, g->fch, g->dt, BT * 4 * C, th);
        else
            zero__gelu_forward(g->fch, g->fch, BT * 4 * C, th);
        k_matmul(g, g->ln, g->fch, w[FPW], w[FPB], BT, 4 * C, C);
        k_residual(g, g->x, g->res2, g->ln, BT * C);
        if (g->stream) { /* its buffer now reads the layer buffer_count uses ahead */
            const zero_status_t st = zero__wstream_release(g->stream);
            if (st) return st;
        }
    }
    for (size_t b = 0; b < B; b++)
        memcpy(at(g, g->last, b * C), at(g, g->x, (b * T + T - 1) * C), C * es);
    k_layernorm(g, g->ln, g->last, g->lnfw, g->lnfb, B);
    /* the tied head; logits fp32 in every dtype */
    k_matmul_to(g, g->logits, ZERO_DTYPE_FP32, g->ln, g->wte, NULL, B, C, V);
    g->pos += (int)T;
    if (g->comm)
        zero__wstream_stats(g->stream, &g->info.gather_bytes, &g->info.gather_wait_s);
    else if (g->stream)
        zero__wstream_stats(g->stream, &g->info.io_bytes_read, &g->info.io_wait_s);
    return ZERO_OK;
}
#undef LP

zero_status_t zero_generator_prefill(zero_generator_t *g, const int32_t *tokens, int T,
                                     const float **logits) {
    if (!g || !tokens)
        return zero__error(ZERO_ERR_INVALID_ARG, "zero_generator_prefill: NULL argument");
    if (T < 1)
        return zero__error(ZERO_ERR_INVALID_ARG,
                           "generate: the prompt is empty (%d tokens; expected at least 1)", T);
    if (T > g->info.max_seq - g->pos)
        return zero__error(ZERO_ERR_INVALID_ARG,
                           "generate: %d tokens after the %d held do not fit the %d positions of "
                           "the KV cache (the model's context is %d, model.seq)",
                           T, g->pos, g->info.max_seq, g->cfg.seq);
    for (int b = 0; b < g->info.batch; b++)
        for (int t = 0; t < T; t++) {
            const int32_t v = tokens[(size_t)b * (size_t)T + (size_t)t];
            if (v < 0 || v >= g->cfg.vocab)
                return zero__error(ZERO_ERR_INVALID_ARG,
                                   "generate: token %d of sequence %d at position %d is outside "
                                   "the model's vocabulary (expected 0..%d)",
                                   (int)v, b, g->pos + t, g->cfg.vocab - 1);
        }
    for (int t0 = 0; t0 < T; t0 += CHUNK) {
        const zero_status_t st =
            forward(g, tokens + t0, (size_t)T, (size_t)ZERO_MIN(CHUNK, T - t0));
        if (st) return st;
    }
    if (logits) *logits = g->logits;
    return ZERO_OK;
}

zero_status_t zero_generator_step(zero_generator_t *g, const int32_t *tokens,
                                  const float **logits) {
    return zero_generator_prefill(g, tokens, 1, logits);
}
