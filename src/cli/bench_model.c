/* cli/bench_model — `pagellm bench model`: prefill and decode tokens/s of a model through the
 * real forward pass (pl_model_forward over a paged pl_kv_store), no engine, no sampling.
 *
 *   prefill  : one step of -p tokens of one sequence, logits for the last row only (what
 *              llama-bench's pp test does).
 *   decode   : for every B of -b: B sequences whose first --ctx tokens are already in the cache
 *              (written by untimed prefill steps), then -n steps of one token per sequence with
 *              logits for all B rows (what llama-batched-bench's TG phase does); tokens/s =
 *              B * n / time.
 * Each measurement is repeated --reps times on fresh caches; the table shows the mean and the
 * best, the JSON lines (--json, after the table) every repetition's value as well.
 * Token ids are drawn from a fixed seed; the weights are whatever the file holds.
 *
 * Beside tokens/s it prints the work rate and the share of the machine's limits measured by
 * kernels/roofline (as `bench kernels` does): GFLOP/s (GOP/s when the matrices are quantized:
 * integer dot products) = 2 x (matrix parameters x tokens + output matrix x logit rows +
 * attention's QK and AV multiply-adds over the keys each token sees) / time, and GB/s = (every
 * matrix once per step + the K and V each sequence reads) / time, a MoE layer's experts only those
 * the step's tokens chose, each once (pl_forward_moe_bytes counts them). %peak is the f32 FMA peak
 * (float matrices only), %bw the read bandwidth: measured just before and just after each timed
 * run, and each run's GB/s taken over the mean of its two (a shared machine's bandwidth moves by
 * up to 2x from minute to minute: one figure after the runs put %bw anywhere in 60-110 %); the
 * row shows the mean of the runs' shares, the JSON each run's bandwidth.
 */
#include "cli/args.h"
#include "cli/engine_flags.h"
#include "cli/flags.h"
#include "base/buf.h"
#include "base/clock.h"
#include "cli/cli.h"

#include "base/rng.h"
#include "base/status.h"
#include "base/threadpool.h"
#include "kernels/cpu.h"
#include "kernels/roofline.h"
#include "model/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { MAX_BATCHES = 16, MAX_REPS = 20, BLOCK = 16 };

typedef struct {
    const char *model;
    int32_t p, n, ctx, reps, threads;
    int32_t *batches;
    int n_batches;
    int json;
    pl_dtype kv;       /* KV cache type (f16) */
    pl_f16_weights f16; /* --f16-weights (default: PAGELLM_F16_WEIGHTS, else f16) */
} bm_opts;

typedef struct {
    pl_model *m;
    pl_threadpool *tp;
    pl_forward_ctx *fwd;
    pl_kv_store kv;
    int32_t max_tokens;   /* tokens per step the scratch holds */
    int32_t max_blocks;   /* block-table width per sequence */
    int32_t *table;       /* [max_seqs][max_blocks], sequence i owns blocks i * max_blocks.. */
    float *logits;        /* [max_logits][n_vocab] */
    int32_t *tok, *pos, *rows, *seq_start, *ctx_len;
    int64_t *slots;
    pl_rng rng;
} bm_run;


/* The work of one forward step (see the top comment): FLOPs and bytes read. */
typedef struct {
    double layer_params, layer_bytes; /* all layers' matrices */
    double expert_bytes;              /* of which one token's experts (in layer_bytes) */
    double out_params, out_bytes;     /* the output matrix */
    double kv_bytes_per_key;          /* K and V of one position, every layer */
    double attn_flops_per_key;        /* QK + AV of one query against one key, every layer */
    int integer;                      /* quantized matrices: integer dot products */
    int bf16;                         /* bf16 matrices at avx512 (vdpbf16ps; --f16-weights bf16) */
} bm_work;

