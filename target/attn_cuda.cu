/* Attention over the paged KV cache on the GPU (ops_cuda.h: flint_cuda_attention): causal
 * (target prefill, decode, verify) and drafter-block mode, batch-invariant. Split from
 * ops_cuda.cu so the attention kernels can change on their own.
 *
 * ==== Design ====
 * A row's positions 0..T-1 are cut into chunks of C = FLINT_CUDA_ATTN_CHUNK (128) positions,
 * boundaries at multiples of C from position 0. For each (row, head, chunk) a first kernel makes
 * an unnormalised partial: m = max of the chunk's scores, l = sum of e^(s - m), o[d] = sum of
 * e^(s - m) v[d]; the partials are merged in chunk order, by a second kernel
 * (attn_merge_kernel, from scratch) or, when one CTA computes all the chunks of its rows, by that
 * CTA in registers (attn_tc_fused_kernel: no scratch traffic, no second launch).
 *
 * Fast path (attn_tc_kernel: head_dim % 16 == 0 and the tiles fit in shared memory), on the
 * tensor cores (mma.sync m16n8k16, bf16 in, fp32 accumulate). Rows of one sequence at
 * consecutive positions (a verify block, a prefill run, a drafter block) see the same K/V, so a
 * CTA of 8 warps takes a GROUP of such rows and one KV head: its n rows x G query heads are the
 * query "slots" j = i * G + h (at most 64, 4 m tiles of 16), and for each chunk it loads the
 * chunk's K and V once (cp.async, 16 bytes) and computes every slot against them:
 *   1. S = Q K^T: warp w takes the chunk's positions 16w..16w+15 (2 n tiles of 8), every slot;
 *      the k loop runs over head_dim in steps of 16.
 *   2. softmax inside the chunk: s = S * scale; positions a slot's row does not see (causal mask,
 *      or past the end of its context) are dropped: m = max over the seen ones, p = e^(s - m),
 *      p = 0 for the others; l = sum of p. (e^x here and in the merges: attn_exp, ex2.approx of
 *      x log2 e, the same in every kernel; the fused kernels skip the mask on chunks every slot sees.)
 *   3. O = P V: warp w takes 16-dim pairs w, w + 8, ... of head_dim, every slot; the k
 *      loop runs over the chunk's 128 positions in steps of 16.
 * The fused kernel at batches 32-64 and in prefill (attn_tc_fused_pf_kernel_d128: a rows-per-
 * sequence hint, 16-position pages) gives P its own planes and requests chunk c + 1's K once chunk
 * c's scores are done and its V once chunk c's P V is done, waiting for that K at chunk c's end
 * barrier (lab, session 35: batch 64 verify 123 -> 108 us a layer, prefill of 1024 rows 139 -> 127).
 * (8 warps, not 4, since session 19: at batch 1 the CTAs are too few to fill the machine and
 * each warp's chain of dependent instructions set the time, ncu; halving each warp's share of a
 * chunk halves the chain. The sums' orders changed with it, the same for every launch.)
 * Exactness: Q is fp32 and P is fp32, but an MMA takes bf16. Each is split as x = hi + lo with
 * hi = bf16(x), lo = bf16(x - hi) (x - hi is exact in fp32), and both halves go through the MMA
 * against the same bf16 K (V): hi + lo is within 2^-16 |x| (bf16 alone: 2^-8), products are
 * exact and the MMA accumulates in fp32 (truncating, ~2^-23 per k16 step), so the kernel stays
 * within fp32-level error of the fp32 CPU reference and the test keeps the old kernel's
 * tolerance. The price is twice the MMAs, which are not the bottleneck (K/V bytes are). The
 * drafter block's own K/V are fp32 (blk_k, blk_v): in a chunk that holds block positions, K and
 * V are split the same way (a lo tile beside the hi tile, zero for cache positions), and one
 * more MMA adds Q_hi K_lo (P_hi V_lo); the dropped Q_lo K_lo term is below 2^-16 |q k|.
 *
 * Which rows form a group (computed on the device from row_seq and pos; the host passes nothing
 * new): a row continues its predecessor when it has the same sequence and pos + 1. Within such
 * a run, rows are cut at the run start and at every row whose position is a multiple of U =
 * R_MAX / 2 (R_MAX = 64 / G rows fit a CTA) and that is at least U rows into the run. So a run
 * of up to U rows (a verify block of 8 when G <= 4) is one group, the first group of a run has
 * at most 2U - 1 < R_MAX rows, later ones U; a CTA finds the cuts with a look-back of U rows. In
 * block mode a group is a block's rows (cut every R_MAX rows). The grid is (KV head, window of 8
 * rows, split s + NS h): a CTA takes the groups whose first row lies in its window and, of each,
 * the chunks c = s, s + NS, ... and the m tiles of share h of MS (NS and MS picked from the grid
 * size for occupancy; they change nothing in the arithmetic). NS = 1 (enough CTAs without
 * splitting: large-batch verify, long prefill) at head_dim <= 128 takes the fused kernel. The grid
 * depends on n_rows, max_ctx and the rows-per-sequence hint only: CUDA-graph friendly.
 *
 * ==== Batch invariance: the order of every reduction ====
 * A row's output must not depend on the launch (rows, grid, which rows share its CTA). It holds
 * because every operation on a slot's values is fixed by the chunk layout and head_dim alone:
 * - scores: each MMA output element depends only on its own row of A (the slot's Q) and column
 *   of B (one position's K), whatever else the tile holds (the GEMM relies on the same); the k
 *   order is fixed: for k16 step 0, 1, ..: += Q_hi K, += Q_lo K (+= Q_hi K_lo in a block chunk);
 *   then * scale (one rounding), as the CPU reference;
 * - max: exact whatever the order;
 * - l: lane-local over its positions 8nt + 2t + e (nt = 0, 1, e = 0, 1, in that order), then
 *   a butterfly over the 4 lanes of a quad (xor 1, then xor 2), then over the warps as
 *   ((w0 + w1) + (w2 + w3)) + ((w4 + w5) + (w6 + w7)); positions the row does not see contribute
 *   exact zeros;
 * - o: for k16 step (16 positions) 0..7: += P_hi V, += P_lo V (+= P_hi V_lo), one fp32
 *   accumulator per (slot, dim); positions the row does not see have p = 0, so their product is
 *   zero whether V holds the K/V of a later row of the group or the zeros loaded past the end
 *   (a row alone sees zeros there, the same row in a group its neighbours' K/V: only the zero
 *   products differ in origin, never in value). Every k step runs for every chunk, so a row's
 *   chain of MMAs has the same length whatever the group's extent;
 * - the merge (per row, head), a recurrence over c = 0, 1, .. in order from M = -inf, L = 0,
 *   A = 0: M' = max(M, m_c), a = e^(M - M'), b = e^(m_c - M'), L = fmaf(l_c, b, L * a),
 *   A[d] = fmaf(o_c[d], b, A[d] * a), M = M'; out = bf16(A * (1 / L)). The merge kernel and the
 *   fused kernel run exactly these operations on the same values (the merge kernel finds the
 *   prefix maxima M' by a scan, exact in any order), so the choice between them, which depends
 *   on the launch, does not show in the bits.
 * Slots of a group's rows whose context ends before a chunk write no partial for it; the merge
 * reads chunks 0..ceil(T / C) - 1 of the row only. The fallback path (attn_chunk_kernel, below)
 * has its own fixed order, also by the row's context length only; which path runs depends on
 * head_dim and the mode alone.
 *
 * Unusual shapes: head_dim not a multiple of 16, or tiles too large for shared memory (block mode
 * with head_dim > 160), take the fallback: one CUDA-core block per (chunk, KV head, row). */
#include "target/cuda_common.cuh"

#include <limits.h>

#define ATTN_THREADS 128
#define ATTN_CHUNK FLINT_CUDA_ATTN_CHUNK
#define ATTN_G FLINT_CUDA_ATTN_MAX_GROUP

#if FLINT_CUDA_ATTN_CHUNK != 128
#error "attn_tc_kernel assumes 128-position chunks: 8 warps x 16 positions, 8 k16 steps"
#endif

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

/* Where output element e (head h at h * head_dim) of row r goes: out, or the GEMM scratch's layout
 * (gemm_cuda.cu, tcw: element e of row r at byte (e / 32) Mp 64 + (r / 8) 512 + ((e / 2) % 4) 128 +
 * (r % 8) 16 + ((e / 8) % 4) 4 + (e % 2) 2), which saves the O projection its pass over the rows.
 * Elements e and e + 1 (e even) are adjacent in both. */
static __device__ __forceinline__ uint16_t *attn_out_at(const flint_cuda_attn &a, int r, int e) {
    if (a.out_xp)
        return (uint16_t *)(a.out_xp + (size_t)(e >> 5) * a.out_mp * 64 + (r >> 3) * 512 + ((e >> 1) & 3) * 128 +
                            (r & 7) * 16 + ((e >> 3) & 3) * 4 + (e & 1) * 2);
    return a.out + (size_t)r * a.ldo + e;
}

/* ==== Fast path: tensor cores ==== */

#define TC_THREADS 256             /* 8 warps: 16 positions each (scores), one 16-dim pair each (P V) */
#define TC_WARPS (TC_THREADS / 32)
#if TC_WARPS != 8
#error "tc_red_max / tc_red_sum and the chunk split assume 8 warps"
#endif
#define TC_NQ 64                   /* query slots per CTA: 4 m tiles of 16 */
#define TC_MT 4
#define TC_WIN 8                   /* rows per window at most (x.win): a CTA takes the groups starting in it */
#define TC_LOOK 32                 /* rows looked back (>= U) */
#define TC_ROWS 128                /* rows read: TC_LOOK before the window, the window, the rest after */
#define TC_PST (ATTN_CHUNK + 8)    /* P row stride in elements: 272 bytes, an odd number of 16 B units */
#define TC_SMEM_LIMIT (219 * 1024) /* dynamic shared memory allowed (227 KB less the static part) */
#define TC_MS_REF_CHUNKS 9         /* a 1024-position context and its verify block: the m-tile sharing's reference */

