/*
 * drafter.h: the interface between the generator and the drafters, and all a drafter sees.
 *
 * A drafter proposes, per sequence and round, a tree of draft tokens below the sequence's
 * pending token: nodes with a parent array (parents before children; a chain is the tree
 * whose parents are j - 1) and, for sampled sequences, the distribution each node's children
 * were drawn from. It sees each sequence through a seer_draft_seq (its tokens, sampler,
 * limits and the proposal to fill) and the run through a seer_draft_env (the target's
 * context and the tree shape to fill), never the generator: the scheduler runs requests
 * grouped per speculation class and a drafter works per sequence within them.
 *
 * A drafter owns its settings and declares everything about itself in its own file: init
 * reads its settings (seer_drafter_settings) into a struct of its own, and a seer_drafter_desc
 * gives its name (its --spec value, the server's 'spec' value, its metric label, its key in
 * cost tables and acceptance traces), its one-line help and what it needs and offers. The
 * registry (registry.c) is the one list of them; everything that names drafters (the kind
 * names, the CLI's help, the server, /metrics, auto's candidates) enumerates it. A new
 * drafter touches its own file, the registry's line and its tests.
 */
#ifndef SEER_DRAFTER_H
#define SEER_DRAFTER_H

#include "model/model.h"
#include "seer.h"

/* How a drafter's forward calls read the target: through the pool's quantised KV copy
 * (seer_batch.kv_quant), with the model's draft weights (seer_batch.draft_weights). */
typedef struct {
    bool kv_quant, draft_weights;
} seer_draft_reads;

/* One sequence as a drafter sees it. */
typedef struct {
    int slot;                      /* index of the drafter's state for this sequence: stable
                                    * while the sequence lives, < the context's n_seq_max */
    seer_seq_id seq;               /* the target's sequence; its cache holds tokens[0 .. L)
                                    * with L = n_tokens - 1 (the last token is pending) */
    const int32_t *tokens;         /* [n_tokens] prompt + emitted */
    int n_tokens, n_prompt;
    const seer_sampler_params *sp; /* the transform q must follow (as the target's p) */
    seer_sampler *smp;             /* uniforms of sampled draws */
    seer_constraint *con;          /* structured output (NULL: none): q is masked as p is */
    float accept_avg;              /* running acceptance; a drafter may reset it (with rounds)
                                    * when it renews its state */
    int rounds;                    /* rounds since the drafter last renewed its state */
    /* this round */
    int max_nodes, max_depth;      /* the proposal's limits (max_nodes 0: propose nothing) */
    int32_t *tok, *parent;         /* [max_nodes] the proposal */
    float *q;                      /* [max_nodes][V] backend memory of the target: row r is the
                                    * distribution the children of node r - 1 (row 0: of the
                                    * pending token) were drawn from; NULL when the sequence
                                    * is greedy */
    int n;                         /* out: nodes proposed */
    bool onehot;                   /* out: q is one-hot at the proposed tokens (q unused) */
    int n_acc;                     /* verified: the accepted nodes, path [n_acc] */
    const int32_t *path;
} seer_draft_seq;

/* Scratch of the step drafting helper, owned by the generator, sized for the target
 * context's n_batch_max (a draft model's context has the same). */
typedef struct {
    seer_sample_row *rows; /* [n_batch_max] */
    int32_t *ids;          /* [n_batch_max] */
    uint8_t *mask;         /* [n_batch_max][n_batch_max] */
} seer_draft_scratch;

/* The run as a drafter sees it. */
typedef struct {
    seer_context *ctx;            /* the target's */
    const seer_model *model;
    int V;
    int max_nodes;                /* G: the most nodes of a proposal */
    const int32_t *shape;         /* [max_nodes] the tree step drafters fill (breadth-first
                                   * parent array; a chain for chain speculation) */
    const int32_t *depth;         /* [max_nodes] depth of each shape node (1: below the root) */
    seer_draft_scratch *scratch;
    bool sparse_ffn;              /* draft calls on ctx multiply by its sparse FFN
                                   * (seer_batch.sparse_ffn; sparse_ffn_opts.c) */
} seer_draft_env;

