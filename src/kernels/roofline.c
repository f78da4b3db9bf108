/* kernels/roofline — see roofline.h. */
#include "kernels/roofline.h"
#include "base/buf.h"
#include "base/clock.h"

#include "kernels/cpu.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>


typedef struct {
    const float *buf;
    size_t per_thread;   /* floats each thread reads */
    int64_t iters;
    float sink[64];      /* results, so nothing is optimised away */
} roof_job;

static float read_part(const float *p, size_t n) {
    switch (pl_cpu_isa()) {
    case PL_ISA_AVX512: return pl_roofline_read_avx512(p, n);
    case PL_ISA_AVXVNNI:
    case PL_ISA_AVX2: return pl_roofline_read_avx2(p, n);
    case PL_ISA_SCALAR: break;
    }
    float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (size_t i = 0; i + 4 <= n; i += 4) {
        s0 += p[i];
        s1 += p[i + 1];
        s2 += p[i + 2];
        s3 += p[i + 3];
    }
    return s0 + s1 + s2 + s3;
}

static void read_job(void *ctx, int ith, int nth) {
    (void)nth;
    roof_job *j = ctx;
    j->sink[ith & 63] += read_part(j->buf + (size_t)ith * j->per_thread, j->per_thread);
}

double pl_roofline_read_gbs(pl_threadpool *tp, int n_threads, size_t bytes, int reps) {
    if (n_threads < 1) n_threads = 1;
    if (n_threads > pl_threadpool_size(tp)) n_threads = pl_threadpool_size(tp);
    size_t per = (bytes / (size_t)n_threads + 4095) & ~(size_t)4095;
    size_t total = per * (size_t)n_threads;
    float *buf = pl_alloc_stream(total); /* as the weights: huge pages where the system gives them */
    if (!buf) return -1.0;
    for (size_t i = 0; i < total / sizeof(float); i++) buf[i] = (float)(i & 7);
    roof_job j = {.buf = buf, .per_thread = per / sizeof(float)};
    double best = 0;
    for (int r = 0; r <= reps; r++) {
        double t0 = pl_clock_now();
        pl_threadpool_run_n(tp, n_threads, read_job, &j);
        double gbs = (double)total / (pl_clock_now() - t0) / 1e9;
        if (r > 0 && gbs > best) best = gbs; /* pass 0 warms the pages and the threads */
    }
    free(buf);
    return best;
}

static float fma_part(int64_t iters, float seed) {
    switch (pl_cpu_isa()) {
    case PL_ISA_AVX512: return pl_roofline_fma_avx512(iters, seed);
    case PL_ISA_AVXVNNI:
    case PL_ISA_AVX2: return pl_roofline_fma_avx2(iters, seed);
    case PL_ISA_SCALAR: break;
    }
    float a[PL_ROOF_FMA_CHAINS];
    for (int k = 0; k < PL_ROOF_FMA_CHAINS; k++) a[k] = seed + (float)k;
    for (int64_t i = 0; i < iters; i++)
        for (int k = 0; k < PL_ROOF_FMA_CHAINS; k++) a[k] = a[k] * 0.999999f + 1e-7f;
    float s = 0;
    for (int k = 0; k < PL_ROOF_FMA_CHAINS; k++) s += a[k];
    return s;
}

static void fma_job(void *ctx, int ith, int nth) {
    (void)nth;
    roof_job *j = ctx;
    j->sink[ith & 63] += fma_part(j->iters, (float)ith);
}

/* Best GFLOP/s of `reps` runs of job on n_threads threads of tp (after a warm-up run), each
 * thread doing `flops` of work (a run's flops: that times the threads). */
static double best_gflops(pl_threadpool *tp, int n_threads, void (*job)(void *, int, int),
                          int64_t iters, int reps, double flops) {
    if (n_threads < 1) n_threads = 1;
    if (n_threads > pl_threadpool_size(tp)) n_threads = pl_threadpool_size(tp);
    roof_job j = {.iters = iters};
    double best = 0;
    for (int r = 0; r <= reps; r++) {
        double t0 = pl_clock_now();
        pl_threadpool_run_n(tp, n_threads, job, &j);
        double dt = pl_clock_now() - t0;
        if (r > 0 && flops * n_threads / dt / 1e9 > best) best = flops * n_threads / dt / 1e9;
    }
    return best;
}

double pl_roofline_fma_gflops(pl_threadpool *tp, int n_threads, int64_t iters, int reps) {
    const int lanes = pl_cpu_isa() >= PL_ISA_AVX512 ? 16 : pl_cpu_isa() >= PL_ISA_AVX2 ? 8 : 1; /* fma_part's */
    return best_gflops(tp, n_threads, fma_job, iters, reps, 2.0 * lanes * PL_ROOF_FMA_CHAINS * (double)iters);
}

static void bf16_job(void *ctx, int ith, int nth) {
    (void)nth;
    roof_job *j = ctx;
    j->sink[ith & 63] += pl_roofline_bf16_avx512(j->iters, (float)ith);
}

double pl_roofline_bf16_gflops(pl_threadpool *tp, int n_threads, int64_t iters, int reps) {
    if (!pl_cpu_avx512bf16()) return -1;
    return best_gflops(tp, n_threads, bf16_job, iters, reps, 2.0 * 32 * PL_ROOF_BF16_CHAINS * (double)iters);
}

typedef struct {
    int64_t iters;
    int amx;
    volatile uint32_t sink[64]; /* unsigned: the results wrap */
} int8_job;

static void int8_part(void *ctx, int ith, int nth) {
    (void)nth;
    int8_job *j = ctx;
    pl_isa isa = pl_cpu_isa();
    j->sink[ith & 63] += (uint32_t)(j->amx                   ? pl_roofline_tiles_amx(j->iters)
                                    : isa >= PL_ISA_AVX512  ? pl_roofline_int8_avx512(j->iters, ith)
                                    : pl_cpu_avxvnni()       ? pl_roofline_int8_avxvnni(j->iters, ith)
                                                            : pl_roofline_int8_avx2(j->iters, ith));
}

double pl_roofline_int8_gops(pl_threadpool *tp, int n_threads, int64_t iters, int reps, int amx) {
    if (pl_cpu_isa() < PL_ISA_AVX2 || (amx && (pl_cpu_isa() < PL_ISA_AVX512 || !pl_cpu_amx()))) return -1;
    if (n_threads < 1) n_threads = 1;
    if (n_threads > pl_threadpool_size(tp)) n_threads = pl_threadpool_size(tp);
    /* multiply-adds per iteration: AMX 4 tiles of 16 x 16 outputs over K = 32 (the kernels'
     * 32-byte activation tiles); else the chains' vectors of 64 bytes (AVX-512) or 32 */
    const double macs = amx ? 4.0 * 16 * 16 * 32
                      : pl_cpu_isa() >= PL_ISA_AVX512  ? (double)PL_ROOF_FMA_CHAINS * 64
                      : pl_cpu_avxvnni() ? (double)PL_ROOF_FMA_CHAINS * 32
                                                       : (double)PL_ROOF_INT8_CHAINS_AVX2 * 32;
    if (amx) iters /= 8;
    int8_job j = {.iters = iters, .amx = amx};
    double best = 0;
    for (int r = 0; r <= reps; r++) {
        double t0 = pl_clock_now();
        pl_threadpool_run_n(tp, n_threads, int8_part, &j);
        double dt = pl_clock_now() - t0;
        double gops = 2.0 * macs * (double)iters * n_threads / dt / 1e9;
        if (r > 0 && gops > best) best = gops;
    }
    return best;
}
