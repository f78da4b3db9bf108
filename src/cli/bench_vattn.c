/* cli/bench_vattn — `pagellm bench vattn`: the costs under kv-layout vattention (issue 12).
 *
 *   map       : map, first touch and unmap of one physical page, per page size (4K, 64K, 2M
 *               where the system has huge pages) and per backend (memfd: mmap MAP_FIXED |
 *               MAP_SHARED of a memfd page, unmap = PROT_NONE mapping + hole punch; anon:
 *               mprotect + madvise(MADV_DONTNEED) on anonymous memory). Both backends run in
 *               the same repetition loop, interleaved, so a shared machine's load hits both.
 *   attention: the PagedAttention paper's Figure 18a: decode attention latency over context
 *               length and batch size, the paged kernel (16-token blocks shuffled over the pool)
 *               against the contiguous kernel (kernels/attention_contig.h) reading each
 *               sequence's head-major tensor in vattention slots of 4K or 64K mapped pages of
 *               the real page pool (a region per K/V and KV head, as the engine makes them),
 *               same KV dtype (f16), interleaved.
 *
 * One JSON object per line. A measurement, never a test.
 */
#include "cli/flags.h"
#include "cli/cli.h"

#include "base/clock.h"
#include "base/rng.h"
#include "base/threadpool.h"
#include "kernels/attention.h"
#include "kernels/attention_contig.h"
#include "kv/vattn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *C = "bench vattn";

/* Lines of /proc/self/maps: the process's VMAs (the kernel allows vm.max_map_count of them). */
static int count_mappings(void) {
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f) return -1;
    int n = 0, ch;
    while ((ch = fgetc(f)) != EOF) n += ch == '\n';
    fclose(f);
    return n;
}

/* One repetition of the map benchmark: map n rows of 1 page (2 regions: K and V of one layer),
 * touch each page, unmap them all. Times in ns per page into t[0..2], the process's mappings
 * while they are mapped into t[3]. */
