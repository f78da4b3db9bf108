/* kernels/quant — see quant.h. */
#include "kernels/quant.h"

#include "kernels/cpu.h"

#include <math.h>
#include <string.h>

/* ---- weight quantizers (llama.cpp reference rounding) ------------------------------------ */

void pl_quantize_q8_0_ref(const float *x, pl_block_q8_0 *y, int64_t n) {
    for (int64_t i = 0; i < n / PL_QK; i++, x += PL_QK) {
        float amax = 0.0f;
        for (int j = 0; j < PL_QK; j++) amax = fmaxf(amax, fabsf(x[j]));
        float d = amax / 127.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = pl_f32_to_f16(d);
        for (int j = 0; j < PL_QK; j++) y[i].qs[j] = (int8_t)roundf(x[j] * id);
    }
}

void pl_quantize_q4_0_ref(const float *x, pl_block_q4_0 *y, int64_t n) {
    for (int64_t i = 0; i < n / PL_QK; i++, x += PL_QK) {
        float amax = 0.0f, max = 0.0f; /* largest magnitude, and that value with its sign */
        for (int j = 0; j < PL_QK; j++) {
            if (amax < fabsf(x[j])) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        }
        float d = max / -8.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = pl_f32_to_f16(d);
        for (int j = 0; j < PL_QK / 2; j++) {
            int lo = (int8_t)(x[j] * id + 8.5f);
            int hi = (int8_t)(x[j + PL_QK / 2] * id + 8.5f);
            lo = lo < 15 ? lo : 15;
            hi = hi < 15 ? hi : 15;
            y[i].qs[j] = (uint8_t)(lo | (hi << 4));
        }
    }
}

/* ---- activation quantizers ---------------------------------------------------------------- */

void pl_quantize_q8_0_act(const float *x, pl_block_q8_0 *y, int64_t n) {
    for (int64_t i = 0; i < n / PL_QK; i++, x += PL_QK) {
        float amax = 0.0f;
        for (int j = 0; j < PL_QK; j++) {
            float a = fabsf(x[j]);
            amax = a > amax ? a : amax;
        }
        y[i].d = pl_f32_to_f16(amax / 127.0f);
        float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        for (int j = 0; j < PL_QK; j++) y[i].qs[j] = (int8_t)pl_nearest_int(x[j] * id);
    }
}

void pl_quantize_q8_K(const float *x, pl_block_q8_K *y, int64_t n) {
    for (int64_t i = 0; i < n / PL_QK_K; i++, x += PL_QK_K) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < PL_QK_K; j++) {
            float a = fabsf(x[j]);
            if (a > amax) {
                amax = a;
                max = x[j];
            }
        }
        if (amax == 0.0f) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        float iscale = -127.0f / max;
        for (int j = 0; j < PL_QK_K; j++) {
            int v = pl_nearest_int(iscale * x[j]);
            y[i].qs[j] = (int8_t)(v < 127 ? v : 127);
        }
        for (int g = 0; g < PL_QK_K / 16; g++) {
            int s = 0;
            for (int j = 0; j < 16; j++) s += y[i].qs[16 * g + j];
            y[i].bsums[g] = (int16_t)s;
        }
        y[i].d = 1.0f / iscale;
    }
}

/* ---- dequantizers ------------------------------------------------------------------------- */

void pl_dequant_q8_0(const pl_block_q8_0 *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n / PL_QK; i++, y += PL_QK) {
        float d = pl_f16_to_f32(x[i].d);
        for (int j = 0; j < PL_QK; j++) y[j] = x[i].qs[j] * d;
    }
}

void pl_dequant_q4_0(const pl_block_q4_0 *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n / PL_QK; i++, y += PL_QK) {
        float d = pl_f16_to_f32(x[i].d);
        for (int j = 0; j < PL_QK / 2; j++) {
            y[j] = ((x[i].qs[j] & 0xF) - 8) * d;
            y[j + PL_QK / 2] = ((x[i].qs[j] >> 4) - 8) * d;
        }
    }
}

void pl_dequant_q4_K(const pl_block_q4_K *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n / PL_QK_K; i++) {
        float d = pl_f16_to_f32(x[i].d), dmin = pl_f16_to_f32(x[i].dmin);
        const uint8_t *q = x[i].qs;
        for (int g = 0; g < 4; g++, q += 32) {
            uint8_t sc0, m0, sc1, m1;
            pl_get_scale_min_k4(2 * g, x[i].scales, &sc0, &m0);
            pl_get_scale_min_k4(2 * g + 1, x[i].scales, &sc1, &m1);
            float d0 = d * sc0, mm0 = dmin * m0, d1 = d * sc1, mm1 = dmin * m1;
            for (int l = 0; l < 32; l++) *y++ = d0 * (q[l] & 0xF) - mm0;
            for (int l = 0; l < 32; l++) *y++ = d1 * (q[l] >> 4) - mm1;
        }
    }
}

