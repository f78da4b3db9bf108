/* tokenizer/pretokenize — see pretokenize.h. The regexes per pre-tokenizer are llama.cpp's
 * (llm_tokenizer_bpe in llama-vocab.cpp), which in turn are the Hugging Face tokenizers' split
 * patterns; where llama.cpp rewrote (?i:...) as explicit classes we do the same, so that the
 * matching is identical. Non-ASCII literals are written as \x{...} escapes.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/pretokenize.h"
#include "base/buf.h"

#include "tokenizer/tok_internal.h"

#include <pcre2.h>
#include <stdlib.h>
#include <string.h>

/* ---- the regexes ---- */

#define RX_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
#define RX_CONTRACTIONS "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
#define RX_LLAMA3                                                                                  \
    RX_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"    \
                    "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RX_QWEN2                                                                                   \
    RX_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"         \
                    "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
/* Qwen3.5: Qwen2's with combining marks (\p{M}) kept in the letter runs and out of the
 * punctuation runs, so that a base letter and its accents stay one pre-token. */
#define RX_QWEN35                                                                                  \
    RX_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}"                                 \
                    "| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
/* Upper-then-lower letter runs written with lookaheads, as llama.cpp adapted them. */
#define RX_UPPER_RUN "((?=[\\p{L}])([^a-z]))"
#define RX_LOWER_RUN "((?=[\\p{L}])([^A-Z]))"
#define RX_TEKKEN                                                                                  \
    "[^\\r\\n\\p{L}\\p{N}]?" RX_UPPER_RUN "*" RX_LOWER_RUN "+|[^\\r\\n\\p{L}\\p{N}]?" RX_UPPER_RUN \
    "+" RX_LOWER_RUN "*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RX_GPT4O                                                                                   \
    "[^\\r\\n\\p{L}\\p{N}]?" RX_UPPER_RUN "*" RX_LOWER_RUN "+" RX_CONTRACTIONS                     \
    "?|[^\\r\\n\\p{L}\\p{N}]?" RX_UPPER_RUN "+" RX_LOWER_RUN "*" RX_CONTRACTIONS                   \
    "?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
/* CJK ideographs, U+0800..U+4E00 and Hangul, as DeepSeek's tokenizer lists them. */
#define RX_DEEPSEEK_CJK "[\\x{4E00}-\\x{9FA5}\\x{0800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+"
/* DeepSeek LLM's cased-letter class (Unicode's cased letters, listed range by range). */
#define RX_DEEPSEEK_LETTERS                                                                        \
    "\\s?[A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}"            \
    "\\x{1C4}-\\x{293}\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37B}-\\x{37D}"         \
    "\\x{37F}\\x{386}\\x{388}-\\x{38A}\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}"                   \
    "\\x{3F7}-\\x{481}\\x{48A}-\\x{52F}\\x{531}-\\x{556}\\x{10A0}-\\x{10C5}\\x{13A0}-\\x{13F5}"    \
    "\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}\\x{1D00}-\\x{1D2B}"                 \
    "\\x{1D6B}-\\x{1D77}\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}\\x{1F18}-\\x{1F1D}"                 \
    "\\x{1F20}-\\x{1F45}\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}\\x{1F59}\\x{1F5B}\\x{1F5D}"         \
    "\\x{1F5F}-\\x{1F7D}\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}\\x{1FBE}\\x{1FC2}-\\x{1FC4}"        \
    "\\x{1FC6}-\\x{1FCC}\\x{1FD0}-\\x{1FD3}\\x{1FD6}-\\x{1FDB}\\x{1FE0}-\\x{1FEC}"                 \
    "\\x{1FF2}-\\x{1FF4}\\x{1FF6}-\\x{1FFC}\\x{2102}\\x{2107}\\x{210A}-\\x{2113}\\x{2115}"         \
    "\\x{2119}-\\x{211D}\\x{2124}\\x{2126}\\x{2128}\\x{212A}-\\x{212D}\\x{212F}-\\x{2134}"         \
    "\\x{2139}\\x{213C}-\\x{213F}\\x{2145}-\\x{2149}\\x{214E}\\x{2183}\\x{2184}"                   \
    "\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}\\x{2CEB}-\\x{2CEE}\\x{2CF2}\\x{2CF3}"                  \
    "\\x{A640}-\\x{A66D}\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}\\x{A771}-\\x{A787}"                 \
    "\\x{A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}\\x{FB00}-\\x{FB06}\\x{FB13}-\\x{FB17}"                 \
    "\\x{FF21}-\\x{FF3A}\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}\\x{104B0}-\\x{104D3}"             \
    "\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}\\x{10CC0}-\\x{10CF2}\\x{118A0}-\\x{118DF}"         \
    "\\x{1E900}-\\x{1E943}]+"
