/* kernels/matmul_x16_avxvnni — the x16 tiles of q8_0, q4_0, iq4_nl, q5_0, q4_1 and q5_1 with AVX-VNNI (vpdpbusd
 * on ymm): the skeleton of x16_q8_ymm.h with VNNI. */
#define X16_VNNI 1
#define X16_KERNEL pl_mm_kernel_x16_avxvnni
#include "kernels/x16_q8_ymm.h"
