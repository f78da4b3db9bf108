/* parallel/step_msg — the receiving side of the step channel (workers) and the message buffer;
 * the sending side is in parallel.h. Internal to src/parallel/. */
#ifndef PL_DIST_STEP_MSG_H
#define PL_DIST_STEP_MSG_H

#include "parallel/parallel_internal.h"

enum { PL_DIST_MSG_STEP = 1, PL_DIST_MSG_STOP = 2, PL_DIST_MSG_PROBE = 3 };

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
pl_status pl_dist_recv_step(pl_dist_step_view *v, int32_t block_size, int32_t max_blocks,
                            int32_t *tables);
void pl_dist_msg_free(void);
/* Both sides of a probe: `iters` reductions of n floats back to back (counters untouched). */
pl_status pl_dist_probe_loop(int64_t n, int32_t iters, double *us_each);

#endif
