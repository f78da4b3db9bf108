/* kernels/matmul_x16_kq_avxvnni — q4_K's, q6_K's, q2_K's and iq4_xs's x16 tiles with AVX-VNNI
 * (VEX vpdpbusd / vpdpwssd on ymm): the skeleton of x16_kq_ymm.h with VNNI. */
#define X16_VNNI 1
#define X16_KERNEL pl_mm_kernel_x16_kq_avxvnni
#include "kernels/x16_kq_ymm.h"
