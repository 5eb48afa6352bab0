/* harness.h — runs a tiny GPT through the engine on N ranks (threads in-process, or one MPI
 * rank of a job) for the engine tests, and collects each rank's fingerprint, weights and report.
 */
#ifndef ZERO_TESTS_ZERO_HARNESS_H
#define ZERO_TESTS_ZERO_HARNESS_H

#include "zero/zero.h"

typedef struct run_cfg {
    int stage, ranks, accum, steps;
    size_t reduce_bucket_bytes;
    int64_t prefetch_elems, persistence_elems, max_live_elems;
    double timeout_s;
    /* Like the trainer: eval_batches forward-only passes (with targets, no backward) before
     * the first step and after every step s with (s + 1) % eval_interval == 0 except the last;
     * 0 = none. They change no weight and fall in the next step's communication window. */
    int eval_batches, eval_interval;
    /* Precision (memset 0: fp32 / fp32). fp16_scale_power > 0 sets fp16.initial_scale_power
     * (the tiny GPT's gradients overflow fp16 at the default 2^16 in the first steps). */
    zero_dtype_t dtype, accum_dtype;
    int fp16_scale_power;
    int no_overlap;           /* 1: overlap_comm off (memset 0: on, the default) */
    zero_dtype_t state_dtype; /* Adam's m and v (memset 0: fp32; ZERO_DTYPE_INT8: 8-bit) */
    int onebit, freeze_step;  /* 1-bit Adam (stage 0) after freeze_step steps (memset 0: off) */
} run_cfg_t;

typedef struct rank_result {
    zero_status_t status;
    char error[768];
    uint64_t fingerprint;
    float *weights; /* stage 0-2: the full unpadded weights in canonical order (malloc) */
    size_t weight_count;
    zero_engine_report_t report;
    float first_loss, last_loss;
    int skipped_steps;
} rank_result_t;

/* A small default: 2 layers, dim 32, 3 steps, small buckets, stage-3 prefetch on. */
run_cfg_t harness_default_cfg(int stage, int ranks, int accum);

/* Run one rank over comm (NULL: one rank). Fills *out. Returns out->status. */
zero_status_t harness_gpt_rank(zero_comm_t *comm, const run_cfg_t *cfg, rank_result_t *out);

/* Run cfg->ranks threads-backend ranks in this process; res has cfg->ranks entries. Returns the
 * first failing status (ZERO_OK if every rank succeeded). */
zero_status_t harness_gpt_threads(const run_cfg_t *cfg, rank_result_t *res);

void harness_result_free(rank_result_t *r);

/* The GPT's shape, for the tests' own theory. */
#define HARNESS_LAYERS 2
#define HARNESS_HEADS 2
#define HARNESS_DIM 32
#define HARNESS_VOCAB 64
#define HARNESS_SEQ 16
#define HARNESS_BATCH 2

#endif /* ZERO_TESTS_ZERO_HARNESS_H */
