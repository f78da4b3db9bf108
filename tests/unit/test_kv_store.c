/* Unit tests for kv/kv_store: sizes, per-layer pointers, copies between an anonymous store and a
 * file-backed one, and budgets or layouts that must be refused with a clear message. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "base/rng.h"
#include "base/status.h"
#include "kv/kv_store.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const pl_kv_layout LAYOUT = {.dtype = PL_DT_F16, .block_size = 16, .n_kv_heads = 2,
                                    .head_dim = 36, .num_blocks = 12};

static void test_sizes_and_pointers(void **state) {
    (void)state;
    const size_t bb = 2 * 2 * 16 * 36; /* f16 x heads x tokens x dims */
    assert_int_equal(pl_kv_block_bytes(&LAYOUT), bb);
    assert_int_equal(pl_kv_bytes_per_block(&LAYOUT, 3), bb * 2 * 3);
    pl_kv_store s;
    assert_int_equal(pl_kv_store_init(&s, &LAYOUT, 3, NULL), PL_OK);
    assert_int_equal(s.layer_bytes, bb * 12);
    assert_true(s.mapped_bytes >= bb * 12 * 6);
    assert_false(s.file_backed);
    /* K0 V0 K1 V1 K2 V2, back to back, disjoint, inside the mapping, zero-filled */
    char *base = s.base;
    for (int32_t layer = 0; layer < 3; layer++) {
        char *k = pl_kv_store_k(&s, layer), *v = pl_kv_store_v(&s, layer);
        assert_ptr_equal(k, base + (size_t)(2 * layer) * s.layer_bytes);
        assert_ptr_equal(v, k + s.layer_bytes);
        assert_true((uintptr_t)k % 64 == 0);
        for (size_t i = 0; i < s.layer_bytes; i += 997) assert_int_equal(k[i] | v[i], 0);
    }
    memset(base, 0x5a, s.mapped_bytes); /* the whole mapping is writable */
    pl_kv_store_destroy(&s);
    assert_null(s.base);
    pl_kv_store_destroy(&s); /* freeing twice is harmless */

    pl_kv_layout f32 = LAYOUT;
    f32.dtype = PL_DT_F32;
    assert_int_equal(pl_kv_bytes_per_block(&f32, 1), 2 * 2 * bb);

    /* The dtype sets the bytes per block, so the blocks a budget holds: per 32 values of a head
     * row f32 128 bytes, f16 and bf16 64, q8_0 34 (f16 scale + 32 int8), q4_0 18 (+ 16 bytes of
     * nibbles). 1 MiB of a 2-layer, 2-head, head_dim 64, 16-token layout: */
    static const struct { pl_dtype dt; size_t per32; int64_t blocks; } cases[] = {
        {PL_DT_F32, 128, 32}, {PL_DT_F16, 64, 64}, {PL_DT_BF16, 64, 64},
        {PL_DT_Q8_0, 34, 120}, {PL_DT_Q4_0, 18, 227}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pl_kv_layout l = {.dtype = cases[i].dt, .block_size = 16, .n_kv_heads = 2,
                          .head_dim = 64, .num_blocks = 3};
        size_t per = cases[i].per32 * 2 * 2 * 16 * 2 * 2; /* x 2 groups x heads x tokens x K,V x layers */
        assert_int_equal(pl_kv_bytes_per_block(&l, 2), per);
        assert_int_equal((1 << 20) / per, cases[i].blocks);
        assert_int_equal(pl_kv_store_init(&s, &l, 2, NULL), PL_OK);
        assert_int_equal(s.layer_bytes, per / 4 * 3);
        pl_kv_store_destroy(&s);
    }
}

static void fill(pl_kv_store *s, pl_rng *rng) {
    unsigned char *p = s->base;
    for (size_t i = 0; i < s->mapped_bytes; i++) p[i] = (unsigned char)pl_rng_next(rng);
}

static char dir[] = "/tmp/pl_kv_store_XXXXXX"; /* removed by the teardown even on failure */
static char path[256];

