/* kernels/matmul — see matmul.h.
 *
 * A call (pl_matmul, or pl_matmul_multi for several weights reading one input) converts the B
 * activation rows into scratch once (a pool job split by rows; inline for a decode's few rows),
 * then runs one pool job that splits every weight's output rows over the threads in multiples
 * of the kernel's tile height (a decode's B <= SMALL_B: in tile-aligned units of ~16 KB that
 * each thread claims from its share and steals from the others' when its own is done, so the
 * threads end together; plan_steal). Weights of different types share the call when they take
 * the same converted rows (act_kind). Each thread walks its weight tiles and, for each, every
 * activation tile (within blocks of ACT_BLOCK rows, so the activations a tile sweeps stay in
 * cache), so every weight byte loaded is reused for all B. For B <= SMALL_B the tiles are one
 * weight row high: each thread then reads its rows as one sequential stream, which the hardware
 * prefetchers follow best (interleaving four rows halved the bandwidth on an AMD EPYC; the float
 * tiles also prefetch 2 KB ahead). For larger B, a kernel set with a `gemm` (rows-layout f16 on
 * AVX-512 and AVX2) takes a thread's whole share instead of the tiles, blocked along K; it
 * yields the tiles' bits, or declines. Repacked (x16) weights keep their 16- or 32-row tiles at
 * every B (their rows are interleaved, one stream anyway); their batches of 16-48 rows and more
 * (by type) go to AMX where the machine has it, again with the tiles' bits.
 *
 * The next tile: a tile's first sweep over its weights (its first activation tile) reads them from
 * memory, the later sweeps from the cache. Where a kernel has fn_next (the f16 and bf16 x16 tiles:
 * few multiply-adds per weight byte, so the first sweep of both threads at once asked for more
 * than the memory gives), the later sweeps each prefetch a share of the next tile's weights into
 * L2, so the stream is spread over the whole tile's work and every first sweep finds its weights
 * in L2 (1B F16 as bf16, prefill 256 on a Zen 4: 186-193 -> 190-203 tok/s, docs/BENCHMARKS.md).
 * The integer tiles need none: their sweeps all prefetch two groups ahead.
 */
#include "kernels/matmul.h"

#include "base/status.h"
#include "kernels/cpu.h"
#include "kernels/matmul_kernels.h"
#include "kernels/quant.h"

#include <stdlib.h>
#include <string.h>

enum { ACT_BLOCK = 64 }; /* activation rows swept per weight tile before moving on */
enum { SMALL_B = 3 };    /* up to this many activation rows, tiles are one weight row high */
enum { STEAL_BYTES = 16384 }; /* weight bytes per unit of a decode step's work stealing */

typedef struct {
    const pl_weight *const *w; /* [n] weights of one activation format (act_kind) and cols */
    float *const *y;           /* [n] outputs, y[i] is [B][ldy[i]] */
    const int64_t *ldy;        /* [n] output strides (>= w[i]->rows) */
    int n;
    const float *x;      /* [B][cols] input */
    int64_t B;
    const uint8_t *act;  /* converted activations (or x for f32 weights) */
    size_t act_stride;   /* bytes between activation rows */
    pl_mm_kernel k[PL_MATMUL_MAX_MULTI]; /* weight i's kernels */
    pl_steal_slot *steal; /* decode: rows claimed in units (plan_steal), else NULL */
    int64_t unit_rows[PL_MATMUL_MAX_MULTI];  /* rows per unit of weight i */
    int64_t unit0[PL_MATMUL_MAX_MULTI + 1];  /* weight i's units are [unit0[i], unit0[i + 1]) */
} mm_job;

static uint8_t *align64(void *p) { return (uint8_t *)(((uintptr_t)p + 63) & ~(uintptr_t)63); }

/* Bytes between converted activation rows for weights like w. */
static size_t act_stride(const pl_weight *w) {
    return w->layout == PL_WLAYOUT_X16 ? pl_mm_x16_act_bytes(w->type, w->cols)
                                       : pl_act_row_bytes(w->type, w->cols);
}

