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
 *     and each weight vector loaded once (24 accumulators of the 32 zmm);
 *   - a value's last step, reduce((p0 + p2) + (p1 + p3)), runs for GR values at once
 *     (reduce8: the same tree of adds, its shuffles shared).
 * Rows of at most KB_CHUNKS chunks (the 110M model's K = 768: Q/K/V, O, gate/up, the output
 * layer) are one K block and take a path with no state between blocks and no heap
 * (gemm_one_block); at 768 columns and B = 32 it measured 1.1-1.3x the tiles' GFLOP/s on one
 * thread (docs/BENCHMARKS.md, issue 22 item 4). It declines (returns 0) from KB_CHUNKS chunks
 * up to MIN_COLS columns, where the tiles measured as fast (a 2048-column panel of GR rows
 * does not fit L1, and one of GR / 2 rows was slower still).
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
    PAN_STRIDE = KB_CHUNKS * CW + CW, /* floats between panel rows: not a multiple of 4 KiB,
                                       * so the GR rows' loads do not alias in L1 */
    MIN_COLS = 4097,  /* from KB_CHUNKS chunks to here the tiles' 64 activation rows (<= 1 MiB)
                       * stay in L2 and the tiles measured as fast or faster (docs/BENCHMARKS.md,
                       * issue 22) */
};

/* a chunk's partial is j % 4 in every block; a row tile's state never runs past its panel's */
_Static_assert(KB_CHUNKS % 4 == 0 && PANEL_ROWS % GR == 0, "gemm block sizes");

typedef struct {
    const float *a;   /* first activation row of the tile (f16-exact f32) */
    int64_t as;       /* floats between activation rows */
    const float *pan; /* the panel: GR rows of this block's chunks, PAN_STRIDE floats apart */
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
            __m512 wv = _mm512_load_ps(g->pan + r * PAN_STRIDE + pc);
            __asm__("" : "+v"(wv)); /* one load into a register, not one folded into every FMA */
            UNROLL for (int b = 0; b < NB; b++) acc[r][b] = _mm512_fmadd_ps(wv, xv[b], acc[r][b]);
        }
    }
    if (j < g->j1) { /* the masked last chunk (the panel holds it zero-padded, as the masked load) */
        const int64_t c = j * CW, pc = (j - g->j0) * CW;
        __m512 wv[GR];
        UNROLL for (int r = 0; r < NR; r++) wv[r] = _mm512_load_ps(g->pan + r * PAN_STRIDE + pc);
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
    const int64_t jf = g->j1 < g->nfull ? g->j1 : g->nfull;
    for (int r = 0; r < nr; r++) {
        const pl_f16 *row = (const pl_f16 *)(w + (size_t)r * ws);
        float *dst = pan + r * PAN_STRIDE - g->j0 * CW;
        int64_t j = g->j0;
        for (; j < jf; j++)
            _mm512_store_ps(dst + j * CW, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(row + j * CW))));
        if (j < g->j1) /* the masked last chunk, zero-padded */
            _mm512_store_ps(dst + j * CW, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(g->tail, row + j * CW)));
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

/* The lane sums of eight registers, lane i of the result the sum of v[i], each by the tree of
 * _mm512_reduce_add_ps (halves, then quarters, then lanes i, i + 2, then i, i + 1). Floating
 * addition is commutative, so pairing the same two values in a shuffled lane gives the same
 * bits; eight sums share every shuffle and add instead of taking seven steps each. */
AI __m256 reduce8(const __m512 v[8]) {
    __m512 h[4], q[2];
    UNROLL for (int i = 0; i < 4; i++) /* lanes 0-7: v[2i]'s halves added, lanes 8-15: v[2i+1]'s */
        h[i] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0x44),
                             _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0xEE));
    UNROLL for (int i = 0; i < 2; i++) /* quarter k: v[4i + k]'s quarters added */
        q[i] = _mm512_add_ps(_mm512_shuffle_f32x4(h[2 * i], h[2 * i + 1], 0x88),
                             _mm512_shuffle_f32x4(h[2 * i], h[2 * i + 1], 0xDD));
    /* quarter k: [v[k] lanes 0+2, 1+3, v[4 + k] lanes 0+2, 1+3] */
    __m512 w = _mm512_add_ps(_mm512_shuffle_ps(q[0], q[1], 0x44), _mm512_shuffle_ps(q[0], q[1], 0xEE));
    /* quarter k: lane 0 the sum of v[k], lane 1 that of v[4 + k] */
    __m512 s = _mm512_add_ps(_mm512_shuffle_ps(w, w, 0x08), _mm512_shuffle_ps(w, w, 0x0D));
    const __m512i idx = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 0, 0, 0, 0, 0, 0, 0, 0);
    return _mm512_castps512_ps256(_mm512_permutexvar_ps(idx, s));
}

