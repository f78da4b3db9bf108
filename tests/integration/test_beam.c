/* Beam search in the engine (sequences forked and freed over shared blocks) against a brute-force
 * beam search written here: every beam is recomputed from scratch with a dense, unshared KV cache
 * each step and every (beam, token) pair of the whole vocabulary is a candidate. Both follow
 * vLLM v0's rules: the 2W best candidates by cumulative log-probability, finished ones kept as
 * hypotheses (the W best by score = cum / len^length_penalty, len counting the prompt and not a
 * final EOS), the W best running ones continue, stop when no running beam can beat the worst
 * kept hypothesis (early_stopping = 0) or when W hypotheses exist (early_stopping = 1).
 * A stop token id finishes a hypothesis like EOS (but counts in its length); before min_tokens
 * neither EOS nor a stop id can be chosen. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "../ci_env.h"
#include "engine_util.h"

#include "kernels/ops.h"
#include "model/model.h"

#include <math.h>

static const char *MODEL = PL_SHARED_DIR "/models/stories260K.gguf";

enum { MAXB = 8, MAXLEN = 96 };

typedef struct {
    int32_t tok[MAXLEN];
    int32_t n;
    double cum;
    int rank;
} hyp;

typedef struct {
    int parent;
    int32_t token;
    double cum;
    int finished;
    double score;
} cand;

static pl_model *model;
static pl_forward_ctx *fwd;
static pl_kv_store kv;
static float *logits;

/* Log-softmax of the last position of tokens[0..n), recomputed from scratch. */
static void last_logprobs(const int32_t *tokens, int32_t n, float *lp) {
    int32_t pos[MAXLEN], table[MAXLEN], rows[1] = {n - 1}, seq[2] = {0, n}, ctx = n;
    int64_t slots[MAXLEN];
    for (int32_t i = 0; i < n; i++) {
        pos[i] = i;
        slots[i] = i;
        table[i] = i;
    }
    pl_step_batch b = {n, tokens, pos, slots, 1, seq, &ctx, table, MAXLEN, 1, rows, NULL, NULL, NULL};
    assert_int_equal(pl_model_forward(fwd, &kv, &b, logits), PL_OK);
    pl_log_softmax(logits, lp, model->hp.n_vocab);
}

static double score(double cum, int32_t len, int eos, float lpen) {
    if (eos) len--;
    return cum / pow((double)len, (double)lpen);
}

static int by_cum(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->cum != y->cum) return x->cum > y->cum ? -1 : 1;
    if (x->parent != y->parent) return x->parent - y->parent;
    return x->token - y->token;
}

static int by_score(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->score != y->score) return x->score > y->score ? -1 : 1;
    return by_cum(a, b);
}

static int hyp_by_score(const void *a, const void *b, void *lp) {
    const hyp *x = a, *y = b;
    float lpen = *(float *)lp;
    double sx = score(x->cum, x->n, x->tok[x->n - 1] == 2, lpen);
    double sy = score(y->cum, y->n, y->tok[y->n - 1] == 2, lpen);
    return sx > sy ? -1 : sx < sy ? 1 : 0;
}

typedef struct {
    int W, n, max_tokens;
    float lpen;
    int early;
    int32_t stop_id;    /* one stop token id, or -1 */
    int32_t min_tokens;
} beam_req;

