/* Encoding, in the order tokenizers runs it (TokenizerImpl::encode_single_sequence):
 *   1. added tokens with normalized=false are split out of the raw text (leftmost-longest, then
 *      single_word / lstrip / rstrip exactly as AddedVocabulary::find_matches);
 *   2. every other piece is normalized on its own, then normalized=true added tokens are split
 *      out of it;
 *   3. the pre-tokenizers cut the remaining pieces (ByteLevel, Split, Metaspace);
 *   4. the model turns each piece into ids; 5. the post-processor adds BOS/EOS on request.
 * Pieces are kept as (offset, length) into one text buffer per stage, so a stage is a loop from
 * one piece list into the next. Empty pieces are dropped after every split, as
 * PreTokenizedString::split does. */
#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

#include "tokenizer_internal.h"

typedef struct piece {
    size_t off, len;
    int32_t id;    /* >= 0: an added token, final */
    uint8_t orig0; /* the piece starts at offset 0 of the original text (Metaspace "first") */
} piece;

typedef struct pieces {
    piece *v;
    size_t n, cap;
    flint_tok_buf text;
} pieces;

static void pieces_free(pieces *p) {
    free(p->v);
    flint_tok_buf_free(&p->text);
    memset(p, 0, sizeof *p);
}

/* id -1: text to tokenize (dropped when empty); >= 0: an added token; -2: see piece_begin */
static int pieces_add(pieces *p, const char *s, size_t len, int32_t id, int orig0, flint_err *err) {
    if (len == 0 && id == -1) return 0;
    if (p->n == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 64;
        piece *v = realloc(p->v, cap * sizeof *v);
        if (!v) return flint_err_set(err, FLINT_ERR_NOMEM, "tokenizer: out of memory");
        p->v = v;
        p->cap = cap;
    }
    size_t off = p->text.n;
    if (flint_tok_buf_put(&p->text, s, len, err)) return -1;
    p->v[p->n++] = (piece){off, len, id, (uint8_t)(orig0 != 0)};
    return 0;
}

/* Start a piece whose text the caller appends to p->text afterwards (see piece_end). */
static int piece_begin(pieces *p, int orig0, flint_err *err) { return pieces_add(p, "", 0, -2, orig0, err); }

static void piece_end(pieces *p) {
    piece *q = &p->v[p->n - 1];
    q->len = p->text.n - q->off;
    q->id = -1;
    if (q->len == 0) p->n--;
}

/* ---------------------------------------------------------------------------------------------
 * Added tokens */

static uint32_t last_cp(const char *s, size_t n) {
    size_t i = n;
    while (i > 0 && ((unsigned char)s[i - 1] & 0xC0) == 0x80) i--;
    uint32_t cp = 0;
    if (i > 0) i--;
    flint_tok_utf8_len((const unsigned char *)s + i, n - i, &cp);
    return cp;
}

