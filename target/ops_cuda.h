/* CUDA kernels of the target and drafter forward (sm_90), first version: plain, correct and
 * batch-invariant; each has a C reference in target/ops_cpu.h or in tests/kernels/test_cuda_ops.c.
 *
 * Data types on the device:
 * - weights, KV cache: bf16, stored as uint16_t (C has no bf16 type);
 * - residual stream and projection outputs: fp32. The embedding gather writes fp32 rows, every
 *   GEMM writes (or adds into) fp32, residual adds are fp32. Why fp32 and not bf16: the stream
 *   is summed over every layer (2 adds per layer), and fp32 keeps it as close to the fp32 CPU
 *   reference as the bf16 weights allow; the cost is small, since activations are a few MB at
 *   512 rows against 15 GB of weights read per step (qwen3-8b);
 * - GEMM inputs: bf16. Kernels whose output feeds a GEMM (RMSNorm, SwiGLU, attention) round
 *   their result to bf16 once, at the end, so the tensor-core GEMM of a later version can read
 *   them unchanged.
 *
 * Batch invariance: every output row is computed by the same sequence of floating-point
 * operations whatever the number of rows in the launch, the row's place in it, or the grid: no
 * reduction is split by batch size. The GEMM's order depends on K only; attention splits a row's
 * context into fixed chunks of FLINT_CUDA_ATTN_CHUNK positions, so its order depends on the row's
 * context length only.
 *
 * Launchers take an explicit stream, never allocate or synchronise, check their shape
 * preconditions with FLINT_ASSERT and check the launch; a CUDA error aborts with file and line
 * (an infrastructure fault, DESIGN.md two-tier errors). All pointers are device pointers unless
 * said otherwise. Block tables are flattened on the device: [n_seqs][bt_stride]. */
#ifndef FLINT_TARGET_OPS_CUDA_H
#define FLINT_TARGET_OPS_CUDA_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* cudaStream_t without including CUDA headers in C code (it is `struct CUstream_st *`). */
typedef struct CUstream_st *flint_cuda_stream;

/* bf16 <-> fp32 on the host: round to nearest even, NaN stays NaN (quiet). The device kernels
 * round with the same rule, so a value rounded on either side has the same bits. */
