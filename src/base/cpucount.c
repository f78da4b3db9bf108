/* base/cpucount — the default worker count (contract: cpucount.h). */
#include "base/cpucount.h"

#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { MAX_CPUS = 4096 };

typedef struct {
    uint64_t w[MAX_CPUS / 64];
} cpus;

static void set_cpu(cpus *s, long c) {
    if (c >= 0 && c < MAX_CPUS) s->w[c / 64] |= 1ull << (c % 64);
}

static int has_cpu(const cpus *s, long c) {
    return c >= 0 && c < MAX_CPUS && (s->w[c / 64] >> (c % 64) & 1);
}

static int count(const cpus *s) {
    int n = 0;
    for (size_t i = 0; i < MAX_CPUS / 64; i++) n += __builtin_popcountll(s->w[i]);
    return n;
}

/* A cpulist ("0-3,8,10-11\n") into s; 0 if it holds no CPU or is malformed. */
static int parse_list(const char *t, cpus *s) {
    memset(s, 0, sizeof *s);
    while (*t && *t != '\n') {
        char *end;
        long a = strtol(t, &end, 10), b = a;
        if (end == t || a < 0) return 0;
        t = end;
        if (*t == '-') {
            b = strtol(t + 1, &end, 10);
            if (end == t + 1 || b < a) return 0;
            t = end;
        }
        for (long c = a; c <= b && c < MAX_CPUS; c++) set_cpu(s, c);
        if (*t == ',') t++;
        else if (*t && *t != '\n') return 0;
    }
    return count(s) > 0;
}

/* The first line of root + path (at most n - 1 bytes) into buf; 0 if it cannot be read. */
static int read_line(const char *root, const char *path, char *buf, size_t n) {
    char full[4608];
    int k = snprintf(full, sizeof full, "%s%s", root, path);
    FILE *f = k > 0 && (size_t)k < sizeof full ? fopen(full, "r") : NULL;
    if (!f) return 0;
    int ok = fgets(buf, (int)n, f) != NULL;
    fclose(f);
    return ok;
}

/* The lowest CPU of cpu c's core (core_cpus_list, or thread_siblings_list before Linux 5.7),
 * or c itself when sysfs does not say. */
static long core_of(const char *root, long c) {
    static const char *const names[] = {"core_cpus_list", "thread_siblings_list"};
    char path[128], line[4096];
    cpus sib;
    for (size_t i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%ld/topology/%s", c, names[i]);
        if (read_line(root, path, line, sizeof line) && parse_list(line, &sib))
            for (long k = 0; k < MAX_CPUS; k++)
                if (has_cpu(&sib, k)) return k;
    }
    return c;
}

/* This process's cgroup v2 path (the "0::" line of /proc/self/cgroup) into out; 0 if none. */
static int cgroup2_path(const char *root, char *out, size_t n) {
    char full[4608], line[4096];
    int k = snprintf(full, sizeof full, "%s/proc/self/cgroup", root);
    FILE *f = k > 0 && (size_t)k < sizeof full ? fopen(full, "r") : NULL;
    int found = 0;
    if (!f) return 0;
    while (!found && fgets(line, sizeof line, f))
        if (!strncmp(line, "0::/", 4)) {
            line[strcspn(line, "\n")] = '\0';
            int w = snprintf(out, n, "%s", line + 3);
            found = w > 0 && (size_t)w < n;
        }
    fclose(f);
    return found;
}

/* quota / period of a "quota period" or v1 pair, or 0 for none ("max", -1, unreadable). */
static double ratio(long quota, long period) {
    return quota > 0 && period > 0 ? (double)quota / (double)period : 0;
}

/* The CPU quota of the cgroup (v2: the smallest cpu.max over this process's cgroup and its
 * parents; v1: cpu.cfs_quota_us / cpu.cfs_period_us), rounded down, at least 1; 0 for none. */
