/* parallel/parallel_internal — the transport under parallel.h, shared by its files (not a
 * contract outside src/parallel/). mpi.c implements it with MPI, no_mpi.c fails every call (a
 * build without Open MPI). */
#ifndef PL_DIST_DIST_INTERNAL_H
#define PL_DIST_DIST_INTERNAL_H

#include "parallel/parallel.h"

/* Broadcast bytes from rank 0. forever = 1: no deadline (a worker waiting for the next step);
 * pl_dist_cancel still ends it. `what` names the operation in a failure. */
pl_status pl_dist_bcast(void *buf, size_t bytes, int forever, const char *what);

/* Counters kept by step_msg.c and mpi.c. */
extern pl_dist_stats pl_dist_counters;

#endif
