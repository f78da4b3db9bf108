/* jinja/value — the arena, values, and their Python-like text forms: str(), repr(), json.dumps,
 * and reading the render context from JSON. */
#include "jinja/jj.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- arena and errors ---- */

void jj_fail(jj_ctx *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err, sizeof c->err, fmt, ap);
    va_end(ap);
    longjmp(c->jb, 1);
}

void jj_nomem(jj_ctx *c) {
    c->nomem = 1;
    jj_fail(c, "out of memory");
}

void *jj_alloc(jj_ctx *c, size_t n) {
    jj_arena *a = &c->arena;
    n = (n + sizeof(max_align_t) - 1) / sizeof(max_align_t) * sizeof(max_align_t);
    if (n == 0) n = sizeof(max_align_t);
    if (a->head && a->head->cap - a->head->used >= n) {
        void *p = (char *)a->head->data + a->head->used;
        a->head->used += n;
        return p;
    }
    size_t cap = n > 65536 ? n : 65536;
    if (a->limit && (n > a->limit || a->total + cap > a->limit))
        jj_fail(c, "the template used more than its memory limit (%zu bytes)", a->limit);
    jj_chunk *ch = malloc(sizeof *ch + cap);
    if (!ch) jj_nomem(c);
    a->total += cap;
    if (a->head && a->head->cap - a->head->used > cap - n) {
        /* keep filling the current chunk; put the big one behind it */
        ch->next = a->head->next;
        a->head->next = ch;
        ch->used = cap;
        ch->cap = cap;
        return ch->data;
    }
    ch->next = a->head;
    ch->used = n;
    ch->cap = cap;
    a->head = ch;
    return ch->data;
}

void jj_arena_free(jj_arena *a) {
    for (jj_chunk *ch = a->head, *nx; ch; ch = nx) {
        nx = ch->next;
        free(ch);
    }
    a->head = NULL;
    a->total = 0;
}

/* ---- constructors ---- */

jj_str *jj_newstr(jj_ctx *c, const char *p, size_t n) {
    jj_str *s = jj_alloc(c, sizeof *s + n + 1);
    s->len = n;
    s->markup = 0;
    if (n) memcpy(s->p, p, n);
    s->p[n] = '\0';
    return s;
}

jj_val jj_strv(jj_ctx *c, const char *p, size_t n) {
    jj_val v = {JT_STR, {.s = jj_newstr(c, p, n)}};
    return v;
}

jj_val jj_cstr(jj_ctx *c, const char *s) { return jj_strv(c, s, strlen(s)); }

jj_val jj_buf_val(jj_ctx *c, const jj_buf *b) { return jj_strv(c, b->p, b->len); }

jj_val jj_undef_why(jj_ctx *c, const char *fmt, ...) {
    char tmp[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    jj_val v = {JT_UNDEF, {.s = jj_newstr(c, tmp, strlen(tmp))}};
    return v;
}

void jj_buf_put(jj_ctx *c, jj_buf *b, const char *p, size_t n) {
    if (c->max_output && b->len + n > c->max_output)
        jj_fail(c, "a text of the template is longer than its limit (%zu bytes)", c->max_output);
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *np = jj_alloc(c, cap);
        if (b->len) memcpy(np, b->p, b->len);
        b->p = np;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->len, p, n);
    b->len += n;
    b->p[b->len] = '\0';
}

jj_list *jj_newlist(jj_ctx *c, size_t cap) {
    jj_list *l = jj_alloc(c, sizeof *l);
    l->n = 0;
    l->cap = cap;
    l->tuple = 0;
    l->v = cap ? jj_alloc(c, cap * sizeof(jj_val)) : NULL;
    return l;
}

void jj_list_push(jj_ctx *c, jj_list *l, jj_val v) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        jj_val *nv = jj_alloc(c, cap * sizeof(jj_val));
        if (l->n) memcpy(nv, l->v, l->n * sizeof(jj_val));
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = v;
}

jj_dict *jj_newdict(jj_ctx *c, size_t cap) {
    jj_dict *d = jj_alloc(c, sizeof *d);
    d->n = 0;
    d->cap = cap;
    d->k = cap ? jj_alloc(c, cap * sizeof(jj_val)) : NULL;
    d->v = cap ? jj_alloc(c, cap * sizeof(jj_val)) : NULL;
    return d;
}

