/* model shards (tensor parallelism, issue 13; mixtures of experts, issue 34) without MPI: shapes
 * and refusals of pl_model_load_shard (gpt-oss's experts, biases and sinks), and the sharded forward pass of N = 2 ranks run as two threads whose
 * reduce hook sums through a barrier in rank order (and whose gather hook assembles the logits
 * of both ranks' vocabulary rows on rank 0), against the whole model, at every kernel level the
 * CPU has:
 *  - lockstep (every model): the whole model's run records the residual-stream update it adds
 *    at each reduction point (its reduce hook is a recorder); the sharded run checks that the
 *    sum of its ranks' partial sums equals that update up to float rounding (1e-4 of the
 *    vector's largest entry: the two halves are summed apart, then added), then continues from
 *    the whole model's bits. Everything between two reductions is then computed from the same
 *    inputs, so the logits must be bitwise equal and the greedy ids the same. A wrong slice of
 *    any weight, a head or a vocabulary row out of place, or a skipped reduce fails at the
 *    first reduction it touches, on every weight type; also for random mixtures of experts
 *    (qwen3moe in f32 and q8_0 (down cut on 32-value blocks), Mixtral; gpt-oss in f32 and
 *    with mxfp4 experts), whose experts' weighted sum is the
 *    second reduction of a layer (a bias added on both ranks, a sink of another head, a
 *    router that differs between ranks fail there too);
 *  - free-running (f32 weights and cache): logits within 1e-4, greedy ids equal, and two runs
 *    of the sharded pass bitwise equal. Not possible to fake: a shard whose reduce is skipped
 *    gives logits off by O(1).
 * A free-running comparison of a model with quantized weights cannot be bounded: the ranks'
 * halves are summed apart, the residual then differs from the whole model's in its last bits,
 * and the q8_0 activation rounding of the next matmul turns a last bit at a rounding boundary
 * into a whole quant step, which the layers amplify (synth q8_0: 0.087 in the logits at the
 * AVX2 level; the whole model alone differs by 0.108 between the scalar and AVX-512 levels).
 * The lockstep run removes that amplification and keeps every check exact.
 * Issue 33's families (qwen3, mistral3, gemma2, gemma3, gemma4 with per-layer embeddings and
 * shared-KV layers, gemma4's MoE) and phi3 run the lockstep too, f32; test_gemma4_shapes checks gemma4's
 * per-layer cuts and its refusals. At the avx512 level synth-tiny-f16 runs it once more with
 * --f16-weights bf16 on both ranks and the whole model (issue 35): each rank's slices rounded
 * to bf16 compute the whole bf16 model's bits (a rank 1 that kept f16 fails at the first
 * reduction, 1.6e-3 off). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "kernels/cpu.h"
#include "model/model.h"
#include "isa_coverage.h"

#include <math.h>
#include <stdio.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define STORIES PL_SHARED_DIR "/models/stories260K.gguf"
#define Q8 PL_SHARED_DIR "/models/synth-tiny-q8_0.gguf"
#define Q4K PL_SHARED_DIR "/models/synth-tiny-q4_k_m.gguf"

enum { T = 12, BS = 16, NBLK = 4, STEPS = 6 };

/* Small random mixtures of experts (issue 34) of stories260K's vocabulary: qwen3moe, Mixtral
 * (llama's layout), and gpt-oss (biases, sinks, a window of 8 on layer 0, YaRN); experts 64
 * wide, so that a rank's 32 columns of down are a whole q8_0 or mxfp4 block. */
#define MOE_BASE "--dim 64 --layers 2 --heads 4 --kv-heads 2 --head-dim 16 --ffn 64 --seed 5 "
#define QWEN3MOE "--arch qwen3moe --experts 4 --experts-used 2 --expert-ffn 64"
#define GPT_OSS "--arch gpt-oss --sliding-window 8 --experts 4 --experts-used 2 --expert-ffn 64 " \
                "--rope-scaling yarn --rope-factor 4 --rope-orig-ctx 64"

