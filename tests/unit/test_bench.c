/* Unit tests for the benchmark tools (src/bench): dataset parsing, seeded sampling with the
 * paper's means within 5 %, limits, shared prefixes, ShareGPT files; the Poisson arrival
 * process; percentiles; the serving report's fields. Speed is never tested here. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "bench/bench.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static pl_dataset_opts opts(void) {
    pl_dataset_opts o = {.n_vocab = 32000, .first_id = 3};
    return o;
}

static void means(const pl_dataset *d, double *in, double *out) {
    double a = 0, b = 0;
    for (int32_t i = 0; i < d->n; i++) {
        a += d->req[i].in_len;
        b += d->req[i].out_len;
    }
    *in = a / d->n;
    *out = b / d->n;
}

static void test_parse(void **state) {
    (void)state;
    pl_dataset_spec s;
    assert_int_equal(pl_dataset_parse("sharegpt", &s), PL_OK);
    assert_int_equal(s.kind, PL_DS_SHAREGPT);
    assert_int_equal(pl_dataset_parse("alpaca", &s), PL_OK);
    assert_int_equal(s.kind, PL_DS_ALPACA);
    assert_int_equal(pl_dataset_parse("fixed:12:34", &s), PL_OK);
    assert_int_equal(s.kind, PL_DS_FIXED);
    assert_int_equal(s.fixed_in, 12);
    assert_int_equal(s.fixed_out, 34);
    assert_int_equal(pl_dataset_parse("/x/ShareGPT_V3.json", &s), PL_OK);
    assert_int_equal(s.kind, PL_DS_FILE);
    assert_string_equal(s.path, "/x/ShareGPT_V3.json");
    assert_int_equal(pl_dataset_parse("chat", &s), PL_OK);
    assert_int_equal(s.kind, PL_DS_CHAT);
    const char *bad[] = {"", "fixed:", "fixed:1", "fixed:1:", "fixed:0:5", "fixed:5:-1",
                         "fixed:a:b", "fixed:1:2:3", "sharegptx", "data.txt", "chat:3"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        assert_int_equal(pl_dataset_parse(bad[i], &s), PL_ERR_INVALID_ARG);
        assert_non_null(strstr(pl_last_error(), "--dataset"));
    }
}

/* The clamped log-normal's mu gives the target mean (quadrature, no sampling). */
static void test_fitted_mu(void **state) {
    (void)state;
    pl_dataset_opts o = opts();
    pl_length_dist in, out;
    pl_dataset_dists(PL_DS_SHAREGPT, &o, &in, &out);
    assert_true(in.mean > 161 && in.mean < 162);
    assert_true(out.mean > 337 && out.mean < 339);
    double mu = pl_length_dist_mu(&in);
    /* clamping the tail away pushes mu above the unclamped log-normal's */
    assert_true(mu > log(in.mean) - in.sigma * in.sigma / 2);
}

static void check_means(pl_dataset_kind kind, double want_in, double want_out, int32_t max_total) {
    pl_dataset_spec spec = {.kind = kind};
    pl_dataset_opts o = opts();
    o.max_total = max_total;
    for (uint64_t seed = 1; seed <= 3; seed++) {
        pl_dataset d;
        assert_int_equal(pl_dataset_make(&spec, 20000, seed, &o, &d), PL_OK);
        double in, out;
        means(&d, &in, &out);
        if (fabs(in / want_in - 1) > 0.05 || fabs(out / want_out - 1) > 0.05)
            fail_msg("kind %d seed %d: means %.2f / %.2f, want %.2f / %.2f within 5%%", kind,
                     (int)seed, in, out, want_in, want_out);
        int32_t longest_in = 0;
        for (int32_t i = 0; i < d.n; i++) {
            assert_true(d.req[i].in_len >= 4 && d.req[i].in_len <= 1024);
            assert_true(d.req[i].out_len >= 1 && d.req[i].out_len <= 1024);
            if (max_total) assert_true(d.req[i].in_len + d.req[i].out_len <= max_total);
            if (d.req[i].in_len > longest_in) longest_in = d.req[i].in_len;
        }
        /* long tails: ShareGPT prompts reach several times the mean */
        if (kind == PL_DS_SHAREGPT) assert_true(longest_in > 5 * want_in);
        pl_dataset_destroy(&d);
    }
}

static void test_sharegpt_means(void **state) {
    (void)state;
    check_means(PL_DS_SHAREGPT, 161.31, 337.99, 0);
    check_means(PL_DS_SHAREGPT, 161.31, 337.99, 2048);
}