/* Returns the number of hypotheses written to out (sorted by score); *steps = beam steps run. */
static int brute_beam(const int32_t *prompt, int32_t np, const beam_req *q, hyp *out,
                      int *steps) {
    const int W = q->W, max_tokens = q->max_tokens, early = q->early;
    float lpen = q->lpen;
    const int32_t V = model->hp.n_vocab;
    hyp beams[MAXB], done[2 * MAXB + 1];
    int nb = 1, nd = 0;
    memcpy(beams[0].tok, prompt, (size_t)np * sizeof(int32_t));
    beams[0].n = np;
    beams[0].cum = 0;
    float *lp = malloc((size_t)V * sizeof(float));
    cand *c = malloc((size_t)(MAXB * V) * sizeof(cand));
    *steps = 0;
    for (int step = 0; step < max_tokens && nb > 0; step++) {
        int nc = 0;
        ++*steps;
        for (int b = 0; b < nb; b++) {
            last_logprobs(beams[b].tok, beams[b].n, lp);
            for (int32_t t = 0; t < V; t++) {
                int n_out = beams[b].n + 1 - np, ends = t == 2 || t == q->stop_id;
                if (ends && n_out <= q->min_tokens) continue; /* masked before min_tokens */
                c[nc] = (cand){b, t, beams[b].cum + lp[t], ends || n_out >= max_tokens, 0};
                c[nc].score = score(c[nc].cum, beams[b].n + 1, t == 2, lpen);
                nc++;
            }
        }
        qsort(c, (size_t)nc, sizeof *c, by_cum);
        nc = 2 * W;
        cand run[2 * MAXB];
        int nr = 0;
        for (int i = 0; i < nc; i++) {
            if (!c[i].finished) {
                run[nr++] = c[i];
                continue;
            }
            hyp *h = &done[nd++];
            *h = beams[c[i].parent];
            h->tok[h->n++] = c[i].token;
            h->cum = c[i].cum;
            qsort_r(done, (size_t)nd, sizeof *done, hyp_by_score, &lpen);
            if (nd > W) nd = W;
        }
        qsort(run, (size_t)nr, sizeof *run, by_score);
        int stop;
        if (nr == 0) stop = 1;
        else if (nd < W) stop = 0;
        else if (early) stop = 1;
        else {
            const hyp *w = &done[W - 1];
            stop = score(w->cum, w->n, w->tok[w->n - 1] == 2, lpen) >= run[0].score;
        }
        hyp next[MAXB];
        int keep = stop ? 0 : (nr < W ? nr : W);
        for (int i = 0; i < keep; i++) {
            next[i] = beams[run[i].parent];
            next[i].tok[next[i].n++] = run[i].token;
            next[i].cum = run[i].cum;
        }
        memcpy(beams, next, (size_t)keep * sizeof *next);
        nb = keep;
    }
    free(lp);
    free(c);
    memcpy(out, done, (size_t)nd * sizeof *done);
    return nd;
}

/* Run the request in the engine and by brute force; they must agree on every returned beam and
 * on the number of beam steps (engine steps: the prompt fits one step, which takes the first
 * beam step). Returns the engine's steps; r receives its result. */
static int check_beam_req(pl_engine *e, const char *text, const beam_req *q, result *out) {
    const int W = q->W, n = q->n;
    pl_request_params p;
    pl_request_params_default(&p);
    p.use_beam_search = 1;
    p.best_of = W;
    p.n = n;
    p.max_tokens = q->max_tokens;
    p.length_penalty = q->lpen;
    p.early_stopping = q->early;
    p.min_tokens = q->min_tokens;
    p.logprobs = 0;
    if (q->stop_id >= 0) {
        p.stop_token_ids = &q->stop_id;
        p.n_stop_token_ids = 1;
    }
    uint64_t id;
    pl_engine_stats s0, s1;
    pl_engine_get_stats(e, &s0);
    assert_int_equal(pl_engine_add_request(e, text, NULL, 0, &p, &id), PL_OK);
    static result r;
    memset(&r, 0, sizeof r);
    run_all(e, &id, &r, 1);
    pl_engine_get_stats(e, &s1);
    int steps = (int)(s1.steps - s0.steps), want_steps = 0;
    int32_t *prompt = NULL;
    size_t np = 0;
    assert_int_equal(pl_tokenize(model->tok, text, strlen(text), 1, 0, &prompt, &np), PL_OK);
    hyp want[2 * MAXB];
    int nw = brute_beam(prompt, (int32_t)np, q, want, &want_steps);
    assert_true(nw >= n);
    if (steps != want_steps)
        fail_msg("'%s' W=%d lp=%g early=%d: the engine ran %d beam steps, brute force %d", text,
                 W, q->lpen, q->early, steps, want_steps);
    for (int k = 0; k < n; k++) {
        int32_t n_out = want[k].n - (int32_t)np;
        if (r.n_ids[k] != n_out || memcmp(r.ids[k], want[k].tok + np, (size_t)n_out * 4))
            fail_msg("'%s' W=%d beam %d: engine and brute force differ (%d vs %d tokens)", text, W,
                     k, r.n_ids[k], n_out);
        if (fabs(r.cum[k] - want[k].cum) > 1e-4 && getenv("BEAM_DEBUG")) {
            float *lp = malloc((size_t)model->hp.n_vocab * sizeof(float));
            for (int32_t t = 0; t < n_out; t++) {
                last_logprobs(want[k].tok, (int32_t)np + t, lp);
                print_message("t%d tok %d engine %.6f brute %.6f\n", t, want[k].tok[np + t],
                              r.logprobs[k][t], lp[want[k].tok[np + t]]);
            }
            free(lp);
        }
        if (fabs(r.cum[k] - want[k].cum) > 1e-4)
            fail_msg("%s W=%d beam %d: cum %.6f vs %.6f", text, W, k, r.cum[k], want[k].cum);
    }
    free(prompt);
    pl_engine_stats s;
    pl_engine_get_stats(e, &s);
    assert_int_equal(s.blocks_used, 0);
    if (out) *out = r;
    return steps;
}

