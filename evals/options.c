/* Defaults and command-line flags of eval, ab and bench, in one place (see evals.h). Values are
 * validated fully here (no trailing junk, in range) so a bad flag is a usage error that names the
 * flag, before any model is loaded. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "evals/evals.h"
#include "verifier/engine.h" /* flint_graph_sizes_parse */
#include "target/target.h"

/* ==== value parsing ==== */

static int get_int(const char *flag, const char *v, long lo, long hi, int *out, flint_err *err) {
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi)
        return flint_err_set(err, FLINT_ERR_INVALID, "%s expects an integer in [%ld, %ld], got '%s'", flag, lo, hi, v);
    *out = (int)x;
    return 0;
}

static int get_double(const char *flag, const char *v, double lo, double hi, double *out, flint_err *err) {
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || end == v || *end || !isfinite(x) || x < lo || x > hi)
        return flint_err_set(err, FLINT_ERR_INVALID, "%s expects a number in [%g, %g], got '%s'", flag, lo, hi, v);
    *out = x;
    return 0;
}

static int get_float(const char *flag, const char *v, double lo, double hi, float *out, flint_err *err) {
    double x;
    if (get_double(flag, v, lo, hi, &x, err)) return -1;
    *out = (float)x;
    return 0;
}

static int get_u64(const char *flag, const char *v, uint64_t *out, flint_err *err) {
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (errno || end == v || *end || v[0] == '-')
        return flint_err_set(err, FLINT_ERR_INVALID, "%s expects a non-negative integer, got '%s'", flag, v);
    *out = x;
    return 0;
}

/* "1,4,16" -> ints in [lo, hi]; no duplicates. */
static int get_int_list(const char *flag, const char *v, long lo, long hi, int *out, int *n, flint_err *err) {
    int m = 0;
    const char *p = v;
    char buf[64];
    while (*p) {
        const char *c = strchr(p, ',');
        size_t l = c ? (size_t)(c - p) : strlen(p);
        if (l == 0 || l >= sizeof buf || m == FLINT_BENCH_MAX_GRID)
            return flint_err_set(err, FLINT_ERR_INVALID, "%s expects a comma-separated list of at most %d integers, "
                                 "got '%s'", flag, FLINT_BENCH_MAX_GRID, v);
        memcpy(buf, p, l);
        buf[l] = 0;
        if (get_int(flag, buf, lo, hi, &out[m], err)) return -1;
        for (int i = 0; i < m; i++)
            if (out[i] == out[m]) return flint_err_set(err, FLINT_ERR_INVALID, "%s lists %d twice", flag, out[m]);
        m++;
        p = c ? c + 1 : p + l;
        if (c && !*p) return flint_err_set(err, FLINT_ERR_INVALID, "%s: trailing comma in '%s'", flag, v);
    }
    if (m == 0) return flint_err_set(err, FLINT_ERR_INVALID, "%s expects at least one value", flag);
    *n = m;
    return 0;
}

/* ==== eval and ab ==== */

void flint_eval_options_default(flint_eval_options *o) {
    memset(o, 0, sizeof *o);
    flint_sampling_params_default(&o->sampling);
    o->sampling.temperature = 0.0f;
    o->sampling.seed = 0;
    o->max_tokens = 256;
    o->batch_size = 16;
    o->chat = 1;
    o->bootstrap = 2000;
    o->level = 0.95;
    o->alpha = 0.05;
}

static const char *const eval_value_flags[] = {
    "--speculative-config", "--dataset", "--data-dir", "--num-prompts", "--max-tokens", "--temperature", "--top-p",
    "--top-k", "--min-p", "--seed", "--batch-size", "--chat-template", "--threads", "--max-model-len", "--bootstrap",
    "--confidence", "--output", NULL};
static const char *const eval_switches[] = {"--multi-turn", "--no-chat", "--ignore-eos", "--quiet", NULL};
static const char *const ab_value_flags[] = {"--drafter-a", "--drafter-b", "--label-a", "--label-b", "--alpha",
                                             "--seed-b", NULL};

static int in_list(const char *const *l, const char *s) {
    for (; *l; l++)
        if (!strcmp(*l, s)) return 1;
    return 0;
}

int flint_eval_option_kind(const char *cmd, const char *flag) {
    if (in_list(eval_value_flags, flag)) return 1;
    if (in_list(eval_switches, flag)) return 0;
    if (!strcmp(cmd, "ab") && in_list(ab_value_flags, flag)) return 1;
    return -1;
}