static void test_alpaca_means(void **state) {
    (void)state;
    check_means(PL_DS_ALPACA, 19.31, 58.45, 0);
}

static void test_seeded(void **state) {
    (void)state;
    pl_dataset_spec spec = {.kind = PL_DS_SHAREGPT};
    pl_dataset_opts o = opts();
    pl_dataset a, b, c;
    assert_int_equal(pl_dataset_make(&spec, 200, 7, &o, &a), PL_OK);
    assert_int_equal(pl_dataset_make(&spec, 200, 7, &o, &b), PL_OK);
    assert_int_equal(pl_dataset_make(&spec, 200, 8, &o, &c), PL_OK);
    int differ = 0;
    for (int32_t i = 0; i < 200; i++) {
        assert_int_equal(a.req[i].in_len, b.req[i].in_len);
        assert_int_equal(a.req[i].out_len, b.req[i].out_len);
        assert_memory_equal(a.req[i].prompt, b.req[i].prompt, (size_t)a.req[i].in_len * 4);
        differ += a.req[i].in_len != c.req[i].in_len || a.req[i].out_len != c.req[i].out_len;
        for (int32_t k = 0; k < a.req[i].in_len; k++)
            assert_true(a.req[i].prompt[k] >= 3 && a.req[i].prompt[k] < 32000);
    }
    assert_true(differ > 150);
    pl_dataset_destroy(&a);
    pl_dataset_destroy(&b);
    pl_dataset_destroy(&c);
}

static void test_fixed_and_prefix(void **state) {
    (void)state;
    pl_dataset_spec spec;
    assert_int_equal(pl_dataset_parse("fixed:50:20", &spec), PL_OK);
    pl_dataset_opts o = opts();
    o.shared_prefix = 1000;
    o.max_total = 2048;
    pl_dataset d;
    assert_int_equal(pl_dataset_make(&spec, 10, 3, &o, &d), PL_OK);
    for (int32_t i = 0; i < 10; i++) {
        assert_int_equal(d.req[i].in_len, 1050);
        assert_int_equal(d.req[i].out_len, 20);
        assert_memory_equal(d.req[i].prompt, d.req[0].prompt, 1000 * sizeof(int32_t));
        if (i) assert_memory_not_equal(d.req[i].prompt + 1000, d.req[0].prompt + 1000, 50 * 4);
    }
    pl_dataset_destroy(&d);
    /* max_total trims the output first, then the prompt */
    assert_int_equal(pl_dataset_parse("fixed:100:100", &spec), PL_OK);
    o.shared_prefix = 0;
    o.max_total = 150;
    assert_int_equal(pl_dataset_make(&spec, 2, 3, &o, &d), PL_OK);
    assert_int_equal(d.req[0].in_len, 100);
    assert_int_equal(d.req[0].out_len, 50);
    pl_dataset_destroy(&d);
    /* bad requests */
    o.shared_prefix = 150;
    assert_int_equal(pl_dataset_make(&spec, 2, 3, &o, &d), PL_ERR_INVALID_ARG);
    o.shared_prefix = 0;
    assert_int_equal(pl_dataset_make(&spec, 0, 3, &o, &d), PL_ERR_INVALID_ARG);
    o.n_vocab = 3;
    assert_int_equal(pl_dataset_make(&spec, 2, 3, &o, &d), PL_ERR_INVALID_ARG);
}

