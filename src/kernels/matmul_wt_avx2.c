/* kernels/matmul_wt_avx2 — AVX2 tile kernels (2 weight rows x 2 activation rows) for the weight
 * types of issue 18, against the activations llama.cpp pairs them with:
 *
 *   q4_1, q5_1 x q8_1 : unsigned quants (0..15, 0..31) by vpmaddubsw with the int8 activations,
 *          vpmaddwd by ones, one float FMA per block with d_w d_x; the offsets' m_w s_x summed
 *          apart in a scalar and added at the end, as llama.cpp's ggml_vec_dot_q4_1_q8_1 does.
 *   q5_0 x q8_0 : quants 0..31 as above, the -16 removed as 16 * sum(x) in 16-bit lanes.
 *   iq4_nl x q8_0 : levels looked up with vpshufb (signed), then |w| by sign(x, w).
 *   q2_K, q3_K, iq4_xs x q8_K : per super-block an 8-lane int32 sum of vpmaddwd(pair sums,
 *          sub-block scales); q2_K's mins and q3_K's -4 come off through the q8_K block sums;
 *          one float FMA per super-block (two for q2_K).
 *
 * No int16 pair sum can saturate for activations in [-127, 127] (what the quantizers produce
 * from finite input): at most 2 * 127 * 127. Garbage gives other numbers, never UB.
 */
#include "kernels/matmul_kernels.h"
#include "kernels/matmul_tile.h"
#include "kernels/quant.h"

#include "kernels/q3_K_simd.h"
#include "kernels/simd.h"

#include <immintrin.h>
#include <string.h>

enum { T_Q4_1, T_Q5_1, T_Q5_0, T_IQ4_NL };

/* 32 bytes, byte j = 0xFF if bit j of the little-endian u32 at p is set, else 0. */
AI __m256i bits_to_bytes(const uint8_t *p) {
    uint32_t u;
    memcpy(&u, p, sizeof u);
    const __m256i shuf = _mm256_set_epi64x(0x0303030303030303LL, 0x0202020202020202LL,
                                           0x0101010101010101LL, 0);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)u), shuf);
    return _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
}

/* The 32 nibbles of 16 bytes in element order: low nibbles, then high nibbles. */
AI __m256i nibbles32(const uint8_t *p) {
    __m128i v = _mm_loadu_si128((const __m128i *)p);
    __m256i q = _mm256_inserti128_si256(_mm256_castsi128_si256(v), _mm_srli_epi16(v, 4), 1);
    return _mm256_and_si256(q, _mm256_set1_epi8(0x0F));
}

AI __m256i iq4_table(void) { return _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)pl_kvalues_iq4nl)); }

/* sum of w * x in int16 pairs for signed w (|w| <= 127) */
AI __m256i signed_pairs(__m256i w, __m256i x) {
    return _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
}

AI void b32_body(const uint8_t *w, size_t ws, const uint8_t *a, size_t as, int64_t cols, float *y,
                 int64_t ldy, const int NR, const int NB, const int T) {
    const size_t bsz = T == T_Q4_1 ? sizeof(pl_block_q4_1) : T == T_Q5_1 ? sizeof(pl_block_q5_1)
                     : T == T_Q5_0 ? sizeof(pl_block_q5_0) : sizeof(pl_block_iq4_nl);
    const size_t qs_off = T == T_Q4_1 ? offsetof(pl_block_q4_1, qs) : T == T_Q5_1 ? offsetof(pl_block_q5_1, qs)
                        : T == T_Q5_0 ? offsetof(pl_block_q5_0, qs) : offsetof(pl_block_iq4_nl, qs);
    const size_t qh_off = T == T_Q5_1 ? offsetof(pl_block_q5_1, qh) : offsetof(pl_block_q5_0, qh);
    const int has_m = T == T_Q4_1 || T == T_Q5_1, has_h = T == T_Q5_1 || T == T_Q5_0;
    const int64_t nblk = cols / PL_QK;
    const __m256i ones = _mm256_set1_epi16(1), sixteen = _mm256_set1_epi8(16);
    const __m256i table = iq4_table();
    __m256 acc[2][2];
    float summs[2][2];
    UNROLL for (int r = 0; r < NR; r++) UNROLL for (int b = 0; b < NB; b++) {
        acc[r][b] = _mm256_setzero_ps();
        summs[r][b] = 0.0f;
    }
    for (int64_t k = 0; k < nblk; k++) {
        __m256i q[2];
        float dw[2], mw[2];
        UNROLL for (int r = 0; r < NR; r++) {
            const uint8_t *p = w + r * ws + k * bsz;
            q[r] = nibbles32(p + qs_off);
            if (has_h) q[r] = _mm256_or_si256(q[r], _mm256_and_si256(bits_to_bytes(p + qh_off), sixteen));
            if (T == T_IQ4_NL) q[r] = _mm256_shuffle_epi8(table, q[r]);
            dw[r] = f16_at(p);
            mw[r] = has_m ? f16_at(p + 2) : 0.0f;
        }
        UNROLL for (int b = 0; b < NB; b++) {
            const uint8_t *ab = a + b * as;
            __m256i xv = _mm256_loadu_si256((const __m256i *)(ab + k * PL_QK));
            const float dx = ((const float *)(ab + cols))[k];
            __m256i off = _mm256_setzero_si256();
            if (T == T_Q5_0) off = _mm256_maddubs_epi16(sixteen, xv);
            UNROLL for (int r = 0; r < NR; r++) {
                __m256i p16 = T == T_IQ4_NL ? signed_pairs(q[r], xv) : _mm256_maddubs_epi16(q[r], xv);
                if (T == T_Q5_0) p16 = _mm256_sub_epi16(p16, off);
                __m256i s = _mm256_madd_epi16(p16, ones);
                acc[r][b] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(dw[r] * dx), acc[r][b]);
                if (has_m) summs[r][b] += mw[r] * ((const float *)(ab + cols))[nblk + k];
            }
        }
    }
    UNROLL for (int r = 0; r < NR; r++) UNROLL for (int b = 0; b < NB; b++)
        y[b * ldy + r] = hsum8(acc[r][b]) + summs[r][b];
}

