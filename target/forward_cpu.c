/* The fp32 CPU forward: the reference every other backend is tested against, and a usable
 * backend for the small embedded model. A batch mixes rows of several sequences (prefill chunks,
 * decode steps, verify blocks); per layer all rows are projected together, each row's K/V goes
 * into its sequence's paged blocks, then each row attends over its own sequence in the cache.
 * Batch invariance: all reductions go through the fixed-order kernels of ops_cpu.c and the
 * softmax walks positions 0..pos in order, so a row's result is the same bits in any batch. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <string.h>

#include "target/ops_cpu.h"
#include "target/target_internal.h"

/* Everything a request can get wrong is checked before any state is touched. */
int flint_target_validate(const flint_target *t, const flint_target_batch *b, flint_err *err) {
    const flint_target_config *c = &t->cfg;
    const flint_target_options *o = &t->opts;
    if (b->n_rows < 1 || b->n_rows > o->max_rows)
        return flint_err_set(err, FLINT_ERR_INVALID, "target forward: n_rows %d is outside 1..%d (max_rows)",
                             b->n_rows, o->max_rows);
    if (!b->tokens || !b->pos || !b->row_seq)
        return flint_err_set(err, FLINT_ERR_INVALID, "target forward: tokens, pos and row_seq are required");
    if (b->n_seqs < 1 || !b->block_tables)
        return flint_err_set(err, FLINT_ERR_INVALID, "target forward: n_seqs %d with %s block tables", b->n_seqs,
                             b->block_tables ? "" : "no");
    int logits_ok = b->logits || (b->logits_on_device && t->cuda);
    if (b->n_logit_rows < 0 || b->n_logit_rows > o->max_rows || (b->n_logit_rows > 0 && (!b->logit_rows || !logits_ok)))
        return flint_err_set(err, FLINT_ERR_INVALID,
                             "target forward: n_logit_rows %d must be in 0..%d with logit_rows and logits given",
                             b->n_logit_rows, o->max_rows);
    for (int i = 0; i < b->n_logit_rows; i++)
        if (b->logit_rows[i] < 0 || b->logit_rows[i] >= b->n_rows)
            return flint_err_set(err, FLINT_ERR_INVALID, "target forward: logit_rows[%d] = %d is outside 0..%d", i,
                                 b->logit_rows[i], b->n_rows - 1);
    int taps_ok = b->taps || (b->taps_on_device && t->cuda);
    if (b->n_taps < 0 || (b->n_taps > 0 && (!b->tap_layers || !taps_ok)))
        return flint_err_set(err, FLINT_ERR_INVALID, "target forward: n_taps %d needs tap_layers and taps",
                             b->n_taps);
    for (int i = 0; i < b->n_taps; i++)
        if (b->tap_layers[i] < 0 || b->tap_layers[i] >= c->n_layers)
            return flint_err_set(err, FLINT_ERR_INVALID, "target forward: tap_layers[%d] = %d is outside 0..%d", i,
                                 b->tap_layers[i], c->n_layers - 1);
    if (b->tokens_device && !t->cuda)
        return flint_err_set(err, FLINT_ERR_INVALID, "target forward: device-resident tokens need the CUDA forward");
    int bs = o->kv_block_size;
    /* a sequence's rows are usually adjacent: its table is checked once, up to its furthest row
     * (checking every row's whole table made validation quadratic in the context at large batches) */
    int prev_s = -1, checked = 0;
    for (int r = 0; r < b->n_rows; r++) {
        int tok = b->tokens[r], p = b->pos[r], s = b->row_seq[r];
        if (tok < 0 || tok >= c->vocab_size)
            return flint_err_set(err, FLINT_ERR_INVALID, "target forward: row %d: token id %d is outside the "
                                 "vocabulary (0..%d)", r, tok, c->vocab_size - 1);
        if (p < 0 || p >= o->max_len)
            return flint_err_set(err, FLINT_ERR_INVALID, "target forward: row %d: position %d is outside 0..%d "
                                 "(max_len)", r, p, o->max_len - 1);
        if (s < 0 || s >= b->n_seqs)
            return flint_err_set(err, FLINT_ERR_INVALID, "target forward: row %d: row_seq %d is outside 0..%d", r,
                                 s, b->n_seqs - 1);
        const int32_t *bt = b->block_tables[s];
        if (!bt)
            return flint_err_set(err, FLINT_ERR_INVALID, "target forward: sequence %d has no block table", s);
        if (s != prev_s) prev_s = s, checked = 0;
        if (p / bs + 1 > checked) {
            const int bad = flint_ops_first_bad_id(bt + checked, p / bs + 1 - checked, o->kv_blocks);
            if (bad >= 0)
                return flint_err_set(err, FLINT_ERR_INVALID, "target forward: row %d: sequence %d block %d is id "
                                     "%d, outside the pool (0..%d)", r, s, checked + bad, bt[checked + bad],
                                     o->kv_blocks - 1);
            checked = p / bs + 1;
        }
    }
    return 0;
}

