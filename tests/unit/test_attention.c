/* Unit tests for kernels/attention: paged attention against a dense double-precision reference,
 * on every instruction set the machine has, with shuffled block tables in an oversized pool whose
 * unused bytes are NaN (a read of any slot the kernel must not see poisons the output).
 *
 * Error bounds. With f32 KV the kernel and the dense reference see the same numbers; the kernel's
 * f32 rounding (dots over <= 512 terms, sums over <= 4096 probabilities <= 1, outputs |o| <= 1)
 * stays far below 1e-5. With f16 KV the kernel widens the stored halves to f32 exactly, so against
 * the dense reference computed on the f16-ROUNDED K/V it makes the same f32 rounding errors and no
 * others: the same 1e-5 bound holds. Against the unrounded K/V the f16 storage itself adds an
 * error: with eps_s = max |s - s~| (score change from rounding K) and eps_v = max |v - v~|,
 *     |o - o~| <= (exp(2 eps_s) - 1) max|v| + eps_v,
 * because every probability moves by a factor in [exp(-2 eps_s), exp(2 eps_s)]. The test computes
 * that bound per case and checks it (plus 1e-5); here it is ~1e-3..1e-2 while the observed error
 * is a few 1e-4.
 *
 * bf16, q8_0 and q4_0 caches are held to the same 1e-5 against the dense reference computed on
 * what the kernel really multiplies: the K/V rows as stored (rounded, or quantized and
 * dequantized with the library's quantizers, whose bytes test_kv_write_readback pins) and the
 * query as the kernel takes it (bf16-rounded, or quantized to q8_0 for q8_0 / q4_0 keys, as
 * llama.cpp's flash attention does). What quantization costs against f32 is an accuracy figure,
 * not a kernel property: docs/ACCURACY.md.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "base/fp16.h"
#include "base/rng.h"
#include "base/threadpool.h"
#include "kernels/attention.h"
#include "kernels/cpu.h"
#include "kernels/quant.h"
#include "isa_coverage.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_SEQS = 6 };
static const double TOL = 1e-5;

typedef struct {
    pl_kv_layout l;
    int32_t n_heads;
    int32_t n_seqs;
    int32_t n_tokens;
    int32_t max_blocks;
    int32_t seq_start[MAX_SEQS + 1];
    int32_t ctx[MAX_SEQS];
    int32_t *btab;          /* [n_seqs][max_blocks] */
    void *kc, *vc;          /* the pool: one layer's K and V caches */
    float *k[MAX_SEQS];     /* [ctx][n_kv_heads][head_dim] as written (unrounded) */
    float *v[MAX_SEQS];
    float *ks[MAX_SEQS];    /* the same as stored: rounded to f16 / bf16 or quantized and back */
    float *vs[MAX_SEQS];
    float *q;               /* [n_tokens][n_heads][head_dim] */
    float *out;
    float scale;
    float softcap; /* Gemma 2's logit soft-capping (0: none) */
    int32_t window;         /* pl_attn_args.window (set_window) */
} acase;

typedef struct {
    pl_threadpool *tp[3]; /* 1, 2 and 3 threads */
} fixture;

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    assert_non_null(p);
    return p;
}

static float round_f16(float x) { return pl_f16_to_f32(pl_f32_to_f16(x)); }

static const pl_dtype DTYPES[] = {PL_DT_F32, PL_DT_F16, PL_DT_BF16, PL_DT_Q8_0, PL_DT_Q4_0};
enum { N_DTYPES = 5 };
static int quantized(pl_dtype dt) { return dt == PL_DT_Q8_0 || dt == PL_DT_Q4_0; }

/* What the cache holds for a head row x, in f32: rounded or quantized and dequantized with the
 * library's llama.cpp-compatible quantizers (test_kv_write_readback pins the bytes). */
static void stored_row(pl_dtype dt, const float *x, float *y, int32_t hd) {
    pl_block_q8_0 q8[512 / PL_QK];
    pl_block_q4_0 q4[512 / PL_QK];
    switch (dt) {
    case PL_DT_F16: for (int32_t d = 0; d < hd; d++) y[d] = round_f16(x[d]); return;
    case PL_DT_BF16: for (int32_t d = 0; d < hd; d++) y[d] = pl_bf16_to_f32(pl_f32_to_bf16(x[d])); return;
    case PL_DT_Q8_0: pl_quantize_q8_0_act(x, q8, hd); pl_dequant_q8_0(q8, y, hd); return;
    case PL_DT_Q4_0: pl_quantize_q4_0_ref(x, q4, hd); pl_dequant_q4_0(q4, y, hd); return;
    default: memcpy(y, x, sizeof(float) * (size_t)hd); return;
    }
}

/* The query as the kernel uses it with this cache (as llama.cpp's flash attention): bf16-rounded
 * for bf16 keys, quantized to q8_0 (and back) for q8_0 / q4_0 keys; as is otherwise. */
static void query_as_kernel(pl_dtype dt, float *q, int32_t hd) {
    pl_block_q8_0 q8[512 / PL_QK];
    if (dt == PL_DT_BF16) stored_row(dt, q, q, hd);
    if (quantized(dt)) {
        pl_quantize_q8_0_act(q, q8, hd);
        pl_dequant_q8_0(q8, q, hd);
    }
}

static void store_seq(acase *c, int32_t i) {
    const int32_t hd = c->l.head_dim;
    const size_t rows = (size_t)c->ctx[i] * c->l.n_kv_heads;
    c->ks[i] = xmalloc(sizeof(float) * rows * hd);
    c->vs[i] = xmalloc(sizeof(float) * rows * hd);
    for (size_t r = 0; r < rows; r++) {
        stored_row(c->l.dtype, c->k[i] + r * hd, c->ks[i] + r * hd, hd);
        stored_row(c->l.dtype, c->v[i] + r * hd, c->vs[i] + r * hd, hd);
    }
}

/* Builds a case: scattered block tables, K/V written through pl_kv_write in shuffled order. The
 * layout (tables, write order) comes from rng, the numbers (K, V, q) from data_seed alone, so two
 * builds with one data_seed and different block sizes hold the same sequences. */