/* One added-token pass over s (AddedVocabulary::find_matches + split_with_indices). */
static int added_split(const flint_tokenizer *t, const flint_tok_trie *trie, const char *s, size_t n, int orig0,
                       pieces *out, flint_err *err) {
    size_t start_offset = 0, i = 0;
    while (i < n) {
        if (!trie->first[(unsigned char)s[i]]) {
            i++;
            continue;
        }
        int32_t node = 0, best = -1;
        size_t best_end = 0;
        for (size_t j = i; j < n; j++) {
            int32_t c = trie->node[node].child;
            while (c >= 0 && trie->node[c].byte != (unsigned char)s[j]) c = trie->node[c].sibling;
            if (c < 0) break;
            node = c;
            if (trie->node[node].pat >= 0) best = trie->node[node].pat, best_end = j + 1;
        }
        if (best < 0) {
            i++;
            continue;
        }
        size_t start = i, stop = best_end;
        i = best_end; /* the matcher moves on past the match even when it is discarded below */
        const flint_tok_added *a = &t->added[best];
        if (a->single_word) {
            int start_space = start == 0 || !flint_tok_is_word(last_cp(s, start));
            uint32_t cp = 0;
            if (stop < n) flint_tok_utf8_len((const unsigned char *)s + stop, n - stop, &cp);
            int stop_space = stop == n || !flint_tok_is_word(cp);
            if (!start_space || !stop_space) continue;
        }
        if (a->lstrip) {
            size_t ns = start;
            while (ns > 0) {
                size_t k = ns;
                while (k > 0 && ((unsigned char)s[k - 1] & 0xC0) == 0x80) k--;
                if (k > 0) k--;
                uint32_t cp;
                flint_tok_utf8_len((const unsigned char *)s + k, ns - k, &cp);
                if (!flint_tok_is_white(cp)) break;
                ns = k;
            }
            start = ns > start_offset ? ns : start_offset;
        }
        if (a->rstrip) {
            while (stop < n) {
                uint32_t cp;
                int k = flint_tok_utf8_len((const unsigned char *)s + stop, n - stop, &cp);
                if (!k || !flint_tok_is_white(cp)) break;
                stop += (size_t)k;
            }
        }
        if (start_offset < start && pieces_add(out, s + start_offset, start - start_offset, -1, orig0 && start_offset == 0, err))
            return -1;
        if (pieces_add(out, s + start, stop - start, a->id, orig0 && start == 0, err)) return -1;
        start_offset = stop;
    }
    if (start_offset < n && pieces_add(out, s + start_offset, n - start_offset, -1, orig0 && start_offset == 0, err))
        return -1;
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Normalizers */

static int map_segment(const char *s, size_t n, utf8proc_option_t opt, flint_tok_buf *out, flint_err *err) {
    if (!n) return 0;
    utf8proc_uint8_t *o = NULL;
    utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &o, opt);
    if (r < 0) return flint_err_set(err, FLINT_ERR_INTERNAL, "tokenizer: normalization failed: %s", utf8proc_errmsg(r));
    int rc = flint_tok_buf_put(out, o, (size_t)r, err);
    free(o);
    return rc;
}

/* Unicode normalization as tokenizers does it: utf8proc's, except that code points HF's older
 * tables do not know (flint_tok_norm_unknown) stay as they are and, being starters to HF, cut the
 * text into pieces normalized separately. */
static int norm_unicode(int kind, flint_tok_buf *b, flint_tok_buf *tmp, flint_err *err) {
    utf8proc_option_t opt = UTF8PROC_STABLE;
    switch (kind) {
    case FT_NORM_NFC: opt |= UTF8PROC_COMPOSE; break;
    case FT_NORM_NFD: opt |= UTF8PROC_DECOMPOSE; break;
    case FT_NORM_NFKC: opt |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
    default: opt |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
    }
    tmp->n = 0;
    size_t seg = 0, i = 0;
    while (i < b->n) {
        uint32_t cp;
        int k = flint_tok_utf8_len((const unsigned char *)b->p + i, b->n - i, &cp);
        FLINT_ASSERT(k > 0);
        if (flint_tok_norm_is_unknown(cp)) {
            if (map_segment(b->p + seg, i - seg, opt, tmp, err) || flint_tok_buf_put(tmp, b->p + i, (size_t)k, err))
                return -1;
            seg = i + (size_t)k;
        }
        i += (size_t)k;
    }
    if (map_segment(b->p + seg, b->n - seg, opt, tmp, err) || flint_tok_buf_put(tmp, "", 0, err)) return -1;
    flint_tok_buf swap = *b;
    *b = *tmp;
    *tmp = swap;
    return 0;
}

