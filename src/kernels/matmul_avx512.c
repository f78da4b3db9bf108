/* kernels/matmul_avx512 — AVX-512 tile kernels (F, BW, VL, DQ, VNNI, BF16; see cpu.h).
 *
 * Every kernel keeps one 16-lane accumulator per (row, activation) pair of its tile, loads each
 * weight vector once per tile and each activation vector once per tile, and reduces the lanes
 * with the same fixed tree at the end, so a value never depends on the tile shape. The float
 * types sum four interleaved partials per value (see FLOAT_BODIES), so that a one-row decode
 * tile has four independent FMA chains while a large tile computes the same partials in turn.
 *
 *   f32  : FMA.                     f16 : F16C widening of the weights, FMA with f16-exact f32.
 *   bf16 : vdpbf16ps on 32 pairs.   q8_0/q4_0 : vpdpbusd on two blocks per vector, weights made
 *          unsigned (q8_0: +128, q4_0: nibbles 0..15) and the offset removed by seeding the
 *          integer accumulator with -offset * sum(x) per lane; one float FMA per two blocks.
 *   K-quants : vpmaddubsw (unsigned quants x int8 activations) then vpdpwssd with the sub-block
 *          scales; mins / the q6_K offset through the q8_K block sums; one float FMA per
 *          super-block.
 */
#include "kernels/cpu.h"
#include "kernels/matmul_kernels.h"
#include "kernels/matmul_tile.h"
#include "kernels/quant.h"

#include "kernels/matmul_avx512.h"
#include "kernels/simd.h"

#include <immintrin.h>
#include <string.h>

/* Store the lane sums of acc[r][b] to y[b * ldy + r]. */
#define STORE_TILE(acc)                                                                     \
    UNROLL for (int r = 0; r < NR; r++)                                                            \
        UNROLL for (int b = 0; b < NB; b++) y[b * ldy + r] = _mm512_reduce_add_ps(acc[r][b])

#define ZERO_TILE(acc)                                                                      \
    UNROLL for (int r = 0; r < NR; r++)                                                            \
        UNROLL for (int b = 0; b < NB; b++) acc[r][b] = _mm512_setzero_ps()

/* ---- f32 / f16 / bf16 ---------------------------------------------------------------------- */

/* The row is cut into chunks of CW columns (16 floats, 32 bf16 pairs; the last one masked). Chunk
 * j is summed into partial j % 4, each partial in chunk order from zero, and a value is
 * reduce((p0 + p2) + (p1 + p3)): for f32 and f16 the order of llama.cpp's AVX-512 vec_dot (four
 * accumulators, GGML_F32x16_REDUCE), which computes the reference's decode steps. Small tiles (one weight row, B <= 3: decode) run the four
 * partials side by side, so one row streams from memory with four independent FMA chains; large
 * tiles run them one after the other with one accumulator per (row, activation) and keep the
 * finished partials aside. Both do the same operations on every value. */
#ifndef PF_AHEAD
#define PF_AHEAD 2048
#endif
/* One chunk (j) of a large tile's partial, its lanes under mask M. */
#define FLOAT_CHUNK(CW, WT, WLOAD, XLOAD, FMA, M)                                                  \
    {                                                                                              \
        const int64_t c = j * CW;                                                                  \
        WT wv[4];                                                                                  \
        UNROLL for (int r = 0; r < NR; r++) wv[r] = WLOAD(w + r * ws, c, M);                       \
        UNROLL for (int b = 0; b < NB; b++) {                                                      \
            const uint8_t *ab = a + b * as;                                                        \
            UNROLL for (int r = 0; r < NR; r++) acc[r][b] = FMA(acc[r][b], wv[r], XLOAD(ab, c, M)); \
        }                                                                                          \
    }
