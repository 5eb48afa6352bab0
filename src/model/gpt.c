/* gpt.c — GPT-2 forward and backward on the kernels, parameters through the engine contract.
 *
 * Not here: parameter memory (the engine's), data, sampling, the training loop.
 * Invariants: activations are allocated once in zero__gpt_init for (batch, seq); a forward with
 * smaller B or T uses a prefix of each buffer (all are laid out (B, T, ...) contiguous). The
 * residual stream keeps every block's input (resid[l], l = 0..L) in both modes, so activation
 * checkpointing only has to drop the per-block activations and recompute them in backward.
 * Gradients of activations live in four scratch buffers reused by every block (see
 * block_backward), so their size does not grow with depth. The same scratch also holds what a
 * block uses once and the backward can rebuild bitwise from what is stored (the kernels are
 * deterministic): the LayerNorm outputs (from the input and the same kernel), the GELU output
 * (from the pre-activation), the two projections that only feed a residual add, and the attention
 * output and probabilities (from qkv; the attention kernel does not depend on the thread count).
 * Per layer only the ln means/rstds, qkv, res2 and fch stay.
 */
#include "model/gpt.h"

#include "core/core_internal.h"
#include "kernels/kernels.h"

#include <math.h>
#include <string.h>

/* Tensor indices inside a block unit, in declaration order. */
enum {
    B_LN1W,
    B_LN1B,
    B_QKVW,
    B_QKVB,
    B_ATTPROJW,
    B_ATTPROJB,
    B_LN2W,
    B_LN2B,
    B_FCW,
    B_FCB,
    B_FCPROJW,
    B_FCPROJB,
    B_COUNT
};
enum { E_WTE, E_WPE, E_COUNT };
enum { F_LNFW, F_LNFB, F_COUNT };

/* Activations of one block. */
typedef struct block_acts {
    float *ln1_mean, *ln1_rstd; /* (B,T), (B,T) */
    float *qkv;                 /* (B,T,3C) */
    float *res2;                /* (B,T,C): LayerNorm 2's input, its backward reads it */
    float *ln2_mean, *ln2_rstd; /* (B,T), (B,T) */
    float *fch;                 /* (B,T,4C) GELU input; the output is rebuilt from it */
} block_acts_t;

struct zero_gpt {
    zero_gpt_config_t cfg;
    zero_engine_t *eng; /* borrowed */
    int batch, checkpointing, threads;
    int unit_emb, unit_block0, unit_final;

    float *act_mem; /* owned, one block of ZERO_MEM_ACTIVATIONS */
    size_t act_bytes;
    block_acts_t *acts; /* L entries, or 1 with checkpointing */
    float *resid;       /* (L+1, B, T, C): resid[0] = embeddings, resid[l+1] = block l output */
    float *lnf, *lnf_mean, *lnf_rstd; /* (B,T,C), (B,T), (B,T) */
    float *logits;                    /* (B,T,V) */
    float *dlogits;                   /* (B,T,V) gradient of the mean loss, from the forward */
    float *losses;                    /* (B,T) */
    /* activation-gradient scratch */
    float *dres;        /* (B,T,C) gradient of the residual stream */
    float *d4a, *d4b;   /* (B,T,4C) */
    float *dc;          /* (B,T,C) */
    float *ln;          /* (B,T,C) the current LayerNorm output (ln1 or ln2), rebuilt on use */
    float *att;         /* (B,NH,T,T) the current block's attention probabilities */
    float *att_scratch; /* zero__attention_scratch_count */
    int32_t *tokens;    /* (B,T) copy of the last forward's inputs */
    int32_t *targets;   /* (B,T) copy of the last forward's targets */

    int last_B, last_T, have_targets;
    size_t valid_targets;
};

