/* kernels/matmul_x16_kq_avx2 — q4_K's, q6_K's, q2_K's and iq4_xs's x16 tiles with AVX2
 * (vpmaddubsw / vpmaddwd): the skeleton of x16_kq_ymm.h without VNNI. */
#define X16_VNNI 0
#define X16_KERNEL pl_mm_kernel_x16_kq_avx2
#include "kernels/x16_kq_ymm.h"