static int map_once(size_t page, pl_vattn_backend b, int32_t n, double t[4]) {
    pl_vattn_config c = {.page_size = page, .n_regions = 2, .n_slots = 1, .rows_per_slot = n,
                         .tokens_per_row = 1, .phys_rows = n, .backend = b,
                         .reclaim_threshold = 0.1};
    pl_vattn *va;
    if (pl_vattn_create(&c, &va) != PL_OK) return -1;
    int32_t s = pl_vattn_acquire(va);
    pl_vattn_set_need(va, s, n);
    double t0 = pl_clock_now();
    pl_status st = pl_vattn_prepare_step(va);
    double t1 = pl_clock_now();
    char *base = pl_vattn_base(va);
    size_t sb = pl_vattn_slot_bytes(va);
    for (int32_t r = 0; r < 2; r++) /* first touch: the kernel commits (and zeroes) the page */
        for (int32_t j = 0; j < n; j++)
            for (size_t off = 0; off < page; off += 4096) base[(size_t)r * sb + (size_t)j * page + off] = 1;
    double t2 = pl_clock_now();
    t[3] = (double)count_mappings();
    pl_vattn_release(va, s); /* no deferred reclamation: unmaps every row */
    double t3 = pl_clock_now();
    pl_vattn_destroy(va);
    if (st != PL_OK) return -1;
    double pages = 2.0 * n;
    t[0] = (t1 - t0) * 1e9 / pages;
    t[1] = (t2 - t1) * 1e9 / pages;
    t[2] = (t3 - t2) * 1e9 / pages;
    return 0;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void bench_map(int reps) {
    static const size_t sizes[] = {4096, 65536, 2u << 20};
    static const char *names[] = {"memfd", "anon"};
    for (int si = 0; si < 3; si++) {
        size_t page = sizes[si];
        int32_t n = page >= (2u << 20) ? 16 : page >= 65536 ? 256 : 1024;
        double *v = calloc((size_t)reps * 6, sizeof *v), vmas[2] = {0, 0};
        int ok[2] = {1, 1}, base_vmas = count_mappings();
        if (!v) return;
        for (int r = 0; r < reps; r++)
            for (int b = 0; b < 2; b++) { /* interleaved: memfd, anon, memfd, ... */
                double t[4];
                if (!ok[b] || map_once(page, (pl_vattn_backend)b, n, t) != 0) {
                    if (ok[b]) fprintf(stderr, "%s: %s %zu: %s\n", C, names[b], page, pl_last_error());
                    ok[b] = 0;
                    continue;
                }
                for (int k = 0; k < 3; k++) v[((size_t)b * 3 + k) * reps + r] = t[k];
                vmas[b] = t[3] - base_vmas;
            }
        for (int b = 0; b < 2; b++) {
            if (!ok[b]) {
                printf("{\"bench\":\"vattn\",\"part\":\"map\",\"page\":%zu,\"backend\":\"%s\","
                       "\"error\":\"unavailable on this system\"}\n", page, names[b]);
                continue;
            }
            double med[3];
            for (int k = 0; k < 3; k++) {
                double *x = v + ((size_t)b * 3 + k) * reps;
                qsort(x, (size_t)reps, sizeof *x, cmp_d);
                med[k] = x[reps / 2];
            }
            printf("{\"bench\":\"vattn\",\"part\":\"map\",\"page\":%zu,\"backend\":\"%s\","
                   "\"pages\":%d,\"reps\":%d,\"map_ns\":%.0f,\"touch_ns\":%.0f,\"unmap_ns\":%.0f,"
                   "\"map_touch_unmap_ns\":%.0f,\"extra_vmas\":%.0f}\n", page, names[b], 2 * n, reps,
                   med[0], med[1], med[2], med[0] + med[1] + med[2], vmas[b]);
        }
        free(v);
    }
    fflush(stdout);
}

/* Decode attention of n_seqs sequences at context ctx, 110M Llama shape (12 heads, 4 KV heads,
 * head_dim 64, f16 KV in both): the paged kernel over 16-token blocks shuffled in the pool
 * (vattn = 0), or the contiguous kernel over each sequence's head-major tensor in vattention
 * slots of `page`-byte pages of the real page pool (vattn = 1); each is set up once and timed
 * `iters` times. */
typedef struct {
    pl_kv_layout l;
    void *kc, *vc, *own_k, *own_v;
    pl_vattn *va;
    int32_t *btab, max_blocks;
    const void *seq_k[64], *seq_v[64];
    size_t head_stride, token_stride;
} attn_case;

enum { NH = 12, NKV = 4, HD = 64, MAX_SEQS = 64 };

static int case_init(attn_case *c, int vattn, size_t page, int32_t n_seqs, int32_t ctx) {
    memset(c, 0, sizeof *c);
    c->l = (pl_kv_layout){.dtype = PL_DT_F16, .block_size = 16, .n_kv_heads = NKV, .head_dim = HD};
    pl_rng rng;
    pl_rng_seed(&rng, 11);
    pl_kv_layout wl = c->l; /* the order writes follow: paged blocks, or one-token rows */
    if (!vattn) {
        c->max_blocks = (ctx + 15) / 16;
        c->l.num_blocks = (int64_t)n_seqs * c->max_blocks;
        size_t bytes = pl_kv_block_bytes(&c->l) * (size_t)c->l.num_blocks;
        c->kc = c->own_k = malloc(bytes);
        c->vc = c->own_v = malloc(bytes);
        c->btab = malloc((size_t)c->l.num_blocks * sizeof *c->btab);
        if (!c->kc || !c->vc || !c->btab) return -1;
        for (int32_t i = 0; i < c->l.num_blocks; i++) c->btab[i] = i;
        for (int32_t i = (int32_t)c->l.num_blocks - 1; i > 0; i--) { /* scattered, as in use */
            int32_t j = (int32_t)pl_rng_below(&rng, (uint64_t)i + 1), t = c->btab[i];
            c->btab[i] = c->btab[j];
            c->btab[j] = t;
        }
        wl = c->l;
    } else { /* a region per K/V and KV head, as the engine makes them (kv/cache.c) */
        const size_t rb = (size_t)HD * 2;
        int32_t tpr = (int32_t)(page / rb);
        c->max_blocks = (ctx + tpr - 1) / tpr;
        c->l.block_size = tpr;
        c->l.num_blocks = (int64_t)n_seqs * c->max_blocks;
        pl_vattn_config vc = {.page_size = page, .n_regions = 2 * NKV, .n_slots = n_seqs,
                              .rows_per_slot = c->max_blocks, .tokens_per_row = tpr,
                              .phys_rows = (int64_t)n_seqs * c->max_blocks,
                              .backend = PL_VATTN_ANON, .reclaim_threshold = 0.1};
        if (pl_vattn_create(&vc, &c->va) != PL_OK) return -1;
        for (int32_t s = 0; s < n_seqs; s++) pl_vattn_set_need(c->va, pl_vattn_acquire(c->va), ctx);
        if (pl_vattn_prepare_step(c->va) != PL_OK) return -1;
        const size_t sb = pl_vattn_slot_bytes(c->va);
        c->kc = pl_vattn_base(c->va);
        c->vc = (char *)c->kc + (size_t)NKV * n_seqs * sb;
        for (int32_t s = 0; s < n_seqs; s++) { /* slot s's tensors: no table from here on */
            c->seq_k[s] = (const char *)c->kc + (size_t)s * sb;
            c->seq_v[s] = (const char *)c->vc + (size_t)s * sb;
        }
        c->head_stride = (size_t)n_seqs * sb; /* from one KV head's region to the next */
        c->token_stride = rb;
        wl.block_size = (int32_t)(c->l.num_blocks * tpr); /* head-major: one block of all slots */
        wl.num_blocks = 1;
    }
    float rows[2 * NKV * HD];
    for (int32_t s = 0; s < n_seqs; s++)
        for (int32_t p = 0; p < ctx; p++) {
            int64_t slot = vattn ? ((int64_t)s * c->max_blocks * c->l.block_size + p)
                                 : (int64_t)c->btab[s * c->max_blocks + p / 16] * 16 + p % 16;
            for (int32_t i = 0; i < 2 * NKV * HD; i++) rows[i] = (float)pl_rng_normal(&rng);
            pl_kv_write(&wl, c->kc, c->vc, rows, rows + NKV * HD, &slot, 1);
        }
    return 0;
}

static void case_destroy(attn_case *c) {
    free(c->own_k);
    free(c->own_v);
    free(c->btab);
    pl_vattn_destroy(c->va);
}

static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Seconds per call: wall clock, and the process's CPU time into *cpu (what a loaded machine's
 * other processes move least: time spent descheduled is not counted). */
