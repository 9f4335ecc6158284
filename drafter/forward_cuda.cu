/* The DSpark drafter on a CUDA device (issue #7): the context encoder, the block backbone, the
 * Markov loop with the confidence head and draft sampling, behind flint_drafter_encode /
 * flint_drafter_draft (forward_cpu.c validates every batch, then calls here for a CUDA drafter).
 * It exists so that drafting does not bring the target's work back to the CPU: the CPU drafter
 * of forward_cpu.c stays the fp32 reference these results are tested against
 * (tests/test_drafter_cuda.c).
 *
 * Memory: one cudaMalloc made at open and carved into bf16 weights (q|k|v and gate|up fused per
 * layer and every GEMM weight packed, as the target's: target/ops_cuda.h), the bf16 context K/V pool (the CPU's block layout, sized like the
 * CPU drafter's: the target's block ids, plus one sink block for padded rows, below), fp32 RoPE
 * tables, and scratch for max_rows encode rows and max_reqs x block_size draft rows. The
 * embedding and LM head are the target's device tensors unless the checkpoint has its own. Drafts
 * run on the target's stream, encodes on a low-priority stream of their own (es) ordered after
 * the target's queued work by events: the target's stream waits only for the taps' gather, a
 * draft for the encode, so an encode overlaps the next forward of a step that drafts nothing.
 * Per call the small arrays (tokens, positions, block tables,
 * per-request sampling parameters) travel in one copy from a pinned staging block (an event
 * keeps the next call from rewriting it before that copy has left). Encode takes the target's
 * taps where its forward left them (taps_device + src_rows: a gather kernel picks the committed
 * rows) and returns without waiting, or host taps; draft returns tokens and confidences to the
 * host (one synchronisation), or leaves them on the device (tokens_on_device), and leaves q on
 * the device for the GPU acceptance.
 *
 * Draft, per call: one backbone forward over the n_reqs x B block rows ([anchor, MASK..], the
 * non-causal block attention of ops_cuda.h over the cached context before the anchor), final
 * norm, base logits U = LM head (fp32, [row][draft_vocab]). Then the Markov loop, one step per
 * draft slot k for all requests at once: a kernel evaluates the confidence head on [hfin ; e_i],
 * e_i = W1[prev_i] (prev = anchor, then the token drawn at k - 1); the bias W2 e_i is added in
 * place into U's slot-k rows by markov_bias_kernel (U + W2 e, the CPU's order of the two
 * terms), so those rows become the corrected logits L_k; a reduced vocabulary
 * is scattered into target ids (-inf elsewhere); flint_cuda_draft_sample draws x_k (argmax when
 * greedy: with a full vocabulary from the bias kernel's per-32-entry candidates, which give the
 * same argmax, flint_cuda_draft_sample_cand) and writes q_k. Every kernel is batch-invariant, so a
 * request's drafts, logits and confidences do not depend on the other requests of the call.
 *
 * Numerics (tolerances measured in tests/test_drafter_cuda.c): weights and context K/V bf16
 * (checkpoints are bf16, so only the shared LM head of an fp32 target and the cache are rounded);
 * residual stream, projections, block K/V, logits and the Markov bias fp32; GEMM inputs (taps,
 * norm outputs, attention output, SwiGLU, hfin) rounded to bf16 once. The confidence head reads
 * the bf16 hfin and keeps its weights fp32. Against the fp32 CPU drafter the logits differ by
 * the bf16 rounding of activations (bounded in the test by 5% of the row's logit scale + 0.05, as
 * the target's CUDA forward); the Markov bias itself only by fp32 summation order. A reduced
 * vocabulary's greedy ties go to the lowest target id (the CPU: the lowest draft id; the same
 * for the usual increasing d2t).
 *
 * Graphs (as the target's forward_graph): encode and draft replay captured CUDA graphs, one per
 * launch shape, so a call costs a few copies and one graph launch instead of ~20 (encode) or ~75
 * (draft) kernel launches. The shape: encode rows padded to a bucket (the taps' gather runs
 * before the graph);
 * draft requests padded to a bucket, the Markov step count, the attention bound rounded up to a
 * power of two and whether q is written. Kernels read the batch from the device mirror of the
 * pinned staging block (fixed addresses, uploaded before the launch, outside the graph). Padded
 * rows and requests use a sink: one context K/V block past the pool (id = the target's kv_blocks)
 * and a staged table of only that id, so an encode's padded rows write their K/V there, and a
 * padded request sits at position 0 (no context) with anchor 0, greedy. Every kernel is batch
 * invariant, so the real rows' results are the eager launches' bits. Calls that want logits or
 * base logits (tests) and enforce_eager run the same kernels eagerly, unpadded. */
#include <cuda_runtime.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/arena.h"
#include "core/clock.h"
#include "target/cuda_common.cuh"
#include "target/graph_pool.h"
#include "core/log.h"
#include "drafter/drafter_internal.h"
#include "sampler/sampler_cuda.h"
#include "target/ops_cpu.h"
#include "target/ops_cuda.h"

#define CUDA_OK(expr, what)                                                                          \
    do {                                                                                             \
        cudaError_t e_ = (expr);                                                                     \
        if (e_ != cudaSuccess)                                                                       \
            return flint_err_set(err, FLINT_ERR_IO, "drafter (CUDA): %s: %s", what, cudaGetErrorString(e_)); \
    } while (0)

/* A launch that fails is an infrastructure fault, as in target/ops_cuda.cu: abort with the place. */
static void launch_check(const char *what) {
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) {
        fprintf(stderr, "flint: CUDA error: %s: %s\n", what, cudaGetErrorString(e));
        fflush(stderr);
        abort();
    }
}

/* ==== The drafter's own kernels (C references in tests/test_drafter_cuda.c) ==== */

/* bf2f, f2bf: target/cuda_common.cuh (the same rounding as the host and the target's kernels) */

static __global__ void to_bf16_kernel(uint16_t *out, const float *in, size_t n) {
    pdl_trigger(); /* a GEMM after this kernel may start streaming its weights */
    pdl_wait();    /* FLINT_LAUNCH (target/cuda_common.cuh) */
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        out[i] = f2bf(in[i]);
}

#define GATHER_THREADS 256

/* Row r of out = bf16 of row src[r] of in (n floats a row): the committed rows of a verify,
 * gathered where the target's forward left their taps. Grid (row, slice of 4 * GATHER_THREADS
 * floats): a 5-tap row of a 4096-wide model is 20 blocks with one 16-byte load per thread, not
 * one block looping 80 times (33 us for 3 rows before). */
static __global__ void __launch_bounds__(GATHER_THREADS)
gather_bf16_kernel(uint16_t *out, const float *in, const int32_t *src, int n, int vec) {
    pdl_trigger(); /* a GEMM after this kernel may start streaming its weights */
    pdl_wait();    /* FLINT_LAUNCH (target/cuda_common.cuh) */
    const float *row = in + (size_t)(src ? src[blockIdx.x] : (int32_t)blockIdx.x) * n; /* NULL: rows in order */
    uint16_t *o = out + (size_t)blockIdx.x * n;
    const int i = 4 * (blockIdx.y * GATHER_THREADS + threadIdx.x);
    if (vec) { /* rows of whole float4s on aligned buffers */
        if (i >= n) return;
        const float4 v = *(const float4 *)(row + i);
        *(uint2 *)(o + i) = make_uint2((uint32_t)f2bf(v.x) | (uint32_t)f2bf(v.y) << 16,
                                       (uint32_t)f2bf(v.z) | (uint32_t)f2bf(v.w) << 16);
        return;
    }
    for (int k = i; k < i + 4 && k < n; k++) o[k] = f2bf(row[k]);
}

static void gather_bf16(uint16_t *out, const float *in, const int32_t *src, int n_rows, int n, cudaStream_t s) {
    const unsigned slices = (unsigned)((n + 4 * GATHER_THREADS - 1) / (4 * GATHER_THREADS));
    const int vec = n % 4 == 0 && (uintptr_t)in % 16 == 0 && (uintptr_t)out % 8 == 0;
    FLINT_LAUNCH(gather_bf16_kernel, dim3((unsigned)n_rows, slices), GATHER_THREADS, 0, s, out, in, src, n, vec);
    launch_check("gather_bf16");
}

void flint_drafter_cuda_to_bf16(uint16_t *out, const float *in, size_t n, void *s) {
    if (n == 0) return;
    size_t b = (n + 255) / 256;
    FLINT_LAUNCH(to_bf16_kernel, (unsigned)(b < 4096 ? b : 4096), 256, 0, (cudaStream_t)s, out, in, n);
    launch_check("to_bf16");
}

#define CONF_THREADS 256

/* Sum over the block in a fixed order: butterfly inside each warp, then the warps in order. */
static __device__ __forceinline__ float block_sum(float v, float *part) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
    __syncthreads();
    float t = 0.0f;
#pragma unroll
    for (int w = 0; w < CONF_THREADS / 32; w++) t = __fadd_rn(t, part[w]);
    __syncthreads(); /* part is reused by the next sum */
    return t;
}

/* The confidence head of one request by a block of CONF_THREADS: sigmoid((w.hfin + b) + w.e),
 * e = w1r (W1[prev]) when conf_markov; each thread sums a strided slice in order, then block_sum. */
static __device__ __forceinline__ void conf_one(float *out, const float *conf_w, float conf_b, int conf_markov,
                                                const uint16_t *h, int H, const uint16_t *w1r, int r, float *part) {
    float s1 = 0.0f, s2 = 0.0f;
    for (int j = threadIdx.x; j < H; j += CONF_THREADS) s1 = fmaf(conf_w[j], bf2f(h[j]), s1);
    if (conf_markov)
        for (int j = threadIdx.x; j < r; j += CONF_THREADS) s2 = fmaf(conf_w[H + j], bf2f(w1r[j]), s2);
    const float t1 = block_sum(s1, part), t2 = block_sum(s2, part);
    /* the CPU's order: (w.hfin + b) + w.e */
    if (threadIdx.x == 0) *out = 1.0f / (1.0f + expf(-__fadd_rn(__fadd_rn(t1, conf_b), t2)));
}

/* One block per request: the Markov gather e = W1[prev] for the bias GEMM that follows, and the
 * confidence head on [hfin ; e] (computable before x_k is drawn: it uses x_{k-1}). */
static __global__ void __launch_bounds__(CONF_THREADS)
markov_conf_kernel(uint16_t *e, int r, const uint16_t *w1, const int32_t *anchor, const int32_t *prev_tok, float *conf,
                   int ld_conf, int k, const float *conf_w, float conf_b, int conf_markov, const uint16_t *hfin,
                   size_t ld_hfin, int H) {
    pdl_trigger(); /* the Markov GEMM after this kernel may start streaming its weights */
    pdl_wait();
    __shared__ float part[CONF_THREADS / 32];
    const int i = blockIdx.x;
    const int32_t prev = prev_tok ? prev_tok[i] : anchor[i];
    const uint16_t *w1r = r > 0 ? w1 + (size_t)prev * r : NULL;
    if (e)
        for (int j = threadIdx.x; j < r; j += CONF_THREADS) e[(size_t)i * r + j] = w1r[j];
    if (!conf_w) return; /* the whole block */
    conf_one(conf + (size_t)i * ld_conf + k, conf_w, conf_b, conf_markov, hfin + (size_t)i * ld_hfin, H, w1r, r, part);
}

