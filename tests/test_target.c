/* Target model tests (CPU forward).
 * - Golden: tiny Qwen3 (f32) and Llama (bf16) models made by tools/make_golden.py; flint's logits
 *   for several prompts match transformers' within 1e-4 (metric: per row, max |a - b| / max |b|,
 *   i.e. relative to the row's largest reference logit, which keeps near-zero logits from
 *   dominating), the taps match the residual stream after each layer, and a 64-step greedy
 *   continuation (prefill, then decode steps through the paged cache) matches token for token.
 *   A chunked prefill gives the same bits as the whole prompt in one forward.
 * - Batch invariance: a sequence's logits computed alone on 1 thread equal bit for bit those
 *   computed in a shuffled batch with other sequences of other lengths on 3 threads, for prefill,
 *   decode and a verify block; a verify block equals one-at-a-time decoding.
 * - Bad inputs: config and weight files that must be refused, bad options and bad batches; every
 *   message must name the problem. */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/json.h"
#include "core/safetensors.h"
#include "target/gemm_layout.h"
#include "target/ops_cpu.h"
#include "target/target.h"
#include "test.h"

#define GOLDEN FLINT_SOURCE_DIR "/tests/fixtures/golden"
#define TOL 1e-4
#define MAX_BLOCKS 512

/* ---- small helpers ---- */

typedef struct seq {
    int32_t blocks[MAX_BLOCKS];
    int n_blocks;
} seq;

/* Make sure seq s has blocks covering positions 0..last. */
static void seq_cover(seq *s, flint_kv_alloc *a, int block, int last) {
    while (s->n_blocks * block <= last) {
        int32_t b = flint_kv_alloc_take(a);
        FLINT_ASSERT(b >= 0 && s->n_blocks < MAX_BLOCKS);
        s->blocks[s->n_blocks++] = b;
    }
}

typedef struct batch {
    int n;
    int32_t tok[1024], pos[1024], rs[1024];
} batch;

static void add_row(batch *b, int tok, int pos, int seq_idx) {
    FLINT_ASSERT(b->n < 1024);
    b->tok[b->n] = tok;
    b->pos[b->n] = pos;
    b->rs[b->n] = seq_idx;
    b->n++;
}

/* Forward batch b over seqs (block tables grown as needed); logits for lrows. */
static int run(flint_target *t, flint_kv_alloc *a, const batch *b, seq *seqs, int n_seqs, int n_lrows,
               const int32_t *lrows, float *logits, int n_taps, const int32_t *tap_layers, float *taps,
               flint_err *err) {
    int bs = flint_target_kv_block_size(t);
    for (int r = 0; r < b->n; r++) seq_cover(&seqs[b->rs[r]], a, bs, b->pos[r]);
    const int32_t *tables[16];
    for (int i = 0; i < n_seqs; i++) tables[i] = seqs[i].blocks;
    flint_target_batch fb = {.n_rows = b->n, .tokens = b->tok, .pos = b->pos, .row_seq = b->rs, .n_seqs = n_seqs,
                             .block_tables = tables, .n_logit_rows = n_lrows, .logit_rows = lrows,
                             .logits = logits, .n_taps = n_taps, .tap_layers = tap_layers, .taps = taps};
    return flint_target_forward(t, &fb, err);
}

static int argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

/* max |a - b| / max |b| */
static double row_err(const float *a, const double *b, int n) {
    double num = 0, den = 0;
    for (int i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (d > num) num = d;
        if (fabs(b[i]) > den) den = fabs(b[i]);
    }
    return den > 0 ? num / den : num;
}

static int json_ints(const cJSON *arr, int32_t *out, int cap) {
    int n = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, arr) {
        FLINT_ASSERT(n < cap);
        out[n++] = (int32_t)e->valuedouble;
    }
    return n;
}

static int json_doubles(const cJSON *arr, double *out, int cap) {
    int n = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, arr) {
        FLINT_ASSERT(n < cap);
        out[n++] = e->valuedouble;
    }
    return n;
}

static flint_target *open_model(const char *name, int block, int n_threads, int max_seqs) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/%s", GOLDEN, name);
    flint_target_options o;
    flint_target_options_default(&o);
    o.kv_block_size = block;
    o.n_threads = n_threads;
    o.max_seqs = max_seqs;
    flint_err err = {0};
    flint_target *t = flint_target_open(dir, &o, &err);
    CHECKF(t != NULL, "open %s: %s", dir, err.msg);
    return t;
}

static cJSON *load_ref(const char *name) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s/reference.json", GOLDEN, name);
    flint_err err = {0};
    cJSON *j = flint_json_load_file(path, 64u << 20, &err);
    CHECKF(j != NULL, "%s", err.msg);
    return j;
}

/* ---- golden ---- */

