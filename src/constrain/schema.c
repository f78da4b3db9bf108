/* constrain/schema — a JSON schema as GBNF rules, and every constraint kind as GBNF text.
 *
 * Supported (OpenAI's strict-mode subset and a little more): type (one or a list), object with
 * properties (emitted in the schema's order; required ones always, optional ones may be left
 * out), additionalProperties (never generated: the output validates either way; a schema-valued
 * one with no properties gives a map), string with minLength / maxLength or pattern (regex.c),
 * number, integer, boolean, null, enum, const, anyOf (oneOf is treated as anyOf), allOf with one
 * member, array with items / minItems / maxItems, $ref to #/$defs/... or #/definitions/...
 * (recursion allowed), nested objects and arrays, integer minimum / maximum / exclusiveMinimum /
 * exclusiveMaximum (intrange.c), a number's minimum 0. Annotations (title, description, default,
 * examples, format, $schema, ...) are ignored. Validation keywords that would not be enforced
 * (multipleOf, uniqueItems, other bounds on numbers, ...) are refused with a message naming
 * them, so an answer never silently breaks its schema.
 *
 * Dialects: JSON's, and Gemma 4's call arguments (pl_schema_to_gbnf_dialect): the same rules
 * with bare keys, strings between <|"|> marks and no whitespace.
 *
 * Termination: whitespace between tokens is at most one space or a newline and 16 blanks, numbers
 * have at most 16 integer digits, 16 fraction digits and 3 exponent digits, so only strings without
 * maxLength and arrays without maxItems can grow without bound.
 */
#include "constrain/cons_internal.h"
#include "base/buf.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_SCHEMA_DEPTH = 64, MAX_REFS = 256 };

/* The rules every schema's grammar can use, in each dialect. JSON's keys are strings; Gemma 4's
 * call arguments (its chat template's format_argument) have bare keys, strings between <|"|>
 * marks, no whitespace, and the rest as JSON. */
static const char COMMON_VALUES[] =
    "jint ::= \"-\"? ( [0-9] | [1-9] [0-9]{1,15} )\n"
    "jnumber ::= jint ( \".\" [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,3} )?\n"
    "jbool ::= \"true\" | \"false\"\n"
    "jnull ::= \"null\"\n"
    "jvalue ::= jobject | jarray | jstring | jnumber | jbool | jnull\n"
    "jobject ::= \"{\" ws ( jkey ws \":\" ws jvalue ws ( \",\" ws jkey ws \":\" ws jvalue ws )* )? \"}\"\n"
    "jarray ::= \"[\" ws ( jvalue ws ( \",\" ws jvalue ws )* )? \"]\"\n";
static const char COMMON_JSON[] =
    "ws ::= ( \" \" | \"\\n\" [ \\t]{0,16} )?\n"
    "jchar ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} )\n"
    "jstring ::= \"\\\"\" jchar* \"\\\"\"\n"
    "jkey ::= jstring\n";
static const char COMMON_GEMMA[] =
    "ws ::= \"\"\n"
    "jchar ::= [^<]\n" /* a string never holds its closing mark (nor any '<': a subset) */
    "jstring ::= \"<|\\\"|>\" jchar* \"<|\\\"|>\"\n"
    "jkey ::= [A-Za-z_] [A-Za-z0-9_]{0,63}\n";

typedef struct {
    pl_strbuf out;          /* the rules made so far */
    int n_rules;
    json_t *root;           /* the whole schema ($ref targets) */
    const char *refs[MAX_REFS]; /* $ref strings already given a rule, and their rules */
    int ref_rule[MAX_REFS];
    int n_refs;
    int depth;
    pl_schema_dialect dialect;
} sg;

#define SFAIL(...) pl_cons_fail(__VA_ARGS__)

/* A GBNF literal of n bytes. */
static void put_literal(pl_strbuf *b, const char *s, size_t n) {
    pl_strbuf_putc(b, '"');
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') pl_strbuf_printf(b, "\\%c", c);
        else if (c < 0x20 || c == 0x7F) pl_strbuf_printf(b, "\\x%02X", c);
        else pl_strbuf_putc(b, (char)c);
    }
    pl_strbuf_putc(b, '"');
}

