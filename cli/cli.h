/* Subcommands of the flint binary. Each returns the process exit status: 0 success, 1 an error
 * the user can fix (bad file, bad input), 2 bad usage. */
#ifndef FLINT_CLI_CLI_H
#define FLINT_CLI_CLI_H

int flint_cmd_generate(int argc, char **argv);
int flint_cmd_tokenize(int argc, char **argv);
int flint_cmd_convert(int argc, char **argv);
/* server/ (built when the server module has sources: FLINT_HAVE_server) */
int flint_cmd_serve(int argc, char **argv);
int flint_cmd_load(int argc, char **argv);
/* evals/ (FLINT_HAVE_evals) */
int flint_cmd_eval(int argc, char **argv);
int flint_cmd_ab(int argc, char **argv);
int flint_cmd_bench(int argc, char **argv);
#ifdef FLINT_HAVE_evals
#include <stdio.h>
struct flint_eval_options;
/* The option parser `eval` and `ab` share (cli/cmd_eval.c); returns 0 or an exit status. */
int flint_cmd_eval_parse(const char *cmd, int argc, char **argv, struct flint_eval_options *o, void (*help)(FILE *));
#endif

#endif
