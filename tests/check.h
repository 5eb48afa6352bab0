/* check.h — the CHECK macro and pass/fail counters used by the test binaries: a failed check prints
 * its place and message (the first 30), counts, and check_report() prints "N passed, M failed" and
 * gives the exit code. */
#ifndef ZERO_TESTS_CHECK_H
#define ZERO_TESTS_CHECK_H

#include "zero/core.h"

#include <stdio.h>

static int passed, failed;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (cond) {                                                                                \
            passed++;                                                                              \
        } else {                                                                                   \
            if (failed < 30) {                                                                     \
                fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                               \
                fprintf(stderr, __VA_ARGS__);                                                      \
                fprintf(stderr, " [last error: %s]\n", zero_last_error());                         \
            }                                                                                      \
            failed++;                                                                              \
        }                                                                                          \
    } while (0)

static inline int check_report(void) {
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

#endif /* ZERO_TESTS_CHECK_H */
