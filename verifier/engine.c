/* The engine (see engine.h): sessions, admission, chunked prefill and the speculative step on the
 * CPU backend. The step follows DESIGN.md section 4:
 *   1. draft: one drafter call for every running session that speculates this step;
 *   2. verify: one target forward over [anchor, x_1..x_k] of every running session, with taps;
 *   3. accept: flint_accept_draft per session (keys: seed and absolute position);
 *   4. commit: stop conditions over the emitted tokens, then the drafter context is encoded for
 *      the rows [anchor, accepted drafts] only, and the anchor moves to the emitted token.
 * Every buffer is reserved at open for max_seqs sessions x (K + 1) rows; a step allocates nothing
 * except the growth of a session's text buffer. */
#include "verifier/engine.h"

#include <stdlib.h>
#include <string.h>

#include "core/json.h"
#include "core/log.h"
#include "verifier/engine_internal.h"

/* ==== small helpers ==== */

void flint_engine_options_default(flint_engine_options *o) {
    memset(o, 0, sizeof *o);
    o->max_seqs = 64;
    o->prefill_chunk = 512;
    o->kv_block_size = 16;
    o->enable_prefix_caching = 1;
    o->dynamic_draft = -1; /* on when the drafter has a confidence head */
}

void flint_request_params_default(flint_request_params *p) {
    memset(p, 0, sizeof *p);
    flint_sampling_params_default(&p->sampling);
    p->max_tokens = 16;
    p->speculative = 1;
    p->skip_special = 1;
}

const char *flint_finish_reason_name(flint_finish_reason r) {
    switch (r) {
    case FLINT_FINISH_STOP: return "stop";
    case FLINT_FINISH_LENGTH: return "length";
    case FLINT_FINISH_CANCELLED: return "cancelled";
    default: return NULL;
    }
}

double flint_spec_stats_mean_al(const flint_spec_stats *s) {
    return s->steps ? 1.0 + (double)s->accepted / (double)s->steps : 0.0;
}

double flint_spec_stats_acceptance_rate(const flint_spec_stats *s) {
    return s->draft_tokens ? (double)s->accepted / (double)s->draft_tokens : 0.0;
}

void flint_spec_stats_add(flint_spec_stats *a, const flint_spec_stats *s) {
    a->steps += s->steps;
    a->draft_tokens += s->draft_tokens;
    a->accepted += s->accepted;
    a->emitted += s->emitted;
    for (int i = 0; i <= FLINT_MAX_DRAFT; i++) a->hist[i] += s->hist[i];
    for (int i = 0; i < FLINT_MAX_DRAFT; i++) {
        a->accepted_per_pos[i] += s->accepted_per_pos[i];
        a->drafted_per_pos[i] += s->drafted_per_pos[i];
    }
}

const flint_tokenizer *flint_engine_tokenizer(const flint_engine *e) { return e->tok; }
int flint_engine_max_model_len(const flint_engine *e) { return e->max_len; }
int flint_engine_vocab_size(const flint_engine *e) { return e->V; }
int flint_engine_has_drafter(const flint_engine *e) { return e->dft != NULL; }
const char *flint_engine_drafter_desc(const flint_engine *e) { return e->dft ? flint_drafter_describe(e->dft) : NULL; }
int flint_engine_num_speculative_tokens(const flint_engine *e) { return e->K; }
int flint_engine_dynamic_draft(const flint_engine *e) { return e->o.dynamic_draft; }
const flint_spec_stats *flint_engine_stats(const flint_engine *e) { return &e->pooled; }
void flint_engine_step_profile(const flint_engine *e, flint_step_profile *p) { *p = e->prof; }
void flint_engine_step_k_hist(const flint_engine *e, int64_t hist[FLINT_MAX_DRAFT + 1]) {
    memcpy(hist, e->dyn_k_hist, sizeof e->dyn_k_hist);
}
int64_t flint_engine_probe_steps(const flint_engine *e) { return e->dyn_probe_steps; }
int64_t flint_engine_deep_steps(const flint_engine *e) { return e->dyn_deep_steps; }
void flint_engine_host_time(const flint_engine *e, flint_host_time *t) { *t = e->host; }
void flint_engine_set_profile(flint_engine *e, int on) {
    if (on && !e->o.profile) memset(&e->prof, 0, sizeof e->prof);
    e->o.profile = on != 0;
}
/* Blocks held only by the prefix cache count as free: they are given back on demand. */
int flint_engine_kv_blocks_free(const flint_engine *e) {
    return flint_kv_alloc_free_count(e->kv) + (e->pc ? flint_prefix_evictable(e->pc, e->kv) : 0);
}

