/* `flint ab`: two drafter checkpoints, the same prompts and seeds, one process (see evals.h).
 *
 * Why two engines stepped alternately: both arms then see the same machine state (clock, cache,
 * thermal drift) within one step of each other, which matters for the tokens/s comparison; the
 * step order flips every round so neither arm always runs first. Acceptance itself cannot drift:
 * a request's tokens depend only on its prompt, its seed and its drafter.
 *
 * The unit of analysis is the prompt: d_i = AL_B(i) - AL_A(i) over prompts that had speculative
 * steps in both arms. The verdict needs the Wilcoxon p < alpha and a bootstrap CI of mean(d) that
 * excludes 0 (stats.h); the sign test is reported beside it as the assumption-free check. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/chat.h"
#include "core/json.h"
#include "core/log.h"
#include "evals/evals_internal.h"
#include "evals/stats.h"
#include "evals/svg.h"

typedef struct arm {
    const char *label;
    char *owned_label;
    char *owned_cfg;
    flint_engine_options eo;
    flint_engine *e;
    flint_run_prompt *p;
    flint_runner *run;
    double load_ms;
} arm;

/* Printed to 4 decimals: values that round to 0 print as +0.0000, never -0.0000. */
static double z4(double v) { return fabs(v) < 5e-5 ? 0.0 : v; }

/* The paired differences over the prompts idx (NULL: all n) into d; returns how many. */
static int paired_diffs(const arm *A, const arm *B, const int *idx, int n, double *d) {
    int m = 0;
    for (int k = 0; k < n; k++) {
        int i = idx ? idx[k] : k;
        const flint_run_prompt *a = &A->p[i], *b = &B->p[i];
        if (a->skipped || b->skipped || a->stats.steps == 0 || b->stats.steps == 0) continue;
        d[m++] = flint_prompt_al(b) - flint_prompt_al(a);
    }
    return m;
}

static cJSON *paired_json(const flint_stats_paired *s, int excluded) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "prompts", s->n);
    cJSON_AddNumberToObject(o, "prompts_excluded", excluded);
    cJSON_AddItemToObject(o, "mean_difference", isfinite(s->mean) ? cJSON_CreateNumber(s->mean) : cJSON_CreateNull());
    cJSON *ci = cJSON_AddArrayToObject(o, "mean_difference_ci");
    cJSON_AddItemToArray(ci, isfinite(s->lo) ? cJSON_CreateNumber(s->lo) : cJSON_CreateNull());
    cJSON_AddItemToArray(ci, isfinite(s->hi) ? cJSON_CreateNumber(s->hi) : cJSON_CreateNull());
    cJSON *sg = cJSON_AddObjectToObject(o, "sign_test");
    cJSON_AddNumberToObject(sg, "positive", s->sign.n_pos);
    cJSON_AddNumberToObject(sg, "negative", s->sign.n_neg);
    cJSON_AddNumberToObject(sg, "zero", s->sign.n_zero);
    cJSON_AddNumberToObject(sg, "p", s->sign.p);
    cJSON *w = cJSON_AddObjectToObject(o, "wilcoxon");
    cJSON_AddNumberToObject(w, "n", s->wilcoxon.n);
    cJSON_AddNumberToObject(w, "zero", s->wilcoxon.n_zero);
    cJSON_AddNumberToObject(w, "statistic", s->wilcoxon.statistic);
    cJSON_AddNumberToObject(w, "w_plus", s->wilcoxon.w_plus);
    cJSON_AddNumberToObject(w, "w_minus", s->wilcoxon.w_minus);
    cJSON_AddStringToObject(w, "method", s->wilcoxon.exact ? "exact" : "normal approximation");
    if (!s->wilcoxon.exact) cJSON_AddNumberToObject(w, "z", s->wilcoxon.z);
    cJSON_AddNumberToObject(w, "p", s->wilcoxon.p);
    cJSON_AddBoolToObject(o, "significant", s->significant);
    return o;
}

