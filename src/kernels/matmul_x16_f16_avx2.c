/* kernels/matmul_x16_f16_avx2 — the x16 layout of f16 and bf16 weights with AVX2 + F16C (issue
 * 35; layout and arithmetic: matmul_x16.c; the tile: x16_f16_tile.h, shared with AVX-512). A
 * column of a 16-row group is two vcvtph2ps (its halves of 8 rows), so one group by up to 6
 * activation rows keeps 12 accumulators, 2 weight vectors and the broadcast in AVX2's 16
 * registers: 12 FMAs per 2 conversions, the same bits as the scalar tile and the AVX-512 one.
 * 7-16 rows (batched decode) are that tile's subtiles taking turns over the columns (below).
 * bf16 widens exactly by a 16-bit shift (vpmovzxwd + vpslld) where f16 has vcvtph2ps; the rest,
 * and the bits (its scalar tile's), are f16's. AVX-512's bf16 tile is vdpbf16ps'
 * (matmul_x16_bf16_avx512.c), with the same bits.
 */
#include <immintrin.h>

/* 8 halves at p as f32: bf16 (BF) shifted into place, or f16 converted */
static inline __m256 x_cvt(const void *p, int BF) {
    const __m128i h = _mm_loadu_si128((const __m128i *)p);
    return BF ? _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)) : _mm256_cvtph_ps(h);
}

#define X_LANES 8
#define X_V __m256
#define X_CVT x_cvt
#define X_SET1 _mm256_set1_ps
#define X_FMA _mm256_fmadd_ps
#define X_STORE _mm256_storeu_ps
#define X_ZERO _mm256_setzero_ps
#define X_TB 6
#define X_CASES                                                                                    \
    F16X_CASE(1, 1) F16X_CASE(1, 2) F16X_CASE(1, 3) F16X_CASE(1, 4) F16X_CASE(1, 5) F16X_CASE(1, 6)
#include "kernels/x16_f16_tile.h"

X16_HALF_TILE(tile_f16_x16_one, 0)
X16_HALF_TILE(tile_bf16_x16_one, 1)

/* More than X_TB activation rows over one group: X_TB rows at a time (12 accumulators) is as
 * many as AVX2's 16 registers hold, but as separate tiles over the group (B = 8 as 4 + 4) the
 * first waited on memory and the next ran from the cache, one after the other: bench model
 * decode at B = 4-9 stayed flat, a step costing the weight stream plus the FMAs. Here the
 * subtiles (as even as can be, as the driver's split) take turns every MULTI_KC columns, each
 * parking its accumulators on the stack between its turns (2 x 12 moves per MULTI_KC x 12 FMAs),
 * so the group streams in once, under the FMAs of every subtile, and each later subtile finds
 * its columns in L1. Each output is still one accumulator, column after column: the same bits. */
enum { MULTI_KC = 64, MULTI_MAX = 16, MULTI_TB = 64 };

/* Columns [k0, k1) of one subtile of NB rows at x, its accumulators in park[0..2 NB). */
AI void f16x_turn(const uint8_t *w, const float *const *x, int64_t k0, int64_t k1, __m256 *park,
                  int pf, const int NB, const int BF) {
    __m256 acc[2][X_TB];
    UNROLL16 for (int b = 0; b < NB; b++) {
        acc[0][b] = park[2 * b];
        acc[1][b] = park[2 * b + 1];
    }
    for (int64_t k = k0; k < k1; k++) {
        if (pf && (k & 1) == 0) /* the first subtile's turn: a line every second column */
            _mm_prefetch((const char *)(w + (size_t)k * 32 + PF_DIST), _MM_HINT_T0);
        const __m256 w0 = x_cvt(w + (size_t)k * 32, BF), w1 = x_cvt(w + (size_t)k * 32 + 16, BF);
        UNROLL16 for (int b = 0; b < NB; b++) {
            const __m256 xb = _mm256_set1_ps(x[b][k]);
            acc[0][b] = _mm256_fmadd_ps(w0, xb, acc[0][b]);
            acc[1][b] = _mm256_fmadd_ps(w1, xb, acc[1][b]);
        }
    }
    UNROLL16 for (int b = 0; b < NB; b++) {
        park[2 * b] = acc[0][b];
        park[2 * b + 1] = acc[1][b];
    }
}

