/*
 * grammar.h: internals of the constraint engine. A grammar (GBNF-like text, or JSON schema and
 * regular expressions translated into that text) is compiled into flat rules over byte sets;
 * a byte-level pushdown matcher holds the set of grammar stacks that the bytes so far leave
 * alive (the scheme of llama.cpp's grammar sampler); a trie of the vocabulary's token byte
 * strings turns one matcher state into a token mask by walking the trie and pruning a subtree
 * as soon as no stack survives its prefix.
 *
 * Not for: sampling, speculation or the server (they use the public seer_constraint_* calls,
 * constrain.c); no Unicode classes: classes are over bytes, see grammar.c for how non-ASCII
 * text is matched.
 *
 * Limits (hostile grammars and schemas): SEER_G_MAX_TEXT bytes of text, SEER_G_MAX_ELEMS
 * compiled elements, SEER_G_MAX_STACKS live stacks and SEER_G_MAX_DEPTH elements per stack.
 * Compilation past a limit fails with a message; a byte that would exceed a limit while
 * matching is treated as not accepted.
 */
#ifndef SEER_CONSTRAIN_GRAMMAR_H
#define SEER_CONSTRAIN_GRAMMAR_H

#include "seer.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SEER_G_MAX_TEXT (1 << 20)
#define SEER_G_MAX_ELEMS (1 << 20)
#define SEER_G_MAX_RULES (1 << 16)
#define SEER_G_MAX_STACKS 256
#define SEER_G_MAX_DEPTH 512
#define SEER_G_MAX_REPEAT 1000

/* element kinds of the compiled grammar */
enum { SEER_GE_END = 0, SEER_GE_SET = 1, SEER_GE_REF = 2 };

typedef struct seer_grammar {
    uint8_t *kind;      /* [n_elems] SEER_GE_*; each alternative ends with SEER_GE_END */
    uint32_t *val;      /* [n_elems] set index (SET) or rule id (REF) */
    int n_elems;
    uint8_t (*sets)[32];/* [n_sets] 256-bit byte sets */
    int n_sets;
    uint32_t *alt_off;  /* [n_alts] start element of each alternative */
    uint32_t *rule_alt; /* [n_rules + 1] rule r's alternatives: alt_off[rule_alt[r] .. rule_alt[r+1]) */
    int n_rules;
    int root;
} seer_grammar;

/* Compiles GBNF-like text (grammar.c documents the syntax); the start rule is "root". */
seer_status seer_grammar_parse(const char *text, size_t len, seer_grammar **out);
void seer_grammar_free(seer_grammar *g);

/* A set of stacks: data holds n_stacks records [len, pos_0 .. pos_{len-1}] (bottom first);
 * the top of every non-empty stack is a SET element; an empty stack means the grammar is
 * complete. */
typedef struct {
    uint32_t *data;
    int n_words, cap_words;
    int n_stacks;
} seer_gset;

void seer_gset_free(seer_gset *s);
seer_status seer_gset_copy(seer_gset *dst, const seer_gset *src);
/* The state before any byte. */
seer_status seer_gset_start(const seer_grammar *g, seer_gset *out);
/* out = the stacks of in that accept byte b, advanced. Returns false if none does (or a limit
 * was hit), true otherwise; fails only for memory (*st). */
bool seer_gset_advance(const seer_grammar *g, const seer_gset *in, uint8_t b, seer_gset *out,
                       seer_status *st);
/* Whether the grammar may end here. */
bool seer_gset_accepting(const seer_gset *s);
/* Whether bytes [n] are accepted as a whole from state s (complete: and then may end). */
bool seer_grammar_accepts(const seer_grammar *g, const char *bytes, size_t n, bool complete);

/* ---- vocabulary trie and masks ------------------------------------------------------------ */

typedef struct seer_vocab_trie seer_vocab_trie;
/* pieces[i] of lens[i] bytes for token i (len 0: never allowed, e.g. control tokens);
 * eog [n_eog]: tokens allowed exactly when the grammar may end. */
seer_status seer_vocab_trie_build(const char *const *pieces, const int *lens, int n_vocab,
                                  const int32_t *eog, int n_eog, seer_vocab_trie **out);
void seer_vocab_trie_free(seer_vocab_trie *t);
int seer_vocab_trie_n_vocab(const seer_vocab_trie *t);
/* The bytes of token id (NULL and *len 0 if it has none). */
const char *seer_vocab_trie_piece(const seer_vocab_trie *t, int32_t id, int *len);
bool seer_vocab_trie_is_eog(const seer_vocab_trie *t, int32_t id);

/* Scratch for masks: the stack sets met so far, interned as the states of a lazily built
 * automaton (dfa.c) whose transitions are filled as walks need them, so that a trie walk is
 * mostly table lookups (inside a JSON string every byte leads back to the same state); and
 * the state of each trie depth on the current path. */
typedef struct {
    seer_gset *st;    /* [n] interned states */
    uint32_t *hash;   /* [n] */
    int32_t *trans;   /* [n][256] next state, SEER_DFA_UNKNOWN or SEER_DFA_DEAD */
    int n, cap;
    int32_t *tab;     /* [tab_cap] open addressing over state ids (-1: empty) */
    int tab_cap;
    seer_gset tmp;
    uint32_t gen;     /* counts the resets: a state id means one state within a generation */
} seer_dfa;
#define SEER_DFA_MAX 4096 /* states kept (1 KiB of transitions each); then it starts over */
#define SEER_DFA_UNKNOWN (-1)
#define SEER_DFA_DEAD (-2)
void seer_dfa_free(seer_dfa *d);
void seer_dfa_reset(seer_dfa *d);
/* The id of state s (added if new); -1 when full or out of memory. */
int seer_dfa_intern(seer_dfa *d, const seer_gset *s);
/* The state after byte b from state id: an id, SEER_DFA_DEAD, or -3 when full / out of memory. */
int seer_dfa_step(const seer_grammar *g, seer_dfa *d, int id, uint8_t b);

