/* Structured output (sampler/grammar.h) and the token bytes it rests on
 * (flint_tokenizer_token_bytes):
 *  - token bytes: concatenated over encode(text) they give the decoded text, for Qwen3, GPT-2
 *    and llama2.c SentencePiece tokenizers (and the fixture variants: Metaspace, no decoder,
 *    splits), on every fixture text;
 *  - random walks: 100 generated schemas covering every supported feature, nested, walked with
 *    random allowed tokens (Qwen3 and the 512-token llama2.c vocabulary) to completion; the text
 *    must parse, validate against the schema (a validator for the subset below) and respect
 *    flint's bounds; every mask must be non-empty and advance must agree with it on sampled
 *    tokens, allowed and forbidden alike;
 *  - json_object walks; bad schemas refused with a message naming the problem;
 *  - losslessness: speculative acceptance on masked target logits, drafts from a grammar-blind
 *    or a grammar-aware drafter (q passed as drawn, never masked by the harness), emits
 *    the masked, renormalised target distribution (chi-square, >= 100k samples per position),
 *    and two plausible shortcuts (the acceptance test on the unmasked target; cutting the draft
 *    before its first invalid token) are caught by the same test;
 *  - mask times on Qwen3, printed;
 *  - with the argument "engine" (its own ctest entry): 100 random schemas as requests to the engine
 *    on the embedded pair, greedy and T = 1, speculation on; every response completes, parses and
 *    validates; the acceptance with the grammar on is printed. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "core/json.h"
#include "core/tokenizer.h"
#include "core/sbuf.h"
#include "core/status.h"
#include "sampler/grammar.h"
#include "sampler/sampler.h"
#include "test.h"
#include "verifier/engine.h"

#define FIXDIR FLINT_SOURCE_DIR "/tests/fixtures/tokenizer"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- a tiny deterministic RNG (splitmix64) ---- */
typedef struct rng {
    uint64_t s;
} rng;
static uint64_t rnext(rng *r) {
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static int rint_(rng *r, int n) { return (int)(rnext(r) % (uint64_t)n); }
static double runif(rng *r) { return (double)(rnext(r) >> 11) * (1.0 / 9007199254740992.0); }

/* =============================================================================================
 * token bytes */

typedef struct text {
    char *s;
    size_t n;
} text;
static text *texts;
static int n_texts;

static char *from_hex(const char *h, size_t *n) {
    *n = strlen(h) / 2;
    char *s = malloc(*n + 1);
    for (size_t i = 0; i < *n; i++) {
        unsigned v;
        sscanf(h + 2 * i, "%2x", &v);
        s[i] = (char)v;
    }
    s[*n] = 0;
    return s;
}

static int load_texts(void) {
    flint_err err = {0};
    size_t len;
    char *all = flint_file_read(FIXDIR "/texts.jsonl", (size_t)1 << 28, &len, &err);
    if (!all) {
        fprintf(stderr, "%s\n", err.msg);
        return -1;
    }
    for (char *p = all; p < all + len;) {
        char *e = memchr(p, '\n', (size_t)(all + len - p));
        if (!e) e = all + len;
        cJSON *j = e > p ? cJSON_ParseWithLength(p, (size_t)(e - p)) : NULL;
        if (j) {
            const cJSON *h = cJSON_GetObjectItem(j, "hex"), *t = cJSON_GetObjectItem(j, "text");
            texts = realloc(texts, sizeof *texts * (size_t)(n_texts + 1));
            if (cJSON_IsString(h)) texts[n_texts].s = from_hex(h->valuestring, &texts[n_texts].n);
            else if (cJSON_IsString(t)) texts[n_texts].n = strlen(t->valuestring), texts[n_texts].s = strdup(t->valuestring);
            else texts[n_texts].s = NULL;
            if (texts[n_texts].s) n_texts++;
            cJSON_Delete(j);
        }
        p = e + 1;
    }
    free(all);
    return 0;
}

/* lead_space 1: SentencePiece prepends "▁" when encoding (not before a special token) and the
 * decoder drops it; mid-sequence bytes keep it. 2: no decoder, tokens joined with " ", so every
 * token brings a space. */
static void check_token_bytes(const char *name, const flint_tokenizer *tok, int lead_space) {
    int bad = 0, checked = 0, skipped = 0;
    char buf[1024];
    for (int i = 0; i < n_texts; i++) {
        int32_t *ids;
        int n;
        flint_err err = {0};
        if (flint_tokenizer_encode(tok, texts[i].s, texts[i].n, 0, &ids, &n, &err)) continue; /* invalid UTF-8 */
        if (n == 0) {
            free(ids);
            continue;
        }
        char *dec;
        size_t dec_len;
        if (flint_tokenizer_decode(tok, ids, n, 0, &dec, &dec_len, &err)) {
            free(ids);
            continue;
        }
        size_t cap = texts[i].n * 2 + 64, at = 0;
        char *cat = malloc(cap);
        for (int k = 0; k < n; k++) {
            int l = flint_tokenizer_token_bytes(tok, ids[k], buf, sizeof buf);
            if (l < 0 || (size_t)l > sizeof buf) break;
            if (at + (size_t)l > cap) cat = realloc(cat, cap = (at + (size_t)l) * 2);
            memcpy(cat + at, buf, (size_t)l);
            at += (size_t)l;
        }
        const char *want = dec;
        size_t want_len = dec_len;
        char *sp = NULL;
        if (memmem(dec, dec_len, "\xEF\xBF\xBD", 3) && !memmem(texts[i].s, texts[i].n, "\xEF\xBF\xBD", 3)) {
            skipped++; /* decode repaired invalid UTF-8 (an odd added token): bytes and text differ by design */
            free(cat), free(dec), free(ids);
            continue;
        }
        if (lead_space == 2 || (lead_space == 1 && !flint_tokenizer_is_special(tok, ids[0]))) { /* "<s>hi": no "▁" */
            sp = malloc(dec_len + 2);
            sp[0] = ' ';
            memcpy(sp + 1, dec, dec_len);
            want = sp, want_len = dec_len + 1;
        }
        /* decode repairs invalid UTF-8; encode of valid text never needs it, so equality is exact */
        int ok = at == want_len && !memcmp(cat, want, at);
        if (!ok && bad < 5) fprintf(stderr, "  %s: token bytes differ from decode on text %d (%zu vs %zu bytes)\n", name, i, at, want_len);
        bad += !ok;
        checked++;
        free(sp);
        free(cat);
        free(dec);
        free(ids);
    }
    printf("token_bytes %-17s: %d texts, %d mismatches (%d skipped: decode repaired UTF-8)\n", name, checked, bad, skipped);
    CHECKF(bad == 0 && checked > 1000, "%s: %d of %d texts", name, bad, checked);
    int nv = flint_tokenizer_vocab_size(tok);
    CHECK(flint_tokenizer_token_bytes(tok, -1, buf, sizeof buf) == -1);
    CHECK(flint_tokenizer_token_bytes(tok, nv, buf, sizeof buf) == -1);
    /* a short buffer: the length still comes back */
    int longest = 0, id = 0;
    for (int k = 0; k < nv; k++) {
        int l = flint_tokenizer_token_bytes(tok, k, buf, sizeof buf);
        if (l > longest) longest = l, id = k;
    }
    char small[2];
    CHECK(flint_tokenizer_token_bytes(tok, id, small, sizeof small) == longest);
}

static void test_token_bytes_special(const flint_tokenizer *qwen, const flint_tokenizer *llama) {
    char buf[64];
    int32_t eos = flint_tokenizer_eos_id(qwen);
    int l = flint_tokenizer_token_bytes(qwen, eos, buf, sizeof buf);
    CHECK(l == 10 && !memcmp(buf, "<|im_end|>", 10) && flint_tokenizer_is_special(qwen, eos));
    int32_t sp = flint_tokenizer_token_id(qwen, "\xC4\xA0{"); /* "Ġ{" */
    CHECK(sp >= 0 && flint_tokenizer_token_bytes(qwen, sp, buf, sizeof buf) == 2 && !memcmp(buf, " {", 2));
    int32_t b = flint_tokenizer_token_id(llama, "<0xE6>");
    CHECK(b >= 0 && flint_tokenizer_token_bytes(llama, b, buf, sizeof buf) == 1 && (unsigned char)buf[0] == 0xE6);
    int32_t m = flint_tokenizer_token_id(llama, "\xE2\x96\x81"); /* "▁" */
    CHECK(m >= 0 && flint_tokenizer_token_bytes(llama, m, buf, sizeof buf) == 1 && buf[0] == ' ');
}

/* =============================================================================================
 * a validator for the supported subset, plus flint's own bounds */

static int utf8_chars(const char *s) {
    int k = 0;
    for (; *s; s++) k += ((unsigned char)*s & 0xC0) != 0x80;
    return k;
}

static const char *why_bad;

static int bad(const char *w) {
    why_bad = w;
    return 0;
}

/* Free-form values: objects of <= 16 keys, arrays of <= 8 items, strings <= 64 characters,
 * <= 16 nested containers. */
static int free_ok(const cJSON *v, int level) {
    if (cJSON_IsString(v)) return utf8_chars(v->valuestring) <= 64 ? 1 : bad("free string too long");
    if (cJSON_IsArray(v) || cJSON_IsObject(v)) {
        if (level >= 16) return bad("free value nested too deeply");
        int n = cJSON_GetArraySize(v);
        if (n > (cJSON_IsArray(v) ? 8 : 16)) return bad("free container too large");
        for (const cJSON *e = v->child; e; e = e->next) {
            if (cJSON_IsObject(v) && utf8_chars(e->string) > 64) return bad("free key too long");
            if (!free_ok(e, level + 1)) return 0;
        }
    }
    return 1;
}

static int type_ok(const char *t, const cJSON *v) {
    if (!strcmp(t, "object")) return cJSON_IsObject(v);
    if (!strcmp(t, "array")) return cJSON_IsArray(v);
    if (!strcmp(t, "string")) return cJSON_IsString(v);
    if (!strcmp(t, "number")) return cJSON_IsNumber(v);
    if (!strcmp(t, "integer")) return cJSON_IsNumber(v) && v->valuedouble == floor(v->valuedouble);
    if (!strcmp(t, "boolean")) return cJSON_IsBool(v);
    if (!strcmp(t, "null")) return cJSON_IsNull(v);
    return 0;
}

static int uint_kw(const cJSON *s, const char *k, int def) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(s, k);
    return cJSON_IsNumber(x) ? (int)x->valuedouble : def;
}

