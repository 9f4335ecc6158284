/* Decoding as tokenizers does it (Tokenizer::decode: ids -> token strings -> decoder chain ->
 * join), written once as a streaming pipeline so that flint_tokenizer_decode (push everything,
 * finish) and flint_detok (push one id at a time) cannot disagree.
 *
 * tokenizers' decoders map a list of token strings to a list of strings. Streamed, each stage
 * receives pieces: a piece either is a whole token, or is part of one (after Fuse or ByteLevel
 * everything is one token that keeps growing). Stages that look at a token as a whole
 * (ByteLevel's per-token byte mapping, ByteFallback, Replace with a longer pattern, Strip from the
 * right) assemble partial pieces first; in every real decoder chain their input is whole tokens,
 * so nothing waits. What has to wait, waits: a pending incomplete UTF-8 character (ByteLevel) and
 * a run of <0xNN> tokens (ByteFallback, all-or-nothing validity). */
#include <stdlib.h>
#include <string.h>

#include "tokenizer_internal.h"

/* Buffers live inline (flint_detok_buf_) and spill to the heap only when they outgrow `in`; they
 * hold no pointer into themselves, so a flint_detok may be copied between pushes. */
typedef flint_detok_buf_ dbuf;
typedef flint_detok_step_ stage_state;
#define DB_INLINE sizeof(((dbuf *)0)->in)

static char *db_data(dbuf *b) { return b->heap ? b->heap : b->in; }

static int db_put(dbuf *b, const void *s, size_t n, flint_err *err) {
    size_t cap = b->heap ? b->cap : DB_INLINE;
    if (b->n + n > cap) {
        size_t nc = cap * 2;
        while (nc < b->n + n) nc *= 2;
        if (nc > UINT32_MAX / 2) return flint_err_set(err, FLINT_ERR_NOMEM, "detok: text too long");
        char *h = malloc(nc + 1);
        if (!h) return flint_err_set(err, FLINT_ERR_NOMEM, "detok: out of memory");
        memcpy(h, db_data(b), b->n);
        free(b->heap);
        b->heap = h;
        b->cap = (uint32_t)nc;
    }
    if (n) memcpy(db_data(b) + b->n, s, n);
    b->n += (uint32_t)n;
    return 0;
}

static void db_clear(dbuf *b) {
    free(b->heap);
    b->heap = NULL;
    b->n = b->cap = 0;
}

/* Drop the first k bytes; back inline when the rest fits. */
static void db_consume(dbuf *b, size_t k) {
    char *d = db_data(b);
    memmove(d, d + k, b->n - k);
    b->n -= (uint32_t)k;
    if (b->heap && b->n <= DB_INLINE) {
        memcpy(b->in, b->heap, b->n);
        free(b->heap);
        b->heap = NULL;
        b->cap = 0;
    }
}

static const char FFFD[3] = {(char)0xEF, (char)0xBF, (char)0xBD};

static int feed(const flint_tokenizer *t, flint_detok *d, int k, const char *s, size_t n, int new_tok,
                int whole, flint_err *err);
static int finish(const flint_tokenizer *t, flint_detok *d, int k, flint_err *err);

static int needs_whole(const flint_tok_dec *dc) {
    switch (dc->kind) {
    case FT_DEC_BYTELEVEL:
    case FT_DEC_BYTEFALLBACK:
        return 1;
    case FT_DEC_REPLACE: { /* a one-character literal cannot straddle pieces */
        if (dc->pat.re || !dc->pat.lit_len) return 1;
        uint32_t cp;
        return flint_tok_utf8_len((const unsigned char *)dc->pat.lit, dc->pat.lit_len, &cp) != (int)dc->pat.lit_len;
    }
    case FT_DEC_STRIP:
        return dc->stop > 0;
    default:
        return 0;
    }
}

/* ByteFallback's test: "<0x" two hex digits ">" (u8::from_str_radix also takes a leading '+'). */
int flint_tok_byte_token(const char *s, size_t n) {
    if (n != 6 || memcmp(s, "<0x", 3) || s[5] != '>') return -1;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) {
            if (i == 3 && c == '+') continue;
            return -1;
        }
        v = v * 16 + d;
    }
    return v;
}

