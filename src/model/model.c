/* model/model — loading: architecture hyper-parameters from GGUF metadata and binding every
 * weight tensor (presence, shape and type checked). The forward pass is in forward.c. */
#include "model/model.h"
#include "base/buf.h"
#include "base/log.h"
#include "base/meminfo.h"
#include "kernels/cpu.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

/* Read "<arch>.<key>" as an integer; `def` < 0 means required. */
static pl_status get_arch_int(const pl_gguf *g, const char *arch, const char *key, int64_t def,
                              int64_t lo, int64_t hi, int32_t *out) {
    char full[128];
    snprintf(full, sizeof full, "%s.%s", arch, key);
    int64_t v;
    if (pl_gguf_find_key(g, full) < 0) {
        if (def < 0) return pl_fail(PL_ERR_FORMAT, "missing metadata key '%s'", full);
        v = def;
    } else {
        PL_TRY(pl_gguf_get_int(g, full, &v));
    }
    if (v < lo || v > hi)
        return pl_fail(PL_ERR_FORMAT, "metadata '%s' = %lld is out of range [%lld, %lld]", full,
                       (long long)v, (long long)lo, (long long)hi);
    *out = (int32_t)v;
    return PL_OK;
}

static pl_status get_arch_float(const pl_gguf *g, const char *arch, const char *key, double def,
                                double lo, double hi, float *out) {
    char full[128];
    snprintf(full, sizeof full, "%s.%s", arch, key);
    double v = def;
    if (pl_gguf_find_key(g, full) >= 0) PL_TRY(pl_gguf_get_float(g, full, &v));
    if (!(v >= lo && v <= hi))
        return pl_fail(PL_ERR_FORMAT, "metadata '%s' = %g is out of range [%g, %g]", full, v, lo,
                       hi);
    *out = (float)v;
    return PL_OK;
}

/* bert: LayerNorm epsilon, the pooling type, and non-causal attention (no RoPE). */
static pl_status read_bert_hparams(const pl_gguf *g, pl_model_hparams *hp) {
    const char *a = hp->arch_name;
    char key[128];
    snprintf(key, sizeof key, "%s.attention.layer_norm_epsilon", a);
    if (pl_gguf_find_key(g, key) < 0)
        return pl_fail(PL_ERR_FORMAT, "missing metadata key '%s'", key);
    PL_TRY(get_arch_float(g, a, "attention.layer_norm_epsilon", 1e-12, 0, 1, &hp->norm_eps));
    snprintf(key, sizeof key, "%s.attention.causal", a);
    int causal = 0;
    if (pl_gguf_find_key(g, key) >= 0) PL_TRY(pl_gguf_get_bool(g, key, &causal));
    if (causal)
        return pl_fail(PL_ERR_UNSUPPORTED, "'%s' is true: pagellm runs bert with bidirectional "
                       "attention only", key);
    int32_t pool = 0;
    PL_TRY(get_arch_int(g, a, "pooling_type", -1, 0, 4, &pool));
    if (pool < PL_POOL_MEAN || pool > PL_POOL_RANK)
        return pl_fail(PL_ERR_UNSUPPORTED, "'%s.pooling_type' = %d is not supported (1 mean, "
                       "2 cls, 3 last, 4 rank; 0 none is not)", a, pool);
    hp->pooling = (pl_pooling)pool;
    hp->rope.n_rot = 0; /* absolute positions: nothing is rotated */
    return PL_OK;
}

/* `<arch>.attention.sliding_window`, generic: every layer uses it (an architecture with its own
 * pattern overwrites swa_layers after this). */
static pl_status read_sliding_window(const pl_gguf *g, pl_model_hparams *hp) {
    PL_TRY(get_arch_int(g, hp->arch_name, "attention.sliding_window", 0, 0, 1 << 24,
                        &hp->sliding_window));
    memset(hp->swa_layers, hp->sliding_window > 0, sizeof hp->swa_layers);
    return PL_OK;
}

/* An architecture whose llama.cpp graph has no window: `attention.sliding_window` is logged and
 * not applied, every layer attends to the whole context, the reference's semantics. phi3:
 * llama.cpp reads the key but disables Phi's sliding window ("Phi SWA is currently disabled",
 * llama.cpp PR 13676: the converters' window values are not right); qwen3 and mistral3: llama.cpp
 * does not read it. */
static pl_status ignore_sliding_window(pl_model_hparams *hp) {
    if (hp->sliding_window > 0)
        pl_log(PL_LOG_INFO, "%s.attention.sliding_window = %d is not applied (as llama.cpp, "
               "whose %s has no sliding window): full attention on every layer", hp->arch_name,
               hp->sliding_window, hp->arch_name);
    hp->sliding_window = 0; /* undo read_sliding_window's every-layer default */
    memset(hp->swa_layers, 0, sizeof hp->swa_layers);
    return PL_OK;
}

int32_t pl_model_kv_window(const pl_model_hparams *hp) {
    if (hp->sliding_window <= 0) return 0;
    for (int32_t l = 0; l < hp->n_layers; l++)
        if (!hp->swa_layers[l]) return 0;
    return hp->sliding_window;
}

/* RoPE scaling as llama.cpp reads it: `rope.scaling.type` none, linear (the default when the key
 * is absent, so a bare factor scales), longrope (llama.cpp computes it as linear: the factors are
 * phi3's rope_factors_long/short tensors) or yarn; `rope.scaling.factor` (or the older
 * `rope.scale_linear`), `rope.scaling.attn_factor` (scales cos/sin in every mode) and, for YaRN,
 * `rope.scaling.original_context_length` (default: context_length) with llama.cpp's fixed
 * beta_fast 32 / beta_slow 1 and ext_factor 1 (it reads no yarn_* keys for these
 * architectures: present ones are logged and ignored), except mistral3, whose
 * `rope.scaling.yarn_beta_fast` / `yarn_beta_slow` / `yarn_log_multiplier` llama.cpp reads (a
 * log multiplier m divides the attention factor by get_mscale(factor, m)). Llama 3.1's "llama3" scaling is not a type in GGUF: the converter stores its
 * per-pair divisors as the rope_freqs.weight tensor (bound in bind_weights), and llama.cpp
 * refuses the type name, as pagellm does with every other type (longrope, ...). */
static pl_status read_rope_scaling(const pl_gguf *g, pl_model_hparams *hp) {
    const char *a = hp->arch_name;
    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.type", a);
    pl_gguf_str stype = {"linear", 6};
    if (pl_gguf_find_key(g, key) >= 0) PL_TRY(pl_gguf_get_str(g, key, &stype));
    int yarn = pl_gguf_str_eq(stype, "yarn");
    if (!yarn && !pl_gguf_str_eq(stype, "linear") && !pl_gguf_str_eq(stype, "none") &&
        !pl_gguf_str_eq(stype, "longrope"))
        return pl_fail(PL_ERR_UNSUPPORTED, "'%s' = '%.*s' is not supported (none, linear, yarn, "
                       "longrope)",
                       key, (int)(stype.len > 32 ? 32 : stype.len), stype.ptr);
    float factor = 0;
    snprintf(key, sizeof key, "%s.rope.scaling.factor", a);
    PL_TRY(get_arch_float(g, a, pl_gguf_find_key(g, key) >= 0 ? "rope.scaling.factor"
                                                                : "rope.scale_linear",
                          0.0, 0, 1e6, &factor));
    hp->rope.freq_scale = factor == 0 || pl_gguf_str_eq(stype, "none") ? 1.0f : 1.0f / factor;
    float attn_factor = 1.0f;
    PL_TRY(get_arch_float(g, a, "rope.scaling.attn_factor", 1.0, 1e-6, 1e6, &attn_factor));
    float mscale = 1.0f;
    PL_TRY(get_arch_int(g, a, "rope.scaling.original_context_length", hp->n_ctx_train, 1,
                        1 << 24, &hp->n_ctx_orig));
    const int yarn_keys = hp->arch == PL_ARCH_MISTRAL3;
    float beta_fast = 32.0f, beta_slow = 1.0f, log_mul = 0.0f;
    if (yarn_keys) {
        PL_TRY(get_arch_float(g, a, "rope.scaling.yarn_beta_fast", 32.0, 1e-6, 1e6, &beta_fast));
        PL_TRY(get_arch_float(g, a, "rope.scaling.yarn_beta_slow", 1.0, 1e-6, 1e6, &beta_slow));
        PL_TRY(get_arch_float(g, a, "rope.scaling.yarn_log_multiplier", 0.0, 0, 1e6, &log_mul));
    }
    if (yarn) {
        int32_t n_orig = hp->n_ctx_orig;
        float f = 1.0f / hp->rope.freq_scale;
        hp->rope.ext_factor = 1.0f;
        pl_rope_yarn_corr_dims(hp->rope.n_rot, n_orig, hp->rope.freq_base, beta_fast, beta_slow,
                               hp->rope.corr_dims);
        mscale = f <= 1.0f ? 1.0f : 0.1f * logf(f) + 1.0f; /* llama.cpp's get_mscale(f, 1) */
        if (log_mul != 0.0f) mscale /= f <= 1.0f ? 1.0f : 0.1f * log_mul * logf(f) + 1.0f;
        mscale *= 1.0f / (1.0f + 0.1f * logf(f)); /* cancels the kernel's own factor */
    }
    hp->rope.mscale = mscale * attn_factor;
    static const char *const ignored[] = {"yarn_ext_factor", "yarn_attn_factor", "yarn_beta_fast",
                                          "yarn_beta_slow", "yarn_log_multiplier"};
    for (size_t i = 0; i < (yarn_keys ? 2 : sizeof ignored / sizeof ignored[0]); i++) {
        snprintf(key, sizeof key, "%s.rope.scaling.%s", a, ignored[i]);
        if (pl_gguf_find_key(g, key) >= 0)
            pl_log(PL_LOG_INFO, "'%s' is not read, as llama.cpp does not read it for %s", key, a);
    }
    return PL_OK;
}

/* gemma2 as llama.cpp reads it: window `attention.sliding_window` (default 4096) on the layers
 * of `attention.sliding_window_pattern` (an array of bools, or a period n: layer l is local when
 * l % n < n - 1; default 2, so even layers local and odd ones global); soft-capping of the
 * attention scores and of the logits (`attn_logit_softcapping` 50, `final_logit_softcapping` 30
 * by default); queries scaled by 1/sqrt(key_length), except 1/sqrt(dim / heads) for the 46-layer
 * (27B) model, as llama.cpp decides by layer count (it reads no query_pre_attn_scalar key). A
 * `rope.freq_base_swa` different from rope.freq_base is refused (one RoPE table per step). */
