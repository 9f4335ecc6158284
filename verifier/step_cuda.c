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
#include "target/graph_pool.h"
#include "target/ops_cuda.h"

/* Host mirror and device copy share one layout: inputs first (one upload), outputs after (one
 * download). */
typedef struct dev_layout {
    size_t params_req, params_sid, pos0, pos_s, drafts, k, row0, row_param, row_src; /* inputs */
    size_t in_bytes;
    size_t out, n_acc, tok0, ddrafts, row_tok; /* outputs, from out */
    size_t out_bytes;
} dev_layout;

/* A one-graph step's shape (flint_engine_dev_step): what its graph bakes in. Compared with
 * memcmp, so keys are memset first. */
typedef struct step_key {
    flint_target_launch tl; /* the verify forward; tl.rows is the padded row count Rb */
    flint_drafter_launch dl; /* the draft; dl.reqs the padded request count */
    int n0b;                 /* rows sampled without drafts, padded (0: none) */
} step_key;

/* graphs by shape: start-up captures ~30 a draft length at 64 sessions; the least recently used
 * is evicted */
#define STEP_POOL 512

struct flint_engine_dev {
    int S, L, V, R;
    int dev_drafts, n_rows; /* the staged step: drafts on the GPU, its verify rows */
    dev_layout lo;
    unsigned char *d_base, *h_base; /* device buffers, pinned host mirror */
    unsigned char *h_dev;           /* h_base as the device addresses it (mapped pinned memory) */
    void *scratch;
    size_t scratch_bytes;
    int device;
    void *stream;
    /* the one-graph step */
    cudaEvent_t done;       /* its decisions have reached h_base (the encode may still run) */
    flint_graph_pool graphs; /* keyed by step_key */
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
    if (cudaHostGetDevicePointer((void **)&d->h_dev, d->h_base, 0) != cudaSuccess)
        return flint_err_set(err, FLINT_ERR_IO, "engine: the pinned decisions block has no device address");
    if (cudaEventCreateWithFlags(&d->done, cudaEventDisableTiming) != cudaSuccess)
        return flint_err_set(err, FLINT_ERR_IO, "engine: cannot create an event");
    flint_graph_pool_init(&d->graphs, STEP_POOL, sizeof(step_key));
    flint_log_info("engine: acceptance and sampling on the GPU (logits and q stay on the device)");
    return 0;
}

void flint_engine_dev_close(flint_engine *e) {
    struct flint_engine_dev *d = e->dev;
    if (!d) return;
    cudaSetDevice(d->device);
    if (d->stream) cudaStreamSynchronize((cudaStream_t)d->stream);
    if (d->graphs.cap) flint_graph_pool_free(&d->graphs);
    if (d->done) cudaEventDestroy(d->done);
    cudaFree(d->d_base);
    cudaFreeHost(d->h_base);
    cudaFree(d->scratch);
    free(d);
    e->dev = NULL;
}

static void collect(flint_engine *e, const int *order, int n0, int n, int32_t *out, int *acc);

/* The inputs up and the outputs down on the target's stream: kernels over the mapped pinned block,
 * not copy-engine transfers, whose synchronisation with the kernels around them cost ~5 us of GPU
 * time each (and, as nodes of a captured step, as much of its launch on the host; H200, session
 * 21). */
static void upload(struct flint_engine_dev *d) {
    const int w = (int)(d->lo.in_bytes / 4);
    flint_cuda_copy_rows((float *)d->d_base, w, (const float *)d->h_dev, w, 1, w, (flint_cuda_stream)d->stream);
}
static void download(struct flint_engine_dev *d) {
    const int w = (int)(d->lo.out_bytes / 4);
    flint_cuda_copy_rows((float *)(d->h_dev + d->lo.in_bytes), w, (const float *)(d->d_base + d->lo.in_bytes), w, 1, w,
                         (flint_cuda_stream)d->stream);
}

static flint_cuda_sampling to_dev(const flint_sampling_params *p) {
    flint_cuda_sampling c = {p->temperature, p->top_k, p->top_p, p->min_p, p->seed};
    return c;
}

/* The step's parameters into h_base (the host's part of dev_stage); returns the Markov steps of
 * the longest draft. */
static int fill(flint_engine *e, const int *order, int n0, int n_d, int R, int dev_drafts) {
    struct flint_engine_dev *d = e->dev;
    const int L = d->L;
    FLINT_ASSERT(R <= d->R && (!dev_drafts || n_d > 0));
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
    d->dev_drafts = dev_drafts;
    d->n_rows = R;
    return n_steps;
}