#define FLOAT_BODIES(NAME, CW, MASK_T, FULL, WT, WLOAD, XLOAD, FMA)                                \
    AI void NAME##_small(const uint8_t *w, size_t ws, const uint8_t *a, size_t as, int64_t cols,   \
                         float *y, int64_t ldy, const int NB) {                                    \
        const int64_t n = (cols + CW - 1) / CW, nfull = cols / CW;                                \
        const MASK_T tail = (MASK_T)((((uint64_t)1) << (cols % CW)) - 1);                          \
        const size_t es = ws / (size_t)cols; /* bytes per weight: prefetch a stream ahead */      \
        __m512 acc[3][4];                                                                          \
        UNROLL for (int b = 0; b < NB; b++) UNROLL for (int p = 0; p < 4; p++)                     \
            acc[b][p] = _mm512_setzero_ps();                                                       \
        int64_t j = 0;                                                                             \
        for (; j + 4 <= nfull; j += 4) {                                                           \
            _mm_prefetch((const char *)w + (size_t)(j * CW) * es + PF_AHEAD, _MM_HINT_T0);          \
            UNROLL for (int p = 0; p < 4; p++) {                                                   \
                const int64_t c = (j + p) * CW;                                                    \
                WT wv = WLOAD(w, c, FULL);                                                         \
                UNROLL for (int b = 0; b < NB; b++) acc[b][p] = FMA(acc[b][p], wv, XLOAD(a + b * as, c, FULL)); \
            }                                                                                      \
        }                                                                                          \
        UNROLL for (int p = 0; p < 4; p++) {                                                       \
            if (j + p < n) {                                                                       \
                const int64_t c = (j + p) * CW;                                                    \
                const MASK_T m = j + p < nfull ? FULL : tail;                                      \
                WT wv = WLOAD(w, c, m);                                                            \
                UNROLL for (int b = 0; b < NB; b++) acc[b][p] = FMA(acc[b][p], wv, XLOAD(a + b * as, c, m)); \
            }                                                                                      \
        }                                                                                          \
        UNROLL for (int b = 0; b < NB; b++)                                                        \
            y[b * ldy] = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(acc[b][0], acc[b][2]),  \
                                                            _mm512_add_ps(acc[b][1], acc[b][3]))); \
    }                                                                                              \
    AI void NAME##_body(const uint8_t *w, size_t ws, const uint8_t *a, size_t as, int64_t cols,    \
                        float *y, int64_t ldy, const int NR, const int NB) {                       \
        if (NR == 1 && NB <= 3) {                                                                  \
            NAME##_small(w, ws, a, as, cols, y, ldy, NB);                                          \
            return;                                                                                \
        }                                                                                          \
        const int64_t n = (cols + CW - 1) / CW, nfull = cols / CW;                                \
        const MASK_T tail = (MASK_T)((((uint64_t)1) << (cols % CW)) - 1);                          \
        __m512 acc[4][4], lo[4][4], hi[4][4];                                                      \
        UNROLL for (int p = 0; p < 4; p++) {                                                       \
            ZERO_TILE(acc);                                                                        \
            int64_t j = p;                                                                         \
            for (; j < nfull; j += 4) /* full chunks: plain loads */                               \
                FLOAT_CHUNK(CW, WT, WLOAD, XLOAD, FMA, FULL)                                       \
            if (j < n) /* the masked last chunk, if it falls in this partial */                    \
                FLOAT_CHUNK(CW, WT, WLOAD, XLOAD, FMA, tail)                                       \
            UNROLL for (int r = 0; r < NR; r++) UNROLL for (int b = 0; b < NB; b++) {             \
                if (p == 0) lo[r][b] = acc[r][b];                                                  \
                if (p == 1) hi[r][b] = acc[r][b];                                                  \
                if (p == 2) lo[r][b] = _mm512_add_ps(lo[r][b], acc[r][b]);                         \
                if (p == 3) hi[r][b] = _mm512_add_ps(hi[r][b], acc[r][b]);                         \
            }                                                                                      \
        }                                                                                          \
        UNROLL for (int r = 0; r < NR; r++) UNROLL for (int b = 0; b < NB; b++)                   \
            y[b * ldy + r] = _mm512_reduce_add_ps(_mm512_add_ps(lo[r][b], hi[r][b]));              \
    }

