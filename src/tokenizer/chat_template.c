/* tokenizer/chat_template — recognising chat template families and formatting messages: see
 * chat_template.h for the formats, the detection rules, the fallback and the BOS decision.
 *
 * Each family is one small static formatter that appends to a growing string; the table below
 * ties a family to its name and its BOS rule.
 */
#include "tokenizer/chat_template.h"
#include "base/buf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *name;  /* the --chat-template name */
    int bos_at_start;  /* the official template starts with bos_token */
} family_info;

static const family_info families[PL_CHAT_COUNT] = {
    [PL_CHAT_UNKNOWN] = {"unknown", 0},
    [PL_CHAT_CHATML] = {"chatml", 0},
    [PL_CHAT_LLAMA2] = {"llama2", 1},
    [PL_CHAT_LLAMA2_NOSYS] = {"llama2-nosys", 1},
    [PL_CHAT_LLAMA3] = {"llama3", 1},
    [PL_CHAT_MISTRAL_V1] = {"mistral-v1", 1},
    [PL_CHAT_MISTRAL_V3] = {"mistral-v3", 1},
    [PL_CHAT_MISTRAL_V3_TEKKEN] = {"mistral-v3-tekken", 1},
    [PL_CHAT_MISTRAL_V7] = {"mistral-v7", 1},
    [PL_CHAT_MISTRAL_V7_TEKKEN] = {"mistral-v7-tekken", 1},
    [PL_CHAT_ZEPHYR] = {"zephyr", 0},
    [PL_CHAT_PHI3] = {"phi3", 0},
    [PL_CHAT_GEMMA] = {"gemma", 1},
};

/* ---- detection ---- */

typedef struct {
    const char *p; /* the template, [n] bytes, not NUL-terminated */
    size_t n;
} text;

static int has(text t, const char *needle) {
    return memmem(t.p, t.n, needle, strlen(needle)) != NULL;
}

static int starts_with(text t, const char *prefix) {
    size_t k = strlen(prefix);
    return t.n >= k && memcmp(t.p, prefix, k) == 0;
}

static pl_chat_format classify_inst(text t) {
    if (has(t, "[SYSTEM_PROMPT]")) return PL_CHAT_MISTRAL_V7;
    if (has(t, "' [INST] ' + system_message") || has(t, "[AVAILABLE_TOOLS]")) {
        if (has(t, " [INST]")) return PL_CHAT_MISTRAL_V1;
        if (has(t, "\"[INST]\"")) return PL_CHAT_MISTRAL_V3_TEKKEN;
        return PL_CHAT_MISTRAL_V3;
    }
    return has(t, "<<SYS>>") ? PL_CHAT_LLAMA2 : PL_CHAT_LLAMA2_NOSYS;
}

pl_chat_format pl_chat_classify(const char *tmpl, size_t len) {
    if (!tmpl || len == 0) return PL_CHAT_UNKNOWN;
    text t = {tmpl, len};
    for (int f = PL_CHAT_UNKNOWN + 1; f < PL_CHAT_COUNT; f++)
        if (strlen(families[f].name) == len && !memcmp(families[f].name, tmpl, len))
            return (pl_chat_format)f;
    if (has(t, "<|im_start|>"))
        return has(t, "<|im_sep|>") || has(t, "<end_of_utterance>") ? PL_CHAT_UNKNOWN
                                                                      : PL_CHAT_CHATML;
    if (starts_with(t, "mistral") || has(t, "[INST]")) return classify_inst(t);
    if (has(t, "<|assistant|>") && has(t, "<|end|>")) return PL_CHAT_PHI3;
    if (has(t, "[gMASK]")) return PL_CHAT_UNKNOWN;
    if (has(t, "<|user|>") && (has(t, "eos_token") || has(t, "<|endoftext|>")))
        return PL_CHAT_ZEPHYR;
    if (has(t, "<start_of_turn>")) return PL_CHAT_GEMMA;
    if (has(t, "<|start_header_id|>") && has(t, "<|end_header_id|>")) return PL_CHAT_LLAMA3;
    return PL_CHAT_UNKNOWN;
}

