/* kernels/x16_kq_ymm — the 256-bit tiles of the super-block x16 layouts, q4_K, q5_K, q6_K, q2_K,
 * q3_K and iq4_xs (issue 35; layouts and arithmetic: matmul_x16_kq.c, matmul_x16_q5_K.c,
 * matmul_x16_q2_K.c, matmul_x16_q3_K.c, matmul_x16_iq4_xs.c), one skeleton for two kernel levels: included once by
 * matmul_x16_kq_avx2.c with X16_VNNI 0 and once by matmul_x16_kq_avxvnni.c with X16_VNNI 1,
 * each defining X16_KERNEL (the pl_mm_kernel chooser it exports).
 *
 * A 64-byte chunk of 16 lanes is two ymm halves of 8 outputs; a tile is one 16-row group by up
 * to four activation rows, done half after half inside each super-block (so a
 * half's integer chains, its scales and the activations' float accumulators fit AVX2's 16
 * registers), the quants unpacked once per chunk half and used for every activation row; with
 * one activation row (decode) q4_K, q5_K and q6_K take both halves at once, each chunk read whole
 * and in order.
 *
 * The integer sums are exact either way, so both levels give the bits of the scalar tile:
 *  - AVX-VNNI (VEX vpdpbusd on ymm): as the AVX-512 tiles, a vpdpbusd chain per unit (q4_K) or
 *    16-column group (q6_K) with the activation's 4 bytes broadcast, times its scale per lane
 *    (vpmulld); mins and q6_K's -32 through vpdpwssd against the activations' pair sums.
 *  - AVX2: vpmaddubsw (unsigned quants x signed activations) into int16 sums that cannot
 *    saturate and are then widened by vpmaddwd against the scale duplicated in both int16
 *    halves of a lane, which multiplies and widens in one instruction: q4_K adds a unit's 8
 *    chunks in int16 (|sum| <= 8 x 2 x 15 x 128 = 30720), q6_K two chunks
 *    (2 x 2 x 63 x 128 = 32256); mins and the -32 with vpmaddwd against the pair sums. q2_K and
 *    iq4_xs: at their functions.
 * The float step is the scalar tile's: acc = fma((float)S, d * dx, acc) (q4_K: then
 * fma((float)-M, dmin * dx, acc)), super-blocks in order.
 */
#ifndef PL_KERNELS_X16_KQ_YMM_H
#define PL_KERNELS_X16_KQ_YMM_H

#include "kernels/matmul_kernels.h"
#include "kernels/matmul_tile.h"
#include "kernels/quant.h"

#include "kernels/simd.h"
#include "kernels/x16_prefetch.h"

#include <immintrin.h>
#include <string.h>

enum { YQ4K_GSZ = 16 * 144, YQ5K_GSZ = 16 * 176, YQ6K_GSZ = 16 * 210, YQ2K_GSZ = 16 * 84, YQ3K_GSZ = 16 * 114, YIQ4XS_GSZ = 16 * 138 };

AI __m256i y_bc32(const void *p) {
    int32_t v;
    memcpy(&v, p, sizeof v);
    return _mm256_set1_epi32(v);
}

AI __m256i y_load(const uint8_t *p) { return _mm256_loadu_si256((const __m256i *)p); }

/* Each int16/int32 chain as written, in its own register: without it GCC's register allocator
 * ends the chunk loop's iterations with a vmovdqa per chain (4-8 a chunk) or, fully unrolled,
 * hoists a part's loads and multiplies ahead of its additions and spills them. Pinned, the
 * chunk loops unroll fully and the AVX2 q4_K tile at 4 activation rows is one load, and, shift,
 * and, 8 broadcasts, 8 vpmaddubsw and 8 vpaddw a chunk half: ~25 % more a thread than the loop
 * unrolled by 4 with the low and high nibbles in two passes that it replaced (Zen 4, bench
 * kernels -t 1, best of 6: B=32 224-235 against 171-189 GOP/s). VNNI's chains were left as
 * they were: unmeasured (no AVX-VNNI CPU here). */
#if X16_VNNI
#define Y_PIN(v) ((void)0)
#else
#define Y_PIN(v) __asm__("" : "+x"(v))
#endif

/* acc + a . b with VNNI's instruction, or AVX2's multiply-add and then add (acc's lanes
 * int32, or int16 for vpmaddubsw's pair sums) */
#if X16_VNNI
#define Y_DOT(vnni, mul, add, acc, a, b) vnni(acc, a, b)
#else
#define Y_DOT(vnni, mul, add, acc, a, b) add(acc, mul(a, b))
#endif

