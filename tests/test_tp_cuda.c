/* Tensor parallelism on GPUs through NCCL (issues order 8 and 9). Label cuda: run on the GPU
 * machine by tools/device/gpu_session.sh; the multi-GPU parts run when two GPUs are present
 * (nvidia-h200-x2) and are reported as skipped otherwise.
 *
 * One GPU (order 8's must-show):
 *  - target: flint-tiny and a dummy qwen3-0.6b through the NCCL path with one rank give the
 *    unsharded forward's logits and taps bit for bit, on prefill, verify and decode batches, with
 *    the forward replayed from captured graphs that contain the NCCL calls;
 *  - engine: the embedded pair (K = 7) through the NCCL path with one rank gives the unsharded
 *    engine's greedy tokens, at batch 1 and 8.
 * Two GPUs (order 9's must-show):
 *  - target: N = 2 logits and taps equal the unsharded ones bit for bit: each rank computes the
 *    unsharded GEMM's K quarters that fall in its columns and the partial sums are combined in the
 *    unsharded order (target/forward_cuda.cu, row_parallel);
 *  - greedy output with N = 2 equals N = 1 token for token: the embedded pair (K = 7, batch 1 and
 *    8, 16 GSM8K prompts x 64 tokens, and target-only) and the dummy model (greedy decoding of
 *    48 tokens after a 32-token random prompt, 4 sequences);
 *  - sampling under N = 2: the first three tokens at T = 1 with speculation (K = 7) and without
 *    are drawn from the same distribution (chi-square homogeneity at p = 0.001 over 2,000 seeds,
 *    as tests/test_spec_embedded.c).
 * usage: test_tp_cuda [SOURCE_DIR] */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>
#include <cuda_runtime.h>

#include "chisq.h"
#include "core/chat.h"
#include "core/json.h"
#include "core/tokenizer.h"
#include "target/target.h"
#include "test.h"
#include "verifier/engine.h"

static const char *SRC = FLINT_SOURCE_DIR;
static char TGT[4096], DSP[4096], GSM[4096];
static int n_gpus;

/* ==== target level ==== */

enum { MAXR = 4 };

typedef struct fwd_job {
    flint_target *t;
    flint_target_batch b;
    flint_err err;
    int rc;
} fwd_job;

static void *fwd_main(void *arg) {
    fwd_job *j = arg;
    j->rc = flint_target_forward(j->t, &j->b, &j->err);
    return NULL;
}

/* The same batch on every rank at once (collectives need all of them); rank 0's outputs in b. */
static int forward_all(flint_target **ranks, int n, const flint_target_batch *b, float *scratch_l, float *scratch_t) {
    fwd_job jobs[MAXR];
    pthread_t th[MAXR];
    memset(jobs, 0, sizeof jobs);
    for (int r = 0; r < n; r++) {
        jobs[r].t = ranks[r];
        jobs[r].b = *b;
        memset(&jobs[r].err, 0, sizeof jobs[r].err);
        if (r > 0) {
            jobs[r].b.logits = scratch_l;
            jobs[r].b.taps = b->n_taps ? scratch_t : NULL;
        }
        if (r > 0) pthread_create(&th[r], NULL, fwd_main, &jobs[r]);
    }
    fwd_main(&jobs[0]);
    int rc = jobs[0].rc;
    for (int r = 1; r < n; r++) {
        pthread_join(th[r], NULL);
        if (jobs[r].rc) rc = -1;
    }
    for (int r = 0; r < n; r++) CHECKF(jobs[r].rc == 0, "rank %d: %s", r, jobs[r].err.msg);
    return rc;
}

typedef struct group {
    int n;
    flint_tp_comm comms[MAXR];
    flint_target *t[MAXR];
} group;

static int open_group(group *g, int n, const char *dir, const char *shape, int max_len) {
    memset(g, 0, sizeof *g);
    flint_err err = {0};
    int devs[MAXR] = {0, 1, 2, 3};
    if (flint_tp_nccl_open_all(n, devs, g->comms, &err)) {
        CHECKF(0, "%s", err.msg);
        return -1;
    }
    g->n = n;
    for (int r = 0; r < n; r++) {
        flint_target_options o;
        flint_target_options_default(&o);
        o.device = FLINT_TARGET_CUDA;
        o.dummy_shape = shape;
        o.max_seqs = 4;
        o.max_len = max_len;
        o.max_rows = 256;
        o.tp = &g->comms[r];
        g->t[r] = flint_target_open(shape ? NULL : dir, &o, &err);
        CHECKF(g->t[r] != NULL, "rank %d: %s", r, err.msg);
        if (!g->t[r]) return -1;
    }
    return 0;
}

