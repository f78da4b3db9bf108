/* Unit tests for kernels/ops against straightforward double-precision references. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "base/fp16.h"
#include "base/rng.h"
#include "kernels/cpu.h"
#include "kernels/ops.h"
#include "isa_coverage.h"

#include <math.h>
#include <stdlib.h>

static void fill(float *x, int64_t n, pl_rng *r) {
    for (int64_t i = 0; i < n; i++) x[i] = (float)(pl_rng_uniform(r) * 4 - 2);
}

static void test_rmsnorm(void **state) {
    (void)state;
    pl_rng r;
    pl_rng_seed(&r, 1);
    pl_threadpool *tp = pl_threadpool_create(2);
    enum { N = 7, D = 67 };
    float x[N * D], w[D], y[N * D];
    fill(x, N * D, &r);
    fill(w, D, &r);
    pl_rmsnorm(tp, y, x, w, N, D, 1e-5f);
    for (int n = 0; n < N; n++) {
        double ss = 0;
        for (int i = 0; i < D; i++) ss += (double)x[n * D + i] * x[n * D + i];
        double sc = 1.0 / sqrt(ss / D + 1e-5);
        for (int i = 0; i < D; i++)
            assert_true(fabs(y[n * D + i] - x[n * D + i] * sc * w[i]) < 1e-5);
    }
    /* In place gives the same. */
    pl_rmsnorm(tp, x, x, w, N, D, 1e-5f);
    assert_memory_equal(x, y, sizeof x);
    pl_threadpool_destroy(tp);
}

static void rope_ref(pl_rope_mode mode, int n_rot, float base, float scale, int pos, double *v) {
    int half = n_rot / 2;
    for (int i = 0; i < half; i++) {
        double theta = pos * scale * pow(base, -2.0 * i / n_rot);
        int a = mode == PL_ROPE_NEOX ? i : 2 * i, b = mode == PL_ROPE_NEOX ? i + half : 2 * i + 1;
        double x0 = v[a], x1 = v[b];
        v[a] = x0 * cos(theta) - x1 * sin(theta);
        v[b] = x0 * sin(theta) + x1 * cos(theta);
    }
}

static void test_rope(void **state) {
    (void)state;
    pl_rng r;
    pl_rng_seed(&r, 2);
    enum { T = 5, H = 3, HD = 16 };
    int32_t pos[T] = {0, 1, 7, 100, 511};
    for (int mode = 0; mode < 2; mode++)
        for (int n_rot = 8; n_rot <= HD; n_rot += 8) {
            pl_rope_params p = {.mode = mode ? PL_ROPE_NEOX : PL_ROPE_NORM, .n_rot = n_rot,
                                .freq_base = 10000.0f, .freq_scale = 0.5f};
            float x[T * H * HD], cs[T * HD];
            double ref[T * H * HD];
            fill(x, T * H * HD, &r);
            for (int i = 0; i < T * H * HD; i++) ref[i] = x[i];
            pl_rope_cache(&p, pos, T, cs);
            pl_rope_apply(&p, cs, x, T, H, HD);
            for (int t = 0; t < T; t++)
                for (int h = 0; h < H; h++)
                    rope_ref(p.mode, n_rot, 10000.0f, 0.5f, pos[t], ref + (t * H + h) * HD);
            for (int i = 0; i < T * H * HD; i++) assert_true(fabs(x[i] - ref[i]) < 2e-4);
        }
}

/* YaRN (factor 4, original context 64, rope_freqs divisors, attn_factor 0.9) against the
 * formula in double: pair i's angle mixes pos*inv/ff/4 and pos*inv/ff by the ramp over the
 * correction dims, and cos/sin are scaled by 0.9 * (1 + 0.1 ln 4). */
