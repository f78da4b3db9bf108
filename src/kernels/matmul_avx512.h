/* kernels/matmul_avx512 — AVX-512 lane helpers shared by the tile bodies of matmul_avx512.c and
 * matmul_wt_avx512.c (included only by files compiled for AVX-512 F/BW). No state. */
#ifndef PL_KERNELS_MATMUL_AVX512_H
#define PL_KERNELS_MATMUL_AVX512_H

#include "kernels/simd.h"

#include <immintrin.h>
#include <string.h>

AI __m512i join(__m256i lo, __m256i hi) { return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1); }
AI __m512i zext256(__m256i v) { return _mm512_inserti64x4(_mm512_setzero_si512(), v, 0); }

/* The f16 values at pa and pb spread over the lanes by idx (0 -> *pa, 1 -> *pb). */
AI __m512 lanes_of_two_f16(const __m512i idx, const uint8_t *pa, const uint8_t *pb) {
    pl_f16 ha, hb;
    memcpy(&ha, pa, sizeof ha);
    memcpy(&hb, pb, sizeof hb);
    __m128 v = _mm_cvtph_ps(_mm_cvtsi32_si128((int)((uint32_t)ha | ((uint32_t)hb << 16))));
    return _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(v));
}

/* The floats d[0] and d[1] spread over the lanes by idx. */
AI __m512 lanes_of_two(const __m512i idx, const float *d) {
    return _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(_mm_castsi128_ps(_mm_loadl_epi64((const __m128i *)d))));
}

#endif
