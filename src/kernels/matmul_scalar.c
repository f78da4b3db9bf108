/* kernels/matmul_scalar — portable tile kernels (PL_ISA_SCALAR, and any type a vector ISA lacks).
 *
 * One dot product per (row, activation row), in llama.cpp's generic order: integer sums per
 * block, then one float multiply-add per block (per super-block for K-quants).
 */
#include "kernels/matmul_kernels.h"
#include "kernels/quant.h"

#include <stddef.h>
#include <string.h>

typedef float (*dot_fn)(const uint8_t *w, const uint8_t *act, int64_t cols);

/* The float types: each product exact in double, into eight partial sums (element i into sum
 * i % 8; the last cols % 8 into sum 0), added up in a fixed order and rounded to float once:
 * within an ulp or so of the exact dot product, whatever a vector level's order of float sums
 * gives. One running float sum, and f16 widened with a branch per element (pl_f16_to_f32 has
 * none now), made the scalar level's f16 and f32 tiles 55 % of test_wtype_reference's time and
 * that level 5x the time of each vector level. */
#define FLOAT_DOT(name, WT, XT, WCONV, XCONV)                                                     \
    static float name(const uint8_t *w, const uint8_t *act, int64_t cols) {                      \
        const WT *a = (const WT *)w;                                                             \
        const XT *x = (const XT *)act;                                                           \
        double s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0, s6 = 0, s7 = 0;                   \
        int64_t i = 0;                                                                           \
        for (; i + 8 <= cols; i += 8) {                                                          \
            s0 += (double)WCONV(a[i + 0]) * XCONV(x[i + 0]);                                     \
            s1 += (double)WCONV(a[i + 1]) * XCONV(x[i + 1]);                                     \
            s2 += (double)WCONV(a[i + 2]) * XCONV(x[i + 2]);                                     \
            s3 += (double)WCONV(a[i + 3]) * XCONV(x[i + 3]);                                     \
            s4 += (double)WCONV(a[i + 4]) * XCONV(x[i + 4]);                                     \
            s5 += (double)WCONV(a[i + 5]) * XCONV(x[i + 5]);                                     \
            s6 += (double)WCONV(a[i + 6]) * XCONV(x[i + 6]);                                     \
            s7 += (double)WCONV(a[i + 7]) * XCONV(x[i + 7]);                                     \
        }                                                                                        \
        for (; i < cols; i++) s0 += (double)WCONV(a[i]) * XCONV(x[i]); /* the tail */       \
        return (float)(((s0 + s4) + (s2 + s6)) + ((s1 + s5) + (s3 + s7)));                       \
    }
#define AS_F32(v) (v)
FLOAT_DOT(dot_f32, float, float, AS_F32, AS_F32)
FLOAT_DOT(dot_f16, pl_f16, float, pl_f16_to_f32, AS_F32)
FLOAT_DOT(dot_bf16, pl_bf16, pl_bf16, pl_bf16_to_f32, pl_bf16_to_f32)

static float dot_q8_0(const uint8_t *w, const uint8_t *act, int64_t cols) {
    const pl_block_q8_0 *a = (const pl_block_q8_0 *)w;
    const int8_t *xq = (const int8_t *)act;
    const float *xd = (const float *)(act + cols);
    float s = 0.0f;
    for (int64_t b = 0; b < cols / PL_QK; b++) {
        int sum = 0;
        for (int j = 0; j < PL_QK; j++) sum += a[b].qs[j] * xq[b * PL_QK + j];
        s += (float)sum * (pl_f16_to_f32(a[b].d) * xd[b]);
    }
    return s;
}

static float dot_q4_0(const uint8_t *w, const uint8_t *act, int64_t cols) {
    const pl_block_q4_0 *a = (const pl_block_q4_0 *)w;
    const int8_t *xq = (const int8_t *)act;
    const float *xd = (const float *)(act + cols);
    int64_t nb = cols / PL_QK;
    float s = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        /* positions of element j (< 16) and j + 16 in the q4_0 activation layout */
        int64_t lo = pl_act_q4_0_pos(b * PL_QK, nb), hi = pl_act_q4_0_pos(b * PL_QK + 16, nb);
        int sum = 0;
        for (int j = 0; j < 16; j++) {
            sum += ((a[b].qs[j] & 0xF) - 8) * xq[lo + j];
            sum += ((a[b].qs[j] >> 4) - 8) * xq[hi + j];
        }
        s += (float)sum * (pl_f16_to_f32(a[b].d) * xd[b]);
    }
    return s;
}

