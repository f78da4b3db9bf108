/* kernels/matmul_kernels — internal to kernels/: the tile kernels behind pl_matmul, one set per
 * instruction set (matmul_scalar.c, matmul_avx2.c, matmul_avx512.c).
 *
 * A tile kernel computes y[b * ldy + r] = dot(weight row r, activation row b) for r < nr <= tr
 * and b < nb <= tb. `w` is the tile's first weight row (rows w_stride bytes apart), `act` its
 * first activation row in the layout of kernels/quant.h (act_stride bytes apart; for f32
 * weights the f32 input itself).
 *
 * Determinism contract: the operations that produce one (r, b) value, and their order, depend
 * only on cols and the data, never on nr, nb or where in the tile (r, b) sits. pl_matmul relies
 * on it for results that do not change with the thread count or the batch.
 */
#ifndef PL_KERNELS_MATMUL_KERNELS_H
#define PL_KERNELS_MATMUL_KERNELS_H

#include "kernels/dtype.h"
#include "kernels/quant.h"

#include <stddef.h>
#include <stdint.h>

typedef void (*pl_mm_tile_fn)(const uint8_t *w, size_t w_stride, int nr, const uint8_t *act,
                              size_t act_stride, int nb, int64_t cols, float *y, int64_t ldy);

/* A whole thread's share of a batch (B > 3 activation rows): rows [0, nrows) of w against
 * activation rows [0, B), same arguments as a tile otherwise, bitwise the tile kernel's values. Returns 0,
 * having written nothing, if its buffers cannot be allocated (the tiles then do the work). */
typedef int (*pl_mm_gemm_fn)(const uint8_t *w, size_t w_stride, int64_t nrows, const uint8_t *act,
                              size_t act_stride, int64_t B, int64_t cols, float *y, int64_t ldy);

/* The same tile as a later sweep over weight rows an earlier sweep brought into the cache: it
 * spreads the next tile's weights (`next`, the same shape) into L2 beside its work, its share of
 * them (share of shares), so the next first sweep does not wait on memory. */
typedef void (*pl_mm_tile_next_fn)(const uint8_t *w, size_t w_stride, int nr, const uint8_t *act,
                                   size_t act_stride, int nb, int64_t cols, float *y, int64_t ldy,
                                   const uint8_t *next, int share, int shares);

typedef struct {
    pl_mm_tile_fn fn; /* the tile kernel */
    pl_mm_tile_next_fn fn_next; /* if not NULL, fn for the sweeps after a tile's first */
    pl_mm_gemm_fn gemm; /* if not NULL, runs batches in place of the tiles (blocked along K) */
    int tr;           /* most weight rows per call (threads split rows in multiples of it) */
    int tr_small;     /* the same at B <= 3 (a decode step; a MoE expert's few tokens), 0: tr */
    int tb;           /* most activation rows per call */
} pl_mm_kernel;

/* Fill *k for weights of type t; return 0 if this instruction set has no kernel for t. */
int pl_mm_kernel_scalar(pl_dtype t, pl_mm_kernel *k);
int pl_mm_kernel_avx2(pl_dtype t, pl_mm_kernel *k);
int pl_mm_kernel_avx2_kquant(pl_dtype t, pl_mm_kernel *k); /* matmul_kq_avx2.c */
int pl_mm_kernel_avx2_wt(pl_dtype t, pl_mm_kernel *k);     /* matmul_wt_avx2.c (issue 18) */
int pl_mm_kernel_avx512(pl_dtype t, pl_mm_kernel *k);
int pl_mm_kernel_avx512_wt(pl_dtype t, pl_mm_kernel *k);   /* matmul_wt_avx512.c (issue 18) */
/* mxfp4 x q8_0 (issue 34): matmul_mxfp4.c, matmul_mxfp4_avx2.c, matmul_mxfp4_avx512.c */
void pl_mm_kernel_mxfp4_scalar(pl_mm_kernel *k);
void pl_mm_kernel_mxfp4_avx2(pl_mm_kernel *k);
void pl_mm_kernel_mxfp4_avx512(pl_mm_kernel *k);
/* The blocking shared by the GEMMs (matmul_gemm.c): activation rows in sweeps of act_rows,
 * weight rows in panels of panel_rows (a multiple of gr), columns in K blocks of kb_chunks
 * chunks (of nchunks). For each K block and gr-row tile: pack(r, nr, j0, j1) the weights of
 * chunks [j0, j1), then tile(v, b, nr, nb) for the tiles of gb activation rows from b, whose
 * values' state starts at slot v (value (b + i, r + k) at slot v + i * gr + k); after the last
 * K block of a panel, finish(v, b, r, nr) stores activation row b's values of the row tile r. */
