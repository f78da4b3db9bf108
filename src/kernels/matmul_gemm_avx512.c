/* kernels/matmul_gemm_avx512 — the blocked F16 GEMM behind pl_matmul for batches (B > SMALL_B).
 *
 * It computes every value with exactly the operations of f16_body in matmul_avx512.c (the row
 * cut into 16-column chunks, chunk j summed into partial j % 4 in chunk order from zero by FMA,
 * y = reduce((p0 + p2) + (p1 + p3))), so results are bitwise those of the decode kernel; only
 * the order in which independent values advance changes:
 *
 *   - the columns are cut into K blocks of KB_CHUNKS chunks (a multiple of 4, so a chunk's
 *     partial is the same in every block); between blocks each value's four f32 partials wait
 *     in a state buffer and are reloaded as they were (exact);
 *   - a K block of a GR-row weight panel is widened to f32 once (F16C is exact) and then reused
 *     for all activation rows of the block, instead of being converted again for every tile;
 *   - activations are swept ACT_ROWS rows at a time and weight rows PANEL_ROWS at a time, so that
 *     the K block of the activations and the state stay in L2 whatever K is (ffn_down's
 *     K = 8192: the tiles' 64 activation rows are then 2 MiB, all of L2, re-read for every tile);
 *   - the register tile is GR weight rows x GB activation rows, the GB activation vectors held
 *     and each weight vector loaded once (24 accumulators of the 32 zmm).
 * It declines (returns 0) below MIN_COLS columns, where the tiles were measured as fast.
 */
#include "kernels/matmul_kernels.h"
#include "base/fp16.h"

#include "kernels/simd.h"

#include <immintrin.h>
#include <stdlib.h>

enum {
    CW = 16,          /* columns per chunk (one zmm) */
    GR = 8,           /* weight rows per register tile */
    GB = 3,           /* activation rows per register tile (GR x GB accumulators) */
    KB_CHUNKS = 64,   /* chunks per K block: 1024 columns, a 32 KB f32 panel of GR rows */
    ACT_ROWS = 60,    /* activation rows per sweep (a multiple of GB) */
    PANEL_ROWS = 32,  /* weight rows that share a K block of the activations: 480 KB of state */
    MIN_COLS = 4097,  /* below, the tiles' 64 activation rows (<= 1 MiB) stay in L2 and the
                       * tiles measured as fast or faster (docs/BENCHMARKS.md, issue 22) */
};

/* a chunk's partial is j % 4 in every block; a row tile's state never runs past its panel's */
_Static_assert(KB_CHUNKS % 4 == 0 && PANEL_ROWS % GR == 0, "gemm block sizes");

typedef struct {
    const float *a;   /* first activation row of the tile (f16-exact f32) */
    int64_t as;       /* floats between activation rows */
    const float *pan; /* the panel: GR rows of KB_CHUNKS * CW floats, this block's chunks */
    int64_t j0, j1;   /* this block's chunks [j0, j1) */
    int64_t nfull;    /* full chunks in the row (a last chunk past them is masked by tail) */
    __mmask16 tail;
    int first;        /* the first block: partials start from zero */
} gemm_block;

/* State of value (b, r): its four partials, 64 floats, at st + (b * GR + r) * 4 * CW. */
AI float *state_at(float *st, int b, int r, int p) { return st + ((b * GR + r) * 4 + p) * CW; }

/* Advance partial p of an NR x NB tile over this block's chunks j = p (mod 4). */
AI void tile_pass(const gemm_block *g, float *st, int p, const int NR, const int NB) {
    __m512 acc[GR][GB];
    UNROLL for (int r = 0; r < NR; r++) UNROLL for (int b = 0; b < NB; b++)
        acc[r][b] = g->first ? _mm512_setzero_ps() : _mm512_load_ps(state_at(st, b, r, p));
    const int64_t jf = g->j1 < g->nfull ? g->j1 : g->nfull;
    int64_t j = g->j0 + p;
    for (; j < jf; j += 4) {
        const int64_t c = j * CW, pc = (j - g->j0) * CW;
        __m512 xv[GB]; /* NB activation vectors held, the NR weight vectors streamed past them */
        UNROLL for (int b = 0; b < NB; b++) xv[b] = _mm512_loadu_ps(g->a + b * g->as + c);
        UNROLL for (int r = 0; r < NR; r++) {
            __m512 wv = _mm512_load_ps(g->pan + r * KB_CHUNKS * CW + pc);
            __asm__("" : "+v"(wv)); /* one load into a register, not one folded into every FMA */
            UNROLL for (int b = 0; b < NB; b++) acc[r][b] = _mm512_fmadd_ps(wv, xv[b], acc[r][b]);
        }
    }
    if (j < g->j1) { /* the masked last chunk (the panel holds it zero-padded, as the masked load) */
        const int64_t c = j * CW, pc = (j - g->j0) * CW;
        __m512 wv[GR];
        UNROLL for (int r = 0; r < NR; r++) wv[r] = _mm512_load_ps(g->pan + r * KB_CHUNKS * CW + pc);
        UNROLL for (int b = 0; b < NB; b++) {
            __m512 xv = _mm512_maskz_loadu_ps(g->tail, g->a + b * g->as + c);
            UNROLL for (int r = 0; r < NR; r++) acc[r][b] = _mm512_fmadd_ps(wv[r], xv, acc[r][b]);
        }
    }
    UNROLL for (int r = 0; r < NR; r++) UNROLL for (int b = 0; b < NB; b++)
        _mm512_store_ps(state_at(st, b, r, p), acc[r][b]);
}

