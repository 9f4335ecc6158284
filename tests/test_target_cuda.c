/* The CUDA target forward (target/forward_cuda.cu) against the fp32 CPU forward, and the
 * speculative engine with its target on the GPU. Label cuda: run on the GPU machine by
 * tools/device/engine_tests.sh (a binary built on the CPU machine, its libraries carried).
 *
 *  - logits and taps, CUDA vs CPU, on the embedded model (flint-tiny) and the two golden
 *    fixtures (Qwen3 and Llama, whose CPU logits equal transformers' within 1.2e-6): one batch
 *    mixing prefill chunks of three sequences, then verify blocks of 8 rows, then decode rows.
 *    The CUDA path rounds activations to bf16 (ops_cuda.h), so the bound is per row:
 *    max |cuda - cpu| <= 0.05 x max |cpu| + 0.05 (taps: 0.05 x max + 0.01), and an argmax may
 *    differ only where the CPU's top-two margin is within twice that row's error (a near-tie). A
 *    wrong kernel misses by O(1). Measured on the H200 (2026-11-29): flint-tiny at 0.15 of the
 *    bound; the random-weight golden models, whose activations are less regular, at up to 0.84
 *    (Llama: 0.28 on logits of magnitude 5.7; taps 1.47 of 43.6).
 *  - batch invariance on the GPU: a row's logits alone equal its logits inside the batch, bit for
 *    bit; and the forward replayed from captured graphs (rows padded to a bucket) equals the eager
 *    forward (enforce_eager) bit for bit, logits and taps;
 *  - the engine on the embedded pair with the target, the drafter and the step's decisions on the
 *    GPU: greedy speculative output equals greedy target-only output, token for token, for
 *    K = 1..7 and batch sizes 1, 2, 8, 32 and 64 (64 GSM8K prompts x 64 tokens), and target-only
 *    output does not depend on the batch size; seeded sampled requests (three filter settings,
 *    K = 7 and target-only) give the same tokens with the decisions on the GPU and on the host;
 *  - the one-graph step (#8), on the embedded pair and on the golden Qwen3 fixture with a random
 *    drafter (tests/fixtures/golden/qwen3-dspark): seeded sampled requests give the same tokens
 *    and statistics with the step replayed from its graph and launched eagerly, at 14 batch sizes
 *    (every request bucket 1..8, 16, 32, 64 and sizes between) x K = 1..7, and as one graph and
 *    as separate launches; greedy output of the golden pair equals its target-only output at
 *    batch 1, 3, 8, 16, 64 x K = 1..7; no step graph is captured after open.
 * usage: test_target_cuda [SOURCE_DIR]   (the repository root; default: where it was built) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "core/json.h"
#include "core/tokenizer.h"
#include "target/target.h"
#include "test.h"
#include "verifier/engine.h"

static const char *SRC = FLINT_SOURCE_DIR;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t rs = 88172645463325252ull;
static uint32_t rnd(void) {
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return (uint32_t)(rs >> 11);
}

/* ==== target level ==== */

enum { N_SEQ = 3, MAX_LEN = 512 };

typedef struct pair {
    flint_target *cpu, *gpu, *eager; /* gpu replays captured graphs; eager launches every kernel */
    const flint_target_config *c;
    int32_t *tables[N_SEQ];
    int len[N_SEQ];
} pair;

static int open_pair(pair *p, const char *dir) {
    memset(p, 0, sizeof *p);
    flint_target_options o;
    flint_target_options_default(&o);
    o.max_seqs = N_SEQ + 1;
    o.max_rows = 512;
    flint_target_config cfg;
    flint_err err = {0};
    if (flint_target_config_load(dir, &cfg, &err)) {
        CHECKF(0, "%s", err.msg);
        return -1;
    }
    o.max_len = cfg.max_position_embeddings < MAX_LEN ? cfg.max_position_embeddings : MAX_LEN;
    p->cpu = flint_target_open(dir, &o, &err);
    CHECKF(p->cpu != NULL, "%s", err.msg);
    o.device = FLINT_TARGET_CUDA;
    p->gpu = flint_target_open(dir, &o, &err);
    CHECKF(p->gpu != NULL, "%s", err.msg);
    o.enforce_eager = 1;
    p->eager = flint_target_open(dir, &o, &err);
    CHECKF(p->eager != NULL, "%s", err.msg);
    if (!p->cpu || !p->gpu || !p->eager) return -1;
    p->c = flint_target_get_config(p->cpu);
    int per = (o.max_len + o.kv_block_size - 1) / o.kv_block_size;
    for (int s = 0; s < N_SEQ; s++) {
        p->tables[s] = malloc(sizeof(int32_t) * (size_t)per);
        for (int k = 0; k < per; k++) p->tables[s][k] = (N_SEQ - 1 - s) * per + k; /* not the identity */
    }
    printf("%s: device memory %.1f MiB\n", dir, (double)flint_target_device_bytes(p->gpu) / (1 << 20));
    return 0;
}

