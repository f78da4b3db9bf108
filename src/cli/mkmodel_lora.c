/* cli/mkmodel_lora — `pagellm mkmodel OUT.gguf --lora-of BASE.gguf [--lora-rank R]
 * [--lora-alpha A] [--lora-targets attn_q,attn_v,...] [--type f32|f16] [--seed S]`: a random LoRA
 * adapter of BASE in the layout llama.cpp's convert_lora_to_gguf.py writes (general.type
 * "adapter", adapter.type "lora", adapter.lora.alpha, `blk.N.T.weight.lora_a` [cols, R] and
 * `.lora_b` [R, rows] for each target T of every layer; model/lora.h). A and B are uniform noise
 * of standard deviation 0.05 (a trained adapter's B is not zero either), so the adapter moves the
 * logits visibly. The same flags and seed always give the same bytes. */
#include "cli/cli.h"
#include "cli/flags.h"

#include "base/rng.h"
#include "gguf/gguf.h"
#include "kernels/matmul.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define C "mkmodel"

static const char *const TARGETS[] = {"attn_q", "attn_k", "attn_v", "attn_output",
                                      "ffn_gate", "ffn_up", "ffn_down"};
enum { N_TARGETS = 7 };

typedef struct {
    const char *out, *base, *targets;
    int64_t rank, seed;
    double alpha;
    pl_dtype type;
} lora_opts;

static int set_type(const char *cmd, const pl_flag *f, const char *arg, void *opts) {
    lora_opts *o = opts;
    (void)f;
    if (!strcmp(arg, "f32")) o->type = PL_DT_F32;
    else if (!strcmp(arg, "f16")) o->type = PL_DT_F16;
    else {
        fprintf(stderr, "pagellm %s: --type for an adapter is f32 or f16, got '%s'\n", cmd, arg);
        return 2;
    }
    return 0;
}

static const pl_flag LORA_FLAGS[] = {
    PL_FLAG_ROW_STR(lora_opts, "lora-of", 0, base, "BASE.gguf", "the base model"),
    PL_FLAG_ROW_I64(lora_opts, "lora-rank", 0, rank, 1, 1024, "R", "the adapter's rank (8)"),
    PL_FLAG_ROW_F64(lora_opts, "lora-alpha", 0, alpha, -DBL_MAX, DBL_MAX, "A",
     "adapter.lora.alpha (16)"),
    PL_FLAG_ROW_STR(lora_opts, "lora-targets", 0, targets, "LIST",
     "of attn_q, attn_k, attn_v, attn_output, ffn_gate, ffn_up,\nffn_down (all)"),
    PL_FLAG_ROW_FN("type", 0, set_type, 0, "f32|f16", "the matrices' type (f32)"),
    PL_FLAG_ROW_I64(lora_opts, "seed", 0, seed, -0x1p63, 0x1p63, "S", "random seed (1)"),
};

static const pl_flag_cmd LORA = {
    "mkmodel",
    "usage: pagellm mkmodel OUT.gguf --lora-of BASE.gguf [--lora-rank R (8)] [--lora-alpha A (16)]\n"
    "       [--lora-targets attn_q,attn_k,attn_v,attn_output,ffn_gate,ffn_up,ffn_down (all)]\n"
    "       [--type f32|f16] [--seed S]\n",
    NULL, LORA_FLAGS, sizeof LORA_FLAGS / sizeof LORA_FLAGS[0], -1, 1};

static int parse(int argc, char **argv, lora_opts *o) {
    *o = (lora_opts){.rank = 8, .alpha = 16, .seed = 1, .type = PL_DT_F32,
                     .targets = "attn_q,attn_k,attn_v,attn_output,ffn_gate,ffn_up,ffn_down"};
    int first, rc = pl_flags_parse(&LORA, argc, argv, o, &first);
    if (rc) return rc == PL_FLAGS_HELP ? -1 : rc;
    if (first >= argc || !o->base)
        return pl_flags_need(&LORA, "OUT.gguf and --lora-of BASE.gguf");
    o->out = argv[first];
    return 0;
}