/* acc + a . b on int16 pairs per int32 lane (exact) */
AI __m256i y_dot16(__m256i acc, __m256i a, __m256i b) {
    return Y_DOT(_mm256_dpwssd_avx_epi32, _mm256_madd_epi16, _mm256_add_epi32, acc, a, b);
}

/* The chain of one chunk half, unsigned u by signed s: VNNI int32 sums, AVX2 int16 pair sums. */
AI __m256i y_dot8(__m256i acc, __m256i u, __m256i s) {
    return Y_DOT(_mm256_dpbusd_avx_epi32, _mm256_maddubs_epi16, _mm256_add_epi16, acc, u, s);
}

/* acc + chain x scale per lane (sc: the scale in each lane's low int16, sign-extended; AVX2
 * copies it into the high int16 and multiplies the chain's two int16 sums by it). */
AI __m256i y_scale(__m256i acc, __m256i chain, __m256i sc) {
#if X16_VNNI
    return _mm256_add_epi32(acc, _mm256_mullo_epi32(chain, sc));
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(chain, _mm256_blend_epi16(sc, _mm256_slli_epi32(sc, 16), 0xAA)));
#endif
}

/* The float step of q4_K and q2_K (d at o, dmin at o + 32, f16 per row):
 * acc = fma((float)S, d * dx, acc); acc = fma((float)-M, dmin * dx, acc). */
AI void y_fma_dmin(const uint8_t *o, int h, const pl_block_q8_K *const *x, int64_t s, const __m256i *S,
                   const __m256i *M, __m256 *acc, const int NB) {
    const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(o + 16 * h)));
    const __m256 dmin = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(o + 32 + 16 * h)));
    UNROLL for (int b = 0; b < NB; b++) {
        const __m256 vx = _mm256_set1_ps(x[b][s].d);
        acc[b] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(S[b]), _mm256_mul_ps(d, vx), acc[b]);
        acc[b] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_setzero_si256(), M[b])),
                                 _mm256_mul_ps(dmin, vx), acc[b]);
    }
}

#if !X16_VNNI
enum { Z = 0x80 }; /* a vpshufb index that writes zero */
/* The vpshufb control that puts bytes a, b, c, d of each int32 lane's word in its bytes 0-3. */
AI __m256i y_bytes(int a, int b, int c, int d) {
    const __m256i pat = _mm256_set1_epi32((int)((uint32_t)a | (uint32_t)b << 8 | (uint32_t)c << 16 | (uint32_t)d << 24));
    return _mm256_add_epi8(pat, _mm256_setr_epi32(0, 0x04040404, 0x08080808, 0x0C0C0C0C, 0, 0x04040404, 0x08080808,
                                                  0x0C0C0C0C));
}
#endif

/* Half h (lanes 8h..8h + 7) of q4_K's pair p words: the 24 bits of units 2p, 2p + 1 in each
 * int32 lane (bits 0-5, 6-11 their scales, 12-17, 18-23 their mins; pair 3's in the words' top
 * bytes: matmul_x16_kq.c's layout). VNNI: the scales as int32 lanes, the mins as int16 pairs.
 * AVX2: each scale copied into both int16 halves of a lane (vpmaddwd's widening multiply), the
 * mins as int16 pairs, from two byte shuffles of the word(s) (bytes 0,1,0,1 and 1,2,2,-). */
AI void y_q4_K_scales(const uint8_t *o, int p, int h, __m256i *sa, __m256i *sb, __m256i *m) {
#if X16_VNNI
    const __m256i six = _mm256_set1_epi32(63);
    __m256i v;
    if (p < 3) {
        v = y_load(o + 64 + 64 * p + 32 * h); /* bits 24-31 belong to pair 3: never read */
    } else {
        const __m256i w0 = y_load(o + 64 + 32 * h), w1 = y_load(o + 128 + 32 * h),
                      w2 = y_load(o + 192 + 32 * h);
        v = _mm256_or_si256(_mm256_srli_epi32(w0, 24),
                            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(w1, 16), _mm256_set1_epi32(0xFF00)),
                                            _mm256_and_si256(_mm256_srli_epi32(w2, 8), _mm256_set1_epi32(0xFF0000))));
    }
    *sa = _mm256_and_si256(v, six);
    *sb = _mm256_and_si256(_mm256_srli_epi32(v, 6), six);
    *m = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(v, 12), six),
                         _mm256_and_si256(_mm256_srli_epi32(v, 2), _mm256_set1_epi32(63 << 16)));