#define LD_F32(p, c, m) _mm512_maskz_loadu_ps((m), (const float *)(p) + (c))
#define LD_F16(p, c, m) _mm512_cvtph_ps(_mm256_maskz_loadu_epi16((m), (const pl_f16 *)(p) + (c)))
#define LD_BF16(p, c, m) ((__m512bh)_mm512_maskz_loadu_epi16((m), (const pl_bf16 *)(p) + (c)))
#define FMA_PS(acc, wv, xv) _mm512_fmadd_ps((wv), (xv), (acc))
#define FMA_BF16(acc, wv, xv) _mm512_dpbf16_ps((acc), (wv), (xv))

FLOAT_BODIES(f32, 16, __mmask16, (__mmask16)0xFFFF, __m512, LD_F32, LD_F32, FMA_PS)
FLOAT_BODIES(f16, 16, __mmask16, (__mmask16)0xFFFF, __m512, LD_F16, LD_F32, FMA_PS)
FLOAT_BODIES(bf16, 32, __mmask32, (__mmask32)0xFFFFFFFFu, __m512bh, LD_BF16, LD_BF16, FMA_BF16)

/* ---- q8_0 / q4_0 against q8_0 activations -------------------------------------------------- */

/* One step over two blocks (or the lone last one): wq[r] unsigned weight bytes, dw[r] weight
 * scales per lane, x at xq, activation scales per lane from dx, offset `off` per weight byte. */
#define Q80_STEP(XLOAD, DXLOAD)                                                             \
    UNROLL for (int b = 0; b < NB; b++) {                                                          \
        const uint8_t *ab = a + b * as;                                                     \
        __m512i xv = XLOAD;                                                                 \
        __m512i neg = _mm512_sub_epi32(_mm512_setzero_si512(),                              \
                                       _mm512_dpbusd_epi32(_mm512_setzero_si512(), off, xv)); \
        __m512 dx = DXLOAD;                                                                 \
        UNROLL for (int r = 0; r < NR; r++) {                                                      \
            __m512i s = _mm512_dpbusd_epi32(neg, wq[r], xv);                                \
            acc[r][b] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dw[r], dx), acc[r][b]); \
        }                                                                                   \
    }

/* q8_0 (Q4 = 0: bytes ^ 0x80) and q4_0 (Q4 = 1: nibbles, stored + 8), a constant. A pair's q4_0
 * vector holds A[0..15] B[0..15] A[16..31] B[16..31]. */
AI void q80_body(const uint8_t *w, size_t ws, const uint8_t *a, size_t as, int64_t cols, float *y,
                 int64_t ldy, const int NR, const int NB, const int Q4) {
    const int64_t nblk = cols / PL_QK;
    const size_t bsz = Q4 ? sizeof(pl_block_q4_0) : sizeof(pl_block_q8_0);
    const __m512i off = Q4 ? _mm512_set1_epi8(8) : _mm512_set1_epi8((char)0x80);
    const __m512i low = _mm512_set1_epi8(0x0F);
    const __m512i idx = Q4 ? _mm512_set_epi32(1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0)
                           : _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    __m512 acc[4][4];
    ZERO_TILE(acc);
    int64_t k = 0;
    for (; k + 2 <= nblk; k += 2) {
        __m512i wq[4];
        __m512 dw[4];
        UNROLL for (int r = 0; r < NR; r++) {
            const uint8_t *p = w + r * ws + k * bsz;
            if (Q4) {
                __m256i v = _mm256_inserti128_si256(
                    _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(p + 2))),
                    _mm_loadu_si128((const __m128i *)(p + 20)), 1);
                wq[r] = _mm512_and_si512(
                    _mm512_inserti64x4(_mm512_castsi256_si512(v), _mm256_srli_epi16(v, 4), 1), low);
                dw[r] = lanes_of_two_f16(idx, p, p + 18);
            } else {
                __m256i lo = _mm256_loadu_si256((const __m256i *)(p + 2));
                __m256i hi = _mm256_loadu_si256((const __m256i *)(p + 36));
                wq[r] = _mm512_xor_si512(_mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1), off);
                dw[r] = lanes_of_two_f16(idx, p, p + 34);
            }
        }
        Q80_STEP(_mm512_loadu_si512(ab + k * PL_QK), lanes_of_two(idx, (const float *)(ab + cols) + k))
    }
    if (k < nblk) { /* lone last block, natural order */
        __m512i wq[4];
        __m512 dw[4];
        UNROLL for (int r = 0; r < NR; r++) {
            const uint8_t *p = w + r * ws + k * bsz;
            if (Q4) {
                __m128i v = _mm_loadu_si128((const __m128i *)(p + 2));
                __m256i q = _mm256_inserti128_si256(_mm256_castsi128_si256(v), _mm_srli_epi16(v, 4), 1);
                wq[r] = zext256(_mm256_and_si256(q, _mm512_castsi512_si256(low)));
            } else {
                __m256i lo = _mm256_loadu_si256((const __m256i *)(p + 2));
                wq[r] = zext256(_mm256_xor_si256(lo, _mm512_castsi512_si256(off)));
            }
            dw[r] = _mm512_set1_ps(f16_at(p));
        }
        Q80_STEP(zext256(_mm256_loadu_si256((const __m256i *)(ab + k * PL_QK))),
                 _mm512_set1_ps(((const float *)(ab + cols))[k]))
    }
    STORE_TILE(acc);
}