static void verdict_text(char *buf, size_t cap, const flint_stats_paired *in, const char *la, const char *lb) {
    flint_stats_paired c = *in, *s = &c;
    s->mean = z4(s->mean);
    s->lo = z4(s->lo);
    s->hi = z4(s->hi);
    if (s->n == 0) {
        snprintf(buf, cap, "no significant difference: no prompt had speculative steps in both arms");
    } else if (s->significant && s->mean > 0) {
        snprintf(buf, cap, "B (%s) better than A (%s) by %+.4f AL [%+.4f, %+.4f], p = %.3g (Wilcoxon signed-rank, "
                 "n = %d; sign test p = %.3g)", lb, la, s->mean, s->lo, s->hi, s->wilcoxon.p, s->wilcoxon.n, s->sign.p);
    } else if (s->significant) {
        snprintf(buf, cap, "A (%s) better than B (%s) by %+.4f AL [%+.4f, %+.4f], p = %.3g (Wilcoxon signed-rank, "
                 "n = %d; sign test p = %.3g)", la, lb, -s->mean, -s->hi, -s->lo, s->wilcoxon.p, s->wilcoxon.n,
                 s->sign.p);
    } else {
        snprintf(buf, cap, "no significant difference between A (%s) and B (%s): mean AL difference B - A = %+.4f "
                 "[%+.4f, %+.4f], p = %.3g (Wilcoxon signed-rank, n = %d; sign test p = %.3g)", la, lb, s->mean, s->lo,
                 s->hi, s->wilcoxon.p, s->wilcoxon.n, s->sign.p);
    }
}

/* One comparison (overall, a dataset or a category): summaries of both arms, the paired test,
 * a JSON object and a markdown table row. */
static cJSON *compare(const flint_eval_options *o, const arm *A, const arm *B, const int *idx, int n, int K,
                      const char *name, FILE *md, flint_stats_paired *out_paired) {
    flint_al_summary sa, sb;
    flint_al_summarize(A->p, idx, n, o->bootstrap, o->level, &sa);
    flint_al_summarize(B->p, idx, n, o->bootstrap, o->level, &sb);
    double *d = flint_xmalloc(sizeof(double) * (size_t)(n + 1));
    int m = paired_diffs(A, B, idx, n, d);
    flint_stats_paired ps;
    flint_stats_paired_test(d, m, o->bootstrap, o->level, o->alpha, FLINT_EVAL_BOOT_SEED, &ps);
    free(d);
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "name", name);
    cJSON_AddItemToObject(j, "paired", paired_json(&ps, sa.prompts - m));
    cJSON_AddItemToObject(j, "a", flint_al_summary_json(&sa, K, o->level));
    cJSON_AddItemToObject(j, "b", flint_al_summary_json(&sb, K, o->level));
    if (md) {
        char x[6][32];
        fprintf(md, "| %s | %d | %s [%s, %s] | %s [%s, %s] | %+.4f [%+.4f, %+.4f] | %.3g | %.3g | %s |\n", name, ps.n,
                flint_evals_fmt(x[0], 32, sa.al, 3), flint_evals_fmt(x[1], 32, sa.al_lo, 3),
                flint_evals_fmt(x[2], 32, sa.al_hi, 3), flint_evals_fmt(x[3], 32, sb.al, 3),
                flint_evals_fmt(x[4], 32, sb.al_lo, 3), flint_evals_fmt(x[5], 32, sb.al_hi, 3), z4(ps.mean), z4(ps.lo),
                z4(ps.hi),
                ps.wilcoxon.p, ps.sign.p, ps.significant ? (ps.mean > 0 ? "B better" : "A better") : "no difference");
    }
    if (out_paired) *out_paired = ps;
    return j;
}

static void md_table_head(FILE *md, const char *what, const char *la, const char *lb, double level) {
    fprintf(md, "| %s | prompts | A %s: AL [%.0f%% CI] | B %s: AL [%.0f%% CI] | mean B - A [%.0f%% CI] | Wilcoxon p | "
                "sign p | verdict |\n|---|---|---|---|---|---|---|---|\n", what, la, 100 * level, lb, 100 * level,
            100 * level);
}

static int mkdir_p(const char *dir, flint_err *err) {
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", dir);
    for (char *s = buf + 1; *s; s++)
        if (*s == '/') {
            *s = 0;
            mkdir(buf, 0777);
            *s = '/';
        }
    if (mkdir(buf, 0777) && !flint_file_exists(buf)) {
        struct stat st;
        if (stat(buf, &st) || !S_ISDIR(st.st_mode))
            return flint_err_set(err, FLINT_ERR_IO, "cannot create the output directory %s", dir);
    }
    return 0;
}

