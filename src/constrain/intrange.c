/* constrain/intrange — the decimal integers of a range as a GBNF expression (a JSON schema's
 * minimum / maximum on an integer). No leading zeros, "-" only before a non-zero magnitude.
 *
 * A range of magnitudes is split by digit count; two numbers of equal length are matched digit
 * by digit: equal first digits are written out, else the range is the lower number's first digit
 * followed by anything up to 9...9, the digits strictly between followed by anything, and the
 * upper number's first digit followed by anything from 0...0 up. An unbounded side stops at 16
 * digits, as the schema compiler's other integers do.
 */
#include "constrain/cons_internal.h"
#include "base/buf.h"

#include <stdio.h>
#include <string.h>

#define MAX_OPEN 9999999999999999ull /* 16 digits: the top of an unbounded side */

/* [x, y], both n digits, x <= y digit-wise as numbers. */
static void same_len(pl_strbuf *b, const char *x, const char *y, int n) {
    if (n == 0) return;
    if (x[0] == y[0]) {
        pl_strbuf_printf(b, "\"%c\" ", x[0]);
        same_len(b, x + 1, y + 1, n - 1);
        return;
    }
    int low0 = 1, high9 = 1;
    for (int i = 1; i < n; i++) low0 &= x[i] == '0', high9 &= y[i] == '9';
    if (low0 && high9) {
        pl_strbuf_printf(b, "[%c-%c] ", x[0], y[0]);
        if (n > 1) pl_strbuf_printf(b, "[0-9]{%d} ", n - 1);
        return;
    }
    char nines[24], zeros[24];
    memset(nines, '9', sizeof nines);
    memset(zeros, '0', sizeof zeros);
    pl_strbuf_printf(b, "( \"%c\" ", x[0]);
    same_len(b, x + 1, nines, n - 1);
    if (x[0] + 1 <= y[0] - 1) {
        pl_strbuf_printf(b, "| [%c-%c] ", x[0] + 1, y[0] - 1);
        if (n > 1) pl_strbuf_printf(b, "[0-9]{%d} ", n - 1);
    }
    pl_strbuf_printf(b, "| \"%c\" ", y[0]);
    same_len(b, zeros, y + 1, n - 1);
    pl_strbuf_puts(b, ") ");
}

/* Magnitudes [a, z] as alternatives, each starting with " | " unless *first. */
static void magnitudes(pl_strbuf *b, uint64_t a, uint64_t z, int *first) {
    uint64_t p = 1; /* 10^(len - 1) */
    for (int len = 1; len <= 20 && a <= z; len++, p *= 10) {
        uint64_t top = len == 20 ? UINT64_MAX : p * 10 - 1;
        if (a > top) continue;
        /* z all nines (10^zlen - 1) and a the first number of this length: one alternative,
         * [1-9] [0-9]{len-1,zlen-1}, covers the rest (no parallel parses of each length) */
        int zlen = 0, all9 = z > 0;
        for (uint64_t q = z; q; q /= 10) all9 &= q % 10 == 9, zlen++;
        if (all9 && zlen > len && (a == p || (len == 1 && a <= 1))) {
            pl_strbuf_puts(b, *first ? "" : "| ");
            *first = 0;
            if (a == 0) pl_strbuf_puts(b, "\"0\" | ");
            pl_strbuf_printf(b, "[1-9] [0-9]{%d,%d} ", len - 1, zlen - 1);
            return;
        }
        uint64_t lo = a, hi = z < top ? z : top;
        char x[24], y[24];
        snprintf(x, sizeof x, "%llu", (unsigned long long)lo);
        snprintf(y, sizeof y, "%llu", (unsigned long long)hi);
        pl_strbuf_puts(b, *first ? "" : "| ");
        *first = 0;
        same_len(b, x, y, (int)strlen(x));
        if (hi == UINT64_MAX) break;
        a = hi + 1;
    }
}

int pl_gbnf_int_range(pl_strbuf *b, int has_lo, int64_t lo, int has_hi, int64_t hi) {
    if (has_lo && has_hi && lo > hi) return -1;
    int first = 1;
    pl_strbuf_puts(b, "( ");
    if (!has_lo || lo < 0) { /* negative part: "-" and magnitudes [max(1, -hi), -lo] */
        uint64_t mlo = has_hi && hi < 0 ? (uint64_t)(-(hi + 1)) + 1 : 1;
        uint64_t mhi = has_lo ? (uint64_t)(-(lo + 1)) + 1 : (mlo > MAX_OPEN ? mlo : MAX_OPEN);
        pl_strbuf_puts(b, "\"-\" ( ");
        int f = 1;
        magnitudes(b, mlo, mhi, &f);
        pl_strbuf_puts(b, ") ");
        first = 0;
    }
    if (!has_hi || hi >= 0) { /* non-negative part */
        uint64_t a = has_lo && lo > 0 ? (uint64_t)lo : 0;
        uint64_t z = has_hi ? (uint64_t)hi : (a > MAX_OPEN ? a : MAX_OPEN);
        magnitudes(b, a, z, &first);
    }
    pl_strbuf_puts(b, ")");
    return 0;
}