void flint_drafter_cuda_markov_conf(uint16_t *e, int r, const uint16_t *w1, const int32_t *anchor,
                                    const int32_t *prev_tok, float *conf, int ld_conf, int k, const float *conf_w,
                                    float conf_b, int conf_markov, const uint16_t *hfin, size_t ld_hfin, int H,
                                    int n_reqs, void *s) {
    FLINT_ASSERT(n_reqs >= 0 && r >= 0 && H > 0 && (r == 0 || w1) && (!conf_w || (conf && hfin)));
    FLINT_ASSERT(prev_tok || anchor);
    if (n_reqs == 0 || ((r == 0 || !e) && !conf_w)) return;
    FLINT_LAUNCH(markov_conf_kernel, n_reqs, CONF_THREADS, 0, (cudaStream_t)s, e, r, w1, anchor, prev_tok, conf,
                 ld_conf, k, conf_w, conf_b, conf_markov && r > 0, hfin, ld_hfin, H);
    launch_check("markov_conf");
}

#define BIAS_THREADS 256
#define BIAS_REQS 32      /* requests per block at most: their e = W1[prev] in shared memory (32 r floats) */
#define BIAS_STAGE_R 128  /* ranks up to this stage the block's W2 rows in shared memory */

/* The Markov bias added in place: L[i][v] = L[i][v] + sum_j e_i[j] W2[v][j], e_i = W1[prev_i]
 * (bf16, widened exactly), W2 row-major [Vd][r]. Thread v sums its row j = 0..r-1 in order with
 * fmaf for each request, then adds the sum to L (the CPU's order: U + W2 e). The tensor-core GEMM
 * did this before: K = r = 64 left it 9496 tiny tiles at 36 us per Markov step at batch 1; this
 * is one pass over W2's 19 MB. Batch-invariant: a (request, v) sum depends on r alone.
 * W2's rows: with 16-byte rows and r <= BIAS_STAGE_R the block's 256 rows come into shared memory
 * first, as 16-byte copies that follow one another across the threads (a warp reading its own
 * rows straight from global memory touched 32 lines an instruction: ~9000 L1 wavefronts a
 * multiprocessor a Markov step at qwen3-8b), issued before the PDL wait since W2 is a weight; the
 * row stride 2 r + 16 bytes keeps each quarter-warp's 16-byte reads on distinct banks. The values
 * and the order of the sums are the same either way. */
static __global__ void __launch_bounds__(BIAS_THREADS)
markov_bias_kernel(float *L, size_t ld, const uint16_t *w2, const uint16_t *w1, const int32_t *anchor,
                   const int32_t *prev_tok, int r, int Vd, int n_reqs, int reqs_per_block, int stage,
                   const flint_drafter_conf_args c, int32_t *cand) {
    pdl_trigger();
    extern __shared__ float e_s[]; /* [reqs_per_block][r], then (stage) the rows: [256][r + 8] bf16 */
    const int i0 = blockIdx.y * reqs_per_block, ni = min(reqs_per_block, n_reqs - i0);
    if (c.conf_w && (int)blockIdx.x >= (int)gridDim.x - reqs_per_block) { /* the extra columns: */
        __shared__ float part[CONF_THREADS / 32];                           /* a request's confidence */
        pdl_wait();
        const int i = i0 + (int)blockIdx.x - ((int)gridDim.x - reqs_per_block);
        if (i < i0 + ni) {
            const int32_t prev = prev_tok ? prev_tok[i] : anchor[i];
            conf_one(c.conf + (size_t)i * c.ld_conf + c.k, c.conf_w, c.conf_b, c.conf_markov,
                     c.hfin + (size_t)i * c.ld_hfin, c.H, w1 + (size_t)prev * r, r, part);
        }
        return;
    }
    const int v0 = blockIdx.x * BIAS_THREADS, rs = r + 8; /* staged row stride */
    int v = v0 + (int)threadIdx.x;
    uint16_t *w_s = (uint16_t *)(e_s + (size_t)reqs_per_block * r);
    if (stage) {
        const int per_row = r >> 3, n_rows = min(BIAS_THREADS, Vd - v0);
        for (int q = threadIdx.x; q < n_rows * per_row; q += BIAS_THREADS) {
            const int row = q / per_row, col = q - row * per_row;
            const uint32_t dst = (uint32_t)__cvta_generic_to_shared(w_s + (size_t)row * rs + col * 8);
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst),
                         "l"(w2 + (size_t)(v0 + row) * r + col * 8)
                         : "memory");
        }
        asm volatile("cp.async.commit_group;\n" ::: "memory");
    }
    pdl_wait(); /* prev_tok and L come from the kernels before */
    const int n_cand = (Vd + 31) / 32;
    for (int x = threadIdx.x; x < ni * r; x += BIAS_THREADS) {
        const int i = x / r, j = x - i * r;
        const int32_t prev = prev_tok ? prev_tok[i0 + i] : anchor[i0 + i];
        e_s[x] = bf2f(w1[(size_t)prev * r + j]);
    }
    if (stage) asm volatile("cp.async.wait_all;\n" ::: "memory");
    __syncthreads();
    /* whole warps past the vocabulary leave; the rest stay together for the candidates' shuffles */
    if (v - (int)(threadIdx.x & 31) >= Vd) return;
    const int live = v < Vd;
    if (!live) v = Vd - 1; /* a row that exists; its loads only, never its stores */
    const uint16_t *wr = w2 + (size_t)v * r, *wsr = w_s + (size_t)threadIdx.x * rs;
    const int vec = (r & 7) == 0 && ((uintptr_t)w2 & 15) == 0;
    for (int i = 0; i < ni; i++) {
        const float *e = e_s + i * r;
        float acc = 0.0f;
        if (stage) {
            for (int j = 0; j < r; j += 8) {
                float w[8];
                unpack8(w, *(const uint4 *)(wsr + j));
#pragma unroll
                for (int q = 0; q < 8; q++) acc = fmaf(e[j + q], w[q], acc);
            }
        } else if (vec) {
            for (int j = 0; j < r; j += 8) {
                float w[8];
                unpack8(w, __ldg((const uint4 *)(wr + j)));
#pragma unroll
                for (int q = 0; q < 8; q++) acc = fmaf(e[j + q], w[q], acc);
            }
        } else {
            for (int j = 0; j < r; j++) acc = fmaf(e[j], bf2f(wr[j]), acc);
        }
        float *o = L + (size_t)(i0 + i) * ld + v;
        const float y = __fadd_rn(*o, acc);
        if (live) *o = y;
        if (cand) { /* the warp's argmax of the stored values (flint_cuda_draft_sample_cand's rule) */
            float bv = -INFINITY;
            int bi = INT_MAX;
            if (live && y == y) bv = y, bi = v; /* NaN never wins */
#pragma unroll
            for (int off = 16; off > 0; off >>= 1) {
                const float ov = __shfl_xor_sync(0xffffffffu, bv, off);
                const int oi = __shfl_xor_sync(0xffffffffu, bi, off);
                if (ov > bv || (ov == bv && oi < bi)) bv = ov, bi = oi;
            }
            if ((threadIdx.x & 31) == 0) {
                int32_t *cp = cand + 2 * ((size_t)(i0 + i) * n_cand + v / 32);
                cp[0] = __float_as_int(bv), cp[1] = bi;
            }
        }
    }
}

void flint_drafter_cuda_markov_bias(float *L, size_t ld, const uint16_t *w2, const uint16_t *w1, const int32_t *anchor,
                                    const int32_t *prev_tok, int r, int Vd, int n_reqs,
                                    const flint_drafter_conf_args *conf, int32_t *cand, void *s) {
    FLINT_ASSERT(n_reqs >= 0 && r > 0 && r <= 384 && Vd > 0 && L && w2 && w1 && (prev_tok || anchor));
    FLINT_ASSERT(BIAS_THREADS == CONF_THREADS && (!conf || !conf->conf_w || (conf->conf && conf->hfin)));
    flint_drafter_conf_args c;
    memset(&c, 0, sizeof c);
    if (conf) c = *conf;
    if (n_reqs == 0) return;
    /* a thread sums its requests one after another (each a chain of r fmaf): as few per block as
     * keep ~2 blocks per multiprocessor busy, since W2 is read once per block row (the embedded
     * pair, 32 vocabulary blocks: batch 8 took 15.7 us with all 8 requests in one block row; a
     * 152k vocabulary at batch 64 keeps 32 a block). The sums are the same whatever the split. */
    const int n_vb = (Vd + BIAS_THREADS - 1) / BIAS_THREADS;
    int rpb = (int)(((long)n_reqs * n_vb) / 264);
    rpb = rpb < 1 ? 1 : rpb > BIAS_REQS ? BIAS_REQS : rpb;
    const int stage = (r & 7) == 0 && ((uintptr_t)w2 & 15) == 0 && r <= BIAS_STAGE_R;
    const size_t smem =
        sizeof(float) * rpb * (size_t)r + (stage ? sizeof(uint16_t) * BIAS_THREADS * (size_t)(r + 8) : 0);
    static int smem_set[64]; /* once a device: the most any launch asks (a benign race) */
    int dev = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    FLINT_ASSERT(dev >= 0 && dev < 64);
    if (!smem_set[dev]) {
        const size_t most = sizeof(float) * BIAS_REQS * 384 + sizeof(uint16_t) * BIAS_THREADS * (BIAS_STAGE_R + 8);
        CUDA_CHECK(cudaFuncSetAttribute((const void *)markov_bias_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        (int)most));
        smem_set[dev] = 1;
    }
    /* with the confidence head: rpb more block columns, one per request of the row, computing its
     * confidence (markov_conf_kernel's arithmetic) beside the bias: one launch fewer a Markov step */
    const dim3 grid((unsigned)(n_vb + (c.conf_w ? rpb : 0)), (unsigned)((n_reqs + rpb - 1) / rpb));
    FLINT_LAUNCH(markov_bias_kernel, grid, BIAS_THREADS, smem, (cudaStream_t)s, L, ld, w2, w1, anchor, prev_tok, r,
                 Vd, n_reqs, rpb, stage, c, cand);
    launch_check("markov_bias");
}

static __global__ void scatter_vocab_kernel(float *out, const float *in, size_t ld_in, const int32_t *t2d,
                                            int n_vocab) {
    pdl_trigger();
    pdl_wait();
    const int i = blockIdx.y;
    const float *src = in + (size_t)i * ld_in;
    float *dst = out + (size_t)i * n_vocab;
    for (int t = blockIdx.x * blockDim.x + threadIdx.x; t < n_vocab; t += gridDim.x * blockDim.x) {
        const int j = t2d[t];
        dst[t] = j >= 0 ? src[j] : -INFINITY;
    }
}

