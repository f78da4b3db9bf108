/* cli/cmd_mkmodel — `pagellm mkmodel OUT.gguf --vocab-from FILE.gguf --dim D --layers L
 * --heads H --kv-heads K --ffn F [--type T] [--seed S] [--ctx N] [--sliding-window W]`: a
 * random-weight Llama; with `--arch qwen3|mistral3|gemma2|gemma3|phi3` (and their flags, see
 * usage) those layouts; with
 * `--arch bert [--pooling mean|cls|last|rank]` a random-weight BERT embedding model (below;
 * rank: a reranker with a classification head cls, cls.output).
 * `--shape 110m|1b|3b` names the shapes of the benchmark tables (docs/BENCHMARKS.md), and
 * `--shape qwen3-8b`, `gemma3-4b`, `mistral3-3b`, ... real models' sizes with their layout and
 * RoPE settings.
 *
 * The file is a complete "llama" GGUF: every tokenizer.* key of FILE copied as is, the llama.*
 * hyper-parameters, and the tensors of a llama.cpp Llama (GGUF ne[0] = input features):
 *
 *   token_embd.weight [dim, vocab]   output_norm.weight [dim]   output.weight [dim, vocab]
 *   blk.i.attn_norm [dim]  attn_q [dim, dim]  attn_k [dim, kv_dim]  attn_v [dim, kv_dim]
 *   blk.i.attn_output [dim, dim]  ffn_norm [dim]  ffn_gate [dim, ffn]  ffn_up [dim, ffn]
 *   blk.i.ffn_down [ffn, dim]
 *
 * Weights: seeded uniform noise with standard deviation 0.02 (GPT-2's initialisation), the
 * projections that write into the residual stream (attn_output, ffn_down) scaled by
 * 1/sqrt(2 * layers) so that the residual stays near its initial size however deep the model;
 * norms are 1. Matrices are stored in --type (quantized row by row with pl_quantize_row;
 * q4_k_m is q4_K with q6_K for output.weight and for attn_v / ffn_down of the layers llama.cpp's
 * Q4_K_M mix picks; q5_k_m the same with q5_K, as its Q5_K_M), norms in f32. The same flags and seed always give the same bytes.
 *
 * Memory: the GGUF writer reads tensor data at write time, so every tensor is generated straight
 * into its final (quantized) buffer, one row of f32 at a time: peak memory is the output size
 * plus one row, never an f32 copy of the model.
 *
 * --arch qwen3 adds blk.i.attn_q_norm / attn_k_norm [head_dim]; --arch qwen3moe is qwen3's
 * attention with a mixture-of-experts FFN, as --experts N does for llama (Mixtral): per layer
 * ffn_gate_inp [dim, N] (the router, always f32, std 0.5 so that the routing is decisive),
 * ffn_gate_exps / ffn_up_exps [dim, F, N] and ffn_down_exps [F, dim, N] instead of ffn_gate /
 * ffn_up / ffn_down (F: --expert-ffn for qwen3moe, --ffn for llama); --arch mistral3 is llama's
 * layout with its own keys (attention.temperature_scale, rope.scaling.yarn_*); --arch gemma3 is
 * gemma2's layout plus those Q/K norms, without attn_logit_softcapping, with rope.freq_base_swa.
 * --arch gemma2 and --arch phi3 write those layouts as llama.cpp's converters do (gemma2: no
 * output.weight, blk.i.post_attention_norm and post_ffw_norm, attn/final_logit_softcapping,
 * attention.key_length from --head-dim; phi3: blk.i.attn_qkv [dim, q + 2 kv] and ffn_up
 * [dim, 2 ffn] with the gate rows first, no ffn_gate), their norms 1 + noise so that a norm read
 * from the wrong tensor shows. --rope-scaling linear / yarn writes rope.scaling.* keys; llama3
 * writes Llama 3.1's rope_freqs.weight as llama.cpp's converter computes it; phi3's longrope
 * writes rope_factors_long / rope_factors_short and original_context_length. Only llama's
 * general.name names its architecture (llama.cpp changes Phi-3 vocabularies by name).
 *
 * --arch gpt-oss writes llama.cpp's openai-moe layout: qwen3moe's MoE tensors plus Q/K/V and
 * output biases (attn_q/k/v/output.bias), blk.i.attn_sinks.weight [heads] (mean 1, so that a
 * sink weighs as much as a few positions), post_attention_norm as the FFN norm (no ffn_norm),
 * the router's bias ffn_gate_inp.bias [N] and the experts' ffn_{gate,up}_exps.bias [F, N] (std
 * 5, so that a fifth of the gates and ups pass the clamped SwiGLU's limit 7) and ffn_down_exps.bias
 * [dim, N]; keys expert_feed_forward_length (--expert-ffn, default --ffn) and
 * attention.sliding_window (default 128; llama.cpp's pattern puts it on even layers). --type
 * mxfp4 (any MoE layout) writes the experts in mxfp4 and every other matrix in f32.
 *
 * --arch gemma4 --experts N writes Gemma 4's MoE variant (26B-A4B) as llama.cpp's converter
 * does: every layer keeps its dense FFN (the shared expert) and adds the router ffn_gate_inp
 * [dim, N] (f32, std 0.5 sqrt(dim): its input is normed to 1 / sqrt(dim)) with its scale
 * ffn_gate_inp.scale [dim], the fused ffn_gate_up_exps [dim, 2 F, N] (each expert's gate rows,
 * then its up rows), ffn_down_exps [F, dim, N] with the per-expert scale ffn_down_exps.scale
 * [N] (mean 1, std 0.3), and the norms pre_ffw_norm_2, post_ffw_norm_1, post_ffw_norm_2; key
 * expert_feed_forward_length (--expert-ffn, default --ffn / 2). --split-experts writes gate and
 * up apart, ffn_gate_exps / ffn_up_exps [dim, F, N], each with its per-expert scale
 * ffn_gate_exps.scale / ffn_up_exps.scale [N] (mean 1, std 0.3), which llama.cpp reads and
 * applies for that layout (it has none for the fused one).
 *
 * --arch bert writes llama.cpp's bert layout (bert.* keys, attention.causal false,
 * pooling_type; token_embd, position_embd [dim, ctx], token_types [dim, 2], token_embd_norm,
 * per layer attn_q/k/v/output with biases, attn_output_norm, ffn_up/ffn_down with biases,
 * layer_output_norm; norms' weights 1 + noise, biases noise) and builds its own WordPiece
 * vocabulary from FILE's SentencePiece pieces: [PAD] [UNK] [CLS] [SEP] [MASK] (ids 0..4), every
 * printable ASCII character as a word start and as a continuation, then each piece made of ASCII
 * letters and digits, lowercased: "▁word" pieces as word starts (GGUF spelling: U+2581 prefix)
 * and the rest as `##` continuations (GGUF spelling: no prefix), first occurrence kept.
 *
 * Exit codes: 2 for usage errors (missing or malformed flags, shapes that do not fit: dim % heads,
 * heads % kv-heads, odd head size, dim or ffn not a multiple of the type's block size), 1 for
 * runtime errors (unreadable vocabulary file, out of memory, write failure).
 */
#include "cli/flags.h"
#include "base/buf.h"
#include "cli/cli.h"

#include "base/rng.h"
#include "gguf/gguf.h"
#include "kernels/matmul.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define C "mkmodel"

typedef struct {
    const char *out;        /* output path */
    const char *vocab_from; /* GGUF whose tokenizer.* keys are copied */
    int64_t dim, layers, heads, kv_heads, ffn, ctx, seed;
    pl_dtype type;          /* matrix type */
    pl_dtype more;          /* type of output, and of attn_v / ffn_down in the layers that
                               llama.cpp's *_M mixes give more bits (= type otherwise) */
    int ftype;              /* general.file_type (llama.cpp's llama_ftype) */
    int bert;               /* --arch bert */
    int pooling;            /* bert: 1 mean, 2 cls, 3 last (llama.cpp's pooling_type) */
    const char *arch;       /* llama, qwen3, mistral3, gemma2, gemma3, phi3 or bert */
    int64_t head_dim;       /* attention.key_length (default dim / heads) */
    int64_t window;         /* attention.sliding_window (0: none; gemma2 default 4096,
                               gemma3 1024) */
    double rope_base;       /* rope.freq_base */
    const char *rope_scaling; /* none, linear, yarn, llama3 */
    double rope_factor, rope_attn_factor, low_freq, high_freq;
    int64_t rope_orig_ctx;  /* yarn: original_context_length; llama3: the original context */
    double attn_softcap, final_softcap; /* gemma2 (gemma3: final only, when > 0) */
    int64_t swa_pattern;    /* gemma2/3: attention.sliding_window_pattern (0: not written) */
    double rope_base_swa;   /* gemma3: rope.freq_base_swa (0: not written) */
    double attn_temp;       /* mistral3: attention.temperature_scale (0: not written) */
    double beta_fast, beta_slow, log_mul; /* mistral3 yarn keys (< 0: not written) */
    int64_t experts, experts_used; /* MoE (qwen3moe; llama: Mixtral): expert_count,
                                      expert_used_count (0: a dense FFN) */
    int64_t expert_ffn;     /* qwen3moe: expert_feed_forward_length (llama's is --ffn) */
    /* gemma4: the window layers' head size (key_length_swa; head_dim is the full layers'), the
     * full layers' KV heads (kv_heads: the window layers'), the layers that reuse an earlier
     * layer's KV, the per-layer embedding size, the FFN width of the shared-KV layers (0: ffn) */
    int64_t head_dim_swa, kv_heads_full, shared_kv, per_layer_dim, ffn_wide;
    int split_experts;      /* gemma4 --experts: ffn_gate_exps / ffn_up_exps apart, each with its
                               per-expert .scale (--split-experts) */
    int shape;              /* --shape: an index into shapes, or -1 */
    const char *type_name;  /* --type as the types table spells it */
} mk_opts;