typedef struct {
    int max_chunks; /* scratch chunks per (row, head) */
    int ns;         /* splits: a CTA takes chunks s, s + ns, ... */
    int ms;         /* CTAs that may share a group's m tiles (grid z = split x ms + share) */
    int budget;     /* CTAs of one (KV head, window) that fit one wave with the others' */
    int nq;         /* query slots allocated (Q and P planes), a multiple of 16, <= TC_NQ */
    int r_max, u;   /* rows per group at most; the cut unit */
    int win;        /* rows per window, 1..TC_WIN (speed only: groups do not depend on it) */
    int q_vec;      /* q and ldq allow 16-byte loads */
    int lo_rows;    /* block mode: rows of the K and V lo planes (tc_lo_rows); 0 causal */
    float scale;
} tc_args;

static __device__ __forceinline__ uint32_t smem_u32(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

static __device__ __forceinline__ void cp_async16(void *dst, const void *src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_u32(dst)), "l"(src) : "memory");
}
/* The same copy with src_size bytes read (0: none) and the rest of the 16 zero-filled. */
static __device__ __forceinline__ void cp_async16_zfill(void *dst, const void *src, int src_size) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(dst)), "l"(src), "r"(src_size)
                 : "memory");
}
static __device__ __forceinline__ void cp_async_commit(void) { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
static __device__ __forceinline__ void cp_async_wait1(void) { asm volatile("cp.async.wait_group 1;\n" ::: "memory"); }
static __device__ __forceinline__ void cp_async_wait0(void) { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }

/* Four 8x8 bf16 matrices; lane l gives the address of row l % 8 of matrix l / 8 and gets, of each
 * matrix, row l / 4, columns 2 (l % 4) and + 1 (trans: column l / 4, rows 2 (l % 4) and + 1). */
static __device__ __forceinline__ void ldsm_x4(uint32_t r[4], const uint16_t *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_u32(p)));
}
static __device__ __forceinline__ void ldsm_x4_t(uint32_t r[4], const uint16_t *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_u32(p)));
}

/* d += a b, m16n8k16. Fragments (g = lane / 4, t = lane % 4): a0 (row g, k 2t, 2t+1), a1 (row
 * g+8, k 2t..), a2 (row g, k 2t+8..), a3 (row g+8, k 2t+8..); b0 (k 2t, 2t+1, col g), b1 (k
 * 2t+8.., col g); d0, d1 (row g, cols 2t, 2t+1), d2, d3 (row g+8, cols 2t, 2t+1). */
static __device__ __forceinline__ void mma16816(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* bf16(x0) in the low half, bf16(x1) in the high half, round to nearest even. */
static __device__ __forceinline__ uint32_t pack_bf16(float x0, float x1) {
    uint32_t r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(x1), "f"(x0));
    return r;
}

/* x0, x1 = hi + lo: hi = bf16(x), lo = bf16(x - hi); x - hi is exact in fp32. */
static __device__ __forceinline__ void split_pair(float x0, float x1, uint32_t *hi, uint32_t *lo) {
    const uint32_t h = pack_bf16(x0, x1);
    *hi = h;
    *lo = pack_bf16(__fsub_rn(x0, __uint_as_float(h << 16)), __fsub_rn(x1, __uint_as_float(h & 0xffff0000u)));
}

static __device__ __forceinline__ void split8(const float v[8], uint4 *hi, uint4 *lo) {
    split_pair(v[0], v[1], &hi->x, &lo->x);
    split_pair(v[2], v[3], &hi->y, &lo->y);
    split_pair(v[4], v[5], &hi->z, &lo->z);
    split_pair(v[6], v[7], &hi->w, &lo->w);
}

/* A chunk's K (or V) tile into shared memory, [C][kst] bf16: cache positions by cp.async, block
 * positions (fp32) split into the hi and lo tiles, positions past the group's context zeros.
 * pos_off: per position, the cache element offset (>= 0), -1 (zeros) or -2 - the block row. The lo
 * tile holds only the lo_rows positions from lo_base (the k16 steps that can hold block positions,
 * tc_lo_rows; zeros where a cache position or the context's end falls among them); lo_on: the
 * chunk holds block positions. */
static __device__ __forceinline__ void tc_load_tile(uint16_t *hi, uint16_t *lo, const uint16_t *cache,
                                                    const float *blk, int ld_blk, const long long *pos_off, int kvh,
                                                    int hd, int kst, int lo_on, int lo_base, int lo_rows) {
    const int h8 = hd >> 3;
    const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
    for (int idx = threadIdx.x; idx < ATTN_CHUNK * h8; idx += TC_THREADS) {
        const int pp = idx / h8, d = (idx - pp * h8) * 8;
        const int lw = lo_on && (lo_rows == ATTN_CHUNK || (unsigned)(pp - lo_base) < (unsigned)lo_rows);
        const long long off = pos_off[pp];
        uint16_t *dh = hi + pp * kst + d, *dl = lo + (pp - lo_base) * kst + d;
        if (off >= 0) {
            cp_async16(dh, cache + off + d);
            if (lw) *(uint4 *)dl = zero;
        } else if (off == -1) {
            *(uint4 *)dh = zero;
            if (lw) *(uint4 *)dl = zero;
        } else {
            const float *src = blk + (size_t)(-2 - off) * ld_blk + (size_t)kvh * hd + d;
            float v[8];
#pragma unroll
            for (int e = 0; e < 8; e++) v[e] = src[e];
            uint4 h, l;
            split8(v, &h, &l);
            *(uint4 *)dh = h;
            *(uint4 *)dl = l;
        }
    }
}

/* A causal chunk's K and V tiles (cache rows, or zeros past the group's context; no block rows),
 * each a commit group, K first. Each thread reads its pieces' offsets once for both tiles and
 * branches once a piece (ncu, session 23: tc_load_tile's per-piece offset loads, 64-bit tests and
 * three-way branches were ~28% of the fused kernel's instructions). Same bytes as tc_load_tile.
 * Used by the split kernel only: batch 8 verify 8.24 -> 8.06 ms, decode 5.26 -> 5.20; in the fused
 * kernel it changed nothing or cost ~0.3% (batch 64 verify 29.80 / 29.87 -> 29.86 / 30.01). */
static __device__ __forceinline__ void tc_load_kv(uint16_t *Ks, uint16_t *Vs, const uint16_t *kc, const uint16_t *vc,
                                                  const long long *pos_off, int hd, int kst) {
    const int h8 = hd >> 3, np = hd >> 4; /* pieces a thread per tile: ATTN_CHUNK * h8 / TC_THREADS */
    const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
    long long off[FLINT_CUDA_ATTN_MAX_HEAD_DIM / 16];
    int so[FLINT_CUDA_ATTN_MAX_HEAD_DIM / 16];
#pragma unroll
    for (int i = 0; i < FLINT_CUDA_ATTN_MAX_HEAD_DIM / 16; i++) {
        if (i >= np) break;
        const int idx = threadIdx.x + TC_THREADS * i, pp = idx / h8, d = (idx - pp * h8) * 8;
        const long long o = pos_off[pp];
        off[i] = o >= 0 ? o + d : -1;
        so[i] = pp * kst + d;
    }
#pragma unroll
    for (int v = 0; v < 2; v++) { /* K, then V */
        uint16_t *dst = v ? Vs : Ks;
        const uint16_t *src = v ? vc : kc;
#pragma unroll
        for (int i = 0; i < FLINT_CUDA_ATTN_MAX_HEAD_DIM / 16; i++) {
            if (i >= np) break;
            if (off[i] >= 0) cp_async16(dst + so[i], src + off[i]);
            else *(uint4 *)(dst + so[i]) = zero;
        }
        cp_async_commit();
    }
}

/* One tile (K or V) of a causal chunk at head_dim 128 when pages hold a multiple of 16 positions
 * (the PF kernel): positions 16 i .. 16 i + 15 of the chunk lie in one page, whose first position's
 * element offset pg_off[i] the prologue wrote, so thread tid copies the 16-byte piece tid % 16 of
 * position 16 i + tid / 16 from pg_off[i] + (tid / 16) slot, and zero-fills it (no read) at or
 * past Tmax; one commit group. Same bytes as tc_load_tile, with per piece an add and a compare
 * instead of a 64-bit offset read from shared memory and a three-way branch (ncu, session 32:
 * ~460 of the fused kernel's ~1580 instructions a warp and chunk at batch 64, q 8; ~1300 now). */
static __device__ __forceinline__ void tc_load_page_tile(uint16_t *dst, const uint16_t *src, const long long *pg_off,
                                                         int t0, int Tmax, int slot) {
    const int r = threadIdx.x >> 4, d = (threadIdx.x & 15) * 8, kst = 128 + 8;
    const int n_ok = Tmax - t0 - r; /* piece i is in the context when 16 i < n_ok */
    const long long toff = (long long)r * slot + d;
    dst += r * kst + d;
#pragma unroll
    for (int i = 0; i < ATTN_CHUNK / 16; i++) {
        const int ok = 16 * i < n_ok;
        cp_async16_zfill(dst + 16 * i * kst, src + (ok ? pg_off[i] + toff : 0), ok ? 16 : 0);
    }
    cp_async_commit();
}

/* e^x for the softmax and the merges: ex2.approx(x log2 e), two instructions where expf takes eight
 * (its range reduction: session 38's SASS read of the fused kernel, 16 of them a lane and chunk in
 * the softmax's chain). x <= 0 here (scores minus a running max): relative error about |x| 2^-24
 * (x log2 e rounded) + 2^-22 (ex2.approx), so below ~2^-21 absolute (e^x |x| <= 1/e), far inside
 * the outputs' bf16 rounding; +0 at -inf and below about -87 (ftz). Every kernel that makes or
 * combines partials (chunk, split, fused, merge) takes this same function, so the
 * paths agree bit for bit as before; the CPU reference keeps expf (the tests' tolerance). */
static __device__ __forceinline__ float attn_exp(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(__fmul_rn(x, 1.44269504088896341f)));
    return y;
}

