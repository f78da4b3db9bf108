/* cli/cmd_inspect — `pagellm inspect FILE [--json]`: what a GGUF model file holds.
 *
 * Gathers the facts once (architecture, file type, hyper-parameters under "<arch>.", tokenizer,
 * tensors and bytes per type, parameter count) and prints them as text or as one JSON object.
 * Strings from the file are printed escaped: a hostile file cannot put control characters on
 * the terminal or invalid UTF-8 in the JSON.
 */
#include "cli/cli.h"
#include "cli/flags.h"
#include "gguf/gguf.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Hyper-parameter keys shown, relative to "<arch>.". */
static const char *const hparam_keys[] = {
    "context_length",        "embedding_length",
    "block_count",           "feed_forward_length",
    "attention.head_count",  "attention.head_count_kv",
    "attention.layer_norm_rms_epsilon", "attention.layer_norm_epsilon",
    "rope.freq_base",        "rope.dimension_count",
    "rope.scaling.type",     "rope.scaling.factor",
    "rope.scaling.attn_factor", "rope.scaling.original_context_length",
    "attention.key_length",  "attention.sliding_window",
    "attention.sliding_window_pattern", "attn_logit_softcapping",
    "final_logit_softcapping", "rope.freq_base_swa",
    "attention.temperature_scale", "rope.scaling.yarn_beta_fast",
    "rope.scaling.yarn_beta_slow", "rope.scaling.yarn_log_multiplier",
    "vocab_size",            "pooling_type",
    "attention.causal",      "expert_count",
    "expert_used_count",     "expert_feed_forward_length",
};
enum { N_HPARAMS = sizeof hparam_keys / sizeof hparam_keys[0] };

/* llama.cpp's names for general.file_type (enum llama_ftype). */
static const char *ftype_name(int64_t ft) {
    static const char *const names[] = {
        [0] = "F32",      [1] = "F16",      [2] = "Q4_0",     [3] = "Q4_1",
        [7] = "Q8_0",     [8] = "Q5_0",     [9] = "Q5_1",     [10] = "Q2_K",
        [11] = "Q3_K_S",  [12] = "Q3_K_M",  [13] = "Q3_K_L",  [14] = "Q4_K_S",
        [15] = "Q4_K_M",  [16] = "Q5_K_S",  [17] = "Q5_K_M",  [18] = "Q6_K",
        [19] = "IQ2_XXS", [20] = "IQ2_XS",  [21] = "Q2_K_S",  [22] = "IQ3_XS",
        [23] = "IQ3_XXS", [24] = "IQ1_S",   [25] = "IQ4_NL",  [26] = "IQ3_S",
        [27] = "IQ3_M",   [28] = "IQ2_S",   [29] = "IQ2_M",   [30] = "IQ4_XS",
        [31] = "IQ1_M",   [32] = "BF16",    [36] = "TQ1_0",   [37] = "TQ2_0",
        [38] = "MXFP4_MOE",
    };
    if (ft >= 0 && ft < (int64_t)(sizeof names / sizeof names[0])) return names[ft];
    return NULL;
}

typedef struct {
    int64_t tensors;   /* how many tensors have this type */
    uint64_t bytes;    /* their total size */
} type_count;

typedef struct {
    char arch[64];              /* general.architecture (escaped), "" if absent */
    int64_t file_type;          /* general.file_type, -1 if absent or not an integer */
    int64_t hparam_kv[N_HPARAMS]; /* key index of "<arch>.<hparam_keys[i]>", -1 if absent */
    int64_t n_tokens;           /* tokenizer.ggml.tokens count, -1 if absent */
    int has_merges, has_template;
    type_count types[PL_DT_COUNT];
    uint64_t n_params;          /* sum of element counts */
} facts;

/* Copies s into buf with control characters, quotes and backslashes escaped as \xNN, and
 * non-UTF-8 bytes (anything >= 0x80 when `ascii`) escaped too. */
static const char *esc(char *buf, size_t cap, pl_gguf_str s, int ascii) {
    size_t o = 0;
    uint64_t i = 0;
    for (; i < s.len && o + 8 < cap; i++) {
        unsigned char c = (unsigned char)s.ptr[i];
        if (c < 0x20 || c == 0x7f || (ascii && c >= 0x80) || c == '\\')
            o += (size_t)snprintf(buf + o, cap - o, "\\x%02x", c);
        else buf[o++] = (char)c;
    }
    if (i < s.len) o += (size_t)snprintf(buf + o, cap - o, "..."); /* o + 8 < cap: fits */
    buf[o] = '\0';
    return buf;
}

