/* server/kv_blocks — GET /v1/kv/blocks: the KV block pool as compact JSON, for the web UI's grid
 * and for anyone watching the cache.
 *
 *   {"object": "kv.blocks", "version", "steps", "block_size", "num_blocks", "num_swap_blocks",
 *    "blocks": [state per primary block], "swap_blocks": [state per swap block],
 *    "counts": {"free", "cached", "used", "shared", "swapped"},
 *    "num_window_blocks", "window_blocks": [state per window-pool block],
 *    "num_window_swap_blocks", "window_swap_blocks": [state per block of its swap pool],
 *    "window_counts": {"free", "cached", "used", "shared", "swapped"},   (layer kinds' window
 *              pool: 0, [] and zeros without one)
 *    "stats": {"running", "waiting", "swapped", "kv_usage", "prefix_queries", "prefix_hits",
 *              "prefix_hit_rate", "preemptions", "swaps_out", "steps", "generation_tokens",
 *              "step_seconds", "window_freed_blocks", "window_blocks_total",
 *              "window_blocks_used", "window_kv_usage"},   (the window_* four: layer kinds'
 *              window pool, 0 without one; "blocks" are then the full pool's)
 *    "tables": [{"request_id", "index", "swapped", "tokens", "blocks": [ids],
 *                "window_blocks": [ids of its window table in the window pool, or in that
 *                pool's swap pool when swapped]}]   (?tables=1)}
 * A table's id -1 stands for a block released by the sliding window (kv/manager.h).
 *
 * States are pl_kv_block_state: 0 free, 1 free but cached (prefix), 2 used by one sequence,
 * 3 shared (ref > 1), 4 swapped out (swap pool). The picture comes from the engine thread
 * (pl_engine_kv_snapshot); this thread only formats it, so a slow client never slows a step.
 * The JSON is written by hand: one small integer per block, no object per block.
 */
#include "server/server_internal.h"
#include "base/buf.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef pl_strbuf buf;

#define put pl_strbuf_printf

/* Append "[d,d,...]" for states[0..n): one digit each. */
static void put_states(buf *b, const uint8_t *st, int32_t n) {
    pl_strbuf_putc(b, '[');
    for (int32_t i = 0; i < n; i++) {
        char d[2] = {',', (char)('0' + (st[i] <= PL_KV_BLOCK_SWAPPED ? st[i] : 0))};
        pl_strbuf_append(b, i ? d : d + 1, i ? 2 : 1);
    }
    pl_strbuf_putc(b, ']');
}

/* Count states[0..n) by state into count[PL_KV_BLOCK_SWAPPED + 1]. */
static void count_states(const uint8_t *st, int32_t n, int64_t *count) {
    for (int32_t i = 0; i < n; i++)
        if (st[i] <= PL_KV_BLOCK_SWAPPED) count[st[i]]++;
}

/* Append ,"name":{"free","cached","used","shared","swapped"} from count (a pool's primary and
 * swap blocks together: "free" counts the free ones of both). */
static void put_counts(buf *b, const char *name, const int64_t *count) {
    put(b, ",\"%s\":{\"free\":%" PRId64 ",\"cached\":%" PRId64 ",\"used\":%" PRId64
           ",\"shared\":%" PRId64 ",\"swapped\":%" PRId64 "}",
        name, count[PL_KV_BLOCK_FREE], count[PL_KV_BLOCK_CACHED], count[PL_KV_BLOCK_USED],
        count[PL_KV_BLOCK_SHARED], count[PL_KV_BLOCK_SWAPPED]);
}

/* Append ",\"name\":[id,...]" for ids[0..n). */
static void put_ids(buf *b, const char *name, const int32_t *ids, int32_t n) {
    put(b, ",\"%s\":[", name);
    for (int32_t j = 0; j < n; j++) put(b, "%s%d", j ? "," : "", ids[j]);
    pl_strbuf_putc(b, ']');
}

