/* The vocabulary side of the grammar mask: every token's bytes in one preorder trie (see
 * grammar_internal.h), built once per tokenizer, so that a mask is one walk that prunes a
 * failing prefix for all the tokens sharing it instead of 150k separate runs. */
#include <stdlib.h>
#include <string.h>

#include "sampler/grammar_internal.h"

static int is_whole_utf8(const unsigned char *s, size_t n) {
    int u = GS_CLEAN;
    for (size_t i = 0; i < n; i++) {
        unsigned b = s[i];
        if (u == GS_CLEAN && (b < 0x20 || b == '"' || b == '\\')) continue; /* ASCII: fine here */
        u = gr_utf8_next(u, b);
        if (u < 0) return 0;
    }
    return u == GS_CLEAN;
}

static int cmp_tokens(const void *pa, const void *pb, void *ctx) {
    const flint_grammar_vocab *v = ctx;
    int32_t a = *(const int32_t *)pa, b = *(const int32_t *)pb;
    uint32_t la = v->len[a], lb = v->len[b];
    int c = memcmp(v->pool + v->off[a], v->pool + v->off[b], la < lb ? la : lb);
    if (c) return c;
    if (la != lb) return la < lb ? -1 : 1;
    return (a > b) - (a < b);
}

void flint_grammar_vocab_free(flint_grammar_vocab *v) {
    if (!v) return;
    free(v->pool);
    free(v->off);
    free(v->len);
    free(v->special);
    free(v->in_trie);
    free(v->byte);
    free(v->end);
    free(v->tok_begin);
    free(v->str_max);
    free(v->plain_order);
    free(v->plain_mask);
    free(v->order);
    free(v);
}

int flint_grammar_vocab_size(const flint_grammar_vocab *v) { return v->n_vocab; }

/* Preorder trie from the ids sorted by bytes: each string adds nodes below its common prefix
 * with the one before it, so nodes come out in preorder and ids in the same order. */
static int build_trie(flint_grammar_vocab *v, int32_t *ids, int n, flint_err *err) {
    size_t total = 1;
    for (int i = 0; i < n; i++) total += v->len[ids[i]];
    if (total > INT32_MAX - 2) return flint_err_set(err, FLINT_ERR_INVALID, "grammar: vocabulary too large");
    v->byte = malloc(total);
    v->end = malloc(sizeof(int32_t) * total);
    v->tok_begin = malloc(sizeof(int32_t) * (total + 1));
    v->order = malloc(sizeof(int32_t) * (size_t)(n + 1));
    int32_t *path = malloc(sizeof(int32_t) * (size_t)(v->max_len + 1));
    if (!v->byte || !v->end || !v->tok_begin || !v->order || !path) {
        free(path);
        return flint_err_set(err, FLINT_ERR_NOMEM, "grammar: out of memory building the token trie");
    }
    int32_t nn = 1, no = 0;
    v->byte[0] = 0;
    v->tok_begin[0] = 0;
    path[0] = 0;
    int depth = 0;
    const char *prev = NULL;
    uint32_t prev_len = 0;
    for (int i = 0; i < n; i++) {
        int32_t id = ids[i];
        const char *s = v->pool + v->off[id];
        uint32_t len = v->len[id], l = 0;
        while (prev && l < len && l < prev_len && s[l] == prev[l]) l++;
        for (int d = depth; d > (int)l; d--) v->end[path[d]] = nn;
        for (uint32_t d = l + 1; d <= len; d++) {
            v->byte[nn] = (uint8_t)s[d - 1];
            v->tok_begin[nn] = no;
            path[d] = nn++;
        }
        v->order[no++] = id;
        depth = (int)len;
        prev = s, prev_len = len;
    }
    for (int d = depth; d >= 0; d--) v->end[path[d]] = nn;
    v->tok_begin[nn] = no;
    v->n_nodes = nn;
    v->n_order = no;
    free(path);
    return 0;
}

