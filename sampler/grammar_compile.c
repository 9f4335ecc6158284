/* response_format -> the grammar's node graph (grammar_internal.h). A JSON Schema keyword flint
 * cannot enforce is refused with its name and location rather than ignored, because a response
 * that "follows the schema" except for one keyword is a broken promise to the client; only
 * annotations, and keywords whose neglect can never produce an invalid value
 * (additionalProperties: extras are simply never generated), pass. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "sampler/grammar_internal.h"

typedef struct cctx {
    flint_grammar *g;
    flint_err *err;
    char path[256];
    int depth;
} cctx;

enum { TY_OBJECT = 1, TY_ARRAY = 2, TY_STRING = 4, TY_NUMBER = 8, TY_INTEGER = 16, TY_BOOLEAN = 32, TY_NULL = 64 };
static const char *const type_names[] = {"object", "array", "string", "number", "integer", "boolean", "null"};

static int fail(cctx *c, flint_code code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static int fail(cctx *c, flint_code code, const char *fmt, ...) {
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return flint_err_set(c->err, code, "response_format: %s (at schema%s)", msg, c->path[0] ? c->path : " root");
}

static int nomem(cctx *c) { return flint_err_set(c->err, FLINT_ERR_NOMEM, "response_format: out of memory"); }

/* ---- growable tables (sizes come from the request: malloc and report) ---- */

static int grow(void **p, int *cap, int need, size_t elem) {
    if (need <= *cap) return 0;
    int nc = *cap ? *cap : 16;
    while (nc < need) nc *= 2;
    void *q = realloc(*p, (size_t)nc * elem);
    if (!q) return -1;
    *p = q;
    *cap = nc;
    return 0;
}

static int new_node(cctx *c, int type) {
    flint_grammar *g = c->g;
    if (g->n_node >= 65535) return fail(c, FLINT_ERR_INVALID, "the schema is too large (more than 65535 parts)");
    if (grow((void **)&g->node, &g->cap_node, g->n_node + 1, sizeof *g->node)) return nomem(c);
    gnode *n = &g->node[g->n_node];
    memset(n, 0, sizeof *n);
    n->type = (uint8_t)type;
    n->child = n->first = n->trie = -1;
    n->depth = 1;
    return g->n_node++;
}

/* Inserts s into the trie based at `base` (which must be the last trie built), returning -1 on
 * allocation failure. term marks the end; prop >= 0 is recorded on the whole path (key tries). */
static int trie_add(cctx *c, int base, const char *s, size_t n, int32_t term, int prop) {
    flint_grammar *g = c->g;
    int32_t cur = 0;
    if (prop >= 0) g->trie[base].props |= 1ULL << prop;
    for (size_t i = 0; i < n; i++) {
        uint8_t b = (uint8_t)s[i];
        int32_t k = g->trie[base + cur].child, last = -1;
        while (k >= 0 && g->trie[base + k].byte != b) last = k, k = g->trie[base + k].sibling;
        if (k < 0) {
            if (grow((void **)&g->trie, &g->cap_trie, g->n_trie + 1, sizeof *g->trie)) return nomem(c);
            k = g->n_trie++ - base;
            gtrie *t = &g->trie[base + k];
            memset(t, 0, sizeof *t);
            t->child = t->sibling = t->term = -1;
            t->byte = b;
            if (last >= 0) g->trie[base + last].sibling = k;
            else g->trie[base + cur].child = k;
        }
        cur = k;
        if (prop >= 0) g->trie[base + cur].props |= 1ULL << prop;
    }
    g->trie[base + cur].term = term;
    return 0;
}

static int trie_root(cctx *c) {
    flint_grammar *g = c->g;
    if (grow((void **)&g->trie, &g->cap_trie, g->n_trie + 1, sizeof *g->trie)) return nomem(c);
    gtrie *t = &g->trie[g->n_trie];
    memset(t, 0, sizeof *t);
    t->child = t->sibling = t->term = -1;
    return g->n_trie++;
}

/* ---- canonical compact JSON of a value (the one spelling enum/const allow) ---- */

