/* LoRA adapters in the engine (issue 36; model/lora.h). On a small random model (mkmodel) with
 * two random adapters (mkmodel --lora-of): requests under adapter a, adapter b and the base
 * model batched together give bitwise the tokens and log-probabilities each gives alone (and
 * the adapters do change them); the prefix cache hits a prompt's blocks only under the adapter
 * that computed them; an adapter unloaded while a request runs under it lets it finish as
 * before; speculative decoding verifies under the adapter (the same greedy tokens); every bad
 * adapter (another base model, a shape or rank that does not fit, a malformed file, a tensor it
 * cannot adapt, a name in use or unknown) is refused naming the tensor or the name, and the
 * engine keeps serving. Agreement with llama.cpp: test_wtype_reference.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "engine_util.h"
#include "gguf/gguf.h"
#include "pagellm.h"
#include "kernels/cpu.h"
#include "../unit/isa_coverage.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[32];
static char base[256], ad_a[256], ad_b[256], other[256], ad_other[256];

static void sh(const char *cmd) {
    if (system(cmd) != 0) fail_msg("failed: %s", cmd);
}

static int setup_files(void **state) {
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/pl_lora_XXXXXX"); /* once per kernel level */
    if (!mkdtemp(dir)) return -1;
    static char cmd[8192];
    const char *mk = "'" PL_BINARY "' mkmodel";
    snprintf(base, sizeof base, "%s/base.gguf", dir);
    snprintf(ad_a, sizeof ad_a, "%s/a.gguf", dir);
    snprintf(ad_b, sizeof ad_b, "%s/b.gguf", dir);
    snprintf(other, sizeof other, "%s/other.gguf", dir);
    snprintf(ad_other, sizeof ad_other, "%s/aother.gguf", dir);
    snprintf(cmd, sizeof cmd, "%s '%s' --vocab-from '%s/models/stories260K.gguf' --dim 64 "
             "--layers 2 --heads 4 --kv-heads 2 --ffn 128 --seed 4 >/dev/null && "
             "%s '%s' --lora-of '%s' --lora-rank 4 --seed 1 >/dev/null && "
             "%s '%s' --lora-of '%s' --lora-rank 8 --lora-targets attn_q,attn_v,ffn_down "
             "--type f16 --seed 2 >/dev/null && "
             "%s '%s' --vocab-from '%s/models/stories260K.gguf' --dim 32 --layers 2 --heads 4 "
             "--kv-heads 2 --ffn 64 >/dev/null && %s '%s' --lora-of '%s' >/dev/null",
             mk, base, PL_SHARED_DIR, mk, ad_a, base, mk, ad_b, base, mk, other, PL_SHARED_DIR,
             mk, ad_other, other);
    sh(cmd);
    return 0;
}

static int teardown_files(void **state) {
    (void)state;
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd);
}

static pl_engine *engine_spec(int prefix_caching, int ngram) {
    pl_engine_config c;
    pl_engine_config_default(&c);
    c.model_path = base;
    c.kv_cache_memory = 8u << 20;
    c.threads = 2;
    c.enable_prefix_caching = prefix_caching;
    c.speculative_ngram = ngram;
    c.max_lora_rank = 8;
    pl_engine *e;
    if (pl_engine_create(&c, &e) != PL_OK) fail_msg("engine: %s", pl_last_error());
    if (pl_engine_load_lora(e, "a", ad_a, 1.0f) != PL_OK ||
        pl_engine_load_lora(e, "b", ad_b, 0.5f) != PL_OK)
        fail_msg("load: %s", pl_last_error());
    return e;
}

static pl_engine *engine(int prefix_caching) { return engine_spec(prefix_caching, 0); }

static uint64_t add(pl_engine *e, const char *prompt, const char *lora, int32_t max_tokens) {
    pl_request_params p;
    greedy_params(&p, max_tokens);
    p.logprobs = 0;
    p.lora = lora;
    uint64_t id;
    if (pl_engine_add_request(e, prompt, NULL, 0, &p, &id) != PL_OK)
        fail_msg("add (%s): %s", lora ? lora : "base", pl_last_error());
    return id;
}

/* a's two requests sit apart in the batch: its rows are gathered into one product */
static const char *const PROMPTS[] = {"Once upon a time", "The little dog ran to the park and",
                                      "Lily said", "Tom had a big red ball"};