static void check_beam(pl_engine *e, const char *text, int W, int n, int max_tokens, float lpen,
                       int early) {
    beam_req q = {W, n, max_tokens, lpen, early, -1, 0};
    check_beam_req(e, text, &q, NULL);
}

static pl_engine *make_engine(void) {
    pl_engine_config c;
    pl_engine_config_default(&c);
    c.model_path = MODEL;
    c.kv_cache_memory = 8 << 20;
    c.block_size = 4; /* small blocks: beams share and copy many of them */
    if (test_env("NOPC")) c.enable_prefix_caching = 0;
    pl_engine *e;
    assert_int_equal(pl_engine_create(&c, &e), PL_OK);
    return e;
}

static int setup_brute(void **state) {
    (void)state;
    if (pl_model_load(MODEL, &model) != PL_OK) return -1;
    if (pl_forward_ctx_create(model, MAXLEN, 1, NULL, &fwd) != PL_OK) return -1;
    pl_kv_layout l = {PL_DT_F16, 1, model->hp.n_kv_heads, model->hp.head_dim, MAXLEN};
    if (pl_kv_store_init(&kv, &l, model->hp.n_layers, NULL) != PL_OK) return -1;
    logits = malloc((size_t)model->hp.n_vocab * sizeof(float));
    return logits ? 0 : -1;
}

static int teardown_brute(void **state) {
    (void)state;
    free(logits);
    pl_kv_store_destroy(&kv);
    pl_forward_ctx_destroy(fwd);
    pl_model_destroy(model);
    return 0;
}

static void test_beam_matches_brute_force(void **state) {
    (void)state;
    pl_engine *e = make_engine();
    const char *prompts[] = {"Once upon a time", "The cat sat", "Tom had a red"};
    for (int W = test_env("WSTART") ? atoi(test_env("WSTART")) : 2; W <= 4; W++)
        for (int i = 0; i < 3; i++) check_beam(e, prompts[i], W, W == 4 ? 2 : W, 10, 1.0f, 0);
    check_beam(e, "Lily wanted to", 3, 3, 12, 0.5f, 1);
    pl_engine_destroy(e);
}

/* The beam score of completion k of r under length penalty lp (a stop id counts in the length). */
static double result_score(const result *r, int k, float lp) {
    return r->cum[k] / pow((double)(r->n_prompt + r->n_ids[k]), (double)lp);
}

static int same_completion(const result *a, int ka, const result *b, int kb) {
    return a->n_ids[ka] == b->n_ids[kb] &&
           !memcmp(a->ids[ka], b->ids[kb], (size_t)a->n_ids[ka] * sizeof(int32_t));
}

/* Hypotheses that finish at different lengths compete: "." (426) is a stop id, so beams end at
 * sentence ends (10-11 tokens) or by length (20). With every beam ending at the same length, as
 * above, neither length_penalty nor early_stopping could change a result. */
