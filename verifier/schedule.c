/* Confidence-scheduled draft lengths: DSpark's hardware-aware prefix scheduler
 * (research/dspark.md 3.4, the paper's Algorithm 1). Each request has drafted up to K tokens with
 * confidences c_j; the survival a_j = c_1 ... c_j estimates that the first j drafts are all
 * accepted. Starting from no drafts (B = one verify row per running request, expected emitted
 * tokens tau = one per request), candidates (request, j) are admitted in descending survival
 * while tau / T(B) (expected tokens per ms of verify) improves, stopping at the first candidate
 * that does not improve it. That early stop keeps the decision to verify x_j independent of x_j
 * itself (the paper's Appendix A shows a global search would bias the output), so acceptance stays
 * lossless; survival is monotone in j, so every request keeps a prefix of its drafts.
 *
 * T(B): verify time of a batch of B rows, measured on the target at open (at the CUDA forward's
 * row buckets 1, 2, 4, 8, 12, 16, 24, ... up to max_rows, median of 3 runs each (one for runs over
 * 20 ms), logits and taps where a step leaves them; linear between the points, made monotone as
 * vLLM's cost tables are),
 * or fixed + per_row x B given in the options so that runs are reproducible. Raw confidences
 * are used (no per-position temperature calibration yet). On a CPU the verify cost grows with every
 * row, so the scheduler rightly keeps few drafts; on a GPU it is flat up to dozens of rows.
 *
 * Before that, how many the step drafts at all (flint_engine_pick_k): the scheduler above only
 * weighs verify rows, but drafting costs a pass of its own (encode + draft, D(n, k), measured at
 * open at k = K and k = 1), and at large batches the verify of extra rows turns compute-bound. The
 * step drafts the k <= K (then pruned per request as above) that maximizes n E(k) / (T(n r(k)) +
 * D(n, k)) when that beats n / T(n), with E(k) the tokens a request emits and r(k) the rows it
 * verifies drafting k: per draft position, decayed shares of the requests that could draft it
 * which verified it and accepted it in earlier drafting steps (so the confidence pruning's effect
 * is in them: survival counted over the verified positions only would be biased upwards by that
 * pruning). Else K_step = 0, with a probe now and then to keep the estimates current: a step
 * where only FLINT_DYN_PROBE_REQS requests draft K, in turn (a whole batch drafting K = 7 cost the
 * embedded pair's batch 64 a step of ~1.2 ms, 4% of a 60-step window by itself; the estimates are
 * per request). The modelled times are offset by the real less modelled step time seen for each
 * kind of step: plain, drafting with whole drafts verified, drafting with pruning (the step also
 * encodes, decides, emits, and a pruning step waits for its drafts on the host; session 20: an
 * offset, unlike the ratio used before, carries from one draft length to another, since those
 * costs hardly depend on it). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/log.h"
#include "verifier/engine_internal.h"

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Verify batches of B rows of one scratch sequence at positions 0..B-1, written into blocks that
 * no session holds yet (the engine is just open), with logits for every row and the drafter's
 * taps, as a real verify step computes them. */
