/* The tensor-core GEMM of the forward (ops_cuda.h: flint_cuda_gemm_tc, _split, the packing, the
 * lab hooks): every tiling shares one batch-invariant order fixed by K (below), so a row gives the
 * same bits whatever M, and a tensor-parallel rank computes the unsharded quarters of its columns.
 * Weights are stored PACKED (below): tiles of 16 rows x k32 whose 16-byte rows are wgmma core
 * matrices, so a warp of the small-M path streams contiguous bytes and the warpgroup paths copy
 * tiles as they lie. Paths: the register path (tc: each warp its own tiles, M <= 32), block tiles
 * of mma.sync with a cluster per output tile (tcb), warpgroup tiles with W in registers (tcw, 33..
 * 64 rows and narrow layers to 128; long-K layers from 17 rows) and with both operands in shared
 * memory (tss, gemm_tss_cuda.cu, from 65 rows; wide layers from 17 rows): gemm_tc_pick. Split
 * from ops_cuda.cu so the GEMM kernels can evolve on their own (lab: tests/kernels, tools/lab). */
#include <pthread.h>

#include "target/cuda_common.cuh"
#include "target/wgmma.cuh" /* the epilogue modes, mbarriers, bulk copies, wgmma (TCW_HAVE), tss */

/* ==== Tensor-core GEMM: y (+)= x W^T with mma.sync m16n8k16 bf16 -> fp32 ====
 * Operands swapped: W is the MMA's A (16 rows = 16 outputs n, row-major along k) and x the MMA's
 * B (8 columns = 8 rows m of x, "col" = contiguous along k, as stored), so D is a 16 (n) x 8 (m)
 * tile and small M pads only to 8. (W is stored packed, below.)
 * k inside an MMA is permuted, the same way for A and B (a dot product does not care which of
 * its 16 slots a k sits in): for k32 block j, lane (g = lane / 4, t = lane % 4) takes elements
 * 32 j + 8 t .. + 7 of W rows n0 + g and n0 + g + 8 and of x row m0 + g (x: one 16-byte load;
 * W: from its packed tiles, by ldmatrix or 4-byte loads: TC_SMW below); MMA 0 takes
 * elements 0-3 of each (A regs {Wg.x, Wg8.x, Wg.y, Wg8.y}, B regs {x.x, x.y}), MMA 1 elements 4-7
 * ({.z, .w}). In the PTX layouts that puts MMA slot 2t+e at k = 32j+8t+e and slot 8+2t+e at
 * 32j+8t+2+e (e = 0, 1) for A and B alike.
 * Order (depends on K only): the ceil(K / 32) k32 blocks are cut into TC_KW = 4 contiguous
 * quarters of nq = ceil(nJ / 4) blocks; warp kw (0..3) of an n tile takes quarter kw,
 * blocks kw * nq .. min(nJ, (kw + 1) * nq) - 1 in increasing order, two MMAs each into one fp32
 * accumulator per output; the warps' partials are then added as (p0 + p1) + (p2 + p3). K past the
 * end reads zeros. Contiguous quarters (not blocks dealt round-robin) keep each warp's weight
 * reads streaming through consecutive bytes (one run per warp in the packed layout).
 * A tensor-parallel rank holding 1/2 or 1/4 of K (contiguous, aligned to the quarters) asks for
 * n_split = 2 or 1 parts: it then computes exactly the unsharded quarters of its columns and
 * their sum (p0 + p1, or p0), which the ranks' ordered combine completes to the unsharded bits.
 * MT (m tiles of 8 rows per warp), NT (n tiles per block), U (k32 blocks per loop step, loaded
 * one step ahead), PX (x loaded one step ahead too; 2: two steps) and the grid are picked from M for speed;
 * none changes an output's sequence of operations, and an MMA output element depends only on
 * its own row of A and column of B, so rows are bit-identical alone or in any batch. */
/* What the epilogue does with an output (the kernels' `accumulate`): store it, add it to y, or
 * (GEMM_EPI_GLU) take it as half of a SwiGLU. In that mode W is a gate-up matrix packed with its
 * rows interleaved (flint_cuda_gemm_glu_row: tile row r holds gate rows 8 r .. 8 r + 7, then up
 * rows 8 r .. 8 r + 7), so output n (n % 16 < 8) and n + 8 are the gate and up of intermediate
 * column n / 16 * 8 + n % 8, and y is really a bf16 matrix [M][ldy] that gets
 * swiglu_bf16(gate, up) there: the swiglu kernel's bits, one launch and the fp32 [M][2 I]
 * round trip fewer. Every output is still computed in the one order below first. */
/* GEMM_EPI_STORE 0, GEMM_EPI_ADD 1, GEMM_EPI_GLU 2: target/wgmma.cuh */

#define TC_KW 4      /* warps splitting K, per n tile of 16 */
#define TC_MAX_MT 8  /* m tiles of 8 rows per warp */
#define TC_MAX_U 8   /* k32 blocks per loop step */

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

/* The same lane of the 4 K warps holds the same outputs: (p0 + p1) + (p2 + p3), through red. */
static __device__ __forceinline__ void gemm_tc_epilogue(float *red, float acc[TC_MAX_MT][4], float *y, int ldy, int M,
                                                        int N, int accumulate, const int MT, int m0, int n0, int nt,
                                                        int kw, int lane) {
    const int g = lane >> 2, t = lane & 3;
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
            float s[4], old[4];
            /* D fragment: c0, c1 row (n) g, cols (m) 2t, 2t+1; c2, c3 row g + 8. The residual's 4
             * values are loaded before any store (a load after a store that may alias it waits for
             * it: one round trip per output otherwise) */
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int m = m0 + mt * 8 + 2 * t + (i & 1), n = n0 + g + 8 * (i >> 1);
                old[i] = accumulate == GEMM_EPI_ADD && m < M && n < N ? y[(size_t)m * ldy + n] : 0.0f;
            }
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int m = m0 + mt * 8 + 2 * t + (i & 1), n = n0 + g + 8 * (i >> 1);
                const float *p = red + (nt * (TC_KW - 1) * MT * 4 + mt * 4 + i) * 32 + lane; /* p1, p2, p3 */
                s[i] = __fadd_rn(__fadd_rn(acc[mt][i], p[0]), __fadd_rn(p[MT * 4 * 32], p[2 * MT * 4 * 32]));
                if (accumulate != GEMM_EPI_GLU && m < M && n < N)
                    y[(size_t)m * ldy + n] = accumulate ? __fadd_rn(old[i], s[i]) : s[i];
            }
            if (accumulate == GEMM_EPI_GLU) { /* row g is a gate, row g + 8 its up: one bf16 each */
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const int m = m0 + mt * 8 + 2 * t + e, col = n0 / 2 + g;
                    if (m < M && n0 + g < N) ((uint16_t *)y)[(size_t)m * ldy + col] = swiglu_bf16(s[e], s[2 + e]);
                }
            }
        }
    }
}

/* ==== Packed weights: tiles of 16 rows x k32 in load order ====
 * In a row-major W, a warp's load of rows g, g + 8 at k32 block j touches 8 rows x 64 bytes,
 * rows K * 2 bytes apart, and the small-M GEMMs ran at 1.7-3.1 TB/s (lab, docs/benchmarks.md).
 * Packed, tile (n tile nt, block j) is 1 KB at element (nt * nJ + j) * 512, nJ = ceil(K / 32),
 * holding rows 16 nt .. + 15 and elements 32 j .. + 31 (zeros past N or K) at gemm_tile_elem
 * (cuda_common.cuh): for each row half and MMA h, two core matrices (8 rows x 16 bytes: the
 * MMA's k slots 0-7 and 8-15 of each row, in the order below). The register path's lane (g, t)
 * takes its 8 A words of a block with 4-byte loads (each a warp's 128 contiguous bytes) and a
 * warp streams its quarter as one contiguous run; the block tiles copy the same words into
 * shared memory; the warpgroup paths copy whole tiles and hand wgmma their core matrices as they
 * lie (tss: no register ever holds W). The operands, hence the bits, are those of the row-major
 * layout. Rows 16 r0 .. of a packed matrix start at element r0 * nJ * 512. (Until session 28 a
 * tile held 16-byte chunks in the register path's fragment order, which wgmma cannot read.) */
static __global__ void gemm_pack_kernel(uint16_t *p, const uint16_t *w, int N, int K, int nJ, size_t n_el) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n_el; i += (size_t)gridDim.x * blockDim.x) {
        const size_t tile = i / 512;
        int rr, kk;
        gemm_tile_rk((int)(i % 512), &rr, &kk);
        const int n = 16 * (int)(tile / nJ) + rr, k = 32 * (int)(tile % nJ) + kk;
        p[i] = n < N && k < K ? w[(size_t)n * K + k] : 0;
    }
}

size_t flint_cuda_gemm_packed_elems(int N, int K) { return (size_t)((N + 15) / 16) * ((K + 31) / 32) * 512; }

size_t flint_cuda_gemm_packed_offset(int rows, int K) {
    FLINT_ASSERT(rows % 16 == 0);
    return (size_t)(rows / 16) * ((K + 31) / 32) * 512;
}

int flint_cuda_gemm_glu_row(int p, int I) { return (p % 16 < 8 ? 0 : I) + 8 * (p / 16) + p % 8; }

/* glu_i > 0: packed row n holds source row flint_cuda_gemm_glu_row(n, glu_i) (N = 2 glu_i) */
static void pack_rows_host(uint16_t *dst, const float *w, int tile_row, int N, int K, int glu_i) {
    const int nJ = (K + 31) / 32;
    for (int j = 0; j < nJ; j++)
        for (int q = 0; q < 512; q++) {
            int rr, kk;
            gemm_tile_rk(q, &rr, &kk);
            const int n = 16 * tile_row + rr, k = 32 * j + kk;
            const size_t src = (size_t)(glu_i > 0 && n < N ? flint_cuda_gemm_glu_row(n, glu_i) : n);
            dst[(size_t)j * 512 + q] = n < N && k < K ? flint_bf16_from_f32(w[src * K + k]) : 0;
        }
}

void flint_cuda_gemm_pack_rows_host(uint16_t *dst, const float *w, int tile_row, int N, int K) {
    pack_rows_host(dst, w, tile_row, N, K, 0);
}

void flint_cuda_gemm_pack_rows_host_glu(uint16_t *dst, const float *w, int tile_row, int I, int K) {
    FLINT_ASSERT(I > 0 && I % 8 == 0);
    pack_rows_host(dst, w, tile_row, 2 * I, K, I);
}

void flint_cuda_gemm_pack(uint16_t *p, const uint16_t *w, int N, int K, flint_cuda_stream s) {
    const int nJ = (K + 31) / 32;
    gemm_pack_kernel<<<1024, 256, 0, s>>>(p, w, N, K, nJ, flint_cuda_gemm_packed_elems(N, K));
    CUDA_CHECK(cudaGetLastError());
}

/* W's fragments in the register path, two ways (the same words; TC_SMW picks):
 * - one m tile (M <= 8): each warp stages its tiles through shared memory (two buffers of U
 *   tiles: a step's 16-byte cp.async copies land while the step before is multiplied) and
 *   ldmatrix builds the fragments: an 8 x 8 matrix per core matrix, lane (g, t) receiving word t
 *   of row g, its A word; 2 instructions a block for the 8 words {MMA 0 a0, a2, MMA 1 a0, a2} of
 *   rows g and g + 8;
 * - more m tiles: 4-byte loads straight into registers (tc_load_w), 8 a block.
 * Measured (H200, qwen3-8b verify, session 28) against the 16-byte chunks of the layout before:
 * the loads 1-1.6% slower at 1-32 rows; the staging 0.5-1.5% faster at 1-8 rows but 23% slower
 * at 32 rows (4 m tiles). */
#define TC_SMW(mt) ((mt) == 1)

/* the lane's 4 A words of one row for k32 block j, {MMA 0 a0, MMA 0 a2, MMA 1 a0, MMA 1 a2}: core
 * matrices (h, c) = (0, 0), (0, 1), (1, 0), (1, 1) at wt (the lane's word of its row half;
 * zeros when not ok) */
static __device__ __forceinline__ uint4 tc_load_w(const uint16_t *wt, int ok, int j) {
    if (!ok) return make_uint4(0u, 0u, 0u, 0u);
    const unsigned int *p = (const unsigned int *)(wt + (size_t)j * 512);
    return make_uint4(__ldcs(p), __ldcs(p + 32), __ldcs(p + 64), __ldcs(p + 96));
}
static __device__ __forceinline__ void tc_cp16(uint32_t dst, const void *src, int bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes) : "memory");
}
static __device__ __forceinline__ uint4 tc_ldsm4(uint32_t a) {
    uint4 r;
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                 : "r"(a)
                 : "memory");
    return r;
}
/* step j0's U tiles (blocks j0 .. j0 + U - 1 of the warp's run at wt0; zeros past je or the
 * matrix) into the buffer at dst: lane l copies bytes 16 l and 512 + 16 l of each; one group */
