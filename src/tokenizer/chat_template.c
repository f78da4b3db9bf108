/* tokenizer/chat_template — a model's Jinja chat template (see chat_template.h). */
#include "tokenizer/chat_template.h"

#include "jinja/jinja.h"

#include <stdlib.h>
#include <string.h>

const char PL_CHAT_CHATML[] =
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + (message['content'] or '') + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";

struct pl_chat_template {
    pl_jinja *jinja;  /* NULL when the source did not compile */
    char *error;      /* the compile error then */
    char *origin;
    int64_t now;
};

pl_status pl_chat_template_new(const char *src, size_t len, const char *origin,
                               pl_chat_template **out) {
    *out = NULL;
    pl_chat_template *t = calloc(1, sizeof *t);
    if (!t) return pl_fail(PL_ERR_NOMEM, "out of memory");
    t->origin = strdup(src ? (origin ? origin : "template") : "chatml");
    if (!t->origin) {
        free(t);
        return pl_fail(PL_ERR_NOMEM, "out of memory");
    }
    if (!src) {
        src = PL_CHAT_CHATML;
        len = strlen(PL_CHAT_CHATML);
    }
    pl_status st = pl_jinja_compile(src, len, &t->jinja);
    if (st == PL_ERR_NOMEM || (st != PL_OK && !(t->error = strdup(pl_last_error())))) {
        pl_chat_template_free(t);
        return pl_fail(PL_ERR_NOMEM, "out of memory");
    }
    *out = t;
    return PL_OK;
}

void pl_chat_template_free(pl_chat_template *t) {
    if (!t) return;
    pl_jinja_free(t->jinja);
    free(t->error);
    free(t->origin);
    free(t);
}

const char *pl_chat_template_origin(const pl_chat_template *t) { return t->origin; }
const char *pl_chat_template_error(const pl_chat_template *t) { return t->error; }
void pl_chat_template_set_now(pl_chat_template *t, int64_t now) { t->now = now; }

pl_status pl_chat_template_render(const pl_chat_template *t, const char *context_json, size_t len,
                                  char **out) {
    *out = NULL;
    if (!t->jinja) return pl_fail(PL_ERR_INVALID_ARG, "chat template: %s", t->error);
    pl_jinja_options o = {.now = t->now};
    pl_status st = pl_jinja_render(t->jinja, context_json, len, &o, out, NULL);
    if (st == PL_ERR_INVALID_ARG) pl_error_prefix("chat template");
    return st;
}
