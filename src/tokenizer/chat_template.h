/* tokenizer/chat_template — the chat template of a model: the Jinja source the GGUF carries in
 * `tokenizer.chat_template` (or a file given by the user), compiled once with src/jinja and
 * rendered per chat the way Hugging Face transformers' apply_chat_template does.
 *
 * FALLBACK: a model without a template is rendered with ChatML (PL_CHAT_CHATML below), as
 * before and as llama.cpp does:
 *   <|im_start|>ROLE\nCONTENT<|im_end|>\n ...  and with add_generation_prompt <|im_start|>assistant\n
 * (a null content, an assistant's tool calls, is written as empty)
 *
 * A template that does not compile is KEPT with its error: loading succeeds (the server still
 * serves completions) and every render fails with "chat template: <the error>", which the server
 * answers as a 400. A template that raises (raise_exception) or fails while rendering fails that
 * render the same way. The render context is a JSON object: messages, add_generation_prompt,
 * bos_token, eos_token, and whatever else the caller passes (tools, ...).
 *
 * The text produced is meant to be tokenized with parse_special = 1 and add_special = 0: it
 * contains the BOS text exactly where the template writes bos_token. A compiled template is
 * read-only while rendering: several threads may render with it at once.
 */
#ifndef PL_TOKENIZER_CHAT_TEMPLATE_H
#define PL_TOKENIZER_CHAT_TEMPLATE_H

#include "base/status.h"

#include <stddef.h>
#include <stdint.h>

typedef struct pl_chat_template pl_chat_template;

extern const char PL_CHAT_CHATML[];

/* Compile `len` bytes of Jinja source; src NULL = the ChatML fallback. `origin` names where the
 * template came from ("gguf", a file name; copied) for messages and /v1/chat/render. Fails only
 * when out of memory; a compile error is kept (pl_chat_template_error). */
pl_status pl_chat_template_new(const char *src, size_t len, const char *origin,
                               pl_chat_template **out);
void pl_chat_template_free(pl_chat_template *t);
/* "chatml" for the fallback, else the origin given. */
const char *pl_chat_template_origin(const pl_chat_template *t);
/* The compile error, or NULL when the template compiled. */
const char *pl_chat_template_error(const pl_chat_template *t);
/* strftime_now's date for renders: Unix seconds (UTC), 0 = the clock (the default). */
void pl_chat_template_set_now(pl_chat_template *t, int64_t now);

/* Render with the JSON object context_json (len bytes). *out is malloc'ed and NUL-terminated.
 * Errors: PL_ERR_INVALID_ARG "chat template: ..." (compile error, raise_exception's message,
 * evaluation error with its line); PL_ERR_NOMEM. On error *out is NULL. */
pl_status pl_chat_template_render(const pl_chat_template *t, const char *context_json, size_t len,
                                  char **out);

#endif
