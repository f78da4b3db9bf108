/* tokenizer/pretokenize — byte-level BPE pre-tokenizers (internal to the tokenizer module; the
 * unit test uses it to check the splits).
 *
 * A pre-tokenizer is a list of regexes chosen by `tokenizer.ggml.pre`, applied as llama.cpp's
 * unicode_regex_split does: the text starts as one fragment; each regex in turn splits every
 * fragment into its matches AND the unmatched gaps between them (nothing is dropped), and a regex
 * sees only its fragment (a lookahead such as \s+(?!\S) stops at the fragment's end). The
 * concatenation of the spans is always the whole input.
 *
 * Regexes are compiled once with PCRE2 (UTF, UCP, $ only at the very end, JIT when available);
 * a compiled pre-tokenizer is read-only and can be used by several threads at once.
 */
#ifndef PL_TOKENIZER_PRETOKENIZE_H
#define PL_TOKENIZER_PRETOKENIZE_H

#include "base/status.h"

#include <stddef.h>

typedef struct pl_pretok pl_pretok;

/* What llama.cpp changes besides the regexes for a given pre-tokenizer name. */
typedef struct {
    int clean_spaces;  /* detokenize removes the space in " ," " ." " 's" ... */
    int ignore_merges; /* a pre-token that is already a token is not merged */
    int add_bos;       /* default of add_bos_token (the GGUF key overrides it) */
    int no_bos;        /* the BOS id is cleared (chatglm) */
    int spm_style;     /* SentencePiece-style BPE (Gemma 4): spaces become U+2581 before the split,
                          merges run over the raw UTF-8 (no GPT-2 byte map), and a symbol that is
                          not a token falls back to the "<0xNN>" byte tokens */
    int newline_runs;  /* a pre-token of newlines only that is a token is taken whole (Gemma 4) */
    int force_bos;     /* add_bos is on whatever tokenizer.ggml.add_bos_token says (Gemma 4) */
} pl_pretok_flags;

/* Compile the pre-tokenizer called `name` ("" or NULL = llama.cpp's "default"). An unknown name
 * is PL_ERR_UNSUPPORTED with a message naming it. flags may be NULL. */
pl_status pl_pretok_create(const char *name, pl_pretok **out, pl_pretok_flags *flags);
void pl_pretok_destroy(pl_pretok *p);

typedef struct {
    size_t off; /* byte offset in the text */
    size_t len; /* byte length, > 0 */
} pl_pretok_span;

/* Split len bytes of valid UTF-8. *spans is malloc'ed (free it); *n = 0 for empty text. */
pl_status pl_pretok_split(const pl_pretok *p, const char *text, size_t len, pl_pretok_span **spans,
                          size_t *n);

#endif
