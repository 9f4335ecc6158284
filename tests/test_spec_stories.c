/* The speculative step on a real pretrained target: stories260K (converted at test time) with a
 * small DSpark drafter trained on its samples (tools/train_stories_drafter.py; AL about 1.5, so
 * accepted drafts are common). Greedy speculative output equals greedy target-only output token
 * for token for K = 1..7 and batch sizes 1, 3 and 8 (20 prompts x 128 tokens); and sampling is
 * lossless: the first three emitted tokens follow the same distribution with and without
 * speculation (chi-square test of homogeneity over 4,000 seeds each), while the same test tells
 * apart two genuinely different settings. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "target/convert.h"
#include "test.h"
#include "verifier/engine.h"

#define DFT FLINT_SOURCE_DIR "/tests/fixtures/stories_dspark"
enum { NP = 20, T = 128 };

static char model[256];
static int32_t *prompt[NP];
static int plen[NP];

static const char *openers[NP] = {
    "Once upon a time", "Lily and Tom", "One day, a little dog", "The sun was", "Tim had a red ball",
    "There was a big tree", "Sam wanted to", "The cat", "Anna went to the park", "A bird sat on",
    "Mom said", "It was a rainy day", "Ben found a box", "The little girl", "Max liked to play",
    "In the garden", "Sue and her friend", "The boy was sad", "A frog", "They went to the beach"};

static flint_engine *open_engine(const char *drafter, int K, int seqs) {
    flint_engine_options o;
    flint_engine_options_default(&o);
    o.model_dir = model;
    o.drafter_dir = drafter;
    o.num_speculative_tokens = K;
    o.max_seqs = seqs;
    o.n_threads = 1; /* ctest runs tests side by side: spinning OpenMP threads would fight */
    flint_err err = {0};
    flint_engine *e = flint_engine_open(&o, &err);
    CHECKF(e != NULL, "%s", err.msg);
    return e;
}

/* Run prompts [0, n) in groups of B; tokens into out[p][...]; returns pooled stats. */
static flint_spec_stats run(flint_engine *e, int n, int B, const flint_request_params *prm, int32_t out[][T],
                            int *lens) {
    flint_spec_stats pooled = {0};
    flint_err err = {0};
    for (int first = 0; first < n; first += B) {
        int cnt = first + B <= n ? B : n - first, sid[8];
        for (int i = 0; i < cnt; i++) {
            sid[i] = flint_engine_add(e, prompt[(first + i) % NP], plen[(first + i) % NP], &prm[first + i], &err);
            CHECKF(sid[i] >= 0, "%s", err.msg);
            lens[first + i] = 0;
        }
        while (flint_engine_active(e)) {
            const flint_step_event *ev;
            int ne;
            if (flint_engine_step(e, &ev, &ne, &err)) {
                CHECKF(0, "%s", err.msg);
                return pooled;
            }
            for (int j = 0; j < ne; j++)
                for (int i = 0; i < cnt; i++)
                    if (ev[j].sid == sid[i]) {
                        int p = first + i;
                        for (int t = 0; t < ev[j].n_tokens && lens[p] < T; t++) out[p][lens[p]++] = ev[j].tokens[t];
                        if (ev[j].finish) flint_spec_stats_add(&pooled, ev[j].stats);
                    }
        }
        const flint_step_event *ev;
        int ne;
        flint_engine_step(e, &ev, &ne, &err);
    }
    return pooled;
}

static void test_greedy(void) {
    static int32_t base[NP][T], got[NP][T];
    int lb[NP], lg[NP];
    flint_request_params prm[NP];
    for (int i = 0; i < NP; i++) {
        flint_request_params_default(&prm[i]);
        prm[i].max_tokens = T;
        prm[i].ignore_eos = 1;
        prm[i].sampling.temperature = 0;
    }
    flint_engine *e = open_engine(NULL, 0, 8);
    if (!e) return;
    run(e, NP, 8, prm, base, lb);
    flint_engine_close(e);
    int batches[3] = {1, 3, 8};
    for (int K = 1; K <= 7; K++) {
        e = open_engine(DFT, K, 8);
        if (!e) return;
        for (int b = 0; b < 3; b++) {
            flint_spec_stats st = run(e, NP, batches[b], prm, got, lg);
            int same = 1;
            for (int p = 0; p < NP; p++) same &= lb[p] == T && lg[p] == T && !memcmp(base[p], got[p], sizeof base[p]);
            CHECKF(same, "K=%d batch %d: speculative greedy output differs from target-only", K, batches[b]);
            if (b == 0) {
                printf("K=%d: mean AL %.3f, acceptance %.3f\n", K, flint_spec_stats_mean_al(&st),
                       flint_spec_stats_acceptance_rate(&st));
                CHECKF(flint_spec_stats_mean_al(&st) > 1.2, "K=%d: AL %.3f: too few accepted drafts for this test to "
                       "mean anything", K, flint_spec_stats_mean_al(&st));
            }
        }
        flint_engine_close(e);
    }
}

