/* One engine step (see engine.h and engine.c's banner): retire, admit, prefill chunks, then the
 * speculative step for every running session in one drafter call and one target forward. */
#include <string.h>

#include "core/clock.h"
#include "core/log.h"
#include "verifier/engine_internal.h"

/* Profile mark (engine option profile): the time since the last mark goes to *slot, after the
 * GPU has finished what was launched (device phases); host phases call it before a device phase. */
static void mark(flint_engine *e, double *slot) {
    if (!e->o.profile) return;
    flint_engine_dev_wait(e);
    const double t = flint_clock_ms();
    *slot += t - e->prof_t;
    e->prof_t = t;
}

/* Host time (ms) since a (flint_clock_ms, flint_clock_waited_ms) pair: wall time less waits. */
static double host_since(double t0, double w0) {
    return (flint_clock_ms() - t0) - (flint_clock_waited_ms() - w0);
}

/* The drafter's view of the taps a forward left: on the GPU (dev_taps) or in e->taps. */
static flint_drafter_ctx_batch ctx_batch(flint_engine *e, int n_rows, const int32_t *src_rows) {
    flint_drafter_ctx_batch cb = {.n_rows = n_rows, .pos = e->row_pos, .row_seq = e->row_seq,
                                  .n_seqs = e->o.max_seqs, .block_tables = e->tables};
    if (e->dev_taps) {
        flint_target_device_view v;
        flint_target_get_device_view(e->tgt, &v);
        cb.taps_device = v.taps;
        cb.src_rows = src_rows;
    } else {
        cb.taps = e->taps;
    }
    return cb;
}

/* Sample the first output token after a completed prefill (SAMPLE stream at its position). */
static int start_session(flint_engine *e, int sid, float *logits, flint_err *err) {
    session *s = &e->ss[sid];
    flint_engine_grammar_mask_rows(e, s, logits, NULL, 0);
    int32_t t = flint_sampler_sample(&s->p.sampling, logits, e->V, s->n_prompt, &e->sc);
    flint_engine_logprobs(e, s, 0, logits, t);
    flint_engine_grammar_commit(e, s, &t, 1);
    if (flint_engine_emit(e, s, &t, 1, err) < 0) return -1;
    s->anchor = t;
    s->pos = s->n_prompt;
    s->st = S_RUNNING;
    flint_engine_register_blocks(e, s, s->n_prompt); /* concurrent sessions may share the prompt */
    return 0;
}

/* Prompt rows of prefilling sessions, oldest first, at most prefill_chunk rows in one forward. */
static int prefill(flint_engine *e, flint_err *err) {
    int R = 0, n_logit = 0, budget = e->o.prefill_chunk;
    int done_sid[64], n_done = 0; /* sessions whose prompt completes in this forward */
    unsigned char in_batch[4096] = {0};
    for (;;) {
        int best = -1;
        for (int i = 0; i < e->o.max_seqs; i++) {
            session *s = &e->ss[i];
            if (s->st == S_PREFILL && !s->cancelled && s->n_prefilled < s->n_prompt && !in_batch[i] &&
                (best < 0 || s->order < e->ss[best].order))
                best = i;
        }
        if (best < 0 || budget == 0 || n_done == 64) break;
        session *s = &e->ss[best];
        int n = s->n_prompt - s->n_prefilled;
        if (n > budget) n = budget;
        for (int i = 0; i < n; i++) {
            e->row_tok[R + i] = s->tokens[s->n_prefilled + i];
            e->row_pos[R + i] = s->n_prefilled + i;
            e->row_seq[R + i] = best;
        }
        s->n_prefilled += n;
        budget -= n;
        R += n;
        in_batch[best] = 1;
        if (s->n_prefilled == s->n_prompt) {
            e->logit_rows[n_logit++] = R - 1;
            done_sid[n_done++] = best;
        }
    }
    if (R == 0) return 0;
    flint_target_batch b = {.n_rows = R, .tokens = e->row_tok, .pos = e->row_pos, .row_seq = e->row_seq,
                            .n_seqs = e->o.max_seqs, .block_tables = e->tables, .n_logit_rows = n_logit,
                            .logit_rows = e->logit_rows, .logits = e->logits, .n_taps = e->dft ? e->n_taps : 0,
                            .tap_layers = e->tap_layers, .taps = e->dev_taps ? NULL : e->taps,
                            .taps_on_device = e->dev_taps};
    mark(e, &e->prof.host_ms);
    if (flint_engine_forward(e, &b, err)) return -1;
    if (e->dft) {
        flint_drafter_ctx_batch cb = ctx_batch(e, R, NULL);
        if (flint_drafter_encode(e->dft, &cb, err)) return -1;
    }
    mark(e, &e->prof.prefill_ms);
    for (int i = 0; i < n_done; i++) {
        if (start_session(e, done_sid[i], e->logits + (size_t)i * e->V, err)) return -1;
        flint_engine_push_event(e, done_sid[i]);
    }
    return 0;
}