typedef struct {
    int gr, gb;
    int64_t act_rows, panel_rows, kb_chunks, nchunks;
    void (*pack)(void *ctx, int64_t r, int nr, int64_t j0, int64_t j1);
    void (*tile)(void *ctx, int64_t v, int64_t b, int nr, int nb);
    void (*finish)(void *ctx, int64_t v, int64_t b, int64_t r, int nr);
} pl_mm_gemm_plan;
void pl_mm_gemm_sweep(const pl_mm_gemm_plan *p, void *ctx, int64_t nrows, int64_t B);
/* matmul_gemm_avx2.c / matmul_gemm_avx512.c: f16 weights, the values of that ISA's f16 tiles */
int pl_mm_gemm_f16_avx2(const uint8_t *w, size_t w_stride, int64_t nrows, const uint8_t *act,
                        size_t act_stride, int64_t B, int64_t cols, float *y, int64_t ldy);
int pl_mm_gemm_f16_avx512(const uint8_t *w, size_t w_stride, int64_t nrows, const uint8_t *act,
                          size_t act_stride, int64_t B, int64_t cols, float *y, int64_t ldy);

/* The x16 layouts: weights repacked 16 rows at a time (matmul_x16.c has the q8_0 layout, the
 * dispatch, and the arithmetic every x16 kernel of a type shares bit for bit). supported: the
 * type has one and rows are a multiple of 16; row_bytes: a group of 16 rows is 16 times this;
 * repack: rows x cols of GGUF rows at src into dst; act_bytes / act_row: the converted
 * activation row (the type's activation format + what the layout needs, e.g. block sums);
 * kernel_x16: the best x16 kernel of the current ISA (scalar, AVX-512 VNNI tiles, AMX). */
int pl_mm_x16_supported(pl_dtype t, int64_t rows, int64_t cols);
size_t pl_mm_x16_row_bytes(pl_dtype t, int64_t cols);
void pl_mm_x16_repack(pl_dtype t, const uint8_t *src, uint8_t *dst, int64_t rows, int64_t cols);
size_t pl_mm_x16_act_bytes(pl_dtype t, int64_t cols);
void pl_mm_x16_act_row(pl_dtype t, const float *x, uint8_t *dst, int64_t cols);
void pl_mm_kernel_x16(pl_dtype t, pl_mm_kernel *k);
int pl_mm_kernel_x16_avx512(pl_mm_kernel *k);                 /* matmul_x16_avx512.c */
int pl_mm_kernel_x16_f16_avx512(pl_mm_kernel *k);             /* matmul_x16_f16_avx512.c */
/* Its wide tile (4 row groups x 6 activation rows) instead of the narrow one (2 x 12), and the
 * same for the AVX-512 bf16 tile (pl_mm_kernel_x16_bf16_avx512): set in
 * kernels/cpu.c for AMD family 0x19 (Zen 4), PAGELLM_F16_TILE=wide|narrow overrides; a test may
 * flip it between calls (the bits are the same). */
extern int pl_x16_f16_wide;
int pl_mm_kernel_x16_half_avx2(pl_dtype t, pl_mm_kernel *k); /* f16 or bf16: matmul_x16_f16_avx2.c */
int pl_mm_kernel_x16_bf16_avx512(pl_mm_kernel *k);            /* vdpbf16ps: matmul_x16_bf16_avx512.c */
/* q8_0, q4_0, iq4_nl and q4_1's 256-bit tiles (x16_q8_ymm.h, issue 35): 16 x 4, AVX-VNNI
 * (matmul_x16_avxvnni.c, also q5_0 and q5_1) and AVX2 (matmul_x16_q8_avx2.c); 0 for the other
 * types */
