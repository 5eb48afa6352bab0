/* gpt.h — the GPT-2 reference model (internal API): pre-LayerNorm blocks, learned positions, tied
 * token embedding and output head, biases, final LayerNorm (Radford et al. 2019; llm.c layout).
 *
 * The model declares its parameters to an engine as units (ARCHITECTURE.md section 2):
 *   unit 0          "embeddings": wte (V, C) [TIED with the head], wpe (maxT, C)
 *   unit 1 + l      "block.<l>":  ln1 w/b, qkv w (3C, C)/b, attn proj w (C, C)/b, ln2 w/b,
 *                                 fc w (4C, C)/b, fc proj w (C, 4C)/b
 *   unit 1 + L      "final":      lnf w/b
 * With model.moe (moe_mlp.h), layer l with (l + 1) % moe.every == 0 is an MoE layer: its
 * "block.<l>" unit holds ln1, attention, ln2, the router weight (E, C) and the shared experts
 * stacked along dim 0, and a unit "block.<l>.experts" right after it holds the E routed experts
 * stacked along dim 0 (fc w (E, H, C)/b (E, H), proj w (E, C, H)/b (E, C); with expert parallelism
 * each rank's copy holds E / ep_size of them); units are declared in layer order, so later
 * units' indices shift.
 * and asks the engine for parameters unit by unit (fetch/release/grads_done), so it never knows
 * which ZeRO stage runs. Activations are sized for (batch, seq) and allocated once at init under
 * ZERO_MEM_ACTIVATIONS; forward/backward allocate nothing.
 *
 * Activation checkpointing keeps only each block's input and one block's activations, and
 * recomputes a block's forward just before its backward.
 *
 * Compute dtype: the engine's (zero_engine_params(eng)->compute_dtype: fp32, bf16 or fp16).
 * Activations and gradients use it; the logits are fp32 in every dtype (see gpt.c).
 *
 * Threading: a model belongs to one rank; calls are not concurrent.
 */
#ifndef ZERO_MODEL_GPT_H
#define ZERO_MODEL_GPT_H

#include "model/fp8.h"
#include "model/moe_mlp.h"
#include "zero/ckpt.h"
#include "zero/engine.h"

#include <stdint.h>

typedef struct zero_gpt_config {
    int layers;            /* L */
    int heads;             /* NH, divides dim */
    int dim;               /* C */
    int vocab;             /* V */
    int seq;               /* maxT: the model's context length */
    zero_moe_config_t moe; /* experts 0: every MLP dense */
    zero_fp8_config_t
        fp8; /* FP8 GEMM inputs of the blocks' linear layers (fp8.h); off by default */
} zero_gpt_config_t;

/* The tensors of the dense model's three kinds of unit as zero__gpt_init declares them to the
 * engine (gpt.h's header: names, shapes, flags, initialisation): the embeddings' into
 * emb[ZERO_GPT_EMB_TENSORS], every dense block's into blk[ZERO_GPT_BLOCK_TENSORS], the final
 * norm's into fin[ZERO_GPT_FINAL_TENSORS]. Names are static strings. */
#define ZERO_GPT_EMB_TENSORS 2
#define ZERO_GPT_BLOCK_TENSORS 12
#define ZERO_GPT_FINAL_TENSORS 2
void zero__gpt_unit_descs(const zero_gpt_config_t *cfg,
                          zero_tensor_desc_t emb[ZERO_GPT_EMB_TENSORS],
                          zero_tensor_desc_t blk[ZERO_GPT_BLOCK_TENSORS],
                          zero_tensor_desc_t fin[ZERO_GPT_FINAL_TENSORS]);

/* Check a config; ZERO_ERR_CONFIG naming the key ("model.heads"), the value and what is allowed
 * (fp8 with MoE layers is refused: their expert GEMMs have no FP8 path). */
zero_status_t zero__gpt_config_check(const zero_gpt_config_t *cfg);

/* Parameter count of a config (tied embedding counted once), every expert included. */
size_t zero__gpt_param_count(const zero_gpt_config_t *cfg);
/* Parameters one token runs through: as zero__gpt_param_count, but an MoE layer counts its
 * router, top_k routed experts and its shared experts instead of all E routed experts. */
size_t zero__gpt_active_param_count(const zero_gpt_config_t *cfg);

/* Training FLOPs per token: 6 * active params + 12 * L * maxT * C (attention scores and values,
 * PaLM appendix B). Recomputation of checkpointed blocks is not counted (MFU convention), nor
 * the routing (O(E) per token) or the experts' work on slots left empty. */
double zero__gpt_flops_per_token(const zero_gpt_config_t *cfg);

typedef struct zero_gpt zero_gpt_t;

/* Declare the model's units to `eng` (borrowed: it must outlive the model) and allocate the
 * activations for `batch` sequences of up to cfg->seq tokens. threads: cores for the kernels.
 * moe.ep_size must be 1 (zero__gpt_init_ep for expert parallelism). */
zero_status_t zero__gpt_init(zero_gpt_t **out, const zero_gpt_config_t *cfg, zero_engine_t *eng,
                             int batch, int checkpointing, int threads);
/* The same with expert parallelism (moe_mlp.h): ep_comm (borrowed, must outlive the model) is
 * this rank's block of moe.ep_size consecutive ranks of the engine's world (a split of it by
 * color rank / ep_size, key rank), NULL when ep_size is 1 or there is no MoE. Each rank then
 * declares its E / ep_size experts of every MoE layer as a stacked unit over the
 * expert-data-parallel group (zero_engine_add_group with color rank % ep_size), with ep_size
 * source slots; forwards and backwards are collective over the block. ZERO_ERR_INVALID_ARG when
 * the communicator's size is not ep_size. */
