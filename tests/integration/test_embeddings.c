/* Embedding models (issue 17 part 3): random-weight BERTs made by `pagellm mkmodel --arch bert`
 * with the flags recorded in tests/data/embeddings/NAME.json, whose references llama.cpp's library
 * computed (scripts/make_embed_refs.sh). For each model:
 *
 *   - every input of tests/data/embeddings/inputs.txt tokenizes to llama.cpp's ids (WordPiece on
 *     the vocabulary mkmodel builds: accents, CJK, punctuation, controls, unknown words);
 *   - the embeddings of all inputs submitted together (one engine step) match llama.cpp's within
 *     1e-4 for f32 weights (5e-4 for f16), have norm 1, and equal bitwise the embeddings of the
 *     same inputs submitted one at a time;
 *   - what an embedding model refuses: generation requests, inputs longer than one step, empty
 *     inputs; and a generation model refuses embedding requests unless given a pooling.
 *
 * bert-rank-f32.json: a reranker (pooling rank, a classification head): query/document pairs
 * tokenized as llama-server's format_prompt_rerank, scored as llama.cpp's library scores them.
 *
 * stories260K-{mean,last}.json: the generation model stories260K with its final-normed hidden
 * states pooled (llama.cpp's --pooling, config.pooling here); its embedding inputs share their
 * step with a generation request's prefill and hold KV blocks only for that step.
 *
 * With LLAMA_CPP set (a local check, not CI), it also runs llama.cpp's own WordPiece test vectors
 * ($LLAMA_CPP/models/ggml-vocab-bert-bge.gguf .inp/.out) through the tokenizer.
 */
#include "pagellm.h"
#include "tokenizer/tokenizer.h"

#include <jansson.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include "kernels/cpu.h"
#include "../unit/isa_coverage.h"

static char tmpdir[] = "/tmp/pl_embed_XXXXXX";

static pl_engine *engine_for_pooling(const char *path, int32_t max_batched, int32_t pooling) {
    pl_engine_config c;
    pl_engine_config_default(&c);
    c.model_path = path;
    c.pooling = pooling;
    c.kv_cache_f32 = 1; /* as the reference */
    c.kv_cache_memory = 16 << 20;
    c.max_num_batched_tokens = max_batched;
    c.max_num_seqs = 32;
    c.threads = 2;
    pl_engine *e = NULL;
    if (pl_engine_create(&c, &e) != PL_OK) fail_msg("engine: %s", pl_last_error());
    return e;
}

static pl_engine *engine_for(const char *path, int32_t max_batched) {
    return engine_for_pooling(path, max_batched, 0);
}

/* Run the engine until request id finishes; its embedding (malloc'ed) or NULL with err set. */
static float *take(pl_engine *e, uint64_t id, int32_t *n, int32_t *n_prompt) {
    for (;;) {
        pl_request_output *o;
        if (pl_engine_poll(e, id, 0, &o) == PL_OK) {
            int done = o->finished;
            float *v = NULL;
            if (done && !o->error && o->embedding) {
                v = o->embedding;
                o->embedding = NULL;
                *n = o->n_embd;
                *n_prompt = o->n_prompt_tokens;
            }
            if (done && o->error) fail_msg("request failed: %s", o->error);
            pl_request_output_destroy(o);
            if (done) return v;
            continue;
        }
        assert_int_equal(pl_engine_step(e), PL_OK);
    }
}

