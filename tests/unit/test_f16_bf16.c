/* Unit tests of the F16-as-BF16 weight mode (issue 35, --f16-weights bf16):
 *  - pl_f16_to_bf16 on every one of the 65536 f16 values, bitwise against a reference written
 *    from the definition (the nearest bf16 in doubles, ties to an even mantissa; +-0, +-inf and
 *    the NaNs' sign kept);
 *  - pl_matmul_f16_to_bf16 on a weight at every kernel level: the same bytes as the converted
 *    values repacked as bf16 (x16 where the level repacks bf16, else rows), and its products the
 *    same bits as that bf16 weight's, which test_matmul_x16 holds to the scalar tile;
 *  - the model loader: the mode converts every F16 matrix (not the token embeddings) at the
 *    avx512 level and is refused, naming the flag, below it; a bad PAGELLM_F16_WEIGHTS is
 *    refused naming the variable. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "base/status.h"
#include "base/threadpool.h"
#include "kernels/cpu.h"
#include "kernels/matmul.h"
#include "kernels/quant.h"
#include "model/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "isa_coverage.h"

/* The value of a bf16 / f16 from its fields, in double (no shared conversion code). */
static double bf16_value(uint16_t b) {
    int e = (b >> 7) & 0xff, m = b & 0x7f;
    double v = e ? ldexp(1.0 + m / 128.0, e - 127) : ldexp(m / 128.0, -126);
    return (b & 0x8000) ? -v : v;
}

static double f16_value(uint16_t h) {
    int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double v = e ? ldexp(1.0 + m / 1024.0, e - 15) : ldexp(m / 1024.0, -14);
    return (h & 0x8000) ? -v : v;
}

static void test_every_f16_value(void **state) {
    (void)state;
    int ties = 0, inexact = 0;
    for (uint32_t i = 0; i < 65536; i++) {
        const uint16_t h = (uint16_t)i, b = pl_f16_to_bf16(h);
        const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
        if (e == 0x1f) { /* inf stays inf, NaN stays NaN, both of the same sign */
            assert_int_equal(b & 0x8000, h & 0x8000);
            assert_int_equal((b >> 7) & 0xff, 0xff);
            if (m) assert_int_not_equal(b & 0x7f, 0);
            else assert_int_equal(b & 0x7f, 0);
            continue;
        }
        assert_int_not_equal((b >> 7) & 0xff, 0xff); /* f16's range fits: never inf */
        const double v = f16_value(h), r = bf16_value(b);
        assert_int_equal(b & 0x8000, h & 0x8000); /* -0 stays -0 */
        /* nearest: the bf16 neighbours of r (same sign) are no closer to v */
        const uint16_t lo = (uint16_t)(b - ((b & 0x7fff) ? 1 : 0)), hi = (uint16_t)(b + 1);
        const double d = fabs(r - v), dl = fabs(bf16_value(lo) - v), dh = fabs(bf16_value(hi) - v);
        if (d > dl || d > dh)
            fail_msg("f16 0x%04x (%.9g): bf16 0x%04x (%.9g) is not the nearest", h, v, b, r);
        if ((d == dl && lo != b) || d == dh) { /* a tie: the even mantissa */
            ties++;
            if (b & 1) fail_msg("f16 0x%04x (%.9g): tie not to even (0x%04x)", h, v, b);
        }
        inexact += d != 0;
    }
    /* f16's 10 mantissa bits become 7: most values round, one in eight of those is a tie */
    print_message("f16 -> bf16: %d of 65536 rounded, %d ties\n", inexact, ties);
    assert_true(ties > 1000 && inexact > 50000);
}

static float rnd(uint64_t *s) {
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((int64_t)(*s >> 40) - (1 << 23)) / (float)(1 << 23);
}

/* rows x cols f16 converted by pl_matmul_f16_to_bf16 equals the values converted one by one and
 * laid out as the level lays out bf16; its products equal that weight's bit for bit. */
static void convert_matches(int64_t rows, int64_t cols, uint64_t *s) {
    const size_t n = (size_t)(rows * cols), bytes = n * 2;
    uint16_t *f16 = malloc(bytes), *bf = malloc(bytes);
    uint8_t *conv = aligned_alloc(64, (bytes + 63) / 64 * 64), *want = aligned_alloc(64, (bytes + 63) / 64 * 64);
    assert_true(f16 && bf && conv && want);
    for (size_t i = 0; i < n; i++) f16[i] = pl_f32_to_f16(3.0f * rnd(s));
    for (size_t i = 0; i < n; i++) bf[i] = pl_f16_to_bf16(f16[i]);
    pl_weight w = {.data = f16, .type = PL_DT_F16, .rows = rows, .cols = cols};
    pl_matmul_f16_to_bf16(&w, conv);
    pl_weight b = {.data = bf, .type = PL_DT_BF16, .rows = rows, .cols = cols};
    if (pl_matmul_repack_wanted(PL_DT_BF16) && pl_matmul_repack_size(&b)) pl_matmul_repack(&b, want);
    else memcpy(want, bf, bytes);
    assert_int_equal(w.type, PL_DT_BF16);
    assert_ptr_equal(w.data, conv);
    assert_int_equal(w.layout, b.layout);
    assert_memory_equal(conv, b.layout == PL_WLAYOUT_X16 ? want : (uint8_t *)bf, bytes);
    const int64_t B = 5;
    float *x = malloc((size_t)(B * cols) * sizeof *x), *y1 = malloc((size_t)(B * rows) * sizeof *y1),
          *y2 = malloc((size_t)(B * rows) * sizeof *y2);
    void *scratch = malloc(pl_matmul_scratch_size(PL_DT_BF16, cols, B));
    pl_threadpool *tp = pl_threadpool_create(2);
    assert_true(x && y1 && y2 && scratch && tp);
    for (int64_t i = 0; i < B * cols; i++) x[i] = rnd(s);
    if (b.layout == PL_WLAYOUT_ROWS) b.data = bf;
    pl_matmul(tp, &w, x, B, y1, rows, scratch);
    pl_matmul(tp, &b, x, B, y2, rows, scratch);
    assert_memory_equal(y1, y2, (size_t)(B * rows) * sizeof *y1);
    pl_threadpool_destroy(tp);
    free(scratch);
    free(x);
    free(y1);
    free(y2);
    free(f16);
    free(bf);
    free(conv);
    free(want);
}