static int norm_step(const flint_tok_norm *st, flint_tok_buf *b, flint_tok_buf *tmp, flint_err *err) {
    switch (st->kind) {
    case FT_NORM_NFC:
    case FT_NORM_NFD:
    case FT_NORM_NFKC:
    case FT_NORM_NFKD:
        return norm_unicode(st->kind, b, tmp, err);
    case FT_NORM_PREPEND:
        if (b->n == 0) return 0;
        tmp->n = 0;
        if (flint_tok_buf_put(tmp, st->str, st->str_len, err) || flint_tok_buf_put(tmp, b->p, b->n, err)) return -1;
        break;
    case FT_NORM_REPLACE: {
        flint_tok_span *sp;
        size_t ns;
        if (flint_tok_pattern_find(&st->pat, b->p ? b->p : "", b->n, &sp, &ns, err)) return -1;
        tmp->n = 0;
        int rc = 0;
        for (size_t k = 0; k < ns && !rc; k++)
            rc = sp[k].match ? flint_tok_buf_put(tmp, st->str, st->str_len, err)
                             : flint_tok_buf_put(tmp, b->p + sp[k].start, sp[k].end - sp[k].start, err);
        free(sp);
        if (rc) return -1;
        break;
    }
    case FT_NORM_STRIP: {
        size_t a = 0, z = b->n;
        uint32_t cp;
        int k;
        while (st->left && a < z && (k = flint_tok_utf8_len((unsigned char *)b->p + a, z - a, &cp)) &&
               flint_tok_is_white(cp))
            a += (size_t)k;
        while (st->right && z > a) {
            size_t q = z;
            while (q > a && ((unsigned char)b->p[q - 1] & 0xC0) == 0x80) q--;
            if (q > a) q--;
            flint_tok_utf8_len((unsigned char *)b->p + q, z - q, &cp);
            if (!flint_tok_is_white(cp)) break;
            z = q;
        }
        tmp->n = 0;
        if (flint_tok_buf_put(tmp, b->p + a, z - a, err)) return -1;
        break;
    }
    default:
        FLINT_ASSERT(0);
    }
    flint_tok_buf swap = *b;
    *b = *tmp;
    *tmp = swap;
    return 0;
}