zero_status_t zero__gpt_config_check(const zero_gpt_config_t *c) {
    if (!c) return zero__error(ZERO_ERR_INVALID_ARG, "model config is NULL");
    if (c->layers < 1 || c->layers > 1024)
        return zero__error(ZERO_ERR_CONFIG, "model.layers = %d is invalid (expected 1..1024)",
                           c->layers);
    if (c->dim < 1 || c->dim > 65536)
        return zero__error(ZERO_ERR_CONFIG, "model.dim = %d is invalid (expected 1..65536)",
                           c->dim);
    if (c->heads < 1 || c->heads > c->dim)
        return zero__error(ZERO_ERR_CONFIG, "model.heads = %d is invalid (expected 1..dim = %d)",
                           c->heads, c->dim);
    if (c->dim % c->heads != 0)
        return zero__error(ZERO_ERR_CONFIG,
                           "model.heads = %d does not divide model.dim = %d (expected dim to be a "
                           "multiple of heads)",
                           c->heads, c->dim);
    if (c->vocab < 2 || c->vocab > 1 << 24)
        return zero__error(ZERO_ERR_CONFIG, "model.vocab = %d is invalid (expected 2..16777216)",
                           c->vocab);
    if (c->seq < 1 || c->seq > 1 << 20)
        return zero__error(ZERO_ERR_CONFIG, "model.seq = %d is invalid (expected 1..1048576)",
                           c->seq);
    return ZERO_OK;
}

size_t zero__gpt_param_count(const zero_gpt_config_t *c) {
    size_t C = (size_t)c->dim, L = (size_t)c->layers;
    size_t emb = (size_t)c->vocab * C + (size_t)c->seq * C;
    size_t block =
        2 * C + 3 * C * C + 3 * C + C * C + C + 2 * C + 4 * C * C + 4 * C + 4 * C * C + C;
    return emb + L * block + 2 * C;
}

double zero__gpt_flops_per_token(const zero_gpt_config_t *c) {
    return 6.0 * (double)zero__gpt_param_count(c) +
           12.0 * (double)c->layers * (double)c->seq * (double)c->dim;
}

static zero_status_t declare_units(zero_gpt_t *g) {
    const size_t C = (size_t)g->cfg.dim, V = (size_t)g->cfg.vocab, T = (size_t)g->cfg.seq;
    const float std = 0.02f;
    /* GPT-2 scales the residual projections by 1/sqrt(2L): two of them per block add to the
     * stream, and this keeps its variance independent of depth. */
    const float proj_std = std / sqrtf(2.0f * (float)g->cfg.layers);
    zero_tensor_desc_t emb[E_COUNT] = {
        {"wte", 2, {V, C}, ZERO_TENSOR_TIED, ZERO_INIT_NORMAL, std},
        {"wpe", 2, {T, C}, 0, ZERO_INIT_NORMAL, std},
    };
    zero_status_t st = zero_engine_add_unit(g->eng, "embeddings", emb, E_COUNT, &g->unit_emb);
    if (st) return st;
    const unsigned nd = ZERO_TENSOR_NO_DECAY;
    zero_tensor_desc_t blk[B_COUNT] = {
        {"ln1.weight", 1, {C}, nd, ZERO_INIT_ONES, 0},
        {"ln1.bias", 1, {C}, nd, ZERO_INIT_ZEROS, 0},
        {"attn.qkv.weight", 2, {3 * C, C}, 0, ZERO_INIT_NORMAL, std},
        {"attn.qkv.bias", 1, {3 * C}, nd, ZERO_INIT_ZEROS, 0},
        {"attn.proj.weight", 2, {C, C}, 0, ZERO_INIT_NORMAL, proj_std},
        {"attn.proj.bias", 1, {C}, nd, ZERO_INIT_ZEROS, 0},
        {"ln2.weight", 1, {C}, nd, ZERO_INIT_ONES, 0},
        {"ln2.bias", 1, {C}, nd, ZERO_INIT_ZEROS, 0},
        {"mlp.fc.weight", 2, {4 * C, C}, 0, ZERO_INIT_NORMAL, std},
        {"mlp.fc.bias", 1, {4 * C}, nd, ZERO_INIT_ZEROS, 0},
        {"mlp.proj.weight", 2, {C, 4 * C}, 0, ZERO_INIT_NORMAL, proj_std},
        {"mlp.proj.bias", 1, {C}, nd, ZERO_INIT_ZEROS, 0},
    };
    for (int l = 0; l < g->cfg.layers; l++) {
        char name[32];
        snprintf(name, sizeof name, "block.%d", l);
        int u;
        st = zero_engine_add_unit(g->eng, name, blk, B_COUNT, &u);
        if (st) return st;
        if (l == 0) g->unit_block0 = u;
        ZERO_ASSERT(u == g->unit_block0 + l);
    }
    zero_tensor_desc_t fin[F_COUNT] = {
        {"lnf.weight", 1, {C}, nd, ZERO_INIT_ONES, 0},
        {"lnf.bias", 1, {C}, nd, ZERO_INIT_ZEROS, 0},
    };
    return zero_engine_add_unit(g->eng, "final", fin, F_COUNT, &g->unit_final);
}

