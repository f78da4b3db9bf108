/* kernels/matmul_x16 — q8_0 weights repacked sixteen rows at a time for integer dot products
 * (issue 22, item 3): the layout, the repacking, the activations' block sums, and the scalar
 * kernel every other x16 kernel must match bit for bit.
 *
 * Layout. Rows are taken in groups of 16 (a weight is repacked only when its rows are a multiple
 * of 16). A group holds, for each block k of 32 columns, 544 bytes (16 x 34, so a group is 16
 * rows' worth of bytes and row offsets of multiples of 16 are unchanged):
 *
 *   bytes 0..31     the 16 rows' f16 scales d, row i at 2i
 *   bytes 32..543   8 chunks of 64 bytes; chunk j holds q[4j..4j+3] of row 0, then of row 1, ...
 *                   row 15, each quant stored as q + 128 (an unsigned byte)
 *
 * A 64-byte chunk is one vpdpbusd operand whose 16 lanes are 16 output rows (the activation's four
 * bytes broadcast), and 8 consecutive chunks are exactly an AMX B tile of 8 rows x 64 bytes (K = 32
 * in groups of 4, N = 16 rows): the same bytes serve both.
 *
 * Activations are q8_0 (kernels/quant.h, natural order) followed by seed[k] = -128 * sum of block
 * k's quants (int32), so that seed + sum (q_w + 128) x = sum q_w x exactly.
 *
 * Arithmetic, identical in every x16 kernel: for output (r, b),
 *   isum_k = seed_k + sum_{i<32} (q_w[i] + 128) * x[i]                    (exact, int32)
 *   acc    = fma((float)isum_k, d_w * d_x, acc)  for k = 0, 1, ... in order, acc from +0.0f
 * The integer part is exact whatever the instruction, and the float part is the same operations
 * in the same order, so scalar, AVX-512 VNNI and AMX give the same bits for every batch size and
 * thread count. (The rows layout's kernels sum in another order: docs/ACCURACY.md.)
 */
#include "kernels/matmul_kernels.h"

#include "base/status.h"
#include "kernels/cpu.h"
#include "kernels/quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { X16_BLOCK = 16 * sizeof(pl_block_q8_0) }; /* 544: one block of 32 columns, 16 rows */

int pl_mm_x16_supported(pl_dtype t, int64_t rows, int64_t cols) {
    if (rows <= 0 || rows % 16 || cols <= 0 || cols % pl_dtype_block_size(t)) return 0;
    switch (t) {
    case PL_DT_F16:
    case PL_DT_BF16: /* f16's layout: below; tiles in matmul_x16_f16_avx2.c, matmul_x16_bf16_avx512.c */
    case PL_DT_Q8_0:
    case PL_DT_Q4_0: /* matmul_x16_q4_0.c, with iq4_nl and q5_0 */
    case PL_DT_IQ4_NL:
    case PL_DT_Q5_0:
    case PL_DT_Q4_1:
    case PL_DT_Q5_1:
    case PL_DT_Q4_K:
    case PL_DT_Q6_K:
    case PL_DT_IQ4_XS: /* matmul_x16_iq4_xs.c */
    case PL_DT_MXFP4:  /* matmul_x16_mxfp4.c */
    case PL_DT_Q2_K: /* matmul_x16_q2_K.c */
    case PL_DT_Q5_K: /* matmul_x16_q5_K.c */
    case PL_DT_Q3_K: return 1; /* matmul_x16_q3_K.c */
    default: return 0;
    }
}

size_t pl_mm_x16_row_bytes(pl_dtype t, int64_t cols) {
    switch (t) {
    case PL_DT_Q4_K:
    case PL_DT_Q6_K: return pl_mm_x16_kq_row_bytes(t, cols);
    case PL_DT_IQ4_XS: return pl_mm_x16_iq4_xs_row_bytes(cols);
    case PL_DT_Q3_K: return pl_mm_x16_q3_K_row_bytes(cols);
    default: return pl_dtype_row_size(t, cols); /* q8_0: the same bytes, rearranged */
    }
}

static void repack_q8_0(const uint8_t *src, uint8_t *dst, int64_t rows, int64_t cols) {
    const int64_t nb = cols / PL_QK;
    const size_t ws = (size_t)nb * sizeof(pl_block_q8_0);
    for (int64_t g = 0; g < rows / 16; g++) {
        const uint8_t *grp = src + (size_t)g * 16 * ws;
        for (int64_t k = 0; k < nb; k++) {
            uint8_t *o = dst + (size_t)g * 16 * ws + (size_t)k * X16_BLOCK;
            for (int i = 0; i < 16; i++) {
                const pl_block_q8_0 *blk = (const pl_block_q8_0 *)(grp + (size_t)i * ws) + k;
                memcpy(o + 2 * i, &blk->d, 2);
                for (int j = 0; j < 8; j++) {
                    uint32_t v;
                    memcpy(&v, blk->qs + 4 * j, 4);
                    v ^= 0x80808080u; /* each quant + 128 */
                    memcpy(o + 32 + 64 * j + 4 * i, &v, 4);
                }
            }
        }
    }
}