/* Issue 33's families, tiny, of the same base: qwen3 (per-head Q/K norms), mistral3 (the
 * attention temperature: original context 4, so it grows along the 18 positions), gemma2 (soft-
 * caps, window 8 on even layers), gemma3 (Q/K norms, window 8 with its own RoPE base, the final
 * soft-cap), gemma4 (window layers of 2 KV heads of 8, full ones of 2 of 16; layers 2 and 3
 * reuse layers 0 and 1's KV; per-layer embeddings of 8; the shared-KV layers' FFN 128 wide) and
 * gemma4's MoE variant (the experts beside the dense FFN: 3 reductions per layer), all of gemma4's
 * parts at once in q8_0 (head sizes of 16: every cut on 32-value blocks); and phi3
 * (its fused attn_qkv and gate/up ffn_up, cut as views of views; LongRoPE's long factors). */
#define GEMMA4 "--arch gemma4 --swa-pattern 2 --head-dim 16 --head-dim-swa 8 --kv-heads-full 2 " \
               "--sliding-window 8 --final-softcap 3 "
#define FAMILIES                                                                                  \
    "--arch qwen3", "--arch mistral3 --rope-scaling yarn --rope-factor 4 --rope-orig-ctx 4 "      \
    "--attn-temp-scale 0.1", "--arch gemma2 --sliding-window 8 --attn-softcap 0.5 "               \
    "--final-softcap 3", "--arch gemma3 --swa-pattern 2 --sliding-window 8 --rope-base-swa 5000 " \
    "--final-softcap 3", GEMMA4 "--layers 4 --shared-kv-layers 2 --per-layer-dim 8 --ffn-wide 128", \
    GEMMA4 "--experts 4 --experts-used 2 --expert-ffn 64",                                      \
    "--arch gemma4 --swa-pattern 2 --kv-heads-full 2 --sliding-window 8 --layers 4 "              \
    "--shared-kv-layers 2 --per-layer-dim 32 --experts 4 --experts-used 2 --expert-ffn 64 "       \
    "--type q8_0", "--arch phi3 --rope-scaling longrope --rope-orig-ctx 8 --ctx 64"

/* `pagellm mkmodel` MOE_BASE flags into a new temporary file, whose path goes to `path` [64]. */
static void mkmoe(char *path, const char *flags) {
    snprintf(path, 64, "/tmp/pl_shard_moe_XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "'%s' mkmodel '%s' --vocab-from '%s' " MOE_BASE "%s >/dev/null",
             PL_BINARY, path, STORIES, flags);
    if (system(cmd) != 0) fail_msg("mkmodel failed: %s", cmd);
}

