/* Opening a target model: options are resolved and checked, then one arena is sized for the fp32
 * weights (converted from f32/f16/bf16 safetensors into fused QKV and gate|up layouts), the paged
 * KV pool, the RoPE tables and the per-row scratch of the largest allowed forward. Nothing is
 * allocated after this, so a forward cannot fail for lack of memory. */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/safetensors.h"
#include "target/ops_cpu.h"
#include "target/target_internal.h"

void flint_target_options_default(flint_target_options *o) {
    memset(o, 0, sizeof *o);
    o->kv_block_size = 16;
    o->kv_blocks = 0;
    o->max_seqs = 1;
    o->max_len = 0;
    o->max_rows = 512;
    o->n_threads = 0;
    o->graph_max_rows = 512;
    o->tp_timeout_s = 120;
}

const flint_target_config *flint_target_get_config(const flint_target *t) { return &t->cfg; }
int flint_target_kv_block_size(const flint_target *t) { return t->opts.kv_block_size; }
int flint_target_kv_blocks(const flint_target *t) { return t->opts.kv_blocks; }
const float *flint_target_embed_weights(const flint_target *t) { return t->w.embed; }
const float *flint_target_lm_head_weights(const flint_target *t) { return t->w.lm_head; }
int flint_target_n_threads(const flint_target *t) { return t->n_threads; }
const flint_target_options *flint_target_get_options(const flint_target *t) { return &t->opts; }
#ifndef FLINT_HAVE_CUDA
size_t flint_target_device_bytes(const flint_target *t) { (void)t; return 0; }
void flint_target_get_device_view(const flint_target *t, flint_target_device_view *v) {
    (void)t;
    memset(v, 0, sizeof *v);
}
void flint_target_graph_stats(const flint_target *t, flint_target_graph_info *info) {
    (void)t;
    memset(info, 0, sizeof *info);
}
int flint_target_capture_graphs(flint_target *t, int n_taps, const int32_t *tap_layers, flint_err *err) {
    (void)t, (void)n_taps, (void)tap_layers, (void)err;
    return 0;
}
int flint_tp_nccl_open_all(int n, const int *devices, flint_tp_comm *comms, flint_err *err) {
    (void)n, (void)devices, (void)comms;
    return flint_err_set(err, FLINT_ERR_UNSUPPORTED, "tensor parallel over GPUs: no CUDA backend in this build");
}
int flint_tp_nccl_unique_id(unsigned char id[128], flint_err *err) {
    (void)id;
    return flint_err_set(err, FLINT_ERR_UNSUPPORTED, "tensor parallel over GPUs: no CUDA backend in this build");
}
int flint_tp_nccl_open_rank(int n, int rank, int device, const unsigned char id[128], flint_tp_comm *comm,
                            flint_err *err) {
    (void)n, (void)rank, (void)device, (void)id, (void)comm;
    return flint_err_set(err, FLINT_ERR_UNSUPPORTED, "tensor parallel over GPUs: no CUDA backend in this build");
}
void flint_tp_nccl_close(flint_tp_comm *comm) { (void)comm; }
void flint_tp_nccl_abort(flint_tp_comm *comm) { (void)comm; }
int flint_target_debug_tp_exchange(flint_target *t, int rows, int reps, double *ms, flint_err *err) {
    (void)t, (void)rows, (void)reps, (void)ms;
    return flint_err_set(err, FLINT_ERR_UNSUPPORTED, "target: no CUDA backend in this build");
}
int flint_target_debug_fill_kv(flint_target *t, uint64_t seed, flint_err *err) {
    (void)t, (void)seed;
    return flint_err_set(err, FLINT_ERR_UNSUPPORTED, "target: no CUDA backend in this build");
}
void flint_target_cuda_tuning(int pdl, int wgmma, int kernel_pdl, int gemm_early) {
    (void)pdl, (void)wgmma, (void)kernel_pdl, (void)gemm_early;
}
#endif

