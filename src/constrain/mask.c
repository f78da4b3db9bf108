/* constrain/mask — the vocabulary's byte trie, the registry of compiled grammars and the
 * per-state allowed-token cache (see constrain.h).
 *
 * Trie: one node per distinct prefix of the tokens' pieces (first child / next sibling lists);
 * a node lists the tokens whose piece ends there (several tokens can share a piece, e.g. a byte
 * token and a one-letter token). Computing a state's mask is a depth-first walk from the root
 * that advances the automaton by each edge's byte and abandons a branch as soon as the state
 * dies, so a state that allows few bytes visits few nodes. The matcher states along the path
 * live in one array per depth, grown once.
 *
 * Cache: per grammar, a hash table (xxHash of the state's words) of the masks already computed,
 * with an LRU list; at most CACHE_BYTES of masks per grammar. Grammars are shared by key (their
 * GBNF text); unreferenced ones stay for reuse, at most KEEP_IDLE of them.
 */
#include "constrain/cons_internal.h"
#include "base/buf.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#define NONE UINT32_MAX
enum { N_BUCKETS = 1024, KEEP_IDLE = 16 };
#define CACHE_BYTES ((size_t)32 << 20)

typedef struct {
    uint32_t child, sibling; /* first child, next sibling (NONE: none) */
    uint32_t tok;            /* first token whose piece ends here (NONE: none) */
    uint8_t byte;            /* the edge's byte */
} tnode;

typedef struct centry {
    uint64_t hash;
    uint32_t *state;         /* the state's words */
    size_t n;
    uint64_t *mask;          /* [words] */
    int32_t n_allowed;
    struct centry *hnext, *prev, *next; /* bucket chain; LRU (head = most recent) */
} centry;

struct pl_cons {
    char *key;               /* GBNF text */
    pl_grammar *g;
    int refs;                /* under the registry's mutex */
    uint64_t used;           /* registry clock at the last acquire (idle eviction order) */
    centry *buckets[N_BUCKETS];
    centry *head, *tail;
    size_t n_entries, max_entries;
    pl_cons *next;
};

struct pl_cons_registry {
    const pl_tokenizer *tok;
    int32_t n_vocab;
    size_t words;            /* 64-bit words per mask */
    pthread_mutex_t mu;      /* the list and reference counts */
    pl_cons *list;
    uint64_t clock;
    /* engine thread: */
    int built;
    tnode *nodes;
    size_t n_nodes, cap_nodes;
    uint32_t *tok_next;      /* [n_vocab] next token with the same piece */
    uint32_t *piece_off;     /* [n_vocab + 1] pieces[piece_off[i] .. piece_off[i+1]) */
    uint8_t *pieces;
    uint8_t *is_eog;         /* [n_vocab] */
    size_t max_len;          /* longest piece */
    pl_gscratch *scr;
    pl_gstate *level;        /* [max_len + 1] states along the walk */
    uint64_t hits, misses, visited;
};

pl_cons_registry *pl_cons_registry_create(const pl_tokenizer *tok) {
    pl_cons_registry *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->tok = tok;
    r->n_vocab = pl_tokenizer_n_vocab(tok);
    r->words = ((size_t)r->n_vocab + 63) / 64;
    pthread_mutex_init(&r->mu, NULL);
    return r;
}

static void cons_destroy(pl_cons *c) {
    if (!c) return;
    for (centry *e = c->head, *n; e; e = n) {
        n = e->next;
        PL_FREE_ALL(e->state, e->mask, e);
    }
    pl_grammar_destroy(c->g);
    free(c->key);
    free(c);
}