static void close_pair(pair *p) {
    flint_target_close(p->cpu);
    flint_target_close(p->gpu);
    flint_target_close(p->eager);
    for (int s = 0; s < N_SEQ; s++) free(p->tables[s]);
}

/* One forward of n rows per sequence on both backends; compares logits of every row and taps. */
static void step_both(pair *p, const char *name, const int *n_new, float *worst_ratio) {
    int V = p->c->vocab_size, H = p->c->hidden_size, R = 0;
    int32_t tok[512], pos[512], seq[512], rows[512];
    for (int s = 0; s < N_SEQ; s++)
        for (int i = 0; i < n_new[s]; i++, R++) {
            tok[R] = (int32_t)(rnd() % (uint32_t)V);
            pos[R] = p->len[s] + i;
            seq[R] = s;
            rows[R] = R;
        }
    for (int s = 0; s < N_SEQ; s++) p->len[s] += n_new[s];
    int32_t taps_l[2] = {0, p->c->n_layers - 1};
    float *lc = malloc(sizeof(float) * (size_t)R * V), *lg = malloc(sizeof(float) * (size_t)R * V);
    float *tc = malloc(sizeof(float) * (size_t)R * 2 * H), *tg = malloc(sizeof(float) * (size_t)R * 2 * H);
    flint_target_batch b = {R, tok, pos, seq, N_SEQ, (const int32_t *const *)p->tables, R, rows, lc, 2, taps_l, tc};
    flint_err err = {0};
    CHECKF(flint_target_forward(p->cpu, &b, &err) == 0, "%s", err.msg);
    b.logits = lg;
    b.taps = tg;
    double t0 = now_s();
    CHECKF(flint_target_forward(p->gpu, &b, &err) == 0, "%s", err.msg);
    double dt = now_s() - t0;
    /* graphs (rows padded to a bucket, attention bound rounded up) == eager, bit for bit */
    float *le = malloc(sizeof(float) * (size_t)R * V), *te = malloc(sizeof(float) * (size_t)R * 2 * H);
    b.logits = le;
    b.taps = te;
    CHECKF(flint_target_forward(p->eager, &b, &err) == 0, "%s", err.msg);
    CHECKF(!memcmp(le, lg, sizeof(float) * (size_t)R * V) && !memcmp(te, tg, sizeof(float) * (size_t)R * 2 * H),
           "%s: the captured forward differs from the eager one", name);
    free(le), free(te);
    int bad = 0, flips = 0, nonfinite = 0;
    double max_abs = 0, max_ratio = 0;
    for (int r = 0; r < R; r++) {
        const float *a = lc + (size_t)r * V, *g = lg + (size_t)r * V;
        double mx = 0, d = 0;
        int ia = 0, ig = 0;
        for (int v = 0; v < V; v++) {
            if (!isfinite(g[v])) nonfinite++;
            if (fabs(a[v]) > mx) mx = fabs(a[v]);
            double e = fabs((double)a[v] - g[v]);
            if (e > d) d = e;
            if (a[v] > a[ia]) ia = v;
            if (g[v] > g[ig]) ig = v;
        }
        double lim = 0.05 * mx + 0.05;
        if (d > max_abs) max_abs = d;
        if (d / lim > max_ratio) max_ratio = d / lim;
        if (d > lim) bad++;
        if (ia != ig) {
            flips++;
            if (a[ia] - a[ig] > 2 * d) bad++;
        }
    }
    double tap_err = 0, tap_mx = 0;
    for (size_t i = 0; i < (size_t)R * 2 * H; i++) {
        if (fabs(tc[i]) > tap_mx) tap_mx = fabs(tc[i]);
        if (fabs(tc[i] - tg[i]) > tap_err) tap_err = fabs(tc[i] - tg[i]);
    }
    printf("  %-26s %3d rows: logits max|diff| %.4f (%.2f of the bound), %d argmax flips at near-ties, taps max|diff| "
           "%.4f of max %.2f; GPU forward %.2f ms\n", name, R, max_abs, max_ratio, flips, tap_err, tap_mx, dt * 1e3);
    CHECKF(bad == 0 && nonfinite == 0, "%s: %d rows over the bound or argmax flips beyond near-ties, %d non-finite",
           name, bad, nonfinite);
    CHECKF(tap_err <= 0.05 * tap_mx + 0.01, "%s: taps differ by %.4f (max %.3f)", name, tap_err, tap_mx);
    if (max_ratio > *worst_ratio) *worst_ratio = (float)max_ratio;

    /* batch invariance on the GPU: the last row again, alone (same position, same KV state) */
    int last = R - 1;
    flint_target_batch one = {1, tok + last, pos + last, seq + last, N_SEQ, (const int32_t *const *)p->tables, 1,
                              rows, lc, 0, NULL, NULL};
    CHECKF(flint_target_forward(p->gpu, &one, &err) == 0, "%s", err.msg);
    CHECKF(!memcmp(lc, lg + (size_t)last * V, sizeof(float) * (size_t)V),
           "%s: a row alone differs from the same row in a batch of %d on the GPU", name, R);
    free(lc), free(lg), free(tc), free(tg);
}

