/* kernels/matmul_x16_f16_avx2 — the x16 layout of f16 weights with AVX2 + F16C (issue 35; layout
 * and arithmetic: matmul_x16.c; the tile: x16_f16_tile.h, shared with AVX-512). A column of a
 * 16-row group is two vcvtph2ps (its halves of 8 rows), so one group by up to 6 activation rows
 * keeps 12 accumulators, 2 weight vectors and the broadcast in AVX2's 16 registers: 12 FMAs per
 * 2 conversions, the same bits as the scalar tile and the AVX-512 one.
 */
#define X_LANES 8
#define X_V __m256
#define X_CVT(p) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p)))
#define X_SET1 _mm256_set1_ps
#define X_FMA _mm256_fmadd_ps
#define X_STORE _mm256_storeu_ps
#define X_ZERO _mm256_setzero_ps
#define X_TB 6
#define X_CASES                                                                                    \
    F16X_CASE(1, 1) F16X_CASE(1, 2) F16X_CASE(1, 3) F16X_CASE(1, 4) F16X_CASE(1, 5) F16X_CASE(1, 6)
#include "kernels/x16_f16_tile.h"

int pl_mm_kernel_x16_f16_avx2(pl_mm_kernel *k) {
    k->fn = tile_f16_x16;
    k->tr = 16;
    k->tb = X_TB;
    return 1;
}
