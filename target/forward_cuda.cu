/* The target forward on a CUDA device (first version): the same batch contract as the CPU
 * forward (target.h: rows of several sequences at their positions, paged KV, logits for chosen
 * rows, taps), computed by the kernels of ops_cuda.h. What flint_target_open made on the host
 * (validated fp32 weights, RoPE tables) is converted once to the device forms: weights bf16 in
 * the fused QKV and gate|up layouts, a bf16 KV pool with the CPU's block layout, and scratch for
 * max_rows rows, all carved from one cudaMalloc. A forward copies the batch's small arrays up,
 * launches the layers on one stream, and copies logits and taps back: nothing is allocated.
 *
 * The host keeps its fp32 weights: a CPU drafter shares the embedding and LM head, and the
 * CPU forward stays available as the reference in the same process. A later version that does
 * not need either (the full GPU step) can skip that copy.
 *
 * Numerics: the residual stream and every projection output are fp32; what feeds a GEMM
 * (norm outputs, attention output, SwiGLU) is bf16, and K/V are stored bf16. Against the fp32
 * CPU forward this costs bf16 rounding of activations, measured by tests/test_target_cuda.c. */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/arena.h"
#include "core/clock.h"
#include "core/log.h"
#include "target/ops_cuda.h"
#include "target/gemm_layout.h"
#include "target/graph_pool.h"
#include "target/target_internal.h"

#define CUDA_OK(expr, what)                                                                         \
    do {                                                                                            \
        cudaError_t e_ = (expr);                                                                    \
        if (e_ != cudaSuccess)                                                                      \
            return flint_err_set(err, FLINT_ERR_IO, "target (CUDA): %s: %s", what, cudaGetErrorString(e_)); \
    } while (0)

/* A forward's launch shape: what a captured graph bakes in. Rows and logit rows are padded up to
 * buckets and the attention bound is the model's context, so a few graphs serve every step. */
#define TARGET_MAX_TAPS 16 /* taps a forward takes at most (and one a layer at most) */
typedef struct graph_key {
    int rows, n_logit, ctx, n_taps;
    int rows_per_seq; /* the attention's window hint, 1, 2, 4 or 8 (flint_cuda_attn) */
    int32_t tap_layers[TARGET_MAX_TAPS];
} graph_key;

#define GRAPH_POOL 128 /* the start-up set (flint_target_capture_graphs: ~80) and prefill shapes */

typedef struct cuda_layer {
    uint16_t *attn_norm, *wqkv, *q_norm, *k_norm, *wo, *mlp_norm, *w_gate_up, *w_down;
} cuda_layer;

struct flint_target_cuda {
    void *base;    /* the one device allocation */
    size_t bytes;
    cudaStream_t stream;
    cuda_layer *layers; /* host array of device pointers */
    uint16_t *embed, *final_norm, *lm_head;
    uint16_t *k_cache, *v_cache; /* [n_layers][kv_layer_floats] bf16 */
    float *rope_cos, *rope_sin;
    /* scratch for max_rows rows */
    float *x, *qkv, *gu, *logits, *taps, *attn_scratch;
    unsigned char *gemm_scratch; /* the wgmma GEMMs' x, bound to the stream (ops_cuda.h) */
    size_t gemm_scratch_bytes;
    float *part, *lpart, *gather; /* tensor parallel: row-parallel partial sums [R][H], this rank's logits
                                   * [R][nv], every rank's [n_ranks][R][nv] */
    float *parts;                 /* tensor parallel: every rank's partial sums [n_ranks][R][H] */
    int tp_split;                 /* the K parts of this rank's row-parallel GEMMs (flint_cuda_gemm_tc_split) */
    int glu;                      /* gate-up packed interleaved and SwiGLU fused into its GEMM (I % 8 == 0) */
    int device;                   /* the CUDA device this target lives on */
    uint16_t *xn, *att, *act;
    int32_t *tokens, *pos, *row_seq, *logit_rows, *tables;
    int bt_stride;       /* blocks per sequence table: ceil(max_len / block) */
    size_t kv_stride;    /* one layer's K (or V) pool on the device: the host's blocks + the sink */
    /* host staging, sized at init (max_rows rows, tables for max_rows + 1 sequences): the caller's
     * sequence of each renumbered one, and how many of its table's entries are staged */
    int32_t *h_seq_map, *h_need;
    /* the slot of each caller sequence id < slot_cap in this call: h_slot[sq] is valid when
     * h_slot_gen[sq] == stage_gen (a stamp per call, so nothing is cleared between calls) */
    int32_t *h_slot;
    uint32_t *h_slot_gen, stage_gen;
    int slot_cap;
    /* tokens .. tables are one device block and h_in its pinned mirror with the same layout, so a
     * forward's batch travels in one copy; staged marks when that copy has left h_in (the next
     * forward may not overwrite it earlier, since a forward whose outputs stay on the device
     * returns without waiting) */
    unsigned char *h_in;
    const unsigned char *h_in_dev; /* h_in as the device addresses it (mapped pinned memory) */
    int32_t *h_row_seq, *h_tables, *h_tokens, *h_pos, *h_logit_rows;
    cudaEvent_t staged;
    /* staged was recorded and not yet waited for (staged_wait): a sync on a passed event still cost
     * the host several us a step, and the one-graph step records none */
    int staged_live;
    /* captured forwards, keyed by their launch shape (graph_key); least recently used evicted */
    flint_graph_pool graphs;
    size_t weight_bytes, kv_bytes; /* parts of bytes, for the report */
};

/* Device pointer arithmetic over the one allocation (a measuring pass first, as target.c). */
/* Device pointers carved with the host's arena (core/arena.h only does pointer arithmetic): a
 * measuring pass over base NULL first, then the real one over the one cudaMalloc. */
#define DNEW(a, type, n) ((type *)flint_arena_alloc((a), sizeof(type) * (size_t)(n), 256))

