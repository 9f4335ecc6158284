/* `flint tokenize`: the token ids of text read on stdin, for checking flint's tokenizer against
 * Hugging Face from a shell (tools/, CI scripts). Thin: all the work is core/tokenizer.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "core/tokenizer.h"

#ifndef FLINT_DEFAULT_MODEL
#define FLINT_DEFAULT_MODEL "models/flint-tiny"
#endif

static void usage(FILE *f) {
    fprintf(f,
            "usage: flint tokenize [MODEL_DIR | --tokenizer FILE] [--jsonl] [--no-special]\n"
            "\n"
            "Reads all of stdin as UTF-8 text and prints its token ids on one line, separated by spaces.\n"
            "MODEL_DIR (default " FLINT_DEFAULT_MODEL ") holds tokenizer.json and maybe tokenizer_config.json.\n"
            "  --tokenizer FILE   a tokenizer.json file instead of a model directory\n"
            "  --jsonl            one JSON object {\"text\": ...} per input line; prints {\"ids\": [...]} per line\n"
            "  --no-special       do not add the post-processor's tokens (BOS/EOS); special tokens written\n"
            "                     in the text are still recognized\n");
}

static char *read_stdin(size_t *len) {
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    if (!buf) return NULL;
    for (;;) {
        if (n == cap) {
            char *b = realloc(buf, cap *= 2);
            if (!b) {
                free(buf);
                return NULL;
            }
            buf = b;
        }
        size_t r = fread(buf + n, 1, cap - n, stdin);
        n += r;
        if (r == 0) break;
    }
    if (ferror(stdin)) {
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

static void print_ids(const int32_t *ids, int n, int json) {
    if (json) fputs("{\"ids\": [", stdout);
    for (int i = 0; i < n; i++) printf(json ? "%s%d" : "%s%d", i ? (json ? ", " : " ") : "", ids[i]);
    fputs(json ? "]}\n" : "\n", stdout);
}

int flint_cmd_tokenize(int argc, char **argv) {
    const char *dir = NULL, *file = NULL;
    int jsonl = 0, add_special = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--tokenizer")) {
            if (!(file = flint_arg_value("tokenize", argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--jsonl")) {
            jsonl = 1;
        } else if (!strcmp(a, "--no-special")) {
            add_special = 0;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "flint tokenize: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        } else if (!dir) {
            dir = a;
        } else {
            fprintf(stderr, "flint tokenize: more than one MODEL_DIR ('%s', '%s')\n", dir, a);
            return 2;
        }
    }
    if (dir && file) {
        fprintf(stderr, "flint tokenize: give MODEL_DIR or --tokenizer, not both\n");
        return 2;
    }
    flint_err err = {0};
    flint_tokenizer *tok = file ? flint_tokenizer_open(file, &err) : flint_tokenizer_open_dir(dir ? dir : FLINT_DEFAULT_MODEL, &err);
    if (!tok) {
        fprintf(stderr, "flint tokenize: %s\n", err.msg);
        return 1;
    }
    size_t len = 0;
    char *in = read_stdin(&len);
    int rc = 1;
    if (!in) {
        fprintf(stderr, "flint tokenize: cannot read stdin\n");
        goto out;
    }
    if (!jsonl) {
        int32_t *ids;
        int n;
        if (flint_tokenizer_encode(tok, in, len, add_special, &ids, &n, &err)) {
            fprintf(stderr, "flint tokenize: %s\n", err.msg);
            goto out;
        }
        print_ids(ids, n, 0);
        free(ids);
        rc = 0;
        goto out;
    }
    int line = 0;
    for (char *p = in; p < in + len;) {
        char *e = memchr(p, '\n', (size_t)(in + len - p));
        if (!e) e = in + len;
        line++;
        size_t k = (size_t)(e - p);
        while (k && (p[k - 1] == '\r' || p[k - 1] == ' ' || p[k - 1] == '\t')) k--;
        if (k) {
            cJSON *j = cJSON_ParseWithLength(p, k);
            const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "text");
            if (!cJSON_IsString(t)) {
                fprintf(stderr, "flint tokenize: stdin line %d: expected a JSON object {\"text\": \"...\"}\n", line);
                cJSON_Delete(j);
                goto out;
            }
            int32_t *ids;
            int n;
            if (flint_tokenizer_encode(tok, t->valuestring, strlen(t->valuestring), add_special, &ids, &n, &err)) {
                fprintf(stderr, "flint tokenize: stdin line %d: %s\n", line, err.msg);
                cJSON_Delete(j);
                goto out;
            }
            print_ids(ids, n, 1);
            free(ids);
            cJSON_Delete(j);
        }
        p = e + 1;
    }
    rc = 0;
out:
    if (fflush(stdout) && !rc) {
        fprintf(stderr, "flint tokenize: cannot write stdout\n");
        rc = 1;
    }
    free(in);
    flint_tokenizer_close(tok);
    return rc;
}
