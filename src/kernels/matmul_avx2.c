/* kernels/matmul_avx2 — AVX2 + FMA + F16C tile kernels (4 weight rows x 2 activation rows, one
 * 8-lane accumulator each; 16 ymm registers allow no more).
 *
 *   f32 / f16 / bf16 : widen to f32, FMA.
 *   q8_0 : vpmaddubsw on |w| and sign(x, w), one block per vector.
 *   q4_0 : two blocks per pair of vectors (the q4_0 activation layout), nibbles 0..15 with
 *          the -8 offset removed as 8 * sum(x) in 16-bit lanes.
 * The K-quants are in matmul_kq_avx2.c.
 */
#include "kernels/matmul_kernels.h"
#include "kernels/matmul_tile.h"
#include "kernels/quant.h"

#include "kernels/simd.h"

#include <immintrin.h>
#include <string.h>


/* n (< 8) 16-bit values from p, zero-padded to 8. */
AI __m128i load_u16_tail(const void *p, int64_t n) {
    uint16_t t[8] = {0};
    memcpy(t, p, (size_t)n * 2);
    return _mm_loadu_si128((const __m128i *)t);
}

AI __m256 bf16x8(__m128i v) { return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(v), 16)); }

#define ZERO_TILE(acc)                                                                      \
    UNROLL for (int r = 0; r < NR; r++)                                                            \
        UNROLL for (int b = 0; b < NB; b++) acc[r][b] = _mm256_setzero_ps()

#define STORE_TILE(acc)                                                                     \
    UNROLL for (int r = 0; r < NR; r++)                                                            \
        UNROLL for (int b = 0; b < NB; b++) y[b * ldy + r] = hsum8(acc[r][b])

/* Float types: WLOAD(ptr, c, n) / XLOAD(ptr, c, n) give 8 f32 lanes from element c, n valid. */
#define FLOAT_BODY(name, WLOAD, XLOAD)                                                      \
    AI void name(const uint8_t *w, size_t ws, const uint8_t *a, size_t as, int64_t cols,    \
                 float *y, int64_t ldy, const int NR, const int NB) {                       \
        __m256 acc[4][2];                                                                   \
        ZERO_TILE(acc);                                                                     \
        for (int64_t c = 0; c < cols; c += 8) {                                             \
            int64_t n = cols - c < 8 ? cols - c : 8;                                        \
            __m256 wv[4];                                                                   \
            UNROLL for (int r = 0; r < NR; r++) wv[r] = WLOAD(w + r * ws, c, n);                   \
            UNROLL for (int b = 0; b < NB; b++) {                                                  \
                __m256 xv = XLOAD(a + b * as, c, n);                                        \
                UNROLL for (int r = 0; r < NR; r++) acc[r][b] = _mm256_fmadd_ps(wv[r], xv, acc[r][b]); \
            }                                                                               \
        }                                                                                   \
        STORE_TILE(acc);                                                                    \
    }

static const int32_t tail_mask[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};

AI __m256 load_f32(const uint8_t *p, int64_t c, int64_t n) {
    const float *f = (const float *)p + c;
    if (n == 8) return _mm256_loadu_ps(f);
    return _mm256_maskload_ps(f, _mm256_loadu_si256((const __m256i *)(tail_mask + 8 - n)));
}

AI __m256 load_f16(const uint8_t *p, int64_t c, int64_t n) {
    const pl_f16 *h = (const pl_f16 *)p + c;
    return _mm256_cvtph_ps(n == 8 ? _mm_loadu_si128((const __m128i *)h) : load_u16_tail(h, n));
}

AI __m256 load_bf16(const uint8_t *p, int64_t c, int64_t n) {
    const pl_bf16 *h = (const pl_bf16 *)p + c;
    return bf16x8(n == 8 ? _mm_loadu_si128((const __m128i *)h) : load_u16_tail(h, n));
}

FLOAT_BODY(f32_body, load_f32, load_f32)
FLOAT_BODY(f16_body, load_f16, load_f32)
FLOAT_BODY(bf16_body, load_bf16, load_bf16)

AI void q8_0_body(const uint8_t *w, size_t ws, const uint8_t *a, size_t as, int64_t cols, float *y,
                  int64_t ldy, const int NR, const int NB) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[4][2];
    ZERO_TILE(acc);
    for (int64_t k = 0; k < cols / PL_QK; k++) {
        __m256i wv[4], aw[4];
        float dw[4];
        UNROLL for (int r = 0; r < NR; r++) {
            const uint8_t *p = w + r * ws + k * sizeof(pl_block_q8_0);
            wv[r] = _mm256_loadu_si256((const __m256i *)(p + 2));
            aw[r] = _mm256_abs_epi8(wv[r]);
            dw[r] = f16_at(p);
        }
        UNROLL for (int b = 0; b < NB; b++) {
            const uint8_t *ab = a + b * as;
            __m256i xv = _mm256_loadu_si256((const __m256i *)(ab + k * PL_QK));
            float dx = ((const float *)(ab + cols))[k];
            UNROLL for (int r = 0; r < NR; r++) {
                __m256i p16 = _mm256_maddubs_epi16(aw[r], _mm256_sign_epi8(xv, wv[r]));
                __m256i s = _mm256_madd_epi16(p16, ones);
                acc[r][b] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(dw[r] * dx), acc[r][b]);
            }
        }
    }
    STORE_TILE(acc);
}

