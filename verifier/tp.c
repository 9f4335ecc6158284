/* Tensor parallelism in the engine (DESIGN.md section 10): one target per GPU in this process,
 * joined by NCCL (target/tp_nccl.cu), each driven by its own thread, because every rank must
 * enter each forward (its collectives) at the same time. The engine thread is rank 0 and keeps
 * everything else as without tensor parallelism: it owns the sessions, the KV block ids (the same
 * on every rank: the pools have equal size), the drafter and the sampler; it reads logits and taps
 * from rank 0 only (every rank ends a forward with the same gathered logits), so sampling and
 * acceptance are decided once, and the tokens come from rank 0.
 *
 * A forward fans out: the batch (read-only, shared) is handed to ranks 1..N-1, each writing its
 * outputs into private scratch, while the engine thread runs rank 0; the step waits for all. A
 * rank's NCCL failure or timeout fails that forward on every rank (tp_nccl.cu aborts the group),
 * and the engine reports it instead of hanging. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "verifier/engine_internal.h"

typedef struct tp_rank {
    flint_engine *e;
    int rank;
    pthread_t th;
    float *logits, *taps; /* private outputs [max_rows][V], [max_rows][n_taps][H] */
    flint_err err;
    int rc;
} tp_rank;

struct flint_engine_tp {
    int n;
    flint_tp_comm *comms;    /* [n] */
    flint_target **targets;  /* [n]; targets[0] == e->tgt */
    tp_rank *ranks;          /* [n]; 1.. have threads */
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    uint64_t gen;            /* bumped per forward */
    int pending;             /* ranks still running this forward */
    int quit;
    int failed;              /* a forward failed: the group is torn down with aborts */
    const flint_target_batch *batch;
};

static void *rank_main(void *arg) {
    tp_rank *r = arg;
    flint_engine_tp *tp = r->e->tp;
    uint64_t seen = 0;
    for (;;) {
        pthread_mutex_lock(&tp->mu);
        while (!tp->quit && tp->gen == seen) pthread_cond_wait(&tp->go, &tp->mu);
        if (tp->quit) {
            pthread_mutex_unlock(&tp->mu);
            return NULL;
        }
        seen = tp->gen;
        flint_target_batch b = *tp->batch;
        pthread_mutex_unlock(&tp->mu);
        b.logits = b.logits_on_device ? NULL : r->logits;
        b.taps = b.n_taps ? r->taps : NULL;
        memset(&r->err, 0, sizeof r->err);
        r->rc = flint_target_forward(tp->targets[r->rank], &b, &r->err);
        pthread_mutex_lock(&tp->mu);
        if (--tp->pending == 0) pthread_cond_signal(&tp->done);
        pthread_mutex_unlock(&tp->mu);
    }
}

int flint_engine_forward(flint_engine *e, const flint_target_batch *b, flint_err *err) {
    flint_engine_tp *tp = e->tp;
    e->n_forwards++;
    if (!tp || tp->n == 1) return flint_target_forward(e->tgt, b, err);
    pthread_mutex_lock(&tp->mu);
    tp->batch = b;
    tp->pending = tp->n - 1;
    tp->gen++;
    pthread_cond_broadcast(&tp->go);
    pthread_mutex_unlock(&tp->mu);
    int rc = flint_target_forward(e->tgt, b, err);
    pthread_mutex_lock(&tp->mu);
    while (tp->pending > 0) pthread_cond_wait(&tp->done, &tp->mu);
    pthread_mutex_unlock(&tp->mu);
    for (int r = 1; r < tp->n; r++)
        if (tp->ranks[r].rc && !rc) {
            *err = tp->ranks[r].err;
            rc = -1;
        }
    if (rc) tp->failed = 1;
    return rc;
}

int flint_engine_tp_open(flint_engine *e, const flint_target_options *to, flint_err *err) {
    const int n = e->o.tensor_parallel_size > 1 ? e->o.tensor_parallel_size : 1;
    if (to->device != FLINT_TARGET_CUDA)
        return flint_err_set(err, FLINT_ERR_INVALID, "tensor parallel size %d: tensor parallelism runs on GPUs "
                             "(--device cuda)", n);
    flint_engine_tp *tp = flint_xcalloc(1, sizeof *tp);
    e->tp = tp;
    tp->comms = flint_xcalloc((size_t)n, sizeof *tp->comms);
    tp->targets = flint_xcalloc((size_t)n, sizeof *tp->targets);
    tp->ranks = flint_xcalloc((size_t)n, sizeof *tp->ranks);
    pthread_mutex_init(&tp->mu, NULL);
    pthread_cond_init(&tp->go, NULL);
    pthread_cond_init(&tp->done, NULL);
    int devices[64];
    for (int r = 0; r < n && r < 64; r++) devices[r] = r;
    if (flint_tp_nccl_open_all(n, devices, tp->comms, err)) return -1;
    tp->n = n; /* comms exist from here: close destroys them */
    for (int r = 0; r < n; r++) {
        flint_target_options ro = *to;
        ro.tp = &tp->comms[r];
        if (r > 0) { /* equal pools, so block ids mean the same on every rank */
            ro.kv_blocks = flint_target_kv_blocks(tp->targets[0]);
            ro.gpu_memory_utilization = 0;
        }
        if (!(tp->targets[r] = flint_target_open(e->o.model_dir, &ro, err))) {
            flint_err_prefix(err, "tensor parallel rank %d: ", r);
            return -1;
        }
    }
    e->tgt = tp->targets[0];
    for (int r = 1; r < n; r++) {
        tp_rank *k = &tp->ranks[r];
        k->e = e, k->rank = r;
        k->logits = flint_xmalloc(sizeof(float) * (size_t)e->max_rows * flint_target_get_config(e->tgt)->vocab_size);
        k->taps = flint_xmalloc(sizeof(float) * (size_t)e->max_rows * FLINT_DRAFT_MAX_TAPS *
                                flint_target_get_config(e->tgt)->hidden_size);
        if (pthread_create(&k->th, NULL, rank_main, k)) {
            k->th = 0;
            return flint_err_set(err, FLINT_ERR_IO, "tensor parallel: cannot start the thread of rank %d", r);
        }
    }
    flint_log_info("engine: tensor parallel over %d GPU%s (NCCL), rank 0 samples", n, n > 1 ? "s" : "");
    return 0;
}

void flint_engine_tp_close(flint_engine *e) {
    flint_engine_tp *tp = e->tp;
    if (!tp) return;
    pthread_mutex_lock(&tp->mu);
    tp->quit = 1;
    pthread_cond_broadcast(&tp->go);
    pthread_mutex_unlock(&tp->mu);
    for (int r = 1; r < tp->n; r++) {
        if (tp->ranks[r].th) pthread_join(tp->ranks[r].th, NULL);
        free(tp->ranks[r].logits);
        free(tp->ranks[r].taps);
    }
    if (e->tgt == tp->targets[0]) e->tgt = NULL;
    /* after a failure a rank's peers may be gone: abort (a destroy could wait for them) */
    if (tp->failed)
        for (int r = 0; r < tp->n; r++) flint_tp_nccl_abort(&tp->comms[r]);
    for (int r = 0; r < tp->n; r++) flint_target_close(tp->targets[r]);
    for (int r = 0; r < tp->n; r++) flint_tp_nccl_close(&tp->comms[r]);
    pthread_mutex_destroy(&tp->mu);
    pthread_cond_destroy(&tp->go);
    pthread_cond_destroy(&tp->done);
    free(tp->comms);
    free(tp->targets);
    free(tp->ranks);
    free(tp);
    e->tp = NULL;
}
