/* Unit tests for the server's pure pieces: SSE framing, error bodies, UTF-8 helpers, the API-key
 * check, choice accumulation, logprobs shapes (with stories260K's real tokenizer) and the
 * Prometheus metrics text. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "gguf/gguf.h"
#include "server/server.h"

#include <math.h>
#include <string.h>

static void test_sse(void **state) {
    (void)state;
    json_t *o = json_pack("{s:s, s:[i]}", "id", "cmpl-1", "x", 1);
    char *s = pl_server_sse_event(o);
    assert_string_equal(s, "data: {\"id\":\"cmpl-1\",\"x\":[1]}\n\n");
    free(s);
    json_decref(o);
    assert_string_equal(PL_SERVER_SSE_DONE, "data: [DONE]\n\n");
}

static void test_error_body(void **state) {
    (void)state;
    pl_server_error e;
    assert_int_equal(pl_server_fail(&e, 503, NULL, "queue_full", "busy %d", 3), -1);
    char *s = pl_server_error_body(&e);
    assert_string_equal(s, "{\"error\":{\"message\":\"busy 3\",\"type\":\"service_unavailable_error\","
                           "\"param\":null,\"code\":\"queue_full\"}}");
    free(s);
    pl_server_fail(&e, 401, NULL, NULL, "no key");
    s = pl_server_error_body(&e);
    assert_non_null(strstr(s, "\"type\":\"authentication_error\""));
    assert_non_null(strstr(s, "\"code\":null"));
    free(s);
    /* A message quoting invalid UTF-8 still gives valid JSON. */
    pl_server_fail(&e, 400, "prompt", "x", "bad \xff byte");
    s = pl_server_error_body(&e);
    json_t *j = json_loads(s, 0, NULL);
    assert_non_null(j);
    assert_string_equal(json_string_value(json_object_get(json_object_get(j, "error"), "param")),
                        "prompt");
    json_decref(j);
    free(s);
}

static void test_utf8(void **state) {
    (void)state;
    size_t n;
    char *s = pl_server_utf8_sanitize("a\xc3\xa9" "b", 4, &n);
    assert_string_equal(s, "a\xc3\xa9" "b");
    assert_int_equal(n, 4);
    free(s);
    s = pl_server_utf8_sanitize("a\xe2\x82", 3, &n); /* a cut sequence */
    assert_string_equal(s, "a\xef\xbf\xbd\xef\xbf\xbd");
    free(s);
    s = pl_server_utf8_sanitize("\xed\xa0\x80", 3, &n); /* a surrogate */
    assert_int_equal(n, 9);
    free(s);
    s = pl_server_utf8_sanitize("\xc0\xaf", 2, &n); /* overlong */
    assert_int_equal(n, 6);
    free(s);
    assert_int_equal(pl_server_utf8_chars("a\xc3\xa9\xf0\x9f\x98\x80", 7), 3);
}

static void test_auth(void **state) {
    (void)state;
    assert_true(pl_server_auth_ok("Bearer sekret", "sekret"));
    assert_false(pl_server_auth_ok("Bearer sekreT", "sekret"));
    assert_false(pl_server_auth_ok("Bearer sekret2", "sekret"));
    assert_false(pl_server_auth_ok("Bearer sekre", "sekret"));
    assert_false(pl_server_auth_ok("bearer sekret", "sekret"));
    assert_false(pl_server_auth_ok("sekret", "sekret"));
    assert_false(pl_server_auth_ok("", "sekret"));
    assert_false(pl_server_auth_ok(NULL, "sekret"));
}