/* j / G for a slot j < 1024 and G <= 16 (gdiv = ceil(2^16 / G): exact in that range, checked
 * exhaustively), without the integer division's ~20 instructions */
static __device__ __forceinline__ int tc_div(int j, int gdiv) { return (j * gdiv) >> 16; }

/* Slot j's max and sum over the warps' values (red[slot][warp]: two 16-byte loads a slot, not
 * eight): the max is exact in any order, the sum is ((w0 + w1) + (w2 + w3)) + ((w4 + w5) + (w6 + w7)). */
static __device__ __forceinline__ float tc_red_max(const float (*red)[TC_WARPS], int j) {
    const float4 u = *(const float4 *)&red[j][0], v = *(const float4 *)&red[j][4];
    return fmaxf(fmaxf(fmaxf(u.x, u.y), fmaxf(u.z, u.w)), fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w)));
}
static __device__ __forceinline__ float tc_red_sum(const float (*red)[TC_WARPS], int j) {
    const float4 u = *(const float4 *)&red[j][0], v = *(const float4 *)&red[j][4];
    return __fadd_rn(__fadd_rn(__fadd_rn(u.x, u.y), __fadd_rn(u.z, u.w)),
                     __fadd_rn(__fadd_rn(v.x, v.y), __fadd_rn(v.z, v.w)));
}

/* The positions a slot's row sees: causal, row i of the group sees p0 + i + 1; block mode, all
 * rows see T; slots past the group's rows (padding) see nothing. */
static __device__ __forceinline__ int tc_slot_T(int j, int n_slots, int gdiv, int blk, int p0, int Tmax) {
    return j >= n_slots ? 0 : blk ? Tmax : p0 + 1 + tc_div(j, gdiv);
}

/* The max (MAX) or sum of v0 (slot j0) and of v1 (slot j0 + 8) over a quad's 4 lanes (xor 1,
 * then xor 2) into the warp's column of red. */
static __device__ __forceinline__ void tc_quad_put(float (*red)[TC_WARPS], int warp, int j0, float v0, float v1,
                                                   const int MAX) {
#pragma unroll
    for (int m = 1; m <= 2; m <<= 1) {
        const float u0 = __shfl_xor_sync(0xffffffffu, v0, m), u1 = __shfl_xor_sync(0xffffffffu, v1, m);
        v0 = MAX ? fmaxf(v0, u0) : __fadd_rn(v0, u0);
        v1 = MAX ? fmaxf(v1, u1) : __fadd_rn(v1, u1);
    }
    if ((threadIdx.x & 3) == 0) {
        red[j0][warp] = v0;
        red[j0 + 8][warp] = v1;
    }
}

static __device__ __forceinline__ void tc_zero(float acc[TC_MT][2][4]) {
#pragma unroll
    for (int mt = 0; mt < TC_MT; mt++)
#pragma unroll
        for (int nt = 0; nt < 2; nt++)
#pragma unroll
            for (int i = 0; i < 4; i++) acc[mt][nt][i] = 0.0f;
}

/* The B fragments of one k16 step (n tiles 0, 1) from shared memory at p (trans: stored k-major,
 * as V), and the lo plane's at pl when lo (zeros otherwise). */
static __device__ __forceinline__ void tc_ldsm_b(uint32_t b[2][2], uint32_t bl[2][2], const uint16_t *p,
                                                 const uint16_t *pl, const int trans, int lo) {
    uint32_t r[4];
    if (trans) ldsm_x4_t(r, p);
    else ldsm_x4(r, p);
    b[0][0] = r[0], b[0][1] = r[1], b[1][0] = r[2], b[1][1] = r[3];
    if (lo) {
        if (trans) ldsm_x4_t(r, pl);
        else ldsm_x4(r, pl);
        bl[0][0] = r[0], bl[0][1] = r[1], bl[1][0] = r[2], bl[1][1] = r[3];
    } else {
        bl[0][0] = bl[0][1] = bl[1][0] = bl[1][1] = 0u;
    }
}

/* One k16 step of S = Q K^T or O = P V over the first n_mt m tiles: for each tile and n tile, in
 * this order, acc += A_hi B, acc += A_lo B, and acc += A_hi B_lo when lo (a block chunk). A's hi and
 * lo planes are row-major with stride lda, the step's columns from k0. */
static __device__ __forceinline__ void tc_mma_k16(float acc[TC_MT][2][4], const uint16_t *Ah, const uint16_t *Al,
                                                  int lda, int k0, const uint32_t b[2][2], const uint32_t bl[2][2],
                                                  int lo, const int n_mt) {
    const int lane = threadIdx.x & 31, mi = lane >> 3, rr = lane & 7;
#pragma unroll
    for (int mt = 0; mt < TC_MT; mt++) {
        if (mt >= n_mt) break;
        uint32_t ah[4], al[4];
        const int off = (mt * 16 + (mi & 1) * 8 + rr) * lda + k0 + (mi >> 1) * 8;
        ldsm_x4(ah, Ah + off);
        ldsm_x4(al, Al + off);
#pragma unroll
        for (int nt = 0; nt < 2; nt++) {
            mma16816(acc[mt][nt], ah, b[nt][0], b[nt][1]);
            mma16816(acc[mt][nt], al, b[nt][0], b[nt][1]);
            if (lo) mma16816(acc[mt][nt], ah, bl[nt][0], bl[nt][1]);
        }
    }
}

/* a slot's T where the chunk is not seen whole (FULL: unused) */
static __device__ __forceinline__ int tc_full_T(const int FULL, int j, int n_slots, int gdiv, int blk, int p0, int Tmax) {
    return FULL ? 0 : tc_slot_T(j, n_slots, gdiv, blk, p0, Tmax);
}

/* Step 4 of a chunk (tc_group): scale the scores, then each slot's max over this warp's positions
 * into red_m. Lane positions pw + 8 nt + e; a slot sees positions below its T. FULL: every slot
 * sees all of them (no compares: the same values). */
template <int FULL>
static __device__ __forceinline__ void tc_softmax_max(float acc[TC_MT][2][4], float (*red_m)[TC_WARPS], float scale,
                                                      const int n_mt, int js, int n_slots, int gdiv, int blk, int p0,
                                                      int Tmax, int pw) {
    const int warp = threadIdx.x >> 5, g = (threadIdx.x & 31) >> 2;
#pragma unroll
    for (int mt = 0; mt < TC_MT; mt++) {
        if (mt >= n_mt) break;
        const int j0 = mt * 16 + g, j1 = j0 + 8;
        const int T0 = tc_full_T(FULL, js + j0, n_slots, gdiv, blk, p0, Tmax);
        const int T1 = tc_full_T(FULL, js + j1, n_slots, gdiv, blk, p0, Tmax);
        float m0 = -INFINITY, m1 = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < 2; nt++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int p = pw + 8 * nt + e;
                const float s0 = __fmul_rn(acc[mt][nt][e], scale), s1 = __fmul_rn(acc[mt][nt][2 + e], scale);
                acc[mt][nt][e] = s0;
                acc[mt][nt][2 + e] = s1;
                if (FULL || p < T0) m0 = fmaxf(m0, s0);
                if (FULL || p < T1) m1 = fmaxf(m1, s1);
            }
        tc_quad_put(red_m, warp, j0, m0, m1, 1);
    }
}

/* Step 5: p = e^(s - m) (0 where not seen), each slot's sum over this warp's positions into
 * red_l, and P as hi/lo bf16 into shared memory. FULL as above. */
template <int FULL>
static __device__ __forceinline__ void tc_softmax_p(const float acc[TC_MT][2][4], const float (*red_m)[TC_WARPS],
                                                    float (*red_l)[TC_WARPS], uint16_t *Ph, uint16_t *Pl,
                                                    const int n_mt, int js, int n_slots, int gdiv, int blk, int p0,
                                                    int Tmax, int pw) {
    const int warp = threadIdx.x >> 5, g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
#pragma unroll
    for (int mt = 0; mt < TC_MT; mt++) {
        if (mt >= n_mt) break;
        const int j0 = mt * 16 + g, j1 = j0 + 8;
        const float M0 = tc_red_max(red_m, j0), M1 = tc_red_max(red_m, j1); /* loads first: the chain */
        const int T0 = tc_full_T(FULL, js + j0, n_slots, gdiv, blk, p0, Tmax);
        const int T1 = tc_full_T(FULL, js + j1, n_slots, gdiv, blk, p0, Tmax);
        float l0 = 0.0f, l1 = 0.0f;
#pragma unroll
        for (int nt = 0; nt < 2; nt++) {
            const int p = pw + 8 * nt;
            const float a0 = FULL || p < T0 ? attn_exp(__fsub_rn(acc[mt][nt][0], M0)) : 0.0f;
            const float a1 = FULL || p + 1 < T0 ? attn_exp(__fsub_rn(acc[mt][nt][1], M0)) : 0.0f;
            const float b0 = FULL || p < T1 ? attn_exp(__fsub_rn(acc[mt][nt][2], M1)) : 0.0f;
            const float b1 = FULL || p + 1 < T1 ? attn_exp(__fsub_rn(acc[mt][nt][3], M1)) : 0.0f;
            l0 = __fadd_rn(__fadd_rn(l0, a0), a1);
            l1 = __fadd_rn(__fadd_rn(l1, b0), b1);
            const int col = warp * 16 + 8 * nt + 2 * t;
            uint32_t h, l;
            split_pair(a0, a1, &h, &l);
            *(uint32_t *)(Ph + j0 * TC_PST + col) = h;
            *(uint32_t *)(Pl + j0 * TC_PST + col) = l;
            split_pair(b0, b1, &h, &l);
            *(uint32_t *)(Ph + j1 * TC_PST + col) = h;
            *(uint32_t *)(Pl + j1 * TC_PST + col) = l;
        }
        tc_quad_put(red_l, warp, j0, l0, l1, 0);
    }
}