int flint_engine_measure_verify_cost(flint_engine *e, flint_err *err) {
    /* up to the rows a step may verify, as far as the KV pool and the context allow (past the last
     * point the cost grows by the last segment's slope) */
    int R = e->max_rows;
    if (R > flint_target_kv_blocks(e->tgt) * e->bs) R = flint_target_kv_blocks(e->tgt) * e->bs;
    if (R > e->max_len) R = e->max_len;
    if (R < 2)
        return flint_err_set(err, FLINT_ERR_INVALID, "dynamic draft: cannot measure verify batches in this KV pool; "
                             "give the cost model (dyn_fixed_ms, dyn_row_ms)");
    const int nb = (R + e->bs - 1) / e->bs;
    int32_t *table = flint_xmalloc(sizeof(int32_t) * (size_t)nb);
    for (int i = 0; i < nb; i++) table[i] = i;
    const int32_t *tables[1] = {table};
    /* the CUDA forward's row buckets (target/forward_cuda.cu), where the cost steps */
    static const int pts[] = {1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512};
    double xs[16], ys[16];
    int n = 0;
    for (int pi = 0; pi < 16; pi++) {
        const int B = pts[pi] < R ? pts[pi] : R;
        if (pi > 0 && B <= xs[n - 1]) break;
        for (int r = 0; r < B; r++) {
            e->row_tok[r] = (int32_t)((r * 7919) % e->V);
            e->row_pos[r] = r;
            e->row_seq[r] = 0;
            e->logit_rows[r] = r;
        }
        /* as a step's verify runs: logits and taps on the GPU when the step keeps them there */
        flint_target_batch b = {.n_rows = B, .tokens = e->row_tok, .pos = e->row_pos, .row_seq = e->row_seq,
                                .n_seqs = 1, .block_tables = tables, .n_logit_rows = B, .logit_rows = e->logit_rows,
                                .logits = e->dev ? NULL : e->logits, .n_taps = e->n_taps, .tap_layers = e->tap_layers,
                                .taps = e->dev_taps ? NULL : e->taps, .logits_on_device = e->dev != NULL,
                                .taps_on_device = e->dev_taps};
        /* the first run warms up; then the median of 3, or one run where a run is long enough
         * for noise not to matter (the CPU's large batches: start-up stays short) */
        double t[3];
        int reps = 3;
        for (int k = 0; k <= reps; k++) {
            double t0 = flint_clock_ms();
            if (flint_engine_forward(e, &b, err)) {
                free(table);
                return -1;
            }
            flint_engine_dev_wait(e);
            if (k) t[k - 1] = flint_clock_ms() - t0;
            else if (flint_clock_ms() - t0 > 20.0) reps = 1;
        }
        qsort(t, (size_t)reps, sizeof(double), cmp_double);
        xs[n] = B, ys[n] = t[reps / 2];
        n++;
    }
    free(table);
    char msg[512];
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (i && ys[i] < ys[i - 1]) ys[i] = ys[i - 1]; /* monotone: noise must not make more rows cheaper */
        e->dyn_b[i] = xs[i], e->dyn_t[i] = ys[i];
        if (m < (int)sizeof msg - 40) m += snprintf(msg + m, sizeof msg - m, "%s%.0f: %.3f", i ? ", " : "", xs[i], ys[i]);
    }
    e->dyn_n = n;
    flint_log_info("engine: dynamic draft lengths: verify ms by rows {%s}", msg);
    return 0;
}

/* Drafting passes of n requests (1, 4, 16, 64 .. max_seqs) at position 0 of a scratch sequence,
 * each with the encode of n rows of taps before it (as a step encodes the rows it committed):
 * what a step pays for drafting, on top of its verify. Medians of 3 after a warm-up. */
