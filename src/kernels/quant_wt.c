/* kernels/quant_wt — the weight types of issue 18 (q4_1, q5_0, q5_1, iq4_nl, q2_K, q3_K,
 * iq4_xs): dequantizers exactly as GGML's dequantize_row_*, weight quantizers for mkmodel and
 * tests, and the q8_1 activation row that q4_1 / q5_1 weights are multiplied with.
 *
 * Quantizers. q4_1, q5_0, q5_1 round as llama.cpp's quantize_row_*_ref (bit for bit). iq4_nl
 * takes llama.cpp's first guess (d = max / -127, the signed largest value on the lowest level,
 * nearest level per element) without its least-squares scale search. q2_K, q3_K, iq4_xs are
 * simple ones of our own, like quant_kw.c: each sub-block's scale spans its own range, the
 * super-block scale is the largest of those over the scale's range, sub-block scales are rounded
 * against the f16-rounded super-block scale and quants against the scale actually stored.
 * llama.cpp searches scales for a lower error; the layout, and so every kernel, is the same.
 *
 * Dequantizers read any bytes: every integer step is on small unsigned fields, so garbage
 * blocks give defined (if meaningless) numbers.
 */
#include "kernels/quant.h"

#include <float.h>
#include <math.h>
#include <string.h>

const int8_t pl_kvalues_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                     1,    13,   25,  38,  53,  69,  89,  113};


/* v rounded to the nearest int and clamped to [lo, hi]; NaN gives lo. Never converts an
 * out-of-range float to int (undefined behaviour). */
static int qclamp(float v, int lo, int hi) {
    if (!(v > (float)lo)) return lo;
    if (v >= (float)hi) return hi;
    return pl_nearest_int(v);
}

static uint32_t load_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void store_u32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* ---- dequantizers ------------------------------------------------------------------------- */

void pl_dequant_q4_1(const pl_block_q4_1 *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n / PL_QK; i++, y += PL_QK) {
        float d = pl_f16_to_f32(x[i].d), m = pl_f16_to_f32(x[i].m);
        for (int j = 0; j < PL_QK / 2; j++) {
            y[j] = (x[i].qs[j] & 0xF) * d + m;
            y[j + PL_QK / 2] = (x[i].qs[j] >> 4) * d + m;
        }
    }
}

/* The 32 five-bit quants (0..31) of a q5_0 / q5_1 block. */
static void q5_quants(const uint8_t qh4[4], const uint8_t qs[16], int q[32]) {
    uint32_t qh = load_u32(qh4);
    for (int j = 0; j < 16; j++) {
        q[j] = (qs[j] & 0xF) | (int)(((qh >> j) & 1) << 4);
        q[j + 16] = (qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
    }
}

void pl_dequant_q5_0(const pl_block_q5_0 *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n / PL_QK; i++, y += PL_QK) {
        float d = pl_f16_to_f32(x[i].d);
        int q[32];
        q5_quants(x[i].qh, x[i].qs, q);
        for (int j = 0; j < PL_QK; j++) y[j] = (q[j] - 16) * d;
    }
}

void pl_dequant_q5_1(const pl_block_q5_1 *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n / PL_QK; i++, y += PL_QK) {
        float d = pl_f16_to_f32(x[i].d), m = pl_f16_to_f32(x[i].m);
        int q[32];
        q5_quants(x[i].qh, x[i].qs, q);
        for (int j = 0; j < PL_QK; j++) y[j] = q[j] * d + m;
    }
}

void pl_dequant_iq4_nl(const pl_block_iq4_nl *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n / PL_QK; i++, y += PL_QK) {
        float d = pl_f16_to_f32(x[i].d);
        for (int j = 0; j < PL_QK / 2; j++) {
            y[j] = d * pl_kvalues_iq4nl[x[i].qs[j] & 0xF];
            y[j + PL_QK / 2] = d * pl_kvalues_iq4nl[x[i].qs[j] >> 4];
        }
    }
}

void pl_dequant_q2_K(const pl_block_q2_K *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n / PL_QK_K; i++) {
        float d = pl_f16_to_f32(x[i].d), dmin = pl_f16_to_f32(x[i].dmin);
        for (int h = 0; h < 2; h++)
            for (int j = 0; j < 4; j++)
                for (int half = 0; half < 2; half++) {
                    uint8_t sc = x[i].scales[8 * h + 2 * j + half];
                    float dl = d * (sc & 0xF), ml = dmin * (sc >> 4);
                    const uint8_t *q = x[i].qs + 32 * h + 16 * half;
                    for (int l = 0; l < 16; l++) *y++ = dl * ((q[l] >> (2 * j)) & 3) - ml;
                }
    }
}