int flint_tok_normalize(const flint_tokenizer *t, const char *s, size_t n, flint_tok_buf *out, flint_err *err) {
    out->n = 0;
    if (flint_tok_buf_put(out, s, n, err)) return -1;
    flint_tok_buf tmp = {0};
    int rc = 0;
    for (int k = 0; k < t->n_norm && !rc; k++) rc = norm_step(&t->norm[k], out, &tmp, err);
    flint_tok_buf_free(&tmp);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * Pre-tokenizers */

/* SplitDelimiterBehavior applied to find_matches spans (NormalizedString::split); writes the kept
 * ranges back into sp and returns their count. */
static size_t apply_behavior(flint_tok_span *sp, size_t n, int behavior) {
    size_t m = 0;
    int prev = 0;
    switch (behavior) {
    case FT_SPLIT_ISOLATED:
        return n;
    case FT_SPLIT_REMOVED:
        for (size_t k = 0; k < n; k++)
            if (!sp[k].match) sp[m++] = sp[k];
        return m;
    case FT_SPLIT_CONTIGUOUS:
        for (size_t k = 0; k < n; k++) {
            int match = sp[k].match;
            if (match == prev && m > 0) sp[m - 1].end = sp[k].end;
            else sp[m++] = sp[k];
            prev = match;
        }
        return m;
    case FT_SPLIT_MERGED_PREV:
        for (size_t k = 0; k < n; k++) {
            int match = sp[k].match;
            if (match && !prev && m > 0) sp[m - 1].end = sp[k].end;
            else sp[m++] = sp[k];
            prev = match;
        }
        return m;
    case FT_SPLIT_MERGED_NEXT: {
        /* folded from the right, as tokenizers does, then put back in order */
        size_t w = n;
        for (size_t k = n; k-- > 0;) {
            int match = sp[k].match;
            if (match && !prev && w < n) sp[w].start = sp[k].start;
            else sp[--w] = sp[k];
            prev = match;
        }
        memmove(sp, sp + w, (n - w) * sizeof *sp);
        return n - w;
    }
    }
    FLINT_ASSERT(0);
    return 0;
}

static int split_piece(const flint_tok_pattern *pat, int behavior, int invert, const char *s, size_t n, int orig0,
                       pieces *out, flint_err *err) {
    flint_tok_span *sp;
    size_t ns;
    if (flint_tok_pattern_find(pat, s, n, &sp, &ns, err)) return -1;
    if (invert)
        for (size_t k = 0; k < ns; k++) sp[k].match = !sp[k].match;
    ns = apply_behavior(sp, ns, behavior);
    int rc = 0;
    for (size_t k = 0; k < ns && !rc; k++)
        rc = pieces_add(out, s + sp[k].start, sp[k].end - sp[k].start, -1, orig0 && sp[k].start == 0, err);
    free(sp);
    return rc;
}

static int bytelevel_map(const char *s, size_t n, flint_tok_buf *b, flint_err *err) {
    if (flint_tok_buf_reserve(b, 2 * n, err)) return -1;
    for (size_t i = 0; i < n; i++) b->n += (size_t)flint_tok_utf8_put(flint_tok_byte_char[(unsigned char)s[i]], b->p + b->n);
    b->p[b->n] = 0;
    return 0;
}

static int pretok_piece(const flint_tokenizer *t, const flint_tok_pretok *st, const char *s, size_t n, int orig0,
                        pieces *out, flint_tok_buf *tmp, flint_err *err) {
    switch (st->kind) {
    case FT_PRE_BYTELEVEL: {
        if (st->add_prefix_space && (n == 0 || s[0] != ' ')) {
            tmp->n = 0;
            if (flint_tok_buf_put(tmp, " ", 1, err) || flint_tok_buf_put(tmp, s, n, err)) return -1;
            s = tmp->p;
            n = tmp->n;
        }
        pieces parts = {0};
        int rc = 0;
        if (st->use_regex) rc = split_piece(&t->gpt2_re, FT_SPLIT_ISOLATED, 0, s, n, orig0, &parts, err);
        else rc = pieces_add(&parts, s, n, -1, orig0, err);
        for (size_t k = 0; k < parts.n && !rc; k++) {
            if ((rc = piece_begin(out, parts.v[k].orig0, err))) break;
            rc = bytelevel_map(parts.text.p + parts.v[k].off, parts.v[k].len, &out->text, err);
            if (!rc) piece_end(out);
        }
        pieces_free(&parts);
        return rc;
    }
    case FT_PRE_SPLIT:
        return split_piece(&st->pat, st->behavior, st->invert, s, n, orig0, out, err);
    case FT_PRE_METASPACE: {
        tmp->n = 0;
        int starts = n >= (size_t)st->rep_len && !memcmp(s, st->rep, (size_t)st->rep_len);
        int lead = 0;
        if (n > 0 && s[0] == ' ') starts = 1; /* the space about to become the replacement */
        if (st->prepend == FT_PREPEND_ALWAYS) lead = !starts;
        else if (st->prepend == FT_PREPEND_FIRST) lead = !starts && orig0;
        if (lead && flint_tok_buf_put(tmp, st->rep, (size_t)st->rep_len, err)) return -1;
        for (size_t i = 0; i < n;) {
            size_t j = i;
            while (j < n && s[j] != ' ') j++;
            if (flint_tok_buf_put(tmp, s + i, j - i, err)) return -1;
            if (j < n && flint_tok_buf_put(tmp, st->rep, (size_t)st->rep_len, err)) return -1;
            i = j + 1;
        }
        if (!st->split) return pieces_add(out, tmp->p ? tmp->p : "", tmp->n, -1, orig0, err);
        /* split on the replacement character, each one merged with what follows it */
        flint_tok_pattern lit = {.lit = (char *)st->rep, .lit_len = (size_t)st->rep_len};
        return split_piece(&lit, FT_SPLIT_MERGED_NEXT, 0, tmp->p ? tmp->p : "", tmp->n, orig0, out, err);
    }
    }
    FLINT_ASSERT(0);
    return -1;
}

/* ---------------------------------------------------------------------------------------------
 * The pipeline */

static int push_ids(int32_t **ids, int *n, int *cap, const int32_t *v, int k, flint_err *err) {
    if (*n + k > *cap) {
        int c = *cap ? *cap : 64;
        while (c < *n + k) c *= 2;
        int32_t *p = realloc(*ids, sizeof *p * (size_t)c);
        if (!p) return flint_err_set(err, FLINT_ERR_NOMEM, "tokenizer: out of memory");
        *ids = p;
        *cap = c;
    }
    if (k) memcpy(*ids + *n, v, sizeof *v * (size_t)k);
    *n += k;
    return 0;
}

static int encode_pieces(const flint_tokenizer *t, const char *text, size_t len, pieces *cur, flint_err *err) {
    pieces next = {0};
    flint_tok_buf norm = {0}, tmp = {0};
    int rc = -1;

    /* 1. non-normalized added tokens, on the raw text */
    if (t->trie_raw.n > 1) {
        if (added_split(t, &t->trie_raw, text, len, 1, cur, err)) goto out;
    } else if (pieces_add(cur, text, len, -1, 1, err)) {
        goto out;
    }
    /* 2. normalize each remaining piece, then normalized added tokens */
    for (size_t k = 0; k < cur->n; k++) {
        piece p = cur->v[k];
        if (p.id >= 0) {
            if (pieces_add(&next, cur->text.p + p.off, p.len, p.id, p.orig0, err)) goto out;
            continue;
        }
        if (flint_tok_normalize(t, cur->text.p + p.off, p.len, &norm, err)) goto out;
        if (t->trie_norm.n > 1) {
            if (added_split(t, &t->trie_norm, norm.p, norm.n, p.orig0, &next, err)) goto out;
        } else if (pieces_add(&next, norm.p, norm.n, -1, p.orig0, err)) {
            goto out;
        }
    }
    pieces_free(cur);
    *cur = next;
    memset(&next, 0, sizeof next);
    /* 3. pre-tokenizers, each over every piece that is not an added token */
    for (int s = 0; s < t->n_pre; s++) {
        for (size_t k = 0; k < cur->n; k++) {
            piece p = cur->v[k];
            const char *ps = cur->text.p + p.off;
            if (p.id >= 0) {
                if (pieces_add(&next, ps, p.len, p.id, p.orig0, err)) goto out;
            } else if (pretok_piece(t, &t->pre[s], ps, p.len, p.orig0, &next, &tmp, err)) {
                goto out;
            }
        }
        pieces_free(cur);
        *cur = next;
        memset(&next, 0, sizeof next);
    }
    rc = 0;
out:
    pieces_free(&next);
    flint_tok_buf_free(&norm);
    flint_tok_buf_free(&tmp);
    return rc;
}

int flint_tokenizer_encode(const flint_tokenizer *t, const char *text, size_t len, int add_special, int32_t **ids,
                           int *n, flint_err *err) {
    *ids = NULL;
    *n = 0;
    if (!text && len) return flint_err_set(err, FLINT_ERR_INVALID, "tokenizer: NULL text");
    if (len > (size_t)1 << 30) return flint_err_set(err, FLINT_ERR_INVALID, "tokenizer: text of %zu bytes is too long", len);
    size_t bad = flint_tok_utf8_check((const unsigned char *)text, len);
    if (bad < len)
        return flint_err_set(err, FLINT_ERR_INVALID, "tokenizer: input is not valid UTF-8 (byte 0x%02X at offset %zu)",
                             (unsigned char)text[bad], bad);
    pieces ps = {0};
    int32_t *out = NULL;
    int n_out = 0, cap = 0;
    if (encode_pieces(t, text ? text : "", len, &ps, err)) goto fail;
    for (size_t k = 0; k < ps.n; k++) {
        const piece *p = &ps.v[k];
        if (p->id >= 0) {
            if (push_ids(&out, &n_out, &cap, &p->id, 1, err)) goto fail;
        } else if (flint_tok_bpe_word(t, ps.text.p + p->off, p->len, &out, &n_out, &cap, err)) {
            goto fail;
        }
    }
    pieces_free(&ps);
    if (add_special) {
        for (int s = 0; s < t->n_post; s++) {
            const flint_tok_post *pp = &t->post[s];
            int32_t *w = NULL;
            int nw = 0, cw = 0;
            if (push_ids(&w, &nw, &cw, pp->pre, pp->n_pre, err) || push_ids(&w, &nw, &cw, out, n_out, err) ||
                push_ids(&w, &nw, &cw, pp->post, pp->n_post, err)) {
                free(w);
                goto fail;
            }
            free(out);
            out = w;
            n_out = nw;
        }
    }
    if (!out) { /* callers may free(*ids) unconditionally; give them a real allocation */
        out = malloc(sizeof *out);
        if (!out) return flint_err_set(err, FLINT_ERR_NOMEM, "tokenizer: out of memory");
    }
    *ids = out;
    *n = n_out;
    return 0;
fail:
    pieces_free(&ps);
    free(out);
    return -1;
}
