/* kernels/matmul_x16_q2_K_avx512 — VNNI tiles for q2_K's and q3_K's x16 layouts (layouts and
 * arithmetic: matmul_x16_q2_K.c, matmul_x16_q3_K.c; q3_K's is q2_K's tile with each field's
 * third bit or-ed in, int8 scales and the -4 through them). A tile is one 16-row group by up to
 * four activation rows. Per half super-block the eight chunks are loaded once and each gives
 * four vpdpbusd operands (shift by 2j, and 3); a sub-block's chain is multiplied by its scale
 * per lane (vpmulld), the mins go through vpdpwssd with the activations' 16-column sums. AMX is
 * not used for it.
 */
#include "kernels/matmul_kernels.h"
#include "kernels/quant.h"

#include "kernels/simd.h"
#include "kernels/x16_avx512.h"

#include <immintrin.h>

/* Bit c of each byte of hl (q3_K's third bits) moved to bit 2 (16-bit shifts: no byte's bit 2
 * receives its neighbour's) and or-ed into q (bits 0-1, the rest zero): ternary logic q | (h & 4). */
AI __m512i q3_K_third(__m512i q, __m512i hl, const int c) {
    const __m512i h = c < 2 ? _mm512_slli_epi16(hl, 2 - c) : c > 2 ? _mm512_srli_epi16(hl, c - 2) : hl;
    return _mm512_ternarylogic_epi32(q, h, _mm512_set1_epi8(4), 0xF8);
}

/* q2_K, or q3_K (Q3: matmul_x16_q3_K.c's layout: int8 scales, the third bits in 8 lines, the -4
 * through the scales against the 16-column sums) */
AI void q2_K_body(const uint8_t *w, const uint8_t *a, size_t as, int64_t cols, float *y,
                  int64_t ldy, const int NB, const int Q3) {
    const int64_t nsb = cols / PL_QK_K;
    const size_t gsz = Q3 ? 16 * 114 : 16 * 84, qs = Q3 ? 288 : 320;
    const int lines = Q3 ? 29 : 21;
    const __m512i three = _mm512_set1_epi8(3), low4 = _mm512_set1_epi16(0x0F);
    const pl_block_q8_K *x[4];
    __m512 acc[4];
    pl_x16_tile_rows(a, as, NB, x, acc);
    for (int64_t s = 0; s < nsb; s++) {
        const uint8_t *o = w + (size_t)s * gsz;
        __m512i S[4], M[4];
        UNROLL for (int b = 0; b < NB; b++) S[b] = M[b] = _mm512_setzero_si512();
        for (int n = 0; n < 2; n++) {
            __m512i v[8];
            UNROLL for (int c = 0; c < 8; c++) v[c] = _mm512_loadu_si512(o + qs + 64 * (8 * n + c));
            UNROLL for (int j = 0; j < 4; j++) { /* sub-blocks k = 8n + 2j, 8n + 2j + 1 */
                /* the group's 21 lines (q3_K: 29), spread over the 8 steps: t, t + 8, t + 16, ... */
                for (int l = 4 * n + j; l < lines; l += 8) pl_x16_prefetch_kq_line(o, gsz, l);
                const int k = 8 * n + 2 * j;
                __m512i G0[4], G1[4], hl = _mm512_setzero_si512();
                if (Q3) hl = _mm512_loadu_si512(o + 1312 + 64 * (4 * n + j));
                UNROLL for (int b = 0; b < NB; b++) G0[b] = G1[b] = _mm512_setzero_si512();
                UNROLL for (int c = 0; c < 8; c++) {
                    __m512i q = _mm512_and_si512(_mm512_srli_epi16(v[c], 2 * j), three);
                    if (Q3) q = q3_K_third(q, hl, c);
                    UNROLL for (int b = 0; b < NB; b++) {
                        const int8_t *xq = x[b][s].qs + 128 * n + 32 * j + 4 * c;
                        if (c < 4) G0[b] = pl_x16_dpbusd_bc(G0[b], q, xq);
                        else G1[b] = pl_x16_dpbusd_bc(G1[b], q, xq);
                    }
                }
                /* the scale bytes of sub-blocks k, k + 1 as int16 pairs per lane (q2_K: scale
                 * and min in nibbles; q3_K: int8 scales, which also weigh the -4) */
                __m512i sc0, sc1, mn;
                if (Q3) {
                    mn = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(o + 32 + 16 * k)));
                    sc0 = pl_x16_even16(mn);
                    sc1 = pl_x16_odd16(mn);
                } else {
                    const __m512i pr = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)(o + 64 + 16 * k)));
                    const __m512i sc = _mm512_and_si512(pr, low4);
                    mn = _mm512_and_si512(_mm512_srli_epi16(pr, 4), low4);
                    sc0 = _mm512_and_si512(sc, _mm512_set1_epi32(0xFFFF));
                    sc1 = _mm512_srli_epi32(sc, 16);
                }
                UNROLL for (int b = 0; b < NB; b++) {
                    S[b] = _mm512_add_epi32(S[b], _mm512_add_epi32(_mm512_mullo_epi32(G0[b], sc0),
                                                                   _mm512_mullo_epi32(G1[b], sc1)));
                    M[b] = _mm512_dpwssd_epi32(M[b], mn, _mm512_set1_epi32(*(const int32_t *)(x[b][s].bsums + k)));
                }
            }
        }
        if (!Q3) {
            UNROLL for (int b = 0; b < NB; b++) acc[b] = pl_x16_sb_fma2(acc[b], S[b], M[b], o, x[b][s].d);
            continue;
        }
        const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)o));
        UNROLL for (int b = 0; b < NB; b++) {
            const __m512i t = _mm512_sub_epi32(S[b], _mm512_slli_epi32(M[b], 2));
            acc[b] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t), _mm512_mul_ps(d, _mm512_set1_ps(x[b][s].d)), acc[b]);
        }
    }
    UNROLL for (int b = 0; b < NB; b++) _mm512_storeu_ps(y + (size_t)b * ldy, acc[b]);
}

AI void q2_K_only(const uint8_t *w, const uint8_t *a, size_t as, int64_t cols, float *y, int64_t ldy,
                  const int NB) {
    q2_K_body(w, a, as, cols, y, ldy, NB, 0);
}

AI void q3_K_only(const uint8_t *w, const uint8_t *a, size_t as, int64_t cols, float *y, int64_t ldy,
                  const int NB) {
    q2_K_body(w, a, as, cols, y, ldy, NB, 1);
}

PL_X16_KERNEL_AVX512(pl_mm_kernel_x16_q2_K_avx512, q2_K_only)
PL_X16_KERNEL_AVX512(pl_mm_kernel_x16_q3_K_avx512, q3_K_only)