static const char *const LORAS[] = {"a", NULL, "b", "a"};
enum { N_REQ = 4 };

static void same(const result *x, const result *y, const char *what) {
    if (x->n_ids[0] != y->n_ids[0] ||
        memcmp(x->ids[0], y->ids[0], (size_t)x->n_ids[0] * sizeof(int32_t)) ||
        memcmp(x->logprobs[0], y->logprobs[0], (size_t)x->n_ids[0] * sizeof(float)))
        fail_msg("%s: the outputs differ", what);
}

/* a, base, b and a batched in the same steps equal each run alone, bitwise. */
static void test_batched_equals_alone(void **state) {
    (void)state;
    pl_engine *e = engine(0);
    static result alone[N_REQ], together[N_REQ], bare[N_REQ];
    memset(alone, 0, sizeof alone); /* static (large), and the test runs at every kernel level */
    memset(together, 0, sizeof together);
    memset(bare, 0, sizeof bare);
    for (int i = 0; i < N_REQ; i++) {
        uint64_t id = add(e, PROMPTS[i], LORAS[i], 24);
        run_all(e, &id, &alone[i], 1);
        id = add(e, PROMPTS[i], NULL, 24);
        run_all(e, &id, &bare[i], 1);
    }
    uint64_t ids[N_REQ];
    for (int i = 0; i < N_REQ; i++) ids[i] = add(e, PROMPTS[i], LORAS[i], 24);
    run_all(e, ids, together, N_REQ);
    for (int i = 0; i < N_REQ; i++) {
        assert_int_equal(together[i].n_ids[0], 24);
        same(&alone[i], &together[i], PROMPTS[i]);
    }
    /* the adapters change the answers (else the test above proves nothing) */
    for (int i = 0; i < N_REQ; i++)
        if (LORAS[i] && !memcmp(alone[i].logprobs[0], bare[i].logprobs[0], 24 * sizeof(float)))
            fail_msg("adapter %s left %s's log-probabilities as the base model's", LORAS[i],
                     PROMPTS[i]);
    pl_engine_destroy(e);
}

/* The same prompt under a hits a's cached blocks only: not under b, not under the base model. */
static void test_prefix_cache_keyed_by_adapter(void **state) {
    (void)state;
    pl_engine *e = engine(1);
    const char *prompt = "Once upon a time there was a little girl named Lily. She loved to play "
                         "outside in the park with her friends every day";
    static const struct { const char *lora; int hit; } runs[] = {
        {"a", 0}, {"b", 0}, {NULL, 0}, {"a", 1}, {"b", 1}, {NULL, 1}};
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        static result r;
        memset(&r, 0, sizeof r);
        uint64_t id = add(e, prompt, runs[i].lora, 2);
        run_all(e, &id, &r, 1);
        assert_true(r.n_prompt > 32);
        if (runs[i].hit ? r.n_cached < 16 : r.n_cached != 0)
            fail_msg("run %zu (%s): %d of %d prompt tokens cached", i,
                     runs[i].lora ? runs[i].lora : "base", r.n_cached, r.n_prompt);
    }
    pl_engine_destroy(e);
}

/* Speculative decoding (n-gram proposals) verifies under the request's adapter: the greedy
 * tokens are those without it. */
static void test_speculative_under_adapter(void **state) {
    (void)state;
    static result plain, spec;
    memset(&plain, 0, sizeof plain);
    memset(&spec, 0, sizeof spec);
    pl_engine *e = engine(0);
    uint64_t id = add(e, PROMPTS[0], "a", 32);
    run_all(e, &id, &plain, 1);
    pl_engine_destroy(e);
    e = engine_spec(0, 1);
    id = add(e, PROMPTS[0], "a", 32);
    run_all(e, &id, &spec, 1);
    pl_engine_stats st;
    pl_engine_get_stats(e, &st);
    pl_engine_destroy(e);
    if (plain.n_ids[0] != 32 || spec.n_ids[0] != 32 ||
        memcmp(plain.ids[0], spec.ids[0], 32 * sizeof(int32_t)))
        fail_msg("speculative decoding under an adapter changed the greedy tokens");
    assert_true(st.spec_draft_tokens > 0); /* it did speculate */
}