static __device__ __forceinline__ void tc_stage_w(uint32_t dst, const uint16_t *wt0, int okt, int j0, int je, int lane,
                                                  const int U) {
#pragma unroll
    for (int u = 0; u < TC_MAX_U; u++) {
        if (u >= U) break;
        const int j = j0 + u, in = okt && j < je;
        const uint16_t *src = wt0 + (size_t)(in ? j : 0) * 512 + lane * 8;
        tc_cp16(dst + u * 1024 + lane * 16, src, in ? 16 : 0);
        tc_cp16(dst + u * 1024 + 512 + lane * 16, src + 256, in ? 16 : 0);
    }
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}

/* red: the K warps' partials, [NT][TC_KW - 1][MT * 4][32] floats (declared per kernel, sized to it).
 * w is packed; vec is about x only (its rows 16-byte aligned, K % 8 == 0). The weights are read
 * once per launch, so they pass L1 by (cp.async.cg, or evict-first loads) and x stays cached. The
 * first step's weights are requested before pdl_wait: they do not depend on the kernel before.
 * vec bit 1: a short GEMM (gemm_early). wbuf: the warps' W buffers (TC_SMW, dynamic). */
static __device__ __forceinline__ void gemm_tc_body(float *red, unsigned char *wbuf, float *y, int ldy,
                                                    const uint16_t *x, int ldx,
                                                    const uint16_t *w, int M, int N, int K, int accumulate, int vec,
                                                    int n_split, const int MT, const int NT, const int U,
                                                    const int PX) {
    const int early = vec & 2; /* a short GEMM (gemm_early) */
    vec &= 1;
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    const int kw = wid % TC_KW, nt = wid / TC_KW;
    const int g = lane >> 2, t = lane & 3;
    const int n0 = (blockIdx.y * NT + nt) * 16, m0 = blockIdx.x * MT * 8;
    /* k32 blocks, per part; warps past n_split parts add nothing (their partial stays 0) */
    const int nJ = (K + 31) / 32, nq = (nJ + n_split - 1) / n_split;
    const int jb = kw * nq, je = kw < n_split ? min(nJ, jb + nq) : jb;
    const int okt = n0 < N;
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

    /* The current step's W rows g and g + 8 (and x when PX); blocks past the quarter load nothing. */
    uint4 ca[TC_MAX_U], cb[TC_MAX_U], cx[TC_MAX_U][TC_MAX_MT];
    uint4 cx2[TC_MAX_U][TC_MAX_MT]; /* PX 2: x of the step after this one (loads two steps ahead) */
    /* this n tile's run of 1 KB tiles (wt: the lane's word); SMW: the warp's buffers, lane l's
     * ldmatrix row (row l % 8 of core l / 8: MMA l / 16, core matrix l / 8 % 2, row half 0) */
    const int SMW = TC_SMW(MT);
    const uint16_t *wt0 = okt ? w + (size_t)(n0 / 16) * nJ * 512 : w, *wt = wt0 + lane * 2;
    const uint32_t wsm = (uint32_t)__cvta_generic_to_shared(wbuf) + (uint32_t)(wid * 2 * U * 1024);
    const uint32_t ldsm_off = (uint32_t)((lane >> 3) * 128 + (lane & 7) * 16);
    int buf = 0;
    if (SMW) tc_stage_w(wsm, wt0, okt, jb, je, lane, U);
    else {
#pragma unroll
        for (int u = 0; u < TC_MAX_U; u++) {
            if (u >= U) break;
            const int j = jb + u, in = j < je;
            ca[u] = tc_load_w(wt, okt && in, j);
            cb[u] = tc_load_w(wt + 256, okt && in, j);
        }
    }
    pdl_wait(); /* x and y come from the kernels before */
    /* a short GEMM lets the kernel after it start now: after the wait, so that everything before
     * this GEMM has finished by then (what kernels read before their own wait: uploads, tables) */
    if (early) pdl_trigger();
    if (PX) {
#pragma unroll
        for (int u = 0; u < TC_MAX_U; u++) {
            if (u >= U) break;
            const int j = jb + u, k = 32 * j + 8 * t, in = j < je;
            const int j2 = j + U, k2 = 32 * j2 + 8 * t, in2 = j2 < je;
#pragma unroll
            for (int mt = 0; mt < TC_MAX_MT; mt++) {
                if (mt < MT) cx[u][mt] = tc_load8(xr[mt], okx[mt] && in, k, K, vec);
                if (PX == 2 && mt < MT) cx2[u][mt] = tc_load8(xr[mt], okx[mt] && in2, k2, K, vec);
            }
        }
    }
    for (int j0 = jb; j0 < je; j0 += U) {
        uint4 na[TC_MAX_U], nb[TC_MAX_U], nx[TC_MAX_U][TC_MAX_MT]; /* the next step, in flight during this one */
        if (SMW) {
            /* the next step's W into the other buffer (its last reader was the step before: the
             * __syncwarp below), then this step's tiles, landed, into fragments */
            tc_stage_w(wsm + (buf ^ 1) * U * 1024, wt0, okt, j0 + U, je, lane, U);
            asm volatile("cp.async.wait_group 1;\n" ::: "memory");
            __syncwarp();
#pragma unroll
            for (int u = 0; u < TC_MAX_U; u++) {
                if (u >= U) break;
                ca[u] = tc_ldsm4(wsm + buf * U * 1024 + u * 1024 + ldsm_off);
                cb[u] = tc_ldsm4(wsm + buf * U * 1024 + u * 1024 + 512 + ldsm_off);
            }
            __syncwarp();
            buf ^= 1;
        }
#pragma unroll
        for (int u = 0; u < TC_MAX_U; u++) {
            if (u >= U) break;
            const int j = j0 + U + u, in = j < je;
            if (!SMW) {
                na[u] = tc_load_w(wt, okt && in, j);
                nb[u] = tc_load_w(wt + 256, okt && in, j);
            }
            if (PX) { /* the next step's x (PX 2: the one after it) */
                const int jx = PX == 2 ? j + U : j, kx = 32 * jx + 8 * t, inx = jx < je;
#pragma unroll
                for (int mt = 0; mt < TC_MAX_MT; mt++)
                    if (mt < MT) nx[u][mt] = tc_load8(xr[mt], okx[mt] && inx, kx, K, vec);
            }
        }
#pragma unroll
        for (int u = 0; u < TC_MAX_U; u++) {
            if (u >= U) break;
            const int j = j0 + u;
            if (j < je) { /* warp-uniform */
                const int k = 32 * j + 8 * t;
                uint4 xv[TC_MAX_MT];
#pragma unroll
                for (int mt = 0; mt < TC_MAX_MT; mt++)
                    if (mt < MT) xv[mt] = PX ? cx[u][mt] : tc_load8(xr[mt], okx[mt], k, K, vec);
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
            if (!SMW) ca[u] = na[u], cb[u] = nb[u];
            if (PX) {
#pragma unroll
                for (int mt = 0; mt < TC_MAX_MT; mt++) {
                    if (mt >= MT) break;
                    if (PX == 2) cx[u][mt] = cx2[u][mt], cx2[u][mt] = nx[u][mt];
                    else cx[u][mt] = nx[u][mt];
                }
            }
        }
    }

    /* No pdl_trigger here: the kernel after a long GEMM is scheduled when the GEMM's blocks exit.
     * A trigger before this epilogue (session 19) made the whole chain up to the next GEMM resident
     * early and cost qwen3-8b 1-11% at 1-8 rows (batch 8 x q 1: 5.33 -> 5.93 ms). Short GEMMs
     * trigger after their wait instead (vec bit 1, gemm_early). */
    gemm_tc_epilogue(red, acc, y, ldy, M, N, accumulate, MT, m0, n0, nt, kw, lane);
}

/* cp.async groups (the block tiles' stage pipeline) */
static __device__ __forceinline__ void cp_async_commit(void) { asm volatile("cp.async.commit_group;\n" ::); }
static __device__ __forceinline__ void cp_async_wait(const int n) {
    if (n <= 0) asm volatile("cp.async.wait_group 0;\n" ::);
    else if (n == 1) asm volatile("cp.async.wait_group 1;\n" ::);
    else if (n == 2) asm volatile("cp.async.wait_group 2;\n" ::);
    else if (n == 3) asm volatile("cp.async.wait_group 3;\n" ::);
    else if (n == 4) asm volatile("cp.async.wait_group 4;\n" ::);
    else if (n == 5) asm volatile("cp.async.wait_group 5;\n" ::);
    else asm volatile("cp.async.wait_group 0;\n" ::); /* deeper rings: wait for all (correct, slower) */
}

/* ==== The block-tile path (tcb): compute-bound tiles for M in the hundreds ====
 * The paths above give each 16 outputs their own 4 warps, so a W fragment feeds at most 8 m
 * tiles and an x fragment one n tile, the operands coming (mostly) straight from global memory:
 * ~140 TFLOP/s at M = 512. Here a block computes a BN (n) x BM (m) output tile (256 x 128,
 * 128 x 128, ...) with WN x WM warps, each owning TN x TM MMA tiles (4 x 8: 64 n x 64 m, so a
 * fragment load feeds 8 or 4 MMAs), from W and x tiles that an S-stage cp.async pipeline of U
 * k32 blocks per stage puts in shared memory.
 * Order: the same as the register path, operand for operand. Part p of K (of n_split) is
 * computed by block p of a cluster of the n_split blocks of one output tile, so a block runs ONE
 * chain per output: the k32 blocks j = jb .. je - 1 of part p (jb = p nq, je = min(nJ, jb + nq):
 * warp kw = p's bounds in gemm_tc_body) in increasing order, MMA 0 (elements 0-3 of each lane's
 * 16 bytes) then MMA 1 (elements 4-7) of block j, into one fp32 accumulator that starts at +0;
 * blocks of a stage at or past je issue no MMA. Each MMA gets the register path's operands in
 * the register path's slots: A = {Wg.x, Wg8.x, Wg.y, Wg8.y} (MMA 1: .z, .w), B = {xg.x, xg.y}
 * (MMA 1: .z, .w), with Wg, Wg8, xg the 16 bytes at k = 32 j + 8 t of W rows g, g + 8 and of x
 * row g of the MMA's tiles (lane g = lane / 4, t = lane % 4); the copies put zeros past K and
 * for rows past N or M, as the register path's loads do. Issuing the MMAs of several outputs
 * interleaved (MMA 0 of every tile of a block, then MMA 1) changes nothing: a D element depends
 * only on its own accumulator, its W row and its x row. Then each block writes its partial to
 * shared memory and, after a cluster barrier, block r reads rows r BM / n_split .. of all
 * n_split partials through distributed shared memory and stores __fadd_rn(__fadd_rn(p0, p1),
 * __fadd_rn(p2, p3)) (the parts past n_split are +0, as the register path's idle warps), or adds
 * it to y with __fadd_rn(y, s): the register path's epilogue, element for element.
 * Why a part per block: one set of accumulators in registers (128 floats for 64 x 64 per warp).
 * The 4 parts in one block would need three sets live at once (s01, p2 and the running p3),
 * i.e. half the tile per block (or a third of it, or shared memory for two sets); and n_split
 * blocks per tile give M = 128..256 enough blocks too. The exchange costs BN BM 4 bytes per block
 * through distributed shared memory, against K / n_split (BN + BM) 2 bytes copied in the loop.
 * Shared memory: a stage holds the BN / 2 W row pairs (16 G + r, 16 G + r + 8) of the tile, then
 * the BM / 2 x row pairs, pair P at P * 128 U bytes, block u at + 128 u, chunk t at + 32 t: 32
 * bytes laid out as MMA 0's operands then MMA 1's, the two 16-byte halves swapped when r is odd
 * (words are 2 bf16: word 4t + e holds elements 8t + 2e, 8t + 2e + 1 of the block). W: the A
 * quad {row r word 4t, row r + 8 word 4t, row r word 4t + 1, row r + 8 word 4t + 1} (then words
 * 4t + 2, 4t + 3), filled by 4-byte copies; x: {row r words 4t, 4t + 1, row r + 8 words 4t,
 * 4t + 1}, the B pairs of m tiles 2 G and 2 G + 1 (then words 4t + 2, 4t + 3), by 8-byte copies.
 * So every fragment is ONE 16-byte load landing in the MMA's register order (with whole-row
 * 16-byte copies each A quad had to be assembled by register moves, ~2.5 per MMA in the SASS),
 * and a half block (MMA h of every tile) is TN + TM / 2 loads, small enough to double-buffer:
 * the next half's fragments load while this half's MMAs issue, across the stage barrier too.
 * Banks: a 16-byte load's quarter warp (lanes 8q .. 8q + 7: g = 2q, 2q + 1, t = 0..3) reads
 * pairs 2q and 2q + 1 at 32 t + 16 (h ^ (g & 1)): 32 banks; a copy instruction writes whole
 * 128-byte pair blocks. The partial tile, [BM][BN + 4] floats over the stages, takes the
 * fragment stores (n = g, m = 2 t (+1)) on 32 banks.
 * Needs the vector case (K % 8 == 0, 16-byte aligned x and w, ldx % 8 == 0); the launcher falls
 * back to a register-path variant otherwise. WN * WM must be 4 or 8 warps, TM even, U 1 or 2. */
#define TCB_MAX_TN 4
#define TCB_MAX_TM 8
#define TCB_MAX_COPY 32 /* W (4-byte) or x (8-byte) copies per thread per k32 block */
#define TCB_PADF 4      /* floats of padding per row of the partial tile */

static __device__ __forceinline__ void cp_async4(uint32_t smem, const void *gmem, int bytes) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem), "l"(gmem), "r"(bytes));
}
static __device__ __forceinline__ void cp_async8(uint32_t smem, const void *gmem, int bytes) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(smem), "l"(gmem), "r"(bytes));
}
static __device__ __forceinline__ uint32_t cluster_rank(void) {
    uint32_t r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}
