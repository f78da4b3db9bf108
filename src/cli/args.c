/* cli/args — see args.h. */
#include "cli/args.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int pl_arg_int(const char *cmd, const char *flag, const char *s, int64_t lo, int64_t hi,
               int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end) {
        fprintf(stderr, "pagellm %s: %s: '%s' is not an integer\n", cmd, flag, s);
        return -1;
    }
    if (v < lo || v > hi) {
        fprintf(stderr, "pagellm %s: %s: %lld is out of range [%lld, %lld]\n", cmd, flag, v,
                (long long)lo, (long long)hi);
        return -1;
    }
    *out = v;
    return 0;
}

int pl_arg_i32(const char *cmd, const char *flag, const char *s, int32_t lo, int32_t hi,
               int32_t *out) {
    int64_t v;
    if (pl_arg_int(cmd, flag, s, lo, hi, &v)) return -1;
    *out = (int32_t)v;
    return 0;
}

int pl_arg_float(const char *cmd, const char *flag, const char *s, double lo, double hi,
                 double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || isnan(v)) {
        fprintf(stderr, "pagellm %s: %s: '%s' is not a number\n", cmd, flag, s);
        return -1;
    }
    if (v < lo || v > hi) {
        fprintf(stderr, "pagellm %s: %s: %g is out of range [%g, %g]\n", cmd, flag, v, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

int pl_arg_f32(const char *cmd, const char *flag, const char *s, double lo, double hi, float *out) {
    double v;
    if (pl_arg_float(cmd, flag, s, lo, hi, &v)) return -1;
    *out = (float)v;
    return 0;
}

int pl_arg_bytes(const char *cmd, const char *flag, const char *s, uint64_t *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || !(v >= 0) || !isfinite(v)) goto bad;
    double mul = 1;
    switch (toupper((unsigned char)*end)) {
    case 0: break;
    case 'K': mul = 1024.0; end++; break;
    case 'M': mul = 1024.0 * 1024; end++; break;
    case 'G': mul = 1024.0 * 1024 * 1024; end++; break;
    case 'T': mul = 1024.0 * 1024 * 1024 * 1024; end++; break;
    default: goto bad;
    }
    if (mul > 1 && (*end == 'i' || *end == 'I')) end++;
    if (mul > 1 && (*end == 'b' || *end == 'B')) end++;
    if (*end) goto bad;
    if (v * mul > 1.8e19) goto bad;
    *out = (uint64_t)(v * mul);
    return 0;
bad:
    fprintf(stderr, "pagellm %s: %s: '%s' is not a byte count (e.g. 512M, 2G)\n", cmd, flag, s);
    return -1;
}

int pl_arg_int_list(const char *cmd, const char *flag, const char *s, int32_t **out, int *n) {
    int cap = 1;
    for (const char *p = s; *p; p++) cap += *p == ',';
    int32_t *v = malloc((size_t)cap * sizeof *v);
    if (!v) return -1;
    int k = 0;
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long long x = strtoll(p, &end, 10);
        if (errno || end == p || (*end && *end != ',') || x < INT32_MIN || x > INT32_MAX) {
            fprintf(stderr, "pagellm %s: %s: '%s' is not a comma-separated list of integers\n",
                    cmd, flag, s);
            free(v);
            return -1;
        }
        v[k++] = (int32_t)x;
        p = *end ? end + 1 : end;
    }
    if (k == 0) {
        fprintf(stderr, "pagellm %s: %s: the list is empty\n", cmd, flag);
        free(v);
        return -1;
    }
    *out = v;
    *n = k;
    return 0;
}

/* Levenshtein distance of a[0..na) and b[0..nb) (names are short: one row of 128). */
static size_t edit_distance(const char *a, size_t na, const char *b, size_t nb) {
    size_t row[128];
    if (nb >= sizeof row / sizeof row[0]) nb = sizeof row / sizeof row[0] - 1;
    for (size_t j = 0; j <= nb; j++) row[j] = j;
    for (size_t i = 1; i <= na; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= nb; j++) {
            size_t up = row[j];
            size_t best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[nb];
}

const char *pl_arg_closest(const char *given, const struct option *opts) {
    while (*given == '-') given++;
    size_t n = strcspn(given, "=");
    const char *best = NULL;
    size_t best_d = (size_t)-1;
    for (const struct option *o = opts; o->name; o++) {
        size_t d = edit_distance(given, n, o->name, strlen(o->name));
        if (d < best_d) best_d = d, best = o->name;
    }
    size_t limit = n / 3 > 2 ? n / 3 : 2;
    return best && best_d <= limit && best_d > 0 ? best : NULL;
}

void pl_arg_unknown(const char *cmd, const char *given, const struct option *opts) {
    const char *near = pl_arg_closest(given, opts);
    if (near)
        fprintf(stderr, "pagellm %s: unknown option '%s' (did you mean --%s?)\n", cmd, given, near);
    else
        fprintf(stderr, "pagellm %s: unknown option '%s'\n", cmd, given);
}

void pl_arg_refused(const char *cmd, char **argv, const struct option *opts) {
    /* getopt_long sets optopt to the letter it did not know (no long name is near one letter),
     * 0 for an unknown long option; inside a group ("-xy") optind has not moved on, so
     * argv[optind - 1] is the argument before */
    if (optopt) fprintf(stderr, "pagellm %s: unknown option '-%c'\n", cmd, optopt);
    else pl_arg_unknown(cmd, argv[optind - 1], opts);
}

const char *pl_arg_flag_written(char **argv, int optind, const char *optarg) {
    if (optind >= 2 && optarg && optarg == argv[optind - 1]) return argv[optind - 2];
    return argv[optind - 1];
}

int pl_arg_int_list_in(const char *cmd, const char *flag, const char *s, int32_t lo, int32_t hi,
                       int max_n, int32_t **out, int *n) {
    free(*out);
    *out = NULL;
    if (pl_arg_int_list(cmd, flag, s, out, n)) return -1;
    if (*n > max_n) {
        fprintf(stderr, "pagellm %s: %s: give 1 to %d values\n", cmd, flag, max_n);
        return -1;
    }
    for (int i = 0; i < *n; i++)
        if ((*out)[i] < lo || (*out)[i] > hi) {
            fprintf(stderr, "pagellm %s: %s: %d is out of range [%d, %d]\n", cmd, flag, (*out)[i],
                    lo, hi);
            return -1;
        }
    return 0;
}
