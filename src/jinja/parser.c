/* jinja/parser — tokens to a tree of statements and expressions, with Jinja2's grammar and
 * operator precedence (lowest first): `x if c else y`, or, and, not, comparisons (==, !=, <, <=,
 * >, >=, in, not in; chained), + -, ~, * / // %, **, unary - +, then primaries with their
 * postfixes (.name, [index or slice], (call)) and filters/tests (| f(args), is [not] t(args)).
 * An unknown filter or test is an error here, at compile time, as in Jinja2 — unless it sits in an
 * if statement or a conditional expression (Jinja2's "soft" frames), where it fails only when
 * evaluated. Nesting is bounded. */
#include "jinja/jj.h"

#include <string.h>

enum { MAX_NEST = 150 };

typedef struct {
    jj_ctx *c;
    const jj_token *t;
    size_t i, n;
    int nest, loops;
    int soft;                 /* > 0 inside an if statement (not a loop or macro body in it) */
    jj_node **unknown;        /* filters and tests with unknown names, in order */
    int *unknown_soft;
    int n_unknown, cap_unknown;
} ps;

static void note_unknown(ps *P, jj_node *n) {
    if (P->n_unknown == P->cap_unknown) {
        int cap = P->cap_unknown ? P->cap_unknown * 2 : 8;
        jj_node **nn = jj_alloc(P->c, (size_t)cap * sizeof *nn);
        int *ns = jj_alloc(P->c, (size_t)cap * sizeof *ns);
        if (P->n_unknown) {
            memcpy(nn, P->unknown, (size_t)P->n_unknown * sizeof *nn);
            memcpy(ns, P->unknown_soft, (size_t)P->n_unknown * sizeof *ns);
        }
        P->unknown = nn;
        P->unknown_soft = ns;
        P->cap_unknown = cap;
    }
    P->unknown[P->n_unknown] = n;
    P->unknown_soft[P->n_unknown++] = P->soft > 0;
}

typedef struct { jj_node **v; int n, cap; } nvec;

static void nv_push(ps *P, nvec *v, jj_node *x) {
    if (v->n == v->cap) {
        int cap = v->cap ? v->cap * 2 : 4;
        jj_node **nn = jj_alloc(P->c, (size_t)cap * sizeof *nn);
        if (v->n) memcpy(nn, v->v, (size_t)v->n * sizeof *nn);
        v->v = nn;
        v->cap = cap;
    }
    v->v[v->n++] = x;
}

static const jj_token *cur(ps *P) { return &P->t[P->i]; }
static const jj_token *nxt(ps *P) { return P->i + 1 < P->n ? &P->t[P->i + 1] : &P->t[P->n - 1]; }

static jj_node *mk(ps *P, int kind) {
    jj_node *n = jj_alloc(P->c, sizeof *n);
    memset(n, 0, sizeof *n);
    n->kind = kind;
    n->line = cur(P)->line;
    return n;
}

static const char *tok_desc(const jj_token *t) {
    switch (t->t) {
    case TK_EOF: return "end of template";
    case TK_DATA: return "template data";
    case TK_VAR_BEGIN: return "'{{'";
    case TK_VAR_END: return "'}}'";
    case TK_BLOCK_BEGIN: return "'{%'";
    case TK_BLOCK_END: return "'%}'";
    case TK_STRING: return "string";
    case TK_INT: return "integer";
    case TK_FLOAT: return "float";
    default: return NULL;
    }
}

_Noreturn static void unexpected(ps *P, const char *wanted) {
    const jj_token *t = cur(P);
    const char *d = tok_desc(t);
    if (d) jj_fail(P->c, "line %d: expected %s, got %s", t->line, wanted, d);
    jj_fail(P->c, "line %d: expected %s, got '%.*s'", t->line, wanted, (int)t->n, t->p);
}

