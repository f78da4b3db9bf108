/* kernels/attention_q — internal to attention_avx2.c and attention_avx512.c (compiled with AVX2
 * or more): the scores of a tile against a q8_0 or q4_0 key cache, with the query quantized to
 * q8_0 (pl_attn_tile.qq / qd).
 *
 * Per key and 32-element block the integer dot product of the query's and the key's quants is
 * exact (vpsignb + vpmaddubsw + vpmaddwd: |products| <= 127 * 127, pairs <= 32258, no saturation;
 * q4_0 keys are unpacked to int8 in -8..7 first), then pl_attn_q_combine adds the blocks in
 * order in float. Both steps are the same on every instruction set, so quantized scores are
 * bitwise equal to the scalar tile's.
 */
#ifndef PL_KERNELS_ATTENTION_Q_H
#define PL_KERNELS_ATTENTION_Q_H

#include "kernels/attention_impl.h"
#include "kernels/quant.h"
#include "kernels/simd.h"

AI int32_t isum_i8x32(__m256i q, __m256i k) {
    __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(q, q), _mm256_sign_epi8(k, q));
    __m256i p32 = _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(p32), _mm256_extracti128_si256(p32, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
    return _mm_cvtsi128_si32(s);
}

/* The 32 quants of key block b as int8 (q4_0: low nibbles are elements 0..15, high 16..31). */
AI __m256i key_block(const void *krow, int32_t b, int Q4) {
    if (!Q4) {
        const pl_block_q8_0 *k = (const pl_block_q8_0 *)krow + b;
        return _mm256_loadu_si256((const __m256i *)k->qs);
    }
    const pl_block_q4_0 *k = (const pl_block_q4_0 *)krow + b;
    __m128i raw = _mm_loadu_si128((const __m128i *)k->qs), m = _mm_set1_epi8(15);
    __m256i x = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(raw, 4), m), _mm_and_si128(raw, m));
    return _mm256_sub_epi8(x, _mm256_set1_epi8(8));
}

/* Scores of vectors v0.. against the keys each sees. */
AI void scores_q(const pl_attn_tile *t, int32_t v0, int Q4) {
    const int32_t hd = t->head_dim, nb = hd / PL_QK;
    const size_t bb = Q4 ? sizeof(pl_block_q4_0) : sizeof(pl_block_q8_0);
    int32_t isum[PL_ATTN_MAX_HEAD_DIM / PL_QK];
    for (int32_t v = v0; v < t->nq; v++) {
        const int8_t *q = t->qq + (size_t)v * hd;
        const float *qd = t->qd + (size_t)v * nb;
        for (int32_t j = 0; j < t->nvis[v]; j++) {
            for (int32_t b = 0; b < nb; b++)
                isum[b] = isum_i8x32(_mm256_loadu_si256((const __m256i *)(q + PL_QK * b)),
                                     key_block(t->krow[j], b, Q4));
            t->s[(size_t)v * PL_ATTN_KT + j] =
                pl_attn_q_combine(isum, qd, t->krow[j], nb, bb) * t->scale;
        }
    }
}

#endif
