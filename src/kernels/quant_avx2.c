/* kernels/quant_avx2 — q8_K, the activation conversion of the K-quant and iq4_xs weights, with
 * AVX2 (pl_act_convert_row below AVX-512, issue 35), bitwise the scalar pl_quantize_q8_K as
 * quant_avx512.c's: amax and the first element of that magnitude (its sign sets the scale),
 * q = round-half-even(iscale * x) by vcvtps2dq (exactly pl_nearest_int for |v| <= 127), clamped
 * at 127, and the 16-element sums. test_matmul compares it with the scalar path. */
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

int pl_act_convert_row_avx2(pl_dtype wtype, const float *x, void *dst, int64_t cols) {
    /* the weight types whose activations are q8_K (pl_act_convert_row) */
    if (wtype != PL_DT_Q2_K && wtype != PL_DT_Q3_K && wtype != PL_DT_Q4_K && wtype != PL_DT_Q5_K &&
        wtype != PL_DT_Q6_K && wtype != PL_DT_IQ4_XS)
        return 0;
    pl_block_q8_K *y = dst;
    for (int64_t b = 0; b < cols / PL_QK_K; b++) act_q8_K_block(x + b * PL_QK_K, y + b);
    return 1;
}