/* Fill in the zeros (defaults that depend on the model) and refuse what cannot work. */
static int resolve_options(const flint_target_config *c, const flint_target_options *in, flint_target_options *o,
                           flint_err *err) {
    *o = *in;
    int bs = o->kv_block_size;
    if (bs < 1 || bs > 65536 || (bs & (bs - 1)) != 0)
        return flint_err_set(err, FLINT_ERR_INVALID, "target options: kv_block_size %d is not a power of two in "
                             "1..65536", bs);
    if (o->max_len == 0) o->max_len = c->max_position_embeddings;
    if (o->max_len < 1 || o->max_len > c->max_position_embeddings)
        return flint_err_set(err, FLINT_ERR_INVALID,
                             "target options: max_len %d is outside 1..%d (max_position_embeddings)", o->max_len,
                             c->max_position_embeddings);
    if (o->max_seqs < 1)
        return flint_err_set(err, FLINT_ERR_INVALID, "target options: max_seqs %d must be at least 1", o->max_seqs);
    if (!(o->gpu_memory_utilization >= 0 && o->gpu_memory_utilization < 1))
        return flint_err_set(err, FLINT_ERR_INVALID, "target options: gpu_memory_utilization %g is outside [0, 1)",
                             o->gpu_memory_utilization);
    if (o->gpu_memory_utilization > 0 && (o->device != FLINT_TARGET_CUDA || in->kv_blocks))
        return flint_err_set(err, FLINT_ERR_INVALID, "target options: gpu_memory_utilization sizes the KV pool of the "
                             "CUDA forward; it needs device cuda and no explicit kv_blocks");
    if (o->kv_blocks == 0) {
        int64_t per_seq = ((int64_t)o->max_len + bs - 1) / bs;
        int64_t n = per_seq * o->max_seqs;
        if (n > INT32_MAX)
            return flint_err_set(err, FLINT_ERR_INVALID, "target options: %d sequences of %d tokens need too many "
                                 "KV blocks", o->max_seqs, o->max_len);
        o->kv_blocks = (int)n;
    }
    if (o->kv_blocks < 1)
        return flint_err_set(err, FLINT_ERR_INVALID, "target options: kv_blocks %d must be at least 1", o->kv_blocks);
    if (o->max_rows < 1 || o->max_rows > (1 << 20))
        return flint_err_set(err, FLINT_ERR_INVALID, "target options: max_rows %d is outside 1..%d", o->max_rows,
                             1 << 20);
    if (o->n_graph_sizes < 0 || o->n_graph_sizes > FLINT_TARGET_MAX_GRAPH_SIZES)
        return flint_err_set(err, FLINT_ERR_INVALID, "target options: %d CUDA graph sizes; at most %d",
                             o->n_graph_sizes, FLINT_TARGET_MAX_GRAPH_SIZES);
    for (int i = 0; i < o->n_graph_sizes; i++)
        if (o->graph_sizes[i] < 1 || o->graph_sizes[i] > o->max_rows || (i && o->graph_sizes[i] <= o->graph_sizes[i - 1]))
            return flint_err_set(err, FLINT_ERR_INVALID, "target options: CUDA graph size %d (entry %d) must be in "
                                 "1..%d (max_rows) and above the one before", o->graph_sizes[i], i, o->max_rows);
    if (o->n_graph_sizes > 0) o->graph_max_rows = o->graph_sizes[o->n_graph_sizes - 1];
    if (o->n_threads < 0 || o->n_threads > 4096)
        return flint_err_set(err, FLINT_ERR_INVALID, "target options: n_threads %d is outside 0..4096",
                             o->n_threads);
    if (o->device != FLINT_TARGET_CPU && o->device != FLINT_TARGET_CUDA)
        return flint_err_set(err, FLINT_ERR_INVALID, "target options: device %d is neither CPU (0) nor CUDA (1)",
                             o->device);
#ifndef FLINT_HAVE_CUDA
    if (o->device == FLINT_TARGET_CUDA)
        return flint_err_set(err, FLINT_ERR_UNSUPPORTED, "target: device cuda was asked for, but this build has no "
                             "CUDA backend (no nvcc at configure time, or -DFLINT_CUDA=OFF)");
#endif
    if (o->n_threads == 0) o->n_threads = omp_get_max_threads();
    if (o->n_threads < 1) o->n_threads = 1;
    return 0;
}

/* Carve every buffer from `a`. Run once on a measuring arena (base NULL, unlimited) to learn the
 * size, then on the real one: one function, so the two can never disagree. */