/* every thread of every block of the cluster; orders the shared-memory writes before it
 * (release) before the reads after it (acquire), local and remote */
static __device__ __forceinline__ void cluster_sync(void) {
    asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
/* the same barrier without the release: for the last one, where only "every remote read is done"
 * matters (a thread arrives after the instructions that consumed its loads), this skips the fence
 * that would wait for the y stores to reach L2 */
static __device__ __forceinline__ void cluster_sync_relaxed(void) {
    asm volatile("barrier.cluster.arrive.relaxed.aligned;\n\tbarrier.cluster.wait.aligned;" ::: "memory");
}
/* 16 bytes at shared address a of this block (its own partial: no trip through the cluster) */
static __device__ __forceinline__ float4 ld_shared_f4(uint32_t a) {
    float4 v;
    asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(a));
    return v;
}
/* 16 bytes at shared address a (of this block's layout) in block `rank` of the cluster */
static __device__ __forceinline__ float4 ld_cluster_f4(uint32_t a, uint32_t rank) {
    uint32_t ra;
    float4 v;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(ra) : "r"(a), "r"(rank));
    asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];" /* after the barrier: volatile */
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
                 : "r"(ra));
    return v;
}

/* A thread's copies, fixed for the whole K loop (per k32 block u of a stage):
 * - W, 4 bytes: a warp's copy i is one packed core matrix, 128 contiguous bytes (lane (g, t):
 *   row g, word t): core q % 8 of tile row n0 / 16 + q / 8, q = warp + NW i, i.e. rows 16 G + 8 h'
 *   + g (h' = core / 4, the row half) at k slots of MMA core / 2 % 2, core matrix core % 2; it
 *   lands where the fragment order wants word 4 t + core % 4 of that row (pair 8 G + g) (zeros
 *   past N and K are stored there; tile rows past the matrix are not read);
 * - x, 8 bytes: copy i is piece pc = lane % 8 (elements 4 pc .. 4 pc + 3) of row half
 *   h = lane / 8 % 2 of pair 2 warp + lane / 16 + 2 NW i (r = that mod 8, constant): x row
 *   m0 + 16 ((2 warp + lane / 16) / 8) + r + 8 h + o with o = 4 NW i.
 * A copy out of range reads nothing (src-size 0) but still gets an address inside the matrix:
 * tile row min(G, wlim - 1), block min(j, nJ - 1); x row offset min(o, xlim - 1), k min(k, K - 4). */
typedef struct tcb_src {
    const uint16_t *w;     /* this thread's W copy 0 at block 0 (packed) */
    const uint16_t *x;     /* row o = 0 of this thread's x copies (element 0; maybe past the end) */
    int wlim, xlim;        /* W: tile rows from n0 / 16 in the matrix (G < wlim); x: o < xlim */
    int xk;                /* 4 pc */
    uint32_t wdst, xdst;   /* shared offsets of copy 0 of block 0 in a stage */
} tcb_src;

/* One stage: k32 blocks j0 .. j0 + U - 1 into the stage at shared address dst. Zeros past N, M, K
 * and for blocks at or past je (which are not multiplied anyway). */
static __device__ __forceinline__ void tcb_load_stage(uint32_t dst, const tcb_src *c, int K, int ldx, int j0, int je,
                                                      const int BN, const int BM, const int NW, const int U) {
    int wlim = c->wlim, xlim = c->xlim;
    /* opaque: the per-copy clamps are recomputed per stage (one min each), not hoisted out of the
     * K loop into a register per copy (which pushes the kernel past 255 registers) */
    asm volatile("" : "+r"(wlim), "+r"(xlim));
#pragma unroll
    for (int u = 0; u < 2; u++) {
        if (u >= U) break;
        const int nJ = (K + 31) / 32, k = 32 * (j0 + u), in = j0 + u < je, xok = in && k + c->xk < K;
        /* byte addresses: one wide multiply-add per copy */
        const char *wk = (const char *)(c->w + (size_t)min(j0 + u, nJ - 1) * 512);
        const char *xk = (const char *)(c->x + min(k + c->xk, K - 4));
#pragma unroll
        for (int i = 0; i < TCB_MAX_COPY; i++) {
            if (i >= BN / 2 / NW) break;
            const int b = (NW * i & 7) >> 2, G = NW * i >> 3; /* core wid + 4 b of tile G */
            cp_async4(dst + c->wdst + 8 * G * 128 * U + 128 * u + 4 * b,
                      wk + ((ptrdiff_t)min(G, wlim - 1) * nJ * 512 + 256 * b) * 2, in && G < wlim ? 4 : 0);
        }
#pragma unroll
        for (int i = 0; i < TCB_MAX_COPY; i++) {
            if (i >= BM / 4 / NW) break;
            const int o = 4 * NW * i;
            cp_async8(dst + BN * 64 * U + c->xdst + 2 * NW * i * 128 * U + 128 * u,
                      xk + (ptrdiff_t)min(o, xlim - 1) * (2 * ldx), xok && o < xlim ? 8 : 0);
        }
    }
}

/* Half h (MMA h's operands) of block u of a stage: the A quads of the warp's TN n tiles and the
 * B quads of its TM / 2 pairs of m tiles. a_off, b_off: the lane's pair, chunk and half-swap. */
static __device__ __forceinline__ void tcb_load_half(uint4 a[TCB_MAX_TN], uint4 b[TCB_MAX_TM / 2],
                                                     const unsigned char *stage, int a_off, int b_off, int u, int h,
                                                     const int TN, const int TM, const int U) {
#pragma unroll
    for (int tn = 0; tn < TCB_MAX_TN; tn++) {
        if (tn >= TN) break;
        a[tn] = *(const uint4 *)(stage + (a_off ^ (16 * h)) + tn * 1024 * U + 128 * u);
    }
#pragma unroll
    for (int tp = 0; tp < TCB_MAX_TM / 2; tp++) {
        if (tp >= TM / 2) break;
        b[tp] = *(const uint4 *)(stage + (b_off ^ (16 * h)) + tp * 1024 * U + 128 * u);
    }
}

static __device__ __forceinline__ void tcb_mma_half(float acc[TCB_MAX_TN][TCB_MAX_TM][4], const uint4 a[TCB_MAX_TN],
                                                    const uint4 b[TCB_MAX_TM / 2], const int TN, const int TM) {
#pragma unroll
    for (int tn = 0; tn < TCB_MAX_TN; tn++) {
        if (tn >= TN) break;
#pragma unroll
        for (int tp = 0; tp < TCB_MAX_TM / 2; tp++) {
            if (tp >= TM / 2) break;
            mma_bf16_16816(acc[tn][2 * tp], a[tn].x, a[tn].y, a[tn].z, a[tn].w, b[tp].x, b[tp].y);
            mma_bf16_16816(acc[tn][2 * tp + 1], a[tn].x, a[tn].y, a[tn].z, a[tn].w, b[tp].z, b[tp].w);
        }
    }
}

/* (p0 + p1) + (p2 + p3) for 4 outputs: the register path's combine of the K parts */
static __device__ __forceinline__ float4 sum_parts(const float4 q[4]) {
    return make_float4(__fadd_rn(__fadd_rn(q[0].x, q[1].x), __fadd_rn(q[2].x, q[3].x)),
                       __fadd_rn(__fadd_rn(q[0].y, q[1].y), __fadd_rn(q[2].y, q[3].y)),
                       __fadd_rn(__fadd_rn(q[0].z, q[1].z), __fadd_rn(q[2].z, q[3].z)),
                       __fadd_rn(__fadd_rn(q[0].w, q[1].w), __fadd_rn(q[2].w, q[3].w)));
}

/* The n_split partials of 4 steps' units (a unit: 4 consecutive outputs of a row, rows part *
 * rows ..), every remote read issued before any is summed (latency); +0 for units out of range
 * and parts past ns. */
static __device__ __forceinline__ void tcb_combine_load(float4 p[4][4], uint32_t tile_s, int s0, int steps, int rows,
                                                        int G4, int LDR, int T, int tid, int ns, int M, int N, int m0,
                                                        int n0, int part) {
#pragma unroll
    for (int b = 0; b < 4; b++) {
        const int idx = tid + (s0 + b) * T, ml = part * rows + idx / G4, nl = 4 * (idx % G4);
        const uint32_t a = tile_s + (uint32_t)(ml * LDR + nl) * 4;
        const int need = s0 + b < steps && idx < rows * G4 && m0 + ml < M && n0 + nl < N;
#pragma unroll
        for (int q = 0; q < 4; q++)
            p[b][q] = !need || q >= ns ? make_float4(0.0f, 0.0f, 0.0f, 0.0f) : q == part ? ld_shared_f4(a)
                                                                                           : ld_cluster_f4(a, q);
    }
}

/* tcb_combine's GEMM_EPI_GLU form, with tcb_combine's loads (4 consecutive outputs a thread,
 * consecutive threads on consecutive outputs: a read of the partials that spreads a gate's and
 * its up's quads over one thread each ran at half the banks' rate and cost the 512-row GEMM 3%).
 * Lane l holds outputs 4 (l % 4) .. + 3 of a group of 16 (T and BN / 4 are multiples of 32 and
 * 4, so l % 4 is the unit's place in its group): lanes with l % 4 < 2 hold gates, and take the
 * matching ups from lane l + 2 (same group, same row), then store 4 bf16 at intermediate column
 * n0 / 2 + 8 (group) + 4 (l % 4). Every lane reaches the shuffles (out-of-range units carry 0). */
static __device__ __forceinline__ void tcb_combine_glu(uint32_t tile_s, uint16_t *o, int ldo, int M, int N, int m0,
                                                       int n0, const int BN, const int BM, const int LDR, const int T,
                                                       int tid, int part, int ns) {
    const int rows = BM / ns, G4 = BN / 4, steps = (rows * G4 + T - 1) / T, lane = tid & 31;
#pragma unroll 1
    for (int s0 = 0; s0 < steps; s0 += 4) {
        float4 p[4][4];
        tcb_combine_load(p, tile_s, s0, steps, rows, G4, LDR, T, tid, ns, M, N, m0, n0, part);
#pragma unroll
        for (int b = 0; b < 4; b++) {
            const int idx = tid + (s0 + b) * T, ml = part * rows + idx / G4, nl = 4 * (idx % G4);
            const int m = m0 + ml, n = n0 + nl;
            const float4 g = sum_parts(p[b]);
            const float4 u = make_float4(__shfl_down_sync(0xffffffffu, g.x, 2), __shfl_down_sync(0xffffffffu, g.y, 2),
                                         __shfl_down_sync(0xffffffffu, g.z, 2), __shfl_down_sync(0xffffffffu, g.w, 2));
            if ((lane & 3) >= 2 || s0 + b >= steps || idx >= rows * G4 || m >= M || n >= N) continue;
            uint16_t *op = o + (size_t)m * ldo + n0 / 2 + 8 * (nl / 16) + (nl & 15);
            const float gv[4] = {g.x, g.y, g.z, g.w}, uv[4] = {u.x, u.y, u.z, u.w};
            uint16_t r[4];
#pragma unroll
            for (int e = 0; e < 4; e++) r[e] = swiglu_bf16(gv[e], uv[e]);
            if (((uintptr_t)op & 7) == 0 && n + 3 < N) {
                *(uint2 *)op = make_uint2(r[0] | (uint32_t)r[1] << 16, r[2] | (uint32_t)r[3] << 16);
            } else {
#pragma unroll
                for (int e = 0; e < 4; e++)
                    if (n + e < N) op[e] = r[e];
            }
        }
    }
}

