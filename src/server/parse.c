/* server/parse — a chat answer's generated text split into its thinking (reasoning_content), its
 * answer (content) and its tool calls, for each template family's tags (docs/SERVER.md lists them).
 *
 * One pure function parses the whole text so far; `final` says whether more may come. While it
 * may, nothing is reported that a later byte could change: a tag's beginning at the end of the
 * text is held back, so is trailing whitespace (dropped before a tag), and a tool call shows up
 * once its name is known, its arguments growing as they are written (raw JSON bytes, or one
 * JSON member per finished parameter for the XML formats). So each field of a parse is a prefix
 * of the same field of any later parse of a longer text, and a stream sends the difference
 * (pl_parse_diff): the pieces a stream sends add up to the whole parse, whatever the split, and a
 * delta never holds part of a tag. */
#include "server/server.h"

#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

/* ---- names ---- */

static const char *const REASONING_NAMES[] = {NULL, "qwen3", "deepseek_r1", "mistral", "gpt_oss",
                                              "gemma4"};

int pl_reasoning_parser_by_name(const char *name, pl_reasoning_format *out) {
    for (int i = 1; i < (int)(sizeof REASONING_NAMES / sizeof *REASONING_NAMES); i++)
        if (!strcmp(name, REASONING_NAMES[i])) {
            *out = (pl_reasoning_format)i;
            return 0;
        }
    if (!strcmp(name, "none")) {
        *out = PL_REASON_NONE;
        return 0;
    }
    return -1;
}

const char *pl_reasoning_parser_name(pl_reasoning_format f) {
    return f > PL_REASON_NONE && f <= PL_REASON_GEMMA4 ? REASONING_NAMES[f] : "none";
}

static int has(const char *s, const char *needle) { return strstr(s, needle) != NULL; }

void pl_parse_detect(const char *src, size_t len, pl_reasoning_format *reasoning,
                     pl_tool_format *tools) {
    *reasoning = PL_REASON_NONE;
    *tools = PL_TOOLS_NONE;
    char *s = src ? strndup(src, len) : NULL;
    if (!s) return;
    if (has(s, "<|channel|>") && has(s, "<|message|>")) {
        *reasoning = PL_REASON_GPT_OSS;
        *tools = PL_TOOLS_HARMONY;
    } else if (has(s, "<|channel>") && has(s, "<|tool_call>")) {
        *reasoning = PL_REASON_GEMMA4;
        *tools = PL_TOOLS_GEMMA4;
    } else if (has(s, "[TOOL_CALLS]")) {
        *tools = PL_TOOLS_MISTRAL;
        if (has(s, "[THINK]")) *reasoning = PL_REASON_MISTRAL;
    } else if (has(s, "tool\xe2\x96\x81" "calls\xe2\x96\x81" "begin")) {
        *tools = PL_TOOLS_DEEPSEEK_V31;
        if (has(s, "<think>")) *reasoning = PL_REASON_DEEPSEEK_R1;
    } else if (has(s, "<|tool_calls_section_begin|>")) {
        *tools = PL_TOOLS_KIMI_K2;
        if (has(s, "<think>")) *reasoning = PL_REASON_QWEN3;
    } else {
        if (has(s, "<arg_key>")) *tools = PL_TOOLS_GLM45;
        else if (has(s, "<function=")) *tools = PL_TOOLS_QWEN3_CODER;
        else if (has(s, "<tool_call>")) *tools = PL_TOOLS_HERMES;
        else if (has(s, "<|start_header_id|>") && has(s, "parameters")) *tools = PL_TOOLS_LLAMA3;
        if (has(s, "</think>")) *reasoning = PL_REASON_QWEN3;
    }
    free(s);
}

pl_tool_format pl_tool_format_detect(const char *src, size_t len) {
    pl_reasoning_format r;
    pl_tool_format t;
    pl_parse_detect(src, len, &r, &t);
    return t;
}

/* ---- the parse ---- */

void pl_parsed_destroy(pl_parsed *p) {
    pl_strbuf_destroy(&p->reasoning);
    pl_strbuf_destroy(&p->content);
    for (int i = 0; i < p->n_calls; i++) {
        free(p->calls[i].name);
        pl_strbuf_destroy(&p->calls[i].args);
    }
    free(p->calls);
    memset(p, 0, sizeof *p);
}

typedef struct {
    const pl_parse_cfg *cfg;
    const char *e;                 /* end of the text */
    int final;
    pl_parsed *out;
    int fail;                      /* out of memory */
    int ws_pending;                /* content: whitespace held since the last text */
} parser;

