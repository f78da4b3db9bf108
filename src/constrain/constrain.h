/* constrain/constrain — structured output: JSON schemas, regular expressions, choice lists and
 * GBNF grammars compiled into one byte-level pushdown automaton, and the per-step token masks.
 *
 * Pipeline. Every input becomes GBNF text first (llama.cpp's grammar syntax, documented in
 * docs/SERVER.md): a JSON schema (schema.c, jansson) and a regular expression (regex.c) are
 * translated into rules, a choice list into an alternation of literals. The GBNF parser (gbnf.c)
 * turns the text into rules over BYTES: a character class over code points becomes alternatives
 * of UTF-8 byte-range sequences, so the matcher never decodes UTF-8 and a token that ends inside a
 * character is handled like any other prefix. Errors name the problem ("json_schema: ...",
 * "regex: ...", "grammar: line 3: ...") and are returned as PL_ERR_INVALID_ARG.
 *
 * Matcher (matcher.c). A state is a set of stacks, as llama.cpp's grammar stacks: each stack
 * lists element positions still to match, the top one a byte set; an empty stack means the input
 * so far is a complete match (an accepting state). Advancing by a byte keeps the stacks whose top
 * set holds it, pops finished alternatives (a tail call does not grow the stack) and expands rule
 * references at the top. Left recursion is refused at compile time, so expansion terminates.
 * States are canonical (stacks sorted, duplicates removed), so equal states compare byte-equal.
 *
 * Token masks (mask.c). A pl_cons_registry belongs to one vocabulary (one engine). It holds a
 * byte trie of the tokens' pieces (the bytes the detokenizer emits for them), built on first use,
 * and the compiled grammars keyed by their GBNF text, shared by the requests that ask for the
 * same constraint and reference counted. Each grammar caches the allowed-token bitset of the
 * states it met (bounded LRU), computed by walking the trie from the state and pruning every
 * branch the automaton rejects. End-of-generation tokens are allowed exactly in accepting states;
 * control and empty tokens never.
 *
 * Threads. Compiling and pl_cons_acquire / pl_cons_release may run in any thread (the registry
 * has a mutex); masks and state advances run in the engine thread only.
 */
#ifndef PL_CONSTRAIN_CONSTRAIN_H
#define PL_CONSTRAIN_CONSTRAIN_H

#include "pagellm.h"

#include "base/status.h"
#include "tokenizer/tokenizer.h"

#include <stddef.h>
#include <stdint.h>

/* ---- compiling ---- */

/* The GBNF text of a constraint (malloc'ed, NUL-terminated). `text` is the JSON schema (text
 * ignored for JSON_OBJECT), the regular expression or the grammar; choices are used for CHOICE. */
pl_status pl_cons_to_gbnf(pl_constraint_kind kind, const char *text, const char *const *choices,
                          int32_t n_choices, char **gbnf);
/* Parts of it, for tests and the fuzz target. */
pl_status pl_schema_to_gbnf(const char *schema_json, char **gbnf);
/* The schema's grammar in another syntax than JSON's: PL_SCHEMA_GEMMA is Gemma 4's tool-call
 * arguments (bare keys, strings between <|"|> marks, no whitespace; a string holds no '<'). */
typedef enum { PL_SCHEMA_JSON, PL_SCHEMA_GEMMA } pl_schema_dialect;
pl_status pl_schema_to_gbnf_dialect(const char *schema_json, pl_schema_dialect dialect, char **gbnf);
/* The regex as a GBNF expression (no rule around it). json_string: it is a JSON string's
 * `pattern`: `"` and `\` match their escapes and classes never produce control characters. */
pl_status pl_regex_to_gbnf(const char *regex, int json_string, char **expr);

typedef struct pl_grammar pl_grammar;

/* Parse GBNF text (rule `root` is the start). */
pl_status pl_grammar_parse(const char *gbnf, pl_grammar **out);
void pl_grammar_destroy(pl_grammar *g);
/* Elements (for limits and tests). */
size_t pl_grammar_size(const pl_grammar *g);

/* ---- matching ---- */

/* A matcher state: a canonical list of stacks, [n_stacks] then per stack [len, pos...]. */
typedef struct {
    uint32_t *v;
    size_t n, cap;
} pl_gstate;

/* Scratch for advancing (reused, grow-only; one per thread). */
typedef struct pl_gscratch pl_gscratch;
pl_gscratch *pl_gscratch_create(void);
void pl_gscratch_destroy(pl_gscratch *s);

/* The start state. PL_ERR_NOMEM, or PL_ERR_INVALID_ARG when it has too many stacks. */
pl_status pl_gstate_start(const pl_grammar *g, pl_gscratch *s, pl_gstate *st);
void pl_gstate_free(pl_gstate *st);
pl_status pl_gstate_copy(pl_gstate *dst, const pl_gstate *src);
/* Advance `st` over n bytes: 1 if all were accepted (st updated), 0 if one was rejected (st
 * unchanged), -1 out of memory. */
int pl_gstate_advance(const pl_grammar *g, pl_gscratch *s, pl_gstate *st, const uint8_t *bytes,
                      size_t n);
int pl_gstate_accepting(const pl_gstate *st);
int pl_gstate_dead(const pl_gstate *st); /* no stack left: nothing can follow */
/* Whether the whole string is a complete match (tests). -1 out of memory. */
int pl_grammar_matches(const pl_grammar *g, const char *s, size_t n);

/* ---- token masks ---- */

typedef struct pl_cons_registry pl_cons_registry;
typedef struct pl_cons pl_cons; /* a compiled grammar with its mask cache (shared) */

pl_cons_registry *pl_cons_registry_create(const pl_tokenizer *tok);
void pl_cons_registry_destroy(pl_cons_registry *r);
/* Compile (or find) the constraint of a request; the caller holds a reference. */
pl_status pl_cons_acquire(pl_cons_registry *r, pl_constraint_kind kind, const char *text,
                          const char *const *choices, int32_t n_choices, pl_cons **out);
void pl_cons_release(pl_cons_registry *r, pl_cons *c);
const pl_grammar *pl_cons_grammar(const pl_cons *c);

/* The allowed tokens of state st: a bitset of n_vocab bits (word i holds ids 64i..64i+63),
 * valid until the next call on this registry; *n_allowed counts them. NULL when out of memory.
 * Engine thread only. */
const uint64_t *pl_cons_mask(pl_cons_registry *r, pl_cons *c, const pl_gstate *st,
                             int32_t *n_allowed);
/* Advance st over token id's piece (engine thread). 1 accepted, 0 rejected, -1 no memory.
 * End-of-generation tokens leave st as it is. */
int pl_cons_advance(pl_cons_registry *r, pl_cons *c, pl_gstate *st, int32_t id);
/* The start state of c (engine or caller thread: uses its own scratch). */
pl_status pl_cons_start(const pl_cons *c, pl_gstate *st);

typedef struct {
    uint64_t mask_hits, mask_misses; /* cached mask lookups */
    uint64_t trie_nodes;             /* trie nodes visited computing masks */
    int32_t grammars;                /* compiled grammars held */
    uint64_t cached_masks;           /* masks held by all of them */
} pl_cons_stats;
/* Bound the masks held by all grammars (default: 128 MB of them); for tests. */
void pl_cons_registry_limit(pl_cons_registry *r, size_t max_masks);
void pl_cons_get_stats(pl_cons_registry *r, pl_cons_stats *s);

#endif
