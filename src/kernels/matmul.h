/* kernels/matmul — weight × activations for every computable weight type, batched and threaded.
 *
 *   y[b][r] = sum_c W[r][c] * x[b][c]      for r < rows, b < B
 *
 * W is `rows` rows of `cols` elements of its dtype, each row pl_dtype_row_size(type, cols) bytes,
 * rows contiguous (GGUF's layout: ne[0] = cols, ne[1] = rows). x is B rows of `cols` f32
 * (stride cols); y is B rows with stride ldy >= rows.
 *
 * Activations are converted the way llama.cpp's CPU backend does for the dot product, so that
 * results match the reference: f32 weights use f32 activations; f16 weights f16; bf16 weights
 * bf16; q8_0, q4_0, q5_0, iq4_nl and mxfp4 weights Q8_0 activations; q4_1 and q5_1 Q8_1; K-quant
 * (q2_K .. q6_K) and iq4_xs weights Q8_K activations. `scratch`
 * holds the converted activations: at least pl_matmul_scratch_size(type, cols, B) bytes.
 *
 * Each weight tile is read once per call and reused across all B activation rows. Work is split
 * over the pool's threads by output rows. The result for a given (row, b) does not depend on the
 * thread count or on B (bitwise), so batching never changes a sequence's tokens.
 */
#ifndef PL_KERNELS_MATMUL_H
#define PL_KERNELS_MATMUL_H

#include "base/threadpool.h"
#include "kernels/dtype.h"

#include <stddef.h>
#include <stdint.h>

/* How a weight's bytes are arranged: GGUF's rows, or repacked by pl_matmul_repack. */
typedef enum { PL_WLAYOUT_ROWS = 0, PL_WLAYOUT_X16 = 1 } pl_wlayout;

typedef struct {
    const void *data;
    pl_dtype type;
    int64_t rows; /* output features */
    int64_t cols; /* input features (multiple of the type's block size) */
    pl_wlayout layout; /* PL_WLAYOUT_ROWS unless repacked (zero-initialized structs are rows) */
} pl_weight;

size_t pl_matmul_scratch_size(pl_dtype type, int64_t cols, int64_t B);
void pl_matmul(pl_threadpool *tp, const pl_weight *w, const float *x, int64_t B, float *y,
               int64_t ldy, void *scratch);
/* y[i] = w[i] x for n <= PL_MATMUL_MAX_MULTI weights that read the same input (Q/K/V, gate/up):
 * x is converted once and all n run in one pool job; each y[i] has stride w[i]->rows. Results
 * are bitwise those of n pl_matmul calls. Weights may differ in type where they take the same
 * converted input (the K-quants all take q8_K rows: Q4_K_M's q4_K Q/K with its q6_K V); weights
 * of other mixes or different cols fall back to n calls. */
enum { PL_MATMUL_MAX_MULTI = 4 };
void pl_matmul_multi(pl_threadpool *tp, const pl_weight *const *w, float *const *y, int n,
                     const float *x, int64_t B, void *scratch);
/* Repacking at load time (issue 22). f16, q8_0, q4_0, iq4_nl, q5_0, q4_1, q5_1, q2_K, q4_K, q6_K
 * iq4_xs and mxfp4 weights whose rows are a multiple of 16 have an interleaved layout ("x16",
 * kernels/matmul_x16*.c: 16 rows side by side, a vector's 16 lanes are 16 outputs, so no lane
 * sums) that the AVX-512 kernels (FMA for f16, VNNI for the integer types at any batch size, AMX
 * for larger batches) multiply faster. Results are deterministic across batch sizes, thread counts
 * and those kernels (one order per type), but summed in another order than the rows layout
 * (docs/ACCURACY.md). pl_matmul_repack_size: bytes of w repacked (iq4_xs: 138 per 256 columns
 * instead of 136; the others as GGUF), or 0 if w has no such layout.
 * pl_matmul_repack_wanted: 1 where this kernel level has SIMD x16 kernels for t (AVX-512: every
 * type above and bf16, whose tile is vdpbf16ps'; AVX2 and AVX-VNNI: f16, bf16, q4_K, q6_K, q2_K,
 * iq4_xs, q8_0, q4_0, iq4_nl, mxfp4, q5_0, q4_1 and q5_1; issue 35) unless PAGELLM_REPACK=0. pl_matmul_repack: copy w into dst
 * (64-byte aligned, that many bytes) and point w at it. Views of rows (weight_rows) must be taken
 * before repacking. */
size_t pl_matmul_repack_size(const pl_weight *w);
/* An f16 weight in GGUF's rows as bf16 (issue 35, --f16-weights bf16): each value rounded to the
 * nearest bf16 (pl_f16_to_bf16) into dst (64-byte aligned, rows x cols x 2 bytes, the f16's own
 * size), laid out as pl_matmul_repack would lay out bf16 at this level (x16 where wanted, else
 * rows), and w pointed at it. One pass; w's old bytes are only read. */
void pl_matmul_f16_to_bf16(pl_weight *w, void *dst);
int pl_matmul_repack_wanted(pl_dtype t);
void pl_matmul_repack(pl_weight *w, void *dst);

/* Single-threaded scalar reference with the same activation conversion (for tests). */
void pl_matmul_ref(const pl_weight *w, const float *x, int64_t B, float *y, int64_t ldy);

/* Dequantize one row (n elements, a multiple of the block size) of any computable type to f32
 * (embedding lookup, tests). */
void pl_dequantize_row(pl_dtype type, const void *src, float *dst, int64_t n);
/* Quantize one f32 row to `type` (f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, mxfp4 with
 * llama.cpp's reference rounding; q4_K, q6_K, q2_K, q3_K, iq4_nl, iq4_xs with simpler scale choices of our
 * own, see quant_kw.c and quant_wt.c; used by mkmodel and tests). Returns bytes written, 0 if
 * the type cannot be written. */
size_t pl_quantize_row(pl_dtype type, const float *src, void *dst, int64_t n);

/* Micro-benchmark (not a test): time `iters` calls of pl_matmul on a synthetic rows x cols
 * weight of `type` (valid random blocks) against B activation rows, after one warm-up call;
 * `layout` PL_WLAYOUT_X16 repacks the weight first (returns a negative value if the type has
 * no x16 layout). Returns the weight bytes streamed per second in GB/s (rows * row_size * iters
 * / time) and, if gflops is not NULL, 2 * rows * cols * B * iters / time / 1e9. Returns a
 * negative value if the type cannot be computed or memory runs out. */
double pl_matmul_bench(pl_threadpool *tp, pl_dtype type, int64_t rows, int64_t cols, int64_t B,
                       int iters, pl_wlayout layout, double *gflops);

#endif
