/* tokenizer/hashmap — a string -> int32 map with open addressing and linear probing.
 *
 * Built once at load (token texts, BPE merges) and only read afterwards, so there is no delete.
 * The table stays at most half full; keys are not copied (they live in the tokenizer's arenas).
 */
#include "tokenizer/tok_internal.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

static uint64_t key_hash(const char *key, size_t len) {
    uint64_t h = XXH3_64bits(key, len);
    return h ? h : 1; /* 0 marks an empty slot */
}

pl_status pl_tok_map_init(pl_tok_map *m, size_t expected) {
    size_t cap = 16;
    while (cap < expected * 2) cap <<= 1;
    m->slots = calloc(cap, sizeof *m->slots);
    if (!m->slots) return pl_fail(PL_ERR_NOMEM, "tokenizer: cannot allocate a %zu-slot map", cap);
    m->cap = cap;
    m->n = 0;
    return PL_OK;
}

void pl_tok_map_destroy(pl_tok_map *m) {
    free(m->slots);
    m->slots = NULL;
    m->cap = m->n = 0;
}

static pl_tok_slot *find_slot(const pl_tok_map *m, const char *key, size_t len, uint64_t h) {
    size_t mask = m->cap - 1;
    for (size_t i = (size_t)h & mask;; i = (i + 1) & mask) {
        pl_tok_slot *s = &m->slots[i];
        if (s->hash == 0) return s;
        if (s->hash == h && s->len == len && memcmp(s->key, key, len) == 0) return s;
    }
}

static int grow(pl_tok_map *m) {
    size_t cap = m->cap * 2;
    pl_tok_slot *slots = calloc(cap, sizeof *slots);
    if (!slots) return 0;
    pl_tok_map bigger = {slots, cap, m->n};
    for (size_t i = 0; i < m->cap; i++) {
        const pl_tok_slot *s = &m->slots[i];
        if (s->hash) *find_slot(&bigger, s->key, s->len, s->hash) = *s;
    }
    free(m->slots);
    *m = bigger;
    return 1;
}

int pl_tok_map_put(pl_tok_map *m, const char *key, size_t len, int32_t val, int32_t *old) {
    uint64_t h = key_hash(key, len);
    pl_tok_slot *s = find_slot(m, key, len, h);
    if (s->hash) {
        if (old) *old = s->val;
        return 0;
    }
    if ((m->n + 1) * 2 > m->cap) {
        if (!grow(m)) return -1;
        s = find_slot(m, key, len, h);
    }
    s->hash = h;
    s->key = key;
    s->len = (uint32_t)len;
    s->val = val;
    m->n++;
    return 1;
}

int32_t pl_tok_map_get(const pl_tok_map *m, const char *key, size_t len) {
    if (m->cap == 0) return -1;
    const pl_tok_slot *s = find_slot(m, key, len, key_hash(key, len));
    return s->hash ? s->val : -1;
}