int flint_eval_options_set(flint_eval_options *o, const char *f, const char *v, flint_err *err) {
    if (!strcmp(f, "--multi-turn")) o->multi_turn = 1;
    else if (!strcmp(f, "--no-chat")) o->chat = 0;
    else if (!strcmp(f, "--ignore-eos")) o->ignore_eos = 1;
    else if (!strcmp(f, "--quiet")) o->quiet = 1;
    else if (!v) return flint_err_set(err, FLINT_ERR_INVALID, "%s needs a value", f);
    else if (!strcmp(f, "--speculative-config")) o->spec_config = v;
    else if (!strcmp(f, "--dataset")) {
        if (o->n_datasets == FLINT_EVAL_MAX_DATASETS)
            return flint_err_set(err, FLINT_ERR_INVALID, "at most %d --dataset options", FLINT_EVAL_MAX_DATASETS);
        o->datasets[o->n_datasets++] = v;
    } else if (!strcmp(f, "--data-dir")) o->data_dir = v;
    else if (!strcmp(f, "--num-prompts")) return get_int(f, v, 1, 1 << 24, &o->num_prompts, err);
    else if (!strcmp(f, "--max-tokens")) return get_int(f, v, 1, 1 << 24, &o->max_tokens, err);
    else if (!strcmp(f, "--temperature")) return get_float(f, v, 0, 100, &o->sampling.temperature, err);
    else if (!strcmp(f, "--top-p")) return get_float(f, v, 1e-9, 1, &o->sampling.top_p, err);
    else if (!strcmp(f, "--top-k")) return get_int(f, v, 0, 1 << 30, &o->sampling.top_k, err);
    else if (!strcmp(f, "--min-p")) return get_float(f, v, 0, 1, &o->sampling.min_p, err);
    else if (!strcmp(f, "--seed")) return get_u64(f, v, &o->sampling.seed, err);
    else if (!strcmp(f, "--batch-size")) return get_int(f, v, 1, 1024, &o->batch_size, err);
    else if (!strcmp(f, "--chat-template")) o->chat_template = v;
    else if (!strcmp(f, "--threads")) return get_int(f, v, 0, 4096, &o->threads, err);
    else if (!strcmp(f, "--max-model-len")) return get_int(f, v, 0, 1 << 24, &o->max_model_len, err);
    else if (!strcmp(f, "--bootstrap")) return get_int(f, v, 100, 1000000, &o->bootstrap, err);
    else if (!strcmp(f, "--confidence")) return get_double(f, v, 0.5, 0.999, &o->level, err);
    else if (!strcmp(f, "--output")) o->output = v;
    else if (!strcmp(f, "--drafter-a")) o->drafter_a = v;
    else if (!strcmp(f, "--drafter-b")) o->drafter_b = v;
    else if (!strcmp(f, "--label-a")) o->label_a = v;
    else if (!strcmp(f, "--label-b")) o->label_b = v;
    else if (!strcmp(f, "--alpha")) return get_double(f, v, 1e-6, 0.5, &o->alpha, err);
    else if (!strcmp(f, "--seed-b")) {
        o->has_seed_b = 1;
        return get_u64(f, v, &o->seed_b, err);
    }
    else return flint_err_set(err, FLINT_ERR_INVALID, "unknown option %s", f);
    return 0;
}

int flint_eval_options_check(const flint_eval_options *o, const char *cmd, flint_err *err) {
    if (o->n_datasets == 0) return flint_err_set(err, FLINT_ERR_INVALID, "--dataset is required");
    if (o->multi_turn && !o->chat)
        return flint_err_set(err, FLINT_ERR_INVALID, "--multi-turn needs the chat template (drop --no-chat)");
    if (o->chat_template && !o->chat)
        return flint_err_set(err, FLINT_ERR_INVALID, "--chat-template and --no-chat contradict each other");
    if (!strcmp(cmd, "ab")) {
        if (!o->drafter_a || !o->drafter_b)
            return flint_err_set(err, FLINT_ERR_INVALID, "--drafter-a and --drafter-b are required");
        if (!o->output) return flint_err_set(err, FLINT_ERR_INVALID, "--output DIR is required");
    }
    return 0;
}

/* ==== bench ==== */

void flint_bench_options_default(flint_bench_options *o) {
    memset(o, 0, sizeof *o);
    static const int b[] = {1, 4, 16}, k[] = {1, 3, 5, 7};
    memcpy(o->batch_sizes, b, sizeof b);
    o->n_batch = 3;
    memcpy(o->draft_lengths, k, sizeof k);
    o->n_draft = 4;
    o->context = 128;
    o->warmup = 3;
    o->steps = 10;
    o->rounds = 1;
    flint_sampling_params_default(&o->sampling);
    o->sampling.temperature = 0.0f;
    o->sampling.seed = 0;
    o->dataset = "sharegpt";
    o->verify_q[0] = 1;
    o->verify_q[1] = 8;
    o->n_verify_q = 2;
    o->gemm_pdl = -1;
    o->kernel_pdl = -1;
    o->gemm_wgmma = -1;
    o->gemm_early = -1;
}

