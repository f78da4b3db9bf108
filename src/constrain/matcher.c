/* constrain/matcher — the pushdown automaton's states and their advance by one byte.
 *
 * A state is a canonical set of stacks (see constrain.h). Advancing by byte c: every stack whose
 * top byte set holds c loses that top; the next element of the same alternative takes its place,
 * or, when the alternative ends there, nothing does (the frame is popped: tail calls do not grow
 * the stack). Then expansion: a stack whose top is a rule reference is replaced by one stack per
 * alternative of the rule, with the reference's return position under the alternative's first
 * element; this repeats until every top is a byte set (or the stack is empty: accepting). The
 * work list is LIFO in one arena, so the scratch grows to the largest state once and stays.
 */
#include "constrain/cons_internal.h"
#include "base/buf.h"

#include <stdlib.h>
#include <string.h>

#define NONE UINT32_MAX

struct pl_gscratch {
    uint32_t *arena;      /* work-list stacks, LIFO */
    size_t na, cap_a;
    uint32_t *wl;         /* [2 * nwl] (offset, len) into arena */
    size_t nwl, cap_wl;
    uint32_t *cur;        /* the stack being expanded */
    size_t cap_cur;
    uint32_t *out;        /* finished stacks */
    size_t nout, cap_out;
    uint32_t *ix;         /* [2 * nix] (offset, len) into out */
    size_t nix, cap_ix;
    pl_gstate tmp[2];     /* ping-pong states of a multi-byte advance */
    int failed;           /* out of memory, or too many stacks */
};

pl_gscratch *pl_gscratch_create(void) { return calloc(1, sizeof(pl_gscratch)); }

void pl_gscratch_destroy(pl_gscratch *s) {
    if (!s) return;
    pl_gstate_free(&s->tmp[0]);
    pl_gstate_free(&s->tmp[1]);
    PL_FREE_ALL(s->arena, s->wl, s->cur, s->out, s->ix, s);
}

void pl_gstate_free(pl_gstate *st) {
    free(st->v);
    memset(st, 0, sizeof *st);
}

pl_status pl_gstate_copy(pl_gstate *dst, const pl_gstate *src) {
    if (pl_array_reserve(&dst->v, &dst->cap, src->n, sizeof *dst->v))
        return pl_fail(PL_ERR_NOMEM, "structured output: out of memory");
    if (src->n) memcpy(dst->v, src->v, src->n * sizeof *src->v);
    dst->n = src->n;
    return PL_OK;
}

static void reset(pl_gscratch *s) { s->na = s->nwl = s->nout = s->nix = 0, s->failed = 0; }

/* Queue stack[0..len) (+ `top` unless NONE) for expansion. */
static void push_work(pl_gscratch *s, const uint32_t *stk, size_t len, uint32_t top) {
    size_t n = len + (top != NONE);
    if (pl_array_reserve(&s->arena, &s->cap_a, s->na + n + 1, sizeof *s->arena) ||
        pl_array_reserve(&s->wl, &s->cap_wl, 2 * s->nwl + 2, sizeof *s->wl)) {
        s->failed = 1;
        return;
    }
    if (len) memcpy(s->arena + s->na, stk, len * sizeof *stk);
    if (top != NONE) s->arena[s->na + len] = top;
    s->wl[2 * s->nwl] = (uint32_t)s->na;
    s->wl[2 * s->nwl + 1] = (uint32_t)n;
    s->nwl++;
    s->na += n;
}

static void emit(pl_gscratch *s, const uint32_t *stk, size_t len) {
    if (s->nix >= PL_GSTATE_MAX_STACKS ||
        pl_array_reserve(&s->out, &s->cap_out, s->nout + len + 1, sizeof *s->out) ||
        pl_array_reserve(&s->ix, &s->cap_ix, 2 * s->nix + 2, sizeof *s->ix)) {
        s->failed = 1;
        return;
    }
    if (len) memcpy(s->out + s->nout, stk, len * sizeof *stk);
    s->ix[2 * s->nix] = (uint32_t)s->nout;
    s->ix[2 * s->nix + 1] = (uint32_t)len;
    s->nix++;
    s->nout += len;
}

static void expand_all(const pl_grammar *g, pl_gscratch *s) {
    while (s->nwl && !s->failed) {
        s->nwl--;
        size_t off = s->wl[2 * s->nwl], len = s->wl[2 * s->nwl + 1];
        if (pl_array_reserve(&s->cur, &s->cap_cur, len + 1, sizeof *s->cur)) {
            s->failed = 1;
            return;
        }
        if (len) memcpy(s->cur, s->arena + off, len * sizeof *s->cur);
        s->na = off;
        if (len == 0 || EL_KIND(g->el[s->cur[len - 1]]) == K_SET) {
            emit(s, s->cur, len);
            continue;
        }
        uint32_t top = s->cur[len - 1], r = EL_ARG(g->el[top]);
        size_t base = len - 1;
        if (!EL_ENDS(g->el[top + 1])) s->cur[base++] = top + 1;
        if (base >= PL_GSTATE_MAX_DEPTH) continue; /* nested too deep: this path dies */
        for (uint32_t a = g->rule_alt0[r]; a < g->rule_alt0[r + 1]; a++) {
            uint32_t first = g->alt_first[a];
            push_work(s, s->cur, base, EL_ENDS(g->el[first]) ? NONE : first);
        }
    }
}

