/* kernels/matmul_kq_avx2 — AVX2 tile kernels for the K-quants (q4_K, q5_K, q6_K) against q8_K
 * activations, 2 weight rows x 2 activation rows per tile.
 *
 * Per super-block of 256 and per (row, activation) pair: vpmaddubsw of the unsigned quants
 * (q4_K 0..15, q5_K 0..31, q6_K 0..63) with the int8 activations gives int16 pair sums that
 * cannot saturate (2 * 63 * 127 < 32767), vpmaddwd with the sub-block scales widens them into an
 * 8-lane int32 sum; the q4_K/q5_K mins and the q6_K offset of 32 come off through the q8_K block
 * sums; then one float FMA (two for the mins) per super-block into an 8-lane accumulator that is
 * reduced at the end. The operations on a value do not depend on the tile shape.
 */
#include "kernels/matmul_kernels.h"
#include "kernels/matmul_tile.h"
#include "kernels/quant.h"

#include "kernels/simd.h"

#include <immintrin.h>
#include <string.h>

#define Q8K(b, i) ((const pl_block_q8_K *)(a + (b) * as) + (i))

/* q4_K (HIGH5 = 0) and q5_K (HIGH5 = 1). */
AI void k45_body(const uint8_t *w, size_t ws, const uint8_t *a, size_t as, int64_t cols, float *y,
                 int64_t ldy, const int NR, const int NB, const int HIGH5) {
    const size_t bsz = HIGH5 ? sizeof(pl_block_q5_K) : sizeof(pl_block_q4_K);
    const size_t qs_off = HIGH5 ? offsetof(pl_block_q5_K, qs) : offsetof(pl_block_q4_K, qs);
    const __m256i low = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
    __m256 acc[2][2];
    UNROLL for (int r = 0; r < NR; r++) UNROLL for (int b = 0; b < NB; b++) acc[r][b] = _mm256_setzero_ps();
    for (int64_t i = 0; i < cols / PL_QK_K; i++) {
        uint8_t sc[2][8], mn[2][8];
        __m256i mdup[2], iacc[2][2];
        UNROLL for (int r = 0; r < NR; r++) {
            const uint8_t *p = w + r * ws + i * bsz;
            for (int j = 0; j < 8; j++) pl_get_scale_min_k4(j, p + 4, &sc[r][j], &mn[r][j]);
            __m128i m16 = _mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)mn[r]));
            mdup[r] = _mm256_set_m128i(_mm_unpackhi_epi16(m16, m16), _mm_unpacklo_epi16(m16, m16));
            UNROLL for (int b = 0; b < NB; b++) iacc[r][b] = _mm256_setzero_si256();
        }
        for (int g = 0; g < 4; g++) {
            __m256i qlo[2], qhi[2], slo[2], shi[2];
            UNROLL for (int r = 0; r < NR; r++) {
                const uint8_t *p = w + r * ws + i * bsz;
                __m256i v = _mm256_loadu_si256((const __m256i *)(p + qs_off + 32 * g));
                qlo[r] = _mm256_and_si256(v, low);
                qhi[r] = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
                if (HIGH5) {
                    __m256i h = _mm256_loadu_si256((const __m256i *)(p + offsetof(pl_block_q5_K, qh)));
                    __m256i b0 = _mm256_and_si256(_mm256_srli_epi16(h, 2 * g), one);
                    __m256i b1 = _mm256_and_si256(_mm256_srli_epi16(h, 2 * g + 1), one);
                    qlo[r] = _mm256_or_si256(qlo[r], _mm256_slli_epi16(b0, 4));
                    qhi[r] = _mm256_or_si256(qhi[r], _mm256_slli_epi16(b1, 4));
                }
                slo[r] = _mm256_set1_epi16(sc[r][2 * g]);
                shi[r] = _mm256_set1_epi16(sc[r][2 * g + 1]);
            }
            UNROLL for (int b = 0; b < NB; b++) {
                __m256i xlo = _mm256_loadu_si256((const __m256i *)(Q8K(b, i)->qs + 64 * g));
                __m256i xhi = _mm256_loadu_si256((const __m256i *)(Q8K(b, i)->qs + 64 * g + 32));
                UNROLL for (int r = 0; r < NR; r++) {
                    __m256i s = _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(qlo[r], xlo), slo[r]),
                                                 _mm256_madd_epi16(_mm256_maddubs_epi16(qhi[r], xhi), shi[r]));
                    iacc[r][b] = _mm256_add_epi32(iacc[r][b], s);
                }
            }
        }
        UNROLL for (int b = 0; b < NB; b++) {
            const float dx = Q8K(b, i)->d;
            __m256i bs = _mm256_loadu_si256((const __m256i *)Q8K(b, i)->bsums);
            UNROLL for (int r = 0; r < NR; r++) {
                const uint8_t *p = w + r * ws + i * bsz;
                __m256 mi = _mm256_cvtepi32_ps(_mm256_madd_epi16(bs, mdup[r]));
                acc[r][b] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(iacc[r][b]), _mm256_set1_ps(f16_at(p) * dx), acc[r][b]);
                acc[r][b] = _mm256_fnmadd_ps(mi, _mm256_set1_ps(f16_at(p + 2) * dx), acc[r][b]);
            }
        }
    }
    UNROLL for (int r = 0; r < NR; r++) UNROLL for (int b = 0; b < NB; b++) y[b * ldy + r] = hsum8(acc[r][b]);
}

