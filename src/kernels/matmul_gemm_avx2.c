/* kernels/matmul_gemm_avx2 — the AVX2 twin of matmul_gemm_avx512.c for F16 batches (B > 3).
 *
 * The AVX2 f16 tile (matmul_avx2.c) sums a value in one 8-lane accumulator over 8-column chunks
 * in order (the last chunk zero-padded) and reduces it with hsum8. This path does the same
 * operations per value in the same order, so its bits are the tile's; it only changes which
 * values advance when: K blocks of KB_CHUNKS chunks, each value's accumulator kept in a state
 * buffer between blocks (exact), a GR-row weight panel widened to f32 once per block instead of
 * once per activation tile, PANEL_ROWS x ACT_ROWS values sharing a K block of the activations.
 */
#include "kernels/matmul_kernels.h"
#include "base/fp16.h"

#include "kernels/simd.h"

#include <immintrin.h>
#include <stdlib.h>

enum {
    CW = 8,          /* columns per chunk (one ymm) */
    GR = 4,          /* weight rows per register tile */
    GB = 3,          /* activation rows per register tile: 12 accumulators of the 16 ymm */
    KB_CHUNKS = 128, /* chunks per K block: 1024 columns, a 16 KB f32 panel of GR rows */
    ACT_ROWS = 60,   /* activation rows per sweep (a multiple of GB) */
    PANEL_ROWS = 32, /* weight rows that share a K block of the activations: 60 KB of state */
};
_Static_assert(PANEL_ROWS % GR == 0, "a panel is a whole number of row tiles");

static const int32_t tail_mask8[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};

typedef struct {
    const float *a, *pan;
    int64_t as, j0, j1, nfull, tail; /* tail: valid columns of the last chunk if partial */
    int first;
} blk2;

AI void tile2_body(const blk2 *g, float *st, const int NR, const int NB) {
    __m256 acc[GR][GB];
    UNROLL for (int r = 0; r < NR; r++) UNROLL for (int b = 0; b < NB; b++)
        acc[r][b] = g->first ? _mm256_setzero_ps() : _mm256_load_ps(st + (b * GR + r) * CW);
    const int64_t jf = g->j1 < g->nfull ? g->j1 : g->nfull;
    int64_t j = g->j0;
    for (; j < jf; j++) {
        const int64_t c = j * CW, pc = (j - g->j0) * CW;
        __m256 xv[GB];
        UNROLL for (int b = 0; b < NB; b++) xv[b] = _mm256_loadu_ps(g->a + b * g->as + c);
        UNROLL for (int r = 0; r < NR; r++) {
            __m256 wv = _mm256_load_ps(g->pan + r * KB_CHUNKS * CW + pc);
            UNROLL for (int b = 0; b < NB; b++) acc[r][b] = _mm256_fmadd_ps(wv, xv[b], acc[r][b]);
        }
    }
    if (j < g->j1) { /* the partial last chunk: zero-padded as the tile's masked loads */
        const int64_t c = j * CW, pc = (j - g->j0) * CW;
        const __m256i m = _mm256_loadu_si256((const __m256i *)(tail_mask8 + 8 - g->tail));
        __m256 xv[GB];
        UNROLL for (int b = 0; b < NB; b++) xv[b] = _mm256_maskload_ps(g->a + b * g->as + c, m);
        UNROLL for (int r = 0; r < NR; r++) {
            __m256 wv = _mm256_load_ps(g->pan + r * KB_CHUNKS * CW + pc);
            UNROLL for (int b = 0; b < NB; b++) acc[r][b] = _mm256_fmadd_ps(wv, xv[b], acc[r][b]);
        }
    }
    UNROLL for (int r = 0; r < NR; r++) UNROLL for (int b = 0; b < NB; b++)
        _mm256_store_ps(st + (b * GR + r) * CW, acc[r][b]);
}

#define CASE2(R, B) \
    case (R) * 8 + (B): tile2_body(g, st, R, B); break;

static void tile2(const blk2 *g, float *st, int nr, int nb) {
    switch (nr * 8 + nb) {
        CASE2(1, 1) CASE2(1, 2) CASE2(1, 3) CASE2(2, 1) CASE2(2, 2) CASE2(2, 3)
        CASE2(3, 1) CASE2(3, 2) CASE2(3, 3) CASE2(4, 1) CASE2(4, 2) CASE2(4, 3)
    default: break;
    }
}

static void pack2(float *pan, const uint8_t *w, size_t ws, int nr, const blk2 *g) {
    for (int r = 0; r < nr; r++) {
        const pl_f16 *row = (const pl_f16 *)(w + (size_t)r * ws);
        for (int64_t j = g->j0; j < g->j1; j++) {
            __m128i h;
            if (j < g->nfull) {
                h = _mm_loadu_si128((const __m128i *)(row + j * CW));
            } else {
                uint16_t t[8] = {0};
                memcpy(t, row + j * CW, (size_t)g->tail * 2);
                h = _mm_loadu_si128((const __m128i *)t);
            }
            _mm256_store_ps(pan + r * KB_CHUNKS * CW + (j - g->j0) * CW, _mm256_cvtph_ps(h));
        }
    }
}

typedef struct {
    blk2 g;
    const uint8_t *w, *act;
    size_t ws, act_stride;
    float *pan, *st, *y;
    int64_t ldy;
} ctx2;

static void cb2_pack(void *ctx, int64_t r, int nr, int64_t j0, int64_t j1) {
    ctx2 *c = ctx;
    c->g.j0 = j0;
    c->g.j1 = j1;
    c->g.first = j0 == 0;
    pack2(c->pan, c->w + (size_t)r * c->ws, c->ws, nr, &c->g);
}

static void cb2_tile(void *ctx, int64_t v, int64_t b, int nr, int nb) {
    ctx2 *c = ctx;
    c->g.a = (const float *)(c->act + (size_t)b * c->act_stride);
    tile2(&c->g, c->st + v * CW, nr, nb);
}

static void cb2_finish(void *ctx, int64_t v, int64_t b, int64_t r, int nr) {
    ctx2 *c = ctx;
    for (int rr = 0; rr < nr; rr++) c->y[b * c->ldy + r + rr] = hsum8(_mm256_load_ps(c->st + (v + rr) * CW));
}

int pl_mm_gemm_f16_avx2(const uint8_t *w, size_t ws, int64_t nrows, const uint8_t *act,
                        size_t act_stride, int64_t B, int64_t cols, float *y, int64_t ldy) {
    float *buf = aligned_alloc(32, (size_t)(GR * KB_CHUNKS + PANEL_ROWS * ACT_ROWS) * CW * sizeof(float));
    if (!buf) return 0;
    ctx2 c = {.g = {.as = (int64_t)(act_stride / sizeof(float)), .pan = buf, .nfull = cols / CW,
                    .tail = cols % CW},
              .w = w, .act = act, .ws = ws, .act_stride = act_stride, .pan = buf,
              .st = buf + GR * KB_CHUNKS * CW, .y = y, .ldy = ldy};
    const pl_mm_gemm_plan plan = {.gr = GR, .gb = GB, .act_rows = ACT_ROWS, .panel_rows = PANEL_ROWS,
                                  .kb_chunks = KB_CHUNKS, .nchunks = (cols + CW - 1) / CW,
                                  .pack = cb2_pack, .tile = cb2_tile, .finish = cb2_finish};
    pl_mm_gemm_sweep(&plan, &c, nrows, B);
    free(buf);
    return 1;
}
