/* evals/stats: the sign test, the Wilcoxon signed-rank test, quantiles and the normal tail
 * against scipy 1.17 / numpy on fixed inputs; bootstrap properties; and the A/A calibration of
 * the paired verdict of `flint ab`: on synthetic paired acceptance data where both arms come from
 * the same drafter (same per-prompt acceptance, independent sampling noise), at least 95 of 100
 * repetitions must say "no significant difference", the false-positive rate over 2000
 * repetitions must sit near the nominal 5% (neither broken nor uselessly conservative), and a
 * real difference must be found.
 *
 * The reference values were made with this snippet (scipy 1.17.1, numpy 2):
 *
 *   import numpy as np; from scipy import stats
 *   for d in (d1, d2, d3, d4):                       # the arrays below
 *       x = np.array([v for v in d if v != 0])
 *       w = stats.wilcoxon(x, zero_method="wilcox", correction=False, method="auto")
 *       wa = stats.wilcoxon(x, zero_method="wilcox", correction=False, method="asymptotic")
 *       npos, nneg = (x > 0).sum(), (x < 0).sum()
 *       print(w.statistic, w.pvalue, wa.pvalue, wa.zstatistic, stats.binomtest(npos, npos + nneg, 0.5).pvalue)
 *   stats.binomtest(3, 20, 0.5).pvalue; stats.binomtest(60, 100, 0.5).pvalue; stats.binomtest(480, 1000, 0.5).pvalue
 *   stats.norm.sf(1.96); stats.norm.sf(-0.5)
 *   np.percentile([3.0, 1.0, 4.0, 1.5, 9.0, 2.6, 5.0], [2.5, 50, 97.5])
 *   stats.wilcoxon(d5, zero_method="wilcox", correction=False, method="auto")  # n = 10 with ties:
 *                                                              # exhaustive permutation test
 *   # d2's exact permutation p, an independent DP in Python (and a 200k-resample Monte Carlo
 *   # stats.permutation_test of the same statistic gave 0.00579):
 *   x = np.array([v for v in d2 if v != 0]); r2 = (2 * rankdata(np.abs(x))).astype(int)
 *   wp = r2[x > 0].sum(); cnt = {0: 1}
 *   for k in r2: cnt = {s: cnt.get(s, 0) + cnt.get(s - k, 0) for s in range(sum(r2) + 1)}
 *   lo = sum(c for s, c in cnt.items() if s <= wp); hi = sum(c for s, c in cnt.items() if s >= wp)
 *   print(min(1, 2 * min(lo, hi) / 2 ** len(x)))
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "evals/stats.h"
#include "test.h"

static int close_to(double a, double b, double rel) { return fabs(a - b) <= rel * fmax(1e-300, fabs(b)); }

static void test_reference_values(void) {
    double d1[] = {0.5, -0.25, 1.0, 0.75, 2.0, -0.125, 1.5, 0.375, 3.0, -1.75};
    double d2[] = {0.25, -0.5, 0, 0.25, 1.0, 0.5, -0.25, 0, 0.75, 0.5, 1.25, -1.0, 0.25, 0.5, 0,
                   2.0, -0.75, 0.5, 1.0, 0.25, -0.25, 0.75, 1.5, 0, 0.5, -0.5, 0.25, 1.0, 0.75, 0.5};
    double d3[60], d4[20];
    for (int i = 0; i < 60; i++) d3[i] = ((i * 37) % 61 - 25) / 8.0 + i / 1024.0;
    for (int i = 0; i < 20; i++) d4[i] = (i % 2 ? -1 : 1) * (i + 1) * 0.1 + (i % 3 == 0 ? 0.05 : 0);
    flint_stats_wilcoxon w;
    flint_stats_sign s;

    /* d1: 10 untied non-zero -> exact */
    flint_stats_wilcoxon_test(d1, 10, &w);
    CHECK(w.exact && w.n == 10 && w.statistic == 11.0);
    CHECKF(close_to(w.p, 0.10546875, 1e-12), "%.17g", w.p);
    flint_stats_wilcoxon_test_method(d1, 10, 0, &w);
    CHECKF(close_to(w.p, 0.09260069782067576, 1e-9), "%.17g", w.p);
    CHECKF(close_to(fabs(w.z), 1.6818357317441643, 1e-9), "%.17g", w.z);
    flint_stats_sign_test(d1, 10, &s);
    CHECK(s.n_pos == 7 && s.n_neg == 3 && s.n_zero == 0);
    CHECKF(close_to(s.p, 0.34375, 1e-12), "%.17g", s.p);

    /* d2: zeros (dropped) and ties -> exact permutation distribution; forced normal approximation
     * with the tie correction as scipy's "asymptotic" */
    flint_stats_wilcoxon_test(d2, 30, &w);
    CHECK(w.exact && w.ties && w.n == 26 && w.n_zero == 4 && w.statistic == 70.0);
    CHECKF(close_to(w.p, 0.005770981311798096, 1e-9), "%.17g", w.p);
    flint_stats_wilcoxon_test_method(d2, 30, 0, &w);
    CHECKF(close_to(w.p, 0.006997990302320374, 1e-9), "%.17g", w.p);
    CHECKF(close_to(fabs(w.z), 2.6969398815543113, 1e-9), "%.17g", w.z);
    /* d5: ties, n = 10: scipy's "auto" runs the exhaustive permutation test */
    double d5[] = {0.5, 0.5, -0.25, 1.0, 1.0, 0.75, -0.5, 0.25, 0.75, 1.0};
    flint_stats_wilcoxon_test(d5, 10, &w);
    CHECK(w.exact && w.ties && w.statistic == 5.5);
    CHECKF(close_to(w.p, 0.025390625, 1e-12), "%.17g", w.p);
    flint_stats_sign_test(d2, 30, &s);
    CHECK(s.n_pos == 20 && s.n_neg == 6 && s.n_zero == 4);
    CHECKF(close_to(s.p, 0.009355306625366211, 1e-9), "%.17g", s.p);

    /* d3: 60 untied -> over 50, normal approximation */
    flint_stats_wilcoxon_test(d3, 60, &w);
    CHECK(!w.exact && !w.ties && w.statistic == 624.0);
    CHECKF(close_to(w.p, 0.03217526217705323, 1e-9), "%.17g", w.p);
    flint_stats_sign_test(d3, 60, &s);
    CHECKF(close_to(s.p, 0.1550019040032606, 1e-9), "%.17g", s.p);

    /* d4: 20 untied -> exact */
    flint_stats_wilcoxon_test(d4, 20, &w);
    CHECK(w.exact && w.statistic == 100.0);
    CHECKF(close_to(w.p, 0.8694877624511719, 1e-12), "%.17g", w.p);
    flint_stats_wilcoxon_test_method(d4, 20, 0, &w);
    CHECKF(close_to(w.p, 0.8519245948146423, 1e-9), "%.17g", w.p);
    flint_stats_sign_test(d4, 20, &s);
    CHECK(s.p == 1.0);

    CHECKF(close_to(flint_stats_binom_half_p(3, 20), 0.0025768280029296875, 1e-12), "%.17g",
           flint_stats_binom_half_p(3, 20));
    CHECKF(close_to(flint_stats_binom_half_p(60, 100), 0.05688793364098089, 1e-9), "%.17g",
           flint_stats_binom_half_p(60, 100));
    CHECKF(close_to(flint_stats_binom_half_p(480, 1000), 0.2174482932041415, 1e-9), "%.17g",
           flint_stats_binom_half_p(480, 1000));
    CHECK(flint_stats_binom_half_p(0, 0) == 1.0);
    CHECKF(close_to(flint_stats_normal_sf(1.96), 0.024997895148220435, 1e-12), "%.17g", flint_stats_normal_sf(1.96));
    CHECKF(close_to(flint_stats_normal_sf(-0.5), 0.6914624612740131, 1e-12), "%.17g", flint_stats_normal_sf(-0.5));

    double q[] = {3.0, 1.0, 4.0, 1.5, 9.0, 2.6, 5.0};
    CHECK(close_to(flint_stats_quantile(q, 7, 0.025, 0), 1.075, 1e-12));
    CHECK(close_to(flint_stats_quantile(q, 7, 0.5, 0), 3.0, 1e-12));
    CHECK(close_to(flint_stats_quantile(q, 7, 0.975, 0), 8.399999999999999, 1e-12));

    /* no differences at all: nothing to test */
    double z[5] = {0};
    flint_stats_wilcoxon_test(z, 5, &w);
    CHECK(w.n == 0 && w.n_zero == 5 && w.p == 1.0);
    flint_stats_sign_test(z, 5, &s);
    CHECK(s.p == 1.0);
}