/* A JSON string for s: as is when it is valid UTF-8, escaped to ASCII otherwise. */
static json_t *jstr(pl_gguf_str s) {
    json_t *j = s.len < 1 << 20 ? json_stringn(s.ptr, (size_t)s.len) : NULL;
    if (j) return j;
    char buf[512];
    return json_string(esc(buf, sizeof buf, s, 1));
}

static int64_t find_arch_key(const pl_gguf *g, const char *arch, const char *key) {
    char full[256];
    snprintf(full, sizeof full, "%s.%s", arch, key);
    return pl_gguf_find_key(g, full);
}

static void gather(const pl_gguf *g, facts *f) {
    memset(f, 0, sizeof *f);
    pl_gguf_str s;
    if (pl_gguf_get_str(g, "general.architecture", &s) == PL_OK)
        esc(f->arch, sizeof f->arch, s, 1);
    int64_t v;
    f->file_type = pl_gguf_get_int(g, "general.file_type", &v) == PL_OK ? v : -1;
    for (int i = 0; i < N_HPARAMS; i++)
        f->hparam_kv[i] = f->arch[0] ? find_arch_key(g, f->arch, hparam_keys[i]) : -1;
    pl_gguf_arr a;
    f->n_tokens = pl_gguf_get_arr(g, "tokenizer.ggml.tokens", &a) == PL_OK ? (int64_t)a.count : -1;
    f->has_merges = pl_gguf_find_key(g, "tokenizer.ggml.merges") >= 0;
    f->has_template = pl_gguf_find_key(g, "tokenizer.chat_template") >= 0;
    for (int64_t i = 0; i < pl_gguf_n_tensors(g); i++) {
        const pl_gguf_tensor *t = pl_gguf_tensor_at(g, i);
        f->types[t->type].tensors++;
        f->types[t->type].bytes += t->nbytes;
        f->n_params += (uint64_t)(t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]);
    }
    pl_clear_error();
}

static const char *human_count(char *buf, size_t cap, uint64_t n) {
    if (n < 1000) snprintf(buf, cap, "%llu", (unsigned long long)n);
    else if (n < 1000000) snprintf(buf, cap, "%.1fK", n / 1e3);
    else if (n < 1000000000) snprintf(buf, cap, "%.1fM", n / 1e6);
    else snprintf(buf, cap, "%.1fB", n / 1e9);
    return buf;
}

static const char *human_bytes(char *buf, size_t cap, uint64_t n) {
    if (n < 1024) snprintf(buf, cap, "%llu B", (unsigned long long)n);
    else if (n < 1024 * 1024) snprintf(buf, cap, "%.1f KiB", n / 1024.0);
    else if (n < 1024ull * 1024 * 1024) snprintf(buf, cap, "%.1f MiB", n / 1048576.0);
    else snprintf(buf, cap, "%.2f GiB", n / 1073741824.0);
    return buf;
}

/* ---- text ---- */

static void print_value(const pl_gguf *g, int64_t i) {
    int64_t v;
    double d;
    pl_gguf_str s;
    pl_gguf_arr a;
    char buf[256];
    pl_gguf_type t = pl_gguf_type_at(g, i);
    if (t == PL_GGUF_BOOL) {
        size_t len;
        printf("%s", *(const unsigned char *)pl_gguf_value_raw(g, i, &len) ? "true" : "false");
    } else if (pl_gguf_value_int(g, i, &v) == PL_OK) printf("%lld", (long long)v);
    else if (pl_gguf_value_float(g, i, &d) == PL_OK) printf("%g", d);
    else if (pl_gguf_value_str(g, i, &s) == PL_OK) printf("%s", esc(buf, sizeof buf, s, 0));
    else if (pl_gguf_value_arr(g, i, &a) == PL_OK)
        printf("array of %llu %s", (unsigned long long)a.count, pl_gguf_type_name(a.type));
    pl_clear_error();
}

static void print_str_key(const pl_gguf *g, const char *indent, int width, const char *label,
                          const char *key) {
    pl_gguf_str s;
    char buf[256];
    printf("%s%-*s", indent, width, label);
    if (pl_gguf_get_str(g, key, &s) == PL_OK) printf("%s\n", esc(buf, sizeof buf, s, 0));
    else printf("(not set)\n");
    pl_clear_error();
}

static void print_int_key(const pl_gguf *g, const char *label, const char *key) {
    int64_t v;
    printf("  %-14s", label);
    if (pl_gguf_get_int(g, key, &v) == PL_OK) printf("%lld\n", (long long)v);
    else printf("(not set)\n");
    pl_clear_error();
}

