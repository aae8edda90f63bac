/*
 * cli_cmds.h: the options of `seer generate`, `chat` and `serve` beyond those they share
 * (cli_common), where the option table (cli_table.c) stores them. `seer bench`'s are in
 * bench.h.
 *
 * Not for: what the commands do with them (cmd_*.c).
 */
#ifndef SEER_CLI_CMDS_H
#define SEER_CLI_CMDS_H

#include "cli_opts.h"

typedef struct {
    cli_common c;
    const char *prompt, *prompt_file, *trace_file;
    bool json, ignore_eos, no_bos;
} gen_opts;

typedef struct {
    cli_common c;
} chat_opts;

typedef struct {
    cli_common c;
    const char *host, *api_key, *alias, *cors;
    long long port, max_body, max_requests, max_prompt, parallel, chunk, pages;
    long long drain, prefix, mix, max_conns, per_client, header_timeout;
    bool verbose;
    double stall;
} serve_opts;

#endif
