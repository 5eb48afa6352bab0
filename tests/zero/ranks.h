/* ranks.h — run a function on N threads-backend ranks of one process, with one argument per rank
 * (test helper over tests/thread_ranks.h). */
#ifndef ZERO_TESTS_ZERO_RANKS_H
#define ZERO_TESTS_ZERO_RANKS_H

#include "zero/zero.h"

#include "thread_ranks.h"

typedef void (*rank_fn)(zero_comm_t *comm, void *arg);

typedef struct rank_args {
    rank_fn fn;
    void **args;
} rank_args_t;

static void rank_args_main(zero_comm_t *comm, int rank, void *p) {
    rank_args_t *a = p;
    a->fn(comm, a->args[rank]);
}

/* fn on a fresh clique of n ranks; args[r] is passed to rank r. Returns the clique creation
 * status. */
static inline zero_status_t run_ranks(int n, double timeout_s, rank_fn fn, void **args) {
    rank_args_t a = {fn, args};
    return thread_ranks_clique(n, timeout_s, rank_args_main, &a);
}

/* The same on a clique made with params p (e.g. ranks_per_node: simulated nodes). */
static inline zero_status_t run_ranks_with(int n, const zero_comm_params_t *p, rank_fn fn,
                                           void **args) {
    rank_args_t a = {fn, args};
    return thread_ranks_clique_with(n, p, rank_args_main, &a);
}

#endif /* ZERO_TESTS_ZERO_RANKS_H */
