/* kernels/matmul_mxfp4_avx512 — AVX-512 (BW, VNNI) mxfp4 x q8_0 tiles (4 weight rows x 3
 * activation rows), two blocks per 512-bit vector: the levels looked up + 128 with vpshufb
 * (unsigned bytes 116..140), vpdpbusd against the int8 activations on an accumulator seeded
 * with -128 * sum(x) (so each lane's sum is the exact integer sum of level * quant), one float
 * FMA per two blocks with the lanes' d_w d_x, one reduction at the end. */
#include "kernels/matmul_kernels.h"
#include "kernels/matmul_tile.h"
#include "kernels/quant.h"

#include "kernels/simd.h"

#include <immintrin.h>

/* Block p's 32 levels + 128 in element order (low nibbles, then high). */
AI __m256i levels(const uint8_t *p, const __m256i table) {
    __m128i v = _mm_loadu_si128((const __m128i *)(p + 1));
    __m256i n = _mm256_inserti128_si256(_mm256_castsi128_si256(v), _mm_srli_epi16(v, 4), 1);
    return _mm256_shuffle_epi8(table, _mm256_and_si256(n, _mm256_set1_epi8(0x0F)));
}

AI void mxfp4_body(const uint8_t *w, size_t ws, const uint8_t *a, size_t as, int64_t cols, float *y,
                   int64_t ldy, const int NR, const int NB) {
    const size_t bsz = sizeof(pl_block_mxfp4);
    const int64_t nblk = cols / PL_QK;
    const __m256i table = _mm256_xor_si256(
        _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)pl_kvalues_mxfp4)),
        _mm256_set1_epi8((char)0x80));
    const __m512i off = _mm512_set1_epi8((char)0x80);
    __m512 acc[4][3];
    UNROLL for (int r = 0; r < NR; r++) UNROLL for (int b = 0; b < NB; b++) acc[r][b] = _mm512_setzero_ps();
    for (int64_t k = 0; k < nblk; k += 2) {
        const int two = k + 1 < nblk; /* else a lone last block in the low half */
        __m512i wq[4];
        __m512 dw[4];
        UNROLL for (int r = 0; r < NR; r++) {
            const uint8_t *p = w + r * ws + k * bsz;
            __m256i hi = two ? levels(p + bsz, table) : _mm256_set1_epi8((char)0x80);
            wq[r] = _mm512_inserti64x4(_mm512_castsi256_si512(levels(p, table)), hi, 1);
            dw[r] = _mm512_insertf32x8(_mm512_set1_ps(pl_e8m0_half(p[0])),
                                       _mm256_set1_ps(two ? pl_e8m0_half(p[bsz]) : 0.0f), 1);
        }
        UNROLL for (int b = 0; b < NB; b++) {
            const uint8_t *ab = a + b * as;
            const float *dx = (const float *)(ab + cols) + k;
            __m256i xhi = two ? _mm256_loadu_si256((const __m256i *)(ab + (k + 1) * PL_QK)) : _mm256_setzero_si256();
            __m512i xv = _mm512_inserti64x4(
                _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(ab + k * PL_QK))), xhi, 1);
            __m512i seed = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), off, xv));
            __m512 dxv = _mm512_insertf32x8(_mm512_set1_ps(dx[0]), _mm256_set1_ps(two ? dx[1] : 0.0f), 1);
            UNROLL for (int r = 0; r < NR; r++) {
                __m512i s = _mm512_dpbusd_epi32(seed, wq[r], xv);
                acc[r][b] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dw[r], dxv), acc[r][b]);
            }
        }
    }
    UNROLL for (int r = 0; r < NR; r++) UNROLL for (int b = 0; b < NB; b++)
        y[b * ldy + r] = _mm512_reduce_add_ps(acc[r][b]);
}

PL_MM_TILE_4x3(tile_mxfp4, mxfp4_body)

void pl_mm_kernel_mxfp4_avx512(pl_mm_kernel *k) {
    *k = (pl_mm_kernel){.fn = tile_mxfp4, .tr = 4, .tb = 3};
}
