/* The qwen2 architecture path (NEOX RoPE, Q/K/V biases), with stories260K rewritten as a qwen2
 * file (every head's Q and K rows reordered from the adjacent-pair layout to the half-split
 * layout NEOX rotates):
 *  - with zero biases it must compute the same logits as the llama original (a rotation pairs
 *    the same two components either way, and a permutation applied to both q and k leaves every
 *    q.k unchanged);
 *  - with distinct nonzero Q, K and V biases it must compute the logits of a dense forward pass
 *    in double precision written here from the architecture's definition (RMSNorm, q/k/v =
 *    W x + b, NEOX RoPE, causal GQA softmax attention, SwiGLU), reading the weights straight
 *    from the written file. Each bias moves the logits far more than the tolerance, so dropping
 *    any one of them fails. */
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
#include "kernels/cpu.h"
#include "../unit/isa_coverage.h"

static const char *SRC = PL_SHARED_DIR "/models/stories260K.gguf";

/* The nonzero bias of element i of layer l's Q (which 0), K (1) or V (2) projection. */
static float bias_value(int which, int64_t l, int64_t i) {
    return 0.4f * sinf(1.3f * (float)i + 0.7f * (float)l + 2.1f * (float)which + 0.5f);
}

/* Write SRC as qwen2, with zero biases or (biased) bias_value's. Returns malloc'ed buffers. */
static void write_qwen2(const char *out, int biased, void **bufs, int *n_bufs) {
    pl_gguf *g;
    assert_int_equal(pl_gguf_open(SRC, &g), PL_OK);
    pl_gguf_writer *w = pl_gguf_writer_create();
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
            int64_t n = ti->ne[1], layer = atoi(ti->name + 4); /* "blk.N." */
            float *b = calloc((size_t)n, sizeof(float));
            if (biased)
                for (int64_t i = 0; i < n; i++)
                    b[i] = bias_value(is_q ? 0 : is_k ? 1 : 2, layer, i);
            bufs[(*n_bufs)++] = b;
            assert_int_equal(pl_gguf_writer_add_tensor(w, bn, PL_DT_F32, 1, &n, b), PL_OK);
        }
    }
    assert_int_equal(pl_gguf_writer_write(w, out), PL_OK);
    pl_gguf_writer_destroy(w);
    pl_gguf_close(g);
}

static const int32_t TOKS[10] = {1, 403, 407, 261, 378, 432, 383, 286, 261, 376};

/* Logits of every prompt position, through the paged cache. */
static void run(const char *path, float *out, int32_t *n_vocab) {
    pl_model *m;
    if (pl_model_load(path, &m) != PL_OK) fail_msg("%s", pl_last_error());
    const int32_t *toks = TOKS;
    const int32_t n = 10;
    int32_t pos[10], rows[10], seq[2] = {0, n}, ctx = n, table[1] = {0};
    int64_t slots[10];
    for (int32_t i = 0; i < n; i++) pos[i] = i, slots[i] = i, rows[i] = i;
    pl_kv_layout l = {PL_DT_F32, 16, m->hp.n_kv_heads, m->hp.head_dim, 1};
    pl_kv_store kv;
    assert_int_equal(pl_kv_store_init(&kv, &l, m->hp.n_layers, NULL), PL_OK);
    pl_forward_ctx *f;
    assert_int_equal(pl_forward_ctx_create(m, n, n, NULL, &f), PL_OK);
    pl_step_batch b = {n, toks, pos, slots, 1, seq, &ctx, table, 1, n, rows, NULL, NULL, NULL};
    assert_int_equal(pl_model_forward(f, &kv, &b, out), PL_OK);
    *n_vocab = m->hp.n_vocab;
    pl_forward_ctx_destroy(f);
    pl_kv_store_destroy(&kv);
    pl_model_destroy(m);
}

/* ---- the dense reference ---- */

static const float *tensor(const pl_gguf *g, const char *fmt, int64_t l, int64_t rows,
                           int64_t cols) {
    char name[128];
    snprintf(name, sizeof name, fmt, (int)l);
    const pl_gguf_tensor *t = pl_gguf_find_tensor(g, name);
    if (!t) fail_msg("no tensor %s", name);
    assert_int_equal(t->type, PL_DT_F32);
    assert_int_equal(t->ne[0], cols);
    if (rows > 1) assert_int_equal(t->ne[1], rows);
    return (const float *)t->data;
}