static void carve(flint_target *t, flint_arena *a) {
    const flint_target_config *c = &t->cfg;
    const flint_target_options *o = &t->opts;
    size_t H = (size_t)c->hidden_size, V = (size_t)c->vocab_size, I = (size_t)t->ni;
    size_t hd = (size_t)c->head_dim, R = (size_t)o->max_rows, L = (size_t)o->max_len;
    int qk_norm = c->arch == FLINT_ARCH_QWEN3;

    t->w.layers = flint_arena_new(a, flint_target_layer, c->n_layers);
    int host_weights = !o->dummy_shape, host_forward = o->device == FLINT_TARGET_CPU;
    if (host_weights) {
        t->w.embed = flint_arena_new(a, float, V * H);
        t->w.final_norm = flint_arena_new(a, float, H);
        /* every rank embeds every token; the LM head holds this rank's vocabulary rows (a view of
         * the embedding when tied) */
        if (c->tie_word_embeddings) t->w.lm_head = t->w.embed ? t->w.embed + (size_t)t->v0 * H : NULL;
        else t->w.lm_head = flint_arena_new(a, float, (size_t)t->nv * H);
        for (int l = 0; l < c->n_layers; l++) {
            flint_target_layer tmp, *ly = a->base ? &t->w.layers[l] : &tmp;
            ly->attn_norm = flint_arena_new(a, float, H);
            ly->wqkv = flint_arena_new(a, float, (size_t)t->qkv_dim * H);
            ly->q_norm = qk_norm ? flint_arena_new(a, float, hd) : NULL;
            ly->k_norm = qk_norm ? flint_arena_new(a, float, hd) : NULL;
            ly->wo = flint_arena_new(a, float, H * (size_t)t->q_dim);
            ly->mlp_norm = flint_arena_new(a, float, H);
            ly->w_gate_up = flint_arena_new(a, float, 2 * I * H);
            ly->w_down = flint_arena_new(a, float, H * I);
        }
    }
    flint_target_state *s = &t->s;
    s->rope_cos = flint_arena_new(a, float, L * hd / 2);
    s->rope_sin = flint_arena_new(a, float, L * hd / 2);
    if (!host_forward) return; /* the CUDA forward keeps its KV pool and scratch on the device */
    s->k_cache = flint_arena_new(a, float, t->kv_layer_floats * (size_t)c->n_layers);
    s->v_cache = flint_arena_new(a, float, t->kv_layer_floats * (size_t)c->n_layers);
    s->x = flint_arena_new(a, float, R * H);
    s->xn = flint_arena_new(a, float, R * H);
    s->qkv = flint_arena_new(a, float, R * (size_t)t->qkv_dim);
    s->att = flint_arena_new(a, float, R * (size_t)t->q_dim);
    s->gu = flint_arena_new(a, float, R * 2 * I);
    s->act = flint_arena_new(a, float, R * I);
    s->scores = flint_arena_new(a, float, (size_t)t->n_threads * L);
    if (o->tp) {
        s->part = flint_arena_new(a, float, R * H);
        s->lpart = flint_arena_new(a, float, R * (size_t)t->nv);
    }
}

/* This rank's share of heads, intermediate rows and vocabulary (everything without tensor
 * parallelism), or a message saying which size does not split. */
static int shares(flint_target *t, flint_err *err) {
    const flint_target_config *c = &t->cfg;
    const flint_tp_comm *tp = t->opts.tp;
    int n = 1, r = 0;
    if (tp) {
        n = tp->n_ranks, r = tp->rank;
        const int cuda = t->opts.device == FLINT_TARGET_CUDA;
        if (n < 1 || r < 0 || r >= n || (cuda ? !tp->nccl : !tp->all_reduce || !tp->all_gather))
            return flint_err_set(err, FLINT_ERR_INVALID, "tensor parallel: rank %d of %d, or a missing collective (%s)",
                                 r, n, cuda ? "the CUDA forward needs an NCCL communicator" : "host functions");
        const char *bad = c->n_heads % n ? "num_attention_heads"
                          : (c->n_kv_heads % n && n % c->n_kv_heads) ? "num_key_value_heads (nor a divisor of it)"
                          : c->intermediate_size % n ? "intermediate_size"
                          : c->vocab_size % n ? "vocab_size" : NULL;
        if (bad)
            return flint_err_set(err, FLINT_ERR_UNSUPPORTED, "tensor parallel size %d does not divide %s (heads %d/%d, "
                                 "intermediate %d, vocab %d)", n, bad, c->n_heads, c->n_kv_heads, c->intermediate_size,
                                 c->vocab_size);
    }
    t->nh = c->n_heads / n, t->h0 = r * t->nh;
    if (c->n_kv_heads >= n) t->nkv = c->n_kv_heads / n, t->kv0 = r * t->nkv;
    else t->nkv = 1, t->kv0 = r * c->n_kv_heads / n; /* replicated: the KV head of this rank's query heads */
    t->ni = c->intermediate_size / n, t->i0 = r * t->ni;
    t->nv = c->vocab_size / n, t->v0 = r * t->nv;
    return 0;
}