typedef struct sbuf {
    char *p;
    size_t n, cap;
    int oom;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap * 2 : 64;
        while (nc < b->n + n + 1) nc *= 2;
        char *q = realloc(b->p, nc);
        if (!q) {
            b->oom = 1;
            return;
        }
        b->p = q, b->cap = nc;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void sb_string(sbuf *b, const char *s) {
    sb_put(b, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char e[8];
        switch (*p) {
        case '"': sb_put(b, "\\\"", 2); break;
        case '\\': sb_put(b, "\\\\", 2); break;
        case '\b': sb_put(b, "\\b", 2); break;
        case '\f': sb_put(b, "\\f", 2); break;
        case '\n': sb_put(b, "\\n", 2); break;
        case '\r': sb_put(b, "\\r", 2); break;
        case '\t': sb_put(b, "\\t", 2); break;
        default:
            if (*p < 0x20) {
                snprintf(e, sizeof e, "\\u%04x", *p);
                sb_put(b, e, 6);
            } else {
                sb_put(b, (const char *)p, 1);
            }
        }
    }
    sb_put(b, "\"", 1);
}

/* Returns -1 for a number JSON cannot hold (cJSON reads 1e999 as infinity). */
static int sb_value(sbuf *b, const cJSON *v) {
    if (cJSON_IsNull(v)) sb_put(b, "null", 4);
    else if (cJSON_IsTrue(v)) sb_put(b, "true", 4);
    else if (cJSON_IsFalse(v)) sb_put(b, "false", 5);
    else if (cJSON_IsString(v)) sb_string(b, v->valuestring);
    else if (cJSON_IsNumber(v)) {
        double d = v->valuedouble;
        char s[40];
        if (!isfinite(d)) return -1;
        if (d == floor(d) && fabs(d) < 1e15) {
            snprintf(s, sizeof s, "%.0f", d == 0 ? 0.0 : d);
        } else {
            for (int p = 15; p <= 17; p++) {
                snprintf(s, sizeof s, "%.*g", p, d);
                if (strtod(s, NULL) == d) break;
            }
        }
        sb_put(b, s, strlen(s));
    } else if (cJSON_IsArray(v) || cJSON_IsObject(v)) {
        int obj = cJSON_IsObject(v);
        sb_put(b, obj ? "{" : "[", 1);
        for (const cJSON *e = v->child; e; e = e->next) {
            if (e != v->child) sb_put(b, ",", 1);
            if (obj) {
                sb_string(b, e->string);
                sb_put(b, ":", 1);
            }
            if (sb_value(b, e)) return -1;
        }
        sb_put(b, obj ? "}" : "]", 1);
    } else {
        return -1;
    }
    return 0;
}

static int utf8_ok(const char *s, size_t n) {
    int u = GS_CLEAN;
    for (size_t i = 0; i < n; i++) {
        unsigned b = (unsigned char)s[i];
        if (u == GS_CLEAN && b < 0x80) continue;
        if ((u = gr_utf8_next(u, b)) < 0) return 0;
    }
    return u == GS_CLEAN;
}

static size_t utf8_chars(const char *s) {
    size_t k = 0;
    for (; *s; s++) k += ((unsigned char)*s & 0xC0) != 0x80;
    return k;
}

static int spell_check(cctx *c, const char *s, size_t n, const char *what) {
    if (gr_vocab_can_spell(c->g->vocab, s, n)) return 0;
    return fail(c, FLINT_ERR_UNSUPPORTED, "%s %.*s cannot be spelled with this tokenizer's tokens", what,
                n > 80 ? 80 : (int)n, s);
}

/* ---- schema keywords ---- */

static const char *const annotations[] = {"title",   "description", "default",    "examples",  "$schema",
                                          "$id",     "$comment",    "$defs",      "definitions", "deprecated",
                                          "readOnly", "writeOnly",  NULL};

typedef struct kw {
    const cJSON *type, *properties, *required, *additional, *items, *min_items, *max_items, *min_len, *max_len,
        *enum_, *const_, *any_of;
} kw;

static int path_push(cctx *c, const char *seg, const char *name, size_t *saved) {
    *saved = strlen(c->path);
    size_t room = sizeof c->path - *saved;
    int w = name ? snprintf(c->path + *saved, room, "/%s/%s", seg, name) : snprintf(c->path + *saved, room, "/%s", seg);
    if (w < 0 || (size_t)w >= room) strcpy(c->path + sizeof c->path - 4, "...");
    return 0;
}
static void path_pop(cctx *c, size_t saved) { c->path[saved] = 0; }

static int get_count(cctx *c, const cJSON *v, const char *name, uint32_t *out) {
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble != floor(v->valuedouble) || v->valuedouble > 1e9)
        return fail(c, FLINT_ERR_INVALID, "'%s' must be a non-negative integer", name);
    *out = (uint32_t)v->valuedouble;
    return 0;
}

