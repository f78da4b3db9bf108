/* A mixture-of-experts model under the engine's features (issue 34): a tiny random qwen3moe
 * (`pagellm mkmodel --arch qwen3moe`, 4 experts, 2 per token) through the paged KV cache with
 * prefix-cache hits, preemption (recompute and swap) in a tight KV budget, n-gram speculative
 * decoding and a JSON-schema constraint. Each feature changes what is computed, never the
 * result, so each run is compared with the same requests without it:
 *  - prefix cache: requests sharing a prefix, one after the other, with and without prefix
 *    caching: bitwise-equal ids and log-probabilities, and hits that skip the shared blocks;
 *  - preemption: a batch of 12 greedy requests in a pool that cannot hold them all (recompute,
 *    then swap) equal to the same batch in a pool that can, and with n-gram speculation too;
 *  - structured output: a schema-constrained request in that tight batch equals it alone, and
 *    its text satisfies the schema (checked with jansson, not the constraint compiler).
 * The runs group different tokens into a step, so the experts see different sets of rows: a
 * token's output must not depend on which tokens shared its step (routing is per token, each
 * expert's rows are computed independently, a token's experts are summed in id order). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "engine_util.h"

#include "engine/engine_parts.h"
#include "engine_pool.h"

#include <jansson.h>
#include <unistd.h>

#define STORIES PL_SHARED_DIR "/models/stories260K.gguf"

static char model_path[64];

static const char *PROMPTS[] = {
    "One day, Lily went to the park. One day, Lily went to the", "Lily and Tom went to the park",
    "The little dog was sad because", "One day, a big red ball", "Sam liked to eat apples",
    "There was a tiny bird in a tree", "Mom said it was time for bed", "The sun was shining and",
};
enum { N_PROMPTS = sizeof PROMPTS / sizeof PROMPTS[0], N_BATCH = 12, MAX_TOKENS = 40 };

static const char *SCHEMA =
    "{\"type\": \"object\", \"properties\": {\"name\": {\"type\": \"string\", \"maxLength\": 6}, "
    "\"color\": {\"enum\": [\"red\", \"green\", \"blue\"]}}, \"required\": [\"name\", \"color\"], "
    "\"additionalProperties\": false}";

typedef struct {
    uint64_t kv_bytes;
    int prefix_cache, ngram, swap;
} setup;

static pl_engine *make(const setup *s) {
    pl_engine_config c;
    pl_engine_config_default(&c);
    c.model_path = model_path;
    c.kv_cache_memory = s->kv_bytes;
    c.block_size = 16;
    c.enable_prefix_caching = s->prefix_cache;
    if (s->swap) {
        c.preemption_mode = PL_PREEMPT_SWAP;
        c.swap_space = 4 << 20;
    }
    c.threads = 1;
    c.max_num_seqs = 32;
    c.max_num_batched_tokens = 256;
    c.max_model_len = 256;
    c.speculative_ngram = s->ngram;
    c.num_speculative_tokens = s->ngram ? 4 : 0;
    c.speculative_max_batch = -1; /* speculate in every batch */
    pl_engine *e;
    if (pl_engine_create(&c, &e) != PL_OK) fail_msg("engine: %s", pl_last_error());
    return e;
}

static void add(pl_engine *e, const char *prompt, const pl_request_params *p, uint64_t *id) {
    if (pl_engine_add_request(e, prompt, NULL, 0, p, id) != PL_OK)
        fail_msg("add: %s", pl_last_error());
}

static void greedy(pl_request_params *p, int32_t max_tokens) {
    pl_request_params_default(p);
    p->sampling.temperature = 0;
    p->max_tokens = max_tokens;
    p->ignore_eos = 1;
    p->logprobs = 0; /* the chosen tokens' log-probabilities */
}

static void schema_params(pl_request_params *p) {
    pl_request_params_default(p);
    p->sampling.temperature = 0;
    p->max_tokens = 120;
    p->constraint = PL_CONSTRAINT_JSON_SCHEMA;
    p->constraint_text = SCHEMA;
}