static void build(acase *c, pl_rng *rng, uint64_t data_seed, pl_dtype dt, int32_t bs,
                  int32_t nkv, int32_t G, int32_t hd, int32_t n_seqs, const int32_t *ctx,
                  const int32_t *q_len) {
    memset(c, 0, sizeof *c);
    pl_rng drng;
    pl_rng_seed(&drng, data_seed);
    c->n_heads = nkv * G;
    c->n_seqs = n_seqs;
    c->scale = 1.0f / sqrtf((float)hd);
    int32_t need = 0, maxb = 1;
    for (int32_t i = 0; i < n_seqs; i++) {
        int32_t nb = (ctx[i] + bs - 1) / bs;
        need += nb;
        maxb = nb > maxb ? nb : maxb;
        c->ctx[i] = ctx[i];
        c->seq_start[i + 1] = c->seq_start[i] + q_len[i];
    }
    c->n_tokens = c->seq_start[n_seqs];
    c->max_blocks = maxb + (int32_t)pl_rng_below(rng, 3);
    c->l = (pl_kv_layout){.dtype = dt, .block_size = bs, .n_kv_heads = nkv, .head_dim = hd,
                          .num_blocks = need + need / 2 + 3};
    size_t bytes = pl_kv_block_bytes(&c->l) * (size_t)c->l.num_blocks;
    c->kc = xmalloc(bytes);
    c->vc = xmalloc(bytes);
    memset(c->kc, 0xff, bytes); /* NaN in f16 and f32 */
    memset(c->vc, 0xff, bytes);

    int32_t *perm = xmalloc(sizeof(int32_t) * (size_t)c->l.num_blocks);
    for (int32_t i = 0; i < c->l.num_blocks; i++) perm[i] = i;
    for (int32_t i = (int32_t)c->l.num_blocks - 1; i > 0; i--) {
        int32_t j = (int32_t)pl_rng_below(rng, (uint64_t)i + 1), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    c->btab = xmalloc(sizeof(int32_t) * (size_t)(n_seqs * c->max_blocks));
    int32_t next = 0, total = 0;
    for (int32_t i = 0; i < n_seqs; i++) {
        int32_t nb = (ctx[i] + bs - 1) / bs;
        for (int32_t b = 0; b < c->max_blocks; b++)
            c->btab[i * c->max_blocks + b] = b < nb ? perm[next++] : INT32_MAX; /* never read */
        total += ctx[i];
    }
    free(perm);

    /* Every cached token plus a few that must be skipped (slot -1), in a shuffled order. */
    const size_t te = (size_t)nkv * hd;
    int32_t n_w = total + 3;
    float *kw = xmalloc(sizeof(float) * te * (size_t)n_w), *vw = xmalloc(sizeof(float) * te * (size_t)n_w);
    int64_t *slots = xmalloc(sizeof(int64_t) * (size_t)n_w);
    int32_t *order = xmalloc(sizeof(int32_t) * (size_t)n_w);
    for (int32_t t = 0; t < n_w; t++) order[t] = t;
    for (int32_t t = n_w - 1; t > 0; t--) {
        int32_t j = (int32_t)pl_rng_below(rng, (uint64_t)t + 1), x = order[t];
        order[t] = order[j];
        order[j] = x;
    }
    int32_t flat = 0;
    for (int32_t i = 0; i < n_seqs; i++) {
        c->k[i] = xmalloc(sizeof(float) * te * (size_t)ctx[i]);
        c->v[i] = xmalloc(sizeof(float) * te * (size_t)ctx[i]);
        for (int32_t p = 0; p < ctx[i]; p++, flat++) {
            int32_t w = order[flat];
            for (size_t e = 0; e < te; e++) {
                kw[(size_t)w * te + e] = c->k[i][(size_t)p * te + e] = (float)pl_rng_normal(&drng);
                vw[(size_t)w * te + e] = c->v[i][(size_t)p * te + e] =
                    (float)(2 * pl_rng_uniform(&drng) - 1);
            }
            slots[w] = (int64_t)c->btab[i * c->max_blocks + p / bs] * bs + p % bs;
        }
    }
    for (; flat < n_w; flat++) {
        int32_t w = order[flat];
        for (size_t e = 0; e < te; e++) kw[(size_t)w * te + e] = vw[(size_t)w * te + e] = 1e6f;
        slots[w] = -1;
    }
    pl_kv_write(&c->l, c->kc, c->vc, kw, vw, slots, n_w);
    free(kw);
    free(vw);
    free(slots);
    free(order);

    for (int32_t i = 0; i < n_seqs; i++) store_seq(c, i);
    size_t qn = (size_t)c->n_tokens * c->n_heads * hd;
    c->q = xmalloc(sizeof(float) * qn);
    c->out = xmalloc(sizeof(float) * qn);
    for (size_t e = 0; e < qn; e++) c->q[e] = 2.0f * (float)pl_rng_normal(&drng);
}

static void destroy(acase *c) {
    free(c->btab);
    free(c->kc);
    free(c->vc);
    for (int32_t i = 0; i < c->n_seqs; i++) {
        free(c->k[i]);
        free(c->v[i]);
        free(c->ks[i]);
        free(c->vs[i]);
    }
    free(c->q);
    free(c->out);
}

static pl_attn_args args_of(const acase *c) {
    return (pl_attn_args){.q = c->q, .out = c->out, .n_heads = c->n_heads, .scale = c->scale,
                          .n_seqs = c->n_seqs, .seq_start = c->seq_start,
                          .context_lens = c->ctx, .block_tables = c->btab,
                          .max_blocks = c->max_blocks, .k_cache = c->kc, .v_cache = c->vc,
                          .softcap = c->softcap, .window = c->window};
}

/* The first position a query at pos sees under window W (0: none). */
static int32_t win_lo(int32_t W, int32_t pos) { return W > 0 && pos - W + 1 > 0 ? pos - W + 1 : 0; }

/* Gives c a sliding window W and "frees" every block that is wholly before the window of the
 * sequence's first query row, as the KV manager does: its table entry becomes -1 (the manager's
 * placeholder), so a kernel that looks one up fails its range check (aborts the test), and the
 * data of the block it named is overwritten with NaN (the pool may have reused it), so a read of
 * a stale row through an old pointer poisons the output. */
static void set_window(acase *c, int32_t W) {
    c->window = W;
    const int32_t bs = c->l.block_size;
    for (int32_t i = 0; i < c->n_seqs; i++) {
        int32_t first = c->ctx[i] - (c->seq_start[i + 1] - c->seq_start[i]);
        for (int32_t b = 0; b < win_lo(W, first) / bs; b++) {
            int32_t *e = &c->btab[i * c->max_blocks + b];
            size_t bb = pl_kv_block_bytes(&c->l);
            memset((char *)c->kc + (size_t)*e * bb, 0xff, bb);
            memset((char *)c->vc + (size_t)*e * bb, 0xff, bb);
            *e = -1;
        }
    }
}

/* Dense attention in double over the contiguous K/V, as stored (rounded, quantized) when
 * `rounded`. */
static void dense_ref(const acase *c, int rounded, double *out) {
    const int32_t hd = c->l.head_dim, nkv = c->l.n_kv_heads, G = c->n_heads / nkv;
    for (int32_t i = 0; i < c->n_seqs; i++) {
        const int32_t q_len = c->seq_start[i + 1] - c->seq_start[i];
        double *s = xmalloc(sizeof(double) * (size_t)c->ctx[i]);
        for (int32_t r = 0; r < q_len; r++) {
            const int32_t pos = c->ctx[i] - q_len + r;
            for (int32_t h = 0; h < c->n_heads; h++) {
                const size_t row = ((size_t)(c->seq_start[i] + r) * c->n_heads + h) * hd;
                float q[512];
                memcpy(q, c->q + row, sizeof(float) * (size_t)hd);
                if (rounded) query_as_kernel(c->l.dtype, q, hd);
                double mx = -INFINITY, sum = 0;
                const int32_t lo = win_lo(c->window, pos); /* the dense mask: p - p' < W */
                for (int32_t p = lo; p <= pos; p++) {
                    const float *k = (rounded ? c->ks[i] : c->k[i]) + ((size_t)p * nkv + h / G) * hd;
                    double dot = 0;
                    for (int32_t d = 0; d < hd; d++) dot += (double)q[d] * k[d];
                    s[p] = dot * c->scale;
                    if (c->softcap > 0) s[p] = c->softcap * tanh(s[p] / c->softcap);
                    mx = s[p] > mx ? s[p] : mx;
                }
                for (int32_t d = 0; d < hd; d++) out[row + d] = 0;
                for (int32_t p = lo; p <= pos; p++) {
                    double w = exp(s[p] - mx);
                    sum += w;
                    const float *v = (rounded ? c->vs[i] : c->v[i]) + ((size_t)p * nkv + h / G) * hd;
                    for (int32_t d = 0; d < hd; d++) out[row + d] += w * v[d];
                }
                for (int32_t d = 0; d < hd; d++) out[row + d] /= sum;
            }
        }
        free(s);
    }
}

/* The f16 storage bound of the header comment: (exp(2 eps_s) - 1) max|v| + eps_v. */
static double f16_bound(const acase *c) {
    const int32_t hd = c->l.head_dim, nkv = c->l.n_kv_heads, G = c->n_heads / nkv;
    double eps_s = 0, eps_v = 0, vmax = 0;
    for (int32_t i = 0; i < c->n_seqs; i++) {
        for (size_t e = 0; e < (size_t)c->ctx[i] * nkv * hd; e++) {
            double v = c->v[i][e];
            eps_v = fmax(eps_v, fabs(v - round_f16(c->v[i][e])));
            vmax = fmax(vmax, fabs(v));
        }
        for (int32_t t = c->seq_start[i]; t < c->seq_start[i + 1]; t++)
            for (int32_t h = 0; h < c->n_heads; h++)
                for (int32_t p = 0; p < c->ctx[i]; p++) {
                    const float *q = c->q + ((size_t)t * c->n_heads + h) * hd;
                    const float *k = c->k[i] + ((size_t)p * nkv + h / G) * hd;
                    double ds = 0;
                    for (int32_t d = 0; d < hd; d++) ds += fabs(q[d]) * fabs(k[d] - round_f16(k[d]));
                    eps_s = fmax(eps_s, ds * c->scale);
                }
    }
    return (exp(2 * eps_s) - 1) * vmax + eps_v;
}

static unsigned case_isas; /* the levels check_case ran */

static double max_err(const float *x, const double *ref, size_t n) {
    double e = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)x[i] - ref[i]);
        if (!(d <= e)) e = isnan(d) ? INFINITY : d;
    }
    return e;
}