static const char *const bench_value_flags[] = {
    "--speculative-config", "--batch-sizes", "--draft-lengths", "--synthetic-acceptance", "--synthetic-per-position",
    "--context", "--warmup", "--steps", "--tokens", "--rounds", "--temperature", "--top-p", "--top-k", "--min-p", "--seed", "--dataset",
    "--data-dir", "--threads", "--output", "--device", "--load-format", "--model-shape", "--q", "--baseline",
    "--tensor-parallel-size", "--gemm-pdl", "--kernel-pdl", "--gemm-wgmma", "--cuda-graph-sizes", "--max-model-len",
    "--gemm-early", NULL};

int flint_bench_option_kind(const char *flag) {
    if (in_list(bench_value_flags, flag)) return 1;
    if (!strcmp(flag, "--quiet") || !strcmp(flag, "--enforce-eager") || !strcmp(flag, "--profile") ||
        !strcmp(flag, "--split-step") || !strcmp(flag, "--vary-prompts") || !strcmp(flag, "--keep-engines"))
        return 0;
    return -1;
}

int flint_bench_options_set(flint_bench_options *o, const char *f, const char *v, flint_err *err) {
    if (!strcmp(f, "--quiet")) o->quiet = 1;
    else if (!strcmp(f, "--enforce-eager")) o->enforce_eager = 1;
    else if (!strcmp(f, "--split-step")) o->split_step = 1;
    else if (!strcmp(f, "--vary-prompts")) o->vary_prompts = 1;
    else if (!strcmp(f, "--keep-engines")) o->keep_engines = 1;
    else if (!strcmp(f, "--profile")) o->profile = 1;
    else if (!v) return flint_err_set(err, FLINT_ERR_INVALID, "%s needs a value", f);
    else if (!strcmp(f, "--device")) {
        if (!strcmp(v, "cpu")) o->device = FLINT_TARGET_CPU;
        else if (!strcmp(v, "cuda")) o->device = FLINT_TARGET_CUDA;
        else return flint_err_set(err, FLINT_ERR_INVALID, "--device expects cpu or cuda, got '%s'", v);
    } else if (!strcmp(f, "--load-format")) {
        if (strcmp(v, "dummy") && strcmp(v, "auto"))
            return flint_err_set(err, FLINT_ERR_INVALID, "--load-format expects auto or dummy, got '%s'", v);
        o->dummy = !strcmp(v, "dummy");
    } else if (!strcmp(f, "--model-shape")) o->model_shape = v;
    else if (!strcmp(f, "--q")) return get_int_list(f, v, 1, 64, o->verify_q, &o->n_verify_q, err);
    else if (!strcmp(f, "--baseline")) o->baseline = v;
    else if (!strcmp(f, "--tensor-parallel-size")) return get_int(f, v, 1, 64, &o->tensor_parallel_size, err);
    else if (!strcmp(f, "--gemm-pdl")) return get_int(f, v, 0, 1, &o->gemm_pdl, err);
    else if (!strcmp(f, "--kernel-pdl")) return get_int(f, v, 0, 1, &o->kernel_pdl, err);
    else if (!strcmp(f, "--gemm-wgmma")) return get_int(f, v, 0, 1, &o->gemm_wgmma, err);
    else if (!strcmp(f, "--gemm-early")) return get_int(f, v, 0, 1, &o->gemm_early, err);
    else if (!strcmp(f, "--cuda-graph-sizes")) {
        flint_engine_options probe;
        if (flint_graph_sizes_parse(v, &probe, err)) return -1;
        o->cuda_graph_sizes = v;
    }
    else if (!strcmp(f, "--speculative-config")) o->spec_config = v;
    else if (!strcmp(f, "--batch-sizes")) return get_int_list(f, v, 1, 4096, o->batch_sizes, &o->n_batch, err);
    else if (!strcmp(f, "--draft-lengths")) return get_int_list(f, v, 1, 16, o->draft_lengths, &o->n_draft, err);
    else if (!strcmp(f, "--synthetic-acceptance")) return get_double(f, v, 1, 17, &o->synthetic_al, err);
    else if (!strcmp(f, "--synthetic-per-position")) {
        int n = 0;
        const char *p = v;
        char buf[64];
        while (*p) {
            const char *c = strchr(p, ',');
            size_t l = c ? (size_t)(c - p) : strlen(p);
            if (l == 0 || l >= sizeof buf || n == 16)
                return flint_err_set(err, FLINT_ERR_INVALID, "%s expects up to 16 comma-separated rates in [0, 1], "
                                     "got '%s'", f, v);
            memcpy(buf, p, l);
            buf[l] = 0;
            if (get_double(f, buf, 0, 1, &o->synthetic_rates[n], err)) return -1;
            n++;
            p = c ? c + 1 : p + l;
        }
        if (n == 0) return flint_err_set(err, FLINT_ERR_INVALID, "%s expects at least one rate", f);
        o->n_synthetic_rates = n;
    } else if (!strcmp(f, "--context")) return get_int(f, v, 1, 1 << 20, &o->context, err);
    else if (!strcmp(f, "--max-model-len")) return get_int(f, v, 1, 1 << 20, &o->max_model_len, err);
    else if (!strcmp(f, "--warmup")) return get_int(f, v, 0, 100000, &o->warmup, err);
    else if (!strcmp(f, "--steps")) return get_int(f, v, 1, 100000, &o->steps, err);
    else if (!strcmp(f, "--tokens")) return get_int(f, v, 1, 100000, &o->tokens, err);
    else if (!strcmp(f, "--rounds")) return get_int(f, v, 1, 100, &o->rounds, err);
    else if (!strcmp(f, "--temperature")) return get_float(f, v, 0, 100, &o->sampling.temperature, err);
    else if (!strcmp(f, "--top-p")) return get_float(f, v, 1e-9, 1, &o->sampling.top_p, err);
    else if (!strcmp(f, "--top-k")) return get_int(f, v, 0, 1 << 30, &o->sampling.top_k, err);
    else if (!strcmp(f, "--min-p")) return get_float(f, v, 0, 1, &o->sampling.min_p, err);
    else if (!strcmp(f, "--seed")) return get_u64(f, v, &o->sampling.seed, err);
    else if (!strcmp(f, "--dataset")) o->dataset = v;
    else if (!strcmp(f, "--data-dir")) o->data_dir = v;
    else if (!strcmp(f, "--threads")) return get_int(f, v, 0, 4096, &o->threads, err);
    else if (!strcmp(f, "--output")) o->output = v;
    else return flint_err_set(err, FLINT_ERR_INVALID, "unknown option %s", f);
    return 0;
}