PL_MM_BODY_T(q4_K_body, k45_body, 0)
PL_MM_BODY_T(q5_K_body, k45_body, 1)

AI void q6_K_body(const uint8_t *w, size_t ws, const uint8_t *a, size_t as, int64_t cols, float *y,
                  int64_t ldy, const int NR, const int NB) {
    const __m256i low = _mm256_set1_epi8(0x0F), three = _mm256_set1_epi8(3);
    __m256 acc[2][2];
    UNROLL for (int r = 0; r < NR; r++) UNROLL for (int b = 0; b < NB; b++) acc[r][b] = _mm256_setzero_ps();
    for (int64_t i = 0; i < cols / PL_QK_K; i++) {
        __m256i iacc[2][2];
        UNROLL for (int r = 0; r < NR; r++) UNROLL for (int b = 0; b < NB; b++) iacc[r][b] = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            __m256i q[2][4], scv[2][4];
            UNROLL for (int r = 0; r < NR; r++) {
                const pl_block_q6_K *blk = (const pl_block_q6_K *)(w + r * ws) + i;
                __m256i l0 = _mm256_loadu_si256((const __m256i *)(blk->ql + 64 * h));
                __m256i l1 = _mm256_loadu_si256((const __m256i *)(blk->ql + 64 * h + 32));
                __m256i hb = _mm256_loadu_si256((const __m256i *)(blk->qh + 32 * h));
                __m256i h0 = _mm256_slli_epi16(_mm256_and_si256(hb, three), 4);
                __m256i h1 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2), three), 4);
                __m256i h2 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 4), three), 4);
                __m256i h3 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 6), three), 4);
                q[r][0] = _mm256_or_si256(_mm256_and_si256(l0, low), h0);
                q[r][1] = _mm256_or_si256(_mm256_and_si256(l1, low), h1);
                q[r][2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), low), h2);
                q[r][3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), low), h3);
                UNROLL for (int k = 0; k < 4; k++) {
                    const int8_t *s = blk->scales + 8 * h + 2 * k;
                    scv[r][k] = _mm256_set_m128i(_mm_set1_epi16(s[1]), _mm_set1_epi16(s[0]));
                }
            }
            UNROLL for (int b = 0; b < NB; b++) {
                UNROLL for (int k = 0; k < 4; k++) {
                    __m256i xv = _mm256_loadu_si256((const __m256i *)(Q8K(b, i)->qs + 128 * h + 32 * k));
                    UNROLL for (int r = 0; r < NR; r++)
                        iacc[r][b] = _mm256_add_epi32(
                            iacc[r][b], _mm256_madd_epi16(_mm256_maddubs_epi16(q[r][k], xv), scv[r][k]));
                }
            }
        }
        UNROLL for (int b = 0; b < NB; b++) {
            const float dx = Q8K(b, i)->d;
            __m256i bs = _mm256_loadu_si256((const __m256i *)Q8K(b, i)->bsums);
            UNROLL for (int r = 0; r < NR; r++) {
                const pl_block_q6_K *blk = (const pl_block_q6_K *)(w + r * ws) + i;
                __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)blk->scales));
                __m256i corr = _mm256_slli_epi32(_mm256_madd_epi16(bs, sc16), 5); /* 32 * sc * bsum */
                __m256i s = _mm256_sub_epi32(iacc[r][b], corr);
                acc[r][b] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s),
                                            _mm256_set1_ps(f16_at((const uint8_t *)&blk->d) * dx), acc[r][b]);
            }
        }
    }
    UNROLL for (int r = 0; r < NR; r++) UNROLL for (int b = 0; b < NB; b++) y[b * ldy + r] = hsum8(acc[r][b]);
}

PL_MM_TILE_2x2(tile_q4_K, q4_K_body)
PL_MM_TILE_2x2(tile_q5_K, q5_K_body)
PL_MM_TILE_2x2(tile_q6_K, q6_K_body)

int pl_mm_kernel_avx2_kquant(pl_dtype t, pl_mm_kernel *k) {
    k->tr = 2;
    k->tb = 2;
    switch (t) {
    case PL_DT_Q4_K: k->fn = tile_q4_K; return 1;
    case PL_DT_Q5_K: k->fn = tile_q5_K; return 1;
    case PL_DT_Q6_K: k->fn = tile_q6_K; return 1;
    default: return pl_mm_kernel_avx2_wt(t, k);
    }
}
