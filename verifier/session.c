/* Sessions: adding and validating requests, admission to the KV pool, stop conditions over the
 * emitted tokens, and the output text with stop strings cut and partial matches held back until
 * they resolve (a streamed client never sees text that a stop string later removes). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "verifier/engine_internal.h"

int flint_engine_add(flint_engine *e, const int32_t *prompt, int n_prompt, const flint_request_params *p,
                     flint_err *err) {
    if (n_prompt < 1) return flint_err_set(err, FLINT_ERR_INVALID, "the prompt is empty");
    if (p->max_tokens < 1) return flint_err_set(err, FLINT_ERR_INVALID, "max_tokens must be at least 1 (got %d)", p->max_tokens);
    if ((long)n_prompt + p->max_tokens > e->max_len)
        return flint_err_set(err, FLINT_ERR_INVALID, "the prompt (%d tokens) plus max_tokens (%d) exceeds the "
                             "model's context of %d tokens", n_prompt, p->max_tokens, e->max_len);
    if (flint_sampling_params_check(&p->sampling, err)) return -1;
    if (p->n_stop < 0 || p->n_stop > FLINT_MAX_STOP || p->n_stop_ids < 0 || p->n_stop_ids > FLINT_MAX_STOP)
        return flint_err_set(err, FLINT_ERR_INVALID, "at most %d stop strings and %d stop token ids", FLINT_MAX_STOP,
                             FLINT_MAX_STOP);
    if (p->max_draft < 0) return flint_err_set(err, FLINT_ERR_INVALID, "max draft length must be >= 0");
    if (p->top_logprobs < 0 || p->top_logprobs > FLINT_MAX_TOP_LOGPROBS)
        return flint_err_set(err, FLINT_ERR_INVALID, "top_logprobs must be in 0..%d", FLINT_MAX_TOP_LOGPROBS);
    for (int i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= e->V)
            return flint_err_set(err, FLINT_ERR_INVALID, "prompt token %d (id %d) is outside the vocabulary", i, prompt[i]);
    for (int i = 0; i < p->n_stop; i++)
        if (!p->stop[i] || !p->stop[i][0]) return flint_err_set(err, FLINT_ERR_INVALID, "stop strings must not be empty");
    if (p->n_stop && !e->tok)
        return flint_err_set(err, FLINT_ERR_INVALID, "stop strings need a tokenizer; this model has no tokenizer.json");
    flint_grammar *g = NULL;
    if (p->response_format) {
        if (!e->tok) return flint_err_set(err, FLINT_ERR_INVALID, "response_format needs a tokenizer");
        if (!e->gvocab && !(e->gvocab = flint_grammar_vocab_build(e->tok, err))) return -1;
        int32_t eos = flint_tokenizer_eos_id(e->tok);
        if (eos < 0 && e->n_eos) eos = e->eos[0];
        if (!(g = flint_grammar_compile_vocab(p->response_format, e->gvocab, eos, err))) return -1;
    }
    int sid = -1;
    for (int i = 0; i < e->o.max_seqs; i++)
        if (e->ss[i].st == S_FREE) {
            sid = i;
            break;
        }
    if (sid < 0) {
        flint_grammar_free(g);
        return flint_err_set(err, FLINT_ERR_NOMEM, "all %d session slots are busy", e->o.max_seqs);
    }
    session *s = &e->ss[sid];
    int32_t *tokens = s->tokens, *blocks = s->blocks;
    char *text = s->text;
    size_t text_cap = s->text_cap;
    char *keep[FLINT_MAX_STOP];
    memcpy(keep, s->stop_store, sizeof keep);
    memset(s, 0, sizeof *s);
    s->tokens = tokens;
    s->blocks = blocks;
    s->text = text;
    s->text_cap = text_cap;
    memcpy(s->stop_store, keep, sizeof keep);
    s->p = *p;
    s->p.response_format = NULL; /* compiled below; the caller's string is not kept */
    if (g) {
        size_t sz = flint_grammar_state_size(g);
        s->grammar = g;
        s->gstate = flint_xmalloc(sz);
        s->gpath = flint_xmalloc(sz * (FLINT_MAX_DRAFT + 1));
        flint_grammar_state_init(g, s->gstate);
    }
    for (int i = 0; i < p->n_stop; i++) {
        free(s->stop_store[i]);
        s->stop_store[i] = flint_xstrdup(p->stop[i]);
        s->p.stop[i] = s->stop_store[i];
        size_t l = strlen(p->stop[i]);
        if (l > s->max_stop_len) s->max_stop_len = l;
    }
    memcpy(s->tokens, prompt, sizeof(int32_t) * (size_t)n_prompt);
    s->n_prompt = s->n_tokens = n_prompt;
    s->st = S_QUEUED;
    s->order = e->next_order++;
    if (e->tok) flint_detok_init(&s->dt, e->tok, p->skip_special);
    return sid;
}