/* str_max (grammar_internal.h), bottom-up for every UTF-8 entry state at once. */
static int build_string_summary(flint_grammar_vocab *v, flint_err *err) {
    int32_t nn = v->n_nodes;
    int16_t *f = malloc(sizeof(int16_t) * 8 * (size_t)nn);
    v->str_max = malloc((size_t)nn);
    if (!f || !v->str_max) {
        free(f);
        return flint_err_set(err, FLINT_ERR_NOMEM, "grammar: out of memory building the token trie");
    }
    for (int32_t j = nn - 1; j >= 1; j--) {
        int own = v->tok_begin[j + 1] > v->tok_begin[j];
        for (int u = 0; u < 8; u++) {
            int u2 = gr_utf8_next(u, v->byte[j]);
            int m = own ? 0 : -2;
            if (u2 < 0) m = -1;
            for (int32_t c = j + 1; c < v->end[j] && m != -1; c = v->end[c]) {
                int fc = f[(size_t)c * 8 + u2];
                m = fc < 0 ? -1 : fc > m ? fc : m;
            }
            FLINT_ASSERT(m != -2); /* a leaf always ends a token */
            if (m >= 0) {
                m += u == GS_CLEAN;
                if (m > 254) m = -1;
            }
            f[(size_t)j * 8 + u] = (int16_t)m;
        }
        v->str_max[j] = f[(size_t)j * 8] < 0 ? 0xFF : (uint8_t)f[(size_t)j * 8];
    }
    v->str_max[0] = 0xFF;
    free(f);
    return 0;
}

/* The plain-text tokens by character count (grammar_internal.h). */
static int build_plain(flint_grammar_vocab *v, flint_err *err) {
    uint8_t *chars = malloc((size_t)v->n_vocab);
    v->plain_mask = calloc((size_t)v->n_vocab, 1);
    v->plain_order = malloc(sizeof(int32_t) * (size_t)v->n_vocab);
    if (!chars || !v->plain_mask || !v->plain_order) {
        free(chars);
        return flint_err_set(err, FLINT_ERR_NOMEM, "grammar: out of memory building the token trie");
    }
    int32_t count[256] = {0};
    for (int i = 0; i < v->n_vocab; i++) {
        chars[i] = 0xFF;
        if (!v->in_trie[i]) continue;
        int u = GS_CLEAN, k = 0;
        for (uint32_t j = 0; j < v->len[i] && u >= 0; j++) {
            k += u == GS_CLEAN;
            u = gr_utf8_next(u, (uint8_t)v->pool[v->off[i] + j]);
        }
        if (u < 0 || k > 254) continue;
        chars[i] = (uint8_t)k;
        v->plain_mask[i] = 1;
        count[k]++;
        if (k > v->plain_max) v->plain_max = k;
    }
    int32_t at[256];
    for (int k = 0, sum = 0; k < 256; k++) {
        at[k] = sum;
        sum += count[k];
        v->plain_le[k] = sum;
    }
    for (int i = 0; i < v->n_vocab; i++)
        if (chars[i] != 0xFF) v->plain_order[at[chars[i]]++] = i;
    free(chars);
    return 0;
}