static void close_group(group *g) {
    for (int r = 0; r < g->n; r++) flint_target_close(g->t[r]);
    for (int r = 0; r < g->n; r++) flint_tp_nccl_close(&g->comms[r]);
}

static flint_target *open_plain(const char *dir, const char *shape, int max_len) {
    flint_target_options o;
    flint_target_options_default(&o);
    o.device = FLINT_TARGET_CUDA;
    o.dummy_shape = shape;
    o.max_seqs = 4;
    o.max_len = max_len;
    o.max_rows = 256;
    flint_err err = {0};
    flint_target *t = flint_target_open(shape ? NULL : dir, &o, &err);
    CHECKF(t != NULL, "%s", err.msg);
    return t;
}

/* Prefill, verify and decode batches over two sequences on the plain target, the one-rank NCCL
 * group and (with two GPUs) the two-rank group, compared after each forward. */
static void test_target(const char *name, const char *dir, const char *shape) {
    const int max_len = 256, per = max_len / 16;
    flint_target *plain = open_plain(dir, shape, max_len);
    group g1, g2;
    int have2 = n_gpus >= 2;
    if (!plain || open_group(&g1, 1, dir, shape, max_len) || (have2 && open_group(&g2, 2, dir, shape, max_len))) return;
    const flint_target_config *c = flint_target_get_config(plain);
    int V = c->vocab_size, H = c->hidden_size;
    int32_t tab0[16], tab1[16];
    for (int i = 0; i < per; i++) tab0[i] = i, tab1[i] = per + i;
    const int32_t *tables[2] = {tab0, tab1};
    float *l0 = malloc(sizeof(float) * 256 * V), *l1 = malloc(sizeof(float) * 256 * V), *l2 = malloc(sizeof(float) * 256 * V);
    float *sl = malloc(sizeof(float) * 256 * V), *st = malloc(sizeof(float) * 256 * 2 * H);
    float *t0 = malloc(sizeof(float) * 256 * 2 * H), *t1 = malloc(sizeof(float) * 256 * 2 * H);
    int32_t tok[256], pos[256], seq[256], rows[256], taps[2] = {1, c->n_layers - 2};
    int len[2] = {0, 0};
    const int steps[3][2] = {{37, 20}, {8, 8}, {1, 1}};
    const char *what[3] = {"prefill 37 + 20", "verify 8 + 8", "decode 1 + 1"};
    uint32_t rs = 12345;
    double worst = 0;
    for (int s = 0; s < 3; s++) {
        int R = 0;
        for (int q = 0; q < 2; q++)
            for (int i = 0; i < steps[s][q]; i++, R++) {
                rs = rs * 1664525u + 1013904223u;
                tok[R] = (int32_t)(rs % (uint32_t)V), pos[R] = len[q] + i, seq[R] = q, rows[R] = R;
            }
        for (int q = 0; q < 2; q++) len[q] += steps[s][q];
        flint_target_batch b = {.n_rows = R, .tokens = tok, .pos = pos, .row_seq = seq, .n_seqs = 2,
                                .block_tables = tables, .n_logit_rows = R, .logit_rows = rows, .logits = l0,
                                .n_taps = 2, .tap_layers = taps, .taps = t0};
        flint_err err = {0};
        CHECKF(flint_target_forward(plain, &b, &err) == 0, "%s", err.msg);
        b.logits = l1, b.taps = t1;
        forward_all(g1.t, 1, &b, sl, st);
        CHECKF(!memcmp(l0, l1, sizeof(float) * (size_t)R * V) && !memcmp(t0, t1, sizeof(float) * (size_t)R * 2 * H),
               "%s, %s: one rank through NCCL differs from the unsharded forward", name, what[s]);
        if (have2) {
            b.logits = l2, b.taps = t1;
            forward_all(g2.t, 2, &b, sl, st);
            CHECKF(!memcmp(l0, l2, sizeof(float) * (size_t)R * V) &&
                   !memcmp(t0, t1, sizeof(float) * (size_t)R * 2 * H),
                   "%s, %s: N = 2 differs from the unsharded forward", name, what[s]);
            int flips = 0, bad = 0;
            double md = 0;
            for (int r = 0; r < R; r++) {
                const float *a = l0 + (size_t)r * V, *z = l2 + (size_t)r * V;
                double mx = 0, d = 0;
                int ia = 0, iz = 0;
                for (int v = 0; v < V; v++) {
                    mx = fmax(mx, fabs(a[v]));
                    d = fmax(d, fabs((double)a[v] - z[v]));
                    if (a[v] > a[ia]) ia = v;
                    if (z[v] > z[iz]) iz = v;
                }
                md = fmax(md, d / (mx + 1e-9));
                if (d > 1e-3 * mx + 1e-4) bad++;
                if (ia != iz && (flips++, a[ia] - a[iz] > 2 * d)) bad++;
            }
            worst = fmax(worst, md);
            printf("  %s, %s: N = 2 vs unsharded: max |diff| %.2e of the largest logit, %d argmax flips (0 and 0 "
                   "expected: bit-identical)\n", name, what[s], md, flips);
            CHECKF(bad == 0, "%s, %s: %d rows of N = 2 logits off", name, what[s], bad);
        }
    }
    flint_target_graph_info gi;
    flint_target_graph_stats(g1.t[0], &gi);
    printf("%s: one rank through NCCL == unsharded, bit for bit, 3 batches; %ld graphs captured with NCCL calls%s\n",
           name, gi.n_captures, have2 ? "" : "; N = 2 skipped (one GPU)");
    CHECKF(gi.n_captures >= 3, "the NCCL forwards were not captured");
    free(l0), free(l1), free(l2), free(sl), free(st), free(t0), free(t1);
    flint_target_close(plain);
    close_group(&g1);
    if (have2) close_group(&g2);
}

