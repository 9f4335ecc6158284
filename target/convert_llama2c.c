/* llama2.c checkpoint + tokenizer.bin -> Hugging Face LlamaForCausalLM directory (see convert.h).
 *
 * Why it exists: stories260K (shared/models) is a real pretrained Llama-2 model, but it ships in
 * llama2.c's own format. Converting it once into the form every other model arrives in lets the
 * target loader, the tokenizer and the golden tests (transformers on the same directory) see one
 * format only, instead of growing a second loader for a fixture.
 *
 * The two places where a naive byte copy would be silently wrong:
 * - RoPE. llama2.c rotates interleaved pairs (2i, 2i+1) of each head; HF Llama rotates (i, i+hs/2).
 *   The model still works after moving rows of wq and wk so that old row 2i+j of a head becomes
 *   new row j*hs/2 + i (q.k dot products are unchanged because q and k move together).
 * - Tokens. llama2.c's tokenizer export replaced SentencePiece's U+2581 by ' ' and rendered BOS/EOS
 *   as "\n<s>\n" and "\n</s>\n"; both are undone here. The .bin keeps scores but not merges, so
 *   merges are rebuilt from the scores as transformers' SentencePieceExtractor does. */
#include "convert.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../core/json.h"
#include "../core/log.h"
#include "../core/safetensors.h"

#define L2C_MAGIC 0x616b3432u /* "ak42", the version-1/2 export header */
#define L2C_V1_HEADER 256
#define SP_SPACE "\xe2\x96\x81" /* U+2581, SentencePiece's whitespace mark */

/* ==== checkpoint ==== */

typedef struct l2c_model {
    int dim, hidden, n_layers, n_heads, n_kv_heads, vocab, seq_len;
    int shared;   /* classifier shares the token embedding */
    int version;  /* 0 legacy, 1 "ak42" fp32 */
    void *map;
    size_t size;
    /* row-major PyTorch Linear layouts [out, in]; pointers into the map */
    const float *tok, *rms_att, *wq, *wk, *wv, *wo, *rms_ffn, *w1, *w2, *w3, *rms_final, *wcls;
} l2c_model;

static int read_i32(const unsigned char *p) {
    int32_t v;
    memcpy(&v, p, 4); /* the format is little-endian, like every host flint targets */
    return v;
}

