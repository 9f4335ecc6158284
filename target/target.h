/* The target model: Qwen3ForCausalLM and LlamaForCausalLM from a Hugging Face directory
 * (config.json + *.safetensors). CPU reference forward in fp32 over a batch of rows from several
 * sequences of different lengths, with a paged KV cache; optional residual-stream taps after any
 * layers (the drafter reads them). Every row is computed with the same reduction order whatever
 * the number of rows or threads, so results are batch-invariant bit for bit. */
#ifndef FLINT_TARGET_TARGET_H
#define FLINT_TARGET_TARGET_H

#include <stddef.h>
#include <stdint.h>

#include "../core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { FLINT_ARCH_LLAMA = 0, FLINT_ARCH_QWEN3 = 1 } flint_arch;

#define FLINT_MAX_EOS 8

typedef struct flint_target_config {
    flint_arch arch;
    int vocab_size;
    int hidden_size;
    int intermediate_size;
    int n_layers;
    int n_heads;
    int n_kv_heads;
    int head_dim;
    int max_position_embeddings;
    float rms_norm_eps;
    float rope_theta;
    int tie_word_embeddings;
    int bos_token_id; /* -1 if none */
    int n_eos;
    int eos_token_ids[FLINT_MAX_EOS];
} flint_target_config;

/* Read and validate DIR/config.json (architecture, sizes, divisibility, rope scaling we do not
 * implement is refused). */
int flint_target_config_load(const char *dir, flint_target_config *cfg, flint_err *err);
/* A named synthetic shape (qwen3-8b, qwen3-0.6b) for --load-format dummy. */
int flint_target_shape_config(const char *name, flint_target_config *cfg, flint_err *err);

/* Tensor parallelism (order 8): a rank's side of the collectives. all_reduce sums buf[0..n) over
 * the ranks in rank order and leaves the sum in every rank's buf; all_gather puts every rank's
 * [rows][n_local] block side by side into full [rows][n_local * n_ranks] (rank r's columns at
 * r * n_local). Both return 0, or -1 when the group failed (the forward then fails with
 * FLINT_ERR_IO instead of hanging). The CPU forward calls these host functions (the CPU
 * simulation implements them with threads and a barrier, tests/test_tp_sim.c); the CUDA forward
 * uses the NCCL communicator in nccl instead (flint_tp_nccl_open_all / _open_rank fill the whole
 * struct; the host functions are then NULL). */
typedef struct flint_tp_nccl flint_tp_nccl;
typedef struct flint_tp_comm {
    int rank, n_ranks;
    int (*all_reduce)(void *ctx, float *buf, size_t n);
    int (*all_gather)(void *ctx, const float *local, float *full, int rows, int n_local);
    void *ctx;
    flint_tp_nccl *nccl; /* CUDA: this rank's NCCL communicator (target/tp_nccl.cu) */
    int device;          /* CUDA: the device this rank runs on */
} flint_tp_comm;

/* NCCL communicators (loaded at run time: no link dependency; a missing libnccl.so.2 is a clear
 * error). _open_all: one process driving n GPUs devices[0..n) (ncclCommInitAll); comms[r] becomes
 * rank r. _open_rank: one rank of a group spanning processes or hosts, joined with the 128-byte id
 * rank 0 got from _unique_id and passed out of band. NCCL_NVLS_ENABLE=0 is set (unless set). */
int flint_tp_nccl_open_all(int n, const int *devices, flint_tp_comm *comms, flint_err *err);
int flint_tp_nccl_unique_id(unsigned char id[128], flint_err *err);
int flint_tp_nccl_open_rank(int n, int rank, int device, const unsigned char id[128], flint_tp_comm *comm,
                            flint_err *err);
void flint_tp_nccl_close(flint_tp_comm *comm);
/* After a rank failed: abort instead of destroy (a destroy may wait for peers that are gone). */
void flint_tp_nccl_abort(flint_tp_comm *comm);

#define FLINT_TARGET_MAX_GRAPH_SIZES 64