typedef struct seer_drafter_ops seer_drafter_ops;
struct seer_drafter_ops {
    const char *name;
    /* Reads the drafter's settings from spec (SEER_ERR_INVALID_ARG for ones it cannot run). */
    seer_status (*init)(const seer_draft_env *env, const seer_spec_params *spec, void **impl);
    void (*free)(const seer_draft_env *env, void *impl);
    /* After the prompt of s is in the cache (prefill_q first, when it asked for queries). */
    seer_status (*seq_added)(const seer_draft_env *env, void *impl, seer_draft_seq *s);
    void (*seq_released)(const seer_draft_env *env, void *impl, int slot);
    /* Fills the proposals of n sequences (max_nodes, max_depth set; tok, parent, q given).
     * Must leave every target sequence's cache length as it found it. */
    seer_status (*propose)(const seer_draft_env *env, void *impl, int n, seer_draft_seq *seqs);
    /* After verification accepted s->n_acc of s->n nodes (s->path) and emitted one more. */
    seer_status (*verified)(const seer_draft_env *env, void *impl, seer_draft_seq *s);
    /* Prompt rows whose queries the drafter wants at prefill (SnapKV, retrieval): 0 = none;
     * the prefill flags them for capture in its batches (seer_batch_capture). */
    int (*prefill_q_rows)(void *impl, int n_prompt);
    seer_status (*prefill_q)(const seer_draft_env *env, void *impl, seer_draft_seq *s, const float *q,
                             int n_rows);
    bool has_q; /* proposals carry their distributions (false: one-hot, as n-gram's) */
    /* Drafters that read the target through a view of its cache (self-drafts, quantkv), NULL
     * for others: sets the view under which forward calls on the target read s's cache
     * (n_tokens - 1 slots) as this drafter's own draft steps would, and *reads: what else
     * those calls read as its own do. The caller clears the view afterwards. Lets the
     * hierarchy run the target as this drafter sees it. */
    seer_status (*view)(const seer_draft_env *env, void *impl, const seer_draft_seq *s, seer_draft_reads *reads);
};

extern const seer_drafter_ops seer_drafter_self;  /* streaming, retrieval, snapkv */
extern const seer_drafter_ops seer_drafter_model; /* standalone draft model */
extern const seer_drafter_ops seer_drafter_ngram;
/* The n-gram drafter's proposal (impl: its state) for tokens [n]: up to gmax tokens into
 * out; returns how many. Lets a round draft again after tokens it appended itself (the
 * grammar's forced tokens, constrain_rows.c). */
int seer_drafter_ngram_more(const void *impl, const int32_t *tokens, int n, int gmax, int32_t *out);
extern const seer_drafter_ops seer_drafter_quantkv; /* the target through its quantised KV copy */
extern const seer_drafter_ops seer_drafter_hierarchy; /* draft model -> sparse self-draft -> target */

/* What a drafter offers and needs (seer_drafter_desc.flags). */
enum {
    SEER_DRAFTER_BUDGETED = 1 << 0,    /* reads budget (K, SEER_DRAFTER_BUDGET) slots of the
                                        * target's cache: its traces and cost rows are per K */
    SEER_DRAFTER_DRAFT_MODEL = 1 << 1, /* needs seer_spec_params.draft_model */
    SEER_DRAFTER_AUTO = 1 << 2,        /* auto may choose it where the cost table has its row */
    SEER_DRAFTER_SPARSE_SELF = 1 << 3, /* a sparse self-draft: auto drafts it through the
                                        * model's draft weights where it holds them */
    SEER_DRAFTER_TREE_BASE = 1 << 4,   /* fills token trees (the base of "--spec tree") */
    SEER_DRAFTER_HIER_BASE = 1 << 5,   /* may be the hierarchy's middle level */
    SEER_DRAFTER_DRAFT_WEIGHTS = 1 << 6, /* its steps may multiply by the model's draft weights */
};

/* The budget K setting: declared by the streaming view (draft_self.c), read by the other
 * sparse views and quantkv, and by the library per K for SEER_DRAFTER_BUDGETED drafters (traces,
 * cost rows, auto's candidates). */
#define SEER_DRAFTER_BUDGET "spec-budget"

/* A setting as its drafter declares it: the public description (seer_spec_option, whose
 * drafter field the registry fills) and where its value lives. A drafter keeps its settings
 * in a struct of its own file, which seer_drafter_settings fills from seer_spec_params at
 * init; their values travel in seer_spec_params.ext, set and read by name. A setting several
 * drafters use (the sparse views' budget K and sinks) is declared once, by one of them, and
 * the others list it as one they read (SEER_DRAFTER_OPT_READ, or SEER_DRAFTER_READS below):
 * one name, one range, one value, filled into each reader's own struct. */