static size_t out_elems(const acase *c) {
    return (size_t)c->n_tokens * c->n_heads * c->l.head_dim;
}

static double worst_f16_ratio; /* observed error vs unrounded / bound, for the report */
static double worst_err;       /* largest error vs the dense reference seen so far */

/* Every ISA x thread count, and the scalar reference, against the dense reference. */
static void check_case(const fixture *fx, acase *c) {
    const size_t n = out_elems(c);
    double *ref = xmalloc(sizeof(double) * n);
    float *first = xmalloc(sizeof(float) * n);
    const int f16 = c->l.dtype == PL_DT_F16;
    dense_ref(c, 1, ref);
    pl_attn_args a = args_of(c);

    pl_paged_attention_ref(&c->l, &a);
    double e = max_err(c->out, ref, n);
    if (!(e <= TOL)) fprintf(stderr, "ref: max error %g\n", e);
    assert_true(e <= TOL);

    for (int isa = PL_ISA_SCALAR; isa <= (int)pl_cpu_max_isa(); isa++) {

        if (!isa_level_runs(isa)) continue; /* isa_coverage.h */
        pl_cpu_force_isa((pl_isa)isa);
        isa_ran(&case_isas);
        for (int t = 0; t < 3; t++) {
            memset(c->out, 0, sizeof(float) * n);
            pl_paged_attention(fx->tp[t], &c->l, &a);
            if (t == 0) {
                e = max_err(c->out, ref, n);
                if (!(e <= TOL))
                    fprintf(stderr, "%s: max error %g (bs %d hd %d G %d %s window %d)\n",
                            pl_isa_name((pl_isa)isa), e, c->l.block_size, c->l.head_dim,
                            c->n_heads / c->l.n_kv_heads, pl_dtype_name(c->l.dtype), c->window);
                assert_true(e <= TOL);
                worst_err = fmax(worst_err, e);
                memcpy(first, c->out, sizeof(float) * n);
            } else {
                assert_memory_equal(first, c->out, sizeof(float) * n); /* bitwise, any threads */
            }
        }
    }
    pl_cpu_force_isa(pl_cpu_max_isa());

    if (f16) { /* against the unrounded K/V: the storage bound */
        double *raw = xmalloc(sizeof(double) * n);
        dense_ref(c, 0, raw);
        double bound = f16_bound(c) + TOL;
        e = max_err(c->out, raw, n);
        assert_true(e <= bound);
        worst_f16_ratio = fmax(worst_f16_ratio, e / bound);
        free(raw);
    }
    free(ref);
    free(first);
}