typedef struct flint_target_options {
    int kv_block_size;  /* tokens per KV block, a power of two (default 16) */
    int kv_blocks;      /* blocks in the KV pool; 0 = max_seqs x ceil(max_len / block) */
    int max_seqs;       /* sequences the default pool is sized for (default 1) */
    int max_len;        /* tokens per sequence; 0 = max_position_embeddings */
    int max_rows;       /* most rows one forward may carry (default 512); reserved at open */
    int n_threads;      /* 0 = every core */
    int device;         /* FLINT_TARGET_CPU (default) or FLINT_TARGET_CUDA: where the forward runs */
    const flint_tp_comm *tp; /* NULL: the whole model. Else this process holds rank tp->rank of
                              * tp->n_ranks: query heads, KV heads (replicated when there are more
                              * ranks than KV heads), the MLP's intermediate rows and the LM head's
                              * vocabulary rows split in contiguous equal parts; q|k|v and gate|up
                              * are column-parallel, o_proj and down_proj row-parallel (one
                              * all_reduce after each), the LM head vocab-parallel (all_gather:
                              * every rank gets the full logits). CPU only in this version. */
    const char *dummy_shape; /* NULL: load dir. Else a flint_target_shape_config name: random bf16
                              * weights made on the device (device CUDA only; dir is not read, the
                              * host holds no weights, so embed/lm_head accessors return NULL) */
    int enforce_eager;  /* CUDA: launch every kernel each forward instead of replaying captured
                         * graphs (same kernels, same results bit for bit) */
    int graph_max_rows; /* CUDA: forwards of more rows than this run eagerly (default 512) */
    int n_graph_sizes;  /* CUDA: the row counts a captured forward is padded to (vLLM's
                         * --cuda-graph-sizes), graph_sizes[0..n) ascending, each in 1..max_rows;
                         * forwards of more rows than the last run eagerly (it replaces
                         * graph_max_rows). 0: the default buckets 1..8, 12, 16, 24, 32, 48, ..., 512 */
    int graph_sizes[FLINT_TARGET_MAX_GRAPH_SIZES];
    double tp_timeout_s; /* CUDA tensor parallel: a forward whose collectives have not finished after
                          * this long has lost a rank: the NCCL group is aborted and the forward
                          * fails (default 120) */
    float gpu_memory_utilization; /* CUDA, kv_blocks 0: size the KV pool so that this fraction of the
                                   * device's memory is in use after open (what other processes
                                   * hold counts); 0 = the default max_seqs x max_len pool */
} flint_target_options;

#define FLINT_TARGET_CPU 0
#define FLINT_TARGET_CUDA 1 /* CUDA device 0; bf16 weights and KV (target/forward_cuda.cu) */

void flint_target_options_default(flint_target_options *o);

typedef struct flint_target flint_target;

/* Open a model directory. Errors name the file and tensor: missing or corrupt files, unsupported
 * architecture, shape mismatch. */
flint_target *flint_target_open(const char *dir, const flint_target_options *opts, flint_err *err);
void flint_target_close(flint_target *t);
const flint_target_config *flint_target_get_config(const flint_target *t);
int flint_target_kv_block_size(const flint_target *t);
int flint_target_kv_blocks(const flint_target *t);

/* One forward over n_rows new tokens. Row r belongs to sequence row_seq[r] and sits at absolute
 * position pos[r]; its K/V is written into that sequence's blocks (block_tables[s][pos / block]),
 * then it attends causally to positions 0..pos[r] of its sequence: earlier positions must already
 * be in the cache or be rows of this batch. Logits come out for the rows listed in logit_rows
 * (in that order); taps (when n_taps > 0) give the residual stream after each listed layer
 * (0-based, output-of-layer convention: HF hidden_states[l + 1]) for every row.
 * Token ids, positions (< max_len), sequence indices, block ids, logit rows and tap layers are
 * checked before anything is written: a bad batch returns -1 (FLINT_ERR_INVALID) and changes no
 * state. Not checkable, so the caller's duty: no two rows share a (sequence, position), and a
 * block shared by several sequences (a cached prefix) is not written. */
