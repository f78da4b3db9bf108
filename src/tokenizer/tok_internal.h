/* tokenizer/tok_internal — what the tokenizer module's files share (not a public contract).
 *
 * The vocabulary (struct pl_tokenizer) is built once by vocab.c and read-only afterwards.
 * Functions here are prefixed pl_tok_ because they cross files inside the module; nothing
 * outside src/tokenizer/ includes this header except the module's unit test.
 *
 * Token attributes are kept as llama.cpp's bit set (a token can be NORMAL|CONTROL after the
 * end-of-generation fix-ups), the public pl_token_type is derived from it.
 */
#ifndef PL_TOKENIZER_TOK_INTERNAL_H
#define PL_TOKENIZER_TOK_INTERNAL_H

#include "tokenizer/pretokenize.h"
#include "tokenizer/tokenizer.h"

#include <stddef.h>
#include <stdint.h>

/* ---- UTF-8 (utf8.c) ---- */

/* Length of the sequence a lead byte announces, as llama.cpp's unicode_len_utf8 (1 for
 * continuation or invalid bytes). */
size_t pl_tok_utf8_len(uint8_t lead);

/* A symbol of the merge chain BPE and SentencePiece both work on. */
typedef struct {
    int prev, next;   /* neighbours in the live chain, -1 at the ends */
    const char *text; /* start of this symbol in the text */
    size_t n;         /* byte length; 0 once merged into its left neighbour */
} pl_tok_sym;

/* Split text[0..len) into one symbol per UTF-8 character (a truncated last one keeps what is
 * left), chained left to right, into s (room for len); returns how many. */
static inline int pl_tok_split_chars(const char *text, size_t len, pl_tok_sym *s) {
    int n = 0;
    for (size_t off = 0; off < len; n++) {
        size_t k = pl_tok_utf8_len((uint8_t)text[off]);
        if (k > len - off) k = len - off;
        s[n] = (pl_tok_sym){n - 1, off + k == len ? -1 : n + 1, text + off, k};
        off += k;
    }
    return n;
}

/* Merge symbol `right` into its left neighbour `left` if the pair is still what a queued bigram of
 * `size` bytes saw (both live, lengths summing to size); 0 when it is stale. */
static inline int pl_tok_sym_merge(pl_tok_sym *s, int left, int right, size_t size) {
    pl_tok_sym *l = &s[left], *r = &s[right];
    if (l->n == 0 || r->n == 0 || l->n + r->n != size) return 0;
    l->n += r->n;
    r->n = 0;
    l->next = r->next;
    if (r->next >= 0) s[r->next].prev = left;
    return 1;
}
/* Offset of the first byte of an invalid UTF-8 sequence, or len if all is valid (strict:
 * no overlongs, no surrogates, nothing above U+10FFFF). */
size_t pl_tok_utf8_invalid_at(const char *s, size_t len);
/* Encode cp into out (4 bytes room); returns the byte count. */
size_t pl_tok_utf8_put(uint32_t cp, char *out);
/* Byte-level BPE: the UTF-8 text (1 or 2 bytes) of the code point byte b is mapped to. */
const char *pl_tok_byte_to_utf8(uint8_t b, size_t *n);
/* Inverse mapping: the byte for code point cp, or -1 if cp is not one of the 256. */
int pl_tok_cp_to_byte(uint32_t cp);
/* Decode one valid code point at s (len > 0); sets *n to its byte length. */
uint32_t pl_tok_utf8_get(const char *s, size_t len, size_t *n);

/* ---- Unicode facts for WordPiece (unicode.c over the generated unicode_tables.c) ---- */
enum { PL_UNI_CONTROL = 1, PL_UNI_PUNCT = 2, PL_UNI_SYMBOL = 4, PL_UNI_MARK = 8,
       PL_UNI_SPACE = 16 };
typedef struct { uint32_t start; uint8_t flags; } pl_uni_flag_range;
typedef struct { uint32_t first, last, stride; int32_t delta; } pl_uni_lower_run;
typedef struct { uint32_t first, last, value; } pl_uni_map_range;
extern const pl_uni_flag_range pl_uni_flag_ranges[];
extern const int pl_uni_n_flag_ranges;
extern const pl_uni_lower_run pl_uni_lower_runs[];
extern const int pl_uni_n_lower_runs;
extern const pl_uni_map_range pl_uni_nfd_ranges[];
extern const int pl_uni_n_nfd_ranges;
/* PL_UNI_* bits of a code point: its general category (control = Cc Cf Co Cs, P*, S*, M*) and
 * whether it is white space (llama.cpp's list: \t..\r, space, U+0085, U+00A0, U+1680,
 * U+2000..U+200A, U+2028, U+2029, U+202F, U+205F, U+3000). */
unsigned pl_tok_cpt_flags(uint32_t cp);
uint32_t pl_tok_cpt_lower(uint32_t cp);     /* simple lowercase mapping */
uint32_t pl_tok_cpt_nfd_first(uint32_t cp); /* first code point of the canonical decomposition */

/* ---- string -> int32 hash map, open addressing (hashmap.c) ---- */
typedef struct {
    uint64_t hash;   /* XXH3 of the key; 0 marks an empty slot (real hashes are forced != 0) */
    const char *key; /* not owned: points into storage that outlives the map */
    uint32_t len;    /* key length in bytes */
    int32_t val;
} pl_tok_slot;

typedef struct {
    pl_tok_slot *slots; /* [cap] */
    size_t cap;         /* power of two */
    size_t n;           /* occupied slots */
} pl_tok_map;

pl_status pl_tok_map_init(pl_tok_map *m, size_t expected);
void pl_tok_map_destroy(pl_tok_map *m);
/* Insert if absent. Returns 1 if inserted, 0 if the key existed (*old set to its value), -1 if
 * growing the table failed. */