int pl_mm_kernel_x16_avxvnni(pl_dtype t, pl_mm_kernel *k);
int pl_mm_kernel_x16_q8_avx2(pl_dtype t, pl_mm_kernel *k);
/* q5_0 and q5_1 with plain AVX2 (matmul_x16_q5_avx2.c); 0 for other types */
int pl_mm_kernel_x16_q5_avx2(pl_dtype t, pl_mm_kernel *k);
/* q4_K and q6_K (matmul_x16_kq.c, matmul_x16_kq_avx512.c) */
size_t pl_mm_x16_kq_row_bytes(pl_dtype t, int64_t cols);
void pl_mm_x16_kq_repack(pl_dtype t, const uint8_t *src, uint8_t *dst, int64_t rows,
                         int64_t cols);
size_t pl_mm_x16_kq_act_bytes(int64_t cols);
void pl_mm_x16_kq_act_row(const float *x, uint8_t *dst, int64_t cols);
void pl_mm_kernel_x16_kq(pl_dtype t, pl_mm_kernel *k);
int pl_mm_kernel_x16_kq_avx512(pl_dtype t, pl_mm_kernel *k);
/* their 256-bit tiles and q5_K's, q2_K's, q3_K's and iq4_xs's (x16_kq_ymm.h, issue 35): 16 x 4,
 * AVX2 and AVX-VNNI; 0 for the other types */
int pl_mm_kernel_x16_kq_avx2(pl_dtype t, pl_mm_kernel *k);
int pl_mm_kernel_x16_kq_avxvnni(pl_dtype t, pl_mm_kernel *k);
/* 1 if the current level has a SIMD x16 kernel for t (AVX-512: every x16 type; AVX2
 * and AVX-VNNI: f16, bf16, q4_K, q5_K, q6_K, q2_K, q3_K, iq4_xs, q8_0, q4_0, iq4_nl, q5_0, q4_1,
 * q5_1 and mxfp4), so that repacking t pays */
int pl_mm_x16_fast(pl_dtype t);
void pl_mm_x16_q6_K_tile_avx512(const uint8_t *w, size_t ws, int nr, const uint8_t *a, size_t as,
                                int nb, int64_t cols, float *y, int64_t ldy);
void pl_mm_x16_q4_K_tile_avx512(const uint8_t *w, size_t ws, int nr, const uint8_t *a, size_t as,
                                int nb, int64_t cols, float *y, int64_t ldy);
void pl_mm_x16_tile_avx512(const uint8_t *w, size_t ws, int nr, const uint8_t *a, size_t as,
                           int nb, int64_t cols, float *y, int64_t ldy);
/* AMX tile configuration shared by the x16 AMX kernels (matmul_x16_amx.c): tiles 0-3 int32
 * sums of 16 x 16, tiles 4-5 16 activation rows x 32 bytes (k64: 64), tiles 6-7 8 rows (k64:
 * 16) x 64 bytes of weights (32 or 64 columns of 16 rows); the caller ends with _tile_release(). */
void pl_mm_amx_begin(int k64);
int pl_mm_gemm_x16_q6_K_amx(const uint8_t *w, size_t w_stride, int64_t nrows, const uint8_t *act,
                            size_t act_stride, int64_t B, int64_t cols, float *y, int64_t ldy);
int pl_mm_gemm_x16_q4_K_amx(const uint8_t *w, size_t w_stride, int64_t nrows, const uint8_t *act,
                            size_t act_stride, int64_t B, int64_t cols, float *y, int64_t ldy);
int pl_mm_gemm_x16_amx(const uint8_t *w, size_t w_stride, int64_t nrows, const uint8_t *act,
                       size_t act_stride, int64_t B, int64_t cols, float *y, int64_t ldy);
/* Bytes of a 32-column block of a 16-row group in the x16 layouts of q8_0 (kind 0) and
 * matmul_x16_q4_0.c (1 q4_0, 2 iq4_nl, 3 q5_0, 4 q4_1, 5 q5_1, 6 mxfp4): the kinds of the VNNI
 * tiles. */
