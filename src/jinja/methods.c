/* jinja/methods — Python's str, dict and list methods as templates call them (s.strip(),
 * d.items(), d.get(k, x), ...), loop.cycle, and the globals: range, namespace, dict,
 * raise_exception and strftime_now. Methods that would change a value (list.append, dict.update)
 * do not exist here, as in transformers' immutable sandbox. */
#include "jinja/jj.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *const str_methods[] = {
    "strip", "lstrip", "rstrip", "split", "rsplit", "splitlines", "startswith", "endswith",
    "lower", "upper", "title", "capitalize", "swapcase", "replace", "find", "rfind", "index",
    "count", "join", "isdigit", "isalpha", "isalnum", "isspace", "isupper", "islower",
    "removeprefix", "removesuffix", "format", NULL,
};
static const char *const dict_methods[] = {"items", "keys", "values", "get", "copy", NULL};
static const char *const list_methods[] = {"count", "index", "copy", NULL};

static int in_list(const char *const *l, const char *name) {
    for (int i = 0; l[i]; i++)
        if (!strcmp(l[i], name)) return 1;
    return 0;
}

int jj_has_method(jj_val self, const char *name) {
    switch (self.t) {
    case JT_STR: return in_list(str_methods, name);
    case JT_DICT: return in_list(dict_methods, name);
    case JT_LIST: return in_list(list_methods, name);
    case JT_LOOP: return !strcmp(name, "cycle");
    default: return 0;
    }
}

static const jj_str *want_str(jj_ctx *c, const jj_args *a, int i, const char *what, int optional) {
    const jj_val *v = jj_arg(a, i, NULL);
    if (!v || (optional && v->t == JT_NONE)) {
        if (optional) return NULL;
        jj_fail(c, "line %d: %s() needs an argument", c->line, what);
    }
    if (v->t != JT_STR)
        jj_fail(c, "line %d: %s() argument must be str, not %s", c->line, what, jj_type_name(*v));
    return v->u.s;
}

static int64_t want_int(jj_ctx *c, const jj_args *a, int i, int64_t dflt) {
    const jj_val *v = jj_arg(a, i, NULL);
    if (!v) return dflt;
    if (v->t == JT_INT) return v->u.i;
    if (v->t == JT_BOOL) return v->u.b;
    jj_fail(c, "line %d: an integer argument is required, not %s", c->line, jj_type_name(*v));
}

static jj_val strip_m(jj_ctx *c, const jj_str *s, const jj_str *chars, int left, int right) {
    const char *p = s->p, *e = p + s->len;
    size_t k;
    if (chars) {
        /* chars are code points: compare whole UTF-8 sequences */
        for (int moved = 1; left && moved && p < e;) {
            moved = 0;
            size_t n = 1;
            while (p + n < e && ((unsigned char)p[n] & 0xC0) == 0x80) n++;
            for (size_t i = 0; i + n <= chars->len; i++)
                if (!memcmp(chars->p + i, p, n) && (i == 0 || ((unsigned char)chars->p[i] & 0xC0) != 0x80)) {
                    p += n;
                    moved = 1;
                    break;
                }
        }
        for (int moved = 1; right && moved && e > p;) {
            moved = 0;
            const char *q = e - 1;
            while (q > p && ((unsigned char)*q & 0xC0) == 0x80) q--;
            size_t n = (size_t)(e - q);
            for (size_t i = 0; i + n <= chars->len; i++)
                if (!memcmp(chars->p + i, q, n) && (((unsigned char)chars->p[i] & 0xC0) != 0x80)) {
                    e = q;
                    moved = 1;
                    break;
                }
        }
    } else {
        while (left && (k = jj_space_at(p, e))) p += k;
        while (right && (k = jj_space_before(p, e))) e -= k;
    }
    return jj_strv(c, p, (size_t)(e - p));
}

