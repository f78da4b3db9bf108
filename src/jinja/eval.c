/* jinja/eval — running the tree: statements write to the current output buffer; expressions
 * give values with Python's semantics. Scopes follow Jinja2: a for loop, a macro call and a with
 * block open a frame (what is set inside stays inside); if does not. A macro sees the frame it
 * was defined in as it is when called. Every statement and expression counts a step and a level
 * of recursion, both bounded. */
#include "jinja/jj.h"

#include <math.h>
#include <string.h>

enum { MAX_DEPTH = 500 };

static jj_frame *new_frame(jj_ctx *c, jj_frame *parent) {
    jj_frame *f = jj_alloc(c, sizeof *f);
    f->vars = jj_newdict(c, 0);
    f->parent = parent;
    return f;
}

static void tick(jj_ctx *c, int line) {
    c->line = line;
    if (++c->steps > c->max_steps)
        jj_fail(c, "line %d: the template ran longer than its limit (%llu steps)", line,
                (unsigned long long)c->max_steps);
}

static void setvar(jj_ctx *c, const char *name, jj_val v) {
    jj_dict_set(c, c->frame->vars, jj_cstr(c, name), v);
}

static jj_val lookup(jj_ctx *c, const char *name) {
    size_t n = strlen(name);
    for (jj_frame *f = c->frame; f; f = f->parent) {
        jj_val *v = jj_dict_get(f->vars, name, n);
        if (v) return *v;
    }
    int fn = jj_global_find(name);
    if (fn) {
        jj_val v = {JT_FUNC, {.fn = fn}};
        return v;
    }
    return jj_undef_why(c, "'%s' is undefined", name);
}

/* ---- items, attributes, slices ---- */

jj_list *jj_iter(jj_ctx *c, jj_val v) {
    switch (v.t) {
    case JT_UNDEF: return jj_newlist(c, 0);
    case JT_LIST: return v.u.l;
    case JT_DICT: case JT_NS: {
        jj_list *l = jj_newlist(c, v.u.d->n);
        for (size_t i = 0; i < v.u.d->n; i++) jj_list_push(c, l, v.u.d->k[i]);
        return l;
    }
    case JT_STR: {
        const char *p = v.u.s->p, *end = p + v.u.s->len;
        jj_list *l = jj_newlist(c, 0);
        while (p < end) {
            size_t k = 1;
            while (p + k < end && ((unsigned char)p[k] & 0xC0) == 0x80) k++;
            jj_list_push(c, l, jj_strv(c, p, k));
            p += k;
        }
        return l;
    }
    default:
        jj_fail(c, "line %d: '%s' object is not iterable", c->line, jj_type_name(v));
    }
}

static const char *obj_name(jj_val v) {
    switch (v.t) {
    case JT_NONE: return "'None'";
    case JT_DICT: return "'dict object'";
    case JT_LIST: return v.u.l->tuple ? "'tuple object'" : "'list object'";
    case JT_STR: return "'str object'";
    case JT_INT: return "'int object'";
    case JT_FLOAT: return "'float object'";
    case JT_BOOL: return "'bool object'";
    case JT_NS: return "'jinja2.utils.Namespace object'";
    default: return "'object'";
    }
}

static jj_val loop_attr(jj_ctx *c, const jj_loop *L, const char *name) {
    size_t n = L->items->n, i = L->index0;
    if (!strcmp(name, "index")) return jj_int((int64_t)i + 1);
    if (!strcmp(name, "index0")) return jj_int((int64_t)i);
    if (!strcmp(name, "revindex")) return jj_int((int64_t)(n - i));
    if (!strcmp(name, "revindex0")) return jj_int((int64_t)(n - i - 1));
    if (!strcmp(name, "first")) return jj_bool(i == 0);
    if (!strcmp(name, "last")) return jj_bool(i + 1 == n);
    if (!strcmp(name, "length")) return jj_int((int64_t)n);
    if (!strcmp(name, "depth")) return jj_int(L->depth);
    if (!strcmp(name, "depth0")) return jj_int(L->depth - 1);
    if (!strcmp(name, "previtem"))
        return i > 0 ? L->items->v[i - 1] : jj_undef_why(c, "there is no previous item");
    if (!strcmp(name, "nextitem"))
        return i + 1 < n ? L->items->v[i + 1] : jj_undef_why(c, "there is no next item");
    return jj_undef_why(c, "'LoopContext object' has no attribute '%s'", name);
}