pl_chat_format pl_chat_detect(const char *tmpl, size_t len) {
    pl_chat_format f = pl_chat_classify(tmpl, len);
    return f == PL_CHAT_UNKNOWN ? PL_CHAT_FALLBACK : f;
}

pl_status pl_chat_format_by_name(const char *name, pl_chat_format *out) {
    for (int f = PL_CHAT_UNKNOWN + 1; f < PL_CHAT_COUNT; f++)
        if (name && !strcmp(name, families[f].name)) {
            *out = (pl_chat_format)f;
            return PL_OK;
        }
    char list[256];
    size_t o = 0;
    for (int f = PL_CHAT_UNKNOWN + 1; f < PL_CHAT_COUNT && o < sizeof list; f++)
        o += (size_t)snprintf(list + o, sizeof list - o, "%s%s", o ? ", " : "", families[f].name);
    return pl_fail(PL_ERR_INVALID_ARG, "unknown chat template '%s' (expected one of: %s)",
                   name ? name : "(null)", list);
}

const char *pl_chat_format_name(pl_chat_format f) {
    return (unsigned)f < PL_CHAT_COUNT ? families[f].name : "unknown";
}

int pl_chat_format_adds_bos(pl_chat_format f) {
    return (unsigned)f < PL_CHAT_COUNT && families[f].bos_at_start;
}

/* ---- the output string (base/buf.h: a failed append is remembered and checked at the end) ---- */

typedef pl_strbuf sbuf;

static void add_n(sbuf *b, const char *s, size_t k) { pl_strbuf_append(b, s, k); }
static void add(sbuf *b, const char *s) { pl_strbuf_puts(b, s); }

static int is_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

/* Appends s without leading and trailing ASCII whitespace (Python's str.strip / Jinja's trim). */
static void add_trimmed(sbuf *b, const char *s) {
    size_t k = strlen(s);
    while (k && is_space(*s)) s++, k--;
    while (k && is_space(s[k - 1])) k--;
    add_n(b, s, k);
}

/* ---- formatters: roles are already checked to be system, user or assistant ---- */

typedef enum { ROLE_SYSTEM, ROLE_USER, ROLE_ASSISTANT } role;

typedef struct {
    const pl_chat_message *msgs; /* [n] */
    const role *roles;           /* [n], parsed from msgs[i].role */
    size_t n;
    int gen;                     /* add_generation_prompt */
    const char *bos;             /* "" when none */
    const char *eos;
} chat;

static void fmt_chatml(sbuf *b, const chat *c) {
    for (size_t i = 0; i < c->n; i++) {
        add(b, "<|im_start|>");
        add(b, c->msgs[i].role);
        add(b, "\n");
        add(b, c->msgs[i].content);
        add(b, "<|im_end|>\n");
    }
    if (c->gen) add(b, "<|im_start|>assistant\n");
}

/* Meta's Llama 2 chat template: BOS before every [INST], stripped contents, " ANSWER EOS". */
static void fmt_llama2(sbuf *b, const chat *c) {
    int in_turn = 0;
    for (size_t i = 0; i < c->n; i++) {
        const char *s = c->msgs[i].content;
        if (c->roles[i] != ROLE_ASSISTANT && !in_turn) {
            add(b, c->bos);
            add(b, "[INST] ");
            in_turn = 1;
        }
        if (c->roles[i] == ROLE_SYSTEM) {
            add(b, "<<SYS>>\n");
            add_trimmed(b, s);
            add(b, "\n<</SYS>>\n\n");
        } else if (c->roles[i] == ROLE_USER) {
            add_trimmed(b, s);
            add(b, " [/INST]");
        } else {
            add(b, " ");
            add_trimmed(b, s);
            add(b, " ");
            add(b, c->eos);
            in_turn = 0;
        }
    }
}

