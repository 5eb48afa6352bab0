/* tune.h — `zero tune` (internal API): the search space of DeepSpeed's autotuner over a base
 * config (ZeRO stage, micro-batch and gradient accumulation at a fixed global batch; without
 * autotuning.fast also offload, reduce bucket, stage-3 prefetch, overlap_comm, compute threads
 * per rank and ranks per process), each point priced by `zero plan` (fits the machine or not,
 * estimated step time), and the order a tuner runs them in.
 *
 * Not here: running trials and reading their reports (src/cli/tune.c).
 */
#ifndef ZERO_PLAN_TUNE_H
#define ZERO_PLAN_TUNE_H

#include "plan/plan.h"

#include <stdint.h>

/* One configuration to try. */
typedef struct zero_tune_point {
    int stage, micro, accum;
    int offload; /* zero_plan_offload_t: NONE, or the base's OPTIM / PARAMS */
    int64_t reduce_bucket_elems, prefetch_bucket_elems;
    int overlap_comm;
    int threads;           /* compute threads per rank */
    int ranks_per_process; /* world: thread ranks of one process; 1: one MPI process per rank */
    /* the planner's verdict */
    int fits;
    double plan_step_s; /* estimated seconds per step */
    uint64_t plan_ram;  /* estimated RAM of the node's ranks */
    uint64_t plan_disk; /* and their swap files */
} zero_tune_point_t;

/* The machine the trials run on. */
typedef struct zero_tune_machine {
    int world;           /* ranks of every trial */
    int cores;           /* compute threads the node has */
    int mpi;             /* 1: trials may run one process per rank (an MPI launcher is given) */
    uint64_t ram_bytes;  /* the node's, for pruning */
    uint64_t disk_bytes; /* for swap files */
} zero_tune_machine_t;

/* Every point of the space for the checked config base on machine m, in grid order (stage
 * outermost), each priced by the planner with figures cal. The global batch is
 * autotuning.max_train_batch_size, else base's train_batch_size; the micro-batches are the
 * autotuning.num_tuning_micro_batch_sizes largest of zero__plan_micro_list's. ZERO_ERR_CONFIG
 * naming the key when the batch does not split over the world. *out is malloc'd. */
zero_status_t zero__tune_space(const zero_train_config_t *base, const zero_tune_machine_t *m,
                               const zero_plan_calibration_t *cal, zero_tune_point_t **out,
                               int *count);

/* base with point p applied (stage, batch triple, offload, buckets, prefetch, overlap, threads,
 * backend): the config a trial runs and `zero tune` writes. */
void zero__tune_apply(const zero_train_config_t *base, const zero_tune_point_t *p, int world,
                      zero_train_config_t *out);

/* The order a tuner runs the points in (indices into pts, pruned points left out): gridsearch the
 * grid's, random a shuffle seeded by seed, model_based the planner's estimated step time,
 * fastest first (ties in grid order; the CLI then picks each next trial with
 * zero__tune_model_next). Returns how many; order holds count entries. */
int zero__tune_order(const char *tuner, const zero_tune_point_t *pts, int count, uint64_t seed,
                     int *order);

/* model_based's estimate after some trials: each point's planned step time scaled by the mean
 * ratio measured / planned of the successful trials at its stage, or, when none ran at its
 * stage, of all of them (1 before any): the planner's order, corrected where it was wrong.
 * measured_s[i] > 0 for the successful trials, 0 for the rest. Writes est[0..count). */
void zero__tune_model_estimate(const zero_tune_point_t *pts, int count, const double *measured_s,
                               double *est);

/* model_based's next trial among left[0..nleft) (point indices, in the planner's order): while
 * a stage among them has not run (ran[i] != 0: point i ran, well or not), the smallest estimate
 * among the points of such stages — the planner's step times differ least reliably across stages
 * (communication), so each stage is measured once before the estimates alone decide — then the
 * smallest estimate of all. Ties: the earlier in left. Returns a position in left. */
int zero__tune_model_next(const zero_tune_point_t *pts, int count, const double *measured_s,
                          const int *ran, const int *left, int nleft);

#endif /* ZERO_PLAN_TUNE_H */
