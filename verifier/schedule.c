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
 * T(B): verify time of a batch of B rows, measured on the target at open (1, 4, 16, ... max_rows
 * rows, median of 3 runs each; linear between the points, made monotone as vLLM's cost tables
 * are), or fixed + per_row x B given in the options so that runs are reproducible. Raw confidences
 * are used (no per-position temperature calibration yet). On a CPU the verify cost grows with every
 * row, so the scheduler rightly keeps few drafts; on a GPU it is flat up to dozens of rows. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/log.h"
#include "verifier/engine_internal.h"

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Verify batches of B rows of one scratch sequence at positions 0..B-1, written into blocks that
 * no session holds yet (the engine is just open), with logits for every row and the drafter's
 * taps, as a real verify step computes them. */
int flint_engine_measure_verify_cost(flint_engine *e, flint_err *err) {
    int R = e->max_rows, nb = (R + e->bs - 1) / e->bs;
    if (nb > flint_target_kv_blocks(e->tgt) || R > e->max_len)
        return flint_err_set(err, FLINT_ERR_INVALID, "dynamic draft: cannot measure verify batches of %d rows in this "
                             "KV pool; give the cost model (dyn_fixed_ms, dyn_row_ms)", R);
    int32_t *table = flint_xmalloc(sizeof(int32_t) * (size_t)nb);
    for (int i = 0; i < nb; i++) table[i] = i;
    const int32_t *tables[1] = {table};
    double xs[16], ys[16];
    int n = 0;
    for (int B = 1; n < 16; B = B * 4 > R ? (B == R ? R + 1 : R) : B * 4) {
        if (B > R) break;
        for (int r = 0; r < B; r++) {
            e->row_tok[r] = (int32_t)((r * 7919) % e->V);
            e->row_pos[r] = r;
            e->row_seq[r] = 0;
            e->logit_rows[r] = r;
        }
        flint_target_batch b = {.n_rows = B, .tokens = e->row_tok, .pos = e->row_pos, .row_seq = e->row_seq,
                                .n_seqs = 1, .block_tables = tables, .n_logit_rows = B, .logit_rows = e->logit_rows,
                                .logits = e->logits, .n_taps = e->n_taps, .tap_layers = e->tap_layers, .taps = e->taps};
        double t[3];
        for (int k = 0; k < 4; k++) {
            double t0 = now_ms();
            if (flint_engine_forward(e, &b, err)) {
                free(table);
                return -1;
            }
            if (k) t[k - 1] = now_ms() - t0; /* the first run warms up */
        }
        qsort(t, 3, sizeof(double), cmp_double);
        xs[n] = B, ys[n] = t[1];
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

static double verify_ms(const flint_engine *e, double B) {
    if (!e->dyn_n) return e->dyn_fixed_ms + e->dyn_row_ms * B;
    const double *b = e->dyn_b, *t = e->dyn_t;
    int n = e->dyn_n;
    if (n == 1 || B <= b[0]) return t[0];
    int i = 1;
    while (i < n - 1 && B > b[i]) i++;
    double slope = (t[i] - t[i - 1]) / (b[i] - b[i - 1]);
    return t[i - 1] + slope * (B - b[i - 1]); /* past the last point: the last segment's slope */
}

static int cmp_cand(const void *a, const void *b) {
    const flint_sched_cand *x = a, *y = b;
    if (x->a != y->a) return x->a > y->a ? -1 : 1;
    if (x->d != y->d) return x->d - y->d;
    return x->j - y->j;
}

void flint_engine_schedule_drafts(flint_engine *e, int n_rows_base, int n_d) {
    int n = 0;
    for (int d = 0; d < n_d; d++) {
        e->dlen[d] = 0;
        float a = 1.0f;
        for (int j = 0; j < e->dreqs[d].n_draft; j++) {
            a *= e->conf[(size_t)d * e->dmax + j];
            if (!(a > 0.0f)) break;
            e->cand[n++] = (flint_sched_cand){a, d, j};
        }
    }
    qsort(e->cand, (size_t)n, sizeof *e->cand, cmp_cand);
    double B = n_rows_base, tau = n_rows_base;
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