#else
    const __m256i six2 = _mm256_set1_epi16(63);
    __m256i W, Mv; /* bytes 0,1,0,1 and 1,2,2,- of each lane's word */
    if (p < 3) {
        const __m256i v = y_load(o + 64 + 64 * p + 32 * h);
        W = _mm256_shuffle_epi8(v, y_bytes(0, 1, 0, 1));
        Mv = _mm256_shuffle_epi8(v, y_bytes(1, 2, 2, Z));
    } else { /* pair 3: byte 3 of the three words */
        const __m256i w0 = y_load(o + 64 + 32 * h), w1 = y_load(o + 128 + 32 * h),
                      w2 = y_load(o + 192 + 32 * h);
        W = _mm256_or_si256(_mm256_shuffle_epi8(w0, y_bytes(3, Z, 3, Z)), _mm256_shuffle_epi8(w1, y_bytes(Z, 3, Z, 3)));
        Mv = _mm256_or_si256(_mm256_shuffle_epi8(w1, y_bytes(3, Z, Z, Z)), _mm256_shuffle_epi8(w2, y_bytes(Z, 3, 3, Z)));
    }
    *sa = _mm256_and_si256(W, six2);
    *sb = _mm256_and_si256(_mm256_srli_epi16(W, 6), six2);
    *m = _mm256_and_si256(_mm256_mulhi_epu16(Mv, _mm256_set1_epi32(1 << 12 | 1 << 30)), six2);
#endif
}

/* acc + chain x the scale copied in both int16 halves of each lane (AVX2), or in int32 (VNNI) */
AI __m256i y_scale2(__m256i acc, __m256i chain, __m256i sc) {
#if X16_VNNI
    return _mm256_add_epi32(acc, _mm256_mullo_epi32(chain, sc));
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(chain, sc));
#endif
}

/* q5_K's fifth bits at bit j of each byte of the line half hv (matmul_x16_q5_K.c's layout)
 * or-ed into the nibbles q (bits 0-3, the rest zero): a 16-bit shift takes bit j to bit 4 (no
 * byte's bit 4 receives its neighbour's), the rest of the byte masked away. */
AI __m256i y_q5_K_fifth(__m256i q, __m256i hv, const int j) {
    const __m256i h = j < 4 ? _mm256_slli_epi16(hv, 4 - j) : j > 4 ? _mm256_srli_epi16(hv, j - 4) : hv;
    return _mm256_or_si256(q, _mm256_and_si256(h, _mm256_set1_epi8(16)));
}

/* Pair p (units 2p, 2p + 1) of y_q4_K_sb: S[h][b], M[h][b] updated. */
AI void y_q4_K_pair(const uint8_t *o, int h0, const int NH, const pl_block_q8_K *const *x, int64_t s,
                    int64_t nsb, __m256i (*S)[4], __m256i (*M)[4], const int NB, const int Q5, const int p) {
    const size_t gsz = Q5 ? YQ5K_GSZ : YQ4K_GSZ;
    const int FLUSH4 = Q5 && !X16_VNNI;
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    /* the first half prefetches the 36 lines as the AVX-512 tile does (q5_K: 44) */
    if (h0 == 0) {
        pl_x16_prefetch_kq_line(o, gsz, 32 + p);
        if (Q5) {
            pl_x16_prefetch_kq_line(o, gsz, 36 + 2 * p);
            pl_x16_prefetch_kq_line(o, gsz, 37 + 2 * p);
        }
    }
    __m256i A[2][4], Bv[2][4];
    UNROLL for (int h = 0; h < NH; h++) UNROLL for (int b = 0; b < NB; b++) A[h][b] = Bv[h][b] = _mm256_setzero_si256();
    _Pragma("GCC unroll 8") for (int c = 0; c < 8; c++) {
        if (h0 == 0) pl_x16_prefetch_kq_line(o, gsz, 8 * p + c);
        UNROLL for (int h = 0; h < NH; h++) {
            const __m256i v = y_load(o + 256 + 64 * (8 * p + c) + 32 * (h0 + h));
            __m256i lo = _mm256_and_si256(v, low4);
#if X16_VNNI
            __m256i hi = Q5 ? _mm256_and_si256(_mm256_srli_epi16(v, 4), low4)
                            : _mm256_andnot_si256(low4, v); /* 16 x the high nibbles */
#else
            __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
#endif
            if (Q5) {
                const __m256i hv = y_load(o + YQ4K_GSZ + 64 * (2 * p + c / 4) + 32 * (h0 + h));
                lo = y_q5_K_fifth(lo, hv, 2 * (c % 4));
                hi = y_q5_K_fifth(hi, hv, 2 * (c % 4) + 1);
            }
            UNROLL for (int b = 0; b < NB; b++) {
                const int8_t *q = x[b][s].qs + 64 * p + 4 * c;
                A[h][b] = y_dot8(A[h][b], lo, y_bc32(q));
                Bv[h][b] = y_dot8(Bv[h][b], hi, y_bc32(q + 32));
                Y_PIN(A[h][b]);
                Y_PIN(Bv[h][b]);
            }
        }
        if (FLUSH4 && c == 3) /* chunks 0-3 into S before their int16 sums could overflow */
            UNROLL for (int h = 0; h < NH; h++) {
                __m256i sa, sb, mv;
                y_q4_K_scales(o, p, h0 + h, &sa, &sb, &mv);
                UNROLL for (int b = 0; b < NB; b++) {
                    S[h][b] = y_scale2(y_scale2(S[h][b], A[h][b], sa), Bv[h][b], sb);
                    A[h][b] = Bv[h][b] = _mm256_setzero_si256();
                }
            }
    }
    UNROLL for (int h = 0; h < NH; h++) {
        __m256i sa, sb, mv;
        y_q4_K_scales(o, p, h0 + h, &sa, &sb, &mv);
        UNROLL for (int b = 0; b < NB; b++) {
#if X16_VNNI
            if (!Q5) Bv[h][b] = _mm256_srai_epi32(Bv[h][b], 4); /* a multiple of 16, |16 x sum| < 2^24 */
#endif
            S[h][b] = y_scale2(y_scale2(S[h][b], A[h][b], sa), Bv[h][b], sb);
            M[h][b] = y_dot16(M[h][b], mv, y_bc32((const int32_t *)(x[b] + nsb) + 4 * s + p));
        }
    }
}