typedef struct {
    seer_spec_option o; /* SEER_DRAFTER_OPT_READ: o.flag alone, naming the setting it reads */
    size_t offset; /* SEER_DRAFTER_OPT_EXT: declared here, its value in a slot of
                    * seer_spec_params.ext; SEER_DRAFTER_OPT_READ: declared by another drafter */
    size_t own;    /* the offset of its field in the drafter's settings struct (an int for INT,
                    * a float for FLOAT, a seer_spec_kind for KIND) */
} seer_drafter_option;
#define SEER_DRAFTER_OPT_EXT ((size_t)-1)
#define SEER_DRAFTER_OPT_READ ((size_t)-2)
/* An entry of a drafter's options: it reads the setting named flag (declared by a drafter
 * registered before it) into the field at offset own of its settings struct. */
#define SEER_DRAFTER_READS(flag_, own_) {{.flag = (flag_)}, SEER_DRAFTER_OPT_READ, (own_)}

/* A drafter as it declares itself (in its own file). */
typedef struct {
    const char *name;           /* its kind's name: --spec, the server's 'spec', the metric
                                 * label, the key of its cost-table rows and trace lines */
    seer_spec_kind kind;        /* its kind: one of seer.h's, or SEER_SPEC_NONE for one given by
                                 * the registry (after seer.h's, in registry order) */
    const char *help;           /* one line for the CLI's help */
    const seer_drafter_ops *ops;
    unsigned flags;             /* SEER_DRAFTER_* */
    const seer_drafter_option *options; /* [n_options] its settings (spec_opts.c reads and
                                         * writes them) */
    int n_options;
} seer_drafter_desc;

/* Settings that belong to no drafter (their owner's name, help and options alone; no ops, no
 * kind): the sparse FFN's (sparse_ffn_opts.c). */
extern const seer_drafter_desc seer_sparse_ffn_desc;
/* The i-th owner of settings: the built-in drafters, the settings above, then the drafters
 * registered at run time (spec_opts.c numbers their ext slots in this order). */
const seer_drafter_desc *seer_settings_owner_at(int i);
/* Turns on ctx's sparse FFN where p asks for one (ffn_density < 1), *on then true; refuses it
 * for a drafter that does not read the target's weights, and under auto. */
seer_status seer_spec_sparse_ffn_apply(seer_context *ctx, const seer_spec_params *p, bool *on);

/* Fills the drafter's settings struct out with d's settings from p (those it declares and
 * those it reads, at their own offsets): a setting not set gets its default. */
void seer_drafter_settings(const seer_drafter_desc *d, const seer_spec_params *p, void *out);

/* The value of the setting named name in p (its default when not set; 0 for no such
 * setting), for the library's readers of a setting outside its drafters (the budget K of
 * traces, cost rows and auto's candidates). */
int seer_spec_value_int(const seer_spec_params *p, const char *name);

/* Adds a drafter to the registry after the built-in ones (for drafters outside the library:
 * a test's). Its kind, when SEER_SPEC_NONE, is the first free one (*kind, may be NULL).
 * SEER_ERR_INVALID_ARG for a name or kind taken, or when SEER_SPEC_KIND_MAX kinds are
 * known. d stays the caller's, alive while the library runs. */
seer_status seer_drafter_register(const seer_drafter_desc *d, seer_spec_kind *kind);
/* The registered drafter of kind k or of name, NULL for none. */
const seer_drafter_desc *seer_drafter_of_kind(seer_spec_kind k);
const seer_drafter_desc *seer_drafter_of_name(const char *name);
/* The i-th registered drafter (registry order), NULL past the last. */
const seer_drafter_desc *seer_drafter_at(int i);
/* Whether kind k's drafter has all of flags (false for none, auto and unknown kinds). */
bool seer_drafter_has(seer_spec_kind k, unsigned flags);
/* The names of the drafters with all of flags, "a, b or c", into buf [cap] (for messages). */
void seer_drafter_names(unsigned flags, char *buf, size_t cap);

