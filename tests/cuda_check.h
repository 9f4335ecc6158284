/* The CUDA tests' check of a runtime call: a failing call is the machine's fault, not a failed
 * check, so the test stops at once with the call, the error and the place (exit status 2). */
#ifndef FLINT_TESTS_CUDA_CHECK_H
#define FLINT_TESTS_CUDA_CHECK_H

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>

#define CK(x)                                                                                           \
    do {                                                                                                \
        cudaError_t e_ = (x);                                                                           \
        if (e_ != cudaSuccess) {                                                                        \
            fprintf(stderr, "CUDA error: %s: %s at %s:%d\n", #x, cudaGetErrorString(e_), __FILE__, __LINE__); \
            exit(2);                                                                                    \
        }                                                                                               \
    } while (0)

#endif