AI void q4_0_body(const uint8_t *w, size_t ws, const uint8_t *a, size_t as, int64_t cols, float *y,
                  int64_t ldy, const int NR, const int NB) {
    const int64_t nblk = cols / PL_QK;
    const __m256i ones = _mm256_set1_epi16(1);
    const __m256i low = _mm256_set1_epi8(0x0F);
    const __m256i eight = _mm256_set1_epi8(8);
    __m256 acc[4][2];
    ZERO_TILE(acc);
    int64_t k = 0;
    for (; k + 2 <= nblk; k += 2) {
        __m256i q1[4], q2[4];
        float dA[4], dB[4];
        UNROLL for (int r = 0; r < NR; r++) {
            const uint8_t *p = w + r * ws + k * sizeof(pl_block_q4_0);
            __m256i v = _mm256_inserti128_si256(
                _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(p + 2))),
                _mm_loadu_si128((const __m128i *)(p + 20)), 1);
            q1[r] = _mm256_and_si256(v, low);
            q2[r] = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
            dA[r] = f16_at(p);
            dB[r] = f16_at(p + 18);
        }
        UNROLL for (int b = 0; b < NB; b++) {
            const uint8_t *ab = a + b * as;
            __m256i x1 = _mm256_loadu_si256((const __m256i *)(ab + k * PL_QK));
            __m256i x2 = _mm256_loadu_si256((const __m256i *)(ab + k * PL_QK + 32));
            __m256i off = _mm256_add_epi16(_mm256_maddubs_epi16(eight, x1), _mm256_maddubs_epi16(eight, x2));
            const float *dx = (const float *)(ab + cols) + k;
            UNROLL for (int r = 0; r < NR; r++) {
                __m256i p16 = _mm256_add_epi16(_mm256_maddubs_epi16(q1[r], x1), _mm256_maddubs_epi16(q2[r], x2));
                __m256i s = _mm256_madd_epi16(_mm256_sub_epi16(p16, off), ones);
                __m256 sc = _mm256_set_m128(_mm_set1_ps(dB[r] * dx[1]), _mm_set1_ps(dA[r] * dx[0]));
                acc[r][b] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), sc, acc[r][b]);
            }
        }
    }
    if (k < nblk) { /* lone last block, natural order */
        __m256i q[4];
        float dA[4];
        UNROLL for (int r = 0; r < NR; r++) {
            const uint8_t *p = w + r * ws + k * sizeof(pl_block_q4_0);
            __m128i v = _mm_loadu_si128((const __m128i *)(p + 2));
            q[r] = _mm256_and_si256(_mm256_inserti128_si256(_mm256_castsi128_si256(v), _mm_srli_epi16(v, 4), 1), low);
            dA[r] = f16_at(p);
        }
        UNROLL for (int b = 0; b < NB; b++) {
            const uint8_t *ab = a + b * as;
            __m256i xv = _mm256_loadu_si256((const __m256i *)(ab + k * PL_QK));
            __m256i off = _mm256_maddubs_epi16(eight, xv);
            float dx = ((const float *)(ab + cols))[k];
            UNROLL for (int r = 0; r < NR; r++) {
                __m256i s = _mm256_madd_epi16(_mm256_sub_epi16(_mm256_maddubs_epi16(q[r], xv), off), ones);
                acc[r][b] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(dA[r] * dx), acc[r][b]);
            }
        }
    }
    STORE_TILE(acc);
}

PL_MM_TILE_4x2(tile_f32, f32_body)
PL_MM_TILE_4x2(tile_f16, f16_body)
PL_MM_TILE_4x2(tile_bf16, bf16_body)
PL_MM_TILE_4x2(tile_q8_0, q8_0_body)
PL_MM_TILE_4x2(tile_q4_0, q4_0_body)

int pl_mm_kernel_avx2(pl_dtype t, pl_mm_kernel *k) {
    k->tr = 4;
    k->tb = 2;
    k->gemm = NULL;
    switch (t) {
    case PL_DT_F32: k->fn = tile_f32; return 1;
    case PL_DT_F16: k->fn = tile_f16; k->gemm = pl_mm_gemm_f16_avx2; return 1;
    case PL_DT_BF16: k->fn = tile_bf16; return 1;
    case PL_DT_Q8_0: k->fn = tile_q8_0; return 1;
    case PL_DT_Q4_0: k->fn = tile_q4_0; return 1;
    case PL_DT_MXFP4: pl_mm_kernel_mxfp4_avx2(k); return 1;
    default: return pl_mm_kernel_avx2_kquant(t, k);
    }
}
