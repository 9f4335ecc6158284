/* CUDA kernels of the forward (see ops_cuda.h), first version. What each kernel promises:
 * - every output element is computed by one fixed sequence of IEEE operations that depends only
 *   on the shapes and on that row's own data (never on the number of rows in the launch, the
 *   row's place in it, or the grid), so rows are bit-identical alone or in any batch;
 * - multiplies and adds that the CPU reference does separately are written __fmul_rn / __fadd_rn
 *   where the kernel mirrors the reference step for step (norms, RoPE, SwiGLU), so the two differ
 *   only where a reduction order must differ; sums are explicit fmaf where they are new;
 * - no allocation, no synchronisation; a launch error aborts (CUDA_CHECK).
 * C-style CUDA: no templates. Kernels that differ by a tile size share one __forceinline__ body
 * with the size as a constant argument, bounded loops over the largest size and `if (m < MR)`
 * guards, so register arrays are only ever indexed by constants. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/status.h"       /* FLINT_ASSERT */
#include "target/ops_cuda.h"   /* the launchers, flint_cuda_attn */

#define CUDA_CHECK(expr)                                                                            \
    do {                                                                                            \
        cudaError_t e_ = (expr);                                                                    \
        if (e_ != cudaSuccess) cuda_fail(#expr, e_, __FILE__, __LINE__);                            \
    } while (0)

static void cuda_fail(const char *expr, cudaError_t e, const char *file, int line) {
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

/* ==== Embedding, norms, RoPE, KV store, SwiGLU, add ==== */

static __global__ void embed_kernel(float *out, const uint16_t *embed, const int32_t *tokens, int hidden) {
    const int r = blockIdx.x;
    const uint16_t *e = embed + (size_t)tokens[r] * hidden;
    float *o = out + (size_t)r * hidden;
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) o[i] = bf2f(e[i]);
}

void flint_cuda_embed(float *out, const uint16_t *embed, const int32_t *tokens, int n_rows, int hidden,
                      flint_cuda_stream s) {
    FLINT_ASSERT(n_rows >= 0 && hidden > 0);
    if (n_rows == 0) return;
    embed_kernel<<<n_rows, 256, 0, s>>>(out, embed, tokens, hidden);
    CUDA_CHECK(cudaGetLastError());
}

#define NORM_THREADS 256

/* One block per row: each thread sums squares of a strided slice with fma, warps reduce by
 * butterfly, then every thread adds the 8 warp sums in order. */
static __global__ void __launch_bounds__(NORM_THREADS)
rmsnorm_kernel(uint16_t *out, int ldo, const float *x, int ldx, const int32_t *rows, const uint16_t *w, int n,
               float eps) {
    __shared__ float part[NORM_THREADS / 32];
    const int i = blockIdx.x;
    const float *xr = x + (size_t)(rows ? rows[i] : i) * ldx;
    float ss = 0.0f;
    for (int k = threadIdx.x; k < n; k += NORM_THREADS) ss = fmaf(xr[k], xr[k], ss);
    ss = warp_sum(ss);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = ss;
    __syncthreads();
    float tot = 0.0f;
#pragma unroll
    for (int k = 0; k < NORM_THREADS / 32; k++) tot = __fadd_rn(tot, part[k]);
    const float inv = 1.0f / sqrtf(tot / (float)n + eps); /* as flint_ops_rmsnorm */
    uint16_t *o = out + (size_t)i * ldo;
    for (int k = threadIdx.x; k < n; k += NORM_THREADS) o[k] = f2bf(__fmul_rn(__fmul_rn(xr[k], inv), bf2f(w[k])));
}

void flint_cuda_rmsnorm(uint16_t *out, int ldo, const float *x, int ldx, const int32_t *rows, const uint16_t *w,
                        int n_rows, int n, float eps, flint_cuda_stream s) {
    FLINT_ASSERT(n_rows >= 0 && n > 0 && ldo >= n && ldx >= n && w);
    if (n_rows == 0) return;
    rmsnorm_kernel<<<n_rows, NORM_THREADS, 0, s>>>(out, ldo, x, ldx, rows, w, n, eps);
    CUDA_CHECK(cudaGetLastError());
}

#define HEAD_WARPS 4

/* One warp per (row, head). The norm's sum of squares is a butterfly over lanes; the RoPE pair
 * (i, i + half) is owned by one lane, which reads both values after the __syncwarp that ends
 * every lane's reads for the norm. The arithmetic mirrors flint_ops_rmsnorm + flint_ops_rope. */
static __global__ void __launch_bounds__(HEAD_WARPS * 32)
qk_norm_rope_kernel(float *x, int ldx, int n_rows, int n_a, const uint16_t *w_a, int n_b, const uint16_t *w_b,
                    int hd, float eps, const float *cos_t, const float *sin_t, const int32_t *pos) {
    const int nh = n_a + n_b, lane = threadIdx.x & 31;
    const int item = blockIdx.x * HEAD_WARPS + (threadIdx.x >> 5);
    if (item >= n_rows * nh) return; /* the whole warp */
    const int r = item / nh, h = item % nh, half = hd / 2;
    float *xh = x + (size_t)r * ldx + (size_t)h * hd;
    const uint16_t *w = h < n_a ? w_a : w_b;
    float inv = 1.0f;
    if (w) {
        float ss = 0.0f;
        for (int d = lane; d < hd; d += 32) ss = fmaf(xh[d], xh[d], ss);
        ss = warp_sum(ss);
        inv = 1.0f / sqrtf(ss / (float)hd + eps);
    }
    __syncwarp();
    const int p = pos[r];
    const float *cs = cos_t + (size_t)p * half, *sn = sin_t + (size_t)p * half;
    for (int i = lane; i < half; i += 32) {
        float a = xh[i], b = xh[i + half];
        if (w) {
            a = __fmul_rn(__fmul_rn(a, inv), bf2f(w[i]));
            b = __fmul_rn(__fmul_rn(b, inv), bf2f(w[i + half]));
        }
        xh[i] = __fsub_rn(__fmul_rn(a, cs[i]), __fmul_rn(b, sn[i]));
        xh[i + half] = __fadd_rn(__fmul_rn(b, cs[i]), __fmul_rn(a, sn[i]));
    }
}

void flint_cuda_qk_norm_rope(float *x, int ldx, int n_rows, int n_a, const uint16_t *w_a, int n_b,
                             const uint16_t *w_b, int head_dim, float eps, const float *rope_cos,
                             const float *rope_sin, const int32_t *pos, flint_cuda_stream s) {
    FLINT_ASSERT(n_rows >= 0 && n_a >= 0 && n_b >= 0 && head_dim > 0 && head_dim % 2 == 0);
    FLINT_ASSERT(ldx >= (n_a + n_b) * head_dim);
    long items = (long)n_rows * (n_a + n_b);
    if (items == 0) return;
    FLINT_ASSERT(items < (1L << 31));
    int blocks = (int)((items + HEAD_WARPS - 1) / HEAD_WARPS);
    qk_norm_rope_kernel<<<blocks, HEAD_WARPS * 32, 0, s>>>(x, ldx, n_rows, n_a, w_a, n_b, w_b, head_dim, eps,
                                                            rope_cos, rope_sin, pos);
    CUDA_CHECK(cudaGetLastError());
}

static __global__ void kv_store_kernel(uint16_t *kc, uint16_t *vc, const float *k, const float *v, int ld, const int32_t *pos,
                                const int32_t *row_seq, const int32_t *bt, int bt_stride, int n, int bs) {
    const int r = blockIdx.x, p = pos[r];
    const int32_t blk = bt[(size_t)row_seq[r] * bt_stride + p / bs];
    const size_t base = ((size_t)blk * bs + p % bs) * n; /* n = n_kv_heads * head_dim per slot */
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        kc[base + i] = f2bf(k[(size_t)r * ld + i]);
        vc[base + i] = f2bf(v[(size_t)r * ld + i]);
    }
}