void pl_dequant_q3_K(const pl_block_q3_K *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n / PL_QK_K; i++) {
        float d = pl_f16_to_f32(x[i].d);
        int8_t sc[16];
        pl_q3_K_scales(x[i].scales, sc);
        for (int h = 0; h < 2; h++)
            for (int j = 0; j < 4; j++)
                for (int half = 0; half < 2; half++) {
                    float dl = d * sc[8 * h + 2 * j + half];
                    const uint8_t *q = x[i].qs + 32 * h + 16 * half, *hm = x[i].hmask + 16 * half;
                    int bit = 4 * h + j;
                    for (int l = 0; l < 16; l++)
                        *y++ = dl * (((q[l] >> (2 * j)) & 3) - ((hm[l] >> bit) & 1 ? 0 : 4));
                }
    }
}

void pl_dequant_iq4_xs(const pl_block_iq4_xs *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n / PL_QK_K; i++) {
        float d = pl_f16_to_f32(x[i].d);
        for (int ib = 0; ib < 8; ib++, y += 32) {
            float dl = d * pl_iq4_xs_scale(&x[i], ib);
            const uint8_t *qs = x[i].qs + 16 * ib;
            for (int j = 0; j < 16; j++) {
                y[j] = dl * pl_kvalues_iq4nl[qs[j] & 0xF];
                y[j + 16] = dl * pl_kvalues_iq4nl[qs[j] >> 4];
            }
        }
    }
}

/* ---- q4_1 / q5_0 / q5_1: llama.cpp's reference rounding ---------------------------------- */

/* q4_1 / q5_1's affine scale of a 32-block over levels 0..nmax: the min and max in llama.cpp's
 * order, d = (max - min) / nmax and the min stored as f16 in *d and *m; returns the min in *pmin
 * and 1 / d (0 for a flat block). */
static inline float affine32(const float *x, float nmax, pl_f16 *d, pl_f16 *m, float *pmin) {
    float min = FLT_MAX, max = -FLT_MAX;
    for (int j = 0; j < PL_QK; j++) {
        min = x[j] < min ? x[j] : min;
        max = x[j] > max ? x[j] : max;
    }
    float dd = (max - min) / nmax;
    *d = pl_f32_to_f16(dd);
    *m = pl_f32_to_f16(min);
    *pmin = min;
    return dd != 0.0f ? 1.0f / dd : 0.0f;
}

void pl_quantize_q4_1_ref(const float *x, pl_block_q4_1 *y, int64_t n) {
    for (int64_t i = 0; i < n / PL_QK; i++, x += PL_QK) {
        float min, id = affine32(x, 15.0f, &y[i].d, &y[i].m, &min);
        for (int j = 0; j < PL_QK / 2; j++) { /* llama.cpp: MIN(15, (int8_t)(v + 0.5f)) */
            int lo = qclamp(floorf((x[j] - min) * id + 0.5f), 0, 15);
            int hi = qclamp(floorf((x[j + 16] - min) * id + 0.5f), 0, 15);
            y[i].qs[j] = (uint8_t)(lo | (hi << 4));
        }
    }
}

void pl_quantize_q5_0_ref(const float *x, pl_block_q5_0 *y, int64_t n) {
    for (int64_t i = 0; i < n / PL_QK; i++, x += PL_QK) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < PL_QK; j++)
            if (amax < fabsf(x[j])) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        float d = max / -16.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = pl_f32_to_f16(d);
        uint32_t qh = 0;
        for (int j = 0; j < PL_QK / 2; j++) { /* llama.cpp: MIN(31, (int8_t)(v + 16.5f)) */
            int lo = qclamp(truncf(x[j] * id + 16.5f), 0, 31);
            int hi = qclamp(truncf(x[j + 16] * id + 16.5f), 0, 31);
            y[i].qs[j] = (uint8_t)((lo & 0xF) | ((hi & 0xF) << 4));
            qh |= (uint32_t)(lo >> 4) << j | (uint32_t)(hi >> 4) << (j + 16);
        }
        store_u32(y[i].qh, qh);
    }
}

