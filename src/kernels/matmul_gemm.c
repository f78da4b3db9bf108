/* kernels/matmul_gemm — the loop nest shared by the blocked F16 GEMMs (matmul_gemm_avx2.c,
 * matmul_gemm_avx512.c); see pl_mm_gemm_sweep in matmul_kernels.h. Plain C: the vector work is
 * in the callbacks, each called for a whole panel block or register tile. */
#include "kernels/matmul_kernels.h"

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

void pl_mm_gemm_sweep(const pl_mm_gemm_plan *p, void *ctx, int64_t nrows, int64_t B) {
    for (int64_t bb = 0; bb < B; bb += p->act_rows) {
        const int64_t bend = min64(bb + p->act_rows, B), nbb = bend - bb;
        for (int64_t rp = 0; rp < nrows; rp += p->panel_rows) {
            const int64_t rpend = min64(rp + p->panel_rows, nrows);
            for (int64_t j0 = 0; j0 < p->nchunks; j0 += p->kb_chunks) {
                const int64_t j1 = min64(j0 + p->kb_chunks, p->nchunks);
                for (int64_t r = rp; r < rpend; r += p->gr) {
                    const int nr = (int)min64(rpend - r, p->gr);
                    p->pack(ctx, r, nr, j0, j1);
                    for (int64_t b = bb; b < bend; b += p->gb)
                        p->tile(ctx, (r - rp) * nbb + (b - bb) * p->gr, b, nr,
                                (int)min64(bend - b, p->gb));
                }
            }
            for (int64_t r = rp; r < rpend; r += p->gr)
                for (int64_t b = bb; b < bend; b++)
                    p->finish(ctx, (r - rp) * nbb + (b - bb) * p->gr, b, r, (int)min64(rpend - r, p->gr));
        }
    }
}