static void test_golden(const char *name, int block) {
    cJSON *ref = load_ref(name);
    flint_target *t = open_model(name, block, 2, 4);
    if (!ref || !t) goto out;
    const flint_target_config *c = flint_target_get_config(t);
    int V = c->vocab_size, H = c->hidden_size, L = c->n_layers;
    flint_kv_alloc *a = flint_kv_alloc_new(flint_target_kv_blocks(t));
    float *logits = malloc(sizeof(float) * 128 * V);
    double *want = malloc(sizeof(double) * V);
    float *taps = malloc(sizeof(float) * 128 * L * H);
    int32_t *tap_layers = malloc(sizeof(int32_t) * L);
    for (int l = 0; l < L; l++) tap_layers[l] = l;
    double max_logit_err = 0, max_tap_err = 0;
    int greedy_ok = 0, n_cases = 0;

    const cJSON *cs;
    cJSON_ArrayForEach(cs, cJSON_GetObjectItem(ref, "cases")) {
        int32_t prompt[512], lpos[512], greedy[128];
        int n = json_ints(cJSON_GetObjectItem(cs, "prompt"), prompt, 512);
        int nl = json_ints(cJSON_GetObjectItem(cs, "logit_positions"), lpos, 512);
        int ng = json_ints(cJSON_GetObjectItem(cs, "greedy"), greedy, 128);
        const cJSON *tap_ref = cJSON_GetObjectItem(cs, "taps");
        n_cases++;

        /* prefill: the whole prompt in one forward, logits for the reference positions + last */
        seq s = {0};
        batch b = {0};
        for (int i = 0; i < n; i++) add_row(&b, prompt[i], i, 0);
        int32_t lrows[513];
        for (int i = 0; i < nl; i++) lrows[i] = lpos[i];
        lrows[nl] = n - 1;
        flint_err err = {0};
        int rc = run(t, a, &b, &s, 1, nl + 1, lrows, logits, tap_ref ? L : 0, tap_layers, taps, &err);
        CHECKF(rc == 0, "%s prefill %d: %s", name, n, err.msg);
        if (rc) continue;
        int i = 0;
        const cJSON *row;
        cJSON_ArrayForEach(row, cJSON_GetObjectItem(cs, "logits")) {
            CHECK(json_doubles(row, want, V) == V);
            double e = row_err(logits + (size_t)i * V, want, V);
            CHECKF(e < TOL, "%s prompt %d position %d: logits error %.3g", name, n, lpos[i], e);
            if (e > max_logit_err) max_logit_err = e;
            i++;
        }
        if (tap_ref) {
            int tp = (int)cJSON_GetObjectItem(cs, "tap_position")->valuedouble, l = 0;
            cJSON_ArrayForEach(row, tap_ref) {
                CHECK(json_doubles(row, want, V) == H);
                double e = row_err(taps + ((size_t)tp * L + l) * H, want, H);
                CHECKF(e < TOL, "%s prompt %d: tap after layer %d: error %.3g", name, n, l, e);
                if (e > max_tap_err) max_tap_err = e;
                l++;
            }
            CHECK(l == L);
        }

        /* greedy: first token from the prefill, then one decode step per token */
        int32_t got[128];
        got[0] = argmax(logits + (size_t)nl * V, V);
        for (int k = 1; k < ng; k++) {
            batch d = {0};
            add_row(&d, got[k - 1], n + k - 1, 0);
            int32_t lr = 0;
            rc = run(t, a, &d, &s, 1, 1, &lr, logits, 0, NULL, NULL, &err);
            CHECKF(rc == 0, "%s decode: %s", name, err.msg);
            if (rc) break;
            got[k] = argmax(logits, V);
        }
        int same = memcmp(got, greedy, sizeof(int32_t) * ng) == 0;
        CHECKF(same, "%s prompt %d: greedy continuation differs from transformers", name, n);
        if (!same)
            for (int k = 0; k < ng; k++)
                if (got[k] != greedy[k]) {
                    fprintf(stderr, "  first difference at step %d: %d vs %d\n", k, got[k], greedy[k]);
                    break;
                }
        greedy_ok += same;

        /* chunked prefill in another sequence: same bits as the unchunked last row */
        if (n >= 30) {
            float *whole = malloc(sizeof(float) * V);
            batch w = {0};
            for (int k = 0; k < n; k++) add_row(&w, prompt[k], k, 0);
            seq s2 = {0};
            int32_t last = n - 1;
            rc = run(t, a, &w, &s2, 1, 1, &last, whole, 0, NULL, NULL, &err);
            CHECK(rc == 0);
            seq s3 = {0};
            int cuts[] = {0, n / 3, n / 3 + 11, n};
            for (int q = 0; q < 3; q++) {
                batch ch = {0};
                for (int k = cuts[q]; k < cuts[q + 1]; k++) add_row(&ch, prompt[k], k, 0);
                int32_t lr = ch.n - 1;
                rc = run(t, a, &ch, &s3, 1, 1, &lr, logits, 0, NULL, NULL, &err);
                CHECKF(rc == 0, "%s chunk %d: %s", name, q, err.msg);
            }
            CHECKF(memcmp(whole, logits, sizeof(float) * V) == 0, "%s prompt %d: chunked prefill differs", name, n);
            for (int k = 0; k < s2.n_blocks; k++) flint_kv_alloc_release(a, s2.blocks[k]);
            for (int k = 0; k < s3.n_blocks; k++) flint_kv_alloc_release(a, s3.blocks[k]);
            free(whole);
        }
        for (int k = 0; k < s.n_blocks; k++) flint_kv_alloc_release(a, s.blocks[k]);
    }
    printf("golden %s (block %d): %d prompts, max logits error %.3g, max tap error %.3g, greedy %d/%d match\n", name,
           block, n_cases, max_logit_err, max_tap_err, greedy_ok, n_cases);
    free(logits);
    free(want);
    free(taps);
    free(tap_layers);
    flint_kv_alloc_free(a);
out:
    flint_target_close(t);
    cJSON_Delete(ref);
}

