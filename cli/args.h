/* Small helpers for parsing subcommand options: numbers are validated fully (no trailing junk,
 * in range) and a bad value names the flag. */
#ifndef FLINT_CLI_ARGS_H
#define FLINT_CLI_ARGS_H

#include <stdint.h>

/* Each returns 0 on success, or prints "flint CMD: FLAG: ..." to stderr and returns -1. */
int flint_arg_int(const char *cmd, const char *flag, const char *val, long lo, long hi, int *out);
int flint_arg_u64(const char *cmd, const char *flag, const char *val, uint64_t *out);
int flint_arg_float(const char *cmd, const char *flag, const char *val, double lo, double hi, float *out);
/* Fetch the value after argv[*i] (advancing *i); prints an error when it is missing. */
const char *flint_arg_value(const char *cmd, int argc, char **argv, int *i);
/* --cuda-graph-sizes: the list is well formed (flint_graph_sizes_parse); the caller keeps val. */
int flint_arg_graph_sizes(const char *cmd, const char *val);

#endif
