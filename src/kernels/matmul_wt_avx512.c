/* kernels/matmul_wt_avx512 — AVX-512 (BW, VNNI) tile kernels for the weight types of issue 18.
 *
 *   q4_1, q5_1 x q8_1, q5_0, iq4_nl x q8_0 : two blocks per 512-bit vector, as q8_0 / q4_0 in
 *          matmul_avx512.c: weights made unsigned (q4_1 0..15, q5_x 0..31, iq4_nl level + 128),
 *          vpdpbusd with the int8 activations on an accumulator seeded with -offset * sum(x)
 *          (offset 0, 16, 128), one float FMA per two blocks; q4_1 / q5_1's m_w s_x summed
 *          apart (even and odd blocks in two lanes of one FMA chain) and added at the end.
 *   q2_K, q3_K x q8_K : two 32-quant groups per vector (2-bit fields of the same qs bytes at two
 *          shifts), vpmaddubsw then vpdpwssd with the sub-block scales spread over the lanes;
 *          mins / q3_K's -4 through the q8_K block sums; one float FMA per super-block (two
 *          for q2_K's mins).
 *   iq4_xs x q8_K : two sub-blocks per vector, levels by vpshufb, |w| times x with w's sign
 *          (masked negate), vpdpwssd with the scales.
 *
 * Every value's operations are fixed by cols and the data, not by the tile shape.
 */
#include "kernels/matmul_kernels.h"
#include "kernels/matmul_tile.h"
#include "kernels/quant.h"

#include "kernels/q3_K_simd.h"
#include "kernels/matmul_avx512.h"
#include "kernels/simd.h"

#include <immintrin.h>
#include <string.h>

enum { T_Q4_1, T_Q5_1, T_Q5_0, T_IQ4_NL };

/* 32 bytes, byte j = 0xFF if bit j of the little-endian u32 at p is set, else 0. */
AI __m256i bits_to_bytes(const uint8_t *p) {
    uint32_t u;
    memcpy(&u, p, sizeof u);
    return _mm256_movm_epi8((__mmask32)u);
}

/* The 32 nibbles of 16 bytes in element order: low nibbles, then high nibbles. */
AI __m256i nibbles32(const uint8_t *p) {
    __m128i v = _mm_loadu_si128((const __m128i *)p);
    __m256i q = _mm256_inserti128_si256(_mm256_castsi128_si256(v), _mm_srli_epi16(v, 4), 1);
    return _mm256_and_si256(q, _mm256_set1_epi8(0x0F));
}

/* The unsigned weight bytes of one block (element order). */
AI __m256i b32_quants(const uint8_t *p, const int T) {
    const size_t qs_off = T == T_Q4_1 ? offsetof(pl_block_q4_1, qs) : T == T_Q5_1 ? offsetof(pl_block_q5_1, qs)
                        : T == T_Q5_0 ? offsetof(pl_block_q5_0, qs) : offsetof(pl_block_iq4_nl, qs);
    const size_t qh_off = T == T_Q5_1 ? offsetof(pl_block_q5_1, qh) : offsetof(pl_block_q5_0, qh);
    __m256i q = nibbles32(p + qs_off);
    if (T == T_Q5_1 || T == T_Q5_0)
        q = _mm256_or_si256(q, _mm256_and_si256(bits_to_bytes(p + qh_off), _mm256_set1_epi8(16)));
    if (T == T_IQ4_NL) {
        const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)pl_kvalues_iq4nl));
        q = _mm256_xor_si256(_mm256_shuffle_epi8(table, q), _mm256_set1_epi8((char)0x80));
    }
    return q;
}

/* One step over two blocks (or the lone last one): wq[r] unsigned weight bytes, dw[r] weight
 * scales per lane, x from XLOAD, activation scales per lane from DXLOAD. */
#define B32_STEP(XLOAD, DXLOAD)                                                                   \
    UNROLL for (int b = 0; b < NB; b++) {                                                         \
        const uint8_t *ab = a + b * as;                                                           \
        __m512i xv = XLOAD;                                                                       \
        __m512i seed = _mm512_setzero_si512();                                                    \
        if (T == T_Q5_0 || T == T_IQ4_NL)                                                         \
            seed = _mm512_sub_epi32(seed, _mm512_dpbusd_epi32(_mm512_setzero_si512(), off, xv));  \
        __m512 dx = DXLOAD;                                                                       \
        UNROLL for (int r = 0; r < NR; r++) {                                                     \
            __m512i s = _mm512_dpbusd_epi32(seed, wq[r], xv);                                     \
            acc[r][b] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dw[r], dx), acc[r][b]); \
        }                                                                                         \
    }