static void assert_same(const result *a, const result *b, const char *what, int i) {
    assert_true(a->finished && !a->error[0] && b->finished && !b->error[0]);
    if (a->n_ids[0] != b->n_ids[0] || memcmp(a->ids[0], b->ids[0], (size_t)a->n_ids[0] * 4) ||
        memcmp(a->logprobs[0], b->logprobs[0], (size_t)a->n_ids[0] * sizeof(float)))
        fail_msg("%s: request %d: ids or log-probabilities differ (%d and %d tokens: '%s' / '%s')",
                 what, i, (int)a->n_ids[0], (int)b->n_ids[0], a->text[0], b->text[0]);
}

/* The same prompts one after the other (the second wave shares the first's blocks, B shares
 * A's first sentence): with and without prefix caching, the same bits. */
static void test_prefix_cache(void **state) {
    (void)state;
    static const char *A = "Once upon a time, there was a little girl named Lily. She loved to "
                           "play outside in the park with her big red ball and her dog.";
    static const char *B = "Once upon a time, there was a little girl named Lily. She had a "
                           "small cat that liked to sleep in the sun all day.";
    const char *reqs[] = {A, A, B, A};
    enum { N = sizeof reqs / sizeof reqs[0] };
    static result r[2][N];
    memset(r, 0, sizeof r);
    pl_engine_stats st[2];
    for (int pc = 0; pc < 2; pc++) {
        pl_engine *e = make(&(setup){.kv_bytes = 8 << 20, .prefix_cache = pc});
        for (int i = 0; i < N; i++) {
            pl_request_params p;
            greedy(&p, 12);
            uint64_t id;
            add(e, reqs[i], &p, &id);
            run_all(e, &id, &r[pc][i], 1);
            assert_engine_pool_free(e);
        }
        pl_engine_get_stats(e, &st[pc]);
        pl_engine_destroy(e);
    }
    for (int i = 0; i < N; i++) {
        assert_same(&r[0][i], &r[1][i], "prefix cache", i);
        assert_int_equal(r[0][i].n_cached, 0);
    }
    print_message("prefix cache: %d, %d, %d tokens of %d cached\n", r[1][1].n_cached,
                  r[1][2].n_cached, r[1][3].n_cached, r[1][1].n_prompt);
    assert_int_equal(r[1][0].n_cached, 0);
    assert_true(r[1][1].n_cached >= 16 && r[1][2].n_cached >= 16 && r[1][3].n_cached >= 16);
    assert_true(r[1][2].n_cached < r[1][1].n_cached); /* B shares only A's first blocks */
    assert_true(st[1].prefix_hits > 0);
}

/* N_BATCH greedy requests (prompts cycled) and, as request N_BATCH, the schema-constrained one;
 * all added before the first step. */
static void run_batch(const setup *s, result *res, pl_engine_stats *st) {
    pl_engine *e = make(s);
    uint64_t ids[N_BATCH + 1];
    memset(res, 0, (N_BATCH + 1) * sizeof *res);
    for (int i = 0; i < N_BATCH; i++) {
        pl_request_params p;
        greedy(&p, MAX_TOKENS + 3 * (i % 4));
        add(e, PROMPTS[i % N_PROMPTS], &p, &ids[i]);
    }
    pl_request_params p;
    schema_params(&p);
    add(e, "The little dog", &p, &ids[N_BATCH]);
    run_all(e, ids, res, N_BATCH + 1);
    pl_engine_get_stats(e, st);
    assert_engine_pool_free(e);
    pl_engine_destroy(e);
}

