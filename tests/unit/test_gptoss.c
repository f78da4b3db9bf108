/* Unit tests for gpt-oss's parts (issue 34): the attention sinks at every kernel level against a
 * direct double-precision softmax with the sink in its denominator, the clamped SwiGLU against
 * GGML's formula, and the loader's refusals of a gpt-oss file (and of a Gemma 4 MoE file) with a
 * bad router or expert tensor, a missing bias, sink or norm, an expert count or top-k out of
 * range: each a clear error naming the tensor or key. (Their numbers end to end:
 * test_wtype_reference's gpt-oss and gemma4-moe models.) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "base/rng.h"
#include "base/threadpool.h"
#include "gguf/gguf.h"
#include "kernels/attention.h"
#include "kernels/cpu.h"
#include "kernels/ops.h"
#include "model/model.h"
#include "isa_coverage.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- attention sinks ---- */

enum { HD = 32, NH = 4, NKV = 2, BS = 16, CTX = 40, QLEN = 7 };

/* One sequence of CTX positions in an f32 cache, the last QLEN of them queried; window W. */
static void check_sinks(pl_threadpool *tp, int32_t W) {
    pl_rng rng;
    pl_rng_seed(&rng, 5 + (uint64_t)W);
    const int32_t nblk = (CTX + BS - 1) / BS;
    pl_kv_layout l = {.dtype = PL_DT_F32, .block_size = BS, .n_kv_heads = NKV, .head_dim = HD,
                      .num_blocks = nblk};
    const size_t per = (size_t)nblk * NKV * BS * HD;
    float *kc = calloc(per, sizeof *kc), *vc = calloc(per, sizeof *vc);
    float q[QLEN * NH * HD], out[QLEN * NH * HD], sinks[NH];
    assert_true(kc && vc);
    for (size_t i = 0; i < per; i++) kc[i] = (float)pl_rng_normal(&rng), vc[i] = (float)pl_rng_normal(&rng);
    for (int i = 0; i < QLEN * NH * HD; i++) q[i] = (float)pl_rng_normal(&rng);
    /* one sink far above every score, one far below (no effect), two in between */
    const float sink_vals[NH] = {30.0f, -30.0f, 1.5f, -0.5f};
    memcpy(sinks, sink_vals, sizeof sinks);
    int32_t btab[4] = {2, 0, 1, 0}, seq_start[2] = {0, QLEN}, ctx_len = CTX;
    pl_attn_args a = {.q = q, .out = out, .n_heads = NH, .scale = 0.2f, .n_seqs = 1,
                      .seq_start = seq_start, .context_lens = &ctx_len, .block_tables = btab,
                      .max_blocks = 4, .k_cache = kc, .v_cache = vc, .window = W, .sinks = sinks};
    pl_paged_attention(tp, &l, &a);
    for (int32_t r = 0; r < QLEN; r++)
        for (int32_t h = 0; h < NH; h++) {
            const int32_t pos = CTX - QLEN + r, g = h / (NH / NKV);
            const int32_t p0 = W > 0 && pos - W + 1 > 0 ? pos - W + 1 : 0;
            double mx = sinks[h], s[CTX], den = 0, num[HD] = {0};
            for (int32_t p = p0; p <= pos; p++) {
                const float *k = kc + (((size_t)btab[p / BS] * NKV + g) * BS + p % BS) * HD;
                double d = 0;
                for (int i = 0; i < HD; i++) d += (double)q[(r * NH + h) * HD + i] * k[i];
                s[p] = d * 0.2;
                mx = s[p] > mx ? s[p] : mx;
            }
            den = exp(sinks[h] - mx);
            for (int32_t p = p0; p <= pos; p++) {
                const float *v = vc + (((size_t)btab[p / BS] * NKV + g) * BS + p % BS) * HD;
                double e = exp(s[p] - mx);
                den += e;
                for (int i = 0; i < HD; i++) num[i] += e * v[i];
            }
            for (int i = 0; i < HD; i++) {
                double want = num[i] / den, got = out[(r * NH + h) * HD + i];
                if (fabs(got - want) > 2e-5 * (1 + fabs(want)))
                    fail_msg("%s W=%d row %d head %d dim %d: %.8g, want %.8g",
                             pl_isa_name(pl_cpu_isa()), W, r, h, i, got, want);
            }
            if (h == 0) /* a sink of 30 takes nearly all the weight: the output is ~0 */
                for (int i = 0; i < HD; i++) assert_true(fabsf(out[(r * NH) * HD + i]) < 1e-6f);
        }
    /* the scalar reference agrees too */
    float ref[QLEN * NH * HD];
    a.out = ref;
    pl_paged_attention_ref(&l, &a);
    for (int i = 0; i < QLEN * NH * HD; i++) assert_true(fabsf(ref[i] - out[i]) <= 2e-5f * (1 + fabsf(ref[i])));
    free(kc);
    free(vc);
}