static inline float flint_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
static inline uint16_t flint_bf16_from_f32(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* Load time: fp32 host values (exact copies of bf16 checkpoints; rounded once otherwise) to bf16
 * device memory, through the caller's host staging buffer of stage_n elements. A failed copy
 * returns -1 with a message (not an abort: a load can fail for reasons outside flint). */
int flint_cuda_upload_bf16(uint16_t *dst, const float *src, size_t n, uint16_t *stage, size_t stage_n,
                           flint_err *err);

/* The same for a GEMM weight [N][K]: packed (flint_cuda_gemm_pack_rows_host) on the way; dst holds
 * flint_cuda_gemm_packed_elems(N, K) elements; stage_n must hold one tile row (32 ceil(K / 32) x 16). */
int flint_cuda_upload_packed(uint16_t *dst, const float *src, int N, int K, uint16_t *stage, size_t stage_n,
                             flint_err *err);
/* A gate-up weight [2 I][K] (gate rows, then up rows; I % 8 == 0) packed for
 * flint_cuda_gemm_tc_glu: its rows interleaved (flint_cuda_gemm_glu_row). */
int flint_cuda_upload_packed_glu(uint16_t *dst, const float *src, int I, int K, uint16_t *stage, size_t stage_n,
                                 flint_err *err);

/* out[r][0..hidden) = embed[tokens[r]][0..hidden), bf16 -> fp32 (exact), the embedding PACKED
 * like a GEMM weight [vocab][hidden] (flint_cuda_gemm_pack). out is [n_rows][hidden].
 * Token ids are trusted (checked on the host before the step). */
void flint_cuda_embed(float *out, const uint16_t *embed, const int32_t *tokens, int n_rows, int hidden,
                      flint_cuda_stream s);

/* out[i] = bf16(x[row] * 1/sqrt(mean(x[row]^2) + eps) * w), row = rows ? rows[i] : i, for
 * i < n_rows; x fp32 [.][ldx], out bf16 [n_rows][ldo], w bf16 [n]. rows lets the final norm
 * pick only the rows whose logits are wanted. */
void flint_cuda_rmsnorm(uint16_t *out, int ldo, const float *x, int ldx, const int32_t *rows, const uint16_t *w,
                        int n_rows, int n, float eps, flint_cuda_stream s);
/* The same, and the rows it reads copied as they are to copy [n_rows][ldc] (fp32, row i of the
 * output's order): the target's taps of the layer before, without a launch of their own. */
void flint_cuda_rmsnorm_copy(uint16_t *out, int ldo, const float *x, int ldx, const int32_t *rows, const uint16_t *w,
                             int n_rows, int n, float eps, float *copy, int ldc, flint_cuda_stream s);
/* flint_cuda_rmsnorm_copy with the output written into a GEMM's scratch instead (xp, Mp from
 * flint_cuda_gemm_xp for that GEMM; n % 32 == 0, x and copy 16-byte aligned rows): the same bf16
 * values, in the layout the warpgroup GEMM reads. */
void flint_cuda_rmsnorm_xp(unsigned char *xp, int Mp, const float *x, int ldx, const int32_t *rows, const uint16_t *w,
                           int n_rows, int n, float eps, float *copy, int ldc, flint_cuda_stream s);

/* In place on fp32 rows x [n_rows][ldx]: heads 0..n_a-1 (at h * head_dim) are RMS-normed with
 * w_a, heads n_a..n_a+n_b-1 with w_b (per head, Qwen3 q_norm / k_norm; a NULL weight means no
 * norm, as for Llama), then every head gets NeoX RoPE (pairs i, i + head_dim / 2) at position
 * pos[r], from fp32 tables [n_pos][head_dim / 2] made by flint_ops_rope_table. For the target's
 * q|k|v rows: n_a = n_heads with q_norm, n_b = n_kv_heads with k_norm. */
void flint_cuda_qk_norm_rope(float *x, int ldx, int n_rows, int n_a, const uint16_t *w_a, int n_b,
                             const uint16_t *w_b, int head_dim, float eps, const float *rope_cos,
                             const float *rope_sin, const int32_t *pos, flint_cuda_stream s);

/* Where flint_cuda_qk_norm_rope_store puts each row's K and V: the K heads are heads k_head0 ..
 * k_head0 + n_kv_heads - 1 of x (after their norm and RoPE), the V heads start at column v_col of
 * x; the cache layout and slots as flint_cuda_kv_store's. */
typedef struct flint_cuda_kv_dst {
    uint16_t *k_cache, *v_cache; /* one layer's pools */
    int k_head0, v_col, n_kv_heads;
    const int32_t *row_seq, *block_tables;
    int bt_stride, block_size;
} flint_cuda_kv_dst;
/* flint_cuda_qk_norm_rope, then the rows' K and V into the cache (flint_cuda_kv_store's bits), in
 * one launch. */
void flint_cuda_qk_norm_rope_store(float *x, int ldx, int n_rows, int n_a, const uint16_t *w_a, int n_b,
                                   const uint16_t *w_b, int head_dim, float eps, const float *rope_cos,
                                   const float *rope_sin, const int32_t *pos, const flint_cuda_kv_dst *kv,
                                   flint_cuda_stream s);

/* K/V of each row into the paged cache at its position: k rows at k + r * ld, v rows at v + r * ld
 * (fp32, n_kv_heads x head_dim each), written as bf16 to one layer's pools
 * [n_blocks][block_size][n_kv_heads][head_dim], slot block_tables[row_seq[r]][pos / block_size],
 * pos % block_size (the CPU layout of target/forward_cpu.c). The forward and the drafter now
 * store through flint_cuda_qk_norm_rope_store; this separate op stays as that kernel's reference
 * in test_cuda_ops (its bits are checked against it). */
void flint_cuda_kv_store(uint16_t *k_cache, uint16_t *v_cache, const float *k, const float *v, int ld,
                         const int32_t *pos, const int32_t *row_seq, const int32_t *block_tables, int bt_stride,
                         int n_rows, int n_kv_heads, int head_dim, int block_size, flint_cuda_stream s);

/* out[r][i] = bf16(silu(gu[r][i]) * gu[r][n + i]) for i < n: gu fp32 [n_rows][ldg] holds gate
 * then up (the fused gate|up projection), out bf16 [n_rows][ldo]. */
void flint_cuda_swiglu(uint16_t *out, int ldo, const float *gu, int ldg, int n_rows, int n, flint_cuda_stream s);

/* y[i] += x[i], fp32, i < n. */
void flint_cuda_add(float *y, const float *x, size_t n, flint_cuda_stream s);
/* dst[r][0..n) = src[r][0..n) for n_rows rows, ldd / lds floats apart: a kernel, not a 2D
 * memcpy (a copy-engine node in a captured forward cost ~10-30 us per tap layer, H200). */
void flint_cuda_copy_rows(float *dst, int ldd, const float *src, int lds, int n_rows, int n, flint_cuda_stream s);

/* y[m][n] (+)= sum_k x[m][k] * w[n][k]: x bf16 [M][ldx], w bf16 [N][K] (row-major, a linear
 * layer's weight as stored), y fp32 [M][ldy]; fp32 accumulation; accumulate adds the product to
 * y (a fused residual add) instead of storing it. The reduction order of an output depends on K
 * only: lane l of warp w of a 4-warp block sums, with fma in index order, the 8-element chunks
 * c = 4 * 32 * i + 32 * w + l (i = 0, 1, ...); the 32 lanes are then summed by an xor butterfly
 * and the 4 warps as (w0 + w1) + (w2 + w3). First version on CUDA cores. */
void flint_cuda_gemm(float *y, int ldy, const uint16_t *x, int ldx, const uint16_t *w, int M, int N, int K,
                     int accumulate, flint_cuda_stream s);

/* The same product on the tensor cores (mma.sync m16n8k16, bf16 in, fp32 accumulate), with W
 * PACKED (flint_cuda_gemm_pack, below; 16-byte aligned), x and y as above (any K; K % 8 == 0
 * with 16-byte aligned x and ldx % 8 == 0 takes the vector loads). Also batch-invariant, with its own order, fixed by K alone: the k32 blocks
 * are cut into 4 contiguous quarters, warp w of 4 takes quarter w in increasing order, two MMAs
 * of 16 k each (k permuted inside an MMA, ops_cuda.cu says how) into one fp32 accumulator; the 4
 * warps are added as (w0 + w1) + (w2 + w3). Its results differ from flint_cuda_gemm's in the last
 * bits (another order, and the tensor cores' own rounding inside each MMA). */
void flint_cuda_gemm_tc(float *y, int ldy, const uint16_t *x, int ldx, const uint16_t *w, int M, int N, int K,
                        int accumulate, flint_cuda_stream s);

/* The MLP's gate-up GEMM and SwiGLU in one launch: out[m][i] = bf16(silu(gate) * up) (the
 * swiglu kernel's bits) for i < I, where gate and up are flint_cuda_gemm_tc's outputs i and I + i
 * of x W^T, W the [2 I][K] gate-up matrix packed with interleaved rows (I % 8 == 0; packed row
 * p holds row flint_cuda_gemm_glu_row(p, I)); no fp32 [M][2 I] is written. */
void flint_cuda_gemm_tc_glu(uint16_t *out, int ldo, const uint16_t *x, int ldx, const uint16_t *w, int M, int I, int K,
                            flint_cuda_stream s);

/* flint_cuda_gemm_tc over n_split (4, 2 or 1) contiguous parts of K instead of 4: the partial a
 * tensor-parallel rank holding K / (4 / n_split) of the unsharded K contributes, computed in the
 * unsharded kernel's order (the parts are its quarters); n_split 4 is flint_cuda_gemm_tc. */
void flint_cuda_gemm_tc_split(float *y, int ldy, const uint16_t *x, int ldx, const uint16_t *w, int M, int N, int K,
                              int accumulate, int n_split, flint_cuda_stream s);

/* x[i] += the ordered sum of parts[r * n + i], r < n_parts: p0, p0 + p1, (p0 + p1) + (p2 + p3),
 * ((p0 + p1) + (p2 + p3)) + ((p4 + p5) + (p6 + p7)) for 1, 2, 4, 8 parts (the combine of
 * tensor-parallel partial sums that reproduces the unsharded GEMM's association), rank order for
 * other counts. */
void flint_cuda_add_parts(float *x, const float *parts, size_t n, int n_parts, flint_cuda_stream s);

/* Once per process before capturing graphs: the GEMM kernels' shared-memory limits (otherwise set
 * lazily on first launch). */
void flint_cuda_gemm_init(void);
/* Launch tuning for the whole process: pdl 1 (the default) launches the register-path GEMMs
 * (M <= 32, and 65..128 rows of narrow layers) with programmatic dependent launch: each starts
 * during the kernel before, streaming its first weights, and waits for it before reading
 * activations; 0 plain launches. wgmma 1 (the default, where the build has sm_90a) runs M > 32
 * (and, from 17 rows, layers wider than 8192 or with K >= 8192) on the warpgroup paths (wgmma), 0
 * on the mma.sync register path and block tiles. early 1 (the default) lets a
 * register-path GEMM of <= 8 MB of weights start the kernel after it as soon as its own wait has
 * returned (gemm_cuda.cu, gemm_early); 0 only when it ends.
 * Negative keeps a setting. None changes a bit of any result: for the lab and A/B benchmarks. */
void flint_cuda_gemm_configure(int pdl, int wgmma, int early);
/* The other kernels of the forwards (norms, RoPE, attention, SwiGLU, the drafter's): 1 (the
 * default) launches them with programmatic dependent launch too: each may be scheduled while the
 * kernel before it runs and waits for it (griddepcontrol.wait) before touching memory, so the gap
 * between two dependent kernels shrinks to the wait; 0 plain launches. Negative keeps the
 * setting. Same bits either way. */
void flint_cuda_kernel_pdl_configure(int on);
int flint_cuda_kernel_pdl(void);
/* The wgmma path's scratch (x rearranged for the tensor cores; gemm_cuda.cu): bytes for GEMMs of
 * up to max_rows rows and max_k inputs, and its binding to a stream (one per stream, made at open
 * and removed at close, outside any step or capture). A GEMM on a stream without a large enough
 * binding takes the block tiles, which give the same bits. */
size_t flint_cuda_gemm_scratch_bytes(int max_rows, int max_k);
void flint_cuda_gemm_scratch_bind(flint_cuda_stream s, void *p, size_t bytes);
void flint_cuda_gemm_scratch_unbind(flint_cuda_stream s);
/* Where flint_cuda_gemm_tc (or _glu, N = 2 I) of M x N x K on stream s reads x from that scratch,
 * the scratch and its padded row count (*Mp); NULL where the GEMM reads x itself (or K % 32 != 0).
 * A kernel may then write x's rows there in the scratch's layout (flint_cuda_rmsnorm_xp) and the
 * GEMM be called with x = NULL (ldx = K): one launch and one pass over the rows fewer, same bits. */
unsigned char *flint_cuda_gemm_xp(int M, int N, int K, flint_cuda_stream s, int *Mp);
/* The MLP's two GEMMs with the SwiGLU output between them in that layout (no pass to permute it):
 * flint_cuda_gemm_tc_glu whose output goes to out_xp (flint_cuda_gemm_scratch_bytes(M, I) bytes,
 * out_mp = M rounded up to 128; not the stream's scratch, which the gate-up GEMM reads), and
 * flint_cuda_gemm_tc reading x from xp (Mp rows). Each returns 0 with nothing launched where its
 * GEMM does not take a path that can (the gate-up: tss; the other: a warpgroup path, which
 * flint_cuda_gemm_xp(M, N, K) != NULL tells beforehand). Same bits as the row-layout calls. */
int flint_cuda_gemm_tc_glu_xp(unsigned char *out_xp, int out_mp, const uint16_t *x, int ldx, const uint16_t *w, int M,
                              int I, int K, flint_cuda_stream s);
int flint_cuda_gemm_tc_xp(float *y, int ldy, const unsigned char *xp, int Mp, const uint16_t *w, int M, int N, int K,
                          int accumulate, flint_cuda_stream s);

/* ==== Packed weights: what every flint_cuda_gemm_tc* reads as W ====
 * W [N][K] bf16 is stored as ceil(N / 16) x ceil(K / 32) tiles of 512 elements in the order the
 * GEMM's warps load them (gemm_cuda.cu); padding is zero. _elems: the packed size. _offset: where
 * rows rows.. (a multiple of 16) start, for a GEMM over a row range of a packed matrix. _pack: a
 * row-major device matrix into packed form (device memory, stream s). _pack_rows_host: tile row
 * tile_row (rows 16 tile_row .. + 15) of an fp32 host matrix, rounded to bf16, into dst
 * (ceil(K / 32) x 512 elements), for uploads. */
size_t flint_cuda_gemm_packed_elems(int N, int K);
size_t flint_cuda_gemm_packed_offset(int rows, int K);
void flint_cuda_gemm_pack(uint16_t *p, const uint16_t *w, int N, int K, flint_cuda_stream s);
void flint_cuda_gemm_pack_rows_host(uint16_t *dst, const float *w, int tile_row, int N, int K);
/* The gate-up interleave: packed row p of a [2 I][K] gate-up matrix holds its row
 * (p % 16 < 8 ? 0 : I) + 8 (p / 16) + p % 8, i.e. tile row r is gate rows 8 r .. 8 r + 7 then the
 * matching up rows; _glu packs tile row tile_row of it so (N = 2 I). */
int flint_cuda_gemm_glu_row(int p, int I);
void flint_cuda_gemm_pack_rows_host_glu(uint16_t *dst, const float *w, int tile_row, int I, int K);

/* Lab hooks: the tensor-core GEMM's tilings (rows per warp, outputs per block, prefetch depth),
 * every one with flint_cuda_gemm_tc's order, so all give bit-identical results; the lab times
 * them and the test checks that they agree. _variant launches variant v (when y is not NULL and
 * M > 0) and returns its name; accumulate 2 is flint_cuda_gemm_tc_glu's epilogue (y then the bf16
 * output, ldy its stride, N = 2 I). */
int flint_cuda_gemm_tc_variants(void);
const char *flint_cuda_gemm_tc_variant_split(float *y, int ldy, const uint16_t *x, int ldx, const uint16_t *w, int M,
                                             int N, int K, int accumulate, int n_split, int variant,
                                             flint_cuda_stream s);
const char *flint_cuda_gemm_tc_variant(float *y, int ldy, const uint16_t *x, int ldx, const uint16_t *w, int M, int N,
                                       int K, int accumulate, int variant, flint_cuda_stream s);

/* ==== Attention over the paged KV cache ====
 * Row r (query head h, KV head h / (n_heads / n_kv_heads)) sees:
 * - causal mode (blk_rows = 0: target prefill, decode and verify): cache positions 0..pos[r] of
 *   sequence row_seq[r]; the row's own K/V must already be in the cache (flint_cuda_kv_store);
 * - drafter block mode (blk_rows = B > 0): rows come in blocks of B consecutive rows (r / B) at
 *   consecutive positions; a block whose first row is at position P sees cache positions
 *   0..P-1, then the K/V of all B rows of its block (non-causal), read from blk_k / blk_v (fp32
 *   rows, [n_rows][ld_blk], KV head at kvh * head_dim) instead of the cache.
 * out = softmax(q . k / sqrt(head_dim)) . v, bf16. A row's positions are cut into chunks of
 * FLINT_CUDA_ATTN_CHUNK from position 0; each (row, head, chunk) gets an unnormalised partial
 * (max, sum, weighted V) in scratch, then a second kernel merges the chunks in order, so a row's
 * order of operations depends on its own context length only (batch-invariant; attn_cuda.cu
 * lists every reduction). head_dim % 16 == 0 runs on the tensor cores: rows of one sequence at
 * consecutive positions (verify blocks, prefill runs, drafter blocks; found on the device from
 * row_seq and pos) share one CTA per (group, KV head, chunk) and each K/V tile is read once; fp32
 * q and softmax weights enter the bf16 MMAs as hi + lo halves, so results stay within fp32
 * rounding of the reference. Other head_dims take a CUDA-core path. The grid is sized from
 * n_rows and max_ctx only (graph-friendly); chunks past a row's context are skipped. */
#define FLINT_CUDA_ATTN_CHUNK 128
#define FLINT_CUDA_ATTN_MAX_GROUP 8     /* query heads per KV head */
#define FLINT_CUDA_ATTN_MAX_HEAD_DIM 256

typedef struct flint_cuda_attn {
    const float *q;                    /* [n_rows][ldq] fp32, head h at h * head_dim (after norm + RoPE) */
    int ldq;
    uint16_t *out;                     /* [n_rows][ldo] bf16, head h at h * head_dim */
    int ldo;
    const uint16_t *k_cache, *v_cache; /* one layer: [n_blocks][block_size][n_kv_heads][head_dim] bf16,
                                          16-byte aligned */
    const int32_t *block_tables;       /* [n_seqs][bt_stride] */
    int bt_stride;
    const int32_t *row_seq, *pos;      /* [n_rows] */
    int n_rows, n_heads, n_kv_heads, head_dim, block_size;
    int max_ctx;                       /* >= every row's position count (pos + 1, or P + B) */
    int blk_rows;                      /* 0: causal; B: drafter blocks of B rows */
    const float *blk_k, *blk_v;        /* block mode: [n_rows][ld_blk] fp32 */
    int ld_blk;
    float *scratch;                    /* flint_cuda_attn_scratch_floats(...) floats, for at least
                                          n_rows rows and max_ctx */
    int rows_per_seq;                  /* speed hint, causal mode: about how many consecutive rows each
                                          sequence has in this launch (1 for decode, K + 1 for a
                                          verify; 0: unknown). Results do not depend on it */
    unsigned char *out_xp;             /* non-NULL: the output goes here instead of out, in the GEMM
                                          scratch's layout (flint_cuda_gemm_xp for the GEMM that reads
                                          it, K = n_heads * head_dim, its Mp in out_mp): same values */
    int out_mp;
} flint_cuda_attn;

/* The scratch for launches of up to n_rows rows and max_ctx positions on the current device: only
 * launches with few CTAs go through the partials (the rest merge in registers), so at tensor-core
 * shapes it covers min(n_rows, a bound set by n_kv_heads and the multiprocessors) rows. */
size_t flint_cuda_attn_scratch_floats(int n_rows, int n_heads, int n_kv_heads, int head_dim, int max_ctx);
void flint_cuda_attention(const flint_cuda_attn *a, flint_cuda_stream s);

#ifdef __cplusplus
}
#endif
#endif