static int is_arch(const mk_opts *o, const char *a) { return !strcmp(o->arch, a); }
static int is_gemma(const mk_opts *o) {
    return is_arch(o, "gemma2") || is_arch(o, "gemma3") || is_arch(o, "gemma4");
}
/* gemma4: does layer l use the window (--swa-pattern N: l % N < N - 1), does it own its KV */
static int g4_window(const mk_opts *o, int64_t l) {
    return o->swa_pattern == 0 || l % o->swa_pattern < o->swa_pattern - 1;
}
static int g4_own_kv(const mk_opts *o, int64_t l) { return l < o->layers - o->shared_kv; }
static int64_t g4_head_dim(const mk_opts *o, int64_t l) {
    return g4_window(o, l) ? o->head_dim_swa : o->head_dim;
}
static int64_t g4_kv_heads(const mk_opts *o, int64_t l) {
    return g4_window(o, l) ? o->kv_heads : o->kv_heads_full;
}
static int64_t g4_ffn(const mk_opts *o, int64_t l) {
    return o->ffn_wide && !g4_own_kv(o, l) ? o->ffn_wide : o->ffn;
}

/* The writable matrix types and their general.file_type values. */
static const struct {
    const char *name;
    pl_dtype type;
    pl_dtype more;
    int ftype;
} types[] = {
    {"f32", PL_DT_F32, PL_DT_F32, 0},      {"f16", PL_DT_F16, PL_DT_F16, 1},
    {"bf16", PL_DT_BF16, PL_DT_BF16, 32},  {"q8_0", PL_DT_Q8_0, PL_DT_Q8_0, 7},
    {"q4_0", PL_DT_Q4_0, PL_DT_Q4_0, 2},   {"q6_k", PL_DT_Q6_K, PL_DT_Q6_K, 18},
    {"q4_k_m", PL_DT_Q4_K, PL_DT_Q6_K, 15}, {"q5_k_m", PL_DT_Q5_K, PL_DT_Q6_K, 17},
    /* one type for every matrix (q3_k is llama.cpp's Q3_K_S file type) */
    {"q4_1", PL_DT_Q4_1, PL_DT_Q4_1, 3},   {"q5_0", PL_DT_Q5_0, PL_DT_Q5_0, 8},
    {"q5_1", PL_DT_Q5_1, PL_DT_Q5_1, 9},   {"iq4_nl", PL_DT_IQ4_NL, PL_DT_IQ4_NL, 25},
    {"q2_k", PL_DT_Q2_K, PL_DT_Q2_K, 10},  {"q3_k", PL_DT_Q3_K, PL_DT_Q3_K, 11},
    {"iq4_xs", PL_DT_IQ4_XS, PL_DT_IQ4_XS, 30},
    /* the experts only (llama.cpp's MXFP4_MOE file type); the other matrices f32 */
    {"mxfp4", PL_DT_MXFP4, PL_DT_F32, 38},
};

/* llama.cpp's Q4_K_M rule for attn_v and ffn_down: the first and last eighth of the layers and
 * every third one between get the larger type. */
static int more_bits(int64_t l, int64_t n) {
    return l < n / 8 || l >= 7 * n / 8 || (l - n / 8) % 3 == 2;
}

/* The named shapes of the benchmark tables (--shape); the vocabulary is --vocab-from's (the
 * 32,000-token llama-spm one in docs/BENCHMARKS.md). */
typedef struct {
    const char *name;
    int64_t dim, layers, heads, kv_heads, ffn;
    /* the real models' own settings (0 / NULL: llama's defaults) */
    const char *arch;
    int64_t head_dim, window, ctx;
    double rope_base, rope_base_swa, attn_temp;
    const char *rope_scaling;
    double rope_factor;
    int64_t rope_orig_ctx;
    int64_t experts, experts_used, expert_ffn; /* MoE (0: dense) */
} mk_shape;

/* The gemma4 shapes' own settings: --head-dim-swa, --kv-heads-full, --shared-kv-layers,
 * --per-layer-dim, --ffn-wide, --swa-pattern, --final-softcap. */
typedef struct {
    const char *name;
    int64_t head_dim_swa, kv_heads_full, shared_kv, per_layer_dim, ffn_wide, swa_pattern;
    double final_softcap;
} mk_shape_g4;

/* Sizes of real models (their Hugging Face configs), for benchmarks at the real shapes. */
static const mk_shape shapes[] = {
    {"110m", 768, 12, 12, 4, 2048, NULL, 0, 0, 0, 0, 0, 0, NULL, 0, 0, 0, 0, 0},
    {"1b", 2048, 16, 32, 8, 8192, NULL, 0, 0, 0, 0, 0, 0, NULL, 0, 0, 0, 0, 0},
    {"3b", 3072, 28, 24, 8, 8192, NULL, 0, 0, 0, 0, 0, 0, NULL, 0, 0, 0, 0, 0},
    {"qwen3-0.6b", 1024, 28, 16, 8, 3072, "qwen3", 128, 0, 40960, 1e6, 0, 0, NULL, 0, 0, 0, 0, 0},
    {"qwen3-8b", 4096, 36, 32, 8, 12288, "qwen3", 128, 0, 40960, 1e6, 0, 0, NULL, 0, 0, 0, 0, 0},
    {"mistral3-3b", 3072, 26, 32, 8, 9216, "mistral3", 128, 0, 262144, 1e6, 0, 0.1, "yarn", 16,
     16384, 0, 0, 0},
    {"mistral3-8b", 4096, 34, 32, 8, 14336, "mistral3", 128, 0, 262144, 1e6, 0, 0.1, "yarn", 16,
     16384, 0, 0, 0},
    {"gemma3-1b", 1152, 26, 4, 1, 6912, "gemma3", 256, 512, 32768, 1e6, 1e4, 0, NULL, 0, 0, 0, 0, 0},
    {"gemma3-4b", 2560, 34, 8, 4, 10240, "gemma3", 256, 1024, 131072, 1e6, 1e4, 0, "linear", 8,
     0, 0, 0, 0},
    {"qwen3-30b-a3b", 2048, 48, 32, 4, 6144, "qwen3moe", 128, 0, 40960, 1e6, 0, 0, NULL, 0, 0,
     128, 8, 768},
    {"gpt-oss-20b", 2880, 24, 64, 8, 2880, "gpt-oss", 64, 128, 131072, 150000, 0, 0, "yarn", 32,
     4096, 32, 4, 2880},
    /* Gemma 4 31B: 5 window layers (16 KV heads of 256) to 1 full (4 KV heads of 512) */
    {"gemma4-31b", 5376, 60, 32, 16, 21504, "gemma4", 512, 1024, 262144, 1e6, 1e4, 0, NULL, 0,
     0, 0, 0, 0},
    /* Gemma 4 E2B: per-layer embeddings of 256, the last 20 of 35 layers share KV and have a
     * double-wide FFN, 4 window layers to 1 full */
    {"gemma4-e2b", 1536, 35, 8, 1, 6144, "gemma4", 512, 512, 131072, 1e6, 1e4, 0, NULL, 0, 0, 0,
     0, 0},
    /* Gemma 4 26B-A4B: 5 window layers (8 KV heads of 256) to 1 full (2 KV heads of 512), a
     * dense FFN of 2112 beside 8 of 128 experts of 704 */
    {"gemma4-26b-a4b", 2816, 30, 16, 8, 2112, "gemma4", 512, 1024, 262144, 1e6, 1e4, 0, NULL, 0,
     0, 128, 8, 704},
};
static const mk_shape_g4 shapes_g4[] = {
    {"gemma4-31b", 256, 4, 0, 0, 0, 6, 30},
    {"gemma4-e2b", 256, 1, 20, 256, 12288, 5, 30},
    {"gemma4-26b-a4b", 256, 2, 0, 0, 0, 6, 30},
};
#define SHAPE_NAMES "110m, 1b, 3b, qwen3-0.6b, qwen3-8b, mistral3-3b, mistral3-8b, gemma3-1b, " \
                    "gemma3-4b, qwen3-30b-a3b, gpt-oss-20b, gemma4-31b, gemma4-e2b, " \
                    "gemma4-26b-a4b"

/* --type: a row of types */
static int set_type(const char *cmd, const pl_flag *f, const char *arg, void *opts) {
    mk_opts *o = opts;
    size_t i = 0, n = sizeof types / sizeof types[0];
    (void)f;
    while (i < n && strcasecmp(arg, types[i].name)) i++; /* GGML writes Q4_K_M, q3_K */
    if (i == n) {
        fprintf(stderr, "pagellm %s: --type: '%s' is not one of f32, f16, bf16, q8_0, q4_0, q6_k, "
                "q4_k_m, q5_k_m, q4_1, q5_0, q5_1, iq4_nl, q2_k, q3_k, iq4_xs, mxfp4 (any case)\n", cmd,
                arg);
        return 2;
    }
    o->type = types[i].type;
    o->more = types[i].more;
    o->ftype = types[i].ftype;
    o->type_name = types[i].name;
    return 0;
}

/* --shape, --arch, --rope-scaling and --pooling: one of a list of names (aux says which) */
enum { NAME_SHAPE, NAME_ARCH, NAME_ROPE_SCALING, NAME_POOLING };
static int set_name(const char *cmd, const pl_flag *f, const char *arg, void *opts) {
    static const char *const archs[] = {"llama", "bert", "gemma2", "phi3", "qwen3", "mistral3",
                                        "gemma3", "qwen3moe", "gpt-oss", "gemma4", NULL};
    static const char *const scalings[] = {"none", "linear", "yarn", "llama3", "longrope", NULL};
    static const char *const poolings[] = {"mean", "cls", "last", "rank", NULL};
    mk_opts *o = opts;
    int i = 0;
    switch (f->aux) {
    case NAME_SHAPE: {
        int n = (int)(sizeof shapes / sizeof shapes[0]);
        while (i < n && strcmp(arg, shapes[i].name)) i++;
        if (i < n) return o->shape = i, 0;
        fprintf(stderr, "pagellm %s: --shape: '%s' is not one of " SHAPE_NAMES "\n", cmd, arg);
        return 2;
    }
    case NAME_ARCH:
        while (archs[i] && strcmp(arg, archs[i])) i++;
        if (archs[i]) return o->arch = arg, o->bert = !strcmp(arg, "bert"), 0;
        fprintf(stderr, "pagellm %s: --arch: '%s' is not llama, qwen3, qwen3moe, gpt-oss, "
                "mistral3, gemma2, gemma3, gemma4, phi3 or bert\n", cmd, arg);
        return 2;
    case NAME_ROPE_SCALING:
        while (scalings[i] && strcmp(arg, scalings[i])) i++;
        if (scalings[i]) return o->rope_scaling = arg, 0;
        fprintf(stderr, "pagellm %s: --rope-scaling: '%s' is not none, linear, yarn, llama3 or "
                "longrope\n", cmd, arg);
        return 2;
    default:
        while (poolings[i] && strcmp(arg, poolings[i])) i++;
        if (poolings[i]) return o->pooling = i + 1, 0; /* llama.cpp's pooling_type */
        fprintf(stderr, "pagellm %s: --pooling: '%s' is not mean, cls, last or rank\n", cmd, arg);
        return 2;
    }
}

