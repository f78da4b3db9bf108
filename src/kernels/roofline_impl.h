/* kernels/roofline_impl — the read and FMA loops of kernels/roofline, written once for every
 * vector width (internal to roofline_avx2.c and roofline_avx512.c, which include it once each).
 *
 * The including file defines, for its instruction set:
 *   RF_SUFFIX     the name suffix (avx2, avx512): defines pl_roofline_read_<s>, pl_roofline_fma_<s>
 *   RF_V          the f32 vector type; RF_LANES its lanes (a compile-time constant)
 *   RF_ZERO(), RF_SET1(x), RF_LOAD(p) (aligned), RF_ADD(a, b), RF_FMA(a, b, c) = a * b + c
 *   RF_HSUM(v)    the sum of the lanes as a float
 * and nothing here depends on the width otherwise: the same loops, the same order per lane.
 * With RF_IDOT defined it also defines pl_roofline_int8_<s>, the int8 dot-product chains, from
 * RF_IV (the integer vector), RF_ILANES (its int32 lanes), RF_ISET1_8, RF_ISET1_32, RF_IADD,
 * RF_ISTORE(uint32_t *, v) and RF_IDOT(acc, u, v) (see below); RF_INT_ONLY leaves the float loops
 * out (roofline_avxvnni.c, whose float loops are AVX2's).
 */
#ifndef RF_SUFFIX
#error "define RF_SUFFIX and the RF_ vector operations before including kernels/roofline_impl.h"
#endif

#include "kernels/roofline.h"

#define RF_CAT_(a, b) a##b
#define RF_CAT(a, b) RF_CAT_(a, b)

#ifndef RF_INT_ONLY
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

#endif /* RF_INT_ONLY */

#ifdef RF_IDOT
#ifndef RF_ICHAINS
#define RF_ICHAINS PL_ROOF_FMA_CHAINS
#endif
/* RF_ICHAINS (default PL_ROOF_FMA_CHAINS) independent chains of `iters` int8 dot products of
 * 4 bytes into each int32 lane, RF_IDOT(acc, u, v) = acc + u . v, u unsigned (AVX2, whose multiply does not take acc,
 * passes acc's bytes as u so that the compiler cannot hoist it out of the loop); RF_ILANES int32
 * lanes, stored to an array by RF_ISTORE. The lanes wrap: only their use as a sink matters, so
 * they are summed as unsigned. */
int32_t RF_CAT(pl_roofline_int8_, RF_SUFFIX)(int64_t iters, int32_t seed) {
    RF_IV a[RF_ICHAINS];
    const RF_IV u = RF_ISET1_8(3), v = RF_ISET1_8(-2);
    (void)u;
#pragma GCC unroll 16
    for (int k = 0; k < RF_ICHAINS; k++) a[k] = RF_ISET1_32(seed + k);
    for (int64_t i = 0; i < iters; i++) {
#pragma GCC unroll 16
        for (int k = 0; k < RF_ICHAINS; k++) a[k] = RF_IDOT(a[k], u, v);
    }
    RF_IV s = a[0];
#pragma GCC unroll 16
    for (int k = 1; k < RF_ICHAINS; k++) s = RF_IADD(s, a[k]);
    uint32_t lanes[RF_ILANES], t = 0;
    RF_ISTORE(lanes, s);
    for (int i = 0; i < RF_ILANES; i++) t += lanes[i];
    return (int32_t)(t & 0x7fffffff);
}
#endif

#undef RF_CAT
#undef RF_CAT_