static int is_free(const cJSON *s) {
    static const char *const ann[] = {"title", "description", "default", "examples", "$schema", "$id", "$comment",
                                      "$defs", "definitions", "deprecated", "readOnly", "writeOnly", NULL};
    if (cJSON_IsTrue(s)) return 1;
    for (const cJSON *e = s->child; e; e = e->next) {
        int a = 0;
        for (int i = 0; ann[i]; i++) a |= !strcmp(e->string, ann[i]);
        if (!a) return 0;
    }
    return 1;
}

static int validate(const cJSON *s, const cJSON *v) {
    if (is_free(s)) return free_ok(v, 0);
    const cJSON *any = cJSON_GetObjectItemCaseSensitive(s, "anyOf");
    if (any) {
        for (const cJSON *a = any->child; a; a = a->next)
            if (validate(a, v)) return 1;
        return bad("no anyOf alternative");
    }
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(s, "type");
    if (ty) {
        int ok = 0;
        if (cJSON_IsString(ty)) ok = type_ok(ty->valuestring, v);
        for (const cJSON *t = cJSON_IsArray(ty) ? ty->child : NULL; t; t = t->next) ok |= type_ok(t->valuestring, v);
        if (!ok) return bad("wrong type");
    }
    const cJSON *en = cJSON_GetObjectItemCaseSensitive(s, "enum"), *cn = cJSON_GetObjectItemCaseSensitive(s, "const");
    if (cn && !cJSON_Compare(cn, v, 1)) return bad("not the const");
    if (en) {
        int hit = 0;
        for (const cJSON *e = en->child; e && !hit; e = e->next) hit = cJSON_Compare(e, v, 1);
        if (!hit) return bad("not in the enum");
    }
    int lit = en || cn; /* flint's own bounds apply to generated values, not to listed ones */
    if (cJSON_IsString(v)) {
        int n = utf8_chars(v->valuestring), mn = uint_kw(s, "minLength", 0);
        int mx = uint_kw(s, "maxLength", lit ? 1 << 30 : mn > 64 ? mn : 64);
        if (n < mn || n > mx) return bad("string length");
    }
    if (cJSON_IsArray(v)) {
        int n = cJSON_GetArraySize(v), mn = uint_kw(s, "minItems", 0);
        int mx = uint_kw(s, "maxItems", lit ? 1 << 30 : mn > 8 ? mn : 8);
        if (n < mn || n > mx) return bad("item count");
        const cJSON *items = cJSON_GetObjectItemCaseSensitive(s, "items");
        if (!lit)
            for (const cJSON *e = v->child; e; e = e->next)
                if (!(items ? validate(items, e) : free_ok(e, 0))) return 0;
    }
    if (cJSON_IsObject(v) && !lit) {
        const cJSON *props = cJSON_GetObjectItemCaseSensitive(s, "properties");
        const cJSON *req = cJSON_GetObjectItemCaseSensitive(s, "required");
        const cJSON *addl = cJSON_GetObjectItemCaseSensitive(s, "additionalProperties");
        if (!props && !req && !cJSON_IsFalse(addl)) return free_ok(v, 0);
        for (const cJSON *r = req ? req->child : NULL; r; r = r->next)
            if (!cJSON_GetObjectItemCaseSensitive(v, r->valuestring)) return bad("required property missing");
        /* only schema properties, in schema order, each once */
        const cJSON *p = props ? props->child : NULL;
        for (const cJSON *e = v->child; e; e = e->next) {
            while (p && strcmp(p->string, e->string)) p = p->next;
            if (!p) return bad("extra, repeated or out-of-order property");
            if (!validate(p, e)) return 0;
            p = p->next;
        }
    }
    return 1;
}

/* No whitespace outside strings. */
static int compact(const char *s, size_t n) {
    int in = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (in) {
            if (c == '\\') i++;
            else if (c == '"') in = 0;
        } else if (c == '"') {
            in = 1;
        } else if (c == ' ' || c == '\n' || c == '\t' || c == '\r') {
            return 0;
        }
    }
    return 1;
}

/* =============================================================================================
 * random schemas */

enum {
    F_STRING, F_STRLEN, F_NUMBER, F_INTEGER, F_BOOLEAN, F_NULL, F_TYPELIST, F_ENUM_STR, F_ENUM_MIXED, F_ENUM_TYPED,
    F_CONST, F_OBJECT, F_REQUIRED, F_OPTIONAL, F_ADDL_FALSE, F_FREE_OBJECT, F_ARRAY, F_ARRAY_BOUNDS, F_FREE_ARRAY,
    F_ANYOF, F_ANYOF_OVERLAP, F_ANY, F_ANNOT, F_NESTED_OBJ, F_NESTED_ARR, F_KEY_ESCAPE, N_FEAT
};
static const char *const feat_name[N_FEAT] = {
    "string", "minLength/maxLength", "number", "integer", "boolean", "null", "type list", "enum of strings",
    "enum of mixed scalars", "enum with type filter", "const", "object", "required", "optional property",
    "additionalProperties false", "free-form object", "array", "minItems/maxItems", "free-form array", "anyOf",
    "anyOf with shared prefixes", "any value {}", "annotations", "nested objects", "nested arrays",
    "escaped/unicode property names"};
static int feat_seen[N_FEAT];

static const char *const key_pool[] = {"name", "age", "tags", "a", "ab", "abc", "id", "value", "data",
                                       "x y", "quote\"d", "\xC3\xBCn\xC3\xAF", "back\\slash", "k1"};
static const char *const str_pool[] = {"red", "green", "blue", "a\"b", "tab\there", "\xC3\xA9", "\xE6\x97\xA5\xE6\x9C\xAC",
                                       "", "x/y", "back\\slash", "line\nbreak", "\xF0\x9F\x98\x80"};

static cJSON *gen_schema(rng *r, int depth);

static cJSON *gen_scalar_enum(rng *r) {
    cJSON *a = cJSON_CreateArray();
    int n = 1 + rint_(r, 4);
    if (rint_(r, 2)) {
        feat_seen[F_ENUM_STR] = 1;
        for (int i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateString(str_pool[rint_(r, 12)]));
    } else {
        feat_seen[F_ENUM_MIXED] = 1;
        for (int i = 0; i < n; i++) {
            switch (rint_(r, 9)) {
            case 0: cJSON_AddItemToArray(a, cJSON_CreateNumber(1)); break;
            case 1: cJSON_AddItemToArray(a, cJSON_CreateNumber(12)); break;
            case 2: cJSON_AddItemToArray(a, cJSON_CreateNumber(2.5)); break;
            case 3: cJSON_AddItemToArray(a, cJSON_CreateNumber(-3)); break;
            case 4: cJSON_AddItemToArray(a, cJSON_CreateNumber(0.1)); break;
            case 5: cJSON_AddItemToArray(a, cJSON_CreateTrue()); break;
            case 6: cJSON_AddItemToArray(a, cJSON_CreateFalse()); break;
            case 7: cJSON_AddItemToArray(a, cJSON_CreateNull()); break;
            default: cJSON_AddItemToArray(a, cJSON_CreateString(str_pool[rint_(r, 12)])); break;
            }
        }
    }
    return a;
}

static void annotate(rng *r, cJSON *s) {
    if (rint_(r, 5)) return;
    feat_seen[F_ANNOT] = 1;
    cJSON_AddStringToObject(s, rint_(r, 2) ? "description" : "title", "an annotation");
    if (!rint_(r, 2)) cJSON_AddStringToObject(s, "$comment", "ignored");
}

static cJSON *gen_object(rng *r, int depth) {
    cJSON *s = cJSON_CreateObject();
    cJSON_AddStringToObject(s, "type", "object");
    feat_seen[F_OBJECT] = 1;
    if (depth > 0) feat_seen[F_NESTED_OBJ] = 1;
    if (!rint_(r, 8)) {
        feat_seen[F_FREE_OBJECT] = 1;
        return s;
    }
    cJSON *props = cJSON_AddObjectToObject(s, "properties"), *req = cJSON_CreateArray();
    int n = 1 + rint_(r, depth >= 2 ? 3 : 5);
    int used[14] = {0};
    for (int i = 0; i < n; i++) {
        int k = rint_(r, 14);
        if (used[k]) continue;
        used[k] = 1;
        if (k >= 9 && k <= 12) feat_seen[F_KEY_ESCAPE] = 1;
        cJSON_AddItemToObject(props, key_pool[k], gen_schema(r, depth + 1));
        if (rint_(r, 3)) {
            cJSON_AddItemToArray(req, cJSON_CreateString(key_pool[k]));
            feat_seen[F_REQUIRED] = 1;
        } else {
            feat_seen[F_OPTIONAL] = 1;
        }
    }
    cJSON_AddItemToObject(s, "required", req);
    if (rint_(r, 2)) {
        cJSON_AddBoolToObject(s, "additionalProperties", 0);
        feat_seen[F_ADDL_FALSE] = 1;
    }
    return s;
}

