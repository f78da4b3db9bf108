/* dist/report — one line per rank for benchmarks and -v: resident memory after loading the
 * shard and now, what the step channel carried, what the reductions cost. */
#include "dist/dist_internal.h"

#include <stdio.h>
#include <string.h>

static double g_loaded_mib = -1, g_final_mib = -1;

/* A field of /proc/self/status in MiB ("VmRSS", "VmHWM"), or -1. */
static double status_mib(const char *key) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    char line[256];
    double v = -1;
    size_t n = strlen(key);
    while (fgets(line, sizeof line, f)) {
        unsigned long long kb;
        if (!strncmp(line, key, n) && line[n] == ':' && sscanf(line + n + 1, "%llu", &kb) == 1) {
            v = (double)kb / 1024.0;
            break;
        }
    }
    fclose(f);
    return v;
}

void pl_dist_note_loaded(void) { g_loaded_mib = status_mib("VmRSS"); }
void pl_dist_note_done(void) { g_final_mib = status_mib("VmRSS"); }

void pl_dist_report(char *buf, size_t cap) {
    const pl_dist_stats *s = &pl_dist_counters;
    double now = g_final_mib >= 0 ? g_final_mib : status_mib("VmRSS");
    if (!pl_dist_active()) {
        snprintf(buf, cap, "one process: resident %.1f MiB now (peak %.1f)", now,
                 status_mib("VmHWM"));
        return;
    }
    double per_step = s->steps ? (double)s->step_bytes / (double)s->steps : 0;
    double per_reduce = s->reduces ? s->reduce_seconds / (double)s->reduces * 1e6 : 0;
    snprintf(buf, cap, "tensor parallel rank %d of %d: resident %.1f MiB after loading its shard, "
             "%.1f MiB at the end (peak %.1f); %llu steps, %.0f bytes per step message%s%.3f s; %llu "
             "reductions (2 per layer and step), %.1f MiB gathered, %.1f us each; %llu logits "
             "gathers, %.1f MiB of this rank's columns, %.1f us each",
             pl_dist_rank(), pl_dist_size(), g_loaded_mib, now,
             status_mib("VmHWM"), (unsigned long long)s->steps, per_step,
             pl_dist_rank() == 0 ? ", broadcast in " : ", payloads received in ",
             s->step_seconds, (unsigned long long)s->reduces,
             (double)s->reduce_bytes / (1 << 20), per_reduce, (unsigned long long)s->gathers,
             (double)s->gather_bytes / (1 << 20),
             s->gathers ? s->gather_seconds / (double)s->gathers * 1e6 : 0);
}
