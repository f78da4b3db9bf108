/* kernels/matmul — see matmul.h.
 *
 * pl_matmul runs two pool jobs: the first converts the B activation rows into scratch (split by
 * rows), the second splits the output rows over the threads in multiples of the kernel's tile
 * height. Each thread walks its weight tiles and, for each, every activation tile (within
 * blocks of ACT_BLOCK rows, so the activations a tile sweeps stay in cache), so every weight byte
 * loaded is reused for all B. With B = 1 this degenerates into one pass over the weights.
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

typedef struct {
    const pl_weight *w;
    const float *x;      /* [B][cols] input */
    int64_t B;
    float *y;            /* [B][ldy] output */
    int64_t ldy;
    const uint8_t *act;  /* converted activations (or x for f32 weights) */
    size_t act_stride;   /* bytes between activation rows */
    pl_mm_kernel k;
} mm_job;

static uint8_t *align64(void *p) { return (uint8_t *)(((uintptr_t)p + 63) & ~(uintptr_t)63); }

size_t pl_matmul_scratch_size(pl_dtype type, int64_t cols, int64_t B) {
    size_t row = pl_act_row_bytes(type, cols);
    return row ? (size_t)B * row + 64 : 0;
}

static void pick_kernel(pl_dtype t, pl_mm_kernel *k) {
    pl_isa isa = pl_cpu_isa();
    if (isa >= PL_ISA_AVX512 && pl_mm_kernel_avx512(t, k)) return;
    if (isa >= PL_ISA_AVX2 && pl_mm_kernel_avx2(t, k)) return;
    int ok = pl_mm_kernel_scalar(t, k);
    PL_ASSERT(ok);
}

static void convert_job(void *ctx, int ith, int nth) {
    mm_job *j = ctx;
    int64_t b0, b1;
    pl_split_range(j->B, ith, nth, 1, &b0, &b1);
    for (int64_t b = b0; b < b1; b++)
        pl_act_convert_row(j->w->type, j->x + b * j->w->cols, (uint8_t *)j->act + b * j->act_stride,
                           j->w->cols);
}

static void multiply_job(void *ctx, int ith, int nth) {
    mm_job *j = ctx;
    const pl_weight *w = j->w;
    size_t ws = pl_dtype_row_size(w->type, w->cols);
    /* a decode step (B <= SMALL_B) walks one weight row at a time: a single sequential stream
     * per thread is what the hardware prefetchers follow at full bandwidth */
    int tr = j->B <= SMALL_B ? 1 : j->k.tr, tb = j->k.tb;
    int64_t r0, r1;
    pl_split_range(w->rows, ith, nth, tr, &r0, &r1);
    for (int64_t bb = 0; bb < j->B; bb += ACT_BLOCK) {
        int64_t bend = bb + ACT_BLOCK < j->B ? bb + ACT_BLOCK : j->B;
        for (int64_t r = r0; r < r1; r += tr) {
            int nr = (int)(r1 - r < tr ? r1 - r : tr);
            const uint8_t *wt = (const uint8_t *)w->data + (size_t)r * ws;
            for (int64_t b = bb; b < bend; b += tb) {
                int nb = (int)(bend - b < tb ? bend - b : tb);
                j->k.fn(wt, ws, nr, j->act + (size_t)b * j->act_stride, j->act_stride, nb, w->cols,
                        j->y + b * j->ldy + r, j->ldy);
            }
        }
    }
}

void pl_matmul(pl_threadpool *tp, const pl_weight *w, const float *x, int64_t B, float *y,
               int64_t ldy, void *scratch) {
    PL_ASSERT(w && pl_dtype_can_matmul(w->type));
    PL_ASSERT(w->cols > 0 && w->cols % pl_dtype_block_size(w->type) == 0);
    PL_ASSERT(ldy >= w->rows);
    if (B <= 0 || w->rows <= 0) return;
    mm_job j = {.w = w, .x = x, .B = B, .y = y, .ldy = ldy};
    pick_kernel(w->type, &j.k);
    if (w->type == PL_DT_F32) {
        j.act = (const uint8_t *)x;
        j.act_stride = (size_t)w->cols * sizeof(float);
    } else {
        PL_ASSERT(scratch);
        j.act = align64(scratch);
        j.act_stride = pl_act_row_bytes(w->type, w->cols);
        pl_threadpool_run(tp, convert_job, &j);
    }
    pl_threadpool_run(tp, multiply_job, &j);
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
    case PL_DT_Q4_0: {
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
    PL_ASSERT(w && pl_dtype_can_matmul(w->type));
    int64_t cols = w->cols;
    size_t ws = pl_dtype_row_size(w->type, cols), as = pl_act_row_bytes(w->type, cols);
    float *wrow = malloc((size_t)cols * sizeof *wrow);
    double *xv = malloc((size_t)cols * sizeof *xv);
    uint8_t *act = as ? malloc(as) : NULL;
    PL_ASSERT(wrow && xv && (act || !as));
    for (int64_t b = 0; b < B; b++) {
        if (w->type == PL_DT_F32) {
            for (int64_t c = 0; c < cols; c++) xv[c] = x[b * cols + c];
        } else {
            pl_act_convert_row(w->type, x + b * cols, act, cols);
            act_values(w->type, act, cols, xv);
        }
        for (int64_t r = 0; r < w->rows; r++) {
            pl_dequantize_row(w->type, (const uint8_t *)w->data + (size_t)r * ws, wrow, cols);
            double s = 0.0;
            for (int64_t c = 0; c < cols; c++) s += (double)wrow[c] * xv[c];
            y[b * ldy + r] = (float)s;
        }
    }
    free(wrow);
    free(xv);
    free(act);
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
    case PL_DT_Q6_K: pl_quantize_q6_K_ref(src, dst, n); break;
    default: return 0;
    }
    return bytes;
}