static void work_of(const pl_model *m, pl_dtype kv, bm_work *w) {
    const pl_model_hparams *hp = &m->hp;
    memset(w, 0, sizeof *w);
    for (int l = 0; l < hp->n_layers; l++) {
        const pl_layer_weights *L = &m->layers[l];
        const pl_weight *ws[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (int i = 0; i < 7; i++) {
            if (!ws[i]->data) continue;
            w->layer_params += (double)ws[i]->rows * (double)ws[i]->cols;
            w->layer_bytes += (double)ws[i]->rows * (double)pl_dtype_row_size(ws[i]->type, ws[i]->cols);
        }
        /* MoE: the router and the experts one token uses (the FLOPs; the bytes of a step are
         * those of the experts its tokens chose, counted by the forward pass) */
        const pl_weight *es[] = {&L->gate_inp, &L->exp_gate[0], &L->exp_up[0], &L->exp_down[0]};
        for (int i = 0; L->exp_gate && i < 4; i++) {
            double n = i ? hp->n_expert_used : 1;
            w->layer_params += n * (double)es[i]->rows * (double)es[i]->cols;
            double b = n * (double)es[i]->rows * (double)pl_dtype_row_size(es[i]->type, es[i]->cols);
            w->layer_bytes += b;
            if (i) w->expert_bytes += b;
        }
    }
    w->out_params = (double)m->output.rows * (double)m->output.cols;
    w->out_bytes = (double)m->output.rows * (double)pl_dtype_row_size(m->output.type, m->output.cols);
    pl_dtype t = m->layers[0].wq.type;
    w->integer = t != PL_DT_F32 && t != PL_DT_F16 && t != PL_DT_BF16;
    w->bf16 = t == PL_DT_BF16 && pl_cpu_isa() >= PL_ISA_AVX512;
    w->kv_bytes_per_key = 2.0 * hp->n_layers * hp->n_kv_heads * (double)pl_dtype_row_size(kv, hp->head_dim);
    w->attn_flops_per_key = 4.0 * hp->n_layers * hp->n_heads * (double)hp->head_dim;
}

/* FLOPs and bytes of a prefill of p tokens (one sequence, causal, one logit row); moe: the
 * expert bytes the step read (pl_forward_moe_bytes), in place of one token's. */
static void work_prefill(const bm_work *w, int64_t p, double moe, double *flops, double *bytes) {
    double keys = (double)p * (double)(p + 1) / 2;
    *flops = 2.0 * w->layer_params * (double)p + 2.0 * w->out_params + w->attn_flops_per_key * keys;
    *bytes = w->layer_bytes - w->expert_bytes + moe + w->out_bytes + w->kv_bytes_per_key * (double)p;
}

/* FLOPs and bytes of n decode steps of B sequences that start with ctx tokens each; moe: the
 * expert bytes the n steps read (B > 1 reads more experts than one token's). */
static void work_decode(const bm_work *w, int32_t B, int64_t n, int64_t ctx, double moe,
                        double *flops, double *bytes) {
    double keys = (double)B * ((double)n * (double)(ctx + 1) + (double)n * (double)(n - 1) / 2);
    *flops = 2.0 * (w->layer_params + w->out_params) * (double)B * (double)n +
             w->attn_flops_per_key * keys;
    *bytes = (w->layer_bytes - w->expert_bytes + w->out_bytes) * (double)n + moe +
             w->kv_bytes_per_key * keys;
}

/* The rates of one row: work per token (flops/bytes over `tokens`) at `tps` tokens/s. */
typedef struct {
    double ops, gbs, peak_pct, bw_pct; /* GFLOP/s or GOP/s; peak_pct < 0: not applicable */
    double bytes_per_token;            /* the bytes the rate counts, per token (exact: no timing) */
} bm_rates;

static bm_rates rates_of(const bm_work *w, double flops, double bytes, double tokens, double tps,
                         double peak, double bw_peak) {
    bm_rates r;
    double t = tokens / tps;
    r.ops = flops / t / 1e9;
    r.gbs = bytes / t / 1e9;
    r.bytes_per_token = bytes / tokens;
    (void)w;
    r.peak_pct = peak > 0 ? 100.0 * r.ops / peak : -1; /* FMA peak, or the int8 peak for integers */
    r.bw_pct = bw_peak > 0 ? 100.0 * r.gbs / bw_peak : -1;
    return r;
}

/* The read bandwidth now, with the benchmark's own pool (as `bench kernels` --quick). */
static double read_gbs(bm_run *r) {
    return pl_roofline_read_gbs(r->tp, pl_threadpool_size(r->tp), (size_t)256 << 20, 2);
}

/* The mean over the repetitions of each one's bytes/s over the bandwidth measured beside it. */
static double bw_pct(const bm_rates *rt, const double *tps, const double *bw, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) {
        if (bw[i] <= 0) return -1;
        s += rt->bytes_per_token * tps[i] / 1e9 / bw[i];
    }
    return 100.0 * s / n;
}

