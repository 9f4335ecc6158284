/* The C drafter against the PyTorch reference drafter (tools/make_drafter_golden.py): base logits,
 * Markov-corrected logits, confidences and greedy drafts for several anchors, in the DeepSpec dense
 * format and its speculators twins (full vocabulary, reduced vocabulary with d2t, fill-in layout);
 * plus validation errors, probabilistic drafting and batch invariance. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/json.h"
#include "drafter/drafter.h"
#include "test.h"

#define FIX FLINT_SOURCE_DIR "/tests/fixtures/drafter"
#define TGT FLINT_SOURCE_DIR "/tests/fixtures/golden/qwen3"

static cJSON *ref;
static flint_target *tgt;
static int32_t table[64];
static const int32_t *tables[2];
static int32_t table2[64];

static double max_rel(const float *got, const cJSON *want, int n, int off) {
    double mx = 0, scale = 0;
    for (int i = 0; i < n; i++) {
        double w = cJSON_GetArrayItem(want, off + i)->valuedouble;
        if (fabs(w) > scale) scale = fabs(w);
    }
    for (int i = 0; i < n; i++) {
        double w = cJSON_GetArrayItem(want, off + i)->valuedouble;
        double e = fabs(got[i] - w) / (scale > 0 ? scale : 1);
        if (e > mx) mx = e;
    }
    return mx;
}

/* Prefill the prompt through the target with the drafter's taps and encode every row. */
static void encode_prompt(flint_drafter *d, const int32_t *bt, int seq_index) {
    const flint_drafter_config *c = flint_drafter_get_config(d);
    const cJSON *pr = cJSON_GetObjectItem(ref, "prompt");
    int n = cJSON_GetArraySize(pr), H = c->hidden_size;
    int32_t tok[64], pos[64], rs[64], taps_l[FLINT_DRAFT_MAX_TAPS];
    for (int i = 0; i < n; i++) tok[i] = cJSON_GetArrayItem(pr, i)->valueint, pos[i] = i, rs[i] = 0;
    for (int i = 0; i < c->n_taps; i++) taps_l[i] = c->tap_layers[i];
    float *taps = malloc(sizeof(float) * n * c->n_taps * H);
    const int32_t *one[1] = {bt};
    flint_err err = {0};
    flint_target_batch b = {.n_rows = n, .tokens = tok, .pos = pos, .row_seq = rs, .n_seqs = 1, .block_tables = one,
                            .n_taps = c->n_taps, .tap_layers = taps_l, .taps = taps};
    CHECKF(flint_target_forward(tgt, &b, &err) == 0, "%s", err.msg);
    flint_drafter_ctx_batch cb = {.n_rows = n, .taps = taps, .pos = pos, .row_seq = rs, .n_seqs = 1, .block_tables = one};
    /* refused before anything is written: source rows without device taps, device taps on the CPU */
    flint_drafter_ctx_batch bad = cb;
    bad.src_rows = rs;
    CHECKF(flint_drafter_encode(d, &bad, &err) == -1 && err.code == FLINT_ERR_INVALID && strstr(err.msg, "src_rows"),
           "src_rows without device taps: %s", err.msg);
    bad = cb;
    bad.taps = NULL;
    bad.taps_device = taps;
    CHECKF(flint_drafter_encode(d, &bad, &err) == -1 && err.code == FLINT_ERR_INVALID,
           "device taps given to the CPU drafter: %s", err.msg);
    /* a table entry outside the pool (8 blocks: 2 sequences x 64 tokens / 16) in the block only the
     * last rows read: found, though each sequence's table is checked once, up to its furthest row;
     * and with the rows of two sequences interleaved (each switch checks from the start again) */
    if (n > 16) {
        int32_t badt[4];
        for (int k = 0; k < 4; k++) badt[k] = bt[k];
        badt[(n - 1) / 16] = 8;
        const int32_t *badone[2] = {badt, bt};
        bad = cb;
        bad.block_tables = badone;
        err = (flint_err){0};
        CHECKF(flint_drafter_encode(d, &bad, &err) == -1 && err.code == FLINT_ERR_INVALID &&
                   strstr(err.msg, "outside the pool"),
               "a bad entry in the last rows' block: %s", err.msg);
        int32_t rs2[64];
        for (int i = 0; i < n; i++) rs2[i] = (i + 1) % 2; /* sequence 1 (good), 0 (bad), 1, .. */
        bad.row_seq = rs2;
        bad.n_seqs = 2;
        err = (flint_err){0};
        CHECKF(flint_drafter_encode(d, &bad, &err) == -1 && err.code == FLINT_ERR_INVALID &&
                   strstr(err.msg, "outside the pool"),
               "a bad entry, two sequences' rows interleaved: %s", err.msg);
    }
    err = (flint_err){0};
    CHECKF(flint_drafter_encode(d, &cb, &err) == 0, "%s", err.msg);
    (void)seq_index;
    free(taps);
}