static void check_model(const char *name, double tol) {
    char path[512], model[512], cmd[2048];
    snprintf(path, sizeof path, "%s/tests/data/embeddings/%s.json", PL_SOURCE_DIR, name);
    json_error_t jerr;
    json_t *ref = json_load_file(path, 0, &jerr);
    if (!ref) fail_msg("%s: %s", path, jerr.text);
    const char *flags = json_string_value(json_object_get(ref, "mkmodel"));
    const int32_t pooling = (int32_t)json_integer_value(json_object_get(ref, "pooling_type"));
    /* No mkmodel flags: stories260K as is, a generation model pooled on request (--pooling). */
    const int generation = !flags || !*flags;
    if (generation) {
        snprintf(model, sizeof model, "%s/models/stories260K.gguf", PL_SHARED_DIR);
    } else {
        snprintf(model, sizeof model, "%s/%s.gguf", tmpdir, name);
        snprintf(cmd, sizeof cmd, "'%s' mkmodel '%s' --vocab-from '%s/models/stories260K.gguf' "
                 "%s >/dev/null", PL_BINARY, model, PL_SHARED_DIR, flags);
        if (system(cmd) != 0) fail_msg("mkmodel failed: %s", cmd);
    }
    pl_engine *e = engine_for_pooling(model, 512, generation ? pooling : 0);
    assert_int_equal(pl_engine_pooling(e), pooling);
    /* A generation model's embeddings share their step with a generation request. */
    uint64_t gen_id = 0;
    if (generation) {
        pl_request_params gp;
        pl_request_params_default(&gp);
        gp.max_tokens = 8;
        gp.sampling.temperature = 0;
        assert_int_equal(pl_engine_add_request(e, "Once upon a time", NULL, 0, &gp, &gen_id),
                         PL_OK);
    }
    const int32_t dim = pl_engine_n_embd(e);
    const struct pl_tokenizer *tok = pl_engine_tokenizer(e);
    json_t *cases = json_object_get(ref, "cases");
    size_t n_cases = json_array_size(cases);
    uint64_t ids[64];
    int embeds[64];
    pl_request_params p;
    pl_request_params_default(&p);
    p.embedding = 1;
    size_t n_embeds = 0;

    /* Tokenization, and every embedding input submitted before any step: one batch. */
    for (size_t i = 0; i < n_cases && i < 64; i++) {
        json_t *c = json_array_get(cases, i);
        const char *text = json_string_value(json_object_get(c, "text"));
        json_t *want = json_object_get(c, "ids");
        int32_t *got;
        size_t n;
        assert_int_equal(pl_tokenize(tok, text, strlen(text), 1, 0, &got, &n), PL_OK);
        int same = n == json_array_size(want);
        for (size_t k = 0; same && k < n; k++)
            same = got[k] == json_integer_value(json_array_get(want, k));
        if (!same) {
            fprintf(stderr, "%s: '%s' got", name, text);
            for (size_t k = 0; k < n; k++) fprintf(stderr, " %d", got[k]);
            fprintf(stderr, "\n");
            fail_msg("%s: case %zu tokenizes differently from llama.cpp", name, i);
        }
        free(got);
        embeds[i] = json_object_get(c, "embedding") != NULL;
        if (embeds[i]) {
            assert_int_equal(pl_engine_add_request(e, text, NULL, 0, &p, &ids[i]), PL_OK);
            n_embeds++;
        }
    }
    assert_true(n_embeds >= 3);
    float *batch[64] = {0};
    double worst = 0;
    pl_engine_stats st0, st1;
    pl_engine_get_stats(e, &st0);
    for (size_t i = 0; i < n_cases && i < 64; i++) {
        if (!embeds[i]) continue;
        json_t *c = json_array_get(cases, i);
        json_t *want = json_object_get(c, "embedding");
        int32_t n = 0, n_prompt = 0;
        batch[i] = take(e, ids[i], &n, &n_prompt);
        assert_non_null(batch[i]);
        assert_int_equal(n, dim);
        assert_int_equal((size_t)n, json_array_size(want));
        assert_int_equal((size_t)n_prompt, json_array_size(json_object_get(c, "ids")));
        double ss = 0;
        for (int32_t k = 0; k < n; k++) {
            double d = fabs(batch[i][k] - json_real_value(json_array_get(want, k)));
            if (d > worst) worst = d;
            ss += (double)batch[i][k] * batch[i][k];
        }
        assert_true(fabs(ss - 1.0) < 1e-5);
    }
    pl_engine_get_stats(e, &st1);
    assert_int_equal(st1.steps - st0.steps, 1); /* all of them shared one step */
    if (generation) { /* ... with the generation request's prefill; it goes on alone */
        int32_t got_tokens = 0, done = 0;
        while (!done) {
            pl_request_output *o;
            if (pl_engine_poll(e, gen_id, 0, &o) != PL_OK) {
                assert_int_equal(pl_engine_step(e), PL_OK);
                continue;
            }
            for (int32_t k = 0; k < o->n_deltas; k++) got_tokens += o->deltas[k].n_tokens;
            done = o->finished;
            assert_null(o->error);
            pl_request_output_destroy(o);
        }
        assert_int_equal(got_tokens, 8);
    }
    fprintf(stderr, "%s: max |pagellm - llama.cpp| = %.3g over %zu embeddings (tolerance %g)\n",
            name, worst, n_embeds, tol);
    assert_true(worst <= tol);

    /* One at a time: bitwise the same as in the batch (row-independent kernels). */
    for (size_t i = 0; i < n_cases && i < 64; i++) {
        if (!embeds[i]) continue;
        const char *text = json_string_value(json_object_get(json_array_get(cases, i), "text"));
        uint64_t id;
        int32_t n = 0, n_prompt = 0;
        assert_int_equal(pl_engine_add_request(e, text, NULL, 0, &p, &id), PL_OK);
        float *one = take(e, id, &n, &n_prompt);
        assert_non_null(one);
        assert_memory_equal(one, batch[i], (size_t)dim * sizeof(float));
        free(one);
        free(batch[i]);
    }
    pl_engine_stats st;
    pl_engine_get_stats(e, &st);
    assert_int_equal(st.blocks_used, 0); /* embeddings of a generation model gave blocks back */
    pl_engine_destroy(e);
    if (!generation) unlink(model);
    json_decref(ref);
}