void flint_cuda_kv_store(uint16_t *k_cache, uint16_t *v_cache, const float *k, const float *v, int ld,
                         const int32_t *pos, const int32_t *row_seq, const int32_t *block_tables, int bt_stride,
                         int n_rows, int n_kv_heads, int head_dim, int block_size, flint_cuda_stream s) {
    FLINT_ASSERT(n_rows >= 0 && n_kv_heads > 0 && head_dim > 0 && block_size > 0 && bt_stride > 0);
    FLINT_ASSERT(ld >= n_kv_heads * head_dim);
    if (n_rows == 0) return;
    kv_store_kernel<<<n_rows, 128, 0, s>>>(k_cache, v_cache, k, v, ld, pos, row_seq, block_tables, bt_stride,
                                           n_kv_heads * head_dim, block_size);
    CUDA_CHECK(cudaGetLastError());
}

static __global__ void swiglu_kernel(uint16_t *out, int ldo, const float *gu, int ldg, int n) {
    const int r = blockIdx.y;
    const float *g = gu + (size_t)r * ldg, *u = g + n;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        float gi = g[i];
        /* flint_ops_swiglu: g / (1 + expf(-g)) * up */
        out[(size_t)r * ldo + i] = f2bf(__fmul_rn(__fdiv_rn(gi, __fadd_rn(1.0f, expf(-gi))), u[i]));
    }
}

void flint_cuda_swiglu(uint16_t *out, int ldo, const float *gu, int ldg, int n_rows, int n, flint_cuda_stream s) {
    FLINT_ASSERT(n_rows >= 0 && n_rows <= 65535 && n > 0 && ldo >= n && ldg >= 2 * n);
    if (n_rows == 0) return;
    int bx = (n + 255) / 256;
    if (bx > 64) bx = 64;
    swiglu_kernel<<<dim3(bx, n_rows), 256, 0, s>>>(out, ldo, gu, ldg, n);
    CUDA_CHECK(cudaGetLastError());
}

