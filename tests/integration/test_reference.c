/* The whole model against llama.cpp's reference continuations ($PL_SHARED_DIR/testdata/
 * reference/NAME.json), through the paged KV cache:
 *
 *  - teacher-forced: feed prompt + reference greedy tokens in one step and compare our
 *    log-probabilities of the reference top-5 ids at every generated position (tolerance per
 *    weight type, from the data's README); our argmax must equal the reference's wherever its
 *    top-1/top-2 gap exceeds 0.1;
 *  - free-running greedy, one token per step: ids equal the reference up to the first position
 *    whose top-1/top-2 gap is below 0.02.
 *
 * Each model runs with block sizes 1, 16 and 256 and with f16 and f32 KV, and with block tables
 * that are shuffled permutations of the pool, so the paging itself is exercised.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "base/rng.h"
#include "kernels/ops.h"
#include "model/model.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *name;
    double tol;
} model_case;

static const model_case MODELS[] = {
    {"stories260K", 1e-3},       {"synth-tiny-f32", 1e-3},    {"synth-tiny-f16", 1e-3},
    {"synth-tiny-bf16", 1e-3},   {"synth-tiny-q8_0", 2e-2},   {"synth-tiny-q4_0", 1e-1},
    {"synth-tiny-q4_k_m", 1e-1}, {"synth-tiny-q5_k_m", 1e-1}, {"synth-tiny-q6_k", 1e-1},
};

typedef struct {
    pl_model *m;
    pl_threadpool *tp;
    pl_forward_ctx *fwd;
    pl_kv_store kv;
    int32_t *table;
    int32_t max_blocks;
    float *logits;
} runner;

enum { MAX_T = 512 };

static void runner_open(runner *r, pl_model *m, int32_t block_size, pl_dtype dt, uint64_t seed) {
    memset(r, 0, sizeof *r);
    r->m = m;
    r->tp = pl_threadpool_create(2);
    assert_non_null(r->tp);
    assert_int_equal(pl_forward_ctx_create(m, MAX_T, MAX_T, r->tp, &r->fwd), PL_OK);
    r->max_blocks = (MAX_T + block_size - 1) / block_size;
    pl_kv_layout l = {dt, block_size, m->hp.n_kv_heads, m->hp.head_dim, 2 * r->max_blocks};
    assert_int_equal(pl_kv_store_init(&r->kv, &l, m->hp.n_layers, NULL), PL_OK);
    /* A shuffled table over a pool twice as large: logical blocks land anywhere. */
    int32_t n = (int32_t)l.num_blocks;
    int32_t *perm = malloc((size_t)n * sizeof *perm);
    for (int32_t i = 0; i < n; i++) perm[i] = i;
    pl_rng rng;
    pl_rng_seed(&rng, seed);
    for (int32_t i = n - 1; i > 0; i--) {
        int32_t j = (int32_t)pl_rng_below(&rng, (uint64_t)i + 1), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    r->table = perm;
    r->logits = malloc((size_t)MAX_T * m->hp.n_vocab * sizeof(float));
}

static void runner_close(runner *r) {
    free(r->logits);
    free(r->table);
    pl_kv_store_free(&r->kv);
    pl_forward_ctx_free(r->fwd);
    pl_threadpool_destroy(r->tp);
}

/* Run tokens at positions start.. of the one sequence; logits for all rows or the last. */
static void step(runner *r, const int32_t *tok, int32_t n, int32_t start, int all) {
    int32_t pos[MAX_T], rows[MAX_T];
    int64_t slots[MAX_T];
    int32_t bs = r->kv.layout.block_size;
    for (int32_t i = 0; i < n; i++) {
        pos[i] = start + i;
        slots[i] = (int64_t)r->table[pos[i] / bs] * bs + pos[i] % bs;
        rows[i] = i;
    }
    int32_t seq_start[2] = {0, n}, ctx = start + n;
    pl_step_batch b = {n, tok, pos, slots, 1, seq_start, &ctx, r->table, r->max_blocks,
                       all ? n : 1, all ? rows : &rows[n - 1]};
    assert_int_equal(pl_model_forward(r->fwd, &r->kv, &b, r->logits), PL_OK);
}

static int32_t ints(json_t *arr, int32_t *out) {
    size_t i;
    json_t *v;
    json_array_foreach(arr, i, v) out[i] = (int32_t)json_integer_value(v);
    return (int32_t)json_array_size(arr);
}