jj_val jj_getattr(jj_ctx *c, jj_val obj, const char *name) {
    jj_check_undefined(c, obj);
    if (jj_has_method(obj, name)) {
        jj_method *m = jj_alloc(c, sizeof *m);
        m->self = obj;
        m->name = name;
        jj_val v = {JT_METHOD, {.meth = m}};
        return v;
    }
    if (obj.t == JT_DICT || obj.t == JT_NS) {
        jj_val *v = jj_dict_get(obj.u.d, name, strlen(name));
        if (v) return *v;
    }
    if (obj.t == JT_LOOP) return loop_attr(c, obj.u.loop, name);
    return jj_undef_why(c, "%s has no attribute '%s'", obj_name(obj), name);
}

jj_val jj_getitem(jj_ctx *c, jj_val obj, jj_val key) {
    jj_check_undefined(c, obj);
    if (obj.t == JT_DICT || obj.t == JT_NS) {
        jj_val *v = jj_dict_getv(obj.u.d, key);
        if (v) return *v;
    } else if (obj.t == JT_LIST && obj.u.l->tuple == JL_GEN) {
        return jj_undef_why(c, "'generator' object is not subscriptable");
    } else if ((obj.t == JT_LIST || obj.t == JT_STR) && (key.t == JT_INT || key.t == JT_BOOL)) {
        int64_t i = key.t == JT_INT ? key.u.i : key.u.b;
        size_t n = obj.t == JT_LIST ? obj.u.l->n : jj_utf8_count(obj.u.s->p, obj.u.s->len);
        if (i < 0) i += (int64_t)n;
        if (i >= 0 && (size_t)i < n) {
            if (obj.t == JT_LIST) return obj.u.l->v[i];
            size_t a = jj_utf8_offset(obj.u.s->p, obj.u.s->len, (size_t)i);
            size_t b = jj_utf8_offset(obj.u.s->p, obj.u.s->len, (size_t)i + 1);
            return jj_strv(c, obj.u.s->p + a, b - a);
        }
        return jj_undef_why(c, "%s has no element %lld", obj_name(obj), (long long)key.u.i);
    }
    if (key.t == JT_STR) return jj_getattr(c, obj, key.u.s->p);
    jj_buf b = {0};
    jj_write_repr(c, &b, key);
    return jj_undef_why(c, "%s has no element %s", obj_name(obj), b.p ? b.p : "");
}

static int64_t slice_idx(jj_ctx *c, jj_val v, int64_t dflt) {
    if (v.t == JT_NONE || v.t == JT_UNDEF) return dflt;
    if (v.t == JT_INT) return v.u.i;
    if (v.t == JT_BOOL) return v.u.b;
    jj_fail(c, "line %d: slice indices must be integers or None", c->line);
}

