/* test_tune.c — `zero tune`'s search space and tuner orders, without running anything.
 *
 *   - space: fast mode is stage 0-3 x the autotuning.num_tuning_micro_batch_sizes largest
 *     micro-batches (powers of two dividing the per-rank batch, and the batch), each with
 *     micro x accumulation = the per-rank batch and the base's other settings; without fast the
 *     count is the product of the dimensions' distinct values (stage 3 alone doubles for the
 *     prefetch); autotuning.max_train_batch_size sets the global batch, and one the world does
 *     not divide fails naming the key;
 *   - pruning: a RAM limit below every estimate leaves no point fitting, one far above all;
 *   - orders: gridsearch keeps the grid's order, random is a permutation of the fitting points
 *     (the same for the same seed), model_based sorts by estimated step time keeping ties in grid
 *     order; pruned points are never in an order; model_based's re-estimate and next pick
 *     against a hand-computed example.
 */
#include "check.h"

#include "plan/tune.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void base_config(zero_train_config_t *c, int fast) {
    zero__train_config_default(c);
    zero__train_config_quiet(1);
    CHECK(!zero__train_config_set(c, "model.layers", "1"), "layers");
    CHECK(!zero__train_config_set(c, "model.dim", "32"), "dim");
    CHECK(!zero__train_config_set(c, "model.heads", "2"), "heads");
    CHECK(!zero__train_config_set(c, "model.seq", "16"), "seq");
    CHECK(!zero__train_config_set(c, "train_micro_batch_size_per_gpu", "1"), "micro");
    CHECK(!zero__train_config_set(c, "gradient_accumulation_steps", "8"), "accum");
    CHECK(!zero__train_config_set(c, "zero_optimization.stage", "3"), "stage");
    CHECK(!zero__train_config_set(c, "zero_optimization.reduce_bucket_size", "1000"), "bucket");
    CHECK(!zero__train_config_set(c, "zero_optimization.stage3_prefetch_bucket_size", "1000"),
          "prefetch");
    CHECK(!zero__train_config_set(c, "autotuning.fast", fast ? "true" : "false"), "fast");
    CHECK(!zero__train_config_check(c, 2), "check: %s", zero_last_error());
}

static const zero_tune_machine_t machine = {
    .world = 2, .cores = 4, .mpi = 0, .ram_bytes = 1ull << 40, .disk_bytes = 1ull << 40};

static void test_space(void) {
    zero_train_config_t c;
    zero_plan_calibration_t cal;
    zero__plan_calibration_default(&cal);
    base_config(&c, 1);
    zero_tune_point_t *p = NULL;
    int n = 0;
    CHECK(!zero__tune_space(&c, &machine, &cal, &p, &n), "fast space: %s", zero_last_error());
    CHECK(n == 4 * 3, "fast: 4 stages x 3 micro-batches, got %d", n);
    for (int i = 0; i < n; i++) {
        CHECK(p[i].micro * p[i].accum == 8, "point %d: %d x %d", i, p[i].micro, p[i].accum);
        CHECK(p[i].micro == 8 || p[i].micro == 4 || p[i].micro == 2, "the 3 largest: %d",
              p[i].micro);
        CHECK(p[i].stage == i / 3, "grid order: stage outermost");
        CHECK(p[i].reduce_bucket_elems == c.reduce_bucket_elems && p[i].threads == 2 &&
                  p[i].ranks_per_process == 2,
              "fast keeps the base's settings");
        CHECK(p[i].fits && p[i].plan_step_s > 0, "priced and fitting in 1 TiB");
    }
    free(p);

    base_config(&c, 0); /* buckets {1e3, 5e8} x overlap {on, off} x threads {cores / world = 2,
                           cores = 4}: 8 per micro-batch, x prefetch {1e3, 5e7} at stage 3 */
    CHECK(!zero__tune_space(&c, &machine, &cal, &p, &n), "full space: %s", zero_last_error());
    CHECK(n == (3 * 8 + 16) * 3, "full: %d points", n);
    free(p);

    base_config(&c, 1);
    CHECK(!zero__train_config_set(&c, "autotuning.max_train_batch_size", "32"), "max batch");
    CHECK(!zero__tune_space(&c, &machine, &cal, &p, &n), "max batch: %s", zero_last_error());
    CHECK(n == 12 && p[0].micro * p[0].accum == 16, "per-rank batch 16: %d x %d", p[0].micro,
          p[0].accum);
    free(p);
    CHECK(!zero__train_config_set(&c, "autotuning.max_train_batch_size", "7"), "odd batch");
    CHECK(zero__tune_space(&c, &machine, &cal, &p, &n) == ZERO_ERR_CONFIG &&
              strstr(zero_last_error(), "autotuning.max_train_batch_size"),
          "an odd batch over 2 ranks: %s", zero_last_error());

    base_config(&c, 1);
    zero_tune_machine_t small = machine;
    small.ram_bytes = 1024;
    CHECK(!zero__tune_space(&c, &small, &cal, &p, &n), "small RAM");
    int fit = 0;
    for (int i = 0; i < n; i++) fit += p[i].fits;
    CHECK(fit == 0, "nothing fits 1 KiB: %d", fit);
    int order[16];
    CHECK(zero__tune_order("gridsearch", p, n, 1, order) == 0, "pruned points are not run");
    free(p);
}

