/* parallel/step_msg — the messages rank 0 broadcasts: the engine's setup once, then per step one
 * header and one payload (parallel.h says what is in it), finally stop.
 *
 * Payload, in order (8-byte fields first so every array is aligned in the receive buffer):
 *   slots int64[T] | (has_w: the second table's slots int64[T]) | tokens int32[T] |
 *   positions int32[T] | seq_start int32[S+1] | context_lens int32[S] |
 *   block ids int32[n_table = sum over seqs of ceil(context_len / block_size)] |
 *   (has_w: the second tables' block ids int32[n_table]) | logits rows int32[n_logits] |
 *   swap-out src int32[n0], dst int32[n0] | swap-in src, dst [n1] | copy-on-write src, dst [n2]
 */
#include "parallel/step_msg.h"

#include "base/clock.h"
#include "kv/manager.h"

#include <stdlib.h>
#include <string.h>

pl_dist_stats pl_dist_counters;

_Static_assert(sizeof(pl_dist_msg_header) == 64, "the step header is 64 bytes");

static char *g_buf;         /* the payload, encoded (rank 0) or received (workers) */
static size_t g_cap;

static pl_status reserve(size_t bytes) {
    if (bytes <= g_cap) return PL_OK;
    size_t cap = bytes + bytes / 2 + 4096;
    char *p = realloc(g_buf, cap);
    if (!p) return pl_fail(PL_ERR_NOMEM, "tensor parallel: out of memory for a %zu-byte step",
                           bytes);
    g_buf = p;
    g_cap = cap;
    return PL_OK;
}

void pl_dist_msg_free(void) {
    free(g_buf);
    g_buf = NULL;
    g_cap = 0;
}

void pl_dist_get_stats(pl_dist_stats *s) { *s = pl_dist_counters; }

pl_status pl_dist_send_setup(const pl_dist_setup *s) {
    pl_dist_setup copy = *s;
    return pl_dist_bcast(&copy, sizeof copy, 0, "sending the engine setup");
}

pl_status pl_dist_recv_setup(pl_dist_setup *s) {
    return pl_dist_bcast(s, sizeof *s, 1, "waiting for the engine setup");
}

static int32_t blocks_of(int32_t ctx, int32_t block_size) {
    return (int32_t)(((int64_t)ctx + block_size - 1) / block_size);
}

/* The payload the counts imply; counts are non-negative int32, so no overflow in 64 bits. */
static int64_t payload_bytes(const pl_dist_msg_header *h) {
    int64_t T = h->n_tokens, S = h->n_seqs, w = h->has_w ? 2 : 1;
    int64_t n = T * 8 * w + T * 4 * 2 + (2 * S + 1) * 4 + (int64_t)h->n_table * 4 * w +
                (int64_t)h->n_logits * 4;
    for (int j = 0; j < 3; j++) n += (int64_t)h->n_copies[j] * 8;
    return n;
}

static char *put(char *p, const void *src, size_t bytes) {
    if (bytes) memcpy(p, src, bytes);
    return p + bytes;
}