/* One drafting step of a request into statistics: k drafts, a accepted, kept emitted (the host
 * runs this twice per drafting request per step: a few counters, not a whole-struct add). */
static void stats_record(flint_spec_stats *x, int k, int a, int kept) {
    x->steps++;
    x->draft_tokens += k;
    x->accepted += a;
    x->emitted += kept;
    x->hist[a]++;
    for (int j = 0; j < a; j++) x->accepted_per_pos[j]++;
    for (int j = 0; j < k; j++) x->drafted_per_pos[j]++;
}

/* Draft length for a running session this step: the engine's K, capped by the request, by the
 * tokens it may still emit (a step emits k + 1) and by the context. */
static int draft_len(const flint_engine *e, const session *s, int k_step) {
    if (!e->dft || !s->p.speculative) return 0;
    int k = k_step;
    if (s->p.max_draft && s->p.max_draft < k) k = s->p.max_draft;
    int left = s->p.max_tokens - (s->n_tokens - s->n_prompt);
    if (k > left - 1) k = left - 1;
    if (k > e->max_len - 2 - s->pos) k = e->max_len - 2 - s->pos;
    return k > 0 ? k : 0;
}

/* Benchmark mode: the accepted count follows the configured per-position rates; the emitted
 * token after the accepted drafts is the target's argmax at that row when the logits are on the
 * host, else the decision the GPU took at or before that row (any valid token would do: the work
 * of the step is the real one, only its outcome is forced). */
static int synthetic_accept(flint_engine *e, const session *s, int k, const int32_t *drafts, const float *lg,
                            int32_t *out, int real_acc) {
    int a = 0;
    while (a < k && flint_rng_uniform(s->p.sampling.seed, s->pos + 1 + a, FLINT_RNG_ACCEPT, 1) < e->o.synthetic_rates[a])
        a++;
    const int32_t last = lg ? flint_argmax(lg + (size_t)a * e->V, e->V) : out[a < real_acc ? a : real_acc];
    for (int j = 0; j < a; j++) out[j] = drafts[j];
    out[a] = last;
    return a;
}

