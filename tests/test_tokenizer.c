/* The tokenizer against Hugging Face `tokenizers`: thousands of real prompts plus edge cases,
 * encoded and decoded by HF (tests/fixtures/tokenizer, see tools/make_tokenizer_fixture.py) for
 * Qwen3, GPT-2 and llama2.c SentencePiece tokenizers in several forms. Any mismatch fails the
 * test and is printed. Also: the incremental decoder equals the full decode on every sequence,
 * bad input and unsupported tokenizer.json parts are refused with a message, one tokenizer serves
 * many threads, and a few MB encode in seconds. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "core/json.h"
#include "core/tokenizer.h"
#include "test.h"

#define FIXDIR FLINT_SOURCE_DIR "/tests/fixtures/tokenizer"

typedef struct text {
    char *s;
    size_t n;
} text;

static text *texts;
static int n_texts;

/* ---- fixture reading ---- */

static char *read_all(const char *path, size_t *len) {
    flint_err err = {0};
    char *s = flint_file_read(path, (size_t)1 << 30, len, &err);
    if (!s) fprintf(stderr, "cannot read %s: %s\n", path, err.msg);
    return s;
}

/* Calls fn for each JSON line of a file; returns the number of lines, -1 if unreadable. */
static int each_line(const char *path, void (*fn)(cJSON *, int, void *), void *ctx) {
    size_t len;
    char *s = read_all(path, &len);
    if (!s) return -1;
    int k = 0;
    for (char *p = s; p < s + len;) {
        char *e = memchr(p, '\n', (size_t)(s + len - p));
        if (!e) e = s + len;
        if (e > p) {
            cJSON *j = cJSON_ParseWithLength(p, (size_t)(e - p));
            if (!j) {
                fprintf(stderr, "%s:%d: bad JSON line\n", path, k + 1);
                exit(1);
            }
            fn(j, k++, ctx);
            cJSON_Delete(j);
        }
        p = e + 1;
    }
    free(s);
    return k;
}

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

/* A string field of the fixture, or its KEY_hex form (strings with NUL); malloc'd, NULL if absent. */
static char *get_str(const cJSON *j, const char *key, size_t *n) {
    const cJSON *v = cJSON_GetObjectItem(j, key);
    if (cJSON_IsString(v)) {
        *n = strlen(v->valuestring);
        char *s = malloc(*n + 1);
        memcpy(s, v->valuestring, *n + 1);
        return s;
    }
    char hk[64];
    snprintf(hk, sizeof hk, "%s_hex", key);
    v = cJSON_GetObjectItem(j, hk);
    return cJSON_IsString(v) ? from_hex(v->valuestring, n) : NULL;
}

static void add_text(cJSON *j, int k, void *ctx) {
    (void)ctx;
    texts = realloc(texts, sizeof *texts * (size_t)(k + 1));
    const cJSON *h = cJSON_GetObjectItem(j, "hex");
    texts[k].s = h ? from_hex(h->valuestring, &texts[k].n) : get_str(j, "text", &texts[k].n);
    n_texts = k + 1;
}

/* ids64 of the fixture: base-32 digits, most significant first; 'g'..'_' say "more follows" */
static int32_t *decode_ids64(const char *s, int *n) {
    int cap = 64, k = 0;
    int32_t *v = malloc(sizeof *v * (size_t)cap), cur = 0;
    for (; *s; s++) {
        const char *A = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        int d = (int)(strchr(A, *s) - A);
        cur = cur * 32 + (d & 31);
        if (d < 32) {
            if (k == cap) v = realloc(v, sizeof *v * (size_t)(cap *= 2));
            v[k++] = cur;
            cur = 0;
        }
    }
    *n = k;
    return v;
}

static int32_t *json_ids(const cJSON *a, int *n) {
    *n = cJSON_GetArraySize(a);
    int32_t *v = malloc(sizeof *v * (size_t)(*n + 1));
    int k = 0;
    for (const cJSON *e = a ? a->child : NULL; e; e = e->next) v[k++] = (int32_t)e->valuedouble;
    return v;
}

