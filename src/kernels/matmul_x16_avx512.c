/* kernels/matmul_x16_avx512 — the x16 layouts' tile kernels with AVX-512 VNNI, q8_0, q4_0 and
 * iq4_nl (layouts and arithmetic: matmul_x16.c, matmul_x16_q4_0.c). A tile is one or two row
 * groups (16 or 32 rows) by up to four activation rows; every vpdpbusd multiplies one 64-byte
 * chunk (4 columns of 16 rows) by an activation's 4 bytes broadcast, so the 16 lanes are 16
 * outputs and no lane sum is needed. q8_0 loads its 8 chunks of a block; q4_0 loads 4 and takes
 * two chunks out of each (low nibbles: chunk j, high nibbles: chunk j + 4); iq4_nl too, looking
 * its levels up (vpshufb); q5_0 too, adding 16 under its fifth-bit masks; q4_1 and q5_1 as q4_0
 * and q5_0, with a second FMA per block for the offsets (m_w times q8_1's s_x); mxfp4 as iq4_nl
 * with its levels + 12 and its E8M0 exponents made floats (matmul_x16_mxfp4.c).
 * Each (group, activation) pair sums a block in two integer chains (q8_0: even and odd chunks,
 * q4_0: low and high nibbles, the high ones as 16 x h with no shift and that sum shifted back,
 * exactly; added at the end) so that a decode step's one-row tiles still have independent
 * chains.
 */
#include "kernels/matmul_kernels.h"
#include "kernels/quant.h"

#include "kernels/simd.h"
#include "kernels/x16_avx512.h"

#include <immintrin.h>
#include <string.h>

/* iq4_nl's 16 levels + 128 as unsigned bytes, in each 128-bit lane (a vpshufb table). */
static inline __m512i iq4nl_lut(void) {
    const __m128i t = _mm_add_epi8(_mm_loadu_si128((const __m128i *)pl_kvalues_iq4nl), _mm_set1_epi8((char)0x80));
    return _mm512_broadcast_i32x4(t);
}

/* mxfp4's 16 levels + 12 (0..24) in each 128-bit lane. */
static inline __m512i mxfp4_lut(void) {
    const __m128i t = _mm_add_epi8(_mm_loadu_si128((const __m128i *)pl_kvalues_mxfp4), _mm_set1_epi8(12));
    return _mm512_broadcast_i32x4(t);
}

/* The 16 rows' E8M0 exponents at p as floats, pl_e8m0_half's bits: (e - 1) << 23, or the
 * subnormals 0x00200000 << e for e < 2. */
AI __m512 e8m0_half16(const uint8_t *p) {
    const __m512i e = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p));
    const __m512i n = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
    return _mm512_castsi512_ps(_mm512_mask_sllv_epi32(n, _mm512_cmplt_epu32_mask(e, _mm512_set1_epi32(2)),
                                                      _mm512_set1_epi32(0x00200000), e));
}

/* Q4: 1 = the weights are q4_0's x16 layout, 2 = iq4_nl's (the same blocks), 3 = q5_0's,
 * 4 = q4_1's, 5 = q5_1's (q4_0's and q5_0's with offsets m: q8_1 activations, no seeds),
 * 6 = mxfp4's (q4_0's chunks after 16 exponents), 0 = q8_0's. */
