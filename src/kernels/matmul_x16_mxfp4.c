/* kernels/matmul_x16_mxfp4 — mxfp4 weights (gpt-oss's experts) in the x16 layout (issue 34): the
 * layout, the repacking, the scalar kernel every other x16 mxfp4 kernel matches bit for bit, and
 * the choice of kernel. (The x16 hooks: matmul_x16.c; the VNNI tiles: x16_body of
 * matmul_x16_avx512.c; AVX2 and AVX-VNNI: x16_mxfp4_ymm.h.)
 *
 * Layout. Rows in groups of 16; a group holds, for each block k of 32 columns, 272 bytes (16 x
 * 17, as GGUF, so decode reads no more than before):
 *
 *   bytes 0..15     the 16 rows' E8M0 exponents e, row i at i
 *   bytes 16..271   4 chunks of 64 bytes; byte 4i + t of chunk j is row i's qs[4j + t] (low
 *                   nibble: column 4j + t, high: column 16 + 4j + t), as q4_0's x16 chunks
 *
 * The nibbles index kvalues_mxfp4 (-12..12); the kernels look them up + 12 (unsigned bytes
 * 0..24: vpdpbusd's unsigned operand, and small enough that AVX2's vpmaddubsw pair sums of two
 * chunks cannot saturate: 4 x 24 x 128 < 2^15) and take q8_0's activations with seeds
 * -12 x block sums (matmul_x16.c, act_q8_0), so every block's sum is exact.
 *
 * Arithmetic, identical in every x16 mxfp4 kernel: for output (r, b),
 *   isum_k = seed_k + sum_{i<32} (kvalues[q_i] + 12) * x_i                 (exact, int32)
 *   acc    = fma((float)isum_k, e8m0_half(e) * d_x, acc)  for k in order, acc from +0.0f
 * (the rows layout adds isum * (d_w d_x) without the fma, as llama.cpp: docs/ACCURACY.md).
 */
#include "kernels/matmul_kernels.h"

#include "kernels/cpu.h"
#include "kernels/quant.h"

#include <math.h>
#include <string.h>

enum { X16_BLOCK = 16 * sizeof(pl_block_mxfp4) }; /* 272: one block of 32 columns, 16 rows */

void pl_mm_x16_repack_mxfp4(const uint8_t *src, uint8_t *dst, int64_t rows, int64_t cols) {
    const int64_t nb = cols / PL_QK;
    const size_t ws = (size_t)nb * sizeof(pl_block_mxfp4);
    for (int64_t r = 0; r < rows; r++) {
        const pl_block_mxfp4 *row = (const pl_block_mxfp4 *)(src + (size_t)r * ws);
        const int i = (int)(r % 16);
        for (int64_t k = 0; k < nb; k++) {
            uint8_t *o = dst + (size_t)(r / 16) * 16 * ws + (size_t)k * X16_BLOCK;
            o[i] = row[k].e;
            for (int j = 0; j < 4; j++) memcpy(o + 16 + 64 * j + 4 * i, row[k].qs + 4 * j, 4);
        }
    }
}

/* Output (row i of the group at grp, activation row ab): exactly the header's arithmetic. */
static float dot_x16(const uint8_t *grp, int i, const uint8_t *ab, int64_t cols) {
    const int64_t nblk = cols / PL_QK;
    const int8_t *xq = (const int8_t *)ab;
    const float *dx = (const float *)(ab + cols);
    const int32_t *seed = (const int32_t *)(dx + nblk);
    float acc = 0.0f;
    for (int64_t k = 0; k < nblk; k++) {
        const uint8_t *o = grp + (size_t)k * X16_BLOCK;
        const int8_t *x = xq + k * PL_QK;
        int32_t isum = seed[k];
        for (int j = 0; j < 4; j++)
            for (int t = 0; t < 4; t++) {
                const uint8_t v = o[16 + 64 * j + 4 * i + t];
                isum += (pl_kvalues_mxfp4[v & 15] + 12) * x[4 * j + t] +
                        (pl_kvalues_mxfp4[v >> 4] + 12) * x[16 + 4 * j + t];
            }
        acc = fmaf((float)isum, pl_e8m0_half(o[i]) * dx[k], acc);
    }
    return acc;
}

static void tile_scalar(const uint8_t *w, size_t ws, int nr, const uint8_t *a, size_t as, int nb,
                        int64_t cols, float *y, int64_t ldy) {
    for (int r = 0; r < nr; r++)
        for (int b = 0; b < nb; b++)
            y[(size_t)b * ldy + r] = dot_x16(w + (size_t)(r / 16) * 16 * ws, r % 16, a + (size_t)b * as, cols);
}

void pl_mm_kernel_x16_mxfp4(pl_mm_kernel *k) {
    const pl_isa isa = pl_cpu_isa();
    k->gemm = NULL;
    k->fn = tile_scalar;
    k->tr = 16;
    k->tb = 4;
    if (isa >= PL_ISA_AVX512) pl_mm_kernel_x16_mxfp4_avx512(k);
    else if (pl_cpu_avxvnni()) pl_mm_kernel_x16_mxfp4_avxvnni(k);
    else if (isa >= PL_ISA_AVX2) pl_mm_kernel_x16_mxfp4_avx2(k);
}
