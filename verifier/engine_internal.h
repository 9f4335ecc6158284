/* The engine's state, shared by engine.c (open/close), session.c (admission, stop conditions,
 * text) and step.c (prefill and the speculative step). Not part of the interface. */
#ifndef FLINT_VERIFIER_ENGINE_INTERNAL_H
#define FLINT_VERIFIER_ENGINE_INTERNAL_H

typedef struct flint_prefix_cache flint_prefix_cache;
typedef struct flint_engine_tp flint_engine_tp;
typedef struct flint_engine_dev flint_engine_dev;

#include "drafter/drafter.h"
#include "sampler/grammar.h"
#include "target/target.h"
#include "verifier/engine.h"

typedef enum { S_FREE = 0, S_QUEUED, S_PREFILL, S_RUNNING, S_DONE } sstate;

typedef struct session {
    sstate st;
    int cancelled;
    uint64_t order; /* admission order: FIFO among queued sessions */
    flint_request_params p;
    char *stop_store[FLINT_MAX_STOP];
    size_t max_stop_len;
    int32_t *tokens; /* prompt then output, [max_model_len] */
    int n_prompt, n_tokens, n_prefilled;
    int32_t *blocks; /* block table, [blocks_per_seq] */
    int n_blocks;
    int32_t anchor; /* last emitted token, at position pos */
    int pos;
    flint_detok dt;
    char *text; /* output text so far (stop strings cut) */
    size_t text_len, text_cap, text_sent;
    flint_spec_stats stats;
    flint_finish_reason finish;
    int32_t emit[FLINT_MAX_DRAFT + 1];
    int n_emit;
    int k;  /* drafts verified this step */
    int di; /* this step's draft request index, -1 when it drafted nothing */
    int cached_tokens;
    flint_grammar *grammar; /* structured output, or NULL */
    unsigned char *gstate;  /* committed grammar state */
    unsigned char *gpath;   /* [FLINT_MAX_DRAFT + 1] states along the draft path */
    float lp[FLINT_MAX_DRAFT + 1];
    int32_t top_ids[(FLINT_MAX_DRAFT + 1) * FLINT_MAX_TOP_LOGPROBS];
    float top_lp[(FLINT_MAX_DRAFT + 1) * FLINT_MAX_TOP_LOGPROBS];
} session;