static cJSON *gen_schema(rng *r, int depth) {
    cJSON *s = cJSON_CreateObject();
    int k = rint_(r, depth >= 3 ? 10 : 16);
    switch (k) {
    case 0:
    case 1:
        cJSON_AddStringToObject(s, "type", "string");
        feat_seen[F_STRING] = 1;
        if (rint_(r, 2)) {
            int mn = rint_(r, 4), mx = mn + rint_(r, 12);
            feat_seen[F_STRLEN] = 1;
            if (rint_(r, 3)) cJSON_AddNumberToObject(s, "minLength", mn);
            if (rint_(r, 4)) cJSON_AddNumberToObject(s, "maxLength", mx);
        }
        break;
    case 2:
        cJSON_AddStringToObject(s, "type", "number");
        feat_seen[F_NUMBER] = 1;
        break;
    case 3:
        cJSON_AddStringToObject(s, "type", "integer");
        feat_seen[F_INTEGER] = 1;
        break;
    case 4:
        cJSON_AddStringToObject(s, "type", rint_(r, 2) ? "boolean" : "null");
        feat_seen[!strcmp(cJSON_GetObjectItem(s, "type")->valuestring, "null") ? F_NULL : F_BOOLEAN] = 1;
        break;
    case 5: {
        static const char *const lists[][3] = {{"string", "null", NULL}, {"integer", "string", NULL},
                                               {"number", "integer", NULL}, {"boolean", "null", "integer"},
                                               {"array", "null", NULL}, {"object", "string", NULL}};
        int li = rint_(r, 6);
        cJSON *t = cJSON_AddArrayToObject(s, "type");
        for (int i = 0; i < 3 && lists[li][i]; i++) cJSON_AddItemToArray(t, cJSON_CreateString(lists[li][i]));
        feat_seen[F_TYPELIST] = 1;
        if (li == 0) cJSON_AddNumberToObject(s, "maxLength", 5);
        if (li == 4) cJSON_AddNumberToObject(s, "maxItems", 2);
        break;
    }
    case 6:
        cJSON_AddItemToObject(s, "enum", gen_scalar_enum(r));
        if (!rint_(r, 3)) {
            cJSON_AddStringToObject(s, "type", "string");
            cJSON_AddItemToArray(cJSON_GetObjectItem(s, "enum"), cJSON_CreateString("zz"));
            feat_seen[F_ENUM_TYPED] = 1;
        }
        break;
    case 7: {
        feat_seen[F_CONST] = 1;
        cJSON *e = gen_scalar_enum(r);
        cJSON *first = cJSON_DetachItemFromArray(e, 0);
        cJSON_AddItemToObject(s, "const", first);
        cJSON_Delete(e);
        break;
    }
    case 8:
        feat_seen[F_ANY] = 1;
        if (rint_(r, 2)) cJSON_AddStringToObject(s, "description", "anything");
        break;
    case 9:
    case 10:
    case 11: {
        cJSON_Delete(s);
        s = gen_object(r, depth);
        break;
    }
    case 12:
    case 13: {
        cJSON_AddStringToObject(s, "type", "array");
        feat_seen[F_ARRAY] = 1;
        if (depth > 0) feat_seen[F_NESTED_ARR] = 1;
        if (rint_(r, 6)) cJSON_AddItemToObject(s, "items", gen_schema(r, depth + 1));
        else feat_seen[F_FREE_ARRAY] = 1;
        if (rint_(r, 2)) {
            int mn = rint_(r, 3), mx = mn + rint_(r, 4);
            feat_seen[F_ARRAY_BOUNDS] = 1;
            if (rint_(r, 2)) cJSON_AddNumberToObject(s, "minItems", mn);
            cJSON_AddNumberToObject(s, "maxItems", mx);
        }
        break;
    }
    default: {
        feat_seen[F_ANYOF] = 1;
        cJSON *a = cJSON_AddArrayToObject(s, "anyOf");
        if (rint_(r, 3) == 0) {
            /* alternatives that agree on a long prefix: several parses stay alive */
            feat_seen[F_ANYOF_OVERLAP] = 1;
            for (int i = 0; i < 2; i++) {
                cJSON *o = cJSON_CreateObject();
                cJSON_AddStringToObject(o, "type", "object");
                cJSON *p = cJSON_AddObjectToObject(o, "properties");
                cJSON *v = cJSON_AddObjectToObject(p, "kind");
                cJSON_AddStringToObject(v, "type", i ? "integer" : "number");
                cJSON *w = cJSON_AddObjectToObject(p, i ? "b" : "a");
                cJSON_AddStringToObject(w, "type", "string");
                cJSON_AddNumberToObject(w, "maxLength", 4);
                cJSON *req = cJSON_AddArrayToObject(o, "required");
                cJSON_AddItemToArray(req, cJSON_CreateString("kind"));
                cJSON_AddItemToArray(req, cJSON_CreateString(i ? "b" : "a"));
                cJSON_AddItemToArray(a, o);
            }
        } else {
            int n = 2 + rint_(r, 2);
            for (int i = 0; i < n; i++) cJSON_AddItemToArray(a, gen_schema(r, depth + 1));
        }
        break;
    }
    }
    annotate(r, s);
    return s;
}

static char *response_format(const cJSON *schema) {
    cJSON *rf = cJSON_CreateObject();
    cJSON_AddStringToObject(rf, "type", "json_schema");
    cJSON *js = cJSON_AddObjectToObject(rf, "json_schema");
    cJSON_AddStringToObject(js, "name", "test");
    cJSON_AddItemToObject(js, "schema", cJSON_Duplicate(schema, 1));
    cJSON_AddBoolToObject(js, "strict", 1);
    char *s = cJSON_PrintUnformatted(rf);
    cJSON_Delete(rf);
    return s;
}

/* =============================================================================================
 * random walks */

typedef struct tokset {
    const char *name;
    flint_tokenizer *tok;
    flint_grammar_vocab *vocab;
    int n;
    int32_t eos;
    char **bytes;
    int *len;
} tokset;

static void tokset_bytes(tokset *t) {
    t->bytes = calloc((size_t)t->n, sizeof *t->bytes);
    t->len = calloc((size_t)t->n, sizeof *t->len);
    char buf[1024];
    for (int i = 0; i < t->n; i++) {
        int l = flint_tokenizer_token_bytes(t->tok, i, buf, sizeof buf);
        t->len[i] = l > 0 ? l : 0;
        t->bytes[i] = malloc((size_t)t->len[i] + 1);
        memcpy(t->bytes[i], buf, (size_t)t->len[i]);
    }
}

typedef struct walk_stats {
    long masks, steps, walks, max_steps, advance_checks;
    double mask_s, max_mask_s;
    int failures;
    char slowest[512];
    double *times;
    long n_times, cap_times;
} walk_stats;

/* Tokens made only of closing bytes; preferred more and more as a walk grows, so walks end. */
static int closer(const tokset *t, int id) {
    if (t->len[id] == 0) return 0;
    for (int i = 0; i < t->len[id]; i++)
        if (!strchr("\"]}", t->bytes[id][i])) return 0;
    return 1;
}

/* Returns the walked text (malloc'd) or NULL after a failure was recorded. */
static char *random_walk(const flint_grammar *g, const tokset *t, uint64_t seed, int max_steps, walk_stats *st,
                         size_t *out_len) {
    rng r = {seed};
    size_t ss = flint_grammar_state_size(g);
    void *state = malloc(ss), *copy = malloc(ss);
    uint8_t *allowed = malloc((size_t)t->n);
    int32_t *list = malloc(sizeof(int32_t) * (size_t)t->n), *closers = malloc(sizeof(int32_t) * (size_t)t->n);
    size_t cap = 4096, len = 0;
    char *out = malloc(cap);
    flint_grammar_state_init(g, state);
    int ok = 1, done = 0, steps = 0;
    for (; steps < max_steps && ok; steps++) {
        double t0 = now_s();
        int cnt = flint_grammar_mask(g, state, allowed, t->n);
        double dt = now_s() - t0;
        st->mask_s += dt;
        if (dt > st->max_mask_s) {
            st->max_mask_s = dt;
            snprintf(st->slowest, sizeof st->slowest, "%.*s", (int)len, out);
        }
        st->masks++;
        if (st->n_times == st->cap_times) st->times = realloc(st->times, sizeof(double) * (size_t)(st->cap_times = st->cap_times * 2 + 1024));
        st->times[st->n_times++] = dt;
        int nl = 0, nc = 0, real = 0;
        for (int i = 0; i < t->n; i++)
            if (allowed[i]) {
                real++;
                if (i == t->eos) continue;
                list[nl++] = i;
                if (closer(t, i)) closers[nc++] = i;
            }
        if (cnt <= 0 || cnt != real) {
            fprintf(stderr, "  walk: mask of %d (counted %d) after %zu bytes: %.*s\n", cnt, real, len, (int)len, out);
            ok = 0;
            break;
        }
        /* advance agrees with the mask on sampled tokens, and a refusal leaves the state alone */
        for (int k = 0; k < 24; k++) {
            int id = k < 12 && nl ? list[rint_(&r, nl)] : rint_(&r, t->n);
            memcpy(copy, state, ss);
            int rc = flint_grammar_advance(g, copy, id);
            st->advance_checks++;
            if ((rc == 0) != (allowed[id] != 0) || (rc != 0 && memcmp(copy, state, ss))) {
                fprintf(stderr, "  walk: advance(%d) = %d but the mask says %d, after: %.*s\n", id, rc, allowed[id], (int)len, out);
                ok = 0;
                break;
            }
        }
        if (!ok) break;
        if (allowed[t->eos] && (nl == 0 || runif(&r) < 0.3 + steps / 50.0)) {
            CHECK(flint_grammar_advance(g, state, t->eos) == 0);
            CHECK(flint_grammar_complete(g, state) && flint_grammar_finished(g, state));
            int n2 = flint_grammar_mask(g, state, allowed, t->n);
            CHECK(n2 == 1 && allowed[t->eos]); /* after EOS only EOS */
            done = 1;
            break;
        }
        double p_close = steps / 60.0 > 0.9 ? 0.9 : steps / 60.0;
        int id = nc && runif(&r) < p_close ? closers[rint_(&r, nc)] : list[rint_(&r, nl)];
        if (flint_grammar_advance(g, state, id)) {
            fprintf(stderr, "  walk: allowed token %d refused\n", id);
            ok = 0;
            break;
        }
        if (len + (size_t)t->len[id] + 1 > cap) out = realloc(out, cap = (len + (size_t)t->len[id] + 1) * 2);
        memcpy(out + len, t->bytes[id], (size_t)t->len[id]);
        len += (size_t)t->len[id];
    }
    st->steps += steps;
    st->walks++;
    if (steps > st->max_steps) st->max_steps = steps;
    if (ok && !done) fprintf(stderr, "  walk: no end after %d tokens: %.80s...\n", steps, out);
    free(state), free(copy), free(allowed), free(list), free(closers);
    out[len] = 0;
    *out_len = len;
    if (!ok || !done) {
        st->failures++;
        free(out);
        return NULL;
    }
    return out;
}

