/* `flint eval`: acceptance-length evaluation of a drafter on prompt sets. Thin: the options and
 * the work live in evals/ (evals.h); this file walks argv and maps errors to exit statuses
 * (2 bad usage, 1 anything else the user can fix). */
#ifdef FLINT_HAVE_evals
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "core/log.h"
#include "evals/evals.h"

#ifndef FLINT_DEFAULT_MODEL
#define FLINT_DEFAULT_MODEL "models/flint-tiny"
#endif

/* The shipped prompt sets: <source>/evals/data (FLINT_DATA_DIR from CMake); --data-dir overrides. */
static const char *default_data_dir(void) { return FLINT_DATA_DIR; }

static void usage(FILE *f) {
    fprintf(f,
            "usage: flint eval [MODEL_DIR] --dataset NAME|PATH [options]\n"
            "\n"
            "Mean acceptance length (with a bootstrap CI over prompts), per-position acceptance, histogram and\n"
            "tokens/s of a drafter on prompt sets, per dataset and per category. MODEL_DIR defaults to\n"
            FLINT_DEFAULT_MODEL ", the drafter to " FLINT_DEFAULT_MODEL "-dspark (K = 7, probabilistic).\n"
            "\n"
            "  --speculative-config J {\"model\": DRAFTER_DIR, \"method\": \"dspark\", \"num_speculative_tokens\": K,\n"
            "                         \"draft_sample_method\": \"probabilistic\" | \"greedy\"}\n"
            "  --dataset D            gsm8k | mt_bench | humaneval | mbpp | spec_bench | sharegpt, NAME:CATEGORY,\n"
            "                         or a .jsonl path (records with \"turns\" or \"prompt\"); repeat the option\n"
            "                         or comma-separate several\n"
            "  --num-prompts N        the first N prompts of each dataset (default: all)\n"
            "  --max-tokens N         tokens per turn (default 256)\n"
            "  --temperature T        0 = greedy (default 0)\n"
            "  --top-p P, --top-k K, --min-p P   target sampling filters (defaults off)\n"
            "  --seed S               base seed (default 0): record i of a file is sampled with seed S + i\n"
            "  --batch-size B         prompts in flight at once (default 16); results do not depend on it\n"
            "  --multi-turn           run every turn (MT-Bench), feeding the model's answers back\n"
            "  --no-chat              encode the first turn as raw text instead of the chat template\n"
            "  --chat-template NAME   force chatml | qwen3 | llama3 | llama2\n"
            "  --ignore-eos           always generate --max-tokens tokens\n"
            "  --output FILE          write FILE (JSON), and FILE's .md and .svg siblings\n"
            "  --bootstrap N          bootstrap resamples (default 2000); --confidence L (default 0.95)\n"
            "  --data-dir DIR         where the named datasets are (default %s)\n"
            "  --max-model-len N, --threads N, --quiet, --log-level L\n",
            default_data_dir());
}

/* Shared by eval and ab: walk argv into o. Returns 0, or 2 after printing a usage error. */
int flint_cmd_eval_parse(const char *cmd, int argc, char **argv, flint_eval_options *o, void (*help)(FILE *)) {
    int have_model = 0;
    flint_err err = {0};
    flint_eval_options_default(o);
    o->model_dir = FLINT_DEFAULT_MODEL;
    o->default_drafter = FLINT_DEFAULT_MODEL "-dspark";
    o->data_dir = default_data_dir();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            help(stdout);
            exit(0);
        }
        if (!strcmp(a, "--log-level")) {
            flint_log_level lv;
            if (i + 1 >= argc || flint_log_parse_level(argv[++i], &lv)) {
                fprintf(stderr, "flint %s: --log-level expects error | warn | info | debug\n", cmd);
                return 2;
            }
            flint_log_set_level(lv);
            continue;
        }
        if (a[0] == '-' && a[1] == '-') {
            int kind = flint_eval_option_kind(cmd, a);
            if (kind < 0) {
                fprintf(stderr, "flint %s: unknown option %s (flint %s --help lists them)\n", cmd, a, cmd);
                return 2;
            }
            if (kind == 1 && i + 1 >= argc) {
                fprintf(stderr, "flint %s: %s needs a value\n", cmd, a);
                return 2;
            }
            if (flint_eval_options_set(o, a, kind ? argv[++i] : NULL, &err)) {
                fprintf(stderr, "flint %s: %s\n", cmd, err.msg);
                return 2;
            }
        } else if (!have_model) {
            o->model_dir = a;
            have_model = 1;
        } else {
            fprintf(stderr, "flint %s: unexpected argument '%s'\n", cmd, a);
            return 2;
        }
    }
    if (flint_eval_options_check(o, cmd, &err)) {
        fprintf(stderr, "flint %s: %s (flint %s --help lists the options)\n", cmd, err.msg, cmd);
        return 2;
    }
    return 0;
}

int flint_cmd_eval(int argc, char **argv) {
    flint_eval_options o;
    int rc = flint_cmd_eval_parse("eval", argc, argv, &o, usage);
    if (rc) return rc;
    flint_err err = {0};
    if (flint_eval_run(&o, &err)) {
        fprintf(stderr, "flint eval: %s\n", err.msg);
        return 1;
    }
    return 0;
}
#endif