static void test_config(void) {
    flint_target_config c;
    flint_err err = {0};
    CHECKF(flint_target_config_load(GOLDEN "/qwen3", &c, &err) == 0, "%s", err.msg);
    CHECK(c.arch == FLINT_ARCH_QWEN3 && c.head_dim == 32 && c.n_heads == 4 && c.n_kv_heads == 2);
    CHECK(c.tie_word_embeddings == 1 && c.bos_token_id == -1 && c.n_eos == 2 && c.eos_token_ids[1] == 2);
    CHECK(c.rope_theta == 1e6f && c.rms_norm_eps == 1e-6f && c.max_position_embeddings == 512);
    CHECKF(flint_target_config_load(GOLDEN "/llama", &c, &err) == 0, "%s", err.msg);
    CHECK(c.arch == FLINT_ARCH_LLAMA && c.head_dim == 16 && c.tie_word_embeddings == 0);
    CHECK(c.bos_token_id == 1 && c.n_eos == 1 && c.eos_token_ids[0] == 2 && c.rope_theta == 10000.0f);
}

/* ---- batch invariance ---- */

static void test_batch_invariance(const char *name) {
    cJSON *ref = load_ref(name);
    flint_target *t1 = open_model(name, 8, 1, 6), *t3 = open_model(name, 8, 3, 6);
    if (!ref || !t1 || !t3) goto out;
    int V = flint_target_get_config(t1)->vocab_size;
    int32_t P[3][512];
    int len[3];
    for (int k = 0; k < 3; k++) /* the 7-, 33- and 100-token prompts */
        len[k] = json_ints(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(ref, "cases"), k + 1), "prompt"),
                           P[k], 512);
    const int A = 1; /* the sequence under test: 33 tokens; B = 0 (7), C = 2 (100) */
    int nA = len[A];
    flint_kv_alloc *a1 = flint_kv_alloc_new(flint_target_kv_blocks(t1));
    flint_kv_alloc *a3 = flint_kv_alloc_new(flint_target_kv_blocks(t3));
    float *alone = malloc(sizeof(float) * 64 * V), *mixed = malloc(sizeof(float) * 64 * V);
    flint_err err = {0};
    int32_t lr[64];

    /* alone, 1 thread: prefill (logits of every row), one decode step, a 4-row verify block */
    seq sa[1];
    memset(sa, 0, sizeof sa);
    batch b = {0};
    for (int i = 0; i < nA; i++) add_row(&b, P[A][i], i, 0);
    for (int i = 0; i < nA; i++) lr[i] = i;
    CHECKF(run(t1, a1, &b, sa, 1, nA, lr, alone, 0, NULL, NULL, &err) == 0, "%s", err.msg);
    batch d = {0};
    add_row(&d, 5, nA, 0);
    lr[0] = 0;
    CHECK(run(t1, a1, &d, sa, 1, 1, lr, alone + (size_t)nA * V, 0, NULL, NULL, &err) == 0);
    batch v = {0};
    for (int k = 0; k < 4; k++) add_row(&v, 6 + k, nA + 1 + k, 0);
    for (int k = 0; k < 4; k++) lr[k] = k;
    CHECK(run(t1, a1, &v, sa, 1, 4, lr, alone + (size_t)(nA + 1) * V, 0, NULL, NULL, &err) == 0);

    /* the verify block equals decoding its tokens one at a time (another sequence, 1 thread) */
    seq sb[1];
    memset(sb, 0, sizeof sb);
    b.n = 0;
    for (int i = 0; i < nA; i++) add_row(&b, P[A][i], i, 0);
    lr[0] = nA - 1;
    CHECK(run(t1, a1, &b, sb, 1, 1, lr, mixed, 0, NULL, NULL, &err) == 0);
    int one_by_one = 1;
    for (int k = 0; k < 5; k++) {
        batch s1 = {0};
        add_row(&s1, 5 + k, nA + k, 0);
        lr[0] = 0;
        CHECK(run(t1, a1, &s1, sb, 1, 1, lr, mixed, 0, NULL, NULL, &err) == 0);
        one_by_one &= memcmp(mixed, alone + (size_t)(nA + k) * V, sizeof(float) * V) == 0;
    }
    CHECKF(one_by_one, "%s: a verify block differs from one-at-a-time decoding", name);

    /* mixed, 3 threads: B, A and C in one shuffled prefill batch; the blocks of the three
     * sequences interleave in the pool */
    seq sm[3];
    memset(sm, 0, sizeof sm);
    int order[3] = {2, 0, 1};
    for (int q = 0; q < 3; q++) { /* reserve blocks round-robin so they interleave */
        for (int k = 0; k < 3; k++) seq_cover(&sm[order[k]], a3, 8, 8 * (q + 1) - 1);
    }
    batch m = {0};
    int a_row[512];
    for (int i = 0; i < len[2]; i++) add_row(&m, P[2][len[2] - 1 - i], len[2] - 1 - i, 2); /* C reversed */
    for (int i = 0; i < nA; i++) {
        int p = (i * 7) % nA; /* A permuted (7 is coprime with 33) */
        a_row[p] = m.n;
        add_row(&m, P[A][p], p, 1);
        if (i < len[0]) add_row(&m, P[0][i], i, 0); /* B interleaved */
    }
    for (int i = 0; i < nA; i++) lr[i] = a_row[i];
    CHECKF(run(t3, a3, &m, sm, 3, nA, lr, mixed, 0, NULL, NULL, &err) == 0, "%s", err.msg);
    int same = memcmp(alone, mixed, sizeof(float) * nA * V) == 0;
    CHECKF(same, "%s: prefill logits of a sequence differ alone (1 thread) vs in a batch (3 threads)", name);

    /* mixed decode: [C, A, B] */
    m.n = 0;
    add_row(&m, 3, len[2], 2);
    add_row(&m, 5, nA, 1);
    add_row(&m, 4, len[0], 0);
    lr[0] = 1;
    CHECK(run(t3, a3, &m, sm, 3, 1, lr, mixed, 0, NULL, NULL, &err) == 0);
    CHECKF(memcmp(alone + (size_t)nA * V, mixed, sizeof(float) * V) == 0, "%s: decode logits differ in a batch", name);

    /* mixed verify: B's 3 rows, A's 4 rows reversed, C's 1 row */
    m.n = 0;
    for (int k = 0; k < 3; k++) add_row(&m, 20 + k, len[0] + 1 + k, 0);
    for (int k = 3; k >= 0; k--) add_row(&m, 6 + k, nA + 1 + k, 1);
    add_row(&m, 9, len[2] + 1, 2);
    for (int k = 0; k < 4; k++) lr[k] = 3 + (3 - k);
    CHECK(run(t3, a3, &m, sm, 3, 4, lr, mixed, 0, NULL, NULL, &err) == 0);
    CHECKF(memcmp(alone + (size_t)(nA + 1) * V, mixed, sizeof(float) * 4 * V) == 0,
           "%s: verify-block logits differ in a batch", name);

    /* a refused batch leaves the state alone: the same verify again gives the same bits */
    batch bad = m;
    bad.tok[2] = V;
    flint_err e2 = {0};
    CHECK(run(t3, a3, &bad, sm, 3, 4, lr, mixed + (size_t)4 * V, 0, NULL, NULL, &e2) == -1);
    CHECK(run(t3, a3, &m, sm, 3, 4, lr, mixed + (size_t)4 * V, 0, NULL, NULL, &err) == 0);
    CHECK(memcmp(mixed, mixed + (size_t)4 * V, sizeof(float) * 4 * V) == 0);
    printf("batch invariance %s: %s\n", name, same ? "bit-exact" : "DIFFERS");
    free(alone);
    free(mixed);
    flint_kv_alloc_free(a1);
    flint_kv_alloc_free(a3);