static void test_shapes_and_refusals(void **state) {
    (void)state;
    pl_model *full, *s1;
    assert_int_equal(pl_model_load(STORIES, &full), PL_OK);
    assert_int_equal(pl_model_load_shard(STORIES, 1, 2, &s1), PL_OK);
    assert_int_equal(s1->shard.rank, 1);
    assert_int_equal(s1->shard.n_kv_heads, full->hp.n_kv_heads);
    assert_int_equal(s1->hp.n_heads * 2, full->hp.n_heads);
    assert_int_equal(s1->hp.n_kv_heads * 2, full->hp.n_kv_heads);
    assert_int_equal(s1->hp.ffn_dim * 2, full->hp.ffn_dim);
    assert_int_equal(s1->layers[0].wq.rows * 2, full->layers[0].wq.rows);
    assert_int_equal(s1->layers[0].wo.cols * 2, full->layers[0].wo.cols);
    assert_int_equal(s1->layers[0].w_down.cols * 2, full->layers[0].w_down.cols);
    assert_int_equal(s1->shard.vocab0, 256);
    assert_int_equal(s1->shard.n_vocab, 256);
    assert_int_equal(s1->output.rows, 256);
    /* Rank 1's rows of wq are the second half of the tensor; its wo columns the second half of
     * each row. */
    size_t row = pl_dtype_row_size(full->layers[0].wq.type, full->layers[0].wq.cols);
    size_t half = (size_t)s1->layers[0].wq.rows * row;
    assert_memory_equal(s1->layers[0].wq.data, (const char *)full->layers[0].wq.data + half, half);
    const pl_weight *wo = &full->layers[0].wo, *wo1 = &s1->layers[0].wo;
    size_t wrow = pl_dtype_row_size(wo->type, wo->cols), wrow1 = pl_dtype_row_size(wo1->type, wo1->cols);
    for (int64_t r = 0; r < wo->rows; r++)
        assert_memory_equal((const char *)wo1->data + (size_t)r * wrow1,
                            (const char *)wo->data + (size_t)r * wrow + wrow1, wrow1);
    pl_model_destroy(s1);
    pl_model_destroy(full);

    pl_model *m = NULL;
    assert_int_equal(pl_model_load_shard(STORIES, 0, 3, &m), PL_ERR_INVALID_ARG);
    assert_null(m);
    assert_non_null(strstr(pl_last_error(), "does not divide the model's 4 KV heads"));
    /* q4_K: 8 heads of 32 cut into 128-column slices of 256-value blocks. */
    assert_int_equal(pl_model_load_shard(Q4K, 0, 2, &m), PL_ERR_UNSUPPORTED);
    assert_non_null(strstr(pl_last_error(), "not a whole number of quantization blocks"));
    /* a mixture of experts whose experts' width N does not divide (Mixtral-style: --ffn 65) */
    char moe[64];
    mkmoe(moe, "--experts 4 --experts-used 2 --ffn 65 --layers 1");
    assert_int_equal(pl_model_load_shard(moe, 0, 2, &m), PL_ERR_INVALID_ARG);
    assert_null(m);
    assert_non_null(strstr(pl_last_error(), "does not divide the model's experts' width 65"));
    unlink(moe);
}

/* gpt-oss's rank 1: every expert's second half of gate/up rows (and biases) and of down columns;
 * the router and its bias whole; the sinks of its heads; the biases added after the experts'
 * and heads' sums (down's, attn_output's) on rank 0 only. */
static void test_moe_shapes(void **state) {
    (void)state;
    char path[64];
    mkmoe(path, GPT_OSS " --layers 1");
    pl_model *full, *s0, *s1;
    assert_int_equal(pl_model_load(path, &full), PL_OK);
    assert_int_equal(pl_model_load_shard(path, 0, 2, &s0), PL_OK);
    assert_int_equal(pl_model_load_shard(path, 1, 2, &s1), PL_OK);
    const pl_layer_weights *F = &full->layers[0], *L0 = &s0->layers[0], *L1 = &s1->layers[0];
    const int64_t ef = full->hp.expert_ffn, loc = s1->hp.expert_ffn, dim = full->hp.dim;
    assert_int_equal(loc * 2, ef);
    assert_int_equal(s1->shard.expert_ffn, ef);
    assert_int_equal(L1->gate_inp.rows, full->hp.n_expert);
    assert_memory_equal(L1->gate_inp_b, F->gate_inp_b, (size_t)full->hp.n_expert * sizeof(float));
    assert_memory_equal(L1->attn_sinks, F->attn_sinks + s1->hp.n_heads,
                        (size_t)s1->hp.n_heads * sizeof(float));
    assert_non_null(L0->bo);
    assert_non_null(L0->exp_down_b);
    assert_null(L1->bo);
    assert_null(L1->exp_down_b);
    for (int32_t e = 0; e < full->hp.n_expert; e++) {
        assert_int_equal(L1->exp_up[e].rows, loc);
        assert_int_equal(L1->exp_down[e].cols, loc);
        assert_memory_equal(L1->exp_gate_b + e * loc, F->exp_gate_b + e * ef + loc,
                            (size_t)loc * sizeof(float));
        assert_memory_equal(L1->exp_up_b + e * loc, F->exp_up_b + e * ef + loc,
                            (size_t)loc * sizeof(float));
        /* (f32: the weights are not repacked) */
        const float *up = F->exp_up[e].data, *up1 = L1->exp_up[e].data;
        assert_memory_equal(up1, up + loc * dim, (size_t)(loc * dim) * sizeof(float));
        const float *dn = F->exp_down[e].data, *dn1 = L1->exp_down[e].data;
        for (int64_t r = 0; r < dim; r++)
            assert_memory_equal(dn1 + r * loc, dn + r * ef + loc, (size_t)loc * sizeof(float));
    }
    pl_model_destroy(s1);
    pl_model_destroy(s0);
    pl_model_destroy(full);
    unlink(path);
}

