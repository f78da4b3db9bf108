/* kernels/ops — see ops.h. Plain C, with RMSNorm, SwiGLU and GELU rows in AVX-512 (ops_avx512.c)
 * and RMSNorm and SwiGLU rows in AVX2 (ops_avx2.c) when pl_cpu_isa() allows; the heavy kernels
 * live in matmul*.c and attention*.c. */
#include "kernels/ops.h"

#include "kernels/cpu.h"
#include "base/fp16.h"

#include <math.h>
#include <pthread.h>
#include <stddef.h>

/* The rows of RMSNorm and LayerNorm (b: LayerNorm's bias, NULL for RMSNorm). */
typedef struct {
    float *y;
    const float *x, *w, *b;
    int64_t n, dim;
    float eps;
} norm_job;

static void rmsnorm_row(float *y, const float *x, const norm_job *j) {
    double ss = 0;
    for (int64_t i = 0; i < j->dim; i++) ss += (double)x[i] * x[i];
    float scale = 1.0f / sqrtf((float)(ss / (double)j->dim) + j->eps);
    for (int64_t i = 0; i < j->dim; i++) y[i] = x[i] * scale * j->w[i];
}

static void layernorm_row(float *y, const float *x, const norm_job *j) {
    double sum = 0;
    for (int64_t i = 0; i < j->dim; i++) sum += x[i];
    float mean = (float)(sum / (double)j->dim);
    double var = 0;
    for (int64_t i = 0; i < j->dim; i++) {
        float v = x[i] - mean;
        y[i] = v;
        var += (double)(v * v);
    }
    float scale = 1.0f / sqrtf((float)(var / (double)j->dim) + j->eps);
    for (int64_t i = 0; i < j->dim; i++) y[i] = y[i] * scale * j->w[i] + j->b[i];
}

/* A part's rows; RMSNorm in AVX-512 or AVX2 when the CPU has it. */
static void norm_rows(void *p, int ith, int nth) {
    norm_job *j = p;
    int64_t r0, r1;
    pl_split_range(j->n, ith, nth, 1, &r0, &r1);
    const int vec = j->b ? 0 : pl_cpu_isa() >= PL_ISA_AVX512 ? 512 : pl_cpu_isa() >= PL_ISA_AVX2 ? 2 : 0;
    for (int64_t r = r0; r < r1; r++) {
        const float *x = j->x + r * j->dim;
        float *y = j->y + r * j->dim;
        if (vec == 512) pl_rmsnorm_row_avx512(y, x, j->w, j->dim, j->eps);
        else if (vec) pl_rmsnorm_row_avx2(y, x, j->w, j->dim, j->eps);
        else if (j->b) layernorm_row(y, x, j);
        else rmsnorm_row(y, x, j);
    }
}

static void norm_run(pl_threadpool *tp, norm_job j) {
    pl_threadpool_run_n(tp, j.n >= 4 ? pl_threadpool_size(tp) : 1, norm_rows, &j);
}

void pl_rmsnorm(pl_threadpool *tp, float *y, const float *x, const float *w, int64_t n,
                int64_t dim, float eps) {
    norm_run(tp, (norm_job){y, x, w, NULL, n, dim, eps});
}

static float yarn_corr_dim(int32_t n_rot, int32_t n_ctx_orig, float rot, float base) {
    return (float)n_rot * logf((float)n_ctx_orig / (rot * 2 * 3.14159265358979323846f)) /
           (2 * logf(base));
}

void pl_rope_yarn_corr_dims(int32_t n_rot, int32_t n_ctx_orig, float freq_base, float beta_fast,
                            float beta_slow, float dims[2]) {
    float start = floorf(yarn_corr_dim(n_rot, n_ctx_orig, beta_fast, freq_base));
    float end = ceilf(yarn_corr_dim(n_rot, n_ctx_orig, beta_slow, freq_base));
    dims[0] = start > 0 ? start : 0;
    dims[1] = end < (float)(n_rot - 1) ? end : (float)(n_rot - 1);
}