static int is_ws(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

static const char *skip_ws(const char *p, const char *e) {
    while (p < e && is_ws(*p)) p++;
    return p;
}

/* The tag at p: 1 it is there, 0 it is not, -1 the text ends inside it (more may come). */
static int at(const parser *ps, const char *p, const char *tag) {
    size_t n = strlen(tag), have = (size_t)(ps->e - p);
    if (have >= n) return !memcmp(p, tag, n);
    return !memcmp(p, tag, have) && !ps->final ? -1 : 0;
}

/* The first of the tags in [p, e): its position and *which; a tag's beginning at the end of an
 * unfinished text stops the search there (*which = -1). NULL: none. */
static const char *find_tag(const parser *ps, const char *p, const char *const *tags, int n,
                            int *which) {
    for (; p < ps->e; p++)
        for (int k = 0; k < n; k++) {
            if (!tags[k] || *p != tags[k][0]) continue;
            int m = at(ps, p, tags[k]);
            if (m) {
                *which = m > 0 ? k : -1;
                return p;
            }
        }
    *which = -1;
    return NULL;
}

/* Where the longest proper beginning of `tag` that ends [a, e) starts, or e: what to hold back
 * while the text may go on into the tag. */
static const char *tag_start_at_end(const char *a, const char *e, const char *tag) {
    for (size_t k = strlen(tag) - 1; k > 0; k--)
        if ((size_t)(e - a) >= k && !memcmp(e - k, tag, k)) return e - k;
    return e;
}

static void put(parser *ps, pl_strbuf *b, const char *s, size_t n) {
    if (pl_strbuf_append(b, s, n)) ps->fail = 1;
}

/* Text of a section: its leading whitespace goes when `lstrip`, its trailing whitespace is held
 * unless `keep_tail` (the text ends here for good, with no tag after it). */
static void put_trimmed(parser *ps, pl_strbuf *b, const char *a, const char *z, int lstrip,
                        int keep_tail) {
    if (lstrip && !b->len) a = skip_ws(a, z);
    const char *t = z;
    if (!keep_tail)
        while (t > a && is_ws(t[-1])) t--;
    put(ps, b, a, (size_t)(t - a));
}

static pl_parsed_call *new_call(parser *ps, const char *name, size_t n) {
    pl_parsed *o = ps->out;
    if (pl_array_reserve(&o->calls, &o->cap_calls, (size_t)o->n_calls + 1, sizeof *o->calls)) {
        ps->fail = 1;
        return NULL;
    }
    pl_parsed_call *c = &o->calls[o->n_calls];
    memset(c, 0, sizeof *c);
    if (!(c->name = strndup(name, n))) {
        ps->fail = 1;
        return NULL;
    }
    o->n_calls++;
    return c;
}

/* The end of the JSON value at p (after ws), or NULL when the text ends first; *bad when it is
 * not JSON. Strings are walked with their escapes; a scalar at the end of the text is open. */
static const char *skip_json(const char *p, const char *e, int *bad) {
    int depth = 0, in_str = 0;
    *bad = 0;
    p = skip_ws(p, e);
    if (p < e && !strchr("{[\"-0123456789tfn", *p)) {
        *bad = 1;
        return NULL;
    }
    for (; p < e; p++) {
        char c = *p;
        if (in_str) {
            if (c == '\\') p++;
            else if (c == '"') {
                in_str = 0;
                if (!depth) return p + 1;
            }
        } else if (c == '"') in_str = 1;
        else if (c == '{' || c == '[') depth++;
        else if (c == '}' || c == ']') {
            if (--depth < 0) {
                *bad = 1;
                return NULL;
            }
            if (!depth) return p + 1;
        } else if (!depth && (is_ws(c) || c == ',' || c == ';' || c == '<')) return p;
    }
    return NULL;
}

/* A call object {"name": "...", "arguments": {...}} at p ('{'): the name's and arguments' spans
 * so far. Returns the end after '}', or NULL while open; *bad when it is no call object. */
/* Scanning a JSON object or array: p past whitespace and separating commas, at the next item;
 * NULL when the text ends first; past `close` with *closed set when the object or array ends. */
static const char *skip_to_item(const char *p, const char *e, char close, int *closed) {
    *closed = 0;
    for (;; p++) {
        p = skip_ws(p, e);
        if (p >= e) return NULL;
        if (*p == close) {
            *closed = 1;
            return p + 1;
        }
        if (*p != ',') return p;
    }
}

typedef struct {
    const char *name0, *name1, *a0, *a1; /* a1 NULL: the arguments are still open */
} call_obj;

static const char *scan_call_obj(const char *p, const char *e, call_obj *o, int *bad) {
    memset(o, 0, sizeof *o);
    *bad = 0;
    if (p >= e || *p != '{') {
        *bad = p < e;
        return NULL;
    }
    p++;
    for (;;) {
        int closed;
        if (!(p = skip_to_item(p, e, '}', &closed)) || closed) return p;
        const char *k0 = p, *k1 = skip_json(p, e, bad);
        if (*bad || (k1 && *k0 != '"')) {
            *bad = 1;
            return NULL;
        }
        if (!k1) return NULL;
        p = skip_ws(k1, e);
        if (p >= e) return NULL;
        if (*p != ':') {
            *bad = 1;
            return NULL;
        }
        const char *v0 = skip_ws(p + 1, e);
        if (v0 >= e) return NULL;
        const char *v1 = skip_json(v0, e, bad);
        if (*bad) return NULL;
        size_t kl = (size_t)(k1 - k0);
        if (kl == 6 && !memcmp(k0, "\"name\"", 6) && *v0 == '"') {
            if (v1) o->name0 = v0, o->name1 = v1;
        } else if ((kl == 11 && !memcmp(k0, "\"arguments\"", 11)) ||
                   (kl == 12 && !memcmp(k0, "\"parameters\"", 12))) {
            o->a0 = v0;
            o->a1 = v1;
        }
        if (!v1) return NULL;
        p = v1;
    }
}

static char *json_str_decode(const char *a, const char *z) {
    json_t *s = json_loadb(a, (size_t)(z - a), JSON_DECODE_ANY, NULL);
    char *r = json_is_string(s) ? strdup(json_string_value(s)) : NULL;
    json_decref(s);
    return r;
}

/* A JSON call object at p: reported once its name is known (before its arguments when the name
 * comes first), its arguments raw as they grow (a string's decoded value once whole). Returns the
 * end, or NULL while open (*bad: not a call). */
static const char *call_from_obj(parser *ps, const char *p, int *bad) {
    call_obj o;
    const char *end = scan_call_obj(p, ps->e, &o, bad);
    if (*bad || (end && !o.name0)) {
        *bad = 1;
        return NULL;
    }
    if (!o.name0 || (!end && o.a0 && o.a0 < o.name0)) return end; /* the name is not known yet */
    char *name = json_str_decode(o.name0, o.name1);
    if (!name) {
        *bad = 1;
        return NULL;
    }
    pl_parsed_call *c = new_call(ps, name, strlen(name));
    free(name);
    if (!c) return end;
    if (!o.a0) {
        if (end) put(ps, &c->args, "{}", 2);
    } else if (*o.a0 == '"') {
        char *s = o.a1 ? json_str_decode(o.a0, o.a1) : NULL;
        if (s) put(ps, &c->args, s, strlen(s));
        free(s);
    } else {
        put(ps, &c->args, o.a0, (size_t)((o.a1 ? o.a1 : ps->e) - o.a0));
    }
    c->done = end != NULL;
    return end;
}

/* ---- parameters written as text (Qwen3-Coder, GLM 4.5/4.6) ---- */

/* The schema type of a tool's parameter, or NULL. */
static const char *param_type(const parser *ps, const char *fn, const char *key) {
    size_t i;
    json_t *t;
    json_array_foreach(ps->cfg->tool_defs, i, t) {
        json_t *f = json_object_get(t, "function");
        if (!json_is_string(json_object_get(f, "name")) ||
            strcmp(json_string_value(json_object_get(f, "name")), fn))
            continue;
        json_t *ty = json_object_get(json_object_get(json_object_get(json_object_get(f, "parameters"), "properties"), key), "type");
        return json_string_value(ty);
    }
    return NULL;
}

/* One parameter as a JSON member `"key": value` after `{` or `, `: a string unless the schema
 * gives it another type and the text is JSON. */
static void put_param(parser *ps, pl_parsed_call *c, const char *k0, const char *k1,
                      const char *v0, const char *v1) {
    if (v0 < v1 && *v0 == '\n') v0++;
    if (v1 > v0 && v1[-1] == '\n') v1--;
    char *key = strndup(k0, (size_t)(k1 - k0));
    if (!key) {
        ps->fail = 1;
        return;
    }
    const char *ty = param_type(ps, c->name, key);
    json_t *v = NULL;
    if (ty && strcmp(ty, "string")) v = json_loadb(v0, (size_t)(v1 - v0), JSON_DECODE_ANY, NULL);
    if (!v) v = json_stringn(v0, (size_t)(v1 - v0));
    json_t *kj = json_string(key);
    char *ks = kj ? json_dumps(kj, JSON_ENCODE_ANY) : NULL,
         *vs = v ? json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
    if (!ks || !vs || pl_strbuf_printf(&c->args, "%s%s: %s", c->args.len ? ", " : "{", ks, vs))
        ps->fail = 1;
    free(ks);
    free(vs);
    json_decref(kj);
    json_decref(v);
    free(key);
}

/* <function=NAME> <parameter=K>V</parameter>... </function> (Qwen3-Coder, Qwen3.5, Nemotron 3),
 * or NAME <arg_key>K</arg_key><arg_value>V</arg_value>... (GLM): from p, inside <tool_call>, up
 * to `close`. Returns the end after close, or NULL while open. */
static const char *call_from_xml(parser *ps, const char *p, int glm, int *bad) {
    const char *e = ps->e, *n0, *n1;
    p = skip_ws(p, e);
    if (!glm) {
        int m = at(ps, p, "<function=");
        if (m <= 0) {
            *bad = m == 0 && p < e;
            return NULL;
        }
        n0 = p + 10;
        n1 = memchr(n0, '>', (size_t)(e - n0));
        if (!n1) return NULL;
        p = n1 + 1;
    } else {
        n0 = p;
        static const char *const ends[] = {"\n", "<arg_key>", "</tool_call>"};
        int w;
        n1 = find_tag(ps, p, ends, 3, &w);
        if (!n1 || w < 0) return NULL;
        while (n1 > n0 && is_ws(n1[-1])) n1--;
        p = n1;
    }
    if (n1 == n0) {
        *bad = 1;
        return NULL;
    }
    pl_parsed_call *c = new_call(ps, n0, (size_t)(n1 - n0));
    if (!c) return NULL;
    const char *kopen = glm ? "<arg_key>" : "<parameter=", *kclose = glm ? "</arg_key>" : ">",
               *vopen = glm ? "<arg_value>" : "", *vclose = glm ? "</arg_value>" : "</parameter>",
               *fclose = glm ? "</tool_call>" : "</function>";
    for (;;) {
        p = skip_ws(p, e);
        int m = at(ps, p, fclose);
        if (m > 0 || (ps->final && p >= e)) {
            put(ps, &c->args, c->args.len ? "}" : "{}", c->args.len ? 1 : 2);
            c->done = 1;
            return m > 0 ? p + strlen(fclose) : e;
        }
        if (m < 0 || p >= e) return NULL;
        if (at(ps, p, kopen) <= 0) return NULL; /* junk or open: wait for the close */
        const char *k0 = p + strlen(kopen), *k1 = memmem(k0, (size_t)(e - k0), kclose, strlen(kclose));
        if (!k1) return NULL;
        const char *v0 = skip_ws(k1 + strlen(kclose), e);
        if (*vopen) {
            if (at(ps, v0, vopen) <= 0) return NULL;
            v0 += strlen(vopen);
        } else {
            v0 = k1 + 1;
        }
        const char *v1 = memmem(v0, (size_t)(e - v0), vclose, strlen(vclose));
        if (!v1) {
            if (!ps->final) return NULL;
            put_param(ps, c, k0, k1, v0, e);
            p = e;
            continue;
        }
        put_param(ps, c, k0, k1, v0, v1);
        p = v1 + strlen(vclose);
    }
}

/* ---- Gemma 4: <|tool_call>call:NAME{key:<|"|>text<|"|>,n:1}<tool_call|> ---- */

/* Gemma's argument syntax to JSON: bare keys quoted, <|"|>...<|"|> strings escaped, the rest
 * (numbers, true, false, null, braces, brackets) as it is. */
static int gemma_args(pl_strbuf *b, const char *p, const char *e) {
    static const char Q[] = "<|\"|>";
    char stack[64];
    int depth = 0, want_key = 0;
    while (p < e) {
        if (want_key) {
            p = skip_ws(p, e);
            want_key = 0;
            if (p < e && *p != '}') {
                const char *w = memchr(p, ':', (size_t)(e - p));
                if (!w) return -1;
                const char *k = p, *kz = w;
                if ((size_t)(kz - k) >= 10 && !memcmp(k, Q, 5) && !memcmp(kz - 5, Q, 5)) k += 5, kz -= 5;
                json_t *s = json_stringn(k, (size_t)(kz - k));
                char *t = s ? json_dumps(s, JSON_ENCODE_ANY) : NULL;
                int rc = !t || pl_strbuf_printf(b, "%s:", t);
                free(t);
                json_decref(s);
                if (rc) return -1;
                p = w + 1;
            }
            continue;
        }
        if ((size_t)(e - p) >= 5 && !memcmp(p, Q, 5)) {
            const char *z = memmem(p + 5, (size_t)(e - p - 5), Q, 5);
            if (!z) return -1;
            json_t *s = json_stringn(p + 5, (size_t)(z - p - 5));
            char *t = s ? json_dumps(s, JSON_ENCODE_ANY) : NULL;
            int rc = !t || pl_strbuf_puts(b, t);
            free(t);
            json_decref(s);
            if (rc) return -1;
            p = z + 5;
            continue;
        }
        char c = *p++;
        if (c == '{' || c == '[') {
            if (depth == (int)sizeof stack) return -1;
            stack[depth++] = c;
            want_key = c == '{';
        } else if (c == '}' || c == ']') {
            if (!depth) return -1;
            depth--;
        } else if (c == ',') {
            want_key = depth && stack[depth - 1] == '{';
        }
        pl_strbuf_putc(b, c);
    }
    return b->failed || depth ? -1 : 0;
}

static const char *call_gemma(parser *ps, const char *p, int *bad) {
    const char *e = ps->e;
    int m = at(ps, p, "call:");
    if (m <= 0) {
        *bad = m == 0;
        return NULL;
    }
    const char *n0 = p + 5, *n1 = memchr(n0, '{', (size_t)(e - n0));
    if (!n1) return NULL;
    pl_parsed_call *c = new_call(ps, n0, (size_t)(n1 - n0));
    if (!c) return NULL;
    const char *z = memmem(n1, (size_t)(e - n1), "<tool_call|>", 12);
    if (!z) return NULL;
    if (gemma_args(&c->args, n1, z)) {
        pl_strbuf_clear(&c->args);
        put(ps, &c->args, "{}", 2);
    }
    c->done = 1;
    return z + 12;
}

/* ---- tool calls after a marker ---- */

/* A call section from p (just after its marker): the calls it holds, added to the parse. Returns
 * where the text goes on, or NULL while the section is open; *bad: no call after all. */
static const char *calls_section(parser *ps, int marker, const char *p, int *bad) {
    const char *e = ps->e;
    pl_tool_format f = ps->cfg->tools;
    *bad = 0;
    switch (f) {
    case PL_TOOLS_HERMES:
    case PL_TOOLS_QWEN3_CODER:
    case PL_TOOLS_GLM45: {
        const char *b = skip_ws(p, e), *end;
        if (f == PL_TOOLS_GLM45) end = call_from_xml(ps, b, 1, bad);
        else if (b < e && *b == '{') end = call_from_obj(ps, b, bad);
        else end = call_from_xml(ps, b, 0, bad);
        if (!end || *bad || f == PL_TOOLS_GLM45) return end;
        end = skip_ws(end, e);
        int m = at(ps, end, "</tool_call>");
        if (m < 0 || (end >= e && !ps->final)) return NULL;
        if (!m && ps->final && (size_t)(e - end) < 12 && !memcmp(end, "</tool_call>", (size_t)(e - end)))
            return e; /* cut short in its closing tag */
        return m > 0 ? end + 12 : end;
    }
    case PL_TOOLS_MISTRAL: {
        const char *b = skip_ws(p, e);
        if (b >= e) return NULL;
        if (*b == '[') { /* [TOOL_CALLS][{...}, ...] */
            for (b++;;) {
                int closed;
                if (!(b = skip_to_item(b, e, ']', &closed)) || closed) return b;
                const char *end = call_from_obj(ps, b, bad);
                if (!end) return NULL;
                b = end;
            }
        }
        /* [TOOL_CALLS]NAME[CALL_ID]id[ARGS]{...} (v11 and later) */
        static const char *const seps[] = {"[ARGS]", "[CALL_ID]"};
        int w;
        const char *s = find_tag(ps, b, seps, 2, &w);
        if (!s || w < 0) return NULL;
        const char *args = s + strlen(seps[w]);
        if (w == 1) {
            const char *a = memmem(args, (size_t)(e - args), "[ARGS]", 6);
            if (!a) return NULL;
            args = a + 6;
        }
        pl_parsed_call *c = new_call(ps, b, (size_t)(s - b));
        if (!c) return NULL;
        args = skip_ws(args, e);
        const char *end = skip_json(args, e, bad);
        if (*bad) return NULL;
        put(ps, &c->args, args, (size_t)((end ? end : e) - args));
        c->done = end != NULL;
        return end;
    }
    case PL_TOOLS_DEEPSEEK_V31:
    case PL_TOOLS_KIMI_K2: {
        int ds = f == PL_TOOLS_DEEPSEEK_V31;
        const char *cbeg = ds ? "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "begin\xef\xbd\x9c>"
                              : "<|tool_call_begin|>",
                   *sep = ds ? "<\xef\xbd\x9ctool\xe2\x96\x81sep\xef\xbd\x9c>" : "<|tool_call_argument_begin|>",
                   *cend = ds ? "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "end\xef\xbd\x9c>"
                              : "<|tool_call_end|>",
                   *send = ds ? "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "end\xef\xbd\x9c>"
                              : "<|tool_calls_section_end|>";
        for (;;) {
            p = skip_ws(p, e);
            int m = at(ps, p, send);
            if (m > 0) return p + strlen(send);
            if (m < 0 || p >= e) return ps->final ? e : NULL;
            if (at(ps, p, cbeg) <= 0) return ps->final ? e : NULL;
            const char *n0 = p + strlen(cbeg), *n1 = memmem(n0, (size_t)(e - n0), sep, strlen(sep));
            if (!n1) return NULL;
            const char *a0 = n1 + strlen(sep), *nn = n0, *nz = n1;
            if (!ds) { /* functions.NAME:0 */
                if ((size_t)(nz - nn) > 10 && !memcmp(nn, "functions.", 10)) nn += 10;
                const char *colon = nz;
                while (colon > nn && colon[-1] != ':') colon--;
                if (colon > nn) nz = colon - 1;
            }
            pl_parsed_call *c = new_call(ps, nn, (size_t)(nz - nn));
            if (!c) return NULL;
            const char *z = memmem(a0, (size_t)(e - a0), cend, strlen(cend));
            if (!z) { /* hold what could be the end tag's beginning */
                put(ps, &c->args, a0, (size_t)((ps->final ? e : tag_start_at_end(a0, e, cend)) - a0));
                c->done = ps->final;
                return ps->final ? e : NULL;
            }
            put(ps, &c->args, a0, (size_t)(z - a0));
            c->done = 1;
            p = z + strlen(cend);
        }
    }
    case PL_TOOLS_GEMMA4:
        return call_gemma(ps, p, bad);
    case PL_TOOLS_LLAMA3: {
        /* the whole answer is calls; it is only known to be when it is whole */
        if (!ps->final) return NULL;
        const char *b = skip_ws(p, e);
        (void)marker;
        int any = 0;
        while (b < e && *b == '{') {
            const char *end = call_from_obj(ps, b, bad);
            if (!end || *bad) {
                *bad = 1;
                return NULL;
            }
            any = 1;
            b = skip_ws(end, e);
            if (b < e && *b == ';') b = skip_ws(b + 1, e);
        }
        if (!any || b != e) *bad = 1;
        return *bad ? NULL : e;
    }
    default:
        *bad = 1;
        return NULL;
    }
}

static const char *const HERMES_MARKERS[] = {"<tool_call>"};
static const char *const MISTRAL_MARKERS[] = {"[TOOL_CALLS]"};
static const char *const DS_MARKERS[] = {"<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "begin\xef\xbd\x9c>"};
static const char *const KIMI_MARKERS[] = {"<|tool_calls_section_begin|>"};
static const char *const GEMMA_MARKERS[] = {"<|tool_call>"};

static const char *const *markers(pl_tool_format f, int *n) {
    *n = 1;
    switch (f) {
    case PL_TOOLS_HERMES:
    case PL_TOOLS_QWEN3_CODER:
    case PL_TOOLS_GLM45: return HERMES_MARKERS;
    case PL_TOOLS_MISTRAL: return MISTRAL_MARKERS;
    case PL_TOOLS_DEEPSEEK_V31: return DS_MARKERS;
    case PL_TOOLS_KIMI_K2: return KIMI_MARKERS;
    case PL_TOOLS_GEMMA4: return GEMMA_MARKERS;
    default: *n = 0; return NULL;
    }
}

/* Content from p to the end (or to `stop`, a tag ending this part of the answer): text, and the
 * tool calls after their markers. lstrip: the content follows a tag. */
static void content(parser *ps, const char *p, const char *stop, int lstrip) {
    const char *e = ps->e;
    parser sub = *ps;
    if (stop) sub.e = stop, sub.final = 1;
    pl_tool_format f = ps->cfg->tools;
    if (f == PL_TOOLS_LLAMA3) {
        const char *b = skip_ws(p, sub.e);
        int m = at(&sub, b, "<|python_tag|>");
        if (m > 0) b = skip_ws(b + 14, sub.e);
        if (m < 0 || b >= sub.e || *b == '{') {
            if (!sub.final) return; /* held whole */
            int bad;
            int n0 = ps->out->n_calls;
            const char *end = calls_section(&sub, 0, b, &bad);
            ps->fail |= sub.fail;
            if (end && !bad && ps->out->n_calls > n0) return;
            for (int i = n0; i < ps->out->n_calls; i++) {
                free(ps->out->calls[i].name);
                pl_strbuf_destroy(&ps->out->calls[i].args);
            }
            ps->out->n_calls = n0;
        }
        put_trimmed(ps, &ps->out->content, p, sub.e, lstrip, sub.final);
        return;
    }
    int nm;
    const char *const *tags = markers(f, &nm);
    while (p < sub.e) {
        int w;
        const char *t = nm ? find_tag(&sub, p, tags, nm, &w) : NULL;
        if (!t) {
            put_trimmed(ps, &ps->out->content, p, sub.e, lstrip, sub.final);
            return;
        }
        put_trimmed(ps, &ps->out->content, p, t, lstrip, 0);
        if (w < 0) return; /* a marker's beginning at the end */
        int bad, n0 = ps->out->n_calls;
        const char *end = calls_section(&sub, w, t + strlen(tags[w]), &bad);
        ps->fail |= sub.fail;
        if (bad) { /* no call after all: the marker is text */
            for (int i = n0; i < ps->out->n_calls; i++) {
                free(ps->out->calls[i].name);
                pl_strbuf_destroy(&ps->out->calls[i].args);
            }
            ps->out->n_calls = n0;
            put(ps, &ps->out->content, t, 1);
            p = t + 1;
            lstrip = 0;
            continue;
        }
        if (!end) return;
        p = end;
        lstrip = 1;
    }
    (void)e;
}

/* ---- reasoning ---- */

static void think_tags(pl_reasoning_format r, const char **open, const char **close) {
    switch (r) {
    case PL_REASON_MISTRAL: *open = "[THINK]", *close = "[/THINK]"; break;
    case PL_REASON_GEMMA4: *open = "<|channel>thought", *close = "<channel|>"; break;
    default: *open = "<think>", *close = "</think>"; break;
    }
}

int pl_parse_think_tags(pl_reasoning_format r, const char **open, const char **close) {
    if (r == PL_REASON_NONE || r == PL_REASON_GPT_OSS) return -1;
    think_tags(r, open, close);
    return 0;
}

/* gpt-oss (harmony): messages <|channel|>NAME[ to=functions.F][ <|constrain|>json]<|message|>
 * BODY ending in <|end|>, <|call|> or <|return|>, the next one after <|start|>assistant. analysis
 * is thinking, final the answer, a message to functions.F a call of F. */
static void harmony(parser *ps, const char *p) {
    const char *e = ps->e;
    static const char *const ends[] = {"<|end|>", "<|call|>", "<|return|>"};
    while (p < e) {
        p = skip_ws(p, e);
        if (at(ps, p, "<|start|>") > 0) p += 9;
        const char *m = memmem(p, (size_t)(e - p), "<|message|>", 11);
        if (!m) {
            if (ps->final) put_trimmed(ps, &ps->out->content, p, e, 1, 1);
            return;
        }
        /* the header: channel and recipient */
        const char *ch = memmem(p, (size_t)(m - p), "<|channel|>", 11), *to = memmem(p, (size_t)(m - p), "to=", 3);
        const char *cn = ch ? ch + 11 : m;
        int analysis = (size_t)(m - cn) >= 8 && !memcmp(cn, "analysis", 8);
        const char *b = m + 11;
        int w;
        const char *z = find_tag(ps, b, ends, 3, &w);
        const char *bz = z ? z : e;
        if (to) {
            const char *n0 = to + 3, *n1 = n0;
            while (n1 < m && !is_ws(*n1) && *n1 != '<') n1++;
            if ((size_t)(n1 - n0) > 10 && !memcmp(n0, "functions.", 10)) n0 += 10;
            pl_parsed_call *c = new_call(ps, n0, (size_t)(n1 - n0));
            if (!c) return;
            const char *a = skip_ws(b, bz), *az = bz;
            while (az > a && is_ws(az[-1])) az--;
            put(ps, &c->args, a, (size_t)(az - a));
            c->done = z && w >= 0;
        } else if (analysis) {
            put_trimmed(ps, &ps->out->reasoning, b, bz, 1, 0);
            if (z && w >= 0) ps->out->reasoning_done = 1;
        } else {
            put_trimmed(ps, &ps->out->content, b, bz, 1, z && w >= 0 ? 0 : ps->final);
        }
        if (!z || w < 0) return;
        p = z + strlen(ends[w]);
    }
}

int pl_parse_text(const pl_parse_cfg *cfg, const char *text, size_t len, int final,
                  pl_parsed *out) {
    memset(out, 0, sizeof *out);
    parser ps = {.cfg = cfg, .e = text + len, .final = final, .out = out};
    const char *p = text;
    if (cfg->reasoning == PL_REASON_GPT_OSS || cfg->tools == PL_TOOLS_HARMONY) {
        harmony(&ps, p);
        return ps.fail || out->reasoning.failed || out->content.failed ? -1 : 0;
    }
    int lstrip = 0;
    if (cfg->reasoning != PL_REASON_NONE) {
        const char *open, *close;
        think_tags(cfg->reasoning, &open, &close);
        const char *b = skip_ws(p, ps.e);
        int in = cfg->in_reasoning, m = in ? 0 : at(&ps, b, open);
        if (m < 0) return 0;                   /* the start of an opening tag: wait */
        if (m > 0) in = 1, p = b + strlen(open);
        if (in) {
            const char *z = memmem(p, (size_t)(ps.e - p), close, strlen(close)),
                       *hold = final ? ps.e : tag_start_at_end(p, ps.e, close);
            put_trimmed(&ps, &out->reasoning, p, z ? z : hold, 1, 0);
            if (!z) return ps.fail ? -1 : 0;
            out->reasoning_done = 1;
            p = z + strlen(close);
            lstrip = 1;
        }
    }
    content(&ps, p, NULL, lstrip);
    return ps.fail || out->reasoning.failed || out->content.failed ? -1 : 0;
}

/* ---- OpenAI's shapes ---- */

void pl_make_call_id(char *out, size_t cap) {
    static const char digits[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    static _Atomic unsigned long counter;
    unsigned char rnd[9];
    unsigned long c = ++counter;
    if (getrandom(rnd, sizeof rnd, GRND_NONBLOCK) != (ssize_t)sizeof rnd)
        for (size_t i = 0; i < sizeof rnd; i++) rnd[i] = (unsigned char)(c >> (i % 8 * 8)) ^ (unsigned char)(i * 37);
    size_t n = (size_t)snprintf(out, cap, "call_");
    for (size_t i = 0; i < sizeof rnd && n + 1 < cap; i++) out[n++] = digits[rnd[i] % 62];
    out[n] = '\0';
}

json_t *pl_parsed_calls_json(const pl_parsed *p) {
    if (!p->n_calls) return NULL;
    json_t *a = json_array();
    for (int i = 0; a && i < p->n_calls; i++) {
        char id[32];
        pl_make_call_id(id, sizeof id);
        json_t *c = json_pack("{s:s, s:s, s:{s:s, s:o}}", "id", id, "type", "function", "function",
                              "name", p->calls[i].name, "arguments",
                              pl_server_text_json(p->calls[i].args.p ? p->calls[i].args.p : "",
                                                  p->calls[i].args.len));
        if (!c || json_array_append_new(a, c)) {
            json_decref(a);
            return NULL;
        }
    }
    return a;
}

void pl_parse_sent_destroy(pl_parse_sent *s) {
    free(s->args);
    memset(s, 0, sizeof *s);
}

size_t pl_utf8_whole(const char *s, size_t n) {
    for (size_t back = 1; back <= 4 && back <= n; back++) {
        unsigned char b = (unsigned char)s[n - back];
        if ((b & 0xc0) == 0x80) continue;
        size_t len = b >= 0xf0 ? 4 : b >= 0xe0 ? 3 : b >= 0xc0 ? 2 : 1;
        return len > back ? n - back : n;
    }
    return n;
}

/* The new part of b after *sent, up to a character boundary; *sent moves past it. */
static json_t *grown(const pl_strbuf *b, size_t *sent) {
    size_t n = pl_utf8_whole(b->p, b->len);
    if (n <= *sent) return NULL;
    json_t *t = pl_server_text_json(b->p + *sent, n - *sent);
    *sent = n;
    return t;
}

int pl_parse_diff(const pl_parsed *p, pl_parse_sent *s, json_t *delta) {
    int any = 0;
    json_t *t;
    if ((t = grown(&p->reasoning, &s->reasoning))) {
        if (json_object_set_new(delta, "reasoning_content", t)) return -1;
        any = 1;
    }
    if ((t = grown(&p->content, &s->content))) {
        if (json_object_set_new(delta, "content", t)) return -1;
        any = 1;
    }
    json_t *calls = NULL;
    for (int i = 0; i < p->n_calls; i++) {
        const pl_parsed_call *c = &p->calls[i];
        json_t *o = NULL;
        if (i >= s->n_calls) {
            if (pl_array_reserve(&s->args, &s->cap, (size_t)i + 1, sizeof *s->args)) {
                json_decref(calls);
                return -1;
            }
            char id[32];
            pl_make_call_id(id, sizeof id);
            s->args[i] = 0;
            s->n_calls = i + 1;
            t = grown(&c->args, &s->args[i]);
            o = json_pack("{s:i, s:s, s:s, s:{s:s, s:o}}", "index", i, "id", id, "type", "function",
                          "function", "name", c->name, "arguments", t ? t : json_string(""));
            if (!o) {
                json_decref(calls);
                return -1;
            }
        } else if ((t = grown(&c->args, &s->args[i]))) {
            o = json_pack("{s:i, s:{s:o}}", "index", i, "function", "arguments", t);
            if (!o) {
                json_decref(calls);
                return -1;
            }
        }
        if (!o) continue;
        if (!calls && !(calls = json_array())) {
            json_decref(o);
            return -1;
        }
        if (json_array_append_new(calls, o)) {
            json_decref(calls);
            return -1;
        }
    }
    if (calls) {
        if (json_object_set_new(delta, "tool_calls", calls)) return -1;
        any = 1;
    }
    return any;
}

/* ---- the prompt's end ---- */

int pl_parse_prompt_opens_thinking(pl_reasoning_format r, const char *prompt, size_t len) {
    if (r == PL_REASON_NONE || r == PL_REASON_GPT_OSS) return 0;
    const char *open, *close;
    think_tags(r, &open, &close);
    /* the last opening tag in the prompt's tail, not closed after it */
    size_t ol = strlen(open), from = len > 64 ? len - 64 : 0;
    const char *last = NULL;
    for (const char *q = prompt + from; (q = memmem(q, (size_t)(prompt + len - q), open, ol)); q++) last = q;
    if (!last) return 0;
    return !memmem(last, (size_t)(prompt + len - last), close, strlen(close));
}

const char *pl_parse_opening(pl_reasoning_format r, int in_reasoning) {
    if (!in_reasoning) return NULL;
    switch (r) {
    case PL_REASON_MISTRAL: return "[/THINK]";
    case PL_REASON_GEMMA4: return "<channel|>";
    case PL_REASON_QWEN3:
    case PL_REASON_DEEPSEEK_R1: return "</think>\n\n";
    default: return NULL;
    }
}