/* f16 (and bf16): column k of a group is 16 halves, row 0's first (32 bytes); a group is 32 x
 * cols bytes. */
static void repack_f16(const uint8_t *src, uint8_t *dst, int64_t rows, int64_t cols) {
    const size_t ws = (size_t)cols * sizeof(pl_f16);
    for (int64_t g = 0; g < rows / 16; g++) {
        const uint8_t *grp = src + (size_t)g * 16 * ws;
        uint8_t *o = dst + (size_t)g * 16 * ws;
        for (int i = 0; i < 16; i++) {
            const pl_f16 *row = (const pl_f16 *)(grp + (size_t)i * ws);
            for (int64_t k = 0; k < cols; k++) memcpy(o + (size_t)k * 32 + 2 * i, row + k, 2);
        }
    }
}

/* The f16 and bf16 reference: acc = fma(w, x, acc) column after column, from +0.0f (x: the
 * activation rounded to the weights' type, as f32). */
static void tile_half_scalar(const uint8_t *w, size_t ws, int nr, const uint8_t *a, size_t as,
                             int nb, int64_t cols, float *y, int64_t ldy, int bf16) {
    for (int r = 0; r < nr; r++) {
        const uint8_t *grp = w + (size_t)(r / 16) * 16 * ws;
        for (int b = 0; b < nb; b++) {
            const float *x = (const float *)(a + (size_t)b * as);
            float acc = 0.0f;
            for (int64_t k = 0; k < cols; k++) {
                pl_f16 h;
                memcpy(&h, grp + (size_t)k * 32 + 2 * (r % 16), sizeof h);
                acc = fmaf(bf16 ? pl_bf16_to_f32(h) : pl_f16_to_f32(h), x[k], acc);
            }
            y[(size_t)b * ldy + r] = acc;
        }
    }
}

static void tile_f16_scalar(const uint8_t *w, size_t ws, int nr, const uint8_t *a, size_t as,
                            int nb, int64_t cols, float *y, int64_t ldy) {
    tile_half_scalar(w, ws, nr, a, as, nb, cols, y, ldy, 0);
}

static void tile_bf16_scalar(const uint8_t *w, size_t ws, int nr, const uint8_t *a, size_t as,
                             int nb, int64_t cols, float *y, int64_t ldy) {
    tile_half_scalar(w, ws, nr, a, as, nb, cols, y, ldy, 1);
}

void pl_mm_x16_repack(pl_dtype t, const uint8_t *src, uint8_t *dst, int64_t rows, int64_t cols) {
    switch (t) {
    case PL_DT_Q8_0: repack_q8_0(src, dst, rows, cols); break;
    case PL_DT_F16:
    case PL_DT_BF16: repack_f16(src, dst, rows, cols); break;
    case PL_DT_Q4_0:
    case PL_DT_IQ4_NL: pl_mm_x16_repack_q4_0(src, dst, rows, cols); break; /* the same blocks */
    case PL_DT_Q5_0: pl_mm_x16_repack_q5_0(src, dst, rows, cols); break;
    case PL_DT_Q4_1: pl_mm_x16_repack_q4_1(src, dst, rows, cols); break;
    case PL_DT_Q5_1: pl_mm_x16_repack_q5_1(src, dst, rows, cols); break;
    case PL_DT_Q4_K:
    case PL_DT_Q6_K: pl_mm_x16_kq_repack(t, src, dst, rows, cols); break;
    case PL_DT_IQ4_XS: pl_mm_x16_repack_iq4_xs(src, dst, rows, cols); break;
    case PL_DT_Q2_K: pl_mm_x16_repack_q2_K(src, dst, rows, cols); break;
    case PL_DT_Q5_K: pl_mm_x16_repack_q5_K(src, dst, rows, cols); break;
    case PL_DT_Q3_K: pl_mm_x16_repack_q3_K(src, dst, rows, cols); break;
    case PL_DT_MXFP4: pl_mm_x16_repack_mxfp4(src, dst, rows, cols); break;
    default: break;
    }
}