/* Bytes per weight row (a repacked group of 16 rows is 16 times this). */
static size_t row_bytes(const pl_weight *w) {
    return w->layout == PL_WLAYOUT_X16 ? pl_mm_x16_row_bytes(w->type, w->cols)
                                       : pl_dtype_row_size(w->type, w->cols);
}

size_t pl_matmul_scratch_size(pl_dtype type, int64_t cols, int64_t B) {
    size_t row = pl_act_row_bytes(type, cols);
    if (row && pl_mm_x16_supported(type, 16, cols)) { /* a repacked weight's rows are longer */
        size_t x = pl_mm_x16_act_bytes(type, cols);
        if (x > row) row = x;
    }
    return row ? (size_t)B * row + 64 : 0;
}

size_t pl_matmul_repack_size(const pl_weight *w) {
    if (w->layout != PL_WLAYOUT_ROWS || !pl_mm_x16_supported(w->type, w->rows, w->cols)) return 0;
    return (size_t)w->rows * pl_mm_x16_row_bytes(w->type, w->cols);
}

int pl_matmul_repack_wanted(pl_dtype t) {
    const char *e = getenv("PAGELLM_REPACK");
    return pl_mm_x16_fast(t) && !(e && !strcmp(e, "0"));
}

void pl_matmul_repack(pl_weight *w, void *dst) {
    PL_ASSERT(pl_matmul_repack_size(w) > 0 && ((uintptr_t)dst & 63) == 0);
    pl_mm_x16_repack(w->type, w->data, dst, w->rows, w->cols);
    w->data = dst;
    w->layout = PL_WLAYOUT_X16;
}

void pl_matmul_f16_to_bf16(pl_weight *w, void *dst) {
    PL_ASSERT(w->type == PL_DT_F16 && w->layout == PL_WLAYOUT_ROWS && ((uintptr_t)dst & 63) == 0);
    const size_t n = (size_t)w->rows * (size_t)w->cols;
    pl_weight b = *w;
    b.type = PL_DT_BF16;
    if (pl_matmul_repack_wanted(PL_DT_BF16) && pl_matmul_repack_size(&b)) {
        pl_mm_x16_repack(PL_DT_F16, w->data, dst, w->rows, w->cols); /* bf16's layout is f16's */
        b.layout = PL_WLAYOUT_X16;
    } else {
        memcpy(dst, w->data, n * sizeof(pl_f16));
    }
    pl_f16 *h = dst;
    for (size_t i = 0; i < n; i++) h[i] = pl_f16_to_bf16(h[i]);
    b.data = dst;
    *w = b;
}

static void pick_kernel(const pl_weight *w, pl_mm_kernel *k) {
    pl_dtype t = w->type;
    pl_isa isa = pl_cpu_isa();
    k->gemm = NULL;
    k->fn_next = NULL;
    k->tr_small = 0;
    if (w->layout == PL_WLAYOUT_X16) {
        pl_mm_kernel_x16(t, k);
        return;
    }
    if (isa >= PL_ISA_AVX512 && pl_mm_kernel_avx512(t, k)) return;
    if (isa >= PL_ISA_AVX2 && pl_mm_kernel_avx2(t, k)) return;
    int ok = pl_mm_kernel_scalar(t, k);
    PL_ASSERT(ok);
}

static void convert_job(void *ctx, int ith, int nth) {
    mm_job *j = ctx;
    const pl_weight *w = j->w[0];
    int64_t b0, b1;
    pl_split_range(j->B, ith, nth, 1, &b0, &b1);
    for (int64_t b = b0; b < b1; b++) {
        uint8_t *dst = (uint8_t *)j->act + b * j->act_stride;
        if (w->layout == PL_WLAYOUT_X16)
            pl_mm_x16_act_row(w->type, j->x + b * w->cols, dst, w->cols);
        else pl_act_convert_row(w->type, j->x + b * w->cols, dst, w->cols);
    }
}

