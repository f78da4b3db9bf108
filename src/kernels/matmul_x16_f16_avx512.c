/* kernels/matmul_x16_f16_avx512 — the x16 layout of f16 weights with AVX-512 (layout and
 * arithmetic: matmul_x16.c). Column k of 16 rows is one vcvtph2ps (the 16 lanes are the 16
 * rows) multiplied by activation k broadcast from memory, so a tile of 2 row groups by up to 12
 * activation rows does 24 FMAs per 2 conversions, and no lane is ever summed: each output is
 * one accumulator, column after column, as the scalar reference. The weights are prefetched
 * 4 KB ahead (PF_DIST).
 */
#include "kernels/matmul_kernels.h"

#include "kernels/simd.h"

#include <immintrin.h>

#define UNROLL16 _Pragma("GCC unroll 16")

enum { F16_TB = 12 };
/* Each group's weights are asked for 4 KB ahead into L1 (one prefetch per 64-byte line): the
 * stream that starts a tile call, and every decode's, waited on memory with the hardware
 * prefetchers alone. 110M F16, same hour, A/B: decode B=1 134-139 -> 177-180 tok/s, B=32
 * 956-995 -> 1144-1168; 1B F16 prefill 151-153 -> 163-164, decode the same. 8 and 16 KB ahead
 * measured less at B=32 (1153-1156, 1102-1137). In decode the last 4 KB of a group ask for the
 * start of the next tile's group of the same index (else each tile call began cold: a 110M
 * group is 24 KB): 110M F16 decode B=1 156.0 -> 163.5 tok/s (medians of 5, interleaved), 1B
 * the same; in prefill it measured no gain. */
enum { PF_DIST = 4096 };

AI void f16x_body(const uint8_t *w, size_t ws, const uint8_t *a, size_t as, int64_t cols, float *y,
                  int64_t ldy, const int NG, const int NB) {
    const size_t gs = 16 * ws;
    const float *x[F16_TB];
    UNROLL16 for (int b = 0; b < NB; b++) x[b] = (const float *)(a + (size_t)b * as);
    __m512 acc[2][F16_TB];
    UNROLL16 for (int g = 0; g < NG; g++) UNROLL16 for (int b = 0; b < NB; b++)
        acc[g][b] = _mm512_setzero_ps();
    for (int64_t k = 0; k < cols; k++) {
        __m512 wv[2];
        if ((k & 1) == 0) { /* 32 bytes per column and group: a line every second column */
            /* decode (1-2 rows: the weights stream once): past its group's end, into the next
             * tile's group of the same index, where this thread goes next */
            const size_t off = (size_t)k * 32 + PF_DIST,
                         skip = NB <= 2 && off >= gs ? (size_t)(NG - 1) * gs : 0;
            UNROLL16 for (int g = 0; g < NG; g++)
                _mm_prefetch((const char *)(w + (size_t)g * gs + off + skip), _MM_HINT_T0);
        }
        UNROLL16 for (int g = 0; g < NG; g++)
            wv[g] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(w + (size_t)g * gs + (size_t)k * 32)));
        UNROLL16 for (int b = 0; b < NB; b++) {
            const __m512 xb = _mm512_set1_ps(x[b][k]);
            UNROLL16 for (int g = 0; g < NG; g++) acc[g][b] = _mm512_fmadd_ps(wv[g], xb, acc[g][b]);
        }
    }
    UNROLL16 for (int g = 0; g < NG; g++) UNROLL16 for (int b = 0; b < NB; b++)
        _mm512_storeu_ps(y + (size_t)b * ldy + 16 * g, acc[g][b]);
}

#define F16X_CASE(G, B)                                                                            \
    case G * 16 + B: f16x_body(w, ws, a, as, cols, y, ldy, G, B); break;
#define F16X_ROW(G)                                                                                \
    F16X_CASE(G, 1) F16X_CASE(G, 2) F16X_CASE(G, 3) F16X_CASE(G, 4) F16X_CASE(G, 5)             \
    F16X_CASE(G, 6) F16X_CASE(G, 7) F16X_CASE(G, 8) F16X_CASE(G, 9) F16X_CASE(G, 10)            \
    F16X_CASE(G, 11) F16X_CASE(G, 12)

static void tile_f16_x16(const uint8_t *w, size_t ws, int nr, const uint8_t *a, size_t as, int nb,
                         int64_t cols, float *y, int64_t ldy) {
    switch ((nr / 16) * 16 + nb) {
        F16X_ROW(1)
        F16X_ROW(2)
    default: break;
    }
}

int pl_mm_kernel_x16_f16_avx512(pl_mm_kernel *k) {
    k->fn = tile_f16_x16;
    k->tr = 32;
    k->tb = F16_TB;
    return 1;
}