static void cb_finish(void *ctx, int64_t v, int64_t b, int64_t r, int nr) { /* (p0 + p2) + (p1 + p3) */
    gemm_ctx *c = ctx;
    __m512 sum[GR];
    UNROLL for (int rr = 0; rr < GR; rr++) {
        const float *s = c->st + (v + (rr < nr ? rr : 0)) * 4 * CW;
        __m512 lo = _mm512_add_ps(_mm512_load_ps(s), _mm512_load_ps(s + 2 * CW));
        __m512 hi = _mm512_add_ps(_mm512_load_ps(s + CW), _mm512_load_ps(s + 3 * CW));
        sum[rr] = _mm512_add_ps(lo, hi);
    }
    _mm256_mask_storeu_ps(c->y + b * c->ldy + r, (__mmask8)((1u << nr) - 1), reduce8(sum));
}

/* Rows of at most KB_CHUNKS chunks are one K block: a panel's values are finished as soon as
 * their register tile is done, so the state is one tile's (on the stack, as the panel), nothing
 * waits between blocks and nothing is allocated. Activations are swept ACT_ROWS rows at a time
 * for each panel (at most 240 KB, in L2); a batch of up to ACT_ROWS rows widens each weight
 * row once. */
static void gemm_one_block(gemm_ctx *c, int64_t nrows, int64_t B) {
    for (int64_t bb = 0; bb < B; bb += ACT_ROWS) {
        const int64_t bend = B - bb < ACT_ROWS ? B : bb + ACT_ROWS;
        for (int64_t r = 0; r < nrows; r += GR) {
            const int nr = nrows - r < GR ? (int)(nrows - r) : GR;
            pack_panel(c->pan, c->w + (size_t)r * c->ws, c->ws, nr, &c->g);
            for (int64_t b = bb; b < bend; b += GB) {
                const int nb = bend - b < GB ? (int)(bend - b) : GB;
                c->g.a = (const float *)(c->act + (size_t)b * c->act_stride);
                tile(&c->g, c->st, nr, nb);
                for (int i = 0; i < nb; i++) cb_finish(c, i * GR, b + i, r, nr);
            }
        }
    }
}

int pl_mm_gemm_f16_avx512(const uint8_t *w, size_t ws, int64_t nrows, const uint8_t *act,
                          size_t act_stride, int64_t B, int64_t cols, float *y, int64_t ldy) {
    const int64_t nchunks = (cols + CW - 1) / CW;
    gemm_ctx c = {.g = {.as = (int64_t)(act_stride / sizeof(float)), .nfull = cols / CW,
                        .tail = (__mmask16)((1u << (cols % CW)) - 1)},
                  .w = w, .act = act, .ws = ws, .act_stride = act_stride, .y = y, .ldy = ldy};
    if (nchunks <= KB_CHUNKS) {
        _Alignas(64) float pan[GR * PAN_STRIDE], st[GR * GB * 4 * CW]; /* 33 KB + 6 KB */
        c.pan = pan;
        c.g.pan = pan;
        c.st = st;
        c.g.j1 = nchunks;
        c.g.first = 1;
        gemm_one_block(&c, nrows, B);
        return 1;
    }
    if (cols < MIN_COLS) return 0;
    /* 32 KB panel + 480 KB state: too much for a stack, one allocation per call */
    float *buf = aligned_alloc(64, ((size_t)GR * PAN_STRIDE + (size_t)PANEL_ROWS * ACT_ROWS * 4 * CW) * sizeof(float));
    if (!buf) return 0;
    c.pan = buf;
    c.g.pan = buf;
    c.st = buf + GR * PAN_STRIDE;
    const pl_mm_gemm_plan plan = {.gr = GR, .gb = GB, .act_rows = ACT_ROWS, .panel_rows = PANEL_ROWS,
                                  .kb_chunks = KB_CHUNKS, .nchunks = nchunks,
                                  .pack = cb_pack, .tile = cb_tile, .finish = cb_finish};
    pl_mm_gemm_sweep(&plan, &c, nrows, B);
    free(buf);
    return 1;
}
