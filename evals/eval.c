/* `flint eval`: acceptance length of a drafter on prompt sets (see evals.h). One engine, every
 * prompt of every dataset through the runner (continuous batching), then summaries per dataset
 * and per category: pooled AL (1 + accepted / steps, the convention of vLLM, SGLang and DeepSpec)
 * with a percentile bootstrap CI over prompts, per-position acceptance, histogram, tokens. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/chat.h"
#include "core/log.h"
#include "evals/evals_internal.h"
#include "evals/svg.h"

/* Indices of the prompts of dataset d (and of category cat when not NULL). */
static int select_prompts(const flint_run_prompt *p, int n, int d, const char *cat, int *idx) {
    int m = 0;
    for (int i = 0; i < n; i++)
        if (p[i].dataset == d && (!cat || !strcmp(p[i].item->category, cat))) idx[m++] = i;
    return m;
}

/* Distinct categories of dataset d in order of first appearance. */
static int categories(const flint_run_prompt *p, int n, int d, const char **cats) {
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (p[i].dataset != d) continue;
        int seen = 0;
        for (int k = 0; k < m && !seen; k++) seen = !strcmp(cats[k], p[i].item->category);
        if (!seen) cats[m++] = p[i].item->category;
    }
    return m;
}

static cJSON *prompt_json(const flint_run_prompt *q) {
    cJSON *o = cJSON_CreateObject();
    char h[32];
    cJSON_AddStringToObject(o, "id", q->item->id);
    cJSON_AddNumberToObject(o, "record", q->item->record);
    cJSON_AddStringToObject(o, "category", q->item->category);
    cJSON_AddNumberToObject(o, "seed", (double)q->seed);
    if (q->skipped) {
        cJSON_AddBoolToObject(o, "skipped", 1);
        return o;
    }
    cJSON_AddNumberToObject(o, "prompt_tokens", q->prompt_tokens);
    cJSON_AddNumberToObject(o, "output_tokens", q->output_tokens);
    cJSON_AddNumberToObject(o, "turns", q->turns);
    const char *fin = flint_finish_reason_name(q->finish);
    cJSON_AddStringToObject(o, "finish_reason", fin ? fin : "none");
    cJSON_AddNumberToObject(o, "steps", (double)q->stats.steps);
    cJSON_AddNumberToObject(o, "draft_tokens", (double)q->stats.draft_tokens);
    cJSON_AddNumberToObject(o, "accepted", (double)q->stats.accepted);
    double al = flint_prompt_al(q);
    cJSON_AddItemToObject(o, "acceptance_length", isfinite(al) ? cJSON_CreateNumber(al) : cJSON_CreateNull());
    snprintf(h, sizeof h, "%016" PRIx64, q->hash);
    cJSON_AddStringToObject(o, "output_hash", h);
    return o;
}

static void md_summary_row(FILE *f, const char *name, const flint_al_summary *s) {
    char a[32], lo[32], hi[32], pm[32], r[32];
    fprintf(f, "| %s | %d | %ld | %s [%s, %s] | %s | %s | %.1f |\n", name, s->prompts, s->output_tokens,
            flint_evals_fmt(a, sizeof a, s->al, 3), flint_evals_fmt(lo, sizeof lo, s->al_lo, 3),
            flint_evals_fmt(hi, sizeof hi, s->al_hi, 3), flint_evals_fmt(pm, sizeof pm, s->al_prompt_mean, 3),
            flint_evals_fmt(r, sizeof r, s->stats.draft_tokens ? flint_spec_stats_acceptance_rate(&s->stats) : NAN, 3),
            flint_al_tokens_per_s_user(s));
}

static void md_positions(FILE *f, const flint_al_summary *s, int K) {
    fprintf(f, "| position |");
    for (int i = 0; i < K; i++) fprintf(f, " %d |", i + 1);
    fprintf(f, "\n|---|");
    for (int i = 0; i < K; i++) fprintf(f, "---|");
    char b[32];
    fprintf(f, "\n| acceptance (of steps) |");
    for (int i = 0; i < K; i++) fprintf(f, " %s |", flint_evals_fmt(b, sizeof b, flint_al_uncond(s, i), 3));
    fprintf(f, "\n| conditional (given the previous) |");
    for (int i = 0; i < K; i++) fprintf(f, " %s |", flint_evals_fmt(b, sizeof b, flint_al_cond(s, i), 3));
    fprintf(f, "\n\nAcceptance histogram (steps that accepted exactly j drafts):");
    for (int j = 0; j <= K; j++) fprintf(f, " %d: %" PRId64 "%s", j, s->stats.hist[j], j < K ? "," : "");
    fprintf(f, "\n\n");
}

