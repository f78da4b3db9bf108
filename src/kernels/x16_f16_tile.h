/* kernels/x16_f16_tile — the tile of f16's and bf16's x16 layout (layout and arithmetic:
 * matmul_x16.c), one skeleton for both vector widths: included by matmul_x16_f16_avx512.c
 * (X_LANES 16: a column of a 16-row group is one vcvtph2ps) and matmul_x16_f16_avx2.c (X_LANES 8:
 * two, the group's halves; bf16 too), each defining X_V (the f32 vector), X_CVT(p, BF) (X_LANES
 * halves at p widened, bf16 ones if BF), X_SET1, X_FMA, X_STORE, X_ZERO, X_TB (most activation
 * rows per tile), optionally X_TG (most 16-row groups, 2 if not), and X_CASES (the tile's cases,
 * read where X16_HALF_TILE is used: one file may make tiles of several shapes).
 *
 * Column k of the tile's vectors is multiplied by activation k of each row broadcast, so no lane
 * is ever summed: each output is one accumulator, column after column, as the scalar reference,
 * whatever the width. The weights are prefetched PF_DIST ahead; a later sweep over a tile's
 * weights (name##_next: they are in the cache) prefetches instead its share of the next tile's
 * into L2 (kernels/matmul.c, "the next tile").
 */
#ifndef PL_KERNELS_X16_F16_TILE_H
#define PL_KERNELS_X16_F16_TILE_H

#include "kernels/matmul_kernels.h"

#include "kernels/simd.h"

#include <immintrin.h>

#define UNROLL16 _Pragma("GCC unroll 16")

#ifndef X_TG
#define X_TG 2 /* most 16-row groups per tile */
#endif
enum { X_HALVES = 16 / X_LANES }; /* vectors per 16-row group and column */
/* Each group's weights are asked for 4 KB ahead into L1 (one prefetch per 64-byte line): the
 * stream that starts a tile call, and every decode's, waited on memory with the hardware
 * prefetchers alone. 110M F16, same hour, A/B: decode B=1 134-139 -> 177-180 tok/s, B=32
 * 956-995 -> 1144-1168; 1B F16 prefill 151-153 -> 163-164, decode the same. 8 and 16 KB ahead
 * measured less at B=32 (1153-1156, 1102-1137). In decode the last 4 KB of a group ask for the
 * start of the next tile's group of the same index (else each tile call began cold: a 110M
 * group is 24 KB): 110M F16 decode B=1 156.0 -> 163.5 tok/s (medians of 5, interleaved), 1B
 * the same; in prefill it measured no gain. (AVX-512 measurements, issue 22.) */
enum { PF_DIST = 4096 };
/* AVX2's tile (8 lanes) with 3-6 activation rows asks 8 KB ahead: 110M F16 decode,
 * PAGELLM_ISA=avx2, interleaved pairs (2026-11-27): B = 4 725-768 -> 755-807 tok/s, B = 6
 * 933-1016 -> 1033-1039, B = 32 the same within noise; 16 KB no better; B = 1 1-6 % less. */
enum { PF_DIST_WIDE = X_LANES == 8 ? 8192 : PF_DIST };

AI void f16x_body(const uint8_t *w, size_t ws, const uint8_t *a, size_t as, int64_t cols, float *y,
                  int64_t ldy, const int NG, const int NB, const int BF, const uint8_t *next,
                  int share, int shares) {
    const size_t gs = 16 * ws;
    const int NV = NG * X_HALVES; /* vector v: group v / X_HALVES, its lanes from 16 v % 16 */
    const float *x[X_TB];
    UNROLL16 for (int b = 0; b < NB; b++) x[b] = (const float *)(a + (size_t)b * as);
    X_V acc[X_TG * X_HALVES][X_TB];
    UNROLL16 for (int v = 0; v < NV; v++) UNROLL16 for (int b = 0; b < NB; b++) acc[v][b] = X_ZERO();
    int due = share; /* next: column pairs until this sweep's next share of them */
    for (int64_t k = 0; k < cols; k++) {
        X_V wv[X_TG * X_HALVES];
        if (next && (k & 1) == 0) { /* a later sweep: its share of the next tile, into L2 */
            if (due-- == 0) {
                due = shares - 1;
                UNROLL16 for (int g = 0; g < NG; g++)
                    _mm_prefetch((const char *)(next + (size_t)g * gs + (size_t)k * 32), _MM_HINT_T1);
            }
        } else if ((k & 1) == 0) { /* 32 bytes per column and group: a line every second column */
            /* decode (1-2 rows: the weights stream once): past its group's end, into the next
             * tile's group of the same index, where this thread goes next */
            const size_t off = (size_t)k * 32 + (NB >= 3 ? PF_DIST_WIDE : PF_DIST),
                         skip = NB <= 2 && off >= gs ? (size_t)(NG - 1) * gs : 0;
            UNROLL16 for (int g = 0; g < NG; g++)
                _mm_prefetch((const char *)(w + (size_t)g * gs + off + skip), _MM_HINT_T0);
        }
        UNROLL16 for (int v = 0; v < NV; v++)
            wv[v] = X_CVT(w + (size_t)(v / X_HALVES) * gs + (size_t)k * 32 + (size_t)(v % X_HALVES) * 2 * X_LANES, BF);
        UNROLL16 for (int b = 0; b < NB; b++) {
            const X_V xb = X_SET1(x[b][k]);
            UNROLL16 for (int v = 0; v < NV; v++) acc[v][b] = X_FMA(wv[v], xb, acc[v][b]);
        }
    }
    UNROLL16 for (int v = 0; v < NV; v++) UNROLL16 for (int b = 0; b < NB; b++)
        X_STORE(y + (size_t)b * ldy + X_LANES * v, acc[v][b]);
}

#define F16X_CASE(G, B)                                                                            \
    case G * 16 + B: f16x_body(w, ws, a, as, cols, y, ldy, G, B, x_bf, next, share, shares); break;

/* name: the tile of f16 (BF 0) or bf16 (BF 1) weights; name##_next: the same as a later sweep
 * (pl_mm_tile_next_fn, kernels/matmul_kernels.h) */
#define X16_HALF_TILE(name, BF)                                                                    \
    static void name##_next(const uint8_t *w, size_t ws, int nr, const uint8_t *a, size_t as,     \
                            int nb, int64_t cols, float *y, int64_t ldy, const uint8_t *next,     \
                            int share, int shares) {                                               \
        const int x_bf = BF;                                                                       \
        switch ((nr / 16) * 16 + nb) {                                                             \
            X_CASES                                                                                \
        default: break;                                                                            \
        }                                                                                          \
    }                                                                                              \
    static void name(const uint8_t *w, size_t ws, int nr, const uint8_t *a, size_t as, int nb,    \
                     int64_t cols, float *y, int64_t ldy) {                                       \
        name##_next(w, ws, nr, a, as, nb, cols, y, ldy, NULL, 0, 1);                               \
    }

#endif