/* One group's chunks (this CTA's share: c = split, split + ns, ..; its m tiles js / 16 ..). The
 * fused causal kernel calls it with n_mt a constant, so the m-tile loops unroll without their
 * run-time exits (ncu, session 23: the bound checks, branches and index arithmetic were ~80% of
 * the score loop's instructions, and the kernel at batch 64 was bound by its instruction stream,
 * not by HBM); the others with the run-time count. */
static __device__ __forceinline__ void tc_group(const flint_cuda_attn &a, const tc_args &x, const int FUSED,
                                                const int hd, const int CAUSAL, const int blk, const int n_mt,
                                                const int LOWIN, const int PF,
                                                uint16_t *Ks, uint16_t *Kl, uint16_t *Vs, uint16_t *Vl, uint16_t *Ph,
                                                uint16_t *Pl, uint16_t *Qh, uint16_t *Ql, float (*red_m)[TC_WARPS],
                                                float (*red_l)[TC_WARPS], float2 *mg_ab, float *mg_L, long long *pos_off,
                                                int kvh, int split, int r0, int seq, int p0, int n_cache, int Tmax,
                                                int blk0, int nch, int n_slots, int js) {
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
    const int mi = lane >> 3, rr = lane & 7;
    const int G = a.n_heads / a.n_kv_heads, kst = hd + 8, gdiv = (65536 + G - 1) / G;
    const size_t slot = (size_t)a.n_kv_heads * hd;
    /* FUSED: the merge's running state. Its sums of this lane's slots j = 16 mt + g + 8 hh, its
     * dims, in o_run; the max and sum of slot tid (one thread a slot) in Mj, Lj, and that thread's
     * coefficients for this chunk (a = e^(M - M'), b = e^(m - M')) in alj, bej, which it hands to the
     * other lanes through mg_ab (once a slot, not once a warp and lane: ncu, session 23) */
    float o_run[TC_MT][2][4], Mj = -INFINITY, Lj = 0.0f, alj = 0.0f, bej = 0.0f;
    tc_zero(o_run);

    /* PF (fused, paged, P in its own planes): chunk c + 1's K is requested once chunk c's scores
     * are done and its V once chunk c's P V is done, so that their latency passes under chunk c's
     * softmax and P V (and chunk c + 1's scores) instead of at chunk c + 1's start. pos_off holds
     * two chunks' page offsets: chunk c's at (c & 1) 8. The copies, their bytes and everything
     * computed from them are those of the plain loop. */
    for (int c = split; c < nch; c += x.ns) {
        const int t0 = c * ATTN_CHUNK;
        const int bchunk = blk && t0 + ATTN_CHUNK > n_cache; /* holds block positions (fp32 K/V) */
        long long *pg = pos_off + (PF ? (c & 1) * 8 : 0), *pg1 = pos_off + ((c + 1) & 1) * 8;
        /* the lo planes' rows: x.lo_rows positions from the k16 step of the chunk's first block
         * position (outside them the lo values are zeros: the MMA takes zero fragments, as before) */
        const int lo_rows = LOWIN ? x.lo_rows : ATTN_CHUNK; /* LOWIN 0: whole-chunk planes, lo_base 0 */
        const int lo_base = LOWIN && bchunk ? (max(n_cache - t0, 0) >> 4) << 4 : 0;

        /* 1. where each position's K/V row is (the block-table loads need no wait: the tables
         * are uploaded before a forward's first kernel); PF: where each 16 positions' page is, for
         * the first chunk and the next one (the next chunk's are read after the scores' barrier) */
        if (PF) {
            const int want = (c == split ? 2 : 1) * 8;
            const int i = c > split ? tid + 8 : tid;
            if (tid < want && (i < 8 || c + 1 < nch)) {
                const int p = t0 + 16 * i; /* i >= 8: the next chunk's (t0 + 128 + 16 (i - 8)) */
                long long off = -1;
                if (p < Tmax) {
                    const int b = a.block_tables[(size_t)seq * a.bt_stride + p / a.block_size];
                    off = ((long long)b * a.block_size + p % a.block_size) * (long long)slot + (long long)kvh * hd;
                }
                (i < 8 ? pg : pg1)[i & 7] = off;
            }
        } else {
            const int p = t0 + tid; /* position p is thread tid's */
            if (tid < ATTN_CHUNK) {
                const int b = p < n_cache ? a.block_tables[(size_t)seq * a.bt_stride + p / a.block_size] : 0;
                long long off = -1;
                if (p < n_cache)
                    off = ((long long)b * a.block_size + p % a.block_size) * (long long)slot + (long long)kvh * hd;
                else if (p < Tmax)
                    off = -2 - (long long)(blk0 + p - n_cache);
                pos_off[tid] = off;
            }
        }
        if (!PF || c == split) __syncthreads(); /* PF: later chunks' offsets wait for the scores' barrier */
        /* FLINT_LAUNCH: Q and the cache (and the drafter block's K/V) come from the kernels
         * before; everything above overlapped the kernel before */
        pdl_wait();

        /* 2. K, then V, in flight together; on a group's first chunk its Q meanwhile; wait for
         * K (and Q) only (PF: after the first chunk both are in flight already) */
        if (PF) {
            if (c == split) {
                tc_load_page_tile(Ks, a.k_cache, pg, t0, Tmax, (int)slot);
                tc_load_page_tile(Vs, a.v_cache, pg, t0, Tmax, (int)slot);
            }
        } else if (CAUSAL && !FUSED) { /* the split kernel in a causal build (no block rows) */
            tc_load_kv(Ks, Vs, a.k_cache, a.v_cache, pos_off, hd, kst);
        } else {
            tc_load_tile(Ks, Kl, a.k_cache, a.blk_k, a.ld_blk, pos_off, kvh, hd, kst, bchunk, lo_base, lo_rows);
            cp_async_commit();
            tc_load_tile(Vs, Vl, a.v_cache, a.blk_v, a.ld_blk, pos_off, kvh, hd, kst, bchunk, lo_base, lo_rows);
            cp_async_commit();
        }
        if (c == split) { /* Q of the group's slots as hi/lo bf16, zeros for padding slots (the
                           * last readers of the previous group's Q passed the chunk-end barrier) */
#pragma unroll 2
            for (int idx = tid; idx < n_mt * 16 * (hd >> 3); idx += TC_THREADS) {
                const int j = idx / (hd >> 3), d = (idx - j * (hd >> 3)) * 8;
                float v[8];
                if (js + j < n_slots) {
                    const int jr = tc_div(js + j, gdiv);
                    const float *qp =
                        a.q + (size_t)(r0 + jr) * a.ldq + (size_t)(kvh * G + js + j - jr * G) * hd + d;
                    if (x.q_vec) {
                        const float4 u0 = *(const float4 *)qp, u1 = *(const float4 *)(qp + 4);
                        v[0] = u0.x, v[1] = u0.y, v[2] = u0.z, v[3] = u0.w;
                        v[4] = u1.x, v[5] = u1.y, v[6] = u1.z, v[7] = u1.w;
                    } else {
#pragma unroll
                        for (int e = 0; e < 8; e++) v[e] = qp[e];
                    }
                } else {
#pragma unroll
                    for (int e = 0; e < 8; e++) v[e] = 0.0f;
                }
                uint4 h, l;
                split8(v, &h, &l);
                *(uint4 *)(Qh + j * kst + d) = h;
                *(uint4 *)(Ql + j * kst + d) = l;
            }
        }
        if (!PF || c == split) { /* PF: a later chunk's K was waited for at the end of the chunk before */
            cp_async_wait1();
            __syncthreads();
        }

        /* 3. S = Q K^T for this warp's 16 positions */
        float acc[TC_MT][2][4];
        tc_zero(acc);
        for (int s = 0; s < (hd >> 4); s++) {
            uint32_t kb[2][2], kl[2][2];
            const int kcol = 16 * s + (mi & 1) * 8;
            const int krow = warp * 16 + (mi >> 1) * 8 + rr; /* n tiles 0, 1: positions 16w + 8 (mi >> 1) + rr */
            const int lw = LOWIN ? bchunk && (unsigned)(warp * 16 - lo_base) < (unsigned)lo_rows : bchunk;
            tc_ldsm_b(kb, kl, Ks + krow * kst + kcol, Kl + (krow - lo_base) * kst + kcol, 0, lw);
            tc_mma_k16(acc, Qh, Ql, kst, 16 * s, kb, kl, bchunk, n_mt);
        }

        /* 4. scale, mask, the max of each slot over this warp's positions, then over warps */
        const int pw = t0 + warp * 16 + 2 * t; /* this lane's positions: pw + 8 nt + e */
        /* full: every slot of the CTA's tiles sees every position of the chunk (a cache chunk
         * before the group's first row, or a block's): the same values without the mask's
         * compares. The fused kernels only (session 38, H200: lab verify b64 101.3 -> 99.0 us,
         * b64 q 8 20.45 -> 20.30 ms); in the split kernel the second copy cost batch 1 q 1
         * 4.238 -> 4.254 ms. */
        const int full = js + n_mt * 16 <= n_slots && tc_slot_T(js, n_slots, gdiv, blk, p0, Tmax) >= t0 + ATTN_CHUNK;
        if (FUSED && full) tc_softmax_max<1>(acc, red_m, x.scale, n_mt, js, n_slots, gdiv, blk, p0, Tmax, pw);
        else tc_softmax_max<0>(acc, red_m, x.scale, n_mt, js, n_slots, gdiv, blk, p0, Tmax, pw);
        __syncthreads(); /* also: every warp is done reading K, so P may overwrite it */
        if (PF) { /* the next chunk's K (an empty group after the last: the waits count groups) */
            if (c + 1 < nch) tc_load_page_tile(Ks, a.k_cache, pg1, t0 + ATTN_CHUNK, Tmax, (int)slot);
            else cp_async_commit();
        }

        /* FUSED: the merge coefficients of slot tid (attn_merge_kernel's step for chunk c) */
        const int own = FUSED && tid < n_mt * 16 && t0 < tc_slot_T(js + tid, n_slots, gdiv, blk, p0, Tmax);
        if (own) {
            const float m = tc_red_max(red_m, tid);
            const float Mn = fmaxf(Mj, m);
            alj = attn_exp(__fsub_rn(Mj, Mn)), bej = attn_exp(__fsub_rn(m, Mn));
            Mj = Mn;
            mg_ab[tid] = make_float2(alj, bej);
        }

        /* 5. p = e^(s - m) (0 where not seen), l, and P as hi/lo bf16 into shared memory */
        if (FUSED && full) tc_softmax_p<1>(acc, red_m, red_l, Ph, Pl, n_mt, js, n_slots, gdiv, blk, p0, Tmax, pw);
        else tc_softmax_p<0>(acc, red_m, red_l, Ph, Pl, n_mt, js, n_slots, gdiv, blk, p0, Tmax, pw);
        if (PF) cp_async_wait1(); /* V (the next chunk's K may stay in flight) */
        else cp_async_wait0();    /* V */
        __syncthreads();
        if (own) { /* the merged sum so far (a row may see its last position chunks before the group's last) */
            Lj = fmaf(tc_red_sum(red_l, tid), bej, __fmul_rn(Lj, alj));
            mg_L[tid] = Lj;
        }

        /* 6. O = P V for this warp's dim pair pb (16 dims; pb + 8, .. past head_dim 128), then the
         * partials */
        const int npair = hd >> 4;
        float *o_part = a.scratch, *ml_part = a.scratch + (size_t)a.n_rows * a.n_heads * x.max_chunks * hd;
        for (int pb = warp; pb < npair; pb += TC_WARPS) {
            float o[TC_MT][2][4];
            tc_zero(o);
#pragma unroll 2
            for (int ks = 0; ks < ATTN_CHUNK / 16; ks++) {
                uint32_t vb[2][2], vl[2][2];
                const int vrow = 16 * ks + (mi & 1) * 8 + rr;
                const int vcol = 16 * pb + (mi >> 1) * 8; /* n tiles 0, 1: dims 16 pb + 8 (mi >> 1) */
                const int lw = LOWIN ? bchunk && (unsigned)(16 * ks - lo_base) < (unsigned)lo_rows : bchunk;
                tc_ldsm_b(vb, vl, Vs + vrow * kst + vcol, Vl + (vrow - lo_base) * kst + vcol, 1, lw);
                tc_mma_k16(o, Ph, Pl, TC_PST, 16 * ks, vb, vl, bchunk, n_mt);
            }
#pragma unroll
            for (int mt = 0; mt < TC_MT; mt++) {
                if (mt >= n_mt) break;
#pragma unroll
                for (int hh = 0; hh < 2; hh++) {
                    const int j = mt * 16 + g + 8 * hh;
                    if (t0 >= tc_slot_T(js + j, n_slots, gdiv, blk, p0, Tmax)) continue; /* nothing seen, or padding */
                    if (FUSED) { /* attn_merge_kernel's step for chunk c, the same operations */
                        const float2 ab = mg_ab[j];
                        const float al = ab.x, be = ab.y;
#pragma unroll
                        for (int nt = 0; nt < 2; nt++) {
#pragma unroll
                            for (int e = 0; e < 2; e++)
                                o_run[mt][nt][2 * hh + e] =
                                    fmaf(o[mt][nt][2 * hh + e], be, __fmul_rn(o_run[mt][nt][2 * hh + e], al));
                        }
                        continue;
                    }
                    const int jr = tc_div(js + j, gdiv);
                    const size_t part =
                        ((size_t)(r0 + jr) * a.n_heads + (size_t)kvh * G + js + j - jr * G) * x.max_chunks + c;
                    float *op = o_part + part * hd + 2 * t;
#pragma unroll
                    for (int nt = 0; nt < 2; nt++)
                        *(float2 *)(op + 16 * pb + 8 * nt) = make_float2(o[mt][nt][2 * hh], o[mt][nt][2 * hh + 1]);
                }
            }
        }
        if (!FUSED && warp == 0 && t == 0) {
#pragma unroll
            for (int mt = 0; mt < TC_MT; mt++) {
                if (mt >= n_mt) break;
#pragma unroll
                for (int hh = 0; hh < 2; hh++) {
                    const int j = mt * 16 + g + 8 * hh;
                    if (t0 >= tc_slot_T(js + j, n_slots, gdiv, blk, p0, Tmax)) continue;
                    const int jr = tc_div(js + j, gdiv);
                    const size_t part =
                        ((size_t)(r0 + jr) * a.n_heads + (size_t)kvh * G + js + j - jr * G) * x.max_chunks + c;
                    ml_part[2 * part] = tc_red_max(red_m, j);
                    ml_part[2 * part + 1] = tc_red_sum(red_l, j);
                }
            }
        }
        if (PF) cp_async_wait0(); /* the next chunk's K: one barrier both frees V and shows K */
        __syncthreads(); /* the next chunk (or group) overwrites K/P, V, Q and the reductions */
        if (PF) { /* the next chunk's V */
            if (c + 1 < nch) tc_load_page_tile(Vs, a.v_cache, pg1, t0 + ATTN_CHUNK, Tmax, (int)slot);
            else cp_async_commit();
        }
    }
    if (FUSED && warp < (hd >> 4)) { /* out = bf16(o * (1 / L)), as the merge kernel */
        const int pb = warp; /* head_dim <= 128: one pair per warp */
#pragma unroll
        for (int mt = 0; mt < TC_MT; mt++) {
            if (mt >= n_mt) break;
#pragma unroll
            for (int hh = 0; hh < 2; hh++) {
                const int j = mt * 16 + g + 8 * hh;
                if (js + j >= n_slots) continue;
                const float inv = 1.0f / mg_L[j];
                const int jr = tc_div(js + j, gdiv);
                const int e0 = (kvh * G + js + j - jr * G) * hd + 2 * t;
#pragma unroll
                for (int nt = 0; nt < 2; nt++) {
                    uint16_t *op = attn_out_at(a, r0 + jr, e0 + 16 * pb + 8 * nt);
                    op[0] = f2bf(__fmul_rn(o_run[mt][nt][2 * hh], inv));
                    op[1] = f2bf(__fmul_rn(o_run[mt][nt][2 * hh + 1], inv));
                }
            }
        }
    }
}

