/* Tests for `flint convert llama2c` (target/convert_llama2c.c, cli/cmd_convert.c) on the real
 * stories260K checkpoint: the output directory opens, holds the Hugging Face tensor names and
 * shapes with the right values (wq/wk rows permuted for rotate_half RoPE, the rest copied), its
 * config and tokenizer files parse with the expected fields; broken inputs give errors that name
 * the file, and the CLI maps them to exit statuses. That transformers runs the converted directory
 * like llama2.c's run.c is checked by tools/check_convert_hf.py --llama2c. */
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/json.h"
#include "core/safetensors.h"
#include "target/convert.h"
#include "test.h"

#define MODEL_DIR FLINT_SHARED_DIR "/models/stories260K"
#define WEIGHTS MODEL_DIR "/stories260K.bin"
#define TOKENIZER MODEL_DIR "/tok512.bin"

/* stories260K: dim 64, hidden 172, 5 layers, 8 heads, 4 kv heads, vocab 512, seq_len 512 */
enum { D = 64, HID = 172, NL = 5, NH = 8, NKV = 4, V = 512, SEQ = 512, HS = D / NH, KV = HS * NKV };

static char tmpdir[] = "/tmp/flint_test_convert_XXXXXX";

/* Paths inside the temp dir; each call gets its own buffer (a test makes far fewer than 256). */
static const char *tpath(const char *name) {
    static char buf[256][512];
    static int k;
    char *p = buf[k++ % 256];
    snprintf(p, 512, "%s/%s", tmpdir, name);
    return p;
}

static void write_bytes(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        exit(1);
    }
    if (n) fwrite(p, 1, n, f);
    fclose(f);
}

static size_t file_size(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 ? (size_t)sb.st_size : 0;
}

static int files_equal(const char *a, const char *b) {
    size_t na, nb;
    char *x = flint_file_read(a, 1u << 26, &na, NULL), *y = flint_file_read(b, 1u << 26, &nb, NULL);
    int eq = x && y && na == nb && memcmp(x, y, na) == 0;
    free(x);
    free(y);
    return eq;
}

/* Offsets (in floats, after the 28-byte header) of the legacy arrays, computed here from the
 * documented layout (shared/models/stories260K/PROVENANCE.md), independently of the converter. */
static const float *arr(const float *f, const char *which) {
    size_t o = 0;
    static const struct {
        const char *name;
        size_t n;
    } lay[] = {
        {"tok", (size_t)V * D},       {"rms_att", (size_t)NL * D},     {"wq", (size_t)NL * D * D},
        {"wk", (size_t)NL * KV * D},  {"wv", (size_t)NL * KV * D},     {"wo", (size_t)NL * D * D},
        {"rms_ffn", (size_t)NL * D},  {"w1", (size_t)NL * HID * D},    {"w2", (size_t)NL * D * HID},
        {"w3", (size_t)NL * HID * D}, {"rms_final", D},                {"freq", (size_t)SEQ * HS},
    };
    for (size_t i = 0; i < sizeof lay / sizeof lay[0]; i++) {
        if (!strcmp(lay[i].name, which)) return f + o;
        o += lay[i].n;
    }
    return NULL;
}

static int same_floats(const flint_tensor_info *t, const float *want, size_t n) {
    return t && t->dtype == FLINT_DT_F32 && (size_t)t->numel == n && memcmp(t->data, want, n * 4) == 0;
}