static int scan_keywords(cctx *c, const cJSON *s, kw *k) {
    memset(k, 0, sizeof *k);
    for (const cJSON *e = s->child; e; e = e->next) {
        const char *n = e->string;
        int ann = 0;
        for (int i = 0; annotations[i]; i++) ann |= !strcmp(n, annotations[i]);
        if (ann) continue;
        const cJSON **slot = !strcmp(n, "type")                   ? &k->type
                             : !strcmp(n, "properties")           ? &k->properties
                             : !strcmp(n, "required")             ? &k->required
                             : !strcmp(n, "additionalProperties") ? &k->additional
                             : !strcmp(n, "items")                ? &k->items
                             : !strcmp(n, "minItems")             ? &k->min_items
                             : !strcmp(n, "maxItems")             ? &k->max_items
                             : !strcmp(n, "minLength")            ? &k->min_len
                             : !strcmp(n, "maxLength")            ? &k->max_len
                             : !strcmp(n, "enum")                 ? &k->enum_
                             : !strcmp(n, "const")                ? &k->const_
                             : !strcmp(n, "anyOf")                ? &k->any_of
                                                                  : NULL;
        if (!slot) return fail(c, FLINT_ERR_UNSUPPORTED, "keyword '%s' is not supported", n);
        if (*slot) return fail(c, FLINT_ERR_INVALID, "keyword '%s' appears twice", n);
        *slot = e;
    }
    uint32_t dummy;
    if (k->min_items && get_count(c, k->min_items, "minItems", &dummy)) return -1;
    if (k->max_items && get_count(c, k->max_items, "maxItems", &dummy)) return -1;
    if (k->min_len && get_count(c, k->min_len, "minLength", &dummy)) return -1;
    if (k->max_len && get_count(c, k->max_len, "maxLength", &dummy)) return -1;
    if (k->properties && !cJSON_IsObject(k->properties)) return fail(c, FLINT_ERR_INVALID, "'properties' must be an object");
    if (k->required && !cJSON_IsArray(k->required)) return fail(c, FLINT_ERR_INVALID, "'required' must be an array of names");
    if (k->additional && !cJSON_IsBool(k->additional) && !cJSON_IsObject(k->additional))
        return fail(c, FLINT_ERR_INVALID, "'additionalProperties' must be a boolean or a schema");
    if (k->items && cJSON_IsArray(k->items))
        return fail(c, FLINT_ERR_UNSUPPORTED, "'items' as an array (tuple validation) is not supported");
    if (k->items && !cJSON_IsBool(k->items) && !cJSON_IsObject(k->items))
        return fail(c, FLINT_ERR_INVALID, "'items' must be a schema");
    if (k->enum_ && !cJSON_IsArray(k->enum_)) return fail(c, FLINT_ERR_INVALID, "'enum' must be an array");
    if (k->any_of && (!cJSON_IsArray(k->any_of) || !k->any_of->child))
        return fail(c, FLINT_ERR_INVALID, "'anyOf' must be a non-empty array of schemas");
    return 0;
}

static int parse_types(cctx *c, const cJSON *t, int *mask) {
    *mask = 0;
    const cJSON *one = t;
    if (cJSON_IsArray(t)) {
        if (!t->child) return fail(c, FLINT_ERR_INVALID, "'type' is an empty list");
        one = t->child;
    }
    for (; one; one = cJSON_IsArray(t) ? one->next : NULL) {
        if (!cJSON_IsString(one)) return fail(c, FLINT_ERR_INVALID, "'type' must be a type name or a list of them");
        int bit = 0;
        for (int i = 0; i < 7; i++)
            if (!strcmp(one->valuestring, type_names[i])) bit = 1 << i;
        if (!bit) return fail(c, FLINT_ERR_INVALID, "unknown type '%s'", one->valuestring);
        *mask |= bit;
    }
    if ((*mask & TY_NUMBER) && (*mask & TY_INTEGER)) *mask &= ~TY_INTEGER; /* integers are numbers */
    return 0;
}