pl_status pl_dist_step_encode(const pl_dist_copies *cp, const pl_step_batch *b, int32_t block_size,
                              pl_dist_msg_header *h, const void **payload) {
    PL_ASSERT(block_size > 0);
    *h = (pl_dist_msg_header){.magic = PL_DIST_MSG_MAGIC, .version = PL_DIST_MSG_VERSION,
                              .kind = PL_DIST_MSG_STEP, .n_tokens = b->n_tokens,
                              .n_seqs = b->n_seqs,
                              .n_copies = {cp->n_swap_out, cp->n_swap_in, cp->n_cow},
                              .n_logits = b->n_logits, .has_w = b->block_tables_w != NULL};
    for (int32_t i = 0; i < b->n_seqs; i++) h->n_table += blocks_of(b->context_lens[i], block_size);
    h->payload = payload_bytes(h);
    PL_TRY(reserve((size_t)h->payload));
    char *p = g_buf;
    size_t T = (size_t)b->n_tokens, S = (size_t)b->n_seqs;
    p = put(p, b->slot_mapping, T * 8);
    if (h->has_w) p = put(p, b->slot_mapping_w, T * 8);
    p = put(p, b->token_ids, T * 4);
    p = put(p, b->positions, T * 4);
    p = put(p, b->seq_start, (S + 1) * 4);
    p = put(p, b->context_lens, S * 4);
    for (int w = 0; w <= h->has_w; w++) {
        const int32_t *tables = w ? b->block_tables_w : b->block_tables;
        for (size_t i = 0; i < S; i++)
            p = put(p, tables + i * (size_t)b->max_blocks,
                    (size_t)blocks_of(b->context_lens[i], block_size) * 4);
    }
    p = put(p, b->logit_rows, (size_t)b->n_logits * 4);
    const pl_block_copy *lists[3] = {cp->swap_out, cp->swap_in, cp->cow};
    for (int j = 0; j < 3; j++) {
        for (int32_t i = 0; i < h->n_copies[j]; i++) p = put(p, &lists[j][i].src, 4);
        for (int32_t i = 0; i < h->n_copies[j]; i++) p = put(p, &lists[j][i].dst, 4);
    }
    PL_ASSERT((int64_t)(p - g_buf) == h->payload);
    *payload = g_buf;
    return PL_OK;
}

pl_status pl_dist_send_step(const pl_dist_copies *cp, const pl_step_batch *b, int32_t block_size) {
    double t0 = pl_clock_now();
    pl_dist_msg_header h;
    const void *payload;
    PL_TRY(pl_dist_step_encode(cp, b, block_size, &h, &payload));
    PL_TRY(pl_dist_bcast(&h, sizeof h, 0, "broadcasting a step"));
    PL_TRY(pl_dist_bcast(g_buf, (size_t)h.payload, 0, "broadcasting a step"));
    pl_dist_counters.steps++;
    pl_dist_counters.step_bytes += sizeof h + (uint64_t)h.payload;
    pl_dist_counters.step_seconds += pl_clock_now() - t0;
    return PL_OK;
}

pl_status pl_dist_send_stop(void) {
    pl_dist_msg_header h = {.magic = PL_DIST_MSG_MAGIC, .version = PL_DIST_MSG_VERSION,
                            .kind = PL_DIST_MSG_STOP};
    pl_status st = pl_dist_bcast(&h, sizeof h, 0, "telling the workers to stop");
    pl_dist_msg_free();
    return st;
}

static pl_status bad(const char *what, int64_t value, int64_t limit) {
    return pl_fail(PL_ERR_INTERNAL, "tensor parallel: a step message with %s %lld (allowed: 0 "
                   "to %lld)", what, (long long)value, (long long)limit);
}

#define CHECK_RANGE(what, value, limit)                                                     \
    do {                                                                                    \
        if ((value) < 0 || (value) > (limit)) return bad(what, value, limit);               \
    } while (0)

