/* config.h — the training configuration (internal API): DeepSpeed's JSON keys plus our `model`,
 * `data` and `train` sections, declared once in a table (key, type, default, range, flag, doc)
 * that drives defaults, parsing, command-line flags and overrides, --print-config, --help-config
 * and docs/config.md.
 *
 * Parsing rules: a JSON syntax error names the file, line and column; a duplicate key fails
 * naming both lines; an absent key means what it means under DeepSpeed (the table's defaults);
 * every other key DeepSpeed accepts is read as zero's spelling, accepted because zero does that
 * anyway, pointed to zero's equivalent, or warned "ignored: not supported yet" (config.c,
 * ds_keys); a key neither zero's nor DeepSpeed's warns "unknown key"; "auto" is resolved by
 * zero__train_config_check, which says the value chosen; a value of the wrong type or out of
 * range fails naming the key, the value and what is allowed. Keys that the command line sets
 * (zero__train_config_mark_cli) are not read from the file.
 *
 * Batch sizes follow DeepSpeed's rule train_batch_size = train_micro_batch_size_per_gpu x
 * gradient_accumulation_steps x world size: any two of the three determine the third, and
 * zero__train_config_check resolves them once the world size is known.
 */
#ifndef ZERO_TRAIN_CONFIG_H
#define ZERO_TRAIN_CONFIG_H

#include "model/gpt.h"
#include "zero/engine.h"
#include "zero/optim.h"

#include <stdint.h>
#include <stdio.h>

#define ZERO_CONFIG_STR_MAX 512
#define ZERO_CONFIG_MAX_KEYS 160