int flint_engine_measure_draft_cost(flint_engine *e, flint_err *err) {
    /* up to max_seqs requests, as far as the KV pool and the context allow (beyond: the last
     * segment's slope) */
    int S = e->o.max_seqs;
    if (S > (flint_target_kv_blocks(e->tgt) - 1) * e->bs) S = (flint_target_kv_blocks(e->tgt) - 1) * e->bs;
    if (S > e->max_len - 1) S = e->max_len - 1;
    if (S > e->max_rows) S = e->max_rows;
    if (S < 1)
        return flint_err_set(err, FLINT_ERR_INVALID, "dynamic draft: cannot measure drafts in this KV pool; give the "
                             "cost model (dyn_fixed_ms, dyn_row_ms, dyn_draft_ms)");
    const int nb = (S + e->bs - 1) / e->bs + 1;
    int32_t *table = flint_xmalloc(sizeof(int32_t) * (size_t)nb);
    for (int i = 0; i < nb; i++) table[i] = i;
    const int32_t *tables[1] = {table};
    int n_pts = 0;
    for (int n = 1; n_pts < 8; n = n * 4 > S ? (n == S ? S + 1 : S) : n * 4) {
        if (n > S) break;
        double ms[2]; /* K drafts, then one (a step may draft fewer than K: flint_engine_pick_k) */
        for (int pass = 0; pass < 2; pass++) {
            for (int r = 0; r < n; r++) {
                e->row_pos[r] = r;
                e->row_seq[r] = 0;
                e->dreqs[r] = (flint_drafter_req){.anchor = (int32_t)((r * 7919) % e->V), .pos = 0, .seq = 0,
                                                  .n_draft = pass ? 1 : e->dmax, .temperature = 0.0f, .greedy = 1,
                                                  .seed = 0};
            }
            flint_drafter_ctx_batch cb = {.n_rows = n, .pos = e->row_pos, .row_seq = e->row_seq, .n_seqs = 1,
                                          .block_tables = tables};
            flint_target_device_view v;
            flint_target_get_device_view(e->tgt, &v);
            if (e->dev_taps) cb.taps_device = v.taps; /* the last verify measurement's rows */
            else cb.taps = e->taps;
            flint_drafter_out out = {.tokens = e->drafts, .confidence = e->conf};
            double t[3];
            int reps = 3;
            for (int k = 0; k <= reps; k++) {
                double t0 = flint_clock_ms();
                if (flint_drafter_encode(e->dft, &cb, err) ||
                    flint_drafter_draft(e->dft, n, e->dreqs, tables, 1, &out, err)) {
                    free(table);
                    return -1;
                }
                flint_engine_dev_wait(e);
                if (k) t[k - 1] = flint_clock_ms() - t0;
                else if (flint_clock_ms() - t0 > 20.0) reps = 1; /* as for the verify cost */
            }
            qsort(t, (size_t)reps, sizeof(double), cmp_double);
            ms[pass] = t[reps / 2];
        }
        e->dyn_db[n_pts] = n, e->dyn_dt[n_pts] = ms[0], e->dyn_dt1[n_pts] = ms[1] < ms[0] ? ms[1] : ms[0];
        n_pts++;
    }
    free(table);
    char msg[384];
    int m = 0;
    for (int i = 0; i < n_pts; i++) {
        if (i && e->dyn_dt[i] < e->dyn_dt[i - 1]) e->dyn_dt[i] = e->dyn_dt[i - 1];
        if (i && e->dyn_dt1[i] < e->dyn_dt1[i - 1]) e->dyn_dt1[i] = e->dyn_dt1[i - 1];
        if (m < (int)sizeof msg - 40)
            m += snprintf(msg + m, sizeof msg - m, "%s%.0f: %.3f (%.3f)", i ? ", " : "", e->dyn_db[i], e->dyn_dt[i],
                          e->dyn_dt1[i]);
    }
    e->dyn_dn = n_pts;
    flint_log_info("engine: dynamic draft lengths: encode + draft ms by requests at K (one draft) {%s}", msg);
    return 0;
}

/* Piecewise linear through measured points (x ascending), the last segment's slope past the end. */
static double interp(const double *x, const double *y, int n, double at) {
    if (n == 1 || at <= x[0]) return y[0];
    int i = 1;
    while (i < n - 1 && at > x[i]) i++;
    double slope = (y[i] - y[i - 1]) / (x[i] - x[i - 1]);
    return y[i - 1] + slope * (at - x[i - 1]);
}

static double verify_ms(const flint_engine *e, double B) {
    if (!e->dyn_n) return e->dyn_fixed_ms + e->dyn_row_ms * B;
    return interp(e->dyn_b, e->dyn_t, e->dyn_n, B);
}

/* D(n, k): measured at K and at one draft, linear in between (the Markov loop's steps); a given
 * cost is the same for every k */