/* Masks of the last states met, by automaton state (a state's mask is a function of the
 * state alone): inside a JSON string the matcher returns to the same state token after
 * token, so the walk runs once per string, not once per token. */
#define SEER_MASK_CACHE 16
typedef struct {
    seer_gset *lv;
    int n_lv;
    int32_t *lvid; /* [n_lv] */
    seer_dfa dfa;
    uint32_t *cache;                  /* [SEER_MASK_CACHE][cache_words] */
    int cache_words;
    int32_t cache_id[SEER_MASK_CACHE]; /* the state of each entry (valid when cache_set) */
    uint32_t cache_gen[SEER_MASK_CACHE];
    int cache_n[SEER_MASK_CACHE];     /* its allowed count */
    bool cache_set[SEER_MASK_CACHE];
} seer_mask_scratch;
void seer_mask_scratch_free(seer_mask_scratch *m);
/* bits [(n_vocab + 31) / 32]: bit i of word i/32 set when token i is allowed in state s.
 * Returns the number of allowed tokens, or -1 for memory. */
int seer_mask_compute(const seer_grammar *g, const seer_vocab_trie *t, const seer_gset *s,
                      uint32_t *bits, seer_mask_scratch *scratch);

/* What a state forces, from the allowed tokens alone (seer_mask_forced). */
typedef struct {
    const char *bytes; /* the forced string: every allowed token is a prefix of it or begins
                        * with it (the trie's copy of a piece; valid while the trie lives) */
    int len;           /* its length, 0: nothing forced */
    int32_t tok;       /* where every allowed token is a prefix of the longest, the longest
                        * (the highest id where several spell its bytes: byte-fallback tokens
                        * come first, and a model writes the piece); else -1 */
} seer_forced;
/* What state s forces, without a whole mask: a walk over the trie that stops as soon as two
 * allowed tokens part at their first byte, so a state that allows much (inside a string)
 * costs little. Returns 0, 1 where it cannot tell cheaply (the text may end here: end-of-
 * generation tokens; the automaton filled up; nothing forced), -1 for memory. */
int seer_mask_forced(const seer_grammar *g, const seer_vocab_trie *t, const seer_gset *s,
                     seer_mask_scratch *scratch, seer_forced *out);

/* ---- translators into grammar text (NUL-terminated, malloc'd, *out) ---------------------- */

/* A JSON schema (the subset constrain.c's header lists) -> grammar text. */
seer_status seer_schema_to_grammar(const char *schema, size_t len, char **out);
/* Any JSON object (json_object mode). */
seer_status seer_json_object_grammar(char **out);
/* A regular expression (ECMA-like subset: literals, ., classes, groups, |, * + ? {m,n},
 * \d \w \s, anchors at the ends) -> grammar text whose root matches it. */
seer_status seer_regex_to_grammar(const char *re, size_t len, char **out);

/* seer_constraint_new over a vocabulary given as token byte strings (tests, benchmarks);
 * arguments as seer_vocab_trie_build's. */
seer_status seer_constraint_from_pieces(seer_constraint_kind kind, const char *text, size_t len,
                                        const char *const *pieces, const int *lens, int n_vocab,
                                        const int32_t *eog, int n_eog, seer_constraint **out);

/* The mask after tokens path [n] from c's current state (n = 0: the current mask): a pointer
 * into c's cache, valid until the next seer_constraint_accept or _rollback (speculation asks
 * for the rows of one round, most of them twice: drafting and verifying). All zeros when the
 * grammar refuses the path. NULL on out-of-memory. */
const uint32_t *seer_constraint_mask_after(seer_constraint *c, const int32_t *path, int n);

/* Whether token may come after path [n] (< 256) from c's current state: a walk over their
 * bytes, no mask. */
bool seer_constraint_allows_after(seer_constraint *c, const int32_t *path, int n, int32_t token);
/* seer_mask_forced after path [n] from c's current state, without a mask (the states are
 * c's scratch; masks already computed stay valid). 0: *out says what is forced (len 0 when
 * nothing or the path is refused); 1: cannot tell cheaply (a full mask decides); -1: memory. */
int seer_constraint_forced_after(seer_constraint *c, const int32_t *path, int n, seer_forced *out);

/* The bytes token id stands for in c's vocabulary (NULL, *len 0: none, e.g. control tokens). */
const char *seer_constraint_piece(const seer_constraint *c, int32_t id, int *len);

/* growable text used by the translators */
typedef struct {
    char *s;
    size_t n, cap;
    bool oom;
} seer_gbuf;
void seer_gbuf_put(seer_gbuf *b, const char *s, size_t n);
void seer_gbuf_puts(seer_gbuf *b, const char *s);
void seer_gbuf_printf(seer_gbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends s [n] as a quoted grammar literal. */
void seer_gbuf_literal(seer_gbuf *b, const char *s, size_t n);
/* Appends the regex re [n] as a grammar expression to expr. json: the expression matches
 * the text inside a JSON string literal (as a schema's pattern: escaped as JSON needs, and a
 * pattern without ^ or $ may have any characters before or after its match; grammar rules
 * jchar must exist). Returns SEER_OK or an error with a message. */
seer_status seer_regex_expr(const char *re, size_t n, seer_gbuf *expr, bool json);

#endif
