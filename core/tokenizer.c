/* Loading a Hugging Face tokenizer.json into the flat tables of tokenizer_internal.h, and the
 * small accessors. Every component is checked against what flint implements; anything else is
 * refused with a message naming the component, because a tokenizer that is silently a little
 * different corrupts every prompt. Added tokens get their ids the way tokenizers' deserializer
 * assigns them (AddedVocabulary::add_tokens), not blindly from the file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "json.h"
#include "log.h"
#include "tokenizer_internal.h"

#define MAX_TOKENIZER_JSON ((size_t)1 << 30)
#define MAX_CONFIG_JSON ((size_t)64 << 20)

static uint32_t pool_add(flint_tokenizer *t, size_t *cap, const char *s, size_t n) {
    if (t->pool_len + n + 1 > *cap) {
        while (t->pool_len + n + 1 > *cap) *cap = *cap ? *cap * 2 : 1 << 16;
        t->pool = flint_xrealloc(t->pool, *cap);
    }
    FLINT_ASSERT(t->pool_len + n < UINT32_MAX);
    uint32_t off = (uint32_t)t->pool_len;
    memcpy(t->pool + off, s, n);
    t->pool[off + n] = 0;
    t->pool_len += n + 1;
    return off;
}

static const cJSON *get(const cJSON *o, const char *k) {
    return cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, k) : NULL;
}

/* A token id in JSON: an integer that fits int32 (tokenizers reads u32). */
static int is_id(const cJSON *e) {
    return cJSON_IsNumber(e) && e->valuedouble >= 0 && e->valuedouble <= 0x7FFFFFF0 && e->valuedouble == (double)(int32_t)e->valuedouble;
}

static const char *type_of(const cJSON *o) {
    const cJSON *ty = get(o, "type");
    return cJSON_IsString(ty) ? ty->valuestring : NULL;
}

/* A string field that may be absent or null (*out = NULL). */
static int opt_string(const cJSON *o, const char *key, const char *what, const char **out, flint_err *err) {
    const cJSON *v = get(o, key);
    *out = NULL;
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsString(v)) return flint_err_set(err, FLINT_ERR_FORMAT, "%s: \"%s\" must be a string", what, key);
    *out = v->valuestring;
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * model */