/* ---------------------------------------------------------------- tests */

static void test_explicit_cases(void **state) {
    const fixture *fx = *state;
    pl_rng rng;
    pl_rng_seed(&rng, 1);
    struct {
        pl_dtype dt;
        int32_t bs, nkv, G, hd, n;
        int32_t ctx[4], q[4];
    } cases[] = {
        {PL_DT_F32, 1, 1, 8, 36, 1, {1}, {1}},                 /* smallest context */
        {PL_DT_F16, 256, 2, 4, 128, 1, {4096}, {1}},           /* longest, big blocks */
        {PL_DT_F32, 1, 1, 1, 64, 1, {4096}, {1}},              /* 4096 one-token blocks */
        {PL_DT_F16, 16, 1, 2, 36, 1, {100}, {100}},            /* a whole prompt, tails */
        {PL_DT_F32, 2, 2, 1, 44, 2, {70, 33}, {70, 5}},        /* head_dim 12 mod 16 */
        {PL_DT_F16, 32, 1, 4, 4, 2, {65, 3}, {9, 1}},          /* head_dim 4: tail only */
        {PL_DT_F32, 16, 1, 2, 512, 2, {300, 17}, {40, 1}},     /* largest head_dim (Gemma 4) */
        {PL_DT_F16, 16, 1, 40, 64, 1, {50}, {3}},              /* group > chunk size */
        {PL_DT_F32, 32, 2, 8, 128, 4, {1, 32, 33, 257}, {1, 32, 1, 20}},
        {PL_DT_Q8_0, 1, 1, 8, 32, 2, {1, 70}, {1, 70}},        /* quantized, one-token blocks */
        {PL_DT_Q4_0, 16, 2, 4, 64, 2, {100, 33}, {40, 1}},
        {PL_DT_Q8_0, 256, 1, 4, 128, 1, {2000}, {1}},          /* long decode, big blocks */
        {PL_DT_Q4_0, 1, 1, 2, 512, 2, {300, 17}, {40, 1}},     /* largest head_dim (Gemma 4) */
        {PL_DT_BF16, 16, 1, 2, 36, 2, {100, 65}, {100, 1}},    /* bf16 with tails */
        {PL_DT_BF16, 2, 2, 1, 44, 1, {70}, {7}},               /* head_dim 12 mod 16 */
        {PL_DT_Q8_0, 16, 1, 40, 96, 1, {50}, {3}},             /* group > chunk size */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        acase c;
        build(&c, &rng, 100 + i, cases[i].dt, cases[i].bs, cases[i].nkv, cases[i].G, cases[i].hd,
              cases[i].n, cases[i].ctx, cases[i].q);
        check_case(fx, &c);
        destroy(&c);
    }
    isa_coverage_check("paged attention, explicit cases", case_isas);
}

/* A seeded random sample of the space; each case's dense work is capped to keep this fast. */
static void test_random_cases(void **state) {
    const fixture *fx = *state;
    static const int32_t bss[] = {1, 2, 16, 32, 256}, Gs[] = {1, 2, 4, 8}, hds[] = {64, 128, 36};
    pl_rng rng;
    pl_rng_seed(&rng, 20240601);
    int32_t ctx_min = 4096, ctx_max = 0;
    for (int it = 0; it < 40; it++) {
        pl_dtype dt = DTYPES[it % N_DTYPES];
        int32_t bs = bss[pl_rng_below(&rng, 5)], G = Gs[pl_rng_below(&rng, 4)];
        int32_t hd = hds[pl_rng_below(&rng, 3)], nkv = 1 + (int32_t)pl_rng_below(&rng, 2);
        int32_t n = 1 + (int32_t)pl_rng_below(&rng, 4), ctx[4], q[4];
        int64_t work = 0;
        for (int32_t i = 0; i < n; i++) {
            ctx[i] = (int32_t)exp(pl_rng_uniform(&rng) * log(4096.0)); /* log-uniform 1..4096 */
            ctx[i] = ctx[i] < 1 ? 1 : ctx[i] > 4096 ? 4096 : ctx[i];
            int prefill = pl_rng_below(&rng, 2) == 0;
            q[i] = prefill ? 1 + (int32_t)pl_rng_below(&rng, (uint64_t)(ctx[i] < 48 ? ctx[i] : 48)) : 1;
            work += (int64_t)q[i] * ctx[i];
        }
        /* cap rows x context x heads x head_dim at ~12M multiply-adds */
        while (work * nkv * G * hd > 12000000) {
            int32_t big = 0; /* halve the costliest sequence */
            for (int32_t i = 1; i < n; i++)
                if ((int64_t)q[i] * ctx[i] > (int64_t)q[big] * ctx[big]) big = i;
            work -= (int64_t)q[big] * ctx[big];
            ctx[big] = ctx[big] > 1 ? ctx[big] / 2 : 1;
            q[big] = q[big] > ctx[big] ? ctx[big] : q[big];
            work += (int64_t)q[big] * ctx[big];
        }
        for (int32_t i = 0; i < n; i++) {
            ctx_min = ctx[i] < ctx_min ? ctx[i] : ctx_min;
            ctx_max = ctx[i] > ctx_max ? ctx[i] : ctx_max;
        }
        if (quantized(dt) && hd % 32) hd = 96;
        acase c;
        build(&c, &rng, pl_rng_next(&rng), dt, bs, nkv, G, hd, n, ctx, q);
        check_case(fx, &c);
        destroy(&c);
    }
    printf("    contexts %d..%d; worst error %.2g; f16 KV: worst error vs unrounded K/V = %.3f "
           "of the bound\n", ctx_min, ctx_max, worst_err, worst_f16_ratio);
    isa_coverage_check("paged attention, random cases", case_isas);
}

