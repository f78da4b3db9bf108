/* cli/bench_preempt — `pagellm bench preempt`: what preempting one KV block costs, by swapping
 * and by recomputing, at each block size (the PagedAttention paper's Figure 19a).
 *
 * For each block size B, a sequence of --context L tokens (L a multiple of B: L / B blocks) is
 * held in a paged store of L / B blocks, with a swap store of the same size:
 *   swap out   copy every block to the swap store (pl_kv_store_copy with the list of pairs, as
 *              the engine's runner applies a step's swaps: per block and layer, one K and one V
 *              copy), time / blocks;
 *   swap in    the same back;
 *   recompute  the prefill of the L tokens through the real forward pass (what a recompute
 *              preemption pays to rebuild them), time / blocks.
 * The round trip is checked: after out and in, the primary store holds the same bytes as before
 * (a mismatch fails the command). Every repetition runs every block size in turn (interleaved,
 * so a noisy machine's slow moment hits all sizes alike); one JSON line per block size with the
 * median and the spread (min, max) over the repetitions, per block and per token. --clock cpu
 * times on this thread's CPU time instead of the wall clock (with -t 1 the forward pass runs on
 * it): a shared machine's other load then does not stretch the figures. */
#include "cli/args.h"
#include "cli/flags.h"
#include "base/buf.h"
#include "base/clock.h"
#include "base/rng.h"
#include "base/threadpool.h"
#include "cli/cli.h"
#include "kernels/cpu.h"
#include "kv/kv_store.h"
#include "model/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *C = "bench preempt";

enum { MAX_SIZES = 16, MAX_REPS = 101 };

typedef struct {
    const char *model;
    int32_t *sizes;
    int n_sizes;
    int32_t context, reps, threads;
    int cpu_clock;
} pp_opts;

static int set_sizes(const char *cmd, const pl_flag *f, const char *arg, void *opts) {
    pp_opts *o = opts;
    (void)f;
    return pl_arg_int_list_in(cmd, "--block-sizes", arg, 1, 4096, MAX_SIZES, &o->sizes,
                              &o->n_sizes)
               ? 2
               : 0;
}

static const pl_flag PREEMPT_FLAGS[] = {
    PL_FLAG_ROW_STR(pp_opts, "model", 'm', model, "MODEL", "GGUF path or bare name"),
    PL_FLAG_ROW_FN("block-sizes", 0, set_sizes, 0, "LIST",
     "block sizes in tokens (1,2,4,8,16,32,64,128,256)"),
    PL_FLAG_ROW_I32(pp_opts, "context", 0, context, 1, 1 << 16, "L",
     "tokens of the sequence swapped or recomputed, a multiple\n"
     "of every block size (256)"),
    PL_FLAG_ROW_I32(pp_opts, "reps", 0, reps, 1, MAX_REPS, "R",
     "repetitions, each over every block size in turn (5)"),
    PL_FLAG_ROW_I32(pp_opts, "threads", 't', threads, 1, 512, "N",
     "worker threads of the forward pass (1)"),
    PL_FLAG_ROW_CHOICE(pp_opts, "clock", 0, cpu_clock, "wall|cpu",
     "time on the wall clock (default) or this thread's CPU\ntime (with -t 1)"),
};

static const pl_flag_cmd PREEMPT = {
    "bench preempt",
    "usage: pagellm bench preempt -m MODEL [--block-sizes LIST] [--context L] [--reps R]\n",
    NULL, PREEMPT_FLAGS, sizeof PREEMPT_FLAGS / sizeof PREEMPT_FLAGS[0], -1, 0};

static int parse(int argc, char **argv, pp_opts *o, char *path, size_t cap) {
    static int32_t defaults[] = {1, 2, 4, 8, 16, 32, 64, 128, 256};
    memset(o, 0, sizeof *o);
    o->context = 256;
    o->reps = 5;
    o->threads = 1;
    int first, rc = pl_flags_parse(&PREEMPT, argc, argv, o, &first);
    if (rc) return rc == PL_FLAGS_HELP ? 100 : rc;
    if (!o->model) return pl_flags_need(&PREEMPT, "-m MODEL");
    if (o->cpu_clock && o->threads != 1) {
        fprintf(stderr, "pagellm %s: --clock cpu needs -t 1: it counts this thread's CPU time "
                "only, not the other threads'\n", C);
        return 2;
    }
    if (!o->sizes) {
        o->n_sizes = (int)(sizeof defaults / sizeof *defaults);
        if (!(o->sizes = malloc(sizeof defaults))) return pl_cli_fail(C, "out of memory");
        memcpy(o->sizes, defaults, sizeof defaults);
    }
    for (int i = 0; i < o->n_sizes; i++)
        if (o->context % o->sizes[i]) {
            fprintf(stderr, "pagellm %s: --context %lld is not a multiple of block size %d\n", C,
                    (long long)o->context, o->sizes[i]);
            return 2;
        }
    if (pl_cli_resolve_model(o->model, path, cap)) return 1;
    o->model = path;
    return 0;
}

