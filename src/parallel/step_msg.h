/* parallel/step_msg — the receiving side of the step channel (workers), the message buffer, and
 * the encoding and checked decoding of a step apart from the transport (tests/unit/test_parallel
 * runs them without MPI); the sending side is in parallel.h. Internal to src/parallel/. */
#ifndef PL_DIST_STEP_MSG_H
#define PL_DIST_STEP_MSG_H

#include "parallel/parallel_internal.h"

enum { PL_DIST_MSG_STEP = 1, PL_DIST_MSG_STOP = 2, PL_DIST_MSG_PROBE = 3 };
enum { PL_DIST_MSG_MAGIC = 0x50544c50 /* "PLTP" */, PL_DIST_MSG_VERSION = 1 };

/* The fixed header every message starts with (broadcast on its own; the payload follows). A
 * probe carries its float count in n_tokens and its iterations in n_seqs. */
typedef struct {
    int32_t magic, version, kind, n_tokens, n_seqs;
    int32_t n_copies[3];     /* swap-out, swap-in, copy-on-write */
    int32_t n_table;         /* block ids sent: sum over seqs of ceil(context_len / block_size) */
    int32_t n_logits;
    int64_t payload;         /* bytes */
    int32_t has_w;           /* 1: the second tables follow (the setup's kv_groups) */
    int32_t pad[3];
} pl_dist_msg_header;        /* 64 bytes */

/* A received step: the batch (arrays point into the receive buffer, block tables into the
 * caller's [max_seqs][max_blocks] array) and the three copy lists (swap-out, swap-in,
 * copy-on-write) as source and destination block ids. Valid until the next receive. */
typedef struct {
    int kind;
    pl_step_batch batch;
    const int32_t *copy_src[3], *copy_dst[3];
    int32_t n_copies[3];
    int32_t probe_floats, probe_iters;   /* PL_DIST_MSG_PROBE */
} pl_dist_step_view;

pl_status pl_dist_recv_setup(pl_dist_setup *s);
/* Receive the next message into v; tables (and tables_w, with the setup's kv_groups) is the
 * worker's [su->max_seqs][su->max_blocks] array.
 * A message that does not fit the setup is refused (PL_ERR_INTERNAL, a message naming what). */
pl_status pl_dist_recv_step(pl_dist_step_view *v, const pl_dist_setup *su, int32_t *tables,
                            int32_t *tables_w);

/* Encode a step into the message buffer: fills *h, *payload points at its h->payload bytes
 * (valid until the next encode, receive or pl_dist_msg_free). */
pl_status pl_dist_step_encode(const pl_dist_copies *cp, const pl_step_batch *b, int32_t block_size,
                              pl_dist_msg_header *h, const void **payload);
/* Check a received header against the setup: magic, version, kind, every count in [0, its limit]
 * and the payload size the counts imply. */
pl_status pl_dist_msg_check(const pl_dist_msg_header *h, const pl_dist_setup *su);
/* Decode a checked header's payload of `bytes` bytes (refused unless exactly h->payload) into v:
 * arrays point into payload, block tables are copied into tables. Every index is checked (token
 * starts, block counts against n_table and max_blocks, block and slot ids against the pools,
 * logits rows against the tokens), so a malformed message is refused, never read past. */
pl_status pl_dist_step_decode(const pl_dist_msg_header *h, const void *payload, size_t bytes,
                              const pl_dist_setup *su, int32_t *tables, int32_t *tables_w,
                              pl_dist_step_view *v);
void pl_dist_msg_free(void);
/* Both sides of a probe: `iters` reductions of n floats back to back (counters untouched). */
pl_status pl_dist_probe_loop(int64_t n, int32_t iters, double *us_each);

#endif
