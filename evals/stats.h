/* Statistics for acceptance-length evaluations and drafter A/B tests: a deterministic RNG,
 * percentile bootstrap confidence intervals over prompts, the exact sign test and the Wilcoxon
 * signed-rank test, and the paired verdict `flint ab` prints.
 *
 * Why these: the unit of an eval is the prompt (tokens inside one prompt are strongly
 * correlated), so intervals come from resampling prompts, never tokens. A/B arms run the same
 * prompts with the same seeds, so the analysis is paired: per-prompt differences, a bootstrap CI
 * of their mean, a sign test (no assumption on the shape of the differences) and the Wilcoxon
 * signed-rank test (more power when the differences are roughly symmetric).
 *
 * Conventions (those of scipy.stats, so results can be checked against it):
 * - zero differences (|d| <= 1e-12) are dropped by both tests (Wilcoxon's "wilcox" method);
 * - tied |d| (equal within 1e-12 relative) get the average of their ranks;
 * - Wilcoxon: for at most 50 non-zero differences the p-value is exact: the distribution of W+
 *   over all 2^n sign patterns of the observed ranks (the classical exact test without ties, the
 *   exact permutation test with ties: scipy's method="exact" and, for n <= 13 with ties, its
 *   exhaustive permutation; scipy's "auto" falls back to the normal approximation for 14..50 tied
 *   differences, which small A/B runs showed to be anti-conservative). Above 50: the normal
 *   approximation with the tie correction of the variance, no continuity correction;
 * - two-sided p-values throughout; quantiles interpolate linearly (numpy's default). */
#ifndef FLINT_EVALS_STATS_H
#define FLINT_EVALS_STATS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* xoshiro256** seeded through splitmix64: the same stream on every machine and compiler. */
typedef struct flint_stats_rng {
    uint64_t s[4];
} flint_stats_rng;

void flint_stats_rng_seed(flint_stats_rng *r, uint64_t seed);
uint64_t flint_stats_rng_next(flint_stats_rng *r);
double flint_stats_rng_uniform(flint_stats_rng *r);               /* [0, 1), 53 bits */
uint64_t flint_stats_rng_below(flint_stats_rng *r, uint64_t n);   /* uniform in [0, n), unbiased */
double flint_stats_rng_normal(flint_stats_rng *r);                /* standard normal (Box-Muller) */

double flint_stats_mean(const double *x, int n);
double flint_stats_sd(const double *x, int n); /* sample standard deviation (n - 1) */
/* Quantile q in [0, 1] of sorted x (linear interpolation); sorts a copy when sorted is 0. */
double flint_stats_quantile(const double *x, int n, double q, int sorted);
double flint_stats_median(const double *x, int n);
/* P(Z > z) for a standard normal Z. */
double flint_stats_normal_sf(double z);

/* Percentile bootstrap: `reps` resamples of n indices drawn with replacement (RNG seeded with
 * seed), stat() evaluated on each, the (1 - level)/2 and (1 + level)/2 quantiles returned.
 * Resamples where stat() is not finite (e.g. a ratio with a zero denominator) are left out.
 * Returns -1 when n < 1 or reps < 1 (lo = hi = NaN). */
typedef double (*flint_stats_fn)(const int *idx, int n, void *ctx);
int flint_stats_bootstrap(int n, flint_stats_fn stat, void *ctx, int reps, double level, uint64_t seed, double *lo,
                          double *hi);
/* The mean of x, and the ratio sum(num) / sum(den) (pooled acceptance: 1 + accepted / steps). */
int flint_stats_bootstrap_mean(const double *x, int n, int reps, double level, uint64_t seed, double *lo, double *hi);
int flint_stats_bootstrap_ratio(const double *num, const double *den, int n, int reps, double level, uint64_t seed,
                                double *lo, double *hi);

/* Exact two-sided sign test of the median difference being 0. */
typedef struct flint_stats_sign {
    int n_pos, n_neg, n_zero;
    double p;
} flint_stats_sign;
void flint_stats_sign_test(const double *d, int n, flint_stats_sign *out);
/* Two-sided p of k successes in n Bernoulli(1/2) trials: min(1, 2 P(X <= min(k, n - k))). */
double flint_stats_binom_half_p(int k, int n);

typedef struct flint_stats_wilcoxon {
    int n;          /* non-zero differences used */
    int n_zero;     /* dropped */
    int ties;       /* 1 when some |d| tie */
    int exact;      /* 1: exact null distribution; 0: normal approximation */
    double w_plus;  /* sum of the ranks of positive differences */
    double w_minus;
    double statistic; /* min(w_plus, w_minus), scipy's two-sided statistic */
    double z;       /* normal approximation's z (0 when exact) */
    double p;       /* two-sided; 1 when n = 0 */
} flint_stats_wilcoxon;
void flint_stats_wilcoxon_test(const double *d, int n, flint_stats_wilcoxon *out);
/* Force the method: exact = 1 (n <= 60), 0 the normal approximation. */
void flint_stats_wilcoxon_test_method(const double *d, int n, int exact, flint_stats_wilcoxon *out);

/* The paired analysis of `flint ab`: d[i] = metric_B[i] - metric_A[i] over prompts. */
typedef struct flint_stats_paired {
    int n;
    double mean, lo, hi; /* mean difference and its bootstrap CI */
    flint_stats_sign sign;
    flint_stats_wilcoxon wilcoxon;
    /* significant: the Wilcoxon p < alpha AND the bootstrap CI excludes 0; requiring both keeps
     * the verdict from ever quoting an interval that contains 0 as a difference. */
    int significant;
} flint_stats_paired;
void flint_stats_paired_test(const double *d, int n, int reps, double level, double alpha, uint64_t seed,
                             flint_stats_paired *out);

#ifdef __cplusplus
}
#endif
#endif