/* Row r's K/V slot in layer l's pool. */
static inline size_t kv_slot(const flint_target *t, int l, int32_t block, int off, int kv_head) {
    return (size_t)l * t->kv_layer_floats +
           (((size_t)block * t->opts.kv_block_size + off) * t->nkv + kv_head) * t->cfg.head_dim;
}

/* q/k norm (Qwen3), RoPE, then K/V into the cache, for every row of layer l. */
static void qk_prep_and_store(flint_target *t, int l, const flint_target_batch *b) {
    const flint_target_config *c = &t->cfg;
    const flint_target_layer *ly = &t->w.layers[l];
    int hd = c->head_dim, half = hd / 2, bs = t->opts.kv_block_size;
#pragma omp parallel for schedule(static) num_threads(t->n_threads) if (b->n_rows >= 8)
    for (int r = 0; r < b->n_rows; r++) {
        float *q = t->s.qkv + (size_t)r * t->qkv_dim, *k = q + t->q_dim, *v = k + t->kv_dim;
        int p = b->pos[r];
        const float *cs = t->s.rope_cos + (size_t)p * half, *sn = t->s.rope_sin + (size_t)p * half;
        for (int h = 0; h < t->nh; h++) {
            if (ly->q_norm) flint_ops_rmsnorm(q + h * hd, q + h * hd, ly->q_norm, hd, c->rms_norm_eps);
            flint_ops_rope(q + h * hd, hd, cs, sn);
        }
        int32_t blk = b->block_tables[b->row_seq[r]][p / bs];
        for (int h = 0; h < t->nkv; h++) {
            if (ly->k_norm) flint_ops_rmsnorm(k + h * hd, k + h * hd, ly->k_norm, hd, c->rms_norm_eps);
            flint_ops_rope(k + h * hd, hd, cs, sn);
            size_t slot = kv_slot(t, l, blk, p % bs, h);
            memcpy(t->s.k_cache + slot, k + h * hd, sizeof(float) * hd);
            memcpy(t->s.v_cache + slot, v + h * hd, sizeof(float) * hd);
        }
    }
}

/* Causal attention of every (row, head) over positions 0..pos of the row's sequence, read from
 * the cache. Softmax sums and the weighted V sum run over positions in increasing order. */
static void attention(flint_target *t, int l, const flint_target_batch *b) {
    const flint_target_config *c = &t->cfg;
    int hd = c->head_dim, bs = t->opts.kv_block_size, group = t->nh / t->nkv;
    float scale = (float)(1.0 / sqrt((double)hd));
    int n_items = b->n_rows * t->nh;
#pragma omp parallel for schedule(dynamic, 1) num_threads(t->n_threads) if (n_items >= 4)
    for (int item = 0; item < n_items; item++) {
        int r = item / t->nh, h = item % t->nh, kvh = h / group;
        int p = b->pos[r];
        const int32_t *bt = b->block_tables[b->row_seq[r]];
        const float *q = t->s.qkv + (size_t)r * t->qkv_dim + (size_t)h * hd;
        float *out = t->s.att + (size_t)r * t->q_dim + (size_t)h * hd;
        float *sc = t->s.scores + (size_t)omp_get_thread_num() * t->opts.max_len;
        float mx = -INFINITY;
        for (int j = 0; j <= p; j++) {
            const float *kj = t->s.k_cache + kv_slot(t, l, bt[j / bs], j % bs, kvh);
            sc[j] = flint_ops_dot(q, kj, hd) * scale;
            if (sc[j] > mx) mx = sc[j];
        }
        float sum = 0.0f;
        for (int j = 0; j <= p; j++) {
            sc[j] = expf(sc[j] - mx);
            sum += sc[j];
        }
        for (int d = 0; d < hd; d++) out[d] = 0.0f;
        for (int j = 0; j <= p; j++) {
            const float *vj = t->s.v_cache + kv_slot(t, l, bt[j / bs], j % bs, kvh);
            float e = sc[j];
            flint_ops_axpy(out, e, vj, hd);
        }
        float inv = 1.0f / sum;
        for (int d = 0; d < hd; d++) out[d] *= inv;
    }
}

