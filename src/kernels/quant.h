/* kernels/quant — internal to kernels/: the GGML block layouts, row (de)quantizers, and the
 * activation layouts the matmul kernels read.
 *
 * Block layouts are GGML's, byte for byte (GGUF stores them; static_asserts pin the sizes):
 *   q8_0 : d (f16), qs[32] int8                      x[j] = d * qs[j]
 *   q4_0 : d (f16), qs[16] nibbles                   x[j] = d * ((qs[j] & 15) - 8),
 *                                                    x[j + 16] = d * ((qs[j] >> 4) - 8)
 *   q4_K : d, dmin (f16), scales[12], qs[128]        8 sub-blocks of 32 with 6-bit scale sc and
 *          min m: x = d * sc * q - dmin * m; qs byte l of 64-group g holds element 64g + l (low
 *          nibble, sub-block 2g) and 64g + 32 + l (high nibble, sub-block 2g + 1)
 *   q5_K : as q4_K plus qh[32]: bit 2g of qh[l] is the 5th bit of element 64g + l, bit 2g + 1
 *          that of element 64g + 32 + l
 *   q6_K : ql[128], qh[64], scales[16] int8, d (f16) 16 sub-blocks of 16: x = d * sc * (q - 32),
 *          q = 4 low bits from ql and 2 high bits from qh (see pl_dequant_q6_K)
 *   q8_K : d (f32), qs[256] int8, bsums[16] int16    activation-only; bsums = sums of 16 qs
 *   q4_1 : d, m (f16), qs[16] nibbles                x[j] = d * q + m, q as in q4_0 (no -8)
 *   q5_0 : d (f16), qh[4], qs[16]                    x[j] = d * (q - 16): q = nibble as in q4_0
 *          plus bit j of the little-endian u32 qh as its 5th bit (bit j + 16 for element j + 16)
 *   q5_1 : d, m (f16), qh[4], qs[16]                 x[j] = d * q + m, q as in q5_0
 *   iq4_nl : d (f16), qs[16]                         x[j] = d * kvalues_iq4nl[nibble], nibbles
 *          as in q4_0
 *   q2_K : scales[16], qs[64], d, dmin (f16)         16 sub-blocks of 16: scale byte s holds the
 *          4-bit scale (low) and min (high): x = d * sc * q - dmin * m, q 2 bits; element
 *          128h + 32j + l (l < 32) is bits 2j..2j+1 of qs[32h + l], sub-block 8h + 2j + l / 16
 *   q3_K : hmask[32], qs[64], scales[12], d (f16)    16 sub-blocks of 16 with 6-bit scales
 *          (pl_q3_K_scales): x = d * (sc - 32) * (q - 4), q's low 2 bits as in q2_K and its 3rd
 *          bit bit 4h + j of hmask[l] (for element 128h + 32j + l)
 *   iq4_xs : d (f16), scales_h (u16), scales_l[4], qs[128]   8 sub-blocks of 32 with 6-bit
 *          scales ls (low 4 bits from scales_l, high 2 from scales_h): x = d * (ls - 32) *
 *          kvalues_iq4nl[nibble], sub-block ib's nibbles in qs[16ib..] as in q4_0
 *   mxfp4 : e (E8M0), qs[16]                         x[j] = 2^(e - 128) * kvalues_mxfp4[nibble],
 *          nibbles as in q4_0; the levels are E2M1 doubled (0, 1, 2, 3, 4, 6, 8, 12 and their
 *          negatives), the scale halved, as GGML stores them (pl_e8m0_half)
 *
 * Activation layouts (what pl_matmul writes into scratch for each weight type; every row starts
 * on a 64-byte boundary, pl_act_row_bytes() bytes apart):
 *   f32 weights  : none, the kernels read x itself
 *   f16 weights  : float[cols], each value rounded to f16 (so products with f16 weights are exact)
 *   bf16 weights : uint16 bf16[cols]
 *   q8_0 weights : int8 qs[cols] then float d[cols / 32] (d already rounded through f16)
 *   q4_0 weights : as q8_0, but within each pair of blocks (A, B) the 64 qs are stored as
 *                  A[0..15] B[0..15] A[16..31] B[16..31], the order a 32-byte load of two q4_0
 *                  blocks' nibbles produces; a lone last block stays in natural order
 *   q5_0, iq4_nl, mxfp4 : as q8_0 (natural order)
 *   q4_1, q5_1   : q8_1 as llama.cpp: int8 qs[cols], float d[cols / 32] (rounded through f16),
 *                  float s[cols / 32] = f16(amax / 127 * sum of the block's qs)
 *   K-quants, iq4_xs : pl_block_q8_K[cols / 256]
 * The q8_0 activation quantization follows llama.cpp's x86 CPU path (d = amax / 127 rounded to
 * f16, multiplier 127 / amax, round half to even); q8_K follows quantize_row_q8_K_ref.
 */
