/* Unit tests for engine/admission alone: no engine, no model weights. A tokenizer (stories260K's
 * vocabulary), a bookkeeping-only KV cache and a constraint registry are all it needs:
 *  - a text prompt is tokenized and becomes one WAITING sequence, n_live 1, arrival set, no id;
 *  - token ids are checked against the vocabulary, an empty prompt and bad parameters are
 *    refused with their messages, best_of defaults to n, beam search neutralises sampling;
 *  - the fit checks: the model's context, the KV cache's capacity (paged, and a contiguous
 *    reservation), and n / best_of / beams refused where the layout shares nothing;
 *  - embedding requests: refused without pooling, refused by an embedding-only model when they
 *    generate, one step's budget; a generation model's embedding holds blocks (PL_EMBED_PAGED);
 *  - a compiled constraint starts the sequence's automaton; a bad one is an error.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "engine/admission.h"
#include "gguf/gguf.h"
#include "model/model.h"

#include <stdlib.h>
#include <string.h>

#define MODEL PL_SHARED_DIR "/models/stories260K.gguf"

enum { V = 512, BS = 4, BLOCKS = 32 };

typedef struct {
    pl_gguf *gg;
    pl_tokenizer *tok;
    pl_kv_cache *paged, *contig;
    pl_cons_registry *cons;
    pl_admission a;
} world;

static int setup(void **state) {
    world *w = calloc(1, sizeof *w);
    assert_int_equal(pl_gguf_open(MODEL, &w->gg), PL_OK);
    assert_int_equal(pl_tokenizer_load(w->gg, &w->tok), PL_OK);
    pl_kv_manager_config pc = {.block_size = BS, .num_blocks = BLOCKS, .max_blocks_per_seq = 64,
                               .watermark = 0, .enable_prefix_caching = 1};
    assert_int_equal(pl_kv_cache_create_blocks(&pc, &w->paged), PL_OK);
    pl_kv_manager_config cc = pc;
    cc.enable_prefix_caching = 0;
    cc.policy = PL_KV_POLICY_MAX;
    cc.max_seq_tokens = 64;
    assert_int_equal(pl_kv_cache_create_blocks(&cc, &w->contig), PL_OK);
    w->cons = pl_cons_registry_create(w->tok);
    assert_non_null(w->cons);
    w->a = (pl_admission){.tok = w->tok, .n_vocab = V, .max_model_len = 100, .max_num_seqs = 8,
                          .max_num_batched_tokens = 64, .k_spec = 0, .pooling = PL_POOL_NONE,
                          .embedding_model = 0, .arch_name = "llama", .kv = w->paged,
                          .cons = w->cons};
    *state = w;
    return 0;
}

static int teardown(void **state) {
    world *w = *state;
    pl_cons_registry_destroy(w->cons);
    pl_kv_cache_destroy(w->paged);
    pl_kv_cache_destroy(w->contig);
    pl_tokenizer_destroy(w->tok);
    pl_gguf_close(w->gg);
    free(w);
    return 0;
}

static pl_status admit_ids(const pl_admission *a, const int32_t *ids, size_t n,
                           const pl_request_params *p, pl_seq_group **g) {
    return pl_admit(a, NULL, ids, n, p, g);
}

static void test_text_prompt(void **state) {
    world *w = *state;
    pl_request_params p;
    pl_request_params_default(&p);
    pl_seq_group *g = NULL;
    assert_int_equal(pl_admit(&w->a, "Once upon a time", NULL, 0, &p, &g), PL_OK);
    assert_non_null(g);
    int32_t *want = NULL;
    size_t n = 0;
    assert_int_equal(pl_tokenize(w->tok, "Once upon a time", 16, 1, 0, &want, &n), PL_OK);
    assert_int_equal(g->n_prompt, (int32_t)n);
    assert_memory_equal(g->prompt, want, n * sizeof *want);
    assert_int_equal(g->n_seqs, 1);
    assert_int_equal(g->n_live, 1);
    assert_int_equal(g->seqs[0]->status, PL_SEQ_WAITING);
    assert_int_equal(g->seqs[0]->n_tokens, (int32_t)n);
    assert_int_equal(g->id, 0); /* the inbox gives it one */
    assert_true(g->arrival > 0);
    assert_int_equal(g->params.best_of, 1); /* defaulted to n */
    assert_int_equal(g->embed, 0);
    free(want);
    pl_group_destroy(g);
}