int flint_eval_run(const flint_eval_options *o, flint_err *err) {
    int rc = -1, n_ds = 0, n = 0, chat_format = 0;
    flint_dataset **ds = NULL;
    flint_run_prompt *p = NULL;
    flint_engine *e = NULL;
    flint_runner *run = NULL;
    char *owned = NULL, *md = NULL, *path_md = NULL, *path_svg = NULL;
    int *idx = NULL;
    cJSON *root = NULL;
    flint_al_summary *sum = NULL;

    if (flint_evals_load_datasets(o->datasets, o->n_datasets, o->data_dir, &ds, &n_ds, err)) goto done;
    flint_engine_options eo;
    flint_engine_options_default(&eo);
    if (flint_evals_engine_options(&eo, o->model_dir, o->spec_config, o->default_drafter, NULL, &owned, err)) goto done;
    eo.max_seqs = 2 * o->batch_size;
    eo.n_threads = o->threads;
    eo.max_model_len = o->max_model_len;
    double t0 = flint_evals_now_ms();
    if (!(e = flint_engine_open(&eo, err))) goto done;
    double load_ms = flint_evals_now_ms() - t0;
    if (flint_evals_chat_format(e, o->chat, o->chat_template, &chat_format, err)) goto done;
    int K = flint_engine_num_speculative_tokens(e);

    p = flint_evals_make_prompts(ds, n_ds, o->num_prompts, o->sampling.seed, &n);
    flint_runner_config rc_ = {.batch = o->batch_size, .max_tokens = o->max_tokens, .sampling = o->sampling,
                               .ignore_eos = o->ignore_eos, .chat_format = chat_format, .multi_turn = o->multi_turn};
    run = flint_runner_new(e, p, n, &rc_);
    double t1 = flint_evals_now_ms();
    int st;
    while ((st = flint_runner_step(run, err)) == 1) {}
    if (st < 0) goto done;
    double wall_ms = flint_evals_now_ms() - t1;

    /* ---- summaries ---- */
    idx = flint_xmalloc(sizeof(int) * (size_t)(n + 1));
    root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "command", "eval");
    cJSON_AddStringToObject(root, "model", o->model_dir);
    cJSON_AddStringToObject(root, "drafter", eo.drafter_dir);
    cJSON *cfg = cJSON_AddObjectToObject(root, "config");
    cJSON_AddNumberToObject(cfg, "num_speculative_tokens", K);
    cJSON_AddStringToObject(cfg, "draft_sample_method", eo.draft_greedy ? "greedy" : "probabilistic");
    cJSON_AddBoolToObject(cfg, "dynamic_draft", eo.dynamic_draft > 0); /* fixed K unless the config asks */
    cJSON_AddNumberToObject(cfg, "temperature", o->sampling.temperature);
    cJSON_AddNumberToObject(cfg, "top_p", o->sampling.top_p);
    cJSON_AddNumberToObject(cfg, "top_k", o->sampling.top_k);
    cJSON_AddNumberToObject(cfg, "min_p", o->sampling.min_p);
    cJSON_AddNumberToObject(cfg, "seed", (double)o->sampling.seed);
    cJSON_AddStringToObject(cfg, "seed_rule", "the prompt with 0-based record number i in its file uses seed + i");
    cJSON_AddNumberToObject(cfg, "max_tokens", o->max_tokens);
    cJSON_AddNumberToObject(cfg, "num_prompts", o->num_prompts);
    cJSON_AddBoolToObject(cfg, "multi_turn", o->multi_turn);
    cJSON_AddStringToObject(cfg, "chat_template", flint_chat_format_name(chat_format));
    cJSON_AddBoolToObject(cfg, "ignore_eos", o->ignore_eos);
    cJSON_AddNumberToObject(cfg, "max_model_len", flint_engine_max_model_len(e));
    cJSON_AddNumberToObject(cfg, "bootstrap_resamples", o->bootstrap);
    cJSON_AddNumberToObject(cfg, "bootstrap_seed", (double)FLINT_EVAL_BOOT_SEED);
    cJSON_AddNumberToObject(cfg, "confidence_level", o->level);
    cJSON *jds = cJSON_AddArrayToObject(root, "datasets");
    cJSON *timing = cJSON_CreateObject();
    cJSON *tds = cJSON_AddObjectToObject(timing, "datasets");
    sum = flint_xcalloc((size_t)n_ds, sizeof *sum);

    size_t md_len = 0;
    FILE *f = open_memstream(&md, &md_len);
    fprintf(f, "# flint eval\n\n");
    fprintf(f, "- model `%s`, drafter `%s` (K = %d, %s drafts, chat template %s)\n", o->model_dir, eo.drafter_dir, K,
            eo.draft_greedy ? "greedy" : "probabilistic", flint_chat_format_name(chat_format));
    fprintf(f, "- temperature %g, top-p %g, top-k %d, min-p %g; seed %" PRIu64 " (record i of a file uses seed + i); "
               "max tokens %d per turn; %s\n", o->sampling.temperature, o->sampling.top_p, o->sampling.top_k,
            o->sampling.min_p, o->sampling.seed, o->max_tokens, o->multi_turn ? "all turns" : "first turns only");
    fprintf(f, "- mean AL = 1 + accepted drafts / verify steps, pooled over the prompts (bonus token counted); "
               "%.0f%% percentile bootstrap interval over prompts (%d resamples)\n\n", 100 * o->level, o->bootstrap);
    fprintf(f, "| dataset | prompts | output tokens | mean AL [%.0f%% CI] | mean of per-prompt AL | draft acceptance | "
               "tok/s per user |\n|---|---|---|---|---|---|---|\n", 100 * o->level);
    for (int d = 0; d < n_ds; d++) {
        int m = select_prompts(p, n, d, NULL, idx);
        flint_al_summarize(p, idx, m, o->bootstrap, o->level, &sum[d]);
        md_summary_row(f, ds[d]->name, &sum[d]);
        if (sum[d].prompts == 0) {
            fclose(f);
            flint_err_set(err, FLINT_ERR_INVALID, "every prompt of %s is longer than the context (%d tokens) minus "
                          "--max-tokens %d", ds[d]->name, flint_engine_max_model_len(e), o->max_tokens);
            goto done;
        }
        if (sum[d].skipped)
            flint_log_warn("eval: %s: %d of %d prompts skipped (prompt + --max-tokens over the context of %d)",
                           ds[d]->name, sum[d].skipped, m, flint_engine_max_model_len(e));
    }
    fprintf(f, "\n");
    for (int d = 0; d < n_ds; d++) {
        cJSON *jd = cJSON_CreateObject();
        cJSON_AddItemToArray(jds, jd);
        cJSON_AddStringToObject(jd, "name", ds[d]->name);
        char *file = flint_evals_basename(ds[d]->path);
        cJSON_AddStringToObject(jd, "file", file);
        free(file);
        cJSON_AddItemToObject(jd, "summary", flint_al_summary_json(&sum[d], K, o->level));
        cJSON *td = cJSON_AddObjectToObject(tds, ds[d]->name);
        cJSON_AddNumberToObject(td, "tokens_per_s_per_user", flint_al_tokens_per_s_user(&sum[d]));
        cJSON *tcat = cJSON_AddObjectToObject(td, "categories");
        fprintf(f, "## %s\n\n", ds[d]->name);
        if (sum[d].skipped)
            fprintf(f, "%d prompt(s) skipped: prompt + max tokens exceed the context of %d tokens.\n\n", sum[d].skipped,
                    flint_engine_max_model_len(e));
        md_positions(f, &sum[d], K);
        const char **cats = flint_xmalloc(sizeof(char *) * (size_t)(n + 1));
        int nc = categories(p, n, d, cats);
        cJSON *jc = cJSON_AddArrayToObject(jd, "categories");
        if (nc > 1) fprintf(f, "| category | prompts | output tokens | mean AL [%.0f%% CI] | mean of per-prompt AL | "
                               "draft acceptance | tok/s per user |\n|---|---|---|---|---|---|---|\n", 100 * o->level);
        for (int c = 0; c < nc; c++) {
            int m = select_prompts(p, n, d, cats[c], idx);
            flint_al_summary cs;
            flint_al_summarize(p, idx, m, o->bootstrap, o->level, &cs);
            cJSON *one = flint_al_summary_json(&cs, K, o->level);
            cJSON_AddItemToObject(one, "name", cJSON_CreateString(cats[c]));
            cJSON_AddItemToArray(jc, one);
            cJSON_AddNumberToObject(tcat, cats[c], flint_al_tokens_per_s_user(&cs));
            if (nc > 1) md_summary_row(f, cats[c], &cs);
        }
        if (nc > 1) fprintf(f, "\n");
        free(cats);
        cJSON *jp = cJSON_AddArrayToObject(jd, "per_prompt");
        int m = select_prompts(p, n, d, NULL, idx);
        for (int i = 0; i < m; i++) cJSON_AddItemToArray(jp, prompt_json(&p[idx[i]]));
    }
    long out_tokens = 0;
    for (int i = 0; i < n; i++) out_tokens += p[i].output_tokens;
    double tps = wall_ms > 0 ? out_tokens / (wall_ms / 1e3) : 0;
    long steps = flint_runner_steps(run);
    cJSON_AddNumberToObject(timing, "load_s", load_ms / 1e3);
    cJSON_AddNumberToObject(timing, "wall_s", wall_ms / 1e3);
    cJSON_AddNumberToObject(timing, "engine_steps", (double)steps);
    cJSON_AddNumberToObject(timing, "mean_step_ms", steps ? flint_runner_busy_ms(run) / steps : 0);
    cJSON_AddNumberToObject(timing, "output_tokens_per_s", tps);
    cJSON_AddNumberToObject(timing, "batch_size", o->batch_size);
    cJSON_AddItemToObject(root, "timing", timing);
    fprintf(f, "## Timing\n\n%ld output tokens in %.2f s with up to %d prompts at once: %.1f tokens/s in total; %ld "
               "engine steps, %.2f ms each on average; model load %.2f s. Tokens/s per user = a prompt's output "
               "tokens over the time it was in the batch (prefill included).\n", out_tokens, wall_ms / 1e3,
            o->batch_size, tps, steps, steps ? flint_runner_busy_ms(run) / steps : 0, load_ms / 1e3);
    fclose(f);

    if (!o->quiet) fputs(md, stdout);
    if (o->output) {
        if (flint_evals_write_json(o->output, root, err)) goto done;
        path_md = flint_evals_sibling(o->output, ".md");
        path_svg = flint_evals_sibling(o->output, ".svg");
        if (flint_evals_write_text(path_md, md, err)) goto done;
        /* per-position acceptance: unconditional solid, conditional dashed, one colour per dataset */
        double xs[FLINT_MAX_DRAFT], *ys = flint_xmalloc(sizeof(double) * (size_t)(2 * n_ds * (K + 1)));
        flint_svg_series *ser = flint_xcalloc((size_t)(2 * n_ds), sizeof *ser);
        char **names = flint_xcalloc((size_t)(2 * n_ds), sizeof(char *));
        for (int i = 0; i < K; i++) xs[i] = i + 1;
        for (int d = 0; d < n_ds; d++)
            for (int v = 0; v < 2; v++) {
                double *y = ys + (size_t)(2 * d + v) * (K + 1);
                for (int i = 0; i < K; i++) y[i] = v ? flint_al_cond(&sum[d], i) : flint_al_uncond(&sum[d], i);
                size_t l = strlen(ds[d]->name) + 64;
                names[2 * d + v] = flint_xmalloc(l);
                snprintf(names[2 * d + v], l, "%s %s (AL %.2f)", ds[d]->name, v ? "conditional" : "unconditional",
                         sum[d].al);
                ser[2 * d + v] = (flint_svg_series){.name = names[2 * d + v], .n = K, .x = xs, .y = y, .color = d,
                                                    .dashed = v};
            }
        char title[256];
        snprintf(title, sizeof title, "Per-position acceptance, K = %d, T = %g", K, o->sampling.temperature);
        flint_svg_plot pl = {.title = title, .xlabel = "draft position", .ylabel = "acceptance rate", .xmin = 1,
                             .xmax = K > 1 ? K : 2, .ymin = 0, .ymax = 1, .x_integer = 1, .lines = 1};
        int wrc = flint_svg_write(path_svg, &pl, ser, 2 * n_ds, err);
        for (int i = 0; i < 2 * n_ds; i++) free(names[i]);
        free(names);
        free(ser);
        free(ys);
        if (wrc) goto done;
        flint_log_info("eval: wrote %s, %s, %s", o->output, path_md, path_svg);
    }
    rc = 0;
done:
    cJSON_Delete(root);
    free(md);
    free(path_md);
    free(path_svg);
    free(idx);
    free(sum);
    flint_runner_free(run);
    flint_run_prompts_free(p, n);
    flint_engine_close(e);
    free(owned);
    for (int d = 0; d < n_ds; d++) flint_dataset_free(ds[d]);
    free(ds);
    return rc;
}