static void walk_schema(const tokset *t, const cJSON *schema, const char *rf, int seeds, uint64_t seed0, walk_stats *st,
                        int *n_bad) {
    flint_err err = {0};
    flint_grammar *g = flint_grammar_compile_vocab(rf, t->vocab, t->eos, &err);
    if (!g) {
        fprintf(stderr, "  %s: compile failed: %s\n  %s\n", t->name, err.msg, rf);
        (*n_bad)++;
        return;
    }
    for (int s = 0; s < seeds; s++) {
        size_t len;
        char *txt = random_walk(g, t, seed0 * 1000 + (uint64_t)s, 4000, st, &len);
        if (!txt) {
            fprintf(stderr, "  %s: schema %s\n", t->name, rf);
            (*n_bad)++;
            continue;
        }
        cJSON *v = cJSON_ParseWithLength(txt, len);
        why_bad = "does not parse";
        int ok = v && compact(txt, len) && (schema ? validate(schema, v) : (cJSON_IsObject(v) && free_ok(v, 0)));
        if (v && !compact(txt, len)) why_bad = "whitespace outside strings";
        if (!ok) {
            fprintf(stderr, "  %s: invalid output (%s): %s\n    schema: %s\n", t->name, why_bad, txt, rf);
            (*n_bad)++;
        }
        cJSON_Delete(v);
        free(txt);
    }
    flint_grammar_free(g);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void test_schema_walks(tokset *sets, int n_sets) {
    rng r = {12345};
    int n_bad = 0;
    walk_stats st[4];
    memset(st, 0, sizeof st);
    double t0 = now_s();
    for (int i = 0; i < 100; i++) {
        cJSON *schema = i % 5 == 4 ? gen_schema(&r, 0) : gen_object(&r, 0);
        char *rf = response_format(schema);
        for (int k = 0; k < n_sets; k++) walk_schema(&sets[k], schema, rf, k == 0 ? 3 : 4, (uint64_t)i * 7 + 1, &st[k], &n_bad);
        free(rf);
        cJSON_Delete(schema);
    }
    for (int k = 0; k < n_sets; k++) {
        qsort(st[k].times, (size_t)st[k].n_times, sizeof(double), cmp_double);
        printf("schema walks %-8s: %ld walks, %ld tokens (longest %ld), %ld masks: %.3f ms mean, %.3f ms p50, %.3f ms "
               "p99, %.3f ms max; %ld advance checks; %d failed\n",
               sets[k].name, st[k].walks, st[k].steps, st[k].max_steps, st[k].masks, 1e3 * st[k].mask_s / (double)st[k].masks,
               1e3 * st[k].times[st[k].n_times / 2], 1e3 * st[k].times[st[k].n_times * 99 / 100], 1e3 * st[k].max_mask_s,
               st[k].advance_checks, st[k].failures);
        free(st[k].times);
    }
    for (int k = 0; k < n_sets; k++) printf("  slowest %s mask after: %s\n", sets[k].name, st[k].slowest);
    printf("schema walks: %.1f s\n", now_s() - t0);
    CHECKF(n_bad == 0, "%d schema walks failed", n_bad);
    for (int f = 0; f < N_FEAT; f++) CHECKF(feat_seen[f], "the schema generator never made: %s", feat_name[f]);
}

static void test_json_object_walks(tokset *sets, int n_sets) {
    int n_bad = 0;
    walk_stats st;
    memset(&st, 0, sizeof st);
    for (int k = 0; k < n_sets; k++)
        walk_schema(&sets[k], NULL, "{\"type\": \"json_object\"}", 40, 99 + (uint64_t)k, &st, &n_bad);
    printf("json_object walks: %ld walks, %ld tokens, longest %ld\n", st.walks, st.steps, st.max_steps);
    free(st.times);
    CHECKF(n_bad == 0, "%d json_object walks failed", n_bad);
}

/* Splits txt into tokens at random among those whose bytes fit (so JSON syntax, escapes and
 * UTF-8 characters get cut every which way); returns the count, -1 when it cannot. */
static int random_split(const tokset *t, const char *txt, size_t n, rng *r, int32_t *ids, int cap) {
    int k = 0;
    int32_t *fit = malloc(sizeof(int32_t) * (size_t)t->n);
    for (size_t at = 0; at < n && k >= 0;) {
        int nf = 0;
        for (int i = 0; i < t->n; i++)
            if (t->len[i] && (size_t)t->len[i] <= n - at && i != t->eos && !flint_tokenizer_is_special(t->tok, i) &&
                !memcmp(t->bytes[i], txt + at, (size_t)t->len[i]))
                fit[nf++] = i;
        if (!nf || k == cap) {
            k = -1;
            break;
        }
        ids[k] = fit[rint_(r, nf)];
        at += (size_t)t->len[ids[k++]];
    }
    free(fit);
    return k;
}

/* Hand-picked texts through advance under three random token splits, which must agree:
 * 1 accepted with EOS after it, 0 refused somewhere, -1 error. */
static int accepts_text(const tokset *t, const char *rf, const char *txt) {
    flint_err err = {0};
    flint_grammar *g = flint_grammar_compile_vocab(rf, t->vocab, t->eos, &err);
    if (!g) {
        fprintf(stderr, "  compile: %s\n", err.msg);
        return -1;
    }
    rng r = {strlen(txt) * 31 + 7};
    int32_t ids[512];
    int result = -2;
    void *s = malloc(flint_grammar_state_size(g));
    for (int rep = 0; rep < 3; rep++) {
        int n = random_split(t, txt, strlen(txt), &r, ids, 512), ok = n >= 0;
        flint_grammar_state_init(g, s);
        for (int i = 0; i < n && ok; i++) ok = flint_grammar_advance(g, s, ids[i]) == 0;
        if (ok) ok = flint_grammar_advance(g, s, t->eos) == 0;
        if (result != -2 && result != ok) result = -1;
        else result = ok;
    }
    free(s);
    flint_grammar_free(g);
    return result;
}

static void test_examples(const tokset *t) {
    const char *obj = "{\"type\":\"json_object\"}";
    CHECK(accepts_text(t, obj, "{\"a\":[1,-2.5e3,true,null,\"x\\u00e9\\ud83d\\ude00\"],\"b\":{}}") == 1);
    CHECK(accepts_text(t, obj, "{}") == 1);
    CHECK(accepts_text(t, obj, "{ }") == 0);            /* whitespace */
    CHECK(accepts_text(t, obj, "[1]") == 0);            /* not an object */
    CHECK(accepts_text(t, obj, "{\"a\":01}") == 0);     /* leading zero */
    CHECK(accepts_text(t, obj, "{\"a\":\"\\ude00\"}") == 0); /* lone low surrogate */
    CHECK(accepts_text(t, obj, "{\"a\":\"\\u0000\"}") == 0);
    CHECK(accepts_text(t, obj, "{\"a\":\"\x01\"}") == 0);   /* raw control character */
    CHECK(accepts_text(t, obj, "{\"a\":1234567890123456}") == 0); /* 16 digits */
    CHECK(accepts_text(t, obj, "{\"a\":123456789012345}") == 1);
    const char *sch = "{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"p\",\"strict\":true,\"schema\":{"
                      "\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":3},"
                      "\"age\":{\"type\":\"integer\"},\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"a\",\"b\"]},"
                      "\"maxItems\":2}},\"required\":[\"name\",\"tags\"],\"additionalProperties\":false}}}";
    CHECK(accepts_text(t, sch, "{\"name\":\"abc\",\"age\":-7,\"tags\":[\"a\",\"b\"]}") == 1);
    CHECK(accepts_text(t, sch, "{\"name\":\"abc\",\"tags\":[]}") == 1);
    CHECK(accepts_text(t, sch, "{\"name\":\"abcd\",\"tags\":[]}") == 0); /* maxLength */
    CHECK(accepts_text(t, sch, "{\"tags\":[],\"name\":\"a\"}") == 0);     /* order */
    CHECK(accepts_text(t, sch, "{\"name\":\"a\"}") == 0);                 /* required */
    CHECK(accepts_text(t, sch, "{\"name\":\"a\",\"age\":1.5,\"tags\":[]}") == 0);
    CHECK(accepts_text(t, sch, "{\"name\":\"a\",\"tags\":[\"a\",\"a\",\"a\"]}") == 0); /* maxItems */
    CHECK(accepts_text(t, sch, "{\"name\":\"a\",\"tags\":[],\"x\":1}") == 0);         /* extra */
    const char *en = "{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"e\",\"schema\":{\"enum\":[1,12,\"a\\\"b\",null]}}}";
    CHECK(accepts_text(t, en, "1") == 1);
    CHECK(accepts_text(t, en, "12") == 1);
    CHECK(accepts_text(t, en, "\"a\\\"b\"") == 1);
    CHECK(accepts_text(t, en, "null") == 1);
    CHECK(accepts_text(t, en, "2") == 0);
    CHECK(accepts_text(t, en, "1.0") == 0); /* one spelling per value */
    /* 20 alternatives alive at once: the first 16 parses are kept, the rest narrowed away */
    char many[4096];
    int at = snprintf(many, sizeof many, "{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"m\",\"schema\":{\"anyOf\":[");
    for (int i = 0; i < 20; i++)
        at += snprintf(many + at, sizeof many - (size_t)at,
                       "%s{\"type\":\"object\",\"properties\":{\"k\":{\"const\":%d}},\"required\":[\"k\"]}", i ? "," : "", i + 20);
    snprintf(many + at, sizeof many - (size_t)at, "]}}}");
    CHECK(accepts_text(t, many, "{\"k\":20}") == 1);
    CHECK(accepts_text(t, many, "{\"k\":35}") == 1);
    CHECK(accepts_text(t, many, "{\"k\":36}") == 0);
}

