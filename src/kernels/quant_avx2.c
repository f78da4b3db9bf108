/* kernels/quant_avx2 — the integer activation conversions of pl_act_convert_row below AVX-512
 * (issue 35) with AVX2, bitwise the scalar ones of quant.c / quant_wt.c (test_matmul's
 * test_act_convert_isas and test_matmul_x16 compare them at avx2 and avxvnni):
 *
 *   f16  : (f16 weights, rows and x16) each value rounded through f16 by vcvtps2ph (round to
 *          nearest even, as pl_f32_to_f16) and widened back.
 *   q8_0 : (q8_0, q4_0 in its pair order, q5_0, iq4_nl, mxfp4; and the x16 layouts' rows with
 *          their seeds -zero * block sum, pl_act_q8_0_seeds_avx2) amax as the scalar loop (a NaN
 *          never replaces the running maximum), d = f16(amax / 127), q = round-half-even(x *
 *          (127 / amax)) by vcvtps2dq, exactly pl_nearest_int for |v| <= 127 (no clamp, as the
 *          scalar path: |v| never rounds past 127), each byte the low 8 bits of the int32 as the
 *          scalar (int8_t) cast (a NaN's INT_MIN and pl_nearest_int's NaN both give 0); the block
 *          sums are of those bytes.
 *   q8_1 : (q4_1, q5_1) q8_0's bytes and d, then s = f16(amax / 127 * block sum).
 *   q8_K : (the K-quants, iq4_xs) amax and the first element of that magnitude (its sign sets
 *          the scale), q = round-half-even(iscale * x) clamped at 127, and the 16-element sums. */
#include "kernels/quant.h"

#include <immintrin.h>
#include <string.h>

/* Sum of 8 int32 lanes with wrapping vector adds (NaN activations give INT_MIN lanes; a scalar
 * add would overflow). */
static int32_t sum8_epi32(__m256i v) {
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xB1));
    return _mm_cvtsi128_si32(s4);
}

static void act_q8_K_block(const float *x, pl_block_q8_K *y) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 m = _mm256_setzero_ps();
    for (int i = 0; i < 32; i++) m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + 8 * i)));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float amax = _mm_cvtss_f32(m4);
    if (amax == 0.0f) {
        memset(y, 0, sizeof *y);
        return;
    }
    float max = 0.0f;
    for (int i = 0; i < 32; i++) {
        const int k = _mm256_movemask_ps(
            _mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + 8 * i)), _mm256_set1_ps(amax), _CMP_EQ_OQ));
        if (k) {
            max = x[8 * i + __builtin_ctz((unsigned)k)];
            break;
        }
    }
    const float iscale = -127.0f / max;
    const __m256 is = _mm256_set1_ps(iscale);
    const __m256i c127 = _mm256_set1_epi32(127);
    /* byte 0 of each int32 lane (truncation, as AVX-512's vpmovdb), per 128-bit half */
    const __m256i pick = _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 0, 4, 8, 12,
                                          -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
    for (int g = 0; g < 16; g++) {
        const __m256i q0 = _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(is, _mm256_loadu_ps(x + 16 * g))), c127);
        const __m256i q1 =
            _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(is, _mm256_loadu_ps(x + 16 * g + 8))), c127);
        const __m256i b = _mm256_or_si256(_mm256_shuffle_epi8(q0, pick), _mm256_slli_si256(_mm256_shuffle_epi8(q1, pick), 4));
        /* dwords 0, 4, 1, 5: q0's first and last 4, then q1's */
        const __m256i o = _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 3, 6, 7));
        _mm_storeu_si128((__m128i *)(y->qs + 16 * g), _mm256_castsi256_si128(o));
        y->bsums[g] = (int16_t)sum8_epi32(_mm256_add_epi32(q0, q1));
    }
    y->d = 1.0f / iscale;
}

/* The largest |x| of 32 floats as pl_quantize_q8_0_act's loop: maxps returns its second operand
 * when either is NaN, so a NaN lane keeps the running maximum. */
static float amax32(const float *x) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 m = _mm256_setzero_ps();
    for (int i = 0; i < 4; i++) m = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + 8 * i)), m);
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    return _mm_cvtss_f32(m4);
}