/* Greedy decoding on the dummy model with the target alone, N = 1 vs N = 2. */
static void test_dummy_greedy(void) {
    if (n_gpus < 2) return;
    enum { NS = 4, P = 32, G = 48 };
    group g[2];
    if (open_group(&g[0], 1, NULL, "qwen3-0.6b", 128) || open_group(&g[1], 2, NULL, "qwen3-0.6b", 128)) return;
    const int V = flint_target_get_config(g[0].t[0])->vocab_size;
    int32_t out[2][NS][G];
    float *logits = malloc(sizeof(float) * NS * P * (size_t)V), *sl = malloc(sizeof(float) * NS * P * (size_t)V);
    int32_t tabs[NS][8];
    const int32_t *tables[NS];
    for (int q = 0; q < NS; q++) {
        for (int i = 0; i < 8; i++) tabs[q][i] = q * 8 + i;
        tables[q] = tabs[q];
    }
    for (int k = 0; k < 2; k++) {
        int32_t tok[NS * P], pos[NS * P], seq[NS * P], rows[NS];
        uint32_t rs = 777;
        for (int q = 0; q < NS; q++)
            for (int i = 0; i < P; i++) {
                rs = rs * 1664525u + 1013904223u;
                tok[q * P + i] = (int32_t)(rs % (uint32_t)V), pos[q * P + i] = i, seq[q * P + i] = q;
            }
        for (int q = 0; q < NS; q++) rows[q] = q * P + P - 1;
        flint_target_batch b = {.n_rows = NS * P, .tokens = tok, .pos = pos, .row_seq = seq, .n_seqs = NS,
                                .block_tables = tables, .n_logit_rows = NS, .logit_rows = rows, .logits = logits};
        for (int step = 0; step < G; step++) {
            if (forward_all(g[k].t, g[k].n, &b, sl, NULL)) return;
            for (int q = 0; q < NS; q++) {
                const float *l = logits + (size_t)q * V;
                int best = 0;
                for (int v = 1; v < V; v++)
                    if (l[v] > l[best]) best = v;
                out[k][q][step] = best;
                tok[q] = best, pos[q] = P + step, seq[q] = q, rows[q] = q;
            }
            b.n_rows = NS;
        }
    }
    int same = !memcmp(out[0], out[1], sizeof out[0]);
    printf("dummy qwen3-0.6b: greedy decoding of %d x %d tokens, N = 2 %s N = 1\n", NS, G, same ? "==" : "!=");
    CHECKF(same, "greedy tokens differ between N = 1 and N = 2 on the dummy model");
    free(logits), free(sl);
    close_group(&g[0]);
    close_group(&g[1]);
}

