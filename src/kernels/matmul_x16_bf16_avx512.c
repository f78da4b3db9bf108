/* kernels/matmul_x16_bf16_avx512 — the x16 layout of bf16 weights with AVX-512 BF16 (issue 35:
 * the F16-as-BF16 weight mode, `--f16-weights bf16`, and GGUF bf16 models). Layout and
 * arithmetic are f16's and bf16's of matmul_x16.c (column k of a 16-row group is 32 bytes; each
 * output one accumulator, acc = fma(w, x, acc) column after column from +0.0f), so this tile gives
 * the scalar tile's bits, twice as fast per instruction as the f16 tile:
 *
 * vdpbf16ps adds to each f32 lane two products of bf16 pairs, the pair's high half first, each
 * rounded once (an FMA: a product of two bf16 is exact in f32). Columns k, k + 1 of a group (64
 * bytes) become, by one vpermw, 16 lanes of (high w[k], low w[k + 1]), and the activations are
 * stored as bf16 pairs the same way round (high x[k], low x[k + 1]: pl_mm_x16_bf16_act_row, once
 * per call), broadcast a pair at a time: one vdpbf16ps is two columns of the column-by-column
 * order, exactly. (vdpbf16ps treats bf16 inputs below 2^-126 as zero and flushes such results to
 * zero: only there can it differ from the scalar tile; a weight converted from f16 is never that
 * small.) An odd last column is one FMA on the widened weights.
 *
 * A tile is 2 groups (32 rows) by up to 12 activation rows: 24 accumulators, 2 weight vectors,
 * the permutation; per column pair 2 loads, 2 vpermw and 24 vdpbf16ps (each activation pair a
 * broadcast from memory). Where pl_x16_f16_wide is set (Zen 4: its broadcasts held the f16 tile
 * back, matmul_x16_f16_avx512.c) it is 4 groups by up to 6 rows: per pair 4 loads, 4 vpermw, 6
 * broadcasts and the same 24 vdpbf16ps (`bench kernels -t 1 --type bf16`, 2048 x 2048, three
 * rounds: B = 32 70-92 % -> 93-95 % of the bf16 peak, B = 512 55-82 % -> 91-93 %); a decode's
 * few rows keep 32-row tiles. The weights are prefetched PF_DIST ahead, as the f16 tile's, and a
 * later sweep prefetches its share of the next tile's into L2 instead (kernels/matmul.c, "the
 * next tile").
 */
#include "kernels/matmul_kernels.h"

#include "kernels/simd.h"

#include <immintrin.h>
#include <string.h>

#define UNROLL16 _Pragma("GCC unroll 16")

enum { TB = 12, PF_DIST = 4096 };

AI void bf16x_body(const uint8_t *w, size_t ws, const uint8_t *a, size_t as, int64_t cols, float *y,
                   int64_t ldy, const int NG, const int NB, const uint8_t *next, int share, int shares) {
    const size_t gs = 16 * ws;
    /* word 2i of a lane pair <- row i of column k + 1 (word 16 + i), word 2i + 1 <- row i of k */
    const __m512i perm = _mm512_set_epi16(15, 31, 14, 30, 13, 29, 12, 28, 11, 27, 10, 26, 9, 25, 8, 24,
                                          7, 23, 6, 22, 5, 21, 4, 20, 3, 19, 2, 18, 1, 17, 0, 16);
    const uint32_t *x[TB];
    UNROLL16 for (int b = 0; b < NB; b++) x[b] = (const uint32_t *)(a + (size_t)b * as);
    __m512 acc[4][TB];
    UNROLL16 for (int g = 0; g < NG; g++) UNROLL16 for (int b = 0; b < NB; b++) acc[g][b] = _mm512_setzero_ps();
    const int64_t np = cols / 2;
    int due = share; /* next: pairs until this sweep's next share of them */
    for (int64_t p = 0; p < np; p++) {
        /* decode (1-2 rows): past its group's end, into the next tile's group of the same index */
        const size_t off = (size_t)p * 64 + PF_DIST, skip = NB <= 2 && off >= gs ? (size_t)(NG - 1) * gs : 0;
        __m512bh wv[4];
        if (next && due-- == 0) {
            due = shares - 1;
            UNROLL16 for (int g = 0; g < NG; g++)
                _mm_prefetch((const char *)(next + (size_t)g * gs + (size_t)p * 64), _MM_HINT_T1);
        }
        UNROLL16 for (int g = 0; g < NG; g++) {
            if (!next) _mm_prefetch((const char *)(w + (size_t)g * gs + off + skip), _MM_HINT_T0);
            wv[g] = (__m512bh)_mm512_permutexvar_epi16(perm, _mm512_loadu_si512(w + (size_t)g * gs + (size_t)p * 64));
        }
        UNROLL16 for (int b = 0; b < NB; b++) {
            const __m512bh xb = (__m512bh)_mm512_set1_epi32((int)x[b][p]);
            UNROLL16 for (int g = 0; g < NG; g++) acc[g][b] = _mm512_dpbf16_ps(acc[g][b], wv[g], xb);
        }
    }
    if (cols & 1) { /* the last column: its pair is (high x, low 0) */
        UNROLL16 for (int g = 0; g < NG; g++) {
            const __m256i h = _mm256_loadu_si256((const __m256i *)(w + (size_t)g * gs + (size_t)np * 64));
            const __m512 wf = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
            UNROLL16 for (int b = 0; b < NB; b++) {
                const uint32_t bits = x[b][np] & 0xffff0000u;
                float xf;
                memcpy(&xf, &bits, sizeof xf);
                acc[g][b] = _mm512_fmadd_ps(wf, _mm512_set1_ps(xf), acc[g][b]);
            }
        }
    }
    UNROLL16 for (int g = 0; g < NG; g++) UNROLL16 for (int b = 0; b < NB; b++)
        _mm512_storeu_ps(y + (size_t)b * ldy + 16 * g, acc[g][b]);
}

