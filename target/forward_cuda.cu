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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "target/ops_cuda.h"
#include "target/target_internal.h"

#define CUDA_OK(expr, what)                                                                         \
    do {                                                                                            \
        cudaError_t e_ = (expr);                                                                    \
        if (e_ != cudaSuccess)                                                                      \
            return flint_err_set(err, FLINT_ERR_IO, "target (CUDA): %s: %s", what, cudaGetErrorString(e_)); \
    } while (0)

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
    uint16_t *xn, *att, *act;
    int32_t *tokens, *pos, *row_seq, *logit_rows, *tables;
    int bt_stride;       /* blocks per sequence table: ceil(max_len / block) */
    /* host staging, sized at init */
    int32_t *h_seq_map, *h_row_seq, *h_tables;
};

/* Device pointer arithmetic over the one allocation (a measuring pass first, as target.c). */
typedef struct dev_arena {
    char *base;
    size_t used;
} dev_arena;

static void *dcarve(dev_arena *a, size_t bytes) {
    size_t off = (a->used + 255) & ~(size_t)255;
    a->used = off + bytes;
    return a->base ? a->base + off : NULL;
}
#define DNEW(a, type, n) ((type *)dcarve((a), sizeof(type) * (size_t)(n)))

static void carve(flint_target *t, struct flint_target_cuda *g, dev_arena *a) {
    const flint_target_config *c = &t->cfg;
    const flint_target_options *o = &t->opts;
    size_t H = (size_t)c->hidden_size, V = (size_t)c->vocab_size, I = (size_t)c->intermediate_size;
    size_t hd = (size_t)c->head_dim, R = (size_t)o->max_rows, L = (size_t)o->max_len;
    int qk_norm = c->arch == FLINT_ARCH_QWEN3;
    g->embed = DNEW(a, uint16_t, V * H);
    g->final_norm = DNEW(a, uint16_t, H);
    g->lm_head = c->tie_word_embeddings ? g->embed : DNEW(a, uint16_t, V * H);
    for (int l = 0; l < c->n_layers; l++) {
        cuda_layer *ly = &g->layers[l];
        ly->attn_norm = DNEW(a, uint16_t, H);
        ly->wqkv = DNEW(a, uint16_t, (size_t)t->qkv_dim * H);
        ly->q_norm = qk_norm ? DNEW(a, uint16_t, hd) : NULL;
        ly->k_norm = qk_norm ? DNEW(a, uint16_t, hd) : NULL;
        ly->wo = DNEW(a, uint16_t, H * (size_t)t->q_dim);
        ly->mlp_norm = DNEW(a, uint16_t, H);
        ly->w_gate_up = DNEW(a, uint16_t, 2 * I * H);
        ly->w_down = DNEW(a, uint16_t, H * I);
    }
    g->k_cache = DNEW(a, uint16_t, t->kv_layer_floats * (size_t)c->n_layers);
    g->v_cache = DNEW(a, uint16_t, t->kv_layer_floats * (size_t)c->n_layers);
    g->rope_cos = DNEW(a, float, L * hd / 2);
    g->rope_sin = DNEW(a, float, L * hd / 2);
    g->x = DNEW(a, float, R * H);
    g->xn = DNEW(a, uint16_t, R * H);
    g->qkv = DNEW(a, float, R * (size_t)t->qkv_dim);
    g->att = DNEW(a, uint16_t, R * (size_t)t->q_dim);
    g->gu = DNEW(a, float, R * 2 * I);
    g->act = DNEW(a, uint16_t, R * I);
    g->logits = DNEW(a, float, R * V);
    g->taps = DNEW(a, float, R * (size_t)c->n_layers * H);
    g->attn_scratch = DNEW(a, float, flint_cuda_attn_scratch_floats((int)R, c->n_heads, c->head_dim, (int)L));
    g->tokens = DNEW(a, int32_t, R);
    g->pos = DNEW(a, int32_t, R);
    g->row_seq = DNEW(a, int32_t, R);
    g->logit_rows = DNEW(a, int32_t, R);
    g->tables = DNEW(a, int32_t, R * (size_t)g->bt_stride);
}

