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
 * Compute dtype (the engine's: fp32, bf16 or fp16): parameters as fetched, every activation, the
 * residual stream, activation gradients and weight gradients are in it; bf16/fp16 run the
 * 16-bit I/O kernels (kernels_lp.h), which compute in fp32 and round each output once. fp32 in
 * every dtype: LayerNorm mean/rstd, the attention probabilities (one shared buffer), the logits
 * (the head GEMM accumulates in fp32; loss and sampling read them) and the losses. The residual
 * stream stays 16-bit: bf16 training of a small GPT on tinyshakespeare ends within 1% of fp32's
 * validation loss with it (tests/model/test_gpt_lp.c). fp16 multiplies the loss gradient by the
 * engine's loss scale. The fp32 path calls the fp32 kernels exactly as before (bitwise).
 */
#include "model/gpt.h"

#include "core/core_internal.h"
#include "kernels/kernels.h"
#include "kernels/kernels_lp.h"
#include "model/carve.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
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
/* An MoE block's unit: the dense block's first eight tensors, then the router and, when
 * moe.shared_experts > 0, the shared experts stacked along dim 0 (M_COUNT tensors; M_SFCW without
 * them). Its routed experts are a unit of their own ("block.<l>.experts", X_*), so expert
 * parallelism can partition that unit over a smaller group than the rest of the model. */
enum { M_ROUTER = B_FCW, M_SFCW, M_SFCB, M_SPROJW, M_SPROJB, M_COUNT };
enum { X_FCW, X_FCB, X_PROJW, X_PROJB, X_COUNT };
enum { E_WTE, E_WPE, E_COUNT };
enum { F_LNFW, F_LNFB, F_COUNT };
_Static_assert(E_COUNT == ZERO_GPT_EMB_TENSORS && B_COUNT == ZERO_GPT_BLOCK_TENSORS &&
                   F_COUNT == ZERO_GPT_FINAL_TENSORS,
               "gpt.h's tensor counts");

/* Activations of one block. `void *` tensors are in the compute dtype (float for fp32, 16-bit
 * patterns for bf16/fp16); `float *` ones are fp32 in every dtype. */
typedef struct block_acts {
    float *ln1_mean, *ln1_rstd; /* (B,T), (B,T) */
    void *qkv;                  /* (B,T,3C) */
    void *res2;                 /* (B,T,C): LayerNorm 2's input, its backward reads it */
    float *ln2_mean, *ln2_rstd; /* (B,T), (B,T) */
    void *fch; /* (B,T,4C) GELU input, the output is rebuilt from it; NULL in an MoE-only set */
} block_acts_t;

struct zero_gpt {
    zero_gpt_config_t cfg;
    zero_engine_t *eng; /* borrowed */
    int batch, checkpointing, threads;
    int unit_emb, unit_final;
    int *unit_block;      /* (L) owned */
    int *unit_experts;    /* (L) owned: an MoE layer's experts unit, else -1 */
    int *moe_slot;        /* (L) owned: an MoE layer's stored state in g->moe, else -1 */
    int moe_layers;       /* how many layers are MoE */
    zero_comm_t *ep_comm; /* borrowed: the expert-parallel block (NULL at ep_size 1) */
    int eval;             /* eval mode: eval_capacity_factor, no routing statistics */
    zero_dtype_t dt;      /* the engine's compute dtype: parameters, activations, gradients */
    size_t es;            /* its element size */

    void *act_mem; /* owned, one block of ZERO_MEM_ACTIVATIONS */
    size_t act_bytes;
    block_acts_t *acts; /* L entries, or 1 with checkpointing */
    void *resid;        /* (L+1, B, T, C): resid[0] = embeddings, resid[l+1] = block l output */
    void *lnf;          /* (B,T,C) */
    float *lnf_mean, *lnf_rstd; /* (B,T), (B,T) */
    float *logits;       /* (B,T,V) fp32 in every dtype (the head GEMM accumulates in fp32) */
    void *dlogits;       /* 16-bit dtypes: (B,T,V) gradient of the mean loss, from the forward */
    float *lse;          /* fp32: (B,T) the rows' log-sum-exp, from the forward */
    float *head_scratch; /* fp32: zero__lm_head_scratch_count, the head backward's chunk */
    float dloss;         /* fp32: the loss gradient per counted position, set by the forward */
    float *losses;       /* (B,T) */
    /* activation-gradient scratch */
    void *dres;         /* (B,T,C) gradient of the residual stream */
    void *d4a, *d4b;    /* (B,T,4C) */
    void *dc;           /* (B,T,C) */
    void *ln;           /* (B,T,C) the current LayerNorm output (ln1 or ln2), rebuilt on use */
    float *att;         /* (B,NH,T,T) the current block's attention probabilities, fp32 */
    float *att_scratch; /* zero__attention_scratch_count(_lp) */
    int32_t *tokens;    /* (B,T) copy of the last forward's inputs */
    int32_t *targets;   /* (B,T) copy of the last forward's targets */

    int last_B, last_T, have_targets;
    size_t valid_targets;

    zero_fp8_t *fp8;     /* owned (NULL: fp8 off): scales of the FP8 GEMM inputs */
    void *fp8_x, *fp8_w; /* fp8: (B,T,4C) and (4C,C) the quantized X and W of one linear */
    void *fp8_dy;        /* fp8: (B,T,4C) its quantized dY */

    zero_moe_mlp_t *moe; /* owned (NULL: dense model) over moe_mem */
    void *moe_mem;       /* view into act_mem */
    double *moe_stats;   /* owned: moe_layers x ZERO_GPT_MOE_STATS(E), summed since the reset */
    int32_t *moe_counts; /* owned: (E) one forward's counts */
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
    zero_status_t st = zero__moe_config_check(&c->moe, c->dim);
    if (st) return st;
    if (c->moe.experts > 0 && c->moe.every > c->layers)
        return zero__error(ZERO_ERR_CONFIG,
                           "model.moe.every = %d exceeds model.layers = %d: no layer would be MoE "
                           "(expected 1..%d)",
                           c->moe.every, c->layers, c->layers);
    const zero_fp8_config_t *f = &c->fp8;
    if (f->enabled) {
        if ((unsigned)f->recipe >= ZERO_FP8_RECIPE_COUNT)
            return zero__error(ZERO_ERR_CONFIG,
                               "fp8.recipe = %d is invalid (expected delayed or blockwise)",
                               f->recipe);
        if (f->margin < 0)
            return zero__error(ZERO_ERR_CONFIG, "fp8.margin = %d is invalid (expected >= 0)",
                               f->margin);
        if (f->history_len < 1)
            return zero__error(ZERO_ERR_CONFIG,
                               "fp8.amax_history_len = %d is invalid (expected >= 1)",
                               f->history_len);
        if (c->moe.experts > 0)
            return zero__error(ZERO_ERR_CONFIG,
                               "fp8.enabled = true cannot be combined with model.moe.experts = %d "
                               "(the experts' GEMMs have no FP8 path; expected experts 0 or fp8 "
                               "off)",
                               c->moe.experts);
    }
    return ZERO_OK;
}

/* Parameters of the model, or (active) those one token runs through: an MoE layer's router,
 * its top_k routed experts and its shared experts, instead of all E routed experts. */
static size_t param_count(const zero_gpt_config_t *c, int active) {
    const size_t C = (size_t)c->dim;
    const size_t emb = (size_t)c->vocab * C + (size_t)c->seq * C;
    const size_t attn = 2 * C + 3 * C * C + 3 * C + C * C + C + 2 * C; /* ln1, attention, ln2 */
    const size_t H = zero__moe_hidden(&c->moe, c->dim);
    const size_t dense_mlp = 4 * C * C + 4 * C + 4 * C * C + C, expert = H * C + H + C * H + C;
    const size_t E = (size_t)c->moe.experts, S = (size_t)c->moe.shared_experts;
    const size_t routed = active ? (size_t)c->moe.top_k : E;
    size_t n = emb + 2 * C;
    for (int l = 0; l < c->layers; l++)
        n += attn + (zero__moe_is_layer(&c->moe, l) ? E * C + (S + routed) * expert : dense_mlp);
    return n;
}

size_t zero__gpt_param_count(const zero_gpt_config_t *c) { return param_count(c, 0); }
size_t zero__gpt_active_param_count(const zero_gpt_config_t *c) { return param_count(c, 1); }

double zero__gpt_flops_per_token(const zero_gpt_config_t *c) {
    return 6.0 * (double)zero__gpt_active_param_count(c) +
           12.0 * (double)c->layers * (double)c->seq * (double)c->dim;
}

/* The tensors of the three kinds of unit (gpt.h), as the engine takes them. */
void zero__gpt_unit_descs(const zero_gpt_config_t *c, zero_tensor_desc_t emb[E_COUNT],
                          zero_tensor_desc_t blk[B_COUNT], zero_tensor_desc_t fin[F_COUNT]) {
    const size_t C = (size_t)c->dim, V = (size_t)c->vocab, T = (size_t)c->seq;
    const float std = 0.02f;
    /* GPT-2 scales the residual projections by 1/sqrt(2L): two of them per block add to the
     * stream, and this keeps its variance independent of depth. */
    const float proj_std = std / sqrtf(2.0f * (float)c->layers);
    /* Weight decay as in nanoGPT and Hugging Face's GPT-2 recipes: every 2-D weight decays (wte,
     * tied to the output head, and wpe included); biases and layernorm gains (1-D) do not. */
    const unsigned nd = ZERO_TENSOR_NO_DECAY;
    /* the weights whose GEMMs take FP8 inputs, held on the E4M3 grid (fp8.weight_gather) */
    const unsigned w8 = c->fp8.enabled && c->fp8.weight_gather ? ZERO_TENSOR_FP8 : 0;
    const zero_tensor_desc_t e[E_COUNT] = {
        {"wte", 2, {V, C}, ZERO_TENSOR_TIED, ZERO_INIT_NORMAL, std},
        {"wpe", 2, {T, C}, 0, ZERO_INIT_NORMAL, std},
    };
    const zero_tensor_desc_t b[B_COUNT] = {
        {"ln1.weight", 1, {C}, nd, ZERO_INIT_ONES, 0},
        {"ln1.bias", 1, {C}, nd, ZERO_INIT_ZEROS, 0},
        {"attn.qkv.weight", 2, {3 * C, C}, w8, ZERO_INIT_NORMAL, std},
        {"attn.qkv.bias", 1, {3 * C}, nd, ZERO_INIT_ZEROS, 0},
        {"attn.proj.weight", 2, {C, C}, w8, ZERO_INIT_NORMAL, proj_std},
        {"attn.proj.bias", 1, {C}, nd, ZERO_INIT_ZEROS, 0},
        {"ln2.weight", 1, {C}, nd, ZERO_INIT_ONES, 0},
        {"ln2.bias", 1, {C}, nd, ZERO_INIT_ZEROS, 0},
        {"mlp.fc.weight", 2, {4 * C, C}, w8, ZERO_INIT_NORMAL, std},
        {"mlp.fc.bias", 1, {4 * C}, nd, ZERO_INIT_ZEROS, 0},
        {"mlp.proj.weight", 2, {C, 4 * C}, w8, ZERO_INIT_NORMAL, proj_std},
        {"mlp.proj.bias", 1, {C}, nd, ZERO_INIT_ZEROS, 0},
    };
    const zero_tensor_desc_t fn[F_COUNT] = {
        {"lnf.weight", 1, {C}, nd, ZERO_INIT_ONES, 0},
        {"lnf.bias", 1, {C}, nd, ZERO_INIT_ZEROS, 0},
    };
    memcpy(emb, e, sizeof e);
    memcpy(blk, b, sizeof b);
    memcpy(fin, fn, sizeof fn);
}

/* The tensors of an MoE block's unit (*nblk of them: M_COUNT with shared experts, else M_SFCW)
 * and of its experts' unit; the dense block's descriptions first (blk from zero__gpt_unit_descs).
 * Expert weights are initialised like the dense MLP's (the projection with GPT-2's 1/sqrt(2L)); the
 * router like every other weight. */
static void moe_descs(const zero_gpt_config_t *c, zero_tensor_desc_t blk[M_COUNT], int *nblk,
                      zero_tensor_desc_t xp[X_COUNT]) {
    /* expert parallelism: each rank declares its E / ep_size experts, one copy of the logical
     * (E, ...) tensors (zero_engine_add_unit_in) */
    const size_t Ex = (size_t)(c->moe.experts / (c->moe.ep_size > 1 ? c->moe.ep_size : 1));
    zero_tensor_desc_t emb[E_COUNT], dense[B_COUNT], fin[F_COUNT];
    zero__gpt_unit_descs(c, emb, dense, fin);
    const size_t C = (size_t)c->dim, H = zero__moe_hidden(&c->moe, c->dim);
    const size_t E = (size_t)c->moe.experts, S = (size_t)c->moe.shared_experts;
    const float std = dense[B_FCW].init_std, proj_std = dense[B_FCPROJW].init_std;
    const unsigned nd = ZERO_TENSOR_NO_DECAY;
    memcpy(blk, dense, B_FCW * sizeof *blk);
    const zero_tensor_desc_t m[M_COUNT - B_FCW] = {
        {"moe.router.weight", 2, {E, C}, 0, ZERO_INIT_NORMAL, std},
        {"moe.shared.fc.weight", 3, {S, H, C}, 0, ZERO_INIT_NORMAL, std},
        {"moe.shared.fc.bias", 2, {S, H}, nd, ZERO_INIT_ZEROS, 0},
        {"moe.shared.proj.weight", 3, {S, C, H}, 0, ZERO_INIT_NORMAL, proj_std},
        {"moe.shared.proj.bias", 2, {S, C}, nd, ZERO_INIT_ZEROS, 0},
    };
    memcpy(blk + B_FCW, m, sizeof m);
    *nblk = S > 0 ? M_COUNT : M_SFCW;
    const zero_tensor_desc_t x[X_COUNT] = {
        {"moe.experts.fc.weight", 3, {Ex, H, C}, 0, ZERO_INIT_NORMAL, std},
        {"moe.experts.fc.bias", 2, {Ex, H}, nd, ZERO_INIT_ZEROS, 0},
        {"moe.experts.proj.weight", 3, {Ex, C, H}, 0, ZERO_INIT_NORMAL, proj_std},
        {"moe.experts.proj.bias", 2, {Ex, C}, nd, ZERO_INIT_ZEROS, 0},
    };
    memcpy(xp, x, sizeof x);
}

static zero_status_t declare_units(zero_gpt_t *g) {
    zero_tensor_desc_t emb[E_COUNT], blk[B_COUNT], fin[F_COUNT], mblk[M_COUNT], xp[X_COUNT];
    int nm = 0;
    zero__gpt_unit_descs(&g->cfg, emb, blk, fin);
    if (g->moe_layers) moe_descs(&g->cfg, mblk, &nm, xp);
    zero_status_t st = zero_engine_add_unit(g->eng, "embeddings", emb, E_COUNT, &g->unit_emb);
    if (st) return st;
    /* Expert parallelism: the experts' units are stacked over the expert-data-parallel groups
     * (color = this rank's place in its block, so group rank g is block g), with one source slot
     * per rank of the block. */
    const int ep = g->cfg.moe.ep_size > 1 ? g->cfg.moe.ep_size : 1;
    int group = 0;
    if (g->moe_layers && ep > 1)
        st = zero_engine_add_group(g->eng, zero_comm_rank(g->ep_comm), &group);
    if (st) return st;
    for (int l = 0; l < g->cfg.layers; l++) {
        char name[48];
        snprintf(name, sizeof name, "block.%d", l);
        const int moe = g->moe_slot[l] >= 0;
        st = zero_engine_add_unit(g->eng, name, moe ? mblk : blk, moe ? nm : B_COUNT,
                                  &g->unit_block[l]);
        if (st) return st;
        g->unit_experts[l] = -1;
        if (!moe) continue;
        snprintf(name, sizeof name, "block.%d.experts", l);
        st = zero_engine_add_unit_in(g->eng, group, name, xp, X_COUNT, &g->unit_experts[l]);
        if (!st && ep > 1) st = zero_engine_set_unit_slots(g->eng, g->unit_experts[l], ep);
        if (st) return st;
    }
    return zero_engine_add_unit(g->eng, "final", fin, F_COUNT, &g->unit_final);
}

/* ------------------------------------------------------------------------------ export names */

/* Hugging Face GPT-2 names of the tensors declare_units declares (transformers' GPT2Model):
 * its Conv1D layers keep weights as [in, out], ours are [out, in], so those are transposed. */
static const struct {
    const char *ours, *hf;
    int transposed;
} hf_block[] = {
    [B_LN1W] = {"ln1.weight", "ln_1.weight", 0},
    [B_LN1B] = {"ln1.bias", "ln_1.bias", 0},
    [B_QKVW] = {"attn.qkv.weight", "attn.c_attn.weight", 1},
    [B_QKVB] = {"attn.qkv.bias", "attn.c_attn.bias", 0},
    [B_ATTPROJW] = {"attn.proj.weight", "attn.c_proj.weight", 1},
    [B_ATTPROJB] = {"attn.proj.bias", "attn.c_proj.bias", 0},
    [B_LN2W] = {"ln2.weight", "ln_2.weight", 0},
    [B_LN2B] = {"ln2.bias", "ln_2.bias", 0},
    [B_FCW] = {"mlp.fc.weight", "mlp.c_fc.weight", 1},
    [B_FCB] = {"mlp.fc.bias", "mlp.c_fc.bias", 0},
    [B_FCPROJW] = {"mlp.proj.weight", "mlp.c_proj.weight", 1},
    [B_FCPROJB] = {"mlp.proj.bias", "mlp.c_proj.bias", 0},
};
_Static_assert(ZERO_ARRAY_LEN(hf_block) == B_COUNT, "a Hugging Face name for every block tensor");

static int hf_name_bare(const char *unit, const char *tensor, char *out, size_t out_size,
                        int *transposed) {
    *transposed = 0;
    const char *hf = NULL;
    if (!strcmp(unit, "embeddings")) {
        if (!strcmp(tensor, "wte")) hf = "wte.weight";
        if (!strcmp(tensor, "wpe")) hf = "wpe.weight";
    } else if (!strcmp(unit, "final")) {
        if (!strcmp(tensor, "lnf.weight")) hf = "ln_f.weight";
        if (!strcmp(tensor, "lnf.bias")) hf = "ln_f.bias";
    } else if (!strncmp(unit, "block.", 6)) {
        char *end;
        long l = strtol(unit + 6, &end, 10);
        if (end == unit + 6 || l < 0) return 0;
        /* MoE tensors (router, shared and routed experts) have no GPT-2 name: they keep ours
         * under the layer's prefix, untransposed */
        if (!strncmp(tensor, "moe.", 4) && (*end == '\0' || !strcmp(end, ".experts"))) {
            snprintf(out, out_size, "h.%ld.%s", l, tensor);
            return 1;
        }
        if (*end == '\0')
            for (size_t i = 0; i < ZERO_ARRAY_LEN(hf_block); i++)
                if (!strcmp(tensor, hf_block[i].ours)) {
                    snprintf(out, out_size, "h.%ld.%s", l, hf_block[i].hf);
                    *transposed = hf_block[i].transposed;
                    return 1;
                }
    }
    if (hf) snprintf(out, out_size, "%s", hf);
    return hf != NULL;
}

/* user: the prefix of every name ("" or "transformer.") */
static int hf_name(const void *user, const char *unit, const char *tensor, char *out,
                   size_t out_size, int *transposed) {
    const char *prefix = user;
    const size_t n = strlen(prefix);
    if (n >= out_size || !hf_name_bare(unit, tensor, out + n, out_size - n, transposed)) return 0;
    memcpy(out, prefix, n);
    return 1;
}

const zero_ckpt_name_map_t *zero__gpt_names(void) {
    static const zero_ckpt_name_map_t map = {
        "Hugging Face GPT-2 (units embeddings, block.N, final)", hf_name, ""};
    return &map;
}

const zero_ckpt_name_map_t *zero__gpt_names_transformer(void) {
    static const zero_ckpt_name_map_t map = {
        "Hugging Face GPT2LMHeadModel (transformer.wte.weight, ...)", hf_name, "transformer."};
    return &map;
}

static void layout(zero_gpt_t *g, char *base, size_t *total) {
    const size_t B = (size_t)g->batch, T = (size_t)g->cfg.seq, C = (size_t)g->cfg.dim;
    const size_t L = (size_t)g->cfg.layers, NH = (size_t)g->cfg.heads, V = (size_t)g->cfg.vocab;
    const size_t BT = B * T, f = sizeof(float), e = g->es;
    size_t off = 0;
    int nacts = g->checkpointing ? 1 : g->cfg.layers;
    /* the dense MLP's pre-activation only where a dense layer uses it */
    const int any_dense = g->moe_layers < g->cfg.layers;
    for (int l = 0; l < nacts; l++) {
        block_acts_t a, *p = base ? &g->acts[l] : &a;
        zero__carve(base, &off, BT, f, &p->ln1_mean);
        zero__carve(base, &off, BT, f, &p->ln1_rstd);
        zero__carve(base, &off, BT * 3 * C, e, &p->qkv);
        zero__carve(base, &off, BT * C, e, &p->res2);
        zero__carve(base, &off, BT, f, &p->ln2_mean);
        zero__carve(base, &off, BT, f, &p->ln2_rstd);
        const int dense = g->checkpointing ? any_dense : !zero__moe_is_layer(&g->cfg.moe, l);
        if (dense) zero__carve(base, &off, BT * 4 * C, e, &p->fch);
    }
    if (g->moe_layers)
        zero__carve(base, &off,
                    zero__moe_mlp_bytes(&g->cfg.moe, g->cfg.dim, BT,
                                        g->checkpointing ? 1 : g->moe_layers, g->dt),
                    1, &g->moe_mem);
    zero__carve(base, &off, (L + 1) * BT * C, e, &g->resid);
    zero__carve(base, &off, BT * C, e, &g->lnf);
    zero__carve(base, &off, BT, f, &g->lnf_mean);
    zero__carve(base, &off, BT, f, &g->lnf_rstd);
    zero__carve(base, &off, BT * V, f, &g->logits);
    /* fp32 runs the fused head (kernels.h, lm_head.c): no (B,T,V) gradient, a chunk of it */
    if (g->dt == ZERO_DTYPE_FP32) {
        zero__carve(base, &off, BT, f, &g->lse);
        zero__carve(base, &off, zero__lm_head_scratch_count(BT, V), f, &g->head_scratch);
    } else {
        zero__carve(base, &off, BT * V, e, &g->dlogits);
    }
    zero__carve(base, &off, BT, f, &g->losses);
    zero__carve(base, &off, BT * C, e, &g->dres);
    zero__carve(base, &off, BT * 4 * C, e, &g->d4a);
    zero__carve(base, &off, BT * 4 * C, e, &g->d4b);
    zero__carve(base, &off, BT * C, e, &g->dc);
    zero__carve(base, &off, BT * C, e, &g->ln);
    zero__carve(base, &off, B * NH * T * T, f, &g->att);
    size_t nscr = g->dt == ZERO_DTYPE_FP32
                      ? zero__attention_scratch_count(T, g->threads)
                      : zero__attention_scratch_count_lp(T, C / NH, g->threads);
    zero__carve(base, &off, nscr, f, &g->att_scratch);
    if (g->cfg.fp8.enabled) {
        zero__carve(base, &off, BT * 4 * C, e, &g->fp8_x);
        zero__carve(base, &off, 4 * C * C, e, &g->fp8_w);
        zero__carve(base, &off, BT * 4 * C, e, &g->fp8_dy);
    }
    zero__carve(base, &off, BT, sizeof(int32_t), &g->tokens);
    zero__carve(base, &off, BT, sizeof(int32_t), &g->targets);
    *total = off;
}

zero_status_t zero__gpt_init(zero_gpt_t **out, const zero_gpt_config_t *cfg, zero_engine_t *eng,
                             int batch, int checkpointing, int threads) {
    return zero__gpt_init_ep(out, cfg, eng, batch, checkpointing, threads, NULL);
}

zero_status_t zero__gpt_init_ep(zero_gpt_t **out, const zero_gpt_config_t *cfg, zero_engine_t *eng,
                                int batch, int checkpointing, int threads, zero_comm_t *ep_comm) {
    if (!out || !eng) return zero__error(ZERO_ERR_INVALID_ARG, "zero__gpt_init: NULL argument");
    *out = NULL;
    zero_status_t st = zero__gpt_config_check(cfg);
    if (st) return st;
    const int ep = cfg->moe.experts > 0 && cfg->moe.ep_size > 1 ? cfg->moe.ep_size : 1;
    if ((ep_comm ? zero_comm_size(ep_comm) : 1) != ep)
        return zero__error(ZERO_ERR_INVALID_ARG,
                           "model.moe.ep_size = %d but the expert-parallel communicator has %d "
                           "ranks (expected the same)",
                           cfg->moe.ep_size, ep_comm ? zero_comm_size(ep_comm) : 1);
    if (batch < 1)
        return zero__error(ZERO_ERR_CONFIG, "batch size %d is invalid (expected >= 1)", batch);
    zero_gpt_t *g = calloc(1, sizeof *g);
    if (!g) return zero__error(ZERO_ERR_OUT_OF_MEMORY, "model: out of memory");
    g->cfg = *cfg;
    g->eng = eng;
    g->ep_comm = ep > 1 ? ep_comm : NULL;
    g->batch = batch;
    g->checkpointing = checkpointing ? 1 : 0;
    g->threads = threads < 1 ? 1 : threads;
    g->dt = zero_engine_params(eng)->compute_dtype;
    if (g->dt != ZERO_DTYPE_FP32 && g->dt != ZERO_DTYPE_BF16 && g->dt != ZERO_DTYPE_FP16) {
        st = zero__error(ZERO_ERR_UNSUPPORTED,
                         "model: compute dtype %s is not supported (expected fp32, bf16 or fp16)",
                         zero_dtype_name(g->dt));
        goto fail;
    }
    g->es = zero_dtype_size(g->dt);
    const size_t L = (size_t)cfg->layers;
    g->unit_block = calloc(L, sizeof *g->unit_block);
    g->unit_experts = calloc(L, sizeof *g->unit_experts);
    g->moe_slot = calloc(L, sizeof *g->moe_slot);
    if (!g->unit_block || !g->unit_experts || !g->moe_slot) {
        st = zero__error(ZERO_ERR_OUT_OF_MEMORY, "model: out of memory");
        goto fail;
    }
    for (int l = 0; l < cfg->layers; l++)
        g->moe_slot[l] = zero__moe_is_layer(&cfg->moe, l) ? g->moe_layers++ : -1;
    if (g->moe_layers) {
        const size_t E = (size_t)cfg->moe.experts;
        g->moe_stats = calloc((size_t)g->moe_layers * ZERO_GPT_MOE_STATS(E), sizeof(double));
        g->moe_counts = calloc(E, sizeof *g->moe_counts);
        if (!g->moe_stats || !g->moe_counts) {
            st = zero__error(ZERO_ERR_OUT_OF_MEMORY, "model: out of memory");
            goto fail;
        }
    }
    st = declare_units(g);
    if (st) goto fail;
    st = zero__fp8_init(&g->fp8, &cfg->fp8, cfg->layers, zero_engine_mem(eng));
    if (st) goto fail;
    g->acts = calloc(g->checkpointing ? 1 : (size_t)cfg->layers, sizeof *g->acts);
    if (!g->acts) {
        st = zero__error(ZERO_ERR_OUT_OF_MEMORY, "model: out of memory");
        goto fail;
    }
    size_t total = 0;
    layout(g, NULL, &total);
    g->act_bytes = total;
    g->act_mem = zero_mem_alloc(zero_engine_mem(eng), ZERO_MEM_ACTIVATIONS, g->act_bytes, 64);
    if (!g->act_mem) {
        st = zero__error(ZERO_ERR_OUT_OF_MEMORY,
                         "model: cannot allocate %.1f MiB of activations for batch %d x seq %d "
                         "(try a smaller batch or activation checkpointing)",
                         (double)g->act_bytes / 1048576.0, batch, cfg->seq);
        goto fail;
    }
    layout(g, g->act_mem, &total);
    if (g->moe_layers) {
        st = zero__moe_mlp_init(&g->moe, &cfg->moe, cfg->dim, (size_t)batch * (size_t)cfg->seq,
                                g->checkpointing ? 1 : g->moe_layers, g->dt, g->threads, g->ep_comm,
                                g->moe_mem);
        if (st) goto fail;
    }
    /* Touch every page now: otherwise the first training step pays ~0.1 ms per MiB of page
     * faults inside the timed loop (seen in perf as clear_page under the kernels). */
    memset(g->act_mem, 0, g->act_bytes);
    zero__log(ZERO_LOG_DEBUG, -1, 0, "model: %zu parameters, %.1f MiB activations (%s, %s)",
              zero__gpt_param_count(cfg), (double)g->act_bytes / 1048576.0,
              g->checkpointing ? "checkpointing" : "all stored", zero_dtype_name(g->dt));
    *out = g;
    return ZERO_OK;
fail:
    /* Units already declared stay in the engine: the caller frees the engine on failure. */
    zero__gpt_free(g);
    return st;
}

void zero__gpt_free(zero_gpt_t *g) {
    if (!g) return;
    zero__moe_mlp_free(g->moe);
    zero__fp8_free(g->fp8);
    zero_mem_free(g->act_mem);
    free(g->acts);
    free(g->unit_block);
    free(g->unit_experts);
    free(g->moe_slot);
    free(g->moe_stats);
    free(g->moe_counts);
    free(g);
}

void zero__gpt_set_eval(zero_gpt_t *g, int on) {
    g->eval = on != 0;
    if (g->moe) zero__moe_mlp_set_eval(g->moe, g->eval);
}

size_t zero__gpt_moe_stats(const zero_gpt_t *g, double *out) {
    const size_t n = (size_t)g->moe_layers * ZERO_GPT_MOE_STATS((size_t)g->cfg.moe.experts);
    if (out && n) memcpy(out, g->moe_stats, n * sizeof *out);
    return n;
}

void zero__gpt_moe_traffic(const zero_gpt_t *g, uint64_t *sent, uint64_t *theory) {
    if (sent) *sent = 0;
    if (theory) *theory = 0;
    if (g->moe) zero__moe_mlp_traffic(g->moe, sent, theory);
}

void zero__gpt_moe_traffic_reset(zero_gpt_t *g) {
    if (g->moe) zero__moe_mlp_traffic_reset(g->moe);
}

void zero__gpt_moe_stats_reset(zero_gpt_t *g) {
    const size_t n = (size_t)g->moe_layers * ZERO_GPT_MOE_STATS((size_t)g->cfg.moe.experts);
    if (n) memset(g->moe_stats, 0, n * sizeof *g->moe_stats);
}

const float *zero__gpt_logits(const zero_gpt_t *g) { return g->logits; }
zero_fp8_t *zero__gpt_fp8(zero_gpt_t *g) { return g->fp8; }
size_t zero__gpt_activation_bytes(const zero_gpt_t *g) { return g->act_bytes; }

zero_status_t zero__gpt_memory_estimate(const zero_gpt_config_t *cfg,
                                        const zero_engine_params_t *ep, int world, int batch,
                                        int checkpointing, int threads,
                                        zero_memory_estimate_t *out) {
    zero_status_t st = zero__gpt_config_check(cfg);
    if (st) return st;
    zero_tensor_desc_t emb[E_COUNT], blk[B_COUNT], fin[F_COUNT], mblk[M_COUNT], xp[X_COUNT];
    int nm = 0;
    zero__gpt_unit_descs(cfg, emb, blk, fin);
    if (cfg->moe.experts > 0) moe_descs(cfg, mblk, &nm, xp);
    /* the units in declaration order (declare_units), one entry per unit */
    zero_unit_decl_t *units = calloc(2 * (size_t)cfg->layers + 2, sizeof *units);
    if (!units) return zero__error(ZERO_ERR_OUT_OF_MEMORY, "model: out of memory");
    int n = 0, moe_layers = 0;
    units[n++] = (zero_unit_decl_t){emb, E_COUNT, 1, 0, 1};
    for (int l = 0; l < cfg->layers; l++) {
        if (!zero__moe_is_layer(&cfg->moe, l)) {
            units[n++] = (zero_unit_decl_t){blk, B_COUNT, 1, 0, 1};
            continue;
        }
        moe_layers++;
        units[n++] = (zero_unit_decl_t){mblk, nm, 1, 0, 1};
        /* expert parallelism: one copy of E / ep experts over world / ep ranks, ep slots */
        const int eps = cfg->moe.ep_size > 1 ? cfg->moe.ep_size : 1;
        units[n++] = (zero_unit_decl_t){xp, X_COUNT, 1, eps > 1 ? world / eps : 0, eps};
    }
    units[n++] = (zero_unit_decl_t){fin, F_COUNT, 1, 0, 1};
    st = zero_engine_estimate_memory(ep, world, units, n, out);
    free(units);
    if (st) return st;
    /* The activations: the same layout pass as zero__gpt_init, on a model that is never
     * built. */
    zero_gpt_t g;
    memset(&g, 0, sizeof g);
    g.cfg = *cfg;
    g.batch = batch < 1 ? 1 : batch;
    g.checkpointing = checkpointing ? 1 : 0;
    g.threads = threads < 1 ? 1 : threads;
    g.dt = ep->compute_dtype;
    g.es = zero_dtype_size(g.dt);
    g.moe_layers = moe_layers;
    size_t total = 0;
    layout(&g, NULL, &total);
    out->bytes[ZERO_MEM_ACTIVATIONS] = total;
    const size_t fp8_bytes = zero__fp8_state_bytes(&cfg->fp8, cfg->layers);
    out->bytes[ZERO_MEM_OTHER] += fp8_bytes;
    out->total_bytes += total + fp8_bytes;
    return ZERO_OK;
}
const zero_gpt_config_t *zero__gpt_config(const zero_gpt_t *g) { return &g->cfg; }

/* Element i of a compute-dtype buffer. */
static void *at(const zero_gpt_t *g, const void *base, size_t i) {
    return (char *)(uintptr_t)base + i * g->es;
}
static const void *tensor(const zero_gpt_t *g, const void *base, int unit, int t) {
    return at(g, base, zero_engine_tensor_offset(g->eng, unit, t));
}
static void *gtensor(const zero_gpt_t *g, void *base, int unit, int t) {
    return at(g, base, zero_engine_tensor_offset(g->eng, unit, t));
}

/* ------------------------------------------------------------------------------ dtype dispatch */

/* One model code path for every dtype: these pick the fp32 kernel (kernels.h) or its 16-bit
 * I/O twin (kernels_lp.h). Arguments as the kernels'; `void *` tensors are in g->dt. */
#define LP (g->dt != ZERO_DTYPE_FP32)

static void k_layernorm(const zero_gpt_t *g, void *out, float *mean, float *rstd, const void *inp,
                        const void *w, const void *b, size_t BT, size_t C) {
    if (LP)
        zero__layernorm_forward_lp(out, mean, rstd, inp, w, b, g->dt, BT, C, g->threads);
    else
        zero__layernorm_forward(out, mean, rstd, inp, w, b, BT, C, g->threads);
}

static void k_layernorm_backward(const zero_gpt_t *g, void *dinp, void *dw, void *db,
                                 const void *dout, const void *inp, const void *w,
                                 const float *mean, const float *rstd, size_t BT, size_t C) {
    if (LP)
        zero__layernorm_backward_lp(dinp, dw, db, dout, inp, w, mean, rstd, g->dt, BT, C,
                                    g->threads);
    else
        zero__layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, BT, C, g->threads);
}

