/* Unit tests for kernels/matmul and kernels/quant: block layouts on hand-built blocks, llama.cpp's
 * rounding in the quantizers, quantize -> dequantize error bounds, and pl_matmul against the
 * scalar reference for every weight type and every instruction set this machine has, with
 * bitwise checks that results do not depend on the thread count or the batch. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "base/fp16.h"
#include "base/rng.h"
#include "base/threadpool.h"
#include "kernels/cpu.h"
#include "kernels/matmul.h"
#include "kernels/quant.h"
#include "isa_coverage.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const pl_dtype all_types[] = {PL_DT_F32,  PL_DT_F16,  PL_DT_BF16, PL_DT_Q8_0,  PL_DT_Q4_0,
                                     PL_DT_Q4_K, PL_DT_Q5_K, PL_DT_Q6_K, PL_DT_Q4_1,  PL_DT_Q5_0,
                                     PL_DT_Q5_1, PL_DT_IQ4_NL, PL_DT_Q2_K, PL_DT_Q3_K, PL_DT_IQ4_XS,
                                     PL_DT_MXFP4};
enum { N_TYPES = sizeof all_types / sizeof all_types[0] };

/* ---- hand-built blocks: the layout itself ----------------------------------------------- */

static void test_dequant_q8_0_q4_0_layout(void **state) {
    (void)state;
    pl_block_q8_0 b8;
    b8.d = 0x3800; /* 0.5 */
    for (int j = 0; j < 32; j++) b8.qs[j] = (int8_t)(j * 5 - 80);
    float y[32];
    pl_dequantize_row(PL_DT_Q8_0, &b8, y, 32);
    for (int j = 0; j < 32; j++) assert_true(y[j] == 0.5f * (j * 5 - 80));

    pl_block_q4_0 b4;
    b4.d = 0x4000; /* 2.0 */
    for (int j = 0; j < 16; j++) b4.qs[j] = (uint8_t)(j | ((15 - j) << 4));
    pl_dequantize_row(PL_DT_Q4_0, &b4, y, 32);
    assert_true(y[0] == -16.0f);  /* low nibble 0 -> (0 - 8) * 2 */
    assert_true(y[16] == 14.0f);  /* high nibble 15 of byte 0 -> element 16 */
    assert_true(y[15] == 14.0f);  /* low nibble 15 of byte 15 */
    assert_true(y[31] == -16.0f); /* high nibble 0 of byte 15 */
    for (int j = 0; j < 16; j++) {
        assert_true(y[j] == 2.0f * (j - 8));
        assert_true(y[j + 16] == 2.0f * (7 - j));
    }
}

