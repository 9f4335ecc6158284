/* A growable byte buffer (always NUL-terminated once anything was added). Every size that reaches
 * it must be bounded by the caller: growth aborts on out-of-memory. */
#ifndef FLINT_CORE_SBUF_H
#define FLINT_CORE_SBUF_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct flint_sbuf {
    char *p;
    size_t n, cap;
} flint_sbuf;

void flint_sbuf_add(flint_sbuf *b, const void *s, size_t n);
void flint_sbuf_adds(flint_sbuf *b, const char *s);
void flint_sbuf_addf(flint_sbuf *b, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* A JSON string literal, quotes included. s must be valid UTF-8 (it is passed through). */
void flint_sbuf_add_json_str(flint_sbuf *b, const char *s, size_t n);
/* Empty it, keeping the memory. */
void flint_sbuf_clear(flint_sbuf *b);
void flint_sbuf_free(flint_sbuf *b);

#ifdef __cplusplus
}
#endif
#endif
