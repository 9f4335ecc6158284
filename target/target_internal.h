/* What target.c (load) and forward_cpu.c (compute) share: the weights, the state reserved at open
 * and the handle holding both. Not part of the module's interface; only target/ includes it. */
#ifndef FLINT_TARGET_INTERNAL_H
#define FLINT_TARGET_INTERNAL_H

#include "core/arena.h"
#include "target/target.h"

/* Fused layouts: one matmul produces q|k|v, another gate|up, so each row of activations is read
 * once per projection group. */
typedef struct flint_target_layer {
    const float *attn_norm; /* [hidden] */
    const float *wqkv;      /* [q_dim + 2 kv_dim][hidden]: q rows, then k rows, then v rows */
    const float *q_norm;    /* [head_dim], Qwen3; NULL for Llama */
    const float *k_norm;    /* [head_dim], Qwen3; NULL for Llama */
    const float *wo;        /* [hidden][q_dim] */
    const float *mlp_norm;  /* [hidden] */
    const float *w_gate_up; /* [2 intermediate][hidden]: gate rows, then up rows */
    const float *w_down;    /* [hidden][intermediate] */
} flint_target_layer;

typedef struct flint_target_weights {
    const float *embed;      /* [vocab][hidden] */
    const float *final_norm; /* [hidden] */
    const float *lm_head;    /* [vocab][hidden]; == embed when tied */
    flint_target_layer *layers;
} flint_target_weights;

/* Sized at open for max_rows and max_len; forward allocates nothing. */
typedef struct flint_target_state {
    float *k_cache;  /* [n_layers][n_blocks][block][n_kv_heads][head_dim] */
    float *v_cache;  /* same */
    float *rope_cos; /* [max_len][head_dim / 2] */
    float *rope_sin;
    float *x;      /* [max_rows][hidden] residual stream */
    float *xn;     /* [max_rows][hidden] normed input of a projection */
    float *qkv;    /* [max_rows][qkv_dim] */
    float *att;    /* [max_rows][q_dim] attention output */
    float *gu;     /* [max_rows][2 intermediate] */
    float *act;    /* [max_rows][intermediate] */
    float *scores; /* [n_threads][max_len] softmax weights, one strip per thread */
    float *part;   /* tensor parallel: [max_rows][hidden] a row-parallel projection's partial sums */
    float *lpart;  /* tensor parallel: [max_rows][nv] this rank's slice of the logits */
} flint_target_state;

struct flint_target {
    flint_target_config cfg;
    flint_target_options opts; /* resolved: no zeros left */
    int n_threads;
    /* This rank's share (the whole model without tensor parallelism): query heads [h0, h0 + nh),
     * KV heads [kv0, kv0 + nkv), intermediate rows [i0, i0 + ni), LM-head rows [v0, v0 + nv). */
    int nh, nkv, ni, nv, h0, kv0, i0, v0;
    int q_dim, kv_dim, qkv_dim; /* this rank's heads x head_dim, kv heads x head_dim, q + 2 kv */
    size_t kv_layer_floats;     /* one layer's K (or V) pool */
    flint_target_weights w;
    flint_target_state s;
    flint_arena arena; /* weights, KV pool and scratch: one allocation */
    struct flint_target_cuda *cuda; /* device state when opts.device is CUDA (forward_cuda.cu), else NULL */
};

/* forward_cuda.cu (built with CUDA only): device copies of the weights, the device KV pool and
 * scratch; the forward on the device for a batch that flint_target_forward has validated. */
#ifdef __cplusplus
extern "C" {
#endif
int flint_target_cuda_init(flint_target *t, flint_err *err);
void flint_target_cuda_free(flint_target *t);
int flint_target_forward_cuda(flint_target *t, const flint_target_batch *b, flint_err *err);
int flint_target_stage_cuda(flint_target *t, const flint_target_batch *b, const flint_target_launch *l,
                            flint_err *err);
int flint_target_validate(const flint_target *t, const flint_target_batch *b, flint_err *err);
/* tp_nccl.cu: collectives enqueued on a stream (a cudaStream_t), and a wait that polls NCCL's
 * error state and aborts the group on an error or after timeout_s instead of hanging. */
int flint_tp_nccl_all_gather(flint_tp_nccl *p, const float *local, float *all, size_t n_local, void *stream,
                             flint_err *err);
int flint_tp_nccl_wait(flint_tp_nccl *p, void *stream, double timeout_s, flint_err *err);
int flint_tp_nccl_failed(const flint_tp_nccl *p); /* aborted: nothing may be enqueued or replayed */
#ifdef __cplusplus
}
#endif

#endif
