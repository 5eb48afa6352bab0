/* loss_scaler.c — DeepSpeed's fp16 loss scaler (static and dynamic) as a state machine.
 *
 * Follows deepspeed/runtime/fp16/loss_scaler.py, DynamicLossScaler.update_scale, step for step
 * (deepspeed-notes.md section 2.12), so a run can be compared with DeepSpeed's scale trace:
 * - overflow: if hysteresis (delayed_shift) is 1 or the remaining hysteresis is 1, halve (not
 *   below the floor; at the floor fail or stay, see raise_error_at_min_scale); otherwise spend
 *   one unit of hysteresis. Either way remember the iteration of the overflow.
 * - clean: in consecutive mode refill the hysteresis; if (iter - last_overflow_iter) is a
 *   multiple of the window, double the scale (and refill the hysteresis in normal mode).
 * - the iteration counts every update, clean or not.
 * Not here: the overflow check itself (zero__has_nonfinite), the cross-rank agreement and the
 * unscale, which belong to the engine. Invariant: 1 <= hysteresis_left <= params.hysteresis.
 */
#include "zero/optim.h"

#include "core/core_internal.h"

#include <math.h>
#include <string.h>

struct zero_loss_scaler {
    zero_loss_scaler_params_t params;
    zero_loss_scaler_state_t st;
};

/* One row per config key: the tunables table that drives set() and the key list. */
typedef enum { KEY_DOUBLE, KEY_INT, KEY_BOOL } key_kind_t;

static const struct {
    const char *name;
    key_kind_t kind;
    size_t offset;
} keys[] = {
    {"loss_scale", KEY_DOUBLE, offsetof(zero_loss_scaler_params_t, loss_scale)},
    {"initial_scale_power", KEY_INT, offsetof(zero_loss_scaler_params_t, initial_scale_power)},
    {"loss_scale_window", KEY_INT, offsetof(zero_loss_scaler_params_t, loss_scale_window)},
    {"hysteresis", KEY_INT, offsetof(zero_loss_scaler_params_t, hysteresis)},
    {"consecutive_hysteresis", KEY_BOOL,
     offsetof(zero_loss_scaler_params_t, consecutive_hysteresis)},
    {"min_loss_scale", KEY_DOUBLE, offsetof(zero_loss_scaler_params_t, min_loss_scale)},
    {"raise_error_at_min_scale", KEY_BOOL,
     offsetof(zero_loss_scaler_params_t, raise_error_at_min_scale)},
};

zero_loss_scaler_params_t zero_loss_scaler_params_default(void) {
    zero_loss_scaler_params_t p = {
        .loss_scale = 0.0,
        .initial_scale_power = 16,
        .loss_scale_window = 1000,
        .hysteresis = 2,
        .consecutive_hysteresis = 0,
        .min_loss_scale = 1.0,
        .raise_error_at_min_scale = 1,
    };
    return p;
}

int zero_loss_scaler_key_count(void) { return (int)ZERO_ARRAY_LEN(keys); }

const char *zero_loss_scaler_key_name(int i) {
    return i >= 0 && i < (int)ZERO_ARRAY_LEN(keys) ? keys[i].name : NULL;
}

zero_status_t zero_loss_scaler_params_check(const zero_loss_scaler_params_t *p) {
    if (!p) return zero__error(ZERO_ERR_INVALID_ARG, "loss scaler params: NULL pointer");
    if (!isfinite(p->loss_scale) || p->loss_scale < 0.0)
        return zero__error(ZERO_ERR_CONFIG,
                           "fp16.loss_scale = %g (expected 0 for dynamic, or a finite scale > 0)",
                           p->loss_scale);
    if (p->initial_scale_power < 0 || p->initial_scale_power > 127)
        return zero__error(ZERO_ERR_CONFIG,
                           "fp16.initial_scale_power = %d (expected an integer in [0, 127])",
                           p->initial_scale_power);
    if (p->loss_scale_window < 1)
        return zero__error(ZERO_ERR_CONFIG, "fp16.loss_scale_window = %d (expected >= 1)",
                           p->loss_scale_window);
    if (p->hysteresis < 1)
        return zero__error(ZERO_ERR_CONFIG, "fp16.hysteresis = %d (expected >= 1)", p->hysteresis);
    if (p->consecutive_hysteresis != 0 && p->consecutive_hysteresis != 1)
        return zero__error(ZERO_ERR_CONFIG,
                           "fp16.consecutive_hysteresis = %d (expected true or false)",
                           p->consecutive_hysteresis);
    if (p->raise_error_at_min_scale != 0 && p->raise_error_at_min_scale != 1)
        return zero__error(ZERO_ERR_CONFIG,
                           "fp16.raise_error_at_min_scale = %d (expected true or false)",
                           p->raise_error_at_min_scale);
    if (!isfinite(p->min_loss_scale) || p->min_loss_scale <= 0.0)
        return zero__error(ZERO_ERR_CONFIG,
                           "fp16.min_loss_scale = %g (expected a finite value > 0)",
                           p->min_loss_scale);
    /* DeepSpeed accepts a start below the floor and then "halves" upwards to the floor; that
     * is a config mistake, so say so. */
    if (p->loss_scale == 0.0 && ldexp(1.0, p->initial_scale_power) < p->min_loss_scale)
        return zero__error(ZERO_ERR_CONFIG,
                           "fp16.initial_scale_power = %d gives 2^%d = %g, below "
                           "fp16.min_loss_scale = %g (expected 2^power >= min_loss_scale)",
                           p->initial_scale_power, p->initial_scale_power,
                           ldexp(1.0, p->initial_scale_power), p->min_loss_scale);
    return ZERO_OK;
}

