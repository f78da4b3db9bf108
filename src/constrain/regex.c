/* constrain/regex — a regular expression (the common ECMAScript / PCRE subset) as a GBNF
 * expression. The whole output must match (anchors are implied; `^` first and `$` last are
 * accepted and mean nothing more). Supported: literals, `.` (any character but \n), classes
 * [...] / [^...] with ranges and escapes, \d \D \w \W \s \S, \n \r \t \f \v \0 \xHH \uHHHH
 * \u{H...}, escaped punctuation, groups (...) (?:...) (?<name>...), alternation, quantifiers
 * * + ? {m} {m,} {m,n} (lazy and possessive forms match the same strings). Refused with a message:
 * backreferences, lookaround, \b \B, \p{...}, inline flags.
 *
 * json_string mode is for a JSON schema's `pattern`: the text lands inside a JSON string, so a
 * literal `"` or `\` becomes its escape (\" \\), a literal control character its JSON escape, and
 * classes (and `.`) never produce `"`, `\` or control characters.
 */
#include "constrain/cons_internal.h"
#include "base/buf.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_DEPTH = 200 };

typedef struct {
    const char *s, *p, *end;
    pl_strbuf *o;
    int json;
    int depth;
} rp;

#define RFAIL(r, ...) pl_cons_fail(__VA_ARGS__)

static int col(const rp *r) { return (int)(r->p - r->s) + 1; }

/* A code point as a GBNF class or literal character. */
static void put_cp(pl_strbuf *o, uint32_t c) {
    if (c < 0x80 && isalnum((int)c)) pl_strbuf_putc(o, (char)c);
    else if (c < 0x100) pl_strbuf_printf(o, "\\x%02X", c);
    else if (c < 0x10000) pl_strbuf_printf(o, "\\u%04X", c);
    else pl_strbuf_printf(o, "\\U%08X", c);
}

static int put_class(rp *r, pl_cpset *cs, int negate) {
    if (r->json) { /* what a JSON string cannot hold raw */
        if (pl_cpset_normalize(cs, negate)) return pl_fail(PL_ERR_NOMEM, "regex: out of memory"), -1;
        pl_cpset bad = {0};
        if (pl_cpset_add(&bad, 0, 0x1F) || pl_cpset_add(&bad, '"', '"') ||
            pl_cpset_add(&bad, '\\', '\\'))
            return pl_cpset_free(&bad), pl_fail(PL_ERR_NOMEM, "regex: out of memory"), -1;
        /* cs minus bad = not (not cs or bad) */
        if (pl_cpset_normalize(cs, 1)) return pl_cpset_free(&bad), -1;
        for (size_t i = 0; i < bad.n; i++)
            if (pl_cpset_add(cs, bad.r[2 * i], bad.r[2 * i + 1]))
                return pl_cpset_free(&bad), -1;
        pl_cpset_free(&bad);
        negate = 1;
    }
    if (pl_cpset_normalize(cs, negate)) return pl_fail(PL_ERR_NOMEM, "regex: out of memory"), -1;
    if (cs->n == 0) return RFAIL(r, "regex: column %d: a character class matches nothing%s", col(r),
                                 r->json ? " that a JSON string can hold unescaped" : "");
    pl_strbuf_putc(r->o, '[');
    for (size_t i = 0; i < cs->n; i++) {
        put_cp(r->o, cs->r[2 * i]);
        if (cs->r[2 * i + 1] != cs->r[2 * i]) {
            pl_strbuf_putc(r->o, '-');
            put_cp(r->o, cs->r[2 * i + 1]);
        }
    }
    pl_strbuf_putc(r->o, ']');
    return 0;
}

