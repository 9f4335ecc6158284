/* The engine on the CPU backend, with the tiny golden Qwen3 target and a random DSpark drafter
 * (tests/fixtures): greedy speculative output equals greedy target-only output token for token
 * for every draft length and batch size; a seeded sampled request gives the same tokens alone and
 * inside a batch; chunked prefill changes nothing; stop conditions end a session at the right
 * token and the statistics add up. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "verifier/engine.h"
#include "test.h"

#define TGT FLINT_SOURCE_DIR "/tests/fixtures/golden/qwen3"
#define DFT FLINT_SOURCE_DIR "/tests/fixtures/drafter/dense"

enum { NP = 8, MAXT = 48 };
static int32_t prompts[NP][40];
static int plen[NP];

typedef struct {
    int32_t toks[NP][MAXT + 8];
    int n[NP];
    flint_finish_reason fin[NP];
    flint_spec_stats stats[NP];
} results;

static flint_engine *open_engine(const char *drafter, int K, int chunk, int greedy_drafts) {
    flint_engine_options o;
    flint_engine_options_default(&o);
    o.model_dir = TGT;
    o.drafter_dir = drafter;
    o.num_speculative_tokens = K;
    o.dynamic_draft = 0; /* statistics are compared across batches and chunk sizes */
    o.max_seqs = 8;
    o.max_model_len = 256;
    o.prefill_chunk = chunk;
    o.draft_greedy = greedy_drafts;
    o.n_threads = 1;
    flint_err err = {0};
    flint_engine *e = flint_engine_open(&o, &err);
    CHECKF(e != NULL, "%s", err.msg);
    return e;
}

/* Run prompts [first, first + count) together; params[i] per prompt. */
static void run(flint_engine *e, int first, int count, const flint_request_params *params, results *res) {
    int sid_of[NP];
    flint_err err = {0};
    for (int i = 0; i < count; i++) {
        int p = first + i;
        sid_of[i] = flint_engine_add(e, prompts[p], plen[p], &params[i], &err);
        CHECKF(sid_of[i] >= 0, "%s", err.msg);
        res->n[p] = 0;
        res->fin[p] = FLINT_FINISH_NONE;
    }
    for (int guard = 0; guard < 10000 && flint_engine_active(e) > 0; guard++) {
        const flint_step_event *ev;
        int n;
        if (flint_engine_step(e, &ev, &n, &err)) {
            CHECKF(0, "step: %s", err.msg);
            return;
        }
        for (int j = 0; j < n; j++)
            for (int i = 0; i < count; i++)
                if (ev[j].sid == sid_of[i]) {
                    int p = first + i;
                    for (int t = 0; t < ev[j].n_tokens; t++) res->toks[p][res->n[p]++] = ev[j].tokens[t];
                    if (ev[j].finish) {
                        res->fin[p] = ev[j].finish;
                        res->stats[p] = *ev[j].stats;
                    }
                }
    }
    const flint_step_event *ev;
    int n;
    flint_engine_step(e, &ev, &n, &err); /* retire the finished sessions */
}

static void params_for(flint_request_params *p, int count, float temp, uint64_t seed0) {
    for (int i = 0; i < count; i++) {
        flint_request_params_default(&p[i]);
        p[i].max_tokens = MAXT;
        p[i].ignore_eos = 1;
        p[i].sampling.temperature = temp;
        p[i].sampling.top_p = temp > 0 ? 0.95f : 1.0f;
        p[i].sampling.seed = seed0 + (uint64_t)i;
    }
}

static int same(const results *a, const results *b, int p) {
    return a->n[p] == b->n[p] && !memcmp(a->toks[p], b->toks[p], sizeof(int32_t) * a->n[p]);
}

