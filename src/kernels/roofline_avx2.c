/* kernels/roofline_avx2 — the read and FMA loops of kernels/roofline with 256-bit vectors
 * (the loops themselves: roofline_impl.h). */
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
#include "kernels/roofline_impl.h"