#ifndef PL_KERNELS_QUANT_H
#define PL_KERNELS_QUANT_H

#include "base/fp16.h"
#include "kernels/dtype.h"

#include <assert.h>
#include <stddef.h>
#include <stdint.h>

enum { PL_QK = 32, PL_QK_K = 256 };

typedef struct {
    pl_f16 d;            /* block scale */
    int8_t qs[PL_QK];    /* quants */
} pl_block_q8_0;

typedef struct {
    pl_f16 d;                /* block scale */
    uint8_t qs[PL_QK / 2];   /* element j in the low nibble of byte j, j + 16 in the high one */
} pl_block_q4_0;

typedef struct {
    pl_f16 d;                  /* super-block scale of the 6-bit scales */
    pl_f16 dmin;               /* super-block scale of the 6-bit mins */
    uint8_t scales[12];        /* 8 scales and 8 mins, 6 bits each (pl_get_scale_min_k4) */
    uint8_t qs[PL_QK_K / 2];   /* 4-bit quants */
} pl_block_q4_K;

typedef struct {
    pl_f16 d;                  /* super-block scale of the 6-bit scales */
    pl_f16 dmin;               /* super-block scale of the 6-bit mins */
    uint8_t scales[12];        /* as q4_K */
    uint8_t qh[PL_QK_K / 8];   /* 5th bits */
    uint8_t qs[PL_QK_K / 2];   /* low 4 bits */
} pl_block_q5_K;

typedef struct {
    uint8_t ql[PL_QK_K / 2];      /* low 4 bits */
    uint8_t qh[PL_QK_K / 4];      /* high 2 bits */
    int8_t scales[PL_QK_K / 16];  /* 8-bit sub-block scales */
    pl_f16 d;                     /* super-block scale */
} pl_block_q6_K;

typedef struct {
    float d;                      /* scale */
    int8_t qs[PL_QK_K];           /* quants */
    int16_t bsums[PL_QK_K / 16];  /* sums of qs in groups of 16 */
} pl_block_q8_K;

typedef struct {
    pl_f16 d;                /* block scale */
    pl_f16 m;                /* block offset */
    uint8_t qs[PL_QK / 2];   /* nibbles as q4_0 */
} pl_block_q4_1;

typedef struct {
    pl_f16 d;                /* block scale */
    uint8_t qh[4];           /* 5th bits, little-endian u32: bit j for element j */
    uint8_t qs[PL_QK / 2];   /* low 4 bits as q4_0 */
} pl_block_q5_0;

typedef struct {
    pl_f16 d;                /* block scale */
    pl_f16 m;                /* block offset */
    uint8_t qh[4];           /* as q5_0 */
    uint8_t qs[PL_QK / 2];   /* as q5_0 */
} pl_block_q5_1;

typedef struct {
    pl_f16 d;                /* block scale */
    uint8_t qs[PL_QK / 2];   /* indices into kvalues_iq4nl, nibbles as q4_0 */
} pl_block_iq4_nl;

typedef struct {
    uint8_t scales[PL_QK_K / 16]; /* 4-bit scale (low) and min (high) per sub-block of 16 */
    uint8_t qs[PL_QK_K / 4];      /* 2-bit quants */
    pl_f16 d;                     /* super-block scale of the scales */
    pl_f16 dmin;                  /* super-block scale of the mins */
} pl_block_q2_K;

typedef struct {
    uint8_t hmask[PL_QK_K / 8];   /* 3rd bits */
    uint8_t qs[PL_QK_K / 4];      /* low 2 bits */
    uint8_t scales[12];           /* 16 six-bit scales, stored + 32 */
    pl_f16 d;                     /* super-block scale */
} pl_block_q3_K;

typedef struct {
    pl_f16 d;                     /* super-block scale */
    uint16_t scales_h;            /* high 2 bits of the 8 sub-block scales */
    uint8_t scales_l[PL_QK_K / 64]; /* low 4 bits of the scales, two per byte */
    uint8_t qs[PL_QK_K / 2];      /* indices into kvalues_iq4nl */
} pl_block_iq4_xs;

typedef struct {
    uint8_t e;               /* shared E8M0 exponent: the block's scale is 2^(e - 128) */
    uint8_t qs[PL_QK / 2];   /* indices into kvalues_mxfp4, nibbles as q4_0 */
} pl_block_mxfp4;