/* Swap out: anonymous -> file, swap in: file -> anonymous, in every layer, K and V. */
static void test_copy_anon_file(void **state) {
    (void)state;
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/swap.bin", dir);

    pl_kv_layout small = LAYOUT;
    small.num_blocks = 5;
    pl_kv_store gpu, swap;
    assert_int_equal(pl_kv_store_init(&gpu, &LAYOUT, 3, NULL), PL_OK);
    assert_int_equal(pl_kv_store_init(&swap, &small, 3, path), PL_OK);
    assert_true(swap.file_backed);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal((size_t)st.st_size, swap.mapped_bytes);

    pl_rng rng;
    pl_rng_seed(&rng, 3);
    fill(&gpu, &rng);
    const size_t bb = pl_kv_block_bytes(&LAYOUT);
    unsigned char *snap = malloc(gpu.mapped_bytes);
    assert_non_null(snap);
    memcpy(snap, gpu.base, gpu.mapped_bytes);

    int32_t out_src[] = {11, 0, 6}, out_dst[] = {4, 1, 0};
    pl_kv_store_copy(&gpu, &swap, out_src, out_dst, 3);
    for (int32_t layer = 0; layer < 3; layer++)
        for (int i = 0; i < 3; i++) {
            assert_memory_equal((char *)pl_kv_store_k(&swap, layer) + (size_t)out_dst[i] * bb,
                                (char *)pl_kv_store_k(&gpu, layer) + (size_t)out_src[i] * bb, bb);
            assert_memory_equal((char *)pl_kv_store_v(&swap, layer) + (size_t)out_dst[i] * bb,
                                (char *)pl_kv_store_v(&gpu, layer) + (size_t)out_src[i] * bb, bb);
        }
    /* the file really holds the bytes: read layer 1's V of swap block 4 through the file */
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    unsigned char *buf = malloc(bb);
    assert_non_null(buf);
    assert_int_equal(fseek(f, (long)(3 * swap.layer_bytes + 4 * bb), SEEK_SET), 0);
    assert_int_equal(fread(buf, 1, bb, f), bb);
    fclose(f);
    assert_memory_equal(buf, (char *)pl_kv_store_v(&gpu, 1) + 11 * bb, bb);
    free(buf);

    /* swap back in to other blocks; nothing else in the primary store changes */
    int32_t in_src[] = {4, 1}, in_dst[] = {2, 9};
    pl_kv_store_copy(&swap, &gpu, in_src, in_dst, 2);
    for (int32_t layer = 0; layer < 3; layer++)
        for (int32_t b = 0; b < 12; b++) {
            int32_t from = b == 2 ? 11 : b == 9 ? 0 : b;
            for (int kv = 0; kv < 2; kv++) {
                size_t arr = (size_t)(2 * layer + kv) * gpu.layer_bytes;
                assert_memory_equal((char *)gpu.base + arr + (size_t)b * bb,
                                    snap + arr + (size_t)from * bb, bb);
            }
        }
    free(snap);
    pl_kv_store_destroy(&gpu);
    pl_kv_store_destroy(&swap);
    assert_int_equal(unlink(path), 0); /* the store leaves its file to whoever named it */
}

/* Two pools (layer kinds): tensors 0 and 2 of the window kind with 5 blocks, tensor 1 full with
 * 12, each its own shape; a copy list naming window blocks after the full ones copies each pair
 * in its kind's tensors only, also between stores of other counts (swap: 4 full, 3 window). */