static int is_op(const jj_token *t, const char *op) {
    return t->t == TK_OP && t->n == strlen(op) && !memcmp(t->p, op, t->n);
}
static int is_name(const jj_token *t, const char *nm) {
    return t->t == TK_NAME && t->n == strlen(nm) && !memcmp(t->p, nm, t->n);
}
static void expect_op(ps *P, const char *op) {
    if (!is_op(cur(P), op)) {
        char w[16];
        w[0] = '\'';
        strcpy(w + 1, op);
        strcat(w, "'");
        unexpected(P, w);
    }
    P->i++;
}
static const char *take_name(ps *P) {
    const jj_token *t = cur(P);
    if (t->t != TK_NAME) unexpected(P, "a name");
    P->i++;
    return jj_newstr(P->c, t->p, t->n)->p;
}
static void expect_block_end(ps *P) {
    if (cur(P)->t != TK_BLOCK_END) unexpected(P, "end of statement '%}'");
    P->i++;
}

static void enter(ps *P) {
    if (++P->nest > MAX_NEST) jj_fail(P->c, "line %d: template nested too deeply", cur(P)->line);
}

static jj_node *expr(ps *P, int with_cond);
static jj_node *unary(ps *P, int with_filter);

static jj_node *lit(ps *P, jj_val v) {
    jj_node *n = mk(P, E_LIT);
    n->lit = v;
    return n;
}

/* In a bracketed list of which n items are read: 1 when another item follows (its comma
 * consumed), 0 at `close` (a trailing comma is allowed). */
static int next_item(ps *P, int n, const char *close) {
    if (is_op(cur(P), close)) return 0;
    if (n) expect_op(P, ",");
    return !is_op(cur(P), close);
}

/* Set (*v)[n] = name, growing the arena array *v (capacity *cap) first when it is full. */
static void name_push(ps *P, const char ***v, int n, int *cap, const char *name) {
    if (n == *cap) {
        *cap = *cap ? *cap * 2 : 4;
        const char **nv = jj_alloc(P->c, (size_t)*cap * sizeof *nv);
        if (n) memcpy(nv, *v, (size_t)n * sizeof *nv);
        *v = nv;
    }
    (*v)[n] = name;
}

/* A node of `kind` whose kids are items. */
static jj_node *mk_items(ps *P, int kind, nvec items) {
    jj_node *n = mk(P, kind);
    n->kids = items.v;
    n->nkids = items.n;
    return n;
}

/* Call arguments after '(': positional into kids, keywords into names/kids2. */
static void call_args(ps *P, jj_node *n) {
    nvec pos = {0}, kw = {0};
    const char **kwn = NULL;
    int kcap = 0;
    expect_op(P, "(");
    while (next_item(P, pos.n + kw.n, ")")) {
        if (is_op(cur(P), "*") || is_op(cur(P), "**"))
            jj_fail(P->c, "line %d: *args and **kwargs are not supported", cur(P)->line);
        if (cur(P)->t == TK_NAME && is_op(nxt(P), "=")) {
            const char *k = take_name(P);
            P->i++;
            name_push(P, &kwn, kw.n, &kcap, k);
            nv_push(P, &kw, expr(P, 1));
        } else {
            if (kw.n) jj_fail(P->c, "line %d: positional argument after keyword argument", cur(P)->line);
            nv_push(P, &pos, expr(P, 1));
        }
    }
    P->i++;
    n->kids = pos.v;
    n->nkids = pos.n;
    n->kids2 = kw.v;
    n->nkids2 = kw.n;
    n->names = kwn;
    n->nnames = kw.n;
}