/* ---- reporting ---- */

static void excerpt(const char *s, size_t n) {
    fputc('"', stderr);
    for (size_t i = 0; i < n && i < 70; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\n') fputs("\\n", stderr);
        else if (c == '\t') fputs("\\t", stderr);
        else if (c == '\r') fputs("\\r", stderr);
        else if (c < 0x20) fprintf(stderr, "\\x%02x", c);
        else fputc(c, stderr);
    }
    fputs(n > 70 ? "\"..." : "\"", stderr);
}

static void show_ids(const char *label, const int32_t *v, int n, int around) {
    int a = around - 4 < 0 ? 0 : around - 4, b = around + 8 > n ? n : around + 8;
    fprintf(stderr, "      %s (%d ids) [%s", label, n, a ? "... " : "");
    for (int i = a; i < b; i++) fprintf(stderr, "%s%d", i > a ? " " : "", v[i]);
    fprintf(stderr, "%s]\n", b < n ? " ..." : "");
}

static int first_diff(const int32_t *a, int na, const int32_t *b, int nb) {
    int i = 0;
    while (i < na && i < nb && a[i] == b[i]) i++;
    return i;
}

/* ---- one tokenizer against its fixture ---- */

typedef struct run {
    const char *name;
    flint_tokenizer *tok;
    int decoded_texts;
    int n, enc_bad, sp_bad, dec_bad, inc_bad;
} run;

/* Incremental decode of ids with a small output buffer; compares with the full decode. */
static int incremental_ok(const flint_tokenizer *tok, const int32_t *ids, int n, int skip, const char *full,
                          size_t full_len) {
    flint_detok d;
    flint_detok_init(&d, tok, skip);
    flint_err err = {0};
    size_t cap = 0, len = 0;
    char *acc = NULL, piece[4096];
    int ok = 1;
    for (int i = 0; i <= n; i++) {
        int w = i < n ? flint_detok_push(&d, ids[i], piece, sizeof piece, &err) : flint_detok_flush(&d, piece, sizeof piece, &err);
        if (w < 0) {
            fprintf(stderr, "    detok: %s\n", err.msg);
            ok = 0;
            break;
        }
        /* only whole characters come out */
        if (w > 0) {
            unsigned char last = (unsigned char)piece[w - 1];
            int lead = w - 1;
            while (lead > 0 && ((unsigned char)piece[lead] & 0xC0) == 0x80) lead--;
            unsigned char c = (unsigned char)piece[lead];
            int need = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
            if (w - lead != need) ok = 0;
            (void)last;
        }
        if (len + (size_t)w + 1 > cap) acc = realloc(acc, cap = (len + (size_t)w + 1) * 2);
        memcpy(acc + len, piece, (size_t)w);
        len += (size_t)w;
    }
    flint_detok_free(&d);
    if (ok && (len != full_len || (len && memcmp(acc, full, len)))) ok = 0;
    free(acc);
    return ok;
}

static int decode_eq(const flint_tokenizer *tok, const int32_t *ids, int n, int skip, const char *want, size_t want_len,
                     char **got_out, size_t *got_len_out) {
    char *got;
    size_t got_len;
    flint_err err = {0};
    if (flint_tokenizer_decode(tok, ids, n, skip, &got, &got_len, &err)) {
        fprintf(stderr, "    decode failed: %s\n", err.msg);
        return 0;
    }
    int ok = got_len == want_len && !memcmp(got, want, want_len);
    *got_out = got;
    *got_len_out = got_len;
    return ok;
}