PL_MM_BODY_T(q8_0_body, q80_body, 0)
PL_MM_BODY_T(q4_0_body, q80_body, 1)


/* ---- K-quants against q8_K activations ----------------------------------------------------- */

/* The 8 six-bit scales (sc) and mins (m) of a q4_K / q5_K block, one per byte. */
AI void kscales8(const uint8_t *scales, uint64_t *sc, uint64_t *m) {
    uint32_t u[3];
    memcpy(u, scales, sizeof u);
    uint32_t sc_hi = (u[2] & 0x0f0f0f0fu) | ((u[0] >> 2) & 0x30303030u);
    uint32_t m_hi = ((u[2] >> 4) & 0x0f0f0f0fu) | ((u[1] >> 2) & 0x30303030u);
    *sc = (u[0] & 0x3f3f3f3fu) | ((uint64_t)sc_hi << 32);
    *m = (u[1] & 0x3f3f3f3fu) | ((uint64_t)m_hi << 32);
}

#define Q8K(b, i) ((const pl_block_q8_K *)(a + (b) * as) + (i))

/* The K-quant bodies' inner step: iacc[r][b] += row r's 64 quants q[r] times the 64 quants at
 * qs_off of activation row b's super-block i, the pairs' sums weighted by the scales scv[r] (a
 * macro: as an inline function it changed the tiles' register allocation and FMA forms). */
#define K_DOT64(qs_off)                                                                          \
    UNROLL for (int b = 0; b < NB; b++) {                                                        \
        __m512i xv = _mm512_loadu_si512(Q8K(b, i)->qs + (qs_off));                               \
        UNROLL for (int r = 0; r < NR; r++)                                                      \
            iacc[r][b] = _mm512_dpwssd_epi32(iacc[r][b], _mm512_maddubs_epi16(q[r], xv), scv[r]); \
    }