int flint_engine_dev_stage(flint_engine *e, const int *order, int n0, int n_d, int R, int dev_drafts,
                           const int32_t **row_tok, flint_err *err) {
    struct flint_engine_dev *d = e->dev;
    const int L = d->L;
    if (cudaSetDevice(d->device) != cudaSuccess)
        return flint_err_set(err, FLINT_ERR_IO, "engine: cannot select the GPU");
    const int n_steps = fill(e, order, n0, n_d, R, dev_drafts);
    cudaStream_t st = (cudaStream_t)d->stream;
    upload(d);
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
    download(d);
    if (cudaStreamSynchronize(st) != cudaSuccess)
        return flint_err_set(err, FLINT_ERR_IO, "engine: the device-side acceptance failed: %s",
                             cudaGetErrorString(cudaGetLastError()));
    flint_clock_waited_since(t_wait);
    collect(e, order, n0, n, out, acc);
    return 0;
}

/* The decisions in h_base into out / acc per session of order (and, with dev_drafts, the drafted
 * rows' tokens into e->row_tok). */
static void collect(flint_engine *e, const int *order, int n0, int n, int32_t *out, int *acc) {
    struct flint_engine_dev *d = e->dev;
    const int L = d->L;
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
}

/* ==== The one-graph step (issue #8) ====
 * A step that verifies drafts the drafter leaves on the GPU (fixed K, or a dynamic K without
 * confidence pruning) is known whole on the host before it starts: its requests, positions,
 * seeds and verify rows. The host stages every module's inputs (the drafter's requests, the
 * target's batch, the decisions' parameters: three pinned blocks) and the GPU runs, as one graph
 * on the target's stream: the uploads (memcpy nodes from the pinned blocks), the draft, the
 * verify rows' tokens, the verify forward, the decisions, their download, an event the host waits
 * on, and the encode of the verify rows into the drafter's context. The encode takes every verify
 * row (padded to the forward's bucket) rather than the committed ones only, so no host decision
 * sits between acceptance and encode: rows past a request's acceptance write context entries at
 * positions no draft reads before a later step writes them again (a draft reads positions below
 * its anchor), as the verify forward does with the target's KV. Its rows are independent (the
 * GEMMs are batch invariant), so the committed entries are the bits the split path writes.
 * The shape (the graph's key) follows from the number of sessions n and the longest draft only:
 * the verify rows padded as the target's graphs pad n (longest + 1) rows, the draft's requests as
 * the drafter's pad n, and the no-draft sampling padded to n's bucket when any session drafts
 * nothing. So a request drafting less near its end changes no graph, and every shape at 1..K
 * drafts is captured when the engine opens (flint_engine_dev_capture; on first use otherwise).
 * Padded verify rows take token 0 and write the sink; padded requests of the acceptance (k = 0,
 * row 0, greedy) and padded rows of the no-draft sampling (greedy, row i) write decisions nobody
 * reads. With enforce_eager the same work is launched without a graph. */

static int pad_seqs(int n, int cap) {
    int b = n <= 8 ? n : 16;
    while (b < n) b *= 2;
    return b < cap ? b : cap;
}

/* Every launch of one step of shape k on the target's stream (captured or not). */
static int step_enqueue(flint_engine *e, const step_key *k, int capturing, flint_err *err) {
    struct flint_engine_dev *d = e->dev;
    cudaStream_t st = (cudaStream_t)d->stream;
    const int Rb = k->tl.rows, np = k->dl.reqs, L = d->L, V = e->V;
    if (flint_drafter_enqueue_draft(e->dft, &k->dl, err)) return -1;
    upload(d);
    int stride = 0;
    const int32_t *toks = flint_drafter_device_tokens(e->dft, &stride);
    FLINT_ASSERT(toks && stride == np);
    flint_cuda_draft_rows(D(e, row_tok, int32_t), D(e, row_src, int32_t), Rb, D(e, ddrafts, int32_t), L, np,
                          k->dl.n_steps, toks, stride, (flint_cuda_stream_s)st);
    if (flint_target_enqueue(e->tgt, &k->tl, D(e, row_tok, int32_t), err)) return -1;
    flint_target_device_view v;
    flint_target_get_device_view(e->tgt, &v);
    if (k->n0b > 0)
        flint_cuda_sample(D(e, tok0, int32_t), NULL, 0, v.logits, V, k->n0b, V, D(e, params_sid, flint_cuda_sampling),
                          D(e, row_param, int32_t), D(e, pos_s, int64_t), FLINT_RNG_SAMPLE, d->scratch,
                          (flint_cuda_stream_s)st);
    const float *q = e->o.draft_greedy ? NULL : flint_drafter_device_q(e->dft);
    flint_cuda_accept(D(e, out, int32_t), D(e, n_acc, int32_t), D(e, ddrafts, int32_t), L, D(e, k, int32_t), q,
                      (size_t)e->dmax * V, V, v.logits, V, D(e, row0, int32_t), D(e, pos0, int64_t),
                      D(e, params_req, flint_cuda_sampling), np, V, d->scratch, (flint_cuda_stream_s)st);
    download(d);
    if ((capturing ? cudaEventRecordWithFlags(d->done, st, cudaEventRecordExternal) : cudaEventRecord(d->done, st)) !=
        cudaSuccess)
        return flint_err_set(err, FLINT_ERR_IO, "engine: the step's download: %s",
                             cudaGetErrorString(cudaGetLastError()));
    return flint_drafter_enqueue_encode(e->dft, Rb, v.taps, v.pos, v.row_seq, v.tables, v.bt_stride, err);
}

