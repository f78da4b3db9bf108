/* parallel/mpi — the MPI transport of parallel.h: init and finalize, polled collectives with a
 * deadline, agreement on a status, the deterministic sum of partial projections. */
#include "parallel/parallel_internal.h"

#include "base/clock.h"
#include "base/log.h"

#include <mpi.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int g_active;
static int32_t g_rank, g_size = 1;
static double g_timeout = 60.0;
static atomic_int g_cancel;      /* set by pl_dist_cancel (signal handler) */
static double g_cancel_at;       /* when the poll loop first saw it */
static int g_failed;             /* a collective failed: every later one fails at once */
static char g_failure[512];
static float *g_gather;          /* [size][cap] partial sums of every rank */
static int64_t g_gather_cap;
static float *g_logits;          /* rank 0: [rows x each rank's vocabulary] gathered logits */
static int32_t g_logit_rows, g_vocab;
static int *g_counts, *g_displs; /* [size] for MPI_Igatherv */
static int *g_seg;               /* [4][size]: send counts, send offsets, receive counts, receive
                                    offsets of the reduce-scatter (more than 2 ranks) */

int pl_dist_available(void) { return 1; }
int pl_dist_active(void) { return g_active; }
int32_t pl_dist_rank(void) { return g_active ? g_rank : 0; }
int32_t pl_dist_size(void) { return g_active ? g_size : 1; }

void pl_dist_cancel(void) { atomic_store(&g_cancel, 1); }

static void on_sigterm(int sig) {
    (void)sig;
    pl_dist_cancel();
}

