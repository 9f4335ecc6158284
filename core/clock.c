/* core/clock.h: the monotonic clock and each thread's time spent waiting for a device. */
#include "core/clock.h"

#include <time.h>

static _Thread_local double waited_ms;

double flint_clock_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return 1e3 * (double)ts.tv_sec + 1e-6 * (double)ts.tv_nsec;
}

void flint_clock_waited_since(double t0) { waited_ms += flint_clock_ms() - t0; }

double flint_clock_waited_ms(void) { return waited_ms; }
