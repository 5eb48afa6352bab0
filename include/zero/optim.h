/* zero/optim.h — the fp16 loss scaler: DeepSpeed's dynamic (and static) loss scaling.
 *
 * What it is: a small state machine. Before backward the caller multiplies the loss by
 * zero_loss_scaler_scale(); after backward it checks the gradients for inf/NaN (agreed across
 * ranks: every rank must pass the same `overflow` flag, or the scales diverge) and calls
 * zero_loss_scaler_update(), which says whether to skip the step and which scale to use next.
 * What it is not: it touches no gradients, does no collective and keeps no clock; the caller
 * unscales (divides by the scale the gradients were computed with) and logs skipped steps.
 *
 * Semantics are deepspeed/runtime/fp16/loss_scaler.py (DynamicLossScaler.update_scale), with
 * one deliberate difference in defaults: see docs/mixed-precision.md. Scale factor is 2.
 */
#ifndef ZERO_OPTIM_H
#define ZERO_OPTIM_H

#include "zero/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* DeepSpeed's fp16 block keys, with our defaults. These defaults hold whatever subset of keys a
 * config gives (DeepSpeed silently starts at 2^32 with hysteresis 1 when the block has only
 * `enabled`; we never do). */
typedef struct zero_loss_scaler_params {
    double loss_scale;       /* "loss_scale": 0 = dynamic (default); > 0 = static scale */
    int initial_scale_power; /* "initial_scale_power": first dynamic scale 2^p; 16, in [0, 127] */
    int loss_scale_window;   /* "loss_scale_window": clean steps before doubling; 1000, >= 1 */
    int hysteresis;          /* "hysteresis": overflows tolerated before halving; 2, >= 1 */
    int consecutive_hysteresis;   /* "consecutive_hysteresis": refill hysteresis on every clean
                                     step, not only on growth; 0 */
    double min_loss_scale;        /* "min_loss_scale": floor of the dynamic scale; 1, > 0 */
    int raise_error_at_min_scale; /* "raise_error_at_min_scale": an overflow while already at
                                     the floor fails update() (DeepSpeed raises); 1. With 0 the
                                     step is skipped and the scale stays at the floor. */
} zero_loss_scaler_params_t;

ZERO_API zero_loss_scaler_params_t zero_loss_scaler_params_default(void);

/* Set one field by its DeepSpeed key name (the names above, without the "fp16." prefix);
 * integer and boolean keys take integral values. Returns ZERO_ERR_CONFIG naming the key and the
 * value for an unknown key or an out-of-range value; params is unchanged on failure. */
ZERO_API zero_status_t zero_loss_scaler_params_set(zero_loss_scaler_params_t *params,
                                                   const char *key, double value);

/* Check every field (ranges above). Returns ZERO_ERR_CONFIG naming the first bad one. */
ZERO_API zero_status_t zero_loss_scaler_params_check(const zero_loss_scaler_params_t *params);

/* Name of the i-th key (i in [0, zero_loss_scaler_key_count())), e.g. "initial_scale_power". */
ZERO_API int zero_loss_scaler_key_count(void);
ZERO_API const char *zero_loss_scaler_key_name(int i);

typedef struct zero_loss_scaler zero_loss_scaler_t;

/* Create a scaler; params NULL means the defaults. *out is owned by the caller (free with
 * zero_loss_scaler_free). Not thread-safe: one scaler per rank, used by one thread. */
ZERO_API zero_status_t zero_loss_scaler_init(zero_loss_scaler_t **out,
                                             const zero_loss_scaler_params_t *params);
ZERO_API void zero_loss_scaler_free(zero_loss_scaler_t *scaler); /* NULL is accepted */

/* The scale to multiply the next backward's loss by. */
ZERO_API double zero_loss_scaler_scale(const zero_loss_scaler_t *scaler);
/* 1 for dynamic scaling, 0 for a static scale. */
ZERO_API int zero_loss_scaler_is_dynamic(const zero_loss_scaler_t *scaler);

/* What update() decided for the step whose gradients were just checked. */
typedef struct zero_loss_scaler_result {
    int skip;          /* 1: overflow: drop the gradients, do not step optimizer or LR schedule */
    double used_scale; /* the scale these gradients carry: unscale them by 1 / used_scale */
    double next_scale; /* the scale for the next backward (== zero_loss_scaler_scale()) */
    int change;        /* -1 halved, 0 unchanged, +1 doubled */
} zero_loss_scaler_result_t;

/* Feed one step's overflow flag (nonzero = some gradient on some rank was inf or NaN). A static
 * scaler only reports skip = overflow. Returns ZERO_ERR_CONFIG if a dynamic scaler overflows
 * while its scale is already min_loss_scale and raise_error_at_min_scale is set (DeepSpeed's
 * "Current loss scale already at minimum"); the state is then unchanged. out may be NULL. */
ZERO_API zero_status_t zero_loss_scaler_update(zero_loss_scaler_t *scaler, int overflow,
                                               zero_loss_scaler_result_t *out);

/* The complete dynamic state, for checkpoints (plain data, save every field). */
typedef struct zero_loss_scaler_state {
    double scale;               /* cur_scale */
    int64_t iter;               /* cur_iter: update() calls so far */
    int64_t last_overflow_iter; /* -1 before the first overflow */
    int hysteresis_left;        /* cur_hysteresis, in [1, params.hysteresis] */
    int64_t skipped_steps;      /* overflowed (skipped) steps so far */
} zero_loss_scaler_state_t;

ZERO_API void zero_loss_scaler_get_state(const zero_loss_scaler_t *scaler,
                                         zero_loss_scaler_state_t *out);
/* Restore a saved state. Returns ZERO_ERR_INVALID_ARG naming the field if it is inconsistent
 * with this scaler's params (scale not finite or below min_loss_scale, hysteresis_left outside
 * [1, hysteresis], iter < 0, last_overflow_iter outside [-1, iter), ...); unchanged then. */
ZERO_API zero_status_t zero_loss_scaler_set_state(zero_loss_scaler_t *scaler,
                                                  const zero_loss_scaler_state_t *state);

#ifdef __cplusplus
}
#endif
#endif /* ZERO_OPTIM_H */