static void test_rope_yarn(void **state) {
    (void)state;
    enum { T = 4, NR = 32, HALF = NR / 2 };
    int32_t pos[T] = {0, 3, 200, 1000};
    float ff[HALF];
    for (int i = 0; i < HALF; i++) ff[i] = 1.0f + (float)i / 4;
    pl_rope_params p = {.mode = PL_ROPE_NORM, .n_rot = NR, .freq_base = 10000.0f,
                        .freq_scale = 0.25f, .freq_factors = ff, .ext_factor = 1.0f,
                        .mscale = 0.9f};
    pl_rope_yarn_corr_dims(NR, 64, 10000.0f, 32.0f, 1.0f, p.corr_dims);
    double d_fast = NR * log(64 / (32 * 2 * M_PI)) / (2 * log(10000.0));
    double d_slow = NR * log(64 / (1 * 2 * M_PI)) / (2 * log(10000.0));
    double lo = fmax(0, floor(d_fast)), hi = fmin(NR - 1, ceil(d_slow));
    assert_true(p.corr_dims[0] == (float)lo && p.corr_dims[1] == (float)hi && hi > lo);
    float cs[T * NR];
    pl_rope_cache(&p, pos, T, cs);
    for (int t = 0; t < T; t++)
        for (int i = 0; i < HALF; i++) {
            double extrap = pos[t] * pow(10000.0, -2.0 * i / NR) / ff[i];
            double ramp = 1 - fmin(1, fmax(0, (i - lo) / fmax(0.001, hi - lo)));
            double theta = extrap * 0.25 * (1 - ramp) + extrap * ramp;
            double m = 0.9 * (1 + 0.1 * log(4.0));
            assert_true(fabs(cs[(t * HALF + i) * 2] - cos(theta) * m) < 2e-4);
            assert_true(fabs(cs[(t * HALF + i) * 2 + 1] - sin(theta) * m) < 2e-4);
        }
}

static void test_swiglu_softmax(void **state) {
    (void)state;
    pl_rng r;
    pl_rng_seed(&r, 3);
    enum { N = 5000 };
    float *g = malloc(N * sizeof(float)), *u = malloc(N * sizeof(float));
    float *g0 = malloc(N * sizeof(float)), *lp = malloc(N * sizeof(float));
    fill(g, N, &r);
    fill(u, N, &r);
    for (int i = 0; i < N; i++) g0[i] = g[i];
    pl_threadpool *tp = pl_threadpool_create(2);
    pl_swiglu(tp, g, u, 1, N);
    for (int i = 0; i < N; i++)
        assert_true(fabs(g[i] - g0[i] / (1 + exp(-g0[i])) * u[i]) < 1e-5);
    double lse = pl_log_softmax(g0, lp, N);
    double sum = 0;
    for (int i = 0; i < N; i++) sum += exp(lp[i]);
    assert_true(fabs(sum - 1) < 1e-5);
    assert_true(fabs(lp[3] - (g0[3] - lse)) < 1e-6);
    pl_threadpool_destroy(tp);
    free(g), free(u), free(g0), free(lp);
}

/* RMSNorm and SwiGLU on every ISA the machine has (scalar forced too): against the double
 * reference, and bitwise the same with 1 or 2 threads and whether a row is normed alone or in a
 * batch (the vector rows mask their tails instead of finishing them in scalar code). */
static void test_ops_isas_threads(void **state) {
    (void)state;
    pl_rng r;
    pl_rng_seed(&r, 9);
    enum { N = 9, D = 133, F = 4099 };
    static float x[N * D], w[D], y1[N * D], y2[N * D], y3[D];
    static float g[F], u[F], g1[F], g2[F];
    fill(x, N * D, &r);
    fill(w, D, &r);
    fill(g, F, &r);
    fill(u, F, &r);
    pl_threadpool *tp1 = pl_threadpool_create(1), *tp2 = pl_threadpool_create(2);
    unsigned ran = 0;
    for (int isa = PL_ISA_SCALAR; isa <= (int)pl_cpu_max_isa(); isa++) {
        if (!isa_level_runs(isa)) continue; /* isa_coverage.h */
        pl_cpu_force_isa((pl_isa)isa);
        isa_ran(&ran);
        pl_rmsnorm(tp1, y1, x, w, N, D, 1e-5f);
        pl_rmsnorm(tp2, y2, x, w, N, D, 1e-5f);
        assert_memory_equal(y1, y2, sizeof y1);
        pl_rmsnorm(tp2, y3, x + 5 * D, w, 1, D, 1e-5f);
        assert_memory_equal(y3, y1 + 5 * D, sizeof y3);
        for (int n = 0; n < N; n++) {
            double ss = 0;
            for (int i = 0; i < D; i++) ss += (double)x[n * D + i] * x[n * D + i];
            double sc = 1.0 / sqrt(ss / D + 1e-5);
            for (int i = 0; i < D; i++)
                assert_true(fabs(y1[n * D + i] - x[n * D + i] * sc * w[i]) < 1e-5);
        }
        for (int i = 0; i < F; i++) g1[i] = g2[i] = g[i];
        pl_swiglu(tp1, g1, u, 1, F);
        pl_swiglu(tp2, g2, u, 1, F);
        assert_memory_equal(g1, g2, sizeof g1);
        for (int i = 0; i < F; i++)
            assert_true(fabs(g1[i] - g[i] / (1 + exp(-(double)g[i])) * u[i]) < 1e-5);
    }
    pl_cpu_force_isa(PL_ISA_AVX512);
    isa_coverage_check("rmsnorm and swiglu", ran);
    pl_threadpool_destroy(tp1);
    pl_threadpool_destroy(tp2);
}

