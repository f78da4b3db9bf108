/* kernels/matmul_x16_avxvnni — the x16 tiles of q8_0, q4_0, iq4_nl, q5_0, q4_1 and q5_1 with
 * AVX-VNNI (issue 35; layouts and arithmetic: matmul_x16.c, matmul_x16_q4_0.c):
 * matmul_x16_avx512.c's vpdpbusd tiles at 256 bits (q5_0's and q5_1's fifth-bit masks, which
 * AVX-512 applies as k-masks, expanded to bytes: vpshufb of the half's 32 bits, vpcmpeqb). A
 * 64-byte chunk is two ymm halves (rows 0-7, 8-15) done one after the other inside each block,
 * so the two integer chains per activation row (q8_0: even and odd chunks; the 4- and 5-bit
 * types: low and high nibbles) and both halves' accumulators of two activation
 * rows fit 16 registers: tiles of 16 rows x 2 activations. The integer sums are exact and the
 * float step is the scalar tile's, so the bits are the scalar tile's (test_matmul_x16).
 */
#include "kernels/matmul_kernels.h"
#include "kernels/matmul_tile.h"
#include "kernels/quant.h"

#include "kernels/simd.h"

#include <immintrin.h>
#include <string.h>

/* The 32 bits at p as 32 bytes, 0xFF where the bit is set (byte i: bit i). */
AI __m256i xv_bits(const uint8_t *p) {
    int32_t m;
    memcpy(&m, p, sizeof m);
    const __m256i idx = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
    const __m256i bit = _mm256_set1_epi64x((int64_t)0x8040201008040201);
    return _mm256_cmpeq_epi8(_mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32(m), idx), bit), bit);
}

/* Q4: 0 q8_0, 1 q4_0, 2 iq4_nl (q4_0's blocks, the nibbles' levels + 128 looked up), 3 q5_0,
 * 4 q4_1, 5 q5_1 (q4_0's and q5_0's with offsets m: q8_1 activations, no seeds). */