/* =============================================================================================
 * bad schemas */

static void test_bad_schemas(const tokset *t) {
    static const struct {
        const char *rf;
        flint_code code;
        const char *want;
    } cases[] = {
        {"not json", FLINT_ERR_INVALID, "not valid JSON"},
        {"[1]", FLINT_ERR_INVALID, "must be an object"},
        {"{\"type\":\"text\"}", FLINT_ERR_INVALID, "text"},
        {"{\"type\":\"xml\"}", FLINT_ERR_INVALID, "\"xml\""},
        {"{\"type\":\"json_schema\"}", FLINT_ERR_INVALID, "json_schema must be an object"},
        {"{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\"}}", FLINT_ERR_INVALID, "schema is required"},
        {"{\"type\":\"json_schema\",\"json_schema\":{\"name\":7,\"schema\":{}}}", FLINT_ERR_INVALID, "name must be a string"},
        {"{\"type\":\"json_schema\",\"json_schema\":{\"schema\":{\"$ref\":\"#/$defs/a\"}}}", FLINT_ERR_UNSUPPORTED, "'$ref'"},
        {"{\"type\":\"json_schema\",\"json_schema\":{\"schema\":{\"type\":\"string\",\"pattern\":\"a+\"}}}", FLINT_ERR_UNSUPPORTED, "'pattern'"},
        {"{\"type\":\"json_schema\",\"json_schema\":{\"schema\":{\"type\":\"object\",\"properties\":{\"d\":{\"type\":\"string\",\"format\":\"date\"}}}}}",
         FLINT_ERR_UNSUPPORTED, "'format' is not supported (at schema/properties/d)"},
        {"{\"type\":\"json_schema\",\"json_schema\":{\"schema\":{\"type\":\"integer\",\"minimum\":0}}}", FLINT_ERR_UNSUPPORTED, "'minimum'"},
        {"{\"type\":\"json_schema\",\"json_schema\":{\"schema\":{\"oneOf\":[{},{}]}}}", FLINT_ERR_UNSUPPORTED, "'oneOf'"},
        {"{\"type\":\"json_schema\",\"json_schema\":{\"schema\":{\"allOf\":[{}]}}}", FLINT_ERR_UNSUPPORTED, "'allOf'"},
        {"{\"type\":\"json_schema\",\"json_schema\":{\"schema\":{\"type\":\"object\",\"patternProperties\":{}}}}", FLINT_ERR_UNSUPPORTED, "'patternProperties'"},
        {"{\"type\":\"json_schema\",\"json_schema\":{\"schema\":{\"type\":\"array\",\"prefixItems\":[{}]}}}", FLINT_ERR_UNSUPPORTED, "'prefixItems'"},
        {"{\"type\":\"json_schema\",\"json_schema\":{\"schema\":{\"type\":\"array\",\"items\":[{}]}}}", FLINT_ERR_UNSUPPORTED, "tuple"},
        {"{\"type\":\"json_schema\",\"json_schema\":{\"schema\":{\"type\":\"strin\"}}}", FLINT_ERR_INVALID, "unknown type 'strin'"},
        {"{\"type\":\"json_schema\",\"json_schema\":{\"schema\":{\"type\":\"object\",\"properties\":{\"a\":{}},\"required\":[\"zz\"]}}}",
         FLINT_ERR_UNSUPPORTED, "'zz'"},
        {"{\"type\":\"json_schema\",\"json_schema\":{\"schema\":{\"type\":\"string\",\"minLength\":5,\"maxLength\":2}}}", FLINT_ERR_INVALID, "minLength 5 is above maxLength 2"},
        {"{\"type\":\"json_schema\",\"json_schema\":{\"schema\":{\"type\":\"array\",\"minItems\":3,\"maxItems\":1}}}", FLINT_ERR_INVALID, "minItems 3 is above maxItems 1"},
        {"{\"type\":\"json_schema\",\"json_schema\":{\"schema\":{\"type\":\"string\",\"minLength\":\"3\"}}}", FLINT_ERR_INVALID, "non-negative integer"},
        {"{\"type\":\"json_schema\",\"json_schema\":{\"schema\":{\"enum\":[]}}}", FLINT_ERR_INVALID, "'enum' is empty"},
        {"{\"type\":\"json_schema\",\"json_schema\":{\"schema\":{\"type\":\"integer\",\"enum\":[\"a\",1.5]}}}", FLINT_ERR_INVALID, "no value"},
        {"{\"type\":\"json_schema\",\"json_schema\":{\"schema\":false}}", FLINT_ERR_INVALID, "allows no value"},
        {"{\"type\":\"json_schema\",\"json_schema\":{\"schema\":{\"type\":\"object\",\"anyOf\":[{}]}}}", FLINT_ERR_UNSUPPORTED, "'type' beside 'anyOf'"},
        {"{\"type\":\"json_schema\",\"json_schema\":{\"schema\":{\"anyOf\":[]}}}", FLINT_ERR_INVALID, "non-empty array"},
        {"{\"type\":\"json_schema\",\"json_schema\":{\"schema\":{\"type\":\"array\",\"items\":{\"not\":{}}}}}", FLINT_ERR_UNSUPPORTED, "'not' is not supported (at schema/items)"},
        {"{\"type\":\"json_schema\",\"json_schema\":{\"schema\":{\"anyOf\":[{\"type\":\"string\"},{\"if\":{}}]}}}", FLINT_ERR_UNSUPPORTED, "'if' is not supported (at schema/anyOf/1)"},
        {"{\"type\":\"json_schema\",\"json_schema\":{\"schema\":{\"type\":\"object\",\"properties\":{\"a\":{},\"a\":{}}}}}", FLINT_ERR_INVALID, "'a' is defined twice"},
        {"{\"type\":\"json_schema\",\"json_schema\":{\"schema\":{\"const\":1e999}}}", FLINT_ERR_INVALID, "out of range"},
        {"{\"type\":\"json_schema\",\"json_schema\":{\"strict\":\"yes\",\"schema\":{}}}", FLINT_ERR_INVALID, "strict must be a boolean"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        flint_err err = {0};
        flint_grammar *g = flint_grammar_compile_vocab(cases[i].rf, t->vocab, t->eos, &err);
        CHECKF(!g && err.code == cases[i].code && strstr(err.msg, cases[i].want), "%s -> code %d, \"%s\" (want \"%s\")",
               cases[i].rf, err.code, err.msg, cases[i].want);
        flint_grammar_free(g);
    }
    /* too many properties, too deep */
    char big[8192];
    int at = snprintf(big, sizeof big, "{\"type\":\"json_schema\",\"json_schema\":{\"schema\":{\"type\":\"object\",\"properties\":{");
    for (int i = 0; i < 65; i++) at += snprintf(big + at, sizeof big - (size_t)at, "%s\"p%d\":{}", i ? "," : "", i);
    snprintf(big + at, sizeof big - (size_t)at, "}}}}");
    flint_err err = {0};
    flint_grammar *g = flint_grammar_compile_vocab(big, t->vocab, t->eos, &err);
    CHECKF(!g && strstr(err.msg, "at most 64"), "%s", err.msg);
    at = snprintf(big, sizeof big, "{\"type\":\"json_schema\",\"json_schema\":{\"schema\":");
    for (int i = 0; i < 40; i++) at += snprintf(big + at, sizeof big - (size_t)at, "{\"type\":\"array\",\"items\":");
    at += snprintf(big + at, sizeof big - (size_t)at, "{}");
    for (int i = 0; i < 40; i++) at += snprintf(big + at, sizeof big - (size_t)at, "}");
    snprintf(big + at, sizeof big - (size_t)at, "}}");
    g = flint_grammar_compile_vocab(big, t->vocab, t->eos, &err);
    CHECKF(!g && strstr(err.msg, "nests"), "%s", err.msg);
    /* annotations, strict false, additionalProperties as a schema: accepted */
    const char *ok = "{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"n\",\"strict\":false,\"description\":\"d\","
                     "\"schema\":{\"$schema\":\"x\",\"title\":\"t\",\"type\":\"object\",\"properties\":{\"a\":{\"type\":"
                     "\"string\",\"default\":\"q\",\"examples\":[\"e\"]}},\"additionalProperties\":{\"type\":\"string\"},"
                     "\"$defs\":{\"unused\":{}}}}}";
    g = flint_grammar_compile_vocab(ok, t->vocab, t->eos, &err);
    CHECKF(g != NULL, "%s", err.msg);
    flint_grammar_free(g);
    g = flint_grammar_compile_vocab(ok, t->vocab, t->vocab ? flint_grammar_vocab_size(t->vocab) : 0, &err);
    CHECKF(!g && strstr(err.msg, "EOS"), "%s", err.msg);
}

/* =============================================================================================
 * mask speed on Qwen3 */

static void time_masks(const tokset *t) {
    static const struct {
        const char *what, *rf, *prefix;
    } cases[] = {
        {"json_object, start", "{\"type\":\"json_object\"}", ""},
        {"json_object, in a key", "{\"type\":\"json_object\"}", "{\""},
        {"json_object, value start", "{\"type\":\"json_object\"}", "{\"answer\":"},
        {"json_object, in a string value", "{\"type\":\"json_object\"}", "{\"answer\":\"The capital"},
        {"json_object, in a number", "{\"type\":\"json_object\"}", "{\"n\":12"},
        {"schema, key choice", "{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"s\",\"schema\":{\"type\":\"object\","
         "\"properties\":{\"name\":{\"type\":\"string\"},\"city\":{\"enum\":[\"Paris\",\"Berlin\",\"Rome\"]},\"n\":{\"type\":"
         "\"integer\"}}}}}", "{"},
        {"schema, enum value", "{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"s\",\"schema\":{\"type\":\"object\","
         "\"properties\":{\"name\":{\"type\":\"string\"},\"city\":{\"enum\":[\"Paris\",\"Berlin\",\"Rome\"]},\"n\":{\"type\":"
         "\"integer\"}}}}}", "{\"city\":"},
        {"schema, string near maxLength", "{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"s\",\"schema\":{\"type\":"
         "\"string\",\"maxLength\":12}}}", "\"abcdefghij"},
    };
    uint8_t *allowed = malloc((size_t)t->n);
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        flint_err err = {0};
        flint_grammar *g = flint_grammar_compile_vocab(cases[i].rf, t->vocab, t->eos, &err);
        if (!g) {
            CHECKF(0, "%s", err.msg);
            continue;
        }
        void *s = malloc(flint_grammar_state_size(g));
        flint_grammar_state_init(g, s);
        int32_t *ids;
        int n;
        flint_tokenizer_encode(t->tok, cases[i].prefix, strlen(cases[i].prefix), 0, &ids, &n, &err);
        int ok = 1;
        for (int k = 0; k < n; k++) ok &= flint_grammar_advance(g, s, ids[k]) == 0;
        free(ids);
        CHECKF(ok, "prefix %s refused", cases[i].prefix);
        int reps = 30, cnt = 0;
        double best = 1e9, tot = 0;
        for (int k = 0; k < reps; k++) {
            double t0 = now_s();
            cnt = flint_grammar_mask(g, s, allowed, t->n);
            double dt = now_s() - t0;
            tot += dt;
            if (dt < best) best = dt;
        }
        printf("mask qwen3 %-34s: %6d allowed, %.3f ms mean, %.3f ms best\n", cases[i].what, cnt, 1e3 * tot / reps, 1e3 * best);
        free(s);
        flint_grammar_free(g);
    }
    free(allowed);
}

