/* kernels/matmul_x16_kq — the x16 layouts of the K-quants q4_K and q6_K (issue 22, item 3): 16
 * rows interleaved so that one vpdpbusd gives 16 outputs' partial sums, the quants kept packed
 * (decode streams the same bytes as GGUF's q4_K and q6_K), the repacking, the activation rows,
 * and the scalar kernels every other kernel of these layouts matches bit for bit.
 *
 * Both are in super-blocks of 256 columns; per 16-row group and super-block (lanes = the 16 rows,
 * "chunk" = 16 lanes x 4 consecutive columns = 64 bytes, one vpdpbusd operand):
 *
 *   q4_K (2304 bytes = 16 x 144, as GGUF)  q6_K (3360 bytes = 16 x 210, as GGUF)
 *   0     d[16]      f16                  0     d[16]               f16
 *   32    dmin[16]   f16                  32    sc[8][16][2]        int8: 16-column scales,
 *   64    w[3][16]   u32: the 6-bit                    pair p = groups 2p, 2p + 1 of each lane
 *         scales and mins of pair p       288   q[16][3] chunks: group g's (16 columns) four
 *         (units 2p, 2p + 1) in 24 bits:        chunks a, b, c, d (columns 4j..4j + 3)
 *         sc_2p | sc_2p+1 << 6 |                in three: X = a | (d & 3) << 6,
 *         m_2p << 12 | m_2p+1 << 18;            Y = b | (d >> 2 & 3) << 6,
 *         pair 3's 24 bits are the top          Z = c | (d >> 4) << 6 (9 vector
 *         bytes of w[0], w[1], w[2]             operations unpack the four)
 *   256   q[4][8] chunks: low nibble =
 *         unit 2p, high = unit 2p + 1
 *   (chunk c of unit u: columns 32u + 4c .. 32u + 4c + 3)
 *
 * Activations: Q8_K blocks (kernels/quant.h) of the row, then per super-block four int32 words,
 * word i = the int16 pair (sum of unit 2i's quants, sum of unit 2i + 1's), for vpdpwssd.
 *
 * Arithmetic, per output (r, b) and super-block, integer parts exact in int32:
 *   q4_K: S = sum_j sc_j * sum_{unit j} q x,  M = sum_j m_j * xsum_j
 *         acc = fma((float)S, d * dx, acc);  acc = fma((float)-M, dmin * dx, acc)
 *   q6_K: S = sum_g sc_g * sum_{group g} q x  (q in 0..63),  O = sum_g sc_g * bsum_g
 *         acc = fma((float)(S - 32 O), d * dx, acc)
 * super-blocks in order, acc from +0.0f.
 */
#include "kernels/matmul_kernels.h"

#include "base/status.h"
#include "kernels/cpu.h"
#include "kernels/quant.h"

#include <math.h>
#include <string.h>

enum { Q4K_GROUP = 16 * 144, Q6K_GROUP = 16 * 210 };

size_t pl_mm_x16_kq_row_bytes(pl_dtype t, int64_t cols) {
    return (size_t)(cols / PL_QK_K) * (t == PL_DT_Q4_K ? 144 : 210);
}