typedef struct zero_train_config {
    /* model */
    zero_gpt_config_t model;
    int checkpointing;
    /* data */
    char data_path[ZERO_CONFIG_STR_MAX]; /* "" = built-in corpus */
    char val_path[ZERO_CONFIG_STR_MAX];  /* "" = val.bin of a data directory, or the tail */
    char tokenizer[ZERO_CONFIG_STR_MAX]; /* "" = bytes (text data), ids (token data) */
    char data_order[16];                 /* random | sequential */
    float val_fraction;
    int builtin_bytes;
    /* DeepSpeed keys */
    int train_batch_size; /* global sequences per step */
    int micro_batch;      /* train_micro_batch_size_per_gpu */
    int grad_accum;       /* gradient_accumulation_steps */
    float grad_clip;      /* gradient_clipping */
    /* mixed precision: bf16.enabled, fp16.enabled (at most one), fp16.* loss scaling (each key
     * set through zero_loss_scaler_params_set), data_types.grad_accum_dtype */
    int bf16, fp16;
    /* fp8.* (FP8 GEMM inputs): enabled, margin and amax_history_len live in model.fp8;
     * zero__train_config_check maps these two onto it */
    char fp8_format[16]; /* "hybrid" | "e4m3" */
    char fp8_recipe[16]; /* "delayed" | "blockwise" */
    zero_loss_scaler_params_t loss_scaler;
    char grad_accum_dtype[16]; /* "fp32" | "bf16" | "fp16" */
    int steps_per_print;
    int seed;
    char optimizer[32];   /* optimizer.type */
    char state_dtype[16]; /* optimizer.params.state_dtype: "fp32" | "int8" */
    int freeze_step;      /* optimizer.params.freeze_step (OneBitAdam) */
    int cuda_aware;       /* optimizer.params.cuda_aware (OneBitAdam; accepted, no effect) */
    char comm_backend_name[ZERO_CONFIG_STR_MAX]; /* (OneBitAdam; accepted, no effect) */
    float lr, beta[2], eps, weight_decay;
    char scheduler[32]; /* scheduler.type */
    float warmup_min_lr, warmup_max_lr, warmup_min_ratio;
    int warmup_steps, total_steps; /* total 0 = train.steps */
    char warmup_type[16];
    float min_lr_ratio; /* cos_min_ratio */
    /* zero_optimization */
    int stage;
    int64_t reduce_bucket_elems, allgather_bucket_elems;
    int overlap_comm, contiguous_gradients, reduce_scatter;
    int64_t prefetch_bucket_elems, persistence_threshold_elems, max_live_elems,
        max_reuse_distance_elems;
    int quantized_weights;                     /* zero_quantized_weights (ZeRO++ qwZ) */
    int hpz_partition_size;                    /* zero_hpz_partition_size (ZeRO++ hpZ) */
    int quantized_gradients;                   /* zero_quantized_gradients (ZeRO++ qgZ) */
    float loco_err_beta;                       /* zeropp_loco_param.err_beta (LoCo) */
    int loco_reset_t;                          /* zeropp_loco_param.reset_T */
    int64_t sub_group_elems;                   /* sub_group_size */
    char offload_optimizer[16];                /* offload_optimizer.device: none|cpu|nvme */
    char nvme_path[ZERO_CONFIG_STR_MAX];       /* offload_optimizer.nvme_path */
    int offload_buffer_count;                  /* offload_optimizer.buffer_count */
    int pipeline_read, pipeline_write;         /* offload_optimizer.pipeline_* */
    int overlap_step;                          /* offload_optimizer.overlap_step */
    char offload_param[16];                    /* offload_param.device: none|cpu|nvme */
    char param_nvme_path[ZERO_CONFIG_STR_MAX]; /* offload_param.nvme_path */
    int param_buffer_count;                    /* offload_param.buffer_count */
    int aio_block_size, aio_queue_depth, aio_threads, aio_single_submit, aio_overlap_events;
    /* train */
    int steps, eval_interval, eval_batches;
    int samples, sample_tokens, top_k;
    float temperature;
    char prompt[ZERO_CONFIG_STR_MAX];
    int threads, ranks;
    int ranks_per_node; /* threads backend: simulated nodes of this many ranks (0: one node) */
    char backend[16];   /* auto | threads | mpi */
    double timeout_s;   /* collective timeout; zero__train_config_check applies $ZERO_TIMEOUT */
    double peak_gflops; /* the run's matmul peak for the MFU, GFLOP/s (0: calibrated/measured) */
    /* checkpoints */
    char save_dir[ZERO_CONFIG_STR_MAX];  /* "" = none */
    int save_every, keep_last;           /* 0 = only at the end / keep all */
    int overwrite;                       /* a fresh run may save into a used save_dir */
    char resume[ZERO_CONFIG_STR_MAX];    /* "" = none; "latest" = save_dir's latest */
    char init_from[ZERO_CONFIG_STR_MAX]; /* "" = none; a .safetensors file */
    /* DeepSpeed's monitors (train/monitor.c): TensorBoard event files, CSV files */
    int tb_enabled, csv_enabled;
    char tb_output_path[ZERO_CONFIG_STR_MAX], tb_job_name[ZERO_CONFIG_STR_MAX];
    char csv_output_path[ZERO_CONFIG_STR_MAX], csv_job_name[ZERO_CONFIG_STR_MAX];
    /* pre-flight and run-time checks (train/preflight.c) */
    int replica_check_every; /* steps between replica checks (0: never) */
    int memory_check;        /* refuse a run whose memory estimate exceeds what is available */
    /* autotuning (DeepSpeed's block; `zero tune` reads it, docs/tune.md) */
    int tune_enabled, tune_fast, tune_max_batch, tune_mp_size, tune_num_micro;
    int tune_early_stopping, tune_num_trials;
    int tune_online, tune_online_interval; /* `zero train`'s online tuning (docs/tune.md) */
    char tune_metric[16];                  /* throughput | latency | flops */
    char tune_tuner[16];                   /* gridsearch | random | model_based */
    /* Which keys the file or the command line set (index = position in the key table), for rules
     * that depend on what the user gave (the batch-size triple, warmup_max_lr). */
    unsigned char key_set[ZERO_CONFIG_MAX_KEYS];
    /* Keys the command line sets (zero__train_config_mark_cli, before the file is read): the
     * file's value for such a key is skipped unchecked, so a flag can replace a bad value. */
    unsigned char key_cli[ZERO_CONFIG_MAX_KEYS];
    /* Keys the file gave as "auto" (Hugging Face's placeholder): zero__train_config_check picks
     * their values and says which. */
    unsigned char key_auto[ZERO_CONFIG_MAX_KEYS];
} zero_train_config_t;

/* Defaults from the table (threads 0 = cores / ranks). */
void zero__train_config_default(zero_train_config_t *cfg);

