/* The engine and session API: the only interface server/ and evals/ use to reach the models
 * (DESIGN.md sections 1, 2 and 4). One engine owns the target, the optional DSpark drafter, the
 * tokenizer, the shared KV block pool and every session. It is single-threaded by design: the
 * server's engine thread calls it, nothing else does.
 *
 * A step (flint_engine_step) does, in order: prefill chunks of new sessions (at most
 * prefill_chunk prompt rows per step, so a long prompt never stalls running streams for more
 * than one chunk), then one speculative step for every running session together:
 * draft -> one target verify forward -> lossless acceptance -> commit (target KV and drafter
 * context advance by accepted + 1; rejected rows are never encoded). Stop conditions inside the
 * accepted prefix end a session at the right token. */
#ifndef FLINT_VERIFIER_ENGINE_H
#define FLINT_VERIFIER_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "core/tokenizer.h"
#include "sampler/sampler.h"
#include "target/target.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FLINT_MAX_DRAFT 16
#define FLINT_MAX_STOP 8
#define FLINT_MAX_TOP_LOGPROBS 20

typedef struct flint_engine_options {
    const char *model_dir;
    const char *model_shape;    /* benchmarks: a flint_target_shape_config name (qwen3-8b, ...): random
                                 * weights made on the GPU (device cuda), model_dir unused; no tokenizer */
    const char *drafter_dir;    /* NULL: no speculation */
    int num_speculative_tokens; /* K; 0 = the drafter's maximum */
    int draft_greedy;           /* draft_sample_method "greedy" (argmax drafts) instead of "probabilistic" */
    int max_seqs;               /* sessions running at once (default 64) */
    int max_model_len;          /* prompt + output limit; 0 = the model's max_position_embeddings */
    int prefill_chunk;          /* prompt rows per step (default 512) */
    int kv_block_size;          /* default 16 */
    int kv_blocks;              /* 0 = enough for max_seqs sessions of max_model_len */
    int n_threads;              /* 0 = every core */
    int enable_prefix_caching;  /* reuse cached KV blocks of equal prompt prefixes (default 1) */
    /* Dynamic draft lengths, in two stages (verifier/schedule.c). Per step: whether drafting pays,
     * from the tokens a request emitted and the rows it verified in earlier drafting steps
     * (decayed means), the verify cost T(B) of B rows and the drafting cost D(n) of n requests
     * (encode + draft); if not, K_step = 0 skips the drafter for the step (the first steps, and
     * one in 4 to 256 by how clear the loss is, draft anyway to keep measuring). Per request,
     * DSpark's confidence scheduler
     * (research/dspark.md 3.4) then keeps the prefix of the K drafts that maximises expected
     * tokens per unit of verify time.
     * T(B) = dyn_fixed_ms + dyn_row_ms x B and D(n) = dyn_draft_ms when given (reproducible
     * runs; dyn_draft_ms 0 makes drafting free), all 0: both measured at open. Needs a
     * confidence head. Lossless: K_step depends on earlier steps only, and whether draft j is
     * verified on confidences computed before x_j. A sampled request's tokens then depend on
     * timing and on the other requests (their distribution does not): requests with
     * flint_request_params.fixed_draft draft the fixed K every step, unpruned, and stay
     * reproducible. -1 (the default): on when the drafter has a confidence head; 0: fixed K;
     * 1: on (an error without a confidence head). */
    int dynamic_draft;
    double dyn_fixed_ms, dyn_row_ms, dyn_draft_ms;
    int device;                 /* where the target runs: FLINT_TARGET_CPU (default) or FLINT_TARGET_CUDA;
                                 * the drafter follows it; the sampler runs on the CPU in this version */
    int enforce_eager;          /* CUDA: launch every kernel instead of replaying captured graphs */
    int n_cuda_graph_sizes;     /* CUDA: row counts the target's captured forwards are padded to
                                 * (target.h graph_sizes; flint_graph_sizes_parse); 0: the default */
    int cuda_graph_sizes[FLINT_TARGET_MAX_GRAPH_SIZES];
    float gpu_memory_utilization; /* CUDA, kv_blocks 0: size the target's KV pool to this fraction of the
                                   * device (target.h); 0 = max_seqs sessions of max_model_len */
    int tensor_parallel_size;   /* CUDA: > 1 shards the target over GPUs 0..N-1 through NCCL, one thread
                                 * per rank (verifier/tp.c); 0 or 1: one GPU */
    int tp_nccl;                /* tests: go through the NCCL path even at tensor_parallel_size 1 */
    int host_taps;              /* CUDA: the target's taps reach the CUDA drafter through host memory
                                 * (tests; the default leaves them on the GPU) */
    int split_step;             /* CUDA: run a drafting step as separate launches (draft, forward,
                                 * decisions, encode) instead of one graph (tests and benchmarks
                                 * compare the two; verifier/step_cuda.c) */
    int host_accept;            /* CUDA: take the acceptance and sampling decisions on the host from
                                 * downloaded logits (tests; the default decides on the GPU when no
                                 * session of the step needs logits on the host) */
    /* Benchmarks only (flint bench --synthetic-*): when set, a step accepts draft i with
     * probability synthetic_rates[i] given the earlier ones were accepted (keyed by seed and
     * position, so runs repeat), whatever the target says; output tokens are then meaningless
     * but the work per step is the real one. Never set by the server or evals. */
    int synthetic;
    float synthetic_rates[FLINT_MAX_DRAFT];
    int profile;                /* benchmarks: time each phase of a step (flint_engine_step_profile); the
                                 * device is waited for after each phase, which adds idle gaps */
} flint_engine_options;