/* =============================================================================================
 * lossless acceptance on a toy grammar */

enum { TV_EXTRA = 12, TK = 4 };
static const char *const toy_multi[TV_EXTRA] = {"[\"", "\"a\"", "\"b\"", "\",\"", "\"]", "a\"", "[]", "\"a\",",
                                                "b\"]", "]]", "{\"", "\"c"};
static int toy_v;
static char toy_bytes[256][8];
static size_t toy_lens[256];

typedef int (*toy_acceptor)(const flint_grammar *g, const void *s0, const flint_sampling_params *sp, const int32_t *draft,
                            const float *q, const float *logits, float *masked, int64_t pos0, flint_sampler_scratch *sc,
                            int32_t *out);

/* Masks row i of logits with the state reached along draft[0..i): what the engine does. Rows
 * after a draft token the grammar refuses keep the last state's mask (they are never read:
 * that token has probability 0 and is rejected). */
static void mask_rows(const flint_grammar *g, const void *s0, const int32_t *draft, int k, const float *logits,
                      float *masked, int *valid_prefix) {
    size_t ss = flint_grammar_state_size(g);
    char st[16384];
    memcpy(st, s0, ss);
    uint8_t allowed[256];
    int valid = 1;
    *valid_prefix = k;
    for (int i = 0; i <= k; i++) {
        flint_grammar_mask(g, st, allowed, toy_v);
        for (int v = 0; v < toy_v; v++) masked[i * toy_v + v] = allowed[v] ? logits[i * toy_v + v] : -INFINITY;
        if (i < k && valid && flint_grammar_advance(g, st, draft[i])) {
            valid = 0;
            *valid_prefix = i;
        }
    }
}

static int acc_correct(const flint_grammar *g, const void *s0, const flint_sampling_params *sp, const int32_t *draft,
                       const float *q, const float *logits, float *masked, int64_t pos0, flint_sampler_scratch *sc,
                       int32_t *out) {
    int vp;
    mask_rows(g, s0, draft, TK, logits, masked, &vp);
    return flint_accept_draft(sp, TK, draft, q, masked, toy_v, pos0, sc, out);
}

/* Broken on purpose: the mask applied only where tokens are sampled (residual, bonus), while
 * the acceptance test u * q(x) < p(x) reads the unmasked target (grammar-refused drafts are still
 * rejected, so every output is valid: only the statistics can tell). */
static int acc_unmasked_test(const flint_grammar *g, const void *s0, const flint_sampling_params *sp, const int32_t *draft,
                             const float *q, const float *logits, float *masked, int64_t pos0, flint_sampler_scratch *sc,
                             int32_t *out) {
    int vp, V = toy_v;
    mask_rows(g, s0, draft, TK, logits, masked, &vp);
    float pu[256];
    float *p = sc->probs;
    for (int i = 0; i < TK; i++) {
        flint_sampler_probs(sp, logits + i * V, V, pu, sc);
        flint_sampler_probs(sp, masked + i * V, V, p, sc);
        int32_t x = draft[i];
        if (p[x] > 0 && flint_rng_uniform(sp->seed, pos0 + i, FLINT_RNG_ACCEPT, 0) * q[i * V + x] < pu[x]) {
            out[i] = x;
            continue;
        }
        double mass = 0;
        for (int v = 0; v < V; v++) {
            float r = p[v] - q[i * V + v];
            p[v] = r > 0 ? r : 0;
            mass += p[v];
        }
        if (mass <= 1e-8) flint_sampler_probs(sp, masked + i * V, V, p, sc);
        out[i] = flint_sample_from_probs(p, V, flint_rng_uniform(sp->seed, pos0 + i, FLINT_RNG_RESIDUAL, 0));
        return i;
    }
    flint_sampler_probs(sp, masked + TK * V, V, p, sc);
    out[TK] = flint_sample_from_probs(p, V, flint_rng_uniform(sp->seed, pos0 + TK, FLINT_RNG_BONUS, 0));
    return TK;
}

/* Broken on purpose: cut the draft before its first token the grammar refuses, so that row
 * becomes the bonus row. Tempting, but it conditions on the draft and biases the output. */
static int acc_truncate(const flint_grammar *g, const void *s0, const flint_sampling_params *sp, const int32_t *draft,
                        const float *q, const float *logits, float *masked, int64_t pos0, flint_sampler_scratch *sc,
                        int32_t *out) {
    int vp;
    mask_rows(g, s0, draft, TK, logits, masked, &vp);
    return flint_accept_draft(sp, vp, draft, q, masked, toy_v, pos0, sc, out);
}

static double chi2_crit(int dof) { /* p = 0.001, Wilson-Hilferty */
    double z = 3.090232, t = 1 - 2 / (9.0 * dof) + z * sqrt(2 / (9.0 * dof));
    return dof * t * t * t;
}

#define TOY_GROUPS 512
typedef struct toy_group {
    char state[2048];
    long n;
    long counts[256];
} toy_group;

/* Returns the number of positions whose chi-square (summed over the grammar states reached
 * there) exceeds the critical value, or that emitted a token the grammar forbids. */
/* aware: how much of the drafter's proposal is the masked target at the state its draft reached
 * (0: a drafter that ignores the grammar). full: the run must reach every position 100k times. */