/* (offset, len) pairs into base: shorter first, then by content. */
static int cmp_stack(const void *a, const void *b, void *base) {
    const uint32_t *x = a, *y = b, *d = base;
    if (x[1] != y[1]) return x[1] < y[1] ? -1 : 1;
    if (!x[1]) return 0;
    return memcmp(d + x[0], d + y[0], x[1] * sizeof(uint32_t));
}

/* Sort and deduplicate the finished stacks into st. 0, or -1 (message set). */
static int finish(pl_gscratch *s, pl_gstate *st) {
    if (s->failed && s->nix >= PL_GSTATE_MAX_STACKS)
        return pl_fail(PL_ERR_INVALID_ARG, "structured output: the constraint is too ambiguous "
                       "(more than %d parses at once)", PL_GSTATE_MAX_STACKS), -1;
    if (s->failed) return pl_fail(PL_ERR_NOMEM, "structured output: out of memory"), -1;
    if (s->nix > 1) qsort_r(s->ix, s->nix, 2 * sizeof *s->ix, cmp_stack, s->out);
    size_t need = 1 + s->nix + s->nout;
    if (pl_array_reserve(&st->v, &st->cap, need, sizeof *st->v))
        return pl_fail(PL_ERR_NOMEM, "structured output: out of memory"), -1;
    size_t w = 1, count = 0;
    for (size_t i = 0; i < s->nix; i++) {
        if (i && !cmp_stack(&s->ix[2 * i], &s->ix[2 * i - 2], s->out)) continue;
        size_t len = s->ix[2 * i + 1];
        st->v[w++] = (uint32_t)len;
        if (len) memcpy(st->v + w, s->out + s->ix[2 * i], len * sizeof *st->v);
        w += len;
        count++;
    }
    st->v[0] = (uint32_t)count;
    st->n = w;
    return 0;
}

pl_status pl_gstate_start(const pl_grammar *g, pl_gscratch *s, pl_gstate *st) {
    reset(s);
    for (uint32_t a = g->rule_alt0[g->root]; a < g->rule_alt0[g->root + 1]; a++) {
        uint32_t first = g->alt_first[a];
        push_work(s, NULL, 0, EL_ENDS(g->el[first]) ? NONE : first);
    }
    expand_all(g, s);
    return finish(s, st) ? (s->nix >= PL_GSTATE_MAX_STACKS ? PL_ERR_INVALID_ARG : PL_ERR_NOMEM)
                         : PL_OK;
}

/* in: a state's array; out: the state after byte c. 0, or -1 (message set). */
int pl_gstate_step(const pl_grammar *g, pl_gscratch *s, const uint32_t *in, uint8_t c,
                   pl_gstate *out) {
    reset(s);
    const uint32_t *p = in + 1;
    for (uint32_t k = 0; k < in[0]; k++) {
        uint32_t len = p[0];
        const uint32_t *stk = p + 1;
        p += 1 + len;
        if (!len) continue;
        uint32_t top = stk[len - 1];
        if (!byteset_has(&g->sets[EL_ARG(g->el[top])], c)) continue;
        push_work(s, stk, len - 1, EL_ENDS(g->el[top + 1]) ? NONE : top + 1);
    }
    expand_all(g, s);
    return finish(s, out);
}

int pl_gstate_advance(const pl_grammar *g, pl_gscratch *s, pl_gstate *st, const uint8_t *bytes,
                      size_t n) {
    if (n == 0) return 1;
    const uint32_t *cur = st->v;
    for (size_t i = 0; i < n; i++) {
        pl_gstate *o = &s->tmp[i & 1];
        if (pl_gstate_step(g, s, cur, bytes[i], o)) return -1;
        if (o->v[0] == 0) return 0;
        cur = o->v;
    }
    return pl_gstate_copy(st, &s->tmp[(n - 1) & 1]) == PL_OK ? 1 : -1;
}

int pl_gstate_accepting(const pl_gstate *st) { return st->n >= 2 && st->v[0] > 0 && st->v[1] == 0; }

int pl_gstate_dead(const pl_gstate *st) { return st->n == 0 || st->v[0] == 0; }

int pl_grammar_matches(const pl_grammar *g, const char *str, size_t n) {
    pl_gscratch *s = pl_gscratch_create();
    pl_gstate st = {0};
    int rc = -1;
    if (s && pl_gstate_start(g, s, &st) == PL_OK) {
        rc = pl_gstate_advance(g, s, &st, (const uint8_t *)str, n);
        if (rc == 1) rc = pl_gstate_accepting(&st);
    }
    pl_gstate_free(&st);
    pl_gscratch_destroy(s);
    return rc;
}