/* Carve activation views out of one block: the first pass (base == NULL) only counts. */
static size_t carve(float *base, size_t *off, size_t count, float **out) {
    size_t aligned = (count + 15) / 16 * 16; /* 64-byte aligned views */
    if (base) *out = base + *off;
    *off += aligned;
    return aligned;
}

static void layout(zero_gpt_t *g, float *base, size_t *total) {
    const size_t B = (size_t)g->batch, T = (size_t)g->cfg.seq, C = (size_t)g->cfg.dim;
    const size_t L = (size_t)g->cfg.layers, NH = (size_t)g->cfg.heads, V = (size_t)g->cfg.vocab;
    const size_t BT = B * T;
    size_t off = 0;
    int nacts = g->checkpointing ? 1 : g->cfg.layers;
    for (int l = 0; l < nacts; l++) {
        block_acts_t a, *p = base ? &g->acts[l] : &a;
        carve(base, &off, BT, &p->ln1_mean);
        carve(base, &off, BT, &p->ln1_rstd);
        carve(base, &off, BT * 3 * C, &p->qkv);
        carve(base, &off, BT * C, &p->res2);
        carve(base, &off, BT, &p->ln2_mean);
        carve(base, &off, BT, &p->ln2_rstd);
        carve(base, &off, BT * 4 * C, &p->fch);
    }
    carve(base, &off, (L + 1) * BT * C, &g->resid);
    carve(base, &off, BT * C, &g->lnf);
    carve(base, &off, BT, &g->lnf_mean);
    carve(base, &off, BT, &g->lnf_rstd);
    carve(base, &off, BT * V, &g->logits);
    carve(base, &off, BT * V, &g->dlogits);
    carve(base, &off, BT, &g->losses);
    carve(base, &off, BT * C, &g->dres);
    carve(base, &off, BT * 4 * C, &g->d4a);
    carve(base, &off, BT * 4 * C, &g->d4b);
    carve(base, &off, BT * C, &g->dc);
    carve(base, &off, BT * C, &g->ln);
    carve(base, &off, B * NH * T * T, &g->att);
    carve(base, &off, zero__attention_scratch_count(T, g->threads), &g->att_scratch);
    float *tok = NULL, *tgt = NULL;
    carve(base, &off, BT, &tok); /* int32 fits a float slot */
    carve(base, &off, BT, &tgt);
    if (base) {
        g->tokens = (int32_t *)(void *)tok;
        g->targets = (int32_t *)(void *)tgt;
    }
    *total = off;
}