static int compile_schema(cctx *c, const cJSON *s);

/* The free-form value machinery (one set per grammar, built on first use). */
static int ensure_free(cctx *c) {
    flint_grammar *g = c->g;
    if (g->any_value >= 0) return g->any_value;
    int str = new_node(c, GN_STRING), num = new_node(c, GN_NUMBER), lit = new_node(c, GN_LIT);
    if (str < 0 || num < 0 || lit < 0) return -1;
    g->node[str].min = 0, g->node[str].max = GR_STRING_MAX;
    int base = trie_root(c);
    if (base < 0 || trie_add(c, base, "true", 4, 1, -1) || trie_add(c, base, "false", 5, 1, -1) ||
        trie_add(c, base, "null", 4, 1, -1))
        return -1;
    g->node[lit].trie = base;
    int obj = new_node(c, GN_FOBJ), arr = new_node(c, GN_FARR), any = new_node(c, GN_ANY);
    if (obj < 0 || arr < 0 || any < 0) return -1;
    /* a free container at level m needs 1 + (frames of a value at level m) = 1 + (17 - m); the
     * schema pushes them at level 1 and values at level 0 */
    g->node[any].depth = GR_FREE_LEVELS + 1;
    g->node[obj].depth = GR_FREE_LEVELS + 1;
    g->node[arr].depth = GR_FREE_LEVELS + 1;
    g->free_string = str, g->free_number = num, g->free_lits = lit;
    g->free_obj = obj, g->free_arr = arr, g->any_value = any;
    return any;
}

/* enum / const: a literal trie of the values that also pass type and the length keywords. */
static int compile_literals(cctx *c, const cJSON *s, const kw *k) {
    static const char *const beside[] = {"properties", "required", "additionalProperties", "items"};
    const cJSON *const bs[] = {k->properties, k->required, k->additional, k->items};
    for (int i = 0; i < 4; i++)
        if (bs[i]) return fail(c, FLINT_ERR_UNSUPPORTED, "'%s' beside 'enum'/'const' is not supported", beside[i]);
    int types = 0;
    if (k->type && parse_types(c, k->type, &types)) return -1;
    uint32_t min_len = 0, max_len = UINT32_MAX, min_items = 0, max_items = UINT32_MAX;
    if (k->min_len) get_count(c, k->min_len, "minLength", &min_len);
    if (k->max_len) get_count(c, k->max_len, "maxLength", &max_len);
    if (k->min_items) get_count(c, k->min_items, "minItems", &min_items);
    if (k->max_items) get_count(c, k->max_items, "maxItems", &max_items);
    int node = new_node(c, GN_LIT);
    int base = node < 0 ? -1 : trie_root(c);
    if (base < 0) return -1;
    c->g->node[node].trie = base;
    const cJSON *first = k->enum_ ? k->enum_->child : k->const_;
    int kept = 0, seen = 0;
    sbuf b = {0}, cb = {0};
    if (k->const_ && sb_value(&cb, k->const_)) {
        free(cb.p);
        return fail(c, FLINT_ERR_INVALID, "'const' holds a number out of range");
    }
    for (const cJSON *v = first; v; v = k->enum_ ? v->next : NULL) {
        seen++;
        b.n = 0;
        if (sb_value(&b, v)) {
            free(b.p), free(cb.p);
            return fail(c, FLINT_ERR_INVALID, "'enum' holds a number out of range");
        }
        if (b.oom || cb.oom) {
            free(b.p), free(cb.p);
            return nomem(c);
        }
        if (k->const_ && (b.n != cb.n || memcmp(b.p, cb.p, b.n))) continue;
        if (types) {
            int ok = (cJSON_IsObject(v) && (types & TY_OBJECT)) || (cJSON_IsArray(v) && (types & TY_ARRAY)) ||
                     (cJSON_IsString(v) && (types & TY_STRING)) || (cJSON_IsNumber(v) && (types & TY_NUMBER)) ||
                     (cJSON_IsNumber(v) && (types & TY_INTEGER) && v->valuedouble == floor(v->valuedouble)) ||
                     (cJSON_IsBool(v) && (types & TY_BOOLEAN)) || (cJSON_IsNull(v) && (types & TY_NULL));
            if (!ok) continue;
        }
        if (cJSON_IsString(v)) {
            size_t nc = utf8_chars(v->valuestring);
            if (nc < min_len || nc > max_len) continue;
        }
        if (cJSON_IsArray(v)) {
            uint32_t ni = (uint32_t)cJSON_GetArraySize(v);
            if (ni < min_items || ni > max_items) continue;
        }
        if (!utf8_ok(b.p, b.n)) {
            free(b.p), free(cb.p);
            return fail(c, FLINT_ERR_INVALID, "an 'enum'/'const' string is not valid UTF-8");
        }
        if (spell_check(c, b.p, b.n, "the value") || trie_add(c, base, b.p, b.n, 1, -1)) {
            free(b.p), free(cb.p);
            return -1;
        }
        kept++;
    }
    free(b.p), free(cb.p);
    if (!kept)
        return fail(c, FLINT_ERR_INVALID, seen ? "no value of 'enum'/'const' satisfies the rest of the schema" : "'enum' is empty");
    if (c->g->n_trie - base > 65535) return fail(c, FLINT_ERR_INVALID, "'enum' is too large");
    return node;
}

