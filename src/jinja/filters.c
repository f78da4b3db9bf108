/* jinja/filters — Jinja2's filters and tests that chat templates use, by name. tojson is
 * transformers' (json.dumps with ensure_ascii=False, keys in insertion order unless sort_keys). */
#include "jinja/jj.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    F_ABS, F_ATTR, F_CAPITALIZE, F_CENTER, F_COUNT, F_DEFAULT, F_D, F_DICTSORT, F_ESCAPE, F_E,
    F_FORCEESCAPE, F_FIRST, F_FLOAT, F_FORMAT, F_INDENT, F_INT, F_ITEMS, F_JOIN, F_LAST, F_LENGTH, F_LIST,
    F_LOWER, F_MAP, F_MAX, F_MIN, F_PPRINT, F_REJECT, F_REJECTATTR, F_REPLACE, F_REVERSE,
    F_ROUND, F_SAFE, F_SELECT, F_SELECTATTR, F_SORT, F_STRING, F_SUM, F_TITLE, F_TOJSON, F_TRIM,
    F_UNIQUE, F_UPPER, F_WORDCOUNT,
};
static const char *const filter_names[] = {
    "abs", "attr", "capitalize", "center", "count", "default", "d", "dictsort", "escape", "e",
    "forceescape", "first", "float", "format", "indent", "int", "items", "join", "last", "length", "list",
    "lower", "map", "max", "min", "pprint", "reject", "rejectattr", "replace", "reverse",
    "round", "safe", "select", "selectattr", "sort", "string", "sum", "title", "tojson", "trim",
    "unique", "upper", "wordcount", NULL,
};

enum {
    T_DEFINED, T_UNDEFINED, T_NONE, T_BOOLEAN, T_FALSE, T_TRUE, T_INTEGER, T_FLOAT, T_NUMBER,
    T_STRING, T_MAPPING, T_ITERABLE, T_SEQUENCE, T_CALLABLE, T_ODD, T_EVEN, T_DIVISIBLEBY,
    T_EQ, T_EQUALTO, T_EQSYM, T_NE, T_NESYM, T_LT, T_LESSTHAN, T_LTSYM, T_LE, T_LESYM, T_GT,
    T_GREATERTHAN, T_GTSYM, T_GE, T_GESYM, T_IN, T_SAMEAS, T_LOWER, T_UPPER, T_ESCAPED,
    T_FILTER, T_TEST,
};
static const char *const test_names[] = {
    "defined", "undefined", "none", "boolean", "false", "true", "integer", "float", "number",
    "string", "mapping", "iterable", "sequence", "callable", "odd", "even", "divisibleby",
    "eq", "equalto", "==", "ne", "!=", "lt", "lessthan", "<", "le", "<=", "gt",
    "greaterthan", ">", "ge", ">=", "in", "sameas", "lower", "upper", "escaped",
    "filter", "test", NULL,
};

static int find(const char *const *names, const char *name) {
    for (int i = 0; names[i]; i++)
        if (!strcmp(names[i], name)) return i;
    return -1;
}
int jj_filter_find(const char *name) { return find(filter_names, name); }
int jj_test_find(const char *name) { return find(test_names, name); }

const jj_val *jj_arg(const jj_args *a, int i, const char *name) {
    if (i >= 0 && i < a->npos) return &a->pos[i];
    for (int k = 0; k < a->nkw; k++)
        if (name && !strcmp(a->kwn[k], name)) return &a->kwv[k];
    return NULL;
}

static int64_t arg_int(jj_ctx *c, const jj_args *a, int i, const char *name, int64_t dflt) {
    const jj_val *v = jj_arg(a, i, name);
    if (!v || v->t == JT_NONE) return dflt;
    if (v->t == JT_INT) return v->u.i;
    if (v->t == JT_BOOL) return v->u.b;
    jj_fail(c, "line %d: argument '%s' must be an integer, not %s", c->line, name, jj_type_name(*v));
}
static int arg_bool(const jj_args *a, int i, const char *name, int dflt) {
    const jj_val *v = jj_arg(a, i, name);
    return v ? jj_truthy(*v) : dflt;
}
static const jj_str *arg_str(jj_ctx *c, const jj_args *a, int i, const char *name) {
    const jj_val *v = jj_arg(a, i, name);
    if (!v || v->t == JT_NONE) return NULL;
    return jj_to_str(c, *v).u.s;
}

