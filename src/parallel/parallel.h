/* parallel/parallel — tensor parallelism over MPI (issue 13): one engine, N ranks that each hold
 * a shard of every layer (model.h: pl_model_shard).
 *
 * Rank 0 runs everything users see (server, scheduler, KV manager, sampling) and the forward pass
 * on its shard; ranks 1..N-1 run pl_dist_worker_run: receive the engine's setup once (block
 * counts, budgets), then loop receiving one step message and running their shard of it, until
 * rank 0 says stop. Every rank holds the same KV blocks (same ids, same block size) for its own
 * KV heads, so rank 0's block decisions (prefix cache, copy-on-write, swap, preemption) reach the
 * workers as the step's copy lists and block tables, nothing more.
 *
 * The step message (parallel/step_msg.c) is the step batch of model/step_batch.h plus the step's
 * block copies: a fixed header, then token ids, positions, slots, sequence starts, context
 * lengths, each sequence's block ids up to its context (not the padded table), the rows that
 * want logits and the copy pairs. Every rank computes the logits of its vocabulary rows of the
 * output layer; rank 0 gathers them (pl_dist_gather_logits).
 *
 * Partial sums (model.h's reduce hook) are added in rank order 0, 1, ..., N-1 for every value:
 * at N = 2 by an all-gather and the sum on both ranks, above by a reduce-scatter (rank r sums
 * segment r, an all-to-all) and an all-gather of the sums. The same bits everywhere and on every
 * run, whatever algorithm MPI picks (an MPI_Allreduce is free to change its order with the
 * message size).
 *
 * Faults: MPI errors return (MPI_ERRORS_RETURN) and become a status naming the operation. Every
 * collective is non-blocking and polled with a deadline (PAGELLM_DIST_TIMEOUT seconds, 60 by
 * default; a worker waiting for the next step waits forever, an idle server being normal), and
 * gives up 0.3 s after pl_dist_cancel (the SIGTERM mpirun sends when another rank died). After
 * one failure every later collective fails at once, so the engine fails its requests with the
 * message instead of waiting again. Loading is agreed: a rank that cannot load its shard makes
 * every rank fail with that rank's message.
 *
 * Without Open MPI at configure time (no_mpi.c) pl_dist_available() is 0 and pl_dist_init
 * fails with a message; nothing else is called then.
 */
#ifndef PL_DIST_DIST_H
#define PL_DIST_DIST_H

#include "base/status.h"
#include "kv/manager.h"
#include "model/model.h"
#include "model/step_batch.h"
#include "pagellm.h"

#include <stddef.h>
#include <stdint.h>

/* 1 when this build has MPI. */
int pl_dist_available(void);
/* MPI_Init (threads: serialized, the engine thread calls MPI) once per process; checks that the
 * world has exactly tp_size processes; sets the error handler; installs a SIGTERM handler that
 * calls pl_dist_cancel (serve takes SIGTERM itself and calls it) and registers pl_dist_finalize
 * with atexit. */
pl_status pl_dist_init(int32_t tp_size);
int pl_dist_active(void);     /* pl_dist_init succeeded and finalize has not run */
int32_t pl_dist_rank(void);   /* 0 when not active */
int32_t pl_dist_size(void);   /* 1 when not active */
/* Async-signal-safe: collectives still waiting 0.3 s later fail. */
void pl_dist_cancel(void);
void pl_dist_finalize(void);

/* Every rank passes its own status (and `what` it was doing, e.g. "could not load its shard");
 * returns PL_OK on every rank only if all were PL_OK, else the first failing rank's status and
 * message ("tensor parallel: rank R WHAT: its error") on every rank. */
pl_status pl_dist_agree(pl_status mine, const char *what);

enum { PL_DIST_MAX_TENSORS = 1024 }; /* kv/cache.h's PL_KV_MAX_TENSORS */

/* What rank 0 resolved at engine creation that the workers need to build the same KV pools and
 * step buffers. ok = 0: rank 0 failed after loading; the workers exit. */
