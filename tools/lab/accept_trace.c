/* Lab: the acceptance a drafter would get at every position of a greedy continuation, so that a
 * draft-length policy can be replayed offline (tools/lab/gate_sim.py) instead of on the GPU.
 *
 * Why: a dynamic draft length is judged against fixed ones at batch 1 on a handful of prompts,
 * and each prompt's answer moves through stretches that are hard and easy to draft (session 40:
 * the embedded pair's continuations start hard and turn repetitive). One GPU run per policy idea
 * costs a minute of a 30-minute budget; this trace costs CPU seconds and answers "what would
 * policy P have emitted per step" for any P, given the measured step times.
 *
 * For prompt r (the bench's --vary-prompts round r at batch 1: the window of `context` tokens of
 * the gsm8k pool at offset 7919 r) and every p < len, a session with prompt + T[0..p) is
 * prefilled, which emits T[p] (the anchor), and one speculative step at K drafts from it; its
 * accepted count a(p) is printed as "r p a(p)". Greedy drafts: a(p) is what any step anchored at
 * p accepts of its first k drafts, min(a(p), k), so one trace serves every k <= K. The continuation
 * T is the prefills' greedy tokens, not a decode's: the CPU's prefill and verify differ in the last
 * bits, enough to flip a near tie (the embedded pair's first prompt at its fourth token), so a
 * continuation decoded first would not be the one the prefills see. The KV of the shared prefix
 * comes from the prefix cache, so each position costs a block's prefill and one step.
 *
 *   build-m/lab_accept_trace MODEL DRAFTER [--context 128] [--prompts 8] [--len 300] [--k 7]
 *       [--dataset gsm8k] [--first 0] > trace.txt */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/tokenizer.h"
#include "evals/dataset.h"
#include "verifier/engine.h"

static int arg_int(int argc, char **argv, const char *name, int def) {
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], name)) return atoi(argv[i + 1]);
    return def;
}

static const char *arg_str(int argc, char **argv, const char *name, const char *def) {
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], name)) return argv[i + 1];
    return def;
}

/* One session through its first speculative step (then cancelled): its emitted tokens into out
 * (up to cap), *accepted its accepted drafts. Returns how many tokens, -1 on error. */
static int first_step(flint_engine *e, const int32_t *prompt, int n, int max_tokens, int32_t *out, int cap,
                      int64_t *accepted, flint_err *err) {
    flint_request_params rp;
    flint_request_params_default(&rp);
    rp.max_tokens = max_tokens;
    rp.ignore_eos = 1;
    const int sid = flint_engine_add(e, prompt, n, &rp, err);
    if (sid < 0) return -1;
    int m = 0;
    for (int guard = 0; guard < 100; guard++) {
        const flint_step_event *ev;
        int n_ev;
        if (flint_engine_step(e, &ev, &n_ev, err)) return -1;
        for (int k = 0; k < n_ev; k++) {
            if (ev[k].sid != sid) continue;
            for (int j = 0; j < ev[k].n_tokens && m < cap; j++) out[m++] = ev[k].tokens[j];
            if (ev[k].stats->steps >= 1) {
                *accepted = ev[k].stats->accepted;
                flint_engine_cancel(e, sid);
                return flint_engine_step(e, &ev, &n_ev, err) ? -1 : m; /* the step frees it */
            }
            if (ev[k].finish != FLINT_FINISH_NONE)
                return flint_err_set(err, FLINT_ERR_INTERNAL, "the session finished before a speculative step");
        }
    }
    return flint_err_set(err, FLINT_ERR_INTERNAL, "no speculative step in 100 engine steps");
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s MODEL DRAFTER [--context N] [--prompts N] [--len N] [--k K] [--dataset D] "
                "[--first R]\n", argv[0]);
        return 2;
    }
    const int C = arg_int(argc, argv, "--context", 128), P = arg_int(argc, argv, "--prompts", 8);
    const int L = arg_int(argc, argv, "--len", 300), K = arg_int(argc, argv, "--k", 7);
    const int first = arg_int(argc, argv, "--first", 0);
    const char *dataset = arg_str(argc, argv, "--dataset", "gsm8k");
    flint_err err = {0};
    flint_engine_options eo;
    flint_engine_options_default(&eo);
    eo.model_dir = argv[1];
    eo.drafter_dir = argv[2];
    eo.num_speculative_tokens = K;
    eo.draft_greedy = 1;
    eo.dynamic_draft = 0; /* every step drafts K */
    eo.max_seqs = 2;
    eo.max_model_len = C + L + 2 * K + 32;
    flint_engine *e = flint_engine_open(&eo, &err);
    if (!e) {
        fprintf(stderr, "accept_trace: %s\n", err.msg);
        return 1;
    }
    /* the bench's pool (evals/bench.c token_pool): the set's first turns, one after another */
    const int need = C * 4 + 4096;
    int32_t *pool = malloc(sizeof(int32_t) * (size_t)need);
    int n_pool = 0;
    flint_dataset *d = flint_dataset_load(dataset, NULL, &err);
    if (!d || !flint_engine_tokenizer(e)) {
        fprintf(stderr, "accept_trace: %s\n", d ? "the model has no tokenizer" : err.msg);
        return 1;
    }
    for (int i = 0; i < d->n && n_pool < need; i++) {
        int32_t *ids;
        int k;
        if (flint_tokenizer_encode(flint_engine_tokenizer(e), d->items[i].turns[0], strlen(d->items[i].turns[0]), 0,
                                   &ids, &k, &err)) {
            fprintf(stderr, "accept_trace: %s\n", err.msg);
            return 1;
        }
        for (int j = 0; j < k && n_pool < need; j++) pool[n_pool++] = ids[j];
        free(ids);
    }
    flint_dataset_free(d);
    int32_t *seq = malloc(sizeof(int32_t) * (size_t)(C + L + 16));
    int32_t scratch[64];
    for (int r = first; r < first + P; r++) {
        const int off = (int)(((long)r * 7919) % n_pool);
        for (int t = 0; t < C; t++) seq[t] = pool[(off + t) % n_pool];
        for (int p = 0; p < L; p++) {
            int64_t acc = -1;
            /* prefill emits T[p]; one step then drafts from it and emits acc + 1 */
            const int m = first_step(e, seq, C + p, K + 2, scratch, 64, &acc, &err);
            if (m < 0) {
                fprintf(stderr, "accept_trace: prompt %d, position %d: %s\n", r, p, err.msg);
                return 1;
            }
            seq[C + p] = scratch[0]; /* the anchor: the next position's context */
            printf("%d %d %lld\n", r, p, (long long)acc);
        }
        fflush(stdout);
    }
    free(pool);
    free(seq);
    flint_engine_close(e);
    return 0;
}