static jj_node *primary(ps *P) {
    const jj_token *t = cur(P);
    jj_node *n;
    if (t->t == TK_NAME) {
        if (is_name(t, "true") || is_name(t, "True")) { P->i++; return lit(P, jj_bool(1)); }
        if (is_name(t, "false") || is_name(t, "False")) { P->i++; return lit(P, jj_bool(0)); }
        if (is_name(t, "none") || is_name(t, "None")) { P->i++; return lit(P, jj_none()); }
        n = mk(P, E_NAME);
        n->name = take_name(P);
        return n;
    }
    if (t->t == TK_STRING) {
        jj_buf b = {0};
        jj_buf_put(P->c, &b, "", 0);
        while (cur(P)->t == TK_STRING) {
            jj_buf_put(P->c, &b, cur(P)->p, cur(P)->n);
            P->i++;
        }
        return lit(P, jj_buf_val(P->c, &b));
    }
    if (t->t == TK_INT) { P->i++; return lit(P, jj_int(t->i)); }
    if (t->t == TK_FLOAT) { P->i++; return lit(P, jj_float(t->f)); }
    if (is_op(t, "(")) {
        P->i++;
        if (is_op(cur(P), ")")) {
            P->i++;
            return mk(P, E_TUPLE);
        }
        jj_node *e = expr(P, 1);
        if (!is_op(cur(P), ",")) {
            expect_op(P, ")");
            return e;
        }
        nvec items = {0};
        nv_push(P, &items, e);
        while (is_op(cur(P), ",")) {
            P->i++;
            if (is_op(cur(P), ")")) break;
            nv_push(P, &items, expr(P, 1));
        }
        expect_op(P, ")");
        return mk_items(P, E_TUPLE, items);
    }
    if (is_op(t, "[")) {
        P->i++;
        nvec items = {0};
        while (next_item(P, items.n, "]")) nv_push(P, &items, expr(P, 1));
        P->i++;
        return mk_items(P, E_LIST, items);
    }
    if (is_op(t, "{")) {
        P->i++;
        nvec ks = {0}, vs = {0};
        while (next_item(P, ks.n, "}")) {
            nv_push(P, &ks, expr(P, 1));
            expect_op(P, ":");
            nv_push(P, &vs, expr(P, 1));
        }
        P->i++;
        n = mk_items(P, E_DICT, ks);
        n->kids2 = vs.v;
        n->nkids2 = vs.n;
        return n;
    }
    unexpected(P, "an expression");
}

static jj_node *postfix(ps *P, jj_node *n) {
    for (;;) {
        const jj_token *t = cur(P);
        if (is_op(t, ".")) {
            P->i++;
            jj_node *a = mk(P, cur(P)->t == TK_INT ? E_ITEM : E_ATTR);
            a->a = n;
            if (cur(P)->t == TK_INT) {
                a->b = lit(P, jj_int(cur(P)->i));
                P->i++;
            } else a->name = take_name(P);
            n = a;
        } else if (is_op(t, "[")) {
            P->i++;
            jj_node *parts[3] = {NULL, NULL, NULL};
            int k = 0, is_slice = 0;
            for (;;) {
                if (!is_op(cur(P), ":") && !is_op(cur(P), "]")) parts[k] = expr(P, 1);
                if (is_op(cur(P), ":") && k < 2) {
                    is_slice = 1;
                    k++;
                    P->i++;
                    continue;
                }
                break;
            }
            expect_op(P, "]");
            if (!is_slice && !parts[0]) jj_fail(P->c, "line %d: empty subscript", t->line);
            jj_node *a = mk(P, is_slice ? E_SLICE : E_ITEM);
            a->a = n;
            a->b = parts[0];
            if (is_slice) {
                a->kids = jj_alloc(P->c, 2 * sizeof(jj_node *));
                a->kids[0] = parts[1];
                a->kids[1] = parts[2];
                a->nkids = 2;
            }
            n = a;
        } else if (is_op(t, "(")) {
            jj_node *a = mk(P, E_CALL);
            a->a = n;
            call_args(P, a);
            n = a;
        } else return n;
    }
}

/* A filter chain "| f(args) | g" applied to base (NULL for a filter block's body). */
static jj_node *filter_one(ps *P, jj_node *base) {
    jj_node *f = mk(P, E_FILTER);
    f->a = base;
    f->name = take_name(P);
    while (is_op(cur(P), ".")) { /* dotted filter names are not supported: fail below */
        P->i++;
        take_name(P);
        f->fid = -1;
    }
    if (f->fid < 0 || (f->fid = jj_filter_find(f->name)) < 0) {
        f->fid = -1;
        note_unknown(P, f);
    }
    if (is_op(cur(P), "(")) call_args(P, f);
    return f;
}

/* chain, then every further `| filter(...)` applied to it (a {% filter %} or {% set %} block's). */
static jj_node *more_filters(ps *P, jj_node *chain) {
    while (is_op(cur(P), "|")) {
        P->i++;
        chain = filter_one(P, chain);
    }
    return chain;
}