/* gemma4's rank 1 (issue 33): each layer's own KV heads halved, the shared-KV layers without
 * K/V, each layer's FFN rows of its own width, the per-layer embedding matrices whole; and the
 * refusals: a layer whose KV heads N does not divide (full layers of 1 KV head), an
 * architecture TP does not cut (bert). */
static void test_gemma4_shapes(void **state) {
    (void)state;
    static const char *const flags[3] = {
        GEMMA4 "--layers 4 --shared-kv-layers 2 --per-layer-dim 8 --ffn-wide 128",
        GEMMA4 "--layers 2 --kv-heads-full 1", "--arch bert --layers 1"};
    char path[3][64];
    for (int i = 0; i < 3; i++) mkmoe(path[i], flags[i]);
    pl_model *full, *s1, *m = NULL;
    assert_int_equal(pl_model_load(path[0], &full), PL_OK);
    assert_int_equal(pl_model_load_shard(path[0], 1, 2, &s1), PL_OK);
    for (int32_t l = 0; l < full->hp.n_layers; l++) {
        const pl_layer_weights *F = &full->layers[l], *L1 = &s1->layers[l];
        assert_int_equal(s1->hp.kv_shapes[l].n_kv_heads * 2, full->hp.kv_shapes[l].n_kv_heads);
        assert_int_equal(s1->hp.kv_shapes[l].head_dim, full->hp.kv_shapes[l].head_dim);
        assert_int_equal(L1->wq.rows * 2, F->wq.rows);
        assert_int_equal(L1->wk.rows * 2, F->wk.rows);
        assert_true((L1->wk.data == NULL) == (l >= 2)); /* layers 2, 3 reuse KV */
        assert_int_equal(L1->w_up.rows * 2, F->w_up.rows); /* 64 and 128 wide */
        assert_int_equal(L1->w_down.cols * 2, F->w_down.cols);
        assert_int_equal(L1->ple_gate.rows, F->ple_gate.rows);
        assert_int_equal(L1->ple_proj.cols, F->ple_proj.cols);
        assert_memory_equal(L1->ple_proj.data, F->ple_proj.data,
                            (size_t)(F->ple_proj.rows * F->ple_proj.cols) * sizeof(float));
        /* rank 1's K rows: the second half (f32, not repacked) */
        if (F->wk.data)
            assert_memory_equal(L1->wk.data, (const float *)F->wk.data + L1->wk.rows * F->wk.cols,
                                (size_t)(L1->wk.rows * F->wk.cols) * sizeof(float));
    }
    assert_int_equal(s1->hp.ffn_dim * 2, full->hp.ffn_dim);
    pl_model_destroy(s1);
    pl_model_destroy(full);
    assert_int_equal(pl_model_load_shard(path[1], 0, 2, &m), PL_ERR_INVALID_ARG);
    assert_null(m);
    assert_non_null(strstr(pl_last_error(), "does not divide the model's 1 KV heads of a layer"));
    assert_int_equal(pl_model_load_shard(path[2], 0, 2, &m), PL_ERR_UNSUPPORTED);
    assert_non_null(strstr(pl_last_error(), "not 'bert'"));
    for (int i = 0; i < 3; i++) unlink(path[i]);
}

/* ---- two ranks as two threads ---- */

enum { MAX_REDUCE = 128 }; /* reductions of one run: 2 per layer and step */

/* The whole model's residual-stream update at each reduction of a run, in order. */
typedef struct {
    float *h[MAX_REDUCE];
    int64_t n[MAX_REDUCE];
    int count;
} tape;