/* Pack 8 six-bit scales and mins the way the q4_K / q5_K format documents it. */
static void pack_k4_scales(const int sc[8], const int m[8], uint8_t out[12]) {
    for (int j = 0; j < 4; j++) {
        out[j] = (uint8_t)((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
        out[j + 4] = (uint8_t)((m[j] & 63) | ((m[j + 4] >> 4) << 6));
        out[j + 8] = (uint8_t)((sc[j + 4] & 15) | ((m[j + 4] & 15) << 4));
    }
}

static const int ksc[8] = {1, 2, 3, 4, 17, 33, 50, 63};
static const int kmn[8] = {0, 5, 10, 63, 16, 32, 48, 7};

static void test_dequant_q4_K_layout(void **state) {
    (void)state;
    pl_block_q4_K b;
    b.d = 0x3c00;    /* 1.0 */
    b.dmin = 0x3800; /* 0.5 */
    pack_k4_scales(ksc, kmn, b.scales);
    int q[256];
    for (int e = 0; e < 256; e++) q[e] = (e * 7 + 3) % 16;
    for (int g = 0; g < 4; g++)
        for (int l = 0; l < 32; l++) b.qs[32 * g + l] = (uint8_t)(q[64 * g + l] | (q[64 * g + 32 + l] << 4));
    float y[256];
    pl_dequantize_row(PL_DT_Q4_K, &b, y, 256);
    for (int e = 0; e < 256; e++) assert_true(y[e] == 1.0f * ksc[e / 32] * q[e] - 0.5f * kmn[e / 32]);
}

static void test_dequant_q5_K_layout(void **state) {
    (void)state;
    pl_block_q5_K b;
    b.d = 0x3c00;
    b.dmin = 0x4000; /* 2.0 */
    pack_k4_scales(ksc, kmn, b.scales);
    int q[256];
    for (int e = 0; e < 256; e++) q[e] = (e * 13 + 5) % 32;
    memset(b.qh, 0, sizeof b.qh);
    for (int g = 0; g < 4; g++)
        for (int l = 0; l < 32; l++) {
            int lo = q[64 * g + l], hi = q[64 * g + 32 + l];
            b.qs[32 * g + l] = (uint8_t)((lo & 15) | ((hi & 15) << 4));
            b.qh[l] |= (uint8_t)(((lo >> 4) << (2 * g)) | ((hi >> 4) << (2 * g + 1)));
        }
    float y[256];
    pl_dequantize_row(PL_DT_Q5_K, &b, y, 256);
    for (int e = 0; e < 256; e++) assert_true(y[e] == 1.0f * ksc[e / 32] * q[e] - 2.0f * kmn[e / 32]);
}

static void test_dequant_q6_K_layout(void **state) {
    (void)state;
    pl_block_q6_K b;
    b.d = 0x3400; /* 0.25 */
    int sc[16], q[256];
    for (int s = 0; s < 16; s++) sc[s] = s * 9 - 70;
    for (int s = 0; s < 16; s++) b.scales[s] = (int8_t)sc[s];
    for (int e = 0; e < 256; e++) q[e] = (e * 5 + 1) % 64;
    /* element 128h + 32k + l: low 4 bits in ql[64h + l + 32(k&1)] (nibble k>>1), high 2 bits
     * in qh[32h + l] at bit 2k */
    memset(b.ql, 0, sizeof b.ql);
    memset(b.qh, 0, sizeof b.qh);
    for (int e = 0; e < 256; e++) {
        int h = e / 128, k = (e % 128) / 32, l = e % 32;
        b.ql[64 * h + l + 32 * (k & 1)] |= (uint8_t)((q[e] & 15) << (4 * (k >> 1)));
        b.qh[32 * h + l] |= (uint8_t)((q[e] >> 4) << (2 * k));
    }
    float y[256];
    pl_dequantize_row(PL_DT_Q6_K, &b, y, 256);
    for (int e = 0; e < 256; e++) assert_true(y[e] == 0.25f * sc[e / 16] * (q[e] - 32));
}

/* ---- quantizers: llama.cpp rounding ------------------------------------------------------ */

static void test_quantize_rounding(void **state) {
    (void)state;
    float x[32] = {127.0f, 2.5f, 3.5f, -2.5f, -0.5f, 0.5f, 1.5f, -126.6f};
    pl_block_q8_0 w, a;
    /* weights: roundf (half away from zero), d = amax / 127 */
    assert_int_equal(pl_quantize_row(PL_DT_Q8_0, x, &w, 32), 34);
    assert_int_equal(w.d, 0x3c00);
    const int8_t wq[8] = {127, 3, 4, -3, -1, 1, 2, -127};
    for (int j = 0; j < 8; j++) assert_int_equal(w.qs[j], wq[j]);
    /* activations: llama.cpp's x86 path rounds half to even with multiplier 127 / amax */
    pl_quantize_q8_0_act(x, &a, 32);
    assert_int_equal(a.d, 0x3c00);
    const int8_t aq[8] = {127, 2, 4, -2, 0, 0, 2, -127};
    for (int j = 0; j < 8; j++) assert_int_equal(a.qs[j], aq[j]);

    /* q4_0: d = max / -8 with the sign of the largest magnitude, q = min(15, trunc(x/d + 8.5)) */
    float z[32] = {-8.0f, 3.0f, 7.9f, -0.5f, -0.6f, 0.5f, 8.0f};
    pl_block_q4_0 b;
    assert_int_equal(pl_quantize_row(PL_DT_Q4_0, z, &b, 32), 18);
    assert_int_equal(b.d, 0x3c00); /* d = -8 / -8 = 1 */
    const int n4[7] = {0, 11, 15, 8, 7, 9, 15};
    for (int j = 0; j < 7; j++) assert_int_equal(b.qs[j] & 15, n4[j]);
    assert_int_equal(b.qs[0] >> 4, 8); /* z[16] = 0 */
    assert_int_equal(pl_quantize_row(PL_DT_Q8_K, z, &b, 256), 0); /* no q8_K weight writer */
}

/* q5_K's writer (mkmodel's q5_k_m): 31 steps from each sub-block's min, the fifth bit of unit j
 * in bit j of qh[l]; dequantizing gives the inputs back to within half a step. */
static void test_quantize_q5_K(void **state) {
    (void)state;
    float x[256], y[256];
    for (int i = 0; i < 256; i++) x[i] = (float)((i * 37) % 64) / 8.0f - 2.0f + (float)(i / 32);
    pl_block_q5_K b;
    assert_int_equal(pl_quantize_row(PL_DT_Q5_K, x, &b, 256), sizeof b);
    pl_dequantize_row(PL_DT_Q5_K, &b, y, 256);
    for (int j = 0; j < 8; j++) {
        float lo = x[32 * j], hi = x[32 * j];
        for (int l = 0; l < 32; l++) {
            lo = fminf(lo, x[32 * j + l]);
            hi = fmaxf(hi, x[32 * j + l]);
        }
        const float step = (hi - fminf(lo, 0.0f)) / 31.0f;
        for (int l = 0; l < 32; l++) assert_true(fabsf(y[32 * j + l] - x[32 * j + l]) <= 0.6f * step + 1e-3f);
    }
    int high = 0;
    for (int l = 0; l < 32; l++) high += __builtin_popcount(b.qh[l]);
    assert_true(high > 0 && high < 256); /* both halves of the range used */
}

static void test_quantize_q8_K_values(void **state) {
    (void)state;
    float x[256] = {0};
    x[0] = -2.0f; /* largest magnitude, negative: iscale = -127 / -2 = 63.5 */
    x[1] = 1.0f;  /* 63.5 -> 64 (tie to even) */
    x[2] = -1.0f; /* -63.5 -> -64 */
    x[3] = 0.25f; /* 15.875 -> 16 */
    x[4] = 1.5f;  /* 95.25 -> 95 */
    x[5] = 2.0f;  /* 127 */
    x[17] = 0.75f; /* 47.625 -> 48, second group of 16 */
    x[255] = -0.5f; /* -31.75 -> -32 */
    pl_block_q8_K b;
    pl_quantize_q8_K(x, &b, 256);
    assert_true(b.d == 1.0f / 63.5f);
    const int want[6] = {-127, 64, -64, 16, 95, 127};
    for (int j = 0; j < 6; j++) assert_int_equal(b.qs[j], want[j]);
    assert_int_equal(b.qs[17], 48);
    assert_int_equal(b.qs[255], -32);
    assert_int_equal(b.qs[100], 0);
    assert_int_equal(b.bsums[0], -127 + 64 - 64 + 16 + 95 + 127);
    assert_int_equal(b.bsums[1], 48);
    assert_int_equal(b.bsums[15], -32);
    for (int g = 2; g < 15; g++) assert_int_equal(b.bsums[g], 0);
    memset(x, 0, sizeof x);
    pl_quantize_q8_K(x, &b, 256);
    assert_true(b.d == 0.0f);
    assert_int_equal(b.qs[7], 0);
}

static void test_quantize_roundtrip(void **state) {
    (void)state;
    pl_rng rng;
    pl_rng_seed(&rng, 7);
    enum { N = 1024 };
    float x[N], y[N];
    uint8_t buf[N * 4];
    for (int i = 0; i < N; i++) x[i] = (float)(pl_rng_normal(&rng) * (i % 64 == 0 ? 10.0 : 1.0));
    const pl_dtype types[] = {PL_DT_F32, PL_DT_F16, PL_DT_BF16, PL_DT_Q8_0, PL_DT_Q4_0};
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        size_t bytes = pl_quantize_row(types[t], x, buf, N);
        assert_int_equal(bytes, pl_dtype_row_size(types[t], N));
        pl_dequantize_row(types[t], buf, y, N);
        for (int i = 0; i < N; i++) {
            float amax = 0.0f; /* of x's 32-block */
            for (int j = i / 32 * 32; j < i / 32 * 32 + 32; j++) amax = fmaxf(amax, fabsf(x[j]));
            double err = fabs((double)y[i] - x[i]), bound;
            switch (types[t]) {
            case PL_DT_F32: bound = 0; break;
            case PL_DT_F16: bound = fabsf(x[i]) * 0x1p-11; break;
            case PL_DT_BF16: bound = fabsf(x[i]) * 0x1p-8; break;
            /* half a step of amax / 127, plus d's own f16 rounding times |q| <= 127 */
            case PL_DT_Q8_0: bound = amax / 127.0 * 0.5 + amax * 0x1p-11; break;
            /* one step of amax / 8 (the far end clamps at 15), plus d's f16 rounding */
            default: bound = amax / 8.0 * (1.0 + 0x1p-9); break;
            }
            assert_true(err <= bound);
        }
    }
}

/* q4_K / q6_K writers (mkmodel's q4_k_m): the inverse of the dequantizers within the rounding of
 * the stored scales. q4_K: a sub-block's step ds = d * sc is within d/2 of its range / 15 and its
 * offset within dmin/2, so an element errs by at most ds/2, or at the clamped top by
 * 15 * d/2 + dmin/2. q6_K: ds is within d/2 of max|x| / 31, so at most ds/2, or 31 * d/2 at the
 * clamped end. Plus the f16 rounding of d, dmin (2^-11 relative, times <= 63 * 15 steps). */
static void test_quantize_k_roundtrip(void **state) {
    (void)state;
    pl_rng rng;
    pl_rng_seed(&rng, 11);
    enum { N = 1024 };
    float x[N], y[N];
    uint8_t buf[N];
    for (int i = 0; i < N; i++)
        x[i] = (float)(pl_rng_normal(&rng) * (i % 97 == 0 ? 8.0 : 1.0) + (i / 256 == 2 ? 3 : 0));
    for (int i = 512; i < 544; i++) x[i] = 0.0f; /* an all-zero sub-block */
    assert_int_equal(pl_quantize_row(PL_DT_Q4_K, x, buf, N), pl_dtype_row_size(PL_DT_Q4_K, N));
    pl_dequantize_row(PL_DT_Q4_K, buf, y, N);
    double sq = 0, sx = 0;
    for (int i = 0; i < N; i++) {
        const pl_block_q4_K *b = (const pl_block_q4_K *)buf + i / 256;
        uint8_t sc, m;
        pl_get_scale_min_k4(i % 256 / 32, b->scales, &sc, &m);
        double d = pl_f16_to_f32(b->d), dmin = pl_f16_to_f32(b->dmin);
        double bound = fmax(0.5 * d * sc, 7.5 * d + 0.5 * dmin) + 0.5 * dmin + 1e-3 * (d + dmin);
        if (!(fabs((double)y[i] - x[i]) <= bound))
            fail_msg("q4_K element %d: %g -> %g (bound %g)", i, x[i], y[i], bound);
        sq += ((double)y[i] - x[i]) * ((double)y[i] - x[i]);
        sx += (double)x[i] * x[i];
    }
    assert_true(sqrt(sq / sx) < 0.15);
    assert_int_equal(pl_quantize_row(PL_DT_Q6_K, x, buf, N), pl_dtype_row_size(PL_DT_Q6_K, N));
    pl_dequantize_row(PL_DT_Q6_K, buf, y, N);
    sq = 0;
    for (int i = 0; i < N; i++) {
        const pl_block_q6_K *b = (const pl_block_q6_K *)buf + i / 256;
        double d = pl_f16_to_f32(b->d), ds = d * b->scales[i % 256 / 16];
        double bound = fmax(0.5 * ds, 15.5 * d) + 1e-3 * d;
        if (!(fabs((double)y[i] - x[i]) <= bound))
            fail_msg("q6_K element %d: %g -> %g (bound %g)", i, x[i], y[i], bound);
        sq += ((double)y[i] - x[i]) * ((double)y[i] - x[i]);
    }
    assert_true(sqrt(sq / sx) < 0.04);
    for (int i = 512; i < 544; i++) assert_true(y[i] == 0.0f);
}

/* The vector activation conversions are bitwise the scalar ones (ties, zeros, a lone q4_0 block,
 * q8_K's signed maximum appearing twice). */
static void test_act_convert_isas(void **state) {
    (void)state;
    pl_rng rng;
    pl_rng_seed(&rng, 5);
    enum { N = 768 };
    float x[N];
    for (int i = 0; i < N; i++) x[i] = (float)pl_rng_normal(&rng) * (i % 50 == 0 ? 30.0f : 1.0f);
    for (int i = 0; i < 32; i++) x[i] = (float)(i - 16) * 0.5f; /* exact halves: ties */
    for (int i = 256; i < 288; i++) x[i] = 0.0f;
    x[300] = -40.0f, x[310] = 40.0f; /* equal magnitudes: the first one's sign wins */
    const pl_dtype types[] = {PL_DT_F16,  PL_DT_BF16, PL_DT_Q8_0,   PL_DT_Q4_0,  PL_DT_Q4_K, PL_DT_Q4_1,
                              PL_DT_Q5_0, PL_DT_Q5_1, PL_DT_IQ4_XS, PL_DT_IQ4_NL, PL_DT_MXFP4};
    const int64_t cols[] = {N, N - 32, 256};
    static uint8_t a[4 * N + 64], b[4 * N + 64];
    unsigned ran = 0;
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        for (int c = 0; c < 3; c++) {
            if (cols[c] % pl_dtype_block_size(types[t])) continue;
            size_t bytes = pl_act_row_bytes(types[t], cols[c]);
            memset(a, 0, sizeof a);
            pl_cpu_force_isa(PL_ISA_SCALAR);
            isa_ran(&ran);
            pl_act_convert_row(types[t], x, a, cols[c]);
            for (int isa = PL_ISA_AVX2; isa <= (int)pl_cpu_max_isa(); isa++) {
                if (!isa_level_runs(isa)) continue; /* isa_coverage.h */
                pl_cpu_force_isa((pl_isa)isa);
                isa_ran(&ran);
                memset(b, 0, sizeof b);
                pl_act_convert_row(types[t], x, b, cols[c]);
                assert_memory_equal(a, b, bytes);
            }
        }
    }
    pl_cpu_force_isa(PL_ISA_AVX512);
    isa_coverage_check("activation conversions", ran);
}

