/* kernels/matmul_x16_q5_avx2 — the x16 tiles of q5_0 and q5_1 with plain AVX2 (issue 35;
 * layouts and arithmetic: matmul_x16_q4_0.c; q4_1's AVX2 tile is q4_0's, x16_q8_ymm.h). AVX-VNNI
 * runs them in x16_q8_ymm.h with vpdpbusd; here vpmaddubsw takes the stored quants as they are,
 * unsigned (the nibble + 16 x fifth bit, 0..31), against the signed activation bytes (q8_0's for
 * q5_0, q8_1's for q5_1, |x| <= 127), so no sign trick is needed: two chains of 4 chunks each
 * (at most 4 x 2 x 31 x 127 = 31496 per int16 pair, both chains together would not fit), each
 * widened by vpmaddwd; q5_0's chain starts from the activations' seed (-16 x the block sum) as
 * the scalar tile's.
 *
 * The fifth bits become bytes by vpshufb + vpcmpeqb (AVX-512's k-masks elsewhere). The integer
 * sums are exact, so the float step, the scalar tile's
 *   acc = fma((float)isum, d_w * d_x, acc) (then fma(m_w, s_x, acc) for q5_1),
 * gives the scalar tile's bits (test_matmul_x16). Tiles of 16 rows x 2 activations on ymm halves
 * (rows 0-7, 8-15), both halves of a block together; decode prefetches two blocks ahead into L2.
 */
#include "kernels/matmul_kernels.h"
#include "kernels/matmul_tile.h"
#include "kernels/quant.h"

#include "kernels/simd.h"

#include <immintrin.h>
#include <string.h>

/* The 32 bits at p as 32 bytes, 16 where the bit is set (byte i: bit i). */
AI __m256i fifth16(const uint8_t *p) {
    int32_t m;
    memcpy(&m, p, sizeof m);
    const __m256i idx = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
    const __m256i bit = _mm256_set1_epi64x((int64_t)0x8040201008040201);
    const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32(m), idx), bit), bit);
    return _mm256_and_si256(set, _mm256_set1_epi8(16));
}

/* Half h (rows 8h..8h + 7) of block k against NB activation rows: acc[b] updated.
 * KIND: 0 q5_0, 1 q5_1. */
AI void q5_block(const uint8_t *w, const uint8_t *a, size_t as, int64_t cols, int64_t k, int h,
                 __m256 *acc, const int NB, const int KIND) {
    const int64_t nblk = cols / PL_QK;
    const int WITH_M = KIND == 1;
    const size_t blk = pl_mm_x16_block_bytes(WITH_M ? 5 : 3), hdr = WITH_M ? 64 : 32;
    const __m256i m4 = _mm256_set1_epi8(15), ones = _mm256_set1_epi16(1);
    const uint8_t *wb = w + (size_t)k * blk;
    const float *dx[2];
    __m256i s0[2], s1[2];
    UNROLL for (int b = 0; b < NB; b++) {
        dx[b] = (const float *)(a + (size_t)b * as + cols);
        s0[b] = s1[b] = _mm256_setzero_si256();
    }
    UNROLL for (int j = 0; j < 4; j++) {
        if (NB == 1 && h == 0) /* decode streams the weights: the block two ahead into L2 */
            for (int l = j; 64 * (size_t)l < blk; l += 4)
                _mm_prefetch((const char *)wb + 2 * blk + 64 * l, _MM_HINT_T1);
        const __m256i v = _mm256_loadu_si256((const __m256i *)(wb + hdr + 64 * j + 32 * h));
        const __m256i w0 = _mm256_add_epi8(_mm256_and_si256(v, m4), fifth16(wb + hdr + 256 + 8 * j + 4 * h));
        const __m256i w1 = _mm256_add_epi8(_mm256_and_si256(_mm256_srli_epi16(v, 4), m4),
                                           fifth16(wb + hdr + 256 + 8 * (j + 4) + 4 * h));
        UNROLL for (int b = 0; b < NB; b++) {
            const int32_t *xq = (const int32_t *)(a + (size_t)b * as + k * PL_QK);
            s0[b] = _mm256_add_epi16(s0[b], _mm256_maddubs_epi16(w0, _mm256_set1_epi32(xq[j])));
            s1[b] = _mm256_add_epi16(s1[b], _mm256_maddubs_epi16(w1, _mm256_set1_epi32(xq[j + 4])));
        }
    }
    const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(wb + 16 * h)));
    UNROLL for (int b = 0; b < NB; b++) {
        __m256i isum = _mm256_add_epi32(_mm256_madd_epi16(s0[b], ones), _mm256_madd_epi16(s1[b], ones));
        if (!WITH_M) /* q5_0: the seed, -16 x the block sum, after the block scales */
            isum = _mm256_add_epi32(isum, _mm256_set1_epi32(((const int32_t *)(dx[b] + nblk))[k]));
        /* with a minimum: m_w times q8_1's s_x, after d_x's block scales */
        acc[b] = x16_block_fma(acc[b], isum, dw, dx[b][k], WITH_M ? wb + 32 + 16 * h : NULL,
                               WITH_M ? dx[b][nblk + k] : 0.0f);
    }
}

/* One 16-row group by NB (1, 2) activation rows, block after block, each output's blocks in
 * order. */
AI void q5_body(const uint8_t *w, const uint8_t *a, size_t as, int64_t cols, float *y, int64_t ldy,
                const int NB, const int KIND) {
    const int64_t nblk = cols / PL_QK;
    __m256 acc[2][2];
    UNROLL for (int h = 0; h < 2; h++) UNROLL for (int b = 0; b < NB; b++) acc[h][b] = _mm256_setzero_ps();
    for (int64_t k = 0; k < nblk; k++) UNROLL for (int h = 0; h < 2; h++) q5_block(w, a, as, cols, k, h, acc[h], NB, KIND);
    UNROLL for (int h = 0; h < 2; h++) UNROLL for (int b = 0; b < NB; b++)
        _mm256_storeu_ps(y + (size_t)b * ldy + 8 * h, acc[h][b]);
}

PL_X16_TILE_NB2(tile_q5_0, q5_body, 0)
PL_X16_TILE_NB2(tile_q5_1, q5_body, 1)

int pl_mm_kernel_x16_q5_avx2(pl_dtype t, pl_mm_kernel *k) {
    k->tr = 16;
    k->tb = 2;
    k->gemm = NULL;
    k->fn = t == PL_DT_Q5_0 ? tile_q5_0 : tile_q5_1;
    return t == PL_DT_Q5_0 || t == PL_DT_Q5_1;
}
