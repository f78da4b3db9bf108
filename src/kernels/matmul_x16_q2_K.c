/* kernels/matmul_x16_q2_K — q2_K weights in the x16 layout: the layout, the repacking, the scalar
 * kernel every other x16 q2_K kernel matches bit for bit, and the choice of kernel. (The x16
 * hooks: matmul_x16.c; the VNNI tiles: matmul_x16_q2_K_avx512.c.)
 *
 * Layout. Rows in groups of 16; per group and super-block of 256 columns, 1344 bytes (16 x 84,
 * as GGUF):
 *
 *   0     d[16]        f16, row i at 2i
 *   32    dmin[16]     f16
 *   64    sc[8][16][2] GGUF's scale bytes (low nibble: scale, high: min) of sub-blocks 2p, 2p + 1
 *                      (16 columns each) of row i at 64 + 32p + 2i
 *   320   q[2][8]      chunk (n, c) at 320 + 64 (8n + c): byte 4i + t is row i's qs[32n + 4c + t],
 *                      whose bits 2j..2j + 1 are column 128n + 32j + 4c + t (GGUF's packing)
 *
 * So one 64-byte load gives four vpdpbusd operands (shift by 2j, and 3): columns 4c..4c + 3 of
 * the 32-column span 128n + 32j, chunks c < 4 in sub-block 8n + 2j, the others in the next.
 * Activations: the K-quants' x16 rows (q8_K blocks with their 16-column sums).
 *
 * Arithmetic, per output (r, b) and super-block, integer parts exact in int32:
 *   S = sum_k sc_k sum_{sub-block k} q x,  M = sum_k m_k bsums_k
 *   acc = fma((float)S, d * dx, acc);  acc = fma((float)-M, dmin * dx, acc)   super-blocks in order
 */
#include "kernels/matmul_kernels.h"

#include "kernels/cpu.h"
#include "kernels/quant.h"

#include <string.h>

enum { GROUP = 16 * 84 };

void pl_mm_x16_repack_q2_K(const uint8_t *src, uint8_t *dst, int64_t rows, int64_t cols) {
    const int64_t nsb = cols / PL_QK_K;
    const size_t ws = pl_dtype_row_size(PL_DT_Q2_K, cols);
    for (int64_t g = 0; g < rows / 16; g++)
        for (int64_t s = 0; s < nsb; s++) {
            uint8_t *o = dst + (size_t)(g * nsb + s) * GROUP;
            for (int i = 0; i < 16; i++) {
                const pl_block_q2_K *b = (const pl_block_q2_K *)(src + (size_t)(16 * g + i) * ws) + s;
                memcpy(o + 2 * i, &b->d, 2);
                memcpy(o + 32 + 2 * i, &b->dmin, 2);
                for (int p = 0; p < 8; p++) memcpy(o + 64 + 32 * p + 2 * i, b->scales + 2 * p, 2);
                for (int n = 0; n < 2; n++)
                    for (int c = 0; c < 8; c++) memcpy(o + 320 + 64 * (8 * n + c) + 4 * i, b->qs + 32 * n + 4 * c, 4);
            }
        }
}

/* The reference, one super-block of one output: exactly the arithmetic of the header comment. */
static float sb_ref(const uint8_t *o, int i, const pl_block_q8_K *x, float acc) {
    int32_t S = 0, M = 0;
    for (int k = 0; k < 16; k++) {
        const uint8_t scm = o[64 + 32 * (k / 2) + 2 * i + k % 2];
        const int n = k / 8, j = (k % 8) / 2, half = k % 2;
        int32_t isum = 0;
        for (int c = 4 * half; c < 4 * half + 4; c++)
            for (int t = 0; t < 4; t++)
                isum += ((o[320 + 64 * (8 * n + c) + 4 * i + t] >> (2 * j)) & 3) *
                        x->qs[128 * n + 32 * j + 4 * c + t];
        S += (scm & 0xF) * isum;
        M += (scm >> 4) * x->bsums[k];
    }
    return pl_mm_x16_sb_fma2(o, i, x->d, S, M, acc);
}

static void tile_scalar(const uint8_t *w, size_t ws, int nr, const uint8_t *a, size_t as, int nb,
                        int64_t cols, float *y, int64_t ldy) {
    pl_mm_x16_sb_scalar(w, ws, nr, a, as, nb, cols, y, ldy, GROUP, sb_ref);
}

void pl_mm_kernel_x16_q2_K(pl_mm_kernel *k) {
    pl_mm_x16_choose(PL_DT_Q2_K, k, pl_mm_kernel_x16_q2_K_avx512, tile_scalar);
}