static void k_matmul(const zero_gpt_t *g, void *out, const void *inp, const void *w,
                     const void *bias, size_t BT, size_t C, size_t OC) {
    if (LP)
        zero__matmul_forward_lp(out, g->dt, inp, w, bias, g->dt, BT, C, OC, g->threads);
    else
        zero__matmul_forward(out, inp, w, bias, BT, C, OC, g->threads);
}

static void k_gelu(const zero_gpt_t *g, void *out, const void *inp, size_t n) {
    if (LP)
        zero__gelu_forward_lp(out, inp, g->dt, n, g->threads);
    else
        zero__gelu_forward(out, inp, n, g->threads);
}

static void k_gelu_backward(const zero_gpt_t *g, void *dinp, const void *inp, const void *dout,
                            size_t n) {
    if (LP)
        zero__gelu_backward_lp(dinp, inp, dout, g->dt, n, g->threads);
    else
        zero__gelu_backward(dinp, inp, dout, n, g->threads);
}

static void k_residual(const zero_gpt_t *g, void *out, const void *a, const void *b, size_t n) {
    if (LP)
        zero__residual_forward_lp(out, a, b, g->dt, n, g->threads);
    else
        zero__residual_forward(out, a, b, n, g->threads);
}

static void k_attention(const zero_gpt_t *g, void *out, const void *qkv, size_t B, size_t T) {
    const size_t C = (size_t)g->cfg.dim, NH = (size_t)g->cfg.heads;
    if (LP)
        zero__attention_forward_lp(out, g->att, qkv, g->att_scratch, g->dt, B, T, C, NH,
                                   g->threads);
    else
        zero__attention_forward(out, g->att, qkv, B, T, C, NH, g->threads);
}