static void carve(flint_target *t, struct flint_target_cuda *g, flint_arena *a) {
    const flint_target_config *c = &t->cfg;
    const flint_target_options *o = &t->opts;
    size_t H = (size_t)c->hidden_size, V = (size_t)c->vocab_size, I = (size_t)t->ni, NV = (size_t)t->nv;
    size_t hd = (size_t)c->head_dim, R = (size_t)o->max_rows, L = (size_t)o->max_len;
    int qk_norm = c->arch == FLINT_ARCH_QWEN3;
    const int iH = (int)H;
    /* GEMM weights (and the embedding, which may be the LM head) are packed: ops_cuda.h */
    g->embed = DNEW(a, uint16_t, flint_cuda_gemm_packed_elems((int)V, iH)); /* every rank embeds every token */
    g->final_norm = DNEW(a, uint16_t, H);
    /* this rank's vocabulary rows (a view of the embedding when tied; v0 % 16 == 0, checked at init) */
    g->lm_head = c->tie_word_embeddings ? (g->embed ? g->embed + flint_cuda_gemm_packed_offset(t->v0, iH) : NULL)
                                        : DNEW(a, uint16_t, flint_cuda_gemm_packed_elems((int)NV, iH));
    for (int l = 0; l < c->n_layers; l++) {
        cuda_layer *ly = &g->layers[l];
        ly->attn_norm = DNEW(a, uint16_t, H);
        ly->wqkv = DNEW(a, uint16_t, flint_cuda_gemm_packed_elems(t->qkv_dim, iH));
        ly->q_norm = qk_norm ? DNEW(a, uint16_t, hd) : NULL;
        ly->k_norm = qk_norm ? DNEW(a, uint16_t, hd) : NULL;
        ly->wo = DNEW(a, uint16_t, flint_cuda_gemm_packed_elems(iH, t->q_dim));
        ly->mlp_norm = DNEW(a, uint16_t, H);
        ly->w_gate_up = DNEW(a, uint16_t, flint_cuda_gemm_packed_elems(2 * (int)I, iH));
        ly->w_down = DNEW(a, uint16_t, flint_cuda_gemm_packed_elems(iH, (int)I));
    }
    g->k_cache = DNEW(a, uint16_t, g->kv_stride * (size_t)c->n_layers);
    g->v_cache = DNEW(a, uint16_t, g->kv_stride * (size_t)c->n_layers);
    g->rope_cos = DNEW(a, float, L * hd / 2);
    g->rope_sin = DNEW(a, float, L * hd / 2);
    g->x = DNEW(a, float, R * H);
    g->xn = DNEW(a, uint16_t, R * H);
    g->qkv = DNEW(a, float, R * (size_t)t->qkv_dim);
    g->att = DNEW(a, uint16_t, R * (size_t)t->q_dim);
    g->glu = I % 8 == 0;
    g->gu = g->glu ? NULL : DNEW(a, float, R * 2 * I); /* the SwiGLU's input, when not fused */
    { /* the SwiGLU output, as rows or in the GEMM scratch's layout (flint_cuda_gemm_tc_glu_xp) */
        const size_t rows = R * I, xp = flint_cuda_gemm_scratch_bytes((int)R, (int)I) / sizeof(uint16_t);
        g->act = DNEW(a, uint16_t, rows > xp ? rows : xp);
    }
    g->logits = DNEW(a, float, R * V);
    { /* [rows][n_taps][H] for at most min(n_layers, TARGET_MAX_TAPS) taps, not a slot per layer
       * (qwen3-8b at 512 rows: 302 -> 134 MB) */
        const size_t max_taps = c->n_layers < TARGET_MAX_TAPS ? (size_t)c->n_layers : TARGET_MAX_TAPS;
        g->taps = DNEW(a, float, R * max_taps * H);
    }
    g->attn_scratch = DNEW(a, float, flint_cuda_attn_scratch_floats((int)R, t->nh, t->nkv, c->head_dim, (int)L));
    {
        int kmax = t->q_dim > (int)H ? t->q_dim : (int)H;
        kmax = (int)I > kmax ? (int)I : kmax;
        g->gemm_scratch_bytes = flint_cuda_gemm_scratch_bytes((int)R, kmax);
        g->gemm_scratch = DNEW(a, unsigned char, g->gemm_scratch_bytes);
    }
    if (o->tp) {
        g->part = DNEW(a, float, R * H);
        g->lpart = DNEW(a, float, R * NV);
        g->gather = DNEW(a, float, (size_t)o->tp->n_ranks * R * NV);
        g->parts = DNEW(a, float, (size_t)o->tp->n_ranks * R * H);
    }
    g->tokens = DNEW(a, int32_t, R);
    g->pos = DNEW(a, int32_t, R);
    g->row_seq = DNEW(a, int32_t, R);
    g->logit_rows = DNEW(a, int32_t, R);
    g->tables = DNEW(a, int32_t, (R + 1) * (size_t)g->bt_stride);
}

/* --load-format dummy: offset + scale * u, u uniform in [-1, 1) from a hash of (seed, index in the
 * whole tensor), so a shape's weights are the same on every run without a host copy, and a tensor
 * parallel rank's shard (rows [row0, row0 + rows) x columns [col0, col0 + cols) of a tensor with
 * full_cols columns) holds exactly the values of the unsharded tensor. */
static __device__ __forceinline__ uint16_t dummy_value(uint64_t seed, size_t gi, float scale, float offset) {
    uint64_t z = seed + (uint64_t)gi * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    const float u = (float)(z >> 40) * (2.0f / 16777216.0f) - 1.0f;
    return __bfloat16_as_ushort(__float2bfloat16_rn(offset + scale * u));
}

__global__ void fill_bf16_kernel(uint16_t *p, size_t rows, size_t cols, size_t full_cols, size_t row0, size_t col0,
                                 uint64_t seed, float scale, float offset) {
    const size_t n = rows * cols;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        p[i] = dummy_value(seed, (row0 + i / cols) * full_cols + col0 + i % cols, scale, offset);
}

/* The same values into a packed matrix [N][K] (ops_cuda.h): its rows r_lo .. r_lo + rows - 1 take
 * rows row0 .. of the unsharded tensor (full_cols columns, from column col0); padding gets zeros;
 * other rows are left to other calls (a fused matrix is filled slice by slice). */
__global__ void fill_packed_kernel(uint16_t *p, int N, int K, int r_lo, int rows, size_t full_cols, size_t row0,
                                   size_t col0, uint64_t seed, float scale, float offset, int glu_i) {
    const int nJ = (K + 31) / 32;
    const size_t n_el = (size_t)((N + 15) / 16) * nJ * 512;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n_el; i += (size_t)gridDim.x * blockDim.x) {
        const size_t tile = i / 512;
        int rr, kk;
        gemm_tile_rk((int)(i % 512), &rr, &kk);
        const int pn = 16 * (int)(tile / nJ) + rr, k = 32 * (int)(tile % nJ) + kk;
        if (pn >= N || k >= K) {
            p[i] = 0;
            continue;
        }
        /* a gate-up matrix packed interleaved holds row n at packed row pn (flint_cuda_gemm_glu_row) */
        const int n = glu_i ? (pn % 16 < 8 ? 0 : glu_i) + 8 * (pn / 16) + pn % 8 : pn;
        if (n < r_lo || n >= r_lo + rows) continue;
        p[i] = dummy_value(seed, (row0 + (size_t)(n - r_lo)) * full_cols + col0 + (size_t)k, scale, offset);
    }
}

static int fill_packed_glu(uint16_t *p, int N, int K, int r_lo, int rows, size_t full_cols, size_t row0, size_t col0,
                           uint64_t seed, float scale, float offset, int glu_i, cudaStream_t st, flint_err *err) {
    if (!p || !N || !K) return 0;
    fill_packed_kernel<<<2048, 256, 0, st>>>(p, N, K, r_lo, rows, full_cols, row0, col0, seed, scale, offset, glu_i);
    CUDA_OK(cudaGetLastError(), "random fill");
    return 0;
}

static int fill_packed(uint16_t *p, int N, int K, int r_lo, int rows, size_t full_cols, size_t row0, size_t col0,
                       uint64_t seed, float scale, float offset, cudaStream_t st, flint_err *err) {
    return fill_packed_glu(p, N, K, r_lo, rows, full_cols, row0, col0, seed, scale, offset, 0, st, err);
}

static int fill_slice(uint16_t *p, size_t rows, size_t cols, size_t full_cols, size_t row0, size_t col0, uint64_t seed,
                      float scale, float offset, cudaStream_t st, flint_err *err) {
    if (!p || !rows || !cols) return 0;
    fill_bf16_kernel<<<1024, 256, 0, st>>>(p, rows, cols, full_cols, row0, col0, seed, scale, offset);
    CUDA_OK(cudaGetLastError(), "random fill");
    return 0;
}

static int fill(uint16_t *p, size_t n, uint64_t seed, float scale, float offset, cudaStream_t st, flint_err *err) {
    return fill_slice(p, 1, n, n, 0, 0, seed, scale, offset, st, err);
}

/* Random weights of the right shape, made on the device: norms 1, matrices uniform with variance
 * 1 / fan_in (activations keep their scale through the layers), the embedding +-0.05. A rank fills
 * its shard of each tensor with the unsharded tensor's values (fill_slice, fill_packed). */
