/* kernels/dtype — see dtype.h. */
#include "kernels/dtype.h"

#include <stdio.h>

typedef struct {
    const char *name;
    int64_t block;
    size_t size;
} dtype_traits;

static const dtype_traits traits[PL_DT_COUNT] = {
    [PL_DT_F32] = {"f32", 1, 4},          [PL_DT_F16] = {"f16", 1, 2},
    [PL_DT_Q4_0] = {"q4_0", 32, 18},      [PL_DT_Q4_1] = {"q4_1", 32, 20},
    [PL_DT_Q5_0] = {"q5_0", 32, 22},      [PL_DT_Q5_1] = {"q5_1", 32, 24},
    [PL_DT_Q8_0] = {"q8_0", 32, 34},      [PL_DT_Q8_1] = {"q8_1", 32, 36},
    [PL_DT_Q2_K] = {"q2_K", 256, 84},     [PL_DT_Q3_K] = {"q3_K", 256, 110},
    [PL_DT_Q4_K] = {"q4_K", 256, 144},    [PL_DT_Q5_K] = {"q5_K", 256, 176},
    [PL_DT_Q6_K] = {"q6_K", 256, 210},    [PL_DT_Q8_K] = {"q8_K", 256, 292},
    [PL_DT_IQ2_XXS] = {"iq2_xxs", 256, 66}, [PL_DT_IQ2_XS] = {"iq2_xs", 256, 74},
    [PL_DT_IQ3_XXS] = {"iq3_xxs", 256, 98}, [PL_DT_IQ1_S] = {"iq1_s", 256, 50},
    [PL_DT_IQ4_NL] = {"iq4_nl", 32, 18},  [PL_DT_IQ3_S] = {"iq3_s", 256, 110},
    [PL_DT_IQ2_S] = {"iq2_s", 256, 82},   [PL_DT_IQ4_XS] = {"iq4_xs", 256, 136},
    [PL_DT_I8] = {"i8", 1, 1},            [PL_DT_I16] = {"i16", 1, 2},
    [PL_DT_I32] = {"i32", 1, 4},          [PL_DT_I64] = {"i64", 1, 8},
    [PL_DT_F64] = {"f64", 1, 8},          [PL_DT_IQ1_M] = {"iq1_m", 256, 56},
    [PL_DT_BF16] = {"bf16", 1, 2},        [PL_DT_TQ1_0] = {"tq1_0", 256, 54},
    [PL_DT_TQ2_0] = {"tq2_0", 256, 66},   [PL_DT_MXFP4] = {"mxfp4", 32, 17},
};

int pl_dtype_valid(uint32_t id) { return id < PL_DT_COUNT && traits[id].name != NULL; }

const char *pl_dtype_name(uint32_t id) {
    static _Thread_local char buf[32];
    if (pl_dtype_valid(id)) return traits[id].name;
    snprintf(buf, sizeof buf, "unknown(%u)", id);
    return buf;
}

int64_t pl_dtype_block_size(pl_dtype t) { return pl_dtype_valid(t) ? traits[t].block : 0; }

size_t pl_dtype_type_size(pl_dtype t) { return pl_dtype_valid(t) ? traits[t].size : 0; }

size_t pl_dtype_row_size(pl_dtype t, int64_t n) {
    if (!pl_dtype_valid(t) || n < 0 || n % traits[t].block) return 0;
    return (size_t)(n / traits[t].block) * traits[t].size;
}

int pl_dtype_can_matmul(pl_dtype t) {
    switch (t) {
    case PL_DT_F32: case PL_DT_F16: case PL_DT_BF16: case PL_DT_Q8_0: case PL_DT_Q4_0:
    case PL_DT_Q4_K: case PL_DT_Q5_K: case PL_DT_Q6_K: case PL_DT_Q4_1: case PL_DT_Q5_0:
    case PL_DT_Q5_1: case PL_DT_IQ4_NL: case PL_DT_Q2_K: case PL_DT_Q3_K: case PL_DT_IQ4_XS:
    case PL_DT_MXFP4:
        return 1;
    default:
        return 0;
    }
}