static void test_attention_sinks(void **state) {
    (void)state;
    pl_threadpool *tp = pl_threadpool_create(2);
    assert_non_null(tp);
    unsigned ran = 0;
    for (int isa = PL_ISA_SCALAR; isa <= (int)pl_cpu_max_isa(); isa++) {
        if (!isa_level_runs(isa)) continue; /* isa_coverage.h */
        pl_cpu_force_isa((pl_isa)isa);
        isa_ran(&ran);
        check_sinks(tp, 0);
        check_sinks(tp, 9); /* a window: the sink joins only the positions the row sees */
    }
    pl_cpu_force_isa(pl_cpu_max_isa());
    pl_threadpool_destroy(tp);
    isa_coverage_check("attention sinks", ran);
}

/* ---- the clamped SwiGLU ---- */

static void test_swiglu_oai(void **state) {
    (void)state;
    const float g[6] = {-9.0f, -1.0f, 0.0f, 2.0f, 7.0f, 12.0f};
    const float u[6] = {-8.0f, 0.5f, 3.0f, -7.5f, 9.0f, 1.0f};
    float x[6];
    memcpy(x, g, sizeof x);
    pl_swiglu_oai(x, u, 6, 1.702f, 7.0f);
    for (int i = 0; i < 6; i++) {
        double gc = g[i] < 7 ? g[i] : 7, uc = u[i] < -7 ? -7 : u[i] > 7 ? 7 : u[i];
        double want = gc / (1 + exp(-1.702 * gc)) * (uc + 1);
        if (fabs(x[i] - want) > 1e-5 * (1 + fabs(want))) fail_msg("%d: %.8g, want %.8g", i, x[i], want);
    }
    /* the clamps: gate 12 acts as 7, up 9 as 7, up -8 as -7 */
    assert_true(fabsf(x[5] - x[4] / 8.0f * 2.0f) < 1e-4f);
}

/* ---- bad files ---- */

static char dir[64];

/* A tiny file of `flags` (2 layers, 4 experts of which 2 used, 32 wide). */
static void make_model(const char *path, const char *flags) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "'%s' mkmodel '%s' --vocab-from '%s/models/stories260K.gguf' "
             "--dim 64 --layers 2 --heads 4 --kv-heads 2 --ffn 64 --experts 4 --experts-used 2 "
             "--expert-ffn 32 --sliding-window 8 %s >/dev/null", PL_BINARY, path, PL_SHARED_DIR,
             flags);
    assert_int_equal(system(cmd), 0);
}

/* src copied to dst without the key or tensor `drop`, and with `key` = u32 `val` (key NULL:
 * none) or the tensor `tname` replaced by one of type t and shape ne (f32 zeros if t is F32). */
typedef struct {
    const char *drop, *key, *tname;
    uint32_t val;
    pl_dtype t;
    int n_dims;
    int64_t ne[3];
} edit;

static void rewrite(const char *src, const char *dst, const edit *e) {
    pl_gguf *g;
    assert_int_equal(pl_gguf_open(src, &g), PL_OK);
    pl_gguf_writer *w = pl_gguf_writer_create();
    assert_non_null(w);
    for (int64_t i = 0; i < pl_gguf_n_kv(g); i++) {
        pl_gguf_str k = pl_gguf_key_at(g, i);
        if ((e->drop && pl_gguf_str_eq(k, e->drop)) || (e->key && pl_gguf_str_eq(k, e->key))) continue;
        assert_int_equal(pl_gguf_writer_copy_kv(w, g, i), PL_OK);
    }
    if (e->key) assert_int_equal(pl_gguf_writer_add_u32(w, e->key, e->val), PL_OK);
    void *buf = NULL;
    for (int64_t i = 0; i < pl_gguf_n_tensors(g); i++) {
        const pl_gguf_tensor *t = pl_gguf_tensor_at(g, i);
        if (e->drop && !strcmp(t->name, e->drop)) continue;
        if (e->tname && !strcmp(t->name, e->tname)) {
            int64_t n = e->ne[0] * (e->n_dims > 1 ? e->ne[1] : 1) * (e->n_dims > 2 ? e->ne[2] : 1);
            buf = calloc((size_t)(pl_dtype_row_size(e->t, n) + 64), 1);
            assert_non_null(buf);
            assert_int_equal(pl_gguf_writer_add_tensor(w, t->name, e->t, e->n_dims, e->ne, buf), PL_OK);
            continue;
        }
        assert_int_equal(pl_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data), PL_OK);
    }
    assert_int_equal(pl_gguf_writer_write(w, dst), PL_OK);
    pl_gguf_writer_destroy(w);
    free(buf);
    pl_gguf_close(g);
}

