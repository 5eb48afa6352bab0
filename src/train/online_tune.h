/* online_tune.h — `zero train`'s online tuning (autotuning.online, docs/tune.md): between steps
 * it tries the settings zero_engine_retune may change (reduce bucket size, overlap_comm, stage-3
 * prefetch depth), one at a time, and keeps one only when its window of steps was faster.
 *
 * Windows of autotuning.online_interval steps alternate: a base window times the settings in
 * force, the next one times a candidate (one knob doubled, halved or toggled from the base).
 * A candidate whose median step time beats the base window's by more than 2% becomes the base;
 * any other is undone. Each decision is one line on `out` (rank 0). Once every candidate of the
 * current base has lost in a row, tuning stops with a closing line. The step times compared are
 * the ranks' per-window medians summed over the ranks in rank order, so every rank takes the
 * same decision without a broadcast.
 */
#ifndef ZERO_TRAIN_ONLINE_TUNE_H
#define ZERO_TRAIN_ONLINE_TUNE_H

#include "zero/engine.h"

#include <stdio.h>

#define ZERO__ONLINE_WINDOW_MAX 64 /* step times kept per window (a longer one: its first 64) */

typedef struct zero_online_tune {
    int interval; /* steps per window */
    int done;     /* stopped: nothing left to try, or off */
    int trial;    /* the window being timed runs a candidate (else the base) */
    int move;     /* next candidate move to consider (index into the move list) */
    int losses;   /* candidates that lost in a row since the base last changed */
    int changes;  /* settings applied (tried, kept or undone) */
    int stage, world;
    size_t model_elems; /* padded parameters: no bucket or prefetch goes beyond them */
    zero_engine_tuning_t base, cand;
    zero_engine_tuning_t prev; /* the base before the last kept candidate: not tried again */
    int has_prev;
    double base_s, first_s; /* the base's window time; the very first window's */
    double times[ZERO__ONLINE_WINDOW_MAX];
    int count; /* steps timed in the current window */
} zero_online_tune_t;

/* Ready to tune eng (interval >= 2 steps per window); with interval 0 the tuner stays off. */
void zero__online_tune_init(zero_online_tune_t *t, zero_engine_t *eng, int interval);

/* After optimizer step `step` (1-based) took step_s seconds on this rank: at a window's end,
 * agree on its time over comm (NULL: one rank; collective otherwise), decide, and retune eng
 * for the next window. out (rank 0, else NULL) receives the decision's line. */
zero_status_t zero__online_tune_step(zero_online_tune_t *t, zero_engine_t *eng, zero_comm_t *comm,
                                     int step, double step_s, FILE *out);

#endif /* ZERO_TRAIN_ONLINE_TUNE_H */