static void test_model(const char *dir) {
    pair p;
    if (open_pair(&p, dir)) return;
    float worst = 0;
    int pre[N_SEQ] = {37, 100, 5}, ver[N_SEQ] = {8, 8, 8}, dec[N_SEQ] = {1, 1, 1}, mix[N_SEQ] = {1, 8, 61};
    step_both(&p, "prefill 37/100/5", pre, &worst);
    step_both(&p, "verify blocks of 8", ver, &worst);
    step_both(&p, "decode", dec, &worst);
    step_both(&p, "mixed decode/verify/chunk", mix, &worst);
    flint_target_graph_info gi;
    flint_target_graph_stats(p.gpu, &gi);
    printf("  worst logit error %.2f of the bound; %d graphs captured in %.3f s (graph == eager checked per step)\n",
           worst, (int)gi.n_captures, gi.capture_s);
    CHECKF(gi.n_captures > 0, "no forward was captured");
    close_pair(&p);
}

/* ==== engine level: greedy speculation with the target on the GPU ==== */

enum { N_PROMPTS = 64, GEN = 64 };

static int load_prompts(const flint_tokenizer *tok, int32_t **ids, int *n) {
    char path[4096];
    snprintf(path, sizeof path, "%s/evals/data/gsm8k.jsonl", SRC);
    FILE *f = fopen(path, "r");
    CHECKF(f != NULL, "cannot open %s", path);
    if (!f) return -1;
    char line[16384];
    int k = 0;
    while (k < N_PROMPTS && fgets(line, sizeof line, f)) {
        cJSON *j = cJSON_Parse(line);
        const cJSON *turns = j ? cJSON_GetObjectItemCaseSensitive(j, "turns") : NULL;
        const cJSON *q = cJSON_IsArray(turns) ? cJSON_GetArrayItem(turns, 0) : NULL;
        if (cJSON_IsString(q)) {
            char text[16384 + 128];
            snprintf(text, sizeof text, "<|im_start|>user\n%s<|im_end|>\n<|im_start|>assistant\n", q->valuestring);
            flint_err err = {0};
            if (flint_tokenizer_encode(tok, text, strlen(text), 0, &ids[k], &n[k], &err) == 0) k++;
        }
        cJSON_Delete(j);
    }
    fclose(f);
    return k == N_PROMPTS ? 0 : -1;
}

/* Runs prompts [0, n) through the engine, batch at a time; out[i] gets GEN tokens. */
static const flint_sampling_params *run_sampling; /* NULL: greedy; else prompt i gets seed + i */

