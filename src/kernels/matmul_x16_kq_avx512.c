/* kernels/matmul_x16_kq_avx512 — AVX-512 VNNI tiles for the x16 layouts of q4_K, q5_K and q6_K
 * (layouts and arithmetic: matmul_x16_kq.c, matmul_x16_q5_K.c; q5_K is q4_K's tile with each
 * chunk's fifth bits or-ed in). A tile is one 16-row group by up to four
 * activation rows. Quants are unpacked once per chunk (and, shift, or) and used for every
 * activation row (q6_K: four chunks from three stored ones, pl_x16_q6_quad); each unit's (q4_K)
 * or 16-column group's (q6_K) vpdpbusd chain is multiplied
 * by its scales per lane (vpmulld) into the super-block's integer sum; mins (q4_K) and the q6_K
 * offset go through vpdpwssd with the activations' pair sums.
 */
#include "kernels/matmul_kernels.h"
#include "kernels/quant.h"

#include "kernels/simd.h"
#include "kernels/x16_avx512.h"

#include <immintrin.h>

AI __m512i bcast32(const void *p) { return _mm512_set1_epi32(*(const int32_t *)p); }

/* q5_K's fifth bits at bit j of each byte of hv (a line of matmul_x16_q5_K.c's layout) or-ed
 * into the nibbles q (bits 0-3, the rest zero): a 16-bit shift takes bit j to bit 4 (no byte's
 * bit 4 receives its neighbour's), ternary logic q | (h & 16). */
AI __m512i q5_K_fifth(__m512i q, __m512i hv, const int j) {
    const __m512i h = j < 4 ? _mm512_slli_epi16(hv, 4 - j) : j > 4 ? _mm512_srli_epi16(hv, j - 4) : hv;
    return _mm512_ternarylogic_epi32(q, h, _mm512_set1_epi8(16), 0xF8);
}

/* Pair p (units 2p, 2p + 1) of super-block s (o) of q4_K, or of q5_K (Q5: q4_K's bytes, then
 * the qh chunks; matmul_x16_q5_K.c): S[b], M[b] updated. */
AI void q4_K_pair(const uint8_t *o, size_t gsz, const pl_block_q8_K *const *x, const int32_t *const *xs,
                  int64_t s, __m512i *S, __m512i *M, const int NB, const int Q5, const int p) {
    const __m512i low4 = _mm512_set1_epi8(0x0F), high4 = _mm512_set1_epi8((char)0xF0);
    /* 36 lines: one per chunk (0-31), and per part one of the scales (32-35); q5_K's 8 qh lines
     * two per part */
    pl_x16_prefetch_kq_line(o, gsz, 32 + p);
    if (Q5) {
        pl_x16_prefetch_kq_line(o, gsz, 36 + 2 * p);
        pl_x16_prefetch_kq_line(o, gsz, 37 + 2 * p);
    }
    __m512i A[4], Bv[4];
    UNROLL for (int b = 0; b < NB; b++) A[b] = Bv[b] = _mm512_setzero_si512();
    UNROLL for (int c = 0; c < 8; c++) {
        pl_x16_prefetch_kq_line(o, gsz, 8 * p + c);
        const __m512i v = _mm512_loadu_si512(o + 256 + 64 * (8 * p + c));
        __m512i lo = _mm512_and_si512(v, low4);
        __m512i hi = _mm512_and_si512(v, high4); /* q4_K: 16 x the high nibbles */
        if (Q5) {
            const __m512i hv = _mm512_loadu_si512(o + 2304 + 64 * (2 * p + c / 4));
            lo = q5_K_fifth(lo, hv, 2 * (c % 4));
            hi = q5_K_fifth(_mm512_srli_epi16(hi, 4), hv, 2 * (c % 4) + 1);
        }
        UNROLL for (int b = 0; b < NB; b++) {
            const int8_t *q = x[b][s].qs + 64 * p + 4 * c;
            A[b] = pl_x16_dpbusd_bc(A[b], lo, q);
            Bv[b] = pl_x16_dpbusd_bc(Bv[b], hi, q + 32);
        }
    }
    /* |16 x sum| < 2^24: exact, and a multiple of 16, so the shift divides exactly */
    if (!Q5) UNROLL for (int b = 0; b < NB; b++) Bv[b] = _mm512_srai_epi32(Bv[b], 4);
    __m512i scA, scB, mv;
    pl_x16_q4_K_scales(o, p, &scA, &scB, &mv);
    UNROLL for (int b = 0; b < NB; b++) {
        S[b] = _mm512_add_epi32(S[b], _mm512_add_epi32(_mm512_mullo_epi32(A[b], scA),
                                                       _mm512_mullo_epi32(Bv[b], scB)));
        M[b] = _mm512_dpwssd_epi32(M[b], mv, _mm512_set1_epi32(xs[b][4 * s + p]));
    }
}

AI void q4_K_body(const uint8_t *w, const uint8_t *a, size_t as, int64_t cols, float *y,
                  int64_t ldy, const int NB, const int Q5) {
    const int64_t nsb = cols / PL_QK_K;
    const size_t gsz = Q5 ? 16 * 176 : 16 * 144;
    const pl_block_q8_K *x[4];
    const int32_t *xs[4];
    __m512 acc[4];
    pl_x16_tile_rows(a, as, NB, x, acc);
    UNROLL for (int b = 0; b < NB; b++) xs[b] = (const int32_t *)(x[b] + nsb);
    for (int64_t s = 0; s < nsb; s++) {
        const uint8_t *o = w + (size_t)s * gsz;
        __m512i S[4], M[4];
        UNROLL for (int b = 0; b < NB; b++) S[b] = M[b] = _mm512_setzero_si512();
        for (int p = 0; p < 4; p++) q4_K_pair(o, gsz, x, xs, s, S, M, NB, Q5, p);
        UNROLL for (int b = 0; b < NB; b++) acc[b] = pl_x16_sb_fma2(acc[b], S[b], M[b], o, x[b][s].d);
    }
    UNROLL for (int b = 0; b < NB; b++) _mm512_storeu_ps(y + (size_t)b * ldy, acc[b]);
}