/* Soft-capped scores (Gemma 2: cap * tanh(score / cap) before the softmax) on every ISA and
 * dtype against the dense reference; the cap is small enough to change every output. */
static void test_softcap(void **state) {
    const fixture *fx = *state;
    pl_rng rng;
    pl_rng_seed(&rng, 77);
    for (int it = 0; it < (int)N_DTYPES; it++) {
        int32_t ctx[2] = {70, 33}, q[2] = {1, 9};
        acase c, plain;
        build(&c, &rng, 5, DTYPES[it], 16, 2, 2, 64, 2, ctx, q);
        build(&plain, &rng, 5, DTYPES[it], 16, 2, 2, 64, 2, ctx, q);
        c.softcap = 0.05f;
        if (it % 2) { /* with a window too (Gemma 2's local layers) */
            set_window(&c, 24);
            set_window(&plain, 24);
        }
        check_case(fx, &c);
        pl_attn_args a = args_of(&plain);
        pl_paged_attention(fx->tp[0], &plain.l, &a);
        double diff = 0;
        for (size_t i = 0; i < out_elems(&c); i++) diff = fmax(diff, fabs(c.out[i] - plain.out[i]));
        assert_true(diff > 1e-3); /* the cap matters */
        destroy(&c);
        destroy(&plain);
    }
}

/* A head row as the cache must hold it: f32 bytes, f16/bf16 rounded to nearest even, q8_0 and
 * q4_0 blocks as llama.cpp's CPU backend quantizes its K/V rows. */
static void encode_row(pl_dtype dt, const float *x, unsigned char *y, int32_t hd) {
    for (int32_t d = 0; d < hd && (dt == PL_DT_F16 || dt == PL_DT_BF16); d++) {
        uint16_t h = dt == PL_DT_F16 ? pl_f32_to_f16(x[d]) : pl_f32_to_bf16(x[d]);
        memcpy(y + 2 * d, &h, 2);
    }
    if (dt == PL_DT_F32) memcpy(y, x, sizeof(float) * (size_t)hd);
    if (dt == PL_DT_Q8_0) pl_quantize_q8_0_act(x, (pl_block_q8_0 *)(void *)y, hd);
    if (dt == PL_DT_Q4_0) pl_quantize_q4_0_ref(x, (pl_block_q4_0 *)(void *)y, hd);
}


/* pl_kv_write puts every row at cache[block][head][offset] in its dtype's format (f32 exact,
 * f16/bf16 rounded to nearest even like base/fp16.h, q8_0/q4_0 blocks of 32), skips slot -1 and
 * touches nothing else; block bytes follow the dtype. */
static void test_kv_write_readback(void **state) {
    (void)state;
    pl_rng rng;
    pl_rng_seed(&rng, 7);
    unsigned ran = 0;
    for (int di = 0; di < N_DTYPES; di++)
        for (int isa = PL_ISA_SCALAR; isa <= (int)pl_cpu_max_isa(); isa++) {
            if (!isa_level_runs(isa)) continue; /* isa_coverage.h */
            pl_cpu_force_isa((pl_isa)isa);
            isa_ran(&ran);
            const pl_dtype dt = DTYPES[di];
            const int32_t hd = quantized(dt) ? 64 : 44;
            pl_kv_layout l = {.dtype = dt, .block_size = 3, .n_kv_heads = 2, .head_dim = hd,
                              .num_blocks = 7};
            static const size_t per32[] = {128, 64, 64, 34, 18}; /* bytes per 32 values */
            const size_t rb = per32[di] * (size_t)hd / 32, bytes = pl_kv_block_bytes(&l) * 7;
            assert_int_equal(pl_kv_row_bytes(&l), rb);
            assert_int_equal(pl_kv_block_bytes(&l), rb * 2 * 3);
            const int32_t n = 12, te = 2 * hd;
            unsigned char *kc = xmalloc(bytes), *vc = xmalloc(bytes);
            unsigned char *ke = xmalloc(bytes), *ve = xmalloc(bytes);
            memset(kc, 0xab, bytes);
            memset(vc, 0xcd, bytes);
            memcpy(ke, kc, bytes);
            memcpy(ve, vc, bytes);
            float *k = xmalloc(sizeof(float) * (size_t)(n * te));
            float *v = xmalloc(sizeof(float) * (size_t)(n * te));
            static const float edge[] = {65520.0f, 65519.0f, 1.0f + 0x1.0p-11f, 1.0f + 3 * 0x1.0p-11f,
                                         0x1.0p-25f, 0x1.8p-25f, -0x1.0p-24f, 1e-6f, -0.0f};
            for (int32_t e = 0; e < n * te; e++) {
                k[e] = e < 9 ? edge[e] : (float)(100 * pl_rng_normal(&rng));
                v[e] = (float)pl_rng_normal(&rng);
            }
            int64_t slots[12] = {20, -1, 0, 5, 6, 13, -1, 2, 19, 9, 14, 4};
            pl_kv_write(&l, kc, vc, k, v, slots, n);
            for (int32_t t = 0; t < n; t++) {
                if (slots[t] < 0) continue;
                int64_t b = slots[t] / 3, off = slots[t] % 3;
                for (int32_t h = 0; h < 2; h++) {
                    size_t at = (size_t)((b * 2 + h) * 3 + off) * rb;
                    encode_row(dt, k + t * te + h * hd, ke + at, hd);
                    encode_row(dt, v + t * te + h * hd, ve + at, hd);
                }
            }
            assert_memory_equal(kc, ke, bytes);
            assert_memory_equal(vc, ve, bytes);
            if (dt == PL_DT_F16) { /* the edge values really went through the rounding under test */
                pl_f16 h0;
                memcpy(&h0, kc + (size_t)((6 * 2 + 0) * 3 + 2) * 44 * 2, 2); /* token 0: slot 20 */
                assert_int_equal(h0, 0x7c00);
            }
            free(kc); free(vc); free(ke); free(ve); free(k); free(v);
        }
    pl_cpu_force_isa(pl_cpu_max_isa());
    isa_coverage_check("kv write and readback", ran);
}

