/* test_loss_scaler.c — the fp16 loss scaler against sequences worked out by hand from
 * DeepSpeed's rules (deepspeed/runtime/fp16/loss_scaler.py, DynamicLossScaler.update_scale):
 *
 *   overflow: if hysteresis == 1 or cur_hysteresis == 1: scale = max(scale / 2, min) (at the floor:
 *             raise, or stay with raise_error_at_min_scale off), else cur_hysteresis -= 1;
 *             last_overflow_iter = iter.
 *   clean:    if consecutive: cur_hysteresis = hysteresis;
 *             if (iter - last_overflow_iter) % window == 0: (non-consecutive: cur_hysteresis =
 *             hysteresis) and scale *= 2.
 *   iter += 1 after every update.
 *
 * Each expected row below was derived by hand from those rules (the comment on the row says
 * which rule fired), not by running the code. Also: static scale, defaults, key parsing and
 * checkpoint state get/set.
 */
#include "zero/optim.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include "check.h"

typedef struct {
    int overflow;   /* fed to update() */
    double used;    /* expected used_scale */
    double next;    /* expected next_scale */
    int change;     /* expected change */
    int hysteresis; /* expected cur_hysteresis after the update */
} step_t;

static void run(const char *name, const zero_loss_scaler_params_t *p, const step_t *steps, int n) {
    zero_loss_scaler_t *s = NULL;
    zero_status_t st = zero_loss_scaler_init(&s, p);
    CHECK(st == ZERO_OK, "%s: init: %s", name, zero_last_error());
    if (st != ZERO_OK) return;
    for (int i = 0; i < n; i++) {
        zero_loss_scaler_result_t r;
        st = zero_loss_scaler_update(s, steps[i].overflow, &r);
        zero_loss_scaler_state_t state;
        zero_loss_scaler_get_state(s, &state);
        CHECK(st == ZERO_OK, "%s step %d: %s", name, i, zero_last_error());
        CHECK(r.skip == steps[i].overflow, "%s step %d: skip %d", name, i, r.skip);
        CHECK(r.used_scale == steps[i].used, "%s step %d: used %g, want %g", name, i, r.used_scale,
              steps[i].used);
        CHECK(r.next_scale == steps[i].next, "%s step %d: next %g, want %g", name, i, r.next_scale,
              steps[i].next);
        CHECK(zero_loss_scaler_scale(s) == steps[i].next, "%s step %d: scale()", name, i);
        CHECK(r.change == steps[i].change, "%s step %d: change %d, want %d", name, i, r.change,
              steps[i].change);
        CHECK(state.hysteresis_left == steps[i].hysteresis, "%s step %d: hysteresis %d, want %d",
              name, i, state.hysteresis_left, steps[i].hysteresis);
        CHECK(state.iter == i + 1, "%s step %d: iter %lld", name, i, (long long)state.iter);
    }
    zero_loss_scaler_free(s);
}

static zero_loss_scaler_params_t small(int power, int window, int hysteresis, int consecutive) {
    zero_loss_scaler_params_t p = zero_loss_scaler_params_default();
    p.initial_scale_power = power;
    p.loss_scale_window = window;
    p.hysteresis = hysteresis;
    p.consecutive_hysteresis = consecutive;
    return p;
}

/* Hysteresis 2, window 3, start 2^4 = 16, normal (non-consecutive) mode. */
static void test_hysteresis(void) {
    zero_loss_scaler_params_t p = small(4, 3, 2, 0);
    const step_t seq[] = {
        {1, 16, 16, 0, 1},  /* it0 overflow, cur_h 2 != 1: spend one, cur_h = 1; last_ov = 0 */
        {1, 16, 8, -1, 1},  /* it1 overflow, cur_h == 1: halve 16 -> 8 (cur_h not refilled) */
        {0, 8, 8, 0, 1},    /* it2 clean, 2 - 1 = 1, 1 % 3 != 0: nothing */
        {0, 8, 8, 0, 1},    /* it3 clean, 3 - 1 = 2: nothing */
        {0, 8, 16, +1, 2},  /* it4 clean, 4 - 1 = 3, 3 % 3 == 0: refill cur_h = 2, double -> 16 */
        {1, 16, 16, 0, 1},  /* it5 overflow, cur_h 2: spend one -> 1; last_ov = 5 */
        {0, 16, 16, 0, 1},  /* it6 clean, 6 - 5 = 1: nothing (no refill in normal mode) */
        {1, 16, 8, -1, 1},  /* it7 overflow, cur_h 1: halve -> 8; last_ov = 7 */
        {1, 8, 4, -1, 1},   /* it8 overflow, cur_h still 1: halve -> 4; last_ov = 8 */
        {0, 4, 4, 0, 1},    /* it9  clean, 9 - 8 = 1 */
        {0, 4, 4, 0, 1},    /* it10 clean, 10 - 8 = 2 */
        {0, 4, 8, +1, 2},   /* it11 clean, 11 - 8 = 3: double -> 8, refill cur_h = 2 */
        {0, 8, 8, 0, 2},    /* it12 clean, 4 */
        {0, 8, 8, 0, 2},    /* it13 clean, 5 */
        {0, 8, 16, +1, 2},  /* it14 clean, 6 % 3 == 0: the window doubles again -> 16 */
        {0, 16, 16, 0, 2},  /* it15 clean, 7 */
        {0, 16, 16, 0, 2},  /* it16 clean, 8 */
        {0, 16, 32, +1, 2}, /* it17 clean, 9: and again -> 32 */
    };
    run("hysteresis=2", &p, seq, (int)(sizeof seq / sizeof seq[0]));
}