typedef struct {
    pthread_barrier_t bar;
    float *parts[2];       /* each rank's partial sums of the current reduction */
    int skip;              /* a broken reduce: each rank keeps its own partial sums */
    int size;              /* ranks */
    tape *record;          /* size 1: the reduce hook records each update here */
    const tape *follow;    /* size 2: ... checks its sum against this one's and continues from it */
    int calls;             /* reductions so far (rank 0's count) */
    double worst;          /* the largest |sum - whole| / max|whole| seen while following */
    char err[160];         /* what went wrong in a rank's thread (cmocka fails in the main one) */
    int32_t nv[2], v0[2];  /* each rank's vocabulary rows */
} exchange;

typedef struct {
    exchange *ex;
    int rank;
    const pl_model *m;
} rank_ud;

static pl_status reduce(void *ud, float *x, int64_t n) {
    rank_ud *r = ud;
    exchange *ex = r->ex;
    if (ex->size == 1) { /* the whole model: record */
        tape *tp = ex->record;
        if (!tp || tp->count >= MAX_REDUCE) {
            snprintf(ex->err, sizeof ex->err, "more than %d reductions", MAX_REDUCE);
            return PL_ERR_INVALID_ARG;
        }
        tp->h[tp->count] = malloc((size_t)n * sizeof(float));
        memcpy(tp->h[tp->count], x, (size_t)n * sizeof(float));
        tp->n[tp->count++] = n;
        return PL_OK;
    }
    if (ex->skip) return PL_OK;
    memcpy(ex->parts[r->rank], x, (size_t)n * sizeof(float));
    pthread_barrier_wait(&ex->bar);
    for (int64_t i = 0; i < n; i++) x[i] = ex->parts[0][i] + ex->parts[1][i];
    const tape *f = ex->follow;
    if (f) {
        int k = ex->calls; /* rank 1 reads it before rank 0 moves it on (the barrier below) */
        if (k >= f->count || f->n[k] != n) { /* both ranks see it and stop here */
            snprintf(ex->err, sizeof ex->err, "reduction %d of %ld values: the whole model made "
                     "%d reductions", k, (long)n, f->count);
            return PL_ERR_INVALID_ARG;
        }
        if (r->rank == 0) {
            double top = 0, d = 0;
            for (int64_t i = 0; i < n; i++) {
                top = fmax(top, fabs((double)f->h[k][i]));
                d = fmax(d, fabs((double)x[i] - (double)f->h[k][i]));
            }
            d /= top > 0 ? top : 1;
            ex->worst = fmax(ex->worst, d);
            if (!(d <= 1e-4) && !ex->err[0])
                snprintf(ex->err, sizeof ex->err, "reduction %d: the ranks' sum differs from the "
                         "whole model's by %.3g of its largest entry", k, d);
        }
        memcpy(x, f->h[k], (size_t)n * sizeof(float));
    }
    pthread_barrier_wait(&ex->bar); /* nobody overwrites parts before both have summed */
    if (f && r->rank == 0) ex->calls++;
    pthread_barrier_wait(&ex->bar); /* ... nor reads `calls` before it moved on */
    return PL_OK;
}

/* Rank 0 assembles each row from both ranks' vocabulary columns. */
static pl_status gather(void *ud, const float *part, int32_t rows, float *logits) {
    rank_ud *r = ud;
    exchange *ex = r->ex;
    const pl_model_shard *sh = &r->m->shard;
    memcpy(ex->parts[r->rank], part, (size_t)rows * (size_t)sh->n_vocab * sizeof(float));
    ex->nv[r->rank] = sh->n_vocab;
    ex->v0[r->rank] = sh->vocab0;
    pthread_barrier_wait(&ex->bar);
    if (r->rank == 0) {
        int32_t V = ex->nv[0] + ex->nv[1];
        for (int k = 0; k < 2; k++)
            for (int32_t i = 0; i < rows; i++)
                memcpy(logits + (size_t)i * V + ex->v0[k], ex->parts[k] + (size_t)i * ex->nv[k],
                       (size_t)ex->nv[k] * sizeof(float));
    }
    pthread_barrier_wait(&ex->bar);
    return PL_OK;
}