static void check_tensors(const char *dir, const float *src, int shared) {
    flint_err err = {0};
    flint_st *st = flint_st_open_dir(dir, &err);
    CHECKF(st != NULL, "%s", err.msg);
    if (!st) return;
    CHECK(flint_st_count(st) == 2 + 9 * NL + !shared);
    CHECK(flint_st_meta(st, "format") && !strcmp(flint_st_meta(st, "format"), "pt"));
    int64_t emb[2] = {V, D}, dd[2] = {D, D}, kvd[2] = {KV, D}, hd[2] = {HID, D}, dh[2] = {D, HID}, d1[1] = {D};
    CHECK(same_floats(flint_st_expect(st, "model.embed_tokens.weight", 2, emb, &err), arr(src, "tok"), (size_t)V * D));
    CHECK(same_floats(flint_st_expect(st, "model.norm.weight", 1, d1, &err), arr(src, "rms_final"), D));
    CHECK(shared == (flint_st_find(st, "lm_head.weight") == NULL));
    char name[128];
    for (int l = 0; l < NL; l++) {
#define T(suffix, nd, shape) (snprintf(name, sizeof name, "model.layers.%d.%s.weight", l, suffix), \
                              flint_st_expect(st, name, nd, shape, &err))
        CHECKF(same_floats(T("input_layernorm", 1, d1), arr(src, "rms_att") + l * D, D), "%s", err.msg);
        CHECK(same_floats(T("post_attention_layernorm", 1, d1), arr(src, "rms_ffn") + l * D, D));
        CHECK(same_floats(T("self_attn.v_proj", 2, kvd), arr(src, "wv") + (size_t)l * KV * D, (size_t)KV * D));
        CHECK(same_floats(T("self_attn.o_proj", 2, dd), arr(src, "wo") + (size_t)l * D * D, (size_t)D * D));
        CHECK(same_floats(T("mlp.gate_proj", 2, hd), arr(src, "w1") + (size_t)l * HID * D, (size_t)HID * D));
        CHECK(same_floats(T("mlp.up_proj", 2, hd), arr(src, "w3") + (size_t)l * HID * D, (size_t)HID * D));
        CHECK(same_floats(T("mlp.down_proj", 2, dh), arr(src, "w2") + (size_t)l * D * HID, (size_t)D * HID));
        /* RoPE permutation: within a head, new row j*HS/2 + i is old row 2i + j */
        const flint_tensor_info *q = T("self_attn.q_proj", 2, dd), *k = T("self_attn.k_proj", 2, kvd);
        CHECK(q && k);
        if (!q || !k) continue;
        int bad = 0;
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < HS / 2; i++)
                for (int j = 0; j < 2; j++) {
                    const float *nq = (const float *)q->data + (size_t)(h * HS + j * HS / 2 + i) * D;
                    const float *oq = arr(src, "wq") + (size_t)l * D * D + (size_t)(h * HS + 2 * i + j) * D;
                    bad += memcmp(nq, oq, D * 4) != 0;
                    if (h >= NKV) continue;
                    const float *nk = (const float *)k->data + (size_t)(h * HS + j * HS / 2 + i) * D;
                    const float *ok = arr(src, "wk") + (size_t)l * KV * D + (size_t)(h * HS + 2 * i + j) * D;
                    bad += memcmp(nk, ok, D * 4) != 0;
                }
        CHECKF(bad == 0, "layer %d: %d q/k rows are not in rotate_half order", l, bad);
#undef T
    }
    flint_st_close(st);
}

static void check_config(const char *dir, int shared) {
    char p[600];
    flint_err err = {0};
    snprintf(p, sizeof p, "%s/config.json", dir);
    cJSON *c = flint_json_load_file(p, 1 << 20, &err);
    CHECKF(c != NULL, "%s", err.msg);
    if (!c) return;
    const cJSON *arch = cJSON_GetObjectItem(c, "architectures");
    CHECK(cJSON_GetArraySize(arch) == 1 && !strcmp(cJSON_GetArrayItem(arch, 0)->valuestring, "LlamaForCausalLM"));
    static const struct {
        const char *key;
        int64_t want;
    } ints[] = {{"hidden_size", D},         {"intermediate_size", HID},     {"num_hidden_layers", NL},
                {"num_attention_heads", NH}, {"num_key_value_heads", NKV},   {"head_dim", HS},
                {"vocab_size", V},          {"max_position_embeddings", SEQ}, {"bos_token_id", 1},
                {"eos_token_id", 2}};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        int64_t v = -1;
        CHECKF(flint_json_need_int(c, ints[i].key, p, &v, &err) == 0 && v == ints[i].want, "%s = %lld", ints[i].key,
               (long long)v);
    }
    double eps = 0, theta = 0;
    int tie = -1;
    CHECK(flint_json_need_double(c, "rms_norm_eps", p, &eps, &err) == 0 && eps == 1e-5);
    CHECK(flint_json_need_double(c, "rope_theta", p, &theta, &err) == 0 && theta == 10000.0);
    CHECK(flint_json_get_bool(c, "tie_word_embeddings", p, -1, &tie, &err) == 0 && tie == shared);
    const char *s;
    CHECK((s = flint_json_get_string(c, "hidden_act", p, "", &err)) && !strcmp(s, "silu"));
    CHECK((s = flint_json_get_string(c, "model_type", p, "", &err)) && !strcmp(s, "llama"));
    CHECK((s = flint_json_get_string(c, "torch_dtype", p, "", &err)) && !strcmp(s, "float32"));
    cJSON_Delete(c);
}

