/* Fuzz target: the HTTP request parser/validator (pl_server_parse_request), and the Responses and
 * Messages translation in front of it (pl_server_parse_api_request).
 *
 * Input: one control byte, then the JSON body. Bits 1-2 of the control byte: 0 an OpenAI body
 * (bit 0: chat, else completions), 1 a /v1/responses body, 2 a /v1/messages body, 3 a
 * /v1/messages/count_tokens body. A refusal must be a 400 with a message and an error body that
 * is valid JSON carrying that message (OpenAI's, and Anthropic's for its routes); an accepted
 * request must hold what the handlers rely on (prompts or messages present, strings set, n /
 * best_of / logprobs in range, sampling parameters valid) and free cleanly. Every body also goes
 * through the LoRA routes' parser (pl_server_parse_lora_body; bit 0: with lora_path). */
#include "base/status.h"
#include "server/server.h"

#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_LOGPROBS = 20 };

static void check_error(const pl_server_error *e) {
    if (e->status != 400 || !e->message[0] || !e->type) abort();
    char *body = pl_server_error_body(e);
    if (!body) abort();
    json_t *j = json_loads(body, 0, NULL);
    if (!j) abort();
    json_t *err = json_object_get(j, "error");
    const char *msg = json_string_value(json_object_get(err, "message"));
    if (!msg || !*msg) abort();
    if (!json_object_get(err, "param") || !json_object_get(err, "code")) abort();
    json_decref(j);
    free(body);
}

/* Anthropic's body: {"type": "error", "error": {"type", "message"}} with the same message. */
static void check_anthropic_error(const pl_server_error *e) {
    char *body = pl_server_error_body_as(e, PL_API_ANTHROPIC);
    json_t *j = body ? json_loads(body, 0, NULL) : NULL;
    json_t *err = json_object_get(j, "error");
    const char *msg = json_string_value(json_object_get(err, "message"));
    const char *type = json_string_value(json_object_get(j, "type"));
    if (!j || !type || strcmp(type, "error") ||
        !json_string_value(json_object_get(err, "type")) || !msg || !*msg)
        abort();
    json_decref(j);
    free(body);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int api = (data[0] >> 1) & 3;
    int chat = api ? 1 : data[0] & 1;
    /* A copy of exactly the body's bytes, so reading past it is caught. */
    char *body = malloc(size - 1 ? size - 1 : 1);
    memcpy(body, data + 1, size - 1);
    pl_server_request r;
    pl_server_error e;
    memset(&e, 0, sizeof e);
    json_t *echo = NULL;
    int rc = api == 0 ? pl_server_parse_request(body, size - 1, chat, MAX_LOGPROBS, &r, &e)
                      : pl_server_parse_api_request(api == 1 ? PL_API_RESPONSES : PL_API_ANTHROPIC,
                                                    body, size - 1, MAX_LOGPROBS, api == 3, &r,
                                                    api == 1 ? &echo : NULL, &e);
    if (rc != 0) {
        if (rc != -1 || echo) abort();
        check_error(&e);
        check_anthropic_error(&e);
    } else {
        if (api == 1 && !json_is_object(echo)) abort();
        json_decref(echo);
        if (r.chat != chat) abort();
        if (chat) {
            if (r.n_messages < 1 || !r.messages) abort();
            for (int i = 0; i < r.n_messages; i++)
                if (!r.messages[i].role || !r.messages[i].content) abort();
        } else {
            if (r.n_prompts < 1 || !r.prompts) abort();
            for (int i = 0; i < r.n_prompts; i++)
                if (!r.prompts[i].text && r.prompts[i].n_ids && !r.prompts[i].ids) abort();
        }
        const pl_request_params *p = &r.params;
        if (p->n < 1 || p->n > PL_MAX_BEST_OF) abort();
        if (p->best_of != 0 && (p->best_of < p->n || p->best_of > PL_MAX_BEST_OF)) abort();
        if (p->n_stop < 0 || (p->n_stop && (!p->stop || (const void *)p->stop != (const void *)r.stop)))
            abort();
        for (int32_t i = 0; i < p->n_stop; i++)
            if (!r.stop[i]) abort();
        if (p->n_stop_token_ids < 0 || (p->n_stop_token_ids && !r.stop_ids)) abort();
        if (r.logprobs > MAX_LOGPROBS || p->logprobs > MAX_LOGPROBS) abort();
        if (pl_sampling_params_validate(&p->sampling) != PL_OK) abort();
        pl_server_request_destroy(&r);
    }
    /* The LoRA load / unload bodies. */
    memset(&e, 0, sizeof e);
    const char *ln = NULL, *lp = NULL;
    json_t *lo = pl_server_parse_lora_body(body, size - 1, data[0] & 1, &ln, &lp, &e);
    if (lo) {
        if (!ln || !*ln || strlen(ln) > 127 || ((data[0] & 1) && (!lp || !*lp))) abort();
        json_decref(lo);
    } else {
        check_error(&e);
    }
    /* The JSON front door on its own. */
    memset(&e, 0, sizeof e);
    json_t *o = pl_server_parse_json(body, size - 1, &e);
    if (o) {
        if (!json_is_object(o)) abort();
        json_decref(o);
    } else {
        check_error(&e);
    }
    free(body);
    return 0;
}