static_assert(sizeof(pl_block_q8_0) == 34, "q8_0 block is 34 bytes");
static_assert(sizeof(pl_block_q4_0) == 18, "q4_0 block is 18 bytes");
static_assert(sizeof(pl_block_q4_K) == 144, "q4_K block is 144 bytes");
static_assert(sizeof(pl_block_q5_K) == 176, "q5_K block is 176 bytes");
static_assert(sizeof(pl_block_q6_K) == 210, "q6_K block is 210 bytes");
static_assert(sizeof(pl_block_q8_K) == 292, "q8_K block is 292 bytes");
static_assert(sizeof(pl_block_mxfp4) == 17, "mxfp4 block is 17 bytes");
static_assert(sizeof(pl_block_q4_1) == 20, "q4_1 block is 20 bytes");
static_assert(sizeof(pl_block_q5_0) == 22, "q5_0 block is 22 bytes");
static_assert(sizeof(pl_block_q5_1) == 24, "q5_1 block is 24 bytes");
static_assert(sizeof(pl_block_iq4_nl) == 18, "iq4_nl block is 18 bytes");
static_assert(sizeof(pl_block_q2_K) == 84, "q2_K block is 84 bytes");
static_assert(sizeof(pl_block_q3_K) == 110, "q3_K block is 110 bytes");
static_assert(sizeof(pl_block_iq4_xs) == 136, "iq4_xs block is 136 bytes");

/* The 16 non-linear levels of iq4_nl and iq4_xs (GGML's kvalues_iq4nl). */
extern const int8_t pl_kvalues_iq4nl[16];

/* The 16 levels of mxfp4 (GGML's kvalues_mxfp4: E2M1 values doubled). */
extern const int8_t pl_kvalues_mxfp4[16];

/* GGML's ggml_e8m0_to_fp32_half: 2^(e - 128), the subnormals 2^-128 and 2^-127 for e < 2. */
static inline float pl_e8m0_half(uint8_t e) {
    return pl_bits_f32(e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23);
}

/* The 16 scales of a q3_K block, 32 already subtracted (-32..31). */
static inline void pl_q3_K_scales(const uint8_t s[12], int8_t out[16]) {
    for (int j = 0; j < 4; j++) {
        out[j] = (int8_t)(((s[j] & 0xF) | (((s[8 + j] >> 0) & 3) << 4)) - 32);
        out[j + 4] = (int8_t)(((s[j + 4] & 0xF) | (((s[8 + j] >> 2) & 3) << 4)) - 32);
        out[j + 8] = (int8_t)(((s[j] >> 4) | (((s[8 + j] >> 4) & 3) << 4)) - 32);
        out[j + 12] = (int8_t)(((s[j + 4] >> 4) | (((s[8 + j] >> 6) & 3) << 4)) - 32);
    }
}

/* The 6-bit scale of sub-block ib (0..7) of an iq4_xs block, 32 subtracted (-32..31). */
static inline int pl_iq4_xs_scale(const pl_block_iq4_xs *b, int ib) {
    return (((b->scales_l[ib / 2] >> 4 * (ib % 2)) & 0xF) | (((b->scales_h >> 2 * ib) & 3) << 4)) - 32;
}