static void k_attention_backward(const zero_gpt_t *g, void *dinp, const void *dout, const void *qkv,
                                 size_t B, size_t T) {
    const size_t C = (size_t)g->cfg.dim, NH = (size_t)g->cfg.heads;
    if (LP)
        zero__attention_backward_lp(dinp, g->att_scratch, dout, qkv, g->att, g->dt, B, T, C, NH,
                                    g->threads);
    else
        zero__attention_backward(dinp, g->att_scratch, dout, qkv, g->att, B, T, C, NH, g->threads);
}

/* Linear backward that OVERWRITES dinp (BT, C) and accumulates dweight/dbias: the activation
 * gradients are scratch buffers reused by every block, so writing them with beta = 0 saves
 * zeroing them first (a memset pass over up to (BT, 4C) per linear). */
static void linear_backward_set(const zero_gpt_t *g, void *dinp, void *dweight, void *dbias,
                                const void *dout, const void *inp, const void *weight, size_t BT,
                                size_t C, size_t OC) {
    const int th = g->threads;
    if (LP) {
        zero__gemm_lp(0, 0, BT, C, OC, dout, OC, weight, C, g->dt, 0, dinp, C, g->dt, th);
        zero__matmul_backward_lp(NULL, g->dt, dweight, dbias, g->dt, dout, inp, weight, g->dt, BT,
                                 C, OC, th);
        return;
    }
    /* dinp(BT, C) = dout(BT, OC) · weight(OC, C): NN */
    zero__sgemm(0, 0, BT, C, OC, 1.0f, dout, OC, weight, C, 0.0f, dinp, C, th);
    zero__matmul_backward(NULL, dweight, dbias, dout, inp, weight, BT, C, OC, th);
}

