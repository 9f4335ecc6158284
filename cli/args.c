/* Option value parsing shared by the subcommands (see args.h). */
#include "cli/args.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "verifier/engine.h" /* flint_graph_sizes_parse */

int flint_arg_int(const char *cmd, const char *flag, const char *val, long lo, long hi, int *out) {
    char *end;
    errno = 0;
    long v = strtol(val, &end, 10);
    if (errno || end == val || *end || v < lo || v > hi) {
        fprintf(stderr, "flint %s: %s expects an integer in [%ld, %ld], got '%s'\n", cmd, flag, lo, hi, val);
        return -1;
    }
    *out = (int)v;
    return 0;
}

int flint_arg_u64(const char *cmd, const char *flag, const char *val, uint64_t *out) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(val, &end, 10);
    if (errno || end == val || *end || val[0] == '-') {
        fprintf(stderr, "flint %s: %s expects a non-negative integer, got '%s'\n", cmd, flag, val);
        return -1;
    }
    *out = v;
    return 0;
}

int flint_arg_float(const char *cmd, const char *flag, const char *val, double lo, double hi, float *out) {
    char *end;
    errno = 0;
    double v = strtod(val, &end);
    if (errno || end == val || *end || !isfinite(v) || v < lo || v > hi) {
        fprintf(stderr, "flint %s: %s expects a number in [%g, %g], got '%s'\n", cmd, flag, lo, hi, val);
        return -1;
    }
    *out = (float)v;
    return 0;
}

const char *flint_arg_value(const char *cmd, int argc, char **argv, int *i) {
    if (*i + 1 >= argc) {
        fprintf(stderr, "flint %s: %s needs a value\n", cmd, argv[*i]);
        return NULL;
    }
    return argv[++*i];
}

int flint_arg_graph_sizes(const char *cmd, const char *val) {
    flint_engine_options probe;
    flint_err e = {0};
    if (!flint_graph_sizes_parse(val, &probe, &e)) return 0;
    fprintf(stderr, "flint %s: %s\n", cmd, e.msg);
    return -1;
}