/* The quantized cache rounds as llama.cpp stores K/V: q8_0 with multiplier 127 / amax and ties
 * to even (its x86 quantize_row_q8_0; the reference roundf would give 3 for 2.5), q4_0 with
 * d = max / -8 and (int)(x / d + 8.5) truncated (quantize_row_q4_0_ref); bf16 nearest even. A
 * head_dim that is not a multiple of 32 is refused for q8_0 and q4_0, as llama.cpp does. */
static void test_kv_quant_rounding(void **state) {
    (void)state;
    float x[32] = {127.0f, 2.5f, 3.5f, -2.5f, 0.5f, -126.5f};
    pl_kv_layout l = {.dtype = PL_DT_Q8_0, .block_size = 1, .n_kv_heads = 1, .head_dim = 32,
                      .num_blocks = 1};
    pl_block_q8_0 k8, v8;
    int64_t slot = 0;
    pl_kv_write(&l, &k8, &v8, x, x, &slot, 1);
    assert_int_equal(k8.d, pl_f32_to_f16(1.0f));
    assert_int_equal(k8.qs[0], 127);
    assert_int_equal(k8.qs[1], 2);
    assert_int_equal(k8.qs[2], 4);
    assert_int_equal(k8.qs[3], -2);
    assert_int_equal(k8.qs[4], 0);
    assert_int_equal(k8.qs[5], -126);
    float y[32] = {-8.0f, 0.5f, 0.49f, 7.0f, 7.6f, -7.5f};
    l.dtype = PL_DT_Q4_0;
    pl_block_q4_0 k4, v4;
    pl_kv_write(&l, &k4, &v4, y, y, &slot, 1);
    assert_int_equal(k4.d, pl_f32_to_f16(1.0f)); /* -8 / -8 */
    static const int want[6] = {-8, 1, 0, 7, 7, -7}; /* q - 8; 7.6 clamps at q = 15 */
    for (int j = 0; j < 6; j++) assert_int_equal((k4.qs[j] & 15) - 8, want[j]);
    l.dtype = PL_DT_BF16;
    pl_bf16 kb[32], vb[32];
    float z[32] = {1.0f + 0x1.0p-8f, 1.0f + 0x1.8p-8f};
    pl_kv_write(&l, kb, vb, z, z, &slot, 1);
    assert_int_equal(kb[0], 0x3f80); /* tie to even */
    assert_int_equal(kb[1], 0x3f81); /* above the tie: up */
    l.head_dim = 8;
    for (int q = 0; q < 2; q++) {
        l.dtype = q ? PL_DT_Q4_0 : PL_DT_Q8_0;
        assert_non_null(pl_kv_layout_problem(&l));
        assert_int_equal(pl_kv_block_bytes(&l), 0);
    }
    l.dtype = PL_DT_BF16;
    assert_null(pl_kv_layout_problem(&l));
}

/* Whole blocks move in K and V; other blocks keep their bytes; pools may differ in size. */
static void test_copy_blocks(void **state) {
    (void)state;
    pl_rng rng;
    pl_rng_seed(&rng, 9);
    pl_kv_layout a = {.dtype = PL_DT_F16, .block_size = 16, .n_kv_heads = 2, .head_dim = 36,
                      .num_blocks = 10};
    pl_kv_layout b = a;
    b.num_blocks = 4;
    const size_t bb = pl_kv_block_bytes(&a);
    unsigned char *ak = xmalloc(bb * 10), *av = xmalloc(bb * 10);
    unsigned char *bk = xmalloc(bb * 4), *bv = xmalloc(bb * 4);
    unsigned char *snap_k = xmalloc(bb * 10), *snap_v = xmalloc(bb * 10);
    for (size_t i = 0; i < bb * 10; i++) {
        ak[i] = (unsigned char)pl_rng_next(&rng);
        av[i] = (unsigned char)pl_rng_next(&rng);
    }
    memset(bk, 0, bb * 4);
    memset(bv, 0, bb * 4);
    memcpy(snap_k, ak, bb * 10);
    memcpy(snap_v, av, bb * 10);

    /* copy-on-write inside one pool: 3 -> 7, 0 -> 9, 5 -> 5 (no-op) */
    int32_t src[] = {3, 0, 5}, dst[] = {7, 9, 5};
    pl_kv_copy_blocks(&a, ak, av, ak, av, src, dst, 3);
    for (int32_t blk = 0; blk < 10; blk++) {
        int32_t from = blk == 7 ? 3 : blk == 9 ? 0 : blk;
        assert_memory_equal(ak + (size_t)blk * bb, snap_k + (size_t)from * bb, bb);
        assert_memory_equal(av + (size_t)blk * bb, snap_v + (size_t)from * bb, bb);
    }
    /* swap out into a smaller pool and back into other blocks */
    int32_t out_src[] = {9, 2, 8}, out_dst[] = {3, 0, 1};
    pl_kv_copy_blocks_between(&a, ak, av, &b, bk, bv, out_src, out_dst, 3);
    assert_memory_equal(bk + 3 * bb, ak + 9 * bb, bb);
    assert_memory_equal(bv + 0 * bb, av + 2 * bb, bb);
    int32_t in_src[] = {1, 3}, in_dst[] = {4, 6};
    pl_kv_copy_blocks_between(&b, bk, bv, &a, ak, av, in_src, in_dst, 2);
    assert_memory_equal(ak + 4 * bb, snap_k + 8 * bb, bb);
    assert_memory_equal(av + 6 * bb, snap_v + 0 * bb, bb);
    free(ak); free(av); free(bk); free(bv); free(snap_k); free(snap_v);
}