/* Rows [r0, r1) of weight i against all B activation rows, tile by tile. */
static void multiply_rows(const mm_job *j, int i, int tr, int64_t r0, int64_t r1) {
    const pl_weight *w = j->w[i];
    const pl_mm_kernel *k = &j->k[i];
    float *y = j->y[i];
    const int64_t ldy = j->ldy[i];
    size_t ws = row_bytes(w);
    const int tb = k->tb;
    const int64_t ab = ACT_BLOCK / tb * tb; /* whole tiles per block (f16 x16: 12 rows) */
    for (int64_t bb = 0; bb < j->B; bb += ab) {
        int64_t bend = bb + ab < j->B ? bb + ab : j->B;
        /* the block's rows in as few tiles as tb allows, as even as can be (B = 32 at tb 6:
         * 6,6,5,5,5,5, not 6,6,6,6,6,2, whose last tile does a third of the FMAs per
         * weight conversion); a row's bits do not depend on its tile */
        const int64_t nt = (bend - bb + tb - 1) / tb, base = (bend - bb) / nt, extra = (bend - bb) % nt;
        for (int64_t r = r0; r < r1; r += tr) {
            int nr = (int)(r1 - r < tr ? r1 - r : tr);
            const uint8_t *wt = (const uint8_t *)w->data + (size_t)r * ws;
            /* the tile this thread sweeps next: the following rows, or the block after's first */
            const uint8_t *next = r + tr < r1 ? wt + (size_t)tr * ws
                                  : bend < j->B ? (const uint8_t *)w->data + (size_t)r0 * ws : NULL;
            for (int64_t t = 0, b = bb; t < nt; t++) {
                int nb = (int)(base + (t < extra));
                if (t > 0 && k->fn_next && next)
                    k->fn_next(wt, ws, nr, j->act + (size_t)b * j->act_stride, j->act_stride, nb,
                               w->cols, y + b * ldy + r, ldy, next, (int)t - 1, (int)nt - 1);
                else
                    k->fn(wt, ws, nr, j->act + (size_t)b * j->act_stride, j->act_stride, nb, w->cols,
                          y + b * ldy + r, ldy);
                b += nb;
            }
        }
    }
}

/* Rows per tile call: a decode step (B <= SMALL_B) walks one weight row at a time in the rows
 * layout, a single sequential stream per thread, which the hardware prefetchers follow at full
 * bandwidth; a repacked weight's tiles are tr_small rows high there where the kernel sets it
 * (the AVX-512 q8_0 / 4-bit tiles: one 16-row group, one stream, where two groups of 32 rows
 * read two streams 16 rows apart: gpt-oss decode B=1 +5 %, B=16 +9-20 %, docs/BENCHMARKS.md). */
static int tile_rows(const mm_job *j, int i) {
    if (j->B > SMALL_B) return j->k[i].tr;
    return j->w[i]->layout == PL_WLAYOUT_ROWS ? 1 : j->k[i].tr_small ? j->k[i].tr_small : j->k[i].tr;
}

/* Thread ith's share of weight i: its rows [r0, r1) against all B activation rows. */
static void multiply_part(const mm_job *j, int i, int ith, int nth) {
    const pl_weight *w = j->w[i];
    size_t ws = row_bytes(w);
    int tr = tile_rows(j, i);
    int64_t r0, r1;
    pl_split_range(w->rows, ith, nth, tr, &r0, &r1);
    if (r1 <= r0) return;
    if (j->B > SMALL_B && j->k[i].gemm &&
        j->k[i].gemm((const uint8_t *)w->data + (size_t)r0 * ws, ws, r1 - r0, j->act,
                     j->act_stride, j->B, w->cols, j->y[i] + r0, j->ldy[i]))
        return;
    multiply_rows(j, i, tr, r0, r1);
}

static void multiply_job(void *ctx, int ith, int nth) {
    mm_job *j = ctx;
    if (!j->steal) {
        for (int i = 0; i < j->n; i++) multiply_part(j, i, ith, nth);
        return;
    }
    int64_t u0, u1;
    while (pl_steal_next(j->steal, ith, nth, &u0, &u1)) {
        for (int64_t u = u0; u < u1;) { /* units of one weight at a time */
            int i = 0;
            while (u >= j->unit0[i + 1]) i++;
            int64_t ue = u1 < j->unit0[i + 1] ? u1 : j->unit0[i + 1], rows = j->w[i]->rows;
            int64_t r0 = (u - j->unit0[i]) * j->unit_rows[i], r1 = (ue - j->unit0[i]) * j->unit_rows[i];
            multiply_rows(j, i, tile_rows(j, i), r0, r1 < rows ? r1 : rows);
            u = ue;
        }
    }
}

