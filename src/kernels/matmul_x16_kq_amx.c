/* kernels/matmul_x16_kq_amx — q4_K's x16 layout in batches of 16+ activation rows with AMX
 * (layout and arithmetic: matmul_x16_kq.c). A thread takes its 16-row groups one at a time:
 * the group's nibbles are unpacked once into bytes (per super-block and 32-column unit, 8 rows
 * of 64 bytes: an AMX B tile), then every 16 or 32 activation rows sweep them. Per unit,
 * tdpbsud gives the 16 x 16 exact sums of the unit; the epilogue multiplies them by the unit's
 * scales (per weight row) into the super-block's int32 sums; at the end of a super-block the
 * mins go through vpdpwssd and the float step is the VNNI tiles' (same bits).
 */
#include "kernels/matmul_kernels.h"
#include "kernels/quant.h"

#include "kernels/simd.h"

#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

enum { GROUP = 16 * 148 }; /* bytes of a 16-row group's super-block */

typedef struct {
    const uint8_t *a;
    size_t as;
    int64_t nsb;
} acts;

/* Activation rows [b, b + 16 * NT) against the unpacked group u (super-blocks of o): y rows. */
AI void tiles(const acts *v, const uint8_t *o, const uint8_t *u, int64_t b, float *y,
              int64_t ldy, const int NT) {
    int32_t c[2][16][16] __attribute__((aligned(64)));
    int32_t S[32][16] __attribute__((aligned(64)));
    float acc[32][16] __attribute__((aligned(64)));
    memset(acc, 0, sizeof acc);
    for (int64_t s = 0; s < v->nsb; s++) {
        const uint8_t *os = o + (size_t)s * GROUP;
        const uint8_t *a0 = v->a + (size_t)b * v->as + (size_t)s * sizeof(pl_block_q8_K) + 4;
        for (int j = 0; j < 8; j++) {
            _tile_loadd(6, u + (size_t)(8 * s + j) * 512, 64);
            _tile_zero(0);
            _tile_loadd(4, a0 + 32 * j, v->as);
            _tile_dpbsud(0, 4, 6);
            _tile_stored(0, c[0], 64);
            if (NT > 1) {
                _tile_zero(1);
                _tile_loadd(5, a0 + 32 * j + 16 * v->as, v->as);
                _tile_dpbsud(1, 5, 6);
                _tile_stored(1, c[1], 64);
            }
            const __m512i sc = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(os + 64 + 16 * j)));
            for (int t = 0; t < NT; t++)
                UNROLL for (int m = 0; m < 16; m++) {
                    __m512i p = _mm512_mullo_epi32(_mm512_load_si512(c[t][m]), sc);
                    if (j) p = _mm512_add_epi32(p, _mm512_load_si512(S[16 * t + m]));
                    _mm512_store_si512(S[16 * t + m], p);
                }
        }
        __m512i mv[4];
        UNROLL for (int p = 0; p < 4; p++)
            mv[p] = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)(os + 192 + 32 * p)));
        const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)os));
        const __m512 dmin = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(os + 32)));
        for (int m = 0; m < 16 * NT; m++) {
            const uint8_t *ab = v->a + (size_t)(b + m) * v->as;
            const pl_block_q8_K *x = (const pl_block_q8_K *)ab + s;
            const int32_t *xs = (const int32_t *)(ab + (size_t)v->nsb * sizeof(pl_block_q8_K)) + 4 * s;
            __m512i M = _mm512_setzero_si512();
            UNROLL for (int p = 0; p < 4; p++) M = _mm512_dpwssd_epi32(M, mv[p], _mm512_set1_epi32(xs[p]));
            const __m512 dx = _mm512_set1_ps(x->d);
            __m512 f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(S[m])),
                                       _mm512_mul_ps(d, dx), _mm512_load_ps(acc[m]));
            f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_setzero_si512(), M)),
                                _mm512_mul_ps(dmin, dx), f);
            _mm512_store_ps(acc[m], f);
        }
    }
    for (int m = 0; m < 16 * NT; m++) memcpy(y + (size_t)(b + m) * ldy, acc[m], sizeof acc[m]);
}

/* The group's quants as bytes: per super-block s and unit j, 8 chunks of 64 (u + (8s + j) * 512). */
static void unpack(const uint8_t *o, int64_t nsb, uint8_t *u) {
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    for (int64_t s = 0; s < nsb; s++)
        for (int p = 0; p < 4; p++)
            for (int c = 0; c < 8; c++) {
                const __m512i v = _mm512_loadu_si512(o + (size_t)s * GROUP + 320 + 64 * (8 * p + c));
                _mm512_store_si512(u + (size_t)(8 * s + 2 * p) * 512 + 64 * c, _mm512_and_si512(v, low4));
                _mm512_store_si512(u + (size_t)(8 * s + 2 * p + 1) * 512 + 64 * c,
                                   _mm512_and_si512(_mm512_srli_epi16(v, 4), low4));
            }
}

int pl_mm_gemm_x16_q4_K_amx(const uint8_t *w, size_t ws, int64_t nrows, const uint8_t *act,
                            size_t act_stride, int64_t B, int64_t cols, float *y, int64_t ldy) {
    if (B < 16) return 0;
    const int64_t nsb = cols / PL_QK_K;
    uint8_t *u = aligned_alloc(64, (size_t)nsb * 8 * 512);
    if (!u) return 0;
    const acts v = {.a = act, .as = act_stride, .nsb = nsb};
    const int64_t bfull = B / 16 * 16;
    pl_mm_amx_begin();
    for (int64_t r = 0; r < nrows; r += 16) {
        const uint8_t *o = w + (size_t)r * ws;
        unpack(o, nsb, u);
        int64_t b = 0;
        for (; b + 32 <= bfull; b += 32) tiles(&v, o, u, b, y + r, ldy, 2);
        if (b < bfull) tiles(&v, o, u, b, y + r, ldy, 1);
        for (b = bfull; b < B; b += 4) {
            const int nb = B - b < 4 ? (int)(B - b) : 4;
            pl_mm_x16_q4_K_tile_avx512(o, ws, 16, act + (size_t)b * act_stride, act_stride, nb,
                                       cols, y + (size_t)b * ldy + r, ldy);
        }
    }
    _tile_release();
    free(u);
    return 1;
}