void flint_drafter_cuda_scatter_vocab(float *out, const float *in, size_t ld_in, const int32_t *t2d, int n_vocab,
                                      int n_rows, void *s) {
    FLINT_ASSERT(n_vocab > 0 && n_rows >= 0 && n_rows <= 65535);
    if (n_rows == 0) return;
    int bx = (n_vocab + 255) / 256;
    if (bx > 64) bx = 64;
    FLINT_LAUNCH(scatter_vocab_kernel, dim3(bx, n_rows), 256, 0, (cudaStream_t)s, out, in, ld_in, t2d, n_vocab);
    launch_check("scatter_vocab");
}

/* ==== Device state ==== */

typedef struct dlayer {
    uint16_t *attn_norm, *wqkv, *q_norm, *k_norm, *wo, *mlp_norm, *w_gate_up, *w_down;
} dlayer;

/* Offsets of the per-call small arrays inside one pinned host block and its device mirror; the
 * block tables come last so a call uploads only the prefix it uses. */
typedef struct par_layout {
    size_t tok, pos, row_seq;          /* draft rows [max_reqs * B] int32 */
    size_t anchor, greedy, temp, seed; /* [max_reqs] int32, int32, float, uint64 */
    size_t spos;                       /* [max_draft][n_reqs] int64: position of x_k */
    size_t e_pos, e_row_seq, e_src;    /* encode rows [max_rows] int32 */
    size_t tables;                     /* [max_tables + 1][bt_stride] int32: the call's tables, then
                                        * (at index max_tables, written once at open) the sink's */
    size_t bytes;
} par_layout;

/* A captured encode or draft: what its graph bakes in (unused fields 0; compared with memcmp, so
 * keys are memset first). */
typedef struct dgraph_key {
    int rows;          /* encode: padded rows; draft: padded requests */
    int n_steps;       /* draft: Markov steps (the most drafts a request of the call wants) */
    int ctx;           /* draft: the attention bound */
    int with_q;        /* draft: q written (out->q or q_on_device) */
} dgraph_key;

/* graphs per kind (start-up: up to 11 request buckets x 7 draft lengths); the least recently used
 * is evicted (target/graph_pool.h) */
#define DGRAPH_POOL 128

struct flint_drafter_cuda {
    void *base; /* the one device allocation */
    size_t bytes;
    cudaStream_t stream; /* the target's */
    int device;          /* the target's: selected at every entry (a thread may have another current) */
    dlayer *layers;      /* host array of device pointers */
    const uint16_t *embed, *lm_head; /* own copies or the target's */
    uint16_t *own_embed, *own_head;
    uint16_t *fc, *hidden_norm, *final_norm, *w1, *w2;
    float *conf_w; /* fp32 [H (+ r)], NULL without the head */
    float conf_b;
    int32_t *t2d;  /* [vocab] draft index of a target id, -1 outside a reduced vocabulary; NULL if full */
    uint16_t *k_cache, *v_cache; /* [n_layers][kv_stride] bf16 */
    size_t kv_stride;            /* one layer's pool: the target's kv_blocks blocks + the sink block */
    float *rope_cos, *rope_sin;  /* [max_len + B][head_dim / 2] */
    /* encode scratch, max_rows rows */
    float *taps, *ctx, *ckv;
    uint16_t *taps_b, *ctxn;
    /* draft scratch, max_reqs * B rows */
    float *x, *qkv, *gu, *u, *attn_scratch;
    int glu; /* gate-up packed interleaved and SwiGLU fused into its GEMM (I % 8 == 0) */
    unsigned char *enc_gemm_scratch; /* the encode stream's wgmma GEMM scratch (target/ops_cuda.h) */
    size_t enc_gemm_scratch_bytes;   /* (the block forward uses the target's, on its stream) */
    uint16_t *xn, *att, *act, *hfin;
    float *lt;     /* [max_reqs][vocab] corrected logits in target ids (reduced vocabulary) */
    int32_t *cand; /* [max_reqs][ceil(vocab / 32)][2] the Markov step's argmax candidates (full vocabulary) */
    float *q;      /* [max_reqs][max_draft][vocab] draft distributions */
    float *conf;   /* [max_reqs][max_draft] */
    int32_t *toks; /* [max_draft][n_reqs] drawn tokens, step-major (the sampler writes a step's rows) */
    int toks_stride; /* the last draft call's request count (padded): toks' row pitch */
    void *smp;     /* flint_cuda_draft_sample scratch */
    char *dpar;    /* device mirror of hpar */
    /* host */
    par_layout pl;
    char *hpar;                 /* pinned */
    const char *hpar_dev;       /* hpar as the device addresses it (mapped pinned memory) */
    cudaEvent_t staged;         /* the last upload of hpar has left it (encode returns without waiting) */
    int staged_live;            /* staged recorded and not yet waited for (staged_wait) */
    /* Encodes run on their own low-priority stream, es, beside the target's: a step that drafts
     * nothing (dynamic draft lengths) then overlaps the encode of the rows it committed with the
     * next forward instead of adding it to the step. queued: the target's stream at the call
     * (its taps and every earlier use of dpar); gathered: the taps read (the target's stream
     * waits for it before its next forward can overwrite them); encoded: the context K/V written
     * (a draft waits for it). */
    cudaStream_t es;
    cudaEvent_t queued, gathered, encoded;
    cudaEvent_t held_up;        /* the last upload of h_held_src has left it (target's stream) */
    cudaEvent_t fork, join;     /* a step's encode forked from the target's stream to es and back
                                 * (flint_drafter_enqueue_encode; captured as graph edges) */
    int es_queued;              /* an encode went to es since the target's stream last waited for it */
    int32_t *h_toks;            /* pinned [max_draft][max_reqs] */
    float *h_conf;              /* pinned [max_reqs][max_draft] */
    int32_t *h_seq_map;         /* [max_tables] caller sequence of each renumbered one, */
    int32_t *h_need;            /* its table entries staged so far, */
    int stage_prev, stage_k;    /* and the last one staged: the call's first stage_table resets them */
    /* the renumbered slot of each caller sequence id < slot_cap in this call: h_slot[sq] is valid
     * when h_slot_gen[sq] == stage_gen (a stamp per call, nothing cleared between calls; ids past
     * slot_cap are searched), as the target's stage_batch */
    int32_t *h_slot;
    uint32_t *h_slot_gen, stage_gen;
    int slot_cap;
    /* Held encode rows (flint_drafter_ctx_batch.defer): their taps gathered into taps_b[0, n_held)
     * on the target's stream, their K/V computed by the next flush (hold_encode, flush_held) */
    int n_held;
    int32_t *held_pos, *held_seq; /* host [max_rows] */
    int32_t *h_held_src;          /* pinned [max_rows]: the gathers' source rows, ... */
    int32_t *held_src;            /* ... and on the device */
    int qkv_dim, bt_stride, max_tables, R_max;
    /* captured graphs (encode, draft) and their cost */
    flint_graph_pool enc_graphs, draft_graphs;
};

#define HP(g, f, type) ((type *)((g)->hpar + (g)->pl.f))
/* the device's address of a pointer into the pinned block hpar (h_toks, h_conf, h_held_src ..) */
#define DEV_OF(g, p) ((void *)((g)->hpar_dev + ((const char *)(p) - (g)->hpar)))
#define DP(g, f, type) ((type *)((g)->dpar + (g)->pl.f))

/* Device pointers carved with the host's arena (core/arena.h only does pointer arithmetic): a
 * measuring pass over base NULL first, then the real one over the one cudaMalloc. */
#define DNEW(a, type, n) ((type *)flint_arena_alloc((a), sizeof(type) * (size_t)(n), 256))

static size_t bump(size_t *at, size_t bytes) {
    size_t off = (*at + 15) & ~(size_t)15;
    *at = off + bytes;
    return off;
}

static void layout_params(const flint_drafter *d, const struct flint_drafter_cuda *g, par_layout *p) {
    size_t at = 0, R = (size_t)g->R_max, Q = (size_t)d->opts.max_reqs, C = (size_t)d->opts.max_rows;
    p->tok = bump(&at, 4 * R);
    p->pos = bump(&at, 4 * R);
    p->row_seq = bump(&at, 4 * R);
    p->anchor = bump(&at, 4 * Q);
    p->greedy = bump(&at, 4 * Q);
    p->temp = bump(&at, 4 * Q);
    p->seed = bump(&at, 8 * Q);
    p->spos = bump(&at, 8 * Q * (size_t)d->cfg.max_draft);
    p->e_pos = bump(&at, 4 * C);
    p->e_row_seq = bump(&at, 4 * C);
    p->e_src = bump(&at, 4 * C);
    p->tables = bump(&at, 4 * ((size_t)g->max_tables + 1) * g->bt_stride);
    p->bytes = at;
}

/* Every device buffer from one allocation: a measuring pass (base NULL), then the real one. */
static void carve(const flint_drafter *d, struct flint_drafter_cuda *g, flint_arena *a, int own_embed, int own_head) {
    const flint_drafter_config *c = &d->cfg;
    size_t H = c->hidden_size, I = d->ni, V = c->vocab_size, Vd = c->draft_vocab_size, r = c->markov_rank;
    size_t hd = c->head_dim, B = c->block_size, K = c->max_draft, Q = d->opts.max_reqs, C = d->opts.max_rows;
    size_t R = (size_t)g->R_max, L = (size_t)d->max_len + B, nT = c->n_taps, kvd = d->kv_dim, qkv = g->qkv_dim;
    /* GEMM weights and the embedding are packed as the target's (target/ops_cuda.h); W1 is read by row */
    const int iH = (int)H;
    g->own_embed = own_embed ? DNEW(a, uint16_t, flint_cuda_gemm_packed_elems((int)V, iH)) : NULL;
    g->own_head = own_head ? DNEW(a, uint16_t, flint_cuda_gemm_packed_elems((int)Vd, iH)) : NULL;
    g->fc = DNEW(a, uint16_t, flint_cuda_gemm_packed_elems(iH, (int)(nT * H)));
    g->hidden_norm = DNEW(a, uint16_t, H);
    g->final_norm = DNEW(a, uint16_t, H);
    g->w1 = r ? DNEW(a, uint16_t, V * r) : NULL;
    g->w2 = r ? DNEW(a, uint16_t, Vd * r) : NULL; /* row-major: the Markov bias kernel's own layout */
    g->conf_w = c->has_confidence ? DNEW(a, float, H + (c->confidence_with_markov ? r : 0)) : NULL;
    g->t2d = Vd != V ? DNEW(a, int32_t, V) : NULL;
    g->lt = Vd != V ? DNEW(a, float, Q * V) : NULL;
    g->cand = r && Vd == V ? DNEW(a, int32_t, Q * 2 * ((V + 31) / 32)) : NULL;
    for (int l = 0; l < c->n_layers; l++) {
        dlayer *ly = &g->layers[l];
        ly->attn_norm = DNEW(a, uint16_t, H);
        ly->wqkv = DNEW(a, uint16_t, flint_cuda_gemm_packed_elems((int)qkv, iH));
        ly->q_norm = DNEW(a, uint16_t, hd);
        ly->k_norm = DNEW(a, uint16_t, hd);
        ly->wo = DNEW(a, uint16_t, flint_cuda_gemm_packed_elems(iH, d->q_dim));
        ly->mlp_norm = DNEW(a, uint16_t, H);
        ly->w_gate_up = DNEW(a, uint16_t, flint_cuda_gemm_packed_elems(2 * (int)I, iH));
        ly->w_down = DNEW(a, uint16_t, flint_cuda_gemm_packed_elems(iH, (int)I));
    }
    g->k_cache = DNEW(a, uint16_t, g->kv_stride * c->n_layers);
    g->v_cache = DNEW(a, uint16_t, g->kv_stride * c->n_layers);
    g->rope_cos = DNEW(a, float, L * hd / 2);
    g->rope_sin = DNEW(a, float, L * hd / 2);
    g->taps = DNEW(a, float, C * nT * H);
    g->taps_b = DNEW(a, uint16_t, C * nT * H);
    g->ctx = DNEW(a, float, C * H);
    g->ctxn = DNEW(a, uint16_t, C * H);
    g->ckv = DNEW(a, float, C * 2 * kvd);
    g->held_src = DNEW(a, int32_t, C);
    g->enc_gemm_scratch_bytes = flint_cuda_gemm_scratch_bytes((int)C, (int)(nT * H));
    g->enc_gemm_scratch = DNEW(a, unsigned char, g->enc_gemm_scratch_bytes);
    g->x = DNEW(a, float, R * H);
    g->xn = DNEW(a, uint16_t, R * H);
    g->qkv = DNEW(a, float, R * qkv);
    g->att = DNEW(a, uint16_t, R * (size_t)d->q_dim);
    g->glu = I % 8 == 0;
    g->gu = g->glu ? NULL : DNEW(a, float, R * 2 * I); /* the SwiGLU's input, when not fused */
    g->act = DNEW(a, uint16_t, R * I);
    g->hfin = DNEW(a, uint16_t, R * H);
    g->u = DNEW(a, float, R * Vd);
    g->attn_scratch = DNEW(a, float, flint_cuda_attn_scratch_floats((int)R, d->nh, d->nkv, (int)hd, (int)L));
    g->q = DNEW(a, float, Q * K * V);
    g->conf = DNEW(a, float, Q * K);
    g->toks = DNEW(a, int32_t, K * Q);
    g->smp = DNEW(a, unsigned char, flint_cuda_sampler_scratch_bytes((int)Q, (int)V));
    g->dpar = DNEW(a, char, g->pl.bytes);
}