static int run(flint_engine *e, int32_t **ids, const int *n_ids, int n, int batch, int spec, int K, int32_t out[][GEN],
               flint_spec_stats *st) {
    int next = 0, done = 0, sid_of[4096];
    int have[N_PROMPTS] = {0};
    for (int i = 0; i < 4096; i++) sid_of[i] = -1;
    memset(st, 0, sizeof *st);
    while (done < n) {
        while (next < n && flint_engine_active(e) < batch) {
            flint_request_params p;
            flint_request_params_default(&p);
            p.sampling.temperature = 0;
            if (run_sampling) {
                p.sampling = *run_sampling;
                p.sampling.seed = run_sampling->seed + (uint64_t)next;
            }
            p.max_tokens = GEN;
            p.ignore_eos = 1;
            p.speculative = spec;
            p.max_draft = K;
            flint_err err = {0};
            int sid = flint_engine_add(e, ids[next], n_ids[next], &p, &err);
            if (sid < 0 && err.code == FLINT_ERR_NOMEM) break;
            if (sid < 0 || sid >= 4096) {
                CHECKF(0, "engine add: %s", err.msg);
                return -1;
            }
            sid_of[sid] = next++;
        }
        const flint_step_event *ev;
        int n_ev = 0;
        flint_err err = {0};
        if (flint_engine_step(e, &ev, &n_ev, &err)) {
            CHECKF(0, "engine step: %s", err.msg);
            return -1;
        }
        for (int k = 0; k < n_ev; k++) {
            int i = sid_of[ev[k].sid];
            for (int t = 0; t < ev[k].n_tokens && have[i] < GEN; t++) out[i][have[i]++] = ev[k].tokens[t];
            if (ev[k].finish != FLINT_FINISH_NONE) {
                if (ev[k].stats) flint_spec_stats_add(st, ev[k].stats);
                sid_of[ev[k].sid] = -1;
                done++;
            }
        }
    }
    return 0;
}

/* The embedded pair on the GPU at fixed K = 7 (graphs and eager compare statistics too). */
static void tiny_options(flint_engine_options *o, int max_seqs) {
    static char model[4096], drafter[4096];
    snprintf(model, sizeof model, "%s/models/flint-tiny", SRC);
    snprintf(drafter, sizeof drafter, "%s/models/flint-tiny-dspark", SRC);
    flint_engine_options_default(o);
    o->model_dir = model;
    o->drafter_dir = drafter;
    o->num_speculative_tokens = 7;
    o->dynamic_draft = 0;
    o->max_seqs = max_seqs;
    o->max_model_len = 512;
    o->device = FLINT_TARGET_CUDA;
}

