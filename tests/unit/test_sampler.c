/* Unit tests for engine/sampler and engine/stop: greedy, the masks, penalties, seeded
 * reproducibility, distribution sanity, log-probabilities, stop strings. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "engine/sampler.h"
#include "engine/stop.h"

#include <math.h>
#include <string.h>

enum { V = 8 };

/* Logits whose softmax is p = {0.4, 0.25, 0.15, 0.1, 0.05, 0.03, 0.015, 0.005}. */
static void make_logits(float *l) {
    const double p[V] = {0.4, 0.25, 0.15, 0.1, 0.05, 0.03, 0.015, 0.005};
    for (int i = 0; i < V; i++) l[i] = (float)log(p[i]);
}

static void counts_for(const pl_sampling_params *sp, int draws, uint64_t seed, int *counts) {
    pl_sampler *s = pl_sampler_create(V);
    pl_rng rng;
    pl_rng_seed(&rng, seed);
    memset(counts, 0, V * sizeof(int));
    float l[V];
    for (int i = 0; i < draws; i++) {
        make_logits(l);
        int32_t id = pl_sample(s, sp, l, NULL, 0, NULL, 0, &rng);
        assert_true(id >= 0 && id < V);
        counts[id]++;
    }
    pl_sampler_destroy(s);
}