/* Halves h0 .. h0 + NH - 1 of super-block s of a group (o) against NB activation rows
 * (NB x NH <= 2: two activation rows a half at a time, or one row both halves at once, so each
 * 64-byte chunk is read whole, in order): acc[h][b] updated. Q5: q5_K (q4_K's bytes, then the
 * qh chunks: matmul_x16_q5_K.c), whose quants (0..31) fill AVX2's int16 sums in 4 chunks
 * (4 x 2 x 31 x 128 = 31744), so its chains are scaled into S after chunks 3 and 7. */
AI void y_q4_K_sb(const uint8_t *o, int h0, const int NH, const pl_block_q8_K *const *x, int64_t s,
                  int64_t nsb, __m256 (*acc)[4], const int NB, const int Q5) {
    __m256i S[2][4], M[2][4];
    UNROLL for (int h = 0; h < NH; h++) UNROLL for (int b = 0; b < NB; b++) S[h][b] = M[h][b] = _mm256_setzero_si256();
    for (int p = 0; p < 4; p++) y_q4_K_pair(o, h0, NH, x, s, nsb, S, M, NB, Q5, p);
    UNROLL for (int h = 0; h < NH; h++) y_fma_dmin(o, h0 + h, x, s, S[h], M[h], acc[h0 + h], NB);
}

/* q6_K's 16-column group: its four chunks' half h from the three stored ones (X, Y, Z; chunks
 * 0-2 their low 6 bits, chunk 3 their top 2 bits, X's lowest). The top bits are taken in place
 * (andnot) and moved down by 16-bit shifts: with the rest of each byte zero, nothing crosses into
 * the neighbouring byte, so one mask serves all (three fewer registers than a mask per field). */
AI void y_q6_quad(const uint8_t *p, __m256i q[4]) {
    const __m256i m3f = _mm256_set1_epi8(0x3F);
    const __m256i X = y_load(p), Y = y_load(p + 64), Z = y_load(p + 128);
    q[0] = _mm256_and_si256(X, m3f);
    q[1] = _mm256_and_si256(Y, m3f);
    q[2] = _mm256_and_si256(Z, m3f);
    q[3] = _mm256_or_si256(_mm256_srli_epi16(_mm256_andnot_si256(m3f, X), 6),
                           _mm256_or_si256(_mm256_srli_epi16(_mm256_andnot_si256(m3f, Y), 4),
                                           _mm256_srli_epi16(_mm256_andnot_si256(m3f, Z), 2)));
}

/* Of int16 pairs (even, odd group's scale) per lane: the even (E 1) or odd (E 0) one, in the
 * lane's low int16 (sign-extended for VNNI's vpmulld; AVX2's y_scale reads the low int16 only). */