static void check_tokenizer(const char *dir) {
    char p[600];
    flint_err err = {0};
    snprintf(p, sizeof p, "%s/tokenizer.json", dir);
    cJSON *t = flint_json_load_file(p, 1 << 24, &err);
    CHECKF(t != NULL, "%s", err.msg);
    if (!t) return;
    const cJSON *model = cJSON_GetObjectItem(t, "model");
    const cJSON *vocab = cJSON_GetObjectItem(model, "vocab"), *merges = cJSON_GetObjectItem(model, "merges");
    CHECK(!strcmp(cJSON_GetObjectItem(model, "type")->valuestring, "BPE"));
    CHECK(cJSON_IsTrue(cJSON_GetObjectItem(model, "byte_fallback")));
    CHECK(cJSON_GetArraySize(vocab) == V);
    static const struct {
        const char *piece;
        int id;
    } ids[] = {{"<unk>", 0},           {"<s>", 1},    {"</s>", 2},  {"<0x0A>", 13},        {"\xe2\x96\x81t", 259},
               {"\xe2\x96\x81Lily", 317}, {"\xe2\x96\x81", 410}, {"e", 411}, {"\xe2\x80\x8a", 511}};
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(vocab, ids[i].piece);
        CHECKF(v && v->valueint == ids[i].id, "vocab['%s']", ids[i].piece);
    }
    /* no piece keeps llama2.c's plain spaces */
    int spaces = 0;
    for (const cJSON *v = vocab->child; v; v = v->next) spaces += strchr(v->string, ' ') != NULL;
    CHECK(spaces == 0);
    /* 165 merges for tok512, highest-scoring piece first: "▁t" (score 0) = "▁" + "t" */
    CHECK(cJSON_GetArraySize(merges) == 165);
    CHECK(!strcmp(cJSON_GetArrayItem(merges, 0)->valuestring, "\xe2\x96\x81 t"));
    CHECK(!strcmp(cJSON_GetArrayItem(merges, 1)->valuestring, "h e"));
    CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(t, "added_tokens")) == 3);
    const cJSON *norm = cJSON_GetObjectItem(t, "normalizer");
    CHECK(norm && !strcmp(cJSON_GetObjectItem(norm, "type")->valuestring, "Sequence"));
    CHECK(cJSON_IsNull(cJSON_GetObjectItem(t, "pre_tokenizer")));
    const cJSON *post = cJSON_GetObjectItem(t, "post_processor");
    CHECK(post && !strcmp(cJSON_GetObjectItem(post, "type")->valuestring, "TemplateProcessing"));
    cJSON_Delete(t);

    snprintf(p, sizeof p, "%s/tokenizer_config.json", dir);
    cJSON *c = flint_json_load_file(p, 1 << 20, &err);
    CHECKF(c != NULL, "%s", err.msg);
    if (!c) return;
    const char *s;
    int b = -1;
    CHECK((s = flint_json_get_string(c, "bos_token", p, "", &err)) && !strcmp(s, "<s>"));
    CHECK((s = flint_json_get_string(c, "eos_token", p, "", &err)) && !strcmp(s, "</s>"));
    CHECK((s = flint_json_get_string(c, "tokenizer_class", p, "", &err)) && !strcmp(s, "LlamaTokenizerFast"));
    CHECK((s = flint_json_get_string(c, "chat_template", p, "", &err)) && strstr(s, "[INST]"));
    CHECK(flint_json_get_bool(c, "add_bos_token", p, -1, &b, &err) == 0 && b == 1);
    CHECK(flint_json_get_bool(c, "add_eos_token", p, -1, &b, &err) == 0 && b == 0);
    cJSON_Delete(c);
}