static void assert_schema_ok(const result *r) {
    assert_int_equal(r->finish[0], PL_FINISH_STOP);
    json_error_t err;
    json_t *v = json_loads(r->text[0], 0, &err);
    if (!v) fail_msg("not JSON (%s): '%s'", err.text, r->text[0]);
    const char *name = json_string_value(json_object_get(v, "name"));
    const char *color = json_string_value(json_object_get(v, "color"));
    size_t chars = 0; /* maxLength counts characters: UTF-8 lead bytes */
    for (const char *c = name; c && *c; c++) chars += ((unsigned char)*c & 0xC0) != 0x80;
    int ok = json_is_object(v) && json_object_size(v) == 2 && name && chars <= 6 && color &&
             (!strcmp(color, "red") || !strcmp(color, "green") || !strcmp(color, "blue"));
    json_decref(v);
    if (!ok) fail_msg("breaks the schema: '%s'", r->text[0]);
}

/* A tight pool preempts (recompute, then swap; then with n-gram speculation): every output is
 * the roomy pool's; the schema-constrained request is also the same run alone. */
static void test_preemption_spec_schema(void **state) {
    (void)state;
    static result base[N_BATCH + 1], alone[1], tight[N_BATCH + 1];
    pl_engine_stats s;
    run_batch(&(setup){.kv_bytes = 8 << 20}, base, &s);
    assert_int_equal(s.preemptions, 0);
    assert_schema_ok(&base[N_BATCH]);
    print_message("schema: '%s'\n", base[N_BATCH].text[0]);

    pl_engine *e = make(&(setup){.kv_bytes = 8 << 20});
    pl_request_params p;
    schema_params(&p);
    uint64_t id;
    memset(alone, 0, sizeof alone);
    add(e, "The little dog", &p, &id);
    run_all(e, &id, alone, 1);
    pl_engine_destroy(e);
    assert_same(&base[N_BATCH], &alone[0], "schema alone", 0);

    /* 2 layers x 2 KV heads x 16 dims x 16 tokens x K and V in f16: 4 KiB a block; 20 blocks
     * for 13 sequences of up to ~4 blocks each */
    static const struct { const char *name; setup s; } runs[] = {
        {"recompute", {.kv_bytes = 20 * 4096}},
        {"swap", {.kv_bytes = 20 * 4096, .swap = 1}},
        {"recompute + ngram", {.kv_bytes = 20 * 4096, .ngram = 1}},
    };
    for (size_t k = 0; k < sizeof runs / sizeof runs[0]; k++) {
        run_batch(&runs[k].s, tight, &s);
        print_message("%s: %d blocks, %llu preemptions (%llu swapped out), %llu of %llu "
                      "proposals accepted\n", runs[k].name, (int)s.blocks_total,
                      (unsigned long long)s.preemptions, (unsigned long long)s.swaps_out,
                      (unsigned long long)s.spec_accepted_tokens,
                      (unsigned long long)s.spec_draft_tokens);
        assert_true(s.preemptions > 0);
        if (runs[k].s.swap) assert_true(s.swaps_out > 0);
        if (runs[k].s.ngram) assert_true(s.spec_draft_tokens > 0);
        for (int i = 0; i <= N_BATCH; i++) assert_same(&base[i], &tight[i], runs[k].name, i);
    }
}

static int make_model(void **state) {
    (void)state;
    snprintf(model_path, sizeof model_path, "/tmp/pl_moe_engine_XXXXXX");
    int fd = mkstemp(model_path);
    if (fd < 0) return -1;
    close(fd);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "'%s' mkmodel '%s' --vocab-from '%s' --arch qwen3moe --dim 64 "
             "--layers 2 --heads 4 --kv-heads 2 --head-dim 16 --ffn 64 --experts 4 "
             "--experts-used 2 --expert-ffn 32 --seed 3 >/dev/null", PL_BINARY, model_path,
             STORIES);
    return system(cmd) == 0 ? 0 : -1;
}

static int remove_model(void **state) {
    (void)state;
    unlink(model_path);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prefix_cache),
        cmocka_unit_test(test_preemption_spec_schema),
    };
    return cmocka_run_group_tests(tests, make_model, remove_model);
}
