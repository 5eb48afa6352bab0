/* check.h — the CHECK macro and pass/fail counters shared by the engine tests. */
#ifndef ZERO_TESTS_ZERO_CHECK_H
#define ZERO_TESTS_ZERO_CHECK_H

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
                fprintf(stderr, "\n");                                                             \
            }                                                                                      \
            failed++;                                                                              \
        }                                                                                          \
    } while (0)

static int check_report(void) {
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

#endif /* ZERO_TESTS_ZERO_CHECK_H */