static jj_val do_slice(jj_ctx *c, jj_val obj, jj_val s0, jj_val s1, jj_val s2) {
    jj_check_undefined(c, obj);
    if ((obj.t != JT_LIST && obj.t != JT_STR) || (obj.t == JT_LIST && obj.u.l->tuple == JL_GEN))
        jj_fail(c, "line %d: '%s' object is not subscriptable", c->line, jj_type_name(obj));
    int64_t n = obj.t == JT_LIST ? (int64_t)obj.u.l->n : (int64_t)jj_utf8_count(obj.u.s->p, obj.u.s->len);
    int64_t step = slice_idx(c, s2, 1);
    if (step == 0) jj_fail(c, "line %d: slice step cannot be zero", c->line);
    int64_t lo = step > 0 ? 0 : -1, hi = step > 0 ? n : n - 1;
    int64_t a = slice_idx(c, s0, step > 0 ? 0 : n - 1), b = slice_idx(c, s1, step > 0 ? n : -n - 1);
    if (s0.t == JT_INT || s0.t == JT_BOOL) { if (a < 0) a += n; a = a < lo ? lo : a > hi ? hi : a; }
    if (s1.t == JT_INT || s1.t == JT_BOOL) { if (b < 0) b += n; b = b < lo ? lo : b > hi ? hi : b; }
    if (s1.t != JT_INT && s1.t != JT_BOOL && step < 0) b = -1;
    jj_list *l = NULL;
    jj_buf sb = {0};
    jj_buf_put(c, &sb, "", 0);
    if (obj.t == JT_LIST) {
        l = jj_newlist(c, 0);
        l->tuple = obj.u.l->tuple;
    }
    for (int64_t i = a; step > 0 ? i < b : i > b; i += step) {
        if (obj.t == JT_LIST) jj_list_push(c, l, obj.u.l->v[i]);
        else {
            size_t x = jj_utf8_offset(obj.u.s->p, obj.u.s->len, (size_t)i);
            size_t y = jj_utf8_offset(obj.u.s->p, obj.u.s->len, (size_t)i + 1);
            jj_buf_put(c, &sb, obj.u.s->p + x, y - x);
        }
        if (++c->steps > c->max_steps) jj_fail(c, "line %d: the template ran longer than its limit", c->line);
    }
    return obj.t == JT_LIST ? jj_listv(l) : jj_buf_val(c, &sb);
}

/* ---- operators ---- */

static int isnum(jj_val v) { return v.t == JT_INT || v.t == JT_FLOAT || v.t == JT_BOOL; }
static double fval(jj_val v) { return v.t == JT_FLOAT ? v.u.f : v.t == JT_INT ? (double)v.u.i : v.u.b; }
static int64_t ival(jj_val v) { return v.t == JT_INT ? v.u.i : v.u.b; }

static const char *op_sym(int op) {
    static const char *s[] = {"", "+", "-", "*", "/", "//", "%", "**", "~"};
    return op <= OP_CONCAT ? s[op] : "?";
}

_Noreturn static void bad_operands(jj_ctx *c, int op, jj_val a, jj_val b) {
    if (op == OP_ADD && (a.t == JT_STR || a.t == JT_LIST))
        jj_fail(c, "line %d: can only concatenate %s (not \"%s\") to %s", c->line, jj_type_name(a),
                jj_type_name(b), jj_type_name(a));
    jj_fail(c, "line %d: unsupported operand type(s) for %s: '%s' and '%s'", c->line, op_sym(op),
            jj_type_name(a), jj_type_name(b));
}

static jj_val repeat(jj_ctx *c, jj_val seq, int64_t k) {
    if (k < 0) k = 0;
    if (seq.t == JT_STR) {
        if (seq.u.s->len && (uint64_t)k > (c->max_output ? c->max_output : SIZE_MAX) / seq.u.s->len)
            jj_fail(c, "line %d: the repeated string is longer than the output limit", c->line);
        jj_buf b = {0};
        jj_buf_put(c, &b, "", 0);
        for (int64_t i = 0; i < k; i++) jj_buf_put(c, &b, seq.u.s->p, seq.u.s->len);
        return jj_buf_val(c, &b);
    }
    if (seq.u.l->tuple == JL_GEN)
        jj_fail(c, "line %d: unsupported operand type(s) for *: 'generator' and 'int'", c->line);
    if ((uint64_t)k * seq.u.l->n > 10000000)
        jj_fail(c, "line %d: the repeated list is too long", c->line);
    jj_list *l = jj_newlist(c, (size_t)k * seq.u.l->n);
    l->tuple = seq.u.l->tuple;
    for (int64_t i = 0; i < k; i++)
        for (size_t j = 0; j < seq.u.l->n; j++) jj_list_push(c, l, seq.u.l->v[j]);
    return jj_listv(l);
}

