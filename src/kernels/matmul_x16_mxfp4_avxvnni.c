/* kernels/matmul_x16_mxfp4_avxvnni — mxfp4's x16 tiles with AVX-VNNI (VEX vpdpbusd on ymm): the
 * skeleton of x16_mxfp4_ymm.h with VNNI. */
#define X16_VNNI 1
#define X16_KERNEL pl_mm_kernel_x16_mxfp4_avxvnni
#include "kernels/x16_mxfp4_ymm.h"
