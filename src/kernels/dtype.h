/* kernels/dtype — the GGML tensor types: ids (as stored in GGUF), block geometry and names.
 *
 * Every type GGUF files can carry is listed so that the GGUF reader can validate tensor sizes of
 * any file; which types can actually be computed is pl_dtype_can_matmul(). A row of n elements of
 * type t occupies n / block_size * type_size bytes; n must be a multiple of block_size.
 */
#ifndef PL_KERNELS_DTYPE_H
#define PL_KERNELS_DTYPE_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    PL_DT_F32 = 0,
    PL_DT_F16 = 1,
    PL_DT_Q4_0 = 2,
    PL_DT_Q4_1 = 3,
    PL_DT_Q5_0 = 6,
    PL_DT_Q5_1 = 7,
    PL_DT_Q8_0 = 8,
    PL_DT_Q8_1 = 9,
    PL_DT_Q2_K = 10,
    PL_DT_Q3_K = 11,
    PL_DT_Q4_K = 12,
    PL_DT_Q5_K = 13,
    PL_DT_Q6_K = 14,
    PL_DT_Q8_K = 15,
    PL_DT_IQ2_XXS = 16,
    PL_DT_IQ2_XS = 17,
    PL_DT_IQ3_XXS = 18,
    PL_DT_IQ1_S = 19,
    PL_DT_IQ4_NL = 20,
    PL_DT_IQ3_S = 21,
    PL_DT_IQ2_S = 22,
    PL_DT_IQ4_XS = 23,
    PL_DT_I8 = 24,
    PL_DT_I16 = 25,
    PL_DT_I32 = 26,
    PL_DT_I64 = 27,
    PL_DT_F64 = 28,
    PL_DT_IQ1_M = 29,
    PL_DT_BF16 = 30,
    PL_DT_TQ1_0 = 34,
    PL_DT_TQ2_0 = 35,
    PL_DT_MXFP4 = 39,
    PL_DT_COUNT = 40, /* one past the largest id */
} pl_dtype;

/* 1 if id names a known type (ids 4, 5, 31-33 and 36-38 were removed from GGML). */
int pl_dtype_valid(uint32_t id);
const char *pl_dtype_name(uint32_t id);      /* "q4_K", "f16", ...; "unknown(N)" for bad ids */
int64_t pl_dtype_block_size(pl_dtype t);     /* elements per block */
size_t pl_dtype_type_size(pl_dtype t);       /* bytes per block */
/* Bytes of a row of n elements, or 0 if n is not a multiple of the block size. */
size_t pl_dtype_row_size(pl_dtype t, int64_t n);
/* 1 if pagellm can multiply weights of this type (see kernels/matmul.h). */
int pl_dtype_can_matmul(pl_dtype t);

#endif
