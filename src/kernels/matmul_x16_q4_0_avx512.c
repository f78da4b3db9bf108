/* kernels/matmul_x16_q4_0_avx512 — the x16 q4_0 layout's kernels on AVX-512 machines (layout
 * and arithmetic: matmul_x16_q4_0.c). The VNNI tiles are matmul_x16_avx512.c's, shared with
 * q8_0.
 *
 * Batches of 16 activation rows and more (AMX): the weights of 32 rows at a time are unpacked
 * into q8_0's x16 layout (a byte per quant, 0..15; 34 bytes per 32 columns and row, within L2)
 * and multiplied by q8_0's AMX batch kernel, which with q4_0's seeds (-8 * block sums) computes
 * exactly this layout's arithmetic. The unpacking costs one pass over the weights per batch.
 */
#include "kernels/matmul_kernels.h"
#include "kernels/quant.h"

#include "kernels/simd.h"

#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

enum { X16_BLOCK = 16 * sizeof(pl_block_q4_0), X16_BLOCK_Q8 = 16 * sizeof(pl_block_q8_0) };
enum { X16_BLOCK5 = 16 * sizeof(pl_block_q5_0) };

/* Groups [0, ng) of w (x16 q4_0, iq4_nl or q5_0: kind 0, 1, 2) into dst in q8_0's x16 layout:
 * q4_0's quants unpacked to 0..15, iq4_nl's looked up to its levels + 128, q5_0's to 0..31. */
static void unpack(const uint8_t *w, size_t ws, int ng, int64_t nblk, uint8_t *dst, int kind) {
    const size_t bsz = kind == 2 ? X16_BLOCK5 : X16_BLOCK;
    const __m512i c16 = _mm512_set1_epi8(16);
    const __m512i m4 = _mm512_set1_epi8(15);
    const __m512i lut = _mm512_broadcast_i32x4(
        _mm_add_epi8(_mm_loadu_si128((const __m128i *)pl_kvalues_iq4nl), _mm_set1_epi8((char)0x80)));
    for (int g = 0; g < ng; g++)
        for (int64_t k = 0; k < nblk; k++) {
            const uint8_t *s = w + (size_t)g * 16 * ws + (size_t)k * bsz;
            uint8_t *o = dst + ((size_t)g * (size_t)nblk + (size_t)k) * X16_BLOCK_Q8;
            _mm256_storeu_si256((__m256i *)o, _mm256_loadu_si256((const __m256i *)s));
            UNROLL for (int j = 0; j < 4; j++) {
                const __m512i v = _mm512_loadu_si512(s + 32 + 64 * j);
                __m512i lo = _mm512_and_si512(v, m4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
                if (kind == 1) {
                    lo = _mm512_shuffle_epi8(lut, lo);
                    hi = _mm512_shuffle_epi8(lut, hi);
                } else if (kind == 2) {
                    uint64_t m0, m1;
                    memcpy(&m0, s + 288 + 8 * j, 8);
                    memcpy(&m1, s + 288 + 8 * (j + 4), 8);
                    lo = _mm512_mask_add_epi8(lo, _cvtu64_mask64(m0), lo, c16);
                    hi = _mm512_mask_add_epi8(hi, _cvtu64_mask64(m1), hi, c16);
                }
                _mm512_storeu_si512(o + 32 + 64 * j, lo);
                _mm512_storeu_si512(o + 32 + 64 * (j + 4), hi);
            }
        }
}

static int gemm_amx_any(const uint8_t *w, size_t ws, int64_t nrows, const uint8_t *act, size_t as,
                        int64_t B, int64_t cols, float *y, int64_t ldy, int kind) {
    if (B < 16) return 0;
    const int64_t nblk = cols / PL_QK;
    const size_t ws8 = (size_t)nblk * sizeof(pl_block_q8_0);
    uint8_t *buf = aligned_alloc(64, (32 * ws8 + 63) / 64 * 64);
    if (!buf) return 0;
    for (int64_t r = 0; r < nrows; r += 32) {
        const int n = nrows - r >= 32 ? 32 : 16;
        unpack(w + (size_t)r * ws, ws, n / 16, nblk, buf, kind);
        pl_mm_gemm_x16_amx(buf, ws8, n, act, as, B, cols, y + r, ldy);
    }
    free(buf);
    return 1;
}

static int gemm_amx(const uint8_t *w, size_t ws, int64_t nrows, const uint8_t *act, size_t as,
                    int64_t B, int64_t cols, float *y, int64_t ldy) {
    return gemm_amx_any(w, ws, nrows, act, as, B, cols, y, ldy, 0);
}

static int gemm_amx_iq4_nl(const uint8_t *w, size_t ws, int64_t nrows, const uint8_t *act,
                           size_t as, int64_t B, int64_t cols, float *y, int64_t ldy) {
    return gemm_amx_any(w, ws, nrows, act, as, B, cols, y, ldy, 1);
}

static int gemm_amx_q5_0(const uint8_t *w, size_t ws, int64_t nrows, const uint8_t *act,
                         size_t as, int64_t B, int64_t cols, float *y, int64_t ldy) {
    return gemm_amx_any(w, ws, nrows, act, as, B, cols, y, ldy, 2);
}

void pl_mm_kernel_x16_q5_0_avx512(pl_mm_kernel *k, int amx) {
    k->fn = pl_mm_x16_tile_q5_0_avx512;
    k->gemm = amx ? gemm_amx_q5_0 : NULL;
    k->tr = 32;
    k->tr_small = 16; /* decode: one group, one stream a thread (matmul.c, tile_rows) */
    k->tb = 4;
}

void pl_mm_kernel_x16_q4_0_avx512(pl_mm_kernel *k, int amx) {
    k->fn = pl_mm_x16_tile_q4_0_avx512;
    k->gemm = amx ? gemm_amx : NULL;
    k->tr = 32;
    k->tr_small = 16; /* decode: one group, one stream a thread (matmul.c, tile_rows) */
    k->tb = 4;
}

/* q4_1, q5_1: VNNI tiles at every batch (q8_0's AMX kernel has no place for the m term) */
static void vnni_only(pl_mm_kernel *k, pl_mm_tile_fn fn) {
    k->fn = fn;
    k->gemm = NULL;
    k->tr = 32;
    k->tr_small = 16; /* decode: one group, one stream a thread (matmul.c, tile_rows) */
    k->tb = 4;
}

void pl_mm_kernel_x16_q4_1_avx512(pl_mm_kernel *k, int amx) {
    (void)amx;
    vnni_only(k, pl_mm_x16_tile_q4_1_avx512);
}

void pl_mm_kernel_x16_q5_1_avx512(pl_mm_kernel *k, int amx) {
    (void)amx;
    vnni_only(k, pl_mm_x16_tile_q5_1_avx512);
}

void pl_mm_kernel_x16_iq4_nl_avx512(pl_mm_kernel *k, int amx) {
    k->fn = pl_mm_x16_tile_iq4_nl_avx512;
    k->gemm = amx ? gemm_amx_iq4_nl : NULL;
    k->tr = 32;
    k->tr_small = 16; /* decode: one group, one stream a thread (matmul.c, tile_rows) */
    k->tb = 4;
}
