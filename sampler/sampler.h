/* Logits processing and sampling (DESIGN.md section 5): temperature, top-k, top-p, min-p and
 * greedy, with randomness from a counter-based RNG (Philox-4x32-10) keyed by
 * (seed, absolute token position, purpose), so a seeded request is reproducible whatever batch it
 * shares and however it is executed. */
#ifndef FLINT_SAMPLER_SAMPLER_H
#define FLINT_SAMPLER_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What a random number is for; part of the RNG key so the streams never overlap. */
typedef enum {
    FLINT_RNG_SAMPLE = 0,   /* plain sampling of the next token */
    FLINT_RNG_DRAFT = 1,    /* drafter proposal */
    FLINT_RNG_ACCEPT = 2,   /* acceptance test u < p/q */
    FLINT_RNG_RESIDUAL = 3, /* token from the residual distribution */
    FLINT_RNG_BONUS = 4,    /* bonus token after a fully accepted draft */
} flint_rng_purpose;

/* Philox-4x32-10: 4 x 32 random bits from a 64-bit key and a 128-bit counter. */
void flint_philox4x32(uint64_t key, const uint32_t ctr[4], uint32_t out[4]);
/* Uniform double in [0, 1) with 53 random bits, for (seed, position, purpose, index). */
double flint_rng_uniform(uint64_t seed, int64_t pos, flint_rng_purpose purpose, uint32_t index);

typedef struct flint_sampling_params {
    float temperature; /* 0 = greedy */
    int top_k;         /* 0 = off */
    float top_p;       /* 1 = off */
    float min_p;       /* 0 = off */
    uint64_t seed;
} flint_sampling_params;

void flint_sampling_params_default(flint_sampling_params *p);
/* Rejects out-of-range values (temperature < 0 or not finite, top_p outside (0, 1], min_p
 * outside [0, 1], top_k < 0) with a message naming the field. */
int flint_sampling_params_check(const flint_sampling_params *p, flint_err *err);

/* Lowest index of the largest value (NaN never wins). */
int32_t flint_argmax(const float *x, int n);

/* Scratch for processing one row of logits over a vocabulary of n (reserve once, reuse). */
typedef struct flint_sampler_scratch {
    int n;
    float *probs;   /* [n] */
    int32_t *order; /* [n] */
} flint_sampler_scratch;

void flint_sampler_scratch_init(flint_sampler_scratch *s, int n);
void flint_sampler_scratch_free(flint_sampler_scratch *s);

/* The processed target distribution p for one row: softmax(logits / T) restricted by top-k,
 * top-p and min-p, renormalised (a one-hot on the argmax when T == 0). probs_out[n]. */
void flint_sampler_probs(const flint_sampling_params *sp, const float *logits, int n, float *probs_out,
                         flint_sampler_scratch *s);

/* Draw an index from a distribution with uniform u in [0, 1): the first i whose cumulative sum
 * exceeds u * total (total = sum of probs), skipping zeros; robust to rounding at the end. */
int32_t flint_sample_from_probs(const float *probs, int n, double u);

/* Sample the next token from logits at absolute position pos (greedy when T == 0). */
int32_t flint_sampler_sample(const flint_sampling_params *sp, const float *logits, int n, int64_t pos,
                             flint_sampler_scratch *s);

/* ==== Speculative acceptance (DESIGN.md section 4, step 4) ====
 * One request's draft x_1..x_k, proposed at absolute positions pos0..pos0+k-1, is verified
 * against the target's logits rows [k + 1][V] (row i predicts the token at pos0 + i).
 * - Target greedy (temperature 0): accept while x_i == argmax; emit the argmax at the first
 *   mismatch, or after the last row as the bonus.
 * - Target sampled, probabilistic drafts (q = [k][V] draft probabilities): accept x_i when
 *   u * q_i(x_i) < p_i(x_i) (u ~ U[0,1) keyed ACCEPT at pos0 + i); at the first rejection emit a
 *   token from normalize(max(0, p_i - q_i)) (keyed RESIDUAL; plain p when that mass is <= 1e-8);
 *   when all are accepted emit a bonus from p_k (keyed BONUS).
 * - Target sampled, greedy drafts (q == NULL): q is the point mass on x_i, so x_i is accepted with
 *   probability p_i(x_i) and the residual is p_i with x_i removed.
 * out receives the accepted drafts followed by the one emitted token; the return value is the
 * number of accepted drafts (so accepted + 1 tokens are written). The emitted distribution equals
 * the processed target distribution p (tests/test_accept.c checks it by chi-square). */
int flint_accept_draft(const flint_sampling_params *sp, int k, const int32_t *draft, const float *q,
                       const float *target_logits, int n_vocab, int64_t pos0, flint_sampler_scratch *s,
                       int32_t *out);

/* Draw a draft token from draft probabilities q (keyed DRAFT at pos). */
int32_t flint_sample_draft(const float *q, int n_vocab, uint64_t seed, int64_t pos);

#ifdef __cplusplus
}
#endif
#endif