static jj_val split_m(jj_ctx *c, const jj_str *s, const jj_str *sep, int64_t maxsplit, int rev) {
    jj_list *l = jj_newlist(c, 0);
    const char *p = s->p, *e = p + s->len;
    if (sep && sep->len == 0) jj_fail(c, "line %d: empty separator", c->line);
    if (!sep) {
        /* runs of whitespace; no empty strings */
        if (!rev) {
            size_t k;
            while (p < e) {
                while ((k = jj_space_at(p, e))) p += k;
                if (p >= e) break;
                const char *w = p;
                if (maxsplit >= 0 && (int64_t)l->n == maxsplit) {
                    jj_list_push(c, l, jj_strv(c, w, (size_t)(e - w)));
                    break;
                }
                while (p < e && !jj_space_at(p, e)) p++;
                jj_list_push(c, l, jj_strv(c, w, (size_t)(p - w)));
            }
            return jj_listv(l);
        }
        if (maxsplit >= 0) jj_fail(c, "line %d: rsplit() with maxsplit and no separator is not supported", c->line);
        return split_m(c, s, NULL, -1, 0);
    }
    if (rev && maxsplit >= 0) {
        /* from the right: collect then reverse */
        jj_list *r = jj_newlist(c, 0);
        const char *end = e;
        while ((int64_t)r->n < maxsplit) {
            const char *hit = NULL;
            for (const char *q = end - sep->len; q >= p && end - p >= (ptrdiff_t)sep->len; q--)
                if (!memcmp(q, sep->p, sep->len)) { hit = q; break; }
            if (!hit) break;
            jj_list_push(c, r, jj_strv(c, hit + sep->len, (size_t)(end - hit - (ptrdiff_t)sep->len)));
            end = hit;
        }
        jj_list_push(c, l, jj_strv(c, p, (size_t)(end - p)));
        for (size_t i = r->n; i-- > 0;) jj_list_push(c, l, r->v[i]);
        return jj_listv(l);
    }
    for (;;) {
        const char *hit = (maxsplit < 0 || (int64_t)l->n < maxsplit)
                              ? memmem(p, (size_t)(e - p), sep->p, sep->len) : NULL;
        if (!hit) {
            jj_list_push(c, l, jj_strv(c, p, (size_t)(e - p)));
            break;
        }
        jj_list_push(c, l, jj_strv(c, p, (size_t)(hit - p)));
        p = hit + sep->len;
    }
    return jj_listv(l);
}

static int affix(jj_ctx *c, const jj_str *s, const jj_args *a, int end) {
    const jj_val *v = jj_arg(a, 0, NULL);
    if (!v) jj_fail(c, "line %d: %s() needs an argument", c->line, end ? "endswith" : "startswith");
    jj_list one = {(jj_val *)v, 1, 1, 1};
    const jj_list *cands = v->t == JT_LIST && v->u.l->tuple ? v->u.l : v->t == JT_STR ? &one : NULL;
    if (!cands) jj_fail(c, "line %d: %s first arg must be str or a tuple of str, not %s", c->line,
                        end ? "endswith" : "startswith", jj_type_name(*v));
    for (size_t i = 0; i < cands->n; i++) {
        jj_val x = cands->v[i];
        if (x.t != JT_STR) jj_fail(c, "line %d: tuple for %s must only contain str", c->line, end ? "endswith" : "startswith");
        if (x.u.s->len > s->len) continue;
        if (!memcmp(end ? s->p + s->len - x.u.s->len : s->p, x.u.s->p, x.u.s->len)) return 1;
    }
    return 0;
}