static void run_free(bm_run *r) {
    PL_FREE_ALL(r->table, r->logits, r->tok, r->pos, r->rows, r->seq_start, r->ctx_len, r->slots);
    pl_kv_store_destroy(&r->kv);
    pl_forward_ctx_destroy(r->fwd);
    pl_threadpool_destroy(r->tp);
    pl_model_destroy(r->m);
}

static pl_status run_open(bm_run *r, const bm_opts *o, int32_t max_b) {
    PL_TRY(pl_model_load_with(o->model, 0, 1, o->f16, &r->m));
    r->tp = pl_threadpool_create((int)o->threads);
    if (!r->tp) return pl_fail(PL_ERR_NOMEM, "could not create the thread pool");
    int64_t ctx_max = o->ctx + o->n > o->p ? o->ctx + o->n : o->p;
    r->max_tokens = (int32_t)(o->p > max_b ? o->p : max_b);
    if (o->ctx > r->max_tokens) r->max_tokens = (int32_t)o->ctx; /* ctx prefill in one step */
    r->max_blocks = (int32_t)((ctx_max + BLOCK - 1) / BLOCK);
    PL_TRY(pl_forward_ctx_create(r->m, r->max_tokens, max_b, r->tp, &r->fwd));
    pl_kv_layout l = {.dtype = o->kv, .block_size = BLOCK, .n_kv_heads = r->m->hp.n_kv_heads,
                      .head_dim = r->m->hp.head_dim,
                      .num_blocks = (int64_t)max_b * r->max_blocks};
    PL_TRY(pl_kv_store_init_shaped(&r->kv, &l, pl_model_kv_tensors(&r->m->hp),
                                   pl_model_kv_shapes(&r->m->hp), NULL));
    size_t T = (size_t)r->max_tokens;
    r->table = malloc((size_t)max_b * r->max_blocks * sizeof *r->table);
    r->logits = malloc((size_t)max_b * r->m->hp.n_vocab * sizeof *r->logits);
    r->tok = malloc(T * sizeof *r->tok);
    r->pos = malloc(T * sizeof *r->pos);
    r->rows = malloc(T * sizeof *r->rows);
    r->slots = malloc(T * sizeof *r->slots);
    r->seq_start = malloc((size_t)(max_b + 1) * sizeof *r->seq_start);
    r->ctx_len = malloc((size_t)max_b * sizeof *r->ctx_len);
    if (!r->table || !r->logits || !r->tok || !r->pos || !r->rows || !r->slots ||
        !r->seq_start || !r->ctx_len)
        return pl_fail(PL_ERR_NOMEM, "out of memory for the benchmark's buffers");
    for (int64_t i = 0; i < (int64_t)max_b * r->max_blocks; i++) r->table[i] = (int32_t)i;
    pl_rng_seed(&r->rng, 1234);
    return PL_OK;
}

/* One step: q_len tokens for each of seqs sequences (sequence i starts at position start[i]...
 * all start at `start`), logits for the last token of each sequence. */
static pl_status step(bm_run *r, int32_t seqs, int32_t q_len, int32_t start) {
    int32_t t = 0;
    r->seq_start[0] = 0;
    for (int32_t i = 0; i < seqs; i++) {
        for (int32_t j = 0; j < q_len; j++, t++) {
            int32_t p = start + j;
            r->tok[t] = (int32_t)pl_rng_below(&r->rng, (uint64_t)r->m->hp.n_vocab);
            r->pos[t] = p;
            r->slots[t] = (int64_t)r->table[i * r->max_blocks + p / BLOCK] * BLOCK + p % BLOCK;
        }
        r->seq_start[i + 1] = t;
        r->ctx_len[i] = start + q_len;
        r->rows[i] = t - 1;
    }
    pl_step_batch b = {.n_tokens = t, .token_ids = r->tok, .positions = r->pos,
                       .slot_mapping = r->slots, .n_seqs = seqs, .seq_start = r->seq_start,
                       .context_lens = r->ctx_len, .block_tables = r->table,
                       .max_blocks = r->max_blocks, .n_logits = seqs, .logit_rows = r->rows};
    return pl_model_forward(r->fwd, &r->kv, &b, r->logits);
}