static void test_weight_conversion(void **state) {
    (void)state;
    uint64_t s = 5;
    unsigned ran = 0;
    for (int isa = 0; isa <= (int)pl_cpu_max_isa(); isa++) {
        if (!isa_level_runs(isa)) continue; /* isa_coverage.h */
        pl_cpu_force_isa((pl_isa)isa);
        isa_ran(&ran);
        convert_matches(64, 96, &s);  /* x16 where the level repacks bf16 */
        convert_matches(20, 33, &s);  /* rows not a multiple of 16: rows */
    }
    pl_cpu_force_isa(pl_cpu_max_isa());
    isa_coverage_check("f16 -> bf16 weights", ran);
}

/* synth-tiny-f16 with the mode: every layer matrix and the output bf16, the lookup table f16;
 * below the avx512 level the loader refuses, naming the flag. */
static void test_model_load(void **state) {
    (void)state;
    char path[1024];
    const char *shared = getenv("PL_SHARED_DIR");
    snprintf(path, sizeof path, "%s/models/synth-tiny-f16.gguf", shared ? shared : "../shared");
    unsigned ran = 0;
    for (int isa = 0; isa <= (int)pl_cpu_max_isa(); isa++) {
        if (!isa_level_runs(isa)) continue; /* isa_coverage.h */
        pl_cpu_force_isa((pl_isa)isa);
        isa_ran(&ran);
        pl_model *m = NULL;
        pl_status st = pl_model_load_with(path, 0, 1, PL_F16_WEIGHTS_BF16, &m);
        if (!pl_cpu_avx512bf16()) {
            assert_int_equal(st, PL_ERR_UNSUPPORTED);
            assert_null(m);
            assert_non_null(strstr(pl_last_error(), "--f16-weights bf16"));
            print_message("%s: refused: %s\n", pl_isa_name((pl_isa)isa), pl_last_error());
            continue;
        }
        if (st != PL_OK) fail_msg("%s: %s", path, pl_last_error());
        assert_int_equal(m->tok_embd.type, PL_DT_F16);
        assert_int_equal(m->output.type, PL_DT_BF16);
        for (int32_t l = 0; l < m->hp.n_layers; l++) {
            const pl_layer_weights *L = &m->layers[l];
            const pl_weight *ws[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
            for (int i = 0; i < 7; i++) assert_int_equal(ws[i]->type, PL_DT_BF16);
        }
        pl_model_destroy(m);
        /* without the mode the matrices stay f16 */
        assert_int_equal(pl_model_load_with(path, 0, 1, PL_F16_WEIGHTS_F16, &m), PL_OK);
        assert_int_equal(m->layers[0].wq.type, PL_DT_F16);
        pl_model_destroy(m);
    }
    /* an AVX-512 CPU without AVX512-BF16 (Ice Lake, Cascade Lake) refuses the mode too */
    if (pl_cpu_max_isa() == PL_ISA_AVX512 && !isa_elsewhere(PL_ISA_AVX512, 0)) {
        pl_cpu_force_isa(PL_ISA_AVX512);
        pl_cpu_force_bf16(0);
        pl_model *m = NULL;
        assert_int_equal(pl_model_load_with(path, 0, 1, PL_F16_WEIGHTS_BF16, &m), PL_ERR_UNSUPPORTED);
        assert_null(m);
        assert_non_null(strstr(pl_last_error(), "avx512 without AVX512-BF16"));
        pl_cpu_force_bf16(-1);
    }
    pl_cpu_force_isa(pl_cpu_max_isa());
    isa_coverage_check("f16 weights mode", ran);
    setenv("PAGELLM_F16_WEIGHTS", "bf17", 1);
    pl_model *m = NULL;
    assert_int_equal(pl_model_load_with(path, 0, 1, PL_F16_WEIGHTS_DEFAULT, &m), PL_ERR_INVALID_ARG);
    assert_non_null(strstr(pl_last_error(), "PAGELLM_F16_WEIGHTS"));
    unsetenv("PAGELLM_F16_WEIGHTS");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_f16_value),
        cmocka_unit_test(test_weight_conversion),
        cmocka_unit_test(test_model_load),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
