/* cli.h: what the seer subcommands share: strict number parsing and messages. */
#ifndef SEER_CLI_H
#define SEER_CLI_H

#include "seer.h"

#include <stdbool.h>
#include <stdint.h>

/* Strict parsers: the whole string must be a number within [lo, hi]; on failure they print
 * "seer: --flag: ..." to stderr and return false. */
bool cli_int(const char *flag, const char *s, long long lo, long long hi, long long *out);
bool cli_float(const char *flag, const char *s, double lo, double hi, double *out);
/* Prints "seer: <what>: <status message>" to stderr. */
void cli_error(const char *what, seer_status s);
bool cli_backend(const char *s, seer_backend_kind *out);

int cmd_generate(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_gen_model(int argc, char **argv);
int cmd_bench(int argc, char **argv);

#endif
