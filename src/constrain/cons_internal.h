/* constrain/cons_internal — the grammar's representation, shared by the parser (gbnf.c), the
 * builder (grammar.c), the matcher (matcher.c) and the masks (mask.c). Not a public contract.
 *
 * A grammar is a flat array of 32-bit elements: rule r's alternatives are stored one after the
 * other from rule_start[r], each ended by K_ALT (another follows) or K_END (the last). An element
 * is a reference to a rule (K_REF) or a byte set (K_SET, an index into `sets`, 256 bits each).
 * Matcher stacks hold element positions; a position is always that of a K_SET or K_REF element.
 */
#ifndef PL_CONSTRAIN_CONS_INTERNAL_H
#define PL_CONSTRAIN_CONS_INTERNAL_H

#include "constrain/constrain.h"
#include "base/buf.h"

#include <stddef.h>
#include <stdint.h>

enum { K_END = 0, K_ALT = 1, K_REF = 2, K_SET = 3 };
#define EL(k, a) (((uint32_t)(k) << 30) | (uint32_t)(a))
#define EL_KIND(e) ((e) >> 30)
#define EL_ARG(e) ((e) & 0x3fffffffu)
/* Whether element e ends an alternative. */
#define EL_ENDS(e) (EL_KIND(e) <= K_ALT)

enum {
    PL_GRAMMAR_MAX_ELEMENTS = 1 << 21, /* a bigger grammar is refused */
    PL_GRAMMAR_MAX_REPEAT = 10000,     /* {m,n}: n at most this */
    PL_GSTATE_MAX_STACKS = 4096,       /* more stacks in one state: the input is too ambiguous */
    PL_GSTATE_MAX_DEPTH = 1024,        /* deeper stacks are dropped (nesting limit) */
};

typedef struct {
    uint8_t b[32];
} pl_byteset;

static inline int byteset_has(const pl_byteset *s, uint8_t c) { return s->b[c >> 3] >> (c & 7) & 1; }

struct pl_grammar {
    uint32_t *el;          /* [n_el] elements */
    size_t n_el;
    uint32_t *rule_start;  /* [n_rules] first element of each rule */
    uint32_t *alt_first;   /* [n_alts] first element of every alternative, rule by rule */
    uint32_t *rule_alt0;   /* [n_rules + 1] rule r's alternatives: alt_first[rule_alt0[r] ..) */
    size_t n_rules, n_alts;
    pl_byteset *sets;      /* [n_sets] */
    size_t n_sets;
    uint32_t root;
};

/* ---- building (grammar.c): rules grow separately, then are flattened ---- */

typedef struct {
    uint32_t *el;
    size_t n, cap;
    char *name;            /* malloc'ed */
    int defined;
    int line;              /* where it was referenced first (for "undefined rule" messages) */
} pl_brule;

typedef struct {
    pl_brule *rules;
    size_t n_rules, cap_rules;
    pl_byteset *sets;
    size_t n_sets, cap_sets;
    size_t total;          /* elements in all rules */
} pl_gbuilder;

void pl_gb_init(pl_gbuilder *b);
void pl_gb_destroy(pl_gbuilder *b);
/* A rule by name (created undefined if new); -1 out of memory. */
int32_t pl_gb_rule(pl_gbuilder *b, const char *name, size_t len);
/* A new anonymous rule named after `parent`; -1 out of memory. */
int32_t pl_gb_anon(pl_gbuilder *b, int32_t parent);
/* Append element(s) to rule r: 0, or -1 (out of memory / too large: message set). */
int pl_gb_push(pl_gbuilder *b, int32_t r, uint32_t e);
int pl_gb_push_n(pl_gbuilder *b, int32_t r, const uint32_t *e, size_t n);
/* The set id of a byte set (deduplicated); -1 out of memory. */
int32_t pl_gb_set(pl_gbuilder *b, const pl_byteset *s);
/* A character class over code points: sorted, merged ranges [lo, hi] pairs (n pairs), already
 * negated if it was; appends its elements (one K_SET, or a K_REF to a rule of UTF-8 byte
 * sequences) to rule r. parent names the anonymous rule. 0 or -1. */
int pl_gb_class(pl_gbuilder *b, int32_t r, int32_t parent, const uint32_t *ranges, size_t n);
/* Flatten into a grammar (root = rule named "root"): checks undefined rules and left recursion. */
pl_status pl_gb_finish(pl_gbuilder *b, pl_grammar **out);

/* Matcher (matcher.c): the state after byte c from state array `in` (into out; may be empty).
 * 0, or -1 (out of memory / too many stacks; message set). */
int pl_gstate_step(const pl_grammar *g, pl_gscratch *s, const uint32_t *in, uint8_t c,
                   pl_gstate *out);

/* Code-point range sets (sorted, merged pairs), shared by the GBNF and regex parsers. */
typedef struct {
    uint32_t *r;           /* [2n] lo, hi */
    size_t n, cap;
} pl_cpset;
int pl_cpset_add(pl_cpset *s, uint32_t lo, uint32_t hi);
/* Sort and merge; negate: complement over [0, 0x10FFFF]. Surrogates are always removed. */
int pl_cpset_normalize(pl_cpset *s, int negate);
void pl_cpset_free(pl_cpset *s);

/* pl_fail(PL_ERR_INVALID_ARG, ...) that returns -1 (the compilers' int convention). */
int pl_cons_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The integers of [lo, hi] (a side absent: unbounded, up to 16 digits) as a GBNF expression
 * appended to b (intrange.c); -1 when the range is empty. */
int pl_gbnf_int_range(pl_strbuf *b, int has_lo, int64_t lo, int has_hi, int64_t hi);

/* UTF-8 decode one code point at *p (advancing it); -1 on invalid input. */
int32_t pl_utf8_next(const char **p, const char *end);
/* UTF-8 encode c into o (4 bytes of room); returns the length. */
int pl_utf8_encode(uint32_t c, uint8_t *o);

#endif