#define BF16X_CASE(G, B)                                                                           \
    case G * 16 + B: bf16x_body(w, ws, a, as, cols, y, ldy, G, B, next, share, shares); break;
#define BF16X_ROW(G)                                                                               \
    BF16X_CASE(G, 1) BF16X_CASE(G, 2) BF16X_CASE(G, 3) BF16X_CASE(G, 4) BF16X_CASE(G, 5)          \
    BF16X_CASE(G, 6) BF16X_CASE(G, 7) BF16X_CASE(G, 8) BF16X_CASE(G, 9) BF16X_CASE(G, 10)         \
    BF16X_CASE(G, 11) BF16X_CASE(G, 12)

static void tile_bf16_x16_next(const uint8_t *w, size_t ws, int nr, const uint8_t *a, size_t as, int nb,
                               int64_t cols, float *y, int64_t ldy, const uint8_t *next, int share,
                               int shares) {
    switch ((nr / 16) * 16 + nb) {
        BF16X_ROW(1)
        BF16X_ROW(2)
    default: break;
    }
}

#define BF16X_ROW6(G)                                                                              \
    BF16X_CASE(G, 1) BF16X_CASE(G, 2) BF16X_CASE(G, 3) BF16X_CASE(G, 4) BF16X_CASE(G, 5)          \
    BF16X_CASE(G, 6)

/* the wide shape: 4 groups (64 rows) by up to 6 activation rows */
static void tile_bf16_x16_wide_next(const uint8_t *w, size_t ws, int nr, const uint8_t *a, size_t as,
                                    int nb, int64_t cols, float *y, int64_t ldy, const uint8_t *next,
                                    int share, int shares) {
    switch ((nr / 16) * 16 + nb) {
        BF16X_ROW6(1)
        BF16X_ROW6(2)
        BF16X_ROW6(3)
        BF16X_ROW6(4)
    default: break;
    }
}

static void tile_bf16_x16(const uint8_t *w, size_t ws, int nr, const uint8_t *a, size_t as, int nb,
                          int64_t cols, float *y, int64_t ldy) {
    tile_bf16_x16_next(w, ws, nr, a, as, nb, cols, y, ldy, NULL, 0, 1);
}

static void tile_bf16_x16_wide(const uint8_t *w, size_t ws, int nr, const uint8_t *a, size_t as,
                               int nb, int64_t cols, float *y, int64_t ldy) {
    tile_bf16_x16_wide_next(w, ws, nr, a, as, nb, cols, y, ldy, NULL, 0, 1);
}

int pl_mm_kernel_x16_bf16_avx512(pl_mm_kernel *k) {
    const int wide = pl_x16_f16_wide;
    k->fn = wide ? tile_bf16_x16_wide : tile_bf16_x16;
    k->fn_next = wide ? tile_bf16_x16_wide_next : tile_bf16_x16_next;
    k->gemm = NULL;
    k->tr = wide ? 64 : 32;
    k->tr_small = 32;
    k->tb = wide ? 6 : TB;
    return 1;
}