static pl_status read_swa_pattern(const pl_gguf *g, pl_model_hparams *hp, int32_t n_default) {
    const char *a = hp->arch_name;
    char key[128];
    snprintf(key, sizeof key, "%s.attention.sliding_window_pattern", a);
    int64_t ki = pl_gguf_find_key(g, key);
    if (ki >= 0 && pl_gguf_type_at(g, ki) == PL_GGUF_ARRAY) {
        pl_gguf_arr arr;
        PL_TRY(pl_gguf_get_arr(g, key, &arr));
        if (arr.count != (uint64_t)hp->n_layers ||
            (arr.type != PL_GGUF_BOOL && arr.type != PL_GGUF_INT32 && arr.type != PL_GGUF_UINT32 &&
             arr.type != PL_GGUF_INT8 && arr.type != PL_GGUF_UINT8))
            return pl_fail(PL_ERR_FORMAT, "'%s' must be %d booleans", key, hp->n_layers);
        for (int32_t l = 0; l < hp->n_layers; l++)
            hp->swa_layers[l] = pl_gguf_arr_int(&arr, (uint64_t)l) != 0;
    } else {
        int32_t n = n_default;
        PL_TRY(get_arch_int(g, a, "attention.sliding_window_pattern", n_default, 0, 1 << 20, &n));
        for (int32_t l = 0; l < hp->n_layers; l++)
            hp->swa_layers[l] = n == 0 || l % n < n - 1;
    }
    return PL_OK;
}

/* Queries scaled by 1/sqrt(key_length), except 1/sqrt(dim / heads) for the 27B models, which
 * llama.cpp recognises by their layer count (gemma2 46, gemma3 62; it reads no
 * query_pre_attn_scalar key). */
static float gemma_attn_scale(const pl_model_hparams *hp, int32_t n_layers_27b) {
    return 1.0f / sqrtf((float)(hp->n_layers == n_layers_27b ? hp->dim / hp->n_heads
                                                              : hp->head_dim));
}

/* A `rope.freq_base_swa` different from rope.freq_base is refused (one RoPE table per step). */
static pl_status refuse_rope_base_swa(const pl_gguf *g, const pl_model_hparams *hp) {
    float base_swa = hp->rope.freq_base;
    PL_TRY(get_arch_float(g, hp->arch_name, "rope.freq_base_swa", hp->rope.freq_base, 1e-3, 1e12,
                          &base_swa));
    if (base_swa != hp->rope.freq_base)
        return pl_fail(PL_ERR_UNSUPPORTED, "'%s.rope.freq_base_swa' = %g differs from "
                       "rope.freq_base %g: not supported", hp->arch_name, base_swa,
                       hp->rope.freq_base);
    return PL_OK;
}

static pl_status read_gemma2_hparams(const pl_gguf *g, pl_model_hparams *hp) {
    const char *a = hp->arch_name;
    PL_TRY(get_arch_int(g, a, "attention.sliding_window", 4096, 0, 1 << 24, &hp->sliding_window));
    PL_TRY(read_swa_pattern(g, hp, 2));
    PL_TRY(get_arch_float(g, a, "attn_logit_softcapping", 50.0, 1e-6, 1e9, &hp->attn_softcap));
    PL_TRY(get_arch_float(g, a, "final_logit_softcapping", 30.0, 1e-6, 1e9, &hp->final_softcap));
    PL_TRY(refuse_rope_base_swa(g, hp));
    hp->attn_scale = gemma_attn_scale(hp, 46);
    return PL_OK;
}

/* gpt-oss as llama.cpp's openai-moe reads it: `attention.sliding_window` (required) on the
 * layers of sliding_window_pattern (default 2: even layers local, odd global), the SWA layers
 * rotating as the others (a different rope.freq_base_swa is refused), queries scaled by
 * 1/sqrt(rope.dimension_count), and its MoE's gating and clamped SwiGLU (pl_model_hparams). */
static pl_status read_gptoss_hparams(const pl_gguf *g, pl_model_hparams *hp) {
    PL_TRY(get_arch_int(g, hp->arch_name, "attention.sliding_window", -1, 1, 1 << 24,
                        &hp->sliding_window));
    PL_TRY(read_swa_pattern(g, hp, 2));
    PL_TRY(refuse_rope_base_swa(g, hp));
    hp->attn_scale = 1.0f / sqrtf((float)hp->rope.n_rot);
    hp->moe_softmax_weight = 1;
    hp->swiglu_alpha = 1.702f;
    hp->swiglu_limit = 7.0f;
    return PL_OK;
}

/* gemma3 as llama.cpp reads it: with `attention.sliding_window` > 0 (else no window at all) the
 * window is on the layers of `attention.sliding_window_pattern` (as gemma2's, default 6: five
 * local layers, then a global one), which rotate with `rope.freq_base_swa` (default 10000) and
 * no frequency scaling; the global layers keep rope.freq_base and rope.scaling.*. The logits are
 * soft-capped only when `final_logit_softcapping` is present; no attention soft-capping. */
static pl_status read_gemma3_hparams(const pl_gguf *g, pl_model_hparams *hp) {
    const char *a = hp->arch_name;
    PL_TRY(get_arch_int(g, a, "attention.sliding_window", 0, 0, 1 << 24, &hp->sliding_window));
    memset(hp->swa_layers, 0, sizeof hp->swa_layers);
    if (hp->sliding_window > 0) {
        PL_TRY(read_swa_pattern(g, hp, 6));
        hp->has_rope_swa = 1;
        hp->rope_swa = hp->rope;
        PL_TRY(get_arch_float(g, a, "rope.freq_base_swa", 10000.0, 1e-3, 1e12,
                              &hp->rope_swa.freq_base));
        hp->rope_swa.freq_scale = 1.0f;
        if (hp->rope_swa.ext_factor != 0) /* GGML derives the YaRN range from the layer's base */
            pl_rope_yarn_corr_dims(hp->rope_swa.n_rot, hp->n_ctx_orig, hp->rope_swa.freq_base,
                                   32.0f, 1.0f, hp->rope_swa.corr_dims);
    }
    PL_TRY(get_arch_float(g, a, "final_logit_softcapping", 0.0, 0, 1e9, &hp->final_softcap));
    hp->attn_scale = gemma_attn_scale(hp, 62);
    return PL_OK;
}

/* "<arch>.<key>" as one integer per layer: an array of n_layers integers, or one value for
 * every layer; `def` < 0 means required. */
static pl_status get_arch_ints(const pl_gguf *g, const char *arch, const char *key, int64_t def,
                               int64_t lo, int64_t hi, int32_t n, int32_t *out) {
    char full[128];
    snprintf(full, sizeof full, "%s.%s", arch, key);
    int64_t ki = pl_gguf_find_key(g, full);
    if (ki < 0 || pl_gguf_type_at(g, ki) != PL_GGUF_ARRAY) {
        int32_t v;
        PL_TRY(get_arch_int(g, arch, key, def, lo, hi, &v));
        for (int32_t l = 0; l < n; l++) out[l] = v;
        return PL_OK;
    }
    pl_gguf_arr arr;
    PL_TRY(pl_gguf_get_arr(g, full, &arr));
    if (arr.count != (uint64_t)n || arr.type == PL_GGUF_STRING || arr.type == PL_GGUF_ARRAY ||
        arr.type == PL_GGUF_FLOAT32 || arr.type == PL_GGUF_FLOAT64 || arr.type == PL_GGUF_BOOL)
        return pl_fail(PL_ERR_FORMAT, "'%s' must be one integer or %d integers (one per layer)",
                       full, n);
    for (int32_t l = 0; l < n; l++) {
        int64_t v = pl_gguf_arr_int(&arr, (uint64_t)l);
        if (v < lo || v > hi)
            return pl_fail(PL_ERR_FORMAT, "metadata '%s'[%d] = %lld is out of range [%lld, %lld]",
                           full, l, (long long)v, (long long)lo, (long long)hi);
        out[l] = (int32_t)v;
    }
    return PL_OK;
}

/* gemma4 as llama.cpp reads it. Per layer (an array or one value): feed_forward_length and
 * attention.head_count_kv; attention.head_count must be the same on every layer. The window
 * `attention.sliding_window` on the layers of the array `attention.sliding_window_pattern`
 * (required, one bool per layer); the window layers have their own head size
 * (attention.key_length_swa), rotated dims (rope.dimension_count_swa, default the full layers')
 * and base (rope.freq_base_swa, default 10000, no scaling); the full layers rotate with
 * rope_freqs.weight. The last `attention.shared_kv_layers` layers reuse the K/V of the last
 * earlier layer of their kind (which must exist and have their shape). Queries are not
 * scaled (llama.cpp's f_attention_scale 1); V gets an RMSNorm without weight.
 * `embedding_length_per_layer_input` (required, 0: none) sizes the per-layer embeddings. The
 * logits are soft-capped by final_logit_softcapping, 30 when absent (llama.cpp's default). The
 * mixture-of-experts variant: expert_count > 0, expert_used_count in [1, expert_count] and
 * expert_feed_forward_length (one width on every layer) required; a layer with the router
 * tensor has experts beside its dense FFN (bind_gemma4_weights). */
