/* Device helpers shared by the CUDA kernel files of target/ (ops_cuda.cu, attn_cuda.cu): the
 * launch check, bf16 conversions that round exactly as the host's, 16-byte unpacking and warp
 * reductions. Private to the .cu files; C code includes ops_cuda.h only. */
#ifndef FLINT_TARGET_CUDA_COMMON_CUH
#define FLINT_TARGET_CUDA_COMMON_CUH

#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/status.h"       /* FLINT_ASSERT */
#include "target/ops_cuda.h"   /* the launchers, flint_cuda_attn */
#include "target/gemm_layout.h" /* where a packed weight element sits */

#define CUDA_CHECK(expr)                                                                            \
    do {                                                                                            \
        cudaError_t e_ = (expr);                                                                    \
        if (e_ != cudaSuccess) cuda_fail(#expr, e_, __FILE__, __LINE__);                            \
    } while (0)

static inline void cuda_fail(const char *expr, cudaError_t e, const char *file, int line) {
    fprintf(stderr, "flint: CUDA error: %s: %s (%s) at %s:%d\n", expr, cudaGetErrorString(e), cudaGetErrorName(e),
            file, line);
    fflush(stderr);
    abort();
}

/* ==== bf16 and warp helpers ==== */

static __device__ __forceinline__ float bf2f(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }

/* Round to nearest even, as flint_bf16_from_f32 on the host. */
static __device__ __forceinline__ uint16_t f2bf(float f) {
    uint32_t u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* SwiGLU of one element, as flint_ops_swiglu: g / (1 + expf(-g)) * up, rounded to bf16. The
 * swiglu kernel and the gate-up GEMM's fused epilogue (gemm_cuda.cu) share it, so both give the
 * same bits. */
static __device__ __forceinline__ uint16_t swiglu_bf16(float g, float u) {
    return f2bf(__fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, expf(-g))), u));
}

/* 8 bf16 packed in 16 bytes, element 2i in the low half of word i (little endian). */
static __device__ __forceinline__ void unpack8(float v[8], uint4 u) {
    v[0] = __uint_as_float(u.x << 16);
    v[1] = __uint_as_float(u.x & 0xffff0000u);
    v[2] = __uint_as_float(u.y << 16);
    v[3] = __uint_as_float(u.y & 0xffff0000u);
    v[4] = __uint_as_float(u.z << 16);
    v[5] = __uint_as_float(u.z & 0xffff0000u);
    v[6] = __uint_as_float(u.w << 16);
    v[7] = __uint_as_float(u.w & 0xffff0000u);
}

/* Elements k..k+7 of a bf16 row of length K as floats, zeros past K. vec: the row and k are
 * 16-byte aligned, so a full chunk is one load. Both paths give the same values. */
static __device__ __forceinline__ void load8(float v[8], const uint16_t *row, int k, int K, int vec) {
    if (vec && k + 8 <= K) {
        unpack8(v, __ldg((const uint4 *)(row + k)));
    } else {
#pragma unroll
        for (int e = 0; e < 8; e++) v[e] = k + e < K ? bf2f(row[k + e]) : 0.0f;
    }
}

/* xor butterfly: every lane ends with the same value (a + b == b + a exactly). */
static __device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

static __device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* ==== Programmatic dependent launch (sm_90) ====
 * A register-path GEMM (gemm_cuda.cu) is launched with the programmatic-serialization attribute:
 * it starts while the kernel before it still runs, requests its first weights (which nothing
 * writes), then waits (pdl_wait) for that kernel to finish and its writes to be visible before
 * it reads activations or writes outputs. The kernels that precede GEMMs let it start at once
 * (pdl_trigger at their top); the trigger only permits the next grid to be scheduled, never to
 * read early. Both are no-ops when a kernel is launched without the attribute. */
static __device__ __forceinline__ void pdl_trigger(void) { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }
static __device__ __forceinline__ void pdl_wait(void) { asm volatile("griddepcontrol.wait;" ::: "memory"); }

/* The other kernels (session 19; flint_cuda_kernel_pdl_configure): FLINT_LAUNCH launches with the
 * programmatic-serialization attribute while that is on (the default). Measured (H200, graphs):
 * the embedded pair's steps 4-9% faster (batch 1, K = 0: 0.266 -> 0.244 ms), qwen3-8b's verify
 * within +-1% (batch 1 x q 1 4.63 -> 4.54 ms). Session 15 measured the same 2-5% slower at 8-64
 * rows when the GEMMs triggered their successors early; they do not (gemm_cuda.cu). The
 * contract for every kernel so launched: pdl_wait() before its first access to memory that a
 * kernel before it writes, and before its first write; it may pdl_trigger() at once (its
 * successor is then scheduled early and waits in turn). Since a kernel can only finish after its
 * own wait returned, a wait covers every kernel before it, not only the last. The arguments go
 * through cudaLaunchKernelEx's template, which converts them to the kernel's parameter types as
 * <<<...>>> does. */
static inline cudaLaunchConfig_t flint_launch_config(dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                                                     cudaLaunchAttribute *attr) {
    cudaLaunchConfig_t c;
    memset(&c, 0, sizeof c);
    c.gridDim = grid;
    c.blockDim = block;
    c.dynamicSmemBytes = smem;
    c.stream = s;
    if (flint_cuda_kernel_pdl()) {
        memset(attr, 0, sizeof *attr);
        attr->id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr->val.programmaticStreamSerializationAllowed = 1;
        c.attrs = attr;
        c.numAttrs = 1;
    }
    return c;
}
#define FLINT_LAUNCH(kernel, grid, block, smem, stream, ...)                                                  \
    do {                                                                                                      \
        cudaLaunchAttribute fl_attr_;                                                                         \
        const cudaLaunchConfig_t fl_cfg_ =                                                                    \
            flint_launch_config(grid, block, smem, (cudaStream_t)(stream), &fl_attr_);                        \
        CUDA_CHECK(cudaLaunchKernelEx(&fl_cfg_, kernel, __VA_ARGS__));                                        \
    } while (0)

#endif
