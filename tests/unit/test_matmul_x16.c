/* Unit tests for the x16 layouts of f16, bf16, q8_0, the 4- and 5-bit types, the K-quants and
 * mxfp4 (kernels/matmul_x16*.c, issue 22 item 3; mxfp4: issue 34; bf16: issue 35):
 *  - every x16 kernel (scalar, AVX-512 VNNI tiles, AMX batches where the machine has AMX) gives
 *    bitwise the same value for every output, whatever the batch size and thread count: B = 1
 *    calls on one thread with the scalar kernel are the reference;
 *  - the values agree with the exact product of the quantized weights and activations
 *    (pl_matmul_ref on the rows layout, in doubles) to float rounding;
 *  - pl_matmul_multi on repacked weights equals pl_matmul; repacking keeps the size and refuses
 *    what has no x16 layout. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "base/threadpool.h"
#include "kernels/cpu.h"
#include "kernels/matmul.h"
#include "kernels/matmul_kernels.h" /* pl_x16_f16_wide */
#include "kernels/quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "isa_coverage.h"

static float rnd(uint64_t *s) {
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((int64_t)(*s >> 40) - (1 << 23)) / (float)(1 << 23);
}

typedef struct {
    pl_dtype type;
    int64_t rows, cols;
    uint8_t *rowsw;  /* GGUF rows */
    uint8_t *packed; /* x16 */
    pl_weight w, wp;
} qweight;

static void make_typed(qweight *q, pl_dtype type, int64_t rows, int64_t cols, uint64_t *s) {
    q->type = type;
    q->rows = rows;
    q->cols = cols;
    size_t ws = pl_dtype_row_size(type, cols), bytes = (size_t)rows * ws;
    q->rowsw = malloc(bytes);
    q->w = (pl_weight){.data = q->rowsw, .type = type, .rows = rows, .cols = cols};
    size_t packed = pl_matmul_repack_size(&q->w);
    /* at most 4 % more than GGUF (q3_K keeps its 6-bit scales as bytes: 114 / 110) */
    assert_true(packed >= bytes && packed <= bytes + bytes / 25);
    q->packed = aligned_alloc(64, (packed + 63) / 64 * 64);
    float *row = malloc((size_t)cols * sizeof *row);
    assert_non_null(q->rowsw);
    assert_non_null(q->packed);
    assert_non_null(row);
    for (int64_t r = 0; r < rows; r++) {
        float scale = 0.01f + (float)(r % 7); /* blocks of very different scales */
        for (int64_t c = 0; c < cols; c++) row[c] = scale * rnd(s);
        if (r % 5 == 3) row[0] = -127.0f * scale; /* a quant of -128 after rounding, or near */
        assert_int_equal(pl_quantize_row(type, row, q->rowsw + (size_t)r * ws, cols), ws);
        /* q8_0's quantizer never rounds to -128, a file may hold it: the edge of AVX2's |q| x
         * sign(q) x in vpmaddubsw (2 x 128 x 127 must not saturate) */
        if (type == PL_DT_Q8_0 && r % 5 == 3)
            ((pl_block_q8_0 *)(q->rowsw + (size_t)r * ws))[cols / PL_QK - 1].qs[r % PL_QK] = -128;
    }
    free(row);
    q->wp = q->w;
    pl_matmul_repack(&q->wp, q->packed);
    assert_int_equal(q->wp.layout, PL_WLAYOUT_X16);
    assert_ptr_equal(q->wp.data, q->packed);
}

static void make(qweight *q, int64_t rows, int64_t cols, uint64_t *s) {
    make_typed(q, PL_DT_Q8_0, rows, cols, s);
}

static void drop(qweight *q) {
    free(q->rowsw);
    free(q->packed);
}

static float *inputs(int64_t B, int64_t cols, uint64_t *s) {
    float *x = malloc((size_t)(B * cols) * sizeof *x);
    assert_non_null(x);
    for (int64_t i = 0; i < B * cols; i++) x[i] = 4.0f * rnd(s);
    for (int64_t c = 0; c < cols && B > 1; c++) x[cols + c] = 0.0f; /* a zero row (d = 0) */
    return x;
}