static jj_val binop(jj_ctx *c, int op, jj_val a, jj_val b) {
    if (op == OP_CONCAT) {
        jj_buf s = {0};
        jj_buf_put(c, &s, "", 0);
        jj_write_str(c, &s, a);
        jj_write_str(c, &s, b);
        return jj_buf_val(c, &s);
    }
    jj_check_undefined(c, a);
    jj_check_undefined(c, b);
    if (isnum(a) && isnum(b)) {
        int fl = a.t == JT_FLOAT || b.t == JT_FLOAT;
        int64_t x = ival(a), y = ival(b), r;
        switch (op) {
        case OP_ADD:
            if (fl) return jj_float(fval(a) + fval(b));
            if (__builtin_add_overflow(x, y, &r)) break;
            return jj_int(r);
        case OP_SUB:
            if (fl) return jj_float(fval(a) - fval(b));
            if (__builtin_sub_overflow(x, y, &r)) break;
            return jj_int(r);
        case OP_MUL:
            if (fl) return jj_float(fval(a) * fval(b));
            if (__builtin_mul_overflow(x, y, &r)) break;
            return jj_int(r);
        case OP_DIV:
            if (fval(b) == 0) jj_fail(c, "line %d: division by zero", c->line);
            return jj_float(fval(a) / fval(b));
        case OP_FLOORDIV: case OP_MOD:
            if (fval(b) == 0) jj_fail(c, "line %d: integer division or modulo by zero", c->line);
            if (fl) {
                double q = floor(fval(a) / fval(b)), m = fval(a) - q * fval(b);
                return op == OP_FLOORDIV ? jj_float(q) : jj_float(m);
            }
            if (x == INT64_MIN && y == -1) break;
            {
                int64_t q = x / y, m = x % y;
                if (m != 0 && ((m < 0) != (y < 0))) { q--; m += y; }
                return op == OP_FLOORDIV ? jj_int(q) : jj_int(m);
            }
        case OP_POW:
            if (!fl && y >= 0) {
                int64_t acc = 1;
                for (int64_t i = 0; i < y; i++)
                    if (__builtin_mul_overflow(acc, x, &acc)) jj_fail(c, "line %d: integer too large", c->line);
                    else if (acc == 0 || acc == 1) break;
                return jj_int(acc);
            }
            return jj_float(pow(fval(a), fval(b)));
        }
        jj_fail(c, "line %d: integer overflow", c->line);
    }
    if (op == OP_ADD && a.t == JT_STR && b.t == JT_STR) {
        /* Markup + str (either order) escapes the plain one and stays Markup */
        int mk = a.u.s->markup || b.u.s->markup;
        if (mk && !a.u.s->markup) a = jj_html_escape(c, a);
        if (mk && !b.u.s->markup) b = jj_html_escape(c, b);
        jj_buf s = {0};
        jj_buf_put(c, &s, a.u.s->p, a.u.s->len);
        jj_buf_put(c, &s, b.u.s->p, b.u.s->len);
        jj_val r = jj_buf_val(c, &s);
        r.u.s->markup = (unsigned)mk;
        return r;
    }
    if (op == OP_ADD && a.t == JT_LIST && b.t == JT_LIST && a.u.l->tuple == b.u.l->tuple &&
        a.u.l->tuple != JL_GEN) {
        jj_list *l = jj_newlist(c, a.u.l->n + b.u.l->n);
        l->tuple = a.u.l->tuple;
        for (size_t i = 0; i < a.u.l->n; i++) jj_list_push(c, l, a.u.l->v[i]);
        for (size_t i = 0; i < b.u.l->n; i++) jj_list_push(c, l, b.u.l->v[i]);
        return jj_listv(l);
    }
    if (op == OP_MOD && a.t == JT_STR) {
        if (b.t == JT_LIST && b.u.l->tuple) return jj_format(c, a, b.u.l->v, (int)b.u.l->n);
        return jj_format(c, a, &b, 1);
    }
    if (op == OP_MUL && (a.t == JT_STR || a.t == JT_LIST) && (b.t == JT_INT || b.t == JT_BOOL))
        return repeat(c, a, ival(b));
    if (op == OP_MUL && (b.t == JT_STR || b.t == JT_LIST) && (a.t == JT_INT || a.t == JT_BOOL))
        return repeat(c, b, ival(a));
    bad_operands(c, op, a, b);
}