#define RX_DEEPSEEK_PUNCT                                                                          \
    "\\s?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3000}-\\x{3002}]+"

enum { MAX_RX = 6 };

typedef struct {
    const char *rx[MAX_RX]; /* NULL-terminated */
} rx_set;

static const rx_set SET_DEFAULT = {{"[\\p{P}\\$\\+<=>\\^~\\|]+", RX_GPT2, "\\p{N}+", "[0-9][0-9][0-9]"}};
static const rx_set SET_GPT2 = {{RX_GPT2}};
static const rx_set SET_LLAMA3 = {{RX_LLAMA3}};
static const rx_set SET_QWEN2 = {{RX_QWEN2}};
static const rx_set SET_QWEN35 = {{RX_QWEN35}};
/* Gemma 4 splits only between newline runs and the rest: the merges see whole lines. */
static const rx_set SET_GEMMA4 = {{"[^\\n]+|[\\n]+"}};
static const rx_set SET_FALCON = {{"[\\p{P}\\$\\+<=>\\^~\\|`]+", RX_GPT2, "[0-9][0-9][0-9]"}};
static const rx_set SET_STARCODER = {{"\\p{N}", RX_GPT2}};
static const rx_set SET_DEEPSEEK_LLM = {{"[\r\n]", RX_DEEPSEEK_LETTERS, RX_DEEPSEEK_PUNCT, "\\s+$",
                                         RX_DEEPSEEK_CJK, "\\p{N}+"}};
static const rx_set SET_DEEPSEEK_CODER = {
    {"[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", RX_DEEPSEEK_CJK, "\\p{N}"}};
static const rx_set SET_TEKKEN = {{RX_TEKKEN}};
static const rx_set SET_GPT4O = {{RX_GPT4O}};

typedef struct {
    const char *name;
    const rx_set *set;
    pl_pretok_flags flags; /* clean_spaces, ignore_merges, add_bos, no_bos, spm_style,
                              newline_runs, force_bos */
} pre_def;