typedef struct {
    pl_model *m;
    pl_threadpool *tp;
    pl_kv_store kv;
    pl_forward_ctx *fwd;
    rank_ud ud;
    const int32_t *tokens;     /* [T + STEPS] the prompt, then the ids to feed (rank 0 picks) */
    int32_t *fed;              /* [T + STEPS] written by rank 0 before each decode's barrier */
    float *logits;             /* [STEPS + 1][n_vocab] rank 0's */
    pl_status st;
} rank_run;

/* A prefill of T tokens, then STEPS greedy decodes; rank 0 gets logits, picks argmax and shares
 * it through `fed` (ranks meet in the reductions, so rank 1 reads it only after rank 0 wrote). */
static void *run_rank(void *arg) {
    rank_run *r = arg;
    const int32_t V = r->m->hp.n_vocab;
    int32_t pos[T], seq_start[2] = {0, T}, ctx[1] = {T}, table[NBLK] = {0, 1, 2, 3}, row = T - 1;
    int64_t slots[T];
    for (int32_t t = 0; t < T; t++) pos[t] = t, slots[t] = t;
    pl_step_batch b = {T, r->fed, pos, slots, 1, seq_start, ctx, table, NBLK, 1, &row, NULL, NULL, NULL};
    r->st = pl_model_forward(r->fwd, &r->kv, &b, r->ud.rank == 0 ? r->logits : NULL);
    for (int32_t s = 0; s < STEPS && r->st == PL_OK; s++) {
        if (r->ud.rank == 0) {
            const float *l = r->logits + (size_t)s * V;
            int32_t best = 0;
            for (int32_t v = 1; v < V; v++)
                if (l[v] > l[best]) best = v;
            r->fed[T + s] = best;
        }
        pthread_barrier_wait(&r->ud.ex->bar);
        int32_t p = T + s, one_seq[2] = {0, 1}, c1[1] = {T + s + 1}, r0 = 0;
        int64_t slot = p;
        pl_step_batch d = {1, r->fed + p, &p, &slot, 1, one_seq, c1, table, NBLK, 1, &r0, NULL, NULL, NULL};
        r->st = pl_model_forward(r->fwd, &r->kv, &d,
                                 r->ud.rank == 0 ? r->logits + (size_t)(s + 1) * V : NULL);
    }
    return NULL;
}

static pl_f16_weights f16_mode; /* --f16-weights of every rank's load (0: the environment's) */

static void setup_rank(rank_run *r, const char *path, int rank, int size) {
    assert_int_equal(pl_model_load_with(path, rank, size, f16_mode, &r->m), PL_OK);
    if (f16_mode == PL_F16_WEIGHTS_BF16) assert_int_equal(r->m->layers[0].wq.type, PL_DT_BF16);
    r->tp = pl_threadpool_create(1);
    const pl_model_hparams *hp = &r->m->hp;
    pl_kv_layout l = {PL_DT_F32, BS, hp->n_kv_heads, hp->head_dim, NBLK};
    assert_int_equal(pl_kv_store_init_shaped(&r->kv, &l, pl_model_kv_tensors(hp),
                                             pl_model_kv_shapes(hp), NULL), PL_OK);
    assert_int_equal(pl_forward_ctx_create(r->m, T, 1, r->tp, &r->fwd), PL_OK);
    r->logits = calloc((size_t)(STEPS + 1) * r->m->hp.n_vocab, sizeof(float));
}

static void destroy_rank(rank_run *r) {
    pl_forward_ctx_destroy(r->fwd);
    pl_kv_store_destroy(&r->kv);
    pl_threadpool_destroy(r->tp);
    pl_model_destroy(r->m);
    free(r->logits);
}

/* Greedy run of the whole model (one thread; recording each reduction's update into `record`
 * when given) or of 2 shards (following `follow` when given: see the top); returns rank 0's
 * logits [STEPS + 1][V] (malloc'ed) and the ids fed. */