static int contains(jj_ctx *c, jj_val container, jj_val item) {
    switch (container.t) {
    case JT_UNDEF: return 0;
    case JT_STR:
        if (item.t != JT_STR)
            jj_fail(c, "line %d: 'in <string>' requires string as left operand, not %s", c->line,
                    jj_type_name(item));
        return item.u.s->len == 0 ||
               memmem(container.u.s->p, container.u.s->len, item.u.s->p, item.u.s->len) != NULL;
    case JT_LIST:
        for (size_t i = 0; i < container.u.l->n; i++)
            if (jj_equal(container.u.l->v[i], item)) return 1;
        return 0;
    case JT_DICT: case JT_NS: return jj_dict_getv(container.u.d, item) != NULL;
    default:
        jj_fail(c, "line %d: argument of type '%s' is not iterable", c->line, jj_type_name(container));
    }
}

static int cmp_op(jj_ctx *c, int op, jj_val a, jj_val b) {
    static const char *sym[] = {"==", "!=", "<", "<=", ">", ">="};
    switch (op) {
    case OP_EQ: return jj_equal(a, b);
    case OP_NE: return !jj_equal(a, b);
    case OP_IN: return contains(c, b, a);
    case OP_NOTIN: return !contains(c, b, a);
    default: {
        int r = jj_compare(c, a, b, sym[op - OP_EQ]);
        return op == OP_LT ? r < 0 : op == OP_LE ? r <= 0 : op == OP_GT ? r > 0 : r >= 0;
    }
    }
}

/* ---- calls ---- */

static void eval_args(jj_ctx *c, const jj_node *n, jj_args *a) {
    a->npos = n->nkids;
    a->nkw = n->nkids2;
    a->pos = n->nkids ? jj_alloc(c, (size_t)n->nkids * sizeof(jj_val)) : NULL;
    a->kwv = n->nkids2 ? jj_alloc(c, (size_t)n->nkids2 * sizeof(jj_val)) : NULL;
    a->kwn = n->names;
    for (int i = 0; i < n->nkids; i++) a->pos[i] = jj_eval(c, n->kids[i]);
    for (int i = 0; i < n->nkids2; i++) a->kwv[i] = jj_eval(c, n->kids2[i]);
}

static int exec(jj_ctx *c, const jj_node *n);

static jj_val capture(jj_ctx *c, const jj_node *body) {
    jj_buf *saved = c->out, b = {0};
    jj_buf_put(c, &b, "", 0);
    c->out = &b;
    exec(c, body);
    c->out = saved;
    return jj_buf_val(c, &b);
}

