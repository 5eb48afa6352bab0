/* checkpoint.h — the trainer's side of checkpoints (internal API): what `zero train` saves
 * beside the engine's state (--save-dir, --save-every, --keep-last), how --resume puts a run
 * back where it stopped, and --init-from (weights from a Hugging Face GPT-2 safetensors file).
 *
 * The tensors go through src/ckpt (engine adapter: fp32 master, Adam m and v). The trainer's own
 * state is small JSON in the manifest: its step and the training-batch sampler's RNG state (the
 * data position: batches are drawn from it), the engine's optimizer step (the learning-rate
 * schedule position and Adam's bias correction), the seeds of evaluation and sampling (fixed per
 * run, stored so a reader sees them), and the model and training configuration. There is no
 * dropout and no loss scaler yet (null in the manifest).
 */
#ifndef ZERO_TRAIN_CHECKPOINT_H
#define ZERO_TRAIN_CHECKPOINT_H

#include "train/config.h"

#include <stddef.h>
#include <stdint.h>

/* Where a run is: everything beyond the engine's tensors a continuation needs. */
typedef struct zero_train_position {
    int64_t step;      /* trainer steps completed (skipped optimizer steps included) */
    uint64_t data_rng; /* state of the training-batch sampler after `step` steps */
    double tokens;     /* tokens trained so far, all ranks */
} zero_train_position_t;

/* The sampler state a fresh run starts from. */
uint64_t zero__train_data_rng_seed(const zero_train_config_t *cfg);

/* Save checkpoint cfg->save_dir/step-<pos->step> (keeping cfg->keep_last). Collective over comm
 * (NULL: one rank); every rank gets the same status. path_out (may be NULL) receives its path. */
zero_status_t zero__train_ckpt_save(const zero_train_config_t *cfg, zero_engine_t *eng,
                                    zero_comm_t *comm, const zero_train_position_t *pos,
                                    char *path_out, size_t path_out_size);

/* Restore cfg->resume ("latest": cfg->save_dir's latest checkpoint) into eng and *pos: weights,
 * Adam m and v, the engine's step and the trainer's position. Any world size and stage may load
 * any checkpoint of the same model (re-slicing). Not collective: every rank reads what it holds
 * (the caller agrees on the status across ranks). path_out receives the checkpoint's path, or ""
 * when "latest" found no checkpoint in cfg->save_dir yet (a fresh start: *pos is unchanged). */
zero_status_t zero__train_ckpt_resume(const zero_train_config_t *cfg, zero_engine_t *eng,
                                      zero_train_position_t *pos, char *path_out,
                                      size_t path_out_size);

/* Initialise the weights from cfg->init_from (safetensors, Hugging Face GPT-2 names, F32/BF16):
 * ZERO_ERR_MISMATCH naming the first tensor missing or of another shape, nothing written then.
 * Not collective. */
zero_status_t zero__train_init_from(const zero_train_config_t *cfg, zero_engine_t *eng);

#endif /* ZERO_TRAIN_CHECKPOINT_H */
