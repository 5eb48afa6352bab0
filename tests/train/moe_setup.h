/* moe_setup.h — the tiny MoE-GPT the MoE trainer tests share (test_train_moe, test_train_moe_ep):
 * 3 layers of width 32, layer 1 MoE (4 experts, top-2, capacity factor 1 so that tokens are
 * dropped, one shared expert, aux and z losses on), micro-batch 2 of 16 tokens, 2 thread ranks,
 * 2 steps on the built-in corpus; and a run of it through the trainer in this process. */
#ifndef ZERO_TESTS_TRAIN_MOE_SETUP_H
#define ZERO_TESTS_TRAIN_MOE_SETUP_H

#include "harness.h"
#include "zero/zero.h"

#include <stdio.h>

#define E 4
#define TOPK 2
#define SEQ 16
#define MICRO 2

static const char *const base[] = {"model.layers",
                                   "3",
                                   "model.dim",
                                   "32",
                                   "model.heads",
                                   "2",
                                   "model.seq",
                                   "16",
                                   "train_micro_batch_size_per_gpu",
                                   "2",
                                   "train.ranks",
                                   "2",
                                   "train.steps",
                                   "2",
                                   "train.samples",
                                   "0",
                                   "train.eval_batches",
                                   "1",
                                   "train.eval_interval",
                                   "0",
                                   "model.moe.experts",
                                   "4",
                                   "model.moe.top_k",
                                   "2",
                                   "model.moe.every",
                                   "2",
                                   "model.moe.capacity_factor",
                                   "1",
                                   "model.moe.min_capacity",
                                   "0",
                                   "model.moe.shared_experts",
                                   "1",
                                   "model.moe.z_loss_coef",
                                   "0.001",
                                   "data.builtin_bytes",
                                   "65536",
                                   NULL};

/* Run with the base settings then `sets` (key/value pairs, NULL-terminated) and the given io.
 * Returns the status; rep is filled on success (free it). */
static inline zero_status_t train_io(const char *const *sets, const zero_train_io_t *io,
                                     zero_train_report_t *rep) {
    return train_pairs(base, sets, io, rep);
}

/* The same with output to out (may be NULL). */
static inline zero_status_t train(const char *const *sets, FILE *out, zero_train_report_t *rep) {
    zero_train_io_t io = {.out = out};
    return train_io(sets, &io, rep);
}

#endif /* ZERO_TESTS_TRAIN_MOE_SETUP_H */
