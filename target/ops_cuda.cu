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
#include "target/cuda_common.cuh"

int flint_cuda_upload_bf16(uint16_t *dst, const float *src, size_t n, uint16_t *stage, size_t stage_n, flint_err *err) {
    for (size_t off = 0; off < n; off += stage_n) {
        size_t m = n - off < stage_n ? n - off : stage_n;
        for (size_t i = 0; i < m; i++) stage[i] = flint_bf16_from_f32(src[off + i]);
        cudaError_t e = cudaMemcpy(dst + off, stage, m * sizeof(uint16_t), cudaMemcpyHostToDevice);
        if (e != cudaSuccess)
            return flint_err_set(err, FLINT_ERR_IO, "weight upload to the GPU: %s", cudaGetErrorString(e));
    }
    return 0;
}

/* glu_i > 0: a gate-up matrix (N = 2 glu_i), rows interleaved */
static int upload_packed(uint16_t *dst, const float *src, int N, int K, int glu_i, uint16_t *stage, size_t stage_n,
                         flint_err *err) {
    const size_t tile = (size_t)((K + 31) / 32) * 512; /* elements per packed tile row */
    const int n_tr = (N + 15) / 16, per = stage_n / tile > 0 ? (int)(stage_n / tile) : 0;
    FLINT_ASSERT(per > 0);
    for (int tr = 0; tr < n_tr; tr += per) {
        const int m = n_tr - tr < per ? n_tr - tr : per;
        for (int i = 0; i < m; i++) {
            if (glu_i) flint_cuda_gemm_pack_rows_host_glu(stage + (size_t)i * tile, src, tr + i, glu_i, K);
            else flint_cuda_gemm_pack_rows_host(stage + (size_t)i * tile, src, tr + i, N, K);
        }
        cudaError_t e = cudaMemcpy(dst + (size_t)tr * tile, stage, (size_t)m * tile * sizeof(uint16_t),
                                   cudaMemcpyHostToDevice);
        if (e != cudaSuccess)
            return flint_err_set(err, FLINT_ERR_IO, "weight upload to the GPU: %s", cudaGetErrorString(e));
    }
    return 0;
}

int flint_cuda_upload_packed(uint16_t *dst, const float *src, int N, int K, uint16_t *stage, size_t stage_n,
                             flint_err *err) {
    return upload_packed(dst, src, N, K, 0, stage, stage_n, err);
}

int flint_cuda_upload_packed_glu(uint16_t *dst, const float *src, int I, int K, uint16_t *stage, size_t stage_n,
                                 flint_err *err) {
    FLINT_ASSERT(I > 0 && I % 8 == 0);
    return upload_packed(dst, src, 2 * I, K, I, stage, stage_n, err);
}

/* Programmatic dependent launch of the kernels below and of attention's and the drafter's
 * (FLINT_LAUNCH, cuda_common.cuh). */
static int g_kernel_pdl = 1;
void flint_cuda_kernel_pdl_configure(int on) {
    if (on >= 0) g_kernel_pdl = on != 0;
}
int flint_cuda_kernel_pdl(void) { return g_kernel_pdl; }

/* ==== Embedding, norms, RoPE, KV store, SwiGLU, add ==== */

/* The embedding is packed (ops_cuda.h), as the LM head it may be: element (n, k) of tile row
 * n / 16 sits in block k / 32 at gemm_tile_elem(n % 16, k % 32) (gemm_layout.h). */
static __global__ void embed_kernel(float *out, const uint16_t *embed, const int32_t *tokens, int hidden) {
    pdl_trigger(); /* a GEMM after this kernel may start streaming its weights */
    pdl_wait();    /* FLINT_LAUNCH: what the kernel before wrote is visible from here on */
    const int r = blockIdx.x, n = tokens[r], nJ = (hidden + 31) / 32;
    const uint16_t *e = embed + (size_t)(n / 16) * nJ * 512 + gemm_tile_elem(n % 16, 0);
    float *o = out + (size_t)r * hidden;
    if ((hidden & 7) == 0 && ((uintptr_t)out & 15) == 0) { /* 8 consecutive k: 4 words 64 elements apart */
        for (int q = threadIdx.x; q < hidden / 8; q += blockDim.x) {
            const uint32_t *b = (const uint32_t *)(e + (q / 4) * 512 + (q % 4) * 2);
            float v[8];
            unpack8(v, make_uint4(b[0], b[32], b[64], b[96]));
            *(float4 *)(o + 8 * q) = make_float4(v[0], v[1], v[2], v[3]);
            *(float4 *)(o + 8 * q + 4) = make_float4(v[4], v[5], v[6], v[7]);
        }
        return;
    }
    for (int k = threadIdx.x; k < hidden; k += blockDim.x)
        o[k] = bf2f(e[(k / 32) * 512 + gemm_tile_elem(0, k % 32)]);
}