static void test_kinds(void **state) {
    (void)state;
    static const uint8_t kinds[3] = {1, 0, 1};
    static const pl_kv_shape shapes[3] = {{2, 16}, {1, 32}, {2, 16}};
    pl_kv_layout l = {.dtype = PL_DT_F32, .block_size = 4, .n_kv_heads = 2, .head_dim = 16,
                      .num_blocks = 12};
    pl_kv_store a, b;
    assert_int_equal(pl_kv_store_init_kinds(&a, &l, 3, shapes, kinds, 5, NULL), PL_OK);
    const size_t bb = 4 * 2 * 16 * 4; /* every tensor: 4 tokens x 32 floats */
    assert_int_equal(a.mapped_bytes, 2 * bb * (5 + 12 + 5));
    for (int32_t t = 0; t < 3; t++) {
        pl_kv_layout lt = pl_kv_store_layer_layout(&a, t);
        assert_int_equal(lt.num_blocks, kinds[t] ? 5 : 12);
        assert_int_equal(lt.n_kv_heads, shapes[t].n_kv_heads);
        assert_int_equal((char *)pl_kv_store_v(&a, t) - (char *)pl_kv_store_k(&a, t),
                         (ptrdiff_t)(bb * (size_t)lt.num_blocks));
    }
    assert_ptr_equal(pl_kv_store_k(&a, 1), (char *)pl_kv_store_v(&a, 0) + 5 * bb);
    pl_kv_layout sl = l;
    sl.num_blocks = 4;
    assert_int_equal(pl_kv_store_init_kinds(&b, &sl, 3, shapes, kinds, 0, NULL),
                     PL_ERR_INVALID_ARG); /* a window pool of no block */
    assert_null(b.base);
    assert_int_equal(pl_kv_store_init_kinds(&b, &sl, 3, shapes, kinds, 3, NULL), PL_OK);
    pl_rng rng;
    pl_rng_seed(&rng, 9);
    fill(&a, &rng);
    /* full 11 -> 3, window 4 -> 2 (named 12 + 4 -> 4 + 2), full 0 -> 0 */
    int32_t src[] = {11, 12 + 4, 0}, dst[] = {3, 4 + 2, 0};
    pl_kv_store_copy(&a, &b, src, dst, 3);
    for (int32_t t = 0; t < 3; t++) {
        char *ka = pl_kv_store_k(&a, t), *va = pl_kv_store_v(&a, t);
        char *kb = pl_kv_store_k(&b, t), *vb = pl_kv_store_v(&b, t);
        const int32_t nb = kinds[t] ? 3 : 4;
        for (int32_t blk = 0; blk < nb; blk++) {
            int32_t from = kinds[t] ? (blk == 2 ? 4 : -1) : (blk == 3 ? 11 : blk == 0 ? 0 : -1);
            for (size_t i = 0; i < bb; i++) {
                char wk = from < 0 ? 0 : ka[(size_t)from * bb + i];
                char wv = from < 0 ? 0 : va[(size_t)from * bb + i];
                if (kb[(size_t)blk * bb + i] != wk || vb[(size_t)blk * bb + i] != wv)
                    fail_msg("tensor %d block %d byte %zu: not block %d's", (int)t, (int)blk, i,
                             (int)from);
            }
        }
    }
    pl_kv_store_destroy(&a);
    pl_kv_store_destroy(&b);
}

static int cleanup(void **state) {
    (void)state;
    if (path[0]) unlink(path);
    if (strcmp(dir + strlen(dir) - 6, "XXXXXX") != 0) rmdir(dir);
    return 0;
}

static void expect_fail(const pl_kv_layout *l, int32_t n_layers, const char *path, pl_status st,
                        const char *needle) {
    pl_kv_store s;
    pl_clear_error();
    assert_int_equal(pl_kv_store_init(&s, l, n_layers, path), st);
    assert_null(s.base);
    if (!strstr(pl_last_error(), needle)) fprintf(stderr, "message: %s\n", pl_last_error());
    assert_non_null(strstr(pl_last_error(), needle));
}

