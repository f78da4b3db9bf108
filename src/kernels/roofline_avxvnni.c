/* kernels/roofline_avxvnni — the int8 loop of kernels/roofline with AVX-VNNI (VEX vpdpbusd on
 * 256-bit vectors; the loop itself: roofline_impl.h). The read and FMA loops are AVX2's. */
#include <immintrin.h>

#define RF_SUFFIX avxvnni
#define RF_INT_ONLY
#define RF_IV __m256i
#define RF_ILANES 8
#define RF_ISET1_8 _mm256_set1_epi8
#define RF_ISET1_32 _mm256_set1_epi32
#define RF_IADD _mm256_add_epi32
#define RF_ISTORE(p, v) _mm256_storeu_si256((__m256i *)(p), v)
#define RF_IDOT(acc, u, v) _mm256_dpbusd_avx_epi32(acc, u, v)
#include "kernels/roofline_impl.h"