/* The reference: scalar kernel, one activation row at a time, one thread. */
static void reference(const qweight *q, const float *x, int64_t B, float *y) {
    pl_threadpool *one = pl_threadpool_create(1);
    void *scratch = malloc(pl_matmul_scratch_size(q->type, q->cols, 1));
    assert_non_null(one);
    assert_non_null(scratch);
    pl_isa was = pl_cpu_isa();
    pl_cpu_force_isa(PL_ISA_SCALAR);
    for (int64_t b = 0; b < B; b++)
        pl_matmul(one, &q->wp, x + b * q->cols, 1, y + b * q->rows, q->rows, scratch);
    pl_cpu_force_isa(was);
    pl_threadpool_destroy(one);
    free(scratch);
}

/* pl_matmul on the repacked weight at this ISA/AMX setting equals the reference bitwise, and
 * writes nothing past the rows. */
static void check_equal(const qweight *q, const float *x, int64_t B, const float *ref, int threads,
                        const char *what) {
    const int64_t ldy = q->rows + 5;
    float *y = malloc((size_t)(B * ldy) * sizeof *y);
    void *scratch = malloc(pl_matmul_scratch_size(q->type, q->cols, B));
    pl_threadpool *tp = pl_threadpool_create(threads);
    assert_non_null(y);
    assert_non_null(scratch);
    assert_non_null(tp);
    memset(y, 0xff, (size_t)(B * ldy) * sizeof *y);
    pl_matmul(tp, &q->wp, x, B, y, ldy, scratch);
    for (int64_t b = 0; b < B; b++) {
        for (int64_t r = 0; r < q->rows; r++)
            if (memcmp(&y[b * ldy + r], &ref[b * q->rows + r], sizeof(float)) != 0)
                fail_msg("%s %s: rows %lld cols %lld B %lld threads %d: y[%lld][%lld] = %.9g, "
                         "reference %.9g", pl_dtype_name(q->type), what, (long long)q->rows, (long long)q->cols,
                         (long long)B, threads, (long long)b, (long long)r,
                         (double)y[b * ldy + r], (double)ref[b * q->rows + r]);
        for (int64_t r = q->rows; r < ldy; r++) assert_true(isnan(y[b * ldy + r]));
    }
    pl_threadpool_destroy(tp);
    free(y);
    free(scratch);
}

/* Every kernel the machine has, bitwise the scalar reference, over batch sizes around the AMX
 * tiles (16, 32) and the VNNI tiles (4), AVX2 f16's subtiles taking turns (7: 4 + 3, 12, 15,
 * 16), row counts that leave one group (16) or pairs, and 1-3 threads. */
static void agree_bitwise(pl_dtype type, const int64_t (*shapes)[2], size_t nshapes, uint64_t s) {
    static const int64_t Bs[] = {1, 2, 3, 4, 5, 7, 12, 15, 16, 17, 31, 32, 33, 48, 70};
    unsigned ran = 0;
    for (size_t i = 0; i < nshapes; i++) {
        qweight q;
        make_typed(&q, type, shapes[i][0], shapes[i][1], &s);
        for (size_t bi = 0; bi < sizeof Bs / sizeof Bs[0]; bi++) {
            int64_t B = Bs[bi];
            if (q.cols >= 2048 && B > 33 && B != 48) continue; /* short; 48: q6_K's AMX */
            float *x = inputs(B, q.cols, &s);
            float *ref = malloc((size_t)(B * q.rows) * sizeof *ref);
            assert_non_null(ref);
            reference(&q, x, B, ref);
            int threads = 1 + (int)((i + bi) % 3);
            for (int isa = 0; isa <= (int)pl_cpu_max_isa(); isa++) {
                if (!isa_level_runs(isa)) continue; /* isa_coverage.h */
                pl_cpu_force_isa((pl_isa)isa);
                isa_ran(&ran);
                pl_cpu_force_amx(0);
                check_equal(&q, x, B, ref, threads, pl_isa_name((pl_isa)isa));
                if (isa == PL_ISA_AVX512 && pl_cpu_force_amx(1))
                    check_equal(&q, x, B, ref, threads, "amx");
                /* an AVX-512 CPU without BF16 (Ice Lake): bf16's tile and activations are AVX2's */
                if (isa == PL_ISA_AVX512 && type == PL_DT_BF16 && pl_cpu_force_bf16(1)) {
                    pl_cpu_force_amx(0);
                    pl_cpu_force_bf16(0);
                    check_equal(&q, x, B, ref, threads, "avx512 without bf16");
                    pl_cpu_force_bf16(-1);
                }
            }
            pl_cpu_force_isa(pl_cpu_max_isa());
            pl_cpu_force_amx(-1);
            free(x);
            free(ref);
        }
        drop(&q);
    }
    isa_coverage_check(pl_dtype_name(type), ran);
}