/* FUSED (a constant): the CTA takes every chunk of its groups (ns == 1) in order and merges them
 * itself, with the merge kernel's recurrence, into the output: no partials (head_dim <= 128, so
 * that each warp's running sums fit in registers: one dim-pair batch per warp). HD (a constant):
 * the head_dim the kernel is compiled for, 0 for any: with it known the loops over head_dim
 * unroll and the tile loads' index arithmetic folds (at head_dim 128 it was ~30% of the split
 * kernel's instructions at batch 1, ncu, session 18); the arithmetic on values is the same. BLK
 * (a constant): 0 compiles the kernel for causal launches only. */
static __device__ __forceinline__ void attn_tc_body(const flint_cuda_attn a, const tc_args x, const int FUSED,
                                                    const int HD, const int BLK, const int PF) {
    extern __shared__ uint4 tc_smem[];
    __shared__ __align__(16) float red_m[TC_NQ][TC_WARPS], red_l[TC_NQ][TC_WARPS]; /* each slot's max and sum per warp */
    __shared__ long long pos_off[ATTN_CHUNK];
    __shared__ float2 mg_ab[TC_NQ]; /* FUSED: each slot's merge coefficients for the chunk */
    __shared__ float mg_L[TC_NQ];   /* FUSED: each slot's merged sum after its latest chunk */
    __shared__ int w_seq[TC_ROWS], w_pos[TC_ROWS];
    __shared__ unsigned char w_cont[TC_ROWS], w_lead[TC_ROWS];
    __shared__ int g_r0[TC_WIN], g_n[TC_WIN], g_cnt;

    const int tid = threadIdx.x;
    /* grid (KV head, window, split x ms + share): CTAs start in x, y, z order, so the low splits,
     * which every context has, start first with all their shares (a short context in a grid sized
     * for a long max_len: z < 18 of 64 work); the last rows' windows first */
    const int kvh = blockIdx.x, win = gridDim.y - 1 - blockIdx.y, split = blockIdx.z / x.ms, mh = blockIdx.z % x.ms;
    /* BLK 0: compiled for causal launches only (the drafter block's lo-tile MMAs drop out) */
    const int hd = HD ? HD : a.head_dim, G = a.n_heads / a.n_kv_heads, kst = hd + 8, blk = BLK && a.blk_rows > 0;

    /* Shared memory: [K hi | K lo] (P hi | P lo reuse it once the scores are done), [V hi | V lo],
     * [Q hi | Q lo]. Row strides kst = hd + 8 and TC_PST are odd multiples of 16 bytes, so the 8
     * rows of an ldmatrix hit distinct banks. */
    const size_t kv_elems = (size_t)(ATTN_CHUNK + (blk ? x.lo_rows : 0)) * kst;
    const size_t p_elems = (size_t)2 * x.nq * TC_PST;
    uint16_t *Ks = (uint16_t *)tc_smem, *Kl = Ks + (size_t)ATTN_CHUNK * kst;
    uint16_t *Ph = Ks, *Pl = Ks + (size_t)x.nq * TC_PST;
    uint16_t *Vs = Ks + (kv_elems > p_elems ? kv_elems : p_elems), *Vl = Vs + (size_t)ATTN_CHUNK * kst;
    uint16_t *Qh = Vs + kv_elems, *Ql = Qh + (size_t)x.nq * kst;
    if (PF) { /* P in its own planes after Q, V right after K: the next chunk's K loads under P */
        Vs = Ks + kv_elems;
        Qh = Vs + kv_elems, Ql = Qh + (size_t)x.nq * kst;
        Ph = Ql + (size_t)x.nq * kst, Pl = Ph + (size_t)x.nq * TC_PST;
    }

    /* ---- the groups starting in this window ---- */
    if (!blk) {
        const int base = win * x.win - TC_LOOK;
        if (tid < TC_ROWS) {
            const int q = base + tid, ok = q >= 0 && q < a.n_rows;
            w_seq[tid] = ok ? a.row_seq[q] : -1;
            w_pos[tid] = ok ? a.pos[q] : 0;
        }
        __syncthreads();
        if (tid < TC_ROWS)
            w_cont[tid] = tid > 0 && w_seq[tid] >= 0 && w_seq[tid - 1] == w_seq[tid] && w_pos[tid - 1] + 1 == w_pos[tid];
        __syncthreads();
        int lead = 0;
        if (tid >= TC_LOOK && tid < TC_ROWS && w_seq[tid] >= 0) {
            lead = !w_cont[tid];
            if (!lead && w_pos[tid] % x.u == 0) { /* a cut if at least U rows into the run */
                lead = 1;
                for (int k = 0; k < x.u; k++)
                    if (!w_cont[tid - k]) {
                        lead = 0;
                        break;
                    }
            }
        }
        if (tid < TC_ROWS) w_lead[tid] = (unsigned char)lead;
        __syncthreads();
        if (tid == 0) {
            int n = 0;
            for (int i = TC_LOOK; i < TC_LOOK + x.win; i++) {
                if (!w_lead[i]) continue;
                int e = i + 1; /* groups have at most 2U - 1 <= 63 rows: e stays below TC_ROWS */
                while (e < TC_ROWS && w_cont[e] && !w_lead[e]) e++;
                g_r0[n] = base + i;
                g_n[n] = e - i;
                n++;
            }
            g_cnt = n;
        }
    } else if (tid == 0) {
        int n = 0;
        for (int i = 0; i < x.win; i++) {
            const int q = win * x.win + i;
            if (q >= a.n_rows) break;
            const int off = q % a.blk_rows;
            if (off % x.r_max) continue;
            g_r0[n] = q;
            g_n[n] = min(x.r_max, a.blk_rows - off);
            n++;
        }
        g_cnt = n;
    }
    __syncthreads();

    const int n_grp = g_cnt;
    for (int gi = 0; gi < n_grp; gi++) {
        const int r0 = g_r0[gi], n = g_n[gi];
        int seq, p0, n_cache, Tmax, blk0 = 0;
        if (!blk) { /* the window arrays hold the row: no second trip to memory */
            seq = w_seq[r0 - (win * x.win - TC_LOOK)];
            p0 = w_pos[r0 - (win * x.win - TC_LOOK)];
            Tmax = p0 + n;
            n_cache = Tmax;
        } else {
            seq = a.row_seq[r0];
            blk0 = r0 - r0 % a.blk_rows;
            p0 = a.pos[blk0];
            n_cache = p0;
            Tmax = p0 + a.blk_rows;
        }
        int nch = (Tmax + ATTN_CHUNK - 1) / ATTN_CHUNK;
        if (nch > x.max_chunks) nch = x.max_chunks; /* a caller bug; the merge traps on it */
        if (split >= nch) continue;                  /* CTA-uniform */
        /* this CTA's m tiles: ms CTAs share a group's tiles when CTAs are few (verify at batch 1-2):
         * x.ms, halved while the splits that hold a chunk of this group (min(nch, ns): the grid's
         * splits follow max_ctx, a group's chunks its own context) times ms pass one wave, so a
         * short context in a grid sized for a long max_len still spreads its tiles; CTAs past ms
         * end here. CTA-uniform (a group's nch);
         * local tile mt is the group's tile mt_lo + mt, local slot j its slot js + j (every slot's
         * operations are the same whoever computes it) */
        int ms = x.ms;
        while (ms > 1 && min(nch, x.ns) * ms > x.budget) ms >>= 1;
        const int n_slots = n * G, n_mt_all = (n_slots + 15) >> 4, tpc = (n_mt_all + ms - 1) / ms;
        const int mt_lo = mh * tpc, n_mt = min(n_mt_all, mt_lo + tpc) - mt_lo, js = 16 * mt_lo;
        if (n_mt <= 0) continue; /* CTA-uniform */
        if (FUSED && (Tmax + ATTN_CHUNK - 1) / ATTN_CHUNK > x.max_chunks) __trap(); /* as the merge kernel */
        /* n_mt as a constant (1 tile: decode, 2: a verify block of 8 at G = 4) where a CTA walks many
         * chunks (the fused kernel: batch 32-64, prefill); the split kernel's CTAs take one or two
         * chunks each, and there the specialised code was slower in the forward (ncu, batch 8,
         * session 23: 41.4 -> 44.0 us a layer at q 8, K/V from HBM), so it keeps the run-time count */
#define TC_GROUP(NMT, JS)                                                                                          \
    tc_group(a, x, FUSED, hd, !BLK, blk, NMT, HD == 128, PF, Ks, Kl, Vs, Vl, Ph, Pl, Qh, Ql, red_m, red_l, mg_ab,    \
             mg_L, pos_off, kvh, split, r0, seq, p0, n_cache, Tmax, blk0, nch, n_slots, JS)
        if (PF) { /* planes sized by the rows-per-sequence hint: a longer group takes passes of x.nq / 16
                   * tiles, each walking the chunks again */
            for (int p_lo = 0; p_lo < n_mt; p_lo += x.nq >> 4) {
                const int pn = min(n_mt - p_lo, x.nq >> 4);
                if (pn == 1) TC_GROUP(1, js + 16 * p_lo);
                else if (pn == 2) TC_GROUP(2, js + 16 * p_lo);
                else if (pn == 3) TC_GROUP(3, js + 16 * p_lo);
                else TC_GROUP(4, js + 16 * p_lo);
            }
            continue;
        }
        if (!FUSED || BLK) TC_GROUP(n_mt, js); /* (block mode: the 4-tile copy spilled registers) */
        else if (n_mt == 1) TC_GROUP(1, js);
        else if (n_mt == 2) TC_GROUP(2, js);
        else if (n_mt == 3) TC_GROUP(3, js);
        else TC_GROUP(4, js);
#undef TC_GROUP
    }
}