static int parse_model(flint_tokenizer *t, const cJSON *m, size_t *pool_cap, flint_err *err) {
    const char *ty = type_of(m);
    if (!ty && get(m, "merges")) ty = "BPE";
    if (!ty || strcmp(ty, "BPE"))
        return flint_err_set(err, FLINT_ERR_UNSUPPORTED, "%s: model type \"%s\" is not supported (flint implements BPE)",
                             t->path, ty ? ty : "?");
    const cJSON *dropout = get(m, "dropout");
    if (dropout && !cJSON_IsNull(dropout) && !(cJSON_IsNumber(dropout) && dropout->valuedouble == 0))
        return flint_err_set(err, FLINT_ERR_UNSUPPORTED, "%s: model.dropout is set (random BPE is not supported)", t->path);
    const cJSON *vocab = get(m, "vocab"), *merges = get(m, "merges");
    if (!cJSON_IsObject(vocab)) return flint_err_set(err, FLINT_ERR_FORMAT, "%s: model.vocab must be an object", t->path);
    if (merges && !cJSON_IsNull(merges) && !cJSON_IsArray(merges))
        return flint_err_set(err, FLINT_ERR_FORMAT, "%s: model.merges must be an array", t->path);

    int nv = cJSON_GetArraySize(vocab);
    flint_tok_smap_init(&t->vocab, (size_t)nv);
    int32_t max_id = -1;
    for (const cJSON *e = vocab->child; e; e = e->next) {
        if (!is_id(e))
            return flint_err_set(err, FLINT_ERR_FORMAT, "%s: model.vocab[\"%s\"] is not a token id", t->path, e->string);
        size_t len = strlen(e->string);
        uint32_t off = pool_add(t, pool_cap, e->string, len);
        flint_tok_smap_put(&t->vocab, t->pool, off, (uint32_t)len, (int32_t)e->valuedouble);
        if ((int32_t)e->valuedouble > max_id) max_id = (int32_t)e->valuedouble;
    }
    t->n_vocab = (int)t->vocab.n;
    t->n_ids = max_id + 1;

    int fuse = 0, bf = 0, ign = 0;
    if (flint_json_get_bool(m, "fuse_unk", t->path, 0, &fuse, err) ||
        flint_json_get_bool(m, "byte_fallback", t->path, 0, &bf, err) ||
        flint_json_get_bool(m, "ignore_merges", t->path, 0, &ign, err))
        return -1;
    t->fuse_unk = fuse, t->byte_fallback = bf, t->ignore_merges = ign;
    const char *unk, *cp, *ew;
    if (opt_string(m, "unk_token", t->path, &unk, err) || opt_string(m, "continuing_subword_prefix", t->path, &cp, err) ||
        opt_string(m, "end_of_word_suffix", t->path, &ew, err))
        return -1;
    t->unk_id = -1;
    if (unk) {
        t->unk_id = flint_tok_smap_get(&t->vocab, t->pool, unk, strlen(unk));
        if (t->unk_id < 0) t->unk_missing = flint_xstrdup(unk);
    }
    if (cp && *cp) t->cont_prefix = flint_xstrdup(cp), t->cont_prefix_len = strlen(cp);
    if (ew && *ew) t->eow_suffix = flint_xstrdup(ew), t->eow_suffix_len = strlen(ew);
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        t->byte_tok[b] = flint_tok_smap_get(&t->vocab, t->pool, name, 6);
    }
    t->small_cp_id = flint_xmalloc(sizeof *t->small_cp_id * FT_SMALL_CP);
    for (uint32_t c = 0; c < FT_SMALL_CP; c++) {
        char u[4];
        int k = flint_tok_utf8_put(c, u);
        t->small_cp_id[c] = flint_tok_smap_get(&t->vocab, t->pool, u, (size_t)k);
    }

    /* merges: "a b" strings (older files) or [a, b] pairs (newer); rank = position */
    int nm = merges ? cJSON_GetArraySize(merges) : 0;
    flint_tok_mmap_init(&t->merges, (size_t)nm);
    char *buf = NULL;
    size_t buf_cap = 0;
    int rank = 0;
    for (const cJSON *e = merges ? merges->child : NULL; e; e = e->next, rank++) {
        const char *a, *b;
        size_t la, lb;
        if (cJSON_IsString(e)) {
            const char *s = e->valuestring, *sp = strchr(s, ' ');
            if (!sp || strchr(sp + 1, ' ')) {
                free(buf);
                return flint_err_set(err, FLINT_ERR_FORMAT, "%s: merge %d \"%s\" is not \"left right\"", t->path, rank, s);
            }
            a = s, la = (size_t)(sp - s), b = sp + 1, lb = strlen(b);
        } else if (cJSON_IsArray(e) && cJSON_GetArraySize(e) == 2 && cJSON_IsString(e->child) &&
                   cJSON_IsString(e->child->next)) {
            a = e->child->valuestring, la = strlen(a), b = e->child->next->valuestring, lb = strlen(b);
        } else {
            free(buf);
            return flint_err_set(err, FLINT_ERR_FORMAT, "%s: merge %d is neither \"a b\" nor [a, b]", t->path, rank);
        }
        int32_t ia = flint_tok_smap_get(&t->vocab, t->pool, a, la), ib = flint_tok_smap_get(&t->vocab, t->pool, b, lb);
        size_t skip = t->cont_prefix_len <= lb ? t->cont_prefix_len : lb;
        if (buf_cap < la + lb + 1) buf = flint_xrealloc(buf, buf_cap = (la + lb + 1) * 2);
        memcpy(buf, a, la);
        memcpy(buf + la, b + skip, lb - skip);
        int32_t inew = flint_tok_smap_get(&t->vocab, t->pool, buf, la + lb - skip);
        if (ia < 0 || ib < 0 || inew < 0) {
            flint_err_set(err, FLINT_ERR_FORMAT, "%s: merge %d (\"%.*s\" \"%.*s\") uses a token missing from the vocab",
                          t->path, rank, (int)la, a, (int)lb, b);
            free(buf);
            return -1;
        }
        flint_tok_mmap_put(&t->merges, ia, ib, (uint32_t)rank, inew);
    }
    free(buf);
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * normalizer, pre-tokenizer, post-processor, decoder */

static int add_norm(flint_tokenizer *t, const cJSON *n, flint_err *err) {
    if (!n || cJSON_IsNull(n)) return 0;
    const char *ty = type_of(n);
    if (ty && !strcmp(ty, "Sequence")) {
        const cJSON *list = get(n, "normalizers");
        if (!cJSON_IsArray(list)) return flint_err_set(err, FLINT_ERR_FORMAT, "%s: normalizer Sequence without a list", t->path);
        for (const cJSON *e = list->child; e; e = e->next)
            if (add_norm(t, e, err)) return -1;
        return 0;
    }
    flint_tok_norm st = {0};
    char what[256];
    snprintf(what, sizeof what, "%s: normalizer %s", t->path, ty ? ty : "?");
    if (!ty) return flint_err_set(err, FLINT_ERR_FORMAT, "%s: normalizer without a type", t->path);
    if (!strcmp(ty, "NFC")) st.kind = FT_NORM_NFC;
    else if (!strcmp(ty, "NFD")) st.kind = FT_NORM_NFD;
    else if (!strcmp(ty, "NFKC")) st.kind = FT_NORM_NFKC;
    else if (!strcmp(ty, "NFKD")) st.kind = FT_NORM_NFKD;
    else if (!strcmp(ty, "Prepend")) {
        const cJSON *p = get(n, "prepend");
        if (!cJSON_IsString(p)) return flint_err_set(err, FLINT_ERR_FORMAT, "%s: no \"prepend\" string", what);
        st.kind = FT_NORM_PREPEND;
        st.str = flint_xstrdup(p->valuestring);
        st.str_len = strlen(st.str);
    } else if (!strcmp(ty, "Replace")) {
        const cJSON *c = get(n, "content");
        if (!cJSON_IsString(c)) return flint_err_set(err, FLINT_ERR_FORMAT, "%s: no \"content\" string", what);
        if (flint_tok_pattern_parse(&st.pat, get(n, "pattern"), what, err)) return -1;
        st.kind = FT_NORM_REPLACE;
        st.str = flint_xstrdup(c->valuestring);
        st.str_len = strlen(st.str);
    } else if (!strcmp(ty, "Strip")) {
        st.kind = FT_NORM_STRIP;
        if (flint_json_get_bool(n, "strip_left", what, 1, &st.left, err) ||
            flint_json_get_bool(n, "strip_right", what, 1, &st.right, err))
            return -1;
    } else {
        return flint_err_set(err, FLINT_ERR_UNSUPPORTED, "%s: normalizer \"%s\" is not supported", t->path, ty);
    }
    t->norm = flint_xrealloc(t->norm, sizeof *t->norm * (size_t)(t->n_norm + 1));
    t->norm[t->n_norm++] = st;
    return 0;
}