void pl_dequant_q5_K(const pl_block_q5_K *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n / PL_QK_K; i++) {
        float d = pl_f16_to_f32(x[i].d), dmin = pl_f16_to_f32(x[i].dmin);
        const uint8_t *q = x[i].qs, *qh = x[i].qh;
        for (int g = 0; g < 4; g++, q += 32) {
            uint8_t sc0, m0, sc1, m1;
            pl_get_scale_min_k4(2 * g, x[i].scales, &sc0, &m0);
            pl_get_scale_min_k4(2 * g + 1, x[i].scales, &sc1, &m1);
            float d0 = d * sc0, mm0 = dmin * m0, d1 = d * sc1, mm1 = dmin * m1;
            uint8_t b0 = (uint8_t)(1u << (2 * g)), b1 = (uint8_t)(2u << (2 * g));
            for (int l = 0; l < 32; l++) *y++ = d0 * ((q[l] & 0xF) + (qh[l] & b0 ? 16 : 0)) - mm0;
            for (int l = 0; l < 32; l++) *y++ = d1 * ((q[l] >> 4) + (qh[l] & b1 ? 16 : 0)) - mm1;
        }
    }
}

void pl_dequant_q6_K(const pl_block_q6_K *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n / PL_QK_K; i++) {
        float d = pl_f16_to_f32(x[i].d);
        const uint8_t *ql = x[i].ql, *qh = x[i].qh;
        const int8_t *sc = x[i].scales;
        for (int half = 0; half < 2; half++, y += 128, ql += 64, qh += 32, sc += 8) {
            for (int l = 0; l < 32; l++) {
                int s = l / 16;
                int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
                int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l] = d * sc[s] * q1;
                y[l + 32] = d * sc[s + 2] * q2;
                y[l + 64] = d * sc[s + 4] * q3;
                y[l + 96] = d * sc[s + 6] * q4;
            }
        }
    }
}

void pl_dequant_q8_K(const pl_block_q8_K *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n / PL_QK_K; i++, y += PL_QK_K)
        for (int j = 0; j < PL_QK_K; j++) y[j] = x[i].d * x[i].qs[j];
}

/* ---- activation layouts ------------------------------------------------------------------- */

static size_t round64(size_t n) { return (n + 63) & ~(size_t)63; }

size_t pl_act_row_bytes(pl_dtype wtype, int64_t cols) {
    size_t c = (size_t)cols;
    switch (wtype) {
    case PL_DT_F16: return round64(c * sizeof(float));
    case PL_DT_BF16: return round64(c * sizeof(pl_bf16));
    case PL_DT_Q8_0:
    case PL_DT_Q4_0:
    case PL_DT_Q5_0:
    case PL_DT_IQ4_NL:
    case PL_DT_MXFP4: return round64(c + c / PL_QK * sizeof(float));
    case PL_DT_Q4_1:
    case PL_DT_Q5_1: return round64(c + 2 * (c / PL_QK) * sizeof(float));
    case PL_DT_Q2_K:
    case PL_DT_Q3_K:
    case PL_DT_Q4_K:
    case PL_DT_Q5_K:
    case PL_DT_Q6_K:
    case PL_DT_IQ4_XS: return round64(c / PL_QK_K * sizeof(pl_block_q8_K));
    default: return 0;
    }
}

/* q8_0 activations as qs[cols] (natural or q4_0 pair order) then d[nb]. */
static void act_q8_0(const float *x, uint8_t *dst, int64_t cols, int q4_order) {
    int64_t nb = cols / PL_QK;
    int8_t *qs = (int8_t *)dst;
    float *d = (float *)(dst + cols);
    for (int64_t b = 0; b < nb; b++) {
        pl_block_q8_0 blk;
        pl_quantize_q8_0_act(x + b * PL_QK, &blk, PL_QK);
        d[b] = pl_f16_to_f32(blk.d);
        for (int j = 0; j < PL_QK; j++) {
            int64_t c = b * PL_QK + j;
            qs[q4_order ? pl_act_q4_0_pos(c, nb) : c] = blk.qs[j];
        }
    }
}

void pl_act_convert_row(pl_dtype wtype, const float *x, void *dst, int64_t cols) {
    if (pl_cpu_isa() >= PL_ISA_AVX512 && pl_act_convert_row_avx512(wtype, x, dst, cols)) return;
    if (pl_cpu_isa() >= PL_ISA_AVX2 && pl_cpu_isa() < PL_ISA_AVX512 && pl_act_convert_row_avx2(wtype, x, dst, cols)) return;
    switch (wtype) {
    case PL_DT_F16: {
        float *o = dst;
        for (int64_t i = 0; i < cols; i++) o[i] = pl_f16_to_f32(pl_f32_to_f16(x[i]));
        break;
    }
    case PL_DT_BF16: {
        pl_bf16 *o = dst;
        for (int64_t i = 0; i < cols; i++) o[i] = pl_f32_to_bf16(x[i]);
        break;
    }
    case PL_DT_Q8_0:
    case PL_DT_Q5_0:
    case PL_DT_IQ4_NL:
    case PL_DT_MXFP4: act_q8_0(x, dst, cols, 0); break;
    case PL_DT_Q4_0: act_q8_0(x, dst, cols, 1); break;
    case PL_DT_Q4_1:
    case PL_DT_Q5_1: pl_act_q8_1_row(x, dst, cols); break;
    case PL_DT_Q2_K:
    case PL_DT_Q3_K:
    case PL_DT_Q4_K:
    case PL_DT_Q5_K:
    case PL_DT_Q6_K:
    case PL_DT_IQ4_XS: pl_quantize_q8_K(x, dst, cols); break;
    default: break;
    }
}