flint_grammar_vocab *flint_grammar_vocab_from_bytes(int n_vocab, const char *const *bytes, const size_t *lens,
                                                    const uint8_t *special, flint_err *err) {
    if (n_vocab <= 0) {
        flint_err_set(err, FLINT_ERR_INVALID, "grammar: empty vocabulary");
        return NULL;
    }
    flint_grammar_vocab *v = calloc(1, sizeof *v);
    size_t total = 0;
    for (int i = 0; i < n_vocab; i++) total += bytes[i] ? lens[i] : 0;
    int32_t *ids = NULL;
    if (!v || total > UINT32_MAX - 1) goto nomem;
    v->n_vocab = n_vocab;
    v->pool = malloc(total + 1);
    v->off = calloc((size_t)n_vocab, sizeof *v->off);
    v->len = calloc((size_t)n_vocab, sizeof *v->len);
    v->special = calloc((size_t)n_vocab, 1);
    v->in_trie = calloc((size_t)n_vocab, 1);
    ids = malloc(sizeof *ids * (size_t)n_vocab);
    if (!v->pool || !v->off || !v->len || !v->special || !v->in_trie || !ids) goto nomem;
    size_t at = 0;
    for (int i = 0; i < n_vocab; i++) {
        size_t l = bytes[i] ? lens[i] : 0;
        if (l) memcpy(v->pool + at, bytes[i], l);
        v->off[i] = (uint32_t)at;
        v->len[i] = (uint32_t)l;
        v->special[i] = special && special[i];
        at += l;
    }
    /* which single bytes exist decides whether tokens ending inside a character can be used */
    uint8_t single[256] = {0};
    for (int i = 0; i < n_vocab; i++)
        if (v->len[i] == 1 && !v->special[i]) single[(uint8_t)v->pool[v->off[i]]] = 1;
    v->all_bytes = 1;
    for (int b = 0; b < 256; b++) v->all_bytes &= single[b];
    v->missing_ascii = -1;
    for (int b = 0x20; b < 0x7F && v->missing_ascii < 0; b++)
        if (!single[b]) v->missing_ascii = b;
    int n = 0;
    for (int i = 0; i < n_vocab; i++) {
        if (!v->len[i] || v->special[i]) continue;
        /* a token that stops inside a character (or spells invalid UTF-8) is usable only when
         * every byte can follow as a token of its own */
        if (!v->all_bytes && !is_whole_utf8((const unsigned char *)v->pool + v->off[i], v->len[i])) continue;
        if ((int)v->len[i] > v->max_len) v->max_len = (int)v->len[i];
        v->in_trie[i] = 1;
        ids[n++] = i;
    }
    qsort_r(ids, (size_t)n, sizeof *ids, cmp_tokens, v);
    if (build_trie(v, ids, n, err) || build_string_summary(v, err) || build_plain(v, err)) {
        free(ids);
        flint_grammar_vocab_free(v);
        return NULL;
    }
    free(ids);
    return v;
nomem:
    free(ids);
    flint_grammar_vocab_free(v);
    flint_err_set(err, FLINT_ERR_NOMEM, "grammar: out of memory for a vocabulary of %d tokens", n_vocab);
    return NULL;
}

flint_grammar_vocab *flint_grammar_vocab_build(const flint_tokenizer *tok, flint_err *err) {
    int n = flint_tokenizer_vocab_size(tok);
    if (n <= 0) {
        flint_err_set(err, FLINT_ERR_INVALID, "grammar: the tokenizer has no tokens");
        return NULL;
    }
    char **bytes = calloc((size_t)n, sizeof *bytes);
    size_t *lens = calloc((size_t)n, sizeof *lens);
    uint8_t *special = calloc((size_t)n, 1);
    flint_grammar_vocab *v = NULL;
    if (!bytes || !lens || !special) {
        flint_err_set(err, FLINT_ERR_NOMEM, "grammar: out of memory");
        goto done;
    }
    char buf[512];
    for (int i = 0; i < n; i++) {
        int l = flint_tokenizer_token_bytes(tok, i, buf, sizeof buf);
        if (l < 0) {
            flint_err_set(err, FLINT_ERR_NOMEM, "grammar: cannot read the bytes of token %d", i);
            goto done;
        }
        if (l == 0) continue;
        bytes[i] = malloc((size_t)l);
        if (!bytes[i]) {
            flint_err_set(err, FLINT_ERR_NOMEM, "grammar: out of memory");
            goto done;
        }
        if ((size_t)l <= sizeof buf) memcpy(bytes[i], buf, (size_t)l);
        else flint_tokenizer_token_bytes(tok, i, bytes[i], (size_t)l);
        lens[i] = (size_t)l;
        special[i] = (uint8_t)flint_tokenizer_is_special(tok, i);
    }
    v = flint_grammar_vocab_from_bytes(n, (const char *const *)bytes, lens, special, err);
done:
    if (bytes)
        for (int i = 0; i < n; i++) free(bytes[i]);
    free(bytes);
    free(lens);
    free(special);
    return v;
}

int gr_vocab_can_spell(const flint_grammar_vocab *v, const char *s, size_t n) {
    if (v->all_bytes) return 1;
    uint8_t *reach = calloc(n + 1, 1);
    if (!reach) return 0;
    reach[0] = 1;
    for (size_t i = 0; i < n; i++) {
        if (!reach[i]) continue;
        int32_t node = 0;
        for (size_t k = i; k < n; k++) {
            int32_t c = node + 1, found = -1;
            for (; c < v->end[node]; c = v->end[c])
                if (v->byte[c] == (uint8_t)s[k]) {
                    found = c;
                    break;
                }
            if (found < 0) break;
            node = found;
            if (v->tok_begin[node + 1] > v->tok_begin[node]) reach[k + 1] = 1;
        }
    }
    int ok = reach[n];
    free(reach);
    return ok;
}