static int upload(uint16_t *dst, const float *src, size_t n, uint16_t *stage, size_t stage_n, flint_err *err) {
    return flint_cuda_upload_bf16(dst, src, n, stage, stage_n, err);
}
/* a GEMM weight [N][K], packed on the way */
static int upload_w(uint16_t *dst, const float *src, size_t N, size_t K, uint16_t *stage, size_t stage_n,
                    flint_err *err) {
    return flint_cuda_upload_packed(dst, src, (int)N, (int)K, stage, stage_n, err);
}

static int upload_weights(flint_drafter *d, struct flint_drafter_cuda *g, flint_err *err) {
    const flint_drafter_config *c = &d->cfg;
    const flint_drafter_weights *w = &d->w;
    size_t H = c->hidden_size, I = d->ni, V = c->vocab_size, Vd = c->draft_vocab_size, r = c->markov_rank;
    size_t hd = c->head_dim, qd = d->q_dim, kvd = d->kv_dim, sn = (size_t)1 << 22;
    uint16_t *st = (uint16_t *)flint_xmalloc(sn * sizeof(uint16_t));
    int rc = (g->own_embed && upload_w(g->own_embed, w->embed, V, H, st, sn, err)) ||
             (g->own_head && upload_w(g->own_head, w->lm_head, Vd, H, st, sn, err)) ||
             upload_w(g->fc, w->fc, H, c->n_taps * H, st, sn, err) ||
             upload(g->hidden_norm, w->hidden_norm, H, st, sn, err) ||
             upload(g->final_norm, w->final_norm, H, st, sn, err) ||
             (r && (upload(g->w1, w->markov_w1, V * r, st, sn, err) ||
                    upload(g->w2, w->markov_w2, Vd * r, st, sn, err)));
    for (int l = 0; !rc && l < c->n_layers; l++) {
        const flint_drafter_layer *h = &w->layers[l];
        dlayer *ly = &g->layers[l];
        /* q rows, then k|v rows from packed row q_dim (a multiple of 16, checked at init) */
        rc = upload(ly->attn_norm, h->attn_norm, H, st, sn, err) || upload_w(ly->wqkv, h->wq, qd, H, st, sn, err) ||
             upload_w(ly->wqkv + flint_cuda_gemm_packed_offset((int)qd, (int)H), h->wkv, 2 * kvd, H, st, sn, err) ||
             upload(ly->q_norm, h->q_norm, hd, st, sn, err) || upload(ly->k_norm, h->k_norm, hd, st, sn, err) ||
             upload_w(ly->wo, h->wo, H, qd, st, sn, err) || upload(ly->mlp_norm, h->mlp_norm, H, st, sn, err) ||
             (g->glu ? flint_cuda_upload_packed_glu(ly->w_gate_up, h->w_gate_up, (int)I, (int)H, st, sn, err)
                     : upload_w(ly->w_gate_up, h->w_gate_up, 2 * I, H, st, sn, err)) ||
             upload_w(ly->w_down, h->w_down, H, I, st, sn, err);
    }
    free(st);
    if (rc) return -1;
    if (g->conf_w) {
        size_t n = H + (c->confidence_with_markov ? r : 0);
        CUDA_OK(cudaMemcpy(g->conf_w, w->conf_w, n * sizeof(float), cudaMemcpyHostToDevice), "confidence head upload");
        g->conf_b = w->conf_b;
    }
    if (g->t2d) {
        /* the inverse of d2t; should two draft ids share a target id, the later one wins, as the
         * CPU's scatter of q */
        int32_t *t2d = (int32_t *)flint_xmalloc(sizeof(int32_t) * V);
        for (size_t t = 0; t < V; t++) t2d[t] = -1;
        for (size_t i = 0; i < Vd; i++) t2d[w->d2t[i]] = (int32_t)i;
        cudaError_t e = cudaMemcpy(g->t2d, t2d, sizeof(int32_t) * V, cudaMemcpyHostToDevice);
        free(t2d);
        CUDA_OK(e, "d2t upload");
    }
    /* the CPU's RoPE table, positions up to max_len - 1 + B - 1 (the last block's slots) */
    size_t np = (size_t)d->max_len + c->block_size, half = hd / 2;
    float *cs = (float *)flint_xmalloc(sizeof(float) * np * half);
    float *sn_ = (float *)flint_xmalloc(sizeof(float) * np * half);
    flint_ops_rope_table(cs, sn_, (int)np, (int)hd, c->rope_theta);
    cudaError_t e1 = cudaMemcpy(g->rope_cos, cs, sizeof(float) * np * half, cudaMemcpyHostToDevice);
    cudaError_t e2 = cudaMemcpy(g->rope_sin, sn_, sizeof(float) * np * half, cudaMemcpyHostToDevice);
    free(cs);
    free(sn_);
    CUDA_OK(e1, "rope table");
    CUDA_OK(e2, "rope table");
    return 0;
}