AI void b32_body(const uint8_t *w, size_t ws, const uint8_t *a, size_t as, int64_t cols, float *y,
                 int64_t ldy, const int NR, const int NB, const int T) {
    const size_t bsz = T == T_Q4_1 ? sizeof(pl_block_q4_1) : T == T_Q5_1 ? sizeof(pl_block_q5_1)
                     : T == T_Q5_0 ? sizeof(pl_block_q5_0) : sizeof(pl_block_iq4_nl);
    const int has_m = T == T_Q4_1 || T == T_Q5_1;
    const int64_t nblk = cols / PL_QK;
    const __m512i off = _mm512_set1_epi8(T == T_Q5_0 ? 16 : (char)0x80);
    const __m512i idx = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    __m512 acc[4][4];
    __m128 accm[4][4]; /* m_w s_x of even blocks in lane 0, odd ones in lane 1 */
    UNROLL for (int r = 0; r < NR; r++) UNROLL for (int b = 0; b < NB; b++) {
        acc[r][b] = _mm512_setzero_ps();
        accm[r][b] = _mm_setzero_ps();
    }
    int64_t k = 0;
    for (; k + 2 <= nblk; k += 2) {
        __m512i wq[4];
        __m512 dw[4];
        UNROLL for (int r = 0; r < NR; r++) {
            const uint8_t *p = w + r * ws + k * bsz;
            wq[r] = join(b32_quants(p, T), b32_quants(p + bsz, T));
            dw[r] = lanes_of_two_f16(idx, p, p + bsz);
        }
        B32_STEP(_mm512_loadu_si512(ab + k * PL_QK), lanes_of_two(idx, (const float *)(ab + cols) + k))
        if (has_m) {
            __m128 mw[4];
            UNROLL for (int r = 0; r < NR; r++) {
                const uint8_t *p = w + r * ws + k * bsz;
                pl_f16 h[2];
                memcpy(&h[0], p + 2, 2);
                memcpy(&h[1], p + bsz + 2, 2);
                mw[r] = _mm_cvtph_ps(_mm_cvtsi32_si128((int)((uint32_t)h[0] | ((uint32_t)h[1] << 16))));
            }
            UNROLL for (int b = 0; b < NB; b++) {
                __m128 sx = _mm_castsi128_ps(_mm_loadl_epi64(
                    (const __m128i *)((const float *)(a + b * as + cols) + nblk + k))); /* unaligned */
                UNROLL for (int r = 0; r < NR; r++) accm[r][b] = _mm_fmadd_ps(mw[r], sx, accm[r][b]);
            }
        }
    }
    if (k < nblk) { /* lone last block */
        __m512i wq[4];
        __m512 dw[4];
        UNROLL for (int r = 0; r < NR; r++) {
            const uint8_t *p = w + r * ws + k * bsz;
            wq[r] = zext256(b32_quants(p, T));
            dw[r] = _mm512_set1_ps(f16_at(p));
        }
        B32_STEP(zext256(_mm256_loadu_si256((const __m256i *)(ab + k * PL_QK))),
                 _mm512_set1_ps(((const float *)(ab + cols))[k]))
        if (has_m)
            UNROLL for (int b = 0; b < NB; b++) {
                __m128 sx = _mm_set_ss(((const float *)(a + b * as + cols))[nblk + k]);
                UNROLL for (int r = 0; r < NR; r++)
                    accm[r][b] = _mm_fmadd_ps(_mm_set_ss(f16_at(w + r * ws + k * bsz + 2)), sx, accm[r][b]);
            }
    }
    UNROLL for (int r = 0; r < NR; r++) UNROLL for (int b = 0; b < NB; b++)
        y[b * ldy + r] = _mm512_reduce_add_ps(acc[r][b]) +
                         (_mm_cvtss_f32(accm[r][b]) + _mm_cvtss_f32(_mm_movehdup_ps(accm[r][b])));
}