static int fill_dummy(flint_target *t, struct flint_target_cuda *g, flint_err *err) {
    const flint_target_config *c = &t->cfg;
    const size_t H = (size_t)c->hidden_size, V = (size_t)c->vocab_size, I = (size_t)c->intermediate_size;
    const size_t hd = (size_t)c->head_dim, qg = (size_t)c->n_heads * hd, kvg = (size_t)c->n_kv_heads * hd;
    const size_t ni = (size_t)t->ni, qd = (size_t)t->q_dim, kvd = (size_t)t->kv_dim;
    const size_t h0 = (size_t)t->h0 * hd, kv0 = (size_t)t->kv0 * hd, i0 = (size_t)t->i0;
    cudaStream_t st = g->stream;
    float sh = sqrtf(3.0f / (float)H), sq = sqrtf(3.0f / (float)qg), si = sqrtf(3.0f / (float)I);
    uint64_t seed = 0x5eed;
    /* matrices are packed (ops_cuda.h): N x K as the GEMMs read them */
    const int iH = (int)H, iqd = (int)qd, ikvd = (int)kvd, ini = (int)ni, nqkv = t->qkv_dim;
    if (fill_packed(g->embed, (int)V, iH, 0, (int)V, H, 0, 0, seed++, 0.05f, 0, st, err) ||
        fill(g->final_norm, H, seed++, 0, 1, st, err) ||
        (!c->tie_word_embeddings &&
         fill_packed(g->lm_head, t->nv, iH, 0, t->nv, H, (size_t)t->v0, 0, seed++, sh, 0, st, err)))
        return -1;
    for (int l = 0; l < c->n_layers; l++) {
        cuda_layer *d = &g->layers[l];
        const uint64_t sqkv = seed + 1, sgu = seed + 6;
        if (fill(d->attn_norm, H, seed, 0, 1, st, err) ||
            /* q|k|v rows of the full [qg + 2 kvg][H] matrix */
            fill_packed(d->wqkv, nqkv, iH, 0, iqd, H, h0, 0, sqkv, sh, 0, st, err) ||
            fill_packed(d->wqkv, nqkv, iH, iqd, ikvd, H, qg + kv0, 0, sqkv, sh, 0, st, err) ||
            fill_packed(d->wqkv, nqkv, iH, iqd + ikvd, ikvd, H, qg + kvg + kv0, 0, sqkv, sh, 0, st, err) ||
            fill(d->q_norm, d->q_norm ? hd : 0, seed + 2, 0, 1, st, err) ||
            fill(d->k_norm, d->k_norm ? hd : 0, seed + 3, 0, 1, st, err) ||
            fill_packed(d->wo, iH, iqd, 0, iH, qg, 0, h0, seed + 4, sq, 0, st, err) ||
            fill(d->mlp_norm, H, seed + 5, 0, 1, st, err) ||
            /* gate rows then up rows of the full [2 I][H] matrix (packed interleaved: glu) */
            fill_packed_glu(d->w_gate_up, 2 * ini, iH, 0, ini, H, i0, 0, sgu, sh, 0, g->glu ? ini : 0, st, err) ||
            fill_packed_glu(d->w_gate_up, 2 * ini, iH, ini, ini, H, I + i0, 0, sgu, sh, 0, g->glu ? ini : 0, st, err) ||
            fill_packed(d->w_down, iH, ini, 0, iH, I, 0, i0, seed + 7, si, 0, st, err))
            return -1;
        seed += 8;
    }
    CUDA_OK(cudaStreamSynchronize(st), "random weights");
    return 0;
}

void flint_target_cuda_tuning(int pdl, int wgmma, int kernel_pdl, int gemm_early) {
    flint_cuda_gemm_configure(pdl, wgmma, gemm_early);
    flint_cuda_kernel_pdl_configure(kernel_pdl);
}

int flint_target_debug_fill_kv(flint_target *t, uint64_t seed, flint_err *err) {
    struct flint_target_cuda *g = t->cuda;
    if (!g) return flint_err_set(err, FLINT_ERR_UNSUPPORTED, "target: random KV needs the CUDA forward");
    CUDA_OK(cudaSetDevice(g->device), "select device");
    size_t n = g->kv_stride * (size_t)t->cfg.n_layers;
    if (fill(g->k_cache, n, seed, 1, 0, g->stream, err) || fill(g->v_cache, n, seed + 1, 1, 0, g->stream, err)) return -1;
    CUDA_OK(cudaStreamSynchronize(g->stream), "random KV");
    return 0;
}

int flint_target_debug_tp_exchange(flint_target *t, int rows, int reps, double *ms, flint_err *err) {
    struct flint_target_cuda *g = t->cuda;
    if (!g || !t->opts.tp)
        return flint_err_set(err, FLINT_ERR_UNSUPPORTED, "target: the exchange timing needs a tensor parallel CUDA "
                             "target");
    if (rows < 1 || rows > t->opts.max_rows || reps < 1)
        return flint_err_set(err, FLINT_ERR_INVALID, "target: exchange timing of %d rows x %d reps", rows, reps);
    CUDA_OK(cudaSetDevice(g->device), "select device");
    const size_t n = (size_t)rows * t->cfg.hidden_size;
    cudaEvent_t e0, e1;
    CUDA_OK(cudaEventCreate(&e0), "event");
    CUDA_OK(cudaEventCreate(&e1), "event");
    int rc = 0;
    for (int i = 0; i < reps + 2 && !rc; i++) {
        if (i == 2) CUDA_OK(cudaEventRecord(e0, g->stream), "event");
        rc = flint_tp_nccl_all_gather(t->opts.tp->nccl, g->part, g->parts, n, (void *)g->stream, err);
    }
    if (!rc) CUDA_OK(cudaEventRecord(e1, g->stream), "event");
    if (!rc) rc = flint_tp_nccl_wait(t->opts.tp->nccl, (void *)g->stream, t->opts.tp_timeout_s > 0 ? t->opts.tp_timeout_s
                                                                                                  : 120.0, err);
    float total = 0;
    if (!rc) CUDA_OK(cudaEventElapsedTime(&total, e0, e1), "event");
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    *ms = (double)total / reps;
    return rc;
}

static int upload(uint16_t *dst, const float *src, size_t n, uint16_t *stage, size_t stage_n, flint_err *err) {
    return flint_cuda_upload_bf16(dst, src, n, stage, stage_n, err);
}
/* a GEMM weight [N][K]: packed on the way (ops_cuda.h) */
static int upload_w(uint16_t *dst, const float *src, size_t N, size_t K, uint16_t *stage, size_t stage_n,
                    flint_err *err) {
    return flint_cuda_upload_packed(dst, src, (int)N, (int)K, stage, stage_n, err);
}