int flint_drafter_cuda_init(flint_drafter *d, const flint_target *t, int own_embed, int own_head, flint_err *err) {
    const flint_drafter_config *c = &d->cfg;
    flint_target_device_view tv;
    flint_target_get_device_view(t, &tv);
    if (!tv.stream || (!own_embed && !tv.embed) || (!own_head && !tv.lm_head))
        return flint_err_set(err, FLINT_ERR_UNSUPPORTED, "drafter (CUDA): the target has no device embedding, LM head "
                             "or stream to share");
    long R_max = (long)d->opts.max_reqs * c->block_size;
    if (d->q_dim % 16) /* the k|v rows of the fused packed q|k|v weight start at a tile row */
        return flint_err_set(err, FLINT_ERR_UNSUPPORTED, "drafter (CUDA): query width %d (heads x head_dim) must be a "
                             "multiple of 16", d->q_dim);
    if (c->n_heads / c->n_kv_heads > FLINT_CUDA_ATTN_MAX_GROUP || c->head_dim > FLINT_CUDA_ATTN_MAX_HEAD_DIM ||
        c->head_dim % 8 || c->hidden_size % 8 || c->intermediate_size % 8 || R_max > 65535)
        return flint_err_set(err, FLINT_ERR_UNSUPPORTED, "drafter (CUDA): head_dim %d, %d query heads per KV head, "
                             "hidden %d, intermediate %d, %ld block rows (max_reqs x block_size): the kernels need "
                             "head_dim <= %d and a multiple of 8, at most %d heads per KV head, sizes that are "
                             "multiples of 8 and at most 65535 block rows", c->head_dim, c->n_heads / c->n_kv_heads,
                             c->hidden_size, c->intermediate_size, R_max, FLINT_CUDA_ATTN_MAX_HEAD_DIM,
                             FLINT_CUDA_ATTN_MAX_GROUP);
    CUDA_OK(cudaSetDevice(tv.device), "select the target's device");
    struct flint_drafter_cuda *g = (struct flint_drafter_cuda *)flint_xcalloc(1, sizeof *g);
    d->cuda = g;
    flint_graph_pool_init(&g->enc_graphs, DGRAPH_POOL, sizeof(dgraph_key));
    flint_graph_pool_init(&g->draft_graphs, DGRAPH_POOL, sizeof(dgraph_key));
    g->stream = (cudaStream_t)tv.stream;
    g->device = tv.device;
    g->layers = (dlayer *)flint_xcalloc((size_t)c->n_layers, sizeof(dlayer));
    g->qkv_dim = d->q_dim + 2 * d->kv_dim;
    g->bt_stride = (d->max_len + d->block - 1) / d->block;
    g->max_tables = d->opts.max_reqs > d->opts.max_rows ? d->opts.max_reqs : d->opts.max_rows;
    g->R_max = (int)R_max;
    /* one block past the pool: the sink where padded rows of a captured encode write their K/V */
    g->kv_stride = d->kv_layer_floats + (size_t)d->block * d->kv_dim;
    layout_params(d, g, &g->pl);
    flint_arena m;
    flint_arena_init_from(&m, NULL, SIZE_MAX);
    carve(d, g, &m, own_embed, own_head);
    g->bytes = m.used;
    void *base = NULL;
    CUDA_OK(cudaMalloc(&base, g->bytes), "cudaMalloc of weights, context K/V pool and scratch");
    g->base = base;
    flint_arena a;
    flint_arena_init_from(&a, base, SIZE_MAX);
    carve(d, g, &a, own_embed, own_head);
    FLINT_ASSERT(a.used == g->bytes);
    g->embed = own_embed ? g->own_embed : tv.embed;
    g->lm_head = own_head ? g->own_head : tv.lm_head;
    void *hp = NULL;
    size_t K = (size_t)c->max_draft, Q = (size_t)d->opts.max_reqs;
    const size_t C = (size_t)d->opts.max_rows;
    CUDA_OK(cudaMallocHost(&hp, g->pl.bytes + 16 + sizeof(int32_t) * K * Q + sizeof(float) * Q * K +
                                    sizeof(int32_t) * C),
            "pinned staging");
    g->hpar = (char *)hp;
    CUDA_OK(cudaHostGetDevicePointer((void **)&g->hpar_dev, g->hpar, 0), "pinned staging's device address");
    g->h_toks = (int32_t *)(g->hpar + ((g->pl.bytes + 15) & ~(size_t)15));
    g->h_conf = (float *)(g->h_toks + K * Q);
    g->h_held_src = (int32_t *)(g->h_conf + Q * K);
    g->held_pos = (int32_t *)flint_xmalloc(sizeof(int32_t) * C);
    g->held_seq = (int32_t *)flint_xmalloc(sizeof(int32_t) * C);
    g->h_seq_map = (int32_t *)flint_xmalloc(sizeof(int32_t) * (size_t)g->max_tables);
    g->h_need = (int32_t *)flint_xmalloc(sizeof(int32_t) * (size_t)g->max_tables);
    g->slot_cap = g->max_tables + 1; /* the engine's sessions: ids below its max_seqs (<= max_reqs) */
    g->h_slot = (int32_t *)flint_xmalloc(sizeof(int32_t) * (size_t)g->slot_cap);
    g->h_slot_gen = (uint32_t *)flint_xcalloc((size_t)g->slot_cap, sizeof(uint32_t));
    g->stage_gen = 0;
    CUDA_OK(cudaEventCreateWithFlags(&g->staged, cudaEventDisableTiming), "event");
    int prio_low = 0, prio_high = 0;
    CUDA_OK(cudaDeviceGetStreamPriorityRange(&prio_low, &prio_high), "stream priorities");
    CUDA_OK(cudaStreamCreateWithPriority(&g->es, cudaStreamNonBlocking, prio_low), "encode stream");
    flint_cuda_gemm_scratch_bind((flint_cuda_stream)g->es, g->enc_gemm_scratch, g->enc_gemm_scratch_bytes);
    CUDA_OK(cudaEventCreateWithFlags(&g->queued, cudaEventDisableTiming), "event");
    CUDA_OK(cudaEventCreateWithFlags(&g->gathered, cudaEventDisableTiming), "event");
    CUDA_OK(cudaEventCreateWithFlags(&g->encoded, cudaEventDisableTiming), "event");
    CUDA_OK(cudaEventCreateWithFlags(&g->held_up, cudaEventDisableTiming), "event");
    CUDA_OK(cudaEventCreateWithFlags(&g->fork, cudaEventDisableTiming), "event");
    CUDA_OK(cudaEventCreateWithFlags(&g->join, cudaEventDisableTiming), "event");
    /* the staging block starts defined, with the sink's table (every entry the sink block id) in
     * the slot past the call tables; calls upload only a prefix ending before it, so the device
     * copy made here stays */
    memset(g->hpar, 0, g->pl.bytes);
    int32_t *sink = HP(g, tables, int32_t) + (size_t)g->max_tables * g->bt_stride;
    for (int i = 0; i < g->bt_stride; i++) sink[i] = d->n_blocks;
    CUDA_OK(cudaMemcpy(g->dpar, g->hpar, g->pl.bytes, cudaMemcpyHostToDevice), "staging block");
    if (upload_weights(d, g, err)) return -1;
    /* the draft sampler sets its kernel's shared-memory limit on first use (sampler_cuda.cu): do
     * that here, once, with a greedy row over zeros (the staged temperature is 0), so it never
     * happens inside a graph capture */
    CUDA_OK(cudaMemsetAsync(g->q, 0, sizeof(float) * (size_t)c->vocab_size, g->stream), "sampler warm-up");
    flint_cuda_draft_sample(g->toks, NULL, 0, g->q, c->vocab_size, 1, c->vocab_size, DP(g, temp, float),
                            DP(g, greedy, int32_t), DP(g, seed, uint64_t), DP(g, spos, int64_t), g->smp,
                            (flint_cuda_stream_s)g->stream);
    CUDA_OK(cudaStreamSynchronize(g->stream), "sampler warm-up");
    /* cudaMemcpy from pageable memory may return before its DMA lands, and the target's stream
     * does not wait for the legacy stream: finish the uploads before the first call */
    CUDA_OK(cudaDeviceSynchronize(), "weight upload");
    return 0;
}

const float *flint_drafter_device_q(const flint_drafter *d) { return d->cuda ? d->cuda->q : NULL; }
void flint_drafter_wait(flint_drafter *d) {
    if (!d->cuda) return;
    cudaSetDevice(d->cuda->device);
    cudaStreamSynchronize(d->cuda->es);
}

const int32_t *flint_drafter_device_tokens(const flint_drafter *d, int *stride) {
    if (!d->cuda) return NULL;
    *stride = d->cuda->toks_stride;
    return d->cuda->toks;
}

void flint_drafter_cuda_free(flint_drafter *d) {
    struct flint_drafter_cuda *g = d->cuda;
    if (!g) return;
    cudaSetDevice(g->device);
    /* an in-flight graph is freed when it completes; cudaFree waits for the device (an encode of
     * device taps returns without waiting) */
    if (g->enc_graphs.n_captures + g->draft_graphs.n_captures)
        flint_log_info("drafter (CUDA): %ld encode/draft graphs captured in %.3f s; %.1f MiB held",
                       g->enc_graphs.n_captures + g->draft_graphs.n_captures,
                       g->enc_graphs.capture_s + g->draft_graphs.capture_s,
                       (double)(g->enc_graphs.held_bytes + g->draft_graphs.held_bytes) / (1u << 20));
    if (g->enc_graphs.cap) flint_graph_pool_free(&g->enc_graphs);
    if (g->draft_graphs.cap) flint_graph_pool_free(&g->draft_graphs);
    if (g->base) cudaFree(g->base);
    if (g->hpar) cudaFreeHost(g->hpar);
    if (g->es) cudaStreamSynchronize(g->es);
    if (g->staged) cudaEventDestroy(g->staged);
    if (g->queued) cudaEventDestroy(g->queued);
    if (g->gathered) cudaEventDestroy(g->gathered);
    if (g->encoded) cudaEventDestroy(g->encoded);
    if (g->held_up) cudaEventDestroy(g->held_up);
    if (g->fork) cudaEventDestroy(g->fork);
    if (g->join) cudaEventDestroy(g->join);
    if (g->es) {
        flint_cuda_gemm_scratch_unbind((flint_cuda_stream)g->es);
        cudaStreamDestroy(g->es);
    }
    free(g->layers);
    free(g->h_seq_map);
    free(g->h_need);
    free(g->h_slot);
    free(g->h_slot_gen);
    free(g->held_pos);
    free(g->held_seq);
    free(g);
    d->cuda = NULL;
}

size_t flint_drafter_cuda_bytes(const flint_drafter *d) { return d->cuda ? d->cuda->bytes : 0; }

/* ==== Device-pointer stages (a device-resident step calls these directly) ==== */

/* g->taps_b [R][n_taps H] (bf16, filled by the caller) -> fc -> hidden_norm -> per layer K = RoPE(k_norm(Wk ctx)), V = Wv ctx
 * into the context pool at pos[r] of sequence row_seq[r] (tables [.][bt_stride]). */
static void encode_device(flint_drafter *d, int R, const int32_t *pos, const int32_t *row_seq, const int32_t *tables,
                          int bt_stride) {
    const flint_drafter_config *c = &d->cfg;
    struct flint_drafter_cuda *g = d->cuda;
    flint_cuda_stream s = (flint_cuda_stream)g->es;
    int H = c->hidden_size, nTH = c->n_taps * c->hidden_size, kvd = d->kv_dim;
    flint_cuda_gemm_tc(g->ctx, H, g->taps_b, nTH, g->fc, R, H, nTH, 0, s);
    flint_cuda_rmsnorm(g->ctxn, H, g->ctx, H, NULL, g->hidden_norm, R, H, c->rms_norm_eps, s);
    for (int l = 0; l < c->n_layers; l++) {
        const dlayer *ly = &g->layers[l];
        uint16_t *kc = g->k_cache + (size_t)l * g->kv_stride, *vc = g->v_cache + (size_t)l * g->kv_stride;
        /* the k|v rows of the fused q|k|v weight: context rows need no query */
        flint_cuda_gemm_tc(g->ckv, 2 * kvd, g->ctxn, H, ly->wqkv + flint_cuda_gemm_packed_offset(d->q_dim, H), R,
                           2 * kvd, H, 0, s);
        const flint_cuda_kv_dst kv = {kc, vc, 0, kvd, d->nkv, row_seq, tables, bt_stride, d->block};
        flint_cuda_qk_norm_rope_store(g->ckv, 2 * kvd, R, d->nkv, ly->k_norm, 0, NULL, c->head_dim, c->rms_norm_eps,
                                      g->rope_cos, g->rope_sin, pos, &kv, s);
    }
}

/* The block forward of n_reqs blocks (rows i * B + j: token tok, position pos = P_i + j, sequence
 * row_seq) up to hfin (bf16) and the base logits U = g->u [R][draft_vocab] (fp32). */
static void backbone_device(flint_drafter *d, int n_reqs, int max_ctx, const int32_t *tok, const int32_t *pos,
                            const int32_t *row_seq, const int32_t *tables) {
    const flint_drafter_config *c = &d->cfg;
    struct flint_drafter_cuda *g = d->cuda;
    flint_cuda_stream s = (flint_cuda_stream)g->stream;
    int B = c->block_size, R = n_reqs * B, H = c->hidden_size, I = d->ni, qd = d->q_dim, kvd = d->kv_dim;
    int qkv = g->qkv_dim;
    float eps = c->rms_norm_eps;
    flint_cuda_embed(g->x, g->embed, tok, R, H, s);
    for (int l = 0; l < c->n_layers; l++) {
        const dlayer *ly = &g->layers[l];
        flint_cuda_rmsnorm(g->xn, H, g->x, H, NULL, ly->attn_norm, R, H, eps, s);
        flint_cuda_gemm_tc(g->qkv, qkv, g->xn, H, ly->wqkv, R, qkv, H, 0, s);
        flint_cuda_qk_norm_rope(g->qkv, qkv, R, d->nh, ly->q_norm, d->nkv, ly->k_norm, c->head_dim, eps, g->rope_cos,
                                g->rope_sin, pos, s);
        flint_cuda_attn a;
        memset(&a, 0, sizeof a);
        a.q = g->qkv;
        a.ldq = qkv;
        a.out = g->att;
        a.ldo = qd;
        a.k_cache = g->k_cache + (size_t)l * g->kv_stride;
        a.v_cache = g->v_cache + (size_t)l * g->kv_stride;
        a.block_tables = tables;
        a.bt_stride = g->bt_stride;
        a.row_seq = row_seq;
        a.pos = pos;
        a.n_rows = R;
        a.n_heads = d->nh;
        a.n_kv_heads = d->nkv;
        a.head_dim = c->head_dim;
        a.block_size = d->block;
        a.max_ctx = max_ctx;
        a.blk_rows = B; /* block K/V are this layer's fp32 k and v columns, never cached */
        a.blk_k = g->qkv + qd;
        a.blk_v = g->qkv + qd + kvd;
        a.ld_blk = qkv;
        a.scratch = g->attn_scratch;
        flint_cuda_attention(&a, s);
        flint_cuda_gemm_tc(g->x, H, g->att, qd, ly->wo, R, H, qd, 1, s);
        flint_cuda_rmsnorm(g->xn, H, g->x, H, NULL, ly->mlp_norm, R, H, eps, s);
        if (g->glu) { /* SwiGLU fused into the gate-up GEMM (ops_cuda.h) */
            flint_cuda_gemm_tc_glu(g->act, I, g->xn, H, ly->w_gate_up, R, I, H, s);
        } else {
            flint_cuda_gemm_tc(g->gu, 2 * I, g->xn, H, ly->w_gate_up, R, 2 * I, H, 0, s);
            flint_cuda_swiglu(g->act, I, g->gu, 2 * I, R, I, s);
        }
        flint_cuda_gemm_tc(g->x, H, g->act, I, ly->w_down, R, H, I, 1, s);
    }
    flint_cuda_rmsnorm(g->hfin, H, g->x, H, NULL, g->final_norm, R, H, eps, s);
    flint_cuda_gemm_tc(g->u, c->draft_vocab_size, g->hfin, H, g->lm_head, R, c->draft_vocab_size, H, 0, s);
}

