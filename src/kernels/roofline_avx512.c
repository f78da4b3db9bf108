/* kernels/roofline_avx512 — the read and FMA loops of kernels/roofline with 512-bit vectors
 * (the loops themselves: roofline_impl.h), and the VNNI loop that only AVX-512 has. */
#include "kernels/roofline.h"

#include <immintrin.h>

#define RF_SUFFIX avx512
#define RF_V __m512
#define RF_LANES 16
#define RF_ZERO() _mm512_setzero_ps()
#define RF_SET1(x) _mm512_set1_ps(x)
#define RF_LOAD(p) _mm512_load_ps(p)
#define RF_ADD(a, b) _mm512_add_ps(a, b)
#define RF_FMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define RF_HSUM(v) _mm512_reduce_add_ps(v)
#include "kernels/roofline_impl.h"

/* The int8 dot-product chains (vpdpbusd): AVX-512 VNNI only. */
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
