/* base/fp16 — scalar IEEE half and bfloat16 conversions (round to nearest even), bit-exact with
 * the hardware instructions (F16C vcvtps2ph with rounding mode 0, AVX-512 BF16 vcvtneps2bf16
 * except for NaN payloads). Kernels use intrinsics on their hot paths; these are the reference. */
#ifndef PL_BASE_FP16_H
#define PL_BASE_FP16_H

#include <stdint.h>
#include <string.h>

typedef uint16_t pl_f16;
typedef uint16_t pl_bf16;

static inline float pl_bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline uint32_t pl_f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

/* Without a branch (the scalar kernels widen one per element): exponent and mantissa moved into
 * place and the exponent rebased by a multiply by 2^112 (exact, subnormals included); inf and
 * nan keep an all-ones exponent and their payload. Bit casts through a union: memcpy's
 * addressable locals cost a stack check each under ASan. */
static inline float pl_f16_to_f32(pl_f16 h) {
    union { uint32_t u; float f; } v = {.u = (uint32_t)(h & 0x7fff) << 13};
    const uint32_t inf_nan = v.u >= (0x7c00u << 13) ? 0x7f800000u : 0;
    v.f *= 0x1p112f;
    v.u |= inf_nan | (uint32_t)(h & 0x8000) << 16;
    return v.f;
}

static inline pl_f16 pl_f32_to_f16(float f) {
    uint32_t x = pl_f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) /* inf or nan */
        return (pl_f16)(sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 | ((ax >> 13) & 0x3ff) : 0));
    if (ax >= 0x477ff000u) return (pl_f16)(sign | 0x7c00); /* rounds to >= 65520: overflow */
    if (ax < 0x38800000u) { /* result is subnormal or zero: exponent < -14 */
        if (ax < 0x33000000u) return (pl_f16)sign; /* < 2^-25: rounds to zero */
        uint32_t e = ax >> 23;
        uint32_t m = (ax & 0x7fffff) | 0x800000;
        uint32_t shift = 126 - e; /* 14 - (e - 127) + 13 - 1 + 1 */
        uint32_t r = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1);
        uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1))) r++;
        return (pl_f16)(sign | r);
    }
    uint32_t r = ax - 0x38000000u; /* rebias exponent 127 -> 15 */
    uint32_t lsb = (r >> 13) & 1;
    r += 0xfff + lsb;
    return (pl_f16)(sign | (r >> 13));
}

static inline float pl_bf16_to_f32(pl_bf16 h) { return pl_bits_f32((uint32_t)h << 16); }

static inline pl_bf16 pl_f32_to_bf16(float f) {
    uint32_t x = pl_f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (pl_bf16)((x >> 16) | 64); /* quiet nan */
    x += 0x7fff + ((x >> 16) & 1);
    return (pl_bf16)(x >> 16);
}

/* An f16 value as the nearest bf16 (even on a tie; f16 -> f32 is exact): 3 of its 10 mantissa
 * bits go, the range grows (65504 rounds to 65536, subnormals become normal); +-0, +-inf kept,
 * a NaN stays a NaN of the same sign. The --f16-weights bf16 conversion (issue 35). */
static inline pl_bf16 pl_f16_to_bf16(pl_f16 h) { return pl_f32_to_bf16(pl_f16_to_f32(h)); }

#endif
