/* kernels/matmul_mxfp4_avx2 — AVX2 mxfp4 x q8_0 tiles (2 weight rows x 2 activation rows): a
 * block's 32 nibbles looked up in the level table with vpshufb (signed levels), |w| times x
 * with w's sign by vpmaddubsw, pairs summed by vpmaddwd, one float FMA per block with
 * d_w d_x (llama.cpp's ggml_vec_dot_mxfp4_q8_0 on AVX2 computes the same sums). No int16 pair
 * sum can saturate: |level| <= 12. */
#include "kernels/matmul_kernels.h"
#include "kernels/matmul_tile.h"
#include "kernels/quant.h"

#include "kernels/simd.h"

#include <immintrin.h>

AI void mxfp4_body(const uint8_t *w, size_t ws, const uint8_t *a, size_t as, int64_t cols, float *y,
                   int64_t ldy, const int NR, const int NB) {
    const size_t bsz = sizeof(pl_block_mxfp4);
    const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)pl_kvalues_mxfp4));
    const __m256i ones = _mm256_set1_epi16(1), low = _mm256_set1_epi8(0x0F);
    __m256 acc[2][2];
    UNROLL for (int r = 0; r < NR; r++) UNROLL for (int b = 0; b < NB; b++) acc[r][b] = _mm256_setzero_ps();
    for (int64_t k = 0; k < cols / PL_QK; k++) {
        __m256i q[2];
        float dw[2];
        UNROLL for (int r = 0; r < NR; r++) {
            const uint8_t *p = w + r * ws + k * bsz;
            __m128i v = _mm_loadu_si128((const __m128i *)(p + 1));
            __m256i n = _mm256_inserti128_si256(_mm256_castsi128_si256(v), _mm_srli_epi16(v, 4), 1);
            q[r] = _mm256_shuffle_epi8(table, _mm256_and_si256(n, low));
            dw[r] = pl_e8m0_half(p[0]);
        }
        UNROLL for (int b = 0; b < NB; b++) {
            const uint8_t *ab = a + b * as;
            const __m256i xv = _mm256_loadu_si256((const __m256i *)(ab + k * PL_QK));
            const float dx = ((const float *)(ab + cols))[k];
            UNROLL for (int r = 0; r < NR; r++) {
                __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(q[r], q[r]), _mm256_sign_epi8(xv, q[r]));
                __m256i s = _mm256_madd_epi16(p16, ones);
                acc[r][b] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(dw[r] * dx), acc[r][b]);
            }
        }
    }
    UNROLL for (int r = 0; r < NR; r++) UNROLL for (int b = 0; b < NB; b++) y[b * ldy + r] = hsum8(acc[r][b]);
}

PL_MM_TILE_2x2(tile_mxfp4, mxfp4_body)

void pl_mm_kernel_mxfp4_avx2(pl_mm_kernel *k) {
    *k = (pl_mm_kernel){.fn = tile_mxfp4, .tr = 2, .tb = 2};
}
