/* jinja/jj — the engine's internals, shared by its files (not a public contract).
 *
 * Values (jj_val) are small structs passed by value; strings, lists, dicts and everything else
 * they point to live in the arena of the one render (or of the compiled template, for literals),
 * so nothing is freed one by one and an error anywhere unwinds with longjmp to the render's entry,
 * which frees the arena. Lists and dicts are immutable once built except a namespace's dict.
 * Strings are UTF-8 with a length (NUL-terminated too); lengths and indexes count code points
 * like Python's. */
#ifndef PL_JINJA_JJ_H
#define PL_JINJA_JJ_H

#include "jinja/jinja.h"

#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
    JT_UNDEF, JT_NONE, JT_BOOL, JT_INT, JT_FLOAT, JT_STR, JT_LIST, JT_DICT,
    JT_MACRO, JT_NS, JT_FUNC, JT_LOOP, JT_METHOD,
} jj_type;

/* markup: made by |safe or |escape (Jinja's Markup): `+` with a plain string escapes that one */
typedef struct jj_str { size_t len; unsigned markup; char p[]; } jj_str;
typedef struct jj_list jj_list;
typedef struct jj_dict jj_dict;
struct jj_node;
struct jj_frame;

typedef struct jj_val {
    int t;
    union {
        int b;
        int64_t i;
        double f;
        jj_str *s;          /* JT_STR; JT_UNDEF: why it is undefined (NULL: no reason) */
        jj_list *l;
        jj_dict *d;         /* JT_DICT, JT_NS */
        struct jj_macro *m;
        struct jj_loop *loop;
        struct jj_method *meth;
        int fn;             /* JT_FUNC: a global function */
    } u;
} jj_val;

/* kind: a list, a tuple, or a generator (what map, select, unique, items ... give in Jinja: it
 * iterates, but has no length, no index, is always true and is not JSON) */
enum { JL_LIST = 0, JL_TUPLE = 1, JL_GEN = 2 };
struct jj_list { jj_val *v; size_t n, cap; int tuple; };
struct jj_dict { jj_val *k, *v; size_t n, cap; };
typedef struct jj_frame { jj_dict *vars; struct jj_frame *parent; } jj_frame;
typedef struct jj_macro { const struct jj_node *node; struct jj_frame *closure; } jj_macro;
typedef struct jj_loop {
    jj_list *items;
    size_t index0;
    int depth;
} jj_loop;
typedef struct jj_method { jj_val self; const char *name; } jj_method;

enum { JF_RANGE = 1, JF_NAMESPACE, JF_DICT, JF_RAISE, JF_STRFTIME, JF_CYCLE };

/* ---- arena ---- */
typedef struct jj_chunk { struct jj_chunk *next; size_t used, cap; max_align_t data[]; } jj_chunk;
typedef struct {
    jj_chunk *head;
    size_t total, limit;
} jj_arena;

/* ---- the state of one parse or render; errors longjmp to `jb` ---- */
typedef struct jj_buf { char *p; size_t len, cap; } jj_buf;
typedef struct jj_ctx {
    jj_arena arena;
    jmp_buf jb;
    int line;             /* the line being parsed or evaluated, for messages */
    int raised;           /* the error came from raise_exception: no "line N:" */
    int nomem;            /* malloc failed (not a limit) */
    char err[512];
    /* render only */
    jj_buf *out;
    size_t max_output;
    uint64_t steps, max_steps;
    int depth;
    int64_t now;
    struct jj_frame *root, *frame;
} jj_ctx;