/* One replacement field's value written with its spec: [[fill]align][width][.precision][type]. */
static void format_field(jj_ctx *c, jj_buf *b, jj_val v, const char *spec, size_t n) {
    char fill = ' ', align = 0, type = 0;
    size_t i = 0;
    long width = 0, prec = -1;
    if (n >= 2 && strchr("<>^", spec[1])) { fill = spec[0]; align = spec[1]; i = 2; }
    else if (n >= 1 && strchr("<>^", spec[0])) { align = spec[0]; i = 1; }
    if (!align && i < n && spec[i] == '0') { fill = '0'; align = '='; i++; }
    while (i < n && spec[i] >= '0' && spec[i] <= '9' && width < 10000) width = width * 10 + (spec[i++] - '0');
    if (i < n && spec[i] == '.') {
        prec = 0;
        for (i++; i < n && spec[i] >= '0' && spec[i] <= '9' && prec < 100; i++) prec = prec * 10 + (spec[i] - '0');
    }
    if (i < n) type = spec[i++];
    if (i != n || (type && !strchr("sdfeg", type)))
        jj_fail(c, "line %d: format spec '%.*s' is not supported", c->line, (int)n, spec);
    jj_buf t = {0};
    jj_buf_put(c, &t, "", 0);
    char tmp[400];
    int num = v.t == JT_INT || v.t == JT_FLOAT || v.t == JT_BOOL;
    if (type == 'd' || ((type == 'f' || type == 'e' || type == 'g') && num)) {
        if (!num) jj_fail(c, "line %d: unknown format code '%c' for a %s", c->line, type, jj_type_name(v));
        double f = v.t == JT_FLOAT ? v.u.f : v.t == JT_INT ? (double)v.u.i : v.u.b;
        if (type == 'd') {
            if (v.t == JT_FLOAT) jj_fail(c, "line %d: unknown format code 'd' for a float", c->line);
            snprintf(tmp, sizeof tmp, "%lld", (long long)(v.t == JT_INT ? v.u.i : v.u.b));
        } else {
            char fmt[8] = {'%', '.', '*', type, 0};
            snprintf(tmp, sizeof tmp, fmt, prec < 0 ? 6 : (int)prec, f);
        }
        jj_buf_puts(c, &t, tmp);
        if (!align) align = '>';
    } else if (type && type != 's') {
        jj_fail(c, "line %d: unknown format code '%c' for a %s", c->line, type, jj_type_name(v));
    } else {
        jj_write_str(c, &t, v);
        if (prec >= 0) t.len = jj_utf8_offset(t.p, t.len, (size_t)prec);
        if (!align) align = num ? '>' : '<';
    }
    long len = (long)jj_utf8_count(t.p, t.len), pad = width > len ? width - len : 0;
    if (align == '=') { /* zero padding goes after the sign */
        if (t.len && (t.p[0] == '-' || t.p[0] == '+')) { jj_buf_put(c, b, t.p, 1); t.p++; t.len--; }
        align = '>';
    }
    long left = align == '>' ? pad : align == '^' ? pad / 2 : 0;
    for (long k = 0; k < left; k++) jj_buf_put(c, b, &fill, 1);
    jj_buf_put(c, b, t.p, t.len);
    for (long k = left; k < pad; k++) jj_buf_put(c, b, &fill, 1);
}

/* str.format: {} {0} {name}, !s / !r, and format_field's specs; {{ and }} are braces. */
static jj_val str_format(jj_ctx *c, const jj_str *s, const jj_args *a) {
    jj_buf b = {0};
    jj_buf_put(c, &b, "", 0);
    int autonum = 0;
    for (const char *p = s->p, *e = p + s->len; p < e; p++) {
        if (*p == '}') {
            if (p + 1 < e && p[1] == '}') p++;
            else jj_fail(c, "line %d: Single '}' encountered in format string", c->line);
            jj_buf_put(c, &b, "}", 1);
            continue;
        }
        if (*p != '{') { jj_buf_put(c, &b, p, 1); continue; }
        if (p + 1 < e && p[1] == '{') { jj_buf_put(c, &b, "{", 1); p++; continue; }
        const char *q = memchr(p, '}', (size_t)(e - p));
        if (!q) jj_fail(c, "line %d: Single '{' encountered in format string", c->line);
        const char *f = p + 1, *conv = NULL, *spec = NULL;
        for (const char *r = f; r < q; r++) {
            if (*r == '!' && !conv && !spec) conv = r;
            else if (*r == ':' && !spec) { spec = r; break; }
        }
        const char *fend = conv ? conv : spec ? spec : q;
        jj_val v;
        if ((fend == f && autonum < 0) || (fend != f && *f >= '0' && *f <= '9' && autonum > 0))
            jj_fail(c, "line %d: cannot switch from manual field specification to automatic field numbering", c->line);
        if (fend == f) {
            if (autonum >= a->npos) jj_fail(c, "line %d: Replacement index %d out of range for positional args tuple", c->line, autonum);
            v = a->pos[autonum++];
        } else if (*f >= '0' && *f <= '9') {
            long idx = strtol(f, NULL, 10);
            autonum = -1;
            if (idx >= a->npos) jj_fail(c, "line %d: Replacement index %ld out of range for positional args tuple", c->line, idx);
            v = a->pos[idx];
        } else {
            const jj_val *kv = NULL;
            for (int k = 0; k < a->nkw; k++)
                if (strlen(a->kwn[k]) == (size_t)(fend - f) && !memcmp(a->kwn[k], f, (size_t)(fend - f))) kv = &a->kwv[k];
            if (!kv) jj_fail(c, "line %d: format: no argument '%.*s'", c->line, (int)(fend - f), f);
            v = *kv;
        }
        if (conv && conv + 1 < q && conv[1] == 'r') {
            jj_buf r = {0};
            jj_buf_put(c, &r, "", 0);
            jj_write_repr(c, &r, v);
            v = jj_buf_val(c, &r);
        }
        if (spec) format_field(c, &b, v, spec + 1, (size_t)(q - spec - 1));
        else jj_write_str(c, &b, v);
        p = q;
    }
    return jj_buf_val(c, &b);
}