/* --lora-of is mkmodel_lora.c's (pl_cmd_mkmodel hands it the whole command line): listed here */
static int lora_elsewhere(const char *cmd, const pl_flag *f, const char *arg, void *opts) {
    (void)f, (void)arg, (void)opts;
    fprintf(stderr, "pagellm %s: --lora-of: not after the flags of a model\n", cmd);
    return 2;
}

#define I64(name, field, lo, hi, meta, help) PL_FLAG_ROW_I64(mk_opts, name, 0, field, lo, hi, meta, help)
#define F64(name, field, lo, hi, meta, help) PL_FLAG_ROW_F64(mk_opts, name, 0, field, lo, hi, meta, help)
static const pl_flag MKMODEL_FLAGS[] = {
    PL_FLAG_ROW_STR(mk_opts, "vocab-from", 0, vocab_from, "FILE",
     "GGUF whose tokenizer.* metadata is copied"),
    PL_FLAG_ROW_FN("shape", 0, set_name, NAME_SHAPE, "NAME",
     "the benchmark tables' shapes: 110m (dim 768, 12 layers,\n"
     "12 heads, 4 KV heads, ffn 2048), 1b (2048, 16, 32, 8,\n"
     "8192), 3b (3072, 28, 24, 8, 8192); real models' sizes,\n"
     "layouts and RoPE settings: qwen3-0.6b, qwen3-8b,\n"
     "mistral3-3b (Ministral 3), mistral3-8b, gemma3-1b,\n"
     "gemma3-4b, qwen3-30b-a3b, gpt-oss-20b, gemma4-31b,\n"
     "gemma4-e2b, gemma4-26b-a4b; the flags override a shape"),
    I64("dim", dim, 1, 1 << 16, "D", "embedding size (a multiple of --heads and of the type's\nblock)"),
    I64("layers", layers, 1, 1024, "L", "transformer blocks"),
    I64("heads", heads, 1, 1024, "H", "attention heads (dim / heads must be even)"),
    I64("kv-heads", kv_heads, 1, 1024, "K", "key/value heads (divides --heads)"),
    I64("ffn", ffn, 1, 1 << 20, "F", "feed-forward size (a multiple of the type's block)"),
    PL_FLAG_ROW_FN("type", 0, set_type, 0, "T",
     "matrix type: f32 (default), f16, bf16, q8_0, q4_0, q6_k,\n"
     "q4_k_m (q4_K, with q6_K for output and some\n"
     "attn_v/ffn_down), q5_k_m (the same with q5_K),\n"
     "q4_1, q5_0, q5_1, iq4_nl, q2_k, q3_k,\n"
     "iq4_xs (every matrix), mxfp4 (a MoE model's experts)"),
    I64("seed", seed, 0, 0x1p63, "S", "random seed (default 1)"),
    I64("ctx", ctx, 1, 1 << 24, "N", "llama.context_length (default 2048; bert 512)"),
    PL_FLAG_ROW_FN("arch", 0, set_name, NAME_ARCH, "A",
     "llama (default), qwen3, qwen3moe, gpt-oss, mistral3,\n"
     "gemma2, gemma3, gemma4, phi3 or bert (below)"),
    PL_FLAG_ROW_FN("pooling", 0, set_name, NAME_POOLING, "P",
     "bert: mean (default), cls, last or rank (a reranker: a\n"
     "classification head on [CLS] query [SEP] document [SEP])"),
    I64("experts", experts, 1, 1 << 16, "N",
     "MoE (qwen3moe, gpt-oss, llama = Mixtral): N experts per\n"
     "layer, the router ffn_gate_inp (f32) and\nffn_{gate,up,down}_exps"),
    I64("experts-used", experts_used, 1, 1 << 16, "K", "experts per token (default 2)"),
    I64("expert-ffn", expert_ffn, 1, 1 << 20, "F",
     "qwen3moe / gpt-oss expert_feed_forward_length (llama's\nexperts: --ffn)"),
    F64("rope-base-swa", rope_base_swa, 1, 1e12, "B",
     "gemma3/4 rope.freq_base_swa (llama.cpp's default 10000)"),
    I64("head-dim-swa", head_dim_swa, 2, 1024, "N",
     "gemma4 attention.key_length_swa (default --head-dim)"),
    I64("kv-heads-full", kv_heads_full, 1, 1024, "K",
     "gemma4 the full layers' KV heads (default --kv-heads)"),
    I64("shared-kv-layers", shared_kv, 1, 1024, "N",
     "gemma4: the last N layers reuse an earlier layer's KV"),
    I64("per-layer-dim", per_layer_dim, 1, 1 << 16, "P",
     "gemma4 per-layer token embeddings of P values per layer"),
    PL_FLAG_ROW_SET(mk_opts, "split-experts", 0, split_experts,
     "gemma4 --experts: ffn_gate_exps and ffn_up_exps apart\n(not fused), each with a per-expert "
     "scale [N]"),
    I64("ffn-wide", ffn_wide, 1, 1 << 20, "F",
     "gemma4 the shared-KV layers' FFN width\n(feed_forward_length becomes an array; default --ffn)"),
    F64("attn-temp-scale", attn_temp, 1e-6, 1e3, "S",
     "mistral3 attention.temperature_scale (Llama 4's beta)"),
    F64("yarn-beta-fast", beta_fast, 1e-3, 1e3, "F",
     "mistral3 rope.scaling.yarn_beta_fast (written only when\ngiven)"),
    F64("yarn-beta-slow", beta_slow, 1e-3, 1e3, "F", "mistral3 rope.scaling.yarn_beta_slow (likewise)"),
    F64("yarn-log-mul", log_mul, 1e-3, 1e3, "M", "mistral3 rope.scaling.yarn_log_multiplier (likewise)"),
    I64("head-dim", head_dim, 2, 1024, "N", "attention.key_length (default dim / heads)"),
    I64("sliding-window", window, 0, 1 << 24, "W",
     "attention.sliding_window: llama every layer attends to\n"
     "its last W positions; gemma2 its even layers (default\n"
     "4096); phi3 writes it (llama.cpp and pagellm ignore it);\ndefault none"),
    F64("attn-softcap", attn_softcap, 1e-3, 1e6, "C", "gemma2 attn_logit_softcapping (default 50)"),
    F64("final-softcap", final_softcap, 1e-3, 1e6, "C",
     "gemma2 final_logit_softcapping (default 30); gemma3:\nwritten only when given"),
    I64("swa-pattern", swa_pattern, 1, 1 << 20, "N",
     "gemma2/3 attention.sliding_window_pattern: layer l is\n"
     "local when l % N < N - 1 (not written by default:\n"
     "llama.cpp's defaults, 2 and 6); gemma4 (default 6)"),
    F64("rope-base", rope_base, 1, 1e12, "B", "rope.freq_base (default 10000)"),
    PL_FLAG_ROW_FN("rope-scaling", 0, set_name, NAME_ROPE_SCALING, "S",
     "none (default), linear, yarn (rope.scaling.* keys) or\n"
     "llama3 (Llama 3.1: the rope_freqs.weight tensor, as\n"
     "llama.cpp's converter) or, for phi3, longrope\n"
     "(rope_factors_long/short tensors: long ones of mean\n"
     "(1 + factor) / 2, short ones near 1.1)"),
    F64("rope-factor", rope_factor, 1e-3, 1e6, "F", "scaling factor (default 8 for llama3, else 4)"),
    I64("rope-orig-ctx", rope_orig_ctx, 1, 1 << 24, "N",
     "yarn original_context_length / llama3 original context\n(8192)"),
    F64("rope-attn-factor", rope_attn_factor, 1e-3, 1e3, "A",
     "rope.scaling.attn_factor (written only when given)"),
    F64("rope-low-freq", low_freq, 1e-3, 1e3, "F", "llama3 low_freq_factor (default 1)"),
    F64("rope-high-freq", high_freq, 1e-3, 1e3, "F", "llama3 high_freq_factor (default 4)"),
    PL_FLAG_ROW_FN("lora-of", 0, lora_elsewhere, 0, "BASE.gguf",
     "a random LoRA adapter of BASE instead (--lora-rank R,\n"
     "--lora-alpha A, --lora-targets LIST, --type f32|f16,\n--seed S)"),
};
#undef I64
#undef F64