static inline size_t pl_mm_x16_block_bytes(int kind) {
    return 16 * (kind == 6   ? sizeof(pl_block_mxfp4)
                 : kind == 5 ? sizeof(pl_block_q5_1)
                 : kind == 4 ? sizeof(pl_block_q4_1)
                 : kind == 3 ? sizeof(pl_block_q5_0)
                 : kind      ? sizeof(pl_block_q4_0)
                             : sizeof(pl_block_q8_0));
}
/* q4_0's x16 layout (matmul_x16_q4_0.c: layout, repack, scalar tile, kernel choice; VNNI tiles
 * and the AMX batches in matmul_x16_q4_0_avx512.c) */
void pl_mm_x16_repack_q4_0(const uint8_t *src, uint8_t *dst, int64_t rows, int64_t cols);
void pl_mm_kernel_x16_q4_0(pl_mm_kernel *k);
void pl_mm_kernel_x16_q4_0_avx512(pl_mm_kernel *k, int amx);
/* iq4_nl in q4_0's x16 layout (the same blocks; nibbles index kvalues_iq4nl) */
void pl_mm_kernel_x16_iq4_nl(pl_mm_kernel *k);
void pl_mm_kernel_x16_iq4_nl_avx512(pl_mm_kernel *k, int amx);
void pl_mm_x16_tile_iq4_nl_avx512(const uint8_t *w, size_t ws, int nr, const uint8_t *a, size_t as,
                                  int nb, int64_t cols, float *y, int64_t ldy);
/* The scalar references of the super-block x16 layouts (q4_K, q5_K, q6_K, q2_K, q3_K, iq4_xs): output by
 * output, acc = sb(group's super-block s, lane i, activation block s, acc) for s in order from
 * +0.0f; gsz = bytes of a group's super-block. */
typedef float (*pl_mm_x16_sb_fn)(const uint8_t *o, int i, const pl_block_q8_K *x, float acc);
/* Their float step with a scale and a min (q4_K, q5_K, q2_K): acc = fma((float)S, d_i * dx, acc),
 * then fma((float)-M, dmin_i * dx, acc), d and dmin the 16 rows' f16 at o and o + 32. */
float pl_mm_x16_sb_fma2(const uint8_t *o, int i, float dx, int32_t S, int32_t M, float acc);
void pl_mm_x16_sb_scalar(const uint8_t *w, size_t ws, int nr, const uint8_t *a, size_t as, int nb,
                         int64_t cols, float *y, int64_t ldy, size_t gsz, pl_mm_x16_sb_fn sb);
/* Kernel choice of the x16 types without AMX: avx512 on AVX-512 machines (it sets fn, tr, tb),
 * else the 256-bit tiles of x16_kq_ymm.h (AVX-VNNI, AVX2), else the scalar tile with 16 x 4
 * tiles; no gemm. */
void pl_mm_x16_choose(pl_dtype t, pl_mm_kernel *k, void (*avx512)(pl_mm_kernel *k), pl_mm_tile_fn scalar);
/* iq4_xs (matmul_x16_iq4_xs.c: layout, repack, scalar tile; VNNI tiles in its _avx512.c) */
size_t pl_mm_x16_iq4_xs_row_bytes(int64_t cols);
void pl_mm_x16_repack_iq4_xs(const uint8_t *src, uint8_t *dst, int64_t rows, int64_t cols);
void pl_mm_kernel_x16_iq4_xs(pl_mm_kernel *k);
void pl_mm_kernel_x16_iq4_xs_avx512(pl_mm_kernel *k);
/* q2_K (matmul_x16_q2_K.c: layout, repack, scalar tile; VNNI tiles in its _avx512.c) */
void pl_mm_x16_repack_q2_K(const uint8_t *src, uint8_t *dst, int64_t rows, int64_t cols);
void pl_mm_kernel_x16_q2_K(pl_mm_kernel *k);
void pl_mm_kernel_x16_q2_K_avx512(pl_mm_kernel *k);
/* q4_K's x16 layout: pair p's 24 bits of lane i in a group's super-block o (the 6-bit scales
 * and mins of units 2p, 2p + 1: bits 0-5, 6-11, 12-17, 18-23; matmul_x16_kq.c) */