static pl_status mpi_fail(int rc, const char *what) {
    char msg[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    return pl_fail(PL_ERR_IO, "tensor parallel (rank %d): %s failed: %s", g_rank, what, msg);
}

pl_status pl_dist_init(int32_t tp_size) {
    if (g_active) return PL_OK;
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        int provided = 0;
        if (MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
            return pl_fail(PL_ERR_IO, "tensor parallel: MPI_Init_thread failed");
        if (provided < MPI_THREAD_SERIALIZED) {
            MPI_Finalize();
            return pl_fail(PL_ERR_UNSUPPORTED, "tensor parallel: this MPI library does not allow "
                           "calls from a thread other than main (MPI_THREAD_SERIALIZED)");
        }
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    g_rank = rank;
    g_size = size;
    g_active = 1;
    atexit(pl_dist_finalize);
    if (size != tp_size)
        return pl_fail(PL_ERR_INVALID_ARG, "--tensor-parallel-size %d but the MPI job has %d "
                       "process%s: start it as mpirun -np %d pagellm ...", tp_size, size,
                       size == 1 ? "" : "es", tp_size);
    const char *t = getenv("PAGELLM_DIST_TIMEOUT");
    if (t) {
        double v = strtod(t, NULL);
        if (v > 0) g_timeout = v;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigterm;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    return PL_OK;
}

void pl_dist_finalize(void) {
    if (!g_active) return;
    g_active = 0;
    free(g_gather);
    free(g_logits);
    free(g_counts);
    free(g_displs);
    free(g_seg);
    g_gather = g_logits = NULL;
    g_counts = g_displs = g_seg = NULL;
    g_gather_cap = 0;
    g_logit_rows = 0;
    int fin = 0;
    MPI_Finalized(&fin);
    if (fin) return;
    if (g_failed) MPI_Abort(MPI_COMM_WORLD, 1); /* a peer is gone: Finalize could wait on it */
    MPI_Finalize();
}

/* Poll a request to completion: spin a little, then yield, then sleep (an idle worker must not
 * burn a core). Fails at the deadline (unless forever), 0.3 s after a cancel, or at once after
 * an earlier failure. */
static pl_status wait_req(MPI_Request *req, int forever, const char *what) {
    double t0 = pl_clock_now(), now = t0;
    for (uint64_t i = 0;; i++) {
        int done = 0;
        int rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) {
            g_failed = 1;
            pl_status st = mpi_fail(rc, what);
            snprintf(g_failure, sizeof g_failure, "%s", pl_last_error());
            return st;
        }
        if (done) return PL_OK;
        if (i < 2000) continue;
        if ((i & 63) == 0) now = pl_clock_now();
        const char *why = NULL;
        if (atomic_load(&g_cancel)) {
            if (g_cancel_at == 0) g_cancel_at = now;
            if (now - g_cancel_at > 0.3) why = "the job is being stopped (another rank died?)";
        }
        if (!forever && now - t0 > g_timeout) why = "timed out (PAGELLM_DIST_TIMEOUT)";
        if (why) {
            g_failed = 1;
            snprintf(g_failure, sizeof g_failure, "tensor parallel (rank %d): %s did not "
                     "complete after %.1f s: %s", g_rank, what, now - t0, why);
            return pl_fail(PL_ERR_IO, "%s", g_failure);
        }
        if (now - t0 < 0.01) sched_yield();
        else nanosleep(&(struct timespec){0, now - t0 < 0.5 ? 50000 : 1000000}, NULL);
    }
}

static pl_status check_alive(void) {
    if (!g_active) return pl_fail(PL_ERR_INTERNAL, "tensor parallel: MPI is not initialised");
    if (g_failed) return pl_fail(PL_ERR_IO, "%s", g_failure);
    return PL_OK;
}

pl_status pl_dist_bcast(void *buf, size_t bytes, int forever, const char *what) {
    PL_TRY(check_alive());
    if (bytes > INT32_MAX) return pl_fail(PL_ERR_INVALID_ARG, "%s: %zu bytes", what, bytes);
    MPI_Request req;
    int rc = MPI_Ibcast(buf, (int)bytes, MPI_BYTE, 0, MPI_COMM_WORLD, &req);
    if (rc != MPI_SUCCESS) return mpi_fail(rc, what);
    return wait_req(&req, forever, what);
}

pl_status pl_dist_agree(pl_status mine, const char *what) {
    PL_TRY(check_alive());
    enum { MSG = 400 };
    char *all = malloc((size_t)g_size * (MSG + 4));
    char me[MSG + 4];
    if (!all) return pl_fail(PL_ERR_NOMEM, "tensor parallel: out of memory");
    memset(me, 0, sizeof me);
    int32_t code = (int32_t)mine;
    memcpy(me, &code, 4);
    if (mine != PL_OK) snprintf(me + 4, MSG, "%s: %s", what, pl_last_error());
    MPI_Request req;
    int rc = MPI_Iallgather(me, MSG + 4, MPI_BYTE, all, MSG + 4, MPI_BYTE, MPI_COMM_WORLD, &req);
    pl_status st = rc == MPI_SUCCESS ? wait_req(&req, 0, what) : mpi_fail(rc, what);
    for (int32_t r = 0; st == PL_OK && r < g_size; r++) {
        const char *m = all + (size_t)r * (MSG + 4);
        memcpy(&code, m, 4);
        if (code != PL_OK)
            st = pl_fail((pl_status)code, "tensor parallel: rank %d %.*s", r, MSG, m + 4);
    }
    free(all);
    return st;
}

pl_status pl_dist_reserve(int64_t max_floats, int32_t max_rows, int32_t n_vocab) {
    if (!g_counts) {
        g_counts = calloc((size_t)g_size, sizeof(int));
        g_displs = calloc((size_t)g_size, sizeof(int));
        g_seg = calloc(4 * (size_t)g_size, sizeof(int));
        if (!g_counts || !g_displs || !g_seg)
            return pl_fail(PL_ERR_NOMEM, "tensor parallel: out of memory");
    }
    if (max_floats > g_gather_cap) {
        float *p = malloc((size_t)g_size * (size_t)max_floats * sizeof(float));
        if (!p) return pl_fail(PL_ERR_NOMEM, "tensor parallel: out of memory for %d x %lld floats",
                               g_size, (long long)max_floats);
        free(g_gather);
        g_gather = p;
        g_gather_cap = max_floats;
    }
    g_vocab = n_vocab;
    if (g_rank == 0 && max_rows > g_logit_rows) {
        if ((int64_t)max_rows * n_vocab > INT32_MAX)
            return pl_fail(PL_ERR_INVALID_ARG, "tensor parallel: %d logits rows of %d tokens "
                           "exceed one gather", max_rows, n_vocab);
        float *p = malloc((size_t)max_rows * (size_t)n_vocab * sizeof(float));
        if (!p) return pl_fail(PL_ERR_NOMEM, "tensor parallel: out of memory for the logits");
        free(g_logits);
        g_logits = p;
        g_logit_rows = max_rows;
    }
    return PL_OK;
}

/* Rank r's vocabulary rows start here (model.c cuts them the same way). */
static int32_t vocab0(int32_t r) { return (int32_t)((int64_t)g_vocab * r / g_size); }

pl_status pl_dist_gather_logits(void *ud, const float *part, int32_t rows, float *logits) {
    (void)ud;
    PL_TRY(check_alive());
    double t0 = pl_clock_now();
    int32_t mine = vocab0(g_rank + 1) - vocab0(g_rank);
    if (g_rank == 0) {
        PL_ASSERT(rows <= g_logit_rows && logits);
        for (int32_t r = 0, at = 0; r < g_size; r++) {
            g_counts[r] = rows * (vocab0(r + 1) - vocab0(r));
            g_displs[r] = at;
            at += g_counts[r];
        }
    }
    MPI_Request req;
    int rc = MPI_Igatherv(part, rows * mine, MPI_FLOAT, g_logits, g_counts, g_displs, MPI_FLOAT, 0,
                          MPI_COMM_WORLD, &req);
    if (rc != MPI_SUCCESS) return mpi_fail(rc, "gather of logits");
    PL_TRY(wait_req(&req, 0, "gather of logits"));
    if (g_rank == 0) /* rank-major blocks -> rows of the whole vocabulary */
        for (int32_t r = 0; r < g_size; r++) {
            int32_t v0 = vocab0(r), nv = vocab0(r + 1) - v0;
            for (int32_t i = 0; i < rows; i++)
                memcpy(logits + (size_t)i * (size_t)g_vocab + (size_t)v0,
                       g_logits + g_displs[r] + (size_t)i * (size_t)nv, (size_t)nv * sizeof(float));
        }
    pl_dist_counters.gathers++;
    pl_dist_counters.gather_bytes += (uint64_t)rows * (uint64_t)mine * sizeof(float);
    pl_dist_counters.gather_seconds += pl_clock_now() - t0;
    return PL_OK;
}

/* Two ranks: one all-gather of the partial sums, then the sum in rank order on both. */
static pl_status reduce_allgather(float *x, int64_t n) {
    MPI_Request req;
    int rc = MPI_Iallgather(x, (int)n, MPI_FLOAT, g_gather, (int)n, MPI_FLOAT, MPI_COMM_WORLD,
                            &req);
    if (rc != MPI_SUCCESS) return mpi_fail(rc, "all-gather of partial sums");
    PL_TRY(wait_req(&req, 0, "all-gather of partial sums"));
    memcpy(x, g_gather, (size_t)n * sizeof(float));
    for (int32_t r = 1; r < g_size; r++) {
        const float *p = g_gather + (size_t)r * (size_t)n;
        for (int64_t i = 0; i < n; i++) x[i] += p[i];
    }
    pl_dist_counters.reduce_bytes += (uint64_t)n * sizeof(float) * (uint64_t)(g_size - 1);
    return PL_OK;
}

/* More ranks: rank r sums segment r of every rank's partial sums, in rank order (all-to-all),
 * then every rank gathers the summed segments: the bytes of a ring all-reduce, 2 (N-1)/N x n
 * per rank instead of (N-1) x n, and the same bits as reduce_allgather (same order per value). */
static pl_status reduce_scatter_gather(float *x, int64_t n) {
    const int32_t N = g_size, me = g_rank;
    int *scnt = g_seg, *soff = g_seg + N, *rcnt = g_seg + 2 * N, *roff = g_seg + 3 * N;
    for (int32_t r = 0; r < N; r++) {
        soff[r] = (int)(n * r / N);
        scnt[r] = (int)(n * (r + 1) / N) - soff[r];
    }
    const int len = scnt[me];
    for (int32_t r = 0; r < N; r++) {
        rcnt[r] = len;
        roff[r] = r * len;
    }
    MPI_Request req;
    int rc = MPI_Ialltoallv(x, scnt, soff, MPI_FLOAT, g_gather, rcnt, roff, MPI_FLOAT,
                            MPI_COMM_WORLD, &req);
    if (rc != MPI_SUCCESS) return mpi_fail(rc, "reduce-scatter of partial sums");
    PL_TRY(wait_req(&req, 0, "reduce-scatter of partial sums"));
    float *mine = x + soff[me];
    memcpy(mine, g_gather, (size_t)len * sizeof(float));
    for (int32_t r = 1; r < N; r++) {
        const float *p = g_gather + (size_t)r * (size_t)len;
        for (int i = 0; i < len; i++) mine[i] += p[i];
    }
    rc = MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_FLOAT, x, scnt, soff, MPI_FLOAT, MPI_COMM_WORLD,
                         &req);
    if (rc != MPI_SUCCESS) return mpi_fail(rc, "all-gather of summed segments");
    PL_TRY(wait_req(&req, 0, "all-gather of summed segments"));
    pl_dist_counters.reduce_bytes += (uint64_t)((N - 1) * len + (n - len)) * sizeof(float);
    return PL_OK;
}

pl_status pl_dist_reduce_sum(void *ud, float *x, int64_t n) {
    (void)ud;
    PL_TRY(check_alive());
    PL_ASSERT(n <= g_gather_cap && n <= INT32_MAX / (g_size > 0 ? g_size : 1));
    double t0 = pl_clock_now();
    /* Every value is p0 + p1 + ... + p(N-1) in that order, on every rank: the same bits
     * everywhere and on every run. */
    PL_TRY(g_size <= 2 ? reduce_allgather(x, n) : reduce_scatter_gather(x, n));
    pl_dist_counters.reduces++;
    pl_dist_counters.reduce_seconds += pl_clock_now() - t0;
    return PL_OK;
}
