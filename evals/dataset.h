/* Prompt sets for evals: the shipped ones in evals/data (by name) and any JSON Lines file whose
 * records carry `turns` (a list of user turns) or `prompt` (one string), with an optional
 * `category` and id (`id`, `question_id` or `task_id`). A ShareGPT-style JSON array
 * (`conversations` of {from, value}) is read too. Errors name the file and the line (JSONL) or
 * the record (JSON array), because a silently skipped prompt changes every mean downstream.
 *
 * Rendering: chat prompts go through the model's chat template (core/chat.h) with the
 * generation prompt added, then are encoded without extra special tokens; without a chat
 * template (--no-chat) the first turn is encoded as raw text with the tokenizer's own special
 * tokens (e.g. BOS). */
#ifndef FLINT_EVALS_DATASET_H
#define FLINT_EVALS_DATASET_H

#include <stdint.h>

#include "core/status.h"
#include "core/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct flint_dataset_item {
    char *id;       /* as written in the file (numbers printed as integers); never NULL */
    char *category; /* never NULL: the record's, else the dataset's name */
    int n_turns;    /* >= 1 */
    char **turns;   /* user turns */
    int record;     /* 0-based record number in the file: the prompt's seed offset */
} flint_dataset_item;

typedef struct flint_dataset {
    char *name; /* the shipped name, or the file's base name without extension */
    char *path;
    int n;
    flint_dataset_item *items;
} flint_dataset;

/* The shipped prompt sets: gsm8k, mt_bench, humaneval, mbpp, spec_bench, sharegpt (file name
 * NAME.jsonl under data_dir; "-" and "_" are interchangeable in names). */
extern const char *const flint_dataset_names[];

/* Load a dataset by NAME or PATH. "NAME:CATEGORY" / "PATH:CATEGORY" keeps one category (an error
 * when the dataset has none of it). Returns NULL with err (FLINT_ERR_INVALID for an unknown
 * name, FLINT_ERR_IO for a missing file, FLINT_ERR_FORMAT for a malformed record). */
flint_dataset *flint_dataset_load(const char *spec, const char *data_dir, flint_err *err);
/* Read one file (JSONL or a JSON array) with `name` as its default category. */
flint_dataset *flint_dataset_read(const char *path, const char *name, flint_err *err);
void flint_dataset_free(flint_dataset *d);

/* Prompt token ids for turn `turn` of an item: user turns 0..turn with answers[0..turn-1] (the
 * model's earlier replies) between them, rendered with chat_format (a flint_chat_format).
 * FLINT_CHAT_NONE encodes turn 0's raw text (turn must be 0). *ids is malloc'd. */
int flint_dataset_encode(const flint_tokenizer *tok, const flint_dataset_item *it, int turn, const char *const *answers,
                         int chat_format, int32_t **ids, int *n, flint_err *err);

#ifdef __cplusplus
}
#endif
#endif
