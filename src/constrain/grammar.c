/* constrain/grammar — building a grammar: rules grow one by one (the parsers create anonymous
 * rules for groups and repetitions while they parse another), character classes over code points
 * become UTF-8 byte sequences, and pl_gb_finish flattens the rules into the immutable pl_grammar,
 * refusing references to undefined rules and left recursion (which would make the matcher's
 * expansion loop forever). See cons_internal.h for the layout.
 */
#include "constrain/cons_internal.h"
#include "base/buf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int pl_cons_fail(const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    pl_fail(PL_ERR_INVALID_ARG, "%s", msg);
    return -1;
}

void pl_gb_init(pl_gbuilder *b) { memset(b, 0, sizeof *b); }

void pl_gb_destroy(pl_gbuilder *b) {
    for (size_t i = 0; i < b->n_rules; i++) PL_FREE_ALL(b->rules[i].el, b->rules[i].name);
    PL_FREE_ALL(b->rules, b->sets);
    memset(b, 0, sizeof *b);
}

static int32_t new_rule(pl_gbuilder *b, char *name) {
    if (!name || pl_array_reserve(&b->rules, &b->cap_rules, b->n_rules + 1, sizeof *b->rules)) {
        free(name);
        pl_fail(PL_ERR_NOMEM, "grammar: out of memory");
        return -1;
    }
    if (b->n_rules >= PL_GRAMMAR_MAX_ELEMENTS) {
        free(name);
        pl_fail(PL_ERR_INVALID_ARG, "grammar: too many rules (at most %d)", PL_GRAMMAR_MAX_ELEMENTS);
        return -1;
    }
    b->rules[b->n_rules] = (pl_brule){.name = name};
    return (int32_t)b->n_rules++;
}

int32_t pl_gb_rule(pl_gbuilder *b, const char *name, size_t len) {
    for (size_t i = 0; i < b->n_rules; i++)
        if (strlen(b->rules[i].name) == len && !memcmp(b->rules[i].name, name, len)) return (int32_t)i;
    return new_rule(b, strndup(name, len));
}

int32_t pl_gb_anon(pl_gbuilder *b, int32_t parent) {
    char buf[96];
    snprintf(buf, sizeof buf, "%.64s_%zu", parent >= 0 ? b->rules[parent].name : "anon", b->n_rules);
    int32_t r = new_rule(b, strdup(buf));
    if (r >= 0) b->rules[r].defined = 1;
    return r;
}

int pl_gb_push(pl_gbuilder *b, int32_t r, uint32_t e) { return pl_gb_push_n(b, r, &e, 1); }

int pl_gb_push_n(pl_gbuilder *b, int32_t r, const uint32_t *e, size_t n) {
    if (b->total + n > PL_GRAMMAR_MAX_ELEMENTS) {
        pl_fail(PL_ERR_INVALID_ARG, "grammar: too large (more than %d elements; repetition "
                "counts multiply the size)", PL_GRAMMAR_MAX_ELEMENTS);
        return -1;
    }
    pl_brule *R = &b->rules[r];
    if (pl_array_reserve(&R->el, &R->cap, R->n + n, sizeof *R->el)) {
        pl_fail(PL_ERR_NOMEM, "grammar: out of memory");
        return -1;
    }
    memcpy(R->el + R->n, e, n * sizeof *e);
    R->n += n;
    b->total += n;
    return 0;
}

int32_t pl_gb_set(pl_gbuilder *b, const pl_byteset *s) {
    for (size_t i = b->n_sets; i-- > 0;) /* recent sets first: literals repeat their bytes */
        if (!memcmp(&b->sets[i], s, sizeof *s)) return (int32_t)i;
    if (pl_array_reserve(&b->sets, &b->cap_sets, b->n_sets + 1, sizeof *b->sets)) {
        pl_fail(PL_ERR_NOMEM, "grammar: out of memory");
        return -1;
    }
    b->sets[b->n_sets] = *s;
    return (int32_t)b->n_sets++;
}

static int32_t range_set(pl_gbuilder *b, unsigned lo, unsigned hi) {
    pl_byteset s = {{0}};
    for (unsigned c = lo; c <= hi; c++) s.b[c >> 3] |= (uint8_t)(1u << (c & 7));
    return pl_gb_set(b, &s);
}

/* ---- code-point sets ---- */