size_t pl_mm_x16_act_bytes(pl_dtype t, int64_t cols) {
    size_t n;
    switch (t) {
    case PL_DT_Q4_K:
    case PL_DT_Q6_K:
    case PL_DT_IQ4_XS:
    case PL_DT_Q2_K:
    case PL_DT_Q5_K:
    case PL_DT_Q3_K: return pl_mm_x16_kq_act_bytes(cols);
    case PL_DT_F16: /* as the rows layout: f16-rounded f32 */
    case PL_DT_BF16: /* f32 too (rounded to bf16); AVX-512 BF16: bf16 pairs in the first half */
        return pl_act_row_bytes(PL_DT_F16, cols);
    case PL_DT_Q4_1:
    case PL_DT_Q5_1: return pl_act_row_bytes(t, cols); /* q8_1, as the rows layout */
    default: /* q8_0: qs, d, seed */
        n = (size_t)cols + (size_t)(cols / PL_QK) * (sizeof(float) + sizeof(int32_t));
        break;
    }
    return (n + 63) / 64 * 64;
}

/* q8_0 activations in natural order, then seed[k] = -zero * sum of block k's quants, zero being
 * the weights' offset (128 for q8_0's q + 128, 8 for q4_0's nibbles). */
static void act_q8_0(const float *x, uint8_t *dst, int64_t cols, int32_t zero) {
    if (pl_cpu_isa() >= PL_ISA_AVX2 && pl_cpu_isa() < PL_ISA_AVX512) {
        pl_act_q8_0_seeds_avx2(x, dst, cols, zero);
        return;
    }
    pl_act_convert_row(PL_DT_Q8_0, x, dst, cols);
    const int64_t nb = cols / PL_QK;
    const int8_t *qs = (const int8_t *)dst;
    int32_t *seed = (int32_t *)(dst + cols + (size_t)nb * sizeof(float));
    for (int64_t k = 0; k < nb; k++) {
        int32_t s = 0;
        for (int i = 0; i < PL_QK; i++) s += qs[k * PL_QK + i];
        seed[k] = -zero * s;
    }
}

/* The reference: one output at a time, exactly the arithmetic of the header comment. */
static void tile_x16_scalar(const uint8_t *w, size_t ws, int nr, const uint8_t *a, size_t as,
                            int nb, int64_t cols, float *y, int64_t ldy) {
    const int64_t nblk = cols / PL_QK;
    for (int r = 0; r < nr; r++) {
        const uint8_t *grp = w + (size_t)(r / 16) * 16 * ws;
        const int i = r % 16;
        for (int b = 0; b < nb; b++) {
            const uint8_t *ab = a + (size_t)b * as;
            const int8_t *xq = (const int8_t *)ab;
            const float *dx = (const float *)(ab + cols);
            const int32_t *seed = (const int32_t *)(ab + cols + (size_t)nblk * sizeof(float));
            float acc = 0.0f;
            for (int64_t k = 0; k < nblk; k++) {
                const uint8_t *o = grp + (size_t)k * X16_BLOCK;
                int32_t isum = seed[k];
                for (int j = 0; j < 8; j++)
                    for (int t = 0; t < 4; t++)
                        isum += (int32_t)o[32 + 64 * j + 4 * i + t] * xq[k * PL_QK + 4 * j + t];
                pl_f16 d;
                memcpy(&d, o + 2 * i, sizeof d);
                const float s = pl_f16_to_f32(d) * dx[k];
                acc = fmaf((float)isum, s, acc);
            }
            y[(size_t)b * ldy + r] = acc;
        }
    }
}

void pl_mm_x16_act_row(pl_dtype t, const float *x, uint8_t *dst, int64_t cols) {
    switch (t) {
    case PL_DT_Q4_K:
    case PL_DT_Q6_K:
    case PL_DT_IQ4_XS:
    case PL_DT_Q2_K:
    case PL_DT_Q5_K:
    case PL_DT_Q3_K: pl_mm_x16_kq_act_row(x, dst, cols); break;
    case PL_DT_F16:
    case PL_DT_Q4_1:
    case PL_DT_Q5_1: pl_act_convert_row(t, x, dst, cols); break;
    case PL_DT_BF16:
        if (pl_cpu_avx512bf16()) { /* vdpbf16ps pairs (high x[c], low x[c + 1]) */
            pl_bf16 *h = (pl_bf16 *)dst;
            for (int64_t c = 0; c < cols; c += 2) {
                h[c] = c + 1 < cols ? pl_f32_to_bf16(x[c + 1]) : 0;
                h[c + 1] = pl_f32_to_bf16(x[c]);
            }
        } else
            for (int64_t c = 0; c < cols; c++) ((float *)dst)[c] = pl_bf16_to_f32(pl_f32_to_bf16(x[c]));
        break;
    case PL_DT_Q4_0: act_q8_0(x, dst, cols, 8); break; /* q8_0's row, -8 * block sums */
    case PL_DT_Q5_0: act_q8_0(x, dst, cols, 16); break;
    case PL_DT_MXFP4: act_q8_0(x, dst, cols, 12); break; /* levels + 12 */
    default: act_q8_0(x, dst, cols, 128); break; /* q8_0 and iq4_nl: weights stored + 128 */
    }
}