void flint_engine_device_stats(const flint_engine *e, flint_target_graph_info *graphs, size_t *device_bytes) {
    flint_target_graph_stats(e->tgt, graphs);
    if (e->dft) { /* the CUDA drafter's encode and draft graphs count with the target's */
        flint_drafter_graph_info di;
        flint_drafter_graph_stats(e->dft, &di);
        graphs->n_graphs += di.n_graphs;
        graphs->n_captures += di.n_captures;
        graphs->capture_s += di.capture_s;
        graphs->bytes += di.bytes;
    }
    flint_target_graph_info st;
    flint_engine_step_graph_stats(e, &st);
    graphs->n_graphs += st.n_graphs;
    graphs->n_captures += st.n_captures;
    graphs->capture_s += st.capture_s;
    graphs->bytes += st.bytes;
    *device_bytes = flint_target_device_bytes(e->tgt);
}

void flint_engine_prefix_stats(const flint_engine *e, int64_t *q, int64_t *h, int *blocks) {
    *q = e->prefix_query_tokens;
    *h = e->prefix_hit_tokens;
    *blocks = e->pc ? flint_prefix_cached_blocks(e->pc) : 0;
}
int flint_engine_kv_blocks_total(const flint_engine *e) { return flint_target_kv_blocks(e->tgt); }

int flint_engine_active(const flint_engine *e) {
    int n = 0;
    for (int i = 0; i < e->o.max_seqs; i++) n += e->ss[i].st != S_FREE && e->ss[i].st != S_DONE;
    return n;
}

/* ==== open / close ==== */

