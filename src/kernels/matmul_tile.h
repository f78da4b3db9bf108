/* kernels/matmul_tile — the tile entry points of the ISA matmul files (internal to the x16 ymm tiles,
 * matmul_avx2.c, matmul_kq_avx2.c, matmul_wt_avx2.c, matmul_avx512.c, matmul_wt_avx512.c,
 * matmul_wt_tiles.h).
 *
 * A body is an always_inline function body(w, ws, a, as, cols, y, ldy, NR, NB) that computes an
 * NR x NB tile (weight rows x activation rows) with NR and NB compile-time constants, so each
 * (NR, NB) pair is compiled apart with its accumulators in registers. PL_MM_TILE_RxB(name, body)
 * defines the pl_mm_tile_fn `name` that dispatches nr in 1..R and nb in 1..B to its instance
 * (anything else does nothing: the driver never asks for more than the kernel's tr x tb).
 */
#ifndef PL_KERNELS_MATMUL_TILE_H
#define PL_KERNELS_MATMUL_TILE_H

#define PL_MM_TILE_CASE(body, R, B)                                                         \
    case (R) * 8 + (B): body(w, ws, a, as, cols, y, ldy, R, B); break;

#define PL_MM_TILE_FN(name, cases)                                                          \
    static void name(const uint8_t *w, size_t ws, int nr, const uint8_t *a, size_t as, int nb, \
                     int64_t cols, float *y, int64_t ldy) {                                 \
        switch (nr * 8 + nb) {                                                              \
            cases                                                                           \
        default: break;                                                                     \
        }                                                                                   \
    }

#define PL_MM_ROW_CASES2(body, R) PL_MM_TILE_CASE(body, R, 1) PL_MM_TILE_CASE(body, R, 2)
#define PL_MM_ROW_CASES3(body, R) PL_MM_ROW_CASES2(body, R) PL_MM_TILE_CASE(body, R, 3)
#define PL_MM_ROW_CASES4(body, R) PL_MM_ROW_CASES3(body, R) PL_MM_TILE_CASE(body, R, 4)

#define PL_MM_TILE_2x2(name, body)                                                          \
    PL_MM_TILE_FN(name, PL_MM_ROW_CASES2(body, 1) PL_MM_ROW_CASES2(body, 2))
#define PL_MM_TILE_4x2(name, body)                                                          \
    PL_MM_TILE_FN(name, PL_MM_ROW_CASES2(body, 1) PL_MM_ROW_CASES2(body, 2)                 \
                        PL_MM_ROW_CASES2(body, 3) PL_MM_ROW_CASES2(body, 4))
#define PL_MM_TILE_4x3(name, body)                                                          \
    PL_MM_TILE_FN(name, PL_MM_ROW_CASES3(body, 1) PL_MM_ROW_CASES3(body, 2)                 \
                        PL_MM_ROW_CASES3(body, 3) PL_MM_ROW_CASES3(body, 4))
#define PL_MM_TILE_2x4(name, body)                                                          \
    PL_MM_TILE_FN(name, PL_MM_ROW_CASES4(body, 1) PL_MM_ROW_CASES4(body, 2))
#define PL_MM_TILE_4x4(name, body)                                                          \
    PL_MM_TILE_FN(name, PL_MM_ROW_CASES4(body, 1) PL_MM_ROW_CASES4(body, 2)                 \
                        PL_MM_ROW_CASES4(body, 3) PL_MM_ROW_CASES4(body, 4))

/* A body of one weight type out of a family body that takes the type as its last argument
 * (a compile-time constant: the branches on it fold away). */
#define PL_MM_BODY_T(name, body, T)                                                         \
    AI void name(const uint8_t *w, size_t ws, const uint8_t *a, size_t as, int64_t cols, float *y, \
                 int64_t ldy, const int NR, const int NB) {                                 \
        body(w, ws, a, as, cols, y, ldy, NR, NB, T);                                        \
    }

/* The 256-bit x16 tiles (x16_kq_ymm.h, x16_q8_ymm.h): one 16-row group by nb (1, 2)
 * activation rows, body(w, a, as, cols, y, ldy, NB, ARG) with NB a constant. */
#define PL_X16_TILE_NB2(name, body, ARG)                                                    \
    static void name(const uint8_t *w, size_t ws, int nr, const uint8_t *a, size_t as, int nb, \
                     int64_t cols, float *y, int64_t ldy) {                                 \
        (void)ws;                                                                           \
        (void)nr;                                                                           \
        if (nb == 2) body(w, a, as, cols, y, ldy, 2, ARG);                                  \
        else if (nb == 1) body(w, a, as, cols, y, ldy, 1, ARG);                             \
    }

/* The same with up to 4 activation rows (3: 2 + 1): the ymm tiles whose unpacked weights serve
 * four rows (q4_K, q6_K, q8_0, q4_0, iq4_nl). */
#define PL_X16_TILE_NB4(name, body, ARG)                                                    \
    static void name(const uint8_t *w, size_t ws, int nr, const uint8_t *a, size_t as, int nb, \
                     int64_t cols, float *y, int64_t ldy) {                                 \
        (void)ws;                                                                           \
        (void)nr;                                                                           \
        if (nb == 4) body(w, a, as, cols, y, ldy, 4, ARG);                                  \
        else {                                                                              \
            if (nb >= 2) body(w, a, as, cols, y, ldy, 2, ARG);                              \
            if (nb & 1) body(w, a + (size_t)(nb - 1) * as, as, cols, y + (nb - 1) * ldy, ldy, 1, ARG); \
        }                                                                                   \
    }

/* The 256-bit x16 tiles' q8_0 activation rows (matmul_x16.c: qs, d[cols / 32], seed[cols / 32]):
 * of the NB rows as bytes apart, the scales and seeds, and the 2 x NB float accumulators zeroed. */
#define PL_X16_YMM_Q8_0_ROWS(a, as, cols, NB, dx, seed, acc)                                \
    const float *dx[4];                                                                     \
    const int32_t *seed[4];                                                                 \
    __m256 acc[2][4];                                                                       \
    UNROLL for (int b_ = 0; b_ < (NB); b_++) {                                              \
        dx[b_] = (const float *)((a) + (size_t)b_ * (as) + (cols));                         \
        seed[b_] = (const int32_t *)(dx[b_] + (cols) / 32);                                 \
        acc[0][b_] = acc[1][b_] = _mm256_setzero_ps();                                      \
    }

#endif