/* tps: tokens/s; moe: the expert bytes the timed steps read */
static pl_status measure_prefill(bm_run *r, const bm_opts *o, double *tps, double *moe) {
    PL_TRY(step(r, 1, (int32_t)o->p, 0)); /* warm-up: pages, caches, threads */
    double t0 = pl_clock_now(), m0 = pl_forward_moe_bytes(r->fwd);
    PL_TRY(step(r, 1, (int32_t)o->p, 0));
    *tps = (double)o->p / (pl_clock_now() - t0);
    *moe = pl_forward_moe_bytes(r->fwd) - m0;
    return PL_OK;
}

static pl_status measure_decode(bm_run *r, const bm_opts *o, int32_t B, double *tps,
                                double *moe) {
    /* the contexts: sequence by sequence, untimed, in steps the scratch can hold */
    for (int32_t i = 0; i < B && o->ctx > 0; i++) {
        /* step() fills sequence 0's slots; fake sequence i by shifting the table view */
        int32_t *save = r->table;
        r->table = save + (size_t)i * r->max_blocks;
        pl_status s = step(r, 1, (int32_t)o->ctx, 0);
        r->table = save;
        PL_TRY(s);
    }
    PL_TRY(step(r, B, 1, (int32_t)o->ctx)); /* warm-up step, rewritten by the first timed one */
    double t0 = pl_clock_now(), m0 = pl_forward_moe_bytes(r->fwd);
    for (int64_t k = 0; k < o->n; k++) PL_TRY(step(r, B, 1, (int32_t)(o->ctx + k)));
    *tps = (double)B * (double)o->n / (pl_clock_now() - t0);
    *moe = pl_forward_moe_bytes(r->fwd) - m0;
    return PL_OK;
}

static void stats(const double *v, int n, double *mean, double *best) {
    *mean = 0;
    *best = 0;
    for (int i = 0; i < n; i++) {
        *mean += v[i] / n;
        if (v[i] > *best) *best = v[i];
    }
}

static void print_json(const bm_opts *o, const bm_run *r, const char *test, int32_t B,
                       int64_t tokens, const double *v, const double *bw, int n,
                       const bm_work *w, const bm_rates *rt, double fma_peak) {
    double mean, best, bw_mean = 0;
    stats(v, n, &mean, &best);
    for (int i = 0; i < n; i++) bw_mean += bw[i] / n; /* this row's, beside its runs */
    printf("{\"model\":\"%s\",\"test\":\"%s\",\"batch\":%d,\"tokens\":%lld,\"ctx\":%lld,"
           "\"threads\":%d,\"isa\":\"%s\",\"kv\":\"%s\",\"tokens_per_s\":%.2f,"
           "\"best_tokens_per_s\":%.2f,\"reps\":[",
           o->model, test, B, (long long)tokens, (long long)(B ? o->ctx : 0),
           pl_threadpool_size(r->tp), pl_isa_name(pl_cpu_isa()), pl_dtype_name(o->kv), mean,
           best);
    for (int i = 0; i < n; i++) printf("%s%.2f", i ? "," : "", v[i]);
    printf("],\"reps_read_gb_per_s\":[");
    for (int i = 0; i < n; i++) printf("%s%.3f", i ? "," : "", bw[i]);
    printf("],\"%s\":%.2f,\"gb_per_s\":%.2f,\"%s\":%.1f,\"read_peak_gb_per_s\":%.1f,",
           w->integer ? "gops_per_s" : "gflops_per_s", rt->ops, rt->gbs,
           w->integer ? "int8_peak_gops" : w->bf16 ? "bf16_peak_gflops" : "fma_peak_gflops", fma_peak, bw_mean);
    if (rt->peak_pct >= 0) printf("\"peak_pct\":%.1f,", rt->peak_pct);
    else printf("\"peak_pct\":null,");
    printf("\"bytes_per_token\":%.1f,\"bandwidth_pct\":%.1f}\n", rt->bytes_per_token, rt->bw_pct);
}

