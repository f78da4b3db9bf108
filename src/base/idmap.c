/* base/idmap — see idmap.h. */
#include "base/idmap.h"

#include <stdlib.h>

static size_t slot_of(uint64_t k, size_t cap) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return (size_t)k & (cap - 1);
}

void pl_idmap_init(pl_idmap *m) {
    m->keys = NULL;
    m->vals = NULL;
    m->cap = m->n = 0;
}

void pl_idmap_destroy(pl_idmap *m) {
    free(m->keys);
    free(m->vals);
    pl_idmap_init(m);
}

void *pl_idmap_get(const pl_idmap *m, uint64_t key) {
    if (!m->cap || !key) return NULL;
    for (size_t i = slot_of(key, m->cap);; i = (i + 1) & (m->cap - 1)) {
        if (m->keys[i] == key) return m->vals[i];
        if (!m->keys[i]) return NULL;
    }
}

static int grow(pl_idmap *m) {
    size_t nc = m->cap ? m->cap * 2 : 64;
    uint64_t *nk = calloc(nc, sizeof *nk);
    void **nv = calloc(nc, sizeof *nv);
    if (!nk || !nv) {
        free(nk);
        free(nv);
        return -1;
    }
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->keys[i]) continue;
        size_t j = slot_of(m->keys[i], nc);
        while (nk[j]) j = (j + 1) & (nc - 1);
        nk[j] = m->keys[i];
        nv[j] = m->vals[i];
    }
    free(m->keys);
    free(m->vals);
    m->keys = nk;
    m->vals = nv;
    m->cap = nc;
    return 0;
}

int pl_idmap_put(pl_idmap *m, uint64_t key, void *val) {
    if (!key) return -1;
    if ((m->n + 1) * 4 > m->cap * 3 && grow(m)) return -1;
    size_t i = slot_of(key, m->cap);
    while (m->keys[i] && m->keys[i] != key) i = (i + 1) & (m->cap - 1);
    if (!m->keys[i]) m->n++;
    m->keys[i] = key;
    m->vals[i] = val;
    return 0;
}

void *pl_idmap_del(pl_idmap *m, uint64_t key) {
    if (!m->cap || !key) return NULL;
    size_t i = slot_of(key, m->cap);
    while (m->keys[i] != key) {
        if (!m->keys[i]) return NULL;
        i = (i + 1) & (m->cap - 1);
    }
    void *v = m->vals[i];
    /* Backward-shift: move later members of the probe run into the hole. */
    size_t hole = i;
    for (size_t j = (i + 1) & (m->cap - 1); m->keys[j]; j = (j + 1) & (m->cap - 1)) {
        size_t home = slot_of(m->keys[j], m->cap);
        /* j can fill the hole if its home is not in (hole, j] cyclically. */
        int between = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
        if (!between) {
            m->keys[hole] = m->keys[j];
            m->vals[hole] = m->vals[j];
            hole = j;
        }
    }
    m->keys[hole] = 0;
    m->vals[hole] = NULL;
    m->n--;
    return v;
}