static void check_record(cJSON *j, int line, void *ctx) {
    run *r = ctx;
    const cJSON *ti = cJSON_GetObjectItem(j, "t");
    int t = ti ? ti->valueint : line;
    const text *tx = &texts[t];
    int ne, ng;
    int32_t *exp = decode_ids64(cJSON_GetObjectItem(j, "ids")->valuestring, &ne), *got = NULL;
    flint_err err = {0};
    r->n++;

    if (flint_tokenizer_encode(r->tok, tx->s, tx->n, 0, &got, &ng, &err)) {
        if (r->enc_bad++ < 3) fprintf(stderr, "  %s text %d: encode failed: %s\n", r->name, t, err.msg);
    } else if (ng != ne || memcmp(got, exp, sizeof *got * (size_t)ne)) {
        if (r->enc_bad++ < 3) {
            int at = first_diff(exp, ne, got, ng);
            fprintf(stderr, "  %s mismatch, text %d ", r->name, t);
            excerpt(tx->s, tx->n);
            fprintf(stderr, "\n      first difference at id %d\n", at);
            show_ids("expected", exp, ne, at);
            show_ids("got     ", got, ng, at);
        }
    }
    free(got);

    const cJSON *sp = cJSON_GetObjectItem(j, "sp");
    if (sp) {
        int np = 0, nq = 0, nf = 0;
        int32_t *pre = json_ids(cJSON_GetObjectItem(sp, "pre"), &np), *post = json_ids(cJSON_GetObjectItem(sp, "post"), &nq);
        int32_t *full = json_ids(cJSON_GetObjectItem(sp, "full"), &nf);
        if (!cJSON_GetObjectItem(sp, "full")) {
            nf = np + ne + nq;
            full = realloc(full, sizeof *full * (size_t)(nf + 1));
            memcpy(full, pre, sizeof *pre * (size_t)np);
            memcpy(full + np, exp, sizeof *exp * (size_t)ne);
            memcpy(full + np + ne, post, sizeof *post * (size_t)nq);
        }
        if (flint_tokenizer_encode(r->tok, tx->s, tx->n, 1, &got, &ng, &err) || ng != nf ||
            memcmp(got, full, sizeof *got * (size_t)nf)) {
            if (r->sp_bad++ < 3) {
                fprintf(stderr, "  %s add_special mismatch, text %d ", r->name, t);
                excerpt(tx->s, tx->n);
                fputc('\n', stderr);
            }
        }
        free(got);
        free(pre);
        free(post);
        free(full);
    }

    /* decodes: against HF where recorded, and the incremental decoder always */
    for (int skip = 0; skip <= 1; skip++) {
        char *full;
        size_t full_len;
        if (flint_tokenizer_decode(r->tok, exp, ne, skip, &full, &full_len, &err)) {
            r->dec_bad++;
            continue;
        }
        if (line < r->decoded_texts) {
            size_t dec_len, dsk_len;
            char *dec = get_str(j, "dec", &dec_len), *dsk = get_str(j, "dsk", &dsk_len);
            const char *want = tx->s;
            size_t want_len = tx->n;
            if (dec) want = dec, want_len = dec_len;
            if (skip && dsk) want = dsk, want_len = dsk_len;
            if (full_len != want_len || memcmp(full, want, want_len)) {
                if (r->dec_bad++ < 3) {
                    fprintf(stderr, "  %s decode(skip_special=%d) mismatch, text %d\n      expected ", r->name, skip, t);
                    excerpt(want, want_len);
                    fprintf(stderr, "\n      got      ");
                    excerpt(full, full_len);
                    fputc('\n', stderr);
                }
            }
            free(dec);
            free(dsk);
        }
        if (!incremental_ok(r->tok, exp, ne, skip, full, full_len) && r->inc_bad++ < 3)
            fprintf(stderr, "  %s incremental decode (skip_special=%d) differs from decode, text %d\n", r->name, skip, t);
        free(full);
    }
    free(exp);
}

static void check_decode_case(cJSON *j, int line, void *ctx) {
    run *r = ctx;
    int n;
    int32_t *ids = json_ids(cJSON_GetObjectItem(j, "ids"), &n);
    r->n++;
    for (int skip = 0; skip <= 1; skip++) {
        size_t want_len, got_len = 0;
        char *want = get_str(j, skip ? "dsk" : "dec", &want_len), *got = NULL;
        if (!decode_eq(r->tok, ids, n, skip, want, want_len, &got, &got_len)) {
            if (r->dec_bad++ < 3) {
                fprintf(stderr, "  %s decode case %d (skip_special=%d)\n      expected ", r->name, line, skip);
                excerpt(want, want_len);
                fprintf(stderr, "\n      got      ");
                if (got) excerpt(got, got_len);
                fputc('\n', stderr);
                show_ids("ids", ids, n, 0);
            }
        }
        if (got && !incremental_ok(r->tok, ids, n, skip, got, got_len) && r->inc_bad++ < 3)
            fprintf(stderr, "  %s incremental decode differs, decode case %d\n", r->name, line);
        free(got);
        free(want);
    }
    free(ids);
}

