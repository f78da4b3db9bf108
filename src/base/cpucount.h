/* base/cpucount — how many worker threads to start when the user did not say (-t 0, the default).
 *
 * One per physical core this process may run on, as llama.cpp and vLLM's CPU backend choose:
 *   - the CPUs of its affinity mask (sched_getaffinity: taskset, a container's cpuset, mpirun
 *     --bind-to), not every online CPU of the machine;
 *   - one per core of those (SMT siblings share a core's FMA and load units: a second thread on
 *     a core only adds a share of the work that waits for the slower one);
 *   - on a hybrid Intel CPU (sysfs lists /sys/devices/cpu_core and cpu_atom) only its P-cores,
 *     when the mask has any: the matmuls split rows evenly, so an E-core sets the step's pace;
 *   - at most the cgroup's CPU quota (cgroup v2 cpu.max of this process's cgroup and its parents,
 *     or v1's cpu.cfs_quota_us): `docker run --cpus=4` on a 64-core host gets 4 threads, not 64
 *     spinning workers throttled by the quota. A fractional quota rounds down, at least 1.
 * Files that cannot be read leave their rule out (a CPU without topology counts as its own core). */
#ifndef PL_BASE_CPUCOUNT_H
#define PL_BASE_CPUCOUNT_H

#include <stddef.h>

/* The default thread count for this process (at least 1); why, if not NULL, gets a line that
 * says how it was reached (e.g. "4 (4 physical cores among the 8 CPUs this process may use)"). */
int pl_default_threads(char *why, size_t why_len);

/* The same with every file read under root ("" for the real one: root "/tmp/x" reads
 * /tmp/x/sys/devices/system/cpu/cpu0/topology/core_cpus_list, /tmp/x/proc/self/cgroup, ...) and
 * the allowed CPUs given as a cpulist ("0-3,8"; NULL: this process's affinity). For tests. */
int pl_default_threads_at(const char *root, const char *allowed, char *why, size_t why_len);

#endif