flint_engine *flint_engine_open(const flint_engine_options *opts, flint_err *err) {
    flint_engine *e = flint_xcalloc(1, sizeof *e);
    e->o = *opts;
    flint_engine_options *o = &e->o;
    if (o->model_shape && !o->model_dir) o->model_dir = o->model_shape; /* for messages */
    if (!o->model_dir) {
        flint_err_set(err, FLINT_ERR_INVALID, "engine: no model directory");
        goto fail;
    }
    if (o->max_seqs < 1 || o->max_seqs > 4096 || o->prefill_chunk < 1 || o->num_speculative_tokens < 0 ||
        o->num_speculative_tokens > FLINT_MAX_DRAFT) {
        flint_err_set(err, FLINT_ERR_INVALID, "engine: max_seqs %d, prefill_chunk %d or num_speculative_tokens %d "
                      "out of range", o->max_seqs, o->prefill_chunk, o->num_speculative_tokens);
        goto fail;
    }
    /* A directory without tokenizer.json still serves token ids (evals, tests); text, detokenized
     * output and stop strings need one. */
    char tpath[4096];
    if (!o->model_shape && flint_path_join(tpath, sizeof tpath, o->model_dir, "tokenizer.json") == 0 &&
        flint_file_exists(tpath) && !(e->tok = flint_tokenizer_open_dir(o->model_dir, err)))
        goto fail;
    flint_target_config cfg;
    if (o->model_shape ? flint_target_shape_config(o->model_shape, &cfg, err)
                       : flint_target_config_load(o->model_dir, &cfg, err))
        goto fail;
    e->max_len = o->max_model_len ? o->max_model_len : cfg.max_position_embeddings;
    if (e->max_len < 2 || e->max_len > cfg.max_position_embeddings) {
        flint_err_set(err, FLINT_ERR_INVALID, "max_model_len %d is outside 2..%d (the model's context)", e->max_len,
                      cfg.max_position_embeddings);
        goto fail;
    }
    /* K is known only once the drafter's block size is; size the target for the largest. */
    int k_cap = o->drafter_dir ? (o->num_speculative_tokens ? o->num_speculative_tokens : FLINT_MAX_DRAFT) : 0;
    e->max_rows = o->max_seqs * (k_cap + 1);
    if (e->max_rows < o->prefill_chunk) e->max_rows = o->prefill_chunk;
    flint_target_options to;
    flint_target_options_default(&to);
    to.kv_block_size = o->kv_block_size;
    to.kv_blocks = o->kv_blocks;
    to.max_seqs = o->max_seqs;
    to.max_len = e->max_len;
    to.max_rows = e->max_rows;
    to.n_threads = o->n_threads;
    to.device = o->device;
    to.enforce_eager = o->enforce_eager;
    to.n_graph_sizes = o->n_cuda_graph_sizes;
    memcpy(to.graph_sizes, o->cuda_graph_sizes, sizeof to.graph_sizes);
    to.gpu_memory_utilization = o->gpu_memory_utilization;
    to.dummy_shape = o->model_shape;
    if (o->tensor_parallel_size < 0 || o->tensor_parallel_size > 64) {
        flint_err_set(err, FLINT_ERR_INVALID, "tensor parallel size %d is outside 1..64", o->tensor_parallel_size);
        goto fail;
    }
    if (o->tensor_parallel_size > 1 || o->tp_nccl) {
        if (flint_engine_tp_open(e, &to, err)) goto fail;
    } else if (!(e->tgt = flint_target_open(o->model_dir, &to, err))) {
        goto fail;
    }
    e->tc = flint_target_get_config(e->tgt);
    e->V = e->tc->vocab_size;
    e->H = e->tc->hidden_size;
    e->bs = flint_target_kv_block_size(e->tgt);
    e->blocks_per_seq = (e->max_len + e->bs - 1) / e->bs;
    if (o->drafter_dir && o->tensor_parallel_size > 1 && !e->tc->tie_word_embeddings) {
        /* the CPU drafter shares the target's LM head, and rank 0 holds only its vocabulary rows */
        flint_err_set(err, FLINT_ERR_UNSUPPORTED, "tensor parallel size %d with a drafter needs a target with tied "
                      "embeddings in this version (%s has a separate lm_head)", o->tensor_parallel_size, o->model_dir);
        goto fail;
    }
    if (o->drafter_dir) {
        flint_drafter_options dopt;
        flint_drafter_options_default(&dopt);
        dopt.max_reqs = o->max_seqs;
        dopt.max_rows = e->max_rows;
        /* the drafter runs where the target runs; with tensor parallelism over several GPUs it stays
         * on the CPU in this version (the CUDA drafter beside a sharded target is not yet verified
         * on a multi-GPU machine) */
        dopt.device = o->tensor_parallel_size > 1 ? FLINT_TARGET_CPU : o->device;
        dopt.enforce_eager = o->enforce_eager;
        if (!(e->dft = flint_drafter_open(o->drafter_dir, e->tgt, &dopt, err))) goto fail;
        const flint_drafter_config *dc = flint_drafter_get_config(e->dft);
        e->K = o->num_speculative_tokens ? o->num_speculative_tokens : dc->max_draft;
        if (e->K > dc->max_draft) {
            flint_err_set(err, FLINT_ERR_INVALID, "num_speculative_tokens %d exceeds what the drafter makes (%d: block "
                          "size %d, %s layout)", e->K, dc->max_draft, dc->block_size,
                          dc->layout == FLINT_DRAFT_ANCHOR_FIRST ? "anchor-first" : "fill-in");
            goto fail;
        }
        e->dmax = dc->max_draft;
        e->n_taps = dc->n_taps;
        if (o->dynamic_draft < 0) o->dynamic_draft = dc->has_confidence;
        if (o->dynamic_draft && !dc->has_confidence) {
            flint_err_set(err, FLINT_ERR_INVALID, "dynamic draft lengths need a drafter with a confidence head (%s has "
                          "none)", o->drafter_dir);
            goto fail;
        }
        for (int i = 0; i < dc->n_taps; i++) e->tap_layers[i] = dc->tap_layers[i];
    }
    if (!e->dft) o->dynamic_draft = 0;
    e->kv = flint_kv_alloc_new(flint_target_kv_blocks(e->tgt));
    if (o->enable_prefix_caching) e->pc = flint_prefix_new(flint_target_kv_blocks(e->tgt));
    for (int i = 0; i < e->tc->n_eos; i++) e->eos[e->n_eos++] = e->tc->eos_token_ids[i];
    if (e->tok && flint_tokenizer_eos_id(e->tok) >= 0) e->eos[e->n_eos++] = flint_tokenizer_eos_id(e->tok);

    int S = o->max_seqs, R = e->max_rows;
    e->ss = flint_xcalloc((size_t)S, sizeof *e->ss);
    e->tables = flint_xcalloc((size_t)S, sizeof *e->tables);
    for (int i = 0; i < S; i++) {
        e->ss[i].tokens = flint_xmalloc(sizeof(int32_t) * (size_t)e->max_len);
        e->ss[i].blocks = flint_xmalloc(sizeof(int32_t) * (size_t)e->blocks_per_seq);
        e->tables[i] = e->ss[i].blocks;
    }
    e->row_tok = flint_xmalloc(sizeof(int32_t) * (size_t)R);
    e->row_pos = flint_xmalloc(sizeof(int32_t) * (size_t)R);
    e->row_seq = flint_xmalloc(sizeof(int32_t) * (size_t)R);
    e->logit_rows = flint_xmalloc(sizeof(int32_t) * (size_t)R);
    e->logits = flint_xmalloc(sizeof(float) * (size_t)R * e->V);
    if (e->dft) {
        e->taps = flint_xmalloc(sizeof(float) * (size_t)R * e->n_taps * e->H);
        e->q = flint_xmalloc(sizeof(float) * (size_t)S * e->dmax * e->V);
        e->drafts = flint_xmalloc(sizeof(int32_t) * (size_t)S * e->dmax);
        if (o->dynamic_draft) {
            e->conf = flint_xmalloc(sizeof(float) * (size_t)S * e->dmax);
            e->dlen = flint_xcalloc((size_t)S, sizeof(int));
            e->cand = flint_xmalloc(sizeof(*e->cand) * (size_t)S * e->dmax);
        }
    }
    e->dreqs = flint_xcalloc((size_t)S, sizeof *e->dreqs);
    e->dreq_sid = flint_xcalloc((size_t)S, sizeof(int));
    e->row0 = flint_xcalloc((size_t)S, sizeof(int));
    e->order = flint_xcalloc((size_t)S, sizeof(int));
    e->dev_out = flint_xcalloc((size_t)S * (FLINT_MAX_DRAFT + 1), sizeof(int32_t));
    e->dev_acc = flint_xcalloc((size_t)S, sizeof(int));
    e->events = flint_xcalloc((size_t)S, sizeof *e->events);
    flint_sampler_scratch_init(&e->sc, e->V);
    e->allowed = flint_xmalloc((size_t)e->V);
    if (flint_engine_dev_open(e, err)) goto fail;
    if (e->dft && flint_drafter_device_q(e->dft) && !e->tp && !o->host_taps) { /* taps go from the target to the drafter on the GPU */
        e->dev_taps = 1;
        e->tap_src = flint_xmalloc(sizeof(int32_t) * (size_t)R);
    }
    if (e->dft && e->dev) e->row_src = flint_xmalloc(sizeof(int32_t) * (size_t)R); /* the drafts stay on the GPU */
    if (o->device == FLINT_TARGET_CUDA && !o->enforce_eager && !e->tp) {
        /* the graphs decode and verify steps replay, captured now rather than inside the first
         * steps of each shape (a capture allocates and takes milliseconds); prefill shapes stay
         * captured on first use. Tensor parallel ranks capture on their own threads, on use. */
        flint_target_graph_info gi;
        size_t dev_bytes = 0;
        if (flint_target_capture_graphs(e->tgt, e->dft ? e->n_taps : 0, e->tap_layers, err) ||
            (e->dft && flint_drafter_capture_graphs(e->dft, e->K, !o->draft_greedy, err)) ||
            (e->dft && flint_engine_dev_capture(e, 1, e->K, err)))
            goto fail;
        flint_engine_device_stats(e, &gi, &dev_bytes);
        flint_log_info("engine: %d graphs captured at start-up in %.3f s, %.1f MiB", gi.n_graphs, gi.capture_s,
                       (double)gi.bytes / (1u << 20));
    }
    if (e->dft && o->dynamic_draft) { /* after the device paths are set: the costs are measured on them */
        e->dyn_fixed_ms = o->dyn_fixed_ms, e->dyn_row_ms = o->dyn_row_ms, e->dyn_draft_ms = o->dyn_draft_ms;
        if (o->dyn_fixed_ms < 0 || o->dyn_row_ms < 0 || o->dyn_draft_ms < 0) {
            flint_err_set(err, FLINT_ERR_INVALID, "dynamic draft: the cost model must not be negative");
            goto fail;
        }
        memset(e->dyn_off, 0, sizeof e->dyn_off);
        const int measure = o->dyn_fixed_ms == 0 && o->dyn_row_ms == 0 && o->dyn_draft_ms == 0;
        if (measure && (flint_engine_measure_verify_cost(e, err) || flint_engine_measure_draft_cost(e, err))) goto fail;

    }
    flint_log_info("engine: %s, max_seqs %d, max_model_len %d, prefill chunk %d, %s", o->model_dir, S, e->max_len,
                   o->prefill_chunk, e->dft ? "speculative" : "no drafter");
    if (e->dft) flint_log_info("engine: K = %d%s, %s drafts; drafter %s", e->K,
                               o->dynamic_draft ? " (at most; lengths scheduled by confidence)" : "",
                               o->draft_greedy ? "greedy" : "probabilistic", flint_drafter_describe(e->dft));
    return e;
fail:
    flint_engine_close(e);
    return NULL;
}

