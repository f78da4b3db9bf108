/* Unit tests for kernels/attention_contig: the contiguous kernel (one token-major K and V tensor
 * per sequence, no block table) against the paged kernel over the same K/V values stored in
 * shuffled blocks, at every kernel level the machine has, every KV dtype, with GQA groups of 4
 * and 3, prefill chunks and decodes in one batch, sliding windows and soft-capping, tensors
 * head-major (as the vAttention and contiguous layouts store them) and token-major. The two
 * stream positions in the same tiles through the same tile function, so the outputs must be
 * bitwise equal; both are also held to 1e-4 of the scalar reference (a kernel that reads the
 * wrong rows fails either way). The bytes after each sequence's tensor are NaN: a read past its
 * context poisons the output. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "base/rng.h"
#include "base/threadpool.h"
#include "kernels/attention.h"
#include "kernels/attention_contig.h"
#include "kernels/cpu.h"
#include "isa_coverage.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { N_SEQ = 3, N_KV = 2, CAP = 160 }; /* CAP: positions each sequence's tensor holds */
static const pl_dtype DTYPES[] = {PL_DT_F32, PL_DT_F16, PL_DT_BF16, PL_DT_Q8_0, PL_DT_Q4_0};

static void *xcalloc(size_t n) {
    void *p = calloc(1, n);
    assert_non_null(p);
    return p;
}

static void fill_nan(void *p, size_t bytes) {
    float *f = p;
    for (size_t i = 0; i < bytes / sizeof(float); i++) f[i] = NAN;
}

typedef struct {
    pl_kv_layout paged, tok;         /* the paged pool; one token-major tensor's layout */
    void *kc, *vc;                   /* paged pool */
    void *ks[N_SEQ], *vs[N_SEQ];     /* token-major tensors */
    int32_t *btab, max_blocks;
    int32_t seq_start[N_SEQ + 1], ctx[N_SEQ];
    float *q, *out_p, *out_c, *out_r;
    int32_t n_heads, n_tokens;
    size_t head_stride, token_stride;
} tcase;

/* Random K/V of every sequence written into both stores, blocks of the pool in shuffled order;
 * the sequences' tensors token-major ([token][kv_head][row]) or head-major ([kv_head][CAP]
 * [row]). Rows past a sequence's context are NaN. */