/* A decode step's weights as units of whole tiles of ~STEAL_BYTES that the threads claim and
 * steal (pl_steal_next), so both end a job together whatever their speed. The units are
 * tile-aligned: each row gets the arithmetic of the static split, bit for bit. */
static void plan_steal(mm_job *j, pl_steal_slot *slots, int nth) {
    j->unit0[0] = 0;
    for (int i = 0; i < j->n; i++) {
        int64_t tr = tile_rows(j, i), per = (int64_t)(STEAL_BYTES / row_bytes(j->w[i]));
        j->unit_rows[i] = per > tr ? per / tr * tr : tr;
        j->unit0[i + 1] = j->unit0[i] + (j->w[i]->rows + j->unit_rows[i] - 1) / j->unit_rows[i];
    }
    pl_steal_init(slots, nth, j->unit0[j->n]);
    j->steal = slots;
}

/* Convert x for the weights' type (unless f32), then multiply: the work of both calls. */
static void run(pl_threadpool *tp, const pl_weight *const *w, float *const *y,
                const int64_t *ldy, int n, const float *x, int64_t B, void *scratch) {
    mm_job j = {.w = w, .y = y, .ldy = ldy, .n = n, .x = x, .B = B};
    for (int i = 0; i < n; i++) pick_kernel(w[i], &j.k[i]);
    if (w[0]->type == PL_DT_F32) {
        j.act = (const uint8_t *)x;
        j.act_stride = (size_t)w[0]->cols * sizeof(float);
    } else {
        PL_ASSERT(scratch);
        j.act = align64(scratch);
        j.act_stride = act_stride(w[0]);
        if (B <= SMALL_B) /* a few rows: cheaper here than one more hand-off to the pool */
            convert_job(&j, 0, 1);
        else
            pl_threadpool_run(tp, convert_job, &j);
    }
    pl_steal_slot slots[PL_STEAL_MAX];
    int nth = pl_threadpool_size(tp);
    if (B <= SMALL_B && nth > 1 && nth <= PL_STEAL_MAX) plan_steal(&j, slots, nth);
    pl_threadpool_run(tp, multiply_job, &j);
}

/* Which converted activation row a weight multiplies: weights with the same kind (and cols)
 * share one conversion and one job. The K-quants all take q8_K rows (the x16 layout its own
 * arrangement of them); every other type has its own. */
static int act_kind(const pl_weight *w) {
    switch (w->type) {
    case PL_DT_Q2_K:
    case PL_DT_Q3_K:
    case PL_DT_Q4_K:
    case PL_DT_Q5_K:
    case PL_DT_Q6_K:
    case PL_DT_IQ4_XS: return w->layout == PL_WLAYOUT_X16 ? -2 : -1;
    default: return 2 * (int)w->type + (w->layout == PL_WLAYOUT_X16);
    }
}

static void check_weight(const pl_weight *w) {
    PL_ASSERT(w && pl_dtype_can_matmul(w->type));
    PL_ASSERT(w->cols > 0 && w->cols % pl_dtype_block_size(w->type) == 0);
}

void pl_matmul_multi(pl_threadpool *tp, const pl_weight *const *w, float *const *y, int n,
                     const float *x, int64_t B, void *scratch) {
    PL_ASSERT(n >= 1 && n <= PL_MATMUL_MAX_MULTI);
    int64_t ldy[PL_MATMUL_MAX_MULTI];
    for (int i = 0; i < n; i++) {
        check_weight(w[i]);
        ldy[i] = w[i]->rows;
        if (act_kind(w[i]) != act_kind(w[0]) || w[i]->cols != w[0]->cols) {
            /* cannot share: one by one */
            for (int k = 0; k < n; k++) pl_matmul(tp, w[k], x, B, y[k], w[k]->rows, scratch);
            return;
        }
    }
    if (B > 0) run(tp, w, y, ldy, n, x, B, scratch);
}