out:
    flint_target_close(t1);
    flint_target_close(t3);
    cJSON_Delete(ref);
}

/* ---- bad inputs ---- */

static char tmp_root[256];

/* A scratch model dir: config.json from the qwen3 fixture edited by `edit` (a JSON object whose
 * keys replace the fixture's; a JSON null value deletes the key), and the fixture's weights
 * linked, unless write_weights writes its own. */
static void make_dir(const char *sub, const char *edit, char *dir, size_t cap) {
    snprintf(dir, cap, "%s/%s", tmp_root, sub);
    FLINT_ASSERT(mkdir(dir, 0700) == 0);
    flint_err err = {0};
    cJSON *cfg = flint_json_load_file(GOLDEN "/qwen3/config.json", 1 << 20, &err);
    FLINT_ASSERT(cfg);
    if (edit) {
        cJSON *e = cJSON_Parse(edit);
        FLINT_ASSERT(e);
        const cJSON *kv;
        cJSON_ArrayForEach(kv, e) {
            cJSON_DeleteItemFromObjectCaseSensitive(cfg, kv->string);
            if (!cJSON_IsNull(kv)) cJSON_AddItemToObject(cfg, kv->string, cJSON_Duplicate(kv, 1));
        }
        cJSON_Delete(e);
    }
    char path[1024];
    snprintf(path, sizeof path, "%s/config.json", dir);
    char *text = cJSON_Print(cfg);
    FILE *f = fopen(path, "w");
    FLINT_ASSERT(f);
    fputs(text, f);
    fclose(f);
    free(text);
    cJSON_Delete(cfg);
}

