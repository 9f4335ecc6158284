/* `flint bench`: step-level timing of the engine over batch size x draft length, with the
 * no-speculation baseline (K = 0: the target alone, no drafter loaded) measured in the same run.
 *
 * Per grid point: b sessions whose prompts are `context` real tokens (cut from a prompt set,
 * because random tokens give unrealistic acceptance), stepped until every prefill is done, then
 * `warmup` untimed steps, then `steps` timed ones. The median step time is the headline; tokens
 * per second = tokens emitted per step / median step time (total), divided by b (per user).
 * With --tokens N every K times the same text instead: warm-up until each session has emitted
 * `warmup` tokens, then the window until each has emitted N more, and the rates are over the
 * window's mean step (a fixed number of steps lets a K that emits more time a later stretch of
 * the text, which in a long continuation is often easier to draft: a fair judge of a dynamic
 * draft length, which drafts less where drafting does not pay, against fixed ones).
 *
 * Synthetic acceptance (engine option `synthetic`): a mean AL is turned into one conditional rate
 * r per K with 1 + r + ... + r^K = AL, or the per-position conditional rates are given; the
 * engine still drafts and verifies (the work per step is real), only the accept decision is
 * forced. An engine is opened per K because the rates depend on K.
 *
 * --rounds N repeats the sweep (every other round in reverse order) and pools each point's timed
 * steps: the machine's clocks drift by a few percent over a run (session 20: the same engine 3%
 * apart in two runs), which single-pass comparisons of engines opened one after the other take
 * for a difference between them. With --vary-prompts each round also takes other prompts (the
 * same for every K of the round): at batch 1 one prompt's trajectory decides a point otherwise
 * (session 39: a dynamic engine 0.94x at one context, 1.97x at another). --keep-engines keeps
 * each K's engine over the rounds instead of opening a fresh one each time: a server's engine
 * lives on, and a dynamic draft length's estimates with it (a fresh one starts from each answer's
 * opening, which for the embedded pair is hard to draft: session 40). Dynamic draft lengths
 * mix cheap and costly steps, so their throughput is over the mean step, and their speed-up is
 * against K = 0's mean step too. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef FLINT_HAVE_CUDA
#include "sampler/sampler_cuda.h"
#endif
#include "core/log.h"
#include "evals/evals_internal.h"
#include "evals/stats.h"
#include "evals/svg.h"

typedef struct row {
    int b, k;
    double rates[FLINT_MAX_DRAFT];
    double expected_al;  /* synthetic: 1 + sum of prefix products; NaN for real acceptance */
    double measured_al;
    double median_ms, mean_ms, p90_ms;
    double tokens_per_step;
    double tps_total, tps_user, speedup;
    flint_step_profile prof; /* --profile: the profiled pass, sums over its steps */
    int64_t khist[FLINT_MAX_DRAFT + 1]; /* dynamic draft lengths: timed steps by the step-level K chosen */
    int64_t probes, deep;               /* of which probes (a few requests drafted), deep steps (a few drafted K) */
    int dynamic;
    double *ms;          /* the timed steps of every round, n_ms of them */
    double *host_ms;     /* the engine's host time in each of them (flint_engine_host_time) */
    int n_ms;
    double host_median_us;
    long tokens;         /* emitted in them */
    int64_t al_steps, al_accepted; /* sessions' speculative steps and accepted drafts in them */
    flint_host_time host;          /* the engine's host time in them (flint_engine_host_time) */
} row;

/* The most timed steps of one round: --steps, or with --tokens one per token (a running session
 * emits at least one a step). */
static int window_steps(const flint_bench_options *o) { return o->tokens > 0 ? o->tokens : o->steps; }

/* A pool of real prompt tokens from the dataset's first turns (no chat template: the benchmark
 * wants a length, not a conversation). Without a tokenizer: seeded pseudo-random ids. */
