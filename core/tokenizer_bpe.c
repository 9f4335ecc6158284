/* The BPE model of tokenizers (models/bpe/model.rs + word.rs), step for step: one symbol per
 * character (continuing-subword prefix / end-of-word suffix, byte fallback to <0xNN>, unk with
 * optional fusing), then merges applied lowest rank first, leftmost first among equal ranks, with
 * the same priority queue and the same stale-entry test. The stale test only compares the id a
 * merge produces, which is not the textbook algorithm in rare ties; copying it is what makes the
 * output equal HF's. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer_internal.h"

typedef struct sym {
    int32_t c;
    int32_t prev, next;
    uint32_t len; /* bytes of the word it covers; 0 once merged into its left neighbour */
} sym;

typedef struct merge {
    uint32_t rank;
    uint32_t pos;
    int32_t id;
} merge;

typedef struct word {
    sym *s;
    int n, cap;
    merge *h; /* min-heap on (rank, pos) */
    int hn, hcap;
} word;

static int before(const merge *a, const merge *b) { return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos; }

static int heap_push(word *w, merge m, flint_err *err) {
    if (w->hn == w->hcap) {
        int cap = w->hcap ? w->hcap * 2 : 64;
        merge *h = realloc(w->h, sizeof *h * (size_t)cap);
        if (!h) return flint_err_set(err, FLINT_ERR_NOMEM, "tokenizer: out of memory");
        w->h = h;
        w->hcap = cap;
    }
    int i = w->hn++;
    while (i > 0) {
        int p = (i - 1) / 2;
        if (!before(&m, &w->h[p])) break;
        w->h[i] = w->h[p];
        i = p;
    }
    w->h[i] = m;
    return 0;
}

static merge heap_pop(word *w) {
    merge top = w->h[0], last = w->h[--w->hn];
    int i = 0;
    for (;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        const merge *best = &last;
        if (l < w->hn && before(&w->h[l], best)) m = l, best = &w->h[l];
        if (r < w->hn && before(&w->h[r], best)) m = r;
        if (m == i) break;
        w->h[i] = w->h[m];
        i = m;
    }
    if (w->hn) w->h[i] = last;
    return top;
}

static int add_sym(word *w, int32_t c, uint32_t len, flint_err *err) {
    if (w->n == w->cap) {
        int cap = w->cap ? w->cap * 2 : 64;
        sym *s = realloc(w->s, sizeof *s * (size_t)cap);
        if (!s) return flint_err_set(err, FLINT_ERR_NOMEM, "tokenizer: out of memory");
        w->s = s;
        w->cap = cap;
    }
    if (w->n) w->s[w->n - 1].next = w->n;
    w->s[w->n] = (sym){.c = c, .prev = w->n - 1, .next = -1, .len = len};
    w->n++;
    return 0;
}

static int merge_all(const flint_tokenizer *t, word *w, flint_err *err) {
    for (int i = 0; i + 1 < w->n; i++) {
        const flint_tok_mslot *m = flint_tok_mmap_get(&t->merges, w->s[i].c, w->s[i + 1].c);
        if (m && heap_push(w, (merge){m->rank, (uint32_t)i, m->id}, err)) return -1;
    }
    while (w->hn) {
        merge top = heap_pop(w);
        sym *cur = &w->s[top.pos];
        if (cur->len == 0 || cur->next == -1) continue;
        int next_pos = cur->next;
        sym right = w->s[next_pos];
        const flint_tok_mslot *m = flint_tok_mmap_get(&t->merges, cur->c, right.c);
        if (!m || m->id != top.id) continue; /* stale entry */
        cur->c = top.id;
        cur->len += right.len;
        cur->next = right.next;
        w->s[next_pos].len = 0;
        if (right.next > -1 && right.next < w->n) w->s[right.next].prev = (int32_t)top.pos;
        if (cur->prev >= 0) {
            const flint_tok_mslot *pm = flint_tok_mmap_get(&t->merges, w->s[cur->prev].c, cur->c);
            if (pm && heap_push(w, (merge){pm->rank, (uint32_t)cur->prev, pm->id}, err)) return -1;
            cur = &w->s[top.pos];
        }
        if (cur->next > -1 && cur->next < w->n) {
            const flint_tok_mslot *nm = flint_tok_mmap_get(&t->merges, cur->c, w->s[cur->next].c);
            if (nm && heap_push(w, (merge){nm->rank, top.pos, nm->id}, err)) return -1;
        }
    }
    return 0;
}