AI void q4_K_only(const uint8_t *w, const uint8_t *a, size_t as, int64_t cols, float *y, int64_t ldy,
                  const int NB) {
    q4_K_body(w, a, as, cols, y, ldy, NB, 0);
}

AI void q5_K_only(const uint8_t *w, const uint8_t *a, size_t as, int64_t cols, float *y, int64_t ldy,
                  const int NB) {
    q4_K_body(w, a, as, cols, y, ldy, NB, 1);
}


AI void q6_K_body(const uint8_t *w, const uint8_t *a, size_t as, int64_t cols, float *y,
                  int64_t ldy, const int NB) {
    const int64_t nsb = cols / PL_QK_K;
    const pl_block_q8_K *x[4];
    __m512 acc[4];
    pl_x16_tile_rows(a, as, NB, x, acc);
    for (int64_t s = 0; s < nsb; s++) {
        const uint8_t *o = w + (size_t)s * 16 * 210;
        __m512i S[4], O[4];
        UNROLL for (int b = 0; b < NB; b++) S[b] = O[b] = _mm512_setzero_si512();
        UNROLL for (int p = 0; p < 4; p++) { /* groups 4p .. 4p + 3 (64 columns) */
            const __m512i pa = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(o + 32 + 64 * p)));
            const __m512i pb = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(o + 64 + 64 * p)));
            const __m512i sc[4] = {pl_x16_even16(pa), pl_x16_odd16(pa), pl_x16_even16(pb), pl_x16_odd16(pb)};
            UNROLL for (int g = 0; g < 4; g++) {
                /* 53 lines (3360 bytes from any alignment): three per 16-column group, and the
                 * five after them with the first groups */
                const int k = 4 * p + g;
                pl_x16_prefetch_kq_line(o, 16 * 210, 3 * k);
                pl_x16_prefetch_kq_line(o, 16 * 210, 3 * k + 1);
                pl_x16_prefetch_kq_line(o, 16 * 210, 3 * k + 2);
                if (k < 5) pl_x16_prefetch_kq_line(o, 16 * 210, 48 + k);
                __m512i q[4];
                pl_x16_q6_quad(o + 288 + 192 * (4 * p + g), q);
                UNROLL for (int b = 0; b < NB; b++) {
                    const int8_t *xq = x[b][s].qs + 16 * (4 * p + g);
                    __m512i G = pl_x16_dpbusd_bc(_mm512_setzero_si512(), q[0], xq);
                    G = pl_x16_dpbusd_bc(G, q[1], xq + 4);
                    G = pl_x16_dpbusd_bc(G, q[2], xq + 8);
                    G = pl_x16_dpbusd_bc(G, q[3], xq + 12);
                    S[b] = _mm512_add_epi32(S[b], _mm512_mullo_epi32(G, sc[g]));
                }
            }
            UNROLL for (int b = 0; b < NB; b++) {
                O[b] = _mm512_dpwssd_epi32(O[b], pa, bcast32(x[b][s].bsums + 4 * p));
                O[b] = _mm512_dpwssd_epi32(O[b], pb, bcast32(x[b][s].bsums + 4 * p + 2));
            }
        }
        const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)o));
        UNROLL for (int b = 0; b < NB; b++) {
            const __m512i t = _mm512_sub_epi32(S[b], _mm512_slli_epi32(O[b], 5));
            acc[b] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t), _mm512_mul_ps(d, _mm512_set1_ps(x[b][s].d)),
                                     acc[b]);
        }
    }
    UNROLL for (int b = 0; b < NB; b++) _mm512_storeu_ps(y + (size_t)b * ldy, acc[b]);
}

PL_X16_TILE_NB(tile_q4_K_x16, q4_K_only)
PL_X16_TILE_NB(tile_q6_K_x16, q6_K_body)

void pl_mm_x16_q6_K_tile_avx512(const uint8_t *w, size_t ws, int nr, const uint8_t *a, size_t as,
                                int nb, int64_t cols, float *y, int64_t ldy) {
    tile_q6_K_x16(w, ws, nr, a, as, nb, cols, y, ldy);
}

void pl_mm_x16_q4_K_tile_avx512(const uint8_t *w, size_t ws, int nr, const uint8_t *a, size_t as,
                                int nb, int64_t cols, float *y, int64_t ldy) {
    tile_q4_K_x16(w, ws, nr, a, as, nb, cols, y, ldy);
}

PL_X16_KERNEL_AVX512(pl_mm_kernel_x16_q5_K_avx512, q5_K_only)

int pl_mm_kernel_x16_kq_avx512(pl_dtype t, pl_mm_kernel *k) {
    k->tr = 16;
    k->tb = 4;
    k->fn = t == PL_DT_Q4_K ? tile_q4_K_x16 : tile_q6_K_x16;
    return t == PL_DT_Q4_K || t == PL_DT_Q6_K;
}