#define Q8K(b, i) ((const pl_block_q8_K *)(a + (b) * as) + (i))

/* int16 lane -> which of the 4 sub-blocks of 16 a 64-quant vector spans */
static const int16_t sb_idx[32] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                   2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3};

/* q2_K (Q3 = 0) and q3_K (Q3 = 1). */
AI void k23_body(const uint8_t *w, size_t ws, const uint8_t *a, size_t as, int64_t cols, float *y,
                 int64_t ldy, const int NR, const int NB, const int Q3) {
    const size_t bsz = Q3 ? sizeof(pl_block_q3_K) : sizeof(pl_block_q2_K);
    const size_t qs_off = Q3 ? offsetof(pl_block_q3_K, qs) : offsetof(pl_block_q2_K, qs);
    const __m512i three = _mm512_set1_epi8(3), one = _mm512_set1_epi8(1);
    const __m512i idxb = _mm512_loadu_si512(sb_idx);
    __m512 acc[4][4];
    UNROLL for (int r = 0; r < NR; r++) UNROLL for (int b = 0; b < NB; b++) acc[r][b] = _mm512_setzero_ps();
    for (int64_t i = 0; i < cols / PL_QK_K; i++) {
        __m512i sc16[4];  /* the 16 scales (q3_K: - 32) as int16 in the low half */
        __m256i corr16[4]; /* what multiplies the bsums: q2_K's mins, q3_K's scales */
        __m512i iacc[4][4];
        UNROLL for (int r = 0; r < NR; r++) {
            const uint8_t *p = w + r * ws + i * bsz;
            if (Q3) {
                corr16[r] = _mm256_cvtepi8_epi16(pl_q3_K_scales_v(((const pl_block_q3_K *)p)->scales));
                sc16[r] = _mm512_castsi256_si512(corr16[r]);
            } else {
                __m128i raw = _mm_loadu_si128((const __m128i *)((const pl_block_q2_K *)p)->scales);
                sc16[r] = _mm512_castsi256_si512(_mm256_cvtepu8_epi16(_mm_and_si128(raw, _mm_set1_epi8(0x0F))));
                corr16[r] = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(raw, 4), _mm_set1_epi8(0x0F)));
            }
            UNROLL for (int b = 0; b < NB; b++) iacc[r][b] = _mm512_setzero_si512();
        }
        UNROLL for (int h = 0; h < 2; h++) {
            UNROLL for (int j = 0; j < 4; j += 2) { /* groups j and j + 1: 64 quants */
                const __m512i idx = _mm512_add_epi16(idxb, _mm512_set1_epi16((short)(8 * h + 2 * j)));
                __m512i q[4], scv[4];
                UNROLL for (int r = 0; r < NR; r++) {
                    const uint8_t *p = w + r * ws + i * bsz;
                    __m256i v = _mm256_loadu_si256((const __m256i *)(p + qs_off + 32 * h));
                    q[r] = _mm512_and_si512(join(_mm256_srli_epi16(v, 2 * j), _mm256_srli_epi16(v, 2 * j + 2)), three);
                    if (Q3) {
                        __m256i hm = _mm256_loadu_si256((const __m256i *)(p + offsetof(pl_block_q3_K, hmask)));
                        __m512i hb = _mm512_and_si512(join(_mm256_srli_epi16(hm, 4 * h + j),
                                                           _mm256_srli_epi16(hm, 4 * h + j + 1)), one);
                        q[r] = _mm512_or_si512(q[r], _mm512_slli_epi16(hb, 2));
                    }
                    scv[r] = _mm512_permutexvar_epi16(idx, sc16[r]);
                }
                UNROLL for (int b = 0; b < NB; b++) {
                    __m512i xv = _mm512_loadu_si512(Q8K(b, i)->qs + 128 * h + 32 * j);
                    UNROLL for (int r = 0; r < NR; r++)
                        iacc[r][b] = _mm512_dpwssd_epi32(iacc[r][b], _mm512_maddubs_epi16(q[r], xv), scv[r]);
                }
            }
        }
        UNROLL for (int b = 0; b < NB; b++) {
            const float dx = Q8K(b, i)->d;
            __m256i bs = _mm256_loadu_si256((const __m256i *)Q8K(b, i)->bsums);
            UNROLL for (int r = 0; r < NR; r++) {
                const uint8_t *p = w + r * ws + i * bsz;
                __m512i corr = zext256(_mm256_madd_epi16(bs, corr16[r]));
                if (Q3) { /* quants stored + 4: remove 4 * sum(sc * bsum) */
                    __m512i s = _mm512_sub_epi32(iacc[r][b], _mm512_slli_epi32(corr, 2));
                    float d = f16_at(p + offsetof(pl_block_q3_K, d));
                    acc[r][b] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_set1_ps(d * dx), acc[r][b]);
                } else {
                    float d = f16_at(p + offsetof(pl_block_q2_K, d)), dmin = f16_at(p + offsetof(pl_block_q2_K, dmin));
                    acc[r][b] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(iacc[r][b]), _mm512_set1_ps(d * dx), acc[r][b]);
                    acc[r][b] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(corr), _mm512_set1_ps(dmin * dx), acc[r][b]);
                }
            }
        }
    }
    UNROLL for (int r = 0; r < NR; r++) UNROLL for (int b = 0; b < NB; b++) y[b * ldy + r] = _mm512_reduce_add_ps(acc[r][b]);
}