uint32_t pl_mm_x16_q4_K_pair(const uint8_t *o, int i, int p);
/* q5_K (matmul_x16_q5_K.c: layout, repack, scalar tile; q4_K's tiles with the fifth bits:
 * matmul_x16_kq_avx512.c, x16_kq_ymm.h) */
void pl_mm_x16_repack_q5_K(const uint8_t *src, uint8_t *dst, int64_t rows, int64_t cols);
void pl_mm_kernel_x16_q5_K(pl_mm_kernel *k);
void pl_mm_kernel_x16_q5_K_avx512(pl_mm_kernel *k);
/* q3_K (matmul_x16_q3_K.c: layout, repack, scalar tile; its VNNI tiles are q2_K's in
 * matmul_x16_q2_K_avx512.c, its 256-bit ones q2_K's in x16_kq_ymm.h) */
size_t pl_mm_x16_q3_K_row_bytes(int64_t cols);
void pl_mm_x16_repack_q3_K(const uint8_t *src, uint8_t *dst, int64_t rows, int64_t cols);
void pl_mm_kernel_x16_q3_K(pl_mm_kernel *k);
void pl_mm_kernel_x16_q3_K_avx512(pl_mm_kernel *k);
/* q5_0: q4_0's nibbles plus a plane of fifth bits, one 64-bit mask per chunk */
void pl_mm_x16_repack_q5_0(const uint8_t *src, uint8_t *dst, int64_t rows, int64_t cols);
void pl_mm_kernel_x16_q5_0(pl_mm_kernel *k);
void pl_mm_kernel_x16_q5_0_avx512(pl_mm_kernel *k, int amx);
void pl_mm_x16_tile_q5_0_avx512(const uint8_t *w, size_t ws, int nr, const uint8_t *a, size_t as,
                                int nb, int64_t cols, float *y, int64_t ldy);
void pl_mm_x16_tile_q4_0_avx512(const uint8_t *w, size_t ws, int nr, const uint8_t *a, size_t as,
                                int nb, int64_t cols, float *y, int64_t ldy); /* matmul_x16_avx512.c */
/* q4_1 and q5_1: q4_0's and q5_0's layouts with the rows' offsets m after the scales, q8_1's
 * activations (matmul_x16_q4_0.c); VNNI tiles only */
void pl_mm_x16_repack_q4_1(const uint8_t *src, uint8_t *dst, int64_t rows, int64_t cols);
void pl_mm_x16_repack_q5_1(const uint8_t *src, uint8_t *dst, int64_t rows, int64_t cols);
void pl_mm_kernel_x16_q4_1(pl_mm_kernel *k);
void pl_mm_kernel_x16_q5_1(pl_mm_kernel *k);
void pl_mm_kernel_x16_q4_1_avx512(pl_mm_kernel *k, int amx);
void pl_mm_kernel_x16_q5_1_avx512(pl_mm_kernel *k, int amx);
void pl_mm_x16_tile_q4_1_avx512(const uint8_t *w, size_t ws, int nr, const uint8_t *a, size_t as,
                                int nb, int64_t cols, float *y, int64_t ldy);
void pl_mm_x16_tile_q5_1_avx512(const uint8_t *w, size_t ws, int nr, const uint8_t *a, size_t as,
                                int nb, int64_t cols, float *y, int64_t ldy);
/* mxfp4 (matmul_x16_mxfp4.c: layout, repack, scalar tile, kernel choice; VNNI tiles in
 * matmul_x16_avx512.c, 256-bit tiles in x16_mxfp4_ymm.h) */
void pl_mm_x16_repack_mxfp4(const uint8_t *src, uint8_t *dst, int64_t rows, int64_t cols);
void pl_mm_kernel_x16_mxfp4(pl_mm_kernel *k);
void pl_mm_kernel_x16_mxfp4_avx512(pl_mm_kernel *k);
void pl_mm_kernel_x16_mxfp4_avxvnni(pl_mm_kernel *k);
void pl_mm_kernel_x16_mxfp4_avx2(pl_mm_kernel *k);
void pl_mm_x16_tile_mxfp4_avx512(const uint8_t *w, size_t ws, int nr, const uint8_t *a, size_t as,
                                 int nb, int64_t cols, float *y, int64_t ldy);

#endif
