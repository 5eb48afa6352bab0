/* preflight.h — checks before training starts and during it (internal API): the ranks of an MPI
 * job agree on the configuration and the data; the replicated parameters stay the same bits; the
 * run's memory estimate fits what the machine has (train/preflight.c, train/memcheck.c).
 */
#ifndef ZERO_TRAIN_PREFLIGHT_H
#define ZERO_TRAIN_PREFLIGHT_H

#include "train/config.h"
#include "train/data.h"
#include "zero/engine.h"

/* Every rank of comm compares its effective configuration (each key of the table but those that
 * may differ per rank: data.path, train.threads, train.backend, steps_per_print,
 * train.memory_check, train.timeout_s) and its data (token count and a hash of the tokens) with
 * rank 0's. On a difference every rank returns ZERO_ERR_CONFIG naming the first differing key, the
 * first rank that differs in it and both values ("rank 1 has seed = 2, rank 0 has seed = 1"). NULL
 * comm or one rank: ZERO_OK. Collective. */
zero_status_t zero__train_agree(const zero_train_config_t *cfg, const zero_dataset_t *data,
                                zero_comm_t *comm);

/* After optimizer step `step` (1-based): zero_engine_check_replicas every
 * train.replica_check_every steps and after the last step (last != 0); ZERO_OK without a check
 * otherwise. Collective. */
zero_status_t zero__train_replica_check(const zero_train_config_t *cfg, zero_engine_t *eng,
                                        int64_t step, int last);

/* Before anything is allocated: the memory this process will need for cfg over `world` ranks, of
 * which `local` run in this process (thread ranks) or on this machine (mpi != 0: one per
 * process), with `threads` compute threads each: zero__gpt_memory_estimate per rank, plus each
 * rank's batch buffers and fixed overhead, the data and the program. Compared with MemAvailable
 * and the tightest memory cgroup limit (v1 memory.limit_in_bytes, v2 memory.max, walking up the
 * hierarchy); a run that does not fit fails with ZERO_ERR_OUT_OF_MEMORY naming the estimate by
 * category, the memory available and the changes that would fit, each with its estimate
 * (a higher stage, bf16, activation checkpointing, a smaller micro-batch, more MPI ranks or
 * fewer thread ranks). train.memory_check = false turns the refusal into a warning. out (may
 * be NULL): a line with the estimate when it exceeds 1 GiB, before the long allocation. */
zero_status_t zero__train_memory_check(const zero_train_config_t *cfg, int world, int local,
                                       int threads, int mpi, FILE *out);

/* The per-rank part of that estimate (engine and activations, as zero__train_memory_check
 * uses it) for cfg on `world` ranks: for tests and planning. */
zero_status_t zero__train_memory_estimate(const zero_train_config_t *cfg, int world, int threads,
                                          zero_memory_estimate_t *out);

/* What one process of a run needs, the memory check's figures: its ranks' engine and
 * activations, batch buffers and fixed overhead, the data and the program itself. */
typedef struct zero_train_process_estimate {
    zero_memory_estimate_t rank; /* one rank: engine + activations */
    uint64_t per_rank;           /* rank + batch buffers + per-rank overhead */
    uint64_t data;               /* the data set as loaded (shared by the process's ranks) */
    uint64_t program;            /* code, libraries (and the MPI library's own, mpi != 0) */
    uint64_t process;            /* local x per_rank + data + program: the peak RSS expected */
} zero_train_process_estimate_t;

/* That estimate for cfg (checked) over `world` ranks, `local` of them in this process, as
 * zero__train_memory_check computes it (mpi != 0: one process per rank under an MPI library).
 * For planning (src/plan) and tests. */
zero_status_t zero__train_process_estimate(const zero_train_config_t *cfg, int world, int local,
                                           int threads, int mpi,
                                           zero_train_process_estimate_t *out);

#endif /* ZERO_TRAIN_PREFLIGHT_H */
