/* kernels/matmul_x16_kq_amx — q4_K's and q6_K's x16 layouts in batches of 32+ (q6_K 48+)
 * activation rows with AMX (layouts and arithmetic: matmul_x16_kq.c). q4_K below; q6_K's
 * digit planes further down; both through one driver (run) at the end.
 *
 * The 6-bit scales would need an integer multiply per output and 32-column unit after every
 * tile product; instead each scale is split, sc = 8 sh + sl (sh, sl in 0..7), and a 16-row
 * group is unpacked once into two byte planes, sh * q and sl * q (at most 105: bytes), in AMX
 * B tiles of 64 columns. Then
 *   sum_j sc_j sum_{unit j} q x = 8 * (A . Wh) + (A . Wl)
 * exactly, so the tiles accumulate a whole super-block (4 steps of K = 64 into two sums) and
 * the epilogue runs once per super-block: S = 8 Ch + Cl, the mins through vpdpwssd, and the
 * float step of the VNNI tiles (same bits). Consecutive super-blocks alternate between tiles
 * 0-1 and 2-3, so one's products run while the other's epilogue does.
 */
#include "kernels/matmul_kernels.h"
#include "kernels/quant.h"

#include "kernels/simd.h"
#include "kernels/x16_avx512.h"

#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

enum { GROUP = 16 * 144 }; /* bytes of a 16-row group's super-block */
enum { PLANE = 16 * 64 };  /* one B tile: 64 columns x 16 rows */

/* Bytes of v times the per-lane factor f16 (each 16-bit half of a lane holds the lane's factor);
 * products below 256. */
AI __m512i mul_bytes(__m512i v, __m512i f16) {
    const __m512i lo = _mm512_mullo_epi16(_mm512_and_si512(v, _mm512_set1_epi16(0xFF)), f16);
    const __m512i hi = _mm512_mullo_epi16(_mm512_srli_epi16(v, 8), f16);
    return _mm512_or_si512(lo, _mm512_slli_epi16(hi, 8));
}

/* Group o's planes: u + ((4 s + p) * 2 + h) * PLANE, h = 0: sh * q, 1: sl * q, for the 64
 * columns of pair p (units 2p, 2p + 1) of super-block s; B tile row k = chunk k of unit 2p
 * (k < 8) or chunk k - 8 of unit 2p + 1. */
static void unpack(const uint8_t *o, int64_t nsb, uint8_t *u) {
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    for (int64_t s = 0; s < nsb; s++) {
        const uint8_t *os = o + (size_t)s * GROUP;
        for (int p = 0; p < 4; p++) {
            uint8_t *hp = u + (size_t)((4 * s + p) * 2) * PLANE, *lp = hp + PLANE;
            __m512i scs[2], mv;
            pl_x16_q4_K_scales(os, p, &scs[0], &scs[1], &mv);
            for (int half = 0; half < 2; half++) { /* unit 2p + half */
                const __m512i sc = scs[half];
                const __m512i sh = _mm512_or_si512(_mm512_srli_epi32(sc, 3),
                                                   _mm512_slli_epi32(_mm512_srli_epi32(sc, 3), 16));
                const __m512i sl7 = _mm512_and_si512(sc, _mm512_set1_epi32(7));
                const __m512i sl = _mm512_or_si512(sl7, _mm512_slli_epi32(sl7, 16));
                for (int c = 0; c < 8; c++) {
                    const __m512i v = _mm512_loadu_si512(os + 256 + 64 * (8 * p + c));
                    const __m512i q = half ? _mm512_and_si512(_mm512_srli_epi16(v, 4), low4)
                                           : _mm512_and_si512(v, low4);
                    _mm512_store_si512(hp + 64 * (8 * half + c), mul_bytes(q, sh));
                    _mm512_store_si512(lp + 64 * (8 * half + c), mul_bytes(q, sl));
                }
            }
        }
    }
}

typedef struct {
    const uint8_t *a;
    size_t as;
    int64_t nsb;
} acts;