static jj_val str_method(jj_ctx *c, const jj_str *s, const char *m, const jj_args *a) {
    if (!strcmp(m, "format")) return str_format(c, s, a);
    if (!strcmp(m, "strip")) return strip_m(c, s, want_str(c, a, 0, m, 1), 1, 1);
    if (!strcmp(m, "lstrip")) return strip_m(c, s, want_str(c, a, 0, m, 1), 1, 0);
    if (!strcmp(m, "rstrip")) return strip_m(c, s, want_str(c, a, 0, m, 1), 0, 1);
    if (!strcmp(m, "split") || !strcmp(m, "rsplit")) {
        const jj_val *mx = jj_arg(a, 1, "maxsplit");
        const jj_val *sp = jj_arg(a, 0, "sep");
        const jj_str *sep = NULL;
        if (sp && sp->t != JT_NONE) {
            if (sp->t != JT_STR) jj_fail(c, "line %d: must be str or None, not %s", c->line, jj_type_name(*sp));
            sep = sp->u.s;
        }
        int64_t maxsplit = mx ? (mx->t == JT_INT ? mx->u.i : -1) : -1;
        return split_m(c, s, sep, maxsplit, m[0] == 'r');
    }
    if (!strcmp(m, "splitlines")) {
        jj_list *l = jj_newlist(c, 0);
        const char *p = s->p, *e = p + s->len;
        while (p < e) {
            const char *q = p;
            while (q < e && *q != '\n' && *q != '\r') q++;
            jj_list_push(c, l, jj_strv(c, p, (size_t)(q - p)));
            if (q < e && *q == '\r' && q + 1 < e && q[1] == '\n') q++;
            p = q + 1;
        }
        return jj_listv(l);
    }
    if (!strcmp(m, "startswith")) return jj_bool(affix(c, s, a, 0));
    if (!strcmp(m, "endswith")) return jj_bool(affix(c, s, a, 1));
    if (!strcmp(m, "lower") || !strcmp(m, "upper") || !strcmp(m, "swapcase") ||
        !strcmp(m, "title") || !strcmp(m, "capitalize")) {
        jj_val r = jj_strv(c, s->p, s->len);
        int prev_cased = 0;
        for (size_t i = 0; i < r.u.s->len; i++) {
            unsigned char ch = (unsigned char)r.u.s->p[i];
            int out = ch;
            if (m[0] == 'l') out = tolower(ch);
            else if (m[0] == 'u') out = toupper(ch);
            else if (m[0] == 's') out = isupper(ch) ? tolower(ch) : toupper(ch);
            else if (m[0] == 't') out = prev_cased ? tolower(ch) : toupper(ch);
            else out = i == 0 ? toupper(ch) : tolower(ch);
            prev_cased = isalpha(ch);
            r.u.s->p[i] = (char)out;
        }
        return r;
    }
    if (!strcmp(m, "replace")) {
        const jj_str *old = want_str(c, a, 0, m, 0), *nw = want_str(c, a, 1, m, 0);
        int64_t count = want_int(c, a, 2, -1);
        jj_buf b = {0};
        jj_buf_put(c, &b, "", 0);
        const char *p = s->p, *e = p + s->len;
        if (!old->len) {
            /* Python inserts `new` around every character */
            int64_t k = 0;
            while (count < 0 || k < count) {
                jj_buf_put(c, &b, nw->p, nw->len);
                k++;
                if (p >= e) break;
                size_t n = 1;
                while (p + n < e && ((unsigned char)p[n] & 0xC0) == 0x80) n++;
                jj_buf_put(c, &b, p, n);
                p += n;
            }
            jj_buf_put(c, &b, p, (size_t)(e - p));
            return jj_buf_val(c, &b);
        }
        for (int64_t k = 0; count < 0 || k < count; k++) {
            const char *hit = memmem(p, (size_t)(e - p), old->p, old->len);
            if (!hit) break;
            jj_buf_put(c, &b, p, (size_t)(hit - p));
            jj_buf_put(c, &b, nw->p, nw->len);
            p = hit + old->len;
        }
        jj_buf_put(c, &b, p, (size_t)(e - p));
        return jj_buf_val(c, &b);
    }
    if (!strcmp(m, "find") || !strcmp(m, "rfind") || !strcmp(m, "index")) {
        const jj_str *sub = want_str(c, a, 0, m, 0);
        const char *hit = NULL;
        if (m[0] == 'r') {
            for (const char *q = s->p + s->len - sub->len; q >= s->p && s->len >= sub->len; q--)
                if (!memcmp(q, sub->p, sub->len)) { hit = q; break; }
        } else hit = sub->len ? memmem(s->p, s->len, sub->p, sub->len) : s->p;
        if (!hit && m[0] == 'i') jj_fail(c, "line %d: substring not found", c->line);
        return jj_int(hit ? (int64_t)jj_utf8_count(s->p, (size_t)(hit - s->p)) : -1);
    }
    if (!strcmp(m, "count")) {
        const jj_str *sub = want_str(c, a, 0, m, 0);
        if (!sub->len) return jj_int((int64_t)jj_utf8_count(s->p, s->len) + 1);
        int64_t n = 0;
        const char *p = s->p, *e = p + s->len, *hit;
        while ((hit = memmem(p, (size_t)(e - p), sub->p, sub->len))) { n++; p = hit + sub->len; }
        return jj_int(n);
    }
    if (!strcmp(m, "join")) {
        const jj_val *v = jj_arg(a, 0, NULL);
        if (!v) jj_fail(c, "line %d: join() needs an argument", c->line);
        jj_list *l = jj_iter(c, *v);
        jj_buf b = {0};
        jj_buf_put(c, &b, "", 0);
        for (size_t i = 0; i < l->n; i++) {
            if (l->v[i].t != JT_STR)
                jj_fail(c, "line %d: sequence item %zu: expected str instance, %s found", c->line, i, jj_type_name(l->v[i]));
            if (i) jj_buf_put(c, &b, s->p, s->len);
            jj_buf_put(c, &b, l->v[i].u.s->p, l->v[i].u.s->len);
        }
        return jj_buf_val(c, &b);
    }
    if (!strcmp(m, "removeprefix") || !strcmp(m, "removesuffix")) {
        const jj_str *x = want_str(c, a, 0, m, 0);
        int suf = m[6] == 's';
        if (x->len <= s->len && !memcmp(suf ? s->p + s->len - x->len : s->p, x->p, x->len))
            return jj_strv(c, suf ? s->p : s->p + x->len, s->len - x->len);
        return jj_strv(c, s->p, s->len);
    }
    /* is*() */
    int all = s->len > 0, any_cased = 0;
    for (size_t i = 0; i < s->len; i++) {
        unsigned char ch = (unsigned char)s->p[i];
        int ok = !strcmp(m, "isdigit") ? isdigit(ch) : !strcmp(m, "isalpha") ? isalpha(ch)
                 : !strcmp(m, "isalnum") ? isalnum(ch) : !strcmp(m, "isspace") ? isspace(ch)
                 : !strcmp(m, "isupper") ? !islower(ch) : !islower(ch) ? !isupper(ch) : 1;
        if (!strcmp(m, "islower")) ok = !isupper(ch);
        any_cased |= isalpha(ch);
        all &= ok != 0;
    }
    if (!strcmp(m, "isupper") || !strcmp(m, "islower")) return jj_bool(all && any_cased);
    return jj_bool(all);
}

