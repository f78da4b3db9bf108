/* Unit tests for src/parallel without MPI (no mpirun, no MPI_Init):
 *  - the step message (step_msg.c) encoded and decoded apart from the transport: every field of
 *    a step round-trips (tokens, positions, slots, sequence starts, contexts, each sequence's
 *    block ids, logits rows, the three copy lists), including zero sequences, copies alone, and
 *    every count at its setup limit;
 *  - malformed messages (truncated, wrong magic, version or kind, negative counts, counts past
 *    the setup or the buffer, ids outside the pools) are each refused with a message saying what,
 *    never read or written past (the ASan build runs this too);
 *  - what no_mpi.c answers (compiled in here under other names, so also in an MPI build), and
 *    what the linked transport says before pl_dist_init. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "parallel/step_msg.h"

#include <stdlib.h>
#include <string.h>

/* ---- no_mpi.c under other names (the library holds mpi.c when Open MPI is there) ---- */
#define pl_dist_available nompi_available
#define pl_dist_init nompi_init
#define pl_dist_active nompi_active
#define pl_dist_rank nompi_rank
#define pl_dist_size nompi_size
#define pl_dist_cancel nompi_cancel
#define pl_dist_finalize nompi_finalize
#define pl_dist_agree nompi_agree
#define pl_dist_bcast nompi_bcast
#define pl_dist_reserve nompi_reserve
#define pl_dist_gather_logits nompi_gather_logits
#define pl_dist_reduce_sum nompi_reduce_sum
#include "parallel/no_mpi.c"
#undef pl_dist_available
#undef pl_dist_init
#undef pl_dist_active
#undef pl_dist_rank
#undef pl_dist_size
#undef pl_dist_cancel
#undef pl_dist_finalize
#undef pl_dist_agree
#undef pl_dist_bcast
#undef pl_dist_reserve
#undef pl_dist_gather_logits
#undef pl_dist_reduce_sum

static const pl_dist_setup SU = {.ok = 1, .kv_dtype = 0, .block_size = 4, .num_blocks = 16,
                                 .num_swap_blocks = 8, .max_tokens = 12, .max_seqs = 3,
                                 .max_blocks = 5, .max_logits = 6};

/* A step as rank 0's runner builds it, with room for every count up to the setup's limits. */
typedef struct {
    int64_t slots[64];
    int32_t tok[64], pos[64], seq_start[8], ctx[8], tables[8 * 8], rows[64];
    pl_block_copy out[32], in[32], cow[32];
    pl_step_batch b;
    pl_dist_copies cp;
} step;

/* n_seqs sequences of q_len[i] new tokens and ctx[i] tokens of context; block ids, slots and
 * copies made up from a seed so that every field differs. */
static void make_step(step *s, int32_t n_seqs, const int32_t *q_len, const int32_t *ctx,
                      int32_t n_logits, int32_t n_out, int32_t n_in, int32_t n_cow, int seed) {
    memset(s, 0, sizeof *s);
    int32_t t = 0;
    for (int32_t i = 0; i < n_seqs; i++) {
        s->seq_start[i] = t;
        s->ctx[i] = ctx[i];
        for (int32_t k = 0; k < SU.max_blocks; k++)
            s->tables[i * SU.max_blocks + k] = (seed + 3 * i + 7 * k) % SU.num_blocks;
        for (int32_t k = 0; k < q_len[i]; k++, t++) {
            s->tok[t] = 1000 * seed + t;
            s->pos[t] = ctx[i] - q_len[i] + k;
            s->slots[t] = t % 5 == 4 ? -1 : (int64_t)(seed + t) % (SU.num_blocks * SU.block_size);
        }
    }
    s->seq_start[n_seqs] = t;
    for (int32_t r = 0; r < n_logits; r++) s->rows[r] = t ? (r * 5 + seed) % t : 0;
    for (int32_t i = 0; i < n_out; i++)
        s->out[i] = (pl_block_copy){(i + seed) % SU.num_blocks, i % SU.num_swap_blocks};
    for (int32_t i = 0; i < n_in; i++)
        s->in[i] = (pl_block_copy){(i * 3) % SU.num_swap_blocks, (i + 2 * seed) % SU.num_blocks};
    for (int32_t i = 0; i < n_cow; i++)
        s->cow[i] = (pl_block_copy){(i * 5) % SU.num_blocks, (i * 7 + 1) % SU.num_blocks};
    s->b = (pl_step_batch){.n_tokens = t, .token_ids = s->tok, .positions = s->pos,
                           .slot_mapping = s->slots, .n_seqs = n_seqs, .seq_start = s->seq_start,
                           .context_lens = s->ctx, .block_tables = s->tables,
                           .max_blocks = SU.max_blocks, .n_logits = n_logits,
                           .logit_rows = s->rows};
    s->cp = (pl_dist_copies){s->out, s->in, s->cow, n_out, n_in, n_cow};
}