void flint_engine_options_default(flint_engine_options *o);

/* Per-request speculative statistics (pooled ones have the same shape). AL = 1 + accepted /
 * steps counts the bonus token; position i counts when at least i + 1 drafts were accepted. */
typedef struct flint_spec_stats {
    int64_t steps;          /* verify steps that carried at least one draft */
    int64_t draft_tokens;   /* drafts proposed */
    int64_t accepted;       /* drafts accepted (up to a stop condition) */
    int64_t emitted;        /* tokens emitted by those steps */
    int64_t hist[FLINT_MAX_DRAFT + 1];          /* steps by number of accepted drafts */
    int64_t accepted_per_pos[FLINT_MAX_DRAFT];  /* steps with at least i + 1 accepted */
    int64_t drafted_per_pos[FLINT_MAX_DRAFT];   /* steps that proposed at least i + 1 drafts */
} flint_spec_stats;

double flint_spec_stats_mean_al(const flint_spec_stats *s);
double flint_spec_stats_acceptance_rate(const flint_spec_stats *s);
void flint_spec_stats_add(flint_spec_stats *into, const flint_spec_stats *s);

typedef struct flint_request_params {
    flint_sampling_params sampling;
    int max_tokens;           /* > 0 */
    int ignore_eos;
    int speculative;          /* 1 (default): draft when the engine has a drafter; 0: plain decode */
    int max_draft;            /* per-request cap on the draft length; 0 = the engine's K */
    int fixed_draft;          /* under dynamic draft lengths: draft the fixed K (capped as above) every
                               * step, unpruned, so that a seeded sampled request's tokens depend on its
                               * seed alone (the server sets it for those); no effect at fixed K */
    int n_stop;
    const char *stop[FLINT_MAX_STOP]; /* stop strings (copied); the output ends before them */
    int n_stop_ids;
    int32_t stop_ids[FLINT_MAX_STOP]; /* extra stop token ids (emitted, then the session ends) */
    int skip_special;         /* decode without special tokens (default 1) */
    const char *response_format; /* OpenAI response_format JSON (json_object / json_schema), or NULL;
                                  * compiled at add (a bad one is FLINT_ERR_INVALID / UNSUPPORTED) */
    int logprobs;             /* report the log-probability of each emitted token */
    int top_logprobs;         /* and of the N most likely tokens at its position (0..FLINT_MAX_TOP_LOGPROBS) */
} flint_request_params;

void flint_request_params_default(flint_request_params *p);

typedef enum {
    FLINT_FINISH_NONE = 0,
    FLINT_FINISH_STOP,      /* EOS, a stop token or a stop string */
    FLINT_FINISH_LENGTH,    /* max_tokens or the context limit */
    FLINT_FINISH_CANCELLED, /* flint_engine_cancel */
} flint_finish_reason;