int pl_cpset_add(pl_cpset *s, uint32_t lo, uint32_t hi) {
    if (pl_array_reserve(&s->r, &s->cap, 2 * s->n + 2, sizeof *s->r)) return -1;
    s->r[2 * s->n] = lo;
    s->r[2 * s->n + 1] = hi;
    s->n++;
    return 0;
}

void pl_cpset_free(pl_cpset *s) {
    free(s->r);
    memset(s, 0, sizeof *s);
}

static int cmp_pair(const void *a, const void *b) {
    const uint32_t *x = a, *y = b;
    return (x[0] > y[0]) - (x[0] < y[0]);
}

int pl_cpset_normalize(pl_cpset *s, int negate) {
    if (s->n > 1) qsort(s->r, s->n, 2 * sizeof *s->r, cmp_pair);
    size_t w = 0;
    for (size_t i = 0; i < s->n; i++) {
        uint32_t lo = s->r[2 * i], hi = s->r[2 * i + 1];
        if (hi > 0x10FFFF) hi = 0x10FFFF;
        if (lo > hi) continue;
        if (w && lo <= s->r[2 * w - 1] + 1) {
            if (hi > s->r[2 * w - 1]) s->r[2 * w - 1] = hi;
        } else {
            s->r[2 * w] = lo;
            s->r[2 * w + 1] = hi;
            w++;
        }
    }
    s->n = w;
    pl_cpset out = {0};
    uint32_t next = 0;
    for (size_t i = 0; i <= s->n; i++) {
        /* negate: the gaps; else the ranges themselves. Then cut out the surrogates. */
        uint32_t lo, hi;
        if (negate) {
            if (i < s->n) {
                if (s->r[2 * i] == 0) {
                    next = s->r[2 * i + 1] + 1;
                    continue;
                }
                lo = next, hi = s->r[2 * i] - 1, next = s->r[2 * i + 1] + 1;
            } else {
                if (next > 0x10FFFF) break;
                lo = next, hi = 0x10FFFF;
            }
            if (lo > hi) continue;
        } else {
            if (i == s->n) break;
            lo = s->r[2 * i], hi = s->r[2 * i + 1];
        }
        if (lo < 0xD800 && hi > 0xDFFF) {
            if (pl_cpset_add(&out, lo, 0xD7FF) || pl_cpset_add(&out, 0xE000, hi)) goto oom;
        } else if (lo >= 0xD800 && hi <= 0xDFFF) {
            continue;
        } else {
            if (lo >= 0xD800 && lo <= 0xDFFF) lo = 0xE000;
            if (hi >= 0xD800 && hi <= 0xDFFF) hi = 0xD7FF;
            if (lo <= hi && pl_cpset_add(&out, lo, hi)) goto oom;
        }
    }
    free(s->r);
    *s = out;
    return 0;
oom:
    pl_cpset_free(&out);
    return -1;
}

int32_t pl_utf8_next(const char **pp, const char *end) {
    const uint8_t *p = (const uint8_t *)*pp;
    if ((const char *)p >= end) return -1;
    uint32_t c = p[0];
    int n = c < 0x80 ? 0 : (c & 0xE0) == 0xC0 ? 1 : (c & 0xF0) == 0xE0 ? 2 : (c & 0xF8) == 0xF0 ? 3 : -1;
    if (n < 0 || end - (const char *)p < n + 1) return -1;
    if (n) c &= 0x3Fu >> n;
    for (int i = 1; i <= n; i++) {
        if ((p[i] & 0xC0) != 0x80) return -1;
        c = c << 6 | (p[i] & 0x3F);
    }
    static const uint32_t MIN[] = {0, 0x80, 0x800, 0x10000};
    if (c < MIN[n] || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return -1;
    *pp = (const char *)p + n + 1;
    return (int32_t)c;
}

/* ---- character classes as UTF-8 byte sequences ---- */

int pl_utf8_encode(uint32_t c, uint8_t *o) {
    if (c < 0x80) return o[0] = (uint8_t)c, 1;
    if (c < 0x800) return o[0] = (uint8_t)(0xC0 | c >> 6), o[1] = (uint8_t)(0x80 | (c & 0x3F)), 2;
    if (c < 0x10000) {
        o[0] = (uint8_t)(0xE0 | c >> 12), o[1] = (uint8_t)(0x80 | (c >> 6 & 0x3F));
        o[2] = (uint8_t)(0x80 | (c & 0x3F));
        return 3;
    }
    o[0] = (uint8_t)(0xF0 | c >> 18), o[1] = (uint8_t)(0x80 | (c >> 12 & 0x3F));
    o[2] = (uint8_t)(0x80 | (c >> 6 & 0x3F)), o[3] = (uint8_t)(0x80 | (c & 0x3F));
    return 4;
}

/* Append to rule `cls` one alternative per byte-range sequence covering [lo, hi] (both of the
 * same encoded length): split until every byte position is an independent range. */
static int utf8_split(pl_gbuilder *b, int32_t cls, uint32_t lo, uint32_t hi) {
    static const uint32_t MAXLEN[] = {0x7F, 0x7FF, 0xFFFF, 0x10FFFF};
    for (int k = 0; k < 3; k++) /* first: lo and hi of one encoded length */
        if (lo <= MAXLEN[k] && hi > MAXLEN[k])
            return utf8_split(b, cls, lo, MAXLEN[k]) || utf8_split(b, cls, MAXLEN[k] + 1, hi);
    for (int i = 1; i < 4; i++) { /* then align the trailing continuation bytes */
        uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if (lo & m) return utf8_split(b, cls, lo, lo | m) || utf8_split(b, cls, (lo | m) + 1, hi);
            if ((hi & m) != m)
                return utf8_split(b, cls, lo, (hi & ~m) - 1) || utf8_split(b, cls, hi & ~m, hi);
        }
    }
    uint8_t a[4], z[4];
    int n = pl_utf8_encode(lo, a);
    pl_utf8_encode(hi, z);
    uint32_t seq[5];
    for (int i = 0; i < n; i++) {
        int32_t s = range_set(b, a[i], z[i]);
        if (s < 0) return -1;
        seq[i] = EL(K_SET, s);
    }
    seq[n] = EL(K_ALT, 0);
    return pl_gb_push_n(b, cls, seq, (size_t)n + 1);
}