static void test_order(void) {
    zero_tune_point_t p[6];
    memset(p, 0, sizeof p);
    const double t[6] = {3, 1, 2, 1, 0.5, 9};
    for (int i = 0; i < 6; i++) {
        p[i].plan_step_s = t[i];
        p[i].fits = i != 4; /* the fastest estimate does not fit */
    }
    int o[6];
    CHECK(zero__tune_order("gridsearch", p, 6, 1, o) == 5, "grid: the 5 fitting");
    const int grid[5] = {0, 1, 2, 3, 5};
    CHECK(!memcmp(o, grid, sizeof grid), "grid order");
    CHECK(zero__tune_order("model_based", p, 6, 1, o) == 5, "model_based: 5");
    const int model[5] = {1, 3, 2, 0, 5}; /* 1 and 3 tie: grid order */
    CHECK(!memcmp(o, model, sizeof model), "model_based: %d %d %d %d %d", o[0], o[1], o[2], o[3],
          o[4]);
    int r1[6], r2[6];
    CHECK(zero__tune_order("random", p, 6, 7, r1) == 5, "random: 5");
    zero__tune_order("random", p, 6, 7, r2);
    CHECK(!memcmp(r1, r2, 5 * sizeof *r1), "random: the same seed, the same order");
    int seen[6] = {0};
    for (int i = 0; i < 5; i++) seen[r1[i]]++;
    CHECK(seen[0] == 1 && seen[1] == 1 && seen[2] == 1 && seen[3] == 1 && seen[5] == 1 &&
              seen[4] == 0,
          "random: each fitting point once");
}

/* model_based's correction: two trials at stage 0 ran at 2x and 4x their plans (mean 3x), one
 * at stage 1 at 1x: stage 0's points are scaled by 3, stage 1's by 1, the others by the mean of
 * all three ratios, 7/3. */
static void test_model_estimate(void) {
    zero_tune_point_t p[5];
    memset(p, 0, sizeof p);
    const int stage[5] = {0, 0, 1, 2, 0};
    const double plan[5] = {1, 2, 3, 4, 5}, measured[5] = {2, 8, 3, 0, 0};
    for (int i = 0; i < 5; i++) {
        p[i].stage = stage[i];
        p[i].plan_step_s = plan[i];
    }
    double est[5];
    zero__tune_model_estimate(p, 5, measured, est);
    const double want[5] = {3, 6, 3, 4 * 7.0 / 3, 15};
    for (int i = 0; i < 5; i++)
        CHECK(fabs(est[i] - want[i]) < 1e-12, "point %d: %g, expected %g", i, est[i], want[i]);
    const double none[5] = {0};
    zero__tune_model_estimate(p, 5, none, est);
    for (int i = 0; i < 5; i++) CHECK(est[i] == plan[i], "before any trial: the plan");

    /* next: points 0-2 ran; left 3 (stage 2, 28/3) and 4 (stage 0, 15): stage 2 has not run */
    const int ran[5] = {1, 1, 1, 0, 0}, left[2] = {4, 3};
    CHECK(zero__tune_model_next(p, 5, measured, ran, left, 2) == 1, "an untried stage first");
    /* once every stage ran: the smallest estimate */
    const int ran_all[5] = {1, 1, 1, 1, 0}, left0[2] = {4, 1};
    CHECK(zero__tune_model_next(p, 5, measured, ran_all, left0, 2) == 1,
          "then the smallest estimate (6 < 15)");
}

int main(void) {
    zero_log_set_level(ZERO_LOG_ERROR);
    test_space();
    test_order();
    test_model_estimate();
    return check_report();
}