/* A JSON value, compact, as a literal. */
static int put_json_literal(pl_strbuf *b, const json_t *v) {
    char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!s) return pl_fail(PL_ERR_NOMEM, "json_schema: out of memory"), -1;
    put_literal(b, s, strlen(s));
    free(s);
    return 0;
}

/* A string's opening and closing mark as a GBNF literal. */
static const char *quote(const sg *g) {
    return g->dialect == PL_SCHEMA_GEMMA ? "\"<|\\\"|>\"" : "\"\\\"\"";
}

/* v in Gemma's argument syntax (the template's format_argument): strings between <|"|> marks,
 * bare keys, no whitespace, the rest as JSON. */
static int gemma_text(pl_strbuf *b, const json_t *v) {
    if (json_is_string(v)) return pl_strbuf_printf(b, "<|\"|>%s<|\"|>", json_string_value(v));
    if (json_is_object(v)) {
        const char *k;
        json_t *x;
        int first = 1;
        pl_strbuf_putc(b, '{');
        json_object_foreach((json_t *)v, k, x) {
            pl_strbuf_printf(b, "%s%s:", first ? "" : ",", k);
            first = 0;
            if (gemma_text(b, x)) return -1;
        }
        return pl_strbuf_putc(b, '}');
    }
    if (json_is_array(v)) {
        size_t i;
        json_t *x;
        pl_strbuf_putc(b, '[');
        json_array_foreach(v, i, x) {
            if (i) pl_strbuf_putc(b, ',');
            if (gemma_text(b, x)) return -1;
        }
        return pl_strbuf_putc(b, ']');
    }
    char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    int rc = !s || pl_strbuf_puts(b, s);
    free(s);
    return rc ? -1 : 0;
}

/* A const or enum value as a literal of the grammar's dialect. */
static int put_value_literal(const sg *g, pl_strbuf *b, const json_t *v) {
    if (g->dialect != PL_SCHEMA_GEMMA) return put_json_literal(b, v);
    pl_strbuf t = {0};
    if (gemma_text(&t, v) || t.failed) {
        pl_strbuf_destroy(&t);
        return pl_fail(PL_ERR_NOMEM, "json_schema: out of memory"), -1;
    }
    put_literal(b, t.p, t.len);
    pl_strbuf_destroy(&t);
    return 0;
}

static int gen(sg *g, json_t *s, const char *path);

static const char *const UNSUPPORTED[] = {
    "multipleOf", "uniqueItems",
    "contains", "minContains", "maxContains", "minProperties", "maxProperties",
    "patternProperties", "propertyNames", "dependentRequired", "dependentSchemas", "dependencies",
    "if", "then", "else", "not", "prefixItems", "unevaluatedProperties", "unevaluatedItems",
    "additionalItems", "contentEncoding", "contentMediaType"};

static int check_keywords(json_t *s, const char *path) {
    for (size_t i = 0; i < sizeof UNSUPPORTED / sizeof *UNSUPPORTED; i++)
        if (json_object_get(s, UNSUPPORTED[i]))
            return SFAIL("json_schema: at '%s': '%s' is not supported", path, UNSUPPORTED[i]);
    return 0;
}

static int get_count(json_t *s, const char *key, const char *path, long *out) {
    json_t *v = json_object_get(s, key);
    if (!v) return 0;
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return SFAIL("json_schema: at '%s': '%s' must be a non-negative integer", path, key);
    if (json_integer_value(v) > PL_GRAMMAR_MAX_REPEAT)
        return SFAIL("json_schema: at '%s': '%s' above %d is not supported", path, key,
                     PL_GRAMMAR_MAX_REPEAT);
    *out = (long)json_integer_value(v);
    return 1;
}

/* "{m,n}" or "{m,}" into b for n (or -1) */
static void put_repeat(pl_strbuf *b, long m, long n) {
    if (n < 0) pl_strbuf_printf(b, "{%ld,}", m);
    else pl_strbuf_printf(b, "{%ld,%ld}", m, n);
}