static const pl_flag_cmd MKMODEL = {
    "mkmodel",
    "usage: pagellm mkmodel OUT.gguf --vocab-from FILE.gguf --dim D --layers L --heads H\n"
    "                       --kv-heads K --ffn F [--type T] [--seed S] [--ctx N]\n"
    "       pagellm mkmodel OUT.gguf --vocab-from FILE.gguf --shape NAME [--type T] ...\n"
    "       pagellm mkmodel OUT.gguf --lora-of BASE.gguf [--lora-rank R] [--lora-alpha A]\n"
    "                       [--lora-targets attn_q,attn_v,...] [--type f32|f16] [--seed S]\n"
    "         (a random LoRA adapter of BASE, as convert_lora_to_gguf.py lays it out)\n"
    "  writes a random-weight Llama with FILE's tokenizer (for tests and benchmarks)\n",
    "architectures (--arch):\n"
    "  bert      a random BERT embedding model and a WordPiece vocabulary built from FILE's\n"
    "            pieces; no --kv-heads\n"
    "  gemma2    post-attention/FFW norms, GeGLU, tied output, soft-capping, sliding window\n"
    "            on even layers (norms 1 + noise)\n"
    "  phi3      fused attn_qkv and gate/up ffn_up (norms 1 + noise)\n"
    "  qwen3     attn_q_norm / attn_k_norm per head, NEOX RoPE, no biases\n"
    "  qwen3moe  qwen3's attention, a mixture-of-experts FFN (default --experts 8\n"
    "            --experts-used 2 --expert-ffn F/2)\n"
    "  gpt-oss   biases, attention sinks, window on even layers (default 128), MoE with\n"
    "            biased experts and the clamped SwiGLU (default --experts 8 --experts-used 2\n"
    "            --expert-ffn F); --type mxfp4 writes its experts in mxfp4, the rest in f32\n"
    "  mistral3  Mistral 3 / Ministral 3 text: llama's layout; --attn-temp-scale, yarn's\n"
    "            --yarn-beta-fast/--yarn-beta-slow/--yarn-log-mul keys\n"
    "  gemma3    Gemma 3 text: gemma2's layout plus Q/K norms, window on 5 of 6 layers\n"
    "            (default 1024), --rope-base-swa, no attention soft-capping\n"
    "  gemma4    Gemma 4 text: gemma3's layout with window and full layers of their own head\n"
    "            sizes (--head-dim full, --head-dim-swa window) and KV heads (--kv-heads\n"
    "            window, --kv-heads-full), the pattern as an array (--swa-pattern N, default\n"
    "            6), V normed, rope_freqs for the full layers, layer_output_scale (default\n"
    "            window 512); --experts N: the MoE variant (26B-A4B), experts beside\n"
    "            the dense FFN (default --experts-used 2 --expert-ffn F/2)\n",
    MKMODEL_FLAGS, sizeof MKMODEL_FLAGS / sizeof MKMODEL_FLAGS[0], -1, 1};

/* Prints "pagellm mkmodel: MESSAGE" and the usage to stderr; returns exit code 2. */
static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "pagellm " C ": ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    pl_flags_usage(&MKMODEL, stderr);
    return 2;
}

/* Returns 0 when the options are complete and consistent, else the exit code (-1: --help). */
static int parse(int argc, char **argv, mk_opts *o) {
    memset(o, 0, sizeof *o);
    o->ctx = -1;
    o->pooling = 1;
    o->seed = 1;
    o->type = o->more = PL_DT_F32;
    o->type_name = "f32";
    o->shape = -1;
    o->arch = NULL;
    o->window = -1;
    o->rope_base = 0;
    o->rope_scaling = NULL;
    o->beta_fast = o->beta_slow = o->log_mul = -1;
    o->rope_factor = o->rope_attn_factor = -1;
    o->rope_orig_ctx = -1;
    o->low_freq = 1;
    o->high_freq = 4;
    o->attn_softcap = 50;
    o->final_softcap = -1;
    int first, rc = pl_flags_parse(&MKMODEL, argc, argv, o, &first);
    if (rc) return rc == PL_FLAGS_HELP ? -1 : rc;
    if (first >= argc) return usage_error("no output file given");
    o->out = argv[first];
    if (o->shape >= 0) { /* the shape fills what the flags left unset */
/* a field the flags left 0 takes the shape's */
#define UNSET(f, from) do { if (!o->f) o->f = (from)->f; } while (0)
        const mk_shape *sh = &shapes[o->shape];
        UNSET(dim, sh);
        UNSET(layers, sh);
        UNSET(heads, sh);
        UNSET(kv_heads, sh);
        UNSET(ffn, sh);
        if (!o->arch && sh->arch) o->arch = sh->arch;
        if (!o->arch || !sh->arch || !strcmp(o->arch, sh->arch)) { /* its own layout's keys */
            UNSET(head_dim, sh);
            if (o->window < 0 && sh->window) o->window = sh->window;
            if (o->ctx < 0 && sh->ctx) o->ctx = sh->ctx;
            UNSET(rope_base, sh);
            UNSET(rope_base_swa, sh);
            UNSET(attn_temp, sh);
            UNSET(experts, sh);
            UNSET(experts_used, sh);
            UNSET(expert_ffn, sh);
            for (size_t i = 0; i < sizeof shapes_g4 / sizeof *shapes_g4; i++) {
                const mk_shape_g4 *g = &shapes_g4[i];
                if (strcmp(g->name, sh->name)) continue;
                UNSET(head_dim_swa, g);
                UNSET(kv_heads_full, g);
                UNSET(shared_kv, g);
                UNSET(per_layer_dim, g);
                UNSET(ffn_wide, g);
                UNSET(swa_pattern, g);
                if (o->final_softcap < 0) o->final_softcap = g->final_softcap;
            }
            if (!o->rope_scaling && sh->rope_scaling) {
                o->rope_scaling = sh->rope_scaling;
                if (o->rope_factor < 0) o->rope_factor = sh->rope_factor;
                if (o->rope_orig_ctx < 0 && sh->rope_orig_ctx) o->rope_orig_ctx = sh->rope_orig_ctx;
            }
        }
#undef UNSET
    }
    if (!o->arch) o->arch = "llama";
    if (!o->rope_scaling) o->rope_scaling = "none";
    if (!o->rope_base) o->rope_base = 10000;
    if (o->ctx < 0) o->ctx = o->bert ? 512 : 2048;
    if (o->bert) o->kv_heads = o->heads; /* no grouped-query attention */
    if (o->head_dim <= 0 && o->heads > 0) o->head_dim = o->dim / o->heads;
    const int gemma = is_gemma(o);
    const int gptoss = is_arch(o, "gpt-oss");
    if (o->window < 0)
        o->window = is_arch(o, "gemma2")   ? 4096
                    : is_arch(o, "gemma3") ? 1024
                    : is_arch(o, "gemma4") ? 512
                    : gptoss               ? 128
                                           : 0;
    if (gptoss && !o->window)
        return usage_error("--sliding-window: gpt-oss needs a window (llama.cpp requires the key)");
    const int g4 = is_arch(o, "gemma4");
    if ((o->head_dim_swa || o->kv_heads_full || o->shared_kv || o->per_layer_dim || o->ffn_wide) &&
        !g4)
        return usage_error("--head-dim-swa, --kv-heads-full, --shared-kv-layers, --per-layer-dim "
                           "and --ffn-wide are for --arch gemma4");
    if (g4) {
        if (!o->swa_pattern) o->swa_pattern = 6;
        if (!o->head_dim_swa) o->head_dim_swa = o->head_dim;
        if (!o->kv_heads_full) o->kv_heads_full = o->kv_heads;
    }
    if (o->final_softcap < 0 && is_arch(o, "gemma2")) o->final_softcap = 30;
    if (o->swa_pattern && !gemma)
        return usage_error("--swa-pattern is for --arch gemma2, gemma3 or gemma4");
    if (o->rope_base_swa && !is_arch(o, "gemma3") && !g4)
        return usage_error("--rope-base-swa is for --arch gemma3 or gemma4");
    if ((o->attn_temp || o->beta_fast >= 0 || o->beta_slow >= 0 || o->log_mul >= 0) &&
        !is_arch(o, "mistral3"))
        return usage_error("--attn-temp-scale and --yarn-* are for --arch mistral3");
    if ((is_arch(o, "qwen3moe") || gptoss) && !o->experts) o->experts = 8;
    if (o->experts && !o->experts_used) o->experts_used = 2;
    if ((o->experts || o->experts_used) && !is_arch(o, "llama") && !is_arch(o, "qwen3moe") &&
        !gptoss && !g4)
        return usage_error("--experts and --experts-used are for --arch qwen3moe, gpt-oss, llama "
                           "or gemma4");
    if (o->type == PL_DT_MXFP4 && !o->experts)
        return usage_error("--type mxfp4 is for the experts of a mixture of experts (--arch "
                           "qwen3moe, gpt-oss, or --experts N)");
    if (o->experts_used > o->experts)
        return usage_error("--experts-used %lld is more than --experts %lld",
                           (long long)o->experts_used, (long long)o->experts);
    if (o->expert_ffn && !is_arch(o, "qwen3moe") && !gptoss && !(g4 && o->experts))
        return usage_error("--expert-ffn is for --arch qwen3moe, gpt-oss or gemma4 --experts N "
                           "(llama's experts are --ffn wide)");
    if (o->split_experts && !(g4 && o->experts))
        return usage_error("--split-experts is for --arch gemma4 --experts N");
    if (o->bert && o->window)
        return usage_error("--sliding-window: bert attends bidirectionally, without a window");
    if (o->rope_factor < 0) o->rope_factor = !strcmp(o->rope_scaling, "llama3") ? 8 : 4;
    if (o->rope_orig_ctx < 0) o->rope_orig_ctx = 8192;
    if (!(o->high_freq > o->low_freq))
        return usage_error("--rope-high-freq must be above --rope-low-freq");
    /* which layouts take which scaling (llama.cpp reads rope.scaling.* for all of them; these
     * are the ones the references check) */
    const char *rs = o->rope_scaling, *for_archs =
        !strcmp(rs, "longrope") ? "phi3" : !strcmp(rs, "llama3") ? "llama, mistral3"
        : !strcmp(rs, "linear") ? "llama, qwen3, mistral3, gemma3"
                                : "llama, qwen3, mistral3, gpt-oss";
    if (strcmp(rs, "none") && (o->bert || !strstr(for_archs, o->arch)))
        return usage_error("--rope-scaling %s is for --arch %s", rs, for_archs);
    if (o->head_dim != o->dim / o->heads && (o->bert || is_arch(o, "phi3")))
        return usage_error("--head-dim is for --arch llama, qwen3, mistral3, gemma2 or gemma3");
    static const char *const required[] = {"--vocab-from", "--dim", "--layers", "--heads",
                                           "--kv-heads", "--ffn"};
    int have[] = {o->vocab_from != NULL, o->dim > 0, o->layers > 0, o->heads > 0,
                  o->kv_heads > 0, o->ffn > 0};
    for (int i = 0; i < 6; i++)
        if (!have[i]) return usage_error("%s is required", required[i]);
    if (o->dim % o->heads)
        return usage_error("--dim %lld is not a multiple of --heads %lld", (long long)o->dim,
                           (long long)o->heads);
    if (o->heads % o->kv_heads)
        return usage_error("--heads %lld is not a multiple of --kv-heads %lld",
                           (long long)o->heads, (long long)o->kv_heads);
    if (o->head_dim % 2)
        return usage_error("head size %lld is odd (RoPE rotates pairs)", (long long)o->head_dim);
    int64_t bs = pl_dtype_block_size(o->type);
    if (o->dim % bs)
        return usage_error("--dim %lld is not a multiple of %lld, the block size of %s",
                           (long long)o->dim, (long long)bs, o->type_name);
    if (o->ffn % bs)
        return usage_error("--ffn %lld is not a multiple of %lld, the block size of %s",
                           (long long)o->ffn, (long long)bs, o->type_name);
    if ((is_arch(o, "qwen3moe") || (g4 && o->experts)) && !o->expert_ffn)
        o->expert_ffn = o->ffn / 2;
    if (gptoss && !o->expert_ffn) o->expert_ffn = o->ffn;
    if (g4 && o->window < 1) return usage_error("--arch gemma4 needs a --sliding-window");
    if (g4 && o->shared_kv && o->layers - o->shared_kv < 2)
        return usage_error("--shared-kv-layers %lld leaves fewer than 2 layers with their own KV",
                           (long long)o->shared_kv);
    if (g4 && o->heads % o->kv_heads_full)
        return usage_error("--heads %lld is not a multiple of --kv-heads-full %lld",
                           (long long)o->heads, (long long)o->kv_heads_full);
    if (g4 && o->head_dim_swa % 2)
        return usage_error("--head-dim-swa %lld is odd", (long long)o->head_dim_swa);
    if (o->ffn_wide % bs || o->per_layer_dim % bs)
        return usage_error("--ffn-wide %lld and --per-layer-dim %lld must be multiples of %lld, "
                           "the block size of %s", (long long)o->ffn_wide,
                           (long long)o->per_layer_dim, (long long)bs, o->type_name);
    if (o->expert_ffn % bs)
        return usage_error("--expert-ffn %lld is not a multiple of %lld, the block size of %s",
                           (long long)o->expert_ffn, (long long)bs, o->type_name);
    return 0;
}