static void test_engine(void) {
    flint_engine_options o;
    tiny_options(&o, 64);
    o.enable_prefix_caching = 0; /* every run recomputes its prompts */
    flint_err err = {0};
    flint_engine *e = flint_engine_open(&o, &err);
    CHECKF(e != NULL, "%s", err.msg);
    if (!e) return;
    int32_t *ids[N_PROMPTS] = {0};
    int n_ids[N_PROMPTS];
    if (load_prompts(flint_engine_tokenizer(e), ids, n_ids)) {
        CHECKF(0, "could not load %d GSM8K prompts", N_PROMPTS);
        flint_engine_close(e);
        return;
    }
    static int32_t plain[N_PROMPTS][GEN], plain1[N_PROMPTS][GEN], spec[N_PROMPTS][GEN];
    flint_spec_stats st;
    double t0 = now_s();
    run(e, ids, n_ids, N_PROMPTS, 64, 0, 0, plain, &st);
    double t_plain = now_s() - t0;
    run(e, ids, n_ids, 8, 1, 0, 0, plain1, &st);
    CHECKF(!memcmp(plain, plain1, sizeof(int32_t) * 8 * GEN), "target-only greedy output depends on the batch size");
    static const int batches[] = {1, 2, 8, 32, 64};
    for (int bi = 0; bi < 5; bi++) {
        int B = batches[bi], n = B < 8 ? 8 : B; /* batch 1 and 2 run 8 prompts, the others B */
        for (int K = 1; K <= 7; K++) {
            t0 = now_s();
            memset(spec, 0xff, sizeof spec);
            run(e, ids, n_ids, n, B, 1, K, spec, &st);
            int same = 0;
            for (int i = 0; i < n; i++) same += !memcmp(spec[i], plain[i], sizeof(int32_t) * GEN);
            printf("  batch %2d K=%d: %2d/%2d prompts identical to target-only greedy; AL %.3f; %.2f s\n", B, K, same,
                   n, flint_spec_stats_mean_al(&st), now_s() - t0);
            CHECKF(same == n, "batch %d K=%d: %d of %d greedy outputs differ from target-only", B, K, n - same, n);
        }
    }
    printf("  target-only, 64 prompts x %d tokens at batch 64: %.2f s\n", GEN, t_plain);

    /* dynamic draft lengths, with a given cost model that makes drafting dear (most steps K = 0,
     * which hold their committed rows' encodes in the drafter until the next drafting step or
     * sequence end; exploring steps draft now and then) and then cheap: greedy output stays
     * target-only's, and the steps were of the kinds intended */
    for (int cheap = 0; cheap < 2; cheap++) {
        flint_engine_options od = o;
        od.dynamic_draft = 1;
        od.dyn_fixed_ms = 0.3, od.dyn_row_ms = 0.001, od.dyn_draft_ms = cheap ? 0.01 : 0.6;
        flint_engine *dy = flint_engine_open(&od, &err);
        CHECKF(dy != NULL, "dynamic engine: %s", err.msg);
        if (!dy) break;
        static const int dyn_batches[] = {1, 8, 64};
        for (int bi = 0; bi < 3; bi++) {
            int B = dyn_batches[bi], n = B < 8 ? 8 : B;
            memset(spec, 0xff, sizeof spec);
            run(dy, ids, n_ids, n, B, 1, 7, spec, &st);
            int same = 0;
            for (int i = 0; i < n; i++) same += !memcmp(spec[i], plain[i], sizeof(int32_t) * GEN);
            printf("  dynamic (drafting %s) batch %2d: %2d/%2d prompts identical to target-only greedy; AL %.3f\n",
                   cheap ? "cheap" : "dear", B, same, n, flint_spec_stats_mean_al(&st));
            CHECKF(same == n, "dynamic, batch %d: %d of %d greedy outputs differ from target-only", B, n - same, n);
        }
        int64_t hist[FLINT_MAX_DRAFT + 1];
        flint_engine_step_k_hist(dy, hist);
        int64_t drafting = 0;
        for (int k = 1; k <= FLINT_MAX_DRAFT; k++) drafting += hist[k];
        printf("  dynamic (drafting %s): %lld steps at K = 0, %lld drafting\n", cheap ? "cheap" : "dear",
               (long long)hist[0], (long long)drafting);
        CHECKF(drafting > 0 && (cheap || hist[0] > 0), "dynamic engine (drafting %s): %lld steps at K = 0, %lld "
               "drafting", cheap ? "cheap" : "dear", (long long)hist[0], (long long)drafting);
        flint_engine_close(dy);
    }

    /* the step's decisions on the GPU (the default) vs on the host from downloaded logits
     * (host_accept): the same tokens for seeded sampled requests, with and without drafts */
    o.host_accept = 1;
    flint_engine *h = flint_engine_open(&o, &err);
    CHECKF(h != NULL, "%s", err.msg);
    static int32_t a[N_PROMPTS][GEN], bb[N_PROMPTS][GEN];
    const flint_sampling_params sps[3] = {{1.0f, 0, 0.9f, 0.0f, 1000}, {0.7f, 40, 1.0f, 0.05f, 2000},
                                          {1.3f, 0, 0.95f, 0.02f, 3000}};
    for (int c = 0; h && c < 6; c++) {
        run_sampling = &sps[c % 3];
        const int spec_on = c < 3;
        memset(a, 0xff, sizeof a), memset(bb, 0xfe, sizeof bb);
        flint_spec_stats sa, sb;
        t0 = now_s();
        run(e, ids, n_ids, N_PROMPTS, 8, spec_on, 7, a, &sa);
        double t_dev = now_s() - t0;
        t0 = now_s();
        run(h, ids, n_ids, N_PROMPTS, 8, spec_on, 7, bb, &sb);
        double t_host = now_s() - t0;
        int same = 0;
        for (int i = 0; i < N_PROMPTS; i++) same += !memcmp(a[i], bb[i], sizeof(int32_t) * GEN);
        printf("  sampled T=%.1f top_k %d top_p %.2f min_p %.2f, %s, batch 8: GPU decisions == host decisions for "
               "%d/%d prompts (AL %.3f / %.3f; %.2f s vs %.2f s)\n", sps[c % 3].temperature, sps[c % 3].top_k,
               sps[c % 3].top_p, sps[c % 3].min_p, spec_on ? "K = 7" : "target only", same, N_PROMPTS,
               flint_spec_stats_mean_al(&sa), flint_spec_stats_mean_al(&sb), t_dev, t_host);
        CHECKF(same == N_PROMPTS, "GPU and host acceptance differ on %d of %d sampled prompts", N_PROMPTS - same,
               N_PROMPTS);
    }
    /* the taps through host memory (host_taps) vs left on the GPU and gathered there (the
     * default): the drafts, hence the sampled tokens and the acceptance, must not change */
    o.host_accept = 0;
    o.host_taps = 1;
    flint_engine *ht = flint_engine_open(&o, &err);
    CHECKF(ht != NULL, "%s", err.msg);
    for (int c = 0; ht && c < 3; c++) {
        run_sampling = &sps[c];
        memset(a, 0xff, sizeof a), memset(bb, 0xfe, sizeof bb);
        flint_spec_stats sa, sb;
        run(e, ids, n_ids, N_PROMPTS, 8 << (2 * (c & 1)), 1, 7, a, &sa);
        run(ht, ids, n_ids, N_PROMPTS, 8 << (2 * (c & 1)), 1, 7, bb, &sb);
        int same = 0;
        for (int i = 0; i < N_PROMPTS; i++) same += !memcmp(a[i], bb[i], sizeof(int32_t) * GEN);
        printf("  sampled T=%.1f, K = 7, batch %d: taps on the GPU == taps through the host for %d/%d prompts "
               "(AL %.3f / %.3f)\n", sps[c].temperature, 8 << (2 * (c & 1)), same, N_PROMPTS,
               flint_spec_stats_mean_al(&sa), flint_spec_stats_mean_al(&sb));
        CHECKF(same == N_PROMPTS && sa.accepted == sb.accepted && sa.steps == sb.steps,
               "device taps and host taps differ on %d of %d sampled prompts (accepted %lld vs %lld)",
               N_PROMPTS - same, N_PROMPTS, (long long)sa.accepted, (long long)sb.accepted);
    }
    flint_engine_close(ht);
    run_sampling = NULL;
    flint_engine_close(h);
    for (int i = 0; i < N_PROMPTS; i++) free(ids[i]);
    flint_engine_close(e);
}