int flint_target_cuda_init(flint_target *t, flint_err *err) {
    const flint_target_config *c = &t->cfg;
    const flint_target_options *o = &t->opts;
    int n_dev = 0;
    if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev < 1)
        return flint_err_set(err, FLINT_ERR_UNSUPPORTED, "target: device cuda was asked for, but no CUDA device is "
                             "present");
    const int device = o->tp ? o->tp->device : 0;
    if (device < 0 || device >= n_dev)
        return flint_err_set(err, FLINT_ERR_INVALID, "target: CUDA device %d asked for, %d present", device, n_dev);
    CUDA_OK(cudaSetDevice(device), "select device");
    if (t->nh / t->nkv > FLINT_CUDA_ATTN_MAX_GROUP || c->head_dim > FLINT_CUDA_ATTN_MAX_HEAD_DIM ||
        c->head_dim % 8 || c->hidden_size % 8 || t->ni % 8)
        return flint_err_set(err, FLINT_ERR_UNSUPPORTED, "target (CUDA): head_dim %d, %d query heads per KV head, "
                             "hidden %d, intermediate %d (per rank): the kernels need head_dim <= %d and a multiple "
                             "of 8, at most %d heads per KV head, and sizes that are multiples of 8", c->head_dim,
                             t->nh / t->nkv, c->hidden_size, t->ni, FLINT_CUDA_ATTN_MAX_HEAD_DIM,
                             FLINT_CUDA_ATTN_MAX_GROUP);
    struct flint_target_cuda *g = (struct flint_target_cuda *)flint_xcalloc(1, sizeof *g);
    t->cuda = g;
    flint_graph_pool_init(&g->graphs, GRAPH_POOL, sizeof(graph_key));
    g->device = device;
    if (o->tp) { /* exact (unsharded bits) when K splits into quarters that the ranks' shards align with */
        const int n = o->tp->n_ranks, qg = c->n_heads * c->head_dim;
        const int aligned = qg % 128 == 0 && c->intermediate_size % 128 == 0 && (n == 1 || n == 2 || n == 4);
        g->tp_split = !aligned ? 4 : n == 1 ? 4 : n == 2 ? 2 : 1;
        if (!aligned)
            flint_log_warn("target (CUDA): tensor parallel %d over q_dim %d / intermediate %d: the row-parallel sums "
                           "are not bit-identical to one GPU's (exact for 1, 2 or 4 ranks and sizes that are "
                           "multiples of 128)", n, qg, c->intermediate_size);
        if (n > 8)
            return flint_err_set(err, FLINT_ERR_UNSUPPORTED, "target (CUDA): tensor parallel size %d; at most 8", n);
    }
    if (c->tie_word_embeddings && t->v0 % 16) /* the LM head is a view of the packed embedding from row v0 */
        return flint_err_set(err, FLINT_ERR_UNSUPPORTED, "target (CUDA): this rank's vocabulary starts at row %d; with "
                             "tied embeddings it must be a multiple of 16", t->v0);
    g->layers = (cuda_layer *)flint_xcalloc((size_t)c->n_layers, sizeof(cuda_layer));
    g->bt_stride = (o->max_len + o->kv_block_size - 1) / o->kv_block_size;
    /* one block past the pool: the sink where padded rows of a captured forward write their K/V */
    g->kv_stride = t->kv_layer_floats + (size_t)o->kv_block_size * (size_t)t->kv_dim;
    flint_arena m;
    flint_arena_init_from(&m, NULL, SIZE_MAX);
    carve(t, g, &m);
    size_t kv_bytes = 2 * g->kv_stride * sizeof(uint16_t) * (size_t)c->n_layers;
    if (o->gpu_memory_utilization > 0) {
        /* the pool takes what the fraction leaves after everything else this forward holds */
        size_t free_b = 0, total_b = 0;
        CUDA_OK(cudaMemGetInfo(&free_b, &total_b), "device memory query");
        const double per_block = 2.0 * sizeof(uint16_t) * (double)o->kv_block_size * t->kv_dim * c->n_layers;
        const double budget = (double)o->gpu_memory_utilization * (double)total_b - (double)(total_b - free_b) -
                              (double)(m.used - kv_bytes) - 64.0 * (1 << 20) /* CUDA context, graphs */;
        const double blocks = floor(budget / per_block) - 1; /* - the sink */
        const int need = (o->max_len + o->kv_block_size - 1) / o->kv_block_size;
        if (blocks < need)
            return flint_err_set(err, FLINT_ERR_NOMEM, "target (CUDA): gpu_memory_utilization %.2f leaves %.2f GiB "
                                 "for the KV pool, less than one sequence of %d tokens needs (%.2f GiB); %.1f of %.1f "
                                 "GiB are in use already", o->gpu_memory_utilization,
                                 budget > 0 ? budget / (1u << 30) : 0.0, o->max_len, need * per_block / (1u << 30),
                                 (double)(total_b - free_b) / (1u << 30), (double)total_b / (1u << 30));
        t->opts.kv_blocks = blocks > 1e9 ? 1000000000 : (int)blocks;
        t->kv_layer_floats = (size_t)t->opts.kv_blocks * (size_t)o->kv_block_size * (size_t)t->kv_dim;
        g->kv_stride = t->kv_layer_floats + (size_t)o->kv_block_size * (size_t)t->kv_dim;
        m.used = 0;
        carve(t, g, &m);
        kv_bytes = 2 * g->kv_stride * sizeof(uint16_t) * (size_t)c->n_layers;
    }
    g->bytes = m.used;
    g->kv_bytes = kv_bytes;
    void *base = NULL;
    CUDA_OK(cudaMalloc(&base, g->bytes), "cudaMalloc of weights, KV pool and scratch");
    g->base = base;
    flint_arena a;
    flint_arena_init_from(&a, base, SIZE_MAX);
    carve(t, g, &a);
    FLINT_ASSERT(a.used == g->bytes);
    g->weight_bytes = (size_t)((char *)g->k_cache - (char *)base); /* carve puts the weights first */
    CUDA_OK(cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking), "stream");
    flint_cuda_gemm_init();
    flint_cuda_gemm_scratch_bind((flint_cuda_stream)g->stream, g->gemm_scratch, g->gemm_scratch_bytes);

    /* the host holds this rank's shards (target.c); the device copies have the same shapes */
    size_t H = (size_t)c->hidden_size, V = (size_t)c->vocab_size, I = (size_t)t->ni, NV = (size_t)t->nv;
    size_t hd = (size_t)c->head_dim, stage_n = (size_t)1 << 22;
    uint16_t *stage = o->dummy_shape ? NULL : (uint16_t *)flint_xmalloc(stage_n * sizeof(uint16_t));
    int rc = o->dummy_shape ? fill_dummy(t, g, err) : upload_w(g->embed, t->w.embed, V, H, stage, stage_n, err) ||
             upload(g->final_norm, t->w.final_norm, H, stage, stage_n, err) ||
             (!c->tie_word_embeddings && upload_w(g->lm_head, t->w.lm_head, NV, H, stage, stage_n, err));
    for (int l = 0; !rc && !o->dummy_shape && l < c->n_layers; l++) {
        const flint_target_layer *h = &t->w.layers[l];
        cuda_layer *d = &g->layers[l];
        rc = upload(d->attn_norm, h->attn_norm, H, stage, stage_n, err) ||
             upload_w(d->wqkv, h->wqkv, (size_t)t->qkv_dim, H, stage, stage_n, err) ||
             (d->q_norm && upload(d->q_norm, h->q_norm, hd, stage, stage_n, err)) ||
             (d->k_norm && upload(d->k_norm, h->k_norm, hd, stage, stage_n, err)) ||
             upload_w(d->wo, h->wo, H, (size_t)t->q_dim, stage, stage_n, err) ||
             upload(d->mlp_norm, h->mlp_norm, H, stage, stage_n, err) ||
             (g->glu ? flint_cuda_upload_packed_glu(d->w_gate_up, h->w_gate_up, (int)I, (int)H, stage, stage_n, err)
                     : upload_w(d->w_gate_up, h->w_gate_up, 2 * I, H, stage, stage_n, err)) ||
             upload_w(d->w_down, h->w_down, H, I, stage, stage_n, err);
    }
    free(stage);
    if (rc) return -1;
    size_t rope_n = (size_t)o->max_len * hd / 2;
    CUDA_OK(cudaMemcpy(g->rope_cos, t->s.rope_cos, rope_n * sizeof(float), cudaMemcpyHostToDevice), "rope table");
    CUDA_OK(cudaMemcpy(g->rope_sin, t->s.rope_sin, rope_n * sizeof(float), cudaMemcpyHostToDevice), "rope table");
    size_t R = (size_t)o->max_rows;
    g->h_seq_map = (int32_t *)flint_xmalloc(sizeof(int32_t) * R);
    g->h_need = (int32_t *)flint_xmalloc(sizeof(int32_t) * R);
    g->slot_cap = (o->max_seqs > (int)R ? o->max_seqs : (int)R) + 1;
    g->h_slot = (int32_t *)flint_xmalloc(sizeof(int32_t) * (size_t)g->slot_cap);
    g->h_slot_gen = (uint32_t *)flint_xcalloc((size_t)g->slot_cap, sizeof(uint32_t));
    g->stage_gen = 0;
    {
        unsigned char *d0 = (unsigned char *)g->tokens;
        const size_t in_bytes = (size_t)((unsigned char *)(g->tables + (R + 1) * (size_t)g->bt_stride) - d0);
        CUDA_OK(cudaMallocHost((void **)&g->h_in, in_bytes), "pinned batch staging");
        CUDA_OK(cudaHostGetDevicePointer((void **)&g->h_in_dev, g->h_in, 0), "pinned batch staging's device address");
        memset(g->h_in, 0, in_bytes);
#define MIRROR(dev) ((int32_t *)(g->h_in + ((unsigned char *)(dev) - d0)))
        g->h_tokens = MIRROR(g->tokens);
        g->h_pos = MIRROR(g->pos);
        g->h_row_seq = MIRROR(g->row_seq);
        g->h_logit_rows = MIRROR(g->logit_rows);
        g->h_tables = MIRROR(g->tables);
#undef MIRROR
        CUDA_OK(cudaEventCreateWithFlags(&g->staged, cudaEventDisableTiming), "event");
    }
    cudaDeviceProp prop;
    CUDA_OK(cudaGetDeviceProperties(&prop, device), "device properties");
    flint_log_info("target (CUDA%s): %s; %.1f MiB on the device in one allocation: bf16 weights%s %.1f MiB, bf16 KV "
                   "pool %d x %d tokens %.1f MiB, scratch for %d rows %.1f MiB; nothing is allocated per step",
                   o->tp ? ", tensor parallel rank" : "", prop.name, (double)g->bytes / (1 << 20),
                   o->dummy_shape ? " (random, dummy)" : "",
                   (double)g->weight_bytes / (1 << 20), t->opts.kv_blocks, o->kv_block_size,
                   (double)g->kv_bytes / (1 << 20), o->max_rows,
                   (double)(g->bytes - g->weight_bytes - g->kv_bytes) / (1 << 20));
    return 0;
}

