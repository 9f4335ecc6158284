/* The DSpark block drafter (research/dspark.md sections 1-5): checkpoint formats (DeepSpec dense
 * and speculators), validation against the target, the context encoder (fc over concatenated
 * target taps -> hidden_norm -> per-layer K/V injected into a paged context cache), the block
 * backbone (non-causal over context + block), the Markov head and the confidence head: on the
 * CPU in fp32 (forward_cpu.c, the reference), or on a CUDA device with bf16 weights and context
 * K/V and an fp32 residual stream (forward_cuda.cu; options.device). The context cache is indexed
 * by the same block ids as the target's KV cache: both hold one entry per committed position of
 * a sequence. */
#ifndef FLINT_DRAFTER_DRAFTER_H
#define FLINT_DRAFTER_DRAFTER_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "target/target.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FLINT_DRAFT_MAX_BLOCK 16
#define FLINT_DRAFT_MAX_TAPS 16

typedef enum {
    FLINT_DRAFT_FORMAT_DEEPSPEC = 0, /* Qwen3DSparkModel dense checkpoint */
    FLINT_DRAFT_FORMAT_SPECULATORS,  /* speculators_model_type: dspark */
} flint_draft_format;

typedef enum {
    FLINT_DRAFT_ANCHOR_FIRST = 0, /* [x0, MASK..] at P..P+B-1; slot j predicts P+j+1; B drafts */
    FLINT_DRAFT_FILL_IN,          /* [x0, MASK..] at P..P+B-1; slot j>=1 predicts P+j; B-1 drafts */
} flint_draft_layout;

typedef struct flint_drafter_config {
    flint_draft_format format;
    flint_draft_layout layout;
    int hidden_size, intermediate_size, n_layers, n_heads, n_kv_heads, head_dim;
    int vocab_size;       /* target vocabulary (rows of markov_w1, ids the drafter emits) */
    int draft_vocab_size; /* rows of lm_head / markov_w2; == vocab_size unless reduced (d2t) */
    float rms_norm_eps, rope_theta;
    int block_size;
    int max_draft; /* block_size (anchor-first) or block_size - 1 (fill-in) */
    int mask_token_id;
    int n_taps;
    int tap_layers[FLINT_DRAFT_MAX_TAPS]; /* output-of-layer convention (DeepSpec target_layer_ids) */
    int markov_rank;                      /* 0: no Markov head (DFlash) */
    int has_confidence;
    int confidence_with_markov;
} flint_drafter_config;

typedef struct flint_drafter_options {
    int max_reqs;     /* requests drafted in one call (default 64) */
    int max_rows;     /* most context rows encoded in one call (default: the target's max_rows) */
    int n_threads;    /* 0: the target's */
    const flint_tp_comm *tp; /* tensor parallel rank (target.h), sharded like the target: heads, KV
                              * heads, intermediate rows, LM-head vocabulary rows; fc, norms and the
                              * Markov and confidence heads replicated, so every rank drafts the
                              * same tokens. Needs draft vocab == vocab. NULL: whole drafter.
                              * CPU only in this version. */
    int device;              /* FLINT_TARGET_CPU (0, default) or FLINT_TARGET_CUDA (1): where encode
                              * and draft run. CUDA needs the target on CUDA too (it shares the
                              * target's device embedding, LM head and stream); inputs and outputs
                              * of encode/draft stay host arrays. Numerics: forward_cuda.cu. */
    int enforce_eager;       /* CUDA: 1 launches every kernel of encode and draft each call instead of
                              * replaying captured graphs (same kernels, same results bit for bit);
                              * 0 (default): graphs, except draft calls that want logits or
                              * base_logits (tests), which always run eagerly */
} flint_drafter_options;

void flint_drafter_options_default(flint_drafter_options *o);

typedef struct flint_drafter flint_drafter;

/* Open a drafter directory and check it against the target: hidden size, vocabulary, tap layer
 * range (the target's last layer is refused), mask token, layout. The KV block size and pool
 * size follow the target's, so block ids are shared. Logs the layout at info level. */