/* The blocks' linear layers: k_matmul / linear_backward_set, with FP8 GEMM inputs when fp8 is
 * on (fp8.h): X and W quantized for the forward; dY quantized for the backward, X and W again as
 * the forward had them (the scales do not change within a step, the tiles are the same values).
 * The bias gradient sums the unquantized dY (Transformer Engine's dbias). record: take the
 * inputs' amax into the step's (training forwards and backwards only). linear: ZERO_FP8_LINEARS
 * index of the linear in block l. */
static void linear_forward(zero_gpt_t *g, int l, int linear, void *out, const void *inp,
                           const void *w, const void *bias, size_t BT, size_t C, size_t OC,
                           int record) {
    if (!g->fp8) {
        k_matmul(g, out, inp, w, bias, BT, C, OC);
        return;
    }
    record = record && !g->eval;
    zero__fp8_input(g->fp8, g->fp8_x, inp, g->dt, BT, C, l, linear, ZERO_FP8_X, record, g->threads);
    zero__fp8_input(g->fp8, g->fp8_w, w, g->dt, OC, C, l, linear, ZERO_FP8_W, record, g->threads);
    k_matmul(g, out, g->fp8_x, g->fp8_w, bias, BT, C, OC);
}

static void linear_backward(zero_gpt_t *g, int l, int linear, void *dinp, void *dweight,
                            void *dbias, const void *dout, const void *inp, const void *weight,
                            size_t BT, size_t C, size_t OC) {
    if (!g->fp8) {
        linear_backward_set(g, dinp, dweight, dbias, dout, inp, weight, BT, C, OC);
        return;
    }
    const int th = g->threads;
    zero__fp8_input(g->fp8, g->fp8_dy, dout, g->dt, BT, OC, l, linear, ZERO_FP8_DY, !g->eval, th);
    zero__fp8_input(g->fp8, g->fp8_x, inp, g->dt, BT, C, l, linear, ZERO_FP8_X, 0, th);
    zero__fp8_input(g->fp8, g->fp8_w, weight, g->dt, OC, C, l, linear, ZERO_FP8_W, 0, th);
    linear_backward_set(g, dinp, dweight, NULL, g->fp8_dy, g->fp8_x, g->fp8_w, BT, C, OC);
    if (LP)
        zero__matmul_backward_lp(NULL, g->dt, NULL, dbias, g->dt, dout, NULL, NULL, g->dt, BT, C,
                                 OC, th);
    else
        zero__matmul_backward(NULL, NULL, dbias, dout, NULL, NULL, BT, C, OC, th);
}

