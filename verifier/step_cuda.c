/* The speculative step's decisions on the GPU (issue #7: "the step never leaves the device except
 * for the emitted tokens"): when the target and the drafter run on CUDA, the verify logits and the
 * draft distributions q stay in device memory, and the GPU sampler (sampler/sampler_cuda.h) takes
 * the same decisions the host would take from them, by the same rules and RNG keys:
 *  - sessions that verify drafts: flint_cuda_accept (flint_accept_draft's rule), one request per
 *    draft request of the step, in the drafter's order, so request d finds its q at d;
 *  - sessions with no draft this step: flint_cuda_sample keyed SAMPLE at the next position (the
 *    host's flint_sampler_sample), over the rows 0..n0-1 that step.c gives them.
 * Only the accepted counts and the emitted tokens come back (one copy, one synchronisation).
 * The drafts need not visit the host either: the step's parameters go up before the verify
 * forward (flint_engine_dev_stage), and when the drafter left its tokens on the device the verify
 * rows' tokens and the acceptance's draft matrix are built there (flint_cuda_draft_rows); they
 * come back with the decisions. Requests that need the logits on the host (grammar masks,
 * logprobs) keep the host path; step.c decides per step (and applies benchmarks' synthetic
 * acceptance over either). The GPU sampler reproduces the host's
 * probabilities bit for bit (its exact exp mode), so the two paths give the same tokens except
 * at a cumulative boundary within rounding (tests/test_target_cuda.c compares them). */
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/log.h"
#include "verifier/engine_internal.h"

#ifdef FLINT_HAVE_CUDA
#include <cuda_runtime.h>

#include "sampler/sampler_cuda.h"

/* Host mirror and device copy share one layout: inputs first (one upload), outputs after (one
 * download). */
typedef struct dev_layout {
    size_t params_req, params_sid, pos0, pos_s, drafts, k, row0, row_param, row_src; /* inputs */
    size_t in_bytes;
    size_t out, n_acc, tok0, ddrafts, row_tok; /* outputs, from out */
    size_t out_bytes;
} dev_layout;

struct flint_engine_dev {
    int S, L, V, R;
    int dev_drafts, n_rows; /* the staged step: drafts on the GPU, its verify rows */
    dev_layout lo;
    unsigned char *d_base, *h_base; /* device buffers, pinned host mirror */
    void *scratch;
    size_t scratch_bytes;
    int device;
    void *stream;
};

static size_t align256(size_t x) { return (x + 255) & ~(size_t)255; }

static void layout(dev_layout *l, int S, int L, int R) {
    size_t o = 0;
#define PUT(field, bytes) (l->field = o, o = align256(o + (bytes)))
    PUT(params_req, sizeof(flint_cuda_sampling) * (size_t)S);
    PUT(params_sid, sizeof(flint_cuda_sampling) * (size_t)S);
    PUT(pos0, sizeof(int64_t) * (size_t)S);
    PUT(pos_s, sizeof(int64_t) * (size_t)S);
    PUT(drafts, sizeof(int32_t) * (size_t)S * L);
    PUT(k, sizeof(int32_t) * (size_t)S);
    PUT(row0, sizeof(int32_t) * (size_t)S);
    PUT(row_param, sizeof(int32_t) * (size_t)S);
    PUT(row_src, sizeof(int32_t) * (size_t)R);
    l->in_bytes = o;
    PUT(out, sizeof(int32_t) * (size_t)S * (L + 1));
    PUT(n_acc, sizeof(int32_t) * (size_t)S);
    PUT(tok0, sizeof(int32_t) * (size_t)S);
    PUT(ddrafts, sizeof(int32_t) * (size_t)S * L); /* the drafts as the GPU built them (dev_drafts) */
    PUT(row_tok, sizeof(int32_t) * (size_t)R);     /* the verify rows' tokens, likewise */
#undef PUT
    l->out_bytes = o - l->in_bytes;
}

#define H(e, f, T) ((T *)((e)->dev->h_base + (e)->dev->lo.f))
#define D(e, f, T) ((T *)((e)->dev->d_base + (e)->dev->lo.f))