AI __m256i y_pick16(__m256i v, const int E) {
    return E ? _mm256_srai_epi32(_mm256_slli_epi32(v, 16), 16) : _mm256_srai_epi32(v, 16);
}

/* Half h of groups 4p .. 4p + 3's int8 scales as int16 (pa: groups 4p, 4p + 1 as pairs per
 * lane; pb: 4p + 2, 4p + 3). */
AI void y_q6_K_scales16(const uint8_t *o, int p, int h, __m256i *pa, __m256i *pb) {
    *pa = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(o + 32 + 64 * p + 16 * h)));
    *pb = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(o + 64 + 64 * p + 16 * h)));
}

/* Halves h0 .. h0 + NH - 1 (as y_q4_K_sb) of a q6_K super-block. */
AI void y_q6_K_sb(const uint8_t *o, int h0, const int NH, const pl_block_q8_K *const *x, int64_t s,
                  __m256 (*acc)[4], const int NB) {
    __m256i S[2][4], O[2][4];
    UNROLL for (int h = 0; h < NH; h++) UNROLL for (int b = 0; b < NB; b++) S[h][b] = _mm256_setzero_si256();
    for (int p = 0; p < 4; p++) { /* groups 4p .. 4p + 3 (64 columns) */
        __m256i pa[2], pb[2];
        UNROLL for (int h = 0; h < NH; h++) y_q6_K_scales16(o, p, h0 + h, &pa[h], &pb[h]);
        UNROLL for (int g = 0; g < 4; g++) {
            const int k = 4 * p + g;
            if (h0 == 0) { /* the 53 lines, as the AVX-512 tile */
                pl_x16_prefetch_kq_line(o, YQ6K_GSZ, 3 * k);
                pl_x16_prefetch_kq_line(o, YQ6K_GSZ, 3 * k + 1);
                pl_x16_prefetch_kq_line(o, YQ6K_GSZ, 3 * k + 2);
                if (k < 5) pl_x16_prefetch_kq_line(o, YQ6K_GSZ, 48 + k);
            }
            UNROLL for (int h = 0; h < NH; h++) {
#if X16_VNNI
                const __m256i sc = y_pick16(g < 2 ? pa[h] : pb[h], g % 2 == 0);
#else /* the scale in both int16 halves, for y_scale2 */
                const __m256i sc = _mm256_shuffle_epi8(g < 2 ? pa[h] : pb[h], g % 2 == 0 ? y_bytes(0, 1, 0, 1) : y_bytes(2, 3, 2, 3));
#endif
                __m256i q[4];
                y_q6_quad(o + 288 + 192 * k + 32 * (h0 + h), q);
                UNROLL for (int b = 0; b < NB; b++) {
                    const int8_t *xq = x[b][s].qs + 16 * k;
#if X16_VNNI
                    __m256i G = _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), q[0], y_bc32(xq));
                    G = _mm256_dpbusd_avx_epi32(G, q[1], y_bc32(xq + 4));
                    G = _mm256_dpbusd_avx_epi32(G, q[2], y_bc32(xq + 8));
                    G = _mm256_dpbusd_avx_epi32(G, q[3], y_bc32(xq + 12));
                    S[h][b] = y_scale2(S[h][b], G, sc);
#else
                    const __m256i t0 = _mm256_add_epi16(_mm256_maddubs_epi16(q[0], y_bc32(xq)),
                                                        _mm256_maddubs_epi16(q[1], y_bc32(xq + 4)));
                    const __m256i t1 = _mm256_add_epi16(_mm256_maddubs_epi16(q[2], y_bc32(xq + 8)),
                                                        _mm256_maddubs_epi16(q[3], y_bc32(xq + 12)));
                    S[h][b] = y_scale2(y_scale2(S[h][b], t0, sc), t1, sc);
                    /* the chain as written: GCC would reassociate the group's products into a
                     * tree and spill them (prefill x 4: ~13 stack stores a group; +9 % a thread) */
                    Y_PIN(S[h][b]);
#endif
                }
            }
        }
    }
    /* the -32's sums after the groups' chains, the scales read again: not live beside them */
    UNROLL for (int h = 0; h < NH; h++) UNROLL for (int b = 0; b < NB; b++) O[h][b] = _mm256_setzero_si256();
    for (int p = 0; p < 4; p++)
        UNROLL for (int h = 0; h < NH; h++) {
            __m256i pa, pb;
            y_q6_K_scales16(o, p, h0 + h, &pa, &pb);
            UNROLL for (int b = 0; b < NB; b++) {
                O[h][b] = y_dot16(O[h][b], pa, y_bc32(x[b][s].bsums + 4 * p));
                O[h][b] = y_dot16(O[h][b], pb, y_bc32(x[b][s].bsums + 4 * p + 2));
            }
        }
    UNROLL for (int h = 0; h < NH; h++) {
        const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(o + 16 * (h0 + h))));
        UNROLL for (int b = 0; b < NB; b++) {
            const __m256i t = _mm256_sub_epi32(S[h][b], _mm256_slli_epi32(O[h][b], 5));
            acc[h0 + h][b] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(t), _mm256_mul_ps(d, _mm256_set1_ps(x[b][s].d)),
                                             acc[h0 + h][b]);
        }
    }
}