/* The activation roundings are the reference's (llama.cpp's x86 CPU path), checked on every ISA
 * with values where another reasonable rule gives other bits:
 *   q8_0 : d = f16(amax / 127), q = round-half-even(x * (127 / amax)) (not x * (1 / d), not
 *          roundf's half away from zero);
 *   q8_K : iscale = -127 / max (max: the first element of the largest magnitude, with its sign),
 *          q = min(127, round-half-even(iscale * x)), d = 1 / iscale, bsums of 16;
 *   f16, bf16 : round to nearest, ties to even. */
static void test_act_rounding_is_the_reference(void **state) {
    (void)state;
    enum { N = 256 };
    float x[N];
    static uint8_t act[4 * N + 64];
    unsigned ran = 0;
    for (int isa = PL_ISA_SCALAR; isa <= (int)pl_cpu_max_isa(); isa++) {
        if (!isa_level_runs(isa)) continue; /* isa_coverage.h */
        pl_cpu_force_isa((pl_isa)isa);
        isa_ran(&ran);
        /* q8_0, amax 127: the multiplier is exactly 1, so halves are ties. */
        for (int j = 0; j < 32; j++) x[j] = (float)(j - 16) + 0.5f; /* -15.5 .. 15.5 */
        x[31] = 127.0f;
        pl_act_convert_row(PL_DT_Q8_0, x, act, 32);
        const int8_t *q = (const int8_t *)act;
        for (int j = 0; j < 31; j++) {
            assert_int_equal(q[j], (int)nearbyintf(x[j]));
            assert_int_equal(q[j] % 2, 0); /* every value is a tie: it went to the even side */
        }
        assert_int_equal(q[31], 127);
        assert_true(((const float *)(act + 32))[0] == pl_f16_to_f32(pl_f32_to_f16(1.0f)));
        /* q8_0: 127 / amax and 1 / (amax / 127) differ in the last bit for some amax; find one
         * where that moves a quant and require the reference's 127 / amax. */
        int found = 0;
        for (int k = 1; k < 100000 && !found; k++) {
            float amax = 1.0f + (float)k * 1e-5f;
            float id_ref = 127.0f / amax, id_alt = 1.0f / (amax / 127.0f);
            if (id_ref == id_alt) continue;
            for (int m = 1; m < 127 && !found; m++) {
                float v = ((float)m + 0.5f) / id_ref; /* near a rounding boundary */
                for (int u = -2; u <= 2; u++) {
                    float xv = nextafterf(v, u < 0 ? 0.0f : 2.0f * v);
                    if (u == 0) xv = v;
                    if (nearbyintf(xv * id_ref) == nearbyintf(xv * id_alt)) continue;
                    for (int j = 0; j < 32; j++) x[j] = 0.0f;
                    x[0] = amax, x[1] = xv;
                    pl_act_convert_row(PL_DT_Q8_0, x, act, 32);
                    assert_int_equal(((const int8_t *)act)[1], (int)nearbyintf(xv * id_ref));
                    found = 1;
                    break;
                }
            }
        }
        assert_true(found);
        /* q8_K: the sign of the largest magnitude sets the scale's sign; max -127 gives
         * iscale 1 (halves are ties), max +127 gives -1. */
        for (int sign = -1; sign <= 1; sign += 2) {
            for (int j = 0; j < N; j++) x[j] = (float)((j % 40) - 20) + 0.5f;
            x[100] = 127.0f * (float)sign;
            x[200] = -127.0f * (float)sign; /* same magnitude later: the first one wins */
            pl_act_convert_row(PL_DT_Q4_K, x, act, N);
            const pl_block_q8_K *b = (const pl_block_q8_K *)act;
            float iscale = -127.0f / x[100];
            assert_true(b->d == 1.0f / iscale);
            for (int j = 0; j < N; j++) {
                int want = (int)nearbyintf(iscale * x[j]);
                assert_int_equal(b->qs[j], want < 127 ? want : 127);
            }
            for (int g = 0; g < 16; g++) {
                int sum = 0;
                for (int j = 0; j < 16; j++) sum += b->qs[16 * g + j];
                assert_int_equal(b->bsums[g], sum);
            }
        }
        /* f16 and bf16: exact halfway values go to the even mantissa. */
        for (int j = 0; j < 32; j++) x[j] = 1.0f + (float)(j % 4) * 0x1p-11f; /* f16 ulp at 1: 2^-10 */
        pl_act_convert_row(PL_DT_F16, x, act, 32);
        const float *h = (const float *)act;
        assert_true(h[0] == 1.0f && h[1] == 1.0f && h[2] == 1.0f + 0x1p-10f && h[3] == 1.0f + 0x1p-9f);
        for (int j = 0; j < 32; j++) x[j] = 1.0f + (float)(j % 4) * 0x1p-8f; /* bf16 ulp at 1: 2^-7 */
        pl_act_convert_row(PL_DT_BF16, x, act, 32);
        const pl_bf16 *bf = (const pl_bf16 *)act;
        assert_true(pl_bf16_to_f32(bf[0]) == 1.0f && pl_bf16_to_f32(bf[1]) == 1.0f);
        assert_true(pl_bf16_to_f32(bf[2]) == 1.0f + 0x1p-7f && pl_bf16_to_f32(bf[3]) == 1.0f + 0x1p-6f);
    }
    pl_cpu_force_isa(PL_ISA_AVX512);
    isa_coverage_check("activation roundings", ran);
}

