/* constrain/gbnf — the GBNF parser (llama.cpp's grammar syntax) into builder rules.
 *
 *   rule     ::= name "::=" alternates          (a rule runs until the next `name ::=`)
 *   alternates ::= sequence ("|" sequence)*
 *   sequence ::= (element quantifier?)*
 *   element  ::= "literal" | [class] | [^class] | . | name | "(" alternates ")"
 *   quantifier ::= * | + | ? | {m} | {m,} | {m,n}
 *
 * Names are [A-Za-z0-9_-]+; `#` starts a comment; literals and classes take the escapes \n \r \t
 * \\ \" \] \[ \- \/ \xHH \uHHHH \UHHHHHHHH. `.` is any character. Start rule: `root`.
 * A quantified element becomes anonymous rules: x* is S ::= x S | (empty), x+ is x x*, x? is
 * O ::= x | (empty), x{m,n} is m copies of x then n - m nested optional ones.
 */
#include "constrain/cons_internal.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_NESTING = 200 };

typedef struct {
    const char *s, *p, *end;
    pl_gbuilder *b;
    int depth;
} gp;

static int line_of(const gp *g) {
    int line = 1;
    for (const char *q = g->s; q < g->p; q++) line += *q == '\n';
    return line;
}

#define FAIL(g, ...) pl_cons_fail(__VA_ARGS__)

static void skip_space(gp *g) {
    while (g->p < g->end) {
        char c = *g->p;
        if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
            g->p++;
        } else if (c == '#') {
            while (g->p < g->end && *g->p != '\n') g->p++;
        } else {
            break;
        }
    }
}

static int is_name_char(char c) { return isalnum((unsigned char)c) || c == '_' || c == '-'; }

static size_t name_len(const gp *g) {
    size_t n = 0;
    while (g->p + n < g->end && is_name_char(g->p[n])) n++;
    return n;
}

/* A `name ::=` starts at g->p. */
static int def_ahead(const gp *g) {
    gp t = *g;
    size_t n = name_len(&t);
    if (!n) return 0;
    t.p += n;
    skip_space(&t);
    return t.end - t.p >= 3 && !memcmp(t.p, "::=", 3);
}