static int key_eq(jj_val a, const char *k, size_t n) {
    return a.t == JT_STR && a.u.s->len == n && memcmp(a.u.s->p, k, n) == 0;
}

jj_val *jj_dict_get(const jj_dict *d, const char *k, size_t n) {
    for (size_t i = 0; i < d->n; i++)
        if (key_eq(d->k[i], k, n)) return &d->v[i];
    return NULL;
}

jj_val *jj_dict_getv(const jj_dict *d, jj_val k) {
    if (k.t == JT_STR) return jj_dict_get(d, k.u.s->p, k.u.s->len);
    for (size_t i = 0; i < d->n; i++)
        if (jj_equal(d->k[i], k)) return &d->v[i];
    return NULL;
}

void jj_dict_set(jj_ctx *c, jj_dict *d, jj_val k, jj_val v) {
    jj_val *old = jj_dict_getv(d, k);
    if (old) {
        *old = v;
        return;
    }
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 4;
        jj_val *nk = jj_alloc(c, cap * sizeof(jj_val)), *nv = jj_alloc(c, cap * sizeof(jj_val));
        if (d->n) {
            memcpy(nk, d->k, d->n * sizeof(jj_val));
            memcpy(nv, d->v, d->n * sizeof(jj_val));
        }
        d->k = nk;
        d->v = nv;
        d->cap = cap;
    }
    d->k[d->n] = k;
    d->v[d->n++] = v;
}

/* ---- UTF-8 ---- */

size_t jj_utf8_count(const char *p, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += ((unsigned char)p[i] & 0xC0) != 0x80;
    return k;
}

size_t jj_utf8_offset(const char *p, size_t n, size_t i) {
    size_t k = 0, b = 0;
    for (; b < n; b++) {
        if (((unsigned char)p[b] & 0xC0) != 0x80) {
            if (k == i) return b;
            k++;
        }
    }
    return n;
}

static unsigned decode_at(const char *p, const char *end, size_t *len) {
    const unsigned char *s = (const unsigned char *)p;
    size_t avail = (size_t)(end - p);
    if (s[0] < 0x80 || avail < 2) { *len = 1; return s[0]; }
    if ((s[0] & 0xE0) == 0xC0) { *len = 2; return ((s[0] & 0x1Fu) << 6) | (s[1] & 0x3F); }
    if ((s[0] & 0xF0) == 0xE0 && avail >= 3) {
        *len = 3;
        return ((s[0] & 0x0Fu) << 12) | ((s[1] & 0x3Fu) << 6) | (s[2] & 0x3F);
    }
    if ((s[0] & 0xF8) == 0xF0 && avail >= 4) {
        *len = 4;
        return ((s[0] & 0x07u) << 18) | ((s[1] & 0x3Fu) << 12) | ((s[2] & 0x3Fu) << 6) | (s[3] & 0x3F);
    }
    *len = 1;
    return s[0];
}

static int is_py_space(unsigned u) {
    return (u >= 9 && u <= 13) || (u >= 0x1c && u <= 0x20) || u == 0x85 || u == 0xA0 ||
           u == 0x1680 || (u >= 0x2000 && u <= 0x200A) || u == 0x2028 || u == 0x2029 ||
           u == 0x202F || u == 0x205F || u == 0x3000;
}

size_t jj_space_at(const char *p, const char *end) {
    if (p >= end) return 0;
    size_t len;
    unsigned u = decode_at(p, end, &len);
    return is_py_space(u) ? len : 0;
}

size_t jj_space_before(const char *begin, const char *p) {
    if (p <= begin) return 0;
    const char *q = p - 1;
    while (q > begin && ((unsigned char)*q & 0xC0) == 0x80 && p - q < 4) q--;
    size_t len = jj_space_at(q, p);
    return len == (size_t)(p - q) ? len : 0;
}

/* ---- truth, equality, order ---- */

int jj_truthy(jj_val v) {
    switch (v.t) {
    case JT_UNDEF: case JT_NONE: return 0;
    case JT_BOOL: return v.u.b;
    case JT_INT: return v.u.i != 0;
    case JT_FLOAT: return v.u.f != 0.0;
    case JT_STR: return v.u.s->len != 0;
    case JT_LIST: return v.u.l->n != 0 || v.u.l->tuple == JL_GEN;
    case JT_DICT: return v.u.d->n != 0;
    default: return 1;
    }
}