const char *flint_finish_reason_name(flint_finish_reason r);

typedef struct flint_engine flint_engine;

flint_engine *flint_engine_open(const flint_engine_options *o, flint_err *err);
void flint_engine_close(flint_engine *e);

/* NULL when the model directory has no tokenizer.json (token ids only; no text, no stop strings). */
const flint_tokenizer *flint_engine_tokenizer(const flint_engine *e);
int flint_engine_max_model_len(const flint_engine *e);
int flint_engine_vocab_size(const flint_engine *e);
/* 1 when a drafter is loaded; its description (layout, taps, heads) or NULL. */
int flint_engine_has_drafter(const flint_engine *e);
const char *flint_engine_drafter_desc(const flint_engine *e);
int flint_engine_num_speculative_tokens(const flint_engine *e);
/* 1 when draft lengths are scheduled by confidence (the options' dynamic_draft, resolved at open). */
int flint_engine_dynamic_draft(const flint_engine *e);

/* Add a session. The prompt is copied. Returns the session id (>= 0) or -1 with err:
 * FLINT_ERR_INVALID for a request that can never run (empty prompt, prompt + max_tokens over the
 * context, bad sampling parameters), FLINT_ERR_NOMEM when every session slot is taken. */
int flint_engine_add(flint_engine *e, const int32_t *prompt, int n_prompt, const flint_request_params *p,
                     flint_err *err);
/* Stop a session; its slot and KV blocks are freed at the start of the next step. */
void flint_engine_cancel(flint_engine *e, int sid);
/* Sessions not finished (prefilling or running). */
int flint_engine_active(const flint_engine *e);
int flint_engine_kv_blocks_free(const flint_engine *e);
int flint_engine_kv_blocks_total(const flint_engine *e);

/* What one step produced for one session. tokens/text point into engine memory, valid until the
 * next step. A finished session's slot is freed by that next step. */
typedef struct flint_step_event {
    int sid;
    int n_tokens;
    const int32_t *tokens;     /* emitted this step (after stop truncation) */
    const char *text;          /* their text (stop strings cut, held-back partial matches released later) */
    size_t text_len;
    flint_finish_reason finish; /* NONE while running */
    /* with logprobs: [n_tokens] log p(token), and [n_tokens][n_top] ids and log-probabilities of the
     * most likely tokens, from the target's processed distribution (temperature, top-k, top-p,
     * min-p); for a greedy request (temperature 0) from the unprocessed softmax, since the processed
     * one is a point mass */
    const float *logprobs;
    int n_top;
    const int32_t *top_ids;
    const float *top_logprobs;
    int prompt_tokens;
    int cached_tokens;         /* prompt tokens whose KV came from the prefix cache */
    int completion_tokens;     /* so far */
    const flint_spec_stats *stats;
} flint_step_event;

/* Run one step. *events receives an array of *n_events entries (engine memory). Returns -1 on an
 * internal error, after which the engine should be closed. */
int flint_engine_step(flint_engine *e, const flint_step_event **events, int *n_events, flint_err *err);

/* Where steps spend their time (engine option profile), milliseconds summed over the steps since
 * open: each device phase ends in a wait for the GPU, so its time is its launches plus its GPU
 * work, and host is everything else (scheduling, acceptance bookkeeping, emission, stop strings,
 * block tables): the engine's own CPU time per step. Zeros without the option. */
typedef struct flint_step_profile {
    int64_t steps;
    double prefill_ms, draft_ms, verify_ms, accept_ms, encode_ms, host_ms;
} flint_step_profile;
void flint_engine_step_profile(const flint_engine *e, flint_step_profile *p);
/* The host's own time in the steps so far (issue #8: measured at every step, profile or not): the
 * steps that ran a forward, their wall time, and that less the time the engine thread spent
 * blocked in synchronisations with the GPU (core/clock.h). On the CPU backend the forwards run on
 * the host, so there host_ms is the whole step. */
