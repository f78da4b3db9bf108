/* Unit tests for engine/runner alone (no scheduler, no engine): a hand-made schedule output in,
 * KV bytes and logits out.
 *  - block copies are applied swap-out, then swap-in, then copy-on-write (the order matters when
 *    one step swaps a block out and another into the same id);
 *  - logits rows: one per sampling item, every row of an all_logits item with its sampling row
 *    last, -1 for an item that neither samples nor wants logits;
 *  - items batched in one step give bitwise the logits each gives alone (on its own cache);
 *  - an empty schedule still applies copies and runs nothing.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "engine/request.h"
#include "engine/runner.h"

#include <stdlib.h>
#include <string.h>

#define MODEL PL_SHARED_DIR "/models/stories260K.gguf"

enum { BS = 4, NBLK = 32, MAXB = 16 };

typedef struct {
    pl_model *m;
    pl_threadpool *tp;
    pl_kv_store kv, swap;
    pl_runner r;
} fixture;

static int setup(void **state) {
    fixture *f = calloc(1, sizeof *f);
    assert_int_equal(pl_model_load(MODEL, &f->m), PL_OK);
    f->tp = pl_threadpool_create(2);
    pl_kv_layout l = {PL_DT_F32, BS, f->m->hp.n_kv_heads, f->m->hp.head_dim, NBLK};
    assert_int_equal(pl_kv_store_init(&f->kv, &l, f->m->hp.n_layers, NULL), PL_OK);
    l.num_blocks = 8;
    assert_int_equal(pl_kv_store_init(&f->swap, &l, f->m->hp.n_layers, NULL), PL_OK);
    pl_runner_config rc = {.model = f->m, .tp = f->tp, .kv = &f->kv, .swap = &f->swap,
                           .max_tokens = 64, .max_items = 8, .max_logit_rows = 32,
                           .max_blocks = MAXB};
    assert_int_equal(pl_runner_init(&f->r, &rc), PL_OK);
    *state = f;
    return 0;
}

static int teardown(void **state) {
    fixture *f = *state;
    pl_runner_destroy(&f->r);
    pl_kv_store_destroy(&f->swap);
    pl_kv_store_destroy(&f->kv);
    pl_threadpool_destroy(f->tp);
    pl_model_destroy(f->m);
    free(f);
    return 0;
}

/* ---- block copies ---- */

static size_t block_bytes(const pl_kv_store *s) { return s->layer_bytes / (size_t)s->layout.num_blocks; }
static uint8_t *kblock(const pl_kv_store *s, int32_t b) {
    return (uint8_t *)pl_kv_store_k(s, 0) + (size_t)b * block_bytes(s);
}
static void mark(pl_kv_store *s, int32_t b, uint8_t v) { memset(kblock(s, b), v, block_bytes(s)); }
static int is(const pl_kv_store *s, int32_t b, uint8_t v) {
    const uint8_t *p = kblock(s, b);
    for (size_t i = 0; i < block_bytes(s); i++)
        if (p[i] != v) return 0;
    return 1;
}

static void test_copies_in_order(void **state) {
    fixture *f = *state;
    mark(&f->kv, 3, 0x33);
    mark(&f->kv, 5, 0x55);
    mark(&f->swap, 1, 0x11);
    mark(&f->swap, 0, 0x00);
    /* Block 3 goes out to swap 0, swap 1 comes into block 3, and block 3 is then copied on write
     * to block 5: applied in any other order, 5 and swap 0 end up different. */
    pl_block_copy out = {3, 0}, in = {1, 3}, cow = {3, 5};
    pl_sched_output so = {0};
    so.swap_out = &out, so.n_swap_out = 1;
    so.swap_in = &in, so.n_swap_in = 1;
    so.cow = &cow, so.n_cow = 1;
    assert_int_equal(pl_runner_execute(&f->r, &so), PL_OK);
    assert_true(is(&f->swap, 0, 0x33));
    assert_true(is(&f->kv, 3, 0x11));
    assert_true(is(&f->kv, 5, 0x11));
}

/* ---- logits ---- */

typedef struct {
    pl_seq_group g;
    pl_seq *q;
    int32_t blocks[MAXB];
} one_seq;

