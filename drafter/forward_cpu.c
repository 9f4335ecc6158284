/* The drafter's fp32 CPU forward: the reference the CUDA drafter is tested against, and the
 * drafting path of the CPU backend. The entry points validate their batch here for both
 * backends, then hand a CUDA drafter's work to forward_cuda.cu. Two entry points:
 * - encode: target taps -> fc -> hidden_norm -> per draft layer K = RoPE(k_norm(Wk ctx)),
 *   V = Wv ctx, written into the context cache at the rows' positions (KV injection);
 * - draft: one backbone forward over [anchor, MASK..] blocks (non-causal inside the block, over
 *   the cached context before the anchor), final norm, LM head, then per request the sequential
 *   Markov loop with the confidence head and the draw of each draft token.
 * Block K/V are scratch and never cached: the next round's context encoding overwrites nothing
 * it needs, and rejected rows are simply never encoded. */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "drafter/drafter_internal.h"
#include "sampler/sampler.h"
#include "target/ops_cpu.h"

static inline size_t slot(const flint_drafter *d, int l, int32_t block, int off, int kvh) {
    return (size_t)l * d->kv_layer_floats + (((size_t)block * d->block + off) * d->nkv + kvh) * d->cfg.head_dim;
}

/* Entries from..upto_pos / block of a table are pool block ids. */
static int check_table(const flint_drafter *d, const int32_t *bt, int from, int upto_pos, const char *what, int i,
                       flint_err *err) {
    if (!bt) return flint_err_set(err, FLINT_ERR_INVALID, "drafter %s: entry %d has no block table", what, i);
    const int bad = flint_ops_first_bad_id(bt + from, upto_pos / d->block + 1 - from, d->n_blocks);
    if (bad >= 0)
        return flint_err_set(err, FLINT_ERR_INVALID, "drafter %s: entry %d: block %d is id %d, outside the pool "
                             "(0..%d)", what, i, from + bad, bt[from + bad], d->n_blocks - 1);
    return 0;
}

int flint_drafter_flush(flint_drafter *d, const int32_t *const *block_tables, flint_err *err) {
#ifdef FLINT_HAVE_CUDA
    if (d->cuda) return flint_drafter_flush_cuda(d, block_tables, err);
#endif
    (void)d, (void)block_tables, (void)err;
    return 0;
}