typedef struct {
    int32_t ok;
    int32_t kv_dtype;          /* pl_dtype of the KV cache */
    int32_t block_size;
    int32_t num_blocks, num_swap_blocks;
    int32_t max_tokens, max_seqs, max_blocks, max_logits;
    int32_t f16_as_bf16;       /* rank 0's F16 matrices are bf16 (--f16-weights): every worker
                                * must hold its own likewise, or refuse (pl_dist_worker_run) */
    /* The KV cache's tables (kv/cache.h): 0 one a sequence; 1 KV cache groups (a second table
     * per sequence in the same pool: the store has half the layers' tensors); 2 layer kinds (a
     * second table in the window layers' own pool of num_blocks_w blocks, swap num_swap_blocks_w;
     * kinds[i] = 1 for a window-kind tensor). With 1 or 2 every step carries both tables. */
    int32_t kv_groups, kv_tensors, num_blocks_w, num_swap_blocks_w;
    uint8_t kinds[PL_DIST_MAX_TENSORS];
} pl_dist_setup;
pl_status pl_dist_send_setup(const pl_dist_setup *s);

/* The step channel. Rank 0 sends each step (the copies are applied by every rank before the
 * forward pass, in the order swap-out, swap-in, copy-on-write) and finally stop. */
typedef struct {
    const pl_block_copy *swap_out, *swap_in, *cow;
    int32_t n_swap_out, n_swap_in, n_cow;
} pl_dist_copies;
pl_status pl_dist_send_step(const pl_dist_copies *cp, const pl_step_batch *b, int32_t block_size);
pl_status pl_dist_send_stop(void);
/* Rank 0, between steps: time `iters` reductions of n floats (n <= the reserved tokens x dim)
 * with every rank in the loop, so the time is the transfer and the sum, not a wait for a slower
 * rank's matmul. Benchmarks only. */
pl_status pl_dist_probe_reduce(int64_t n, int32_t iters, double *us_each);

/* The forward pass's collectives (model.h: pl_forward_tp), ud = the model: the rank-order sum of
 * partial projections, and the gather of every rank's logits columns into rank 0's rows. Need
 * pl_dist_reserve first (max_floats = max tokens x dim; logits rows x the full vocabulary). */
pl_status pl_dist_reduce_sum(void *ud, float *x, int64_t n);
pl_status pl_dist_gather_logits(void *ud, const float *part, int32_t rows, float *logits);
pl_status pl_dist_reserve(int64_t max_floats, int32_t max_rows, int32_t n_vocab);
/* pl_forward_set_tp with the two above, for model m. */
void pl_dist_hook(pl_forward_ctx *c, const pl_model *m);

/* A worker rank's whole life for an engine configured as c (the same command line as rank 0):
 * load this rank's shard, take the setup, serve steps until stop. Returns the failure that ended
 * it, already agreed or named. */
pl_status pl_dist_worker_run(const pl_engine_config *c);

/* Counters for benchmarks (this rank): steps and bytes broadcast, seconds in broadcasts,
 * reductions, their bytes and seconds. */
typedef struct {
    uint64_t steps, step_bytes;
    double step_seconds;
    uint64_t reduces, reduce_bytes;
    double reduce_seconds;
    uint64_t gathers, gather_bytes; /* logits sent (rank 0 counts its own columns too) */
    double gather_seconds;
} pl_dist_stats;
void pl_dist_get_stats(pl_dist_stats *s);
/* Remember this rank's resident memory now (called once its shard is loaded), and which file
 * and copied slices hold its weights (the report counts their resident pages). */
void pl_dist_note_loaded(const char *model_path, size_t owned_bytes);
/* ... and at the end of a worker's run, before it frees its shard. */
void pl_dist_note_done(void);
/* One line: rank, resident memory after loading and at the end, step messages (bytes per step,
 * time), reductions (count, bytes, mean time); without tensor parallelism the resident memory. */
void pl_dist_report(char *buf, size_t cap);

#endif
