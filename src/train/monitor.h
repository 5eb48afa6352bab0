/* monitor.h — DeepSpeed's monitor outputs of a training run, written by rank 0 (internal API,
 * used by trainer.c): TensorBoard scalar event files (`tensorboard`) and one CSV file per scalar
 * (`csv_monitor`), each in its output_path/job_name directory, against global samples as
 * DeepSpeed logs them (docs/monitor.md).
 *
 * Scalars: DeepSpeed's Train/Samples/train_loss, lr and (fp16) loss_scale, and zero's
 * Train/Samples/grad_norm, tokens_per_s, mfu (when the peak was measured) and val_loss (at an
 * evaluation). A resumed run keeps what the interrupted one wrote up to its checkpoint: the CSV
 * files are cut after that point, and its new event file opens with TensorBoard's session-start
 * record just after that step, which makes TensorBoard drop the older files' points after it.
 */
#ifndef ZERO_TRAIN_MONITOR_H
#define ZERO_TRAIN_MONITOR_H

#include "train/config.h"

#include <stdint.h>

typedef struct zero_monitor zero_monitor_t;

/* One step's scalars; NaN: not logged at this step. */
typedef struct {
    int64_t samples; /* global samples trained so far: the x of every scalar */
    double train_loss, lr, loss_scale, grad_norm, tokens_per_s, mfu, val_loss;
} zero_monitor_point_t;

/* Create the enabled monitors' directories and check they take files (before step 1), naming
 * the key and the system's reason on failure. */
zero_status_t zero__monitor_check(const zero_train_config_t *cfg);

/* Open the enabled monitors (*out NULL when none is), keeping what a resumed run's predecessor
 * wrote through resume_samples (0: a fresh run, which replaces the CSV files). */
zero_status_t zero__monitor_open(const zero_train_config_t *cfg, int64_t resume_samples,
                                 zero_monitor_t **out);

/* Append one step's scalars to every monitor and flush; ZERO_ERR_IO names the file. */
zero_status_t zero__monitor_write(zero_monitor_t *m, const zero_monitor_point_t *p);

/* Close everything (NULL: nothing); the first write error, if any. */
zero_status_t zero__monitor_close(zero_monitor_t *m);

#endif /* ZERO_TRAIN_MONITOR_H */