/* "12.3" or "-" (not applicable) */
static const char *pct(char *buf, size_t cap, double v) {
    if (v < 0) snprintf(buf, cap, "-");
    else snprintf(buf, cap, "%.1f", v);
    return buf;
}

static int set_batches(const char *cmd, const pl_flag *f, const char *arg, void *opts) {
    bm_opts *o = opts;
    (void)f;
    return pl_arg_int_list_in(cmd, "-b", arg, 1, 4096, MAX_BATCHES, &o->batches, &o->n_batches)
               ? 2
               : 0;
}

static int set_kv(const char *cmd, const pl_flag *f, const char *arg, void *opts) {
    static const pl_dtype kv[] = {PL_DT_F16, PL_DT_F32, PL_DT_BF16, PL_DT_Q8_0, PL_DT_Q4_0};
    (void)f;
    for (int i = 0; i < 5; i++)
        if (!strcmp(arg, pl_dtype_name(kv[i]))) {
            ((bm_opts *)opts)->kv = kv[i];
            return 0;
        }
    fprintf(stderr, "pagellm %s: --kv-cache-dtype: '%s' is not one of f16, f32, bf16, q8_0, "
            "q4_0\n", cmd, arg);
    return 2;
}

static int set_f16(const char *cmd, const pl_flag *f, const char *arg, void *opts) {
    (void)f;
    return pl_arg_f16_weights(cmd, arg, &((bm_opts *)opts)->f16) ? 2 : 0;
}

static const pl_flag MODEL_FLAGS[] = {
    PL_FLAG_ROW_STR(bm_opts, "model", 'm', model, "FILE",
     "a GGUF model (path or name, as for generate)"),
    PL_FLAG_ROW_I32(bm_opts, "n-prompt", 'p', p, 0, 1 << 16, "N",
     "prompt tokens of the prefill test (512; 0 skips it)"),
    PL_FLAG_ROW_I32(bm_opts, "n-gen", 'n', n, 0, 1 << 16, "N",
     "decode steps per batch size (128; 0 skips decode)"),
    PL_FLAG_ROW_FN("batch-size", 'b', set_batches, 0, "LIST", "decode batch sizes (1,8,32)"),
    PL_FLAG_ROW_I32(bm_opts, "ctx", 0, ctx, 0, 1 << 16, "N",
     "tokens already in each sequence's cache before decoding (128)"),
    PL_FLAG_ROW_I32(bm_opts, "threads", 't', threads, 1, 512, "N",
     "worker threads (default: one per physical core allowed)"),
    PL_FLAG_ROW_I32(bm_opts, "reps", 0, reps, 1, MAX_REPS, "N",
     "repetitions of every measurement (3)"),
    PL_FLAG_ROW_FN("kv-cache-dtype", 0, set_kv, 0, "T", "f16 (default), f32, bf16, q8_0 or q4_0"),
    PL_FLAG_ROW_FN("f16-weights", 0, set_f16, 0, "T",
     "f16 (default) or bf16: F16 matrices rounded to bf16 at load\n(AVX-512 BF16 only; as serve's)"),
    PL_FLAG_ROW_SET(bm_opts, "json", 0, json, "also print one JSON object per measurement"),
};

static const pl_flag_cmd MODEL = {
    "bench model",
    "usage: pagellm bench model -m FILE [-p N] [-n N] [-b B1,B2,..] [--ctx N]\n"
    "                           [--threads N] [--reps N] [--kv-cache-dtype T] [--f16-weights T]\n"
    "                           [--json]\n",
    NULL, MODEL_FLAGS, sizeof MODEL_FLAGS / sizeof MODEL_FLAGS[0], -1, 0};

static int parse(int argc, char **argv, bm_opts *o, char *path, size_t cap) {
    const char *cmd = MODEL.name;
    int first, rc = pl_flags_parse(&MODEL, argc, argv, o, &first);
    if (rc) return rc == PL_FLAGS_HELP ? 100 : rc;
    if (!o->model) return pl_flags_need(&MODEL, "-m FILE");
    if (o->p == 0 && o->n == 0) {
        fprintf(stderr, "pagellm %s: -p 0 and -n 0: nothing to measure\n", cmd);
        return 2;
    }
    if (pl_cli_resolve_model(o->model, path, cap)) return 1;
    o->model = path;
    return 0;
}