static int bytefallback_flush(const flint_tokenizer *t, flint_detok *d, int k, flint_err *err) {
    dbuf *h = &d->step[k].hold;
    if (!h->n) return 0;
    int rc = 0;
    if (flint_tok_utf8_check((const unsigned char *)db_data(h), h->n) == h->n) {
        rc = feed(t, d, k + 1, db_data(h), h->n, 1, 1, err);
    } else { /* invalid anywhere: one U+FFFD per byte, as tokenizers does */
        for (size_t i = 0; i < h->n && !rc; i++) rc = feed(t, d, k + 1, FFFD, 3, 1, 1, err);
    }
    db_clear(h);
    return rc;
}

/* Emit what ByteLevel holds, keeping back an unfinished character unless at_end. */
static int bytelevel_emit(const flint_tokenizer *t, flint_detok *d, int k, int at_end, flint_err *err) {
    stage_state *ss = &d->step[k];
    const unsigned char *h = (const unsigned char *)db_data(&ss->hold);
    size_t keep = at_end ? 0 : flint_tok_utf8_incomplete_tail(h, ss->hold.n);
    size_t ready = ss->hold.n - keep;
    if (ready == 0 && !(at_end && !ss->emitted)) return 0;
    flint_tok_buf txt = {0};
    int rc = flint_tok_utf8_lossy(&txt, h, ready, err);
    if (!rc) rc = feed(t, d, k + 1, txt.p ? txt.p : "", txt.n, !ss->emitted, 0, err);
    flint_tok_buf_free(&txt);
    ss->emitted = 1;
    db_consume(&ss->hold, ready);
    return rc;
}

/* A whole token through stage k. */
static int process_whole(const flint_tokenizer *t, flint_detok *d, int k, const char *s, size_t n,
                         flint_err *err) {
    const flint_tok_dec *dc = &t->dec[k];
    stage_state *ss = &d->step[k];
    switch (dc->kind) {
    case FT_DEC_BYTELEVEL: {
        /* every character through the byte table, or the raw bytes when one is not in it */
        size_t mark = ss->hold.n;
        for (size_t i = 0; i < n;) {
            uint32_t cp;
            int l = flint_tok_utf8_len((const unsigned char *)s + i, n - i, &cp);
            int b = l ? flint_tok_char_byte(cp) : -1;
            if (b < 0) {
                ss->hold.n = (uint32_t)mark;
                if (db_put(&ss->hold, s, n, err)) return -1;
                break;
            }
            unsigned char c = (unsigned char)b;
            if (db_put(&ss->hold, &c, 1, err)) return -1;
            i += (size_t)l;
        }
        return bytelevel_emit(t, d, k, 0, err);
    }
    case FT_DEC_BYTEFALLBACK: {
        int b = flint_tok_byte_token(s, n);
        if (b >= 0) {
            unsigned char c = (unsigned char)b;
            return db_put(&ss->hold, &c, 1, err);
        }
        if (bytefallback_flush(t, d, k, err)) return -1;
        return feed(t, d, k + 1, s, n, 1, 1, err);
    }
    case FT_DEC_REPLACE: {
        flint_tok_span *sp;
        size_t ns;
        if (flint_tok_pattern_find(&dc->pat, s, n, &sp, &ns, err)) return -1;
        flint_tok_buf r = {0};
        int rc = 0;
        for (size_t i = 0; i < ns && !rc; i++)
            rc = sp[i].match ? flint_tok_buf_put(&r, dc->content, dc->content_len, err)
                             : flint_tok_buf_put(&r, s + sp[i].start, sp[i].end - sp[i].start, err);
        free(sp);
        if (!rc) rc = feed(t, d, k + 1, r.p ? r.p : "", r.n, 1, 1, err);
        flint_tok_buf_free(&r);
        return rc;
    }
    case FT_DEC_STRIP: { /* decoders::Strip on one token, counted in characters */
        size_t a = 0, z = n;
        for (int i = 0; i < dc->start && a < n; i++) {
            uint32_t cp;
            int l = flint_tok_utf8_len((const unsigned char *)s + a, n - a, &cp);
            if (!l || cp != dc->strip_cp) break;
            a += (size_t)l;
        }
        for (int i = 0; i < dc->stop && z > 0; i++) {
            size_t q = z;
            while (q > 0 && ((unsigned char)s[q - 1] & 0xC0) == 0x80) q--;
            if (q > 0) q--;
            uint32_t cp;
            if (!flint_tok_utf8_len((const unsigned char *)s + q, z - q, &cp) || cp != dc->strip_cp) break;
            z = q;
        }
        if (z < a) z = a; /* tokenizers would panic here; an empty token is the sane reading */
        return feed(t, d, k + 1, s + a, z - a, 1, 1, err);
    }
    }
    FLINT_ASSERT(0);
    return -1;
}