static int32_t *token_pool(const flint_engine *e, const flint_bench_options *o, int *n, flint_err *err) {
    int need = o->context * 4 + 4096;
    int32_t *pool = flint_xmalloc(sizeof(int32_t) * (size_t)need);
    int m = 0;
    const flint_tokenizer *tok = flint_engine_tokenizer(e);
    if (tok) {
        flint_dataset *d = flint_dataset_load(o->dataset, o->data_dir, err);
        if (!d) {
            free(pool);
            return NULL;
        }
        for (int i = 0; i < d->n && m < need; i++) {
            int32_t *ids;
            int k;
            if (flint_tokenizer_encode(tok, d->items[i].turns[0], strlen(d->items[i].turns[0]), 0, &ids, &k, err)) {
                flint_dataset_free(d);
                free(pool);
                return NULL;
            }
            for (int j = 0; j < k && m < need; j++) pool[m++] = ids[j];
            free(ids);
        }
        flint_dataset_free(d);
    }
    if (m == 0) {
        flint_stats_rng r;
        flint_stats_rng_seed(&r, o->sampling.seed);
        int V = flint_engine_vocab_size(e);
        for (; m < need; m++) pool[m] = (int32_t)flint_stats_rng_below(&r, (uint64_t)V);
    }
    *n = m;
    return pool;
}

/* Tokens a session may emit in a measurement: while the b prompts are prefilled (512 rows a
 * step), the sessions that started first already decode, then warm-up and timed steps (with
 * --tokens at most one step per token of the slowest session, a step emitting up to K + 1). */
static int bench_max_tokens(const flint_bench_options *o, int b, int K) {
    const int prefill_steps = (int)(((long)b * o->context + 511) / 512) + 1;
    return 2 + (prefill_steps + o->warmup + window_steps(o) + (o->profile ? o->steps : 0) + 2) * (K + 1);
}

static long min_emitted(const long *emitted, int b) {
    long m = emitted[0];
    for (int j = 1; j < b; j++) m = emitted[j] < m ? emitted[j] : m;
    return m;
}

static int window_done(const long *emitted, const long *start, int b, int n) {
    for (int j = 0; j < b; j++)
        if (emitted[j] - start[j] < n) return 0;
    return 1;
}

static void count_tokens(const flint_step_event *ev, int n_ev, const int *sids, int b, long *emitted) {
    for (int k = 0; k < n_ev; k++)
        for (int j = 0; j < b; j++)
            if (ev[k].sid == sids[j]) emitted[j] += ev[k].n_tokens;
}

