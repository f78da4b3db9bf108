/* parallel/no_mpi — parallel.h in a build without Open MPI: nothing is ever active, and asking
 * for more than one process says how to get a build that can. */
#include "parallel/parallel_internal.h"

static pl_status no_mpi(void) {
    return pl_fail(PL_ERR_UNSUPPORTED, "tensor parallelism needs a build with MPI: install "
                   "Open MPI (Debian: openmpi-bin libopenmpi-dev) and configure again "
                   "(cmake -DPL_MPI=ON)");
}

int pl_dist_available(void) { return 0; }
pl_status pl_dist_init(int32_t tp_size) {
    (void)tp_size;
    return no_mpi();
}
int pl_dist_active(void) { return 0; }
int32_t pl_dist_rank(void) { return 0; }
int32_t pl_dist_size(void) { return 1; }
void pl_dist_cancel(void) {}
void pl_dist_finalize(void) {}
pl_status pl_dist_agree(pl_status mine, const char *what) {
    (void)mine, (void)what;
    return no_mpi();
}
pl_status pl_dist_bcast(void *buf, size_t bytes, int forever, const char *what) {
    (void)buf, (void)bytes, (void)forever, (void)what;
    return no_mpi();
}
pl_status pl_dist_reserve(int64_t max_floats, int32_t max_rows, int32_t n_vocab) {
    (void)max_floats, (void)max_rows, (void)n_vocab;
    return no_mpi();
}
pl_status pl_dist_gather_logits(void *ud, const float *part, int32_t rows, float *logits) {
    (void)ud, (void)part, (void)rows, (void)logits;
    return no_mpi();
}
pl_status pl_dist_reduce_sum(void *ud, float *x, int64_t n) {
    (void)ud, (void)x, (void)n;
    return no_mpi();
}
