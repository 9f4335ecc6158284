/* Opening a DSpark drafter: config (drafter/config.c), validation against the target, one arena
 * for fp32 weights, the context K/V pool (same block ids and block size as the target's KV) and
 * the scratch of the largest draft and encode calls. The embedding and LM head are taken from
 * the checkpoint when it stores copies, else shared with the target (the shipped drafters leave
 * them out to stay small; see models/flint-tiny-dspark/README.md). On CUDA (options.device) the
 * host arena holds only the fp32 weights, long enough for forward_cuda.cu to upload them as
 * bf16; the K/V pool and scratch live on the device. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/safetensors.h"
#include "drafter/drafter_internal.h"
#include "target/ops_cpu.h"

void flint_drafter_options_default(flint_drafter_options *o) {
    memset(o, 0, sizeof *o);
    o->max_reqs = 64;
    o->max_rows = 0;
    o->n_threads = 0;
    o->enforce_eager = 0;
}

const flint_drafter_config *flint_drafter_get_config(const flint_drafter *d) { return &d->cfg; }
const char *flint_drafter_describe(const flint_drafter *d) { return d->desc; }

static void carve(flint_drafter *d, flint_arena *a, int own_embed, int own_head) {
    const flint_drafter_config *c = &d->cfg;
    size_t H = c->hidden_size, I = d->ni, V = c->vocab_size, Vd = c->draft_vocab_size;
    size_t r = c->markov_rank, hd = c->head_dim, nt = d->n_threads;
    size_t R = (size_t)d->opts.max_reqs * c->block_size, C = d->opts.max_rows;
    size_t L = (size_t)d->max_len + c->block_size;
    flint_drafter_weights *w = &d->w;
    w->layers = flint_arena_new(a, flint_drafter_layer, c->n_layers);
    if (own_embed) w->embed = flint_arena_new(a, float, V * H);
    if (own_head) w->lm_head = flint_arena_new(a, float, (size_t)d->nv * H);
    w->fc = flint_arena_new(a, float, H * c->n_taps * H);
    w->hidden_norm = flint_arena_new(a, float, H);
    w->final_norm = flint_arena_new(a, float, H);
    if (r) {
        w->markov_w1 = flint_arena_new(a, float, V * r);
        w->markov_w2 = flint_arena_new(a, float, Vd * r);
    }
    if (c->has_confidence) w->conf_w = flint_arena_new(a, float, H + (c->confidence_with_markov ? r : 0));
    if (Vd != V) w->d2t = flint_arena_new(a, int32_t, Vd);
    for (int l = 0; l < c->n_layers; l++) {
        flint_drafter_layer tmp, *ly = a->base ? &w->layers[l] : &tmp; /* measuring pass: no memory */
        ly->attn_norm = flint_arena_new(a, float, H);
        ly->wq = flint_arena_new(a, float, (size_t)d->q_dim * H);
        ly->wkv = flint_arena_new(a, float, 2 * (size_t)d->kv_dim * H);
        ly->q_norm = flint_arena_new(a, float, hd);
        ly->k_norm = flint_arena_new(a, float, hd);
        ly->wo = flint_arena_new(a, float, H * d->q_dim);
        ly->mlp_norm = flint_arena_new(a, float, H);
        ly->w_gate_up = flint_arena_new(a, float, 2 * I * H);
        ly->w_down = flint_arena_new(a, float, H * I);
    }
    if (d->opts.device != FLINT_TARGET_CPU) return; /* the CUDA drafter's state is on the device */
    flint_drafter_state *s = &d->s;
    s->k_cache = flint_arena_new(a, float, d->kv_layer_floats * c->n_layers);
    s->v_cache = flint_arena_new(a, float, d->kv_layer_floats * c->n_layers);
    s->rope_cos = flint_arena_new(a, float, L * hd / 2);
    s->rope_sin = flint_arena_new(a, float, L * hd / 2);
    s->ctx = flint_arena_new(a, float, C * H);
    s->ckv = flint_arena_new(a, float, C * 2 * d->kv_dim);
    s->x = flint_arena_new(a, float, R * H);
    s->xn = flint_arena_new(a, float, R * H);
    s->q = flint_arena_new(a, float, R * d->q_dim);
    s->bkv = flint_arena_new(a, float, R * 2 * d->kv_dim);
    s->att = flint_arena_new(a, float, R * d->q_dim);
    s->gu = flint_arena_new(a, float, R * 2 * I);
    s->act = flint_arena_new(a, float, R * I);
    s->hfin = flint_arena_new(a, float, R * H);
    s->u = flint_arena_new(a, float, R * Vd);
    s->scores = flint_arena_new(a, float, nt * L);
    s->lk = flint_arena_new(a, float, nt * Vd);
    s->qk = flint_arena_new(a, float, nt * V);
    s->e = flint_arena_new(a, float, nt * (r ? r : 1));
    if (d->opts.tp) {
        s->part = flint_arena_new(a, float, R * H);
        s->upart = flint_arena_new(a, float, R * (size_t)d->nv);
    }
}