static void test_lossless_greedy(void) {
    static results base, got;
    flint_request_params prm[NP];
    flint_engine *e = open_engine(NULL, 0, 512, 0);
    if (!e) return;
    params_for(prm, NP, 0, 1);
    for (int p = 0; p < NP; p++) run(e, p, 1, prm, &base);
    flint_engine_close(e);
    for (int p = 0; p < NP; p++) CHECK(base.n[p] == MAXT && base.fin[p] == FLINT_FINISH_LENGTH);
    int batches[3] = {1, 3, 8};
    for (int K = 1; K <= 5; K++) {
        for (int greedy_drafts = 0; greedy_drafts <= 1; greedy_drafts++) {
            e = open_engine(DFT, K, 512, greedy_drafts);
            if (!e) return;
            for (int bi = 0; bi < 3; bi++) {
                int B = batches[bi];
                for (int p = 0; p < NP; p += B) run(e, p, p + B <= NP ? B : NP - p, prm, &got);
                int ok = 1;
                for (int p = 0; p < NP; p++) {
                    ok &= same(&base, &got, p);
                    const flint_spec_stats *s = &got.stats[p];
                    CHECK(s->accepted <= s->draft_tokens && s->steps > 0 && s->draft_tokens <= (int64_t)K * s->steps);
                    int64_t h = 0;
                    for (int j = 0; j <= K; j++) h += s->hist[j];
                    CHECK(h == s->steps);
                    CHECK(s->accepted_per_pos[0] == s->steps - s->hist[0]);
                }
                CHECKF(ok, "greedy speculative output differs from target-only at K=%d, batch %d, %s drafts", K, B,
                       greedy_drafts ? "greedy" : "sampled");
            }
            flint_engine_close(e);
        }
    }
}

static void test_batch_invariance_sampling(void) {
    static results alone, batch;
    flint_request_params prm[NP];
    for (int with_drafter = 0; with_drafter <= 1; with_drafter++) {
        flint_engine *e = open_engine(with_drafter ? DFT : NULL, 4, 512, 0);
        if (!e) return;
        params_for(prm, NP, 1.0f, 77);
        run(e, 0, 1, prm, &alone);
        run(e, 0, NP, prm, &batch);
        CHECKF(same(&alone, &batch, 0), "sampled request differs alone vs in a batch of %d (drafter %d)", NP,
               with_drafter);
        /* the same request again gives the same tokens; another seed other ones */
        run(e, 0, 1, prm, &batch);
        CHECK(same(&alone, &batch, 0));
        prm[0].sampling.seed = 12345;
        run(e, 0, 1, prm, &batch);
        CHECK(!same(&alone, &batch, 0));
        flint_engine_close(e);
    }
}

static void test_chunked_prefill(void) {
    static results a, b;
    flint_request_params prm[NP];
    params_for(prm, NP, 0.7f, 5);
    flint_engine *e = open_engine(DFT, 3, 512, 0);
    if (!e) return;
    run(e, 0, NP, prm, &a);
    flint_engine_close(e);
    e = open_engine(DFT, 3, 7, 0);
    if (!e) return;
    run(e, 0, NP, prm, &b);
    flint_engine_close(e);
    int ok = 1;
    for (int p = 0; p < NP; p++) ok &= same(&a, &b, p);
    CHECKF(ok, "prefill in chunks of 7 rows changes the output");
}