static int gen_string(sg *g, json_t *s, const char *path, pl_strbuf *b) {
    json_t *pat = json_object_get(s, "pattern");
    long lo = 0, hi = -1;
    int has_lo = get_count(s, "minLength", path, &lo), has_hi = get_count(s, "maxLength", path, &hi);
    if (has_lo < 0 || has_hi < 0) return -1;
    if (has_hi && hi < lo) return SFAIL("json_schema: at '%s': maxLength < minLength", path);
    if (pat) {
        if (!json_is_string(pat)) return SFAIL("json_schema: at '%s': 'pattern' must be a string", path);
        if (has_lo || has_hi)
            return SFAIL("json_schema: at '%s': 'pattern' together with minLength/maxLength is "
                         "not supported", path);
        char *expr;
        if (pl_regex_to_gbnf(json_string_value(pat), g->dialect == PL_SCHEMA_JSON, &expr) != PL_OK) {
            char msg[512];
            snprintf(msg, sizeof msg, "%s", pl_last_error());
            return SFAIL("json_schema: at '%s': pattern: %s", path, msg);
        }
        pl_strbuf_printf(b, "%s %s %s", quote(g), expr, quote(g));
        free(expr);
        return 0;
    }
    if (!has_lo && !has_hi) return pl_strbuf_puts(b, "jstring"), 0;
    pl_strbuf_printf(b, "%s jchar", quote(g));
    put_repeat(b, lo, has_hi ? hi : -1);
    pl_strbuf_printf(b, " %s", quote(g));
    return 0;
}

static int gen_array(sg *g, json_t *s, const char *path, pl_strbuf *b) {
    long lo = 0, hi = -1;
    int has_lo = get_count(s, "minItems", path, &lo), has_hi = get_count(s, "maxItems", path, &hi);
    if (has_lo < 0 || has_hi < 0) return -1;
    if (has_hi && hi < lo) return SFAIL("json_schema: at '%s': maxItems < minItems", path);
    json_t *items = json_object_get(s, "items");
    char item[32] = "jvalue";
    if (items && !json_is_true(items)) {
        char sub[600];
        snprintf(sub, sizeof sub, "%.500s/items", path);
        int r = gen(g, items, sub);
        if (r < 0) return -1;
        snprintf(item, sizeof item, "r%d", r);
    }
    if (has_hi && hi == 0) return pl_strbuf_puts(b, "\"[\" ws \"]\""), 0;
    pl_strbuf_printf(b, "\"[\" ws %s%s ws ( \",\" ws %s ws )", lo == 0 ? "( " : "", item, item);
    put_repeat(b, lo > 0 ? lo - 1 : 0, has_hi ? hi - 1 : -1);
    pl_strbuf_printf(b, "%s \"]\"", lo == 0 ? " )?" : "");
    return 0;
}

/* Properties in order, required or optional. first_k: nothing written yet; after_k: a comma
 * comes before the next one. */