struct flint_engine {
    flint_engine_options o;
    flint_tokenizer *tok;
    flint_target *tgt;   /* rank 0's with tensor parallelism */
    flint_engine_tp *tp; /* tensor parallel ranks (verifier/tp.c), or NULL */
    flint_engine_dev *dev; /* acceptance on the GPU (step_cuda.c), or NULL: the host decides */
    flint_drafter *dft;
    flint_kv_alloc *kv;
    const flint_target_config *tc;
    int V, H, K, n_taps, max_len, bs, blocks_per_seq, max_rows;
    int dmax; /* the drafter's max_draft: the stride of its per-request outputs */
    int32_t tap_layers[FLINT_DRAFT_MAX_TAPS];
    int32_t eos[FLINT_MAX_EOS + 1];
    int n_eos;
    session *ss;
    const int32_t **tables; /* [max_seqs] -> ss[i].blocks */
    uint64_t next_order;
    /* step scratch */
    int32_t *row_tok, *row_pos, *row_seq, *logit_rows; /* [max_rows] */
    float *logits;                                     /* [max_rows][V] */
    float *taps;                                       /* [max_rows][n_taps][H] */
    float *q;                                          /* [max_seqs][dmax][V] */
    int32_t *drafts;                                   /* [max_seqs][dmax] */
    float *conf;                                       /* [max_seqs][dmax] confidences (dynamic draft) */
    int *dlen;                                         /* [max_seqs] scheduled lengths (dynamic draft) */
    struct flint_sched_cand *cand;                     /* [max_seqs * dmax] scheduler scratch */
    double dyn_fixed_ms, dyn_row_ms;                   /* the verify cost model given in the options, or */
    int dyn_n;                                         /* measured: dyn_b[i] rows take dyn_t[i] ms */
    double dyn_b[16], dyn_t[16];
    double dyn_draft_ms;                               /* drafting cost given in the options, or */
    int dyn_dn;                                        /* measured: dyn_db[i] requests take dyn_dt[i] ms */
    double dyn_db[8], dyn_dt[8];                       /* (at K drafts; dyn_dt1: at one draft) */
    double dyn_dt1[8];
    double dyn_cnt;                                    /* decayed count of requests of drafting steps */
    double dyn_acc1, dyn_acc2;                         /* decayed sums of their accepted drafts and squares */
    double dyn_pcnt[FLINT_MAX_DRAFT];                  /* decayed per draft position j + 1: requests that */
    double dyn_pdraft[FLINT_MAX_DRAFT];                /* could draft it, that verified it (after the */
    double dyn_pacc[FLINT_MAX_DRAFT];                  /* confidence pruning), that accepted it */
    int64_t dyn_steps, dyn_last_draft;                 /* spec steps so far, the last that drafted */
    int64_t dyn_obs_steps;                             /* drafting steps whose requests were observed */
    double dyn_pred_ms;                                /* this step's modelled ms, of kind dyn_pred_kind: */
    int dyn_pred_kind;                                 /* 0 plain, 1 drafting whole, 2 pruning */
    double dyn_off[3];                                 /* real less modelled ms per kind: the median */
    double dyn_off_win[3][16];                         /* of its last 16 steps (ring) */
    int64_t dyn_off_n[3];                              /* steps observed per kind */
    int64_t dyn_k_hist[FLINT_MAX_DRAFT + 1];           /* spec steps by chosen K_step */
    int dyn_probe;                                     /* this step drafts only to keep E and r current:
                                                          * FLINT_DYN_PROBE_REQS requests draft, in turn */
    int dyn_deep;                                      /* this step drafts k_step < K, and the probe's
                                                          * requests K: positions past k_step stay observed */
    int64_t dyn_last_deep;                             /* the last such step */
    int dyn_probe_next;                                /* where the next probe's requests start */
    int dyn_prune;                                     /* this step prunes its drafts by confidence
                                                          * (flint_engine_schedule_drafts; schedule.c) */
    int64_t dyn_probe_steps, dyn_deep_steps;           /* probes and deep steps so far */
    double dyn_probe_ms;                               /* measured models: a probe step's wall time
                                                          * (decayed; 0 before the first probe) */
    flint_drafter_req *dreqs;                          /* [max_seqs] */
    int *dreq_sid;
    int *row0;                                         /* [max_seqs] first verify row of a session */
    int *order;                                        /* [max_seqs] the step's sessions in row order */
    int32_t *dev_out;                                  /* [max_seqs][FLINT_MAX_DRAFT + 1] GPU decisions */
    int *dev_acc;                                      /* [max_seqs] accepted drafts (GPU path) */
    flint_sampler_scratch sc;
    flint_step_event *events;
    int n_events;
    flint_spec_stats pooled;
    flint_prefix_cache *pc; /* NULL when prefix caching is off */
    flint_grammar_vocab *gvocab; /* built at the first constrained request */
    uint8_t *allowed;            /* [V] grammar mask scratch */
    int64_t prefix_query_tokens, prefix_hit_tokens;
    int dev_taps;      /* the target's taps stay on the GPU and the CUDA drafter encodes them there */
    int32_t *tap_src;  /* [max_rows] verify row of each committed row (dev_taps) */
    int32_t *row_src;  /* [max_rows] where a verify row's token comes from when the drafts stay on
                        * the GPU: -1 - token (the anchor) or draft request * dmax + slot */
    flint_step_profile prof;
    double prof_t;     /* the last profile mark (ms) */
    int64_t n_forwards;   /* target forwards so far */
    flint_host_time host; /* steps with work, their wall time and its part not waiting for the GPU */
    char piece[8192];
};

/* schedule.c: DSpark's prefix scheduler and the verify cost model it uses */
typedef struct flint_sched_cand {
    float a;  /* prefix survival: product of the confidences up to this draft */
    int d, j; /* draft request, position */
} flint_sched_cand;
int flint_engine_measure_verify_cost(flint_engine *e, flint_err *err);
/* The drafting cost D(n) (encode + draft) at open, as T(B) above. */
int flint_engine_measure_draft_cost(flint_engine *e, flint_err *err);
/* Under dynamic draft lengths, a session that drafts the fixed K every step, unpruned
 * (flint_request_params.fixed_draft): its tokens then depend on nothing but its own inputs. */
static inline int flint_engine_pinned(const flint_engine *e, const session *s) {
    return e->o.dynamic_draft && s->p.fixed_draft && s->p.speculative;
}
/* n_rows_base: verify rows before any draft (one per running session); fills e->dlen[0..n_d):
 * pinned sessions keep all their drafts, the others the prefix the scheduler admits. */
void flint_engine_schedule_drafts(flint_engine *e, int n_rows_base, int n_d);
/* The step-level draft length for n running requests (dynamic_draft: 0..K), and one request's
 * outcome in a drafting step (cap drafts drawn, k of them verified, acc accepted) for its
 * estimates. */