/* Chi-square test of homogeneity between two count vectors; bins with small expectations pooled.
 * Returns 1 when the difference is significant at p = 0.001. */
static int differ(const long *a, const long *b, int n, const char *what) {
    long na = 0, nb = 0;
    for (int i = 0; i < n; i++) na += a[i], nb += b[i];
    double stat = 0, pa = 0, pb = 0;
    int bins = 0;
    for (int i = 0; i < n; i++) {
        long tot = a[i] + b[i];
        if (!tot) continue;
        double ea = (double)tot * na / (na + nb), eb = (double)tot * nb / (na + nb);
        if (ea < 5 || eb < 5) {
            pa += a[i], pb += b[i];
            continue;
        }
        stat += (a[i] - ea) * (a[i] - ea) / ea + (b[i] - eb) * (b[i] - eb) / eb;
        bins++;
    }
    if (pa + pb > 0) {
        double tot = pa + pb, ea = tot * na / (na + nb), eb = tot * nb / (na + nb);
        if (ea > 0 && eb > 0) stat += (pa - ea) * (pa - ea) / ea + (pb - eb) * (pb - eb) / eb, bins++;
    }
    int dof = bins > 1 ? bins - 1 : 1;
    double z = 3.090232, t = 1 - 2 / (9.0 * dof) + z * sqrt(2 / (9.0 * dof)), crit = dof * t * t * t;
    printf("%s: chi2 %.1f, dof %d, critical %.1f\n", what, stat, dof, crit);
    return stat > crit;
}

static void test_sampling(void) {
    enum { N = 4000, V = 512 };
    static long counts[3][3][V]; /* [setting][position][token] */
    static int32_t out[N][T];
    static int lens[N];
    static flint_request_params prm[N];
    const char *names[3] = {"plain T=1", "speculative T=1", "plain T=0.8"};
    for (int st = 0; st < 3; st++) {
        flint_engine *e = open_engine(st == 1 ? DFT : NULL, 7, 8);
        if (!e) return;
        for (int i = 0; i < N; i++) {
            flint_request_params_default(&prm[i]);
            prm[i].max_tokens = 3;
            prm[i].ignore_eos = 1;
            prm[i].sampling.temperature = st == 2 ? 0.8f : 1.0f;
            prm[i].sampling.seed = 1000003ull * (uint64_t)i + (uint64_t)st * 7919; /* independent per setting */
        }
        /* every request uses prompt 0 */
        int32_t *keep[NP];
        int keepl[NP];
        memcpy(keep, prompt, sizeof keep);
        memcpy(keepl, plen, sizeof keepl);
        for (int i = 0; i < NP; i++) prompt[i] = keep[0], plen[i] = keepl[0];
        run(e, N, 8, prm, out, lens);
        memcpy(prompt, keep, sizeof keep);
        memcpy(plen, keepl, sizeof keepl);
        for (int i = 0; i < N; i++)
            for (int t = 0; t < 3 && t < lens[i]; t++) counts[st][t][out[i][t]]++;
        flint_engine_close(e);
    }
    char what[64];
    for (int t = 0; t < 3; t++) {
        snprintf(what, sizeof what, "position %d: speculative vs plain", t + 1);
        CHECKF(!differ(counts[1][t], counts[0][t], V, what), "sampling with speculation changes the distribution at "
               "position %d", t + 1);
    }
    /* power: T = 0.8 vs T = 1 must be told apart at some position */
    int seen = 0;
    for (int t = 0; t < 3; t++) {
        snprintf(what, sizeof what, "position %d: %s vs %s", t + 1, names[2], names[0]);
        seen |= differ(counts[2][t], counts[0][t], V, what);
    }
    CHECKF(seen, "the homogeneity test cannot tell T=0.8 from T=1: it has no power");
}

int main(void) {
    char dir[] = "/tmp/flint_stories_XXXXXX";
    if (!mkdtemp(dir)) return 1;
    snprintf(model, sizeof model, "%s/m", dir);
    flint_err err = {0};
    CHECKF(flint_convert_llama2c(FLINT_SOURCE_DIR "/models/stories260K/stories260K.bin",
                                 FLINT_SOURCE_DIR "/models/stories260K/tok512.bin", model, &err) == 0, "%s", err.msg);
    flint_engine *e = open_engine(NULL, 0, 1);
    if (!e) return test_report("test_spec_stories");
    for (int i = 0; i < NP; i++)
        CHECK(flint_tokenizer_encode(flint_engine_tokenizer(e), openers[i], strlen(openers[i]), 1, &prompt[i], &plen[i],
                                     &err) == 0);
    flint_engine_close(e);
    test_greedy();
    test_sampling();
    for (int i = 0; i < NP; i++) free(prompt[i]);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", dir);
    return test_report("test_spec_stories");
}