static int gen_object(sg *g, json_t *s, const char *path, pl_strbuf *b) {
    json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
    json_t *addl = json_object_get(s, "additionalProperties");
    if (props && !json_is_object(props))
        return SFAIL("json_schema: at '%s': 'properties' must be an object", path);
    if (req && !json_is_array(req))
        return SFAIL("json_schema: at '%s': 'required' must be a list of names", path);
    size_t n = props ? json_object_size(props) : 0;
    if (n == 0 && json_array_size(req))
        return SFAIL("json_schema: at '%s': 'required' names properties but 'properties' is "
                     "empty or missing", path);
    if (n == 0) {
        if (addl && json_is_object(addl) && json_object_size(addl)) {
            char sub[600];
            snprintf(sub, sizeof sub, "%.500s/additionalProperties", path);
            int r = gen(g, addl, sub);
            if (r < 0) return -1;
            pl_strbuf_printf(b, "\"{\" ws ( jkey ws \":\" ws r%d ws ( \",\" ws jkey ws \":\" "
                             "ws r%d ws )* )? \"}\"", r, r);
        } else if (addl && json_is_false(addl)) {
            pl_strbuf_puts(b, "\"{\" ws \"}\"");
        } else {
            pl_strbuf_puts(b, "jobject");
        }
        return 0;
    }
    size_t i;
    json_t *v;
    json_array_foreach(req, i, v) {
        if (!json_is_string(v) || !json_object_get(props, json_string_value(v)))
            return SFAIL("json_schema: at '%s': 'required' names '%.64s', which is not in "
                         "'properties'", path, json_is_string(v) ? json_string_value(v) : "?");
    }
    int *kv = malloc(n * sizeof *kv);
    uint8_t *required = calloc(n, 1);
    if (!kv || !required) {
        PL_FREE_ALL(kv, required);
        return pl_fail(PL_ERR_NOMEM, "json_schema: out of memory"), -1;
    }
    const char *key;
    size_t k = 0;
    int rc = 0;
    json_object_foreach(props, key, v) {
        json_t *rv;
        json_array_foreach(req, i, rv) required[k] |= !strcmp(json_string_value(rv), key);
        char sub[600];
        snprintf(sub, sizeof sub, "%.400s/properties/%.150s", path, key);
        int r = gen(g, v, sub);
        if (r < 0) {
            rc = -1;
            break;
        }
        /* the member rule: "key" ws ":" ws value ws */
        int m = g->n_rules++;
        pl_strbuf_printf(&g->out, "r%d ::= ", m);
        if (g->dialect == PL_SCHEMA_GEMMA) {
            put_literal(&g->out, key, strlen(key));
        } else {
            json_t *ks = json_string(key);
            if (!ks || put_json_literal(&g->out, ks)) rc = -1;
            json_decref(ks);
        }
        pl_strbuf_printf(&g->out, " ws \":\" ws r%d ws\n", r);
        kv[k++] = m;
    }
    if (rc == 0) {
        /* first_k is rule base + 2k, after_k base + 2k + 1, for k < n; k == n is empty. */
        int base = g->n_rules;
        g->n_rules += 2 * (int)n;
        for (k = 0; k < n; k++) {
            char nf[24] = "", na[24] = "";
            if (k + 1 < n) {
                snprintf(nf, sizeof nf, " r%d", base + 2 * (int)(k + 1));
                snprintf(na, sizeof na, " r%d", base + 2 * (int)(k + 1) + 1);
            }
            /* first_k */
            pl_strbuf_printf(&g->out, "r%d ::= r%d%s", base + 2 * (int)k, kv[k], na);
            if (!required[k]) pl_strbuf_printf(&g->out, " |%s", nf);
            pl_strbuf_putc(&g->out, '\n');
            /* after_k */
            pl_strbuf_printf(&g->out, "r%d ::= \",\" ws r%d%s", base + 2 * (int)k + 1, kv[k], na);
            if (!required[k]) pl_strbuf_printf(&g->out, " |%s", na);
            pl_strbuf_putc(&g->out, '\n');
        }
        pl_strbuf_printf(b, "\"{\" ws r%d \"}\"", base);
    }
    PL_FREE_ALL(kv, required);
    return rc;
}

/* One bound of minimum / exclusiveMinimum (lower) or maximum / exclusiveMaximum: 1 and *out as
 * an inclusive integer bound, 0 when absent, -1 on error. */
