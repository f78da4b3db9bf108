/* Fault injection against the engine (built only with -DPL_FAULT_INJECT=ON; base/fault.h).
 *
 * 1. Load sweep: creating an engine (GGUF, tokenizer, weights, KV pool, thread pool), running one
 *    request and destroying it, with exactly the k-th intercepted call failing, for every k up to
 *    the number of calls that path makes (strided past the first thousand). Each run either
 *    works or fails with an error message; a request that never ends is a failure; nothing
 *    crashes and nothing leaks (LeakSanitizer).
 * 2. Load (eight rounds): a pool small enough to preempt and swap, a mix of greedy, sampled,
 *    n > 1, best_of, beam, stop strings, structured output, log-probabilities and embeddings (the
 *    engine pools mean), with one call in N failing (N random per run, PL_FAULT_SEED to repeat
 *    one, in each of the three modes, refused under CI=true); rounds alternate no speculation,
 *    n-gram and draft-model speculative decoding. Every round fails at least one call; every
 *    request ends, with output or an error; afterwards the KV pool passes its full consistency
 *    check with every block free, and the engine still answers a greedy request exactly as
 *    before.
 * Prints the figures (calls failed, requests ended with an error) and "N passed, N failed". */
#include "base/fault.h"
#include "engine/engine_parts.h"
#include "pagellm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int passed, failed;
#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (cond) {                                                                                \
            passed++;                                                                              \
        } else {                                                                                   \
            failed++;                                                                              \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                                            \
            printf(__VA_ARGS__);                                                                   \
            printf("\n");                                                                          \
        }                                                                                          \
    } while (0)

static char model_path[1024];

static void config(pl_engine_config *c, int small) {
    pl_engine_config_default(c);
    c->model_path = model_path;
    c->threads = 2;
    c->kv_cache_memory = small ? 96u << 10 : 4u << 20;
    c->block_size = 4;
    c->pooling = 1; /* embedding requests too (mixed_params) */
    if (small) {
        c->preemption_mode = PL_PREEMPT_SWAP;
        c->swap_space = 1u << 20;
    }
}

/* Poll until finished; returns 1 with output, 0 with an error, -1 if it never ends. */
typedef struct {
    int finished, error, n_tokens;
    char text[512];
} outcome;

static void drain(pl_engine *e, uint64_t id, outcome *o) {
    pl_request_output *r;
    while (!o->finished) {
        pl_status st = pl_engine_poll(e, id, 0, &r);
        if (st != PL_OK) return; /* nothing new, or no memory for it now: later */
        for (int32_t i = 0; i < r->n_deltas; i++) {
            o->n_tokens += r->deltas[i].n_tokens;
            size_t n = strlen(o->text), k = r->deltas[i].text_len;
            if (r->deltas[i].index == 0 && k && n + k < sizeof o->text) {
                memcpy(o->text + n, r->deltas[i].text, k);
                o->text[n + k] = '\0';
            }
        }
        o->error = r->error != NULL;
        o->finished = r->finished;
        pl_request_output_destroy(r);
    }
}

/* Steps until every request finished; 0, or -1 if some did not within max_steps. */
static int run(pl_engine *e, const uint64_t *ids, outcome *out, int n, int max_steps) {
    for (int s = 0; s < max_steps; s++) {
        int all = 1;
        for (int i = 0; i < n; i++) {
            if (ids[i]) drain(e, ids[i], &out[i]);
            all &= !ids[i] || out[i].finished;
        }
        if (all && !pl_engine_has_work(e)) return 0;
        pl_engine_step(e); /* a failed step fails its requests; the engine goes on */
    }
    return -1;
}

static const char *PROMPTS[] = {"Once upon a time", "Lily and Tom went to the park. They",
                                "The cat sat on the mat and", "One day, a little bird"};

static void mixed_params(int i, pl_request_params *p, const char *const *stops) {
    pl_request_params_default(p);
    p->max_tokens = 8 + i % 24;
    p->has_seed = 1;
    p->seed = (uint64_t)i;
    switch (i % 6) {
    case 0: p->sampling.temperature = 0; break;
    case 1: p->n = 2, p->best_of = 2; p->logprobs = 3; break;
    case 2: p->best_of = 3; break;
    case 3: p->use_beam_search = 1, p->best_of = 2, p->n = 2, p->sampling.temperature = 0; break;
    case 4: p->stop = stops, p->n_stop = 2; p->prompt_logprobs = 2; break;
    default: p->sampling.top_k = 5, p->sampling.top_p = 0.9f; break;
    }
    if (i % 12 == 5) { /* structured output: compiled in add_request, masks while decoding */
        p->constraint = PL_CONSTRAINT_REGEX;
        p->constraint_text = "(yes|no), [a-z ]{1,12}\\.";
    } else if (i % 12 == 2) {
        p->constraint = PL_CONSTRAINT_JSON_OBJECT;
    }
    if (i % 7 == 6) { /* an embedding input: one whole step, blocks for that step only */
        pl_request_params_default(p);
        p->embedding = 1;
    }
}