typedef struct flint_target_batch {
    int n_rows;
    const int32_t *tokens;              /* [n_rows] */
    const int32_t *pos;                 /* [n_rows] */
    const int32_t *row_seq;             /* [n_rows] index into block_tables */
    int n_seqs;
    const int32_t *const *block_tables; /* [n_seqs][blocks covering the largest position] */
    int n_logit_rows;
    const int32_t *logit_rows;          /* [n_logit_rows] */
    float *logits;                      /* out: [n_logit_rows][vocab_size] */
    int n_taps;
    const int32_t *tap_layers;          /* [n_taps] */
    float *taps;                        /* out: [n_rows][n_taps][hidden_size], or NULL */
    int logits_on_device;               /* CUDA: keep the logits in device memory (logits may be NULL);
                                         * the step's device-side sampler reads them there */
    int taps_on_device;                 /* CUDA: keep the taps in device memory (taps may be NULL), at
                                         * the device view's taps; a GPU drafter encodes them there.
                                         * When neither logits nor taps come back the call returns
                                         * without waiting for the GPU */
    const int32_t *tokens_device;       /* CUDA: read the n_rows token ids from this device array
                                         * (written by work queued earlier on the forward's stream:
                                         * the step's drafts) instead of tokens, which must still
                                         * hold valid ids (they are checked; the anchors) */
} flint_target_batch;

int flint_target_forward(flint_target *t, const flint_target_batch *b, flint_err *err);

/* A CUDA forward split in two for the engine's one-graph step (issue #8, verifier/step_cuda.c).
 * flint_target_plan gives the launch shape of a forward of up to n_rows rows over n_seqs
 * sequences, every row a logit row: rows padded to the graph bucket (exact with enforce_eager),
 * the attention's window hint, and the block tables that travel (n_seqs padded up to seq_bucket,
 * plus the sink). Shapes that compare equal launch the same kernels. flint_target_stage checks a
 * batch as flint_target_forward does and that it fits shape l (at most l->rows rows, its logits
 * and taps left on the device, logit row r = row r), and writes it into the pinned staging block:
 * the forward's host part. flint_target_enqueue queues on the target's stream, under stream
 * capture or not: the staging block's upload, the tokens from tokens_device (l->rows of them; NULL:
 * the staged ones) and every kernel of the forward: the work flint_target_forward_cuda does for
 * that batch at that shape, bit for bit. The host must not stage again until that work is done.
 * CUDA builds only. */
typedef struct flint_target_launch {
    int rows, n_logit, ctx, n_taps, rows_per_seq;
    int32_t tap_layers[16];
    int n_tables;
} flint_target_launch;
void flint_target_plan(const flint_target *t, int n_rows, int n_seqs, int seq_bucket, int n_taps,
                       const int32_t *tap_layers, flint_target_launch *l);
int flint_target_stage(flint_target *t, const flint_target_batch *b, const flint_target_launch *l, flint_err *err);
int flint_target_enqueue(flint_target *t, const flint_target_launch *l, const int32_t *tokens_device, flint_err *err);

/* The fp32 embedding [vocab][hidden] and LM head [vocab][hidden] (the same pointer when tied),
 * for a drafter that shares them instead of storing copies. Valid until close. With tensor
 * parallelism the LM head is this rank's rows only; with dummy weights both are NULL. */
const float *flint_target_embed_weights(const flint_target *t);
const float *flint_target_lm_head_weights(const flint_target *t);
int flint_target_n_threads(const flint_target *t);
/* Benchmarks: random K/V in the whole device pool, so verify steps can be timed at any context
 * without prefilling it (CUDA only). */