/* Where the drafter may run; the CUDA drafter shares the target's device tensors and stream. */
static int check_device(const flint_drafter_options *o, const flint_target *target, flint_err *err) {
    if (o->device != FLINT_TARGET_CPU && o->device != FLINT_TARGET_CUDA)
        return flint_err_set(err, FLINT_ERR_INVALID, "drafter options: device %d is neither CPU (0) nor CUDA (1)",
                             o->device);
    if (o->device == FLINT_TARGET_CPU) return 0;
#ifndef FLINT_HAVE_CUDA
    (void)target;
    return flint_err_set(err, FLINT_ERR_UNSUPPORTED, "drafter: device cuda was asked for, but this build has no CUDA "
                         "backend (no nvcc at configure time, or -DFLINT_CUDA=OFF)");
#else
    if (flint_target_get_options(target)->device != FLINT_TARGET_CUDA)
        return flint_err_set(err, FLINT_ERR_UNSUPPORTED, "drafter: device cuda needs the target on cuda too (it "
                             "shares the target's device embedding, LM head and stream); the target runs on the CPU");
    if (o->tp)
        return flint_err_set(err, FLINT_ERR_UNSUPPORTED, "drafter: tensor parallelism is not supported on cuda yet "
                             "(CPU only in this version)");
    return 0;
#endif
}

/* This rank's share, as the target splits it (target.c shares()). */
static int shares(flint_drafter *d, const flint_target *target, flint_err *err) {
    const flint_drafter_config *c = &d->cfg;
    const flint_tp_comm *tp = d->opts.tp;
    int n = tp ? tp->n_ranks : 1, r = tp ? tp->rank : 0;
    if (tp) {
        const flint_tp_comm *ttp = flint_target_get_options(target)->tp;
        if (!ttp || ttp->n_ranks != n || ttp->rank != r || !tp->all_reduce || !tp->all_gather)
            return flint_err_set(err, FLINT_ERR_INVALID, "drafter: tensor-parallel rank %d of %d needs the target's "
                                 "same rank", r, n);
        const char *bad = c->draft_vocab_size != c->vocab_size ? "a reduced draft vocabulary"
                          : c->n_heads % n ? "num_attention_heads"
                          : (c->n_kv_heads % n && n % c->n_kv_heads) ? "num_key_value_heads"
                          : c->intermediate_size % n ? "intermediate_size" : NULL;
        if (bad)
            return flint_err_set(err, FLINT_ERR_UNSUPPORTED, "drafter: tensor parallel size %d: cannot split %s", n,
                                 bad);
    }
    d->nh = c->n_heads / n, d->h0 = r * d->nh;
    if (c->n_kv_heads >= n) d->nkv = c->n_kv_heads / n, d->kv0 = r * d->nkv;
    else d->nkv = 1, d->kv0 = r * c->n_kv_heads / n;
    d->ni = c->intermediate_size / n, d->i0 = r * d->ni;
    d->nv = c->draft_vocab_size / n, d->v0 = r * d->nv;
    return 0;
}

