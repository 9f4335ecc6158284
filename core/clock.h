/* Monotonic wall time, and the part of it a thread spent blocked on a device. Issue #8 asks for
 * the host's own CPU time per step: a step's wall time less its waits for the GPU. The waits are
 * the few synchronisations after which the host reads results (the acceptance's download, the
 * drafter's confidences); each adds its duration to a per-thread total (a step runs on one
 * thread), so the engine reads the total before and after a step without every module passing
 * timings up to it. */
#ifndef FLINT_CORE_CLOCK_H
#define FLINT_CORE_CLOCK_H

#ifdef __cplusplus
extern "C" {
#endif

/* Milliseconds on the monotonic clock. */
double flint_clock_ms(void);
/* Adds the time since t0 (a flint_clock_ms() reading taken before a synchronisation) to the
 * calling thread's waited total. */
void flint_clock_waited_since(double t0);
/* The calling thread's waited total in ms. */
double flint_clock_waited_ms(void);

#ifdef __cplusplus
}
#endif
#endif
