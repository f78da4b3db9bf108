/* kernels/roofline_avx512 — the read and FMA loops of kernels/roofline with 512-bit vectors. */
#include "kernels/roofline.h"

#include <immintrin.h>

float pl_roofline_read_avx512(const float *p, size_t n) {
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    size_t i = 0;
    for (; i + 64 <= n; i += 64) { /* one 256-byte step: four cache lines */
        a0 = _mm512_add_ps(a0, _mm512_load_ps(p + i));
        a1 = _mm512_add_ps(a1, _mm512_load_ps(p + i + 16));
        a2 = _mm512_add_ps(a2, _mm512_load_ps(p + i + 32));
        a3 = _mm512_add_ps(a3, _mm512_load_ps(p + i + 48));
    }
    float s = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
    for (; i < n; i++) s += p[i];
    return s;
}

float pl_roofline_fma_avx512(int64_t iters, float seed) {
    __m512 a[PL_ROOF_FMA_CHAINS];
    const __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
    for (int k = 0; k < PL_ROOF_FMA_CHAINS; k++) a[k] = _mm512_set1_ps(seed + (float)k);
    for (int64_t i = 0; i < iters; i++) {
#pragma GCC unroll 16
        for (int k = 0; k < PL_ROOF_FMA_CHAINS; k++) a[k] = _mm512_fmadd_ps(a[k], m, c);
    }
    __m512 s = a[0];
    for (int k = 1; k < PL_ROOF_FMA_CHAINS; k++) s = _mm512_add_ps(s, a[k]);
    return _mm512_reduce_add_ps(s);
}

int32_t pl_roofline_vnni_avx512(int64_t iters, int32_t seed) {
    __m512i a[PL_ROOF_FMA_CHAINS];
    const __m512i u = _mm512_set1_epi8(3), v = _mm512_set1_epi8(-2);
    for (int k = 0; k < PL_ROOF_FMA_CHAINS; k++) a[k] = _mm512_set1_epi32(seed + k);
    for (int64_t i = 0; i < iters; i++) {
#pragma GCC unroll 16
        for (int k = 0; k < PL_ROOF_FMA_CHAINS; k++) a[k] = _mm512_dpbusd_epi32(a[k], u, v);
    }
    __m512i s = a[0];
    for (int k = 1; k < PL_ROOF_FMA_CHAINS; k++) s = _mm512_add_epi32(s, a[k]);
    /* the lanes wrap (only their use as a sink matters): sum them as unsigned, not with
     * _mm512_reduce_add_epi32, whose final steps are signed C additions */
    uint32_t lanes[16], t = 0;
    _mm512_storeu_si512(lanes, s);
    for (int i = 0; i < 16; i++) t += lanes[i];
    return (int32_t)(t & 0x7fffffff);
}