/* Compare one drafter against the reference cases. fillin: compare the fill-in reading.
 * keep: reduced vocabulary (NULL = full). */
static void check_against_reference(const char *dir, int fillin, const cJSON *keep) {
    flint_err err = {0};
    flint_drafter *d = flint_drafter_open(dir, tgt, NULL, &err);
    CHECKF(d != NULL, "%s: %s", dir, err.msg);
    if (!d) return;
    const flint_drafter_config *c = flint_drafter_get_config(d);
    int B = c->block_size, K = c->max_draft, V = c->vocab_size, Vd = c->draft_vocab_size;
    CHECK(K == (fillin ? B - 1 : B));
    encode_prompt(d, table, 0);
    int32_t toks[16];
    float conf[16];
    float *lg = malloc(sizeof(float) * K * Vd), *base = malloc(sizeof(float) * K * Vd);
    const cJSON *cs = cJSON_GetObjectItem(ref, "cases"), *cs_i;
    double worst = 0;
    cJSON_ArrayForEach(cs_i, cs) {
        flint_drafter_req rq = {.anchor = cJSON_GetObjectItem(cs_i, "anchor")->valueint,
                                .pos = cJSON_GetObjectItem(cs_i, "pos")->valueint, .seq = 0, .n_draft = K,
                                .temperature = 0, .greedy = 1, .seed = 1};
        flint_drafter_out out = {.tokens = toks, .confidence = conf, .logits = lg, .base_logits = base};
        /* drafts left on the device: a CUDA drafter's mode, refused on the CPU */
        flint_drafter_out dev = {.tokens_on_device = 1};
        CHECKF(flint_drafter_draft(d, 1, &rq, tables, 1, &dev, &err) == -1 && err.code == FLINT_ERR_INVALID &&
                   strstr(err.msg, "CUDA drafter"),
               "tokens_on_device on the CPU drafter: %s", err.msg);
        err = (flint_err){0};
        CHECKF(flint_drafter_draft(d, 1, &rq, tables, 1, &out, &err) == 0, "%s", err.msg);
        const cJSON *wl = cJSON_GetObjectItem(cs_i, fillin ? "fillin_logits" : "logits");
        const cJSON *wc = cJSON_GetObjectItem(cs_i, fillin ? "fillin_confidence" : "confidence");
        const cJSON *wd = cJSON_GetObjectItem(cs_i, fillin ? "fillin_drafts" : "drafts");
        const cJSON *wb = cJSON_GetObjectItem(cs_i, "base_logits");
        for (int k = 0; k < K; k++) {
            if (!keep) {
                double e1 = max_rel(lg + (size_t)k * V, wl, V, k * V);
                double e2 = max_rel(base + (size_t)k * V, wb, V, (k + fillin) * V);
                if (e1 > worst) worst = e1;
                if (e2 > worst) worst = e2;
                CHECKF(e1 < 1e-4 && e2 < 1e-4, "%s pos %d slot %d: logits rel err %.2e, base %.2e", dir, rq.pos, k, e1, e2);
                CHECKF(toks[k] == cJSON_GetArrayItem(wd, k)->valueint, "%s pos %d slot %d: draft %d want %d", dir,
                       rq.pos, k, toks[k], cJSON_GetArrayItem(wd, k)->valueint);
                CHECKF(fabs(conf[k] - cJSON_GetArrayItem(wc, k)->valuedouble) < 1e-4, "%s: confidence %f want %f", dir,
                       conf[k], cJSON_GetArrayItem(wc, k)->valuedouble);
            } else if (k == 0 || toks[k - 1] == cJSON_GetArrayItem(wd, k - 1)->valueint) {
                /* same chain so far: reduced logits are the dense logits at the kept ids */
                double mx = 0, sc = 0;
                int best = 0;
                for (int i = 0; i < Vd; i++) {
                    int id = cJSON_GetArrayItem(keep, i)->valueint;
                    double w = cJSON_GetArrayItem(wl, k * V + id)->valuedouble;
                    if (fabs(w) > sc) sc = fabs(w);
                    if (w > cJSON_GetArrayItem(wl, k * V + cJSON_GetArrayItem(keep, best)->valueint)->valuedouble) best = i;
                    double e = fabs(lg[(size_t)k * Vd + i] - w);
                    if (e > mx) mx = e;
                }
                CHECKF(mx / sc < 1e-4, "reduced vocab slot %d: rel err %.2e", k, mx / sc);
                CHECKF(toks[k] == cJSON_GetArrayItem(keep, best)->valueint, "reduced vocab slot %d: draft %d want %d", k,
                       toks[k], cJSON_GetArrayItem(keep, best)->valueint);
            }
        }
    }
    printf("%s: max relative error %.2e\n", dir, worst);
    free(lg);
    free(base);
    flint_drafter_close(d);
}