static double draft_ms(const flint_engine *e, double n, int k) {
    if (!e->dyn_dn) return e->dyn_draft_ms;
    const double dk = interp(e->dyn_db, e->dyn_dt, e->dyn_dn, n);
    if (e->K <= 1 || k >= e->K) return dk;
    const double d1 = interp(e->dyn_db, e->dyn_dt1, e->dyn_dn, n);
    return d1 + (dk - d1) * (double)(k - 1) / (double)(e->K - 1);
}

/* Per request, drafting k (after the confidence pruning, from the decayed per-position
 * outcomes): tokens emitted E(k) = 1 + sum_{j<k} P(accepted >= j + 1) and rows verified
 * r(k) = 1 + sum_{j<k} P(verified >= j + 1). Capping a draft at k leaves its first k positions'
 * outcomes as they are, so the estimates of a K-draft serve every k <= K. */
static void per_request(const flint_engine *e, int k, double *E, double *r) {
    *E = 1.0, *r = 1.0;
    for (int j = 0; j < k; j++)
        if (e->dyn_pcnt[j] > 0) *E += e->dyn_pacc[j] / e->dyn_pcnt[j], *r += e->dyn_pdraft[j] / e->dyn_pcnt[j];
}

/* A modelled step time with the offset seen for its kind (0 plain, 1 drafting whole, 2 pruning),
 * kept at least half the model (a step is never free). */
static double with_off(const flint_engine *e, int kind, double model_ms) {
    const double t = model_ms + e->dyn_off[kind];
    return t > 0.5 * model_ms ? t : 0.5 * model_ms;
}

/* Whether a step of n requests drafting k prunes its drafts by confidence (the scheduler below):
 * that takes the drafts to the host and back, a synchronisation with the scheduler's host work
 * between the draft and the verify while the GPU waits, so only where the rows it may save cost:
 * when verifying the rows likely accepted (E(k) per request, the bonus token's row included)
 * would take 20% less than verifying all n (k + 1). At the embedded pair's batch 1 the rows are
 * nearly free (8 rows 0.258 ms, 1 row 0.232), at batch 8 and more not (64 rows 0.46 ms). */
static int prunes(const flint_engine *e, int n, int k, double E) {
    return verify_ms(e, (double)n * (k + 1)) > 1.2 * verify_ms(e, (double)n * E);
}

/* Per request drafting k in a step of n: E(k), the rows it verifies (fewer where the step prunes,
 * else all k + 1) and whether it prunes. */
static int drafting(const flint_engine *e, int n, int k, double *E, double *r) {
    per_request(e, k, E, r);
    const int pr = prunes(e, n, k, *E);
    if (e->dyn_cnt <= 0 || !pr) *r = k + 1;
    return pr;
}

/* Whether not drafting is a close call: the tokens a request would have to emit for drafting to
 * pay, E / ratio, lie within 2 standard errors of the estimate E (the spread of the accepted
 * drafts per request over the decayed count; at least 0.5 drafts, so that a run of equal outcomes
 * is not taken for certainty). Session 40: at batch 1 a request's acceptance comes in runs (the
 * embedded pair's answers: stretches accepting nothing, then runs of 7s where they repeat), so
 * the estimate dips below the bar in a hard stretch, and with probes every ~4 + dyn_cnt steps the
 * gate sat out the easy runs that followed: 0.92-0.94 of the best fixed K over 24 prompts'
 * traces replayed (tools/lab/gate_sim.py), 0.93 on the GPU. Where the call is close, a probe (a
 * whole drafting step at batch 1, worth nearly a plain step there) every 4 steps: 0.96-1.0 in
 * the replay. Where drafting is clearly worse (a poor drafter: E near 1 against a bar near 1.5,
 * many standard errors away) the probes keep their ~1% budget. */
static int close_call(const flint_engine *e, double E, double ratio) {
    const double mean = e->dyn_acc1 / e->dyn_cnt;
    double var = e->dyn_acc2 / e->dyn_cnt - mean * mean;
    if (!(var > 0.25)) var = 0.25;
    return ratio > 0 && E * (1.0 / ratio - 1.0) <= 2.0 * sqrt(var / e->dyn_cnt);
}