int flint_drafter_encode(flint_drafter *d, const flint_drafter_ctx_batch *b, flint_err *err) {
    const flint_drafter_config *c = &d->cfg;
    flint_drafter_state *s = &d->s;
    int R = b->n_rows, H = c->hidden_size, hd = c->head_dim, half = hd / 2, nt = d->n_threads;
    if (R < 1 || R > d->opts.max_rows)
        return flint_err_set(err, FLINT_ERR_INVALID, "drafter encode: n_rows %d is outside 1..%d", R, d->opts.max_rows);
    if (!(b->taps || (b->taps_device && d->cuda)) || !b->pos || !b->row_seq || !b->block_tables || b->n_seqs < 1)
        return flint_err_set(err, FLINT_ERR_INVALID, "drafter encode: taps (device taps only with the CUDA drafter), "
                             "pos, row_seq and block tables are required");
    if (b->src_rows && !b->taps_device)
        return flint_err_set(err, FLINT_ERR_INVALID, "drafter encode: src_rows go with device taps only");
    for (int r = 0; b->src_rows && r < R; r++)
        if (b->src_rows[r] < 0)
            return flint_err_set(err, FLINT_ERR_INVALID, "drafter encode: row %d: source row %d", r, b->src_rows[r]);
    /* a sequence's rows are usually adjacent: its table is checked once, up to its furthest row
     * (checking every row's whole table was rows x context / block entries a step: ~33k at batch
     * 64, K 7, context 1024; #8's host time) */
    for (int r = 0, prev_s = -1, checked = 0; r < R; r++) {
        if (b->pos[r] < 0 || b->pos[r] >= d->max_len)
            return flint_err_set(err, FLINT_ERR_INVALID, "drafter encode: row %d: position %d is outside 0..%d", r,
                                 b->pos[r], d->max_len - 1);
        if (b->row_seq[r] < 0 || b->row_seq[r] >= b->n_seqs)
            return flint_err_set(err, FLINT_ERR_INVALID, "drafter encode: row %d: row_seq %d is outside 0..%d", r,
                                 b->row_seq[r], b->n_seqs - 1);
        if (b->row_seq[r] != prev_s) prev_s = b->row_seq[r], checked = 0;
        if (b->pos[r] / d->block + 1 > checked) {
            if (check_table(d, b->block_tables[prev_s], checked, b->pos[r], "encode", r, err)) return -1;
            checked = b->pos[r] / d->block + 1;
        }
    }
#ifdef FLINT_HAVE_CUDA
    if (d->cuda) return flint_drafter_encode_cuda(d, b, err);
#endif
    flint_ops_matmul(s->ctx, H, b->taps, c->n_taps * H, d->w.fc, R, c->n_taps * H, H, 0, nt);
    for (int r = 0; r < R; r++)
        flint_ops_rmsnorm(s->ctx + (size_t)r * H, s->ctx + (size_t)r * H, d->w.hidden_norm, H, c->rms_norm_eps);
    for (int l = 0; l < c->n_layers; l++) {
        const flint_drafter_layer *ly = &d->w.layers[l];
        flint_ops_matmul(s->ckv, 2 * d->kv_dim, s->ctx, H, ly->wkv, R, H, 2 * d->kv_dim, 0, nt);
        for (int r = 0; r < R; r++) {
            float *k = s->ckv + (size_t)r * 2 * d->kv_dim, *v = k + d->kv_dim;
            int p = b->pos[r];
            int32_t blk = b->block_tables[b->row_seq[r]][p / d->block];
            const float *cs = s->rope_cos + (size_t)p * half, *sn = s->rope_sin + (size_t)p * half;
            for (int h = 0; h < d->nkv; h++) {
                flint_ops_rmsnorm(k + h * hd, k + h * hd, ly->k_norm, hd, c->rms_norm_eps);
                flint_ops_rope(k + h * hd, hd, cs, sn);
                size_t at = slot(d, l, blk, p % d->block, h);
                memcpy(s->k_cache + at, k + h * hd, sizeof(float) * hd);
                memcpy(s->v_cache + at, v + h * hd, sizeof(float) * hd);
            }
        }
    }
    return 0;
}

/* Non-causal block attention: row (req i, slot j) sees context positions 0..P_i-1 from the cache,
 * then every slot of its own block, in that order. */
static void block_attention(flint_drafter *d, int l, int n_reqs, const flint_drafter_req *reqs,
                            const int32_t *const *bts) {
    const flint_drafter_config *c = &d->cfg;
    flint_drafter_state *s = &d->s;
    int B = c->block_size, hd = c->head_dim, group = d->nh / d->nkv, kvd = d->kv_dim;
    float scale = (float)(1.0 / sqrt((double)hd));
    int n_items = n_reqs * B * d->nh;
    size_t strip = (size_t)d->max_len + B;
#pragma omp parallel for schedule(dynamic, 1) num_threads(d->n_threads) if (n_items >= 4)
    for (int item = 0; item < n_items; item++) {
        int h = item % d->nh, row = item / d->nh, i = row / B, kvh = h / group;
        int P = reqs[i].pos;
        const int32_t *bt = bts[reqs[i].seq];
        const float *q = s->q + (size_t)row * d->q_dim + (size_t)h * hd;
        float *out = s->att + (size_t)row * d->q_dim + (size_t)h * hd;
        float *sc = s->scores + (size_t)omp_get_thread_num() * strip;
        float mx = -INFINITY;
        for (int t = 0; t < P; t++) {
            sc[t] = flint_ops_dot(q, s->k_cache + slot(d, l, bt[t / d->block], t % d->block, kvh), hd) * scale;
            if (sc[t] > mx) mx = sc[t];
        }
        for (int j = 0; j < B; j++) {
            const float *kj = s->bkv + (size_t)(i * B + j) * 2 * kvd + (size_t)kvh * hd;
            sc[P + j] = flint_ops_dot(q, kj, hd) * scale;
            if (sc[P + j] > mx) mx = sc[P + j];
        }
        float sum = 0.0f;
        for (int t = 0; t < P + B; t++) {
            sc[t] = expf(sc[t] - mx);
            sum += sc[t];
        }
        for (int x = 0; x < hd; x++) out[x] = 0.0f;
        for (int t = 0; t < P + B; t++) {
            const float *vt = t < P ? s->v_cache + slot(d, l, bt[t / d->block], t % d->block, kvh)
                                    : s->bkv + (size_t)(i * B + (t - P)) * 2 * kvd + kvd + (size_t)kvh * hd;
            float e = sc[t];
            flint_ops_axpy(out, e, vt, hd);
        }
        float inv = 1.0f / sum;
        for (int x = 0; x < hd; x++) out[x] *= inv;
    }
}