static double case_time(pl_threadpool *tp, attn_case *c, const float *q, float *out, int32_t n_seqs,
                        int32_t ctx, int iters, double *cpu) {
    int32_t seq_start[MAX_SEQS + 1], ctxl[MAX_SEQS];
    for (int32_t i = 0; i <= n_seqs; i++) seq_start[i] = i;
    for (int32_t i = 0; i < n_seqs; i++) ctxl[i] = ctx;
    pl_attn_args a = {.q = q, .out = out, .n_heads = NH, .scale = 0.125f, .n_seqs = n_seqs,
                      .seq_start = seq_start, .context_lens = ctxl, .block_tables = c->btab,
                      .max_blocks = c->max_blocks, .k_cache = c->kc, .v_cache = c->vc};
    pl_contig_attn_args ca = {.q = q, .out = out, .n_heads = NH, .scale = 0.125f,
                              .n_seqs = n_seqs, .seq_start = seq_start, .context_lens = ctxl,
                              .k = c->seq_k, .v = c->seq_v, .head_stride = c->head_stride,
                              .token_stride = c->token_stride};
    double t0 = pl_clock_now(), c0 = cpu_now();
    for (int it = 0; it < iters; it++) {
        if (c->va) pl_contig_attention(tp, &c->l, &ca);
        else pl_paged_attention(tp, &c->l, &a);
    }
    *cpu = (cpu_now() - c0) / iters;
    return (pl_clock_now() - t0) / iters;
}