jj_val jj_call_method(jj_ctx *c, jj_val self, const char *m, const jj_args *a) {
    if (self.t == JT_STR) return str_method(c, self.u.s, m, a);
    if (self.t == JT_DICT) {
        const jj_dict *d = self.u.d;
        if (!strcmp(m, "get")) {
            const jj_val *k = jj_arg(a, 0, NULL), *dflt = jj_arg(a, 1, NULL);
            if (!k) jj_fail(c, "line %d: get() needs a key", c->line);
            jj_val *v = jj_dict_getv(d, *k);
            return v ? *v : dflt ? *dflt : jj_none();
        }
        if (!strcmp(m, "copy")) {
            jj_dict *r = jj_newdict(c, d->n);
            for (size_t i = 0; i < d->n; i++) jj_dict_set(c, r, d->k[i], d->v[i]);
            return jj_dictv(r);
        }
        jj_list *l = jj_newlist(c, d->n);
        for (size_t i = 0; i < d->n; i++) {
            if (m[0] == 'k') jj_list_push(c, l, d->k[i]);
            else if (m[0] == 'v') jj_list_push(c, l, d->v[i]);
            else {
                jj_list *pair = jj_newlist(c, 2);
                pair->tuple = 1;
                jj_list_push(c, pair, d->k[i]);
                jj_list_push(c, pair, d->v[i]);
                jj_list_push(c, l, jj_listv(pair));
            }
        }
        return jj_listv(l);
    }
    if (self.t == JT_LIST) {
        const jj_list *l = self.u.l;
        if (!strcmp(m, "copy")) {
            jj_list *r = jj_newlist(c, l->n);
            for (size_t i = 0; i < l->n; i++) jj_list_push(c, r, l->v[i]);
            return jj_listv(r);
        }
        const jj_val *x = jj_arg(a, 0, NULL);
        if (!x) jj_fail(c, "line %d: %s() needs an argument", c->line, m);
        int64_t n = 0;
        for (size_t i = 0; i < l->n; i++)
            if (jj_equal(l->v[i], *x)) {
                if (m[0] == 'i') return jj_int((int64_t)i);
                n++;
            }
        if (m[0] == 'i') jj_fail(c, "line %d: value is not in list", c->line);
        return jj_int(n);
    }
    if (self.t == JT_LOOP) {
        if (!a->npos) jj_fail(c, "line %d: no items for cycling given", c->line);
        return a->pos[self.u.loop->index0 % (size_t)a->npos];
    }
    jj_fail(c, "line %d: '%s' object has no method '%s'", c->line, jj_type_name(self), m);
}