static void test_choice_accumulates(void **state) {
    (void)state;
    pl_server_choice c = {0};
    c.stop_token = -1;
    int32_t ids1[2] = {5, 6}, ids2[1] = {7};
    float lp1[2] = {-0.5f, -1.0f}, lp2[1] = {-INFINITY};
    pl_token_logprob top1[4] = {{5, -0.5f}, {5, -0.5f}, {9, -0.9f}, {6, -1.0f}};
    pl_token_logprob top2[2] = {{8, -0.1f}, {7, -INFINITY}};
    pl_completion_delta d1 = {.index = 0, .n_tokens = 2, .token_ids = ids1, .text = "ab",
                              .text_len = 2, .n_top = 1, .token_logprobs = lp1, .top = top1,
                              .stop_token = -1};
    pl_completion_delta d2 = {.index = 0, .n_tokens = 1, .token_ids = ids2, .text = "c",
                              .text_len = 1, .n_top = 1, .token_logprobs = lp2, .top = top2,
                              .finish = PL_FINISH_STOP, .stop_token = -1, .stop_str = "zz"};
    pl_server_choice_add(&c, &d1);
    pl_server_choice_add(&c, &d2);
    assert_string_equal(c.text, "abc");
    assert_int_equal(c.n, 3);
    assert_int_equal(c.ids[2], 7);
    assert_int_equal(c.top[5].id, 7);
    assert_int_equal(c.finish, PL_FINISH_STOP);
    assert_string_equal(c.stop_str, "zz");

    pl_server_resp_ctx x = {.tok = NULL};
    size_t end;
    json_t *lp = pl_server_completion_logprobs(&x, c.ids, c.lp, c.top, c.n, c.n_top, 0, 10, &end);
    char *s = json_dumps(lp, JSON_COMPACT);
    /* Token strings without a tokenizer are "token_id:N" (10 characters each here). */
    assert_string_equal(s, "{\"tokens\":[\"token_id:5\",\"token_id:6\",\"token_id:7\"],"
                           "\"token_logprobs\":[-0.5,-1.0,-9999.0],"
                           "\"top_logprobs\":[{\"token_id:5\":-0.5},{\"token_id:9\":-0.89999997615814209,"
                           "\"token_id:6\":-1.0},{\"token_id:8\":-0.10000000149011612,"
                           "\"token_id:7\":-9999.0}],\"text_offset\":[10,20,30]}");
    assert_int_equal(end, 40);
    free(s);
    json_decref(lp);
    json_t *fr = pl_server_finish_json(c.finish), *sr = pl_server_stop_reason_json(c.finish, -1, "zz");
    assert_string_equal(json_string_value(fr), "stop");
    assert_string_equal(json_string_value(sr), "zz");
    json_decref(fr);
    json_decref(sr);
    sr = pl_server_stop_reason_json(PL_FINISH_LENGTH, 2, NULL);
    assert_true(json_is_null(sr));
    json_decref(sr);
    pl_server_choice_destroy(&c);
}

static void test_logprobs_real_tokenizer(void **state) {
    (void)state;
    pl_gguf *g;
    assert_int_equal(pl_gguf_open(PL_SHARED_DIR "/models/stories260K.gguf", &g), PL_OK);
    pl_tokenizer *t;
    assert_int_equal(pl_tokenizer_load(g, &t), PL_OK);
    pl_gguf_close(g);
    int32_t *ids;
    size_t n;
    assert_int_equal(pl_tokenize(t, "Once upon", 9, 0, 0, &ids, &n), PL_OK);
    assert_true(n >= 2);
    pl_server_resp_ctx x = {.tok = t};
    float lp[16];
    pl_token_logprob top[32];
    for (size_t i = 0; i < n; i++) {
        lp[i] = -1.0f * (float)i;
        top[2 * i] = (pl_token_logprob){ids[i], lp[i]};
        top[2 * i + 1] = (pl_token_logprob){ids[i], lp[i]};
    }
    size_t end;
    json_t *j = pl_server_completion_logprobs(&x, ids, lp, top, (int32_t)n, 1, 1, 0, &end);
    json_t *tokens = json_object_get(j, "tokens");
    /* The pieces join to the text (SentencePiece's leading space included). */
    char joined[64] = "";
    for (size_t i = 0; i < n; i++) strcat(joined, json_string_value(json_array_get(tokens, i)));
    assert_string_equal(joined, " Once upon");
    assert_int_equal(end, 10);
    assert_true(json_is_null(json_array_get(json_object_get(j, "token_logprobs"), 0)));
    assert_true(json_is_null(json_array_get(json_object_get(j, "top_logprobs"), 0)));
    assert_true(json_is_real(json_array_get(json_object_get(j, "token_logprobs"), 1)));
    json_decref(j);

    j = pl_server_chat_logprobs(&x, ids, lp, top, (int32_t)n, 1);
    json_t *c0 = json_array_get(json_object_get(j, "content"), 0);
    char *first = pl_server_token_str(t, ids[0]);
    assert_string_equal(json_string_value(json_object_get(c0, "token")), first);
    free(first);
    json_t *bytes = json_object_get(c0, "bytes");
    assert_int_equal(json_integer_value(json_array_get(bytes, 0)), ' ');
    assert_int_equal(json_array_size(json_object_get(c0, "top_logprobs")), 1);
    json_decref(j);
    free(ids);
    pl_tokenizer_destroy(t);
}

