/* tokenizer/unicode — lookups in the generated Unicode tables (unicode_tables.c): category
 * flags, simple lowercase, first code point of the canonical decomposition. Binary searches over
 * sorted ranges; what WordPiece's normalizer needs and nothing more. */
#include "tokenizer/tok_internal.h"

#include <stddef.h>
#include <string.h>

static int is_space(uint32_t cp) {
    return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
           cp == 0x205F || cp == 0x3000;
}

unsigned pl_tok_cpt_flags(uint32_t cp) {
    if (cp > 0x10FFFF) return 0;
    int lo = 0, hi = pl_uni_n_flag_ranges - 1; /* the last range starting at or below cp */
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (pl_uni_flag_ranges[mid].start <= cp) lo = mid;
        else hi = mid - 1;
    }
    return pl_uni_flag_ranges[lo].flags | (is_space(cp) ? PL_UNI_SPACE : 0u);
}

/* The index of the run holding cp in runs[0 .. n), sorted and disjoint, each `size` bytes that
 * begin with its uint32_t first and last code points; -1 when none holds it. */
static int find_run(const void *runs, int n, size_t size, uint32_t cp) {
    int lo = 0, hi = n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        uint32_t span[2]; /* first, last */
        memcpy(span, (const char *)runs + (size_t)mid * size, sizeof span);
        if (cp < span[0]) hi = mid - 1;
        else if (cp > span[1]) lo = mid + 1;
        else return mid;
    }
    return -1;
}

_Static_assert(offsetof(pl_uni_lower_run, last) == sizeof(uint32_t) &&
               offsetof(pl_uni_map_range, last) == sizeof(uint32_t),
               "find_run reads first and last at the start of a run");

uint32_t pl_tok_cpt_lower(uint32_t cp) {
    int i = find_run(pl_uni_lower_runs, pl_uni_n_lower_runs, sizeof *pl_uni_lower_runs, cp);
    if (i < 0) return cp;
    const pl_uni_lower_run *r = &pl_uni_lower_runs[i];
    return (cp - r->first) % r->stride ? cp : (uint32_t)((int32_t)cp + r->delta);
}

uint32_t pl_tok_cpt_nfd_first(uint32_t cp) {
    int i = find_run(pl_uni_nfd_ranges, pl_uni_n_nfd_ranges, sizeof *pl_uni_nfd_ranges, cp);
    return i < 0 ? cp : pl_uni_nfd_ranges[i].value;
}
