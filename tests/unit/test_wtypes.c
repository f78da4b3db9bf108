/* Unit tests for the weight types of issue 18 (q4_1, q5_0, q5_1, iq4_nl, q2_K, q3_K, iq4_xs) and
 * of issue 34 (mxfp4):
 * dequantization of hand-built blocks against values computed here from GGML's definitions,
 * the quantizers' rounding and error, and garbage blocks (random bytes, NaN / Inf scales) through
 * every path on every ISA, which must stay defined behaviour (the sanitizer build checks).
 * Kernels against the scalar reference on every ISA: test_matmul.c (all_types). */
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

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "isa_coverage.h"

/* GGML's kvalues_iq4nl, written out again so the test does not trust the table it checks. */
static const int kv[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

static void test_dequant_q4_1_q5_0_q5_1_iq4_nl(void **state) {
    (void)state;
    float y[32];
    pl_block_q4_1 a;
    a.d = 0x3800; /* 0.5 */
    a.m = 0xbc00; /* -1 */
    for (int j = 0; j < 16; j++) a.qs[j] = (uint8_t)(j | ((15 - j) << 4));
    pl_dequantize_row(PL_DT_Q4_1, &a, y, 32);
    for (int j = 0; j < 16; j++) {
        assert_true(y[j] == 0.5f * j - 1.0f);
        assert_true(y[j + 16] == 0.5f * (15 - j) - 1.0f);
    }
    /* qh = 0xAAAA5555 little-endian: elements 0, 2, .., 14 and 17, 19, .., 31 get the 5th bit */
    pl_block_q5_0 b;
    b.d = 0x4000; /* 2 */
    const uint8_t qh[4] = {0x55, 0x55, 0xAA, 0xAA};
    memcpy(b.qh, qh, 4);
    for (int j = 0; j < 16; j++) b.qs[j] = (uint8_t)(j | ((15 - j) << 4));
    pl_dequantize_row(PL_DT_Q5_0, &b, y, 32);
    for (int j = 0; j < 16; j++) {
        assert_true(y[j] == 2.0f * ((j | (j % 2 == 0 ? 16 : 0)) - 16));
        assert_true(y[j + 16] == 2.0f * (((15 - j) | (j % 2 == 1 ? 16 : 0)) - 16));
    }
    assert_true(y[0] == 0.0f && y[1] == -30.0f && y[16] == -2.0f && y[17] == 28.0f);
    pl_block_q5_1 c;
    c.d = 0x3400; /* 0.25 */
    c.m = 0x3c00; /* 1 */
    memcpy(c.qh, qh, 4);
    memcpy(c.qs, b.qs, 16);
    pl_dequantize_row(PL_DT_Q5_1, &c, y, 32);
    for (int j = 0; j < 16; j++) {
        assert_true(y[j] == 0.25f * (j | (j % 2 == 0 ? 16 : 0)) + 1.0f);
        assert_true(y[j + 16] == 0.25f * ((15 - j) | (j % 2 == 1 ? 16 : 0)) + 1.0f);
    }
    pl_block_iq4_nl e;
    e.d = 0x3c00;
    memcpy(e.qs, b.qs, 16);
    pl_dequantize_row(PL_DT_IQ4_NL, &e, y, 32);
    for (int j = 0; j < 16; j++) {
        assert_true(y[j] == (float)kv[j]);
        assert_true(y[j + 16] == (float)kv[15 - j]);
    }
}

/* GGML's kvalues_mxfp4 (E2M1 doubled), written out again. */
static const int kv4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/* mxfp4: x = 2^(e - 128) * level; e = 127 gives 0.5, e = 130 4, e = 0 and 1 GGML's subnormal
 * scales 2^-128 and 2^-127. The quantizer (llama.cpp's reference): amax 6 gives e = 127 and the
 * levels times 0.5 are exact; a value between two levels goes to the nearer, the lower on a tie. */
static void test_mxfp4(void **state) {
    (void)state;
    float y[32];
    pl_block_mxfp4 b;
    for (int j = 0; j < 16; j++) b.qs[j] = (uint8_t)(j | ((15 - j) << 4));
    const struct { uint8_t e; float d; } sc[] = {{127, 0.5f}, {130, 4.0f}, {1, 0x1p-127f}, {0, 0x1p-128f}};
    for (size_t s = 0; s < sizeof sc / sizeof sc[0]; s++) {
        b.e = sc[s].e;
        pl_dequantize_row(PL_DT_MXFP4, &b, y, 32);
        for (int j = 0; j < 16; j++) {
            assert_true(y[j] == sc[s].d * (float)kv4[j]);
            assert_true(y[j + 16] == sc[s].d * (float)kv4[15 - j]);
        }
    }
    float x[32] = {0};
    const float lv[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
    for (int j = 0; j < 8; j++) x[j] = lv[j], x[8 + j] = -lv[j];
    x[16] = 2.4f;  /* nearer 2 */
    x[17] = 2.5f;  /* tie 2 / 3: the first level in GGML's order, 2 */
    x[18] = -5.1f; /* nearer -6 */
    x[19] = 0.0f;
    pl_block_mxfp4 q;
    assert_int_equal(pl_quantize_row(PL_DT_MXFP4, x, &q, 32), 17);
    assert_int_equal(q.e, 127);
    pl_dequantize_row(PL_DT_MXFP4, &q, y, 32);
    for (int j = 0; j < 16; j++) assert_true(y[j] == x[j]);
    assert_true(y[16] == 2.0f && y[17] == 2.0f && y[18] == -6.0f && y[19] == 0.0f);
    x[0] = 13.0f; /* amax 13: e = floor(log2 13) - 2 + 127 = 128, scale 1 */
    pl_quantize_row(PL_DT_MXFP4, x, &q, 32);
    assert_int_equal(q.e, 128);
    for (int j = 0; j < 32; j++) x[j] = 0.0f; /* all zero: e = 0 */
    pl_quantize_row(PL_DT_MXFP4, x, &q, 32);
    assert_int_equal(q.e, 0);
}

/* q2_K / q3_K quants: element 128h + 32j + l is bits 2j..2j+1 of qs[32h + l] (GGML's loops:
 * for each 128-half, 4 shifts, 16 + 16 elements from q[l] and q[l + 16]). */
static void pack_low2(const int *q, uint8_t qs[64]) {
    memset(qs, 0, 64);
    for (int e = 0; e < 256; e++) qs[32 * (e / 128) + e % 32] |= (uint8_t)((q[e] & 3) << (2 * (e % 128 / 32)));
}

static void test_dequant_q2_K(void **state) {
    (void)state;
    pl_block_q2_K b;
    b.d = 0x3c00;    /* 1 */
    b.dmin = 0x3800; /* 0.5 */
    int sc[16], m[16], q[256];
    for (int s = 0; s < 16; s++) {
        sc[s] = (s * 7 + 2) % 16;
        m[s] = 15 - s;
        b.scales[s] = (uint8_t)(sc[s] | (m[s] << 4));
    }
    for (int e = 0; e < 256; e++) q[e] = (e * 7 + 3) % 4;
    pack_low2(q, b.qs);
    float y[256];
    pl_dequantize_row(PL_DT_Q2_K, &b, y, 256);
    for (int e = 0; e < 256; e++) assert_true(y[e] == (float)(sc[e / 16] * q[e]) - 0.5f * m[e / 16]);
}

static void test_dequant_q3_K(void **state) {
    (void)state;
    pl_block_q3_K b;
    b.d = 0x3800; /* 0.5 */
    int sc[16], q[256]; /* stored scales 0..63 (value sc - 32), quants 0..7 (value q - 4) */
    for (int s = 0; s < 16; s++) sc[s] = (s * 21 + 5) % 64;
    /* 12 bytes: low nibbles of scales 0..3 | 8..11 in bytes 0..3, of 4..7 | 12..15 in bytes
     * 4..7; the high 2 bits of scales j, j + 4, j + 8, j + 12 in byte 8 + j */
    for (int j = 0; j < 4; j++) {
        b.scales[j] = (uint8_t)((sc[j] & 15) | ((sc[j + 8] & 15) << 4));
        b.scales[j + 4] = (uint8_t)((sc[j + 4] & 15) | ((sc[j + 12] & 15) << 4));
        b.scales[j + 8] = (uint8_t)((sc[j] >> 4) | ((sc[j + 4] >> 4) << 2) | ((sc[j + 8] >> 4) << 4) |
                                    ((sc[j + 12] >> 4) << 6));
    }
    for (int e = 0; e < 256; e++) q[e] = (e * 3 + 1) % 8;
    pack_low2(q, b.qs);
    /* the 3rd bit of element 128h + 32j + l: bit 4h + j of hmask[l]; clear means -4 */
    memset(b.hmask, 0, sizeof b.hmask);
    for (int e = 0; e < 256; e++) b.hmask[e % 32] |= (uint8_t)((q[e] >> 2) << (e / 32));
    int8_t dec[16];
    pl_q3_K_scales(b.scales, dec);
    for (int s = 0; s < 16; s++) assert_int_equal(dec[s], sc[s] - 32);
    float y[256];
    pl_dequantize_row(PL_DT_Q3_K, &b, y, 256);
    for (int e = 0; e < 256; e++) assert_true(y[e] == 0.5f * (float)((sc[e / 16] - 32) * (q[e] - 4)));
}

static void test_dequant_iq4_xs(void **state) {
    (void)state;
    pl_block_iq4_xs b;
    b.d = 0x3800; /* 0.5 */
    int ls[8], n[256];
    b.scales_h = 0;
    memset(b.scales_l, 0, sizeof b.scales_l);
    for (int ib = 0; ib < 8; ib++) {
        ls[ib] = (ib * 9 + 5) % 64;
        b.scales_l[ib / 2] |= (uint8_t)((ls[ib] & 15) << (4 * (ib % 2)));
        b.scales_h |= (uint16_t)((ls[ib] >> 4) << (2 * ib));
    }
    for (int e = 0; e < 256; e++) n[e] = (e * 5 + 2) % 16;
    for (int ib = 0; ib < 8; ib++)
        for (int j = 0; j < 16; j++) b.qs[16 * ib + j] = (uint8_t)(n[32 * ib + j] | (n[32 * ib + 16 + j] << 4));
    float y[256];
    pl_dequantize_row(PL_DT_IQ4_XS, &b, y, 256);
    for (int e = 0; e < 256; e++) assert_true(y[e] == 0.5f * (float)((ls[e / 32] - 32) * kv[n[e]]));
}

/* q4_1 / q5_0 / q5_1 round as llama.cpp's reference quantizers; checked on a block whose
 * levels are exact: q4_1 min -1, max 14 (d = 1), so x + 1 + 0.5 truncates; q5_0 largest -16
 * (d = 1), so q = trunc(x + 16.5) clamped at 31; q5_1 min 0, max 31 (d = 1). */
static void test_quantize_rounding(void **state) {
    (void)state;
    float x[32] = {0};
    x[0] = -1.0f, x[1] = 14.0f, x[2] = 2.5f, x[3] = 2.49f, x[4] = -0.5f, x[20] = 7.5f;
    pl_block_q4_1 a;
    assert_int_equal(pl_quantize_row(PL_DT_Q4_1, x, &a, 32), 20);
    assert_int_equal(a.d, 0x3c00);
    assert_int_equal(a.m, 0xbc00);
    const int want4[5] = {0, 15, 4, 3, 1}; /* (x + 1) + 0.5 truncated */
    for (int j = 0; j < 5; j++) assert_int_equal(a.qs[j] & 15, want4[j]);
    assert_int_equal(a.qs[4] >> 4, 9); /* x[20] = 7.5 -> 9 */

    float z[32] = {0};
    z[0] = -16.0f, z[1] = 15.5f, z[2] = 0.49f, z[3] = -0.5f, z[17] = 3.0f;
    pl_block_q5_0 b;
    assert_int_equal(pl_quantize_row(PL_DT_Q5_0, z, &b, 32), 22);
    assert_int_equal(b.d, 0x3c00); /* -16 / -16 */
    float y[32];
    pl_dequantize_row(PL_DT_Q5_0, &b, y, 32);
    assert_true(y[0] == -16.0f && y[1] == 15.0f && y[2] == 0.0f && y[3] == 0.0f && y[17] == 3.0f);

    float u[32];
    for (int j = 0; j < 32; j++) u[j] = (float)j;
    u[5] = 4.5f; /* 4.5 + 0.5 = 5 */
    pl_block_q5_1 c;
    assert_int_equal(pl_quantize_row(PL_DT_Q5_1, u, &c, 32), 24);
    assert_int_equal(c.d, 0x3c00);
    pl_dequantize_row(PL_DT_Q5_1, &c, y, 32);
    for (int j = 0; j < 32; j++) assert_true(y[j] == (j == 5 ? 5.0f : (float)j));
}

/* Every quantizer inverts its dequantizer within the type's resolution (relative RMS error),
 * keeps an all-zero sub-block zero, and gives the row size. */
static void test_quantize_roundtrip(void **state) {
    (void)state;
    pl_rng rng;
    pl_rng_seed(&rng, 3);
    enum { N = 2048 };
    static float x[N], y[N];
    static uint8_t buf[N * 2];
    for (int i = 0; i < N; i++)
        x[i] = (float)(pl_rng_normal(&rng) * (i % 97 == 0 ? 6.0 : 1.0) + (i / 256 == 3 ? 2 : 0));
    for (int i = 512; i < 544; i++) x[i] = 0.0f;
    const struct {
        pl_dtype t;
        double max_rel_rms;
    } cases[] = {{PL_DT_Q4_1, 0.1}, {PL_DT_Q5_0, 0.075}, {PL_DT_Q5_1, 0.05}, {PL_DT_IQ4_NL, 0.11},
                 {PL_DT_Q2_K, 0.4},  {PL_DT_Q3_K, 0.21}, {PL_DT_IQ4_XS, 0.11},
                 {PL_DT_MXFP4, 0.2}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        pl_dtype t = cases[k].t;
        assert_int_equal(pl_quantize_row(t, x, buf, N), pl_dtype_row_size(t, N));
        pl_dequantize_row(t, buf, y, N);
        double sq = 0, sx = 0;
        for (int i = 0; i < N; i++) {
            sq += ((double)y[i] - x[i]) * ((double)y[i] - x[i]);
            sx += (double)x[i] * x[i];
        }
        double rel = sqrt(sq / sx);
        print_message("%s: relative RMS error %.4f\n", pl_dtype_name(t), rel);
        if (!(rel < cases[k].max_rel_rms)) fail_msg("%s: relative RMS error %g", pl_dtype_name(t), rel);
        for (int i = 512; i < 544; i++)
            if (t != PL_DT_Q4_1 && t != PL_DT_Q5_1) assert_true(fabsf(y[i]) == 0.0f);
    }
}

/* Garbage weights: random bytes everywhere, scales included (NaN, Inf, subnormal f16), through
 * dequantization and pl_matmul on every ISA, with finite and with garbage activations. Only
 * defined behaviour is required (UBSan fails on signed overflow, bad shifts, float->int
 * conversions out of range); finite scales must also give scalar == vector within rounding,
 * which test_matmul checks. */
static void test_garbage_blocks_are_defined(void **state) {
    (void)state;
    const pl_dtype types[] = {PL_DT_Q4_1, PL_DT_Q5_0, PL_DT_Q5_1, PL_DT_IQ4_NL,
                              PL_DT_Q2_K, PL_DT_Q3_K, PL_DT_IQ4_XS, PL_DT_MXFP4};
    enum { ROWS = 5, COLS = 512, B = 4 };
    pl_threadpool *tp = pl_threadpool_create(2);
    assert_non_null(tp);
    pl_rng rng;
    pl_rng_seed(&rng, 99);
    static float x[B * COLS], y[B * ROWS], deq[COLS];
    static uint8_t w[ROWS * COLS * 2];
    unsigned ran = 0;
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        size_t rs = pl_dtype_row_size(types[t], COLS);
        void *scratch = malloc(pl_matmul_scratch_size(types[t], COLS, B));
        assert_non_null(scratch);
        for (int round = 0; round < 4; round++) {
            for (size_t i = 0; i < rs * ROWS; i++) w[i] = (uint8_t)pl_rng_next(&rng);
            if (round == 1) memset(w, 0xFF, rs * ROWS); /* NaN scales, all bits set */
            if (round == 2) /* Inf scales, largest quants */
                for (size_t i = 0; i < rs * ROWS; i += 2) w[i] = 0x00, w[i + 1] = 0x7C;
            for (int i = 0; i < B * COLS; i++)
                x[i] = round == 3 ? (i % 3 == 0 ? NAN : i % 3 == 1 ? INFINITY : -1e30f)
                                  : (float)pl_rng_normal(&rng);
            for (int r = 0; r < ROWS; r++) pl_dequantize_row(types[t], w + r * rs, deq, COLS);
            pl_weight wt = {.data = w, .type = types[t], .rows = ROWS, .cols = COLS};
            for (int isa = PL_ISA_SCALAR; isa <= (int)pl_cpu_max_isa(); isa++) {
                if (!isa_level_runs(isa)) continue; /* isa_coverage.h */
                pl_cpu_force_isa((pl_isa)isa);
                isa_ran(&ran);
                pl_matmul(tp, &wt, x, B, y, ROWS, scratch);
                pl_matmul(tp, &wt, x, 1, y, ROWS, scratch);
            }
            pl_cpu_force_isa(PL_ISA_AVX512);
        }
        free(scratch);
    }
    pl_threadpool_destroy(tp);
    isa_coverage_check("garbage blocks", ran);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dequant_q4_1_q5_0_q5_1_iq4_nl),
        cmocka_unit_test(test_mxfp4),
        cmocka_unit_test(test_dequant_q2_K),
        cmocka_unit_test(test_dequant_q3_K),
        cmocka_unit_test(test_dequant_iq4_xs),
        cmocka_unit_test(test_quantize_rounding),
        cmocka_unit_test(test_quantize_roundtrip),
        cmocka_unit_test(test_garbage_blocks_are_defined),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