static __global__ void add_kernel(float *y, const float *x, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        y[i] = __fadd_rn(y[i], x[i]);
}

void flint_cuda_add(float *y, const float *x, size_t n, flint_cuda_stream s) {
    if (n == 0) return;
    size_t b = (n + 255) / 256;
    add_kernel<<<(unsigned)(b < 4096 ? b : 4096), 256, 0, s>>>(y, x, n);
    CUDA_CHECK(cudaGetLastError());
}

/* ==== GEMM: y (+)= x W^T, bf16 in, fp32 accumulate and out ====
 * A block of GEMM_WARPS warps computes a tile of MR rows x GEMM_NR outputs over the whole of K.
 * Lane l of warp w takes the 8-element chunks c = 128 i + 32 w + l in increasing i and adds
 * x * w with fmaf in element order into one accumulator per (row, output); then a butterfly over
 * the lanes and (w0 + w1) + (w2 + w3) over the warps. That order is fixed by K alone: MR (1, 2,
 * 4 or 8 rows per tile, picked from M) only decides how many rows share each weight load. */
#define GEMM_NR 4
#define GEMM_WARPS 4
#define GEMM_MAX_MR 8

static __device__ __forceinline__ void gemm_body(float *y, int ldy, const uint16_t *x, int ldx, const uint16_t *w,
                                                 int M, int N, int K, int accumulate, int vec, const int MR) {
    __shared__ float part[GEMM_WARPS][GEMM_MAX_MR][GEMM_NR];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int n0 = blockIdx.x * GEMM_NR, m0 = blockIdx.y * MR;
    float acc[GEMM_MAX_MR][GEMM_NR];
#pragma unroll
    for (int m = 0; m < GEMM_MAX_MR; m++)
#pragma unroll
        for (int n = 0; n < GEMM_NR; n++) acc[m][n] = 0.0f;

    for (int k = (warp * 32 + lane) * 8; k < K; k += GEMM_WARPS * 32 * 8) {
        float wv[GEMM_NR][8], xv[GEMM_MAX_MR][8];
#pragma unroll
        for (int n = 0; n < GEMM_NR; n++) {
            if (n0 + n < N) load8(wv[n], w + (size_t)(n0 + n) * K, k, K, vec);
            else
#pragma unroll
                for (int e = 0; e < 8; e++) wv[n][e] = 0.0f;
        }
#pragma unroll
        for (int m = 0; m < GEMM_MAX_MR; m++) {
            if (m >= MR) break;
            if (m0 + m < M) load8(xv[m], x + (size_t)(m0 + m) * ldx, k, K, vec);
            else
#pragma unroll
                for (int e = 0; e < 8; e++) xv[m][e] = 0.0f;
        }
#pragma unroll
        for (int m = 0; m < GEMM_MAX_MR; m++) {
            if (m >= MR) break;
#pragma unroll
            for (int n = 0; n < GEMM_NR; n++)
#pragma unroll
                for (int e = 0; e < 8; e++) acc[m][n] = fmaf(xv[m][e], wv[n][e], acc[m][n]);
        }
    }

#pragma unroll
    for (int m = 0; m < GEMM_MAX_MR; m++) {
        if (m >= MR) break;
#pragma unroll
        for (int n = 0; n < GEMM_NR; n++) {
            float v = warp_sum(acc[m][n]);
            if (lane == 0) part[warp][m][n] = v;
        }
    }
    __syncthreads();
    const int t = threadIdx.x;
    if (t < MR * GEMM_NR) {
        const int m = t / GEMM_NR, n = t % GEMM_NR;
        if (m0 + m < M && n0 + n < N) {
            float sum = __fadd_rn(__fadd_rn(part[0][m][n], part[1][m][n]), __fadd_rn(part[2][m][n], part[3][m][n]));
            float *yp = y + (size_t)(m0 + m) * ldy + n0 + n;
            *yp = accumulate ? __fadd_rn(*yp, sum) : sum;
        }
    }
}

#define GEMM_KERNEL(mr)                                                                                         \
    static __global__ void __launch_bounds__(GEMM_WARPS * 32)                                                 \
        gemm_mr##mr##_kernel(float *y, int ldy, const uint16_t *x, int ldx, const uint16_t *w, int M, int N,    \
                             int K, int accumulate, int vec) {                                                  \
        gemm_body(y, ldy, x, ldx, w, M, N, K, accumulate, vec, mr);                                             \
    }
GEMM_KERNEL(1)
GEMM_KERNEL(2)
GEMM_KERNEL(4)
GEMM_KERNEL(8)