/* A broken model can feed NaN and Inf activations: every conversion and product must stay
 * defined behaviour (the sanitizer build fails on signed overflow), whatever numbers come out. */
static void test_garbage_activations_are_defined(void **state) {
    (void)state;
    enum { N = 512 };
    static float x[N];
    static uint8_t act[4 * N + 64];
    const pl_dtype types[] = {PL_DT_F16, PL_DT_BF16, PL_DT_Q8_0, PL_DT_Q4_0, PL_DT_Q4_K, PL_DT_Q4_1};
    for (int isa = PL_ISA_SCALAR; isa <= (int)pl_cpu_max_isa(); isa++) {
        if (!isa_level_runs(isa)) continue; /* isa_coverage.h */
        pl_cpu_force_isa((pl_isa)isa);
        for (size_t t = 0; t < sizeof types / sizeof types[0]; t++)
            for (int half = 0; half < 2; half++) { /* all garbage; garbage in the second half */
                for (int i = 0; i < N; i++)
                    x[i] = half && i < N / 2 ? (float)(i % 7) - 3.0f
                           : i % 3 == 0  ? NAN
                           : i % 3 == 1  ? INFINITY
                                         : -INFINITY;
                pl_act_convert_row(types[t], x, act, N);
            }
    }
    pl_cpu_force_isa(PL_ISA_AVX512);
}

