/* coll_cases.h — the collective test matrix, shared by every comm test and both backends.
 *
 * coll_run_matrix() is called by every rank of a communicator (threads: one call per rank
 * thread; MPI: one per process). It walks the same deterministic list of cases on every rank:
 * each operation x counts {0, 1, n-1, 1009, and 1048579 for a subset} x dtypes x in-place /
 * out-of-place x blocking / post+wait / post+test. Inputs are a pure function of (case seed,
 * rank, index), so every rank can regenerate any rank's input, and the expected result of each
 * element is recomputed independently, in rank order, by a naive reference; results must be
 * bitwise equal. The traffic statistics (all, and to other nodes) are checked against a walk of
 * every transfer of the flat or hierarchical algorithm (zero/comm.h), written here without
 * calling the library; the communicator's nodes (at most 64 ranks) are read from it.
 *
 * Not here: argument errors, timeouts, split (see test_comm_errors.c and test_comm_split.c).
 * Threads cliques to run it on: tests/thread_ranks.h.
 */
#ifndef ZERO_TESTS_COLL_CASES_H
#define ZERO_TESTS_COLL_CASES_H

#include "zero/comm.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* The large count: above a megabyte of elements and odd, so no algorithm gets even blocks. */
#define COLL_BIG_COUNT ((size_t)1048579)

typedef struct coll_opts {
    int quick; /* sanitizer builds: the big count only for two cases */
    int big;   /* include the big count at all */
    int lite;  /* one completion mode per case instead of all three (sub-communicator tests) */
    int flat;  /* the communicator was made with zero_comm_params_t.flat (expected traffic) */
    /* Threads backend only, shared by the clique (NULL otherwise): lets barrier cases check that
     * no rank leaves a barrier before every rank has entered it. */
    atomic_int *barrier_arrivals;
    /* Optional: hashes[i] receives a hash of case i's result on this rank (0 for a case that
     * failed to run), for comparing two backends bitwise. Capacity coll_case_count(). */
    uint64_t *hashes;
    const char *label; /* prefix of failure messages, e.g. "threads n=4" */
    int max_messages;  /* failure messages printed per rank (default 10) */
} coll_opts_t;

typedef struct coll_tally {
    long passed, failed;
    size_t cases;
} coll_tally_t;

/* Number of cases coll_run_matrix runs on a communicator of n ranks with these options. */
size_t coll_case_count(int n, const coll_opts_t *opts);

/* Run the matrix as this rank of comm (collective: every rank must call it with the same opts).
 * Adds this rank's checks to *tally. Failures are printed to stderr. */
void coll_run_matrix(zero_comm_t *comm, const coll_opts_t *opts, coll_tally_t *tally);

/* Helpers shared by the other comm tests. */
/* True when msg contains the decimal number `value` as a whole token (not inside 1009, not -5). */
int coll_has_number(const char *msg, long value);
uint64_t coll_hash_bytes(const void *data, size_t bytes, uint64_t h);
/* The raw bits of input element idx of `rank` for a case seed (a pure function). */
uint64_t coll_gen_bits(zero_dtype_t dtype, uint64_t seed, int rank, uint64_t idx);
/* Fill buf[0, count) with rank's input for seed. */
void coll_fill(void *buf, size_t count, zero_dtype_t dtype, uint64_t seed, int rank,
               uint64_t first_idx);
/* out[i] = reference reduction over ranks members[0..n) of their input at index first_idx + i, in
 * the order given (members[k] is the rank whose input comes k-th). */
void coll_ref_reduce(void *out, size_t count, zero_dtype_t dtype, zero_op_t op, uint64_t seed,
                     const int *members, int n, uint64_t first_idx);

#endif /* ZERO_TESTS_COLL_CASES_H */