/* Runs the greedy reference request: 0 when it ended (o says how), 1 when add_request refused
 * it, -1 when it never ended. */
static int greedy_reference(pl_engine *e, outcome *o) {
    pl_request_params p;
    pl_request_params_default(&p);
    p.sampling.temperature = 0;
    p.max_tokens = 12;
    uint64_t id = 0;
    memset(o, 0, sizeof *o);
    if (pl_engine_add_request(e, "Once upon a time", NULL, 0, &p, &id) != PL_OK) return 1;
    return run(e, &id, o, 1, 1000);
}

static void load_sweep(void) {
    pl_engine_config c;
    config(&c, 0);
    uint64_t before = pl_fault_calls();
    pl_engine *e;
    outcome o = {0};
    CHECK(pl_engine_create(&c, &e) == PL_OK, "engine create: %s", pl_last_error());
    CHECK(greedy_reference(e, &o) == 0 && o.finished && !o.error, "reference run");
    pl_engine_destroy(e);
    uint64_t calls = pl_fault_calls() - before;
    int runs = 0, ok = 0, create_failed = 0, req_failed = 0, silent = 0, hung = 0;
    for (uint64_t k = 1; k <= calls; k += k < 1000 ? 1 : (calls - 1000) / 300 + 1) {
        runs++;
        pl_clear_error();
        pl_fault_arm_with(0, k);
        pl_status st = pl_engine_create(&c, &e);
        if (st != PL_OK) {
            pl_fault_disarm();
            create_failed++;
            if (!pl_last_error()[0]) silent++;
            continue;
        }
        outcome r = {0};
        int rc = greedy_reference(e, &r);
        pl_engine_destroy(e);
        pl_fault_disarm();
        if (rc < 0) {
            hung++; /* neither output nor an error: a client would wait forever */
            printf("  run %d (call %llu failing): %s\n", runs, (unsigned long long)k,
                   r.finished ? "the request ended, the engine kept working" : "the request never ended");
        } else if (rc == 0 && !r.error) {
            ok += strcmp(r.text, o.text) == 0;
        } else {
            req_failed++;
        }
    }
    printf("load sweep: %llu intercepted calls on the path; %d runs (one failing call each): "
           "%d engine creates failed with an error, %d requests failed, %d identical answers, "
           "%d requests never ended\n",
           (unsigned long long)calls, runs, create_failed, req_failed, ok, hung);
    CHECK(silent == 0, "%d failed creates left no error message", silent);
    CHECK(hung == 0, "%d requests never ended", hung);
    CHECK(create_failed + req_failed + ok == runs, "some run ended with a wrong answer");
    CHECK(create_failed > 0, "no failure reached engine creation");
}

/* spec: 0 none, 1 n-gram proposals, 2 a draft model (the model itself) — speculative decoding
 * under the same failures. */