/* One scan keeping the first strictly larger value: pl_argmax's definition. */
static int32_t argmax_scan(const float *x, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

/* pl_argmax equals the plain scan on every length around its 8 lanes, with ties (the first
 * wins), signed zeros, infinities and NaNs (at 0, where the scan stays, and elsewhere). */
static void test_argmax(void **state) {
    (void)state;
    uint64_t r = 0x243f6a8885a308d3ull;
    float x[67];
    for (int trial = 0; trial < 20000; trial++) {
        const int32_t n = 1 + trial % 67;
        for (int32_t i = 0; i < n; i++) {
            r ^= r << 13, r ^= r >> 7, r ^= r << 17;
            const int k = (int)(r % 16);
            x[i] = k == 0 ? NAN : k == 1 ? -0.0f : k == 2 ? 0.0f : k == 3 ? INFINITY
                 : k == 4 ? -INFINITY : (float)((int)(r >> 8) % 7) - 3.0f; /* ties likely */
        }
        if (pl_argmax(x, n) != argmax_scan(x, n))
            fail_msg("n %d trial %d: pl_argmax %d, scan %d", n, trial, pl_argmax(x, n),
                     argmax_scan(x, n));
    }
    const float nan0[3] = {NAN, 1.0f, 2.0f}, alln[3] = {-INFINITY, NAN, NAN};
    assert_int_equal(pl_argmax(nan0, 3), 0);
    assert_int_equal(pl_argmax(alln, 3), 0);
    assert_int_equal(pl_argmax(nan0, 0), 0);
}

static void test_greedy(void **state) {
    (void)state;
    pl_sampling_params sp;
    pl_sampling_params_default(&sp);
    sp.temperature = 0;
    pl_sampler *s = pl_sampler_create(V);
    pl_rng rng;
    pl_rng_seed(&rng, 1);
    float l[V];
    make_logits(l);
    l[5] = 3.0f;
    assert_int_equal(pl_sample(s, &sp, l, NULL, 0, NULL, 0, &rng), 5);
    /* Ties: the lowest id. */
    for (int i = 0; i < V; i++) l[i] = 1.0f;
    assert_int_equal(pl_sample(s, &sp, l, NULL, 0, NULL, 0, &rng), 0);
    pl_sampler_destroy(s);
}

static void test_distribution(void **state) {
    (void)state;
    pl_sampling_params sp;
    pl_sampling_params_default(&sp);
    int c[V];
    const int N = 200000;
    counts_for(&sp, N, 7, c);
    const double p[V] = {0.4, 0.25, 0.15, 0.1, 0.05, 0.03, 0.015, 0.005};
    for (int i = 0; i < V; i++) {
        double sd = sqrt(N * p[i] * (1 - p[i]));
        assert_true(fabs(c[i] - N * p[i]) < 5 * sd);
    }
    /* Temperature 0.5 squares and renormalises the probabilities. */
    sp.temperature = 0.5f;
    counts_for(&sp, N, 8, c);
    double z = 0;
    for (int i = 0; i < V; i++) z += p[i] * p[i];
    for (int i = 0; i < V; i++) {
        double q = p[i] * p[i] / z, sd = sqrt(N * q * (1 - q));
        assert_true(fabs(c[i] - N * q) < 5 * sd + 1);
    }
}

static void test_masks(void **state) {
    (void)state;
    pl_sampling_params sp;
    int c[V];
    pl_sampling_params_default(&sp);
    sp.top_k = 3;
    counts_for(&sp, 20000, 1, c);
    for (int i = 3; i < V; i++) assert_int_equal(c[i], 0);
    /* p within top-3: 0.4/0.8, 0.25/0.8, 0.15/0.8 */
    assert_true(fabs(c[0] / 20000.0 - 0.5) < 0.02);

    pl_sampling_params_default(&sp);
    sp.top_p = 0.7f; /* 0.4 + 0.25 = 0.65 < 0.7, so 3 tokens are kept */
    counts_for(&sp, 20000, 2, c);
    assert_true(c[2] > 0);
    for (int i = 3; i < V; i++) assert_int_equal(c[i], 0);
    sp.top_p = 0.4f; /* only the top token */
    counts_for(&sp, 1000, 3, c);
    assert_int_equal(c[0], 1000);

    pl_sampling_params_default(&sp);
    sp.min_p = 0.3f; /* keep p >= 0.12: tokens 0, 1, 2 */
    counts_for(&sp, 20000, 4, c);
    assert_true(c[2] > 0);
    for (int i = 3; i < V; i++) assert_int_equal(c[i], 0);

    /* top-k then top-p on the renormalised top-k distribution: top-2 = {0.615, 0.385}. */
    pl_sampling_params_default(&sp);
    sp.top_k = 2;
    sp.top_p = 0.6f;
    counts_for(&sp, 1000, 5, c);
    assert_int_equal(c[0], 1000);
}

/* Pearson's chi-square of counts_for(sp) against q (the expected distribution, renormalised over
 * the tokens the masks keep): tokens with q = 0 must never appear, and the statistic must stay
 * below the 0.999 quantile for its degrees of freedom (fixed seed: deterministic). */
static void check_frequencies(const char *what, const pl_sampling_params *sp, uint64_t seed,
                              const double *q) {
    static const double crit999[V] = {0, 10.83, 13.82, 16.27, 18.47, 20.52, 22.46, 24.32};
    const int N = 40000;
    int c[V];
    counts_for(sp, N, seed, c);
    double chi2 = 0, qsum = 0;
    int kept = 0;
    for (int i = 0; i < V; i++) {
        qsum += q[i];
        if (q[i] == 0) {
            if (c[i]) fail_msg("%s: token %d drawn %d times, the masks remove it", what, i, c[i]);
            continue;
        }
        kept++;
        chi2 += (c[i] - N * q[i]) * (c[i] - N * q[i]) / (N * q[i]);
    }
    assert_true(fabs(qsum - 1) < 1e-9);
    if (chi2 > crit999[kept - 1])
        fail_msg("%s: chi-square %.2f > %.2f (%d degrees of freedom)", what, chi2,
                 crit999[kept - 1], kept - 1);
}

/* Renormalise p over tokens [0, k) (the masks keep a prefix of this descending p). */
static void renorm_prefix(const double *p, int k, double *q) {
    double z = 0;
    for (int i = 0; i < k; i++) z += p[i];
    for (int i = 0; i < V; i++) q[i] = i < k ? p[i] / z : 0;
}

static void test_mask_frequencies(void **state) {
    (void)state;
    const double p[V] = {0.4, 0.25, 0.15, 0.1, 0.05, 0.03, 0.015, 0.005};
    double q[V];
    pl_sampling_params sp;

    pl_sampling_params_default(&sp);
    sp.top_k = 3; /* {0.4, 0.25, 0.15} / 0.8 */
    renorm_prefix(p, 3, q);
    check_frequencies("top_k 3", &sp, 11, q);

    pl_sampling_params_default(&sp);
    sp.top_p = 0.85f; /* 0.8 < 0.85 <= 0.9: 4 tokens, / 0.9 */
    renorm_prefix(p, 4, q);
    check_frequencies("top_p 0.85", &sp, 12, q);

    pl_sampling_params_default(&sp);
    sp.min_p = 0.1f; /* keep p >= 0.04: 5 tokens, / 0.95 */
    renorm_prefix(p, 5, q);
    check_frequencies("min_p 0.1", &sp, 13, q);

    /* top-p over the top-k renormalised distribution: top-4 / 0.9 = {0.444, 0.278, ...},
     * cumulative 0.722 >= 0.7 at token 1: 2 tokens, / 0.65 (without renormalising: 3). */
    pl_sampling_params_default(&sp);
    sp.top_k = 4;
    sp.top_p = 0.7f;
    renorm_prefix(p, 2, q);
    check_frequencies("top_k 4 + top_p 0.7", &sp, 14, q);

    /* Temperature 2 first (p^0.5, renormalised), then top_p 0.6 and min_p 0.3 on that. */
    double t[V], z = 0;
    for (int i = 0; i < V; i++) z += sqrt(p[i]);
    for (int i = 0; i < V; i++) t[i] = sqrt(p[i]) / z;
    /* t = {0.261, 0.206, 0.160, 0.130, 0.092, 0.071, 0.050, 0.029}: cumulative 0.627 >= 0.6 at
     * token 2 (3 tokens); min_p 0.3 of 0.261 = 0.078 keeps 5. */
    pl_sampling_params_default(&sp);
    sp.temperature = 2.0f;
    sp.top_p = 0.6f;
    renorm_prefix(t, 3, q);
    check_frequencies("temperature 2 + top_p 0.6", &sp, 15, q);
    pl_sampling_params_default(&sp);
    sp.temperature = 2.0f;
    sp.min_p = 0.3f;
    renorm_prefix(t, 5, q);
    check_frequencies("temperature 2 + min_p 0.3", &sp, 16, q);
}

static void test_seed_reproducible(void **state) {
    (void)state;
    pl_sampling_params sp;
    pl_sampling_params_default(&sp);
    int a[V], b[V], d[V];
    counts_for(&sp, 500, 42, a);
    counts_for(&sp, 500, 42, b);
    counts_for(&sp, 500, 43, d);
    assert_memory_equal(a, b, sizeof a);
    assert_memory_not_equal(a, d, sizeof a);
}

static void test_penalties(void **state) {
    (void)state;
    pl_sampling_params sp;
    pl_sampling_params_default(&sp);
    sp.temperature = 0;
    pl_sampler *s = pl_sampler_create(V);
    pl_rng rng;
    pl_rng_seed(&rng, 1);
    float l[V] = {2.0f, 1.9f, -1.0f, 0, 0, 0, 0, 0};
    int32_t prompt[] = {0};
    int32_t out[] = {1, 1};
    /* Repetition: 2.0 / 1.5 = 1.33 < 1.9 / 1.5? both divided; token 2 (negative) multiplied. */
    sp.repetition_penalty = 1.5f;
    float t[V];
    memcpy(t, l, sizeof t);
    assert_int_equal(pl_sample(s, &sp, t, prompt, 1, NULL, 0, &rng), 1);
    assert_true(fabsf(t[0] - 2.0f / 1.5f) < 1e-6f);
    memcpy(t, l, sizeof t);
    int32_t p2[] = {2};
    pl_sample(s, &sp, t, p2, 1, NULL, 0, &rng);
    assert_true(fabsf(t[2] + 1.5f) < 1e-6f);
    /* Frequency and presence count output tokens only: 1.9 - 2*0.5 - 0.5 = 0.4. */
    pl_sampling_params_default(&sp);
    sp.temperature = 0;
    sp.frequency_penalty = 0.5f;
    sp.presence_penalty = 0.5f;
    memcpy(t, l, sizeof t);
    assert_int_equal(pl_sample(s, &sp, t, prompt, 1, out, 2, &rng), 0);
    assert_true(fabsf(t[1] - 0.4f) < 1e-6f);
    assert_true(t[0] == 2.0f); /* prompt token untouched by presence/frequency */
    /* Scratch is reset between calls: the same call again gives the same result. */
    memcpy(t, l, sizeof t);
    pl_sample(s, &sp, t, prompt, 1, out, 2, &rng);
    assert_true(fabsf(t[1] - 0.4f) < 1e-6f);
    pl_sampler_destroy(s);
}

static void test_validate(void **state) {
    (void)state;
    pl_sampling_params sp;
    pl_sampling_params_default(&sp);
    assert_int_equal(pl_sampling_params_validate(&sp), PL_OK);
    sp.top_p = 0;
    assert_int_equal(pl_sampling_params_validate(&sp), PL_ERR_INVALID_ARG);
    assert_non_null(strstr(pl_last_error(), "top_p"));
    pl_sampling_params_default(&sp);
    sp.temperature = -1;
    assert_int_equal(pl_sampling_params_validate(&sp), PL_ERR_INVALID_ARG);
    assert_non_null(strstr(pl_last_error(), "temperature"));
}

static void test_top_logprobs(void **state) {
    (void)state;
    pl_sampler *s = pl_sampler_create(V);
    float l[V];
    make_logits(l);
    pl_token_logprob top[3];
    float want;
    pl_top_logprobs(s, l, 3, top, 7, &want);
    assert_int_equal(top[0].id, 0);
    assert_int_equal(top[1].id, 1);
    assert_int_equal(top[2].id, 2);
    assert_true(fabsf(top[0].logprob - logf(0.4f)) < 1e-5f);
    assert_true(fabsf(want - logf(0.005f)) < 1e-4f);
    pl_sampler_destroy(s);
}

static void test_stop_strings(void **state) {
    (void)state;
    const char *stops[] = {"END", "\n\n"};
    const char *t = "hello E";
    pl_stop_result r = pl_stop_scan(t, strlen(t), 2, stops, 2);
    assert_false(r.found);
    assert_int_equal(r.safe_len, 6); /* "E" may start "END": held back */
    t = "hello EN";
    r = pl_stop_scan(t, strlen(t), 1, stops, 2);
    assert_int_equal(r.safe_len, 6);
    t = "hello ENDx";
    r = pl_stop_scan(t, strlen(t), 2, stops, 2);
    assert_true(r.found);
    assert_int_equal(r.match_at, 6);
    t = "a\n\nb END";
    r = pl_stop_scan(t, strlen(t), strlen(t), stops, 2);
    assert_true(r.found);
    assert_int_equal(r.match_at, 1); /* the earliest stop string wins */
    t = "no stop here";
    r = pl_stop_scan(t, strlen(t), 4, stops, 2);
    assert_false(r.found);
    assert_int_equal(r.safe_len, strlen(t));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_argmax),
        cmocka_unit_test(test_greedy),     cmocka_unit_test(test_distribution),
        cmocka_unit_test(test_masks),      cmocka_unit_test(test_mask_frequencies),
        cmocka_unit_test(test_seed_reproducible),
        cmocka_unit_test(test_penalties),  cmocka_unit_test(test_validate),
        cmocka_unit_test(test_top_logprobs), cmocka_unit_test(test_stop_strings),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