static int compile_string(cctx *c, const kw *k) {
    uint32_t mn = 0, mx = GR_STRING_MAX;
    if (k->min_len) get_count(c, k->min_len, "minLength", &mn);
    if (k->max_len) get_count(c, k->max_len, "maxLength", &mx);
    else if (mn > mx) mx = mn;
    if (mn > mx) return fail(c, FLINT_ERR_INVALID, "minLength %u is above maxLength %u", mn, mx);
    if (mn > 65535) return fail(c, FLINT_ERR_INVALID, "minLength %u is above the 65535 flint allows", mn);
    if (mx > 65535) mx = 65535;
    int n = new_node(c, GN_STRING);
    if (n < 0) return -1;
    c->g->node[n].min = mn, c->g->node[n].max = mx;
    return n;
}

static int compile_array(cctx *c, const kw *k) {
    uint32_t mn = 0, mx = GR_ARRAY_MAX;
    if (k->min_items) get_count(c, k->min_items, "minItems", &mn);
    if (k->max_items) get_count(c, k->max_items, "maxItems", &mx);
    else if (mn > mx) mx = mn;
    if (mn > mx) return fail(c, FLINT_ERR_INVALID, "minItems %u is above maxItems %u", mn, mx);
    if (mn > 65535) return fail(c, FLINT_ERR_INVALID, "minItems %u is above the 65535 flint allows", mn);
    if (mx > 65535) mx = 65535;
    int child;
    if (k->items && cJSON_IsFalse(k->items)) {
        if (mn > 0) return fail(c, FLINT_ERR_INVALID, "'items': false allows no items but minItems is %u", mn);
        mx = 0;
        child = ensure_free(c); /* never pushed */
    } else if (k->items) {
        size_t saved;
        path_push(c, "items", NULL, &saved);
        child = compile_schema(c, k->items);
        path_pop(c, saved);
    } else {
        child = ensure_free(c);
    }
    if (child < 0) return -1;
    int n = new_node(c, GN_ARRAY);
    if (n < 0) return -1;
    gnode *nd = &c->g->node[n];
    nd->min = mn, nd->max = mx, nd->child = child;
    nd->depth = 1 + c->g->node[child].depth;
    return n;
}