#define Q8K(b, i) ((const pl_block_q8_K *)(a + (b) * as) + (i))

/* q2_K (Q3 = 0) and q3_K (Q3 = 1): 2-bit fields of qs, q3_K's 3rd bit from hmask. */
AI void k23_body(const uint8_t *w, size_t ws, const uint8_t *a, size_t as, int64_t cols, float *y,
                 int64_t ldy, const int NR, const int NB, const int Q3) {
    const size_t bsz = Q3 ? sizeof(pl_block_q3_K) : sizeof(pl_block_q2_K);
    const __m256i three = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1);
    __m256 acc[2][2];
    UNROLL for (int r = 0; r < NR; r++) UNROLL for (int b = 0; b < NB; b++) acc[r][b] = _mm256_setzero_ps();
    for (int64_t i = 0; i < cols / PL_QK_K; i++) {
        int8_t sc[2][16];   /* q2_K: 4-bit scales; q3_K: 6-bit scales - 32 */
        __m256i sc16[2];    /* q2_K: the mins; q3_K: the scales, as int16 */
        __m256i iacc[2][2];
        UNROLL for (int r = 0; r < NR; r++) {
            const uint8_t *p = w + r * ws + i * bsz;
            if (Q3) {
                const pl_block_q3_K *blk = (const pl_block_q3_K *)p;
                _mm_storeu_si128((__m128i *)sc[r], pl_q3_K_scales_v(blk->scales));
                sc16[r] = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)sc[r]));
            } else {
                const pl_block_q2_K *blk = (const pl_block_q2_K *)p;
                for (int s = 0; s < 16; s++) sc[r][s] = (int8_t)(blk->scales[s] & 0xF);
                __m128i raw = _mm_loadu_si128((const __m128i *)blk->scales);
                sc16[r] = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(raw, 4), _mm_set1_epi8(0x0F)));
            }
            UNROLL for (int b = 0; b < NB; b++) iacc[r][b] = _mm256_setzero_si256();
        }
        for (int h = 0; h < 2; h++) {
            __m256i v[2], hm[2];
            UNROLL for (int r = 0; r < NR; r++) {
                const uint8_t *p = w + r * ws + i * bsz;
                v[r] = _mm256_loadu_si256((const __m256i *)(p + (Q3 ? offsetof(pl_block_q3_K, qs) : offsetof(pl_block_q2_K, qs)) + 32 * h));
                if (Q3) hm[r] = _mm256_loadu_si256((const __m256i *)(p + offsetof(pl_block_q3_K, hmask)));
            }
            for (int j = 0; j < 4; j++) {
                __m256i q[2], scv[2];
                UNROLL for (int r = 0; r < NR; r++) {
                    q[r] = _mm256_and_si256(_mm256_srli_epi16(v[r], 2 * j), three);
                    if (Q3) {
                        __m256i hb = _mm256_and_si256(_mm256_srli_epi16(hm[r], 4 * h + j), one);
                        q[r] = _mm256_or_si256(q[r], _mm256_slli_epi16(hb, 2));
                    }
                    scv[r] = _mm256_set_m128i(_mm_set1_epi16(sc[r][8 * h + 2 * j + 1]), _mm_set1_epi16(sc[r][8 * h + 2 * j]));
                }
                UNROLL for (int b = 0; b < NB; b++) {
                    __m256i xv = _mm256_loadu_si256((const __m256i *)(Q8K(b, i)->qs + 128 * h + 32 * j));
                    UNROLL for (int r = 0; r < NR; r++)
                        iacc[r][b] = _mm256_add_epi32(iacc[r][b], _mm256_madd_epi16(_mm256_maddubs_epi16(q[r], xv), scv[r]));
                }
            }
        }
        UNROLL for (int b = 0; b < NB; b++) {
            const float dx = Q8K(b, i)->d;
            __m256i bs = _mm256_loadu_si256((const __m256i *)Q8K(b, i)->bsums);
            UNROLL for (int r = 0; r < NR; r++) {
                const uint8_t *p = w + r * ws + i * bsz;
                __m256i corr = _mm256_madd_epi16(bs, sc16[r]);
                if (Q3) { /* quants stored + 4: remove 4 * sum(sc * bsum) */
                    __m256i s = _mm256_sub_epi32(iacc[r][b], _mm256_slli_epi32(corr, 2));
                    float d = f16_at(p + offsetof(pl_block_q3_K, d));
                    acc[r][b] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(d * dx), acc[r][b]);
                } else {
                    float d = f16_at(p + offsetof(pl_block_q2_K, d)), dmin = f16_at(p + offsetof(pl_block_q2_K, dmin));
                    acc[r][b] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(iacc[r][b]), _mm256_set1_ps(d * dx), acc[r][b]);
                    acc[r][b] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(corr), _mm256_set1_ps(dmin * dx), acc[r][b]);
                }
            }
        }
    }
    UNROLL for (int r = 0; r < NR; r++) UNROLL for (int b = 0; b < NB; b++) y[b * ldy + r] = hsum8(acc[r][b]);
}

