/* kernels/x16_avx512 — AVX-512 helpers shared by the x16 kernels of the K-quants and iq4_xs
 * (included only by files compiled for AVX-512: matmul_x16_kq_avx512.c, matmul_x16_kq_amx.c,
 * matmul_x16_iq4_xs_avx512.c, matmul_x16_q2_K_avx512.c). */
#ifndef PL_KERNELS_X16_AVX512_H
#define PL_KERNELS_X16_AVX512_H

#include "kernels/quant.h"
#include "kernels/simd.h"
#include "kernels/x16_prefetch.h"

#include <immintrin.h>

/* A tile's NB activation rows (q8_K, as bytes apart) and their float sums, zeroed. */
AI void pl_x16_tile_rows(const uint8_t *a, size_t as, const int NB, const pl_block_q8_K *x[4],
                         __m512 acc[4]) {
    UNROLL for (int b = 0; b < NB; b++) {
        x[b] = (const pl_block_q8_K *)(a + (size_t)b * as);
        acc[b] = _mm512_setzero_ps();
    }
}

/* q6_K's x16 layout: the four chunks of one 16-column group (chunk j: columns 4j..4j + 3 of the
 * group, 16 lanes x 4 bytes) from its three stored chunks X, Y, Z (p): chunks 0-2 are their low
 * 6 bits, chunk 3 their top 2 bits (X's the lowest). 9 vector operations for 4 chunks. */
AI void pl_x16_q6_quad(const uint8_t *p, __m512i q[4]) {
    const __m512i m3f = _mm512_set1_epi8(0x3F);
    const __m512i X = _mm512_loadu_si512(p), Y = _mm512_loadu_si512(p + 64),
                  Z = _mm512_loadu_si512(p + 128);
    q[0] = _mm512_and_si512(X, m3f);
    q[1] = _mm512_and_si512(Y, m3f);
    q[2] = _mm512_and_si512(Z, m3f);
    /* 16-bit shifts put each byte's top 2 bits in place (bits 0-1, 2-3, 4-5); what a high byte
     * pushes into its low neighbour lands above them and is selected or masked away
     * (ternary logic 0xCA: a ? b : c) */
    const __m512i r = _mm512_ternarylogic_epi32(_mm512_set1_epi8(0x03), _mm512_srli_epi16(X, 6),
                                                _mm512_srli_epi16(Y, 4), 0xCA);
    q[3] = _mm512_and_si512(_mm512_ternarylogic_epi32(_mm512_set1_epi8(0x0F), r,
                                                      _mm512_srli_epi16(Z, 2), 0xCA), m3f);
}

/* Low and high int16 of each int32 lane as int32 (the even and odd 16-column scales of q6_K and
 * q3_K). */
AI __m512i pl_x16_even16(__m512i v) { return _mm512_srai_epi32(_mm512_slli_epi32(v, 16), 16); }
AI __m512i pl_x16_odd16(__m512i v) { return _mm512_srai_epi32(v, 16); }

/* acc + vpdpbusd(q, the 4 bytes at p broadcast) with the broadcast folded into the instruction
 * ({1to16}): GCC emits a separate vpbroadcastd per call otherwise. */
AI __m512i pl_x16_dpbusd_bc(__m512i acc, __m512i q, const void *p) {
    __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(q), "m"(*(const int32_t *)p));
    return acc;
}

/* q4_K's x16 layout (matmul_x16_kq.c): of units 2p and 2p + 1, the 16 lanes' 6-bit scales (int32
 * lanes) and mins (int16 pairs, for vpdpwssd), from the 24-bit words at o + 64. */
AI void pl_x16_q4_K_scales(const uint8_t *o, int p, __m512i *sc_a, __m512i *sc_b, __m512i *m) {
    __m512i v;
    if (p < 3) {
        v = _mm512_loadu_si512(o + 64 + 64 * p); /* bits 24-31 belong to pair 3: never read */
    } else {
        const __m512i w0 = _mm512_loadu_si512(o + 64), w1 = _mm512_loadu_si512(o + 128),
                      w2 = _mm512_loadu_si512(o + 192);
        v = _mm512_or_si512(_mm512_srli_epi32(w0, 24),
                            _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(w1, 16), _mm512_set1_epi32(0xFF00)),
                                            _mm512_and_si512(_mm512_srli_epi32(w2, 8), _mm512_set1_epi32(0xFF0000))));
    }
    const __m512i six = _mm512_set1_epi32(63);
    *sc_a = _mm512_and_si512(v, six);
    *sc_b = _mm512_and_si512(_mm512_srli_epi32(v, 6), six);
    *m = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(v, 12), six),
                         _mm512_and_si512(_mm512_srli_epi32(v, 2), _mm512_set1_epi32(63 << 16)));
}

/* The float step of a super-block with a scale and a min (q4_K, q2_K): acc + S * (d * dx), then
 * + (-M) * (dmin * dx), d and dmin the 16 rows' f16 at o and o + 32. */
AI __m512 pl_x16_sb_fma2(__m512 acc, __m512i S, __m512i M, const uint8_t *o, float dx) {
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)o));
    const __m512 dmin = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(o + 32)));
    const __m512 vx = _mm512_set1_ps(dx);
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(S), _mm512_mul_ps(d, vx), acc);
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_setzero_si512(), M)),
                           _mm512_mul_ps(dmin, vx), acc);
}

/* A tile of one 16-row group by nb (1-4) activation rows: body(w, a, as, cols, y, ldy, NB) with
 * NB a constant. */
#define PL_X16_TILE_NB(name, body)                                                                        \
    static void name(const uint8_t *w, size_t ws, int nr, const uint8_t *a, size_t as, int nb,     \
                     int64_t cols, float *y, int64_t ldy) {                                        \
        (void)ws;                                                                                  \
        (void)nr;                                                                                  \
        switch (nb) {                                                                              \
        case 1: body(w, a, as, cols, y, ldy, 1); break;                                            \
        case 2: body(w, a, as, cols, y, ldy, 2); break;                                            \
        case 3: body(w, a, as, cols, y, ldy, 3); break;                                            \
        case 4: body(w, a, as, cols, y, ldy, 4); break;                                            \
        default: break;                                                                            \
        }                                                                                          \
    }

/* An x16 body's tile (16-row groups by up to four activation rows) and the kernel function that
 * selects it. */
#define PL_X16_KERNEL_AVX512(kernel, body)                                                         \
    PL_X16_TILE_NB(kernel##_tile, body)                                                            \
    void kernel(pl_mm_kernel *k) {                                                                 \
        k->fn = kernel##_tile;                                                                     \
        k->tr = 16;                                                                                \
        k->tb = 4;                                                                                 \
    }

#endif
