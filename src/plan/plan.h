/* plan.h — `zero plan` (internal API): every way to run a training config on a given machine
 * (ZeRO stage 0-3, offload none / optimizer / optimizer + parameters to NVMe, ZeRO++ on or off,
 * activation checkpointing on or off, micro-batch), each with its per-rank memory by category,
 * disk, bytes on the wire per step (inside a node and between nodes) and an estimated step time
 * from measured machine figures; which fit and which is fastest.
 *
 * Memory is the engine's and the model's own estimate (zero__train_process_estimate: the padded
 * layout, buffers and pools, activations, the process's overhead), which the ZeRO paper's
 * model-state formulas (zero__plan_paper_bytes) underlie; the traffic and the time are closed
 * forms of this file's (docs/plan.md states each assumption). Nothing is allocated at model
 * size and nothing runs: a 10T-parameter model over thousands of ranks plans in milliseconds.
 *
 * Not here: running candidates (src/plan/tune.h), the command line (src/cli/plan.c).
 */
#ifndef ZERO_PLAN_PLAN_H
#define ZERO_PLAN_PLAN_H

#include "train/config.h"

#include <stdint.h>

/* The ZeRO paper's per-rank model-state bytes (Sec. 3.1, Fig. 1): psi parameters with 2-byte
 * parameters and gradients and K bytes of optimizer state per parameter over n ranks: stage 0
 * (2 + 2 + K) psi, 1: 4 psi + K psi / n, 2: 2 psi + (2 + K) psi / n, 3: (2 + 2 + K) psi / n.
 * Doubles: exact to 2^53 bytes, enough for any model here. Stage outside 0-3: 0. */
double zero__plan_paper_bytes(double psi, double K, double n, int stage);

/* The machine figures the time model uses, for one node (this machine when measured). */
typedef struct zero_plan_calibration {
    double gemm_fp32_flops;    /* FLOP/s of a large fp32 GEMM on all the node's threads */
    double gemm_bf16_flops;    /* the same in bf16 */
    double memory_bytes_per_s; /* bytes copied per second (memcpy), the node's */
    double disk_read_bytes_per_s, disk_write_bytes_per_s; /* O_DIRECT sequential, the node's */
    double inter_link_bytes_per_s; /* a node's link to the others (not measurable alone) */
    int threads;                   /* threads the figures were measured with */
    int measured;                  /* 0: the documented defaults */
    char date[32];                 /* when measured (UTC, ISO 8601), "" for the defaults */
} zero_plan_calibration_t;

/* The documented default figures (docs/plan.md): a 2-core machine of the project's kind. */
void zero__plan_calibration_default(zero_plan_calibration_t *cal);
/* The default calibration file: $ZERO_CALIBRATION, else $XDG_CACHE_HOME/zero/calibration.json,
 * else $HOME/.cache/zero/calibration.json. Writes into buf (n bytes); returns buf. */
const char *zero__plan_calibration_path(char *buf, size_t n);
/* Read a calibration file. ZERO_ERR_IO when there is none (the caller then uses the defaults
 * with a warning); ZERO_ERR_CONFIG naming the file (and key) for one that cannot be read or
 * holds a bad value. */
zero_status_t zero__plan_calibration_load(const char *path, zero_plan_calibration_t *cal);
/* Write one, creating its directory. ZERO_ERR_IO naming the path on failure. */
zero_status_t zero__plan_calibration_save(const char *path, const zero_plan_calibration_t *cal);
/* Time this machine: GEMM (fp32, bf16) on `threads` threads, memcpy, and O_DIRECT write and
 * read of a file of `disk_bytes` under dir (deleted at once). A few seconds. */
zero_status_t zero__plan_calibrate(int threads, const char *dir, size_t disk_bytes,
                                   zero_plan_calibration_t *cal);

/* The machine to plan for. */
typedef struct zero_plan_machine {
    int world;             /* ranks */
    int ranks_per_node;    /* ranks sharing a node's RAM, disk, cores and link */
    int ranks_per_process; /* 1: one process per rank (MPI); world: thread ranks of one process */
    uint64_t ram_bytes;    /* per node */
    uint64_t disk_bytes;   /* per node, for swap files */
    int threads;           /* compute threads per rank (the activations' scratch depends on it) */
} zero_plan_machine_t;