pl_status pl_dist_msg_check(const pl_dist_msg_header *h, const pl_dist_setup *su) {
    if (h->magic != PL_DIST_MSG_MAGIC || h->version != PL_DIST_MSG_VERSION ||
        h->kind < PL_DIST_MSG_STEP || h->kind > PL_DIST_MSG_PROBE)
        return pl_fail(PL_ERR_INTERNAL, "tensor parallel: a step message with a bad header "
                       "(magic %08x, version %d, kind %d; this build sends %08x, version %d): "
                       "the ranks run different builds?", (unsigned)h->magic, h->version,
                       h->kind, (unsigned)PL_DIST_MSG_MAGIC, PL_DIST_MSG_VERSION);
    if (h->kind == PL_DIST_MSG_PROBE) {
        if (h->n_tokens < 1 || h->n_seqs < 1)
            return pl_fail(PL_ERR_INTERNAL, "tensor parallel: a probe of %d floats, %d times",
                           h->n_tokens, h->n_seqs);
        return PL_OK;
    }
    if (h->kind != PL_DIST_MSG_STEP) return PL_OK;
    CHECK_RANGE("tokens", h->n_tokens, su->max_tokens);
    CHECK_RANGE("sequences", h->n_seqs, su->max_seqs);
    CHECK_RANGE("logits rows", h->n_logits, su->max_logits);
    CHECK_RANGE("block ids", h->n_table, (int64_t)su->max_seqs * su->max_blocks);
    static const char *const copy_names[3] = {"swap-out copies", "swap-in copies",
                                              "copy-on-write copies"};
    for (int j = 0; j < 3; j++)
        CHECK_RANGE(copy_names[j], h->n_copies[j], (int64_t)su->num_blocks + su->num_blocks_w);
    if (h->has_w != (su->kv_groups != 0))
        return pl_fail(PL_ERR_INTERNAL, "tensor parallel: a step %s second block tables, the "
                       "setup's KV cache %s them", h->has_w ? "with" : "without",
                       su->kv_groups ? "has" : "has no");
    if (h->payload != payload_bytes(h))
        return pl_fail(PL_ERR_INTERNAL, "tensor parallel: step payload of %lld bytes, expected "
                       "%lld", (long long)h->payload, (long long)payload_bytes(h));
    return PL_OK;
}

/* Every id of list[0..n) in [0, limit). */
static pl_status check_ids(const char *what, const int32_t *list, int32_t n, int64_t limit) {
    for (int32_t i = 0; i < n; i++)
        if (list[i] < 0 || list[i] >= limit)
            return pl_fail(PL_ERR_INTERNAL, "tensor parallel: a step message with %s %d (of %lld)",
                           what, list[i], (long long)limit);
    return PL_OK;
}

/* Slots: each in [0, n_slots) or negative (no slot: written nowhere, pl_kv_write). */
static pl_status check_slots(const int64_t *slots, int32_t T, int64_t n_slots) {
    for (int32_t t = 0; t < T; t++)
        if (slots[t] >= n_slots)
            return pl_fail(PL_ERR_INTERNAL, "tensor parallel: a step message with slot %lld (of "
                           "%lld)", (long long)slots[t], (long long)n_slots);
    return PL_OK;
}

/* The S sequences' tables at *blocks (ceil(ctx / block_size) ids each) into tables
 * [S][max_blocks], each id in [0, limit) but for a leading run of a sliding window's dropped
 * entries (PL_KV_NO_BLOCK; never a table's last block, where the step's tokens go); advances
 * *blocks past them. */
static pl_status take_tables(const int32_t **blocks, int32_t S, const int32_t *ctx,
                             const pl_dist_setup *su, int64_t limit, int32_t *tables) {
    const int32_t *b = *blocks;
    for (int32_t i = 0; i < S; i++) {
        int32_t nb = blocks_of(ctx[i], su->block_size), lead = 0;
        if (nb > su->max_blocks)
            return pl_fail(PL_ERR_INTERNAL, "tensor parallel: a sequence of %d blocks (at most "
                           "%d)", nb, su->max_blocks);
        while (lead < nb - 1 && b[lead] == PL_KV_NO_BLOCK) lead++;
        PL_TRY(check_ids("block id", b + lead, nb - lead, limit));
        b += nb;
    }
    for (int32_t i = 0; i < S; i++) {
        int32_t nb = blocks_of(ctx[i], su->block_size);
        memcpy(tables + (size_t)i * (size_t)su->max_blocks, *blocks, (size_t)nb * 4);
        *blocks += nb;
    }
    return PL_OK;
}