static int int_bound(json_t *s, int lower, const char *path, int64_t *out) {
    const char *inc = lower ? "minimum" : "maximum", *exc = lower ? "exclusiveMinimum" : "exclusiveMaximum";
    json_t *vi = json_object_get(s, inc), *ve = json_object_get(s, exc);
    int have = 0;
    double best = 0;
    if (ve && json_is_boolean(ve)) { /* draft 4: a flag on minimum / maximum */
        if (!vi) return SFAIL("json_schema: at '%s': boolean '%s' without '%s'", path, exc, inc);
        if (json_is_true(ve)) ve = vi, vi = NULL;
        else ve = NULL;
    }
    for (int k = 0; k < 2; k++) {
        json_t *v = k ? ve : vi;
        if (!v) continue;
        if (!json_is_number(v)) return SFAIL("json_schema: at '%s': '%s' must be a number", path, k ? exc : inc);
        double x = json_number_value(v);
        if (!(x > -9e18 && x < 9e18)) return SFAIL("json_schema: at '%s': '%s' is out of range", path, k ? exc : inc);
        /* integers only: the inclusive integer bound */
        double r = lower ? ceil(x) : floor(x);
        if (k && r == x) r += lower ? 1 : -1;
        if (!have || (lower ? r > best : r < best)) best = r;
        have = 1;
    }
    if (have) *out = (int64_t)best;
    return have;
}

/* number / integer, with bounds: any integer range; a number only with minimum 0 (it then has
 * no sign). */
static int gen_number(json_t *s, const char *type, const char *path, pl_strbuf *b) {
    int64_t lo = 0, hi = 0;
    if (!strcmp(type, "number")) {
        json_t *mn = json_object_get(s, "minimum");
        if (json_object_get(s, "maximum") || json_object_get(s, "exclusiveMaximum") ||
            json_object_get(s, "exclusiveMinimum") ||
            (mn && !(json_is_number(mn) && json_number_value(mn) == 0)))
            return SFAIL("json_schema: at '%s': bounds on a number are supported only as "
                         "'minimum': 0 (use an integer for other ranges)", path);
        if (!mn) return pl_strbuf_puts(b, "jnumber"), 0;
        pl_strbuf_puts(b, "( [0-9] | [1-9] [0-9]{1,15} ) ( \".\" [0-9]{1,16} )? "
                          "( [eE] [-+]? [0-9]{1,3} )?");
        return 0;
    }
    int has_lo = int_bound(s, 1, path, &lo), has_hi = int_bound(s, 0, path, &hi);
    if (has_lo < 0 || has_hi < 0) return -1;
    if (!has_lo && !has_hi) return pl_strbuf_puts(b, "jint"), 0;
    if (pl_gbnf_int_range(b, has_lo, lo, has_hi, hi))
        return SFAIL("json_schema: at '%s': no integer lies within the bounds", path);
    return 0;
}

static int gen_typed(sg *g, json_t *s, const char *type, const char *path, pl_strbuf *b) {
    if (!strcmp(type, "string")) return gen_string(g, s, path, b);
    if (!strcmp(type, "number") || !strcmp(type, "integer")) return gen_number(s, type, path, b);
    if (!strcmp(type, "boolean")) return pl_strbuf_puts(b, "jbool"), 0;
    if (!strcmp(type, "null")) return pl_strbuf_puts(b, "jnull"), 0;
    if (!strcmp(type, "object")) return gen_object(g, s, path, b);
    if (!strcmp(type, "array")) return gen_array(g, s, path, b);
    return SFAIL("json_schema: at '%s': unknown type '%.64s'", path, type);
}

static int gen_ref(sg *g, const char *ref, const char *path) {
    for (int i = 0; i < g->n_refs; i++)
        if (!strcmp(g->refs[i], ref)) return g->ref_rule[i];
    const char *name = NULL;
    json_t *defs = NULL;
    if (!strncmp(ref, "#/$defs/", 8)) defs = json_object_get(g->root, "$defs"), name = ref + 8;
    else if (!strncmp(ref, "#/definitions/", 14)) defs = json_object_get(g->root, "definitions"), name = ref + 14;
    else if (!strcmp(ref, "#")) name = "";
    json_t *target = name && !*name ? g->root : json_object_get(defs, name ? name : "");
    if (!target)
        return SFAIL("json_schema: at '%s': '$ref' '%.128s' is not found (only #, #/$defs/NAME and "
                     "#/definitions/NAME are supported)", path, ref);
    if (g->n_refs >= MAX_REFS) return SFAIL("json_schema: more than %d distinct $ref targets", MAX_REFS);
    /* The rule's number is known before its body, so a recursive $ref resolves to it. */
    int r = g->n_rules++;
    g->refs[g->n_refs] = ref;
    g->ref_rule[g->n_refs++] = r;
    int body = gen(g, target, ref);
    if (body < 0) return -1;
    pl_strbuf_printf(&g->out, "r%d ::= r%d\n", r, body);
    return r;
}

