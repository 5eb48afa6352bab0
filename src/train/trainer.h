/* trainer.h — the training loop behind `zero train` (internal API): data, engine, model,
 * progress, validation, samples and the run report, over one or more ranks — threads of this
 * process (zero_comm_threads_init_all) or the processes of an MPI job.
 *
 * Each rank has its own model, engine and share of every global batch; rank 0 alone writes
 * progress, the metrics log and the report, after gathering the other ranks' figures.
 * Output goes to the FILE the caller passes (the CLI gives stdout); the library never chooses
 * stdout itself. Errors return a status with zero_last_error() set and print nothing.
 */
#ifndef ZERO_TRAIN_TRAINER_H
#define ZERO_TRAIN_TRAINER_H

#include "train/config.h"
#include "train/roofline.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>

/* One rank's figures: fixed-size plain data, so ranks exchange them with one all-gather. */
typedef struct zero_train_rank_report {
    int32_t rank, world, stage, threads;
    uint64_t memory_bytes[ZERO_MEM_CATEGORY_COUNT];        /* live at the end of training */
    uint64_t memory_peak_bytes[ZERO_MEM_CATEGORY_COUNT];   /* peak during the run */
    uint64_t memory_theory_bytes[ZERO_MEM_CATEGORY_COUNT]; /* ARCHITECTURE.md section 3 (0: n/a) */
    uint64_t peak_rss_bytes; /* of the process (shared by the ranks of the threads backend) */
    uint64_t comm_bytes_per_step, comm_theory_bytes_per_step;
    uint64_t comm_inter_node_bytes_per_step, comm_inter_node_theory_bytes_per_step;
    uint64_t comm_sent_bytes_per_step_by_coll[ZERO_COLL_COUNT];
    uint64_t comm_sent_bytes_per_step_by_kind[ZERO_XFER_KIND_COUNT];
    uint64_t comm_theory_bytes_per_step_by_kind[ZERO_XFER_KIND_COUNT];
    uint64_t padded_params;
    /* The ZeRO paper's breakdown (zero_engine_report_t): parameters, gradients, optimizer
     * states; and the transient pools beside them. */
    uint64_t model_state_bytes[3], model_state_theory_bytes[3];
    /* ... of which the stacked (expert) units' share: [1] (zero_engine_report_t's split; [0] the
     * dense units') */
    uint64_t model_state_split_bytes[2][3], model_state_split_theory_bytes[2][3];
    uint64_t grad_pool_bytes, gather_pool_bytes;
    uint64_t swap_disk_bytes; /* offload_optimizer nvme: this rank's swap files */
    uint64_t swap_read_bytes_per_step, swap_written_bytes_per_step; /* their I/O, last step */
    double swap_wait_s_per_step;
    /* Expert parallelism (model.moe.ep_size > 1): the bytes the MoE all-to-alls of the last
     * step's micro-steps sent to other ranks, measured on the block's communicator and in theory
     * from the routed counts (zero__gpt_moe_traffic); 0 otherwise. */
    uint64_t moe_a2a_bytes_per_step, moe_a2a_theory_bytes_per_step;
    double peak_flops_per_s; /* matmul peak this rank measured at start-up (0: not measured) */
    /* fp8 delayed recipe: a hash of this rank's scales and amax histories at the end (equal on
     * every rank: the amax is reduced over all ranks before any scale is made); 0 otherwise */
    uint64_t fp8_state_hash;
} zero_train_rank_report_t;

typedef struct zero_train_report {
    size_t params;
    int steps;       /* steps trained by this invocation */
    int start_step;  /* the step it started from: 0, or a resumed checkpoint's */
    int stop_signal; /* the signal that stopped the run early, after start_step + steps (0: none) */
    int threads;     /* per rank */
    int world, stage, rank;
    const char *backend;     /* "threads" or "mpi" (static) */
    double tokens;           /* trained tokens, all ranks */
    double train_s;          /* seconds in forward/backward/step (not eval, not sampling) */
    double elapsed_s;        /* whole run */
    double tokens_per_s;     /* tokens / train_s */
    double flops_per_token;  /* zero__gpt_flops_per_token */
    double flops_per_s;      /* flops_per_token * tokens_per_s */
    double peak_flops_per_s; /* sum of the ranks' matmul peaks measured at start-up */
    double mfu;              /* flops_per_s / peak_flops_per_s */
    /* where peak_flops_per_s came from (static): "--peak" (train.peak_gflops), "calibration"
     * (`zero plan --calibrate`'s file), "measured" (at start-up); NULL without a peak */
    const char *peak_source;
    /* the dtype of the GEMMs the peak is of (static): "bf16" when the model's GEMMs run bf16
     * operands on a bf16 path (not widening to fp32), else "fp32"; NULL without a peak */
    const char *peak_dtype;
    /* a bf16 run's measured peak: the fp32 one too, the same way (the bf16 / fp32 ratio of the
     * hardware); an fp32 run's, peak_flops_per_s; 0 when not measured (--peak, calibration) */
    double peak_fp32_flops_per_s;
    /* The roofline (roofline.h) of rank 0's step at its share of the peak and at
     * memory_bytes_per_s (bytes read + written per second: twice the rate of a 64 MiB copy on the
     * rank's threads, measured at start-up), and rank 0's median step time over it
     * (median_step_s: the steps after the first two when there are more than two). All 0
     * without a peak. */
    double memory_bytes_per_s;
    zero_train_roofline_t roofline;
    double median_step_s;
    double roofline_ratio;  /* median_step_s / roofline.total_s */
    float init_val_loss;    /* validation loss before the first step */
    float final_train_loss; /* on eval_batches training batches after the last step */
    float final_val_loss;
    float last_step_loss;   /* loss of the last global batch */
    double unigram_entropy; /* nats per token of the validation tail: the no-context baseline */
    double ln_vocab;
    size_t activation_bytes;
    /* fp8 (model.fp8): the scaling state per rank (ZERO_MEM_OTHER; the delayed recipe's scales,
     * step amaxes and histories; 0 otherwise); the quantized GEMM inputs' buffers are part of
     * activation_bytes */
    size_t fp8_state_bytes;
    zero_mem_stats_t mem;            /* rank 0's accounting domain */
    uint64_t weights_fingerprint;    /* hash of the full fp32 weights, canonical order */
    int64_t skipped_steps;           /* steps skipped for an inf/NaN gradient */
    float loss_scale;                /* the loss scale after the last step (fp16; else 1) */
    zero_train_rank_report_t *ranks; /* world entries on rank 0 (NULL elsewhere); owned */
    /* MoE: the last step's routing statistics summed over the ranks, zero__gpt_moe_stats's
     * layout (NULL for a dense model); owned */
    double *moe_stats;
    size_t moe_stats_count;
} zero_train_report_t;

