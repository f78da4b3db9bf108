/* kernels/x16_mxfp4_ymm — the 256-bit tiles of mxfp4's x16 layout (issue 34; layout and
 * arithmetic: matmul_x16_mxfp4.c), one skeleton for two kernel levels: included once by
 * matmul_x16_mxfp4_avx2.c with X16_VNNI 0 and once by matmul_x16_mxfp4_avxvnni.c with X16_VNNI 1,
 * each defining X16_KERNEL (the pl_mm_kernel chooser it exports).
 *
 * A 64-byte chunk of 16 lanes is two ymm halves of 8 outputs; a tile is one 16-row group by up
 * to four activation rows: one or two half after half inside each block, three or four one
 * half's blocks and then the other's (ymx_half: one chain per row, so that every unpacked chunk
 * serves four rows: one thread B=32 95-116 -> 168-186 GOP/s, gpt-oss-20b's layers' prefill at
 * avx2 162-196 -> 244-254 tok/s on a Zen 4). The nibbles are looked up + 12 (vpshufb) into two
 * operands (low nibbles: columns 4j.., high: 16 + 4j..), one integer chain each per activation
 * row (with one or two rows):
 *  - AVX-VNNI: vpdpbusd with the activation's 4 bytes broadcast, the low chain from the seed;
 *  - AVX2: vpmaddubsw into int16 pair sums (4 chunks: |sum| <= 4 x 2 x 24 x 128 = 24576, no
 *    saturation), widened by vpmaddwd against ones and added to the seed.
 * Both are the exact integer sum, and the float step is the scalar tile's, so the bits are too.
 */
#ifndef PL_KERNELS_X16_MXFP4_YMM_H
#define PL_KERNELS_X16_MXFP4_YMM_H

#include "kernels/matmul_kernels.h"
#include "kernels/matmul_tile.h"
#include "kernels/quant.h"

#include "kernels/simd.h"

#include <immintrin.h>

enum { YMX_BLK = 16 * sizeof(pl_block_mxfp4) };

/* 8 rows' E8M0 exponents at p as floats (pl_e8m0_half). */
AI __m256 ymx_e8m0_half8(const uint8_t *p) {
    const __m256i e = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p));
    const __m256i n = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
    const __m256i s = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
    return _mm256_castsi256_ps(_mm256_blendv_epi8(n, s, _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e)));
}

/* The 16 levels + 12 (0..24) in both lanes, for vpshufb. */
AI __m256i ymx_lut(void) {
    return _mm256_broadcastsi128_si256(_mm_add_epi8(_mm_loadu_si128((const __m128i *)pl_kvalues_mxfp4), _mm_set1_epi8(12)));
}

/* The chunk half at p as two operands: its low and high nibbles' levels + 12. */
AI void ymx_unpack(const uint8_t *p, __m256i lut, __m256i *w0, __m256i *w1) {
    const __m256i m4 = _mm256_set1_epi8(15), v = _mm256_loadu_si256((const __m256i *)p);
    *w0 = _mm256_shuffle_epi8(lut, _mm256_and_si256(v, m4));
    *w1 = _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
}

/* acc + w . the 4 activation bytes x: VNNI's int32 chain, AVX2's int16 pair sums */
AI __m256i ymx_dot(__m256i acc, __m256i w, int32_t x) {
#if X16_VNNI
    return _mm256_dpbusd_avx_epi32(acc, w, _mm256_set1_epi32(x));
#else
    return _mm256_add_epi16(acc, _mm256_maddubs_epi16(w, _mm256_set1_epi32(x)));
#endif
}

/* Half h (rows 8h..8h + 7) of every block against 3-4 activation rows: one chain per row, the low
 * and high nibbles' products in it (AVX2: int16 pair sums, widened after 2 of the 4 chunks,
 * at most 4 x 2 x 24 x 127 = 24384 each time), so that the chains, the half's float
 * accumulators and the unpacked chunk fit 16 registers and each unpacked chunk serves every
 * row. */