/* The worker's block tables: exactly [max_seqs][max_blocks], so ASan sees a write past them. */
static int32_t *new_tables(void) {
    int32_t *t = malloc((size_t)SU.max_seqs * SU.max_blocks * sizeof(int32_t));
    assert_non_null(t);
    for (int32_t i = 0; i < SU.max_seqs * SU.max_blocks; i++) t[i] = -7;
    return t;
}

/* The second tables (KV cache groups, layer kinds): a window pool of 6 blocks, swap 3. */
static pl_dist_setup kinds_setup(void) {
    pl_dist_setup su = SU;
    su.kv_groups = 2;
    su.kv_tensors = 4;
    su.num_blocks_w = 6;
    su.num_swap_blocks_w = 3;
    su.kinds[1] = su.kinds[3] = 1;
    return su;
}

/* Encode s, copy the payload to a buffer of its exact size (ASan sees a read past it). */
static void *encode(const step *s, pl_dist_msg_header *h) {
    const void *payload;
    assert_int_equal(pl_dist_step_encode(&s->cp, &s->b, SU.block_size, h, &payload), PL_OK);
    assert_int_equal(h->magic, PL_DIST_MSG_MAGIC);
    assert_int_equal(h->version, PL_DIST_MSG_VERSION);
    assert_int_equal(h->kind, PL_DIST_MSG_STEP);
    void *copy = malloc(h->payload ? (size_t)h->payload : 1);
    assert_non_null(copy);
    if (h->payload) memcpy(copy, payload, (size_t)h->payload);
    return copy;
}

static void expect_same(const step *s, const pl_dist_step_view *v, const int32_t *tables) {
    const pl_step_batch *a = &s->b, *b = &v->batch;
    assert_int_equal(v->kind, PL_DIST_MSG_STEP);
    assert_int_equal(b->n_tokens, a->n_tokens);
    assert_int_equal(b->n_seqs, a->n_seqs);
    assert_int_equal(b->n_logits, a->n_logits);
    assert_int_equal(b->max_blocks, SU.max_blocks);
    assert_ptr_equal(b->block_tables, tables);
    assert_null(b->slot_mapping_w);
    assert_null(b->block_tables_w);
    for (int32_t t = 0; t < a->n_tokens; t++) {
        assert_int_equal(b->token_ids[t], a->token_ids[t]);
        assert_int_equal(b->positions[t], a->positions[t]);
        assert_int_equal(b->slot_mapping[t], a->slot_mapping[t]);
    }
    for (int32_t i = 0; i <= a->n_seqs; i++) assert_int_equal(b->seq_start[i], a->seq_start[i]);
    for (int32_t i = 0; i < a->n_seqs; i++) {
        assert_int_equal(b->context_lens[i], a->context_lens[i]);
        int32_t nb = (a->context_lens[i] + SU.block_size - 1) / SU.block_size;
        for (int32_t k = 0; k < nb; k++)
            assert_int_equal(tables[i * SU.max_blocks + k], a->block_tables[i * a->max_blocks + k]);
        for (int32_t k = nb; k < SU.max_blocks; k++) /* only the used ids are sent */
            assert_int_equal(tables[i * SU.max_blocks + k], -7);
    }
    for (int32_t r = 0; r < a->n_logits; r++) assert_int_equal(b->logit_rows[r], a->logit_rows[r]);
    const pl_block_copy *lists[3] = {s->cp.swap_out, s->cp.swap_in, s->cp.cow};
    const int32_t n[3] = {s->cp.n_swap_out, s->cp.n_swap_in, s->cp.n_cow};
    for (int j = 0; j < 3; j++) {
        assert_int_equal(v->n_copies[j], n[j]);
        for (int32_t i = 0; i < n[j]; i++) {
            assert_int_equal(v->copy_src[j][i], lists[j][i].src);
            assert_int_equal(v->copy_dst[j][i], lists[j][i].dst);
        }
    }
}

