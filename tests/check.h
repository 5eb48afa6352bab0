/* check.h — the CHECK macro and pass/fail counters used by the test binaries: a failed check prints
 * one line with its place, its message and the calling thread's last library error (the first 30
 * failures), counts, and check_report() prints "N passed, M failed" and gives the exit code.
 *
 * The counters are atomic and a failure line is written under the stderr lock, so rank threads
 * may CHECK at the same time. check_label, when set, is printed in brackets at the start of each
 * failure line (the case being run, or the MPI rank: see mpi_harness.h); set it only while no rank
 * thread runs. check_add() folds in counts kept elsewhere (the per-rank tallies of
 * tests/comm/coll_cases.c). */
#ifndef ZERO_TESTS_CHECK_H
#define ZERO_TESTS_CHECK_H

#include "zero/core.h"

#include <stdatomic.h>
#include <stdio.h>

static atomic_int passed, failed;
static const char *check_label;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (cond) {                                                                                \
            atomic_fetch_add(&passed, 1);                                                          \
        } else if (atomic_fetch_add(&failed, 1) < 30) {                                            \
            flockfile(stderr); /* one thread's line at a time */                                   \
            fprintf(stderr, "FAIL %s%s%s%s:%d: ", check_label ? "[" : "",                          \
                    check_label ? check_label : "", check_label ? "] " : "", __FILE__, __LINE__);  \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, " [last error: %s]\n", zero_last_error());                             \
            funlockfile(stderr);                                                                   \
        }                                                                                          \
    } while (0)

static inline void check_add(long n_passed, long n_failed) {
    atomic_fetch_add(&passed, (int)n_passed);
    atomic_fetch_add(&failed, (int)n_failed);
}

static inline int check_report(void) {
    printf("%d passed, %d failed\n", atomic_load(&passed), atomic_load(&failed));
    return atomic_load(&failed) ? 1 : 0;
}

#endif /* ZERO_TESTS_CHECK_H */