/* An item's attribute by a dotted path ("function.name", "0"), as Jinja's make_attrgetter. */
static jj_val attr_path(jj_ctx *c, jj_val v, const jj_str *path) {
    const char *p = path->p, *end = p + path->len;
    while (p <= end) {
        const char *dot = memchr(p, '.', (size_t)(end - p));
        if (!dot) dot = end;
        jj_val key = jj_strv(c, p, (size_t)(dot - p));
        char *e;
        long long idx = strtoll(key.u.s->p, &e, 10);
        if (key.u.s->len && !*e) key = jj_int(idx);
        v = jj_getitem(c, v, key);
        p = dot + 1;
    }
    return v;
}

static jj_val lower_val(jj_ctx *c, jj_val v) {
    if (v.t != JT_STR) return v;
    jj_val r = jj_strv(c, v.u.s->p, v.u.s->len);
    for (size_t i = 0; i < r.u.s->len; i++) r.u.s->p[i] = (char)tolower((unsigned char)r.u.s->p[i]);
    return r;
}

static jj_val strip(jj_ctx *c, jj_val s, const jj_str *chars, int left, int right) {
    const char *p = s.u.s->p, *e = p + s.u.s->len;
    if (chars) {
        while (left && p < e && memchr(chars->p, *p, chars->len)) p++;
        while (right && e > p && memchr(chars->p, e[-1], chars->len)) e--;
    } else {
        size_t k;
        while (left && (k = jj_space_at(p, e))) p += k;
        while (right && (k = jj_space_before(p, e))) e -= k;
    }
    return jj_strv(c, p, (size_t)(e - p));
}

/* sorted() with Jinja's case folding; stable insertion sort (lists in templates are short). */
static void sort_vals(jj_ctx *c, jj_val *keys, jj_val *vals, size_t n, int reverse) {
    for (size_t i = 1; i < n; i++)
        for (size_t j = i; j > 0; j--) {
            int r = jj_compare(c, keys[j - 1], keys[j], "<");
            if (reverse ? r >= 0 : r <= 0) break;
            jj_val t = keys[j]; keys[j] = keys[j - 1]; keys[j - 1] = t;
            t = vals[j]; vals[j] = vals[j - 1]; vals[j - 1] = t;
        }
}

static jj_val indent(jj_ctx *c, jj_val s, const jj_args *a) {
    const jj_val *w = jj_arg(a, 0, "width");
    jj_val ind;
    if (w && w->t == JT_STR) ind = *w;
    else {
        int64_t k = w ? (w->t == JT_INT ? w->u.i : 0) : 4;
        if (k < 0) k = 0;
        if (k > 1000) jj_fail(c, "line %d: indent width too large", c->line);
        char sp[1001];
        memset(sp, ' ', (size_t)k);
        ind = jj_strv(c, sp, (size_t)k);
    }
    int first = arg_bool(a, 1, "first", 0), blank = arg_bool(a, 2, "blank", 0);
    jj_buf b = {0};
    jj_buf_put(c, &b, "", 0);
    if (first) jj_buf_put(c, &b, ind.u.s->p, ind.u.s->len);
    const char *p = s.u.s->p, *e = p + s.u.s->len;
    int line = 0;
    while (p < e) {
        const char *nl = p;
        while (nl < e && *nl != '\n' && *nl != '\r') nl++;
        if (line) {
            jj_buf_put(c, &b, "\n", 1);
            if (blank || nl > p) jj_buf_put(c, &b, ind.u.s->p, ind.u.s->len);
        }
        jj_buf_put(c, &b, p, (size_t)(nl - p));
        line++;
        if (nl < e && *nl == '\r' && nl + 1 < e && nl[1] == '\n') nl++;
        p = nl + 1;
        if (nl >= e) break;
        if (p == e) { jj_buf_put(c, &b, "\n", 1); break; }
    }
    return jj_buf_val(c, &b);
}

jj_val jj_html_escape(jj_ctx *c, jj_val v) {
    v = jj_to_str(c, v);
    jj_buf b = {0};
    jj_buf_put(c, &b, "", 0);
    for (size_t i = 0; i < v.u.s->len; i++) {
        char ch = v.u.s->p[i];
        const char *r = ch == '&' ? "&amp;" : ch == '<' ? "&lt;" : ch == '>' ? "&gt;"
                        : ch == '"' ? "&#34;" : ch == '\'' ? "&#39;" : NULL;
        if (r) jj_buf_puts(c, &b, r);
        else jj_buf_put(c, &b, &ch, 1);
    }
    jj_val r = jj_buf_val(c, &b);
    r.u.s->markup = 1;
    return r;
}

static jj_val gen(jj_val list) {
    list.u.l->tuple = JL_GEN;
    return list;
}