void flint_cuda_gemm(float *y, int ldy, const uint16_t *x, int ldx, const uint16_t *w, int M, int N, int K,
                     int accumulate, flint_cuda_stream s) {
    FLINT_ASSERT(M >= 0 && N > 0 && K > 0 && ldx >= K && ldy >= N);
    if (M == 0) return;
    const int mr = M >= 8 ? 8 : M >= 4 ? 4 : M >= 2 ? 2 : 1;
    const int vec = K % 8 == 0 && ldx % 8 == 0 && (uintptr_t)x % 16 == 0 && (uintptr_t)w % 16 == 0;
    dim3 grid((unsigned)((N + GEMM_NR - 1) / GEMM_NR), (unsigned)((M + mr - 1) / mr));
    FLINT_ASSERT(grid.y <= 65535);
    switch (mr) {
    case 1: gemm_mr1_kernel<<<grid, GEMM_WARPS * 32, 0, s>>>(y, ldy, x, ldx, w, M, N, K, accumulate, vec); break;
    case 2: gemm_mr2_kernel<<<grid, GEMM_WARPS * 32, 0, s>>>(y, ldy, x, ldx, w, M, N, K, accumulate, vec); break;
    case 4: gemm_mr4_kernel<<<grid, GEMM_WARPS * 32, 0, s>>>(y, ldy, x, ldx, w, M, N, K, accumulate, vec); break;
    default: gemm_mr8_kernel<<<grid, GEMM_WARPS * 32, 0, s>>>(y, ldy, x, ldx, w, M, N, K, accumulate, vec); break;
    }
    CUDA_CHECK(cudaGetLastError());
}

/* ==== Tensor-core GEMM: y (+)= x W^T with mma.sync m16n8k16 bf16 -> fp32 ====
 * Operands swapped: W is the MMA's A (16 rows = 16 outputs n, row-major along k, as stored) and
 * x the MMA's B (8 columns = 8 rows m of x, "col" = contiguous along k, as stored), so D is a
 * 16 (n) x 8 (m) tile and small M pads only to 8.
 * k inside an MMA is permuted, the same way for A and B (a dot product does not care which of
 * its 16 slots a k sits in): for k32 block j, lane (g = lane / 4, t = lane % 4) loads 16 bytes,
 * elements 32 j + 8 t .. + 7, of W rows n0 + g and n0 + g + 8 and of x row m0 + g; MMA 0 takes
 * elements 0-3 of each (A regs {Wg.x, Wg8.x, Wg.y, Wg8.y}, B regs {x.x, x.y}), MMA 1 elements 4-7
 * ({.z, .w}). In the PTX layouts that puts MMA slot 2t+e at k = 32j+8t+e and slot 8+2t+e at
 * 32j+8t+2+e (e = 0, 1) for A and B alike. Every operand is one 16-byte load straight into
 * registers: no shared memory, no ldmatrix.
 * Order (depends on K only): warp kw (0..3) of an n tile takes the k32 blocks j = kw, kw + 4,
 * kw + 8, ... in increasing order, two MMAs each into one fp32 accumulator per output; the
 * warps' partials are then added as (p0 + p1) + (p2 + p3). K past the end reads zeros; blocks
 * j >= ceil(K / 32) do no MMA. MT (m tiles of 8 rows per warp), NT (n tiles per block), U (k
 * blocks per loop step) and the grid are picked from M for speed; none changes an output's
 * sequence of operations, and an MMA output element depends only on its own row of A and column
 * of B, so rows are bit-identical alone or in any batch. */
#define TC_KW 4      /* warps splitting K, per n tile of 16 */
#define TC_MAX_MT 8  /* m tiles of 8 rows per warp */
#define TC_MAX_U 4   /* k32 blocks per loop step (loaded one step ahead) */