/* The nt subtiles' row counts n[], as even as can be (the driver's split, matmul.c) */
static void even_split(int nb, int nt, int *n) {
    for (int t = 0; t < nt; t++) n[t] = nb / nt + (t < nb % nt);
}

static void f16x_multi(const uint8_t *w, const uint8_t *a, size_t as, const int *n, int nt, int64_t cols,
                       float *y, int64_t ldy, const int BF) {
    const float *x[MULTI_MAX];
    __m256 park[MULTI_MAX][2];
    int nb = 0;
    for (int t = 0; t < nt; t++) nb += n[t];
    for (int b = 0; b < nb; b++) {
        x[b] = (const float *)(a + (size_t)b * as);
        park[b][0] = park[b][1] = _mm256_setzero_ps();
    }
    for (int64_t k0 = 0; k0 < cols; k0 += MULTI_KC) {
        const int64_t k1 = k0 + MULTI_KC < cols ? k0 + MULTI_KC : cols;
        for (int t = 0, b = 0; t < nt; b += n[t], t++) switch (n[t]) {
#define TURN(N)                                                                                    \
    case N: f16x_turn(w, x + b, k0, k1, park[b], t == 0, N, BF); break;
                TURN(1) TURN(2) TURN(3) TURN(4) TURN(5) TURN(6)
#undef TURN
            default: break;
            }
    }
    for (int b = 0; b < nb; b++) {
        _mm256_storeu_ps(y + (size_t)b * ldy, park[b][0]);
        _mm256_storeu_ps(y + (size_t)b * ldy + 8, park[b][1]);
    }
}

/* Up to X_TB rows: one tile; up to MULTI_MAX (batched decode): the subtiles taking turns; more
 * (prefill, and decode past 16 rows): the subtiles one after the other, each over all the
 * columns, which measured 2-3 % faster there than turns (1B F16 prefill 256 and 110M decode
 * B = 24, AVX2, interleaved pairs; B = 12 +1-4 %, 16-20 the same either way). */
AI void f16x_tile(const uint8_t *w, size_t ws, int nr, const uint8_t *a, size_t as, int nb, int64_t cols,
                  float *y, int64_t ldy, const int BF) {
    if (nb <= X_TB) {
        (BF ? tile_bf16_x16_one : tile_f16_x16_one)(w, ws, nr, a, as, nb, cols, y, ldy);
        return;
    }
    int n[(MULTI_TB + X_TB - 1) / X_TB];
    const int nt = (nb + X_TB - 1) / X_TB;
    even_split(nb, nt, n);
    if (nb <= MULTI_MAX) {
        f16x_multi(w, a, as, n, nt, cols, y, ldy, BF);
        return;
    }
    /* the later subtiles spread the next tile's rows (the driver's next, as a rule) into L2 */
    const uint8_t *next = w + (size_t)nr * ws;
    for (int t = 0, b = 0; t < nt; b += n[t], t++)
        (BF ? tile_bf16_x16_one_next : tile_f16_x16_one_next)(w, ws, nr, a + (size_t)b * as, as, n[t], cols,
                                                               y + (size_t)b * ldy, ldy, t ? next : NULL,
                                                               t - 1, nt - 1);
}

static void tile_f16_x16(const uint8_t *w, size_t ws, int nr, const uint8_t *a, size_t as, int nb,
                         int64_t cols, float *y, int64_t ldy) {
    f16x_tile(w, ws, nr, a, as, nb, cols, y, ldy, 0);
}

static void tile_bf16_x16(const uint8_t *w, size_t ws, int nr, const uint8_t *a, size_t as, int nb,
                          int64_t cols, float *y, int64_t ldy) {
    f16x_tile(w, ws, nr, a, as, nb, cols, y, ldy, 1);
}

/* f16's tile, or bf16's (the same layout and skeleton; the 16-bit shift for the conversion) */
int pl_mm_kernel_x16_half_avx2(pl_dtype t, pl_mm_kernel *k) {
    k->fn = t == PL_DT_BF16 ? tile_bf16_x16 : tile_f16_x16;
    k->tr = 16;
    k->tb = MULTI_TB;
    return t == PL_DT_F16 || t == PL_DT_BF16;
}