/* y[rows] = W x (+ b); W row-major [rows][cols] as GGUF stores it (ne[0] = cols). */
static void matvec(double *y, const float *w, const float *b, const double *x, int64_t rows,
                   int64_t cols) {
    for (int64_t r = 0; r < rows; r++) {
        double s = b ? b[r] : 0;
        for (int64_t c = 0; c < cols; c++) s += (double)w[r * cols + c] * x[c];
        y[r] = s;
    }
}

static void rmsnorm(double *y, const double *x, const float *w, int64_t n, double eps) {
    double ss = 0;
    for (int64_t i = 0; i < n; i++) ss += x[i] * x[i];
    double inv = 1.0 / sqrt(ss / (double)n + eps);
    for (int64_t i = 0; i < n; i++) y[i] = x[i] * inv * w[i];
}

/* NEOX: in each head, component i rotates with i + n_rot/2 by pos * base^(-2i/n_rot). */
static void rope_neox(double *v, int64_t n_heads, int64_t hd, int64_t n_rot, double base,
                      int pos) {
    for (int64_t h = 0; h < n_heads; h++)
        for (int64_t i = 0; i < n_rot / 2; i++) {
            double th = pos * pow(base, -2.0 * (double)i / (double)n_rot);
            double *a = v + h * hd + i, *b = a + n_rot / 2, x = *a, y = *b;
            *a = x * cos(th) - y * sin(th);
            *b = x * sin(th) + y * cos(th);
        }
}

/* Logits [n][V] of every position of toks, from the qwen2 file at path. */
static void dense_forward(const char *path, const int32_t *toks, int n, double *logits) {
    pl_gguf *g;
    assert_int_equal(pl_gguf_open(path, &g), PL_OK);
    int64_t D, H, KVH, F, L, n_rot = 0;
    double eps, base = 10000.0;
    assert_int_equal(pl_gguf_get_int(g, "qwen2.embedding_length", &D), PL_OK);
    assert_int_equal(pl_gguf_get_int(g, "qwen2.attention.head_count", &H), PL_OK);
    assert_int_equal(pl_gguf_get_int(g, "qwen2.attention.head_count_kv", &KVH), PL_OK);
    assert_int_equal(pl_gguf_get_int(g, "qwen2.feed_forward_length", &F), PL_OK);
    assert_int_equal(pl_gguf_get_int(g, "qwen2.block_count", &L), PL_OK);
    assert_int_equal(pl_gguf_get_float(g, "qwen2.attention.layer_norm_rms_epsilon", &eps), PL_OK);
    pl_gguf_get_float(g, "qwen2.rope.freq_base", &base); /* absent: the 10000 default */
    const int64_t hd = D / H, kvd = KVH * hd;
    if (pl_gguf_get_int(g, "qwen2.rope.dimension_count", &n_rot) != PL_OK) n_rot = hd;
    const pl_gguf_tensor *emb = pl_gguf_find_tensor(g, "token_embd.weight");
    assert_non_null(emb);
    const int64_t V = emb->ne[1];
    double *x = calloc((size_t)D, sizeof *x), *xn = calloc((size_t)D, sizeof *xn);
    double *q = calloc((size_t)D, sizeof *q), *att = calloc((size_t)D, sizeof *att);
    double *kc = calloc((size_t)(L * n * kvd), sizeof *kc);
    double *vc = calloc((size_t)(L * n * kvd), sizeof *vc);
    double *gt = calloc((size_t)F, sizeof *gt), *up = calloc((size_t)F, sizeof *up);
    double *tmp = calloc((size_t)D, sizeof *tmp), *sc = calloc((size_t)n, sizeof *sc);
    for (int p = 0; p < n; p++) {
        const float *e = tensor(g, "token_embd.weight", 0, V, D) + (int64_t)toks[p] * D;
        for (int64_t i = 0; i < D; i++) x[i] = e[i];
        for (int64_t l = 0; l < L; l++) {
            double *k = kc + (l * n + p) * kvd, *v = vc + (l * n + p) * kvd;
            rmsnorm(xn, x, tensor(g, "blk.%d.attn_norm.weight", l, 1, D), D, eps);
            matvec(q, tensor(g, "blk.%d.attn_q.weight", l, D, D),
                   tensor(g, "blk.%d.attn_q.bias", l, 1, D), xn, D, D);
            matvec(k, tensor(g, "blk.%d.attn_k.weight", l, kvd, D),
                   tensor(g, "blk.%d.attn_k.bias", l, 1, kvd), xn, kvd, D);
            matvec(v, tensor(g, "blk.%d.attn_v.weight", l, kvd, D),
                   tensor(g, "blk.%d.attn_v.bias", l, 1, kvd), xn, kvd, D);
            rope_neox(q, H, hd, n_rot, base, p);
            rope_neox(k, KVH, hd, n_rot, base, p);
            for (int64_t h = 0; h < H; h++) {
                int64_t kh = h / (H / KVH);
                double mx = -INFINITY, sum = 0;
                for (int t = 0; t <= p; t++) {
                    const double *kt = kc + (l * n + t) * kvd + kh * hd;
                    double s = 0;
                    for (int64_t i = 0; i < hd; i++) s += q[h * hd + i] * kt[i];
                    sc[t] = s / sqrt((double)hd);
                    mx = fmax(mx, sc[t]);
                }
                for (int t = 0; t <= p; t++) sum += sc[t] = exp(sc[t] - mx);
                for (int64_t i = 0; i < hd; i++) {
                    double o = 0;
                    for (int t = 0; t <= p; t++)
                        o += sc[t] / sum * vc[(l * n + t) * kvd + kh * hd + i];
                    att[h * hd + i] = o;
                }
            }
            matvec(tmp, tensor(g, "blk.%d.attn_output.weight", l, D, D), NULL, att, D, D);
            for (int64_t i = 0; i < D; i++) x[i] += tmp[i];
            rmsnorm(xn, x, tensor(g, "blk.%d.ffn_norm.weight", l, 1, D), D, eps);
            matvec(gt, tensor(g, "blk.%d.ffn_gate.weight", l, F, D), NULL, xn, F, D);
            matvec(up, tensor(g, "blk.%d.ffn_up.weight", l, F, D), NULL, xn, F, D);
            for (int64_t i = 0; i < F; i++) gt[i] = gt[i] / (1.0 + exp(-gt[i])) * up[i];
            matvec(tmp, tensor(g, "blk.%d.ffn_down.weight", l, D, F), NULL, gt, D, F);
            for (int64_t i = 0; i < D; i++) x[i] += tmp[i];
        }
        rmsnorm(xn, x, tensor(g, "output_norm.weight", 0, 1, D), D, eps);
        const char *out =
            pl_gguf_find_tensor(g, "output.weight") ? "output.weight" : "token_embd.weight";
        matvec(logits + (int64_t)p * V, tensor(g, out, 0, V, D), NULL, xn, V, D);
    }
    free(x), free(xn), free(q), free(att), free(kc), free(vc);
    free(gt), free(up), free(tmp), free(sc);
    pl_gguf_close(g);
}