/* The same overflow pattern with consecutive_hysteresis: a clean step refills the hysteresis,
 * so isolated overflows never halve. */
static void test_consecutive(void) {
    zero_loss_scaler_params_t p = small(4, 3, 2, 1);
    const step_t seq[] = {
        {1, 16, 16, 0, 1}, /* it0 overflow, cur_h 2: spend -> 1; last_ov = 0 */
        {0, 16, 16, 0, 2}, /* it1 clean: consecutive refill cur_h = 2; 1 - 0 = 1: no growth */
        {1, 16, 16, 0, 1}, /* it2 overflow, cur_h 2: spend -> 1 (normal mode would halve here) */
        {1, 16, 8, -1, 1}, /* it3 overflow, cur_h 1: halve -> 8; last_ov = 3 */
        {0, 8, 8, 0, 2},   /* it4 clean: refill; 4 - 3 = 1 */
        {0, 8, 8, 0, 2},   /* it5 clean: 2 */
        {0, 8, 16, +1, 2}, /* it6 clean: 3 % 3 == 0: double -> 16 */
    };
    run("consecutive_hysteresis", &p, seq, (int)(sizeof seq / sizeof seq[0]));

    /* Same inputs without consecutive mode, for contrast: it2 already halves. */
    zero_loss_scaler_params_t q = small(4, 3, 2, 0);
    const step_t seq2[] = {
        {1, 16, 16, 0, 1}, /* it0 overflow: spend -> cur_h 1 */
        {0, 16, 16, 0, 1}, /* it1 clean: no refill in normal mode; 1 % 3 != 0 */
        {1, 16, 8, -1, 1}, /* it2 overflow, cur_h 1: halve -> 8 */
        {1, 8, 4, -1, 1},  /* it3 overflow: halve -> 4 */
        {0, 4, 4, 0, 1},   /* it4 clean: 1 */
        {0, 4, 4, 0, 1},   /* it5 clean: 2 */
        {0, 4, 8, +1, 2},  /* it6 clean: 3: double -> 8, refill */
    };
    run("normal (contrast)", &q, seq2, (int)(sizeof seq2 / sizeof seq2[0]));
}

/* hysteresis 1 (DeepSpeed's delayed_shift 1): every overflow halves; floor min_loss_scale. */
static void test_floor(void) {
    zero_loss_scaler_params_t p = small(3, 100, 1, 0);
    p.min_loss_scale = 3.0; /* not a power of two: the halving clamps to it */
    p.raise_error_at_min_scale = 0;
    const step_t seq[] = {
        {1, 8, 4, -1, 1}, /* it0 overflow: 8 -> 4 */
        {1, 4, 3, -1, 1}, /* it1 overflow: max(4 / 2, 3) = 3 */
        {1, 3, 3, 0, 1},  /* it2 overflow at the floor, raise off: stay at 3, step skipped */
        {0, 3, 3, 0, 1},  /* it3 clean: 3 - 2 = 1, window 100: nothing */
    };
    run("floor", &p, seq, (int)(sizeof seq / sizeof seq[0]));

    /* With raise_error_at_min_scale (the default) the overflow at the floor fails and changes
     * nothing. */
    p.raise_error_at_min_scale = 1;
    p.min_loss_scale = 2.0;
    p.initial_scale_power = 2; /* 4 */
    zero_loss_scaler_t *s = NULL;
    CHECK(zero_loss_scaler_init(&s, &p) == ZERO_OK, "init: %s", zero_last_error());
    zero_loss_scaler_result_t r;
    CHECK(zero_loss_scaler_update(s, 1, &r) == ZERO_OK && r.next_scale == 2.0, "4 -> 2");
    zero_loss_scaler_state_t before, after;
    zero_loss_scaler_get_state(s, &before);
    CHECK(zero_loss_scaler_update(s, 1, &r) == ZERO_ERR_CONFIG, "overflow at floor must fail");
    CHECK(strstr(zero_last_error(), "min_loss_scale") != NULL, "message: %s", zero_last_error());
    zero_loss_scaler_get_state(s, &after);
    CHECK(before.scale == after.scale && before.iter == after.iter &&
              before.last_overflow_iter == after.last_overflow_iter &&
              before.hysteresis_left == after.hysteresis_left &&
              before.skipped_steps == after.skipped_steps,
          "failed update changed the state");
    zero_loss_scaler_free(s);
}

