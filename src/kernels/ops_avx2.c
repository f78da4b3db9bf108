/* kernels/ops_avx2 — RMSNorm and SwiGLU rows with AVX2 + FMA below AVX-512 (dispatched from
 * ops.c; issue 35), ops_avx512.c's arithmetic on 8 lanes:
 *
 *   rmsnorm: the squares summed in double (4 lanes, two accumulators over the two halves of each
 *            8-float chunk, a fixed reduction), as the scalar path does in double, so the two
 *            differ only in the order of the double additions.
 *   swiglu : silu(g) = g / (1 + e^-g), e^x from exp8 (simd.h: degree-7 polynomial after range
 *            reduction, relative error ~1e-7).
 *
 * Tails are masked vectors (vmaskmovps), never scalar loops, so a value depends only on the row
 * length, not on where a thread's range starts or ends: bitwise the same for any thread count
 * and batch.
 */
#include "kernels/ops.h"

#include "kernels/simd.h"

#include <immintrin.h>
#include <math.h>

/* Lanes [0, left) of 8 set (all when left >= 8), as vmaskmovps wants them. */
AI __m256i mask8(int64_t left) {
    const int n = left >= 8 ? 8 : (int)left;
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

void pl_rmsnorm_row_avx2(float *y, const float *x, const float *w, int64_t dim, float eps) {
    __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
    for (int64_t i = 0; i < dim; i += 8) {
        __m256 v = _mm256_maskload_ps(x + i, mask8(dim - i));
        __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
        __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
        s0 = _mm256_fmadd_pd(lo, lo, s0);
        s1 = _mm256_fmadd_pd(hi, hi, s1);
    }
    __m256d s = _mm256_add_pd(s0, s1);
    __m128d h = _mm_add_pd(_mm256_castpd256_pd128(s), _mm256_extractf128_pd(s, 1));
    double ss = _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
    const __m256 scale = _mm256_set1_ps(1.0f / sqrtf((float)(ss / (double)dim) + eps));
    for (int64_t i = 0; i < dim; i += 8) {
        __m256i m = mask8(dim - i);
        __m256 v = _mm256_mul_ps(_mm256_maskload_ps(x + i, m), scale);
        _mm256_maskstore_ps(y + i, m, _mm256_mul_ps(v, _mm256_maskload_ps(w + i, m)));
    }
}

void pl_swiglu_avx2(float *g, const float *u, int64_t n) {
    const __m256 one = _mm256_set1_ps(1.0f);
    for (int64_t i = 0; i < n; i += 8) {
        __m256i m = mask8(n - i);
        __m256 gv = _mm256_maskload_ps(g + i, m);
        __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), gv));
        __m256 s = _mm256_div_ps(gv, _mm256_add_ps(one, e));
        _mm256_maskstore_ps(g + i, m, _mm256_mul_ps(s, _mm256_maskload_ps(u + i, m)));
    }
}