/* The vocab id of one character (with the prefix/suffix the model asks for), -1 if none. */
static int32_t char_id(const flint_tokenizer *t, const char *c, size_t k, uint32_t cp, int first, int last,
                       flint_tok_buf *tmp, const char **s_out, size_t *n_out, flint_err *err) {
    int pre = t->cont_prefix && !first, suf = t->eow_suffix && last;
    if (!pre && !suf) {
        *s_out = c;
        *n_out = k;
        if (cp < FT_SMALL_CP) return t->small_cp_id[cp];
        return flint_tok_smap_get(&t->vocab, t->pool, c, k);
    }
    tmp->n = 0;
    if ((pre && flint_tok_buf_put(tmp, t->cont_prefix, t->cont_prefix_len, err)) || flint_tok_buf_put(tmp, c, k, err) ||
        (suf && flint_tok_buf_put(tmp, t->eow_suffix, t->eow_suffix_len, err)))
        return -2;
    *s_out = tmp->p;
    *n_out = tmp->n;
    return flint_tok_smap_get(&t->vocab, t->pool, tmp->p, tmp->n);
}

static int push_id(int32_t **ids, int *n, int *cap, int32_t id, flint_err *err) {
    if (*n == *cap) {
        int c = *cap ? *cap * 2 : 256;
        int32_t *p = realloc(*ids, sizeof *p * (size_t)c);
        if (!p) return flint_err_set(err, FLINT_ERR_NOMEM, "tokenizer: out of memory");
        *ids = p;
        *cap = c;
    }
    (*ids)[(*n)++] = id;
    return 0;
}

int flint_tok_bpe_word(const flint_tokenizer *t, const char *w, size_t n, int32_t **ids, int *n_ids, int *cap,
                       flint_err *err) {
    if (n == 0) return 0;
    if (t->ignore_merges) {
        int32_t id = flint_tok_smap_get(&t->vocab, t->pool, w, n);
        if (id >= 0) return push_id(ids, n_ids, cap, id, err);
    }
    word wd = {0};
    flint_tok_buf tmp = {0};
    int rc = -1;
    int32_t unk = -1; /* pending unk symbol (fuse_unk grows it) */
    uint32_t unk_len = 0;
    size_t i = 0;
    while (i < n) {
        uint32_t cp;
        int k = flint_tok_utf8_len((const unsigned char *)w + i, n - i, &cp);
        FLINT_ASSERT(k > 0); /* encode validated the text */
        const char *s;
        size_t sn;
        int32_t id = char_id(t, w + i, (size_t)k, cp, i == 0, i + (size_t)k == n, &tmp, &s, &sn, err);
        if (id == -2) goto out;
        if (id >= 0) {
            if (unk >= 0 && add_sym(&wd, unk, unk_len, err)) goto out;
            unk = -1;
            if (add_sym(&wd, id, (uint32_t)k, err)) goto out;
        } else {
            int fell_back = 0;
            if (t->byte_fallback) {
                size_t b = 0;
                while (b < sn && t->byte_tok[(unsigned char)s[b]] >= 0) b++;
                if (b == sn) {
                    /* as HF: a pending unk is not flushed before the byte tokens */
                    for (b = 0; b < sn; b++)
                        if (add_sym(&wd, t->byte_tok[(unsigned char)s[b]], 1, err)) goto out;
                    fell_back = 1;
                }
            }
            if (!fell_back && (t->unk_id >= 0 || t->unk_missing)) {
                if (t->unk_missing) {
                    flint_err_set(err, FLINT_ERR_FORMAT, "%s: unk_token \"%s\" is not in the vocabulary", t->path,
                                  t->unk_missing);
                    goto out;
                }
                if (unk >= 0 && t->fuse_unk) {
                    unk_len += (uint32_t)k;
                } else {
                    if (unk >= 0 && add_sym(&wd, unk, unk_len, err)) goto out;
                    unk = t->unk_id;
                    unk_len = (uint32_t)k;
                }
            }
        }
        i += (size_t)k;
    }
    if (unk >= 0 && add_sym(&wd, unk, unk_len, err)) goto out;
    if (merge_all(t, &wd, err)) goto out;
    for (int j = 0; j < wd.n; j++)
        if (wd.s[j].len && push_id(ids, n_ids, cap, wd.s[j].c, err)) goto out;
    rc = 0;
out:
    free(wd.s);
    free(wd.h);
    flint_tok_buf_free(&tmp);
    return rc;
}