typedef struct flint_host_time {
    int64_t steps;
    double wall_ms, host_ms;
    /* host_ms's parts in the speculative step's calls: drafting (and the dynamic scheduler), the
     * verify forward (staging and launch), the acceptance with emitting the tokens, the context
     * encode; the rest (admission, prefill, row building) is host_ms less these */
    double draft_ms, forward_ms, accept_ms, encode_ms;
    /* forward_ms's parts in the one-graph step (CUDA): staging every module's inputs (the target's
     * batch and tables, the drafter's requests, the decisions' parameters) and finding and launching
     * the step's graph; the rest of it is reading the decisions back */
    double stage_ms, launch_ms;
} flint_host_time;
void flint_engine_host_time(const flint_engine *e, flint_host_time *t);
/* Turn the profile on or off from now on (the sums restart at zero when it is turned on). */
void flint_engine_set_profile(flint_engine *e, int on);

/* dynamic_draft: speculative steps so far by the step-level draft length chosen (hist[0..K]). */
void flint_engine_step_k_hist(const flint_engine *e, int64_t hist[FLINT_MAX_DRAFT + 1]);
/* dynamic_draft: the drafting steps among them that were probes (FLINT_DYN_PROBE_REQS unpinned
 * requests drafted, in turn, to keep the acceptance estimates current while drafting does not pay). */
#define FLINT_DYN_PROBE_REQS 4
int64_t flint_engine_probe_steps(const flint_engine *e);
/* dynamic_draft: while the steps draft 0 < k < K, now and then (every FLINT_DYN_DEEP_EVERY-th
 * step at most, less often where the extra rows cost more than ~1% of throughput) a deep step:
 * FLINT_DYN_PROBE_REQS unpinned requests (in turn) draft K instead, so that the estimates of the
 * positions past k stay current; the deep steps so far. */
#define FLINT_DYN_DEEP_EVERY 8
int64_t flint_engine_deep_steps(const flint_engine *e);
/* dynamic_draft: the scheduler's view for n running requests, one line into buf (the per-k
 * expected tokens E, the modelled step ms of not drafting and of drafting k, whether drafting k
 * would prune, the offsets learned per kind of step): why it drafts what it drafts. */
void flint_engine_dyn_describe(const flint_engine *e, int n, char *buf, size_t cap);

/* Pooled statistics over every step so far. */
const flint_spec_stats *flint_engine_stats(const flint_engine *e);
/* Prefix cache: prompt tokens looked up and found so far, and blocks held by the cache now. */
void flint_engine_prefix_stats(const flint_engine *e, int64_t *query_tokens, int64_t *hit_tokens, int *cached_blocks);
/* Captured CUDA graphs of the target (rank 0's with tensor parallelism), of the CUDA drafter
 * (encode and draft) and of the one-graph steps, and the target's device memory in one
 * allocation; zeros on the CPU. step_graph_stats: the one-graph steps' alone. */
void flint_engine_device_stats(const flint_engine *e, flint_target_graph_info *graphs, size_t *device_bytes);
void flint_engine_step_graph_stats(const flint_engine *e, flint_target_graph_info *graphs);

/* ==== shared by the commands and the server ==== */

/* vLLM's --speculative-config shape: {"model": DIR, "method": "dspark", "num_speculative_tokens":
 * K, "draft_sample_method": "probabilistic" | "greedy"}. Sets drafter_dir (a malloc'd copy returned
 * in *owned for the caller to free), num_speculative_tokens and draft_greedy. Unknown keys and
 * wrong types are errors. */
int flint_spec_config_parse(const char *json, flint_engine_options *o, char **owned, flint_err *err);

/* vLLM's --cuda-graph-sizes: a comma-separated ascending list of row counts ("1,2,4,8,16") into
 * cuda_graph_sizes; a malformed list, a size outside 1..65536, a list not ascending or longer
 * than FLINT_TARGET_MAX_GRAPH_SIZES is FLINT_ERR_INVALID (sizes above the engine's row limit are
 * refused when it opens). */
int flint_graph_sizes_parse(const char *list, flint_engine_options *o, flint_err *err);

/* The `speculative` object of usage (DESIGN.md section 7): num_spec_steps, num_draft_tokens,
 * num_accepted_draft_tokens, mean_acceptance_length, draft_acceptance_rate,
 * acceptance_histogram [K + 1], accepted_per_position [K]. Returns a cJSON object. */
struct cJSON;
struct cJSON *flint_spec_stats_json(const flint_spec_stats *s, int K);

#ifdef __cplusplus
}
#endif
#endif
