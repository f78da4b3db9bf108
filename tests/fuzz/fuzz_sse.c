/* Fuzz target: the SSE/JSON writer of streamed responses. Arbitrary text deltas (any bytes:
 * pieces can split or break UTF-8), token ids, log-probabilities (any float, NaN and infinities
 * too), finish reasons and stop strings are turned into chunks by the server's own
 * pl_server_chunk_choice (what server/generate.c streams) and pl_server_sse_event — and the accumulated
 * choice (pl_server_choice_add) into a final body; error bodies from arbitrary messages too.
 * Every event must be "data: " + one line of JSON + "\n\n" that parses back, with the delta's
 * text as its sanitized form (valid UTF-8, unchanged when it already was, without NULs). */
#include "base/status.h"
#include "gguf/gguf.h"
#include "server/server.h"
#include "tokenizer/tokenizer.h"

#include <jansson.h>
#include "fuzz_util.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pl_tokenizer *g_tok;

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    g_tok = fuzz_load_tokenizer("models/stories260K.gguf", "fuzz_sse");
    return 0;
}

typedef struct {
    const uint8_t *p;
    size_t n;
} input;

static unsigned take_byte(input *in) {
    if (!in->n) return 0;
    in->n--;
    return *in->p++;
}

static const uint8_t *take_bytes(input *in, size_t want, size_t *got) {
    *got = want < in->n ? want : in->n;
    const uint8_t *p = in->p;
    in->p += *got;
    in->n -= *got;
    return p;
}

static float take_float(input *in) {
    uint8_t b[4] = {0};
    for (int i = 0; i < 4; i++) b[i] = (uint8_t)take_byte(in);
    float f;
    memcpy(&f, b, sizeof f);
    return f;
}

/* sanitize(s) must be valid UTF-8 without NULs, and s itself when s already was. */
static json_t *text_json(const char *s, size_t n, char **san, size_t *san_len) {
    *san = pl_server_utf8_sanitize(s, n, san_len);
    if (!*san || strlen(*san) != *san_len || !valid_utf8(*san, *san_len)) abort();
    if (valid_utf8(s, n) && !memchr(s, 0, n) && (*san_len != n || memcmp(*san, s, n) != 0)) abort();
    json_t *j = json_stringn(*san, *san_len);
    if (!j) abort();
    return j;
}

