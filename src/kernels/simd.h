/* kernels/simd — small vector helpers shared by the ISA-specific kernel files (internal).
 *
 * Include it only from files compiled with the matching target flags (*_avx2.c, *_avx512.c):
 * the AVX2 helpers need __AVX2__, the AVX-512 ones __AVX512F__. Everything is always_inline.
 */
#ifndef PL_KERNELS_SIMD_H
#define PL_KERNELS_SIMD_H

#include "base/fp16.h"

#include <immintrin.h>
#include <string.h>

#define AI static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 8")

/* One f16 value at an unaligned address, widened with F16C. */
AI float f16_at(const uint8_t *p) {
    pl_f16 h;
    memcpy(&h, p, sizeof h);
    return _cvtsh_ss(h);
}

/* Sum of the 8 lanes (a fixed order, so results do not depend on the caller). */
AI float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* e^r's Taylor polynomial of degree 7, highest power first (Horner's order): the exp of every
 * vector width (exp8 and exp16 below). */
static const float pl_exp_taylor7[8] = {1.0f / 5040, 1.0f / 720, 1.0f / 120, 1.0f / 24,
                                        1.0f / 6,    0.5f,        1.0f,        1.0f};

#if defined(__AVX2__) && defined(__FMA__)
/* e^x for x in [-87.3, 88] (clamped: e^-87.3 ~ 1e-38 stands in for smaller values, an absolute
 * error far below anything visible next to the attention tile maximum's e^0 = 1 or in SwiGLU's
 * g / (1 + e^-g)); degree-7 Taylor polynomial (pl_exp_taylor7) on |r| <= ln2/2; 2^n built in the
 * exponent field (-126 <= n <= 127). */
AI __m256 exp8(__m256 x) {
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.0f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(pl_exp_taylor7[0]);
    UNROLL for (int i = 1; i < 8; i++) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(pl_exp_taylor7[i]));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}
#endif

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
/* The float step of the 256-bit x16 integer tiles (x16_q8_ymm.h, matmul_x16_q5_avx2.c), the
 * scalar tile's: acc = fma((float)isum, d_w * d_x, acc), then for the types with a minimum (q4_1,
 * q5_1) acc = fma(m_w, s_x, acc) with m_w the 8 rows' f16 minimums at mw (NULL: none). */
AI __m256 x16_block_fma(__m256 acc, __m256i isum, __m256 dw, float dx, const uint8_t *mw, float sx) {
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(dw, _mm256_set1_ps(dx)), acc);
    if (mw) acc = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)mw)), _mm256_set1_ps(sx), acc);
    return acc;
}
#endif

#ifdef __AVX512F__
/* e^x for x in [-104, 88] (clamped): n = round(x / ln 2), r = x - n ln 2 in two steps, e^r by its
 * Taylor polynomial of degree 7 (truncation < 1e-8 relative on |r| <= ln2/2), times 2^n with
 * vscalefps (which also underflows gracefully to 0). */
AI __m512 exp16(__m512 x) {
    x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-104.0f)), _mm512_set1_ps(88.0f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(pl_exp_taylor7[0]);
    UNROLL for (int i = 1; i < 8; i++) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(pl_exp_taylor7[i]));
    return _mm512_scalef_ps(p, n);
}
#endif

#endif
