/* kernels/matmul_x16_q2_K_avx512 — VNNI tiles for q2_K's x16 layout (layout and arithmetic:
 * matmul_x16_q2_K.c). A tile is one 16-row group by up to four activation rows. Per half
 * super-block the eight chunks are loaded once and each gives four vpdpbusd operands (shift by
 * 2j, and 3); a sub-block's chain is multiplied by its scale per lane (vpmulld), the mins go
 * through vpdpwssd with the activations' 16-column sums. AMX is not used for it.
 */
#include "kernels/matmul_kernels.h"
#include "kernels/quant.h"

#include "kernels/simd.h"
#include "kernels/x16_avx512.h"

#include <immintrin.h>

AI void q2_K_body(const uint8_t *w, const uint8_t *a, size_t as, int64_t cols, float *y,
                  int64_t ldy, const int NB) {
    const int64_t nsb = cols / PL_QK_K;
    const __m512i three = _mm512_set1_epi8(3), low4 = _mm512_set1_epi16(0x0F);
    const pl_block_q8_K *x[4];
    __m512 acc[4];
    pl_x16_tile_rows(a, as, NB, x, acc);
    for (int64_t s = 0; s < nsb; s++) {
        const uint8_t *o = w + (size_t)s * 16 * 84;
        __m512i S[4], M[4];
        UNROLL for (int b = 0; b < NB; b++) S[b] = M[b] = _mm512_setzero_si512();
        for (int n = 0; n < 2; n++) {
            __m512i v[8];
            UNROLL for (int c = 0; c < 8; c++) v[c] = _mm512_loadu_si512(o + 320 + 64 * (8 * n + c));
            UNROLL for (int j = 0; j < 4; j++) { /* sub-blocks k = 8n + 2j, 8n + 2j + 1 */
                /* the group's 21 lines, spread over the 8 steps: t, t + 8, t + 16 */
                for (int l = 4 * n + j; l < 21; l += 8) pl_x16_prefetch_kq_line(o, 16 * 84, l);
                const int k = 8 * n + 2 * j;
                __m512i G0[4], G1[4];
                UNROLL for (int b = 0; b < NB; b++) G0[b] = G1[b] = _mm512_setzero_si512();
                UNROLL for (int c = 0; c < 8; c++) {
                    const __m512i q = _mm512_and_si512(_mm512_srli_epi16(v[c], 2 * j), three);
                    UNROLL for (int b = 0; b < NB; b++) {
                        const int8_t *xq = x[b][s].qs + 128 * n + 32 * j + 4 * c;
                        if (c < 4) G0[b] = pl_x16_dpbusd_bc(G0[b], q, xq);
                        else G1[b] = pl_x16_dpbusd_bc(G1[b], q, xq);
                    }
                }
                /* the scale bytes of sub-blocks k, k + 1 as int16 pairs per lane */
                const __m512i pr = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)(o + 64 + 16 * k)));
                const __m512i sc = _mm512_and_si512(pr, low4), mn = _mm512_and_si512(_mm512_srli_epi16(pr, 4), low4);
                const __m512i sc0 = _mm512_and_si512(sc, _mm512_set1_epi32(0xFFFF)), sc1 = _mm512_srli_epi32(sc, 16);
                UNROLL for (int b = 0; b < NB; b++) {
                    S[b] = _mm512_add_epi32(S[b], _mm512_add_epi32(_mm512_mullo_epi32(G0[b], sc0),
                                                                   _mm512_mullo_epi32(G1[b], sc1)));
                    M[b] = _mm512_dpwssd_epi32(M[b], mn, _mm512_set1_epi32(*(const int32_t *)(x[b][s].bsums + k)));
                }
            }
        }
        UNROLL for (int b = 0; b < NB; b++) acc[b] = pl_x16_sb_fma2(acc[b], S[b], M[b], o, x[b][s].d);
    }
    UNROLL for (int b = 0; b < NB; b++) _mm512_storeu_ps(y + (size_t)b * ldy, acc[b]);
}

PL_X16_KERNEL_AVX512(pl_mm_kernel_x16_q2_K_avx512, q2_K_body)