static int toy_run(const flint_grammar *g, toy_acceptor acc, const char *name, float aware, long max_trials, int full) {
    int V = toy_v;
    size_t ss = flint_grammar_state_size(g);
    FLINT_ASSERT(ss <= 2048);
    float *logits = malloc(sizeof(float) * (TK + 1) * (size_t)V), *q = malloc(sizeof(float) * TK * (size_t)V);
    float *masked = malloc(sizeof(float) * (TK + 1) * (size_t)V), *p = malloc(sizeof(float) * (size_t)V);
    /* target rows favour the grammar's own tokens; the draft is a perturbed copy that also
     * likes tokens the grammar refuses */
    for (int i = 0; i <= TK; i++)
        for (int v = 0; v < V; v++) {
            int useful = v == 0 || strchr("[]\",ab", toy_bytes[v][0]) || v >= V - TV_EXTRA;
            logits[i * V + v] = (float)(0.9 * sin(1.7 * v + 0.6 * i) + (useful ? 2.5 + 0.5 * cos(v + 2.0 * i) : 0));
        }
    float *broad = malloc(sizeof(float) * TK * (size_t)V);
    for (int i = 0; i < TK; i++) {
        double t = 0;
        for (int v = 0; v < V; v++) t += broad[i * V + v] = (float)exp(0.8 * logits[i * V + v] + 0.8 * cos(2.3 * v + i));
        for (int v = 0; v < V; v++) broad[i * V + v] /= (float)t;
    }
    flint_sampler_scratch sc;
    flint_sampler_scratch_init(&sc, V);
    flint_sampling_params sp;
    flint_sampling_params_default(&sp);
    toy_group *groups = calloc(TOY_GROUPS * (TK + 1), sizeof *groups);
    int n_groups[TK + 1] = {0};
    long reached[TK + 1] = {0};
    char *s0 = calloc(1, ss), *st = calloc(1, ss);
    flint_grammar_state_init(g, s0);
    const int64_t pos0 = 500;
    long trials = 0;
    int impossible = 0;
    while (reached[TK] < 100000 && trials < max_trials) {
        sp.seed = (uint64_t)trials * 2654435761u + 99 + ((uint64_t)1 << 40);
        int32_t draft[TK], out[TK + 1];
        /* the drafter may know the grammar state its own draft reaches (a drafter may depend on
         * its draft so far); the broad part proposes tokens the grammar refuses */
        memcpy(st, s0, ss);
        for (int i = 0; i < TK; i++) {
            uint8_t al[256];
            flint_grammar_mask(g, st, al, V);
            for (int v = 0; v < V; v++) p[v] = al[v] ? logits[i * V + v] : -INFINITY;
            flint_sampler_probs(&sp, p, V, sc.probs, &sc);
            for (int v = 0; v < V; v++) q[i * V + v] = aware * sc.probs[v] + (1 - aware) * broad[i * V + v];
            draft[i] = flint_sample_draft(q + i * V, V, sp.seed, pos0 + i);
            flint_grammar_advance(g, st, draft[i]); /* a refused token leaves st as it was */
        }
        int n = acc(g, s0, &sp, draft, q, logits, masked, pos0, &sc, out);
        memcpy(st, s0, ss);
        for (int j = 0; j <= n; j++) {
            toy_group *G = groups + j * TOY_GROUPS;
            int k = 0;
            while (k < n_groups[j] && memcmp(G[k].state, st, ss)) k++;
            if (k == n_groups[j]) {
                FLINT_ASSERT(k < TOY_GROUPS);
                memcpy(G[k].state, st, ss);
                n_groups[j]++;
            }
            G[k].n++;
            G[k].counts[out[j]]++;
            reached[j]++;
            if (flint_grammar_advance(g, st, out[j])) {
                impossible++;
                break;
            }
        }
        trials++;
    }
    int bad = 0;
    uint8_t allowed[256];
    for (int j = 0; j <= TK; j++) {
        double stat = 0;
        int dof = 0, tested = 0;
        for (int k = 0; k < n_groups[j]; k++) {
            toy_group *G = groups + j * TOY_GROUPS + k;
            if (G->n < 2000) continue;
            flint_grammar_mask(g, G->state, allowed, V);
            for (int v = 0; v < V; v++) p[v] = allowed[v] ? logits[j * V + v] : -INFINITY;
            flint_sampler_probs(&sp, p, V, sc.probs, &sc);
            int bins = 0;
            for (int v = 0; v < V; v++) {
                double e = sc.probs[v] * G->n;
                if (sc.probs[v] == 0) {
                    impossible += G->counts[v] != 0;
                    continue;
                }
                stat += (G->counts[v] - e) * (G->counts[v] - e) / e;
                bins++;
            }
            dof += bins - 1;
            tested++;
        }
        int fails = dof > 0 && stat > chi2_crit(dof);
        printf("%-32s pos %d: %7ld samples in %3d grammar states (%d tested), chi2 %9.1f (crit %.1f, dof %d)\n", name, j,
               reached[j], n_groups[j], tested, stat, dof > 0 ? chi2_crit(dof) : 0.0, dof);
        bad += fails;
        if (full) CHECKF(reached[j] >= 100000, "%s: position %d reached only %ld times", name, j, reached[j]);
    }
    if (impossible) printf("%-32s EMITS %d TOKENS THE GRAMMAR FORBIDS\n", name, impossible);
    flint_sampler_scratch_free(&sc);
    free(logits), free(q), free(broad), free(masked), free(p), free(groups), free(s0), free(st);
    return bad + (impossible > 0);
}

static void test_lossless(void) {
    /* the toy vocabulary: EOS, every printable ASCII byte (the grammar wants them all), a few
     * multi-byte tokens that cross JSON syntax */
    const char *bytes[256];
    uint8_t special[256] = {0};
    toy_v = 0;
    strcpy(toy_bytes[0], "</s>");
    toy_lens[0] = 4;
    special[0] = 1;
    toy_v = 1;
    for (int c = 0x20; c < 0x7F; c++) {
        toy_bytes[toy_v][0] = (char)c;
        toy_lens[toy_v++] = 1;
    }
    for (int i = 0; i < TV_EXTRA; i++) {
        strcpy(toy_bytes[toy_v], toy_multi[i]);
        toy_lens[toy_v++] = strlen(toy_multi[i]);
    }
    for (int i = 0; i < toy_v; i++) bytes[i] = toy_bytes[i];
    flint_err err = {0};
    flint_grammar_vocab *v = flint_grammar_vocab_from_bytes(toy_v, bytes, toy_lens, special, &err);
    CHECKF(v != NULL, "%s", err.msg);
    if (!v) return;
    const char *rf = "{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"toy\",\"schema\":{\"type\":\"array\","
                     "\"items\":{\"enum\":[\"a\",\"b\"]},\"maxItems\":3}}}";
    flint_grammar *g = flint_grammar_compile_vocab(rf, v, 0, &err);
    CHECKF(g != NULL, "%s", err.msg);
    if (g) {
        CHECKF(toy_run(g, acc_correct, "masked, grammar-aware drafter", 0.75f, 3000000, 1) == 0,
               "masked acceptance is not lossless");
        CHECKF(toy_run(g, acc_correct, "masked, grammar-blind drafter", 0.0f, 400000, 0) == 0,
               "masked acceptance is not lossless");
        /* the harness has power: both shortcuts are caught */
        CHECKF(toy_run(g, acc_unmasked_test, "BROKEN unmasked acceptance test", 0.75f, 400000, 0) > 0,
               "unmasked acceptance test not detected");
        CHECKF(toy_run(g, acc_truncate, "BROKEN cut draft at invalid", 0.75f, 400000, 0) > 0,
               "draft truncation not detected");
    }
    flint_grammar_free(g);
    flint_grammar_vocab_free(v);
}

/* =============================================================================================
 * a vocabulary that cannot spell, and a SentencePiece-style one without byte tokens */

static void test_vocab_checks(void) {
    const char *bytes[4] = {"</s>", "{", "}", "\""};
    size_t lens[4] = {4, 1, 1, 1};
    uint8_t special[4] = {1, 0, 0, 0};
    flint_err err = {0};
    flint_grammar_vocab *v = flint_grammar_vocab_from_bytes(4, bytes, lens, special, &err);
    CHECK(v != NULL);
    flint_grammar *g = flint_grammar_compile_vocab("{\"type\":\"json_object\"}", v, 0, &err);
    CHECKF(!g && err.code == FLINT_ERR_UNSUPPORTED && strstr(err.msg, "printable ASCII"), "%s", err.msg);
    flint_grammar_vocab_free(v);
    /* printable ASCII but no lone non-ASCII bytes: a half-character token is left out, and an enum
     * value the tokens cannot spell is refused */
    const char *b2[100];
    size_t l2[100];
    char one[96][2];
    int n = 0;
    b2[n] = "</s>", l2[n++] = 4;
    for (int c = 0x20; c < 0x7F; c++) {
        one[c - 0x20][0] = (char)c;
        b2[n] = one[c - 0x20], l2[n++] = 1;
    }
    b2[n] = "\xC3", l2[n++] = 1;         /* half of "é" */
    b2[n] = "\xC3\xA9", l2[n++] = 2;     /* é */
    uint8_t sp2[100] = {1};
    v = flint_grammar_vocab_from_bytes(n, b2, l2, sp2, &err);
    CHECK(v != NULL);
    g = flint_grammar_compile_vocab("{\"type\":\"json_schema\",\"json_schema\":{\"schema\":{\"enum\":[\"\xC3\xA9\"]}}}", v, 0, &err);
    CHECKF(g != NULL, "%s", err.msg);
    if (g) {
        void *s = malloc(flint_grammar_state_size(g));
        flint_grammar_state_init(g, s);
        uint8_t allowed[100];
        CHECK(flint_grammar_advance(g, s, 1 + ('"' - 0x20)) == 0);
        flint_grammar_mask(g, s, allowed, n);
        CHECK(allowed[n - 1] && !allowed[n - 2]);
        free(s);
    }
    flint_grammar_free(g);
    g = flint_grammar_compile_vocab("{\"type\":\"json_schema\",\"json_schema\":{\"schema\":{\"enum\":[\"\xE6\x97\xA5\"]}}}", v, 0, &err);
    CHECKF(!g && strstr(err.msg, "cannot be spelled"), "%s", err.msg);
    flint_grammar_vocab_free(v);
}

/* ============================================================================================= */

