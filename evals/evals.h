/* The evaluation commands (DESIGN.md section 8), driven by cli/cmd_{eval,ab,bench}.c:
 *
 * - flint_eval_run: prompt sets through the engine at a given K, temperature and seed; mean
 *   acceptance length (AL = 1 + accepted / steps, bonus counted) with a bootstrap CI over prompts,
 *   per-position acceptance (unconditional and conditional), histogram, acceptance rate, tokens
 *   and tokens/s, per dataset and per category; JSON + markdown + SVG.
 * - flint_ab_run: two drafter checkpoints on the same prompts and seeds, the two engines stepped
 *   alternately in one process; paired per-prompt AL differences, bootstrap CI, sign test,
 *   Wilcoxon signed-rank test, a verdict; JSON + markdown + SVG in a directory.
 * - flint_bench_run: step timing over batch size x draft length with real or synthetic
 *   acceptance against the no-speculation baseline; table + JSON + SVG.
 *
 * Reproducibility: prompt i of a dataset (its 0-based record number in the file) is sampled with
 * seed = --seed + i, whatever the batch size, the order of runs or the other arm; the engine's
 * output for a request depends only on its prompt and seed, so results do not depend on
 * --batch-size. Bootstrap resamples use a fixed RNG seed. Everything that depends on the clock
 * sits under one "timing" key of the JSON.
 *
 * Options live in one place: the *_options_default functions below set every default and the
 * *_options_set functions map a command-line flag to a field, so the commands stay thin. */
#ifndef FLINT_EVALS_EVALS_H
#define FLINT_EVALS_EVALS_H

#include <stdint.h>

#include "core/status.h"
#include "sampler/sampler.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FLINT_EVAL_MAX_DATASETS 16

typedef struct flint_eval_options {
    const char *model_dir;
    const char *spec_config;     /* vLLM-style JSON; NULL: default_drafter with K = 7 */
    const char *default_drafter; /* set by the command (the embedded drafter) */
    const char *datasets[FLINT_EVAL_MAX_DATASETS]; /* NAME, NAME:CATEGORY or PATH */
    int n_datasets;
    const char *data_dir;        /* where the shipped prompt sets are */
    int num_prompts;             /* first N prompts of each dataset; 0 = all */
    int max_tokens;              /* per turn (default 256) */
    flint_sampling_params sampling; /* default T = 0 (greedy), seed 0 */
    int batch_size;              /* sessions running at once (default 16) */
    int multi_turn;              /* run every turn of multi-turn records (answers fed back) */
    int chat;                    /* 1: chat template (default); 0: raw first turn */
    const char *chat_template;   /* force chatml | qwen3 | llama3 | llama2 */
    int ignore_eos;
    int threads;                 /* 0: every core */
    int max_model_len;           /* 0: the model's */
    int bootstrap;               /* resamples (default 2000) */
    double level;                /* confidence level (default 0.95) */
    const char *output;          /* eval: FILE (.json; .md and .svg beside it); ab: a directory */
    int quiet;                   /* no report on stdout */
    /* ab */
    const char *drafter_a, *drafter_b;
    const char *label_a, *label_b; /* names in reports (default: the directories' base names) */
    double alpha;                  /* significance level (default 0.05) */
    int has_seed_b;                /* --seed-b: arm B's own base seed, for A/A calibration only (the */
    uint64_t seed_b;               /* arms are then paired by prompt, not by random stream) */
} flint_eval_options;

void flint_eval_options_default(flint_eval_options *o);
/* 1: the flag takes a value; 0: a switch; -1: not an option of `cmd` ("eval" or "ab"). */
int flint_eval_option_kind(const char *cmd, const char *flag);
/* Set one option (value NULL for a switch). Returns -1 with err naming the flag on a bad value. */
int flint_eval_options_set(flint_eval_options *o, const char *flag, const char *value, flint_err *err);
/* Checks that need every option (e.g. --multi-turn with --no-chat). */
int flint_eval_options_check(const flint_eval_options *o, const char *cmd, flint_err *err);

int flint_eval_run(const flint_eval_options *o, flint_err *err);
int flint_ab_run(const flint_eval_options *o, flint_err *err);

#define FLINT_BENCH_MAX_GRID 32

