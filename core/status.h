/* Two tiers of errors (DESIGN.md section 1, style.md habit 4).
 * - Broken internal invariants: FLINT_ASSERT prints expression, file and line, then aborts.
 * - Anything a file, a flag or a request can cause: the function returns -1 (or NULL) and
 *   fills a caller-supplied flint_err with a code and a message; the caller decides what to do.
 *   The server never exits on a request. */
#ifndef FLINT_CORE_STATUS_H
#define FLINT_CORE_STATUS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    FLINT_OK = 0,
    FLINT_ERR_IO,          /* missing file, read error */
    FLINT_ERR_FORMAT,      /* corrupt or inconsistent file contents */
    FLINT_ERR_UNSUPPORTED, /* valid input we do not handle (architecture, dtype) */
    FLINT_ERR_INVALID,     /* bad argument / option / request field */
    FLINT_ERR_NOMEM,       /* allocation failed or a pool is exhausted */
    FLINT_ERR_INTERNAL,
} flint_code;

typedef struct flint_err {
    flint_code code;
    char msg[1024];
} flint_err;

/* Fill err (when non-NULL) and return -1, so callers can write `return flint_err_set(...)`. */
int flint_err_set(flint_err *err, flint_code code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* Prepend context ("loading X: ") to an existing message. Returns -1. */
int flint_err_prefix(flint_err *err, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
void flint_err_clear(flint_err *err);
const char *flint_code_name(flint_code code);

void flint_assert_fail(const char *expr, const char *file, int line);
#define FLINT_ASSERT(x) ((x) ? (void)0 : flint_assert_fail(#x, __FILE__, __LINE__))

/* Allocation that aborts on failure: for start-up sized buffers whose size the caller has
 * already validated. Request-driven sizes must use plain malloc and report FLINT_ERR_NOMEM. */
void *flint_xmalloc(size_t n);
void *flint_xcalloc(size_t n, size_t size);
void *flint_xrealloc(void *p, size_t n);
char *flint_xstrdup(const char *s);

#ifdef __cplusplus
}
#endif
#endif