static void expect_refused(const char *src, const edit *e, const char *want1, const char *want2) {
    char dst[128];
    snprintf(dst, sizeof dst, "%s/bad.gguf", dir);
    rewrite(src, dst, e);
    pl_model *m = NULL;
    pl_status st = pl_model_load(dst, &m);
    if (st == PL_OK) fail_msg("loaded a file that should be refused (expected '%s')", want1);
    assert_null(m);
    if (!strstr(pl_last_error(), want1) || (want2 && !strstr(pl_last_error(), want2)))
        fail_msg("error '%s' does not name '%s' / '%s'", pl_last_error(), want1, want2 ? want2 : "");
    unlink(dst);
}

static void test_bad_files(void **state) {
    (void)state;
    char src[128];
    snprintf(src, sizeof src, "%s/ok.gguf", dir);
    make_model(src, "--arch gpt-oss --type mxfp4");
    pl_model *m;
    assert_int_equal(pl_model_load(src, &m), PL_OK); /* the unedited file loads */
    assert_int_equal(m->hp.arch, PL_ARCH_GPT_OSS);
    assert_int_equal(m->layers[1].exp_up[0].type, PL_DT_MXFP4);
    assert_true(m->hp.swa_layers[0] && !m->hp.swa_layers[1]); /* even layers windowed */
    pl_model_destroy(m);
    /* counts out of range, or missing */
    expect_refused(src, &(edit){.key = "gpt-oss.expert_used_count", .val = 5},
                   "gpt-oss.expert_used_count", "out of range");
    expect_refused(src, &(edit){.key = "gpt-oss.expert_used_count", .val = 0},
                   "gpt-oss.expert_used_count", "out of range");
    expect_refused(src, &(edit){.key = "gpt-oss.expert_count", .val = 0}, "gpt-oss.expert_count", NULL);
    expect_refused(src, &(edit){.drop = "gpt-oss.expert_feed_forward_length"},
                   "gpt-oss.expert_feed_forward_length", NULL);
    expect_refused(src, &(edit){.drop = "gpt-oss.attention.sliding_window"},
                   "gpt-oss.attention.sliding_window", NULL);
    /* the router: wrong shape, a type the kernels cannot multiply, its bias missing */
    expect_refused(src, &(edit){.tname = "blk.1.ffn_gate_inp.weight", .t = PL_DT_F32, .n_dims = 2, .ne = {64, 3}},
                   "blk.1.ffn_gate_inp.weight", "shape");
    expect_refused(src, &(edit){.tname = "blk.0.ffn_gate_inp.weight", .t = PL_DT_I32, .n_dims = 2, .ne = {64, 4}},
                   "blk.0.ffn_gate_inp.weight", "i32");
    expect_refused(src, &(edit){.drop = "blk.0.ffn_gate_inp.bias"}, "blk.0.ffn_gate_inp.bias", "missing");
    /* the experts: a 3-D tensor of the wrong shape or type, a bias of the wrong shape */
    expect_refused(src, &(edit){.tname = "blk.0.ffn_up_exps.weight", .t = PL_DT_MXFP4, .n_dims = 3, .ne = {64, 32, 3}},
                   "blk.0.ffn_up_exps.weight", "shape");
    expect_refused(src, &(edit){.tname = "blk.1.ffn_down_exps.weight", .t = PL_DT_I8, .n_dims = 3, .ne = {32, 64, 4}},
                   "blk.1.ffn_down_exps.weight", "i8");
    expect_refused(src, &(edit){.tname = "blk.1.ffn_gate_exps.bias", .t = PL_DT_F32, .n_dims = 2, .ne = {32, 3}},
                   "blk.1.ffn_gate_exps.bias", "shape");
    expect_refused(src, &(edit){.tname = "blk.0.ffn_down_exps.bias", .t = PL_DT_Q8_0, .n_dims = 2, .ne = {64, 4}},
                   "blk.0.ffn_down_exps.bias", "q8_0");
    /* the attention's sinks and output bias */
    expect_refused(src, &(edit){.tname = "blk.0.attn_sinks.weight", .t = PL_DT_F32, .n_dims = 1, .ne = {3}},
                   "blk.0.attn_sinks.weight", "shape");
    expect_refused(src, &(edit){.drop = "blk.1.attn_output.bias"}, "blk.1.attn_output.bias", "missing");
    unlink(src);
}