static pl_status read_gemma4_hparams(const pl_gguf *g, pl_model_hparams *hp) {
    const char *a = hp->arch_name;
    const int32_t n = hp->n_layers;
    int32_t ffn[PL_MAX_LAYERS], heads[PL_MAX_LAYERS], kvh[PL_MAX_LAYERS];
    PL_TRY(get_arch_ints(g, a, "feed_forward_length", -1, 1, 1 << 20, n, ffn));
    PL_TRY(get_arch_ints(g, a, "attention.head_count", -1, 1, 1024, n, heads));
    hp->n_heads = heads[0];
    for (int32_t l = 0; l < n; l++)
        if (heads[l] != hp->n_heads)
            return pl_fail(PL_ERR_UNSUPPORTED, "'%s.attention.head_count' differs between layers "
                           "0 and %d (%d, %d): not supported", a, l, hp->n_heads, heads[l]);
    PL_TRY(get_arch_ints(g, a, "attention.head_count_kv", hp->n_heads, 1, hp->n_heads, n, kvh));
    PL_TRY(get_arch_int(g, a, "context_length", 2048, 1, 1 << 24, &hp->n_ctx_train));
    PL_TRY(get_arch_int(g, a, "expert_count", 0, 0, 1 << 16, &hp->n_expert));
    if (hp->n_expert > 0) { /* the MoE variant (e.g. 26B-A4B): GeGLU experts */
        int32_t ef[PL_MAX_LAYERS];
        PL_TRY(get_arch_int(g, a, "expert_used_count", -1, 1, hp->n_expert,
                            &hp->n_expert_used));
        PL_TRY(get_arch_ints(g, a, "expert_feed_forward_length", -1, 1, 1 << 20, n, ef));
        for (int32_t l = 0; l < n; l++)
            if (ef[l] != ef[0])
                return pl_fail(PL_ERR_UNSUPPORTED, "'%s.expert_feed_forward_length' differs "
                               "between layers 0 and %d (%d, %d): not supported", a, l, ef[0],
                               ef[l]);
        hp->expert_ffn = ef[0];
        hp->moe_geglu = 1;
    }
    /* head sizes: the full layers' and the window layers' (K and V alike) */
    int32_t hd = 0, hd_swa = 0, v_len = 0;
    PL_TRY(get_arch_int(g, a, "attention.key_length", hp->dim / hp->n_heads, 4, 1024, &hd));
    PL_TRY(get_arch_int(g, a, "attention.value_length", hd, 1, 1024, &v_len));
    if (v_len != hd)
        return pl_fail(PL_ERR_FORMAT, "'%s.attention.value_length' %d differs from the key length "
                       "%d (Gemma 4 needs them equal)", a, v_len, hd);
    PL_TRY(get_arch_int(g, a, "attention.key_length_swa", -1, 4, 1024, &hd_swa));
    PL_TRY(get_arch_int(g, a, "attention.value_length_swa", hd_swa, 1, 1024, &v_len));
    if (v_len != hd_swa)
        return pl_fail(PL_ERR_FORMAT, "'%s.attention.value_length_swa' %d differs from "
                       "key_length_swa %d (Gemma 4 needs them equal)", a, v_len, hd_swa);
    if (hd % 4 || hd_swa % 4)
        return pl_fail(PL_ERR_UNSUPPORTED, "head sizes %d / %d (full / window layers) must be "
                       "multiples of 4", hd, hd_swa);
    /* the window and its layers */
    PL_TRY(get_arch_int(g, a, "attention.sliding_window", -1, 1, 1 << 24, &hp->sliding_window));
    char key[128];
    snprintf(key, sizeof key, "%s.attention.sliding_window_pattern", a);
    int64_t ki = pl_gguf_find_key(g, key);
    if (ki < 0) return pl_fail(PL_ERR_FORMAT, "missing metadata key '%s'", key);
    if (pl_gguf_type_at(g, ki) != PL_GGUF_ARRAY)
        return pl_fail(PL_ERR_FORMAT, "'%s' must be an array of %d booleans (one per layer)",
                       key, n);
    PL_TRY(read_swa_pattern(g, hp, 0));
    /* per-layer shapes; the scratch is sized by the largest */
    hp->kv_shaped = 1;
    hp->ffn_dim = hp->head_dim = hp->n_kv_heads = 0;
    for (int32_t l = 0; l < n; l++) {
        if (hp->n_heads % kvh[l])
            return pl_fail(PL_ERR_FORMAT, "layer %d: %d attention heads are not a multiple of "
                           "'%s.attention.head_count_kv' %d", l, hp->n_heads, a, kvh[l]);
        hp->kv_shapes[l] = (pl_kv_shape){kvh[l], hp->swa_layers[l] ? hd_swa : hd};
        if (kvh[l] > hp->n_kv_heads) hp->n_kv_heads = kvh[l];
        if (ffn[l] > hp->ffn_dim) hp->ffn_dim = ffn[l];
    }
    hp->head_dim = hd > hd_swa ? hd : hd_swa;
    /* layers that reuse an earlier layer's K/V */
    PL_TRY(get_arch_int(g, a, "attention.shared_kv_layers", 0, 0, n, &hp->n_kv_shared));
    if (hp->n_kv_shared > 0 && n - hp->n_kv_shared < 2)
        return pl_fail(PL_ERR_FORMAT, "'%s.attention.shared_kv_layers' = %d leaves %d layers with "
                       "their own KV (at least 2: the last window and the last full layer)", a,
                       hp->n_kv_shared, n - hp->n_kv_shared);
    for (int32_t l = n - hp->n_kv_shared; l < n; l++) {
        const int32_t src = pl_model_kv_tensor(hp, l);
        if (hp->swa_layers[src] != hp->swa_layers[l])
            return pl_fail(PL_ERR_FORMAT, "'%s' and '%s.attention.shared_kv_layers' = %d are "
                           "inconsistent: layer %d (%s) would reuse the KV of layer %d (%s)",
                           key, a, hp->n_kv_shared, l, hp->swa_layers[l] ? "window" : "full",
                           src, hp->swa_layers[src] ? "window" : "full");
        if (hp->kv_shapes[src].n_kv_heads != hp->kv_shapes[l].n_kv_heads)
            return pl_fail(PL_ERR_FORMAT, "'%s.attention.head_count_kv': layer %d has %d KV heads "
                           "but reuses the KV of layer %d, which has %d", a, l,
                           hp->kv_shapes[l].n_kv_heads, src, hp->kv_shapes[src].n_kv_heads);
    }
    PL_TRY(get_arch_int(g, a, "embedding_length_per_layer_input", -1, 0, 1 << 16,
                        &hp->per_layer_dim));
    PL_TRY(get_arch_float(g, a, "attention.layer_norm_rms_epsilon", 1e-6, 0, 1, &hp->norm_eps));
    /* RoPE: NEOX; the full layers' dims, base and scaling; the window layers' own */
    hp->rope.mode = PL_ROPE_NEOX;
    PL_TRY(get_arch_int(g, a, "rope.dimension_count", hd, 2, hd, &hp->rope.n_rot));
    PL_TRY(get_arch_float(g, a, "rope.freq_base", 10000.0, 1e-3, 1e12, &hp->rope.freq_base));
    PL_TRY(read_rope_scaling(g, hp));
    hp->has_rope_swa = 1;
    hp->rope_swa = hp->rope;
    PL_TRY(get_arch_int(g, a, "rope.dimension_count_swa", hp->rope.n_rot, 2, hd_swa,
                        &hp->rope_swa.n_rot));
    if (hp->rope.n_rot % 2 || hp->rope_swa.n_rot % 2)
        return pl_fail(PL_ERR_FORMAT, "'%s.rope.dimension_count' %d / _swa %d must be even", a,
                       hp->rope.n_rot, hp->rope_swa.n_rot);
    PL_TRY(get_arch_float(g, a, "rope.freq_base_swa", 10000.0, 1e-3, 1e12,
                          &hp->rope_swa.freq_base));
    hp->rope_swa.freq_scale = 1.0f;
    if (hp->rope_swa.ext_factor != 0)
        pl_rope_yarn_corr_dims(hp->rope_swa.n_rot, hp->n_ctx_orig, hp->rope_swa.freq_base, 32.0f,
                               1.0f, hp->rope_swa.corr_dims);
    /* absent: llama.cpp's default of 30 (gemma4 reads the key as optional over it) */
    PL_TRY(get_arch_float(g, a, "final_logit_softcapping", 30.0, 0, 1e9, &hp->final_softcap));
    hp->attn_scale = 1.0f;
    return PL_OK;
}

/* mistral3: Llama 4's attention temperature (`attention.temperature_scale`, its floor the
 * original context), llama.cpp's yarn_* keys (read_rope_scaling), no sliding window. */
static pl_status read_mistral3_hparams(const pl_gguf *g, pl_model_hparams *hp) {
    PL_TRY(get_arch_float(g, hp->arch_name, "attention.temperature_scale", 0.0, 0, 1e6,
                          &hp->attn_temp_scale));
    hp->attn_temp_floor = hp->n_ctx_orig;
    return ignore_sliding_window(hp);
}

/* Mixture of experts as llama.cpp reads it: `expert_count`, `expert_used_count` (one value; a
 * per-layer array is refused), the experts' width `expert_feed_forward_length` for qwen3moe
 * (default feed_forward_length / expert_used_count) and gpt-oss (required),
 * feed_forward_length for llama (Mixtral). Required by qwen3moe and gpt-oss; llama's MoE is
 * Mixtral's (no shared expert); refused elsewhere. */
static pl_status read_moe_hparams(const pl_gguf *g, pl_model_hparams *hp) {
    const char *a = hp->arch_name;
    const int moe_arch = hp->arch == PL_ARCH_QWEN3MOE || hp->arch == PL_ARCH_GPT_OSS;
    PL_TRY(get_arch_int(g, a, "expert_count", moe_arch ? -1 : 0, 0, 1 << 16, &hp->n_expert));
    if (hp->n_expert == 0) {
        if (moe_arch)
            return pl_fail(PL_ERR_FORMAT, "'%s.expert_count' must be > 0 for %s", a, a);
        return PL_OK;
    }
    if (hp->arch != PL_ARCH_LLAMA && !moe_arch)
        return pl_fail(PL_ERR_UNSUPPORTED, "'%s.expert_count' = %d: mixture-of-experts %s is not "
                       "supported (qwen3moe, gpt-oss and llama / Mixtral are)", a, hp->n_expert, a);
    PL_TRY(get_arch_int(g, a, "expert_used_count", -1, 1, hp->n_expert, &hp->n_expert_used));
    hp->expert_ffn = hp->ffn_dim;
    if (moe_arch)
        PL_TRY(get_arch_int(g, a, "expert_feed_forward_length",
                            hp->arch == PL_ARCH_GPT_OSS ? -1 : hp->ffn_dim / hp->n_expert_used, 1,
                            1 << 20, &hp->expert_ffn));
    int32_t shared = 0;
    PL_TRY(get_arch_int(g, a, "expert_shared_feed_forward_length", 0, 0, 1 << 20, &shared));
    if (shared)
        return pl_fail(PL_ERR_UNSUPPORTED, "'%s.expert_shared_feed_forward_length' = %d: shared "
                       "experts are not supported", a, shared);
    return PL_OK;
}