static int hexval(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
         : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* One character of a literal or class (escapes decoded); -1 on error (message set). */
static int32_t read_char(gp *g) {
    if (g->p >= g->end) return FAIL(g, "grammar: line %d: unexpected end", line_of(g));
    if (*g->p != '\\') {
        int32_t c = pl_utf8_next(&g->p, g->end);
        if (c < 0) return FAIL(g, "grammar: line %d: invalid UTF-8", line_of(g));
        return c;
    }
    g->p++;
    if (g->p >= g->end) return FAIL(g, "grammar: line %d: unexpected end after '\\'", line_of(g));
    char e = *g->p++;
    int digits = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
    if (digits) {
        uint32_t v = 0;
        for (int i = 0; i < digits; i++) {
            int h = g->p < g->end ? hexval(*g->p) : -1;
            if (h < 0) return FAIL(g, "grammar: line %d: '\\%c' needs %d hex digits", line_of(g), e, digits);
            v = v << 4 | (uint32_t)h;
            g->p++;
        }
        if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
            return FAIL(g, "grammar: line %d: \\%c escape U+%X is not a character", line_of(g), e, v);
        return (int32_t)v;
    }
    switch (e) {
    case 'n': return '\n';
    case 'r': return '\r';
    case 't': return '\t';
    case '\\': case '"': case '[': case ']': case '-': case '/': case '\'': case '^': return e;
    default: return FAIL(g, "grammar: line %d: unknown escape '\\%c'", line_of(g), e);
    }
}

static int push_byte(gp *g, int32_t r, uint8_t c) {
    pl_byteset s = {{0}};
    s.b[c >> 3] = (uint8_t)(1u << (c & 7));
    int32_t id = pl_gb_set(g->b, &s);
    return id < 0 ? -1 : pl_gb_push(g->b, r, EL(K_SET, id));
}

static int parse_literal(gp *g, int32_t r) {
    g->p++; /* " */
    while (g->p < g->end && *g->p != '"') {
        int32_t c = read_char(g);
        if (c < 0) return -1;
        uint8_t q[4];
        int n = pl_utf8_encode((uint32_t)c, q);
        for (int i = 0; i < n; i++)
            if (push_byte(g, r, q[i])) return -1;
    }
    if (g->p >= g->end) return FAIL(g, "grammar: line %d: unterminated string literal", line_of(g));
    g->p++;
    return 0;
}

static int parse_class(gp *g, int32_t r, int32_t rule) {
    g->p++; /* [ */
    int negate = g->p < g->end && *g->p == '^';
    if (negate) g->p++;
    pl_cpset cs = {0};
    int rc = -1;
    while (g->p < g->end && *g->p != ']') {
        int32_t lo = read_char(g), hi = lo;
        if (lo < 0) goto done;
        if (g->p + 1 < g->end && *g->p == '-' && g->p[1] != ']') {
            g->p++;
            if ((hi = read_char(g)) < 0) goto done;
            if (hi < lo) {
                FAIL(g, "grammar: line %d: character range is out of order", line_of(g));
                goto done;
            }
        }
        if (pl_cpset_add(&cs, (uint32_t)lo, (uint32_t)hi)) {
            pl_fail(PL_ERR_NOMEM, "grammar: out of memory");
            goto done;
        }
    }
    if (g->p >= g->end) {
        FAIL(g, "grammar: line %d: unterminated character class", line_of(g));
        goto done;
    }
    g->p++;
    if (pl_cpset_normalize(&cs, negate)) {
        pl_fail(PL_ERR_NOMEM, "grammar: out of memory");
        goto done;
    }
    rc = pl_gb_class(g->b, r, rule, cs.r, cs.n);
done:
    pl_cpset_free(&cs);
    return rc;
}

static int parse_alternates(gp *g, int32_t r);

static int read_count(gp *g, long *v) {
    skip_space(g);
    if (g->p >= g->end || !isdigit((unsigned char)*g->p)) return 0;
    long x = 0;
    while (g->p < g->end && isdigit((unsigned char)*g->p)) {
        x = x * 10 + (*g->p++ - '0');
        if (x > PL_GRAMMAR_MAX_REPEAT)
            return FAIL(g, "grammar: line %d: repetition count above %d", line_of(g), PL_GRAMMAR_MAX_REPEAT);
    }
    *v = x;
    return 1;
}

/* The elements r->el[start ..) are the quantified element x: replace them by its repetition. */
static int quantify(gp *g, int32_t r, size_t start, long min, long max /* -1: unbounded */) {
    pl_gbuilder *b = g->b;
    size_t n = b->rules[r].n - start;
    if (n == 0) return 0; /* "" repeated is still "" */
    uint32_t x;
    if (n == 1) {
        x = b->rules[r].el[start];
    } else {
        int32_t xr = pl_gb_anon(b, r);
        if (xr < 0 || pl_gb_push_n(b, xr, b->rules[r].el + start, n)) return -1;
        x = EL(K_REF, xr);
    }
    b->rules[r].n = start;
    b->total -= n;
    for (long i = 0; i < min; i++)
        if (pl_gb_push(b, r, x)) return -1;
    if (max < 0) {
        int32_t s = pl_gb_anon(b, r);
        if (s < 0 || pl_gb_push_n(b, s, (uint32_t[]){x, EL(K_REF, s), EL(K_ALT, 0)}, 3)) return -1;
        return pl_gb_push(b, r, EL(K_REF, s));
    }
    int32_t prev = -1;
    for (long k = 0; k < max - min; k++) {
        int32_t o = pl_gb_anon(b, r);
        if (o < 0 || pl_gb_push(b, o, x) || (prev >= 0 && pl_gb_push(b, o, EL(K_REF, prev))) ||
            pl_gb_push(b, o, EL(K_ALT, 0)))
            return -1;
        prev = o;
    }
    return prev >= 0 ? pl_gb_push(b, r, EL(K_REF, prev)) : 0;
}

static int parse_sequence(gp *g, int32_t r) {
    for (;;) {
        skip_space(g);
        if (g->p >= g->end || *g->p == '|' || *g->p == ')') return 0;
        if (def_ahead(g)) return 0;
        size_t start = g->b->rules[r].n;
        char c = *g->p;
        if (c == '"') {
            if (parse_literal(g, r)) return -1;
        } else if (c == '[') {
            if (parse_class(g, r, r)) return -1;
        } else if (c == '.') {
            g->p++;
            uint32_t parts[4] = {0, 0xD7FF, 0xE000, 0x10FFFF}; /* any character */
            if (pl_gb_class(g->b, r, r, parts, 2)) return -1;
        } else if (c == '(') {
            if (++g->depth > MAX_NESTING)
                return FAIL(g, "grammar: line %d: groups nested deeper than %d", line_of(g), MAX_NESTING);
            g->p++;
            int32_t sub = pl_gb_anon(g->b, r);
            if (sub < 0 || parse_alternates(g, sub)) return -1;
            skip_space(g);
            if (g->p >= g->end || *g->p != ')')
                return FAIL(g, "grammar: line %d: missing ')'", line_of(g));
            g->p++;
            g->depth--;
            if (pl_gb_push(g->b, r, EL(K_REF, sub))) return -1;
        } else if (is_name_char(c)) {
            size_t n = name_len(g);
            int32_t ref = pl_gb_rule(g->b, g->p, n);
            if (ref < 0) return -1;
            if (!g->b->rules[ref].line) g->b->rules[ref].line = line_of(g);
            g->p += n;
            if (pl_gb_push(g->b, r, EL(K_REF, ref))) return -1;
        } else {
            return FAIL(g, "grammar: line %d: unexpected '%c'", line_of(g), c);
        }
        /* quantifier */
        if (g->p < g->end && (*g->p == '*' || *g->p == '+' || *g->p == '?')) {
            char q = *g->p++;
            if (quantify(g, r, start, q == '+' ? 1 : 0, q == '?' ? 1 : -1)) return -1;
        } else if (g->p < g->end && *g->p == '{') {
            g->p++;
            long min = 0, max = -1;
            int k = read_count(g, &min);
            if (k < 0) return -1;
            if (!k) return FAIL(g, "grammar: line %d: '{' needs a count", line_of(g));
            skip_space(g);
            if (g->p < g->end && *g->p == ',') {
                g->p++;
                if ((k = read_count(g, &max)) < 0) return -1;
                if (!k) max = -1;
            } else {
                max = min;
            }
            skip_space(g);
            if (g->p >= g->end || *g->p != '}')
                return FAIL(g, "grammar: line %d: missing '}' of a repetition", line_of(g));
            g->p++;
            if (max >= 0 && max < min)
                return FAIL(g, "grammar: line %d: repetition {%ld,%ld} has max < min", line_of(g), min, max);
            if (quantify(g, r, start, min, max)) return -1;
        }
    }
}

static int parse_alternates(gp *g, int32_t r) {
    if (parse_sequence(g, r)) return -1;
    for (;;) {
        skip_space(g);
        if (g->p >= g->end || *g->p != '|') return 0;
        g->p++;
        if (pl_gb_push(g->b, r, EL(K_ALT, 0)) || parse_sequence(g, r)) return -1;
    }
}

pl_status pl_grammar_parse(const char *text, pl_grammar **out) {
    *out = NULL;
    pl_gbuilder b;
    pl_gb_init(&b);
    gp g = {.s = text, .p = text, .end = text + strlen(text), .b = &b};
    pl_status st = PL_ERR_INVALID_ARG;
    for (;;) {
        skip_space(&g);
        if (g.p >= g.end) break;
        if (!def_ahead(&g)) {
            FAIL(&g, "grammar: line %d: expected a rule definition 'name ::= ...'", line_of(&g));
            goto done;
        }
        size_t n = name_len(&g);
        int32_t r = pl_gb_rule(&b, g.p, n);
        if (r < 0) goto fail_status;
        if (b.rules[r].defined) {
            FAIL(&g, "grammar: line %d: rule '%.*s' is defined twice", line_of(&g), (int)n, g.p);
            goto done;
        }
        b.rules[r].defined = 1;
        g.p += n;
        skip_space(&g);
        g.p += 3; /* ::= */
        if (parse_alternates(&g, r)) goto fail_status;
        skip_space(&g);
        if (g.p < g.end && !def_ahead(&g)) {
            FAIL(&g, "grammar: line %d: unexpected '%c'", line_of(&g), *g.p);
            goto done;
        }
    }
    st = pl_gb_finish(&b, out);
    goto done;
fail_status:
    st = strstr(pl_last_error(), "out of memory") ? PL_ERR_NOMEM : PL_ERR_INVALID_ARG;
done:
    pl_gb_destroy(&b);
    return st;
}
