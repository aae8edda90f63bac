/*
 * tokenizer.h: vocabularies read from GGUF metadata, text -> ids and ids -> text.
 *
 * SentencePiece vocabularies (tokenizer.ggml.model = "llama"): score-driven BPE merges over
 * UTF-8 characters, byte fallback <0xXX>, the dummy-prefix space, control tokens.
 * Byte-level BPE vocabularies (tokenizer.ggml.model = "gpt2", GPT-2 / Llama 3 / Qwen2 /
 * SmolLM2): a regex pre-tokenizer chosen by tokenizer.ggml.pre, the GPT-2 byte <-> unicode
 * alphabet, rank-driven merges from tokenizer.ggml.merges, added tokens matched first.
 * Not for: chat templates (chat.h) or sampling.
 */
#ifndef SEER_TOKENIZER_H
#define SEER_TOKENIZER_H

#include "gguf/gguf.h"
#include "seer.h"

/* Token types, as numbered in tokenizer.ggml.token_type. */
enum {
    SEER_TOKEN_NORMAL = 1,
    SEER_TOKEN_UNKNOWN = 2,
    SEER_TOKEN_CONTROL = 3,
    SEER_TOKEN_USER_DEFINED = 4,
    SEER_TOKEN_UNUSED = 5,
    SEER_TOKEN_BYTE = 6,
};

typedef enum { SEER_VOCAB_SPM = 1, SEER_VOCAB_BPE = 2 } seer_vocab_kind;

typedef struct seer_vocab seer_vocab;

/* Reads tokenizer.ggml.* from f. The vocabulary copies what it needs (f may be closed
 * afterwards). Unknown tokenizer models and unknown BPE pre-tokenizers (tokenizer.ggml.pre)
 * give SEER_ERR_UNSUPPORTED naming them; a BPE file without tokenizer.ggml.pre uses the
 * "default" pre-tokenizer, as llama.cpp does. */
seer_status seer_vocab_load(const gguf_file *f, seer_vocab **out);
void seer_vocab_free(seer_vocab *v);

seer_vocab_kind seer_vocab_kind_of(const seer_vocab *v);
int seer_vocab_size(const seer_vocab *v);
int seer_vocab_bos(const seer_vocab *v); /* -1 if none */
int seer_vocab_eos(const seer_vocab *v); /* -1 if none */
const char *seer_vocab_model_name(const seer_vocab *v); /* "llama", "gpt2" */
/* The token's text as stored in the vocabulary (NUL-terminated), NULL for a bad id. */
const char *seer_vocab_text(const seer_vocab *v, int32_t id);
int seer_vocab_type(const seer_vocab *v, int32_t id);

/* Same contract as seer_tokenize in seer.h, with the rules of llama.cpp: for BPE
 * vocabularies BOS is prepended only when add_bos is set AND the vocabulary asks for it
 * (seer_vocab_add_bos: tokenizer.ggml.add_bos_token, by default true only for the Llama 3
 * pre-tokenizer family); in every vocabulary user-defined tokens are matched in the text even
 * without parse_special, control tokens only with it. */
seer_status seer_vocab_encode(const seer_vocab *v, const char *text, size_t len, bool add_bos,
                              bool parse_special, int32_t *out, int cap, int *n_out);
/* seer_vocab_encode with parse_special, where a control token is recognised only where every
 * byte of its text is marked in special_ok [len] (seer_tokenize_marked in seer.h). */
seer_status seer_vocab_encode_marked(const seer_vocab *v, const char *text, const uint8_t *special_ok,
                                     size_t len, bool add_bos, int32_t *out, int cap, int *n_out);
/* Same contract as seer_token_piece in seer.h. */
int seer_vocab_piece(const seer_vocab *v, int32_t id, char *buf, int cap);

/* Checks that [s, s+len) is valid UTF-8; on failure sets *bad_offset and returns false. */
bool seer_utf8_valid(const char *s, size_t len, size_t *bad_offset);

/* The model's vocabulary (defined by the model loader). */
const seer_vocab *seer_model_vocab(const seer_model *m);

/* ---------------------------------------------------------------------------------------- */
/* Building a vocabulary without a file, and the accessors the encoder and decoder use.      */

/* Everything a vocabulary is made of. seer_vocab_load fills one from GGUF metadata; tests
 * build small vocabularies by hand. All arrays are copied. */