zero_status_t zero__gpt_init(zero_gpt_t **out, const zero_gpt_config_t *cfg, zero_engine_t *eng,
                             int batch, int checkpointing, int threads) {
    if (!out || !eng) return zero__error(ZERO_ERR_INVALID_ARG, "zero__gpt_init: NULL argument");
    *out = NULL;
    zero_status_t st = zero__gpt_config_check(cfg);
    if (st) return st;
    if (batch < 1)
        return zero__error(ZERO_ERR_CONFIG, "batch size %d is invalid (expected >= 1)", batch);
    zero_gpt_t *g = calloc(1, sizeof *g);
    if (!g) return zero__error(ZERO_ERR_OUT_OF_MEMORY, "model: out of memory");
    g->cfg = *cfg;
    g->eng = eng;
    g->batch = batch;
    g->checkpointing = checkpointing ? 1 : 0;
    g->threads = threads < 1 ? 1 : threads;
    st = declare_units(g);
    if (st) goto fail;
    g->acts = calloc(g->checkpointing ? 1 : (size_t)cfg->layers, sizeof *g->acts);
    if (!g->acts) {
        st = zero__error(ZERO_ERR_OUT_OF_MEMORY, "model: out of memory");
        goto fail;
    }
    size_t total = 0;
    layout(g, NULL, &total);
    g->act_bytes = total * sizeof(float);
    g->act_mem = zero_mem_alloc(zero_engine_mem(eng), ZERO_MEM_ACTIVATIONS, g->act_bytes, 64);
    if (!g->act_mem) {
        st = zero__error(ZERO_ERR_OUT_OF_MEMORY,
                         "model: cannot allocate %.1f MiB of activations for batch %d x seq %d "
                         "(try a smaller batch or activation checkpointing)",
                         (double)g->act_bytes / 1048576.0, batch, cfg->seq);
        goto fail;
    }
    layout(g, g->act_mem, &total);
    /* Touch every page now: otherwise the first training step pays ~0.1 ms per MiB of page
     * faults inside the timed loop (seen in perf as clear_page under the kernels). */
    memset(g->act_mem, 0, g->act_bytes);
    zero__log(ZERO_LOG_DEBUG, -1, 0, "model: %zu parameters, %.1f MiB activations (%s)",
              zero__gpt_param_count(cfg), (double)g->act_bytes / 1048576.0,
              g->checkpointing ? "checkpointing" : "all stored");
    *out = g;
    return ZERO_OK;
fail:
    /* Units already declared stay in the engine: the caller frees the engine on failure. */
    free(g->acts);
    free(g);
    return st;
}

void zero__gpt_free(zero_gpt_t *g) {
    if (!g) return;
    zero_mem_free(g->act_mem);
    free(g->acts);
    free(g);
}

const float *zero__gpt_logits(const zero_gpt_t *g) { return g->logits; }
size_t zero__gpt_activation_bytes(const zero_gpt_t *g) { return g->act_bytes; }
const zero_gpt_config_t *zero__gpt_config(const zero_gpt_t *g) { return &g->cfg; }

static const float *tensor(const zero_gpt_t *g, const float *base, int unit, int t) {
    return base + zero_engine_tensor_offset(g->eng, unit, t);
}
static float *gtensor(const zero_gpt_t *g, float *base, int unit, int t) {
    return base + zero_engine_tensor_offset(g->eng, unit, t);
}

/* One block forward: x (B,T,C) -> y (B,T,C), activations into a. The single-use values go to
 * the shared scratch (g->ln, g->d4b, g->dc): between blocks only g->dres is live, so the forward
 * (and its recompute under checkpointing, which runs before the block's backward) may use them. */
static void block_forward(zero_gpt_t *g, const float *w, int unit, block_acts_t *a, const float *x,
                          float *y, size_t B, size_t T) {
    const size_t C = (size_t)g->cfg.dim, NH = (size_t)g->cfg.heads, BT = B * T;
    const int th = g->threads;
    float *ln = g->ln, *atty = g->d4b, *gelu = g->d4b, *proj = g->dc;
#define W(i) tensor(g, w, unit, i)
    zero__layernorm_forward(ln, a->ln1_mean, a->ln1_rstd, x, W(B_LN1W), W(B_LN1B), BT, C, th);
    zero__matmul_forward(a->qkv, ln, W(B_QKVW), W(B_QKVB), BT, C, 3 * C, th);
    zero__attention_forward(atty, g->att, a->qkv, B, T, C, NH, th);
    zero__matmul_forward(proj, atty, W(B_ATTPROJW), W(B_ATTPROJB), BT, C, C, th);
    zero__residual_forward(a->res2, x, proj, BT * C, th);
    zero__layernorm_forward(ln, a->ln2_mean, a->ln2_rstd, a->res2, W(B_LN2W), W(B_LN2B), BT, C, th);
    zero__matmul_forward(a->fch, ln, W(B_FCW), W(B_FCB), BT, C, 4 * C, th);
    zero__gelu_forward(gelu, a->fch, BT * 4 * C, th);
    zero__matmul_forward(proj, gelu, W(B_FCPROJW), W(B_FCPROJB), BT, 4 * C, C, th);
    zero__residual_forward(y, a->res2, proj, BT * C, th);
#undef W
}