static void test_metrics_text(void **state) {
    (void)state;
    pl_server_metrics m;
    pl_server_metrics_init(&m, 2048);
    pl_request_output o = {.arrival_time = 100.0, .first_scheduled_time = 100.02,
                           .first_token_time = 100.05, .finish_time = 101.05,
                           .n_prompt_tokens = 40, .n_output_tokens = 11};
    pl_request_params p;
    pl_request_params_default(&p);
    p.n = 3;
    p.best_of = 3;
    p.max_tokens = 11;
    pl_server_metrics_observe(&m, &o, &p, PL_FINISH_LENGTH);
    p.n = 1;
    p.max_tokens = 2000;
    pl_server_metrics_abort(&m, &p, 7); /* a client that went away */
    pl_server_metrics_iteration(&m, 41);
    pl_server_metrics_iteration(&m, 1);
    pl_server_metrics_iteration(&m, 0); /* a step that ran nothing: not observed */
    pl_engine_stats s = {.running = 2, .waiting = 1, .kv_usage = 0.25, .prefix_queries = 40,
                         .prefix_hits = 16, .preemptions = 3, .prompt_tokens = 50,
                         .generation_tokens = 70, .swap_total = 8, .swap_used = 2,
                         .swaps_out = 5, .blocks_total = 100, .sliding_window = 64,
                         .window_freed_blocks = 9, .window_blocks_total = 40,
                         .window_blocks_used = 10, .window_kv_usage = 0.25};
    pl_engine_config c;
    pl_engine_config_default(&c);
    c.kv_cache_memory = 1 << 20;
    c.kv_cache_memory_fraction = 0.5;
    char *t = pl_server_metrics_render(&m, &s, &c, "sto\"ries");
    const char *want[] = {
        "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"sto\\\"ries\"} 2\n",
        "vllm:num_requests_waiting{model_name=\"sto\\\"ries\"} 1\n",
        "vllm:num_requests_swapped{model_name=\"sto\\\"ries\"} 0\n",
        "vllm:gpu_cache_usage_perc{model_name=\"sto\\\"ries\"} 0.25\n",
        "pagellm_kv_cache_usage_perc{model_name=\"sto\\\"ries\"} 0.25\n",
        "vllm:prefix_cache_queries_total{model_name=\"sto\\\"ries\"} 40\n",
        "vllm:prefix_cache_hits_total{model_name=\"sto\\\"ries\"} 16\n",
        "vllm:num_preemptions_total{model_name=\"sto\\\"ries\"} 3\n",
        "# TYPE pagellm_kv_window_freed_blocks_total counter\n"
        "pagellm_kv_window_freed_blocks_total{model_name=\"sto\\\"ries\"} 9\n",
        /* layer kinds: the window pool beside the full one */
        "# TYPE pagellm_kv_window_blocks_total gauge\n"
        "pagellm_kv_window_blocks_total{model_name=\"sto\\\"ries\"} 40\n",
        "pagellm_kv_window_blocks_used{model_name=\"sto\\\"ries\"} 10\n",
        "pagellm_kv_window_cache_usage_perc{model_name=\"sto\\\"ries\"} 0.25\n",
        "vllm:prompt_tokens_total{model_name=\"sto\\\"ries\"} 50\n",
        "vllm:generation_tokens_total{model_name=\"sto\\\"ries\"} 70\n",
        "vllm:request_success_total{model_name=\"sto\\\"ries\",finished_reason=\"length\"} 1\n",
        "# TYPE vllm:time_to_first_token_seconds histogram\n",
        /* TTFT 0.05 s: not in the 0.04 bucket, in the 0.06 one. */
        "vllm:time_to_first_token_seconds_bucket{model_name=\"sto\\\"ries\",le=\"0.04\"} 0\n",
        "vllm:time_to_first_token_seconds_bucket{model_name=\"sto\\\"ries\",le=\"0.06\"} 1\n",
        "vllm:time_to_first_token_seconds_count{model_name=\"sto\\\"ries\"} 1\n",
        /* TPOT: 1 s over 10 gaps = 0.1 s, counted 10 times. */
        "vllm:time_per_output_token_seconds_bucket{model_name=\"sto\\\"ries\",le=\"0.075\"} 0\n",
        "vllm:time_per_output_token_seconds_bucket{model_name=\"sto\\\"ries\",le=\"0.1\"} 10\n",
        "vllm:time_per_output_token_seconds_count{model_name=\"sto\\\"ries\"} 10\n",
        "vllm:e2e_request_latency_seconds_bucket{model_name=\"sto\\\"ries\",le=\"1\"} 0\n",
        "vllm:e2e_request_latency_seconds_bucket{model_name=\"sto\\\"ries\",le=\"1.5\"} 1\n",
        "vllm:e2e_request_latency_seconds_bucket{model_name=\"sto\\\"ries\",le=\"+Inf\"} 1\n",
        "vllm:e2e_request_latency_seconds_bucket{model_name=\"sto\\\"ries\",le=\"7680\"} 1\n",
        "vllm:kv_cache_usage_perc{model_name=\"sto\\\"ries\"} 0.25\n",
        "vllm:cpu_cache_usage_perc{model_name=\"sto\\\"ries\"} 0.25\n",
        "pagellm_kv_swap_blocks_total{model_name=\"sto\\\"ries\"} 8\n",
        "pagellm_kv_swap_blocks_used{model_name=\"sto\\\"ries\"} 2\n",
        "# TYPE pagellm_swap_out_total counter\npagellm_swap_out_total{model_name=\"sto\\\"ries\"} 5\n",
        "vllm:request_success_total{model_name=\"sto\\\"ries\",finished_reason=\"abort\"} 1\n",
        /* queue 0.02 s, prefill 0.03 s, decode 1 s, inference 1.03 s (vLLM's latency buckets) */
        "vllm:request_queue_time_seconds_bucket{model_name=\"sto\\\"ries\",le=\"0.3\"} 1\n",
        "vllm:request_prefill_time_seconds_bucket{model_name=\"sto\\\"ries\",le=\"0.3\"} 1\n",
        "vllm:request_decode_time_seconds_bucket{model_name=\"sto\\\"ries\",le=\"0.8\"} 0\n",
        "vllm:request_decode_time_seconds_bucket{model_name=\"sto\\\"ries\",le=\"1\"} 1\n",
        "vllm:request_inference_time_seconds_bucket{model_name=\"sto\\\"ries\",le=\"1\"} 0\n",
        "vllm:request_inference_time_seconds_bucket{model_name=\"sto\\\"ries\",le=\"1.5\"} 1\n",
        "vllm:request_inference_time_seconds_count{model_name=\"sto\\\"ries\"} 1\n",
        /* prompt tokens 40 and 7 (the aborted one) in 1-2-5 buckets up to 2048 */
        "vllm:request_prompt_tokens_bucket{model_name=\"sto\\\"ries\",le=\"5\"} 0\n",
        "vllm:request_prompt_tokens_bucket{model_name=\"sto\\\"ries\",le=\"10\"} 1\n",
        "vllm:request_prompt_tokens_bucket{model_name=\"sto\\\"ries\",le=\"50\"} 2\n",
        "vllm:request_prompt_tokens_bucket{model_name=\"sto\\\"ries\",le=\"2000\"} 2\n",
        "vllm:request_prompt_tokens_sum{model_name=\"sto\\\"ries\"} 47\n",
        "vllm:request_generation_tokens_bucket{model_name=\"sto\\\"ries\",le=\"10\"} 0\n",
        "vllm:request_generation_tokens_bucket{model_name=\"sto\\\"ries\",le=\"20\"} 1\n",
        "vllm:request_generation_tokens_count{model_name=\"sto\\\"ries\"} 1\n",
        "vllm:iteration_tokens_total_bucket{model_name=\"sto\\\"ries\",le=\"1\"} 1\n",
        "vllm:iteration_tokens_total_bucket{model_name=\"sto\\\"ries\",le=\"32\"} 1\n",
        "vllm:iteration_tokens_total_bucket{model_name=\"sto\\\"ries\",le=\"64\"} 2\n",
        "vllm:iteration_tokens_total_sum{model_name=\"sto\\\"ries\"} 42\n",
        "vllm:iteration_tokens_total_bucket{model_name=\"sto\\\"ries\",le=\"16384\"} 2\n",
        "vllm:request_params_n_bucket{model_name=\"sto\\\"ries\",le=\"1\"} 1\n",
        "vllm:request_params_n_bucket{model_name=\"sto\\\"ries\",le=\"2\"} 1\n",
        "vllm:request_params_n_bucket{model_name=\"sto\\\"ries\",le=\"5\"} 2\n",
        "vllm:request_params_n_bucket{model_name=\"sto\\\"ries\",le=\"20\"} 2\n",
        "vllm:request_params_max_tokens_bucket{model_name=\"sto\\\"ries\",le=\"20\"} 1\n",
        "vllm:request_params_max_tokens_bucket{model_name=\"sto\\\"ries\",le=\"1000\"} 1\n",
        "vllm:request_params_max_tokens_bucket{model_name=\"sto\\\"ries\",le=\"2000\"} 2\n",
        "vllm:request_params_max_tokens_sum{model_name=\"sto\\\"ries\"} 2011\n",
        "# TYPE vllm:cache_config_info gauge\nvllm:cache_config_info{block_size=\"16\","
        "cache_dtype=\"float16\",enable_prefix_caching=\"True\",gpu_memory_utilization=\"0.5\","
        "kv_cache_memory_bytes=\"1048576\",num_cpu_blocks=\"8\",num_gpu_blocks=\"100\","
        "swap_space_bytes=\"0\",engine=\"0\"} 1\n",
    };
    /* 1-2-5 buckets stop at max_model_len 2048: no 5000 bucket. */
    if (strstr(t, "vllm:request_prompt_tokens_bucket{model_name=\"sto\\\"ries\",le=\"5000\"}"))
        fail_msg("a 1-2-5 bucket beyond max_model_len");
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        if (!strstr(t, want[i])) fail_msg("metrics text lacks: %s", want[i]);
    free(t);
    pl_server_metrics_destroy(&m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sse),
        cmocka_unit_test(test_error_body),
        cmocka_unit_test(test_utf8),
        cmocka_unit_test(test_auth),
        cmocka_unit_test(test_choice_accumulates),
        cmocka_unit_test(test_logprobs_real_tokenizer),
        cmocka_unit_test(test_metrics_text),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
