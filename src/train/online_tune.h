/* online_tune.h — `zero train`'s online tuning (autotuning.online, docs/tune.md): between steps
 * it tries the settings zero_engine_retune may change (reduce bucket size, overlap_comm, stage-3
 * prefetch depth), one at a time, and keeps one only when it measured faster.
 *
 * A trial runs 2 x autotuning.online_interval steps that alternate between the base settings and
 * a candidate (one knob doubled, halved or toggled from the base) in blocks of four: base,
 * candidate, candidate, base. Each block's ratio (candidate steps' time over base steps') cancels
 * any drift linear over its four steps (a neighbour's load, the clock), which on a shared machine
 * moves step times by far more than the 2% sought; the candidate is kept when the median of its
 * blocks' ratios is below 0.98. Windows of each setting one after the other, as first built, took
 * the drift for a difference.
 * Once every candidate of the current base has lost in a row, one last trial of the same form
 * sets the settled settings against those the run started with, and whichever is faster stays:
 * the run ends on settings measured no slower than its start, in the same steps.
 * Each decision is one line on `out` (rank 0). The ratios compared are each rank's medians
 * summed over the ranks in rank order, so every rank takes the same decision without a
 * broadcast.
 */
#ifndef ZERO_TRAIN_ONLINE_TUNE_H
#define ZERO_TRAIN_ONLINE_TUNE_H

#include "zero/engine.h"

#include <stdio.h>

#define ZERO__ONLINE_STEPS_MAX                                                                     \
    64 /* step times kept per trial and setting (a longer one: its first) */

typedef struct zero_online_tune {
    int interval; /* steps of each setting per trial */
    int done;     /* stopped: nothing left to try, or off */
    int started;  /* the first step was timed (and the first candidate proposed) */
    int verify;   /* the trial under way sets the settled settings against the start */
    int pos;      /* steps of the trial under way so far (online_tune.c's arm() says which ran) */
    int move;     /* next candidate move to consider (index into the move list) */
    int losses;   /* candidates that lost in a row since the base last changed */
    int stage, world;
    size_t model_elems; /* padded parameters: no bucket or prefetch goes beyond them */
    int64_t max_gather; /* largest gathered (non-persistent stage-3) unit, padded; 0: none */
    zero_engine_tuning_t start, base, cand;
    zero_engine_tuning_t prev; /* the base before the last kept candidate: not tried again */
    int has_prev;
    double times[2][ZERO__ONLINE_STEPS_MAX]; /* the trial's step times: [0] base, [1] candidate */
} zero_online_tune_t;

/* Ready to tune eng (interval >= 2 steps per setting and trial); with interval 0 the tuner stays
 * off. */
void zero__online_tune_init(zero_online_tune_t *t, zero_engine_t *eng, int interval);

/* After optimizer step `step` (1-based) took step_s seconds on this rank: retune eng for the
 * next step; at a trial's end, agree on its ratios over comm (NULL: one rank; collective
 * otherwise) and decide. out (rank 0, else NULL) receives the decision's line. */
zero_status_t zero__online_tune_step(zero_online_tune_t *t, zero_engine_t *eng, zero_comm_t *comm,
                                     int step, double step_s, FILE *out);

/* The next zero__online_tune_step call ends a trial (and may print a line). */
int zero__online_tune_decides_next(const zero_online_tune_t *t);

#endif /* ZERO_TRAIN_ONLINE_TUNE_H */