static float *run_tp(const char *path, int size, int skip, int32_t *fed, tape *record,
                     const tape *follow, double *worst) {
    static const int32_t prompt[T] = {1, 403, 407, 261, 378, 410, 477, 295, 419, 334, 341, 269};
    memcpy(fed, prompt, sizeof prompt);
    exchange ex;
    memset(&ex, 0, sizeof ex);
    ex.skip = skip;
    ex.size = size;
    ex.record = record;
    ex.follow = follow;
    pthread_barrier_init(&ex.bar, NULL, (unsigned)size);
    rank_run r[2];
    memset(r, 0, sizeof r);
    pthread_t th[2];
    for (int k = 0; k < size; k++) {
        setup_rank(&r[k], path, k, size);
        r[k].ud = (rank_ud){&ex, k, r[k].m};
        r[k].fed = fed;
        pl_forward_tp tp = {reduce, size > 1 ? gather : NULL, &r[k].ud};
        if (size > 1 || record) pl_forward_set_tp(r[k].fwd, &tp);
        size_t most = (size_t)T * r[k].m->hp.dim > (size_t)r[k].m->hp.n_vocab
                          ? (size_t)T * r[k].m->hp.dim : (size_t)r[k].m->hp.n_vocab;
        ex.parts[k] = malloc(most * sizeof(float));
    }
    for (int k = 0; k < size; k++) pthread_create(&th[k], NULL, run_rank, &r[k]);
    for (int k = 0; k < size; k++) pthread_join(th[k], NULL);
    if (ex.err[0]) fail_msg("%s (%s, %d ranks, %s)", ex.err, path, size, pl_isa_name(pl_cpu_isa()));
    for (int k = 0; k < size; k++) assert_int_equal(r[k].st, PL_OK);
    if (worst) *worst = ex.worst;
    float *out = r[0].logits;
    r[0].logits = NULL;
    for (int k = 0; k < size; k++) {
        destroy_rank(&r[k]);
        free(ex.parts[k]);
    }
    pthread_barrier_destroy(&ex.bar);
    return out;
}

static float *run(const char *path, int size, int skip, int32_t *fed) {
    return run_tp(path, size, skip, fed, NULL, NULL, NULL);
}

static double max_diff(const float *a, const float *b, size_t n) {
    double d = 0;
    for (size_t i = 0; i < n; i++) d = fmax(d, fabs((double)a[i] - (double)b[i]));
    return d;
}

/* the shared models, then the mixtures of experts and issue 33's families made by
 * test_sharded_forward */
enum { N_MOE = 5, N_MADE = N_MOE + 8 };
static const char *LOCKSTEP_MODELS[4 + N_MADE] = {
    STORIES, Q8, PL_SHARED_DIR "/models/synth-tiny-f16.gguf",
    PL_SHARED_DIR "/models/synth-tiny-q4_0.gguf"};

static const char *const MODEL_NAMES[4 + N_MADE] = {
    "stories260K", "synth-tiny-q8_0", "synth-tiny-f16", "synth-tiny-q4_0", "qwen3moe f32",
    "qwen3moe q8_0", "mixtral f32", "gpt-oss f32", "gpt-oss mxfp4 experts", "qwen3 f32",
    "mistral3 f32", "gemma2 f32", "gemma3 f32", "gemma4 f32 (per-layer embeddings, shared KV)",
    "gemma4-moe f32", "gemma4 q8_0 (MoE, per-layer embeddings, shared KV)",
    "phi3 f32 (fused QKV and gate/up, LongRoPE)"};

/* The reductions of one step: 2 per layer, 3 for a layer with experts beside a dense FFN. */
static int reductions_per_step(const char *path) {
    pl_model *m;
    assert_int_equal(pl_model_load(path, &m), PL_OK);
    int n = 0;
    for (int32_t l = 0; l < m->hp.n_layers; l++)
        n += m->layers[l].exp_gate && m->layers[l].w_down.data ? 3 : 2;
    pl_model_destroy(m);
    return n;
}