/* select/reject(test, args...) and selectattr/rejectattr(attr, test, args...) */
static jj_val select_items(jj_ctx *c, jj_val seq, const jj_args *a, int by_attr, int keep) {
    /* Jinja yields nothing for a false sequence (None, empty) without iterating it */
    jj_list *items = jj_truthy(seq) ? jj_iter(c, seq) : jj_newlist(c, 0), *out = jj_newlist(c, 0);
    int first = by_attr ? 1 : 0, tid = -1;
    const jj_str *attr = by_attr ? arg_str(c, a, 0, NULL) : NULL;
    if (by_attr && !attr) jj_fail(c, "line %d: selectattr/rejectattr need an attribute", c->line);
    if (a->npos > first) {
        const jj_str *tn = jj_to_str(c, a->pos[first]).u.s;
        if ((tid = jj_test_find(tn->p)) < 0) jj_fail(c, "line %d: no test named '%s'", c->line, tn->p);
    }
    jj_args ta = {NULL, 0, NULL, NULL, 0};
    if (a->npos > first + 1) {
        ta.pos = a->pos + first + 1;
        ta.npos = a->npos - first - 1;
    }
    for (size_t i = 0; i < items->n; i++) {
        jj_val v = by_attr ? attr_path(c, items->v[i], attr) : items->v[i];
        int r = tid >= 0 ? jj_test_apply(c, tid, v, &ta) : jj_truthy(v);
        if (r == keep) jj_list_push(c, out, items->v[i]);
    }
    return gen(jj_listv(out));
}

/* Python's printf-style str % args: %s %r %d %i %x %f %e %g %%, with flags, width, precision. */
jj_val jj_format(jj_ctx *c, jj_val fmt, const jj_val *args, int nargs) {
    jj_val f = jj_to_str(c, fmt);
    jj_buf b = {0};
    jj_buf_put(c, &b, "", 0);
    int k = 0;
    for (const char *p = f.u.s->p, *e = p + f.u.s->len; p < e; p++) {
        if (*p != '%') { jj_buf_put(c, &b, p, 1); continue; }
        char spec[32] = "%";
        size_t sl = 1;
        p++;
        while (p < e && strchr("-+ #0123456789.", *p) && sl < 20) spec[sl++] = *p++;
        if (p >= e) jj_fail(c, "line %d: incomplete format", c->line);
        if (*p == '%') { jj_buf_put(c, &b, "%", 1); continue; }
        if (k >= nargs) jj_fail(c, "line %d: not enough arguments for format string", c->line);
        jj_val v = args[k++];
        char tmp[512];
        if (*p == 's' || *p == 'r') {
            jj_buf sb = {0};
            jj_buf_put(c, &sb, "", 0);
            if (*p == 's') jj_write_str(c, &sb, v);
            else jj_write_repr(c, &sb, v);
            if (sl == 1) { jj_buf_put(c, &b, sb.p, sb.len); continue; }
            spec[sl++] = 's';
            spec[sl] = '\0';
            snprintf(tmp, sizeof tmp, spec, sb.p);
        } else if (strchr("dixX", *p)) {
            if (v.t != JT_INT && v.t != JT_BOOL && v.t != JT_FLOAT)
                jj_fail(c, "line %d: %%%c format: a real number is required, not %s", c->line, *p, jj_type_name(v));
            /* Python: OverflowError / ValueError for inf and nan; past int64 we cannot hold it */
            if (v.t == JT_FLOAT && !(fabs(v.u.f) < 9.2e18))
                jj_fail(c, "line %d: %%%c format: cannot convert float %s to integer", c->line, *p,
                        isnan(v.u.f) ? "NaN" : isinf(v.u.f) ? "infinity" : "beyond 64 bits");
            long long x = v.t == JT_INT ? v.u.i : v.t == JT_BOOL ? v.u.b : (long long)v.u.f;
            spec[sl++] = 'l'; spec[sl++] = 'l'; spec[sl++] = *p == 'i' ? 'd' : *p;
            spec[sl] = '\0';
            snprintf(tmp, sizeof tmp, spec, x);
        } else if (strchr("feEgG", *p)) {
            if (v.t != JT_INT && v.t != JT_BOOL && v.t != JT_FLOAT)
                jj_fail(c, "line %d: %%%c format: a real number is required, not %s", c->line, *p, jj_type_name(v));
            double x = v.t == JT_FLOAT ? v.u.f : v.t == JT_INT ? (double)v.u.i : v.u.b;
            spec[sl++] = *p;
            spec[sl] = '\0';
            snprintf(tmp, sizeof tmp, spec, x);
        } else jj_fail(c, "line %d: unsupported format character '%c'", c->line, *p);
        jj_buf_puts(c, &b, tmp);
    }
    if (k < nargs) jj_fail(c, "line %d: not all arguments converted during string formatting", c->line);
    return jj_buf_val(c, &b);
}