static int quota_cpus(const char *root) {
    char cg[2048], path[2200], q[64], per[64];
    double best = 0;
    if (cgroup2_path(root, cg, sizeof cg)) {
        for (;;) { /* cg, then each parent up to "/" */
            int k = snprintf(path, sizeof path, "/sys/fs/cgroup%s%scpu.max", cg, strcmp(cg, "/") ? "/" : "");
            long quota, period;
            double r;
            if (k > 0 && (size_t)k < sizeof path && read_line(root, path, q, sizeof q) &&
                sscanf(q, "%ld %ld", &quota, &period) == 2 && (r = ratio(quota, period)) > 0 &&
                (best == 0 || r < best))
                best = r;
            if (!strcmp(cg, "/")) break;
            char *slash = strrchr(cg, '/');
            slash[slash == cg] = '\0'; /* "/a/b" -> "/a", "/a" -> "/" */
        }
    } else {
        static const char *const dirs[] = {"/sys/fs/cgroup/cpu,cpuacct", "/sys/fs/cgroup/cpu"};
        for (size_t i = 0; i < 2 && best == 0; i++) {
            char pp[128];
            snprintf(path, sizeof path, "%s/cpu.cfs_quota_us", dirs[i]);
            snprintf(pp, sizeof pp, "%s/cpu.cfs_period_us", dirs[i]);
            if (read_line(root, path, q, sizeof q) && read_line(root, pp, per, sizeof per))
                best = ratio(atol(q), atol(per));
        }
    }
    if (best <= 0) return 0;
    return best < 1 ? 1 : (int)best;
}

int pl_default_threads_at(const char *root, const char *allowed, char *why, size_t why_len) {
    cpus mask;
    char line[4096];
    int n_allowed;
    if (allowed) {
        if (!parse_list(allowed, &mask)) memset(&mask, 0, sizeof mask);
    } else {
        cpu_set_t set;
        memset(&mask, 0, sizeof mask);
        if (sched_getaffinity(0, sizeof set, &set) == 0) {
            for (long c = 0; c < CPU_SETSIZE; c++)
                if (CPU_ISSET(c, &set)) set_cpu(&mask, c);
        } else {
            long n = sysconf(_SC_NPROCESSORS_ONLN);
            for (long c = 0; c < (n > 0 ? n : 1); c++) set_cpu(&mask, c);
        }
    }
    n_allowed = count(&mask);
    if (n_allowed == 0) set_cpu(&mask, 0), n_allowed = 1;
    /* a hybrid CPU: its P-cores, if the mask has any */
    cpus pcores, use = mask;
    const char *hybrid = "";
    if (read_line(root, "/sys/devices/cpu_core/cpus", line, sizeof line) && parse_list(line, &pcores) &&
        read_line(root, "/sys/devices/cpu_atom/cpus", line, sizeof line)) {
        cpus both;
        for (size_t i = 0; i < MAX_CPUS / 64; i++) both.w[i] = mask.w[i] & pcores.w[i];
        if (count(&both) > 0 && count(&both) < n_allowed) use = both, hybrid = " (P-cores only)";
    }
    /* one per core */
    cpus cores;
    memset(&cores, 0, sizeof cores);
    for (long c = 0; c < MAX_CPUS; c++)
        if (has_cpu(&use, c)) set_cpu(&cores, core_of(root, c));
    int n = count(&cores);
    int quota = quota_cpus(root);
    int capped = quota > 0 && quota < n;
    if (capped) n = quota;
    if (n < 1) n = 1;
    if (why)
        snprintf(why, why_len, "%d (%d physical cores%s among the %d CPUs this process may use%s)", n,
                 count(&cores), hybrid, n_allowed, capped ? "; its cgroup's CPU quota allows fewer" : "");
    return n;
}

int pl_default_threads(char *why, size_t why_len) {
    return pl_default_threads_at("", NULL, why, why_len);
}