static const char *tokenizer_path(const char *where, char *buf, size_t cap) {
    if (!strncmp(where, "@shared/", 8)) snprintf(buf, cap, "%s/%s", FLINT_SHARED_DIR, where + 8);
    else if (!strncmp(where, "@models/", 8)) snprintf(buf, cap, "%s/models/%s", FLINT_SOURCE_DIR, where + 8);
    else if (!strcmp(where, "@gpt2")) snprintf(buf, cap, "%s", FLINT_GPT2_TOKENIZER_JSON);
    else snprintf(buf, cap, "%s/%s", FIXDIR, where);
    return buf;
}

static void check_tokenizer(const cJSON *m) {
    const char *name = cJSON_GetObjectItem(m, "name")->valuestring;
    char path[4096], fx[4096];
    tokenizer_path(cJSON_GetObjectItem(m, "tokenizer")->valuestring, path, sizeof path);
    flint_err err = {0};
    run r = {.name = name, .decoded_texts = cJSON_GetObjectItem(m, "decoded_texts")->valueint};
    r.tok = flint_tokenizer_open(path, &err);
    CHECKF(r.tok != NULL, "%s: %s", name, err.msg);
    if (!r.tok) return;

    CHECKF(flint_tokenizer_vocab_size(r.tok) == cJSON_GetObjectItem(m, "vocab_size")->valueint, "%s vocab size %d", name,
           flint_tokenizer_vocab_size(r.tok));
    int probe_bad = 0;
    for (const cJSON *p = cJSON_GetObjectItem(m, "probes")->child; p; p = p->next) {
        int32_t id = flint_tokenizer_token_id(r.tok, p->string);
        const char *s = flint_tokenizer_token_str(r.tok, (int32_t)p->valuedouble);
        if (id != (int32_t)p->valuedouble || !s || flint_tokenizer_token_id(r.tok, s) != id) probe_bad++;
    }
    CHECKF(probe_bad == 0, "%s: %d vocab probes differ", name, probe_bad);
    for (const cJSON *s = cJSON_GetObjectItem(m, "special")->child; s; s = s->next)
        CHECKF(flint_tokenizer_is_special(r.tok, flint_tokenizer_token_id(r.tok, s->valuestring)), "%s: %s not special",
               name, s->valuestring);

    int want = cJSON_GetObjectItem(m, "texts")->valueint;
    if (want) {
        snprintf(fx, sizeof fx, "%s/%s.jsonl", FIXDIR, name);
        int lines = each_line(fx, check_record, &r);
        CHECKF(lines == want, "%s: %d fixture lines, manifest says %d", name, lines, want);
        printf("%s: %d texts, %d mismatches (add_special %d, decode %d, incremental %d)\n", name, r.n, r.enc_bad,
               r.sp_bad, r.dec_bad, r.inc_bad);
        CHECKF(r.enc_bad == 0 && r.sp_bad == 0, "%s: %d encode and %d add_special mismatches", name, r.enc_bad, r.sp_bad);
    }
    int texts_dec = r.dec_bad, texts_inc = r.inc_bad;
    r.n = r.dec_bad = r.inc_bad = 0;
    snprintf(fx, sizeof fx, "%s/%s.decode.jsonl", FIXDIR, name);
    each_line(fx, check_decode_case, &r);
    printf("%s: %d decode cases, %d mismatches (incremental %d)\n", name, r.n, r.dec_bad, r.inc_bad);
    CHECKF(texts_dec == 0 && texts_inc == 0 && r.dec_bad == 0 && r.inc_bad == 0, "%s: decode mismatches", name);
    flint_tokenizer_close(r.tok);
}

