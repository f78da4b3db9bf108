/* parallel/step_msg — the messages rank 0 broadcasts: the engine's setup once, then per step one
 * header and one payload (parallel.h says what is in it), finally stop.
 *
 * Payload, in order (8-byte fields first so every array is aligned in the receive buffer):
 *   slots int64[T] | tokens int32[T] | positions int32[T] | seq_start int32[S+1] |
 *   context_lens int32[S] | block ids int32[sum over seqs of ceil(context_len / block_size)] |
 *   logits rows int32[n_logits] |
 *   swap-out src int32[n0], dst int32[n0] | swap-in src, dst [n1] | copy-on-write src, dst [n2]
 */
#include "parallel/step_msg.h"

#include "base/clock.h"

#include <stdlib.h>
#include <string.h>

pl_dist_stats pl_dist_counters;

enum { MAGIC = 0x50544c50 /* "PLTP" */ };

typedef struct {
    int32_t magic, kind, n_tokens, n_seqs;
    int32_t n_copies[3];
    int32_t n_table;
    int64_t payload;
    int32_t n_logits;
    int32_t pad[5];
} header;                   /* 64 bytes */

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
    return (ctx + block_size - 1) / block_size;
}

static size_t payload_bytes(const header *h) {
    size_t T = (size_t)h->n_tokens, S = (size_t)h->n_seqs;
    size_t n = T * 8 + T * 4 * 2 + (2 * S + 1) * 4 + (size_t)h->n_table * 4 +
               (size_t)h->n_logits * 4;
    for (int j = 0; j < 3; j++) n += (size_t)h->n_copies[j] * 8;
    return n;
}

static char *put(char *p, const void *src, size_t bytes) {
    memcpy(p, src, bytes);
    return p + bytes;
}

pl_status pl_dist_send_step(const pl_dist_copies *cp, const pl_step_batch *b, int32_t block_size) {
    double t0 = pl_clock_now();
    header h = {.magic = MAGIC, .kind = PL_DIST_MSG_STEP, .n_tokens = b->n_tokens,
                .n_seqs = b->n_seqs, .n_copies = {cp->n_swap_out, cp->n_swap_in, cp->n_cow},
                .n_logits = b->n_logits};
    for (int32_t i = 0; i < b->n_seqs; i++) h.n_table += blocks_of(b->context_lens[i], block_size);
    h.payload = (int64_t)payload_bytes(&h);
    PL_TRY(reserve((size_t)h.payload));
    char *p = g_buf;
    size_t T = (size_t)b->n_tokens, S = (size_t)b->n_seqs;
    p = put(p, b->slot_mapping, T * 8);
    p = put(p, b->token_ids, T * 4);
    p = put(p, b->positions, T * 4);
    p = put(p, b->seq_start, (S + 1) * 4);
    p = put(p, b->context_lens, S * 4);
    for (size_t i = 0; i < S; i++)
        p = put(p, b->block_tables + i * (size_t)b->max_blocks,
                (size_t)blocks_of(b->context_lens[i], block_size) * 4);
    p = put(p, b->logit_rows, (size_t)b->n_logits * 4);
    const pl_block_copy *lists[3] = {cp->swap_out, cp->swap_in, cp->cow};
    for (int j = 0; j < 3; j++) {
        for (int32_t i = 0; i < h.n_copies[j]; i++) p = put(p, &lists[j][i].src, 4);
        for (int32_t i = 0; i < h.n_copies[j]; i++) p = put(p, &lists[j][i].dst, 4);
    }
    PL_ASSERT((size_t)(p - g_buf) == (size_t)h.payload);
    PL_TRY(pl_dist_bcast(&h, sizeof h, 0, "broadcasting a step"));
    PL_TRY(pl_dist_bcast(g_buf, (size_t)h.payload, 0, "broadcasting a step"));
    pl_dist_counters.steps++;
    pl_dist_counters.step_bytes += sizeof h + (uint64_t)h.payload;
    pl_dist_counters.step_seconds += pl_clock_now() - t0;
    return PL_OK;
}