/* One block size: the stores, the ids, the step batch of the prefill. */
typedef struct {
    int32_t B, n_blocks;
    pl_kv_store kv, swap;
    int32_t *ids, *table, *tok, *pos, seq_start[2], ctx, row;
    int64_t *slots;
    uint8_t *saved;               /* layer 0's K bytes before the round trip */
    size_t layer_bytes;
} pp_size;

static void size_free(pp_size *s) {
    pl_kv_store_destroy(&s->kv);
    pl_kv_store_destroy(&s->swap);
    PL_FREE_ALL(s->ids, s->table, s->tok, s->pos, s->slots, s->saved);
}

static pl_status size_init(pp_size *s, const pl_model *m, int32_t B, int32_t L) {
    memset(s, 0, sizeof *s);
    s->B = B;
    s->n_blocks = L / B;
    pl_kv_layout l = {.dtype = PL_DT_F16, .block_size = B, .n_kv_heads = m->hp.n_kv_heads,
                      .head_dim = m->hp.head_dim, .num_blocks = s->n_blocks};
    PL_TRY(pl_kv_store_init(&s->kv, &l, m->hp.n_layers, NULL));
    PL_TRY(pl_kv_store_init(&s->swap, &l, m->hp.n_layers, NULL));
    s->layer_bytes = s->kv.layer_bytes; /* layer 0's K array */
    s->ids = malloc((size_t)s->n_blocks * sizeof *s->ids);
    s->table = malloc((size_t)s->n_blocks * sizeof *s->table);
    s->tok = malloc((size_t)L * sizeof *s->tok);
    s->pos = malloc((size_t)L * sizeof *s->pos);
    s->slots = malloc((size_t)L * sizeof *s->slots);
    s->saved = malloc(s->layer_bytes);
    if (!s->ids || !s->table || !s->tok || !s->pos || !s->slots || !s->saved)
        return pl_fail(PL_ERR_NOMEM, "out of memory for block size %d", B);
    pl_rng r;
    pl_rng_seed(&r, 19);
    for (int32_t i = 0; i < s->n_blocks; i++) s->ids[i] = s->table[i] = i;
    for (int32_t t = 0; t < L; t++) {
        s->tok[t] = 3 + (int32_t)pl_rng_below(&r, (uint64_t)(m->hp.n_vocab - 3));
        s->pos[t] = t;
        s->slots[t] = t; /* identity table: token t in block t / B, offset t % B */
    }
    s->seq_start[0] = 0;
    s->seq_start[1] = L;
    s->ctx = L;
    s->row = L - 1;
    return PL_OK;
}

static int g_cpu_clock;
static double now(void) { return g_cpu_clock ? pl_clock_thread_cpu() : pl_clock_now(); }

/* One repetition at one block size: seconds for the prefill, the swap out and the swap in. */
static pl_status size_run(pp_size *s, pl_forward_ctx *fwd, int32_t L, float *logits,
                          double t[3]) {
    pl_step_batch b = {.n_tokens = L, .token_ids = s->tok, .positions = s->pos,
                       .slot_mapping = s->slots, .n_seqs = 1, .seq_start = s->seq_start,
                       .context_lens = &s->ctx, .block_tables = s->table,
                       .max_blocks = s->n_blocks, .n_logits = 1, .logit_rows = &s->row};
    double t0 = now();
    PL_TRY(pl_model_forward(fwd, &s->kv, &b, logits));
    t[0] = now() - t0;
    memcpy(s->saved, pl_kv_store_k(&s->kv, 0), s->layer_bytes);
    t0 = now();
    pl_kv_store_copy(&s->kv, &s->swap, s->ids, s->ids, s->n_blocks);
    t[1] = now() - t0;
    memset(pl_kv_store_k(&s->kv, 0), 0x5a, s->layer_bytes); /* the blocks are reused meanwhile */
    t0 = now();
    pl_kv_store_copy(&s->swap, &s->kv, s->ids, s->ids, s->n_blocks);
    t[2] = now() - t0;
    if (memcmp(s->saved, pl_kv_store_k(&s->kv, 0), s->layer_bytes))
        return pl_fail(PL_ERR_INTERNAL, "block size %d: the swapped-in K differs from what was "
                       "swapped out", s->B);
    return PL_OK;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* "name": {"median": .., "min": .., "max": ..} of v[n] scaled (sorts v). */
static void print_spread(const char *name, double *v, int n, double scale) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    double med = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
    printf(",\"%s\":{\"median\":%.4f,\"min\":%.4f,\"max\":%.4f}", name, med * scale, v[0] * scale,
           v[n - 1] * scale);
}