int flint_engine_dev_open(flint_engine *e, flint_err *err) {
    if (e->o.device != FLINT_TARGET_CUDA || e->o.host_accept || e->tp) return 0;
    if (e->dft && !flint_drafter_device_q(e->dft)) return 0; /* a CPU drafter's q is on the host */
    flint_target_device_view v;
    flint_target_get_device_view(e->tgt, &v);
    if (!v.logits || !v.stream) return 0;
    struct flint_engine_dev *d = flint_xcalloc(1, sizeof *d);
    e->dev = d;
    d->S = e->o.max_seqs, d->L = e->dmax > 0 ? e->dmax : 1, d->V = e->V, d->R = e->max_rows;
    d->device = v.device, d->stream = v.stream;
    layout(&d->lo, d->S, d->L, d->R);
    d->scratch_bytes = flint_cuda_sampler_scratch_bytes(d->S * (d->L + 1), e->V);
    size_t total = d->lo.in_bytes + d->lo.out_bytes;
    if (cudaSetDevice(d->device) != cudaSuccess || cudaMalloc((void **)&d->d_base, total) != cudaSuccess ||
        cudaMallocHost((void **)&d->h_base, total) != cudaSuccess ||
        (d->scratch_bytes && cudaMalloc(&d->scratch, d->scratch_bytes) != cudaSuccess))
        return flint_err_set(err, FLINT_ERR_NOMEM, "engine: cannot allocate the device-side acceptance buffers "
                             "(%.1f MiB)", (double)(total + d->scratch_bytes) / (1 << 20));
    memset(d->h_base, 0, total);
    flint_log_info("engine: acceptance and sampling on the GPU (logits and q stay on the device)");
    return 0;
}

void flint_engine_dev_close(flint_engine *e) {
    struct flint_engine_dev *d = e->dev;
    if (!d) return;
    cudaSetDevice(d->device);
    cudaFree(d->d_base);
    cudaFreeHost(d->h_base);
    cudaFree(d->scratch);
    free(d);
    e->dev = NULL;
}

static flint_cuda_sampling to_dev(const flint_sampling_params *p) {
    flint_cuda_sampling c = {p->temperature, p->top_k, p->top_p, p->min_p, p->seed};
    return c;
}

int flint_engine_dev_stage(flint_engine *e, const int *order, int n0, int n_d, int R, int dev_drafts,
                           const int32_t **row_tok, flint_err *err) {
    struct flint_engine_dev *d = e->dev;
    const int L = d->L;
    FLINT_ASSERT(R <= d->R && (!dev_drafts || n_d > 0));
    if (cudaSetDevice(d->device) != cudaSuccess)
        return flint_err_set(err, FLINT_ERR_IO, "engine: cannot select the GPU");
    for (int i = 0; i < n0; i++) { /* rows 0..n0-1: sessions without drafts */
        const session *s = &e->ss[order[i]];
        H(e, params_sid, flint_cuda_sampling)[i] = to_dev(&s->p.sampling);
        H(e, row_param, int32_t)[i] = i;
        H(e, pos_s, int64_t)[i] = s->pos + 1;
    }
    int n_steps = 0;
    for (int di = 0; di < n_d; di++) { /* draft requests, in the drafter's order */
        const session *s = &e->ss[e->dreq_sid[di]];
        H(e, params_req, flint_cuda_sampling)[di] = to_dev(&s->p.sampling);
        H(e, pos0, int64_t)[di] = s->pos + 1;
        H(e, k, int32_t)[di] = s->k; /* 0 after the scheduler: its row is sampled as above, this result unused */
        H(e, row0, int32_t)[di] = e->row0[e->dreq_sid[di]];
        if (s->k > n_steps) n_steps = s->k;
        if (!dev_drafts)
            memcpy(H(e, drafts, int32_t) + (size_t)di * L, e->drafts + (size_t)di * e->dmax, sizeof(int32_t) * e->dmax);
    }
    if (dev_drafts) memcpy(H(e, row_src, int32_t), e->row_src, sizeof(int32_t) * (size_t)R);
    cudaStream_t st = (cudaStream_t)d->stream;
    if (cudaMemcpyAsync(d->d_base, d->h_base, d->lo.in_bytes, cudaMemcpyHostToDevice, st) != cudaSuccess)
        return flint_err_set(err, FLINT_ERR_IO, "engine: upload of the step's sampling parameters failed");
    d->dev_drafts = dev_drafts;
    d->n_rows = R;
    *row_tok = NULL;
    if (dev_drafts) {
        int stride = 0;
        const int32_t *toks = flint_drafter_device_tokens(e->dft, &stride);
        FLINT_ASSERT(toks && stride >= n_d);
        flint_cuda_draft_rows(D(e, row_tok, int32_t), D(e, row_src, int32_t), R, D(e, ddrafts, int32_t), L, n_d,
                              n_steps, toks, stride, (flint_cuda_stream_s)st);
        *row_tok = D(e, row_tok, int32_t);
    }
    return 0;
}