/* The ops of the drafter registered under name, NULL for none. */
const seer_drafter_ops *seer_drafter_find(const char *name);

/* Step drafting (expand.c): fills the proposals of n sequences by drafting on context c (the
 * target's, or a draft model's with its vocabulary); sequence i drafts in dseq[i], which holds
 * its tokens [0, L) with L = n_tokens - 1, up to the first m nodes of env->shape, m being
 * max_nodes cut to the nodes of depth <= max_depth. One forward call per depth: while the
 * tree is a chain each call adds one token per sequence (as chain drafting always did); below
 * the first depth with siblings the call feeds the tree from there again under a tree mask,
 * so that no node sees a sibling's KV. A node's children are its draft's likeliest tokens
 * (greedy: the argmax, then the best others by logit) or draws without replacement from its
 * draft distribution (sampling; Sequoia), whose rows go to q (q_of(i): sequence i's rows in
 * c's backend memory, or NULL for the seqs' own). cap0 (may be NULL): per sequence, capture
 * the queries of its first row (the pending token) into qbuf ([n_layers][flagged][H*Dh],
 * flagged rows in order of i); cleared for a sequence that drafts nothing. Afterwards dseq[i]
 * holds L + the pending token + kept[i] nodes (the chain's first nodes when the tree is a
 * chain, else none; kept may be NULL). reads: what every draft call reads (on c).
 */
seer_status seer_draft_expand(const seer_draft_env *env, seer_context *c, int n, seer_draft_seq *seqs,
                              const seer_seq_id *dseq, float *const *q_of, uint8_t *cap0, float *qbuf,
                              int *kept, seer_draft_reads reads);

/* Leaves s's target sequence as a drafter found it: no view, the cache back to its
 * n_tokens - 1 slots (the first error of the two). */
seer_status seer_draft_leave(seer_context *c, const seer_draft_seq *s);

/* The sample row of node u (-1: the pending token) of s's proposal: the penalty history is
 * s's tokens + the path to u, written to hist (room: repeat_last_n + depth entries). */
seer_sample_row seer_draft_node_row(const seer_draft_seq *s, int u, const float *logits, float *probs,
                                    double uni, int32_t *hist);
/* The constraint's mask of the row of node u (-1: the pending token) of a proposal tok/parent:
 * the mask after the tokens on the path to u (constrain_rows.c). NULL when memory failed (the
 * row is then unmasked, and a refused token ends the generation). */
const uint32_t *seer_spec_row_mask(seer_constraint *con, const int32_t *tok, const int32_t *parent, int u);

/* The best count ids of row x [V] by value (ties: lower id) not in skip [n_skip] (expand.c). */
void seer_draft_top_ids(const float *x, int V, const int32_t *skip, int n_skip, int count, int32_t *out);
/* The same ids as seer_draft_top_ids with one id skipped, in one pass instead of a scan per id
 * (best_first.c: at a vocabulary of 128K the host's cost of a node's siblings); returns how
 * many it found (fewer than count only when the row has fewer other numbers). */
int seer_draft_top_excl(const float *x, int V, int32_t skip, int count, int32_t *out);
/* A draw from q [V] without the ids in skip [n_skip] (renormalised), inverse CDF in id order
 * with uniform u; -1 when nothing is left (expand.c). */
int32_t seer_draft_draw_without(const float *q, int V, const int32_t *skip, int n_skip, double u);

/* Best-first tree search (best_first.c, SpecExec): fills the proposals of n sequences on
 * context c (a draft model's) by expanding, call after call, the frontier nodes of highest
 * cumulative draft probability, each into its topk likeliest children (greedy) or topk draws
 * without replacement from its draft distribution (sampling), until max_nodes nodes. Many
 * frontier nodes share each forward call: a call feeds them with their ancestors under a tree
 * mask, at most c's n_batch_max rows. dseq[i] holds sequence i's tokens [0, L) with
 * L = n_tokens - 1; afterwards it holds L + the pending token. q_of as seer_draft_expand's. */
seer_status seer_draft_best_first(const seer_draft_env *env, seer_context *c, int n, seer_draft_seq *seqs,
                                  const seer_seq_id *dseq, float *const *q_of, int topk);

/* A uniform for a draw of s: from its generator when it samples, else -1 (greedy draws none). */
double seer_draft_uniform(seer_draft_seq *s);

#endif
