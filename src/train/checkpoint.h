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
    uint64_t run_id;   /* the run (kept by its resumed continuations): keep-last's scope */
    double elapsed_s;  /* seconds of the run so far (earlier invocations included) */
} zero_train_position_t;

/* The sampler state a fresh run starts from (data.order sequential: 0, the first window). */
uint64_t zero__train_data_rng_seed(const zero_train_config_t *cfg);

/* Where a fresh run starts: step 0, the seed's sampler state, a new random run id. */
zero_train_position_t zero__train_position_fresh(const zero_train_config_t *cfg);

/* A fresh run (no train.resume) into a cfg->save_dir that already holds checkpoints (`step-*`
 * directories) is refused with ZERO_ERR_CONFIG naming them, unless train.overwrite is set: its
 * saves would replace theirs step by step and repoint `latest`. No save_dir, a missing or empty
 * one, or a resume: ZERO_OK. Reads the directory only. */
zero_status_t zero__train_ckpt_check_dir(const zero_train_config_t *cfg);

/* Before step 1: build what zero__train_ckpt_save(cfg, eng, comm, pos) will save (layout and
 * manifest) and check it and the save directory (zero_ckpt_save_check), writing nothing. Not
 * collective: every rank checks its own (the caller agrees on the status). */
zero_status_t zero__train_ckpt_save_check(const zero_train_config_t *cfg, zero_engine_t *eng,
                                          const zero_fp8_t *fp8, zero_comm_t *comm,
                                          const zero_train_position_t *pos);

/* Save checkpoint cfg->save_dir/step-<pos->step> (keeping cfg->keep_last). Collective over comm
 * (NULL: one rank); every rank gets the same status. path_out (may be NULL) receives its path.
 * fp8 (the model's, may be NULL): the delayed recipe's scales and amax histories go into the
 * manifest's loss_scaler section (as "fp8"), the same on every rank after the step's reduction. */
zero_status_t zero__train_ckpt_save(const zero_train_config_t *cfg, zero_engine_t *eng,
                                    const zero_fp8_t *fp8, zero_comm_t *comm,
                                    const zero_train_position_t *pos, char *path_out,
                                    size_t path_out_size);

/* Restore cfg->resume ("latest": cfg->save_dir's latest checkpoint; without a `latest` file,
 * its most recently saved complete checkpoint, with a warning) into eng and *pos: weights, Adam
 * m and v, the engine's step and the trainer's position, run id and elapsed time. Any world size
 * and stage may load any checkpoint of the same model (re-slicing); another model shape fails
 * with ZERO_ERR_MISMATCH naming the key (model.heads, ...) and both values before anything is
 * loaded; another data file, validation file or data.order warns, naming both. Not collective:
 * every rank reads what it holds (the caller agrees on the status across ranks); rank 0 alone logs
 * the warnings. path_out receives the checkpoint's path, or "" when "latest" found no checkpoint in
 * cfg->save_dir yet (a fresh start: *pos is unchanged). fp8 (may be NULL): the delayed recipe's
 * scales and histories are restored from the manifest (a checkpoint without them: warned, the
 * scales start afresh). */
zero_status_t zero__train_ckpt_resume(const zero_train_config_t *cfg, zero_engine_t *eng,
                                      zero_fp8_t *fp8, int rank, zero_train_position_t *pos,
                                      char *path_out, size_t path_out_size);

/* Initialise the weights from cfg->init_from (safetensors, Hugging Face GPT-2 names, F32/BF16):
 * ZERO_ERR_MISMATCH naming the first tensor missing or of another shape, nothing written then.
 * Not collective. */
zero_status_t zero__train_init_from(const zero_train_config_t *cfg, zero_engine_t *eng);

#endif /* ZERO_TRAIN_CHECKPOINT_H */