typedef struct {
    seer_vocab_kind kind;
    const char *model_name;     /* "llama"; NULL: "llama" */
    int n;                      /* V, >= 1 */
    const char *const *texts;   /* [V] token texts, "▁" (U+2581) standing for a space */
    const size_t *text_lens;    /* [V] byte lengths, or NULL: texts are NUL-terminated */
    const float *scores;        /* [V] merge priorities (higher merges first), or NULL: 0 */
    const int32_t *types;       /* [V] SEER_TOKEN_*, or NULL: all normal */
    int bos, eos, unk, pad;     /* -1 when absent; out-of-range ids count as absent */
    bool add_bos;               /* the file's tokenizer.ggml.add_bos_token (SPM: advice only;
                                   BPE: whether encoding with add_bos adds BOS) */
    bool add_space_prefix;      /* SentencePiece's add_dummy_prefix */
    /* Byte-level BPE only (kind SEER_VOCAB_BPE): */
    const char *const *merges;  /* [n_merges] "left right", rank = index */
    const size_t *merge_lens;   /* [n_merges] byte lengths, or NULL: NUL-terminated */
    int n_merges;
    const char *pre;            /* pre-tokenizer name (tokenizer.ggml.pre); NULL/"": "default" */
} seer_vocab_desc;

/* Encoding details (spm.c) beyond the contract of seer_tokenize: the dummy-prefix "▁" goes
 * only in front of the whole text, and only when it starts with plain text (not after each
 * special token); with parse_special, control and user-defined token texts are found longest
 * first (ties: lower id), each claiming its non-overlapping occurrences left to right in
 * what longer ones left; plain text only ever becomes normal or user-defined tokens, then
 * byte-fallback tokens, else one UNK per character that has no token (dropped if the
 * vocabulary has no UNK either). */

/* Builds a vocabulary. SEER_ERR_INVALID_ARG on inconsistent input, SEER_ERR_OOM,
 * SEER_ERR_UNSUPPORTED for an unknown BPE pre-tokenizer. Token types outside 1..6 count as
 * normal. When several tokens share a text, lookup by text finds
 * the lowest id. Byte tokens are those of type SEER_TOKEN_BYTE spelled "<0xXX>" (when types
 * is NULL, every token spelled so). */
seer_status seer_vocab_from_arrays(const seer_vocab_desc *d, seer_vocab **out);

int seer_vocab_unk(const seer_vocab *v);           /* -1 if none */
int seer_vocab_pad(const seer_vocab *v);           /* -1 if none */
bool seer_vocab_add_bos(const seer_vocab *v);
bool seer_vocab_add_space_prefix(const seer_vocab *v);
/* Length in bytes of the token's text (which may hold NUL bytes); -1 for a bad id. */
int seer_vocab_text_len(const seer_vocab *v, int32_t id);
float seer_vocab_score(const seer_vocab *v, int32_t id); /* 0 for a bad id */
/* The id whose text is exactly s[0..len), or -1. Empty texts are never found. */
int32_t seer_vocab_find(const seer_vocab *v, const char *s, size_t len);
/* The byte-fallback token <0xXX> for byte b, or -1. */
int32_t seer_vocab_byte_token(const seer_vocab *v, uint8_t b);
/* The control and user-defined tokens with non-empty text, longest text first (ties: lower
 * id first): the order in which parse_special looks for them. */
int seer_vocab_n_special(const seer_vocab *v);
int32_t seer_vocab_special(const seer_vocab *v, int i);
/* The token's piece without copying: *len bytes at the returned pointer (not
 * NUL-terminated); NULL and *len = 0 for a bad id. seer_vocab_piece copies this: it returns
 * the full length and writes min(length, cap) bytes, plus a NUL when length < cap. */
const char *seer_vocab_piece_ref(const seer_vocab *v, int32_t id, int *len);

/* End-of-generation tokens: EOS and the control or user-defined tokens spelled like an end
 * of turn or text ("<|im_end|>", "<|eot_id|>", "<|endoftext|>", "<|end_of_text|>",
 * "<|end|>", "<|eom_id|>", "<end_of_turn>", "<EOT>"), the list llama.cpp uses. */
bool seer_vocab_is_eog(const seer_vocab *v, int32_t id);

/* ---------------------------------------------------------------------------------------- */
/* Encoding internals shared by encode.c, spm.c and bpe.c.                                  */

typedef struct {
    int32_t *ids;
    size_t n, cap;
} seer_id_vec;

seer_status seer_id_vec_push(seer_id_vec *v, int32_t id);

/* Encodes one stretch of plain text (no special tokens) and appends the ids. */
seer_status seer_spm_encode_plain(const seer_vocab *v, const char *s, size_t n, bool prefix,
                                  seer_id_vec *out);
seer_status seer_bpe_encode_plain(const seer_vocab *v, const char *s, size_t n, seer_id_vec *out);

/* ---------------------------------------------------------------------------------------- */
/* Byte-level BPE (bpe.c)                                                                    */

