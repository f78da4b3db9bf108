/* cli/bench_kernels — `pagellm bench kernels`: each kernel's GB/s and GFLOP/s beside this
 * machine's measured memory bandwidth and peak FLOP/s (kernels/roofline), so the distance to the
 * limit is visible.
 *
 *   limits : read bandwidth (a 256 MiB buffer streamed with the widest loads) and f32 FMA peak,
 *            for 1 .. --threads threads.
 *   matmul : every weight type at B = 1 on a weight larger than the last-level cache (memory
 *            bound: compare GB/s with the bandwidth), and at B = 32 and B = 512 on a 2048 x 2048
 *            weight (compute bound: compare GFLOP/s with the peak); types with an x16 layout
 *            (kernels/matmul.h) again repacked, with AMX and without where it applies.
 *   attention: decode of 32 sequences with 128-token contexts, and a 512-token prefill, on the
 *            110M Llama shape (12 heads, 4 KV heads, head_dim 64, f16 cache); one decode row
 *            "cold", its K and V evicted before each call, as a model's step reads them.
 *   small ops: RMSNorm, SwiGLU, RoPE on 512 rows of 768 (2048 for SwiGLU).
 *
 * Prints a table, or JSON lines with --json. A measurement, never a test.
 */
#include "cli/flags.h"
#include "base/clock.h"
#include "cli/cli.h"

#include "base/fp16.h"
#include "base/rng.h"
#include "base/threadpool.h"
#include "kernels/attention.h"
#include "kernels/cpu.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "kernels/roofline.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    int json;
    int quick;
    const char *type; /* only this weight type's matmuls, or NULL */
    double bw;    /* GB/s with all threads */
    double peak;  /* GFLOP/s with all threads */
    double vnni;  /* int8 GOP/s with all threads (<= 0: none); quantized matmuls' peak */
    double bf16;  /* vdpbf16ps GFLOP/s with all threads (<= 0: none); bf16 matmuls' peak */
} out_ctx;


/* One result row: GB/s against the bandwidth, GFLOP/s against the peak. */
static void report(const out_ctx *o, const char *kernel, const char *shape, double gbs,
                   double gflops) {
    if (o->json) {
        printf("{\"kernel\":\"%s\",\"shape\":\"%s\",\"gb_s\":%.2f,\"gflop_s\":%.2f,"
               "\"bw_frac\":%.3f,\"peak_frac\":%.3f}\n",
               kernel, shape, gbs, gflops, gbs / o->bw, gflops / o->peak);
        return;
    }
    printf("%-22s %-26s %9.1f %6.0f%% %10.1f %6.0f%%\n", kernel, shape, gbs, 100 * gbs / o->bw,
           gflops, 100 * gflops / o->peak);
}

static void bench_limits(pl_threadpool *tp, out_ctx *o) {
    int n = pl_threadpool_size(tp);
    if (!o->json) printf("# machine limits (isa %s)\n", pl_isa_name(pl_cpu_isa()));
    for (int t = 1; t <= n; t++) {
        double bw = pl_roofline_read_gbs(tp, t, (size_t)256 << 20, o->quick ? 2 : 5);
        double pk = pl_roofline_fma_gflops(tp, t, o->quick ? 2000000 : 20000000, 3);
        double vnni = pl_roofline_int8_gops(tp, t, o->quick ? 2000000 : 20000000, 3, 0);
        double amx = pl_roofline_int8_gops(tp, t, o->quick ? 2000000 : 20000000, 3, 1);
        double bf = pl_roofline_bf16_gflops(tp, t, o->quick ? 2000000 : 20000000, 3);
        if (o->json)
            printf("{\"limit\":\"machine\",\"threads\":%d,\"read_gb_s\":%.2f,\"fma_gflop_s\":%.2f,"
                   "\"vnni_gop_s\":%.2f,\"amx_gop_s\":%.2f,\"bf16_gflop_s\":%.2f}\n", t, bw, pk,
                   vnni, amx, bf);
        else
            printf("threads %-3d read bandwidth %8.1f GB/s   f32 FMA peak %8.1f GFLOP/s   "
                   "int8 %8.1f GOP/s   AMX %8.1f GOP/s   bf16 %8.1f GFLOP/s (negative: none)\n",
                   t, bw, pk, vnni, amx, bf);
        if (t == n) {
            o->bw = bw;
            o->peak = pk;
            o->vnni = vnni;
            o->bf16 = bf;
        }
    }
    if (!o->json)
        printf("\n(quantized matmuls: GOP/s of integer dot products, of the int8 peak; bf16: of the "
               "vdpbf16ps peak where the level has it)\n"
               "%-22s %-26s %9s %7s %10s %7s\n", "kernel", "shape", "GB/s", "of bw", "GFLOP/s",
               "of peak");
}

