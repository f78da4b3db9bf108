/* kernels/roofline_avx2 — the read, FMA and int8 loops of kernels/roofline with 256-bit vectors
 * (the loops themselves: roofline_impl.h). AVX2's int8 dot product of 4 bytes per int32 lane is
 * the AVX2 tiles' sequence: vpmaddubsw, vpmaddwd against ones, vpaddd. */
#include "kernels/simd.h"

#define RF_SUFFIX avx2
#define RF_V __m256
#define RF_LANES 8
#define RF_ZERO() _mm256_setzero_ps()
#define RF_SET1(x) _mm256_set1_ps(x)
#define RF_LOAD(p) _mm256_load_ps(p)
#define RF_ADD(a, b) _mm256_add_ps(a, b)
#define RF_FMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define RF_HSUM(v) hsum8(v)
#define RF_IV __m256i
#define RF_ICHAINS PL_ROOF_INT8_CHAINS_AVX2
#define RF_ILANES 8
#define RF_ISET1_8 _mm256_set1_epi8
#define RF_ISET1_32 _mm256_set1_epi32
#define RF_IADD _mm256_add_epi32
#define RF_ISTORE(p, v) _mm256_storeu_si256((__m256i *)(p), v)
#define RF_IDOT(acc, u, v)                                                                         \
    _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(acc, v), _mm256_set1_epi16(1)))
#include "kernels/roofline_impl.h"
