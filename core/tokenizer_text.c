/* Text machinery under the tokenizer: buffers, UTF-8 exactly as Rust's str and
 * String::from_utf8_lossy see it, the Unicode classes tokenizers' Rust regexes use, the hash maps
 * for vocab and merges, and Oniguruma-style patterns run through PCRE2. Kept apart so the
 * pipeline files read as the tokenizers pipeline and nothing else. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <utf8proc.h>

#include "tokenizer_internal.h"

/* ---------------------------------------------------------------------------------------------
 * Buffers */

int flint_tok_buf_reserve(flint_tok_buf *b, size_t extra, flint_err *err) {
    if (b->n + extra + 1 <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->n + extra + 1) {
        if (cap > SIZE_MAX / 2) return flint_err_set(err, FLINT_ERR_NOMEM, "tokenizer: text too large");
        cap *= 2;
    }
    char *p = realloc(b->p, cap);
    if (!p) return flint_err_set(err, FLINT_ERR_NOMEM, "tokenizer: cannot allocate %zu bytes", cap);
    b->p = p;
    b->cap = cap;
    return 0;
}

int flint_tok_buf_put(flint_tok_buf *b, const void *s, size_t n, flint_err *err) {
    if (flint_tok_buf_reserve(b, n, err)) return -1;
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return 0;
}

void flint_tok_buf_free(flint_tok_buf *b) {
    free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
}

/* ---------------------------------------------------------------------------------------------
 * UTF-8 */

/* Width a lead byte announces, 0 for bytes that never start a character (Rust's utf8_char_width). */
static int lead_width(unsigned char c) {
    if (c < 0x80) return 1;
    if (c < 0xC2) return 0;
    if (c < 0xE0) return 2;
    if (c < 0xF0) return 3;
    if (c < 0xF5) return 4;
    return 0;
}

/* Range the second byte must fall in after lead byte c (the overlong/surrogate/range rules). */
static int second_ok(unsigned char c, unsigned char d) {
    switch (c) {
    case 0xE0: return d >= 0xA0 && d <= 0xBF;
    case 0xED: return d >= 0x80 && d <= 0x9F;
    case 0xF0: return d >= 0x90 && d <= 0xBF;
    case 0xF4: return d >= 0x80 && d <= 0x8F;
    default: return d >= 0x80 && d <= 0xBF;
    }
}

static int is_cont(unsigned char d) { return (d & 0xC0) == 0x80; }

/* Length of the longest prefix of s that is a valid beginning of a character (the "maximal
 * subpart" from_utf8_lossy replaces by one U+FFFD), or the full width when it is complete. */
static int valid_prefix(const unsigned char *s, size_t n, int *complete) {
    int w = lead_width(s[0]);
    *complete = 0;
    if (w == 0) return 1;
    if (w == 1) {
        *complete = 1;
        return 1;
    }
    if (n < 2 || !second_ok(s[0], s[1])) return 1;
    for (int k = 2; k < w; k++)
        if ((size_t)k >= n || !is_cont(s[k])) return k;
    *complete = 1;
    return w;
}

int flint_tok_utf8_len(const unsigned char *s, size_t n, uint32_t *cp) {
    if (n == 0) return 0;
    int complete, k = valid_prefix(s, n, &complete);
    if (!complete) return 0;
    if (cp) {
        uint32_t c = k == 1 ? s[0] : k == 2 ? s[0] & 0x1F : k == 3 ? s[0] & 0x0F : s[0] & 0x07;
        for (int i = 1; i < k; i++) c = (c << 6) | (s[i] & 0x3F);
        *cp = c;
    }
    return k;
}

size_t flint_tok_utf8_check(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        int k = flint_tok_utf8_len(s + i, n - i, NULL);
        if (!k) return i;
        i += (size_t)k;
    }
    return n;
}