/* GELU and GeGLU on every ISA (scalar forced too), 1 and 2 threads: bitwise GGML's definition
 * computed here directly (x <= -10 -> 0, x >= 10 -> x, else the tanh approximation of x rounded
 * to f16, with 1 + a*h*h fused as GGML's host build computes it, rounded to f16), on every f16
 * value, on floats between them (rounding ties and the edges at +-10), infinities, and a length
 * whose tail is not a whole vector; and the one table entry where the fused and unfused forms
 * differ, at the value llama.cpp's libggml-cpu gives (measured). */
static float gelu_ref(float x) {
    if (x <= -10.0f) return 0.0f;
    if (x >= 10.0f) return x;
    float h = pl_f16_to_f32(pl_f32_to_f16(x));
    const float c = 0.79788456080286535587989211986876f;
    float g = 0.5f * h * (1.0f + tanhf(c * h * fmaf(0.044715f * h, h, 1.0f)));
    return pl_f16_to_f32(pl_f32_to_f16(g));
}

static void test_gelu_isas_threads(void **state) {
    (void)state;
    enum { NH = 1 << 16, NR = 4099, N = NH + NR + 8 };
    float *x = malloc(N * sizeof(float)), *u = malloc(N * sizeof(float));
    float *y = malloc(N * sizeof(float)), *ref = malloc(N * sizeof(float));
    int64_t n = 0;
    for (uint32_t i = 0; i < NH; i++) { /* every f16 value but NaNs */
        float v = pl_f16_to_f32((pl_f16)i);
        if (v == v) x[n++] = v;
    }
    pl_rng r;
    pl_rng_seed(&r, 11);
    for (int i = 0; i < NR; i++) x[n++] = (float)(pl_rng_uniform(&r) * 24 - 12);
    const float edges[] = {10.0f, -10.0f, nextafterf(10.0f, 0), nextafterf(-10.0f, 0),
                           9.998f, -9.998f, INFINITY, -INFINITY};
    for (int i = 0; i < 8; i++) x[n++] = edges[i];
    for (int64_t i = 0; i < n; i++) u[i] = (float)(pl_rng_uniform(&r) * 4 - 2);
    pl_threadpool *tp[2] = {pl_threadpool_create(1), pl_threadpool_create(2)};
    unsigned ran = 0;
    for (int isa = PL_ISA_SCALAR; isa <= (int)pl_cpu_max_isa(); isa++) {
        if (!isa_level_runs(isa)) continue; /* isa_coverage.h */
        pl_cpu_force_isa((pl_isa)isa);
        isa_ran(&ran);
        for (int t = 0; t < 2; t++) {
            for (int64_t i = 0; i < n; i++) y[i] = x[i], ref[i] = gelu_ref(x[i]);
            pl_gelu(tp[t], y, n);
            assert_memory_equal(y, ref, (size_t)n * sizeof(float));
            for (int64_t i = 0; i < n; i++) y[i] = x[i], ref[i] *= u[i];
            pl_geglu(tp[t], y, u, 1, n);
            assert_memory_equal(y, ref, (size_t)n * sizeof(float));
            float e = pl_f16_to_f32(0xbfff); /* -1.999: GGML's table holds -0.0455017 */
            pl_gelu(tp[t], &e, 1);
            assert_true(e == -0.045501709f);
        }
    }
    pl_cpu_force_isa(PL_ISA_AVX512);
    isa_coverage_check("gelu", ran);
    pl_threadpool_destroy(tp[0]);
    pl_threadpool_destroy(tp[1]);
    free(x), free(u), free(y), free(ref);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rmsnorm),
        cmocka_unit_test(test_rope),
        cmocka_unit_test(test_rope_yarn),
        cmocka_unit_test(test_swiglu_softmax),
        cmocka_unit_test(test_ops_isas_threads),
        cmocka_unit_test(test_gelu_isas_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