/* Bit c of each byte of the line half hl (q3_K's third bits) moved to bit 2 (a 16-bit shift: no
 * byte's bit 2 receives its neighbour's) and or-ed into q (bits 0-1, the rest zero). */
AI __m256i y_q3_K_third(__m256i q, __m256i hl, const int c) {
    const __m256i h = c < 2 ? _mm256_slli_epi16(hl, 2 - c) : c > 2 ? _mm256_srli_epi16(hl, c - 2) : hl;
    return _mm256_or_si256(q, _mm256_and_si256(h, _mm256_set1_epi8(4)));
}

/* The scale bytes of sub-blocks k, k + 1 of half h as int16 pairs per lane: q2_K's scales (sc)
 * and mins (mn) from nibbles, q3_K's int8 scales (both: they also weigh its -4). */
AI void y_q2_K_scales(const uint8_t *o, int k, int h, __m256i *sc, __m256i *mn, const int Q3) {
    if (Q3) {
        *mn = *sc = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(o + 32 + 16 * k + 16 * h)));
        return;
    }
    const __m256i low4 = _mm256_set1_epi16(0x0F);
    const __m256i pr = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(o + 64 + 16 * k + 16 * h)));
    *sc = _mm256_and_si256(pr, low4);
    *mn = _mm256_and_si256(_mm256_srli_epi16(pr, 4), low4);
}

/* q2_K (matmul_x16_q2_K.c), or q3_K (Q3: matmul_x16_q3_K.c): per half super-block n, chunk c's
 * 2-bit fields j are sub-block 8n + 2j (c < 4) or the next one (c >= 4); a sub-block's chain
 * (four chunks: AVX2's int16 sums <= 4 x 2 x 3 x 128, q3_K's 7) is scaled into S as soon as it
 * ends, so one chain per activation row is live (tiles of up to 4 rows); q3_K's third bits are
 * or-ed in from line (n, j). After the chains, q2_K's mins, or q3_K's -4 as its scales, against
 * the 16-column sums (M): acc = fma((float)S, d dx, acc), fma((float)-M, dmin dx, acc), or
 * acc = fma((float)(S - 4 M), d dx, acc). */
