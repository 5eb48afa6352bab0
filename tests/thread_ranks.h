/* thread_ranks.h — run a function on N ranks of the threads backend, one thread per rank, in one
 * process (test helper).
 *
 * thread_ranks_run: on communicators the caller made (and frees), e.g. to inspect them before or
 * to free sub-communicators after. thread_ranks_clique (thread_ranks_clique_with: any params, such
 * as simulated nodes): on a fresh clique of n ranks with the given timeout, freed when every rank
 * has returned. */
#ifndef ZERO_TESTS_THREAD_RANKS_H
#define ZERO_TESTS_THREAD_RANKS_H

#include "zero/comm.h"

#include <pthread.h>
#include <stdlib.h>

typedef void (*thread_rank_fn)(zero_comm_t *comm, int rank, void *arg);

typedef struct thread_rank_job {
    zero_comm_t *comm;
    int rank;
    thread_rank_fn fn;
    void *arg;
} thread_rank_job_t;

static inline void *thread_rank_main(void *p) {
    thread_rank_job_t *j = p;
    j->fn(j->comm, j->rank, j->arg);
    return NULL;
}

/* fn(comms[r], r, arg) on n threads; returns when all have returned. A test that cannot start its
 * threads cannot go on: it aborts. */
static inline void thread_ranks_run(int n, zero_comm_t **comms, thread_rank_fn fn, void *arg) {
    if (n <= 0) return;
    pthread_t *th = calloc((size_t)n, sizeof *th);
    thread_rank_job_t *jobs = calloc((size_t)n, sizeof *jobs);
    if (!th || !jobs) abort();
    for (int r = 0; r < n; r++) {
        jobs[r] = (thread_rank_job_t){comms[r], r, fn, arg};
        if (pthread_create(&th[r], NULL, thread_rank_main, &jobs[r]) != 0) abort();
    }
    for (int r = 0; r < n; r++) pthread_join(th[r], NULL);
    free(th);
    free(jobs);
}

/* A clique of n ranks made with params p, fn on every rank, then the clique freed. Returns the
 * status of zero_comm_threads_init_all (fn does not run if it failed). */
static inline zero_status_t thread_ranks_clique_with(int n, const zero_comm_params_t *p,
                                                     thread_rank_fn fn, void *arg) {
    zero_comm_t **comms = calloc(n > 0 ? (size_t)n : 1, sizeof *comms);
    if (!comms) abort();
    zero_status_t st = zero_comm_threads_init_all(n, comms, p);
    if (st == ZERO_OK) {
        thread_ranks_run(n, comms, fn, arg);
        for (int r = 0; r < n; r++) zero_comm_free(comms[r]);
    }
    free(comms);
    return st;
}

/* The same with the default params and timeout_s seconds per collective. */
static inline zero_status_t thread_ranks_clique(int n, double timeout_s, thread_rank_fn fn,
                                                void *arg) {
    zero_comm_params_t p = zero_comm_params_default();
    p.timeout_s = timeout_s;
    return thread_ranks_clique_with(n, &p, fn, arg);
}

#endif /* ZERO_TESTS_THREAD_RANKS_H */