/* One sequence of c, alone: its rows of q/out, its table row, its context. */
static void run_alone(pl_threadpool *tp, const acase *c, int32_t i, int32_t row0, int32_t q_len,
                      int32_t ctx, float *out) {
    int32_t ss[2] = {0, q_len};
    const size_t row = (size_t)c->n_heads * c->l.head_dim;
    pl_attn_args a = args_of(c);
    a.q = c->q + (size_t)(c->seq_start[i] + row0) * row;
    a.out = out;
    a.n_seqs = 1;
    a.seq_start = ss;
    a.context_lens = &ctx;
    a.block_tables = c->btab + (size_t)i * c->max_blocks;
    pl_paged_attention(tp, &c->l, &a);
}

/* Output rows are bitwise the same whatever else is in the batch, however the prompt is chunked
 * (a decode at position p = row p of a prefill) and whatever the block size; with GQA groups of
 * 4 and of 3 (a decode's 3 query vectors share each key load, a prefill's rows run 4 vectors
 * at a time and one at a time). */
static void test_invariance(void **state) {
    const fixture *fx = *state;
    pl_rng rng;
    pl_rng_seed(&rng, 11);
    unsigned ran = 0;
    const int32_t ctx[3] = {150, 61, 9}, q[3] = {45, 1, 9};
    static const int32_t windows[] = {0, 40, 7, 1};
    for (int32_t G = 4; G >= 3; G--)
    for (int wi = 0; wi < 4; wi++)
    for (int di = 0; di < N_DTYPES; di++)
        for (int isa = PL_ISA_SCALAR; isa <= (int)pl_cpu_max_isa(); isa++) {
            if (!isa_level_runs(isa)) continue; /* isa_coverage.h */
            pl_cpu_force_isa((pl_isa)isa);
            isa_ran(&ran);
            const pl_dtype dt = DTYPES[di];
            const int32_t hd = quantized(dt) ? 64 : 36;
            acase c, c2;
            build(&c, &rng, 555, dt, 16, 2, G, hd, 3, ctx, q);
            build(&c2, &rng, 555, dt, 1, 2, G, hd, 3, ctx, q);
            set_window(&c, windows[wi]);
            set_window(&c2, windows[wi]);
            pl_attn_args a = args_of(&c), a2 = args_of(&c2);
            pl_paged_attention(fx->tp[1], &c.l, &a);
            pl_paged_attention(fx->tp[2], &c2.l, &a2);
            const size_t row = (size_t)c.n_heads * c.l.head_dim;
            assert_memory_equal(c.out, c2.out, sizeof(float) * out_elems(&c)); /* block size */
            float *alone = xmalloc(sizeof(float) * out_elems(&c));
            for (int32_t i = 0; i < 3; i++) {
                run_alone(fx->tp[1], &c, i, 0, q[i], ctx[i], alone);
                assert_memory_equal(alone, c.out + c.seq_start[i] * row,
                                    sizeof(float) * row * (size_t)q[i]);
            }
            for (int32_t r = 0; r < q[0]; r += 11) { /* decode of row r alone */
                run_alone(fx->tp[0], &c, 0, r, 1, ctx[0] - q[0] + r + 1, alone);
                assert_memory_equal(alone, c.out + (size_t)r * row, sizeof(float) * row);
            }
            free(alone);
            destroy(&c);
            destroy(&c2);
        }
    pl_cpu_force_isa(pl_cpu_max_isa());
    isa_coverage_check("paged attention, batch/chunk/block invariance", ran);
}

/* Sliding windows against the dense masked reference, every dtype, ISA and thread count, with
 * the blocks wholly before each sequence's window replaced by NaN (set_window): windows of one
 * position, shorter than a tile, not aligned to tiles or blocks, longer than the context; decodes
 * and prefill chunks whose rows' windows start in different tiles. */
static void test_window_cases(void **state) {
    const fixture *fx = *state;
    pl_rng rng;
    pl_rng_seed(&rng, 17);
    struct {
        int32_t W, bs, nkv, G, hd, n;
        int32_t ctx[4], q[4];
    } cases[] = {
        {1, 16, 1, 2, 64, 2, {100, 1}, {30, 1}},              /* only itself */
        {7, 16, 2, 4, 64, 3, {100, 70, 8}, {40, 1, 8}},       /* shorter than a tile */
        {40, 1, 1, 8, 32, 2, {300, 41}, {100, 2}},            /* one-token blocks */
        {33, 32, 2, 1, 64, 2, {257, 64}, {64, 1}},            /* tile + 1 */
        {100, 256, 1, 4, 128, 2, {2000, 99}, {1, 99}},        /* long decode, big blocks */
        {5000, 16, 1, 2, 64, 2, {200, 30}, {50, 1}},          /* longer than the context */
        {64, 16, 1, 40, 64, 1, {300}, {20}},                  /* group > chunk size */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int di = 0; di < N_DTYPES; di++) {
            acase c;
            build(&c, &rng, 300 + i, DTYPES[di], cases[i].bs, cases[i].nkv, cases[i].G,
                  cases[i].hd, cases[i].n, cases[i].ctx, cases[i].q);
            set_window(&c, cases[i].W);
            check_case(fx, &c);
            destroy(&c);
        }
    for (int it = 0; it < 30; it++) { /* random shapes and windows */
        static const int32_t bss[] = {1, 2, 16, 32, 256}, Gs[] = {1, 2, 4, 8};
        const pl_dtype dt = DTYPES[it % N_DTYPES];
        int32_t bs = bss[pl_rng_below(&rng, 5)], G = Gs[pl_rng_below(&rng, 4)];
        int32_t n = 1 + (int32_t)pl_rng_below(&rng, 3), ctx[4], q[4];
        for (int32_t j = 0; j < n; j++) {
            ctx[j] = 1 + (int32_t)pl_rng_below(&rng, 600);
            q[j] = pl_rng_below(&rng, 2) ? 1 + (int32_t)pl_rng_below(&rng, (uint64_t)(ctx[j] < 70 ? ctx[j] : 70)) : 1;
        }
        acase c;
        build(&c, &rng, pl_rng_next(&rng), dt, bs, 1 + (int32_t)pl_rng_below(&rng, 2), G, 64, n, ctx, q);
        set_window(&c, 1 + (int32_t)pl_rng_below(&rng, 200));
        check_case(fx, &c);
        destroy(&c);
    }
    isa_coverage_check("paged attention, sliding windows", case_isas);
}