static void test_stops_and_errors(void) {
    static results base, got;
    flint_request_params prm[NP];
    flint_engine *e = open_engine(DFT, 5, 512, 0);
    if (!e) return;
    params_for(prm, 1, 0, 1);
    run(e, 0, 1, prm, &base);
    /* stop at the 10th token's id (its first occurrence) */
    int32_t stop = base.toks[0][9];
    int first = 0;
    while (base.toks[0][first] != stop) first++;
    prm[0].n_stop_ids = 1;
    prm[0].stop_ids[0] = stop;
    run(e, 0, 1, prm, &got);
    CHECKF(got.n[0] == first + 1 && got.fin[0] == FLINT_FINISH_STOP, "stop id: %d tokens (want %d)", got.n[0], first + 1);
    CHECK(!memcmp(got.toks[0], base.toks[0], sizeof(int32_t) * got.n[0]));
    CHECK(got.stats[0].emitted <= got.n[0]);
    /* max_tokens exact for every K remainder */
    for (int mt = 1; mt <= 9; mt++) {
        params_for(prm, 1, 0, 1);
        prm[0].max_tokens = mt;
        run(e, 0, 1, prm, &got);
        CHECKF(got.n[0] == mt && got.fin[0] == FLINT_FINISH_LENGTH && !memcmp(got.toks[0], base.toks[0], sizeof(int32_t) * mt),
               "max_tokens %d gave %d tokens", mt, got.n[0]);
    }
    /* speculation off for one request: same greedy tokens, no spec steps */
    params_for(prm, 1, 0, 1);
    prm[0].speculative = 0;
    run(e, 0, 1, prm, &got);
    CHECK(same(&base, &got, 0) && got.stats[0].steps == 0);
    /* request errors */
    flint_err err = {0};
    params_for(prm, 1, 0, 1);
    CHECK(flint_engine_add(e, prompts[0], 0, prm, &err) == -1 && strstr(err.msg, "empty"));
    prm[0].max_tokens = 250;
    CHECK(flint_engine_add(e, prompts[0], 10, prm, &err) == -1 && strstr(err.msg, "context"));
    prm[0].max_tokens = 0;
    CHECK(flint_engine_add(e, prompts[0], 10, prm, &err) == -1 && strstr(err.msg, "max_tokens"));
    params_for(prm, 1, 0, 1);
    int32_t bad = 100000;
    CHECK(flint_engine_add(e, &bad, 1, prm, &err) == -1 && strstr(err.msg, "vocabulary"));
    prm[0].sampling.top_p = 2;
    CHECK(flint_engine_add(e, prompts[0], 10, prm, &err) == -1 && strstr(err.msg, "top_p"));
    params_for(prm, 1, 0, 1);
    prm[0].n_stop = 1;
    prm[0].stop[0] = "x";
    CHECK(flint_engine_add(e, prompts[0], 10, prm, &err) == -1 && strstr(err.msg, "tokenizer"));
    /* slots: 8 sessions fit, the 9th is refused; cancel frees one */
    params_for(prm, 1, 0, 1);
    int sids[8];
    for (int i = 0; i < 8; i++) sids[i] = flint_engine_add(e, prompts[i], plen[i], prm, &err);
    CHECK(flint_engine_add(e, prompts[0], 5, prm, &err) == -1 && err.code == FLINT_ERR_NOMEM);
    const flint_step_event *ev;
    int n;
    flint_engine_step(e, &ev, &n, &err);
    flint_engine_cancel(e, sids[3]);
    flint_engine_step(e, &ev, &n, &err);
    int saw_cancel = 0;
    for (int j = 0; j < n; j++) saw_cancel |= ev[j].sid == sids[3] && ev[j].finish == FLINT_FINISH_CANCELLED;
    CHECK(saw_cancel);
    CHECK(flint_engine_add(e, prompts[0], 5, prm, &err) >= 0);
    for (int g = 0; g < 1000 && flint_engine_active(e); g++) flint_engine_step(e, &ev, &n, &err);
    flint_engine_step(e, &ev, &n, &err);
    CHECK(flint_engine_kv_blocks_free(e) == flint_engine_kv_blocks_total(e));
    flint_engine_close(e);
}

/* Prefix caching: a repeated or extended prompt reuses cached blocks (reported as cached tokens),
 * outputs equal a run with caching off, and a pool too small to keep everything evicts safely. */