static int32_t argmax(const float *x, int32_t n) {
    int32_t b = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

static void check_case(runner *r, json_t *c, double tol, const char *label) {
    int32_t prompt[MAX_T], greedy[MAX_T], all[MAX_T];
    int32_t np = ints(json_object_get(c, "prompt_tokens"), prompt);
    int32_t ng = ints(json_object_get(c, "greedy_tokens"), greedy);
    json_t *steps = json_object_get(c, "steps");
    const int32_t V = r->m->hp.n_vocab;
    float *lp = malloc((size_t)V * sizeof(float));
    memcpy(all, prompt, (size_t)np * sizeof(int32_t));
    memcpy(all + np, greedy, (size_t)ng * sizeof(int32_t));

    /* Teacher-forced, one step for the whole sequence. */
    step(r, all, np + ng, 0, 1);
    double max_err = 0;
    int bad = 0;
    for (int32_t s = 0; s < ng; s++) {
        const float *lg = r->logits + (size_t)(np - 1 + s) * V;
        pl_log_softmax(lg, lp, V);
        json_t *top = json_object_get(json_array_get(steps, (size_t)s), "top");
        for (size_t k = 0; k < json_array_size(top); k++) {
            json_t *e = json_array_get(top, k);
            int32_t id = (int32_t)json_integer_value(json_array_get(e, 0));
            double ref = json_real_value(json_array_get(e, 1));
            double err = fabs(lp[id] - ref);
            if (err > max_err) max_err = err;
            if (err > tol && !bad++)
                print_error("%s step %d id %d: logprob %.5f, reference %.5f (tol %g)\n", label, s,
                            id, lp[id], ref, tol);
        }
        double gap = json_real_value(json_array_get(json_array_get(top, 0), 1)) -
                     json_real_value(json_array_get(json_array_get(top, 1), 1));
        if (gap > 0.1 && argmax(lg, V) != greedy[s])
            fail_msg("%s step %d: argmax %d, reference %d (gap %.3f)", label, s, argmax(lg, V),
                     greedy[s], gap);
    }

    /* Free-running greedy, token by token, up to the first near-tie. */
    step(r, prompt, np, 0, 0);
    for (int32_t s = 0; s < ng; s++) {
        json_t *top = json_object_get(json_array_get(steps, (size_t)s), "top");
        double gap = json_real_value(json_array_get(json_array_get(top, 0), 1)) -
                     json_real_value(json_array_get(json_array_get(top, 1), 1));
        if (gap < 0.02) break;
        int32_t id = argmax(r->logits, V);
        if (id != greedy[s]) fail_msg("%s greedy step %d: %d, reference %d", label, s, id, greedy[s]);
        step(r, &id, 1, np + s, 0);
    }
    print_message("%s: max |dlogprob| %.2e over %d steps\n", label, max_err, ng);
    if (bad && !getenv("PL_REF_NOFAIL")) fail_msg("%s: %d log-probabilities beyond %g (max error %.2e)", label, bad, tol, max_err);
    free(lp);
}

static void run_model(const model_case *mc, int32_t block_size, pl_dtype dt) {
    char path[1024], ref[1024];
    snprintf(path, sizeof path, "%s/models/%s.gguf", PL_SHARED_DIR, mc->name);
    snprintf(ref, sizeof ref, "%s/testdata/reference/%s.json", PL_SHARED_DIR, mc->name);
    pl_model *m;
    if (pl_model_load(path, &m) != PL_OK) fail_msg("load %s: %s", path, pl_last_error());
    json_error_t err;
    json_t *root = json_load_file(ref, 0, &err);
    if (!root) fail_msg("%s: %s", ref, err.text);
    runner r;
    runner_open(&r, m, block_size, dt, (uint64_t)block_size);
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(root, "cases"), i, c) {
        char label[256];
        snprintf(label, sizeof label, "%s/%s bs=%d kv=%s", mc->name,
                 json_string_value(json_object_get(c, "name")), block_size, pl_dtype_name(dt));
        check_case(&r, c, mc->tol, label);
    }
    runner_close(&r);
    json_decref(root);
    pl_model_free(m);
}

static void test_all_models(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof MODELS / sizeof MODELS[0]; i++)
        run_model(&MODELS[i], 16, PL_DT_F16);
}

static void test_block_sizes_and_kv_dtypes(void **state) {
    (void)state;
    static const int32_t sizes[] = {1, 16, 256};
    static const char *names[] = {"stories260K", "synth-tiny-f32", "synth-tiny-q8_0"};
    for (size_t n = 0; n < 3; n++)
        for (size_t s = 0; s < 3; s++)
            for (int d = 0; d < 2; d++) {
                model_case mc = MODELS[0];
                for (size_t k = 0; k < sizeof MODELS / sizeof MODELS[0]; k++)
                    if (!strcmp(MODELS[k].name, names[n])) mc = MODELS[k];
                run_model(&mc, sizes[s], d ? PL_DT_F32 : PL_DT_F16);
            }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_all_models),
        cmocka_unit_test(test_block_sizes_and_kv_dtypes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