/* The sequential stage for slots k < n_steps of every request: slot k's rows of U become the
 * corrected logits L_k in place; drawn tokens go to g->toks [k][n_reqs] (target ids), confidences
 * to g->conf [i][max_draft], q_k to q + (i * max_draft + k) * vocab when q is not NULL. Per-request
 * parameters: anchor, greedy, temperature, seed [n_reqs]; spos [n_steps][n_reqs] the position of
 * each x_k (the DRAFT stream's key). */
static void markov_device(flint_drafter *d, int n_reqs, int n_steps, const int32_t *anchor, const int32_t *greedy,
                          const float *temp, const uint64_t *seed, const int64_t *spos, float *q) {
    const flint_drafter_config *c = &d->cfg;
    struct flint_drafter_cuda *g = d->cuda;
    int B = c->block_size, H = c->hidden_size, V = c->vocab_size, Vd = c->draft_vocab_size, r = c->markov_rank;
    int K = c->max_draft, first = c->layout == FLINT_DRAFT_FILL_IN ? 1 : 0;
    size_t ldu = (size_t)B * Vd;
    for (int k = 0; k < n_steps; k++) {
        float *lk = g->u + (size_t)(first + k) * Vd; /* request i's slot row at lk + i * ldu */
        const int32_t *prev = k ? g->toks + (size_t)(k - 1) * n_reqs : NULL;
        const flint_drafter_conf_args ca = {g->conf, K, k, g->conf_w, g->conf_b, c->confidence_with_markov,
                                            g->hfin + (size_t)(first + k) * H, (size_t)B * H, H};
        if (r) /* the bias, and the confidences in the same launch (and the greedy rows' candidates) */
            flint_drafter_cuda_markov_bias(lk, ldu, g->w2, g->w1, anchor, prev, r, Vd, n_reqs, &ca, g->cand, g->stream);
        else
            flint_drafter_cuda_markov_conf(NULL, r, g->w1, anchor, prev, g->conf, K, k, g->conf_w, g->conf_b,
                                           c->confidence_with_markov, g->hfin + (size_t)(first + k) * H,
                                           (size_t)B * H, H, n_reqs, g->stream);
        const float *ls = lk;
        int ld = (int)ldu;
        if (g->t2d) {
            flint_drafter_cuda_scatter_vocab(g->lt, lk, ldu, g->t2d, V, n_reqs, g->stream);
            ls = g->lt;
            ld = V;
        }
        /* greedy rows take the argmax from the bias kernel's candidates (4748 at a 152k vocabulary)
         * rather than the row */
        const int32_t *cand = r ? g->cand : NULL;
        flint_cuda_draft_sample_cand(g->toks + (size_t)k * n_reqs, q ? q + (size_t)k * V : NULL, K * V, ls, ld, n_reqs,
                                     V, temp, greedy, seed, spos + (size_t)k * n_reqs, cand, cand ? (V + 31) / 32 : 0,
                                     g->smp, (flint_cuda_stream_s)g->stream);
    }
}

/* ==== Host entry points (the batch is validated by forward_cpu.c) ==== */

/* Sequence s's table into the staging block under a number given in order of first use, so only
 * the tables of this call travel; blocks [0, need) are copied (the rest are never read). */
static int stage_table(struct flint_drafter_cuda *g, int *n_used, int32_t seq, const int32_t *bt, int need) {
    /* host time between launches is GPU idle time: a sequence's rows are adjacent (one search per
     * sequence), and each table entry is copied once (as the target's forward) */
    if (*n_used == 0) {
        g->stage_prev = -1;
        if (++g->stage_gen == 0) { /* the stamp wrapped: forget every old one */
            memset(g->h_slot_gen, 0, sizeof(uint32_t) * (size_t)g->slot_cap);
            g->stage_gen = 1;
        }
    }
    int k = g->stage_k;
    if (seq != g->stage_prev) {
        /* by the stamped map (a draft's requests are distinct sequences: a search per request
         * was quadratic in the batch), else a search */
        if (seq >= 0 && seq < g->slot_cap) k = g->h_slot_gen[seq] == g->stage_gen ? g->h_slot[seq] : *n_used;
        else
            for (k = 0; k < *n_used && g->h_seq_map[k] != seq; k++) {}
        if (k == *n_used) {
            g->h_seq_map[(*n_used)++] = seq, g->h_need[k] = 0;
            if (seq >= 0 && seq < g->slot_cap) g->h_slot[seq] = k, g->h_slot_gen[seq] = g->stage_gen;
        }
        g->stage_prev = seq, g->stage_k = k;
    }
    FLINT_ASSERT(*n_used <= g->max_tables && need <= g->bt_stride);
    if (need > g->h_need[k]) {
        memcpy(HP(g, tables, int32_t) + (size_t)k * g->bt_stride + g->h_need[k], bt + g->h_need[k],
               sizeof(int32_t) * (size_t)(need - g->h_need[k]));
        g->h_need[k] = need;
    }
    return k;
}

/* The staging block's prefix with n_used tables into dpar on stream s: a kernel reading the
 * block where it lies (mapped pinned memory), not a copy-engine transfer (the target's
 * upload_batch says why). */
static void copy_params(struct flint_drafter_cuda *g, int n_used, cudaStream_t s) {
    const int words = (int)((g->pl.tables + sizeof(int32_t) * (size_t)n_used * g->bt_stride) / 4);
    flint_cuda_copy_rows((float *)g->dpar, words, (const float *)g->hpar_dev, words, 1, words, (flint_cuda_stream)s);
}

/* copy_params, then `staged` marks when the host may write the block again. */
static int upload_params(struct flint_drafter_cuda *g, int n_used, cudaStream_t s, flint_err *err) {
    copy_params(g, n_used, s);
    CUDA_OK(cudaEventRecord(g->staged, s), "event");
    g->staged_live = 1;
    return 0;
}

/* The block is free once its last recorded upload has passed; the one-graph step's upload records
 * nothing (its caller waits for the step's end before staging again, drafter.h), so a sync on a
 * passed event, several us of host time a step (the target's staged_wait), is skipped. */
static int staged_wait(struct flint_drafter_cuda *g, flint_err *err) {
    if (!g->staged_live) return 0;
    CUDA_OK(cudaEventSynchronize(g->staged), "drafter (the previous upload)");
    g->staged_live = 0;
    return 0;
}

/* ==== Captured graphs ==== */

/* Rows (encode) or requests (draft) a captured call is padded to: exact up to 8 (the common small
 * calls get their own graph), then the next power of two; capped at cap (the scratch's size). */
static int pad_bucket(int n, int cap) {
    int b = n <= 8 ? n : 16;
    while (b < n) b *= 2;
    return b < cap ? b : cap;
}

/* Every kernel of one encode over k->rows rows after the taps' gather (g->taps_b), reading the
 * batch from the device staging block: what an encode graph captures (on es), and the eager path. */
static void launch_encode(flint_drafter *d, const dgraph_key *k) {
    struct flint_drafter_cuda *g = d->cuda;
    encode_device(d, k->rows, DP(g, e_pos, int32_t), DP(g, e_row_seq, int32_t), DP(g, tables, int32_t), g->bt_stride);
}

/* Every kernel of one draft over k->rows requests (backbone, then k->n_steps Markov steps): what a
 * draft graph captures. The eager path runs the same two stages with the base logits' download
 * between them. */
static void launch_draft(flint_drafter *d, const dgraph_key *k) {
    struct flint_drafter_cuda *g = d->cuda;
    backbone_device(d, k->rows, k->ctx, DP(g, tok, int32_t), DP(g, pos, int32_t), DP(g, row_seq, int32_t),
                    DP(g, tables, int32_t));
    markov_device(d, k->rows, k->n_steps, DP(g, anchor, int32_t), DP(g, greedy, int32_t), DP(g, temp, float),
                  DP(g, seed, uint64_t), DP(g, spos, int64_t), k->with_q ? g->q : NULL);
}

typedef void (*launch_fn)(flint_drafter *d, const dgraph_key *k);

/* The graph of pool p for this key: found, or captured now from launch on stream cs (the pool
 * evicts its least recently used). */
typedef struct dgraph_ctx {
    flint_drafter *d;
    const dgraph_key *k;
    launch_fn launch;
} dgraph_ctx;

static int dgraph_enqueue(void *ctx, flint_err *err) {
    const dgraph_ctx *c = (const dgraph_ctx *)ctx;
    (void)err;
    c->launch(c->d, c->k); /* launchers abort on a launch error, as eagerly */
    return 0;
}

static int dgraph_get(flint_drafter *d, flint_graph_pool *p, const dgraph_key *k, launch_fn launch, cudaStream_t cs,
                      cudaGraphExec_t *out, flint_err *err) {
    dgraph_ctx c = {d, k, launch};
    void *exec = NULL;
    if (flint_graph_pool_get(p, k, (void *)cs, dgraph_enqueue, &c, &exec, err)) return -1;
    *out = (cudaGraphExec_t)exec;
    return 0;
}

/* Start-up capture (flint_drafter_capture_graphs): the encode of every row bucket and the draft of
 * every request bucket at 1..n_steps Markov steps, the keys the calls make (calls that want logits
 * run eagerly and have none). */