/* Angles as GGML's rope_yarn: theta = pos * base^(-2i/n_rot) (powf per pair: GGML's running
 * product moves the quantized models' references beyond their calibrated bounds), divided by the
 * pair's factor, interpolated by freq_scale, YaRN-mixed when ext_factor != 0. */
void pl_rope_cache(const pl_rope_params *p, const int32_t *positions, int64_t n_tokens,
                   float *cs) {
    int32_t half = p->n_rot / 2;
    float mscale = p->mscale != 0 ? p->mscale : 1.0f;
    if (p->ext_factor != 0) mscale *= 1.0f + 0.1f * logf(1.0f / p->freq_scale);
    const float corr_span = fmaxf(0.001f, p->corr_dims[1] - p->corr_dims[0]);
    for (int64_t t = 0; t < n_tokens; t++) {
        float pos = (float)positions[t];
        float *c = cs + t * half * 2;
        for (int32_t i = 0; i < half; i++) {
            float theta_base = pos * powf(p->freq_base, -2.0f * (float)i / (float)p->n_rot);
            float extrap = p->freq_factors ? theta_base / p->freq_factors[i] : theta_base;
            float theta = p->freq_scale * extrap;
            if (p->ext_factor != 0) {
                float y = ((float)i - p->corr_dims[0]) / corr_span;
                float mix = (1 - fminf(1, fmaxf(0, y))) * p->ext_factor;
                theta = theta * (1 - mix) + extrap * mix;
            }
            c[2 * i] = cosf(theta) * mscale;
            c[2 * i + 1] = sinf(theta) * mscale;
        }
    }
}

void pl_rope_apply(const pl_rope_params *p, const float *cs, float *x, int64_t n_tokens,
                   int32_t n_heads, int32_t head_dim) {
    int32_t half = p->n_rot / 2;
    for (int64_t t = 0; t < n_tokens; t++) {
        const float *c = cs + t * half * 2;
        for (int32_t h = 0; h < n_heads; h++) {
            float *v = x + (t * n_heads + h) * head_dim;
            for (int32_t i = 0; i < half; i++) {
                int32_t a = p->mode == PL_ROPE_NEOX ? i : 2 * i;
                int32_t b = p->mode == PL_ROPE_NEOX ? i + half : 2 * i + 1;
                float x0 = v[a], x1 = v[b];
                v[a] = x0 * c[2 * i] - x1 * c[2 * i + 1];
                v[b] = x0 * c[2 * i + 1] + x1 * c[2 * i];
            }
        }
    }
}

/* An element-wise pass over len floats of g (SwiGLU: times u; GELU: times u unless u is NULL). */
typedef struct {
    float *g;
    const float *u;
    int64_t len;
    int gelu;
} elem_job;

