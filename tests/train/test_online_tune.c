/* test_online_tune.c — the online tuner's decisions (src/train/online_tune.c) on a simulated
 * machine: a one-rank stage-3 engine whose step "takes" drift(step) x cost(settings in force),
 * the settings read back from the engine before each step (end to end: test_train_online).
 *
 * Oracles, from the cost model alone: with no setting faster, every candidate is undone and the
 * run ends on its start settings under a drift of 4% per step, up or down (which is twice the
 * 2% gain a candidate needs), and under a 50% jump in the middle of a trial; a setting 10% faster
 * is found and kept through the same drift; prefetch goes from a budget below every gathered
 * unit straight to the largest gathered unit; a candidate that was faster only while it was
 * tried loses the closing check against the start settings, which are restored. The tuner is
 * told of 2 ranks so that the bucket and overlap moves apply (the engine's one rank does not
 * care which bucket size it is given).
 */
#include "check.h"
#include "train/online_tune.h"
#include "zero/zero.h"

#include <string.h>

enum { STEPS_MAX = 400 };

typedef double (*cost_fn)(const zero_engine_tuning_t *s, int step);
typedef double (*drift_fn)(int step);

static zero_engine_tuning_t start = {16384, 0, 100};
static int64_t largest_gathered; /* padded, from the engine: the prefetch moves' step */

static double flat(const zero_engine_tuning_t *s, int step) {
    (void)s, (void)step;
    return 1.0;
}
static double overlap_faster(const zero_engine_tuning_t *s, int step) {
    (void)step;
    return s->overlap_comm ? 0.9 : 1.0;
}
static double prefetch_faster(const zero_engine_tuning_t *s, int step) {
    (void)step;
    return s->prefetch_bucket_elems >= largest_gathered ? 0.8 : 1.0;
}
/* a smaller bucket looks 10% faster during the first trial, and is 20% slower afterwards */
static double half_bucket_trap(const zero_engine_tuning_t *s, int step) {
    if (s->reduce_bucket_bytes >= start.reduce_bucket_bytes) return 1.0;
    return step <= 4 ? 0.9 : 1.2;
}

static double steady(int step) {
    (void)step;
    return 1.0;
}
static double rising(int step) { return 1.0 + 0.04 * step; }
static double falling(int step) { return 1.0 / (1.0 + 0.04 * step); }
static double jump(int step) { return step < 6 ? 1.0 : 1.5; }

static zero_engine_t *make_engine(void) {
    zero_engine_params_t p = zero_engine_params_default();
    p.stage = 3;
    p.persistence_threshold_elems = 100;
    p.reduce_bucket_bytes = start.reduce_bucket_bytes;
    p.overlap_comm = start.overlap_comm;
    p.prefetch_bucket_elems = start.prefetch_bucket_elems;
    zero_engine_t *eng = NULL;
    CHECK(zero_engine_init(&eng, &p) == ZERO_OK, "engine: %s", zero_last_error());
    if (!eng) return NULL;
    const int sizes[] = {3000, 50, 1000, 2000}; /* "b" (50) is persistent */
    const char *names[] = {"a", "b", "c", "d"};
    for (int i = 0; i < 4; i++) {
        zero_tensor_desc_t w = {"w", 1, {sizes[i]}, 0, ZERO_INIT_NORMAL, 0.1f};
        CHECK(zero_engine_add_unit(eng, names[i], &w, 1, NULL) == ZERO_OK, "unit %s: %s", names[i],
              zero_last_error());
    }
    largest_gathered = (int64_t)zero_engine_unit_padded_count(eng, 0); /* "a" */
    return eng;
}