static int load(const flint_st *st, const char *dir, const char *name, int64_t rows, int64_t cols, float *dst,
                flint_err *err) {
    return flint_st_load_f32(st, dir, name, rows, cols, 0, rows, 0, cols, dst, err);
}

/* Rows [r0, r0 + nr) x columns [c0, c0 + nc) of a [rows][cols] tensor: a rank's shard. */
static int load_slice(const flint_st *st, const char *dir, const char *name, int64_t rows, int64_t cols, int64_t r0,
                      int64_t nr, int64_t c0, int64_t nc, float *dst, flint_err *err) {
    return flint_st_load_f32(st, dir, name, rows, cols, r0, nr, c0, nc, dst, err);
}

static int load_weights(flint_drafter *d, const flint_st *st, const char *dir, int own_embed, int own_head,
                        flint_err *err) {
    const flint_drafter_config *c = &d->cfg;
    flint_drafter_weights *w = &d->w;
    int64_t H = c->hidden_size, I = d->ni, V = c->vocab_size, Vd = c->draft_vocab_size;
    int64_t r = c->markov_rank, hd = c->head_dim, qd = d->q_dim, kvd = d->kv_dim;
    int64_t qg = (int64_t)c->n_heads * hd, kvg = (int64_t)c->n_kv_heads * hd, Ig = c->intermediate_size;
    if ((own_embed && load(st, dir, "embed_tokens.weight", V, H, (float *)w->embed, err)) ||
        (own_head && load_slice(st, dir, "lm_head.weight", Vd, H, d->v0, d->nv, 0, H, (float *)w->lm_head, err)) ||
        load(st, dir, "fc.weight", H, H * c->n_taps, (float *)w->fc, err) ||
        load(st, dir, "hidden_norm.weight", H, 0, (float *)w->hidden_norm, err) ||
        load(st, dir, "norm.weight", H, 0, (float *)w->final_norm, err))
        return -1;
    if (r && (load(st, dir, "markov_head.markov_w1.weight", V, r, (float *)w->markov_w1, err) ||
              load(st, dir, "markov_head.markov_w2.weight", Vd, r, (float *)w->markov_w2, err)))
        return -1;
    if (c->has_confidence) {
        int64_t n = H + (c->confidence_with_markov ? r : 0);
        float b;
        if (load(st, dir, "confidence_head.proj.weight", 1, n, (float *)w->conf_w, err) ||
            load(st, dir, "confidence_head.proj.bias", 1, 0, &b, err))
            return -1;
        w->conf_b = b;
    }
    if (w->d2t) {
        const flint_tensor_info *ti = flint_st_find(st, "d2t");
        int64_t shape[1] = {Vd};
        if (!ti)
            return flint_err_set(err, FLINT_ERR_FORMAT, "%s: draft_vocab_size %lld < vocab %lld but tensor 'd2t' is "
                                 "missing", dir, (long long)Vd, (long long)V);
        if (!flint_st_expect(st, "d2t", 1, shape, err)) return -1;
        if (ti->dtype != FLINT_DT_I64 && ti->dtype != FLINT_DT_I32)
            return flint_err_set(err, FLINT_ERR_FORMAT, "%s: tensor 'd2t' must be I64 or I32 offsets", dir);
        for (int64_t i = 0; i < Vd; i++) {
            int64_t off = ti->dtype == FLINT_DT_I64 ? ((const int64_t *)ti->data)[i] : ((const int32_t *)ti->data)[i];
            if (i + off < 0 || i + off >= V)
                return flint_err_set(err, FLINT_ERR_FORMAT, "%s: d2t[%lld] = %lld maps outside the target "
                                     "vocabulary", dir, (long long)i, (long long)off);
            w->d2t[i] = (int32_t)(i + off); /* stored as absolute target ids */
        }
    }
    char n[256];
    for (int l = 0; l < c->n_layers; l++) {
        flint_drafter_layer *ly = &w->layers[l];
#define LOAD(suffix, rows, cols, dst)                                                                  \
    do {                                                                                           \
        snprintf(n, sizeof n, "layers.%d.%s", l, suffix);                                          \
        if (load(st, dir, n, rows, cols, dst, err)) return -1;                                     \
    } while (0)
#define SLICE(suffix, rows, cols, r0, nr, c0, nc, dst)                                                 \
    do {                                                                                           \
        snprintf(n, sizeof n, "layers.%d.%s", l, suffix);                                          \
        if (load_slice(st, dir, n, rows, cols, r0, nr, c0, nc, dst, err)) return -1;               \
    } while (0)
        LOAD("input_layernorm.weight", H, 0, (float *)ly->attn_norm);
        SLICE("self_attn.q_proj.weight", qg, H, (int64_t)d->h0 * hd, qd, 0, H, (float *)ly->wq);
        SLICE("self_attn.k_proj.weight", kvg, H, (int64_t)d->kv0 * hd, kvd, 0, H, (float *)ly->wkv);
        SLICE("self_attn.v_proj.weight", kvg, H, (int64_t)d->kv0 * hd, kvd, 0, H, (float *)ly->wkv + kvd * H);
        LOAD("self_attn.q_norm.weight", hd, 0, (float *)ly->q_norm);
        LOAD("self_attn.k_norm.weight", hd, 0, (float *)ly->k_norm);
        SLICE("self_attn.o_proj.weight", H, qg, 0, H, (int64_t)d->h0 * hd, qd, (float *)ly->wo);
        LOAD("post_attention_layernorm.weight", H, 0, (float *)ly->mlp_norm);
        SLICE("mlp.gate_proj.weight", Ig, H, d->i0, I, 0, H, (float *)ly->w_gate_up);
        SLICE("mlp.up_proj.weight", Ig, H, d->i0, I, 0, H, (float *)ly->w_gate_up + I * H);
        SLICE("mlp.down_proj.weight", H, Ig, 0, H, d->i0, I, (float *)ly->w_down);
#undef LOAD
#undef SLICE
    }
    return 0;
}