void flint_engine_cancel(flint_engine *e, int sid) {
    if (sid < 0 || sid >= e->o.max_seqs) return;
    session *s = &e->ss[sid];
    if (s->st == S_FREE) return;
    s->cancelled = 1;
}

void flint_engine_session_free(flint_engine *e, int sid) {
    session *s = &e->ss[sid];
    if (e->dft) { /* held drafter rows read their block tables when encoded: before these go */
        flint_err ferr;
        if (flint_drafter_flush(e->dft, e->tables, &ferr))
            flint_log_error("engine: drafter flush before freeing a sequence: %s", ferr.msg);
    }
    /* what this session computed stays reusable: positions before its anchor hold valid target KV
     * and drafter context (after a partial prefill, the prefilled positions) */
    if (s->st == S_RUNNING || s->st == S_DONE) flint_engine_register_blocks(e, s, s->pos);
    else if (s->st == S_PREFILL) flint_engine_register_blocks(e, s, s->n_prefilled);
    for (int i = 0; i < s->n_blocks; i++) flint_kv_alloc_release(e->kv, s->blocks[i]);
    s->n_blocks = 0;
    if (e->tok) flint_detok_free(&s->dt); /* a stream cut by a stop string or a cancel is never flushed */
    flint_grammar_free(s->grammar);
    free(s->gstate);
    free(s->gpath);
    s->grammar = NULL;
    s->gstate = s->gpath = NULL;
    s->st = S_FREE;
}

#define PREFIX_ROOT 0x666c696e74ull /* the parent hash of a sequence's first block */

void flint_engine_register_blocks(flint_engine *e, session *s, int upto) {
    if (!e->pc) return;
    uint64_t h = PREFIX_ROOT;
    for (int b = 0; (b + 1) * e->bs <= upto && b < s->n_blocks; b++) {
        h = flint_prefix_hash(h, s->tokens + (size_t)b * e->bs, e->bs);
        flint_prefix_insert(e->pc, e->kv, h, s->blocks[b]);
    }
}

/* Queued sessions, oldest first, take every block their whole request can need (prompt +
 * max_tokens): cached blocks of their prompt prefix first (never the block of the last prompt
 * token, whose logits must be computed), then fresh ones, evicting cache-only blocks when the free
 * list runs short. One that does not fit waits, and so do the ones behind it (no starvation). */
int flint_engine_admit(flint_engine *e) {
    for (;;) {
        int best = -1;
        for (int i = 0; i < e->o.max_seqs; i++)
            if (e->ss[i].st == S_QUEUED && !e->ss[i].cancelled && (best < 0 || e->ss[i].order < e->ss[best].order))
                best = i;
        if (best < 0) return 0;
        session *s = &e->ss[best];
        int need = (s->n_prompt + s->p.max_tokens + e->bs - 1) / e->bs, hits = 0;
        if (e->pc) {
            uint64_t h = PREFIX_ROOT;
            for (int b = 0; b < (s->n_prompt - 1) / e->bs; b++) {
                h = flint_prefix_hash(h, s->tokens + (size_t)b * e->bs, e->bs);
                int32_t blk = flint_prefix_lookup(e->pc, h);
                if (blk < 0) break;
                flint_kv_alloc_ref(e->kv, blk);
                s->blocks[hits++] = blk;
            }
        }
        int fresh = need - hits, have = flint_kv_alloc_free_count(e->kv);
        if (have < fresh && e->pc) have += flint_prefix_evict(e->pc, e->kv, fresh - have);
        if (have < fresh) {
            for (int b = 0; b < hits; b++) flint_kv_alloc_release(e->kv, s->blocks[b]);
            return 0;
        }
        for (int b = hits; b < need; b++) s->blocks[b] = flint_kv_alloc_take(e->kv);
        s->n_blocks = need;
        s->n_prefilled = s->cached_tokens = hits * e->bs;
        if (e->pc) {
            e->prefix_query_tokens += s->n_prompt;
            e->prefix_hit_tokens += s->cached_tokens;
        }
        s->st = S_PREFILL;
    }
}