static int row_parallel(flint_drafter *d, const float *w, const float *in, int n_in, int R) {
    return flint_ops_row_parallel(d->s.x, d->s.part, in, n_in, w, R, d->cfg.hidden_size, d->opts.tp, d->n_threads);
}

/* The block forward up to the base logits U; -1 when a collective failed (tensor parallel). */
static int backbone(flint_drafter *d, int n_reqs, const flint_drafter_req *reqs, const int32_t *const *bts) {
    const flint_drafter_config *c = &d->cfg;
    flint_drafter_state *s = &d->s;
    int B = c->block_size, R = n_reqs * B, H = c->hidden_size, I = d->ni, hd = c->head_dim;
    int half = hd / 2, nt = d->n_threads, kvd = d->kv_dim;
    for (int row = 0; row < R; row++) {
        int32_t tok = row % B == 0 ? reqs[row / B].anchor : c->mask_token_id;
        memcpy(s->x + (size_t)row * H, d->w.embed + (size_t)tok * H, sizeof(float) * H);
    }
    for (int l = 0; l < c->n_layers; l++) {
        const flint_drafter_layer *ly = &d->w.layers[l];
        for (int row = 0; row < R; row++)
            flint_ops_rmsnorm(s->xn + (size_t)row * H, s->x + (size_t)row * H, ly->attn_norm, H, c->rms_norm_eps);
        flint_ops_matmul(s->q, d->q_dim, s->xn, H, ly->wq, R, H, d->q_dim, 0, nt);
        flint_ops_matmul(s->bkv, 2 * kvd, s->xn, H, ly->wkv, R, H, 2 * kvd, 0, nt);
        for (int row = 0; row < R; row++) {
            int p = reqs[row / B].pos + row % B;
            const float *cs = s->rope_cos + (size_t)p * half, *sn = s->rope_sin + (size_t)p * half;
            float *q = s->q + (size_t)row * d->q_dim, *k = s->bkv + (size_t)row * 2 * kvd;
            for (int h = 0; h < d->nh; h++) {
                flint_ops_rmsnorm(q + h * hd, q + h * hd, ly->q_norm, hd, c->rms_norm_eps);
                flint_ops_rope(q + h * hd, hd, cs, sn);
            }
            for (int h = 0; h < d->nkv; h++) {
                flint_ops_rmsnorm(k + h * hd, k + h * hd, ly->k_norm, hd, c->rms_norm_eps);
                flint_ops_rope(k + h * hd, hd, cs, sn);
            }
        }
        block_attention(d, l, n_reqs, reqs, bts);
        if (row_parallel(d, ly->wo, s->att, d->q_dim, R)) return -1;
        for (int row = 0; row < R; row++)
            flint_ops_rmsnorm(s->xn + (size_t)row * H, s->x + (size_t)row * H, ly->mlp_norm, H, c->rms_norm_eps);
        flint_ops_matmul(s->gu, 2 * I, s->xn, H, ly->w_gate_up, R, H, 2 * I, 0, nt);
        for (int row = 0; row < R; row++)
            flint_ops_swiglu(s->act + (size_t)row * I, s->gu + (size_t)row * 2 * I, s->gu + (size_t)row * 2 * I + I, I);
        if (row_parallel(d, ly->w_down, s->act, I, R)) return -1;
    }
    for (int row = 0; row < R; row++)
        flint_ops_rmsnorm(s->hfin + (size_t)row * H, s->x + (size_t)row * H, d->w.final_norm, H, c->rms_norm_eps);
    if (!d->opts.tp) {
        flint_ops_matmul(s->u, c->draft_vocab_size, s->hfin, H, d->w.lm_head, R, H, c->draft_vocab_size, 0, nt);
        return 0;
    }
    flint_ops_matmul(s->upart, d->nv, s->hfin, H, d->w.lm_head, R, H, d->nv, 0, nt);
    return d->opts.tp->all_gather(d->opts.tp->ctx, s->upart, s->u, R, d->nv);
}