static void test_mean_f32(void **state) { (void)state; check_model("bert-mean-f32", 1e-4); }
static void test_cls_f32(void **state) { (void)state; check_model("bert-cls-f32", 1e-4); }
static void test_last_f32(void **state) { (void)state; check_model("bert-last-f32", 1e-4); }
static void test_mean_f16(void **state) { (void)state; check_model("bert-mean-f16", 5e-4); }
static void test_llama_mean(void **state) { (void)state; check_model("stories260K-mean", 1e-4); }
static void test_llama_last(void **state) { (void)state; check_model("stories260K-last", 1e-4); }

/* A reranker (issue 36): bert-rank-f32.json's query/document pairs tokenize as llama-server's
 * format_prompt_rerank ([CLS] query [SEP] document [SEP]), and their scores (the classification
 * head on the CLS state, one per pair) match llama.cpp's within 1e-5, all pairs in one step, and
 * equal bitwise the pairs scored one at a time. Any pooling the caller asks for is ignored. */
static void test_rank_f32(void **state) {
    (void)state;
    const double tol = 1e-5;
    char path[512], model[512], cmd[2048];
    snprintf(path, sizeof path, "%s/tests/data/embeddings/bert-rank-f32.json", PL_SOURCE_DIR);
    json_error_t jerr;
    json_t *ref = json_load_file(path, 0, &jerr);
    if (!ref) fail_msg("%s: %s", path, jerr.text);
    assert_int_equal(json_integer_value(json_object_get(ref, "pooling_type")), 4);
    snprintf(model, sizeof model, "%s/bert-rank-f32.gguf", tmpdir);
    snprintf(cmd, sizeof cmd, "'%s' mkmodel '%s' --vocab-from '%s/models/stories260K.gguf' %s "
             ">/dev/null", PL_BINARY, model, PL_SHARED_DIR,
             json_string_value(json_object_get(ref, "mkmodel")));
    if (system(cmd) != 0) fail_msg("mkmodel failed: %s", cmd);
    pl_engine *e = engine_for(model, 512);
    assert_int_equal(pl_engine_pooling(e), 4);
    assert_int_equal(pl_engine_n_embd(e), 1);
    const struct pl_tokenizer *tok = pl_engine_tokenizer(e);
    json_t *cases = json_object_get(ref, "cases");
    const size_t n_cases = json_array_size(cases);
    assert_true(n_cases >= 3 && n_cases <= 16);
    int32_t *pair[16];
    size_t n_pair[16];
    uint64_t ids[16];
    pl_request_params p;
    pl_request_params_default(&p);
    p.embedding = 1;
    p.add_special = 0;
    for (size_t i = 0; i < n_cases; i++) {
        json_t *c = json_array_get(cases, i);
        const char *q = json_string_value(json_object_get(c, "query"));
        const char *d = json_string_value(json_object_get(c, "document"));
        json_t *want = json_object_get(c, "ids");
        assert_int_equal(pl_tokenize_pair(tok, q, strlen(q), d, strlen(d), &pair[i], &n_pair[i]),
                         PL_OK);
        assert_int_equal(n_pair[i], json_array_size(want));
        for (size_t k = 0; k < n_pair[i]; k++)
            assert_int_equal(pair[i][k], json_integer_value(json_array_get(want, k)));
        assert_int_equal(pl_engine_add_request(e, NULL, pair[i], n_pair[i], &p, &ids[i]), PL_OK);
    }
    pl_engine_stats st0, st1;
    pl_engine_get_stats(e, &st0);
    float score[16];
    double worst = 0;
    for (size_t i = 0; i < n_cases; i++) {
        int32_t n = 0, n_prompt = 0;
        float *v = take(e, ids[i], &n, &n_prompt);
        assert_non_null(v);
        assert_int_equal(n, 1);
        assert_int_equal((size_t)n_prompt, n_pair[i]);
        score[i] = v[0];
        free(v);
        double want = json_real_value(json_array_get(
            json_object_get(json_array_get(cases, i), "score"), 0));
        if (fabs(score[i] - want) > worst) worst = fabs(score[i] - want);
    }
    pl_engine_get_stats(e, &st1);
    assert_int_equal(st1.steps - st0.steps, 1);
    fprintf(stderr, "bert-rank-f32: max |pagellm - llama.cpp| = %.3g over %zu pairs (tolerance "
            "%g)\n", worst, n_cases, tol);
    assert_true(worst <= tol);
    for (size_t i = 0; i < n_cases; i++) {
        uint64_t id;
        int32_t n = 0, n_prompt = 0;
        assert_int_equal(pl_engine_add_request(e, NULL, pair[i], n_pair[i], &p, &id), PL_OK);
        float *v = take(e, id, &n, &n_prompt);
        assert_non_null(v);
        assert_memory_equal(v, &score[i], sizeof(float));
        free(v);
        free(pair[i]);
    }
    pl_engine_destroy(e);
    e = engine_for_pooling(model, 512, 1); /* --pooling mean is ignored: a reranker scores */
    assert_int_equal(pl_engine_pooling(e), 4);
    pl_engine_destroy(e);
    unlink(model);
    json_decref(ref);
}