flint_drafter *flint_drafter_open(const char *dir, const flint_target *target, const flint_drafter_options *o,
                                  flint_err *err);
void flint_drafter_close(flint_drafter *d);
const flint_drafter_config *flint_drafter_get_config(const flint_drafter *d);
/* A one-line description: format, layout, block size, taps, heads (for logs and --json). */
const char *flint_drafter_describe(const flint_drafter *d);

/* Encode target taps into the context cache. taps is [n_rows][n_taps][hidden] in the order of
 * config.tap_layers (what flint_target_forward returns for those tap_layers). Row r is written at
 * position pos[r] of sequence row_seq[r]. */
typedef struct flint_drafter_ctx_batch {
    int n_rows;
    const float *taps;
    /* CUDA drafter: the taps in device memory instead (taps NULL), [.][n_taps][hidden] fp32 (the
     * target's device view after a taps_on_device forward); row r reads row src_rows[r] of it
     * (src_rows NULL: row r; src_rows only with taps_device), so the rows a step commits are
     * encoded where the verify left them.
     * The call then returns without waiting for the GPU. */
    const float *taps_device;
    const int32_t *src_rows;
    const int32_t *pos;
    const int32_t *row_seq;
    int n_seqs;
    const int32_t *const *block_tables;
    /* CUDA drafter with device taps: 1 lets it hold the rows (their taps gathered now, so the
     * caller may overwrite its taps; their K/V computed by the next draft, non-deferred encode or
     * flint_drafter_flush). Until then the block-table entries of the held rows must not change:
     * flush before freeing a sequence. Ignored elsewhere (the rows are encoded at once). */
    int defer;
} flint_drafter_ctx_batch;

int flint_drafter_encode(flint_drafter *d, const flint_drafter_ctx_batch *b, flint_err *err);
/* Encodes the held rows now (see defer above), reading their block tables from block_tables
 * (indexed by row_seq); a no-op when none are held or on the CPU. */
int flint_drafter_flush(flint_drafter *d, const int32_t *const *block_tables, flint_err *err);

/* One draft request: anchor x0 at position pos (the context is positions < pos, already
 * encoded), n_draft tokens wanted (1..max_draft). temperature 0 or greedy = 1: argmax drafts
 * (q is then a point mass and not written); else x_k ~ q_k = softmax(L_k / temperature) drawn with
 * the DRAFT stream keyed by (seed, position of x_k). */
typedef struct flint_drafter_req {
    int32_t anchor;
    int32_t pos;
    int32_t seq; /* index into block_tables */
    int n_draft;
    float temperature;
    int greedy;
    uint64_t seed;
} flint_drafter_req;

/* Outputs, each indexed [req][k] with stride max_draft (and [req][k][vocab] for q / logits).
 * q, logits, base_logits and confidence may be NULL when not wanted. Entries k >= n_draft of a
 * request (and q of a greedy request) are left as they were. */
typedef struct flint_drafter_out {
    int32_t *tokens;     /* [n_reqs][max_draft] target-vocabulary ids */
    float *q;            /* [n_reqs][max_draft][vocab_size] draft distributions (probabilistic) */
    float *confidence;   /* [n_reqs][max_draft] sigmoid outputs; 1 when the head is absent */
    float *logits;       /* [n_reqs][max_draft][draft_vocab_size] Markov-corrected L_k (tests) */
    float *base_logits;  /* [n_reqs][max_draft][draft_vocab_size] U_k before the Markov bias (tests) */
    int q_on_device;     /* CUDA drafter, q == NULL: compute q but leave it in device memory, at
                          * flint_drafter_device_q (for the device-side acceptance) */
    int tokens_on_device; /* CUDA drafter, tokens and confidence NULL: leave the drafts in device
                           * memory (flint_drafter_device_tokens) and return without waiting for
                           * the GPU; work queued on the target's stream after the call sees them */
} flint_drafter_out;

