/* Statistics for evals and A/B tests (see stats.h for the conventions). Everything here is
 * plain double arithmetic in a fixed order, so a run repeats bit for bit on any machine. */
#include "evals/stats.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"

/* ==== RNG ==== */

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void flint_stats_rng_seed(flint_stats_rng *r, uint64_t seed) {
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t flint_stats_rng_next(flint_stats_rng *r) {
    uint64_t *s = r->s;
    uint64_t out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

double flint_stats_rng_uniform(flint_stats_rng *r) { return (double)(flint_stats_rng_next(r) >> 11) * 0x1.0p-53; }

uint64_t flint_stats_rng_below(flint_stats_rng *r, uint64_t n) {
    /* rejection of the top partial range keeps every index exactly equally likely */
    uint64_t lim = UINT64_MAX - UINT64_MAX % n;
    for (;;) {
        uint64_t x = flint_stats_rng_next(r);
        if (x < lim) return x % n;
    }
}

double flint_stats_rng_normal(flint_stats_rng *r) {
    double u1 = 1.0 - flint_stats_rng_uniform(r), u2 = flint_stats_rng_uniform(r);
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

/* ==== descriptive ==== */

double flint_stats_mean(const double *x, int n) {
    if (n < 1) return NAN;
    double s = 0;
    for (int i = 0; i < n; i++) s += x[i];
    return s / n;
}

double flint_stats_sd(const double *x, int n) {
    if (n < 2) return NAN;
    double m = flint_stats_mean(x, n), s = 0;
    for (int i = 0; i < n; i++) s += (x[i] - m) * (x[i] - m);
    return sqrt(s / (n - 1));
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double flint_stats_quantile(const double *x, int n, double q, int sorted) {
    if (n < 1) return NAN;
    const double *v = x;
    double *copy = NULL;
    if (!sorted) {
        copy = flint_xmalloc(sizeof(double) * (size_t)n);
        memcpy(copy, x, sizeof(double) * (size_t)n);
        qsort(copy, (size_t)n, sizeof(double), cmp_double);
        v = copy;
    }
    double h = q * (n - 1);
    int i = (int)floor(h);
    if (i < 0) i = 0;
    if (i >= n - 1) i = n - 1;
    double r = i + 1 < n ? v[i] + (h - i) * (v[i + 1] - v[i]) : v[i];
    free(copy);
    return r;
}

double flint_stats_median(const double *x, int n) { return flint_stats_quantile(x, n, 0.5, 0); }

double flint_stats_normal_sf(double z) { return 0.5 * erfc(z / M_SQRT2); }

/* ==== bootstrap ==== */

int flint_stats_bootstrap(int n, flint_stats_fn stat, void *ctx, int reps, double level, uint64_t seed, double *lo,
                          double *hi) {
    *lo = *hi = NAN;
    if (n < 1 || reps < 1) return -1;
    flint_stats_rng r;
    flint_stats_rng_seed(&r, seed);
    int *idx = flint_xmalloc(sizeof(int) * (size_t)n);
    double *v = flint_xmalloc(sizeof(double) * (size_t)reps);
    int m = 0;
    for (int b = 0; b < reps; b++) {
        for (int i = 0; i < n; i++) idx[i] = (int)flint_stats_rng_below(&r, (uint64_t)n);
        double s = stat(idx, n, ctx);
        if (isfinite(s)) v[m++] = s;
    }
    if (m > 0) {
        qsort(v, (size_t)m, sizeof(double), cmp_double);
        *lo = flint_stats_quantile(v, m, (1.0 - level) / 2, 1);
        *hi = flint_stats_quantile(v, m, (1.0 + level) / 2, 1);
    }
    free(idx);
    free(v);
    return m > 0 ? 0 : -1;
}

static double stat_mean(const int *idx, int n, void *ctx) {
    const double *x = ctx;
    double s = 0;
    for (int i = 0; i < n; i++) s += x[idx[i]];
    return s / n;
}

int flint_stats_bootstrap_mean(const double *x, int n, int reps, double level, uint64_t seed, double *lo, double *hi) {
    return flint_stats_bootstrap(n, stat_mean, (void *)x, reps, level, seed, lo, hi);
}

typedef struct {
    const double *num, *den;
} ratio_ctx;

static double stat_ratio(const int *idx, int n, void *ctx) {
    const ratio_ctx *c = ctx;
    double a = 0, b = 0;
    for (int i = 0; i < n; i++) {
        a += c->num[idx[i]];
        b += c->den[idx[i]];
    }
    return b != 0 ? a / b : NAN;
}

int flint_stats_bootstrap_ratio(const double *num, const double *den, int n, int reps, double level, uint64_t seed,
                                double *lo, double *hi) {
    ratio_ctx c = {num, den};
    return flint_stats_bootstrap(n, stat_ratio, &c, reps, level, seed, lo, hi);
}

/* ==== sign test ==== */

#define ZERO_TOL 1e-12

double flint_stats_binom_half_p(int k, int n) {
    if (n <= 0) return 1.0;
    int m = k < n - k ? k : n - k;
    if (2 * m == n) return 1.0;
    /* P(X <= m) summed from the smallest term up, in log space so large n cannot overflow */
    double lnorm = -n * log(2.0), s = 0;
    for (int i = 0; i <= m; i++) s += exp(lgamma(n + 1.0) - lgamma(i + 1.0) - lgamma(n - i + 1.0) + lnorm);
    double p = 2.0 * s;
    return p > 1.0 ? 1.0 : p;
}

void flint_stats_sign_test(const double *d, int n, flint_stats_sign *out) {
    memset(out, 0, sizeof *out);
    for (int i = 0; i < n; i++) {
        if (fabs(d[i]) <= ZERO_TOL) out->n_zero++;
        else if (d[i] > 0) out->n_pos++;
        else out->n_neg++;
    }
    out->p = flint_stats_binom_half_p(out->n_pos, out->n_pos + out->n_neg);
}

/* ==== Wilcoxon signed-rank ==== */

typedef struct {
    double a; /* |d| */
    int pos;
} absval;

static int cmp_abs(const void *x, const void *y) {
    double a = ((const absval *)x)->a, b = ((const absval *)y)->a;
    return a < b ? -1 : a > b;
}

/* P(W+ <= w) and P(W+ >= w) under H0, conditional on the observed ranks: each rank carries a
 * + or - sign with probability 1/2, independently. Ranks are whole or half numbers (average ranks
 * of ties), so doubled ranks are integers and the distribution is a count of sign patterns per
 * doubled sum, by dynamic programming. Without ties this is the classical exact distribution;
 * with ties it is the exact permutation distribution. Counts stay below 2^53 up to n = 50. */
static void wilcoxon_exact(const int *r2, int n, int w2, double *cdf, double *sf) {
    int max = 0;
    for (int i = 0; i < n; i++) max += r2[i];
    double *c = flint_xcalloc((size_t)max + 1, sizeof(double));
    c[0] = 1;
    int upto = 0;
    for (int i = 0; i < n; i++) {
        upto += r2[i];
        for (int s = upto; s >= r2[i]; s--) c[s] += c[s - r2[i]];
    }
    double total = ldexp(1.0, n), lo = 0, hi = 0;
    for (int s = 0; s <= max; s++) {
        if (s <= w2) lo += c[s];
        if (s >= w2) hi += c[s];
    }
    *cdf = lo / total;
    *sf = hi / total;
    free(c);
}

static void wilcoxon(const double *d, int n, int method, flint_stats_wilcoxon *out) {
    memset(out, 0, sizeof *out);
    absval *v = flint_xmalloc(sizeof(absval) * (size_t)(n > 0 ? n : 1));
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (fabs(d[i]) <= ZERO_TOL) {
            out->n_zero++;
            continue;
        }
        v[m].a = fabs(d[i]);
        v[m].pos = d[i] > 0;
        m++;
    }
    out->n = m;
    if (m == 0) {
        out->p = 1.0;
        out->exact = method != 0;
        free(v);
        return;
    }
    qsort(v, (size_t)m, sizeof(absval), cmp_abs);
    double tie_sum = 0; /* sum of t^3 - t over tie groups */
    int *r2 = flint_xmalloc(sizeof(int) * (size_t)m), w2 = 0; /* doubled ranks, doubled W+ */
    for (int i = 0; i < m;) {
        int j = i + 1;
        while (j < m && v[j].a - v[j - 1].a <= ZERO_TOL * (v[j].a > 1 ? v[j].a : 1)) j++;
        double rank = (i + 1 + j) / 2.0; /* average of ranks i+1 .. j */
        for (int k = i; k < j; k++) {
            r2[k] = i + 1 + j;
            if (v[k].pos) {
                out->w_plus += rank;
                w2 += r2[k];
            } else out->w_minus += rank;
        }
        double t = j - i;
        if (t > 1) {
            out->ties = 1;
            tie_sum += t * t * t - t;
        }
        i = j;
    }
    out->statistic = out->w_plus < out->w_minus ? out->w_plus : out->w_minus;
    int exact = method < 0 ? m <= 50 : method;
    if (exact && m > 60) exact = 0; /* beyond what the doubles count exactly enough */
    out->exact = exact;
    if (exact) {
        double cdf, sf;
        wilcoxon_exact(r2, m, w2, &cdf, &sf);
        double p = 2.0 * (cdf < sf ? cdf : sf);
        out->p = p > 1.0 ? 1.0 : p;
    } else {
        double mn = m * (m + 1) / 4.0;
        double se = sqrt((m * (m + 1.0) * (2.0 * m + 1.0) - tie_sum / 2.0) / 24.0);
        out->z = se > 0 ? (out->w_plus - mn) / se : 0;
        double p = 2.0 * flint_stats_normal_sf(fabs(out->z));
        out->p = p > 1.0 ? 1.0 : p;
    }
    free(r2);
    free(v);
}

void flint_stats_wilcoxon_test(const double *d, int n, flint_stats_wilcoxon *out) { wilcoxon(d, n, -1, out); }

void flint_stats_wilcoxon_test_method(const double *d, int n, int exact, flint_stats_wilcoxon *out) {
    wilcoxon(d, n, exact ? 1 : 0, out);
}

/* ==== the paired verdict ==== */

void flint_stats_paired_test(const double *d, int n, int reps, double level, double alpha, uint64_t seed,
                             flint_stats_paired *out) {
    memset(out, 0, sizeof *out);
    out->n = n;
    out->mean = flint_stats_mean(d, n);
    flint_stats_bootstrap_mean(d, n, reps, level, seed, &out->lo, &out->hi);
    flint_stats_sign_test(d, n, &out->sign);
    flint_stats_wilcoxon_test(d, n, &out->wilcoxon);
    out->significant = n > 0 && out->wilcoxon.p < alpha && (out->lo > 0 || out->hi < 0);
}
