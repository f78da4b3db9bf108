/* tokenizer/vocab — loading a vocabulary from GGUF metadata the way llama.cpp's
 * llama_vocab::impl::load does, and the read-only accessors of the public contract.
 *
 * Keys read: tokenizer.ggml.model ("llama" = SentencePiece, "gpt2" = byte-level BPE, "gemma4" =
 * BPE in SentencePiece style, "bert" = WordPiece),
 * tokenizer.ggml.pre, .tokens, .scores, .token_type, .merges, the *_token_id keys, add_bos_token,
 * add_eos_token, add_space_prefix, and general.name / general.architecture for llama.cpp's
 * per-model token attribute fix-ups.
 *
 * Where llama.cpp walks its unordered token map ("first token found" for the EOT / EOM / FIM
 * auto-detection), this walks ids in increasing order; the attributes and the end-of-generation
 * set come out the same, only which of several candidates becomes "the" EOT id can differ.
 */
#include "tokenizer/tok_internal.h"
#include "base/buf.h"

#include "base/log.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FW_BAR "\xEF\xBD\x9C"  /* U+FF5C FULLWIDTH VERTICAL LINE */
#define SPM_SPACE "\xE2\x96\x81" /* U+2581 */

/* Texts llama.cpp recognises when the GGUF does not name the token (NULL-terminated lists). */
static const char *const EOT_TEXTS[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>",
                                        "<|endoftext|>", "<|end_of_text|>", "<EOT>", "_<EOT>",
                                        "[EOT]", "<" FW_BAR "end" SPM_SPACE "of" SPM_SPACE
                                        "sentence" FW_BAR ">", "<end_of_utterance>", NULL};
static const char *const EOM_TEXTS[] = {"<|eom_id|>", NULL};
static const char *const FIM_PRE_TEXTS[] = {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>",
                                            "<" FW_BAR "fim" SPM_SPACE "begin" FW_BAR ">", "<PRE>",
                                            SPM_SPACE "<PRE>", "<|code_prefix|>", "<|prefix|>", NULL};
static const char *const FIM_SUF_TEXTS[] = {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>",
                                            "<" FW_BAR "fim" SPM_SPACE "hole" FW_BAR ">", "<SUF>",
                                            SPM_SPACE "<SUF>", "<|code_suffix|>", "<|suffix|>", NULL};
static const char *const FIM_MID_TEXTS[] = {"<|fim_middle|>", "<fim-middle>", "<fim_middle>",
                                            "<" FW_BAR "fim" SPM_SPACE "end" FW_BAR ">", "<MID>",
                                            SPM_SPACE "<MID>", "<|code_middle|>", "<|middle|>", NULL};
static const char *const FIM_PAD_TEXTS[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>",
                                            "[PAD]", NULL};
static const char *const FIM_REP_TEXTS[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>",
                                            "<REPO>", "<reponame>", NULL};