flint_drafter *flint_drafter_open(const char *dir, const flint_target *target, const flint_drafter_options *opts,
                                  flint_err *err) {
    flint_drafter_options def;
    if (!opts) {
        flint_drafter_options_default(&def);
        opts = &def;
    }
    flint_drafter *d = flint_xcalloc(1, sizeof *d);
    flint_st *st = NULL;
    const flint_target_config *tc = flint_target_get_config(target);
    const flint_target_options *to = flint_target_get_options(target);
    if (flint_drafter_config_load(dir, &d->cfg, err) || flint_drafter_config_check(dir, &d->cfg, tc, err)) goto fail;
    const flint_drafter_config *c = &d->cfg;
    d->opts = *opts;
    if (check_device(opts, target, err)) goto fail;
    int on_cuda = d->opts.device == FLINT_TARGET_CUDA;
    if (d->opts.max_reqs < 1 || d->opts.max_reqs > 4096) {
        flint_err_set(err, FLINT_ERR_INVALID, "drafter options: max_reqs %d is outside 1..4096", d->opts.max_reqs);
        goto fail;
    }
    if (d->opts.max_rows == 0) d->opts.max_rows = to->max_rows;
    if (d->opts.max_rows < 1) {
        flint_err_set(err, FLINT_ERR_INVALID, "drafter options: max_rows %d must be at least 1", d->opts.max_rows);
        goto fail;
    }
    d->n_threads = d->opts.n_threads ? d->opts.n_threads : flint_target_n_threads(target);
    d->block = to->kv_block_size;
    d->n_blocks = to->kv_blocks;
    d->max_len = to->max_len;
    if (shares(d, target, err)) goto fail;
    d->q_dim = d->nh * c->head_dim;
    d->kv_dim = d->nkv * c->head_dim;
    d->kv_layer_floats = (size_t)d->n_blocks * d->block * d->kv_dim;

    st = flint_st_open_dir(dir, err);
    if (!st) goto fail;
    int own_embed = flint_st_find(st, "embed_tokens.weight") != NULL;
    int own_head = flint_st_find(st, "lm_head.weight") != NULL;
    if (!own_head && c->draft_vocab_size != c->vocab_size) {
        flint_err_set(err, FLINT_ERR_FORMAT, "%s: a reduced draft vocabulary needs its own lm_head.weight", dir);
        goto fail;
    }
    flint_arena measure;
    flint_arena_init_from(&measure, NULL, SIZE_MAX);
    carve(d, &measure, own_embed, own_head);
    size_t bytes = measure.used;
    if (flint_arena_init(&d->arena, bytes)) {
        flint_err_set(err, FLINT_ERR_NOMEM, "%s: cannot allocate %.1f MiB for the drafter", dir,
                      (double)bytes / (1 << 20));
        goto fail;
    }
    carve(d, &d->arena, own_embed, own_head);
    if (!own_embed) d->w.embed = flint_target_embed_weights(target);
    if (!own_head) d->w.lm_head = flint_target_lm_head_weights(target);
    if (load_weights(d, st, dir, own_embed, own_head, err)) goto fail;
    flint_st_close(st);
    st = NULL;
    if (!on_cuda) {
        flint_ops_rope_table(d->s.rope_cos, d->s.rope_sin, d->max_len + c->block_size, c->head_dim, c->rope_theta);
    } else {
#ifdef FLINT_HAVE_CUDA
        if (flint_drafter_cuda_init(d, target, own_embed, own_head, err)) goto fail;
#endif
        /* the device holds the weights now: the fp32 host copies go (a later caller must not
         * read d->w on the CUDA path) */
        flint_arena_free(&d->arena);
        memset(&d->w, 0, sizeof d->w);
    }

    int n = snprintf(d->desc, sizeof d->desc, "DSpark (%s), %s layout, block %d, up to %d drafts, %d layers, taps [",
                     c->format == FLINT_DRAFT_FORMAT_DEEPSPEC ? "DeepSpec dense" : "speculators",
                     c->layout == FLINT_DRAFT_ANCHOR_FIRST ? "anchor-first" : "fill-in (1+N)", c->block_size,
                     c->max_draft, c->n_layers);
    for (int i = 0; i < c->n_taps && n < (int)sizeof d->desc - 32; i++)
        n += snprintf(d->desc + n, sizeof d->desc - n, "%s%d", i ? "," : "", c->tap_layers[i]);
    snprintf(d->desc + n, sizeof d->desc - n, "], markov rank %d, confidence head %s%s%s%s", c->markov_rank,
             c->has_confidence ? "yes" : "no", c->draft_vocab_size != c->vocab_size ? ", reduced vocab" : "",
             own_embed && own_head ? "" : ", embedding/LM head shared with the target",
             on_cuda ? ", on cuda" : "");
    if (on_cuda) {
#ifdef FLINT_HAVE_CUDA
        bytes = flint_drafter_cuda_bytes(d);
#endif
        flint_log_info("drafter %s: %s; %.1f MiB on the device", dir, d->desc, (double)bytes / (1 << 20));
    } else {
        flint_log_info("drafter %s: %s; %.1f MiB", dir, d->desc, (double)bytes / (1 << 20));
    }
    return d;
fail:
    if (st) flint_st_close(st);
    flint_drafter_close(d);
    return NULL;
}

void flint_drafter_close(flint_drafter *d) {
    if (!d) return;
#ifdef FLINT_HAVE_CUDA
    flint_drafter_cuda_free(d);
#endif
    flint_arena_free(&d->arena);
    free(d);
}

#ifndef FLINT_HAVE_CUDA
const float *flint_drafter_device_q(const flint_drafter *d) {
    (void)d;
    return NULL;
}

const int32_t *flint_drafter_device_tokens(const flint_drafter *d, int *stride) {
    (void)d;
    *stride = 0;
    return NULL;
}

void flint_drafter_wait(flint_drafter *d) { (void)d; }

void flint_drafter_graph_stats(const flint_drafter *d, flint_drafter_graph_info *info) {
    (void)d;
    memset(info, 0, sizeof *info);
}

int flint_drafter_capture_graphs(flint_drafter *d, int n_steps, int with_q, flint_err *err) {
    (void)d, (void)n_steps, (void)with_q, (void)err;
    return 0;
}
#endif