static void test_qwen2_equivalence(void **state) {
    (void)state;
    char dir[] = "/tmp/pl_qwen2_XXXXXX", path[256];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/q.gguf", dir);
    enum { N = 10 * 512 };
    static float ref[N], got[N], zero[N];
    static double dense[N];
    int32_t V;
    run(SRC, ref, &V);
    for (int biased = 0; biased < 2; biased++) {
        void *bufs[64];
        int nb = 0;
        write_qwen2(path, biased, bufs, &nb);
        pl_model *m;
        assert_int_equal(pl_model_load(path, &m), PL_OK);
        assert_int_equal(m->hp.arch, PL_ARCH_QWEN2);
        assert_int_equal(m->hp.rope.mode, PL_ROPE_NEOX);
        assert_non_null(m->layers[0].bq);
        pl_model_destroy(m);
        run(path, got, &V);
        dense_forward(path, TOKS, 10, dense);
        double max_llama = 0, max_dense = 0, max_zero = 0, scale = 0;
        for (int i = 0; i < 10 * V; i++) {
            max_llama = fmax(max_llama, fabs(ref[i] - got[i]));
            max_dense = fmax(max_dense, fabs(dense[i] - got[i]));
            max_zero = fmax(max_zero, fabs((double)zero[i] - dense[i]));
            scale = fmax(scale, fabs(dense[i]));
        }
        print_message("qwen2 rewrite, %s biases: max |dlogit| vs llama %.2e, vs dense double "
                      "reference %.2e (max |logit| %.1f), dense biased vs unbiased %.2e\n",
                      biased ? "nonzero Q/K/V" : "zero", max_llama, max_dense, scale,
                      biased ? max_zero : 0.0);
        assert_true(max_dense < 2e-4); /* f32 vs double: ~5e-6 seen on logits of ~10 */
        if (!biased) {
            assert_true(max_llama < 1e-4);
            memcpy(zero, got, sizeof zero);
        } else {
            assert_true(max_zero > 0.1); /* the biases matter well beyond the tolerance */
        }
        for (int i = 0; i < nb; i++) free(bufs[i]);
        unlink(path);
    }
    rmdir(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_qwen2_equivalence)};
    return isa_run_group_tests(tests, NULL, NULL);
}
