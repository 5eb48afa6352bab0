/* moe_mlp.h — the Mixture-of-Experts MLP of a GPT block (internal API): a top-k router with
 * capacity (kernels/moe.h), E routed experts and S always-on shared experts, each a GELU MLP
 * C -> H -> C (H = moe.hidden, default the dense MLP's 4C). out = sum over a token's kept choices
 * of gate * expert(x) + sum over the shared experts of shared(x) (weight 1, DeepSeekMoE).
 *
 * Not here: parameter memory (the engine's units: gpt.c declares the router and the shared
 * experts in the block's unit and the routed experts in their own unit "block.<l>.experts"), the
 * residual and LayerNorm around it.
 *
 * Expert parallelism (ep_size = ep > 1, DeepSpeed's layout): the ranks form blocks of ep
 * consecutive ranks, and rank p of a block (its rank in the block's communicator) holds experts
 * [p E/ep, (p+1) E/ep). Each rank routes its own tokens over all E experts, as at ep 1 (capacity
 * from its token count). Then, per forward, over the block's communicator: an all-to-all of the
 * counts (to each peer: how many rows each of its experts gets, and the capacity), an
 * all-to-allv of the filled rows (slots 0 .. count_e - 1 of each expert, in the compute dtype),
 * the experts, and an all-to-allv of their fp32 outputs back; backward sends the output
 * gradients (compute dtype) to the experts and their fp32 input gradients back. The experts run
 * one GEMM per (local expert, source rank) pair over exactly the rows and zero padding that
 * source's ep-1 GEMM of that expert has (expert_rows), so every GEMM sees the same shapes and
 * inputs at every ep and the outputs match bitwise; the weight gradient of source s's rows goes
 * into source slot s of the experts' gradient (zero_engine_set_unit_slots), which the engine sums
 * in world order. Every rank of a block must forward the same number of tokens (checked: the
 * capacities travel with the counts).
 *
 * Compute dtype: x, out, the weights and their gradients are in the model's dtype (fp32, bf16 or
 * fp16); routing, dispatch, combine and the losses run in fp32 (the kernels are fp32), widened
 * and narrowed at the edges. The experts' outputs are written in fp32 by the GEMM (which
 * accumulates in fp32 anyway), so the combine reads them unrounded.
 *
 * Memory: zero__moe_mlp_bytes says what one instance needs for `stored` layers (the per-layer
 * state kept from forward to backward) plus scratch shared by all layers; the caller hands that
 * much memory to zero__moe_mlp_init. Nothing is allocated on the forward/backward path.
 * Threading: one instance belongs to one rank; calls are not concurrent.
 */
#ifndef ZERO_MODEL_MOE_MLP_H
#define ZERO_MODEL_MOE_MLP_H

#include "zero/comm.h"
#include "zero/core.h"

#include <stddef.h>
#include <stdint.h>

typedef struct zero_moe_config {
    int experts;                 /* E; 0: no MoE (the dense model) */
    int top_k;                   /* 1 (Switch) or 2 (GShard) */
    int every;                   /* layer l is MoE when (l + 1) % every == 0 */
    double capacity_factor;      /* training */
    double eval_capacity_factor; /* forwards in eval mode */
    int min_capacity;            /* slots per expert at least */
    int drop_tokens;             /* 0: capacity = tokens, nothing dropped */
    float aux_loss_coef;         /* load-balancing loss weight */
    float z_loss_coef;           /* router z-loss weight */
    int shared_experts;          /* S always-on experts */
    int hidden;                  /* H of every expert; 0: 4 * dim */
    int ep_size;                 /* expert-parallel group size, divides experts */
} zero_moe_config_t;

/* Check the MoE section for a model of width `dim`; ZERO_ERR_CONFIG naming the key
 * ("model.moe.top_k"), the value and what is allowed (ep_size must divide experts; that it
 * divides the world is the trainer's check). experts == 0 passes (no MoE). A capacity cannot
 * come out 0: it is ceil(factor x tokens x k / E) with factor > 0, at least 1 for any token. */
zero_status_t zero__moe_config_check(const zero_moe_config_t *m, int dim);

/* Whether layer l (0-based) has an MoE MLP: (l + 1) % every == 0, so every = 2 makes layers
 * 1, 3, 5, ... MoE (DeepSpeed-Megatron's "every other layer", the first layer dense). */
int zero__moe_is_layer(const zero_moe_config_t *m, int l);
/* H: m->hidden, or 4 * dim when it is 0. */
size_t zero__moe_hidden(const zero_moe_config_t *m, int dim);
/* Slots per expert for `tokens` tokens in training (eval 0) or eval mode; 0 on a bad config. */
size_t zero__moe_capacity_for(const zero_moe_config_t *m, size_t tokens, int eval);