static void test_prefix_cache(void) {
    enum { N = 120, T = 24 };
    static int32_t p1[N + T + 20];
    unsigned x = 99;
    for (int i = 0; i < N; i++) x = x * 1103515245u + 12345u, p1[i] = 3 + (int32_t)((x >> 8) % 500);
    int32_t out_on[3][T], out_off[3][T];
    int cached[3] = {0};
    for (int on = 0; on <= 1; on++) {
        flint_engine_options o;
        flint_engine_options_default(&o);
        o.model_dir = TGT;
        o.drafter_dir = DFT;
        o.max_seqs = 4;
        o.max_model_len = 256;
        o.enable_prefix_caching = on;
        flint_err err = {0};
        flint_engine *e = flint_engine_open(&o, &err);
        CHECKF(e != NULL, "%s", err.msg);
        if (!e) return;
        flint_request_params prm;
        flint_request_params_default(&prm);
        prm.max_tokens = T;
        prm.ignore_eos = 1;
        prm.sampling.temperature = 0;
        int lens[3] = {N, N, 0};
        for (int r = 0; r < 3; r++) {
            if (r == 2) { /* a second turn: the first prompt, its answer, then more tokens */
                memcpy(p1 + N, on ? out_on[0] : out_off[0], sizeof(int32_t) * T);
                for (int i = 0; i < 7; i++) p1[N + T + i] = 10 + i;
                lens[2] = N + T + 7;
            }
            int sid = flint_engine_add(e, p1, lens[r], &prm, &err);
            CHECKF(sid >= 0, "%s", err.msg);
            int n = 0;
            while (flint_engine_active(e)) {
                const flint_step_event *ev;
                int ne;
                if (flint_engine_step(e, &ev, &ne, &err)) break;
                for (int j = 0; j < ne; j++) {
                    memcpy((on ? out_on[r] : out_off[r]) + n, ev[j].tokens, sizeof(int32_t) * ev[j].n_tokens);
                    n += ev[j].n_tokens;
                    if (on) cached[r] = ev[j].cached_tokens;
                }
            }
            CHECK(n == T);
            const flint_step_event *ev;
            int ne;
            flint_engine_step(e, &ev, &ne, &err);
        }
        if (on) {
            int64_t q, h;
            int blocks;
            flint_engine_prefix_stats(e, &q, &h, &blocks);
            CHECK(q > 0 && h == cached[1] + cached[2] && blocks > 0);
        }
        flint_engine_close(e);
    }
    CHECKF(cached[0] == 0 && cached[1] == (N - 1) / 16 * 16 && cached[2] >= N, "cached tokens %d %d %d", cached[0],
           cached[1], cached[2]);
    CHECK(!memcmp(out_on, out_off, sizeof out_on));

    /* a pool of 24 blocks: sessions of up to 9 blocks cycle through it, evicting as they go */
    flint_engine_options o;
    flint_engine_options_default(&o);
    o.model_dir = TGT;
    o.drafter_dir = DFT;
    o.max_seqs = 2;
    o.max_model_len = 256;
    o.kv_blocks = 24;
    flint_err err = {0};
    flint_engine *e = flint_engine_open(&o, &err);
    CHECKF(e != NULL, "%s", err.msg);
    if (!e) return;
    flint_request_params prm;
    flint_request_params_default(&prm);
    prm.max_tokens = 16;
    prm.ignore_eos = 1;
    prm.sampling.temperature = 0;
    int done = 0;
    for (int r = 0; r < 12; r++) {
        int32_t pr[130];
        for (int i = 0; i < 130; i++) x = x * 1103515245u + 12345u, pr[i] = 3 + (int32_t)((x >> 8) % 500);
        if (r % 3 == 2) memcpy(pr, p1, sizeof(int32_t) * 64); /* some shared prefixes */
        CHECK(flint_engine_add(e, pr, 100 + r * 2, &prm, &err) >= 0);
        while (flint_engine_active(e)) {
            const flint_step_event *ev;
            int ne;
            if (flint_engine_step(e, &ev, &ne, &err)) break;
            for (int j = 0; j < ne; j++) done += ev[j].finish == FLINT_FINISH_LENGTH;
        }
    }
    const flint_step_event *ev;
    int ne;
    flint_engine_step(e, &ev, &ne, &err);
    CHECK(done == 12);
    CHECK(flint_engine_kv_blocks_free(e) == flint_engine_kv_blocks_total(e));
    flint_engine_close(e);
}

/* Logprobs of the emitted tokens equal the target-only path's (greedy: bit for bit, since the
 * forward is batch-invariant), and the top list is sorted and holds the emitted argmax. */
static void test_logprobs(void) {
    float lp[2][MAXT], top[2][MAXT][5];
    int32_t ids[2][MAXT][5], toks[2][MAXT];
    for (int spec = 0; spec <= 1; spec++) {
        flint_engine *e = open_engine(spec ? DFT : NULL, 4, 512, 0);
        if (!e) return;
        flint_request_params prm;
        params_for(&prm, 1, 0, 1);
        prm.logprobs = 1;
        prm.top_logprobs = 5;
        flint_err err = {0};
        CHECK(flint_engine_add(e, prompts[2], plen[2], &prm, &err) >= 0);
        int n = 0;
        while (flint_engine_active(e)) {
            const flint_step_event *ev;
            int ne;
            if (flint_engine_step(e, &ev, &ne, &err)) break;
            for (int j = 0; j < ne; j++)
                for (int t = 0; t < ev[j].n_tokens; t++, n++) {
                    CHECK(ev[j].logprobs != NULL && ev[j].n_top == 5);
                    toks[spec][n] = ev[j].tokens[t];
                    lp[spec][n] = ev[j].logprobs[t];
                    memcpy(top[spec][n], ev[j].top_logprobs + t * FLINT_MAX_TOP_LOGPROBS, sizeof top[spec][n]);
                    memcpy(ids[spec][n], ev[j].top_ids + t * FLINT_MAX_TOP_LOGPROBS, sizeof ids[spec][n]);
                }
        }
        CHECK(n == MAXT);
        flint_engine_close(e);
    }
    CHECK(!memcmp(toks[0], toks[1], sizeof toks[0]));
    CHECK(!memcmp(lp[0], lp[1], sizeof lp[0]));
    CHECK(!memcmp(top[0], top[1], sizeof top[0]) && !memcmp(ids[0], ids[1], sizeof ids[0]));
    int sorted = 1;
    for (int t = 0; t < MAXT; t++) {
        sorted &= ids[1][t][0] == toks[1][t] && top[1][t][0] == lp[1][t] && lp[1][t] <= 0;
        for (int k = 1; k < 5; k++) sorted &= top[1][t][k] <= top[1][t][k - 1];
    }
    CHECK(sorted);
}