/* A sequence of `n` tokens whose table maps its logical blocks to `first`, first + 2, ... (so
 * two sequences with different `first` never share a block). */
static void seq_make(one_seq *s, const int32_t *tokens, int32_t n, int32_t first) {
    memset(s, 0, sizeof *s);
    pl_request_params_default(&s->g.params);
    s->g.params.max_tokens = 4;
    s->g.n_prompt = n;
    s->q = pl_seq_create(&s->g, 0, tokens, n);
    assert_non_null(s->q);
    for (int32_t b = 0; b < MAXB; b++) s->blocks[b] = first + 2 * b;
    s->q->table.blocks = s->blocks;
    s->q->table.capacity = MAXB;
    s->q->table.block_size = BS;
    s->q->table.n_blocks = (n + BS - 1) / BS;
    s->q->table.n_tokens = n;
}

static const int32_t A[] = {1, 403, 407, 261, 378, 432, 383}; /* "Once upon a time, there" */
static const int32_t B[] = {1, 317, 269, 274, 287};

/* Run items, return a copy of the logits rows used and the item rows. */
static float *run(fixture *f, const pl_sched_item *items, int32_t n_items, int32_t *item_row,
                  int32_t *n_rows) {
    pl_sched_output so = {0};
    so.items = (pl_sched_item *)items;
    so.n_items = n_items;
    int32_t rows = 0;
    for (int32_t i = 0; i < n_items; i++) {
        so.n_tokens += items[i].n;
        rows += items[i].all_logits ? items[i].n : items[i].sample;
    }
    assert_int_equal(pl_runner_execute(&f->r, &so), PL_OK);
    memcpy(item_row, f->r.item_row, (size_t)n_items * sizeof *item_row);
    const size_t V = (size_t)f->m->hp.n_vocab;
    float *out = malloc((size_t)rows * V * sizeof(float));
    memcpy(out, f->r.logits, (size_t)rows * V * sizeof(float));
    *n_rows = rows;
    return out;
}

static void test_rows_and_batch_invariance(void **state) {
    fixture *f = *state;
    const size_t V = (size_t)f->m->hp.n_vocab;
    one_seq a, b;
    seq_make(&a, A, 7, 0);
    seq_make(&b, B, 5, 1);
    int32_t row[3], n_rows;
    /* Alone: A's prompt with every row (prompt logprobs), then B's prompt sampling. */
    pl_sched_item ia = {a.q, 0, 7, 1, 1, 0}, ib = {b.q, 0, 5, 1, 0, 0};
    float *la = run(f, &ia, 1, row, &n_rows);
    assert_int_equal(n_rows, 7);
    assert_int_equal(row[0], 0);
    float *lb = run(f, &ib, 1, row, &n_rows);
    assert_int_equal(n_rows, 1);
    /* Together, with an item in between that only fills the cache (B again: same K/V). */
    pl_sched_item quiet = {b.q, 0, 4, 0, 0, 0};
    pl_sched_item both[3] = {ib, quiet, ia};
    float *lab = run(f, both, 3, row, &n_rows);
    assert_int_equal(n_rows, 8);
    assert_int_equal(row[0], 0);
    assert_int_equal(row[1], -1);
    assert_int_equal(row[2], 1);
    assert_memory_equal(lab, lb, V * sizeof(float));
    assert_memory_equal(lab + V, la, 7 * V * sizeof(float)); /* A's rows, sampling row last */
    /* A decode step of A's last token reads the cache the prefill wrote: same logits as the
     * prefill's last row. */
    pl_sched_item dec = {a.q, 6, 1, 1, 0, 0};
    float *ld = run(f, &dec, 1, row, &n_rows);
    assert_memory_equal(ld, la + 6 * V, V * sizeof(float));
    free(la);
    free(lb);
    free(lab);
    free(ld);
    a.q->table.blocks = NULL;
    b.q->table.blocks = NULL;
    pl_seq_destroy(a.q);
    pl_seq_destroy(b.q);
}

static void test_empty_schedule(void **state) {
    fixture *f = *state;
    pl_sched_output so = {0};
    assert_int_equal(pl_runner_execute(&f->r, &so), PL_OK);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_copies_in_order),
        cmocka_unit_test(test_rows_and_batch_invariance),
        cmocka_unit_test(test_empty_schedule),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
