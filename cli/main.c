/* The flint binary: subcommand dispatch only; each subcommand lives in its own cli/cmd_*.c and
 * calls into the modules. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

static const struct {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *help;
} commands[] = {
    {"generate", flint_cmd_generate, "generate text from a prompt with a model directory"},
    {"tokenize", flint_cmd_tokenize, "print the token ids of text read on stdin"},
    {"convert", flint_cmd_convert, "convert a checkpoint to a Hugging Face style directory"},
#ifdef FLINT_HAVE_server
    {"serve", flint_cmd_serve, "serve the OpenAI-compatible API with speculative decoding"},
    {"load", flint_cmd_load, "HTTP load generator against a running server"},
#endif
#ifdef FLINT_HAVE_evals
    {"eval", flint_cmd_eval, "acceptance-length evaluation of a drafter on prompt sets"},
    {"ab", flint_cmd_ab, "paired A/B test of two drafter checkpoints"},
    {"bench", flint_cmd_bench, "step-level benchmark over batch size x draft length"},
#endif
};

static void usage(FILE *f) {
    fprintf(f, "usage: flint COMMAND [options]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].help);
    fprintf(f, "\n'flint COMMAND --help' describes a command's options.\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "flint: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