/* The names llama.cpp accepts for the pre-tokenizers implemented here, with its flags. */
static const pre_def PRE_DEFS[] = {
    {"default", &SET_DEFAULT, {1, 0, 0, 0, 0, 0, 0}},
    {"llama3", &SET_LLAMA3, {1, 1, 1, 0, 0, 0, 0}},
    {"llama-v3", &SET_LLAMA3, {1, 1, 1, 0, 0, 0, 0}},
    {"llama-bpe", &SET_LLAMA3, {1, 1, 1, 0, 0, 0, 0}},
    {"falcon3", &SET_LLAMA3, {1, 1, 1, 0, 0, 0, 0}},
    {"falcon-h1", &SET_LLAMA3, {1, 1, 1, 0, 0, 0, 0}},
    {"pixtral", &SET_LLAMA3, {1, 1, 1, 0, 0, 0, 0}},
    {"midm-2.0", &SET_LLAMA3, {1, 1, 1, 0, 0, 0, 0}},
    {"lfm2", &SET_LLAMA3, {1, 1, 1, 0, 0, 0, 0}},
    {"dbrx", &SET_LLAMA3, {1, 0, 0, 0, 0, 0, 0}},
    {"smaug-bpe", &SET_LLAMA3, {1, 0, 0, 0, 0, 0, 0}},
    {"glm4", &SET_LLAMA3, {1, 0, 0, 1, 0, 0, 0}},
    {"chatglm-bpe", &SET_LLAMA3, {1, 0, 0, 1, 0, 0, 0}},
    {"deepseek-llm", &SET_DEEPSEEK_LLM, {0, 0, 0, 0, 0, 0, 0}},
    {"deepseek-coder", &SET_DEEPSEEK_CODER, {0, 0, 0, 0, 0, 0, 0}},
    {"falcon", &SET_FALCON, {1, 0, 0, 0, 0, 0, 0}},
    {"gpt-2", &SET_GPT2, {1, 0, 0, 0, 0, 0, 0}},
    {"phi-2", &SET_GPT2, {1, 0, 0, 0, 0, 0, 0}},
    {"mpt", &SET_GPT2, {1, 0, 0, 0, 0, 0, 0}},
    {"olmo", &SET_GPT2, {1, 0, 0, 0, 0, 0, 0}},
    {"jais", &SET_GPT2, {1, 0, 0, 0, 0, 0, 0}},
    {"jina-es", &SET_GPT2, {1, 0, 0, 0, 0, 0, 0}},
    {"jina-de", &SET_GPT2, {1, 0, 0, 0, 0, 0, 0}},
    {"jina-v2-es", &SET_GPT2, {1, 0, 0, 0, 0, 0, 0}},
    {"jina-v2-de", &SET_GPT2, {1, 0, 0, 0, 0, 0, 0}},
    {"gigachat", &SET_GPT2, {1, 0, 0, 0, 0, 0, 0}},
    {"a.x-4.0", &SET_GPT2, {1, 0, 0, 0, 0, 0, 0}},
    {"mellum", &SET_GPT2, {1, 0, 0, 0, 0, 0, 0}},
    {"modern-bert", &SET_GPT2, {1, 0, 0, 0, 0, 0, 0}},
    {"exaone4", &SET_GPT2, {1, 0, 0, 0, 0, 0, 0}},
    {"trillion", &SET_GPT2, {0, 0, 0, 0, 0, 0, 0}},
    {"granite-docling", &SET_GPT2, {0, 0, 0, 0, 0, 0, 0}},
    {"starcoder", &SET_STARCODER, {1, 0, 0, 0, 0, 0, 0}},
    {"refact", &SET_STARCODER, {1, 0, 0, 0, 0, 0, 0}},
    {"codeshell", &SET_STARCODER, {1, 0, 0, 0, 0, 0, 0}},
    {"exaone", &SET_STARCODER, {1, 0, 0, 0, 0, 0, 0}},
    {"minerva-7b", &SET_STARCODER, {1, 0, 0, 0, 0, 0, 0}},
    {"mellum2", &SET_STARCODER, {1, 0, 0, 0, 0, 0, 0}},
    {"command-r", &SET_STARCODER, {0, 0, 0, 0, 0, 0, 0}},
    {"smollm", &SET_STARCODER, {0, 0, 0, 0, 0, 0, 0}},
    {"qwen2", &SET_QWEN2, {0, 0, 0, 0, 0, 0, 0}},
    {"deepseek-r1-qwen", &SET_QWEN2, {0, 0, 0, 0, 0, 0, 0}},
    {"kormo", &SET_QWEN2, {0, 0, 0, 0, 0, 0, 0}},
    {"f2llmv2", &SET_QWEN2, {0, 0, 0, 0, 0, 0, 0}},
    {"qwen35", &SET_QWEN35, {0, 0, 0, 0, 0, 0, 0}},
    {"megrez", &SET_QWEN2, {1, 0, 0, 0, 0, 0, 0}},
    {"stablelm2", &SET_QWEN2, {1, 0, 0, 0, 0, 0, 0}},
    {"tekken", &SET_TEKKEN, {0, 1, 1, 0, 0, 0, 0}},
    {"gpt-4o", &SET_GPT4O, {0, 0, 0, 0, 0, 0, 0}},
    {"gemma4", &SET_GEMMA4, {1, 0, 0, 0, 1, 1, 1}},
    {"granite-embed-multi-311m", &SET_GEMMA4, {1, 0, 0, 0, 1, 1, 1}},
    {"llama4", &SET_GPT4O, {0, 0, 0, 0, 0, 0, 0}},
};

/* ---- compiled form ---- */

struct pl_pretok {
    int n_rx;
    pcre2_code *code[MAX_RX]; /* compiled regexes, JIT-compiled when the library supports it */
    int jit[MAX_RX];          /* 1 if code[i] has JIT code */
};

void pl_pretok_destroy(pl_pretok *p) {
    if (!p) return;
    for (int i = 0; i < p->n_rx; i++) pcre2_code_free(p->code[i]);
    free(p);
}

pl_status pl_pretok_create(const char *name, pl_pretok **out, pl_pretok_flags *flags) {
    *out = NULL;
    const char *key = (name && name[0]) ? name : "default";
    const pre_def *def = NULL;
    for (size_t i = 0; i < sizeof PRE_DEFS / sizeof PRE_DEFS[0]; i++)
        if (strcmp(PRE_DEFS[i].name, key) == 0) def = &PRE_DEFS[i];
    if (!def)
        return pl_fail(PL_ERR_UNSUPPORTED, "unknown pre-tokenizer type (tokenizer.ggml.pre): '%s'", key);

    pl_pretok *p = calloc(1, sizeof *p);
    if (!p) return pl_fail(PL_ERR_NOMEM, "pre-tokenizer '%s': out of memory", key);
    uint32_t have_jit = 0;
    pcre2_config(PCRE2_CONFIG_JIT, &have_jit);
    for (int i = 0; i < MAX_RX && def->set->rx[i]; i++) {
        int err = 0;
        PCRE2_SIZE erroff = 0;
        pcre2_code *code = pcre2_compile((PCRE2_SPTR)def->set->rx[i], PCRE2_ZERO_TERMINATED,
                                         PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY, &err,
                                         &erroff, NULL);
        if (!code) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(err, msg, sizeof msg);
            pl_pretok_destroy(p);
            return pl_fail(PL_ERR_INTERNAL, "pre-tokenizer '%s': regex %d does not compile at %zu: %s",
                           key, i, (size_t)erroff, (const char *)msg);
        }
        p->code[p->n_rx] = code;
        p->jit[p->n_rx] = have_jit && pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
        p->n_rx++;
    }
    if (flags) *flags = def->flags;
    *out = p;
    return PL_OK;
}