/* The lockstep of the top of the file for one model at the current kernel level. */
static void lockstep(const char *path, const char *name) {
    const size_t n = (size_t)(STEPS + 1) * 512; /* stories260K's and the synth models' vocab */
    int32_t fed1[T + STEPS], fed2[T + STEPS];
    tape tp;
    memset(&tp, 0, sizeof tp);
    double worst = 0;
    float *one = run_tp(path, 1, 0, fed1, &tp, NULL, NULL);
    float *two = run_tp(path, 2, 0, fed2, NULL, &tp, &worst);
    print_message("%s %s lockstep: %d reductions, the ranks' sums within %.3g of the whole "
                  "model's (of the largest entry)\n", pl_isa_name(pl_cpu_isa()), name, tp.count, worst);
    assert_int_equal(tp.count, reductions_per_step(path) * (STEPS + 1));
    assert_memory_equal(one, two, n * sizeof(float));
    assert_memory_equal(fed1, fed2, sizeof fed1);
    free(one), free(two);
    for (int k = 0; k < tp.count; k++) free(tp.h[k]);
}

/* The checks at the top of the file at the current kernel level. */
static void sharded_forward_at_level(void) {
    const size_t n = (size_t)(STEPS + 1) * 512; /* stories260K's and the synth models' vocab */
    int32_t fed1[T + STEPS], fed2[T + STEPS], fed2b[T + STEPS], fedx[T + STEPS];
    const char *isa = pl_isa_name(pl_cpu_isa());

    /* free-running, f32 */
    float *one = run(STORIES, 1, 0, fed1), *two = run(STORIES, 2, 0, fed2);
    float *again = run(STORIES, 2, 0, fed2b), *broken = run(STORIES, 2, 1, fedx);
    double d = max_diff(one, two, n), dx = max_diff(one, broken, n);
    print_message("%s stories260K: TP=2 vs TP=1 logits differ by %.3g at most (no reduce: %.3g)\n",
                  isa, d, dx);
    assert_true(d < 1e-4);
    assert_true(dx > 0.1);
    assert_memory_equal(fed1, fed2, sizeof fed1);
    assert_memory_equal(two, again, n * sizeof(float)); /* deterministic */
    free(one), free(two), free(again), free(broken);

    /* lockstep, every weight type the cuts allow (q8_0 and q4_0 on 32-value blocks) */
    for (size_t mi = 0; mi < sizeof LOCKSTEP_MODELS / sizeof *LOCKSTEP_MODELS; mi++)
        lockstep(LOCKSTEP_MODELS[mi], MODEL_NAMES[mi]);
    /* --f16-weights bf16 (issue 35; the avx512 level only, which the mode needs): each rank
     * rounds its own slices to bf16 (wo's and down's column slices copied out first) */
    if (pl_cpu_avx512bf16()) {
        f16_mode = PL_F16_WEIGHTS_BF16;
        lockstep(LOCKSTEP_MODELS[2], "synth-tiny-f16 as bf16 (--f16-weights bf16)");
        f16_mode = PL_F16_WEIGHTS_DEFAULT;
    }
}

static void test_sharded_forward(void **state) {
    (void)state;
    static const char *const moe_flags[N_MADE] = {
        QWEN3MOE, QWEN3MOE " --type q8_0", "--experts 4 --experts-used 2", GPT_OSS,
        GPT_OSS " --type mxfp4", FAMILIES};
    char moe[N_MADE][64];
    for (int i = 0; i < N_MADE; i++) {
        mkmoe(moe[i], moe_flags[i]);
        LOCKSTEP_MODELS[4 + i] = moe[i];
    }
    unsigned ran = 0;
    for (int level = PL_ISA_SCALAR; level <= (int)pl_cpu_max_isa(); level++) {
        if (!isa_level_runs(level)) continue; /* isa_coverage.h */
        pl_cpu_force_isa((pl_isa)level);
        isa_ran(&ran);
        sharded_forward_at_level();
    }
    pl_cpu_force_isa(pl_cpu_max_isa());
    for (int i = 0; i < N_MADE; i++) unlink(moe[i]);
    isa_coverage_check("sharded forward", ran);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shapes_and_refusals),
        cmocka_unit_test(test_moe_shapes),
        cmocka_unit_test(test_gemma4_shapes),
        cmocka_unit_test(test_sharded_forward),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