void flint_target_cuda_free(flint_target *t) {
    struct flint_target_cuda *g = t->cuda;
    if (!g) return;
    cudaSetDevice(g->device);
    if (g->graphs.n_captures)
        flint_log_info("target (CUDA): %ld forward graphs captured in %.3f s; %d held, %.1f MiB",
                       g->graphs.n_captures, g->graphs.capture_s, g->graphs.n,
                       (double)g->graphs.held_bytes / (1u << 20));
    if (g->graphs.cap) flint_graph_pool_free(&g->graphs);
    if (g->stream) {
        flint_cuda_gemm_scratch_unbind((flint_cuda_stream)g->stream);
        cudaStreamDestroy(g->stream);
    }
    if (g->base) cudaFree(g->base);
    free(g->layers);
    free(g->h_seq_map);
    free(g->h_need);
    free(g->h_slot);
    free(g->h_slot_gen);
    if (g->h_in) cudaFreeHost(g->h_in);
    if (g->staged) cudaEventDestroy(g->staged);
    free(g);
    t->cuda = NULL;
}

size_t flint_target_device_bytes(const flint_target *t) { return t->cuda ? t->cuda->bytes : 0; }

void flint_target_get_device_view(const flint_target *t, flint_target_device_view *v) {
    memset(v, 0, sizeof *v);
    const struct flint_target_cuda *g = t->cuda;
    if (!g) return;
    v->embed = g->embed;
    v->lm_head = g->lm_head;
    v->logits = g->logits;
    v->taps = g->taps;
    v->stream = (void *)g->stream;
    v->device = g->device;
    v->pos = g->pos;
    v->row_seq = g->row_seq;
    v->tables = g->tables;
    v->bt_stride = g->bt_stride;
}

/* Row counts a captured forward is padded to: exact up to 8 (batch 1 at every draft length),
 * then steps of about 1.5x; capped at max_rows. */
static int row_bucket(const flint_target_options *o, int n, int max_rows) {
    static const int b[] = {1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024};
    if (o->n_graph_sizes > 0) { /* the caller's sizes (--cuda-graph-sizes) */
        for (int i = 0; i < o->n_graph_sizes; i++)
            if (n <= o->graph_sizes[i]) return o->graph_sizes[i] < max_rows ? o->graph_sizes[i] : max_rows;
        return max_rows;
    }
    for (size_t i = 0; i < sizeof b / sizeof b[0]; i++)
        if (n <= b[i]) return b[i] < max_rows ? b[i] : max_rows;
    return max_rows;
}

/* x += in . W^T for a row-parallel projection (o_proj, down_proj). Without tensor parallelism the
 * GEMM adds into the residual directly. With it, each rank computes the unsharded GEMM's K parts
 * that fall in its columns (tp_split: 2 of the 4 quarters at N = 2, 1 at N = 4), the ranks'
 * partials are all-gathered and added in the unsharded order ((p0 + p1) + (p2 + p3)), then to x:
 * the same operations as one GPU, so N = 1, 2 and 4 give the unsharded bits. An all-gather
 * instead of NCCL's all-reduce because the latter's summation order is NCCL's choice. */
static int row_parallel(flint_target *t, struct flint_target_cuda *g, const uint16_t *in, int n_in, const uint16_t *w,
                        int R, flint_err *err) {
    const int H = t->cfg.hidden_size;
    flint_cuda_stream s = (flint_cuda_stream)g->stream;
    const flint_tp_comm *tp = t->opts.tp;
    if (!tp) {
        flint_cuda_gemm_tc(g->x, H, in, n_in, w, R, H, n_in, 1, s);
        return 0;
    }
    flint_cuda_gemm_tc_split(g->part, H, in, n_in, w, R, H, n_in, 0, g->tp_split, s);
    if (flint_tp_nccl_all_gather(tp->nccl, g->part, g->parts, (size_t)R * H, (void *)g->stream, err)) return -1;
    /* parts is [rank][R][H] for this forward's R: the ranks' blocks are R * H apart */
    flint_cuda_add_parts(g->x, g->parts, (size_t)R * H, tp->n_ranks, s);
    return 0;
}

/* The norm of x's rows for the GEMM of N outputs that reads them: straight into the stream's GEMM
 * scratch in its layout where that GEMM reads from there (the warpgroup paths, > 32 rows), which
 * saves the GEMM's own pass over the rows and a launch (session 29: 109 of them a forward at
 * batch 64); into xn otherwise. Returns the x to hand the GEMM (NULL: the scratch). */
static const uint16_t *norm_for_gemm(struct flint_target_cuda *g, const flint_target_config *c, const int32_t *rows,
                                     const uint16_t *w, int n_rows, int N, float *copy, int ldc, flint_cuda_stream s) {
    const int H = c->hidden_size;
    int Mp = 0;
    unsigned char *xp = flint_cuda_gemm_xp(n_rows, N, H, s, &Mp);
    if (xp) {
        flint_cuda_rmsnorm_xp(xp, Mp, g->x, H, rows, w, n_rows, H, c->rms_norm_eps, copy, ldc, s);
        return NULL;
    }
    flint_cuda_rmsnorm_copy(g->xn, H, g->x, H, rows, w, n_rows, H, c->rms_norm_eps, copy, ldc, s);
    return g->xn;
}

/* Every kernel of one forward over R rows (R_logit logit rows, attention bounded by max_ctx),
 * reading the batch from the device arrays only: what a graph captures. */