int pl_gb_class(pl_gbuilder *b, int32_t r, int32_t parent, const uint32_t *ranges, size_t n) {
    pl_byteset ascii = {{0}};
    int has_ascii = 0, has_multi = 0;
    for (size_t i = 0; i < n; i++) {
        for (uint32_t c = ranges[2 * i]; c <= ranges[2 * i + 1] && c < 0x80; c++)
            ascii.b[c >> 3] |= (uint8_t)(1u << (c & 7)), has_ascii = 1;
        has_multi |= ranges[2 * i + 1] >= 0x80;
    }
    if (!has_ascii && !has_multi) {
        pl_fail(PL_ERR_INVALID_ARG, "grammar: rule '%.64s': a character class matches nothing",
                b->rules[parent].name);
        return -1;
    }
    int32_t sa = has_ascii ? pl_gb_set(b, &ascii) : 0;
    if (sa < 0) return -1;
    if (!has_multi) return pl_gb_push(b, r, EL(K_SET, sa));
    int32_t cls = pl_gb_anon(b, parent);
    if (cls < 0) return -1;
    if (has_ascii && pl_gb_push_n(b, cls, (uint32_t[]){EL(K_SET, sa), EL(K_ALT, 0)}, 2)) return -1;
    for (size_t i = 0; i < n; i++) {
        uint32_t lo = ranges[2 * i] < 0x80 ? 0x80 : ranges[2 * i], hi = ranges[2 * i + 1];
        if (hi >= 0x80 && utf8_split(b, cls, lo, hi)) return -1;
    }
    b->rules[cls].n--, b->total--; /* the last alternative needs no K_ALT */
    return pl_gb_push(b, r, EL(K_REF, cls));
}

/* ---- flattening and checks ---- */

/* Left recursion: rule r can reach itself without consuming a byte. nullable[] first. */
static int left_recursive(const pl_gbuilder *b, const uint8_t *nullable, size_t r, uint8_t *mark) {
    if (mark[r] == 1) return 1;
    if (mark[r] == 2) return 0;
    mark[r] = 1;
    const pl_brule *R = &b->rules[r];
    int at_start = 1;
    for (size_t i = 0; i < R->n; i++) {
        uint32_t e = R->el[i];
        if (EL_ENDS(e)) {
            at_start = 1;
            continue;
        }
        if (!at_start) continue;
        if (EL_KIND(e) == K_SET) {
            at_start = 0;
        } else {
            if (left_recursive(b, nullable, EL_ARG(e), mark)) return 1;
            at_start = nullable[EL_ARG(e)];
        }
    }
    mark[r] = 2;
    return 0;
}