static jj_val title(jj_ctx *c, jj_val s) {
    jj_val r = jj_strv(c, s.u.s->p, s.u.s->len);
    int start = 1;
    for (size_t i = 0; i < r.u.s->len; i++) {
        unsigned char ch = (unsigned char)r.u.s->p[i];
        if (isspace(ch) || strchr("-({[<", ch)) { start = 1; continue; }
        r.u.s->p[i] = (char)(start ? toupper(ch) : tolower(ch));
        start = 0;
    }
    return r;
}

static jj_val minmax(jj_ctx *c, jj_val seq, const jj_args *a, int want_max) {
    jj_list *l = jj_iter(c, seq);
    const jj_str *attr = arg_str(c, a, 1, "attribute");
    int cs = arg_bool(a, 0, "case_sensitive", 0);
    if (!l->n) return jj_undef_why(c, "No aggregated item, sequence was empty.");
    jj_val best = l->v[0];
    for (size_t i = 1; i < l->n; i++) {
        jj_val x = attr ? attr_path(c, l->v[i], attr) : l->v[i], y = attr ? attr_path(c, best, attr) : best;
        if (!cs) { x = lower_val(c, x); y = lower_val(c, y); }
        int r = jj_compare(c, x, y, "<");
        if (want_max ? r > 0 : r < 0) best = l->v[i];
    }
    return best;
}

