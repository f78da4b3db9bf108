/* Unit tests for the mixture-of-experts FFN's threading (model/moe.c, issue 34): the units of
 * work (whole experts, or experts cut into row blocks when there are fewer than two active
 * experts per thread) must give the same bits whatever the thread count, and a token's logits
 * must not depend on the other tokens of the step (a prompt of 520 tokens goes through two
 * passes of the MoE FFN; its first rows equal those of a 3-token prompt). Models: qwen3moe with
 * q4_k_m experts (the K-quants, repacked at AVX-512 like its attention's q4_K), gpt-oss with mxfp4 experts and biases,
 * Mixtral in f32, Gemma 4's MoE variant in q8_0 (its router reads its own input, kept in the
 * output rows a later pass has not written yet); at every kernel level. (The values against llama.cpp: test_wtype_reference.) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "base/threadpool.h"
#include "kernels/cpu.h"
#include "kernels/matmul.h"
#include "model/model.h"
#include "isa_coverage.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { BS = 16, LONG = 520, MAXB = (LONG + BS - 1) / BS };

static char dir[64];

static const struct {
    const char *name, *args;
} MODELS[] = {
    {"qwen3moe", "--arch qwen3moe --dim 256 --heads 2 --kv-heads 1 --ffn 256 --experts 8 --experts-used 2 "
                 "--expert-ffn 256 --type q4_k_m"},
    {"gpt-oss", "--arch gpt-oss --dim 64 --heads 4 --kv-heads 2 --ffn 64 --experts 4 "
                "--experts-used 2 --expert-ffn 96 --sliding-window 8 --type mxfp4"},
    {"mixtral", "--dim 64 --heads 4 --kv-heads 2 --ffn 160 --experts 4 --experts-used 2"},
    {"gemma4-moe", "--arch gemma4 --dim 64 --heads 4 --kv-heads 2 --ffn 64 --experts 4 "
                   "--experts-used 2 --expert-ffn 96 --sliding-window 8 --swa-pattern 2 --type q8_0"},
};
enum { N_MODELS = sizeof MODELS / sizeof MODELS[0] };

/* Logits of every row of one sequence of the tokens ids[0..T) run on `threads` threads. */
static float *run(const pl_model *m, int threads, const int32_t *ids, int32_t T) {
    pl_threadpool *tp = pl_threadpool_create(threads);
    assert_non_null(tp);
    pl_forward_ctx *f;
    assert_int_equal(pl_forward_ctx_create(m, T, T, tp, &f), PL_OK);
    pl_kv_layout l = {.dtype = PL_DT_F32, .block_size = BS, .n_kv_heads = m->hp.n_kv_heads,
                      .head_dim = m->hp.head_dim, .num_blocks = MAXB};
    pl_kv_store kv;
    assert_int_equal(pl_kv_store_init(&kv, &l, m->hp.n_layers, NULL), PL_OK);
    int32_t table[MAXB], pos[LONG], rows[LONG], seq_start[2] = {0, T}, ctx_len[1] = {T};
    int64_t slots[LONG];
    for (int32_t i = 0; i < MAXB; i++) table[i] = i;
    for (int32_t t = 0; t < T; t++) pos[t] = rows[t] = t, slots[t] = t;
    pl_step_batch b = {.n_tokens = T, .token_ids = ids, .positions = pos, .slot_mapping = slots,
                       .n_seqs = 1, .seq_start = seq_start, .context_lens = ctx_len,
                       .block_tables = table, .max_blocks = MAXB, .n_logits = T,
                       .logit_rows = rows};
    float *logits = malloc((size_t)T * m->hp.n_vocab * sizeof *logits);
    assert_non_null(logits);
    assert_int_equal(pl_model_forward(f, &kv, &b, logits), PL_OK);
    pl_kv_store_destroy(&kv);
    pl_forward_ctx_destroy(f);
    pl_threadpool_destroy(tp);
    return logits;
}