char *pl_server_kv_blocks_json(const pl_kv_snapshot *k, const pl_engine_stats *s) {
    buf b = {0};
    int64_t count[PL_KV_BLOCK_SWAPPED + 1] = {0}, wcount[PL_KV_BLOCK_SWAPPED + 1] = {0};
    const uint8_t *wst = k->states + k->n_blocks + k->n_swap_blocks;
    count_states(k->states, k->n_blocks + k->n_swap_blocks, count);
    count_states(wst, k->n_window_blocks + k->n_window_swap_blocks, wcount);
    put(&b, "{\"object\":\"kv.blocks\",\"version\":%" PRIu64 ",\"steps\":%" PRIu64
            ",\"block_size\":%d,\"num_blocks\":%d,\"num_swap_blocks\":%d,\"blocks\":",
        k->version, k->steps, k->block_size, k->n_blocks, k->n_swap_blocks);
    put_states(&b, k->states, k->n_blocks);
    put(&b, ",\"swap_blocks\":");
    put_states(&b, k->states + k->n_blocks, k->n_swap_blocks);
    put_counts(&b, "counts", count);
    put(&b, ",\"num_window_blocks\":%d,\"window_blocks\":", k->n_window_blocks);
    put_states(&b, wst, k->n_window_blocks);
    put(&b, ",\"num_window_swap_blocks\":%d,\"window_swap_blocks\":", k->n_window_swap_blocks);
    put_states(&b, wst + k->n_window_blocks, k->n_window_swap_blocks);
    put_counts(&b, "window_counts", wcount);
    double hit_rate = s->prefix_queries ? (double)s->prefix_hits / (double)s->prefix_queries : 0;
    put(&b, ",\"stats\":{\"running\":%d,\"waiting\":%d,\"swapped\":%d,\"kv_usage\":%.6f,"
            "\"prefix_queries\":%" PRIu64 ",\"prefix_hits\":%" PRIu64 ",\"prefix_hit_rate\":%.6f,"
            "\"preemptions\":%" PRIu64 ",\"swaps_out\":%" PRIu64 ",\"steps\":%" PRIu64
            ",\"generation_tokens\":%" PRIu64 ",\"step_seconds\":%.6f,\"window_freed_blocks\":%"
            PRIu64 ",\"window_blocks_total\":%d,\"window_blocks_used\":%d,"
            "\"window_kv_usage\":%.6f}",
        s->running, s->waiting, s->swapped, s->kv_usage, s->prefix_queries, s->prefix_hits,
        hit_rate, s->preemptions, s->swaps_out, s->steps, s->generation_tokens, s->step_seconds,
        s->window_freed_blocks, s->window_blocks_total, s->window_blocks_used,
        s->window_kv_usage);
    if (k->has_tables) {
        put(&b, ",\"tables\":[");
        for (int32_t i = 0; i < k->n_seqs; i++) {
            const pl_kv_seq_blocks *q = &k->seqs[i];
            put(&b, "%s{\"request_id\":%" PRIu64 ",\"index\":%d,\"swapped\":%s,\"tokens\":%d",
                i ? "," : "", q->request_id, q->index, q->swapped ? "true" : "false",
                q->n_tokens);
            put_ids(&b, "blocks", k->block_ids + q->first_block, q->n_blocks);
            put_ids(&b, "window_blocks", k->block_ids + q->first_block + q->n_blocks,
                    q->n_window_blocks);
            pl_strbuf_putc(&b, '}');
        }
        put(&b, "]");
    }
    put(&b, "}");
    return pl_strbuf_take(&b);
}

/* Query flags: absent, "0", "1", "false", "true". */
static int flag_arg(struct MHD_Connection *c, const char *name, int *out, pl_server_error *err) {
    const char *v = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, name);
    *out = 0;
    if (!v) return 0;
    if (!strcmp(v, "1") || !strcmp(v, "true") || !*v) *out = 1;
    else if (strcmp(v, "0") && strcmp(v, "false"))
        return pl_server_fail(err, 400, name, "invalid_value",
                              "'%s' must be 0, 1, true or false, got '%.64s'", name, v);
    return 0;
}

enum MHD_Result pl_srv_kv_blocks(pl_server *s, struct MHD_Connection *c, pl_conn_ctx *x) {
    (void)x;
    pl_server_error err;
    int tables;
    if (flag_arg(c, "tables", &tables, &err)) return pl_srv_send_error(c, &err);
    pl_kv_snapshot k;
    pl_status st0 = pl_engine_kv_snapshot(s->eng, tables, 250, &k);
    if (st0 == PL_ERR_NOMEM) {
        pl_server_nomem(&err);
        return pl_srv_send_error(c, &err);
    }
    if (st0 != PL_OK) {
        pl_server_fail(&err, 500, NULL, "internal_error", "%s", pl_last_error());
        return pl_srv_send_error(c, &err);
    }
    pl_engine_stats st;
    pl_engine_get_stats(s->eng, &st);
    char *json = pl_server_kv_blocks_json(&k, &st);
    pl_kv_snapshot_destroy(&k);
    return pl_srv_send_text(c, MHD_HTTP_OK, "application/json", json);
}
