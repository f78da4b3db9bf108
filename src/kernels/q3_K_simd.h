/* kernels/q3_K_simd — pl_q3_K_scales (kernels/quant.h) in vector registers, for the AVX2 and
 * AVX-512 kernels (needs AVX2: include only from files compiled for it). */
#ifndef PL_KERNELS_Q3_K_SIMD_H
#define PL_KERNELS_Q3_K_SIMD_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

/* pl_q3_K_scales in vector registers: the 16 scales of a q3_K block, 32 subtracted, as bytes.
 * Scale j's low 4 bits are nibble j / 8 of byte j % 8, its high 2 bits bits 2 (j / 4)..+1 of
 * byte 8 + j % 4: every dword of the broadcast high bytes is shifted by its own amount. (A
 * decode step called the scalar version for every block of every row: ~64 scalar operations
 * against these 9.) Reads the 12 bytes only. */
static inline __m128i pl_q3_K_scales_v(const uint8_t s[12]) {
    const __m128i lo8 = _mm_loadl_epi64((const __m128i *)s);
    const __m128i m4 = _mm_set1_epi8(0x0F);
    const __m128i lo = _mm_unpacklo_epi64(_mm_and_si128(lo8, m4), _mm_and_si128(_mm_srli_epi16(lo8, 4), m4));
    int32_t h32;
    memcpy(&h32, s + 8, sizeof h32);
    const __m128i hi = _mm_and_si128(_mm_srlv_epi32(_mm_set1_epi32(h32), _mm_setr_epi32(0, 2, 4, 6)),
                                     _mm_set1_epi8(3));
    return _mm_sub_epi8(_mm_or_si128(lo, _mm_slli_epi16(hi, 4)), _mm_set1_epi8(32));
}

#endif
