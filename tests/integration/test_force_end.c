/* force_end (issue 33, the engine half of a thinking budget) through the public API with
 * stories260K. Greedy "Once upon a time" continues ',' ' there' ' was' ' a' ' little' ' g' 'ir'
 * 'l' ... (REF_IDS). The "tags" are token ids: open = ' was' ' a' (output positions 2-3, so the
 * region opens at output position 4), close = ' She' ' lo', which greedy would not write there.
 * With after = N the output is REF_IDS[0 .. 4 + N) ++ close ++ a continuation, the two close
 * tokens flagged as forced; the continuation is what the model writes when the same ids are
 * given as part of the prompt (teacher forcing: the forced tokens' K/V were computed like
 * sampled ones). A pool too small for the requests at once (recompute preemption) and n-gram
 * speculation give the same tokens; bad options are refused naming the field. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "engine_util.h"

static const char *MODEL = PL_SHARED_DIR "/models/stories260K.gguf";
static const int32_t REF_IDS[12] = {432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338};
static const int32_t OPEN[2] = {286, 261};
static const int32_t CLOSE[2] = {401, 396};
enum { MAXTOK = 40 };

typedef struct {
    int32_t prompt[64], n_prompt;
    int32_t ids[RES_MAX_TOK], n_ids;
    uint8_t forced[RES_MAX_TOK];
    int finished;
    pl_finish_reason finish;
} run_out;

static pl_engine *make(uint64_t kv_bytes, int ngram) {
    pl_engine_config c;
    pl_engine_config_default(&c);
    c.model_path = MODEL;
    c.kv_cache_memory = kv_bytes;
    c.block_size = 16;
    c.threads = 2;
    c.speculative_ngram = ngram;
    c.speculative_max_batch = ngram ? -1 : 0;
    c.preemption_mode = PL_PREEMPT_RECOMPUTE;
    pl_engine *e;
    if (pl_engine_create(&c, &e) != PL_OK) fail_msg("engine: %s", pl_last_error());
    return e;
}

static void params(pl_request_params *p, int32_t after, int open_in_prompt) {
    pl_request_params_default(p);
    p->max_tokens = MAXTOK;
    p->sampling.temperature = 0;
    p->force_end.open = OPEN;
    p->force_end.n_open = 2;
    p->force_end.close = CLOSE;
    p->force_end.n_close = 2;
    p->force_end.after = after;
    p->force_end.open_in_prompt = open_in_prompt;
}

static void drain(pl_engine *e, uint64_t id, run_out *r) {
    pl_request_output *o;
    while (!r->finished && pl_engine_poll(e, id, 0, &o) == PL_OK) {
        if (o->prompt_ids) {
            assert_true(o->n_prompt_tokens <= 64);
            memcpy(r->prompt, o->prompt_ids, (size_t)o->n_prompt_tokens * sizeof(int32_t));
            r->n_prompt = o->n_prompt_tokens;
        }
        for (int32_t i = 0; i < o->n_deltas; i++) {
            const pl_completion_delta *d = &o->deltas[i];
            for (int32_t t = 0; t < d->n_tokens; t++) {
                r->forced[r->n_ids] = d->forced ? d->forced[t] : 0;
                r->ids[r->n_ids++] = d->token_ids[t];
            }
            if (d->finish) r->finish = d->finish;
        }
        r->finished = o->finished;
        pl_request_output_destroy(o);
    }
}

static void run(pl_engine *e, const uint64_t *ids, run_out *r, int n) {
    for (;;) {
        int all = 1;
        for (int i = 0; i < n; i++) {
            drain(e, ids[i], &r[i]);
            all &= r[i].finished;
        }
        if (all) break;
        if (pl_engine_step(e) != PL_OK) fail_msg("step: %s", pl_last_error());
    }
}

static void one(pl_engine *e, const pl_request_params *p, const char *text, const int32_t *ids,
                size_t n_ids, run_out *r) {
    memset(r, 0, sizeof *r);
    uint64_t id;
    if (pl_engine_add_request(e, text, ids, n_ids, p, &id) != PL_OK)
        fail_msg("add: %s", pl_last_error());
    run(e, &id, r, 1);
}

/* The forced run's layout and its continuation against teacher forcing. */
static void check_forced(pl_engine *e, const run_out *r, int32_t start, int32_t after) {
    int32_t at = start + after;
    assert_int_equal(r->n_ids, MAXTOK);
    for (int32_t t = 0; t < at; t++) {
        assert_int_equal(r->ids[t], REF_IDS[t]);
        assert_int_equal(r->forced[t], 0);
    }
    assert_int_equal(r->ids[at], CLOSE[0]);
    assert_int_equal(r->ids[at + 1], CLOSE[1]);
    assert_int_equal(r->forced[at], 1);
    assert_int_equal(r->forced[at + 1], 1);
    for (int32_t t = at + 2; t < r->n_ids; t++) assert_int_equal(r->forced[t], 0);
    /* teacher forcing: prompt ++ everything up to the close tag, no force_end */
    int32_t tf[128], n = 0;
    for (int32_t i = 0; i < r->n_prompt; i++) tf[n++] = r->prompt[i];
    for (int32_t i = 0; i < at + 2; i++) tf[n++] = r->ids[i];
    pl_request_params p;
    pl_request_params_default(&p);
    p.sampling.temperature = 0;
    p.max_tokens = MAXTOK - (at + 2);
    run_out t;
    one(e, &p, NULL, tf, (size_t)n, &t);
    assert_int_equal(t.n_ids, p.max_tokens);
    for (int32_t i = 0; i < t.n_ids; i++)
        if (t.ids[i] != r->ids[at + 2 + i])
            fail_msg("after the forced end, token %d: %d, teacher-forced %d", (int)i,
                     (int)r->ids[at + 2 + i], (int)t.ids[i]);
}