int flint_engine_pick_k(flint_engine *e, int n) {
    const int K = e->K;
    e->dyn_steps++;
    e->dyn_probe = 0;
    e->dyn_deep = 0;
    int k_step = K;
    /* the modelled step times, offset by what such steps really took (dyn_off: encode, accept,
     * host work and launches are not in T and D) */
    const double t_without = with_off(e, 0, verify_ms(e, n));
    double t_with = 0.0, best = 0.0, E_best = 1.0;
    int k_best = K;
    for (int k = 1; k <= K; k++) { /* tokens per ms drafting k (ties: the longer draft) */
        double E, r;
        const int pr = drafting(e, n, k, &E, &r);
        const double t = with_off(e, pr ? 2 : 1, verify_ms(e, n * r) + draft_ms(e, n, k)), rate = n * E / t;
        if (k == 1 || rate >= best) best = rate, k_best = k, t_with = t, E_best = E;
    }
    /* K until ~24 requests or 8 drafting steps have been seen (24 decayed requests take ~33 steps
     * at batch 1: half of the embedded pair's 60-step bench); then the draft length k <= K with the
     * most tokens per ms when that beats not drafting (session 19: the gate chose between 0 and K
     * only, and the embedded pair's batch 1 is faster at K = 3 than at 0 or 7), else 0, and one
     * probe every m steps keeps the estimates current: a step where FLINT_DYN_PROBE_REQS requests
     * draft K (step.c), every m steps of about t_without (4 <= m <= 512), so that the probes cost
     * ~1% of throughput: loss / m <= 0.01 t_without. Once a probe has been timed (measured cost
     * models) its loss is its measured excess over a plain step less what its np requests' drafts
     * gain, (t_probe - t_without) - t_without np (E(K) - 1) / n: at batch 1 a probe is a whole
     * drafting step, nearly as good as a plain one when the choice is close, so probes come often
     * and a low first estimate is soon corrected; at batch 8 and more a probe drafts a few
     * requests but costs nearly a whole drafting step (the drafter's pass and the flush of the
     * held rows are latency-bound: session 20, 8% of throughput at batch 8 when a probe's loss was
     * taken from the model). Before (and with a given cost model), a whole drafting step that
     * often would cost ~2%: it takes t_with and yields what plain steps would in ratio * t_with,
     * so it loses (1 - ratio) t_with. Where a probe is a whole drafting step (n <= np) and the
     * estimates rest on few requests (dyn_cnt, the decayed count, at most 50), m <= 4 + dyn_cnt:
     * at batch 1 the first 8 drafting steps see the start of each answer, whose acceptance is low,
     * and one probe in ~90 steps left that estimate standing (session 20: the embedded pair's
     * batch 1 drafted in 0 of 3 runs, its best fixed K being 1.06x faster than not drafting; with
     * the bound 1.14x). At batch 8 the bound made probes cost 5% and is not applied. */
    if (n > 0 && K > 0 && (e->dyn_cnt >= 24.0 || e->dyn_obs_steps >= 8)) {
        const double without = n / t_without, ratio = best / without;
        if (ratio > 1.0) {
            k_step = k_best;
            /* A step drafting k < K observes positions 1..k only (per_request: the later ones keep
             * what the steps before saw), so an early low estimate of a later position would stand
             * for good (session 39: the embedded pair's batch 1 at context 160 settled on k = 2 in
             * its first 8 steps, 1.64x of no speculation against fixed K = 7's 2.01x). Now and then
             * a deep step: the probe's requests draft K (step.c), the others k. Its extra cost (their
             * K - k more rows each, the draft's longer Markov loop) kept at ~1% of throughput, as
             * the probes': every m >= FLINT_DYN_DEEP_EVERY steps. */
            if (k_best < K) {
                double E, r;
                drafting(e, n, k_best, &E, &r);
                const int np = n < FLINT_DYN_PROBE_REQS ? n : FLINT_DYN_PROBE_REQS;
                const double extra = verify_ms(e, n * r + np * (K - k_best)) - verify_ms(e, n * r) +
                                     draft_ms(e, n, K) - draft_ms(e, n, k_best);
                double md = extra / (0.01 * t_with);
                if (!(md >= FLINT_DYN_DEEP_EVERY)) md = FLINT_DYN_DEEP_EVERY; /* (and NaN) */
                if (md > 512) md = 512;
                if (e->dyn_steps - e->dyn_last_deep >= (int64_t)md) e->dyn_deep = 1, e->dyn_last_deep = e->dyn_steps;
            }
        } else {
            double mm = (1.0 - ratio) * (t_with > t_without ? t_with : t_without) / (0.02 * t_without);
            if (e->dyn_n && e->dyn_probe_ms > 0) { /* its excess less what its requests' drafts gain */
                double E, r;
                per_request(e, K, &E, &r);
                const int np = n < FLINT_DYN_PROBE_REQS ? n : FLINT_DYN_PROBE_REQS;
                mm = (e->dyn_probe_ms - t_without - t_without * np * (E - 1.0) / n) / (0.01 * t_without);
            }
            if (!(t_without > 0)) mm = 4.0;
            if (n <= FLINT_DYN_PROBE_REQS && mm > 4.0 + e->dyn_cnt) mm = 4.0 + e->dyn_cnt; /* few seen: probe more */
            if (n <= FLINT_DYN_PROBE_REQS && e->dyn_cnt > 1.0 && close_call(e, E_best, ratio)) mm = 4.0;
            const int m = mm < 4 ? 4 : mm > 512 ? 512 : (int)mm;
            if (e->dyn_steps - e->dyn_last_draft < m) k_step = 0;
            else e->dyn_probe = 1; /* a probe: a few requests draft (step.c) */
        }
    }
    if (k_step > 0) e->dyn_last_draft = e->dyn_steps;
    e->dyn_prune = 0;
    e->dyn_pred_kind = 0;
    e->dyn_pred_ms = verify_ms(e, n);
    if (k_step > 0) {
        double E, r;
        per_request(e, k_step, &E, &r);
        e->dyn_prune = !e->dyn_probe && prunes(e, n, k_step, E);
        if (e->dyn_cnt <= 0 || !e->dyn_prune) r = k_step + 1;
        e->dyn_pred_kind = e->dyn_prune ? 2 : 1;
        e->dyn_pred_ms = verify_ms(e, n * r) + draft_ms(e, n, k_step);
        t_with = with_off(e, e->dyn_pred_kind, e->dyn_pred_ms);
    }
    e->dyn_k_hist[k_step]++;
    return k_step;
}