/* ------------------------------------------------------------------------------ blocks */

/* Views of MoE layer l's parameters (or, grads, gradients) in its block unit's buffer w and its
 * experts unit's buffer wx (gradients at ep_size > 1: one slot per source rank of the block). */
static zero_moe_weights_t moe_weights(const zero_gpt_t *g, int l, const void *w, const void *wx,
                                      int grads) {
    const int u = g->unit_block[l], ux = g->unit_experts[l];
#define V(base, unit, i) at(g, base, zero_engine_tensor_offset(g->eng, unit, i))
    zero_moe_weights_t m = {V(w, u, M_ROUTER),
                            NULL,
                            NULL,
                            NULL,
                            NULL,
                            V(wx, ux, X_FCW),
                            V(wx, ux, X_FCB),
                            V(wx, ux, X_PROJW),
                            V(wx, ux, X_PROJB),
                            0};
    if (g->cfg.moe.shared_experts > 0) {
        m.shared_fc_w = V(w, u, M_SFCW);
        m.shared_fc_b = V(w, u, M_SFCB);
        m.shared_proj_w = V(w, u, M_SPROJW);
        m.shared_proj_b = V(w, u, M_SPROJB);
    }
    if (grads && g->ep_comm) m.expert_slot_stride = zero_engine_unit_padded_count(g->eng, ux);
#undef V
    return m;
}