static void link_weights(const char *dir) {
    char path[1024];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    FLINT_ASSERT(symlink(GOLDEN "/qwen3/model.safetensors", path) == 0);
}

/* Rewrite the fixture's weights without `drop`, or with `retype` stored as I32. */
static void write_weights(const char *dir, const char *drop, const char *retype) {
    flint_err err = {0};
    flint_st *st = flint_st_open(GOLDEN "/qwen3/model.safetensors", &err);
    FLINT_ASSERT(st);
    int n = flint_st_count(st), m = 0;
    flint_st_entry *e = calloc((size_t)n, sizeof *e);
    int32_t *ints = NULL;
    for (int i = 0; i < n; i++) {
        const flint_tensor_info *ti = flint_st_at(st, i);
        if (drop && strcmp(ti->name, drop) == 0) continue;
        e[m].name = ti->name;
        e[m].dtype = ti->dtype;
        e[m].ndim = ti->ndim;
        memcpy(e[m].shape, ti->shape, sizeof ti->shape);
        e[m].data = ti->data;
        if (retype && strcmp(ti->name, retype) == 0) {
            ints = calloc((size_t)ti->numel, sizeof(int32_t));
            e[m].dtype = FLINT_DT_I32;
            e[m].data = ints;
        }
        m++;
    }
    char path[1024];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    FLINT_ASSERT(flint_st_write(path, e, m, NULL, 0, &err) == 0);
    free(ints);
    free(e);
    flint_st_close(st);
}

/* Open must fail with `code`, and the message must contain every one of the needles. */
static void expect_open_fail(const char *dir, const flint_target_options *o, flint_code code, const char *what,
                             const char *n1, const char *n2, const char *n3) {
    flint_err err = {0};
    flint_target *t = flint_target_open(dir, o, &err);
    CHECKF(t == NULL, "%s: open succeeded", what);
    flint_target_close(t);
    CHECKF(err.code == code, "%s: code %s, expected %s (%s)", what, flint_code_name(err.code), flint_code_name(code),
           err.msg);
    const char *needles[3] = {n1, n2, n3};
    for (int i = 0; i < 3; i++)
        if (needles[i]) CHECKF(strstr(err.msg, needles[i]) != NULL, "%s: message \"%s\" lacks \"%s\"", what, err.msg,
                               needles[i]);
}

static void rm_tree(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *de;
    char path[1024];
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        struct stat sb;
        if (lstat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) rm_tree(path);
        else unlink(path);
    }
    closedir(d);
    rmdir(dir);
}