static int launch_forward(flint_target *t, struct flint_target_cuda *g, const graph_key *k, flint_err *err) {
    const flint_target_config *c = &t->cfg;
    const flint_tp_comm *tp = t->opts.tp;
    cudaStream_t st = g->stream;
    flint_cuda_stream s = (flint_cuda_stream)st;
    const int R = k->rows, H = c->hidden_size, I = t->ni;
    flint_cuda_embed(g->x, g->embed, g->tokens, R, H, s);
    for (int l = 0; l < c->n_layers; l++) {
        const cuda_layer *ly = &g->layers[l];
        uint16_t *kc = g->k_cache + (size_t)l * g->kv_stride, *vc = g->v_cache + (size_t)l * g->kv_stride;
        /* a tap of the layer before (its output, x as this norm reads it) rides on this norm */
        float *tap = NULL;
        for (int j = 0; j < k->n_taps; j++) {
            if (l == 0 || k->tap_layers[j] != l - 1) continue;
            if (!tap) tap = g->taps + (size_t)j * H;
            else flint_cuda_copy_rows(g->taps + (size_t)j * H, k->n_taps * (int)H, g->x, (int)H, R, (int)H, s);
        }
        const uint16_t *xq = norm_for_gemm(g, c, NULL, ly->attn_norm, R, t->qkv_dim, tap, k->n_taps * (int)H, s);
        flint_cuda_gemm_tc(g->qkv, t->qkv_dim, xq, H, ly->wqkv, R, t->qkv_dim, H, 0, s);
        /* q/k norm, RoPE, and the K/V into the cache: one launch */
        const flint_cuda_kv_dst kv = {kc,     vc,       t->nh,         t->q_dim + t->kv_dim, t->nkv,
                                      g->row_seq, g->tables, g->bt_stride, t->opts.kv_block_size};
        flint_cuda_qk_norm_rope_store(g->qkv, t->qkv_dim, R, t->nh, ly->q_norm, t->nkv, ly->k_norm, c->head_dim,
                                      c->rms_norm_eps, g->rope_cos, g->rope_sin, g->pos, &kv, s);
        flint_cuda_attn a;
        memset(&a, 0, sizeof a);
        a.q = g->qkv;
        a.ldq = t->qkv_dim;
        a.out = g->att;
        a.ldo = t->q_dim;
        a.k_cache = kc;
        a.v_cache = vc;
        a.block_tables = g->tables;
        a.bt_stride = g->bt_stride;
        a.row_seq = g->row_seq;
        a.pos = g->pos;
        a.n_rows = R;
        a.n_heads = t->nh;
        a.n_kv_heads = t->nkv;
        a.head_dim = c->head_dim;
        a.block_size = t->opts.kv_block_size;
        a.max_ctx = k->ctx;
        a.scratch = g->attn_scratch;
        a.rows_per_seq = k->rows_per_seq;
        /* (No L2 prefetch of the O projection's weights from the attention any more: a kernel that
         * issues one ends only once the bytes have landed, ncu 11.8 -> 14.6 us for the split kernel
         * at batch 1, q 8, and the O GEMM at 8 rows took 13.0 -> 12.0 us with its weights in L2;
         * without it batch 1, q 8 went 4.650 -> 4.611 ms, session 30.) */
        /* the output straight into the O projection's input where that GEMM reads its scratch
         * (as the norms: norm_for_gemm; not under tensor parallelism, whose row-parallel GEMM
         * takes its own parts of K) */
        if (!tp) a.out_xp = flint_cuda_gemm_xp(R, H, t->q_dim, s, &a.out_mp);
        flint_cuda_attention(&a, s);
        if (row_parallel(t, g, a.out_xp ? NULL : g->att, t->q_dim, ly->wo, R, err)) return -1;
        const uint16_t *xm = norm_for_gemm(g, c, NULL, ly->mlp_norm, R, 2 * I, NULL, 0, s);
        /* the SwiGLU output in the down projection's input layout where both GEMMs can (large M,
         * no tensor parallelism): the down GEMM's permute pass goes (session 29) */
        int amp = 0, act_xp = !tp && g->glu && flint_cuda_gemm_xp(R, H, I, s, &amp) != NULL;
        if (act_xp) act_xp = flint_cuda_gemm_tc_glu_xp((unsigned char *)g->act, amp, xm, H, ly->w_gate_up, R, I, H, s);
        if (act_xp) {
            const int launched = flint_cuda_gemm_tc_xp(g->x, H, (const unsigned char *)g->act, amp, ly->w_down, R, H, I, 1, s);
            FLINT_ASSERT(launched);
        } else {
            if (g->glu) {
                flint_cuda_gemm_tc_glu(g->act, I, xm, H, ly->w_gate_up, R, I, H, s);
            } else {
                flint_cuda_gemm_tc(g->gu, 2 * I, xm, H, ly->w_gate_up, R, 2 * I, H, 0, s);
                flint_cuda_swiglu(g->act, I, g->gu, 2 * I, R, I, s);
            }
            if (row_parallel(t, g, g->act, I, ly->w_down, R, err)) return -1;
        }
        for (int j = 0; j < k->n_taps; j++) /* the last layer's tap: no norm of a next layer to carry it */
            if (k->tap_layers[j] == l && l == c->n_layers - 1)
                flint_cuda_copy_rows(g->taps + (size_t)j * H, k->n_taps * (int)H, g->x, (int)H, R, (int)H, s);
    }
    if (k->n_logit > 0) {
        const int V = c->vocab_size, NV = t->nv, L = k->n_logit;
        const uint16_t *xl = norm_for_gemm(g, c, g->logit_rows, g->final_norm, L, tp ? NV : V, NULL, 0, s);
        if (!tp) {
            flint_cuda_gemm_tc(g->logits, V, xl, H, g->lm_head, L, V, H, 0, s);
        } else { /* vocabulary-parallel: this rank's columns, gathered rank-major, then laid side by side */
            flint_cuda_gemm_tc(g->lpart, NV, xl, H, g->lm_head, L, NV, H, 0, s);
            if (flint_tp_nccl_all_gather(tp->nccl, g->lpart, g->gather, (size_t)L * NV, (void *)st, err)) return -1;
            for (int r = 0; r < tp->n_ranks; r++)
                CUDA_OK(cudaMemcpy2DAsync(g->logits + (size_t)r * NV, sizeof(float) * V, g->gather + (size_t)r * L * NV,
                                          sizeof(float) * NV, sizeof(float) * NV, L, cudaMemcpyDeviceToDevice, st),
                        "logit gather");
        }
    }
    return 0;
}

/* The graph for this launch shape: found, or captured now (evicting the least recently used). */
typedef struct forward_ctx {
    flint_target *t;
    struct flint_target_cuda *g;
    const graph_key *k;
} forward_ctx;

static int enqueue_forward(void *ctx, flint_err *err) {
    const forward_ctx *c = (const forward_ctx *)ctx;
    return launch_forward(c->t, c->g, c->k, err);
}

static int forward_graph(flint_target *t, struct flint_target_cuda *g, const graph_key *k, cudaGraphExec_t *out,
                         flint_err *err) {
    forward_ctx c = {t, g, k};
    void *exec = NULL;
    if (flint_graph_pool_get(&g->graphs, k, (void *)g->stream, enqueue_forward, &c, &exec, err)) return -1;
    *out = (cudaGraphExec_t)exec;
    return 0;
}

/* Start-up capture: the decode and verify forwards (every row is a logit row) of every row bucket
 * up to graph_max_rows, for each window hint 1, 2, 4, 8 that a bucket's rows can give (up to the
 * power of two at or above them), with these taps:
 * the keys flint_target_forward_cuda makes for such batches, so the steps replay and capture
 * nothing. Capturing records the kernels without running them. */