AI void x16_body(const uint8_t *w, size_t ws, const uint8_t *a, size_t as, int64_t cols, float *y,
                 int64_t ldy, const int NG, const int NB, const int Q4) {
    const int64_t nblk = cols / PL_QK;
    const size_t gs = 16 * ws;
    const size_t blk = pl_mm_x16_block_bytes(Q4);
    const int NIB = Q4 == 1 || Q4 == 4, FIFTH = Q4 == 3 || Q4 == 5, WITH_M = Q4 == 4 || Q4 == 5;
    const size_t hdr = Q4 == 6 ? 16 : WITH_M ? 64 : 32; /* the chunks follow d (and m), or e */
    const __m512i m4 = _mm512_set1_epi8(15), m4h = _mm512_set1_epi8((char)0xF0);
    const __m512i lut = Q4 == 2 ? iq4nl_lut() : Q4 == 6 ? mxfp4_lut() : m4, c16 = _mm512_set1_epi8(16);
    const float *dx[4];
    const int32_t *seed[4];
    const float *sx[4];
    UNROLL for (int b = 0; b < NB; b++) {
        dx[b] = (const float *)(a + (size_t)b * as + cols);
        seed[b] = (const int32_t *)(dx[b] + nblk);
        sx[b] = dx[b] + nblk;
    }
    __m512 acc[2][4];
    UNROLL for (int g = 0; g < NG; g++) UNROLL for (int b = 0; b < NB; b++)
        acc[g][b] = _mm512_setzero_ps();
    for (int64_t k = 0; k < nblk; k++) {
        const uint8_t *wb[2];
        __m512 dw[2];
        UNROLL for (int g = 0; g < NG; g++) {
            wb[g] = w + (size_t)g * gs + (size_t)k * blk;
            dw[g] = Q4 == 6 ? e8m0_half16(wb[g]) : _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)wb[g]));
        }
        __m512i s0[2][4], s1[2][4];
        UNROLL for (int b = 0; b < NB; b++) UNROLL for (int g = 0; g < NG; g++) {
            s0[g][b] = WITH_M ? _mm512_setzero_si512() : _mm512_set1_epi32(seed[b][k]);
            s1[g][b] = _mm512_setzero_si512();
        }
        UNROLL for (int j = 0; j < 4; j++) {
            __m512i w0[2], w1[2]; /* chunks j0, j1 of the block */
            const int j0 = Q4 ? j : 2 * j, j1 = Q4 ? j + 4 : 2 * j + 1;
            UNROLL for (int g = 0; g < NG; g++) {
                /* decode streams the weights: the block two ahead into L2 and the bytes 36 KB
                 * ahead into L3, lines j, j + 4, j + 8 here (spread among the loads; 1B q8_0
                 * decode +3 %; x16_avx512.h says why) */
                if (NB <= 2)
                    for (int l = j; 64 * (size_t)l < blk; l += 4)
                        pl_x16_prefetch_blk_line(wb[g], blk, l, Q4 == 0);
                if (FIFTH) { /* q5_0, q5_1: the nibbles + 16 where the fifth-bit masks say */
                    const __m512i v = _mm512_loadu_si512(wb[g] + hdr + 64 * j);
                    uint64_t m0, m1;
                    memcpy(&m0, wb[g] + hdr + 256 + 8 * j, 8);
                    memcpy(&m1, wb[g] + hdr + 256 + 8 * (j + 4), 8);
                    const __m512i lo = _mm512_and_si512(v, m4);
                    const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
                    w0[g] = _mm512_mask_add_epi8(lo, _cvtu64_mask64(m0), lo, c16);
                    w1[g] = _mm512_mask_add_epi8(hi, _cvtu64_mask64(m1), hi, c16);
                } else if (Q4 == 2 || Q4 == 6) { /* iq4_nl, mxfp4: the levels + 128, + 12 */
                    const __m512i v = _mm512_loadu_si512(wb[g] + hdr + 64 * j);
                    w0[g] = _mm512_shuffle_epi8(lut, _mm512_and_si512(v, m4));
                    w1[g] = _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(v, 4), m4));
                } else if (NIB) {
                    const __m512i v = _mm512_loadu_si512(wb[g] + hdr + 64 * j);
                    w0[g] = _mm512_and_si512(v, m4);
                    w1[g] = _mm512_and_si512(v, m4h); /* 16 x the high nibbles */
                } else {
                    w0[g] = _mm512_loadu_si512(wb[g] + 32 + 64 * j0);
                    w1[g] = _mm512_loadu_si512(wb[g] + 32 + 64 * j1);
                }
            }
            UNROLL for (int b = 0; b < NB; b++) {
                const int32_t *xq = (const int32_t *)(a + (size_t)b * as + k * PL_QK);
                const __m512i x0 = _mm512_set1_epi32(xq[j0]), x1 = _mm512_set1_epi32(xq[j1]);
                UNROLL for (int g = 0; g < NG; g++) {
                    s0[g][b] = _mm512_dpbusd_epi32(s0[g][b], w0[g], x0);
                    s1[g][b] = _mm512_dpbusd_epi32(s1[g][b], w1[g], x1);
                }
            }
        }
        __m512 mw[2];
        UNROLL for (int g = 0; g < NG; g++)
            mw[g] = WITH_M ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(wb[g] + 32)))
                           : _mm512_setzero_ps();
        UNROLL for (int b = 0; b < NB; b++) {
            const __m512 d = _mm512_set1_ps(dx[b][k]);
            UNROLL for (int g = 0; g < NG; g++) {
                acc[g][b] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(
                                                s0[g][b], NIB ? _mm512_srai_epi32(s1[g][b], 4) : s1[g][b])),
                                            _mm512_mul_ps(dw[g], d), acc[g][b]);
                if (WITH_M) acc[g][b] = _mm512_fmadd_ps(mw[g], _mm512_set1_ps(sx[b][k]), acc[g][b]);
            }
        }
    }
    UNROLL for (int g = 0; g < NG; g++) UNROLL for (int b = 0; b < NB; b++)
        _mm512_storeu_ps(y + (size_t)b * ldy + 16 * g, acc[g][b]);
}

#define X16_CASE(G, B, Q4)                                                                         \
    case G * 8 + B: x16_body(w, ws, a, as, cols, y, ldy, G, B, Q4); break;
#define X16_TILE(name, Q4)                                                                         \
    void name(const uint8_t *w, size_t ws, int nr, const uint8_t *a, size_t as, int nb,             \
              int64_t cols, float *y, int64_t ldy) {                                               \
        switch ((nr / 16) * 8 + nb) {                                                              \
            X16_CASE(1, 1, Q4) X16_CASE(1, 2, Q4) X16_CASE(1, 3, Q4) X16_CASE(1, 4, Q4)            \
            X16_CASE(2, 1, Q4) X16_CASE(2, 2, Q4) X16_CASE(2, 3, Q4) X16_CASE(2, 4, Q4)            \
        default: break;                                                                            \
        }                                                                                          \
    }

X16_TILE(pl_mm_x16_tile_avx512, 0)
X16_TILE(pl_mm_x16_tile_q4_0_avx512, 1)
X16_TILE(pl_mm_x16_tile_iq4_nl_avx512, 2)
X16_TILE(pl_mm_x16_tile_q5_0_avx512, 3)
X16_TILE(pl_mm_x16_tile_q4_1_avx512, 4)
X16_TILE(pl_mm_x16_tile_q5_1_avx512, 5)
X16_TILE(pl_mm_x16_tile_mxfp4_avx512, 6)

void pl_mm_kernel_x16_mxfp4_avx512(pl_mm_kernel *k) {
    k->fn = pl_mm_x16_tile_mxfp4_avx512;
    k->tr = 32;
    k->tr_small = 16; /* decode: one group, one stream a thread (matmul.c, tile_rows) */
    k->tb = 4;
}

int pl_mm_kernel_x16_avx512(pl_mm_kernel *k) {
    k->fn = pl_mm_x16_tile_avx512;
    k->tr = 32;
    k->tr_small = 16; /* decode: one group, one stream a thread (matmul.c, tile_rows) */
    k->tb = 4;
    return 1;
}