/* --load-format dummy: offset + scale * u, u uniform in [-1, 1) from a hash of (seed, index), so
 * a shape's weights are the same on every run without a host copy. */
__global__ void fill_bf16_kernel(uint16_t *p, size_t n, uint64_t seed, float scale, float offset) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint64_t z = seed + (uint64_t)i * 0x9E3779B97F4A7C15ull;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        float u = (float)(z >> 40) * (2.0f / 16777216.0f) - 1.0f;
        p[i] = __bfloat16_as_ushort(__float2bfloat16_rn(offset + scale * u));
    }
}

static int fill(uint16_t *p, size_t n, uint64_t seed, float scale, float offset, cudaStream_t st, flint_err *err) {
    if (!p || !n) return 0;
    fill_bf16_kernel<<<1024, 256, 0, st>>>(p, n, seed, scale, offset);
    CUDA_OK(cudaGetLastError(), "random fill");
    return 0;
}

/* Random weights of the right shape, made on the device: norms 1, matrices uniform with variance
 * 1 / fan_in (activations keep their scale through the layers), the embedding +-0.05. */
static int fill_dummy(flint_target *t, struct flint_target_cuda *g, flint_err *err) {
    const flint_target_config *c = &t->cfg;
    size_t H = (size_t)c->hidden_size, V = (size_t)c->vocab_size, I = (size_t)c->intermediate_size;
    size_t hd = (size_t)c->head_dim;
    cudaStream_t st = g->stream;
    float sh = sqrtf(3.0f / (float)H), sq = sqrtf(3.0f / (float)t->q_dim), si = sqrtf(3.0f / (float)I);
    uint64_t seed = 0x5eed;
    if (fill(g->embed, V * H, seed++, 0.05f, 0, st, err) || fill(g->final_norm, H, seed++, 0, 1, st, err) ||
        (!c->tie_word_embeddings && fill(g->lm_head, V * H, seed++, sh, 0, st, err)))
        return -1;
    for (int l = 0; l < c->n_layers; l++) {
        cuda_layer *d = &g->layers[l];
        if (fill(d->attn_norm, H, seed++, 0, 1, st, err) || fill(d->wqkv, (size_t)t->qkv_dim * H, seed++, sh, 0, st, err) ||
            fill(d->q_norm, d->q_norm ? hd : 0, seed++, 0, 1, st, err) ||
            fill(d->k_norm, d->k_norm ? hd : 0, seed++, 0, 1, st, err) ||
            fill(d->wo, H * (size_t)t->q_dim, seed++, sq, 0, st, err) || fill(d->mlp_norm, H, seed++, 0, 1, st, err) ||
            fill(d->w_gate_up, 2 * I * H, seed++, sh, 0, st, err) || fill(d->w_down, H * I, seed++, si, 0, st, err))
            return -1;
    }
    CUDA_OK(cudaStreamSynchronize(st), "random weights");
    return 0;
}

int flint_target_debug_fill_kv(flint_target *t, uint64_t seed, flint_err *err) {
    struct flint_target_cuda *g = t->cuda;
    if (!g) return flint_err_set(err, FLINT_ERR_UNSUPPORTED, "target: random KV needs the CUDA forward");
    size_t n = t->kv_layer_floats * (size_t)t->cfg.n_layers;
    if (fill(g->k_cache, n, seed, 1, 0, g->stream, err) || fill(g->v_cache, n, seed + 1, 1, 0, g->stream, err)) return -1;
    CUDA_OK(cudaStreamSynchronize(g->stream), "random KV");
    return 0;
}

/* fp32 host weights (exact copies of bf16 files; rounded once when the file is f32/f16) -> bf16 */
static int upload(uint16_t *dst, const float *src, size_t n, uint16_t *stage, size_t stage_n, flint_err *err) {
    for (size_t off = 0; off < n; off += stage_n) {
        size_t m = n - off < stage_n ? n - off : stage_n;
        for (size_t i = 0; i < m; i++) stage[i] = flint_bf16_from_f32(src[off + i]);
        CUDA_OK(cudaMemcpy(dst + off, stage, m * sizeof(uint16_t), cudaMemcpyHostToDevice), "weight upload");
    }
    return 0;
}