static jj_node *filter_expr(ps *P, jj_node *n) {
    for (;;) {
        if (is_op(cur(P), "|")) {
            P->i++;
            n = filter_one(P, n);
        } else if (is_name(cur(P), "is")) {
            P->i++;
            jj_node *t = mk(P, E_TEST);
            t->a = n;
            if (is_name(cur(P), "not")) {
                P->i++;
                t->op = 1;
            }
            t->name = take_name(P); /* none, true, in, ... are names here */
            if ((t->fid = jj_test_find(t->name)) < 0) note_unknown(P, t);
            const jj_token *a = cur(P);
            if (is_op(a, "(")) call_args(P, t);
            else if ((a->t == TK_NAME || a->t == TK_STRING || a->t == TK_INT || a->t == TK_FLOAT ||
                      is_op(a, "[") || is_op(a, "{")) &&
                     !is_name(a, "else") && !is_name(a, "or") && !is_name(a, "and") &&
                     !is_name(a, "is") && !is_name(a, "if") && !is_name(a, "in") && !is_name(a, "not")) {
                t->kids = jj_alloc(P->c, sizeof(jj_node *));
                t->kids[0] = postfix(P, primary(P));
                t->nkids = 1;
            }
            n = t;
        } else if (is_op(cur(P), "(")) {
            jj_node *a = mk(P, E_CALL);
            a->a = n;
            call_args(P, a);
            n = a;
        } else return n;
    }
}

static jj_node *unary(ps *P, int with_filter) {
    enter(P);
    jj_node *n;
    if (is_op(cur(P), "-") || is_op(cur(P), "+")) {
        n = mk(P, is_op(cur(P), "-") ? E_NEG : E_POS);
        P->i++;
        n->a = unary(P, 0);
    } else n = postfix(P, primary(P));
    if (with_filter) n = filter_expr(P, n);
    P->nest--;
    return n;
}

static jj_node *bin(ps *P, int op, jj_node *a, jj_node *b, int line) {
    jj_node *n = mk(P, E_BIN);
    n->op = op;
    n->a = a;
    n->b = b;
    n->line = line;
    return n;
}

/* One left-associative level of binary operators: sub (OP sub)*, OP any of ops (a zero row ends
 * them). */
typedef struct {
    const char *tok;
    int op;
} binop;

static jj_node *binary_level(ps *P, jj_node *(*sub)(ps *), const binop *ops) {
    jj_node *n = sub(P);
    for (;;) {
        const jj_token *t = cur(P);
        int op = 0;
        for (const binop *o = ops; o->tok && !op; o++) op = is_op(t, o->tok) ? o->op : 0;
        if (!op) return n;
        P->i++;
        n = bin(P, op, n, sub(P), t->line);
    }
}

static jj_node *filtered_unary(ps *P) { return unary(P, 1); }

static jj_node *power(ps *P) {
    static const binop ops[] = {{"**", OP_POW}, {0, 0}};
    return binary_level(P, filtered_unary, ops);
}

static jj_node *math2(ps *P) {
    static const binop ops[] = {
        {"*", OP_MUL}, {"/", OP_DIV}, {"//", OP_FLOORDIV}, {"%", OP_MOD}, {0, 0}};
    return binary_level(P, power, ops);
}

static jj_node *concat(ps *P) {
    static const binop ops[] = {{"~", OP_CONCAT}, {0, 0}};
    return binary_level(P, math2, ops);
}

static jj_node *math1(ps *P) {
    static const binop ops[] = {{"+", OP_ADD}, {"-", OP_SUB}, {0, 0}};
    return binary_level(P, concat, ops);
}