pl_status pl_dist_step_decode(const pl_dist_msg_header *h, const void *payload, size_t bytes,
                              const pl_dist_setup *su, int32_t *tables, int32_t *tables_w,
                              pl_dist_step_view *v) {
    memset(v, 0, sizeof *v);
    PL_ASSERT(su->block_size > 0 && ((uintptr_t)payload & 7) == 0);
    PL_TRY(pl_dist_msg_check(h, su));
    if (h->kind != PL_DIST_MSG_STEP)
        return pl_fail(PL_ERR_INTERNAL, "tensor parallel: a message of kind %d has no step",
                       h->kind);
    if ((int64_t)bytes != h->payload)
        return pl_fail(PL_ERR_INTERNAL, "tensor parallel: a step payload of %zu bytes, its "
                       "header says %lld", bytes, (long long)h->payload);
    const int32_t T = h->n_tokens, S = h->n_seqs, max_blocks = su->max_blocks;
    const int64_t *slots = payload, *slots_w = h->has_w ? slots + T : NULL;
    const int32_t *tok = (const int32_t *)(slots + T * (h->has_w ? 2 : 1)), *pos = tok + T;
    const int32_t *seq_start = pos + T, *ctx = seq_start + S + 1, *blocks = ctx + S;
    if (seq_start[0] != 0 || seq_start[S] != T)
        return pl_fail(PL_ERR_INTERNAL, "tensor parallel: a step whose sequences span tokens %d "
                       "to %d of %d", seq_start[0], seq_start[S], T);
    int64_t n_table = 0;
    for (int32_t i = 0; i < S; i++) {
        int32_t q_len = seq_start[i + 1] - seq_start[i];
        if (seq_start[i + 1] < seq_start[i] || ctx[i] < q_len)
            return pl_fail(PL_ERR_INTERNAL, "tensor parallel: sequence %d of a step: tokens %d "
                           "to %d, context %d", i, seq_start[i], seq_start[i + 1], ctx[i]);
        n_table += blocks_of(ctx[i], su->block_size);
    }
    if (n_table != h->n_table)
        return pl_fail(PL_ERR_INTERNAL, "tensor parallel: a step whose contexts need %lld block "
                       "ids, its header says %d", (long long)n_table, h->n_table);
    /* the second tables: the same pool (KV cache groups) or the window pool (layer kinds) */
    const int64_t pool_w = su->kv_groups == 2 ? su->num_blocks_w : su->num_blocks;
    PL_TRY(check_slots(slots, T, (int64_t)su->num_blocks * su->block_size));
    if (slots_w) PL_TRY(check_slots(slots_w, T, pool_w * su->block_size));
    PL_ASSERT(!h->has_w || tables_w);
    PL_TRY(take_tables(&blocks, S, ctx, su, su->num_blocks, tables));
    if (h->has_w) PL_TRY(take_tables(&blocks, S, ctx, su, pool_w, tables_w));
    const int32_t *rows = blocks;
    blocks += h->n_logits;
    PL_TRY(check_ids("logits row", rows, h->n_logits, T));
    /* swap-out: pool -> swap, swap-in: swap -> pool, copy-on-write: pool -> pool; with layer
     * kinds a window-pool block b is named num_blocks + b (kv/kv_store.h) */
    const int64_t pool = (int64_t)su->num_blocks + (su->kv_groups == 2 ? su->num_blocks_w : 0);
    const int64_t swap = (int64_t)su->num_swap_blocks + (su->kv_groups == 2 ? su->num_swap_blocks_w : 0);
    const int64_t src_pool[3] = {pool, swap, pool}, dst_pool[3] = {swap, pool, pool};
    for (int j = 0; j < 3; j++) {
        v->copy_src[j] = blocks;
        v->copy_dst[j] = blocks + h->n_copies[j];
        v->n_copies[j] = h->n_copies[j];
        PL_TRY(check_ids("copy source block", v->copy_src[j], h->n_copies[j], src_pool[j]));
        PL_TRY(check_ids("copy destination block", v->copy_dst[j], h->n_copies[j], dst_pool[j]));
        blocks += 2 * (size_t)h->n_copies[j];
    }
    v->kind = PL_DIST_MSG_STEP;
    v->batch = (pl_step_batch){
        .n_tokens = T, .token_ids = tok, .positions = pos, .slot_mapping = slots,
        .n_seqs = S, .seq_start = seq_start, .context_lens = ctx,
        .block_tables = tables, .max_blocks = max_blocks, .n_logits = h->n_logits,
        .logit_rows = rows, .slot_mapping_w = slots_w, .block_tables_w = h->has_w ? tables_w : NULL,
    };
    return PL_OK;
}

