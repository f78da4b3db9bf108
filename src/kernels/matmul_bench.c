/* kernels/matmul_bench — pl_matmul_bench (see matmul.h). */
#include "kernels/matmul.h"
#include "base/clock.h"

#include "base/fp16.h"
#include "base/rng.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>


/* Random bytes with every block's f16 scales (and the float types' values) made small. */
static void fill(pl_rng *rng, pl_dtype type, uint8_t *w, size_t bytes) {
    for (size_t i = 0; i < bytes; i++) w[i] = (uint8_t)pl_rng_next(rng);
    size_t bs = pl_dtype_type_size(type);
    pl_f16 d = pl_f32_to_f16(0.01f);
    switch (type) {
    case PL_DT_F32:
        for (size_t i = 0; i + 4 <= bytes; i += 4) {
            float v = (float)pl_rng_uniform(rng) - 0.5f;
            memcpy(w + i, &v, 4);
        }
        break;
    case PL_DT_F16:
    case PL_DT_BF16:
        for (size_t i = 0; i + 2 <= bytes; i += 2) {
            float v = (float)pl_rng_uniform(rng) - 0.5f;
            uint16_t h = type == PL_DT_F16 ? pl_f32_to_f16(v) : pl_f32_to_bf16(v);
            memcpy(w + i, &h, 2);
        }
        break;
    case PL_DT_Q6_K:
    case PL_DT_Q3_K: /* d last */
        for (size_t off = 0; off + bs <= bytes; off += bs) memcpy(w + off + bs - 2, &d, 2);
        break;
    case PL_DT_Q2_K: /* d, dmin last */
        for (size_t off = 0; off + bs <= bytes; off += bs) {
            memcpy(w + off + bs - 4, &d, 2);
            memcpy(w + off + bs - 2, &d, 2);
        }
        break;
    default:
        for (size_t off = 0; off + bs <= bytes; off += bs) {
            memcpy(w + off, &d, 2);
            if (type == PL_DT_Q4_K || type == PL_DT_Q5_K || type == PL_DT_Q4_1 || type == PL_DT_Q5_1)
                memcpy(w + off + 2, &d, 2); /* dmin, or q4_1 / q5_1's m */
        }
        break;
    }
}

double pl_matmul_bench(pl_threadpool *tp, pl_dtype type, int64_t rows, int64_t cols, int64_t B,
                       int iters, pl_wlayout layout, double *gflops) {
    size_t rs = pl_dtype_row_size(type, cols);
    if (!pl_dtype_can_matmul(type) || !rs || rows <= 0 || B <= 0 || iters <= 0) return -1.0;
    size_t wbytes = rs * (size_t)rows, ssz = pl_matmul_scratch_size(type, cols, B);
    uint8_t *w = malloc(wbytes), *packed = NULL;
    float *x = malloc((size_t)(B * cols) * sizeof *x), *y = malloc((size_t)(B * rows) * sizeof *y);
    void *scratch = ssz ? malloc(ssz) : NULL;
    double gbs = -1.0;
    if (w && x && y && (scratch || !ssz)) {
        pl_rng rng;
        pl_rng_seed(&rng, 1);
        fill(&rng, type, w, wbytes);
        for (int64_t i = 0; i < B * cols; i++) x[i] = (float)pl_rng_normal(&rng);
        pl_weight wt = {.data = w, .type = type, .rows = rows, .cols = cols};
        if (layout == PL_WLAYOUT_X16) {
            size_t pb = pl_matmul_repack_size(&wt);
            packed = pb ? aligned_alloc(64, (pb + 63) / 64 * 64) : NULL;
            if (!packed) goto out;
            pl_matmul_repack(&wt, packed);
        }
        pl_matmul(tp, &wt, x, B, y, rows, scratch);
        double t0 = pl_clock_now();
        for (int i = 0; i < iters; i++) pl_matmul(tp, &wt, x, B, y, rows, scratch);
        double dt = pl_clock_now() - t0;
        gbs = (double)wbytes * iters / dt / 1e9;
        if (gflops) *gflops = 2.0 * (double)rows * (double)cols * (double)B * iters / dt / 1e9;
    }
out:
    free(packed);
    free(w);
    free(x);
    free(y);
    free(scratch);
    return gbs;
}
