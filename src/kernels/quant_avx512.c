/* kernels/quant_avx512 — the activation conversions of pl_act_convert_row (quant.h) with AVX-512,
 * bitwise equal to the scalar ones in quant.c (test_matmul compares them on every ISA):
 *
 *   f16  : vcvtps2ph (round to nearest even, as pl_f32_to_f16) and back.
 *   bf16 : vcvtneps2bf16 rounds to nearest even like pl_f32_to_bf16 (NaNs, which the scalar path
 *          quiets differently, are left to the scalar path: a row holding one is converted there).
 *   q8_0 : amax by lanes, d = f16(amax / 127), q = round-half-even(x * (127 / amax)) by
 *          vcvtps2dq under the default rounding mode, exactly pl_nearest_int for |v| <= 127.
 *   q8_1 : (q4_1 / q5_1 weights) left to the scalar path.
 *   q8_K : amax and the first element of that magnitude (its sign sets the scale), then as q8_0
 *          with iscale = -127 / max, q clamped at 127, and the 16-element sums.
 */
#include "kernels/quant.h"

#include "kernels/cpu.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

static float amax16(const float *x, int n16) {
    __m512 m = _mm512_setzero_ps();
    for (int i = 0; i < n16; i++) m = _mm512_max_ps(m, _mm512_abs_ps(_mm512_loadu_ps(x + 16 * i)));
    return _mm512_reduce_max_ps(m);
}

static void act_q8_0_block(const float *x, int8_t *qs, float *d) {
    float amax = amax16(x, 2);
    *d = pl_f16_to_f32(pl_f32_to_f16(amax / 127.0f));
    const __m512 id = _mm512_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
    for (int h = 0; h < 2; h++) {
        __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + 16 * h), id));
        _mm_storeu_si128((__m128i *)(qs + 16 * h), _mm512_cvtepi32_epi8(q));
    }
}

/* Sum of the 16 lanes with wrapping vector adds: garbage input (NaN / Inf activations from a
 * broken model) gives INT_MIN lanes, and _mm512_reduce_add_epi32's final scalar add would then be
 * signed overflow, undefined behaviour. Finite input sums to at most 16 * 127. */
static int32_t sum16_epi32(__m512i v) {
    __m256i s8 = _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s8), _mm256_extracti128_si256(s8, 1));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xB1));
    return _mm_cvtsi128_si32(s4);
}

static void act_q8_K_block(const float *x, pl_block_q8_K *y) {
    float amax = amax16(x, 16);
    if (amax == 0.0f) {
        memset(y, 0, sizeof *y);
        return;
    }
    float max = 0.0f;
    for (int i = 0; i < 16; i++) {
        __mmask16 k = _mm512_cmpeq_ps_mask(_mm512_abs_ps(_mm512_loadu_ps(x + 16 * i)),
                                           _mm512_set1_ps(amax));
        if (k) {
            max = x[16 * i + __builtin_ctz(k)];
            break;
        }
    }
    const float iscale = -127.0f / max;
    const __m512 is = _mm512_set1_ps(iscale);
    const __m512i c127 = _mm512_set1_epi32(127);
    for (int g = 0; g < 16; g++) {
        __m512i q = _mm512_min_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(is, _mm512_loadu_ps(x + 16 * g))), c127);
        _mm_storeu_si128((__m128i *)(y->qs + 16 * g), _mm512_cvtepi32_epi8(q));
        y->bsums[g] = (int16_t)sum16_epi32(q);
    }
    y->d = 1.0f / iscale;
}

static int has_nan(const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (isnan(x[i])) return 1;
    return 0;
}

int pl_act_convert_row_avx512(pl_dtype wtype, const float *x, void *dst, int64_t cols) {
    switch (wtype) {
    case PL_DT_F16: {
        float *o = dst;
        int64_t i = 0;
        for (; i + 16 <= cols; i += 16)
            _mm512_storeu_ps(o + i, _mm512_cvtph_ps(_mm512_cvtps_ph(_mm512_loadu_ps(x + i),
                                                                    _MM_FROUND_TO_NEAREST_INT)));
        for (; i < cols; i++) o[i] = pl_f16_to_f32(pl_f32_to_f16(x[i]));
        return 1;
    }
    case PL_DT_BF16: { /* vcvtneps2bf16; without AVX512_BF16 the scalar rounding, the same bits */
        if (!pl_cpu_avx512bf16() || has_nan(x, cols)) return 0;
        pl_bf16 *o = dst;
        int64_t i = 0;
        for (; i + 16 <= cols; i += 16)
            _mm256_storeu_si256((__m256i *)(o + i),
                                (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(x + i)));
        for (; i < cols; i++) o[i] = pl_f32_to_bf16(x[i]);
        return 1;
    }
    case PL_DT_Q5_0:
    case PL_DT_IQ4_NL:
    case PL_DT_MXFP4: wtype = PL_DT_Q8_0; /* the same layout */
    /* fall through */
    case PL_DT_Q8_0:
    case PL_DT_Q4_0: {
        int64_t nb = cols / PL_QK;
        int8_t *qs = dst;
        float *d = (float *)((uint8_t *)dst + cols);
        for (int64_t b = 0; b < nb; b++) {
            int8_t tmp[PL_QK];
            act_q8_0_block(x + b * PL_QK, wtype == PL_DT_Q8_0 ? qs + b * PL_QK : tmp, d + b);
            if (wtype == PL_DT_Q4_0) { /* the pair order of quant.h: two runs of 16 */
                memcpy(qs + pl_act_q4_0_pos(b * PL_QK, nb), tmp, 16);
                memcpy(qs + pl_act_q4_0_pos(b * PL_QK + 16, nb), tmp + 16, 16);
            }
        }
        return 1;
    }
    default: break;
    }
    if (!pl_act_is_q8_K(wtype)) return 0;
    pl_block_q8_K *y = dst;
    for (int64_t b = 0; b < cols / PL_QK_K; b++) act_q8_K_block(x + b * PL_QK_K, y + b);
    return 1;
}
