/* kernels/matmul_x16_q8_avx2 — the x16 tiles of q8_0, q4_0, iq4_nl and q4_1 with AVX2 (vpmaddubsw /
 * vpmaddwd, the sign trick for the signed quants): the skeleton of x16_q8_ymm.h without VNNI. */
#define X16_VNNI 0
#define X16_KERNEL pl_mm_kernel_x16_q8_avx2
#include "kernels/x16_q8_ymm.h"