/* After the cluster barrier: block `part` combines rows part * BM / ns .. of the n_split partial
 * tiles ([BM][LDR] floats at tile_s in every block of the cluster), 4 outputs per thread per
 * step, the remote reads of 4 steps issued before their sums are stored (latency):
 * (p0 + p1) + (p2 + p3), parts past ns +0, stored or added to y (or, GEMM_EPI_GLU, the SwiGLU of
 * gate and up pairs: tcb_combine_glu). Shared by tcb and tcw. */
static __device__ __forceinline__ void tcb_combine(uint32_t tile_s, float *y, int ldy, int M, int N, int m0, int n0,
                                                   int accumulate, const int BN, const int BM, const int LDR,
                                                   const int T, int tid, int part, int ns) {
    if (accumulate == GEMM_EPI_GLU) {
        tcb_combine_glu(tile_s, (uint16_t *)y, ldy, M, N, m0, n0, BN, BM, LDR, T, tid, part, ns);
        return;
    }
    const int rows = BM / ns, G4 = BN / 4, steps = (rows * G4 + T - 1) / T;
    const int vy = ((uintptr_t)y & 15) == 0 && (ldy & 3) == 0;
#pragma unroll 1
    for (int s0 = 0; s0 < steps; s0 += 4) {
        float4 p[4][4];
        tcb_combine_load(p, tile_s, s0, steps, rows, G4, LDR, T, tid, ns, M, N, m0, n0, part);
        /* the residual's values, two steps' at a time, loaded before their stores (a load after a
         * store that may alias it waits for it; all four steps' at once spill at 96 registers) */
#pragma unroll
        for (int b0 = 0; b0 < 4; b0 += 2) {
            float old[2][4];
#pragma unroll
            for (int bb = 0; bb < 2; bb++) {
                const int b = b0 + bb, idx = tid + (s0 + b) * T, ml = part * rows + idx / G4, nl = 4 * (idx % G4);
                const int m = m0 + ml, n = n0 + nl;
                const int ok = accumulate && s0 + b < steps && idx < rows * G4 && m < M && n < N;
                const float *yp = y + (size_t)m * ldy + n;
                if (ok && vy && n + 3 < N) {
                    const float4 o = *(const float4 *)yp;
                    old[bb][0] = o.x, old[bb][1] = o.y, old[bb][2] = o.z, old[bb][3] = o.w;
                } else {
#pragma unroll
                    for (int e = 0; e < 4; e++) old[bb][e] = ok && n + e < N ? yp[e] : 0.0f;
                }
            }
#pragma unroll
            for (int bb = 0; bb < 2; bb++) {
                const int b = b0 + bb, idx = tid + (s0 + b) * T, ml = part * rows + idx / G4, nl = 4 * (idx % G4);
                const int m = m0 + ml, n = n0 + nl;
                if (s0 + b >= steps || idx >= rows * G4 || m >= M || n >= N) continue;
                const float4 sum = sum_parts(p[b]);
                float sv[4] = {sum.x, sum.y, sum.z, sum.w};
                if (accumulate)
#pragma unroll
                    for (int e = 0; e < 4; e++) sv[e] = __fadd_rn(old[bb][e], sv[e]);
                float *yp = y + (size_t)m * ldy + n;
                if (vy && n + 3 < N) {
                    *(float4 *)yp = make_float4(sv[0], sv[1], sv[2], sv[3]);
                } else {
#pragma unroll
                    for (int e = 0; e < 4; e++)
                        if (n + e < N) yp[e] = sv[e];
                }
            }
        }
    }
}

static __device__ __forceinline__ void gemm_tcb_body(unsigned char *tile, float *y, int ldy, const uint16_t *x,
                                                     int ldx, const uint16_t *w, int M, int N, int K, int accumulate,
                                                     const int WN, const int WM, const int TN, const int TM,
                                                     const int S, const int U) {
    const int NW = WN * WM, T = 32 * NW, BN = 16 * TN * WN, BM = 8 * TM * WM;
    const int stage_bytes = (BN + BM) * 64 * U;
    const int tid = threadIdx.x, lane = tid & 31, wid = tid >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int wn = wid % WN, wm = wid / WN;
    const int n0 = blockIdx.y * BN, m0 = blockIdx.x * BM;
    /* this block's part of K: the cluster is the n_split blocks (z) of one output tile */
    const int part = (int)cluster_rank(), ns = gridDim.z;
    const int nJ = (K + 31) / 32, nq = (nJ + ns - 1) / ns;
    const int jb = part * nq, je = min(nJ, jb + nq);
    const int n_st = je > jb ? (je - jb + U - 1) / U : 0;
    const uint32_t tile_s = (uint32_t)__cvta_generic_to_shared(tile);
    tcb_src src;
    {
        src.wlim = (N + 15) / 16 - n0 / 16; /* >= 1: the block's n0 < N */
        src.w = w + (size_t)(n0 / 16) * nJ * 512 + 64 * wid + 2 * lane; /* core wid, row g, word t */
        src.wdst = g * 128 * U + 32 * t + 4 * ((2 * (wid & 3) + (wid >> 2)) ^ ((g & 1) << 2));
        const int xp = 2 * wid + (lane >> 4), xr = xp & 7, xh = (lane >> 3) & 1, pc = lane & 7;
        const int xrow = 16 * (xp >> 3) + xr + 8 * xh;
        src.xk = 4 * pc;
        src.xlim = M - m0 - xrow;
        src.x = x + (ptrdiff_t)(m0 + xrow) * ldx;
        src.xdst = xp * 128 * U + 32 * (pc >> 1) + 8 * ((2 * (pc & 1) + xh) ^ ((xr & 1) << 1));
    }

    float acc[TCB_MAX_TN][TCB_MAX_TM][4];
#pragma unroll
    for (int tn = 0; tn < TCB_MAX_TN; tn++)
#pragma unroll
        for (int tm = 0; tm < TCB_MAX_TM; tm++)
#pragma unroll
            for (int i = 0; i < 4; i++) acc[tn][tm][i] = 0.0f;
    pdl_wait(); /* a no-op while the block tiles are launched without the attribute (below) */

    /* the lane's fragments in a stage: W pair 8 (wn TN + tn) + g, x pair 8 (wm TM / 2 + tp) + g,
     * chunk t, MMA h's half at 16 (h ^ (g & 1)) */
    const int a_off = (8 * wn * TN + g) * 128 * U + 32 * t + 16 * (g & 1);
    const int b_off = BN * 64 * U + (8 * wm * (TM / 2) + g) * 128 * U + 32 * t + 16 * (g & 1);
    uint4 fa[2][TCB_MAX_TN], fb[2][TCB_MAX_TM / 2]; /* fragments of the current and the next half block */

    /* All S slots in flight at the start. Stage it + S goes into stage it's slot once every thread
     * has loaded its last fragments of stage it (at the barrier before stage it + 1's first loads).
     * A group is committed per stage (empty past the end): before the barrier into stage it + 1,
     * S + it groups are committed, so wait_group(S - 2) means stages .. it + 1 have landed. */
#pragma unroll 1
    for (int st = 0; st < S; st++) {
        if (st < n_st) tcb_load_stage(tile_s + st * stage_bytes, &src, K, ldx, jb + st * U, je, BN, BM, NW, U);
        cp_async_commit();
    }
    cp_async_wait(S - 1);
    __syncthreads();
    if (n_st > 0) tcb_load_half(fa[0], fb[0], tile, a_off, b_off, 0, 0, TN, TM, U);
    int slot = 0;
#pragma unroll 1
    for (int it = 0; it < n_st; it++) {
        const int j0 = jb + it * U, next = slot + 1 == S ? 0 : slot + 1;
        const unsigned char *stage = tile + slot * stage_bytes;
#pragma unroll
        for (int hs = 0; hs < 4; hs++) { /* half blocks in order: (u 0, MMA 0), (u 0, MMA 1), (u 1, MMA 0), .. */
            if (hs >= 2 * U) break;
            const int u = hs >> 1, nb = (hs + 1) & 1, cross = hs + 1 == 2 * U && it + 1 < n_st;
            if (hs + 1 < 2 * U) {
                if (j0 + ((hs + 1) >> 1) < je) /* block-uniform */
                    tcb_load_half(fa[nb], fb[nb], stage, a_off, b_off, (hs + 1) >> 1, (hs + 1) & 1, TN, TM, U);
            } else if (cross) { /* block-uniform */
                cp_async_wait(S - 2);
                __syncthreads(); /* stage it + 1 visible; every thread is past its loads of stage it */
                tcb_load_half(fa[nb], fb[nb], tile + next * stage_bytes, a_off, b_off, 0, 0, TN, TM, U);
            }
            if (j0 + u < je) tcb_mma_half(acc, fa[hs & 1], fb[hs & 1], TN, TM); /* block-uniform */
            if (cross) { /* refill stage it's slot while the MMAs run */
                if (it + S < n_st)
                    tcb_load_stage(tile_s + slot * stage_bytes, &src, K, ldx, jb + (it + S) * U, je, BN, BM, NW, U);
                cp_async_commit();
            }
        }
        slot = next;
    }
    cp_async_wait(0);
    __syncthreads(); /* the stages are free: the partial tile goes over them */

    /* this part's partial, [BM][LDR] floats; D fragment: c0, c1 at n = g, m = 2t, 2t + 1; c2, c3 at n = g + 8 */
    const int LDR = BN + TCB_PADF;
    float *red = (float *)tile;
#pragma unroll
    for (int tn = 0; tn < TCB_MAX_TN; tn++) {
        if (tn >= TN) break;
#pragma unroll
        for (int tm = 0; tm < TCB_MAX_TM; tm++) {
            if (tm >= TM) break;
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int nl = wn * TN * 16 + tn * 16 + g + 8 * (i >> 1), ml = wm * TM * 8 + tm * 8 + 2 * t + (i & 1);
                red[ml * LDR + nl] = acc[tn][tm][i];
            }
        }
    }
    cluster_sync();

    tcb_combine(tile_s, y, ldy, M, N, m0, n0, accumulate, BN, BM, LDR, T, tid, part, ns);
    cluster_sync_relaxed(); /* no block leaves while another still reads its partial */
}

/* ==== The warpgroup path (tcw): wgmma for M in the tens and hundreds (sm_90a) ====
 * mma.sync (tcb) tops out near 175-230 TFLOP/s at M = 512: every fragment passes through a
 * thread's registers. wgmma m64nNk16 multiplies 64 rows of A by N columns of B per warpgroup
 * instruction, asynchronously. Its B comes from shared memory through a descriptor, and its A may
 * come from registers in mma.sync's m16n8k16 fragment layout (each warp its 16 rows). So:
 * - A = W: each warp's fragments are the register path's, slot for slot (the lane's 8 words of
 *   rows g and g + 8, in the register path's order), loaded from a shared-memory copy of its
 *   packed 1 KB tiles (one bulk copy per tile row per stage: a row's tiles are contiguous);
 * - B = x, with its k slots in the register path's permuted order: for MMA h, core matrix c
 *   (slots 8c .. 8c + 7 of 8 rows of x, 16 bytes each) holds word 2h + c of chunks t = 0..3 of
 *   the row's k32 block. That is a 4 x 4 word transpose of each row's four 16-byte chunks, which
 *   a copy engine cannot do, and a producer thread that does it with loads and shared stores
 *   needs a proxy fence per stage, which waits for its loads in flight (MEMBAR.ALL.CTA in the
 *   SASS; the first version did that: 106 us at M = 512 where this one takes 94, 4096 x 4096,
 *   k64 stages). So a small kernel writes x once in that layout to a
 *   scratch buffer bound to the stream (flint_cuda_gemm_scratch_bind; the layout: block j of
 *   row m at byte j Mp 64 + (m / 8) 512 + (h 2 + c) 128 + (m % 8) 16, Mp = M rounded up to 128,
 *   zeros past M and K), and the GEMM moves both operands with bulk copies only. Where the
 *   kernel before the GEMM can write its output in that layout itself (the target's norms, its
 *   attention, the gate-up GEMM's SwiGLU: flint_cuda_gemm_xp, _tc_glu_xp, _tc_xp), the GEMM runs
 *   without the permute (session 29); rows past M then hold whatever was there, which only
 *   their own (unstored) outputs read.
 * The MMA then sees the operands the register path gives mma.sync, in the same slots, and the
 * chain per output is the register path's (part p's k32 blocks in order, MMA 0 then MMA 1, from
 * +0): tests/kernels/lab_wgmma.cu measured wgmma and mma.sync equal bit for bit that way, and
 * test_cuda_ops checks every variant against the register path. The n_split parts of K are the
 * blocks of a cluster and combine as tcb's (tcb_combine).
 * Block: 2 consumer warpgroups (64 W rows each: TCW_BN = 128 W rows x BM rows of x) and one
 * producer warp whose lane 0 issues the copies. Stages of U k32 blocks in an S-slot ring, two
 * mbarriers per slot: full (the producer's arrival with the stage's byte count) and empty (the 8
 * consumer warps, once the wgmmas that read the slot are done). wgmma reads its A registers
 * asynchronously: the source alternates two sets of fragments and commits a group per stage
 * (wait_group 1 after each). Session 17's version issued each k32 block's wgmmas under a
 * "block-uniform" branch (the last stage of a part could be short) and kept no set alive past
 * its wgmmas: ptxas injected warpgroup.arrive before every wgmma (info C7519). Now the launcher
 * sends only parts of whole stages here (K / 32 a multiple of n_split U; others take the block
 * tiles), the wgmmas are unconditional, and an empty asm uses the previous stage's set after the
 * wait that retires it, so the two sets cannot share registers: no C7519. The time per stage
 * did not change with that (lab, session 22): what did was two blocks a multiprocessor (rings of
 * 96 KB, k64 stages), one block's fill and combine overlapping the other's K loop: 1.1-1.2x at
 * 64..512 rows. W in shared memory (wgmma's SS form) would need W in core-matrix order.
 * Shared memory per stage: W tile row r (0..7) at r U KB, block u at + u KB (the packed bytes:
 * gemm_tile_elem); then x: block u at 8 U KB + u BM 64, in the scratch
 * layout (MMA h's descriptor at + 256 h: LBO 128, SBO 512, no swizzle). */
