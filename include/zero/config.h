/* zero/config.h — DeepSpeed configuration files (ds_config.json) for programs that drive the
 * engine themselves.
 *
 * zero_ds_config_load reads a DeepSpeed JSON config with the same reader as `zero train --config`
 * (the keys, defaults, warnings and messages of docs/config.md) and maps it onto
 * zero_engine_params_t with the same code as the trainer. A key that is absent means what it means
 * under DeepSpeed (no scheduler: constant learning rate; no gradient_clipping: none; Adam betas
 * [0.9, 0.999] and weight_decay 0 unless given). It does not build an engine, touch the model
 * or read the `model`, `data` or `train` sections beyond what the mapping needs (total_num_steps
 * absent or 0 ends a decay at train.steps, 600 unless the file's train section says otherwise).
 */
#ifndef ZERO_CONFIG_H
#define ZERO_CONFIG_H

#include "zero/core.h"
#include "zero/engine.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Read the DeepSpeed config at `path` into engine parameters.
 *
 * *out is in-out: its comm, mem, threads and seed are kept as the caller set them (initialise it
 * with zero_engine_params_default() and set those first; the file's `seed` is not used). Every
 * other field is zero_engine_params_default()'s, replaced by what the file says:
 * zero_optimization.stage; optimizer.params lr, betas, eps, weight_decay; gradient_clipping;
 * scheduler (type and params) -> schedule, lr, min_lr, warmup_steps, warmup_min_lr, warmup_type,
 * total_steps; zero_optimization reduce_bucket_size (elements -> bytes of fp32),
 * overlap_comm, stage3_prefetch_bucket_size, stage3_param_persistence_threshold,
 * stage3_max_live_parameters, zero_quantized_weights; bf16 / fp16 (and DeepSpeed's legacy
 * `bfloat16`) -> compute_dtype and the fp16 loss scaler; data_types.grad_accum_dtype;
 * gradient_accumulation_steps, resolved with train_batch_size and train_micro_batch_size_per_gpu
 * over the world size (the size of out->comm, 1 when it is NULL) by DeepSpeed's rule train = micro
 * x accumulation x world.
 *
 * Returns ZERO_OK; ZERO_ERR_INVALID_ARG for a NULL path or out; ZERO_ERR_IO when the file cannot
 * be read; ZERO_ERR_CONFIG for invalid JSON (file:line:column), a duplicate key (both lines), a
 * value of the wrong type or out of range, or inconsistent keys (the message names the file, the
 * key, the value and what was expected: zero_last_error()). On failure *out is unchanged. Keys
 * zero does not support yet, "auto" values and DeepSpeed spellings that zero maps are reported
 * through the log callback (zero_log_set_callback), once per call.
 *
 * Ownership: path is borrowed for the call; nothing is retained. Thread safety: safe to call
 * from several threads at once on different `out`s, except that the log callback may then be
 * called concurrently. Not collective: every rank reads the file itself (the same file gives the
 * same parameters on every rank). */
ZERO_API zero_status_t zero_ds_config_load(const char *path, zero_engine_params_t *out);

#ifdef __cplusplus
}
#endif

#endif /* ZERO_CONFIG_H */
