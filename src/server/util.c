/* server/util — error bodies, SSE framing, UTF-8 helpers and the constant-time key check. */
#include "server/server.h"
#include "base/fault.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char PL_SERVER_SSE_DONE[] = "data: [DONE]\n\n";

static const char *type_for_status(int status) {
    switch (status) {
    case 401: return "authentication_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 503: return "service_unavailable_error";
    default: return status >= 500 ? "server_error" : "invalid_request_error";
    }
}

int pl_server_fail(pl_server_error *e, int status, const char *param, const char *code,
                   const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    e->status = status;
    e->type = type_for_status(status);
    /* OpenAI answers an unknown model with 404 and this type (and code model_not_found). */
    if (code && !strcmp(code, "model_not_found")) e->type = "invalid_request_error";
    e->param = param;
    e->code = code;
    return -1;
}

int pl_server_nomem(pl_server_error *e) {
    return pl_server_fail(e, 503, NULL, "out_of_memory", "the server ran out of memory; retry later");
}

/* jansson allocates through here (pl_server_json_init), so a failed allocation deep inside a
 * json_pack, a setter whose result was not checked, or json_dumps is still seen: the flag is per
 * thread because each connection builds its responses on its own thread.
 *
 * The fault-injection build does not fail jansson's allocations: jansson 2.14 (Debian 12) itself
 * crashes when one fails inside json_pack (a NULL read in json_vpack_ex; a 20-line program that
 * fails the k-th allocation shows it), which no caller can guard against. */
static _Thread_local int json_failed;

static void *json_alloc(size_t n) {
    void *p = pl_fault_exempt_malloc(n);
    if (!p) json_failed = 1;
    return p;
}

void pl_server_json_init(void) { json_set_alloc_funcs(json_alloc, free); }
void pl_server_json_reset(void) { json_failed = 0; }
int pl_server_json_failed(void) { return json_failed; }

/* Anthropic's error types by status. */
static const char *anthropic_type(int status) {
    switch (status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503: return "overloaded_error";
    default: return status >= 500 ? "api_error" : "invalid_request_error";
    }
}

char *pl_server_error_body_as(const pl_server_error *e, pl_server_api api) {
    size_t n;
    char *msg = pl_server_utf8_sanitize(e->message, strlen(e->message), &n);
    if (!msg) return NULL;
    /* Judge only this body's own allocations (the caller may be answering an earlier failure). */
    int earlier = json_failed;
    json_failed = 0;
    json_t *o = api == PL_API_ANTHROPIC
                    ? json_pack("{s:s, s:{s:s, s:s}}", "type", "error", "error", "type",
                                anthropic_type(e->status), "message", msg)
                    : json_pack("{s:{s:s, s:s, s:o, s:o}}", "error", "message", msg, "type",
                                e->type ? e->type : type_for_status(e->status), "param",
                                e->param ? json_string(e->param) : json_null(), "code",
                                e->code ? json_string(e->code) : json_null());
    free(msg);
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (json_failed) {
        free(s);
        s = NULL;
    }
    json_failed |= earlier;
    return s;
}

char *pl_server_error_body(const pl_server_error *e) {
    return pl_server_error_body_as(e, PL_API_OPENAI);
}

char *pl_server_sse_named(const char *event, const json_t *obj) {
    char *j = json_dumps(obj, JSON_COMPACT);
    if (!j) return NULL;
    size_t n = strlen(j), en = event ? strlen(event) + 8 : 0; /* "event: " NAME "\n" */
    char *s = malloc(en + n + 9);
    if (!s) {
        free(j);
        return NULL;
    }
    if (event) snprintf(s, en + 1, "event: %s\n", event);
    memcpy(s + en, "data: ", 6);
    memcpy(s + en + 6, j, n);
    memcpy(s + en + 6 + n, "\n\n", 3);
    free(j);
    return s;
}

char *pl_server_sse_event(const json_t *obj) { return pl_server_sse_named(NULL, obj); }

json_t *pl_server_text_json(const char *s, size_t n) {
    size_t m;
    char *t = pl_server_utf8_sanitize(s ? s : "", n, &m);
    if (!t) return NULL;
    json_t *j = json_stringn(t, m);
    free(t);
    return j;
}

/* Length of the valid UTF-8 sequence at s (n bytes left), or 0 if invalid there. */
static size_t utf8_seq(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    size_t len;
    unsigned min;
    if (c < 0x80) return 1;
    if (c >= 0xc2 && c <= 0xdf) len = 2, min = 0x80;
    else if (c >= 0xe0 && c <= 0xef) len = 3, min = 0x800;
    else if (c >= 0xf0 && c <= 0xf4) len = 4, min = 0x10000;
    else return 0;
    if (len > n) return 0;
    unsigned cp = c & (0xff >> (len + 1));
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0;
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
    return len;
}

char *pl_server_utf8_sanitize(const char *s, size_t n, size_t *out_len) {
    char *o = n < SIZE_MAX / 3 ? malloc(n * 3 + 1) : NULL; /* a bad byte: 3 bytes of U+FFFD */
    if (!o) return NULL;
    size_t j = 0;
    for (size_t i = 0; i < n;) {
        size_t k = utf8_seq((const unsigned char *)s + i, n - i);
        if (k == 0 || (k == 1 && s[i] == 0)) { /* NUL would cut the string: replace it too */
            memcpy(o + j, "\xef\xbf\xbd", 3);
            j += 3;
            i++;
        } else {
            memcpy(o + j, s + i, k);
            j += k;
            i += k;
        }
    }
    o[j] = 0;
    if (out_len) *out_len = j;
    return o;
}

size_t pl_server_utf8_chars(const char *s, size_t n) {
    size_t c = 0;
    for (size_t i = 0; i < n; i++) c += ((unsigned char)s[i] & 0xc0) != 0x80;
    return c;
}

char *pl_server_token_str(const pl_tokenizer *t, int32_t id) {
    char buf[256];
    if (!t) {
        snprintf(buf, sizeof buf, "token_id:%d", id);
        return strdup(buf);
    }
    size_t n = pl_token_to_piece(t, id, buf, sizeof buf, 1);
    if (n > sizeof buf) n = sizeof buf;
    return pl_server_utf8_sanitize(buf, n, NULL);
}

/* 1 if header is prefix + key. */
static int auth_match(const char *header, const char *prefix, const char *key) {
    if (!header || !key) return 0;
    size_t hl = strlen(header), kl = strlen(key), pl = strlen(prefix);
    /* Compare "Bearer KEY" against the header over the expected length, touching every byte
     * whatever the contents, so timing tells nothing about where they differ. */
    unsigned diff = (unsigned)(hl != pl + kl);
    for (size_t i = 0; i < pl + kl; i++) {
        char want = i < pl ? prefix[i] : key[i - pl];
        char got = hl ? header[i % hl] : 0;
        diff |= (unsigned)(unsigned char)(want ^ got);
    }
    return diff == 0;
}

int pl_server_auth_ok(const char *header, const char *key) {
    return auth_match(header, "Bearer ", key);
}

int pl_server_auth_key_ok(const char *header, const char *key) {
    return auth_match(header, "", key);
}
