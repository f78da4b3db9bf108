/* kernels/roofline_avx2 — the read and FMA loops of kernels/roofline with 256-bit vectors. */
#include "kernels/roofline.h"

#include <immintrin.h>

static float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

float pl_roofline_read_avx2(const float *p, size_t n) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    size_t i = 0;
    for (; i + 32 <= n; i += 32) { /* one 128-byte step: two cache lines */
        a0 = _mm256_add_ps(a0, _mm256_load_ps(p + i));
        a1 = _mm256_add_ps(a1, _mm256_load_ps(p + i + 8));
        a2 = _mm256_add_ps(a2, _mm256_load_ps(p + i + 16));
        a3 = _mm256_add_ps(a3, _mm256_load_ps(p + i + 24));
    }
    float s = hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    for (; i < n; i++) s += p[i];
    return s;
}

float pl_roofline_fma_avx2(int64_t iters, float seed) {
    __m256 a[PL_ROOF_FMA_CHAINS];
    const __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
    for (int k = 0; k < PL_ROOF_FMA_CHAINS; k++) a[k] = _mm256_set1_ps(seed + (float)k);
    for (int64_t i = 0; i < iters; i++) {
#pragma GCC unroll 16
        for (int k = 0; k < PL_ROOF_FMA_CHAINS; k++) a[k] = _mm256_fmadd_ps(a[k], m, c);
    }
    __m256 s = a[0];
    for (int k = 1; k < PL_ROOF_FMA_CHAINS; k++) s = _mm256_add_ps(s, a[k]);
    return hsum(s);
}