static int spec_step(flint_engine *e, const unsigned char *fresh, flint_err *err) {
    int n_d = 0, R = 0, k_step = e->K, n_run = 0;
    const double t_step = flint_clock_ms();
    e->dyn_probe = 0, e->dyn_deep = 0, e->dyn_prune = 0;
    if (e->dft && e->o.dynamic_draft) { /* the step's draft length from the cost model (schedule.c) */
        for (int i = 0; i < e->o.max_seqs; i++)
            n_run += e->ss[i].st == S_RUNNING && !e->ss[i].cancelled && !fresh[i] && !flint_engine_pinned(e, &e->ss[i]);
        if (n_run > 0) k_step = flint_engine_pick_k(e, n_run);
    }
    /* a probe: the unpinned requests n (in step order) with (n + dyn_probe_next) % n_run below
     * FLINT_DYN_PROBE_REQS draft (which ones depends on their places, never on their drafts) */
    const int probe = e->dyn_probe && k_step > 0, deep = e->dyn_deep && k_step > 0 && k_step < e->K;
    int n_unpinned = 0;
    for (int i = 0; i < e->o.max_seqs; i++) {
        session *s = &e->ss[i];
        s->k = 0;
        s->di = -1;
        if (s->st != S_RUNNING || s->cancelled || fresh[i]) continue;
        R++; /* the anchor's row */
        const int pinned = flint_engine_pinned(e, s);
        int k_s = pinned ? e->K : k_step;
        if ((probe || deep) && !pinned) { /* a deep step's probe requests draft K, the others k_step */
            const int in = (n_unpinned++ + e->dyn_probe_next) % n_run < FLINT_DYN_PROBE_REQS;
            if (probe && !in) k_s = 0;
            if (deep && in) k_s = e->K;
        }
        s->k = draft_len(e, s, k_s);
        if (s->k > 0) {
            s->di = n_d;
            e->dreqs[n_d] = (flint_drafter_req){.anchor = s->anchor, .pos = s->pos, .seq = i, .n_draft = s->k,
                                                .temperature = s->p.sampling.temperature,
                                                .greedy = e->o.draft_greedy, .seed = s->p.sampling.seed};
            e->dreq_sid[n_d++] = i;
        }
    }
    /* Decisions on the GPU when every session of the step can do without logits on the host
     * (step_cuda.c): no grammar mask, no logprobs. */
    int use_dev = e->dev != NULL;
    for (int i = 0; i < e->o.max_seqs && use_dev; i++) {
        const session *s = &e->ss[i];
        if (s->st == S_RUNNING && !s->cancelled && !fresh[i] && (s->grammar || s->p.logprobs || s->p.top_logprobs))
            use_dev = 0;
    }
    /* On the GPU path without confidence pruning the drafts stay on the device: the verify rows'
     * tokens are built there (step_cuda.c) and come back with the decisions, so the step waits
     * for the GPU once. The scheduler needs the confidences on the host first; a dynamic step
     * prunes only where verify rows cost (schedule.c), else it verifies its k_step drafts whole. */
    const int prune = e->o.dynamic_draft && e->dyn_prune;
    const int dev_drafts = use_dev && n_d > 0 && !prune;
    /* such a step runs as one graph (step_cuda.c): draft, verify, decisions and encode */
    const int one_graph = dev_drafts && flint_engine_dev_step_ok(e);
    if (n_d > 0 && !one_graph) {
        flint_drafter_out out = {.tokens = dev_drafts ? NULL : e->drafts,
                                 .q = e->o.draft_greedy || use_dev ? NULL : e->q,
                                 .confidence = dev_drafts ? NULL : e->conf, .q_on_device = use_dev && !e->o.draft_greedy,
                                 .tokens_on_device = dev_drafts};
        mark(e, &e->prof.host_ms);
        const double t0 = flint_clock_ms(), w0 = flint_clock_waited_ms();
        if (flint_drafter_draft(e->dft, n_d, e->dreqs, e->tables, e->o.max_seqs, &out, err)) return -1;
        mark(e, &e->prof.draft_ms);
        if (prune) {
            flint_engine_schedule_drafts(e, R, n_d);
            for (int d = 0; d < n_d; d++) e->ss[e->dreq_sid[d]].k = e->dlen[d];
        }
        e->host.draft_ms += host_since(t0, w0);
    }
    /* verify rows: [anchor, drafts] per running session, in e->order; on the GPU path the sessions
     * without drafts come first (rows 0..n0-1, sampled in one launch) */
    R = 0;
    int n = 0, n0 = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < e->o.max_seqs; i++) {
            session *s = &e->ss[i];
            if (s->st != S_RUNNING || s->cancelled || fresh[i]) continue;
            if (use_dev && (pass == 0) != (s->k == 0)) continue;
            if (!use_dev && pass == 1) continue;
            e->order[n++] = i;
            if (use_dev && pass == 0) n0++;
            e->row0[i] = R;
            e->row_tok[R] = s->anchor;
            e->row_pos[R] = s->pos;
            e->row_seq[R] = i;
            if (dev_drafts) e->row_src[R] = -1 - s->anchor;
            R++;
            if (s->k > 0) {
                const int32_t *x = e->drafts + (size_t)s->di * e->dmax;
                for (int j = 0; j < s->k; j++, R++) {
                    /* with dev_drafts a placeholder (a valid id) until the GPU writes the draft */
                    e->row_tok[R] = dev_drafts ? s->anchor : x[j];
                    if (dev_drafts) e->row_src[R] = s->di * e->dmax + j;
                    e->row_pos[R] = s->pos + 1 + j;
                    e->row_seq[R] = i;
                }
            }
        }
    if (R == 0) return 0;
    double t0 = flint_clock_ms(), w0 = flint_clock_waited_ms();
    if (one_graph) {
        e->n_forwards++;
        if (flint_engine_dev_step(e, e->order, n0, n, n_d, R, e->dev_out, e->dev_acc, err)) return -1;
        e->host.forward_ms += host_since(t0, w0);
        t0 = flint_clock_ms(), w0 = flint_clock_waited_ms();
    }
    if (!one_graph) { /* the verify forward on its own (the one-graph step ran it above) */
        for (int r = 0; r < R; r++) e->logit_rows[r] = r;
        const int32_t *dev_tok = NULL;
        if (use_dev && flint_engine_dev_stage(e, e->order, n0, n_d, R, dev_drafts, &dev_tok, err)) return -1;
        flint_target_batch b = {.n_rows = R, .tokens = e->row_tok, .pos = e->row_pos, .row_seq = e->row_seq,
                                .n_seqs = e->o.max_seqs, .block_tables = e->tables, .n_logit_rows = R,
                                .logit_rows = e->logit_rows, .logits = use_dev ? NULL : e->logits,
                                .n_taps = e->dft ? e->n_taps : 0, .tap_layers = e->tap_layers,
                                .taps = e->dev_taps ? NULL : e->taps, .logits_on_device = use_dev,
                                .taps_on_device = e->dev_taps, .tokens_device = dev_tok};
        mark(e, &e->prof.host_ms);
        if (flint_engine_forward(e, &b, err)) return -1;
        mark(e, &e->prof.verify_ms);
        e->host.forward_ms += host_since(t0, w0);
        t0 = flint_clock_ms(), w0 = flint_clock_waited_ms();
        if (use_dev && flint_engine_dev_accept(e, e->order, n0, n, n_d, e->dev_out, e->dev_acc, err)) return -1;
        mark(e, &e->prof.accept_ms); /* the host path decides in the loop below (host time) */
    }

    /* accept, emit, and gather the context rows to commit (in row order: the compaction of the
     * committed rows below only ever moves rows down) */
    int C = 0;
    for (int oi = 0; oi < n; oi++) {
        const int i = e->order[oi];
        session *s = &e->ss[i];
        int r0 = e->row0[i], k = s->k, acc;
        int32_t out[FLINT_MAX_DRAFT + 1];
        if (use_dev) {
            acc = e->dev_acc[oi];
            memcpy(out, e->dev_out + (size_t)oi * (FLINT_MAX_DRAFT + 1), sizeof(int32_t) * (size_t)(acc + 1));
            if (e->o.synthetic && k > 0) acc = synthetic_accept(e, s, k, e->row_tok + r0 + 1, NULL, out, acc);
        } else {
            float *lg = e->logits + (size_t)r0 * e->V;
            flint_engine_grammar_mask_rows(e, s, lg, e->row_tok + r0 + 1, k);
            if (k == 0) {
                out[0] = flint_sampler_sample(&s->p.sampling, lg, e->V, s->pos + 1, &e->sc);
                acc = 0;
            } else {
                const float *q = e->o.draft_greedy ? NULL : e->q + (size_t)s->di * e->dmax * e->V;
                acc = flint_accept_draft(&s->p.sampling, k, e->row_tok + r0 + 1, q, lg, e->V, s->pos + 1, &e->sc, out);
                if (e->o.synthetic) acc = synthetic_accept(e, s, k, e->row_tok + r0 + 1, lg, out, acc);
            }
            for (int j = 0; j <= acc; j++) flint_engine_logprobs(e, s, j, lg + (size_t)j * e->V, out[j]);
        }
        int kept = flint_engine_emit(e, s, out, acc + 1, err);
        if (kept < 0) return -1;
        flint_engine_grammar_commit(e, s, out, kept);
        /* every request of a drafting step; of a probe, the requests that drafted */
        if (e->o.dynamic_draft && k_step > 0 && s->p.speculative && (!probe || k > 0))
            flint_engine_observe_acceptance(e, s->di >= 0 ? e->dreqs[s->di].n_draft : 0, k, acc);
        if (k > 0) {
            const int a = kept < acc ? kept : acc; /* drafts accepted up to a stop condition */
            stats_record(&s->stats, k, a, kept);
            stats_record(&e->pooled, k, a, kept);
        }
        if (s->finish == FLINT_FINISH_NONE) {
            /* commit: rows [anchor, x_1..x_acc] become context (the one-graph step has encoded
             * them already); the emitted token is the next anchor */
            if (e->dft && !one_graph)
                for (int j = 0; j <= acc; j++) {
                    int src = r0 + j;
                    if (e->dev_taps) e->tap_src[C] = src;
                    else if (C != src)
                        memmove(e->taps + (size_t)C * e->n_taps * e->H, e->taps + (size_t)src * e->n_taps * e->H,
                                sizeof(float) * e->n_taps * e->H);
                    e->row_pos[C] = e->row_pos[src];
                    e->row_seq[C] = i;
                    C++;
                }
            s->pos += acc + 1;
            s->anchor = out[acc];
        }
        flint_engine_push_event(e, i);
    }
    e->host.accept_ms += host_since(t0, w0);
    if (e->dft && e->o.dynamic_draft && k_step > 0 && n_d > 0) e->dyn_obs_steps++;
    if (probe || deep) e->dyn_probe_next = (e->dyn_probe_next + FLINT_DYN_PROBE_REQS) % (n_run > 0 ? n_run : 1);
    if (probe) e->dyn_probe_steps++;
    if (deep) e->dyn_deep_steps++;
    if (e->dft && C > 0) {
        flint_drafter_ctx_batch cb = ctx_batch(e, C, e->tap_src);
        /* a step that drafted nothing lets the GPU drafter hold the rows (one gather now, their
         * K/V with the next draft's): the host goes on to the next forward sooner */
        cb.defer = e->o.dynamic_draft && n_d == 0;
        mark(e, &e->prof.host_ms);
        t0 = flint_clock_ms(), w0 = flint_clock_waited_ms();
        if (flint_drafter_encode(e->dft, &cb, err)) return -1;
        mark(e, &e->prof.encode_ms);
        e->host.encode_ms += host_since(t0, w0);
    }
    /* the step's wall time (its encode is still in flight: the next step's first wait pays it,
     * and steps of one kind follow each other, so its kind's offset absorbs it) */
    /* measured models only (given ones stay as given); not a step the scheduler chose K = 0 for
     * while pinned sessions drafted, nor a probe or a deep step: their times are neither choice's
     * (a probe's sets how often probes come: schedule.c) */
    if (e->dft && e->o.dynamic_draft && e->dyn_n && !e->o.profile)
        flint_log_debug("engine: step %lld: k %d, %s%s%.3f ms, modelled %.3f (kind %d)", (long long)e->dyn_steps,
                        k_step, probe ? "probe, " : "", deep ? "deep, " : "", flint_clock_ms() - t_step,
                        e->dyn_pred_ms, e->dyn_pred_kind);
    if (e->dft && e->o.dynamic_draft && e->dyn_n && !e->o.profile) {
        if (probe) flint_engine_observe_probe_ms(e, flint_clock_ms() - t_step);
        else if (!deep && (k_step > 0 || n_d == 0)) flint_engine_observe_step_ms(e, flint_clock_ms() - t_step);
    }
    return 0;
}