AI void y_q2_K_sb(const uint8_t *o, int h, const pl_block_q8_K *const *x, int64_t s, int64_t nsb,
                  __m256 *acc, const int NB, const int Q3) {
    (void)nsb;
    const size_t gsz = Q3 ? YQ3K_GSZ : YQ2K_GSZ, qs = Q3 ? 288 : 320;
    const int lines = Q3 ? 29 : 21;
    const __m256i three = _mm256_set1_epi8(3);
    __m256i S[4], M[4];
    UNROLL for (int b = 0; b < NB; b++) S[b] = M[b] = _mm256_setzero_si256();
    for (int n = 0; n < 2; n++) {
        UNROLL for (int j = 0; j < 4; j++) { /* sub-blocks k = 8n + 2j, k + 1 */
            if (h == 0) /* the group's 21 lines (q3_K: 29), as the AVX-512 tile */
                for (int l = 4 * n + j; l < lines; l += 8) pl_x16_prefetch_kq_line(o, gsz, l);
            const int k = 8 * n + 2 * j;
            __m256i G[4], hl = _mm256_setzero_si256(), sc, mn;
            if (Q3) hl = y_load(o + 1312 + 64 * (4 * n + j) + 32 * h);
            y_q2_K_scales(o, k, h, &sc, &mn, Q3);
            UNROLL for (int b = 0; b < NB; b++) G[b] = _mm256_setzero_si256();
            UNROLL for (int c = 0; c < 8; c++) {
                /* the chunk read again for each field (from L1), not held: 8 chunks beside the
                 * chains and constants spilled */
                __m256i v = y_load(o + qs + 64 * (8 * n + c) + 32 * h);
                Y_PIN(v);
                __m256i q = _mm256_and_si256(_mm256_srli_epi16(v, 2 * j), three);
                if (Q3) q = y_q3_K_third(q, hl, c);
                UNROLL for (int b = 0; b < NB; b++) {
                    G[b] = y_dot8(G[b], q, y_bc32(x[b][s].qs + 128 * n + 32 * j + 4 * c));
                    Y_PIN(G[b]);
                }
                if (c % 4 == 3) { /* sub-block k + c / 4 ends: its chain times its scale */
                    const __m256i scc = y_pick16(sc, c < 4);
                    UNROLL for (int b = 0; b < NB; b++) {
                        S[b] = y_scale(S[b], G[b], scc);
                        G[b] = _mm256_setzero_si256();
                    }
                }
            }
        }
    }
    /* the mins (q3_K: the -4's weights) after the chains, the scales read again */
    for (int k = 0; k < 16; k += 2) {
        __m256i sc, mn;
        y_q2_K_scales(o, k, h, &sc, &mn, Q3);
        UNROLL for (int b = 0; b < NB; b++) M[b] = y_dot16(M[b], mn, y_bc32(x[b][s].bsums + k));
    }
    if (!Q3) {
        y_fma_dmin(o, h, x, s, S, M, acc, NB);
        return;
    }
    const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(o + 16 * h)));
    UNROLL for (int b = 0; b < NB; b++) {
        const __m256i t = _mm256_sub_epi32(S[b], _mm256_slli_epi32(M[b], 2));
        acc[b] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(t), _mm256_mul_ps(d, _mm256_set1_ps(x[b][s].d)), acc[b]);
    }
}

/* iq4_xs (matmul_x16_iq4_xs.c): unit j's four chunks, nibbles looked up. VNNI as the AVX-512
 * tile (levels + 128 against the seed -128 x the unit's activation sum); AVX2's vpmaddubsw would
 * saturate on levels + 128, so it takes |level| against the activation signed by the level
 * (q8_K's quants are -127..127: the sign never overflows; a pair <= 2 x 127 x 127) and widens
 * each chunk half's pair sums by the scale with vpmaddwd. */
AI void y_iq4_xs_sb(const uint8_t *o, int h, const pl_block_q8_K *const *x, int64_t s, int64_t nsb,
                    __m256 *acc, const int NB) {
    (void)nsb;
    const __m256i m4 = _mm256_set1_epi8(15);
    const __m128i lv = _mm_loadu_si128((const __m128i *)pl_kvalues_iq4nl);
#if X16_VNNI
    const __m128i l8 = _mm_add_epi8(lv, _mm_set1_epi8((char)0x80));
#else
    const __m128i l8 = lv;
#endif
    const __m256i lut = _mm256_set_m128i(l8, l8);
    __m256i S[4];
    UNROLL for (int b = 0; b < NB; b++) S[b] = _mm256_setzero_si256();
    for (int j = 0; j < 8; j++) {
        if (h == 0 && j < 3) pl_x16_prefetch_kq_line(o, YIQ4XS_GSZ, 32 + j); /* 35 lines */
        const __m256i sc = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(o + 32 + 16 * j + 8 * h)));
#if X16_VNNI
        __m256i A[4], Bv[4];
        UNROLL for (int b = 0; b < NB; b++) {
            A[b] = _mm256_set1_epi32(-128 * (x[b][s].bsums[2 * j] + x[b][s].bsums[2 * j + 1]));
            Bv[b] = _mm256_setzero_si256();
        }
#endif
        UNROLL for (int c = 0; c < 4; c++) {
            if (h == 0) pl_x16_prefetch_kq_line(o, YIQ4XS_GSZ, 4 * j + c);
            const __m256i v = y_load(o + 160 + 256 * j + 64 * c + 32 * h);
            const __m256i lo = _mm256_shuffle_epi8(lut, _mm256_and_si256(v, m4));
            const __m256i hi = _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
#if !X16_VNNI
            const __m256i alo = _mm256_abs_epi8(lo), ahi = _mm256_abs_epi8(hi);
#endif
            UNROLL for (int b = 0; b < NB; b++) {
                const int8_t *q = x[b][s].qs + 32 * j + 4 * c;
#if X16_VNNI
                A[b] = _mm256_dpbusd_avx_epi32(A[b], lo, y_bc32(q));
                Bv[b] = _mm256_dpbusd_avx_epi32(Bv[b], hi, y_bc32(q + 16));
#else
                S[b] = y_scale(S[b], _mm256_maddubs_epi16(alo, _mm256_sign_epi8(y_bc32(q), lo)), sc);
                S[b] = y_scale(S[b], _mm256_maddubs_epi16(ahi, _mm256_sign_epi8(y_bc32(q + 16), hi)), sc);
#endif
            }
        }