static void test_sampling_and_batching(void) {
    flint_err err = {0};
    flint_drafter *d = flint_drafter_open(FIX "/dense", tgt, NULL, &err);
    CHECKF(d != NULL, "%s", err.msg);
    if (!d) return;
    const flint_drafter_config *c = flint_drafter_get_config(d);
    int K = c->max_draft, V = c->vocab_size;
    encode_prompt(d, table, 0);
    /* a second sequence with the same prompt in other blocks */
    encode_prompt(d, table2, 1);
    float *q = malloc(sizeof(float) * 2 * K * V), *lg = malloc(sizeof(float) * 2 * K * V);
    int32_t t1[16], t2[32];
    flint_drafter_req rq = {.anchor = 17, .pos = 20, .seq = 0, .n_draft = K, .temperature = 0.8f, .seed = 99};
    flint_drafter_out o1 = {.tokens = t1, .q = q, .logits = lg};
    CHECK(flint_drafter_draft(d, 1, &rq, tables, 2, &o1, &err) == 0);
    for (int k = 0; k < K; k++) {
        double s = 0, e = 0, mx = -1e30, z = 0;
        for (int v = 0; v < V; v++) s += q[k * V + v], mx = fmax(mx, lg[k * V + v] / 0.8);
        for (int v = 0; v < V; v++) z += exp(lg[k * V + v] / 0.8 - mx);
        for (int v = 0; v < V; v++) e = fmax(e, fabs(q[k * V + v] - exp(lg[k * V + v] / 0.8 - mx) / z));
        CHECKF(fabs(s - 1) < 1e-5 && e < 1e-6, "q is not softmax(L/T): sum %f err %g", s, e);
        CHECK(q[k * V + t1[k]] > 0);
    }
    /* the same request inside a batch of two (the other on another sequence) gives the same bits */
    flint_drafter_req two[2] = {{.anchor = 5, .pos = 11, .seq = 1, .n_draft = K, .temperature = 1.0f, .seed = 3}, rq};
    float *q2 = malloc(sizeof(float) * 2 * K * V);
    flint_drafter_out o2 = {.tokens = t2, .q = q2};
    CHECK(flint_drafter_draft(d, 2, two, tables, 2, &o2, &err) == 0);
    CHECK(!memcmp(t2 + K, t1, sizeof(int32_t) * K));
    CHECK(!memcmp(q2 + (size_t)K * V, q, sizeof(float) * K * V));
    /* another seed draws other tokens somewhere in 20 tries */
    int differs = 0;
    for (uint64_t s = 1; s <= 20 && !differs; s++) {
        flint_drafter_req r2 = rq;
        r2.seed = 1000 + s;
        int32_t t3[16];
        flint_drafter_out o3 = {.tokens = t3};
        flint_drafter_draft(d, 1, &r2, tables, 2, &o3, &err);
        differs = memcmp(t3, t1, sizeof(int32_t) * K) != 0;
    }
    CHECK(differs);
    /* bad requests */
    flint_drafter_req bad = rq;
    bad.n_draft = K + 1;
    CHECK(flint_drafter_draft(d, 1, &bad, tables, 2, &o1, &err) == -1 && strstr(err.msg, "drafts"));
    bad = rq;
    bad.anchor = V;
    CHECK(flint_drafter_draft(d, 1, &bad, tables, 2, &o1, &err) == -1 && strstr(err.msg, "anchor"));
    bad = rq;
    bad.seq = 5;
    CHECK(flint_drafter_draft(d, 1, &bad, tables, 2, &o1, &err) == -1 && strstr(err.msg, "seq"));
    free(q);
    free(q2);
    free(lg);
    flint_drafter_close(d);
}