void pl_matmul(pl_threadpool *tp, const pl_weight *w, const float *x, int64_t B, float *y,
               int64_t ldy, void *scratch) {
    check_weight(w);
    PL_ASSERT(ldy >= w->rows);
    if (B > 0 && w->rows > 0) run(tp, &w, &y, &ldy, 1, x, B, scratch);
}

/* ---- scalar reference ---------------------------------------------------------------------- */

/* Activation row b in the reference's terms: the converted values as doubles. */
static void act_values(pl_dtype t, const uint8_t *act, int64_t cols, double *out) {
    switch (t) {
    case PL_DT_F16:
        for (int64_t c = 0; c < cols; c++) out[c] = ((const float *)act)[c];
        break;
    case PL_DT_BF16:
        for (int64_t c = 0; c < cols; c++) out[c] = pl_bf16_to_f32(((const pl_bf16 *)act)[c]);
        break;
    case PL_DT_Q8_0:
    case PL_DT_Q4_0:
    case PL_DT_Q5_0:
    case PL_DT_IQ4_NL:
    case PL_DT_MXFP4:
    case PL_DT_Q4_1:
    case PL_DT_Q5_1: { /* q8_0 or q8_1: qs then d (q8_1's s is used by pl_matmul_ref) */
        int64_t nb = cols / PL_QK;
        const int8_t *qs = (const int8_t *)act;
        const float *d = (const float *)(act + cols);
        for (int64_t c = 0; c < cols; c++) {
            int64_t pos = t == PL_DT_Q4_0 ? pl_act_q4_0_pos(c, nb) : c;
            out[c] = (double)d[c / PL_QK] * qs[pos];
        }
        break;
    }
    default: { /* K-quants: q8_K */
        const pl_block_q8_K *q = (const pl_block_q8_K *)act;
        for (int64_t c = 0; c < cols; c++)
            out[c] = (double)q[c / PL_QK_K].d * q[c / PL_QK_K].qs[c % PL_QK_K];
        break;
    }
    }
}

void pl_matmul_ref(const pl_weight *w, const float *x, int64_t B, float *y, int64_t ldy) {
    PL_ASSERT(w && pl_dtype_can_matmul(w->type) && w->layout == PL_WLAYOUT_ROWS);
    int64_t cols = w->cols;
    size_t ws = pl_dtype_row_size(w->type, cols), as = pl_act_row_bytes(w->type, cols);
    float *wrow = malloc((size_t)cols * sizeof *wrow);
    double *xv = malloc((size_t)cols * sizeof *xv);
    uint8_t *act = as ? malloc(as) : NULL, *wcopy = malloc(ws);
    PL_ASSERT(wrow && xv && (act || !as) && wcopy);
    /* q4_1 / q5_1 (x = d q + m) against q8_1: the offset's share of a block is m * s with
     * q8_1's f16-rounded s, as llama.cpp computes it, not m * sum(x) */
    int with_m = w->type == PL_DT_Q4_1 || w->type == PL_DT_Q5_1;
    for (int64_t b = 0; b < B; b++) {
        if (w->type == PL_DT_F32) {
            for (int64_t c = 0; c < cols; c++) xv[c] = x[b * cols + c];
        } else {
            pl_act_convert_row(w->type, x + b * cols, act, cols);
            act_values(w->type, act, cols, xv);
        }
        for (int64_t r = 0; r < w->rows; r++) {
            const uint8_t *wr = (const uint8_t *)w->data + (size_t)r * ws;
            double mins = 0.0; /* sum over blocks of m * s */
            if (with_m) { /* dequantize d q alone: the row with every m zeroed */
                size_t bsz = pl_dtype_type_size(w->type);
                memcpy(wcopy, wr, ws);
                for (int64_t k = 0; k < cols / PL_QK; k++) {
                    pl_f16 m;
                    memcpy(&m, wcopy + k * bsz + 2, sizeof m);
                    memset(wcopy + k * bsz + 2, 0, sizeof m);
                    mins += (double)pl_f16_to_f32(m) * ((const float *)(act + cols))[cols / PL_QK + k];
                }
                wr = wcopy;
            }
            pl_dequantize_row(w->type, wr, wrow, cols);
            double s = mins;
            for (int64_t c = 0; c < cols; c++) s += (double)wrow[c] * xv[c];
            y[b * ldy + r] = (float)s;
        }
    }
    free(wrow);
    free(xv);
    free(act);
    free(wcopy);
}