/* What is refused, with a message naming the reason. */
static void test_refusals(void **state) {
    (void)state;
    char model[512], cmd[2048];
    snprintf(model, sizeof model, "%s/small.gguf", tmpdir);
    snprintf(cmd, sizeof cmd, "'%s' mkmodel '%s' --vocab-from '%s/models/stories260K.gguf' --arch "
             "bert --dim 32 --layers 1 --heads 2 --ffn 64 --ctx 64 >/dev/null", PL_BINARY, model,
             PL_SHARED_DIR);
    if (system(cmd) != 0) fail_msg("mkmodel failed: %s", cmd);
    pl_engine *e = engine_for(model, 128);
    pl_request_params p;
    pl_request_params_default(&p);
    uint64_t id;
    assert_int_equal(pl_engine_add_request(e, "hello", NULL, 0, &p, &id), PL_ERR_INVALID_ARG);
    assert_non_null(strstr(pl_last_error(), "embedding model"));
    p.embedding = 1;
    int32_t ids[100];
    for (int i = 0; i < 100; i++) ids[i] = 5 + i % 50;
    assert_int_equal(pl_engine_add_request(e, NULL, ids, 65, &p, &id), PL_ERR_INVALID_ARG);
    assert_non_null(strstr(pl_last_error(), "maximum context length"));
    pl_engine_destroy(e);
    e = engine_for(model, 32); /* a step holds fewer tokens than the model's context */
    assert_int_equal(pl_engine_add_request(e, NULL, ids, 40, &p, &id), PL_ERR_INVALID_ARG);
    assert_non_null(strstr(pl_last_error(), "max-num-batched-tokens"));
    assert_int_equal(pl_engine_add_request(e, NULL, ids, 0, &p, &id), PL_ERR_INVALID_ARG);

    /* Aborted and released requests end without a vector and leave nothing behind; a request
     * that does not fit beside the others waits for the next step. */
    uint64_t a, r, k, w;
    assert_int_equal(pl_engine_add_request(e, NULL, ids, 20, &p, &a), PL_OK);
    assert_int_equal(pl_engine_add_request(e, NULL, ids, 20, &p, &r), PL_OK);
    assert_int_equal(pl_engine_add_request(e, NULL, ids, 20, &p, &k), PL_OK);
    assert_int_equal(pl_engine_add_request(e, NULL, ids, 20, &p, &w), PL_OK);
    pl_engine_abort(e, a);
    pl_engine_release(e, r);
    assert_int_equal(pl_engine_step(e), PL_OK); /* aborts applied; k runs; w (20 more) waits */
    pl_request_output *o;
    assert_int_equal(pl_engine_poll(e, a, 0, &o), PL_OK);
    assert_true(o->finished && o->embedding == NULL && o->deltas[0].finish == PL_FINISH_ABORT);
    pl_request_output_destroy(o);
    assert_int_equal(pl_engine_poll(e, r, 0, &o), PL_ERR_NOT_FOUND);
    assert_int_equal(pl_engine_poll(e, k, 0, &o), PL_OK);
    assert_true(o->finished && o->embedding && o->n_embd == pl_engine_n_embd(e));
    pl_request_output_destroy(o);
    assert_int_equal(pl_engine_poll(e, w, 0, &o), PL_ERR_TIMEOUT);
    assert_int_equal(pl_engine_step(e), PL_OK);
    assert_int_equal(pl_engine_poll(e, w, 0, &o), PL_OK);
    assert_true(o->finished && o->embedding);
    pl_request_output_destroy(o);
    pl_engine_stats st;
    pl_engine_get_stats(e, &st);
    assert_int_equal(st.running + st.waiting + st.swapped, 0);
    assert_int_equal(st.blocks_used, 0);
    ids[0] = 1 << 20;
    assert_int_equal(pl_engine_add_request(e, NULL, ids, 3, &p, &id), PL_ERR_INVALID_ARG);
    assert_non_null(strstr(pl_last_error(), "out of range"));
    pl_engine_destroy(e);
    unlink(model);

    snprintf(model, sizeof model, "%s/models/stories260K.gguf", PL_SHARED_DIR);
    e = engine_for(model, 128);
    assert_int_equal(pl_engine_pooling(e), 0);
    assert_int_equal(pl_engine_add_request(e, "hello", NULL, 0, &p, &id), PL_ERR_INVALID_ARG);
    assert_non_null(strstr(pl_last_error(), "pooling"));
    pl_engine_destroy(e);
    e = engine_for_pooling(model, 64, 1); /* with pooling: longer than a step is refused */
    ids[0] = 5;
    assert_int_equal(pl_engine_add_request(e, NULL, ids, 65, &p, &id), PL_ERR_INVALID_ARG);
    assert_non_null(strstr(pl_last_error(), "max-num-batched-tokens"));
    pl_engine_destroy(e);
}