static void test_bootstrap(void) {
    double c[10];
    for (int i = 0; i < 10; i++) c[i] = 2.5;
    double lo, hi, lo2, hi2;
    CHECK(flint_stats_bootstrap_mean(c, 10, 500, 0.95, 1, &lo, &hi) == 0 && lo == 2.5 && hi == 2.5);
    /* a large normal sample: the percentile CI is close to mean +- 1.96 sd / sqrt(n) */
    enum { N = 2000 };
    static double x[N];
    flint_stats_rng r;
    flint_stats_rng_seed(&r, 7);
    for (int i = 0; i < N; i++) x[i] = 3.0 + flint_stats_rng_normal(&r);
    double m = flint_stats_mean(x, N), se = flint_stats_sd(x, N) / sqrt(N);
    flint_stats_bootstrap_mean(x, N, 2000, 0.95, 42, &lo, &hi);
    CHECKF(fabs(lo - (m - 1.96 * se)) < 0.15 * 1.96 * se && fabs(hi - (m + 1.96 * se)) < 0.15 * 1.96 * se,
           "[%g, %g] vs %g +- %g", lo, hi, m, 1.96 * se);
    /* the same seed repeats exactly; another seed differs */
    flint_stats_bootstrap_mean(x, N, 2000, 0.95, 42, &lo2, &hi2);
    CHECK(lo == lo2 && hi == hi2);
    flint_stats_bootstrap_mean(x, N, 2000, 0.95, 43, &lo2, &hi2);
    CHECK(lo != lo2 || hi != hi2);
    /* the pooled ratio: with den = 1 everywhere it is the mean */
    double ones[N];
    for (int i = 0; i < N; i++) ones[i] = 1;
    flint_stats_bootstrap_ratio(x, ones, N, 2000, 0.95, 42, &lo2, &hi2);
    CHECK(close_to(lo, lo2, 1e-12) && close_to(hi, hi2, 1e-12));
    /* a zero denominator in every resample: no interval */
    double zeros[3] = {0, 0, 0};
    CHECK(flint_stats_bootstrap_ratio(zeros, zeros, 3, 100, 0.95, 1, &lo, &hi) == -1 && isnan(lo));
    /* the RNG's index draw stays in range and covers it */
    int seen[7] = {0};
    for (int i = 0; i < 7000; i++) seen[flint_stats_rng_below(&r, 7)]++;
    int all = 1;
    for (int i = 0; i < 7; i++) all &= seen[i] > 800 && seen[i] < 1200;
    CHECK(all);
}