/* Linear backward that OVERWRITES dinp (BT, C) and accumulates dweight/dbias: the activation
 * gradients are scratch buffers reused by every block, so writing them with beta = 0 saves
 * zeroing them first (a memset pass over up to (BT, 4C) per linear). */
static void linear_backward_set(float *dinp, float *dweight, float *dbias, const float *dout,
                                const float *inp, const float *weight, size_t BT, size_t C,
                                size_t OC, int th) {
    /* dinp(BT, C) = dout(BT, OC) · weight(OC, C): NN */
    zero__sgemm(0, 0, BT, C, OC, 1.0f, dout, OC, weight, C, 0.0f, dinp, C, th);
    zero__matmul_backward(NULL, dweight, dbias, dout, inp, weight, BT, C, OC, th);
}

/* One block backward. On entry g->dres holds dL/dy; on exit it holds dL/dx. The residual
 * connections let dres serve as the gradient of both branches: y = res2 + fcproj gives
 * d(fcproj) = dy and d(res2) = dy + (the MLP branch's contribution), accumulated in place; the
 * same holds for res2 = x + attproj. */
static void block_backward(zero_gpt_t *g, const float *w, float *gw, int unit,
                           const block_acts_t *a, const float *x, size_t B, size_t T) {
    const size_t C = (size_t)g->cfg.dim, NH = (size_t)g->cfg.heads, BT = B * T;
    const int th = g->threads;
#define W(i) tensor(g, w, unit, i)
#define G(i) gtensor(g, gw, unit, i)
    float *dres = g->dres;
    /* Rebuild the GELU output into d4b (bitwise what the forward fed fc-proj), use it for the
     * weight gradient, then reuse d4b for d(fch). The recompute is a streaming pass, cheaper
     * than keeping (B,T,4C) per layer. */
    zero__gelu_forward(g->d4b, a->fch, BT * 4 * C, th);
    linear_backward_set(g->d4a, G(B_FCPROJW), G(B_FCPROJB), dres, g->d4b, W(B_FCPROJW), BT, 4 * C,
                        C, th); /* d4a = d(fch_gelu) */
    memset(g->d4b, 0, BT * 4 * C * sizeof(float));
    zero__gelu_backward(g->d4b, a->fch, g->d4a, BT * 4 * C, th); /* d4b = d(fch) */
    /* ln2 again from res2: the kernel rewrites mean/rstd with the values they hold. */
    zero__layernorm_forward(g->ln, a->ln2_mean, a->ln2_rstd, a->res2, W(B_LN2W), W(B_LN2B), BT, C,
                            th);
    linear_backward_set(g->dc, G(B_FCW), G(B_FCB), g->d4b, g->ln, W(B_FCW), BT, C, 4 * C,
                        th); /* dc = d(ln2) */
    zero__layernorm_backward(dres, G(B_LN2W), G(B_LN2B), g->dc, a->res2, W(B_LN2W), a->ln2_mean,
                             a->ln2_rstd, BT, C, th); /* dres = d(res2) */
    /* Rebuild atty (into d4b, free again) and att from qkv: about 3% of the block's forward
     * FLOPs for (B,T,C) + (B,NH,T,T) per layer. */
    zero__attention_forward(g->d4b, g->att, a->qkv, B, T, C, NH, th);
    linear_backward_set(g->dc, G(B_ATTPROJW), G(B_ATTPROJB), dres, g->d4b, W(B_ATTPROJW), BT, C, C,
                        th); /* dc = d(atty) */
    memset(g->d4a, 0, BT * 3 * C * sizeof(float));
    zero__attention_backward(g->d4a, g->att_scratch, g->dc, a->qkv, g->att, B, T, C, NH,
                             th); /* d4a = d(qkv) */
    zero__layernorm_forward(g->ln, a->ln1_mean, a->ln1_rstd, x, W(B_LN1W), W(B_LN1B), BT, C, th);
    linear_backward_set(g->dc, G(B_QKVW), G(B_QKVB), g->d4a, g->ln, W(B_QKVW), BT, C, 3 * C,
                        th); /* dc = d(ln1) */
    zero__layernorm_backward(dres, G(B_LN1W), G(B_LN1B), g->dc, x, W(B_LN1W), a->ln1_mean,
                             a->ln1_rstd, BT, C, th); /* dres = dx */
#undef W
#undef G
}

