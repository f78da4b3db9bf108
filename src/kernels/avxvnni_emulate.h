/* kernels/avxvnni_emulate — AVX-VNNI's two instructions computed exactly with AVX2, for a test
 * build only (CMake PL_EMULATE_AVXVNNI; scripts/test.sh's "emulated AVX-VNNI and AMX" step). The
 * `*_avxvnni.c` files are compiled with this header forced in (-include) and without -mavxvnni,
 * and kernels/cpu.c reports AVX-VNNI wherever AVX2 is: the AVX-VNNI tiles (their layouts, chains,
 * scales and the orders of their sums) then run on any AVX2 CPU. No qemu up to 10.0 emulates
 * AVX-VNNI, and the CPUs this project is measured on (Zen 4) lack it, so without this those tiles
 * would first run on a user's Alder Lake or Zen 5.
 *
 * Exact, so the tests' bitwise comparisons hold: vpdpbusd adds each int32 lane's four products of
 * an unsigned byte by a signed byte, wrapping. Each product fits int16 (255 x -128 .. 255 x 127),
 * so vpmaddubsw of one byte of each pair (the other masked to 0) cannot saturate; vpmaddwd by ones
 * then sums a lane's even products and its odd ones into int32. vpdpwssd is vpmaddwd then an
 * add, both wrapping as it does. Never in a release build: it is 4-5 instructions for one. */
#ifndef PL_KERNELS_AVXVNNI_EMULATE_H
#define PL_KERNELS_AVXVNNI_EMULATE_H

#include <immintrin.h>

static inline __m256i pl_emu_dpbusd(__m256i acc, __m256i u, __m256i s) {
    const __m256i ones = _mm256_set1_epi16(1), even = _mm256_set1_epi16(0x00ff);
    const __m256i pe = _mm256_maddubs_epi16(_mm256_and_si256(u, even), s),
                  po = _mm256_maddubs_epi16(_mm256_andnot_si256(even, u), s);
    return _mm256_add_epi32(acc, _mm256_add_epi32(_mm256_madd_epi16(pe, ones), _mm256_madd_epi16(po, ones)));
}

static inline __m256i pl_emu_dpwssd(__m256i acc, __m256i a, __m256i b) {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b));
}

#define _mm256_dpbusd_avx_epi32(acc, u, s) pl_emu_dpbusd(acc, u, s)
#define _mm256_dpwssd_avx_epi32(acc, a, b) pl_emu_dpwssd(acc, a, b)

#endif