int flint_bench_options_check(const flint_bench_options *o, flint_err *err) {
    if (o->dummy != (o->model_shape != NULL))
        return flint_err_set(err, FLINT_ERR_INVALID, "--load-format dummy and --model-shape go together (e.g. "
                             "--load-format dummy --model-shape qwen3-8b)");
    if (o->dummy) {
        flint_target_config sc;
        if (flint_target_shape_config(o->model_shape, &sc, err)) return -1;
        if (o->device != FLINT_TARGET_CUDA)
            return flint_err_set(err, FLINT_ERR_INVALID, "--load-format dummy makes its weights on the GPU: add "
                                 "--device cuda");
        if (o->max_model_len > sc.max_position_embeddings)
            return flint_err_set(err, FLINT_ERR_INVALID, "--max-model-len %d is past %s's %d positions",
                                 o->max_model_len, o->model_shape, sc.max_position_embeddings);
    } else if (o->max_model_len > 0) {
        return flint_err_set(err, FLINT_ERR_INVALID, "--max-model-len goes with --load-format dummy (a real model's "
                             "server sets its own)");
    }
    if (o->keep_engines && o->dummy && !o->spec_config)
        return flint_err_set(err, FLINT_ERR_INVALID, "--keep-engines keeps the engines of a speculative sweep; the "
                             "verify step alone (--load-format dummy without --speculative-config) opens none");
    if (o->tokens > 0 && o->dummy && !o->spec_config)
        return flint_err_set(err, FLINT_ERR_INVALID, "--tokens times the engine's steps over a text; the verify step "
                             "alone (--load-format dummy without --speculative-config) has none");
    if (o->synthetic_al > 0 && o->n_synthetic_rates > 0)
        return flint_err_set(err, FLINT_ERR_INVALID, "--synthetic-acceptance and --synthetic-per-position exclude "
                             "each other");
    int kmax = 0;
    for (int i = 0; i < o->n_draft; i++)
        if (o->draft_lengths[i] > kmax) kmax = o->draft_lengths[i];
    if (o->n_synthetic_rates > 0 && o->n_synthetic_rates < kmax)
        return flint_err_set(err, FLINT_ERR_INVALID, "--synthetic-per-position gives %d rates but --draft-lengths "
                             "goes up to %d", o->n_synthetic_rates, kmax);
    return 0;
}

double flint_bench_rate_for_al(double al, int K) {
    if (K < 1 || al <= 1.0) return 0.0;
    if (al >= K + 1.0) return 1.0;
    /* 1 + r + ... + r^K is increasing in r on [0, 1]: bisection to full double precision */
    double lo = 0, hi = 1;
    for (int it = 0; it < 200 && hi - lo > 1e-15; it++) {
        double r = 0.5 * (lo + hi), s = 1, p = 1;
        for (int k = 1; k <= K; k++) s += (p *= r);
        if (s < al) lo = r;
        else hi = r;
    }
    return 0.5 * (lo + hi);
}
