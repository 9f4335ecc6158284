/* Leveled logging (see log.h). One mutex keeps lines from interleaving across threads. */
#include "log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

flint_log_level flint_log_current = FLINT_LOG_WARN;
static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;

void flint_log_set_level(flint_log_level level) { flint_log_current = level; }

int flint_log_parse_level(const char *name, flint_log_level *out) {
    static const char *names[] = {"error", "warn", "info", "debug"};
    for (int i = 0; i < 4; i++)
        if (strcmp(name, names[i]) == 0) {
            *out = (flint_log_level)i;
            return 0;
        }
    return -1;
}

void flint_log_write(flint_log_level level, const char *fmt, ...) {
    static const char *tags[] = {"error", "warn", "info", "debug"};
    static const char *colors[] = {"\x1b[31m", "\x1b[33m", "\x1b[32m", "\x1b[90m"};
    int tty = isatty(2);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    pthread_mutex_lock(&log_mu);
    fprintf(stderr, "%02d:%02d:%02d.%03ld %s%-5s%s ", tm.tm_hour, tm.tm_min, tm.tm_sec,
            ts.tv_nsec / 1000000, tty ? colors[level] : "", tags[level], tty ? "\x1b[0m" : "");
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    pthread_mutex_unlock(&log_mu);
}
