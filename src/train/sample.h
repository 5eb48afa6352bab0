/* sample.h — the trainer's samples (internal API): autoregressive generation with a sliding
 * window over the model's context.
 */
#ifndef ZERO_TRAIN_SAMPLE_H
#define ZERO_TRAIN_SAMPLE_H

#include "model/gpt.h"

#include <stdint.h>

/* Extend tokens[0 .. prompt_len) to tokens[0 .. total_len) by sampling (infer/sample.h:
 * softmax(logits / temperature) restricted to the top_k likeliest, top_k <= 0: all; temperature
 * <= 0: the arg-max; rng advanced); each new token sees the last min(len, seq) tokens. The model
 * must have been sized for batch >= 1. */
zero_status_t zero__generate(zero_gpt_t *gpt, int32_t *tokens, int prompt_len, int total_len,
                             float temperature, int top_k, uint64_t *rng);

#endif /* ZERO_TRAIN_SAMPLE_H */