#define TCW_BN 128
#define TCW_THREADS 288
#define TCW_MP 128 /* the scratch's rows are padded to this */


/* x (M rows, ldx apart) into the scratch layout above; one thread per (row, k32 block) */
static __global__ void tcw_permute_kernel(unsigned char *xp, const uint16_t *x, int ldx, int M, int K, int Mp, int nJ) {
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)nJ * Mp) return;
    const int j = (int)(idx / Mp), m = (int)(idx % Mp);
    pdl_wait();
    uint4 c[4];
#pragma unroll
    for (int t = 0; t < 4; t++) {
        const int k = 32 * j + 8 * t;
        c[t] = m < M && k < K ? __ldg((const uint4 *)(x + (size_t)m * ldx + k)) : make_uint4(0u, 0u, 0u, 0u);
    }
    unsigned char *o = xp + (size_t)j * Mp * 64 + (m >> 3) * 512 + (m & 7) * 16;
    *(uint4 *)(o) = make_uint4(c[0].x, c[1].x, c[2].x, c[3].x);
    *(uint4 *)(o + 128) = make_uint4(c[0].y, c[1].y, c[2].y, c[3].y);
    *(uint4 *)(o + 256) = make_uint4(c[0].z, c[1].z, c[2].z, c[3].z);
    *(uint4 *)(o + 384) = make_uint4(c[0].w, c[1].w, c[2].w, c[3].w);
}

static __device__ __forceinline__ void gemm_tcw_body(unsigned char *smem, float *y, int ldy, const unsigned char *xp,
                                                     int Mp, const uint16_t *w, int M, int N, int K, int accumulate,
                                                     const int BM, const int U, const int S) {
#if TCW_HAVE
    const int stage_bytes = U * (8192 + 64 * BM);
    const int tid = threadIdx.x, wg = tid >> 7;
    const int n0 = blockIdx.y * TCW_BN, m0 = blockIdx.x * BM;
    const int part = (int)cluster_rank(), ns = gridDim.z;
    const int nJ = (K + 31) / 32, nq = (nJ + ns - 1) / ns;
    const int jb = part * nq, je = min(nJ, jb + nq);
    const int n_st = je > jb ? (je - jb + U - 1) / U : 0;
    const uint32_t smem_s = (uint32_t)__cvta_generic_to_shared(smem);
    const uint32_t bars = smem_s + S * stage_bytes; /* full[S], then empty[S] */
    mbar_ring_init(bars, S, 8);
    pdl_wait(); /* the scratch comes from the kernel before */

    float acc[TCW_MAX_BM / 2];
#pragma unroll
    for (int i = 0; i < TCW_MAX_BM / 2; i++) acc[i] = 0.0f;
    if (wg == 2) { /* the producer warp: lane 0 issues every copy */
        if (tid == 256) {
            const int tiles = min(8, (N + 15) / 16 - n0 / 16);
#pragma unroll 1
            for (int it = 0; it < n_st; it++) {
                const int slot = it % S, j0 = jb + it * U, nb = min(U, je - j0);
                const uint32_t full = bars + 8 * slot, dst = smem_s + slot * stage_bytes;
                if (it >= S) mbar_wait(bars + 8 * (S + slot), (uint32_t)((it / S - 1) & 1));
                mbar_arrive_tx(full, (uint32_t)(nb * (tiles * 1024 + BM * 64)));
                for (int r = 0; r < tiles; r++)
                    bulk_g2s(dst + r * U * 1024, w + ((size_t)(n0 / 16 + r) * nJ + j0) * 512, (uint32_t)(nb * 1024),
                             full);
                for (int u = 0; u < nb; u++)
                    bulk_g2s(dst + 8 * U * 1024 + u * BM * 64, xp + ((size_t)(j0 + u) * Mp + m0) * 64,
                             (uint32_t)(BM * 64), full);
            }
        }
    } else { /* consumers: warp wq of warpgroup wg holds W tile row r = 4 wg + wq */
        const int lane = tid & 31, wq = (tid >> 5) & 3, g = lane >> 2, t = lane & 3;
        const int a_off = (4 * wg + wq) * U * 1024 + 16 * g + 4 * t; /* the lane's word of row g */
        uint4 fa[2][8][2]; /* [set][u][MMA h]: the A quads */
#pragma unroll 1
        for (int it = 0; it < n_st; it += 2) {
#pragma unroll
            for (int b = 0; b < 2; b++) {
                const int i2 = it + b;
                if (i2 >= n_st) break;
                const int slot = i2 % S;
                mbar_wait(bars + 8 * slot, (uint32_t)((i2 / S) & 1));
                const unsigned char *st = smem + slot * stage_bytes;
#pragma unroll
                for (int u = 0; u < 8; u++) {
                    if (u >= U) break;
                    const unsigned int *pa = (const unsigned int *)(st + a_off + u * 1024); /* row g; + 512: g + 8 */
                    const uint4 ra = make_uint4(pa[0], pa[32], pa[64], pa[96]);
                    const uint4 rb = make_uint4(pa[128], pa[160], pa[192], pa[224]);
                    fa[b][u][0] = make_uint4(ra.x, rb.x, ra.y, rb.y);
                    fa[b][u][1] = make_uint4(ra.z, rb.z, ra.w, rb.w);
                }
                wg_fence();
                const uint32_t xs = smem_s + slot * stage_bytes + 8 * U * 1024;
#pragma unroll
                for (int u = 0; u < 8; u++) {
                    if (u >= U) break;
                    const uint4 q0 = fa[b][u][0], q1 = fa[b][u][1];
                    const uint64_t d0 = wg_desc(xs + u * BM * 64, 128, 512);
                    const uint64_t d1 = wg_desc(xs + u * BM * 64 + 256, 128, 512);
                    if (BM == 64) {
                        wg_mma_n64(acc, q0.x, q0.y, q0.z, q0.w, d0);
                        wg_mma_n64(acc, q1.x, q1.y, q1.z, q1.w, d1);
                    } else {
                        wg_mma_n128(acc, q0.x, q0.y, q0.z, q0.w, d0);
                        wg_mma_n128(acc, q1.x, q1.y, q1.z, q1.w, d1);
                    }
                }
                wg_commit();
                if (BM == 64) {
                    /* ptxas serialises these wgmmas anyway (C7513: the next stage's A fragments are
                     * loaded while this one's are in flight); at 64 rows waiting for the stage
                     * outright and releasing its slot at once measured 0.5-2% faster (lab: 4096 x
                     * 4096 21.3 -> 21.1 us, 4096 x 12288 49.8 -> 49.0; batch 8, q 8 verify 7.346 ->
                     * 7.295 ms); at 128 rows it ran out of registers (C7512) and lost (session 29) */
                    wg_wait0();
                    wg_hold(acc, BM / 2);
                    if (lane == 0) mbar_arrive(bars + 8 * (S + i2 % S));
                    continue;
                }
                wg_wait1(); /* stage i2 - 1's wgmmas are done: release its slot */
                wg_hold(acc, BM / 2);
                /* stage i2 - 1's A fragments are in use up to here (its wgmmas read them until this
                 * wait): a use keeps them in their own registers while stage i2's load */
#pragma unroll
                for (int u = 0; u < 8; u++) {
                    if (u >= U) break;
#pragma unroll
                    for (int h = 0; h < 2; h++)
                        asm volatile("" ::"r"(fa[b ^ 1][u][h].x), "r"(fa[b ^ 1][u][h].y), "r"(fa[b ^ 1][u][h].z),
                                     "r"(fa[b ^ 1][u][h].w));
                }
                if (i2 > 0 && lane == 0) mbar_arrive(bars + 8 * (S + (i2 - 1) % S));
            }
        }
        wg_wait0();
        wg_hold(acc, BM / 2);
    }
    __syncthreads(); /* every stage consumed: the partial tile goes over them */

    /* this part's partial, [BM][LDR] floats; D: acc[4 q + e] at x row 8 q + 2 t + (e & 1), W row
     * 16 r + g + 8 (e >> 1) of the block (r = 4 wg + wq) */
    const int LDR = TCW_BN + TCB_PADF;
    float *red = (float *)smem;
    if (wg < 2) {
        const int lane = tid & 31, wq = (tid >> 5) & 3, g = lane >> 2, t = lane & 3;
#pragma unroll
        for (int i = 0; i < TCW_MAX_BM / 2; i++) {
            if (i >= BM / 2) break;
            const int q = i >> 2, e = i & 3;
            const int ml = 8 * q + 2 * t + (e & 1), nl = 16 * (4 * wg + wq) + g + 8 * (e >> 1);
            red[ml * LDR + nl] = acc[i];
        }
    }
    cluster_sync();
    tcb_combine(smem_s, y, ldy, M, N, m0, n0, accumulate, TCW_BN, BM, LDR, TCW_THREADS, tid, part, ns);
    cluster_sync_relaxed(); /* no block leaves while another still reads its partial */
#else
    __trap(); /* built without sm_90a: the launcher never picks this path (FLINT_SM90A) */
#endif
}

/* Each tiling is compiled twice: the plain kernel (store or add: the body sees an epilogue mode
 * that cannot be GEMM_EPI_GLU, so none of that code is in it) and a _glu kernel (the constant
 * GEMM_EPI_GLU). One kernel with the mode at run time measured every warpgroup GEMM 3-4% slower
 * in the forward (ncu, 64 rows), the SwiGLU epilogue's code present but not taken. */
#define EPI_PLAIN(accumulate) ((accumulate) != 0 ? GEMM_EPI_ADD : GEMM_EPI_STORE)
#define GEMM_TCW_KERNEL_EPI(bm, u, st, minb, suffix, epi)                                                         \
    static __global__ void __launch_bounds__(TCW_THREADS, minb)                                                  \
        gemm_tcw_m##bm##_s##st##_u##u##_b##minb##suffix(float *y, int ldy, const unsigned char *xp, int Mp,      \
                                                        const uint16_t *w, int M, int N, int K, int accumulate) { \
        extern __shared__ __align__(128) unsigned char smem[];                                                    \
        gemm_tcw_body(smem, y, ldy, xp, Mp, w, M, N, K, epi, bm, u, st);                                          \
    }
#define GEMM_TCW_KERNEL(bm, u, st, minb)                                                                          \
    GEMM_TCW_KERNEL_EPI(bm, u, st, minb, _kernel, EPI_PLAIN(accumulate))                                          \
    GEMM_TCW_KERNEL_EPI(bm, u, st, minb, _glu_kernel, GEMM_EPI_GLU)
GEMM_TCW_KERNEL(128, 4, 3, 1) /* 128 W rows x 128 x rows, k128 stages */
GEMM_TCW_KERNEL(64, 4, 4, 1)  /* 128 x 64 */
GEMM_TCW_KERNEL(128, 2, 5, 1) /* k64 stages: slower at every M (lab), kept for the comparison */
/* rings of 96 KB: two blocks on a multiprocessor, so one's prologue (the ring's first fill) and
 * epilogue (the partial tile, the cluster's combine) overlap the other's K loop */
GEMM_TCW_KERNEL(128, 2, 3, 2)
GEMM_TCW_KERNEL(64, 4, 2, 2)
GEMM_TCW_KERNEL(64, 2, 4, 2)

#define GEMM_TCB_KERNEL_EPI(wn, wm, tn, tm, st, u, minb, suffix, epi)                                           \
    static __global__ void __launch_bounds__(32 * wn * wm, minb)                                                \
        gemm_tcb_w##wn##x##wm##_t##tn##x##tm##_s##st##_u##u##suffix(float *y, int ldy, const uint16_t *x,         \
                                                                     int ldx, const uint16_t *w, int M, int N,    \
                                                                     int K, int accumulate, int vec,              \
                                                                     int n_split) {                               \
        extern __shared__ __align__(16) unsigned char tile[];                                                     \
        gemm_tcb_body(tile, y, ldy, x, ldx, w, M, N, K, epi, wn, wm, tn, tm, st, u);                              \
    }