/* ---- unit checks ---- */

static char tmpdir[256];

static const char *write_tmp(const char *name, const char *content) {
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "wb");
    fputs(content, f);
    fclose(f);
    return path;
}

static void expect_refused(const char *json, const char *needle) {
    flint_err err = {0};
    flint_tokenizer *t = flint_tokenizer_open(write_tmp("bad.json", json), &err);
    CHECKF(t == NULL && strstr(err.msg, needle), "expected a refusal naming '%s', got '%s'", needle, err.msg);
    flint_tokenizer_close(t);
}

#define MINI_MODEL "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"ab\":2},\"merges\":[\"a b\"]}"

static void unit_checks(void) {
    flint_err err = {0};
    CHECK(flint_tokenizer_open("/nonexistent/tokenizer.json", &err) == NULL && err.code == FLINT_ERR_IO);
    expect_refused("{\"model\": {", "invalid JSON");
    expect_refused("{\"model\":{\"type\":\"WordPiece\",\"vocab\":{}}}", "WordPiece");
    expect_refused("{\"model\":{\"type\":\"Unigram\",\"vocab\":[]}}", "Unigram");
    expect_refused("{\"normalizer\":{\"type\":\"BertNormalizer\"}," MINI_MODEL "}", "BertNormalizer");
    expect_refused("{\"pre_tokenizer\":{\"type\":\"Whitespace\"}," MINI_MODEL "}", "Whitespace");
    expect_refused("{\"decoder\":{\"type\":\"WordPiece\"}," MINI_MODEL "}", "decoder \"WordPiece\"");
    expect_refused("{\"post_processor\":{\"type\":\"Mystery\"}," MINI_MODEL "}", "Mystery");
    expect_refused("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[\"a b\"]}}", "merge 0");
    expect_refused("{\"model\":{\"type\":\"BPE\",\"dropout\":0.1,\"vocab\":{\"a\":0},\"merges\":[]}}", "dropout");
    expect_refused("{\"pre_tokenizer\":{\"type\":\"Split\",\"pattern\":{\"Regex\":\"(\"},\"behavior\":\"Isolated\"}," MINI_MODEL "}",
                   "does not compile");

    /* the minimal tokenizer works, and refuses invalid UTF-8 with a message */
    flint_tokenizer *t = flint_tokenizer_open(write_tmp("mini.json", "{" MINI_MODEL "}"), &err);
    CHECKF(t != NULL, "%s", err.msg);
    if (t) {
        int32_t *ids;
        int n;
        CHECK(flint_tokenizer_encode(t, "abba", 4, 1, &ids, &n, &err) == 0 && n == 3 && ids[0] == 2 && ids[1] == 1 &&
              ids[2] == 0);
        free(ids);
        static const char *bad[] = {"a\xff", "\xc0\xaf", "\xed\xa0\x80", "\xe2\x82", "\xf4\x90\x80\x80"};
        for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
            ids = NULL;
            CHECKF(flint_tokenizer_encode(t, bad[i], strlen(bad[i]), 0, &ids, &n, &err) == -1 &&
                       err.code == FLINT_ERR_INVALID && strstr(err.msg, "UTF-8"),
                   "invalid UTF-8 case %zu accepted", i);
            free(ids);
        }
        CHECK(flint_tokenizer_encode(t, "", 0, 0, &ids, &n, &err) == 0 && n == 0);
        free(ids);
        /* out-of-range ids are skipped by decode, as HF does */
        int32_t odd[] = {2, -5, 99999, 0};
        char *s;
        size_t len;
        CHECK(flint_tokenizer_decode(t, odd, 4, 0, &s, &len, &err) == 0 && !strcmp(s, "ab a"));
        free(s);
        flint_tokenizer_close(t);
    }
}