/* The sequential stage for one request: Markov bias from the previous token, confidence, draw. */
static void markov_loop(flint_drafter *d, int i, const flint_drafter_req *rq, flint_drafter_out *out, int tid) {
    const flint_drafter_config *c = &d->cfg;
    flint_drafter_state *s = &d->s;
    const flint_drafter_weights *w = &d->w;
    int B = c->block_size, H = c->hidden_size, V = c->vocab_size, Vd = c->draft_vocab_size, r = c->markov_rank;
    int K = c->max_draft, first = c->layout == FLINT_DRAFT_FILL_IN ? 1 : 0;
    float *lk = s->lk + (size_t)tid * Vd, *qk = s->qk + (size_t)tid * V, *e = s->e + (size_t)tid * (r ? r : 1);
    int greedy = rq->greedy || rq->temperature == 0.0f;
    int32_t prev = rq->anchor;
    for (int k = 0; k < rq->n_draft; k++) {
        int row = i * B + first + k;
        const float *u = s->u + (size_t)row * Vd, *hf = s->hfin + (size_t)row * H;
        if (r) {
            memcpy(e, w->markov_w1 + (size_t)prev * r, sizeof(float) * r);
            for (int v = 0; v < Vd; v++) lk[v] = u[v] + flint_ops_dot(w->markov_w2 + (size_t)v * r, e, r);
        } else {
            memcpy(lk, u, sizeof(float) * Vd);
        }
        float conf = 1.0f;
        if (c->has_confidence) {
            float z = flint_ops_dot(w->conf_w, hf, H) + w->conf_b;
            if (c->confidence_with_markov) z += flint_ops_dot(w->conf_w + H, e, r);
            conf = 1.0f / (1.0f + expf(-z));
        }
        int32_t x;
        if (greedy) {
            int32_t a = flint_argmax(lk, Vd);
            x = w->d2t ? w->d2t[a] : a;
        } else {
            float inv_t = 1.0f / rq->temperature, mx = -INFINITY;
            for (int v = 0; v < Vd; v++)
                if (lk[v] * inv_t > mx) mx = lk[v] * inv_t;
            double sum = 0;
            if (w->d2t) memset(qk, 0, sizeof(float) * V);
            for (int v = 0; v < Vd; v++) {
                float ev = expf(lk[v] * inv_t - mx);
                qk[w->d2t ? w->d2t[v] : v] = ev;
                sum += ev;
            }
            float norm = (float)(1.0 / sum);
            for (int v = 0; v < V; v++) qk[v] *= norm;
            x = flint_sample_draft(qk, V, rq->seed, (int64_t)rq->pos + 1 + k);
            if (out->q) memcpy(out->q + ((size_t)i * K + k) * V, qk, sizeof(float) * V);
        }
        out->tokens[(size_t)i * K + k] = x;
        if (out->confidence) out->confidence[(size_t)i * K + k] = conf;
        if (out->logits) memcpy(out->logits + ((size_t)i * K + k) * Vd, lk, sizeof(float) * Vd);
        if (out->base_logits) memcpy(out->base_logits + ((size_t)i * K + k) * Vd, u, sizeof(float) * Vd);
        prev = x;
    }
}