int flint_engine_dev_accept(flint_engine *e, const int *order, int n0, int n, int n_d, int32_t *out, int *acc,
                            flint_err *err) {
    struct flint_engine_dev *d = e->dev;
    const int L = d->L, V = e->V;
    if (cudaSetDevice(d->device) != cudaSuccess)
        return flint_err_set(err, FLINT_ERR_IO, "engine: cannot select the GPU");
    cudaStream_t st = (cudaStream_t)d->stream;
    const float *logits = NULL;
    {
        flint_target_device_view v;
        flint_target_get_device_view(e->tgt, &v);
        logits = v.logits;
    }
    if (n0 > 0)
        flint_cuda_sample(D(e, tok0, int32_t), NULL, 0, logits, V, n0, V, D(e, params_sid, flint_cuda_sampling),
                          D(e, row_param, int32_t), D(e, pos_s, int64_t), FLINT_RNG_SAMPLE, d->scratch,
                          (flint_cuda_stream_s)st);
    if (n_d > 0) {
        const float *q = e->o.draft_greedy ? NULL : flint_drafter_device_q(e->dft);
        const int32_t *drafts = d->dev_drafts ? D(e, ddrafts, int32_t) : D(e, drafts, int32_t);
        flint_cuda_accept(D(e, out, int32_t), D(e, n_acc, int32_t), drafts, L, D(e, k, int32_t), q,
                          (size_t)e->dmax * V, V, logits, V, D(e, row0, int32_t), D(e, pos0, int64_t),
                          D(e, params_req, flint_cuda_sampling), n_d, V, d->scratch, (flint_cuda_stream_s)st);
    }
    const double t_wait = flint_clock_ms();
    if (cudaMemcpyAsync(d->h_base + d->lo.in_bytes, d->d_base + d->lo.in_bytes, d->lo.out_bytes,
                        cudaMemcpyDeviceToHost, st) != cudaSuccess ||
        cudaStreamSynchronize(st) != cudaSuccess)
        return flint_err_set(err, FLINT_ERR_IO, "engine: the device-side acceptance failed: %s",
                             cudaGetErrorString(cudaGetLastError()));
    flint_clock_waited_since(t_wait);
    if (d->dev_drafts) /* the drafted rows' tokens, for the host's bookkeeping (and benchmarks' forcing) */
        for (int r = 0; r < d->n_rows; r++)
            if (e->row_src[r] >= 0) e->row_tok[r] = H(e, row_tok, int32_t)[r];
    /* per session, in row order: out[i * (FLINT_MAX_DRAFT + 1) ..], acc[i] accepted drafts */
    for (int i = 0; i < n; i++) {
        const session *s = &e->ss[order[i]];
        int32_t *o = out + (size_t)i * (FLINT_MAX_DRAFT + 1);
        if (i < n0 || s->k == 0) {
            FLINT_ASSERT(i < n0);
            o[0] = H(e, tok0, int32_t)[i];
            acc[i] = 0;
        } else {
            const int a = H(e, n_acc, int32_t)[s->di];
            FLINT_ASSERT(a >= 0 && a <= s->k);
            memcpy(o, H(e, out, int32_t) + (size_t)s->di * (L + 1), sizeof(int32_t) * (size_t)(a + 1));
            acc[i] = a;
        }
    }
    return 0;
}

void flint_engine_dev_wait(flint_engine *e) {
    const double t_wait = flint_clock_ms();
    flint_target_device_view v;
    flint_target_get_device_view(e->tgt, &v);
    if (v.stream) cudaStreamSynchronize((cudaStream_t)v.stream);
    if (e->dft) flint_drafter_wait(e->dft); /* its encodes run on a stream of their own */
    flint_clock_waited_since(t_wait);
}

#else /* no CUDA backend: the host path only */

void flint_engine_dev_wait(flint_engine *e) { (void)e; }

int flint_engine_dev_open(flint_engine *e, flint_err *err) {
    (void)e, (void)err;
    return 0;
}
void flint_engine_dev_close(flint_engine *e) { (void)e; }
int flint_engine_dev_accept(flint_engine *e, const int *order, int n0, int n, int n_d, int32_t *out, int *acc,
                            flint_err *err) {
    (void)e, (void)order, (void)n0, (void)n, (void)n_d, (void)out, (void)acc;
    return flint_err_set(err, FLINT_ERR_UNSUPPORTED, "engine: no CUDA backend");
}
int flint_engine_dev_stage(flint_engine *e, const int *order, int n0, int n_d, int R, int dev_drafts,
                           const int32_t **row_tok, flint_err *err) {
    (void)e, (void)order, (void)n0, (void)n_d, (void)R, (void)dev_drafts, (void)row_tok;
    return flint_err_set(err, FLINT_ERR_UNSUPPORTED, "engine: no CUDA backend");
}
#endif