int pl_bench_preempt(int argc, char **argv) {
    pp_opts o;
    char path[4096];
    int rc = parse(argc, argv, &o, path, sizeof path);
    if (rc) {
        free(o.sizes);
        return rc >= 100 ? 0 : rc;
    }
    const int32_t L = (int32_t)o.context;
    g_cpu_clock = o.cpu_clock;
    const int R = (int)o.reps, S = o.n_sizes;
    pl_model *m = NULL;
    pl_threadpool *tp = NULL;
    pl_forward_ctx *fwd = NULL;
    pp_size *sz = calloc((size_t)S, sizeof *sz);
    double *t = calloc((size_t)S * R * 3, sizeof *t);
    float *logits = NULL;
    if (!sz || !t) {
        rc = pl_cli_fail(C, "out of memory");
        goto done;
    }
    if (pl_model_load(o.model, &m) != PL_OK || !(tp = pl_threadpool_create((int)o.threads)) ||
        pl_forward_ctx_create(m, L, 1, tp, &fwd) != PL_OK) {
        rc = pl_cli_fail(C, "%s: %s", o.model, tp || !m ? pl_last_error() : "no thread pool");
        goto done;
    }
    if (L > m->hp.n_ctx_train) {
        rc = pl_cli_fail(C, "--context %d is beyond the model's context %d", L, m->hp.n_ctx_train);
        goto done;
    }
    if (!(logits = malloc((size_t)m->hp.n_vocab * sizeof *logits))) {
        rc = pl_cli_fail(C, "out of memory");
        goto done;
    }
    for (int i = 0; i < S; i++)
        if (size_init(&sz[i], m, o.sizes[i], L) != PL_OK) {
            rc = pl_cli_fail(C, "%s", pl_last_error());
            goto done;
        }
    for (int i = 0; i < S; i++) { /* warm-up: pages touched, caches, threads */
        double w[3];
        if (size_run(&sz[i], fwd, L, logits, w) != PL_OK) {
            rc = pl_cli_fail(C, "%s", pl_last_error());
            goto done;
        }
    }
    for (int r = 0; r < R; r++)
        for (int i = 0; i < S; i++) {
            double w[3];
            if (size_run(&sz[i], fwd, L, logits, w) != PL_OK) {
                rc = pl_cli_fail(C, "%s", pl_last_error());
                goto done;
            }
            for (int k = 0; k < 3; k++) t[((size_t)k * S + i) * R + r] = w[k] / sz[i].n_blocks;
        }
    for (int i = 0; i < S; i++) {
        pl_kv_layout l = sz[i].kv.layout;
        size_t bpb = pl_kv_bytes_per_block(&l, m->hp.n_layers);
        printf("{\"bench\":\"preempt\",\"model\":\"%s\",\"block_size\":%d,\"context\":%d,"
               "\"blocks\":%d,\"bytes_per_block\":%zu,\"reps\":%d,\"threads\":%d,\"isa\":\"%s\","
               "\"clock\":\"%s\"", o.model, sz[i].B, L, sz[i].n_blocks, bpb, R,
               pl_threadpool_size(tp), pl_isa_name(pl_cpu_isa()), o.cpu_clock ? "cpu" : "wall");
        static const char *names[3] = {"recompute", "swap_out", "swap_in"};
        for (int k = 0; k < 3; k++) {
            double *v = &t[((size_t)k * S + i) * R], per_tok[MAX_REPS];
            for (int r = 0; r < R; r++) per_tok[r] = v[r] / sz[i].B;
            char name[64];
            snprintf(name, sizeof name, "%s_us_per_block", names[k]);
            print_spread(name, v, R, 1e6);
            snprintf(name, sizeof name, "%s_us_per_token", names[k]);
            print_spread(name, per_tok, R, 1e6);
        }
        printf("}\n");
    }
    fflush(stdout);
done:
    for (int i = 0; sz && i < S; i++) size_free(&sz[i]);
    free(sz);
    free(t);
    free(logits);
    free(o.sizes);
    pl_forward_ctx_destroy(fwd);
    pl_threadpool_destroy(tp);
    pl_model_destroy(m);
    return rc;
}
