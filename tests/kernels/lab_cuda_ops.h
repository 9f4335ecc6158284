/* The CUDA kernel labs (timings, not assertions), split from test_cuda_ops.c, which runs them
 * after its checks (or alone: --lab-small, --lab-gemm); their helpers are cuda_test_util.h's. */
#ifndef FLINT_TESTS_LAB_CUDA_OPS_H
#define FLINT_TESTS_LAB_CUDA_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/cuda_test_util.h" /* random inputs (test_cuda_ops.c's seed), a checked malloc */

/* lab_cuda_ops.c */
void lab_gemm(void);                        /* every GEMM tiling at qwen3-8b's projection shapes */
void lab_gemm_small(void);                  /* the small-M register path, PDL off / on */
void lab_gemm_one(int variant, int M, int N, int K); /* one tiling at one shape (a profiler's run) */
void lab_gemm_large(void);                  /* the warpgroup tilings and the dispatch at 96..512 rows */
void lab_attention(void);                   /* attention at qwen3-8b's layer shape */
void lab_glu(void);                         /* the gate-up GEMM: + swiglu kernel vs SwiGLU fused */

#endif