/* Parameter views of one MoE layer, in the compute dtype, [out, in] like every linear.
 * Shared tensors are NULL when S = 0. */
typedef struct zero_moe_weights {
    void *router_w;                      /* (E, C), no bias */
    void *shared_fc_w, *shared_fc_b;     /* (S, H, C), (S, H) */
    void *shared_proj_w, *shared_proj_b; /* (S, C, H), (S, C) */
    void *fc_w, *fc_b, *proj_w, *proj_b; /* experts: (E', H, C), (E', H), (E', C, H), (E', C),
                                            E' = E / ep_size: this rank's experts */
    /* Gradients at ep_size > 1 only: elements from one source slot of the experts' gradient to
     * the next (slot s holds the partial of the block's rank s); 0 otherwise. */
    size_t expert_slot_stride;
} zero_moe_weights_t;

/* Routing statistics of one forward. */
typedef struct zero_moe_layer_stats {
    float aux_loss, z_loss; /* unscaled by their coefficients */
    size_t dropped;         /* (token, choice) pairs that found their expert full */
    size_t capacity;        /* slots per expert used */
} zero_moe_layer_stats_t;

typedef struct zero_moe_mlp zero_moe_mlp_t;

/* Bytes an instance needs: `stored` layers of per-layer state (1 with activation checkpointing,
 * which recomputes a layer's forward before its backward) for up to `tokens` tokens per forward,
 * plus the shared scratch. dt: the compute dtype. */
size_t zero__moe_mlp_bytes(const zero_moe_config_t *m, int dim, size_t tokens, int stored,
                           zero_dtype_t dt);

/* Create an instance over `mem` (borrowed, zero__moe_mlp_bytes of it, 64-byte aligned; it must
 * outlive the instance). ep_comm (borrowed, must outlive the instance): the expert-parallel
 * block's communicator of ep_size ranks, NULL when ep_size is 1. ZERO_ERR_CONFIG for a bad
 * config (zero__moe_config_check), ZERO_ERR_INVALID_ARG for a communicator of another size. */
zero_status_t zero__moe_mlp_init(zero_moe_mlp_t **out, const zero_moe_config_t *m, int dim,
                                 size_t tokens, int stored, zero_dtype_t dt, int threads,
                                 zero_comm_t *ep_comm, void *mem);
void zero__moe_mlp_free(zero_moe_mlp_t *mm);

/* Eval mode (on != 0) uses eval_capacity_factor; training mode capacity_factor. */
void zero__moe_mlp_set_eval(zero_moe_mlp_t *mm, int on);

/* Forward of stored layer `s` (0 .. stored - 1) on x (BT, C), overwriting out (BT, C); both in
 * the compute dtype, not overlapping. counts (E) receives the tokens of this rank each expert
 * kept (may be NULL), stats the losses and drops (may be NULL). ep_size > 1: collective over
 * the block (the all-to-alls); returns their failure, or ZERO_ERR_INVALID_ARG when the block's
 * ranks forward different token counts. */
zero_status_t zero__moe_mlp_forward(zero_moe_mlp_t *mm, int s, const zero_moe_weights_t *w,
                                    void *out, const void *x, size_t BT, int32_t *counts,
                                    zero_moe_layer_stats_t *stats);

/* Backward of the last forward of stored layer `s` (same x): OVERWRITES dx (BT, C) with the
 * gradient of the input, accumulates (+=) the weight gradients into gw (same layout as w; the
 * experts' in their source slots at ep_size > 1), and adds aux_loss_coef * aux + z_loss_coef * z
 * to the loss being differentiated, scaled by loss_scale (fp16's; 1 otherwise). dout (BT, C).
 * ep_size > 1: collective over the block, returns the all-to-alls' failure. */
zero_status_t zero__moe_mlp_backward(zero_moe_mlp_t *mm, int s, const zero_moe_weights_t *w,
                                     const zero_moe_weights_t *gw, void *dx, const void *dout,
                                     const void *x, size_t BT, float loss_scale);

/* Expert parallelism's traffic since the last reset (0 at ep_size 1): *sent, the bytes this
 * rank's all-to-alls sent to other ranks of its block (the communicator's counters), and
 * *theory, the same from the counts: per forward (ep - 1)(E/ep + 1) x 4 bytes of counts, the
 * rows this rank sends to its peers' experts x C x the compute dtype's size, and the rows it
 * received from its peers x C x 4 (their fp32 outputs back); per backward the output gradients
 * of the rows sent (compute dtype) and the input gradients of the rows received (fp32). Rows
 * are the filled slots only: padding never travels. Either pointer may be NULL. */
void zero__moe_mlp_traffic(const zero_moe_mlp_t *mm, uint64_t *sent, uint64_t *theory);
void zero__moe_mlp_traffic_reset(zero_moe_mlp_t *mm);

#endif /* ZERO_MODEL_MOE_MLP_H */