#define FETCH(var, u)                                                                              \
    do {                                                                                           \
        (var) = zero_unit_fetch(g->eng, (u));                                                      \
        if (!(var)) return ZERO_ERR_INVALID_ARG;                                                   \
    } while (0)

zero_status_t zero__gpt_forward(zero_gpt_t *g, const int32_t *tokens, const int32_t *targets,
                                int Bi, int Ti, float *loss) {
    if (!g || !tokens) return zero__error(ZERO_ERR_INVALID_ARG, "gpt forward: NULL argument");
    if (Ti < 1 || Ti > g->cfg.seq)
        return zero__error(ZERO_ERR_INVALID_ARG,
                           "sequence of %d tokens does not fit the model's context of %d "
                           "(model.seq; expected 1..%d tokens)",
                           Ti, g->cfg.seq, g->cfg.seq);
    if (Bi < 1 || Bi > g->batch)
        return zero__error(ZERO_ERR_INVALID_ARG,
                           "batch of %d sequences does not fit the %d the model was sized for", Bi,
                           g->batch);
    const size_t B = (size_t)Bi, T = (size_t)Ti, C = (size_t)g->cfg.dim, BT = B * T;
    const size_t V = (size_t)g->cfg.vocab;
    const int th = g->threads;
    size_t valid = 0;
    for (size_t i = 0; i < BT; i++) {
        if (tokens[i] < 0 || tokens[i] >= g->cfg.vocab)
            return zero__error(ZERO_ERR_INVALID_ARG,
                               "token %d at position %zu is outside the vocabulary (expected "
                               "0..%d)",
                               (int)tokens[i], i, g->cfg.vocab - 1);
        if (targets) {
            if (targets[i] >= g->cfg.vocab)
                return zero__error(ZERO_ERR_INVALID_ARG,
                                   "target %d at position %zu is outside the vocabulary "
                                   "(expected 0..%d, or < 0 to ignore)",
                                   (int)targets[i], i, g->cfg.vocab - 1);
            valid += targets[i] >= 0;
        }
    }
    memcpy(g->tokens, tokens, BT * sizeof *tokens);
    if (targets) memcpy(g->targets, targets, BT * sizeof *targets);
    g->last_B = Bi;
    g->last_T = Ti;
    g->have_targets = targets != NULL;
    g->valid_targets = valid;

    const float *we;
    FETCH(we, g->unit_emb);
    zero__embedding_forward(g->resid, g->tokens, tensor(g, we, g->unit_emb, E_WTE),
                            tensor(g, we, g->unit_emb, E_WPE), B, T, C, th);
    zero_unit_release(g->eng, g->unit_emb);
    for (int l = 0; l < g->cfg.layers; l++) {
        int u = g->unit_block0 + l;
        const float *w;
        FETCH(w, u);
        block_forward(g, w, u, &g->acts[g->checkpointing ? 0 : l], g->resid + (size_t)l * BT * C,
                      g->resid + (size_t)(l + 1) * BT * C, B, T);
        zero_unit_release(g->eng, u);
    }
    const float *wf;
    FETCH(wf, g->unit_final);
    zero__layernorm_forward(
        g->lnf, g->lnf_mean, g->lnf_rstd, g->resid + (size_t)g->cfg.layers * BT * C,
        tensor(g, wf, g->unit_final, F_LNFW), tensor(g, wf, g->unit_final, F_LNFB), BT, C, th);
    zero_unit_release(g->eng, g->unit_final);
    FETCH(we, g->unit_emb); /* the head is the tied token embedding */
    zero__matmul_forward(g->logits, g->lnf, tensor(g, we, g->unit_emb, E_WTE), NULL, BT, C, V, th);
    zero_unit_release(g->eng, g->unit_emb);
    if (targets) {
        /* The loss is the mean over the counted positions, so its gradient is known now: one
         * pass over the logits gives both, into a separate buffer (the logits stay readable,
         * and out of place is faster than in place; docs/kernels-matmul.md section 3). */
        float dloss = valid ? 1.0f / (float)valid : 0.0f;
        zero__softmax_ce_forward_backward(g->losses, g->dlogits, g->logits, g->targets, dloss, BT,
                                          V, V, th);
        double sum = 0.0;
        for (size_t i = 0; i < BT; i++) sum += g->losses[i];
        if (loss) *loss = valid ? (float)(sum / (double)valid) : 0.0f;
    }
    return ZERO_OK;
}

