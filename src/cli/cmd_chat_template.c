/* cli/cmd_chat_template — `pagellm chat-template (-m MODEL | --template FILE) --context FILE.json`:
 * print what the chat template renders for one context (a JSON object: messages, tools,
 * add_generation_prompt, bos_token, eos_token, ...) exactly, without a newline added; or exit 1
 * with the template's error on stderr. A model without a template renders ChatML, as serve does. */
#include "cli/cli.h"
#include "cli/flags.h"

#include "base/buf.h"
#include "base/status.h"
#include "gguf/gguf.h"
#include "jinja/jinja.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

#include <jansson.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *C = "chat-template";

/* With -m: the model's BOS and EOS texts as bos_token / eos_token when the context has none
 * (transformers passes the tokenizer's special tokens the same way). */
static void add_special_tokens(const pl_gguf *g, pl_strbuf *ctx) {
    pl_tokenizer *t;
    if (pl_tokenizer_load(g, &t) != PL_OK) return;
    json_t *o = json_loadb(ctx->p ? ctx->p : "", ctx->len, 0, NULL);
    if (json_is_object(o)) {
        int32_t ids[2] = {pl_tokenizer_bos(t), pl_tokenizer_eos(t)};
        const char *keys[2] = {"bos_token", "eos_token"};
        for (int i = 0; i < 2; i++)
            if (!json_object_get(o, keys[i]))
                json_object_set_new(o, keys[i], json_string(ids[i] >= 0 ? pl_tokenizer_token_text(t, ids[i]) : ""));
        char *s = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
        if (s) {
            pl_strbuf_clear(ctx);
            pl_strbuf_puts(ctx, s);
            free(s);
        }
    }
    json_decref(o);
    pl_tokenizer_destroy(t);
}

/* The whole file ("-" = stdin) into b; 0 or -1. */
static int read_all(const char *path, pl_strbuf *b) {
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f) return -1;
    char chunk[8192];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) pl_strbuf_append(b, chunk, n);
    int bad = ferror(f) || b->failed;
    if (f != stdin) fclose(f);
    return bad ? -1 : 0;
}

typedef struct {
    const char *model, *template, *context, *date;
} template_opts;

static const pl_flag TEMPLATE_FLAGS[] = {
    PL_FLAG_ROW_STR(template_opts, "model", 'm', model, "MODEL",
     "use the GGUF's tokenizer.chat_template (ChatML if none);\n"
     "bos_token / eos_token default to the model's"),
    PL_FLAG_ROW_STR(template_opts, "template", 0, template, "FILE",
     "use this Jinja file"),
    PL_FLAG_ROW_STR(template_opts, "context", 0, context, "FILE",
     "the render context, a JSON object ('-' = stdin): messages,\n"
     "add_generation_prompt, bos_token, eos_token, tools, ..."),
    PL_FLAG_ROW_STR(template_opts, "date", 0, date, "YYYY-MM-DD",
     "the date strftime_now sees (default: today, local time;\n"
     "or set PAGELLM_TEMPLATE_DATE)"),
};

static const pl_flag_cmd TEMPLATE = {
    "chat-template", "usage: pagellm chat-template (-m MODEL | --template FILE) --context FILE.json\n",
    "Prints the rendering to stdout exactly; on a template error prints it to stderr\n"
    "and exits 1.\n",
    TEMPLATE_FLAGS, sizeof TEMPLATE_FLAGS / sizeof TEMPLATE_FLAGS[0], -1, 0};

int pl_cmd_chat_template(int argc, char **argv) {
    template_opts o = {.date = getenv("PAGELLM_TEMPLATE_DATE")};
    int first, prc = pl_flags_parse(&TEMPLATE, argc, argv, &o, &first);
    if (prc) return prc == PL_FLAGS_HELP ? 0 : prc;
    const char *model = o.model, *tpath = o.template, *cpath = o.context, *date = o.date;
    if (!cpath || (!model) == (!tpath)) {
        fprintf(stderr, "pagellm chat-template: need --context FILE and one of -m MODEL or "
                "--template FILE\n");
        pl_flags_usage(&TEMPLATE, stderr);
        return 2;
    }
    int64_t now = 0;
    if (date && *date && pl_jinja_parse_date(date, &now) != PL_OK) {
        fprintf(stderr, "pagellm chat-template: --date: %s\n", pl_last_error());
        return 2;
    }
    pl_strbuf src = {0}, ctx = {0};
    pl_chat_template *t = NULL;
    char *out = NULL;
    int rc = 1;
    if (read_all(cpath, &ctx)) {
        rc = pl_cli_fail(C, "cannot read the context %s", cpath);
        goto done;
    }
    pl_status st;
    if (tpath) {
        if (read_all(tpath, &src)) {
            rc = pl_cli_fail(C, "cannot read the template %s", tpath);
            goto done;
        }
        st = pl_chat_template_new(src.p ? src.p : "", src.len, tpath, &t);
    } else {
        char path[4096];
        if (pl_cli_resolve_model(model, path, sizeof path)) goto done;
        pl_gguf *g;
        if (pl_gguf_open(path, &g) != PL_OK) {
            rc = pl_cli_fail(C, "%s", pl_last_error());
            goto done;
        }
        pl_gguf_str s = {0};
        int has = pl_gguf_get_str(g, "tokenizer.chat_template", &s) == PL_OK;
        st = pl_chat_template_new(has ? s.ptr : NULL, has ? s.len : 0, "gguf", &t);
        add_special_tokens(g, &ctx);
        pl_gguf_close(g);
    }
    if (st != PL_OK) {
        rc = pl_cli_fail(C, "%s", pl_last_error());
        goto done;
    }
    pl_chat_template_set_now(t, now);
    if (pl_chat_template_render(t, ctx.p ? ctx.p : "", ctx.len, &out) != PL_OK) {
        fprintf(stderr, "%s\n", pl_last_error());
        goto done;
    }
    fwrite(out, 1, strlen(out), stdout);
    rc = fflush(stdout) ? 1 : 0;
done:
    free(out);
    pl_chat_template_free(t);
    pl_strbuf_destroy(&src);
    pl_strbuf_destroy(&ctx);
    return rc;
}