int flint_target_capture_graphs(flint_target *t, int n_taps, const int32_t *tap_layers, flint_err *err) {
    struct flint_target_cuda *g = t->cuda;
    const flint_target_options *o = &t->opts;
    if (!g || o->enforce_eager) return 0;
    if (n_taps > t->cfg.n_layers || n_taps > TARGET_MAX_TAPS)
        return flint_err_set(err, FLINT_ERR_INVALID, "graph capture: %d taps", n_taps);
    CUDA_OK(cudaSetDevice(g->device), "select device");
    const int limit = o->graph_max_rows < o->max_rows ? o->graph_max_rows : o->max_rows;
    for (int n = 1, prev = 0; n <= limit; n++) {
        const int b = row_bucket(o, n, o->max_rows);
        if (b == prev) continue;
        prev = b;
        for (int rps = 1; rps <= 8 && rps < 2 * b; rps *= 2) { /* R rows of one sequence: the power of 2 >= R */
            graph_key k;
            memset(&k, 0, sizeof k);
            k.rows = b;
            k.n_logit = b;
            k.ctx = o->max_len;
            k.n_taps = n_taps;
            for (int j = 0; j < n_taps; j++) k.tap_layers[j] = tap_layers[j];
            k.rows_per_seq = rps;
            cudaGraphExec_t exec;
            if (forward_graph(t, g, &k, &exec, err)) return -1;
        }
    }
    return 0;
}

void flint_target_graph_stats(const flint_target *t, flint_target_graph_info *info) {
    memset(info, 0, sizeof *info);
    const struct flint_target_cuda *g = t->cuda;
    if (!g) return;
    info->n_graphs = g->graphs.n;
    info->n_captures = g->graphs.n_captures;
    info->capture_s = g->graphs.capture_s;
    info->bytes = g->graphs.held_bytes;
}

/* A forward's shape: R rows over n_used sequences, L logit rows; padded (a captured forward) or
 * exact (eager). */
static void plan(const flint_target *t, int R, int n_used, int L, int max_ctx, int padded, int n_taps,
                 const int32_t *tap_layers, graph_key *k) {
    const flint_target_options *o = &t->opts;
    memset(k, 0, sizeof *k);
    k->rows = padded ? row_bucket(o, R, o->max_rows) : R;
    k->n_logit = L > 0 && padded ? row_bucket(o, L, k->rows) : L;
    /* the attention's bound: a captured forward is sized for the longest context (its grid only
     * gains splits that find no chunk and end at once; the scratch is reserved for it), so the
     * graphs do not depend on the context and the pool stops growing as sequences do */
    k->ctx = padded ? o->max_len : max_ctx;
    k->n_taps = n_taps;
    for (int j = 0; j < n_taps; j++) k->tap_layers[j] = tap_layers[j];
    k->rows_per_seq = 1; /* rows per sequence, rounded up to 1, 2, 4 or 8: decode and verify batches get their own graphs */
    while (k->rows_per_seq < 8 && k->rows_per_seq * n_used < R) k->rows_per_seq *= 2;
}

/* The staging block is free once its last upload outside a step graph (`staged`) has passed. The
 * one-graph step's upload records nothing: its caller waits for the step's end before staging
 * again (target.h). So only a forward's own recorded upload is waited for, once: a sync on a
 * passed event still cost the host microseconds a step (H200, embedded pair, K 7, this and the
 * drafter's: host us b1 7.4-8.3 -> 4.5, b8 10.4-11.7 -> 7.5, b64 median of 8 runs 29.0 -> 25.4;
 * issue #8's 30 us at batch 64). */
static int staged_wait(struct flint_target_cuda *g, flint_err *err) {
    if (!g->staged_live) return 0;
    CUDA_OK(cudaEventSynchronize(g->staged), "forward (the previous batch upload)");
    g->staged_live = 0;
    return 0;
}

/* The batch (validated by the caller, as for the CPU forward) into the pinned staging block h_in:
 * the host's part of a forward. Sequences are renumbered in order of first use so only the tables
 * of rows in this batch travel. A padded forward (captured) pads the rows to k->rows: padded rows
 * read token 0 at position 0 of a sink sequence whose one block lies past the pool (they write
 * their K/V there and attend to it), padded logit rows repeat row 0. k NULL: the forward's shape
 * is planned here (into *kp, padded or not); else the batch is staged into shape k (the caller
 * checked it fits). *n_tables: the tables staged (the sink's included). */
static int stage_batch(flint_target *t, struct flint_target_cuda *g, const flint_target_batch *b, int padded,
                       const graph_key *k, graph_key *kp, int *n_tables, flint_err *err) {
    const flint_target_options *o = &t->opts;
    int R = b->n_rows, bs = o->kv_block_size;
    int n_used = 0, max_ctx = 1;
    if (staged_wait(g, err)) return -1;
    if (++g->stage_gen == 0) { /* the stamp wrapped: forget every old one */
        memset(g->h_slot_gen, 0, sizeof(uint32_t) * (size_t)g->slot_cap);
        g->stage_gen = 1;
    }
    /* host time between two forwards is GPU idle time (issue #8: <= 30 us a step at batch 64): a
     * sequence's rows are adjacent (one search per sequence, not per row), and each table entry
     * is copied once, up to what its furthest row reads */
    for (int r = 0, sq_prev = -1, j = 0; r < R; r++) {
        const int sq = b->row_seq[r];
        if (sq != sq_prev) {
            /* the sequence's slot: by the stamped map (ids below slot_cap), else a search */
            if (sq < g->slot_cap) {
                j = g->h_slot_gen[sq] == g->stage_gen ? g->h_slot[sq] : n_used;
            } else {
                for (j = 0; j < n_used && g->h_seq_map[j] != sq; j++) {}
            }
            if (j == n_used) {
                g->h_seq_map[n_used++] = sq;
                g->h_need[j] = 0;
                if (sq < g->slot_cap) g->h_slot[sq] = j, g->h_slot_gen[sq] = g->stage_gen;
                /* no zeroing of the row past what its rows read: no kernel reads a table entry at
                 * or past a sequence's furthest row's block (attention, KV store, the drafter's
                 * encode) */
            }
            sq_prev = sq;
        }
        g->h_row_seq[r] = j;
        const int need = b->pos[r] / bs + 1, have = g->h_need[j];
        if (need > have) {
            memcpy(g->h_tables + (size_t)j * g->bt_stride + have, b->block_tables[sq] + have,
                   sizeof(int32_t) * (size_t)(need - have));
            g->h_need[j] = need;
        }
        if (b->pos[r] + 1 > max_ctx) max_ctx = b->pos[r] + 1;
    }
    if (!k) {
        plan(t, R, n_used, b->n_logit_rows, max_ctx, padded, b->n_taps, b->tap_layers, kp);
        k = kp;
    }
    memcpy(g->h_tokens, b->tokens, sizeof(int32_t) * (size_t)R);
    memcpy(g->h_pos, b->pos, sizeof(int32_t) * (size_t)R);
    if (b->n_logit_rows > 0) memcpy(g->h_logit_rows, b->logit_rows, sizeof(int32_t) * (size_t)b->n_logit_rows);
    if (k->rows > R) { /* the sink sequence */
        int32_t *sink = g->h_tables + (size_t)n_used * g->bt_stride;
        for (int i = 0; i < g->bt_stride; i++) sink[i] = o->kv_blocks;
        for (int r = R; r < k->rows; r++) g->h_tokens[r] = 0, g->h_pos[r] = 0, g->h_row_seq[r] = n_used;
        n_used++;
    }
    for (int i = b->n_logit_rows; i < k->n_logit; i++) g->h_logit_rows[i] = 0;
    *n_tables = n_used;
    return 0;
}

/* The staging block's upload (tokens, pos, row_seq, logit_rows, then n_tables tables: one copy)
 * on the target's stream: a kernel that reads the block where it lies (mapped pinned memory), not
 * a copy-engine transfer, whose synchronisation with the kernels around it cost ~5 us of GPU time
 * (and, as a captured node, as much of the graph's launch on the host; H200, session 21). */
