/* kernels/matmul_x16_iq4_xs_avx512 — VNNI tiles for iq4_xs's x16 layout (layout and arithmetic:
 * matmul_x16_iq4_xs.c). A tile is one 16-row group by up to four activation rows; each 64-byte
 * chunk gives two vpdpbusd operands (its nibbles looked up + 128 with vpshufb), a unit's two
 * chains start at its seed (-128 x its activations' sum) and zero, and the unit's sum is
 * multiplied by its scale per lane (vpmulld) into the super-block's. AMX is not used for it.
 */
#include "kernels/matmul_kernels.h"
#include "kernels/quant.h"

#include "kernels/simd.h"
#include "kernels/x16_avx512.h"

#include <immintrin.h>

AI void iq4_xs_body(const uint8_t *w, const uint8_t *a, size_t as, int64_t cols, float *y,
                    int64_t ldy, const int NB) {
    const int64_t nsb = cols / PL_QK_K;
    const __m512i m4 = _mm512_set1_epi8(15);
    const __m512i lut = _mm512_broadcast_i32x4(
        _mm_add_epi8(_mm_loadu_si128((const __m128i *)pl_kvalues_iq4nl), _mm_set1_epi8((char)0x80)));
    const pl_block_q8_K *x[4];
    __m512 acc[4];
    pl_x16_tile_rows(a, as, NB, x, acc);
    for (int64_t s = 0; s < nsb; s++) {
        const uint8_t *o = w + (size_t)s * 16 * 138;
        __m512i S[4];
        UNROLL for (int b = 0; b < NB; b++) S[b] = _mm512_setzero_si512();
        for (int j = 0; j < 8; j++) {
            /* 35 lines: one per chunk (0-31), the three after them with the first steps */
            if (j < 3) pl_x16_prefetch_kq_line(o, 16 * 138, 32 + j);
            __m512i A[4], Bv[4];
            UNROLL for (int b = 0; b < NB; b++) {
                A[b] = _mm512_set1_epi32(-128 * (x[b][s].bsums[2 * j] + x[b][s].bsums[2 * j + 1]));
                Bv[b] = _mm512_setzero_si512();
            }
            UNROLL for (int c = 0; c < 4; c++) {
                pl_x16_prefetch_kq_line(o, 16 * 138, 4 * j + c);
                const __m512i v = _mm512_loadu_si512(o + 160 + 256 * j + 64 * c);
                const __m512i lo = _mm512_shuffle_epi8(lut, _mm512_and_si512(v, m4));
                const __m512i hi = _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(v, 4), m4));
                UNROLL for (int b = 0; b < NB; b++) {
                    const int8_t *q = x[b][s].qs + 32 * j + 4 * c;
                    A[b] = pl_x16_dpbusd_bc(A[b], lo, q);
                    Bv[b] = pl_x16_dpbusd_bc(Bv[b], hi, q + 16);
                }
            }
            const __m512i sc = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(o + 32 + 16 * j)));
            UNROLL for (int b = 0; b < NB; b++)
                S[b] = _mm512_add_epi32(S[b], _mm512_mullo_epi32(_mm512_add_epi32(A[b], Bv[b]), sc));
        }
        const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)o));
        UNROLL for (int b = 0; b < NB; b++)
            acc[b] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(S[b]), _mm512_mul_ps(d, _mm512_set1_ps(x[b][s].d)),
                                     acc[b]);
    }
    UNROLL for (int b = 0; b < NB; b++) _mm512_storeu_ps(y + (size_t)b * ldy, acc[b]);
}

PL_X16_KERNEL_AVX512(pl_mm_kernel_x16_iq4_xs_avx512, iq4_xs_body)