/* ---- matmul ------------------------------------------------------------------------------- */

static void fill_weights(pl_rng *rng, pl_dtype t, int64_t rows, int64_t cols, uint8_t *w) {
    size_t rs = pl_dtype_row_size(t, cols);
    float *row = malloc((size_t)cols * sizeof *row);
    assert_non_null(row);
    for (int64_t r = 0; r < rows; r++) {
        uint8_t *p = w + (size_t)r * rs;
        if (t == PL_DT_F32 || t == PL_DT_F16 || t == PL_DT_BF16) {
            for (int64_t c = 0; c < cols; c++) row[c] = (float)pl_rng_normal(rng);
            pl_quantize_row(t, row, p, cols);
            continue;
        }
        /* quantized types: random bytes, then valid small positive f16 scales */
        for (size_t i = 0; i < rs; i++) p[i] = (uint8_t)pl_rng_next(rng);
        size_t bs = pl_dtype_type_size(t);
        for (size_t off = 0; off < rs; off += bs) {
            if (t == PL_DT_MXFP4) { /* E8M0 exponents: scales 2^-10 .. 2^-3 */
                p[off] = (uint8_t)(118 + pl_rng_next(rng) % 8);
                continue;
            }
            pl_f16 d = pl_f32_to_f16((float)(0.001 + 0.01 * pl_rng_uniform(rng)));
            pl_f16 dmin = pl_f32_to_f16((float)(0.001 + 0.01 * pl_rng_uniform(rng)));
            size_t d_off = t == PL_DT_Q6_K ? offsetof(pl_block_q6_K, d)
                           : t == PL_DT_Q2_K ? offsetof(pl_block_q2_K, d)
                           : t == PL_DT_Q3_K ? offsetof(pl_block_q3_K, d)
                                             : 0;
            memcpy(p + off + d_off, &d, 2);
            if (t == PL_DT_Q4_K || t == PL_DT_Q5_K || t == PL_DT_Q4_1 || t == PL_DT_Q5_1)
                memcpy(p + off + 2, &dmin, 2); /* dmin, or q4_1 / q5_1's offset m */
            if (t == PL_DT_Q2_K) memcpy(p + off + offsetof(pl_block_q2_K, dmin), &dmin, 2);
        }
    }
    free(row);
}

