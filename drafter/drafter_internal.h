/* What the drafter/ sources share: config loading, weights and reserved state. Not part of the
 * interface. */
#ifndef FLINT_DRAFTER_INTERNAL_H
#define FLINT_DRAFTER_INTERNAL_H

#include "core/arena.h"
#include "drafter/drafter.h"

#ifdef __cplusplus
extern "C" {
#endif

int flint_drafter_config_load(const char *dir, flint_drafter_config *c, flint_err *err);
int flint_drafter_config_check(const char *dir, const flint_drafter_config *c, const flint_target_config *t,
                               flint_err *err);

typedef struct flint_drafter_layer {
    const float *attn_norm; /* [H] */
    const float *wq;        /* [q_dim][H] */
    const float *wkv;       /* [2 kv_dim][H]: k rows then v rows (context rows use only this) */
    const float *q_norm;    /* [head_dim] */
    const float *k_norm;    /* [head_dim] */
    const float *wo;        /* [H][q_dim] */
    const float *mlp_norm;  /* [H] */
    const float *w_gate_up; /* [2 I][H] */
    const float *w_down;    /* [H][I] */
} flint_drafter_layer;

typedef struct flint_drafter_weights {
    const float *embed;       /* [vocab][H]: own copy or the target's */
    const float *lm_head;     /* [draft_vocab][H]: own copy or the target's */
    const float *fc;          /* [H][n_taps H] */
    const float *hidden_norm; /* [H] */
    const float *final_norm;  /* [H] */
    const float *markov_w1;   /* [vocab][r] */
    const float *markov_w2;   /* [draft_vocab][r] */
    const float *conf_w;      /* [H (+ r)] */
    float conf_b;
    int32_t *d2t;             /* [draft_vocab] target id = i + d2t[i]; NULL when the vocabularies match */
    flint_drafter_layer *layers;
} flint_drafter_weights;

typedef struct flint_drafter_state {
    float *k_cache, *v_cache; /* [n_layers][n_blocks][block][n_kv][head_dim] context K/V */
    float *rope_cos, *rope_sin; /* [max_len + block_size][head_dim / 2] */
    /* context encoding, [max_rows] rows */
    float *ctx;   /* [max_rows][H] fc output, then hidden_norm */
    float *ckv;   /* [max_rows][2 kv_dim] */
    /* block forward, [max_reqs * block_size] rows */
    float *x, *xn;  /* [rows][H] */
    float *q;       /* [rows][q_dim] */
    float *bkv;     /* [rows][2 kv_dim] block K/V (scratch, never cached) */
    float *att;     /* [rows][q_dim] */
    float *gu;      /* [rows][2 I] */
    float *act;     /* [rows][I] */
    float *hfin;    /* [rows][H] */
    float *u;       /* [rows][draft_vocab] base logits */
    float *scores;  /* [n_threads][max_len + block_size] */
    float *lk;      /* [n_threads][draft_vocab] corrected logits of one step */
    float *qk;      /* [n_threads][vocab] draft distribution of one step (target ids) */
    float *e;       /* [n_threads][r] W1[prev] */
    float *part;    /* tensor parallel: [rows][H] partial sums of a row-parallel projection */
    float *upart;   /* tensor parallel: [rows][nv] this rank's base logits */
} flint_drafter_state;

struct flint_drafter {
    flint_drafter_config cfg;
    flint_drafter_options opts;
    int n_threads, block, n_blocks, max_len;
    /* this rank's share (everything without tensor parallelism), as in target_internal.h */
    int nh, nkv, ni, nv, h0, kv0, i0, v0;
    int q_dim, kv_dim;
    size_t kv_layer_floats;
    flint_drafter_weights w; /* CUDA: only while open uploads them, then freed with the arena */
    flint_drafter_state s;   /* CPU only */
    flint_arena arena;
    struct flint_drafter_cuda *cuda; /* device state when opts.device is CUDA (forward_cuda.cu), else NULL */
    char desc[512];
};

/* forward_cuda.cu (CUDA builds only). init uploads the host weights of d->w (bf16), takes the
 * target's device embedding / LM head when the checkpoint has none, and reserves the context
 * K/V pool and the scratch of the largest encode and draft calls in one cudaMalloc. encode and
 * draft take batches that forward_cpu.c has validated. */
int flint_drafter_cuda_init(flint_drafter *d, const flint_target *t, int own_embed, int own_head, flint_err *err);
void flint_drafter_cuda_free(flint_drafter *d);
size_t flint_drafter_cuda_bytes(const flint_drafter *d);
int flint_drafter_encode_cuda(flint_drafter *d, const flint_drafter_ctx_batch *b, flint_err *err);
int flint_drafter_flush_cuda(flint_drafter *d, const int32_t *const *block_tables, flint_err *err);
int flint_drafter_stage_draft_cuda(flint_drafter *d, int n_reqs, const flint_drafter_req *reqs,
                                   const int32_t *const *block_tables, const flint_drafter_launch *l, flint_err *err);
int flint_drafter_draft_cuda(flint_drafter *d, int n_reqs, const flint_drafter_req *reqs,
                             const int32_t *const *block_tables, int n_seqs, flint_drafter_out *out, flint_err *err);

/* The drafter's own small kernels, exported for their C references in tests/test_drafter_cuda.c.
 * Device pointers; launched on stream s (a cudaStream_t), no synchronisation.
 * - to_bf16: out[i] = bf16(in[i]) (round to nearest even, as flint_bf16_from_f32), i < n.
 * - markov_conf, one block per request i < n_reqs, for draft slot k: prev = prev_tok ? prev_tok[i]
 *   : anchor[i]; when r > 0 and e is not NULL, e[i][0..r) = w1[prev][0..r) (bf16 copy); when conf_w is not NULL,
 *   conf[i * ld_conf + k] = sigmoid((sum_h conf_w[h] hfin_i[h] + conf_b) + sum_j conf_w[H + j]
 *   w1[prev][j]) with hfin_i = hfin + i * ld_hfin (bf16, H wide), the second sum only when
 *   conf_markov (r > 0).
 * - markov_bias: L[i * ld + v] = L[i * ld + v] + sum_{j < r} bf16(w1[prev_i][j]) w2[v][j] for v < Vd,
 *   i < n_reqs, prev_i as markov_conf's; w2 row-major bf16 [Vd][r]; the sum over j in order (fmaf).
 * - scatter_vocab: reduced draft vocabulary into target ids, out[i][t] = t2d[t] >= 0 ?
 *   in[i * ld_in + t2d[t]] : -inf, for t < n_vocab (out is [n_rows][n_vocab]). */
void flint_drafter_cuda_to_bf16(uint16_t *out, const float *in, size_t n, void *s);
void flint_drafter_cuda_markov_conf(uint16_t *e, int r, const uint16_t *w1, const int32_t *anchor,
                                    const int32_t *prev_tok, float *conf, int ld_conf, int k, const float *conf_w,
                                    float conf_b, int conf_markov, const uint16_t *hfin, size_t ld_hfin, int H,
                                    int n_reqs, void *s);
/* markov_bias with conf not NULL and conf->conf_w set also computes markov_conf's confidences (the
 * same arithmetic, bit for bit) in the same launch: conf->conf[i * ld_conf + k] for every request
 * (no e gathered). */
typedef struct flint_drafter_conf_args {
    float *conf;
    int ld_conf, k;
    const float *conf_w;
    float conf_b;
    int conf_markov;
    const uint16_t *hfin;
    size_t ld_hfin;
    int H;
} flint_drafter_conf_args;
/* cand (NULL: none): each request's argmax candidates, one per 32 vocabulary entries, [n_reqs]
 * [ceil(Vd / 32)] pairs (the value's float bits, its index; -inf and INT_MAX where every value is
 * NaN) of the corrected logits, for flint_cuda_draft_sample_cand's greedy rows */
void flint_drafter_cuda_markov_bias(float *L, size_t ld, const uint16_t *w2, const uint16_t *w1, const int32_t *anchor,
                                    const int32_t *prev_tok, int r, int Vd, int n_reqs,
                                    const flint_drafter_conf_args *conf, int32_t *cand, void *s);
void flint_drafter_cuda_scatter_vocab(float *out, const float *in, size_t ld_in, const int32_t *t2d, int n_vocab,
                                      int n_rows, void *s);
#ifdef __cplusplus
}
#endif

#endif