/* "data: " + compact JSON on one line + "\n\n"; returns the parsed object. */
static json_t *check_event(const char *ev) {
    if (!ev || strncmp(ev, "data: ", 6) != 0) abort();
    size_t n = strlen(ev);
    if (n < 8 || ev[n - 1] != '\n' || ev[n - 2] != '\n') abort();
    if (memchr(ev, '\n', n - 2) || memchr(ev, '\r', n - 2)) abort(); /* one event, one line */
    json_error_t je;
    json_t *j = json_loadb(ev + 6, n - 8, 0, &je);
    if (!j) {
        fprintf(stderr, "SSE event is not JSON (%s): %s\n", je.text, ev);
        abort();
    }
    return j;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    input in = {data, size};
    unsigned ctl = take_byte(&in);
    int chat = ctl & 1, logprobs = (ctl >> 1) & 1;
    int32_t n_top = (int32_t)((ctl >> 2) & 3);
    int32_t n_vocab = pl_tokenizer_n_vocab(g_tok);
    pl_server_resp_ctx x = {.id = "cmpl-fuzz", .model = "m", .created = 1,
                            .tok = (ctl & 16) ? NULL : g_tok, .chat = chat, .logprobs = logprobs};
    pl_server_choice choice;
    memset(&choice, 0, sizeof choice);
    choice.stop_token = -1;
    size_t text_off = 0, total_len = 0;
    char *all = malloc(size + 1); /* the raw deltas concatenated */

    for (int d = 0; in.n && d < 16; d++) {
        size_t tlen;
        const char *text = (const char *)take_bytes(&in, take_byte(&in) % 64, &tlen);
        memcpy(all + total_len, text, tlen);
        total_len += tlen;
        int32_t nt = (int32_t)(take_byte(&in) % 5);
        int32_t ids[4];
        float lps[4];
        pl_token_logprob top[4 * 4];
        for (int32_t i = 0; i < nt; i++) {
            unsigned v = take_byte(&in) | take_byte(&in) << 8;
            ids[i] = (int32_t)(v % (unsigned)(n_vocab + 1)); /* n_vocab: out of range */
            lps[i] = take_float(&in);
            for (int32_t k = 0; k <= n_top; k++) {
                top[i * (n_top + 1) + k].id = k == n_top ? ids[i] : (int32_t)(take_byte(&in) * 7 % n_vocab);
                top[i * (n_top + 1) + k].logprob = k == n_top ? lps[i] : take_float(&in);
            }
        }
        unsigned fb = take_byte(&in);
        char stop_buf[32];
        size_t sl;
        const uint8_t *sp = take_bytes(&in, (fb >> 3) % 16, &sl);
        memcpy(stop_buf, sp, sl);
        stop_buf[sl] = '\0';
        pl_completion_delta dl = {
            .index = 0, .text = (char *)text, .text_len = tlen, .n_tokens = nt,
            .token_ids = nt ? ids : NULL, .n_top = n_top,
            .token_logprobs = logprobs && nt ? lps : NULL, .top = logprobs && nt ? top : NULL,
            .finish = (pl_finish_reason)(fb % 5), .stop_token = (fb & 4) ? -1 : (int32_t)fb,
            .stop_str = (fb & 128) ? stop_buf : NULL, .cumulative_logprob = nt ? lps[0] : 0};
        pl_server_choice_add(&choice, &dl);

        /* The chunk, built by the server's own pl_server_chunk_choice (stream_delta). */
        char *san;
        size_t san_len;
        json_t *tj = text_json(dl.text, dl.text_len, &san, &san_len);
        json_decref(tj);
        json_t *ch = pl_server_chunk_choice(&x, 0, &dl, NULL, &text_off);
        if (!ch) abort();
        json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:[o]}", "id", x.id, "object",
                              chat ? "chat.completion.chunk" : "text_completion", "created",
                              (json_int_t)x.created, "model", x.model, "choices", ch);
        if (!o) abort();
        char *ev = pl_server_sse_event(o);
        json_decref(o);
        json_t *back = check_event(ev);
        json_t *c0 = json_array_get(json_object_get(back, "choices"), 0);
        json_t *bt = chat ? json_object_get(json_object_get(c0, "delta"), "content")
                          : json_object_get(c0, "text");
        if (!json_is_string(bt) || json_string_length(bt) != san_len ||
            memcmp(json_string_value(bt), san, san_len) != 0)
            abort();
        json_decref(back);
        free(ev);
        free(san);
    }

    /* The accumulated choice: its text is every delta's bytes, and the final body is JSON. */
    if (choice.len != total_len || (total_len && memcmp(choice.text, all, total_len) != 0)) abort();
    if (choice.text) {
        char *san;
        size_t san_len;
        json_t *tj = text_json(choice.text, choice.len, &san, &san_len);
        json_t *lp = json_null();
        if (choice.n > 0 && choice.lp) {
            json_decref(lp);
            lp = chat ? pl_server_chat_logprobs(&x, choice.ids, choice.lp, choice.top, choice.n,
                                                choice.n_top)
                      : pl_server_completion_logprobs(&x, choice.ids, choice.lp, choice.top,
                                                      choice.n, choice.n_top, 1, 0, NULL);
        }
        json_t *o = json_pack("{s:s, s:[{s:o, s:o, s:o, s:o}], s:o}", "id", x.id, "choices", "text",
                              tj, "logprobs", lp, "finish_reason", pl_server_finish_json(choice.finish),
                              "stop_reason",
                              pl_server_stop_reason_json(choice.finish, choice.stop_token, choice.stop_str),
                              "usage", pl_server_usage_json(3, choice.n, 0));
        if (!o) abort();
        char *ev = pl_server_sse_event(o);
        json_decref(o);
        json_decref(check_event(ev));
        free(ev);
        free(san);
    }
    pl_server_choice_destroy(&choice);

    /* An error event from arbitrary message bytes (e.g. an engine error naming a token). */
    pl_server_error e;
    char msg[600];
    size_t ml = total_len < sizeof msg - 1 ? total_len : sizeof msg - 1;
    memcpy(msg, all, ml);
    msg[ml] = '\0';
    pl_server_fail(&e, 500, NULL, "internal_error", "%s", msg);
    char *body = pl_server_error_body(&e);
    if (!body) abort();
    size_t bl = strlen(body);
    char *ev = malloc(bl + 9);
    memcpy(ev, "data: ", 6);
    memcpy(ev + 6, body, bl);
    memcpy(ev + 6 + bl, "\n\n", 3);
    json_t *j = check_event(ev);
    if (!json_is_string(json_object_get(json_object_get(j, "error"), "message"))) abort();
    json_decref(j);
    free(ev);
    free(body);
    free(all);
    if (strcmp(PL_SERVER_SSE_DONE, "data: [DONE]\n\n") != 0) abort();
    return 0;
}