static jj_val call_macro(jj_ctx *c, const jj_macro *m, const jj_args *a) {
    const jj_node *n = m->node;
    if (a->npos > n->nnames)
        jj_fail(c, "line %d: macro '%s' takes not more than %d argument(s)", c->line, n->name, n->nnames);
    jj_frame *saved = c->frame;
    jj_frame *f = new_frame(c, m->closure);
    for (int k = 0; k < a->nkw; k++) {
        int found = 0;
        for (int i = 0; i < n->nnames; i++) found |= !strcmp(n->names[i], a->kwn[k]);
        if (!found)
            jj_fail(c, "line %d: macro '%s' takes no keyword argument '%s'", c->line, n->name, a->kwn[k]);
    }
    c->frame = f;
    for (int i = 0; i < n->nnames; i++) {
        jj_val v;
        const jj_val *kw = NULL;
        for (int k = 0; k < a->nkw; k++)
            if (!strcmp(n->names[i], a->kwn[k])) kw = &a->kwv[k];
        if (i < a->npos) {
            if (kw) jj_fail(c, "line %d: macro '%s' got multiple values for argument '%s'", c->line, n->name, n->names[i]);
            v = a->pos[i];
        } else if (kw) v = *kw;
        else if (n->kids2[i]) v = jj_eval(c, n->kids2[i]);
        else v = jj_undef_why(c, "parameter '%s' was not provided", n->names[i]);
        setvar(c, n->names[i], v);
    }
    jj_val r = capture(c, n->b);
    c->frame = saved;
    return r;
}

jj_val jj_call(jj_ctx *c, jj_val f, const jj_args *a) {
    switch (f.t) {
    case JT_MACRO: return call_macro(c, f.u.m, a);
    case JT_FUNC: return jj_call_global(c, f.u.fn, a);
    case JT_METHOD: return jj_call_method(c, f.u.meth->self, f.u.meth->name, a);
    case JT_UNDEF: jj_check_undefined(c, f);
    /* fallthrough */
    default: jj_fail(c, "line %d: '%s' object is not callable", c->line, jj_type_name(f));
    }
}

/* ---- expressions ---- */

static jj_val filter_chain(jj_ctx *c, const jj_node *f, jj_val base) {
    jj_val v = !f->a ? base : f->a->kind == E_FILTER ? filter_chain(c, f->a, base) : jj_eval(c, f->a);
    jj_args a;
    eval_args(c, f, &a);
    c->line = f->line;
    if (f->fid < 0) jj_fail(c, "line %d: no filter named '%s'", f->line, f->name);
    return jj_filter_apply(c, f->fid, v, &a);
}