/* Time one (b, K) point on an open engine: one round's steps, added to the row's. */
static int measure(flint_engine *e, const flint_bench_options *o, int b, int K, int round, const int32_t *pool,
                   int n_pool, row *r, flint_err *err) {
    int max_tokens = bench_max_tokens(o, b, K);
    int max_len = flint_engine_max_model_len(e);
    if ((long)o->context + max_tokens > max_len)
        return flint_err_set(err, FLINT_ERR_INVALID, "--context %d plus the %d tokens a session may emit (%d warm-up + "
                             "%d timed steps at K = %d) exceed the model's context of %d tokens; lower --context or "
                             "--steps", o->context, max_tokens, o->warmup, o->steps, K, max_len);
    int32_t *prompt = flint_xmalloc(sizeof(int32_t) * (size_t)o->context);
    int *sids = flint_xmalloc(sizeof(int) * (size_t)b);
    for (int j = 0; j < b; j++) sids[j] = -1;
    int rc = -1;
    double *ms = r->ms + r->n_ms, *hms = r->host_ms + r->n_ms;
    flint_spec_stats *before = flint_xcalloc((size_t)b, sizeof *before);
    flint_spec_stats *after = flint_xcalloc((size_t)b, sizeof *after);
    long *emitted = flint_xcalloc((size_t)b, sizeof(long)); /* tokens since the prompt, per session */
    for (int j = 0; j < b; j++) { /* session j's prompt: the set's (j + round b)-th (--vary-prompts), else its j-th */
        int off = (int)(((long)(j + (o->vary_prompts ? (long)round * b : 0)) * 7919) % n_pool);
        for (int t = 0; t < o->context; t++) prompt[t] = pool[(off + t) % n_pool];
        flint_request_params rp;
        flint_request_params_default(&rp);
        rp.sampling = o->sampling;
        rp.sampling.seed = o->sampling.seed + (uint64_t)j;
        rp.max_tokens = max_tokens;
        rp.ignore_eos = 1;
        if ((sids[j] = flint_engine_add(e, prompt, o->context, &rp, err)) < 0) goto done;
    }
    const flint_step_event *ev;
    int n_ev;
    /* prefill: until every session has its first token */
    for (int started = 0, guard = 0; started < b; guard++) {
        if (guard > 100000) {
            flint_err_set(err, FLINT_ERR_INTERNAL, "prefill did not finish");
            goto done;
        }
        if (flint_engine_step(e, &ev, &n_ev, err)) goto done;
        for (int k = 0; k < n_ev; k++)
            for (int j = 0; j < b; j++)
                if (ev[k].sid == sids[j] && ev[k].n_tokens > 0) {
                    started += !emitted[j];
                    emitted[j] += ev[k].n_tokens;
                }
    }
    /* warm-up: steps, or (--tokens) until every session has emitted `warmup` tokens, so that every K
     * times the same text (a faster K would otherwise time a later stretch of it: session 40, the
     * embedded pair's continuations turn repetitive and easy to draft as they go on) */
    for (int s = 0; o->tokens > 0 ? min_emitted(emitted, b) < o->warmup : s < o->warmup; s++) {
        if (s > 100000) {
            flint_err_set(err, FLINT_ERR_INTERNAL, "warm-up did not finish");
            goto done;
        }
        if (flint_engine_step(e, &ev, &n_ev, err)) goto done;
        count_tokens(ev, n_ev, sids, b, emitted);
    }
    /* statistics at the start of the timed window: every running session has an event in every
     * step, so the last step's events carry them */
    for (int k = 0; k < n_ev; k++)
        for (int j = 0; j < b; j++)
            if (ev[k].sid == sids[j]) before[j] = *ev[k].stats;
    long tokens = 0;
    int64_t kh0[FLINT_MAX_DRAFT + 1], kh1[FLINT_MAX_DRAFT + 1];
    flint_engine_step_k_hist(e, kh0);
    const int64_t pr0 = flint_engine_probe_steps(e), dp0 = flint_engine_deep_steps(e);
    flint_host_time h0, h1;
    flint_engine_host_time(e, &h0);
    long *start = flint_xmalloc(sizeof(long) * (size_t)b);
    memcpy(start, emitted, sizeof(long) * (size_t)b);
    int n_steps = 0;
    for (int s = 0; o->tokens > 0 ? !window_done(emitted, start, b, o->tokens) : s < o->steps; s++) {
        if (s >= window_steps(o)) { /* a step emits at least one token for every running session */
            free(start);
            flint_err_set(err, FLINT_ERR_INTERNAL, "the timed window took more than %d steps", window_steps(o));
            goto done;
        }
        n_steps++;
        flint_host_time hs0, hs1;
        flint_engine_host_time(e, &hs0);
        double t0 = flint_evals_now_ms();
        if (flint_engine_step(e, &ev, &n_ev, err)) goto done;
        ms[s] = flint_evals_now_ms() - t0;
        flint_engine_host_time(e, &hs1);
        hms[s] = hs1.host_ms - hs0.host_ms;
        for (int k = 0; k < n_ev; k++) {
            tokens += ev[k].n_tokens;
            if (ev[k].finish != FLINT_FINISH_NONE) {
                flint_err_set(err, FLINT_ERR_INTERNAL, "a benchmark session finished inside the timed window (batch "
                              "%d, K = %d, timed step %d, finish reason %d after %d tokens this step; max_tokens %d, "
                              "context %d of %d)", b, K, s, (int)ev[k].finish, ev[k].n_tokens, max_tokens, o->context,
                              max_len);
                goto done;
            }
            for (int j = 0; j < b; j++)
                if (ev[k].sid == sids[j]) after[j] = *ev[k].stats;
        }
        count_tokens(ev, n_ev, sids, b, emitted);
    }
    free(start);
    flint_engine_host_time(e, &h1);
    if (r->dynamic && !o->quiet) {
        char why[1024];
        flint_engine_dyn_describe(e, b, why, sizeof why);
        printf("dynamic b = %d after its timed steps: %s\n", b, why);
    }
    r->host.steps += h1.steps - h0.steps;
    r->host.wall_ms += h1.wall_ms - h0.wall_ms;
    r->host.host_ms += h1.host_ms - h0.host_ms;
    r->host.draft_ms += h1.draft_ms - h0.draft_ms;
    r->host.forward_ms += h1.forward_ms - h0.forward_ms;
    r->host.accept_ms += h1.accept_ms - h0.accept_ms;
    r->host.encode_ms += h1.encode_ms - h0.encode_ms;
    r->host.stage_ms += h1.stage_ms - h0.stage_ms;
    r->host.launch_ms += h1.launch_ms - h0.launch_ms;
    flint_engine_step_k_hist(e, kh1);
    for (int k = 0; k <= FLINT_MAX_DRAFT; k++) r->khist[k] += kh1[k] - kh0[k];
    r->probes += flint_engine_probe_steps(e) - pr0;
    r->deep += flint_engine_deep_steps(e) - dp0;
    if (o->profile) { /* a second window, waiting for the GPU after every phase */
        flint_engine_set_profile(e, 1);
        for (int s = 0; s < o->steps; s++)
            if (flint_engine_step(e, &ev, &n_ev, err)) goto done;
        flint_step_profile p;
        flint_engine_step_profile(e, &p);
        flint_engine_set_profile(e, 0);
        r->prof.steps += p.steps;
        r->prof.prefill_ms += p.prefill_ms, r->prof.draft_ms += p.draft_ms, r->prof.verify_ms += p.verify_ms;
        r->prof.accept_ms += p.accept_ms, r->prof.encode_ms += p.encode_ms, r->prof.host_ms += p.host_ms;
    }
    for (int j = 0; j < b; j++) {
        r->al_steps += after[j].steps - before[j].steps;
        r->al_accepted += after[j].accepted - before[j].accepted;
    }
    r->n_ms += n_steps;
    r->tokens += tokens;
    rc = 0;
done:
    for (int j = 0; j < b; j++)
        if (sids[j] >= 0) flint_engine_cancel(e, sids[j]);
    if (flint_engine_active(e) > 0 || rc == 0) {
        flint_err tmp = {0};
        flint_engine_step(e, &ev, &n_ev, &tmp); /* frees the cancelled sessions */
    }
    free(prompt);
    free(sids);
    free(before);
    free(after);
    free(emitted);
    return rc;
}