void pl_quantize_q5_1_ref(const float *x, pl_block_q5_1 *y, int64_t n) {
    for (int64_t i = 0; i < n / PL_QK; i++, x += PL_QK) {
        float min, id = affine32(x, 31.0f, &y[i].d, &y[i].m, &min);
        uint32_t qh = 0;
        for (int j = 0; j < PL_QK / 2; j++) { /* llama.cpp: (uint8_t)(v + 0.5f), v in [0, 31] */
            int lo = qclamp(floorf((x[j] - min) * id + 0.5f), 0, 31);
            int hi = qclamp(floorf((x[j + 16] - min) * id + 0.5f), 0, 31);
            y[i].qs[j] = (uint8_t)((lo & 0xF) | ((hi & 0xF) << 4));
            qh |= (uint32_t)(lo >> 4) << j | (uint32_t)(hi >> 4) << (j + 16);
        }
        store_u32(y[i].qh, qh);
    }
}

/* ---- iq4_nl / iq4_xs ---------------------------------------------------------------------- */

/* Index of the kvalues_iq4nl level nearest v (GGML's best_index_int8; NaN gives 0). */
static int nearest_level(float v) {
    const int8_t *val = pl_kvalues_iq4nl;
    if (!(v > val[0])) return 0;
    if (v >= val[15]) return 15;
    int lo = 0, hi = 15;
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (v < val[mid]) hi = mid;
        else lo = mid;
    }
    return v - val[hi - 1] < val[hi] - v ? hi - 1 : hi;
}

/* 32 values against step dl into q4_0-ordered nibbles. */
static void iq4_block(const float *x, float dl, uint8_t qs[16]) {
    float id = dl != 0.0f ? 1.0f / dl : 0.0f;
    for (int j = 0; j < 16; j++)
        qs[j] = (uint8_t)(nearest_level(x[j] * id) | (nearest_level(x[j + 16] * id) << 4));
}

/* The signed value of largest magnitude among n (the first one on ties). */
static float signed_amax(const float *x, int n) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < n; j++)
        if (amax < fabsf(x[j])) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    return max;
}

void pl_quantize_iq4_nl_ref(const float *x, pl_block_iq4_nl *y, int64_t n) {
    for (int64_t i = 0; i < n / PL_QK; i++, x += PL_QK) {
        y[i].d = pl_f32_to_f16(signed_amax(x, PL_QK) / pl_kvalues_iq4nl[0]);
        iq4_block(x, pl_f16_to_f32(y[i].d), y[i].qs);
    }
}

void pl_quantize_iq4_xs_ref(const float *x, pl_block_iq4_xs *y, int64_t n) {
    for (int64_t i = 0; i < n / PL_QK_K; i++, x += PL_QK_K) {
        float scale[8], smax = 0.0f; /* smax: the signed scale of largest magnitude */
        for (int ib = 0; ib < 8; ib++) {
            scale[ib] = signed_amax(x + 32 * ib, 32) / pl_kvalues_iq4nl[0];
            if (fabsf(scale[ib]) > fabsf(smax)) smax = scale[ib];
        }
        y[i].d = pl_f32_to_f16(-smax / 32.0f); /* the largest scale on level -32 */
        float d = pl_f16_to_f32(y[i].d), id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].scales_h = 0;
        memset(y[i].scales_l, 0, sizeof y[i].scales_l);
        for (int ib = 0; ib < 8; ib++) {
            int l = qclamp(id * scale[ib], -32, 31);
            unsigned u = (unsigned)(l + 32);
            y[i].scales_l[ib / 2] |= (uint8_t)((u & 0xF) << 4 * (ib % 2));
            y[i].scales_h |= (uint16_t)((u >> 4) << 2 * ib);
            iq4_block(x + 32 * ib, d * (float)l, y[i].qs + 16 * ib);
        }
    }
}

/* ---- q2_K / q3_K -------------------------------------------------------------------------- */