int flint_tok_utf8_put(uint32_t cp, char *out) {
    unsigned char *o = (unsigned char *)out;
    if (cp < 0x80) {
        o[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xC0 | (cp >> 6));
        o[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | (cp >> 12));
        o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | (cp >> 18));
    o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

int flint_tok_utf8_lossy(flint_tok_buf *out, const unsigned char *s, size_t n, flint_err *err) {
    static const char fffd[3] = {(char)0xEF, (char)0xBF, (char)0xBD};
    size_t i = 0, run = 0; /* run: start of the pending valid stretch */
    while (i < n) {
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        int complete, k = valid_prefix(s + i, n - i, &complete);
        if (complete) {
            i += (size_t)k;
            continue;
        }
        if (flint_tok_buf_put(out, s + run, i - run, err) || flint_tok_buf_put(out, fffd, 3, err)) return -1;
        i += (size_t)k;
        run = i;
    }
    return flint_tok_buf_put(out, s + run, n - run, err);
}

size_t flint_tok_utf8_incomplete_tail(const unsigned char *s, size_t n) {
    for (size_t back = 1; back <= 3 && back <= n; back++) {
        unsigned char c = s[n - back];
        if (is_cont(c)) continue;
        int w = lead_width(c);
        if (w <= 1 || (size_t)w <= back) return 0;
        int complete, k = valid_prefix(s + n - back, back, &complete);
        return (size_t)k == back ? back : 0;
    }
    return 0;
}

int flint_tok_is_white(uint32_t cp) {
    if (cp >= 0x09 && cp <= 0x0D) return 1;
    switch (cp) {
    case 0x20: case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F:
    case 0x3000:
        return 1;
    }
    return cp >= 0x2000 && cp <= 0x200A;
}

const char *flint_tok_onig_category(uint32_t cp) {
    int lo = 0, hi = flint_tok_onig_extra_n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (cp < flint_tok_onig_extra[mid].lo) hi = mid - 1;
        else if (cp > flint_tok_onig_extra[mid].hi) lo = mid + 1;
        else return flint_tok_onig_extra[mid].cat;
    }
    return NULL;
}

int flint_tok_norm_is_unknown(uint32_t cp) {
    if (cp < flint_tok_norm_unknown[0][0]) return 0;
    int lo = 0, hi = flint_tok_norm_unknown_n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (cp < flint_tok_norm_unknown[mid][0]) hi = mid - 1;
        else if (cp > flint_tok_norm_unknown[mid][1]) lo = mid + 1;
        else return 1;
    }
    return 0;
}

int flint_tok_is_word(uint32_t cp) {
    if (cp < 0x80) return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || cp == '_';
    if (cp == 0x200C || cp == 0x200D) return 1; /* Join_Control */
    /* Other_Alphabetic symbols: circled and squared letters */
    if ((cp >= 0x24B6 && cp <= 0x24E9) || (cp >= 0x1F130 && cp <= 0x1F149) || (cp >= 0x1F150 && cp <= 0x1F169) ||
        (cp >= 0x1F170 && cp <= 0x1F189))
        return 1;
    const char *c = flint_tok_onig_category(cp);
    if (c) return c[0] == 'L' || c[0] == 'M' || !strcmp(c, "Nd") || !strcmp(c, "Nl") || !strcmp(c, "Pc");
    switch (utf8proc_category((utf8proc_int32_t)cp)) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT: case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_PC:
        return 1;
    default:
        return 0;
    }
}

/* ---------------------------------------------------------------------------------------------
 * GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves, the other 68 bytes
 * (0..32, 127..160, 173) become U+0100.. in byte order. */

#define B(x) (x)
#define S8(a) B(a), B(a + 1), B(a + 2), B(a + 3), B(a + 4), B(a + 5), B(a + 6), B(a + 7)
const uint16_t flint_tok_byte_char[256] = {
    /* 0..32 -> 256..288 */
    S8(256), S8(264), S8(272), S8(280), 288,
    /* 33..126 themselves */
    33, 34, 35, 36, 37, 38, 39, S8(40), S8(48), S8(56), S8(64), S8(72), S8(80), S8(88), S8(96), S8(104),
    S8(112), 120, 121, 122, 123, 124, 125, 126,
    /* 127..160 -> 289..322 */
    S8(289), S8(297), S8(305), S8(313), 321, 322,
    /* 161..172 themselves, 173 -> 323, 174..255 themselves */
    161, 162, 163, 164, 165, 166, 167, 168, 169, 170, 171, 172, 323, 174, 175, S8(176), S8(184), S8(192),
    S8(200), S8(208), S8(216), S8(224), S8(232), S8(240), S8(248)};
#undef S8
#undef B

int flint_tok_char_byte(uint32_t cp) {
    if ((cp >= 33 && cp <= 126) || (cp >= 161 && cp <= 172) || (cp >= 174 && cp <= 255)) return (int)cp;
    if (cp >= 256 && cp <= 288) return (int)(cp - 256);
    if (cp >= 289 && cp <= 322) return (int)(cp - 289 + 127);
    if (cp == 323) return 173;
    return -1;
}

/* ---------------------------------------------------------------------------------------------
 * Hash maps */

static uint32_t fnv1a(const char *s, size_t n) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h;
}

static uint32_t cap_for(size_t expected) {
    uint32_t cap = 16;
    while (cap < expected * 2 + 1) cap *= 2;
    return cap;
}

