/* outputs.h — the files a training run writes, checked before its first step, and the metrics
 * log (internal API, used by trainer.c).
 *
 * Every output path is checked before training starts, so that a typo or a read-only directory
 * fails in seconds instead of after the last step: the JSON report's directory, the metrics
 * log, the save directory (created if missing, as the save would) and, for a fresh run, that the
 * save directory holds no other run's checkpoints. Not here: the checkpoint layout's dry run
 * (checkpoint.c, it needs the engine) and the agreement of ranks on the outcome (trainer.c).
 */
#ifndef ZERO_TRAIN_OUTPUTS_H
#define ZERO_TRAIN_OUTPUTS_H

#include "train/config.h"

#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

/* Check this rank's view of the outputs. Rank 0: report_path's directory exists and takes new
 * files (the report is replaced through a temporary file there) and report_path is no
 * directory; metrics_path can be opened for writing (nothing is truncated here); the save
 * directory holds no other run's checkpoints unless resuming or train.overwrite
 * (zero__train_ckpt_check_dir). Every rank: cfg->save_dir is, or is created as, a writable
 * directory (each rank writes its own shard files there). NULL paths are not checked.
 * ZERO_ERR_IO (or ZERO_ERR_CONFIG) naming the path and the system's reason. */
zero_status_t zero__train_outputs_check(const zero_train_config_t *cfg, const char *report_path,
                                        const char *metrics_path, int rank);

/* Open the metrics log for appending after its records of steps <= keep_through_step: records
 * follow each other in step order, so the file is truncated at the first record past that step
 * (or the first incomplete one, which a crash mid-write leaves). 0 starts the log afresh; a
 * resumed run passes its checkpoint's step, so the log becomes what an uninterrupted run writes.
 * A path that is no regular file (a pipe, a device) is opened for writing as it is. */
zero_status_t zero__train_metrics_open(const char *path, int64_t keep_through_step, FILE **out);

/* Flush a metrics record and report any write error of it (or earlier) as ZERO_ERR_IO naming the
 * path and the system's reason; close=1 also closes f (its status too). */
zero_status_t zero__train_metrics_flush(FILE *f, const char *path, int close);

/* The step of a complete line of a log (0: a header, always kept), or -1 for a line that ends
 * what is kept (an incomplete or unreadable one). */
typedef long long (*zero_line_step_fn)(const char *line, ssize_t len);

/* zero__train_metrics_open for any log of lines that follow each other in step order: kept
 * through keep_through_step by line_step; errors name `what` ("CSV monitor file", ...). */
zero_status_t zero__train_log_open(const char *what, const char *path, int64_t keep_through_step,
                                   zero_line_step_fn line_step, FILE **out);
/* zero__train_metrics_flush for such a log. */
zero_status_t zero__train_log_flush(const char *what, FILE *f, const char *path, int close);

#endif /* ZERO_TRAIN_OUTPUTS_H */