/* The graph of shape k: found, or captured now (the pool evicts its least recently used). */
typedef struct step_ctx {
    flint_engine *e;
    const step_key *k;
} step_ctx;

static int step_enqueue_captured(void *ctx, flint_err *err) {
    const step_ctx *c = (const step_ctx *)ctx;
    return step_enqueue(c->e, c->k, 1, err);
}

static int step_graph_get(flint_engine *e, const step_key *k, cudaGraphExec_t *out, flint_err *err) {
    step_ctx c = {e, k};
    void *exec = NULL;
    if (flint_graph_pool_get(&e->dev->graphs, k, e->dev->stream, step_enqueue_captured, &c, &exec, err)) return -1;
    *out = (cudaGraphExec_t)exec;
    return 0;
}

/* The shape of a step of n sessions whose longest draft is n_steps, with or without sessions that
 * draft nothing: every session's rows fit n (n_steps + 1) rows, and the draft requests n. */
static void shape(flint_engine *e, int n, int n_steps, int no_draft, step_key *k) {
    memset(k, 0, sizeof *k);
    flint_target_plan(e->tgt, n * (n_steps + 1), n, pad_seqs(n, e->o.max_seqs), e->n_taps, e->tap_layers, &k->tl);
    flint_drafter_plan_draft(e->dft, n, n_steps, !e->o.draft_greedy, &k->dl);
    const int cap = k->tl.rows < e->o.max_seqs ? k->tl.rows : e->o.max_seqs; /* rows that exist; params' size */
    k->n0b = no_draft ? pad_seqs(n, cap) : 0;
}

int flint_engine_dev_step_ok(const flint_engine *e) {
    return e->dev && e->dft && e->dev_taps && e->row_src && !e->o.split_step && !e->o.profile;
}