static void round_trip(const step *s) {
    pl_dist_msg_header h;
    void *payload = encode(s, &h);
    int32_t *tables = new_tables();
    pl_dist_step_view v;
    pl_status st = pl_dist_step_decode(&h, payload, (size_t)h.payload, &SU, tables, NULL, &v);
    if (st != PL_OK) fail_msg("decode: %s", pl_last_error());
    expect_same(s, &v, tables);
    free(tables);
    free(payload);
}

static void test_round_trip(void **state) {
    (void)state;
    step s;
    /* a prefill of 5 tokens (ctx a block multiple), decodes of 1 (ctx one past a multiple) */
    const int32_t q[] = {5, 1, 2}, ctx[] = {8, 9, 2};
    make_step(&s, 3, q, ctx, 4, 2, 3, 1, 1);
    round_trip(&s);
    const int32_t q1[] = {1}, c1[] = {1}; /* one token, one block, no logits, no copies */
    make_step(&s, 1, q1, c1, 0, 0, 0, 0, 2);
    round_trip(&s);
}

static void test_round_trip_zero_seqs(void **state) {
    (void)state;
    step s;
    make_step(&s, 0, NULL, NULL, 0, 0, 0, 0, 3); /* nothing at all: header and seq_start[0] */
    round_trip(&s);
    make_step(&s, 0, NULL, NULL, 0, 4, 0, 0, 4); /* a step that only swaps out */
    round_trip(&s);
    make_step(&s, 0, NULL, NULL, 0, 2, 5, 3, 5); /* every copy list, no batch */
    round_trip(&s);
    s.b.token_ids = s.b.positions = s.b.seq_start = s.b.context_lens = NULL; /* unused: not read */
    s.b.slot_mapping = NULL;
    s.b.block_tables = s.b.logit_rows = NULL;
    s.b.seq_start = s.seq_start;
    round_trip(&s);
}

static void test_round_trip_max(void **state) {
    (void)state;
    step s;
    /* every count at its setup limit: max_tokens over max_seqs, each context max_blocks full
     * blocks, max_logits rows, num_blocks copies in each list */
    const int32_t full = SU.max_blocks * SU.block_size, q[] = {4, 4, 4}, ctx[] = {full, full, full};
    make_step(&s, SU.max_seqs, q, ctx, SU.max_logits, SU.num_blocks, SU.num_blocks,
              SU.num_blocks, 6);
    assert_int_equal(s.b.n_tokens, SU.max_tokens);
    round_trip(&s);
    pl_dist_msg_header h;
    free(encode(&s, &h));
    assert_int_equal(h.n_table, SU.max_seqs * SU.max_blocks);
}

/* ---- malformed messages ---- */

static step g_valid;

static void make_valid(void) {
    const int32_t q[] = {5, 1, 2}, ctx[] = {8, 9, 2};
    make_step(&g_valid, 3, q, ctx, 4, 2, 3, 1, 1);
}

/* Decode (h, payload of `bytes`): refused with PL_ERR_INTERNAL and a message containing want. */
static void expect_refused(const pl_dist_msg_header *h, const void *payload, size_t bytes,
                           const char *want) {
    int32_t *tables = new_tables();
    pl_dist_step_view v;
    pl_clear_error();
    pl_status st = pl_dist_step_decode(h, payload, bytes, &SU, tables, NULL, &v);
    if (st != PL_ERR_INTERNAL) fail_msg("want a refusal with \"%s\", got %s", want, pl_status_name(st));
    if (!strstr(pl_last_error(), want))
        fail_msg("want \"%s\" in the message, got \"%s\"", want, pl_last_error());
    assert_int_equal(v.kind, 0); /* nothing half-decoded is handed out */
    assert_null(v.batch.token_ids);
    free(tables);
}