zero_status_t zero__gpt_init_ep(zero_gpt_t **out, const zero_gpt_config_t *cfg, zero_engine_t *eng,
                                int batch, int checkpointing, int threads, zero_comm_t *ep_comm);
void zero__gpt_free(zero_gpt_t *gpt);

/* Forward over tokens (B, T), B <= batch, T <= seq. targets (B, T) may be NULL (inference: logits
 * only); a target < 0 is ignored. With targets, *loss (may be NULL) receives the mean
 * cross-entropy over the non-ignored positions. Errors (token or target out of range, T too
 * long) name the value and what was expected. */
zero_status_t zero__gpt_forward(zero_gpt_t *gpt, const int32_t *tokens, const int32_t *targets,
                                int B, int T, float *loss);

/* Backward of the last forward (which must have had targets): accumulates the gradient of the
 * mean loss into the engine's gradient buffers and calls zero_unit_grads_done per unit. */
zero_status_t zero__gpt_backward(zero_gpt_t *gpt);

/* Eval mode (on != 0): MoE layers use moe.eval_capacity_factor and record no statistics; for
 * forwards that no backward follows (validation, sampling). Training mode (the default):
 * moe.capacity_factor. */
void zero__gpt_set_eval(zero_gpt_t *gpt, int on);

/* Routing statistics of the training forwards since the last reset, per MoE layer in layer
 * order: ZERO_GPT_MOE_STATS(E) doubles each, the E experts' kept tokens, then (at E + the index)
 * the dropped (token, choice) pairs, the (token, choice) pairs routed, and the sums of the aux
 * loss, of the z loss and the forward count (their means are sum / forwards). Writes them to out
 * (may be NULL) and returns how many there are (0 for a dense model). */
enum {
    ZERO_GPT_MOE_DROPPED,
    ZERO_GPT_MOE_CHOICES,
    ZERO_GPT_MOE_AUX,
    ZERO_GPT_MOE_Z,
    ZERO_GPT_MOE_FORWARDS,
    ZERO_GPT_MOE_EXTRA_COUNT
};
#define ZERO_GPT_MOE_STATS(E) ((E) + ZERO_GPT_MOE_EXTRA_COUNT)
size_t zero__gpt_moe_stats(const zero_gpt_t *gpt, double *out);
void zero__gpt_moe_stats_reset(zero_gpt_t *gpt);
/* Expert parallelism's all-to-all bytes since the last reset, measured and in theory
 * (zero__moe_mlp_traffic, summed over the MoE layers; 0 without expert parallelism). */
void zero__gpt_moe_traffic(const zero_gpt_t *gpt, uint64_t *sent, uint64_t *theory);
void zero__gpt_moe_traffic_reset(zero_gpt_t *gpt);

/* Logits (B, T, V) of the last forward, fp32 in every compute dtype; valid until the next
 * forward (backward leaves them alone: a training forward writes the loss gradient to a
 * separate buffer). */
const float *zero__gpt_logits(const zero_gpt_t *gpt);

/* The memory one rank needs for this model on an engine with params ep over `world` ranks,
 * with activations for `batch` sequences: zero_engine_estimate_memory of the model's units plus
 * the activations zero__gpt_init would allocate (ZERO_MEM_ACTIVATIONS), without allocating. */
zero_status_t zero__gpt_memory_estimate(const zero_gpt_config_t *cfg,
                                        const zero_engine_params_t *ep, int world, int batch,
                                        int checkpointing, int threads,
                                        zero_memory_estimate_t *out);

/* FP8 compute (fp8.h), NULL when off: the delayed recipe's step amax and update, which the
 * caller drives once per optimizer step (reduce zero__fp8_step_amax with MAX over the ranks, then
 * zero__fp8_update), and its state for checkpoints. Training forwards and backwards record the
 * amax; eval-mode forwards (zero__gpt_set_eval) do not. */
zero_fp8_t *zero__gpt_fp8(zero_gpt_t *gpt);

/* Bytes of activation memory allocated at init. */
size_t zero__gpt_activation_bytes(const zero_gpt_t *gpt);
const zero_gpt_config_t *zero__gpt_config(const zero_gpt_t *gpt);

/* The model's tensor names in a safetensors file (Hugging Face GPT-2: wte.weight, wpe.weight,
 * h.N.ln_1.weight, h.N.attn.c_attn.weight in Conv1D [in, out] layout, ..., ln_f.bias), for
 * zero_ckpt_export_safetensors and zero_ckpt_import_safetensors. Static: never freed. */
const zero_ckpt_name_map_t *zero__gpt_names(void);
/* The same names under "transformer.", as GPT2LMHeadModel.save_pretrained writes them. */
const zero_ckpt_name_map_t *zero__gpt_names_transformer(void);

/* The name map of the GPT-2 safetensors file at path: zero__gpt_names when it holds wte.weight,
 * zero__gpt_names_transformer when it holds transformer.wte.weight (else zero__gpt_names, whose
 * import then names the missing tensor). A tensor lm_head.weight there must hold the token
 * embedding's values (GPT-2 ties the two, and so does zero's GPT): ZERO_ERR_MISMATCH naming the
 * file and both tensors otherwise; ZERO_ERR_IO / ZERO_ERR_FORMAT for an unreadable file. */
zero_status_t zero__gpt_names_of_file(const char *path, const zero_ckpt_name_map_t **names);

#endif /* ZERO_MODEL_GPT_H */