/* A piece through a stage that works piece by piece. */
static int process_stream(const flint_tokenizer *t, flint_detok *d, int k, const char *s, size_t n,
                          int new_tok, int whole, flint_err *err) {
    const flint_tok_dec *dc = &t->dec[k];
    stage_state *ss = &d->step[k];
    switch (dc->kind) {
    case FT_DEC_FUSE: {
        int first = !ss->emitted;
        ss->emitted = 1;
        return feed(t, d, k + 1, s, n, first, 0, err);
    }
    case FT_DEC_REPLACE: /* one-character literal */
    case FT_DEC_METASPACE:
    case FT_DEC_STRIP: {
        if (new_tok) {
            ss->tokens++;
            ss->lead_left = dc->start;
        }
        flint_tok_buf r = {0};
        int rc = 0;
        size_t i = 0;
        if (dc->kind == FT_DEC_STRIP) {
            while (ss->lead_left > 0 && i < n) {
                uint32_t cp;
                int l = flint_tok_utf8_len((const unsigned char *)s + i, n - i, &cp);
                if (!l || cp != dc->strip_cp) {
                    ss->lead_left = 0;
                    break;
                }
                i += (size_t)l;
                ss->lead_left--;
            }
            if (n > i) ss->lead_left = 0;
            return feed(t, d, k + 1, s + i, n - i, new_tok, whole, err);
        }
        if (dc->kind == FT_DEC_REPLACE) {
            while (i < n && !rc) {
                const char *hit = memmem(s + i, n - i, dc->pat.lit, dc->pat.lit_len);
                size_t e = hit ? (size_t)(hit - s) : n;
                rc = flint_tok_buf_put(&r, s + i, e - i, err);
                if (!rc && hit) rc = flint_tok_buf_put(&r, dc->content, dc->content_len, err);
                i = hit ? e + dc->pat.lit_len : n;
            }
        } else { /* Metaspace: the replacement becomes a space, or vanishes in the first token */
            int drop = ss->tokens == 1 && dc->prepend != FT_PREPEND_NEVER;
            while (i < n && !rc) {
                uint32_t cp;
                int l = flint_tok_utf8_len((const unsigned char *)s + i, n - i, &cp);
                if (!l) l = 1, cp = 0xFFFD;
                if (cp == dc->rep_cp) rc = drop ? 0 : flint_tok_buf_put(&r, " ", 1, err);
                else rc = flint_tok_buf_put(&r, s + i, (size_t)l, err);
                i += (size_t)l;
            }
        }
        if (!rc) rc = feed(t, d, k + 1, r.p ? r.p : "", r.n, new_tok, whole, err);
        flint_tok_buf_free(&r);
        return rc;
    }
    }
    FLINT_ASSERT(0);
    return -1;
}

static int feed(const flint_tokenizer *t, flint_detok *d, int k, const char *s, size_t n, int new_tok,
                int whole, flint_err *err) {
    stage_state *ss = &d->step[k];
    if (k == t->n_dec) { /* the join: "" after a decoder, " " between tokens without one */
        if (!t->has_decoder && new_tok && ss->tokens++ > 0 && db_put(&d->out, " ", 1, err)) return -1;
        return db_put(&d->out, s, n, err);
    }
    if (!needs_whole(&t->dec[k])) return process_stream(t, d, k, s, n, new_tok, whole, err);
    if ((whole || new_tok) && ss->assembling) {
        /* the assembled token is complete: take it out of asm_ first, processing may refill it */
        dbuf tok = ss->asm_;
        memset(&ss->asm_, 0, sizeof ss->asm_);
        ss->assembling = 0;
        int rc = process_whole(t, d, k, db_data(&tok), tok.n, err);
        db_clear(&tok);
        if (rc) return -1;
    }
    if (whole) return process_whole(t, d, k, s, n, err);
    if (new_tok) db_clear(&ss->asm_);
    ss->assembling = 1;
    return db_put(&ss->asm_, s, n, err);
}