pl_status pl_dist_send_stop(void) {
    header h = {.magic = MAGIC, .kind = PL_DIST_MSG_STOP};
    pl_status st = pl_dist_bcast(&h, sizeof h, 0, "telling the workers to stop");
    pl_dist_msg_free();
    return st;
}

pl_status pl_dist_recv_step(pl_dist_step_view *v, int32_t block_size, int32_t max_blocks,
                            int32_t *tables) {
    header h;
    memset(v, 0, sizeof *v);
    PL_TRY(pl_dist_bcast(&h, sizeof h, 1, "waiting for the next step"));
    double t0 = pl_clock_now(); /* the payload only: the wait for the header is idle time */
    if (h.magic != MAGIC || h.kind < PL_DIST_MSG_STEP || h.kind > PL_DIST_MSG_PROBE)
        return pl_fail(PL_ERR_INTERNAL, "tensor parallel: a step message with a bad header "
                       "(magic %08x, kind %d): the ranks run different builds?", (unsigned)h.magic,
                       h.kind);
    v->kind = h.kind;
    v->probe_floats = h.n_tokens;
    v->probe_iters = h.n_seqs;
    if (h.kind != PL_DIST_MSG_STEP) return PL_OK;
    if (h.payload != (int64_t)payload_bytes(&h))
        return pl_fail(PL_ERR_INTERNAL, "tensor parallel: step payload of %lld bytes, expected "
                       "%zu", (long long)h.payload, payload_bytes(&h));
    PL_TRY(reserve((size_t)h.payload));
    PL_TRY(pl_dist_bcast(g_buf, (size_t)h.payload, 0, "receiving a step"));
    size_t T = (size_t)h.n_tokens, S = (size_t)h.n_seqs;
    const char *p = g_buf;
    const int64_t *slots = (const int64_t *)(const void *)p;
    p += T * 8;
    const int32_t *tok = (const int32_t *)(const void *)p, *pos = tok + T;
    const int32_t *seq_start = pos + T, *ctx = seq_start + S + 1, *blocks = ctx + S;
    for (size_t i = 0; i < S; i++) {
        int32_t nb = blocks_of(ctx[i], block_size);
        if (nb > max_blocks)
            return pl_fail(PL_ERR_INTERNAL, "tensor parallel: a sequence of %d blocks (at most "
                           "%d)", nb, max_blocks);
        memcpy(tables + i * (size_t)max_blocks, blocks, (size_t)nb * 4);
        blocks += nb;
    }
    const int32_t *rows = blocks;
    blocks += h.n_logits;
    for (int32_t i = 0; i < h.n_logits; i++)
        if (rows[i] < 0 || rows[i] >= h.n_tokens)
            return pl_fail(PL_ERR_INTERNAL, "tensor parallel: logits row %d of %d tokens", rows[i],
                           h.n_tokens);
    for (int j = 0; j < 3; j++) {
        v->copy_src[j] = blocks;
        v->copy_dst[j] = blocks + h.n_copies[j];
        v->n_copies[j] = h.n_copies[j];
        blocks += 2 * (size_t)h.n_copies[j];
    }
    v->batch = (pl_step_batch){
        .n_tokens = h.n_tokens, .token_ids = tok, .positions = pos, .slot_mapping = slots,
        .n_seqs = h.n_seqs, .seq_start = seq_start, .context_lens = ctx,
        .block_tables = tables, .max_blocks = max_blocks, .n_logits = h.n_logits,
        .logit_rows = rows,
    };
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
    header h = {.magic = MAGIC, .kind = PL_DIST_MSG_PROBE, .n_tokens = (int32_t)n,
                .n_seqs = iters};
    PL_TRY(pl_dist_bcast(&h, sizeof h, 0, "starting a probe"));
    return pl_dist_probe_loop(n, iters, us_each);
}