static void under_load(uint64_t seed, int spec) {
    uint64_t every = 20 + (seed * 0x9e3779b97f4a7c15ull >> 33) % 181;
    printf("load: one call in %llu fails (PL_FAULT_SEED=%llu repeats this run)%s\n",
           (unsigned long long)every, (unsigned long long)seed,
           spec == 1 ? ", n-gram speculation" : spec == 2 ? ", draft-model speculation" : "");
    pl_engine_config c;
    config(&c, 1);
    c.speculative_ngram = spec == 1;
    c.speculative_model = spec == 2 ? model_path : NULL;
    if (spec == 2) c.kv_cache_memory *= 2; /* the draft takes half */
    pl_engine *e;
    if (pl_engine_create(&c, &e) != PL_OK) {
        CHECK(0, "engine create: %s", pl_last_error());
        return;
    }
    outcome ref;
    CHECK(greedy_reference(e, &ref) == 0 && ref.finished && !ref.error && ref.n_tokens == 12,
          "reference run");

    enum { N = 48 };
    static const char *const stops[] = {".", " and"};
    uint64_t ids[N] = {0};
    outcome out[N];
    memset(out, 0, sizeof out);
    uint64_t failed0 = pl_fault_failed();
    pl_fault_arm_with(every, 0);
    int refused = 0;
    for (int i = 0; i < N; i++) {
        pl_request_params p;
        mixed_params(i, &p, stops);
        pl_status st = pl_engine_add_request(e, PROMPTS[i % 4], NULL, 0, &p, &ids[i]);
        if (st != PL_OK) {
            ids[i] = 0;
            refused++;
            CHECK(st == PL_ERR_NOMEM, "add_request %d: %s", i, pl_last_error());
        }
        if (i % 8 == 7) pl_engine_step(e); /* arrivals while others run */
        if (i % 11 == 5 && ids[i]) pl_engine_abort(e, ids[i]);
        if (i % 13 == 6 && ids[i]) {
            pl_engine_release(e, ids[i]); /* the client went away */
            ids[i] = 0;
        }
    }
    int stuck = run(e, ids, out, N, 20000);
    pl_fault_disarm();
    uint64_t n_failed = pl_fault_failed() - failed0;
    int with_error = 0, with_output = 0, unended = 0;
    for (int i = 0; i < N; i++) {
        if (!ids[i]) continue;
        unended += !out[i].finished;
        with_error += out[i].finished && out[i].error;
        with_output += out[i].finished && !out[i].error;
    }
    printf("load: %llu calls failed; %d requests: %d ended with output, %d with an error, %d "
           "refused at submission, %d released, %d never ended\n",
           (unsigned long long)n_failed, N, with_output, with_error, refused,
           N - with_output - with_error - refused - unended, unended);
    CHECK(n_failed > 0, "no call failed in this round: it tested nothing (one in %llu)",
          (unsigned long long)every);
    CHECK(stuck == 0 && unended == 0, "%d requests never ended", unended);
    for (int i = 0; stuck && i < N; i++)
        if (ids[i] && !out[i].finished) {
            pl_engine_stats st;
            pl_engine_get_stats(e, &st);
            printf("  request %d (kind %d) did not end: %d tokens so far; engine running %d waiting "
                   "%d swapped %d, %d blocks used\n", i, i % 6, out[i].n_tokens, st.running,
                   st.waiting, st.swapped, st.blocks_used);
        }
    /* Whatever was released or aborted is dropped at the next step. */
    for (int s = 0; s < 10 && pl_engine_has_work(e); s++) pl_engine_step(e);
    pl_engine_step(e);
    CHECK(pl_kv_cache_check(pl_engine_kv_cache(e)) == PL_OK, "KV pool check: %s",
          pl_last_error());
    pl_engine_stats st;
    pl_engine_get_stats(e, &st);
    CHECK(st.blocks_used == 0 && st.swap_used == 0, "blocks still used: %d, swap %d",
          st.blocks_used, st.swap_used);
    CHECK(st.running == 0 && st.waiting == 0 && st.swapped == 0, "groups left: %d %d %d",
          st.running, st.waiting, st.swapped);
    outcome again;
    CHECK(greedy_reference(e, &again) == 0 && again.finished && !again.error &&
              !strcmp(again.text, ref.text),
          "after the faults the engine answers as before: '%s' vs '%s'", again.text, ref.text);
    pl_engine_destroy(e);
}

int main(void) {
    if (!pl_fault_enabled()) {
        printf("this test needs the -DPL_FAULT_INJECT=ON build\n0 passed, 1 failed\n");
        return 1;
    }
    /* Eight rounds, each with its own N. PL_FAULT_SEED runs one N in the three modes: fewer
     * rounds, for repeating a failure locally; refused under CI (as tests/ci_env.h). */
    const char *sd = getenv("PL_FAULT_SEED"), *ci = getenv("CI");
    if (sd && ci && *ci && strcmp(ci, "false") && strcmp(ci, "0")) {
        printf("PL_FAULT_SEED=%s is set under CI=%s: it weakens this test and is for local "
               "debugging only; unset it\n0 passed, 1 failed\n", sd, ci);
        return 1;
    }
    const char *dir = getenv("PL_SHARED_DIR") ? getenv("PL_SHARED_DIR") : PL_SHARED_DIR;
    snprintf(model_path, sizeof model_path, "%s/models/stories260K.gguf", dir);
    load_sweep();
    uint64_t seed = sd ? strtoull(sd, NULL, 10) : (uint64_t)time(NULL);
    for (int r = 0; r < (sd ? 3 : 8); r++) under_load(seed + (uint64_t)(sd ? 0 : r), r % 3);
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