/* Merge table and pre-tokenizer of a BPE vocabulary. Immutable after seer_bpe_init, so one
 * may be shared by threads. */
typedef struct seer_bpe seer_bpe;

/* merges[i] is "left right" (split at the first space after the first byte, as llama.cpp
 * does), rank i. pre names the pre-tokenizer (NULL or "" = "default"). */
seer_status seer_bpe_init(const char *pre, const char *const *merges, const size_t *merge_lens,
                          int n_merges, seer_bpe **out);
void seer_bpe_free(seer_bpe *b);
const seer_bpe *seer_vocab_bpe(const seer_vocab *v); /* NULL for SPM vocabularies */
/* The canonical name of the pre-tokenizer family ("gpt2", "llama3", "qwen2", "smollm",
 * "default"). */
const char *seer_bpe_pre_family(const seer_bpe *b);
/* SEER_OK when pre (a tokenizer.ggml.pre value; NULL or "" = "default") is known, else
 * SEER_ERR_UNSUPPORTED naming it; and the BOS default of its family. */
seer_status seer_bpe_check_pre(const char *pre);
bool seer_bpe_pre_add_bos(const char *pre);
/* Rank of merging s[0..left_len) with s[left_len..len), or -1 when no such merge. */
int seer_bpe_rank(const seer_bpe *b, const char *s, size_t left_len, size_t len);

/* The GPT-2 byte <-> unicode alphabet: printable Latin-1 bytes stand for themselves, the
 * other 68 bytes for U+0100.. in byte order. Writes the UTF-8 of byte b's character (1 or 2
 * bytes) and returns its length. */
int seer_bpe_byte_char(uint8_t b, char out[2]);
/* Maps a token text in that alphabet back to raw bytes; characters outside the alphabet are
 * copied unchanged. out needs room for n bytes; returns the length written. */
size_t seer_bpe_decode_text(const char *s, size_t n, char *out);
/* Splits valid UTF-8 s[0..n) into pre-tokenizer words; *ends receives the end offset of each
 * word (malloc'd, caller frees), *n_words their count. */
seer_status seer_bpe_pretokenize(const seer_bpe *b, const char *s, size_t n, size_t **ends,
                                 size_t *n_words);

/* UTF-8 helpers (utf8.c). Byte length of a sequence from its lead byte (1..4), 0 when the
 * byte cannot start a sequence. */
int seer_utf8_len_from_lead(uint8_t lead);
/* Classifies the sequence starting at s[0] among n available bytes:
 *   k > 0   a complete valid sequence of k bytes;
 *   0       the n bytes are a valid but unfinished prefix (or n == 0);
 *   -k < 0  invalid: the first k bytes are the maximal ill-formed subpart (Unicode 3.9),
 *           to be replaced by one U+FFFD; decoding resumes at s[k].
 * seer_utf8_valid reports the offset of the first byte of the first ill-formed sequence
 * (a truncated sequence at the end included). */
int seer_utf8_next(const uint8_t *s, size_t n);

/* Streaming detokenizer over a vocabulary (detok.c); seer_detok_* in seer.h wrap it.
 * A piece's bytes are appended to what is held back; the longest prefix that is complete
 * UTF-8 is emitted, ill-formed bytes become U+FFFD (EF BF BD, one per maximal subpart), an
 * unfinished trailing sequence (at most 3 bytes) is held until a later token completes it.
 *
 * strip_leading_space: SentencePiece encodes a text with a dummy-prefix space, so the first
 * piece after BOS normally starts with a space that is not part of the text; with this flag
 * one leading ' ' of the first non-empty piece after each BOS is dropped (as SentencePiece's
 * and llama2.c's decoders do). It is on by default for vocabularies with add_space_prefix.
 * Pieces pushed before any BOS are never stripped, so a caller that streams only generated
 * tokens after printing the prompt itself keeps every space. */
typedef struct {
    const seer_vocab *vocab;
    bool strip_leading_space; /* option, see above */
    bool strip_pending;       /* a BOS was seen and no non-empty piece since */
    int n_held;
    uint8_t held[4];          /* an unfinished UTF-8 sequence, n_held <= 3 */
} seer_vocab_detok;

void seer_vocab_detok_init(seer_vocab_detok *d, const seer_vocab *v);
/* Same contract as seer_detok_push / seer_detok_flush: returns the bytes written to buf
 * (NUL-terminated), or -1 when cap is too small, and then d is unchanged. An id outside the
 * vocabulary emits nothing. Flush emits U+FFFD for held bytes and forgets them. */
int seer_vocab_detok_push(seer_vocab_detok *d, int32_t token, char *buf, int cap);
int seer_vocab_detok_flush(seer_vocab_detok *d, char *buf, int cap);

#endif