static jj_node *compare(ps *P) {
    jj_node *first = math1(P);
    nvec kids = {0};
    int *ops = NULL, nops = 0, cap = 0;
    for (;;) {
        const jj_token *t = cur(P);
        int op = is_op(t, "==") ? OP_EQ : is_op(t, "!=") ? OP_NE : is_op(t, "<") ? OP_LT
                 : is_op(t, "<=") ? OP_LE : is_op(t, ">") ? OP_GT : is_op(t, ">=") ? OP_GE
                 : is_name(t, "in") ? OP_IN : (is_name(t, "not") && is_name(nxt(P), "in")) ? OP_NOTIN : 0;
        if (!op) break;
        P->i += op == OP_NOTIN ? 2 : 1;
        if (!kids.n) nv_push(P, &kids, first);
        nv_push(P, &kids, math1(P));
        if (nops == cap) {
            cap = cap ? cap * 2 : 4;
            int *no = jj_alloc(P->c, (size_t)cap * sizeof *no);
            if (nops) memcpy(no, ops, (size_t)nops * sizeof *no);
            ops = no;
        }
        ops[nops++] = op;
    }
    if (!nops) return first;
    jj_node *n = mk(P, E_CMP);
    n->line = first->line;
    n->kids = kids.v;
    n->nkids = kids.n;
    n->ops = ops;
    return n;
}

static jj_node *not_expr(ps *P) {
    if (is_name(cur(P), "not")) {
        enter(P);
        jj_node *n = mk(P, E_NOT);
        P->i++;
        n->a = not_expr(P);
        P->nest--;
        return n;
    }
    return compare(P);
}

/* sub (KW sub)* for the keyword operators and / or: nodes of the given kind. */
static jj_node *keyword_chain(ps *P, const char *kw, int kind, jj_node *(*sub)(ps *)) {
    jj_node *n = sub(P);
    while (is_name(cur(P), kw)) {
        P->i++;
        jj_node *a = mk(P, kind);
        a->a = n;
        a->b = sub(P);
        n = a;
    }
    return n;
}

static jj_node *and_expr(ps *P) { return keyword_chain(P, "and", E_AND, not_expr); }

static jj_node *or_expr(ps *P) { return keyword_chain(P, "or", E_OR, and_expr); }

static jj_node *expr(ps *P, int with_cond) {
    enter(P);
    int first_unknown = P->n_unknown;
    jj_node *n = or_expr(P);
    while (with_cond && is_name(cur(P), "if")) {
        P->soft++;  /* the whole conditional expression is soft */
        for (int i = first_unknown; i < P->n_unknown; i++) P->unknown_soft[i] = 1;
        P->i++;
        jj_node *c = mk(P, E_COND);
        c->a = n;
        c->c = or_expr(P);
        if (is_name(cur(P), "else")) {
            P->i++;
            c->b = expr(P, 1);
        }
        n = c;
        P->soft--;
    }
    P->nest--;
    return n;
}

/* expr [, expr ...]: a tuple when there is a comma (set x = 1, 2; {{ a, b }}). */
static jj_node *tuple_expr(ps *P, int with_cond) {
    jj_node *e = expr(P, with_cond);
    if (!is_op(cur(P), ",")) return e;
    nvec items = {0};
    nv_push(P, &items, e);
    while (is_op(cur(P), ",")) {
        P->i++;
        nv_push(P, &items, expr(P, with_cond));
    }
    jj_node *n = mk(P, E_TUPLE);
    n->kids = items.v;
    n->nkids = items.n;
    return n;
}

/* ---- statements ---- */

static jj_node *body(ps *P, const char *const *ends, const char **which);
static jj_node *body_hard(ps *P, const char *const *ends, const char **which);

/* The body of a block up to its one end tag (`end`), that tag's %} consumed. */
static jj_node *body_until(ps *P, const char *end) {
    const char *const ends[] = {end, NULL};
    const char *which;
    jj_node *b = body_hard(P, ends, &which);
    expect_block_end(P);
    return b;
}

static const char **names_of(ps *P, int *count, int allow_attr, const char **attr) {
    const char **v = NULL;
    int n = 0, cap = 0;
    do {
        if (n) P->i++;
        name_push(P, &v, n, &cap, take_name(P));
        n++;
        if (allow_attr && n == 1 && is_op(cur(P), ".")) {
            P->i++;
            *attr = take_name(P);
            break;
        }
    } while (is_op(cur(P), ","));
    *count = n;
    return v;
}