static int is_eos(const flint_engine *e, int32_t t) {
    for (int i = 0; i < e->n_eos; i++)
        if (e->eos[i] == t) return 1;
    return 0;
}

static void text_append(session *s, const char *p, size_t n) {
    if (s->text_len + n + 1 > s->text_cap) {
        size_t cap = s->text_cap ? s->text_cap : 256;
        while (cap < s->text_len + n + 1) cap *= 2;
        s->text = flint_xrealloc(s->text, cap);
        s->text_cap = cap;
    }
    memcpy(s->text + s->text_len, p, n);
    s->text_len += n;
    s->text[s->text_len] = 0;
}

/* The earliest stop string that now occurs in the text, searched only where new text could
 * complete one. Returns its offset or -1. */
static long find_stop(const session *s, size_t old_len) {
    long best = -1;
    for (int i = 0; i < s->p.n_stop; i++) {
        size_t l = strlen(s->p.stop[i]);
        size_t from = old_len >= l ? old_len - l + 1 : 0;
        if (from > s->text_len) continue;
        const char *hit = strstr(s->text + from, s->p.stop[i]);
        /* strstr stops at NUL: output text holds none, as decoded text never contains NUL bytes
         * except from a NUL token, which is then simply not matched past */
        if (hit && (best < 0 || hit - s->text < best)) best = hit - s->text;
    }
    return best;
}

int flint_engine_emit(flint_engine *e, session *s, const int32_t *toks, int n, flint_err *err) {
    int kept = 0, cut = 0;
    for (int i = 0; i < n && s->finish == FLINT_FINISH_NONE; i++) {
        int32_t t = toks[i];
        s->tokens[s->n_tokens++] = t;
        s->emit[s->n_emit++] = t;
        kept++;
        int gen = s->n_tokens - s->n_prompt;
        int stop_tok = !s->p.ignore_eos && is_eos(e, t);
        for (int j = 0; j < s->p.n_stop_ids && !stop_tok; j++) stop_tok = s->p.stop_ids[j] == t;
        if (stop_tok) {
            s->finish = FLINT_FINISH_STOP;
            break;
        }
        int w = e->tok ? flint_detok_push(&s->dt, t, e->piece, sizeof e->piece, err) : 0;
        if (w < 0) return -1;
        size_t old = s->text_len;
        text_append(s, e->piece, (size_t)w);
        if (s->p.n_stop) {
            long at = find_stop(s, old);
            if (at >= 0) {
                s->text_len = (size_t)at;
                s->text[at] = 0;
                s->finish = FLINT_FINISH_STOP;
                cut = 1;
                break;
            }
        }
        if (gen >= s->p.max_tokens || s->n_tokens >= e->max_len) s->finish = FLINT_FINISH_LENGTH;
    }
    if (s->finish != FLINT_FINISH_NONE && !cut) { /* the last bytes of an unfinished character */
        int w = e->tok ? flint_detok_flush(&s->dt, e->piece, sizeof e->piece, err) : 0;
        if (w < 0) return -1;
        text_append(s, e->piece, (size_t)w);
    }
    return kept;
}

