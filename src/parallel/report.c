/* parallel/report — one line per rank for benchmarks and -v: resident memory after loading the
 * shard and now, what the step channel carried, what the reductions cost. */
#include "parallel/parallel_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double g_loaded_mib = -1, g_final_mib = -1, g_weights_mib = -1;
static char g_path[4096];
static size_t g_owned;

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

/* Resident MiB of the mappings of `path` (the model file) in /proc/self/smaps, or -1. */
static double mapped_mib(const char *path) {
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f || !*path) {
        if (f) fclose(f);
        return -1;
    }
    char line[4352];
    int in = 0;
    double kb = 0;
    size_t n = strlen(path);
    while (fgets(line, sizeof line, f)) {
        unsigned long long v;
        size_t len = strcspn(line, "\n");
        if (strchr(line, '-') && strchr(line, '-') < strchr(line, ' ') && len > n)
            in = !strncmp(line + len - n, path, n); /* a mapping's header line */
        else if (in && sscanf(line, "Rss: %llu kB", &v) == 1)
            kb += (double)v;
    }
    fclose(f);
    return kb / 1024.0;
}

void pl_dist_note_loaded(const char *model_path, size_t owned_bytes) {
    g_loaded_mib = status_mib("VmRSS");
    g_path[0] = 0;
    if (model_path && !realpath(model_path, g_path)) g_path[0] = 0; /* smaps names it so */
    g_owned = owned_bytes;
}

void pl_dist_note_done(void) {
    g_final_mib = status_mib("VmRSS");
    g_weights_mib = mapped_mib(g_path);
}

void pl_dist_report(char *buf, size_t cap) {
    const pl_dist_stats *s = &pl_dist_counters;
    double now = g_final_mib >= 0 ? g_final_mib : status_mib("VmRSS");
    double mapped = g_weights_mib >= 0 ? g_weights_mib : mapped_mib(g_path);
    if (!pl_dist_active()) {
        snprintf(buf, cap, "one process: resident %.1f MiB now (peak %.1f), of which weights "
                 "(the mapped file) %.1f MiB", now, status_mib("VmHWM"), mapped);
        return;
    }
    double per_step = s->steps ? (double)s->step_bytes / (double)s->steps : 0;
    double per_reduce = s->reduces ? s->reduce_seconds / (double)s->reduces * 1e6 : 0;
    double owned = (double)g_owned / (1 << 20);
    snprintf(buf, cap, "tensor parallel rank %d of %d: resident %.1f MiB after loading its shard, "
             "%.1f MiB at the end (peak %.1f), of which weights %.1f MiB (%.1f of the mapped "
             "file, %.1f of copied column slices); %llu steps, %.0f bytes per step message%s%.3f "
             "s; %llu reductions (2 per layer and step), %.1f MiB gathered, %.1f us each; %llu "
             "logits gathers, %.1f MiB of this rank's columns, %.1f us each",
             pl_dist_rank(), pl_dist_size(), g_loaded_mib, now, status_mib("VmHWM"),
             mapped + owned, mapped, owned, (unsigned long long)s->steps, per_step,
             pl_dist_rank() == 0 ? ", broadcast in " : ", payloads received in ",
             s->step_seconds, (unsigned long long)s->reduces,
             (double)s->reduce_bytes / (1 << 20), per_reduce, (unsigned long long)s->gathers,
             (double)s->gather_bytes / (1 << 20),
             s->gathers ? s->gather_seconds / (double)s->gathers * 1e6 : 0);
}