static void bench_attention(pl_threadpool *tp, int reps, int32_t n_seqs) {
    static const int32_t ctxs[] = {128, 512, 1024, 2048, 4096};
    static const size_t pages[] = {4096, 65536};
    float *q = malloc((size_t)n_seqs * NH * HD * sizeof *q), *out = malloc((size_t)n_seqs * NH * HD * sizeof *out);
    if (!q || !out) goto done;
    for (int32_t i = 0; i < n_seqs * NH * HD; i++) q[i] = (float)((i * 7919) % 997) / 997.0f - 0.5f;
    for (size_t ci = 0; ci < sizeof ctxs / sizeof ctxs[0]; ci++) {
        int32_t ctx = ctxs[ci];
        attn_case cs[3];
        int ok = case_init(&cs[0], 0, 0, n_seqs, ctx) == 0;
        for (int k = 0; k < 2 && ok; k++) ok = case_init(&cs[1 + k], 1, pages[k], n_seqs, ctx) == 0;
        if (!ok) {
            fprintf(stderr, "%s: attention ctx %d: %s\n", C, ctx, pl_last_error());
            break;
        }
        /* about the same work per repetition whatever the batch */
        int iters = (ctx >= 2048 ? 80 : 320) / n_seqs;
        if (iters < 2) iters = 2;
        double *t = calloc((size_t)reps * 6, sizeof *t), cpu; /* [wall, cpu][case][rep] */
        if (!t) break;
        for (int k = 0; k < 3; k++) case_time(tp, &cs[k], q, out, n_seqs, ctx, 2, &cpu); /* warm */
        for (int r = 0; r < reps; r++)
            for (int k = 0; k < 3; k++) {
                t[k * reps + r] = case_time(tp, &cs[k], q, out, n_seqs, ctx, iters, &cpu);
                t[(3 + k) * reps + r] = cpu;
            }
        double med[6];
        for (int k = 0; k < 6; k++) {
            qsort(t + k * reps, (size_t)reps, sizeof *t, cmp_d);
            med[k] = t[k * reps + reps / 2];
        }
        printf("{\"bench\":\"vattn\",\"part\":\"attention\",\"seqs\":%d,\"ctx\":%d,\"reps\":%d,"
               "\"paged_bs16_us\":%.1f,\"contig_4k_us\":%.1f,\"contig_64k_us\":%.1f,"
               "\"paged_bs16_cpu_us\":%.1f,\"contig_4k_cpu_us\":%.1f,\"contig_64k_cpu_us\":%.1f,"
               "\"paged_over_contig_4k_cpu\":%.3f,\"paged_over_contig_64k_cpu\":%.3f}\n", n_seqs,
               ctx, reps, med[0] * 1e6, med[1] * 1e6, med[2] * 1e6, med[3] * 1e6, med[4] * 1e6,
               med[5] * 1e6, med[3] / med[4], med[3] / med[5]);
        fflush(stdout);
        free(t);
        for (int k = 0; k < 3; k++) case_destroy(&cs[k]);
    }
done:
    free(q);
    free(out);
}

typedef struct {
    int32_t reps, threads;
    const char *only, *seqs;
} vattn_opts;

static const pl_flag VATTN_FLAGS[] = {
    PL_FLAG_ROW_STR(vattn_opts, "only", 0, only, "map|attention",
     "map: map / first touch / unmap ns per page, per page size\n"
     "and backend; attention: decode attention latency over\n"
     "context length, for each batch size of --seqs: paged\n"
     "kernel vs contiguous kernel"),
    PL_FLAG_ROW_I32(vattn_opts, "reps", 'r', reps, 1, 1000, "N", "repetitions (7)"),
    PL_FLAG_ROW_STR(vattn_opts, "seqs", 0, seqs, "N[,N...]", "attention batch sizes, 1..64 (8)"),
    PL_FLAG_ROW_I32(vattn_opts, "threads", 't', threads, 1, 512, "N",
     "worker threads (default: one per physical core allowed)"),
};

static const pl_flag_cmd VATTN = {
    "bench vattn",
    "usage: pagellm bench vattn [--only map|attention] [--reps N] [--seqs N[,N...]] "
    "[--threads N]\n",
    NULL, VATTN_FLAGS, sizeof VATTN_FLAGS / sizeof VATTN_FLAGS[0], -1, 0};

int pl_bench_vattn(int argc, char **argv) {
    vattn_opts vo = {.reps = 7, .seqs = "8"};
    int first, rc = pl_flags_parse(&VATTN, argc, argv, &vo, &first);
    if (rc) return rc == PL_FLAGS_HELP ? 0 : rc;
    const char *only = vo.only, *seqs = vo.seqs;
    int32_t reps = vo.reps, threads = vo.threads;
    if (only && strcmp(only, "map") && strcmp(only, "attention")) {
        fprintf(stderr, "pagellm %s: --only: '%s' is not map or attention\n", C, only);
        return 2;
    }
    int32_t batch[MAX_SEQS];
    int n_batch = 0;
    for (const char *p = seqs; n_batch == 0 || *p;) { /* "1,8,32": checked before any run */
        char *end;
        long n = strtol(p, &end, 10);
        if (end == p || n < 1 || n > MAX_SEQS || (*end && (*end != ',' || !end[1])) ||
            n_batch == MAX_SEQS) {
            fprintf(stderr, "pagellm %s: --seqs: '%s' is not a list of at most %d batch sizes "
                    "in 1..%d\n", C, seqs, MAX_SEQS, MAX_SEQS);
            return 2;
        }
        batch[n_batch++] = (int32_t)n;
        p = *end ? end + 1 : end;
    }
    if (!only || !strcmp(only, "map")) bench_map((int)reps);
    if (!only || !strcmp(only, "attention")) {
        pl_threadpool *tp = pl_threadpool_create((int)threads);
        if (!tp) return pl_cli_fail(C, "cannot start threads");
        for (int i = 0; i < n_batch; i++) bench_attention(tp, (int)reps, batch[i]);
        pl_threadpool_destroy(tp);
    }
    return 0;
}
