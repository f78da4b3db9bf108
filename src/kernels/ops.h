/* kernels/ops — the small per-token operators of the forward pass: RMSNorm, RoPE, SwiGLU,
 * residual adds, log-softmax. Each works on `n` rows of a flat [n][dim] f32 array, so one call
 * covers a whole step batch; the threaded variants split rows over the pool.
 *
 * RoPE follows GGML's two layouts: PL_ROPE_NORM rotates adjacent pairs (x[2i], x[2i+1]) (Llama
 * GGUFs, whose Q/K weights the converter permuted for it) and PL_ROPE_NEOX rotates (x[i],
 * x[i + n_rot/2]) (Qwen2, GPT-NeoX). Only the first n_rot dims of each head are rotated.
 */
#ifndef PL_KERNELS_OPS_H
#define PL_KERNELS_OPS_H

#include "base/threadpool.h"

#include <stdint.h>

/* y[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w, for r < n rows of dim elements (y may equal x). */
void pl_rmsnorm(pl_threadpool *tp, float *y, const float *x, const float *w, int64_t n,
                int64_t dim, float eps);

typedef enum { PL_ROPE_NORM = 0, PL_ROPE_NEOX = 2 } pl_rope_mode;

typedef struct {
    pl_rope_mode mode;
    int32_t n_rot;            /* rotated dims per head (even, <= head_dim) */
    float freq_base;          /* theta base, e.g. 10000 */
    float freq_scale;         /* 1 / linear scaling factor */
    const float *freq_factors;/* [n_rot/2] per-pair divisors (Llama 3.1 rope_freqs) or NULL */
    /* YaRN (GGML's rope_yarn): ext_factor 0 = plain interpolation; else pair i mixes the
     * interpolated and the extrapolated angle by ramp(i) * ext_factor, ramp 1 below
     * corr_dims[0] and 0 above corr_dims[1], and cos/sin are scaled by
     * mscale * (1 + 0.1 ln(1 / freq_scale)). mscale scales cos/sin in every mode (0 means 1). */
    float ext_factor;
    float corr_dims[2];
    float mscale;
} pl_rope_params;

/* GGML's YaRN correction range for n_rot dims, original context n_ctx_orig, base freq_base and
 * beta_fast / beta_slow (rotations): dims[0] = max(0, floor(d(beta_fast))), dims[1] =
 * min(n_rot - 1, ceil(d(beta_slow))), d(b) = n_rot ln(n_ctx_orig / (2 pi b)) / (2 ln base). */
void pl_rope_yarn_corr_dims(int32_t n_rot, int32_t n_ctx_orig, float freq_base, float beta_fast,
                            float beta_slow, float dims[2]);

/* Fill cs[t][n_rot/2][2] with (cos, sin) of every token's angles (shared by heads and layers). */
void pl_rope_cache(const pl_rope_params *p, const int32_t *positions, int64_t n_tokens,
                   float *cs);
/* Rotate x[t][n_heads][head_dim] in place with the angles of cs[t]. */
void pl_rope_apply(const pl_rope_params *p, const float *cs, float *x, int64_t n_tokens,
                   int32_t n_heads, int32_t head_dim);

/* g[i] = silu(g[i]) * u[i] over n rows of dim (SwiGLU). */
void pl_swiglu(pl_threadpool *tp, float *g, const float *u, int64_t n, int64_t dim);
/* gpt-oss's clamped SwiGLU over len elements, as GGML's swiglu_oai: x = min(g, limit),
 * y = clamp(u, -limit, limit), g = x / (1 + exp(-alpha x)) * (y + 1) (single-threaded). */
void pl_swiglu_oai(float *g, const float *u, int64_t len, float alpha, float limit);
/* LayerNorm (bert): y[r] = (x[r] - mean) / sqrt(var + eps) * w + b over n rows of dim, with
 * mean and variance summed in double (y may equal x). */
void pl_layernorm(pl_threadpool *tp, float *y, const float *x, const float *w, const float *b,
                  int64_t n, int64_t dim, float eps);
/* x[i] = gelu(x[i]) over len elements, the tanh approximation computed as GGML's CPU backend
 * does: the input rounded to f16, the result rounded to f16 (its lookup table), x <= -10 -> 0,
 * x >= 10 -> x. Bit-exact with llama.cpp's ggml_gelu on f32. */
void pl_gelu(pl_threadpool *tp, float *x, int64_t len);
/* g[i] = gelu(g[i]) * u[i] over n rows of dim (GeGLU, Gemma 2): pl_gelu's values, bit-exact
 * with llama.cpp's ggml_geglu on f32. */
void pl_geglu(pl_threadpool *tp, float *g, const float *u, int64_t n, int64_t dim);
/* x[i] += y[i], len elements. */
void pl_add(float *x, const float *y, int64_t len);
/* x[r][i] += b[i] for n rows of dim (biases). */
void pl_add_bias(float *x, const float *b, int64_t n, int64_t dim);

/* AVX-512 rows behind pl_rmsnorm / pl_swiglu / pl_gelu (ops_avx512.c; callers check pl_cpu_isa()). */
void pl_rmsnorm_row_avx512(float *y, const float *x, const float *w, int64_t dim, float eps);
void pl_swiglu_avx512(float *g, const float *u, int64_t n);
/* g[i] = gelu(g[i]) (* u[i] when u is not NULL) over n elements, the middle range's values
 * looked up in table[f16 bits of g[i]] (pl_gelu's table). */
void pl_geglu_avx512(float *g, const float *u, int64_t n, const float *table);
/* The same RMSNorm and SwiGLU rows with AVX2 + FMA, below AVX-512 (ops_avx2.c). */
void pl_rmsnorm_row_avx2(float *y, const float *x, const float *w, int64_t dim, float eps);
void pl_swiglu_avx2(float *g, const float *u, int64_t n);

/* out[i] = x[i] - logsumexp(x) (in double, then rounded). Returns logsumexp. */
double pl_log_softmax(const float *x, float *out, int64_t n);

#endif
