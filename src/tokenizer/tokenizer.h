/* tokenizer/tokenizer — vocabularies and tokenizers read from GGUF metadata.
 *
 * Kinds (`tokenizer.ggml.model`): "llama" = SentencePiece (scores, byte fallback <0xNN>, space
 * prefix `tokenizer.ggml.add_space_prefix`, unknown token); "gpt2" = byte-level BPE (merges,
 * byte-to-unicode mapping, the pre-tokenizer chosen by `tokenizer.ggml.pre`); "gemma4" = BPE in
 * SentencePiece style (kind PL_TOK_BPE: U+2581 for spaces, merges over raw UTF-8, "<0xNN>" byte
 * fallback, BOS always added; pre-tokenizer "gemma4"); "bert" = WordPiece
 * (BERT's basic split with lowercasing and accent stripping as
 * `tokenizer.ggml.normalizer.{lowercase,strip_accents}` say, then greedy longest-match-first;
 * word-initial pieces carry U+2581 in the GGUF, `##` continuations do not; add_special wraps the
 * text in [CLS] ... [SEP] as llama.cpp does). Anything else is
 * refused with a message naming it. Results equal llama.cpp's tokenizer for the same vocabulary.
 *
 * A loaded tokenizer copies what it needs and does not reference the pl_gguf afterwards; it is
 * immutable, so it can be shared by threads. Token pieces are the raw bytes a token stands for
 * (byte tokens <0xNN> are one byte; SentencePiece's U+2581 is a space; BPE's byte-to-unicode
 * mapping is undone), so the concatenation of pieces can split a UTF-8 character: the streaming
 * detokenizer holds back incomplete sequences.
 */
#ifndef PL_TOKENIZER_TOKENIZER_H
#define PL_TOKENIZER_TOKENIZER_H

#include "base/status.h"
#include "gguf/gguf.h"

#include <stddef.h>
#include <stdint.h>

typedef struct pl_tokenizer pl_tokenizer;

typedef enum { PL_TOK_SPM = 1, PL_TOK_BPE = 2, PL_TOK_WPM = 3 } pl_tokenizer_kind;

/* Token attributes, as llama.cpp derives them from `tokenizer.ggml.token_type`. */
typedef enum {
    PL_TOKEN_NORMAL = 1,
    PL_TOKEN_UNKNOWN = 2,
    PL_TOKEN_CONTROL = 3,
    PL_TOKEN_USER_DEFINED = 4,
    PL_TOKEN_UNUSED = 5,
    PL_TOKEN_BYTE = 6,
} pl_token_type;

pl_status pl_tokenizer_load(const pl_gguf *g, pl_tokenizer **out);
void pl_tokenizer_destroy(pl_tokenizer *t);

pl_tokenizer_kind pl_tokenizer_get_kind(const pl_tokenizer *t);
const char *pl_tokenizer_pre_name(const pl_tokenizer *t); /* BPE pre-tokenizer name, or "" */
int32_t pl_tokenizer_n_vocab(const pl_tokenizer *t);
int32_t pl_tokenizer_bos(const pl_tokenizer *t); /* -1 if none */
int32_t pl_tokenizer_eos(const pl_tokenizer *t); /* -1 if none */
int pl_tokenizer_add_bos(const pl_tokenizer *t); /* whether prompts get BOS by default */
int pl_tokenizer_add_eos(const pl_tokenizer *t);
/* A text pair (a reranker's query and document): whether SEP goes between them
 * (tokenizer.ggml.add_sep_token; WordPiece's default 1), and the SEP id (-1 if none). */
int pl_tokenizer_add_sep(const pl_tokenizer *t);
int32_t pl_tokenizer_sep(const pl_tokenizer *t);
/* 1 if generating this id ends the sequence (EOS, EOT, EOM and similar end-of-generation ids). */
int pl_tokenizer_is_eog(const pl_tokenizer *t, int32_t id);
/* A token marked CONTROL by llama.cpp's fix-ups (e.g. "<|im_end|>" stored as NORMAL) reports
 * CONTROL; an out-of-range id reports UNUSED. */
pl_token_type pl_tokenizer_token_type(const pl_tokenizer *t, int32_t id);
/* The longest piece of any token (bytes), to size pl_token_to_piece / stream buffers. */
size_t pl_tokenizer_max_piece_len(const pl_tokenizer *t);
/* The vocabulary's text of a token (as stored in GGUF, NUL-terminated), NULL if out of range. */
const char *pl_tokenizer_token_text(const pl_tokenizer *t, int32_t id);