static void test_forced_end(void **state) {
    (void)state;
    pl_engine *e = make(16 << 20, 0);
    pl_request_params p;
    run_out r;
    for (int32_t after = 0; after <= 4; after += 2) {
        params(&p, after, 0);
        one(e, &p, "Once upon a time", NULL, 0, &r);
        check_forced(e, &r, 4, after);
    }
    /* open in the prompt: the region is open from the first output token (its own open tag
     * then reopens it at position 4 unless the forced end came first) */
    params(&p, 1, 1);
    one(e, &p, "Once upon a time", NULL, 0, &r);
    check_forced(e, &r, 0, 1);
    pl_engine_destroy(e);
}

/* Recompute preemption (pools too small for 6 requests of 3 blocks each) and n-gram speculation
 * give the tokens of the roomy run. */
static void test_preempt_and_spec(void **state) {
    (void)state;
    pl_request_params p;
    params(&p, 3, 0);
    pl_engine *e = make(16 << 20, 0);
    run_out want;
    one(e, &p, "Once upon a time", NULL, 0, &want);
    check_forced(e, &want, 4, 3);
    pl_engine_destroy(e);
    /* mode 0..9: pools of 5..14 blocks (some runs preempt by recompute); 10: n-gram speculation */
    uint64_t preemptions = 0;
    for (int mode = 0; mode <= 10; mode++) {
        e = mode < 10 ? make((uint64_t)(5 + mode) * 16 * 640, 0) : make(16 << 20, 1);
        uint64_t ids[6];
        run_out got[6];
        memset(got, 0, sizeof got);
        for (int i = 0; i < 6; i++)
            if (pl_engine_add_request(e, "Once upon a time", NULL, 0, &p, &ids[i]) != PL_OK)
                fail_msg("add: %s", pl_last_error());
        run(e, ids, got, 6);
        pl_engine_stats s;
        pl_engine_get_stats(e, &s);
        preemptions += s.preemptions;
        if (mode == 10) assert_true(s.spec_draft_tokens > 0);
        for (int i = 0; i < 6; i++) {
            assert_int_equal(got[i].n_ids, want.n_ids);
            assert_memory_equal(got[i].ids, want.ids, (size_t)want.n_ids * sizeof(int32_t));
            assert_memory_equal(got[i].forced, want.forced, (size_t)want.n_ids);
        }
        pl_engine_destroy(e);
    }
    print_message("%llu preemptions\n", (unsigned long long)preemptions);
    assert_true(preemptions > 0);
}

static void refused(pl_engine *e, const pl_request_params *p, const char *what) {
    uint64_t id;
    pl_status st = pl_engine_add_request(e, "Once upon a time", NULL, 0, p, &id);
    assert_int_equal(st, PL_ERR_INVALID_ARG);
    if (!strstr(pl_last_error(), what)) fail_msg("'%s' does not name %s", pl_last_error(), what);
}

static void test_invalid(void **state) {
    (void)state;
    pl_engine *e = make(16 << 20, 0);
    pl_request_params p;
    params(&p, 3, 0);
    p.force_end.n_close = 0;
    refused(e, &p, "force_end.close");
    params(&p, 3, 0);
    p.force_end.n_open = 0;
    refused(e, &p, "force_end.open");
    static const int32_t bad[2] = {401, 1 << 20};
    params(&p, 3, 0);
    p.force_end.close = bad;
    refused(e, &p, "force_end.close[1]");
    params(&p, 3, 0);
    p.force_end.open = bad;
    refused(e, &p, "force_end.open[1]");
    params(&p, -1, 0);
    refused(e, &p, "force_end.after");
    params(&p, 3, 0);
    p.use_beam_search = 1;
    p.best_of = 2;
    refused(e, &p, "beam search");
    pl_engine_destroy(e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forced_end),
        cmocka_unit_test(test_preempt_and_spec),
        cmocka_unit_test(test_invalid),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