static void test_length_penalty_and_early_stopping(void **state) {
    (void)state;
    pl_engine *e = make_engine();
    const char *text = "Once upon a time";
    enum { W = 4, STOP = 426 };
    static result r0, r2, h1, e1;

    /* length_penalty 0 ranks by cumulative logprob: the short sentences win. 2 favours length:
     * beams that ran to max_tokens overtake short finished ones, the ranking changes and the
     * heuristic keeps searching (a running beam can still beat the worst kept hypothesis). */
    beam_req q0 = {W, W, 20, 0.0f, 0, STOP, 0}, q2 = {W, W, 20, 2.0f, 0, STOP, 0};
    int steps0 = check_beam_req(e, text, &q0, &r0);
    int steps2 = check_beam_req(e, text, &q2, &r2);
    for (int k = 0; k + 1 < W; k++) {
        assert_true(result_score(&r0, k, 0.0f) >= result_score(&r0, k + 1, 0.0f));
        assert_true(result_score(&r2, k, 2.0f) >= result_score(&r2, k + 1, 2.0f));
    }
    int differ = 0, lengths0 = 0, lengths2 = 0;
    for (int k = 0; k < W; k++) {
        differ |= !same_completion(&r0, k, &r2, k);
        lengths0 |= r0.n_ids[k] != r0.n_ids[0];
        lengths2 |= r2.n_ids[k] != r2.n_ids[0];
    }
    assert_true(lengths0 && lengths2); /* hypotheses of different lengths in both rankings */
    if (!differ) fail_msg("length_penalty 0 and 2 ranked the hypotheses identically");
    /* lp 2 returns a completion that ran to max_tokens; lp 0 prefers only sentence ends. */
    int longest2 = 0;
    for (int k = 0; k < W; k++) {
        assert_int_equal(r0.finish[k], PL_FINISH_STOP);
        if (r2.n_ids[k] > longest2) longest2 = r2.n_ids[k];
    }
    assert_int_equal(longest2, 20);
    assert_true(steps2 > steps0);

    /* early_stopping 1 (vLLM's True, Hugging Face's True): stop at the step where W hypotheses
     * exist, so the search ends at the W-th hypothesis' length, all W finished by the stop id.
     * 0 (the heuristic) searches on for a better one. */
    beam_req qh = {W, W, 20, 1.0f, 0, STOP, 0}, qe = {W, W, 20, 1.0f, 1, STOP, 0};
    int steps_h = check_beam_req(e, text, &qh, &h1);
    int steps_e = check_beam_req(e, text, &qe, &e1);
    int longest_e = 0;
    for (int k = 0; k < W; k++) {
        assert_int_equal(e1.finish[k], PL_FINISH_STOP);
        assert_int_equal(e1.ids[k][e1.n_ids[k] - 1], STOP);
        if (e1.n_ids[k] > longest_e) longest_e = e1.n_ids[k];
    }
    assert_int_equal(steps_e, longest_e);
    if (steps_e >= steps_h)
        fail_msg("early stopping ran %d steps, the heuristic %d", steps_e, steps_h);
    differ = 0;
    for (int k = 0; k < W; k++) differ |= !same_completion(&h1, k, &e1, k);
    assert_true(differ);
    pl_engine_destroy(e);
}

/* min_tokens: before it, EOS and the stop ids cannot be chosen (vLLM masks their logits for
 * every sampling type, and pagellm's sampler does); a beam must not carry a stop id it ignored. */
static void test_beam_min_tokens(void **state) {
    (void)state;
    pl_engine *e = make_engine();
    enum { W = 4, STOP = 426, MIN = 12 };
    static result r;
    beam_req q = {W, W, 16, 1.0f, 0, STOP, MIN};
    check_beam_req(e, "Once upon a time", &q, &r);
    for (int k = 0; k < W; k++) {
        assert_true(r.n_ids[k] > MIN);
        for (int t = 0; t < MIN; t++)
            if (r.ids[k][t] == STOP) fail_msg("beam %d: stop id %d at output %d < min_tokens", k,
                                              STOP, t);
    }
    pl_engine_destroy(e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_beam_matches_brute_force),
        cmocka_unit_test(test_length_penalty_and_early_stopping),
        cmocka_unit_test(test_beam_min_tokens),
    };
    return cmocka_run_group_tests(tests, setup_brute, teardown_brute);
}