/* The requests of a draft call (flint_drafter_draft, flint_drafter_stage_draft). */
static int check_reqs(const flint_drafter *d, int n_reqs, const flint_drafter_req *reqs, const int32_t *const *bts,
                      int n_seqs, flint_err *err) {
    const flint_drafter_config *c = &d->cfg;
    if (n_reqs < 1 || n_reqs > d->opts.max_reqs)
        return flint_err_set(err, FLINT_ERR_INVALID, "drafter: %d requests is outside 1..%d", n_reqs, d->opts.max_reqs);
    if (!bts) return flint_err_set(err, FLINT_ERR_INVALID, "drafter: block tables are required");
    for (int i = 0; i < n_reqs; i++) {
        const flint_drafter_req *q = &reqs[i];
        if (q->anchor < 0 || q->anchor >= c->vocab_size)
            return flint_err_set(err, FLINT_ERR_INVALID, "drafter: request %d: anchor %d is outside the vocabulary", i,
                                 q->anchor);
        if (q->pos < 0 || q->pos >= d->max_len)
            return flint_err_set(err, FLINT_ERR_INVALID, "drafter: request %d: position %d is outside 0..%d", i,
                                 q->pos, d->max_len - 1);
        if (q->n_draft < 1 || q->n_draft > c->max_draft)
            return flint_err_set(err, FLINT_ERR_INVALID, "drafter: request %d: %d drafts asked, the drafter makes "
                                 "1..%d", i, q->n_draft, c->max_draft);
        if (q->seq < 0 || q->seq >= n_seqs)
            return flint_err_set(err, FLINT_ERR_INVALID, "drafter: request %d: seq %d is outside 0..%d", i, q->seq,
                                 n_seqs - 1);
        if (!(q->temperature >= 0) || !isfinite(q->temperature))
            return flint_err_set(err, FLINT_ERR_INVALID, "drafter: request %d: bad temperature", i);
        if (q->pos > 0 && check_table(d, bts[q->seq], 0, q->pos - 1, "draft", i, err)) return -1;
    }
    return 0;
}

int flint_drafter_stage_draft(flint_drafter *d, int n_reqs, const flint_drafter_req *reqs,
                              const int32_t *const *block_tables, int n_seqs, const flint_drafter_launch *l,
                              flint_err *err) {
    if (check_reqs(d, n_reqs, reqs, block_tables, n_seqs, err)) return -1;
    if (n_reqs > l->reqs)
        return flint_err_set(err, FLINT_ERR_INVALID, "drafter: %d requests for a shape of %d", n_reqs, l->reqs);
    for (int i = 0; i < n_reqs; i++)
        if (reqs[i].n_draft > l->n_steps)
            return flint_err_set(err, FLINT_ERR_INVALID, "drafter: request %d: %d drafts for a shape of %d", i,
                                 reqs[i].n_draft, l->n_steps);
#ifdef FLINT_HAVE_CUDA
    if (d->cuda) return flint_drafter_stage_draft_cuda(d, n_reqs, reqs, block_tables, l, err);
#endif
    return flint_err_set(err, FLINT_ERR_UNSUPPORTED, "drafter: staging a draft needs the CUDA drafter");
}

int flint_drafter_draft(flint_drafter *d, int n_reqs, const flint_drafter_req *reqs, const int32_t *const *bts,
                        int n_seqs, flint_drafter_out *out, flint_err *err) {
    if (out && out->tokens_on_device && (!d->cuda || out->tokens || out->confidence || out->logits ||
                                         out->base_logits || out->q))
        return flint_err_set(err, FLINT_ERR_INVALID, "drafter: tokens_on_device needs a CUDA drafter and no host "
                             "outputs");
    if (!out || !bts || (!out->tokens && !out->tokens_on_device))
        return flint_err_set(err, FLINT_ERR_INVALID, "drafter: outputs and block tables are required");
    if (check_reqs(d, n_reqs, reqs, bts, n_seqs, err)) return -1;
#ifdef FLINT_HAVE_CUDA
    if (d->cuda) return flint_drafter_draft_cuda(d, n_reqs, reqs, bts, n_seqs, out, err);
#endif
    if (backbone(d, n_reqs, reqs, bts))
        return flint_err_set(err, FLINT_ERR_IO, "drafter: rank %d: a tensor-parallel collective failed",
                             d->opts.tp ? d->opts.tp->rank : 0);
#pragma omp parallel for schedule(dynamic, 1) num_threads(d->n_threads) if (n_reqs > 1)
    for (int i = 0; i < n_reqs; i++) markov_loop(d, i, &reqs[i], out, omp_get_thread_num());
    return 0;
}