int flint_ab_run(const flint_eval_options *o, flint_err *err) {
    int rc = -1, n_ds = 0, n = 0, chat_format = 0;
    flint_dataset **ds = NULL;
    arm arms[2];
    memset(arms, 0, sizeof arms);
    arm *A = &arms[0], *B = &arms[1];
    char *md = NULL, *path = NULL;
    int *idx = NULL;
    cJSON *root = NULL;

    if (mkdir_p(o->output, err)) goto done;
    if (flint_evals_load_datasets(o->datasets, o->n_datasets, o->data_dir, &ds, &n_ds, err)) goto done;
    const char *dirs[2] = {o->drafter_a, o->drafter_b}, *labels[2] = {o->label_a, o->label_b};
    for (int k = 0; k < 2; k++) {
        arm *x = &arms[k];
        flint_engine_options_default(&x->eo);
        if (flint_evals_engine_options(&x->eo, o->model_dir, o->spec_config, NULL, dirs[k], &x->owned_cfg, err))
            goto done;
        x->eo.max_seqs = 2 * o->batch_size;
        x->eo.n_threads = o->threads;
        x->eo.max_model_len = o->max_model_len;
        x->label = labels[k] ? labels[k] : (x->owned_label = flint_evals_basename(dirs[k]));
        double t0 = flint_evals_now_ms();
        if (!(x->e = flint_engine_open(&x->eo, err))) {
            flint_err_prefix(err, "arm %c (%s): ", 'A' + k, dirs[k]);
            goto done;
        }
        x->load_ms = flint_evals_now_ms() - t0;
    }
    if (flint_engine_num_speculative_tokens(A->e) != flint_engine_num_speculative_tokens(B->e)) {
        flint_err_set(err, FLINT_ERR_INVALID, "the arms draft different lengths (K = %d and %d); give "
                      "num_speculative_tokens in --speculative-config", flint_engine_num_speculative_tokens(A->e),
                      flint_engine_num_speculative_tokens(B->e));
        goto done;
    }
    int K = flint_engine_num_speculative_tokens(A->e);
    if (flint_evals_chat_format(A->e, o->chat, o->chat_template, &chat_format, err)) goto done;
    flint_runner_config rcfg = {.batch = o->batch_size, .max_tokens = o->max_tokens, .sampling = o->sampling,
                                .ignore_eos = o->ignore_eos, .chat_format = chat_format, .multi_turn = o->multi_turn};
    for (int k = 0; k < 2; k++) {
        uint64_t seed = k == 1 && o->has_seed_b ? o->seed_b : o->sampling.seed;
        arms[k].p = flint_evals_make_prompts(ds, n_ds, o->num_prompts, seed, &n);
        arms[k].run = flint_runner_new(arms[k].e, arms[k].p, n, &rcfg);
    }
    /* interleave: one step of each arm per round, the order flipping every round */
    double t1 = flint_evals_now_ms();
    int live[2] = {1, 1};
    for (long round = 0; live[0] || live[1]; round++)
        for (int j = 0; j < 2; j++) {
            int k = (int)((round + j) & 1);
            if (!live[k]) continue;
            int st = flint_runner_step(arms[k].run, err);
            if (st < 0) {
                flint_err_prefix(err, "arm %c: ", 'A' + k);
                goto done;
            }
            live[k] = st;
        }
    double wall_ms = flint_evals_now_ms() - t1;

    /* ---- analysis and reports ---- */
    idx = flint_xmalloc(sizeof(int) * (size_t)(n + 1));
    root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "command", "ab");
    cJSON_AddStringToObject(root, "model", o->model_dir);
    cJSON *jarms = cJSON_AddArrayToObject(root, "arms");
    for (int k = 0; k < 2; k++) {
        cJSON *a = cJSON_CreateObject();
        cJSON_AddStringToObject(a, "arm", k ? "B" : "A");
        cJSON_AddStringToObject(a, "label", arms[k].label);
        cJSON_AddStringToObject(a, "drafter", arms[k].eo.drafter_dir);
        cJSON_AddItemToArray(jarms, a);
    }
    cJSON *cfg = cJSON_AddObjectToObject(root, "config");
    cJSON_AddNumberToObject(cfg, "num_speculative_tokens", K);
    cJSON_AddStringToObject(cfg, "draft_sample_method", A->eo.draft_greedy ? "greedy" : "probabilistic");
    cJSON_AddBoolToObject(cfg, "dynamic_draft", A->eo.dynamic_draft > 0); /* fixed K unless the config asks */
    cJSON_AddNumberToObject(cfg, "temperature", o->sampling.temperature);
    cJSON_AddNumberToObject(cfg, "top_p", o->sampling.top_p);
    cJSON_AddNumberToObject(cfg, "top_k", o->sampling.top_k);
    cJSON_AddNumberToObject(cfg, "min_p", o->sampling.min_p);
    cJSON_AddNumberToObject(cfg, "seed", (double)o->sampling.seed);
    cJSON_AddStringToObject(cfg, "seed_rule", "the prompt with 0-based record number i in its file uses seed + i in "
                            "both arms");
    if (o->has_seed_b) cJSON_AddNumberToObject(cfg, "seed_b", (double)o->seed_b);
    cJSON_AddNumberToObject(cfg, "max_tokens", o->max_tokens);
    cJSON_AddNumberToObject(cfg, "num_prompts", o->num_prompts);
    cJSON_AddBoolToObject(cfg, "multi_turn", o->multi_turn);
    cJSON_AddStringToObject(cfg, "chat_template", flint_chat_format_name(chat_format));
    cJSON_AddNumberToObject(cfg, "bootstrap_resamples", o->bootstrap);
    cJSON_AddNumberToObject(cfg, "confidence_level", o->level);
    cJSON_AddNumberToObject(cfg, "alpha", o->alpha);
    cJSON_AddStringToObject(cfg, "tests", "per-prompt AL differences B - A over prompts with speculative steps in both "
                            "arms; percentile bootstrap CI of the mean; exact sign test; Wilcoxon signed-rank (zeros "
                            "dropped, average ranks for ties, exact when <= 50 non-zero and untied, else normal "
                            "approximation with tie correction); significant = Wilcoxon p < alpha and CI excludes 0");

    size_t md_len = 0;
    FILE *f = open_memstream(&md, &md_len);
    /* the body of the report is written to a second stream so the verdict can come first */
    char *body = NULL;
    size_t body_len = 0;
    FILE *b = open_memstream(&body, &body_len);
    fprintf(b, "## Acceptance length\n\n");
    md_table_head(b, "set", A->label, B->label, o->level);
    flint_stats_paired overall;
    cJSON *jo = compare(o, A, B, NULL, n, K, "all", b, &overall);
    cJSON_AddItemToObject(root, "overall", jo);
    cJSON *jds = cJSON_AddArrayToObject(root, "datasets");
    for (int d = 0; d < n_ds; d++) {
        int m = 0;
        for (int i = 0; i < n; i++)
            if (A->p[i].dataset == d) idx[m++] = i;
        /* with one dataset its table line would repeat "all" */
        cJSON_AddItemToArray(jds, compare(o, A, B, idx, m, K, ds[d]->name, n_ds > 1 ? b : NULL, NULL));
    }
    fprintf(b, "\n");
    for (int d = 0; d < n_ds; d++) {
        const char **cats = flint_xmalloc(sizeof(char *) * (size_t)(n + 1));
        int nc = 0;
        for (int i = 0; i < n; i++) {
            if (A->p[i].dataset != d) continue;
            int seen = 0;
            for (int c = 0; c < nc && !seen; c++) seen = !strcmp(cats[c], A->p[i].item->category);
            if (!seen) cats[nc++] = A->p[i].item->category;
        }
        cJSON *jc = cJSON_AddArrayToObject(cJSON_GetArrayItem(jds, d), "categories");
        if (nc > 1) {
            fprintf(b, "### %s by category\n\n", ds[d]->name);
            md_table_head(b, "category", A->label, B->label, o->level);
        }
        for (int c = 0; c < nc; c++) {
            int m = 0;
            for (int i = 0; i < n; i++)
                if (A->p[i].dataset == d && !strcmp(A->p[i].item->category, cats[c])) idx[m++] = i;
            cJSON_AddItemToArray(jc, compare(o, A, B, idx, m, K, cats[c], nc > 1 ? b : NULL, NULL));
        }
        if (nc > 1) fprintf(b, "\n(per-category tests are descriptive: no correction for multiple comparisons)\n\n");
        free(cats);
    }
    /* per-position acceptance of both arms, pooled over everything */
    flint_al_summary s2[2];
    for (int k = 0; k < 2; k++) flint_al_summarize(arms[k].p, NULL, n, o->bootstrap, o->level, &s2[k]);
    fprintf(b, "## Per-position acceptance\n\n| arm | rate |");
    for (int i = 0; i < K; i++) fprintf(b, " %d |", i + 1);
    fprintf(b, "\n|---|---|");
    for (int i = 0; i < K; i++) fprintf(b, "---|");
    fprintf(b, "\n");
    for (int k = 0; k < 2; k++)
        for (int v = 0; v < 2; v++) {
            fprintf(b, "| %c %s | %s |", 'A' + k, arms[k].label, v ? "conditional" : "of steps");
            char x[32];
            for (int i = 0; i < K; i++) {
                double r = v ? flint_al_cond(&s2[k], i) : flint_al_uncond(&s2[k], i);
                fprintf(b, " %s |", flint_evals_fmt(x, sizeof x, r, 3));
            }
            fprintf(b, "\n");
        }
    char ra[32], rb[32];
    double rate[2];
    for (int k = 0; k < 2; k++)
        rate[k] = s2[k].stats.draft_tokens ? flint_spec_stats_acceptance_rate(&s2[k].stats) : NAN;
    fprintf(b, "\nDraft acceptance rate: A %s, B %s.\n\n", flint_evals_fmt(ra, sizeof ra, rate[0], 4),
            flint_evals_fmt(rb, sizeof rb, rate[1], 4));
    /* per prompt */
    cJSON *jp = cJSON_AddArrayToObject(root, "per_prompt");
    int same = 0, runs = 0;
    for (int i = 0; i < n; i++) {
        const flint_run_prompt *a = &A->p[i], *bb = &B->p[i];
        cJSON *q = cJSON_CreateObject();
        cJSON_AddStringToObject(q, "dataset", ds[a->dataset]->name);
        cJSON_AddStringToObject(q, "id", a->item->id);
        cJSON_AddStringToObject(q, "category", a->item->category);
        cJSON_AddNumberToObject(q, "seed", (double)a->seed);
        double la = flint_prompt_al(a), lb = flint_prompt_al(bb);
        cJSON_AddItemToObject(q, "al_a", isfinite(la) ? cJSON_CreateNumber(la) : cJSON_CreateNull());
        cJSON_AddItemToObject(q, "al_b", isfinite(lb) ? cJSON_CreateNumber(lb) : cJSON_CreateNull());
        cJSON_AddItemToObject(q, "difference", isfinite(la) && isfinite(lb) ? cJSON_CreateNumber(lb - la)
                                                                           : cJSON_CreateNull());
        cJSON_AddNumberToObject(q, "output_tokens_a", a->output_tokens);
        cJSON_AddNumberToObject(q, "output_tokens_b", bb->output_tokens);
        cJSON_AddBoolToObject(q, "same_output", a->hash == bb->hash && !a->skipped);
        if (a->skipped) cJSON_AddBoolToObject(q, "skipped", 1);
        same += a->hash == bb->hash && !a->skipped;
        runs += !a->skipped;
        cJSON_AddItemToArray(jp, q);
    }
    /* speed */
    cJSON *timing = cJSON_CreateObject();
    cJSON_AddNumberToObject(timing, "wall_s", wall_ms / 1e3);
    fprintf(b, "## Speed (same process, steps alternating)\n\n| arm | output tokens | engine time s | tokens/s | "
               "tokens/s per user | load s |\n|---|---|---|---|---|---|\n");
    for (int k = 0; k < 2; k++) {
        double busy = flint_runner_busy_ms(arms[k].run);
        double tps = busy > 0 ? s2[k].output_tokens / (busy / 1e3) : 0;
        cJSON *t = cJSON_AddObjectToObject(timing, k ? "b" : "a");
        cJSON_AddNumberToObject(t, "engine_s", busy / 1e3);
        cJSON_AddNumberToObject(t, "engine_steps", (double)flint_runner_steps(arms[k].run));
        cJSON_AddNumberToObject(t, "output_tokens_per_s", tps);
        cJSON_AddNumberToObject(t, "tokens_per_s_per_user", flint_al_tokens_per_s_user(&s2[k]));
        cJSON_AddNumberToObject(t, "load_s", arms[k].load_ms / 1e3);
        fprintf(b, "| %c %s | %ld | %.2f | %.1f | %.1f | %.2f |\n", 'A' + k, arms[k].label, s2[k].output_tokens,
                busy / 1e3, tps, flint_al_tokens_per_s_user(&s2[k]), arms[k].load_ms / 1e3);
    }
    cJSON_AddItemToObject(root, "timing", timing);
    if (o->has_seed_b)
        fprintf(b, "\n**Arm B used its own seeds (--seed-b %" PRIu64 "): the arms are paired by prompt only, not by "
                   "random stream (an A/A calibration run).**\n", o->seed_b);
    fprintf(b, "\n## Method\n\nBoth arms ran the same %d prompts with the same seeds (record i of a file: seed %" PRIu64
               " + i); the two engines were stepped alternately in one process. AL = 1 + accepted drafts / verify "
               "steps (bonus token counted), per prompt for the paired tests and pooled over prompts for the "
               "per-arm means. The unit is the prompt: d = AL_B - AL_A over the %d prompts with speculative steps "
               "in both arms; the mean's %.0f%% CI is a percentile bootstrap (%d resamples, fixed seed); the sign "
               "test is exact; the Wilcoxon signed-rank test drops zero differences, gives ties their average "
               "rank and is exact for at most 50 untied non-zero differences, else the normal approximation with "
               "the tie correction (no continuity correction). A difference is called when the Wilcoxon p < %g and "
               "the CI excludes 0. %d of %d prompts produced identical output in both arms%s.\n",
            n, o->sampling.seed, overall.n, 100 * o->level, o->bootstrap, o->alpha, same, runs,
            o->sampling.temperature == 0 ? " (at temperature 0 verification is greedy, so outputs should match)" : "");
    fclose(b);

    char verdict[1024];
    verdict_text(verdict, sizeof verdict, &overall, A->label, B->label);
    cJSON_AddStringToObject(root, "verdict", verdict);
    fprintf(f, "# flint ab: %s vs %s\n\n**%s**\n\n", A->label, B->label, verdict);
    fprintf(f, "- model `%s`; A = `%s`, B = `%s`\n- K = %d, %s drafts; temperature %g, top-p %g, top-k %d, min-p %g; "
               "max tokens %d per turn; %s; datasets:", o->model_dir, A->eo.drafter_dir, B->eo.drafter_dir, K,
            A->eo.draft_greedy ? "greedy" : "probabilistic", o->sampling.temperature, o->sampling.top_p,
            o->sampling.top_k, o->sampling.min_p, o->max_tokens, o->multi_turn ? "all turns" : "first turns only");
    for (int d = 0; d < n_ds; d++) fprintf(f, "%s %s", d ? "," : "", ds[d]->name);
    fprintf(f, " (%d prompts)\n\n%s", n, body);
    free(body);
    fclose(f);

    if (!o->quiet) fputs(md, stdout);
    printf("%s\n", verdict);
    size_t l = strlen(o->output) + 32;
    path = flint_xmalloc(l);
    snprintf(path, l, "%s/ab.json", o->output);
    if (flint_evals_write_json(path, root, err)) goto done;
    snprintf(path, l, "%s/report.md", o->output);
    if (flint_evals_write_text(path, md, err)) goto done;
    snprintf(path, l, "%s/acceptance.svg", o->output);
    {
        double xs[FLINT_MAX_DRAFT], ys[4][FLINT_MAX_DRAFT];
        char names[4][256];
        flint_svg_series ser[4];
        for (int i = 0; i < K; i++) xs[i] = i + 1;
        for (int k = 0; k < 2; k++)
            for (int v = 0; v < 2; v++) {
                for (int i = 0; i < K; i++)
                    ys[2 * k + v][i] = v ? flint_al_cond(&s2[k], i) : flint_al_uncond(&s2[k], i);
                snprintf(names[2 * k + v], sizeof names[0], "%c %s %s (AL %.2f)", 'A' + k, arms[k].label,
                         v ? "conditional" : "unconditional", s2[k].al);
                ser[2 * k + v] = (flint_svg_series){.name = names[2 * k + v], .n = K, .x = xs, .y = ys[2 * k + v],
                                                    .color = k, .dashed = v};
            }
        char title[256];
        snprintf(title, sizeof title, "Per-position acceptance, A vs B, K = %d, T = %g", K, o->sampling.temperature);
        flint_svg_plot pl = {.title = title, .xlabel = "draft position", .ylabel = "acceptance rate", .xmin = 1,
                             .xmax = K > 1 ? K : 2, .ymin = 0, .ymax = 1, .x_integer = 1, .lines = 1};
        if (flint_svg_write(path, &pl, ser, 4, err)) goto done;
    }
    flint_log_info("ab: wrote %s/{ab.json,report.md,acceptance.svg}", o->output);
    rc = 0;
done:
    cJSON_Delete(root);
    free(md);
    free(path);
    free(idx);
    for (int k = 0; k < 2; k++) {
        flint_runner_free(arms[k].run);
        flint_run_prompts_free(arms[k].p, n);
        flint_engine_close(arms[k].e);
        free(arms[k].owned_cfg);
        free(arms[k].owned_label);
    }
    for (int d = 0; d < n_ds; d++) flint_dataset_free(ds[d]);
    free(ds);
    return rc;
}
