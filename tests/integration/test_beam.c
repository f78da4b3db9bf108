/* Beam search in the engine (sequences forked and freed over shared blocks) against a brute-force
 * beam search written here: every beam is recomputed from scratch with a dense, unshared KV cache
 * each step and every (beam, token) pair of the whole vocabulary is a candidate. Both follow
 * vLLM v0's rules: the 2W best candidates by cumulative log-probability, finished ones kept as
 * hypotheses (the W best by score = cum / len^length_penalty, len counting the prompt and not a
 * final EOS), the W best running ones continue, stop when no running beam can beat the worst
 * kept hypothesis (early_stopping = 0) or when W hypotheses exist (early_stopping = 1). */
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
    pl_step_batch b = {n, tokens, pos, slots, 1, seq, &ctx, table, MAXLEN, 1, rows};
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

/* Returns the number of hypotheses written to out (sorted by score). */
static int brute_beam(const int32_t *prompt, int32_t np, int W, int max_tokens, float lpen,
                      int early, hyp *out) {
    const int32_t V = model->hp.n_vocab;
    hyp beams[MAXB], done[2 * MAXB + 1];
    int nb = 1, nd = 0;
    memcpy(beams[0].tok, prompt, (size_t)np * sizeof(int32_t));
    beams[0].n = np;
    beams[0].cum = 0;
    float *lp = malloc((size_t)V * sizeof(float));
    cand *c = malloc((size_t)(MAXB * V) * sizeof(cand));
    for (int step = 0; step < max_tokens && nb > 0; step++) {
        int nc = 0;
        for (int b = 0; b < nb; b++) {
            last_logprobs(beams[b].tok, beams[b].n, lp);
            for (int32_t t = 0; t < V; t++) {
                int n_out = beams[b].n + 1 - np;
                c[nc] = (cand){b, t, beams[b].cum + lp[t], t == 2 || n_out >= max_tokens, 0};
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

static void check_beam(pl_engine *e, const char *text, int W, int n, int max_tokens, float lpen,
                       int early) {
    pl_request_params p;
    pl_request_params_default(&p);
    p.use_beam_search = 1;
    p.best_of = W;
    p.n = n;
    p.max_tokens = max_tokens;
    p.length_penalty = lpen;
    p.early_stopping = early;
    p.logprobs = 0;
    uint64_t id;
    assert_int_equal(pl_engine_add_request(e, text, NULL, 0, &p, &id), PL_OK);
    static result r;
    memset(&r, 0, sizeof r);
    run_all(e, &id, &r, 1);
    int32_t *prompt = NULL;
    size_t np = 0;
    assert_int_equal(pl_tokenize(model->tok, text, strlen(text), 1, 0, &prompt, &np), PL_OK);
    hyp want[2 * MAXB];
    int nw = brute_beam(prompt, (int32_t)np, W, max_tokens, lpen, early, want);
    assert_true(nw >= n);
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
}

static void test_beam_matches_brute_force(void **state) {
    (void)state;
    pl_engine_config c;
    pl_engine_config_default(&c);
    c.model_path = MODEL;
    c.kv_cache_memory = 8 << 20;
    c.block_size = 4; /* small blocks: beams share and copy many of them */
    if (test_env("NOPC")) c.enable_prefix_caching = 0;
    pl_engine *e;
    assert_int_equal(pl_engine_create(&c, &e), PL_OK);
    assert_int_equal(pl_model_load(MODEL, &model), PL_OK);
    assert_int_equal(pl_forward_ctx_create(model, MAXLEN, 1, NULL, &fwd), PL_OK);
    pl_kv_layout l = {PL_DT_F16, 1, model->hp.n_kv_heads, model->hp.head_dim, MAXLEN};
    assert_int_equal(pl_kv_store_init(&kv, &l, model->hp.n_layers, NULL), PL_OK);
    logits = malloc((size_t)model->hp.n_vocab * sizeof(float));
    const char *prompts[] = {"Once upon a time", "The cat sat", "Tom had a red"};
    for (int W = test_env("WSTART") ? atoi(test_env("WSTART")) : 2; W <= 4; W++)
        for (int i = 0; i < 3; i++) check_beam(e, prompts[i], W, W == 4 ? 2 : W, 10, 1.0f, 0);
    check_beam(e, "Lily wanted to", 3, 3, 12, 0.5f, 1);
    free(logits);
    pl_kv_store_free(&kv);
    pl_forward_ctx_free(fwd);
    pl_model_free(model);
    pl_engine_destroy(e);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_beam_matches_brute_force)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