static jj_val eval_inner(jj_ctx *c, const jj_node *n) {
    switch (n->kind) {
    case E_LIT: return n->lit;
    case E_NAME: return lookup(c, n->name);
    case E_ATTR: return jj_getattr(c, jj_eval(c, n->a), n->name);
    case E_ITEM: {
        jj_val o = jj_eval(c, n->a), k = jj_eval(c, n->b);
        return jj_getitem(c, o, k);
    }
    case E_SLICE: {
        jj_val o = jj_eval(c, n->a), none = jj_none();
        jj_val s0 = n->b ? jj_eval(c, n->b) : none, s1 = n->kids[0] ? jj_eval(c, n->kids[0]) : none,
               s2 = n->kids[1] ? jj_eval(c, n->kids[1]) : none;
        return do_slice(c, o, s0, s1, s2);
    }
    case E_CALL: {
        jj_args a;
        if (n->a->kind == E_ATTR) {
            jj_val self = jj_eval(c, n->a->a);
            if (jj_has_method(self, n->a->name)) {
                eval_args(c, n, &a);
                c->line = n->line;
                return jj_call_method(c, self, n->a->name, &a);
            }
            jj_val f = jj_getattr(c, self, n->a->name);
            eval_args(c, n, &a);
            c->line = n->line;
            return jj_call(c, f, &a);
        }
        jj_val f = jj_eval(c, n->a);
        eval_args(c, n, &a);
        c->line = n->line;
        return jj_call(c, f, &a);
    }
    case E_FILTER: return filter_chain(c, n, jj_undef());
    case E_TEST: {
        jj_val v = jj_eval(c, n->a);
        jj_args a;
        eval_args(c, n, &a);
        c->line = n->line;
        if (n->fid < 0) jj_fail(c, "line %d: no test named '%s'", n->line, n->name);
        int r = jj_test_apply(c, n->fid, v, &a);
        return jj_bool(n->op ? !r : r);
    }
    case E_BIN: {
        jj_val a = jj_eval(c, n->a), b = jj_eval(c, n->b);
        c->line = n->line;
        return binop(c, n->op, a, b);
    }
    case E_NEG: case E_POS: {
        jj_val v = jj_eval(c, n->a);
        jj_check_undefined(c, v);
        if (v.t == JT_INT || v.t == JT_BOOL) {
            int64_t i = v.t == JT_INT ? v.u.i : v.u.b;
            if (n->kind == E_POS) return jj_int(i);
            if (i == INT64_MIN) jj_fail(c, "line %d: integer overflow", n->line);
            return jj_int(-i);
        }
        if (v.t == JT_FLOAT) return jj_float(n->kind == E_NEG ? -v.u.f : v.u.f);
        jj_fail(c, "line %d: bad operand type for unary %s: '%s'", n->line, n->kind == E_NEG ? "-" : "+",
                jj_type_name(v));
    }
    case E_NOT: return jj_bool(!jj_truthy(jj_eval(c, n->a)));
    case E_AND: {
        jj_val a = jj_eval(c, n->a);
        return jj_truthy(a) ? jj_eval(c, n->b) : a;
    }
    case E_OR: {
        jj_val a = jj_eval(c, n->a);
        return jj_truthy(a) ? a : jj_eval(c, n->b);
    }
    case E_COND:
        if (jj_truthy(jj_eval(c, n->c))) return jj_eval(c, n->a);
        return n->b ? jj_eval(c, n->b) : jj_undef_why(c, "the inline if expression on line %d evaluated to false and no else section was defined.", n->line);
    case E_CMP: {
        jj_val a = jj_eval(c, n->kids[0]);
        for (int i = 1; i < n->nkids; i++) {
            jj_val b = jj_eval(c, n->kids[i]);
            c->line = n->line;
            if (!cmp_op(c, n->ops[i - 1], a, b)) return jj_bool(0);
            a = b;
        }
        return jj_bool(1);
    }
    case E_LIST: case E_TUPLE: {
        jj_list *l = jj_newlist(c, (size_t)n->nkids);
        l->tuple = n->kind == E_TUPLE;
        for (int i = 0; i < n->nkids; i++) jj_list_push(c, l, jj_eval(c, n->kids[i]));
        return jj_listv(l);
    }
    case E_DICT: {
        jj_dict *d = jj_newdict(c, (size_t)n->nkids);
        for (int i = 0; i < n->nkids; i++) {
            jj_val k = jj_eval(c, n->kids[i]);
            if ((k.t == JT_LIST && !k.u.l->tuple) || k.t == JT_DICT || k.t == JT_UNDEF)
                jj_fail(c, "line %d: unhashable type: '%s'", n->line, jj_type_name(k));
            jj_dict_set(c, d, k, jj_eval(c, n->kids2[i]));
        }
        return jj_dictv(d);
    }
    }
    jj_fail(c, "line %d: internal error: bad expression", n->line);
}

jj_val jj_eval(jj_ctx *c, const jj_node *n) {
    tick(c, n->line);
    if (++c->depth > MAX_DEPTH) jj_fail(c, "line %d: the template recursed too deeply", n->line);
    jj_val v = eval_inner(c, n);
    c->depth--;
    return v;
}

/* ---- statements ---- */

static void assign_targets(jj_ctx *c, const char **names, int n, jj_val v) {
    if (n == 1) {
        setvar(c, names[0], v);
        return;
    }
    jj_list *l = jj_iter(c, v);
    if ((int)l->n != n)
        jj_fail(c, "line %d: %s values to unpack (expected %d, got %zu)", c->line,
                (int)l->n > n ? "too many" : "not enough", n, l->n);
    for (int i = 0; i < n; i++) setvar(c, names[i], l->v[i]);
}