typedef enum zero_plan_offload {
    ZERO_PLAN_OFFLOAD_NONE,   /* everything in RAM */
    ZERO_PLAN_OFFLOAD_OPTIM,  /* offload_optimizer nvme */
    ZERO_PLAN_OFFLOAD_PARAMS, /* offload_optimizer and offload_param nvme (stage 3) */
    ZERO_PLAN_OFFLOAD_COUNT
} zero_plan_offload_t;
const char *zero__plan_offload_name(zero_plan_offload_t o);

/* RAM of one rank by category. */
typedef enum zero_plan_ram {
    ZERO_PLAN_RAM_PARAMS,      /* parameters (and hpZ's secondary shards) */
    ZERO_PLAN_RAM_GRADS,       /* gradient buffers and accumulators, the backward's pool */
    ZERO_PLAN_RAM_OPTIM,       /* fp32 master, Adam m and v; offload: their staging buffers */
    ZERO_PLAN_RAM_ACTIVATIONS, /* the model's activations for one micro-batch */
    ZERO_PLAN_RAM_BUFFERS,     /* reduce buckets, gather pool, scratch, batch, per-rank overhead */
    ZERO_PLAN_RAM_PROGRAM,     /* code, libraries and data, the rank's share of its process's */
    ZERO_PLAN_RAM_COUNT
} zero_plan_ram_t;
const char *zero__plan_ram_name(zero_plan_ram_t c);

/* One way to run the config. */
typedef struct zero_plan_row {
    int stage, offload, zeropp, checkpointing, micro, accum;
    uint64_t ram[ZERO_PLAN_RAM_COUNT];
    uint64_t ram_rank;                /* predicted peak RSS of one rank (sum of ram[]) */
    uint64_t ram_process;             /* of a process of ranks_per_process ranks */
    uint64_t ram_node;                /* of a node's ranks */
    uint64_t disk_optim, disk_params; /* swap files of one rank: optimizer states; parameters and
                                         their gradient accumulators */
    uint64_t disk_node;
    uint64_t model_states; /* of ram[]: the paper's three (parameters, gradients, optimizer states
                              kept between steps; the working pools and buffers apart) */
    double paper_bytes;    /* the paper's model states for this stage (K = 12, 2 bytes) */
    double wire_intra, wire_inter; /* bytes one rank sends per step, inside / between nodes */
    double t_compute, t_comm, t_optim, t_disk, t_step; /* seconds per step */
    double tokens_per_s;                               /* of the whole job */
    int fits_ram, fits_disk;
} zero_plan_row_t;

typedef struct zero_plan {
    zero_plan_row_t *rows; /* owned */
    int count;
    int best;     /* the fastest row that fits (-1: none) */
    int smallest; /* the row with the least RAM per node (-1: no rows) */
    double params, active_params, flops_per_token;
    int global_batch; /* sequences per step */
    zero_dtype_t dtype;
} zero_plan_t;

/* Plan cfg (a loaded config; its stage, offloads, ZeRO++ keys, checkpointing and micro-batch are
 * what the rows vary, its global batch train_batch_size, or micro x accumulation x world when
 * unset) on machine m with figures cal. Bad input returns ZERO_ERR_CONFIG with a sentence naming
 * what to change (the model's shape, a world size that does not divide the batch, ranks per node
 * that do not divide the world). A plan where nothing fits is not an error: best = -1. Free with
 * zero__plan_free. */
zero_status_t zero__plan_run(const zero_train_config_t *cfg, const zero_plan_machine_t *m,
                             const zero_plan_calibration_t *cal, zero_plan_t *out);
void zero__plan_free(zero_plan_t *plan);

/* The micro-batches a plan tries for a per-rank batch: the powers of two that divide it, and the
 * batch itself, ascending; at most max of them. Returns how many. */
int zero__plan_micro_list(int per_rank, int *out, int max);

/* The time model's assumptions, one sentence each (NULL-terminated), printed with every plan. */
extern const char *const zero__plan_assumptions[];

#endif /* ZERO_PLAN_PLAN_H */
