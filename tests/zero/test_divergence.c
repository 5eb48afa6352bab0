/* test_divergence.c — a rank that calls the engine differently gets an error, on every rank,
 * naming the step and a unit, within the comm timeout (never a hang).
 *
 * A toy model of four units of different sizes runs on 2 and 3 threads-backend ranks. Case
 * "skip": from step 1 on, the last rank skips unit 2 (no fetch, no gradient), so collectives
 * disagree in size (stage 3 gathers, the reduce buckets). Case "swap": the last rank fetches two
 * same-sized units in the other order, which no collective can see; the step's schedule hash
 * must. Every stage; comm timeout 3 s; the test's own timeout is 60 s.
 */
#include "check.h"
#include "ranks.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define UNITS 4
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

typedef struct div_arg {
    int stage, swap;
    zero_status_t status;
    char error[1024];
    double seconds;
} div_arg_t;

static void div_rank(zero_comm_t *comm, void *argp) {
    div_arg_t *a = argp;
    const int rank = zero_comm_rank(comm), last = zero_comm_size(comm) - 1;
    /* swap case: units 1 and 2 have the same size */
    const size_t sizes[UNITS] = {40, 300, a->swap ? 300 : 170, 500};
    zero_engine_params_t p = zero_engine_params_default();
    p.stage = a->stage;
    p.comm = comm;
    p.persistence_threshold_elems = 0;
    p.reduce_bucket_bytes = 1400 * 4; /* a bucket per unit or two */
    zero_engine_t *eng = NULL;
    zero_status_t st = zero_engine_init(&eng, &p);
    for (int u = 0; !st && u < UNITS; u++) {
        zero_tensor_desc_t t = {"w", 1, {sizes[u]}, 0, ZERO_INIT_NORMAL, 0.1f};
        char name[8];
        snprintf(name, sizeof name, "u%d", u);
        st = zero_engine_add_unit(eng, name, &t, 1, NULL);
    }
    double t0 = zero_time_now();
    for (int step = 0; step < 3 && !st; step++) {
        int order[2 * UNITS], n = 0;
        for (int u = 0; u < UNITS; u++) order[n++] = u;
        for (int u = UNITS - 1; u >= 0; u--) order[n++] = u;
        int deviate = rank == last && step >= 1;
        for (int k = 0; k < n && !st; k++) {
            int u = order[k];
            if (deviate && !a->swap && u == 2) continue;
            if (deviate && a->swap && (u == 1 || u == 2)) u = 3 - u;
            if (!zero_unit_fetch(eng, u)) {
                st = ZERO_ERR_INTERNAL; /* replaced below by the engine's message */
                break;
            }
            if (k >= UNITS) {
                ((float *)zero_unit_grads(eng, u))[0] += 1.0f;
                st = zero_unit_grads_done(eng, u);
            }
            zero_unit_release(eng, u);
        }
        if (!st) st = zero_engine_step(eng, NULL);
    }
    a->status = st;
    snprintf(a->error, sizeof a->error, "%s", st ? zero_last_error() : "");
    a->seconds = zero_time_now() - t0;
    zero_engine_free(eng);
}

int main(void) {
    for (int swap = 0; swap <= 1; swap++)
        for (int n = 2; n <= 3; n++)
            for (int stage = 0; stage <= 3; stage++) {
                div_arg_t a[3];
                void *args[3];
                memset(a, 0, sizeof a);
                for (int r = 0; r < n; r++) a[r].stage = stage, a[r].swap = swap, args[r] = &a[r];
                CHECK(run_ranks(n, 3.0, div_rank, args) == ZERO_OK, "clique");
                for (int r = 0; r < n; r++) {
                    pthread_mutex_lock(&lock);
                    CHECK(a[r].status != ZERO_OK && strstr(a[r].error, "step 1") &&
                              strstr(a[r].error, "unit"),
                          "%s, %d ranks, stage %d, rank %d: status %s, message '%s'",
                          swap ? "swap" : "skip", n, stage, r, zero_status_str(a[r].status),
                          a[r].error);
                    CHECK(a[r].seconds < 20, "rank %d took %.1f s to fail", r, a[r].seconds);
                    pthread_mutex_unlock(&lock);
                    if (getenv("DIV_VERBOSE") || (stage == 3 && r == 0))
                        printf("%s, %d ranks, stage %d, rank %d: %s\n", swap ? "swap" : "skip", n,
                               stage, r, a[r].error);
                }
            }
    return check_report();
}
