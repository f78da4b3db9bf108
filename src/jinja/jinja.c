/* jinja/jinja — the public entry points: compile (lex + parse into the template's own arena) and
 * render (a fresh arena per call; errors longjmp here and are turned into a pl_status). */
#include "jinja/jj.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct pl_jinja {
    jj_ctx ctx;       /* its arena holds the tree */
    jj_node *root;
};

static pl_status report(jj_ctx *c) {
    if (c->nomem) return pl_fail(PL_ERR_NOMEM, "chat template: out of memory");
    return pl_fail(PL_ERR_INVALID_ARG, "%s", c->err);
}

pl_status pl_jinja_compile(const char *src, size_t len, pl_jinja **out) {
    *out = NULL;
    pl_jinja *t = calloc(1, sizeof *t);
    if (!t) return pl_fail(PL_ERR_NOMEM, "chat template: out of memory");
    t->ctx.arena.limit = 64u << 20;
    if (setjmp(t->ctx.jb)) {
        pl_status st = report(&t->ctx);
        jj_arena_free(&t->ctx.arena);
        free(t);
        return st;
    }
    size_t ntok;
    jj_token *toks = jj_lex(&t->ctx, src ? src : "", src ? len : 0, &ntok);
    t->root = jj_parse(&t->ctx, toks, ntok);
    *out = t;
    return PL_OK;
}

void pl_jinja_free(pl_jinja *t) {
    if (!t) return;
    jj_arena_free(&t->ctx.arena);
    free(t);
}

typedef struct {
    jj_ctx c;
    jj_buf out;
} render_state;

/* Separate from pl_jinja_render so that nothing it keeps in registers crosses the longjmp. */
static void run(render_state *r, const pl_jinja *t, const char *json, size_t len) {
    jj_ctx *c = &r->c;
    jj_val ctxv = jj_parse_json(c, json ? json : "{}", json ? len : 2);
    if (ctxv.t != JT_DICT) jj_fail(c, "the render context must be a JSON object");
    c->root = jj_alloc(c, sizeof *c->root);
    c->root->vars = jj_newdict(c, ctxv.u.d->n);
    c->root->parent = NULL;
    for (size_t i = 0; i < ctxv.u.d->n; i++) jj_dict_set(c, c->root->vars, ctxv.u.d->k[i], ctxv.u.d->v[i]);
    c->frame = c->root;
    jj_buf_put(c, &r->out, "", 0);
    c->out = &r->out;
    jj_exec_template(c, t->root);
}

pl_status pl_jinja_render(const pl_jinja *t, const char *context_json, size_t len,
                          const pl_jinja_options *opts, char **out, size_t *out_len) {
    *out = NULL;
    if (out_len) *out_len = 0;
    render_state *r = calloc(1, sizeof *r);
    if (!r) return pl_fail(PL_ERR_NOMEM, "chat template: out of memory");
    pl_jinja_options o = opts ? *opts : (pl_jinja_options){0};
    r->c.arena.limit = o.max_memory ? o.max_memory : 256u << 20;
    r->c.max_output = o.max_output ? o.max_output : 16u << 20;
    r->c.max_steps = o.max_steps ? o.max_steps : 50000000u;
    r->c.now = o.now;
    pl_status st = PL_OK;
    if (setjmp(r->c.jb)) {
        st = report(&r->c);
    } else {
        run(r, t, context_json, len);
        char *s = malloc(r->out.len + 1);
        if (!s) st = pl_fail(PL_ERR_NOMEM, "chat template: out of memory");
        else {
            memcpy(s, r->out.p, r->out.len);
            s[r->out.len] = '\0';
            *out = s;
            if (out_len) *out_len = r->out.len;
        }
    }
    jj_arena_free(&r->c.arena);
    free(r);
    return st;
}

pl_status pl_jinja_parse_date(const char *ymd, int64_t *out) {
    int y, m, d;
    char tail;
    if (!ymd || sscanf(ymd, "%4d-%2d-%2d%c", &y, &m, &d, &tail) != 3 || y < 1970 || m < 1 ||
        m > 12 || d < 1 || d > 31)
        return pl_fail(PL_ERR_INVALID_ARG, "'%s' is not a date YYYY-MM-DD (from 1970)", ymd ? ymd : "");
    /* days since 1970-01-01 (proleptic Gregorian) */
    int64_t yy = y - (m <= 2), era = yy / 400, yoe = yy - era * 400;
    int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    *out = (era * 146097 + doe - 719468) * 86400;
    return PL_OK;
}