static jj_node *stmt(ps *P) {
    const jj_token *kw = cur(P);
    if (kw->t != TK_NAME) unexpected(P, "a statement name");
    int line = kw->line;
    jj_node *n;
    const char *which;
    enter(P);
    if (is_name(kw, "if")) {
        P->i++;
        n = mk(P, N_IF);
        n->line = line;
        P->soft++;
        n->a = expr(P, 1);
        expect_block_end(P);
        static const char *const ends[] = {"elif", "else", "endif", NULL};
        n->b = body(P, ends, &which);
        jj_node *tail = n;
        while (!strcmp(which, "elif")) {
            jj_node *e = mk(P, N_IF);
            e->a = expr(P, 1);
            expect_block_end(P);
            e->b = body(P, ends, &which);
            tail->c = e;
            tail = e;
        }
        if (!strcmp(which, "else")) {
            expect_block_end(P);
            static const char *const ends2[] = {"endif", NULL};
            tail->c = body(P, ends2, &which);
        }
        expect_block_end(P);
        P->soft--;
    } else if (is_name(kw, "for")) {
        P->i++;
        n = mk(P, N_FOR);
        n->line = line;
        const char *attr = NULL;
        n->names = names_of(P, &n->nnames, 0, &attr);
        if (!is_name(cur(P), "in")) unexpected(P, "'in'");
        P->i++;
        n->a = tuple_expr(P, 0);
        if (is_name(cur(P), "if")) {
            P->i++;
            n->c = expr(P, 0);
        }
        if (is_name(cur(P), "recursive"))
            jj_fail(P->c, "line %d: recursive loops are not supported", cur(P)->line);
        expect_block_end(P);
        static const char *const ends[] = {"else", "endfor", NULL};
        P->loops++;
        n->b = body_hard(P, ends, &which);
        P->loops--;
        if (!strcmp(which, "else")) {
            expect_block_end(P);
            static const char *const ends2[] = {"endfor", NULL};
            jj_node *e = body_hard(P, ends2, &which);
            n->kids2 = jj_alloc(P->c, sizeof(jj_node *));
            n->kids2[0] = e;
            n->nkids2 = 1;
        }
        expect_block_end(P);
    } else if (is_name(kw, "set")) {
        P->i++;
        const char *attr = NULL;
        int cnt;
        const char **names = names_of(P, &cnt, 1, &attr);
        if (is_op(cur(P), "=")) {
            P->i++;
            n = mk(P, N_SET);
            n->a = tuple_expr(P, 1);
            expect_block_end(P);
        } else {
            if (cnt != 1 || attr) unexpected(P, "'='");
            n = mk(P, N_SETBLOCK);
            n->c = more_filters(P, NULL);
            expect_block_end(P);
            n->b = body_until(P, "endset");
        }
        n->line = line;
        n->names = names;
        n->nnames = cnt;
        n->name = attr;
    } else if (is_name(kw, "macro")) {
        P->i++;
        n = mk(P, N_MACRO);
        n->line = line;
        n->name = take_name(P);
        expect_op(P, "(");
        nvec defs = {0};
        const char **params = NULL;
        int np = 0, cap = 0;
        while (next_item(P, np, ")")) {
            name_push(P, &params, np, &cap, take_name(P));
            np++;
            jj_node *d = NULL;
            if (is_op(cur(P), "=")) {
                P->i++;
                d = expr(P, 1);
            } else if (defs.n && defs.v[defs.n - 1])
                jj_fail(P->c, "line %d: non-default argument follows default argument", cur(P)->line);
            nv_push(P, &defs, d);
        }
        P->i++;
        expect_block_end(P);
        n->names = params;
        n->nnames = np;
        n->kids2 = defs.v;
        n->nkids2 = defs.n;
        static const char *const ends[] = {"endmacro", NULL};
        int loops = P->loops;
        P->loops = 0;
        n->b = body_hard(P, ends, &which);
        P->loops = loops;
        if (cur(P)->t == TK_NAME) P->i++; /* {% endmacro name %} */
        expect_block_end(P);
    } else if (is_name(kw, "filter")) {
        P->i++;
        n = mk(P, N_FILTERBLOCK);
        n->line = line;
        n->c = more_filters(P, filter_one(P, NULL));
        expect_block_end(P);
        n->b = body_until(P, "endfilter");
    } else if (is_name(kw, "with")) {
        P->i++;
        n = mk(P, N_WITH);
        n->line = line;
        nvec vals = {0};
        const char **names = NULL;
        int cnt = 0, cap = 0;
        while (cur(P)->t != TK_BLOCK_END) {
            if (cnt) expect_op(P, ",");
            name_push(P, &names, cnt, &cap, take_name(P));
            cnt++;
            expect_op(P, "=");
            nv_push(P, &vals, expr(P, 1));
        }
        expect_block_end(P);
        n->names = names;
        n->nnames = cnt;
        n->kids = vals.v;
        n->nkids = vals.n;
        n->b = body_until(P, "endwith");
    } else if (is_name(kw, "generation")) {
        P->i++;
        expect_block_end(P);
        static const char *const ends[] = {"endgeneration", NULL};
        n = body(P, ends, &which);
        expect_block_end(P);
    } else if (is_name(kw, "break") || is_name(kw, "continue")) {
        if (!P->loops)
            jj_fail(P->c, "line %d: '%.*s' outside of a loop", line, (int)kw->n, kw->p);
        n = mk(P, is_name(kw, "break") ? N_BREAK : N_CONTINUE);
        P->i++;
        expect_block_end(P);
    } else {
        jj_fail(P->c, "line %d: unknown or unsupported tag '%.*s'", line, (int)kw->n, kw->p);
    }
    P->nest--;
    return n;
}