pl_status pl_gb_finish(pl_gbuilder *b, pl_grammar **out) {
    *out = NULL;
    int32_t root = -1;
    for (size_t i = 0; i < b->n_rules; i++) {
        if (!b->rules[i].defined)
            return pl_fail(PL_ERR_INVALID_ARG, "grammar: rule '%.64s' is used (line %d) but not "
                           "defined", b->rules[i].name, b->rules[i].line);
        if (!strcmp(b->rules[i].name, "root")) root = (int32_t)i;
    }
    if (root < 0) return pl_fail(PL_ERR_INVALID_ARG, "grammar: no rule 'root' (the start rule)");
    uint8_t *nullable = calloc(b->n_rules, 1), *mark = calloc(b->n_rules, 1);
    if (!nullable || !mark) {
        PL_FREE_ALL(nullable, mark);
        return pl_fail(PL_ERR_NOMEM, "grammar: out of memory");
    }
    for (int changed = 1; changed;) {
        changed = 0;
        for (size_t r = 0; r < b->n_rules; r++) {
            if (nullable[r]) continue;
            const pl_brule *R = &b->rules[r];
            int ok = 1;
            for (size_t i = 0; i <= R->n && !nullable[r]; i++) {
                uint32_t e = i < R->n ? R->el[i] : EL(K_END, 0);
                if (EL_ENDS(e)) {
                    if (ok) nullable[r] = 1, changed = 1;
                    ok = 1;
                } else if (EL_KIND(e) == K_SET || !nullable[EL_ARG(e)]) {
                    ok = 0;
                }
            }
        }
    }
    for (size_t r = 0; r < b->n_rules; r++) {
        if (left_recursive(b, nullable, r, mark)) {
            /* name the first rule of the cycle that is a named one */
            size_t w = r;
            for (size_t i = 0; i < b->n_rules; i++)
                if (mark[i] == 1 && !strchr(b->rules[i].name, '_')) { w = i; break; }
            PL_FREE_ALL(nullable, mark);
            return pl_fail(PL_ERR_INVALID_ARG, "grammar: rule '%.64s' is left-recursive (it can "
                           "reach itself without matching a character), which is not supported",
                           b->rules[w].name);
        }
    }
    PL_FREE_ALL(nullable, mark);

    pl_grammar *g = calloc(1, sizeof *g);
    size_t n_alts = 0;
    for (size_t r = 0; r < b->n_rules; r++) {
        n_alts++;
        for (size_t i = 0; i < b->rules[r].n; i++) n_alts += EL_KIND(b->rules[r].el[i]) == K_ALT;
    }
    if (g) {
        g->el = malloc((b->total + b->n_rules + 1) * sizeof *g->el);
        g->rule_start = malloc(b->n_rules * sizeof *g->rule_start);
        g->rule_alt0 = malloc((b->n_rules + 1) * sizeof *g->rule_alt0);
        g->alt_first = malloc(n_alts * sizeof *g->alt_first);
        g->sets = malloc((b->n_sets ? b->n_sets : 1) * sizeof *g->sets);
    }
    if (!g || !g->el || !g->rule_start || !g->rule_alt0 || !g->alt_first || !g->sets) {
        pl_grammar_destroy(g);
        return pl_fail(PL_ERR_NOMEM, "grammar: out of memory");
    }
    size_t w = 0, a = 0;
    for (size_t r = 0; r < b->n_rules; r++) {
        const pl_brule *R = &b->rules[r];
        g->rule_start[r] = (uint32_t)w;
        g->rule_alt0[r] = (uint32_t)a;
        g->alt_first[a++] = (uint32_t)w;
        for (size_t i = 0; i < R->n; i++) {
            g->el[w++] = R->el[i];
            if (EL_KIND(R->el[i]) == K_ALT) g->alt_first[a++] = (uint32_t)w;
        }
        g->el[w++] = EL(K_END, 0);
    }
    g->rule_alt0[b->n_rules] = (uint32_t)a;
    g->n_el = w;
    g->n_rules = b->n_rules;
    g->n_alts = a;
    if (b->n_sets) memcpy(g->sets, b->sets, b->n_sets * sizeof *g->sets);
    g->n_sets = b->n_sets;
    g->root = (uint32_t)root;
    *out = g;
    return PL_OK;
}

void pl_grammar_destroy(pl_grammar *g) {
    if (!g) return;
    PL_FREE_ALL(g->el, g->rule_start, g->rule_alt0, g->alt_first, g->sets, g);
}

size_t pl_grammar_size(const pl_grammar *g) { return g->n_el; }