static void upload_batch(struct flint_target_cuda *g, int n_tables) {
    const int words = (int)(((unsigned char *)(g->h_tables + (size_t)n_tables * g->bt_stride) - g->h_in) / 4);
    flint_cuda_copy_rows((float *)g->tokens, words, (const float *)g->h_in_dev, words, 1, words,
                         (flint_cuda_stream)g->stream);
}

static void key_of_launch(const flint_target_launch *l, graph_key *k) {
    memset(k, 0, sizeof *k);
    k->rows = l->rows, k->n_logit = l->n_logit, k->ctx = l->ctx, k->n_taps = l->n_taps;
    k->rows_per_seq = l->rows_per_seq;
    memcpy(k->tap_layers, l->tap_layers, sizeof k->tap_layers);
}

void flint_target_plan(const flint_target *t, int n_rows, int n_seqs, int seq_bucket, int n_taps,
                       const int32_t *tap_layers, flint_target_launch *l) {
    const flint_target_options *o = &t->opts;
    graph_key k;
    FLINT_ASSERT(n_rows >= 1 && n_rows <= o->max_rows && n_seqs >= 1 && n_seqs <= n_rows && n_taps <= TARGET_MAX_TAPS);
    plan(t, n_rows, n_seqs, n_rows, o->max_len, !o->enforce_eager, n_taps, tap_layers, &k);
    memset(l, 0, sizeof *l);
    l->rows = k.rows, l->n_logit = k.n_logit, l->ctx = k.ctx, l->n_taps = k.n_taps, l->rows_per_seq = k.rows_per_seq;
    memcpy(l->tap_layers, k.tap_layers, sizeof l->tap_layers);
    const int n = (seq_bucket > n_seqs ? seq_bucket : n_seqs) + 1, cap = o->max_rows + 1; /* h_tables' size */
    l->n_tables = n < cap ? n : cap;
}

int flint_target_stage_cuda(flint_target *t, const flint_target_batch *b, const flint_target_launch *l,
                            flint_err *err) {
    struct flint_target_cuda *g = t->cuda;
    CUDA_OK(cudaSetDevice(g->device), "select device");
    if (t->opts.tp || !b->logits_on_device || !b->taps_on_device || b->n_logit_rows != b->n_rows ||
        b->n_rows > l->rows || b->n_taps != l->n_taps)
        return flint_err_set(err, FLINT_ERR_INVALID, "target stage: a staged forward runs on one GPU, keeps its logits "
                             "and taps on the device, has every row a logit row and fits its shape (%d rows of "
                             "at most %d)", b->n_rows, l->rows);
    for (int r = 0; r < b->n_rows; r++)
        if (b->logit_rows[r] != r)
            return flint_err_set(err, FLINT_ERR_INVALID, "target stage: logit row %d is row %d", r, b->logit_rows[r]);
    for (int j = 0; j < b->n_taps; j++)
        if (b->tap_layers[j] != l->tap_layers[j])
            return flint_err_set(err, FLINT_ERR_INVALID, "target stage: tap %d is not the shape's", j);
    int n_seqs = 0; /* the sequences (+ the sink) must fit the tables that travel */
    for (int r = 0; r < b->n_rows; r++) n_seqs += r == 0 || b->row_seq[r] != b->row_seq[r - 1];
    if (n_seqs + (l->rows > b->n_rows) > l->n_tables)
        return flint_err_set(err, FLINT_ERR_INVALID, "target stage: %d sequences for a shape of %d tables", n_seqs,
                             l->n_tables);
    graph_key k;
    key_of_launch(l, &k);
    int n_used = 0;
    return stage_batch(t, g, b, 1, &k, NULL, &n_used, err);
}

int flint_target_enqueue(flint_target *t, const flint_target_launch *l, const int32_t *tokens_device, flint_err *err) {
    struct flint_target_cuda *g = t->cuda;
    cudaStream_t st = g->stream;
    FLINT_ASSERT(l->rows <= t->opts.max_rows && l->n_tables <= t->opts.max_rows + 1);
    graph_key k;
    key_of_launch(l, &k);
    upload_batch(g, l->n_tables);
    if (tokens_device) /* the whole padded block: the writer fills the padded rows with token 0 */
        flint_cuda_copy_rows((float *)g->tokens, k.rows, (const float *)tokens_device, k.rows, 1, k.rows,
                             (flint_cuda_stream)st);
    return launch_forward(t, g, &k, err);
}

/* The batch (validated by the caller, as for the CPU forward) on the device: staged (stage_batch),
 * uploaded, then replayed from its captured graph or launched kernel by kernel; only the real
 * rows' results are copied back. */
int flint_target_forward_cuda(flint_target *t, const flint_target_batch *b, flint_err *err) {
    struct flint_target_cuda *g = t->cuda;
    const flint_target_config *c = &t->cfg;
    const flint_target_options *o = &t->opts;
    cudaStream_t st = g->stream;
    int R = b->n_rows, H = c->hidden_size;
    CUDA_OK(cudaSetDevice(g->device), "select device"); /* per thread: a TP engine drives each rank from its own */
    if (o->tp && flint_tp_nccl_failed(o->tp->nccl)) /* its graphs hold the aborted communicator */
        return flint_err_set(err, FLINT_ERR_IO, "target forward: tensor parallel rank %d: the NCCL group has failed "
                             "earlier; the engine must be restarted", o->tp->rank);
    if (b->n_taps > c->n_layers || b->n_taps > TARGET_MAX_TAPS)
        return flint_err_set(err, FLINT_ERR_INVALID, "target forward: %d taps; the CUDA forward takes at most one per "
                             "layer (%d) and at most %d", b->n_taps, c->n_layers, TARGET_MAX_TAPS);
    const int graphed = !o->enforce_eager && R <= o->graph_max_rows;
    graph_key k;
    int n_used = 0;
    if (stage_batch(t, g, b, graphed, NULL, &k, &n_used, err)) return -1;
    upload_batch(g, n_used);
    CUDA_OK(cudaEventRecord(g->staged, st), "event");
    g->staged_live = 1;
    if (b->tokens_device) /* the drafts the GPU drew, over the staged placeholders (outside the graph) */
        flint_cuda_copy_rows((float *)g->tokens, R, (const float *)b->tokens_device, R, 1, R, (flint_cuda_stream)st);
    if (graphed) {
        cudaGraphExec_t exec;
        if (forward_graph(t, g, &k, &exec, err)) return -1;
        CUDA_OK(cudaGraphLaunch(exec, st), "graph launch");
    } else if (launch_forward(t, g, &k, err)) {
        return -1;
    }
    if (b->n_logit_rows > 0 && !b->logits_on_device)
        CUDA_OK(cudaMemcpyAsync(b->logits, g->logits, sizeof(float) * (size_t)b->n_logit_rows * c->vocab_size,
                                cudaMemcpyDeviceToHost, st), "logits download");
    if (b->n_taps > 0 && !b->taps_on_device)
        CUDA_OK(cudaMemcpyAsync(b->taps, g->taps, sizeof(float) * (size_t)R * b->n_taps * H, cudaMemcpyDeviceToHost, st),
                "taps download");
    if (o->tp) return flint_tp_nccl_wait(o->tp->nccl, (void *)st, o->tp_timeout_s > 0 ? o->tp_timeout_s : 120.0, err);
    /* nothing for the host: the next work on this stream (the device-side acceptance, the
     * drafter) follows in order, and the first synchronisation after it reports any failure */
    const int host_out = (b->n_logit_rows > 0 && !b->logits_on_device) || (b->n_taps > 0 && !b->taps_on_device);
    if (host_out) {
        const double t_wait = flint_clock_ms();
        CUDA_OK(cudaStreamSynchronize(st), "forward");
        flint_clock_waited_since(t_wait);
    } else {
        CUDA_OK(cudaGetLastError(), "forward launch");
    }
    return 0;
}
