/* kernels/matmul_mxfp4 — the scalar mxfp4 x q8_0 tile (the reference the AVX2 and AVX-512 tiles
 * of matmul_mxfp4_avx2.c / _avx512.c are tested against), as llama.cpp's
 * ggml_vec_dot_mxfp4_q8_0: per 32-block the exact integer sum of level * quant, then
 * sum += (float)isum * (d_w * d_x) in block order, d_w = 2^(e - 128) (pl_e8m0_half). */
#include "kernels/matmul_kernels.h"

static float dot_mxfp4(const uint8_t *w, const uint8_t *act, int64_t cols) {
    const pl_block_mxfp4 *blk = (const pl_block_mxfp4 *)w;
    const int8_t *xq = (const int8_t *)act;
    const float *xd = (const float *)(act + cols);
    float s = 0.0f;
    for (int64_t b = 0; b < cols / PL_QK; b++, xq += PL_QK) {
        int32_t isum = 0;
        for (int j = 0; j < PL_QK / 2; j++)
            isum += pl_kvalues_mxfp4[blk[b].qs[j] & 0xF] * xq[j] +
                    pl_kvalues_mxfp4[blk[b].qs[j] >> 4] * xq[j + PL_QK / 2];
        s += (float)isum * (pl_e8m0_half(blk[b].e) * xd[b]);
    }
    return s;
}

static void tile_mxfp4(const uint8_t *w, size_t ws, int nr, const uint8_t *act, size_t as, int nb,
                       int64_t cols, float *y, int64_t ldy) {
    for (int b = 0; b < nb; b++)
        for (int r = 0; r < nr; r++) y[b * ldy + r] = dot_mxfp4(w + (size_t)r * ws, act + (size_t)b * as, cols);
}

void pl_mm_kernel_mxfp4_scalar(pl_mm_kernel *k) {
    *k = (pl_mm_kernel){.fn = tile_mxfp4, .tr = 4, .tb = 4};
}
