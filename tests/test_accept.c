/* Lossless acceptance, checked statistically: on a synthetic vocabulary with known target
 * distributions p_i and draft distributions q_i, the token emitted at every position must follow
 * the processed p_i. Chi-square at p = 0.001 over >= 100k samples per position; the same harness
 * must reject two deliberately broken acceptors, so the test can fail. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sampler/sampler.h"
#include "test.h"

enum { V = 24, K = 4 };

typedef int (*acceptor_fn)(const flint_sampling_params *, int, const int32_t *, const float *, const float *, int,
                           int64_t, flint_sampler_scratch *, int32_t *);

/* Broken on purpose: on rejection it resamples from p instead of the residual max(0, p - q). */
static int broken_residual(const flint_sampling_params *sp, int k, const int32_t *draft, const float *q,
                           const float *logits, int n, int64_t pos0, flint_sampler_scratch *s, int32_t *out) {
    float *p = s->probs;
    for (int i = 0; i < k; i++) {
        flint_sampler_probs(sp, logits + (size_t)i * n, n, p, s);
        int32_t x = draft[i];
        float qx = q ? q[(size_t)i * n + x] : 1.0f;
        if (flint_rng_uniform(sp->seed, pos0 + i, FLINT_RNG_ACCEPT, 0) * qx < p[x]) {
            out[i] = x;
            continue;
        }
        out[i] = flint_sample_from_probs(p, n, flint_rng_uniform(sp->seed, pos0 + i, FLINT_RNG_RESIDUAL, 0));
        return i;
    }
    flint_sampler_probs(sp, logits + (size_t)k * n, n, p, s);
    out[k] = flint_sample_from_probs(p, n, flint_rng_uniform(sp->seed, pos0 + k, FLINT_RNG_BONUS, 0));
    return k;
}

/* Broken on purpose: accepts with probability min(1, p/q) computed against the unprocessed
 * (temperature 1) target instead of the processed one. */
static int broken_unprocessed(const flint_sampling_params *sp, int k, const int32_t *draft, const float *q,
                              const float *logits, int n, int64_t pos0, flint_sampler_scratch *s, int32_t *out) {
    flint_sampling_params raw = *sp;
    raw.temperature = 1.0f;
    raw.top_k = 0;
    raw.top_p = 1.0f;
    raw.min_p = 0;
    return flint_accept_draft(&raw, k, draft, q, logits, n, pos0, s, out);
}

static double chi2_crit(int dof) { /* p = 0.001, Wilson-Hilferty */
    double z = 3.090232, t = 1 - 2 / (9.0 * dof) + z * sqrt(2 / (9.0 * dof));
    return dof * t * t * t;
}