/* S[b * rows + r] = sum_c |w[r][c]| |x[b][c]| over the values the kernels multiply (converted
 * activations; for q4_K / q5_K / q2_K the scale and min parts counted separately, for q4_1 /
 * q5_1 the offset's |m| |s| per block). */
static void abs_dot_bound(const pl_weight *w, const float *x, int64_t B, double *S) {
    int64_t cols = w->cols;
    size_t rs = pl_dtype_row_size(w->type, cols), as = pl_act_row_bytes(w->type, cols);
    float *wr = malloc((size_t)cols * sizeof *wr);
    double *xv = malloc((size_t)cols * sizeof *xv);
    uint8_t *act = malloc(as + 64), *blk = malloc(rs);
    assert_true(wr && xv && act && blk);
    for (int64_t b = 0; b < B; b++) {
        const float *xb = x + b * cols;
        pl_act_convert_row(w->type, xb, act, cols);
        int64_t nb = cols / 32;
        for (int64_t c = 0; c < cols; c++) {
            switch (w->type) {
            case PL_DT_F32: xv[c] = xb[c]; break;
            case PL_DT_F16: xv[c] = ((float *)act)[c]; break;
            case PL_DT_BF16: xv[c] = pl_bf16_to_f32(((pl_bf16 *)act)[c]); break;
            case PL_DT_Q8_0:
            case PL_DT_Q4_0:
            case PL_DT_Q5_0:
            case PL_DT_IQ4_NL:
            case PL_DT_MXFP4:
            case PL_DT_Q4_1:
            case PL_DT_Q5_1: {
                int64_t pos = w->type == PL_DT_Q4_0 ? pl_act_q4_0_pos(c, nb) : c;
                xv[c] = ((float *)(act + cols))[c / 32] * ((int8_t *)act)[pos];
                break;
            }
            default: {
                pl_block_q8_K *q = (pl_block_q8_K *)act;
                xv[c] = (double)q[c / 256].d * q[c / 256].qs[c % 256];
            }
            }
        }
        for (int64_t r = 0; r < w->rows; r++) {
            memcpy(blk, (const uint8_t *)w->data + (size_t)r * rs, rs);
            size_t bsz = pl_dtype_type_size(w->type);
            double s = 0;
            if (w->type == PL_DT_Q4_K || w->type == PL_DT_Q5_K) /* -dmin * m -> +|dmin| * m */
                for (size_t off = 0; off < rs; off += bsz) blk[off + 3] ^= 0x80;
            if (w->type == PL_DT_Q2_K)
                for (size_t off = 0; off < rs; off += bsz) blk[off + offsetof(pl_block_q2_K, dmin) + 1] ^= 0x80;
            if (w->type == PL_DT_Q4_1 || w->type == PL_DT_Q5_1) /* m apart: |m| |s| */
                for (size_t off = 0; off < rs; off += bsz) {
                    pl_f16 m;
                    memcpy(&m, blk + off + 2, 2);
                    s += fabs((double)pl_f16_to_f32(m) * ((float *)(act + cols))[nb + off / bsz]);
                    memset(blk + off + 2, 0, 2);
                }
            pl_dequantize_row(w->type, blk, wr, cols);
            for (int64_t c = 0; c < cols; c++) s += fabs((double)wr[c]) * fabs(xv[c]);
            S[b * w->rows + r] = s;
        }
    }
    free(wr);
    free(xv);
    free(act);
    free(blk);
}

typedef struct {
    pl_threadpool *pools[3]; /* 1, 2 and 3 threads */
} fixture;

static int setup(void **state) {
    fixture *f = calloc(1, sizeof *f);
    if (!f) return -1;
    for (int i = 0; i < 3; i++)
        if (!(f->pools[i] = pl_threadpool_create(i + 1))) return -1;
    *state = f;
    return 0;
}

static int teardown(void **state) {
    fixture *f = *state;
    for (int i = 0; i < 3; i++) pl_threadpool_destroy(f->pools[i]);
    free(f);
    pl_cpu_force_isa(PL_ISA_AVX512);
    return 0;
}

enum { MAXB = 32 };
static const int64_t batches[] = {1, 2, 3, 5, 8, 17, 32};