void flint_engine_dyn_describe(const flint_engine *e, int n, char *buf, size_t cap) {
    size_t m = 0;
#define PUT(...) (m += (size_t)snprintf(buf + (m < cap ? m : cap), m < cap ? cap - m : 0, __VA_ARGS__))
    PUT("n %d: plain %.3f ms;", n, with_off(e, 0, verify_ms(e, n)));
    for (int k = 1; k <= e->K; k++) {
        double E, r;
        const int pr = drafting(e, n, k, &E, &r);
        PUT(" k%d E %.2f %.3f ms%s;", k, E, with_off(e, pr ? 2 : 1, verify_ms(e, n * r) + draft_ms(e, n, k)),
            pr ? " pruned" : "");
    }
    PUT(" offsets %.3f/%.3f/%.3f ms (steps %lld/%lld/%lld); probe %.3f ms", e->dyn_off[0], e->dyn_off[1],
        e->dyn_off[2], (long long)e->dyn_off_n[0], (long long)e->dyn_off_n[1], (long long)e->dyn_off_n[2],
        e->dyn_probe_ms);
#undef PUT
}

/* The offset of a kind: the median of its last 16 steps' real less modelled times. Session 40:
 * a decayed mean set by its first observation let a fresh engine's first drafting step (0.52 ms
 * against the 0.30 of the next ones: first launches or the prompt's encode still in flight, not
 * told apart) stand at +0.09 ms after the
 * 8 steps that decide whether to go on drafting (0.9^7 of it), so the embedded pair's batch 1
 * modelled a drafting step at 0.42 ms and stopped drafting in 5 of 8 prompts; a median ignores
 * such one-off steps (a first launch, a prefill's encode still in flight, a host hiccup). */