int flint_engine_dev_step(flint_engine *e, const int *order, int n0, int n, int n_d, int R, int32_t *out, int *acc,
                          flint_err *err) {
    struct flint_engine_dev *d = e->dev;
    FLINT_ASSERT(n_d > 0 && flint_engine_dev_step_ok(e));
    const double t_stage = flint_clock_ms(); /* the caller waits for nothing before this */
    if (cudaSetDevice(d->device) != cudaSuccess)
        return flint_err_set(err, FLINT_ERR_IO, "engine: cannot select the GPU");
    if (flint_drafter_step_prepare(e->dft, e->tables, err)) return -1;
    step_key k;
    memset(&k, 0, sizeof k);
    for (int r = 0; r < R; r++) e->logit_rows[r] = r;
    flint_target_batch b = {.n_rows = R, .tokens = e->row_tok, .pos = e->row_pos, .row_seq = e->row_seq,
                            .n_seqs = e->o.max_seqs, .block_tables = e->tables, .n_logit_rows = R,
                            .logit_rows = e->logit_rows, .n_taps = e->n_taps, .tap_layers = e->tap_layers,
                            .logits_on_device = 1, .taps_on_device = 1};
    /* the shape depends on the number of sessions and the longest draft only (requests drafting
     * less pad their rows; sessions that draft nothing only add the no-draft sampling) */
    int n_steps = 0;
    for (int di = 0; di < n_d; di++)
        if (e->dreqs[di].n_draft > n_steps) n_steps = e->dreqs[di].n_draft;
    shape(e, n, n_steps, n0 > 0, &k);
    if (flint_target_stage(e->tgt, &b, &k.tl, err) ||
        flint_drafter_stage_draft(e->dft, n_d, e->dreqs, e->tables, e->o.max_seqs, &k.dl, err))
        return -1;
    fill(e, order, n0, n_d, R, 1);
    const int Rb = k.tl.rows, np = k.dl.reqs;
    FLINT_ASSERT(Rb >= R && Rb <= d->R && np >= n_d && np <= d->S && k.n0b >= n0);
    const flint_cuda_sampling greedy = {0};
    for (int i = n0; i < k.n0b; i++) /* padded no-draft rows: greedy on rows that exist */
        H(e, params_sid, flint_cuda_sampling)[i] = greedy, H(e, row_param, int32_t)[i] = i, H(e, pos_s, int64_t)[i] = 0;
    for (int di = n_d; di < np; di++) { /* padded requests: nothing to verify */
        H(e, params_req, flint_cuda_sampling)[di] = greedy;
        H(e, k, int32_t)[di] = 0, H(e, row0, int32_t)[di] = 0, H(e, pos0, int64_t)[di] = 0;
    }
    for (int r = R; r < Rb; r++) H(e, row_src, int32_t)[r] = -1; /* token 0, as the forward's padded rows */
    const double t_launch = flint_clock_ms();
    e->host.stage_ms += t_launch - t_stage;
    if (e->o.enforce_eager) {
        if (step_enqueue(e, &k, 0, err)) return -1;
    } else {
        cudaGraphExec_t exec = NULL;
        if (step_graph_get(e, &k, &exec, err)) return -1;
        if (cudaGraphLaunch(exec, (cudaStream_t)d->stream) != cudaSuccess)
            return flint_err_set(err, FLINT_ERR_IO, "engine: step graph launch: %s",
                                 cudaGetErrorString(cudaGetLastError()));
    }
    const double t_wait = flint_clock_ms();
    e->host.launch_ms += t_wait - t_launch;
    if (cudaEventSynchronize(d->done) != cudaSuccess)
        return flint_err_set(err, FLINT_ERR_IO, "engine: the step failed: %s", cudaGetErrorString(cudaGetLastError()));
    flint_clock_waited_since(t_wait);
    collect(e, order, n0, n, out, acc);
    return 0;
}

/* The graphs of every step shape at k_min..k_max drafts (with and without sessions that draft
 * nothing), captured when the engine opens so that steps only replay. */
int flint_engine_dev_capture(flint_engine *e, int k_min, int k_max, flint_err *err) {
    struct flint_engine_dev *d = e->dev;
    if (!flint_engine_dev_step_ok(e) || e->o.enforce_eager || k_min < 1) return 0;
    if (cudaSetDevice(d->device) != cudaSuccess)
        return flint_err_set(err, FLINT_ERR_IO, "engine: cannot select the GPU");
    for (int K = k_min; K <= k_max; K++)
        for (int n = 1; n <= e->o.max_seqs && n * (K + 1) <= e->max_rows; n++)
            for (int no_draft = 0; no_draft < 2; no_draft++) {
                step_key k;
                shape(e, n, K, no_draft, &k);
                cudaGraphExec_t exec;
                if (step_graph_get(e, &k, &exec, err)) return -1;
            }
    return 0;
}

void flint_engine_step_graph_stats(const flint_engine *e, flint_target_graph_info *info) {
    memset(info, 0, sizeof *info);
    const struct flint_engine_dev *d = e->dev;
    if (!d) return;
    info->n_graphs = d->graphs.n;
    info->n_captures = d->graphs.n_captures;
    info->capture_s = d->graphs.capture_s;
    info->bytes = d->graphs.held_bytes;
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

int flint_engine_dev_step_ok(const flint_engine *e) {
    (void)e;
    return 0;
}
int flint_engine_dev_step(flint_engine *e, const int *order, int n0, int n, int n_d, int R, int32_t *out, int *acc,
                          flint_err *err) {
    (void)e, (void)order, (void)n0, (void)n, (void)n_d, (void)R, (void)out, (void)acc;
    return flint_err_set(err, FLINT_ERR_UNSUPPORTED, "engine: no CUDA backend");
}
int flint_engine_dev_capture(flint_engine *e, int k_min, int k_max, flint_err *err) {
    (void)e, (void)k_min, (void)k_max, (void)err;
    return 0;
}
void flint_engine_step_graph_stats(const flint_engine *e, flint_target_graph_info *info) {
    (void)e;
    memset(info, 0, sizeof *info);
}

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
