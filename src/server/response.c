/* server/response — engine output deltas to OpenAI response pieces: accumulated choices,
 * finish and stop reasons, completions and chat logprobs, usage.
 *
 * Log-probabilities of -inf (a token the model gives zero probability) are reported as -9999.0
 * as vLLM does, since JSON has no infinity.
 */
#include "server/server.h"
#include "base/buf.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double finite_lp(float lp) { return isfinite(lp) ? (double)lp : -9999.0; }

int pl_server_choice_add(pl_server_choice *c, const pl_completion_delta *d) {
    /* Reserve everything first, so a failure leaves the choice as it was. */
    size_t need = (size_t)c->n + (size_t)(d->n_tokens > 0 ? d->n_tokens : 0);
    size_t row = (size_t)d->n_top + 1;
    int with_lp = d->n_tokens > 0 && d->token_logprobs && d->top;
    char *stop = d->finish != PL_FINISH_NONE && d->stop_str ? strdup(d->stop_str) : NULL;
    if ((d->finish != PL_FINISH_NONE && d->stop_str && !stop) ||
        pl_array_reserve(&c->text, &c->text_cap, c->len + d->text_len + 1, 1) ||
        pl_array_reserve(&c->ids, &c->ids_cap, need, sizeof *c->ids) ||
        (with_lp && (pl_array_reserve(&c->lp, &c->lp_cap, need, sizeof *c->lp) ||
                     pl_array_reserve(&c->top, &c->top_cap, need * row, sizeof *c->top)))) {
        free(stop);
        return -1;
    }
    memcpy(c->text + c->len, d->text ? d->text : "", d->text_len);
    c->len += d->text_len;
    c->text[c->len] = 0;
    if (d->n_tokens > 0) {
        memcpy(c->ids + c->n, d->token_ids, (size_t)d->n_tokens * sizeof *c->ids);
        if (with_lp) {
            c->n_top = d->n_top;
            memcpy(c->lp + c->n, d->token_logprobs, (size_t)d->n_tokens * sizeof *c->lp);
            memcpy(c->top + (size_t)c->n * row, d->top, (size_t)d->n_tokens * row * sizeof *c->top);
        }
        c->n = (int32_t)need;
    }
    c->cum_logprob = d->cumulative_logprob;
    if (d->finish != PL_FINISH_NONE) {
        c->finish = d->finish;
        c->stop_token = d->stop_token;
        free(c->stop_str);
        c->stop_str = stop;
    }
    return 0;
}

void pl_server_choice_destroy(pl_server_choice *c) {
    PL_FREE_ALL(c->text, c->ids, c->lp, c->top, c->stop_str);
    memset(c, 0, sizeof *c);
}

json_t *pl_server_finish_json(pl_finish_reason f) {
    if (f == PL_FINISH_NONE) return json_null();
    return json_string(pl_finish_reason_name(f));
}

json_t *pl_server_stop_reason_json(pl_finish_reason f, int32_t stop_token, const char *stop_str) {
    if (f != PL_FINISH_STOP) return json_null();
    if (stop_str) {
        size_t n;
        char *s = pl_server_utf8_sanitize(stop_str, strlen(stop_str), &n);
        json_t *j = s ? json_stringn(s, n) : NULL;
        free(s);
        return j;
    }
    /* vLLM reports the stop token id only for explicit stop_token_ids; EOS gives null. The
     * engine does not tell them apart, so any stop id is reported. */
    return stop_token >= 0 ? json_integer(stop_token) : json_null();
}

json_t *pl_server_completion_logprobs(const pl_server_resp_ctx *x, const int32_t *ids,
                                      const float *lp, const pl_token_logprob *top, int32_t n,
                                      int32_t n_top, int first_null, size_t offset0,
                                      size_t *offset_end) {
    json_t *tokens = json_array(), *tlp = json_array(), *tops = json_array(),
           *offs = json_array();
    size_t off = offset0;
    int bad = 0; /* a token string could not be made (jansson's own failures flag themselves) */
    for (int32_t i = 0; i < n && !bad; i++) {
        char *s = pl_server_token_str(x->tok, ids[i]);
        if (!s) {
            bad = 1;
            break;
        }
        json_array_append_new(tokens, json_string(s));
        json_array_append_new(offs, json_integer((json_int_t)off));
        off += pl_server_utf8_chars(s, strlen(s));
        free(s);
        if ((i == 0 && first_null) || !lp) {
            json_array_append_new(tlp, json_null());
            json_array_append_new(tops, json_null());
            continue;
        }
        json_array_append_new(tlp, json_real(finite_lp(lp[i])));
        json_t *d = json_object();
        const pl_token_logprob *row = top + (size_t)i * (size_t)(n_top + 1);
        for (int32_t k = 0; k <= n_top && !bad; k++) { /* the top n_top, then the chosen token */
            char *ts = pl_server_token_str(x->tok, row[k].id);
            if (!ts) bad = 1;
            else if (!json_object_get(d, ts))
                json_object_set_new(d, ts, json_real(finite_lp(row[k].logprob)));
            free(ts);
        }
        json_array_append_new(tops, d);
    }
    if (offset_end) *offset_end = off;
    if (bad) {
        json_decref(tokens), json_decref(tlp), json_decref(tops), json_decref(offs);
        return NULL;
    }
    return json_pack("{s:o, s:o, s:o, s:o}", "tokens", tokens, "token_logprobs", tlp,
                     "top_logprobs", tops, "text_offset", offs);
}