static int is_num(jj_val v) { return v.t == JT_INT || v.t == JT_FLOAT || v.t == JT_BOOL; }
static double num_f(jj_val v) {
    return v.t == JT_FLOAT ? v.u.f : v.t == JT_INT ? (double)v.u.i : (double)v.u.b;
}
static int64_t num_i(jj_val v) { return v.t == JT_INT ? v.u.i : v.u.b; }

int jj_equal(jj_val a, jj_val b) {
    if (is_num(a) && is_num(b)) {
        if (a.t != JT_FLOAT && b.t != JT_FLOAT) return num_i(a) == num_i(b);
        return num_f(a) == num_f(b);
    }
    if (a.t != b.t) return 0;
    switch (a.t) {
    case JT_UNDEF: case JT_NONE: return 1;
    case JT_STR: return a.u.s->len == b.u.s->len && !memcmp(a.u.s->p, b.u.s->p, a.u.s->len);
    case JT_LIST:
        if (a.u.l->tuple == JL_GEN || b.u.l->tuple == JL_GEN) return a.u.l == b.u.l;
        if (a.u.l->n != b.u.l->n || a.u.l->tuple != b.u.l->tuple) return 0;
        for (size_t i = 0; i < a.u.l->n; i++)
            if (!jj_equal(a.u.l->v[i], b.u.l->v[i])) return 0;
        return 1;
    case JT_DICT:
        if (a.u.d->n != b.u.d->n) return 0;
        for (size_t i = 0; i < a.u.d->n; i++) {
            jj_val *o = jj_dict_getv(b.u.d, a.u.d->k[i]);
            if (!o || !jj_equal(a.u.d->v[i], *o)) return 0;
        }
        return 1;
    case JT_NS: return a.u.d == b.u.d;
    case JT_MACRO: return a.u.m == b.u.m;
    case JT_FUNC: return a.u.fn == b.u.fn;
    default: return 0;
    }
}

const char *jj_type_name(jj_val v) {
    static const char *names[] = {"Undefined", "NoneType", "bool", "int", "float", "str", "list",
                                  "dict", "Macro", "Namespace", "function", "LoopContext",
                                  "method"};
    if (v.t == JT_LIST && v.u.l->tuple) return v.u.l->tuple == JL_GEN ? "generator" : "tuple";
    return names[v.t];
}

void jj_check_undefined(jj_ctx *c, jj_val v) {
    if (v.t == JT_UNDEF) jj_fail(c, "%s", v.u.s ? v.u.s->p : "undefined value");
}

int jj_compare(jj_ctx *c, jj_val a, jj_val b, const char *op) {
    jj_check_undefined(c, a);
    jj_check_undefined(c, b);
    if (is_num(a) && is_num(b)) {
        if (a.t != JT_FLOAT && b.t != JT_FLOAT) return (num_i(a) > num_i(b)) - (num_i(a) < num_i(b));
        double x = num_f(a), y = num_f(b);
        return (x > y) - (x < y);
    }
    if (a.t == JT_STR && b.t == JT_STR) {
        size_t n = a.u.s->len < b.u.s->len ? a.u.s->len : b.u.s->len;
        int r = memcmp(a.u.s->p, b.u.s->p, n);
        if (r) return r;
        return (a.u.s->len > b.u.s->len) - (a.u.s->len < b.u.s->len);
    }
    if (a.t == JT_LIST && b.t == JT_LIST && a.u.l->tuple != JL_GEN && b.u.l->tuple != JL_GEN) {
        for (size_t i = 0; i < a.u.l->n && i < b.u.l->n; i++) {
            if (jj_equal(a.u.l->v[i], b.u.l->v[i])) continue;
            return jj_compare(c, a.u.l->v[i], b.u.l->v[i], op);
        }
        return (a.u.l->n > b.u.l->n) - (a.u.l->n < b.u.l->n);
    }
    jj_fail(c, "line %d: '%s' not supported between instances of '%s' and '%s'", c->line, op,
            jj_type_name(a), jj_type_name(b));
}

/* ---- text forms ---- */

