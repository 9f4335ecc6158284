/* The sampler on the GPU (sm_90): the same definitions as sampler.h's CPU reference (filter order,
 * tie breaks, the Philox keys, the inverse-CDF walk), batched over rows with per-row parameters
 * in device memory, so the speculative step never brings logits back to the host. Every row is
 * computed by one thread-block cluster in a fixed order that depends on the vocabulary size only
 * (batch invariant: a row gives the same token and probabilities alone or in any batch).
 *
 * Against the CPU reference: greedy results are identical. The softmax exponential reproduces
 * glibc's expf bit for bit (flint_cuda_sampler_set_exact_exp, the default), so the probabilities
 * are the CPU's except where a sum taken in another order (the softmax normaliser, the
 * renormalisation, in double on both sides) rounds 1/sum to the neighbouring float, and a set or a
 * draw differs only when a top-p cumulative or u * total lands within ~1e-13 (relative) of a
 * boundary. With the faster CUDA expf (set_exact_exp(0), <= 2 ulp) probabilities differ by a few
 * ulps and those boundaries widen to ~1e-6.
 *
 * Launchers take an explicit stream, never allocate or synchronise; scratch is sized once by
 * flint_cuda_sampler_scratch_bytes. All pointers are device pointers. Vocabularies of 1 to
 * FLINT_CUDA_SAMPLER_MAX_VOCAB. */
#ifndef FLINT_SAMPLER_SAMPLER_CUDA_H
#define FLINT_SAMPLER_SAMPLER_CUDA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct CUstream_st *flint_cuda_stream_s; /* a cudaStream_t */

/* Largest vocabulary: 8 blocks of 512 threads x 95 entries held in shared memory. */
#define FLINT_CUDA_SAMPLER_MAX_VOCAB 389120

/* Per-row parameters, the device twin of flint_sampling_params (checked on the host). */
typedef struct flint_cuda_sampling {
    float temperature; /* 0 = greedy */
    int top_k;         /* 0 = off */
    float top_p;       /* 1 = off */
    float min_p;       /* 0 = off */
    uint64_t seed;
} flint_cuda_sampling;

/* Bytes of scratch for n_rows rows over a vocabulary of n_vocab (any launcher below). Sampling and
 * drafting need none (scratch may be NULL); flint_cuda_accept needs n_rows >= n_req * (ld_draft + 1). */
size_t flint_cuda_sampler_scratch_bytes(int n_rows, int n_vocab);

/* tokens[r] = flint_sampler_sample(params[row_param[r]], logits + r * ld, n_vocab, pos[r]) for
 * r < n_rows: argmax at temperature 0, else the processed distribution drawn with uniform
 * flint_rng_uniform(seed, pos[r], purpose, 0). row_param may be NULL (row r uses params[r]).
 * probs_out, when not NULL, receives the processed distribution [n_rows][ld_probs] (a one-hot on
 * the argmax for greedy rows). */
void flint_cuda_sample(int32_t *tokens, float *probs_out, int ld_probs, const float *logits, int ld, int n_rows,
                       int n_vocab, const flint_cuda_sampling *params, const int32_t *row_param, const int64_t *pos,
                       int purpose, void *scratch, flint_cuda_stream_s s);

/* Drafting (the drafter's Markov loop, drafter/forward_cpu.c): per row, greedy[r] or
 * temperature[r] == 0 ? argmax(logits) : x ~ q = softmax(logits / temperature[r]) (e * (float)(1 /
 * sum e), no second renormalisation) drawn with flint_rng_uniform(seed[r], pos[r],
 * FLINT_RNG_DRAFT, 0) (flint_sample_draft's rule); q is written to q_out [n_rows][ld_q] when not
 * NULL and the row is not greedy. greedy may be NULL (temperature decides). */
void flint_cuda_draft_sample(int32_t *tokens, float *q_out, int ld_q, const float *logits, int ld, int n_rows,
                             int n_vocab, const float *temperature, const int32_t *greedy, const uint64_t *seed,
                             const int64_t *pos, void *scratch, flint_cuda_stream_s s);