jj_val jj_filter_apply(jj_ctx *c, int fid, jj_val v, const jj_args *a) {
    switch (fid) {
    case F_ABS:
        jj_check_undefined(c, v);
        if (v.t == JT_INT) return jj_int(v.u.i < 0 ? -v.u.i : v.u.i);
        if (v.t == JT_FLOAT) return jj_float(fabs(v.u.f));
        if (v.t == JT_BOOL) return jj_int(v.u.b);
        jj_fail(c, "line %d: bad operand type for abs(): '%s'", c->line, jj_type_name(v));
    case F_ATTR: {
        const jj_str *n = arg_str(c, a, 0, "name");
        return n ? jj_getattr(c, v, n->p) : jj_undef();
    }
    case F_CAPITALIZE: {
        jj_val r = lower_val(c, jj_to_str(c, v));
        if (r.u.s->len) r.u.s->p[0] = (char)toupper((unsigned char)r.u.s->p[0]);
        return r;
    }
    case F_CENTER: {
        jj_val s = jj_to_str(c, v);
        int64_t w = arg_int(c, a, 0, "width", 80), n = (int64_t)jj_utf8_count(s.u.s->p, s.u.s->len);
        if (w > 100000) jj_fail(c, "line %d: center width too large", c->line);
        if (w <= n) return s;
        int64_t left = (w - n) / 2 + ((w - n) & w & 1), right = w - n - left;
        jj_buf b = {0};
        for (int64_t i = 0; i < left; i++) jj_buf_put(c, &b, " ", 1);
        jj_buf_put(c, &b, s.u.s->p, s.u.s->len);
        for (int64_t i = 0; i < right; i++) jj_buf_put(c, &b, " ", 1);
        return jj_buf_val(c, &b);
    }
    case F_COUNT: case F_LENGTH:
        switch (v.t) {
        case JT_UNDEF: return jj_int(0);
        case JT_STR: return jj_int((int64_t)jj_utf8_count(v.u.s->p, v.u.s->len));
        case JT_LIST:
            if (v.u.l->tuple == JL_GEN) break;
            return jj_int((int64_t)v.u.l->n);
        case JT_DICT: case JT_NS: return jj_int((int64_t)v.u.d->n);
        default: break;
        }
        jj_fail(c, "line %d: object of type '%s' has no len()", c->line, jj_type_name(v));
    case F_DEFAULT: case F_D: {
        const jj_val *d = jj_arg(a, 0, "default_value");
        int boolean = arg_bool(a, 1, "boolean", 0);
        if (v.t == JT_UNDEF || (boolean && !jj_truthy(v))) return d ? *d : jj_cstr(c, "");
        return v;
    }
    case F_DICTSORT: {
        jj_check_undefined(c, v);
        if (v.t != JT_DICT) jj_fail(c, "line %d: dictsort needs a dict, not %s", c->line, jj_type_name(v));
        int cs = arg_bool(a, 0, "case_sensitive", 0), rev = arg_bool(a, 2, "reverse", 0);
        const jj_str *by = arg_str(c, a, 1, "by");
        int by_value = by && !strcmp(by->p, "value");
        size_t n = v.u.d->n;
        jj_val *keys = jj_alloc(c, (n + 1) * sizeof *keys), *vals = jj_alloc(c, (n + 1) * sizeof *vals);
        for (size_t i = 0; i < n; i++) {
            jj_list *pair = jj_newlist(c, 2);
            pair->tuple = 1;
            jj_list_push(c, pair, v.u.d->k[i]);
            jj_list_push(c, pair, v.u.d->v[i]);
            vals[i] = jj_listv(pair);
            keys[i] = by_value ? v.u.d->v[i] : v.u.d->k[i];
            if (!cs) keys[i] = lower_val(c, keys[i]);
        }
        sort_vals(c, keys, vals, n, rev);
        jj_list *l = jj_newlist(c, n);
        for (size_t i = 0; i < n; i++) jj_list_push(c, l, vals[i]);
        return jj_listv(l);
    }
    case F_ESCAPE: case F_E:
        return v.t == JT_STR && v.u.s->markup ? v : jj_html_escape(c, v);
    case F_FORCEESCAPE: return jj_html_escape(c, v);
    case F_FIRST: case F_LAST: {
        if (fid == F_LAST && v.t == JT_LIST && v.u.l->tuple == JL_GEN)
            jj_fail(c, "line %d: 'generator' object is not reversible", c->line);
        jj_list *l = jj_iter(c, v);
        if (!l->n) return jj_undef_why(c, "No %s item, sequence was empty.", fid == F_FIRST ? "first" : "last");
        return fid == F_FIRST ? l->v[0] : l->v[l->n - 1];
    }
    case F_FLOAT: case F_INT: {
        const jj_val *d = jj_arg(a, 0, "default");
        jj_val dv = d ? *d : fid == F_INT ? jj_int(0) : jj_float(0.0);
        if (v.t == JT_INT || v.t == JT_BOOL) return fid == F_INT ? jj_int(v.t == JT_INT ? v.u.i : v.u.b) : jj_float(v.t == JT_INT ? (double)v.u.i : v.u.b);
        if (v.t == JT_FLOAT) {
            if (fid == F_FLOAT) return v;
            if (!isfinite(v.u.f) || fabs(v.u.f) >= 9.2e18) return dv;
            return jj_int((int64_t)v.u.f);
        }
        if (v.t == JT_STR) {
            jj_val s = strip(c, v, NULL, 1, 1);
            char *e;
            if (fid == F_INT) {
                long long i = strtoll(s.u.s->p, &e, (int)arg_int(c, a, 1, "base", 10));
                if (s.u.s->len && !*e) return jj_int(i);
            }
            double f = strtod(s.u.s->p, &e);
            if (s.u.s->len && !*e) {
                if (fid == F_FLOAT) return jj_float(f);
                if (isfinite(f) && fabs(f) < 9.2e18) return jj_int((int64_t)f);
            }
        }
        return dv;
    }
    case F_FORMAT: return jj_format(c, v, a->pos, a->npos);
    case F_INDENT: return indent(c, jj_to_str(c, v), a);
    case F_ITEMS: {
        if (v.t == JT_UNDEF) return jj_listv(jj_newlist(c, 0));
        if (v.t != JT_DICT && v.t != JT_NS)
            jj_fail(c, "line %d: can only get item pairs from a mapping, not %s", c->line, jj_type_name(v));
        jj_list *l = jj_newlist(c, v.u.d->n);
        for (size_t i = 0; i < v.u.d->n; i++) {
            jj_list *pair = jj_newlist(c, 2);
            pair->tuple = 1;
            jj_list_push(c, pair, v.u.d->k[i]);
            jj_list_push(c, pair, v.u.d->v[i]);
            jj_list_push(c, l, jj_listv(pair));
        }
        return gen(jj_listv(l));
    }
    case F_JOIN: {
        jj_list *l = jj_iter(c, v);
        const jj_str *sep = arg_str(c, a, 0, "d"), *attr = arg_str(c, a, 1, "attribute");
        jj_buf b = {0};
        jj_buf_put(c, &b, "", 0);
        for (size_t i = 0; i < l->n; i++) {
            if (i && sep) jj_buf_put(c, &b, sep->p, sep->len);
            jj_write_str(c, &b, attr ? attr_path(c, l->v[i], attr) : l->v[i]);
        }
        return jj_buf_val(c, &b);
    }
    case F_LIST: {
        jj_list *l = jj_iter(c, v), *r = jj_newlist(c, l->n);
        for (size_t i = 0; i < l->n; i++) jj_list_push(c, r, l->v[i]);
        return jj_listv(r);
    }
    case F_LOWER: case F_UPPER: {
        jj_val r = jj_to_str(c, v);
        r = jj_strv(c, r.u.s->p, r.u.s->len);
        for (size_t i = 0; i < r.u.s->len; i++)
            r.u.s->p[i] = (char)(fid == F_LOWER ? tolower((unsigned char)r.u.s->p[i]) : toupper((unsigned char)r.u.s->p[i]));
        return r;
    }
    case F_MAP: {
        jj_list *l = jj_truthy(v) ? jj_iter(c, v) : jj_newlist(c, 0), *r = jj_newlist(c, l->n);
        const jj_val *attr = jj_arg(a, -1, "attribute");
        if (attr) {
            const jj_val *d = jj_arg(a, -1, "default");
            const jj_str *path = jj_to_str(c, *attr).u.s;
            for (size_t i = 0; i < l->n; i++) {
                jj_val x = attr_path(c, l->v[i], path);
                jj_list_push(c, r, x.t == JT_UNDEF && d ? *d : x);
            }
            return gen(jj_listv(r));
        }
        if (a->npos < 1) return gen(jj_listv(r));
        const jj_str *fname = jj_to_str(c, a->pos[0]).u.s;
        int f = jj_filter_find(fname->p);
        if (f < 0) jj_fail(c, "line %d: no filter named '%s'", c->line, fname->p);
        jj_args fa = {a->pos + 1, a->npos - 1, a->kwn, a->kwv, a->nkw};
        for (size_t i = 0; i < l->n; i++) jj_list_push(c, r, jj_filter_apply(c, f, l->v[i], &fa));
        return gen(jj_listv(r));
    }
    case F_MAX: case F_MIN: return minmax(c, v, a, fid == F_MAX);
    case F_PPRINT: {
        jj_buf b = {0};
        jj_buf_put(c, &b, "", 0);
        jj_write_repr(c, &b, v);
        return jj_buf_val(c, &b);
    }
    case F_REJECT: return select_items(c, v, a, 0, 0);
    case F_REJECTATTR: return select_items(c, v, a, 1, 0);
    case F_SELECT: return select_items(c, v, a, 0, 1);
    case F_SELECTATTR: return select_items(c, v, a, 1, 1);
    case F_REPLACE: {
        jj_val s = jj_to_str(c, v);
        const jj_str *old = arg_str(c, a, 0, "old"), *nw = arg_str(c, a, 1, "new");
        if (!old || !nw) jj_fail(c, "line %d: replace needs old and new", c->line);
        jj_args ma = {NULL, 0, NULL, NULL, 0};
        jj_val args[3] = {{JT_STR, {.s = (jj_str *)old}}, {JT_STR, {.s = (jj_str *)nw}},
                          jj_int(arg_int(c, a, 2, "count", -1))};
        ma.pos = args;
        ma.npos = 3;
        return jj_call_method(c, s, "replace", &ma);
    }
    case F_REVERSE: {
        jj_check_undefined(c, v);
        if (v.t == JT_STR) {
            jj_list *chars = jj_iter(c, v);
            jj_buf b = {0};
            jj_buf_put(c, &b, "", 0);
            for (size_t i = chars->n; i-- > 0;) jj_buf_put(c, &b, chars->v[i].u.s->p, chars->v[i].u.s->len);
            return jj_buf_val(c, &b);
        }
        jj_list *l = jj_iter(c, v), *r = jj_newlist(c, l->n);
        for (size_t i = l->n; i-- > 0;) jj_list_push(c, r, l->v[i]);
        /* reversed(list) is an iterator; a generator is listed, then reversed */
        return v.t == JT_LIST && v.u.l->tuple == JL_GEN ? jj_listv(r) : gen(jj_listv(r));
    }
    case F_ROUND: {
        jj_check_undefined(c, v);
        if (v.t != JT_INT && v.t != JT_FLOAT && v.t != JT_BOOL)
            jj_fail(c, "line %d: round needs a number, not %s", c->line, jj_type_name(v));
        double x = v.t == JT_FLOAT ? v.u.f : v.t == JT_INT ? (double)v.u.i : v.u.b;
        int64_t prec = arg_int(c, a, 0, "precision", 0);
        const jj_str *method = arg_str(c, a, 1, "method");
        double m = pow(10.0, (double)prec), y = x * m;
        if (!method || !strcmp(method->p, "common")) y = nearbyint(y);
        else if (!strcmp(method->p, "ceil")) y = ceil(y);
        else if (!strcmp(method->p, "floor")) y = floor(y);
        else jj_fail(c, "line %d: method must be common, ceil or floor", c->line);
        return jj_float(y / m);
    }
    case F_SAFE: {
        if (v.t == JT_STR && v.u.s->markup) return v;
        jj_val s = jj_to_str(c, v);
        s = jj_strv(c, s.u.s->p, s.u.s->len);
        s.u.s->markup = 1;
        return s;
    }
    case F_SORT: {
        jj_list *l = jj_iter(c, v);
        int rev = arg_bool(a, 0, "reverse", 0), cs = arg_bool(a, 1, "case_sensitive", 0);
        const jj_str *attr = arg_str(c, a, 2, "attribute");
        jj_val *keys = jj_alloc(c, (l->n + 1) * sizeof *keys), *vals = jj_alloc(c, (l->n + 1) * sizeof *vals);
        for (size_t i = 0; i < l->n; i++) {
            vals[i] = l->v[i];
            keys[i] = attr ? attr_path(c, l->v[i], attr) : l->v[i];
            if (!cs) keys[i] = lower_val(c, keys[i]);
        }
        sort_vals(c, keys, vals, l->n, rev);
        jj_list *r = jj_newlist(c, l->n);
        for (size_t i = 0; i < l->n; i++) jj_list_push(c, r, vals[i]);
        return jj_listv(r);
    }
    case F_STRING: return jj_to_str(c, v);
    case F_SUM: {
        jj_list *l = jj_iter(c, v);
        const jj_str *attr = arg_str(c, a, 0, "attribute");
        const jj_val *st = jj_arg(a, 1, "start");
        jj_val acc = st ? *st : jj_int(0);
        for (size_t i = 0; i < l->n; i++) {
            jj_val x = attr ? attr_path(c, l->v[i], attr) : l->v[i];
            jj_check_undefined(c, x);
            if (acc.t == JT_INT && x.t == JT_INT) {
                if (__builtin_add_overflow(acc.u.i, x.u.i, &acc.u.i)) jj_fail(c, "line %d: integer overflow", c->line);
            } else if ((acc.t == JT_INT || acc.t == JT_FLOAT) && (x.t == JT_INT || x.t == JT_FLOAT))
                acc = jj_float((acc.t == JT_INT ? (double)acc.u.i : acc.u.f) + (x.t == JT_INT ? (double)x.u.i : x.u.f));
            else jj_fail(c, "line %d: unsupported operand type(s) for +: '%s' and '%s'", c->line, jj_type_name(acc), jj_type_name(x));
        }
        return acc;
    }
    case F_TITLE: return title(c, jj_to_str(c, v));
    case F_TOJSON: {
        if (jj_arg(a, -1, "separators")) jj_fail(c, "line %d: tojson: separators are not supported", c->line);
        const jj_val *ind = jj_arg(a, 1, "indent");
        int indent = -1;
        if (ind && ind->t != JT_NONE) {
            if (ind->t != JT_INT || ind->u.i < 0 || ind->u.i > 64)
                jj_fail(c, "line %d: tojson: indent must be an integer from 0 to 64", c->line);
            indent = (int)ind->u.i;
        }
        jj_buf b = {0};
        jj_buf_put(c, &b, "", 0);
        jj_write_json(c, &b, v, indent, arg_bool(a, 3, "sort_keys", 0), 0);
        return jj_buf_val(c, &b);
    }
    case F_TRIM: return strip(c, jj_to_str(c, v), arg_str(c, a, 0, "chars"), 1, 1);
    case F_UNIQUE: {
        jj_list *l = jj_iter(c, v), *r = jj_newlist(c, 0), *seen = jj_newlist(c, 0);
        int cs = arg_bool(a, 0, "case_sensitive", 0);
        const jj_str *attr = arg_str(c, a, 1, "attribute");
        for (size_t i = 0; i < l->n; i++) {
            jj_val k = attr ? attr_path(c, l->v[i], attr) : l->v[i];
            if (!cs) k = lower_val(c, k);
            int dup = 0;
            for (size_t j = 0; j < seen->n && !dup; j++) dup = jj_equal(seen->v[j], k);
            if (dup) continue;
            jj_list_push(c, seen, k);
            jj_list_push(c, r, l->v[i]);
        }
        return gen(jj_listv(r));
    }
    case F_WORDCOUNT: {
        jj_val s = jj_to_str(c, v);
        int64_t n = 0, in = 0;
        for (size_t i = 0; i < s.u.s->len; i++) {
            unsigned char ch = (unsigned char)s.u.s->p[i];
            int w = isalnum(ch) || ch == '_' || ch >= 0x80;
            n += w && !in;
            in = w;
        }
        return jj_int(n);
    }
    }
    jj_fail(c, "line %d: internal error: bad filter", c->line);
}