/* The kernels: any head_dim (and mode), and head_dim 128 (the Qwen3 models) for causal launches
 * and for drafter blocks; each unfused (partials, then attn_merge_kernel) and fused. */
#define TC_KERNEL(name, FUSED, HD, BLK, PF)                                                                        \
    static __global__ void __launch_bounds__(TC_THREADS, 2) name(const flint_cuda_attn a, const tc_args x) {       \
        pdl_trigger(); /* a GEMM after this kernel may start streaming its weights */                              \
        attn_tc_body(a, x, FUSED, HD, BLK, PF); /* pdl_wait: inside, after the loads that need none */             \
    }
TC_KERNEL(attn_tc_kernel, 0, 0, 1, 0)
TC_KERNEL(attn_tc_fused_kernel, 1, 0, 1, 0)
TC_KERNEL(attn_tc_kernel_d128, 0, 128, 0, 0)
TC_KERNEL(attn_tc_fused_kernel_d128, 1, 128, 0, 0)
TC_KERNEL(attn_tc_fused_pf_kernel_d128, 1, 128, 0, 1)
TC_KERNEL(attn_tc_blk_kernel_d128, 0, 128, 1, 0)
TC_KERNEL(attn_tc_blk_fused_kernel_d128, 1, 128, 1, 0)
#undef TC_KERNEL

/* Rows of the K and V lo planes for drafter blocks of B rows: the k16 steps a run of B positions
 * can touch in a chunk (B <= 17: two, so 32 rows instead of a whole chunk's 128, and two CTAs fit
 * on a multiprocessor at head_dim 128, not one: qwen3-8b drafter, lab, batch 8 53 -> 39 us a
 * layer, batch 64 260 -> 170; draft phase batch 8 1.87 -> 1.79 ms, batch 64 7.89 -> 7.44, batch 1
 * 0.996 -> 1.016, session 24); 0 for causal launches. Only the head_dim-128 kernels (compiled with
 * the window; the generic kernel spilled registers with it) take the window. */
static int tc_lo_rows(int blk_rows, int hd) {
    if (blk_rows <= 0) return 0;
    if (hd != 128) return ATTN_CHUNK;
    const int steps = (blk_rows + 14) / 16 + 1;
    return 16 * (steps < ATTN_CHUNK / 16 ? steps : ATTN_CHUNK / 16);
}

/* Dynamic shared memory of attn_tc_fused_pf_kernel_d128 (causal, P in its own planes) for nq query slots. */
static size_t tc_smem_pf_bytes(int hd, int nq) {
    const size_t kst = (size_t)hd + 8;
    return (size_t)2 * ATTN_CHUNK * kst * 2 + (size_t)2 * nq * kst * 2 + (size_t)2 * nq * TC_PST * 2;
}

/* Dynamic shared memory of attn_tc_kernel for nq query slots. */
static size_t tc_smem_bytes(int hd, int lo_rows, int nq) {
    const size_t kst = (size_t)hd + 8, kv = (size_t)(ATTN_CHUNK + lo_rows) * kst * 2;
    const size_t p = (size_t)2 * nq * TC_PST * 2, q = (size_t)2 * nq * kst * 2;
    return (kv > p ? kv : p) + kv + q;
}

/* ==== Fallback path: CUDA cores ====
 * One block per (chunk c, KV head, row): the G = n_heads / n_kv_heads query heads of the KV head
 * share each K/V read. Thread t scores position t of the chunk (a dot in dimension order with
 * fmaf, then * scale); warp g takes the max and the exp-sum of head g's scores (lane-strided
 * partial sums, then a butterfly); thread d sums p_t * v_t[d] over the chunk in position order.
 * The partial (m, l, o) goes to scratch in the fast path's layout, for the same merge. */

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
    pdl_trigger(); /* a GEMM after this kernel may start streaming its weights */
    pdl_wait();    /* FLINT_LAUNCH: what the kernel before wrote is visible from here on */
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
            const float e = attn_exp(__fsub_rn(p[t], m));
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

