/* kernels/matmul_x16_f16_avx512 — the x16 layout of f16 weights with AVX-512 (layout and
 * arithmetic: matmul_x16.c; the tile: x16_f16_tile.h). Column k of 16 rows is one vcvtph2ps
 * (the 16 lanes are the 16 rows) multiplied by activation k broadcast from memory. Two shapes of
 * 24 accumulators, chosen by pl_x16_f16_wide (kernels/cpu.c):
 *   narrow  2 row groups x up to 12 activation rows: 24 FMAs per 2 conversions and 12
 *           broadcasts (the default: Intel, where vcvtph2ps takes the FMA ports, and Zen 5);
 *   wide    4 row groups x up to 6 activation rows: 24 FMAs per 4 conversions and 6 broadcasts.
 *           On a Zen 4 (AMD family 0x19: AVX-512 on 256-bit halves) the broadcasts, not the
 *           conversions, were what held the FMAs back: `bench kernels -t 1 --type f16`, 2048 x
 *           2048, 3 interleaved rounds, B = 32 76-87 % -> 91-96 % of the FMA peak, B = 512
 *           77-82 % -> 95-96 %; 1B F16 prefill 84-91 -> 108-110 tok/s (docs/BENCHMARKS.md).
 *           A decode's few rows (tr_small) keep the narrow tile's 32 rows (its cases 1-2 groups).
 * Each output is one accumulator, column after column, in both: the same bits.
 */
#define X_LANES 16
#define X_V __m512
#define X_CVT(p, BF) ((void)(BF), _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p)))) /* f16 only */
#define X_SET1 _mm512_set1_ps
#define X_FMA _mm512_fmadd_ps
#define X_STORE _mm512_storeu_ps
#define X_ZERO _mm512_setzero_ps
#define X_TG 4  /* the bounds of both shapes */
#define X_TB 12
#include "kernels/x16_f16_tile.h"

#define R6(G) F16X_CASE(G, 1) F16X_CASE(G, 2) F16X_CASE(G, 3) F16X_CASE(G, 4) F16X_CASE(G, 5) F16X_CASE(G, 6)
#define R12(G) R6(G) F16X_CASE(G, 7) F16X_CASE(G, 8) F16X_CASE(G, 9) F16X_CASE(G, 10) F16X_CASE(G, 11) F16X_CASE(G, 12)

#define X_CASES R12(1) R12(2)
X16_HALF_TILE(tile_f16_x16, 0)
#undef X_CASES
#define X_CASES R6(1) R6(2) R6(3) R6(4)
X16_HALF_TILE(tile_f16_x16_wide, 0)

int pl_mm_kernel_x16_f16_avx512(pl_mm_kernel *k) {
    const int wide = pl_x16_f16_wide;
    k->fn = wide ? tile_f16_x16_wide : tile_f16_x16;
    k->fn_next = wide ? tile_f16_x16_wide_next : tile_f16_x16_next;
    k->tr = wide ? 64 : 32;
    k->tr_small = 32;
    k->tb = wide ? 6 : 12;
    return 1;
}