AI void tile_body(const gemm_block *g, float *st, const int NR, const int NB) {
    UNROLL for (int p = 0; p < 4; p++) tile_pass(g, st, p, NR, NB);
}

#define GEMM_CASE(R, B) \
    case (R) * 8 + (B): tile_body(g, st, (R) < GR ? (R) : GR, (B) < GB ? (B) : GB); break;
#define GEMM_ROWS(R) \
    GEMM_CASE(R, 1) GEMM_CASE(R, 2) GEMM_CASE(R, 3) GEMM_CASE(R, 4) GEMM_CASE(R, 5) GEMM_CASE(R, 6)

static void tile(const gemm_block *g, float *st, int nr, int nb) {
    switch (nr * 8 + nb) {
        GEMM_ROWS(1) GEMM_ROWS(2) GEMM_ROWS(3) GEMM_ROWS(4)
        GEMM_ROWS(5) GEMM_ROWS(6) GEMM_ROWS(7) GEMM_ROWS(8)
    default: break;
    }
}

/* Widen chunks [j0, j1) of nr weight rows into the panel (the masked chunk zero-padded). */
static void pack_panel(float *pan, const uint8_t *w, size_t ws, int nr, const gemm_block *g) {
    for (int r = 0; r < nr; r++) {
        const pl_f16 *row = (const pl_f16 *)(w + (size_t)r * ws);
        for (int64_t j = g->j0; j < g->j1; j++) {
            __mmask16 m = j < g->nfull ? (__mmask16)0xFFFF : g->tail;
            _mm512_store_ps(pan + r * KB_CHUNKS * CW + (j - g->j0) * CW,
                            _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, row + j * CW)));
        }
    }
}

typedef struct {
    gemm_block g;
    const uint8_t *w, *act;
    size_t ws, act_stride;
    float *pan, *st, *y;
    int64_t ldy;
} gemm_ctx;

static void cb_pack(void *ctx, int64_t r, int nr, int64_t j0, int64_t j1) {
    gemm_ctx *c = ctx;
    c->g.j0 = j0;
    c->g.j1 = j1;
    c->g.first = j0 == 0;
    pack_panel(c->pan, c->w + (size_t)r * c->ws, c->ws, nr, &c->g);
}

static void cb_tile(void *ctx, int64_t v, int64_t b, int nr, int nb) {
    gemm_ctx *c = ctx;
    c->g.a = (const float *)(c->act + (size_t)b * c->act_stride);
    tile(&c->g, c->st + v * 4 * CW, nr, nb);
}

static void cb_finish(void *ctx, int64_t v, int64_t b, int64_t r, int nr) { /* (p0 + p2) + (p1 + p3) */
    gemm_ctx *c = ctx;
    for (int rr = 0; rr < nr; rr++) {
        const float *s = c->st + (v + rr) * 4 * CW;
        __m512 lo = _mm512_add_ps(_mm512_load_ps(s), _mm512_load_ps(s + 2 * CW));
        __m512 hi = _mm512_add_ps(_mm512_load_ps(s + CW), _mm512_load_ps(s + 3 * CW));
        c->y[b * c->ldy + r + rr] = _mm512_reduce_add_ps(_mm512_add_ps(lo, hi));
    }
}

int pl_mm_gemm_f16_avx512(const uint8_t *w, size_t ws, int64_t nrows, const uint8_t *act,
                          size_t act_stride, int64_t B, int64_t cols, float *y, int64_t ldy) {
    if (cols < MIN_COLS) return 0;
    /* 32 KB panel + 480 KB state: too much for a stack, one allocation per call */
    float *buf = aligned_alloc(64, (size_t)(GR * KB_CHUNKS + PANEL_ROWS * ACT_ROWS * 4) * CW * sizeof(float));
    if (!buf) return 0;
    gemm_ctx c = {.g = {.as = (int64_t)(act_stride / sizeof(float)), .pan = buf, .nfull = cols / CW,
                        .tail = (__mmask16)((1u << (cols % CW)) - 1)},
                  .w = w, .act = act, .ws = ws, .act_stride = act_stride, .pan = buf,
                  .st = buf + GR * KB_CHUNKS * CW, .y = y, .ldy = ldy};
    const pl_mm_gemm_plan plan = {.gr = GR, .gb = GB, .act_rows = ACT_ROWS, .panel_rows = PANEL_ROWS,
                                  .kb_chunks = KB_CHUNKS, .nchunks = (cols + CW - 1) / CW,
                                  .pack = cb_pack, .tile = cb_tile, .finish = cb_finish};
    pl_mm_gemm_sweep(&plan, &c, nrows, B);
    free(buf);
    return 1;
}