/* A copy of dense/ whose config.json has one field replaced by `patch` (a JSON object merged in). */
static void expect_refused(const char *src, const char *patch, const char *want) {
    char dir[] = "/tmp/flint_drafter_XXXXXX", path[512], srcf[512];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(srcf, sizeof srcf, "%s/model.safetensors", src);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    CHECK(symlink(srcf, path) == 0);
    flint_err err = {0};
    snprintf(srcf, sizeof srcf, "%s/config.json", src);
    cJSON *cfg = flint_json_load_file(srcf, 1 << 20, &err), *p = cJSON_Parse(patch), *it;
    cJSON_ArrayForEach(it, p) {
        cJSON_DeleteItemFromObject(cfg, it->string);
        cJSON_AddItemToObject(cfg, it->string, cJSON_Duplicate(it, 1));
    }
    char *txt = cJSON_Print(cfg);
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    fputs(txt, f);
    fclose(f);
    free(txt);
    cJSON_Delete(cfg);
    cJSON_Delete(p);
    flint_drafter *d = flint_drafter_open(dir, tgt, NULL, &err);
    CHECKF(!d && strstr(err.msg, want), "patch %s: want an error with '%s', got '%s'", patch, want, d ? "(opened)" : err.msg);
    flint_drafter_close(d);
    unlink(path);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    unlink(path);
    rmdir(dir);
}

static void test_validation(void) {
    expect_refused(FIX "/dense", "{\"target_layer_ids\": [0, 2]}", "last layer");
    expect_refused(FIX "/dense", "{\"target_layer_ids\": [1, 0]}", "increasing");
    expect_refused(FIX "/dense", "{\"target_layer_ids\": [-1, 1]}", "embedding");
    expect_refused(FIX "/dense", "{\"vocab_size\": 600}", "vocab_size");
    expect_refused(FIX "/dense", "{\"hidden_size\": 32}", "hidden_size");
    expect_refused(FIX "/dense", "{\"mask_token_id\": 512}", "mask_token_id");
    expect_refused(FIX "/dense", "{\"architectures\": [\"Qwen3ForCausalLM\"]}", "not a DSpark drafter");
    expect_refused(FIX "/dense", "{\"markov_rank\": 32}", "markov_w1");
    expect_refused(FIX "/dense", "{\"block_size\": 40}", "block_size");
    expect_refused(FIX "/spec_full", "{\"speculators_model_type\": \"eagle3\"}", "eagle3");
    expect_refused(FIX "/spec_full", "{\"aux_hidden_state_layer_ids\": [0, 1]}", "embedding");
    expect_refused(FIX "/spec_full", "{\"aux_hidden_state_layer_ids\": [2, 3]}", "layer ids + 1");
    expect_refused(FIX "/spec_reduced", "{\"draft_vocab_size\": 400}", "lm_head.weight");
    flint_err err = {0};
    CHECK(flint_drafter_open(FIX "/nope", tgt, NULL, &err) == NULL && strstr(err.msg, "config.json"));
}

int main(void) {
    flint_err err = {0};
    ref = flint_json_load_file(FIX "/reference.json", 1 << 24, &err);
    CHECKF(ref != NULL, "%s", err.msg);
    flint_target_options to;
    flint_target_options_default(&to);
    to.max_seqs = 2;
    to.max_len = 64;
    tgt = flint_target_open(TGT, &to, &err);
    CHECKF(tgt != NULL, "%s", err.msg);
    if (!ref || !tgt) return test_report("test_drafter");
    for (int i = 0; i < 4; i++) table[i] = i, table2[i] = 7 - i; /* 64 tokens / block 16 = 4 blocks */
    tables[0] = table;
    tables[1] = table2;
    check_against_reference(FIX "/dense", 0, NULL);
    check_against_reference(FIX "/spec_full", 0, NULL);
    check_against_reference(FIX "/spec_fillin", 1, NULL);
    check_against_reference(FIX "/spec_reduced", 0, cJSON_GetObjectItem(ref, "reduced_keep"));
    test_sampling_and_batching();
    test_validation();
    flint_target_close(tgt);
    cJSON_Delete(ref);
    return test_report("test_drafter");
}