_Noreturn void jj_fail(jj_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
_Noreturn void jj_nomem(jj_ctx *c);
void *jj_alloc(jj_ctx *c, size_t n);
void jj_arena_free(jj_arena *a);

/* ---- values (value.c) ---- */
static inline jj_val jj_undef(void) { jj_val v = {JT_UNDEF, {.s = NULL}}; return v; }
static inline jj_val jj_none(void) { jj_val v = {JT_NONE, {.i = 0}}; return v; }
static inline jj_val jj_bool(int b) { jj_val v = {JT_BOOL, {.b = !!b}}; return v; }
static inline jj_val jj_int(int64_t i) { jj_val v = {JT_INT, {.i = i}}; return v; }
static inline jj_val jj_float(double f) { jj_val v = {JT_FLOAT, {.f = f}}; return v; }
jj_val jj_undef_why(jj_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
jj_str *jj_newstr(jj_ctx *c, const char *p, size_t n);
jj_val jj_strv(jj_ctx *c, const char *p, size_t n);
jj_val jj_cstr(jj_ctx *c, const char *s);
jj_val jj_buf_val(jj_ctx *c, const jj_buf *b);
jj_list *jj_newlist(jj_ctx *c, size_t cap);
void jj_list_push(jj_ctx *c, jj_list *l, jj_val v);
jj_dict *jj_newdict(jj_ctx *c, size_t cap);
void jj_dict_set(jj_ctx *c, jj_dict *d, jj_val k, jj_val v);
/* The value of key k (a string), or NULL. */
jj_val *jj_dict_get(const jj_dict *d, const char *k, size_t klen);
jj_val *jj_dict_getv(const jj_dict *d, jj_val k);
static inline jj_val jj_listv(jj_list *l) { jj_val v = {JT_LIST, {.l = l}}; return v; }
static inline jj_val jj_dictv(jj_dict *d) { jj_val v = {JT_DICT, {.d = d}}; return v; }

void jj_buf_put(jj_ctx *c, jj_buf *b, const char *p, size_t n);
void jj_put_utf8(jj_ctx *c, jj_buf *b, unsigned codepoint);
static inline void jj_buf_puts(jj_ctx *c, jj_buf *b, const char *s) {
    size_t n = 0;
    while (s[n]) n++;
    jj_buf_put(c, b, s, n);
}

int jj_truthy(jj_val v);
int jj_equal(jj_val a, jj_val b);
/* <0, 0, >0; fails for values Python cannot order. */
int jj_compare(jj_ctx *c, jj_val a, jj_val b, const char *op);
const char *jj_type_name(jj_val v);   /* Python's: 'str', 'int', 'dict', 'NoneType', ... */
void jj_write_str(jj_ctx *c, jj_buf *b, jj_val v);   /* str(v) */
void jj_write_repr(jj_ctx *c, jj_buf *b, jj_val v);  /* repr(v) */
jj_val jj_to_str(jj_ctx *c, jj_val v);
/* json.dumps(v, ensure_ascii=False, indent=indent (<0: none), sort_keys=sort). */
void jj_write_json(jj_ctx *c, jj_buf *b, jj_val v, int indent, int sort, int level);
/* Parse JSON text into values; fails naming the position. */
jj_val jj_parse_json(jj_ctx *c, const char *p, size_t n);

/* UTF-8 helpers: code points of s; byte offset of code point i (clamped to len). */
size_t jj_utf8_count(const char *p, size_t n);
size_t jj_utf8_offset(const char *p, size_t n, size_t i);
/* The byte length of Python whitespace at p (0 if none). */
size_t jj_space_at(const char *p, const char *end);
size_t jj_space_before(const char *begin, const char *p);

/* ---- parsing (lexer.c, parser.c) ---- */
enum {
    TK_EOF, TK_DATA, TK_VAR_BEGIN, TK_VAR_END, TK_BLOCK_BEGIN, TK_BLOCK_END,
    TK_NAME, TK_STRING, TK_INT, TK_FLOAT, TK_OP,
};
typedef struct {
    int t, line;
    const char *p;   /* TK_STRING: decoded; TK_OP: the operator */
    size_t n;
    int64_t i;
    double f;
} jj_token;
/* Tokens of the whole source (normalized newlines, trailing newline dropped, whitespace control
 * applied to the data tokens). */
jj_token *jj_lex(jj_ctx *c, const char *src, size_t len, size_t *ntok);

enum {
    /* statements */
    N_BODY, N_TEXT, N_OUTPUT, N_IF, N_FOR, N_SET, N_SETBLOCK, N_MACRO, N_FILTERBLOCK, N_WITH,
    N_BREAK, N_CONTINUE, N_CALLBLOCK,
    /* expressions */
    E_LIT, E_NAME, E_ATTR, E_ITEM, E_SLICE, E_CALL, E_FILTER, E_TEST, E_BIN, E_NEG, E_POS, E_NOT,
    E_AND, E_OR, E_COND, E_CMP, E_LIST, E_TUPLE, E_DICT,
};
enum { OP_ADD = 1, OP_SUB, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW, OP_CONCAT,
       OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE, OP_IN, OP_NOTIN };

typedef struct jj_node {
    int kind, line, op;
    jj_val lit;                  /* E_LIT */
    const char *name;            /* names: variables, attributes, filters, tests, macros */
    struct jj_node *a, *b, *c;   /* operands, conditions, ... */
    struct jj_node **kids;       /* statements of a body; arguments; items */
    int nkids;
    struct jj_node **kids2;      /* else body; keyword argument values; dict values */
    int nkids2;
    const char **names;          /* keyword argument names; macro parameters; loop targets */
    int nnames;
    int fid;                     /* E_FILTER / E_TEST: index in the table */
    int *ops;                    /* E_CMP: the operators between kids */
} jj_node;

jj_node *jj_parse(jj_ctx *c, const jj_token *toks, size_t ntok);

/* ---- evaluation (eval.c, filters.c, methods.c) ---- */
typedef struct jj_args {
    jj_val *pos;
    int npos;
    const char **kwn;
    jj_val *kwv;
    int nkw;
} jj_args;

jj_val jj_eval(jj_ctx *c, const jj_node *n);
void jj_exec_template(jj_ctx *c, const jj_node *root);
jj_val jj_getattr(jj_ctx *c, jj_val obj, const char *name);
jj_val jj_getitem(jj_ctx *c, jj_val obj, jj_val key);
/* Items of an iterable (list, tuple, dict keys, string characters, undefined = none). */
jj_list *jj_iter(jj_ctx *c, jj_val v);
jj_val jj_call(jj_ctx *c, jj_val f, const jj_args *a);

/* Filters and tests by name: index >= 0 or -1. */
int jj_filter_find(const char *name);
int jj_test_find(const char *name);
jj_val jj_filter_apply(jj_ctx *c, int fid, jj_val v, const jj_args *a);
int jj_test_apply(jj_ctx *c, int tid, jj_val v, const jj_args *a);
/* fmt % args, Python's printf-style formatting. */
jj_val jj_format(jj_ctx *c, jj_val fmt, const jj_val *args, int nargs);
/* str(v) with & < > " ' escaped, as Markup (Jinja's escape). */
jj_val jj_html_escape(jj_ctx *c, jj_val v);
/* Argument `i` by position or keyword `name`, or NULL. */
const jj_val *jj_arg(const jj_args *a, int i, const char *name);
jj_val jj_call_method(jj_ctx *c, jj_val self, const char *name, const jj_args *a);
int jj_has_method(jj_val self, const char *name);
jj_val jj_call_global(jj_ctx *c, int fn, const jj_args *a);
int jj_global_find(const char *name);
void jj_check_undefined(jj_ctx *c, jj_val v);   /* fails with the undefined's reason */

#endif
