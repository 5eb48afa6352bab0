/* zero/generate.h — text generation from a trained GPT with a KV cache (docs/inference.md).
 *
 * A generator loads the weights of a GPT-2-shaped model, either from a zero checkpoint saved at
 * any world size (the manifest gives the model's shape) or from a safetensors file with Hugging
 * Face GPT-2 names (zero convert's output, or a file zero did not write), keeps them as fp32,
 * bf16, int8 or int4, in RAM or (the blocks) in a file streamed layer by layer, and runs
 * `batch` sequences side by side: zero_generator_prefill appends a prompt, zero_generator_step
 * one token per sequence; each returns the next-token logits. Every position's keys and values
 * stay in a cache of max_seq positions per sequence, so a step costs one pass over the weights
 * plus the cache, not a forward over the whole sequence. The kernels
 * are the training forward's, so the logits match a full recomputation (docs/inference.md).
 * zero_sample draws a token from logits.
 *
 * Over several ranks (params.comm), each rank holds 1/N of the blocks' weights and every layer
 * is all-gathered just before it runs, the next one while it runs, as ZeRO stage 3 gathers
 * training's parameters; every rank makes the same calls with the same tokens and gets the
 * same logits, bitwise those of one rank.
 *
 * Not here: tokenizers (the trainer's byte-level models take bytes; a larger vocabulary takes
 * token ids), MoE models (refused, naming the key).
 *
 * Ownership: paths and params are borrowed for the call; logits pointers stay valid until the
 * next prefill, step, reset or free. Threading: a generator is used by one thread at a time;
 * different generators are independent.
 */
#ifndef ZERO_GENERATE_H
#define ZERO_GENERATE_H

#include "zero/comm.h"
#include "zero/core.h"

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct zero_generator_params {
    int batch;   /* sequences decoded side by side (>= 1) */
    int max_seq; /* positions the KV cache holds per sequence, prompt included; 0 or more than
                    the model's context (its wpe rows): the context */
    int threads; /* cores the kernels may use (>= 1) */
    /* Attention heads, for a safetensors file: 0 takes them from the file's zero metadata
     * (zero convert writes the model's shape), then from n_head of a config.json beside the
     * file (Hugging Face), then dim / 64 (GPT-2's head size). Checked against a checkpoint's
     * manifest when > 0. */
    int heads;
    /* Weights, activations and KV cache: ZERO_DTYPE_FP32, or ZERO_DTYPE_BF16 (weights rounded to
     * nearest even on load; the training model's 16-bit kernels, fp32 accumulation, fp32
     * logits): half the bytes a step reads. */
    zero_dtype_t dtype;
    /* 0: every weight in dtype. 8 or 4: the weight matrices (attention qkv and projection, MLP
     * fc and projection, wte: the tied head and the embedding rows) stored as int8 or int4,
     * group-wise symmetric (ZeRO-Inference's scheme): each row's input features in groups of
     * group_size, one fp32 scale per group, s = max|w| / 127 (int4: / 7), q = round(w / s).
     * The matmuls convert the weights in registers (never the whole matrix); activations stay
     * fp32 (dtype must be fp32). About 1 + 4 / group_size (int4: 0.5 + 4 / group_size) bytes per
     * weight. */
    int weight_bits;
    int group_size; /* elements per scale: even, 2..1024 (64, DeepSpeed's default) */
    /* NULL: every weight in RAM. A directory: ZeRO-Inference's offload_param nvme. The blocks'
     * weights (as stored: dtype or quantized) are written at init to a scratch file there
     * (deleted by zero_generator_free) and read back layer by layer just in time, through
     * buffer_count layer buffers: the next buffer_count - 1 layers are read while one computes,
     * so about buffer_count layers are resident (embeddings, wpe and the final LayerNorm stay in
     * RAM). The logits are bitwise those of the same generator in RAM. */
    const char *nvme_path;
    int buffer_count; /* layer buffers with nvme_path, >= 2 (4) */
    /* NULL or one rank: every weight here. More ranks (threads or MPI; borrowed until
     * zero_generator_free): this rank keeps its 1/N slice of each block's weights (as stored:
     * dtype or quantized), and two layer buffers, one computing while the next is all-gathered
     * (the embeddings, wpe and the final LayerNorm stay whole on every rank). Not with
     * nvme_path. Every rank calls init, prefill, step, reset and free in the same order. */
    zero_comm_t *comm;
} zero_generator_params_t;

/* Defaults: batch 1, max_seq 0 (the context), 1 thread, heads 0 (from the file), fp32, weights
 * not quantized (weight_bits 0, group_size 64), in RAM (nvme_path NULL, buffer_count 4), one rank
 * (comm NULL). */
ZERO_API zero_generator_params_t zero_generator_params_default(void);

