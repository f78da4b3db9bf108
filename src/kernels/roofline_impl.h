/* kernels/roofline_impl — the read and FMA loops of kernels/roofline, written once for every
 * vector width (internal to roofline_avx2.c and roofline_avx512.c, which include it once each).
 *
 * The including file defines, for its instruction set:
 *   RF_SUFFIX     the name suffix (avx2, avx512): defines pl_roofline_read_<s>, pl_roofline_fma_<s>
 *   RF_V          the f32 vector type; RF_LANES its lanes (a compile-time constant)
 *   RF_ZERO(), RF_SET1(x), RF_LOAD(p) (aligned), RF_ADD(a, b), RF_FMA(a, b, c) = a * b + c
 *   RF_HSUM(v)    the sum of the lanes as a float
 * and nothing here depends on the width otherwise: the same loops, the same order per lane.
 */
#ifndef RF_SUFFIX
#error "define RF_SUFFIX and the RF_ vector operations before including kernels/roofline_impl.h"
#endif

#include "kernels/roofline.h"

#define RF_CAT_(a, b) a##b
#define RF_CAT(a, b) RF_CAT_(a, b)

/* Sum of n floats at p (64-byte aligned): four accumulators, 4 * RF_LANES floats per step
 * (two cache lines a step with 8 lanes, four with 16), then the remainder in order. */
float RF_CAT(pl_roofline_read_, RF_SUFFIX)(const float *p, size_t n) {
    RF_V a0 = RF_ZERO(), a1 = a0, a2 = a0, a3 = a0;
    size_t i = 0;
    for (; i + 4 * RF_LANES <= n; i += 4 * RF_LANES) {
        a0 = RF_ADD(a0, RF_LOAD(p + i));
        a1 = RF_ADD(a1, RF_LOAD(p + i + RF_LANES));
        a2 = RF_ADD(a2, RF_LOAD(p + i + 2 * RF_LANES));
        a3 = RF_ADD(a3, RF_LOAD(p + i + 3 * RF_LANES));
    }
    float s = RF_HSUM(RF_ADD(RF_ADD(a0, a1), RF_ADD(a2, a3)));
    for (; i < n; i++) s += p[i];
    return s;
}

/* PL_ROOF_FMA_CHAINS independent chains of `iters` vector FMAs each. */
float RF_CAT(pl_roofline_fma_, RF_SUFFIX)(int64_t iters, float seed) {
    RF_V a[PL_ROOF_FMA_CHAINS];
    const RF_V m = RF_SET1(0.999999f), c = RF_SET1(1e-7f);
    for (int k = 0; k < PL_ROOF_FMA_CHAINS; k++) a[k] = RF_SET1(seed + (float)k);
    for (int64_t i = 0; i < iters; i++) {
#pragma GCC unroll 16
        for (int k = 0; k < PL_ROOF_FMA_CHAINS; k++) a[k] = RF_FMA(a[k], m, c);
    }
    RF_V s = a[0];
    for (int k = 1; k < PL_ROOF_FMA_CHAINS; k++) s = RF_ADD(s, a[k]);
    return RF_HSUM(s);
}

#undef RF_CAT
#undef RF_CAT_