void flint_engine_close(flint_engine *e) {
    if (!e) return;
    if (e->ss)
        for (int i = 0; i < e->o.max_seqs; i++) {
            if (e->tok && e->ss[i].st != S_FREE) flint_detok_free(&e->ss[i].dt);
            flint_grammar_free(e->ss[i].grammar);
            free(e->ss[i].gstate);
            free(e->ss[i].gpath);
            free(e->ss[i].tokens);
            free(e->ss[i].blocks);
            free(e->ss[i].text);
            for (int j = 0; j < FLINT_MAX_STOP; j++) free(e->ss[i].stop_store[j]);
        }
    free(e->ss);
    free(e->tables);
    free(e->row_tok);
    free(e->row_pos);
    free(e->row_seq);
    free(e->logit_rows);
    free(e->logits);
    free(e->taps);
    free(e->q);
    free(e->drafts);
    free(e->conf);
    free(e->dlen);
    free(e->cand);
    free(e->dreqs);
    free(e->dreq_sid);
    free(e->row0);
    free(e->order);
    free(e->dev_out);
    free(e->dev_acc);
    free(e->tap_src);
    free(e->row_src);
    flint_engine_dev_close(e);
    free(e->events);
    flint_sampler_scratch_free(&e->sc);
    flint_prefix_free(e->pc);
    free(e->allowed);
    flint_grammar_vocab_free(e->gvocab);
    flint_kv_alloc_free(e->kv);
    flint_drafter_close(e->dft);
    flint_engine_tp_close(e); /* the ranks' targets, e->tgt among them */
    flint_target_close(e->tgt);
    flint_tokenizer_close(e->tok);
    free(e);
}