/* Unpack the 8 scales and 8 mins of a q4_K / q5_K block. */
static void kscales(const uint8_t *scales, uint8_t sc[8], uint8_t m[8]) {
    for (int j = 0; j < 8; j++) pl_get_scale_min_k4(j, scales, &sc[j], &m[j]);
}

/* Common tail of q4_K / q5_K: q holds the 256 unsigned quants of one block. */
static float kblock_with_mins(const uint8_t q[PL_QK_K], const uint8_t *scales, float d, float dmin,
                              const pl_block_q8_K *x) {
    uint8_t sc[8], m[8];
    kscales(scales, sc, m);
    int32_t isum = 0, imin = 0;
    for (int s = 0; s < 8; s++) {
        int32_t t = 0;
        for (int l = 0; l < 32; l++) t += q[32 * s + l] * x->qs[32 * s + l];
        isum += sc[s] * t;
        imin += m[s] * (x->bsums[2 * s] + x->bsums[2 * s + 1]);
    }
    return (float)isum * (d * x->d) - (float)imin * (dmin * x->d);
}

/* q4_K and q5_K: the 4-bit quants at qs_off of each bs-byte block plus, if qh_off, q5_K's 5th
 * bits; d, dmin and scales sit at the same offsets in both. */
static inline __attribute__((always_inline)) float dot_k4(const uint8_t *w, size_t bs, size_t qs_off,
                                                           size_t qh_off, const uint8_t *act, int64_t cols) {
    const pl_block_q8_K *x = (const pl_block_q8_K *)act;
    float s = 0.0f;
    for (int64_t i = 0; i < cols / PL_QK_K; i++) {
        const pl_block_q4_K *a = (const pl_block_q4_K *)(w + (size_t)i * bs);
        const uint8_t *qs = (const uint8_t *)a + qs_off, *qh = (const uint8_t *)a + qh_off;
        uint8_t q[PL_QK_K];
        for (int g = 0; g < 4; g++)
            for (int l = 0; l < 32; l++) {
                q[64 * g + l] = qs[32 * g + l] & 0xF;
                q[64 * g + 32 + l] = qs[32 * g + l] >> 4;
                if (qh_off) {
                    q[64 * g + l] |= (uint8_t)(((qh[l] >> (2 * g)) & 1) << 4);
                    q[64 * g + 32 + l] |= (uint8_t)(((qh[l] >> (2 * g + 1)) & 1) << 4);
                }
            }
        s += kblock_with_mins(q, a->scales, pl_f16_to_f32(a->d), pl_f16_to_f32(a->dmin), &x[i]);
    }
    return s;
}

static float dot_q4_K(const uint8_t *w, const uint8_t *act, int64_t cols) {
    return dot_k4(w, sizeof(pl_block_q4_K), offsetof(pl_block_q4_K, qs), 0, act, cols);
}

static float dot_q5_K(const uint8_t *w, const uint8_t *act, int64_t cols) {
    return dot_k4(w, sizeof(pl_block_q5_K), offsetof(pl_block_q5_K, qs), offsetof(pl_block_q5_K, qh), act, cols);
}