#define GEMM_TCB_KERNEL(wn, wm, tn, tm, st, u, minb)                                                             \
    GEMM_TCB_KERNEL_EPI(wn, wm, tn, tm, st, u, minb, _kernel, EPI_PLAIN(accumulate))                             \
    GEMM_TCB_KERNEL_EPI(wn, wm, tn, tm, st, u, minb, _glu_kernel, GEMM_EPI_GLU)
GEMM_TCB_KERNEL(4, 2, 4, 8, 5, 1, 1) /* 256 x 128, 8 warps of 64 x 64 */
GEMM_TCB_KERNEL(4, 2, 4, 8, 3, 2, 1)
GEMM_TCB_KERNEL(2, 2, 4, 8, 4, 1, 1) /* 128 x 128, 4 warps of 64 x 64 */
GEMM_TCB_KERNEL(2, 2, 4, 8, 3, 2, 1)
GEMM_TCB_KERNEL(2, 4, 4, 4, 4, 1, 2) /* 128 x 128, 8 warps of 64 x 32, 2 blocks per SM */
GEMM_TCB_KERNEL(4, 1, 4, 8, 4, 1, 1) /* 256 x 64, 4 warps of 64 x 64 */
GEMM_TCB_KERNEL(2, 2, 4, 4, 4, 1, 3) /* 128 x 64, 4 warps of 64 x 32 */

#define GEMM_TC_KERNEL_EPI(mt, nt, u, px, suffix, epi)                                                           \
    static __global__ void __launch_bounds__(TC_KW * 32 * nt)                                                  \
        gemm_tc_m##mt##_n##nt##_u##u##_p##px##suffix(float *y, int ldy, const uint16_t *x, int ldx,              \
                                                     const uint16_t *w, int M, int N, int K, int accumulate,     \
                                                     int vec, int n_split) {                                     \
        __shared__ float red[nt * (TC_KW - 1) * mt * 4 * 32];                                                    \
        extern __shared__ __align__(128) unsigned char wbuf[];                                                   \
        gemm_tc_body(red, wbuf, y, ldy, x, ldx, w, M, N, K, epi, vec, n_split, mt, nt, u, px);                   \
    }
#define GEMM_TC_KERNEL(mt, nt, u, px)                                                                            \
    GEMM_TC_KERNEL_EPI(mt, nt, u, px, _kernel, EPI_PLAIN(accumulate))                                            \
    GEMM_TC_KERNEL_EPI(mt, nt, u, px, _glu_kernel, GEMM_EPI_GLU)
GEMM_TC_KERNEL(1, 1, 2, 1)
GEMM_TC_KERNEL(1, 1, 4, 1)
GEMM_TC_KERNEL(1, 1, 8, 1)
GEMM_TC_KERNEL(1, 1, 4, 0)
GEMM_TC_KERNEL(1, 2, 4, 1)
GEMM_TC_KERNEL(2, 1, 4, 1)
GEMM_TC_KERNEL(4, 1, 2, 1)
GEMM_TC_KERNEL(4, 1, 4, 0)
GEMM_TC_KERNEL(8, 1, 2, 0)
GEMM_TC_KERNEL(8, 1, 2, 1)
GEMM_TC_KERNEL(8, 4, 1, 0)
GEMM_TC_KERNEL(1, 1, 4, 2)

typedef void (*gemm_tc_kernel_fn)(float *, int, const uint16_t *, int, const uint16_t *, int, int, int, int, int,
                                  int);

/* Programmatic dependent launch of the register path, and the warpgroup path for the larger M
 * (flint_cuda_gemm_configure); neither changes a bit of any output. */
static int g_pdl = 1, g_wgmma = 1;
#ifdef FLINT_SM90A
#define FLINT_TCW_BUILT 1
#else
#define FLINT_TCW_BUILT 0
#endif

static int g_early = 1;

void flint_cuda_gemm_configure(int pdl, int wgmma, int early) {
    if (pdl >= 0) g_pdl = pdl != 0;
    if (wgmma >= 0) g_wgmma = wgmma != 0;
    if (early >= 0) g_early = early != 0;
}

/* A GEMM whose weights take about as long to stream as a launch takes to start (<= 8 MB: 2 us at
 * 4.3 TB/s; every GEMM of the embedded pair, none of qwen3-8b's) lets the kernel after it be
 * scheduled once its own wait returned (pdl_trigger) instead of when its blocks exit, so that
 * kernel's launch and prologue (a GEMM's first weights) hide under this one. Not before its wait:
 * kernels read uploads (positions, block tables) before their own wait, trusting that everything
 * before the last GEMM has finished; a trigger at the top let them run ahead of the upload kernels
 * (greedy speculation != target-only in test_target_cuda). The register path only (M <= 32, and
 * narrow layers at 65..128 rows): the block tiles launch without the attribute (cluster_launch).
 * Where the weights are long to stream, early successors only hold multiprocessors (session 19:
 * qwen3-8b 1-11% slower at 1-8 rows). Measured (H200, embedded pair, session 26, same call):
 * batch 1 K = 7 0.360 -> 0.339 ms, K = 0 0.226 -> 0.210, batch 2 K = 7 0.452 -> 0.417, batch 8
 * K = 3 0.525 -> 0.494; batch 8 K = 7 and batches 32-64 (block tiles) unchanged. */