void flint_tok_smap_init(flint_tok_smap *m, size_t expected) {
    uint32_t cap = cap_for(expected);
    m->slot = flint_xmalloc(sizeof *m->slot * cap);
    for (uint32_t i = 0; i < cap; i++) m->slot[i].val = -1;
    m->mask = cap - 1;
    m->n = 0;
}

void flint_tok_smap_free(flint_tok_smap *m) {
    free(m->slot);
    m->slot = NULL;
}

static void smap_grow(flint_tok_smap *m) {
    flint_tok_sslot *old = m->slot;
    uint32_t oldcap = m->mask + 1, cap = oldcap * 2;
    m->slot = flint_xmalloc(sizeof *m->slot * cap);
    for (uint32_t i = 0; i < cap; i++) m->slot[i].val = -1;
    m->mask = cap - 1;
    for (uint32_t i = 0; i < oldcap; i++) {
        if (old[i].val < 0) continue;
        uint32_t j = old[i].hash & m->mask;
        while (m->slot[j].val >= 0) j = (j + 1) & m->mask;
        m->slot[j] = old[i];
    }
    free(old);
}

void flint_tok_smap_put(flint_tok_smap *m, const char *pool, uint32_t off, uint32_t len, int32_t val) {
    FLINT_ASSERT(val >= 0);
    if ((m->n + 1) * 2 > m->mask + 1) smap_grow(m);
    uint32_t h = fnv1a(pool + off, len), j = h & m->mask;
    while (m->slot[j].val >= 0) {
        flint_tok_sslot *s = &m->slot[j];
        if (s->hash == h && s->len == len && !memcmp(pool + s->off, pool + off, len)) {
            s->val = val;
            return;
        }
        j = (j + 1) & m->mask;
    }
    m->slot[j] = (flint_tok_sslot){.hash = h, .off = off, .len = len, .val = val};
    m->n++;
}

int32_t flint_tok_smap_get(const flint_tok_smap *m, const char *pool, const char *s, size_t len) {
    if (!m->slot) return -1;
    uint32_t h = fnv1a(s, len), j = h & m->mask;
    while (m->slot[j].val >= 0) {
        const flint_tok_sslot *e = &m->slot[j];
        if (e->hash == h && e->len == len && !memcmp(pool + e->off, s, len)) return e->val;
        j = (j + 1) & m->mask;
    }
    return -1;
}

static uint32_t mix64(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return (uint32_t)x;
}

void flint_tok_mmap_init(flint_tok_mmap *m, size_t expected) {
    uint32_t cap = cap_for(expected);
    m->slot = flint_xmalloc(sizeof *m->slot * cap);
    for (uint32_t i = 0; i < cap; i++) m->slot[i].key = UINT64_MAX;
    m->mask = cap - 1;
    m->n = 0;
}

void flint_tok_mmap_free(flint_tok_mmap *m) {
    free(m->slot);
    m->slot = NULL;
}

void flint_tok_mmap_put(flint_tok_mmap *m, int32_t a, int32_t b, uint32_t rank, int32_t id) {
    if ((m->n + 1) * 2 > m->mask + 1) {
        flint_tok_mmap old = *m;
        flint_tok_mmap_init(m, (size_t)(old.mask + 1));
        for (uint32_t i = 0; i <= old.mask; i++)
            if (old.slot[i].key != UINT64_MAX)
                flint_tok_mmap_put(m, (int32_t)(old.slot[i].key >> 32), (int32_t)(uint32_t)old.slot[i].key,
                                   old.slot[i].rank, old.slot[i].id);
        free(old.slot);
    }
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    uint32_t j = mix64(key) & m->mask;
    while (m->slot[j].key != UINT64_MAX) {
        if (m->slot[j].key == key) { /* a repeated merge: HF's HashMap keeps the later rank */
            m->slot[j].rank = rank;
            m->slot[j].id = id;
            return;
        }
        j = (j + 1) & m->mask;
    }
    m->slot[j] = (flint_tok_mslot){.key = key, .rank = rank, .id = id};
    m->n++;
}

const flint_tok_mslot *flint_tok_mmap_get(const flint_tok_mmap *m, int32_t a, int32_t b) {
    if (!m->slot) return NULL;
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    uint32_t j = mix64(key) & m->mask;
    while (m->slot[j].key != UINT64_MAX) {
        if (m->slot[j].key == key) return &m->slot[j];
        j = (j + 1) & m->mask;
    }
    return NULL;
}

