/* engine/stop — see stop.h. */
#include "engine/stop.h"

#include <string.h>

/* Length of the longest suffix of text[0..len) that is a proper prefix of s. */
static size_t partial_suffix(const char *text, size_t len, const char *s, size_t slen) {
    size_t max = slen - 1 < len ? slen - 1 : len;
    for (size_t k = max; k > 0; k--)
        if (memcmp(text + len - k, s, k) == 0) return k;
    return 0;
}

pl_stop_result pl_stop_scan(const char *text, size_t len, size_t new_len,
                            const char *const *stops, int n) {
    pl_stop_result r = {0, 0, 0, 0, len};
    size_t hold = 0;
    for (int i = 0; i < n; i++) {
        size_t slen = strlen(stops[i]);
        if (slen == 0) continue;
        /* A new match must end inside the new bytes: start no earlier than len-new_len-slen+1. */
        size_t from = len - new_len + 1 > slen ? len - new_len + 1 - slen : 0;
        for (size_t at = from; at + slen <= len; at++) {
            if (memcmp(text + at, stops[i], slen) == 0) {
                if (!r.found || at < r.match_at) {
                    r.found = 1;
                    r.match_at = at;
                    r.match_len = slen;
                    r.which = i;
                }
                break;
            }
        }
        size_t k = partial_suffix(text, len, stops[i], slen);
        if (k > hold) hold = k;
    }
    r.safe_len = r.found ? r.match_at : len - hold;
    return r;
}