static void bench_matmuls(pl_threadpool *tp, const out_ctx *o) {
    static const pl_dtype types[] = {PL_DT_F32,  PL_DT_F16,  PL_DT_BF16,   PL_DT_Q8_0, PL_DT_Q4_0,
                                     PL_DT_Q4_K, PL_DT_Q5_K,  PL_DT_Q6_K,  PL_DT_Q4_1, PL_DT_Q5_0,
                                     PL_DT_Q5_1, PL_DT_IQ4_NL, PL_DT_Q2_K, PL_DT_Q3_K, PL_DT_IQ4_XS,
                                     PL_DT_MXFP4};
    const int64_t cols = 2048;
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        pl_dtype t = types[i];
        if (o->type && strcmp(o->type, pl_dtype_name(t))) continue;
        /* GGUF's rows; then the x16 layout the model loader repacks to on AVX-512, with AMX
         * (where the machine has it and the type has an AMX kernel) and without */
        pl_weight probe = {.type = t, .rows = 2048, .cols = cols};
        int x16 = pl_matmul_repack_wanted(t) && pl_matmul_repack_size(&probe) > 0;
        int amx = pl_cpu_amx() && t != PL_DT_F16;
        out_ctx oi = *o; /* integer types: GOP/s, against the int8 peak */
        if (t != PL_DT_F32 && t != PL_DT_F16 && t != PL_DT_BF16 && o->vnni > 0) oi.peak = o->vnni;
        if (t == PL_DT_BF16 && o->bf16 > 0) oi.peak = o->bf16; /* vdpbf16ps: rows and x16 */
        for (int v = 0; v < (x16 ? (amx ? 3 : 2) : 1); v++) {
            char name[64], shape[64];
            snprintf(name, sizeof name, "matmul %s%s", pl_dtype_name(t),
                     v == 0 ? "" : v == 1 ? (amx ? " x16 amx" : " x16") : " x16 vnni");
            pl_wlayout lay = v ? PL_WLAYOUT_X16 : PL_WLAYOUT_ROWS;
            if (v == 2) pl_cpu_force_amx(0);
            /* B = 1: a weight of ~128 MiB (4x the L3 of most CPUs) streams from memory */
            int64_t rows = ((int64_t)(o->quick ? 64 : 128) << 20) / (int64_t)pl_dtype_row_size(t, cols);
            rows &= ~(int64_t)63;
            double gf = 0, gbs = pl_matmul_bench(tp, t, rows, cols, 1, o->quick ? 3 : 10, lay, &gf);
            snprintf(shape, sizeof shape, "%lldx%lld B=1", (long long)rows, (long long)cols);
            report(&oi, name, shape, gbs, gf);
            static const int64_t Bs[] = {32, 512};
            for (int k = 0; k < 2; k++) {
                int iters = Bs[k] == 512 ? (o->quick ? 1 : 3) : (o->quick ? 5 : 20);
                gbs = pl_matmul_bench(tp, t, 2048, cols, Bs[k], iters, lay, &gf);
                snprintf(shape, sizeof shape, "2048x%lld B=%lld", (long long)cols, (long long)Bs[k]);
                report(&oi, name, shape, gbs, gf);
            }
            pl_cpu_force_amx(-1);
        }
    }
}

/* Plain stores over buf (memset's streaming stores for large sizes would leave the caches as
 * they were): whatever was cached before is evicted. */
static void evict_caches(char *buf, size_t bytes, int salt) {
    volatile char *b = buf;
    for (size_t i = 0; i < bytes; i += 64) b[i] = (char)(salt + (int)i);
}

/* Paged attention on a random cache of type kv: n_seqs sequences with ctx tokens each, q_len
 * queries per sequence (1 = decode). GB/s counts the K and V bytes each sequence reads once.
 * cold: before each timed call, 64 MiB are written (untimed) so that K and V come from memory,
 * as in a model's step, where the weights' stream evicts them; otherwise a small cache stays
 * in L2 or L3 between the repetitions and the row overstates what a step sees. */