/* ---------------------------------------------------------------------------------------------
 * Patterns. tokenizers compiles regexes with Oniguruma; two differences from PCRE2 are removed
 * by rewriting the pattern before compiling it:
 *  - \s is Unicode White_Space in Oniguruma, PCRE2's also takes U+180E: \s and \S are spelled out;
 *  - \p{..} follows Oniguruma's newer Unicode: each general-category property gets the code
 *    points Oniguruma puts in it beyond PCRE2's tables (flint_tok_onig_extra). */

#define WHITE_SET "\\t\\n\\x0B\\f\\r\\x20\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"

static void sput(flint_tok_buf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        while (b->n + n + 1 > b->cap) b->cap = b->cap ? b->cap * 2 : 256;
        b->p = flint_xrealloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

/* The extra ranges of a property name ("L", "Lo", ...) as class items; 0 when there are none. */
static int onig_extras(const char *name, size_t n, flint_tok_buf *out) {
    if (n < 1 || n > 2 || !strchr("LMNPSZC", name[0])) return 0;
    int any = 0;
    for (int i = 0; i < flint_tok_onig_extra_n; i++) {
        const flint_tok_cat_range *r = &flint_tok_onig_extra[i];
        if (r->cat[0] != name[0] || (n == 2 && r->cat[1] != name[1])) continue;
        char item[48];
        int k = snprintf(item, sizeof item, "\\x{%X}-\\x{%X}", (unsigned)r->lo, (unsigned)r->hi);
        sput(out, item, (size_t)k);
        any = 1;
    }
    return any;
}

static char *translate_regex(const char *re) {
    size_t n = strlen(re);
    flint_tok_buf out = {0}, ex = {0};
    int in_class = 0;
    sput(&out, "", 0);
    for (size_t i = 0; i < n; i++) {
        char c = re[i];
        if (c == '\\' && i + 1 < n) {
            char d = re[i + 1];
            if (d == 's' || (d == 'S' && !in_class)) {
                sput(&out, in_class ? "" : d == 's' ? "[" : "[^", in_class ? 0 : d == 's' ? 1 : 2);
                sput(&out, WHITE_SET, sizeof WHITE_SET - 1);
                if (!in_class) sput(&out, "]", 1);
                i++;
                continue;
            }
            if (d == 'p' || d == 'P') {
                /* \pL, \p{L}, \p{^L}, \P{L} */
                size_t a = i + 2, b;
                if (a < n && re[a] == '{') {
                    b = a + 1;
                    while (b < n && re[b] != '}') b++;
                    if (b >= n) goto plain;
                    a++;
                } else {
                    b = a + 1;
                    if (b > n) goto plain;
                }
                int neg = d == 'P';
                const char *name = re + a;
                size_t len = b - a;
                if (len && name[0] == '^') neg = !neg, name++, len--;
                ex.n = 0;
                if (!onig_extras(name, len, &ex) || (neg && in_class)) goto plain;
                sput(&out, in_class ? "" : neg ? "[^" : "[", in_class ? 0 : neg ? 2 : 1);
                sput(&out, "\\p{", 3);
                sput(&out, name, len);
                sput(&out, "}", 1);
                sput(&out, ex.p, ex.n);
                if (!in_class) sput(&out, "]", 1);
                i = re[i + 2] == '{' ? b : b - 1;
                continue;
            }
        plain:
            sput(&out, re + i, 2);
            i++;
            continue;
        }
        if (c == '[' && !in_class) {
            in_class = 1;
            sput(&out, &c, 1);
            /* a ']' or '^]' right after '[' is a literal */
            if (i + 1 < n && re[i + 1] == '^') sput(&out, &re[++i], 1);
            if (i + 1 < n && re[i + 1] == ']') sput(&out, &re[++i], 1);
            continue;
        }
        if (c == ']' && in_class) in_class = 0;
        sput(&out, &c, 1);
    }
    free(ex.p);
    return out.p;
}

int flint_tok_pattern_regex(flint_tok_pattern *p, const char *regex, const char *what, flint_err *err) {
    memset(p, 0, sizeof *p);
    char *tr = translate_regex(regex);
    int code;
    PCRE2_SIZE off;
    p->re = pcre2_compile((PCRE2_SPTR)tr, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &code, &off, NULL);
    free(tr);
    if (!p->re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(code, msg, sizeof msg);
        return flint_err_set(err, FLINT_ERR_UNSUPPORTED, "%s: regex /%s/ does not compile: %s", what, regex,
                             (const char *)msg);
    }
    pcre2_jit_compile(p->re, PCRE2_JIT_COMPLETE); /* without JIT it is only slower */
    return 0;
}

int flint_tok_pattern_parse(flint_tok_pattern *p, const void *json_pattern, const char *what, flint_err *err) {
    const cJSON *j = json_pattern;
    memset(p, 0, sizeof *p);
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(j, "String");
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(j, "Regex");
    if (cJSON_IsString(s)) {
        /* tokenizers escapes the string into a regex; matching the literal is the same thing */
        p->lit_len = strlen(s->valuestring);
        if (!p->lit_len) return flint_err_set(err, FLINT_ERR_UNSUPPORTED, "%s: empty String pattern", what);
        p->lit = flint_xstrdup(s->valuestring);
        return 0;
    }
    if (cJSON_IsString(r)) return flint_tok_pattern_regex(p, r->valuestring, what, err);
    return flint_err_set(err, FLINT_ERR_FORMAT, "%s: pattern must be {\"String\": ...} or {\"Regex\": ...}", what);
}

void flint_tok_pattern_free(flint_tok_pattern *p) {
    if (p->re) pcre2_code_free(p->re);
    free(p->lit);
    memset(p, 0, sizeof *p);
}

typedef struct span_list {
    flint_tok_span *v;
    size_t n, cap;
} span_list;

static int span_add(span_list *l, size_t a, size_t b, int match, flint_err *err) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        flint_tok_span *v = realloc(l->v, cap * sizeof *v);
        if (!v) return flint_err_set(err, FLINT_ERR_NOMEM, "tokenizer: out of memory");
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = (flint_tok_span){a, b, match};
    return 0;
}

