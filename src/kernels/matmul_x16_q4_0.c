/* kernels/matmul_x16_q4_0 — q4_0 weights in the x16 layout (issue 22, item 3): the layout, the
 * repacking, the scalar kernel every other x16 q4_0 kernel must match bit for bit, and the
 * choice of kernel. (The x16 hooks and the q8_0 layout it follows: matmul_x16.c.)
 *
 * Layout. Rows in groups of 16; a group holds, for each block k of 32 columns, 288 bytes
 * (16 x 18: the same bytes as the GGUF rows, so decode reads no more than before):
 *
 *   bytes 0..31     the 16 rows' f16 scales d, row i at 2i
 *   bytes 32..287   4 chunks of 64 bytes; byte 4i + t of chunk j (j < 4, t < 4) is row i's byte
 *                   qs[4j + t], i.e. q[4j + t] in the low nibble, q[16 + 4j + t] in the high one
 *
 * So one 64-byte load gives two vpdpbusd operands: (v & 15) holds columns 4j..4j+3 of the 16
 * rows, ((v >> 4) & 15) columns 16+4j..16+4j+3, exactly q8_0's x16 chunks j and j + 4 with the
 * quants as unsigned 0..15. Unpacking a block's 4 chunks into 8 gives the q8_0 x16 block (d then
 * 8 chunks), which is what the AMX batches multiply.
 *
 * Activations are q8_0 in natural order followed by seed[k] = -8 * sum of block k's quants
 * (matmul_x16.c, act_q8_0), so that seed + sum q x = sum (q - 8) x exactly.
 *
 * Arithmetic, identical in every x16 q4_0 kernel: for output (r, b),
 *   isum_k = seed_k + sum_{i<32} q_w[i] * x[i]                            (exact, int32)
 *   acc    = fma((float)isum_k, d_w * d_x, acc)  for k = 0, 1, ... in order, acc from +0.0f
 * the same as q8_0's: any exact way to form isum gives the same bits.
 *
 * iq4_nl has q4_0's blocks (f16 d, nibbles in the same order) with the nibbles indexing the 16
 * levels kvalues_iq4nl (-127..113), so it shares the layout and the repacking. Its kernels look
 * the levels up + 128 (unsigned bytes 1..241, vpshufb) and take q8_0's activations, whose seeds
 * (-128 * block sums) remove the 128: isum_k = seed_k + sum (kvalues[q] + 128) x, the rest as
 * above. The AMX batches unpack the looked-up bytes into q8_0's x16 layout, as for q4_0.
 *
 * q5_0 (q4_0's nibbles and a fifth bit per quant, q - 16) has 352 bytes per block (16 x 22, as
 * GGUF): q4_0's 288, then 8 masks of 64 bits, mask j (at 288 + 8j) holding the fifth bits of
 * chunk j (bit 4i + t: row i, column 4j + t; chunks 4..7 are the high nibbles' columns 16..31).
 * A masked byte add of 16 completes each quant (0..31); q8_0's activations with seeds -16 * block
 * sums remove the offset.
 *
 * q4_1 and q5_1 (x = d q + m, q unsigned) are q4_0's and q5_0's layouts with the 16 rows' f16
 * offsets m after the scales: 320 bytes per block (16 x 20: d at 0, m at 32, the 4 chunks at 64)
 * and 384 (16 x 24: the same, then q5_0's 8 masks at 320), as many bytes as GGUF's. They take
 * q8_1's activations (pl_act_q8_1_row: qs, d, then s = d_x * sum of the block's quants rounded
 * to f16, as llama.cpp), no seeds: the quants need no offset. Arithmetic, in every kernel:
 *   isum_k = sum_{i<32} q_w[i] * x[i]                                     (exact, int32)
 *   acc    = fma((float)isum_k, d_w * d_x, acc); acc = fma(m_w, s_x, acc)  for k in order
 * (no AMX batches for these two: q8_0's AMX kernel has no place for the m term).
 */
#include "kernels/matmul_kernels.h"

#include "kernels/cpu.h"
#include "kernels/quant.h"

#include <math.h>
#include <string.h>

enum { X16_BLOCK = 16 * sizeof(pl_block_q4_0) }; /* 288: one block of 32 columns, 16 rows */
enum { X16_BLOCK5 = 16 * sizeof(pl_block_q5_0) }; /* 352: q5_0's */
enum { X16_BLOCK41 = 16 * sizeof(pl_block_q4_1), X16_BLOCK51 = 16 * sizeof(pl_block_q5_1) };

/* Row i of a group's block at o: the scale (and offset) at 2i (and 32 + 2i), q4_0's chunks at
 * hdr, and with qh (q5_0, q5_1) the fifth bits or-ed into the 8 masks after the chunks. */