/* Add one training forward's routing figures to MoE layer l's running sums (gpt.h). */
static void moe_record(zero_gpt_t *g, int l, const zero_moe_layer_stats_t *ms, size_t BT) {
    const size_t E = (size_t)g->cfg.moe.experts;
    double *row = g->moe_stats + (size_t)g->moe_slot[l] * ZERO_GPT_MOE_STATS(E);
    for (size_t e = 0; e < E; e++) row[e] += g->moe_counts[e];
    row[E + ZERO_GPT_MOE_DROPPED] += (double)ms->dropped;
    row[E + ZERO_GPT_MOE_CHOICES] += (double)BT * g->cfg.moe.top_k;
    row[E + ZERO_GPT_MOE_AUX] += ms->aux_loss;
    row[E + ZERO_GPT_MOE_Z] += ms->z_loss;
    row[E + ZERO_GPT_MOE_FORWARDS] += 1.0;
}

/* The stored MoE state layer l uses: its own, or the single one under checkpointing. */
static int moe_state(const zero_gpt_t *g, int l) { return g->checkpointing ? 0 : g->moe_slot[l]; }

/* One block forward: x (B,T,C) -> y (B,T,C), activations into a. The single-use values go to
 * the shared scratch (g->ln, g->d4b, g->dc): between blocks only g->dres is live, so the forward
 * (and its recompute under checkpointing, which runs before the block's backward) may use them.
 * wx: an MoE layer's experts unit (NULL for a dense layer). record: add the routing figures to
 * the statistics (not for a recompute, which would count them twice). */