static void bench_attention(pl_threadpool *tp, const out_ctx *o, int32_t n_seqs, int32_t ctx,
                            int32_t q_len, const char *name, pl_dtype kv, int cold) {
    const int32_t n_heads = 12, n_kv = 4, hd = 64, bs = 16;
    const int32_t max_blocks = (ctx + bs - 1) / bs;
    pl_kv_layout l = {.dtype = kv, .block_size = bs, .n_kv_heads = n_kv, .head_dim = hd,
                      .num_blocks = (int64_t)n_seqs * max_blocks};
    size_t cache_bytes = pl_kv_block_bytes(&l) * (size_t)l.num_blocks;
    int32_t n_tok = n_seqs * q_len;
    void *kc = malloc(cache_bytes), *vc = malloc(cache_bytes);
    float *rows = malloc((size_t)2 * n_kv * hd * sizeof(float));
    float *q = malloc((size_t)n_tok * n_heads * hd * sizeof(float));
    float *out = malloc((size_t)n_tok * n_heads * hd * sizeof(float));
    int32_t *btab = malloc((size_t)n_seqs * max_blocks * sizeof(int32_t));
    int32_t *seq_start = malloc((size_t)(n_seqs + 1) * sizeof(int32_t));
    int32_t *ctxl = malloc((size_t)n_seqs * sizeof(int32_t));
    if (kc && vc && q && out && btab && seq_start && ctxl && rows) {
        pl_rng rng;
        pl_rng_seed(&rng, 7);
        for (int64_t slot = 0; slot < l.num_blocks * bs; slot++) { /* through the slot write */
            for (int32_t i = 0; i < 2 * n_kv * hd; i++) rows[i] = (float)pl_rng_normal(&rng);
            pl_kv_write(&l, kc, vc, rows, rows + n_kv * hd, &slot, 1);
        }
        for (int64_t i = 0; i < (int64_t)n_tok * n_heads * hd; i++) q[i] = (float)pl_rng_normal(&rng);
        for (int32_t i = 0; i < n_seqs * max_blocks; i++) btab[i] = i; /* shuffled below */
        for (int32_t i = n_seqs * max_blocks - 1; i > 0; i--) {
            int32_t j = (int32_t)pl_rng_below(&rng, (uint64_t)i + 1), t = btab[i];
            btab[i] = btab[j];
            btab[j] = t;
        }
        for (int32_t i = 0; i <= n_seqs; i++) seq_start[i] = i * q_len;
        for (int32_t i = 0; i < n_seqs; i++) ctxl[i] = ctx;
        pl_attn_args a = {.q = q, .out = out, .n_heads = n_heads, .scale = 0.125f,
                          .n_seqs = n_seqs, .seq_start = seq_start, .context_lens = ctxl,
                          .block_tables = btab, .max_blocks = max_blocks, .k_cache = kc,
                          .v_cache = vc};
        pl_paged_attention(tp, &l, &a);
        int iters = q_len > 1 ? 3 : cold ? (o->quick ? 5 : 20) : 50;
        const size_t evict_bytes = (size_t)64 << 20;
        char *evict = cold ? malloc(evict_bytes) : NULL;
        double dt = 0;
        for (int it = 0; it < iters; it++) {
            if (evict) evict_caches(evict, evict_bytes, it);
            double t0 = pl_clock_now();
            pl_paged_attention(tp, &l, &a);
            dt += pl_clock_now() - t0;
        }
        dt /= iters;
        free(evict);
        double bytes = 2.0 * n_seqs * ctx * n_kv * (double)pl_kv_row_bytes(&l);
        /* each query row r of q_len attends to ctx - q_len + r + 1 positions */
        double pairs = 0;
        for (int32_t r = 0; r < q_len; r++) pairs += ctx - q_len + r + 1;
        double flops = 4.0 * n_seqs * n_heads * hd * pairs;
        char shape[64];
        snprintf(shape, sizeof shape, "%d seqs ctx %d q %d %s%s", n_seqs, ctx, q_len,
                 pl_dtype_name(kv), cold ? " cold" : "");
        report(o, name, shape, bytes / dt / 1e9, flops / dt / 1e9);
    }
    free(kc);
    free(vc);
    free(rows);
    free(q);
    free(out);
    free(btab);
    free(seq_start);
    free(ctxl);
}

static void bench_ops(pl_threadpool *tp, const out_ctx *o) {
    const int64_t n = 512, dim = 768, ffn = 2048;
    float *x = malloc((size_t)(n * ffn) * sizeof(float)), *y = malloc((size_t)(n * ffn) * sizeof(float));
    float *w = malloc((size_t)dim * sizeof(float)), *cs = malloc((size_t)n * 64 * sizeof(float));
    int32_t *pos = malloc((size_t)n * sizeof(int32_t));
    if (x && y && w && cs && pos) {
        pl_rng rng;
        pl_rng_seed(&rng, 3);
        for (int64_t i = 0; i < n * ffn; i++) x[i] = y[i] = (float)pl_rng_normal(&rng);
        for (int64_t i = 0; i < dim; i++) w[i] = 1.0f + 0.1f * (float)pl_rng_normal(&rng);
        for (int64_t i = 0; i < n; i++) pos[i] = (int32_t)i;
        pl_rope_params rp = {.mode = PL_ROPE_NORM, .n_rot = 64, .freq_base = 10000.0f,
                             .freq_scale = 1.0f};
        pl_rope_cache(&rp, pos, n, cs);
        const int iters = 50;
        double t0 = pl_clock_now();
        for (int i = 0; i < iters; i++) pl_rmsnorm(tp, y, x, w, n, dim, 1e-5f);
        double dt = (pl_clock_now() - t0) / iters;
        report(o, "rmsnorm", "512x768", 8.0 * n * dim / dt / 1e9, 4.0 * n * dim / dt / 1e9);
        t0 = pl_clock_now();
        for (int i = 0; i < iters; i++) pl_swiglu(tp, y, x, n, ffn);
        dt = (pl_clock_now() - t0) / iters;
        report(o, "swiglu", "512x2048", 12.0 * n * ffn / dt / 1e9, 6.0 * n * ffn / dt / 1e9);
        for (int64_t i = 0; i < n * dim; i++) y[i] = x[i];
        t0 = pl_clock_now();
        for (int i = 0; i < iters; i++) pl_rope_apply(&rp, cs, y, n, 12, 64);
        dt = (pl_clock_now() - t0) / iters;
        report(o, "rope", "512x12x64", 8.0 * n * dim / dt / 1e9, 3.0 * n * dim / dt / 1e9);
    }
    free(x);
    free(y);
    free(w);
    free(cs);
    free(pos);
}