void pl_quantize_q2_K_ref(const float *x, pl_block_q2_K *y, int64_t n) {
    for (int64_t i = 0; i < n / PL_QK_K; i++, x += PL_QK_K) {
        float scale[16], minv[16], smax = 0.0f, mmax = 0.0f;
        for (int s = 0; s < 16; s++) {
            float lo = 0.0f, hi = 0.0f; /* the offset is a min <= 0 (stored negated) */
            for (int l = 0; l < 16; l++) {
                lo = fminf(lo, x[16 * s + l]);
                hi = fmaxf(hi, x[16 * s + l]);
            }
            scale[s] = (hi - lo) / 3.0f;
            minv[s] = -lo;
            smax = fmaxf(smax, scale[s]);
            mmax = fmaxf(mmax, minv[s]);
        }
        y[i].d = pl_f32_to_f16(smax / 15.0f);
        y[i].dmin = pl_f32_to_f16(mmax / 15.0f);
        float d = pl_f16_to_f32(y[i].d), dmin = pl_f16_to_f32(y[i].dmin);
        uint8_t q[PL_QK_K];
        for (int s = 0; s < 16; s++) {
            int sc = d > 0 ? qclamp(scale[s] / d, 0, 15) : 0;
            int m = dmin > 0 ? qclamp(minv[s] / dmin, 0, 15) : 0;
            y[i].scales[s] = (uint8_t)(sc | (m << 4));
            float ds = d * (float)sc, dm = dmin * (float)m;
            for (int l = 0; l < 16; l++)
                q[16 * s + l] = (uint8_t)(ds > 0 ? qclamp((x[16 * s + l] + dm) / ds, 0, 3) : 0);
        }
        memset(y[i].qs, 0, sizeof y[i].qs);
        for (int e = 0; e < PL_QK_K; e++) { /* element 128h + 32j + l: qs[32h + l] bits 2j */
            int h = e / 128, j = e % 128 / 32, l = e % 32;
            y[i].qs[32 * h + l] |= (uint8_t)(q[e] << (2 * j));
        }
    }
}

void pl_quantize_q3_K_ref(const float *x, pl_block_q3_K *y, int64_t n) {
    for (int64_t i = 0; i < n / PL_QK_K; i++, x += PL_QK_K) {
        float scale[16], smax = 0.0f; /* signed: the largest value of a sub-block on level -4 */
        for (int s = 0; s < 16; s++) {
            scale[s] = signed_amax(x + 16 * s, 16) / -4.0f;
            if (fabsf(scale[s]) > fabsf(smax)) smax = scale[s];
        }
        y[i].d = pl_f32_to_f16(smax / -32.0f); /* the largest scale on level -32 */
        float d = pl_f16_to_f32(y[i].d), id = d != 0.0f ? 1.0f / d : 0.0f;
        uint8_t sc[16], q[PL_QK_K];
        for (int s = 0; s < 16; s++) {
            int l = qclamp(id * scale[s], -32, 31);
            sc[s] = (uint8_t)(l + 32);
            float ds = d * (float)l, ids = ds != 0.0f ? 1.0f / ds : 0.0f;
            for (int e = 0; e < 16; e++) q[16 * s + e] = (uint8_t)(qclamp(x[16 * s + e] * ids, -4, 3) + 4);
        }
        /* the packing pl_q3_K_scales undoes */
        for (int j = 0; j < 4; j++) {
            y[i].scales[j] = (uint8_t)((sc[j] & 0xF) | ((sc[j + 8] & 0xF) << 4));
            y[i].scales[j + 4] = (uint8_t)((sc[j + 4] & 0xF) | ((sc[j + 12] & 0xF) << 4));
            y[i].scales[j + 8] = (uint8_t)((sc[j] >> 4) | ((sc[j + 4] >> 4) << 2) |
                                           ((sc[j + 8] >> 4) << 4) | ((sc[j + 12] >> 4) << 6));
        }
        memset(y[i].qs, 0, sizeof y[i].qs);
        memset(y[i].hmask, 0, sizeof y[i].hmask);
        for (int e = 0; e < PL_QK_K; e++) {
            int h = e / 128, j = e % 128 / 32, l = e % 32;
            y[i].qs[32 * h + l] |= (uint8_t)((q[e] & 3) << (2 * j));
            y[i].hmask[l] |= (uint8_t)((q[e] >> 2) << (4 * h + j));
        }
    }
}

/* ---- q8_1 activations --------------------------------------------------------------------- */

void pl_act_q8_1_row(const float *x, void *dst, int64_t cols) {
    int64_t nb = cols / PL_QK;
    int8_t *qs = dst;
    float *d = (float *)((uint8_t *)dst + cols), *s = d + nb;
    for (int64_t b = 0; b < nb; b++) {
        pl_block_q8_0 blk;
        pl_quantize_q8_0_act(x + b * PL_QK, &blk, PL_QK);
        float amax = 0.0f;
        for (int j = 0; j < PL_QK; j++) amax = fmaxf(amax, fabsf(x[b * PL_QK + j]));
        int sum = 0;
        for (int j = 0; j < PL_QK; j++) sum += blk.qs[j];
        memcpy(qs + b * PL_QK, blk.qs, PL_QK);
        d[b] = pl_f16_to_f32(blk.d);
        s[b] = pl_f16_to_f32(pl_f32_to_f16(amax / 127.0f * (float)sum));
    }
}