zero_status_t zero__gpt_backward(zero_gpt_t *g) {
    if (!g || !g->have_targets)
        return zero__error(ZERO_ERR_INVALID_ARG,
                           "gpt backward: the last forward had no targets (expected a training "
                           "forward first)");
    const size_t B = (size_t)g->last_B, T = (size_t)g->last_T, C = (size_t)g->cfg.dim;
    const size_t BT = B * T, V = (size_t)g->cfg.vocab;
    const int L = g->cfg.layers, th = g->threads;
    g->have_targets = 0; /* one backward per forward: a second would add the gradient twice */

    const float *we;
    FETCH(we, g->unit_emb);
    float *gwe = zero_unit_grads(g->eng, g->unit_emb);
    linear_backward_set(g->dc, gtensor(g, gwe, g->unit_emb, E_WTE), NULL, g->dlogits, g->lnf,
                        tensor(g, we, g->unit_emb, E_WTE), BT, C, V, th); /* dc = d(lnf) */

    const float *wf;
    FETCH(wf, g->unit_final);
    float *gwf = zero_unit_grads(g->eng, g->unit_final);
    memset(g->dres, 0, BT * C * sizeof(float));
    zero__layernorm_backward(g->dres, gtensor(g, gwf, g->unit_final, F_LNFW),
                             gtensor(g, gwf, g->unit_final, F_LNFB), g->dc,
                             g->resid + (size_t)L * BT * C, tensor(g, wf, g->unit_final, F_LNFW),
                             g->lnf_mean, g->lnf_rstd, BT, C, th);
    zero_status_t st = zero_unit_grads_done(g->eng, g->unit_final);
    zero_unit_release(g->eng, g->unit_final);
    if (st) return st;

    for (int l = L - 1; l >= 0; l--) {
        int u = g->unit_block0 + l;
        const float *w;
        FETCH(w, u);
        float *gw = zero_unit_grads(g->eng, u);
        const float *x = g->resid + (size_t)l * BT * C;
        block_acts_t *a = &g->acts[g->checkpointing ? 0 : l];
        /* Recompute: y is rewritten with the values it already holds (kernels are
         * deterministic), and nothing reads it any more. */
        if (g->checkpointing)
            block_forward(g, w, u, a, x, g->resid + (size_t)(l + 1) * BT * C, B, T);
        block_backward(g, w, gw, u, a, x, B, T);
        st = zero_unit_grads_done(g->eng, u);
        zero_unit_release(g->eng, u);
        if (st) return st;
    }
    zero__embedding_backward(gtensor(g, gwe, g->unit_emb, E_WTE),
                             gtensor(g, gwe, g->unit_emb, E_WPE), g->dres, g->tokens, B, T, C, th);
    st = zero_unit_grads_done(g->eng, g->unit_emb);
    zero_unit_release(g->eng, g->unit_emb);
    return st;
}