void flint_cuda_embed(float *out, const uint16_t *embed, const int32_t *tokens, int n_rows, int hidden,
                      flint_cuda_stream s) {
    FLINT_ASSERT(n_rows >= 0 && hidden > 0);
    if (n_rows == 0) return;
    FLINT_LAUNCH(embed_kernel, n_rows, 256, 0, s, out, embed, tokens, hidden);
    CUDA_CHECK(cudaGetLastError());
}

#define NORM_THREADS 256
#define NORM_VEC 4 /* float4s a thread of the vector kernel keeps in registers */

/* One block per row: each thread sums squares of a strided slice with fma, warps reduce by
 * butterfly, then every thread adds the 8 warp sums in order. For rows that do not allow 16-byte
 * loads (odd widths or pitches). */
static __global__ void __launch_bounds__(NORM_THREADS)
rmsnorm_kernel(uint16_t *out, int ldo, const float *x, int ldx, const int32_t *rows, const uint16_t *w, int n,
               float eps, float *copy, int ldc) {
    pdl_trigger(); /* a GEMM after this kernel may start streaming its weights */
    pdl_wait();    /* FLINT_LAUNCH: what the kernel before wrote is visible from here on */
    __shared__ float part[NORM_THREADS / 32];
    const int i = blockIdx.x;
    const float *xr = x + (size_t)(rows ? rows[i] : i) * ldx;
    float ss = 0.0f;
    for (int k = threadIdx.x; k < n; k += NORM_THREADS) ss = fmaf(xr[k], xr[k], ss);
    if (copy)
        for (int k = threadIdx.x; k < n; k += NORM_THREADS) copy[(size_t)i * ldc + k] = xr[k];
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

/* The same norm for rows of 4-float groups: a row is one trip to memory. Thread t holds groups t,
 * t + T, .. (at most NORM_VEC, T = the block size, a function of n only) and their weights in
 * registers, all loads issued before the first use; its sum of squares runs over its groups in
 * order (x, y, z, w each), then the butterfly and the T / 32 warp sums in order. At batch 1 the
 * scalar kernel's chain of dependent loads made a 4096-wide norm cost ~8 us; this one ~2. */
static __global__ void __launch_bounds__(1024)
rmsnorm_vec_kernel(uint16_t *out, int ldo, const float *x, int ldx, const int32_t *rows, const uint16_t *w, int n,
                   float eps, float *copy, int ldc, unsigned char *xp, int Mp) {
    pdl_trigger(); /* a GEMM after this kernel may start streaming its weights */
    __shared__ float part[32];
    const int i = blockIdx.x, n4 = n >> 2, T = blockDim.x;
    const uint2 *wr = (const uint2 *)w;
    float4 v[NORM_VEC];
    uint2 wv[NORM_VEC];
#pragma unroll
    for (int j = 0; j < NORM_VEC; j++) { /* the weights (and the row index: uploaded) need no wait */
        const int k = threadIdx.x + j * T;
        wv[j] = k < n4 ? wr[k] : make_uint2(0u, 0u);
    }
    const int row = rows ? rows[i] : i;
    pdl_wait(); /* FLINT_LAUNCH: x comes from the kernels before */
    const float4 *xr = (const float4 *)(x + (size_t)row * ldx);
#pragma unroll
    for (int j = 0; j < NORM_VEC; j++) {
        const int k = threadIdx.x + j * T;
        v[j] = k < n4 ? xr[k] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    if (copy) { /* the row as read (rmsnorm_copy): the target's taps */
        float4 *cr = (float4 *)(copy + (size_t)i * ldc);
#pragma unroll
        for (int j = 0; j < NORM_VEC; j++) {
            const int k = threadIdx.x + j * T;
            if (k < n4) cr[k] = v[j];
        }
    }
    float ss = 0.0f;
#pragma unroll
    for (int j = 0; j < NORM_VEC; j++) {
        ss = fmaf(v[j].x, v[j].x, ss);
        ss = fmaf(v[j].y, v[j].y, ss);
        ss = fmaf(v[j].z, v[j].z, ss);
        ss = fmaf(v[j].w, v[j].w, ss);
    }
    ss = warp_sum(ss);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = ss;
    __syncthreads();
    float tot = 0.0f;
    for (int k = 0; k < (T >> 5); k++) tot = __fadd_rn(tot, part[k]);
    const float inv = 1.0f / sqrtf(tot / (float)n + eps); /* as flint_ops_rmsnorm */
    uint2 *o = (uint2 *)(out + (size_t)i * ldo);
#pragma unroll
    for (int j = 0; j < NORM_VEC; j++) {
        const int k = threadIdx.x + j * T;
        if (k >= n4) break;
        const float w0 = __uint_as_float(wv[j].x << 16), w1 = __uint_as_float(wv[j].x & 0xffff0000u);
        const float w2 = __uint_as_float(wv[j].y << 16), w3 = __uint_as_float(wv[j].y & 0xffff0000u);
        const uint32_t lo = (uint32_t)f2bf(__fmul_rn(__fmul_rn(v[j].x, inv), w0)) |
                            (uint32_t)f2bf(__fmul_rn(__fmul_rn(v[j].y, inv), w1)) << 16;
        const uint32_t hi = (uint32_t)f2bf(__fmul_rn(__fmul_rn(v[j].z, inv), w2)) |
                            (uint32_t)f2bf(__fmul_rn(__fmul_rn(v[j].w, inv), w3)) << 16;
        if (xp) { /* the GEMM scratch (gemm_cuda.cu, tcw): element e of row i at byte (e / 32) Mp 64 +
                   * (i / 8) 512 + ((e / 2) % 4) 128 + (i % 8) 16 + ((e / 8) % 4) 4 + (e % 2) 2 */
            const int e = 4 * k, wd = (e >> 1) & 3;
            unsigned char *b = xp + (size_t)(e >> 5) * Mp * 64 + (i >> 3) * 512 + (i & 7) * 16 + ((e >> 3) & 3) * 4;
            *(uint32_t *)(b + wd * 128) = lo;
            *(uint32_t *)(b + (wd + 1) * 128) = hi;
        } else {
            o[k] = make_uint2(lo, hi);
        }
    }
}

void flint_cuda_rmsnorm_copy(uint16_t *out, int ldo, const float *x, int ldx, const int32_t *rows, const uint16_t *w,
                             int n_rows, int n, float eps, float *copy, int ldc, flint_cuda_stream s) {
    FLINT_ASSERT(n_rows >= 0 && n > 0 && ldo >= n && ldx >= n && w && (!copy || ldc >= n));
    if (n_rows == 0) return;
    /* the path and the block size depend on the shape and the buffers, never on n_rows */
    const int n4 = n / 4;
    const int vec = n % 4 == 0 && ldx % 4 == 0 && ldo % 4 == 0 && (uintptr_t)x % 16 == 0 && (uintptr_t)out % 8 == 0 &&
                    (uintptr_t)w % 8 == 0 && n4 <= 1024 * NORM_VEC;
    /* the copy must not choose the path (the two paths' sums differ in order): a tap buffer
     * beside a 16-byte row is 16-byte aligned too */
    FLINT_ASSERT(!(vec && copy) || (ldc % 4 == 0 && (uintptr_t)copy % 16 == 0));
    if (vec) {
        int T = (n4 + NORM_VEC - 1) / NORM_VEC;
        T = (T + 31) / 32 * 32;
        FLINT_LAUNCH(rmsnorm_vec_kernel, n_rows, T, 0, s, out, ldo, x, ldx, rows, w, n, eps, copy, ldc,
                     (unsigned char *)NULL, 0);
    } else {
        FLINT_LAUNCH(rmsnorm_kernel, n_rows, NORM_THREADS, 0, s, out, ldo, x, ldx, rows, w, n, eps, copy, ldc);
    }
    CUDA_CHECK(cudaGetLastError());
}

void flint_cuda_rmsnorm_xp(unsigned char *xp, int Mp, const float *x, int ldx, const int32_t *rows, const uint16_t *w,
                           int n_rows, int n, float eps, float *copy, int ldc, flint_cuda_stream s) {
    /* the vector kernel's conditions (flint_cuda_rmsnorm_copy), which the caller's shapes meet */
    FLINT_ASSERT(xp && n_rows >= 0 && n_rows <= Mp && n % 32 == 0 && ldx >= n && ldx % 4 == 0 &&
                 (uintptr_t)x % 16 == 0 && (uintptr_t)w % 8 == 0 && n / 4 <= 1024 * NORM_VEC && w);
    FLINT_ASSERT(!copy || (ldc >= n && ldc % 4 == 0 && (uintptr_t)copy % 16 == 0));
    if (n_rows == 0) return;
    int T = (n / 4 + NORM_VEC - 1) / NORM_VEC;
    T = (T + 31) / 32 * 32;
    FLINT_LAUNCH(rmsnorm_vec_kernel, n_rows, T, 0, s, (uint16_t *)NULL, 0, x, ldx, rows, w, n, eps, copy, ldc, xp, Mp);
    CUDA_CHECK(cudaGetLastError());
}

void flint_cuda_rmsnorm(uint16_t *out, int ldo, const float *x, int ldx, const int32_t *rows, const uint16_t *w,
                        int n_rows, int n, float eps, flint_cuda_stream s) {
    flint_cuda_rmsnorm_copy(out, ldo, x, ldx, rows, w, n_rows, n, eps, NULL, 0, s);
}

#define HEAD_WARPS 4
#define ROPE_MAXQ 4 /* RoPE pairs a lane keeps in registers: head_dim <= 256 */

/* One RoPE pair (i, i + half) of a head: normed (when it has weights wl, wh) then rotated, as
 * flint_ops_rmsnorm + flint_ops_rope; written back, and to the cache row dst when there is one. */
static __device__ __forceinline__ void rope_pair(float *xh, uint16_t *dst, int i, int half, float inv, int has_w,
                                                 float wl, float wh, float c, float s) {
    float a = xh[i], b = xh[i + half];
    if (has_w) {
        a = __fmul_rn(__fmul_rn(a, inv), wl);
        b = __fmul_rn(__fmul_rn(b, inv), wh);
    }
    const float ya = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
    const float yb = __fadd_rn(__fmul_rn(b, c), __fmul_rn(a, s));
    xh[i] = ya;
    xh[i + half] = yb;
    if (dst) {
        dst[i] = f2bf(ya);
        dst[i + half] = f2bf(yb);
    }
}

/* One warp per (row, head). The norm's sum of squares is a butterfly over lanes; the RoPE pair
 * (i, i + half) is owned by one lane, which reads both values after the __syncwarp that ends
 * every lane's reads for the norm. The arithmetic mirrors flint_ops_rmsnorm + flint_ops_rope.
 * With kv.k_cache (flint_cuda_qk_norm_rope_store) the K heads also go to the cache as bf16 of the
 * values just written, and n_kv_heads more items per row copy the V heads there: what
 * flint_cuda_kv_store would write afterwards, without its launch and its reread of the row. */
static __global__ void __launch_bounds__(HEAD_WARPS * 32)
qk_norm_rope_kernel(float *x, int ldx, int n_rows, int n_a, const uint16_t *w_a, int n_b, const uint16_t *w_b,
                    int hd, float eps, const float *cos_t, const float *sin_t, const int32_t *pos,
                    const flint_cuda_kv_dst kv) {
    pdl_trigger();
    const int nh = n_a + n_b, nt = nh + (kv.k_cache ? kv.n_kv_heads : 0), lane = threadIdx.x & 31;
    const int item = blockIdx.x * HEAD_WARPS + (threadIdx.x >> 5);
    if (item >= n_rows * nt) return; /* the whole warp (before the wait: it touches nothing) */
    const int r = item / nt, h = item % nt, half = hd / 2;
    const int p = pos[r];
    uint16_t *dst = NULL; /* this head's cache slot, when it has one */
    const int is_k = kv.k_cache && h >= kv.k_head0 && h < kv.k_head0 + kv.n_kv_heads, is_v = h >= nh;
    if (is_k || is_v) {
        const int32_t blk = kv.block_tables[(size_t)kv.row_seq[r] * kv.bt_stride + p / kv.block_size];
        const size_t slot = ((size_t)blk * kv.block_size + p % kv.block_size) * kv.n_kv_heads;
        dst = is_v ? kv.v_cache + (slot + (size_t)(h - nh)) * hd : kv.k_cache + (slot + (size_t)(h - kv.k_head0)) * hd;
    }
    /* this lane's cos / sin (and norm weights) of pairs i = lane + 32 q: tables and weights that
     * nothing writes, loaded before the wait (at head_dim <= 256, all of them) */
    const int half_ok = half <= 32 * ROPE_MAXQ;
    const float *cs = cos_t + (size_t)p * half, *sn = sin_t + (size_t)p * half;
    const uint16_t *w = h < n_a ? w_a : w_b;
    float c_[ROPE_MAXQ], s_[ROPE_MAXQ], wl_[ROPE_MAXQ], wh_[ROPE_MAXQ];
    if (half_ok && h < nh) {
#pragma unroll
        for (int q = 0; q < ROPE_MAXQ; q++) {
            const int i = lane + 32 * q;
            c_[q] = i < half ? cs[i] : 0.0f;
            s_[q] = i < half ? sn[i] : 0.0f;
            wl_[q] = i < half && w ? bf2f(w[i]) : 0.0f;
            wh_[q] = i < half && w ? bf2f(w[i + half]) : 0.0f;
        }
    }
    /* FLINT_LAUNCH: the rows come from the GEMM before; the position and the block table (uploaded
     * before a forward's first kernel) were read while it ran */
    pdl_wait();
    if (h >= nh) { /* a V head: a copy */
        const float *v = x + (size_t)r * ldx + kv.v_col + (size_t)(h - nh) * hd;
        for (int d = lane; d < hd; d += 32) dst[d] = f2bf(v[d]);
        return;
    }
    float *xh = x + (size_t)r * ldx + (size_t)h * hd;
    float inv = 1.0f;
    if (w) {
        float ss = 0.0f;
        for (int d = lane; d < hd; d += 32) ss = fmaf(xh[d], xh[d], ss);
        ss = warp_sum(ss);
        inv = 1.0f / sqrtf(ss / (float)hd + eps);
    }
    __syncwarp();
    if (half_ok) {
#pragma unroll
        for (int q = 0; q < ROPE_MAXQ; q++) {
            const int i = lane + 32 * q;
            if (i >= half) break;
            rope_pair(xh, dst, i, half, inv, w != NULL, wl_[q], wh_[q], c_[q], s_[q]);
        }
    } else {
        for (int i = lane; i < half; i += 32)
            rope_pair(xh, dst, i, half, inv, w != NULL, w ? bf2f(w[i]) : 0.0f, w ? bf2f(w[i + half]) : 0.0f, cs[i],
                      sn[i]);
    }
}

static void qk_norm_rope_launch(float *x, int ldx, int n_rows, int n_a, const uint16_t *w_a, int n_b,
                                const uint16_t *w_b, int head_dim, float eps, const float *rope_cos,
                                const float *rope_sin, const int32_t *pos, const flint_cuda_kv_dst *kv,
                                flint_cuda_stream s) {
    FLINT_ASSERT(n_rows >= 0 && n_a >= 0 && n_b >= 0 && head_dim > 0 && head_dim % 2 == 0);
    FLINT_ASSERT(ldx >= (n_a + n_b) * head_dim);
    const flint_cuda_kv_dst none = {NULL, NULL, 0, 0, 0, NULL, NULL, 0, 0};
    if (kv) {
        FLINT_ASSERT(kv->k_cache && kv->v_cache && kv->row_seq && kv->block_tables && kv->block_size > 0);
        FLINT_ASSERT(kv->n_kv_heads > 0 && kv->k_head0 >= 0 && kv->k_head0 + kv->n_kv_heads <= n_a + n_b);
        FLINT_ASSERT(kv->v_col >= (n_a + n_b) * head_dim && ldx >= kv->v_col + kv->n_kv_heads * head_dim);
    }
    long items = (long)n_rows * (n_a + n_b + (kv ? kv->n_kv_heads : 0));
    if (items == 0) return;
    FLINT_ASSERT(items < (1L << 31));
    int blocks = (int)((items + HEAD_WARPS - 1) / HEAD_WARPS);
    FLINT_LAUNCH(qk_norm_rope_kernel, blocks, HEAD_WARPS * 32, 0, s, x, ldx, n_rows, n_a, w_a, n_b, w_b, head_dim, eps,
                 rope_cos, rope_sin, pos, kv ? *kv : none);
    CUDA_CHECK(cudaGetLastError());
}

void flint_cuda_qk_norm_rope(float *x, int ldx, int n_rows, int n_a, const uint16_t *w_a, int n_b,
                             const uint16_t *w_b, int head_dim, float eps, const float *rope_cos,
                             const float *rope_sin, const int32_t *pos, flint_cuda_stream s) {
    qk_norm_rope_launch(x, ldx, n_rows, n_a, w_a, n_b, w_b, head_dim, eps, rope_cos, rope_sin, pos, NULL, s);
}

void flint_cuda_qk_norm_rope_store(float *x, int ldx, int n_rows, int n_a, const uint16_t *w_a, int n_b,
                                   const uint16_t *w_b, int head_dim, float eps, const float *rope_cos,
                                   const float *rope_sin, const int32_t *pos, const flint_cuda_kv_dst *kv,
                                   flint_cuda_stream s) {
    FLINT_ASSERT(kv);
    qk_norm_rope_launch(x, ldx, n_rows, n_a, w_a, n_b, w_b, head_dim, eps, rope_cos, rope_sin, pos, kv, s);
}

/* One block per row. The row's K and V are loaded before the block-table lookup resolves (they do
 * not depend on it), 16 bytes a thread when the widths allow: the chain of a decode row is then
 * pos -> table -> store, not one trip to memory per 128 elements. Exact (bf16 rounding only). */
static __global__ void __launch_bounds__(256)
kv_store_kernel(uint16_t *kc, uint16_t *vc, const float *k, const float *v, int ld, const int32_t *pos,
                const int32_t *row_seq, const int32_t *bt, int bt_stride, int n, int bs, int vec) {
    pdl_trigger(); /* a GEMM after this kernel may start streaming its weights */
    pdl_wait();    /* FLINT_LAUNCH: what the kernel before wrote is visible from here on */
    const int r = blockIdx.x, p = pos[r];
    const int32_t blk = bt[(size_t)row_seq[r] * bt_stride + p / bs];
    const size_t base = ((size_t)blk * bs + p % bs) * n; /* n = n_kv_heads * head_dim per slot */
    if (vec) {
        const float4 *k4 = (const float4 *)(k + (size_t)r * ld), *v4 = (const float4 *)(v + (size_t)r * ld);
        uint2 *kc2 = (uint2 *)(kc + base), *vc2 = (uint2 *)(vc + base);
        for (int i = threadIdx.x; i < n / 4; i += blockDim.x) {
            const float4 a = k4[i], b = v4[i];
            kc2[i] = make_uint2((uint32_t)f2bf(a.x) | (uint32_t)f2bf(a.y) << 16, (uint32_t)f2bf(a.z) | (uint32_t)f2bf(a.w) << 16);
            vc2[i] = make_uint2((uint32_t)f2bf(b.x) | (uint32_t)f2bf(b.y) << 16, (uint32_t)f2bf(b.z) | (uint32_t)f2bf(b.w) << 16);
        }
        return;
    }
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
    const int n = n_kv_heads * head_dim;
    const int vec = n % 4 == 0 && ld % 4 == 0 && (uintptr_t)k % 16 == 0 && (uintptr_t)v % 16 == 0 &&
                    (uintptr_t)k_cache % 8 == 0 && (uintptr_t)v_cache % 8 == 0;
    const int threads = vec ? (n / 4 < 256 ? (n / 4 + 31) / 32 * 32 : 256) : 128;
    FLINT_LAUNCH(kv_store_kernel, n_rows, threads, 0, s, k_cache, v_cache, k, v, ld, pos, row_seq, block_tables,
                 bt_stride, n, block_size, vec);
    CUDA_CHECK(cudaGetLastError());
}

static __global__ void swiglu_kernel(uint16_t *out, int ldo, const float *gu, int ldg, int n) {
    pdl_trigger(); /* a GEMM after this kernel may start streaming its weights */
    pdl_wait();    /* FLINT_LAUNCH: what the kernel before wrote is visible from here on */
    const int r = blockIdx.y;
    const float *g = gu + (size_t)r * ldg, *u = g + n;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        out[(size_t)r * ldo + i] = swiglu_bf16(g[i], u[i]);
}

void flint_cuda_swiglu(uint16_t *out, int ldo, const float *gu, int ldg, int n_rows, int n, flint_cuda_stream s) {
    FLINT_ASSERT(n_rows >= 0 && n_rows <= 65535 && n > 0 && ldo >= n && ldg >= 2 * n);
    if (n_rows == 0) return;
    int bx = (n + 255) / 256;
    if (bx > 64) bx = 64;
    FLINT_LAUNCH(swiglu_kernel, dim3(bx, n_rows), 256, 0, s, out, ldo, gu, ldg, n);
    CUDA_CHECK(cudaGetLastError());
}

static __global__ void copy_rows_kernel(float *dst, int ldd, const float *src, int lds, int n, int vec) {
    pdl_trigger();
    pdl_wait();
    const float *in = src + (size_t)blockIdx.y * lds;
    float *out = dst + (size_t)blockIdx.y * ldd;
    if (vec) {
        for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n / 4; i += gridDim.x * blockDim.x)
            ((float4 *)out)[i] = ((const float4 *)in)[i];
    } else {
        for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) out[i] = in[i];
    }
}

