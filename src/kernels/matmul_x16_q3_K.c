/* kernels/matmul_x16_q3_K — q3_K weights in the x16 layout: the layout, the repacking, the scalar
 * kernel every other x16 q3_K kernel matches bit for bit, and the choice of kernel. (The x16
 * hooks: matmul_x16.c; the VNNI tile: q2_K's with Q3 set, matmul_x16_q2_K_avx512.c; the 256-bit
 * tiles: x16_kq_ymm.h.)
 *
 * Layout. Rows in groups of 16; per group and super-block of 256 columns, 1824 bytes (16 x 114;
 * GGUF has 110: the 6-bit scales are kept as bytes):
 *
 *   0     d[16]        f16, row i at 2i
 *   32    sc[8][16][2] int8: the scales minus 32 of sub-blocks 2p, 2p + 1 (16 columns each) of
 *                      row i at 32 + 32p + 2i (q6_K's arrangement)
 *   288   q[2][8]      q2_K's chunks: chunk (n, c) at 288 + 64 (8n + c), byte 4i + t is row i's
 *                      qs[32n + 4c + t], whose bits 2j..2j + 1 are the low bits of column
 *                      128n + 32j + 4c + t (GGUF's packing)
 *   1312  h[2][4]      the third bits: line (n, j) at 1312 + 64 (4n + j), byte 4i + t, bit c is
 *                      that of row i's column 128n + 32j + 4c + t (GGUF's hmask[4c + t], bit
 *                      4n + j)
 *
 * A chunk gives four vpdpbusd operands as q2_K's (shift by 2j, and 3); field j of chunk c takes
 * bit c of line (n, j) as its bit 2 (a 16-bit shift by the constant c - 2 of the unrolled chunk
 * loop: no byte's bit 2 receives its neighbour's), so the quant is u = 0..7 and the value u - 4.
 * Sub-block k = 8n + 2j + (c >= 4). Activations: the K-quants' x16 rows (q8_K blocks with their
 * 16-column sums).
 *
 * Arithmetic, per output (r, b) and super-block, integer parts exact in int32:
 *   S = sum_k sc_k sum_{sub-block k} u x,  O = sum_k sc_k bsums_k
 *   acc = fma((float)(S - 4 O), d * dx, acc)   super-blocks in order, acc from +0.0f
 */
#include "kernels/matmul_kernels.h"

#include "kernels/cpu.h"
#include "kernels/quant.h"

#include <math.h>
#include <string.h>

enum { GROUP = 16 * 114, SC = 32, QS = 288, H = 1312 };

size_t pl_mm_x16_q3_K_row_bytes(int64_t cols) { return (size_t)(cols / PL_QK_K) * 114; }

void pl_mm_x16_repack_q3_K(const uint8_t *src, uint8_t *dst, int64_t rows, int64_t cols) {
    const int64_t nsb = cols / PL_QK_K;
    const size_t ws = pl_dtype_row_size(PL_DT_Q3_K, cols);
    for (int64_t g = 0; g < rows / 16; g++)
        for (int64_t s = 0; s < nsb; s++) {
            uint8_t *o = dst + (size_t)(g * nsb + s) * GROUP;
            memset(o + H, 0, GROUP - H);
            for (int i = 0; i < 16; i++) {
                const pl_block_q3_K *b = (const pl_block_q3_K *)(src + (size_t)(16 * g + i) * ws) + s;
                int8_t sc[16];
                pl_q3_K_scales(b->scales, sc);
                memcpy(o + 2 * i, &b->d, 2);
                for (int p = 0; p < 8; p++) {
                    o[SC + 32 * p + 2 * i] = (uint8_t)sc[2 * p];
                    o[SC + 32 * p + 2 * i + 1] = (uint8_t)sc[2 * p + 1];
                }
                for (int n = 0; n < 2; n++)
                    for (int c = 0; c < 8; c++) {
                        memcpy(o + QS + 64 * (8 * n + c) + 4 * i, b->qs + 32 * n + 4 * c, 4);
                        for (int j = 0; j < 4; j++)
                            for (int t = 0; t < 4; t++)
                                o[H + 64 * (4 * n + j) + 4 * i + t] |=
                                    (uint8_t)(((b->hmask[4 * c + t] >> (4 * n + j)) & 1) << c);
                    }
            }
        }
}

static float f16_at(const uint8_t *p) {
    pl_f16 h;
    memcpy(&h, p, sizeof h);
    return pl_f16_to_f32(h);
}

/* The reference, one super-block of one output: exactly the arithmetic of the header comment. */
static float sb_ref(const uint8_t *o, int i, const pl_block_q8_K *x, float acc) {
    int32_t S = 0, O = 0;
    for (int k = 0; k < 16; k++) {
        const int n = k / 8, j = (k % 8) / 2, half = k % 2;
        const int32_t sc = (int8_t)o[SC + 32 * (k / 2) + 2 * i + half];
        int32_t isum = 0;
        for (int c = 4 * half; c < 4 * half + 4; c++)
            for (int t = 0; t < 4; t++) {
                const int u = ((o[QS + 64 * (8 * n + c) + 4 * i + t] >> (2 * j)) & 3) |
                              ((o[H + 64 * (4 * n + j) + 4 * i + t] >> c) & 1) << 2;
                isum += u * x->qs[128 * n + 32 * j + 4 * c + t];
            }
        S += sc * isum;
        O += sc * x->bsums[k];
    }
    return fmaf((float)(S - 4 * O), f16_at(o + 2 * i) * x->d, acc);
}

static void tile_scalar(const uint8_t *w, size_t ws, int nr, const uint8_t *a, size_t as, int nb,
                        int64_t cols, float *y, int64_t ldy) {
    pl_mm_x16_sb_scalar(w, ws, nr, a, as, nb, cols, y, ldy, GROUP, sb_ref);
}

void pl_mm_kernel_x16_q3_K(pl_mm_kernel *k) {
    pl_mm_x16_choose(PL_DT_Q3_K, k, pl_mm_kernel_x16_q3_K_avx512, tile_scalar);
}