/* Local check (LLAMA_CPP set): llama.cpp's WordPiece test vectors (bge), no special tokens. */
static void test_bge_vectors(void **state) {
    (void)state;
    const char *L = getenv("LLAMA_CPP");
    char path[1024];
    snprintf(path, sizeof path, "%s/models/ggml-vocab-bert-bge.gguf", L ? L : "");
    if (!L || access(path, R_OK) != 0) {
        fprintf(stderr, "bge vectors: skipped (set LLAMA_CPP to a llama.cpp checkout)\n");
        skip();
    }
    pl_gguf *g;
    pl_tokenizer *t;
    assert_int_equal(pl_gguf_open(path, &g), PL_OK);
    assert_int_equal(pl_tokenizer_load(g, &t), PL_OK);
    char ip[1100], op[1100];
    snprintf(ip, sizeof ip, "%s.inp", path);
    snprintf(op, sizeof op, "%s.out", path);
    FILE *fi = fopen(ip, "rb"), *fo = fopen(op, "rb");
    assert_non_null(fi);
    assert_non_null(fo);
    static char inp[1 << 20], out[1 << 20];
    size_t ni = fread(inp, 1, sizeof inp - 1, fi), no = fread(out, 1, sizeof out - 1, fo);
    inp[ni] = out[no] = 0;
    fclose(fi);
    fclose(fo);
    const char *sep = "\n__ggml_vocab_test__\n";
    char *pos = inp, *line = out;
    int n_cases = 0, bad = 0;
    while (*pos) {
        char *next = strstr(pos, sep);
        size_t len = next ? (size_t)(next - pos) : strlen(pos);
        char *eol = strchr(line, '\n');
        if (!eol) break;
        *eol = 0;
        int32_t *ids;
        size_t n;
        assert_int_equal(pl_tokenize(t, pos, len, 0, 0, &ids, &n), PL_OK);
        char got[16384] = "";
        size_t gl = 0;
        for (size_t k = 0; k < n && gl < sizeof got - 16; k++)
            gl += (size_t)snprintf(got + gl, sizeof got - gl, " %d", ids[k]);
        const char *want = line;
        while (*want == ' ') want++;
        if (strcmp(got + (n ? 1 : 0), want)) bad++;
        free(ids);
        n_cases++;
        line = eol + 1;
        pos = next ? next + strlen(sep) : pos + len;
    }
    fprintf(stderr, "bge vectors: %d cases, %d differ from llama.cpp\n", n_cases, bad);
    pl_tokenizer_destroy(t);
    pl_gguf_close(g);
    assert_true(n_cases > 0);
    assert_int_equal(bad, 0);
}

static int setup(void **state) {
    (void)state;
    strcpy(tmpdir, "/tmp/pl_embed_XXXXXX"); /* the group runs once per kernel level */
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    return rmdir(tmpdir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mean_f32), cmocka_unit_test(test_cls_f32),
        cmocka_unit_test(test_last_f32), cmocka_unit_test(test_mean_f16),
        cmocka_unit_test(test_llama_mean), cmocka_unit_test(test_llama_last),
        cmocka_unit_test(test_rank_f32),
        cmocka_unit_test(test_refusals), cmocka_unit_test(test_bge_vectors),
    };
    return isa_run_group_tests(tests, setup, teardown);
}