/* Every kernel the machine has, bitwise the scalar reference, over batch sizes around the AMX
 * tiles (16, 32) and the VNNI tiles (4), row counts that leave one group (16) or pairs, and
 * 1-3 threads. */
static void test_kernels_agree_bitwise(void **state) {
    (void)state;
    static const int64_t shapes[][2] = {{16, 32}, {48, 64}, {32, 96}, {80, 256}, {256, 768},
                                        {64, 2048}, {16, 8192}};
    print_message("x16: max ISA %s, AMX %s\n", pl_isa_name(pl_cpu_max_isa()),
                  pl_cpu_force_amx(1) ? "yes" : "no");
    pl_cpu_force_amx(-1);
    agree_bitwise(PL_DT_Q8_0, shapes, sizeof shapes / sizeof shapes[0], 7);
    agree_bitwise(PL_DT_Q4_0, shapes, sizeof shapes / sizeof shapes[0], 9);
    agree_bitwise(PL_DT_IQ4_NL, shapes, sizeof shapes / sizeof shapes[0], 19);
    agree_bitwise(PL_DT_Q5_0, shapes, sizeof shapes / sizeof shapes[0], 23);
    agree_bitwise(PL_DT_Q4_1, shapes, sizeof shapes / sizeof shapes[0], 37);
    agree_bitwise(PL_DT_Q5_1, shapes, sizeof shapes / sizeof shapes[0], 41);
    agree_bitwise(PL_DT_MXFP4, shapes, sizeof shapes / sizeof shapes[0], 43);
}

/* f16 and bf16 (one accumulator per output, column by column): any column count. Each with both
 * of AVX-512's tile shapes (pl_x16_f16_wide: 4 groups x 6 rows, or 2 x 12), whichever the CPU
 * would pick; 80 and 112 rows leave the wide tile 1 and 3 groups. */
static void test_f16_agree_bitwise(void **state) {
    (void)state;
    static const int64_t shapes[][2] = {{16, 8}, {48, 100}, {32, 768}, {64, 2048}, {16, 8192},
                                        {80, 64}, {112, 33}};
    static const int64_t bf16_shapes[][2] = {{16, 8}, {48, 100}, {32, 99}, {64, 2048}, {112, 33}}; /* odd: the last column alone */
    const int wide = pl_x16_f16_wide;
    for (int w = 0; w < 2; w++) {
        pl_x16_f16_wide = w;
        print_message("f16, bf16: the AVX-512 tiles %s\n", w ? "wide (4 x 6)" : "narrow (2 x 12)");
        agree_bitwise(PL_DT_F16, shapes, sizeof shapes / sizeof shapes[0], 17);
        agree_bitwise(PL_DT_BF16, bf16_shapes, sizeof bf16_shapes / sizeof bf16_shapes[0], 43);
    }
    pl_x16_f16_wide = wide;
}

/* An AVX-512 CPU without AVX512_BF16 (Cascade Lake, Ice Lake, Tiger Lake: VNNI, no BF16) runs the
 * AVX-512 level, and there every choice that would take vdpbf16ps or vcvtneps2bf16 (the only
 * BF16 instructions in the library: tests/e2e/test_isa_isolation.sh) takes AVX2's instead:
 * pl_cpu_force_bf16(0) makes this CPU such a CPU for the choices, and the kernel and activation
 * picked are checked here (their results: agree_bitwise and test_matmul's ISA loop). */
