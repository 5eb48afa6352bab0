/* moe.h — Mixture-of-Experts routing kernels (moe.c): the top-k router with capacity and token
 * dropping, its load-balancing and z losses, and the dispatch / combine between token-major
 * activations and an expert-major buffer, each with its backward. fp32.
 *
 * What it is not: no expert computation (the experts are ordinary linear/GELU layers run on
 * the (E, C, dim) buffer), no config keys, no communication (expert parallelism's all-to-all
 * would move the same buffer between ranks).
 *
 * Routing (Switch Transformer for k = 1, GShard for k = 2; DeepSpeed deepspeed/moe/sharded_moe.py
 * top1gating / top2gating, without their random token selection and noise):
 * - probs = softmax(logits) per token. The k experts of a token are its k largest
 *   probabilities, ties going to the lowest expert index.
 * - gates: k = 1 uses the raw probability p[e1] (Switch). k = 2 renormalises the two chosen
 *   probabilities to sum 1, g_c = p[e_c] / (p[e1] + p[e2]), BEFORE capacity is applied (the GShard
 *   paper's order; DeepSpeed renormalises over the choices that survived dropping instead, so a
 *   token whose second choice was dropped gets gate 1 there and p1 / (p1 + p2) here).
 * - capacity C slots per expert. Slots are handed out choice by choice, token by token: the first
 *   choices of all tokens in token order, then the second choices (GShard). A choice whose expert
 *   is full is dropped (slot -1): it contributes nothing to the combine and receives no gradient
 *   from it. No dropping = a capacity of at least T (zero__moe_capacity with drop_tokens 0).
 * - aux loss (Switch): E * sum_e f_e P_e, f_e the fraction of tokens whose FIRST choice is e
 *   (before dropping, as DeepSpeed), P_e the mean over tokens of probs[:, e]. f is a constant
 *   for the backward (it is a count).
 * - z loss (ST-MoE): mean over tokens of logsumexp(logits[t])^2.
 * The choice of experts is piecewise constant, so the backward treats indices and slots as
 * constants; gradients reach the logits through the gates, P_e and the logsumexp.
 *
 * Every pointer is borrowed for the duration of the call. Single-threaded: routing is O(T E)
 * and dispatch / combine O(T k dim), small beside the experts' matmuls. No global state.
 */
#ifndef ZERO_KERNELS_MOE_H
#define ZERO_KERNELS_MOE_H

#include "zero/core.h"

#include <stddef.h>
#include <stdint.h>

/* Slots per expert: max(min_capacity, ceil(capacity_factor * T * k / E)), or max(T, 1) when
 * drop_tokens is 0 (every token fits: a token picks an expert at most once). Returns
 * ZERO_ERR_INVALID_ARG (message naming the value) for E == 0, k not 1 or 2, k > E, or a
 * capacity_factor that is not a finite positive number; *capacity is untouched then. */
zero_status_t zero__moe_capacity(size_t *capacity, size_t T, size_t E, int k,
                                 double capacity_factor, size_t min_capacity, int drop_tokens);

/* Router forward. Overwrites every output.
 * probs:        (T, E)  softmax of logits (kept for the backward)
 * expert_idx:   (T, k)  chosen experts, best first (set for dropped choices too)
 * slot:         (T, k)  slot in that expert's buffer, in [0, capacity), or -1 when dropped
 * gates:        (T, k)  combine weights (see the header comment; set for dropped choices too)
 * expert_count: (E)     kept choices per expert (<= capacity)
 * dropped:      number of dropped (token, choice) pairs; may be NULL
 * aux_loss, z_loss: the two scalar losses (unscaled by their coefficients); either may be NULL
 * logits:       (T, E)
 * Returns ZERO_ERR_INVALID_ARG with a message naming the argument for E == 0, k not 1 or 2,
 * k > E, capacity == 0 or a NULL output; nothing is written then. T == 0 is valid (losses 0). */
zero_status_t zero__moe_router_forward(float *probs, int32_t *expert_idx, int32_t *slot,
                                       float *gates, int32_t *expert_count, size_t *dropped,
                                       float *aux_loss, float *z_loss, const float *logits,
                                       size_t T, size_t E, int k, size_t capacity);

/* Router backward, accumulates (+=) into dlogits (T, E):
 *   d/dlogits of  sum_{t,c} dgates[t,c] gates[t,c] + aux_coef * aux + z_coef * z
 * with expert_idx (and so f_e) held constant. dgates (T, k) may be NULL (no combine gradient);
 * a dropped choice's dgates entry is used as given (the combine backward leaves it 0).
 * logits, probs, expert_idx: as given to / returned by the forward. Arguments are the forward's
 * own outputs, so misuse trips ZERO_ASSERT. */
void zero__moe_router_backward(float *dlogits, const float *dgates, const float *logits,
                               const float *probs, const int32_t *expert_idx, size_t T, size_t E,
                               int k, float aux_coef, float z_coef);

/* Dispatch, overwrites buf: buf[e, s, :] = x[t, :] for each kept choice (t, c) with
 * expert_idx[t,c] = e and slot[t,c] = s; slots nobody holds are zero.
 * buf: (E, C, dim)   x: (T, dim)   expert_idx, slot: (T, k) from the router, C its capacity. */
void zero__moe_dispatch_forward(float *buf, const float *x, const int32_t *expert_idx,
                                const int32_t *slot, size_t T, size_t E, int k, size_t C,
                                size_t dim);

/* Dispatch backward, accumulates: dx[t, :] += dbuf[e, s, :] over t's kept choices.
 * dx: (T, dim)   dbuf: (E, C, dim) */
void zero__moe_dispatch_backward(float *dx, const float *dbuf, const int32_t *expert_idx,
                                 const int32_t *slot, size_t T, size_t E, int k, size_t C,
                                 size_t dim);

/* Combine, overwrites out: out[t, :] = sum over t's kept choices c of gates[t,c] y[e, s, :]
 * (a token with every choice dropped gets zeros; the model's residual carries it).
 * out: (T, dim)   y: (E, C, dim) the experts' outputs   gates, expert_idx, slot: (T, k) */
void zero__moe_combine_forward(float *out, const float *y, const float *gates,
                               const int32_t *expert_idx, const int32_t *slot, size_t T, size_t E,
                               int k, size_t C, size_t dim);

/* Combine backward, accumulates; dy or dgates may be NULL (not needed):
 *   dy[e, s, :]  += gates[t,c] dout[t, :]          for each kept choice
 *   dgates[t,c]  += dot(dout[t, :], y[e, s, :])    for each kept choice (dropped: untouched)
 * dy: (E, C, dim)   dgates: (T, k)   dout: (T, dim)   y: (E, C, dim) */
void zero__moe_combine_backward(float *dy, float *dgates, const float *dout, const float *y,
                                const float *gates, const int32_t *expert_idx, const int32_t *slot,
                                size_t T, size_t E, int k, size_t C, size_t dim);

#endif /* ZERO_KERNELS_MOE_H */