/* Activation rows [b, b + 16) of super-block s: sums (Ch, Cl) of the group -> acc. */
AI void epilogue(const acts *v, const uint8_t *os, const int32_t (*ch)[16],
                 const int32_t (*cl)[16], int64_t b, int64_t s, float (*acc)[16]) {
    __m512i mv[4];
    UNROLL for (int p = 0; p < 4; p++) {
        __m512i sc_a, sc_b;
        pl_x16_q4_K_scales(os, p, &sc_a, &sc_b, &mv[p]);
    }
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)os));
    const __m512 dmin = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(os + 32)));
    for (int m = 0; m < 16; m++) {
        const uint8_t *ab = v->a + (size_t)(b + m) * v->as;
        const pl_block_q8_K *x = (const pl_block_q8_K *)ab + s;
        const int32_t *xs = (const int32_t *)(ab + (size_t)v->nsb * sizeof(pl_block_q8_K)) + 4 * s;
        __m512i M = _mm512_setzero_si512();
        UNROLL for (int p = 0; p < 4; p++) M = _mm512_dpwssd_epi32(M, mv[p], _mm512_set1_epi32(xs[p]));
        const __m512i S = _mm512_add_epi32(_mm512_slli_epi32(_mm512_load_si512(ch[m]), 3),
                                           _mm512_load_si512(cl[m]));
        const __m512 dx = _mm512_set1_ps(x->d);
        __m512 f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(S), _mm512_mul_ps(d, dx), _mm512_load_ps(acc[m]));
        f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_setzero_si512(), M)),
                            _mm512_mul_ps(dmin, dx), f);
        _mm512_store_ps(acc[m], f);
    }
}

/* Tiles of super-block s into C tiles (c0, c1) = (0, 1) or (2, 3): 4 steps of 64 columns. */
#define PRODUCTS(c0, c1)                                                                           \
    do {                                                                                           \
        _tile_zero(c0);                                                                            \
        _tile_zero(c1);                                                                            \
        for (int p = 0; p < 4; p++) {                                                              \
            const uint8_t *pl = u + (size_t)((4 * s + p) * 2) * PLANE;                             \
            _tile_loadd(4, a0 + (size_t)s * sizeof(pl_block_q8_K) + 4 + 64 * p, v->as);            \
            _tile_loadd(6, pl, 64);                                                                \
            _tile_loadd(7, pl + PLANE, 64);                                                        \
            _tile_dpbsud(c0, 4, 6);                                                                \
            _tile_dpbsud(c1, 4, 7);                                                                \
        }                                                                                          \
    } while (0)

AI void products(const acts *v, const uint8_t *u, const uint8_t *a0, int64_t s) {
    if (s % 2 == 0) PRODUCTS(0, 1);
    else PRODUCTS(2, 3);
}

/* Activation rows [b, b + 16) against the group (o, its planes u): y rows. */
static void kq_amx_tiles(const acts *v, const uint8_t *o, const uint8_t *u, int64_t b, float *y,
                  int64_t ldy) {
    int32_t c[2][2][16][16] __attribute__((aligned(64))); /* [parity][h/l][row][lane] */
    float acc[16][16] __attribute__((aligned(64)));
    memset(acc, 0, sizeof acc);
    const uint8_t *a0 = v->a + (size_t)b * v->as;
    products(v, u, a0, 0);
    for (int64_t s = 0; s < v->nsb; s++) {
        if (s % 2 == 0) {
            _tile_stored(0, c[0][0], 64);
            _tile_stored(1, c[0][1], 64);
        } else {
            _tile_stored(2, c[1][0], 64);
            _tile_stored(3, c[1][1], 64);
        }
        if (s + 1 < v->nsb) products(v, u, a0, s + 1); /* runs during this epilogue */
        epilogue(v, o + (size_t)s * GROUP, (const int32_t(*)[16])c[s % 2][0],
                 (const int32_t(*)[16])c[s % 2][1], b, s, acc);
    }
    for (int m = 0; m < 16; m++) memcpy(y + (size_t)(b + m) * ldy, acc[m], sizeof acc[m]);
}

/* ---- q6_K --------------------------------------------------------------------------------- */

/* q6_K's 16-column scales are int8 and its quants reach 63, so even a split like q4_K's would
 * not fit bytes; instead each scale is written in balanced base 5, sc = d0 + 5 d1 + 25 d2 +
 * 125 d3 with digits in -2..2, and the group is unpacked into four signed byte planes d_i * q
 * (|d_i q| <= 126). With S_i = A . P_i over the super-block (tdpbssd, K = 64 steps),
 *   sum_g sc_g sum_{group g} q x = S_0 + 5 (S_1 + 5 (S_2 + 5 S_3))
 * exactly; the epilogue then subtracts 32 O (O through vpdpwssd, as the VNNI tiles) and does
 * their float step: same bits. */
enum { Q6_GROUP = 16 * 210 };

