/* Sampler: Philox known answers, logits processing semantics, and a chi-square test that draws
 * follow the processed distribution (with a deliberately wrong sampler that the test rejects). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sampler/sampler.h"
#include "test.h"

static void test_philox(void) {
    /* Random123 known-answer vectors for philox4x32-10 */
    struct {
        uint32_t ctr[4];
        uint64_t key;
        uint32_t out[4];
    } kat[] = {
        {{0, 0, 0, 0}, 0, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
        {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, 0xffffffffffffffffull,
         {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
        {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, 0x299f31d0a4093822ull,
         {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
    };
    for (int i = 0; i < 3; i++) {
        uint32_t out[4];
        flint_philox4x32(kat[i].key, kat[i].ctr, out);
        CHECKF(!memcmp(out, kat[i].out, sizeof out), "kat %d: %08x %08x %08x %08x", i, out[0], out[1], out[2],
               out[3]);
    }
    /* uniforms in range, keyed by every part of the key */
    double u = flint_rng_uniform(7, 100, FLINT_RNG_ACCEPT, 0);
    CHECK(u >= 0 && u < 1);
    CHECK(u == flint_rng_uniform(7, 100, FLINT_RNG_ACCEPT, 0));
    CHECK(u != flint_rng_uniform(8, 100, FLINT_RNG_ACCEPT, 0));
    CHECK(u != flint_rng_uniform(7, 101, FLINT_RNG_ACCEPT, 0));
    CHECK(u != flint_rng_uniform(7, 100, FLINT_RNG_BONUS, 0));
    CHECK(u != flint_rng_uniform(7, 100, FLINT_RNG_ACCEPT, 1));
    /* mean of many uniforms */
    double s = 0;
    for (int i = 0; i < 100000; i++) s += flint_rng_uniform(1, i, FLINT_RNG_SAMPLE, 0);
    CHECKF(fabs(s / 100000 - 0.5) < 0.005, "mean %f", s / 100000);
}

static void test_processing(void) {
    float logits[6] = {1.0f, 3.0f, 2.0f, 3.0f, -1.0f, 0.5f};
    float p[6];
    flint_sampler_scratch sc;
    flint_sampler_scratch_init(&sc, 6);
    flint_sampling_params sp;
    flint_sampling_params_default(&sp);

    CHECK(flint_argmax(logits, 6) == 1); /* ties: lowest index */
    float nanrow[3] = {NAN, 1.0f, 0.5f};
    CHECK(flint_argmax(nanrow, 3) == 1);

    sp.temperature = 0;
    flint_sampler_probs(&sp, logits, 6, p, &sc);
    CHECK(p[1] == 1.0f && p[3] == 0.0f);
    CHECK(flint_sampler_sample(&sp, logits, 6, 0, &sc) == 1);

    sp.temperature = 1;
    flint_sampler_probs(&sp, logits, 6, p, &sc);
    double tot = 0, ref[6], rt = 0;
    for (int i = 0; i < 6; i++) ref[i] = exp(logits[i]), rt += ref[i];
    for (int i = 0; i < 6; i++) {
        tot += p[i];
        CHECK(fabs(p[i] - ref[i] / rt) < 1e-6);
    }
    CHECK(fabs(tot - 1) < 1e-6);

    sp.top_k = 2; /* the two 3.0s */
    flint_sampler_probs(&sp, logits, 6, p, &sc);
    CHECK(fabs(p[1] - 0.5) < 1e-6 && fabs(p[3] - 0.5) < 1e-6 && p[2] == 0 && p[0] == 0);

    sp.top_k = 3; /* 1, 3 and then 2 */
    flint_sampler_probs(&sp, logits, 6, p, &sc);
    CHECK(p[2] > 0 && p[0] == 0);

    sp.top_k = 0;
    sp.top_p = 0.5f; /* first token alone has mass e^3/rt ~ 0.39 < 0.5 -> two tokens */
    flint_sampler_probs(&sp, logits, 6, p, &sc);
    CHECK(p[1] > 0 && p[3] > 0 && p[2] == 0);
    sp.top_p = 0.3f;
    flint_sampler_probs(&sp, logits, 6, p, &sc);
    CHECK(p[1] == 1.0f && p[3] == 0);

    sp.top_p = 1.0f;
    sp.min_p = 0.3f; /* keeps tokens with p >= 0.3 p_max: 3.0, 3.0, 2.0 (e^-1 = .37) */
    flint_sampler_probs(&sp, logits, 6, p, &sc);
    CHECK(p[1] > 0 && p[3] > 0 && p[2] > 0 && p[0] == 0 && p[5] == 0);

    sp.min_p = 0;
    sp.temperature = 0.5f;
    flint_sampler_probs(&sp, logits, 6, p, &sc);
    CHECK(fabs(p[2] / p[1] - exp(-2.0)) < 1e-5);

    flint_err err = {0};
    flint_sampling_params bad = sp;
    bad.temperature = -1;
    CHECK(flint_sampling_params_check(&bad, &err) == -1 && strstr(err.msg, "temperature"));
    bad = sp;
    bad.top_p = 0;
    CHECK(flint_sampling_params_check(&bad, &err) == -1 && strstr(err.msg, "top_p"));
    bad = sp;
    bad.min_p = 2;
    CHECK(flint_sampling_params_check(&bad, &err) == -1 && strstr(err.msg, "min_p"));
    bad = sp;
    bad.top_k = -3;
    CHECK(flint_sampling_params_check(&bad, &err) == -1 && strstr(err.msg, "top_k"));
    CHECK(flint_sampling_params_check(&sp, &err) == 0);
    flint_sampler_scratch_free(&sc);
}

/* Pearson chi-square of counts against probabilities; bins with expectation < 5 are pooled. */
static double chi2(const long *counts, const float *p, int n, long trials, int *dof) {
    double stat = 0, pool_e = 0, pool_o = 0;
    int bins = 0;
    for (int i = 0; i < n; i++) {
        double e = p[i] * (double)trials;
        if (e < 5) {
            pool_e += e;
            pool_o += counts[i];
            if (p[i] == 0 && counts[i]) return INFINITY; /* a token that must never appear */
            continue;
        }
        stat += (counts[i] - e) * (counts[i] - e) / e;
        bins++;
    }
    if (pool_e >= 5) {
        stat += (pool_o - pool_e) * (pool_o - pool_e) / pool_e;
        bins++;
    }
    *dof = bins - 1;
    return stat;
}

/* Upper critical value of chi-square at p = 0.001 (Wilson-Hilferty approximation). */
static double chi2_crit(int dof) {
    double z = 3.090232;
    double k = dof;
    double t = 1 - 2 / (9 * k) + z * sqrt(2 / (9 * k));
    return k * t * t * t;
}

static void test_distribution(void) {
    enum { V = 50 };
    float logits[V], p[V];
    for (int i = 0; i < V; i++) logits[i] = (float)(sin(i * 1.7) * 2.5);
    flint_sampler_scratch sc;
    flint_sampler_scratch_init(&sc, V);
    flint_sampling_params configs[4];
    for (int c = 0; c < 4; c++) flint_sampling_params_default(&configs[c]);
    configs[1].temperature = 0.7f, configs[1].top_k = 20;
    configs[2].temperature = 1.3f, configs[2].top_p = 0.8f;
    configs[3].min_p = 0.1f, configs[3].top_p = 0.95f, configs[3].top_k = 30;
    const long trials = 200000;
    long counts[V];
    for (int c = 0; c < 4; c++) {
        flint_sampling_params sp = configs[c];
        sp.seed = 1234 + c;
        flint_sampler_probs(&sp, logits, V, p, &sc);
        memset(counts, 0, sizeof counts);
        for (long t = 0; t < trials; t++) counts[flint_sampler_sample(&sp, logits, V, t, &sc)]++;
        int dof;
        double x = chi2(counts, p, V, trials, &dof);
        printf("config %d: chi2 %.1f, dof %d, critical %.1f\n", c, x, dof, chi2_crit(dof));
        CHECKF(x < chi2_crit(dof), "config %d: chi2 %.1f >= %.1f", c, x, chi2_crit(dof));
    }
    /* The same test must reject a sampler that ignores temperature. */
    flint_sampling_params sp = configs[1], wrong = configs[1];
    wrong.temperature = 1.0f;
    flint_sampler_probs(&sp, logits, V, p, &sc);
    memset(counts, 0, sizeof counts);
    for (long t = 0; t < trials; t++) counts[flint_sampler_sample(&wrong, logits, V, t, &sc)]++;
    int dof;
    double x = chi2(counts, p, V, trials, &dof);
    printf("wrong sampler: chi2 %.1f (critical %.1f)\n", x, chi2_crit(dof));
    CHECK(x > chi2_crit(dof));
    flint_sampler_scratch_free(&sc);
}

int main(void) {
    test_philox();
    test_processing();
    test_distribution();
    return test_report("test_sampler");
}
