/* jinja — the chat templates models ship (`tokenizer.chat_template`), rendered the way Hugging
 * Face transformers renders them: Jinja2 in a sandboxed, immutable environment with trim_blocks
 * and lstrip_blocks, the loop controls (break, continue), and the globals raise_exception,
 * strftime_now and namespace; `tojson` is transformers' own (ensure_ascii=False, no HTML escaping).
 *
 * Written from the Jinja2 documentation and the behaviour of the templates models publish: the
 * statements if/elif/else, for (with else, a filter condition, loop.*), set (names, tuples,
 * namespace attributes, blocks), macro (defaults, keyword arguments), filter blocks, with, raw,
 * generation (transformers' marker, renders its body), break, continue; the expression language
 * with Python's semantics for the values JSON gives (None, bool, int, float, str, list, dict in
 * insertion order), slicing, string and dict methods, and the filters and tests real templates
 * use. A name the engine does not know (filter, test, method) is an error naming it, never a
 * silent difference. Not supported (an error): include, extends, import, call blocks.
 *
 * A template is untrusted input (it comes from a GGUF): parsing bounds nesting; rendering bounds
 * memory (every value of a render lives in one arena with a byte limit), output size, evaluation
 * steps and recursion, and fails with a message instead of crashing or running on. A compiled
 * template is read-only while rendering, so several threads may render it at once.
 *
 * Errors: pl_jinja_compile and pl_jinja_render return PL_ERR_INVALID_ARG with the message in
 * pl_last_error(): "line N: what failed" for syntax and evaluation errors, and exactly the
 * message for raise_exception('message'); PL_ERR_NOMEM when malloc fails.
 */
#ifndef PL_JINJA_JINJA_H
#define PL_JINJA_JINJA_H

#include "base/status.h"

#include <stddef.h>
#include <stdint.h>

typedef struct pl_jinja pl_jinja;

typedef struct {
    /* strftime_now's clock: Unix seconds read as UTC; 0 = the real clock in local time, as
     * transformers (datetime.now()). */
    int64_t now;
    size_t max_output;   /* bytes of output; 0 = 16 MiB */
    size_t max_memory;   /* bytes of all values of one render; 0 = 256 MiB */
    uint64_t max_steps;  /* statements + expressions evaluated; 0 = 50 million */
} pl_jinja_options;

/* Compile `len` bytes of template source. On error *out is NULL. */
pl_status pl_jinja_compile(const char *src, size_t len, pl_jinja **out);
void pl_jinja_free(pl_jinja *t);

/* Render with the variables of `context_json` (a JSON object: messages, tools,
 * add_generation_prompt, bos_token, ...; `len` bytes). *out is malloc'ed, NUL-terminated, and
 * *out_len (if not NULL) its length. opts may be NULL. On error *out is NULL. */
pl_status pl_jinja_render(const pl_jinja *t, const char *context_json, size_t len,
                          const pl_jinja_options *opts, char **out, size_t *out_len);

/* Unix seconds of a "YYYY-MM-DD" date at 00:00 UTC (for pl_jinja_options.now);
 * PL_ERR_INVALID_ARG naming the text otherwise. */
pl_status pl_jinja_parse_date(const char *ymd, int64_t *out);

#endif