int flint_engine_pick_k(flint_engine *e, int n);
void flint_engine_observe_acceptance(flint_engine *e, int cap, int k, int acc);
void flint_engine_observe_step_ms(flint_engine *e, double ms); /* the wall time of the step picked */
void flint_engine_observe_probe_ms(flint_engine *e, double ms); /* a probe step's wall time */

/* prefix.c */
flint_prefix_cache *flint_prefix_new(int n_blocks);
void flint_prefix_free(flint_prefix_cache *c);
uint64_t flint_prefix_hash(uint64_t parent, const int32_t *tokens, int n);
int32_t flint_prefix_lookup(flint_prefix_cache *c, uint64_t h);
void flint_prefix_insert(flint_prefix_cache *c, flint_kv_alloc *kv, uint64_t h, int32_t block);
int flint_prefix_evictable(const flint_prefix_cache *c, const flint_kv_alloc *kv);
int flint_prefix_evict(flint_prefix_cache *c, flint_kv_alloc *kv, int want);
int flint_prefix_cached_blocks(const flint_prefix_cache *c);
/* Name the full blocks of a session that hold valid KV (positions < upto) in the cache. */
void flint_engine_register_blocks(flint_engine *e, session *s, int upto);

/* Structured output: mask the first-token row (prefill) or the verify rows of a session along its
 * draft path, and advance the committed state over the emitted tokens. */
void flint_engine_grammar_mask_rows(flint_engine *e, session *s, float *rows, const int32_t *drafts, int k);
void flint_engine_grammar_commit(flint_engine *e, session *s, const int32_t *toks, int n);

/* session.c */
void flint_engine_session_free(flint_engine *e, int sid);
int flint_engine_admit(flint_engine *e);
/* Apply the emitted tokens of one step in order: EOS, stop ids, stop strings, max_tokens, the
 * context limit. Returns how many were kept; sets s->finish when the session ends. */
int flint_engine_emit(flint_engine *e, session *s, const int32_t *toks, int n, flint_err *err);
void flint_engine_push_event(flint_engine *e, int sid);
/* Log-probabilities of candidate output idx of this step (token tok, logits row). */
void flint_engine_logprobs(flint_engine *e, session *s, int idx, const float *row, int32_t tok);

/* verifier/tp.c: the target forward on every tensor-parallel rank (or the one target), and the
 * ranks' lifetime. */
int flint_engine_forward(flint_engine *e, const flint_target_batch *b, flint_err *err);

/* step_cuda.c: the step's acceptance and sampling on the GPU (a no-op open without CUDA). stage,
 * before the verify forward: order[0..n) the step's sessions in row order, the first n0 without
 * drafts (rows 0..n0-1), n_d draft requests; their parameters go up in one copy. With dev_drafts
 * (the drafter left its tokens on the GPU) it also builds the R verify rows' tokens there from
 * e->row_src and returns them in *row_tok (for the forward's tokens_device). accept, after the
 * forward: fills out[i * (FLINT_MAX_DRAFT + 1) ..] and acc[i] per session i of order (one copy
 * back, one synchronisation) and, with dev_drafts, the drafted rows of e->row_tok. */
int flint_engine_dev_open(flint_engine *e, flint_err *err);
/* Wait for the target's stream (profiling); a no-op on the CPU. */
void flint_engine_dev_wait(flint_engine *e);
void flint_engine_dev_close(flint_engine *e);
int flint_engine_dev_stage(flint_engine *e, const int *order, int n0, int n_d, int R, int dev_drafts,
                           const int32_t **row_tok, flint_err *err);
int flint_engine_dev_accept(flint_engine *e, const int *order, int n0, int n, int n_d, int32_t *out, int *acc,
                            flint_err *err);
/* The one-graph step (step_cuda.c): ok when the engine can take a drafting step with drafts on the
 * GPU as one graph (CUDA drafter and target on one GPU, taps and decisions on the device, neither
 * split_step nor profile); step runs one such step whose rows the caller laid out as for
 * dev_stage (row_src set, e->dreqs the draft requests) and returns its decisions as dev_accept;
 * capture makes the graphs of every step shape at k_min..k_max drafts at open (engine.h's
 * flint_engine_step_graph_stats, also in step_cuda.c, reports them). */
int flint_engine_dev_step_ok(const flint_engine *e);
int flint_engine_dev_step(flint_engine *e, const int *order, int n0, int n, int n_d, int R, int32_t *out, int *acc,
                          flint_err *err);
int flint_engine_dev_capture(flint_engine *e, int k_min, int k_max, flint_err *err);
int flint_engine_tp_open(flint_engine *e, const flint_target_options *to, flint_err *err);
void flint_engine_tp_close(flint_engine *e);

#endif
