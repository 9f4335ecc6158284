/* Shared by eval.c, ab.c and bench.c; not part of the interface (evals.h is).
 *
 * The runner drives one engine over a list of prompts with at most `batch` conversations in
 * flight, refilling slots as they finish (continuous batching); a multi-turn conversation feeds
 * the model's answer back and asks the next turn. It is stepped from outside so that `flint ab`
 * can alternate single steps of its two engines. */
#ifndef FLINT_EVALS_INTERNAL_H
#define FLINT_EVALS_INTERNAL_H

#include <stdint.h>
#include <stdio.h>

#include <cjson/cJSON.h>

#include "evals/dataset.h"
#include "evals/evals.h"
#include "verifier/engine.h"

#define FLINT_EVAL_BOOT_SEED 0x5eed2024ull /* bootstrap resamples: fixed, so reports repeat */

/* One prompt (a conversation) of a run and what happened to it. */
typedef struct flint_run_prompt {
    const flint_dataset_item *item;
    int dataset;                /* index into the run's datasets */
    uint64_t seed;              /* --seed + item->record */
    /* results */
    int skipped;                /* the first turn plus max_tokens does not fit the context */
    int turns;                  /* turns run */
    int prompt_tokens;          /* of the first turn */
    int output_tokens;          /* over all turns */
    flint_finish_reason finish; /* of the last turn */
    flint_spec_stats stats;     /* over all turns */
    uint64_t hash;              /* FNV-1a over every output token id: equal hashes, equal outputs */
    double active_ms;           /* wall time of the steps it took part in */
    char **answers;             /* multi-turn: each turn's answer text */
} flint_run_prompt;

typedef struct flint_runner_config {
    int batch;
    int max_tokens;
    flint_sampling_params sampling; /* the seed is per prompt */
    int ignore_eos;
    int chat_format;                /* flint_chat_format; NONE = raw text */
    int multi_turn;
} flint_runner_config;

typedef struct flint_runner flint_runner;

flint_runner *flint_runner_new(flint_engine *e, flint_run_prompt *p, int n, const flint_runner_config *c);
/* Admit prompts up to the batch, run one engine step, collect its events. Returns 1 while work
 * remains, 0 when every prompt is done, -1 on error. */
int flint_runner_step(flint_runner *r, flint_err *err);
double flint_runner_busy_ms(const flint_runner *r); /* total time inside engine steps */
long flint_runner_steps(const flint_runner *r);
void flint_runner_free(flint_runner *r);
void flint_run_prompts_free(flint_run_prompt *p, int n);

/* ==== summaries ==== */

typedef struct flint_al_summary {
    int prompts;  /* run (not skipped) */
    int skipped;
    int with_steps; /* prompts that had at least one speculative step */
    long prompt_tokens, output_tokens;
    flint_spec_stats stats; /* pooled */
    double al, al_lo, al_hi; /* pooled AL (1 + accepted / steps) and its bootstrap CI over prompts */
    double al_prompt_mean;   /* mean of per-prompt ALs (prompts with steps) */
    double active_ms;        /* summed per-prompt active time (tokens/s per user) */
} flint_al_summary;

double flint_prompt_al(const flint_run_prompt *p); /* NaN without steps */
/* Summary over prompts p[idx[0..n-1]] (idx NULL: all n). */
void flint_al_summarize(const flint_run_prompt *p, const int *idx, int n, int reps, double level,
                        flint_al_summary *out);
/* Deterministic part as JSON (no timing): AL, CI, per-position rates, histogram, tokens. */
cJSON *flint_al_summary_json(const flint_al_summary *s, int K, double level);
double flint_al_uncond(const flint_al_summary *s, int i);     /* accepted_per_pos[i] / steps */
double flint_al_cond(const flint_al_summary *s, int i);       /* accepted_per_pos[i] / accepted_per_pos[i-1] */
double flint_al_tokens_per_s_user(const flint_al_summary *s); /* output tokens / active time */

/* ==== setup shared by the commands ==== */

/* Split every --dataset value on commas and load each; *n receives the count. */
int flint_evals_load_datasets(const char *const *specs, int n_specs, const char *data_dir, flint_dataset ***out,
                              int *n, flint_err *err);
/* The prompts of the datasets: the first num_prompts (0 = all) of each, seed = base + record. */
flint_run_prompt *flint_evals_make_prompts(flint_dataset **ds, int n_ds, int num_prompts, uint64_t seed, int *n);
/* Engine options for a model + drafter. spec_config (vLLM JSON) or default_drafter with K = 7;
 * drafter_override replaces the config's "model" (ab arms; the config must then have none).
 * Draft lengths stay fixed unless the config says "dynamic_draft": true.
 * *owned holds a string to free after the engine is open. */
int flint_evals_engine_options(flint_engine_options *eo, const char *model_dir, const char *spec_config,
                               const char *default_drafter, const char *drafter_override, char **owned,
                               flint_err *err);
/* The chat format to render prompts with (FLINT_CHAT_NONE when chat is 0); an error when the
 * model has no recognised template. */
int flint_evals_chat_format(const flint_engine *e, int chat, const char *forced, int *format, flint_err *err);
double flint_evals_now_ms(void);
/* Write a string / a cJSON document (pretty, with a final newline) to a file. */
/* evals/bench_gpu.c: flint bench on a dummy shape (the CUDA target's verify step + baseline). */
int flint_bench_gpu_run(const flint_bench_options *o, flint_err *err);

int flint_evals_write_text(const char *path, const char *text, flint_err *err);
int flint_evals_write_json(const char *path, const cJSON *j, flint_err *err);
/* "out.json" -> "out.svg" (ext replaces a trailing .json, else is appended). Caller frees. */
char *flint_evals_sibling(const char *path, const char *ext);
char *flint_evals_basename(const char *path); /* the last path component, malloc'd */
/* A number for a markdown table: "%.*f", or "-" when it is not finite. Returns buf. */
const char *flint_evals_fmt(char *buf, size_t cap, double v, int decimals);

#endif