int flint_drafter_capture_graphs(flint_drafter *d, int n_steps, int with_q, flint_err *err) {
    struct flint_drafter_cuda *g = d->cuda;
    if (!g || d->opts.enforce_eager) return 0;
    CUDA_OK(cudaSetDevice(g->device), "select device");
    cudaGraphExec_t exec;
    for (int n = 1, prev = 0; n <= d->opts.max_rows; n++) {
        dgraph_key k;
        memset(&k, 0, sizeof k);
        k.rows = pad_bucket(n, d->opts.max_rows);
        if (k.rows == prev) continue;
        prev = k.rows;
        if (dgraph_get(d, &g->enc_graphs, &k, launch_encode, g->es, &exec, err)) return -1;
    }
    for (int s = 1; s <= n_steps; s++) /* fewer drafts: requests near their end, or capped by the request */
        for (int n = 1, prev = 0; n <= d->opts.max_reqs; n++) {
            dgraph_key k;
            memset(&k, 0, sizeof k);
            k.rows = pad_bucket(n, d->opts.max_reqs);
            if (k.rows == prev) continue;
            prev = k.rows;
            k.n_steps = s;
            k.ctx = d->max_len + d->cfg.block_size; /* as flint_drafter_draft_cuda */
            k.with_q = with_q;
            if (dgraph_get(d, &g->draft_graphs, &k, launch_draft, g->stream, &exec, err)) return -1;
        }
    return 0;
}

void flint_drafter_graph_stats(const flint_drafter *d, flint_drafter_graph_info *info) {
    memset(info, 0, sizeof *info);
    const struct flint_drafter_cuda *g = d->cuda;
    if (!g) return;
    info->n_graphs = g->enc_graphs.n + g->draft_graphs.n;
    info->n_captures = g->enc_graphs.n_captures + g->draft_graphs.n_captures;
    info->capture_s = g->enc_graphs.capture_s + g->draft_graphs.capture_s;
    info->bytes = g->enc_graphs.held_bytes + g->draft_graphs.held_bytes;
}

/* ==== Encode and draft ==== */

/* A captured encode pads the rows to a bucket: padded rows sit at position 0 of the sink table
 * (so their K/V land in the sink block past the pool) and gather the taps of real row 0's source
 * (a row that exists). The work goes to es after everything already queued on the target's
 * stream; the target's stream waits only for the gather (one gather for host and device taps:
 * host taps are copied to g->taps with source row r = r, bf16 of the same value either way). */
static int hold_encode(flint_drafter *d, const flint_drafter_ctx_batch *b, flint_err *err);

/* The encode proper over taps_b's k->rows rows (staged and gathered), on es: its graph or its
 * kernels; `encoded` marks its end. */
static int encode_rows(flint_drafter *d, const dgraph_key *k, int graphed, flint_err *err) {
    struct flint_drafter_cuda *g = d->cuda;
    if (graphed) {
        cudaGraphExec_t exec = NULL;
        if (dgraph_get(d, &g->enc_graphs, k, launch_encode, g->es, &exec, err)) return -1;
        CUDA_OK(cudaGraphLaunch(exec, g->es), "encode graph launch");
    } else {
        launch_encode(d, k);
    }
    CUDA_OK(cudaEventRecord(g->encoded, g->es), "event");
    g->es_queued = 1;
    return 0;
}

int flint_drafter_encode_cuda(flint_drafter *d, const flint_drafter_ctx_batch *b, flint_err *err) {
    struct flint_drafter_cuda *g = d->cuda;
    const flint_drafter_config *c = &d->cfg;
    CUDA_OK(cudaSetDevice(g->device), "select device");
    if (b->defer && b->taps_device) return hold_encode(d, b, err);
    /* held rows first: their taps sit where this call's gather writes */
    if (flint_drafter_flush_cuda(d, b->block_tables, err)) return -1;
    if (staged_wait(g, err)) return -1;
    const int graphed = !d->opts.enforce_eager;
    int R = b->n_rows, n_used = 0;
    dgraph_key k;
    memset(&k, 0, sizeof k);
    k.rows = graphed ? pad_bucket(R, d->opts.max_rows) : R;
    const float *taps = b->taps_device ? b->taps_device : g->taps;
    int32_t *pos = HP(g, e_pos, int32_t), *rs = HP(g, e_row_seq, int32_t), *src = HP(g, e_src, int32_t);
    for (int r = 0; r < R; r++) {
        pos[r] = b->pos[r];
        src[r] = b->src_rows ? b->src_rows[r] : r;
        rs[r] = stage_table(g, &n_used, b->row_seq[r], b->block_tables[b->row_seq[r]], b->pos[r] / d->block + 1);
    }
    for (int r = R; r < k.rows; r++) pos[r] = 0, src[r] = src[0], rs[r] = g->max_tables;
    CUDA_OK(cudaEventRecord(g->queued, g->stream), "event");
    CUDA_OK(cudaStreamWaitEvent(g->es, g->queued, 0), "encode stream wait");
    if (upload_params(g, n_used, g->es, err)) return -1;
    const int nTH = c->n_taps * c->hidden_size;
    if (!b->taps_device)
        CUDA_OK(cudaMemcpyAsync(g->taps, b->taps, sizeof(float) * (size_t)R * nTH, cudaMemcpyHostToDevice, g->es),
                "taps upload");
    gather_bf16(g->taps_b, taps, DP(g, e_src, int32_t), k.rows, nTH, g->es);
    CUDA_OK(cudaEventRecord(g->gathered, g->es), "event");
    CUDA_OK(cudaStreamWaitEvent(g->stream, g->gathered, 0), "target stream wait");
    if (encode_rows(d, &k, graphed, err)) return -1;
    if (b->taps_device) CUDA_OK(cudaGetLastError(), "encode");
    else { /* the caller may reuse its taps */
        const double t_wait = flint_clock_ms();
        CUDA_OK(cudaStreamSynchronize(g->es), "encode");
        flint_clock_waited_since(t_wait);
    }
    return 0;
}

/* Deferred encodes (flint_drafter_ctx_batch.defer): a step that drafts nothing still commits rows,
 * and encoding them at once costs its host ~8 CUDA calls while the GPU waits for the next forward
 * (docs/benchmarks.md, session 16). Holding them costs two: the source rows' upload and the taps'
 * gather into taps_b after the rows already held, both on the target's stream (before its next
 * forward overwrites the taps). The K/V follow in one encode over every held row at the next
 * flush: before a draft (which reads them), before an encode that is not deferred (its gather
 * writes taps_b from row 0), when taps_b is full, and when the engine frees a sequence (the
 * flush reads the block tables as they are then). */
static int hold_encode(flint_drafter *d, const flint_drafter_ctx_batch *b, flint_err *err) {
    struct flint_drafter_cuda *g = d->cuda;
    const int R = b->n_rows, nTH = d->cfg.n_taps * d->cfg.hidden_size;
    if (g->n_held + R > d->opts.max_rows && flint_drafter_flush_cuda(d, b->block_tables, err)) return -1;
    if (g->n_held == 0) {
        /* a new run of held rows overwrites taps_b from row 0: the target's stream waits for the
         * last encode to have read it (a GPU-side wait: the host never blocks on the low-priority
         * encode stream). The pinned source rows are rewritten by the host: their last upload
         * went on the target's stream before a step's token download, so this returns at once. */
        CUDA_OK(cudaStreamWaitEvent(g->stream, g->encoded, 0), "held rows wait for the encode");
        CUDA_OK(cudaEventSynchronize(g->held_up), "drafter (the previous held rows' upload)");
    }
    const int P = g->n_held;
    int in_order = 1; /* source rows 0..R-1 (a step with no drafts where no session ended): one
                       * launch, no upload (each call is host time between two forwards) */
    for (int r = 0; r < R; r++) {
        g->h_held_src[P + r] = b->src_rows ? b->src_rows[r] : r;
        in_order &= g->h_held_src[P + r] == r;
        g->held_pos[P + r] = b->pos[r];
        g->held_seq[P + r] = b->row_seq[r];
    }
    if (!in_order) {
        flint_cuda_copy_rows((float *)(g->held_src + P), R, (const float *)DEV_OF(g, g->h_held_src + P), R, 1, R,
                             (flint_cuda_stream)g->stream);
        CUDA_OK(cudaEventRecord(g->held_up, g->stream), "event");
    }
    gather_bf16(g->taps_b + (size_t)P * nTH, b->taps_device, in_order ? NULL : g->held_src + P, R, nTH,
                (flint_cuda_stream)g->stream); /* launch_check'ed */
    g->n_held += R;
    return 0;
}

/* The held rows' K/V: the encode of flint_drafter_encode_cuda over taps_b [0, n_held), with the
 * block tables as they are now, on es after the gathers queued on the target's stream. */
int flint_drafter_flush_cuda(flint_drafter *d, const int32_t *const *block_tables, flint_err *err) {
    struct flint_drafter_cuda *g = d->cuda;
    if (!g || g->n_held == 0) return 0;
    CUDA_OK(cudaSetDevice(g->device), "select device");
    if (staged_wait(g, err)) return -1;
    const int graphed = !d->opts.enforce_eager, P = g->n_held;
    int n_used = 0;
    dgraph_key k;
    memset(&k, 0, sizeof k);
    k.rows = graphed ? pad_bucket(P, d->opts.max_rows) : P;
    /* the gathers are done (hold_encode): no source rows to stage, only positions and tables */
    int32_t *pos = HP(g, e_pos, int32_t), *rs = HP(g, e_row_seq, int32_t);
    for (int r = 0; r < P; r++) {
        pos[r] = g->held_pos[r];
        rs[r] = stage_table(g, &n_used, g->held_seq[r], block_tables[g->held_seq[r]], g->held_pos[r] / d->block + 1);
    }
    /* padded rows: the sink, over whatever taps_b rows an earlier call left (rows are independent) */
    for (int r = P; r < k.rows; r++) pos[r] = 0, rs[r] = g->max_tables;
    g->n_held = 0;
    CUDA_OK(cudaEventRecord(g->queued, g->stream), "event");
    CUDA_OK(cudaStreamWaitEvent(g->es, g->queued, 0), "encode stream wait");
    if (upload_params(g, n_used, g->es, err) || encode_rows(d, &k, graphed, err)) return -1;
    CUDA_OK(cudaGetLastError(), "encode");
    return 0;
}

/* Rows [0, n) of each request's [max_draft][width] output block, device (pitch src_pitch floats
 * per request) to host (pitch dst_pitch), n = n_draft; requests with skip[i] are left alone. One
 * 2D copy when every request takes the same rows. */
static int download_rows(float *dst, size_t dst_pitch, const float *src, size_t src_pitch, size_t width, int n_reqs,
                         const flint_drafter_req *reqs, const int32_t *skip, cudaStream_t st, flint_err *err) {
    int uniform = 1;
    for (int i = 0; i < n_reqs; i++)
        if (reqs[i].n_draft != reqs[0].n_draft || (skip && skip[i])) uniform = 0;
    if (uniform) {
        CUDA_OK(cudaMemcpy2DAsync(dst, dst_pitch * sizeof(float), src, src_pitch * sizeof(float),
                                  (size_t)reqs[0].n_draft * width * sizeof(float), n_reqs, cudaMemcpyDeviceToHost, st),
                "logits download");
        return 0;
    }
    for (int i = 0; i < n_reqs; i++)
        if (!(skip && skip[i]))
            CUDA_OK(cudaMemcpyAsync(dst + (size_t)i * dst_pitch, src + (size_t)i * src_pitch,
                                    (size_t)reqs[i].n_draft * width * sizeof(float), cudaMemcpyDeviceToHost, st),
                    "logits download");
    return 0;
}

