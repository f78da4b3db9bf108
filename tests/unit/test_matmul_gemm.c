/* Unit tests for the blocked F16 GEMMs (kernels/matmul_gemm_{avx2,avx512}.c) behind pl_matmul's batches:
 * on shapes that take it (cols above its threshold, K not a multiple of its K block, a masked
 * last chunk, odd B, row counts that leave partial register tiles, 1-3 threads), every output
 * must be bitwise the decode kernel's (B = 1, one weight row at a time, a path the GEMM does not
 * touch), which is what makes a sequence's tokens independent of the batch it runs in. Runs on
 * every ISA the machine has (the scalar level checks its tiles the same way). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "base/fp16.h"
#include "base/rng.h"
#include "base/threadpool.h"
#include "kernels/cpu.h"
#include "kernels/matmul.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "isa_coverage.h"

static float rnd(uint64_t *s) {
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((int64_t)(*s >> 40) - (1 << 23)) / (float)(1 << 23);
}

/* pl_matmul of rows x cols f16 weights on B rows with `threads` threads equals, bitwise, B = 1
 * calls (which run the decode kernel), for every output. */
static void check(int64_t rows, int64_t cols, int64_t B, int threads, uint64_t seed) {
    pl_f16 *w = malloc((size_t)(rows * cols) * sizeof *w);
    float *x = malloc((size_t)(B * cols) * sizeof *x);
    const int64_t ldy = rows + 3;
    float *y = malloc((size_t)(B * ldy) * sizeof *y), *y1 = malloc((size_t)rows * sizeof *y1);
    void *scratch = malloc(pl_matmul_scratch_size(PL_DT_F16, cols, B));
    assert_non_null(w);
    assert_non_null(x);
    assert_non_null(y);
    assert_non_null(y1);
    assert_non_null(scratch);
    uint64_t s = seed;
    for (int64_t i = 0; i < rows * cols; i++) w[i] = pl_f32_to_f16(rnd(&s));
    for (int64_t i = 0; i < B * cols; i++) x[i] = 8.0f * rnd(&s);
    pl_weight wt = {.data = w, .type = PL_DT_F16, .rows = rows, .cols = cols};
    pl_threadpool *tp = pl_threadpool_create(threads), *one = pl_threadpool_create(1);
    assert_non_null(tp);
    assert_non_null(one);
    memset(y, 0xff, (size_t)(B * ldy) * sizeof *y);
    pl_matmul(tp, &wt, x, B, y, ldy, scratch);
    for (int64_t b = 0; b < B; b++) {
        pl_matmul(one, &wt, x + b * cols, 1, y1, rows, scratch);
        for (int64_t r = 0; r < rows; r++) {
            if (memcmp(&y[b * ldy + r], &y1[r], sizeof(float)) != 0)
                fail_msg("rows %lld cols %lld B %lld threads %d: y[%lld][%lld] = %.9g, decode %.9g",
                         (long long)rows, (long long)cols, (long long)B, threads, (long long)b,
                         (long long)r, (double)y[b * ldy + r], (double)y1[r]);
        }
        for (int64_t r = rows; r < ldy; r++) /* nothing written past rows */
            assert_true(isnan(y[b * ldy + r]));
    }
    pl_threadpool_destroy(tp);
    pl_threadpool_destroy(one);
    free(w);
    free(x);
    free(y);
    free(y1);
    free(scratch);
}

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

/* check() on every combination of the shapes, 1-3 threads, on every ISA the machine has. */
static void check_all(const int64_t *cols, size_t nc, const int64_t *rows, size_t nr,
                      const int64_t *Bs, size_t nb, uint64_t seed) {
    unsigned ran = 0;
    for (int isa = 0; isa <= (int)pl_cpu_max_isa(); isa++) {
        if (!isa_level_runs(isa)) continue; /* isa_coverage.h */
        pl_cpu_force_isa((pl_isa)isa);
        isa_ran(&ran);
        for (size_t c = 0; c < nc; c++)
            for (size_t r = 0; r < nr; r++)
                for (size_t b = 0; b < nb; b++)
                    check(rows[r], cols[c], Bs[b], 1 + (int)((c + r + b) % 3), seed++);
    }
    pl_cpu_force_isa(pl_cpu_max_isa());
    isa_coverage_check("gemm shapes", ran);
}

static void test_gemm_equals_decode(void **state) {
    (void)state;
    static const int64_t cols[] = {4100, 4112, 5000, 8192, 8200};
    static const int64_t rows[] = {1, 7, 9, 41};
    static const int64_t Bs[] = {4, 5, 7, 61, 64, 67};
    check_all(cols, N_OF(cols), rows, N_OF(rows), Bs, N_OF(Bs), 1);
}

/* Rows of one K block (the AVX-512 GEMM's own path up to 1024 columns: no state between
 * blocks), with masked last chunks, partial register tiles of rows and of activations, 1-3
 * threads: the same equality, on every ISA. */
static void test_one_k_block(void **state) {
    (void)state;
    static const int64_t cols[] = {16, 20, 256, 760, 768, 1008, 1020, 1024};
    static const int64_t rows[] = {1, 8, 13, 36};
    static const int64_t Bs[] = {4, 6, 32, 33, 125};
    check_all(cols, N_OF(cols), rows, N_OF(rows), Bs, N_OF(Bs), 200);
}

/* Short rows (the AVX-512 GEMM takes up to 1024 columns and from 4097, leaving those between
 * to the tiles; the AVX2 one takes all): the same equality, the borders included, on every ISA. */
static void test_small_cols_and_border(void **state) {
    (void)state;
    static const int64_t cols[] = {8, 16, 100, 1024, 1028, 1040, 2048, 4096, 4097};
    uint64_t seed = 100;
    unsigned ran = 0;
    for (int isa = 0; isa <= (int)pl_cpu_max_isa(); isa++) {
        if (!isa_level_runs(isa)) continue; /* isa_coverage.h */
        pl_cpu_force_isa((pl_isa)isa);
        isa_ran(&ran);
        for (size_t c = 0; c < sizeof cols / sizeof cols[0]; c++) check(9, cols[c], 67, 2, seed++);
    }
    pl_cpu_force_isa(pl_cpu_max_isa());
    isa_coverage_check("gemm long rows", ran);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gemm_equals_decode),
        cmocka_unit_test(test_one_k_block),
        cmocka_unit_test(test_small_cols_and_border),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