static void build(tcase *c, pl_rng *rng, pl_dtype dt, int32_t bs, int32_t G, const int32_t *ctx,
                  const int32_t *qlen, int head_major) {
    memset(c, 0, sizeof *c);
    const int32_t hd = dt == PL_DT_Q8_0 || dt == PL_DT_Q4_0 ? 64 : 36;
    c->n_heads = N_KV * G;
    c->max_blocks = 0;
    for (int i = 0; i < N_SEQ; i++) {
        c->ctx[i] = ctx[i];
        c->seq_start[i + 1] = c->seq_start[i] + qlen[i];
        int32_t nb = (ctx[i] + bs - 1) / bs;
        if (nb > c->max_blocks) c->max_blocks = nb;
    }
    c->n_tokens = c->seq_start[N_SEQ];
    const int64_t nblocks = (int64_t)N_SEQ * c->max_blocks + 3;
    c->paged = (pl_kv_layout){.dtype = dt, .block_size = bs, .n_kv_heads = N_KV, .head_dim = hd,
                              .num_blocks = nblocks};
    const size_t bb = pl_kv_block_bytes(&c->paged);
    c->kc = xcalloc(bb * (size_t)nblocks);
    c->vc = xcalloc(bb * (size_t)nblocks);
    fill_nan(c->kc, bb * (size_t)nblocks);
    fill_nan(c->vc, bb * (size_t)nblocks);
    int32_t *perm = xcalloc(sizeof(int32_t) * (size_t)nblocks);
    for (int64_t i = 0; i < nblocks; i++) perm[i] = (int32_t)i;
    for (int64_t i = nblocks - 1; i > 0; i--) {
        int64_t j = (int64_t)(pl_rng_uniform(rng) * (double)(i + 1)) % (i + 1);
        int32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    c->btab = xcalloc(sizeof(int32_t) * (size_t)N_SEQ * (size_t)c->max_blocks);
    for (int i = 0; i < N_SEQ * c->max_blocks; i++) c->btab[i] = perm[i];
    free(perm);
    const size_t kvd = (size_t)N_KV * (size_t)hd;
    float *k = xcalloc(sizeof(float) * kvd), *v = xcalloc(sizeof(float) * kvd);
    for (int i = 0; i < N_SEQ; i++) {
        /* token-major is the paged order with one-token blocks, head-major with one block */
        c->tok = (pl_kv_layout){.dtype = dt, .block_size = head_major ? CAP : 1,
                                .n_kv_heads = N_KV, .head_dim = hd,
                                .num_blocks = head_major ? 1 : CAP};
        const size_t rb = pl_kv_row_bytes(&c->tok), tb = rb * N_KV * CAP;
        c->token_stride = head_major ? rb : rb * N_KV;
        c->head_stride = head_major ? rb * CAP : rb;
        c->ks[i] = xcalloc(tb);
        c->vs[i] = xcalloc(tb);
        fill_nan(c->ks[i], tb); /* positions from ctx on must never be read */
        fill_nan(c->vs[i], tb);
        for (int32_t p = 0; p < ctx[i]; p++) {
            for (size_t d = 0; d < kvd; d++) {
                k[d] = (float)(pl_rng_uniform(rng) * 2 - 1);
                v[d] = (float)(pl_rng_uniform(rng) * 2 - 1);
            }
            int64_t slot = (int64_t)c->btab[i * c->max_blocks + p / bs] * bs + p % bs;
            pl_kv_write(&c->paged, c->kc, c->vc, k, v, &slot, 1);
            int64_t pos = p;
            pl_kv_write(&c->tok, c->ks[i], c->vs[i], k, v, &pos, 1);
        }
    }
    free(k);
    free(v);
    const size_t n_out = (size_t)c->n_tokens * (size_t)c->n_heads * (size_t)hd;
    c->q = xcalloc(sizeof(float) * n_out);
    for (size_t i = 0; i < n_out; i++) c->q[i] = (float)(pl_rng_uniform(rng) * 2 - 1);
    c->out_p = xcalloc(sizeof(float) * n_out);
    c->out_c = xcalloc(sizeof(float) * n_out);
    c->out_r = xcalloc(sizeof(float) * n_out);
}

static void destroy(tcase *c) {
    free(c->kc), free(c->vc), free(c->btab), free(c->q);
    free(c->out_p), free(c->out_c), free(c->out_r);
    for (int i = 0; i < N_SEQ; i++) free(c->ks[i]), free(c->vs[i]);
}

static void run_both(pl_threadpool *tp, tcase *c, int32_t window, float softcap,
                     const float *sinks) {
    const float scale = 1.0f / sqrtf((float)c->paged.head_dim);
    pl_attn_args a = {.q = c->q, .out = c->out_p, .n_heads = c->n_heads, .scale = scale,
                      .n_seqs = N_SEQ, .seq_start = c->seq_start, .context_lens = c->ctx,
                      .block_tables = c->btab, .max_blocks = c->max_blocks, .k_cache = c->kc,
                      .v_cache = c->vc, .window = window, .softcap = softcap,
                      .sinks = sinks};
    pl_paged_attention(tp, &c->paged, &a);
    a.out = c->out_r;
    pl_paged_attention_ref(&c->paged, &a);
    const void *ks[N_SEQ], *vs[N_SEQ];
    for (int i = 0; i < N_SEQ; i++) ks[i] = c->ks[i], vs[i] = c->vs[i];
    pl_contig_attn_args ca = {.q = c->q, .out = c->out_c, .n_heads = c->n_heads, .scale = scale,
                              .n_seqs = N_SEQ, .seq_start = c->seq_start,
                              .context_lens = c->ctx, .k = ks, .v = vs,
                              .head_stride = c->head_stride, .token_stride = c->token_stride,
                              .window = window, .softcap = softcap, .sinks = sinks};
    pl_contig_attention(tp, &c->tok, &ca);
}

static void test_contig_equals_paged(void **state) {
    (void)state;
    pl_threadpool *tp[2] = {pl_threadpool_create(1), pl_threadpool_create(2)};
    assert_non_null(tp[0]);
    assert_non_null(tp[1]);
    pl_rng rng;
    pl_rng_seed(&rng, 37);
    unsigned ran = 0;
    /* a prefill chunk ending mid-tile, a decode, a whole short prompt */
    const int32_t ctx[N_SEQ] = {150, 77, 9}, qlen[N_SEQ] = {45, 1, 9};
    static const int32_t windows[] = {0, 40, 7};
    static const int32_t block_sizes[] = {16, 5};
    float sinks[64];
    for (int h = 0; h < 64; h++) sinks[h] = (float)(pl_rng_uniform(&rng) * 4 - 2);
    for (int isa = PL_ISA_SCALAR; isa <= (int)pl_cpu_max_isa(); isa++) {
        if (!isa_level_runs(isa)) continue; /* isa_coverage.h */
        pl_cpu_force_isa((pl_isa)isa);
        isa_ran(&ran);
        for (size_t di = 0; di < sizeof DTYPES / sizeof *DTYPES; di++)
            for (int32_t G = 4; G >= 3; G--)
                for (int wi = 0; wi < 3; wi++) {
                    tcase c;
                    build(&c, &rng, DTYPES[di], block_sizes[wi % 2], G, ctx, qlen, G == 4);
                    const float cap = wi == 1 ? 2.0f : 0.0f;
                    /* gpt-oss's attention sinks on the window-7 case */
                    run_both(tp[(wi + G) % 2], &c, windows[wi], cap, wi == 2 ? sinks : NULL);
                    const size_t n = (size_t)c.n_tokens * c.n_heads * c.paged.head_dim;
                    if (memcmp(c.out_p, c.out_c, n * sizeof(float)) != 0)
                        fail_msg("%s, %s, G %d (%s-major), window %d: contiguous != paged",
                                 pl_isa_name((pl_isa)isa), pl_dtype_name(DTYPES[di]), (int)G,
                                 G == 4 ? "head" : "token", (int)windows[wi]);
                    for (size_t i = 0; i < n; i++)
                        if (!(fabsf(c.out_c[i] - c.out_r[i]) <= 1e-4f))
                            fail_msg("%s, %s: out[%zu] = %g, reference %g",
                                     pl_isa_name((pl_isa)isa), pl_dtype_name(DTYPES[di]), i,
                                     (double)c.out_c[i], (double)c.out_r[i]);
                    destroy(&c);
                }
    }
    pl_cpu_force_isa(pl_cpu_max_isa());
    isa_coverage_check("contiguous attention = paged attention", ran);
    pl_threadpool_destroy(tp[0]);
    pl_threadpool_destroy(tp[1]);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_contig_equals_paged),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