static void rmsnorm_rows(flint_target *t, float *y, const float *x, const float *w, int n_rows) {
    int H = t->cfg.hidden_size;
#pragma omp parallel for schedule(static) num_threads(t->n_threads) if (n_rows >= 16)
    for (int r = 0; r < n_rows; r++)
        flint_ops_rmsnorm(y + (size_t)r * H, x + (size_t)r * H, w, H, t->cfg.rms_norm_eps);
}

static int row_parallel(flint_target *t, const float *w, const float *in, int n_in, int R, flint_err *err) {
    if (flint_ops_row_parallel(t->s.x, t->s.part, in, n_in, w, R, t->cfg.hidden_size, t->opts.tp, t->n_threads))
        return flint_err_set(err, FLINT_ERR_IO, "target forward: rank %d: an all-reduce failed", t->opts.tp->rank);
    return 0;
}

int flint_target_stage(flint_target *t, const flint_target_batch *b, const flint_target_launch *l, flint_err *err) {
    if (flint_target_validate(t, b, err)) return -1;
#ifdef FLINT_HAVE_CUDA
    if (t->cuda) return flint_target_stage_cuda(t, b, l, err);
#endif
    (void)l;
    return flint_err_set(err, FLINT_ERR_UNSUPPORTED, "target: staging a forward needs the CUDA backend");
}

int flint_target_forward(flint_target *t, const flint_target_batch *b, flint_err *err) {
    if (flint_target_validate(t, b, err)) return -1;
#ifdef FLINT_HAVE_CUDA
    if (t->cuda) return flint_target_forward_cuda(t, b, err);
#endif
    const flint_target_config *c = &t->cfg;
    flint_target_state *s = &t->s;
    int R = b->n_rows, H = c->hidden_size, I = t->ni, nt = t->n_threads;
    const flint_tp_comm *tp = t->opts.tp;

    for (int r = 0; r < R; r++)
        memcpy(s->x + (size_t)r * H, t->w.embed + (size_t)b->tokens[r] * H, sizeof(float) * H);

    for (int l = 0; l < c->n_layers; l++) {
        const flint_target_layer *ly = &t->w.layers[l];
        rmsnorm_rows(t, s->xn, s->x, ly->attn_norm, R);
        flint_ops_matmul(s->qkv, t->qkv_dim, s->xn, H, ly->wqkv, R, H, t->qkv_dim, 0, nt);
        qk_prep_and_store(t, l, b);
        attention(t, l, b);
        if (row_parallel(t, ly->wo, s->att, t->q_dim, R, err)) return -1;

        rmsnorm_rows(t, s->xn, s->x, ly->mlp_norm, R);
        flint_ops_matmul(s->gu, 2 * I, s->xn, H, ly->w_gate_up, R, H, 2 * I, 0, nt);
#pragma omp parallel for schedule(static) num_threads(nt) if (R >= 8)
        for (int r = 0; r < R; r++)
            flint_ops_swiglu(s->act + (size_t)r * I, s->gu + (size_t)r * 2 * I, s->gu + (size_t)r * 2 * I + I, I);
        if (row_parallel(t, ly->w_down, s->act, I, R, err)) return -1;

        for (int k = 0; k < b->n_taps; k++) {
            if (b->tap_layers[k] != l) continue;
            for (int r = 0; r < R; r++)
                memcpy(b->taps + ((size_t)r * b->n_taps + k) * H, s->x + (size_t)r * H, sizeof(float) * H);
        }
    }

    if (b->n_logit_rows > 0) {
        for (int i = 0; i < b->n_logit_rows; i++)
            flint_ops_rmsnorm(s->xn + (size_t)i * H, s->x + (size_t)b->logit_rows[i] * H, t->w.final_norm, H,
                              c->rms_norm_eps);
        if (!tp) {
            flint_ops_matmul(b->logits, c->vocab_size, s->xn, H, t->w.lm_head, b->n_logit_rows, H, c->vocab_size, 0,
                             nt);
        } else {
            flint_ops_matmul(s->lpart, t->nv, s->xn, H, t->w.lm_head, b->n_logit_rows, H, t->nv, 0, nt);
            if (tp->all_gather(tp->ctx, s->lpart, b->logits, b->n_logit_rows, t->nv))
                return flint_err_set(err, FLINT_ERR_IO, "target forward: rank %d: the logits all-gather failed",
                                     tp->rank);
        }
    }
    return 0;
}