static int one_char(const char *s, const char *what, const char *field, char *out, int *out_len, uint32_t *cp,
                    flint_err *err) {
    size_t n = s ? strlen(s) : 0;
    int k = n ? flint_tok_utf8_len((const unsigned char *)s, n, cp) : 0;
    if (!k || (size_t)k != n) return flint_err_set(err, FLINT_ERR_FORMAT, "%s: \"%s\" must be one character", what, field);
    if (out) memcpy(out, s, n), out[n] = 0, *out_len = k;
    return 0;
}

static int parse_prepend_scheme(const cJSON *o, const char *what, int *out, flint_err *err) {
    const cJSON *ps = get(o, "prepend_scheme");
    if (cJSON_IsString(ps)) {
        if (!strcmp(ps->valuestring, "always")) *out = FT_PREPEND_ALWAYS;
        else if (!strcmp(ps->valuestring, "never")) *out = FT_PREPEND_NEVER;
        else if (!strcmp(ps->valuestring, "first")) *out = FT_PREPEND_FIRST;
        else return flint_err_set(err, FLINT_ERR_UNSUPPORTED, "%s: prepend_scheme \"%s\" is not supported", what, ps->valuestring);
        return 0;
    }
    int aps = 1; /* files older than prepend_scheme carry add_prefix_space */
    if (flint_json_get_bool(o, "add_prefix_space", what, 1, &aps, err)) return -1;
    *out = aps ? FT_PREPEND_ALWAYS : FT_PREPEND_NEVER;
    return 0;
}