AI void iq4_xs_body(const uint8_t *w, size_t ws, const uint8_t *a, size_t as, int64_t cols, float *y,
                    int64_t ldy, const int NR, const int NB) {
    const __m256i table = iq4_table();
    __m256 acc[2][2];
    UNROLL for (int r = 0; r < NR; r++) UNROLL for (int b = 0; b < NB; b++) acc[r][b] = _mm256_setzero_ps();
    for (int64_t i = 0; i < cols / PL_QK_K; i++) {
        __m256i iacc[2][2];
        UNROLL for (int r = 0; r < NR; r++) UNROLL for (int b = 0; b < NB; b++) iacc[r][b] = _mm256_setzero_si256();
        for (int ib = 0; ib < 8; ib++) {
            __m256i q[2], scv[2];
            UNROLL for (int r = 0; r < NR; r++) {
                const pl_block_iq4_xs *blk = (const pl_block_iq4_xs *)(w + r * ws) + i;
                q[r] = _mm256_shuffle_epi8(table, nibbles32(blk->qs + 16 * ib));
                scv[r] = _mm256_set1_epi16((short)pl_iq4_xs_scale(blk, ib));
            }
            UNROLL for (int b = 0; b < NB; b++) {
                __m256i xv = _mm256_loadu_si256((const __m256i *)(Q8K(b, i)->qs + 32 * ib));
                UNROLL for (int r = 0; r < NR; r++)
                    iacc[r][b] = _mm256_add_epi32(iacc[r][b], _mm256_madd_epi16(signed_pairs(q[r], xv), scv[r]));
            }
        }
        UNROLL for (int b = 0; b < NB; b++) {
            const float dx = Q8K(b, i)->d;
            UNROLL for (int r = 0; r < NR; r++) {
                const pl_block_iq4_xs *blk = (const pl_block_iq4_xs *)(w + r * ws) + i;
                float d = f16_at((const uint8_t *)&blk->d);
                acc[r][b] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(iacc[r][b]), _mm256_set1_ps(d * dx), acc[r][b]);
            }
        }
    }
    UNROLL for (int r = 0; r < NR; r++) UNROLL for (int b = 0; b < NB; b++) y[b * ldy + r] = hsum8(acc[r][b]);
}

#define PL_WT_KERNEL pl_mm_kernel_avx2_wt
#define PL_WT_B32_TILE PL_MM_TILE_2x2
#define PL_WT_B32_TR 2
#define PL_WT_B32_TB 2
#define PL_WT_K_TILE PL_MM_TILE_2x2
#define PL_WT_K_TR 2
#define PL_WT_K_TB 2
#include "kernels/matmul_wt_tiles.h"
