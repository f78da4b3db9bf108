/* kernels/matmul_x16_amx — the x16 layout's batch kernel with AMX (layout and arithmetic:
 * matmul_x16.c). For each 32-column block, tdpbsud multiplies 16 activation rows (an A tile:
 * their 32 signed bytes, read in place from the converted activations) by 16 weight rows (a B
 * tile: the block's 8 chunks, read in place from the repacked weights) into 16 x 16 exact
 * int32 sums; the AVX-512 epilogue then adds the seeds and does the float step of every output
 * (y itself is the accumulator, started at +0.0f), the same operations as the VNNI tiles.
 *
 * Tiles: 0-3 hold the sums of up to 2 activation tiles x 2 row groups, 4-5 the activation
 * tiles (16 rows x 32 bytes), 6-7 the weight tiles (8 rows x 64 bytes). The weights of a panel
 * of 2 groups (32 rows, at most 2 x 16 x row bytes: within L2) are swept by every 32 activation
 * rows in turn. Activation rows beyond the last multiple of 16 go to the VNNI tiles.
 */
#include "kernels/matmul_kernels.h"
#include "kernels/quant.h"

#include "kernels/simd.h"

#include <immintrin.h>
#include <string.h>

enum { X16_BLOCK = 16 * sizeof(pl_block_q8_0) };

typedef struct {
    uint8_t palette, start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

/* A constant in memory, not a local filled before use: GCC's _tile_loadconfig tells the compiler
 * it reads 8 bytes, so stores to a local's colsb/rows may be dropped as dead. */
static const tile_config configs[2] __attribute__((aligned(64))) = {
    {.palette = 1, /* K = 32 */
     .colsb = {64, 64, 64, 64, PL_QK, PL_QK, 64, 64},
     .rows = {16, 16, 16, 16, 16, 16, 8, 8}},
    {.palette = 1, /* K = 64 */
     .colsb = {64, 64, 64, 64, 64, 64, 64, 64},
     .rows = {16, 16, 16, 16, 16, 16, 16, 16}},
};

void pl_mm_amx_begin(int k64) { _tile_loadconfig(&configs[k64 ? 1 : 0]); }

typedef struct {
    const uint8_t *a;
    size_t as;
    int64_t cols, nblk;
    float *y;
    int64_t ldy;
} act_view;

/* Sums of a tile (16 activation rows from b, 16 weight rows) for block k: add the seeds, then
 * acc = fma(sum, d_w * d_x, acc), acc[m] being 16 floats of activation row b + m. (The
 * accumulators are a small contiguous block, not y itself: y's rows are often a power of two
 * apart and would all fall into the same few L1 sets.) */
AI void epilogue(const act_view *v, const int32_t (*sums)[16], __m512 dw, int64_t b, int64_t k,
                 float (*acc)[32]) {
    UNROLL for (int m = 0; m < 16; m++) {
        const uint8_t *ab = v->a + (size_t)(b + m) * v->as;
        const float *dx = (const float *)(ab + v->cols);
        const int32_t *seed = (const int32_t *)(dx + v->nblk);
        __m512i s = _mm512_add_epi32(_mm512_load_si512(sums[m]), _mm512_set1_epi32(seed[k]));
        _mm512_store_ps(acc[m], _mm512_fmadd_ps(_mm512_cvtepi32_ps(s),
                                                _mm512_mul_ps(dw, _mm512_set1_ps(dx[k])),
                                                _mm512_load_ps(acc[m])));
    }
}

/* Activation rows [b, b + 16 * NT) against row groups [r, r + 16 * NG) (NT, NG in 1..2). */
AI void block_tiles(const act_view *v, const uint8_t *w, size_t gs, int64_t b, int64_t r,
                    const int NT, const int NG) {
    int32_t sums[4][16][16] __attribute__((aligned(64)));
    float acc[32][32] __attribute__((aligned(64))); /* [activation row][weight row] */
    memset(acc, 0, sizeof acc);
    for (int64_t k = 0; k < v->nblk; k++) {
        const uint8_t *w0 = w + (size_t)k * X16_BLOCK, *w1 = w0 + gs;
        const uint8_t *a0 = v->a + (size_t)b * v->as + k * PL_QK, *a1 = a0 + 16 * v->as;
        _tile_zero(0);
        _tile_loadd(4, a0, v->as);
        _tile_loadd(6, w0 + 32, 64);
        _tile_dpbsud(0, 4, 6);
        _tile_stored(0, sums[0], 64);
        if (NG > 1) {
            _tile_zero(1);
            _tile_loadd(7, w1 + 32, 64);
            _tile_dpbsud(1, 4, 7);
            _tile_stored(1, sums[1], 64);
        }
        if (NT > 1) {
            _tile_zero(2);
            _tile_loadd(5, a1, v->as);
            _tile_dpbsud(2, 5, 6);
            _tile_stored(2, sums[2], 64);
            if (NG > 1) {
                _tile_zero(3);
                _tile_dpbsud(3, 5, 7);
                _tile_stored(3, sums[3], 64);
            }
        }
        const __m512 dw0 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)w0));
        epilogue(v, (const int32_t(*)[16])sums[0], dw0, b, k, (float(*)[32])&acc[0][0]);
        if (NG > 1) {
            const __m512 dw1 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)w1));
            epilogue(v, (const int32_t(*)[16])sums[1], dw1, b, k, (float(*)[32])&acc[0][16]);
            if (NT > 1)
                epilogue(v, (const int32_t(*)[16])sums[3], dw1, b + 16, k, (float(*)[32])&acc[16][16]);
        }
        if (NT > 1) epilogue(v, (const int32_t(*)[16])sums[2], dw0, b + 16, k, (float(*)[32])&acc[16][0]);
    }
    for (int m = 0; m < 16 * NT; m++)
        memcpy(v->y + (size_t)(b + m) * v->ldy + r, acc[m], (size_t)NG * 16 * sizeof(float));
}

int pl_mm_gemm_x16_amx(const uint8_t *w, size_t ws, int64_t nrows, const uint8_t *act,
                       size_t act_stride, int64_t B, int64_t cols, float *y, int64_t ldy) {
    if (B < 16) return 0;
    const act_view v = {.a = act, .as = act_stride, .cols = cols, .nblk = cols / PL_QK, .y = y,
                        .ldy = ldy};
    const size_t gs = 16 * ws;
    const int64_t bfull = B / 16 * 16;
    pl_mm_amx_begin(0);
    for (int64_t r = 0; r < nrows; r += 32) {
        const uint8_t *wp = w + (size_t)(r / 16) * gs;
        const int two = nrows - r >= 32;
        int64_t b = 0;
        for (; b + 32 <= bfull; b += 32) {
            if (two) block_tiles(&v, wp, gs, b, r, 2, 2);
            else block_tiles(&v, wp, gs, b, r, 2, 1);
        }
        if (b < bfull) {
            if (two) block_tiles(&v, wp, gs, b, r, 1, 2);
            else block_tiles(&v, wp, gs, b, r, 1, 1);
        }
        for (b = bfull; b < B; b += 4) {
            const int nb = B - b < 4 ? (int)(B - b) : 4;
            pl_mm_x16_tile_avx512(wp, ws, two ? 32 : 16, act + (size_t)b * act_stride, act_stride,
                                  nb, cols, y + (size_t)b * ldy + r, ldy);
        }
    }
    _tile_release();
    return 1;
}