/* [INST] without <<SYS>>: BOS once, "[INST] " opens each turn, the system text is a line. */
static void fmt_llama2_nosys(sbuf *b, const chat *c) {
    add(b, c->bos);
    int in_turn = 0;
    for (size_t i = 0; i < c->n; i++) {
        if (!in_turn) {
            add(b, "[INST] ");
            in_turn = 1;
        }
        add(b, c->msgs[i].content);
        if (c->roles[i] == ROLE_SYSTEM) add(b, "\n");
        else if (c->roles[i] == ROLE_USER) add(b, " [/INST]");
        else {
            add(b, c->eos);
            in_turn = 0;
        }
    }
}

static void fmt_llama3(sbuf *b, const chat *c) {
    add(b, c->bos);
    for (size_t i = 0; i < c->n; i++) {
        add(b, "<|start_header_id|>");
        add(b, c->msgs[i].role);
        add(b, "<|end_header_id|>\n\n");
        add_trimmed(b, c->msgs[i].content);
        add(b, "<|eot_id|>");
    }
    if (c->gen) add(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

/* Mistral v1, v3 and v3-tekken differ only in the spaces around [INST] / [/INST] and whether
 * answers are trimmed. */
static void fmt_mistral_v1_v3(sbuf *b, const chat *c, pl_chat_format f) {
    const char *lead = f == PL_CHAT_MISTRAL_V1 ? " " : "";
    const char *trail = f == PL_CHAT_MISTRAL_V3_TEKKEN ? "" : " ";
    int trim_answers = f == PL_CHAT_MISTRAL_V3;
    add(b, c->bos);
    int in_turn = 0;
    for (size_t i = 0; i < c->n; i++) {
        const char *s = c->msgs[i].content;
        if (!in_turn) {
            add(b, lead);
            add(b, "[INST]");
            add(b, trail);
            in_turn = 1;
        }
        if (c->roles[i] == ROLE_SYSTEM) {
            add(b, s);
            add(b, "\n\n");
        } else if (c->roles[i] == ROLE_USER) {
            add(b, s);
            add(b, lead);
            add(b, "[/INST]");
        } else {
            add(b, trail);
            if (trim_answers) add_trimmed(b, s);
            else add(b, s);
            add(b, c->eos);
            in_turn = 0;
        }
    }
}

static void fmt_mistral_v7(sbuf *b, const chat *c, pl_chat_format f) {
    const char *sp = f == PL_CHAT_MISTRAL_V7 ? " " : "";
    add(b, c->bos);
    for (size_t i = 0; i < c->n; i++) {
        const char *s = c->msgs[i].content;
        if (c->roles[i] == ROLE_SYSTEM) {
            add(b, "[SYSTEM_PROMPT]");
            add(b, sp);
            add(b, s);
            add(b, "[/SYSTEM_PROMPT]");
        } else if (c->roles[i] == ROLE_USER) {
            add(b, "[INST]");
            add(b, sp);
            add(b, s);
            add(b, "[/INST]");
        } else {
            add(b, sp);
            add(b, s);
            add(b, c->eos);
        }
    }
}

/* Zephyr (<|ROLE|>\nCONTENT EOS \n) and Phi-3 (<|ROLE|>\nCONTENT<|end|>\n) share a shape. */
static void fmt_role_tags(sbuf *b, const chat *c, const char *end) {
    for (size_t i = 0; i < c->n; i++) {
        add(b, "<|");
        add(b, c->msgs[i].role);
        add(b, "|>\n");
        add(b, c->msgs[i].content);
        add(b, end);
        add(b, "\n");
    }
    if (c->gen) add(b, "<|assistant|>\n");
}

static void gemma_turn(sbuf *b, const char *who, sbuf *sys, const char *content) {
    add(b, "<start_of_turn>");
    add(b, who);
    add(b, "\n");
    if (sys->len) {
        add_n(b, sys->p, sys->len);
        if (content) add(b, "\n\n");
        pl_strbuf_clear(sys);
    }
    if (content) add_trimmed(b, content);
    add(b, "<end_of_turn>\n");
}

/* Gemma: no system role; system text goes in front of the next user turn. */
static void fmt_gemma(sbuf *b, const chat *c) {
    sbuf sys = {0};
    add(b, c->bos);
    for (size_t i = 0; i < c->n; i++) {
        const char *s = c->msgs[i].content;
        if (c->roles[i] == ROLE_SYSTEM) {
            if (sys.len) add(&sys, "\n\n");
            add_trimmed(&sys, s);
        } else if (c->roles[i] == ROLE_USER) {
            gemma_turn(b, "user", &sys, s);
        } else {
            add(b, "<start_of_turn>model\n");
            add_trimmed(b, s);
            add(b, "<end_of_turn>\n");
        }
    }
    if (sys.len) gemma_turn(b, "user", &sys, NULL); /* a trailing system message */
    if (sys.failed) b->failed = 1;
    free(sys.p);
    if (c->gen) add(b, "<start_of_turn>model\n");
}

pl_status pl_chat_apply(pl_chat_format f, const pl_chat_message *msgs, size_t n,
                        int add_generation_prompt, const char *bos_text, const char *eos_text,
                        char **out) {
    *out = NULL;
    if ((unsigned)f >= PL_CHAT_COUNT)
        return pl_fail(PL_ERR_INVALID_ARG, "chat template: invalid format id %d", (int)f);
    if (f == PL_CHAT_UNKNOWN) f = PL_CHAT_FALLBACK;
    if (n == 0 || !msgs) return pl_fail(PL_ERR_INVALID_ARG, "chat template: no messages");
    role *roles = malloc(n * sizeof *roles);
    if (!roles) return pl_fail(PL_ERR_NOMEM, "chat template: out of memory for %zu messages", n);
    for (size_t i = 0; i < n; i++) {
        const char *r = msgs[i].role;
        if (!r || !msgs[i].content) {
            free(roles);
            return pl_fail(PL_ERR_INVALID_ARG, "chat template: message %zu has no %s", i,
                           r ? "content" : "role");
        }
        if (!strcmp(r, "system")) roles[i] = ROLE_SYSTEM;
        else if (!strcmp(r, "user")) roles[i] = ROLE_USER;
        else if (!strcmp(r, "assistant")) roles[i] = ROLE_ASSISTANT;
        else {
            free(roles);
            return pl_fail(PL_ERR_INVALID_ARG,
                           "chat template: message %zu has role '%.64s' (expected system, user "
                           "or assistant)", i, r);
        }
    }
    chat c = {msgs, roles, n, add_generation_prompt != 0, bos_text ? bos_text : "",
              eos_text ? eos_text : "</s>"};
    sbuf b = {0};
    add(&b, ""); /* an empty result is still a string */
    switch (f) {
    case PL_CHAT_CHATML: fmt_chatml(&b, &c); break;
    case PL_CHAT_LLAMA2: fmt_llama2(&b, &c); break;
    case PL_CHAT_LLAMA2_NOSYS: fmt_llama2_nosys(&b, &c); break;
    case PL_CHAT_LLAMA3: fmt_llama3(&b, &c); break;
    case PL_CHAT_MISTRAL_V1:
    case PL_CHAT_MISTRAL_V3:
    case PL_CHAT_MISTRAL_V3_TEKKEN: fmt_mistral_v1_v3(&b, &c, f); break;
    case PL_CHAT_MISTRAL_V7:
    case PL_CHAT_MISTRAL_V7_TEKKEN: fmt_mistral_v7(&b, &c, f); break;
    case PL_CHAT_ZEPHYR: fmt_role_tags(&b, &c, c.eos); break;
    case PL_CHAT_PHI3: fmt_role_tags(&b, &c, "<|end|>"); break;
    case PL_CHAT_GEMMA: fmt_gemma(&b, &c); break;
    case PL_CHAT_UNKNOWN:
    case PL_CHAT_COUNT: PL_ASSERT(!"unreachable"); break;
    }
    free(roles);
    *out = pl_strbuf_take(&b);
    if (!*out) return pl_fail(PL_ERR_NOMEM, "chat template: out of memory formatting %zu messages", n);
    return PL_OK;
}