static const char *const FIM_SEP_TEXTS[] = {"<|file_sep|>", NULL};
static const char *const EOG_TEXTS[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<" FW_BAR "end" SPM_SPACE "of" SPM_SPACE "sentence" FW_BAR ">", "[e~[", NULL};

static int in_list(const char *s, const char *const *list) {
    for (; *list; list++)
        if (strcmp(s, *list) == 0) return 1;
    return 0;
}

static int32_t find_text(const pl_tokenizer *t, const char *s) {
    return pl_tok_map_get(&t->tok_map, s, strlen(s));
}

void pl_tokenizer_destroy(pl_tokenizer *t) {
    if (!t) return;
    PL_FREE_ALL(t->pre_name, t->text_arena, t->text_off, t->text_len, t->score, t->attr, t->eog,
                t->piece_arena, t->piece_off, t->piece_len);
    pl_tok_map_destroy(&t->tok_map);
    pl_tok_map_destroy(&t->merge_map);
    free(t->merge_arena);
    free(t->special);
    pl_pretok_destroy(t->pretok);
    free(t);
}

/* An optional bool key: *v keeps its value when the key is absent. */
static pl_status opt_bool(const pl_gguf *g, const char *key, int *v) {
    if (pl_gguf_find_key(g, key) < 0) return PL_OK;
    return pl_gguf_get_bool(g, key, v);
}

/* An optional token id key, as llama.cpp: an id outside the vocabulary is ignored (warning). */
static pl_status opt_id(const pl_gguf *g, const char *key, int32_t n_vocab, int32_t *id) {
    if (*id >= n_vocab) *id = -1; /* a default that does not fit this vocabulary */
    if (pl_gguf_find_key(g, key) < 0) return PL_OK;
    int64_t v;
    PL_TRY(pl_gguf_get_int(g, key, &v));
    if (v < 0 || v >= n_vocab) {
        PL_INFO("%s: %s = %lld is outside the vocabulary (%d tokens), using %d", pl_gguf_path(g),
                key, (long long)v, n_vocab, *id);
        return PL_OK;
    }
    *id = (int32_t)v;
    return PL_OK;
}

/* tokenizer.ggml.tokens / scores / token_type -> texts, the text map, scores, attributes. */
static pl_status load_tokens(pl_tokenizer *t, const pl_gguf *g) {
    pl_gguf_arr toks, scores = {0}, types = {0};
    PL_TRY(pl_gguf_get_arr(g, "tokenizer.ggml.tokens", &toks));
    if (toks.type != PL_GGUF_STRING)
        return pl_fail(PL_ERR_FORMAT, "tokenizer.ggml.tokens: expected an array of strings, found %s",
                       pl_gguf_type_name(toks.type));
    if (toks.count == 0 || toks.count > (uint64_t)INT32_MAX / 2)
        return pl_fail(PL_ERR_FORMAT, "tokenizer.ggml.tokens: %llu tokens is not a usable vocabulary",
                       (unsigned long long)toks.count);
    int32_t n = (int32_t)toks.count;
    int has_scores = pl_gguf_find_key(g, "tokenizer.ggml.scores") >= 0;
    int has_types = pl_gguf_find_key(g, "tokenizer.ggml.token_type") >= 0;
    if (has_scores) {
        PL_TRY(pl_gguf_get_arr(g, "tokenizer.ggml.scores", &scores));
        if (scores.type != PL_GGUF_FLOAT32 && scores.type != PL_GGUF_INT32)
            return pl_fail(PL_ERR_FORMAT, "tokenizer.ggml.scores: expected float32 or int32 elements, found %s",
                           pl_gguf_type_name(scores.type));
        if (scores.count < toks.count)
            return pl_fail(PL_ERR_FORMAT, "tokenizer.ggml.scores: %llu scores for %d tokens",
                           (unsigned long long)scores.count, n);
    }
    if (has_types) {
        PL_TRY(pl_gguf_get_arr(g, "tokenizer.ggml.token_type", &types));
        if (types.type != PL_GGUF_INT32)
            return pl_fail(PL_ERR_FORMAT, "tokenizer.ggml.token_type: expected int32 elements, found %s",
                           pl_gguf_type_name(types.type));
        if (types.count < toks.count)
            return pl_fail(PL_ERR_FORMAT, "tokenizer.ggml.token_type: %llu types for %d tokens",
                           (unsigned long long)types.count, n);
    }

    uint64_t total = 0;
    for (int32_t i = 0; i < n; i++) {
        uint64_t len = pl_gguf_arr_str(&toks, (uint64_t)i).len;
        total += (len ? len : 32) + 1; /* room for "[EMPTY_i]" */
    }
    if (total > UINT32_MAX)
        return pl_fail(PL_ERR_FORMAT, "tokenizer.ggml.tokens: %llu bytes of token text is too much",
                       (unsigned long long)total);
    t->n_vocab = n;
    t->text_arena = malloc(total);
    t->text_off = malloc((size_t)n * sizeof *t->text_off);
    t->text_len = malloc((size_t)n * sizeof *t->text_len);
    t->score = malloc((size_t)n * sizeof *t->score);
    t->attr = malloc((size_t)n * sizeof *t->attr);
    t->eog = calloc((size_t)n, 1);
    if (!t->text_arena || !t->text_off || !t->text_len || !t->score || !t->attr || !t->eog)
        return pl_fail(PL_ERR_NOMEM, "tokenizer: out of memory for %d tokens", n);
    PL_TRY(pl_tok_map_init(&t->tok_map, (size_t)n));

    uint32_t off = 0;
    for (int32_t i = 0; i < n; i++) {
        pl_gguf_str s = pl_gguf_arr_str(&toks, (uint64_t)i);
        char *dst = t->text_arena + off;
        size_t len = s.len;
        if (len == 0) {
            PL_WARN("%s: empty token at index %d", pl_gguf_path(g), i);
            len = (size_t)snprintf(dst, 32, "[EMPTY_%d]", i);
        } else {
            memcpy(dst, s.ptr, len);
            dst[len] = '\0';
        }
        t->text_off[i] = off;
        t->text_len[i] = (uint32_t)len;
        off += (uint32_t)len + 1;
        int32_t old = -1;
        int r = pl_tok_map_put(&t->tok_map, dst, len, i, &old);
        if (r < 0) return pl_fail(PL_ERR_NOMEM, "tokenizer: out of memory");
        if (r == 0)
            return pl_fail(PL_ERR_FORMAT, "tokenizer.ggml.tokens: duplicate token '%s' at ids %d and %d",
                           dst, old, i);
        t->score[i] = has_scores ? (float)pl_gguf_arr_float(&scores, (uint64_t)i) : 0.0f;
        uint16_t a = PL_ATTR_NORMAL;
        if (has_types) {
            switch (pl_gguf_arr_int(&types, (uint64_t)i)) {
            case PL_TOKEN_NORMAL: a = PL_ATTR_NORMAL; break;
            case PL_TOKEN_UNKNOWN: a = PL_ATTR_UNKNOWN; break;
            case PL_TOKEN_CONTROL: a = PL_ATTR_CONTROL; break;
            case PL_TOKEN_USER_DEFINED: a = PL_ATTR_USER_DEFINED; break;
            case PL_TOKEN_UNUSED: a = PL_ATTR_UNUSED; break;
            case PL_TOKEN_BYTE: a = PL_ATTR_BYTE; break;
            default: a = PL_ATTR_UNDEFINED; break;
            }
        }
        t->attr[i] = a;
    }
    return PL_OK;
}

/* tokenizer.ggml.merges -> "left right" -> rank (the first occurrence of a merge wins). */
static pl_status load_merges(pl_tokenizer *t, const pl_gguf *g) {
    pl_gguf_arr m;
    PL_TRY(pl_gguf_get_arr(g, "tokenizer.ggml.merges", &m));
    if (m.type != PL_GGUF_STRING)
        return pl_fail(PL_ERR_FORMAT, "tokenizer.ggml.merges: expected an array of strings, found %s",
                       pl_gguf_type_name(m.type));
    if (m.count > (uint64_t)INT32_MAX / 2)
        return pl_fail(PL_ERR_FORMAT, "tokenizer.ggml.merges: %llu merges is too many",
                       (unsigned long long)m.count);
    size_t total = 0;
    for (uint64_t i = 0; i < m.count; i++) total += pl_gguf_arr_str(&m, i).len;
    t->merge_arena = malloc(total ? total : 1);
    if (!t->merge_arena) return pl_fail(PL_ERR_NOMEM, "tokenizer: out of memory for merges");
    PL_TRY(pl_tok_map_init(&t->merge_map, (size_t)m.count));
    size_t off = 0;
    for (uint64_t i = 0; i < m.count; i++) {
        pl_gguf_str s = pl_gguf_arr_str(&m, i);
        /* llama.cpp splits at the first space after the first byte; without one the merge is
         * ("", "") and can never apply. */
        if (s.len < 2 || !memchr(s.ptr + 1, ' ', s.len - 1)) continue;
        char *dst = t->merge_arena + off;
        memcpy(dst, s.ptr, s.len);
        off += s.len;
        if (pl_tok_map_put(&t->merge_map, dst, s.len, (int32_t)i, NULL) < 0)
            return pl_fail(PL_ERR_NOMEM, "tokenizer: out of memory for merges");
    }
    return PL_OK;
}

/* The first token (by id) whose text is in list, marked CONTROL; -1 if none. */
static int32_t detect(pl_tokenizer *t, const char *const *list) {
    for (int32_t i = 0; i < t->n_vocab; i++) {
        if (in_list(pl_tok_text(t, i), list)) {
            t->attr[i] |= PL_ATTR_CONTROL;
            return i;
        }
    }
    return -1;
}

static int eog_has(const pl_tokenizer *t, const char *s, int32_t *id) {
    int32_t i = find_text(t, s);
    if (i >= 0 && t->eog[i]) {
        if (id) *id = i;
        return 1;
    }
    return 0;
}

/* End-of-generation ids and the attribute fix-ups that come with them. */
static pl_status derive_specials(pl_tokenizer *t, const pl_gguf *g) {
    int32_t n = t->n_vocab;
    int32_t fim_pre = -1, fim_suf = -1, fim_mid = -1, fim_pad = -1, fim_rep = -1, fim_sep = -1;
    PL_TRY(opt_id(g, "tokenizer.ggml.fim_pre_token_id", n, &fim_pre));
    PL_TRY(opt_id(g, "tokenizer.ggml.fim_suf_token_id", n, &fim_suf));
    PL_TRY(opt_id(g, "tokenizer.ggml.fim_mid_token_id", n, &fim_mid));
    PL_TRY(opt_id(g, "tokenizer.ggml.fim_pad_token_id", n, &fim_pad));
    PL_TRY(opt_id(g, "tokenizer.ggml.fim_rep_token_id", n, &fim_rep));
    PL_TRY(opt_id(g, "tokenizer.ggml.fim_sep_token_id", n, &fim_sep));
    PL_TRY(opt_id(g, "tokenizer.ggml.prefix_token_id", n, &fim_pre));
    PL_TRY(opt_id(g, "tokenizer.ggml.suffix_token_id", n, &fim_suf));
    PL_TRY(opt_id(g, "tokenizer.ggml.middle_token_id", n, &fim_mid));

    if (t->eot < 0) t->eot = detect(t, EOT_TEXTS);
    if (t->eom < 0) t->eom = detect(t, EOM_TEXTS);
    if (fim_pre < 0) fim_pre = detect(t, FIM_PRE_TEXTS);
    if (fim_suf < 0) fim_suf = detect(t, FIM_SUF_TEXTS);
    if (fim_mid < 0) fim_mid = detect(t, FIM_MID_TEXTS);
    if (fim_pad < 0) fim_pad = detect(t, FIM_PAD_TEXTS);
    if (fim_rep < 0) fim_rep = detect(t, FIM_REP_TEXTS);
    if (fim_sep < 0) fim_sep = detect(t, FIM_SEP_TEXTS);

    /* Control tokens named "unused" are unused. */
    for (int32_t i = 0; i < n; i++)
        if ((t->attr[i] & PL_ATTR_CONTROL) && strstr(pl_tok_text(t, i), "unused"))
            t->attr[i] |= PL_ATTR_UNUSED;

    if (fim_pad >= 0) t->eog[fim_pad] = 1;
    if (fim_rep >= 0) t->eog[fim_rep] = 1;
    if (fim_sep >= 0) t->eog[fim_sep] = 1;
    for (int32_t i = 0; i < n; i++) {
        const char *s = pl_tok_text(t, i);
        if (in_list(s, EOG_TEXTS)) {
            t->eog[i] = 1;
            t->attr[i] |= PL_ATTR_CONTROL;
        }
        /* gpt-oss: these are always rendered */
        if (!strcmp(s, "<|channel|>") || !strcmp(s, "<|message|>") || !strcmp(s, "<|start|>") ||
            !strcmp(s, "<|constrain|>"))
            t->attr[i] = PL_ATTR_USER_DEFINED;
    }
    if (t->eos >= 0) t->eog[t->eos] = 1;
    if (t->eot >= 0) t->eog[t->eot] = 1;
    if (t->eom >= 0) t->eog[t->eom] = 1;

    /* Harmony-style vocabularies: "<|end|>" ends a message, not the generation. */
    int32_t end_id = -1;
    int has_end = eog_has(t, "<|end|>", &end_id);
    int has_return = eog_has(t, "<|return|>", NULL);
    int has_call = eog_has(t, "<|call|>", NULL) || eog_has(t, "<|calls|>", NULL);
    int has_flush = eog_has(t, "<|flush|>", NULL);
    if ((has_return && has_call && has_end) || (has_call && has_flush && has_end)) {
        t->eog[end_id] = 0;
        t->attr[end_id] = PL_ATTR_USER_DEFINED;
    }
    /* Gemma 4 / PaddleOCR: "</s>" is not an end of generation next to "<|tool_response>". */
    int32_t s_id = -1;
    if (eog_has(t, "<|tool_response>", NULL) && eog_has(t, "</s>", &s_id)) {
        t->eog[s_id] = 0;
        t->attr[s_id] = PL_ATTR_NORMAL;
    }
    return PL_OK;
}

static int by_length_desc(const void *a, const void *b, void *ctx) {
    const pl_tokenizer *t = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    uint32_t lx = t->text_len[x], ly = t->text_len[y];
    if (lx != ly) return lx > ly ? -1 : 1;
    return x < y ? -1 : (x > y);
}

/* Tokens that split the input before tokenizing: longest text first (ties by id). */
static pl_status build_special_cache(pl_tokenizer *t) {
    t->special = malloc((size_t)t->n_vocab * sizeof *t->special);
    if (!t->special) return pl_fail(PL_ERR_NOMEM, "tokenizer: out of memory");
    t->n_special = 0;
    for (int32_t i = 0; i < t->n_vocab; i++)
        if (t->attr[i] & (PL_ATTR_CONTROL | PL_ATTR_USER_DEFINED | PL_ATTR_UNKNOWN))
            t->special[t->n_special++] = i;
    qsort_r(t->special, (size_t)t->n_special, sizeof *t->special, by_length_desc, t);
    return PL_OK;
}

static void set_attr(pl_tokenizer *t, const char *text, uint16_t bit, int on) {
    int32_t id = find_text(t, text);
    if (id < 0) return;
    t->attr[id] = on ? (uint16_t)(t->attr[id] | bit) : (uint16_t)(t->attr[id] & ~bit);
}

/* llama.cpp's per-model LSTRIP/RSTRIP attributes (keyed on names in the metadata). */
static void model_attrs(pl_tokenizer *t, const pl_gguf *g) {
    char name[256] = "", arch[128] = "";
    pl_gguf_str s;
    if (pl_gguf_find_key(g, "general.name") >= 0 && pl_gguf_get_str(g, "general.name", &s) == PL_OK)
        snprintf(name, sizeof name, "%.*s", (int)(s.len < 255 ? s.len : 255), s.ptr);
    if (pl_gguf_find_key(g, "general.architecture") >= 0 &&
        pl_gguf_get_str(g, "general.architecture", &s) == PL_OK)
        snprintf(arch, sizeof arch, "%.*s", (int)(s.len < 127 ? s.len : 127), s.ptr);
    pl_clear_error();
    for (char *c = name; *c; c++) *c = (char)tolower((unsigned char)*c);
    const char *pre = t->pre_name;
    if (strstr(pre, "jina-v2-de") || strstr(pre, "jina-v2-es") || strstr(pre, "jina-v2-code") ||
        strstr(arch, "nomic-bert-moe") || strstr(arch, "jina-bert-v3")) {
        set_attr(t, "<mask>", PL_ATTR_LSTRIP, 1);
    } else if (strstr(name, "phi-3") || strstr(name, "phi3")) {
        for (int32_t i = 0; i < t->n_special; i++) t->attr[t->special[i]] |= PL_ATTR_RSTRIP;
        set_attr(t, "</s>", PL_ATTR_RSTRIP, 1);
        set_attr(t, "<unk>", PL_ATTR_RSTRIP, 0);
        set_attr(t, "<s>", PL_ATTR_RSTRIP, 0);
        set_attr(t, "<|endoftext|>", PL_ATTR_RSTRIP, 0);
    } else if (strstr(name, "modern-bert")) {
        set_attr(t, "[MASK]", PL_ATTR_LSTRIP, 1);
    }
}

static void build_byte_tokens(pl_tokenizer *t) {
    static const char hex[] = "0123456789ABCDEF";
    for (int b = 0; b < 256; b++) {
        int32_t id;
        if (t->kind == PL_TOK_SPM || t->spm_bpe) {
            char buf[7] = {'<', '0', 'x', hex[b >> 4], hex[b & 15], '>', 0};
            id = find_text(t, buf);
            if (id < 0 && t->kind == PL_TOK_SPM) { /* llama.cpp's SPM also tries the raw byte */
                char one = (char)b;
                id = pl_tok_map_get(&t->tok_map, &one, 1);
            }
        } else {
            size_t k;
            const char *e = pl_tok_byte_to_utf8((uint8_t)b, &k);
            id = pl_tok_map_get(&t->tok_map, e, k);
        }
        t->byte_tok[b] = id;
    }
}

static pl_status load(pl_tokenizer *t, const pl_gguf *g) {
    pl_gguf_str model, pre = {"", 0};
    PL_TRY(pl_gguf_get_str(g, "tokenizer.ggml.model", &model));
    if (pl_gguf_find_key(g, "tokenizer.ggml.pre") >= 0)
        PL_TRY(pl_gguf_get_str(g, "tokenizer.ggml.pre", &pre));

    pl_pretok_flags flags = {0};
    t->sep = -1;
    if (pl_gguf_str_eq(model, "llama")) {
        t->kind = PL_TOK_SPM;
        t->pre_name = strdup("");
        t->bos = 1, t->eos = 2, t->unk = 0;
        t->add_space_prefix = 1, t->add_bos = 1, t->clean_spaces = 0;
    } else if (pl_gguf_str_eq(model, "gpt2") || pl_gguf_str_eq(model, "gemma4")) {
        /* "gemma4" is BPE in SentencePiece style; llama.cpp gives it the gemma4 pre-tokenizer
         * whatever tokenizer.ggml.pre says, and no default special ids. */
        const int gemma4 = pl_gguf_str_eq(model, "gemma4");
        t->kind = PL_TOK_BPE;
        t->pre_name = gemma4 ? strdup("gemma4") : pl_gguf_str_dup(pre);
        if (!t->pre_name) return pl_fail(PL_ERR_NOMEM, "tokenizer: out of memory");
        if (pre.len == 0 && !gemma4)
            PL_WARN("%s: no tokenizer.ggml.pre, using the 'default' pre-tokenizer", pl_gguf_path(g));
        PL_TRY(pl_pretok_create(t->pre_name, &t->pretok, &flags));
        t->bos = gemma4 || flags.no_bos ? -1 : 11, t->eos = gemma4 ? -1 : 11, t->unk = -1;
        t->add_space_prefix = 0, t->add_bos = flags.add_bos, t->clean_spaces = flags.clean_spaces;
        t->ignore_merges = flags.ignore_merges;
        t->spm_bpe = flags.spm_style, t->newline_runs = flags.newline_runs;
    } else if (pl_gguf_str_eq(model, "bert")) {
        /* llama.cpp's defaults for a WordPiece vocabulary (BERT's usual ids). */
        t->kind = PL_TOK_WPM;
        t->pre_name = strdup("");
        t->bos = 101, t->eos = -1, t->unk = 100, t->sep = 102;
        t->add_space_prefix = 0, t->add_bos = 1, t->clean_spaces = 1;
    } else {
        return pl_fail(PL_ERR_UNSUPPORTED, "unknown tokenizer model (tokenizer.ggml.model): '%.*s'",
                       (int)(model.len > 200 ? 200 : model.len), model.ptr);
    }
    if (!t->pre_name) return pl_fail(PL_ERR_NOMEM, "tokenizer: out of memory");
    PL_TRY(opt_bool(g, "tokenizer.ggml.add_space_prefix", &t->add_space_prefix));

    PL_TRY(load_tokens(t, g));
    if (t->kind == PL_TOK_BPE) PL_TRY(load_merges(t, g));

    int32_t n = t->n_vocab;
    t->eot = t->eom = t->pad = -1;
    PL_TRY(opt_id(g, "tokenizer.ggml.bos_token_id", n, &t->bos));
    PL_TRY(opt_id(g, "tokenizer.ggml.eos_token_id", n, &t->eos));
    PL_TRY(opt_id(g, "tokenizer.ggml.eot_token_id", n, &t->eot));
    PL_TRY(opt_id(g, "tokenizer.ggml.eom_token_id", n, &t->eom));
    PL_TRY(opt_id(g, "tokenizer.ggml.unknown_token_id", n, &t->unk));
    PL_TRY(opt_id(g, "tokenizer.ggml.padding_token_id", n, &t->pad));
    if (t->kind == PL_TOK_WPM) {
        PL_TRY(opt_id(g, "tokenizer.ggml.seperator_token_id", n, &t->sep));
        t->add_sep = 1;
        t->lowercase = 1;
        PL_TRY(opt_bool(g, "tokenizer.ggml.normalizer.lowercase", &t->lowercase));
        t->strip_accents = t->lowercase;
        PL_TRY(opt_bool(g, "tokenizer.ggml.normalizer.strip_accents", &t->strip_accents));
        for (int32_t i = 0; i < n; i++)
            if (t->text_len[i] > t->max_token_len) t->max_token_len = t->text_len[i];
    }
    PL_TRY(opt_bool(g, "tokenizer.ggml.add_bos_token", &t->add_bos));
    PL_TRY(opt_bool(g, "tokenizer.ggml.add_eos_token", &t->add_eos));
    PL_TRY(opt_bool(g, "tokenizer.ggml.add_sep_token", &t->add_sep));
    if (flags.force_bos && !t->add_bos) {
        PL_INFO("%s: pre-tokenizer '%s' always adds BOS (tokenizer.ggml.add_bos_token is false)",
                pl_gguf_path(g), t->pre_name);
        t->add_bos = 1;
    }
    if (t->add_bos && t->bos < 0)
        return pl_fail(PL_ERR_FORMAT, "tokenizer.ggml.add_bos_token is true%s, but tokenizer.ggml.bos_token_id is not set",
                       flags.force_bos ? " (always, for this tokenizer)" : "");
    if (t->add_eos && t->eos < 0)
        return pl_fail(PL_ERR_FORMAT, "tokenizer.ggml.add_eos_token is true, but tokenizer.ggml.eos_token_id is not set");

    PL_TRY(derive_specials(t, g));
    PL_TRY(build_special_cache(t));
    build_byte_tokens(t);
    PL_TRY(pl_tok_build_pieces(t));
    model_attrs(t, g);
    return PL_OK;
}

pl_status pl_tokenizer_load(const pl_gguf *g, pl_tokenizer **out) {
    *out = NULL;
    pl_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return pl_fail(PL_ERR_NOMEM, "tokenizer: out of memory");
    pl_status st = load(t, g);
    if (st != PL_OK) {
        pl_error_prefix("%s", pl_gguf_path(g));
        pl_tokenizer_destroy(t);
        return st;
    }
    *out = t;
    return PL_OK;
}

/* ---- accessors ---- */

pl_tokenizer_kind pl_tokenizer_get_kind(const pl_tokenizer *t) { return t->kind; }
const char *pl_tokenizer_pre_name(const pl_tokenizer *t) { return t->pre_name; }
int32_t pl_tokenizer_n_vocab(const pl_tokenizer *t) { return t->n_vocab; }
int32_t pl_tokenizer_bos(const pl_tokenizer *t) { return t->bos; }
int32_t pl_tokenizer_eos(const pl_tokenizer *t) { return t->eos; }
int pl_tokenizer_add_bos(const pl_tokenizer *t) { return t->add_bos; }
int pl_tokenizer_add_sep(const pl_tokenizer *t) { return t->add_sep; }
int32_t pl_tokenizer_sep(const pl_tokenizer *t) { return t->sep; }
int pl_tokenizer_add_eos(const pl_tokenizer *t) { return t->add_eos; }
size_t pl_tokenizer_max_piece_len(const pl_tokenizer *t) { return t->max_piece_len; }

int pl_tokenizer_is_eog(const pl_tokenizer *t, int32_t id) {
    return id >= 0 && id < t->n_vocab && t->eog[id];
}

pl_token_type pl_tokenizer_token_type(const pl_tokenizer *t, int32_t id) {
    if (id < 0 || id >= t->n_vocab) return PL_TOKEN_UNUSED;
    uint16_t a = t->attr[id];
    if (a & PL_ATTR_CONTROL) return PL_TOKEN_CONTROL;
    if (a & PL_ATTR_USER_DEFINED) return PL_TOKEN_USER_DEFINED;
    if (a & PL_ATTR_UNKNOWN) return PL_TOKEN_UNKNOWN;
    if (a & PL_ATTR_BYTE) return PL_TOKEN_BYTE;
    if (a & PL_ATTR_NORMAL) return PL_TOKEN_NORMAL;
    return PL_TOKEN_UNUSED;
}

const char *pl_tokenizer_token_text(const pl_tokenizer *t, int32_t id) {
    return id >= 0 && id < t->n_vocab ? pl_tok_text(t, id) : NULL;
}