static int add_pre(flint_tokenizer *t, const cJSON *p, flint_err *err) {
    if (!p || cJSON_IsNull(p)) return 0;
    const char *ty = type_of(p);
    if (ty && !strcmp(ty, "Sequence")) {
        const cJSON *list = get(p, "pretokenizers");
        if (!cJSON_IsArray(list)) return flint_err_set(err, FLINT_ERR_FORMAT, "%s: pre_tokenizer Sequence without a list", t->path);
        for (const cJSON *e = list->child; e; e = e->next)
            if (add_pre(t, e, err)) return -1;
        return 0;
    }
    flint_tok_pretok st = {0};
    char what[256];
    snprintf(what, sizeof what, "%s: pre_tokenizer %s", t->path, ty ? ty : "?");
    if (!ty) return flint_err_set(err, FLINT_ERR_FORMAT, "%s: pre_tokenizer without a type", t->path);
    if (!strcmp(ty, "ByteLevel")) {
        st.kind = FT_PRE_BYTELEVEL;
        if (flint_json_get_bool(p, "add_prefix_space", what, 1, &st.add_prefix_space, err) ||
            flint_json_get_bool(p, "use_regex", what, 1, &st.use_regex, err))
            return -1;
        if (st.use_regex && !t->gpt2_re.re &&
            flint_tok_pattern_regex(&t->gpt2_re, "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+",
                                    what, err))
            return -1;
    } else if (!strcmp(ty, "Split")) {
        static const char *const names[] = {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"};
        const cJSON *b = get(p, "behavior");
        st.kind = FT_PRE_SPLIT;
        st.behavior = -1;
        for (int i = 0; i < 5; i++)
            if (cJSON_IsString(b) && !strcmp(b->valuestring, names[i])) st.behavior = i;
        if (st.behavior < 0) return flint_err_set(err, FLINT_ERR_UNSUPPORTED, "%s: unknown behavior", what);
        if (flint_json_get_bool(p, "invert", what, 0, &st.invert, err)) return -1;
        if (flint_tok_pattern_parse(&st.pat, get(p, "pattern"), what, err)) return -1;
    } else if (!strcmp(ty, "Metaspace")) {
        const cJSON *r = get(p, "replacement");
        uint32_t cp;
        st.kind = FT_PRE_METASPACE;
        if (one_char(cJSON_IsString(r) ? r->valuestring : NULL, what, "replacement", st.rep, &st.rep_len, &cp, err) ||
            parse_prepend_scheme(p, what, &st.prepend, err) || flint_json_get_bool(p, "split", what, 1, &st.split, err))
            return -1;
    } else {
        return flint_err_set(err, FLINT_ERR_UNSUPPORTED, "%s: pre_tokenizer \"%s\" is not supported", t->path, ty);
    }
    t->pre = flint_xrealloc(t->pre, sizeof *t->pre * (size_t)(t->n_pre + 1));
    t->pre[t->n_pre++] = st;
    return 0;
}

static int append_ids(int32_t **v, int *n, const cJSON *ids, const char *what, flint_err *err) {
    if (!cJSON_IsArray(ids)) return flint_err_set(err, FLINT_ERR_FORMAT, "%s: special token without \"ids\"", what);
    for (const cJSON *e = ids->child; e; e = e->next) {
        if (!is_id(e)) return flint_err_set(err, FLINT_ERR_FORMAT, "%s: bad id", what);
        *v = flint_xrealloc(*v, sizeof **v * (size_t)(*n + 1));
        (*v)[(*n)++] = (int32_t)e->valuedouble;
    }
    return 0;
}

static int add_post(flint_tokenizer *t, const cJSON *p, flint_err *err) {
    if (!p || cJSON_IsNull(p)) return 0;
    const char *ty = type_of(p);
    char what[256];
    snprintf(what, sizeof what, "%s: post_processor %s", t->path, ty ? ty : "?");
    if (!ty) return flint_err_set(err, FLINT_ERR_FORMAT, "%s: post_processor without a type", t->path);
    if (!strcmp(ty, "Sequence")) {
        const cJSON *list = get(p, "processors");
        if (!cJSON_IsArray(list)) return flint_err_set(err, FLINT_ERR_FORMAT, "%s: without a list", what);
        for (const cJSON *e = list->child; e; e = e->next)
            if (add_post(t, e, err)) return -1;
        return 0;
    }
    if (!strcmp(ty, "ByteLevel")) return 0; /* offsets only */
    flint_tok_post st = {0};
    if (!strcmp(ty, "TemplateProcessing")) {
        const cJSON *single = get(p, "single"), *specials = get(p, "special_tokens");
        if (!cJSON_IsArray(single)) return flint_err_set(err, FLINT_ERR_FORMAT, "%s: no \"single\" template", what);
        int seen_a = 0;
        for (const cJSON *e = single->child; e; e = e->next) {
            const cJSON *sp = get(e, "SpecialToken"), *sq = get(e, "Sequence");
            if (sq) {
                const cJSON *id = get(sq, "id");
                if (!cJSON_IsString(id) || strcmp(id->valuestring, "A") || seen_a++) {
                    flint_err_set(err, FLINT_ERR_UNSUPPORTED, "%s: the single template must hold $A exactly once", what);
                    goto fail;
                }
            } else if (sp) {
                const cJSON *id = get(sp, "id");
                const cJSON *tok = cJSON_IsString(id) ? get(specials, id->valuestring) : NULL;
                if (!tok) {
                    flint_err_set(err, FLINT_ERR_FORMAT, "%s: special token not in special_tokens", what);
                    goto fail;
                }
                if (append_ids(seen_a ? &st.post : &st.pre, seen_a ? &st.n_post : &st.n_pre, get(tok, "ids"), what, err))
                    goto fail;
            } else {
                flint_err_set(err, FLINT_ERR_FORMAT, "%s: unknown template piece", what);
                goto fail;
            }
        }
        if (!seen_a) {
            flint_err_set(err, FLINT_ERR_UNSUPPORTED, "%s: the single template has no $A", what);
            goto fail;
        }
    } else if (!strcmp(ty, "RobertaProcessing") || !strcmp(ty, "BertProcessing")) {
        const cJSON *cls = get(p, "cls"), *sep = get(p, "sep");
        if (!cJSON_IsArray(cls) || !cJSON_IsArray(sep) || !is_id(cJSON_GetArrayItem(cls, 1)) ||
            !is_id(cJSON_GetArrayItem(sep, 1)))
            return flint_err_set(err, FLINT_ERR_FORMAT, "%s: cls/sep must be [token, id]", what);
        st.pre = flint_xmalloc(sizeof *st.pre);
        st.post = flint_xmalloc(sizeof *st.post);
        st.pre[0] = (int32_t)cJSON_GetArrayItem(cls, 1)->valuedouble;
        st.post[0] = (int32_t)cJSON_GetArrayItem(sep, 1)->valuedouble;
        st.n_pre = st.n_post = 1;
    } else {
        return flint_err_set(err, FLINT_ERR_UNSUPPORTED, "%s: post_processor \"%s\" is not supported", t->path, ty);
    }
    t->post = flint_xrealloc(t->post, sizeof *t->post * (size_t)(t->n_post + 1));
    t->post[t->n_post++] = st;
    return 0;
fail:
    free(st.pre);
    free(st.post);
    return -1;
}

static int add_dec(flint_tokenizer *t, const cJSON *d, flint_err *err) {
    if (!d || cJSON_IsNull(d)) return 0;
    const char *ty = type_of(d);
    if (ty && !strcmp(ty, "Sequence")) {
        const cJSON *list = get(d, "decoders");
        if (!cJSON_IsArray(list)) return flint_err_set(err, FLINT_ERR_FORMAT, "%s: decoder Sequence without a list", t->path);
        for (const cJSON *e = list->child; e; e = e->next)
            if (add_dec(t, e, err)) return -1;
        return 0;
    }
    flint_tok_dec st = {0};
    char what[256];
    snprintf(what, sizeof what, "%s: decoder %s", t->path, ty ? ty : "?");
    if (!ty) return flint_err_set(err, FLINT_ERR_FORMAT, "%s: decoder without a type", t->path);
    if (!strcmp(ty, "ByteLevel")) st.kind = FT_DEC_BYTELEVEL;
    else if (!strcmp(ty, "ByteFallback")) st.kind = FT_DEC_BYTEFALLBACK;
    else if (!strcmp(ty, "Fuse")) st.kind = FT_DEC_FUSE;
    else if (!strcmp(ty, "Replace")) {
        const cJSON *c = get(d, "content");
        if (!cJSON_IsString(c)) return flint_err_set(err, FLINT_ERR_FORMAT, "%s: no \"content\" string", what);
        if (flint_tok_pattern_parse(&st.pat, get(d, "pattern"), what, err)) return -1;
        st.kind = FT_DEC_REPLACE;
        st.content = flint_xstrdup(c->valuestring);
        st.content_len = strlen(st.content);
    } else if (!strcmp(ty, "Strip")) {
        const cJSON *c = get(d, "content"), *a = get(d, "start"), *b = get(d, "stop");
        st.kind = FT_DEC_STRIP;
        if (one_char(cJSON_IsString(c) ? c->valuestring : NULL, what, "content", NULL, NULL, &st.strip_cp, err)) return -1;
        if (!cJSON_IsNumber(a) || !cJSON_IsNumber(b) || a->valuedouble < 0 || b->valuedouble < 0 || a->valuedouble > 1e6 ||
            b->valuedouble > 1e6)
            return flint_err_set(err, FLINT_ERR_FORMAT, "%s: start/stop must be counts", what);
        st.start = (int)a->valuedouble, st.stop = (int)b->valuedouble;
    } else if (!strcmp(ty, "Metaspace")) {
        const cJSON *r = get(d, "replacement");
        st.kind = FT_DEC_METASPACE;
        if (one_char(cJSON_IsString(r) ? r->valuestring : NULL, what, "replacement", NULL, NULL, &st.rep_cp, err) ||
            parse_prepend_scheme(d, what, &st.prepend, err))
            return -1;
    } else {
        return flint_err_set(err, FLINT_ERR_UNSUPPORTED, "%s: decoder \"%s\" is not supported", t->path, ty);
    }
    if (t->n_dec == FT_DEC_MAX) {
        flint_tok_pattern_free(&st.pat);
        free(st.content);
        return flint_err_set(err, FLINT_ERR_UNSUPPORTED, "%s: decoder chain longer than %d steps", t->path, FT_DEC_MAX);
    }
    t->dec = flint_xrealloc(t->dec, sizeof *t->dec * (size_t)(t->n_dec + 1));
    t->dec[t->n_dec++] = st;
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * added tokens */

typedef struct jtok {
    const char *content;
    int id_file;
    int single_word, lstrip, rstrip, normalized, special;
} jtok;

static int same_tok(const jtok *a, const jtok *b) {
    return !strcmp(a->content, b->content) && a->single_word == b->single_word && a->lstrip == b->lstrip &&
           a->rstrip == b->rstrip && a->normalized == b->normalized && a->special == b->special;
}

static void trie_init(flint_tok_trie *tr) {
    memset(tr, 0, sizeof *tr);
    tr->cap = 16;
    tr->node = flint_xmalloc(sizeof *tr->node * (size_t)tr->cap);
    tr->node[0] = (flint_tok_trie_node){-1, -1, -1, 0};
    tr->n = 1;
}

static void trie_add(flint_tok_trie *tr, const char *s, size_t n, int32_t pat) {
    int32_t node = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t c = tr->node[node].child;
        while (c >= 0 && tr->node[c].byte != (uint8_t)s[i]) c = tr->node[c].sibling;
        if (c < 0) {
            if (tr->n == tr->cap) tr->node = flint_xrealloc(tr->node, sizeof *tr->node * (size_t)(tr->cap *= 2));
            c = tr->n++;
            tr->node[c] = (flint_tok_trie_node){-1, tr->node[node].child, -1, (uint8_t)s[i]};
            tr->node[node].child = c;
        }
        node = c;
    }
    if (tr->node[node].pat < 0) tr->node[node].pat = pat; /* the first of equal contents wins */
    tr->first[(uint8_t)s[0]] = 1;
}

static int parse_added(flint_tokenizer *t, const cJSON *list, size_t *pool_cap, flint_err *err) {
    int n = cJSON_IsArray(list) ? cJSON_GetArraySize(list) : 0;
    jtok *tok = flint_xcalloc((size_t)n + 1, sizeof *tok);
    int *special = flint_xmalloc(sizeof(int) * ((size_t)n + 1)), *classic = flint_xmalloc(sizeof(int) * ((size_t)n + 1));
    int n_special = 0, n_classic = 0, rc = -1;
    flint_tok_smap special_set, by_id; /* content -> 1; id (as text) -> jtok index: added_tokens_map_r */
    flint_tok_smap_init(&special_set, (size_t)n);
    flint_tok_smap_init(&by_id, (size_t)n);
    flint_tok_smap_init(&t->added_map, (size_t)n);
    int32_t max_added = -1;
    int k = 0;
    for (const cJSON *e = cJSON_IsArray(list) ? list->child : NULL; e; e = e->next, k++) {
        jtok *a = &tok[k];
        const cJSON *c = get(e, "content"), *id = get(e, "id");
        if (!cJSON_IsString(c) || !is_id(id)) {
            flint_err_set(err, FLINT_ERR_FORMAT, "%s: added_tokens[%d] needs \"content\" and \"id\"", t->path, k);
            goto out;
        }
        a->content = c->valuestring;
        a->id_file = (int)id->valuedouble;
        if (flint_json_get_bool(e, "special", t->path, 0, &a->special, err) ||
            flint_json_get_bool(e, "single_word", t->path, 0, &a->single_word, err) ||
            flint_json_get_bool(e, "lstrip", t->path, 0, &a->lstrip, err) ||
            flint_json_get_bool(e, "rstrip", t->path, 0, &a->rstrip, err) ||
            flint_json_get_bool(e, "normalized", t->path, !a->special, &a->normalized, err))
            goto out;
        size_t len = strlen(a->content);
        if (!len) continue;
        if (a->special && flint_tok_smap_get(&special_set, t->pool, a->content, len) < 0) {
            special[n_special++] = k;
            uint32_t off = pool_add(t, pool_cap, a->content, len); /* before t->pool is read: it may move */
            flint_tok_smap_put(&special_set, t->pool, off, (uint32_t)len, 1);
        }
        /* the id: an existing token keeps its id, a new one goes after the model and the others */
        int32_t nid = flint_tok_smap_get(&t->added_map, t->pool, a->content, len);
        if (nid < 0) nid = flint_tok_smap_get(&t->vocab, t->pool, a->content, len);
        char idtxt[16];
        if (nid >= 0) {
            snprintf(idtxt, sizeof idtxt, "%d", nid);
            int32_t prev = flint_tok_smap_get(&by_id, t->pool, idtxt, strlen(idtxt));
            if (prev >= 0 && same_tok(&tok[prev], a)) continue; /* already there, unchanged */
        } else {
            nid = max_added < 0 ? t->n_vocab : (max_added >= t->n_vocab || t->n_vocab == 0) ? max_added + 1 : t->n_vocab;
        }
        if (nid > max_added) max_added = nid;
        uint32_t off = pool_add(t, pool_cap, a->content, len);
        flint_tok_smap_put(&t->added_map, t->pool, off, (uint32_t)len, nid);
        snprintf(idtxt, sizeof idtxt, "%d", nid);
        off = pool_add(t, pool_cap, idtxt, strlen(idtxt));
        flint_tok_smap_put(&by_id, t->pool, off, (uint32_t)strlen(idtxt), k);
        if (flint_tok_smap_get(&special_set, t->pool, a->content, len) < 0) classic[n_classic++] = k;
        if (nid != a->id_file)
            flint_log_warn("%s: added token '%s' is listed with id %d but tokenizers gives it id %d", t->path, a->content,
                           a->id_file, nid);
    }

    /* ids: the model's strings, then the added contents over them */
    int n_ids = t->n_ids;
    for (int i = 0; i < (int)t->added_map.mask + 1; i++)
        if (t->added_map.slot[i].val >= n_ids) n_ids = t->added_map.slot[i].val + 1;
    t->n_ids = n_ids;
    t->id_off = flint_xcalloc((size_t)n_ids + 1, sizeof *t->id_off);
    t->id_len = flint_xmalloc(sizeof *t->id_len * ((size_t)n_ids + 1));
    t->id_special = flint_xcalloc((size_t)n_ids + 1, 1);
    for (int i = 0; i < n_ids; i++) t->id_len[i] = UINT32_MAX;
    for (uint32_t i = 0; i <= t->vocab.mask; i++) {
        const flint_tok_sslot *s = &t->vocab.slot[i];
        if (s->val < 0) continue;
        t->id_off[s->val] = s->off, t->id_len[s->val] = s->len;
    }
    for (uint32_t i = 0; i <= t->added_map.mask; i++) {
        const flint_tok_sslot *s = &t->added_map.slot[i];
        if (s->val < 0) continue;
        t->id_off[s->val] = s->off, t->id_len[s->val] = s->len;
    }
    for (int i = 0; i < n_ids; i++)
        if (t->id_len[i] != UINT32_MAX)
            t->id_special[i] = flint_tok_smap_get(&special_set, t->pool, t->pool + t->id_off[i], t->id_len[i]) >= 0;

    /* the two matchers: special tokens first, then the others, split on `normalized` */
    t->added = flint_xcalloc((size_t)(n_special + n_classic) + 1, sizeof *t->added);
    trie_init(&t->trie_raw);
    trie_init(&t->trie_norm);
    flint_tok_buf norm = {0};
    for (int i = 0; i < n_special + n_classic; i++) {
        const jtok *a = &tok[i < n_special ? special[i] : classic[i - n_special]];
        size_t len = strlen(a->content);
        int32_t id = flint_tok_smap_get(&t->added_map, t->pool, a->content, len);
        char idtxt[16];
        snprintf(idtxt, sizeof idtxt, "%d", id);
        const jtok *flags = &tok[flint_tok_smap_get(&by_id, t->pool, idtxt, strlen(idtxt))]; /* map_r: the last one */
        flint_tok_added *x = &t->added[t->n_added];
        *x = (flint_tok_added){.id = id, .single_word = (uint8_t)flags->single_word, .lstrip = (uint8_t)flags->lstrip,
                               .rstrip = (uint8_t)flags->rstrip, .normalized = (uint8_t)a->normalized,
                               .special = (uint8_t)a->special};
        const char *pat = a->content;
        size_t plen = len;
        if (a->normalized) {
            if (flint_tok_normalize(t, a->content, len, &norm, err)) {
                flint_tok_buf_free(&norm);
                goto out;
            }
            pat = norm.p ? norm.p : "", plen = norm.n;
        }
        if (!plen) continue; /* an empty pattern never matches */
        x->off = pool_add(t, pool_cap, pat, plen);
        x->len = (uint32_t)plen;
        trie_add(a->normalized ? &t->trie_norm : &t->trie_raw, t->pool + x->off, plen, t->n_added);
        t->n_added++;
    }
    flint_tok_buf_free(&norm);
    rc = 0;
out:
    flint_tok_smap_free(&special_set);
    flint_tok_smap_free(&by_id);
    free(tok);
    free(special);
    free(classic);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * open / close */

flint_tokenizer *flint_tokenizer_open(const char *path, flint_err *err) {
    cJSON *j = flint_json_load_file(path, MAX_TOKENIZER_JSON, err);
    if (!j) return NULL;
    flint_tokenizer *t = flint_xcalloc(1, sizeof *t);
    t->path = flint_xstrdup(path);
    t->bos_id = t->eos_id = -1;
    size_t pool_cap = 0;
    const cJSON *model = get(j, "model");
    const cJSON *ver = get(j, "version");
    if (!cJSON_IsObject(j) || !cJSON_IsObject(model)) {
        flint_err_set(err, FLINT_ERR_FORMAT, "%s: not a tokenizer.json (no \"model\" object)", path);
        goto fail;
    }
    if (ver && !(cJSON_IsString(ver) && !strcmp(ver->valuestring, "1.0"))) {
        flint_err_set(err, FLINT_ERR_UNSUPPORTED, "%s: tokenizer.json version is not \"1.0\"", path);
        goto fail;
    }
    /* truncation / padding are ignored: transformers turns them off per call as well */
    if (parse_model(t, model, &pool_cap, err) || add_norm(t, get(j, "normalizer"), err) ||
        add_pre(t, get(j, "pre_tokenizer"), err) || add_post(t, get(j, "post_processor"), err) ||
        parse_added(t, get(j, "added_tokens"), &pool_cap, err))
        goto fail;
    const cJSON *dec = get(j, "decoder");
    t->has_decoder = dec && !cJSON_IsNull(dec);
    if (add_dec(t, dec, err) || flint_tok_bytelevel_table(t, err)) goto fail;
    for (int s = 0; s < t->n_post; s++) {
        if (t->bos_id < 0 && t->post[s].n_pre) t->bos_id = t->post[s].pre[0];
        if (t->eos_id < 0 && t->post[s].n_post) t->eos_id = t->post[s].post[t->post[s].n_post - 1];
    }
    cJSON_Delete(j);
    return t;
fail:
    cJSON_Delete(j);
    flint_tokenizer_close(t);
    return NULL;
}

void flint_tokenizer_close(flint_tokenizer *t) {
    if (!t) return;
    free(t->pool);
    free(t->id_off);
    free(t->id_len);
    free(t->id_special);
    flint_tok_smap_free(&t->vocab);
    flint_tok_mmap_free(&t->merges);
    free(t->unk_missing);
    free(t->cont_prefix);
    free(t->eow_suffix);
    free(t->small_cp_id);
    free(t->added);
    flint_tok_smap_free(&t->added_map);
    free(t->trie_raw.node);
    free(t->trie_norm.node);
    for (int i = 0; i < t->n_norm; i++) flint_tok_pattern_free(&t->norm[i].pat), free(t->norm[i].str);
    free(t->norm);
    for (int i = 0; i < t->n_pre; i++) flint_tok_pattern_free(&t->pre[i].pat);
    free(t->pre);
    flint_tok_pattern_free(&t->gpt2_re);
    for (int i = 0; i < t->n_post; i++) free(t->post[i].pre), free(t->post[i].post);
    free(t->post);
    for (int i = 0; i < t->n_dec; i++) flint_tok_pattern_free(&t->dec[i].pat), free(t->dec[i].content);
    free(t->dec);
    free(t->bl_pool);
    free(t->bl_off);
    free(t->bl_len);
    free(t->bl_whole);
    free(t->chat_template);
    free(t->path);
    free(t);
}

/* bos_token / eos_token: a string or an AddedToken object {"content": ...}; NULL when null. */
static int config_token(const cJSON *cfg, const char *key, const char *what, const char **out, int *present,
                        flint_err *err) {
    const cJSON *v = get(cfg, key);
    *out = NULL;
    *present = v != NULL;
    if (!v || cJSON_IsNull(v)) return 0;
    if (cJSON_IsString(v)) *out = v->valuestring;
    else if (cJSON_IsString(get(v, "content"))) *out = get(v, "content")->valuestring;
    else return flint_err_set(err, FLINT_ERR_FORMAT, "%s: \"%s\" must be a string or {\"content\": ...}", what, key);
    return 0;
}

/* transformers' LlamaTokenizerFast / GemmaTokenizerFast rebuild the post-processor from
 * add_bos_token / add_eos_token (update_post_processor); other classes keep tokenizer.json's. */
static void rebuild_template(flint_tokenizer *t, const cJSON *cfg, int32_t bos, int32_t eos) {
    const cJSON *cls = get(cfg, "tokenizer_class");
    static const char *const llama_like[] = {"LlamaTokenizer", "LlamaTokenizerFast", "CodeLlamaTokenizer",
                                       "CodeLlamaTokenizerFast", "GemmaTokenizer", "GemmaTokenizerFast"};
    int match = 0;
    for (size_t i = 0; i < sizeof llama_like / sizeof *llama_like; i++)
        if (cJSON_IsString(cls) && !strcmp(cls->valuestring, llama_like[i])) match = 1;
    const cJSON *ab = get(cfg, "add_bos_token"), *ae = get(cfg, "add_eos_token");
    if (!match || (!cJSON_IsBool(ab) && !cJSON_IsBool(ae))) return;
    int add_bos = cJSON_IsBool(ab) ? cJSON_IsTrue(ab) : 1, add_eos = cJSON_IsTrue(ae);
    for (int i = 0; i < t->n_post; i++) free(t->post[i].pre), free(t->post[i].post);
    free(t->post);
    t->post = flint_xcalloc(1, sizeof *t->post);
    t->n_post = 1;
    if (add_bos && bos >= 0) t->post[0].pre = flint_xmalloc(sizeof(int32_t)), t->post[0].pre[0] = bos, t->post[0].n_pre = 1;
    if (add_eos && eos >= 0) t->post[0].post = flint_xmalloc(sizeof(int32_t)), t->post[0].post[0] = eos, t->post[0].n_post = 1;
}

static int read_config(flint_tokenizer *t, const char *dir, flint_err *err) {
    char path[4096];
    if (flint_path_join(path, sizeof path, dir, "tokenizer_config.json"))
        return flint_err_set(err, FLINT_ERR_INVALID, "%s: path too long", dir);
    if (flint_file_exists(path)) {
        cJSON *cfg = flint_json_load_file(path, MAX_CONFIG_JSON, err);
        if (!cfg) return -1;
        const char *bos, *eos;
        int has_bos, has_eos, rc = -1;
        if (config_token(cfg, "bos_token", path, &bos, &has_bos, err) ||
            config_token(cfg, "eos_token", path, &eos, &has_eos, err))
            goto done;
        if (has_bos) t->bos_id = bos ? flint_tokenizer_token_id(t, bos) : -1;
        if (has_eos) t->eos_id = eos ? flint_tokenizer_token_id(t, eos) : -1;
        if (bos && t->bos_id < 0) flint_log_warn("%s: bos_token '%s' is not in the vocabulary", path, bos);
        if (eos && t->eos_id < 0) flint_log_warn("%s: eos_token '%s' is not in the vocabulary", path, eos);
        rebuild_template(t, cfg, t->bos_id, t->eos_id);
        const cJSON *ct = get(cfg, "chat_template");
        if (cJSON_IsString(ct)) {
            t->chat_template = flint_xstrdup(ct->valuestring);
        } else if (cJSON_IsArray(ct)) { /* [{"name": ..., "template": ...}]: the default one */
            for (const cJSON *e = ct->child; e; e = e->next) {
                const cJSON *name = get(e, "name"), *tpl = get(e, "template");
                if (cJSON_IsString(name) && !strcmp(name->valuestring, "default") && cJSON_IsString(tpl))
                    t->chat_template = flint_xstrdup(tpl->valuestring);
            }
        } else if (ct && !cJSON_IsNull(ct)) {
            flint_err_set(err, FLINT_ERR_FORMAT, "%s: chat_template must be a string or a list of {name, template}", path);
            goto done;
        }
        rc = 0;
    done:
        cJSON_Delete(cfg);
        if (rc) return -1;
    }
    /* newer transformers save the template beside the config */
    if (!t->chat_template && !flint_path_join(path, sizeof path, dir, "chat_template.jinja") && flint_file_exists(path)) {
        t->chat_template = flint_file_read(path, MAX_CONFIG_JSON, NULL, err);
        if (!t->chat_template) return -1;
    }
    return 0;
}

flint_tokenizer *flint_tokenizer_open_dir(const char *dir, flint_err *err) {
    char path[4096];
    if (flint_path_join(path, sizeof path, dir, "tokenizer.json")) {
        flint_err_set(err, FLINT_ERR_INVALID, "%s: path too long", dir);
        return NULL;
    }
    flint_tokenizer *t = flint_tokenizer_open(path, err);
    if (!t) return NULL;
    if (read_config(t, dir, err)) {
        flint_tokenizer_close(t);
        return NULL;
    }
    return t;
}

/* ---------------------------------------------------------------------------------------------
 * accessors */

int flint_tokenizer_vocab_size(const flint_tokenizer *t) { return t->n_ids; }

int32_t flint_tokenizer_token_id(const flint_tokenizer *t, const char *token) {
    size_t n = strlen(token);
    int32_t id = flint_tok_smap_get(&t->added_map, t->pool, token, n);
    return id >= 0 ? id : flint_tok_smap_get(&t->vocab, t->pool, token, n);
}

const char *flint_tokenizer_token_str(const flint_tokenizer *t, int32_t id) {
    if (id < 0 || id >= t->n_ids || t->id_len[id] == UINT32_MAX) return NULL;
    return t->pool + t->id_off[id];
}

int flint_tokenizer_is_special(const flint_tokenizer *t, int32_t id) {
    return id >= 0 && id < t->n_ids && t->id_special[id];
}

int32_t flint_tokenizer_bos_id(const flint_tokenizer *t) { return t->bos_id; }
int32_t flint_tokenizer_eos_id(const flint_tokenizer *t) { return t->eos_id; }
const char *flint_tokenizer_chat_template(const flint_tokenizer *t) { return t->chat_template; }