/* q4_K (HIGH5 = 0) and q5_K (HIGH5 = 1): same scales and mins, q5_K adds a 5th bit. */
AI void k45_body(const uint8_t *w, size_t ws, const uint8_t *a, size_t as, int64_t cols, float *y,
                 int64_t ldy, const int NR, const int NB, const int HIGH5) {
    const size_t bsz = HIGH5 ? sizeof(pl_block_q5_K) : sizeof(pl_block_q4_K);
    const size_t qs_off = HIGH5 ? offsetof(pl_block_q5_K, qs) : offsetof(pl_block_q4_K, qs);
    const __m512i low = _mm512_set1_epi8(0x0F);
    const __m512i sixteen = _mm512_set1_epi8(16);
    const __m512i idx0 = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(1), 1);
    const __m512i bit0 = _mm512_inserti64x4(_mm512_set1_epi8(1), _mm256_set1_epi8(2), 1);
    __m512 acc[4][4];
    ZERO_TILE(acc);
    for (int64_t i = 0; i < cols / PL_QK_K; i++) {
        __m512i sc16[4], qh2[4];
        __m256i mdup[4];
        __m512 dv[4], dmv[4];
        UNROLL for (int r = 0; r < NR; r++) {
            const uint8_t *p = w + r * ws + i * bsz;
            uint64_t sc, m;
            kscales8(p + 4, &sc, &m);
            sc16[r] = _mm512_castsi128_si512(_mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)sc)));
            __m128i m16 = _mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)m));
            mdup[r] = _mm256_set_m128i(_mm_unpackhi_epi16(m16, m16), _mm_unpacklo_epi16(m16, m16));
            dv[r] = _mm512_set1_ps(f16_at(p));
            dmv[r] = _mm512_set1_ps(f16_at(p + 2));
            if (HIGH5) {
                __m256i h = _mm256_loadu_si256((const __m256i *)(p + offsetof(pl_block_q5_K, qh)));
                qh2[r] = _mm512_inserti64x4(_mm512_castsi256_si512(h), h, 1);
            }
        }
        __m512i iacc[4][4];
        UNROLL for (int r = 0; r < NR; r++)
            UNROLL for (int b = 0; b < NB; b++) iacc[r][b] = _mm512_setzero_si512();
        UNROLL for (int g = 0; g < 4; g++) {
            const __m512i idx = _mm512_add_epi16(idx0, _mm512_set1_epi16((short)(2 * g)));
            __m512i q[4], scv[4];
            UNROLL for (int r = 0; r < NR; r++) {
                const uint8_t *p = w + r * ws + i * bsz + qs_off + 32 * g;
                __m256i v = _mm256_loadu_si256((const __m256i *)p);
                q[r] = _mm512_and_si512(
                    _mm512_inserti64x4(_mm512_castsi256_si512(v), _mm256_srli_epi16(v, 4), 1), low);
                if (HIGH5) {
                    __mmask64 hk = _mm512_test_epi8_mask(qh2[r], _mm512_slli_epi16(bit0, 2 * g));
                    q[r] = _mm512_mask_add_epi8(q[r], hk, q[r], sixteen);
                }
                scv[r] = _mm512_permutexvar_epi16(idx, sc16[r]);
            }
            K_DOT64(64 * g)
        }
        UNROLL for (int b = 0; b < NB; b++) {
            __m512 dx = _mm512_set1_ps(Q8K(b, i)->d);
            __m256i bs = _mm256_loadu_si256((const __m256i *)Q8K(b, i)->bsums);
            UNROLL for (int r = 0; r < NR; r++) {
                __m512i mi = zext256(_mm256_madd_epi16(bs, mdup[r]));
                acc[r][b] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(iacc[r][b]), _mm512_mul_ps(dv[r], dx), acc[r][b]);
                acc[r][b] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(mi), _mm512_mul_ps(dmv[r], dx), acc[r][b]);
            }
        }
    }
    STORE_TILE(acc);
}

PL_MM_BODY_T(q4_K_body, k45_body, 0)
PL_MM_BODY_T(q5_K_body, k45_body, 1)

/* int16 lane -> sub-block (of the 4 a 64-quant vector spans) */
static const int16_t q6_idx[32] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                   2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3};