#define GEMM_EARLY_BYTES ((size_t)8 << 20)
static int gemm_early(int N, int K) { return g_early && g_pdl && (size_t)N * K * 2 <= GEMM_EARLY_BYTES; }
typedef struct gemm_tc_variant {
    int mt, nt, u, px, st; /* st: tcb's and tcw's stages */
    int wn, wm, tn, tm;    /* wn > 0: the block-tile path (tcb), wn x wm warps of tn x tm MMA tiles */
    int bm;                /* > 0: the warpgroup path (tcw), TCW_BN x bm tiles */
    gemm_tc_kernel_fn fn, fn_glu; /* store or add; GEMM_EPI_GLU */
    int minb;                     /* tcw: blocks per multiprocessor it is built for */
    int ss;                       /* the shared-memory-operand path (tss, gemm_tss_cuda.cu): bm x rows */
} gemm_tc_variant;
#define TC_VARIANT(mt, nt, u, px)                                                                     \
    {mt, nt, u, px, 0, 0, 0, 0, 0, 0, gemm_tc_m##mt##_n##nt##_u##u##_p##px##_kernel,                   \
     gemm_tc_m##mt##_n##nt##_u##u##_p##px##_glu_kernel}
#define TCB_VARIANT(wn, wm, tn, tm, st, u)                                                            \
    {0, 0, u, 0, st, wn, wm, tn, tm, 0, gemm_tcb_w##wn##x##wm##_t##tn##x##tm##_s##st##_u##u##_kernel, \
     gemm_tcb_w##wn##x##wm##_t##tn##x##tm##_s##st##_u##u##_glu_kernel}
#define TCW_VARIANT(bm, u, st, minb)                                                                  \
    {0, 0, u, 0, st, 0, 0, 0, 0, bm, (gemm_tc_kernel_fn)gemm_tcw_m##bm##_s##st##_u##u##_b##minb##_kernel, \
     (gemm_tc_kernel_fn)gemm_tcw_m##bm##_s##st##_u##u##_b##minb##_glu_kernel, minb}
#define TSS_VARIANT(bm, u, st, minb) {0, 0, u, 0, st, 0, 0, 0, 0, bm, NULL, NULL, minb, 1}
static const gemm_tc_variant tc_variants[] = {
    TC_VARIANT(1, 1, 4, 1), TC_VARIANT(2, 1, 4, 1), TC_VARIANT(4, 1, 2, 1), TC_VARIANT(8, 1, 2, 0),
    TC_VARIANT(8, 4, 1, 0), /* 0-4: what flint_cuda_gemm_tc picks; lab alternatives follow */
    TC_VARIANT(1, 1, 2, 1), TC_VARIANT(1, 1, 8, 1), TC_VARIANT(1, 1, 4, 0), TC_VARIANT(4, 1, 4, 0),
    TC_VARIANT(8, 1, 2, 1), TC_VARIANT(1, 2, 4, 1),
    TCB_VARIANT(4, 2, 4, 8, 5, 1), TCB_VARIANT(4, 2, 4, 8, 3, 2), TCB_VARIANT(2, 2, 4, 8, 4, 1),
    TCB_VARIANT(2, 2, 4, 8, 3, 2), TCB_VARIANT(2, 4, 4, 4, 4, 1), TCB_VARIANT(4, 1, 4, 8, 4, 1),
    TCB_VARIANT(2, 2, 4, 4, 4, 1), TCW_VARIANT(128, 4, 3, 1), TCW_VARIANT(64, 4, 4, 1), TCW_VARIANT(128, 2, 5, 1),
    TCW_VARIANT(128, 2, 3, 2), TCW_VARIANT(64, 4, 2, 2), TCW_VARIANT(64, 2, 4, 2),
    TSS_VARIANT(128, 1, 8, 1), TSS_VARIANT(128, 2, 4, 1), TSS_VARIANT(64, 1, 10, 1), TSS_VARIANT(64, 2, 5, 1),
    TSS_VARIANT(64, 1, 6, 2), TSS_VARIANT(64, 2, 3, 2),
    TC_VARIANT(1, 1, 4, 2), /* 30: x two steps ahead (TC_M1_P2) */
    TSS_VARIANT(128, 2, 5, 1), TSS_VARIANT(64, 2, 8, 1), /* 31, 32: deeper rings (session 37) */
};
#define TC_N_VARIANTS ((int)(sizeof tc_variants / sizeof tc_variants[0]))
#define TCB_128x128 13 /* TCB_VARIANT(2, 2, 4, 8, 4, 1) */
#define TCB_128x64 17  /* TCB_VARIANT(2, 2, 4, 4, 4, 1) */
#define TCW_64 23     /* TCW_VARIANT(64, 2, 4, 2) */
#define TSS_128 25    /* TSS_VARIANT(128, 2, 4, 1) */
#define TSS_128_S5 31 /* TSS_VARIANT(128, 2, 5, 1) */
#define TSS_64 32     /* TSS_VARIANT(64, 2, 8, 1) */
#define TCW_64_S2 22  /* TCW_VARIANT(64, 4, 2, 2) */
#define TSS_64_B2 28  /* TSS_VARIANT(64, 1, 6, 2) */
#define TC_FALLBACK_LARGE 4 /* the register path for M > 64: where tcb variants go without the vector case */
#define TC_M1_U8 6 /* TC_VARIANT(1, 1, 8, 1) */
#define TC_M1_P2 30 /* TC_VARIANT(1, 1, 4, 2) */

/* tcb: the tile's extent, threads, and shared memory (the stages, or the partial tile over them) */
static int tcb_bn(const gemm_tc_variant *v) { return 16 * v->tn * v->wn; }
static int tcb_bm(const gemm_tc_variant *v) { return 8 * v->tm * v->wm; }
static int tcw_stage_bytes(const gemm_tc_variant *v) { return v->u * (8192 + 64 * v->bm); }
static int gemm_smem(const gemm_tc_variant *v) {
    if (v->ss) return gemm_tss_smem(v->bm, v->u, v->st);
    if (v->bm) { /* the ring and its barriers, or the partial tile over the ring */
        const int ring = v->st * tcw_stage_bytes(v) + 16 * v->st, red = v->bm * (TCW_BN + TCB_PADF) * (int)sizeof(float);
        return ring > red ? ring : red;
    }
    if (!v->wn) return TC_SMW(v->mt) ? TC_KW * v->nt * 2 * v->u * 1024 : 0; /* the register path's W buffers */
    const int stages = v->st * (tcb_bn(v) + tcb_bm(v)) * 64 * v->u;
    const int red = tcb_bm(v) * (tcb_bn(v) + TCB_PADF) * (int)sizeof(float);
    return stages > red ? stages : red;
}

/* Dynamic shared memory above 48 KB is allowed per kernel, once. */
static void smem_prepare(const gemm_tc_variant *v) {
    static unsigned char attr_set[64];
    const int idx = (int)(v - tc_variants);
    if (gemm_smem(v) > 0 && !v->ss && !attr_set[idx]) { /* tss: gemm_tss_init */
        CUDA_CHECK(
            cudaFuncSetAttribute((const void *)v->fn, cudaFuncAttributeMaxDynamicSharedMemorySize, gemm_smem(v)));
        CUDA_CHECK(
            cudaFuncSetAttribute((const void *)v->fn_glu, cudaFuncAttributeMaxDynamicSharedMemorySize, gemm_smem(v)));
        attr_set[idx] = 1;
    }
}

/* tcb: grid (m tiles, n tiles, n_split), clusters of the n_split blocks of one tile (one per
 * part of K); the m tiles of an n tile are adjacent in launch order and share its weights in L2. */
/* tcb and tcw: grid (m tiles of bm rows, n tiles of bn outputs, n_split), the n_split blocks of a
 * tile in one cluster, v's shared memory. No programmatic dependent launch: the block tiles
 * measured 1-6% slower with it at 33-512 rows (their early blocks hold shared memory while the
 * kernel before still runs); at the embedded pair's sizes it was mixed (session 26: batch 8 K = 7
 * 0.640 -> 0.632 ms, batch 32 K = 7 0.882 -> 0.900). */
static void cluster_launch(const gemm_tc_variant *v, int M, int N, int bm, int bn, int threads, int n_split,
                           void **args, flint_cuda_stream s) {
    cudaLaunchConfig_t cfg;
    cudaLaunchAttribute attr[1];
    memset(&cfg, 0, sizeof cfg);
    memset(attr, 0, sizeof attr);
    cfg.gridDim = dim3((unsigned)((M + bm - 1) / bm), (unsigned)((N + bn - 1) / bn), (unsigned)n_split);
    cfg.blockDim = dim3((unsigned)threads, 1, 1);
    cfg.dynamicSmemBytes = (size_t)gemm_smem(v);
    cfg.stream = s;
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = 1;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = (unsigned)n_split;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    FLINT_ASSERT(cfg.gridDim.y <= 65535);
    smem_prepare(v);
    const int accumulate = *(const int *)args[8]; /* both kernels' ninth parameter */
    CUDA_CHECK(cudaLaunchKernelExC(&cfg, (const void *)(accumulate == GEMM_EPI_GLU ? v->fn_glu : v->fn), args));
}

static void gemm_tcb_launch(const gemm_tc_variant *v, float *y, int ldy, const uint16_t *x, int ldx,
                            const uint16_t *w, int M, int N, int K, int accumulate, int n_split, flint_cuda_stream s) {
    int vec = 1;
    void *args[] = {&y, &ldy, &x, &ldx, &w, &M, &N, &K, &accumulate, &vec, &n_split};
    cluster_launch(v, M, N, tcb_bm(v), tcb_bn(v), 32 * v->wn * v->wm, n_split, args, s);
}

/* ==== tcw's scratch: the permuted x, per stream ====
 * A stream's GEMMs run one after another, so one buffer per stream serves them all; two streams
 * (the drafter's encodes beside the target) need two. Bindings are made at open, outside any
 * step, and removed at close; a GEMM on a stream without one (or with one too small) takes the
 * block tiles, which give the same bits. */
#define TCW_MAX_BINDINGS 32
typedef struct tcw_binding {
    flint_cuda_stream s;
    unsigned char *p;
    size_t bytes;
} tcw_binding;
static tcw_binding g_bind[TCW_MAX_BINDINGS];
static int g_n_bind;
static pthread_mutex_t g_bind_mu = PTHREAD_MUTEX_INITIALIZER;

size_t flint_cuda_gemm_scratch_bytes(int max_rows, int max_k) {
    if (max_rows < 1 || max_k < 1) return 0;
    return (size_t)((max_k + 31) / 32) * (size_t)((max_rows + TCW_MP - 1) / TCW_MP * TCW_MP) * 64;
}

void flint_cuda_gemm_scratch_bind(flint_cuda_stream s, void *p, size_t bytes) {
    pthread_mutex_lock(&g_bind_mu);
    FLINT_ASSERT(g_n_bind < TCW_MAX_BINDINGS);
    for (int i = 0; i < g_n_bind; i++) FLINT_ASSERT(g_bind[i].s != s); /* one per stream */
    g_bind[g_n_bind].s = s, g_bind[g_n_bind].p = (unsigned char *)p, g_bind[g_n_bind].bytes = bytes;
    g_n_bind++;
    pthread_mutex_unlock(&g_bind_mu);
}

void flint_cuda_gemm_scratch_unbind(flint_cuda_stream s) {
    pthread_mutex_lock(&g_bind_mu);
    for (int i = 0; i < g_n_bind; i++)
        if (g_bind[i].s == s) {
            g_bind[i] = g_bind[--g_n_bind];
            break;
        }
    pthread_mutex_unlock(&g_bind_mu);
}

static unsigned char *tcw_scratch(flint_cuda_stream s, size_t need) {
    unsigned char *p = NULL;
    pthread_mutex_lock(&g_bind_mu);
    for (int i = 0; i < g_n_bind; i++)
        if (g_bind[i].s == s && g_bind[i].bytes >= need) p = g_bind[i].p;
    pthread_mutex_unlock(&g_bind_mu);
    return p;
}

/* tcw: x into the stream's scratch, then grid (m tiles, n tiles, n_split) in clusters of the
 * n_split blocks of a tile, as tcb; tss: x into the scratch, then its persistent grid. Returns 0
 * when the stream has no scratch large enough. */
static int gemm_tcw_launch(const gemm_tc_variant *v, float *y, int ldy, const uint16_t *x, int ldx,
                           const unsigned char *xin, int xin_mp, const uint16_t *w, int M, int N, int K, int accumulate,
                           int n_split, int out_mp, flint_cuda_stream s) {
    int Mp = (M + TCW_MP - 1) / TCW_MP * TCW_MP;
    const int nJ = (K + 31) / 32;
    const unsigned char *xp = xin;
    if (xin) { /* x in that layout already, xin_mp rows (flint_cuda_gemm_tc_xp) */
        FLINT_ASSERT(!x && xin_mp >= M && xin_mp % TCW_MP == 0);
        Mp = xin_mp;
    } else {
        unsigned char *sp = tcw_scratch(s, flint_cuda_gemm_scratch_bytes(M, K));
        if (!sp) return 0;
        if (x) { /* NULL: a kernel before wrote x here already (flint_cuda_gemm_xp) */
            const size_t n = (size_t)nJ * Mp;
            FLINT_LAUNCH(tcw_permute_kernel, (unsigned)((n + 255) / 256), 256, 0, s, sp, x, ldx, M, K, Mp, nJ);
            CUDA_CHECK(cudaGetLastError());
        }
        xp = sp;
    }
    FLINT_ASSERT(!out_mp || v->ss);
    if (v->ss)
        return gemm_tss_launch(v->bm, v->u, v->st, v->minb, y, ldy, xp, Mp, w, M, N, K, accumulate, n_split, out_mp, s);
    const unsigned char *xpc = xp;
    int mp = Mp;
    void *args[] = {&y, &ldy, &xpc, &mp, &w, &M, &N, &K, &accumulate};
    cluster_launch(v, M, N, v->bm, TCW_BN, TCW_THREADS, n_split, args, s);
    return 1;
}

/* The variant that runs for v's pick: the fallbacks for x's alignment (vec: its rows can be read
 * in 16-byte chunks; W is packed, always), the build, whole stages, and a stream without a scratch
 * large enough for the warpgroup paths. */
static const gemm_tc_variant *gemm_tc_final(const gemm_tc_variant *v, int M, int K, int n_split, int vec,
                                            flint_cuda_stream s) {
    /* tcb copies x in 8-byte pieces of whole chunks, tcw in 16-byte ones; tcw needs sm_90a */
    if ((v->wn || v->bm) && !vec) v = &tc_variants[TC_FALLBACK_LARGE];
    if (v->bm && !FLINT_TCW_BUILT) v = &tc_variants[TCB_128x128];
    /* tcw issues whole stages only: each part of K must be a multiple of U k32 blocks */
    if (v->bm && ((K + 31) / 32) % (n_split * v->u) != 0) v = &tc_variants[v->bm == 64 ? TCB_128x64 : TCB_128x128];
    if (v->bm && !tcw_scratch(s, flint_cuda_gemm_scratch_bytes(M, K))) v = &tc_variants[TCB_128x128];
    return v;
}

static void gemm_tc_launch(const gemm_tc_variant *v, float *y, int ldy, const uint16_t *x, int ldx, const uint16_t *w,
                           int M, int N, int K, int accumulate, int n_split, flint_cuda_stream s) {
    FLINT_ASSERT(n_split == 1 || n_split == 2 || n_split == 4);
    FLINT_ASSERT((uintptr_t)w % 16 == 0); /* packed: tiles of 1 KB */
    const int vec = K % 8 == 0 && ldx % 8 == 0 && (uintptr_t)x % 16 == 0;
    v = gemm_tc_final(v, M, K, n_split, vec, s);
    FLINT_ASSERT(x || v->bm); /* x in the scratch already: only the warpgroup paths read it there */
    if (v->bm) {
        const int launched = gemm_tcw_launch(v, y, ldy, x, ldx, NULL, 0, w, M, N, K, accumulate, n_split, 0, s);
        FLINT_ASSERT(launched); /* gemm_tc_final found the scratch */
        return;
    }
    if (v->wn) {
        gemm_tcb_launch(v, y, ldy, x, ldx, w, M, N, K, accumulate, n_split, s);
        return;
    }
    cudaLaunchConfig_t cfg;
    cudaLaunchAttribute attr[1];
    memset(&cfg, 0, sizeof cfg);
    memset(attr, 0, sizeof attr);
    cfg.gridDim = dim3((unsigned)((M + 8 * v->mt - 1) / (8 * v->mt)), (unsigned)((N + 16 * v->nt - 1) / (16 * v->nt)));
    cfg.blockDim = dim3((unsigned)(TC_KW * 32 * v->nt), 1, 1);
    cfg.dynamicSmemBytes = (size_t)gemm_smem(v);
    cfg.stream = s;
    smem_prepare(v);
    FLINT_ASSERT(cfg.gridDim.y <= 65535);
    if (g_pdl) {
        attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[0].val.programmaticStreamSerializationAllowed = 1;
        cfg.attrs = attr;
        cfg.numAttrs = 1;
    }
    const int flags = vec | 2 * gemm_early(N, K);
    void *args[] = {&y, &ldy, &x, &ldx, &w, &M, &N, &K, &accumulate, (void *)&flags, &n_split};
    CUDA_CHECK(cudaLaunchKernelExC(&cfg, (const void *)(accumulate == GEMM_EPI_GLU ? v->fn_glu : v->fn), args));
}

/* Allows every variant's shared memory up front (cudaFuncSetAttribute is best kept out of graph
 * capture); launches do it lazily otherwise. */
void flint_cuda_gemm_init(void) {
    FLINT_ASSERT(tc_variants[TCB_128x128].wn == 2 && tc_variants[TCB_128x128].tm == 8 && tc_variants[TCB_128x128].st == 4);
    FLINT_ASSERT(tc_variants[TCB_128x64].wn == 2 && tc_variants[TCB_128x64].tm == 4 && tc_variants[TCB_128x64].st == 4);
    FLINT_ASSERT(tc_variants[TC_M1_U8].mt == 1 && tc_variants[TC_M1_U8].nt == 1 && tc_variants[TC_M1_U8].u == 8 &&
                 tc_variants[TC_M1_U8].px == 1);
    FLINT_ASSERT(tc_variants[TC_M1_P2].mt == 1 && tc_variants[TC_M1_P2].nt == 1 && tc_variants[TC_M1_P2].u == 4 &&
                 tc_variants[TC_M1_P2].px == 2);
    FLINT_ASSERT(tc_variants[TCW_64].bm == 64 && tc_variants[TCW_64].u == 2 && tc_variants[TCW_64].minb == 2);
    for (int i = 0; i < TC_N_VARIANTS; i++) /* a ring of one slot deadlocks: a slot is released a stage late */
        FLINT_ASSERT(!tc_variants[i].bm || tc_variants[i].st >= 2);
    FLINT_ASSERT(tc_variants[TSS_128].ss && tc_variants[TSS_128].bm == 128 && tc_variants[TSS_128].u == 2 &&
                 tc_variants[TSS_128].st == 4 && tc_variants[TSS_64].ss && tc_variants[TSS_64].bm == 64 &&
                 tc_variants[TSS_64].u == 2 && tc_variants[TSS_64].st == 8);
    FLINT_ASSERT(tc_variants[TSS_128_S5].ss && tc_variants[TSS_128_S5].bm == 128 && tc_variants[TSS_128_S5].u == 2 &&
                 tc_variants[TSS_128_S5].st == 5);
    FLINT_ASSERT(tc_variants[TCW_64_S2].bm == 64 && !tc_variants[TCW_64_S2].ss && tc_variants[TCW_64_S2].u == 4 &&
                 tc_variants[TCW_64_S2].st == 2 && tc_variants[TCW_64_S2].minb == 2);
    FLINT_ASSERT(tc_variants[TSS_64_B2].ss && tc_variants[TSS_64_B2].bm == 64 && tc_variants[TSS_64_B2].u == 1 &&
                 tc_variants[TSS_64_B2].st == 6 && tc_variants[TSS_64_B2].minb == 2);
    for (int i = 0; i < TC_N_VARIANTS; i++) smem_prepare(&tc_variants[i]);
    if (FLINT_TCW_BUILT) gemm_tss_init();
}

/* The variant for M x N x K (before gemm_tc_final's fallbacks). */
static const gemm_tc_variant *gemm_tc_pick(int M, int N, int K) {
    /* Picked on the H200 (docs/benchmarks.md, qwen3-8b projections, 2026-11-29): M <= 32, the
     * register path with one block per 16 outputs and every row in it; 33..64 rows, shared-memory
     * tiles of 128 outputs x 64 rows (TCB_128x64); more, tiles of 128 x 128 (TCB_128x128),
     * except up to 128 rows of a narrow layer, where 64 x 64 register tiles (variant 4) stay
     * ahead. With packed weights the lab (weights from HBM, one GEMM at a time) favours the
     * register tiles up to 64 rows (tc m8 n1 u2 p1) and 256 rows (variant 4) for layers of <= 4096
     * outputs, but the whole forward measured 3-6% slower with that choice (session 15), so the
     * dispatch stays as it was. Where built for sm_90a, the warpgroup paths take over from 33
     * rows (below): tcw for narrow layers (session 22: with two blocks a multiprocessor, 25-27 us
     * where variant 4 took 29-30 at 72..128 rows of 4096 x 4096), tss for the rest. */
    int v = M <= 8 ? 0 : M <= 16 ? 1 : M <= 32 ? 2 : M <= 64 ? TCB_128x64 : M <= 128 && N <= 4096 ? 4 : TCB_128x128;
    /* at <= 8 rows x is loaded two steps ahead (session 30: ncu had 45% of the O projection's
     * stall samples at its first MMA, waiting for x from L2; b1 q 8 4.563 -> 4.496 ms, b8 q 1
     * 4.933 -> 4.866); not at K < 2048, whose quarters are one or two steps (the embedded pair:
     * 0.197 -> 0.208 ms a K = 0 step), nor at 9..16 rows (two m tiles: b2 q 8 5.24 -> 5.95 ms) */
    if (M <= 8 && K >= 2048) v = TC_M1_P2;
    /* a long K at a few rows (qwen3-8b's down projection, 4096 x 12288): few blocks, each
     * streaming 384 KB, need more bytes in flight per warp: 8 k32 blocks a step (lab, M = 1 and 8:
     * 28.2-28.5 -> 27.0-27.3 us; at K = 4096 it loses) */
    if (M <= 8 && K >= 8192) v = TC_M1_U8;
    /* not at K < 1024: the warpgroup path permutes the rows first (one launch and a pass over them
     * per GEMM), which the embedded pair's narrow layers (K 256 and 768) do not win back: its
     * forward at 64 rows 0.477 -> 0.459 ms, 512 rows 1.64 -> 1.54 with the block tiles (session 20).
     * The shared-memory-operand path (tss, session 28; lab M = 512: gate-up 285 -> 179 us, down
     * 171 -> 89, LM head 1632 -> 1080) from 65 rows; at 33..64 rows for wide layers only (M = 64:
     * gate-up 76 -> 65 us, LM head 377 -> 317; 4096 x 4096 21 against 25). Which tss tiling at
     * which rows: session 37 below (docs/benchmarks.md has the earlier choices).
     * Session 33 (lab, M = 64): tcw with k128 stages, two of them, two blocks a multiprocessor
     * (TCW_64_S2) against TCW_64: 4096 x 4096 21.2 -> 18.3 us, 4096 x 12288 49.7 -> 39.3, 6144 x
     * 4096 21.9 both; in the forward, with tss's 64-row tiles two blocks a multiprocessor for the
     * wide layers (TSS_64_B2: gate-up 66.1 -> 62.3 us), batch 8 q 8 7.20 -> 6.53 ms, batch 64 q 1
     * 9.54 -> 8.84, the speculative step at qwen3-8b batch 8 K 7 9.50 -> 8.75 (TCW_64_S2 alone:
     * 6.73, 9.02, 9.01). Its stages of four k32 blocks need K % 512 == 0 (whole stages in each
     * quarter); other K keep TCW_64. */
    /* at 17..32 rows the warpgroup tiles win where each output has a long K or the layer is wide
     * (lab, M = 32: 4096 x 12288 42.8 -> 37.9 us with TCW_64_S2, 24576 x 4096 66.3 -> 60.9 with
     * TSS_64_B2; 4096 x 4096 and 6144 x 4096 stay on the register path, 16.5 and 18.6 against 17.3
     * and 20.7; at 16 rows the register path wins all four). In the forward (session 33, same
     * call): batch 32 q 1 8.17 -> 7.40 ms, batch 4 q 8 7.02 -> 6.29, the speculative step at batch
     * 4 K 7 9.01 -> 8.06. (A forward asks the down projection first whether it reads the scratch,
     * flint_cuda_gemm_xp, so a gate-up that could write it alone does not.) */
    if (g_wgmma && FLINT_TCW_BUILT && M > 16 && M <= 32 && K >= 1024) {
        if (N > 8192) v = N > 32768 ? TSS_64 : TSS_64_B2;
        else if (K >= 8192 && K % 512 == 0) v = TCW_64_S2;
    }
    /* Session 37: deeper rings. ncu at 512 rows put 17-31% of the tss kernels' stall samples on the
     * consumers' wait for a full stage, i.e. the ring ran dry; the 64-row tiles with 8 stages of
     * two k32 blocks (TSS_64, 229 KB) instead of 5 beat every other tiling at 65..128 rows (lab,
     * weights past L2: gate-up 75.2 -> 66.5 us, down 61.3 -> 56.5, O 26.8 -> 23.6 at 128 rows),
     * and the 128-row tiles with 5 stages (TSS_128_S5) win at 129..256 rows (gate-up at 192 rows
     * 97.8 -> 90.9) but lose in the forward at 512 rows (b64 q 8 +0.5 ms, the 128-tile O and down
     * +2.3 us each under ncu), so 257+ rows keep 4 stages. Forward, same call: batch 16 q 8
     * 9.72 -> 9.02 ms, batch 32 q 8 11.95 -> 11.62, the speculative step at batch 16 K 7 12.48 ->
     * 11.64-11.78 and batch 32 15.9-16.0 -> 15.4-15.5; batch 64 level. An LM head (N > 32768) at
     * 17..64 rows takes TSS_64 too (lab at 32 / 64 rows 323 / 331 -> 305 / 312 us against
     * TSS_64_B2; batch 8 q 8 6.551 -> 6.535 ms); the gate-up there stays on TSS_64_B2 (62 against
     * 63 us). */
    if (g_wgmma && FLINT_TCW_BUILT && M > 32 && K >= 1024) {
        if (M <= 64) v = N > 32768 ? TSS_64 : N > 8192 ? TSS_64_B2 : K % 512 == 0 ? TCW_64_S2 : TCW_64;
        else if (M <= 128) v = N <= 32768 ? TSS_64 : TSS_128_S5;
        else if (M <= 256) v = N <= 4096 ? TSS_64 : TSS_128_S5;
        else v = TSS_128;
    }
    return &tc_variants[v];
}

void flint_cuda_gemm_tc_split(float *y, int ldy, const uint16_t *x, int ldx, const uint16_t *w, int M, int N, int K,
                              int accumulate, int n_split, flint_cuda_stream s) {
    FLINT_ASSERT(M >= 0 && N > 0 && K > 0 && ldx >= K && ldy >= (accumulate == GEMM_EPI_GLU ? N / 2 : N));
    FLINT_ASSERT(accumulate != GEMM_EPI_GLU || (n_split == 4 && N % 16 == 0));
    if (M == 0) return;
    gemm_tc_launch(gemm_tc_pick(M, N, K), y, ldy, x, ldx, w, M, N, K, accumulate, n_split, s);
}

unsigned char *flint_cuda_gemm_xp(int M, int N, int K, flint_cuda_stream s, int *Mp) {
    if (M < 1 || K % 32 != 0) return NULL;
    const gemm_tc_variant *v = gemm_tc_final(gemm_tc_pick(M, N, K), M, K, 4, 1, s);
    if (!v->bm) return NULL;
    *Mp = (M + TCW_MP - 1) / TCW_MP * TCW_MP;
    return tcw_scratch(s, flint_cuda_gemm_scratch_bytes(M, K));
}

int flint_cuda_gemm_tc_glu_xp(unsigned char *out_xp, int out_mp, const uint16_t *x, int ldx, const uint16_t *w, int M,
                              int I, int K, flint_cuda_stream s) {
    FLINT_ASSERT(I > 0 && I % 32 == 0 && out_xp && out_mp >= M && out_mp % TCW_MP == 0 && ldx >= K);
    if (M == 0) return 1;
    const int vec = K % 8 == 0 && ldx % 8 == 0 && (uintptr_t)x % 16 == 0;
    const gemm_tc_variant *v = gemm_tc_final(gemm_tc_pick(M, 2 * I, K), M, K, 4, vec, s);
    if (!v->ss) return 0; /* only tss's epilogue writes that layout */
    return gemm_tcw_launch(v, (float *)out_xp, 0, x, ldx, NULL, 0, w, M, 2 * I, K, GEMM_EPI_GLU, 4, out_mp, s);
}

int flint_cuda_gemm_tc_xp(float *y, int ldy, const unsigned char *xp, int Mp, const uint16_t *w, int M, int N, int K,
                          int accumulate, flint_cuda_stream s) {
    FLINT_ASSERT(M >= 0 && N > 0 && K > 0 && ldy >= N && xp && (accumulate == GEMM_EPI_STORE || accumulate == GEMM_EPI_ADD));
    if (M == 0) return 1;
    const gemm_tc_variant *v = gemm_tc_final(gemm_tc_pick(M, N, K), M, K, 4, 1, s);
    if (!v->bm || K % 32 != 0) return 0; /* this GEMM reads x itself */
    return gemm_tcw_launch(v, y, ldy, NULL, K, xp, Mp, w, M, N, K, accumulate, 4, 0, s);
}

void flint_cuda_gemm_tc(float *y, int ldy, const uint16_t *x, int ldx, const uint16_t *w, int M, int N, int K,
                        int accumulate, flint_cuda_stream s) {
    FLINT_ASSERT(accumulate == GEMM_EPI_STORE || accumulate == GEMM_EPI_ADD);
    flint_cuda_gemm_tc_split(y, ldy, x, ldx, w, M, N, K, accumulate, 4, s);
}

void flint_cuda_gemm_tc_glu(uint16_t *out, int ldo, const uint16_t *x, int ldx, const uint16_t *w, int M, int I, int K,
                            flint_cuda_stream s) {
    FLINT_ASSERT(I > 0 && I % 8 == 0 && ldo >= I);
    flint_cuda_gemm_tc_split((float *)out, ldo, x, ldx, w, M, 2 * I, K, GEMM_EPI_GLU, 4, s);
}

int flint_cuda_gemm_tc_variants(void) { return TC_N_VARIANTS; }

/* The lab hook with the parts of K as a parameter (n_split 4, 2 or 1, as flint_cuda_gemm_tc_split):
 * the tests check every variant at each. Not in ops_cuda.h yet: tests/kernels/test_cuda_ops.c
 * declares it. */
extern "C" const char *flint_cuda_gemm_tc_variant_split(float *y, int ldy, const uint16_t *x, int ldx,
                                                        const uint16_t *w, int M, int N, int K, int accumulate,
                                                        int n_split, int variant, flint_cuda_stream s) {
    static char names[TC_N_VARIANTS][32];
    FLINT_ASSERT(variant >= 0 && variant < TC_N_VARIANTS);
    const gemm_tc_variant *v = &tc_variants[variant];
    if (v->ss)
        snprintf(names[variant], sizeof names[variant], "tss %dx%d s%d u%d b%d", TCW_BN, v->bm, v->st, v->u, v->minb);
    else if (v->bm)
        snprintf(names[variant], sizeof names[variant], "tcw %dx%d s%d u%d b%d", TCW_BN, v->bm, v->st, v->u, v->minb);
    else if (v->wn)
        snprintf(names[variant], sizeof names[variant], "tcb %dx%d w%dx%d s%d u%d", tcb_bn(v), tcb_bm(v), v->wn, v->wm,
                 v->st, v->u);
    else snprintf(names[variant], sizeof names[variant], "tc m%d n%d u%d p%d", v->mt, v->nt, v->u, v->px);
    if (y && M > 0) gemm_tc_launch(v, y, ldy, x, ldx, w, M, N, K, accumulate, n_split, s);
    return names[variant];
}

const char *flint_cuda_gemm_tc_variant(float *y, int ldy, const uint16_t *x, int ldx, const uint16_t *w, int M, int N,
                                       int K, int accumulate, int variant, flint_cuda_stream s) {
    return flint_cuda_gemm_tc_variant_split(y, ldy, x, ldx, w, M, N, K, accumulate, 4, variant, s);
}