/* Byte offsets of the payload's arrays for header h. */
typedef struct { size_t tok, pos, seq_start, ctx, blocks, rows, copies; } layout;
static layout layout_of(const pl_dist_msg_header *h) {
    layout l;
    l.tok = (size_t)h->n_tokens * 8;
    l.pos = l.tok + (size_t)h->n_tokens * 4;
    l.seq_start = l.pos + (size_t)h->n_tokens * 4;
    l.ctx = l.seq_start + ((size_t)h->n_seqs + 1) * 4;
    l.blocks = l.ctx + (size_t)h->n_seqs * 4;
    l.rows = l.blocks + (size_t)h->n_table * 4;
    l.copies = l.rows + (size_t)h->n_logits * 4;
    return l;
}
static int32_t *i32_at(void *payload, size_t off) { return (int32_t *)((char *)payload + off); }

static void test_bad_header(void **state) {
    (void)state;
    make_valid();
    pl_dist_msg_header h0, h;
    void *p = encode(&g_valid, &h0);
    size_t n = (size_t)h0.payload;
    h = h0, h.magic = 0x12345678;
    expect_refused(&h, p, n, "bad header (magic 12345678");
    h = h0, h.version = PL_DIST_MSG_VERSION + 1;
    expect_refused(&h, p, n, "version 2");
    h = h0, h.kind = 0;
    expect_refused(&h, p, n, "kind 0");
    h = h0, h.kind = PL_DIST_MSG_PROBE + 1;
    expect_refused(&h, p, n, "kind 4");
    h = h0, h.kind = PL_DIST_MSG_STOP; /* a valid header, but not a step */
    expect_refused(&h, p, n, "has no step");
    free(p);
}

static void test_truncated(void **state) {
    (void)state;
    make_valid();
    pl_dist_msg_header h;
    void *p = encode(&g_valid, &h);
    expect_refused(&h, p, (size_t)h.payload - 4, "header says");
    expect_refused(&h, p, 0, "a step payload of 0 bytes");
    expect_refused(&h, p, (size_t)h.payload + 8, "header says");
    /* a header whose payload size disagrees with its counts */
    pl_dist_msg_header l = h;
    l.payload -= 4;
    expect_refused(&l, p, (size_t)l.payload, "expected");
    l = h, l.payload = -8;
    expect_refused(&l, p, 0, "step payload of -8 bytes");
    free(p);
}

static void test_bad_counts(void **state) {
    (void)state;
    make_valid();
    pl_dist_msg_header h0, h;
    void *p = encode(&g_valid, &h0);
    size_t n = (size_t)h0.payload;
    /* negative counts and counts past the setup (which bounds the buffer): refused before the
     * payload is looked at */
    h = h0, h.n_tokens = -1;
    expect_refused(&h, p, n, "tokens -1");
    h = h0, h.n_tokens = SU.max_tokens + 1;
    expect_refused(&h, p, n, "tokens 13 (allowed: 0 to 12)");
    h = h0, h.n_seqs = -3;
    expect_refused(&h, p, n, "sequences -3");
    h = h0, h.n_seqs = SU.max_seqs + 1;
    expect_refused(&h, p, n, "sequences 4");
    h = h0, h.n_logits = -1;
    expect_refused(&h, p, n, "logits rows -1");
    h = h0, h.n_logits = SU.max_logits + 1;
    expect_refused(&h, p, n, "logits rows 7");
    h = h0, h.n_table = -2;
    expect_refused(&h, p, n, "block ids -2");
    h = h0, h.n_table = SU.max_seqs * SU.max_blocks + 1;
    expect_refused(&h, p, n, "block ids 16");
    h = h0, h.n_copies[0] = -1;
    expect_refused(&h, p, n, "swap-out copies -1");
    h = h0, h.n_copies[1] = INT32_MAX;
    expect_refused(&h, p, n, "swap-in copies 2147483647");
    h = h0, h.n_copies[2] = INT32_MIN;
    expect_refused(&h, p, n, "copy-on-write copies -2147483648");
    /* counts whose product would wrap a 32-bit size: still refused by the limits */
    h = h0, h.n_tokens = INT32_MAX, h.n_seqs = INT32_MAX, h.payload = INT64_MAX;
    expect_refused(&h, p, n, "tokens 2147483647");
    /* a header that lies about n_table but keeps the payload size consistent */
    h = h0, h.n_table -= 1, h.n_logits += 1;
    expect_refused(&h, p, n, "contexts need 6 block ids, its header says 5");
    free(p);
}

