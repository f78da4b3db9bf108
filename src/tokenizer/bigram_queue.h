/* tokenizer/bigram_queue — the priority queue of candidate merges shared by SentencePiece and
 * BPE (module-internal). Both merge the best adjacent pair first: SentencePiece by the merged
 * token's score (higher first), BPE by the merge's rank (lower first, so key = -rank); ties go to
 * the leftmost pair. Entries may go stale when a neighbour merges; `size` lets the caller detect
 * that on pop. */
#ifndef PL_TOKENIZER_BIGRAM_QUEUE_H
#define PL_TOKENIZER_BIGRAM_QUEUE_H

#include <stddef.h>

typedef struct {
    int left, right; /* symbol indices */
    double key;      /* higher merges first: the SPM score, or -rank for BPE */
    size_t size;     /* byte length of the merge (detects stale entries) */
} pl_bigram;

typedef struct {
    pl_bigram *v;    /* binary heap, best at v[0] */
    size_t n, cap;
} pl_bigram_queue;

/* 0 on allocation failure. */
int pl_bigram_push(pl_bigram_queue *q, pl_bigram b);
/* q->n > 0 is the caller's precondition. */
pl_bigram pl_bigram_pop(pl_bigram_queue *q);

#endif