static int compile_object(cctx *c, const kw *k) {
    flint_grammar *g = c->g;
    int free_form = !k->properties && !k->required && !(k->additional && cJSON_IsFalse(k->additional));
    if (free_form) {
        if (ensure_free(c) < 0) return -1;
        return g->free_obj;
    }
    int np = k->properties ? cJSON_GetArraySize(k->properties) : 0;
    if (np > GR_MAX_PROPS) return fail(c, FLINT_ERR_UNSUPPORTED, "%d properties: flint allows at most %d per object", np, GR_MAX_PROPS);
    /* names first: required names must exist, no name twice */
    for (const cJSON *p = k->properties ? k->properties->child : NULL; p; p = p->next)
        for (const cJSON *q = p->next; q; q = q->next)
            if (!strcmp(p->string, q->string)) return fail(c, FLINT_ERR_INVALID, "property '%s' is defined twice", p->string);
    for (const cJSON *r = k->required ? k->required->child : NULL; r; r = r->next) {
        if (!cJSON_IsString(r)) return fail(c, FLINT_ERR_INVALID, "'required' must be an array of names");
        if (!k->properties || !cJSON_GetObjectItemCaseSensitive(k->properties, r->valuestring))
            return fail(c, FLINT_ERR_UNSUPPORTED, "required property '%s' is not in 'properties'", r->valuestring);
    }
    /* key trie (contiguous: built before any child schema) */
    int base = trie_root(c);
    if (base < 0) return -1;
    sbuf b = {0};
    int i = 0;
    for (const cJSON *p = k->properties ? k->properties->child : NULL; p; p = p->next, i++) {
        b.n = 0;
        sb_string(&b, p->string);
        if (b.oom) return nomem(c);
        if (!utf8_ok(b.p, b.n)) {
            free(b.p);
            return fail(c, FLINT_ERR_INVALID, "property name is not valid UTF-8");
        }
        if (spell_check(c, b.p, b.n, "the property name") || trie_add(c, base, b.p + 1, b.n - 1, i, i)) {
            free(b.p);
            return -1;
        }
    }
    free(b.p);
    if (g->n_trie - base > 65535) return fail(c, FLINT_ERR_INVALID, "property names too long");
    int first = g->n_prop;
    if (grow((void **)&g->prop, &g->cap_prop, g->n_prop + np, sizeof *g->prop)) return nomem(c);
    g->n_prop += np;
    int depth = 0;
    i = 0;
    for (const cJSON *p = k->properties ? k->properties->child : NULL; p; p = p->next, i++) {
        size_t saved;
        path_push(c, "properties", p->string, &saved);
        int child = compile_schema(c, p);
        path_pop(c, saved);
        if (child < 0) return -1;
        gprop *pr = &g->prop[first + i];
        pr->node = child;
        pr->required = 0;
        for (const cJSON *r = k->required ? k->required->child : NULL; r; r = r->next)
            pr->required |= !strcmp(r->valuestring, p->string);
        if (g->node[child].depth > depth) depth = g->node[child].depth;
    }
    uint16_t next = (uint16_t)np;
    for (int j = np - 1; j >= 0; j--) {
        if (g->prop[first + j].required) next = (uint16_t)j;
        g->prop[first + j].next_req = next;
    }
    int n = new_node(c, GN_OBJECT);
    if (n < 0) return -1;
    gnode *nd = &g->node[n];
    nd->first = first, nd->count = np, nd->trie = base;
    nd->depth = 1 + depth;
    return n;
}

/* An anyOf node over alts (flattened: an alternative that is itself an anyOf is spliced in). */
static int make_anyof(cctx *c, const int *alts, int n) {
    flint_grammar *g = c->g;
    int total = 0;
    for (int i = 0; i < n; i++) total += g->node[alts[i]].type == GN_ANYOF ? g->node[alts[i]].count : 1;
    if (total == 1) return alts[0];
    int first = g->n_alt;
    if (grow((void **)&g->alt, &g->cap_alt, g->n_alt + total, sizeof *g->alt)) return nomem(c);
    int depth = 0;
    for (int i = 0; i < n; i++) {
        const gnode *a = &g->node[alts[i]];
        if (a->type == GN_ANYOF)
            for (int j = 0; j < a->count; j++) g->alt[g->n_alt++] = g->alt[a->first + j];
        else
            g->alt[g->n_alt++] = alts[i];
        if (a->depth > depth) depth = a->depth;
    }
    int node = new_node(c, GN_ANYOF);
    if (node < 0) return -1;
    g->node[node].first = first, g->node[node].count = total, g->node[node].depth = depth;
    return node;
}

