/* kernels/matmul_x16_mxfp4_avx2 — mxfp4's x16 tiles with AVX2 (vpmaddubsw / vpmaddwd): the
 * skeleton of x16_mxfp4_ymm.h without VNNI. */
#define X16_VNNI 0
#define X16_KERNEL pl_mm_kernel_x16_mxfp4_avx2
#include "kernels/x16_mxfp4_ymm.h"