static int check_dims(const char *path, l2c_model *m, flint_err *err) {
    int v[7] = {m->dim, m->hidden, m->n_layers, m->n_heads, m->n_kv_heads, m->vocab, m->seq_len};
    static const char *names[7] = {"dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "seq_len"};
    for (int i = 0; i < 7; i++)
        if (v[i] <= 0 || v[i] > (1 << 24))
            return flint_err_set(err, FLINT_ERR_FORMAT,
                                 "%s: header field %s = %d is out of range (not a llama2.c checkpoint?)", path,
                                 names[i], v[i]);
    if (m->dim % m->n_heads || m->n_heads % m->n_kv_heads || (m->dim / m->n_heads) % 2)
        return flint_err_set(err, FLINT_ERR_FORMAT,
                             "%s: dim %d, n_heads %d, n_kv_heads %d do not give an even head size shared by "
                             "whole KV groups",
                             path, m->dim, m->n_heads, m->n_kv_heads);
    return 0;
}

/* Map the checkpoint, check its size against the header and point the arrays into it. */
static int l2c_open(const char *path, l2c_model *m, flint_err *err) {
    memset(m, 0, sizeof *m);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return flint_err_set(err, FLINT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return flint_err_set(err, FLINT_ERR_IO, "%s: not a regular file", path);
    }
    if (sb.st_size < 28) {
        close(fd);
        return flint_err_set(err, FLINT_ERR_FORMAT,
                             "%s: file is %lld bytes, too short for a llama2.c checkpoint header (28 bytes)", path,
                             (long long)sb.st_size);
    }
    m->size = (size_t)sb.st_size;
    m->map = mmap(NULL, m->size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (m->map == MAP_FAILED) {
        m->map = NULL;
        return flint_err_set(err, FLINT_ERR_IO, "%s: mmap failed: %s", path, strerror(errno));
    }
    const unsigned char *p = m->map;
    size_t hdr;
    if ((uint32_t)read_i32(p) == L2C_MAGIC) {
        int ver = read_i32(p + 4);
        if (ver != 1)
            return flint_err_set(err, FLINT_ERR_UNSUPPORTED,
                                 "%s: llama2.c export version %d is not supported (only the fp32 exports: legacy "
                                 "version 0 and version 1)",
                                 path, ver);
        if (m->size < L2C_V1_HEADER)
            return flint_err_set(err, FLINT_ERR_FORMAT, "%s: truncated version-1 header (%zu bytes)", path, m->size);
        m->version = 1;
        p += 8;
        m->shared = p[28] != 0;
        hdr = L2C_V1_HEADER;
    } else {
        hdr = 28;
    }
    m->dim = read_i32(p), m->hidden = read_i32(p + 4), m->n_layers = read_i32(p + 8);
    m->n_heads = read_i32(p + 12), m->n_kv_heads = read_i32(p + 16), m->vocab = read_i32(p + 20);
    m->seq_len = read_i32(p + 24);
    if (m->version == 0) {
        /* legacy: a negative vocab_size marks an unshared classifier */
        m->shared = m->vocab > 0;
        if (m->vocab < 0 && m->vocab != INT32_MIN) m->vocab = -m->vocab;
    }
    if (check_dims(path, m, err) != 0) return -1;

    uint64_t D = (uint64_t)m->dim, H = (uint64_t)m->hidden, L = (uint64_t)m->n_layers, V = (uint64_t)m->vocab;
    uint64_t hs = D / (uint64_t)m->n_heads, kv = hs * (uint64_t)m->n_kv_heads;
    uint64_t n = V * D + L * D * 2 + D + L * (D * D * 2 + kv * D * 2) + L * H * D * 3;
    if (m->version == 0) n += (uint64_t)m->seq_len * hs; /* freq_cis_real + imag, [seq_len, hs/2] each */
    if (!m->shared) n += V * D;
    uint64_t want = hdr + 4 * n;
    if (want != m->size) {
        char cfg[160];
        snprintf(cfg, sizeof cfg, "dim %d, hidden %d, %d layers, %d/%d heads, vocab %d%s, seq_len %d", m->dim,
                 m->hidden, m->n_layers, m->n_heads, m->n_kv_heads, m->vocab, m->shared ? "" : " unshared",
                 m->seq_len);
        if (m->size < want)
            return flint_err_set(err, FLINT_ERR_FORMAT,
                                 "%s: truncated: the header (%s) needs %llu bytes, the file has %zu", path, cfg,
                                 (unsigned long long)want, m->size);
        return flint_err_set(err, FLINT_ERR_FORMAT,
                             "%s: %zu bytes, but the header (%s) describes %llu (not a version-%d fp32 llama2.c "
                             "checkpoint?)",
                             path, m->size, cfg, (unsigned long long)want, m->version);
    }
    const float *f = (const float *)((const char *)m->map + hdr);
#define TAKE(ptr, count) (ptr = f, f += (count))
    if (m->version == 0) {
        TAKE(m->tok, V * D);
        TAKE(m->rms_att, L * D);
        TAKE(m->wq, L * D * D);
        TAKE(m->wk, L * kv * D);
        TAKE(m->wv, L * kv * D);
        TAKE(m->wo, L * D * D);
        TAKE(m->rms_ffn, L * D);
        TAKE(m->w1, L * H * D);
        TAKE(m->w2, L * D * H);
        TAKE(m->w3, L * H * D);
        TAKE(m->rms_final, D);
        f += (uint64_t)m->seq_len * hs;
    } else {
        TAKE(m->rms_att, L * D);
        TAKE(m->rms_ffn, L * D);
        TAKE(m->rms_final, D);
        TAKE(m->tok, V * D);
        TAKE(m->wq, L * D * D);
        TAKE(m->wk, L * kv * D);
        TAKE(m->wv, L * kv * D);
        TAKE(m->wo, L * D * D);
        TAKE(m->w1, L * H * D);
        TAKE(m->w2, L * D * H);
        TAKE(m->w3, L * H * D);
    }
#undef TAKE
    m->wcls = m->shared ? m->tok : f;
    return 0;
}

static void l2c_close(l2c_model *m) {
    if (m->map) munmap(m->map, m->size);
    m->map = NULL;
}

/* ==== tokenizer.bin ==== */

typedef struct tok_vocab {
    int n;
    char **piece; /* HF form: U+2581 for spaces, "<s>"/"</s>" for BOS/EOS */
    float *score;
    unsigned char *kind; /* TK_* */
    char *file;          /* raw bytes of tokenizer.bin */
} tok_vocab;

enum { TK_NORMAL = 0, TK_SPECIAL, TK_BYTE };

static void vocab_free(tok_vocab *v) {
    for (int i = 0; v->piece && i < v->n; i++) free(v->piece[i]);
    free(v->piece);
    free(v->score);
    free(v->kind);
    free(v->file);
    memset(v, 0, sizeof *v);
}

static int utf8_valid(const unsigned char *s, size_t n) {
    static const uint32_t min_cp[4] = {0, 0x80, 0x800, 0x10000};
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        size_t k;
        uint32_t cp;
        if (c < 0x80) {
            i++;
            continue;
        }
        if ((c & 0xe0) == 0xc0) k = 1, cp = c & 0x1f;
        else if ((c & 0xf0) == 0xe0) k = 2, cp = c & 0x0f;
        else if ((c & 0xf8) == 0xf0) k = 3, cp = c & 0x07;
        else return 0;
        for (size_t j = 1; j <= k; j++) {
            if (i + j >= n || (s[i + j] & 0xc0) != 0x80) return 0;
            cp = (cp << 6) | (s[i + j] & 0x3f);
        }
        if (cp < min_cp[k] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0; /* overlong, surrogate */
        i += k + 1;
    }
    return 1;
}

static int is_byte_piece(const char *s) {
    static const char hex[] = "0123456789ABCDEF";
    return strlen(s) == 6 && memcmp(s, "<0x", 3) == 0 && s[5] == '>' && strchr(hex, s[3]) && strchr(hex, s[4]);
}

/* llama2.c's export turned U+2581 into ' '; turn every ' ' back. */
static char *piece_from_bin(const unsigned char *b, int len) {
    int spaces = 0;
    for (int i = 0; i < len; i++) spaces += b[i] == ' ';
    char *s = malloc((size_t)len + 2 * (size_t)spaces + 1), *o = s;
    if (!s) return NULL;
    for (int i = 0; i < len; i++) {
        if (b[i] == ' ') memcpy(o, SP_SPACE, 3), o += 3;
        else *o++ = (char)b[i];
    }
    *o = 0;
    return s;
}

static int vocab_read(const char *path, int want, tok_vocab *v, flint_err *err) {
    memset(v, 0, sizeof *v);
    size_t len = 0;
    v->file = flint_file_read(path, (size_t)1 << 30, &len, err);
    if (!v->file) return -1;
    const unsigned char *p = (const unsigned char *)v->file, *end = p + len;
    if (len < 4) return flint_err_set(err, FLINT_ERR_FORMAT, "%s: %zu bytes, too short for a llama2.c tokenizer", path, len);
    int max_len = read_i32(p);
    p += 4;
    if (max_len <= 0 || max_len > (1 << 20))
        return flint_err_set(err, FLINT_ERR_FORMAT, "%s: max_token_length %d is out of range (not a llama2.c tokenizer?)",
                             path, max_len);
    v->piece = calloc((size_t)want, sizeof *v->piece);
    v->score = calloc((size_t)want, sizeof *v->score);
    v->kind = calloc((size_t)want, 1);
    if (!v->piece || !v->score || !v->kind) return flint_err_set(err, FLINT_ERR_NOMEM, "%s: out of memory", path);
    for (int i = 0; i < want; i++) {
        if (p == end)
            return flint_err_set(err, FLINT_ERR_FORMAT,
                                 "%s: ends after %d tokens, but the model's vocab_size is %d (wrong tokenizer for this "
                                 "model?)",
                                 path, i, want);
        if (end - p < 8) return flint_err_set(err, FLINT_ERR_FORMAT, "%s: truncated in token %d", path, i);
        float score;
        memcpy(&score, p, 4);
        int n = read_i32(p + 4);
        p += 8;
        if (n <= 0 || n > max_len)
            return flint_err_set(err, FLINT_ERR_FORMAT, "%s: token %d has length %d (max_token_length is %d)", path, i, n,
                                 max_len);
        if (end - p < n) return flint_err_set(err, FLINT_ERR_FORMAT, "%s: truncated in token %d", path, i);
        if (!isfinite(score)) return flint_err_set(err, FLINT_ERR_FORMAT, "%s: token %d has a non-finite score", path, i);
        if (!utf8_valid(p, (size_t)n))
            return flint_err_set(err, FLINT_ERR_FORMAT, "%s: token %d is not valid UTF-8", path, i);
        if (n == 5 && memcmp(p, "\n<s>\n", 5) == 0) v->piece[i] = strdup("<s>");
        else if (n == 6 && memcmp(p, "\n</s>\n", 6) == 0) v->piece[i] = strdup("</s>");
        else v->piece[i] = piece_from_bin(p, n);
        if (!v->piece[i]) return flint_err_set(err, FLINT_ERR_NOMEM, "%s: out of memory", path);
        v->score[i] = score;
        p += n;
        v->n = i + 1;
    }
    if (p != end)
        return flint_err_set(err, FLINT_ERR_FORMAT,
                             "%s: holds more than the model's %d tokens (%zu bytes left; wrong tokenizer for this "
                             "model?)",
                             path, want, (size_t)(end - p));
    /* The config and tokenizer files below hard-wire the Llama-2 SentencePiece layout. */
    static const char *spec[3] = {"<unk>", "<s>", "</s>"};
    for (int i = 0; i < 3; i++) {
        if (want <= i || strcmp(v->piece[i], spec[i]) != 0)
            return flint_err_set(err, FLINT_ERR_UNSUPPORTED,
                                 "%s: token %d is '%s', expected '%s' (only Llama-2 style tokenizers with <unk>, <s>, "
                                 "</s> at ids 0-2 are supported)",
                                 path, i, want > i ? v->piece[i] : "", spec[i]);
        v->kind[i] = TK_SPECIAL;
    }
    for (int i = 3; i < want; i++) v->kind[i] = is_byte_piece(v->piece[i]) ? TK_BYTE : TK_NORMAL;
    return 0;
}

/* Open-addressing map from piece bytes to id. */
typedef struct piece_map {
    int *slot; /* id + 1, 0 = empty */
    size_t mask;
} piece_map;

static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

static int map_find(const piece_map *m, const tok_vocab *v, const char *s, size_t n) {
    for (size_t i = hash_bytes(s, n) & m->mask;; i = (i + 1) & m->mask) {
        int id = m->slot[i] - 1;
        if (id < 0) return -1;
        if (strlen(v->piece[id]) == n && memcmp(v->piece[id], s, n) == 0) return id;
    }
}

/* Builds the map; returns the id of a duplicated piece, -1 if none, -2 when out of memory. */
static int map_build(piece_map *m, const tok_vocab *v) {
    size_t cap = 16;
    while (cap < 2 * (size_t)v->n) cap *= 2;
    m->slot = calloc(cap, sizeof *m->slot);
    m->mask = cap - 1;
    if (!m->slot) return -2;
    for (int id = 0; id < v->n; id++) {
        size_t n = strlen(v->piece[id]);
        if (map_find(m, v, v->piece[id], n) >= 0) return id;
        size_t i = hash_bytes(v->piece[id], n) & m->mask;
        while (m->slot[i]) i = (i + 1) & m->mask;
        m->slot[i] = id + 1;
    }
    return -1;
}

typedef struct merge {
    float score; /* of the merged piece */
    int merged, left, right;
} merge;

/* transformers' SentencePieceExtractor.extract(vocab_scores) (4.x): visit pieces in id order, for
 * each list the splits (at character boundaries) whose halves are both pieces, sorted by (left id,
 * right id); then a stable sort by the merged piece's score, descending. SentencePiece BPE merges
 * the pair whose result scores highest, so this rank order reproduces its priorities. */
static int cmp_merge(const void *a, const void *b) {
    const merge *x = a, *y = b;
    if (x->score != y->score) return x->score > y->score ? -1 : 1;
    if (x->merged != y->merged) return x->merged < y->merged ? -1 : 1;
    if (x->left != y->left) return x->left < y->left ? -1 : 1;
    return (x->right > y->right) - (x->right < y->right);
}

static int build_merges(const tok_vocab *v, const piece_map *pm, merge **out, int *n_out) {
    int n = 0, cap = 0;
    merge *ms = NULL;
    for (int id = 0; id < v->n; id++) {
        if (v->kind[id] != TK_NORMAL) continue;
        const char *s = v->piece[id];
        size_t len = strlen(s);
        for (size_t cut = 1; cut < len; cut++) {
            if (((unsigned char)s[cut] & 0xc0) == 0x80) continue; /* inside a character */
            int l = map_find(pm, v, s, cut), r = map_find(pm, v, s + cut, len - cut);
            if (l < 0 || r < 0 || v->kind[l] != TK_NORMAL || v->kind[r] != TK_NORMAL) continue;
            if (n == cap) {
                cap = cap ? 2 * cap : 1024;
                merge *nm = realloc(ms, (size_t)cap * sizeof *nm);
                if (!nm) {
                    free(ms);
                    return -1;
                }
                ms = nm;
            }
            ms[n++] = (merge){v->score[id], id, l, r};
        }
    }
    if (n > 1) qsort(ms, (size_t)n, sizeof *ms, cmp_merge);
    *out = ms;
    *n_out = n;
    return 0;
}

/* ==== output files ==== */

static int write_text(const char *dir, const char *name, const char *text, flint_err *err) {
    char path[4096], tmp[4200];
    if (flint_path_join(path, sizeof path, dir, name) != 0)
        return flint_err_set(err, FLINT_ERR_INVALID, "%s: path too long", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f) return flint_err_set(err, FLINT_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
    size_t n = strlen(text);
    int bad = fwrite(text, 1, n, f) != n || fputc('\n', f) == EOF;
    if (fclose(f) != 0) bad = 1;
    if (bad || rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return flint_err_set(err, FLINT_ERR_IO, "%s: write failed: %s", path, strerror(e));
    }
    return 0;
}

static int write_json(const char *dir, const char *name, cJSON *j, flint_err *err) {
    char *text = j ? cJSON_Print(j) : NULL;
    if (!text) return flint_err_set(err, FLINT_ERR_NOMEM, "%s/%s: out of memory", dir, name);
    int rc = write_text(dir, name, text, err);
    cJSON_free(text);
    return rc;
}

static int make_dirs(const char *dir, flint_err *err) {
    char p[4096];
    if (snprintf(p, sizeof p, "%s", dir) >= (int)sizeof p)
        return flint_err_set(err, FLINT_ERR_INVALID, "%s: path too long", dir);
    for (char *s = p + 1;; s++) {
        char c = *s;
        if (c != '/' && c != 0) continue;
        *s = 0;
        if (mkdir(p, 0755) != 0 && errno != EEXIST)
            return flint_err_set(err, FLINT_ERR_IO, "%s: cannot create directory: %s", p, strerror(errno));
        *s = c;
        if (!c) break;
    }
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return flint_err_set(err, FLINT_ERR_IO, "%s: exists and is not a directory", dir);
    return 0;
}

static cJSON *make_config(const l2c_model *m) {
    cJSON *c = cJSON_CreateObject(), *arch = cJSON_AddArrayToObject(c, "architectures");
    cJSON_AddItemToArray(arch, cJSON_CreateString("LlamaForCausalLM"));
    cJSON_AddStringToObject(c, "model_type", "llama");
    cJSON_AddNumberToObject(c, "hidden_size", m->dim);
    cJSON_AddNumberToObject(c, "intermediate_size", m->hidden);
    cJSON_AddNumberToObject(c, "num_hidden_layers", m->n_layers);
    cJSON_AddNumberToObject(c, "num_attention_heads", m->n_heads);
    cJSON_AddNumberToObject(c, "num_key_value_heads", m->n_kv_heads);
    cJSON_AddNumberToObject(c, "head_dim", m->dim / m->n_heads);
    cJSON_AddNumberToObject(c, "vocab_size", m->vocab);
    cJSON_AddNumberToObject(c, "max_position_embeddings", m->seq_len);
    cJSON_AddNumberToObject(c, "rms_norm_eps", 1e-5); /* llama2.c's ModelArgs.norm_eps and run.c */
    cJSON_AddNumberToObject(c, "rope_theta", 10000.0); /* hard-wired in llama2.c */
    cJSON_AddNullToObject(c, "rope_scaling");
    cJSON_AddStringToObject(c, "hidden_act", "silu");
    cJSON_AddBoolToObject(c, "attention_bias", 0);
    cJSON_AddBoolToObject(c, "mlp_bias", 0);
    cJSON_AddBoolToObject(c, "tie_word_embeddings", m->shared);
    cJSON_AddNumberToObject(c, "bos_token_id", 1);
    cJSON_AddNumberToObject(c, "eos_token_id", 2);
    cJSON_AddNumberToObject(c, "initializer_range", 0.02);
    cJSON_AddNumberToObject(c, "pretraining_tp", 1);
    cJSON_AddBoolToObject(c, "use_cache", 1);
    cJSON_AddStringToObject(c, "torch_dtype", "float32");
    return c;
}

static cJSON *added_token(int id, const char *content) {
    cJSON *t = cJSON_CreateObject();
    cJSON_AddNumberToObject(t, "id", id);
    cJSON_AddStringToObject(t, "content", content);
    cJSON_AddBoolToObject(t, "single_word", 0);
    cJSON_AddBoolToObject(t, "lstrip", 0);
    cJSON_AddBoolToObject(t, "rstrip", 0);
    cJSON_AddBoolToObject(t, "normalized", 0);
    cJSON_AddBoolToObject(t, "special", 1);
    return t;
}

static cJSON *typed(const char *type) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", type);
    return o;
}

static cJSON *replace_op(const char *from, const char *to) {
    cJSON *r = typed("Replace"), *pat = cJSON_AddObjectToObject(r, "pattern");
    cJSON_AddStringToObject(pat, "String", from);
    cJSON_AddStringToObject(r, "content", to);
    return r;
}

static cJSON *template_piece(int special, const char *id, int type_id) {
    cJSON *o = cJSON_CreateObject(), *in = cJSON_AddObjectToObject(o, special ? "SpecialToken" : "Sequence");
    cJSON_AddStringToObject(in, "id", id);
    cJSON_AddNumberToObject(in, "type_id", type_id);
    return o;
}

/* The legacy Llama-2 tokenizer.json (as meta-llama/Llama-2-7b-hf ships it): the normalizer adds the
 * dummy prefix and turns spaces into U+2581, no pre-tokenizer, byte-fallback BPE, BOS added by the
 * post-processor. */
static cJSON *make_tokenizer(const tok_vocab *v, const merge *ms, int n_merges) {
    cJSON *t = cJSON_CreateObject();
    cJSON_AddStringToObject(t, "version", "1.0");
    cJSON_AddNullToObject(t, "truncation");
    cJSON_AddNullToObject(t, "padding");
    cJSON *added = cJSON_AddArrayToObject(t, "added_tokens");
    for (int i = 0; i < 3; i++) cJSON_AddItemToArray(added, added_token(i, v->piece[i]));

    cJSON *norm = typed("Sequence"), *nl = cJSON_AddArrayToObject(norm, "normalizers");
    cJSON *prep = typed("Prepend");
    cJSON_AddStringToObject(prep, "prepend", SP_SPACE);
    cJSON_AddItemToArray(nl, prep);
    cJSON_AddItemToArray(nl, replace_op(" ", SP_SPACE));
    cJSON_AddItemToObject(t, "normalizer", norm);
    cJSON_AddNullToObject(t, "pre_tokenizer");

    cJSON *post = typed("TemplateProcessing");
    cJSON *single = cJSON_AddArrayToObject(post, "single"), *pair = cJSON_AddArrayToObject(post, "pair");
    cJSON_AddItemToArray(single, template_piece(1, "<s>", 0));
    cJSON_AddItemToArray(single, template_piece(0, "A", 0));
    cJSON_AddItemToArray(pair, template_piece(1, "<s>", 0));
    cJSON_AddItemToArray(pair, template_piece(0, "A", 0));
    cJSON_AddItemToArray(pair, template_piece(1, "<s>", 1));
    cJSON_AddItemToArray(pair, template_piece(0, "B", 1));
    cJSON *st = cJSON_AddObjectToObject(post, "special_tokens"), *bos = cJSON_AddObjectToObject(st, "<s>");
    cJSON_AddStringToObject(bos, "id", "<s>");
    cJSON_AddItemToArray(cJSON_AddArrayToObject(bos, "ids"), cJSON_CreateNumber(1));
    cJSON_AddItemToArray(cJSON_AddArrayToObject(bos, "tokens"), cJSON_CreateString("<s>"));
    cJSON_AddItemToObject(t, "post_processor", post);

    cJSON *dec = typed("Sequence"), *dl = cJSON_AddArrayToObject(dec, "decoders");
    cJSON_AddItemToArray(dl, replace_op(SP_SPACE, " "));
    cJSON_AddItemToArray(dl, typed("ByteFallback"));
    cJSON_AddItemToArray(dl, typed("Fuse"));
    cJSON *strip = typed("Strip");
    cJSON_AddStringToObject(strip, "content", " ");
    cJSON_AddNumberToObject(strip, "start", 1);
    cJSON_AddNumberToObject(strip, "stop", 0);
    cJSON_AddItemToArray(dl, strip);
    cJSON_AddItemToObject(t, "decoder", dec);

    cJSON *model = typed("BPE");
    cJSON_AddNullToObject(model, "dropout");
    cJSON_AddStringToObject(model, "unk_token", "<unk>");
    cJSON_AddNullToObject(model, "continuing_subword_prefix");
    cJSON_AddNullToObject(model, "end_of_word_suffix");
    cJSON_AddBoolToObject(model, "fuse_unk", 1);
    cJSON_AddBoolToObject(model, "byte_fallback", 1);
    cJSON_AddBoolToObject(model, "ignore_merges", 0);
    cJSON *vocab = cJSON_AddObjectToObject(model, "vocab");
    for (int i = 0; i < v->n; i++) cJSON_AddNumberToObject(vocab, v->piece[i], i);
    cJSON *merges = cJSON_AddArrayToObject(model, "merges");
    for (int i = 0; i < n_merges; i++) {
        /* "left right": pieces never hold an ASCII space (they use U+2581) */
        const char *l = v->piece[ms[i].left], *r = v->piece[ms[i].right];
        size_t n = strlen(l) + strlen(r) + 2;
        char *s = malloc(n);
        if (!s) {
            cJSON_Delete(t);
            return NULL;
        }
        snprintf(s, n, "%s %s", l, r);
        cJSON_AddItemToArray(merges, cJSON_CreateString(s));
        free(s);
    }
    cJSON_AddItemToObject(t, "model", model);
    return t;
}

/* meta-llama/Llama-2-7b-chat-hf's template. */
static const char llama2_chat_template[] =
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
    "{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}"
    "{% set system_message = false %}{% endif %}{% for message in loop_messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if loop.index0 == 0 and system_message != false %}"
    "{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}"
    "{% else %}{% set content = message['content'] %}{% endif %}"
    "{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}"
    "{% endfor %}";

static cJSON *make_tokenizer_config(const l2c_model *m, const tok_vocab *v) {
    cJSON *c = cJSON_CreateObject();
    cJSON_AddBoolToObject(c, "add_bos_token", 1);
    cJSON_AddBoolToObject(c, "add_eos_token", 0);
    cJSON *dec = cJSON_AddObjectToObject(c, "added_tokens_decoder");
    for (int i = 0; i < 3; i++) {
        char key[16];
        snprintf(key, sizeof key, "%d", i);
        cJSON *t = added_token(i, v->piece[i]);
        cJSON_DeleteItemFromObjectCaseSensitive(t, "id");
        cJSON_AddItemToObject(dec, key, t);
    }
    cJSON_AddStringToObject(c, "bos_token", "<s>");
    cJSON_AddStringToObject(c, "eos_token", "</s>");
    cJSON_AddStringToObject(c, "unk_token", "<unk>");
    cJSON_AddNullToObject(c, "pad_token");
    cJSON_AddBoolToObject(c, "clean_up_tokenization_spaces", 0);
    cJSON_AddBoolToObject(c, "legacy", 1); /* tokenizer.json is the legacy (Prepend normalizer) form */
    cJSON_AddNumberToObject(c, "model_max_length", m->seq_len);
    cJSON_AddStringToObject(c, "tokenizer_class", "LlamaTokenizerFast");
    cJSON_AddStringToObject(c, "chat_template", llama2_chat_template);
    return c;
}

/* ==== weights ==== */

/* HF's permute(w, n_heads): w.view(n_heads, hs/2, 2, in).transpose(1, 2).reshape(n_heads*hs, in),
 * i.e. within each head new row j*hs/2 + i takes old row 2i + j. */
static void permute_rope_rows(float *dst, const float *src, int n_heads, int hs, int in) {
    int half = hs / 2;
    for (int h = 0; h < n_heads; h++)
        for (int i = 0; i < half; i++)
            for (int j = 0; j < 2; j++)
                memcpy(dst + ((size_t)h * hs + (size_t)j * half + i) * in, src + ((size_t)h * hs + 2 * (size_t)i + j) * in,
                       (size_t)in * sizeof *dst);
}

static int write_weights(const char *out_dir, const char *weights_path, const l2c_model *m, flint_err *err) {
    int D = m->dim, H = m->hidden, L = m->n_layers, hs = D / m->n_heads, kv = hs * m->n_kv_heads;
    int n_max = 3 + 9 * L;
    flint_st_entry *e = calloc((size_t)n_max, sizeof *e);
    char(*names)[96] = calloc((size_t)n_max, sizeof *names);
    float *q = malloc((size_t)L * D * D * sizeof *q), *k = malloc((size_t)L * kv * D * sizeof *k);
    int rc = -1, n = 0;
    if (!e || !names || !q || !k) {
        flint_err_set(err, FLINT_ERR_NOMEM, "%s: out of memory for the permuted attention weights", weights_path);
        goto out;
    }
#define ADD(nm, p, d0, d1)                                                        \
    do {                                                                          \
        e[n] = (flint_st_entry){names[n], FLINT_DT_F32, (d1) ? 2 : 1, {(d0), (d1)}, (p)}; \
        n++;                                                                      \
    } while (0)
    snprintf(names[n], 96, "model.embed_tokens.weight");
    ADD(names[n], m->tok, m->vocab, D);
    for (int l = 0; l < L; l++) {
        float *ql = q + (size_t)l * D * D, *kl = k + (size_t)l * kv * D;
        permute_rope_rows(ql, m->wq + (size_t)l * D * D, m->n_heads, hs, D);
        permute_rope_rows(kl, m->wk + (size_t)l * kv * D, m->n_kv_heads, hs, D);
        static const char *suffix[9] = {"input_layernorm",     "self_attn.q_proj",  "self_attn.k_proj",
                                        "self_attn.v_proj",    "self_attn.o_proj",  "post_attention_layernorm",
                                        "mlp.gate_proj",       "mlp.up_proj",       "mlp.down_proj"};
        for (int s = 0; s < 9; s++) snprintf(names[n + s], 96, "model.layers.%d.%s.weight", l, suffix[s]);
        ADD(names[n], m->rms_att + (size_t)l * D, D, 0);
        ADD(names[n], ql, D, D);
        ADD(names[n], kl, kv, D);
        ADD(names[n], m->wv + (size_t)l * kv * D, kv, D);
        ADD(names[n], m->wo + (size_t)l * D * D, D, D);
        ADD(names[n], m->rms_ffn + (size_t)l * D, D, 0);
        ADD(names[n], m->w1 + (size_t)l * H * D, H, D); /* w1 = gate */
        ADD(names[n], m->w3 + (size_t)l * H * D, H, D); /* w3 = up */
        ADD(names[n], m->w2 + (size_t)l * D * H, D, H); /* w2 = down */
    }
    snprintf(names[n], 96, "model.norm.weight");
    ADD(names[n], m->rms_final, D, 0);
    if (!m->shared) {
        snprintf(names[n], 96, "lm_head.weight");
        ADD(names[n], m->wcls, m->vocab, D);
    }
#undef ADD
    /* A checkpoint of another format or precision that happens to have the right size shows up
     * here as NaN/Inf bit patterns. */
    for (int i = 0; i < n; i++) {
        size_t cnt = (size_t)e[i].shape[0] * (size_t)(e[i].ndim == 2 ? e[i].shape[1] : 1);
        const float *p = e[i].data;
        for (size_t j = 0; j < cnt; j++)
            if (!isfinite(p[j])) {
                flint_err_set(err, FLINT_ERR_FORMAT,
                              "%s: tensor '%s' holds a non-finite value at element %zu (not an fp32 llama2.c "
                              "checkpoint?)",
                              weights_path, e[i].name, j);
                goto out;
            }
    }
    char path[4096];
    if (flint_path_join(path, sizeof path, out_dir, "model.safetensors") != 0) {
        flint_err_set(err, FLINT_ERR_INVALID, "%s: path too long", out_dir);
        goto out;
    }
    const char *meta[] = {"format", "pt"};
    rc = flint_st_write(path, e, n, meta, 1, err);
out:
    free(e);
    free(names);
    free(q);
    free(k);
    return rc;
}

int flint_convert_llama2c(const char *weights_path, const char *tokenizer_path, const char *out_dir, flint_err *err) {
    l2c_model m;
    tok_vocab v;
    piece_map pm = {0};
    merge *ms = NULL;
    int n_merges = 0, rc = -1;
    cJSON *j = NULL;
    memset(&v, 0, sizeof v);
    if (l2c_open(weights_path, &m, err) != 0) goto out;
    if (vocab_read(tokenizer_path, m.vocab, &v, err) != 0) goto out;
    int dup = map_build(&pm, &v);
    if (dup == -2) {
        flint_err_set(err, FLINT_ERR_NOMEM, "%s: out of memory", tokenizer_path);
        goto out;
    }
    if (dup >= 0) {
        flint_err_set(err, FLINT_ERR_FORMAT, "%s: token %d '%s' appears twice in the vocabulary", tokenizer_path, dup,
                      v.piece[dup]);
        goto out;
    }
    if (build_merges(&v, &pm, &ms, &n_merges) != 0) {
        flint_err_set(err, FLINT_ERR_NOMEM, "%s: out of memory", tokenizer_path);
        goto out;
    }
    if (make_dirs(out_dir, err) != 0) goto out;
    if (write_weights(out_dir, weights_path, &m, err) != 0) goto out;
    j = make_config(&m);
    if (write_json(out_dir, "config.json", j, err) != 0) goto out;
    cJSON_Delete(j);
    j = make_tokenizer(&v, ms, n_merges);
    if (write_json(out_dir, "tokenizer.json", j, err) != 0) goto out;
    cJSON_Delete(j);
    j = make_tokenizer_config(&m, &v);
    if (write_json(out_dir, "tokenizer_config.json", j, err) != 0) goto out;
    flint_log_info("convert: %s (llama2.c v%d: dim %d, %d layers, %d/%d heads, vocab %d, %s classifier) -> %s "
                   "(%d merges)",
                   weights_path, m.version, m.dim, m.n_layers, m.n_heads, m.n_kv_heads, m.vocab,
                   m.shared ? "shared" : "separate", out_dir, n_merges);
    rc = 0;
out:
    cJSON_Delete(j);
    free(ms);
    free(pm.slot);
    vocab_free(&v);
    l2c_close(&m);
    return rc;
}