/* ---- the model being built ---- */

typedef struct {
    pl_gguf_writer *w;
    pl_rng rng;
    void **bufs;      /* every tensor's data, [n_bufs]; alive until the file is written */
    size_t n_bufs, cap_bufs;
    float *row;       /* one f32 row of the widest matrix */
    uint64_t bytes;   /* tensor bytes so far */
    uint64_t params;  /* elements so far */
} builder;

static void *keep(builder *b, size_t n) {
    if (pl_array_reserve(&b->bufs, &b->cap_bufs, b->n_bufs + 1, sizeof *b->bufs)) return NULL;
    void *p = malloc(n ? n : 1);
    if (p) b->bufs[b->n_bufs++] = p;
    return p;
}

/* n [cols, rows] matrices of `type` (n > 1: one 3-D tensor [cols, rows, n], MoE experts)
 * filled with uniform noise of standard deviation `std`. */
static pl_status add_matrices(builder *b, const char *name, pl_dtype type, int64_t cols,
                              int64_t n_rows, int64_t n, double std) {
    const int64_t rows = n_rows * n;
    size_t row_bytes = pl_dtype_row_size(type, cols);
    PL_ASSERT(row_bytes > 0);
    if ((uint64_t)rows > SIZE_MAX / row_bytes)
        return pl_fail(PL_ERR_NOMEM, "tensor '%s': %lld x %lld is too large", name,
                       (long long)cols, (long long)rows);
    uint8_t *data = keep(b, row_bytes * (size_t)rows);
    if (!data)
        return pl_fail(PL_ERR_NOMEM, "tensor '%s': out of memory for %zu bytes", name,
                       row_bytes * (size_t)rows);
    double half_width = std * sqrt(3.0); /* uniform on [-a, a] has std a / sqrt(3) */
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t i = 0; i < cols; i++)
            b->row[i] = (float)((2.0 * pl_rng_uniform(&b->rng) - 1.0) * half_width);
        size_t got = pl_quantize_row(type, b->row, data + (size_t)r * row_bytes, cols);
        PL_ASSERT(got == row_bytes);
    }
    int64_t ne[3] = {cols, n_rows, n};
    PL_TRY(pl_gguf_writer_add_tensor(b->w, name, type, n > 1 ? 3 : 2, ne, data));
    b->bytes += row_bytes * (uint64_t)rows;
    b->params += (uint64_t)cols * (uint64_t)rows;
    return PL_OK;
}

/* A [cols, rows] matrix (add_matrices' one). */
static pl_status add_matrix(builder *b, const char *name, pl_dtype type, int64_t cols,
                            int64_t rows, double std) {
    return add_matrices(b, name, type, cols, rows, 1, std);
}

/* A norm weight: n ones in f32. */
static pl_status add_norm(builder *b, const char *name, int64_t n) {
    float *v = keep(b, (size_t)n * sizeof *v);
    if (!v) return pl_fail(PL_ERR_NOMEM, "tensor '%s': out of memory", name);
    for (int64_t i = 0; i < n; i++) v[i] = 1.0f;
    int64_t ne[1] = {n};
    PL_TRY(pl_gguf_writer_add_tensor(b->w, name, PL_DT_F32, 1, ne, v));
    b->bytes += (uint64_t)n * sizeof *v;
    b->params += (uint64_t)n;
    return PL_OK;
}

/* Copies every tokenizer.* key of the vocabulary file; returns its vocabulary size. */
static pl_status copy_tokenizer(builder *b, const char *path, int64_t *n_vocab) {
    pl_gguf *g;
    PL_TRY(pl_gguf_open(path, &g));
    pl_status st = PL_OK;
    pl_gguf_arr tokens;
    if ((st = pl_gguf_get_arr(g, "tokenizer.ggml.tokens", &tokens)) != PL_OK) {
        pl_error_prefix("%s: no vocabulary", path);
    } else if (tokens.type != PL_GGUF_STRING || tokens.count == 0 || tokens.count > INT32_MAX) {
        st = pl_fail(PL_ERR_FORMAT, "%s: 'tokenizer.ggml.tokens' is not a list of 1..%d strings",
                     path, INT32_MAX);
    } else {
        *n_vocab = (int64_t)tokens.count;
        for (int64_t i = 0; st == PL_OK && i < pl_gguf_n_kv(g); i++) {
            pl_gguf_str key = pl_gguf_key_at(g, i);
            if (key.len > 10 && !memcmp(key.ptr, "tokenizer.", 10))
                st = pl_gguf_writer_copy_kv(b->w, g, i);
        }
    }
    pl_gguf_close(g);
    return st;
}

/* "<arch>.<key>" */
static const char *akey(const mk_opts *o, const char *key) {
    static char buf[128];
    snprintf(buf, sizeof buf, "%s.%s", o->arch, key);
    return buf;
}

/* gemma4's own keys: per-layer arrays where layers differ (feed_forward_length with --ffn-wide,
 * head_count_kv with --kv-heads-full), the window pattern as an array of bools, the window
 * layers' head size and rotated dims, shared_kv_layers, embedding_length_per_layer_input. */
static pl_status add_gemma4_hparams(builder *b, const mk_opts *o) {
    pl_gguf_writer *w = b->w;
    const int64_t n = o->layers;
    int32_t *ffn = keep(b, (size_t)n * sizeof *ffn), *kvh = keep(b, (size_t)n * sizeof *kvh);
    uint8_t *swa = keep(b, (size_t)n);
    if (!ffn || !kvh || !swa) return pl_fail(PL_ERR_NOMEM, "out of memory");
    for (int64_t l = 0; l < n; l++) {
        ffn[l] = (int32_t)g4_ffn(o, l);
        kvh[l] = (int32_t)g4_kv_heads(o, l);
        swa[l] = (uint8_t)g4_window(o, l);
    }
    if (o->ffn_wide)
        PL_TRY(pl_gguf_writer_add_arr(w, akey(o, "feed_forward_length"), PL_GGUF_INT32, ffn,
                                      (size_t)n));
    else
        PL_TRY(pl_gguf_writer_add_u32(w, akey(o, "feed_forward_length"), (uint32_t)o->ffn));
    if (o->kv_heads_full != o->kv_heads)
        PL_TRY(pl_gguf_writer_add_arr(w, akey(o, "attention.head_count_kv"), PL_GGUF_INT32, kvh,
                                      (size_t)n));
    else
        PL_TRY(pl_gguf_writer_add_u32(w, akey(o, "attention.head_count_kv"),
                                      (uint32_t)o->kv_heads));
    PL_TRY(pl_gguf_writer_add_arr(w, akey(o, "attention.sliding_window_pattern"), PL_GGUF_BOOL,
                                  swa, (size_t)n));
    PL_TRY(pl_gguf_writer_add_u32(w, akey(o, "attention.key_length_swa"),
                                  (uint32_t)o->head_dim_swa));
    PL_TRY(pl_gguf_writer_add_u32(w, akey(o, "attention.value_length_swa"),
                                  (uint32_t)o->head_dim_swa));
    PL_TRY(pl_gguf_writer_add_u32(w, akey(o, "rope.dimension_count_swa"),
                                  (uint32_t)o->head_dim_swa));
    if (o->shared_kv)
        PL_TRY(pl_gguf_writer_add_u32(w, akey(o, "attention.shared_kv_layers"),
                                      (uint32_t)o->shared_kv));
    return pl_gguf_writer_add_u32(w, akey(o, "embedding_length_per_layer_input"),
                                  (uint32_t)o->per_layer_dim);
}