static void test_avx512_without_bf16(void **state) {
    (void)state;
    if (pl_cpu_max_isa() != PL_ISA_AVX512 || isa_elsewhere(PL_ISA_AVX512, 0)) {
        print_message("no avx512 level here: nothing to check\n");
        return;
    }
    enum { COLS = 70 };
    float x[COLS];
    for (int c = 0; c < COLS; c++) x[c] = 0.37f * (float)(c - 20);
    uint8_t with[8 * COLS], without[8 * COLS], avx2[8 * COLS];
    pl_mm_kernel k, k2;
    pl_cpu_force_isa(PL_ISA_AVX2);
    pl_mm_x16_act_row(PL_DT_BF16, x, avx2, COLS);
    pl_cpu_force_isa(PL_ISA_AVX512);
    const int has = pl_cpu_force_bf16(1);
    for (int on = has; on >= 0; on--) {
        assert_int_equal(pl_cpu_force_bf16(on), on);
        const char *mode = on ? "avx512 with bf16" : "avx512 without bf16";
        /* rows layout: AVX-512's vdpbf16ps tile, or none (matmul.c then takes AVX2's) */
        assert_int_equal(pl_mm_kernel_avx512(PL_DT_BF16, &k), on);
        assert_int_equal(pl_mm_kernel_avx512(PL_DT_Q8_0, &k), 1); /* the rest stays AVX-512's */
        /* the activations' conversion: vcvtneps2bf16 declines without it (the scalar rounding) */
        assert_int_equal(pl_act_convert_row_avx512(PL_DT_BF16, x, with, COLS), on);
        /* x16 layout: the tile and its activations */
        pl_mm_kernel_x16(PL_DT_BF16, &k);
        if (on) {
            assert_int_equal(pl_mm_kernel_x16_bf16_avx512(&k2), 1);
        } else {
            assert_int_equal(pl_mm_kernel_x16_half_avx2(PL_DT_BF16, &k2), 1);
            pl_mm_x16_act_row(PL_DT_BF16, x, without, COLS);
            assert_memory_equal(without, avx2, COLS * sizeof(float));
        }
        if (k.fn != k2.fn) fail_msg("%s: bf16's x16 tile is not the one expected", mode);
        assert_int_equal(k.tb, k2.tb);
    }
    pl_cpu_force_bf16(-1);
    pl_cpu_force_isa(pl_cpu_max_isa());
    print_message("avx512 without bf16: AVX2's bf16 tiles (AVX512_BF16 here: %s)\n", has ? "yes" : "no");
}

/* The same for the K-quants' layouts (super-blocks of 256 columns). */
static void test_kquants_agree_bitwise(void **state) {
    (void)state;
    static const int64_t shapes[][2] = {{16, 256}, {48, 512}, {32, 768}, {64, 2048}, {16, 8192}};
    agree_bitwise(PL_DT_Q4_K, shapes, sizeof shapes / sizeof shapes[0], 11);
    agree_bitwise(PL_DT_Q6_K, shapes, sizeof shapes / sizeof shapes[0], 13);
    agree_bitwise(PL_DT_IQ4_XS, shapes, sizeof shapes / sizeof shapes[0], 29);
    agree_bitwise(PL_DT_Q2_K, shapes, sizeof shapes / sizeof shapes[0], 31);
    agree_bitwise(PL_DT_Q5_K, shapes, sizeof shapes / sizeof shapes[0], 47);
    agree_bitwise(PL_DT_Q3_K, shapes, sizeof shapes / sizeof shapes[0], 53);
}

/* The AVX2 tiles' int16 sums at their extremes: every weight at its largest (q5_K, q5_0, q5_1
 * quants 31, mxfp4 levels 12 + 12) against activations of 127 (a constant input), so a q5_K
 * unit's 8 chunks (a q5_0 / q5_1 block's) would sum to 8 x 2 x 31 x 127 = 62992 in int16 pairs
 * and an mxfp4 block's 8 to 8 x 2 x 24 x 127 = 48768: the tiles must widen them after 4. Bitwise the scalar tile at
 * every level, 1 and 4 activation rows. */