typedef struct flint_bench_options {
    const char *model_dir;
    const char *spec_config;     /* NULL: default_drafter */
    const char *default_drafter;
    int batch_sizes[FLINT_BENCH_MAX_GRID]; /* default 1, 4, 16 */
    int n_batch;
    int draft_lengths[FLINT_BENCH_MAX_GRID]; /* K > 0; default 1, 3, 5, 7; K = 0 always runs */
    int n_draft;
    double synthetic_al;         /* > 0: force this mean AL (equal conditional rates per K) */
    double synthetic_rates[16];  /* conditional per-position rates */
    int n_synthetic_rates;       /* > 0: use synthetic_rates */
    int context;                 /* prompt tokens per session (default 128) */
    int max_model_len;           /* > 0, dummy shapes: size the forward (attention grids, block tables, the
                                  * captured graphs) for sequences this long, as a server's max_model_len
                                  * does, while the KV pool holds only what the run uses; 0: just enough */
    int warmup;                  /* untimed steps after prefill (default 3) */
    int steps;                   /* timed steps (default 10) */
    int tokens;                  /* > 0: time the same text instead: warm-up until every session has emitted
                                  * `warmup` tokens, then until every one has emitted `tokens` more (each
                                  * point's rate over the window's whole time); 0: `warmup` and `steps` steps */
    int rounds;                  /* engine mode: the whole sweep this many times, every other one in reverse
                                  * order (default 1); each point pools its rounds' steps, so a drift of the
                                  * machine over the run falls on every K alike */
    int vary_prompts;            /* each round's sessions take the next batch's prompts of the set (every K
                                  * of a round the same ones): a point pools several prompts' trajectories,
                                  * where one prompt's decides a batch-1 point alone */
    int keep_engines;            /* open each K's engine once and keep it over the rounds (as a server keeps
                                  * its engine: a dynamic draft length carries what it learned from one
                                  * round's requests into the next); 0: a fresh engine per round and K */
    flint_sampling_params sampling; /* default T = 0, seed 0 */
    const char *dataset;         /* text the prompts are cut from (default sharegpt) */
    const char *data_dir;
    int threads;
    const char *output;          /* FILE.json; FILE.svg beside it */
    int quiet;
    int device;                  /* FLINT_TARGET_CPU (default) or FLINT_TARGET_CUDA: where the target runs */
    int enforce_eager;           /* CUDA: no captured graphs */
    int split_step;              /* CUDA: drafting steps as separate launches, not one graph (A/B) */
    const char *cuda_graph_sizes; /* CUDA: the captured forwards' row counts ("1,2,4,..."; NULL: default) */
    int gemm_pdl;                /* CUDA GEMMs' programmatic dependent launch (flint_target_cuda_tuning); -1: default */
    int kernel_pdl;              /* the other CUDA kernels' programmatic dependent launch (flint_target_cuda_tuning); -1: default */
    int gemm_early;              /* CUDA: short GEMMs start their successors early (tuning); -1: default */
    int gemm_wgmma;              /* CUDA GEMMs' wgmma path for M > 32 (flint_target_cuda_tuning); -1: default */
    int profile;                 /* engine mode: a second pass per point with the engine's step profile
                                  * (time per phase, the device waited for after each) */
    /* --load-format dummy --model-shape NAME: time the CUDA target's verify step at that shape
     * (random weights and KV on the device) over batch_sizes x verify_q, with the PyTorch
     * baseline (tools/torch_baseline.py) run in the same invocation (evals/bench_gpu.c) */
    int dummy;                   /* --load-format dummy */
    const char *model_shape;
    int verify_q[FLINT_BENCH_MAX_GRID]; /* tokens per sequence in a verify step; default 1, 8 */
    int n_verify_q;
    const char *baseline;        /* the baseline script; "none" skips it */
    int tensor_parallel_size;    /* CUDA: the target sharded over this many GPUs (NCCL); 0/1: one */
} flint_bench_options;

void flint_bench_options_default(flint_bench_options *o);
int flint_bench_option_kind(const char *flag);
int flint_bench_options_set(flint_bench_options *o, const char *flag, const char *value, flint_err *err);
int flint_bench_options_check(const flint_bench_options *o, flint_err *err);
int flint_bench_run(const flint_bench_options *o, flint_err *err);

/* The conditional acceptance rate r with 1 + r + r^2 + ... + r^K = al (al clamped to [1, K + 1]). */
double flint_bench_rate_for_al(double al, int K);

#ifdef __cplusplus
}
#endif
#endif