static void test_ids_and_params(void **state) {
    world *w = *state;
    pl_request_params p;
    pl_request_params_default(&p);
    pl_seq_group *g = NULL;
    int32_t ids[3] = {1, 400, 7};
    assert_int_equal(admit_ids(&w->a, ids, 3, &p, &g), PL_OK);
    assert_int_equal(g->n_prompt, 3);
    assert_memory_equal(g->prompt, ids, sizeof ids);
    pl_group_destroy(g);
    g = NULL;
    int32_t bad[2] = {1, V};
    assert_int_equal(admit_ids(&w->a, bad, 2, &p, &g), PL_ERR_INVALID_ARG);
    assert_null(g);
    assert_non_null(strstr(pl_last_error(), "token id 512 at position 1 is out of range"));
    assert_int_equal(admit_ids(&w->a, ids, 0, &p, &g), PL_ERR_INVALID_ARG);
    assert_non_null(strstr(pl_last_error(), "the prompt is empty"));
    p.n = 3;
    p.best_of = 2;
    assert_int_equal(admit_ids(&w->a, ids, 3, &p, &g), PL_ERR_INVALID_ARG);
    assert_non_null(strstr(pl_last_error(), "best_of must be in [n"));
    p.best_of = 9;
    assert_int_equal(admit_ids(&w->a, ids, 3, &p, &g), PL_ERR_INVALID_ARG);
    assert_non_null(strstr(pl_last_error(), "best_of 9 exceeds max-num-seqs 8"));
    pl_request_params_default(&p);
    p.max_tokens = 0;
    assert_int_equal(admit_ids(&w->a, ids, 3, &p, &g), PL_ERR_INVALID_ARG);
    assert_non_null(strstr(pl_last_error(), "max_tokens must be at least 1"));
    pl_request_params_default(&p);
    int32_t stop_id = V + 5;
    p.stop_token_ids = &stop_id;
    p.n_stop_token_ids = 1;
    assert_int_equal(admit_ids(&w->a, ids, 3, &p, &g), PL_ERR_INVALID_ARG);
    assert_non_null(strstr(pl_last_error(), "stop token id 517 is out of range"));
    /* beam search: the sampling parameters are reset and made greedy */
    pl_request_params_default(&p);
    p.use_beam_search = 1;
    p.n = 2;
    p.sampling.temperature = 0.7f;
    p.sampling.top_k = 5;
    assert_int_equal(admit_ids(&w->a, ids, 3, &p, &g), PL_OK);
    assert_true(g->params.sampling.temperature == 0.0f);
    pl_sampling_params def;
    pl_sampling_params_default(&def);
    assert_int_equal(g->params.sampling.top_k, def.top_k);
    pl_group_destroy(g);
}