/* One q8_0 block's 32 quants in natural order (the header comment's rounding and truncation). */
static __m256i q8_0_block(const float *x, float amax) {
    const __m256 id = _mm256_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
    const __m256i lo = _mm256_set1_epi32(0xFF);
    __m256i q[4];
    for (int i = 0; i < 4; i++)
        q[i] = _mm256_and_si256(_mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 8 * i), id)), lo);
    /* 0..255 in every lane: the unsigned packs are exact; per 128-bit half they leave dwords
     * q0[0:4], q1[0:4], q2[0:4], q3[0:4] | q0[4:8], q1[4:8], q2[4:8], q3[4:8] */
    const __m256i p = _mm256_packus_epi16(_mm256_packus_epi32(q[0], q[1]), _mm256_packus_epi32(q[2], q[3]));
    return _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* Sum of the 32 signed bytes: |q + 128| summed by vpsadbw, less 32 * 128. */
static int32_t sum32_epi8(__m256i q) {
    const __m256i s = _mm256_sad_epu8(_mm256_xor_si256(q, _mm256_set1_epi8((char)0x80)), _mm256_setzero_si256());
    __m128i s2 = _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    s2 = _mm_add_epi64(s2, _mm_unpackhi_epi64(s2, s2));
    return _mm_cvtsi128_si32(s2) - 32 * 128;
}

/* The q8_0 family's layouts: qs[cols] then d[nb], and after d nothing (ACT_Q8_0, ACT_Q4_0 in
 * the pair order of pl_act_q4_0_pos), q8_1's s[nb] (ACT_Q8_1) or the x16 seeds[nb] (ACT_SEEDS). */
enum { ACT_Q8_0, ACT_Q4_0, ACT_Q8_1, ACT_SEEDS };

static void act_q8_0_row(const float *x, uint8_t *dst, int64_t cols, int kind, int32_t zero) {
    const int64_t nb = cols / PL_QK;
    int8_t *qs = (int8_t *)dst;
    float *d = (float *)(dst + cols);
    for (int64_t b = 0; b < nb; b++) {
        const float *xb = x + b * PL_QK;
        const float amax = amax32(xb);
        const __m256i q = q8_0_block(xb, amax);
        d[b] = pl_f16_to_f32(pl_f32_to_f16(amax / 127.0f));
        if (kind == ACT_Q4_0) {
            _mm_storeu_si128((__m128i *)(qs + pl_act_q4_0_pos(b * PL_QK, nb)), _mm256_castsi256_si128(q));
            _mm_storeu_si128((__m128i *)(qs + pl_act_q4_0_pos(b * PL_QK + 16, nb)), _mm256_extracti128_si256(q, 1));
            continue;
        }
        _mm256_storeu_si256((__m256i *)(qs + b * PL_QK), q);
        if (kind == ACT_Q8_1) d[nb + b] = pl_f16_to_f32(pl_f32_to_f16(amax / 127.0f * (float)sum32_epi8(q)));
        if (kind == ACT_SEEDS) ((int32_t *)(d + nb))[b] = -zero * sum32_epi8(q);
    }
}

void pl_act_q8_0_seeds_avx2(const float *x, uint8_t *dst, int64_t cols, int32_t zero) {
    act_q8_0_row(x, dst, cols, ACT_SEEDS, zero);
}

int pl_act_convert_row_avx2(pl_dtype wtype, const float *x, void *dst, int64_t cols) {
    switch (wtype) { /* the layouts of pl_act_convert_row */
    case PL_DT_F16: { /* rounded through f16 (vcvtps2ph rounds to nearest even, as pl_f32_to_f16) */
        float *o = dst;
        int64_t i = 0;
        for (; i + 8 <= cols; i += 8)
            _mm256_storeu_ps(o + i, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT)));
        for (; i < cols; i++) o[i] = pl_f16_to_f32(pl_f32_to_f16(x[i]));
        return 1;
    }
    case PL_DT_Q8_0:
    case PL_DT_Q5_0:
    case PL_DT_IQ4_NL:
    case PL_DT_MXFP4: act_q8_0_row(x, dst, cols, ACT_Q8_0, 0); return 1;
    case PL_DT_Q4_0: act_q8_0_row(x, dst, cols, ACT_Q4_0, 0); return 1;
    case PL_DT_Q4_1:
    case PL_DT_Q5_1: act_q8_0_row(x, dst, cols, ACT_Q8_1, 0); return 1;
    default: break;
    }
    if (!pl_act_is_q8_K(wtype)) return 0;
    pl_block_q8_K *y = dst;
    for (int64_t b = 0; b < cols / PL_QK_K; b++) act_q8_K_block(x + b * PL_QK_K, y + b);
    return 1;
}