static int compile_schema(cctx *c, const cJSON *s) {
    if (c->depth >= GR_MAX_SCHEMA_DEPTH)
        return fail(c, FLINT_ERR_UNSUPPORTED, "the schema nests more than %d levels", GR_MAX_SCHEMA_DEPTH);
    if (cJSON_IsTrue(s)) return ensure_free(c);
    if (cJSON_IsFalse(s)) return fail(c, FLINT_ERR_INVALID, "the schema 'false' allows no value");
    if (!cJSON_IsObject(s)) return fail(c, FLINT_ERR_INVALID, "a schema must be an object or a boolean");
    kw k;
    if (scan_keywords(c, s, &k)) return -1;
    c->depth++;
    int node = -1;
    if (k.any_of) {
        const cJSON *const sib[] = {k.type, k.properties, k.required, k.additional, k.items, k.min_items,
                                    k.max_items, k.min_len, k.max_len, k.enum_, k.const_};
        for (int i = 0; i < 11; i++)
            if (sib[i]) {
                c->depth--;
                return fail(c, FLINT_ERR_UNSUPPORTED, "'%s' beside 'anyOf' is not supported (move it into each alternative)",
                            sib[i]->string);
            }
        int n = cJSON_GetArraySize(k.any_of), i = 0;
        int *alts = malloc(sizeof *alts * (size_t)n);
        if (!alts) return nomem(c);
        for (const cJSON *a = k.any_of->child; a; a = a->next, i++) {
            char idx[16];
            snprintf(idx, sizeof idx, "%d", i);
            size_t saved;
            path_push(c, "anyOf", idx, &saved);
            alts[i] = compile_schema(c, a);
            path_pop(c, saved);
            if (alts[i] < 0) {
                free(alts);
                return -1;
            }
        }
        node = make_anyof(c, alts, n);
        free(alts);
    } else if (k.enum_ || k.const_) {
        node = compile_literals(c, s, &k);
    } else {
        int types = 0;
        if (k.type && parse_types(c, k.type, &types)) return -1;
        if (!k.type) {
            int any_kw = k.properties || k.required || k.additional || k.items || k.min_items || k.max_items ||
                         k.min_len || k.max_len;
            if (!any_kw) {
                c->depth--;
                return ensure_free(c);
            }
            types = TY_OBJECT | TY_ARRAY | TY_STRING | TY_NUMBER | TY_BOOLEAN | TY_NULL;
        }
        int alts[7], n = 0;
        for (int t = 0; t < 7; t++) {
            if (!(types & (1 << t))) continue;
            int a = -1;
            switch (1 << t) {
            case TY_OBJECT: a = compile_object(c, &k); break;
            case TY_ARRAY: a = compile_array(c, &k); break;
            case TY_STRING: a = compile_string(c, &k); break;
            case TY_NUMBER:
            case TY_INTEGER:
                a = new_node(c, GN_NUMBER);
                if (a >= 0) c->g->node[a].integer = (1 << t) == TY_INTEGER;
                break;
            case TY_BOOLEAN:
            case TY_NULL: {
                a = new_node(c, GN_LIT);
                int base = a < 0 ? -1 : trie_root(c);
                if (base < 0) return -1;
                c->g->node[a].trie = base;
                if ((1 << t) == TY_NULL ? trie_add(c, base, "null", 4, 1, -1)
                                        : trie_add(c, base, "true", 4, 1, -1) || trie_add(c, base, "false", 5, 1, -1))
                    return -1;
                break;
            }
            }
            if (a < 0) return -1;
            alts[n++] = a;
        }
        node = make_anyof(c, alts, n);
    }
    c->depth--;
    return node;
}

/* ---- entry points ---- */

static flint_grammar *grammar_new(const flint_grammar_vocab *v, int32_t eos) {
    flint_grammar *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->vocab = v;
    g->eos = eos;
    g->any_value = g->free_string = g->free_number = g->free_lits = g->free_obj = g->free_arr = -1;
    return g;
}

void flint_grammar_free(flint_grammar *g) {
    if (!g) return;
    free(g->node);
    free(g->prop);
    free(g->alt);
    free(g->trie);
    flint_grammar_vocab_free(g->owned);
    free(g);
}

