/* `flint convert FORMAT ...`: turn a foreign checkpoint into a Hugging Face style model directory
 * that the rest of flint (and transformers) loads. The work is in target/convert.h; this file only
 * parses options and maps errors to exit statuses (0 done, 1 bad input, 2 bad usage). */
#include <stdio.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "core/log.h"
#include "target/convert.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: flint convert llama2c --weights FILE --tokenizer FILE --out DIR\n"
            "\n"
            "Convert a llama2.c checkpoint (legacy or version-1 fp32 export) and its tokenizer.bin into\n"
            "a LlamaForCausalLM directory: config.json, model.safetensors (float32, Hugging Face names,\n"
            "q/k rows permuted for rotate_half RoPE), tokenizer.json (Llama-2 legacy form) and\n"
            "tokenizer_config.json. DIR is created when missing; files in it are replaced.\n"
            "\n"
            "  --weights FILE     the llama2.c model, e.g. stories260K.bin\n"
            "  --tokenizer FILE   its tokenizer.bin, e.g. tok512.bin\n"
            "  --out DIR          the output directory\n"
            "  --log-level L      error | warn | info | debug\n");
}

int flint_cmd_convert(int argc, char **argv) {
    const char *cmd = "convert";
    const char *format = NULL, *weights = NULL, *tokenizer = NULL, *out = NULL;
    /* --help wins wherever it appears, even after a bad option */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (a[0] == '-' && a[1] == '-') {
            if (!(v = flint_arg_value(cmd, argc, argv, &i))) return 2;
            if (!strcmp(a, "--weights")) weights = v;
            else if (!strcmp(a, "--tokenizer")) tokenizer = v;
            else if (!strcmp(a, "--out")) out = v;
            else if (!strcmp(a, "--log-level")) {
                flint_log_level lv;
                if (flint_log_parse_level(v, &lv)) {
                    fprintf(stderr, "flint convert: unknown log level '%s'\n", v);
                    return 2;
                }
                flint_log_set_level(lv);
            } else {
                fprintf(stderr, "flint convert: unknown option %s\n", a);
                return 2;
            }
        } else if (!format) {
            format = a;
        } else {
            fprintf(stderr, "flint convert: unexpected argument '%s'\n", a);
            return 2;
        }
    }
    if (!format) {
        usage(stderr);
        return 2;
    }
    if (strcmp(format, "llama2c") != 0) {
        fprintf(stderr, "flint convert: unknown format '%s' (known: llama2c)\n", format);
        return 2;
    }
    if (!weights || !tokenizer || !out) {
        fprintf(stderr, "flint convert: llama2c needs --weights, --tokenizer and --out\n");
        return 2;
    }
    flint_err err = {0};
    if (flint_convert_llama2c(weights, tokenizer, out, &err) != 0) {
        fprintf(stderr, "flint convert: %s\n", err.msg);
        return 1;
    }
    printf("wrote %s: config.json, model.safetensors, tokenizer.json, tokenizer_config.json\n", out);
    return 0;
}
