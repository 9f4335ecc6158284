/* Logits processing, sampling and the counter-based RNG (see sampler.h). This is the CPU
 * reference that the CUDA sampler is tested against, so every choice here (filter order, tie
 * breaks, the inverse-CDF walk) is the definition the device code must reproduce. */
#include "sampler/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ==== Philox-4x32-10 ==== */

static inline uint32_t mulhilo(uint32_t a, uint32_t b, uint32_t *hi) {
    uint64_t p = (uint64_t)a * b;
    *hi = (uint32_t)(p >> 32);
    return (uint32_t)p;
}

void flint_philox4x32(uint64_t key, const uint32_t ctr[4], uint32_t out[4]) {
    uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
    for (int r = 0; r < 10; r++) {
        uint32_t hi0, hi1;
        uint32_t lo0 = mulhilo(0xD2511F53u, c0, &hi0);
        uint32_t lo1 = mulhilo(0xCD9E8D57u, c2, &hi1);
        uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
        c0 = n0;
        c1 = lo1;
        c2 = n2;
        c3 = lo0;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

double flint_rng_uniform(uint64_t seed, int64_t pos, flint_rng_purpose purpose, uint32_t index) {
    uint32_t ctr[4] = {(uint32_t)(uint64_t)pos, (uint32_t)((uint64_t)pos >> 32), (uint32_t)purpose, index};
    uint32_t out[4];
    flint_philox4x32(seed, ctr, out);
    /* 53 bits: 27 from out[0], 26 from out[1] */
    uint64_t a = out[0] >> 5, b = out[1] >> 6;
    return (double)(a * 67108864u + b) * (1.0 / 9007199254740992.0);
}

/* ==== parameters ==== */

void flint_sampling_params_default(flint_sampling_params *p) {
    p->temperature = 1.0f;
    p->top_k = 0;
    p->top_p = 1.0f;
    p->min_p = 0.0f;
    p->seed = 0;
}

int flint_sampling_params_check(const flint_sampling_params *p, flint_err *err) {
    if (!isfinite(p->temperature) || p->temperature < 0)
        return flint_err_set(err, FLINT_ERR_INVALID, "temperature must be a finite number >= 0 (got %g)",
                             p->temperature);
    if (p->top_k < 0) return flint_err_set(err, FLINT_ERR_INVALID, "top_k must be >= 0 (got %d)", p->top_k);
    if (!(p->top_p > 0 && p->top_p <= 1))
        return flint_err_set(err, FLINT_ERR_INVALID, "top_p must be in (0, 1] (got %g)", p->top_p);
    if (!(p->min_p >= 0 && p->min_p <= 1))
        return flint_err_set(err, FLINT_ERR_INVALID, "min_p must be in [0, 1] (got %g)", p->min_p);
    return 0;
}

int32_t flint_argmax(const float *x, int n) {
    int32_t best = 0;
    float bv = -INFINITY;
    int found = 0;
    for (int i = 0; i < n; i++) {
        if (x[i] != x[i]) continue; /* NaN never wins */
        if (!found || x[i] > bv) {
            bv = x[i];
            best = i;
            found = 1;
        }
    }
    return best;
}

void flint_sampler_scratch_init(flint_sampler_scratch *s, int n) {
    s->n = n;
    s->probs = flint_xmalloc(sizeof(float) * (size_t)n);
    s->order = flint_xmalloc(sizeof(int32_t) * (size_t)n);
}

void flint_sampler_scratch_free(flint_sampler_scratch *s) {
    free(s->probs);
    free(s->order);
    memset(s, 0, sizeof *s);
}

/* ==== processing ==== */

/* Sort key: larger probability first, then lower index, so ties are broken the same way on
 * every backend. */
static _Thread_local const float *sort_probs; /* qsort has no context argument */
static int cmp_desc(const void *a, const void *b) {
    int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    float pi = sort_probs[i], pj = sort_probs[j];
    if (pi > pj) return -1;
    if (pi < pj) return 1;
    return (i > j) - (i < j);
}

static void sort_desc(const float *p, int32_t *order, int n) {
    for (int i = 0; i < n; i++) order[i] = i;
    sort_probs = p;
    qsort(order, (size_t)n, sizeof *order, cmp_desc);
}

void flint_sampler_probs(const flint_sampling_params *sp, const float *logits, int n, float *probs,
                         flint_sampler_scratch *s) {
    FLINT_ASSERT(s->n >= n);
    if (sp->temperature == 0.0f) {
        memset(probs, 0, sizeof(float) * (size_t)n);
        probs[flint_argmax(logits, n)] = 1.0f;
        return;
    }
    /* softmax(logits / T) in double for the normaliser; fixed left-to-right order */
    float inv_t = 1.0f / sp->temperature;
    float mx = -INFINITY;
    for (int i = 0; i < n; i++)
        if (logits[i] * inv_t > mx) mx = logits[i] * inv_t;
    double sum = 0;
    for (int i = 0; i < n; i++) {
        float e = expf(logits[i] * inv_t - mx);
        probs[i] = e;
        sum += e;
    }
    float inv = (float)(1.0 / sum);
    for (int i = 0; i < n; i++) probs[i] *= inv;

    int need_sort = (sp->top_k > 0 && sp->top_k < n) || sp->top_p < 1.0f;
    if (need_sort) {
        int32_t *order = s->order;
        sort_desc(probs, order, n);
        int keep = n;
        if (sp->top_k > 0 && sp->top_k < keep) keep = sp->top_k;
        if (sp->top_p < 1.0f) {
            /* smallest prefix of the (top-k) sorted list whose mass reaches top_p of that list */
            double tot = 0;
            for (int i = 0; i < keep; i++) tot += probs[order[i]];
            double cum = 0;
            int k = 0;
            while (k < keep) {
                cum += probs[order[k]];
                k++;
                if (cum >= sp->top_p * tot) break;
            }
            keep = k;
        }
        for (int i = keep; i < n; i++) probs[order[i]] = 0.0f;
    }
    if (sp->min_p > 0.0f) {
        float pmax = 0;
        for (int i = 0; i < n; i++)
            if (probs[i] > pmax) pmax = probs[i];
        float thr = sp->min_p * pmax;
        for (int i = 0; i < n; i++)
            if (probs[i] < thr) probs[i] = 0.0f;
    }
    double tot = 0;
    for (int i = 0; i < n; i++) tot += probs[i];
    float r = (float)(1.0 / tot);
    for (int i = 0; i < n; i++) probs[i] *= r;
}

int32_t flint_sample_from_probs(const float *probs, int n, double u) {
    double tot = 0;
    for (int i = 0; i < n; i++) tot += probs[i];
    double target = u * tot, cum = 0;
    int32_t last = -1;
    for (int i = 0; i < n; i++) {
        if (probs[i] <= 0) continue;
        cum += probs[i];
        last = i;
        if (cum > target) return i;
    }
    FLINT_ASSERT(last >= 0);
    return last; /* u * tot rounded past the end */
}

int32_t flint_sampler_sample(const flint_sampling_params *sp, const float *logits, int n, int64_t pos,
                             flint_sampler_scratch *s) {
    if (sp->temperature == 0.0f) return flint_argmax(logits, n);
    flint_sampler_probs(sp, logits, n, s->probs, s);
    return flint_sample_from_probs(s->probs, n, flint_rng_uniform(sp->seed, pos, FLINT_RNG_SAMPLE, 0));
}