/* Conversion must fail with a message naming `file` and containing `want`. */
static void expect_fail_(int line, const char *w, const char *tk, const char *out, const char *file,
                         const char *want) {
    flint_err err = {0};
    int rc = flint_convert_llama2c(w, tk, out, &err);
    CHECKF(rc == -1, "line %d: conversion succeeded", line);
    CHECKF(err.code != FLINT_OK && strstr(err.msg, file), "line %d: message does not name %s: %s", line, file, err.msg);
    if (want) CHECKF(strstr(err.msg, want) != NULL, "line %d: '%s' missing from: %s", line, want, err.msg);
}
#define expect_fail(w, tk, out, file, want) expect_fail_(__LINE__, w, tk, out, file, want)

static void test_bad_inputs(const char *bin, size_t bin_len, const char *tok, size_t tok_len) {
    const char *out = tpath("bad_out");
    expect_fail(tpath("nonexistent.bin"), TOKENIZER, out, "nonexistent.bin", "cannot open");
    expect_fail(WEIGHTS, tpath("nonexistent_tok.bin"), out, "nonexistent_tok.bin", NULL);

    write_bytes(tpath("trunc.bin"), bin, bin_len / 2);
    expect_fail(tpath("trunc.bin"), TOKENIZER, out, "trunc.bin", "truncated");
    write_bytes(tpath("tiny.bin"), bin, 12);
    expect_fail(tpath("tiny.bin"), TOKENIZER, out, "tiny.bin", "too short");
    char *big = malloc(bin_len + 4);
    memcpy(big, bin, bin_len);
    memset(big + bin_len, 0, 4);
    write_bytes(tpath("long.bin"), big, bin_len + 4);
    expect_fail(tpath("long.bin"), TOKENIZER, out, "long.bin", "describes");
    memcpy(big, bin, bin_len);
    int32_t zero = 0;
    memcpy(big + 12, &zero, 4); /* n_heads = 0 */
    write_bytes(tpath("heads.bin"), big, bin_len);
    expect_fail(tpath("heads.bin"), TOKENIZER, out, "heads.bin", "n_heads");
    memcpy(big, bin, bin_len);
    uint32_t nan = 0x7fc00000;
    memcpy(big + 28 + 4 * ((size_t)V * D + 7), &nan, 4); /* inside model.layers.0.input_layernorm */
    write_bytes(tpath("nan.bin"), big, bin_len);
    expect_fail(tpath("nan.bin"), TOKENIZER, out, "nan.bin", "model.layers.0.input_layernorm.weight");
    memcpy(big, "\x32\x34\x6b\x61\x02\x00\x00\x00", 8); /* "ak42" magic, version 2 (int8) */
    write_bytes(tpath("q8.bin"), big, bin_len);
    expect_fail(tpath("q8.bin"), TOKENIZER, out, "q8.bin", "version 2");
    free(big);

    /* tokenizers that do not fit the model */
    size_t o = 4;
    for (int i = 0; i < 300; i++) {
        int32_t n;
        memcpy(&n, tok + o + 4, 4);
        o += 8 + (size_t)n;
    }
    write_bytes(tpath("tok300.bin"), tok, o);
    expect_fail(WEIGHTS, tpath("tok300.bin"), out, "tok300.bin", "ends after 300 tokens");
    write_bytes(tpath("tokcut.bin"), tok, o + 5);
    expect_fail(WEIGHTS, tpath("tokcut.bin"), out, "tokcut.bin", "truncated in token 300");
    char *tk = malloc(tok_len + 16);
    memcpy(tk, tok, tok_len);
    memcpy(tk + tok_len, "\0\0\0\0\x03\0\0\0abc", 11);
    write_bytes(tpath("tok513.bin"), tk, tok_len + 11);
    expect_fail(WEIGHTS, tpath("tok513.bin"), out, "tok513.bin", "more than the model's 512 tokens");
    memcpy(tk, tok, tok_len);
    memcpy(tk + 4 + 8, "<UNK>", 5);
    write_bytes(tpath("tokunk.bin"), tk, tok_len);
    expect_fail(WEIGHTS, tpath("tokunk.bin"), out, "tokunk.bin", "expected '<unk>'");
    free(tk);

    /* the output path is a file */
    write_bytes(tpath("afile"), "x", 1);
    expect_fail(WEIGHTS, TOKENIZER, tpath("afile"), "afile", NULL);
}