/* ==== Merge: one block per (head, row) ====
 * Per head, over the chunks c = 0, 1, .. in order, from M = -inf, L = 0, A[d] = 0:
 *   M' = max(M, m_c), a = e^(M - M'), b = e^(m_c - M'),
 *   L = fmaf(l_c, b, L * a), A[d] = fmaf(o_c[d], b, A[d] * a), M = M';
 * then out = bf16(A * (1 / L)). The fused tensor-core kernel runs the same steps on the same
 * values in registers, so a row merged there has the bits of a row merged here. M' is a prefix
 * max (exact in any order): a warp scans 32 chunks at a time and puts a, b in shared memory; one
 * lane chains L; every thread chains A of its outputs. (Session 16 tried, and measured slower:
 * loading every chunk's l and 8 chunks' o ahead of the chains, 7.3 -> 8.7 us per verify layer at
 * batch 1; and merging in the split kernel's last block instead of this second launch, which
 * merges a verify's 8 rows one after another there: 68 us a layer instead of 27.) */
#define MERGE_OUT (FLINT_CUDA_ATTN_MAX_HEAD_DIM / ATTN_THREADS) /* outputs per thread, at most */

/* One CTA per (head, row) (session 18; it was one per KV head and row, each thread chaining its
 * G x head_dim / 128 outputs one after another: at batch 1 only 8 CTAs, and their chains waited
 * for one load per chunk each). Warp 0 scans the chunks; every thread chains its dims' A with the
 * chunk loop unrolled, so several chunks' loads are in flight. The operations per output and
 * their order are unchanged. */
static __global__ void __launch_bounds__(ATTN_THREADS) attn_merge_kernel(const flint_cuda_attn a, int max_chunks) {
    pdl_trigger(); /* a GEMM after this kernel may start streaming its weights */
    __shared__ float al_s[32], be_s[32], l_s[32];
    __shared__ float M_s, L_s;
    const int h = blockIdx.x, r = blockIdx.y, hd = a.head_dim;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    int n_cache, blk0;
    const int T = attn_span(a.blk_rows, a.pos, r, &n_cache, &blk0);
    const int nch = (T + ATTN_CHUNK - 1) / ATTN_CHUNK;
    if (nch > max_chunks) __trap(); /* max_ctx was below this row's context: a caller bug */
    pdl_wait(); /* FLINT_LAUNCH: the partials come from the kernel before (the positions do not) */
    const size_t base = ((size_t)r * a.n_heads + (size_t)h) * max_chunks; /* head h, chunk 0 */
    const float *o = a.scratch + base * hd, *ml = a.scratch + (size_t)a.n_rows * a.n_heads * max_chunks * hd + 2 * base;
    if (tid == 0) M_s = -INFINITY, L_s = 0.0f;
    __syncthreads();

    float acc[MERGE_OUT];
#pragma unroll
    for (int k = 0; k < MERGE_OUT; k++) acc[k] = 0.0f;
    for (int c0 = 0; c0 < nch; c0 += 32) {
        const int n = min(32, nch - c0);
        if (warp == 0) {
            const float *mlc = ml + 2 * c0;
            /* each lane loads its chunk's m and l at once: lane 0's chain over L below then reads
             * shared memory, not one dependent global load per chunk (ncu: 88 of the merge's 421
             * stall samples were the other warps waiting for that chain at the barrier) */
            const float m = lane < n ? mlc[2 * lane] : -INFINITY, carry = M_s;
            l_s[lane] = lane < n ? mlc[2 * lane + 1] : 0.0f;
            float pm = m; /* inclusive prefix max over lanes, then with the previous tiles' */
#pragma unroll
            for (int k = 1; k < 32; k <<= 1) {
                const float y = __shfl_up_sync(0xffffffffu, pm, k);
                if (lane >= k) pm = fmaxf(pm, y);
            }
            pm = fmaxf(pm, carry);
            float prev = __shfl_up_sync(0xffffffffu, pm, 1);
            if (lane == 0) prev = carry;
            if (lane < n) {
                al_s[lane] = attn_exp(__fsub_rn(prev, pm));
                be_s[lane] = attn_exp(__fsub_rn(m, pm));
            }
            const float last = __shfl_sync(0xffffffffu, pm, n - 1);
            __syncwarp();
            if (lane == 0) {
                float L = L_s;
                for (int c = 0; c < n; c++) L = fmaf(l_s[c], be_s[c], __fmul_rn(L, al_s[c]));
                L_s = L;
                M_s = last;
            }
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < MERGE_OUT; k++) {
            const int d = tid + k * ATTN_THREADS;
            if (d >= hd) break;
            const float *op = o + (size_t)c0 * hd + d;
            float s = acc[k];
#pragma unroll 8
            for (int c = 0; c < n; c++) s = fmaf(op[(size_t)c * hd], be_s[c], __fmul_rn(s, al_s[c]));
            acc[k] = s;
        }
        __syncthreads();
    }
    const float inv = 1.0f / L_s;
#pragma unroll
    for (int k = 0; k < MERGE_OUT; k++) {
        const int d = tid + k * ATTN_THREADS;
        if (d >= hd) break;
        *attn_out_at(a, r, h * hd + d) = f2bf(__fmul_rn(acc[k], inv));
    }
}

/* ==== Launcher ==== */

#define ATTN_MAX_DEVICES 64
static int attn_device(int *n_sm);

/* Scratch floats a launch of n_rows rows writes: a partial (head_dim + 2 floats) per (row, head,
 * chunk up to max_ctx), for every row of a launch through the partials and the merge kernel. */
static size_t attn_partial_floats(int n_rows, int n_heads, int head_dim, int max_ctx) {
    const size_t chunks = ((size_t)max_ctx + ATTN_CHUNK - 1) / ATTN_CHUNK;
    return (size_t)n_rows * n_heads * chunks * ((size_t)head_dim + 2);
}

/* The most rows a launch can have and still take the partials (the split kernel), on a device of
 * n_sm multiprocessors: tensor-core shapes whose fused kernel exists (head_dim <= 128) split only
 * while the (KV head, window) CTAs are fewer than 3/4 of a wave of per_sm <= 2 a multiprocessor,
 * i.e. windows < W = ceil(3 n_sm / (2 n_kv_heads)), and a window holds at most TC_WIN rows. Other
 * shapes (the CUDA-core fallback, head_dim > 128: one split, then the merge kernel) take them at
 * any size. */
static int attn_split_rows_max(int n_kv_heads, int head_dim, int n_sm) {
    if (head_dim % 16 != 0 || head_dim > 128) return INT_MAX;
    const int W = (3 * n_sm + 2 * n_kv_heads - 1) / (2 * n_kv_heads);
    return TC_WIN * (W - 1 > 0 ? W - 1 : 0);
}

/* Sized for the launches that write partials, not for every row up to n_rows: at qwen3-8b's
 * shape (8 KV heads, 132 multiprocessors) at most 192 rows, so a forward of 512 rows at a
 * 40960-token max_len holds 0.96 GiB of partials instead of 2.5 (the KV pool can take the rest;
 * session 31). */
size_t flint_cuda_attn_scratch_floats(int n_rows, int n_heads, int n_kv_heads, int head_dim, int max_ctx) {
    FLINT_ASSERT(n_rows >= 0 && n_heads > 0 && n_kv_heads > 0 && head_dim > 0 && max_ctx > 0);
    int n_sm = 1;
    attn_device(&n_sm);
    const int rows_max = attn_split_rows_max(n_kv_heads, head_dim, n_sm);
    return attn_partial_floats(n_rows < rows_max ? n_rows : rows_max, n_heads, head_dim, max_ctx);
}

/* Multiprocessors of the current device, and the dynamic shared memory attn_tc_kernel may use
 * there (raised on demand); cached per device (a benign race: every writer writes the same). */
static int attn_device(int *n_sm) {
    static int sm_count[ATTN_MAX_DEVICES];
    int dev = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    FLINT_ASSERT(dev >= 0 && dev < ATTN_MAX_DEVICES);
    if (!sm_count[dev]) {
        int v = 0;
        CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev));
        sm_count[dev] = v > 0 ? v : 1;
    }
    *n_sm = sm_count[dev];
    return dev;
}

/* Once per device: allow up to TC_SMEM_LIMIT of dynamic shared memory, and ask for the largest
 * shared-memory carveout so that two CTAs of ~109 KB (head_dim 128) fit on a multiprocessor.
 * Returns how many CTAs with `smem` bytes of dynamic shared memory fit on a multiprocessor (1 or
 * 2: the kernels' launch bounds allow two): the drafter block's K/V hi and lo planes (~157 KB at
 * head_dim 128) leave room for one, and the split heuristics below must not plan on two. */
static int attn_tc_allow_smem(int dev, size_t smem) {
    static int done[ATTN_MAX_DEVICES], sm_bytes[ATTN_MAX_DEVICES], static_bytes[ATTN_MAX_DEVICES];
    if (!done[dev]) {
        const void *k[] = {(const void *)attn_tc_kernel,          (const void *)attn_tc_fused_kernel,
                           (const void *)attn_tc_kernel_d128,     (const void *)attn_tc_fused_kernel_d128,
                           (const void *)attn_tc_blk_kernel_d128, (const void *)attn_tc_blk_fused_kernel_d128,
                           (const void *)attn_tc_fused_pf_kernel_d128};
        int st = 0, v = 0;
        for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
            cudaFuncAttributes fa;
            CUDA_CHECK(cudaFuncSetAttribute(k[i], cudaFuncAttributeMaxDynamicSharedMemorySize, TC_SMEM_LIMIT));
            CUDA_CHECK(cudaFuncSetAttribute(k[i], cudaFuncAttributePreferredSharedMemoryCarveout,
                                            cudaSharedmemCarveoutMaxShared));
            CUDA_CHECK(cudaFuncGetAttributes(&fa, k[i]));
            if ((int)fa.sharedSizeBytes > st) st = (int)fa.sharedSizeBytes;
        }
        CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev));
        sm_bytes[dev] = v;
        static_bytes[dev] = st;
        done[dev] = 1;
    }
    const long per_cta = (long)smem + static_bytes[dev] + 1024; /* 1 KB a CTA: the runtime's */
    return per_cta * 2 <= sm_bytes[dev] ? 2 : 1;
}