/* The integer quants of one q6_K super-block in column order. */
static void q6_K_ints(const pl_block_q6_K *b, uint8_t q[256]) {
    for (int h = 0; h < 2; h++) {
        const uint8_t *ql = b->ql + 64 * h, *qh = b->qh + 32 * h;
        uint8_t *y = q + 128 * h;
        for (int l = 0; l < 32; l++) {
            y[l] = (uint8_t)((ql[l] & 0xF) | ((qh[l] & 3) << 4));
            y[l + 32] = (uint8_t)((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4));
            y[l + 64] = (uint8_t)((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
            y[l + 96] = (uint8_t)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
        }
    }
}

void pl_mm_x16_kq_repack(pl_dtype t, const uint8_t *src, uint8_t *dst, int64_t rows,
                         int64_t cols) {
    const int64_t nsb = cols / PL_QK_K;
    const size_t ws = pl_dtype_row_size(t, cols), gsz = t == PL_DT_Q4_K ? Q4K_GROUP : Q6K_GROUP;
    uint8_t q[256], sc[8], m[8];
    for (int64_t g = 0; g < rows / 16; g++) {
        for (int64_t s = 0; s < nsb; s++) {
            uint8_t *o = dst + (size_t)(g * nsb + s) * gsz;
            for (int i = 0; i < 16; i++) {
                const uint8_t *row = src + (size_t)(16 * g + i) * ws;
                if (t == PL_DT_Q4_K) {
                    const pl_block_q4_K *b = (const pl_block_q4_K *)row + s;
                    memcpy(o + 2 * i, &b->d, 2);
                    memcpy(o + 32 + 2 * i, &b->dmin, 2);
                    for (int j = 0; j < 8; j++) pl_get_scale_min_k4(j, b->scales, &sc[j], &m[j]);
                    uint32_t v[4];
                    for (int p = 0; p < 4; p++)
                        v[p] = (uint32_t)sc[2 * p] | (uint32_t)sc[2 * p + 1] << 6 |
                               (uint32_t)m[2 * p] << 12 | (uint32_t)m[2 * p + 1] << 18;
                    for (int p = 0; p < 3; p++) {
                        const uint32_t word = v[p] | (v[3] >> 8 * p & 0xFF) << 24;
                        memcpy(o + 64 + 64 * p + 4 * i, &word, 4);
                    }
                    /* GGUF's byte 32p + l already holds unit 2p's column l (low nibble) and
                     * unit 2p + 1's (high): a chunk is 4 of those bytes as they are */
                    for (int p = 0; p < 4; p++)
                        for (int c = 0; c < 8; c++)
                            memcpy(o + 256 + 64 * (8 * p + c) + 4 * i, b->qs + 32 * p + 4 * c, 4);
                } else {
                    const pl_block_q6_K *b = (const pl_block_q6_K *)row + s;
                    q6_K_ints(b, q);
                    memcpy(o + 2 * i, &b->d, 2);
                    for (int p = 0; p < 8; p++) {
                        o[32 + 32 * p + 2 * i] = (uint8_t)b->scales[2 * p];
                        o[32 + 32 * p + 2 * i + 1] = (uint8_t)b->scales[2 * p + 1];
                    }
                    for (int g = 0; g < 16; g++) /* group g: chunks a, b, c in X, Y, Z; d in their top bits */
                        for (int j = 0; j < 3; j++)
                            for (int k = 0; k < 4; k++)
                                o[288 + 192 * g + 64 * j + 4 * i + k] =
                                    (uint8_t)(q[16 * g + 4 * j + k] |
                                              ((q[16 * g + 12 + k] >> (2 * j)) & 3) << 6);
                }
            }
        }
    }
}

size_t pl_mm_x16_kq_act_bytes(int64_t cols) {
    size_t n = (size_t)(cols / PL_QK_K) * (sizeof(pl_block_q8_K) + 4 * sizeof(int32_t));
    return (n + 63) / 64 * 64;
}

void pl_mm_x16_kq_act_row(const float *x, uint8_t *dst, int64_t cols) {
    const int64_t nsb = cols / PL_QK_K;
    pl_act_convert_row(PL_DT_Q4_K, x, dst, cols); /* q8_K, with the fast path */
    const pl_block_q8_K *q = (const pl_block_q8_K *)dst;
    int32_t *xs = (int32_t *)(dst + (size_t)nsb * sizeof(pl_block_q8_K));
    for (int64_t s = 0; s < nsb; s++)
        for (int i = 0; i < 4; i++) {
            int a = q[s].bsums[4 * i] + q[s].bsums[4 * i + 1];
            int b = q[s].bsums[4 * i + 2] + q[s].bsums[4 * i + 3];
            xs[4 * s + i] = (int32_t)(((uint32_t)(uint16_t)(int16_t)a) | ((uint32_t)(uint16_t)(int16_t)b << 16));
        }
}

/* Quant k (0..255) of lane i in a repacked super-block. */
static int q_at(pl_dtype t, const uint8_t *o, int i, int e) {
    int u = e / 32, c = (e % 32) / 4, k = e % 4;
    if (t == PL_DT_Q4_K) {
        uint8_t v = o[256 + 64 * (8 * (u / 2) + c) + 4 * i + k];
        return u % 2 ? v >> 4 : v & 0xF;
    }
    const uint8_t *x = o + 288 + 192 * (e / 16) + 4 * i + k; /* group e / 16's X */
    const int j = (e % 16) / 4;
    if (j < 3) return x[64 * j] & 0x3F;
    return x[0] >> 6 | (x[64] >> 6) << 2 | (x[128] >> 6) << 4;
}

static float f16_at(const uint8_t *p) {
    pl_f16 h;
    memcpy(&h, p, sizeof h);
    return pl_f16_to_f32(h);
}

void pl_mm_x16_sb_scalar(const uint8_t *w, size_t ws, int nr, const uint8_t *a, size_t as, int nb,
                         int64_t cols, float *y, int64_t ldy, size_t gsz, pl_mm_x16_sb_fn sb) {
    const int64_t nsb = cols / PL_QK_K;
    for (int r = 0; r < nr; r++) {
        const uint8_t *grp = w + (size_t)(r / 16) * 16 * ws;
        for (int b = 0; b < nb; b++) {
            const pl_block_q8_K *x = (const pl_block_q8_K *)(a + (size_t)b * as);
            float acc = 0.0f;
            for (int64_t s = 0; s < nsb; s++) acc = sb(grp + (size_t)s * gsz, r % 16, x + s, acc);
            y[(size_t)b * ldy + r] = acc;
        }
    }
}

uint32_t pl_mm_x16_q4_K_pair(const uint8_t *o, int i, int p) {
    uint32_t w[3];
    for (int k = 0; k < 3; k++) memcpy(&w[k], o + 64 + 64 * k + 4 * i, 4);
    if (p < 3) return w[p] & 0xFFFFFF;
    return w[0] >> 24 | (w[1] >> 24) << 8 | (w[2] >> 24) << 16;
}

float pl_mm_x16_sb_fma2(const uint8_t *o, int i, float dx, int32_t S, int32_t M, float acc) {
    acc = fmaf((float)S, f16_at(o + 2 * i) * dx, acc);
    return fmaf((float)-M, f16_at(o + 32 + 2 * i) * dx, acc);
}

/* The references, one super-block of one output: exactly the arithmetic of the header comment. */
static float sb_q4_K(const uint8_t *o, int i, const pl_block_q8_K *x, float acc) {
    int32_t S = 0, M = 0;
    for (int j = 0; j < 8; j++) {
        int32_t isum = 0, xsum = 0;
        for (int e = 32 * j; e < 32 * j + 32; e++) {
            isum += q_at(PL_DT_Q4_K, o, i, e) * x->qs[e];
            xsum += x->qs[e];
        }
        const uint32_t v = pl_mm_x16_q4_K_pair(o, i, j / 2) >> 6 * (j % 2);
        S += (int32_t)(v & 63) * isum;
        M += (int32_t)(v >> 12 & 63) * xsum;
    }
    return pl_mm_x16_sb_fma2(o, i, x->d, S, M, acc);
}

static float sb_q6_K(const uint8_t *o, int i, const pl_block_q8_K *x, float acc) {
    int32_t S = 0, O = 0;
    for (int g = 0; g < 16; g++) {
        int32_t isum = 0;
        for (int e = 16 * g; e < 16 * g + 16; e++) isum += q_at(PL_DT_Q6_K, o, i, e) * x->qs[e];
        const int32_t sc = (int8_t)o[32 + 32 * (g / 2) + 2 * i + g % 2];
        S += sc * isum;
        O += sc * x->bsums[g];
    }
    return fmaf((float)(S - 32 * O), f16_at(o + 2 * i) * x->d, acc);
}

static void tile_q4_K_scalar(const uint8_t *w, size_t ws, int nr, const uint8_t *a, size_t as,
                             int nb, int64_t cols, float *y, int64_t ldy) {
    pl_mm_x16_sb_scalar(w, ws, nr, a, as, nb, cols, y, ldy, Q4K_GROUP, sb_q4_K);
}

static void tile_q6_K_scalar(const uint8_t *w, size_t ws, int nr, const uint8_t *a, size_t as,
                             int nb, int64_t cols, float *y, int64_t ldy) {
    pl_mm_x16_sb_scalar(w, ws, nr, a, as, nb, cols, y, ldy, Q6K_GROUP, sb_q6_K);
}

void pl_mm_kernel_x16_kq(pl_dtype t, pl_mm_kernel *k) {
    k->gemm = NULL;
    k->tr = 16;
    k->tb = 4;
    if (pl_cpu_isa() >= PL_ISA_AVX512 && pl_mm_kernel_x16_kq_avx512(t, k)) {
        if (pl_cpu_amx())
            k->gemm = t == PL_DT_Q4_K ? pl_mm_gemm_x16_q4_K_amx : pl_mm_gemm_x16_q6_K_amx;
        return;
    }
    if (pl_cpu_avxvnni() && pl_mm_kernel_x16_kq_avxvnni(t, k)) return;
    if (pl_cpu_isa() >= PL_ISA_AVX2 && pl_mm_kernel_x16_kq_avx2(t, k)) return;
    k->fn = t == PL_DT_Q4_K ? tile_q4_K_scalar : tile_q6_K_scalar;
}