/* One weight type and shape on the current ISA: vs the reference, threads, batch invariance. */
static void check_shape(fixture *f, pl_dtype t, int64_t rows, int64_t cols, uint64_t seed) {
    pl_rng rng;
    pl_rng_seed(&rng, seed);
    size_t rs = pl_dtype_row_size(t, cols);
    uint8_t *wdata = malloc(rs * (size_t)rows);
    float *x = malloc((size_t)(MAXB * cols) * sizeof *x);
    int64_t ldy = rows + 3;
    size_t ysz = (size_t)(MAXB * ldy);
    float *yref = malloc(ysz * sizeof *yref), *y = malloc(ysz * sizeof *y);
    float *y1 = malloc(ysz * sizeof *y1), *yb = malloc((size_t)ldy * sizeof *yb);
    double *S = malloc((size_t)(MAXB * rows) * sizeof *S);
    void *scratch = malloc(pl_matmul_scratch_size(t, cols, MAXB));
    assert_true(wdata && x && yref && y && y1 && yb && S && (scratch || t == PL_DT_F32));
    fill_weights(&rng, t, rows, cols, wdata);
    for (int64_t i = 0; i < MAXB * cols; i++) x[i] = (float)(pl_rng_normal(&rng) * (1 + i % 3));
    pl_weight w = {.data = wdata, .type = t, .rows = rows, .cols = cols};
    pl_matmul_ref(&w, x, MAXB, yref, ldy);
    abs_dot_bound(&w, x, MAXB, S);
    /* Float rounding: the kernels and the reference add the same exact (or once-rounded)
     * products in different orders; recursive summation of n terms errs by at most
     * (n - 1) u sum|term| and each block scale costs a few more roundings, so allow
     * (terms + 8) * FLT_EPSILON * S with terms = cols for float types, cols / 32 for blocks. */
    int64_t terms = pl_dtype_block_size(t) == 1 ? cols : cols / 32;
    double rel = (double)(terms + 8) * FLT_EPSILON;

    for (size_t bi = 0; bi < sizeof batches / sizeof batches[0]; bi++) {
        int64_t B = batches[bi];
        for (size_t i = 0; i < ysz; i++) y1[i] = -7.0f; /* sentinel in the ldy padding */
        pl_matmul(f->pools[0], &w, x, B, y1, ldy, scratch);
        for (int64_t b = 0; b < B; b++) {
            for (int64_t r = 0; r < rows; r++) {
                float v = y1[b * ldy + r], ref = yref[b * ldy + r];
                double tol = rel * S[b * rows + r] + 1e-30;
                if (!(fabs((double)v - ref) <= tol))
                    fail_msg("%s %s rows=%ld cols=%ld B=%ld b=%ld r=%ld: got %.9g, ref %.9g, tol %.3g",
                             pl_dtype_name(t), pl_isa_name(pl_cpu_isa()), (long)rows, (long)cols,
                             (long)B, (long)b, (long)r, v, ref, tol);
            }
            for (int64_t r = rows; r < ldy; r++) assert_true(y1[b * ldy + r] == -7.0f);
        }
        /* bitwise batch invariance: each row of this batch equals a B = 1 call on it */
        if (B == 17 || B == 3) {
            for (int64_t b = 0; b < B; b++) {
                pl_matmul(f->pools[0], &w, x + b * cols, 1, yb, ldy, scratch);
                assert_memory_equal(yb, &y1[b * ldy], (size_t)rows * sizeof(float));
            }
        }
    }
    /* bitwise thread invariance (B = 32 from the loop above is in y1); a pool at a time, since
     * idle workers of another pool spin for a while on this 2-core machine */
    for (int p = 1; p < 3; p++) {
        const int64_t bs[2] = {MAXB, 1};
        for (int i = 0; i < 2; i++) {
            for (size_t j = 0; j < ysz; j++) y[j] = -7.0f;
            pl_matmul(f->pools[p], &w, x, bs[i], y, ldy, scratch);
            for (int64_t b = 0; b < bs[i]; b++)
                assert_memory_equal(&y[b * ldy], &y1[b * ldy], (size_t)rows * sizeof(float));
        }
    }
    free(wdata);
    free(x);
    free(yref);
    free(y);
    free(y1);
    free(yb);
    free(S);
    free(scratch);
}

static void run_all_shapes(fixture *f, pl_dtype t, uint64_t seed) {
    static const int64_t rows_list[] = {1, 6, 13};
    static const int64_t float_cols[] = {1, 7, 16, 33, 79, 261};
    static const int64_t q_cols[] = {32, 64, 96, 288};
    static const int64_t k_cols[] = {256, 512, 768};
    const int64_t *cols;
    size_t nc;
    if (pl_dtype_block_size(t) == 1) {
        cols = float_cols;
        nc = sizeof float_cols / sizeof float_cols[0];
    } else if (pl_dtype_block_size(t) == 32) {
        cols = q_cols;
        nc = sizeof q_cols / sizeof q_cols[0];
    } else {
        cols = k_cols;
        nc = sizeof k_cols / sizeof k_cols[0];
    }
    for (size_t ri = 0; ri < 3; ri++)
        for (size_t ci = 0; ci < nc; ci++)
            check_shape(f, t, rows_list[ri], cols[ci], seed + ri * 100 + ci);
}