/* Tokenize `len` bytes of text. add_special: add BOS/EOS as the vocabulary says. parse_special:
 * recognise the text of control/user-defined tokens inside `text` as those tokens. *ids is
 * malloc'ed (free it); text must be valid UTF-8 or PL_ERR_INVALID_ARG is returned.
 * USER_DEFINED tokens split the text even without parse_special (as in llama.cpp). */
pl_status pl_tokenize(const pl_tokenizer *t, const char *text, size_t len, int add_special,
                      int parse_special, int32_t **ids, size_t *n_ids);

/* A text pair (a reranker's query and document) as llama-server's format_prompt_rerank builds
 * it: [BOS] a [EOS] [SEP] b [EOS], each special as the vocabulary's add_bos / add_eos / add_sep
 * say (EOS falls back to SEP); the texts without special parsing. A BERT cross-encoder's
 * tokenizer (add_eos, EOS = SEP, no add_sep) gives [CLS] a [SEP] b [SEP]. */
pl_status pl_tokenize_pair(const pl_tokenizer *t, const char *a, size_t na, const char *b,
                           size_t nb, int32_t **ids, size_t *n_ids);

/* The bytes of one token. Control tokens give "" unless `special`. Returns the piece length;
 * writes at most cap bytes (no NUL). */
size_t pl_token_to_piece(const pl_tokenizer *t, int32_t id, char *buf, size_t cap, int special);

/* Whole-sequence detokenize as llama.cpp does (SentencePiece: the leading space of the first
 * token is removed when the vocabulary adds a space prefix). skip_special: drop control tokens.
 * *text is malloc'ed and NUL-terminated. Invalid ids are an error naming the id.
 * The output is the raw bytes of the pieces (it can be invalid UTF-8 if the ids are), with
 * llama.cpp's clean_spaces applied for the BPE pre-tokenizers that use it.
 * Same as pl_detokenize_ex(t, ids, n, skip_special, !skip_special, ...). */
pl_status pl_detokenize(const pl_tokenizer *t, const int32_t *ids, size_t n, int skip_special,
                        char **text, size_t *len);
/* llama_detokenize's two flags: remove_special drops a leading BOS (when the vocabulary adds BOS;
 * the leading-space rule then does not apply) and a trailing EOS (when it adds EOS);
 * unparse_special prints the text of control and unknown tokens. */
pl_status pl_detokenize_ex(const pl_tokenizer *t, const int32_t *ids, size_t n, int remove_special,
                           int unparse_special, char **text, size_t *len);

/* Streaming detokenizer: push ids one at a time, get text that never ends inside a UTF-8
 * sequence. Bytes that can never complete a valid sequence are replaced by U+FFFD (one per
 * maximal invalid subsequence). For a valid sequence, the concatenated output of pushing every id
 * (is_first = 1) and flushing equals pl_detokenize of the whole sequence, including the
 * SentencePiece leading-space rule and llama.cpp's clean_spaces (" ," -> ","...), for which a few
 * ASCII bytes (a trailing space, " '", " 'r") are held back until the next byte decides them. */
typedef struct {
    uint8_t st1, st2, st3; /* clean_spaces filter: state of each of the three passes */
    char x1;               /* pass 3: the letter held after " '" */
} pl_detok_clean_state;

typedef struct {
    const pl_tokenizer *tok;
    int skip_special;
    int first;           /* no token emitted yet (SentencePiece leading-space rule) */
    uint8_t pending[8];  /* bytes of an incomplete UTF-8 sequence */
    int n_pending;
    pl_detok_clean_state clean; /* held-back bytes of the clean_spaces filter */
    int no_clean;        /* 1: skip clean_spaces (structured output: the text must be exactly
                            the bytes the constraint matched); set after pl_detok_init */
} pl_detok_stream;

/* Output room that always suffices for one push or flush, given the longest piece. */
#define PL_DETOK_CAP(max_piece_len) (3 * (size_t)(max_piece_len) + 16)

void pl_detok_init(pl_detok_stream *s, const pl_tokenizer *t, int skip_special, int is_first);
/* Append the text for `id` to out; cap must be at least PL_DETOK_CAP(piece length) (use
 * pl_tokenizer_max_piece_len), a smaller cap that turns out too small aborts. An invalid id
 * adds nothing. Returns the bytes written. */
size_t pl_detok_push(pl_detok_stream *s, int32_t id, char *out, size_t cap);
/* Flush held-back bytes at the end of a sequence (an incomplete sequence as U+FFFD). Returns
 * bytes written; cap >= PL_DETOK_CAP(0) suffices. */
size_t pl_detok_flush(pl_detok_stream *s, char *out, size_t cap);

#endif