/* Runs the tuner until it stops; its final settings into *end, its lines into log. */
static void simulate(const char *what, int interval, cost_fn cost, drift_fn drift,
                     zero_engine_tuning_t *end, char *log, size_t n) {
    *end = start;
    log[0] = 0;
    zero_engine_t *eng = make_engine();
    if (!eng) return;
    zero_online_tune_t t;
    zero__online_tune_init(&t, eng, interval);
    t.world = 2;
    FILE *out = tmpfile();
    int step = 1;
    for (; step <= STEPS_MAX && !t.done; step++) {
        zero_engine_tuning_t s;
        zero_engine_get_tuning(eng, &s);
        const double step_s = 0.1 * drift(step) * cost(&s, step);
        CHECK(zero__online_tune_step(&t, eng, NULL, step, step_s, out) == ZERO_OK,
              "%s: step %d: %s", what, step, zero_last_error());
    }
    CHECK(t.done, "%s: still tuning after %d steps", what, STEPS_MAX);
    zero_engine_get_tuning(eng, end);
    CHECK(memcmp(end, &t.base, sizeof *end) == 0, "%s: the engine does not run the tuner's base",
          what);
    if (out) {
        rewind(out);
        log[fread(log, 1, n - 1, out)] = 0;
        fclose(out);
    }
    zero_engine_free(eng);
}

static int is_start(const zero_engine_tuning_t *s) {
    return s->reduce_bucket_bytes == start.reduce_bucket_bytes &&
           s->overlap_comm == start.overlap_comm &&
           s->prefetch_bucket_elems == start.prefetch_bucket_elems;
}

static void nothing_faster(void) {
    static char log[1 << 14];
    const struct {
        const char *name;
        drift_fn drift;
        int interval;
    } cases[] = {
        {"steady", steady, 2}, {"rising", rising, 2}, {"falling", falling, 4}, {"jump", jump, 6}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        zero_engine_tuning_t end;
        simulate(cases[i].name, cases[i].interval, flat, cases[i].drift, &end, log, sizeof log);
        CHECK(is_start(&end), "%s drift: ended on bucket %zu overlap %d prefetch %lld",
              cases[i].name, end.reduce_bucket_bytes, end.overlap_comm,
              (long long)end.prefetch_bucket_elems);
        CHECK(!strstr(log, ", kept") && strstr(log, "settled on the start settings"),
              "%s drift:\n%s", cases[i].name, log);
    }
}

static void finds_faster(void) {
    static char log[1 << 14];
    zero_engine_tuning_t end;
    simulate("overlap 10% faster, rising", 2, overlap_faster, rising, &end, log, sizeof log);
    CHECK(end.overlap_comm == 1 && end.reduce_bucket_bytes == start.reduce_bucket_bytes &&
              end.prefetch_bucket_elems == start.prefetch_bucket_elems,
          "overlap: ended on bucket %zu overlap %d prefetch %lld:\n%s", end.reduce_bucket_bytes,
          end.overlap_comm, (long long)end.prefetch_bucket_elems, log);
    CHECK(strstr(log, "overlap_comm false -> true:") && strstr(log, "the settled ones kept"),
          "overlap:\n%s", log);

    simulate("prefetch 20% faster, falling", 2, prefetch_faster, falling, &end, log, sizeof log);
    char want[96];
    snprintf(want, sizeof want,
             "stage3_prefetch_bucket_size 100 -> %lld:", (long long)largest_gathered);
    const char *line = strstr(log, want);
    CHECK(line && !strncmp(strchr(line, '\n') - 4, "kept", 4), "prefetch: no '%s ... kept':\n%s",
          want, log);
    CHECK(end.prefetch_bucket_elems >= largest_gathered, "prefetch: ended on %lld:\n%s",
          (long long)end.prefetch_bucket_elems, log);
}

static void restores_start(void) {
    static char log[1 << 14];
    zero_engine_tuning_t end;
    simulate("trap", 2, half_bucket_trap, steady, &end, log, sizeof log);
    CHECK(strstr(log, "step 4: reduce_bucket_size 4096 -> 2048:") && strstr(log, "), kept"),
          "trap: the smaller bucket not kept at step 4:\n%s", log);
    CHECK(strstr(log, "the start settings restored") && is_start(&end), "trap:\n%s", log);
}

int main(void) {
    nothing_faster();
    finds_faster();
    restores_start();
    return check_report();
}