/* The 6-bit scale and min of sub-block j (0..7) of a q4_K / q5_K block. */
static inline void pl_get_scale_min_k4(int j, const uint8_t *q, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

/* Round to nearest, ties to even, for |v| < 2^22 (GGML's nearest_int). */
static inline int pl_nearest_int(float v) {
    float t = v + 12582912.0f;
    uint32_t u = pl_f32_bits(t);
    return (int)(u & 0x007fffff) - 0x00400000;
}

/* Weight quantizers with llama.cpp's reference rounding (n a multiple of 32). */
void pl_quantize_q8_0_ref(const float *x, pl_block_q8_0 *y, int64_t n);
void pl_quantize_q4_0_ref(const float *x, pl_block_q4_0 *y, int64_t n);
/* q4_K, q5_K and q6_K weight quantizers of our own (quant_kw.c; n a multiple of 256). */
void pl_quantize_q4_K_ref(const float *x, pl_block_q4_K *y, int64_t n);
void pl_quantize_q5_K_ref(const float *x, pl_block_q5_K *y, int64_t n);
void pl_quantize_q6_K_ref(const float *x, pl_block_q6_K *y, int64_t n);
/* Weight quantizers for the remaining types (quant_wt.c): q4_1, q5_0, q5_1, iq4_nl with
 * llama.cpp's reference rounding (iq4_nl without its scale search), q2_K, q3_K, iq4_xs simple
 * ones of our own (n a multiple of 32, or of 256 for the super-block types). */
void pl_quantize_q4_1_ref(const float *x, pl_block_q4_1 *y, int64_t n);
void pl_quantize_q5_0_ref(const float *x, pl_block_q5_0 *y, int64_t n);
void pl_quantize_q5_1_ref(const float *x, pl_block_q5_1 *y, int64_t n);
void pl_quantize_iq4_nl_ref(const float *x, pl_block_iq4_nl *y, int64_t n);
void pl_quantize_q2_K_ref(const float *x, pl_block_q2_K *y, int64_t n);
void pl_quantize_q3_K_ref(const float *x, pl_block_q3_K *y, int64_t n);
void pl_quantize_iq4_xs_ref(const float *x, pl_block_iq4_xs *y, int64_t n);
/* mxfp4 as llama.cpp's quantize_row_mxfp4_ref (quant_mxfp4.c): e from the block's amax, each
 * value to the nearest level (the first on a tie). */
void pl_quantize_mxfp4_ref(const float *x, pl_block_mxfp4 *y, int64_t n);
/* q8_1 activations (the q4_1 / q5_1 layout above) of one row, as llama.cpp's x86 path. */
void pl_act_q8_1_row(const float *x, void *dst, int64_t cols);
/* Activation quantizers: q8_0 as llama.cpp's x86 path, q8_K as its reference. */
void pl_quantize_q8_0_act(const float *x, pl_block_q8_0 *y, int64_t n);
void pl_quantize_q8_K(const float *x, pl_block_q8_K *y, int64_t n);

void pl_dequant_q8_0(const pl_block_q8_0 *x, float *y, int64_t n);
void pl_dequant_q4_0(const pl_block_q4_0 *x, float *y, int64_t n);
void pl_dequant_q4_K(const pl_block_q4_K *x, float *y, int64_t n);
void pl_dequant_q5_K(const pl_block_q5_K *x, float *y, int64_t n);
void pl_dequant_q6_K(const pl_block_q6_K *x, float *y, int64_t n);
void pl_dequant_q8_K(const pl_block_q8_K *x, float *y, int64_t n);
void pl_dequant_q4_1(const pl_block_q4_1 *x, float *y, int64_t n);
void pl_dequant_q5_0(const pl_block_q5_0 *x, float *y, int64_t n);
void pl_dequant_q5_1(const pl_block_q5_1 *x, float *y, int64_t n);
void pl_dequant_iq4_nl(const pl_block_iq4_nl *x, float *y, int64_t n);
void pl_dequant_q2_K(const pl_block_q2_K *x, float *y, int64_t n);
void pl_dequant_q3_K(const pl_block_q3_K *x, float *y, int64_t n);
void pl_dequant_iq4_xs(const pl_block_iq4_xs *x, float *y, int64_t n);
void pl_dequant_mxfp4(const pl_block_mxfp4 *x, float *y, int64_t n);

/* Activation layout for weights of type wtype (see above). */
size_t pl_act_row_bytes(pl_dtype wtype, int64_t cols);
void pl_act_convert_row(pl_dtype wtype, const float *x, void *dst, int64_t cols);
/* The same with AVX-512 (quant_avx512.c), bitwise equal; returns 0 where it defers to scalar. */
int pl_act_convert_row_avx512(pl_dtype wtype, const float *x, void *dst, int64_t cols);
/* The weight types whose activations are q8_K blocks. */
static inline int pl_act_is_q8_K(pl_dtype t) {
    return t == PL_DT_Q2_K || t == PL_DT_Q3_K || t == PL_DT_Q4_K || t == PL_DT_Q5_K || t == PL_DT_Q6_K ||
           t == PL_DT_IQ4_XS;
}
/* Below AVX-512, q8_0, q8_1 and q8_K (quant_avx2.c), bitwise equal; 0 for f16 and bf16. */
int pl_act_convert_row_avx2(pl_dtype wtype, const float *x, void *dst, int64_t cols);
/* The x16 layouts' q8_0 row with AVX2 (matmul_x16.c's act_q8_0, bitwise): q8_0's qs[cols] and
 * d[cols / 32], then seed[k] = -zero * the sum of block k's quants. */
void pl_act_q8_0_seeds_avx2(const float *x, uint8_t *dst, int64_t cols, int32_t zero);
/* Position in the q4_0 activation layout of element c of a row of nb blocks. */
static inline int64_t pl_act_q4_0_pos(int64_t c, int64_t nb) {
    int64_t blk = c / PL_QK, j = c % PL_QK;
    if ((blk & 1) == 0 && blk + 1 == nb) return c; /* lone last block */
    int64_t pair = blk / 2, second = blk & 1;
    return pair * 64 + (j / 16) * 32 + second * 16 + (j % 16);
}

#endif