static void test_bad_files(void) {
    char dir[1024];
    snprintf(tmp_root, sizeof tmp_root, "/tmp/flint_test_target_XXXXXX");
    FLINT_ASSERT(mkdtemp(tmp_root));

    snprintf(dir, sizeof dir, "%s/empty", tmp_root);
    FLINT_ASSERT(mkdir(dir, 0700) == 0);
    expect_open_fail(dir, NULL, FLINT_ERR_IO, "missing config", "config.json", NULL, NULL);

    make_dir("mistral", "{\"architectures\": [\"MistralForCausalLM\"]}", dir, sizeof dir);
    link_weights(dir);
    expect_open_fail(dir, NULL, FLINT_ERR_UNSUPPORTED, "architecture", "MistralForCausalLM", "config.json", NULL);

    make_dir("rope_scaling", "{\"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": 2.0}}", dir, sizeof dir);
    link_weights(dir);
    expect_open_fail(dir, NULL, FLINT_ERR_UNSUPPORTED, "rope_scaling", "rope_scaling", "linear", NULL);

    make_dir("rope_yarn", "{\"rope_parameters\": {\"rope_type\": \"yarn\", \"rope_theta\": 1e6, \"factor\": 4.0}}", dir,
             sizeof dir);
    link_weights(dir);
    expect_open_fail(dir, NULL, FLINT_ERR_UNSUPPORTED, "rope_parameters yarn", "rope_type", "yarn", NULL);

    make_dir("sliding", "{\"use_sliding_window\": true, \"sliding_window\": 64}", dir, sizeof dir);
    expect_open_fail(dir, NULL, FLINT_ERR_UNSUPPORTED, "sliding window", "use_sliding_window", NULL, NULL);

    make_dir("gelu", "{\"hidden_act\": \"gelu\"}", dir, sizeof dir);
    expect_open_fail(dir, NULL, FLINT_ERR_UNSUPPORTED, "activation", "hidden_act", "gelu", NULL);

    make_dir("bias", "{\"attention_bias\": true}", dir, sizeof dir);
    expect_open_fail(dir, NULL, FLINT_ERR_UNSUPPORTED, "attention bias", "attention_bias", NULL, NULL);

    make_dir("kvheads", "{\"num_key_value_heads\": 3}", dir, sizeof dir);
    expect_open_fail(dir, NULL, FLINT_ERR_FORMAT, "head counts", "num_key_value_heads", "(3)", NULL);

    make_dir("nohidden", "{\"hidden_size\": null}", dir, sizeof dir);
    expect_open_fail(dir, NULL, FLINT_ERR_FORMAT, "missing field", "hidden_size", NULL, NULL);

    make_dir("hidden48", "{\"hidden_size\": 48}", dir, sizeof dir);
    link_weights(dir);
    expect_open_fail(dir, NULL, FLINT_ERR_FORMAT, "shape mismatch", "model.embed_tokens.weight", "48", "64");

    make_dir("inter96", "{\"intermediate_size\": 96}", dir, sizeof dir);
    link_weights(dir);
    expect_open_fail(dir, NULL, FLINT_ERR_FORMAT, "shape mismatch (mlp)", "model.layers.0.mlp.gate_proj.weight", "96",
                     "128");

    make_dir("untied", "{\"tie_word_embeddings\": false}", dir, sizeof dir);
    link_weights(dir);
    expect_open_fail(dir, NULL, FLINT_ERR_FORMAT, "untied without lm_head", "lm_head.weight", NULL, NULL);

    make_dir("notensor", NULL, dir, sizeof dir);
    write_weights(dir, "model.layers.1.mlp.up_proj.weight", NULL);
    expect_open_fail(dir, NULL, FLINT_ERR_FORMAT, "missing tensor", "model.layers.1.mlp.up_proj.weight", "missing",
                     NULL);

    make_dir("i32", NULL, dir, sizeof dir);
    write_weights(dir, NULL, "model.layers.2.self_attn.k_norm.weight");
    expect_open_fail(dir, NULL, FLINT_ERR_UNSUPPORTED, "dtype", "model.layers.2.self_attn.k_norm.weight", "I32", NULL);

    make_dir("noweights", NULL, dir, sizeof dir);
    expect_open_fail(dir, NULL, FLINT_ERR_IO, "no weights", "safetensors", NULL, NULL);

    flint_target_options o;
    flint_target_options_default(&o);
    o.kv_block_size = 12;
    expect_open_fail(GOLDEN "/qwen3", &o, FLINT_ERR_INVALID, "block size", "kv_block_size", "12", NULL);
    flint_target_options_default(&o);
    o.max_len = 513;
    expect_open_fail(GOLDEN "/qwen3", &o, FLINT_ERR_INVALID, "max_len", "max_len", "513", NULL);

    rm_tree(tmp_root);
}

static void expect_forward_fail(flint_target *t, const flint_target_batch *b, const char *what, const char *n1,
                                const char *n2) {
    flint_err err = {0};
    CHECKF(flint_target_forward(t, b, &err) == -1, "%s: forward succeeded", what);
    CHECKF(err.code == FLINT_ERR_INVALID, "%s: code %s (%s)", what, flint_code_name(err.code), err.msg);
    CHECKF(strstr(err.msg, n1) != NULL, "%s: message \"%s\" lacks \"%s\"", what, err.msg, n1);
    if (n2) CHECKF(strstr(err.msg, n2) != NULL, "%s: message \"%s\" lacks \"%s\"", what, err.msg, n2);
}