/* Defaults: 2^16, window 1000, hysteresis 2 — growth exactly after 1000 clean steps. */
static void test_defaults(void) {
    zero_loss_scaler_params_t p = zero_loss_scaler_params_default();
    CHECK(p.loss_scale == 0.0 && p.initial_scale_power == 16 && p.loss_scale_window == 1000 &&
              p.hysteresis == 2 && p.consecutive_hysteresis == 0 && p.min_loss_scale == 1.0 &&
              p.raise_error_at_min_scale == 1,
          "defaults changed");
    zero_loss_scaler_t *s = NULL;
    CHECK(zero_loss_scaler_init(&s, NULL) == ZERO_OK, "init NULL params");
    CHECK(zero_loss_scaler_scale(s) == 65536.0, "default initial scale %g, want 2^16",
          zero_loss_scaler_scale(s));
    CHECK(zero_loss_scaler_is_dynamic(s), "default is dynamic");
    zero_loss_scaler_result_t r;
    /* last_overflow_iter starts at -1: it0..it998 give (it + 1) % 1000 != 0; it999 gives 1000. */
    int grew_at = -1;
    for (int it = 0; it < 1000; it++) {
        zero_loss_scaler_update(s, 0, &r);
        if (r.change != 0 && grew_at < 0) grew_at = it;
    }
    CHECK(grew_at == 999 && zero_loss_scaler_scale(s) == 131072.0, "grew at %d to %g", grew_at,
          zero_loss_scaler_scale(s));
    zero_loss_scaler_free(s);

    /* A config giving only some keys keeps our other defaults (never DeepSpeed's 2^32). */
    zero_loss_scaler_params_t q = zero_loss_scaler_params_default();
    CHECK(zero_loss_scaler_params_set(&q, "loss_scale_window", 500) == ZERO_OK, "set window");
    CHECK(q.initial_scale_power == 16 && q.loss_scale_window == 500, "subset of keys");
}

static void test_static(void) {
    zero_loss_scaler_params_t p = zero_loss_scaler_params_default();
    p.loss_scale = 128.0;
    p.loss_scale_window = 2;
    const step_t seq[] = {
        /* static: the scale never moves; overflowed steps are still skipped */
        {0, 128, 128, 0, 2}, {1, 128, 128, 0, 2}, {1, 128, 128, 0, 2},
        {0, 128, 128, 0, 2}, {0, 128, 128, 0, 2}, {0, 128, 128, 0, 2},
    };
    run("static", &p, seq, (int)(sizeof seq / sizeof seq[0]));
    zero_loss_scaler_t *s = NULL;
    zero_loss_scaler_init(&s, &p);
    CHECK(!zero_loss_scaler_is_dynamic(s), "static is not dynamic");
    zero_loss_scaler_update(s, 1, NULL);
    zero_loss_scaler_state_t st;
    zero_loss_scaler_get_state(s, &st);
    CHECK(st.skipped_steps == 1, "static skipped %lld", (long long)st.skipped_steps);
    zero_loss_scaler_free(s);
}

static int params_equal(const zero_loss_scaler_params_t *a, const zero_loss_scaler_params_t *b) {
    return a->loss_scale == b->loss_scale && a->initial_scale_power == b->initial_scale_power &&
           a->loss_scale_window == b->loss_scale_window && a->hysteresis == b->hysteresis &&
           a->consecutive_hysteresis == b->consecutive_hysteresis &&
           a->min_loss_scale == b->min_loss_scale &&
           a->raise_error_at_min_scale == b->raise_error_at_min_scale;
}