static void test_matmul_all_isas(void **state) {
    fixture *f = *state;
    pl_isa max = pl_cpu_max_isa();
    unsigned ran = 0;
    for (int isa = PL_ISA_SCALAR; isa <= (int)max; isa++) {
        if (!isa_level_runs(isa)) continue; /* isa_coverage.h */
        assert_int_equal(pl_cpu_force_isa((pl_isa)isa), isa);
        isa_ran(&ran);
        for (int t = 0; t < N_TYPES; t++) run_all_shapes(f, all_types[t], 1000 * (uint64_t)t + 17);
        /* an AVX-512 CPU without BF16 (Ice Lake): bf16 runs AVX2's tile at this level */
        if (isa == PL_ISA_AVX512 && pl_cpu_force_bf16(0) == 0) {
            run_all_shapes(f, PL_DT_BF16, 1000 * 2 + 17);
            pl_cpu_force_bf16(-1);
        }
    }
    pl_cpu_force_isa(PL_ISA_AVX512);
    isa_coverage_check("matmul, every type and shape", ran);
}

/* The SIMD kernels agree with the scalar ones on a realistic layer shape (same tolerance). */
static void test_matmul_layer_shape(void **state) {
    fixture *f = *state;
    for (int t = 0; t < N_TYPES; t++) check_shape(f, all_types[t], 37, 768, 99 + (uint64_t)t);
}

/* pl_matmul_multi (3 threads: a decode's rows claimed and stolen across the weights) is bitwise n
 * pl_matmul calls on one thread: weights of one activation format share a conversion and a job
 * (q4_K with q6_K: both take q8_K rows), others fall back to one call each (q8_0 with f16). */
static void test_matmul_multi(void **state) {
    fixture *f = *state;
    pl_rng rng;
    pl_rng_seed(&rng, 21);
    const pl_dtype types[] = {PL_DT_F16, PL_DT_Q8_0, PL_DT_Q4_K};
    const pl_dtype third[] = {PL_DT_F16, PL_DT_F16, PL_DT_Q6_K};
    const int64_t rows[3] = {40, 13, 13}, cols = 512;
    for (size_t t = 0; t < 3; t++) {
        uint8_t *wd[3];
        pl_weight w[3];
        const pl_weight *wp[3];
        float *y[3], *yr[3];
        float *x = malloc(33 * cols * sizeof *x);
        size_t s0 = pl_matmul_scratch_size(types[t], cols, 33);
        size_t s1 = pl_matmul_scratch_size(third[t], cols, 33);
        void *scratch = malloc(s0 > s1 ? s0 : s1);
        assert_true(x && scratch);
        for (int64_t i = 0; i < 33 * cols; i++) x[i] = (float)pl_rng_normal(&rng);
        for (int i = 0; i < 3; i++) {
            pl_dtype ty = i == 2 ? third[t] : types[t];
            wd[i] = malloc(pl_dtype_row_size(ty, cols) * (size_t)rows[i]);
            y[i] = malloc(33 * rows[i] * sizeof(float));
            yr[i] = malloc(33 * rows[i] * sizeof(float));
            assert_true(wd[i] && y[i] && yr[i]);
            fill_weights(&rng, ty, rows[i], cols, wd[i]);
            w[i] = (pl_weight){.data = wd[i], .type = ty, .rows = rows[i], .cols = cols};
            wp[i] = &w[i];
        }
        const int64_t bs[] = {1, 3, 33};
        for (int k = 0; k < 3; k++) {
            for (int i = 0; i < 3; i++)
                pl_matmul(f->pools[0], &w[i], x, bs[k], yr[i], rows[i], scratch);
            pl_matmul_multi(f->pools[2], wp, y, 3, x, bs[k], scratch);
            for (int i = 0; i < 3; i++)
                assert_memory_equal(y[i], yr[i], (size_t)(bs[k] * rows[i]) * sizeof(float));
        }
        for (int i = 0; i < 3; i++) {
            free(wd[i]);
            free(y[i]);
            free(yr[i]);
        }
        free(x);
        free(scratch);
    }
}

static void test_scratch_size(void **state) {
    (void)state;
    assert_int_equal(pl_matmul_scratch_size(PL_DT_F32, 64, 4), 0);
    assert_true(pl_matmul_scratch_size(PL_DT_Q8_0, 64, 4) >= 4 * (64 + 2 * 4));
    assert_true(pl_matmul_scratch_size(PL_DT_Q4_K, 512, 3) >= 3 * 2 * sizeof(pl_block_q8_K));
    assert_true(pl_matmul_scratch_size(PL_DT_F16, 10, 2) >= 2 * 10 * sizeof(float));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dequant_q8_0_q4_0_layout),
        cmocka_unit_test(test_dequant_q4_K_layout),
        cmocka_unit_test(test_dequant_q5_K_layout),
        cmocka_unit_test(test_dequant_q6_K_layout),
        cmocka_unit_test(test_quantize_rounding),
        cmocka_unit_test(test_quantize_q5_K),
        cmocka_unit_test(test_quantize_q8_K_values),
        cmocka_unit_test(test_quantize_roundtrip),
        cmocka_unit_test(test_quantize_k_roundtrip),
        cmocka_unit_test(test_act_convert_isas),
        cmocka_unit_test(test_act_rounding_is_the_reference),
        cmocka_unit_test(test_garbage_activations_are_defined),
        cmocka_unit_test(test_scratch_size),
        cmocka_unit_test(test_matmul_all_isas),
        cmocka_unit_test(test_matmul_layer_shape),
        cmocka_unit_test(test_matmul_multi),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