/* One regex search from `from`; returns 1 with the match, 0 for none, -1 on error. */
static int regex_search(const pcre2_code *re, pcre2_match_data *md, const char *s, size_t n, size_t from,
                        size_t *ms, size_t *me, flint_err *err) {
    int rc = pcre2_match(re, (PCRE2_SPTR)s, n, from, PCRE2_NO_UTF_CHECK, md, NULL);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) /* pathological input: the interpreter has more room */
        rc = pcre2_match(re, (PCRE2_SPTR)s, n, from, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, NULL);
    if (rc == PCRE2_ERROR_NOMATCH) return 0;
    if (rc < 0) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(rc, msg, sizeof msg);
        return flint_err_set(err, FLINT_ERR_INTERNAL, "tokenizer: regex match failed: %s", (const char *)msg);
    }
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
    *ms = ov[0];
    *me = ov[1];
    return 1;
}

int flint_tok_pattern_find(const flint_tok_pattern *p, const char *s, size_t n, flint_tok_span **spans,
                           size_t *n_spans, flint_err *err) {
    span_list l = {0};
    *spans = NULL;
    *n_spans = 0;
    if (n == 0) {
        if (span_add(&l, 0, 0, 0, err)) return -1;
        *spans = l.v;
        *n_spans = 1;
        return 0;
    }
    size_t prev = 0;
    if (!p->re) {
        size_t i = 0;
        while (i + p->lit_len <= n) {
            const char *hit = memmem(s + i, n - i, p->lit, p->lit_len);
            if (!hit) break;
            size_t a = (size_t)(hit - s);
            if ((a > prev && span_add(&l, prev, a, 0, err)) || span_add(&l, a, a + p->lit_len, 1, err)) goto fail;
            prev = i = a + p->lit_len;
        }
    } else {
        pcre2_match_data *md = pcre2_match_data_create_from_pattern(p->re, NULL);
        if (!md) {
            flint_err_set(err, FLINT_ERR_NOMEM, "tokenizer: out of memory");
            goto fail;
        }
        /* Oniguruma's find_iter: an empty match right where the previous match ended is skipped
         * by stepping one character */
        size_t from = 0, last_end = (size_t)-1;
        while (from <= n) {
            size_t a = 0, b = 0;
            int rc = regex_search(p->re, md, s, n, from, &a, &b, err);
            if (rc < 0) {
                pcre2_match_data_free(md);
                goto fail;
            }
            if (rc == 0) break;
            if (a == b && b == last_end) {
                if (from >= n) break;
                uint32_t cp;
                int k = flint_tok_utf8_len((const unsigned char *)s + from, n - from, &cp);
                from += k ? (size_t)k : 1;
                continue;
            }
            if ((a > prev && span_add(&l, prev, a, 0, err)) || span_add(&l, a, b, 1, err)) {
                pcre2_match_data_free(md);
                goto fail;
            }
            prev = b;
            from = b;
            last_end = b;
        }
        pcre2_match_data_free(md);
    }
    if (prev < n && span_add(&l, prev, n, 0, err)) goto fail;
    *spans = l.v;
    *n_spans = l.n;
    return 0;
fail:
    free(l.v);
    return -1;
}
