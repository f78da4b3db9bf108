/* kernels/quant_mxfp4 — the mxfp4 weight type (OCP microscaling FP4, gpt-oss's expert weights):
 * its levels, dequantization and llama.cpp's reference quantizer (quant.h has the block layout).
 *
 * A block is 32 values sharing one E8M0 exponent e; each value is a 4-bit E2M1 code. GGML keeps
 * the E2M1 values doubled (integers 0..12, so the integer dot products of the kernels are exact)
 * and halves the scale to match: x = kvalues_mxfp4[code] * 2^(e - 128).
 */
#include "kernels/quant.h"

#include <math.h>

const int8_t pl_kvalues_mxfp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

void pl_dequant_mxfp4(const pl_block_mxfp4 *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n / PL_QK; i++, y += PL_QK) {
        const float d = pl_e8m0_half(x[i].e);
        for (int j = 0; j < PL_QK / 2; j++) {
            y[j] = pl_kvalues_mxfp4[x[i].qs[j] & 0xF] * d;
            y[j + PL_QK / 2] = pl_kvalues_mxfp4[x[i].qs[j] >> 4] * d;
        }
    }
}

/* The level index nearest to x at scale d (the first on a tie, so 0 maps to +0). */
static int best_index(float x, float d) {
    int best = 0;
    float err = fabsf(pl_kvalues_mxfp4[0] * d - x);
    for (int i = 1; i < 16; i++) {
        float e = fabsf(pl_kvalues_mxfp4[i] * d - x);
        if (e < err) best = i, err = e;
    }
    return best;
}

/* llama.cpp's quantize_row_mxfp4_ref: e = floor(log2(amax)) - 2 + 127, so that amax / 2^(e-127)
 * lies in [4, 8) and the largest level, 6 (12 doubled), is at most 1.5 amax. GGML casts the
 * float to uint8 unchecked; here an exponent out of 0..254 (amax below 2^-125, infinite or NaN)
 * is clamped, which leaves every finite row of normal magnitude bit-exact. */
void pl_quantize_mxfp4_ref(const float *x, pl_block_mxfp4 *y, int64_t n) {
    for (int64_t i = 0; i < n / PL_QK; i++, x += PL_QK) {
        float amax = 0.0f;
        for (int j = 0; j < PL_QK; j++)
            if (amax < fabsf(x[j])) amax = fabsf(x[j]);
        float ef = amax > 0.0f ? floorf(log2f(amax)) - 2 + 127 : 0.0f;
        uint8_t e = (uint8_t)(ef > 0.0f ? (ef < 254.0f ? ef : 254.0f) : 0.0f);
        const float d = pl_e8m0_half(e);
        y[i].e = e;
        for (int j = 0; j < PL_QK / 2; j++)
            y[i].qs[j] = (uint8_t)(best_index(x[j], d) | best_index(x[j + PL_QK / 2], d) << 4);
    }
}