/* Generate the rule for schema s; returns its number or -1. */
static int gen(sg *g, json_t *s, const char *path) {
    if (++g->depth > MAX_SCHEMA_DEPTH)
        return SFAIL("json_schema: nested deeper than %d levels", MAX_SCHEMA_DEPTH);
    int r = -1;
    pl_strbuf b;
    pl_strbuf_init(&b);
    if (json_is_true(s)) {
        pl_strbuf_puts(&b, "jvalue");
        goto emit;
    }
    if (json_is_false(s)) {
        SFAIL("json_schema: at '%s': the schema false matches nothing", path);
        goto out;
    }
    if (!json_is_object(s)) {
        SFAIL("json_schema: at '%s': a schema must be an object or a boolean", path);
        goto out;
    }
    if (check_keywords(s, path)) goto out;
    json_t *v;
    if ((v = json_object_get(s, "$ref"))) {
        if (!json_is_string(v)) {
            SFAIL("json_schema: at '%s': '$ref' must be a string", path);
            goto out;
        }
        int t = gen_ref(g, json_string_value(v), path);
        if (t < 0) goto out;
        pl_strbuf_printf(&b, "r%d", t);
    } else if ((v = json_object_get(s, "const"))) {
        if (put_value_literal(g, &b, v)) goto out;
    } else if ((v = json_object_get(s, "enum"))) {
        if (!json_is_array(v) || !json_array_size(v)) {
            SFAIL("json_schema: at '%s': 'enum' must be a non-empty list", path);
            goto out;
        }
        size_t i;
        json_t *e;
        json_array_foreach(v, i, e) {
            if (i) pl_strbuf_puts(&b, " | ");
            if (put_value_literal(g, &b, e)) goto out;
        }
    } else if ((v = json_object_get(s, "anyOf")) || (v = json_object_get(s, "oneOf")) ||
               (v = json_object_get(s, "allOf"))) {
        int all = v == json_object_get(s, "allOf");
        if (!json_is_array(v) || !json_array_size(v) || (all && json_array_size(v) != 1)) {
            SFAIL("json_schema: at '%s': %s", path, all ? "'allOf' is supported with one schema only"
                                                        : "'anyOf'/'oneOf' must be a non-empty list");
            goto out;
        }
        size_t i;
        json_t *e;
        json_array_foreach(v, i, e) {
            char sub[600];
            snprintf(sub, sizeof sub, "%.500s/%s/%zu", path, all ? "allOf" : "anyOf", i);
            int t = gen(g, e, sub);
            if (t < 0) goto out;
            pl_strbuf_printf(&b, "%sr%d", i ? " | " : "", t);
        }
    } else if ((v = json_object_get(s, "type"))) {
        if (json_is_string(v)) {
            if (gen_typed(g, s, json_string_value(v), path, &b)) goto out;
        } else if (json_is_array(v) && json_array_size(v)) {
            size_t i;
            json_t *t;
            json_array_foreach(v, i, t) {
                if (!json_is_string(t)) {
                    SFAIL("json_schema: at '%s': 'type' must be a string or a list of strings", path);
                    goto out;
                }
                if (i) pl_strbuf_puts(&b, " | ");
                pl_strbuf_puts(&b, "( ");
                if (gen_typed(g, s, json_string_value(t), path, &b)) goto out;
                pl_strbuf_puts(&b, " )");
            }
        } else {
            SFAIL("json_schema: at '%s': 'type' must be a string or a list of strings", path);
            goto out;
        }
    } else if (json_object_get(s, "properties")) {
        if (gen_object(g, s, path, &b)) goto out;
    } else if (json_object_get(s, "items")) {
        if (gen_array(g, s, path, &b)) goto out;
    } else {
        pl_strbuf_puts(&b, "jvalue");
    }
emit:
    r = g->n_rules++;
    pl_strbuf_printf(&g->out, "r%d ::= %s\n", r, b.p ? b.p : "");
    if (b.failed) r = -1, pl_fail(PL_ERR_NOMEM, "json_schema: out of memory");
out:
    pl_strbuf_destroy(&b);
    g->depth--;
    return r;
}