static void test_sharegpt_file(void **state) {
    (void)state;
    pl_gguf *g;
    assert_int_equal(pl_gguf_open(PL_SHARED_DIR "/testdata/vocab/ggml-vocab-llama-spm.gguf", &g), PL_OK);
    pl_tokenizer *tok;
    assert_int_equal(pl_tokenizer_load(g, &tok), PL_OK);
    char path[] = "/tmp/pl_bench_sharegpt_XXXXXX.json";
    int fd = mkstemps(path, 5);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fputs("[{\"id\": \"a\", \"conversations\": [{\"from\": \"human\", \"value\": \"Tell me a story "
          "about a cat and a dog.\"}, {\"from\": \"gpt\", \"value\": \"Once upon a time there "
          "was a cat who lived with a dog.\"}]},\n"
          " {\"id\": \"short\", \"conversations\": [{\"from\": \"human\", \"value\": \"Hi\"}, "
          "{\"from\": \"gpt\", \"value\": \"Hello there, how are you today?\"}]},\n"
          " {\"id\": \"one turn\", \"conversations\": [{\"from\": \"human\", \"value\": \"x\"}]},\n"
          " {\"id\": \"b\", \"conversations\": [{\"from\": \"human\", \"value\": \"What is the "
          "capital of France and why?\"}, {\"from\": \"gpt\", \"value\": \"Paris is the capital "
          "of France.\"}, {\"from\": \"human\", \"value\": \"ok\"}]}]\n",
          f);
    fclose(f);
    pl_dataset_spec spec;
    assert_int_equal(pl_dataset_parse(path, &spec), PL_OK);
    pl_dataset_opts o = opts();
    o.tok = tok;
    pl_dataset d;
    assert_int_equal(pl_dataset_make(&spec, 2, 1, &o, &d), PL_OK);
    const char *qs[2] = {"Tell me a story about a cat and a dog.",
                         "What is the capital of France and why?"};
    int32_t *qid[2];
    size_t qn[2];
    for (int k = 0; k < 2; k++)
        assert_int_equal(pl_tokenize(tok, qs[k], strlen(qs[k]), 1, 0, &qid[k], &qn[k]), PL_OK);
    int saw[2] = {0, 0};
    for (int32_t i = 0; i < 2; i++) {
        for (int k = 0; k < 2; k++)
            if (qn[k] == (size_t)d.req[i].in_len && !memcmp(qid[k], d.req[i].prompt, qn[k] * 4))
                saw[k]++;
        assert_true(d.req[i].out_len >= 4);
    }
    free(qid[0]);
    free(qid[1]);
    int saw_cat = saw[0] + saw[1];
    assert_int_equal(saw[0], 1);
    assert_int_equal(saw_cat, 2); /* both usable prompts, token for token */
    pl_dataset_destroy(&d);
    /* only 2 usable conversations ("Hi" is too short, one has a single turn) */
    assert_int_equal(pl_dataset_make(&spec, 3, 1, &o, &d), PL_ERR_INVALID_ARG);
    assert_non_null(strstr(pl_last_error(), "only 2 usable"));
    o.tok = NULL;
    assert_int_equal(pl_dataset_make(&spec, 1, 1, &o, &d), PL_ERR_INVALID_ARG);
    unlink(path);
    spec.path = "/nonexistent/x.json";
    o.tok = tok;
    assert_int_equal(pl_dataset_make(&spec, 1, 1, &o, &d), PL_ERR_IO);
    pl_tokenizer_destroy(tok);
    pl_gguf_close(g);
}

/* Exponential gaps of mean 1/rate (coefficient of variation 1); counts per unit of time have
 * variance close to their mean; seeded; infinite rate = all at once. */
static void test_poisson(void **state) {
    (void)state;
    enum { N = 40000 };
    double *t = malloc(N * sizeof *t), *t2 = malloc(N * sizeof *t2);
    pl_poisson_arrivals(8.0, N, 11, t);
    pl_poisson_arrivals(8.0, N, 11, t2);
    assert_memory_equal(t, t2, N * sizeof *t);
    double sum = 0, sq = 0, prev = 0;
    for (int i = 0; i < N; i++) {
        double g = t[i] - prev;
        assert_true(g >= 0);
        sum += g;
        sq += g * g;
        prev = t[i];
    }
    double mean = sum / N, sd = sqrt(sq / N - mean * mean);
    assert_true(fabs(mean * 8.0 - 1) < 0.03);
    assert_true(fabs(sd / mean - 1) < 0.05);
    /* counts in 1 s windows */
    int windows = (int)t[N - 1], *cnt = calloc((size_t)windows + 1, sizeof *cnt);
    for (int i = 0; i < N; i++) cnt[(int)t[i]]++;
    double cm = 0, cv = 0;
    for (int w = 0; w < windows; w++) cm += cnt[w];
    cm /= windows;
    for (int w = 0; w < windows; w++) cv += (cnt[w] - cm) * (cnt[w] - cm);
    cv /= windows - 1;
    assert_true(fabs(cm / 8.0 - 1) < 0.05);
    assert_true(fabs(cv / cm - 1) < 0.15);
    pl_poisson_arrivals(8.0, N, 12, t2);
    assert_memory_not_equal(t, t2, N * sizeof *t);
    pl_poisson_arrivals(INFINITY, 5, 1, t);
    for (int i = 0; i < 5; i++) assert_true(t[i] == 0);
    free(cnt);
    free(t);
    free(t2);
}