AI void ymx_half(const uint8_t *w, const uint8_t *a, size_t as, int64_t cols, int h, const float *const *dx,
                 const int32_t *const *seed, __m256 *acc, const int NB) {
    const int64_t nblk = cols / PL_QK;
    const __m256i lut = ymx_lut();
    for (int64_t k = 0; k < nblk; k++) {
        const uint8_t *wb = w + (size_t)k * YMX_BLK;
        __m256i c[4], t[4];
        UNROLL for (int b = 0; b < NB; b++) c[b] = X16_VNNI ? _mm256_set1_epi32(seed[b][k]) : _mm256_setzero_si256();
        UNROLL for (int j = 0; j < 4; j++) {
            __m256i w0, w1;
            ymx_unpack(wb + 16 + 64 * j + 32 * h, lut, &w0, &w1);
            UNROLL for (int b = 0; b < NB; b++) {
                const int32_t *xq = (const int32_t *)(a + (size_t)b * as + k * PL_QK);
                c[b] = ymx_dot(ymx_dot(c[b], w0, xq[j]), w1, xq[j + 4]);
                /* the chain as written (GCC would compute the products first and spill them) */
                __asm__("" : "+x"(c[b]));
            }
#if !X16_VNNI
            if (j == 1) /* widen before a third chunk could overflow the int16 sums */
                UNROLL for (int b = 0; b < NB; b++) {
                    t[b] = _mm256_madd_epi16(c[b], _mm256_set1_epi16(1));
                    c[b] = _mm256_setzero_si256();
                }
#endif
        }
        const __m256 dw = ymx_e8m0_half8(wb + 8 * h);
        UNROLL for (int b = 0; b < NB; b++) {
#if X16_VNNI
            const __m256i isum = c[b];
            (void)t;
#else
            const __m256i isum = _mm256_add_epi32(_mm256_set1_epi32(seed[b][k]),
                                                  _mm256_add_epi32(t[b], _mm256_madd_epi16(c[b], _mm256_set1_epi16(1))));
#endif
            acc[b] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(dw, _mm256_set1_ps(dx[b][k])), acc[b]);
        }
    }
}

/* One 16-row group by NB (1-4) activation rows. One or two (decode) take a block's halves
 * together, two chains per row (low and high nibbles); more take ymx_half twice. */
AI void ymx_body(const uint8_t *w, const uint8_t *a, size_t as, int64_t cols, float *y, int64_t ldy,
                 const int NB, const int unused) {
    (void)unused;
    PL_X16_YMM_Q8_0_ROWS(a, as, cols, NB, dx, seed, acc);
    if (NB > 2) {
        UNROLL for (int h = 0; h < 2; h++) ymx_half(w, a, as, cols, h, dx, seed, acc[h], NB);
    } else {
        const int64_t nblk = cols / PL_QK;
        const __m256i lut = ymx_lut();
#if !X16_VNNI
        const __m256i ones = _mm256_set1_epi16(1);
#endif
        for (int64_t k = 0; k < nblk; k++) {
            const uint8_t *wb = w + (size_t)k * YMX_BLK;
            UNROLL for (int h = 0; h < 2; h++) {
                __m256i s0[2], s1[2];
                UNROLL for (int b = 0; b < NB; b++) {
#if X16_VNNI
                    s0[b] = _mm256_set1_epi32(seed[b][k]);
#else
                    s0[b] = _mm256_setzero_si256();
#endif
                    s1[b] = _mm256_setzero_si256();
                }
                UNROLL for (int j = 0; j < 4; j++) {
                    /* decode streams the weights: the block two ahead into L2 (5 lines) */
                    if (NB == 1 && h == 0)
                        for (int l = j; 64 * (size_t)l < YMX_BLK; l += 4)
                            _mm_prefetch((const char *)wb + 2 * YMX_BLK + 64 * l, _MM_HINT_T1);
                    __m256i w0, w1;
                    ymx_unpack(wb + 16 + 64 * j + 32 * h, lut, &w0, &w1);
                    UNROLL for (int b = 0; b < NB; b++) {
                        const int32_t *xq = (const int32_t *)(a + (size_t)b * as + k * PL_QK);
                        s0[b] = ymx_dot(s0[b], w0, xq[j]);
                        s1[b] = ymx_dot(s1[b], w1, xq[j + 4]);
                    }
                }
                const __m256 dw = ymx_e8m0_half8(wb + 8 * h);
                UNROLL for (int b = 0; b < NB; b++) {
#if X16_VNNI
                    const __m256i isum = _mm256_add_epi32(s0[b], s1[b]);
#else
                    const __m256i isum = _mm256_add_epi32(
                        _mm256_set1_epi32(seed[b][k]),
                        _mm256_add_epi32(_mm256_madd_epi16(s0[b], ones), _mm256_madd_epi16(s1[b], ones)));
#endif
                    acc[h][b] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(dw, _mm256_set1_ps(dx[b][k])),
                                                acc[h][b]);
                }
            }
        }
    }
    UNROLL for (int h = 0; h < 2; h++) UNROLL for (int b = 0; b < NB; b++)
        _mm256_storeu_ps(y + (size_t)b * ldy + 8 * h, acc[h][b]);
}

PL_X16_TILE_NB4(ymx_tile, ymx_body, 0)

void X16_KERNEL(pl_mm_kernel *k) {
    k->fn = ymx_tile;
    k->tr = 16;
    k->tb = 4;
}

#endif
