/* kernels/matmul_x16_f16_avx2 — the x16 layout of f16 and bf16 weights with AVX2 + F16C (issue
 * 35; layout and arithmetic: matmul_x16.c; the tile: x16_f16_tile.h, shared with AVX-512). A
 * column of a 16-row group is two vcvtph2ps (its halves of 8 rows), so one group by up to 6
 * activation rows keeps 12 accumulators, 2 weight vectors and the broadcast in AVX2's 16
 * registers: 12 FMAs per 2 conversions, the same bits as the scalar tile and the AVX-512 one.
 * bf16 widens exactly by a 16-bit shift (vpmovzxwd + vpslld) where f16 has vcvtph2ps; the rest,
 * and the bits (its scalar tile's), are f16's. AVX-512's bf16 tile is vdpbf16ps'
 * (matmul_x16_bf16_avx512.c), with the same bits.
 */
#include <immintrin.h>

/* 8 halves at p as f32: bf16 (BF) shifted into place, or f16 converted */
static inline __m256 x_cvt(const void *p, int BF) {
    const __m128i h = _mm_loadu_si128((const __m128i *)p);
    return BF ? _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)) : _mm256_cvtph_ps(h);
}

#define X_LANES 8
#define X_V __m256
#define X_CVT x_cvt
#define X_SET1 _mm256_set1_ps
#define X_FMA _mm256_fmadd_ps
#define X_STORE _mm256_storeu_ps
#define X_ZERO _mm256_setzero_ps
#define X_TB 6
#define X_CASES                                                                                    \
    F16X_CASE(1, 1) F16X_CASE(1, 2) F16X_CASE(1, 3) F16X_CASE(1, 4) F16X_CASE(1, 5) F16X_CASE(1, 6)
#include "kernels/x16_f16_tile.h"

X16_HALF_TILE(tile_f16_x16, 0)
X16_HALF_TILE(tile_bf16_x16, 1)

/* f16's tile, or bf16's (the same layout and skeleton; the 16-bit shift for the conversion) */
int pl_mm_kernel_x16_half_avx2(pl_dtype t, pl_mm_kernel *k) {
    k->fn = t == PL_DT_BF16 ? tile_bf16_x16 : tile_f16_x16;
    k->tr = 16;
    k->tb = X_TB;
    return t == PL_DT_F16 || t == PL_DT_BF16;
}