static float dot_q6_K(const uint8_t *w, const uint8_t *act, int64_t cols) {
    const pl_block_q6_K *a = (const pl_block_q6_K *)w;
    const pl_block_q8_K *x = (const pl_block_q8_K *)act;
    float s = 0.0f;
    for (int64_t i = 0; i < cols / PL_QK_K; i++) {
        int8_t q[PL_QK_K];
        for (int half = 0; half < 2; half++) {
            const uint8_t *ql = a[i].ql + 64 * half, *qh = a[i].qh + 32 * half;
            int8_t *o = q + 128 * half;
            for (int l = 0; l < 32; l++) {
                o[l] = (int8_t)(((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32);
                o[l + 32] = (int8_t)(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
                o[l + 64] = (int8_t)(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
                o[l + 96] = (int8_t)(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
            }
        }
        int32_t isum = 0;
        for (int sb = 0; sb < 16; sb++) {
            int32_t t = 0;
            for (int l = 0; l < 16; l++) t += q[16 * sb + l] * x[i].qs[16 * sb + l];
            isum += a[i].scales[sb] * t;
        }
        s += (float)isum * (pl_f16_to_f32(a[i].d) * x[i].d);
    }
    return s;
}


/* ---- the types of issue 18 ------------------------------------------------------------------ */

/* The 32 quants of a 32-block: nibbles (q4_0 order) plus, if qh, the 5th bits of q5_0 / q5_1. */
static void quants32(const uint8_t *qs, const uint8_t *qh, int q[32]) {
    uint32_t h = 0;
    if (qh) h = (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24;
    for (int j = 0; j < 16; j++) {
        q[j] = (qs[j] & 0xF) | (int)(((h >> j) & 1) << 4);
        q[j + 16] = (qs[j] >> 4) | (int)(((h >> (j + 16)) & 1) << 4);
    }
}

/* The 32-blocks of q4_1, q5_1, q5_0 and iq4_nl against q8_0 / q8_1 activations: each bs-byte block
 * starts with d, then (has_m) m, holds its 5th bits at qh_off (0: none) and ends with its nibbles.
 * A quant is kvalues_iq4nl[q] if nl, else q + off. Per block (d_w d_x) * sum(q x) in float; q4_1 /
 * q5_1 sum m_w * s_x apart and add it at the end (llama.cpp's order). */
static inline __attribute__((always_inline)) float dot_b32(const uint8_t *w, size_t bs, int has_m, size_t qh_off,
                                                            int off, int nl, const uint8_t *act, int64_t cols) {
    const int8_t *xq = (const int8_t *)act;
    const float *xd = (const float *)(act + cols), *xs = xd + cols / PL_QK;
    float s = 0.0f, summs = 0.0f;
    for (int64_t b = 0; b < cols / PL_QK; b++) {
        const uint8_t *blk = w + (size_t)b * bs;
        const pl_f16 *dm = (const pl_f16 *)blk;
        int q[32], sum = 0;
        quants32(blk + bs - PL_QK / 2, qh_off ? blk + qh_off : NULL, q);
        for (int j = 0; j < PL_QK; j++) sum += (nl ? pl_kvalues_iq4nl[q[j]] : q[j] + off) * xq[b * PL_QK + j];
        s += (float)sum * (pl_f16_to_f32(dm[0]) * xd[b]);
        if (has_m) summs += pl_f16_to_f32(dm[1]) * xs[b];
    }
    return has_m ? s + summs : s;
}

static float dot_q4_1(const uint8_t *w, const uint8_t *act, int64_t cols) {
    return dot_b32(w, sizeof(pl_block_q4_1), 1, 0, 0, 0, act, cols);
}

static float dot_q5_1(const uint8_t *w, const uint8_t *act, int64_t cols) {
    return dot_b32(w, sizeof(pl_block_q5_1), 1, offsetof(pl_block_q5_1, qh), 0, 0, act, cols);
}

static float dot_q5_0(const uint8_t *w, const uint8_t *act, int64_t cols) {
    return dot_b32(w, sizeof(pl_block_q5_0), 0, offsetof(pl_block_q5_0, qh), -16, 0, act, cols);
}

static float dot_iq4_nl(const uint8_t *w, const uint8_t *act, int64_t cols) {
    return dot_b32(w, sizeof(pl_block_iq4_nl), 0, 0, 0, 1, act, cols);
}

/* The 2-bit fields of a q2_K / q3_K block's qs in element order (0..3). */
static void low2_256(const uint8_t qs[64], int q[PL_QK_K]) {
    for (int e = 0; e < PL_QK_K; e++) q[e] = (qs[32 * (e / 128) + e % 32] >> (2 * (e % 128 / 32))) & 3;
}

/* The integer dot product of one 16-element sub-block of q2_K / q3_K. */
static inline int32_t dot16(const int *q, const int8_t *x) {
    int32_t t = 0;
    for (int l = 0; l < 16; l++) t += q[l] * x[l];
    return t;
}

static float dot_q2_K(const uint8_t *w, const uint8_t *act, int64_t cols) {
    const pl_block_q2_K *a = (const pl_block_q2_K *)w;
    const pl_block_q8_K *x = (const pl_block_q8_K *)act;
    float s = 0.0f;
    for (int64_t i = 0; i < cols / PL_QK_K; i++) {
        int q[PL_QK_K];
        low2_256(a[i].qs, q);
        int32_t isum = 0, imin = 0;
        for (int sb = 0; sb < 16; sb++) {
            int32_t t = dot16(q + 16 * sb, x[i].qs + 16 * sb);
            isum += (a[i].scales[sb] & 0xF) * t;
            imin += (a[i].scales[sb] >> 4) * x[i].bsums[sb];
        }
        s += (float)isum * (pl_f16_to_f32(a[i].d) * x[i].d) - (float)imin * (pl_f16_to_f32(a[i].dmin) * x[i].d);
    }
    return s;
}

static float dot_q3_K(const uint8_t *w, const uint8_t *act, int64_t cols) {
    const pl_block_q3_K *a = (const pl_block_q3_K *)w;
    const pl_block_q8_K *x = (const pl_block_q8_K *)act;
    float s = 0.0f;
    for (int64_t i = 0; i < cols / PL_QK_K; i++) {
        int q[PL_QK_K];
        int8_t sc[16];
        low2_256(a[i].qs, q);
        pl_q3_K_scales(a[i].scales, sc);
        for (int e = 0; e < PL_QK_K; e++)
            q[e] -= (a[i].hmask[e % 32] >> (e / 32)) & 1 ? 0 : 4;
        int32_t isum = 0;
        for (int sb = 0; sb < 16; sb++) {
            int32_t t = dot16(q + 16 * sb, x[i].qs + 16 * sb);
            isum += sc[sb] * t;
        }
        s += (float)isum * (pl_f16_to_f32(a[i].d) * x[i].d);
    }
    return s;
}

static float dot_iq4_xs(const uint8_t *w, const uint8_t *act, int64_t cols) {
    const pl_block_iq4_xs *a = (const pl_block_iq4_xs *)w;
    const pl_block_q8_K *x = (const pl_block_q8_K *)act;
    float s = 0.0f;
    for (int64_t i = 0; i < cols / PL_QK_K; i++) {
        int32_t isum = 0;
        for (int ib = 0; ib < 8; ib++) {
            int q[32];
            int32_t t = 0;
            quants32(a[i].qs + 16 * ib, NULL, q);
            for (int l = 0; l < 32; l++) t += pl_kvalues_iq4nl[q[l]] * x[i].qs[32 * ib + l];
            isum += pl_iq4_xs_scale(&a[i], ib) * t;
        }
        s += (float)isum * (pl_f16_to_f32(a[i].d) * x[i].d);
    }
    return s;
}

#define SCALAR_TILE(name, dot)                                                                  \
    static void name(const uint8_t *w, size_t ws, int nr, const uint8_t *act, size_t as, int nb, \
                     int64_t cols, float *y, int64_t ldy) {                                     \
        for (int b = 0; b < nb; b++)                                                            \
            for (int r = 0; r < nr; r++)                                                        \
                y[b * ldy + r] = dot(w + (size_t)r * ws, act + (size_t)b * as, cols);           \
    }

SCALAR_TILE(tile_f32, dot_f32)
SCALAR_TILE(tile_f16, dot_f16)
SCALAR_TILE(tile_bf16, dot_bf16)
SCALAR_TILE(tile_q8_0, dot_q8_0)
SCALAR_TILE(tile_q4_0, dot_q4_0)
SCALAR_TILE(tile_q4_K, dot_q4_K)
SCALAR_TILE(tile_q5_K, dot_q5_K)
SCALAR_TILE(tile_q6_K, dot_q6_K)
SCALAR_TILE(tile_q4_1, dot_q4_1)
SCALAR_TILE(tile_q5_0, dot_q5_0)
SCALAR_TILE(tile_q5_1, dot_q5_1)
SCALAR_TILE(tile_iq4_nl, dot_iq4_nl)
SCALAR_TILE(tile_q2_K, dot_q2_K)
SCALAR_TILE(tile_q3_K, dot_q3_K)
SCALAR_TILE(tile_iq4_xs, dot_iq4_xs)

int pl_mm_kernel_scalar(pl_dtype t, pl_mm_kernel *k) {
    pl_mm_tile_fn fn = NULL;
    switch (t) {
    case PL_DT_F32: fn = tile_f32; break;
    case PL_DT_F16: fn = tile_f16; break;
    case PL_DT_BF16: fn = tile_bf16; break;
    case PL_DT_Q8_0: fn = tile_q8_0; break;
    case PL_DT_Q4_0: fn = tile_q4_0; break;
    case PL_DT_Q4_K: fn = tile_q4_K; break;
    case PL_DT_Q5_K: fn = tile_q5_K; break;
    case PL_DT_Q6_K: fn = tile_q6_K; break;
    case PL_DT_Q4_1: fn = tile_q4_1; break;
    case PL_DT_Q5_0: fn = tile_q5_0; break;
    case PL_DT_Q5_1: fn = tile_q5_1; break;
    case PL_DT_IQ4_NL: fn = tile_iq4_nl; break;
    case PL_DT_Q2_K: fn = tile_q2_K; break;
    case PL_DT_Q3_K: fn = tile_q3_K; break;
    case PL_DT_IQ4_XS: fn = tile_iq4_xs; break;
    case PL_DT_MXFP4: pl_mm_kernel_mxfp4_scalar(k); return 1;
    default: return 0;
    }
    k->fn = fn;
    k->tr = 4;
    k->tb = 4;
    return 1;
}