/* ---- globals ---- */

int jj_global_find(const char *name) {
    if (!strcmp(name, "range")) return JF_RANGE;
    if (!strcmp(name, "namespace")) return JF_NAMESPACE;
    if (!strcmp(name, "dict")) return JF_DICT;
    if (!strcmp(name, "raise_exception")) return JF_RAISE;
    if (!strcmp(name, "strftime_now")) return JF_STRFTIME;
    return 0;
}

jj_val jj_call_global(jj_ctx *c, int fn, const jj_args *a) {
    switch (fn) {
    case JF_RANGE: {
        int64_t start = 0, stop, step = 1;
        if (a->npos < 1 || a->npos > 3) jj_fail(c, "line %d: range expected 1 to 3 arguments", c->line);
        if (a->npos == 1) stop = want_int(c, a, 0, 0);
        else {
            start = want_int(c, a, 0, 0);
            stop = want_int(c, a, 1, 0);
            step = want_int(c, a, 2, 1);
        }
        if (step == 0) jj_fail(c, "line %d: range() arg 3 must not be zero", c->line);
        double n = step > 0 ? ((double)stop - (double)start) / (double)step : ((double)start - (double)stop) / -(double)step;
        if (n > 100000)
            jj_fail(c, "line %d: Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).", c->line);
        jj_list *l = jj_newlist(c, 0);
        for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) jj_list_push(c, l, jj_int(i));
        return jj_listv(l);
    }
    case JF_NAMESPACE: case JF_DICT: {
        jj_dict *d = jj_newdict(c, 0);
        for (int i = 0; i < a->npos; i++) {
            if (a->pos[i].t != JT_DICT) jj_fail(c, "line %d: %s() takes a mapping or keyword arguments", c->line, fn == JF_DICT ? "dict" : "namespace");
            for (size_t k = 0; k < a->pos[i].u.d->n; k++) jj_dict_set(c, d, a->pos[i].u.d->k[k], a->pos[i].u.d->v[k]);
        }
        for (int i = 0; i < a->nkw; i++) jj_dict_set(c, d, jj_cstr(c, a->kwn[i]), a->kwv[i]);
        jj_val v = {fn == JF_DICT ? JT_DICT : JT_NS, {.d = d}};
        return v;
    }
    case JF_RAISE: {
        const jj_val *m = jj_arg(a, 0, NULL);
        jj_val s = m ? jj_to_str(c, *m) : jj_cstr(c, "");
        c->raised = 1;
        jj_fail(c, "%s", s.u.s->p);
    }
    case JF_STRFTIME: {
        const jj_str *f = want_str(c, a, 0, "strftime_now", 0);
        time_t t = c->now ? (time_t)c->now : time(NULL);
        struct tm tm;
        if (c->now) gmtime_r(&t, &tm);
        else localtime_r(&t, &tm);
        char out[512];
        size_t n = f->len ? strftime(out, sizeof out, f->p, &tm) : 0;
        if (f->len && n == 0) jj_fail(c, "line %d: strftime_now: the format gives no text or too much", c->line);
        return jj_strv(c, out, n);
    }
    }
    jj_fail(c, "line %d: internal error: bad global", c->line);
}
