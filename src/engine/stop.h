/* engine/stop — stop strings over streamed text.
 *
 * A sequence's generated text grows by a delta per token. pl_stop_scan finds the earliest stop
 * string that the text now contains (searching only where a new match can start) and tells how
 * many bytes are safe to emit: text that could still turn out to be the beginning of a stop
 * string is held back, so a partial stop string is never streamed.
 */
#ifndef PL_ENGINE_STOP_H
#define PL_ENGINE_STOP_H

#include <stddef.h>

typedef struct {
    int found;          /* a stop string occurs in the text */
    size_t match_at;    /* where it starts (when found) */
    size_t match_len;   /* its length (when found) */
    int which;          /* its index in stops (when found) */
    size_t safe_len;    /* bytes of text that can be emitted now (when not found) */
} pl_stop_result;

/* text[0..len) is the whole generated text; the last `new_len` bytes arrived with the last
 * token. stops[0..n) are the stop strings (empty ones are ignored). */
pl_stop_result pl_stop_scan(const char *text, size_t len, size_t new_len,
                            const char *const *stops, int n);

#endif