static void test_percentiles(void **state) {
    (void)state;
    double v[100];
    for (int i = 0; i < 100; i++) v[i] = 100 - i; /* 100 .. 1, unsorted */
    pl_summary s;
    pl_summarize(v, 100, &s);
    assert_int_equal(s.n, 100);
    assert_true(fabs(s.mean - 50.5) < 1e-9);
    assert_true(fabs(s.p50 - 50.5) < 1e-9);
    assert_true(fabs(s.p90 - 90.1) < 1e-9);
    assert_true(fabs(s.p99 - 99.01) < 1e-9);
    assert_true(s.max == 100);
    double one = 3;
    pl_summarize(&one, 1, &s);
    assert_true(s.p50 == 3 && s.p99 == 3 && s.mean == 3);
    pl_summarize(NULL, 0, &s);
    assert_int_equal(s.n, 0);
    assert_true(s.mean == 0);
}

static double num(json_t *j, const char *k) {
    json_t *v = json_object_get(j, k);
    if (!json_is_number(v)) fail_msg("report field '%s' missing or not a number", k);
    return json_number_value(v);
}

static void test_serve_report(void **state) {
    (void)state;
    double g0[] = {0.1, 0.1, 0.1}, g1[] = {0.2};
    pl_bench_result r[3] = {
        {.ok = 1, .send = 0, .ttft = 0.5, .e2e = 0.8, .in_len = 10, .out_len = 4, .n_gaps = 3, .gaps = g0},
        {.ok = 1, .send = 1, .ttft = 1.0, .e2e = 1.2, .in_len = 20, .out_len = 2, .n_gaps = 1, .gaps = g1},
        {.ok = 0, .send = 2, .in_len = 5, .out_len = 0},
    };
    json_t *j = pl_bench_serve_report(r, 3, 4.0);
    assert_non_null(j);
    assert_true(num(j, "num_prompts") == 3);
    assert_true(num(j, "completed") == 2);
    assert_true(num(j, "errors") == 1);
    assert_true(fabs(num(j, "duration_s") - 4) < 1e-9);
    assert_true(fabs(num(j, "request_throughput") - 0.5) < 1e-9);
    assert_true(fabs(num(j, "output_throughput") - 1.5) < 1e-9);
    assert_true(fabs(num(j, "total_token_throughput") - 9.0) < 1e-9);
    /* normalized latency: mean of 0.8/4 and 1.2/2 */
    assert_true(fabs(num(j, "normalized_latency_s_per_token") - 0.4) < 1e-9);
    const char *sums[] = {"ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "normalized_latency"};
    for (int i = 0; i < 5; i++) {
        json_t *s = json_object_get(j, sums[i]);
        assert_true(json_is_object(s));
        const char *keys[] = {"n", "mean", "p50", "p90", "p99", "max"};
        for (int k = 0; k < 6; k++) (void)num(s, keys[k]);
    }
    json_t *ttft = json_object_get(j, "ttft_ms");
    assert_true(fabs(num(ttft, "mean") - 750) < 1e-6);
    /* TPOT: (0.8 - 0.5) / 3 and (1.2 - 1.0) / 1 */
    json_t *tpot = json_object_get(j, "tpot_ms");
    assert_true(fabs(num(tpot, "mean") - 150) < 1e-6);
    json_t *itl = json_object_get(j, "itl_ms");
    assert_true(num(itl, "n") == 4);
    assert_true(fabs(num(itl, "max") - 200) < 1e-6);
    json_decref(j);
}

/* Conversations: seeded, turns and lengths within their bounds, the stated means, and refused
 * where a fixed list of requests is made (bench serve). */
static void test_chat_make(void **state) {
    (void)state;
    pl_dataset_opts o = opts();
    o.max_out = 100;
    pl_chat_dataset a, b;
    assert_int_equal(pl_chat_make(2000, 7, &o, &a), PL_OK);
    assert_int_equal(pl_chat_make(2000, 7, &o, &b), PL_OK);
    double su = 0, nt = 0;
    int seen[7] = {0};
    for (int32_t i = 0; i < a.n; i++) {
        const pl_conversation *c = &a.conv[i], *d = &b.conv[i];
        assert_in_range(c->n_turns, 2, 6);
        seen[c->n_turns] = 1;
        assert_int_equal(c->n_turns, d->n_turns);
        for (int32_t k = 0; k < c->n_turns; k++) {
            assert_in_range(c->user_len[k], 4, 256);
            assert_in_range(c->out_len[k], 4, 100);
            assert_int_equal(c->user_len[k], d->user_len[k]);
            assert_int_equal(c->out_len[k], d->out_len[k]);
            assert_memory_equal(c->user[k], d->user[k], (size_t)c->user_len[k] * sizeof(int32_t));
            for (int32_t t = 0; t < c->user_len[k]; t++) assert_in_range(c->user[k][t], 3, 31999);
            su += c->user_len[k];
            nt++;
        }
    }
    for (int t = 2; t <= 6; t++) assert_true(seen[t]);
    assert_true(fabs(su / nt - 40) < 2.0); /* mean 40 within 5 % */
    pl_chat_destroy(&b);
    assert_int_equal(pl_chat_make(3, 8, &o, &b), PL_OK);
    assert_true(b.conv[0].n_turns != a.conv[0].n_turns || b.conv[0].user_len[0] != a.conv[0].user_len[0]
                || b.conv[1].user_len[0] != a.conv[1].user_len[0]);
    pl_chat_destroy(&a);
    pl_chat_destroy(&b);
    assert_int_equal(pl_chat_make(0, 1, &o, &a), PL_ERR_INVALID_ARG);
    pl_dataset_spec s;
    pl_dataset d;
    assert_int_equal(pl_dataset_parse("chat", &s), PL_OK);
    assert_int_equal(pl_dataset_make(&s, 4, 1, &o, &d), PL_ERR_INVALID_ARG);
    assert_non_null(strstr(pl_last_error(), "chat"));
}

/* Turn k's prompt is the history (user turns and the answers given) plus user turn k, cut at
 * the front to the limit: each untruncated prompt extends the previous prompt and its answer. */
static void test_chat_turns(void **state) {
    (void)state;
    pl_dataset_opts o = opts();
    pl_chat_dataset a;
    assert_int_equal(pl_chat_make(50, 3, &o, &a), PL_OK);
    const pl_conversation *c = NULL;
    for (int32_t i = 0; i < a.n && !c; i++)
        if (a.conv[i].n_turns >= 3) c = &a.conv[i];
    assert_non_null(c);
    pl_chat_history h = {0};
    int32_t prev[4096], n_prev = 0, answer[300];
    for (int32_t k = 0; k < c->n_turns; k++) {
        const int32_t *p;
        int32_t n;
        assert_int_equal(pl_chat_turn(&h, c, k, 1 << 20, &p, &n), PL_OK);
        assert_int_equal(n, n_prev + c->user_len[k]);
        assert_memory_equal(p, prev, (size_t)n_prev * sizeof *p);
        assert_memory_equal(p + n_prev, c->user[k], (size_t)c->user_len[k] * sizeof *p);
        assert_int_equal(h.n, n);
        memcpy(prev, p, (size_t)n * sizeof *p);
        for (int32_t t = 0; t < c->out_len[k]; t++) answer[t] = 1000 + k * 300 + t;
        assert_int_equal(pl_chat_answer(&h, answer, c->out_len[k]), PL_OK);
        memcpy(prev + n, answer, (size_t)c->out_len[k] * sizeof *answer);
        n_prev = n + c->out_len[k];
    }
    pl_chat_history_free(&h);
    /* Truncation keeps the newest tokens. */
    pl_chat_history g = {0};
    const int32_t *p;
    int32_t n;
    assert_int_equal(pl_chat_turn(&g, c, 0, 1 << 20, &p, &n), PL_OK);
    assert_int_equal(pl_chat_answer(&g, answer, 50), PL_OK);
    assert_int_equal(pl_chat_turn(&g, c, 1, 10, &p, &n), PL_OK);
    int32_t m = c->user_len[1] < 10 ? c->user_len[1] : 10;
    assert_int_equal(n, 10);
    assert_memory_equal(p + 10 - m, c->user[1] + c->user_len[1] - m, (size_t)m * sizeof *p);
    if (m < 10) assert_int_equal(p[10 - m - 1], answer[49]);
    assert_int_equal(pl_chat_turn(&g, c, c->n_turns, 10, &p, &n), PL_ERR_INVALID_ARG);
    assert_int_equal(pl_chat_turn(&g, c, 0, 0, &p, &n), PL_ERR_INVALID_ARG);
    pl_chat_history_free(&g);
    pl_chat_destroy(&a);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse),         cmocka_unit_test(test_fitted_mu),
        cmocka_unit_test(test_sharegpt_means), cmocka_unit_test(test_alpaca_means),
        cmocka_unit_test(test_seeded),        cmocka_unit_test(test_fixed_and_prefix),
        cmocka_unit_test(test_sharegpt_file), cmocka_unit_test(test_poisson),
        cmocka_unit_test(test_percentiles),   cmocka_unit_test(test_serve_report),
        cmocka_unit_test(test_chat_make),     cmocka_unit_test(test_chat_turns),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