static void int16_extremes(pl_dtype type) {
    uint64_t s = 3;
    qweight q;
    make_typed(&q, type, 32, 512, &s);
    const size_t ws = pl_dtype_row_size(type, q.cols);
    float *row = malloc((size_t)q.cols * sizeof *row);
    assert_non_null(row);
    for (int64_t r = 0; r < q.rows; r++) {
        /* 1.5 x 2^k: mxfp4's e2m1 6.0 (level 12) at a power-of-two scale; q5_0 and q5_1: quant
         * 31 but for each block's first (q5_0: -16 sets the scale, 15 is then 31 - 16) */
        for (int64_t c = 0; c < q.cols; c++)
            row[c] = type == PL_DT_Q5_0   ? (c % 32 ? 15.0f : -16.0f)
                     : type == PL_DT_Q5_1 ? (c % 32 ? 31.0f : 0.0f)
                                          : 1.5f * (float)(1 << (r % 3));
        assert_int_equal(pl_quantize_row(type, row, q.rowsw + (size_t)r * ws, q.cols), ws);
    }
    free(row);
    if (type == PL_DT_Q5_K) { /* 31: both nibbles 15 and every fifth bit set */
        assert_int_equal(((const pl_block_q5_K *)q.rowsw)->qs[0], 0xFF);
        assert_int_equal(((const pl_block_q5_K *)q.rowsw)->qh[0], 0xFF);
    } else if (type == PL_DT_MXFP4) { /* level 12: index 7 in both nibbles */
        assert_int_equal(((const pl_block_mxfp4 *)q.rowsw)->qs[0], 0x77);
    } else { /* q5_0, q5_1: quant 31 (nibble 15, fifth bit set) from the block's second on */
        const uint8_t *b = q.rowsw + (type == PL_DT_Q5_0 ? offsetof(pl_block_q5_0, qs) : offsetof(pl_block_q5_1, qs));
        assert_int_equal(b[1], 0xFF);
    }
    pl_matmul_repack(&q.w, q.packed);
    q.wp = q.w;
    q.w.data = q.rowsw;
    q.w.layout = PL_WLAYOUT_ROWS;
    for (int64_t B = 1; B <= 4; B += 3) {
        float *x = malloc((size_t)(B * q.cols) * sizeof *x), *ref = malloc((size_t)(B * q.rows) * sizeof *ref);
        assert_non_null(x);
        assert_non_null(ref);
        for (int64_t i = 0; i < B * q.cols; i++) x[i] = 0.5f;
        reference(&q, x, B, ref);
        for (int isa = 0; isa <= (int)pl_cpu_max_isa(); isa++) {
            if (!isa_level_runs(isa)) continue;
            pl_cpu_force_isa((pl_isa)isa);
            check_equal(&q, x, B, ref, 1, pl_isa_name((pl_isa)isa));
        }
        pl_cpu_force_isa(pl_cpu_max_isa());
        free(x);
        free(ref);
    }
    drop(&q);
}

static void test_int16_extremes(void **state) {
    (void)state;
    int16_extremes(PL_DT_Q5_K);
    int16_extremes(PL_DT_MXFP4);
    int16_extremes(PL_DT_Q5_0);
    int16_extremes(PL_DT_Q5_1);
}

/* The values are the product of the quantized operands: against pl_matmul_ref (doubles) on the
 * rows layout, each within a few float roundings of the sum of |terms|. */
static void values_match_reference(pl_dtype type) {
    uint64_t s = 99;
    qweight q;
    make_typed(&q, type, 64, 1024, &s);
    const int64_t B = 40;
    float *x = inputs(B, q.cols, &s);
    float *y = malloc((size_t)(B * q.rows) * sizeof *y), *yr = malloc((size_t)(B * q.rows) * sizeof *yr);
    void *scratch = malloc(pl_matmul_scratch_size(type, q.cols, B));
    pl_threadpool *tp = pl_threadpool_create(2);
    assert_non_null(y);
    assert_non_null(yr);
    assert_non_null(scratch);
    assert_non_null(tp);
    pl_matmul(tp, &q.wp, x, B, y, q.rows, scratch);
    pl_matmul_ref(&q.w, x, B, yr, q.rows);
    for (int64_t i = 0; i < B * q.rows; i++) {
        double bound = 1e-5 * (fabs((double)yr[i]) + 1.0) * sqrt((double)q.cols);
        if (fabs((double)y[i] - (double)yr[i]) > bound)
            fail_msg("%s: y[%lld] = %.9g, exact %.9g", pl_dtype_name(type), (long long)i,
                     (double)y[i], (double)yr[i]);
    }
    pl_threadpool_destroy(tp);
    free(x);
    free(y);
    free(yr);
    free(scratch);
    drop(&q);
}