int flint_target_cuda_init(flint_target *t, flint_err *err) {
    const flint_target_config *c = &t->cfg;
    const flint_target_options *o = &t->opts;
    int n_dev = 0;
    if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev < 1)
        return flint_err_set(err, FLINT_ERR_UNSUPPORTED, "target: device cuda was asked for, but no CUDA device is "
                             "present");
    if (c->n_heads / c->n_kv_heads > FLINT_CUDA_ATTN_MAX_GROUP || c->head_dim > FLINT_CUDA_ATTN_MAX_HEAD_DIM ||
        c->head_dim % 8 || c->hidden_size % 8 || c->intermediate_size % 8)
        return flint_err_set(err, FLINT_ERR_UNSUPPORTED, "target (CUDA): head_dim %d, %d query heads per KV head, "
                             "hidden %d, intermediate %d: the kernels need head_dim <= %d and a multiple of 8, at "
                             "most %d heads per KV head, and sizes that are multiples of 8", c->head_dim,
                             c->n_heads / c->n_kv_heads, c->hidden_size, c->intermediate_size,
                             FLINT_CUDA_ATTN_MAX_HEAD_DIM, FLINT_CUDA_ATTN_MAX_GROUP);
    struct flint_target_cuda *g = (struct flint_target_cuda *)flint_xcalloc(1, sizeof *g);
    t->cuda = g;
    g->layers = (cuda_layer *)flint_xcalloc((size_t)c->n_layers, sizeof(cuda_layer));
    g->bt_stride = (o->max_len + o->kv_block_size - 1) / o->kv_block_size;
    dev_arena m = {NULL, 0};
    carve(t, g, &m);
    g->bytes = m.used;
    void *base = NULL;
    CUDA_OK(cudaMalloc(&base, g->bytes), "cudaMalloc of weights, KV pool and scratch");
    g->base = base;
    dev_arena a = {(char *)base, 0};
    carve(t, g, &a);
    FLINT_ASSERT(a.used == g->bytes);
    CUDA_OK(cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking), "stream");

    size_t H = (size_t)c->hidden_size, V = (size_t)c->vocab_size, I = (size_t)c->intermediate_size;
    size_t hd = (size_t)c->head_dim, stage_n = (size_t)1 << 22;
    uint16_t *stage = o->dummy_shape ? NULL : (uint16_t *)flint_xmalloc(stage_n * sizeof(uint16_t));
    int rc = o->dummy_shape ? fill_dummy(t, g, err) : upload(g->embed, t->w.embed, V * H, stage, stage_n, err) ||
             upload(g->final_norm, t->w.final_norm, H, stage, stage_n, err) ||
             (!c->tie_word_embeddings && upload(g->lm_head, t->w.lm_head, V * H, stage, stage_n, err));
    for (int l = 0; !rc && !o->dummy_shape && l < c->n_layers; l++) {
        const flint_target_layer *h = &t->w.layers[l];
        cuda_layer *d = &g->layers[l];
        rc = upload(d->attn_norm, h->attn_norm, H, stage, stage_n, err) ||
             upload(d->wqkv, h->wqkv, (size_t)t->qkv_dim * H, stage, stage_n, err) ||
             (d->q_norm && upload(d->q_norm, h->q_norm, hd, stage, stage_n, err)) ||
             (d->k_norm && upload(d->k_norm, h->k_norm, hd, stage, stage_n, err)) ||
             upload(d->wo, h->wo, H * (size_t)t->q_dim, stage, stage_n, err) ||
             upload(d->mlp_norm, h->mlp_norm, H, stage, stage_n, err) ||
             upload(d->w_gate_up, h->w_gate_up, 2 * I * H, stage, stage_n, err) ||
             upload(d->w_down, h->w_down, H * I, stage, stage_n, err);
    }
    free(stage);
    if (rc) return -1;
    size_t rope_n = (size_t)o->max_len * hd / 2;
    CUDA_OK(cudaMemcpy(g->rope_cos, t->s.rope_cos, rope_n * sizeof(float), cudaMemcpyHostToDevice), "rope table");
    CUDA_OK(cudaMemcpy(g->rope_sin, t->s.rope_sin, rope_n * sizeof(float), cudaMemcpyHostToDevice), "rope table");
    size_t R = (size_t)o->max_rows;
    g->h_seq_map = (int32_t *)flint_xmalloc(sizeof(int32_t) * R);
    g->h_row_seq = (int32_t *)flint_xmalloc(sizeof(int32_t) * R);
    g->h_tables = (int32_t *)flint_xmalloc(sizeof(int32_t) * R * (size_t)g->bt_stride);
    cudaDeviceProp prop;
    CUDA_OK(cudaGetDeviceProperties(&prop, 0), "device properties");
    flint_log_info("target (CUDA): %s; %.1f MiB on the device (bf16 weights%s, bf16 KV pool %d x %d tokens, "
                   "scratch for %d rows)", prop.name, (double)g->bytes / (1 << 20),
                   o->dummy_shape ? " (random, dummy)" : "", o->kv_blocks, o->kv_block_size, o->max_rows);
    return 0;
}

