/* tokenizer/bigram_queue — see bigram_queue.h. */
#include "tokenizer/bigram_queue.h"
#include "base/buf.h"

#include <stdlib.h>

static int before(const pl_bigram *a, const pl_bigram *b) {
    return a->key > b->key || (a->key == b->key && a->left < b->left);
}

int pl_bigram_push(pl_bigram_queue *q, pl_bigram b) {
    if (pl_array_reserve(&q->v, &q->cap, q->n + 1, sizeof *q->v)) return 0;
    size_t i = q->n++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!before(&b, &q->v[parent])) break;
        q->v[i] = q->v[parent];
        i = parent;
    }
    q->v[i] = b;
    return 1;
}

pl_bigram pl_bigram_pop(pl_bigram_queue *q) {
    pl_bigram top = q->v[0], last = q->v[--q->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= q->n) break;
        if (c + 1 < q->n && before(&q->v[c + 1], &q->v[c])) c++;
        if (!before(&q->v[c], &last)) break;
        q->v[i] = q->v[c];
        i = c;
    }
    if (q->n > 0) q->v[i] = last;
    return top;
}