/* Unloading an adapter a request runs under: the request finishes under it, as if nothing
 * happened; new requests naming it are refused; loading it again under the name works. */
static void test_unload_while_running(void **state) {
    (void)state;
    pl_engine *e = engine(0);
    static result before, during, after;
    memset(&before, 0, sizeof before);
    memset(&during, 0, sizeof during);
    memset(&after, 0, sizeof after);
    uint64_t id = add(e, PROMPTS[0], "a", 20);
    run_all(e, &id, &before, 1);
    id = add(e, PROMPTS[0], "a", 20);
    for (int i = 0; i < 5; i++) assert_int_equal(pl_engine_step(e), PL_OK);
    assert_int_equal(pl_engine_unload_lora(e, "a"), PL_OK);
    pl_lora_info info[4];
    assert_int_equal(pl_engine_list_loras(e, info, 4), 1);
    assert_string_equal(info[0].name, "b");
    run_all(e, &id, &during, 1);
    same(&before, &during, "unloaded mid-request");
    pl_request_params p;
    pl_request_params_default(&p);
    p.lora = "a";
    assert_int_equal(pl_engine_add_request(e, "x", NULL, 0, &p, &id), PL_ERR_NOT_FOUND);
    assert_non_null(strstr(pl_last_error(), "'a'"));
    assert_int_equal(pl_engine_load_lora(e, "a", ad_a, 1.0f), PL_OK);
    id = add(e, PROMPTS[0], "a", 20);
    run_all(e, &id, &after, 1);
    same(&before, &after, "reloaded");
    pl_engine_destroy(e);
}

/* A hand-made adapter of base's shapes (dim 64, ffn 128): the pairs given, rank 4 f32 noise. */
typedef struct { const char *name; int64_t a0, a1, b0, b1; } pair_spec;

static const char *write_adapter(const char *file, const char *arch, const char *type,
                                 const pair_spec *ps, int n) {
    static char path[300];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    pl_gguf_writer *w = pl_gguf_writer_create();
    static float data[8][64 * 128];
    for (int i = 0; i < 64 * 128; i++) data[0][i] = 0.01f * (float)(i % 7);
    assert_int_equal(pl_gguf_writer_add_str(w, "general.architecture", arch), PL_OK);
    assert_int_equal(pl_gguf_writer_add_str(w, "general.type", type), PL_OK);
    assert_int_equal(pl_gguf_writer_add_str(w, "adapter.type", "lora"), PL_OK);
    assert_int_equal(pl_gguf_writer_add_f32(w, "adapter.lora.alpha", 8), PL_OK);
    for (int i = 0; i < n; i++) {
        char nm[160];
        int64_t ne[2] = {ps[i].a0, ps[i].a1};
        snprintf(nm, sizeof nm, "%s.lora_a", ps[i].name);
        if (ps[i].a0) assert_int_equal(pl_gguf_writer_add_tensor(w, nm, PL_DT_F32, 2, ne, data[0]), PL_OK);
        int64_t nb[2] = {ps[i].b0, ps[i].b1};
        snprintf(nm, sizeof nm, "%s.lora_b", ps[i].name);
        if (ps[i].b0) assert_int_equal(pl_gguf_writer_add_tensor(w, nm, PL_DT_F32, 2, nb, data[0]), PL_OK);
    }
    assert_int_equal(pl_gguf_writer_write(w, path), PL_OK);
    pl_gguf_writer_destroy(w);
    return path;
}

static void refused(pl_engine *e, const char *path, pl_status want, const char *needle) {
    pl_status st = pl_engine_load_lora(e, "bad", path, 1.0f);
    if (st != want || !strstr(pl_last_error(), needle))
        fail_msg("%s: status %d, '%s' (wanted %d naming '%s')", path, st, pl_last_error(), want,
                 needle);
}