void flint_cuda_copy_rows(float *dst, int ldd, const float *src, int lds, int n_rows, int n, flint_cuda_stream s) {
    FLINT_ASSERT(n_rows >= 0 && n_rows <= 65535 && n > 0 && ldd >= n && lds >= n);
    if (n_rows == 0) return;
    const int vec = n % 4 == 0 && ldd % 4 == 0 && lds % 4 == 0 && (uintptr_t)dst % 16 == 0 && (uintptr_t)src % 16 == 0;
    int bx = ((vec ? n / 4 : n) + 255) / 256;
    if (bx > 16) bx = 16;
    FLINT_LAUNCH(copy_rows_kernel, dim3(bx, n_rows), 256, 0, s, dst, ldd, src, lds, n, vec);
    CUDA_CHECK(cudaGetLastError());
}

static __global__ void add_kernel(float *y, const float *x, size_t n) {
    pdl_trigger();
    pdl_wait();
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        y[i] = __fadd_rn(y[i], x[i]);
}

void flint_cuda_add(float *y, const float *x, size_t n, flint_cuda_stream s) {
    if (n == 0) return;
    size_t b = (n + 255) / 256;
    FLINT_LAUNCH(add_kernel, (unsigned)(b < 4096 ? b : 4096), 256, 0, s, y, x, n);
    CUDA_CHECK(cudaGetLastError());
}