/* Layer kinds: both tables and both slot lists round-trip, window-pool ids are checked against
 * the window pool, copies may name window blocks as num_blocks + b, and a step whose second
 * tables the setup does not expect (or lacks) is refused. */
static void test_kinds_tables(void **state) {
    (void)state;
    const pl_dist_setup su = kinds_setup();
    const int32_t q[] = {5, 1, 2}, ctx[] = {8, 9, 2};
    step s;
    make_step(&s, 3, q, ctx, 3, 1, 1, 1, 2);
    int32_t tw[8 * 8];
    int64_t sw[64];
    for (int32_t i = 0; i < 3 * SU.max_blocks; i++) tw[i] = (i * 5 + 1) % su.num_blocks_w;
    tw[SU.max_blocks] = PL_KV_NO_BLOCK; /* sequence 1's first window block: dropped */
    for (int32_t t = 0; t < s.b.n_tokens; t++) sw[t] = (t * 3) % (su.num_blocks_w * su.block_size);
    s.b.block_tables_w = tw;
    s.b.slot_mapping_w = sw;
    s.cow[0] = (pl_block_copy){SU.num_blocks + 5, SU.num_blocks + 2}; /* window blocks 5 -> 2 */
    pl_dist_msg_header h;
    void *p = encode(&s, &h);
    assert_int_equal(h.has_w, 1);
    int32_t *tables = new_tables(), *tables_w = new_tables();
    pl_dist_step_view v;
    if (pl_dist_step_decode(&h, p, (size_t)h.payload, &su, tables, tables_w, &v) != PL_OK)
        fail_msg("decode: %s", pl_last_error());
    assert_ptr_equal(v.batch.block_tables_w, tables_w);
    for (int32_t t = 0; t < s.b.n_tokens; t++) {
        assert_int_equal(v.batch.slot_mapping[t], s.slots[t]);
        assert_int_equal(v.batch.slot_mapping_w[t], sw[t]);
    }
    for (int32_t i = 0; i < 3; i++)
        for (int32_t k = 0; k < (ctx[i] + 3) / 4; k++) {
            assert_int_equal(tables[i * SU.max_blocks + k], s.tables[i * SU.max_blocks + k]);
            assert_int_equal(tables_w[i * SU.max_blocks + k], tw[i * SU.max_blocks + k]);
        }
    assert_int_equal(v.copy_src[2][0], SU.num_blocks + 5);
    /* without the setup's second tables: refused; a window id past the window pool: refused */
    pl_dist_step_view v2;
    assert_int_equal(pl_dist_step_decode(&h, p, (size_t)h.payload, &SU, tables, NULL, &v2),
                     PL_ERR_INTERNAL);
    assert_non_null(strstr(pl_last_error(), "with second block tables"));
    free(p);
    tw[1] = su.num_blocks_w; /* sequence 0's last window block */
    p = encode(&s, &h);
    assert_int_equal(pl_dist_step_decode(&h, p, (size_t)h.payload, &su, tables, tables_w, &v2),
                     PL_ERR_INTERNAL);
    assert_non_null(strstr(pl_last_error(), "block id 6 (of 6)"));
    free(p);
    tw[1] = 0;
    sw[1] = su.num_blocks_w * su.block_size;
    p = encode(&s, &h);
    assert_int_equal(pl_dist_step_decode(&h, p, (size_t)h.payload, &su, tables, tables_w, &v2),
                     PL_ERR_INTERNAL);
    assert_non_null(strstr(pl_last_error(), "slot 24 (of 24)"));
    free(p);
    sw[1] = 0;
    s.cow[0].src = SU.num_blocks + su.num_blocks_w; /* past both pools */
    p = encode(&s, &h);
    assert_int_equal(pl_dist_step_decode(&h, p, (size_t)h.payload, &su, tables, tables_w, &v2),
                     PL_ERR_INTERNAL);
    assert_non_null(strstr(pl_last_error(), "copy source block 22 (of 22)"));
    free(p);
    /* a one-table step where the setup expects two */
    s.b.block_tables_w = NULL;
    s.b.slot_mapping_w = NULL;
    s.cow[0].src = 0;
    p = encode(&s, &h);
    assert_int_equal(pl_dist_step_decode(&h, p, (size_t)h.payload, &su, tables, tables_w, &v2),
                     PL_ERR_INTERNAL);
    assert_non_null(strstr(pl_last_error(), "without second block tables"));
    free(p);
    free(tables);
    free(tables_w);
}