pl_status pl_dist_recv_step(pl_dist_step_view *v, const pl_dist_setup *su, int32_t *tables,
                            int32_t *tables_w) {
    pl_dist_msg_header h;
    memset(v, 0, sizeof *v);
    PL_TRY(pl_dist_bcast(&h, sizeof h, 1, "waiting for the next step"));
    double t0 = pl_clock_now(); /* the payload only: the wait for the header is idle time */
    PL_TRY(pl_dist_msg_check(&h, su));
    v->kind = h.kind;
    v->probe_floats = h.n_tokens;
    v->probe_iters = h.n_seqs;
    if (h.kind != PL_DIST_MSG_STEP) return PL_OK;
    PL_TRY(reserve((size_t)h.payload));
    PL_TRY(pl_dist_bcast(g_buf, (size_t)h.payload, 0, "receiving a step"));
    PL_TRY(pl_dist_step_decode(&h, g_buf, (size_t)h.payload, su, tables, tables_w, v));
    pl_dist_counters.steps++;
    pl_dist_counters.step_bytes += sizeof h + (uint64_t)h.payload;
    pl_dist_counters.step_seconds += pl_clock_now() - t0;
    return PL_OK;
}

void pl_dist_hook(pl_forward_ctx *c, const pl_model *m) {
    /* an output layer left whole (PAGELLM_TP_OUTPUT=rank0) is rank 0's alone: nothing to gather */
    int whole = m->shard.n_vocab == m->hp.n_vocab;
    pl_forward_tp tp = {pl_dist_reduce_sum, whole ? NULL : pl_dist_gather_logits, (void *)m};
    pl_forward_set_tp(c, &tp);
}

pl_status pl_dist_probe_loop(int64_t n, int32_t iters, double *us_each) {
    float *x = calloc((size_t)n, sizeof(float));
    if (!x) return pl_fail(PL_ERR_NOMEM, "tensor parallel: out of memory for a probe");
    pl_dist_stats keep = pl_dist_counters;
    pl_status st = PL_OK;
    double t0 = 0;
    for (int32_t i = -1; i < iters && st == PL_OK; i++) { /* one warm-up */
        if (i == 0) t0 = pl_clock_now();
        st = pl_dist_reduce_sum(NULL, x, n);
    }
    *us_each = (pl_clock_now() - t0) / (iters > 0 ? iters : 1) * 1e6;
    pl_dist_counters = keep;
    free(x);
    return st;
}

pl_status pl_dist_probe_reduce(int64_t n, int32_t iters, double *us_each) {
    if (n < 1 || n > INT32_MAX || iters < 1)
        return pl_fail(PL_ERR_INVALID_ARG, "tensor parallel: probe of %lld floats", (long long)n);
    pl_dist_msg_header h = {.magic = PL_DIST_MSG_MAGIC, .version = PL_DIST_MSG_VERSION,
                            .kind = PL_DIST_MSG_PROBE, .n_tokens = (int32_t)n, .n_seqs = iters};
    PL_TRY(pl_dist_bcast(&h, sizeof h, 0, "starting a probe"));
    return pl_dist_probe_loop(n, iters, us_each);
}