zero_status_t zero_loss_scaler_params_set(zero_loss_scaler_params_t *params, const char *key,
                                          double value) {
    if (!params || !key)
        return zero__error(ZERO_ERR_INVALID_ARG, "loss scaler params_set: NULL params or key");
    for (size_t i = 0; i < ZERO_ARRAY_LEN(keys); i++) {
        if (strcmp(key, keys[i].name) != 0) continue;
        zero_loss_scaler_params_t p = *params;
        char *field = (char *)&p + keys[i].offset;
        if (keys[i].kind == KEY_DOUBLE) {
            memcpy(field, &value, sizeof value);
        } else {
            if (!isfinite(value) || value != floor(value) || fabs(value) > 1e9)
                return zero__error(ZERO_ERR_CONFIG, "fp16.%s = %g (expected %s)", key, value,
                                   keys[i].kind == KEY_BOOL ? "true or false" : "an integer");
            int v = (int)value;
            memcpy(field, &v, sizeof v);
        }
        zero_status_t st = zero_loss_scaler_params_check(&p);
        if (st != ZERO_OK) return st;
        *params = p;
        return ZERO_OK;
    }
    return zero__error(ZERO_ERR_CONFIG,
                       "unknown fp16 loss-scaler key '%s' (expected loss_scale, "
                       "initial_scale_power, loss_scale_window, hysteresis, "
                       "consecutive_hysteresis, min_loss_scale or raise_error_at_min_scale)",
                       key);
}

zero_status_t zero_loss_scaler_init(zero_loss_scaler_t **out,
                                    const zero_loss_scaler_params_t *params) {
    if (!out) return zero__error(ZERO_ERR_INVALID_ARG, "zero_loss_scaler_init: out is NULL");
    *out = NULL;
    zero_loss_scaler_params_t p = params ? *params : zero_loss_scaler_params_default();
    zero_status_t st = zero_loss_scaler_params_check(&p);
    if (st != ZERO_OK) return st;
    zero_loss_scaler_t *s = calloc(1, sizeof *s);
    if (!s)
        return zero__error(ZERO_ERR_OUT_OF_MEMORY, "loss scaler: %zu bytes for the state",
                           sizeof *s);
    s->params = p;
    s->st.scale = p.loss_scale > 0.0 ? p.loss_scale : ldexp(1.0, p.initial_scale_power);
    s->st.iter = 0;
    s->st.last_overflow_iter = -1;
    s->st.hysteresis_left = p.hysteresis;
    s->st.skipped_steps = 0;
    *out = s;
    return ZERO_OK;
}

void zero_loss_scaler_free(zero_loss_scaler_t *scaler) { free(scaler); }

double zero_loss_scaler_scale(const zero_loss_scaler_t *scaler) { return scaler->st.scale; }

int zero_loss_scaler_is_dynamic(const zero_loss_scaler_t *scaler) {
    return scaler->params.loss_scale == 0.0;
}