void flint_engine_push_event(flint_engine *e, int sid) {
    session *s = &e->ss[sid];
    size_t upto = s->text_len;
    if (s->finish == FLINT_FINISH_NONE && s->max_stop_len > 1) {
        /* hold back what could still become the start of a stop string */
        size_t hold = s->max_stop_len - 1;
        upto = s->text_len > hold ? s->text_len - hold : 0;
        while (upto > s->text_sent && ((unsigned char)s->text[upto] & 0xC0) == 0x80) upto--; /* whole characters */
        if (upto < s->text_sent) upto = s->text_sent;
    }
    flint_step_event *ev = &e->events[e->n_events++];
    ev->sid = sid;
    ev->n_tokens = s->n_emit;
    ev->tokens = s->emit;
    ev->text = s->text + s->text_sent;
    ev->text_len = upto - s->text_sent;
    s->text_sent = upto;
    ev->finish = s->finish;
    ev->prompt_tokens = s->n_prompt;
    ev->cached_tokens = s->cached_tokens;
    ev->completion_tokens = s->n_tokens - s->n_prompt;
    ev->stats = &s->stats;
    int want = s->p.logprobs || s->p.top_logprobs;
    ev->logprobs = want ? s->lp : NULL;
    ev->n_top = want ? s->p.top_logprobs : 0;
    ev->top_ids = want ? s->top_ids : NULL;
    ev->top_logprobs = want ? s->top_lp : NULL;
}

void flint_engine_logprobs(flint_engine *e, session *s, int idx, const float *row, int32_t tok) {
    if (!s->p.logprobs && !s->p.top_logprobs) return;
    flint_sampling_params sp = s->p.sampling;
    if (sp.temperature == 0.0f) {
        sp.temperature = 1.0f, sp.top_k = 0, sp.top_p = 1.0f, sp.min_p = 0.0f;
    }
    float *p = e->sc.probs;
    flint_sampler_probs(&sp, row, e->V, p, &e->sc);
    s->lp[idx] = logf(p[tok]); /* -inf when the filters removed it */
    int n = s->p.top_logprobs;
    int32_t *ids = s->top_ids + (size_t)idx * FLINT_MAX_TOP_LOGPROBS;
    float *lps = s->top_lp + (size_t)idx * FLINT_MAX_TOP_LOGPROBS;
    /* top n by insertion (n <= 20): larger probability first, lower id on ties */
    float tp[FLINT_MAX_TOP_LOGPROBS];
    int have = 0;
    for (int v = 0; v < e->V && n > 0; v++) {
        float pv = p[v];
        if (have == n && pv <= tp[n - 1]) continue;
        int at = have < n ? have++ : n - 1;
        while (at > 0 && tp[at - 1] < pv) {
            ids[at] = ids[at - 1];
            tp[at] = tp[at - 1];
            at--;
        }
        ids[at] = v;
        tp[at] = pv;
    }
    for (int i = 0; i < have; i++) lps[i] = logf(tp[i]);
}

void flint_engine_grammar_mask_rows(flint_engine *e, session *s, float *rows, const int32_t *drafts, int k) {
    if (!s->grammar) return;
    size_t sz = flint_grammar_state_size(s->grammar);
    memcpy(s->gpath, s->gstate, sz);
    unsigned char *st = s->gpath;
    /* row i is masked with the state after drafts[0..i); once a draft is disallowed its p is 0,
     * so it is rejected and the rows after it are never read (their mask stays the last one) */
    for (int i = 0; i <= k; i++) {
        flint_grammar_mask(s->grammar, st, e->allowed, e->V);
        float *row = rows + (size_t)i * e->V;
        for (int v = 0; v < e->V; v++)
            if (!e->allowed[v]) row[v] = -INFINITY;
        if (i < k) {
            unsigned char *next = st + sz;
            memcpy(next, st, sz);
            if (flint_grammar_advance(s->grammar, next, drafts[i]) == 0) st = next;
        }
    }
}

void flint_engine_grammar_commit(flint_engine *e, session *s, const int32_t *toks, int n) {
    if (!s->grammar) return;
    for (int i = 0; i < n; i++)
        if (flint_grammar_advance(s->grammar, s->gstate, toks[i]) != 0) break; /* only EOS can end it */
}