static pl_status add_hparams(builder *b, const mk_opts *o, int64_t n_vocab) {
    char name[128];
    /* Only llama's name says the architecture: llama.cpp changes a vocabulary's token attributes
     * by general.name (e.g. any name containing "phi3" needs Phi-3's own special tokens). */
    snprintf(name, sizeof name, "pagellm random %s d%lld l%lld",
             is_arch(o, "llama") ? "llama" : "model", (long long)o->dim, (long long)o->layers);
    pl_gguf_writer *w = b->w;
    PL_TRY(pl_gguf_writer_add_str(w, "general.architecture", o->arch));
    PL_TRY(pl_gguf_writer_add_str(w, "general.name", name));
    PL_TRY(pl_gguf_writer_add_u32(w, "general.file_type", (uint32_t)o->ftype));
    PL_TRY(pl_gguf_writer_add_u32(w, akey(o, "context_length"), (uint32_t)o->ctx));
    PL_TRY(pl_gguf_writer_add_u32(w, akey(o, "embedding_length"), (uint32_t)o->dim));
    PL_TRY(pl_gguf_writer_add_u32(w, akey(o, "block_count"), (uint32_t)o->layers));
    if (is_arch(o, "gemma4")) {
        PL_TRY(add_gemma4_hparams(b, o));
    } else {
        PL_TRY(pl_gguf_writer_add_u32(w, akey(o, "feed_forward_length"), (uint32_t)o->ffn));
        PL_TRY(pl_gguf_writer_add_u32(w, akey(o, "attention.head_count_kv"),
                                      (uint32_t)o->kv_heads));
    }
    PL_TRY(pl_gguf_writer_add_u32(w, akey(o, "attention.head_count"), (uint32_t)o->heads));
    PL_TRY(pl_gguf_writer_add_f32(w, akey(o, "attention.layer_norm_rms_epsilon"),
                                  is_gemma(o) ? 1e-6f : 1e-5f));
    PL_TRY(pl_gguf_writer_add_f32(w, akey(o, "rope.freq_base"), (float)o->rope_base));
    PL_TRY(pl_gguf_writer_add_u32(w, akey(o, "rope.dimension_count"), (uint32_t)o->head_dim));
    if (o->head_dim != o->dim / o->heads || is_arch(o, "gemma4")) {
        PL_TRY(pl_gguf_writer_add_u32(w, akey(o, "attention.key_length"), (uint32_t)o->head_dim));
        PL_TRY(pl_gguf_writer_add_u32(w, akey(o, "attention.value_length"),
                                      (uint32_t)o->head_dim));
    }
    if (!strcmp(o->rope_scaling, "linear") || !strcmp(o->rope_scaling, "yarn")) {
        PL_TRY(pl_gguf_writer_add_str(w, akey(o, "rope.scaling.type"), o->rope_scaling));
        PL_TRY(pl_gguf_writer_add_f32(w, akey(o, "rope.scaling.factor"), (float)o->rope_factor));
    }
    if (!strcmp(o->rope_scaling, "yarn") || !strcmp(o->rope_scaling, "longrope"))
        PL_TRY(pl_gguf_writer_add_u32(w, akey(o, "rope.scaling.original_context_length"),
                                      (uint32_t)o->rope_orig_ctx));
    if (o->rope_attn_factor > 0)
        PL_TRY(pl_gguf_writer_add_f32(w, akey(o, "rope.scaling.attn_factor"),
                                      (float)o->rope_attn_factor));
    if (o->window > 0)
        PL_TRY(pl_gguf_writer_add_u32(w, akey(o, "attention.sliding_window"), (uint32_t)o->window));
    if (o->swa_pattern && !is_arch(o, "gemma4"))
        PL_TRY(pl_gguf_writer_add_u32(w, akey(o, "attention.sliding_window_pattern"),
                                      (uint32_t)o->swa_pattern));
    if (is_arch(o, "gemma2"))
        PL_TRY(pl_gguf_writer_add_f32(w, akey(o, "attn_logit_softcapping"),
                                      (float)o->attn_softcap));
    if (is_gemma(o) && o->final_softcap > 0)
        PL_TRY(pl_gguf_writer_add_f32(w, akey(o, "final_logit_softcapping"),
                                      (float)o->final_softcap));
    if (o->rope_base_swa > 0)
        PL_TRY(pl_gguf_writer_add_f32(w, akey(o, "rope.freq_base_swa"), (float)o->rope_base_swa));
    if (o->attn_temp > 0)
        PL_TRY(pl_gguf_writer_add_f32(w, akey(o, "attention.temperature_scale"),
                                      (float)o->attn_temp));
    static const char *const yarn_keys[] = {"rope.scaling.yarn_beta_fast",
                                            "rope.scaling.yarn_beta_slow",
                                            "rope.scaling.yarn_log_multiplier"};
    const double yarn_vals[] = {o->beta_fast, o->beta_slow, o->log_mul};
    for (int i = 0; i < 3; i++)
        if (yarn_vals[i] >= 0)
            PL_TRY(pl_gguf_writer_add_f32(w, akey(o, yarn_keys[i]), (float)yarn_vals[i]));
    if (o->experts) {
        PL_TRY(pl_gguf_writer_add_u32(w, akey(o, "expert_count"), (uint32_t)o->experts));
        PL_TRY(pl_gguf_writer_add_u32(w, akey(o, "expert_used_count"), (uint32_t)o->experts_used));
    }
    if (is_arch(o, "qwen3moe") || is_arch(o, "gpt-oss") || (is_arch(o, "gemma4") && o->experts))
        PL_TRY(pl_gguf_writer_add_u32(w, akey(o, "expert_feed_forward_length"),
                                      (uint32_t)o->expert_ffn));
    PL_TRY(pl_gguf_writer_add_u32(w, akey(o, "vocab_size"), (uint32_t)n_vocab));
    return PL_OK;
}

static pl_status add_vector(builder *b, const char *name, int64_t n, double mean, double std);
static pl_status add_vectors(builder *b, const char *name, int64_t n, int64_t count, double mean,
                             double std);

/* Llama 3.1's RoPE scaling as llama.cpp's converter stores it: rope_freqs.weight, one divisor
 * per rotated pair: 1 for wavelengths below orig_ctx / high_freq, the factor above
 * orig_ctx / low_freq, and a smooth blend between. */
static pl_status add_llama3_rope_freqs(builder *b, const mk_opts *o) {
    int64_t half = o->head_dim / 2;
    float *v = keep(b, (size_t)half * sizeof *v);
    if (!v) return pl_fail(PL_ERR_NOMEM, "out of memory");
    double lo_wl = (double)o->rope_orig_ctx / o->low_freq;
    double hi_wl = (double)o->rope_orig_ctx / o->high_freq;
    for (int64_t i = 0; i < half; i++) {
        double freq = 1.0 / pow(o->rope_base, (double)(2 * i) / (double)o->head_dim);
        double wl = 2 * M_PI / freq;
        if (wl < hi_wl) v[i] = 1.0f;
        else if (wl > lo_wl) v[i] = (float)o->rope_factor;
        else {
            double smooth = ((double)o->rope_orig_ctx / wl - o->low_freq) /
                            (o->high_freq - o->low_freq);
            v[i] = (float)(1.0 / ((1 - smooth) / o->rope_factor + smooth));
        }
    }
    int64_t ne[1] = {half};
    PL_TRY(pl_gguf_writer_add_tensor(b->w, "rope_freqs.weight", PL_DT_F32, 1, ne, v));
    b->bytes += (uint64_t)half * sizeof *v;
    b->params += (uint64_t)half;
    return PL_OK;
}

/* A norm weight: ones for llama (the references of earlier files depend on it), 1 + noise for
 * the newer layouts so that a norm read from the wrong tensor shows. */
static pl_status add_arch_norm(builder *b, const mk_opts *o, const char *name, int64_t n) {
    return is_arch(o, "llama") ? add_norm(b, name, n) : add_vector(b, name, n, 1.0, 0.1);
}

/* gemma4's MoE tensors of layer l (the file comment); down in `down_type`. */
static pl_status add_gemma4_experts(builder *b, const mk_opts *o, int64_t l, pl_dtype down_type) {
    const int64_t dim = o->dim, ne = o->experts, ef = o->expert_ffn;
    const double std = 0.02, out_std = std / sqrt(2.0 * (double)o->layers);
    char nm[96];
#define NAME(s) (snprintf(nm, sizeof nm, "blk.%lld." s, (long long)l), nm)
    PL_TRY(add_matrix(b, NAME("ffn_gate_inp.weight"), PL_DT_F32, dim, ne, 0.5 * sqrt((double)dim)));
    PL_TRY(add_arch_norm(b, o, NAME("ffn_gate_inp.scale"), dim));
    if (o->split_experts) { /* llama.cpp's unfused layout, which reads their scales too */
        PL_TRY(add_matrices(b, NAME("ffn_gate_exps.weight"), o->type, dim, ef, ne, std));
        PL_TRY(add_vector(b, NAME("ffn_gate_exps.scale"), ne, 1.0, 0.3));
        PL_TRY(add_matrices(b, NAME("ffn_up_exps.weight"), o->type, dim, ef, ne, std));
        PL_TRY(add_vector(b, NAME("ffn_up_exps.scale"), ne, 1.0, 0.3));
    } else {
        PL_TRY(add_matrices(b, NAME("ffn_gate_up_exps.weight"), o->type, dim, 2 * ef, ne, std));
    }
    PL_TRY(add_matrices(b, NAME("ffn_down_exps.weight"), down_type, ef, dim, ne, out_std));
    PL_TRY(add_vector(b, NAME("ffn_down_exps.scale"), ne, 1.0, 0.3));
    PL_TRY(add_arch_norm(b, o, NAME("pre_ffw_norm_2.weight"), dim));
    PL_TRY(add_arch_norm(b, o, NAME("post_ffw_norm_1.weight"), dim));
    PL_TRY(add_arch_norm(b, o, NAME("post_ffw_norm_2.weight"), dim));
#undef NAME
    return PL_OK;
}

