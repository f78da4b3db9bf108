/* kernels/x16_q8_ymm — the 256-bit tiles of the x16 layouts of q8_0, q4_0, iq4_nl and q4_1
 * (issue 35; layouts and arithmetic: matmul_x16.c, matmul_x16_q4_0.c), one skeleton for two kernel
 * levels: included once by matmul_x16_q8_avx2.c with X16_VNNI 0 and once by
 * matmul_x16_avxvnni.c with X16_VNNI 1, each defining X16_KERNEL (the pl_mm_kernel chooser it
 * exports).
 *
 * A 64-byte chunk is two ymm halves (rows 0-7, 8-15). Tiles are 16 rows x up to 4 activations
 * (3: 2 + 1): with one or two activation rows (decode) a block's halves are done one after the
 * other, two integer chains per row (q8_0: even and odd chunks; q4_0, iq4_nl: low and high
 * nibbles); with four (prefill) one half's blocks, then the other's, one chain per row, so that
 * the 4 chains, the 4 float accumulators and the unpacked weights fit 16 registers and each
 * unpacked chunk half serves four rows (1B Q8_0 shapes: AVX2 q8_0 +13-15 % a thread, q4_0
 * +33 %, iq4_nl +17 %; AVX-VNNI +12-24 %, q5_0 and q5_1 +46 %; no stack stores in the block
 * loop, see xq_block). The two levels differ only in how a block's integer sum is formed,
 * and it is exact either way, so both give the scalar tile's bits (test_matmul_x16):
 *  - AVX-VNNI: the AVX-512 VNNI tile's arithmetic, vpdpbusd on the stored unsigned quants (q8_0
 *    q + 128, q4_0 the nibbles, iq4_nl the levels + 128) with the activation's 4 bytes broadcast,
 *    the chains seeded with the activations' seeds, which remove the offsets.
 *  - AVX2: vpmaddubsw would saturate on q + 128 (255 x 127 x 2 > 32767), so q8_0 and iq4_nl take
 *    the signed quants (q8_0: the stored byte ^ 0x80; iq4_nl: the levels themselves) and the
 *    sign trick: |q| (unsigned, <= 128) times sign(q) x (signed, |x| <= 127: activations are
 *    rounded to +-127) into int16 pairs of at most 2 x 128 x 127 = 32512, widened by vpmaddwd
 *    against ones; no seed (the sum is sum q x already). q4_0's and q4_1's nibbles (0..15) enter
 *    vpmaddubsw directly, a block's 8 chunks summed in int16 (at most 8 x 2 x 15 x 127 = 30480),
 *    widened once per block; q4_0's seeded with -8 x the block sum as the scalar tile, q4_1's
 *    not (its minimum is the second FMA below). q4_1 took AVX2's 16 x 2 q5 tile before
 *    (matmul_x16_q5_avx2.c): here its 4-row tiles share each unpacked chunk among 4 rows, one
 *    thread B=32 / B=512 129 / 114 -> 166 / 197 GOP/s (Zen 4, best of 5 interleaved).
 * The float step is the scalar tile's: acc = fma((float)isum, d_w * d_x, acc) (q4_1: then
 * fma(m_w, s_x, acc)), blocks in order.
 */
#ifndef PL_KERNELS_X16_Q8_YMM_H
#define PL_KERNELS_X16_Q8_YMM_H

#include "kernels/matmul_kernels.h"
#include "kernels/matmul_tile.h"
#include "kernels/quant.h"

#include "kernels/simd.h"

#include <immintrin.h>
#include <string.h>

/* acc + w . x, x an activation's 4 bytes broadcast: VNNI's unsigned w (aw unused); AVX2 with
 * S (signed w, aw = |w|) into int32 lanes, else (w unsigned 0..15) into int16 pair sums. */
AI __m256i xq_dot(__m256i acc, __m256i w, __m256i aw, __m256i x, const int S) {
#if X16_VNNI
    (void)aw;
    (void)S;
    return _mm256_dpbusd_avx_epi32(acc, w, x);
#else
    if (S) return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(aw, _mm256_sign_epi8(x, w)),
                                                          _mm256_set1_epi16(1)));
    return _mm256_add_epi16(acc, _mm256_maddubs_epi16(w, x));
#endif
}

#if X16_VNNI
/* The 32 bits at p as 32 bytes, 0xFF where the bit is set (byte i: bit i). */
AI __m256i xq_bits(const uint8_t *p) {
    int32_t m;
    memcpy(&m, p, sizeof m);
    const __m256i idx = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
    const __m256i bit = _mm256_set1_epi64x((int64_t)0x8040201008040201);
    return _mm256_cmpeq_epi8(_mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32(m), idx), bit), bit);
}
#endif

