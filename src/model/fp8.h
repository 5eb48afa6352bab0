/* fp8.h — FP8 compute of the GPT's linear layers (internal API, fp8.c): the configuration, the
 * scaling state of the delayed recipe, and the quantize-dequantize of one GEMM input.
 *
 * Which GEMMs: every block's qkv, attention projection, fc and fc projection (forward: X and W;
 * backward: dY, and X and W as the forward quantized them). Embeddings, the LM head, LayerNorm,
 * the attention softmax and the loss stay in the compute dtype (DeepSeek-V3's and Transformer
 * Engine's split). Formats: X and W in E4M3; dY in E5M2 ("hybrid") or E4M3 ("e4m3"). The GEMMs
 * run on the dequantized values in the compute dtype (a CPU without FP8 hardware).
 *
 * Recipes (lowbit-notes.md 2.2, 2.3):
 *   delayed: one scale per tensor (per layer, linear and role), Transformer Engine's delayed
 *     scaling: the scales in force were made from the amax history of the earlier steps; this
 *     step's amax (max over its training forwards and backwards, then over the ranks) enters the
 *     history at zero__fp8_update. Every rank holds the same scales once the caller reduces the
 *     amaxes (MAX) over all ranks between the backward and the update.
 *   blockwise: DeepSeek-V3's scales from the current values, nothing kept: X and dY one scale
 *     per 1 x 128 tile (a row's 128 input channels), W one per 128 x 128 block.
 *
 * Threading: a state belongs to one model (one rank); calls are not concurrent.
 */
#ifndef ZERO_MODEL_FP8_H
#define ZERO_MODEL_FP8_H

#include "kernels/fp8_qdq.h"
#include "zero/core.h"

#include <stddef.h>

typedef enum { ZERO_FP8_DELAYED, ZERO_FP8_BLOCKWISE, ZERO_FP8_RECIPE_COUNT } zero_fp8_recipe_t;

typedef struct zero_fp8_config {
    int enabled;     /* 0: every GEMM in the compute dtype (the default) */
    int hybrid;      /* 1: dY in E5M2 ("hybrid"); 0: E4M3 ("e4m3") */
    int recipe;      /* zero_fp8_recipe_t */
    int margin;      /* delayed: scale = (FP8_MAX / amax) / 2^margin, >= 0 */
    int history_len; /* delayed: amax history length, >= 1 */
    /* fp8.weight_gather: the four linear weights of every block are flagged ZERO_TENSOR_FP8, so
     * the engine (params.fp8_weights) keeps them on the E4M3 grid and gathers them in 1 byte */
    int weight_gather;
} zero_fp8_config_t;

/* "delayed" / "blockwise" */
const char *zero__fp8_recipe_name(int recipe);

/* The GEMM inputs of one linear layer. */
typedef enum { ZERO_FP8_X, ZERO_FP8_W, ZERO_FP8_DY, ZERO_FP8_ROLE_COUNT } zero_fp8_role_t;
/* The quantized linear layers per block: qkv, attention projection, fc, fc projection. */
enum { ZERO_FP8_LINEARS = 4 };

typedef struct zero_fp8 zero_fp8_t;

/* Bytes of scaling state for `layers` blocks (delayed: per tensor a scale, this step's amax and
 * history_len history slots, fp32; blockwise or disabled: 0). */
size_t zero__fp8_state_bytes(const zero_fp8_config_t *cfg, int layers);

/* A state for `layers` blocks; its scaling arrays are allocated from mem (borrowed, may be NULL)
 * under ZERO_MEM_OTHER. Scales start at 1 and histories at 0, as TE's. *out = NULL when fp8 is
 * off. */
zero_status_t zero__fp8_init(zero_fp8_t **out, const zero_fp8_config_t *cfg, int layers,
                             zero_mem_t *mem);
void zero__fp8_free(zero_fp8_t *s);

/* out = the quantized-dequantized x (rows, cols) of dt, GEMM input `role` of linear `linear` of
 * block `layer`. record (delayed): take x's amax into this step's amax of that tensor. */
void zero__fp8_input(zero_fp8_t *s, void *out, const void *x, zero_dtype_t dt, size_t rows,
                     size_t cols, int layer, int linear, zero_fp8_role_t role, int record,
                     int threads);

/* Delayed recipe: this step's amax vector (the caller reduces it with MAX over the ranks that
 * share the model, in place) and its length; NULL and 0 otherwise. */
float *zero__fp8_step_amax(zero_fp8_t *s, size_t *count);
/* Delayed recipe: TE's update of every tensor from this step's amax (zero__fp8_delayed_update),
 * then the step's amax restarts at 0. Nothing otherwise. */
void zero__fp8_update(zero_fp8_t *s);

/* The state a resume needs (delayed: every tensor's scale, then its history; nothing
 * otherwise): its float count, a copy out, and a copy in (ZERO_ERR_MISMATCH when count differs,
 * naming both). */
size_t zero__fp8_saved_count(const zero_fp8_t *s);
void zero__fp8_save(const zero_fp8_t *s, float *out);
zero_status_t zero__fp8_load(zero_fp8_t *s, const float *in, size_t count);

#endif /* ZERO_MODEL_FP8_H */
