/* base/idmap — an open-addressing hash map from non-zero uint64 ids to pointers (linear probing,
 * backward-shift deletion, so no tombstones). Not thread-safe: guard it where it is shared. */
#ifndef PL_BASE_IDMAP_H
#define PL_BASE_IDMAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint64_t *keys;   /* [cap], 0 = empty */
    void **vals;      /* [cap] */
    size_t cap;       /* power of two */
    size_t n;
} pl_idmap;

void pl_idmap_init(pl_idmap *m);
void pl_idmap_destroy(pl_idmap *m);
void *pl_idmap_get(const pl_idmap *m, uint64_t key);
/* Insert or replace; -1 on allocation failure. key must be non-zero. */
int pl_idmap_put(pl_idmap *m, uint64_t key, void *val);
/* Remove and return the value (NULL if absent). */
void *pl_idmap_del(pl_idmap *m, uint64_t key);

#endif