static void open_dir_checks(void) {
    flint_err err = {0};
    flint_tokenizer *t = flint_tokenizer_open_dir(FIXDIR "/llama2c", &err);
    CHECKF(t != NULL, "%s", err.msg);
    if (!t) return;
    CHECK(flint_tokenizer_bos_id(t) == 1);
    CHECK(flint_tokenizer_eos_id(t) == 2);
    CHECK(flint_tokenizer_chat_template(t) && !strcmp(flint_tokenizer_chat_template(t),
                                                         "{{ bos_token }}{{ messages[0].content }}"));
    CHECK(flint_tokenizer_is_special(t, 1) && !flint_tokenizer_is_special(t, 300));
    CHECK(flint_tokenizer_token_str(t, 3) && !strcmp(flint_tokenizer_token_str(t, 3), "<0x00>"));
    CHECK(flint_tokenizer_token_str(t, 100000) == NULL && flint_tokenizer_token_id(t, "no such token") == -1);

    /* detok: a byte-fallback run is held whole; tiny buffers queue the rest; flush can be retried */
    int32_t nihao[] = {3 + 0xE4, 3 + 0xBD, 3 + 0xA0, 3 + 0xE5, 3 + 0xA5, 3 + 0xBD};
    flint_detok d;
    flint_detok_init(&d, t, 0);
    char out[16];
    int total = 0;
    for (int i = 0; i < 6; i++) total += flint_detok_push(&d, nihao[i], out, sizeof out, &err);
    CHECK(total == 0);
    CHECK(flint_detok_flush(&d, out, 4, &err) == -1 && err.code == FLINT_ERR_INVALID);
    CHECK(flint_detok_flush(&d, out, sizeof out, &err) == 6 && !strcmp(out, "你好"));
    flint_detok_init(&d, t, 0);
    CHECK(flint_detok_push(&d, 0, out, 4, &err) == -1);
    flint_detok_free(&d);

    /* a long run spills to the heap; the state can be copied mid-stream; abandoning it with
     * flint_detok_free gives everything back (the sanitizer build checks) */
    int32_t runs[601];
    for (int i = 0; i < 600; i++) runs[i] = nihao[i % 3];
    runs[600] = 300;
    char *want, big[4096];
    size_t want_len, got_len = 0;
    CHECK(flint_tokenizer_decode(t, runs, 601, 0, &want, &want_len, &err) == 0 && want_len > 600 &&
          !memcmp(want, "你你你你", 12));
    flint_detok_init(&d, t, 0);
    for (int i = 0; i < 300; i++) got_len += (size_t)flint_detok_push(&d, runs[i], big + got_len, sizeof big - got_len, &err);
    flint_detok copy = d; /* the copy carries on, the original is dropped unused */
    for (int i = 300; i < 601; i++)
        got_len += (size_t)flint_detok_push(&copy, runs[i], big + got_len, sizeof big - got_len, &err);
    got_len += (size_t)flint_detok_flush(&copy, big + got_len, sizeof big - got_len, &err);
    CHECK(got_len == want_len && !memcmp(big, want, want_len));
    free(want);
    flint_detok_init(&d, t, 0);
    for (int i = 0; i < 300; i++) flint_detok_push(&d, runs[i], out, sizeof out, &err);
    flint_detok_free(&d);
    flint_tokenizer_close(t);

    /* Qwen3's own directory: eos from the config, no BOS */
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/tokenizers/qwen3", FLINT_SHARED_DIR);
    t = flint_tokenizer_open_dir(dir, &err);
    CHECKF(t != NULL, "%s", err.msg);
    if (t) {
        CHECK(flint_tokenizer_bos_id(t) == -1);
        CHECK(flint_tokenizer_eos_id(t) == 151645);
        CHECK(flint_tokenizer_chat_template(t) && strstr(flint_tokenizer_chat_template(t), "<|im_start|>"));
        flint_tokenizer_close(t);
    }
}

/* ---- threads and speed ---- */

typedef struct job {
    const flint_tokenizer *tok;
    int first, bad;
    int32_t **ref;
    int *ref_n;
} job;

