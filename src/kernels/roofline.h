/* kernels/roofline — this machine's two speed limits, measured (benchmarks, not tests).
 *
 *   memory bandwidth: every thread of the pool streams its share of a buffer much larger than
 *                     the last-level cache with the widest vector loads the ISA has, summing it
 *                     so the loads cannot be dropped; bytes read / time.
 *   peak FLOP/s:      every thread runs independent chains of f32 vector FMAs (enough chains to
 *                     cover the FMA latency on every FMA port); 2 * lanes * FMAs / time.
 *
 * `pagellm bench kernels` prints each kernel's GB/s and GFLOP/s beside these, so the distance to
 * the limit is visible. Both use pl_cpu_isa() (scalar fallback included).
 */
#ifndef PL_KERNELS_ROOFLINE_H
#define PL_KERNELS_ROOFLINE_H

#include "base/threadpool.h"

#include <stddef.h>
#include <stdint.h>

/* Read GB/s with n_threads threads of tp (<= its size) over a buffer of `bytes` (rounded to
 * 4 KiB per thread), best of `reps` passes after one warm-up pass. Negative if out of memory. */
double pl_roofline_read_gbs(pl_threadpool *tp, int n_threads, size_t bytes, int reps);
/* f32 FMA GFLOP/s with n_threads threads, best of `reps` runs of `iters` FMA rounds. */
double pl_roofline_fma_gflops(pl_threadpool *tp, int n_threads, int64_t iters, int reps);

/* int8 dot-product GOP/s (2 ops per multiply-add) with n_threads threads: independent chains of
 * the current level's dot product of 4 bytes per int32 lane (AVX-512 and AVX-VNNI vpdpbusd,
 * AVX2 vpmaddubsw + vpmaddwd + vpaddd, as the int8 tiles of each level); with amx != 0, AMX
 * tdpbsud on 16 x 16 x 64 tiles instead (the int8 kernels use both, kernels/matmul.h). Returns
 * a negative value when the machine (or the current ISA level) has no such instruction
 * (scalar; AMX without AMX or below AVX-512). */
double pl_roofline_int8_gops(pl_threadpool *tp, int n_threads, int64_t iters, int reps, int amx);

/* bf16 dot-product GFLOP/s (2 per multiply-add) with n_threads threads: independent chains of
 * AVX-512 BF16's vdpbf16ps (32 multiply-adds per instruction, twice an f32 FMA's), the peak of
 * bf16 weights' x16 tile and of --f16-weights bf16. Negative below the avx512 level. */
double pl_roofline_bf16_gflops(pl_threadpool *tp, int n_threads, int64_t iters, int reps);

/* Per-ISA inner loops (roofline_avx512.c, roofline_avx2.c, roofline_amx.c). */
/* PL_ROOF_FMA_CHAINS x 64 (avx512) or x 32 (avxvnni), PL_ROOF_INT8_CHAINS_AVX2 x 32 (avx2) MACs
 * per iteration */
int32_t pl_roofline_int8_avx512(int64_t iters, int32_t seed);
int32_t pl_roofline_int8_avxvnni(int64_t iters, int32_t seed);
int32_t pl_roofline_int8_avx2(int64_t iters, int32_t seed);
int32_t pl_roofline_tiles_amx(int64_t iters);                 /* 4 x 16 x 16 x 64 MACs */
float pl_roofline_read_avx512(const float *p, size_t n);
float pl_roofline_fma_avx512(int64_t iters, float seed);
float pl_roofline_bf16_avx512(int64_t iters, float seed); /* PL_ROOF_BF16_CHAINS x 32 MACs */
float pl_roofline_read_avx2(const float *p, size_t n);
float pl_roofline_fma_avx2(int64_t iters, float seed);
/* Independent FMA chains per thread: one iteration does this many vector FMAs (12 covers a
 * 4-cycle latency on 2 FMA pipes with room to spare). */
enum { PL_ROOF_FMA_CHAINS = 12 };
/* AVX2's int8 chains: each needs a product register beside its sum, so fewer than the FMA
 * chains; 10 keep two multiply pipes busy through a chain's vpmaddubsw, vpmaddwd, vpaddd
 * latency (7 cycles on Zen, 11 on Intel cores: 20 multiplies per 11 cycles). */
enum { PL_ROOF_INT8_CHAINS_AVX2 = 10 };
/* vdpbf16ps chains: 24 measured ~10 % above 12 on the Zen 5 EPYC (a longer latency than FMA's) */
enum { PL_ROOF_BF16_CHAINS = 24 };

#endif