typedef struct loader {
    const flint_st *st;
    const char *dir;
} loader;

static int load(const loader *ld, const char *name, int64_t rows, int64_t cols, float *dst, flint_err *err) {
    return flint_st_load_f32(ld->st, ld->dir, name, rows, cols, 0, rows, 0, cols, dst, err);
}

/* Rows [r0, r0 + nr) x columns [c0, c0 + nc) of a [rows][cols] tensor: a rank's shard. */
static int load_slice(const loader *ld, const char *name, int64_t rows, int64_t cols, int64_t r0, int64_t nr,
                      int64_t c0, int64_t nc, float *dst, flint_err *err) {
    return flint_st_load_f32(ld->st, ld->dir, name, rows, cols, r0, nr, c0, nc, dst, err);
}

static int load_weights(flint_target *t, const loader *ld, flint_err *err) {
    const flint_target_config *c = &t->cfg;
    int64_t H = c->hidden_size, V = c->vocab_size, I = t->ni, hd = c->head_dim;
    int64_t qd = t->q_dim, kvd = t->kv_dim;
    char n[256];
    if (load(ld, "model.embed_tokens.weight", V, H, (float *)t->w.embed, err) ||
        load(ld, "model.norm.weight", H, 0, (float *)t->w.final_norm, err))
        return -1;
    /* tied: HF ignores a stored lm_head.weight too */
    if (!c->tie_word_embeddings && load_slice(ld, "lm_head.weight", V, H, t->v0, t->nv, 0, H, (float *)t->w.lm_head, err))
        return -1;
    int64_t qg = (int64_t)c->n_heads * hd, kvg = (int64_t)c->n_kv_heads * hd, Ig = c->intermediate_size;
    for (int l = 0; l < c->n_layers; l++) {
        flint_target_layer *ly = &t->w.layers[l];
        float *qkv = (float *)ly->wqkv, *gu = (float *)ly->w_gate_up;
#define LOAD(suffix, rows, cols, dst)                                                                       \
    do {                                                                                                \
        snprintf(n, sizeof n, "model.layers.%d.%s", l, suffix);                                         \
        if (load(ld, n, rows, cols, dst, err)) return -1;                                               \
    } while (0)
#define SLICE(suffix, rows, cols, r0, nr, c0, nc, dst)                                                  \
    do {                                                                                                \
        snprintf(n, sizeof n, "model.layers.%d.%s", l, suffix);                                         \
        if (load_slice(ld, n, rows, cols, r0, nr, c0, nc, dst, err)) return -1;                         \
    } while (0)
        /* column-parallel: this rank's output rows; row-parallel: its input columns */
        LOAD("input_layernorm.weight", H, 0, (float *)ly->attn_norm);
        SLICE("self_attn.q_proj.weight", qg, H, (int64_t)t->h0 * hd, qd, 0, H, qkv);
        SLICE("self_attn.k_proj.weight", kvg, H, (int64_t)t->kv0 * hd, kvd, 0, H, qkv + qd * H);
        SLICE("self_attn.v_proj.weight", kvg, H, (int64_t)t->kv0 * hd, kvd, 0, H, qkv + (qd + kvd) * H);
        if (ly->q_norm) {
            LOAD("self_attn.q_norm.weight", hd, 0, (float *)ly->q_norm);
            LOAD("self_attn.k_norm.weight", hd, 0, (float *)ly->k_norm);
        }
        SLICE("self_attn.o_proj.weight", H, qg, 0, H, (int64_t)t->h0 * hd, qd, (float *)ly->wo);
        LOAD("post_attention_layernorm.weight", H, 0, (float *)ly->mlp_norm);
        SLICE("mlp.gate_proj.weight", Ig, H, t->i0, I, 0, H, gu);
        SLICE("mlp.up_proj.weight", Ig, H, t->i0, I, 0, H, gu + I * H);
        SLICE("mlp.down_proj.weight", H, Ig, 0, H, t->i0, I, (float *)ly->w_down);
#undef LOAD
#undef SLICE
    }
    return 0;
}