static void put_block(uint8_t *o, int i, const pl_f16 *d, const pl_f16 *m, const uint8_t *qs,
                      const uint8_t *qh) {
    const size_t hdr = m ? 64 : 32;
    memcpy(o + 2 * i, d, 2);
    if (m) memcpy(o + 32 + 2 * i, m, 2);
    for (int j = 0; j < 4; j++) memcpy(o + hdr + 64 * j + 4 * i, qs + 4 * j, 4);
    if (!qh) return;
    uint32_t h;
    memcpy(&h, qh, sizeof h);
    for (int j = 0; j < 8; j++) /* chunk j: columns 4j.. (j < 4), 16 + 4(j - 4).. */
        for (int t = 0; t < 4; t++) {
            const int col = j < 4 ? 4 * j + t : 16 + 4 * (j - 4) + t;
            const int bit = 4 * i + t;
            o[hdr + 256 + 8 * j + bit / 8] |= (uint8_t)(((h >> col) & 1) << (bit % 8));
        }
}

/* Every 4- and 5-bit type of this file: GGUF blocks of bsz bytes into x16 blocks of 16 x bsz. */
static void repack_any(pl_dtype t, const uint8_t *src, uint8_t *dst, int64_t rows, int64_t cols) {
    const int64_t nb = cols / PL_QK;
    const size_t bsz = pl_dtype_type_size(t), ws = (size_t)nb * bsz;
    memset(dst, 0, (size_t)rows * ws); /* the masks are or-ed in */
    for (int64_t r = 0; r < rows; r++) {
        const uint8_t *row = src + (size_t)r * ws;
        uint8_t *grp = dst + (size_t)(r / 16) * 16 * ws;
        const int i = (int)(r % 16);
        for (int64_t k = 0; k < nb; k++) {
            const uint8_t *b = row + (size_t)k * bsz;
            uint8_t *o = grp + (size_t)k * 16 * bsz;
            switch (t) {
            case PL_DT_Q5_0: {
                const pl_block_q5_0 *q = (const pl_block_q5_0 *)b;
                put_block(o, i, &q->d, NULL, q->qs, q->qh);
                break;
            }
            case PL_DT_Q4_1: {
                const pl_block_q4_1 *q = (const pl_block_q4_1 *)b;
                put_block(o, i, &q->d, &q->m, q->qs, NULL);
                break;
            }
            case PL_DT_Q5_1: {
                const pl_block_q5_1 *q = (const pl_block_q5_1 *)b;
                put_block(o, i, &q->d, &q->m, q->qs, q->qh);
                break;
            }
            default: { /* q4_0, iq4_nl */
                const pl_block_q4_0 *q = (const pl_block_q4_0 *)b;
                put_block(o, i, &q->d, NULL, q->qs, NULL);
                break;
            }
            }
        }
    }
}

void pl_mm_x16_repack_q4_0(const uint8_t *src, uint8_t *dst, int64_t rows, int64_t cols) {
    repack_any(PL_DT_Q4_0, src, dst, rows, cols);
}

void pl_mm_x16_repack_q5_0(const uint8_t *src, uint8_t *dst, int64_t rows, int64_t cols) {
    repack_any(PL_DT_Q5_0, src, dst, rows, cols);
}

void pl_mm_x16_repack_q4_1(const uint8_t *src, uint8_t *dst, int64_t rows, int64_t cols) {
    repack_any(PL_DT_Q4_1, src, dst, rows, cols);
}

void pl_mm_x16_repack_q5_1(const uint8_t *src, uint8_t *dst, int64_t rows, int64_t cols) {
    repack_any(PL_DT_Q5_1, src, dst, rows, cols);
}

/* Output (row i of the group at grp, activation row ab): the reference, exactly the arithmetic
 * of the header comment (kind: 0 q4_0, 1 iq4_nl, 2 q5_0, 3 q4_1, 4 q5_1); iq4_nl's weights are
 * its levels + 128. */