void flint_target_cuda_free(flint_target *t) {
    struct flint_target_cuda *g = t->cuda;
    if (!g) return;
    if (g->stream) cudaStreamDestroy(g->stream);
    if (g->base) cudaFree(g->base);
    free(g->layers);
    free(g->h_seq_map);
    free(g->h_row_seq);
    free(g->h_tables);
    free(g);
    t->cuda = NULL;
}

size_t flint_target_device_bytes(const flint_target *t) { return t->cuda ? t->cuda->bytes : 0; }

/* The batch (validated by the caller, as for the CPU forward) on the device. Sequences are
 * renumbered in order of first use so only the tables of rows in this batch travel. */
int flint_target_forward_cuda(flint_target *t, const flint_target_batch *b, flint_err *err) {
    struct flint_target_cuda *g = t->cuda;
    const flint_target_config *c = &t->cfg;
    const flint_target_options *o = &t->opts;
    cudaStream_t st = g->stream;
    flint_cuda_stream s = (flint_cuda_stream)st;
    int R = b->n_rows, H = c->hidden_size, I = c->intermediate_size, bs = o->kv_block_size;
    int n_used = 0, max_ctx = 1;
    if (b->n_taps > c->n_layers)
        return flint_err_set(err, FLINT_ERR_INVALID, "target forward: %d taps; the CUDA forward takes at most one per "
                             "layer (%d)", b->n_taps, c->n_layers);
    for (int r = 0; r < R; r++) {
        int sq = b->row_seq[r], k;
        for (k = 0; k < n_used && g->h_seq_map[k] != sq; k++) {}
        if (k == n_used) {
            g->h_seq_map[n_used++] = sq;
            memset(g->h_tables + (size_t)k * g->bt_stride, 0, sizeof(int32_t) * (size_t)g->bt_stride);
        }
        g->h_row_seq[r] = k;
        /* the rows that reach furthest decide how much of the table is read */
        int need = b->pos[r] / bs + 1;
        memcpy(g->h_tables + (size_t)k * g->bt_stride, b->block_tables[sq], sizeof(int32_t) * (size_t)need);
        if (b->pos[r] + 1 > max_ctx) max_ctx = b->pos[r] + 1;
    }
    CUDA_OK(cudaMemcpyAsync(g->tokens, b->tokens, sizeof(int32_t) * R, cudaMemcpyHostToDevice, st), "batch upload");
    CUDA_OK(cudaMemcpyAsync(g->pos, b->pos, sizeof(int32_t) * R, cudaMemcpyHostToDevice, st), "batch upload");
    CUDA_OK(cudaMemcpyAsync(g->row_seq, g->h_row_seq, sizeof(int32_t) * R, cudaMemcpyHostToDevice, st), "batch upload");
    CUDA_OK(cudaMemcpyAsync(g->tables, g->h_tables, sizeof(int32_t) * (size_t)n_used * g->bt_stride,
                            cudaMemcpyHostToDevice, st), "batch upload");
    if (b->n_logit_rows > 0)
        CUDA_OK(cudaMemcpyAsync(g->logit_rows, b->logit_rows, sizeof(int32_t) * b->n_logit_rows,
                                cudaMemcpyHostToDevice, st), "batch upload");

    flint_cuda_embed(g->x, g->embed, g->tokens, R, H, s);
    for (int l = 0; l < c->n_layers; l++) {
        const cuda_layer *ly = &g->layers[l];
        uint16_t *kc = g->k_cache + (size_t)l * t->kv_layer_floats, *vc = g->v_cache + (size_t)l * t->kv_layer_floats;
        flint_cuda_rmsnorm(g->xn, H, g->x, H, NULL, ly->attn_norm, R, H, c->rms_norm_eps, s);
        flint_cuda_gemm(g->qkv, t->qkv_dim, g->xn, H, ly->wqkv, R, t->qkv_dim, H, 0, s);
        flint_cuda_qk_norm_rope(g->qkv, t->qkv_dim, R, c->n_heads, ly->q_norm, c->n_kv_heads, ly->k_norm, c->head_dim,
                                c->rms_norm_eps, g->rope_cos, g->rope_sin, g->pos, s);
        flint_cuda_kv_store(kc, vc, g->qkv + t->q_dim, g->qkv + t->q_dim + t->kv_dim, t->qkv_dim, g->pos, g->row_seq,
                            g->tables, g->bt_stride, R, c->n_kv_heads, c->head_dim, bs, s);
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
        a.n_heads = c->n_heads;
        a.n_kv_heads = c->n_kv_heads;
        a.head_dim = c->head_dim;
        a.block_size = bs;
        a.max_ctx = max_ctx;
        a.scratch = g->attn_scratch;
        flint_cuda_attention(&a, s);
        flint_cuda_gemm(g->x, H, g->att, t->q_dim, ly->wo, R, H, t->q_dim, 1, s);
        flint_cuda_rmsnorm(g->xn, H, g->x, H, NULL, ly->mlp_norm, R, H, c->rms_norm_eps, s);
        flint_cuda_gemm(g->gu, 2 * I, g->xn, H, ly->w_gate_up, R, 2 * I, H, 0, s);
        flint_cuda_swiglu(g->act, I, g->gu, 2 * I, R, I, s);
        flint_cuda_gemm(g->x, H, g->act, I, ly->w_down, R, H, I, 1, s);
        for (int k = 0; k < b->n_taps; k++)
            if (b->tap_layers[k] == l)
                CUDA_OK(cudaMemcpy2DAsync(g->taps + (size_t)k * H, sizeof(float) * (size_t)b->n_taps * H, g->x,
                                          sizeof(float) * H, sizeof(float) * H, R, cudaMemcpyDeviceToDevice, st),
                        "tap copy");
    }
    if (b->n_logit_rows > 0) {
        flint_cuda_rmsnorm(g->xn, H, g->x, H, g->logit_rows, g->final_norm, b->n_logit_rows, H, c->rms_norm_eps, s);
        flint_cuda_gemm(g->logits, c->vocab_size, g->xn, H, g->lm_head, b->n_logit_rows, c->vocab_size, H, 0, s);
        if (!b->logits_on_device)
            CUDA_OK(cudaMemcpyAsync(b->logits, g->logits, sizeof(float) * (size_t)b->n_logit_rows * c->vocab_size,
                                    cudaMemcpyDeviceToHost, st), "logits download");
    }
    if (b->n_taps > 0)
        CUDA_OK(cudaMemcpyAsync(b->taps, g->taps, sizeof(float) * (size_t)R * b->n_taps * H, cudaMemcpyDeviceToHost, st),
                "taps download");
    CUDA_OK(cudaStreamSynchronize(st), "forward");
    return 0;
}