static void test_fits(void **state) {
    world *w = *state;
    pl_request_params p;
    pl_request_params_default(&p);
    pl_seq_group *g = NULL;
    int32_t ids[40];
    for (int i = 0; i < 40; i++) ids[i] = 10 + i;
    /* the model's context: 40 + 61 > 100 */
    p.max_tokens = 61;
    assert_int_equal(admit_ids(&w->a, ids, 40, &p, &g), PL_ERR_INVALID_ARG);
    assert_non_null(strstr(pl_last_error(), "maximum context length is 100 tokens, but 101 were "
                                            "requested (40 in the prompt, 61 for the completion)"));
    /* the cache: 40 prompt tokens (10 blocks) + 2 x (15 output blocks + 1) = 42 > 32 */
    p.max_tokens = 60;
    p.n = 2;
    assert_int_equal(admit_ids(&w->a, ids, 40, &p, &g), PL_ERR_INVALID_ARG);
    assert_non_null(strstr(pl_last_error(), "may need 42 KV blocks (40 prompt tokens, 60 max "
                                            "tokens, 2 sequences) but the cache has 32"));
    /* one sequence: 10 + 16 = 26 fits */
    p.n = 1;
    assert_int_equal(admit_ids(&w->a, ids, 40, &p, &g), PL_OK);
    pl_group_destroy(g);
    g = NULL;
    /* a contiguous layout reserves max_seq_tokens (64 tokens = 16 blocks) and shares nothing */
    pl_admission c = w->a;
    c.kv = w->contig;
    p.max_tokens = 10;
    assert_int_equal(admit_ids(&c, ids, 40, &p, &g), PL_OK);
    pl_group_destroy(g);
    g = NULL;
    p.n = 2;
    assert_int_equal(admit_ids(&c, ids, 40, &p, &g), PL_ERR_INVALID_ARG);
    assert_non_null(strstr(pl_last_error(), "kv-layout contiguous holds one sequence per request"));
    assert_null(g);
}

static void test_embeddings(void **state) {
    world *w = *state;
    pl_request_params p;
    pl_request_params_default(&p);
    p.embedding = 1;
    pl_seq_group *g = NULL;
    int32_t ids[4] = {1, 2, 3, 4};
    assert_int_equal(admit_ids(&w->a, ids, 4, &p, &g), PL_ERR_INVALID_ARG);
    assert_non_null(strstr(pl_last_error(), "cannot compute embeddings: it has no pooling type"));
    pl_admission e = w->a;
    e.pooling = PL_POOL_MEAN;
    assert_int_equal(admit_ids(&e, ids, 4, &p, &g), PL_OK);
    assert_int_equal(g->embed, PL_EMBED_PAGED); /* a generation model's: blocks for its step */
    assert_int_equal(g->params.max_tokens, 1);
    pl_group_destroy(g);
    g = NULL;
    e.embedding_model = 1;
    assert_int_equal(admit_ids(&e, ids, 4, &p, &g), PL_OK);
    assert_int_equal(g->embed, PL_EMBED_LOCAL);
    pl_group_destroy(g);
    g = NULL;
    int32_t many[65];
    for (int i = 0; i < 65; i++) many[i] = 1;
    assert_int_equal(admit_ids(&e, many, 65, &p, &g), PL_ERR_INVALID_ARG);
    assert_non_null(strstr(pl_last_error(), "more than one step computes"));
    p.embedding = 0;
    assert_int_equal(admit_ids(&e, ids, 4, &p, &g), PL_ERR_INVALID_ARG);
    assert_non_null(strstr(pl_last_error(), "is an embedding model"));
}

static void test_constraint(void **state) {
    world *w = *state;
    pl_request_params p;
    pl_request_params_default(&p);
    p.constraint = PL_CONSTRAINT_REGEX;
    p.constraint_text = "(yes|no)";
    pl_seq_group *g = NULL;
    int32_t ids[2] = {1, 2};
    assert_int_equal(admit_ids(&w->a, ids, 2, &p, &g), PL_OK);
    assert_non_null(g->cons);
    assert_null(g->params.constraint_text); /* the caller's: not kept */
    assert_true(g->seqs[0]->detok.no_clean);
    pl_group_destroy(g);
    g = NULL;
    p.constraint_text = "(yes";
    assert_int_not_equal(admit_ids(&w->a, ids, 2, &p, &g), PL_OK);
    assert_null(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_text_prompt, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ids_and_params, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fits, setup, teardown),
        cmocka_unit_test_setup_teardown(test_embeddings, setup, teardown),
        cmocka_unit_test_setup_teardown(test_constraint, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
