/* kernels/quant_kw — weight quantizers for q4_K, q5_K and q6_K (mkmodel's q4_k_m and q5_k_m
 * files), written from the block layouts in quant.h, the exact inverses of pl_dequant_q4_K /
 * pl_dequant_q5_K / pl_dequant_q6_K.
 *
 * They are simple, not llama.cpp's: each sub-block takes the scale that spans its own range
 * (q4_K, q5_K: min..max over 15 or 31 steps with the min as the offset; q6_K: max |x| over 31
 * steps), the super-block scales are the largest of those over 63 (q4_K, q5_K) or 127 (q6_K), every 6/8-bit
 * sub-block scale is rounded against the f16-rounded super-block scale, and the quants are
 * rounded against the scale actually stored. llama.cpp searches the scales iteratively for a
 * lower error; the layout, and so every kernel's speed, is the same.
 */
#include "kernels/quant.h"

#include <math.h>
#include <string.h>

static int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* 6-bit scales and mins of the 8 sub-blocks into the 12-byte packing of pl_get_scale_min_k4. */
static void pack_scales_k4(const uint8_t *sc, const uint8_t *m, uint8_t *q) {
    for (int j = 0; j < 4; j++) {
        q[j] = (uint8_t)((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
        q[j + 4] = (uint8_t)((m[j] & 63) | ((m[j + 4] >> 4) << 6));
        q[j + 8] = (uint8_t)((sc[j + 4] & 0xF) | ((m[j + 4] & 0xF) << 4));
    }
}

/* One q4_K / q5_K super-block (nmax 15 / 31 steps): d, dmin, the packed scales, and the quants
 * q[e] in 0..nmax in column order. */
static void quantize_k_sb(const float *x, int nmax, pl_f16 *dp, pl_f16 *dminp, uint8_t scales[12],
                          uint8_t q[PL_QK_K]) {
    float scale[8], minv[8], smax = 0.0f, mmax = 0.0f;
    for (int j = 0; j < 8; j++) {
        float lo = 0.0f, hi = -INFINITY; /* the offset is a min <= 0 (stored negated) */
        for (int l = 0; l < 32; l++) {
            float v = x[32 * j + l];
            lo = v < lo ? v : lo;
            hi = v > hi ? v : hi;
        }
        scale[j] = (hi - lo) / (float)nmax;
        minv[j] = -lo;
        smax = scale[j] > smax ? scale[j] : smax;
        mmax = minv[j] > mmax ? minv[j] : mmax;
    }
    *dp = pl_f32_to_f16(smax / 63.0f);
    *dminp = pl_f32_to_f16(mmax / 63.0f);
    float d = pl_f16_to_f32(*dp), dmin = pl_f16_to_f32(*dminp);
    uint8_t sc[8], m[8];
    for (int j = 0; j < 8; j++) {
        sc[j] = (uint8_t)(d > 0 ? clampi(pl_nearest_int(scale[j] / d), 0, 63) : 0);
        m[j] = (uint8_t)(dmin > 0 ? clampi(pl_nearest_int(minv[j] / dmin), 0, 63) : 0);
    }
    pack_scales_k4(sc, m, scales);
    for (int j = 0; j < 8; j++) {
        float ds = d * sc[j], dm = dmin * m[j];
        for (int l = 0; l < 32; l++)
            q[32 * j + l] =
                (uint8_t)(ds > 0 ? clampi(pl_nearest_int((x[32 * j + l] + dm) / ds), 0, nmax) : 0);
    }
}

void pl_quantize_q4_K_ref(const float *x, pl_block_q4_K *y, int64_t n) {
    for (int64_t i = 0; i < n / PL_QK_K; i++, x += PL_QK_K) {
        uint8_t q[PL_QK_K];
        quantize_k_sb(x, 15, &y[i].d, &y[i].dmin, y[i].scales, q);
        /* byte l of 64-group g: element 64g + l low, 64g + 32 + l high */
        for (int g = 0; g < 4; g++)
            for (int l = 0; l < 32; l++)
                y[i].qs[32 * g + l] = (uint8_t)(q[64 * g + l] | (q[64 * g + 32 + l] << 4));
    }
}

void pl_quantize_q5_K_ref(const float *x, pl_block_q5_K *y, int64_t n) {
    for (int64_t i = 0; i < n / PL_QK_K; i++, x += PL_QK_K) {
        uint8_t q[PL_QK_K];
        quantize_k_sb(x, 31, &y[i].d, &y[i].dmin, y[i].scales, q);
        /* q4_K's nibbles; bit j of qh[l] is the 5th bit of sub-block j's element l */
        memset(y[i].qh, 0, sizeof y[i].qh);
        for (int g = 0; g < 4; g++)
            for (int l = 0; l < 32; l++)
                y[i].qs[32 * g + l] = (uint8_t)((q[64 * g + l] & 15) | (q[64 * g + 32 + l] & 15) << 4);
        for (int j = 0; j < 8; j++)
            for (int l = 0; l < 32; l++) y[i].qh[l] |= (uint8_t)((q[32 * j + l] >> 4) << j);
    }
}

void pl_quantize_q6_K_ref(const float *x, pl_block_q6_K *y, int64_t n) {
    for (int64_t i = 0; i < n / PL_QK_K; i++, x += PL_QK_K) {
        float scale[16], smax = 0.0f;
        for (int s = 0; s < 16; s++) {
            float amax = 0.0f;
            for (int l = 0; l < 16; l++) amax = fmaxf(amax, fabsf(x[16 * s + l]));
            scale[s] = amax / 31.0f;
            smax = scale[s] > smax ? scale[s] : smax;
        }
        y[i].d = pl_f32_to_f16(smax / 127.0f);
        float d = pl_f16_to_f32(y[i].d);
        uint8_t u[PL_QK_K]; /* q + 32, 0..63 */
        for (int s = 0; s < 16; s++) {
            int sc = d > 0 ? clampi(pl_nearest_int(scale[s] / d), 0, 127) : 0;
            y[i].scales[s] = (int8_t)sc;
            float ds = d * (float)sc;
            for (int l = 0; l < 16; l++) {
                int q = ds > 0 ? clampi(pl_nearest_int(x[16 * s + l] / ds), -32, 31) : 0;
                u[16 * s + l] = (uint8_t)(q + 32);
            }
        }
        /* half h, l < 32: ql[l] = e(l) | e(l+64) << 4, ql[l+32] = e(l+32) | e(l+96) << 4,
         * qh[l] = high bits of e(l), e(l+32), e(l+64), e(l+96) at bits 0, 2, 4, 6 */
        for (int h = 0; h < 2; h++) {
            const uint8_t *e = u + 128 * h;
            uint8_t *ql = y[i].ql + 64 * h, *qh = y[i].qh + 32 * h;
            for (int l = 0; l < 32; l++) {
                ql[l] = (uint8_t)((e[l] & 0xF) | ((e[l + 64] & 0xF) << 4));
                ql[l + 32] = (uint8_t)((e[l + 32] & 0xF) | ((e[l + 96] & 0xF) << 4));
                qh[l] = (uint8_t)((e[l] >> 4) | ((e[l + 32] >> 4) << 2) | ((e[l + 64] >> 4) << 4) |
                                  ((e[l + 96] >> 4) << 6));
            }
        }
    }
}
