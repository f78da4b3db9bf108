/* kernels/matmul_wt_tiles — the tiles and the kernel lookup of the weight types of issue 18, one
 * text for matmul_wt_avx2.c and matmul_wt_avx512.c (which include it once, at their end).
 *
 * The including file defines the bodies b32_body(..., T) (T: T_Q4_1, T_Q5_1, T_Q5_0, T_IQ4_NL),
 * k23_body(..., is_q3) and iq4_xs_body at its vector width, and before the include:
 *   PL_WT_KERNEL            the name of the lookup function (matmul_kernels.h declares it);
 *   PL_WT_B32_TILE, _TR, _TB  the PL_MM_TILE_RxB macro of the 32-quant types and its R x B;
 *   PL_WT_K_TILE, _TR, _TB    the same for the super-block types (q2_K, q3_K, iq4_xs).
 * The lookup gives each type its tile and tr x tb, and answers 0 for any other type.
 */
#ifndef PL_KERNELS_MATMUL_WT_TILES_H
#define PL_KERNELS_MATMUL_WT_TILES_H

#include "kernels/matmul_tile.h"

PL_MM_BODY_T(q4_1_body, b32_body, T_Q4_1)
PL_MM_BODY_T(q5_1_body, b32_body, T_Q5_1)
PL_MM_BODY_T(q5_0_body, b32_body, T_Q5_0)
PL_MM_BODY_T(iq4_nl_body, b32_body, T_IQ4_NL)
PL_MM_BODY_T(q2_K_body, k23_body, 0)
PL_MM_BODY_T(q3_K_body, k23_body, 1)

PL_WT_B32_TILE(tile_q4_1, q4_1_body)
PL_WT_B32_TILE(tile_q5_1, q5_1_body)
PL_WT_B32_TILE(tile_q5_0, q5_0_body)
PL_WT_B32_TILE(tile_iq4_nl, iq4_nl_body)
PL_WT_K_TILE(tile_q2_K, q2_K_body)
PL_WT_K_TILE(tile_q3_K, q3_K_body)
PL_WT_K_TILE(tile_iq4_xs, iq4_xs_body)

static int wt_kernel(pl_mm_kernel *k, pl_mm_tile_fn fn, int tr, int tb) {
    k->fn = fn;
    k->tr = tr;
    k->tb = tb;
    return 1;
}

int PL_WT_KERNEL(pl_dtype t, pl_mm_kernel *k) {
    switch (t) {
    case PL_DT_Q4_1: return wt_kernel(k, tile_q4_1, PL_WT_B32_TR, PL_WT_B32_TB);
    case PL_DT_Q5_1: return wt_kernel(k, tile_q5_1, PL_WT_B32_TR, PL_WT_B32_TB);
    case PL_DT_Q5_0: return wt_kernel(k, tile_q5_0, PL_WT_B32_TR, PL_WT_B32_TB);
    case PL_DT_IQ4_NL: return wt_kernel(k, tile_iq4_nl, PL_WT_B32_TR, PL_WT_B32_TB);
    case PL_DT_Q2_K: return wt_kernel(k, tile_q2_K, PL_WT_K_TR, PL_WT_K_TB);
    case PL_DT_Q3_K: return wt_kernel(k, tile_q3_K, PL_WT_K_TR, PL_WT_K_TB);
    case PL_DT_IQ4_XS: return wt_kernel(k, tile_iq4_xs, PL_WT_K_TR, PL_WT_K_TB);
    default: /* not ours: fn untouched, tr x tb left at the super-block tile's */
        k->tr = PL_WT_K_TR;
        k->tb = PL_WT_K_TB;
        return 0;
    }
}

#endif