static void test_bad_payload(void **state) {
    (void)state;
    make_valid();
    pl_dist_msg_header h;
    void *p0 = encode(&g_valid, &h);
    const size_t n = (size_t)h.payload;
    const layout l = layout_of(&h);
    void *p = malloc(n);
    assert_non_null(p);
#define EDIT(stmt, want)            \
    do {                            \
        memcpy(p, p0, n);           \
        stmt;                       \
        expect_refused(&h, p, n, want); \
    } while (0)
    EDIT(i32_at(p, l.seq_start)[0] = 1, "span tokens 1 to 8 of 8");
    EDIT(i32_at(p, l.seq_start)[3] = 7, "span tokens 0 to 7 of 8");
    EDIT(i32_at(p, l.seq_start)[2] = 4, "sequence 1 of a step: tokens 5 to 4");
    EDIT(i32_at(p, l.ctx)[0] = 4, "sequence 0 of a step: tokens 0 to 5, context 4");
    EDIT(i32_at(p, l.ctx)[2] = -5, "context -5");
    EDIT(i32_at(p, l.ctx)[1] = 13, "contexts need 7 block ids, its header says 6");
    EDIT(i32_at(p, l.blocks)[3] = SU.num_blocks, "block id 16 (of 16)");
    /* a window's dropped entries (PL_KV_NO_BLOCK) lead a table; anywhere else, or the whole
     * table, they are refused like any id out of the pool */
    EDIT(i32_at(p, l.blocks)[1] = -1, "block id -1");
    EDIT(i32_at(p, l.blocks)[0] = -2, "block id -2");
    EDIT((i32_at(p, l.blocks)[0] = -1, i32_at(p, l.blocks)[1] = -1), "block id -1");
    EDIT(i32_at(p, l.blocks)[5] = -1, "block id -1");
    {
        memcpy(p, p0, n);
        i32_at(p, l.blocks)[2] = i32_at(p, l.blocks)[3] = -1; /* sequence 1: two of its 3 */
        int32_t *tables = new_tables();
        pl_dist_step_view v;
        assert_int_equal(pl_dist_step_decode(&h, p, n, &SU, tables, NULL, &v), PL_OK);
        assert_int_equal(v.batch.block_tables[SU.max_blocks], -1);
        assert_int_equal(v.batch.block_tables[SU.max_blocks + 1], -1);
        assert_int_equal(v.batch.block_tables[SU.max_blocks + 2], i32_at(p0, l.blocks)[4]);
        free(tables);
    }
    EDIT(((int64_t *)p)[2] = SU.num_blocks * SU.block_size, "slot 64 (of 64)");
    EDIT(i32_at(p, l.rows)[1] = 8, "logits row 8 (of 8)");
    EDIT(i32_at(p, l.rows)[0] = -1, "logits row -1");
    /* swap-out pool -> swap, swap-in swap -> pool, copy-on-write pool -> pool */
    EDIT(i32_at(p, l.copies)[0] = SU.num_blocks, "copy source block 16 (of 16)");
    EDIT(i32_at(p, l.copies)[2] = SU.num_swap_blocks, "copy destination block 8 (of 8)");
    EDIT(i32_at(p, l.copies + 16)[0] = SU.num_swap_blocks, "copy source block 8 (of 8)");
    EDIT(i32_at(p, l.copies + 16)[5] = -4, "copy destination block -4");
    EDIT(i32_at(p, l.copies + 40)[1] = SU.num_blocks + 3, "copy destination block 19");
#undef EDIT
    free(p);
    free(p0);
}

/* One sequence of more blocks than a table row holds, within n_table's bound: refused before
 * its ids are copied past the row (the old decoder checked this, but wrote max_seqs rows
 * unchecked). */
static void test_too_many_blocks(void **state) {
    (void)state;
    step s;
    const int32_t q[] = {1, 1}, ctx[] = {SU.max_blocks * SU.block_size + 1, 1};
    make_step(&s, 2, q, ctx, 0, 0, 0, 0, 9);
    pl_dist_msg_header h;
    void *p = encode(&s, &h);
    expect_refused(&h, p, (size_t)h.payload, "a sequence of 6 blocks (at most 5)");
    free(p);
}