flint_target *flint_target_open(const char *dir, const flint_target_options *opts, flint_err *err) {
    flint_target_options def;
    if (!opts) {
        flint_target_options_default(&def);
        opts = &def;
    }
    flint_target *t = flint_xcalloc(1, sizeof *t);
    flint_st *st = NULL;
    if ((opts->dummy_shape ? flint_target_shape_config(opts->dummy_shape, &t->cfg, err)
                           : flint_target_config_load(dir, &t->cfg, err)) ||
        resolve_options(&t->cfg, opts, &t->opts, err))
        goto fail;
    if (opts->dummy_shape && opts->device != FLINT_TARGET_CUDA) {
        flint_err_set(err, FLINT_ERR_INVALID, "target: dummy weights (model shape %s) are made on the device: use "
                      "device cuda", opts->dummy_shape);
        goto fail;
    }
    if (opts->dummy_shape) dir = opts->dummy_shape; /* for messages */
    const flint_target_config *c = &t->cfg;
    t->n_threads = t->opts.n_threads;
    if (shares(t, err)) goto fail;
    t->q_dim = t->nh * c->head_dim;
    t->kv_dim = t->nkv * c->head_dim;
    t->qkv_dim = t->q_dim + 2 * t->kv_dim;
    t->kv_layer_floats = (size_t)t->opts.kv_blocks * (size_t)t->opts.kv_block_size * (size_t)t->kv_dim;
    double kv_bytes = 2.0 * 4.0 * (double)t->opts.kv_blocks * t->opts.kv_block_size * t->kv_dim * c->n_layers;
    if (kv_bytes > (double)((size_t)1 << 46)) {
        flint_err_set(err, FLINT_ERR_INVALID, "%s: a KV pool of %d blocks x %d tokens needs %.0f GiB", dir,
                      t->opts.kv_blocks, t->opts.kv_block_size, kv_bytes / (1u << 30));
        goto fail;
    }

    flint_arena measure;
    flint_arena_init_from(&measure, NULL, SIZE_MAX);
    carve(t, &measure);
    size_t bytes = measure.used;
    if (flint_arena_init(&t->arena, bytes)) {
        flint_err_set(err, FLINT_ERR_NOMEM, "%s: cannot allocate %.1f MiB for weights, KV pool and scratch", dir,
                      (double)bytes / (1 << 20));
        goto fail;
    }
    carve(t, &t->arena);
    FLINT_ASSERT(t->arena.used == bytes);

    if (!t->opts.dummy_shape) {
        st = flint_st_open_dir(dir, err);
        if (!st) goto fail;
        loader ld = {st, dir};
        if (load_weights(t, &ld, err)) goto fail;
        flint_st_close(st);
        st = NULL;
    }
    /* The KV pool is not cleared: a position is always written before it is read. */
    flint_ops_rope_table(t->s.rope_cos, t->s.rope_sin, t->opts.max_len, c->head_dim, c->rope_theta);
#ifdef FLINT_HAVE_CUDA
    if (t->opts.device == FLINT_TARGET_CUDA && flint_target_cuda_init(t, err)) goto fail;
#endif

    flint_log_info("target: %s, %d layers, hidden %d, heads %d/%d x %d, vocab %d%s; %.1f MiB; KV pool %d x %d "
                   "tokens; %d threads",
                   c->arch == FLINT_ARCH_QWEN3 ? "Qwen3ForCausalLM" : "LlamaForCausalLM", c->n_layers,
                   c->hidden_size, c->n_heads, c->n_kv_heads, c->head_dim, c->vocab_size,
                   c->tie_word_embeddings ? " (tied)" : "", (double)bytes / (1 << 20), t->opts.kv_blocks,
                   t->opts.kv_block_size, t->n_threads);
    return t;
fail:
    if (st) flint_st_close(st);
    flint_target_close(t);
    return NULL;
}

void flint_target_close(flint_target *t) {
    if (!t) return;
#ifdef FLINT_HAVE_CUDA
    flint_target_cuda_free(t);
#endif
    flint_arena_free(&t->arena);
    free(t);
}