static __device__ __forceinline__ void mma_bf16_16816(float d[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                                      uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* bf16 elements k..k+7 of a row, packed as in memory (element k in the low half of .x); zeros
 * past K or for a row outside the matrix (ok = 0; the row pointer is then not touched). vec: the
 * row and k are 16-byte aligned and K % 8 == 0, so k < K means the whole chunk is inside. */
static __device__ __forceinline__ uint4 tc_load8(const uint16_t *row, int ok, int k, int K, int vec) {
    if (!ok || k >= K) return make_uint4(0u, 0u, 0u, 0u);
    if (vec) return __ldg((const uint4 *)(row + k));
    uint32_t v[4];
#pragma unroll
    for (int e = 0; e < 4; e++) {
        const uint32_t lo = k + 2 * e < K ? row[k + 2 * e] : 0u, hi = k + 2 * e + 1 < K ? row[k + 2 * e + 1] : 0u;
        v[e] = lo | hi << 16;
    }
    return make_uint4(v[0], v[1], v[2], v[3]);
}

/* red: the K warps' partials, [NT][TC_KW - 1][MT * 4][32] floats (declared per kernel, sized to it). */
static __device__ __forceinline__ void gemm_tc_body(float *red, float *y, int ldy, const uint16_t *x, int ldx,
                                                    const uint16_t *w, int M, int N, int K, int accumulate, int vec,
                                                    const int MT, const int NT, const int U) {
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    const int kw = wid % TC_KW, nt = wid / TC_KW;
    const int g = lane >> 2, t = lane & 3;
    const int n0 = (blockIdx.y * NT + nt) * 16, m0 = blockIdx.x * MT * 8;
    const int nJ = (K + 31) / 32; /* k32 blocks */
    const int oka = n0 + g < N, okb = n0 + g + 8 < N;
    const uint16_t *wa = oka ? w + (size_t)(n0 + g) * K : w, *wb = okb ? w + (size_t)(n0 + g + 8) * K : w;
    const uint16_t *xr[TC_MAX_MT];
    int okx[TC_MAX_MT];
    float acc[TC_MAX_MT][4];
#pragma unroll
    for (int mt = 0; mt < TC_MAX_MT; mt++) {
        const int r = m0 + mt * 8 + g;
        okx[mt] = mt < MT && r < M;
        xr[mt] = okx[mt] ? x + (size_t)r * ldx : x;
#pragma unroll
        for (int i = 0; i < 4; i++) acc[mt][i] = 0.0f;
    }

    uint4 ca[TC_MAX_U], cb[TC_MAX_U]; /* W rows g and g + 8 of the current step */
#pragma unroll
    for (int u = 0; u < TC_MAX_U; u++) {
        if (u >= U) break;
        const int k = 32 * (kw + TC_KW * u) + 8 * t;
        ca[u] = tc_load8(wa, oka, k, K, vec);
        cb[u] = tc_load8(wb, okb, k, K, vec);
    }
    for (int j0 = kw; j0 < nJ; j0 += TC_KW * U) {
        uint4 na[TC_MAX_U], nb[TC_MAX_U]; /* the next step's W, in flight during this step's MMAs */
#pragma unroll
        for (int u = 0; u < TC_MAX_U; u++) {
            if (u >= U) break;
            const int k = 32 * (j0 + TC_KW * (U + u)) + 8 * t;
            na[u] = tc_load8(wa, oka, k, K, vec);
            nb[u] = tc_load8(wb, okb, k, K, vec);
        }
#pragma unroll
        for (int u = 0; u < TC_MAX_U; u++) {
            if (u >= U) break;
            const int j = j0 + TC_KW * u;
            if (j < nJ) { /* warp-uniform */
                const int k = 32 * j + 8 * t;
                uint4 xv[TC_MAX_MT];
#pragma unroll
                for (int mt = 0; mt < TC_MAX_MT; mt++)
                    if (mt < MT) xv[mt] = tc_load8(xr[mt], okx[mt], k, K, vec);
#pragma unroll
                for (int mt = 0; mt < TC_MAX_MT; mt++) {
                    if (mt >= MT) break;
                    mma_bf16_16816(acc[mt], ca[u].x, cb[u].x, ca[u].y, cb[u].y, xv[mt].x, xv[mt].y);
                    mma_bf16_16816(acc[mt], ca[u].z, cb[u].z, ca[u].w, cb[u].w, xv[mt].z, xv[mt].w);
                }
            }
        }
#pragma unroll
        for (int u = 0; u < TC_MAX_U; u++) {
            if (u >= U) break;
            ca[u] = na[u];
            cb[u] = nb[u];
        }
    }

    /* The same lane of the 4 K warps holds the same outputs: (p0 + p1) + (p2 + p3). */
    if (kw > 0) {
#pragma unroll
        for (int mt = 0; mt < TC_MAX_MT; mt++) {
            if (mt >= MT) break;
#pragma unroll
            for (int i = 0; i < 4; i++) red[((nt * (TC_KW - 1) + kw - 1) * MT * 4 + mt * 4 + i) * 32 + lane] = acc[mt][i];
        }
    }
    __syncthreads();
    if (kw == 0) {
#pragma unroll
        for (int mt = 0; mt < TC_MAX_MT; mt++) {
            if (mt >= MT) break;
#pragma unroll
            for (int i = 0; i < 4; i++) { /* D fragment: c0, c1 row (n) g, cols (m) 2t, 2t+1; c2, c3 row g + 8 */
                const int m = m0 + mt * 8 + 2 * t + (i & 1), n = n0 + g + 8 * (i >> 1);
                const float *p = red + (nt * (TC_KW - 1) * MT * 4 + mt * 4 + i) * 32 + lane; /* p1, p2, p3 */
                const float s = __fadd_rn(__fadd_rn(acc[mt][i], p[0]), __fadd_rn(p[MT * 4 * 32], p[2 * MT * 4 * 32]));
                if (m < M && n < N) {
                    float *yp = y + (size_t)m * ldy + n;
                    *yp = accumulate ? __fadd_rn(*yp, s) : s;
                }
            }
        }
    }
}

#define GEMM_TC_KERNEL(mt, nt, u)                                                                                \
    static __global__ void __launch_bounds__(TC_KW * 32 * nt)                                                  \
        gemm_tc_m##mt##_n##nt##_kernel(float *y, int ldy, const uint16_t *x, int ldx, const uint16_t *w, int M,  \
                                       int N, int K, int accumulate, int vec) {                                  \
        __shared__ float red[nt * (TC_KW - 1) * mt * 4 * 32];                                                    \
        gemm_tc_body(red, y, ldy, x, ldx, w, M, N, K, accumulate, vec, mt, nt, u);                               \
    }
GEMM_TC_KERNEL(1, 1, 4)
GEMM_TC_KERNEL(2, 1, 4)
GEMM_TC_KERNEL(4, 1, 4)
GEMM_TC_KERNEL(8, 1, 2)
GEMM_TC_KERNEL(8, 4, 1)

void flint_cuda_gemm_tc(float *y, int ldy, const uint16_t *x, int ldx, const uint16_t *w, int M, int N, int K,
                        int accumulate, flint_cuda_stream s) {
    FLINT_ASSERT(M >= 0 && N > 0 && K > 0 && ldx >= K && ldy >= N);
    if (M == 0) return;
    const int vec = K % 8 == 0 && ldx % 8 == 0 && (uintptr_t)x % 16 == 0 && (uintptr_t)w % 16 == 0;
    /* M <= 64: one block per 16 outputs (4 warps), every row in it; more rows: blocks of 64 rows x
     * 64 outputs (16 warps), the row chunks of one column of blocks adjacent in launch order so
     * that they share its weights in L2. */
    const int mt = M <= 8 ? 1 : M <= 16 ? 2 : M <= 32 ? 4 : 8, nt = M <= 64 ? 1 : 4;
    dim3 grid((unsigned)((M + 8 * mt - 1) / (8 * mt)), (unsigned)((N + 16 * nt - 1) / (16 * nt)));
    FLINT_ASSERT(grid.y <= 65535);
    const int th = TC_KW * 32 * nt;
    if (nt == 4) gemm_tc_m8_n4_kernel<<<grid, th, 0, s>>>(y, ldy, x, ldx, w, M, N, K, accumulate, vec);
    else if (mt == 8) gemm_tc_m8_n1_kernel<<<grid, th, 0, s>>>(y, ldy, x, ldx, w, M, N, K, accumulate, vec);
    else if (mt == 4) gemm_tc_m4_n1_kernel<<<grid, th, 0, s>>>(y, ldy, x, ldx, w, M, N, K, accumulate, vec);
    else if (mt == 2) gemm_tc_m2_n1_kernel<<<grid, th, 0, s>>>(y, ldy, x, ldx, w, M, N, K, accumulate, vec);
    else gemm_tc_m1_n1_kernel<<<grid, th, 0, s>>>(y, ldy, x, ldx, w, M, N, K, accumulate, vec);
    CUDA_CHECK(cudaGetLastError());
}

/* ==== Attention over the paged KV cache ====
 * Pass 1, one block per (chunk c, KV head, row): the G = n_heads / n_kv_heads query heads of the
 * KV head share each K/V read. Thread t scores position t of the chunk (a dot in dimension order
 * with fmaf, then * scale); warp g takes the max and the exp-sum of head g's scores (lane-strided
 * partial sums, then a butterfly); thread d sums p_t * v_t[d] over the chunk in position order.
 * The partial (max m, sum l, unnormalised o[d]) goes to scratch. Pass 2, one block per (head,
 * row): M = max m_c, L = sum_c l_c e^(m_c - M), out = (sum_c o_c e^(m_c - M)) / L, chunks in
 * order. Chunk boundaries are multiples of FLINT_CUDA_ATTN_CHUNK from position 0, so the order
 * depends on the row's own context length only. */
#define ATTN_THREADS 128
#define ATTN_CHUNK FLINT_CUDA_ATTN_CHUNK
#define ATTN_G FLINT_CUDA_ATTN_MAX_GROUP

/* Positions row r sees: T in all, the first n_cache from the cache, the rest from the block rows
 * starting at row blk0 (drafter block mode). */
static __device__ __forceinline__ int attn_span(int blk_rows, const int32_t *pos, int r, int *n_cache, int *blk0) {
    if (blk_rows > 0) {
        const int r0 = r - r % blk_rows;
        *n_cache = pos[r0];
        *blk0 = r0;
        return pos[r0] + blk_rows;
    }
    *n_cache = pos[r] + 1;
    *blk0 = 0;
    return pos[r] + 1;
}

/* acc[g] += q_g . k in dimension order; q_s holds the G heads, hd floats each. */
static __device__ __forceinline__ void dot_k_bf16(float acc[ATTN_G], const float *q_s, const uint16_t *k, int hd,
                                                  int G) {
    if ((hd & 7) == 0) { /* the slot starts on 16 bytes: one load per 8 elements */
        for (int d = 0; d < hd; d += 8) {
            float kv[8];
            unpack8(kv, *(const uint4 *)(k + d));
#pragma unroll
            for (int g = 0; g < ATTN_G; g++) {
                if (g >= G) break;
#pragma unroll
                for (int e = 0; e < 8; e++) acc[g] = fmaf(q_s[g * hd + d + e], kv[e], acc[g]);
            }
        }
    } else {
        for (int d = 0; d < hd; d++) {
            const float kv = bf2f(k[d]);
#pragma unroll
            for (int g = 0; g < ATTN_G; g++) {
                if (g >= G) break;
                acc[g] = fmaf(q_s[g * hd + d], kv, acc[g]);
            }
        }
    }
}

static __device__ __forceinline__ void dot_k_f32(float acc[ATTN_G], const float *q_s, const float *k, int hd, int G) {
    for (int d = 0; d < hd; d++) {
        const float kv = k[d];
#pragma unroll
        for (int g = 0; g < ATTN_G; g++) {
            if (g >= G) break;
            acc[g] = fmaf(q_s[g * hd + d], kv, acc[g]);
        }
    }
}

static __global__ void __launch_bounds__(ATTN_THREADS) attn_chunk_kernel(const flint_cuda_attn a, int max_chunks, float scale) {
    __shared__ float q_s[ATTN_G * FLINT_CUDA_ATTN_MAX_HEAD_DIM];
    __shared__ float p_s[ATTN_G * ATTN_CHUNK];
    __shared__ float m_s[ATTN_G], l_s[ATTN_G];
    const int c = blockIdx.x, kvh = blockIdx.y, r = blockIdx.z;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    int n_cache, blk0;
    const int T = attn_span(a.blk_rows, a.pos, r, &n_cache, &blk0);
    const int t0 = c * ATTN_CHUNK;
    if (t0 >= T) return; /* the whole block: this row has fewer chunks */
    const int len = min(ATTN_CHUNK, T - t0);
    const int hd = a.head_dim, G = a.n_heads / a.n_kv_heads, bs = a.block_size;
    const size_t slot = (size_t)a.n_kv_heads * hd; /* elements per cache position */
    const int32_t *bt = a.block_tables + (size_t)a.row_seq[r] * a.bt_stride;

    const float *q = a.q + (size_t)r * a.ldq + (size_t)kvh * G * hd; /* heads kvh*G .. kvh*G+G-1 */
    for (int i = tid; i < G * hd; i += ATTN_THREADS) q_s[i] = q[i];
    __syncthreads();

    for (int t = tid; t < len; t += ATTN_THREADS) {
        const int pa = t0 + t;
        float acc[ATTN_G];
#pragma unroll
        for (int g = 0; g < ATTN_G; g++) acc[g] = 0.0f;
        if (pa < n_cache)
            dot_k_bf16(acc, q_s, a.k_cache + ((size_t)bt[pa / bs] * bs + pa % bs) * slot + (size_t)kvh * hd, hd, G);
        else
            dot_k_f32(acc, q_s, a.blk_k + (size_t)(blk0 + pa - n_cache) * a.ld_blk + (size_t)kvh * hd, hd, G);
#pragma unroll
        for (int g = 0; g < ATTN_G; g++) {
            if (g >= G) break;
            p_s[g * ATTN_CHUNK + t] = __fmul_rn(acc[g], scale);
        }
    }
    __syncthreads();

    for (int g = warp; g < G; g += ATTN_THREADS / 32) {
        float *p = p_s + g * ATTN_CHUNK;
        float m = -INFINITY;
        for (int t = lane; t < len; t += 32) m = fmaxf(m, p[t]);
        m = warp_max(m);
        float l = 0.0f;
        for (int t = lane; t < len; t += 32) {
            const float e = expf(__fsub_rn(p[t], m));
            p[t] = e;
            l = __fadd_rn(l, e);
        }
        l = warp_sum(l);
        if (lane == 0) {
            m_s[g] = m;
            l_s[g] = l;
        }
    }
    __syncthreads();

    const size_t part0 = ((size_t)r * a.n_heads + (size_t)kvh * G) * max_chunks + c; /* head kvh*G, chunk c */
    float *o_part = a.scratch, *ml_part = a.scratch + (size_t)a.n_rows * a.n_heads * max_chunks * hd;
    for (int d = tid; d < hd; d += ATTN_THREADS) {
        float acc[ATTN_G];
#pragma unroll
        for (int g = 0; g < ATTN_G; g++) acc[g] = 0.0f;
#pragma unroll 4
        for (int t = 0; t < len; t++) {
            const int pa = t0 + t;
            const float v = pa < n_cache
                                ? bf2f(a.v_cache[((size_t)bt[pa / bs] * bs + pa % bs) * slot + (size_t)kvh * hd + d])
                                : a.blk_v[(size_t)(blk0 + pa - n_cache) * a.ld_blk + (size_t)kvh * hd + d];
#pragma unroll
            for (int g = 0; g < ATTN_G; g++) {
                if (g >= G) break;
                acc[g] = fmaf(p_s[g * ATTN_CHUNK + t], v, acc[g]);
            }
        }
#pragma unroll
        for (int g = 0; g < ATTN_G; g++) {
            if (g >= G) break;
            o_part[(part0 + (size_t)g * max_chunks) * hd + d] = acc[g];
        }
    }
    if (tid < G) {
        ml_part[2 * (part0 + (size_t)tid * max_chunks)] = m_s[tid];
        ml_part[2 * (part0 + (size_t)tid * max_chunks) + 1] = l_s[tid];
    }
}

static __global__ void attn_combine_kernel(const flint_cuda_attn a, int max_chunks) {
    const int h = blockIdx.x, r = blockIdx.y, hd = a.head_dim;
    int n_cache, blk0;
    const int T = attn_span(a.blk_rows, a.pos, r, &n_cache, &blk0);
    const int nch = (T + ATTN_CHUNK - 1) / ATTN_CHUNK;
    if (nch > max_chunks) __trap(); /* max_ctx was below this row's context: a caller bug */
    const size_t base = ((size_t)r * a.n_heads + h) * max_chunks;
    const float *o = a.scratch + base * hd;
    const float *ml = a.scratch + (size_t)a.n_rows * a.n_heads * max_chunks * hd + 2 * base;
    float M = -INFINITY;
    for (int c = 0; c < nch; c++) M = fmaxf(M, ml[2 * c]);
    float L = 0.0f;
    for (int c = 0; c < nch; c++) L = fmaf(ml[2 * c + 1], expf(__fsub_rn(ml[2 * c], M)), L);
    const float inv = 1.0f / L;
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float acc = 0.0f;
        for (int c = 0; c < nch; c++) acc = fmaf(o[(size_t)c * hd + d], expf(__fsub_rn(ml[2 * c], M)), acc);
        a.out[(size_t)r * a.ldo + (size_t)h * hd + d] = f2bf(__fmul_rn(acc, inv));
    }
}