void pl_cons_registry_destroy(pl_cons_registry *r) {
    if (!r) return;
    for (pl_cons *c = r->list, *n; c; c = n) {
        n = c->next;
        cons_destroy(c);
    }
    if (r->level)
        for (size_t i = 0; i <= r->max_len; i++) pl_gstate_free(&r->level[i]);
    pl_gscratch_destroy(r->scr);
    PL_FREE_ALL(r->nodes, r->tok_next, r->piece_off, r->pieces, r->is_eog, r->level);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

/* ---- the trie (built on first use, engine thread) ---- */

static int trie_child(pl_cons_registry *r, uint32_t parent, uint8_t b, uint32_t *out) {
    uint32_t *link = &r->nodes[parent].child;
    for (uint32_t c = *link; c != NONE; c = r->nodes[c].sibling)
        if (r->nodes[c].byte == b) return *out = c, 0;
    if (pl_array_reserve(&r->nodes, &r->cap_nodes, r->n_nodes + 1, sizeof *r->nodes)) return -1;
    uint32_t id = (uint32_t)r->n_nodes++;
    r->nodes[id] = (tnode){.child = NONE, .sibling = r->nodes[parent].child, .tok = NONE, .byte = b};
    r->nodes[parent].child = id;
    *out = id;
    return 0;
}

static pl_status build(pl_cons_registry *r) {
    if (r->built) return PL_OK;
    const int32_t V = r->n_vocab;
    size_t cap = pl_tokenizer_max_piece_len(r->tok) + 1, total = 0;
    char *buf = malloc(cap);
    r->tok_next = malloc((size_t)V * sizeof *r->tok_next);
    r->piece_off = malloc(((size_t)V + 1) * sizeof *r->piece_off);
    r->is_eog = calloc((size_t)V, 1);
    if (!buf || !r->tok_next || !r->piece_off || !r->is_eog) goto oom;
    for (int32_t i = 0; i < V; i++) {
        pl_token_type t = pl_tokenizer_token_type(r->tok, i);
        if (t == PL_TOKEN_CONTROL || t == PL_TOKEN_UNKNOWN || t == PL_TOKEN_UNUSED) continue;
        total += pl_token_to_piece(r->tok, i, buf, cap, 0);
    }
    r->pieces = malloc(total ? total : 1);
    if (!r->pieces || pl_array_reserve(&r->nodes, &r->cap_nodes, 1, sizeof *r->nodes)) goto oom;
    r->nodes[0] = (tnode){.child = NONE, .sibling = NONE, .tok = NONE};
    r->n_nodes = 1;
    size_t off = 0;
    for (int32_t i = 0; i < V; i++) {
        r->piece_off[i] = (uint32_t)off;
        r->tok_next[i] = NONE;
        r->is_eog[i] = (uint8_t)pl_tokenizer_is_eog(r->tok, i);
        pl_token_type t = pl_tokenizer_token_type(r->tok, i);
        if (t == PL_TOKEN_CONTROL || t == PL_TOKEN_UNKNOWN || t == PL_TOKEN_UNUSED) continue;
        size_t n = pl_token_to_piece(r->tok, i, buf, cap, 0);
        if (n == 0) continue;
        memcpy(r->pieces + off, buf, n);
        off += n;
        if (n > r->max_len) r->max_len = n;
        uint32_t node = 0;
        for (size_t k = 0; k < n; k++)
            if (trie_child(r, node, (uint8_t)buf[k], &node)) goto oom;
        r->tok_next[i] = r->nodes[node].tok;
        r->nodes[node].tok = (uint32_t)i;
    }
    r->piece_off[V] = (uint32_t)off;
    r->scr = pl_gscratch_create();
    r->level = calloc(r->max_len + 1, sizeof *r->level);
    if (!r->scr || !r->level) goto oom;
    free(buf);
    r->built = 1;
    return PL_OK;
oom:
    free(buf);
    return pl_fail(PL_ERR_NOMEM, "structured output: out of memory building the token trie");
}

/* ---- the registry ---- */

pl_status pl_cons_start(const pl_cons *c, pl_gstate *st) {
    pl_gscratch *s = pl_gscratch_create();
    if (!s) return pl_fail(PL_ERR_NOMEM, "structured output: out of memory");
    pl_status rc = pl_gstate_start(c->g, s, st);
    pl_gscratch_destroy(s);
    return rc;
}

static pl_cons *find(pl_cons_registry *r, const char *key) {
    for (pl_cons *c = r->list; c; c = c->next)
        if (!strcmp(c->key, key)) {
            c->refs++;
            c->used = ++r->clock;
            return c;
        }
    return NULL;
}

/* Drop idle grammars beyond KEEP_IDLE, oldest first (under the mutex). */
static void evict_idle(pl_cons_registry *r) {
    for (;;) {
        int idle = 0;
        pl_cons **oldest = NULL;
        for (pl_cons **p = &r->list; *p; p = &(*p)->next)
            if ((*p)->refs == 0) {
                idle++;
                if (!oldest || (*p)->used < (*oldest)->used) oldest = p;
            }
        if (idle <= KEEP_IDLE) return;
        pl_cons *c = *oldest;
        *oldest = c->next;
        cons_destroy(c);
    }
}

pl_status pl_cons_acquire(pl_cons_registry *r, pl_constraint_kind kind, const char *text,
                          const char *const *choices, int32_t n_choices, pl_cons **out) {
    *out = NULL;
    char *key;
    PL_TRY(pl_cons_to_gbnf(kind, text, choices, n_choices, &key));
    pthread_mutex_lock(&r->mu);
    pl_cons *c = find(r, key);
    pthread_mutex_unlock(&r->mu);
    if (c) {
        free(key);
        *out = c;
        return PL_OK;
    }
    c = calloc(1, sizeof *c);
    if (!c) {
        free(key);
        return pl_fail(PL_ERR_NOMEM, "structured output: out of memory");
    }
    c->key = key;
    pl_status st = pl_grammar_parse(key, &c->g);
    pl_gstate s0 = {0};
    if (st == PL_OK) st = pl_cons_start(c, &s0); /* too ambiguous a start fails here */
    if (st == PL_OK && pl_gstate_dead(&s0))
        st = pl_fail(PL_ERR_INVALID_ARG, "structured output: the constraint matches nothing");
    pl_gstate_free(&s0);
    if (st != PL_OK) {
        cons_destroy(c);
        return st;
    }
    size_t mask_bytes = r->words * 8 + 64;
    c->max_entries = CACHE_BYTES / mask_bytes;
    if (c->max_entries < 16) c->max_entries = 16;
    pthread_mutex_lock(&r->mu);
    pl_cons *other = find(r, key); /* another thread compiled it meanwhile */
    if (!other) {
        c->refs = 1;
        c->used = ++r->clock;
        c->next = r->list;
        r->list = c;
    }
    pthread_mutex_unlock(&r->mu);
    if (other) cons_destroy(c);
    *out = other ? other : c;
    return PL_OK;
}

void pl_cons_release(pl_cons_registry *r, pl_cons *c) {
    if (!c) return;
    pthread_mutex_lock(&r->mu);
    c->refs--;
    evict_idle(r);
    pthread_mutex_unlock(&r->mu);
}

const pl_grammar *pl_cons_grammar(const pl_cons *c) { return c->g; }

void pl_cons_get_stats(pl_cons_registry *r, pl_cons_stats *s) {
    memset(s, 0, sizeof *s);
    s->mask_hits = r->hits;
    s->mask_misses = r->misses;
    s->trie_nodes = r->visited;
    pthread_mutex_lock(&r->mu);
    for (pl_cons *c = r->list; c; c = c->next) s->grammars++;
    pthread_mutex_unlock(&r->mu);
}

/* ---- masks ---- */

/* Mark every token reachable from trie node `node` in state level[d]. 0, or -1 (no memory). */
static int walk(pl_cons_registry *r, const pl_grammar *g, uint32_t node, size_t d, centry *e) {
    const uint32_t *st = r->level[d].v;
    pl_byteset next = {{0}}; /* the bytes some stack's top accepts */
    const uint32_t *p = st + 1;
    for (uint32_t k = 0; k < st[0]; k++) {
        uint32_t len = p[0];
        if (len) {
            const pl_byteset *s = &g->sets[EL_ARG(g->el[p[len]])];
            for (int i = 0; i < 32; i++) next.b[i] |= s->b[i];
        }
        p += 1 + len;
    }
    for (uint32_t c = r->nodes[node].child; c != NONE; c = r->nodes[c].sibling) {
        const tnode *t = &r->nodes[c];
        if (!byteset_has(&next, t->byte)) continue;
        r->visited++;
        if (pl_gstate_step(g, r->scr, r->level[d].v, t->byte, &r->level[d + 1])) return -1;
        if (r->level[d + 1].v[0] == 0) continue;
        for (uint32_t id = t->tok; id != NONE; id = r->tok_next[id]) {
            e->mask[id >> 6] |= 1ull << (id & 63);
            e->n_allowed++;
        }
        if (t->child != NONE && walk(r, g, c, d + 1, e)) return -1;
    }
    return 0;
}

static void lru_unlink(pl_cons *c, centry *e) {
    if (e->prev) e->prev->next = e->next;
    else c->head = e->next;
    if (e->next) e->next->prev = e->prev;
    else c->tail = e->prev;
}

static void lru_front(pl_cons *c, centry *e) {
    e->prev = NULL;
    e->next = c->head;
    if (c->head) c->head->prev = e;
    c->head = e;
    if (!c->tail) c->tail = e;
}

const uint64_t *pl_cons_mask(pl_cons_registry *r, pl_cons *c, const pl_gstate *st,
                             int32_t *n_allowed) {
    uint64_t h = XXH3_64bits(st->v, st->n * sizeof *st->v);
    centry **b = &c->buckets[h & (N_BUCKETS - 1)];
    for (centry *e = *b; e; e = e->hnext)
        if (e->hash == h && e->n == st->n && !memcmp(e->state, st->v, st->n * sizeof *st->v)) {
            r->hits++;
            lru_unlink(c, e);
            lru_front(c, e);
            *n_allowed = e->n_allowed;
            return e->mask;
        }
    if (build(r) != PL_OK) return NULL;
    r->misses++;
    centry *e = calloc(1, sizeof *e);
    if (!e || !(e->mask = calloc(r->words, sizeof *e->mask)) ||
        !(e->state = malloc(st->n * sizeof *st->v)) || pl_gstate_copy(&r->level[0], st) != PL_OK ||
        walk(r, c->g, 0, 0, e)) {
        if (e) PL_FREE_ALL(e->mask, e->state, e);
        return NULL;
    }
    if (pl_gstate_accepting(st))
        for (int32_t id = 0; id < r->n_vocab; id++)
            if (r->is_eog[id]) e->mask[id >> 6] |= 1ull << (id & 63), e->n_allowed++;
    memcpy(e->state, st->v, st->n * sizeof *st->v);
    e->n = st->n;
    e->hash = h;
    e->hnext = *b;
    *b = e;
    lru_front(c, e);
    if (++c->n_entries > c->max_entries) { /* evict the least recently used (never e) */
        centry *old = c->tail;
        lru_unlink(c, old);
        for (centry **q = &c->buckets[old->hash & (N_BUCKETS - 1)]; *q; q = &(*q)->hnext)
            if (*q == old) {
                *q = old->hnext;
                break;
            }
        PL_FREE_ALL(old->state, old->mask, old);
        c->n_entries--;
    }
    *n_allowed = e->n_allowed;
    return e->mask;
}

int pl_cons_advance(pl_cons_registry *r, pl_cons *c, pl_gstate *st, int32_t id) {
    if (build(r) != PL_OK) return -1;
    if (id < 0 || id >= r->n_vocab) return 0;
    if (r->is_eog[id]) return 1;
    uint32_t a = r->piece_off[id], z = r->piece_off[id + 1];
    if (a == z) return 0;
    return pl_gstate_advance(c->g, r->scr, st, r->pieces + a, z - a);
}
