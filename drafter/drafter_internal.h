/* What the drafter/ sources share: config loading, weights and reserved state. Not part of the
 * interface. */
#ifndef FLINT_DRAFTER_INTERNAL_H
#define FLINT_DRAFTER_INTERNAL_H

#include "core/arena.h"
#include "drafter/drafter.h"

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
    flint_drafter_weights w;
    flint_drafter_state s;
    flint_arena arena;
    char desc[512];
};

#endif