static float dot_x16(const uint8_t *grp, int i, const uint8_t *ab, int64_t cols, int kind) {
    const int iq4nl = kind == 1, q5 = kind == 2 || kind == 4, with_m = kind >= 3;
    const size_t bsz = kind == 2 ? X16_BLOCK5 : kind == 3 ? X16_BLOCK41 : kind == 4 ? X16_BLOCK51
                                                                                     : X16_BLOCK;
    const size_t hdr = with_m ? 64 : 32;
    const int64_t nblk = cols / PL_QK;
    const int8_t *xq = (const int8_t *)ab;
    const float *dx = (const float *)(ab + cols);
    const int32_t *seed = (const int32_t *)(dx + nblk); /* q8_0's activations */
    const float *sx = dx + nblk;                        /* q8_1's */
    float acc = 0.0f;
    for (int64_t k = 0; k < nblk; k++) {
        const uint8_t *o = grp + (size_t)k * bsz;
        const int8_t *x = xq + k * PL_QK;
        int32_t isum = with_m ? 0 : seed[k];
        for (int j = 0; j < 4; j++)
            for (int t = 0; t < 4; t++) {
                const uint8_t v = o[hdr + 64 * j + 4 * i + t];
                int lo = v & 15, hi = v >> 4;
                if (iq4nl) {
                    lo = pl_kvalues_iq4nl[lo] + 128;
                    hi = pl_kvalues_iq4nl[hi] + 128;
                }
                if (q5) {
                    const int bit = 4 * i + t;
                    lo |= ((o[hdr + 256 + 8 * j + bit / 8] >> (bit % 8)) & 1) << 4;
                    hi |= ((o[hdr + 256 + 8 * (j + 4) + bit / 8] >> (bit % 8)) & 1) << 4;
                }
                isum += lo * x[4 * j + t] + hi * x[16 + 4 * j + t];
            }
        pl_f16 d;
        memcpy(&d, o + 2 * i, sizeof d);
        acc = fmaf((float)isum, pl_f16_to_f32(d) * dx[k], acc);
        if (with_m) {
            pl_f16 m;
            memcpy(&m, o + 32 + 2 * i, sizeof m);
            acc = fmaf(pl_f16_to_f32(m), sx[k], acc);
        }
    }
    return acc;
}

static void tile_scalar_any(const uint8_t *w, size_t ws, int nr, const uint8_t *a, size_t as,
                            int nb, int64_t cols, float *y, int64_t ldy, int kind) {
    for (int r = 0; r < nr; r++)
        for (int b = 0; b < nb; b++)
            y[(size_t)b * ldy + r] =
                dot_x16(w + (size_t)(r / 16) * 16 * ws, r % 16, a + (size_t)b * as, cols, kind);
}

#define SCALAR_TILE(name, kind)                                                                    \
    static void name(const uint8_t *w, size_t ws, int nr, const uint8_t *a, size_t as, int nb,    \
                     int64_t cols, float *y, int64_t ldy) {                                       \
        tile_scalar_any(w, ws, nr, a, as, nb, cols, y, ldy, kind);                                 \
    }
SCALAR_TILE(tile_scalar, 0)
SCALAR_TILE(tile_scalar_iq4_nl, 1)
SCALAR_TILE(tile_scalar_q5_0, 2)
SCALAR_TILE(tile_scalar_q4_1, 3)
SCALAR_TILE(tile_scalar_q5_1, 4)

/* AVX-512 kernels where the machine has them, else the scalar tile (kind: 0 q4_0, 1 iq4_nl,
 * 2 q5_0, 3 q4_1, 4 q5_1). */
static void choose(pl_mm_kernel *k, int kind) {
    static void (*const avx512[])(pl_mm_kernel *, int) = {
        pl_mm_kernel_x16_q4_0_avx512, pl_mm_kernel_x16_iq4_nl_avx512, pl_mm_kernel_x16_q5_0_avx512,
        pl_mm_kernel_x16_q4_1_avx512, pl_mm_kernel_x16_q5_1_avx512};
    static const pl_mm_tile_fn scalar[] = {tile_scalar, tile_scalar_iq4_nl, tile_scalar_q5_0,
                                           tile_scalar_q4_1, tile_scalar_q5_1};
    k->gemm = NULL;
    if (pl_cpu_isa() >= PL_ISA_AVX512) {
        avx512[kind](k, pl_cpu_amx());
        return;
    }
    k->fn = scalar[kind];
    k->tr = 16;
    k->tb = 4;
    static const pl_dtype type[] = {PL_DT_Q4_0, PL_DT_IQ4_NL, PL_DT_Q5_0, PL_DT_Q4_1, PL_DT_Q5_1};
    if (pl_cpu_avxvnni()) pl_mm_kernel_x16_avxvnni(type[kind], k);
    else if ((kind < 2 || kind == 3) && pl_cpu_isa() >= PL_ISA_AVX2)
        pl_mm_kernel_x16_q8_avx2(type[kind], k); /* q4_0, iq4_nl, q4_1 */
    else if (pl_cpu_isa() >= PL_ISA_AVX2) pl_mm_kernel_x16_q5_avx2(type[kind], k); /* q5_0, q5_1 */
}

void pl_mm_kernel_x16_q4_0(pl_mm_kernel *k) { choose(k, 0); }

void pl_mm_kernel_x16_iq4_nl(pl_mm_kernel *k) { choose(k, 1); }

void pl_mm_kernel_x16_q5_0(pl_mm_kernel *k) { choose(k, 2); }

void pl_mm_kernel_x16_q4_1(pl_mm_kernel *k) { choose(k, 3); }

void pl_mm_kernel_x16_q5_1(pl_mm_kernel *k) { choose(k, 4); }