void flint_cuda_attention(const flint_cuda_attn *a, flint_cuda_stream s) {
    FLINT_ASSERT(a->n_rows >= 0 && a->n_rows <= 65535);
    FLINT_ASSERT(a->n_kv_heads > 0 && a->n_heads % a->n_kv_heads == 0 && a->n_heads / a->n_kv_heads <= ATTN_G);
    FLINT_ASSERT(a->n_kv_heads <= 65535 && a->n_heads <= 65535);
    FLINT_ASSERT(a->head_dim > 0 && a->head_dim % 2 == 0 && a->head_dim <= FLINT_CUDA_ATTN_MAX_HEAD_DIM);
    FLINT_ASSERT(a->block_size > 0 && a->bt_stride > 0 && a->max_ctx > 0 && a->blk_rows >= 0);
    FLINT_ASSERT(a->ldq >= a->n_heads * a->head_dim && (a->out_xp || a->ldo >= a->n_heads * a->head_dim));
    FLINT_ASSERT(!a->out_xp || (a->out_mp >= a->n_rows && a->out_mp % 8 == 0 && (a->n_heads * a->head_dim) % 32 == 0));
    FLINT_ASSERT(a->q && (a->out || a->out_xp) && a->k_cache && a->v_cache && a->block_tables && a->row_seq && a->pos && a->scratch);
    if (a->head_dim % 8 == 0) /* K and V are read 16 bytes at a time */
        FLINT_ASSERT((uintptr_t)a->k_cache % 16 == 0 && (uintptr_t)a->v_cache % 16 == 0);
    if (a->blk_rows > 0)
        FLINT_ASSERT(a->n_rows % a->blk_rows == 0 && a->blk_k && a->blk_v && a->ld_blk >= a->n_kv_heads * a->head_dim);
    if (a->n_rows == 0) return;
    const int max_chunks = (a->max_ctx + ATTN_CHUNK - 1) / ATTN_CHUNK;
    const float scale = (float)(1.0 / sqrt((double)a->head_dim)); /* as the CPU forward */
    const int G = a->n_heads / a->n_kv_heads, blk = a->blk_rows > 0;
    /* The path depends on the shape and the mode only (never on n_rows), so a row takes the same
     * path alone or in any batch. */
    const int lo_rows = tc_lo_rows(a->blk_rows, a->head_dim);
    const int fast = a->head_dim % 16 == 0 && tc_smem_bytes(a->head_dim, lo_rows, TC_NQ) <= TC_SMEM_LIMIT;
    int fused = 0;
    if (fast) {
        tc_args x;
        x.max_chunks = max_chunks;
        x.scale = scale;
        x.r_max = TC_NQ / G;
        x.u = x.r_max / 2;
        const int group_rows = blk ? (a->blk_rows < x.r_max ? a->blk_rows : x.r_max)
                                   : (a->n_rows < 2 * x.u - 1 ? a->n_rows : 2 * x.u - 1);
        x.nq = (group_rows * G + 15) / 16 * 16;
        x.q_vec = (uintptr_t)a->q % 16 == 0 && a->ldq % 4 == 0;
        int n_sm = 1;
        const int dev = attn_device(&n_sm);
        /* Splits. With at least ~3/4 of a wave of CTAs without splitting (per_sm CTAs fit on a
         * multiprocessor: 2 at head_dim 128, 1 for the drafter block's planes), one split: each
         * CTA takes all chunks of its groups and merges them itself (fused, head_dim <= 128), no
         * partials. Otherwise about one wave in all (two waves measured slower in the step graph:
         * qwen3-8b batch 8 verify 8.07 -> 7.97 ms, decode 5.16 -> 5.10, session 24), never more
         * splits than chunks, evened out so that each split gets the same number of a max_ctx
         * row's chunks (32 chunks over 9 splits would leave some with 4, some with 3). The
         * arithmetic is the same either way. */
        /* Windows: a CTA takes the groups (a sequence's consecutive rows, cut as above) starting in
         * its window of rows; with one or two rows per sequence (decode) windows of 8 rows would
         * queue 8 sequences in one CTA, so the caller's rows_per_seq hint narrows them. Groups do
         * not depend on the windows: a row's arithmetic is the same whatever the hint. */
        x.win = TC_WIN;
        if (!blk && a->rows_per_seq > 0)
            while (x.win > 1 && x.win / 2 >= a->rows_per_seq) x.win /= 2;
        const int windows = (a->n_rows + x.win - 1) / x.win;
        x.lo_rows = lo_rows;
        size_t smem = tc_smem_bytes(a->head_dim, lo_rows, x.nq);
        const long per_sm = attn_tc_allow_smem(dev, smem); /* CTAs resident on a multiprocessor */
        const long per_split = (long)a->n_kv_heads * windows, target = per_sm * n_sm;
        long ns = (target + per_split - 1) / per_split;
        if (4 * per_split >= 3L * per_sm * n_sm) ns = 1;
        if (ns > max_chunks) ns = max_chunks;
        if (ns < 1) ns = 1;
        const long per_cta = (max_chunks + ns - 1) / ns;
        x.ns = (int)((max_chunks + per_cta - 1) / per_cta);
        fused = x.ns == 1 && a->head_dim <= 128;
        /* Too few CTAs still (verify at batch 1: 8 KV heads x 9 chunks on 132 multiprocessors,
         * two fit on each): the m tiles of a group (its rows x G query slots, 16 a tile) go to ms
         * CTAs, each loading the chunk's K/V (the second read hits L2) and computing its tiles.
         * (Doubling only while the CTAs fit one a multiprocessor gave the verify bench at batch 1,
         * q 8 4.70 -> 4.61 ms but the speculative step's verify 4.75 -> 4.81, and left the drafter's
         * blocks as they were: session 24 kept per_sm.)
         * The group's rows come from the rows-per-sequence hint (or the block); a CTA left without
         * a tile ends at once. The splits follow max_ctx, so a server's long max_len (40960: 32
         * splits) left ms at 1 for every context, though a 1024-position one holds 9 chunks: batch
         * 1, q 8 at context 1024 took 4.67 ms against 4.53 at a max_len of 1040 (session 31). So
         * ms may also double while a context of TC_MS_REF_CHUNKS chunks would fit one wave with
         * it, and each CTA halves it back for a group whose chunks (min(nch, ns) busy splits) times
         * ms pass x.budget (attn_tc_body): where ns <= TC_MS_REF_CHUNKS nothing changes. With the
         * shares innermost in the grid (the busy CTAs dispatched first), qwen3-8b b1 q 8 at context
         * 1024, max_len 40960: 4.647 -> 4.562 ms (4096: 4.666 -> 4.588; 2048: 4.595 -> 4.612; the
         * bench's own max_len unchanged), session 32. */
        x.ms = 1;
        x.budget = (int)(per_sm * n_sm / per_split);
        if (!fused) {
            const int rows = blk ? (a->blk_rows < x.r_max ? a->blk_rows : x.r_max) : a->rows_per_seq;
            const int tiles = (rows * G + 15) / 16;
            while (x.ms < tiles &&
                   (per_split * x.ns * x.ms * 2 <= per_sm * n_sm || TC_MS_REF_CHUNKS * x.ms * 2 <= x.budget))
                x.ms *= 2;
        }
        const int d128 = a->head_dim == 128; /* the same arithmetic, compiled for the shape */
        /* Fused causal launches at head_dim 128 with 16-position pages and a rows-per-sequence
         * hint (the verify and decode steps of batches 32-64, prefill: the forward caps the hint at
         * 8 rows): Q and P planes sized by the hint,
         * P in its own planes, and each chunk's K/V requested during the chunk before
         * (attn_tc_fused_pf_kernel_d128), where two CTAs still fit a multiprocessor. A group longer
         * than the hint takes passes over its chunks; the arithmetic is the same. */
        int pf = 0;
        if (fused && d128 && !blk && a->block_size % 16 == 0 && a->rows_per_seq > 0) {
            const int hr = a->rows_per_seq < 2 * x.u - 1 ? a->rows_per_seq : 2 * x.u - 1;
            const int nq = (hr * G + 15) / 16 * 16;
            const size_t smem_pf = tc_smem_pf_bytes(a->head_dim, nq);
            if (smem_pf <= TC_SMEM_LIMIT && attn_tc_allow_smem(dev, smem_pf) >= per_sm) {
                pf = 1;
                x.nq = nq;
                smem = smem_pf;
            }
        }
        if (pf)
            FLINT_LAUNCH(attn_tc_fused_pf_kernel_d128, dim3(a->n_kv_heads, windows, 1), TC_THREADS, smem, s, *a, x);
        else if (fused)
            FLINT_LAUNCH(!d128 ? attn_tc_fused_kernel : blk ? attn_tc_blk_fused_kernel_d128 : attn_tc_fused_kernel_d128,
                         dim3(a->n_kv_heads, windows, 1), TC_THREADS, smem, s, *a, x);
        else {
            /* flint_cuda_attn_scratch_floats sized the scratch for the rows that can come here */
            FLINT_ASSERT(a->n_rows <= attn_split_rows_max(a->n_kv_heads, a->head_dim, n_sm));
            FLINT_LAUNCH(!d128 ? attn_tc_kernel : blk ? attn_tc_blk_kernel_d128 : attn_tc_kernel_d128,
                         dim3(a->n_kv_heads, windows, (unsigned)(x.ns * x.ms)), TC_THREADS, smem, s, *a, x);
        }
    } else {
        FLINT_ASSERT(attn_split_rows_max(a->n_kv_heads, a->head_dim, 1) == INT_MAX); /* sized for every row */
        FLINT_LAUNCH(attn_chunk_kernel, dim3(max_chunks, a->n_kv_heads, a->n_rows), ATTN_THREADS, 0, s, *a, max_chunks,
                     scale);
    }
    CUDA_CHECK(cudaGetLastError());
    if (fused) return;
    FLINT_LAUNCH(attn_merge_kernel, dim3(a->n_heads, a->n_rows), ATTN_THREADS, 0, s, *a, max_chunks);
    CUDA_CHECK(cudaGetLastError());
}