static void test_bad_batch(void) {
    flint_target_options o;
    flint_target_options_default(&o);
    o.max_len = 64;
    o.max_rows = 8;
    o.kv_block_size = 16;
    flint_err err = {0};
    flint_target *t = flint_target_open(GOLDEN "/qwen3", &o, &err);
    CHECKF(t != NULL, "%s", err.msg);
    if (!t) return;
    CHECK(flint_target_kv_blocks(t) == 4 && flint_target_kv_block_size(t) == 16);
    int V = flint_target_get_config(t)->vocab_size;
    int32_t tok[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, pos[9] = {0, 1, 2, 3, 4, 5, 6, 7, 8}, rs[9] = {0};
    int32_t table[4] = {3, 1, 0, 2};
    const int32_t *tables[1] = {table};
    int32_t lrow = 2, tap = 0;
    float *logits = malloc(sizeof(float) * V), taps[9 * 64];
    flint_target_batch ok = {.n_rows = 3, .tokens = tok, .pos = pos, .row_seq = rs, .n_seqs = 1,
                             .block_tables = tables, .n_logit_rows = 1, .logit_rows = &lrow, .logits = logits,
                             .n_taps = 1, .tap_layers = &tap, .taps = taps};
    CHECKF(flint_target_forward(t, &ok, &err) == 0, "%s", err.msg);

    flint_target_batch b = ok;
    int32_t bad_tok[3] = {1, V, 3};
    b.tokens = bad_tok;
    expect_forward_fail(t, &b, "token id", "token id 512", "row 1");
    b = ok;
    int32_t neg_tok[3] = {1, 2, -1};
    b.tokens = neg_tok;
    expect_forward_fail(t, &b, "negative token", "token id -1", NULL);
    b = ok;
    int32_t bad_pos[3] = {0, 1, 64};
    b.pos = bad_pos;
    expect_forward_fail(t, &b, "position", "position 64", "max_len");
    b = ok;
    int32_t neg_pos[3] = {0, -1, 2};
    b.pos = neg_pos;
    expect_forward_fail(t, &b, "negative position", "position -1", NULL);
    b = ok;
    int32_t bad_table[4] = {4, 1, 0, 2};
    const int32_t *bad_tables[1] = {bad_table};
    b.block_tables = bad_tables;
    expect_forward_fail(t, &b, "block id", "block", "id 4");
    b = ok;
    b.n_rows = 9;
    expect_forward_fail(t, &b, "too many rows", "n_rows 9", "max_rows");
    b = ok;
    b.n_rows = 0;
    expect_forward_fail(t, &b, "no rows", "n_rows 0", NULL);
    b = ok;
    int32_t bad_rs[3] = {0, 1, 0};
    b.row_seq = bad_rs;
    expect_forward_fail(t, &b, "row_seq", "row_seq 1", NULL);
    b = ok;
    int32_t bad_tap = 3;
    b.tap_layers = &bad_tap;
    expect_forward_fail(t, &b, "tap layer", "tap_layers[0] = 3", NULL);
    b = ok;
    int32_t bad_lrow = 3;
    b.logit_rows = &bad_lrow;
    expect_forward_fail(t, &b, "logit row", "logit_rows[0] = 3", NULL);
    b = ok; /* device-resident outputs need the CUDA forward */
    b.taps = NULL;
    b.taps_on_device = 1;
    expect_forward_fail(t, &b, "taps on the device of a CPU target", "n_taps 1", "taps");
    b = ok;
    b.logits = NULL;
    b.logits_on_device = 1;
    expect_forward_fail(t, &b, "logits on the device of a CPU target", "n_logit_rows 1", "logits");
    b = ok;
    b.tokens_device = ok.tokens; /* any pointer: the CPU forward has no device tokens to read */
    expect_forward_fail(t, &b, "tokens on the device of a CPU target", "device-resident tokens", "CUDA");
    b = ok;
    b.logits = NULL;
    expect_forward_fail(t, &b, "no logits buffer", "logits", NULL);
    free(logits);
    flint_target_close(t);
}

/* ---- the CPU kernels' vector paths ----
 * flint_ops_set_avx: the 8-wide AVX kernels and the portable 4-wide ones must give the same bits
 * (lane k sums i = k mod 8 either way), over widths with and without a tail, row counts through
 * the 4-row tile and its remainder, output counts through the 4-output tile and its remainder,
 * with and without accumulation, one thread and two. Where the CPU has no AVX both runs take the
 * portable path and the check is trivially true (said in the output). */
static uint64_t g_rs = 0x9E3779B97F4A7C15ull;
static float frand(void) {
    g_rs ^= g_rs << 13, g_rs ^= g_rs >> 7, g_rs ^= g_rs << 17;
    return (float)((g_rs >> 40) & 0xFFFFFF) / (float)0x1000000 * 2.0f - 1.0f;
}

/* flint_ops_first_bad_id against the plain loop: every length 0..80 (the 16-wide steps and their
 * tails), no bad entry or one (or two) at each place, ids at the limits (0, limit - 1, limit, -1,
 * INT32_MIN, INT32_MAX). */
static void test_first_bad_id(void) {
    const int32_t limit = 1000, odd[] = {1000, -1, INT32_MIN, INT32_MAX, 1001};
    int32_t v[80];
    int wrong = 0, cases = 0;
    for (int n = 0; n <= 80; n++)
        for (int at = -1; at < n; at++)
            for (size_t oi = 0; oi < sizeof odd / sizeof odd[0]; oi++) {
                for (int i = 0; i < n; i++) v[i] = i % 3 == 0 ? limit - 1 : (int32_t)((i * 37u) % (unsigned)limit);
                if (at >= 0) v[at] = odd[oi];
                if (at >= 0 && at + 5 < n) v[at + 5] = odd[(oi + 1) % 5]; /* a second, later one */
                int want = -1;
                for (int i = 0; i < n && want < 0; i++)
                    if (v[i] < 0 || v[i] >= limit) want = i;
                wrong += flint_ops_first_bad_id(v, n, limit) != want;
                cases++;
                if (at < 0) break;
            }
    printf("first_bad_id: %d cases, %d wrong\n", cases, wrong);
    CHECKF(wrong == 0, "flint_ops_first_bad_id: %d of %d cases differ from the plain loop", wrong, cases);
}

static void test_vector_paths(void) {
    static const int widths[] = {1, 7, 8, 13, 64, 256, 259};
    static const int rows[] = {1, 3, 4, 5, 8, 9, 33};
    static const int outs[] = {1, 4, 6, 17};
    const int had_avx = flint_ops_set_avx(1), avx = flint_ops_set_avx(1);
    int bad = 0, cases = 0;
    for (size_t wi = 0; wi < sizeof widths / sizeof widths[0]; wi++)
        for (size_t ri = 0; ri < sizeof rows / sizeof rows[0]; ri++)
            for (size_t oi = 0; oi < sizeof outs / sizeof outs[0]; oi++) {
                const int K = widths[wi], R = rows[ri], N = outs[oi], ldx = K + 3, ldy = N + 2;
                float *x = malloc(sizeof(float) * R * ldx), *w = malloc(sizeof(float) * N * K);
                float *y[2][2];
                for (int i = 0; i < R * ldx; i++) x[i] = frand();
                for (int i = 0; i < N * K; i++) w[i] = frand();
                for (int a = 0; a < 2; a++) {
                    flint_ops_set_avx(a);
                    for (int acc = 0; acc < 2; acc++) {
                        y[a][acc] = malloc(sizeof(float) * R * ldy);
                        for (int i = 0; i < R * ldy; i++) y[a][acc][i] = 0.25f * (float)(i % 7);
                        flint_ops_matmul(y[a][acc], ldy, x, ldx, w, R, K, N, acc, 1 + (int)(oi & 1));
                    }
                }
                for (int acc = 0; acc < 2; acc++) bad += memcmp(y[0][acc], y[1][acc], sizeof(float) * R * ldy) != 0;
                flint_ops_set_avx(0);
                const float d0 = flint_ops_dot(x, w, K);
                flint_ops_set_avx(1);
                const float d1 = flint_ops_dot(x, w, K);
                bad += memcmp(&d0, &d1, sizeof d0) != 0;
                /* axpy: elementwise, so both paths must give the plain loop's bits */
                float *ya = malloc(sizeof(float) * K), *yb = malloc(sizeof(float) * K), *yc = malloc(sizeof(float) * K);
                const float e = frand();
                for (int i = 0; i < K; i++) ya[i] = yb[i] = yc[i] = frand();
                flint_ops_set_avx(0);
                flint_ops_axpy(ya, e, w, K);
                flint_ops_set_avx(1);
                flint_ops_axpy(yb, e, w, K);
                for (int i = 0; i < K; i++) yc[i] += e * w[i];
                bad += memcmp(ya, yc, sizeof(float) * K) != 0;
                bad += memcmp(yb, yc, sizeof(float) * K) != 0;
                free(ya), free(yb), free(yc);
                cases += 5;
                free(x), free(w);
                for (int a = 0; a < 2; a++) free(y[a][0]), free(y[a][1]);
            }
    flint_ops_set_avx(had_avx);
    printf("vector paths: %d matmul/dot/axpy cases, AVX %s, %d differ from the portable kernels\n", cases,
           avx ? "on this CPU" : "absent (both runs portable)", bad);
    CHECKF(bad == 0, "%d of %d cases: the AVX kernels' bits differ from the portable ones", bad, cases);
}

/* The packed GEMM tile (target/gemm_layout.h): a bijection of 16 rows x 32 k onto 512 places,
 * and the promises the GPU paths rely on, checked from the slot order itself: for row half i and
 * MMA h, core matrix c holds slots 8 c .. 8 c + 7 of 8 rows, 16 contiguous bytes a row, rows 16
 * bytes apart (what wgmma's descriptors read: LBO 128, SBO 512), where slot 8 c + 2 t + e of MMA h
 * is k = 8 t + 4 h + 2 c + e (the register path's permuted order, lane t's word t). */
static void test_gemm_layout(void) {
    int seen[512] = {0}, bad = 0;
    for (int p = 0; p < 512; p++) {
        int rr = -1, kk = -1;
        gemm_tile_rk(p, &rr, &kk);
        if (rr < 0 || rr >= 16 || kk < 0 || kk >= 32 || gemm_tile_elem(rr, kk) != p) bad++;
    }
    for (int rr = 0; rr < 16; rr++)
        for (int kk = 0; kk < 32; kk++) {
            const int p = gemm_tile_elem(rr, kk);
            if (p < 0 || p >= 512 || seen[p]++) bad++;
        }
    CHECK(bad == 0);
    for (int i = 0; i < 2; i++)
        for (int h = 0; h < 2; h++)
            for (int c = 0; c < 2; c++) {
                const int core = gemm_tile_elem(8 * i, 4 * h + 2 * c); /* row 0 of the core, slot 8 c */
                CHECK(core == 256 * i + 128 * h + 64 * c);
                for (int g = 0; g < 8; g++)
                    for (int t = 0; t < 4; t++)
                        for (int e = 0; e < 2; e++)
                            CHECK(gemm_tile_elem(8 * i + g, 8 * t + 4 * h + 2 * c + e) == core + 8 * g + 2 * t + e);
            }
}

int main(void) {
    test_config();
    test_gemm_layout();
    test_vector_paths();
    test_first_bad_id();
    test_golden("qwen3", 16);
    test_golden("llama", 4);
    test_batch_invariance("qwen3");
    test_batch_invariance("llama");
    test_bad_files();
    test_bad_batch();
    return test_report("test_target");
}