static pl_status read_hparams(const pl_gguf *g, pl_model_hparams *hp) {
    pl_gguf_str arch;
    if (pl_gguf_get_str(g, "general.architecture", &arch) != PL_OK)
        return pl_fail(PL_ERR_FORMAT, "missing metadata key 'general.architecture'");
    snprintf(hp->arch_name, sizeof hp->arch_name, "%.*s", (int)(arch.len < 31 ? arch.len : 31),
             arch.ptr);
    if (pl_gguf_str_eq(arch, "llama")) hp->arch = PL_ARCH_LLAMA;
    else if (pl_gguf_str_eq(arch, "qwen2")) hp->arch = PL_ARCH_QWEN2;
    else if (pl_gguf_str_eq(arch, "bert")) hp->arch = PL_ARCH_BERT;
    else if (pl_gguf_str_eq(arch, "gemma2")) hp->arch = PL_ARCH_GEMMA2;
    else if (pl_gguf_str_eq(arch, "phi3")) hp->arch = PL_ARCH_PHI3;
    else if (pl_gguf_str_eq(arch, "qwen3")) hp->arch = PL_ARCH_QWEN3;
    else if (pl_gguf_str_eq(arch, "mistral3")) hp->arch = PL_ARCH_MISTRAL3;
    else if (pl_gguf_str_eq(arch, "gemma3")) hp->arch = PL_ARCH_GEMMA3;
    else if (pl_gguf_str_eq(arch, "qwen3moe")) hp->arch = PL_ARCH_QWEN3MOE;
    else if (pl_gguf_str_eq(arch, "gpt-oss")) hp->arch = PL_ARCH_GPT_OSS;
    else if (pl_gguf_str_eq(arch, "gemma4")) hp->arch = PL_ARCH_GEMMA4;
    else
        return pl_fail(PL_ERR_UNSUPPORTED, "architecture '%.*s' is not supported (supported: "
                       "llama, qwen2, qwen3, qwen3moe, gpt-oss, mistral3, gemma2, gemma3, gemma4, "
                       "phi3, "
                       "bert)",
                       (int)(arch.len > 64 ? 64 : arch.len), arch.ptr);
    const char *a = hp->arch_name;
    PL_TRY(get_arch_int(g, a, "embedding_length", -1, 1, 1 << 16, &hp->dim));
    PL_TRY(get_arch_int(g, a, "block_count", -1, 1, PL_MAX_LAYERS, &hp->n_layers));
    if (hp->arch == PL_ARCH_GEMMA4) return read_gemma4_hparams(g, hp);
    PL_TRY(get_arch_int(g, a, "feed_forward_length", -1, 1, 1 << 20, &hp->ffn_dim));
    PL_TRY(get_arch_int(g, a, "attention.head_count", -1, 1, 1024, &hp->n_heads));
    PL_TRY(get_arch_int(g, a, "attention.head_count_kv", hp->n_heads, 1, hp->n_heads,
                        &hp->n_kv_heads));
    PL_TRY(get_arch_int(g, a, "context_length", 2048, 1, 1 << 24, &hp->n_ctx_train));
    if (hp->n_heads % hp->n_kv_heads)
        return pl_fail(PL_ERR_FORMAT, "%d attention heads are not a multiple of %d KV heads",
                       hp->n_heads, hp->n_kv_heads);
    if (hp->dim % hp->n_heads)
        return pl_fail(PL_ERR_FORMAT, "embedding length %d is not a multiple of %d heads",
                       hp->dim, hp->n_heads);
    PL_TRY(get_arch_int(g, a, "attention.key_length", hp->dim / hp->n_heads, 1, 1024,
                        &hp->head_dim));
    if (hp->head_dim % 4)
        return pl_fail(PL_ERR_UNSUPPORTED, "head dimension %d is not a multiple of 4",
                       hp->head_dim);
    int32_t v_len = 0;
    PL_TRY(get_arch_int(g, a, "attention.value_length", hp->head_dim, 1, 1024, &v_len));
    if (v_len != hp->head_dim)
        return pl_fail(PL_ERR_UNSUPPORTED, "'%s.attention.value_length' %d differs from the key "
                       "length %d: not supported", a, v_len, hp->head_dim);
    if (hp->arch == PL_ARCH_BERT) return read_bert_hparams(g, hp);
    PL_TRY(read_sliding_window(g, hp));
    PL_TRY(get_arch_float(g, a, "attention.layer_norm_rms_epsilon", 1e-5, 0, 1, &hp->norm_eps));
    hp->rope.mode = hp->arch == PL_ARCH_LLAMA || hp->arch == PL_ARCH_MISTRAL3 ? PL_ROPE_NORM
                                                                              : PL_ROPE_NEOX;
    hp->attn_scale = 1.0f / sqrtf((float)hp->head_dim);
    PL_TRY(get_arch_int(g, a, "rope.dimension_count", hp->head_dim, 2, hp->head_dim,
                        &hp->rope.n_rot));
    if (hp->rope.n_rot % 2)
        return pl_fail(PL_ERR_FORMAT, "rope.dimension_count %d is odd", hp->rope.n_rot);
    PL_TRY(get_arch_float(g, a, "rope.freq_base", 10000.0, 1e-3, 1e12, &hp->rope.freq_base));
    PL_TRY(read_rope_scaling(g, hp));
    if (hp->arch == PL_ARCH_GEMMA2) PL_TRY(read_gemma2_hparams(g, hp));
    if (hp->arch == PL_ARCH_GEMMA3) PL_TRY(read_gemma3_hparams(g, hp));
    if (hp->arch == PL_ARCH_MISTRAL3) PL_TRY(read_mistral3_hparams(g, hp));
    if (hp->arch == PL_ARCH_GPT_OSS) PL_TRY(read_gptoss_hparams(g, hp));
    if (hp->arch == PL_ARCH_PHI3 || pl_arch_is_qwen3(hp->arch)) PL_TRY(ignore_sliding_window(hp));
    return read_moe_hparams(g, hp);
}

/* Find a tensor with the given shape; required unless `optional`. */
static pl_status find_tensor(const pl_gguf *g, const char *name, int64_t ne0, int64_t ne1,
                             int optional, const pl_gguf_tensor **out) {
    const pl_gguf_tensor *t = pl_gguf_find_tensor(g, name);
    *out = t;
    if (!t) return optional ? PL_OK : pl_fail(PL_ERR_FORMAT, "missing tensor '%s'", name);
    int64_t n1 = t->ne[1] * t->ne[2] * t->ne[3];
    if (t->ne[0] != ne0 || n1 != ne1)
        return pl_fail(PL_ERR_FORMAT,
                       "tensor '%s' has shape [%lld, %lld], expected [%lld, %lld]", name,
                       (long long)t->ne[0], (long long)n1, (long long)ne0, (long long)ne1);
    return PL_OK;
}

static pl_status bind_weight(const pl_gguf *g, const char *name, int64_t cols, int64_t rows,
                             pl_weight *w) {
    const pl_gguf_tensor *t;
    PL_TRY(find_tensor(g, name, cols, rows, 0, &t));
    if (!pl_dtype_can_matmul(t->type))
        return pl_fail(PL_ERR_UNSUPPORTED, "tensor '%s' has type %s, which pagellm cannot compute "
                       "(supported: f32, f16, bf16, q8_0, q4_0, q4_K, q5_K, q6_K)",
                       name, pl_dtype_name(t->type));
    /* every field: a weight bound on the stack (phi3's fused qkv and gate/up, sliced into row
     * views) must not carry a garbage layout into the kernels */
    *w = (pl_weight){.data = t->data, .type = t->type, .rows = rows, .cols = cols,
                     .layout = PL_WLAYOUT_ROWS};
    return PL_OK;
}

/* `count` vectors of n (a [n, count] tensor: norm weights, biases, an expert's biases per
 * expert) converted to one malloc'ed f32 array. */
static pl_status load_vectors(const pl_gguf *g, const char *name, int64_t n, int64_t count,
                              int optional, float **out) {
    const pl_gguf_tensor *t;
    *out = NULL;
    PL_TRY(find_tensor(g, name, n, count, optional, &t));
    if (!t) return PL_OK;
    if (t->type != PL_DT_F32 && t->type != PL_DT_F16 && t->type != PL_DT_BF16)
        return pl_fail(PL_ERR_UNSUPPORTED, "tensor '%s' has type %s; expected f32, f16 or bf16",
                       name, pl_dtype_name(t->type));
    float *v = malloc((size_t)(n * count) * sizeof(float));
    if (!v) return pl_fail(PL_ERR_NOMEM, "tensor '%s': out of memory", name);
    pl_dequantize_row(t->type, t->data, v, n * count);
    *out = v;
    return PL_OK;
}

/* A 1-D tensor (norm weight, bias) converted to a malloc'ed f32 array. */
static pl_status load_vector(const pl_gguf *g, const char *name, int64_t n, int optional,
                             float **out) {
    return load_vectors(g, name, n, 1, optional, out);
}

/* Rows [r0, r0 + rows) of a bound matrix as a weight of its own: a fused tensor's parts (phi3's
 * attn_qkv and gate/up ffn_up), still memory-mapped. */
static pl_weight weight_rows(const pl_weight *w, int64_t r0, int64_t rows) {
    pl_weight p = *w;
    p.data = (const char *)w->data + (size_t)r0 * pl_dtype_row_size(w->type, w->cols);
    p.rows = rows;
    return p;
}

/* The n experts of a 3-D GGUF tensor [cols, rows, n]: expert e is the ordinary weight at rows
 * [e * rows, (e + 1) * rows), still memory-mapped. */
static pl_status bind_experts(const pl_gguf *g, const char *name, int64_t cols, int64_t rows,
                              int64_t n, pl_weight *out) {
    const pl_gguf_tensor *t = pl_gguf_find_tensor(g, name);
    if (!t) return pl_fail(PL_ERR_FORMAT, "missing tensor '%s'", name);
    if (t->ne[0] != cols || t->ne[1] != rows || t->ne[2] != n || t->ne[3] != 1)
        return pl_fail(PL_ERR_FORMAT, "tensor '%s' has shape [%lld, %lld, %lld, %lld], expected "
                       "[%lld, %lld, %lld]", name, (long long)t->ne[0], (long long)t->ne[1],
                       (long long)t->ne[2], (long long)t->ne[3], (long long)cols,
                       (long long)rows, (long long)n);
    pl_weight all = {0}; /* rows layout: the experts are repacked (or not) one by one */
    PL_TRY(bind_weight(g, name, cols, rows * n, &all));
    for (int64_t e = 0; e < n; e++) out[e] = weight_rows(&all, e * rows, rows);
    return PL_OK;
}

/* Layer l's router ffn_gate_inp [dim, ne] and its ne experts of width ef: ffn_gate_exps,
 * ffn_up_exps [dim, ef, ne] or the two fused in ffn_gate_up_exps [dim, 2 ef, ne] (each
 * expert's gate rows, then its up rows: llama.cpp's merged layout), and ffn_down_exps
 * [ef, dim, ne]; with separate gate / up, their optional per-expert scales .scale [ne], and
 * down's (one allocation of 3 ne weights at exp_gate). */
static pl_status bind_moe(const pl_gguf *g, pl_layer_weights *L, int32_t l, int64_t dim,
                          int64_t ne, int64_t ef) {
    char nm[96];
#define NAME(s) (snprintf(nm, sizeof nm, "blk.%d." s, l), nm)
    PL_TRY(bind_weight(g, NAME("ffn_gate_inp.weight"), dim, ne, &L->gate_inp));
    if (!(L->exp_gate = calloc((size_t)(3 * ne), sizeof *L->exp_gate)))
        return pl_fail(PL_ERR_NOMEM, "out of memory for %lld experts", (long long)ne);
    L->exp_up = L->exp_gate + ne;
    L->exp_down = L->exp_up + ne;
    if (pl_gguf_find_tensor(g, NAME("ffn_gate_up_exps.weight"))) {
        PL_TRY(bind_experts(g, nm, dim, 2 * ef, ne, L->exp_gate));
        for (int64_t e = 0; e < ne; e++) {
            L->exp_up[e] = weight_rows(&L->exp_gate[e], ef, ef);
            L->exp_gate[e] = weight_rows(&L->exp_gate[e], 0, ef);
        }
    } else {
        PL_TRY(bind_experts(g, NAME("ffn_gate_exps.weight"), dim, ef, ne, L->exp_gate));
        PL_TRY(bind_experts(g, NAME("ffn_up_exps.weight"), dim, ef, ne, L->exp_up));
        PL_TRY(load_vector(g, NAME("ffn_gate_exps.scale"), ne, 1, &L->exp_gate_s));
        PL_TRY(load_vector(g, NAME("ffn_up_exps.scale"), ne, 1, &L->exp_up_s));
    }
    PL_TRY(bind_experts(g, NAME("ffn_down_exps.weight"), ef, dim, ne, L->exp_down));
    PL_TRY(load_vector(g, NAME("ffn_down_exps.scale"), ne, 1, &L->exp_down_s));
#undef NAME
    return PL_OK;
}

