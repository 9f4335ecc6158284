/* Leveled logging to stderr. The level check happens before the arguments are formatted, so a
 * disabled debug line costs one compare. Colour only when stderr is a terminal. */
#ifndef FLINT_CORE_LOG_H
#define FLINT_CORE_LOG_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { FLINT_LOG_ERROR = 0, FLINT_LOG_WARN, FLINT_LOG_INFO, FLINT_LOG_DEBUG } flint_log_level;

extern flint_log_level flint_log_current;

void flint_log_set_level(flint_log_level level);
/* Parses "error|warn|info|debug"; returns -1 on an unknown name. */
int flint_log_parse_level(const char *name, flint_log_level *out);
void flint_log_write(flint_log_level level, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

#define FLINT_LOG(level, ...)                                                                 \
    do {                                                                                      \
        if ((level) <= flint_log_current) flint_log_write((level), __VA_ARGS__);              \
    } while (0)
#define flint_log_error(...) FLINT_LOG(FLINT_LOG_ERROR, __VA_ARGS__)
#define flint_log_warn(...) FLINT_LOG(FLINT_LOG_WARN, __VA_ARGS__)
#define flint_log_info(...) FLINT_LOG(FLINT_LOG_INFO, __VA_ARGS__)
#define flint_log_debug(...) FLINT_LOG(FLINT_LOG_DEBUG, __VA_ARGS__)

#ifdef __cplusplus
}
#endif
#endif