/* One [cols, rows] tensor of noise in o->type, kept in *keep until the file is written. */
static pl_status add_noise(pl_gguf_writer *w, pl_rng *rng, const char *name, pl_dtype type,
                           int64_t cols, int64_t rows, void **keep) {
    size_t rb = pl_dtype_row_size(type, cols);
    float *row = malloc((size_t)cols * sizeof *row);
    uint8_t *data = *keep = malloc(rb * (size_t)rows);
    if (!row || !data) {
        free(row);
        return pl_fail(PL_ERR_NOMEM, "tensor '%s': out of memory", name);
    }
    const double a = 0.05 * sqrt(3.0);
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t i = 0; i < cols; i++) row[i] = (float)((2 * pl_rng_uniform(rng) - 1) * a);
        pl_quantize_row(type, row, data + (size_t)r * rb, cols);
    }
    free(row);
    int64_t ne[2] = {cols, rows};
    return pl_gguf_writer_add_tensor(w, name, type, 2, ne, data);
}

static pl_status build(const lora_opts *o, pl_gguf *base, pl_gguf_writer *w, void **keep,
                       size_t *n_keep) {
    pl_gguf_str arch;
    PL_TRY(pl_gguf_get_str(base, "general.architecture", &arch));
    char key[160], *a = pl_gguf_str_dup(arch);
    if (!a) return pl_fail(PL_ERR_NOMEM, "out of memory");
    snprintf(key, sizeof key, "%s.block_count", a);
    pl_status st = pl_gguf_writer_add_str(w, "general.architecture", a);
    free(a);
    int64_t n_layers = 0;
    if (st == PL_OK) st = pl_gguf_get_int(base, key, &n_layers);
    if (st == PL_OK) st = pl_gguf_writer_add_str(w, "general.type", "adapter");
    if (st == PL_OK) st = pl_gguf_writer_add_str(w, "adapter.type", "lora");
    if (st == PL_OK) st = pl_gguf_writer_add_f32(w, "adapter.lora.alpha", (float)o->alpha);
    int want[N_TARGETS] = {0};
    for (const char *p = o->targets; st == PL_OK && *p;) {
        size_t n = strcspn(p, ",");
        int t = 0;
        while (t < N_TARGETS && (strlen(TARGETS[t]) != n || strncmp(p, TARGETS[t], n))) t++;
        if (t == N_TARGETS)
            return pl_fail(PL_ERR_INVALID_ARG, "--lora-targets: '%.*s' is not one of attn_q, "
                           "attn_k, attn_v, attn_output, ffn_gate, ffn_up, ffn_down", (int)n, p);
        want[t] = 1;
        p += n + (p[n] == ',');
    }
    pl_rng rng;
    pl_rng_seed(&rng, (uint64_t)o->seed);
    for (int64_t l = 0; st == PL_OK && l < n_layers; l++)
        for (int t = 0; st == PL_OK && t < N_TARGETS; t++) {
            if (!want[t]) continue;
            char name[128], an[160];
            snprintf(name, sizeof name, "blk.%lld.%s.weight", (long long)l, TARGETS[t]);
            const pl_gguf_tensor *bt = pl_gguf_find_tensor(base, name);
            if (!bt || bt->n_dims != 2)
                return pl_fail(PL_ERR_INVALID_ARG, "--lora-of: the base model has no 2-D tensor '%s'",
                               name);
            snprintf(an, sizeof an, "%s.lora_a", name);
            st = add_noise(w, &rng, an, o->type, bt->ne[0], o->rank, &keep[(*n_keep)++]);
            snprintf(an, sizeof an, "%s.lora_b", name);
            if (st == PL_OK) st = add_noise(w, &rng, an, o->type, o->rank, bt->ne[1], &keep[(*n_keep)++]);
        }
    return st == PL_OK ? pl_gguf_writer_write(w, o->out) : st;
}

int pl_cmd_mkmodel_lora(int argc, char **argv) {
    lora_opts o;
    int rc = parse(argc, argv, &o);
    if (rc) return rc < 0 ? 0 : rc;
    pl_gguf *base = NULL;
    pl_status st = pl_gguf_open(o.base, &base);
    if (st != PL_OK) return pl_cli_fail(C, "--lora-of: %s", pl_last_error());
    /* two adapter tensors at most per base tensor */
    void **keep = calloc((size_t)pl_gguf_n_tensors(base) * 2 + 1, sizeof *keep);
    size_t n_keep = 0;
    pl_gguf_writer *w = pl_gguf_writer_create();
    st = keep && w ? build(&o, base, w, keep, &n_keep) : pl_fail(PL_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n_keep; i++) free(keep[i]);
    free(keep);
    pl_gguf_writer_destroy(w);
    pl_gguf_close(base);
    if (st != PL_OK) return pl_cli_fail(C, "%s", pl_last_error());
    printf("wrote %s: LoRA adapter of %s, rank %lld, alpha %g, %s\n", o.out, o.base,
           (long long)o.rank,
           o.alpha, o.targets);
    return 0;
}
