/* base/meminfo — MemAvailable (meminfo.h). */
#include "base/meminfo.h"

#include <stdio.h>
#include <stdlib.h>

uint64_t pl_mem_available(void) {
    const char *path = getenv("PAGELLM_MEMINFO"); /* tests point it at a fake file */
    FILE *f = fopen(path ? path : "/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    unsigned long long kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
    fclose(f);
    return (uint64_t)kb * 1024;
}