/* ---- row conversions ----------------------------------------------------------------------- */

void pl_dequantize_row(pl_dtype type, const void *src, float *dst, int64_t n) {
    switch (type) {
    case PL_DT_F32: memcpy(dst, src, (size_t)n * sizeof(float)); break;
    case PL_DT_F16:
        for (int64_t i = 0; i < n; i++) dst[i] = pl_f16_to_f32(((const pl_f16 *)src)[i]);
        break;
    case PL_DT_BF16:
        for (int64_t i = 0; i < n; i++) dst[i] = pl_bf16_to_f32(((const pl_bf16 *)src)[i]);
        break;
    case PL_DT_Q8_0: pl_dequant_q8_0(src, dst, n); break;
    case PL_DT_Q4_0: pl_dequant_q4_0(src, dst, n); break;
    case PL_DT_Q4_K: pl_dequant_q4_K(src, dst, n); break;
    case PL_DT_Q5_K: pl_dequant_q5_K(src, dst, n); break;
    case PL_DT_Q6_K: pl_dequant_q6_K(src, dst, n); break;
    case PL_DT_Q4_1: pl_dequant_q4_1(src, dst, n); break;
    case PL_DT_Q5_0: pl_dequant_q5_0(src, dst, n); break;
    case PL_DT_Q5_1: pl_dequant_q5_1(src, dst, n); break;
    case PL_DT_IQ4_NL: pl_dequant_iq4_nl(src, dst, n); break;
    case PL_DT_Q2_K: pl_dequant_q2_K(src, dst, n); break;
    case PL_DT_Q3_K: pl_dequant_q3_K(src, dst, n); break;
    case PL_DT_IQ4_XS: pl_dequant_iq4_xs(src, dst, n); break;
    case PL_DT_MXFP4: pl_dequant_mxfp4(src, dst, n); break;
    default: PL_ASSERT(!"pl_dequantize_row: type cannot be computed");
    }
}

size_t pl_quantize_row(pl_dtype type, const float *src, void *dst, int64_t n) {
    size_t bytes = pl_dtype_row_size(type, n);
    if (!bytes) return 0;
    switch (type) {
    case PL_DT_F32: memcpy(dst, src, bytes); break;
    case PL_DT_F16:
        for (int64_t i = 0; i < n; i++) ((pl_f16 *)dst)[i] = pl_f32_to_f16(src[i]);
        break;
    case PL_DT_BF16:
        for (int64_t i = 0; i < n; i++) ((pl_bf16 *)dst)[i] = pl_f32_to_bf16(src[i]);
        break;
    case PL_DT_Q8_0: pl_quantize_q8_0_ref(src, dst, n); break;
    case PL_DT_Q4_0: pl_quantize_q4_0_ref(src, dst, n); break;
    case PL_DT_Q4_K: pl_quantize_q4_K_ref(src, dst, n); break;
    case PL_DT_Q5_K: pl_quantize_q5_K_ref(src, dst, n); break;
    case PL_DT_Q6_K: pl_quantize_q6_K_ref(src, dst, n); break;
    case PL_DT_Q4_1: pl_quantize_q4_1_ref(src, dst, n); break;
    case PL_DT_Q5_0: pl_quantize_q5_0_ref(src, dst, n); break;
    case PL_DT_Q5_1: pl_quantize_q5_1_ref(src, dst, n); break;
    case PL_DT_IQ4_NL: pl_quantize_iq4_nl_ref(src, dst, n); break;
    case PL_DT_Q2_K: pl_quantize_q2_K_ref(src, dst, n); break;
    case PL_DT_Q3_K: pl_quantize_q3_K_ref(src, dst, n); break;
    case PL_DT_IQ4_XS: pl_quantize_iq4_xs_ref(src, dst, n); break;
    case PL_DT_MXFP4: pl_quantize_mxfp4_ref(src, dst, n); break;
    default: return 0;
    }
    return bytes;
}