/* Half h (rows 8h..8h + 7) of block k against NB activation rows: acc[b] updated.
 * Q4: 0 q8_0, 1 q4_0, 2 iq4_nl (q4_0's blocks, the nibbles' levels looked up); AVX-VNNI only:
 * 3 q5_0, 4 q4_1, 5 q5_1 (q4_0's and q5_0's with offsets m: q8_1 activations, no seeds; the
 * fifth-bit masks, AVX-512's k-masks, as bytes by vpshufb + vpcmpeqb).
 * Up to 2 activation rows, two integer chains per row (q8_0: even and odd chunks; the others:
 * low and high nibbles); more rows (ONE) take one chain each, so that 4 rows' chains and float
 * accumulators fit the registers beside the unpacked weights (VNNI's q4_0 and q4_1 then take
 * the high nibbles shifted down, not 16 x them; AVX2's q4_0 sums all 8 products of a block in
 * int16: at most 8 x 2 x 15 x 127 = 30480). */
AI void xq_block(const uint8_t *w, const uint8_t *a, size_t as, int64_t cols, int64_t k, int h,
                 __m256 *acc, const int NB, const int Q4) {
    const int64_t nblk = cols / PL_QK;
    const size_t blk = pl_mm_x16_block_bytes(Q4);
    const int NIB = Q4 == 1 || Q4 == 4, FIFTH = Q4 == 3 || Q4 == 5, WITH_M = Q4 >= 4, ONE = NB > 2;
    const int NIB16 = !X16_VNNI && NIB; /* AVX2's nibbles (q4_0, q4_1): int16 sums a block */
    (void)FIFTH; /* AVX2 has no q5_0 / q5_1 tile */
    const size_t hdr = WITH_M ? 64 : 32; /* the chunks follow d (and m) */
    const __m256i m4 = _mm256_set1_epi8(15);
    /* the signed arithmetic (AVX2's q8_0 and iq4_nl) */
    const int S = !X16_VNNI && !NIB;
    const __m128i lv = _mm_loadu_si128((const __m128i *)pl_kvalues_iq4nl);
    const __m128i t = X16_VNNI ? _mm_add_epi8(lv, _mm_set1_epi8((char)0x80)) : lv;
    const __m256i lut = _mm256_set_m128i(t, t);
    const uint8_t *wb = w + (size_t)k * blk;
    const float *dx[4];
    const int32_t *seed[4];
    __m256i s0[4], s1[4];
    UNROLL for (int b = 0; b < NB; b++) {
        dx[b] = (const float *)(a + (size_t)b * as + cols);
        seed[b] = (const int32_t *)(dx[b] + nblk);
        s0[b] = X16_VNNI && !WITH_M ? _mm256_set1_epi32(seed[b][k]) : _mm256_setzero_si256();
        s1[b] = _mm256_setzero_si256();
    }
    UNROLL for (int j = 0; j < 4; j++) {
        const int j0 = Q4 ? j : 2 * j, j1 = Q4 ? j + 4 : 2 * j + 1;
        /* decode streams the weights: the block two ahead into L2, lines j, j + 4, j + 8 */
        if (NB == 1 && h == 0)
            for (int l = j; 64 * (size_t)l < blk; l += 4)
                _mm_prefetch((const char *)wb + 2 * blk + 64 * l, _MM_HINT_T1);
        __m256i w0, w1;
        if (Q4) {
            const __m256i v = _mm256_loadu_si256((const __m256i *)(wb + hdr + 64 * j + 32 * h));
            const __m256i lo = _mm256_and_si256(v, m4);
            /* VNNI's q4_0 and q4_1 take 16 x the high nibbles (one instruction less) */
            const __m256i hi = X16_VNNI && NIB && !ONE ? _mm256_andnot_si256(m4, v)
                                                       : _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
            w0 = Q4 == 2 ? _mm256_shuffle_epi8(lut, lo) : lo;
            w1 = Q4 == 2 ? _mm256_shuffle_epi8(lut, hi) : hi;
#if X16_VNNI
            if (FIFTH) { /* q5_0, q5_1: the nibbles + 16 where the fifth-bit masks say */
                const __m256i c16 = _mm256_set1_epi8(16);
                w0 = _mm256_add_epi8(w0, _mm256_and_si256(xq_bits(wb + hdr + 256 + 8 * j + 4 * h), c16));
                w1 = _mm256_add_epi8(w1, _mm256_and_si256(xq_bits(wb + hdr + 256 + 8 * (j + 4) + 4 * h), c16));
            }
#endif
        } else {
            w0 = _mm256_loadu_si256((const __m256i *)(wb + 32 + 64 * j0 + 32 * h));
            w1 = _mm256_loadu_si256((const __m256i *)(wb + 32 + 64 * j1 + 32 * h));
            if (S) { /* the signed quants */
                w0 = _mm256_xor_si256(w0, _mm256_set1_epi8((char)0x80));
                w1 = _mm256_xor_si256(w1, _mm256_set1_epi8((char)0x80));
            }
        }
        const __m256i aw0 = S ? _mm256_abs_epi8(w0) : w0, aw1 = S ? _mm256_abs_epi8(w1) : w1;
        UNROLL for (int b = 0; b < NB; b++) {
            const int32_t *xq = (const int32_t *)(a + (size_t)b * as + k * PL_QK);
            s0[b] = xq_dot(s0[b], w0, aw0, _mm256_set1_epi32(xq[j0]), S);
            if (!ONE) s1[b] = xq_dot(s1[b], w1, aw1, _mm256_set1_epi32(xq[j1]), S);
        }
        if (ONE)
            UNROLL for (int b = 0; b < NB; b++) {
                const int32_t *xq = (const int32_t *)(a + (size_t)b * as + k * PL_QK);
                s0[b] = xq_dot(s0[b], w1, aw1, _mm256_set1_epi32(xq[j1]), S);
                /* the chain as written: reassociated into a tree, GCC computes all 8 x NB
                 * products first and spills them */
                __asm__("" : "+x"(s0[b]));
            }
    }
    const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(wb + 16 * h)));
    UNROLL for (int b = 0; b < NB; b++) {
        __m256i isum;
        if (ONE) isum = s0[b];
        else if (X16_VNNI) isum = _mm256_add_epi32(s0[b], NIB ? _mm256_srai_epi32(s1[b], 4) : s1[b]);
        else isum = NIB16 ? _mm256_add_epi16(s0[b], s1[b]) : _mm256_add_epi32(s0[b], s1[b]);
        if (NIB16) /* the int16 pair sums of the block, widened (q4_0: and the seed) */
            isum = _mm256_madd_epi16(isum, _mm256_set1_epi16(1));
        if (NIB16 && !WITH_M) isum = _mm256_add_epi32(isum, _mm256_set1_epi32(seed[b][k]));
        /* with a minimum: m_w times q8_1's s_x, after d_x's block sums */
        acc[b] = x16_block_fma(acc[b], isum, dw, dx[b][k], WITH_M ? wb + 32 + 16 * h : NULL,
                               WITH_M ? dx[b][nblk + k] : 0.0f);
    }
}