pl_status pl_schema_to_gbnf(const char *schema_json, char **gbnf) {
    return pl_schema_to_gbnf_dialect(schema_json, PL_SCHEMA_JSON, gbnf);
}

pl_status pl_schema_to_gbnf_dialect(const char *schema_json, pl_schema_dialect dialect, char **gbnf) {
    *gbnf = NULL;
    json_error_t je;
    json_t *s = json_loads(schema_json, JSON_DECODE_ANY, &je);
    if (!s) return pl_fail(PL_ERR_INVALID_ARG, "json_schema: not valid JSON: %s (line %d, column %d)",
                           je.text, je.line, je.column);
    sg g = {.root = s, .dialect = dialect};
    pl_strbuf_init(&g.out);
    pl_strbuf_puts(&g.out, dialect == PL_SCHEMA_GEMMA ? COMMON_GEMMA : COMMON_JSON);
    pl_strbuf_puts(&g.out, COMMON_VALUES);
    int r = gen(&g, s, "#");
    if (r >= 0) pl_strbuf_printf(&g.out, "root ::= r%d\n", r);
    json_decref(s);
    if (r < 0) {
        pl_strbuf_destroy(&g.out);
        return strstr(pl_last_error(), "out of memory") ? PL_ERR_NOMEM : PL_ERR_INVALID_ARG;
    }
    if (!(*gbnf = pl_strbuf_take(&g.out))) return pl_fail(PL_ERR_NOMEM, "json_schema: out of memory");
    return PL_OK;
}

pl_status pl_cons_to_gbnf(pl_constraint_kind kind, const char *text, const char *const *choices,
                          int32_t n_choices, char **gbnf) {
    *gbnf = NULL;
    if (kind == PL_CONSTRAINT_JSON_OBJECT) return pl_schema_to_gbnf("{\"type\": \"object\"}", gbnf);
    if (kind != PL_CONSTRAINT_CHOICE && !text)
        return pl_fail(PL_ERR_INVALID_ARG, "structured output: the constraint has no text");
    if (kind == PL_CONSTRAINT_JSON_SCHEMA) return pl_schema_to_gbnf(text, gbnf);
    if (kind == PL_CONSTRAINT_GRAMMAR) {
        if (!(*gbnf = strdup(text))) return pl_fail(PL_ERR_NOMEM, "grammar: out of memory");
        return PL_OK;
    }
    pl_strbuf b;
    pl_strbuf_init(&b);
    if (kind == PL_CONSTRAINT_REGEX) {
        char *expr;
        PL_TRY(pl_regex_to_gbnf(text, 0, &expr));
        pl_strbuf_printf(&b, "root ::= %s\n", expr);
        free(expr);
    } else if (kind == PL_CONSTRAINT_CHOICE) {
        if (n_choices <= 0 || !choices)
            return pl_fail(PL_ERR_INVALID_ARG, "choice: the list of choices is empty");
        pl_strbuf_puts(&b, "root ::= ");
        for (int32_t i = 0; i < n_choices; i++) {
            if (!choices[i]) {
                pl_strbuf_destroy(&b);
                return pl_fail(PL_ERR_INVALID_ARG, "choice: choice %d is NULL", i);
            }
            if (i) pl_strbuf_puts(&b, " | ");
            put_literal(&b, choices[i], strlen(choices[i]));
        }
        pl_strbuf_putc(&b, '\n');
    } else {
        return pl_fail(PL_ERR_INVALID_ARG, "structured output: unknown constraint kind %d", (int)kind);
    }
    if (!(*gbnf = pl_strbuf_take(&b))) return pl_fail(PL_ERR_NOMEM, "structured output: out of memory");
    return PL_OK;
}