static void test_bad_budgets(void **state) {
    (void)state;
    pl_kv_layout l = LAYOUT;
    l.num_blocks = INT64_MAX / 2; /* the byte count overflows */
    expect_fail(&l, 32, NULL, PL_ERR_NOMEM, "overflows");
    l.num_blocks = (int64_t)1 << 36; /* 2^36 x 27 KiB: ~1.8 PB, more than any address space */
    expect_fail(&l, 4, NULL, PL_ERR_NOMEM, "KV cache budget of");
    expect_fail(&l, 4, "/nonexistent-dir/swap.bin", PL_ERR_IO, "/nonexistent-dir/swap.bin");

    l = LAYOUT;
    l.head_dim = 30;
    expect_fail(&l, 2, NULL, PL_ERR_UNSUPPORTED, "head_dim");
    l = LAYOUT;
    l.num_blocks = 0;
    expect_fail(&l, 2, NULL, PL_ERR_INVALID_ARG, "num_blocks");
    l = LAYOUT;
    l.dtype = PL_DT_Q4_K;
    expect_fail(&l, 2, NULL, PL_ERR_UNSUPPORTED, "dtype must be f32, f16, bf16, q8_0 or q4_0");
    l.dtype = PL_DT_Q8_0; /* head_dim 36: the groups of 32 do not fit, as llama.cpp refuses */
    expect_fail(&l, 2, NULL, PL_ERR_UNSUPPORTED, "KV cache dtype q8_0 with head_dim 36");
    l.dtype = PL_DT_Q4_0;
    expect_fail(&l, 2, NULL, PL_ERR_UNSUPPORTED, "multiple of 32");
    expect_fail(&LAYOUT, 0, NULL, PL_ERR_INVALID_ARG, "n_layers");
}

/* A head-major store (the contiguous and vAttention layouts) reads each sequence as one array
 * from its first block: a step's K/V land there (the paged order with one block of all slots),
 * and a sequence whose blocks are not one run is an error naming it, not a wrong read. */
static void test_head_major_attention(void **state) {
    (void)state;
    pl_kv_layout l = {.dtype = PL_DT_F32, .block_size = 4, .n_kv_heads = 2, .head_dim = 4,
                      .num_blocks = 6};
    pl_kv_store s;
    assert_int_equal(pl_kv_store_init(&s, &l, 1, NULL), PL_OK);
    s.head_major = 1;
    float k[8], v[8], q[4 * 4] = {0}, out[4 * 4];
    for (int i = 0; i < 8; i++) k[i] = (float)i, v[i] = (float)(10 + i);
    const int64_t slot = 2 * 4 + 1; /* block 2, offset 1: slot 9 */
    int32_t seq_start[2] = {0, 1}, ctx = 6, btab[2] = {2, 3};
    pl_attn_args a = {.q = q, .out = out, .n_heads = 4, .scale = 0.5f, .n_seqs = 1,
                      .seq_start = seq_start, .context_lens = &ctx, .block_tables = btab,
                      .max_blocks = 2};
    assert_int_equal(pl_kv_store_attention(NULL, &s, 0, k, v, &slot, 1, &a), PL_OK);
    const float *kc = pl_kv_store_k(&s, 0), *vc = pl_kv_store_v(&s, 0);
    for (int h = 0; h < 2; h++) /* head h's row of slot 9: (h x 24 + 9) x 4 floats */
        for (int d = 0; d < 4; d++) {
            assert_true(kc[(h * 24 + 9) * 4 + d] == k[h * 4 + d]);
            assert_true(vc[(h * 24 + 9) * 4 + d] == v[h * 4 + d]);
        }
    btab[1] = 4; /* blocks 2 and 4: not one run */
    assert_int_equal(pl_kv_store_attention(NULL, &s, 0, k, v, &slot, 1, &a), PL_ERR_INTERNAL);
    assert_non_null(strstr(pl_last_error(), "sequence 0's 2 blocks are not one run"));
    pl_kv_store_destroy(&s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sizes_and_pointers),
        cmocka_unit_test(test_copy_anon_file),
        cmocka_unit_test(test_kinds),
        cmocka_unit_test(test_bad_budgets),
        cmocka_unit_test(test_head_major_attention),
    };
    return cmocka_run_group_tests(tests, NULL, cleanup);
}