static void print_text(const pl_gguf *g, const facts *f) {
    char b1[64], b2[64];
    printf("file:           %s (%s)\n", pl_gguf_path(g),
           human_bytes(b1, sizeof b1, pl_gguf_file_size(g)));
    printf("GGUF version:   %u\n", pl_gguf_version(g));
    printf("architecture:   %s\n", f->arch[0] ? f->arch : "(not set)");
    print_str_key(g, "", 16, "name:", "general.name");
    const char *ft = ftype_name(f->file_type);
    if (f->file_type < 0) printf("file type:      (not set)\n");
    else if (ft) printf("file type:      %s (%lld)\n", ft, (long long)f->file_type);
    else printf("file type:      %lld\n", (long long)f->file_type);
    printf("hyper-parameters:\n");
    int any = 0;
    for (int i = 0; i < N_HPARAMS; i++) {
        if (f->hparam_kv[i] < 0) continue;
        printf("  %-34s ", hparam_keys[i]);
        print_value(g, f->hparam_kv[i]);
        printf("\n");
        any = 1;
    }
    if (!any) printf("  (none under '%s.')\n", f->arch);
    printf("tokenizer:\n");
    print_str_key(g, "  ", 14, "model", "tokenizer.ggml.model");
    print_str_key(g, "  ", 14, "pre", "tokenizer.ggml.pre");
    if (f->n_tokens >= 0) printf("  %-14s%lld\n", "tokens", (long long)f->n_tokens);
    else printf("  %-14s(none)\n", "tokens");
    print_int_key(g, "bos id", "tokenizer.ggml.bos_token_id");
    print_int_key(g, "eos id", "tokenizer.ggml.eos_token_id");
    printf("  %-14s%s\n", "merges", f->has_merges ? "yes" : "no");
    printf("  %-14s%s\n", "chat template", f->has_template ? "yes" : "no");
    printf("tensors:        %lld\n", (long long)pl_gguf_n_tensors(g));
    for (int t = 0; t < PL_DT_COUNT; t++) {
        if (!f->types[t].tensors) continue;
        printf("  %-8s %5lld tensors %12s (%llu bytes)\n", pl_dtype_name((uint32_t)t),
               (long long)f->types[t].tensors, human_bytes(b2, sizeof b2, f->types[t].bytes),
               (unsigned long long)f->types[t].bytes);
    }
    printf("parameters:     %s (%llu)\n", human_count(b1, sizeof b1, f->n_params),
           (unsigned long long)f->n_params);
}

/* ---- JSON ---- */

/* The shortest decimal that reads back as the same float (1e-5f prints as 1e-05). */
static double f32_shortest(double d) {
    char buf[32];
    for (int p = 1; p <= 9; p++) {
        snprintf(buf, sizeof buf, "%.*g", p, d);
        if ((float)strtod(buf, NULL) == (float)d) return strtod(buf, NULL);
    }
    return d;
}

static json_t *json_value(const pl_gguf *g, int64_t i) {
    int64_t v;
    double d;
    pl_gguf_str s;
    pl_gguf_arr a;
    json_t *j = json_null();
    if (pl_gguf_type_at(g, i) == PL_GGUF_BOOL) {
        size_t len;
        j = json_boolean(*(const unsigned char *)pl_gguf_value_raw(g, i, &len));
    } else if (pl_gguf_value_int(g, i, &v) == PL_OK) j = json_integer(v);
    else if (pl_gguf_value_float(g, i, &d) == PL_OK)
        j = json_real(pl_gguf_type_at(g, i) == PL_GGUF_FLOAT32 ? f32_shortest(d) : d);
    else if (pl_gguf_value_str(g, i, &s) == PL_OK) j = jstr(s);
    else if (pl_gguf_value_arr(g, i, &a) == PL_OK) j = json_integer((json_int_t)a.count);
    pl_clear_error();
    return j;
}

static json_t *json_key_str(const pl_gguf *g, const char *key) {
    pl_gguf_str s;
    json_t *j = pl_gguf_get_str(g, key, &s) == PL_OK ? jstr(s) : json_null();
    pl_clear_error();
    return j;
}

static json_t *json_key_int(const pl_gguf *g, const char *key) {
    int64_t v;
    json_t *j = pl_gguf_get_int(g, key, &v) == PL_OK ? json_integer(v) : json_null();
    pl_clear_error();
    return j;
}

