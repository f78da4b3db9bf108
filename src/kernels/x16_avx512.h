/* kernels/x16_avx512 — AVX-512 helpers shared by the x16 kernels of the K-quants (included only
 * by files compiled for AVX-512: matmul_x16_kq_avx512.c, matmul_x16_kq_amx.c). */
#ifndef PL_KERNELS_X16_AVX512_H
#define PL_KERNELS_X16_AVX512_H

#include "kernels/simd.h"

#include <immintrin.h>

/* q6_K's x16 layout: bits 2k, 2k + 1 of every byte of hv moved to bits 4, 5 (the rest masked
 * off), the two high bits of unit 4h + k. */
AI __m512i pl_x16_high2(__m512i hv, int k) {
    const __m512i m = _mm512_set1_epi8(0x30);
    switch (k) {
    case 0: return _mm512_and_si512(_mm512_slli_epi16(hv, 4), m);
    case 1: return _mm512_and_si512(_mm512_slli_epi16(hv, 2), m);
    case 2: return _mm512_and_si512(hv, m);
    default: return _mm512_and_si512(_mm512_srli_epi16(hv, 2), m);
    }
}

#endif
