/* Lossless speculative acceptance on the CPU (see sampler.h). This is the reference that the
 * CUDA acceptance kernel must reproduce bit for bit: the same keys, the same order of tests, the
 * same inverse-CDF walk for residual and bonus draws. */
#include <math.h>

#include "sampler/sampler.h"

int32_t flint_sample_draft(const float *q, int n_vocab, uint64_t seed, int64_t pos) {
    return flint_sample_from_probs(q, n_vocab, flint_rng_uniform(seed, pos, FLINT_RNG_DRAFT, 0));
}

int flint_accept_draft(const flint_sampling_params *sp, int k, const int32_t *draft, const float *q,
                       const float *logits, int V, int64_t pos0, flint_sampler_scratch *s, int32_t *out) {
    FLINT_ASSERT(k >= 0 && s->n >= V);
    if (sp->temperature == 0.0f) {
        for (int i = 0; i < k; i++) {
            int32_t best = flint_argmax(logits + (size_t)i * V, V);
            if (draft[i] != best) {
                out[i] = best;
                return i;
            }
            out[i] = draft[i];
        }
        out[k] = flint_argmax(logits + (size_t)k * V, V);
        return k;
    }
    float *p = s->probs;
    for (int i = 0; i < k; i++) {
        int64_t pos = pos0 + i;
        flint_sampler_probs(sp, logits + (size_t)i * V, V, p, s);
        int32_t x = draft[i];
        FLINT_ASSERT(x >= 0 && x < V);
        float qx = q ? q[(size_t)i * V + x] : 1.0f;
        double u = flint_rng_uniform(sp->seed, pos, FLINT_RNG_ACCEPT, 0);
        if (u * qx < p[x]) {
            out[i] = x;
            continue;
        }
        /* residual max(0, p - q), in place over p */
        double mass = 0;
        if (q) {
            const float *qi = q + (size_t)i * V;
            for (int v = 0; v < V; v++) {
                float r = p[v] - qi[v];
                p[v] = r > 0 ? r : 0;
                mass += p[v];
            }
        } else {
            mass = 1.0 - p[x];
            p[x] = 0;
        }
        if (mass <= 1e-8) flint_sampler_probs(sp, logits + (size_t)i * V, V, p, s);
        out[i] = flint_sample_from_probs(p, V, flint_rng_uniform(sp->seed, pos, FLINT_RNG_RESIDUAL, 0));
        return i;
    }
    flint_sampler_probs(sp, logits + (size_t)k * V, V, p, s);
    out[k] = flint_sample_from_probs(p, V, flint_rng_uniform(sp->seed, pos0 + k, FLINT_RNG_BONUS, 0));
    return k;
}
