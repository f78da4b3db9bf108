/* The qwen2 architecture path (NEOX RoPE, Q/K/V biases) checked by equivalence: stories260K
 * rewritten as a qwen2 file, with every head's Q and K rows reordered from the adjacent-pair
 * layout to the half-split layout NEOX rotates and with zero biases, must compute the same
 * logits as the llama original (a rotation pairs the same two components either way, and a
 * permutation applied to both q and k leaves every q.k unchanged). A nonzero K bias must change
 * them (the bias is read and added). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "gguf/gguf.h"
#include "model/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *SRC = PL_SHARED_DIR "/models/stories260K.gguf";

/* Write SRC as qwen2; bias_k: value of every K bias element. Returns malloc'ed buffers to free. */
static void write_qwen2(const char *out, float bias_k, void **bufs, int *n_bufs) {
    pl_gguf *g;
    assert_int_equal(pl_gguf_open(SRC, &g), PL_OK);
    pl_gguf_writer *w = pl_gguf_writer_new();
    int64_t heads = 0, kv_heads = 0, dim = 0;
    assert_int_equal(pl_gguf_get_int(g, "llama.attention.head_count", &heads), PL_OK);
    assert_int_equal(pl_gguf_get_int(g, "llama.attention.head_count_kv", &kv_heads), PL_OK);
    assert_int_equal(pl_gguf_get_int(g, "llama.embedding_length", &dim), PL_OK);
    int64_t hd = dim / heads;
    for (int64_t i = 0; i < pl_gguf_n_kv(g); i++) {
        pl_gguf_str k = pl_gguf_key_at(g, i);
        char key[256];
        snprintf(key, sizeof key, "%.*s", (int)k.len, k.ptr);
        if (!strcmp(key, "general.architecture")) {
            assert_int_equal(pl_gguf_writer_add_str(w, key, "qwen2"), PL_OK);
        } else if (!strncmp(key, "llama.", 6)) {
            char nk[256];
            snprintf(nk, sizeof nk, "qwen2.%s", key + 6);
            size_t len;
            const void *raw = pl_gguf_value_raw(g, i, &len);
            assert_int_equal(pl_gguf_writer_add_raw(w, nk, pl_gguf_type_at(g, i), raw, len), PL_OK);
        } else {
            assert_int_equal(pl_gguf_writer_copy_kv(w, g, i), PL_OK);
        }
    }
    for (int64_t t = 0; t < pl_gguf_n_tensors(g); t++) {
        const pl_gguf_tensor *ti = pl_gguf_tensor_at(g, t);
        int is_q = strstr(ti->name, "attn_q.weight") != NULL;
        int is_k = strstr(ti->name, "attn_k.weight") != NULL;
        const void *data = ti->data;
        if (is_q || is_k) { /* per head: rows 2i -> i, 2i+1 -> i + hd/2 */
            assert_int_equal(ti->type, PL_DT_F32);
            size_t row = (size_t)ti->ne[0] * sizeof(float);
            int64_t n_heads = is_q ? heads : kv_heads;
            uint8_t *p = malloc(ti->nbytes);
            for (int64_t h = 0; h < n_heads; h++)
                for (int64_t i = 0; i < hd / 2; i++) {
                    const uint8_t *src = (const uint8_t *)ti->data + (size_t)(h * hd) * row;
                    memcpy(p + (size_t)(h * hd + i) * row, src + (size_t)(2 * i) * row, row);
                    memcpy(p + (size_t)(h * hd + hd / 2 + i) * row, src + (size_t)(2 * i + 1) * row, row);
                }
            bufs[(*n_bufs)++] = p;
            data = p;
        }
        assert_int_equal(pl_gguf_writer_add_tensor(w, ti->name, ti->type, ti->n_dims, ti->ne, data),
                         PL_OK);
        if (is_q || is_k || strstr(ti->name, "attn_v.weight")) {
            char bn[128];
            snprintf(bn, sizeof bn, "%.*s.bias", (int)(strlen(ti->name) - 7), ti->name);
            int64_t n = ti->ne[1];
            float *b = calloc((size_t)n, sizeof(float));
            if (is_k)
                for (int64_t i = 0; i < n; i++) b[i] = bias_k;
            bufs[(*n_bufs)++] = b;
            assert_int_equal(pl_gguf_writer_add_tensor(w, bn, PL_DT_F32, 1, &n, b), PL_OK);
        }
    }
    assert_int_equal(pl_gguf_writer_write(w, out), PL_OK);
    pl_gguf_writer_free(w);
    pl_gguf_close(g);
}

/* Logits of the last position after a prompt, through the paged cache. */
static void run(const char *path, float *out, int32_t *n_vocab) {
    pl_model *m;
    if (pl_model_load(path, &m) != PL_OK) fail_msg("%s", pl_last_error());
    const int32_t toks[] = {1, 403, 407, 261, 378, 432, 383, 286, 261, 376};
    const int32_t n = 10;
    int32_t pos[10], rows[10], seq[2] = {0, n}, ctx = n, table[1] = {0};
    int64_t slots[10];
    for (int32_t i = 0; i < n; i++) pos[i] = i, slots[i] = i, rows[i] = i;
    pl_kv_layout l = {PL_DT_F32, 16, m->hp.n_kv_heads, m->hp.head_dim, 1};
    pl_kv_store kv;
    assert_int_equal(pl_kv_store_init(&kv, &l, m->hp.n_layers, NULL), PL_OK);
    pl_forward_ctx *f;
    assert_int_equal(pl_forward_ctx_create(m, n, n, NULL, &f), PL_OK);
    pl_step_batch b = {n, toks, pos, slots, 1, seq, &ctx, table, 1, n, rows};
    assert_int_equal(pl_model_forward(f, &kv, &b, out), PL_OK);
    *n_vocab = m->hp.n_vocab;
    if (getenv("QWEN2_ARCH")) assert_int_equal(m->hp.arch, PL_ARCH_QWEN2);
    pl_forward_ctx_free(f);
    pl_kv_store_free(&kv);
    pl_model_free(m);
}

static void test_qwen2_equivalence(void **state) {
    (void)state;
    char dir[] = "/tmp/pl_qwen2_XXXXXX", path[256];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/q.gguf", dir);
    enum { N = 10 * 512 };
    static float ref[N], got[N];
    int32_t V;
    run(SRC, ref, &V);
    for (int bias = 0; bias < 2; bias++) {
        void *bufs[64];
        int nb = 0;
        write_qwen2(path, bias ? 0.5f : 0.0f, bufs, &nb);
        pl_model *m;
        assert_int_equal(pl_model_load(path, &m), PL_OK);
        assert_int_equal(m->hp.arch, PL_ARCH_QWEN2);
        assert_int_equal(m->hp.rope.mode, PL_ROPE_NEOX);
        assert_non_null(m->layers[0].bq);
        pl_model_free(m);
        run(path, got, &V);
        double max = 0;
        for (int i = 0; i < 10 * V; i++) max = fmax(max, fabs(ref[i] - got[i]));
        print_message("qwen2 rewrite, K bias %s: max |dlogit| %.2e\n", bias ? "0.5" : "0", max);
        if (!bias) assert_true(max < 1e-4);
        else assert_true(max > 1e-3); /* the bias reached the keys */
        for (int i = 0; i < nb; i++) free(bufs[i]);
        unlink(path);
    }
    rmdir(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_qwen2_equivalence)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