/* ---- splitting ---- */

typedef struct {
    pl_pretok_span *v;
    size_t n, cap;
} span_vec;

static int span_push(span_vec *s, size_t off, size_t len) {
    if (len == 0) return 1;
    if (pl_array_reserve(&s->v, &s->cap, s->n + 1, sizeof *s->v)) return 0;
    s->v[s->n++] = (pl_pretok_span){off, len};
    return 1;
}

/* First match of code in subject[start, len): 1 and [*ms, *me) if found, 0 if none, -1 on error. */
static int find_match(const pl_pretok *p, int i, const char *subject, size_t len, size_t start,
                      pcre2_match_data *md, size_t *ms, size_t *me) {
    int rc = -1;
    if (p->jit[i])
        rc = pcre2_jit_match(p->code[i], (PCRE2_SPTR)subject, len, start, 0, md, NULL);
    /* No JIT, or its stack ran out on a pathological input: the interpreter uses the heap. */
    if (!p->jit[i] || rc == PCRE2_ERROR_JIT_STACKLIMIT)
        rc = pcre2_match(p->code[i], (PCRE2_SPTR)subject, len, start,
                         PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, NULL);
    if (rc == PCRE2_ERROR_NOMATCH) return 0;
    if (rc < 0) return -1;
    const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
    *ms = ov[0];
    *me = ov[1];
    return 1;
}

/* Split one fragment [off, off+len) of text with regex i, appending matches and gaps. */
static pl_status split_fragment(const pl_pretok *p, int i, const char *text, size_t off,
                                size_t len, pcre2_match_data *md, span_vec *out) {
    const char *subject = text + off; /* the regex sees only this fragment */
    size_t pos = 0, gap_start = 0;
    while (pos < len) {
        size_t ms, me;
        int found = find_match(p, i, subject, len, pos, md, &ms, &me);
        if (found < 0) return pl_fail(PL_ERR_INTERNAL, "pre-tokenizer: regex %d failed to match", i);
        if (!found) break;
        if (me == ms) { /* an empty match: no span, move on by one character */
            size_t n = pl_tok_utf8_len((uint8_t)subject[ms]);
            pos = ms + (n < len - ms ? n : len - ms);
            continue;
        }
        if (!span_push(out, off + gap_start, ms - gap_start) || !span_push(out, off + ms, me - ms))
            return pl_fail(PL_ERR_NOMEM, "pre-tokenizer: out of memory");
        pos = gap_start = me;
    }
    if (!span_push(out, off + gap_start, len - gap_start))
        return pl_fail(PL_ERR_NOMEM, "pre-tokenizer: out of memory");
    return PL_OK;
}

pl_status pl_pretok_split(const pl_pretok *p, const char *text, size_t len, pl_pretok_span **spans,
                          size_t *n) {
    *spans = NULL;
    *n = 0;
    if (len == 0) return PL_OK;
    span_vec cur = {0}, next = {0};
    pcre2_match_data *md = pcre2_match_data_create(1, NULL);
    pl_status st = PL_OK;
    if (!md || !span_push(&cur, 0, len)) {
        st = pl_fail(PL_ERR_NOMEM, "pre-tokenizer: out of memory");
        goto done;
    }
    for (int i = 0; i < p->n_rx; i++) {
        next.n = 0;
        for (size_t f = 0; f < cur.n && st == PL_OK; f++)
            st = split_fragment(p, i, text, cur.v[f].off, cur.v[f].len, md, &next);
        if (st != PL_OK) goto done;
        span_vec tmp = cur;
        cur = next;
        next = tmp;
    }
    *spans = cur.v;
    *n = cur.n;
    cur.v = NULL;
done:
    free(cur.v);
    free(next.v);
    pcre2_match_data_free(md);
    return st;
}
