/* kernels/attention_q — internal to attention_avx2.c and attention_avx512.c (compiled with AVX2
 * or more): the scores of a tile against a q8_0 or q4_0 key cache, with the query quantized to
 * q8_0 (pl_attn_tile.qq / qd).
 *
 * Per key and 32-element block the integer dot product of the query's and the key's quants is
 * exact (unsigned x signed byte products: vpdpbusd with AVX512-VNNI on the key biased to
 * unsigned, vpmaddubsw + vpmaddwd without; the bias times the query's block sum is subtracted),
 * then the blocks are added in order in float exactly as pl_attn_q_combine does. Both steps are
 * the same on every instruction set, so quantized scores are bitwise equal to the scalar tile's.
 *
 * Keys are the outer loop, four at a time: their blocks are loaded (and unpacked) once for every
 * query vector of the GQA group, and one reduction yields the four keys' sums of a block.
 */
#ifndef PL_KERNELS_ATTENTION_Q_H
#define PL_KERNELS_ATTENTION_Q_H

#include "kernels/attention_impl.h"
#include "kernels/quant.h"
#include "kernels/simd.h"

#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
#define PL_ATTN_Q_VNNI 1
#else
#define PL_ATTN_Q_VNNI 0
#endif

/* Lane i of the result: the sum of the 8 lanes of a_i (integers: exact in any order). */
AI __m128i isum4(__m256i a0, __m256i a1, __m256i a2, __m256i a3) {
    __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(a0, a1), _mm256_hadd_epi32(a2, a3));
    return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

/* Key block b of a row, prepared for dot(): the 32 quants as unsigned bytes u = q + off (q4_0:
 * the nibbles, off 8; q8_0 with VNNI: q ^ 0x80, off 128) or, q8_0 without VNNI, |q| in u and
 * q itself in s (off 0); *d its scale. */
AI void key_block(const void *krow, int32_t b, int Q4, __m256i *u, __m256i *s, float *d) {
    if (!Q4) {
        const pl_block_q8_0 *k = (const pl_block_q8_0 *)krow + b;
        *d = f16_at((const uint8_t *)k);
        __m256i q = _mm256_loadu_si256((const __m256i *)k->qs);
        if (PL_ATTN_Q_VNNI) *u = _mm256_xor_si256(q, _mm256_set1_epi8((char)0x80));
        else *u = _mm256_abs_epi8(q), *s = q;
        return;
    }
    const pl_block_q4_0 *k = (const pl_block_q4_0 *)krow + b;
    *d = f16_at((const uint8_t *)k);
    __m128i raw = _mm_loadu_si128((const __m128i *)k->qs), m = _mm_set1_epi8(15);
    *u = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(raw, 4), m), _mm_and_si128(raw, m));
}

/* 8 int32 lanes summing to dot(q, u) (then minus off * sum(q) gives q·k). No saturation: u <= 255
 * with VNNI's 32-bit sums; without, u <= 15 (q4_0) or |k| <= 127 against |q| <= 127. */
AI __m256i dot(__m256i q, __m256i u, __m256i s, int Q4) {
#if PL_ATTN_Q_VNNI
    (void)s;
    (void)Q4;
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, q);
#else
    __m256i p16 = _mm256_maddubs_epi16(u, Q4 ? q : _mm256_sign_epi8(q, s));
    return _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
#endif
}

/* Scores of vectors [v0, v1) against the keys each sees (nlo and nvis grow with v), four keys at
 * a time (padding keys repeat the first; computed, not stored; keys below a vector's nlo are
 * computed when a neighbour needs them and masked by the softmax). Lane i of the float
 * arithmetic is exactly pl_attn_q_combine's for key j + i. */
AI void scores_q(const pl_attn_tile *t, int32_t v0, int32_t v1, int Q4) {
    enum { NB = PL_ATTN_MAX_HEAD_DIM / PL_QK };
    const int32_t hd = t->head_dim, nb = hd / PL_QK, nk = v1 > v0 ? t->nvis[v1 - 1] : 0;
    const int32_t off = Q4 ? 8 : PL_ATTN_Q_VNNI ? 128 : 0;
    __m256i ku[4][NB], ks[4][NB];
    _Alignas(16) float dk[NB][4];
    int32_t vfirst = v0, vend = v0;
    for (int32_t j = v1 > v0 ? t->nlo[v0] : 0; j < nk; j += 4) {
        /* the vectors that may see one of keys j .. j + 3: [vfirst, vend) (nlo, nvis grow) */
        while (t->nvis[vfirst] <= j) vfirst++;
        while (vend < v1 && t->nlo[vend] < j + 4) vend++;
        for (int i = 0; i < 4; i++) {
            const void *k = t->krow[j + i < nk ? j + i : j];
            for (int32_t b = 0; b < nb; b++) key_block(k, b, Q4, &ku[i][b], &ks[i][b], &dk[b][i]);
        }
        for (int32_t v = vfirst; v < vend; v++) {
            const int8_t *q = t->qq + (size_t)v * hd;
            const float *qd = t->qd + (size_t)v * nb;
            const int32_t *qsum = t->qsum + (size_t)v * nb;
            __m128 s4 = _mm_setzero_ps();
            for (int32_t b = 0; b < nb; b++) {
                __m256i qb = _mm256_loadu_si256((const __m256i *)(q + PL_QK * b));
                __m128i is = isum4(dot(qb, ku[0][b], ks[0][b], Q4), dot(qb, ku[1][b], ks[1][b], Q4),
                                   dot(qb, ku[2][b], ks[2][b], Q4), dot(qb, ku[3][b], ks[3][b], Q4));
                is = _mm_sub_epi32(is, _mm_set1_epi32(off * qsum[b]));
                __m128 w = _mm_mul_ps(_mm_set1_ps(qd[b]), _mm_load_ps(dk[b]));
                s4 = _mm_add_ps(s4, _mm_mul_ps(_mm_cvtepi32_ps(is), w));
            }
            _Alignas(16) float r[4];
            _mm_store_ps(r, _mm_mul_ps(s4, _mm_set1_ps(t->scale)));
            for (int i = 0; i < 4 && j + i < t->nvis[v]; i++) t->s[(size_t)v * PL_ATTN_KT + j + i] = r[i];
        }
    }
}

/* The V scales of the tile's keys, widened once (pl_attn_tile.vd) instead of per chunk. */
AI void v_scales(const pl_attn_tile *t, int32_t v0, int32_t v1, int Q4) {
    if (v1 <= v0) return;
    const int32_t nb = t->head_dim / PL_QK, nk = t->nvis[v1 - 1];
    const size_t bb = Q4 ? sizeof(pl_block_q4_0) : sizeof(pl_block_q8_0);
    for (int32_t j = t->nlo[v0]; j < nk; j++)
        for (int32_t b = 0; b < nb; b++)
            t->vd[j * nb + b] = f16_at((const uint8_t *)t->vrow[j] + (size_t)b * bb);
}

#endif