AI void q6_K_body(const uint8_t *w, size_t ws, const uint8_t *a, size_t as, int64_t cols, float *y,
                  int64_t ldy, const int NR, const int NB) {
    const __m512i low = _mm512_set1_epi8(0x0F);
    const __m512i c30 = _mm512_set1_epi8(0x30);
    const __m512i idxb = _mm512_loadu_si512(q6_idx);
    __m512 acc[4][4];
    ZERO_TILE(acc);
    for (int64_t i = 0; i < cols / PL_QK_K; i++) {
        __m512i sc16[4];
        __m512 dv[4];
        UNROLL for (int r = 0; r < NR; r++) {
            const pl_block_q6_K *blk = (const pl_block_q6_K *)(w + r * ws) + i;
            sc16[r] = _mm512_castsi256_si512(
                _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)blk->scales)));
            dv[r] = _mm512_set1_ps(f16_at((const uint8_t *)&blk->d));
        }
        __m512i iacc[4][4];
        UNROLL for (int r = 0; r < NR; r++)
            UNROLL for (int b = 0; b < NB; b++) iacc[r][b] = _mm512_setzero_si512();
        UNROLL for (int half = 0; half < 2; half++) {
            __m512i ql[4], qh[4];
            UNROLL for (int r = 0; r < NR; r++) {
                const pl_block_q6_K *blk = (const pl_block_q6_K *)(w + r * ws) + i;
                ql[r] = _mm512_loadu_si512(blk->ql + 64 * half);
                __m256i h = _mm256_loadu_si256((const __m256i *)(blk->qh + 32 * half));
                qh[r] = _mm512_inserti64x4(_mm512_castsi256_si512(h), _mm256_srli_epi16(h, 2), 1);
            }
            UNROLL for (int part = 0; part < 2; part++) {
                const __m512i idx = _mm512_add_epi16(idxb, _mm512_set1_epi16((short)(8 * half + 4 * part)));
                __m512i q[4], scv[4];
                UNROLL for (int r = 0; r < NR; r++) {
                    if (part == 0)
                        q[r] = _mm512_or_si512(_mm512_and_si512(ql[r], low),
                                               _mm512_and_si512(_mm512_slli_epi16(qh[r], 4), c30));
                    else
                        q[r] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql[r], 4), low),
                                               _mm512_and_si512(qh[r], c30));
                    scv[r] = _mm512_permutexvar_epi16(idx, sc16[r]);
                }
                K_DOT64(128 * half + 64 * part)
            }
        }
        UNROLL for (int b = 0; b < NB; b++) {
            __m512 dx = _mm512_set1_ps(Q8K(b, i)->d);
            __m256i bs = _mm256_loadu_si256((const __m256i *)Q8K(b, i)->bsums);
            UNROLL for (int r = 0; r < NR; r++) {
                /* quants are stored +32: remove 32 * sum(sc * bsum) */
                __m256i corr = _mm256_slli_epi32(_mm256_madd_epi16(bs, _mm512_castsi512_si256(sc16[r])), 5);
                __m512i s = _mm512_sub_epi32(iacc[r][b], zext256(corr));
                acc[r][b] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dv[r], dx), acc[r][b]);
            }
        }
    }
    STORE_TILE(acc);
}

/* ---- tile entry points ---------------------------------------------------------------------- */

PL_MM_TILE_4x4(tile_f32, f32_body)
PL_MM_TILE_4x4(tile_f16, f16_body)
PL_MM_TILE_4x4(tile_bf16, bf16_body)
PL_MM_TILE_4x3(tile_q8_0, q8_0_body)
PL_MM_TILE_4x3(tile_q4_0, q4_0_body)
PL_MM_TILE_2x4(tile_q4_K, q4_K_body)
PL_MM_TILE_2x4(tile_q5_K, q5_K_body)
PL_MM_TILE_2x4(tile_q6_K, q6_K_body)

int pl_mm_kernel_avx512(pl_dtype t, pl_mm_kernel *k) {
    k->tr = 4;
    k->tb = 4;
    k->gemm = NULL;
    switch (t) {
    case PL_DT_F32: k->fn = tile_f32; return 1;
    case PL_DT_F16: k->fn = tile_f16; k->gemm = pl_mm_gemm_f16_avx512; return 1;
    case PL_DT_BF16: /* vdpbf16ps; without AVX512_BF16, AVX2's tile (matmul.c) */
        if (!pl_cpu_avx512bf16()) return 0;
        k->fn = tile_bf16;
        return 1;
    case PL_DT_Q8_0: k->fn = tile_q8_0; k->tb = 3; return 1;
    case PL_DT_Q4_0: k->fn = tile_q4_0; k->tb = 3; return 1;
    case PL_DT_Q4_K: k->fn = tile_q4_K; k->tr = 2; return 1;
    case PL_DT_Q5_K: k->fn = tile_q5_K; k->tr = 2; return 1;
    case PL_DT_Q6_K: k->fn = tile_q6_K; k->tr = 2; return 1;
    case PL_DT_MXFP4: pl_mm_kernel_mxfp4_avx512(k); return 1;
    default: return pl_mm_kernel_avx512_wt(t, k);
    }
}