#if X16_VNNI
        UNROLL for (int b = 0; b < NB; b++) S[b] = y_scale(S[b], _mm256_add_epi32(A[b], Bv[b]), sc);
#endif
    }
    const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(o + 16 * h)));
    UNROLL for (int b = 0; b < NB; b++)
        acc[b] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(S[b]), _mm256_mul_ps(d, _mm256_set1_ps(x[b][s].d)), acc[b]);
}

/* One 16-row group by NB (1-4) activation rows: super-blocks in order, each half after half
 * (KIND: 0 q4_K, 1 q6_K, 2 q2_K, 3 iq4_xs, 4 q5_K, 5 q3_K). */
AI void y_body(const uint8_t *w, const uint8_t *a, size_t as, int64_t cols, float *y, int64_t ldy,
               const int NB, const int KIND) {
    const int64_t nsb = cols / PL_QK_K;
    const pl_block_q8_K *x[4];
    UNROLL for (int b = 0; b < NB; b++) x[b] = (const pl_block_q8_K *)(a + (size_t)b * as);
    __m256 acc[2][4];
    UNROLL for (int h = 0; h < 2; h++) UNROLL for (int b = 0; b < NB; b++) acc[h][b] = _mm256_setzero_ps();
    const int Q5 = KIND == 4, K4 = KIND == 0 || Q5; /* q4_K's tile */
    const size_t k4sz = Q5 ? YQ5K_GSZ : YQ4K_GSZ;
    for (int64_t s = 0; s < nsb; s++) {
        if ((K4 || KIND == 1) && NB == 1) { /* one activation row: both halves at once */
            if (K4) y_q4_K_sb(w + (size_t)s * k4sz, 0, 2, x, s, nsb, acc, 1, Q5);
            else y_q6_K_sb(w + (size_t)s * YQ6K_GSZ, 0, 2, x, s, acc, 1);
            continue;
        }
        UNROLL for (int h = 0; h < 2; h++) {
            if (K4) y_q4_K_sb(w + (size_t)s * k4sz, h, 1, x, s, nsb, acc, NB, Q5);
            else if (KIND == 1) y_q6_K_sb(w + (size_t)s * YQ6K_GSZ, h, 1, x, s, acc, NB);
            else if (KIND == 2 || KIND == 5)
                y_q2_K_sb(w + (size_t)s * (KIND == 5 ? YQ3K_GSZ : YQ2K_GSZ), h, x, s, nsb, acc[h], NB, KIND == 5);
            else y_iq4_xs_sb(w + (size_t)s * YIQ4XS_GSZ, h, x, s, nsb, acc[h], NB);
        }
    }
    UNROLL for (int h = 0; h < 2; h++) UNROLL for (int b = 0; b < NB; b++)
        _mm256_storeu_ps(y + (size_t)b * ldy + 8 * h, acc[h][b]);
}

PL_X16_TILE_NB4(y_tile_q4_K, y_body, 0)
PL_X16_TILE_NB4(y_tile_q6_K, y_body, 1)
PL_X16_TILE_NB4(y_tile_q5_K, y_body, 4)
PL_X16_TILE_NB4(y_tile_q2_K, y_body, 2)
PL_X16_TILE_NB4(y_tile_q3_K, y_body, 5)
PL_X16_TILE_NB4(y_tile_iq4_xs, y_body, 3)

int X16_KERNEL(pl_dtype t, pl_mm_kernel *k) {
    k->tr = 16;
    k->tb = 4;
    k->fn = t == PL_DT_Q4_K    ? y_tile_q4_K
            : t == PL_DT_Q5_K  ? y_tile_q5_K
            : t == PL_DT_Q6_K  ? y_tile_q6_K
            : t == PL_DT_Q2_K  ? y_tile_q2_K
            : t == PL_DT_Q3_K  ? y_tile_q3_K
                               : y_tile_iq4_xs;
    return t == PL_DT_Q4_K || t == PL_DT_Q5_K || t == PL_DT_Q6_K || t == PL_DT_Q2_K || t == PL_DT_Q3_K ||
           t == PL_DT_IQ4_XS;
}

#endif