/* ---- weights copied out of the mapping: tensor-parallel slices, repacked layouts ---- */

/* A 64-byte aligned buffer of `bytes` that the model owns (freed with it). */
static pl_status own_buffer(pl_model *m, const char *name, size_t bytes, void **out) {
    void **owned = realloc(m->owned, (size_t)(m->n_owned + 1) * sizeof *owned);
    if (!owned) return pl_fail(PL_ERR_NOMEM, "tensor '%s': out of memory", name);
    m->owned = owned;
    void *dst = pl_alloc_stream(bytes);
    if (!dst) return pl_fail(PL_ERR_NOMEM, "tensor '%s': out of memory for its copy", name);
    m->owned[m->n_owned++] = dst;
    m->owned_bytes += bytes;
    *out = dst;
    return PL_OK;
}

/* The mapped pages wholly inside [p, p + n) leave this process's resident set (the page cache
 * keeps them; a later read faults them back in): they were read once, to copy them. */
static void release_pages(const void *p, size_t n) {
    long pg = sysconf(_SC_PAGESIZE);
    if (pg <= 0) return;
    uintptr_t a = ((uintptr_t)p + (uintptr_t)pg - 1) / (uintptr_t)pg * (uintptr_t)pg;
    uintptr_t e = ((uintptr_t)p + n) / (uintptr_t)pg * (uintptr_t)pg;
    if (e > a) madvise((void *)a, e - a, MADV_DONTNEED);
}

/* w in the layout the matmul kernels prefer on this machine, if it has one (kernels/matmul.h):
 * f16, q8_0, q4_0, iq4_nl, q5_0, q4_1, q5_1, q2_K, q4_K, q6_K, iq4_xs and mxfp4 on AVX-512, f16,
 * bf16, q4_K, q6_K, q2_K, iq4_xs, q8_0, q4_0, iq4_nl and mxfp4 on AVX2 (with AVX-VNNI also q5_0,
 * q4_1, q5_1), 16 rows interleaved. What it was copied from is let go: a buffer of its own (a
 * column slice) is freed, mapped pages released. */
static size_t repack_bytes(const pl_model *m, const pl_weight *w);
static pl_status repack_weight(pl_model *m, const char *name, pl_weight *w, void *into) {
    const int to_bf16 = m->f16_as_bf16 && w->type == PL_DT_F16 && w->layout == PL_WLAYOUT_ROWS;
    size_t bytes = repack_bytes(m, w);
    if (!bytes) return PL_OK;
    /* What it is copied from has GGUF's size, which the x16 layout need not have (iq4_xs: 138
     * bytes per row and super-block, GGUF 136): releasing the layout's size past the end of the
     * last tensor's mapping zeroed whatever the process had mapped after it. */
    const size_t src_bytes = (size_t)w->rows * pl_dtype_row_size(w->type, w->cols);
    void *dst = into;
    if (!dst) PL_TRY(own_buffer(m, name, bytes, &dst));
    const void *src = w->data;
    if (to_bf16) pl_matmul_f16_to_bf16(w, dst);
    else pl_matmul_repack(w, dst);
    for (int32_t i = 0; i < m->n_owned; i++)
        if (m->owned[i] == src) {
            free(m->owned[i]);
            m->owned[i] = m->owned[--m->n_owned];
            m->owned_bytes -= src_bytes;
            return PL_OK;
        }
    release_pages(src, src_bytes);
    m->released_bytes += src_bytes;
    return PL_OK;
}

/* The bytes w's repacked (or, --f16-weights bf16, converted) copy takes (0: it keeps its rows). */
static size_t repack_bytes(const pl_model *m, const pl_weight *w) {
    if (!w->data || w->layout != PL_WLAYOUT_ROWS) return 0;
    if (m->f16_as_bf16 && w->type == PL_DT_F16) return (size_t)w->rows * pl_dtype_row_size(w->type, w->cols);
    return pl_matmul_repack_wanted(w->type) ? pl_matmul_repack_size(w) : 0;
}

/* The n experts of one tensor (exp[0..n), one shape and type), each repacked on its own (its
 * source let go before the next: never two copies) into one buffer of the model's: a buffer per
 * expert (0.9 MB at Qwen3-30B-A3B's shapes) is below the 2 MB of a huge page and got 4 KB pages,
 * whose TLB misses and prefetch stops at every page held decode at batch 1 to ~60 % of the byte
 * floor (issue 34). Slices start at multiples of 64 bytes. */
static pl_status repack_experts(pl_model *m, const char *name, pl_weight *exp, int64_t n, int32_t *nbf) {
    size_t bytes = repack_bytes(m, &exp[0]);
    if (!bytes) return PL_OK;
    const size_t stride = (bytes + 63) / 64 * 64;
    char *dst;
    PL_TRY(own_buffer(m, name, stride * (size_t)n, (void **)&dst));
    for (int64_t e = 0; e < n; e++) {
        *nbf += m->f16_as_bf16 && exp[e].type == PL_DT_F16;
        PL_TRY(repack_weight(m, name, &exp[e], dst + (size_t)e * stride));
    }
    return PL_OK;
}