/* A literal character. */
static void put_lit(rp *r, uint32_t c) {
    pl_strbuf_putc(r->o, '"');
    if (r->json && (c == '"' || c == '\\')) {
        pl_strbuf_puts(r->o, c == '"' ? "\\\\\\\"" : "\\\\\\\\");
    } else if (r->json && c < 0x20) {
        static const char *const E[] = {[8] = "b", [9] = "t", [10] = "n", [12] = "f", [13] = "r"};
        if (c < 14 && E[c]) pl_strbuf_printf(r->o, "\\\\%s", E[c]);
        else pl_strbuf_printf(r->o, "\\\\u%04X", c);
    } else {
        put_cp(r->o, c);
    }
    pl_strbuf_putc(r->o, '"');
}

static int add_ranges(pl_cpset *cs, const char *pairs) {
    for (; *pairs; pairs += 2)
        if (pl_cpset_add(cs, (uint8_t)pairs[0], (uint8_t)pairs[1])) return -1;
    return 0;
}

/* The class of a shorthand escape (d w s, upper case negated); 0 if `e` is none. */
static int shorthand(char e, pl_cpset *cs, int *negate) {
    const char *pairs;
    switch (e | 0x20) {
    case 'd': pairs = "09"; break;
    case 'w': pairs = "09AZaz__"; break;
    case 's': pairs = "\t\r  "; break;
    default: return 0;
    }
    if (add_ranges(cs, pairs)) return -1;
    if ((e | 0x20) == 's' && (pl_cpset_add(cs, 0xA0, 0xA0) || pl_cpset_add(cs, 0xFEFF, 0xFEFF) ||
                              pl_cpset_add(cs, 0x2028, 0x2029)))
        return -1;
    *negate = isupper((unsigned char)e);
    return 1;
}