static zero_status_t block_forward(zero_gpt_t *g, int l, const void *w, const void *wx,
                                   block_acts_t *a, const void *x, void *y, size_t B, size_t T,
                                   int record) {
    const size_t C = (size_t)g->cfg.dim, BT = B * T;
    const int unit = g->unit_block[l];
    void *ln = g->ln, *atty = g->d4b, *gelu = g->d4b, *proj = g->dc;
#define W(i) tensor(g, w, unit, i)
    k_layernorm(g, ln, a->ln1_mean, a->ln1_rstd, x, W(B_LN1W), W(B_LN1B), BT, C);
    linear_forward(g, l, 0, a->qkv, ln, W(B_QKVW), W(B_QKVB), BT, C, 3 * C, record);
    k_attention(g, atty, a->qkv, B, T);
    linear_forward(g, l, 1, proj, atty, W(B_ATTPROJW), W(B_ATTPROJB), BT, C, C, record);
    k_residual(g, a->res2, x, proj, BT * C);
    k_layernorm(g, ln, a->ln2_mean, a->ln2_rstd, a->res2, W(B_LN2W), W(B_LN2B), BT, C);
    if (g->moe_slot[l] >= 0) {
        const zero_moe_weights_t mw = moe_weights(g, l, w, wx, 0);
        zero_moe_layer_stats_t ms;
        zero_status_t st =
            zero__moe_mlp_forward(g->moe, moe_state(g, l), &mw, proj, ln, BT, g->moe_counts, &ms);
        if (st) return st;
        if (record && !g->eval) moe_record(g, l, &ms, BT);
    } else {
        linear_forward(g, l, 2, a->fch, ln, W(B_FCW), W(B_FCB), BT, C, 4 * C, record);
        k_gelu(g, gelu, a->fch, BT * 4 * C);
        linear_forward(g, l, 3, proj, gelu, W(B_FCPROJW), W(B_FCPROJB), BT, 4 * C, C, record);
    }
    k_residual(g, y, a->res2, proj, BT * C);
#undef W
    return ZERO_OK;
}

/* The dense MLP's backward: on entry g->dres holds dL/d(MLP output); on exit g->dc holds
 * dL/d(ln2 output), and the MLP's weight gradients are accumulated. */
static void dense_mlp_backward(zero_gpt_t *g, int l, const void *w, void *gw, int unit,
                               const block_acts_t *a, size_t BT) {
    const size_t C = (size_t)g->cfg.dim, es = g->es;
    void *dres = g->dres;
#define W(i) tensor(g, w, unit, i)
#define G(i) gtensor(g, gw, unit, i)
    /* Rebuild the GELU output into d4b (bitwise what the forward fed fc-proj), use it for the
     * weight gradient, then reuse d4b for d(fch). The recompute is a streaming pass, cheaper
     * than keeping (B,T,4C) per layer. */
    k_gelu(g, g->d4b, a->fch, BT * 4 * C);
    linear_backward(g, l, 3, g->d4a, G(B_FCPROJW), G(B_FCPROJB), dres, g->d4b, W(B_FCPROJW), BT,
                    4 * C, C); /* d4a = d(fch_gelu) */
    memset(g->d4b, 0, BT * 4 * C * es);
    k_gelu_backward(g, g->d4b, a->fch, g->d4a, BT * 4 * C); /* d4b = d(fch) */
    /* ln2 again from res2: the kernel rewrites mean/rstd with the values they hold. */
    k_layernorm(g, g->ln, a->ln2_mean, a->ln2_rstd, a->res2, W(B_LN2W), W(B_LN2B), BT, C);
    linear_backward(g, l, 2, g->dc, G(B_FCW), G(B_FCB), g->d4b, g->ln, W(B_FCW), BT, C,
                    4 * C); /* dc = d(ln2) */
#undef W
#undef G
}

/* One block backward. On entry g->dres holds dL/dy; on exit it holds dL/dx. The residual
 * connections let dres serve as the gradient of both branches: y = res2 + fcproj gives
 * d(fcproj) = dy and d(res2) = dy + (the MLP branch's contribution), accumulated in place; the
 * same holds for res2 = x + attproj. */
