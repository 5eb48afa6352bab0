/* roofline.h — the time a training step needs at the machine's rates: its GEMMs at the matmul
 * peak plus its memory-bound passes at the memory bandwidth (docs/config.md, "The run report").
 *
 * A lower bound of the model of docs/benchmarks.md's "MFU budget", computed from the model's
 * shapes, not timed: the measured median step over this time is the step's ratio to its
 * roofline, the figure that reads the same on every machine of a kind (MFU moves with the peak
 * alone). Estimates in fp32 elements (4 bytes), whatever the compute dtype: a bf16 run's bound is
 * a little high. Communication between ranks is not counted (the comm tables measure it).
 *
 * Thread safety: pure functions, callable from any thread.
 */
#ifndef ZERO_TRAIN_ROOFLINE_H
#define ZERO_TRAIN_ROOFLINE_H

#include "model/gpt.h"

#include <stddef.h>

typedef struct zero_train_roofline {
    /* one rank's step: `tokens` tokens through the model, one optimizer step over its shard */
    double gemm_flops;       /* flops per token x tokens (zero__gpt_flops_per_token) */
    double activation_bytes; /* the memory-bound passes over the activations */
    double parameter_bytes;  /* AdamW and the gradient norm over the shard, the gradient zeroed
                                and, on more than one rank, read for the reduction */
    double gemm_s, memory_s; /* gemm_flops / peak, bytes / bandwidth */
    double total_s;          /* gemm_s + memory_s */
} zero_train_roofline_t;

/* Activation elements per token the memory-bound passes read and write (forward + backward), for
 * model m: per layer 42 C + 5 NH T, plus 13 C + 4 V (roofline.c itemises the terms), of which the
 * loss's 4 V are fp32 in every compute dtype. */
double zero__train_roofline_activation_elems(const zero_gpt_config_t *m);
/* Their bytes per token when the activations are act_bytes (the compute dtype's size) each. */
double zero__train_roofline_activation_bytes(const zero_gpt_config_t *m, size_t act_bytes);

/* Parameter elements per step read and written outside the GEMMs: 8 per element of the rank's
 * shard (AdamW reads p, g, m, v and writes p, m, v; the gradient norm reads g), 1 per parameter
 * (the gradient zeroed) and, with world > 1, 2 per parameter (the reduction reads the gradient and
 * writes what arrives). */
double zero__train_roofline_parameter_elems(size_t params, size_t shard_params, int world);

/* The roofline of one rank's step: tokens tokens (micro-batch x seq x accumulation), params the
 * model's parameter count, shard_params this rank's shard of the optimizer state, world the rank
 * count, act_bytes the compute dtype's size; peak_flops_per_s this rank's matmul rate (of the
 * GEMMs' dtype) and memory_bytes_per_s the memory traffic rate (bytes read + written per second).
 * Rates <= 0 leave the times 0. */
void zero__train_roofline(const zero_gpt_config_t *m, double tokens, size_t params,
                          size_t shard_params, int world, size_t act_bytes, double peak_flops_per_s,
                          double memory_bytes_per_s, zero_train_roofline_t *out);

/* The median of v[0, n) (sorts v in place); 0 for n == 0. */
double zero__train_median(double *v, size_t n);

#endif