/* The step profile: off by default (zeros), and once on, every step counted and its phases
 * accounted for (draft, verify, encode and host all take time with a drafter); the tokens are
 * the same as without it. */
static void test_profile(void) {
    static results a, b;
    flint_request_params prm[NP];
    params_for(prm, 4, 0.8f, 7);
    flint_engine *e = open_engine(DFT, 4, 512, 0);
    if (!e) return;
    run(e, 0, 4, prm, &a);
    flint_step_profile p;
    flint_engine_step_profile(e, &p);
    CHECK(p.steps == 0 && p.draft_ms == 0 && p.host_ms == 0);
    flint_engine_set_profile(e, 1);
    run(e, 0, 4, prm, &b);
    flint_engine_step_profile(e, &p);
    for (int i = 0; i < 4; i++) CHECKF(same(&a, &b, i), "prompt %d: the profile changed the output", i);
    const double sum = p.prefill_ms + p.draft_ms + p.verify_ms + p.accept_ms + p.encode_ms + p.host_ms;
    CHECKF(p.steps >= MAXT / 5 && p.steps <= MAXT + 2, "%lld profiled steps for %d tokens", (long long)p.steps, MAXT);
    CHECKF(p.prefill_ms > 0 && p.draft_ms > 0 && p.verify_ms > 0 && p.encode_ms > 0 && p.host_ms > 0 &&
           p.accept_ms >= 0, "profile phases: prefill %.3f draft %.3f verify %.3f accept %.3f encode %.3f host %.3f ms",
           p.prefill_ms, p.draft_ms, p.verify_ms, p.accept_ms, p.encode_ms, p.host_ms);
    printf("  profile over %lld steps: %.3f ms (draft %.3f, verify %.3f, encode %.3f, host %.3f)\n",
           (long long)p.steps, sum, p.draft_ms, p.verify_ms, p.encode_ms, p.host_ms);
    /* the host time, measured at every step: both runs' steps with a forward (a step of each
     * generated token at most, prefill steps too), the host part within the wall time (on the CPU
     * the forwards are host work: no waits) */
    flint_host_time ht;
    flint_engine_host_time(e, &ht);
    CHECKF(ht.steps >= 2 * (MAXT / 5) && ht.steps <= 2 * (MAXT + 2) && ht.wall_ms > 0 && ht.host_ms > 0 &&
           ht.host_ms <= ht.wall_ms + 1e-9, "host time: %lld steps, wall %.3f ms, host %.3f ms", (long long)ht.steps,
           ht.wall_ms, ht.host_ms);
    flint_engine_set_profile(e, 0);
    flint_engine_close(e);
}

int main(void) {
    unsigned x = 12345;
    for (int p = 0; p < NP; p++) {
        plen[p] = 5 + (p * 7) % 33;
        for (int i = 0; i < plen[p]; i++) {
            x = x * 1103515245u + 12345u;
            prompts[p][i] = 3 + (int32_t)((x >> 8) % 500);
        }
    }
    test_lossless_greedy();
    test_batch_invariance_sampling();
    test_chunked_prefill();
    test_stops_and_errors();
    test_prefix_cache();
    test_logprobs();
    test_profile();
    return test_report("test_engine");
}