static int finish(const flint_tokenizer *t, flint_detok *d, int k, flint_err *err) {
    if (k == t->n_dec) return 0;
    stage_state *ss = &d->step[k];
    if (ss->assembling) {
        dbuf tok = ss->asm_;
        memset(&ss->asm_, 0, sizeof ss->asm_);
        ss->assembling = 0;
        int rc = process_whole(t, d, k, db_data(&tok), tok.n, err);
        db_clear(&tok);
        if (rc) return -1;
    }
    switch (t->dec[k].kind) {
    case FT_DEC_BYTELEVEL:
        if (bytelevel_emit(t, d, k, 1, err)) return -1;
        break;
    case FT_DEC_BYTEFALLBACK:
        if (bytefallback_flush(t, d, k, err)) return -1;
        break;
    case FT_DEC_FUSE: /* Fuse of no tokens is one empty token */
        if (!ss->emitted && feed(t, d, k + 1, "", 0, 1, 0, err)) return -1;
        ss->emitted = 1;
        break;
    }
    return finish(t, d, k + 1, err);
}

/* Give back every heap spill and start a new stream (tokenizer and options stay). */
static void state_reset(flint_detok *d) {
    for (int k = 0; k <= FT_DEC_MAX; k++) {
        db_clear(&d->step[k].asm_);
        db_clear(&d->step[k].hold);
    }
    db_clear(&d->out);
    const flint_tokenizer *t = d->tok;
    int skip = d->skip_special;
    memset(d, 0, sizeof *d);
    d->tok = t;
    d->skip_special = skip;
}

/* One id into the pipeline: unknown ids and (when asked) special tokens are skipped, as
 * Tokenizer::decode's filter_map does. */
static int push_id(const flint_tokenizer *t, flint_detok *d, int32_t id, int skip_special, flint_err *err) {
    if (id < 0 || id >= t->n_ids || t->id_len[id] == UINT32_MAX) return 0;
    if (skip_special && t->id_special[id]) return 0;
    return feed(t, d, 0, t->pool + t->id_off[id], t->id_len[id], 1, 1, err);
}

int flint_tokenizer_decode(const flint_tokenizer *t, const int32_t *ids, int n, int skip_special, char **out,
                           size_t *out_len, flint_err *err) {
    *out = NULL;
    if (out_len) *out_len = 0;
    flint_detok dt;
    flint_detok_init(&dt, t, skip_special);
    flint_detok *d = &dt;
    for (int i = 0; i < n; i++)
        if (push_id(t, d, ids[i], skip_special, err)) goto fail;
    if (finish(t, d, 0, err)) goto fail;
    char *s = malloc((size_t)d->out.n + 1);
    if (!s) {
        flint_err_set(err, FLINT_ERR_NOMEM, "tokenizer: out of memory");
        goto fail;
    }
    memcpy(s, db_data(&d->out), d->out.n);
    s[d->out.n] = 0;
    *out = s;
    if (out_len) *out_len = d->out.n;
    state_reset(d);
    return 0;
fail:
    state_reset(d);
    return -1;
}

void flint_detok_init(flint_detok *d, const flint_tokenizer *t, int skip_special) {
    memset(d, 0, sizeof *d);
    d->tok = t;
    d->skip_special = skip_special;
}

void flint_detok_free(flint_detok *d) {
    if (d) state_reset(d);
}

/* Hand queued output to the caller: as much as fits, cut between characters. */
static int drain(flint_detok *s, char *out, size_t cap) {
    size_t avail = s->out.n, n = avail < cap - 1 ? avail : cap - 1;
    const char *src = db_data(&s->out);
    if (n < avail)
        while (n > 0 && ((unsigned char)src[n] & 0xC0) == 0x80) n--;
    if (n) memcpy(out, src, n);
    out[n] = 0;
    db_consume(&s->out, n);
    return (int)n;
}

/* The id's bytes as process_whole's ByteLevel case makes them: every character through the byte
 * table, or the raw bytes when one is not in it. */
int flint_tok_bytelevel_table(flint_tokenizer *t, flint_err *err) {
    if (t->n_dec != 1 || t->dec[0].kind != FT_DEC_BYTELEVEL) return 0;
    size_t total = 0;
    for (int id = 0; id < t->n_ids; id++)
        if (t->id_len[id] != UINT32_MAX) total += t->id_len[id]; /* a character maps to at most itself */
    t->bl_pool = malloc(total + 1);
    t->bl_off = malloc(sizeof(uint32_t) * (size_t)t->n_ids);
    t->bl_len = malloc(sizeof(uint32_t) * (size_t)t->n_ids);
    t->bl_whole = calloc(t->n_ids > 0 ? (size_t)t->n_ids : 1, 1);
    if (!t->bl_pool || !t->bl_off || !t->bl_len || !t->bl_whole || total > UINT32_MAX)
        return flint_err_set(err, FLINT_ERR_NOMEM, "tokenizer: out of memory");
    size_t at = 0;
    for (int id = 0; id < t->n_ids; id++) {
        t->bl_off[id] = (uint32_t)at;
        t->bl_len[id] = t->id_len[id];
        if (t->id_len[id] == UINT32_MAX) continue;
        const char *s = t->pool + t->id_off[id];
        const size_t n = t->id_len[id], mark = at;
        for (size_t i = 0; i < n;) {
            uint32_t cp;
            int l = flint_tok_utf8_len((const unsigned char *)s + i, n - i, &cp);
            int b = l ? flint_tok_char_byte(cp) : -1;
            if (b < 0) {
                memcpy(t->bl_pool + mark, s, n);
                at = mark + n;
                break;
            }
            t->bl_pool[at++] = (char)b;
            i += (size_t)l;
        }
        t->bl_len[id] = (uint32_t)(at - mark);
        t->bl_whole[id] = at > mark && flint_tok_utf8_check((const unsigned char *)t->bl_pool + mark, at - mark) ==
                                           at - mark;
    }
    return 0;
}

