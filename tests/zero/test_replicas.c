/* test_replicas.c — zero_engine_check_replicas finds a rank whose copy of the parameters drifted.
 *
 * A toy model of three units runs one step on 2, 3 and 4 threads-backend ranks at every stage
 * (fp32, and bf16 at stage 0 where the fp32 master is a full replica too). The check passes on
 * identical replicas; then the last rank alone changes one element of a replicated unit by one
 * ulp through zero_engine_params_write, and the check must fail on every rank with
 * ZERO_ERR_MISMATCH naming the step, that rank and that unit. At stage 3 the perturbed unit is
 * the persistent one (the others are shards, not replicas: changing a shard must not be
 * reported). One rank: always ZERO_OK.
 */
#include "check.h"
#include "ranks.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define UNITS 3
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static const size_t sizes[UNITS] = {40, 300, 500};

typedef struct rep_arg {
    int stage;
    zero_dtype_t dtype;
    int unit;       /* the unit the last rank perturbs */
    int replicated; /* it is a replica (expect a mismatch) */
    zero_status_t before, after, shard_only;
    char error[1024];
} rep_arg_t;

static zero_status_t one_step(zero_engine_t *eng) {
    for (int u = 0; u < UNITS; u++)
        if (!zero_unit_fetch(eng, u)) return ZERO_ERR_INTERNAL;
    for (int u = UNITS - 1; u >= 0; u--) {
        void *g = zero_unit_grads(eng, u);
        if (!g) return ZERO_ERR_INTERNAL;
        if (zero_engine_params(eng)->compute_dtype == ZERO_DTYPE_FP32) ((float *)g)[1] += 0.5f;
        zero_status_t st = zero_unit_grads_done(eng, u);
        zero_unit_release(eng, u);
        if (st) return st;
    }
    return zero_engine_step(eng, NULL);
}

static void rep_rank(zero_comm_t *comm, void *argp) {
    rep_arg_t *a = argp;
    const int rank = zero_comm_rank(comm), last = zero_comm_size(comm) - 1;
    zero_engine_params_t p = zero_engine_params_default();
    p.stage = a->stage;
    p.comm = comm;
    p.compute_dtype = a->dtype;
    p.persistence_threshold_elems = 100; /* stage 3: unit 0 persistent, units 1-2 sharded */
    p.reduce_bucket_bytes = 1400 * 4;
    zero_engine_t *eng = NULL;
    zero_status_t st = zero_engine_init(&eng, &p);
    for (int u = 0; !st && u < UNITS; u++) {
        zero_tensor_desc_t t = {"w", 1, {sizes[u]}, 0, ZERO_INIT_NORMAL, 0.1f};
        char name[8];
        snprintf(name, sizeof name, "u%d", u);
        st = zero_engine_add_unit(eng, name, &t, 1, NULL);
    }
    if (!st) st = one_step(eng);
    a->before = st ? st : zero_engine_check_replicas(eng);
    /* The last rank nudges one element it holds by one ulp. */
    size_t off = 0, count = sizes[a->unit];
    if (a->stage == 3 && a->unit != 0) zero_engine_shard_range(eng, a->unit, &off, &count);
    if (rank == last && !st) {
        float x;
        st = zero_engine_params_read(eng, a->unit, off, 1, &x);
        x = nextafterf(x, INFINITY);
        if (!st) st = zero_engine_params_write(eng, a->unit, off, 1, &x);
    }
    a->after = st ? st : zero_engine_check_replicas(eng);
    snprintf(a->error, sizeof a->error, "%s", a->after ? zero_last_error() : "");
    zero_engine_free(eng);
}

static void run_case(int n, int stage, zero_dtype_t dtype, int unit) {
    rep_arg_t a[4];
    void *args[4];
    memset(a, 0, sizeof a);
    int replicated = stage < 3 || unit == 0;
    for (int r = 0; r < n; r++) {
        a[r].stage = stage;
        a[r].dtype = dtype;
        a[r].unit = unit;
        args[r] = &a[r];
    }
    CHECK(run_ranks(n, 10.0, rep_rank, args) == ZERO_OK, "clique");
    char want_rank[32], want_unit[32];
    snprintf(want_rank, sizeof want_rank, "rank %d differ", n - 1);
    snprintf(want_unit, sizeof want_unit, "unit 'u%d'", unit);
    for (int r = 0; r < n; r++) {
        pthread_mutex_lock(&lock);
        CHECK(a[r].before == ZERO_OK, "%d ranks, stage %d, %s: rank %d: identical replicas gave %s",
              n, stage, zero_dtype_name(dtype), r, zero_status_str(a[r].before));
        if (replicated)
            CHECK(a[r].after == ZERO_ERR_MISMATCH && strstr(a[r].error, "after step 1") &&
                      strstr(a[r].error, want_rank) && strstr(a[r].error, want_unit),
                  "%d ranks, stage %d, %s, unit %d: rank %d: status %s, message '%s'", n, stage,
                  zero_dtype_name(dtype), unit, r, zero_status_str(a[r].after), a[r].error);
        else
            CHECK(a[r].after == ZERO_OK,
                  "%d ranks, stage 3, unit %d is a shard, not a replica: rank %d got %s '%s'", n,
                  unit, r, zero_status_str(a[r].after), a[r].error);
        pthread_mutex_unlock(&lock);
    }
    if (replicated && n == 3)
        printf("%d ranks, stage %d, %s: %s\n", n, stage, zero_dtype_name(dtype), a[0].error);
}

int main(void) {
    for (int n = 2; n <= 4; n++)
        for (int stage = 0; stage <= 3; stage++) {
            run_case(n, stage, ZERO_DTYPE_FP32, stage == 3 ? 0 : 1);
            if (stage == 3) run_case(n, stage, ZERO_DTYPE_FP32, 2);
        }
    /* bf16 at stage 0: a one-ulp change of the fp32 master may round to the same bf16 value;
     * the master is a replica too and must be compared. */
    run_case(2, 0, ZERO_DTYPE_BF16, 1);
    run_case(3, 0, ZERO_DTYPE_BF16, 2);
    /* One rank: nothing to compare. */
    zero_engine_params_t p = zero_engine_params_default();
    zero_engine_t *eng = NULL;
    CHECK(zero_engine_init(&eng, &p) == ZERO_OK, "init");
    zero_tensor_desc_t t = {"w", 1, {10}, 0, ZERO_INIT_NORMAL, 0.1f};
    CHECK(zero_engine_add_unit(eng, "u", &t, 1, NULL) == ZERO_OK, "unit");
    CHECK(zero_engine_check_replicas(eng) == ZERO_OK, "one rank");
    CHECK(zero_engine_check_replicas(NULL) == ZERO_ERR_INVALID_ARG, "NULL engine");
    zero_engine_free(eng);
    return check_report();
}