void flint_engine_observe_step_ms(flint_engine *e, double ms) {
    if (!(e->dyn_pred_ms > 0) || !(ms > 0)) return;
    const int i = e->dyn_pred_kind;
    e->dyn_off_win[i][e->dyn_off_n[i]++ % 16] = ms - e->dyn_pred_ms;
    const int n = e->dyn_off_n[i] < 16 ? (int)e->dyn_off_n[i] : 16;
    double w[16];
    memcpy(w, e->dyn_off_win[i], sizeof(double) * (size_t)n);
    qsort(w, (size_t)n, sizeof(double), cmp_double);
    e->dyn_off[i] = n % 2 ? w[n / 2] : 0.5 * (w[n / 2 - 1] + w[n / 2]);
}

void flint_engine_observe_probe_ms(flint_engine *e, double ms) {
    if (!(ms > 0)) return;
    e->dyn_probe_ms = e->dyn_probe_ms > 0 ? 0.8 * e->dyn_probe_ms + 0.2 * ms : ms;
}

void flint_engine_observe_acceptance(flint_engine *e, int cap, int k, int acc) {
    /* decayed sums: about the last 50 requests of drafting steps count, per position the last 50
     * that could draft it */
    e->dyn_cnt = 0.98 * e->dyn_cnt + 1.0;
    e->dyn_acc1 = 0.98 * e->dyn_acc1 + acc;
    e->dyn_acc2 = 0.98 * e->dyn_acc2 + (double)acc * acc;
    for (int j = 0; j < cap && j < FLINT_MAX_DRAFT; j++) {
        e->dyn_pcnt[j] = 0.98 * e->dyn_pcnt[j] + 1.0;
        e->dyn_pdraft[j] = 0.98 * e->dyn_pdraft[j] + (k > j);
        e->dyn_pacc[j] = 0.98 * e->dyn_pacc[j] + (acc > j);
    }
}

static int cmp_cand(const void *a, const void *b) {
    const flint_sched_cand *x = a, *y = b;
    if (x->a != y->a) return x->a > y->a ? -1 : 1;
    if (x->d != y->d) return x->d - y->d;
    return x->j - y->j;
}

void flint_engine_schedule_drafts(flint_engine *e, int n_rows_base, int n_d) {
    int n = 0;
    double B = n_rows_base, tau = n_rows_base;
    for (int d = 0; d < n_d; d++) {
        const int fixed = flint_engine_pinned(e, &e->ss[e->dreq_sid[d]]);
        e->dlen[d] = fixed ? e->dreqs[d].n_draft : 0;
        float a = 1.0f;
        for (int j = 0; j < e->dreqs[d].n_draft; j++) {
            a *= e->conf[(size_t)d * e->dmax + j];
            if (fixed) { /* verified whatever it is worth: rows and expected tokens of the base */
                B += 1, tau += a > 0.0f ? a : 0.0f;
                continue;
            }
            if (!(a > 0.0f)) break;
            e->cand[n++] = (flint_sched_cand){a, d, j};
        }
    }
    qsort(e->cand, (size_t)n, sizeof *e->cand, cmp_cand);
    double best = tau / verify_ms(e, B);
    for (int i = 0; i < n; i++) {
        const flint_sched_cand *c = &e->cand[i];
        if (c->j != e->dlen[c->d]) continue; /* equal survivals: a later position waits for its prefix */
        double t = (tau + c->a) / verify_ms(e, B + 1);
        if (!(t > best)) break;
        best = t, tau += c->a, B += 1;
        e->dlen[c->d] = c->j + 1;
    }
}
