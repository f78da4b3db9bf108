/* kernels/matmul_x16_q5_K — q5_K weights in the x16 layout: the layout, the repacking, the scalar
 * kernel every other x16 q5_K kernel matches bit for bit, and the choice of kernel. (The x16
 * hooks: matmul_x16.c; the VNNI tile: q4_K's with Q5 set, matmul_x16_kq_avx512.c; the 256-bit
 * tiles: x16_kq_ymm.h.)
 *
 * Layout. q4_K's x16 layout (matmul_x16_kq.c: d, dmin, the scale words, the 32 nibble chunks,
 * 2304 bytes per 16-row group and super-block) followed by the fifth bits in 8 lines of 64 bytes
 * (2816 bytes = 16 x 176, as GGUF):
 *
 *   2304 + 64L   line L = 2p + c / 4 (pair p: units 2p, 2p + 1; chunks c = 0..7 of the pair):
 *                byte 4i + k holds, for each of the line's four chunks c (c' = c % 4), the fifth
 *                bits of row i's column 4c + k of unit 2p (bit 2c') and of unit 2p + 1 (bit
 *                2c' + 1)
 *
 * So one line serves four consecutive chunks of a pair and where a chunk's bits are depends only
 * on c: a tile takes each quant as nibble + 16 x fifth bit (0..31), the bit moved to bit 4 by a
 * 16-bit shift by a constant (4 - 2c' or 3 - 2c'; no byte's bit 4 receives its neighbour's) and
 * or-ed in. Activations: the K-quants' x16 rows (q8_K blocks with the unit pair sums).
 *
 * Arithmetic: q4_K's, per output (r, b) and super-block, integer parts exact in int32
 * (|S| <= 8 x 63 x 32 x 31 x 128):
 *   S = sum_j sc_j * sum_{unit j} q x,  M = sum_j m_j * xsum_j
 *   acc = fma((float)S, d * dx, acc);  acc = fma((float)-M, dmin * dx, acc)   super-blocks in order
 */
#include "kernels/matmul_kernels.h"

#include "kernels/cpu.h"
#include "kernels/quant.h"

#include <string.h>

enum { GROUP = 16 * 176, QH = 16 * 144 };

/* Byte offset in a group's super-block, and bit, of the fifth bit of unit u's column e (0..31)
 * of lane i. */
static size_t fifth_at(int i, int u, int e, int *bit) {
    const int c = e / 4;
    *bit = 2 * (c % 4) + u % 2;
    return QH + 64 * (size_t)(2 * (u / 2) + c / 4) + 4 * (size_t)i + (size_t)(e % 4);
}

void pl_mm_x16_repack_q5_K(const uint8_t *src, uint8_t *dst, int64_t rows, int64_t cols) {
    const int64_t nsb = cols / PL_QK_K;
    const size_t ws = pl_dtype_row_size(PL_DT_Q5_K, cols);
    /* q4_K's part: the same header and nibbles, so q4_K's repacking of 144-byte rows does it
     * (each block of this row without its qh) */
    pl_block_q4_K b4[16];
    for (int64_t g = 0; g < rows / 16; g++)
        for (int64_t s = 0; s < nsb; s++) {
            uint8_t *o = dst + (size_t)(g * nsb + s) * GROUP;
            memset(o + QH, 0, GROUP - QH);
            for (int i = 0; i < 16; i++) {
                const pl_block_q5_K *b = (const pl_block_q5_K *)(src + (size_t)(16 * g + i) * ws) + s;
                b4[i].d = b->d;
                b4[i].dmin = b->dmin;
                memcpy(b4[i].scales, b->scales, sizeof b4[i].scales);
                memcpy(b4[i].qs, b->qs, sizeof b4[i].qs);
                for (int u = 0; u < 8; u++) /* GGUF: bit u of qh[e] for unit u's column e */
                    for (int e = 0; e < 32; e++) {
                        int bit;
                        const size_t at = fifth_at(i, u, e, &bit);
                        o[at] |= (uint8_t)(((b->qh[e] >> u) & 1) << bit);
                    }
            }
            pl_mm_x16_kq_repack(PL_DT_Q4_K, (const uint8_t *)b4, o, 16, PL_QK_K);
        }
}

/* The reference, one super-block of one output: exactly the arithmetic of the header comment. */
static float sb_ref(const uint8_t *o, int i, const pl_block_q8_K *x, float acc) {
    int32_t S = 0, M = 0;
    for (int j = 0; j < 8; j++) {
        int32_t isum = 0, xsum = 0;
        for (int e = 0; e < 32; e++) {
            const int c = e / 4, k = e % 4;
            const uint8_t v = o[256 + 64 * (8 * (j / 2) + c) + 4 * i + k];
            int bit;
            const size_t at = fifth_at(i, j, e, &bit);
            const int q = (j % 2 ? v >> 4 : v & 0xF) | ((o[at] >> bit) & 1) << 4;
            isum += q * x->qs[32 * j + e];
            xsum += x->qs[32 * j + e];
        }
        const uint32_t v = pl_mm_x16_q4_K_pair(o, i, j / 2) >> 6 * (j % 2);
        S += (int32_t)(v & 63) * isum;
        M += (int32_t)(v >> 12 & 63) * xsum;
    }
    return pl_mm_x16_sb_fma2(o, i, x->d, S, M, acc);
}

static void tile_scalar(const uint8_t *w, size_t ws, int nr, const uint8_t *a, size_t as, int nb,
                        int64_t cols, float *y, int64_t ldy) {
    pl_mm_x16_sb_scalar(w, ws, nr, a, as, nb, cols, y, ldy, GROUP, sb_ref);
}

void pl_mm_kernel_x16_q5_K(pl_mm_kernel *k) {
    pl_mm_x16_choose(PL_DT_Q5_K, k, pl_mm_kernel_x16_q5_K_avx512, tile_scalar);
}
