/* Unit tests for src/base: status messages, fp16/bf16 conversions, RNG, thread pool. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "base/fp16.h"
#include "base/idmap.h"
#include "base/rng.h"
#include "base/status.h"
#include "base/threadpool.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>

static void test_status_messages(void **state) {
    (void)state;
    pl_status st = pl_fail(PL_ERR_FORMAT, "tensor '%s': bad type %d", "x", 99);
    assert_int_equal(st, PL_ERR_FORMAT);
    pl_error_prefix("model.gguf");
    assert_string_equal(pl_last_error(), "model.gguf: tensor 'x': bad type 99");
    pl_clear_error();
    assert_string_equal(pl_last_error(), "no error");
}

static void test_fp16_roundtrip(void **state) {
    (void)state;
    /* Every finite f16 value survives f16 -> f32 -> f16. */
    for (uint32_t h = 0; h < 0x10000; h++) {
        if ((h & 0x7c00) == 0x7c00) continue;
        float f = pl_f16_to_f32((pl_f16)h);
        assert_int_equal(pl_f32_to_f16(f), h);
    }
    assert_true(pl_f16_to_f32(pl_f32_to_f16(1.0f)) == 1.0f);
    assert_true(pl_f16_to_f32(pl_f32_to_f16(65519.0f)) == 65504.0f);
    assert_int_equal(pl_f32_to_f16(65520.0f), 0x7c00); /* overflow to inf */
    /* Ties round to even: 1 + 2^-11 lies halfway between 1 and 1 + 2^-10. */
    assert_int_equal(pl_f32_to_f16(1.0f + 0x1.0p-11f), 0x3c00);
    assert_int_equal(pl_f32_to_f16(1.0f + 3 * 0x1.0p-11f), 0x3c02);
    /* Smallest subnormal and halfway below it. */
    assert_int_equal(pl_f32_to_f16(0x1.0p-24f), 1);
    assert_int_equal(pl_f32_to_f16(0x1.0p-25f), 0);
    assert_int_equal(pl_f32_to_f16(0x1.8p-25f), 1);
}

static void test_bf16(void **state) {
    (void)state;
    assert_true(pl_bf16_to_f32(pl_f32_to_bf16(1.0f)) == 1.0f);
    assert_int_equal(pl_f32_to_bf16(1.0f + 0x1.0p-8f), 0x3f80);  /* tie to even */
    assert_int_equal(pl_f32_to_bf16(1.0f + 3 * 0x1.0p-8f), 0x3f82);
    assert_true(isnan(pl_bf16_to_f32(pl_f32_to_bf16(NAN))));
}

static void test_rng(void **state) {
    (void)state;
    pl_rng a, b;
    pl_rng_seed(&a, 42);
    pl_rng_seed(&b, 42);
    for (int i = 0; i < 100; i++) assert_true(pl_rng_next(&a) == pl_rng_next(&b));
    double sum = 0;
    int counts[10] = {0};
    for (int i = 0; i < 100000; i++) {
        double u = pl_rng_uniform(&a);
        assert_true(u >= 0 && u < 1);
        sum += u;
        counts[pl_rng_below(&a, 10)]++;
    }
    assert_true(fabs(sum / 100000 - 0.5) < 0.01);
    for (int i = 0; i < 10; i++) assert_true(counts[i] > 9000 && counts[i] < 11000);
}

typedef struct {
    atomic_int calls;
    int64_t n;
    int64_t *out;
} tp_ctx;

static void tp_job(void *p, int ith, int nth) {
    tp_ctx *c = p;
    atomic_fetch_add(&c->calls, 1);
    int64_t b, e;
    pl_split_range(c->n, ith, nth, 4, &b, &e);
    for (int64_t i = b; i < e; i++) c->out[i] += i;
}

static void test_threadpool(void **state) {
    (void)state;
    int64_t out[1001];
    for (int n = 1; n <= 3; n++) {
        pl_threadpool *tp = pl_threadpool_create(n);
        assert_non_null(tp);
        memset(out, 0, sizeof out);
        tp_ctx c = {.n = 1001, .out = out};
        for (int rep = 0; rep < 200; rep++) pl_threadpool_run(tp, tp_job, &c);
        assert_int_equal(atomic_load(&c.calls), 200 * n);
        for (int i = 0; i < 1001; i++) assert_true(out[i] == 200 * (int64_t)i);
        pl_threadpool_destroy(tp);
    }
}

static void test_split_range(void **state) {
    (void)state;
    for (int64_t n = 0; n < 50; n++)
        for (int nth = 1; nth < 5; nth++) {
            int64_t next = 0;
            for (int i = 0; i < nth; i++) {
                int64_t b, e;
                pl_split_range(n, i, nth, 8, &b, &e);
                assert_true(b == next && e >= b && e <= n);
                if (e < n) assert_true(e % 8 == 0);
                next = e;
            }
            assert_true(next == n);
        }
}

/* Random puts and deletes against a shadow array: every get agrees. */
static void test_idmap(void **state) {
    (void)state;
    enum { K = 3000 };
    static void *shadow[K];
    memset(shadow, 0, sizeof shadow);
    pl_idmap m;
    pl_idmap_init(&m);
    pl_rng r;
    pl_rng_seed(&r, 5);
    size_t n = 0;
    for (int op = 0; op < 200000; op++) {
        uint64_t k = 1 + pl_rng_below(&r, K - 1);
        if (pl_rng_below(&r, 3)) {
            void *v = (void *)(uintptr_t)(op + 1);
            if (!shadow[k]) n++;
            assert_int_equal(pl_idmap_put(&m, k * 0x10000 + 7, v), 0);
            shadow[k] = v;
        } else {
            void *v = pl_idmap_del(&m, k * 0x10000 + 7);
            assert_ptr_equal(v, shadow[k]);
            if (shadow[k]) n--;
            shadow[k] = NULL;
        }
        if (op % 1000 == 0)
            for (uint64_t j = 1; j < K; j++) assert_ptr_equal(pl_idmap_get(&m, j * 0x10000 + 7), shadow[j]);
        assert_int_equal(m.n, n);
    }
    pl_idmap_destroy(&m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_status_messages), cmocka_unit_test(test_fp16_roundtrip),
        cmocka_unit_test(test_bf16),            cmocka_unit_test(test_rng),
        cmocka_unit_test(test_threadpool),      cmocka_unit_test(test_split_range),
        cmocka_unit_test(test_idmap),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
