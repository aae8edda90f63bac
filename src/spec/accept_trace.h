/*
 * accept_trace.h: acceptance traces inside the library (accept_trace.c): recording rounds
 * into a trace, and replaying a parsed one as a stream of per-token outcomes.
 */
#ifndef SEER_SPEC_ACCEPT_TRACE_H
#define SEER_SPEC_ACCEPT_TRACE_H

#include "seer.h"
#include "seer_bench.h"

#include <stdbool.h>
#include <stdint.h>

/* A new recording run (one generator's): returns its epoch, which keeps its lines apart
 * from another run's with the same handles. */
int seer_accept_trace_begin(seer_accept_trace *t);
/* Appends a round of sequence handle under drafter kind with budget K: accepted of drafted.
 * Rounds a trace cannot hold (plain decoding, nothing drafted) are skipped. */
seer_status seer_accept_trace_record(seer_accept_trace *t, int epoch, int handle, seer_spec_kind kind,
                                     int budget, int accepted, int drafted);
/* The handle's lines are finished: a reused handle starts new ones. */
void seer_accept_trace_close(seer_accept_trace *t, int epoch, int handle);

/* Replay: the line sequence handle reads for drafter kind with budget K (a line of that
 * budget when there is one, else of the kind), and its starting outcome in *start; -1 when
 * the trace has no line of the kind. */
int seer_accept_trace_pick(const seer_accept_trace *t, seer_spec_kind kind, int budget, int handle,
                           int64_t *start);
/* The outcome at *pos of line (true: accepted), advancing *pos; the line wraps around. */
bool seer_accept_trace_next(const seer_accept_trace *t, int line, int64_t *pos);

#endif