typedef struct zero_train_io {
    FILE *out;        /* progress, evaluations, samples, summary (NULL: silent) */
    int tty;          /* 1: a progress bar redrawn in place; 0: plain lines */
    int measure_peak; /* 1: a matmul peak for the MFU and the roofline (0: neither):
                         train.peak_gflops, else the calibration's when it fits, else
                         measured at start-up (~0.5 s) */
    /* `zero plan --calibrate`'s file (NULL: none) and its GEMM rate (FLOP/s): each rank's peak
     * when the run has one rank of calibration_threads threads */
    const char *calibration_path;
    double calibration_gemm_flops;
    int calibration_threads;
    const char *metrics_path; /* JSON lines, one object per step (NULL: none); rank 0 writes */
    const char *report_path;  /* where the caller will write the report (NULL: none): only
                                 checked before step 1, so that a bad path fails early */
    /* Requests from signal handlers (NULL: none), lock-free so a handler may set them. Read once
     * per step, after the optimizer step, by this process's ranks, and combined over all ranks in
     * that step's loss all-reduce, so every rank acts after the same step whichever rank got the
     * signal. stop_signal: a signal number in [1, ZERO_TRAIN_SIGNAL_MAX) asking the run to stop
     * after the current step: it saves a checkpoint (when train.save_dir is set), skips the
     * samples and returns ZERO_OK with rep->stop_signal set (the lowest number asked, if ranks
     * differ). save_request: non-zero asks for a checkpoint after the current step (training
     * goes on); the trainer resets it to 0 when it takes the request. */
    atomic_int *stop_signal;
    atomic_int *save_request;
} zero_train_io_t;

#define ZERO_TRAIN_SIGNAL_MAX 32

/* The world size a run of cfg will have: the MPI job's size when it runs on MPI (train.backend
 * "mpi", or "auto" under mpirun), else train.ranks. */
int zero__train_world_size(const zero_train_config_t *cfg);

/* Compute threads a run of cfg keeps busy on this machine: its local ranks x threads per rank. */
int zero__train_machine_threads(const zero_train_config_t *cfg);

/* Set model.vocab, unless the file or the command line set it, from data.tokenizer (its
 * vocabulary size; the tokenizer's load errors, naming the file), else from a nanoGPT data
 * directory's meta.pkl (data.path). Anything else: nothing to do. ZERO_ERR_IO /
 * ZERO_ERR_FORMAT naming meta.pkl when it is missing or unreadable (zero__data_dir_vocab). */
zero_status_t zero__train_data_vocab(zero_train_config_t *cfg);

/* Run a training job over zero__train_world_size(cfg) ranks. cfg is checked (and its batch sizes
 * resolved) for that world. rep may be NULL; on success it is filled on every process, with
 * rep->rank telling whether this process holds rank 0's full report (ranks != NULL). Free it
 * with zero__train_report_free. Under MPI with more than one rank a failed run leaves MPI
 * initialised (finalizing could wait forever for a hung rank): the caller prints the error and
 * calls zero_comm_mpi_abort. Collectives time out after cfg->timeout_s (train.timeout_s). */
zero_status_t zero__train_run(zero_train_config_t *cfg, const zero_train_io_t *io,
                              zero_train_report_t *rep);
void zero__train_report_free(zero_train_report_t *rep);

/* Write rank 0's report as JSON (tokens_per_s, flops_per_s, matmul_peak_flops_per_s, mfu, losses,
 * params, weights_fingerprint, stage, world_size, per-rank memory and communication, config). */
zero_status_t zero__train_report_write(const zero_train_report_t *rep,
                                       const zero_train_config_t *cfg, const char *path);

#endif /* ZERO_TRAIN_TRAINER_H */
