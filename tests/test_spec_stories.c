/* The speculative step on a real pretrained target: stories260K (converted at test time) with a
 * small DSpark drafter trained on its samples (tools/train_stories_drafter.py; AL about 1.5, so
 * accepted drafts are common). Greedy speculative output equals greedy target-only output token
 * for token for K = 1..7 and batch sizes 1, 3 and 8 (20 prompts x 128 tokens); and sampling is
 * lossless: the first three emitted tokens follow the same distribution with and without
 * speculation (chi-square test of homogeneity over 4,000 seeds each), while the same test tells
 * apart two genuinely different settings. Both hold under DSpark's confidence-scheduled draft
 * lengths too (verifier/schedule.c, with a fixed GPU-like cost model). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "target/convert.h"
#include "chisq.h"
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

static int g_dynamic; /* open_engine: DSpark's confidence-scheduled draft lengths, GPU-like cost */

static flint_engine *open_engine(const char *drafter, int K, int seqs) {
    flint_engine_options o;
    flint_engine_options_default(&o);
    o.model_dir = model;
    o.drafter_dir = drafter;
    o.num_speculative_tokens = K;
    /* fixed K unless a test asks for dynamic lengths: the drafter has a confidence head, so the
     * default would schedule with costs measured at open, which depend on the machine's load (a
     * loaded CI runner once pruned every draft at K = 7: AL 0) */
    o.dynamic_draft = 0;
    if (g_dynamic && drafter) {
        /* a fixed model (as a GPU's: flat for a few rows) so the schedule, and the test, repeat */
        o.dynamic_draft = 1;
        o.dyn_fixed_ms = 5.0;
        o.dyn_row_ms = 0.4;
    }
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
    /* dynamic draft lengths (up to 7): still the target's greedy output, and the scheduler really
     * varies the lengths */
    g_dynamic = 1;
    e = open_engine(DFT, 7, 8);
    g_dynamic = 0;
    if (!e) return;
    for (int b = 0; b < 3; b++) {
        flint_spec_stats st = run(e, NP, batches[b], prm, got, lg);
        int same = 1;
        for (int p = 0; p < NP; p++) same &= lb[p] == T && lg[p] == T && !memcmp(base[p], got[p], sizeof base[p]);
        CHECKF(same, "dynamic draft, batch %d: speculative greedy output differs from target-only", batches[b]);
        if (b == 0) {
            printf("dynamic K<=7: mean AL %.3f, acceptance %.3f, steps drafting >= 1..7:", flint_spec_stats_mean_al(&st),
                   flint_spec_stats_acceptance_rate(&st));
            for (int j = 0; j < 7; j++) printf(" %lld", (long long)st.drafted_per_pos[j]);
            printf("\n");
            CHECKF(st.steps > 0 && st.drafted_per_pos[0] > st.drafted_per_pos[6],
                   "dynamic draft: the scheduler never shortened a draft (or never drafted)");
        }
    }
    flint_engine_close(e);

    /* the step-level length: with drafting costlier than any verify it can save (D = 50 ms
     * against T(B) = 1 ms), steps skip the drafter, except the first few (until ~24 requests'
     * acceptance is known) and one in 64 or fewer that keeps measuring;
     * free drafting keeps K = 7; the output stays the target's either way */
    for (int costly = 0; costly < 2; costly++) {
        flint_engine_options o;
        flint_engine_options_default(&o);
        o.model_dir = model;
        o.drafter_dir = DFT;
        o.num_speculative_tokens = 7;
        o.dynamic_draft = 1;
        o.dyn_fixed_ms = 1.0;
        o.dyn_row_ms = 0.0;
        o.dyn_draft_ms = costly ? 50.0 : 0.0;
        o.max_seqs = 8;
        o.n_threads = 1;
        flint_err err = {0};
        e = flint_engine_open(&o, &err);
        CHECKF(e != NULL, "%s", err.msg);
        if (!e) return;
        run(e, NP, 8, prm, got, lg);
        int same = 1;
        for (int p = 0; p < NP; p++) same &= lb[p] == T && lg[p] == T && !memcmp(base[p], got[p], sizeof base[p]);
        CHECKF(same, "step-level draft length (%s drafting): output differs from target-only", costly ? "costly" : "free");
        int64_t h[FLINT_MAX_DRAFT + 1], steps = 0;
        flint_engine_step_k_hist(e, h);
        for (int k = 0; k <= 7; k++) steps += h[k];
        printf("step-level K with %s drafting: %lld steps, K = 0: %lld, K = 7: %lld\n", costly ? "costly" : "free",
               (long long)steps, (long long)h[0], (long long)h[7]);
        if (costly)
            CHECKF(steps > 64 && h[0] >= steps - steps / 64 - 8 && h[7] >= steps / 256,
                   "costly drafting: %lld of %lld steps skipped the drafter, %lld drafted 7", (long long)h[0],
                   (long long)steps, (long long)h[7]);
        else
            CHECKF(steps > 0 && h[7] == steps, "free drafting: %lld of %lld steps drafted 7", (long long)h[7],
                   (long long)steps);
        flint_engine_close(e);
    }
}

