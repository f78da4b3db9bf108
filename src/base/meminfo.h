/* base/meminfo — how much memory the machine has free for this process: MemAvailable of
 * /proc/meminfo (or of the file PAGELLM_MEMINFO names: tests point it at a fake one). Read by
 * the KV budget (--gpu-memory-utilization) and by the model loader (whether the repacked weights
 * fit beside the memory map). */
#ifndef PL_BASE_MEMINFO_H
#define PL_BASE_MEMINFO_H

#include <stdint.h>

/* MemAvailable in bytes, or 0 when it cannot be read. */
uint64_t pl_mem_available(void);

#endif