/* Python's repr of a float: the shortest text that reads back to the same double. */
static void write_float(jj_ctx *c, jj_buf *b, double f) {
    if (isnan(f)) { jj_buf_puts(c, b, "nan"); return; }
    if (isinf(f)) { jj_buf_puts(c, b, f < 0 ? "-inf" : "inf"); return; }
    char tmp[64];
    int prec;
    for (prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec - 1, f);
        if (strtod(tmp, NULL) == f) break;
    }
    /* tmp = [-]d.ddde[+-]XX: digits and exponent */
    char digits[32];
    int nd = 0, neg = tmp[0] == '-';
    const char *q = tmp + neg;
    for (; *q && *q != 'e'; q++)
        if (*q != '.') digits[nd++] = *q;
    int e = atoi(q + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    char out[80];
    int o = 0;
    if (neg) out[o++] = '-';
    if (e >= -4 && e < 16) {
        if (e < 0) {
            out[o++] = '0';
            out[o++] = '.';
            for (int i = 0; i < -e - 1; i++) out[o++] = '0';
            for (int i = 0; i < nd; i++) out[o++] = digits[i];
        } else {
            for (int i = 0; i <= e; i++) out[o++] = i < nd ? digits[i] : '0';
            out[o++] = '.';
            if (nd > e + 1)
                for (int i = e + 1; i < nd; i++) out[o++] = digits[i];
            else
                out[o++] = '0';
        }
        out[o] = '\0';
    } else {
        out[o++] = digits[0];
        if (nd > 1) {
            out[o++] = '.';
            for (int i = 1; i < nd; i++) out[o++] = digits[i];
        }
        snprintf(out + o, sizeof out - (size_t)o, "e%c%02d", e < 0 ? '-' : '+', e < 0 ? -e : e);
    }
    jj_buf_puts(c, b, out);
}

static void write_repr_str(jj_ctx *c, jj_buf *b, const jj_str *s) {
    int has_sq = memchr(s->p, '\'', s->len) != NULL, has_dq = memchr(s->p, '"', s->len) != NULL;
    char q = has_sq && !has_dq ? '"' : '\'';
    jj_buf_put(c, b, &q, 1);
    const char *p = s->p, *end = s->p + s->len;
    while (p < end) {
        size_t len;
        unsigned u = decode_at(p, end, &len);
        char tmp[12];
        if (u == (unsigned char)q || u == '\\') {
            tmp[0] = '\\';
            tmp[1] = (char)u;
            jj_buf_put(c, b, tmp, 2);
        } else if (u == '\n') jj_buf_put(c, b, "\\n", 2);
        else if (u == '\r') jj_buf_put(c, b, "\\r", 2);
        else if (u == '\t') jj_buf_put(c, b, "\\t", 2);
        else if (u < 0x20 || (u >= 0x7f && u <= 0xa0) || u == 0xad) {
            snprintf(tmp, sizeof tmp, "\\x%02x", u);
            jj_buf_puts(c, b, tmp);
        } else jj_buf_put(c, b, p, len);
        p += len;
    }
    jj_buf_put(c, b, &q, 1);
}

void jj_write_repr(jj_ctx *c, jj_buf *b, jj_val v) {
    if (++c->depth > 200) jj_fail(c, "line %d: value nested too deeply", c->line);
    if (v.t == JT_STR) write_repr_str(c, b, v.u.s);
    else if (v.t == JT_LIST && v.u.l->tuple == JL_GEN) jj_buf_puts(c, b, "<generator object>");
    else if (v.t == JT_LIST) {
        jj_buf_puts(c, b, v.u.l->tuple ? "(" : "[");
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i) jj_buf_puts(c, b, ", ");
            jj_write_repr(c, b, v.u.l->v[i]);
        }
        if (v.u.l->tuple && v.u.l->n == 1) jj_buf_puts(c, b, ",");
        jj_buf_puts(c, b, v.u.l->tuple ? ")" : "]");
    } else if (v.t == JT_DICT) {
        jj_buf_puts(c, b, "{");
        for (size_t i = 0; i < v.u.d->n; i++) {
            if (i) jj_buf_puts(c, b, ", ");
            jj_write_repr(c, b, v.u.d->k[i]);
            jj_buf_puts(c, b, ": ");
            jj_write_repr(c, b, v.u.d->v[i]);
        }
        jj_buf_puts(c, b, "}");
    } else jj_write_str(c, b, v);
    c->depth--;
}