static void test_values_match_reference(void **state) {
    (void)state;
    values_match_reference(PL_DT_Q8_0);
    values_match_reference(PL_DT_Q4_0);
    values_match_reference(PL_DT_IQ4_NL);
    values_match_reference(PL_DT_Q5_0);
    values_match_reference(PL_DT_Q4_1);
    values_match_reference(PL_DT_Q5_1);
    values_match_reference(PL_DT_Q4_K);
    values_match_reference(PL_DT_Q6_K);
    values_match_reference(PL_DT_IQ4_XS);
    values_match_reference(PL_DT_Q2_K);
    values_match_reference(PL_DT_Q5_K);
    values_match_reference(PL_DT_Q3_K);
    values_match_reference(PL_DT_F16);
    values_match_reference(PL_DT_MXFP4);
    values_match_reference(PL_DT_BF16);
}

/* pl_matmul_multi of ws (in a pool of `threads`) equals one pl_matmul per weight on one thread. */
static void multi_agrees(const pl_weight *const *ws, const float *x, int64_t B, void *scratch,
                         pl_threadpool *tp, pl_threadpool *one_tp) {
    float *ys[3], *one[3];
    for (int i = 0; i < 3; i++) {
        ys[i] = malloc((size_t)(B * ws[i]->rows) * sizeof(float));
        one[i] = malloc((size_t)(B * ws[i]->rows) * sizeof(float));
        assert_non_null(ys[i]);
        assert_non_null(one[i]);
    }
    pl_matmul_multi(tp, ws, ys, 3, x, B, scratch);
    for (int i = 0; i < 3; i++) {
        pl_matmul(one_tp, ws[i], x, B, one[i], ws[i]->rows, scratch);
        assert_memory_equal(ys[i], one[i], (size_t)(B * ws[i]->rows) * sizeof(float));
        free(ys[i]);
        free(one[i]);
    }
}

/* Several repacked weights reading one input (Q/K/V) in one call equal separate calls on one
 * thread, at decode sizes (rows claimed and stolen across the weights) and a batch: a mix of
 * layouts falls back to them, q4_K with q6_K (Q4_K_M's Q/K/V) shares the call. */
static void test_multi(void **state) {
    (void)state;
    uint64_t s = 5;
    qweight q[3], k[3];
    make(&q[0], 64, 512, &s);
    make(&q[1], 32, 512, &s);
    make(&q[2], 32, 512, &s);
    make_typed(&k[0], PL_DT_Q4_K, 64, 512, &s);
    make_typed(&k[1], PL_DT_Q4_K, 32, 512, &s);
    make_typed(&k[2], PL_DT_Q6_K, 48, 512, &s);
    const int64_t bs[] = {1, 3, 37};
    float *x = inputs(37, 512, &s);
    size_t s0 = pl_matmul_scratch_size(PL_DT_Q8_0, 512, 37), s1 = pl_matmul_scratch_size(PL_DT_Q4_K, 512, 37);
    void *scratch = malloc(s0 > s1 ? s0 : s1);
    pl_threadpool *one = pl_threadpool_create(1);
    assert_non_null(scratch);
    assert_non_null(one);
    for (int threads = 2; threads <= 3; threads++) {
        pl_threadpool *tp = pl_threadpool_create(threads);
        assert_non_null(tp);
        for (int b = 0; b < 3; b++) {
            for (int mixed = 0; mixed <= 1; mixed++) {
                const pl_weight *ws[3] = {&q[0].wp, mixed ? &q[1].w : &q[1].wp, &q[2].wp};
                multi_agrees(ws, x, bs[b], scratch, tp, one);
            }
            const pl_weight *kw[3] = {&k[0].wp, &k[1].wp, &k[2].wp};
            multi_agrees(kw, x, bs[b], scratch, tp, one);
        }
        pl_threadpool_destroy(tp);
    }
    pl_threadpool_destroy(one);
    free(scratch);
    free(x);
    for (int i = 0; i < 3; i++) {
        drop(&q[i]);
        drop(&k[i]);
    }
}