static __global__ void add_parts_kernel(float *x, const float *p, size_t n, int n_parts) {
    pdl_trigger();
    pdl_wait();
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float s;
        if (n_parts == 1) s = p[i];
        else if (n_parts == 2) s = __fadd_rn(p[i], p[n + i]);
        else if (n_parts == 4 || n_parts == 8) {
            float a = __fadd_rn(__fadd_rn(p[i], p[n + i]), __fadd_rn(p[2 * n + i], p[3 * n + i]));
            if (n_parts == 8)
                a = __fadd_rn(a, __fadd_rn(__fadd_rn(p[4 * n + i], p[5 * n + i]), __fadd_rn(p[6 * n + i], p[7 * n + i])));
            s = a;
        } else { /* other counts: rank order */
            s = p[i];
            for (int r = 1; r < n_parts; r++) s = __fadd_rn(s, p[(size_t)r * n + i]);
        }
        x[i] = __fadd_rn(x[i], s);
    }
}

void flint_cuda_add_parts(float *x, const float *parts, size_t n, int n_parts, flint_cuda_stream s) {
    FLINT_ASSERT(n_parts >= 1 && n_parts <= 64);
    if (n == 0) return;
    size_t b = (n + 255) / 256;
    FLINT_LAUNCH(add_parts_kernel, (unsigned)(b < 4096 ? b : 4096), 256, 0, s, x, parts, n, n_parts);
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