static void check_model(int i) {
    char path[128], cmd[1024];
    snprintf(path, sizeof path, "%s/%s.gguf", dir, MODELS[i].name);
    if (access(path, F_OK) != 0) {
        snprintf(cmd, sizeof cmd, "'%s' mkmodel '%s' --vocab-from '%s/models/stories260K.gguf' "
                 "--layers 2 %s >/dev/null", PL_BINARY, path, PL_SHARED_DIR, MODELS[i].args);
        assert_int_equal(system(cmd), 0);
    }
    pl_model *m;
    if (pl_model_load(path, &m) != PL_OK) fail_msg("%s: %s", path, pl_last_error());
    /* the experts are repacked as any matrix of their type and shape (qwen3moe: q4_K experts
     * and attn_q of 256 x 256; their layout was once left uninitialized) */
    if (i == 0) assert_int_equal(m->layers[0].exp_gate[0].layout, m->layers[0].wq.layout);
    /* repacked experts: a tensor's experts are slices of one buffer (huge pages at real sizes,
     * model.c repack_experts), one 64-byte multiple apart, in expert order */
    for (int32_t k = 0; k < 3 && m->layers[0].exp_gate[0].layout == PL_WLAYOUT_X16; k++) {
        const pl_weight *e = m->layers[0].exp_gate + (size_t)k * (size_t)m->hp.n_expert;
        const ptrdiff_t stride = (const char *)e[1].data - (const char *)e[0].data;
        assert_true(stride > 0 && stride % 64 == 0);
        assert_true((size_t)stride >= pl_matmul_repack_size(&(pl_weight){.type = e[0].type, .rows = e[0].rows, .cols = e[0].cols}));
        for (int32_t x = 2; x < m->hp.n_expert; x++)
            assert_ptr_equal(e[x].data, (const char *)e[0].data + x * stride);
    }
    int32_t ids[LONG];
    for (int32_t t = 0; t < LONG; t++) ids[t] = (int32_t)((t * 7919u + 13u) % (uint32_t)m->hp.n_vocab);
    const size_t V = (size_t)m->hp.n_vocab;
    /* 1 token (2 experts: cut into row blocks from 2 threads on), 3 tokens (1 thread against
     * 2 and 3), and LONG (two passes, every expert busy; 1 thread against 3) */
    const int32_t lens[] = {1, 3, LONG};
    float *three = NULL, *longest = NULL;
    for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++) {
        const int32_t T = lens[k];
        float *one = run(m, 1, ids, T);
        for (int threads = T == LONG ? 3 : 2; threads <= 3; threads++) {
            float *many = run(m, threads, ids, T);
            if (memcmp(one, many, (size_t)T * V * sizeof *one) != 0)
                fail_msg("%s, %d tokens: %d threads differ from 1", MODELS[i].name, T, threads);
            free(many);
        }
        if (T == 3) three = one;
        else if (T == LONG) longest = one;
        else free(one);
    }
    if (memcmp(three, longest, 3 * V * sizeof *three) != 0)
        fail_msg("%s: the first rows of %d tokens differ from those of 3", MODELS[i].name, LONG);
    free(three);
    free(longest);
    pl_model_destroy(m);
}

static void test_qwen3moe(void **state) { (void)state; check_model(0); }
static void test_gptoss(void **state) { (void)state; check_model(1); }
static void test_mixtral(void **state) { (void)state; check_model(2); }
static void test_gemma4_moe(void **state) { (void)state; check_model(3); }

static int group_setup(void **state) {
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/pl_moe_XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int group_teardown(void **state) {
    (void)state;
    char path[128];
    for (int i = 0; i < N_MODELS; i++) {
        snprintf(path, sizeof path, "%s/%s.gguf", dir, MODELS[i].name);
        unlink(path);
    }
    return rmdir(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_qwen3moe),
        cmocka_unit_test(test_gptoss),
        cmocka_unit_test(test_mixtral),
        cmocka_unit_test(test_gemma4_moe),
    };
    return isa_run_group_tests(tests, group_setup, group_teardown);
}