void jj_write_str(jj_ctx *c, jj_buf *b, jj_val v) {
    char tmp[32];
    switch (v.t) {
    case JT_UNDEF: return;
    case JT_NONE: jj_buf_puts(c, b, "None"); return;
    case JT_BOOL: jj_buf_puts(c, b, v.u.b ? "True" : "False"); return;
    case JT_INT:
        snprintf(tmp, sizeof tmp, "%lld", (long long)v.u.i);
        jj_buf_puts(c, b, tmp);
        return;
    case JT_FLOAT: write_float(c, b, v.u.f); return;
    case JT_STR: jj_buf_put(c, b, v.u.s->p, v.u.s->len); return;
    case JT_LIST: case JT_DICT: jj_write_repr(c, b, v); return;
    case JT_NS:
        jj_buf_puts(c, b, "<Namespace ");
        jj_write_repr(c, b, jj_dictv(v.u.d));
        jj_buf_puts(c, b, ">");
        return;
    case JT_MACRO: jj_buf_puts(c, b, "<Macro>"); return;
    case JT_LOOP: jj_buf_puts(c, b, "<LoopContext>"); return;
    default: jj_buf_puts(c, b, "<function>"); return;
    }
}

jj_val jj_to_str(jj_ctx *c, jj_val v) {
    if (v.t == JT_STR) return v;
    jj_buf b = {0};
    jj_write_str(c, &b, v);
    return jj_buf_val(c, &b);
}

static void write_json_str(jj_ctx *c, jj_buf *b, const char *p, size_t n) {
    jj_buf_put(c, b, "\"", 1);
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)p[i];
        const char *esc = NULL;
        char tmp[8];
        switch (ch) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        case '\b': esc = "\\b"; break;
        case '\f': esc = "\\f"; break;
        default:
            if (ch < 0x20) {
                snprintf(tmp, sizeof tmp, "\\u%04x", ch);
                esc = tmp;
            }
        }
        if (!esc) continue;
        jj_buf_put(c, b, p + run, i - run);
        jj_buf_puts(c, b, esc);
        run = i + 1;
    }
    jj_buf_put(c, b, p + run, n - run);
    jj_buf_put(c, b, "\"", 1);
}

static void json_newline(jj_ctx *c, jj_buf *b, int indent, int level) {
    jj_buf_put(c, b, "\n", 1);
    for (int i = 0; i < indent * level; i++) jj_buf_put(c, b, " ", 1);
}

static void write_json_key(jj_ctx *c, jj_buf *b, jj_val k) {
    if (k.t == JT_STR) { write_json_str(c, b, k.u.s->p, k.u.s->len); return; }
    jj_buf_put(c, b, "\"", 1);
    if (k.t == JT_BOOL) jj_buf_puts(c, b, k.u.b ? "true" : "false");
    else if (k.t == JT_NONE) jj_buf_puts(c, b, "null");
    else if (k.t == JT_INT || k.t == JT_FLOAT) jj_write_str(c, b, k);
    else jj_fail(c, "line %d: keys must be str, int, float, bool or None, not %s", c->line,
                 jj_type_name(k));
    jj_buf_put(c, b, "\"", 1);
}