static pl_status add_tensors(builder *b, const mk_opts *o, int64_t n_vocab) {
    const double std = 0.02, out_std = std / sqrt(2.0 * (double)o->layers);
    const int gemma = is_gemma(o), phi3 = is_arch(o, "phi3");
    const int g4 = is_arch(o, "gemma4");
    const int qk_norm = is_arch(o, "qwen3") || is_arch(o, "qwen3moe") || is_arch(o, "gemma3") || g4;
    const int64_t dim = o->dim, pld = o->per_layer_dim;
    const int gptoss = is_arch(o, "gpt-oss"), mx = o->type == PL_DT_MXFP4;
    const pl_dtype dt = mx ? PL_DT_F32 : o->type; /* the matrices that are not experts */
    PL_TRY(add_matrix(b, "token_embd.weight", dt, dim, n_vocab, std));
    PL_TRY(add_arch_norm(b, o, "output_norm.weight", dim));
    if (!gemma) /* gemma's output is the embedding */
        PL_TRY(add_matrix(b, "output.weight", o->more, dim, n_vocab, std));
    if (!strcmp(o->rope_scaling, "llama3")) PL_TRY(add_llama3_rope_freqs(b, o));
    if (!strcmp(o->rope_scaling, "longrope")) { /* Phi-3 128k's pair, as its converter writes */
        PL_TRY(add_vector(b, "rope_factors_long.weight", o->head_dim / 2, (1 + o->rope_factor) / 2,
                          (o->rope_factor - 1) / 4));
        PL_TRY(add_vector(b, "rope_factors_short.weight", o->head_dim / 2, 1.1, 0.05));
    }
    if (g4) /* the full layers' proportional RoPE: per-pair divisors */
        PL_TRY(add_vector(b, "rope_freqs.weight", o->head_dim / 2, 2.0, 0.5));
    if (g4 && pld) { /* the per-layer embeddings */
        PL_TRY(add_matrix(b, "per_layer_token_embd.weight", o->type, pld * o->layers, n_vocab,
                          std * 10));
        PL_TRY(add_matrix(b, "per_layer_model_proj.weight", o->type, dim, pld * o->layers, std));
        PL_TRY(add_arch_norm(b, o, "per_layer_proj_norm.weight", pld));
    }
    for (int64_t l = 0; l < o->layers; l++) {
        char nm[96];
#define NAME(s) (snprintf(nm, sizeof nm, "blk.%lld." s, (long long)l), nm)
        PL_TRY(add_arch_norm(b, o, NAME("attn_norm.weight"), dim));
        pl_dtype mt = more_bits(l, o->layers) ? o->more : dt;
        const int64_t hd = g4 ? g4_head_dim(o, l) : o->head_dim;
        const int64_t q_dim = hd * o->heads, kv_dim = hd * (g4 ? g4_kv_heads(o, l) : o->kv_heads);
        const int64_t ffn = g4 ? g4_ffn(o, l) : o->ffn;
        const int own_kv = !g4 || g4_own_kv(o, l);
        if (phi3) {
            PL_TRY(add_matrix(b, NAME("attn_qkv.weight"), o->type, dim, q_dim + 2 * kv_dim, std));
        } else {
            PL_TRY(add_matrix(b, NAME("attn_q.weight"), dt, dim, q_dim, std));
            if (own_kv) {
                PL_TRY(add_matrix(b, NAME("attn_k.weight"), dt, dim, kv_dim, std));
                PL_TRY(add_matrix(b, NAME("attn_v.weight"), mt, dim, kv_dim, std));
            }
        }
        PL_TRY(add_matrix(b, NAME("attn_output.weight"), dt, q_dim, dim, out_std));
        if (gptoss) { /* biases, the sinks (mean 1: a sink weighs as a few positions) */
            PL_TRY(add_vector(b, NAME("attn_q.bias"), q_dim, 0.0, std));
            PL_TRY(add_vector(b, NAME("attn_k.bias"), kv_dim, 0.0, std));
            PL_TRY(add_vector(b, NAME("attn_v.bias"), kv_dim, 0.0, std));
            PL_TRY(add_vector(b, NAME("attn_output.bias"), dim, 0.0, std));
            PL_TRY(add_vector(b, NAME("attn_sinks.weight"), o->heads, 1.0, 1.0));
        }
        if (qk_norm) { /* llama.cpp's order: the output, then K's norm, then Q's */
            if (own_kv) PL_TRY(add_arch_norm(b, o, NAME("attn_k_norm.weight"), hd));
            PL_TRY(add_arch_norm(b, o, NAME("attn_q_norm.weight"), hd));
        }
        if (gemma || gptoss) PL_TRY(add_arch_norm(b, o, NAME("post_attention_norm.weight"), dim));
        if (!gptoss) PL_TRY(add_arch_norm(b, o, NAME("ffn_norm.weight"), dim));
        if (o->experts && !g4) { /* the router in f32, as llama.cpp's converter and quantizer keep it */
            const int64_t ne = o->experts, ef = o->expert_ffn ? o->expert_ffn : ffn;
            PL_TRY(add_matrix(b, NAME("ffn_gate_inp.weight"), PL_DT_F32, dim, ne, 0.5));
            PL_TRY(add_matrices(b, NAME("ffn_gate_exps.weight"), o->type, dim, ef, ne, std));
            PL_TRY(add_matrices(b, NAME("ffn_up_exps.weight"), o->type, dim, ef, ne, std));
            PL_TRY(add_matrices(b, NAME("ffn_down_exps.weight"), mx ? o->type : mt, ef, dim, ne,
                                out_std));
            if (gptoss) { /* gate/up biases of std 5: a fifth of the values pass the limit 7 */
                PL_TRY(add_vector(b, NAME("ffn_gate_inp.bias"), ne, 0.0, 0.5));
                PL_TRY(add_vectors(b, NAME("ffn_gate_exps.bias"), ef, ne, 0.0, 5.0));
                PL_TRY(add_vectors(b, NAME("ffn_up_exps.bias"), ef, ne, 0.0, 5.0));
                PL_TRY(add_vectors(b, NAME("ffn_down_exps.bias"), dim, ne, 0.0, std));
            }
        } else if (phi3) {
            PL_TRY(add_matrix(b, NAME("ffn_up.weight"), o->type, dim, 2 * ffn, std));
        } else {
            PL_TRY(add_matrix(b, NAME("ffn_gate.weight"), o->type, dim, ffn, std));
            PL_TRY(add_matrix(b, NAME("ffn_up.weight"), o->type, dim, ffn, std));
        }
        if (!o->experts || g4) PL_TRY(add_matrix(b, NAME("ffn_down.weight"), mt, ffn, dim, out_std));
        if (gemma) PL_TRY(add_arch_norm(b, o, NAME("post_ffw_norm.weight"), dim));
        if (g4 && o->experts) PL_TRY(add_gemma4_experts(b, o, l, mt));
        if (g4 && pld) {
            PL_TRY(add_matrix(b, NAME("inp_gate.weight"), o->type, dim, pld, std * 4));
            PL_TRY(add_matrix(b, NAME("proj.weight"), o->type, pld, dim, out_std));
            PL_TRY(add_arch_norm(b, o, NAME("post_norm.weight"), dim));
        }
        if (g4) PL_TRY(add_vector(b, NAME("layer_output_scale.weight"), 1, 0.9, 0.05));
#undef NAME
    }
    return PL_OK;
}

/* ---- --arch bert ---- */

/* count vectors of n f32 values (count > 1: a [n, count] tensor, gpt-oss's expert biases):
 * mean + uniform noise of standard deviation std. */
static pl_status add_vectors(builder *b, const char *name, int64_t n, int64_t count, double mean,
                             double std) {
    float *v = keep(b, (size_t)(n * count) * sizeof *v);
    if (!v) return pl_fail(PL_ERR_NOMEM, "tensor '%s': out of memory", name);
    for (int64_t i = 0; i < n * count; i++)
        v[i] = (float)(mean + (2.0 * pl_rng_uniform(&b->rng) - 1.0) * std * sqrt(3.0));
    int64_t ne[2] = {n, count};
    PL_TRY(pl_gguf_writer_add_tensor(b->w, name, PL_DT_F32, count > 1 ? 2 : 1, ne, v));
    b->bytes += (uint64_t)(n * count) * sizeof *v;
    b->params += (uint64_t)(n * count);
    return PL_OK;
}

/* A vector of n f32 values: mean + uniform noise of standard deviation std. */
static pl_status add_vector(builder *b, const char *name, int64_t n, double mean, double std) {
    return add_vectors(b, name, n, 1, mean, std);
}

typedef struct {
    char **s;         /* token texts (owned) */
    int32_t *type;    /* llama.cpp token types: 1 normal, 2 unknown, 3 control */
    size_t n, cap, cap_type;
} wp_vocab;

static int wp_add(wp_vocab *v, const char *text, size_t len, int32_t type) {
    for (size_t i = 0; i < v->n; i++)
        if (strlen(v->s[i]) == len && !memcmp(v->s[i], text, len)) return 0;
    if (pl_array_reserve(&v->s, &v->cap, v->n + 1, sizeof *v->s) ||
        pl_array_reserve(&v->type, &v->cap_type, v->n + 1, sizeof *v->type))
        return -1;
    if (!(v->s[v->n] = strndup(text, len))) return -1;
    v->type[v->n++] = type;
    return 0;
}

static void wp_free(wp_vocab *v) {
    for (size_t i = 0; i < v->n; i++) free(v->s[i]);
    free(v->s);
    free(v->type);
}

#define WORD_START "\xE2\x96\x81" /* U+2581 */

/* The WordPiece vocabulary described at the top, from the pieces of FILE. */
static pl_status build_wordpiece(const char *path, wp_vocab *v) {
    static const char *const specials[] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
    int rc = 0;
    for (int i = 0; i < 5 && !rc; i++)
        rc = wp_add(v, specials[i], strlen(specials[i]), i == 1 ? 2 : 3);
    for (int c = 0x21; c < 0x7F && !rc; c++) {
        if (c >= 'A' && c <= 'Z') continue;
        char w[4] = WORD_START, one = (char)c;
        w[3] = one;
        rc = wp_add(v, w, 4, 1);
        if (!rc) rc = wp_add(v, &one, 1, 1);
    }
    pl_gguf *g;
    PL_TRY(pl_gguf_open(path, &g));
    pl_gguf_arr toks;
    pl_status st = pl_gguf_get_arr(g, "tokenizer.ggml.tokens", &toks);
    if (st == PL_OK && toks.type != PL_GGUF_STRING)
        st = pl_fail(PL_ERR_FORMAT, "%s: 'tokenizer.ggml.tokens' is not a list of strings", path);
    for (uint64_t i = 0; st == PL_OK && !rc && i < toks.count; i++) {
        pl_gguf_str t = pl_gguf_arr_str(&toks, i);
        int start = t.len > 3 && !memcmp(t.ptr, WORD_START, 3);
        size_t off = start ? 3 : 0, n = t.len - off;
        char buf[64 + 3];
        if (n == 0 || n > 64) continue;
        int ok = 1;
        for (size_t k = 0; k < n && ok; k++) {
            char ch = t.ptr[off + k];
            ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9');
            buf[3 + k] = (char)(ch >= 'A' && ch <= 'Z' ? ch - 'A' + 'a' : ch);
        }
        if (!ok) continue;
        memcpy(buf, WORD_START, 3);
        rc = start ? wp_add(v, buf, n + 3, 1) : wp_add(v, buf + 3, n, 1);
    }
    pl_gguf_close(g);
    if (st == PL_OK && rc) st = pl_fail(PL_ERR_NOMEM, "out of memory");
    return st;
}