typedef struct {
    int32_t threads;
    const char *only;
    out_ctx out;
} kernels_opts;

static const pl_flag KERNELS_FLAGS[] = {
    PL_FLAG_ROW_I32(kernels_opts, "threads", 't', threads, 1, 512, "N",
     "pool size (default: one per physical core allowed)"),
    PL_FLAG_ROW_SET(kernels_opts, "json", 'j', out.json,
     "one JSON object per line instead of the table"),
    PL_FLAG_ROW_SET(kernels_opts, "quick", 'q', out.quick,
     "fewer and smaller repetitions (noisier)"),
    PL_FLAG_ROW_STR(kernels_opts, "only", 'o', only, "WHAT",
     "limits | matmul | attention | ops (the limits always run)"),
    PL_FLAG_ROW_STR(kernels_opts, "type", 'y', out.type, "T",
     "only the matmuls of weight type T (f32, f16, bf16, q8_0,\n"
     "q4_0, q4_K, q5_K, q6_K, q4_1, q5_0, q5_1, iq4_nl, q2_K,\n"
     "q3_K, iq4_xs, mxfp4)"),
};

static const pl_flag_cmd KERNELS = {
    "bench kernels",
    "usage: pagellm bench kernels [--threads N] [--json] [--quick] [--only WHAT] [--type T]\n",
    NULL, KERNELS_FLAGS, sizeof KERNELS_FLAGS / sizeof KERNELS_FLAGS[0], -1, 0};

int pl_bench_kernels(int argc, char **argv) {
    kernels_opts ko = {0};
    int first, rc = pl_flags_parse(&KERNELS, argc, argv, &ko, &first);
    if (rc) return rc == PL_FLAGS_HELP ? 0 : rc;
    const char *only = ko.only;
    out_ctx o = ko.out;
    int32_t threads = ko.threads;
    if (only && strcmp(only, "limits") && strcmp(only, "matmul") && strcmp(only, "attention") &&
        strcmp(only, "ops")) {
        fprintf(stderr, "pagellm bench kernels: --only: '%s' is not limits, matmul, attention "
                        "or ops\n", only);
        return 2;
    }
    pl_threadpool *tp = pl_threadpool_create((int)threads);
    if (!tp) return pl_cli_fail("bench kernels", "could not create the thread pool");
    bench_limits(tp, &o);
    if (!only || !strcmp(only, "matmul")) bench_matmuls(tp, &o);
    if (!only || !strcmp(only, "attention")) {
        bench_attention(tp, &o, 1, 512, 1, "attention decode", PL_DT_F16, 0);
        bench_attention(tp, &o, 32, 128, 1, "attention decode", PL_DT_F16, 0);
        /* as a serving step's decode sees it: K and V from memory (6 MiB here) */
        bench_attention(tp, &o, 8, 768, 1, "attention decode", PL_DT_F16, 1);
        bench_attention(tp, &o, 1, 512, 512, "attention prefill", PL_DT_F16, 0);
        /* the KV cache types at a long context: bytes read per token f16 : q8_0 : q4_0 =
         * 64 : 34 : 18 */
        static const pl_dtype kvs[] = {PL_DT_F16, PL_DT_BF16, PL_DT_Q8_0, PL_DT_Q4_0};
        for (int i = 0; i < 4; i++) bench_attention(tp, &o, 4, 4096, 1, "attention decode", kvs[i], 0);
        for (int i = 0; i < 4; i++)
            bench_attention(tp, &o, 1, 512, 512, "attention prefill", kvs[i], 0);
    }
    if (!only || !strcmp(only, "ops")) bench_ops(tp, &o);
    pl_threadpool_destroy(tp);
    return 0;
}