static void test_params(void) {
    zero_loss_scaler_params_t p = zero_loss_scaler_params_default(), q;
    CHECK(zero_loss_scaler_key_count() == 7, "key count %d", zero_loss_scaler_key_count());
    for (int i = 0; i < zero_loss_scaler_key_count(); i++)
        CHECK(zero_loss_scaler_key_name(i) != NULL, "key %d has no name", i);
    q = p;
    CHECK(zero_loss_scaler_params_set(&q, "nope", 1) == ZERO_ERR_CONFIG, "unknown key");
    CHECK(strstr(zero_last_error(), "nope") != NULL, "message names the key");
    CHECK(zero_loss_scaler_params_set(&q, "hysteresis", 0) == ZERO_ERR_CONFIG, "hysteresis 0");
    CHECK(strstr(zero_last_error(), "hysteresis") != NULL, "message: %s", zero_last_error());
    CHECK(zero_loss_scaler_params_set(&q, "initial_scale_power", 1.5) == ZERO_ERR_CONFIG,
          "non-integer power");
    CHECK(zero_loss_scaler_params_set(&q, "consecutive_hysteresis", 2) == ZERO_ERR_CONFIG,
          "bool 2");
    CHECK(zero_loss_scaler_params_set(&q, "loss_scale", -1) == ZERO_ERR_CONFIG, "negative scale");
    CHECK(zero_loss_scaler_params_set(&q, "min_loss_scale", 0) == ZERO_ERR_CONFIG, "min 0");
    CHECK(params_equal(&p, &q), "failed set changed the params");
    CHECK(zero_loss_scaler_params_set(&q, "initial_scale_power", 8) == ZERO_OK &&
              q.initial_scale_power == 8,
          "set power");
    CHECK(zero_loss_scaler_params_set(&q, "consecutive_hysteresis", 1) == ZERO_OK &&
              q.consecutive_hysteresis == 1,
          "set consecutive");
    /* 2^2 = 4 below a floor of 8 is a config mistake */
    q = p;
    q.initial_scale_power = 2;
    q.min_loss_scale = 8;
    zero_loss_scaler_t *s = NULL;
    CHECK(zero_loss_scaler_init(&s, &q) == ZERO_ERR_CONFIG && s == NULL, "start below floor");
}

/* A restored state continues exactly as the original. */
static void test_state(void) {
    zero_loss_scaler_params_t p = small(10, 4, 3, 0);
    zero_loss_scaler_t *a = NULL, *b = NULL;
    zero_loss_scaler_init(&a, &p);
    zero_loss_scaler_init(&b, &p);
    const int pattern[] = {1, 0, 1, 1, 1, 0, 0, 0, 0, 1, 0, 0};
    for (int i = 0; i < 12; i++) zero_loss_scaler_update(a, pattern[i], NULL);
    zero_loss_scaler_state_t st;
    zero_loss_scaler_get_state(a, &st);
    CHECK(st.skipped_steps == 5 && st.iter == 12 && st.last_overflow_iter == 9,
          "state after pattern: skipped %lld iter %lld last %lld", (long long)st.skipped_steps,
          (long long)st.iter, (long long)st.last_overflow_iter);
    CHECK(zero_loss_scaler_set_state(b, &st) == ZERO_OK, "set_state: %s", zero_last_error());
    int same = 1;
    for (int i = 0; i < 40; i++) {
        int ov = (i % 7) == 3;
        zero_loss_scaler_result_t ra, rb;
        zero_loss_scaler_update(a, ov, &ra);
        zero_loss_scaler_update(b, ov, &rb);
        same &= ra.skip == rb.skip && ra.used_scale == rb.used_scale &&
                ra.next_scale == rb.next_scale && ra.change == rb.change;
    }
    CHECK(same, "restored scaler diverged");

    zero_loss_scaler_state_t bad = st;
    bad.hysteresis_left = 4;
    CHECK(zero_loss_scaler_set_state(b, &bad) == ZERO_ERR_INVALID_ARG, "hysteresis 4 > 3");
    bad = st;
    bad.scale = NAN;
    CHECK(zero_loss_scaler_set_state(b, &bad) == ZERO_ERR_INVALID_ARG, "NaN scale");
    bad = st;
    bad.last_overflow_iter = bad.iter;
    CHECK(zero_loss_scaler_set_state(b, &bad) == ZERO_ERR_INVALID_ARG, "last_overflow >= iter");
    bad = st;
    bad.scale = 0.5;
    CHECK(zero_loss_scaler_set_state(b, &bad) == ZERO_ERR_INVALID_ARG, "scale below floor");
    zero_loss_scaler_free(a);
    zero_loss_scaler_free(b);
    zero_loss_scaler_free(NULL);
}

int main(void) {
    test_hysteresis();
    test_consecutive();
    test_floor();
    test_defaults();
    test_static();
    test_params();
    test_state();
    return check_report();
}
