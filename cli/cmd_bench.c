/* `flint bench`: step-level benchmark over batch size x draft length against the no-speculation
 * baseline, with real or synthetic acceptance. Thin: options and work live in evals/ (evals.h). */
#ifdef FLINT_HAVE_evals
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "core/log.h"
#include "evals/evals.h"

#ifndef FLINT_TOOLS_DIR
#define FLINT_TOOLS_DIR "tools"
#endif
#ifndef FLINT_DEFAULT_MODEL
#define FLINT_DEFAULT_MODEL "models/flint-tiny"
#endif

static void usage(FILE *f) {
    fprintf(f,
            "usage: flint bench [MODEL_DIR] [--speculative-config J] [options]\n"
            "\n"
            "Median engine step time over batch size x draft length, with the no-speculation baseline (K = 0)\n"
            "measured in the same run; prints a table (median step ms, tokens/s per user and total, speed-up)\n"
            "and writes JSON + an SVG of tokens/s per user vs total. MODEL_DIR defaults to " FLINT_DEFAULT_MODEL
            ",\n"
            "the drafter to " FLINT_DEFAULT_MODEL "-dspark.\n"
            "\n"
            "  --speculative-config J      the drafter (its num_speculative_tokens is replaced by each K)\n"
            "  --batch-sizes LIST          e.g. 1,4,16 (default)\n"
            "  --draft-lengths LIST        K values, e.g. 1,3,5,7 (default); K = 0 always runs\n"
            "  --synthetic-acceptance AL   force mean acceptance length AL: conditional rate r per position with\n"
            "                              1 + r + ... + r^K = AL (capped at K + 1)\n"
            "  --synthetic-per-position R1,R2,...  force these conditional per-position rates\n"
            "  --context N                 prompt tokens per session (default 128)\n"
            "  --warmup N, --steps N       untimed and timed steps (defaults 3 and 10)\n"
            "  --tokens N                  time the same text for every K instead of the same number of steps:\n"
            "                              warm up until every session has emitted --warmup tokens, then time\n"
            "                              until every one has emitted N more (rates over the whole window)\n"
            "  --rounds N                  run the sweep N times, every other one in reverse order, pooling each\n"
            "                              point's steps (A/B of engines against the machine's drift; default 1)\n"
            "  --vary-prompts              each round's sessions take other prompts (the next batch's of the set;\n"
            "                              every K of a round the same): a point pools several trajectories\n"
            "  --keep-engines              open each K's engine once and keep it over the rounds, as a server keeps\n"
            "                              its engine (a dynamic draft length carries its estimates from one round's\n"
            "                              requests to the next); default: a fresh engine per round and K\n"
            "  --temperature T, --top-p P, --top-k K, --min-p P, --seed S   sampling (default greedy)\n"
            "  --dataset D                 prompt text source (default sharegpt); --data-dir DIR\n"
            "  --output FILE               write FILE (JSON) and FILE's .svg sibling\n"
            "  --device cpu|cuda           where the target runs (default cpu); --enforce-eager: no CUDA graphs\n"
            "  --split-step                cuda: drafting steps as separate launches (draft, verify, decisions,\n"
            "                              encode) instead of one captured graph, for A/B\n"
            "  --load-format dummy --model-shape NAME   (with --device cuda) time the CUDA target's verify step at a\n"
            "                              real model's shape (qwen3-8b, qwen3-0.6b) with random weights and KV, over\n"
            "                              --batch-sizes x --q (default 1,8) at --context, against the PyTorch decoder\n"
            "                              of the same shape run in the same invocation\n"
            "  --max-model-len N           dummy: size the forward (block tables, attention grids, graphs) for\n"
            "                              sequences of N tokens, as a server does; the KV pool holds what the run\n"
            "                              uses\n"
            "  --tensor-parallel-size N    cuda: the target sharded over GPUs 0..N-1 through NCCL (dummy: all-reduce\n"
            "                              time per step measured alone too)\n"
            "  --baseline SCRIPT|none      the PyTorch baseline (default " FLINT_TOOLS_DIR "/torch_baseline.py)\n"
            "  --cuda-graph-sizes LIST     cuda: row counts the captured forwards are padded to (default 1..8, 12,\n"
            "                              16, 24, ... 512); larger forwards run eagerly\n"
            "  --gemm-pdl 0|1              cuda: programmatic dependent launch of the small-M GEMMs (default 1),\n"
            "                              for A/B runs\n"
            "  --kernel-pdl 0|1            cuda: the same for the other kernels (norms, attention, ...; default 1)\n"
            "  --gemm-wgmma 0|1            cuda: the wgmma GEMM for more than 32 rows (default 1 where built for\n"
            "                              sm_90a), for A/B runs\n"
            "  --gemm-early 0|1            cuda: GEMMs of <= 8 MB of weights start the kernel after them early\n"
            "                              (default 1), for A/B runs\n"
            "  --profile                   engine mode: also time each phase of a step (prefill, draft, verify,\n"
            "                              accept, encode, host), in a separate pass that waits for the GPU per phase\n"
            "  --threads N, --quiet, --log-level L\n");
}

int flint_cmd_bench(int argc, char **argv) {
    flint_bench_options o;
    flint_err err = {0};
    int have_model = 0;
    flint_bench_options_default(&o);
    o.model_dir = FLINT_DEFAULT_MODEL;
    o.default_drafter = FLINT_DEFAULT_MODEL "-dspark";
    o.data_dir = FLINT_DATA_DIR; /* <source>/evals/data; --data-dir overrides */
    o.baseline = FLINT_TOOLS_DIR "/torch_baseline.py";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--log-level")) {
            flint_log_level lv;
            if (i + 1 >= argc || flint_log_parse_level(argv[++i], &lv)) {
                fprintf(stderr, "flint bench: --log-level expects error | warn | info | debug\n");
                return 2;
            }
            flint_log_set_level(lv);
            continue;
        }
        if (a[0] == '-' && a[1] == '-') {
            int kind = flint_bench_option_kind(a);
            if (kind < 0) {
                fprintf(stderr, "flint bench: unknown option %s (flint bench --help lists them)\n", a);
                return 2;
            }
            if (kind == 1 && i + 1 >= argc) {
                fprintf(stderr, "flint bench: %s needs a value\n", a);
                return 2;
            }
            if (flint_bench_options_set(&o, a, kind ? argv[++i] : NULL, &err)) {
                fprintf(stderr, "flint bench: %s\n", err.msg);
                return 2;
            }
        } else if (!have_model) {
            o.model_dir = a;
            have_model = 1;
        } else {
            fprintf(stderr, "flint bench: unexpected argument '%s'\n", a);
            return 2;
        }
    }
    if (flint_bench_options_check(&o, &err)) {
        fprintf(stderr, "flint bench: %s\n", err.msg);
        return 2;
    }
    if (flint_bench_run(&o, &err)) {
        fprintf(stderr, "flint bench: %s\n", err.msg);
        return 1;
    }
    return 0;
}
#endif
