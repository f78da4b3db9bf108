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
 * The walk runs on a lazily built DFA: each distinct matcher state met is interned once (an id,
 * its words, the union of its stacks' top byte sets for pruning) and each (state id, byte)
 * transition is computed by the matcher once and then looked up in a hash table. A trie node then
 * costs one lookup instead of a stack expansion, and states repeat a lot: inside a JSON string
 * the walk meets the same few dozen states at every depth. The DFA is per grammar and is dropped
 * whole (before a walk, never during one) when it exceeds DFA_MAX_STATES.
 *
 * Cache: per grammar, a hash table (xxHash of the state's words) of the masks already computed,
 * with an LRU list; at most CACHE_BYTES of masks per grammar and ALL_CACHE_BYTES in all of them
 * (past that, the grammar holding the most masks loses its least recently used one). Grammars are shared by key (their
 * GBNF text); unreferenced ones stay for reuse, at most KEEP_IDLE of them.
 */
#include "constrain/cons_internal.h"
#include "base/buf.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#define NONE UINT32_MAX
enum { N_BUCKETS = 1024, KEEP_IDLE = 16, DFA_MAX_STATES = 1 << 16, DFA_MAX_WORDS = 1 << 24 };
#define DEAD (UINT32_MAX - 1)
#define CACHE_BYTES ((size_t)32 << 20)
#define ALL_CACHE_BYTES ((size_t)128 << 20)

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

typedef struct {
    uint32_t off, n;         /* words[off .. off + n) */
    pl_byteset next;         /* bytes some stack's top accepts */
} dstate;

/* The lazily built DFA over matcher states (engine thread). */
typedef struct {
    uint32_t *words;
    size_t n_words, cap_words;
    dstate *st;              /* [n_st] interned states */
    size_t n_st, cap_st;
    uint32_t *sidx;          /* [scap] open addressing: state ids by content hash (NONE: empty) */
    size_t scap;
    uint64_t *tkey;          /* [tcap] transitions: (id << 8 | byte) + 1 (0: empty) */
    uint32_t *tval;          /* next state id, or DEAD */
    size_t tcap, tn;
} dfa;

struct pl_cons {
    char *key;               /* GBNF text */
    dfa d;
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
    size_t cached, max_cached; /* masks held by all grammars, and the bound (under mu) */
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
    pl_gstate buf[2];        /* a transition's input and output states */
    uint64_t hits, misses, visited;
};

pl_cons_registry *pl_cons_registry_create(const pl_tokenizer *tok) {
    pl_cons_registry *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->tok = tok;
    r->n_vocab = pl_tokenizer_n_vocab(tok);
    r->words = ((size_t)r->n_vocab + 63) / 64;
    r->max_cached = ALL_CACHE_BYTES / (r->words * 8 + 64);
    if (r->max_cached < 64) r->max_cached = 64;
    pthread_mutex_init(&r->mu, NULL);
    return r;
}

static void dfa_clear(dfa *d) {
    PL_FREE_ALL(d->words, d->st, d->sidx, d->tkey, d->tval);
    memset(d, 0, sizeof *d);
}

static void cons_destroy(pl_cons *c) {
    if (!c) return;
    dfa_clear(&c->d);
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
    pl_gstate_free(&r->buf[0]);
    pl_gstate_free(&r->buf[1]);
    pl_gscratch_destroy(r->scr);
    PL_FREE_ALL(r->nodes, r->tok_next, r->piece_off, r->pieces, r->is_eog);
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
    if (!r->scr) goto oom;
    free(buf);
    r->built = 1;
    return PL_OK;
oom: /* leave the registry unbuilt and empty: the next mask request builds it again from scratch */
    free(buf);
    PL_FREE_ALL(r->nodes, r->tok_next, r->piece_off, r->pieces, r->is_eog);
    r->nodes = NULL;
    r->tok_next = r->piece_off = NULL;
    r->pieces = NULL;
    r->is_eog = NULL;
    r->n_nodes = r->cap_nodes = 0;
    r->max_len = 0;
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
        r->cached -= c->n_entries;
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

void pl_cons_registry_limit(pl_cons_registry *r, size_t max_masks) {
    pthread_mutex_lock(&r->mu);
    r->max_cached = max_masks;
    pthread_mutex_unlock(&r->mu);
}

void pl_cons_get_stats(pl_cons_registry *r, pl_cons_stats *s) {
    memset(s, 0, sizeof *s);
    s->mask_hits = r->hits;
    s->mask_misses = r->misses;
    s->trie_nodes = r->visited;
    pthread_mutex_lock(&r->mu);
    for (pl_cons *c = r->list; c; c = c->next) s->grammars++;
    s->cached_masks = r->cached;
    pthread_mutex_unlock(&r->mu);
}

/* ---- masks ---- */

/* ---- the DFA ---- */

static uint64_t hash_words(const uint32_t *v, size_t n) { return XXH3_64bits(v, n * sizeof *v); }

/* Grow the state index to 2x (rehash); -1 no memory. */
static int sidx_grow(dfa *d) {
    size_t cap = d->scap ? 2 * d->scap : 1024;
    uint32_t *t = malloc(cap * sizeof *t);
    if (!t) return -1;
    memset(t, 0xff, cap * sizeof *t);
    for (size_t i = 0; i < d->n_st; i++) {
        size_t h = (size_t)hash_words(d->words + d->st[i].off, d->st[i].n) & (cap - 1);
        while (t[h] != NONE) h = (h + 1) & (cap - 1);
        t[h] = (uint32_t)i;
    }
    free(d->sidx);
    d->sidx = t;
    d->scap = cap;
    return 0;
}

/* The id of state v[0..n) (interned if new); NONE when out of memory. */
static uint32_t intern(const pl_grammar *g, dfa *d, const uint32_t *v, size_t n) {
    if (2 * (d->n_st + 1) > d->scap && sidx_grow(d)) return NONE;
    uint64_t h = hash_words(v, n);
    size_t i = (size_t)h & (d->scap - 1);
    for (; d->sidx[i] != NONE; i = (i + 1) & (d->scap - 1)) {
        const dstate *s = &d->st[d->sidx[i]];
        if (s->n == n && !memcmp(d->words + s->off, v, n * sizeof *v)) return d->sidx[i];
    }
    if (pl_array_reserve(&d->words, &d->cap_words, d->n_words + n, sizeof *d->words) ||
        pl_array_reserve(&d->st, &d->cap_st, d->n_st + 1, sizeof *d->st))
        return NONE;
    dstate *s = &d->st[d->n_st];
    s->off = (uint32_t)d->n_words;
    s->n = (uint32_t)n;
    memcpy(d->words + d->n_words, v, n * sizeof *v);
    d->n_words += n;
    memset(&s->next, 0, sizeof s->next);
    const uint32_t *p = v + 1;
    for (uint32_t k = 0; k < v[0]; k++) {
        uint32_t len = p[0];
        if (len) {
            const pl_byteset *b = &g->sets[EL_ARG(g->el[p[len]])];
            for (int j = 0; j < 32; j++) s->next.b[j] |= b->b[j];
        }
        p += 1 + len;
    }
    d->sidx[i] = (uint32_t)d->n_st;
    return (uint32_t)d->n_st++;
}

static int trans_grow(dfa *d) {
    size_t cap = d->tcap ? 2 * d->tcap : 4096;
    uint64_t *k = calloc(cap, sizeof *k);
    uint32_t *v = malloc(cap * sizeof *v);
    if (!k || !v) {
        PL_FREE_ALL(k, v);
        return -1;
    }
    for (size_t i = 0; i < d->tcap; i++) {
        if (!d->tkey[i]) continue;
        size_t h = (size_t)XXH3_64bits(&d->tkey[i], sizeof *d->tkey) & (cap - 1);
        while (k[h]) h = (h + 1) & (cap - 1);
        k[h] = d->tkey[i];
        v[h] = d->tval[i];
    }
    PL_FREE_ALL(d->tkey, d->tval);
    d->tkey = k;
    d->tval = v;
    d->tcap = cap;
    return 0;
}

/* The state after byte b from state id: an id, DEAD, or NONE (out of memory / too complex). */
static uint32_t trans(pl_cons_registry *r, pl_cons *c, uint32_t id, uint8_t b) {
    dfa *d = &c->d;
    if (2 * (d->tn + 1) > d->tcap && trans_grow(d)) return NONE;
    uint64_t key = ((uint64_t)id << 8 | b) + 1;
    size_t h = (size_t)XXH3_64bits(&key, sizeof key) & (d->tcap - 1);
    for (; d->tkey[h]; h = (h + 1) & (d->tcap - 1))
        if (d->tkey[h] == key) return d->tval[h];
    /* the state's words move when intern grows the array: step from a copy */
    pl_gstate *tmp = &r->buf[1];
    const dstate *s = &d->st[id];
    if (pl_array_reserve(&tmp->v, &tmp->cap, s->n, sizeof *tmp->v)) return NONE;
    memcpy(tmp->v, d->words + s->off, s->n * sizeof *tmp->v);
    pl_gstate *out = &r->buf[0];
    if (pl_gstate_step(c->g, r->scr, tmp->v, b, out)) return NONE;
    uint32_t next = out->v[0] == 0 ? DEAD : intern(c->g, d, out->v, out->n);
    if (next == NONE) return NONE;
    d->tkey[h] = key;
    d->tval[h] = next;
    d->tn++;
    return next;
}

/* Mark every token reachable from trie node `node` in DFA state `id`. 0, or -1. */
static int walk(pl_cons_registry *r, pl_cons *c, uint32_t node, uint32_t id, centry *e) {
    for (uint32_t ch = r->nodes[node].child; ch != NONE; ch = r->nodes[ch].sibling) {
        const tnode *t = &r->nodes[ch];
        if (!byteset_has(&c->d.st[id].next, t->byte)) continue;
        r->visited++;
        uint32_t nid = trans(r, c, id, t->byte);
        if (nid == NONE) return -1;
        if (nid == DEAD) continue;
        for (uint32_t tok = t->tok; tok != NONE; tok = r->tok_next[tok]) {
            e->mask[tok >> 6] |= 1ull << (tok & 63);
            e->n_allowed++;
        }
        if (t->child != NONE && walk(r, c, ch, nid, e)) return -1;
    }
    return 0;
}

static void lru_unlink(pl_cons *c, centry *e);

/* Drop c's least recently used mask (never the only one, which the caller may hold). */
static void evict_lru(pl_cons *c) {
    centry *old = c->tail;
    if (!old || old == c->head) return;
    lru_unlink(c, old);
    for (centry **q = &c->buckets[old->hash & (N_BUCKETS - 1)]; *q; q = &(*q)->hnext)
        if (*q == old) {
            *q = old->hnext;
            break;
        }
    PL_FREE_ALL(old->state, old->mask, old);
    c->n_entries--;
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
    if (c->d.n_st > DFA_MAX_STATES || c->d.n_words > DFA_MAX_WORDS) dfa_clear(&c->d); /* between walks */
    uint32_t root = intern(c->g, &c->d, st->v, st->n);
    centry *e = calloc(1, sizeof *e);
    if (root == NONE || !e || !(e->mask = calloc(r->words, sizeof *e->mask)) ||
        !(e->state = malloc(st->n * sizeof *st->v)) || walk(r, c, 0, root, e)) {
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
    c->n_entries++;
    int replaced = c->n_entries > c->max_entries;
    if (replaced) evict_lru(c);
    /* The bound over all grammars: the registry's lock keeps idle grammars from being freed
     * meanwhile; the caches themselves are engine-thread data, as this call is. */
    pthread_mutex_lock(&r->mu);
    if (!replaced) r->cached++;
    while (r->cached > r->max_cached) {
        pl_cons *big = c;
        for (pl_cons *o = r->list; o; o = o->next)
            if (o->n_entries > big->n_entries) big = o;
        if (big->n_entries <= 1) break;
        evict_lru(big);
        r->cached--;
    }
    pthread_mutex_unlock(&r->mu);
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