/* Gemma 4's MoE variant: the fused gate/up experts bound as views, GeGLU experts; a router,
 * router scale, expert tensor or per-expert scale of the wrong shape or type, a missing norm,
 * counts out of range or not matching the tensors: refused, naming the tensor or key. */
static void test_gemma4_moe_bad_files(void **state) {
    (void)state;
    char src[128];
    snprintf(src, sizeof src, "%s/ok.gguf", dir);
    make_model(src, "--arch gemma4 --swa-pattern 2");
    pl_model *m;
    assert_int_equal(pl_model_load(src, &m), PL_OK);
    const pl_layer_weights *L = &m->layers[1];
    assert_true(m->hp.n_expert == 4 && m->hp.n_expert_used == 2 && m->hp.expert_ffn == 32);
    assert_true(m->hp.moe_geglu && L->exp_down_s && L->gate_inp_s && L->w_down.data);
    if (L->exp_up[3].layout == PL_WLAYOUT_ROWS) /* expert 3's up rows follow its gate rows */
        assert_ptr_equal(L->exp_up[3].data, (const char *)L->exp_gate[3].data +
                         32 * pl_dtype_row_size(L->exp_gate[3].type, 64));
    pl_model_destroy(m);
    expect_refused(src, &(edit){.key = "gemma4.expert_used_count", .val = 5},
                   "gemma4.expert_used_count", "out of range");
    expect_refused(src, &(edit){.key = "gemma4.expert_used_count", .val = 0},
                   "gemma4.expert_used_count", "out of range");
    expect_refused(src, &(edit){.key = "gemma4.expert_count", .val = 3},
                   "blk.0.ffn_gate_inp.weight", "shape");
    expect_refused(src, &(edit){.key = "gemma4.expert_count", .val = 0},
                   "blk.0.ffn_gate_inp.weight", "gemma4.expert_count");
    expect_refused(src, &(edit){.key = "gemma4.expert_count", .val = 70000},
                   "gemma4.expert_count", "out of range");
    expect_refused(src, &(edit){.drop = "gemma4.expert_feed_forward_length"},
                   "gemma4.expert_feed_forward_length", "missing");
    expect_refused(src, &(edit){.tname = "blk.1.ffn_gate_inp.weight", .t = PL_DT_F32, .n_dims = 2, .ne = {64, 3}},
                   "blk.1.ffn_gate_inp.weight", "shape");
    expect_refused(src, &(edit){.tname = "blk.0.ffn_gate_inp.weight", .t = PL_DT_I32, .n_dims = 2, .ne = {64, 4}},
                   "blk.0.ffn_gate_inp.weight", "i32");
    expect_refused(src, &(edit){.tname = "blk.0.ffn_gate_inp.scale", .t = PL_DT_F32, .n_dims = 1, .ne = {32}},
                   "blk.0.ffn_gate_inp.scale", "shape");
    expect_refused(src, &(edit){.tname = "blk.1.ffn_gate_up_exps.weight", .t = PL_DT_F32, .n_dims = 3, .ne = {64, 32, 4}},
                   "blk.1.ffn_gate_up_exps.weight", "shape");
    expect_refused(src, &(edit){.tname = "blk.0.ffn_down_exps.weight", .t = PL_DT_I8, .n_dims = 3, .ne = {32, 64, 4}},
                   "blk.0.ffn_down_exps.weight", "i8");
    expect_refused(src, &(edit){.tname = "blk.1.ffn_down_exps.scale", .t = PL_DT_F32, .n_dims = 1, .ne = {3}},
                   "blk.1.ffn_down_exps.scale", "shape");
    expect_refused(src, &(edit){.drop = "blk.1.pre_ffw_norm_2.weight"}, "blk.1.pre_ffw_norm_2.weight", "missing");
    expect_refused(src, &(edit){.drop = "blk.0.post_ffw_norm_1.weight"}, "blk.0.post_ffw_norm_1.weight", "missing");
    unlink(src);
}

static int setup(void **state) {
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/pl_gptoss_XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    return rmdir(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_attention_sinks),
        cmocka_unit_test(test_swiglu_oai),
        cmocka_unit_test(test_bad_files),
        cmocka_unit_test(test_gemma4_moe_bad_files),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