static void *thread_encode(void *arg) {
    job *j = arg;
    flint_err err = {0};
    for (int i = j->first; i < n_texts; i += 4) {
        int32_t *ids;
        int n;
        if (flint_tokenizer_encode(j->tok, texts[i].s, texts[i].n, 0, &ids, &n, &err) || n != j->ref_n[i] ||
            memcmp(ids, j->ref[i], sizeof *ids * (size_t)n))
            j->bad++;
        free(ids);
    }
    return NULL;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void thread_and_speed_checks(void) {
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizers/qwen3/tokenizer.json", FLINT_SHARED_DIR);
    flint_err err = {0};
    double t0 = now_s();
    flint_tokenizer *t = flint_tokenizer_open(path, &err);
    double t_load = now_s() - t0;
    CHECKF(t != NULL, "%s", err.msg);
    if (!t) return;
    int32_t **ref = calloc((size_t)n_texts, sizeof *ref);
    int *ref_n = calloc((size_t)n_texts, sizeof *ref_n);
    for (int i = 0; i < n_texts; i++) flint_tokenizer_encode(t, texts[i].s, texts[i].n, 0, &ref[i], &ref_n[i], &err);
    pthread_t th[4];
    job jobs[4];
    for (int k = 0; k < 4; k++) {
        jobs[k] = (job){t, k, 0, ref, ref_n};
        pthread_create(&th[k], NULL, thread_encode, &jobs[k]);
    }
    int bad = 0;
    for (int k = 0; k < 4; k++) pthread_join(th[k], NULL), bad += jobs[k].bad;
    CHECKF(bad == 0, "%d texts encode differently on 4 threads", bad);

    /* ~4 MB of real text in one call */
    size_t big_n = 0;
    for (int i = 0; i < n_texts; i++) big_n += texts[i].n + 1;
    int reps = (int)(4e6 / (double)big_n) + 1;
    char *big = malloc(big_n * (size_t)reps + 1), *p = big;
    for (int r = 0; r < reps; r++)
        for (int i = 0; i < n_texts; i++) {
            if (memchr(texts[i].s, 0, texts[i].n)) continue;
            memcpy(p, texts[i].s, texts[i].n);
            p += texts[i].n;
            *p++ = '\n';
        }
    int32_t *ids;
    int n;
    t0 = now_s();
    int rc = flint_tokenizer_encode(t, big, (size_t)(p - big), 0, &ids, &n, &err);
    double dt = now_s() - t0;
    CHECKF(rc == 0, "%s", err.msg);
    printf("speed: qwen3 loads in %.2f s; encodes %.1f MB in %.2f s (%.1f MB/s, %d tokens)\n", t_load,
           (double)(p - big) / 1e6, dt, (double)(p - big) / 1e6 / dt, n);
    CHECKF(dt < 30, "encoding %.1f MB took %.1f s", (double)(p - big) / 1e6, dt);
    if (rc == 0) free(ids);
    free(big);
    for (int i = 0; i < n_texts; i++) free(ref[i]);
    free(ref);
    free(ref_n);
    flint_tokenizer_close(t);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/flint_test_tokenizer.%d", (int)getpid());
    if (mkdir(tmpdir, 0700)) {
        perror(tmpdir);
        return 1;
    }
    if (each_line(FIXDIR "/texts.jsonl", add_text, NULL) < 0) return 1;
    size_t len;
    char *man = read_all(FIXDIR "/manifest.json", &len);
    cJSON *m = man ? cJSON_Parse(man) : NULL;
    free(man);
    CHECK(m != NULL);
    if (m) {
        CHECKF(cJSON_GetObjectItem(m, "real_texts")->valueint >= 2000, "fewer than 2,000 real texts");
        for (const cJSON *e = cJSON_GetObjectItem(m, "tokenizers")->child; e; e = e->next) check_tokenizer(e);
        cJSON_Delete(m);
    }
    unit_checks();
    open_dir_checks();
    thread_and_speed_checks();
    for (int i = 0; i < n_texts; i++) free(texts[i].s);
    free(texts);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", tmpdir);
    return test_report("test_tokenizer");
}