/* The same, with the greedy rows' argmax taken from cand: per row, n_cand = ceil(n_vocab / 32)
 * pairs (float bits, index), each the argmax of its 32 entries under this rule (largest value,
 * lowest index, NaN never: -inf and INT_MAX when all are NaN), as the drafter's Markov bias kernel
 * leaves them. The same tokens as reading the row; other rows read it as before. */
void flint_cuda_draft_sample_cand(int32_t *tokens, float *q_out, int ld_q, const float *logits, int ld, int n_rows,
                                  int n_vocab, const float *temperature, const int32_t *greedy, const uint64_t *seed,
                                  const int64_t *pos, const int32_t *cand, int n_cand, void *scratch,
                                  flint_cuda_stream_s s);

/* Speculative acceptance for n_req requests, flint_accept_draft's rule per request i:
 * k[i] drafts draft[i * ld_draft + j] (j < k[i] <= ld_draft) proposed at positions pos0[i] + j, checked
 * against target logits rows logits + (row0[i] + j) * ld_logits (j = 0..k[i]; row j predicts the
 * token at pos0[i] + j), with draft distributions q + (i * ld_q_req + j * ld_q) when q is not NULL
 * (else greedy drafts: point masses). Writes out[i * (ld_draft + 1) + 0..n_acc[i]] (the accepted
 * drafts then the emitted token) and n_acc[i]. Every row j <= k[i] is processed in parallel (its
 * acceptance test and, when rejected, its residual draw; the bonus draw on row k[i]), then a second
 * kernel keeps the first rejection. scratch: flint_cuda_sampler_scratch_bytes(n_req * (ld_draft + 1), .). */
void flint_cuda_accept(int32_t *out, int32_t *n_acc, const int32_t *draft, int ld_draft, const int32_t *k,
                       const float *q, size_t ld_q_req, int ld_q, const float *logits, int ld_logits,
                       const int32_t *row0, const int64_t *pos0, const flint_cuda_sampling *params, int n_req,
                       int n_vocab, void *scratch, flint_cuda_stream_s s);

/* The verify rows of a step from the drafts a CUDA drafter left on the device (no trip through
 * the host): for r < n_rows, row_tok[r] = src[r] < 0 ? -1 - src[r] (a literal: the anchor) :
 * toks[(src[r] % L) * stride + src[r] / L] (draft j = src % L of request d = src / L; toks is
 * the drafter's step-major [step][stride] output); and drafts[d * L + j] = toks[j * stride + d]
 * for d < n_d, j < n_steps (the acceptance's [request][L] layout). */
void flint_cuda_draft_rows(int32_t *row_tok, const int32_t *src, int n_rows, int32_t *drafts, int L, int n_d,
                           int n_steps, const int32_t *toks, int stride, flint_cuda_stream_s s);

/* The softmax exponential: 1 (default) glibc's expf algorithm in double, bit-identical to the CPU
 * reference on x86-64 with FMA; 0 CUDA's expf (<= 2 ulp, about 3x cheaper). Process-wide; read by
 * each launch. Returns the previous setting. */
int flint_cuda_sampler_set_exact_exp(int exact);

/* Programmatic dependent launch for this module's kernels (each waits for the kernel before it
 * before touching memory, so the bits are the same either way): 1 (default) on, 0 off, negative
 * keeps the setting; returns the previous one. Process-wide; read at each launch (and baked into
 * captured graphs). */
int flint_cuda_sampler_set_pdl(int on);

/* ==== Test hooks (tests/test_sampler_cuda.c), not for the engine ====
 * out4[i * 4 + 0..3] = flint_philox4x32(key[i], ctr + i * 4) and u[i] = flint_rng_uniform(key[i],
 * pos = ctr[1] << 32 | ctr[0], purpose = ctr[2], index = ctr[3]) computed by the device code. */
void flint_cuda_philox_test(uint32_t *out4, double *u, const uint64_t *key, const uint32_t *ctr, int n,
                            flint_cuda_stream_s s);
/* out[i] = the sampler's device exponential of in[i] (in the current set_exact_exp mode). */
void flint_cuda_sampler_exp_test(float *out, const float *in, int n, flint_cuda_stream_s s);

#ifdef __cplusplus
}
#endif
#endif