/* #8: a drafting step as one graph (verifier/step_cuda.c). Seeded sampled requests (T = 1, top-p
 * 0.9) give the same tokens and statistics with the step replayed from its graph and launched
 * eagerly (enforce_eager: the same kernels without any graph) at 14 batch sizes 1..64 and
 * K = 1..7, and with the step as one graph and as separate launches (split_step), which encode
 * only the committed rows; the graph engine captures nothing after open. */
static int same_stats(const flint_spec_stats *a, const flint_spec_stats *b) {
    return a->steps == b->steps && a->draft_tokens == b->draft_tokens && a->accepted == b->accepted &&
           a->emitted == b->emitted && !memcmp(a->hist, b->hist, sizeof a->hist);
}

/* pair: the embedded pair (GSM8K prompts) or the golden Qwen3 fixture with a random drafter
 * (random token prompts; tests/fixtures/golden/qwen3-dspark, tools/make_random_drafter.py --layers
 * 1, seed 0): a dummy pair whose tiny vocabulary (512) still accepts sampled drafts now and then */
static void one_graph_pair(int golden) {
    flint_engine_options o;
    tiny_options(&o, 64);
    static char model[4096], drafter[4096];
    if (golden) {
        snprintf(model, sizeof model, "%s/tests/fixtures/golden/qwen3", SRC);
        snprintf(drafter, sizeof drafter, "%s/tests/fixtures/golden/qwen3-dspark", SRC);
        o.model_dir = model, o.drafter_dir = drafter;
    }
    o.enable_prefix_caching = 0;
    flint_err err = {0};
    flint_engine *g = flint_engine_open(&o, &err);
    CHECKF(g != NULL, "%s", err.msg);
    o.enforce_eager = 1;
    flint_engine *ea = g ? flint_engine_open(&o, &err) : NULL;
    CHECKF(!g || ea != NULL, "eager engine: %s", err.msg);
    o.enforce_eager = 0;
    o.split_step = 1;
    flint_engine *sp = ea ? flint_engine_open(&o, &err) : NULL;
    CHECKF(!ea || sp != NULL, "split-step engine: %s", err.msg);
    int32_t *ids[N_PROMPTS] = {0};
    int n_ids[N_PROMPTS];
    if (sp && golden) {
        for (int i = 0; i < N_PROMPTS; i++) {
            n_ids[i] = 3 + (int)(rnd() % 40);
            ids[i] = malloc(sizeof(int32_t) * (size_t)n_ids[i]);
            for (int j = 0; j < n_ids[i]; j++) ids[i][j] = (int32_t)(rnd() % 512);
        }
    } else if (!sp || load_prompts(flint_engine_tokenizer(g), ids, n_ids)) {
        CHECKF(!sp, "could not load %d GSM8K prompts", N_PROMPTS);
        goto done;
    }
    printf("  %s\n", golden ? "golden Qwen3 fixture + random drafter" : "flint-tiny + flint-tiny-dspark");
    flint_target_graph_info g0, g1;
    flint_engine_step_graph_stats(g, &g0);
    printf("  one-graph steps: %d graphs captured at open in %.3f s, %.1f MiB\n", g0.n_graphs, g0.capture_s,
           (double)g0.bytes / (1u << 20));
    CHECKF(g0.n_graphs > 0, "no one-graph step captured at open");
    static int32_t a[N_PROMPTS][GEN], b[N_PROMPTS][GEN], plain[N_PROMPTS][GEN];
    flint_spec_stats sa, sb;
    if (golden) { /* greedy through the one-graph step == greedy target-only, every batch and K */
        run_sampling = NULL;
        run(g, ids, n_ids, N_PROMPTS, 64, 0, 0, plain, &sa);
        int bad_greedy = 0;
        static const int gb[] = {1, 3, 8, 16, 64};
        for (int bi = 0; bi < 5; bi++)
            for (int K = 1; K <= 7; K++) {
                const int n = gb[bi] < 8 ? 8 : gb[bi];
                memset(a, 0xff, sizeof a);
                run(g, ids, n_ids, n, gb[bi], 1, K, a, &sa);
                for (int i = 0; i < n; i++) bad_greedy += memcmp(a[i], plain[i], sizeof(int32_t) * GEN) != 0;
            }
        printf("  greedy, batch 1, 3, 8, 16, 64 x K = 1..7: %d outputs differ from target-only\n", bad_greedy);
        CHECKF(bad_greedy == 0, "golden pair: %d greedy outputs differ from target-only", bad_greedy);
    }
    const flint_sampling_params sp_t1 = {1.0f, 0, 0.9f, 0.0f, 4000};
    run_sampling = &sp_t1;
    /* every request bucket of the step graphs (1..8, 16, 32, 64) and sizes between them, whose
     * verify rows pad to other row buckets */
    static const int batches[] = {1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 24, 32, 48, 64};
    const int n_batches = (int)(sizeof batches / sizeof batches[0]);
    int bad = 0, runs = 0;
    double t_graph = 0, t_eager = 0, al = 0;
    for (int bi = 0; bi < n_batches; bi++)
        for (int K = 1; K <= 7; K++) {
            const int B = batches[bi], n = B < 8 ? 8 : B;
            memset(a, 0xff, sizeof a), memset(b, 0xfe, sizeof b);
            double t0 = now_s();
            run(g, ids, n_ids, n, B, 1, K, a, &sa);
            t_graph += now_s() - t0;
            t0 = now_s();
            run(ea, ids, n_ids, n, B, 1, K, b, &sb);
            t_eager += now_s() - t0;
            al += flint_spec_stats_mean_al(&sa);
            int same = 0;
            for (int i = 0; i < n; i++) same += !memcmp(a[i], b[i], sizeof(int32_t) * GEN);
            runs++;
            if (same != n || !same_stats(&sa, &sb)) {
                bad++;
                printf("  batch %d K=%d: graph vs eager: %d/%d prompts identical, accepted %lld vs %lld\n", B, K, same,
                       n, (long long)sa.accepted, (long long)sb.accepted);
            }
        }
    printf("  graph == eager (tokens and statistics) in %d of %d runs (%d batch sizes 1..64 x K = 1..7, mean AL "
           "%.3f; %.2f s vs %.2f s)\n", runs - bad, runs, n_batches, al / runs, t_graph, t_eager);
    CHECKF(bad == 0, "one-graph step: graph and eager differ in %d of %d runs", bad, runs);
    for (int c = 0; c < 2; c++) {
        const int B = c ? 64 : 8;
        memset(a, 0xff, sizeof a), memset(b, 0xfe, sizeof b);
        run(g, ids, n_ids, N_PROMPTS, B, 1, 7, a, &sa);
        run(sp, ids, n_ids, N_PROMPTS, B, 1, 7, b, &sb);
        int same = 0;
        for (int i = 0; i < N_PROMPTS; i++) same += !memcmp(a[i], b[i], sizeof(int32_t) * GEN);
        printf("  batch %d K=7: one graph == split launches for %d/%d prompts (AL %.3f / %.3f)\n", B, same, N_PROMPTS,
               flint_spec_stats_mean_al(&sa), flint_spec_stats_mean_al(&sb));
        CHECKF(same == N_PROMPTS && same_stats(&sa, &sb), "one-graph and split steps differ on %d of %d prompts",
               N_PROMPTS - same, N_PROMPTS);
    }
    flint_engine_step_graph_stats(g, &g1);
    printf("  the graph engine captured %ld step graphs after open\n", g1.n_captures - g0.n_captures);
    CHECKF(g1.n_captures == g0.n_captures, "%ld step graphs captured inside the steps", g1.n_captures - g0.n_captures);
done:
    run_sampling = NULL;
    for (int i = 0; i < N_PROMPTS; i++) free(ids[i]);
    flint_engine_close(sp);
    flint_engine_close(ea);
    flint_engine_close(g);
}