static int hexv(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
         : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* After a backslash: a single character escape (not a shorthand class). */
static int32_t escape_char(rp *r) {
    if (r->p >= r->end) return RFAIL(r, "regex: the pattern ends with '\\'");
    char e = *r->p++;
    switch (e) {
    case 'n': return '\n';
    case 'r': return '\r';
    case 't': return '\t';
    case 'f': return '\f';
    case 'v': return '\v';
    case '0': return 0;
    case 'x': case 'u': {
        uint32_t v = 0;
        int braces = e == 'u' && r->p < r->end && *r->p == '{', n = 0;
        if (braces) r->p++;
        int want = e == 'x' ? 2 : 4;
        while (r->p < r->end && hexv(*r->p) >= 0 && (braces ? n < 6 : n < want))
            v = v << 4 | (uint32_t)hexv(*r->p++), n++;
        if (braces && (r->p >= r->end || *r->p++ != '}')) n = 0;
        if (!n || (!braces && n != want) || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
            return RFAIL(r, "regex: column %d: bad '\\%c' escape", col(r), e);
        return (int32_t)v;
    }
    case 'b': case 'B': return RFAIL(r, "regex: column %d: word boundaries (\\b, \\B) are not supported", col(r));
    case 'p': case 'P': return RFAIL(r, "regex: column %d: Unicode property classes (\\p) are not supported", col(r));
    default:
        if (e >= '1' && e <= '9') return RFAIL(r, "regex: column %d: backreferences are not supported", col(r));
        if (isalnum((unsigned char)e)) return RFAIL(r, "regex: column %d: unknown escape '\\%c'", col(r), e);
        r->p--;
        int32_t c = pl_utf8_next(&r->p, r->end);
        return c < 0 ? RFAIL(r, "regex: invalid UTF-8") : c;
    }
}

static int parse_class(rp *r) {
    r->p++; /* [ */
    int negate = r->p < r->end && *r->p == '^';
    if (negate) r->p++;
    pl_cpset cs = {0};
    int first = 1, rc = -1;
    while (r->p < r->end && (*r->p != ']' || first)) {
        first = 0;
        int32_t lo;
        if (*r->p == '\\') {
            r->p++;
            int neg2 = 0;
            char e = r->p < r->end ? *r->p : 0;
            pl_cpset sh = {0};
            int k = shorthand(e, &sh, &neg2);
            if (k < 0) goto oom;
            if (k) {
                r->p++;
                if (pl_cpset_normalize(&sh, neg2)) goto oom;
                for (size_t i = 0; i < sh.n; i++)
                    if (pl_cpset_add(&cs, sh.r[2 * i], sh.r[2 * i + 1])) { pl_cpset_free(&sh); goto oom; }
                pl_cpset_free(&sh);
                continue;
            }
            if (e == 'b') { r->p++; lo = '\b'; }
            else if ((lo = escape_char(r)) < 0) goto done;
        } else if ((lo = pl_utf8_next(&r->p, r->end)) < 0) {
            RFAIL(r, "regex: invalid UTF-8");
            goto done;
        }
        int32_t hi = lo;
        if (r->p + 1 < r->end && *r->p == '-' && r->p[1] != ']') {
            r->p++;
            if (*r->p == '\\') {
                r->p++;
                if ((hi = escape_char(r)) < 0) goto done;
            } else if ((hi = pl_utf8_next(&r->p, r->end)) < 0) {
                RFAIL(r, "regex: invalid UTF-8");
                goto done;
            }
            if (hi < lo) {
                RFAIL(r, "regex: column %d: range out of order in a character class", col(r));
                goto done;
            }
        }
        if (pl_cpset_add(&cs, (uint32_t)lo, (uint32_t)hi)) goto oom;
    }
    if (r->p >= r->end) {
        RFAIL(r, "regex: missing ']'");
        goto done;
    }
    r->p++;
    rc = put_class(r, &cs, negate);
    goto done;
oom:
    pl_fail(PL_ERR_NOMEM, "regex: out of memory");
done:
    pl_cpset_free(&cs);
    return rc;
}

static int parse_alt(rp *r);

static int parse_quant(rp *r) {
    if (r->p >= r->end) return 0;
    char c = *r->p;
    if (c == '*' || c == '+' || c == '?') {
        pl_strbuf_putc(r->o, c);
        r->p++;
    } else if (c == '{' && r->p + 1 < r->end && isdigit((unsigned char)r->p[1])) {
        const char *q = r->p + 1;
        long m = strtol(q, (char **)&q, 10), n = m;
        int open = 0;
        if (q < r->end && *q == ',') {
            q++;
            if (q < r->end && isdigit((unsigned char)*q)) n = strtol(q, (char **)&q, 10);
            else open = 1;
        }
        if (q >= r->end || *q != '}') return RFAIL(r, "regex: column %d: bad repetition", col(r));
        if (m > PL_GRAMMAR_MAX_REPEAT || n > PL_GRAMMAR_MAX_REPEAT)
            return RFAIL(r, "regex: column %d: repetition count above %d", col(r), PL_GRAMMAR_MAX_REPEAT);
        if (!open && n < m) return RFAIL(r, "regex: column %d: repetition {%ld,%ld} has max < min", col(r), m, n);
        if (open) pl_strbuf_printf(r->o, "{%ld,}", m);
        else pl_strbuf_printf(r->o, "{%ld,%ld}", m, n);
        r->p = q + 1;
    } else {
        return 0;
    }
    if (r->p < r->end && (*r->p == '?' || *r->p == '+')) r->p++; /* lazy / possessive */
    if (r->p < r->end && (*r->p == '*' || *r->p == '+' || *r->p == '?' ||
                          (*r->p == '{' && r->p + 1 < r->end && isdigit((unsigned char)r->p[1]))))
        return RFAIL(r, "regex: column %d: nothing to repeat", col(r));
    return 0;
}

static int parse_seq(rp *r, int top) {
    int empty = 1;
    while (r->p < r->end && *r->p != '|' && *r->p != ')') {
        char c = *r->p;
        if (c == '^') {
            if (!top || !empty) return RFAIL(r, "regex: column %d: '^' is only supported at the start", col(r));
            r->p++;
            continue;
        }
        if (c == '$') {
            r->p++;
            if (!top || (r->p < r->end && *r->p != '|'))
                return RFAIL(r, "regex: column %d: '$' is only supported at the end", col(r) - 1);
            continue;
        }
        if (c == '*' || c == '+' || c == '?' || (c == '{' && r->p + 1 < r->end && isdigit((unsigned char)r->p[1])))
            return RFAIL(r, "regex: column %d: nothing to repeat", col(r));
        pl_strbuf_putc(r->o, ' ');
        if (c == '(') {
            r->p++;
            if (r->p < r->end && *r->p == '?') {
                if (r->p + 1 < r->end && r->p[1] == ':') {
                    r->p += 2;
                } else if (r->p + 2 < r->end && r->p[1] == '<' && r->p[2] != '=' && r->p[2] != '!') {
                    const char *q = memchr(r->p, '>', (size_t)(r->end - r->p));
                    if (!q) return RFAIL(r, "regex: column %d: unterminated group name", col(r));
                    r->p = q + 1;
                } else if (r->p + 1 < r->end && (r->p[1] == '=' || r->p[1] == '!' || r->p[1] == '<')) {
                    return RFAIL(r, "regex: column %d: lookaround is not supported", col(r));
                } else {
                    return RFAIL(r, "regex: column %d: inline flags and special groups are not supported", col(r));
                }
            }
            if (++r->depth > MAX_DEPTH) return RFAIL(r, "regex: groups nested deeper than %d", MAX_DEPTH);
            pl_strbuf_putc(r->o, '(');
            if (parse_alt(r)) return -1;
            if (r->p >= r->end || *r->p != ')') return RFAIL(r, "regex: missing ')'");
            r->p++;
            r->depth--;
            pl_strbuf_putc(r->o, ')');
        } else if (c == '[') {
            if (parse_class(r)) return -1;
        } else if (c == '.') {
            r->p++;
            pl_cpset cs = {0};
            int rc = pl_cpset_add(&cs, '\n', '\n') ? -1 : put_class(r, &cs, 1);
            pl_cpset_free(&cs);
            if (rc) return -1;
        } else if (c == '\\') {
            r->p++;
            pl_cpset cs = {0};
            int neg = 0, k = shorthand(r->p < r->end ? *r->p : 0, &cs, &neg);
            if (k > 0) {
                r->p++;
                k = put_class(r, &cs, neg);
                pl_cpset_free(&cs);
                if (k) return -1;
            } else {
                pl_cpset_free(&cs);
                if (k < 0) return pl_fail(PL_ERR_NOMEM, "regex: out of memory"), -1;
                int32_t ch = escape_char(r);
                if (ch < 0) return -1;
                put_lit(r, (uint32_t)ch);
            }
        } else {
            int32_t ch = pl_utf8_next(&r->p, r->end);
            if (ch < 0) return RFAIL(r, "regex: column %d: invalid UTF-8", col(r));
            put_lit(r, (uint32_t)ch);
        }
        empty = 0;
        if (parse_quant(r)) return -1;
    }
    return 0;
}

static int parse_alt(rp *r) {
    int top = r->depth == 0;
    if (parse_seq(r, top)) return -1;
    while (r->p < r->end && *r->p == '|') {
        r->p++;
        pl_strbuf_puts(r->o, " |");
        if (parse_seq(r, top)) return -1;
    }
    return 0;
}

pl_status pl_regex_to_gbnf(const char *regex, int json_string, char **expr) {
    *expr = NULL;
    pl_strbuf o;
    pl_strbuf_init(&o);
    rp r = {.s = regex, .p = regex, .end = regex + strlen(regex), .o = &o, .json = json_string};
    pl_strbuf_putc(&o, '(');
    if (parse_alt(&r)) {
        pl_strbuf_destroy(&o);
        return strstr(pl_last_error(), "out of memory") ? PL_ERR_NOMEM : PL_ERR_INVALID_ARG;
    }
    if (r.p < r.end) {
        pl_strbuf_destroy(&o);
        return pl_fail(PL_ERR_INVALID_ARG, "regex: column %d: unmatched ')'", col(&r));
    }
    pl_strbuf_puts(&o, " )");
    if (!(*expr = pl_strbuf_take(&o))) return pl_fail(PL_ERR_NOMEM, "regex: out of memory");
    return PL_OK;
}