/* Returns the number of positions whose chi-square exceeds the critical value. */
static int run(acceptor_fn acc, const flint_sampling_params *sp0, int greedy_drafts, const char *name) {
    float logits[(K + 1) * V], q[K * V], p[(K + 1) * V];
    flint_sampler_scratch sc;
    flint_sampler_scratch_init(&sc, V);
    /* target rows and draft rows that differ but overlap, so rejections are common */
    /* each target row has a dominant token; each draft row is a perturbed copy of its target row
     * (a realistic drafter: mostly right, often wrong about the tail) */
    for (int i = 0; i <= K; i++)
        for (int v = 0; v < V; v++)
            logits[i * V + v] = (float)(1.5 * sin(0.9 * v + 1.3 * i) + (v == (5 * i + 3) % V ? 4.0 : 0.0));
    for (int i = 0; i < K; i++) {
        double t = 0;
        for (int v = 0; v < V; v++)
            t += q[i * V + v] = (float)exp(0.8 * logits[i * V + v] + 0.7 * cos(2.1 * v + i));
        for (int v = 0; v < V; v++) q[i * V + v] /= (float)t;
    }
    for (int i = 0; i <= K; i++) flint_sampler_probs(sp0, logits + i * V, V, p + i * V, &sc);
    static long counts[K + 1][V];
    long reached[K + 1];
    memset(counts, 0, sizeof counts);
    memset(reached, 0, sizeof reached);
    const int64_t pos0 = 1000;
    long trials = 0;
    while (reached[K] < 100000 && trials < 4000000) {
        flint_sampling_params sp = *sp0;
        sp.seed = (uint64_t)trials * 2654435761u + 17;
        int32_t draft[K], out[K + 1];
        for (int i = 0; i < K; i++)
            draft[i] = greedy_drafts ? flint_argmax(q + i * V, V) : flint_sample_draft(q + i * V, V, sp.seed, pos0 + i);
        int n_acc = acc(&sp, K, draft, greedy_drafts ? NULL : q, logits, V, pos0, &sc, out);
        for (int j = 0; j <= n_acc; j++) {
            counts[j][out[j]]++;
            reached[j]++;
        }
        trials++;
    }
    int bad = 0;
    for (int j = 0; j <= K; j++) {
        double stat = 0;
        int bins = 0;
        int impossible = 0;
        for (int v = 0; v < V; v++) {
            double e = p[j * V + v] * reached[j];
            if (p[j * V + v] == 0) {
                impossible += counts[j][v] != 0;
                continue;
            }
            stat += (counts[j][v] - e) * (counts[j][v] - e) / e;
            bins++;
        }
        int dof = bins - 1 > 0 ? bins - 1 : 1;
        int fails = stat > chi2_crit(dof) || impossible;
        printf("%-28s pos %d: %7ld samples, chi2 %9.1f (crit %.1f, dof %d)%s\n", name, j, reached[j], stat,
               chi2_crit(dof), dof, impossible ? " EMITS A TOKEN OUTSIDE p" : "");
        bad += fails;
        CHECKF(reached[j] >= 100000, "%s: position %d reached only %ld times", name, j, reached[j]);
    }
    flint_sampler_scratch_free(&sc);
    return bad;
}

static void test_greedy_target(void) {
    float logits[(K + 1) * V];
    for (int i = 0; i <= K; i++)
        for (int v = 0; v < V; v++) logits[i * V + v] = (float)((v * 7 + i * 3) % V);
    int32_t best[K + 1];
    for (int i = 0; i <= K; i++) best[i] = flint_argmax(logits + i * V, V);
    flint_sampler_scratch sc;
    flint_sampler_scratch_init(&sc, V);
    flint_sampling_params sp;
    flint_sampling_params_default(&sp);
    sp.temperature = 0;
    int32_t out[K + 1], draft[K];
    memcpy(draft, best, sizeof draft);
    CHECK(flint_accept_draft(&sp, K, draft, NULL, logits, V, 0, &sc, out) == K);
    CHECK(!memcmp(out, best, sizeof out));
    draft[2] = (best[2] + 1) % V;
    CHECK(flint_accept_draft(&sp, K, draft, NULL, logits, V, 0, &sc, out) == 2);
    CHECK(out[0] == best[0] && out[1] == best[1] && out[2] == best[2]);
    CHECK(flint_accept_draft(&sp, 0, draft, NULL, logits, V, 0, &sc, out) == 0 && out[0] == best[0]);
    flint_sampler_scratch_free(&sc);
}

int main(void) {
    test_greedy_target();
    flint_sampling_params sp;
    flint_sampling_params_default(&sp);
    CHECKF(run(flint_accept_draft, &sp, 0, "probabilistic T=1") == 0, "lossless acceptor failed");
    flint_sampling_params sp2 = sp;
    sp2.temperature = 1.6f, sp2.top_k = 16, sp2.top_p = 0.97f, sp2.min_p = 0.02f;
    CHECKF(run(flint_accept_draft, &sp2, 0, "probabilistic T=1.6 k p minp") == 0, "lossless acceptor failed");
    CHECKF(run(flint_accept_draft, &sp, 1, "greedy drafts, sampled p") == 0, "lossless acceptor failed");
    /* the harness has power: both broken acceptors are caught */
    CHECKF(run(broken_residual, &sp, 0, "BROKEN residual = p") > 0, "broken acceptor not detected");
    CHECKF(run(broken_unprocessed, &sp2, 0, "BROKEN unprocessed p") > 0, "broken acceptor not detected");
    return test_report("test_accept");
}