AI void iq4_xs_body(const uint8_t *w, size_t ws, const uint8_t *a, size_t as, int64_t cols, float *y,
                    int64_t ldy, const int NR, const int NB) {
    const __m512i table = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)pl_kvalues_iq4nl));
    __m512 acc[4][4];
    UNROLL for (int r = 0; r < NR; r++) UNROLL for (int b = 0; b < NB; b++) acc[r][b] = _mm512_setzero_ps();
    for (int64_t i = 0; i < cols / PL_QK_K; i++) {
        __m512i iacc[4][4];
        UNROLL for (int r = 0; r < NR; r++) UNROLL for (int b = 0; b < NB; b++) iacc[r][b] = _mm512_setzero_si512();
        UNROLL for (int ib = 0; ib < 8; ib += 2) {
            __m512i qa[4], scv[4];
            __mmask64 neg[4];
            UNROLL for (int r = 0; r < NR; r++) {
                const pl_block_iq4_xs *blk = (const pl_block_iq4_xs *)(w + r * ws) + i;
                __m512i q = _mm512_shuffle_epi8(table, join(nibbles32(blk->qs + 16 * ib), nibbles32(blk->qs + 16 * ib + 16)));
                neg[r] = _mm512_movepi8_mask(q);
                qa[r] = _mm512_abs_epi8(q);
                scv[r] = join(_mm256_set1_epi16((short)pl_iq4_xs_scale(blk, ib)),
                              _mm256_set1_epi16((short)pl_iq4_xs_scale(blk, ib + 1)));
            }
            UNROLL for (int b = 0; b < NB; b++) {
                __m512i xv = _mm512_loadu_si512(Q8K(b, i)->qs + 32 * ib);
                UNROLL for (int r = 0; r < NR; r++) {
                    __m512i xs = _mm512_mask_sub_epi8(xv, neg[r], _mm512_setzero_si512(), xv);
                    iacc[r][b] = _mm512_dpwssd_epi32(iacc[r][b], _mm512_maddubs_epi16(qa[r], xs), scv[r]);
                }
            }
        }
        UNROLL for (int b = 0; b < NB; b++) {
            const float dx = Q8K(b, i)->d;
            UNROLL for (int r = 0; r < NR; r++) {
                const pl_block_iq4_xs *blk = (const pl_block_iq4_xs *)(w + r * ws) + i;
                float d = f16_at((const uint8_t *)&blk->d);
                acc[r][b] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(iacc[r][b]), _mm512_set1_ps(d * dx), acc[r][b]);
            }
        }
    }
    UNROLL for (int r = 0; r < NR; r++) UNROLL for (int b = 0; b < NB; b++) y[b * ldy + r] = _mm512_reduce_add_ps(acc[r][b]);
}

#define PL_WT_KERNEL pl_mm_kernel_avx512_wt
#define PL_WT_B32_TILE PL_MM_TILE_4x3
#define PL_WT_B32_TR 4
#define PL_WT_B32_TB 3
#define PL_WT_K_TILE PL_MM_TILE_2x4
#define PL_WT_K_TR 2
#define PL_WT_K_TB 4
#include "kernels/matmul_wt_tiles.h"
