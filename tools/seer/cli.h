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
/* --weights stored|bf16|f32 */
bool cli_weights(const char *s, seer_weights *out);
/* Seconds on a monotonic clock. */
double cli_now_s(void);

/* The sampler flags generate and chat share: getopt_long values for their option tables,
 * and their parser: 1 = c was one of them and is stored in sp, 0 = c is not a sampler flag,
 * -1 = its value was bad (the message is printed). */
enum { CLI_O_TEMP = 512, CLI_O_TOPK, CLI_O_TOPP, CLI_O_MINP, CLI_O_REP, CLI_O_REPN, CLI_O_SEED };
int cli_sampler_opt(int c, const char *arg, seer_sampler_params *sp);

int cmd_generate(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_gen_model(int argc, char **argv);
int cmd_bench(int argc, char **argv);

#endif