/* Signed bytes of v (0..63) times the per-lane factor f16 (-2..2 in each 16-bit half). */
AI __m512i mul_bytes_signed(__m512i v, __m512i f16) {
    const __m512i m = _mm512_set1_epi16(0xFF);
    const __m512i lo = _mm512_mullo_epi16(_mm512_and_si512(v, m), f16);
    const __m512i hi = _mm512_mullo_epi16(_mm512_srli_epi16(v, 8), f16);
    return _mm512_or_si512(_mm512_and_si512(lo, m), _mm512_slli_epi16(hi, 8));
}

/* Planes of super-block s: u + ((4 s + p) * 4 + i) * PLANE, digit i, 64 columns of pair p. */
static void unpack_q6(const uint8_t *o, int64_t nsb, uint8_t *u) {
    for (int64_t s = 0; s < nsb; s++) {
        const uint8_t *os = o + (size_t)s * Q6_GROUP;
        for (int p = 0; p < 4; p++) {
            /* the 4 groups of these 64 columns: int32 scale per lane, then its digits (each
             * in both 16-bit halves of the lane) */
            __m512i dig[4][4]; /* [group][digit] */
            for (int q2 = 0; q2 < 2; q2++) {
                const __m512i pr = _mm512_cvtepi8_epi16(
                    _mm256_loadu_si256((const __m256i *)(os + 32 + 32 * (2 * p + q2))));
                for (int e = 0; e < 2; e++) {
                    __m512i sc = e ? _mm512_srai_epi32(pr, 16)
                                   : _mm512_srai_epi32(_mm512_slli_epi32(pr, 16), 16);
                    for (int i = 0; i < 4; i++) { /* d = sc - 5 floor((sc + 2) / 5) */
                        const __m512 f = _mm512_cvtepi32_ps(_mm512_add_epi32(sc, _mm512_set1_epi32(2)));
                        const __m512i fl = _mm512_cvtps_epi32(
                            _mm512_roundscale_ps(_mm512_div_ps(f, _mm512_set1_ps(5.0f)),
                                                 _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC));
                        const __m512i d = _mm512_sub_epi32(sc, _mm512_mullo_epi32(fl, _mm512_set1_epi32(5)));
                        dig[2 * q2 + e][i] = _mm512_or_si512(_mm512_and_si512(d, _mm512_set1_epi32(0xFFFF)),
                                                             _mm512_slli_epi32(d, 16));
                        sc = fl;
                    }
                }
            }
            uint8_t *pp = u + (size_t)((4 * s + p) * 4) * PLANE;
            for (int g = 0; g < 4; g++) { /* group 4p + g: unit 2p + g / 2, chunks 4 (g % 2) + j */
                __m512i q[4];
                pl_x16_q6_quad(os + 288 + 192 * (4 * p + g), q);
                for (int j = 0; j < 4; j++) {
                    const int kr = 8 * (g / 2) + 4 * (g % 2) + j; /* B tile row */
                    for (int i = 0; i < 4; i++)
                        _mm512_store_si512(pp + (size_t)i * PLANE + 64 * kr, mul_bytes_signed(q[j], dig[g][i]));
                }
            }
        }
    }
}

/* Activation rows [b, b + 16) against the group (o, its planes u): y rows. */
static void kq_amx_tiles_q6(const acts *v, const uint8_t *o, const uint8_t *u, int64_t b, float *y,
                     int64_t ldy) {
    int32_t c[4][16][16] __attribute__((aligned(64)));
    float acc[16][16] __attribute__((aligned(64)));
    memset(acc, 0, sizeof acc);
    const uint8_t *a0 = v->a + (size_t)b * v->as;
    for (int64_t s = 0; s < v->nsb; s++) {
        const uint8_t *os = o + (size_t)s * Q6_GROUP;
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
        for (int p = 0; p < 4; p++) {
            const uint8_t *pl = u + (size_t)((4 * s + p) * 4) * PLANE;
            _tile_loadd(4, a0 + (size_t)s * sizeof(pl_block_q8_K) + 4 + 64 * p, v->as);
            _tile_loadd(6, pl, 64);
            _tile_loadd(7, pl + PLANE, 64);
            _tile_dpbssd(0, 4, 6);
            _tile_dpbssd(1, 4, 7);
            _tile_loadd(6, pl + 2 * PLANE, 64);
            _tile_loadd(7, pl + 3 * PLANE, 64);
            _tile_dpbssd(2, 4, 6);
            _tile_dpbssd(3, 4, 7);
        }
        _tile_stored(0, c[0], 64);
        _tile_stored(1, c[1], 64);
        _tile_stored(2, c[2], 64);
        _tile_stored(3, c[3], 64);
        __m512i pr[8];
        UNROLL for (int q2 = 0; q2 < 8; q2++)
            pr[q2] = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(os + 32 + 32 * q2)));
        const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)os));
        for (int m = 0; m < 16; m++) {
            const pl_block_q8_K *x = (const pl_block_q8_K *)(v->a + (size_t)(b + m) * v->as) + s;
            __m512i S = _mm512_load_si512(c[3][m]);
            for (int i = 2; i >= 0; i--) /* S = S_i + 5 S */
                S = _mm512_add_epi32(_mm512_load_si512(c[i][m]),
                                     _mm512_add_epi32(_mm512_slli_epi32(S, 2), S));
            __m512i O = _mm512_setzero_si512();
            UNROLL for (int q2 = 0; q2 < 8; q2++) {
                int32_t bs;
                memcpy(&bs, x->bsums + 2 * q2, sizeof bs);
                O = _mm512_dpwssd_epi32(O, pr[q2], _mm512_set1_epi32(bs));
            }
            const __m512i t = _mm512_sub_epi32(S, _mm512_slli_epi32(O, 5));
            _mm512_store_ps(acc[m], _mm512_fmadd_ps(_mm512_cvtepi32_ps(t),
                                                    _mm512_mul_ps(d, _mm512_set1_ps(x->d)),
                                                    _mm512_load_ps(acc[m])));
        }
    }
    for (int m = 0; m < 16; m++) memcpy(y + (size_t)(b + m) * ldy, acc[m], sizeof acc[m]);
}

