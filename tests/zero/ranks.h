/* ranks.h — run a function on N threads-backend ranks of one process (test helper). */
#ifndef ZERO_TESTS_ZERO_RANKS_H
#define ZERO_TESTS_ZERO_RANKS_H

#include "zero/zero.h"

#include <pthread.h>

typedef void (*rank_fn)(zero_comm_t *comm, void *arg);

typedef struct rank_job {
    zero_comm_t *comm;
    rank_fn fn;
    void *arg;
} rank_job_t;

static void *rank_job_main(void *p) {
    rank_job_t *j = p;
    j->fn(j->comm, j->arg);
    return NULL;
}

/* args[r] is passed to rank r. Returns the clique creation status. */
static zero_status_t run_ranks(int n, double timeout_s, rank_fn fn, void **args) {
    zero_comm_t *comms[16];
    zero_comm_params_t cp = zero_comm_params_default();
    cp.timeout_s = timeout_s;
    zero_status_t st = zero_comm_threads_init_all(n, comms, &cp);
    if (st) return st;
    pthread_t th[16];
    rank_job_t jobs[16];
    for (int r = 0; r < n; r++) {
        jobs[r] = (rank_job_t){comms[r], fn, args[r]};
        pthread_create(&th[r], NULL, rank_job_main, &jobs[r]);
    }
    for (int r = 0; r < n; r++) pthread_join(th[r], NULL);
    for (int r = 0; r < n; r++) zero_comm_free(comms[r]);
    return ZERO_OK;
}

#endif /* ZERO_TESTS_ZERO_RANKS_H */