static tokset open_set(const char *name, const char *dir_or_file, int is_dir) {
    tokset t = {.name = name};
    flint_err err = {0};
    t.tok = is_dir ? flint_tokenizer_open_dir(dir_or_file, &err) : flint_tokenizer_open(dir_or_file, &err);
    if (!t.tok) {
        fprintf(stderr, "cannot open %s: %s\n", dir_or_file, err.msg);
        return t;
    }
    t.n = flint_tokenizer_vocab_size(t.tok);
    t.eos = flint_tokenizer_eos_id(t.tok);
    return t;
}

/* =============================================================================================
 * engine runs: the random schemas as real requests on the embedded pair (flint-tiny + its DSpark
 * drafter, K = 7), greedy and sampled; every response must finish by completing its grammar and
 * parse and validate; the pooled acceptance with the grammar on is printed. */
typedef struct eng_req {
    cJSON *schema;
    char *rf;
    flint_sbuf text;
    int done, temp1;
} eng_req;

static void test_engine_schemas(void) {
    flint_engine_options o;
    flint_engine_options_default(&o);
    o.model_dir = FLINT_SOURCE_DIR "/models/flint-tiny";
    o.drafter_dir = FLINT_SOURCE_DIR "/models/flint-tiny-dspark";
    o.num_speculative_tokens = 7;
    /* every step drafts (the grammar's interplay with drafts is under test): dynamic lengths would
     * make how many steps draft depend on timing, and under a loaded ctest the gate once stopped
     * drafting before any draft was accepted (session 20) */
    o.dynamic_draft = 0;
    o.max_seqs = 16;
    o.max_model_len = 1024;
    o.n_threads = 1; /* ctest runs tests side by side */
    flint_err err = {0};
    flint_engine *e = flint_engine_open(&o, &err);
    CHECKF(e != NULL, "%s", err.msg);
    if (!e) return;
    const flint_tokenizer *tok = flint_engine_tokenizer(e);
    static const char chat[] = "<|im_start|>user\nAnswer with one JSON value.<|im_end|>\n<|im_start|>assistant\n";
    int32_t *prompt = NULL;
    int n_prompt = 0;
    CHECKF(flint_tokenizer_encode(tok, chat, strlen(chat), 0, &prompt, &n_prompt, &err) == 0, "%s", err.msg);

    enum { N_SCHEMA = 100, N_REQ = 2 * N_SCHEMA };
    eng_req *q = calloc(N_REQ, sizeof *q);
    int *sid_req = malloc(sizeof(int) * 4096);
    for (int i = 0; i < 4096; i++) sid_req[i] = -1;
    rng r = {424242};
    for (int i = 0; i < N_SCHEMA; i++) {
        cJSON *schema = i % 5 == 4 ? gen_schema(&r, 0) : gen_object(&r, 0);
        for (int t = 0; t < 2; t++) {
            q[2 * i + t].schema = t ? cJSON_Duplicate(schema, 1) : schema;
            q[2 * i + t].rf = response_format(schema);
            q[2 * i + t].temp1 = t;
        }
    }
    double t0 = now_s();
    int next = 0, finished = 0, bad = 0, length = 0;
    long tokens = 0;
    while (finished < N_REQ) {
        while (next < N_REQ && flint_engine_active(e) < o.max_seqs) {
            flint_request_params p;
            flint_request_params_default(&p);
            p.sampling.temperature = q[next].temp1 ? 1.0f : 0.0f;
            p.sampling.seed = 1000 + (uint64_t)next;
            p.max_tokens = 900;
            p.response_format = q[next].rf;
            int sid = flint_engine_add(e, prompt, n_prompt, &p, &err);
            if (sid < 0 && err.code == FLINT_ERR_NOMEM) break; /* a finished slot frees at the next step */
            CHECKF(sid >= 0 && sid < 4096, "add request %d: %s", next, err.msg);
            if (sid < 0 || sid >= 4096) goto out;
            sid_req[sid] = next++;
        }
        const flint_step_event *ev;
        int n_ev = 0;
        if (flint_engine_step(e, &ev, &n_ev, &err)) {
            CHECKF(0, "engine step: %s", err.msg);
            goto out;
        }
        for (int k = 0; k < n_ev; k++) {
            int id = sid_req[ev[k].sid];
            FLINT_ASSERT(id >= 0);
            eng_req *x = &q[id];
            flint_sbuf_add(&x->text, ev[k].text, ev[k].text_len);
            tokens += ev[k].n_tokens;
            if (ev[k].finish == FLINT_FINISH_NONE) continue;
            x->done = 1;
            finished++;
            sid_req[ev[k].sid] = -1;
            cJSON *v = x->text.n ? cJSON_ParseWithLength(x->text.p, x->text.n) : NULL;
            int ok = ev[k].finish == FLINT_FINISH_STOP && v && validate(x->schema, v);
            if (ev[k].finish == FLINT_FINISH_LENGTH) length++;
            if (!ok && bad++ < 5)
                fprintf(stderr, "engine schema %d (T=%d) finish %s: %.*s\n  schema %s\n", id / 2, x->temp1,
                        flint_finish_reason_name(ev[k].finish), (int)(x->text.n > 300 ? 300 : x->text.n),
                        x->text.p ? x->text.p : "", cJSON_PrintUnformatted(x->schema));
            cJSON_Delete(v);
        }
    }
    {
        const flint_spec_stats *st = flint_engine_stats(e);
        printf("engine schemas: %d requests (100 schemas x greedy / T=1), %ld tokens in %.1f s; %d invalid, %d cut by "
               "max_tokens; grammar-on acceptance: AL %.3f, draft acceptance %.3f, accepted per position",
               N_REQ, tokens, now_s() - t0, bad, length, flint_spec_stats_mean_al(st),
               flint_spec_stats_acceptance_rate(st));
        for (int i = 0; i < 7; i++)
            printf(" %.3f", st->steps ? (double)st->accepted_per_pos[i] / (double)st->steps : 0.0);
        printf("\n");
        CHECKF(bad == 0, "%d of %d engine responses did not complete, parse and validate", bad, N_REQ);
        CHECKF(st->steps > 0 && st->accepted > 0, "speculation ran with the grammar on (%ld steps)", (long)st->steps);
    }
out:
    for (int i = 0; i < N_REQ; i++) {
        cJSON_Delete(q[i].schema);
        free(q[i].rf);
        flint_sbuf_free(&q[i].text);
    }
    free(q);
    free(sid_req);
    free(prompt);
    flint_engine_close(e);
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "engine")) {
        test_engine_schemas();
        for (int f = 0; f < N_FEAT; f++) CHECKF(feat_seen[f], "the schema generator never made: %s", feat_name[f]);
        return test_report("test_grammar engine");
    }
    if (load_texts()) return 1;
    tokset qwen = open_set("qwen3", FLINT_SHARED_DIR "/tokenizers/qwen3", 1);
    tokset llama = open_set("llama2c", FIXDIR "/llama2c", 1);
    tokset gpt2 = open_set("gpt2", FLINT_GPT2_TOKENIZER_JSON, 0);
    CHECK(qwen.tok && llama.tok && gpt2.tok);
    if (!qwen.tok || !llama.tok || !gpt2.tok) return test_report("test_grammar");

    check_token_bytes("qwen3", qwen.tok, 0);
    check_token_bytes("gpt2", gpt2.tok, 0);
    check_token_bytes("llama2c", llama.tok, 1);
    static const struct {
        const char *dir;
        int lead;
    } more[] = {{"llama2c_ms_first", 1}, {"llama2c_ms_always", 1}, {"gpt2mini", 0}, {"gpt2mini_nodec", 2}, {"gpt2mini_split", 0}};
    for (size_t i = 0; i < sizeof more / sizeof *more; i++) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s/tokenizer.json", FIXDIR, more[i].dir);
        flint_err err = {0};
        flint_tokenizer *t = flint_tokenizer_open(path, &err);
        CHECKF(t != NULL, "%s", err.msg);
        if (t) check_token_bytes(more[i].dir, t, more[i].lead);
        flint_tokenizer_close(t);
    }
    test_token_bytes_special(qwen.tok, llama.tok);

    tokset sets[2] = {qwen, llama};
    for (int k = 0; k < 2; k++) {
        flint_err err = {0};
        double t0 = now_s();
        sets[k].vocab = flint_grammar_vocab_build(sets[k].tok, &err);
        CHECKF(sets[k].vocab != NULL, "%s", err.msg);
        if (!sets[k].vocab) return test_report("test_grammar");
        printf("vocab %-8s: %d tokens, built in %.0f ms\n", sets[k].name, sets[k].n, 1e3 * (now_s() - t0));
        tokset_bytes(&sets[k]);
    }
    {
        /* the convenience compile builds its own vocab */
        flint_err err = {0};
        flint_grammar *g = flint_grammar_compile("{\"type\":\"json_object\"}", llama.tok, llama.eos, &err);
        CHECKF(g != NULL, "%s", err.msg);
        flint_grammar_free(g);
    }

    test_vocab_checks();
    for (int k = 0; k < 2; k++) test_examples(&sets[k]);
    test_bad_schemas(&sets[0]);
    time_masks(&sets[0]);
    test_json_object_walks(sets, 2);
    test_schema_walks(sets, 2);
    test_lossless();

    for (int k = 0; k < 2; k++) {
        flint_grammar_vocab_free(sets[k].vocab);
        for (int i = 0; i < sets[k].n; i++) free(sets[k].bytes[i]);
        free(sets[k].bytes), free(sets[k].len);
    }
    flint_tokenizer_close(qwen.tok);
    flint_tokenizer_close(llama.tok);
    flint_tokenizer_close(gpt2.tok);
    for (int i = 0; i < n_texts; i++) free(texts[i].s);
    free(texts);
    return test_report("test_grammar");
}
