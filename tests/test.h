/* A tiny test harness (redis testhelp.h style): CHECK records a failure with file and line and
 * goes on; test_report prints "N passed, N failed" and returns the exit status. */
#ifndef FLINT_TESTS_TEST_H
#define FLINT_TESTS_TEST_H

#include <stdio.h>

static int test_passed, test_failed;

#define CHECK(cond)                                                                     \
    do {                                                                                \
        if (cond) test_passed++;                                                        \
        else {                                                                          \
            test_failed++;                                                              \
            fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);             \
        }                                                                               \
    } while (0)

#define CHECKF(cond, ...)                                                               \
    do {                                                                                \
        if (cond) test_passed++;                                                        \
        else {                                                                          \
            test_failed++;                                                              \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);             \
            fprintf(stderr, __VA_ARGS__);                                               \
            fputc('\n', stderr);                                                        \
        }                                                                               \
    } while (0)

static inline int test_report(const char *name) {
    printf("%s: %d passed, %d failed\n", name, test_passed, test_failed);
    return test_failed ? 1 : 0;
}

#endif