static pl_status add_bert_tokenizer(builder *b, const mk_opts *o, int64_t *n_vocab) {
    wp_vocab v = {0};
    pl_status st = build_wordpiece(o->vocab_from, &v);
    pl_gguf_writer *w = b->w;
    if (st == PL_OK) st = pl_gguf_writer_add_str(w, "tokenizer.ggml.model", "bert");
    if (st == PL_OK) st = pl_gguf_writer_add_str(w, "tokenizer.ggml.pre", "default");
    if (st == PL_OK)
        st = pl_gguf_writer_add_str_arr(w, "tokenizer.ggml.tokens", (const char *const *)v.s, v.n);
    if (st == PL_OK)
        st = pl_gguf_writer_add_arr(w, "tokenizer.ggml.token_type", PL_GGUF_INT32, v.type, v.n);
    static const struct { const char *key; uint32_t id; } ids[] = {
        {"tokenizer.ggml.padding_token_id", 0}, {"tokenizer.ggml.unknown_token_id", 1},
        {"tokenizer.ggml.bos_token_id", 2},     {"tokenizer.ggml.cls_token_id", 2},
        {"tokenizer.ggml.seperator_token_id", 3}, {"tokenizer.ggml.mask_token_id", 4},
        {"tokenizer.ggml.token_type_count", 2}};
    for (size_t i = 0; st == PL_OK && i < sizeof ids / sizeof ids[0]; i++)
        st = pl_gguf_writer_add_u32(w, ids[i].key, ids[i].id);
    /* A reranker: a pair is [CLS] query [SEP] document [SEP], as convert_hf_to_gguf writes a BERT
     * cross-encoder's tokenizer (EOS = SEP added after each text, no extra SEP between). */
    if (st == PL_OK && o->pooling == 4) st = pl_gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", 3);
    if (st == PL_OK && o->pooling == 4) st = pl_gguf_writer_add_bool(w, "tokenizer.ggml.add_eos_token", 1);
    if (st == PL_OK && o->pooling == 4) st = pl_gguf_writer_add_bool(w, "tokenizer.ggml.add_sep_token", 0);
    *n_vocab = (int64_t)v.n;
    wp_free(&v);
    return st;
}

static pl_status add_bert_hparams(builder *b, const mk_opts *o) {
    char name[128];
    snprintf(name, sizeof name, "pagellm random bert d%lld l%lld", (long long)o->dim,
             (long long)o->layers);
    pl_gguf_writer *w = b->w;
    PL_TRY(pl_gguf_writer_add_str(w, "general.architecture", "bert"));
    PL_TRY(pl_gguf_writer_add_str(w, "general.name", name));
    PL_TRY(pl_gguf_writer_add_u32(w, "general.file_type", (uint32_t)o->ftype));
    PL_TRY(pl_gguf_writer_add_u32(w, "bert.context_length", (uint32_t)o->ctx));
    PL_TRY(pl_gguf_writer_add_u32(w, "bert.embedding_length", (uint32_t)o->dim));
    PL_TRY(pl_gguf_writer_add_u32(w, "bert.block_count", (uint32_t)o->layers));
    PL_TRY(pl_gguf_writer_add_u32(w, "bert.feed_forward_length", (uint32_t)o->ffn));
    PL_TRY(pl_gguf_writer_add_u32(w, "bert.attention.head_count", (uint32_t)o->heads));
    PL_TRY(pl_gguf_writer_add_f32(w, "bert.attention.layer_norm_epsilon", 1e-12f));
    PL_TRY(pl_gguf_writer_add_bool(w, "bert.attention.causal", 0));
    PL_TRY(pl_gguf_writer_add_u32(w, "bert.pooling_type", (uint32_t)o->pooling));
    return PL_OK;
}

static pl_status add_bert_tensors(builder *b, const mk_opts *o, int64_t n_vocab) {
    const double std = 0.02, out_std = std / sqrt(2.0 * (double)o->layers);
    const int64_t dim = o->dim, ffn = o->ffn;
    PL_TRY(add_matrix(b, "token_embd.weight", o->type, dim, n_vocab, std));
    PL_TRY(add_matrix(b, "token_types.weight", PL_DT_F32, dim, 2, std));
    PL_TRY(add_matrix(b, "position_embd.weight", o->type, dim, o->ctx, std));
    PL_TRY(add_vector(b, "token_embd_norm.weight", dim, 1.0, 0.1));
    PL_TRY(add_vector(b, "token_embd_norm.bias", dim, 0.0, 0.02));
    for (int64_t l = 0; l < o->layers; l++) {
        char nm[96];
#define NAME(s) (snprintf(nm, sizeof nm, "blk.%lld." s, (long long)l), nm)
        PL_TRY(add_matrix(b, NAME("attn_q.weight"), o->type, dim, dim, std * 4));
        PL_TRY(add_vector(b, NAME("attn_q.bias"), dim, 0.0, std));
        PL_TRY(add_matrix(b, NAME("attn_k.weight"), o->type, dim, dim, std * 4));
        PL_TRY(add_vector(b, NAME("attn_k.bias"), dim, 0.0, std));
        PL_TRY(add_matrix(b, NAME("attn_v.weight"), o->type, dim, dim, std));
        PL_TRY(add_vector(b, NAME("attn_v.bias"), dim, 0.0, std));
        PL_TRY(add_matrix(b, NAME("attn_output.weight"), o->type, dim, dim, out_std));
        PL_TRY(add_vector(b, NAME("attn_output.bias"), dim, 0.0, std));
        PL_TRY(add_vector(b, NAME("attn_output_norm.weight"), dim, 1.0, 0.1));
        PL_TRY(add_vector(b, NAME("attn_output_norm.bias"), dim, 0.0, std));
        PL_TRY(add_matrix(b, NAME("ffn_up.weight"), o->type, dim, ffn, std * 4));
        PL_TRY(add_vector(b, NAME("ffn_up.bias"), ffn, 0.0, std));
        PL_TRY(add_matrix(b, NAME("ffn_down.weight"), o->type, ffn, dim, out_std));
        PL_TRY(add_vector(b, NAME("ffn_down.bias"), dim, 0.0, std));
        PL_TRY(add_vector(b, NAME("layer_output_norm.weight"), dim, 1.0, 0.1));
        PL_TRY(add_vector(b, NAME("layer_output_norm.bias"), dim, 0.0, std));
#undef NAME
    }
    if (o->pooling == 4) { /* a reranker's classification head (llama.cpp's cls, cls.output) */
        PL_TRY(add_matrix(b, "cls.weight", o->type, dim, dim, 0.1));
        PL_TRY(add_vector(b, "cls.bias", dim, 0.0, 0.05));
        PL_TRY(add_matrix(b, "cls.output.weight", PL_DT_F32, dim, 1, 0.2));
        PL_TRY(add_vector(b, "cls.output.bias", 1, 0.1, 0.0));
    }
    return PL_OK;
}

static pl_status build(builder *b, const mk_opts *o) {
    int64_t n_vocab = 0;
    if (o->bert) {
        PL_TRY(add_bert_tokenizer(b, o, &n_vocab));
        PL_TRY(add_bert_hparams(b, o));
    } else {
        PL_TRY(copy_tokenizer(b, o->vocab_from, &n_vocab));
        PL_TRY(add_hparams(b, o, n_vocab));
    }
    int64_t widest = o->dim > o->ffn ? o->dim : o->ffn;
    if (o->head_dim * o->heads > widest) widest = o->head_dim * o->heads;
    if (o->head_dim_swa * o->heads > widest) widest = o->head_dim_swa * o->heads;
    if (o->expert_ffn > widest) widest = o->expert_ffn;
    if (o->ffn_wide > widest) widest = o->ffn_wide;
    if (o->per_layer_dim * o->layers > widest) widest = o->per_layer_dim * o->layers;
    b->row = malloc((size_t)widest * sizeof *b->row);
    if (!b->row) return pl_fail(PL_ERR_NOMEM, "out of memory");
    PL_TRY(o->bert ? add_bert_tensors(b, o, n_vocab) : add_tensors(b, o, n_vocab));
    return pl_gguf_writer_write(b->w, o->out);
}

int pl_cmd_mkmodel(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strncmp(argv[i], "--lora-of", 9)) return pl_cmd_mkmodel_lora(argc, argv);
    mk_opts o;
    int rc = parse(argc, argv, &o);
    if (rc) return rc < 0 ? 0 : rc;
    builder b = {0};
    pl_rng_seed(&b.rng, (uint64_t)o.seed);
    b.w = pl_gguf_writer_create();
    pl_status st = b.w ? build(&b, &o) : pl_fail(PL_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < b.n_bufs; i++) free(b.bufs[i]);
    free(b.bufs);
    free(b.row);
    pl_gguf_writer_destroy(b.w);
    if (st != PL_OK) return pl_cli_fail(C, "%s", pl_last_error());
    printf("wrote %s: %s, %lld layers, dim %lld, %s, %llu parameters, %.1f MiB of tensors\n",
           o.out, o.arch, (long long)o.layers, (long long)o.dim,
           pl_dtype_name(o.type),
           (unsigned long long)b.params, (double)b.bytes / 1048576.0);
    return 0;
}