size_t flint_cuda_attn_scratch_floats(int n_rows, int n_heads, int head_dim, int max_ctx) {
    size_t chunks = ((size_t)max_ctx + ATTN_CHUNK - 1) / ATTN_CHUNK;
    return (size_t)n_rows * n_heads * chunks * ((size_t)head_dim + 2);
}

void flint_cuda_attention(const flint_cuda_attn *a, flint_cuda_stream s) {
    FLINT_ASSERT(a->n_rows >= 0 && a->n_rows <= 65535);
    FLINT_ASSERT(a->n_kv_heads > 0 && a->n_heads % a->n_kv_heads == 0 && a->n_heads / a->n_kv_heads <= ATTN_G);
    FLINT_ASSERT(a->n_kv_heads <= 65535 && a->n_heads <= 65535);
    FLINT_ASSERT(a->head_dim > 0 && a->head_dim % 2 == 0 && a->head_dim <= FLINT_CUDA_ATTN_MAX_HEAD_DIM);
    FLINT_ASSERT(a->block_size > 0 && a->bt_stride > 0 && a->max_ctx > 0 && a->blk_rows >= 0);
    FLINT_ASSERT(a->ldq >= a->n_heads * a->head_dim && a->ldo >= a->n_heads * a->head_dim);
    FLINT_ASSERT(a->q && a->out && a->k_cache && a->v_cache && a->block_tables && a->row_seq && a->pos && a->scratch);
    if (a->head_dim % 8 == 0) /* K is read 16 bytes at a time */
        FLINT_ASSERT((uintptr_t)a->k_cache % 16 == 0);
    if (a->blk_rows > 0)
        FLINT_ASSERT(a->n_rows % a->blk_rows == 0 && a->blk_k && a->blk_v && a->ld_blk >= a->n_kv_heads * a->head_dim);
    if (a->n_rows == 0) return;
    const int max_chunks = (a->max_ctx + ATTN_CHUNK - 1) / ATTN_CHUNK;
    const float scale = (float)(1.0 / sqrt((double)a->head_dim)); /* as the CPU forward */
    attn_chunk_kernel<<<dim3(max_chunks, a->n_kv_heads, a->n_rows), ATTN_THREADS, 0, s>>>(*a, max_chunks, scale);
    CUDA_CHECK(cudaGetLastError());
    attn_combine_kernel<<<dim3(a->n_heads, a->n_rows), 128, 0, s>>>(*a, max_chunks);
    CUDA_CHECK(cudaGetLastError());
}