static void test_one_graph(void) {
    one_graph_pair(0);
    one_graph_pair(1);
}

/* #8: the graphs decode and verify steps use are captured when the engine opens. Sessions with a
 * one-token prompt prefill in decode shapes, so a whole run (batch 8 at K = 7, then fewer rows and
 * shorter drafts as sessions end) must replay start-up graphs only: no capture after open. */
static void test_startup_capture(void) {
    flint_engine_options o;
    tiny_options(&o, 8);
    flint_err err = {0};
    flint_engine *e = flint_engine_open(&o, &err);
    CHECKF(e != NULL, "%s", err.msg);
    if (!e) return;
    flint_target_graph_info g0, g1;
    size_t bytes = 0;
    flint_engine_device_stats(e, &g0, &bytes);
    CHECKF(g0.n_captures > 0, "no graph captured at open");
    int32_t tok[8], *ids[8];
    int n_ids[8];
    static int32_t out[8][GEN];
    for (int i = 0; i < 8; i++) tok[i] = 100 + 37 * i, ids[i] = &tok[i], n_ids[i] = 1;
    flint_spec_stats st;
    run(e, ids, n_ids, 8, 8, 1, 7, out, &st);
    flint_engine_device_stats(e, &g1, &bytes);
    printf("  start-up capture: %d graphs in %.3f s, %.1f MiB; a run of 8 one-token prompts (%lld spec steps, AL "
           "%.3f) captured %ld more\n", g0.n_graphs, g0.capture_s, (double)g0.bytes / (1u << 20), (long long)st.steps,
           flint_spec_stats_mean_al(&st), g1.n_captures - g0.n_captures);
    CHECKF(st.steps > 0 && g1.n_captures == g0.n_captures, "%ld graphs captured inside the steps",
           g1.n_captures - g0.n_captures);
    flint_engine_close(e);
}

int main(int argc, char **argv) {
    if (argc > 1) SRC = argv[1];
    char dir[4096];
    const char *models[] = {"models/flint-tiny", "tests/fixtures/golden/qwen3", "tests/fixtures/golden/llama"};
    for (int i = 0; i < 3; i++) {
        snprintf(dir, sizeof dir, "%s/%s", SRC, models[i]);
        printf("%s\n", models[i]);
        test_model(dir);
    }
    printf("engine (flint-tiny + flint-tiny-dspark, target on the GPU)\n");
    test_engine();
    test_one_graph();
    test_startup_capture();
    return test_report("test_target_cuda");
}