/* ---- the driver of both ------------------------------------------------------------------ */

typedef struct {
    int min_b;          /* fewer activation rows: 0, the VNNI tiles do it */
    size_t planes;      /* B tiles per super-block in the unpacked group */
    void (*unpack)(const uint8_t *o, int64_t nsb, uint8_t *u);
    void (*tiles)(const acts *v, const uint8_t *o, const uint8_t *u, int64_t b, float *y,
                  int64_t ldy);
    pl_mm_tile_fn tail; /* the rows beyond the last 16 */
} kq_amx;

/* A thread's rows, one 16-row group at a time: unpack it, then every 16 activation rows. */
static int kq_amx_run(const kq_amx *k, const uint8_t *w, size_t ws, int64_t nrows, const uint8_t *act,
               size_t act_stride, int64_t B, int64_t cols, float *y, int64_t ldy) {
    if (B < k->min_b) return 0;
    const int64_t nsb = cols / PL_QK_K;
    uint8_t *u = aligned_alloc(64, (size_t)nsb * k->planes * PLANE);
    if (!u) return 0;
    const acts v = {.a = act, .as = act_stride, .nsb = nsb};
    const int64_t bfull = B / 16 * 16;
    pl_mm_amx_begin(1);
    for (int64_t r = 0; r < nrows; r += 16) {
        const uint8_t *o = w + (size_t)r * ws;
        k->unpack(o, nsb, u);
        for (int64_t b = 0; b < bfull; b += 16) k->tiles(&v, o, u, b, y + r, ldy);
        for (int64_t b = bfull; b < B; b += 4) {
            const int nb = B - b < 4 ? (int)(B - b) : 4;
            k->tail(o, ws, 16, act + (size_t)b * act_stride, act_stride, nb, cols,
                    y + (size_t)b * ldy + r, ldy);
        }
    }
    _tile_release();
    free(u);
    return 1;
}

int pl_mm_gemm_x16_q4_K_amx(const uint8_t *w, size_t ws, int64_t nrows, const uint8_t *act,
                            size_t act_stride, int64_t B, int64_t cols, float *y, int64_t ldy) {
    /* measured: at 16 rows, unpacking costs what the tiles save */
    static const kq_amx k = {.min_b = 32, .planes = 8, .unpack = unpack, .tiles = kq_amx_tiles,
                             .tail = pl_mm_x16_q4_K_tile_avx512};
    return kq_amx_run(&k, w, ws, nrows, act, act_stride, B, cols, y, ldy);
}

int pl_mm_gemm_x16_q6_K_amx(const uint8_t *w, size_t ws, int64_t nrows, const uint8_t *act,
                            size_t act_stride, int64_t B, int64_t cols, float *y, int64_t ldy) {
    /* measured: the four planes' unpacking needs 48+ rows to pay */
    static const kq_amx k = {.min_b = 48, .planes = 16, .unpack = unpack_q6, .tiles = kq_amx_tiles_q6,
                             .tail = pl_mm_x16_q6_K_tile_avx512};
    return kq_amx_run(&k, w, ws, nrows, act, act_stride, B, cols, y, ldy);
}