/* Read a JSON file over the current values. ZERO_ERR_IO (missing file), ZERO_ERR_CONFIG (syntax,
 * type, range) with a message naming file, key/line and what was expected. */
zero_status_t zero__train_config_load(zero_train_config_t *cfg, const char *path);
/* Parse JSON text (`name` is used in messages). */
zero_status_t zero__train_config_parse(zero_train_config_t *cfg, const char *json,
                                       const char *name);
/* Set one key from a string, as `--set key=value` does ("model.layers", "4"). */
zero_status_t zero__train_config_set(zero_train_config_t *cfg, const char *key, const char *value);
/* Declare, before reading the file, that the command line sets `key` (the flags are applied
 * after the file): the file's value for it is then skipped without being checked, so
 * `--set zero_optimization.stage=2` replaces a file's bad stage instead of failing on it.
 * ZERO_ERR_CONFIG naming the key if it is unknown. */
zero_status_t zero__train_config_mark_cli(zero_train_config_t *cfg, const char *key);
/* Mute (1) or show (0) the warnings and notes the reader logs (process-wide; default shown).
 * `zero train` reads its config muted when it may restart itself, so each line is printed once. */
void zero__train_config_quiet(int on);
/* True if the key (by name) was set by the file or the command line. */
int zero__train_config_is_set(const zero_train_config_t *cfg, const char *key);

/* The config key a command-line flag sets ("--stage" -> "zero_optimization.stage"), or NULL. */
const char *zero__train_config_flag_key(const char *flag);
/* Help lines for the flags that set keys ("  --stage S   ZeRO stage ..."). */
void zero__train_config_print_flags(FILE *out);

/* Cross-key checks for a run over `world` ranks (heads divide dim, stage range, ...), and
 * resolution of the batch-size triple: the missing one of train_batch_size,
 * train_micro_batch_size_per_gpu and gradient_accumulation_steps is computed; an inconsistent
 * triple fails naming the three values and the world size. Warns about accepted values that have
 * no effect (reduce_scatter false). */
zero_status_t zero__train_config_check(zero_train_config_t *cfg, int world);

/* `zero train --dtype NAME`: fp32, bf16 or fp16 sets bf16.enabled and fp16.enabled (both marked
 * as set); ZERO_ERR_CONFIG naming the value otherwise. */
zero_status_t zero__train_config_set_dtype(zero_train_config_t *cfg, const char *name);
/* The compute dtype and the gradient-accumulation dtype the config asks for (after check). */
zero_dtype_t zero__train_config_compute_dtype(const zero_train_config_t *cfg);
zero_dtype_t zero__train_config_accum_dtype(const zero_train_config_t *cfg);
/* Adam's m and v: ZERO_DTYPE_INT8 with state_dtype "int8" or optimizer.type AdamW8bit. */
zero_dtype_t zero__train_config_state_dtype(const zero_train_config_t *cfg);

/* Map a checked config onto engine parameters (stage, optimizer, schedule, clipping,
 * accumulation, dtypes and loss scaler, buckets, prefetch, persistence): the one mapping that
 * `zero train` and zero_ds_config_load share. Leaves comm, mem, threads and seed as *ep has them.
 * ZERO_ERR_CONFIG when warmup_min_lr is above the peak learning rate. */
zero_status_t zero__train_config_engine_params(const zero_train_config_t *cfg,
                                               zero_engine_params_t *ep);

/* The key table, for code that walks every key (the ranks' agreement on the configuration):
 * the number of keys, the dotted name of key i (NULL outside [0, count)), and the value of key i
 * in cfg as --print-config writes it, NUL-terminated and cut to n - 1 bytes. */
int zero__train_config_key_count(void);
const char *zero__train_config_key_name(int i);
void zero__train_config_value_str(const zero_train_config_t *cfg, int i, char *buf, size_t n);

/* Write the effective configuration as JSON (nested like the input). */
void zero__train_config_print(const zero_train_config_t *cfg, FILE *out);
/* Write the table of keys: name, type, default and documentation. */
void zero__train_config_print_keys(FILE *out);
/* Write the table of keys as Markdown (the reference part of docs/config.md). */
void zero__train_config_print_markdown(FILE *out);

#endif /* ZERO_TRAIN_CONFIG_H */