/* The CUDA drafter's device copy of the last draft call's tokens: token k of request i at
 * [k * *stride + i] (k < that request's n_draft); NULL on the CPU. Valid until the next call. */
const int32_t *flint_drafter_device_tokens(const flint_drafter *d, int *stride);

/* The CUDA drafter's device copy of the last draft call's q: [max_reqs][max_draft][vocab_size],
 * request i at i (rows of greedy requests and k >= n_draft are stale); NULL on the CPU. */
const float *flint_drafter_device_q(const flint_drafter *d);

/* Wait until the CUDA drafter's queued encodes are done (they run on a stream of their own; the
 * engine's step profile waits for them); a no-op on the CPU. */
void flint_drafter_wait(flint_drafter *d);

int flint_drafter_draft(flint_drafter *d, int n_reqs, const flint_drafter_req *reqs,
                        const int32_t *const *block_tables, int n_seqs, flint_drafter_out *out, flint_err *err);

/* The CUDA drafter's part of the engine's one-graph step (issue #8, verifier/step_cuda.c), split
 * as the target's forward (flint_target_plan / stage / enqueue). flint_drafter_plan_draft: the
 * shape of a draft of up to n_reqs requests and n_steps drafts each, q written when with_q
 * (requests padded to a bucket unless enforce_eager, the attention bound at the longest context,
 * the tables that travel). flint_drafter_step_prepare, before staging (outside any capture):
 * encodes the held rows and makes the target's stream wait for the encodes queued on the
 * drafter's own stream. flint_drafter_stage_draft checks the requests as flint_drafter_draft does,
 * and that they fit shape l, and stages them. flint_drafter_enqueue_draft queues the upload and
 * every kernel of that draft on the target's stream (the work flint_drafter_draft does with
 * tokens_on_device); flint_drafter_device_tokens then holds its drafts (stride l->reqs).
 * flint_drafter_enqueue_encode queues the encode of rows 0..n_rows-1 of the target's device taps
 * at the device arrays pos / row_seq / tables (stride bt_stride: the target's last forward,
 * flint_target_device_view), forked to the drafter's stream and joined back: rows whose position
 * is not committed write entries that no draft reads before they are written again. CUDA builds
 * only. */
typedef struct flint_drafter_launch {
    int reqs, n_steps, ctx, with_q, n_tables;
} flint_drafter_launch;
void flint_drafter_plan_draft(const flint_drafter *d, int n_reqs, int n_steps, int with_q, flint_drafter_launch *l);
int flint_drafter_step_prepare(flint_drafter *d, const int32_t *const *block_tables, flint_err *err);
int flint_drafter_stage_draft(flint_drafter *d, int n_reqs, const flint_drafter_req *reqs,
                              const int32_t *const *block_tables, int n_seqs, const flint_drafter_launch *l,
                              flint_err *err);
int flint_drafter_enqueue_draft(flint_drafter *d, const flint_drafter_launch *l, flint_err *err);
int flint_drafter_enqueue_encode(flint_drafter *d, int n_rows, const float *taps_device, const int32_t *pos,
                                 const int32_t *row_seq, const int32_t *tables, int bt_stride, flint_err *err);

/* Captured graphs of the CUDA drafter (zeros on the CPU): how many are held now (encode and draft
 * together), how many captures were made since open and the seconds they took, and the device
 * memory the held ones took (measured as flint_target_graph_info's). */
typedef struct flint_drafter_graph_info {
    int n_graphs;
    long n_captures;
    double capture_s;
    size_t bytes;
} flint_drafter_graph_info;
void flint_drafter_graph_stats(const flint_drafter *d, flint_drafter_graph_info *info);
/* Capture now the CUDA drafter's encode graphs (every row bucket) and draft graphs (every request
 * bucket at 1..n_steps drafts, q written when with_q), so that steps only replay. No-op on the CPU
 * or with enforce_eager. */
int flint_drafter_capture_graphs(flint_drafter *d, int n_steps, int with_q, flint_err *err);

#ifdef __cplusplus
}
#endif
#endif