static json_t *bytes_json(const pl_tokenizer *t, int32_t id) {
    char buf[256];
    size_t n = t ? pl_token_to_piece(t, id, buf, sizeof buf, 1) : 0;
    if (n > sizeof buf) n = sizeof buf;
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(a, json_integer((unsigned char)buf[i]));
    return a;
}

static json_t *chat_token(const pl_server_resp_ctx *x, int32_t id, float lp) {
    char *s = pl_server_token_str(x->tok, id);
    json_t *o = json_pack("{s:s, s:f, s:o}", "token", s, "logprob", finite_lp(lp), "bytes",
                          bytes_json(x->tok, id));
    free(s);
    return o;
}

json_t *pl_server_chat_logprobs(const pl_server_resp_ctx *x, const int32_t *ids, const float *lp,
                                const pl_token_logprob *top, int32_t n, int32_t n_top) {
    json_t *content = json_array();
    int bad = 0; /* a token string could not be made (jansson's own failures flag themselves) */
    for (int32_t i = 0; lp && i < n && !bad; i++) {
        json_t *t = chat_token(x, ids[i], lp[i]);
        json_t *tl = json_array();
        bad |= !t;
        const pl_token_logprob *row = top + (size_t)i * (size_t)(n_top + 1);
        for (int32_t k = 0; k < n_top && !bad; k++) {
            json_t *e = chat_token(x, row[k].id, row[k].logprob);
            bad |= !e;
            json_array_append_new(tl, e);
        }
        json_object_set_new(t, "top_logprobs", tl);
        json_array_append_new(content, t);
    }
    if (bad) {
        json_decref(content);
        return NULL;
    }
    return json_pack("{s:o}", "content", content);
}

json_t *pl_server_chunk_choice(const pl_server_resp_ctx *x, int k, const pl_completion_delta *d,
                               const char *prefix, size_t *text_off) {
    json_t *lp = json_null();
    if (x->logprobs && d->token_logprobs && d->n_tokens > 0)
        lp = x->chat ? pl_server_chat_logprobs(x, d->token_ids, d->token_logprobs, d->top,
                                               d->n_tokens, d->n_top)
                     : pl_server_completion_logprobs(x, d->token_ids, d->token_logprobs, d->top,
                                                     d->n_tokens, d->n_top, 0, *text_off,
                                                     text_off);
    size_t n, pn = prefix ? strlen(prefix) : 0;
    char *t = pl_server_utf8_sanitize(d->text ? d->text : "", d->text_len, &n), *whole = t;
    if (t && pn) { /* a valid prefix ends on a character boundary: sanitizing after it is the same */
        whole = malloc(pn + n + 1);
        if (whole) {
            memcpy(whole, prefix, pn);
            memcpy(whole + pn, t, n + 1);
        }
        free(t);
        n += pn;
    }
    json_t *text = whole ? json_stringn(whole, n) : NULL;
    free(whole);
    json_t *fin = pl_server_finish_json(d->finish),
           *stop = pl_server_stop_reason_json(d->finish, d->stop_token, d->stop_str);
    if (x->chat)
        return json_pack("{s:i, s:{s:o}, s:o, s:o, s:o}", "index", k, "delta", "content", text,
                         "logprobs", lp, "finish_reason", fin, "stop_reason", stop);
    return json_pack("{s:i, s:o, s:o, s:o, s:o}", "index", k, "text", text, "logprobs", lp,
                     "finish_reason", fin, "stop_reason", stop);
}

json_t *pl_server_usage_json(int64_t prompt, int64_t completion, int64_t cached) {
    return json_pack("{s:I, s:I, s:I, s:{s:I}}", "prompt_tokens", (json_int_t)prompt,
                     "completion_tokens", (json_int_t)completion, "total_tokens",
                     (json_int_t)(prompt + completion), "prompt_tokens_details", "cached_tokens",
                     (json_int_t)cached);
}