int flint_target_debug_fill_kv(flint_target *t, uint64_t seed, flint_err *err);
/* The CUDA forward's device-side pieces a GPU drafter or sampler shares (all NULL on the CPU):
 * bf16 embedding and LM head ([vocab][hidden], the same pointer when tied; this rank's LM-head
 * rows with tensor parallelism), the fp32 logits of the last forward ([n_logit_rows][vocab], what
 * logits_on_device leaves there) and the stream the forward runs on (a cudaStream_t). Valid until
 * close; the logits until the next forward. */
typedef struct flint_target_device_view {
    const uint16_t *embed, *lm_head;
    const float *logits;
    const float *taps; /* [rows][n_taps][hidden] fp32 of the last forward (taps_on_device) */
    void *stream;
    int device; /* the CUDA device all of these live on (select it before using them) */
    /* the last forward's batch as the device holds it: positions and sequences of its rows (the
     * padded rows' sequence is a sink whose every block is kv_blocks), and the renumbered block
     * tables [.][bt_stride] they index (a GPU drafter encodes the verify rows from them) */
    const int32_t *pos, *row_seq, *tables;
    int bt_stride;
} flint_target_device_view;
void flint_target_get_device_view(const flint_target *t, flint_target_device_view *v);
/* Captured forward graphs (CUDA; zeros on the CPU): how many are held now, how many were
 * captured since open and the time capturing and instantiating them took, and the device memory
 * the held ones took (free memory before the capture less after the instantiation: the driver's
 * own allocations, at its granularity). */
typedef struct flint_target_graph_info {
    int n_graphs;
    long n_captures;
    double capture_s;
    size_t bytes;
} flint_target_graph_info;
void flint_target_graph_stats(const flint_target *t, flint_target_graph_info *info);
/* Capture now the forward graphs that decode and verify steps use (every row bucket and window
 * hint, with these taps), so that the steps only replay. No-op on the CPU or with enforce_eager. */
int flint_target_capture_graphs(flint_target *t, int n_taps, const int32_t *tap_layers, flint_err *err);
/* Benchmarks, tensor parallel CUDA only: reps exchanges of one row-parallel projection's partial
 * sums (rows x hidden floats per rank, all-gathered) on this rank's stream; *ms gets the mean time
 * of one. Every rank must call it at the same time. */
int flint_target_debug_tp_exchange(flint_target *t, int rows, int reps, double *ms, flint_err *err);
/* Benchmarks: the kernels' launch tuning for the whole process (ops_cuda.h,
 * flint_cuda_gemm_configure: the GEMMs' programmatic dependent launch on (1) or off (0), the wgmma
 * path for M > 32 on (1) or off (0); flint_cuda_kernel_pdl_configure: the other kernels'
 * programmatic dependent launch; gemm_early: short GEMMs starting their successors at once;
 * negative keeps a setting). Results are the same bits either way.
 * No-op without CUDA. */
void flint_target_cuda_tuning(int pdl, int wgmma, int kernel_pdl, int gemm_early);
/* Device memory held by the CUDA forward (0 on the CPU). */
size_t flint_target_device_bytes(const flint_target *t);
/* The options as resolved at open (no zeros left: max_len, kv_blocks, n_threads filled in). */
const flint_target_options *flint_target_get_options(const flint_target *t);

/* ==== Paged KV block allocator ====
 * Block ids index the target's KV pool (and, later, the drafter's context pool, which shares
 * the same ids because both hold one entry per committed position). Reference counted so a
 * cached prefix block can be shared. */
typedef struct flint_kv_alloc flint_kv_alloc;

flint_kv_alloc *flint_kv_alloc_new(int n_blocks);
void flint_kv_alloc_free(flint_kv_alloc *a);
int flint_kv_alloc_free_count(const flint_kv_alloc *a);
/* Take one free block; -1 when none is left. */
int32_t flint_kv_alloc_take(flint_kv_alloc *a);
void flint_kv_alloc_ref(flint_kv_alloc *a, int32_t block);
void flint_kv_alloc_release(flint_kv_alloc *a, int32_t block);
int flint_kv_alloc_refs(const flint_kv_alloc *a, int32_t block);

#ifdef __cplusplus
}
#endif
#endif