/* A body in a new frame (loop, macro, set or filter block, with): not soft even inside an if. */
static jj_node *body_hard(ps *P, const char *const *ends, const char **which) {
    int soft = P->soft;
    P->soft = 0;
    jj_node *b = body(P, ends, which);
    P->soft = soft;
    return b;
}


/* Statements until one of `ends` (its name consumed, *which set) or the end of the template. */
static jj_node *body(ps *P, const char *const *ends, const char **which) {
    nvec v = {0};
    jj_node *b = mk(P, N_BODY);
    for (;;) {
        const jj_token *t = cur(P);
        if (t->t == TK_EOF) {
            if (ends) {
                int k = 0;
                while (ends[k + 1]) k++;
                jj_fail(P->c, "line %d: unexpected end of template, expected '%s'", t->line, ends[k]);
            }
            break;
        }
        if (t->t == TK_DATA) {
            jj_node *x = mk(P, N_TEXT);
            x->lit = jj_strv(P->c, t->p, t->n);
            nv_push(P, &v, x);
            P->i++;
        } else if (t->t == TK_VAR_BEGIN) {
            P->i++;
            jj_node *x = mk(P, N_OUTPUT);
            x->a = tuple_expr(P, 1);
            if (cur(P)->t != TK_VAR_END) unexpected(P, "end of print statement '}}'");
            P->i++;
            nv_push(P, &v, x);
        } else if (t->t == TK_BLOCK_BEGIN) {
            const jj_token *k = nxt(P);
            int ended = 0;
            for (int i = 0; ends && ends[i]; i++)
                if (is_name(k, ends[i])) {
                    *which = ends[i];
                    P->i += 2;
                    ended = 1;
                    break;
                }
            if (ended) break;
            if (k->t == TK_NAME && k->n > 3 && !memcmp(k->p, "end", 3))
                jj_fail(P->c, "line %d: unexpected '%.*s'", k->line, (int)k->n, k->p);
            if (k->t == TK_NAME && (is_name(k, "elif") || is_name(k, "else")))
                jj_fail(P->c, "line %d: unexpected '%.*s'", k->line, (int)k->n, k->p);
            P->i++;
            nv_push(P, &v, stmt(P));
        } else unexpected(P, "template data or a tag");
    }
    b->kids = v.v;
    b->nkids = v.n;
    return b;
}

jj_node *jj_parse(jj_ctx *c, const jj_token *toks, size_t ntok) {
    ps P = {c, toks, 0, ntok, 0, 0, 0, NULL, NULL, 0, 0};
    jj_node *root = body(&P, NULL, NULL);
    for (int i = 0; i < P.n_unknown; i++)
        if (!P.unknown_soft[i])
            jj_fail(c, "line %d: no %s named '%s'", P.unknown[i]->line,
                    P.unknown[i]->kind == E_FILTER ? "filter" : "test", P.unknown[i]->name);
    return root;
}