/* The same weights as a version-1 export ("ak42" header, norms first, no freq_cis) and as a legacy
 * export with a separate classifier. */
static void test_other_layouts(const float *f, const char *ref_dir) {
    size_t parts[][2] = {
        {(size_t)(arr(f, "rms_att") - f), (size_t)NL * D}, {(size_t)(arr(f, "rms_ffn") - f), (size_t)NL * D},
        {(size_t)(arr(f, "rms_final") - f), D},           {0, (size_t)V * D},
        {(size_t)(arr(f, "wq") - f), (size_t)NL * D * D},  {(size_t)(arr(f, "wk") - f), (size_t)NL * KV * D},
        {(size_t)(arr(f, "wv") - f), (size_t)NL * KV * D}, {(size_t)(arr(f, "wo") - f), (size_t)NL * D * D},
        {(size_t)(arr(f, "w1") - f), (size_t)NL * HID * D}, {(size_t)(arr(f, "w2") - f), (size_t)NL * D * HID},
        {(size_t)(arr(f, "w3") - f), (size_t)NL * HID * D},
    };
    size_t total = 0;
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) total += parts[i][1];
    unsigned char *v1 = calloc(1, 256 + total * 4);
    int32_t hdr[9] = {0x616b3432, 1, D, HID, NL, NH, NKV, V, SEQ};
    memcpy(v1, hdr, sizeof hdr);
    v1[36] = 1; /* shared classifier */
    size_t o = 256;
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        memcpy(v1 + o, f + parts[i][0], parts[i][1] * 4);
        o += parts[i][1] * 4;
    }
    write_bytes(tpath("v1.bin"), v1, o);
    free(v1);
    flint_err err = {0};
    const char *out = tpath("out_v1");
    CHECKF(flint_convert_llama2c(tpath("v1.bin"), TOKENIZER, out, &err) == 0, "%s", err.msg);
    char a[600], b[600];
    snprintf(a, sizeof a, "%s/model.safetensors", out);
    snprintf(b, sizeof b, "%s/model.safetensors", ref_dir);
    CHECK(files_equal(a, b));

    /* legacy with an unshared classifier: negative vocab_size, wcls after freq_cis */
    size_t legacy = (size_t)(arr(f, "freq") - f) + (size_t)SEQ * HS;
    unsigned char *u = malloc(28 + (legacy + (size_t)V * D) * 4);
    int32_t h0[7] = {D, HID, NL, NH, NKV, -V, SEQ};
    memcpy(u, h0, 28);
    memcpy(u + 28, f, legacy * 4);
    float *wcls = (float *)(u + 28 + legacy * 4);
    for (size_t i = 0; i < (size_t)V * D; i++) wcls[i] = f[i] * 0.5f;
    write_bytes(tpath("unshared.bin"), u, 28 + (legacy + (size_t)V * D) * 4);
    out = tpath("out_unshared");
    CHECKF(flint_convert_llama2c(tpath("unshared.bin"), TOKENIZER, out, &err) == 0, "%s", err.msg);
    check_tensors(out, f, 0);
    check_config(out, 0);
    flint_st *st = flint_st_open_dir(out, &err);
    int64_t emb[2] = {V, D};
    CHECK(st && same_floats(flint_st_expect(st, "lm_head.weight", 2, emb, &err), wcls, (size_t)V * D));
    flint_st_close(st);
    free(u);
}

/* ==== the CLI ==== */