static void exec_for(jj_ctx *c, const jj_node *n) {
    jj_val it = jj_eval(c, n->a);
    c->line = n->line;
    jj_list *items = jj_iter(c, it);
    jj_frame *saved = c->frame;
    c->frame = new_frame(c, saved);
    if (n->c) {
        jj_list *kept = jj_newlist(c, 0);
        for (size_t i = 0; i < items->n; i++) {
            assign_targets(c, n->names, n->nnames, items->v[i]);
            if (jj_truthy(jj_eval(c, n->c))) jj_list_push(c, kept, items->v[i]);
        }
        items = kept;
    }
    jj_loop *L = jj_alloc(c, sizeof *L);
    L->items = items;
    L->depth = 1;
    jj_val lv = {JT_LOOP, {.loop = L}};
    for (size_t i = 0; i < items->n; i++) {
        L->index0 = i;
        setvar(c, "loop", lv);
        c->line = n->line;
        assign_targets(c, n->names, n->nnames, items->v[i]);
        if (exec(c, n->b) == 1) break;
    }
    if (!items->n && n->nkids2) exec(c, n->kids2[0]);
    c->frame = saved;
}

static int exec_inner(jj_ctx *c, const jj_node *n) {
    switch (n->kind) {
    case N_BODY:
        for (int i = 0; i < n->nkids; i++) {
            int r = exec(c, n->kids[i]);
            if (r) return r;
        }
        return 0;
    case N_TEXT: jj_buf_put(c, c->out, n->lit.u.s->p, n->lit.u.s->len); return 0;
    case N_OUTPUT: {
        jj_val v = jj_eval(c, n->a);
        jj_write_str(c, c->out, v);
        return 0;
    }
    case N_IF:
        if (jj_truthy(jj_eval(c, n->a))) return exec(c, n->b);
        return n->c ? exec(c, n->c) : 0;
    case N_FOR: exec_for(c, n); return 0;
    case N_SET: {
        jj_val v = jj_eval(c, n->a);
        c->line = n->line;
        if (n->name) {
            jj_val ns = lookup(c, n->names[0]);
            if (ns.t != JT_NS) jj_fail(c, "line %d: cannot assign attribute on non-namespace object", n->line);
            jj_dict_set(c, ns.u.d, jj_cstr(c, n->name), v);
        } else assign_targets(c, n->names, n->nnames, v);
        return 0;
    }
    case N_SETBLOCK: {
        jj_val v = capture(c, n->b);
        if (n->c) v = filter_chain(c, n->c, v);
        setvar(c, n->names[0], v);
        return 0;
    }
    case N_MACRO: {
        jj_macro *m = jj_alloc(c, sizeof *m);
        m->node = n;
        m->closure = c->frame;
        jj_val v = {JT_MACRO, {.m = m}};
        setvar(c, n->name, v);
        return 0;
    }
    case N_FILTERBLOCK: {
        jj_val v = filter_chain(c, n->c, capture(c, n->b));
        jj_write_str(c, c->out, v);
        return 0;
    }
    case N_WITH: {
        jj_frame *saved = c->frame, *f = new_frame(c, saved);
        for (int i = 0; i < n->nkids; i++)
            jj_dict_set(c, f->vars, jj_cstr(c, n->names[i]), jj_eval(c, n->kids[i]));
        c->frame = f;
        int r = exec(c, n->b);
        c->frame = saved;
        return r;
    }
    case N_BREAK: return 1;
    case N_CONTINUE: return 2;
    }
    jj_fail(c, "line %d: internal error: bad statement", n->line);
}

static int exec(jj_ctx *c, const jj_node *n) {
    tick(c, n->line);
    if (++c->depth > MAX_DEPTH) jj_fail(c, "line %d: the template recursed too deeply", n->line);
    int r = exec_inner(c, n);
    c->depth--;
    return r;
}

void jj_exec_template(jj_ctx *c, const jj_node *root) { exec(c, root); }