int flint_bench_run(const flint_bench_options *o, flint_err *err) {
    flint_target_cuda_tuning(o->gemm_pdl, o->gemm_wgmma, o->kernel_pdl, o->gemm_early);
#ifdef FLINT_HAVE_CUDA
    flint_cuda_sampler_set_pdl(o->kernel_pdl); /* the sampler's kernels follow the others' setting */
#endif
    if (o->dummy && !o->spec_config) return flint_bench_gpu_run(o, err); /* the target's verify step alone */
    int rc = -1, n_pool = 0, nk = o->n_draft + 1, max_b = 0;
    int32_t *pool = NULL;
    char *owned = NULL, *path_svg = NULL;
    flint_engine *e = NULL, **kept = flint_xcalloc((size_t)nk, sizeof *kept); /* --keep-engines */
    row *rows = flint_xcalloc((size_t)(nk * o->n_batch), sizeof *rows);
    /* CUDA graphs of each engine: at open (start-up capture), and after its runs */
    flint_target_graph_info *g_open = flint_xcalloc((size_t)nk, sizeof *g_open);
    flint_target_graph_info *g_end = flint_xcalloc((size_t)nk, sizeof *g_end);
    flint_target_graph_info *g_step = flint_xcalloc((size_t)nk, sizeof *g_step); /* one-graph steps at open */
    int n_rows = 0;
    cJSON *root = NULL;
    for (int i = 0; i < o->n_batch; i++)
        if (o->batch_sizes[i] > max_b) max_b = o->batch_sizes[i];

    flint_engine_options base;
    flint_engine_options_default(&base);
    if (flint_evals_engine_options(&base, o->model_dir, o->spec_config, o->default_drafter, NULL, &owned, err))
        goto done;
    const int synthetic = o->synthetic_al > 0 || o->n_synthetic_rates > 0;
    const int rounds = o->rounds > 0 ? o->rounds : 1;
    for (int i = 0; i < nk * o->n_batch; i++) {
        rows[i].ms = flint_xmalloc(sizeof(double) * (size_t)window_steps(o) * rounds);
        rows[i].host_ms = flint_xmalloc(sizeof(double) * (size_t)window_steps(o) * rounds);
        rows[i].b = o->batch_sizes[i % o->n_batch];
        rows[i].k = i < o->n_batch ? 0 : o->draft_lengths[i / o->n_batch - 1];
        rows[i].dynamic = rows[i].k > 0 && base.dynamic_draft;
        rows[i].expected_al = NAN;
    }
    for (int step = 0; step < rounds * nk; step++) {
        const int round = step / nk, ki = round % 2 ? nk - 1 - step % nk : step % nk;
        int K = ki == 0 ? 0 : o->draft_lengths[ki - 1];
        flint_engine_options eo = base;
        eo.max_seqs = 2 * max_b;
        eo.n_threads = o->threads;
        eo.device = o->device;
        eo.enforce_eager = o->enforce_eager;
        eo.split_step = o->split_step;
        if (o->cuda_graph_sizes && flint_graph_sizes_parse(o->cuda_graph_sizes, &eo, err)) goto done;
        eo.tensor_parallel_size = o->tensor_parallel_size;
        if (o->dummy) { /* a real shape with random weights: a context just long enough for the run */
            int kmax = 0;
            for (int i = 0; i < o->n_draft; i++) kmax = o->draft_lengths[i] > kmax ? o->draft_lengths[i] : kmax;
            eo.model_shape = o->model_shape;
            eo.max_model_len = o->context + bench_max_tokens(o, max_b, kmax) + 16;
            if (o->max_model_len > eo.max_model_len) { /* sized as a server's, the pool as the run needs */
                const int bs = eo.kv_block_size > 0 ? eo.kv_block_size : 16;
                eo.kv_blocks = eo.max_seqs * ((eo.max_model_len + bs - 1) / bs);
                eo.max_model_len = o->max_model_len;
            }
        }
        double rates[FLINT_MAX_DRAFT] = {0};
        if (K == 0) eo.drafter_dir = NULL;
        else {
            eo.num_speculative_tokens = K;
            if (synthetic) {
                eo.synthetic = 1;
                double r1 = o->synthetic_al > 0 ? flint_bench_rate_for_al(o->synthetic_al, K) : 0;
                for (int i = 0; i < K; i++) rates[i] = o->synthetic_al > 0 ? r1 : o->synthetic_rates[i];
                for (int i = 0; i < K; i++) eo.synthetic_rates[i] = (float)rates[i];
            }
        }
        if (o->keep_engines && kept[ki]) e = kept[ki], kept[ki] = NULL;
        else if (!(e = flint_engine_open(&eo, err))) {
            if (K) flint_err_prefix(err, "K = %d: ", K);
            goto done;
        }
        size_t dev_bytes = 0;
        if (round == 0) flint_engine_device_stats(e, &g_open[ki], &dev_bytes);
        if (round == 0) flint_engine_step_graph_stats(e, &g_step[ki]);
        if (!pool && !(pool = token_pool(e, o, &n_pool, err))) goto done;
        for (int bi = 0; bi < o->n_batch; bi++) {
            row *r = &rows[ki * o->n_batch + bi];
            const long tok0 = r->tokens;
            const int n0 = r->n_ms;
            if (measure(e, o, o->batch_sizes[bi], K, round, pool, n_pool, r, err)) goto done;
            memcpy(r->rates, rates, sizeof rates);
            if (synthetic && K > 0) {
                double s = 1, p = 1;
                for (int i = 0; i < K; i++) s += (p *= rates[i]);
                r->expected_al = s;
            }
            flint_log_info("bench: b = %d, K = %d, round %d: median step %.3f ms, %.3f tokens a step per request",
                           r->b, r->k, round + 1, flint_stats_median(r->ms + n0, r->n_ms - n0),
                           (double)(r->tokens - tok0) / (r->n_ms - n0) / r->b);
        }
        if (round == 0) flint_engine_device_stats(e, &g_end[ki], &dev_bytes);
        if (o->keep_engines && round + 1 < rounds) kept[ki] = e;
        else flint_engine_close(e);
        e = NULL;
    }
    n_rows = nk * o->n_batch;
    for (int i = 0; i < n_rows; i++) {
        row *r = &rows[i];
        r->measured_al = r->k == 0 ? 1.0 : r->al_steps ? 1.0 + (double)r->al_accepted / (double)r->al_steps : NAN;
        r->median_ms = flint_stats_median(r->ms, r->n_ms);
        r->mean_ms = flint_stats_mean(r->ms, r->n_ms);
        r->p90_ms = flint_stats_quantile(r->ms, r->n_ms, 0.9, 0);
        r->host_median_us = 1e3 * flint_stats_median(r->host_ms, r->n_ms);
        r->tokens_per_step = (double)r->tokens / r->n_ms;
        const double step_ms = r->dynamic || o->tokens > 0 ? r->mean_ms : r->median_ms;
        r->tps_total = step_ms > 0 ? r->tokens_per_step / (step_ms / 1e3) : 0;
        r->tps_user = r->tps_total / r->b;
    }
    /* speed-up against K = 0 at the same batch size, over the same statistic of the step */
    for (int i = 0; i < n_rows; i++) {
        const row *r = &rows[i], *z = &rows[i % o->n_batch];
        rows[i].speedup = NAN;
        if ((r->dynamic || o->tokens > 0) && r->mean_ms > 0 && z->mean_ms > 0 && z->tokens_per_step > 0)
            rows[i].speedup = (r->tokens_per_step / r->mean_ms) / (z->tokens_per_step / z->mean_ms);
        else if (z->tps_user > 0)
            rows[i].speedup = r->tps_user / z->tps_user;
    }
    if (!o->quiet) {
        char window[160];
        if (o->tokens > 0)
            snprintf(window, sizeof window, "the same text for every K: tokens %d to %d of each session timed%s "
                     "(rates over the mean step)", o->warmup, o->warmup + o->tokens, rounds > 1 ? " per round" : "");
        else
            snprintf(window, sizeof window, "%d warm-up + %d timed steps%s", o->warmup, o->steps,
                     rounds > 1 ? " per round" : "");
        printf("flint bench: %s%s, drafter %s, context %d, %s, %s acceptance\n", o->dummy ? o->model_shape : o->model_dir,
               o->dummy ? " (random weights on the GPU)" : "", base.drafter_dir, o->context, window,
               synthetic ? "synthetic" : "real");
        if (rounds > 1)
            printf("%d rounds, every other one in reverse order, each point's steps pooled%s%s\n", rounds,
                   o->vary_prompts ? "; each round on other prompts (the same for every K)" : "",
                   o->keep_engines ? "; each K's engine kept over the rounds" : "");
        printf("%6s %3s %8s %8s %11s %11s %11s %13s %9s %9s\n", "batch", "K", "AL", "exp. AL", "median ms", "p90 ms",
               "tok/s/user", "tok/s total", "speed-up", "host us");
        for (int i = 0; i < n_rows; i++) {
            const row *r = &rows[i];
            char exp[16] = "-";
            if (isfinite(r->expected_al)) snprintf(exp, sizeof exp, "%.3f", r->expected_al);
            printf("%6d %3d %8.3f %8s %11.3f %11.3f %11.1f %13.1f %8.2fx %9.1f\n", r->b, r->k, r->measured_al, exp,
                   r->median_ms, r->p90_ms, r->tps_user, r->tps_total, r->speedup, r->host_median_us);
        }
        printf("host us: the engine's own time per step, its wall time less its waits for the GPU (on the CPU "
               "backend the whole step), median over the timed steps as the step time (the mean: the JSON and the "
               "tables below)\n");
        if (base.dynamic_draft) {
            printf("dynamic draft lengths (tokens/s above: over the mean step, the steps mix K = 0 and K; the "
                   "speed-up against K = 0's mean step): timed steps by "
                   "the step-level K (then pruned per request by confidence):\n");
            for (int i = 0; i < n_rows; i++) {
                if (rows[i].k == 0) continue;
                printf("%6d %3d  ", rows[i].b, rows[i].k);
                for (int k = 0; k <= rows[i].k; k++) printf(" K%d: %lld", k, (long long)rows[i].khist[k]);
                printf(" (probes %lld, deep %lld)\n", (long long)rows[i].probes, (long long)rows[i].deep);
            }
        }
        if (g_open[0].n_captures > 0 || g_end[0].n_captures > 0) {
            printf("CUDA graphs per engine: captured at open (start-up), and during its runs (prefill shapes):\n");
            for (int ki = 0; ki < nk; ki++)
                printf("%10s K = %d: %d graphs in %.3f s, %.1f MiB at open (one-graph steps: %d, %.3f s, %.1f MiB); "
                       "%ld more during the runs\n", "", ki == 0 ? 0 : o->draft_lengths[ki - 1], g_open[ki].n_graphs,
                       g_open[ki].capture_s, (double)g_open[ki].bytes / (1u << 20), g_step[ki].n_graphs,
                       g_step[ki].capture_s, (double)g_step[ki].bytes / (1u << 20),
                       g_end[ki].n_captures - g_open[ki].n_captures);
        }
        if (o->profile) {
            printf("step profile (ms per step, the GPU waited for after each phase; host = the engine's own work):\n");
            printf("%6s %3s %9s %9s %9s %9s %9s %9s %9s\n", "batch", "K", "total", "draft", "verify", "accept",
                   "encode", "prefill", "host");
            for (int i = 0; i < n_rows; i++) {
                const flint_step_profile *p = &rows[i].prof;
                double n = p->steps > 0 ? (double)p->steps : 1;
                double tot = p->prefill_ms + p->draft_ms + p->verify_ms + p->accept_ms + p->encode_ms + p->host_ms;
                printf("%6d %3d %9.3f %9.3f %9.3f %9.3f %9.3f %9.3f %9.4f\n", rows[i].b, rows[i].k, tot / n,
                       p->draft_ms / n, p->verify_ms / n, p->accept_ms / n, p->encode_ms / n, p->prefill_ms / n,
                       p->host_ms / n);
            }
            printf("host us per step in the timed window (no waits for the GPU), by the calls they were in "
                   "(stage, launch: forward's parts in the one-graph step):\n");
            printf("%6s %3s %9s %9s %9s %9s %9s %9s %9s %9s\n", "batch", "K", "host", "draft", "forward", "accept",
                   "encode", "other", "stage", "launch");
            for (int i = 0; i < n_rows; i++) {
                const flint_host_time *h = &rows[i].host;
                const double n = h->steps > 0 ? 1e-3 * (double)h->steps : 1;
                printf("%6d %3d %9.1f %9.1f %9.1f %9.1f %9.1f %9.1f %9.1f %9.1f\n", rows[i].b, rows[i].k,
                       h->host_ms / n, h->draft_ms / n, h->forward_ms / n, h->accept_ms / n, h->encode_ms / n,
                       (h->host_ms - h->draft_ms - h->forward_ms - h->accept_ms - h->encode_ms) / n, h->stage_ms / n,
                       h->launch_ms / n);
            }
        }
    }
    root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "command", "bench");
    cJSON_AddStringToObject(root, "model", o->model_dir);
    cJSON_AddStringToObject(root, "drafter", base.drafter_dir);
    cJSON *cfg = cJSON_AddObjectToObject(root, "config");
    cJSON_AddNumberToObject(cfg, "context", o->context);
    if (o->tokens > 0) { /* --tokens: the window by tokens */
        cJSON_AddNumberToObject(cfg, "warmup_tokens", o->warmup);
        cJSON_AddNumberToObject(cfg, "timed_tokens", o->tokens);
    } else {
        cJSON_AddNumberToObject(cfg, "warmup_steps", o->warmup);
        cJSON_AddNumberToObject(cfg, "timed_steps", o->steps);
    }
    cJSON_AddNumberToObject(cfg, "rounds", rounds);
    cJSON_AddBoolToObject(cfg, "vary_prompts", o->vary_prompts);
    cJSON_AddBoolToObject(cfg, "keep_engines", o->keep_engines);
    cJSON_AddStringToObject(cfg, "draft_sample_method", base.draft_greedy ? "greedy" : "probabilistic");
    cJSON_AddNumberToObject(cfg, "temperature", o->sampling.temperature);
    cJSON_AddNumberToObject(cfg, "seed", (double)o->sampling.seed);
    cJSON_AddStringToObject(cfg, "acceptance", synthetic ? "synthetic" : "real");
    if (o->synthetic_al > 0) cJSON_AddNumberToObject(cfg, "synthetic_acceptance_length", o->synthetic_al);
    cJSON_AddStringToObject(cfg, "prompts_from", o->dataset);
    cJSON_AddNumberToObject(cfg, "threads", o->threads);
    cJSON *jr = cJSON_AddArrayToObject(root, "rows");
    for (int i = 0; i < n_rows; i++) {
        const row *r = &rows[i];
        cJSON *x = cJSON_CreateObject();
        cJSON_AddNumberToObject(x, "batch", r->b);
        cJSON_AddNumberToObject(x, "k", r->k);
        cJSON_AddNumberToObject(x, "timed_steps", r->n_ms); /* over all rounds */
        if (synthetic && r->k > 0) {
            cJSON *rr = cJSON_AddArrayToObject(x, "synthetic_conditional_rates");
            for (int j = 0; j < r->k; j++) cJSON_AddItemToArray(rr, cJSON_CreateNumber(r->rates[j]));
            cJSON_AddNumberToObject(x, "expected_acceptance_length", r->expected_al);
        }
        cJSON_AddItemToObject(x, "measured_acceptance_length",
                              isfinite(r->measured_al) ? cJSON_CreateNumber(r->measured_al) : cJSON_CreateNull());
        cJSON_AddNumberToObject(x, "median_step_ms", r->median_ms);
        cJSON_AddNumberToObject(x, "mean_step_ms", r->mean_ms);
        cJSON_AddNumberToObject(x, "p90_step_ms", r->p90_ms);
        cJSON_AddNumberToObject(x, "tokens_per_step", r->tokens_per_step);
        if (r->host.steps > 0) {
            cJSON_AddNumberToObject(x, "host_us_per_step", 1e3 * r->host.host_ms / (double)r->host.steps);
            cJSON_AddNumberToObject(x, "host_us_median", r->host_median_us);
        }
        if (o->profile && r->prof.steps > 0) {
            const flint_step_profile *p = &r->prof;
            const double n = (double)p->steps;
            cJSON *jp = cJSON_AddObjectToObject(x, "profile_ms_per_step");
            cJSON_AddNumberToObject(jp, "draft", p->draft_ms / n);
            cJSON_AddNumberToObject(jp, "verify", p->verify_ms / n);
            cJSON_AddNumberToObject(jp, "accept", p->accept_ms / n);
            cJSON_AddNumberToObject(jp, "encode", p->encode_ms / n);
            cJSON_AddNumberToObject(jp, "prefill", p->prefill_ms / n);
            cJSON_AddNumberToObject(jp, "host", p->host_ms / n);
        }
        cJSON_AddNumberToObject(x, "tokens_per_s_per_user", r->tps_user);
        cJSON_AddNumberToObject(x, "tokens_per_s_total", r->tps_total);
        cJSON_AddItemToObject(x, "speedup_vs_no_speculation",
                              isfinite(r->speedup) ? cJSON_CreateNumber(r->speedup) : cJSON_CreateNull());
        cJSON_AddItemToArray(jr, x);
    }
    if (o->output) {
        if (flint_evals_write_json(o->output, root, err)) goto done;
        path_svg = flint_evals_sibling(o->output, ".svg");
        /* per-user vs total tokens/s: one curve per K through the batch sizes */
        flint_svg_series ser[FLINT_BENCH_MAX_GRID + 1];
        double xs[FLINT_BENCH_MAX_GRID + 1][FLINT_BENCH_MAX_GRID], ys[FLINT_BENCH_MAX_GRID + 1][FLINT_BENCH_MAX_GRID];
        char names[FLINT_BENCH_MAX_GRID + 1][64], lab[FLINT_BENCH_MAX_GRID + 1][FLINT_BENCH_MAX_GRID][16];
        const char *labp[FLINT_BENCH_MAX_GRID + 1][FLINT_BENCH_MAX_GRID];
        for (int ki = 0; ki < nk; ki++) {
            int m = 0, K = rows[ki * o->n_batch].k;
            for (int bi = 0; bi < o->n_batch; bi++) {
                const row *r = &rows[ki * o->n_batch + bi];
                xs[ki][m] = r->tps_user;
                ys[ki][m] = r->tps_total;
                snprintf(lab[ki][m], sizeof lab[0][0], "b=%d", r->b);
                labp[ki][m] = lab[ki][m];
                m++;
            }
            if (K == 0) snprintf(names[ki], sizeof names[0], "no speculation");
            else snprintf(names[ki], sizeof names[0], "K = %d", K);
            ser[ki] = (flint_svg_series){.name = names[ki], .n = m, .x = xs[ki], .y = ys[ki], .color = ki,
                                         .labels = labp[ki]};
        }
        char title[256];
        snprintf(title, sizeof title, "Throughput vs interactivity, context %d, %s acceptance", o->context,
                 synthetic ? "synthetic" : "real");
        flint_svg_plot pl = {.title = title, .xlabel = "tokens/s per user", .ylabel = "tokens/s total", .lines = 1};
        if (flint_svg_write(path_svg, &pl, ser, nk, err)) goto done;
        flint_log_info("bench: wrote %s and %s", o->output, path_svg);
    }
    rc = 0;
done:
    cJSON_Delete(root);
    flint_engine_close(e);
    for (int i = 0; i < nk; i++) flint_engine_close(kept[i]);
    free(kept);
    free(pool);
    free(owned);
    free(path_svg);
    for (int i = 0; rows && i < nk * o->n_batch; i++) free(rows[i].ms), free(rows[i].host_ms);
    free(rows);
    free(g_open);
    free(g_end);
    free(g_step);
    return rc;
}