/* push_id and bytelevel_emit for a ByteLevel-only chain (the engine decodes every emitted token
 * this way: the general path allocated per token, ~1700 instructions; session 20): the id's
 * bytes join what ByteLevel holds, and its whole characters go out, through the lossy UTF-8
 * conversion only when they are not valid UTF-8. */
static int push_bytelevel(flint_detok *d, int32_t id, flint_err *err) {
    const flint_tokenizer *t = d->tok;
    if (id < 0 || id >= t->n_ids || t->bl_len[id] == UINT32_MAX) return 0;
    if (d->skip_special && t->id_special[id]) return 0;
    stage_state *ss = &d->step[0];
    if (db_put(&ss->hold, t->bl_pool + t->bl_off[id], t->bl_len[id], err)) return -1;
    const unsigned char *h = (const unsigned char *)db_data(&ss->hold);
    const size_t ready = ss->hold.n - flint_tok_utf8_incomplete_tail(h, ss->hold.n);
    if (ready == 0) return 0;
    int rc;
    if (flint_tok_utf8_check(h, ready) == ready) {
        rc = db_put(&d->out, h, ready, err);
    } else {
        flint_tok_buf txt = {0};
        rc = flint_tok_utf8_lossy(&txt, h, ready, err);
        if (!rc) rc = db_put(&d->out, txt.p ? txt.p : "", txt.n, err);
        flint_tok_buf_free(&txt);
    }
    ss->emitted = 1;
    db_consume(&ss->hold, ready);
    return rc;
}

int flint_detok_push(flint_detok *d, int32_t id, char *out, size_t cap, flint_err *err) {
    if (!out || cap < 8) return flint_err_set(err, FLINT_ERR_INVALID, "detok: output buffer of %zu bytes is too small", cap);
    const flint_tokenizer *t = d->tok;
    stage_state *ss = &d->step[0];
    /* the common case of a ByteLevel chain: nothing held or queued and the token's bytes whole
     * characters; push_bytelevel + drain would put them through both buffers to the same place
     * (the engine decodes every emitted token on its step's critical path: ~35 -> ~10 ns) */
    if (t->bl_len && !ss->assembling && ss->hold.n == 0 && d->out.n == 0 && id >= 0 && id < t->n_ids &&
        t->bl_whole[id] && t->bl_len[id] < cap && !(d->skip_special && t->id_special[id])) {
        d->n_tokens++;
        memcpy(out, t->bl_pool + t->bl_off[id], t->bl_len[id]);
        out[t->bl_len[id]] = 0;
        ss->emitted = 1;
        return (int)t->bl_len[id];
    }
    out[0] = 0;
    d->n_tokens++;
    if (d->tok->bl_len && !d->step[0].assembling ? push_bytelevel(d, id, err) : push_id(d->tok, d, id, d->skip_special, err))
        return -1;
    return drain(d, out, cap);
}

int flint_detok_flush(flint_detok *d, char *out, size_t cap, flint_err *err) {
    if (!out || cap < 1) return flint_err_set(err, FLINT_ERR_INVALID, "detok: no output buffer");
    out[0] = 0;
    if (!d->finished) {
        if (finish(d->tok, d, 0, err)) return -1;
        d->finished = 1;
    }
    if (d->out.n > cap - 1)
        return flint_err_set(err, FLINT_ERR_INVALID,
                             "detok: %u bytes still to emit do not fit in a %zu-byte buffer; flush again with a larger one",
                             (unsigned)d->out.n, cap);
    int n = drain(d, out, cap);
    state_reset(d);
    return n;
}