flint_grammar *flint_grammar_compile_vocab(const char *rf, const flint_grammar_vocab *v, int32_t eos, flint_err *err) {
    if (!rf || !v) {
        flint_err_set(err, FLINT_ERR_INVALID, "response_format: nothing to compile");
        return NULL;
    }
    if (eos < 0 || eos >= v->n_vocab) {
        flint_err_set(err, FLINT_ERR_INVALID, "response_format: EOS id %d is not in the vocabulary of %d tokens", eos, v->n_vocab);
        return NULL;
    }
    if (v->missing_ascii >= 0) {
        flint_err_set(err, FLINT_ERR_UNSUPPORTED,
                      "response_format: the tokenizer has no token for the character '%c' alone; structured output "
                      "needs every printable ASCII character as a token",
                      v->missing_ascii);
        return NULL;
    }
    cJSON *j = cJSON_Parse(rf);
    if (!j) {
        flint_err_set(err, FLINT_ERR_INVALID, "response_format is not valid JSON");
        return NULL;
    }
    flint_grammar *g = grammar_new(v, eos);
    cctx c = {.g = g, .err = err};
    int root = -1;
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(j, "type");
    if (!g) {
        nomem(&c);
    } else if (!cJSON_IsObject(j)) {
        flint_err_set(err, FLINT_ERR_INVALID, "response_format must be an object");
    } else if (!cJSON_IsString(ty)) {
        flint_err_set(err, FLINT_ERR_INVALID, "response_format.type must be \"json_object\" or \"json_schema\"");
    } else if (!strcmp(ty->valuestring, "json_object")) {
        if (ensure_free(&c) >= 0) root = g->free_obj;
    } else if (!strcmp(ty->valuestring, "json_schema")) {
        const cJSON *js = cJSON_GetObjectItemCaseSensitive(j, "json_schema");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(js, "name");
        const cJSON *strict = cJSON_GetObjectItemCaseSensitive(js, "strict");
        const cJSON *schema = cJSON_GetObjectItemCaseSensitive(js, "schema");
        if (!cJSON_IsObject(js))
            flint_err_set(err, FLINT_ERR_INVALID, "response_format.json_schema must be an object");
        else if (name && !cJSON_IsString(name))
            flint_err_set(err, FLINT_ERR_INVALID, "response_format.json_schema.name must be a string");
        else if (strict && !cJSON_IsBool(strict) && !cJSON_IsNull(strict))
            flint_err_set(err, FLINT_ERR_INVALID, "response_format.json_schema.strict must be a boolean");
        else if (!schema)
            flint_err_set(err, FLINT_ERR_INVALID, "response_format.json_schema.schema is required");
        else
            root = compile_schema(&c, schema);
    } else if (!strcmp(ty->valuestring, "text")) {
        flint_err_set(err, FLINT_ERR_INVALID, "response_format type \"text\" is unconstrained: no grammar to compile");
    } else {
        flint_err_set(err, FLINT_ERR_INVALID, "response_format.type \"%s\" is not one of \"text\", \"json_object\", \"json_schema\"",
                      ty->valuestring);
    }
    cJSON_Delete(j);
    if (root < 0) {
        flint_grammar_free(g);
        return NULL;
    }
    g->root = root;
    g->max_depth = g->node[root].depth;
    if (g->max_depth > GR_MAX_DEPTH) {
        flint_err_set(err, FLINT_ERR_UNSUPPORTED, "response_format: the schema nests too deeply (%d levels with free-form values counted; at most %d)",
                      g->max_depth, GR_MAX_DEPTH);
        flint_grammar_free(g);
        return NULL;
    }
    g->cfg_stride = 8 + sizeof(gframe) * (size_t)g->max_depth;
    return g;
}

flint_grammar *flint_grammar_compile(const char *rf, const flint_tokenizer *tok, int32_t eos, flint_err *err) {
    flint_grammar_vocab *v = flint_grammar_vocab_build(tok, err);
    if (!v) return NULL;
    flint_grammar *g = flint_grammar_compile_vocab(rf, v, eos, err);
    if (!g) {
        flint_grammar_vocab_free(v);
        return NULL;
    }
    g->owned = v;
    return g;
}