typedef struct zero_generator_info {
    int layers, heads, dim, vocab, seq; /* the model; seq: its context length */
    int batch, max_seq;                 /* as loaded */
    size_t param_count;                 /* parameters (the tied head counted once) */
    zero_dtype_t dtype;                 /* of the weights, activations and cache */
    int weight_bits, group_size;        /* quantized matrices: 8 or 4 and the group; else 0 */
    size_t weight_bytes;   /* the weights as stored (quantized rows and scales, padding included) */
    size_t kv_cache_bytes; /* 2 x layers x batch x max_seq x dim x dtype size */
    size_t activation_bytes; /* working buffers of a forward */
    const char *format;      /* "checkpoint" or "safetensors" */
    /* Of weight_bytes, in RAM: all of them, or with nvme_path the embeddings, the final
     * LayerNorm and buffer_count layer buffers; sharded, those (two buffers) and this rank's
     * slices of the blocks. */
    size_t resident_weight_bytes;
    const char *offload;    /* "none" or "nvme" */
    int buffer_count;       /* nvme: layer buffers in use (at most the layers); else 0 */
    const char *io_engine;  /* nvme: "io_uring" or "threads"; else NULL */
    uint64_t io_bytes_read; /* nvme: bytes read from the weights file so far (after each call) */
    double io_wait_s;       /* nvme: seconds the forward waited for those reads */
    int ranks;              /* the weights sharded over this many ranks (1: not sharded) */
    uint64_t gather_bytes;  /* sharded: bytes received from the other ranks so far */
    double gather_wait_s;   /* sharded: seconds the forward waited for the all-gathers */
} zero_generator_info_t;

typedef struct zero_generator zero_generator_t;

/* Load a model. path: a checkpoint directory, a save directory (its `latest` is followed) or
 * SAVE_DIR/latest; or a .safetensors file (any other file is read as one). Errors name
 * the file and what was expected: ZERO_ERR_IO (missing, unreadable), ZERO_ERR_FORMAT (truncated,
 * damaged, not a GPT-2 layout), ZERO_ERR_MISMATCH (a tensor missing or of another shape than the
 * model's), ZERO_ERR_UNSUPPORTED (an MoE model), ZERO_ERR_CONFIG (bad params or heads). *out:
 * zero_generator_free. */
ZERO_API zero_status_t zero_generator_init(zero_generator_t **out, const char *path,
                                           const zero_generator_params_t *params);
/* NULL is accepted. */
ZERO_API void zero_generator_free(zero_generator_t *gen);
/* The model and the memory it holds (borrowed, valid until zero_generator_free). */
ZERO_API const zero_generator_info_t *zero_generator_info(const zero_generator_t *gen);
/* Tokens each sequence holds so far (0 after init and reset). */
ZERO_API int zero_generator_position(const zero_generator_t *gen);
/* Forget every sequence (position 0); the buffers stay. */
ZERO_API void zero_generator_reset(zero_generator_t *gen);

/* Append T tokens to every sequence: tokens (batch, T), row b for sequence b. Runs them through
 * the model in chunks, storing their keys and values, and sets *logits (may be NULL) to the
 * (batch, vocab) fp32 logits of the position after the last one. With nvme_path, a failed or
 * damaged read of the weights file is ZERO_ERR_IO or ZERO_ERR_FORMAT naming the file and the
 * offset; the sequences are then lost (every later call fails). ZERO_ERR_INVALID_ARG, with
 * nothing changed, when T < 1 (an empty prompt), when position + T exceeds max_seq (naming both
 * and the model's context) or when a token is outside [0, vocab) (naming it, its sequence and
 * position). */
ZERO_API zero_status_t zero_generator_prefill(zero_generator_t *gen, const int32_t *tokens, int T,
                                              const float **logits);
/* zero_generator_prefill with T = 1: tokens (batch), one per sequence. */
ZERO_API zero_status_t zero_generator_step(zero_generator_t *gen, const int32_t *tokens,
                                           const float **logits);

/* ------------------------------------------------------------------------------ sampling */

/* How zero_sample picks a token, in Hugging Face's order: temperature, then top-k, then top-p. */
typedef struct zero_sample_params {
    int greedy;        /* 1: the arg-max (the first maximal index), the rest is ignored */
    float temperature; /* > 0: softmax(logits / temperature); <= 0 means greedy */
    int top_k;         /* > 0: keep the logits >= the k-th largest (ties kept); 0: all */
    float top_p;       /* (0, 1]: then keep the smallest set of likeliest tokens whose
                          probability reaches top_p (the likeliest always kept); 1: all */
} zero_sample_params_t;

/* Defaults: not greedy, temperature 1, top_k 0, top_p 1 (plain sampling). */
ZERO_API zero_sample_params_t zero_sample_params_default(void);

/* Draw a token from logits (vocab) into *token. rng: the caller's stream state (any value;
 * advanced by one draw unless greedy), so a seed reproduces the draws. ZERO_ERR_INVALID_ARG for
 * top_p outside (0, 1], a negative top_k or vocab < 1; ZERO_ERR_OUT_OF_MEMORY when top_p < 1
 * cannot get its vocab-sized scratch. Thread-safe. */
ZERO_API zero_status_t zero_sample(const float *logits, int vocab, const zero_sample_params_t *p,
                                   uint64_t *rng, int32_t *token);

#ifdef __cplusplus
}
#endif
#endif /* ZERO_GENERATE_H */