static void test_probe_and_stop_headers(void **state) {
    (void)state;
    pl_dist_msg_header h = {.magic = PL_DIST_MSG_MAGIC, .version = PL_DIST_MSG_VERSION,
                            .kind = PL_DIST_MSG_PROBE, .n_tokens = 1024, .n_seqs = 3};
    assert_int_equal(pl_dist_msg_check(&h, &SU), PL_OK);
    h.n_tokens = 0;
    assert_int_equal(pl_dist_msg_check(&h, &SU), PL_ERR_INTERNAL);
    assert_non_null(strstr(pl_last_error(), "a probe of 0 floats, 3 times"));
    h.n_tokens = 8, h.n_seqs = -1;
    assert_int_equal(pl_dist_msg_check(&h, &SU), PL_ERR_INTERNAL);
    h = (pl_dist_msg_header){.magic = PL_DIST_MSG_MAGIC, .version = PL_DIST_MSG_VERSION,
                             .kind = PL_DIST_MSG_STOP};
    assert_int_equal(pl_dist_msg_check(&h, &SU), PL_OK);
    h.version = 0; /* a build before the version field */
    assert_int_equal(pl_dist_msg_check(&h, &SU), PL_ERR_INTERNAL);
    assert_non_null(strstr(pl_last_error(), "the ranks run different builds?"));
}

/* ---- the transports ---- */

static void expect_no_mpi(pl_status st) {
    assert_int_equal(st, PL_ERR_UNSUPPORTED);
    assert_non_null(strstr(pl_last_error(), "tensor parallelism needs a build with MPI"));
    assert_non_null(strstr(pl_last_error(), "cmake -DPL_MPI=ON"));
}

static void test_no_mpi(void **state) {
    (void)state;
    assert_int_equal(nompi_available(), 0);
    expect_no_mpi(nompi_init(2));
    assert_int_equal(nompi_active(), 0);
    assert_int_equal(nompi_rank(), 0);
    assert_int_equal(nompi_size(), 1);
    nompi_cancel();
    nompi_finalize();
    char buf[8];
    float x[4] = {1, 2, 3, 4}, logits[4];
    expect_no_mpi(nompi_agree(PL_OK, "loading"));
    expect_no_mpi(nompi_bcast(buf, sizeof buf, 1, "a step"));
    expect_no_mpi(nompi_reserve(16, 1, 4));
    expect_no_mpi(nompi_gather_logits(NULL, x, 1, logits));
    expect_no_mpi(nompi_reduce_sum(NULL, x, 4));
    assert_true(x[3] == 4); /* untouched */
}

/* The transport this build links, before pl_dist_init: inactive, rank 0 of 1. */
static void test_linked_transport_inactive(void **state) {
    (void)state;
    assert_int_equal(pl_dist_active(), 0);
    assert_int_equal(pl_dist_rank(), 0);
    assert_int_equal(pl_dist_size(), 1);
    assert_true(pl_dist_available() == 0 || pl_dist_available() == 1);
    pl_dist_stats s;
    pl_dist_get_stats(&s);
    assert_int_equal(s.steps, 0); /* encoding alone counts nothing */
}

static int teardown(void **state) {
    (void)state;
    pl_dist_msg_free();
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_round_trip, teardown),
        cmocka_unit_test_teardown(test_round_trip_zero_seqs, teardown),
        cmocka_unit_test_teardown(test_round_trip_max, teardown),
        cmocka_unit_test_teardown(test_bad_header, teardown),
        cmocka_unit_test_teardown(test_truncated, teardown),
        cmocka_unit_test_teardown(test_bad_counts, teardown),
        cmocka_unit_test_teardown(test_bad_payload, teardown),
        cmocka_unit_test_teardown(test_kinds_tables, teardown),
        cmocka_unit_test_teardown(test_too_many_blocks, teardown),
        cmocka_unit_test_teardown(test_probe_and_stop_headers, teardown),
        cmocka_unit_test(test_no_mpi),
        cmocka_unit_test_teardown(test_linked_transport_inactive, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