static void test_sampling(void) {
    enum { N = 4000, V = 512 };
    static long counts[4][3][V]; /* [setting][position][token] */
    static int32_t out[N][T];
    static int lens[N];
    static flint_request_params prm[N];
    const char *names[4] = {"plain T=1", "speculative T=1", "plain T=0.8", "dynamic-length speculative T=1"};
    for (int st = 0; st < 4; st++) {
        g_dynamic = st == 3;
        flint_engine *e = open_engine(st == 1 || st == 3 ? DFT : NULL, 7, 8);
        g_dynamic = 0;
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
        snprintf(what, sizeof what, "position %d: dynamic-length speculative vs plain", t + 1);
        CHECKF(!differ(counts[3][t], counts[0][t], V, what), "sampling with dynamic draft lengths changes the "
               "distribution at position %d", t + 1);
    }
    /* power: T = 0.8 vs T = 1 must be told apart at some position */
    int seen = 0;
    for (int t = 0; t < 3; t++) {
        snprintf(what, sizeof what, "position %d: %s vs %s", t + 1, names[2], names[0]);
        seen |= differ(counts[2][t], counts[0][t], V, what);
    }
    CHECKF(seen, "the homogeneity test cannot tell T=0.8 from T=1: it has no power");
}

/* Structured output through the engine: every response parses and matches the schema, with and
 * without speculation; greedy constrained output is the same with speculation; bad formats are
 * refused at add. */
static const char *SCHEMA =
    "{\"type\": \"json_schema\", \"json_schema\": {\"name\": \"person\", \"schema\": {\"type\": \"object\", "
    "\"properties\": {\"name\": {\"type\": \"string\", \"maxLength\": 12}, \"age\": {\"type\": \"integer\"}, "
    "\"tags\": {\"type\": \"array\", \"items\": {\"type\": \"string\", \"maxLength\": 8}, \"maxItems\": 3}, "
    "\"kind\": {\"enum\": [\"cat\", \"dog\"]}}, \"required\": [\"name\", \"age\", \"kind\"]}}}";

static int run_constrained(flint_engine *e, const char *rf, float temp, uint64_t seed, char *text, size_t cap,
                           int32_t *toks, int *n_toks, flint_finish_reason *fin) {
    flint_request_params p;
    flint_request_params_default(&p);
    p.max_tokens = 300;
    p.sampling.temperature = temp;
    p.sampling.seed = seed;
    p.response_format = rf;
    flint_err err = {0};
    int sid = flint_engine_add(e, prompt[1], plen[1], &p, &err);
    if (sid < 0) {
        snprintf(text, cap, "%s", err.msg);
        return -1;
    }
    size_t n = 0;
    *n_toks = 0;
    while (flint_engine_active(e)) {
        const flint_step_event *ev;
        int ne;
        if (flint_engine_step(e, &ev, &ne, &err)) return -1;
        for (int j = 0; j < ne; j++) {
            if (n + ev[j].text_len < cap) memcpy(text + n, ev[j].text, ev[j].text_len), n += ev[j].text_len;
            for (int t = 0; t < ev[j].n_tokens && *n_toks < 300; t++) toks[(*n_toks)++] = ev[j].tokens[t];
            if (ev[j].finish) *fin = ev[j].finish;
        }
    }
    text[n] = 0;
    const flint_step_event *ev;
    int ne;
    flint_engine_step(e, &ev, &ne, &err);
    return 0;
}