int pl_tok_map_put(pl_tok_map *m, const char *key, size_t len, int32_t val, int32_t *old);
/* Value for key, or -1. */
int32_t pl_tok_map_get(const pl_tok_map *m, const char *key, size_t len);

/* ---- the vocabulary ---- */
enum {
    PL_ATTR_UNDEFINED = 0,
    PL_ATTR_UNKNOWN = 1 << 0,
    PL_ATTR_UNUSED = 1 << 1,
    PL_ATTR_NORMAL = 1 << 2,
    PL_ATTR_CONTROL = 1 << 3,
    PL_ATTR_USER_DEFINED = 1 << 4,
    PL_ATTR_BYTE = 1 << 5,
    PL_ATTR_LSTRIP = 1 << 7,
    PL_ATTR_RSTRIP = 1 << 8,
};

struct pl_tokenizer {
    pl_tokenizer_kind kind;
    char *pre_name;          /* tokenizer.ggml.pre as given ("" for SPM or when absent) */
    int32_t n_vocab;
    char *text_arena;        /* all token texts, each NUL-terminated */
    uint32_t *text_off;      /* [n_vocab] offset of each token's text in text_arena */
    uint32_t *text_len;      /* [n_vocab] */
    float *score;            /* [n_vocab] SentencePiece scores (0 when absent) */
    uint16_t *attr;          /* [n_vocab] PL_ATTR_* bits */
    uint8_t *eog;            /* [n_vocab] 1 if the id ends generation */
    char *piece_arena;       /* every token's piece as token_to_piece(special = 1) gives it */
    uint32_t *piece_off;     /* [n_vocab] */
    uint32_t *piece_len;     /* [n_vocab] */
    size_t max_piece_len;
    pl_tok_map tok_map;      /* token text -> id */
    pl_tok_map merge_map;    /* "left right" merge text -> rank (BPE only) */
    char *merge_arena;       /* the merge strings the map's keys point to */
    int32_t *special;        /* ids of CONTROL/USER_DEFINED/UNKNOWN tokens, longest text first */
    int32_t n_special;
    int32_t byte_tok[256];   /* byte fallback: id of each raw byte (SPM and spm_bpe "<0xNN>",
                                BPE the byte's encoded text), -1 if the vocabulary lacks it */
    int32_t bos, eos, eot, eom, unk, pad; /* -1 when absent */
    int32_t sep;             /* WordPiece: appended after the text with add_special (-1: none) */
    int lowercase, strip_accents; /* WordPiece normalizer (tokenizer.ggml.normalizer.*) */
    size_t max_token_len;    /* longest token text in bytes (WordPiece's match window) */
    int add_bos, add_eos;
    int add_sep;             /* tokenizer.ggml.add_sep_token (WordPiece default 1): a pair gets SEP between */
    int add_space_prefix;    /* SPM: prefix a space; detokenize strips one leading space */
    int clean_spaces;        /* detokenize removes " ," " ." etc. (llama.cpp clean_spaces) */
    int ignore_merges;       /* BPE: a pre-token that is a whole token skips the merges */
    int spm_bpe;             /* BPE in SentencePiece style (Gemma 4, pl_pretok_flags.spm_style):
                                U+2581 for spaces, raw UTF-8, "<0xNN>" byte tokens */
    int newline_runs;        /* BPE: a newline-only pre-token that is a token is taken whole */
    pl_pretok *pretok;       /* BPE pre-tokenizer */
};

static inline const char *pl_tok_text(const pl_tokenizer *t, int32_t id) {
    return t->text_arena + t->text_off[id];
}

/* Build every token's piece (piece.c). */
pl_status pl_tok_build_pieces(pl_tokenizer *t);
/* The piece of id (NULL, *n = 0 for an invalid id); "" for control/unknown unless special. */
const char *pl_tok_piece(const pl_tokenizer *t, int32_t id, int special, size_t *n);

/* ---- algorithms (spm.c, bpe.c) ---- */
/* A growable id vector. */
typedef struct {
    int32_t *v;
    size_t n, cap;
} pl_tok_ids;
pl_status pl_tok_ids_push(pl_tok_ids *ids, int32_t id);

/* SentencePiece's escaping (tokenize.c): every space as U+2581, one more in front if prefix.
 * malloc'ed (NULL when out of memory), *n its length. */
char *pl_tok_escape_spaces(const char *s, size_t len, int prefix, size_t *n);
/* SentencePiece (llama.cpp's bigram merge by score): text is already space-escaped. */
pl_status pl_tok_spm(const pl_tokenizer *t, const char *text, size_t len, pl_tok_ids *out);
/* WordPiece of one raw fragment (wpm.c): BERT's basic split, then greedy longest match. */
pl_status pl_tok_wpm(const pl_tokenizer *t, const char *text, size_t len, pl_tok_ids *out);
/* BPE of one raw fragment: pre-tokenize, byte-encode (or, spm_bpe, escape spaces first and keep
 * the UTF-8), merge by rank. */
pl_status pl_tok_bpe(const pl_tokenizer *t, const char *text, size_t len, pl_tok_ids *out);

/* ---- detokenizer internals (detokenize.c) shared with the stream ---- */
/* llama.cpp clean_spaces as a streaming filter: three small state machines in a row. */
typedef pl_detok_clean_state pl_tok_cleaner;
/* Feed n bytes; writes the bytes that are final to out and returns their count (at most
 * n + 6). Flush with n = 0 and final = 1. */
size_t pl_tok_clean_feed(pl_tok_cleaner *c, const char *in, size_t n, int final, char *out);

#endif
