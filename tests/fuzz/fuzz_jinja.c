/* Fuzz target: the Jinja engine (src/jinja) — lexer, parser and evaluator on untrusted templates.
 *
 * Input: the template source, optionally followed by a NUL and the render context (JSON); a
 * context that is not a JSON object is replaced by a fixed conversation, so that most inputs
 * reach the evaluator with messages to loop over. Limits are small (steps, memory, output) so
 * that every input ends quickly. Checked: a failure leaves a message and no text; success gives
 * a NUL-terminated text of the reported length within the output limit; rendering the same
 * compiled template again gives the same text (a compiled template is read-only). ASan/LSan
 * check that error paths (longjmp out of any depth) free everything. */
#include "base/status.h"
#include "jinja/jinja.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const char fallback[] =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", "
    "\"content\": \"Hi\"}, {\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"id\": "
    "\"c1\", \"type\": \"function\", \"function\": {\"name\": \"f\", \"arguments\": {\"a\": 1}}}]},"
    " {\"role\": \"tool\", \"content\": \"42\"}], \"tools\": [{\"type\": \"function\", \"function\":"
    " {\"name\": \"f\", \"parameters\": {\"type\": \"object\", \"properties\": {\"a\": {\"type\": "
    "\"integer\"}}}}}], \"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": "
    "\"</s>\"}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *src = (const char *)data;
    const char *nul = memchr(data, 0, size);
    size_t slen = nul ? (size_t)(nul - src) : size;
    const char *ctx = nul ? nul + 1 : fallback;
    size_t clen = nul ? size - slen - 1 : strlen(fallback);
    pl_jinja *t;
    if (pl_jinja_compile(src, slen, &t) != PL_OK) {
        if (!*pl_last_error()) abort();
        return 0;
    }
    pl_jinja_options o = {.now = 1721952000, .max_output = 1 << 20, .max_memory = 16 << 20,
                          .max_steps = 200000};
    char *out = NULL, *again = NULL;
    size_t n = 0, n2 = 0;
    pl_status st = pl_jinja_render(t, ctx, clen, &o, &out, &n);
    if (st == PL_ERR_INVALID_ARG && nul && strstr(pl_last_error(), "context")) {
        ctx = fallback;
        clen = strlen(fallback);
        st = pl_jinja_render(t, ctx, clen, &o, &out, &n);
    }
    if (st != PL_OK) {
        if (out || !*pl_last_error()) abort();
    } else {
        if (!out || out[n] != '\0' || n > o.max_output) abort();
        if (pl_jinja_render(t, ctx, clen, &o, &again, &n2) != PL_OK || n2 != n || memcmp(out, again, n))
            abort();
    }
    free(out);
    free(again);
    pl_jinja_free(t);
    return 0;
}