static int is_cased_all(jj_val v, int upper) {
    if (v.t != JT_STR) return 0;
    int cased = 0;
    for (size_t i = 0; i < v.u.s->len; i++) {
        unsigned char ch = (unsigned char)v.u.s->p[i];
        if (upper ? islower(ch) : isupper(ch)) return 0;
        cased |= isalpha(ch);
    }
    return cased;
}

int jj_test_apply(jj_ctx *c, int tid, jj_val v, const jj_args *a) {
    const jj_val *o = jj_arg(a, 0, NULL);
    jj_val other = o ? *o : jj_undef();
    switch (tid) {
    case T_DEFINED: return v.t != JT_UNDEF;
    case T_UNDEFINED: return v.t == JT_UNDEF;
    case T_NONE: return v.t == JT_NONE;
    case T_BOOLEAN: return v.t == JT_BOOL;
    case T_FALSE: return v.t == JT_BOOL && !v.u.b;
    case T_TRUE: return v.t == JT_BOOL && v.u.b;
    case T_INTEGER: return v.t == JT_INT;
    case T_FLOAT: return v.t == JT_FLOAT;
    case T_NUMBER: return v.t == JT_INT || v.t == JT_FLOAT || v.t == JT_BOOL;
    case T_STRING: return v.t == JT_STR;
    case T_MAPPING: return v.t == JT_DICT;
    case T_ITERABLE: return v.t == JT_STR || v.t == JT_LIST || v.t == JT_DICT || v.t == JT_UNDEF;
    case T_SEQUENCE: return v.t == JT_STR || (v.t == JT_LIST && v.u.l->tuple != JL_GEN) || v.t == JT_DICT;
    case T_CALLABLE: return v.t == JT_MACRO || v.t == JT_FUNC || v.t == JT_METHOD;
    case T_ODD: case T_EVEN: case T_DIVISIBLEBY: {
        jj_check_undefined(c, v);
        if (v.t != JT_INT && v.t != JT_BOOL) jj_fail(c, "line %d: test needs an integer, not %s", c->line, jj_type_name(v));
        int64_t x = v.t == JT_INT ? v.u.i : v.u.b;
        if (tid == T_ODD) return (x % 2) != 0;
        if (tid == T_EVEN) return (x % 2) == 0;
        int64_t d = arg_int(c, a, 0, "num", 0);
        if (d == 0) jj_fail(c, "line %d: integer division or modulo by zero", c->line);
        return d == -1 || x % d == 0;
    }
    case T_EQ: case T_EQUALTO: case T_EQSYM: return jj_equal(v, other);
    case T_NE: case T_NESYM: return !jj_equal(v, other);
    case T_LT: case T_LESSTHAN: case T_LTSYM: return jj_compare(c, v, other, "<") < 0;
    case T_LE: case T_LESYM: return jj_compare(c, v, other, "<=") <= 0;
    case T_GT: case T_GREATERTHAN: case T_GTSYM: return jj_compare(c, v, other, ">") > 0;
    case T_GE: case T_GESYM: return jj_compare(c, v, other, ">=") >= 0;
    case T_IN: {
        if (other.t == JT_STR && v.t == JT_STR)
            return !v.u.s->len || memmem(other.u.s->p, other.u.s->len, v.u.s->p, v.u.s->len) != NULL;
        if (other.t == JT_DICT || other.t == JT_NS) return jj_dict_getv(other.u.d, v) != NULL;
        jj_list *l = jj_iter(c, other);
        for (size_t i = 0; i < l->n; i++)
            if (jj_equal(l->v[i], v)) return 1;
        return 0;
    }
    case T_SAMEAS:
        if (v.t != other.t) return 0;
        if (v.t == JT_NONE || v.t == JT_UNDEF) return 1;
        if (v.t == JT_BOOL) return v.u.b == other.u.b;
        if (v.t == JT_INT) return v.u.i == other.u.i && v.u.i >= -5 && v.u.i <= 256;
        return v.u.s == other.u.s;
    case T_LOWER: return is_cased_all(v, 0);
    case T_UPPER: return is_cased_all(v, 1);
    case T_ESCAPED: return 0;
    case T_FILTER: return v.t == JT_STR && jj_filter_find(v.u.s->p) >= 0;
    case T_TEST: return v.t == JT_STR && jj_test_find(v.u.s->p) >= 0;
    }
    jj_fail(c, "line %d: internal error: bad test", c->line);
}