static void swiglu_span(float *g, const float *u, int64_t len) {
    if (pl_cpu_isa() >= PL_ISA_AVX512) {
        pl_swiglu_avx512(g, u, len);
        return;
    }
    if (pl_cpu_isa() >= PL_ISA_AVX2) {
        pl_swiglu_avx2(g, u, len);
        return;
    }
    for (int64_t i = 0; i < len; i++) g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

static void gelu_span(float *g, const float *u, int64_t len);

static void elem_part(void *p, int ith, int nth) {
    elem_job *j = p;
    int64_t i0, i1;
    pl_split_range(j->len, ith, nth, 64, &i0, &i1);
    (j->gelu ? gelu_span : swiglu_span)(j->g + i0, j->u ? j->u + i0 : NULL, i1 - i0);
}

/* Threaded once there is enough of it. */
static void elem_run(pl_threadpool *tp, elem_job j) {
    pl_threadpool_run_n(tp, j.len >= 4096 ? pl_threadpool_size(tp) : 1, elem_part, &j);
}

void pl_swiglu_oai(float *g, const float *u, int64_t len, float alpha, float limit) {
    for (int64_t i = 0; i < len; i++) {
        const float x = g[i] < limit ? g[i] : limit;
        const float y = u[i] < -limit ? -limit : u[i] > limit ? limit : u[i];
        g[i] = x / (1.0f + expf(alpha * (-x))) * (y + 1.0f);
    }
}

void pl_swiglu(pl_threadpool *tp, float *g, const float *u, int64_t n, int64_t dim) {
    elem_run(tp, (elem_job){g, u, n * dim, 0});
}

void pl_layernorm(pl_threadpool *tp, float *y, const float *x, const float *w, const float *b,
                  int64_t n, int64_t dim, float eps) {
    norm_run(tp, (norm_job){y, x, w, b, n, dim, eps});
}

/* GELU as GGML's CPU backend computes it on f32: x <= -10 -> 0, x >= 10 -> x, otherwise the
 * tanh approximation of x rounded to f16, rounded to f16 (GGML's lookup table). Every value of
 * the middle case depends only on x's f16 bits, so it is read from a table of the 65,536 results
 * (filled once, like GGML's), which is what makes Gemma's GeGLU cheap. GGML's CPU backend is
 * built for the host (-march=native) by a compiler that contracts 1 + a*h*h into one FMA, so
 * its table is filled with fmaf(a*h, h, 1): the unfused form differs in one entry of the 65,536
 * (h = -1.999, f16 0xbfff: -0.0454712 against GGML's -0.0455017; issue 33). */
static float gelu_table[1 << 16];
static pthread_once_t gelu_once = PTHREAD_ONCE_INIT;

static void gelu_fill(void) {
    const float c = 0.79788456080286535587989211986876f; /* sqrt(2 / pi) */
    for (uint32_t i = 0; i < 1u << 16; i++) {
        float h = pl_f16_to_f32((pl_f16)i);
        float g = 0.5f * h * (1.0f + tanhf(c * h * fmaf(0.044715f * h, h, 1.0f)));
        gelu_table[i] = pl_f16_to_f32(pl_f32_to_f16(g));
    }
}

static void gelu_span(float *g, const float *u, int64_t len) {
    if (pl_cpu_isa() >= PL_ISA_AVX512) {
        pl_geglu_avx512(g, u, len, gelu_table);
        return;
    }
    for (int64_t i = 0; i < len; i++) {
        const float x = g[i];
        float y = x <= -10.0f ? 0.0f : x >= 10.0f ? x : gelu_table[pl_f32_to_f16(x)];
        g[i] = u ? y * u[i] : y;
    }
}

/* GELU (u NULL) or GeGLU over len elements of g. */
static void gelu_run(pl_threadpool *tp, float *g, const float *u, int64_t len) {
    pthread_once(&gelu_once, gelu_fill);
    elem_run(tp, (elem_job){g, u, len, 1});
}

void pl_gelu(pl_threadpool *tp, float *x, int64_t len) { gelu_run(tp, x, NULL, len); }

void pl_geglu(pl_threadpool *tp, float *g, const float *u, int64_t n, int64_t dim) {
    gelu_run(tp, g, u, n * dim);
}

void pl_add(float *x, const float *y, int64_t len) {
    for (int64_t i = 0; i < len; i++) x[i] += y[i];
}

void pl_add_bias(float *x, const float *b, int64_t n, int64_t dim) {
    for (int64_t r = 0; r < n; r++)
        for (int64_t i = 0; i < dim; i++) x[r * dim + i] += b[i];
}

double pl_log_softmax(const float *x, float *out, int64_t n) {
    float mx = -INFINITY;
    for (int64_t i = 0; i < n; i++)
        if (x[i] > mx) mx = x[i];
    double sum = 0;
    for (int64_t i = 0; i < n; i++) sum += exp((double)x[i] - mx);
    double lse = mx + log(sum);
    if (out)
        for (int64_t i = 0; i < n; i++) out[i] = (float)((double)x[i] - lse);
    return lse;
}
