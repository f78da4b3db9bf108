/* kernels/matmul_x16_iq4_xs — iq4_xs weights in the x16 layout: the layout, the repacking, the
 * scalar kernel every other x16 iq4_xs kernel matches bit for bit, and the choice of kernel.
 * (The x16 hooks: matmul_x16.c; the VNNI tiles: matmul_x16_iq4_xs_avx512.c.)
 *
 * Layout. Rows in groups of 16; per group and super-block of 256 columns, 2208 bytes (16 x 138;
 * GGUF has 136: the 6-bit scales are kept as bytes):
 *
 *   0     d[16]       f16, row i at 2i
 *   32    sc[8][16]   int8: unit j's (32 columns) scale minus 32, row i at 32 + 16j + i
 *   160   q[8][4]     unit j, chunk c at 160 + 256j + 64c: byte 4i + t is row i's qs[16j + 4c + t]
 *                     (low nibble: column 32j + 4c + t, high: column 32j + 16 + 4c + t), as
 *                     q4_0's x16 chunks
 *
 * The nibbles index iq4_nl's 16 levels; the kernels look them up + 128 (unsigned bytes for
 * vpdpbusd) and start each unit's sum at -128 times its activations' sum (from the q8_K block's
 * bsums), so every unit's sum is exact. Activations: the K-quants' x16 rows (q8_K blocks).
 *
 * Arithmetic, per output (r, b) and super-block, integer parts exact in int32:
 *   A_j = -128 (bsums[2j] + bsums[2j + 1]) + sum_{unit j} (kvalues[q] + 128) x   (= sum kvalues[q] x)
 *   S   = sum_j sc_j A_j;   acc = fma((float)S, d * dx, acc)   super-blocks in order, acc from +0.0f
 */
#include "kernels/matmul_kernels.h"

#include "kernels/cpu.h"
#include "kernels/quant.h"

#include <math.h>
#include <string.h>

enum { GROUP = 16 * 138 };

size_t pl_mm_x16_iq4_xs_row_bytes(int64_t cols) { return (size_t)(cols / PL_QK_K) * 138; }

void pl_mm_x16_repack_iq4_xs(const uint8_t *src, uint8_t *dst, int64_t rows, int64_t cols) {
    const int64_t nsb = cols / PL_QK_K;
    const size_t ws = pl_dtype_row_size(PL_DT_IQ4_XS, cols);
    for (int64_t g = 0; g < rows / 16; g++)
        for (int64_t s = 0; s < nsb; s++) {
            uint8_t *o = dst + (size_t)(g * nsb + s) * GROUP;
            for (int i = 0; i < 16; i++) {
                const pl_block_iq4_xs *b = (const pl_block_iq4_xs *)(src + (size_t)(16 * g + i) * ws) + s;
                memcpy(o + 2 * i, &b->d, 2);
                for (int j = 0; j < 8; j++) {
                    o[32 + 16 * j + i] = (uint8_t)(int8_t)pl_iq4_xs_scale(b, j);
                    for (int c = 0; c < 4; c++) memcpy(o + 160 + 256 * j + 64 * c + 4 * i, b->qs + 16 * j + 4 * c, 4);
                }
            }
        }
}

/* The reference, one super-block of one output: exactly the arithmetic of the header comment. */
static float sb_ref(const uint8_t *o, int i, const pl_block_q8_K *x, float acc) {
    int32_t S = 0;
    for (int j = 0; j < 8; j++) {
        int32_t A = -128 * (x->bsums[2 * j] + x->bsums[2 * j + 1]);
        for (int c = 0; c < 4; c++)
            for (int t = 0; t < 4; t++) {
                const uint8_t v = o[160 + 256 * j + 64 * c + 4 * i + t];
                A += (pl_kvalues_iq4nl[v & 15] + 128) * x->qs[32 * j + 4 * c + t] +
                     (pl_kvalues_iq4nl[v >> 4] + 128) * x->qs[32 * j + 16 + 4 * c + t];
            }
        S += (int32_t)(int8_t)o[32 + 16 * j + i] * A;
    }
    pl_f16 d;
    memcpy(&d, o + 2 * i, sizeof d);
    return fmaf((float)S, pl_f16_to_f32(d) * x->d, acc);
}

static void tile_scalar(const uint8_t *w, size_t ws, int nr, const uint8_t *a, size_t as, int nb,
                        int64_t cols, float *y, int64_t ldy) {
    pl_mm_x16_sb_scalar(w, ws, nr, a, as, nb, cols, y, ldy, GROUP, sb_ref);
}

void pl_mm_kernel_x16_iq4_xs(pl_mm_kernel *k) {
    pl_mm_x16_choose(PL_DT_IQ4_XS, k, pl_mm_kernel_x16_iq4_xs_avx512, tile_scalar);
}