/* The weights a layer repacks: its dense matrices (bert: no gate; MoE: no dense FFN). */
static void layer_matrices(pl_layer_weights *L, pl_weight *ws[7]) {
    pl_weight *all[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
    memcpy(ws, all, sizeof all);
}

/* Repacked copies are anonymous memory the process keeps, while the file's pages they replace
 * are page cache the kernel can drop and read again. So copies that would not fit in 3/4 of the
 * memory available are not made: the experts keep the file's layout first (a step reads only
 * the chosen ones), then every matrix does, and a model larger than the machine's free memory
 * runs from the memory map (slowly: pages are read back as they are needed) instead of being
 * killed for its copies. */
static pl_status repack_weights(pl_model *m) {
    size_t dense = repack_bytes(m, &m->output), experts = 0;
    for (int32_t l = 0; l < m->hp.n_layers; l++) {
        pl_layer_weights *L = &m->layers[l];
        pl_weight *ws[7];
        layer_matrices(L, ws);
        for (int i = 0; i < 7; i++) dense += repack_bytes(m, ws[i]);
        for (int32_t e = 0; L->exp_gate && e < 3 * m->hp.n_expert; e++) experts += repack_bytes(m, &L->exp_gate[e]);
    }
    const uint64_t avail = pl_mem_available(), fit = avail / 4 * 3;
    const int do_experts = !avail || dense + experts <= fit, do_dense = !avail || dense <= fit;
    if (!do_experts)
        PL_WARN("the repacked weights (%.1f MiB) would not fit in 3/4 of the memory available "
                "(%.1f MiB): %s keep the file's layout and are read from its memory map",
                (double)(dense + experts) / (1 << 20), (double)avail / (1 << 20),
                do_dense ? "the experts" : "all weights");
    int32_t n = 0, nbf = 0;
    for (int32_t l = 0; l < m->hp.n_layers; l++) {
        pl_layer_weights *L = &m->layers[l];
        pl_weight *ws[7];
        layer_matrices(L, ws);
        for (int i = 0; i < 7 && do_dense; i++) {
            if (!ws[i]->data) continue;
            char name[64];
            snprintf(name, sizeof name, "blk.%d matrix %d", l, i);
            nbf += m->f16_as_bf16 && ws[i]->type == PL_DT_F16;
            PL_TRY(repack_weight(m, name, ws[i], NULL));
            n += ws[i]->layout == PL_WLAYOUT_X16;
        }
        /* each expert on its own (a step reads only the experts its tokens chose), the
         * experts of a tensor in one buffer */
        for (int32_t k = 0; L->exp_gate && do_experts && k < 3; k++) {
            char name[64];
            pl_weight *exp = L->exp_gate + (size_t)k * (size_t)m->hp.n_expert;
            snprintf(name, sizeof name, "blk.%d experts %s", l, k == 0 ? "gate" : k == 1 ? "up" : "down");
            PL_TRY(repack_experts(m, name, exp, m->hp.n_expert, &nbf));
            for (int32_t e = 0; e < m->hp.n_expert; e++) n += exp[e].layout == PL_WLAYOUT_X16;
        }
    }
    /* the output layer, also when tied: token lookups keep reading tok_embd's rows */
    if (m->output.data && do_dense) {
        nbf += m->f16_as_bf16 && m->output.type == PL_DT_F16;
        PL_TRY(repack_weight(m, "output", &m->output, NULL));
    }
    n += m->output.layout == PL_WLAYOUT_X16;
    if (m->f16_as_bf16)
        PL_INFO("--f16-weights bf16: %d f16 matrices rounded to bf16 at load (lossy: "
                "docs/ACCURACY.md; AVX-512 BF16 vdpbf16ps tiles; the token embeddings stay f16)", nbf);
    if (n) PL_INFO("repacked %d matrices into the x16 layout (16 rows interleaved; PAGELLM_REPACK=0 keeps the rows)", n);
    return PL_OK;
}

/* ---- tensor-parallel slices (pl_model_shard); a shard's rows are weight_rows views ---- */

/* Columns [c0, c0 + n) of every row of w, copied into a buffer the model owns; the mapped pages
 * of the whole tensor are then released (they were read once, for the copy). */
static pl_status slice_cols(pl_model *m, const char *name, pl_weight *w, int64_t c0, int64_t n) {
    int64_t bs = pl_dtype_block_size(w->type);
    if (c0 % bs || n % bs)
        return pl_fail(PL_ERR_UNSUPPORTED, "tensor-parallel-size %d: tensor '%s' (%s, blocks of "
                       "%lld values per row) would be cut into slices of %lld of its %lld "
                       "columns, which is not a whole number of quantization blocks",
                       m->shard.size, name, pl_dtype_name(w->type), (long long)bs, (long long)n,
                       (long long)w->cols);
    size_t src_row = pl_dtype_row_size(w->type, w->cols), dst_row = pl_dtype_row_size(w->type, n);
    size_t off = pl_dtype_row_size(w->type, c0), bytes = (size_t)w->rows * dst_row;
    char *dst;
    PL_TRY(own_buffer(m, name, bytes, (void **)&dst));
    const char *src = w->data;
    for (int64_t r = 0; r < w->rows; r++)
        memcpy(dst + (size_t)r * dst_row, src + (size_t)r * src_row + off, dst_row);
    release_pages(src, (size_t)w->rows * src_row);
    w->data = dst;
    w->cols = n;
    return PL_OK;
}

/* Entries [off, off + n) of a loaded vector moved to its front (a bias of sliced rows). */
static void slice_vector(float *v, int64_t off, int64_t n) {
    if (v) memmove(v, v + off, (size_t)n * sizeof(float));
}

/* This rank's part of every expert of layer L, cut as a dense FFN: rows of gate and up (and of
 * their gpt-oss biases, packed to [n_expert][local width]), the same columns of down (`name`,
 * for errors). */
static pl_status shard_experts(pl_model *m, pl_layer_weights *L, const char *name) {
    const int64_t ef = m->shard.expert_ffn, loc = m->hp.expert_ffn, c0 = m->shard.rank * loc;
    for (int32_t e = 0; e < m->hp.n_expert; e++) {
        L->exp_gate[e] = weight_rows(&L->exp_gate[e], c0, loc);
        L->exp_up[e] = weight_rows(&L->exp_up[e], c0, loc);
        PL_TRY(slice_cols(m, name, &L->exp_down[e], c0, loc));
        float *const biases[2] = {L->exp_gate_b, L->exp_up_b};
        for (int k = 0; k < 2; k++) /* [e] moves to its packed place, left of where it was */
            if (biases[k]) memmove(biases[k] + e * loc, biases[k] + e * ef + c0,
                                   (size_t)loc * sizeof(float));
    }
    return PL_OK;
}

/* This rank's slice of layer L (shard size > 1), whose full widths are q_dim (query heads x
 * head size), kv_dim (KV heads x head size; gemma4's shared-KV layers have no K/V) and ff (the
 * dense FFN's; 0 without one): rows of wq, wk, wv and their biases, the matching columns of
 * wo, the FFN's rows of gate / up and columns of down, every expert cut as a dense FFN, the
 * sinks of its heads. Per-head norms (q_norm, k_norm) and per-expert scales apply to any slice
 * whole; gemma4's per-layer embedding matrices stay whole (every rank computes them alike). */
static pl_status shard_layer(pl_model *m, pl_layer_weights *L, int32_t l, int64_t q_dim,
                             int64_t kv_dim, int64_t ff) {
    const int64_t r = m->shard.rank, size = m->shard.size;
    const int64_t q_loc = q_dim / size, kv_loc = kv_dim / size, ff_loc = ff / size;
    char n[96];
#define NAME(s) (snprintf(n, sizeof n, "blk.%d." s, l), n)
    L->wq = weight_rows(&L->wq, r * q_loc, q_loc);
    if (L->wk.data) L->wk = weight_rows(&L->wk, r * kv_loc, kv_loc);
    if (L->wv.data) L->wv = weight_rows(&L->wv, r * kv_loc, kv_loc);
    slice_vector(L->bq, r * q_loc, q_loc);
    slice_vector(L->bk, r * kv_loc, kv_loc);
    slice_vector(L->bv, r * kv_loc, kv_loc);
    PL_TRY(slice_cols(m, NAME("attn_output.weight"), &L->wo, r * q_loc, q_loc));
    if (L->exp_gate) PL_TRY(shard_experts(m, L, NAME("ffn_down_exps.weight")));
    if (L->w_down.data) { /* a dense FFN (gemma4's MoE layers have one beside the experts) */
        L->w_gate = weight_rows(&L->w_gate, r * ff_loc, ff_loc);
        L->w_up = weight_rows(&L->w_up, r * ff_loc, ff_loc);
        PL_TRY(slice_cols(m, NAME("ffn_down.weight"), &L->w_down, r * ff_loc, ff_loc));
    }
#undef NAME
    slice_vector(L->attn_sinks, r * m->hp.n_heads, m->hp.n_heads); /* gpt-oss: per head */
    if (r > 0) { /* added once (rank 0) to the sum of the ranks' partial outputs */
        free(L->bo);
        L->bo = NULL;
        free(L->exp_down_b);
        L->exp_down_b = NULL;
    }
    return PL_OK;
}

/* bert with pooling rank: the classification head (llama.cpp's cls / cls.output tensors, both
 * optional, at least one present); n_cls_out from cls.output.weight's rows, else dim. */
/* The model's hp.n_layers layer records, zeroed (the three binders fill them). */
static pl_status alloc_layers(pl_model *m) {
    m->layers = calloc((size_t)m->hp.n_layers, sizeof *m->layers);
    return m->layers ? PL_OK
                     : pl_fail(PL_ERR_NOMEM, "out of memory for %d layers", m->hp.n_layers);
}

static pl_status bind_bert_cls_head(pl_model *m) {
    const pl_gguf *g = m->file;
    const int64_t dim = m->hp.dim;
    const pl_gguf_tensor *co = pl_gguf_find_tensor(g, "cls.output.weight");
    const int has_cls = pl_gguf_find_tensor(g, "cls.weight") != NULL;
    if (!co && !has_cls)
        return pl_fail(PL_ERR_FORMAT, "bert.pooling_type is 4 (rank) but the model has no "
                       "classification head (tensors 'cls.weight' / 'cls.output.weight')");
    if (has_cls) {
        PL_TRY(bind_weight(g, "cls.weight", dim, dim, &m->cls));
        PL_TRY(load_vector(g, "cls.bias", dim, 1, &m->cls_b));
    }
    m->n_cls_out = (int32_t)dim;
    if (co) {
        if (co->ne[1] < 1 || co->ne[1] > dim)
            return pl_fail(PL_ERR_FORMAT, "tensor 'cls.output.weight' has %lld outputs (1..%lld)",
                           (long long)co->ne[1], (long long)dim);
        m->n_cls_out = (int32_t)co->ne[1];
        PL_TRY(bind_weight(g, "cls.output.weight", dim, m->n_cls_out, &m->cls_out));
        PL_TRY(load_vector(g, "cls.output.bias", m->n_cls_out, 1, &m->cls_out_b));
    }
    return PL_OK;
}

/* bert: embeddings (token, position, token type 0), LayerNorms, and every bias. */
static pl_status bind_bert_weights(pl_model *m) {
    const pl_gguf *g = m->file;
    pl_model_hparams *hp = &m->hp;
    const int64_t dim = hp->dim, ff = hp->ffn_dim;
    PL_TRY(bind_weight(g, "position_embd.weight", dim, hp->n_ctx_train, &m->pos_embd));
    const pl_gguf_tensor *tt = pl_gguf_find_tensor(g, "token_types.weight");
    if (tt) {
        if (tt->ne[0] != dim || tt->ne[1] < 1 || tt->ne[2] != 1 || tt->ne[3] != 1 ||
            (tt->type != PL_DT_F32 && tt->type != PL_DT_F16 && tt->type != PL_DT_BF16))
            return pl_fail(PL_ERR_FORMAT, "tensor 'token_types.weight' must be f32/f16/bf16 of "
                           "shape [%lld, n_types]", (long long)dim);
        if (!(m->type_embd = malloc((size_t)dim * sizeof(float))))
            return pl_fail(PL_ERR_NOMEM, "out of memory");
        pl_dequantize_row(tt->type, tt->data, m->type_embd, dim); /* type 0: sentence A */
    }
    PL_TRY(load_vector(g, "token_embd_norm.weight", dim, 0, &m->embd_norm));
    PL_TRY(load_vector(g, "token_embd_norm.bias", dim, 0, &m->embd_norm_b));
    PL_TRY(alloc_layers(m));
    for (int32_t l = 0; l < hp->n_layers; l++) {
        pl_layer_weights *L = &m->layers[l];
        char n[96];
#define NAME(s) (snprintf(n, sizeof n, "blk.%d." s, l), n)
        PL_TRY(bind_weight(g, NAME("attn_q.weight"), dim, dim, &L->wq));
        PL_TRY(bind_weight(g, NAME("attn_k.weight"), dim, dim, &L->wk));
        PL_TRY(bind_weight(g, NAME("attn_v.weight"), dim, dim, &L->wv));
        PL_TRY(bind_weight(g, NAME("attn_output.weight"), dim, dim, &L->wo));
        PL_TRY(load_vector(g, NAME("attn_q.bias"), dim, 1, &L->bq));
        PL_TRY(load_vector(g, NAME("attn_k.bias"), dim, 1, &L->bk));
        PL_TRY(load_vector(g, NAME("attn_v.bias"), dim, 1, &L->bv));
        PL_TRY(load_vector(g, NAME("attn_output.bias"), dim, 1, &L->bo));
        PL_TRY(load_vector(g, NAME("attn_output_norm.weight"), dim, 0, &L->attn_out_norm));
        PL_TRY(load_vector(g, NAME("attn_output_norm.bias"), dim, 0, &L->attn_out_norm_b));
        PL_TRY(bind_weight(g, NAME("ffn_up.weight"), dim, ff, &L->w_up));
        PL_TRY(load_vector(g, NAME("ffn_up.bias"), ff, 1, &L->b_up));
        PL_TRY(bind_weight(g, NAME("ffn_down.weight"), ff, dim, &L->w_down));
        PL_TRY(load_vector(g, NAME("ffn_down.bias"), dim, 1, &L->b_down));
        PL_TRY(load_vector(g, NAME("layer_output_norm.weight"), dim, 0, &L->out_norm));
        PL_TRY(load_vector(g, NAME("layer_output_norm.bias"), dim, 0, &L->out_norm_b));
#undef NAME
    }
    return hp->pooling == PL_POOL_RANK ? bind_bert_cls_head(m) : PL_OK;
}

/* gemma4: every layer with its own shape (model.h), K/V only for the layers that compute them
 * (attn_v optional: V is then K), Q/K norms, the post-attention and post-FFN norms, the
 * optional layer_output_scale, the FFN of the layer's width, rope_freqs for the full layers,
 * and with per_layer_dim > 0 the per-layer embedding tensors. */
static pl_status bind_gemma4_weights(pl_model *m) {
    const pl_gguf *g = m->file;
    pl_model_hparams *hp = &m->hp;
    const int32_t n = hp->n_layers, pld = hp->per_layer_dim;
    const int64_t dim = hp->dim;
    int32_t ffn[PL_MAX_LAYERS];
    PL_TRY(get_arch_ints(g, hp->arch_name, "feed_forward_length", -1, 1, 1 << 20, n, ffn));
    if (pld > 0) {
        PL_TRY(bind_weight(g, "per_layer_token_embd.weight", (int64_t)n * pld, hp->n_vocab,
                           &m->ple_embd));
        PL_TRY(bind_weight(g, "per_layer_model_proj.weight", dim, (int64_t)n * pld,
                           &m->ple_model_proj));
        PL_TRY(load_vector(g, "per_layer_proj_norm.weight", pld, 0, &m->ple_proj_norm));
    }
    if (!(m->ones = malloc((size_t)hp->head_dim * sizeof *m->ones)))
        return pl_fail(PL_ERR_NOMEM, "out of memory");
    for (int32_t i = 0; i < hp->head_dim; i++) m->ones[i] = 1.0f;
    for (int32_t l = 0; l < n && !m->rope_freqs; l++) /* the full layers' proportional RoPE */
        if (!hp->swa_layers[l])
            PL_TRY(load_vector(g, "rope_freqs.weight", hp->kv_shapes[l].head_dim / 2, 0,
                               &m->rope_freqs));
    hp->rope.freq_factors = m->rope_freqs;
    PL_TRY(alloc_layers(m));
    const pl_model_shard *sh = &m->shard;
    for (int32_t l = 0; l < n; l++) {
        pl_layer_weights *L = &m->layers[l];
        /* the full widths as stored (hp counts a shard's local heads: shard_hparams) */
        const int64_t hd = hp->kv_shapes[l].head_dim, q_dim = (int64_t)sh->n_heads * hd;
        const int64_t kv_dim = (int64_t)hp->kv_shapes[l].n_kv_heads * sh->size * hd;
        const int own_kv = l < pl_model_kv_tensors(hp);
        if (ffn[l] % sh->size)
            return pl_fail(PL_ERR_INVALID_ARG, "tensor-parallel-size %d does not divide layer "
                           "%d's FFN width %d ('%s.feed_forward_length')", sh->size, l, ffn[l],
                           hp->arch_name);
        char nm[96];
#define NAME(s) (snprintf(nm, sizeof nm, "blk.%d." s, l), nm)
        if (pl_gguf_find_tensor(g, NAME("attn_qkv.weight")))
            return pl_fail(PL_ERR_UNSUPPORTED, "tensor '%s' (a fused QKV) is not supported for "
                           "gemma4", nm);
        PL_TRY(load_vector(g, NAME("attn_norm.weight"), dim, 0, &L->attn_norm));
        PL_TRY(bind_weight(g, NAME("attn_q.weight"), dim, q_dim, &L->wq));
        PL_TRY(load_vector(g, NAME("attn_q_norm.weight"), hd, 0, &L->q_norm));
        if (own_kv) {
            PL_TRY(bind_weight(g, NAME("attn_k.weight"), dim, kv_dim, &L->wk));
            if (pl_gguf_find_tensor(g, NAME("attn_v.weight")))
                PL_TRY(bind_weight(g, nm, dim, kv_dim, &L->wv));
            PL_TRY(load_vector(g, NAME("attn_k_norm.weight"), hd, 0, &L->k_norm));
        }
        PL_TRY(bind_weight(g, NAME("attn_output.weight"), q_dim, dim, &L->wo));
        PL_TRY(load_vector(g, NAME("post_attention_norm.weight"), dim, 0, &L->attn_post_norm));
        PL_TRY(load_vector(g, NAME("layer_output_scale.weight"), 1, 1, &L->out_scale));
        PL_TRY(load_vector(g, NAME("ffn_norm.weight"), dim, 0, &L->ffn_norm));
        PL_TRY(bind_weight(g, NAME("ffn_gate.weight"), dim, ffn[l], &L->w_gate));
        PL_TRY(bind_weight(g, NAME("ffn_up.weight"), dim, ffn[l], &L->w_up));
        PL_TRY(bind_weight(g, NAME("ffn_down.weight"), ffn[l], dim, &L->w_down));
        PL_TRY(load_vector(g, NAME("post_ffw_norm.weight"), dim, 0, &L->ffn_post_norm));
        if (pl_gguf_find_tensor(g, NAME("ffn_gate_inp.weight"))) {
            /* the MoE variant: experts beside the dense FFN, their norms and router scale */
            if (hp->n_expert == 0)
                return pl_fail(PL_ERR_FORMAT, "tensor '%s' is a router, but '%s.expert_count' "
                               "is 0 or absent", nm, hp->arch_name);
            PL_TRY(bind_moe(g, L, l, dim, hp->n_expert, sh->expert_ffn));
            PL_TRY(load_vector(g, NAME("ffn_gate_inp.scale"), dim, 0, &L->gate_inp_s));
            for (int64_t i = 0; i < dim; i++) L->gate_inp_s[i] /= sqrtf((float)dim);
            PL_TRY(load_vector(g, NAME("pre_ffw_norm_2.weight"), dim, 0, &L->moe_pre_norm));
            PL_TRY(load_vector(g, NAME("post_ffw_norm_1.weight"), dim, 0, &L->shexp_post_norm));
            PL_TRY(load_vector(g, NAME("post_ffw_norm_2.weight"), dim, 0, &L->moe_post_norm));
        }
        if (pld > 0) {
            PL_TRY(bind_weight(g, NAME("inp_gate.weight"), dim, pld, &L->ple_gate));
            PL_TRY(bind_weight(g, NAME("proj.weight"), pld, dim, &L->ple_proj));
            PL_TRY(load_vector(g, NAME("post_norm.weight"), dim, 0, &L->ple_post_norm));
        }
#undef NAME
        if (sh->size > 1) PL_TRY(shard_layer(m, L, l, q_dim, own_kv ? kv_dim : 0, ffn[l]));
    }
    return PL_OK;
}

static pl_status bind_weights(pl_model *m) {
    const pl_gguf *g = m->file;
    pl_model_hparams *hp = &m->hp;
    const pl_model_shard *sh = &m->shard;
    /* Full shapes as stored, and this rank's slice of heads and FFN rows (all of them at 1). */
    const int64_t dim = hp->dim, q_dim = (int64_t)sh->n_heads * hp->head_dim;
    const int64_t kv_dim = (int64_t)sh->n_kv_heads * hp->head_dim, ff = sh->ffn_dim;

    const pl_gguf_tensor *emb = pl_gguf_find_tensor(g, "token_embd.weight");
    if (!emb) return pl_fail(PL_ERR_FORMAT, "missing tensor 'token_embd.weight'");
    hp->n_vocab = (int32_t)emb->ne[1];
    if (emb->ne[1] > INT32_MAX || emb->ne[1] < 1)
        return pl_fail(PL_ERR_FORMAT, "token_embd.weight has %lld rows", (long long)emb->ne[1]);
    PL_TRY(bind_weight(g, "token_embd.weight", dim, hp->n_vocab, &m->tok_embd));
    if (hp->arch == PL_ARCH_BERT) return bind_bert_weights(m);
    PL_TRY(load_vector(g, "output_norm.weight", dim, 0, &m->output_norm));
    if (pl_gguf_find_tensor(g, "output.weight") && hp->arch != PL_ARCH_GEMMA2)
        PL_TRY(bind_weight(g, "output.weight", dim, hp->n_vocab, &m->output));
    else
        m->output = m->tok_embd; /* tied embeddings (gemma2: always, as llama.cpp) */
    /* PAGELLM_TP_OUTPUT=rank0 (benchmarks): the output layer stays whole, for rank 0 alone */
    const char *how = getenv("PAGELLM_TP_OUTPUT");
    int split = sh->size > 1 && !(how && !strcmp(how, "rank0"));
    m->shard.vocab0 = split ? (int32_t)((int64_t)hp->n_vocab * sh->rank / sh->size) : 0;
    m->shard.n_vocab = split ? (int32_t)((int64_t)hp->n_vocab * (sh->rank + 1) / sh->size) -
                                   m->shard.vocab0
                             : hp->n_vocab;
    if (split) m->output = weight_rows(&m->output, m->shard.vocab0, m->shard.n_vocab);

    if (hp->arch == PL_ARCH_GEMMA4) return bind_gemma4_weights(m);
    if (hp->arch == PL_ARCH_PHI3) {
        /* LongRoPE (Phi-3 128k): llama.cpp uses rope_factors_long when its per-sequence context
         * exceeds original_context_length, else rope_factors_short; pagellm's sequences may
         * reach the trained context (max_model_len's default), so it decides on n_ctx_train,
         * as llama.cpp at its default context. phi3 has no rope_freqs in llama.cpp. */
        int lng = hp->n_ctx_train > hp->n_ctx_orig;
        const char *use = lng ? "rope_factors_long.weight" : "rope_factors_short.weight";
        const char *other = lng ? "rope_factors_short.weight" : "rope_factors_long.weight";
        PL_TRY(load_vector(g, use, hp->rope.n_rot / 2, 1, &m->rope_freqs));
        if (!m->rope_freqs && pl_gguf_find_tensor(g, other))
            return pl_fail(PL_ERR_FORMAT, "tensor '%s' is missing (its pair '%s' is present)",
                           use, other);
    } else if (pl_arch_is_qwen3(hp->arch) || hp->arch == PL_ARCH_GEMMA3) {
        /* their llama.cpp graphs rotate without frequency factors */
        if (pl_gguf_find_tensor(g, "rope_freqs.weight"))
            pl_log(PL_LOG_INFO, "rope_freqs.weight is not applied (as llama.cpp's %s)",
                   hp->arch_name);
    } else {
        PL_TRY(load_vector(g, "rope_freqs.weight", hp->rope.n_rot / 2, 1, &m->rope_freqs));
    }
    hp->rope.freq_factors = m->rope_freqs;
    PL_TRY(alloc_layers(m));
    for (int32_t l = 0; l < hp->n_layers; l++) {
        pl_layer_weights *L = &m->layers[l];
        char n[96];
#define NAME(s) (snprintf(n, sizeof n, "blk.%d." s, l), n)
        PL_TRY(load_vector(g, NAME("attn_norm.weight"), dim, 0, &L->attn_norm));
        if (pl_gguf_find_tensor(g, NAME("attn_qkv.weight"))) { /* fused: Q rows, K, V */
            pl_weight qkv;
            PL_TRY(bind_weight(g, n, dim, q_dim + 2 * kv_dim, &qkv));
            if (pl_gguf_find_tensor(g, NAME("attn_qkv.bias")))
                return pl_fail(PL_ERR_UNSUPPORTED, "tensor '%s' (a fused QKV bias) is not "
                               "supported", n);
            L->wq = weight_rows(&qkv, 0, q_dim);
            L->wk = weight_rows(&qkv, q_dim, kv_dim);
            L->wv = weight_rows(&qkv, q_dim + kv_dim, kv_dim);
        } else {
            PL_TRY(bind_weight(g, NAME("attn_q.weight"), dim, q_dim, &L->wq));
            PL_TRY(bind_weight(g, NAME("attn_k.weight"), dim, kv_dim, &L->wk));
            PL_TRY(bind_weight(g, NAME("attn_v.weight"), dim, kv_dim, &L->wv));
        }
        PL_TRY(bind_weight(g, NAME("attn_output.weight"), q_dim, dim, &L->wo));
        int bias_optional = hp->arch != PL_ARCH_QWEN2;
        PL_TRY(load_vector(g, NAME("attn_q.bias"), q_dim, bias_optional, &L->bq));
        PL_TRY(load_vector(g, NAME("attn_k.bias"), kv_dim, bias_optional, &L->bk));
        PL_TRY(load_vector(g, NAME("attn_v.bias"), kv_dim, bias_optional, &L->bv));
        if (pl_arch_is_qwen3(hp->arch) || hp->arch == PL_ARCH_GEMMA3) {
            PL_TRY(load_vector(g, NAME("attn_q_norm.weight"), hp->head_dim, 0, &L->q_norm));
            PL_TRY(load_vector(g, NAME("attn_k_norm.weight"), hp->head_dim, 0, &L->k_norm));
        }
        const int gptoss = hp->arch == PL_ARCH_GPT_OSS; /* its FFN norm is post_attention_norm */
        PL_TRY(load_vector(g, gptoss ? NAME("post_attention_norm.weight") : NAME("ffn_norm.weight"),
                           dim, 0, &L->ffn_norm));
        if (hp->n_expert > 0) { /* the router and the experts' 3-D tensors */
            const int64_t ne = hp->n_expert, ef = sh->expert_ffn;
            PL_TRY(bind_moe(g, L, l, dim, ne, ef));
            if (gptoss) {
                PL_TRY(load_vector(g, NAME("ffn_gate_inp.bias"), ne, 0, &L->gate_inp_b));
                PL_TRY(load_vectors(g, NAME("ffn_gate_exps.bias"), ef, ne, 0, &L->exp_gate_b));
                PL_TRY(load_vectors(g, NAME("ffn_up_exps.bias"), ef, ne, 0, &L->exp_up_b));
                PL_TRY(load_vectors(g, NAME("ffn_down_exps.bias"), dim, ne, 0, &L->exp_down_b));
                PL_TRY(load_vector(g, NAME("attn_output.bias"), dim, 0, &L->bo));
                PL_TRY(load_vector(g, NAME("attn_sinks.weight"), sh->n_heads, 0, &L->attn_sinks));
            }
        } else if (hp->arch == PL_ARCH_PHI3) { /* ffn_up holds the gate rows, then the up rows */
            pl_weight up;
            PL_TRY(bind_weight(g, NAME("ffn_up.weight"), dim, 2 * (int64_t)ff, &up));
            L->w_gate = weight_rows(&up, 0, ff);
            L->w_up = weight_rows(&up, ff, ff);
        } else {
            PL_TRY(bind_weight(g, NAME("ffn_gate.weight"), dim, ff, &L->w_gate));
            PL_TRY(bind_weight(g, NAME("ffn_up.weight"), dim, ff, &L->w_up));
        }
        if (pl_arch_is_gemma(hp->arch)) {
            PL_TRY(load_vector(g, NAME("post_attention_norm.weight"), dim, 0, &L->attn_post_norm));
            PL_TRY(load_vector(g, NAME("post_ffw_norm.weight"), dim, 0, &L->ffn_post_norm));
        }
        if (!hp->n_expert) PL_TRY(bind_weight(g, NAME("ffn_down.weight"), ff, dim, &L->w_down));
        static const char *const biases[] = {"attn_output.bias", "ffn_gate.bias", "ffn_up.bias",
                                             "ffn_down.bias"};
        for (int i = 0; i < 4 && hp->arch == PL_ARCH_MISTRAL3; i++)
            if (pl_gguf_find_tensor(g, (snprintf(n, sizeof n, "blk.%d.%s", l, biases[i]), n)))
                return pl_fail(PL_ERR_UNSUPPORTED, "tensor '%s' (mistral3's optional output and "
                               "FFN biases) is not supported", n);
        if (sh->size > 1) PL_TRY(shard_layer(m, L, l, q_dim, kv_dim, ff));
#undef NAME
    }
    return PL_OK;
}

/* The shard's local head and FFN counts; the full ones stay in m->shard. */
static pl_status shard_hparams(pl_model *m, int32_t rank, int32_t size) {
    pl_model_hparams *hp = &m->hp;
    m->shard = (pl_model_shard){.rank = rank, .size = size, .n_heads = hp->n_heads,
                                .n_kv_heads = hp->n_kv_heads, .ffn_dim = hp->ffn_dim,
                                .expert_ffn = hp->expert_ffn};
    if (size == 1) return PL_OK;
    if (hp->arch == PL_ARCH_BERT)
        return pl_fail(PL_ERR_UNSUPPORTED, "tensor parallelism supports the llama, qwen2, qwen3, "
                       "qwen3moe, gpt-oss, mistral3, gemma2, gemma3, gemma4 and phi3 "
                       "architectures, not '%s' (an embedding model runs on one process)",
                       hp->arch_name);
    for (int32_t l = 0; l < hp->n_layers; l++) { /* gemma4: every layer's own KV heads */
        const int32_t kvh = pl_model_layer_shape(hp, l).n_kv_heads;
        if (kvh % size)
            return pl_fail(PL_ERR_INVALID_ARG, "tensor-parallel-size %d does not divide the "
                           "model's %d KV heads%s (each rank holds whole KV heads: use a divisor "
                           "of %d)", size, kvh, hp->kv_shaped ? " of a layer" : "", kvh);
    }
    /* each expert is cut as a dense FFN (pl_model_shard); a mixture of experts has no dense FFN
     * but gemma4's, which keeps one beside its experts (each layer's width: bind_gemma4_weights) */
    const int moe = hp->n_expert > 0, dense = !moe || hp->arch == PL_ARCH_GEMMA4;
    if (moe && hp->expert_ffn % size)
        return pl_fail(PL_ERR_INVALID_ARG, "tensor-parallel-size %d does not divide the model's "
                       "experts' width %d", size, hp->expert_ffn);
    if (dense && hp->ffn_dim % size)
        return pl_fail(PL_ERR_INVALID_ARG, "tensor-parallel-size %d does not divide the model's "
                       "FFN width %d", size, hp->ffn_dim);
    hp->n_heads /= size;
    hp->n_kv_heads /= size;
    for (int32_t l = 0; hp->kv_shaped && l < hp->n_layers; l++) hp->kv_shapes[l].n_kv_heads /= size;
    if (moe) hp->expert_ffn /= size;
    if (dense) hp->ffn_dim /= size;
    return PL_OK;
}

pl_status pl_model_load(const char *path, pl_model **out) {
    return pl_model_load_shard(path, 0, 1, out);
}

pl_status pl_model_load_shard(const char *path, int32_t rank, int32_t size, pl_model **out) {
    return pl_model_load_with(path, rank, size, PL_F16_WEIGHTS_DEFAULT, out);
}

/* --f16-weights (or PAGELLM_F16_WEIGHTS when it is DEFAULT): 1 to convert, 0 to keep, or an
 * error naming the flag or variable. */
static pl_status f16_mode(pl_f16_weights f16, int *bf16) {
    const char *e = getenv("PAGELLM_F16_WEIGHTS");
    if (f16 == PL_F16_WEIGHTS_DEFAULT && e && *e && strcmp(e, "f16") && strcmp(e, "bf16"))
        return pl_fail(PL_ERR_INVALID_ARG, "PAGELLM_F16_WEIGHTS: '%s' is not f16 or bf16", e);
    *bf16 = f16 == PL_F16_WEIGHTS_BF16 || (f16 == PL_F16_WEIGHTS_DEFAULT && e && !strcmp(e, "bf16"));
    if (*bf16 && !pl_cpu_avx512bf16())
        return pl_fail(PL_ERR_UNSUPPORTED, "--f16-weights bf16 (PAGELLM_F16_WEIGHTS) needs the "
                       "avx512 kernel level with AVX512-BF16 (vdpbf16ps); here the level is %s%s: "
                       "use --f16-weights f16", pl_isa_name(pl_cpu_isa()),
                       pl_cpu_isa() == PL_ISA_AVX512 ? " without AVX512-BF16" : "");
    return PL_OK;
}

pl_status pl_model_load_with(const char *path, int32_t rank, int32_t size, pl_f16_weights f16,
                             pl_model **out) {
    *out = NULL;
    PL_ASSERT(size >= 1 && rank >= 0 && rank < size);
    int bf16;
    PL_TRY(f16_mode(f16, &bf16));
    pl_model *m = calloc(1, sizeof *m);
    if (!m) return pl_fail(PL_ERR_NOMEM, "out of memory");
    m->f16_as_bf16 = bf16;
    pl_status st = pl_gguf_open(path, &m->file);
    if (st == PL_OK) st = read_hparams(m->file, &m->hp);
    if (st == PL_OK) st = shard_hparams(m, rank, size);
    if (st == PL_OK) st = bind_weights(m);
    if (st == PL_OK) st = repack_weights(m);
    if (st == PL_OK) st = pl_tokenizer_load(m->file, &m->tok);
    if (st == PL_OK && pl_tokenizer_n_vocab(m->tok) != m->hp.n_vocab)
        st = pl_fail(PL_ERR_FORMAT, "the vocabulary has %d tokens but token_embd.weight has %d "
                     "rows", pl_tokenizer_n_vocab(m->tok), m->hp.n_vocab);
    if (st != PL_OK) {
        if (!m->file || strncmp(pl_last_error(), path, strlen(path)) != 0)
            pl_error_prefix("%s", path);
        pl_model_destroy(m);
        return st;
    }
    *out = m;
    return PL_OK;
}

void pl_model_destroy(pl_model *m) {
    if (!m) return;
    if (m->layers) {
        for (int32_t l = 0; l < m->hp.n_layers; l++) {
            pl_layer_weights *L = &m->layers[l];
            PL_FREE_ALL(L->attn_norm, L->ffn_norm, L->bq, L->bk, L->bv, L->bo, L->b_up, L->b_down,
                        L->attn_out_norm, L->attn_out_norm_b, L->out_norm, L->out_norm_b,
                        L->attn_post_norm, L->ffn_post_norm, L->q_norm, L->k_norm, L->exp_gate,
                        L->gate_inp_b, L->exp_gate_b, L->exp_up_b, L->exp_down_b, L->attn_sinks,
                        L->ple_post_norm, L->out_scale, L->exp_gate_s, L->exp_up_s,
                        L->exp_down_s, L->shexp_post_norm, L->moe_pre_norm, L->moe_post_norm,
                        L->gate_inp_s);
        }
        free(m->layers);
    }
    for (int32_t i = 0; i < m->n_owned; i++) free(m->owned[i]);
    PL_FREE_ALL(m->cls_b, m->cls_out_b, m->ple_proj_norm, m->ones);
    PL_FREE_ALL(m->output_norm, m->rope_freqs, m->type_embd, m->embd_norm, m->embd_norm_b,
                m->owned);
    pl_tokenizer_destroy(m->tok);
    pl_gguf_close(m->file);
    free(m);
}