AI void xv_body(const uint8_t *w, const uint8_t *a, size_t as, int64_t cols, float *y, int64_t ldy,
                const int NB, const int Q4) {
    const int64_t nblk = cols / PL_QK;
    const size_t blk = pl_mm_x16_block_bytes(Q4);
    const int NIB = Q4 == 1 || Q4 == 4, FIFTH = Q4 == 3 || Q4 == 5, WITH_M = Q4 >= 4;
    const size_t hdr = WITH_M ? 64 : 32; /* the chunks follow d (and m) */
    const __m256i c16 = _mm256_set1_epi8(16);
    const __m256i m4 = _mm256_set1_epi8(15);
    const __m128i t = _mm_add_epi8(_mm_loadu_si128((const __m128i *)pl_kvalues_iq4nl), _mm_set1_epi8((char)0x80));
    const __m256i lut = _mm256_set_m128i(t, t);
    const float *dx[2];
    const int32_t *seed[2];
    UNROLL for (int b = 0; b < NB; b++) {
        dx[b] = (const float *)(a + (size_t)b * as + cols);
        seed[b] = (const int32_t *)(dx[b] + nblk);
    }
    __m256 acc[2][2];
    UNROLL for (int h = 0; h < 2; h++) UNROLL for (int b = 0; b < NB; b++) acc[h][b] = _mm256_setzero_ps();
    for (int64_t k = 0; k < nblk; k++) {
        const uint8_t *wb = w + (size_t)k * blk;
        UNROLL for (int h = 0; h < 2; h++) {
            __m256i s0[2], s1[2];
            UNROLL for (int b = 0; b < NB; b++) {
                s0[b] = WITH_M ? _mm256_setzero_si256() : _mm256_set1_epi32(seed[b][k]);
                s1[b] = _mm256_setzero_si256();
            }
            UNROLL for (int j = 0; j < 4; j++) {
                const int j0 = Q4 ? j : 2 * j, j1 = Q4 ? j + 4 : 2 * j + 1;
                /* decode streams the weights: the block two ahead into L2, lines j, j + 4, j + 8 */
                if (NB == 1 && h == 0)
                    for (int l = j; 64 * (size_t)l < blk; l += 4)
                        _mm_prefetch((const char *)wb + 2 * blk + 64 * l, _MM_HINT_T1);
                __m256i w0, w1;
                if (Q4) {
                    const __m256i v = _mm256_loadu_si256((const __m256i *)(wb + hdr + 64 * j + 32 * h));
                    if (FIFTH) { /* q5_0, q5_1: the nibbles + 16 where the fifth-bit masks say */
                        w0 = _mm256_and_si256(v, m4);
                        w1 = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
                        w0 = _mm256_add_epi8(w0, _mm256_and_si256(xv_bits(wb + hdr + 256 + 8 * j + 4 * h), c16));
                        w1 = _mm256_add_epi8(w1, _mm256_and_si256(xv_bits(wb + hdr + 256 + 8 * (j + 4) + 4 * h), c16));
                    } else if (Q4 == 2) { /* iq4_nl: the levels + 128 */
                        w0 = _mm256_shuffle_epi8(lut, _mm256_and_si256(v, m4));
                        w1 = _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
                    } else {
                        w0 = _mm256_and_si256(v, m4);
                        w1 = _mm256_andnot_si256(m4, v); /* 16 x the high nibbles */
                    }
                } else {
                    w0 = _mm256_loadu_si256((const __m256i *)(wb + 32 + 64 * j0 + 32 * h));
                    w1 = _mm256_loadu_si256((const __m256i *)(wb + 32 + 64 * j1 + 32 * h));
                }
                UNROLL for (int b = 0; b < NB; b++) {
                    const int32_t *xq = (const int32_t *)(a + (size_t)b * as + k * PL_QK);
                    s0[b] = _mm256_dpbusd_avx_epi32(s0[b], w0, _mm256_set1_epi32(xq[j0]));
                    s1[b] = _mm256_dpbusd_avx_epi32(s1[b], w1, _mm256_set1_epi32(xq[j1]));
                }
            }
            const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(wb + 16 * h)));
            UNROLL for (int b = 0; b < NB; b++) {
                const __m256i isum = _mm256_add_epi32(s0[b], NIB ? _mm256_srai_epi32(s1[b], 4) : s1[b]);
                acc[h][b] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(dw, _mm256_set1_ps(dx[b][k])),
                                            acc[h][b]);
                if (WITH_M) /* m_w times q8_1's s_x, after d_x's block sums */
                    acc[h][b] = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(wb + 32 + 16 * h))),
                                                _mm256_set1_ps(dx[b][nblk + k]), acc[h][b]);
            }
        }
    }
    UNROLL for (int h = 0; h < 2; h++) UNROLL for (int b = 0; b < NB; b++)
        _mm256_storeu_ps(y + (size_t)b * ldy + 8 * h, acc[h][b]);
}

PL_X16_TILE_NB2(tile_q8_0, xv_body, 0)
PL_X16_TILE_NB2(tile_q4_0, xv_body, 1)
PL_X16_TILE_NB2(tile_iq4_nl, xv_body, 2)
PL_X16_TILE_NB2(tile_q5_0, xv_body, 3)
PL_X16_TILE_NB2(tile_q4_1, xv_body, 4)
PL_X16_TILE_NB2(tile_q5_1, xv_body, 5)

int pl_mm_kernel_x16_avxvnni(pl_dtype t, pl_mm_kernel *k) {
    k->tr = 16;
    k->tb = 2;
    k->gemm = NULL;
    k->fn = t == PL_DT_Q8_0 ? tile_q8_0 : t == PL_DT_Q4_0 ? tile_q4_0 : tile_iq4_nl;
    if (t == PL_DT_Q5_0) k->fn = tile_q5_0; /* the rows of q4_0's x16 family, after the first three */
    if (t == PL_DT_Q4_1) k->fn = tile_q4_1;
    if (t == PL_DT_Q5_1) k->fn = tile_q5_1;
    return t == PL_DT_Q8_0 || t == PL_DT_Q4_0 || t == PL_DT_IQ4_NL || t == PL_DT_Q5_0 || t == PL_DT_Q4_1 ||
           t == PL_DT_Q5_1;
}