static int valid_person(const char *text) {
    cJSON *j = cJSON_Parse(text);
    if (!cJSON_IsObject(j)) return cJSON_Delete(j), 0;
    const cJSON *name = cJSON_GetObjectItem(j, "name"), *age = cJSON_GetObjectItem(j, "age"),
                *kind = cJSON_GetObjectItem(j, "kind"), *tags = cJSON_GetObjectItem(j, "tags"), *it;
    int ok = cJSON_IsString(name) && strlen(name->valuestring) <= 12 * 4 && cJSON_IsNumber(age) &&
             age->valuedouble == (double)(long long)age->valuedouble && cJSON_IsString(kind) &&
             (!strcmp(kind->valuestring, "cat") || !strcmp(kind->valuestring, "dog"));
    if (tags) {
        ok &= cJSON_IsArray(tags) && cJSON_GetArraySize(tags) <= 3;
        cJSON_ArrayForEach(it, tags) ok &= cJSON_IsString(it);
    }
    int n = 0;
    cJSON_ArrayForEach(it, j) n++;
    ok &= n <= 4;
    cJSON_Delete(j);
    return ok;
}

static void test_structured(void) {
    static char text[2][4096];
    static int32_t toks[2][300];
    int nt[2];
    flint_finish_reason fin[2];
    for (int temp = 0; temp <= 1; temp++) {
        for (int spec = 0; spec <= 1; spec++) {
            flint_engine *e = open_engine(spec ? DFT : NULL, 4, 2);
            if (!e) return;
            for (uint64_t seed = 1; seed <= (temp ? 12u : 1u); seed++) {
                int rc = run_constrained(e, SCHEMA, (float)temp, seed, text[spec], sizeof text[spec], toks[spec],
                                         &nt[spec], &fin[spec]);
                CHECKF(rc == 0 && fin[spec] == FLINT_FINISH_STOP && valid_person(text[spec]),
                       "T=%d spec %d seed %llu: '%s' (finish %d)", temp, spec, (unsigned long long)seed, text[spec],
                       fin[spec]);
                rc = run_constrained(e, "{\"type\": \"json_object\"}", (float)temp, seed + 100, text[spec],
                                     sizeof text[spec], toks[spec], &nt[spec], &fin[spec]);
                cJSON *j = cJSON_Parse(text[spec]);
                CHECKF(rc == 0 && (fin[spec] == FLINT_FINISH_LENGTH || cJSON_IsObject(j)),
                       "json_object T=%d spec %d: '%s'", temp, spec, text[spec]);
                cJSON_Delete(j);
            }
            if (temp == 0) run_constrained(e, SCHEMA, 0, 1, text[spec], sizeof text[spec], toks[spec], &nt[spec], &fin[spec]);
            if (spec == 1 && temp == 0) {
                printf("greedy constrained output: %s\n", text[1]);
                CHECKF(nt[0] == nt[1] && !memcmp(toks[0], toks[1], sizeof(int32_t) * nt[0]),
                       "greedy constrained output differs with speculation");
            }
            char msg[4096];
            int32_t t[300];
            int n;
            flint_finish_reason f;
            CHECK(run_constrained(e, "{\"type\": \"json_schema\", \"json_schema\": {\"schema\": {\"$ref\": \"#/x\"}}}",
                                  0, 1, msg, sizeof msg, t, &n, &f) == -1 && strstr(msg, "$ref"));
            flint_engine_close(e);
        }
    }
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
    test_structured();
    for (int i = 0; i < NP; i++) free(prompt[i]);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", dir);
    return test_report("test_spec_stories");
}