int flint_engine_step(flint_engine *e, const flint_step_event **events, int *n_events, flint_err *err) {
    const double t0 = flint_clock_ms(), w0 = flint_clock_waited_ms();
    const int64_t f0 = e->n_forwards;
    e->n_events = 0;
    if (e->o.profile) {
        flint_engine_dev_wait(e);
        e->prof_t = flint_clock_ms();
        e->prof.steps++;
    }
    unsigned char fresh[4096];
    for (int i = 0; i < e->o.max_seqs; i++) {
        session *s = &e->ss[i];
        fresh[i] = 0;
        s->n_emit = 0;
        if (s->st == S_DONE) {
            flint_engine_session_free(e, i);
            continue;
        }
        if (s->st != S_FREE && s->cancelled) {
            s->finish = FLINT_FINISH_CANCELLED;
            flint_engine_push_event(e, i);
            flint_engine_session_free(e, i);
        }
    }
    flint_engine_admit(e);
    if (prefill(e, err)) return -1;
    for (int i = 0; i < e->n_events; i++) fresh[e->events[i].sid] = e->ss[e->events[i].sid].st == S_RUNNING;
    if (spec_step(e, fresh, err)) return -1;
    for (int i = 0; i < e->n_events; i++) {
        session *s = &e->ss[e->events[i].sid];
        if (s->finish != FLINT_FINISH_NONE && s->st != S_FREE) s->st = S_DONE;
    }
    mark(e, &e->prof.host_ms);
    *events = e->events;
    *n_events = e->n_events;
    if (e->n_forwards != f0) { /* one clock reading for both: host <= wall */
        const double wall = flint_clock_ms() - t0;
        e->host.steps++;
        e->host.wall_ms += wall;
        e->host.host_ms += wall - (flint_clock_waited_ms() - w0);
    }
    return 0;
}
