/* kernels/ops_avx512 — RMSNorm, SwiGLU and GELU rows with AVX-512 (dispatched from ops.c).
 *
 * Both treat every row (RMSNorm) or element (SwiGLU) with operations that depend only on the row
 * length, never on where a thread's range starts or ends (tails are masked vectors, not scalar
 * loops), so results do not change with the thread count or the batch.
 *
 *   rmsnorm: the squares are summed in double (8 lanes, two accumulators over alternating
 *            16-float chunks, fixed reduction), as the scalar path does in double, so the two
 *            differ only in the order of the double additions.
 *   swiglu : silu(g) = g / (1 + e^-g) with e^x from a degree-7 polynomial after range reduction
 *            (relative error ~1e-7), scaled by 2^n with vscalefps.
 *   gelu   : GGML's f16 table, gathered by the vcvtps2ph bits of x (round to nearest even, as
 *            pl_f32_to_f16): bitwise the scalar path's values.
 */
#include "kernels/ops.h"

#include "kernels/simd.h"

#include <immintrin.h>
#include <math.h>


AI __mmask16 mask_of(int64_t left) {
    return left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1u);
}

void pl_rmsnorm_row_avx512(float *y, const float *x, const float *w, int64_t dim, float eps) {
    __m512d s0 = _mm512_setzero_pd(), s1 = _mm512_setzero_pd();
    for (int64_t i = 0; i < dim; i += 16) {
        __m512 v = _mm512_maskz_loadu_ps(mask_of(dim - i), x + i);
        __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
        __m512d hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
        s0 = _mm512_fmadd_pd(lo, lo, s0);
        s1 = _mm512_fmadd_pd(hi, hi, s1);
    }
    double ss = _mm512_reduce_add_pd(_mm512_add_pd(s0, s1));
    const __m512 scale = _mm512_set1_ps(1.0f / sqrtf((float)(ss / (double)dim) + eps));
    for (int64_t i = 0; i < dim; i += 16) {
        __mmask16 m = mask_of(dim - i);
        __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), scale);
        _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(v, _mm512_maskz_loadu_ps(m, w + i)));
    }
}

void pl_swiglu_avx512(float *g, const float *u, int64_t n) {
    const __m512 one = _mm512_set1_ps(1.0f);
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = mask_of(n - i);
        __m512 gv = _mm512_maskz_loadu_ps(m, g + i);
        __m512 e = exp16(_mm512_sub_ps(_mm512_setzero_ps(), gv));
        __m512 s = _mm512_div_ps(gv, _mm512_add_ps(one, e));
        _mm512_mask_storeu_ps(g + i, m, _mm512_mul_ps(s, _mm512_maskz_loadu_ps(m, u + i)));
    }
}

void pl_geglu_avx512(float *g, const float *u, int64_t n, const float *table) {
    const __m512 lo = _mm512_set1_ps(-10.0f), hi = _mm512_set1_ps(10.0f);
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = mask_of(n - i);
        __m512 x = _mm512_maskz_loadu_ps(m, g + i);
        __m512i idx = _mm512_cvtepu16_epi32(_mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
        __m512 y = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, idx, table, 4);
        y = _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, hi, _CMP_GE_OQ), x);
        y = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, lo, _CMP_NLE_UQ), y); /* x <= -10: 0 */
        if (u) y = _mm512_mul_ps(y, _mm512_maskz_loadu_ps(m, u + i));
        _mm512_mask_storeu_ps(g + i, m, y);
    }
}