/* The rank / unique-id form (several processes or hosts would join the same way; here one thread
 * per rank): a two-rank group made so gives the unsharded logits. Then a rank that never joins a
 * forward: the other's forward fails after tp_timeout_s with a message, instead of hanging. */
typedef struct join_arg {
    int n, rank;
    unsigned char id[128];
    flint_tp_comm comm;
    flint_err err;
    int rc;
} join_arg;

static void *join_main(void *p) {
    join_arg *a = p;
    a->rc = flint_tp_nccl_open_rank(a->n, a->rank, a->rank, a->id, &a->comm, &a->err);
    return NULL;
}

static void test_rank_form_and_failure(void) {
    if (n_gpus < 2) {
        printf("rank / unique-id form and rank failure: skipped (one GPU)\n");
        return;
    }
    join_arg a[2];
    memset(a, 0, sizeof a);
    flint_err err = {0};
    CHECKF(flint_tp_nccl_unique_id(a[0].id, &err) == 0, "%s", err.msg);
    memcpy(a[1].id, a[0].id, 128);
    pthread_t th;
    for (int r = 0; r < 2; r++) a[r].n = 2, a[r].rank = r;
    pthread_create(&th, NULL, join_main, &a[1]);
    join_main(&a[0]);
    pthread_join(th, NULL);
    CHECKF(a[0].rc == 0 && a[1].rc == 0, "ncclCommInitRank: %s / %s", a[0].err.msg, a[1].err.msg);
    if (a[0].rc || a[1].rc) return;
    flint_target *ranks[2], *plain = open_plain(TGT, NULL, 128);
    for (int r = 0; r < 2; r++) {
        flint_target_options o;
        flint_target_options_default(&o);
        o.device = FLINT_TARGET_CUDA;
        o.max_seqs = 4;
        o.max_len = 128;
        o.max_rows = 256;
        o.tp = &a[r].comm;
        o.tp_timeout_s = 3;
        ranks[r] = flint_target_open(TGT, &o, &err);
        CHECKF(ranks[r] != NULL, "%s", err.msg);
    }
    const int V = flint_target_get_config(plain)->vocab_size;
    int32_t tok[12], pos[12], seq[12], rows[12], tab[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    const int32_t *tables[1] = {tab};
    for (int i = 0; i < 12; i++) tok[i] = (int32_t)((i * 131 + 7) % V), pos[i] = i, seq[i] = 0, rows[i] = i;
    float *l0 = malloc(sizeof(float) * 12 * V), *l1 = malloc(sizeof(float) * 12 * V), *sl = malloc(sizeof(float) * 12 * V);
    flint_target_batch b = {.n_rows = 12, .tokens = tok, .pos = pos, .row_seq = seq, .n_seqs = 1, .block_tables = tables,
                            .n_logit_rows = 12, .logit_rows = rows, .logits = l0};
    CHECKF(flint_target_forward(plain, &b, &err) == 0, "%s", err.msg);
    b.logits = l1;
    forward_all(ranks, 2, &b, sl, NULL);
    CHECKF(!memcmp(l0, l1, sizeof(float) * 12 * V), "a group made by ncclCommInitRank differs from one GPU");
    /* rank 1 stays away: rank 0's forward must fail within ~3 s, naming the cause */
    b.n_rows = 1, b.n_logit_rows = 1, pos[0] = 12;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    flint_err ferr = {0};
    int rc = flint_target_forward(ranks[0], &b, &ferr);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double dt = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    printf("rank form: 2 ranks from one unique id == one GPU; a forward with rank 1 absent failed after %.1f s: %s\n", dt,
           ferr.msg);
    CHECKF(rc != 0 && ferr.code == FLINT_ERR_IO && strstr(ferr.msg, "did not finish") && dt < 30,
           "a lost rank: rc %d after %.1f s: %s", rc, dt, ferr.msg);
    /* the group is aborted: later forwards fail at once, and closing does not hang */
    CHECKF(flint_target_forward(ranks[0], &b, &ferr) != 0, "a forward after the abort succeeded");
    flint_tp_nccl_abort(&a[1].comm); /* its peer is gone: abort, as the engine does */
    flint_target_close(ranks[0]);
    flint_target_close(ranks[1]);
    flint_target_close(plain);
    flint_tp_nccl_close(&a[0].comm);
    free(l0), free(l1), free(sl);
}

/* ==== engine level ==== */

enum { NP = 16, GEN = 64 };

static flint_engine *open_engine(int tp, int nccl, const char *drafter, int seqs) {
    flint_engine_options o;
    flint_engine_options_default(&o);
    o.model_dir = TGT;
    o.drafter_dir = drafter;
    o.num_speculative_tokens = drafter ? 7 : 0;
    o.dynamic_draft = 0; /* fixed K: the ranks' statistics are compared */
    o.max_seqs = seqs;
    o.max_model_len = 1024;
    o.n_threads = 4;
    o.device = FLINT_TARGET_CUDA;
    o.tensor_parallel_size = tp;
    o.tp_nccl = nccl;
    flint_err err = {0};
    flint_engine *e = flint_engine_open(&o, &err);
    CHECKF(e != NULL, "%s", err.msg);
    return e;
}

static int load_prompts(const flint_tokenizer *tok, int32_t **ids, int *n) {
    flint_err err = {0};
    char *buf = flint_file_read(GSM, 1 << 26, NULL, &err);
    CHECKF(buf != NULL, "%s", err.msg);
    if (!buf) return -1;
    int got = 0;
    for (char *line = buf, *next; line && *line && got < NP; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = 0;
        cJSON *j = cJSON_Parse(line);
        const cJSON *turns = cJSON_GetObjectItemCaseSensitive(j, "turns");
        const cJSON *t0 = cJSON_IsArray(turns) ? cJSON_GetArrayItem(turns, 0) : NULL;
        if (cJSON_IsString(t0)) {
            flint_chat_msg m = {.role = "user", .content = t0->valuestring};
            flint_chat_options co;
            flint_chat_options_default(&co);
            char *s = flint_chat_render(FLINT_CHAT_CHATML, &m, 1, &co, NULL, NULL, &err);
            if (s && flint_tokenizer_encode(tok, s, strlen(s), 0, &ids[got], &n[got], &err) == 0) got++;
            free(s);
        }
        cJSON_Delete(j);
    }
    free(buf);
    CHECKF(got == NP, "%d of %d prompts", got, NP);
    return got == NP ? 0 : -1;
}

/* Requests in groups of B, each to GEN tokens (ignore_eos) with params p[i]; tokens into out. */
static void run(flint_engine *e, int32_t **ids, const int *n, int count, int B, const flint_request_params *p,
                int32_t *out, int cap) {
    flint_err err = {0};
    for (int first = 0; first < count; first += B) {
        int cnt = first + B <= count ? B : count - first, sid[64], len[64] = {0};
        for (int i = 0; i < cnt; i++) {
            sid[i] = flint_engine_add(e, ids[(first + i) % NP], n[(first + i) % NP], &p[first + i], &err);
            CHECKF(sid[i] >= 0, "%s", err.msg);
        }
        while (flint_engine_active(e)) {
            const flint_step_event *ev;
            int ne;
            if (flint_engine_step(e, &ev, &ne, &err)) {
                CHECKF(0, "%s", err.msg);
                return;
            }
            for (int j = 0; j < ne; j++)
                for (int i = 0; i < cnt; i++)
                    if (ev[j].sid == sid[i]) {
                        for (int t = 0; t < ev[j].n_tokens && len[i] < cap; t++)
                            out[(size_t)(first + i) * cap + len[i]++] = ev[j].tokens[t];
                        if (len[i] == cap && !ev[j].finish) flint_engine_cancel(e, sid[i]);
                    }
        }
        const flint_step_event *ev;
        int ne;
        flint_engine_step(e, &ev, &ne, &err);
    }
}

static void test_engine_greedy(void) {
    static int32_t ref[NP * GEN], got[NP * GEN];
    static flint_request_params p[NP];
    for (int i = 0; i < NP; i++) {
        flint_request_params_default(&p[i]);
        p[i].max_tokens = GEN;
        p[i].ignore_eos = 1;
        p[i].sampling.temperature = 0;
    }
    flint_engine *e = open_engine(0, 0, NULL, 8);
    if (!e) return;
    int32_t *ids[NP];
    int n[NP];
    if (load_prompts(flint_engine_tokenizer(e), ids, n)) return;
    run(e, ids, n, NP, 8, p, ref, GEN); /* unsharded target-only: the reference */
    flint_engine_close(e);
    /* (tp size, nccl, drafter, batch) */
    const int cases[][4] = {{1, 1, 1, 1}, {1, 1, 1, 8}, {2, 1, 0, 8}, {2, 1, 1, 1}, {2, 1, 1, 8}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        if (cases[c][0] > n_gpus) {
            printf("engine N = %d: skipped (%d GPU)\n", cases[c][0], n_gpus);
            continue;
        }
        e = open_engine(cases[c][0], cases[c][1], cases[c][2] ? DSP : NULL, 8);
        if (!e) return;
        memset(got, 0xff, sizeof got);
        run(e, ids, n, NP, cases[c][3], p, got, GEN);
        int same = 0;
        for (int i = 0; i < NP; i++) same += !memcmp(ref + i * GEN, got + i * GEN, sizeof(int32_t) * GEN);
        printf("engine N = %d (NCCL), %s, batch %d: %d/%d prompts identical to unsharded target-only greedy\n",
               cases[c][0], cases[c][2] ? "K = 7" : "target only", cases[c][3], same, NP);
        CHECKF(same == NP, "N = %d %s batch %d: %d of %d prompts differ", cases[c][0], cases[c][2] ? "K = 7" : "plain",
               cases[c][3], NP - same, NP);
        flint_engine_close(e);
    }
    for (int i = 0; i < NP; i++) free(ids[i]);
}

static void test_engine_sampling(void) {
    if (n_gpus < 2) return;
    enum { N = 2000, V = 8192, CAP = 3 };
    static long counts[2][3][V];
    static int32_t out[N * CAP];
    static flint_request_params p[N];
    flint_engine *e = open_engine(2, 1, NULL, 8);
    if (!e) return;
    flint_chat_msg m = {.role = "user", .content = "Write a short story about a dog."};
    flint_chat_options co;
    flint_chat_options_default(&co);
    flint_err err = {0};
    char *s = flint_chat_render(FLINT_CHAT_CHATML, &m, 1, &co, NULL, NULL, &err);
    int32_t *ids[NP];
    int n[NP];
    if (!s || flint_tokenizer_encode(flint_engine_tokenizer(e), s, strlen(s), 0, &ids[0], &n[0], &err)) {
        CHECKF(0, "%s", err.msg);
        return;
    }
    free(s);
    for (int i = 1; i < NP; i++) ids[i] = ids[0], n[i] = n[0];
    for (int st = 0; st < 2; st++) {
        if (st == 1) {
            flint_engine_close(e);
            if (!(e = open_engine(2, 1, DSP, 8))) return;
        }
        for (int i = 0; i < N; i++) {
            flint_request_params_default(&p[i]);
            p[i].max_tokens = 9;
            p[i].ignore_eos = 1;
            p[i].sampling.temperature = 1.0f;
            p[i].sampling.seed = 1000003ull * (uint64_t)i + (uint64_t)st * 7919;
        }
        run(e, ids, n, N, 8, p, out, CAP);
        for (int i = 0; i < N; i++)
            for (int t = 0; t < CAP; t++) counts[st][t][out[i * CAP + t]]++;
    }
    flint_engine_close(e);
    free(ids[0]);
    char what[96];
    for (int t = 0; t < CAP; t++) {
        snprintf(what, sizeof what, "N = 2, position %d: speculative (K = 7) vs plain, T = 1", t + 1);
        CHECKF(!differ(counts[1][t], counts[0][t], V, what), "under N = 2, speculation changes the distribution at "
               "position %d", t + 1);
    }
}

int main(int argc, char **argv) {
    if (argc > 1) SRC = argv[1];
    setvbuf(stdout, NULL, _IOLBF, 0); /* a log that survives a timeout */
    snprintf(TGT, sizeof TGT, "%s/models/flint-tiny", SRC);
    snprintf(DSP, sizeof DSP, "%s/models/flint-tiny-dspark", SRC);
    snprintf(GSM, sizeof GSM, "%s/evals/data/gsm8k.jsonl", SRC);
    if (cudaGetDeviceCount(&n_gpus) != cudaSuccess) n_gpus = 0;
    if (n_gpus < 1) {
        printf("test_tp_cuda: no CUDA device\n");
        return 1;
    }
    printf("test_tp_cuda: %d GPU%s\n", n_gpus, n_gpus > 1 ? "s" : "");
    test_target("flint-tiny", TGT, NULL);
    test_target("dummy qwen3-0.6b", NULL, "qwen3-0.6b");
    test_dummy_greedy();
    test_engine_greedy();
    test_engine_sampling();
    test_rank_form_and_failure(); /* last: it leaves an aborted NCCL group behind on rank 1's GPU */
    return test_report("test_tp_cuda");
}