int pl_bench_model(int argc, char **argv) {
    bm_opts o = {.p = 512, .n = 128, .ctx = 128, .reps = 3, .kv = PL_DT_F16};
    char path[4096];
    int rc = parse(argc, argv, &o, path, sizeof path);
    if (rc) {
        free(o.batches);
        return rc == 100 ? 0 : rc;
    }
    if (!o.batches) {
        o.batches = malloc(3 * sizeof *o.batches);
        if (!o.batches) return pl_cli_fail("bench model", "out of memory");
        o.batches[0] = 1, o.batches[1] = 8, o.batches[2] = 32;
        o.n_batches = 3;
    }
    int32_t max_b = 1;
    for (int i = 0; i < o.n_batches; i++) max_b = o.batches[i] > max_b ? o.batches[i] : max_b;

    double pre[MAX_REPS], dec[MAX_BATCHES][MAX_REPS];
    /* the read bandwidth beside each timed run (the mean of one just before and one just after):
     * a shared machine's bandwidth moves by 2x from minute to minute, so each run's %bw is
     * against its own neighbours' */
    double pre_bw[MAX_REPS], dec_bw[MAX_BATCHES][MAX_REPS];
    double pre_moe = 0, dec_moe[MAX_BATCHES] = {0}; /* expert bytes read (the same tokens every repetition) */
    for (int rep = 0; rep < o.reps; rep++) {
        /* fresh model, pool and cache per repetition, as separate runs would have */
        bm_run r = {0};
        pl_status s = run_open(&r, &o, max_b);
        if (s == PL_OK && o.p > 0) {
            double b0 = read_gbs(&r);
            s = measure_prefill(&r, &o, &pre[rep], &pre_moe);
            pre_bw[rep] = (b0 + read_gbs(&r)) / 2;
        }
        for (int i = 0; s == PL_OK && o.n > 0 && i < o.n_batches; i++) {
            double b0 = read_gbs(&r);
            s = measure_decode(&r, &o, o.batches[i], &dec[i][rep], &dec_moe[i]);
            dec_bw[i][rep] = (b0 + read_gbs(&r)) / 2;
        }
        if (s != PL_OK) {
            run_free(&r);
            free(o.batches);
            return pl_cli_fail("bench model", "%s", pl_last_error());
        }
        if (rep == o.reps - 1) {
            const pl_model_hparams *hp = &r.m->hp;
            bm_work w;
            work_of(r.m, o.kv, &w);
            /* this machine's limits, with the benchmark's own pool (as `bench kernels` --quick) */
            int nt = pl_threadpool_size(r.tp);
            double bw_peak = 0, bw_lo = 1e30, bw_hi = 0; /* the mean and range beside the runs */
            int n_bw = 0;
            for (int k = 0; k < o.reps; k++) {
                for (int i = -1; i < o.n_batches; i++) {
                    if (i < 0 ? o.p <= 0 : o.n <= 0) continue;
                    double b = i < 0 ? pre_bw[k] : dec_bw[i][k];
                    bw_peak += b, n_bw++;
                    bw_lo = b < bw_lo ? b : bw_lo, bw_hi = b > bw_hi ? b : bw_hi;
                }
            }
            bw_peak = n_bw ? bw_peak / n_bw : -1;
            double fma_peak = pl_roofline_fma_gflops(r.tp, nt, 2000000, 3);
            /* integer matrices: % of the level's int8 peak (AMX's, larger, is printed beside) */
            double int8_peak = w.integer ? pl_roofline_int8_gops(r.tp, nt, 2000000, 3, 0) : -1;
            double amx_peak = w.integer ? pl_roofline_int8_gops(r.tp, nt, 2000000, 3, 1) : -1;
            /* bf16 matrices at avx512: % of the vdpbf16ps peak (twice the FMA peak) */
            double bf16_peak = w.bf16 ? pl_roofline_bf16_gflops(r.tp, nt, 2000000, 3) : -1;
            printf("model %s: dim %d, %d layers, %d heads (%d KV), ffn %d, vocab %d; "
                   "%d threads, %s\n",
                   o.model, hp->dim, hp->n_layers, hp->n_heads, hp->n_kv_heads, hp->ffn_dim,
                   hp->n_vocab, nt, pl_isa_name(pl_cpu_isa()));
            printf("limits: f32 FMA peak %.1f GFLOP/s, read bandwidth %.1f GB/s (%.1f-%.1f beside "
                   "the timed runs; %%bw: each run against its own); matrices %s (%s)\n",
                   fma_peak, bw_peak, bw_lo, bw_hi, pl_dtype_name(r.m->layers[0].wq.type),
                   w.integer ? "integer dot products: GOP/s, %peak of the int8 peak"
                   : w.bf16  ? "GFLOP/s, %peak of the bf16 peak"
                             : "GFLOP/s, %peak of the FMA peak");
            if (bf16_peak > 0) printf("bf16 peak: vdpbf16ps %.1f GFLOP/s\n", bf16_peak);
            if (int8_peak > 0)
                printf("int8 peak: %s %.1f GOP/s%s",
                       pl_cpu_isa() == PL_ISA_AVX512 || pl_cpu_avxvnni() ? "VNNI" : "AVX2",
                       int8_peak, amx_peak > 0 ? "" : "\n");
            if (amx_peak > 0) printf(", AMX %.1f GOP/s (K = 32 tiles)\n", amx_peak);
            printf("\n");
            const double peak = w.integer ? int8_peak : w.bf16 ? bf16_peak : fma_peak;
            printf("%-8s %6s %7s %6s %12s %12s %9s %8s %6s %6s\n", "test", "batch", "tokens", "ctx",
                   "tokens/s", "best tok/s", w.integer ? "GOP/s" : "GFLOP/s", "GB/s", "%peak",
                   "%bw");
            double mean, best, flops, bytes;
            char b1[16], b2[16];
            bm_rates pre_rt = {0}, dec_rt[MAX_BATCHES];
            if (o.p > 0) {
                stats(pre, (int)o.reps, &mean, &best);
                work_prefill(&w, o.p, pre_moe, &flops, &bytes);
                pre_rt = rates_of(&w, flops, bytes, (double)o.p, mean, peak, bw_peak);
                pre_rt.bw_pct = bw_pct(&pre_rt, pre, pre_bw, (int)o.reps);
                printf("%-8s %6d %7lld %6d %12.1f %12.1f %9.1f %8.1f %6s %6s\n", "prefill", 1,
                       (long long)o.p, 0, mean, best, pre_rt.ops, pre_rt.gbs,
                       pct(b1, sizeof b1, pre_rt.peak_pct), pct(b2, sizeof b2, pre_rt.bw_pct));
            }
            for (int i = 0; o.n > 0 && i < o.n_batches; i++) {
                stats(dec[i], (int)o.reps, &mean, &best);
                work_decode(&w, o.batches[i], o.n, o.ctx, dec_moe[i], &flops, &bytes);
                dec_rt[i] = rates_of(&w, flops, bytes, (double)o.batches[i] * (double)o.n, mean,
                                     peak, bw_peak);
                dec_rt[i].bw_pct = bw_pct(&dec_rt[i], dec[i], dec_bw[i], (int)o.reps);
                printf("%-8s %6d %7lld %6lld %12.1f %12.1f %9.1f %8.1f %6s %6s\n", "decode",
                       o.batches[i], (long long)o.n, (long long)o.ctx, mean, best, dec_rt[i].ops,
                       dec_rt[i].gbs, pct(b1, sizeof b1, dec_rt[i].peak_pct),
                       pct(b2, sizeof b2, dec_rt[i].bw_pct));
            }
            if (o.json) {
                printf("\n");
                if (o.p > 0)
                    print_json(&o, &r, "prefill", 0, o.p, pre, pre_bw, (int)o.reps, &w, &pre_rt,
                               peak);
                for (int i = 0; o.n > 0 && i < o.n_batches; i++)
                    print_json(&o, &r, "decode", o.batches[i], o.n, dec[i], dec_bw[i], (int)o.reps, &w,
                               &dec_rt[i], peak);
            }
        }
        run_free(&r);
    }
    free(o.batches);
    return 0;
}