/* One prompt's acceptance length: `steps` verify steps, each accepting drafts while a coin with
 * probability `rate` comes up, at most K = 7 (geometric prefix acceptance, as a real drafter). */
static double simulate_al(flint_stats_rng *r, double rate, int steps) {
    long acc = 0;
    for (int s = 0; s < steps; s++)
        for (int k = 0; k < 7 && flint_stats_rng_uniform(r) < rate; k++) acc++;
    return 1.0 + (double)acc / steps;
}

/* Paired per-prompt ALs for n prompts; arm B's rate is shifted by `shift`. Returns how many of
 * `reps` repetitions the paired verdict calls significant. */
static int count_significant(int reps, int n, double shift, uint64_t seed, int boot) {
    flint_stats_rng r;
    flint_stats_rng_seed(&r, seed);
    double *d = malloc(sizeof(double) * (size_t)n);
    int sig = 0;
    for (int rep = 0; rep < reps; rep++) {
        for (int i = 0; i < n; i++) {
            double rate = 0.3 + 0.6 * flint_stats_rng_uniform(&r); /* prompts differ a lot */
            int steps = 10 + (int)flint_stats_rng_below(&r, 50);
            double a = simulate_al(&r, rate, steps), b = simulate_al(&r, fmin(rate + shift, 0.99), steps);
            d[i] = b - a;
        }
        flint_stats_paired p;
        flint_stats_paired_test(d, n, boot, 0.95, 0.05, 1000 + (uint64_t)rep, &p);
        sig += p.significant;
    }
    free(d);
    return sig;
}

static void test_aa_calibration(void) {
    int sig = count_significant(100, 80, 0.0, 2024, 2000);
    printf("A/A, 100 repetitions of 80 prompts: %d significant\n", sig);
    CHECKF(sig <= 5, "%d of 100 A/A repetitions were called significant", sig);
    int sig2 = count_significant(2000, 40, 0.0, 77, 500);
    printf("A/A, 2000 repetitions of 40 prompts: %d significant (%.2f%%)\n", sig2, 100.0 * sig2 / 2000);
    CHECKF(sig2 >= 40 && sig2 <= 130, "false-positive rate %.3f is far from 0.05", sig2 / 2000.0);
    int pow = count_significant(100, 80, 0.05, 99, 1000);
    printf("A/B with a +0.05 acceptance-rate shift, 100 repetitions: %d significant\n", pow);
    CHECKF(pow >= 80, "power %d/100", pow);
}

int main(void) {
    test_reference_values();
    test_bootstrap();
    test_aa_calibration();
    return test_report("test_evals_stats");
}
