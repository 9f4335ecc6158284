/* The chi-square test of homogeneity the sampling tests share (test_spec_stories.c,
 * test_spec_embedded.c): are two samples of tokens drawn from the same distribution? */
#ifndef FLINT_TESTS_CHISQ_H
#define FLINT_TESTS_CHISQ_H

#include <math.h>
#include <stdio.h>

/* Chi-square test of homogeneity between two count vectors; bins with small expectations pooled.
 * Returns 1 when the difference is significant at p = 0.001. */
static inline int differ(const long *a, const long *b, int n, const char *what) {
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

#endif