static zero_status_t block_backward(zero_gpt_t *g, int l, const void *w, const void *wx, void *gw,
                                    void *gwx, const block_acts_t *a, const void *x, size_t B,
                                    size_t T) {
    const size_t C = (size_t)g->cfg.dim, BT = B * T, es = g->es;
    const int unit = g->unit_block[l];
#define W(i) tensor(g, w, unit, i)
#define G(i) gtensor(g, gw, unit, i)
    void *dres = g->dres;
    if (g->moe_slot[l] >= 0) {
        /* the MoE MLP reads ln2's output (rebuilt here) and leaves d(ln2) in dc */
        k_layernorm(g, g->ln, a->ln2_mean, a->ln2_rstd, a->res2, W(B_LN2W), W(B_LN2B), BT, C);
        const zero_moe_weights_t mw = moe_weights(g, l, w, wx, 0);
        const zero_moe_weights_t mg = moe_weights(g, l, gw, gwx, 1);
        zero_status_t st =
            zero__moe_mlp_backward(g->moe, moe_state(g, l), &mw, &mg, g->dc, dres, g->ln, BT,
                                   LP ? zero_engine_loss_scale(g->eng) : 1.0f);
        if (st) return st;
    } else {
        dense_mlp_backward(g, l, w, gw, unit, a, BT);
    }
    k_layernorm_backward(g, dres, G(B_LN2W), G(B_LN2B), g->dc, a->res2, W(B_LN2W), a->ln2_mean,
                         a->ln2_rstd, BT, C); /* dres = d(res2) */
    /* Rebuild atty (into d4b, free again) and att from qkv: about 3% of the block's forward
     * FLOPs for (B,T,C) + (B,NH,T,T) per layer. */
    k_attention(g, g->d4b, a->qkv, B, T);
    linear_backward(g, l, 1, g->dc, G(B_ATTPROJW), G(B_ATTPROJB), dres, g->d4b, W(B_ATTPROJW), BT,
                    C, C); /* dc = d(atty) */
    memset(g->d4a, 0, BT * 3 * C * es);
    k_attention_backward(g, g->d4a, g->dc, a->qkv, B, T); /* d4a = d(qkv) */
    k_layernorm(g, g->ln, a->ln1_mean, a->ln1_rstd, x, W(B_LN1W), W(B_LN1B), BT, C);
    linear_backward(g, l, 0, g->dc, G(B_QKVW), G(B_QKVB), g->d4a, g->ln, W(B_QKVW), BT, C,
                    3 * C); /* dc = d(ln1) */
    k_layernorm_backward(g, dres, G(B_LN1W), G(B_LN1B), g->dc, x, W(B_LN1W), a->ln1_mean,
                         a->ln1_rstd, BT, C); /* dres = dx */
#undef W
#undef G
    return ZERO_OK;
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

    const void *we;
    FETCH(we, g->unit_emb);
    if (LP)
        zero__embedding_forward_lp(g->resid, g->tokens, tensor(g, we, g->unit_emb, E_WTE),
                                   tensor(g, we, g->unit_emb, E_WPE), g->dt, B, T, C, th);
    else
        zero__embedding_forward(g->resid, g->tokens, tensor(g, we, g->unit_emb, E_WTE),
                                tensor(g, we, g->unit_emb, E_WPE), B, T, C, th);
    zero_unit_release(g->eng, g->unit_emb);
    for (int l = 0; l < g->cfg.layers; l++) {
        const int u = g->unit_block[l], ux = g->unit_experts[l];
        const void *w, *wx = NULL;
        FETCH(w, u);
        if (ux >= 0) FETCH(wx, ux);
        zero_status_t st =
            block_forward(g, l, w, wx, &g->acts[g->checkpointing ? 0 : l],
                          at(g, g->resid, l * BT * C), at(g, g->resid, (l + 1) * BT * C), B, T, 1);
        if (ux >= 0) zero_unit_release(g->eng, ux);
        zero_unit_release(g->eng, u);
        if (st) return st;
    }
    const void *wf;
    FETCH(wf, g->unit_final);
    k_layernorm(g, g->lnf, g->lnf_mean, g->lnf_rstd,
                at(g, g->resid, (size_t)g->cfg.layers * BT * C),
                tensor(g, wf, g->unit_final, F_LNFW), tensor(g, wf, g->unit_final, F_LNFB), BT, C);
    zero_unit_release(g->eng, g->unit_final);
    FETCH(we, g->unit_emb); /* the head is the tied token embedding */
    const void *wte = tensor(g, we, g->unit_emb, E_WTE);
    /* Logits stay fp32 in every dtype: the GEMM accumulates in fp32 anyway, so this costs no
     * rounding and no time, and the loss and sampling read them unrounded. */
    if (LP)
        zero__matmul_forward_lp(g->logits, ZERO_DTYPE_FP32, g->lnf, wte, NULL, g->dt, BT, C, V, th);
    else
        zero__matmul_forward(g->logits, g->lnf, wte, NULL, BT, C, V, th);
    zero_unit_release(g->eng, g->unit_emb);
    if (targets) {
        /* The loss is the mean over the counted positions, so its gradient is known now. fp32
         * keeps each row's log-sum-exp for the fused head backward (kernels.h), which makes the
         * gradient of the logits chunk by chunk there instead of storing it. */
        g->dloss = valid ? 1.0f / (float)valid : 0.0f;
        if (!LP) {
            zero__softmax_ce_forward(g->losses, g->lse, g->logits, g->targets, BT, V, V, th);
        } else {
            /* fp16 loss scaling: the gradient of (scale * loss), so small gradients stay above
             * fp16's subnormal range; the engine divides the scale back out in its step. One
             * pass over the logits gives loss and gradient, into a separate buffer (the logits
             * stay readable, and out of place is faster than in place;
             * docs/kernels-matmul.md section 3). */
            g->dloss = valid ? zero_engine_loss_scale(g->eng) / (float)valid : 0.0f;
            zero__softmax_ce_forward_backward_lp(g->losses, g->dlogits, g->dt, g->logits,
                                                 g->targets, g->dloss, BT, V, V, th);
        }
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

    const void *we;
    FETCH(we, g->unit_emb);
    void *gwe = zero_unit_grads(g->eng, g->unit_emb);
    if (!gwe) return ZERO_ERR_INVALID_ARG;
    /* dc = d(lnf) */
    if (LP)
        linear_backward_set(g, g->dc, gtensor(g, gwe, g->unit_emb, E_WTE), NULL, g->dlogits, g->lnf,
                            tensor(g, we, g->unit_emb, E_WTE), BT, C, V);
    else
        zero__lm_head_ce_backward(g->dc, gtensor(g, gwe, g->unit_emb, E_WTE), g->head_scratch,
                                  g->logits, g->lse, g->lnf, tensor(g, we, g->unit_emb, E_WTE),
                                  g->targets, g->dloss, BT, C, V, th);

    const void *wf;
    FETCH(wf, g->unit_final);
    void *gwf = zero_unit_grads(g->eng, g->unit_final);
    if (!gwf) return ZERO_ERR_INVALID_ARG;
    memset(g->dres, 0, BT * C * g->es);
    k_layernorm_backward(g, g->dres, gtensor(g, gwf, g->unit_final, F_LNFW),
                         gtensor(g, gwf, g->unit_final, F_LNFB), g->dc,
                         at(g, g->resid, (size_t)L * BT * C), tensor(g, wf, g->unit_final, F_LNFW),
                         g->lnf_mean, g->lnf_rstd, BT, C);
    zero_status_t st = zero_unit_grads_done(g->eng, g->unit_final);
    zero_unit_release(g->eng, g->unit_final);
    if (st) return st;

    for (int l = L - 1; l >= 0; l--) {
        const int u = g->unit_block[l], ux = g->unit_experts[l];
        const void *w, *wx = NULL;
        void *gwx = NULL;
        FETCH(w, u);
        void *gw = zero_unit_grads(g->eng, u);
        if (!gw) return ZERO_ERR_INVALID_ARG;
        if (ux >= 0) {
            FETCH(wx, ux);
            gwx = zero_unit_grads(g->eng, ux);
            if (!gwx) return ZERO_ERR_INVALID_ARG;
        }
        const void *x = at(g, g->resid, (size_t)l * BT * C);
        block_acts_t *a = &g->acts[g->checkpointing ? 0 : l];
        /* Recompute: y is rewritten with the values it already holds (kernels are
         * deterministic), and nothing reads it any more. */
        if (g->checkpointing)
            st = block_forward(g, l, w, wx, a, x, at(g, g->resid, (size_t)(l + 1) * BT * C), B, T,
                               0);
        if (!st) st = block_backward(g, l, w, wx, gw, gwx, a, x, B, T);
        if (st) return st;
        /* the experts' unit first: its gradient is final first (it is read before the router's
         * and the attention's in this backward) */
        if (ux >= 0) {
            st = zero_unit_grads_done(g->eng, ux);
            zero_unit_release(g->eng, ux);
            if (st) return st;
        }
        st = zero_unit_grads_done(g->eng, u);
        zero_unit_release(g->eng, u);
        if (st) return st;
    }
    if (LP)
        zero__embedding_backward_lp(gtensor(g, gwe, g->unit_emb, E_WTE),
                                    gtensor(g, gwe, g->unit_emb, E_WPE), g->dres, g->tokens, g->dt,
                                    B, T, C, V, th);
    else
        zero__embedding_backward(gtensor(g, gwe, g->unit_emb, E_WTE),
                                 gtensor(g, gwe, g->unit_emb, E_WPE), g->dres, g->tokens, B, T, C,
                                 th);
    st = zero_unit_grads_done(g->eng, g->unit_emb);
    zero_unit_release(g->eng, g->unit_emb);
    return st;
}