static const char *flint_binary(void) {
    const char *e = getenv("FLINT_TEST_BINARY"); /* to test another build of the binary */
    return e && *e ? e : FLINT_BINARY;
}

static int run_cli(const char *const *args) {
    const char *argv[16];
    int n = 0;
    argv[n++] = flint_binary();
    for (; *args && n < 15; args++) argv[n++] = *args;
    argv[n] = NULL;
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(tpath("cli.log"), O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) dup2(fd, 1), dup2(fd, 2);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) < 0) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void test_cli(void) {
    if (access(flint_binary(), X_OK) != 0) {
        CHECKF(0, "flint binary %s is missing", flint_binary());
        return;
    }
    const char *out = tpath("cli_out");
    const char *ok[] = {"convert", "llama2c", "--weights", WEIGHTS, "--tokenizer", TOKENIZER, "--out", out, NULL};
    CHECK(run_cli(ok) == 0);
    char cfg[600];
    snprintf(cfg, sizeof cfg, "%s/config.json", out);
    CHECK(file_size(cfg) > 0);
    const char *missing_tok[] = {"convert", "llama2c", "--weights", WEIGHTS, "--tokenizer", tpath("none.bin"),
                                 "--out", out, NULL};
    CHECK(run_cli(missing_tok) == 1);
    const char *trunc[] = {"convert", "llama2c", "--weights", tpath("trunc.bin"), "--tokenizer", TOKENIZER,
                           "--out", out, NULL};
    CHECK(run_cli(trunc) == 1);
    const char *none[] = {"convert", NULL};
    CHECK(run_cli(none) == 2);
    const char *fmt[] = {"convert", "gguf", "--weights", WEIGHTS, NULL};
    CHECK(run_cli(fmt) == 2);
    const char *partial[] = {"convert", "llama2c", "--weights", WEIGHTS, NULL};
    CHECK(run_cli(partial) == 2);
    const char *noval[] = {"convert", "llama2c", "--weights", NULL};
    CHECK(run_cli(noval) == 2);
    const char *unknown[] = {"convert", "llama2c", "--bogus", "x", NULL};
    CHECK(run_cli(unknown) == 2);
    const char *help[] = {"convert", "--help", NULL};
    CHECK(run_cli(help) == 0);
}

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(p);
}

int main(void) {
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    size_t bin_len = 0, tok_len = 0;
    flint_err err = {0};
    char *bin = flint_file_read(WEIGHTS, 1u << 26, &bin_len, &err);
    char *tok = bin ? flint_file_read(TOKENIZER, 1u << 20, &tok_len, &err) : NULL;
    CHECKF(bin && tok, "%s", err.msg);
    if (!bin || !tok) return test_report("test_convert");
    CHECK(bin_len == 1056540 && tok_len == 6227);
    const float *f = (const float *)(bin + 28);

    const char *out = tpath("nested/stories260K"); /* parents are created */
    CHECKF(flint_convert_llama2c(WEIGHTS, TOKENIZER, out, &err) == 0, "%s", err.msg);
    check_tensors(out, f, 1);
    check_config(out, 1);
    check_tokenizer(out);
    /* converting again over the same directory replaces the files with identical ones */
    CHECKF(flint_convert_llama2c(WEIGHTS, TOKENIZER, tpath("again"), &err) == 0, "%s", err.msg);
    CHECKF(flint_convert_llama2c(WEIGHTS, TOKENIZER, out, &err) == 0, "%s", err.msg);
    char a[600], b[600];
    const char *files[] = {"model.safetensors", "config.json", "tokenizer.json", "tokenizer_config.json"};
    for (int i = 0; i < 4; i++) {
        snprintf(a, sizeof a, "%s/%s", out, files[i]);
        snprintf(b, sizeof b, "%s/%s", tpath("again"), files[i]);
        CHECKF(files_equal(a, b), "%s differs between two conversions", files[i]);
    }

    test_bad_inputs(bin, bin_len, tok, tok_len);
    test_other_layouts(f, out);
    test_cli();
    free(bin);
    free(tok);
    if (!test_failed) nftw(tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    else fprintf(stderr, "files kept in %s\n", tmpdir);
    return test_report("test_convert");
}