/* The requests into the staging block, padded to np: padded requests draft from anchor 0 at
 * position 0 (no context is read) of the sink table, greedy, so they write no q; spos is laid out
 * [max_draft][np]. *n_used: tables staged; *max_ctx, *n_steps: the attention bound and the Markov
 * steps the real requests need. */
static void stage_reqs(flint_drafter *d, int n_reqs, const flint_drafter_req *reqs, const int32_t *const *bts, int np,
                       int *n_used, int *max_ctx, int *n_steps) {
    struct flint_drafter_cuda *g = d->cuda;
    const flint_drafter_config *c = &d->cfg;
    const int B = c->block_size, K = c->max_draft;
    int32_t *tok = HP(g, tok, int32_t), *pos = HP(g, pos, int32_t), *rs = HP(g, row_seq, int32_t);
    int32_t *anchor = HP(g, anchor, int32_t), *greedy = HP(g, greedy, int32_t);
    float *temp = HP(g, temp, float);
    uint64_t *seed = HP(g, seed, uint64_t);
    int64_t *spos = HP(g, spos, int64_t);
    for (int i = 0; i < np; i++) {
        const flint_drafter_req *q = i < n_reqs ? &reqs[i] : NULL;
        int P = q ? q->pos : 0;
        /* blocks covering the context positions 0..P-1 */
        int si = q ? stage_table(g, n_used, q->seq, bts[q->seq], (P + d->block - 1) / d->block) : g->max_tables;
        for (int j = 0; j < B; j++) {
            tok[i * B + j] = j ? c->mask_token_id : q ? q->anchor : 0;
            pos[i * B + j] = P + j;
            rs[i * B + j] = si;
        }
        anchor[i] = q ? q->anchor : 0;
        greedy[i] = q ? q->greedy || q->temperature == 0.0f : 1;
        temp[i] = greedy[i] ? 1.0f : q->temperature;
        seed[i] = q ? q->seed : 0;
        for (int k = 0; k < K; k++) spos[(size_t)k * np + i] = (int64_t)P + 1 + k;
        if (!q) continue;
        if (P + B > *max_ctx) *max_ctx = P + B;
        if (q->n_draft > *n_steps) *n_steps = q->n_draft;
    }
}

/* A captured draft pads the requests to a bucket (np of them): padded requests draft from anchor 0
 * at position 0 (no context is read) of the sink table, greedy, so they write no q; every array
 * laid out by the request count (toks [n_steps][np], spos [max_draft][np]) uses np, here and in
 * the reads after the launch. Calls that want logits or base logits run eagerly (np = n_reqs). */
int flint_drafter_draft_cuda(flint_drafter *d, int n_reqs, const flint_drafter_req *reqs, const int32_t *const *bts,
                             int n_seqs, flint_drafter_out *out, flint_err *err) {
    struct flint_drafter_cuda *g = d->cuda;
    const flint_drafter_config *c = &d->cfg;
    CUDA_OK(cudaSetDevice(g->device), "select device");
    if (flint_drafter_flush_cuda(d, bts, err)) return -1; /* the held rows are context too */
    if (staged_wait(g, err)) return -1;
    /* the context the last encode wrote, and its reads of dpar done before this upload rewrites it */
    CUDA_OK(cudaStreamWaitEvent(g->stream, g->encoded, 0), "draft waits for the encode");
    g->es_queued = 0;
    int B = c->block_size, K = c->max_draft, V = c->vocab_size, Vd = c->draft_vocab_size;
    int first = c->layout == FLINT_DRAFT_FILL_IN ? 1 : 0;
    int n_used = 0, max_ctx = 1, n_steps = 0;
    (void)n_seqs;
    const int graphed = !d->opts.enforce_eager && !out->logits && !out->base_logits;
    const int np = graphed ? pad_bucket(n_reqs, d->opts.max_reqs) : n_reqs;
    stage_reqs(d, n_reqs, reqs, bts, np, &n_used, &max_ctx, &n_steps);
    const int32_t *greedy = HP(g, greedy, int32_t);
    if (upload_params(g, n_used, g->stream, err)) return -1;
    if (graphed) {
        dgraph_key k;
        memset(&k, 0, sizeof k);
        k.rows = np;
        k.n_steps = n_steps;
        /* the attention bound: the longest context (a row's arithmetic depends on its own context
         * only, so a larger bound changes no bit; the scratch is reserved for it), so the draft
         * graphs do not depend on the context */
        k.ctx = d->max_len + B;
        k.with_q = out->q || out->q_on_device;
        cudaGraphExec_t exec = NULL;
        if (dgraph_get(d, &g->draft_graphs, &k, launch_draft, g->stream, &exec, err)) return -1;
        CUDA_OK(cudaGraphLaunch(exec, g->stream), "draft graph launch");
    } else {
        backbone_device(d, n_reqs, max_ctx, DP(g, tok, int32_t), DP(g, pos, int32_t), DP(g, row_seq, int32_t),
                        DP(g, tables, int32_t));
        /* U's slot rows are overwritten by the Markov loop: the base logits leave first (tests
         * only; a copy into pageable memory waits for the backbone) */
        if (out->base_logits && download_rows(out->base_logits, (size_t)K * Vd, g->u + (size_t)first * Vd,
                                              (size_t)B * Vd, Vd, n_reqs, reqs, NULL, g->stream, err))
            return -1;
        markov_device(d, n_reqs, n_steps, DP(g, anchor, int32_t), DP(g, greedy, int32_t), DP(g, temp, float),
                      DP(g, seed, uint64_t), DP(g, spos, int64_t), out->q || out->q_on_device ? g->q : NULL);
    }
    g->toks_stride = np;
    if (out->tokens_on_device) { /* the engine reads them on the device, after its own queued work */
        CUDA_OK(cudaGetLastError(), "draft launch");
        return 0;
    }
    /* into the pinned block by kernels (the uploads' reason) */
    flint_cuda_copy_rows((float *)DEV_OF(g, g->h_toks), n_steps * np, (const float *)g->toks, n_steps * np, 1,
                         n_steps * np, (flint_cuda_stream)g->stream);
    if (out->confidence && g->conf_w)
        flint_cuda_copy_rows((float *)DEV_OF(g, g->h_conf), n_reqs * K, g->conf, n_reqs * K, 1, n_reqs * K,
                             (flint_cuda_stream)g->stream);
    if (out->logits && download_rows(out->logits, (size_t)K * Vd, g->u + (size_t)first * Vd, (size_t)B * Vd, Vd,
                                     n_reqs, reqs, NULL, g->stream, err))
        return -1;
    if (out->q && download_rows(out->q, (size_t)K * V, g->q, (size_t)K * V, V, n_reqs, reqs, greedy, g->stream, err))
        return -1;
    const double t_wait = flint_clock_ms();
    CUDA_OK(cudaStreamSynchronize(g->stream), "draft");
    flint_clock_waited_since(t_wait);
    for (int i = 0; i < n_reqs; i++)
        for (int k = 0; k < reqs[i].n_draft; k++) {
            out->tokens[(size_t)i * K + k] = g->h_toks[(size_t)k * np + i];
            if (out->confidence) out->confidence[(size_t)i * K + k] = g->conf_w ? g->h_conf[(size_t)i * K + k] : 1.0f;
        }
    return 0;
}

/* ==== The engine's one-graph step (drafter.h: flint_drafter_step_prepare ..) ==== */

int flint_drafter_step_prepare(flint_drafter *d, const int32_t *const *block_tables, flint_err *err) {
    struct flint_drafter_cuda *g = d->cuda;
    if (!g) return flint_err_set(err, FLINT_ERR_UNSUPPORTED, "drafter: the one-graph step needs the CUDA drafter");
    CUDA_OK(cudaSetDevice(g->device), "select device");
    if (flint_drafter_flush_cuda(d, block_tables, err)) return -1;
    /* the last split call's upload has left the staging block before the step rewrites it */
    if (staged_wait(g, err)) return -1;
    if (g->es_queued) { /* the context those encodes write, before the step's draft reads it */
        CUDA_OK(cudaStreamWaitEvent(g->stream, g->encoded, 0), "step waits for the encode");
        g->es_queued = 0;
    }
    return 0;
}

void flint_drafter_plan_draft(const flint_drafter *d, int n_reqs, int n_steps, int with_q, flint_drafter_launch *l) {
    FLINT_ASSERT(n_reqs >= 1 && n_reqs <= d->opts.max_reqs && n_steps >= 1 && n_steps <= d->cfg.max_draft);
    memset(l, 0, sizeof *l);
    l->reqs = d->opts.enforce_eager ? n_reqs : pad_bucket(n_reqs, d->opts.max_reqs);
    l->n_steps = n_steps;
    l->ctx = d->max_len + d->cfg.block_size; /* as flint_drafter_draft_cuda's graphs */
    l->with_q = with_q;
    l->n_tables = l->reqs; /* a fixed size per shape: the tables of every (padded) request */
}

int flint_drafter_stage_draft_cuda(flint_drafter *d, int n_reqs, const flint_drafter_req *reqs,
                                   const int32_t *const *bts, const flint_drafter_launch *l, flint_err *err) {
    int n_used = 0, max_ctx = 1, n_steps = 0;
    stage_reqs(d, n_reqs, reqs, bts, l->reqs, &n_used, &max_ctx, &n_steps);
    FLINT_ASSERT(n_used <= l->n_tables && n_steps <= l->n_steps);
    (void)err;
    return 0;
}

int flint_drafter_enqueue_draft(flint_drafter *d, const flint_drafter_launch *l, flint_err *err) {
    struct flint_drafter_cuda *g = d->cuda;
    FLINT_ASSERT(l->reqs <= d->opts.max_reqs && l->n_tables <= g->max_tables);
    copy_params(g, l->n_tables, g->stream); /* the step's end tells the host the block is free */
    (void)err;
    g->toks_stride = l->reqs;
    dgraph_key k;
    memset(&k, 0, sizeof k);
    k.rows = l->reqs, k.n_steps = l->n_steps, k.ctx = l->ctx, k.with_q = l->with_q;
    launch_draft(d, &k);
    return 0;
}

int flint_drafter_enqueue_encode(flint_drafter *d, int n_rows, const float *taps_device, const int32_t *pos,
                                 const int32_t *row_seq, const int32_t *tables, int bt_stride, flint_err *err) {
    struct flint_drafter_cuda *g = d->cuda;
    FLINT_ASSERT(n_rows >= 1 && n_rows <= d->opts.max_rows && bt_stride == g->bt_stride);
    const int nTH = d->cfg.n_taps * d->cfg.hidden_size;
    /* on es, whose GEMM scratch is the encode's (target/ops_cuda.h binds one per stream) */
    CUDA_OK(cudaEventRecord(g->fork, g->stream), "event");
    CUDA_OK(cudaStreamWaitEvent(g->es, g->fork, 0), "encode fork");
    gather_bf16(g->taps_b, taps_device, NULL, n_rows, nTH, g->es);
    encode_device(d, n_rows, pos, row_seq, tables, bt_stride);
    CUDA_OK(cudaEventRecord(g->join, g->es), "event");
    CUDA_OK(cudaStreamWaitEvent(g->stream, g->join, 0), "encode join");
    return 0;
}