/* A forked sequence shares the parent's full blocks, gets a copy of the partly filled last block
 * (pl_kv_copy_blocks), then writes its own tokens there: the parent never sees them. */
static void test_fork_isolation(void **state) {
    const fixture *fx = *state;
    pl_rng rng;
    pl_rng_seed(&rng, 13);
    for (int di = 0; di < N_DTYPES; di++) {
        const pl_dtype dt = DTYPES[di];
        const int32_t bs = 16, nkv = 2, G = 2, hd = 64, ctx0 = 37, extra = 10;
        const int32_t one = 1;
        acase c;
        build(&c, &rng, 77, dt, bs, nkv, G, hd, 1, &ctx0, &one);
        pl_attn_args a = args_of(&c);
        pl_paged_attention(fx->tp[1], &c.l, &a);
        const size_t row = (size_t)c.n_heads * hd, te = (size_t)nkv * hd;
        float before[4 * 64];
        memcpy(before, c.out, sizeof(float) * row);

        /* the child: blocks 0, 1 shared, block 2 copied into a free block */
        int32_t nb = (ctx0 + bs - 1) / bs, last = c.btab[nb - 1], fresh = -1;
        for (int32_t b = 0; b < c.l.num_blocks && fresh < 0; b++) {
            int used = 0;
            for (int32_t j = 0; j < nb; j++) used |= c.btab[j] == b;
            if (!used) fresh = b;
        }
        assert_true(fresh >= 0);
        pl_kv_copy_blocks(&c.l, c.kc, c.vc, c.kc, c.vc, &last, &fresh, 1);
        float *ck = xmalloc(sizeof(float) * te * (size_t)(ctx0 + extra));
        float *cv = xmalloc(sizeof(float) * te * (size_t)(ctx0 + extra));
        memcpy(ck, c.k[0], sizeof(float) * te * ctx0);
        memcpy(cv, c.v[0], sizeof(float) * te * ctx0);
        int64_t slots[10];
        for (int32_t t = 0; t < extra; t++) {
            int32_t p = ctx0 + t;
            slots[t] = (int64_t)fresh * bs + p % bs;
            for (size_t e = 0; e < te; e++) {
                ck[(size_t)p * te + e] = (float)pl_rng_normal(&rng);
                cv[(size_t)p * te + e] = (float)(2 * pl_rng_uniform(&rng) - 1);
            }
        }
        pl_kv_write(&c.l, c.kc, c.vc, ck + (size_t)ctx0 * te, cv + (size_t)ctx0 * te, slots, extra);

        /* one call: parent decode (unchanged context) + child prefill of its 10 tokens */
        acase both = c;
        int32_t tab[2 * 8];
        both.max_blocks = 8;
        for (int32_t j = 0; j < 8; j++) {
            tab[j] = j < nb ? c.btab[j] : INT32_MAX;
            tab[8 + j] = j < nb - 1 ? c.btab[j] : j == nb - 1 ? fresh : INT32_MAX;
        }
        both.btab = tab;
        both.n_seqs = 2;
        both.ctx[1] = ctx0 + extra;
        both.seq_start[2] = 1 + extra;
        both.n_tokens = 1 + extra;
        both.k[1] = ck;
        both.v[1] = cv;
        store_seq(&both, 1);
        both.q = xmalloc(sizeof(float) * row * (size_t)(1 + extra));
        both.out = xmalloc(sizeof(float) * row * (size_t)(1 + extra));
        memcpy(both.q, c.q, sizeof(float) * row);
        for (size_t e = row; e < row * (size_t)(1 + extra); e++)
            both.q[e] = 2.0f * (float)pl_rng_normal(&rng);
        check_case(fx, &both); /* the child reads its own tokens; everything vs dense */
        assert_memory_equal(before, both.out, sizeof(float) * row); /* the parent: unchanged */
        pl_paged_attention(fx->tp[0], &c.l, &a);
        assert_memory_equal(before, c.out, sizeof(float) * row);
        free(both.q);
        free(both.out);
        free(both.ks[1]);
        free(both.vs[1]);
        free(ck);
        free(cv);
        destroy(&c);
    }
}

static int setup(void **state) {
    fixture *fx = calloc(1, sizeof *fx);
    if (!fx) return -1;
    for (int i = 0; i < 3; i++)
        if (!(fx->tp[i] = pl_threadpool_create(i + 1))) return -1;
    *state = fx;
    return 0;
}

static int teardown(void **state) {
    fixture *fx = *state;
    for (int i = 0; i < 3; i++) pl_threadpool_destroy(fx->tp[i]);
    free(fx);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kv_write_readback),
        cmocka_unit_test(test_kv_quant_rounding),
        cmocka_unit_test(test_copy_blocks),
        cmocka_unit_test(test_explicit_cases),
        cmocka_unit_test(test_random_cases),
        cmocka_unit_test(test_softcap),
        cmocka_unit_test(test_invariance),
        cmocka_unit_test(test_window_cases),
        cmocka_unit_test(test_fork_isolation),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