/* One 16-row group by NB (1..4) activation rows. One row (decode), and two but for AVX2's
 * q4_0 and q4_1, take a block's halves together (decode streams the weights once); more rows,
 * and AVX2's q4_0 and q4_1 with two, do one half's blocks, then the other's (the group is in L2 by then, and
 * in L1 for the 1B shapes' 2048 columns), so that only that half's accumulators are live beside
 * the chains and the unpacked weights serve every row: AVX2's q4_0 x 2 151 -> 185 GOP/s a
 * thread (512 x 2048, B = 64, best of 60); q8_0, iq4_nl and the VNNI tiles x 2 measured no
 * better that way (VNNI 2-3 % worse). Each output sums its blocks in order either way. */
AI void xq_body(const uint8_t *w, const uint8_t *a, size_t as, int64_t cols, float *y, int64_t ldy,
                const int NB, const int Q4) {
    const int64_t nblk = cols / PL_QK;
    const int NIB16 = !X16_VNNI && (Q4 == 1 || Q4 == 4); /* as xq_block's */
    __m256 acc[2][4];
    UNROLL for (int h = 0; h < 2; h++) UNROLL for (int b = 0; b < NB; b++) acc[h][b] = _mm256_setzero_ps();
    if (NB == 1 || (NB == 2 && !NIB16))
        for (int64_t k = 0; k < nblk; k++) UNROLL for (int h = 0; h < 2; h++) xq_block(w, a, as, cols, k, h, acc[h], NB, Q4);
    else
        UNROLL for (int h = 0; h < 2; h++) for (int64_t k = 0; k < nblk; k++) xq_block(w, a, as, cols, k, h, acc[h], NB, Q4);
    UNROLL for (int h = 0; h < 2; h++) UNROLL for (int b = 0; b < NB; b++)
        _mm256_storeu_ps(y + (size_t)b * ldy + 8 * h, acc[h][b]);
}

PL_X16_TILE_NB4(tile_q8_0, xq_body, 0)
PL_X16_TILE_NB4(tile_q4_0, xq_body, 1)
PL_X16_TILE_NB4(tile_iq4_nl, xq_body, 2)
PL_X16_TILE_NB4(tile_q4_1, xq_body, 4)
#if X16_VNNI
PL_X16_TILE_NB4(tile_q5_0, xq_body, 3)
PL_X16_TILE_NB4(tile_q5_1, xq_body, 5)
#endif

int X16_KERNEL(pl_dtype t, pl_mm_kernel *k) {
    k->tr = 16;
    k->tb = 4;
    k->gemm = NULL;
    k->fn = t == PL_DT_Q8_0 ? tile_q8_0 : t == PL_DT_Q4_0 ? tile_q4_0 : t == PL_DT_Q4_1 ? tile_q4_1 : tile_iq4_nl;
#if X16_VNNI
    if (t == PL_DT_Q5_0) k->fn = tile_q5_0;
    if (t == PL_DT_Q5_1) k->fn = tile_q5_1;
    if (t == PL_DT_Q5_0 || t == PL_DT_Q5_1) return 1;
#endif
    return t == PL_DT_Q8_0 || t == PL_DT_Q4_0 || t == PL_DT_Q4_1 || t == PL_DT_IQ4_NL;
}

#endif