int pl_mm_x16_fast(pl_dtype t) {
    pl_isa isa = pl_cpu_isa();
    return isa >= PL_ISA_AVX512 ||
           (isa >= PL_ISA_AVX2 && (t == PL_DT_Q4_K || t == PL_DT_Q6_K || t == PL_DT_F16 || t == PL_DT_BF16 || t == PL_DT_Q2_K || t == PL_DT_Q5_K || t == PL_DT_Q3_K ||
                                   t == PL_DT_IQ4_XS || t == PL_DT_Q8_0 || t == PL_DT_Q4_0 || t == PL_DT_IQ4_NL ||
                                   t == PL_DT_MXFP4 || t == PL_DT_Q5_0 || t == PL_DT_Q4_1 || t == PL_DT_Q5_1));
}

void pl_mm_x16_choose(pl_dtype t, pl_mm_kernel *k, void (*avx512)(pl_mm_kernel *k), pl_mm_tile_fn scalar) {
    k->gemm = NULL;
    k->tr = 16;
    k->tb = 4;
    if (pl_cpu_isa() >= PL_ISA_AVX512) avx512(k);
    else if (!(pl_cpu_avxvnni() && pl_mm_kernel_x16_kq_avxvnni(t, k)) &&
             !(pl_cpu_isa() >= PL_ISA_AVX2 && pl_mm_kernel_x16_kq_avx2(t, k)))
        k->fn = scalar;
}

void pl_mm_kernel_x16(pl_dtype t, pl_mm_kernel *k) {
    k->gemm = NULL;
    k->tr = 16;
    k->tb = 4;
    switch (t) {
    case PL_DT_Q8_0:
        if (pl_cpu_isa() >= PL_ISA_AVX512 && pl_mm_kernel_x16_avx512(k)) {
            if (pl_cpu_amx()) k->gemm = pl_mm_gemm_x16_amx;
            return;
        }
        if (pl_cpu_avxvnni() && pl_mm_kernel_x16_avxvnni(t, k)) return;
        if (pl_cpu_isa() >= PL_ISA_AVX2 && pl_mm_kernel_x16_q8_avx2(t, k)) return;
        k->fn = tile_x16_scalar;
        return;
    case PL_DT_Q4_K:
    case PL_DT_Q6_K: pl_mm_kernel_x16_kq(t, k); return;
    case PL_DT_IQ4_XS: pl_mm_kernel_x16_iq4_xs(k); return;
    case PL_DT_Q2_K: pl_mm_kernel_x16_q2_K(k); return;
    case PL_DT_Q5_K: pl_mm_kernel_x16_q5_K(k); return;
    case PL_DT_Q3_K: pl_mm_kernel_x16_q3_K(k); return;
    case PL_DT_F16:
        if (pl_cpu_isa() >= PL_ISA_AVX512 && pl_mm_kernel_x16_f16_avx512(k)) return;
        if (pl_cpu_isa() >= PL_ISA_AVX2 && pl_mm_kernel_x16_half_avx2(t, k)) return;
        k->fn = tile_f16_scalar;
        return;
    case PL_DT_BF16:
        if (pl_cpu_avx512bf16() && pl_mm_kernel_x16_bf16_avx512(k)) return;
        if (pl_cpu_isa() >= PL_ISA_AVX2 && pl_mm_kernel_x16_half_avx2(t, k)) return;
        k->fn = tile_bf16_scalar;
        return;
    case PL_DT_Q4_0: pl_mm_kernel_x16_q4_0(k); return;
    case PL_DT_IQ4_NL: pl_mm_kernel_x16_iq4_nl(k); return;
    case PL_DT_Q5_0: pl_mm_kernel_x16_q5_0(k); return;
    case PL_DT_Q4_1: pl_mm_kernel_x16_q4_1(k); return;
    case PL_DT_Q5_1: pl_mm_kernel_x16_q5_1(k); return;
    case PL_DT_MXFP4: pl_mm_kernel_x16_mxfp4(k); return;
    default: PL_ASSERT(!"pl_mm_kernel_x16: type has no x16 layout");
    }
}
