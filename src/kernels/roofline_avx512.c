/* kernels/roofline_avx512 — the read, FMA and int8 (AVX-512 VNNI vpdpbusd) loops of
 * kernels/roofline with 512-bit vectors (the loops themselves: roofline_impl.h). */
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
#define RF_IV __m512i
#define RF_ILANES 16
#define RF_ISET1_8 _mm512_set1_epi8
#define RF_ISET1_32 _mm512_set1_epi32
#define RF_IADD _mm512_add_epi32
#define RF_ISTORE(p, v) _mm512_storeu_si512(p, v)
#define RF_IDOT(acc, u, v) _mm512_dpbusd_epi32(acc, u, v)
#include "kernels/roofline_impl.h"

/* PL_ROOF_BF16_CHAINS independent chains of `iters` vdpbf16ps (AVX-512 BF16: 32 multiply-adds of
 * bf16 pairs into 16 f32 lanes, the bf16 x16 tile's instruction). */
float pl_roofline_bf16_avx512(int64_t iters, float seed) {
    __m512 a[PL_ROOF_BF16_CHAINS];
    const __m512bh u = (__m512bh)_mm512_set1_epi32(0x3f7f3f7f), v = (__m512bh)_mm512_set1_epi32(0x33d633d6);
    for (int k = 0; k < PL_ROOF_BF16_CHAINS; k++) a[k] = _mm512_set1_ps(seed + (float)k);
    for (int64_t i = 0; i < iters; i++) {
#pragma GCC unroll 32
        for (int k = 0; k < PL_ROOF_BF16_CHAINS; k++) a[k] = _mm512_dpbf16_ps(a[k], u, v);
    }
    __m512 s = a[0];
    for (int k = 1; k < PL_ROOF_BF16_CHAINS; k++) s = _mm512_add_ps(s, a[k]);
    return _mm512_reduce_add_ps(s);
}
