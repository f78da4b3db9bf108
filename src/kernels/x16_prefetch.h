/* kernels/x16_prefetch — the software prefetch of the x16 K-quant tiles, the same for every
 * vector width (included by x16_avx512.h and x16_kq_ymm.h; SSE's prefetch only). */
#ifndef PL_KERNELS_X16_PREFETCH_H
#define PL_KERNELS_X16_PREFETCH_H

#include "kernels/simd.h"

#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>

/* Line l of the super-block two ahead of o (group bytes gsz) into L2, and of the bytes
 * PL_X16_PF_FAR ahead into L3. The hardware prefetchers alone leave the K-quant tiles at ~70 % of
 * the read bandwidth when the weights stream from DRAM (their vector work per byte, ~3x q8_0's,
 * keeps fewer loads in flight); the near prefetch gives ~87 %, both ~95 % (docs/BENCHMARKS.md,
 * issue 22). The tiles call it once per line, spread among their loads (one or two per chunk),
 * not a part's lines in a burst: 1B Q4_K_M decode 40.3 -> 43.1 tok/s, q2_K and iq4_xs +4-8 %.
 * Past the thread's last super-block they read what the other thread will (or nothing: a
 * prefetch does not fault). */
enum { PL_X16_PF_FAR = 36 * 1024 };
AI void pl_x16_prefetch_line(const uint8_t *o, size_t gsz, int l) {
    _mm_prefetch((const char *)o + 2 * gsz + 64 * l, _MM_HINT_T1);
    _mm_prefetch((const char *)o + PL_X16_PF_FAR + 64 * l, _MM_HINT_T2);
}

/* The K-quant tiles' (q4_K, q6_K, q2_K, iq4_xs): pl_x16_prefetch_line, or where
 * pl_x16_prefetch_l1 is set (AMD from Zen 5, family 0x1a: kernels/cpu.c; PAGELLM_PREFETCH=l1 or
 * l2l3 overrides) one prefetch of line l PL_X16_PF_L1 bytes ahead into L1. On a Zen 5
 * (2026-11-27, docs/BENCHMARKS.md) a thread's q4_K tile streamed 32 GB/s with the two levels and
 * 40 with the one (the plain read: 42), q6_K 34 -> 39. On a Zen 4 (2026-11-28) the one level lost:
 * 1B Q4_K_M decode at B = 1 38-47 tok/s against 43-53 with the two, four interleaved pairs. The q8_0 tile does the same 4 KB ahead (x16_body: 8 KB measured less); the
 * 4-bit ones (mxfp4, q4_0, q4_1, q5_0, q5_1, iq4_nl) lost with either: they take 2 KB ahead
 * into L1 beside the far one into L3 (their near one, two ~300-byte blocks ahead, cost more than
 * it gave: a thread's mxfp4 25-27.5 -> 31-34 GB/s, q4_1, q5_0, q5_1, iq4_nl +11-14 %, q4_0 the
 * same). */
extern int pl_x16_prefetch_l1;
enum { PL_X16_PF_L1 = 8 * 1024 };
AI void pl_x16_prefetch_kq_line(const uint8_t *o, size_t gsz, int l) {
    if (pl_x16_prefetch_l1)
        _mm_prefetch((const char *)o + PL_X16_PF_L1 + 64 * l, _MM_HINT_T0);
    else
        pl_x16_prefetch_line(o, gsz, l);
}

/* The same for the q8_0 and 4-bit tiles (x16_body; blk: one block's bytes of the group), as
 * said above: q8 one prefetch 4 KB ahead into L1, the 4-bit ones 2 KB into L1 and the far one. */
AI void pl_x16_prefetch_blk_line(const uint8_t *o, size_t blk, int l, int q8) {
    if (!pl_x16_prefetch_l1) {
        pl_x16_prefetch_line(o, blk, l);
        return;
    }
    _mm_prefetch((const char *)o + (q8 ? 4096 : 2048) + 64 * l, _MM_HINT_T0);
    if (!q8) _mm_prefetch((const char *)o + PL_X16_PF_FAR + 64 * l, _MM_HINT_T2);
}

#endif
