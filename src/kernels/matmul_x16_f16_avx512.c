/* kernels/matmul_x16_f16_avx512 — the x16 layout of f16 weights with AVX-512 (layout and
 * arithmetic: matmul_x16.c; the tile: x16_f16_tile.h). Column k of 16 rows is one vcvtph2ps
 * (the 16 lanes are the 16 rows) multiplied by activation k broadcast from memory, so a tile of
 * 2 row groups by up to 12 activation rows does 24 FMAs per 2 conversions.
 */
#define X_LANES 16
#define X_V __m512
#define X_CVT(p, BF) ((void)(BF), _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p)))) /* f16 only */
#define X_SET1 _mm512_set1_ps
#define X_FMA _mm512_fmadd_ps
#define X_STORE _mm512_storeu_ps
#define X_ZERO _mm512_setzero_ps
#define X_TB 12
#define F16X_ROW(G)                                                                                \
    F16X_CASE(G, 1) F16X_CASE(G, 2) F16X_CASE(G, 3) F16X_CASE(G, 4) F16X_CASE(G, 5)             \
    F16X_CASE(G, 6) F16X_CASE(G, 7) F16X_CASE(G, 8) F16X_CASE(G, 9) F16X_CASE(G, 10)            \
    F16X_CASE(G, 11) F16X_CASE(G, 12)
#define X_CASES F16X_ROW(1) F16X_ROW(2)
#include "kernels/x16_f16_tile.h"

X16_HALF_TILE(tile_f16_x16, 0)

int pl_mm_kernel_x16_f16_avx512(pl_mm_kernel *k) {
    k->fn = tile_f16_x16;
    k->tr = 32;
    k->tb = X_TB;
    return 1;
}