void jj_write_json(jj_ctx *c, jj_buf *b, jj_val v, int indent, int sort, int level) {
    if (level > 200) jj_fail(c, "line %d: value nested too deeply for tojson", c->line);
    switch (v.t) {
    case JT_NONE: jj_buf_puts(c, b, "null"); return;
    case JT_BOOL: jj_buf_puts(c, b, v.u.b ? "true" : "false"); return;
    case JT_INT: jj_write_str(c, b, v); return;
    case JT_FLOAT:
        if (isnan(v.u.f)) jj_buf_puts(c, b, "NaN");
        else if (isinf(v.u.f)) jj_buf_puts(c, b, v.u.f < 0 ? "-Infinity" : "Infinity");
        else write_float(c, b, v.u.f);
        return;
    case JT_STR: write_json_str(c, b, v.u.s->p, v.u.s->len); return;
    case JT_LIST:
        if (v.u.l->tuple == JL_GEN) break;
        if (!v.u.l->n) { jj_buf_puts(c, b, "[]"); return; }
        jj_buf_puts(c, b, "[");
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i) jj_buf_puts(c, b, indent >= 0 ? "," : ", ");
            if (indent >= 0) json_newline(c, b, indent, level + 1);
            jj_write_json(c, b, v.u.l->v[i], indent, sort, level + 1);
        }
        if (indent >= 0) json_newline(c, b, indent, level);
        jj_buf_puts(c, b, "]");
        return;
    case JT_DICT: {
        const jj_dict *d = v.u.d;
        if (!d->n) { jj_buf_puts(c, b, "{}"); return; }
        size_t *ord = jj_alloc(c, d->n * sizeof *ord);
        for (size_t i = 0; i < d->n; i++) ord[i] = i;
        if (sort) /* insertion sort by key: small dicts */
            for (size_t i = 1; i < d->n; i++)
                for (size_t j = i; j > 0 && jj_compare(c, d->k[ord[j - 1]], d->k[ord[j]], "<") > 0; j--) {
                    size_t t = ord[j];
                    ord[j] = ord[j - 1];
                    ord[j - 1] = t;
                }
        jj_buf_puts(c, b, "{");
        for (size_t i = 0; i < d->n; i++) {
            if (i) jj_buf_puts(c, b, indent >= 0 ? "," : ", ");
            if (indent >= 0) json_newline(c, b, indent, level + 1);
            write_json_key(c, b, d->k[ord[i]]);
            jj_buf_puts(c, b, ": ");
            jj_write_json(c, b, d->v[ord[i]], indent, sort, level + 1);
        }
        if (indent >= 0) json_newline(c, b, indent, level);
        jj_buf_puts(c, b, "}");
        return;
    }
    default: break;
    }
    jj_fail(c, "line %d: Object of type %s is not JSON serializable", c->line, jj_type_name(v));
}

/* ---- JSON input ---- */

typedef struct { jj_ctx *c; const char *p, *b, *e; int depth; } jp;

_Noreturn static void jp_fail(jp *j, const char *what) {
    jj_fail(j->c, "context JSON: %s at byte %zu", what, (size_t)(j->p - j->b));
}