static void test_bad_adapters(void **state) {
    (void)state;
    pl_engine *e = engine(0);
    /* another base model's adapter: its shapes do not fit, the tensor is named */
    refused(e, ad_other, PL_ERR_INVALID_ARG, "blk.0.attn_q.weight");
    /* a model is not an adapter */
    refused(e, other, PL_ERR_INVALID_ARG, "general.type");
    /* a GGUF v3 header cut short */
    char junk[300];
    snprintf(junk, sizeof junk, "%s/junk.gguf", dir);
    FILE *f = fopen(junk, "wb");
    fwrite("GGUF\x03\0\0\0\x01\0\0", 1, 11, f);
    fclose(f);
    refused(e, junk, PL_ERR_FORMAT, junk);
    refused(e, "/nonexistent/x.gguf", PL_ERR_IO, "/nonexistent/x.gguf");
    const pair_spec ok = {"blk.0.attn_q.weight", 64, 4, 4, 64};
    const pair_spec rank = {"blk.1.attn_k.weight", 64, 4, 2, 32};
    refused(e, write_adapter("rank.gguf", "llama", "adapter", (pair_spec[]){ok, rank}, 2),
            PL_ERR_INVALID_ARG, "blk.1.attn_k.weight': lora_a's rank 4 is not lora_b's 2");
    const pair_spec shape = {"blk.0.ffn_up.weight", 64, 4, 4, 64};
    refused(e, write_adapter("shape.gguf", "llama", "adapter", &shape, 1), PL_ERR_INVALID_ARG,
            "blk.0.ffn_up.weight");
    const pair_spec half = {"blk.0.attn_v.weight", 64, 4, 0, 0};
    refused(e, write_adapter("half.gguf", "llama", "adapter", &half, 1), PL_ERR_FORMAT,
            "blk.0.attn_v.weight.lora_b");
    const pair_spec absent = {"blk.7.attn_q.weight", 64, 4, 4, 64};
    refused(e, write_adapter("absent.gguf", "llama", "adapter", &absent, 1), PL_ERR_INVALID_ARG,
            "'blk.7.attn_q.weight' does not exist in the base model");
    const pair_spec emb = {"token_embd.weight", 64, 4, 4, 512};
    refused(e, write_adapter("emb.gguf", "llama", "adapter", &emb, 1), PL_ERR_UNSUPPORTED,
            "token_embd.weight");
    refused(e, write_adapter("arch.gguf", "qwen3", "adapter", &ok, 1), PL_ERR_INVALID_ARG,
            "general.architecture");
    const pair_spec big = {"blk.0.attn_q.weight", 64, 16, 16, 64};
    refused(e, write_adapter("big.gguf", "llama", "adapter", &big, 1), PL_ERR_INVALID_ARG,
            "--max-lora-rank 8");
    /* names */
    assert_int_equal(pl_engine_load_lora(e, "a", ad_b, 1.0f), PL_ERR_INVALID_ARG);
    assert_non_null(strstr(pl_last_error(), "'a'"));
    assert_int_equal(pl_engine_unload_lora(e, "zzz"), PL_ERR_NOT_FOUND);
    assert_non_null(strstr(pl_last_error(), "'zzz'"));
    /* the engine serves on: both adapters still listed, and a request runs */
    pl_lora_info info[4];
    assert_int_equal(pl_engine_list_loras(e, info, 4), 2);
    static result r;
    memset(&r, 0, sizeof r);
    uint64_t id = add(e, PROMPTS[1], "b", 4);
    run_all(e, &id, &r, 1);
    assert_int_equal(r.n_ids[0], 4);
    pl_engine_destroy(e);
    /* an engine without adapters refuses to load one */
    pl_engine_config c;
    pl_engine_config_default(&c);
    c.model_path = base;
    c.kv_cache_memory = 4u << 20;
    c.threads = 1;
    assert_int_equal(pl_engine_create(&c, &e), PL_OK);
    assert_int_equal(pl_engine_load_lora(e, "a", ad_a, 1.0f), PL_ERR_INVALID_ARG);
    assert_non_null(strstr(pl_last_error(), "--max-lora-rank"));
    pl_engine_destroy(e);
    /* nor with tensor parallelism */
    c.max_lora_rank = 8;
    c.tensor_parallel_size = 2;
    assert_int_not_equal(pl_engine_create(&c, &e), PL_OK);
    assert_non_null(strstr(pl_last_error(), "--tensor-parallel-size"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batched_equals_alone),
        cmocka_unit_test(test_prefix_cache_keyed_by_adapter),
        cmocka_unit_test(test_unload_while_running),
        cmocka_unit_test(test_speculative_under_adapter),
        cmocka_unit_test(test_bad_adapters),
    };
    return isa_run_group_tests(tests, setup_files, teardown_files);
}
