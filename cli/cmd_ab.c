/* `flint ab`: paired A/B test of two drafter checkpoints on the same prompts and seeds. Thin:
 * the options are eval's plus the two drafters (parsed by cmd_eval.c's walker), the work is in
 * evals/ab.c. */
#ifdef FLINT_HAVE_evals
#include <stdio.h>
#include <stdlib.h>

#include "cli/cli.h"
#include "evals/evals.h"

#ifndef FLINT_DEFAULT_MODEL
#define FLINT_DEFAULT_MODEL "models/flint-tiny"
#endif

static void usage(FILE *f) {
    fprintf(f,
            "usage: flint ab [MODEL_DIR] --drafter-a DIR --drafter-b DIR --dataset D --output DIR [options]\n"
            "\n"
            "Both drafters run the same prompts with the same seeds, their engines stepped alternately in one\n"
            "process. Per-prompt acceptance-length differences (B - A) get a bootstrap CI of their mean, a sign\n"
            "test and a Wilcoxon signed-rank test; the verdict calls a difference when the Wilcoxon p < --alpha\n"
            "and the CI excludes 0. Writes report.md, ab.json and acceptance.svg into --output DIR.\n"
            "MODEL_DIR defaults to " FLINT_DEFAULT_MODEL ".\n"
            "\n"
            "  --drafter-a DIR, --drafter-b DIR   the two drafter checkpoints\n"
            "  --label-a NAME, --label-b NAME     names in the report (default: the directory names)\n"
            "  --speculative-config J  K and draft sampling for both arms, without \"model\"\n"
            "                          (default {\"num_speculative_tokens\": 7}, probabilistic drafts)\n"
            "  --alpha A               significance level (default 0.05)\n"
            "  --seed-b S              A/A calibration only: arm B's own base seed (default: --seed)\n"
            "  and eval's options: --dataset, --num-prompts, --max-tokens, --temperature, --top-p, --top-k,\n"
            "  --min-p, --seed, --batch-size, --multi-turn, --no-chat, --chat-template, --ignore-eos,\n"
            "  --bootstrap, --confidence, --data-dir, --max-model-len, --threads, --quiet, --log-level\n");
}

int flint_cmd_ab(int argc, char **argv) {
    flint_eval_options o;
    int rc = flint_cmd_eval_parse("ab", argc, argv, &o, usage);
    if (rc) return rc;
    flint_err err = {0};
    if (flint_ab_run(&o, &err)) {
        fprintf(stderr, "flint ab: %s\n", err.msg);
        return 1;
    }
    return 0;
}
#endif