static void jp_ws(jp *j) {
    while (j->p < j->e && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r')) j->p++;
}

void jj_put_utf8(jj_ctx *c, jj_buf *b, unsigned u) {
    char t[4];
    size_t n;
    if (u < 0x80) { t[0] = (char)u; n = 1; }
    else if (u < 0x800) { t[0] = (char)(0xC0 | (u >> 6)); t[1] = (char)(0x80 | (u & 0x3F)); n = 2; }
    else if (u < 0x10000) {
        t[0] = (char)(0xE0 | (u >> 12)); t[1] = (char)(0x80 | ((u >> 6) & 0x3F));
        t[2] = (char)(0x80 | (u & 0x3F)); n = 3;
    } else {
        t[0] = (char)(0xF0 | (u >> 18)); t[1] = (char)(0x80 | ((u >> 12) & 0x3F));
        t[2] = (char)(0x80 | ((u >> 6) & 0x3F)); t[3] = (char)(0x80 | (u & 0x3F)); n = 4;
    }
    jj_buf_put(c, b, t, n);
}

static unsigned jp_hex4(jp *j) {
    if (j->e - j->p < 4) jp_fail(j, "short \\u escape");
    unsigned u = 0;
    for (int i = 0; i < 4; i++) {
        char h = *j->p++;
        u <<= 4;
        if (h >= '0' && h <= '9') u |= (unsigned)(h - '0');
        else if (h >= 'a' && h <= 'f') u |= (unsigned)(h - 'a' + 10);
        else if (h >= 'A' && h <= 'F') u |= (unsigned)(h - 'A' + 10);
        else jp_fail(j, "bad \\u escape");
    }
    return u;
}

static jj_val jp_string(jp *j) {
    jj_buf b = {0};
    j->p++;
    for (;;) {
        if (j->p >= j->e) jp_fail(j, "unterminated string");
        char ch = *j->p++;
        if (ch == '"') break;
        if ((unsigned char)ch < 0x20) jp_fail(j, "control character in string");
        if (ch != '\\') { jj_buf_put(j->c, &b, &ch, 1); continue; }
        if (j->p >= j->e) jp_fail(j, "unterminated string");
        ch = *j->p++;
        const char *map = "\"\"\\\\//b\bf\fn\nr\rt\t";
        const char *m = strchr(map, ch);
        if (ch && m && ((m - map) % 2) == 0) { jj_buf_put(j->c, &b, m + 1, 1); continue; }
        if (ch != 'u') jp_fail(j, "bad escape");
        unsigned u = jp_hex4(j);
        if (u >= 0xD800 && u < 0xDC00 && j->e - j->p >= 6 && j->p[0] == '\\' && j->p[1] == 'u') {
            j->p += 2;
            unsigned lo = jp_hex4(j);
            if (lo >= 0xDC00 && lo < 0xE000) u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
            else { jj_put_utf8(j->c, &b, u); u = lo; }
        }
        jj_put_utf8(j->c, &b, u);
    }
    return jj_buf_val(j->c, &b);
}

static jj_val jp_value(jp *j) {
    jp_ws(j);
    if (j->p >= j->e) jp_fail(j, "unexpected end");
    if (++j->depth > 200) jp_fail(j, "nested too deeply");
    jj_val v;
    char ch = *j->p;
    if (ch == '"') v = jp_string(j);
    else if (ch == '[') {
        jj_list *l = jj_newlist(j->c, 0);
        j->p++;
        jp_ws(j);
        if (j->p < j->e && *j->p == ']') j->p++;
        else for (;;) {
            jj_list_push(j->c, l, jp_value(j));
            jp_ws(j);
            if (j->p < j->e && *j->p == ',') { j->p++; continue; }
            if (j->p < j->e && *j->p == ']') { j->p++; break; }
            jp_fail(j, "expected ',' or ']'");
        }
        v = jj_listv(l);
    } else if (ch == '{') {
        jj_dict *d = jj_newdict(j->c, 0);
        j->p++;
        jp_ws(j);
        if (j->p < j->e && *j->p == '}') j->p++;
        else for (;;) {
            jp_ws(j);
            if (j->p >= j->e || *j->p != '"') jp_fail(j, "expected a string key");
            jj_val k = jp_string(j);
            jp_ws(j);
            if (j->p >= j->e || *j->p != ':') jp_fail(j, "expected ':'");
            j->p++;
            jj_dict_set(j->c, d, k, jp_value(j));
            jp_ws(j);
            if (j->p < j->e && *j->p == ',') { j->p++; continue; }
            if (j->p < j->e && *j->p == '}') { j->p++; break; }
            jp_fail(j, "expected ',' or '}'");
        }
        v = jj_dictv(d);
    } else if (j->e - j->p >= 4 && !memcmp(j->p, "true", 4)) { j->p += 4; v = jj_bool(1); }
    else if (j->e - j->p >= 5 && !memcmp(j->p, "false", 5)) { j->p += 5; v = jj_bool(0); }
    else if (j->e - j->p >= 4 && !memcmp(j->p, "null", 4)) { j->p += 4; v = jj_none(); }
    else if (ch == '-' || (ch >= '0' && ch <= '9')) {
        const char *s = j->p;
        int isf = 0;
        if (*j->p == '-') j->p++;
        while (j->p < j->e && strchr("0123456789.eE+-", *j->p)) {
            if (*j->p == '.' || *j->p == 'e' || *j->p == 'E') isf = 1;
            j->p++;
        }
        char tmp[64];
        size_t n = (size_t)(j->p - s);
        if (n >= sizeof tmp) jp_fail(j, "number too long");
        memcpy(tmp, s, n);
        tmp[n] = '\0';
        char *endp;
        if (!isf) {
            long long ll = strtoll(tmp, &endp, 10);
            if (*endp || endp == tmp) jp_fail(j, "bad number");
            v = jj_int(ll);
        } else {
            double f = strtod(tmp, &endp);
            if (*endp || endp == tmp) jp_fail(j, "bad number");
            v = jj_float(f);
        }
    } else jp_fail(j, "unexpected character");
    j->depth--;
    return v;
}

jj_val jj_parse_json(jj_ctx *c, const char *p, size_t n) {
    jp j = {c, p, p, p + n, 0};
    jj_val v = jp_value(&j);
    jp_ws(&j);
    if (j.p != j.e) jp_fail(&j, "trailing characters");
    return v;
}