/* Only the x16 types with rows a multiple of 16 have the layout; a repacked weight is not repacked again. */
static void test_repack_size(void **state) {
    (void)state;
    uint8_t buf[64] = {0};
    pl_weight w = {.data = buf, .type = PL_DT_Q8_0, .rows = 24, .cols = 64};
    assert_int_equal(pl_matmul_repack_size(&w), 0);
    w.rows = 32;
    assert_int_equal(pl_matmul_repack_size(&w), 32 * 2 * 34);
    w.type = PL_DT_Q4_0; /* as GGUF */
    assert_int_equal(pl_matmul_repack_size(&w), 32 * 2 * 18);
    w.type = PL_DT_IQ4_NL; /* q4_0's blocks */
    assert_int_equal(pl_matmul_repack_size(&w), 32 * 2 * 18);
    w.type = PL_DT_Q5_0; /* as GGUF */
    assert_int_equal(pl_matmul_repack_size(&w), 32 * 2 * 22);
    w.type = PL_DT_Q4_1; /* as GGUF */
    assert_int_equal(pl_matmul_repack_size(&w), 32 * 2 * 20);
    w.type = PL_DT_Q5_1; /* as GGUF */
    assert_int_equal(pl_matmul_repack_size(&w), 32 * 2 * 24);
    w.type = PL_DT_MXFP4; /* as GGUF */
    assert_int_equal(pl_matmul_repack_size(&w), 32 * 2 * 17);
    w.rows = 40;
    assert_int_equal(pl_matmul_repack_size(&w), 0);
    w.rows = 32;
    w.type = PL_DT_Q4_K; /* 144 bytes per row and super-block, as GGUF */
    w.cols = 256;
    assert_int_equal(pl_matmul_repack_size(&w), 32 * 144);
    w.type = PL_DT_Q6_K; /* as GGUF */
    assert_int_equal(pl_matmul_repack_size(&w), 32 * 210);
    w.type = PL_DT_IQ4_XS; /* 138 bytes per row and super-block (GGUF: 136) */
    assert_int_equal(pl_matmul_repack_size(&w), 32 * 138);
    w.type = PL_DT_Q2_K; /* as GGUF */
    assert_int_equal(pl_matmul_repack_size(&w), 32 * 84);
    w.type = PL_DT_Q5_K; /* as GGUF */
    assert_int_equal(pl_matmul_repack_size(&w), 32 * 176);
    w.type = PL_DT_Q3_K; /* 114 bytes per row and super-block (GGUF: 110) */
    assert_int_equal(pl_matmul_repack_size(&w), 32 * 114);
    w.type = PL_DT_Q8_K; /* no x16 layout */
    assert_int_equal(pl_matmul_repack_size(&w), 0);
    w.type = PL_DT_Q4_K;
    w.cols = 128;
    assert_int_equal(pl_matmul_repack_size(&w), 0);
    w.type = PL_DT_F16; /* as GGUF */
    assert_int_equal(pl_matmul_repack_size(&w), 32 * 128 * 2);
    w.type = PL_DT_BF16; /* f16's layout */
    assert_int_equal(pl_matmul_repack_size(&w), 32 * 128 * 2);
    w = (pl_weight){.data = buf, .type = PL_DT_Q8_0, .rows = 32, .cols = 64,
                    .layout = PL_WLAYOUT_X16};
    assert_int_equal(pl_matmul_repack_size(&w), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kernels_agree_bitwise),
        cmocka_unit_test(test_kquants_agree_bitwise),
        cmocka_unit_test(test_int16_extremes),
        cmocka_unit_test(test_f16_agree_bitwise),
        cmocka_unit_test(test_avx512_without_bf16),
        cmocka_unit_test(test_values_match_reference),
        cmocka_unit_test(test_multi),
        cmocka_unit_test(test_repack_size),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