zero_status_t zero_loss_scaler_update(zero_loss_scaler_t *scaler, int overflow,
                                      zero_loss_scaler_result_t *out) {
    if (!scaler) return zero__error(ZERO_ERR_INVALID_ARG, "zero_loss_scaler_update: NULL scaler");
    const zero_loss_scaler_params_t *p = &scaler->params;
    zero_loss_scaler_state_t s = scaler->st; /* committed only on success: no side effects */
    zero_loss_scaler_result_t r = {.skip = overflow != 0, .used_scale = s.scale, .change = 0};

    if (p->loss_scale > 0.0) {
        /* Static: DeepSpeed's LossScaler never changes the scale, but the ZeRO optimizers
         * still skip an overflowed step. */
    } else if (overflow) {
        if (p->hysteresis == 1 || s.hysteresis_left == 1) {
            if (s.scale <= p->min_loss_scale) {
                if (p->raise_error_at_min_scale)
                    return zero__error(ZERO_ERR_CONFIG,
                                       "fp16 gradients overflowed at step %lld with the loss "
                                       "scale already at fp16.min_loss_scale = %g: training "
                                       "has diverged (expected finite gradients at the floor; "
                                       "lower the learning rate, use bf16, or lower "
                                       "min_loss_scale)",
                                       (long long)s.iter, p->min_loss_scale);
            } else {
                s.scale = ZERO_MAX(s.scale / 2.0, p->min_loss_scale);
                r.change = -1;
            }
            /* The hysteresis is NOT refilled here: once spent, every overflow halves until the
             * next growth (or, in consecutive mode, the next clean step). */
        } else {
            s.hysteresis_left -= 1;
        }
        s.last_overflow_iter = s.iter;
        s.skipped_steps += 1;
    } else {
        if (p->consecutive_hysteresis) s.hysteresis_left = p->hysteresis;
        if ((s.iter - s.last_overflow_iter) % p->loss_scale_window == 0) {
            if (!p->consecutive_hysteresis) s.hysteresis_left = p->hysteresis;
            /* Growth is unbounded in DeepSpeed; stop short of infinity only. */
            if (isfinite(s.scale * 2.0)) {
                s.scale *= 2.0;
                r.change = +1;
            }
        }
    }
    if (p->loss_scale > 0.0 && overflow) s.skipped_steps += 1;
    s.iter += 1;
    r.next_scale = s.scale;
    scaler->st = s;
    if (out) *out = r;
    return ZERO_OK;
}

void zero_loss_scaler_get_state(const zero_loss_scaler_t *scaler, zero_loss_scaler_state_t *out) {
    *out = scaler->st;
}

zero_status_t zero_loss_scaler_set_state(zero_loss_scaler_t *scaler,
                                         const zero_loss_scaler_state_t *state) {
    if (!scaler || !state)
        return zero__error(ZERO_ERR_INVALID_ARG, "zero_loss_scaler_set_state: NULL argument");
    const zero_loss_scaler_params_t *p = &scaler->params;
    const zero_loss_scaler_state_t *s = state;
    if (!isfinite(s->scale) || s->scale <= 0.0)
        return zero__error(ZERO_ERR_INVALID_ARG,
                           "loss scaler state: scale = %g (expected a finite value > 0)", s->scale);
    if (p->loss_scale > 0.0 && s->scale != p->loss_scale)
        return zero__error(ZERO_ERR_INVALID_ARG,
                           "loss scaler state: scale = %g but the static fp16.loss_scale is %g "
                           "(expected them equal)",
                           s->scale, p->loss_scale);
    if (p->loss_scale == 0.0 && s->scale < p->min_loss_scale)
        return zero__error(ZERO_ERR_INVALID_ARG,
                           "loss scaler state: scale = %g (expected >= fp16.min_loss_scale = %g)",
                           s->scale, p->min_loss_scale);
    if (s->iter < 0)
        return zero__error(ZERO_ERR_INVALID_ARG, "loss scaler state: iter = %lld (expected >= 0)",
                           (long long)s->iter);
    if (s->last_overflow_iter < -1 || s->last_overflow_iter >= s->iter)
        return zero__error(ZERO_ERR_INVALID_ARG,
                           "loss scaler state: last_overflow_iter = %lld (expected in [-1, "
                           "iter = %lld))",
                           (long long)s->last_overflow_iter, (long long)s->iter);
    if (s->hysteresis_left < 1 || s->hysteresis_left > p->hysteresis)
        return zero__error(ZERO_ERR_INVALID_ARG,
                           "loss scaler state: hysteresis_left = %d (expected in [1, "
                           "fp16.hysteresis = %d])",
                           s->hysteresis_left, p->hysteresis);
    if (s->skipped_steps < 0 || s->skipped_steps > s->iter)
        return zero__error(ZERO_ERR_INVALID_ARG,
                           "loss scaler state: skipped_steps = %lld (expected in [0, iter = %lld])",
                           (long long)s->skipped_steps, (long long)s->iter);
    scaler->st = *s;
    return ZERO_OK;
}