static int print_json(const pl_gguf *g, const facts *f) {
    char buf[64];
    json_t *o = json_object(), *hp = json_object(), *tok = json_object(), *types = json_object();
    pl_gguf_str path = {pl_gguf_path(g), strlen(pl_gguf_path(g))};
    json_object_set_new(o, "file", jstr(path));
    json_object_set_new(o, "file_size", json_integer((json_int_t)pl_gguf_file_size(g)));
    json_object_set_new(o, "gguf_version", json_integer(pl_gguf_version(g)));
    json_object_set_new(o, "alignment", json_integer((json_int_t)pl_gguf_alignment(g)));
    json_object_set_new(o, "n_kv", json_integer(pl_gguf_n_kv(g)));
    json_object_set_new(o, "architecture", json_key_str(g, "general.architecture"));
    json_object_set_new(o, "name", json_key_str(g, "general.name"));
    const char *ft = ftype_name(f->file_type);
    json_object_set_new(o, "file_type", f->file_type < 0 ? json_null() : json_integer(f->file_type));
    json_object_set_new(o, "file_type_name",
                        ft ? json_string(ft)
                           : f->file_type < 0 ? json_null()
                                              : json_sprintf("%lld", (long long)f->file_type));
    for (int i = 0; i < N_HPARAMS; i++)
        if (f->hparam_kv[i] >= 0) json_object_set_new(hp, hparam_keys[i], json_value(g, f->hparam_kv[i]));
    json_object_set_new(o, "hparams", hp);
    json_object_set_new(tok, "model", json_key_str(g, "tokenizer.ggml.model"));
    json_object_set_new(tok, "pre", json_key_str(g, "tokenizer.ggml.pre"));
    json_object_set_new(tok, "n_tokens", f->n_tokens >= 0 ? json_integer(f->n_tokens) : json_null());
    json_object_set_new(tok, "bos_token_id", json_key_int(g, "tokenizer.ggml.bos_token_id"));
    json_object_set_new(tok, "eos_token_id", json_key_int(g, "tokenizer.ggml.eos_token_id"));
    json_object_set_new(tok, "has_merges", json_boolean(f->has_merges));
    json_object_set_new(tok, "has_chat_template", json_boolean(f->has_template));
    json_object_set_new(o, "tokenizer", tok);
    json_object_set_new(o, "n_tensors", json_integer(pl_gguf_n_tensors(g)));
    for (int t = 0; t < PL_DT_COUNT; t++) {
        if (!f->types[t].tensors) continue;
        json_t *e = json_object();
        json_object_set_new(e, "tensors", json_integer(f->types[t].tensors));
        json_object_set_new(e, "bytes", json_integer((json_int_t)f->types[t].bytes));
        json_object_set_new(types, pl_dtype_name((uint32_t)t), e);
    }
    json_object_set_new(o, "types", types);
    json_object_set_new(o, "n_params", json_integer((json_int_t)f->n_params));
    json_object_set_new(o, "n_params_human", json_string(human_count(buf, sizeof buf, f->n_params)));
    char *text = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(15));
    json_decref(o);
    if (!text) return pl_cli_fail("inspect", "out of memory formatting JSON");
    puts(text);
    free(text);
    return 0;
}

typedef struct {
    int json;
} inspect_opts;

static const pl_flag INSPECT_FLAGS[] = {
    PL_FLAG_ROW_SET(inspect_opts, "json", 0, json,
     "print one JSON object instead of text"),
};

static const pl_flag_cmd INSPECT = {
    "inspect",
    "usage: pagellm inspect FILE [--json]\n",
    "Describes a GGUF model file: architecture, file type, hyper-parameters,\n"
    "tokenizer, tensors per type and the parameter count. FILE is a path to a .gguf\n"
    "file, or a bare model name (looked up in ./models, $PAGELLM_MODELS and\n"
    "../shared/models).\n", INSPECT_FLAGS, sizeof INSPECT_FLAGS / sizeof INSPECT_FLAGS[0], -1, 1};

int pl_cmd_inspect(int argc, char **argv) {
    inspect_opts o = {0};
    int first, rc = pl_flags_parse(&INSPECT, argc, argv, &o, &first);
    if (rc) return rc == PL_FLAGS_HELP ? 0 : rc;
    if (first == argc) {
        fprintf(stderr, "pagellm inspect: which FILE?\n");
        pl_flags_usage(&INSPECT, stderr);
        return 2;
    }
    const char *file = argv[first];
    /* A path is opened as given (a missing one gets one clear line); a bare name is looked up. */
    char path[4096];
    if (strchr(file, '/')) snprintf(path, sizeof path, "%s", file);
    else if (pl_cli_resolve_model(file, path, sizeof path) != 0) return 1;
    pl_gguf *g;
    if (pl_gguf_open(path, &g) != PL_OK) return pl_cli_fail("inspect", "%s", pl_last_error());
    facts f;
    gather(g, &f);
    if (o.json) rc = print_json(g, &f);
    else print_text(g, &f);
    pl_gguf_close(g);
    return rc;
}
