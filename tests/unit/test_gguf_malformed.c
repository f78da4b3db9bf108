/* Unit tests for src/gguf on malformed files made from good ones: each must fail with a
 * specific status and a message naming the problem, and never read out of bounds (run under
 * ASan); plus random mutations of a small file (a seeded fuzz pass). */
#include "gguf_test_util.h"

#include "base/rng.h"

/* ---- malformed files ---- */

static void test_bad_header(void **state) {
    (void)state;
    size_t n;
    uint8_t *b = slurp(STORIES, &n);
    expect_bad(b, 0, PL_ERR_FORMAT, "file is empty");
    expect_bad("GGU", 3, PL_ERR_FORMAT, "not a GGUF file");
    expect_bad("PK\x03\x04 zip data here", 19, PL_ERR_FORMAT,
               "not a GGUF file (magic is 'PK\\x03\\x04', expected 'GGUF')");
    uint8_t *c = malloc(n);
    memcpy(c, b, n);
    put32(c + 4, 1);
    expect_bad(c, n, PL_ERR_UNSUPPORTED, "GGUF version 1 is not supported");
    put32(c + 4, 99);
    expect_bad(c, n, PL_ERR_UNSUPPORTED, "version 99");
    memcpy(c, b, n);
    put64(c + 16, 1ULL << 62);
    expect_bad(c, n, PL_ERR_FORMAT, "metadata count 4611686018427387904 exceeds the file");
    memcpy(c, b, n);
    put64(c + 8, 1ULL << 62);
    expect_bad(c, n, PL_ERR_FORMAT, "tensor count");
    memcpy(c, b, n);
    put64(c + 24, 0xffffffffULL); /* length of the first key */
    expect_bad(c, n, PL_ERR_FORMAT, "key length 4294967295 exceeds the file");
    memcpy(c, b, n);
    put64(c + 24, 0); /* empty first key */
    expect_bad(c, n, PL_ERR_FORMAT, "key is empty");
    free(c);
    free(b);
}

static void test_truncated(void **state) {
    (void)state;
    size_t n;
    uint8_t *b = slurp(STORIES, &n);
    pl_gguf *g = open_ok(STORIES);
    size_t data = pl_gguf_data_offset(g), end = 0;
    for (int64_t i = 0; i < pl_gguf_n_tensors(g); i++) {
        const pl_gguf_tensor *t = pl_gguf_tensor_at(g, i);
        if (data + t->offset + t->nbytes > end) end = data + t->offset + t->nbytes;
    }
    pl_gguf_close(g);
    int cases = 0;
    for (size_t len = 1; len < end; len += len < 64 ? 1 : len < data ? 37 : 50021) {
        expect_bad(b, len, PL_ERR_FORMAT, len < 4 ? "magic" : "end of the file");
        cases++;
    }
    expect_bad(b, end - 1, PL_ERR_FORMAT, "beyond the end of the file");
    assert_true(cases > 400);
    free(b);
}

static void test_bad_values(void **state) {
    (void)state;
    size_t n;
    uint8_t *b = slurp(STORIES, &n), *c = malloc(n);
    size_t tok = find_gguf_str(b, n, 24, "tokenizer.ggml.tokens");
    size_t arr = tok + 8 + strlen("tokenizer.ggml.tokens") + 4; /* after the value type */
    /* string 17 of the tokens: walk 17 strings from the first. */
    size_t s = arr + 12;
    for (int i = 0; i < 17; i++) s += 8 + get64(b + s);
    memcpy(c, b, n);
    put64(c + s, 0xffffffffULL);
    expect_bad(c, n, PL_ERR_FORMAT,
               "metadata key 'tokenizer.ggml.tokens': string 17 length 4294967295 exceeds the file");
    memcpy(c, b, n);
    put64(c + arr + 4, 1ULL << 62);
    expect_bad(c, n, PL_ERR_FORMAT, "array length");
    memcpy(c, b, n);
    put32(c + arr, 13); /* element type */
    expect_bad(c, n, PL_ERR_FORMAT, "not a GGUF value type");
    memcpy(c, b, n);
    put32(c + arr - 4, 42); /* value type */
    expect_bad(c, n, PL_ERR_FORMAT, "value type 42");
    /* float array length 2^62 */
    size_t sc = find_gguf_str(b, n, 24, "tokenizer.ggml.scores") + 8 + 21 + 4;
    memcpy(c, b, n);
    put64(c + sc + 4, 1ULL << 62);
    expect_bad(c, n, PL_ERR_FORMAT, "array length 4611686018427387904 exceeds the file");
    /* Duplicate key: rename general.name (12 bytes) to general.arch... no: make two equal
     * keys of the same length by renaming tokenizer.ggml.scores to tokenizer.ggml.tokens. */
    memcpy(c, b, n);
    memcpy(c + sc - 4 - 21, "tokenizer.ggml.tokens", 21);
    expect_bad(c, n, PL_ERR_FORMAT, "duplicate key");
    free(c);
    free(b);

    /* A bool that is not 0/1; alignment 0, 3 and of the wrong type; deep nesting. */
    uint8_t two = 2, a0[4] = {0}, a3[4] = {3}, a64[8] = {64};
    struct {
        const char *key;
        pl_gguf_type type;
        const void *v;
        size_t len;
        const char *word;
    } cases[] = {
        {"x.bool", PL_GGUF_BOOL, &two, 1, "bool 0 has value 2"},
        {"general.alignment", PL_GGUF_UINT32, a0, 4, "alignment must be a power of two"},
        {"general.alignment", PL_GGUF_UINT32, a3, 4, "'general.alignment' is 3"},
        {"general.alignment", PL_GGUF_UINT64, a64, 8, "has type u64, expected u32"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pl_gguf_writer *w = pl_gguf_writer_create();
        assert_int_equal(pl_gguf_writer_add_raw(w, cases[i].key, cases[i].type, cases[i].v,
                                                cases[i].len),
                         PL_OK);
        const char *p = tmp_path();
        assert_int_equal(pl_gguf_writer_write(w, p), PL_OK);
        pl_gguf_writer_destroy(w);
        size_t m;
        uint8_t *f = slurp(p, &m);
        expect_bad(f, m, PL_ERR_FORMAT, cases[i].word);
        free(f);
    }
    static enc deep;
    deep.n = 0;
    for (int i = 0; i < 300; i++) e32(&deep, PL_GGUF_ARRAY), e64(&deep, 1);
    e32(&deep, PL_GGUF_UINT8), e64(&deep, 0);
    pl_gguf_writer *w = pl_gguf_writer_create();
    assert_int_equal(pl_gguf_writer_add_raw(w, "deep", PL_GGUF_ARRAY, deep.b, deep.n), PL_OK);
    const char *p = tmp_path();
    assert_int_equal(pl_gguf_writer_write(w, p), PL_OK);
    pl_gguf_writer_destroy(w);
    size_t m;
    uint8_t *f = slurp(p, &m);
    expect_bad(f, m, PL_ERR_FORMAT, "nested");
    free(f);
}

static void test_bad_tensors(void **state) {
    (void)state;
    size_t n;
    uint8_t *b = slurp(STORIES, &n), *c = malloc(n);
    pl_gguf *g = open_ok(STORIES);
    size_t kv_end = 0; /* the tensor table starts after the last value */
    for (int64_t i = 0; i < pl_gguf_n_kv(g); i++) {
        size_t len;
        const uint8_t *r = pl_gguf_value_raw(g, i, &len);
        const pl_gguf_tensor *t0 = pl_gguf_tensor_at(g, 0);
        const uint8_t *base = (const uint8_t *)t0->data - t0->offset - pl_gguf_data_offset(g);
        if ((size_t)(r - base) + len > kv_end) kv_end = (size_t)(r - base) + len;
    }
    pl_gguf_close(g);
    /* Tensor 1 is output_norm.weight: {64}, f32. Tensor 2 is output.weight: {64, 512}. */
    size_t t1 = find_gguf_str(b, n, kv_end, "output_norm.weight");
    size_t nd1 = t1 + 8 + 18, ne1 = nd1 + 4, ty1 = ne1 + 8, off1 = ty1 + 4;
    size_t t2 = find_gguf_str(b, n, kv_end, "output.weight");
    size_t ne2 = t2 + 8 + 13 + 4;
    struct {
        size_t at;
        int bytes;
        uint64_t v;
        pl_status st;
        const char *word;
    } cases[] = {
        {nd1, 4, 0, PL_ERR_FORMAT, "n_dims is 0"},
        {nd1, 4, 5, PL_ERR_FORMAT, "n_dims is 5"},
        {ne1, 8, 0, PL_ERR_FORMAT, "tensor 1 'output_norm.weight': dimension 0 is 0"},
        {ne1, 8, 1ULL << 63, PL_ERR_FORMAT, "dimension 0"},
        {ne2, 8, 1ULL << 40, PL_ERR_FORMAT, "beyond the end of the file"}, /* 2^51 bytes */
        {ty1, 4, 4, PL_ERR_FORMAT, "'output_norm.weight': unknown tensor type id 4"},
        {ty1, 4, 200, PL_ERR_FORMAT, "unknown tensor type id 200"},
        {ty1, 4, PL_DT_Q4_K, PL_ERR_FORMAT, "not a multiple of the block size 256"},
        {off1, 8, 1ULL << 40, PL_ERR_FORMAT, "beyond the end of the file"},
        {off1, 8, UINT64_MAX - 31, PL_ERR_FORMAT, "beyond the end of the file"},
        {off1, 8, 131072 + 4, PL_ERR_FORMAT, "not a multiple of the alignment 32"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        memcpy(c, b, n);
        if (cases[i].bytes == 4) put32(c + cases[i].at, (uint32_t)cases[i].v);
        else put64(c + cases[i].at, cases[i].v);
        expect_bad(c, n, cases[i].st, cases[i].word);
    }
    /* Two tensors named blk.0.attn_q.weight. */
    memcpy(c, b, n);
    size_t k0 = find_gguf_str(b, n, kv_end, "blk.0.attn_k.weight");
    memcpy(c + k0 + 8, "blk.0.attn_q.weight", 19);
    expect_bad(c, n, PL_ERR_FORMAT, "'blk.0.attn_q.weight': duplicate tensor name");
    /* ne = {2^31, 2^31}: 2^62 elements fit int64, 2^64 bytes do not fit size_t. */
    memcpy(c, b, n);
    put64(c + ne2, 1ULL << 31);
    put64(c + ne2 + 8, 1ULL << 31);
    expect_bad(c, n, PL_ERR_FORMAT, "byte size overflows");
    /* ne = {2^40, 2^40}: the element count overflows. */
    put64(c + ne2, 1ULL << 40);
    put64(c + ne2 + 8, 1ULL << 40);
    expect_bad(c, n, PL_ERR_FORMAT, "element count overflows");
    free(c);
    free(b);
}

static void test_io_errors(void **state) {
    (void)state;
    pl_gguf *g = (pl_gguf *)1;
    assert_int_equal(pl_gguf_open("/nonexistent/model.gguf", &g), PL_ERR_IO);
    assert_null(g);
    assert_non_null(strstr(pl_last_error(), "/nonexistent/model.gguf: cannot open"));
    assert_int_equal(pl_gguf_open(tmpdir, &g), PL_ERR_IO);
    assert_non_null(strstr(pl_last_error(), "directory"));
}

/* ---- random mutations ---- */

/* Touches every value and tensor of an opened file (ASan checks the reads). */
static uint64_t walk_arr(const pl_gguf_arr *a, int depth) {
    uint64_t h = a->count;
    for (uint64_t i = 0; i < a->count && i < 64; i++) {
        if (a->type == PL_GGUF_STRING) {
            pl_gguf_str s = pl_gguf_arr_str(a, i);
            for (uint64_t k = 0; k < s.len; k++) h += (uint8_t)s.ptr[k];
        } else if (a->type == PL_GGUF_ARRAY) {
            pl_gguf_arr c = pl_gguf_arr_arr(a, i);
            h += walk_arr(&c, depth + 1);
        } else if (a->type == PL_GGUF_FLOAT32 || a->type == PL_GGUF_FLOAT64) {
            h += pl_gguf_arr_float(a, i) > 0;
        } else {
            h += (uint64_t)pl_gguf_arr_int(a, i);
        }
    }
    return h;
}

static uint64_t walk(const pl_gguf *g) {
    uint64_t h = 0;
    for (int64_t i = 0; i < pl_gguf_n_kv(g); i++) {
        pl_gguf_str k = pl_gguf_key_at(g, i), s;
        assert_true(k.len > 0);
        char *key = pl_gguf_str_dup(k);
        assert_non_null(key);
        assert_int_equal(pl_gguf_find_key(g, key), i);
        free(key);
        int64_t v;
        double d;
        pl_gguf_arr a;
        if (pl_gguf_value_int(g, i, &v) == PL_OK) h += (uint64_t)v;
        else if (pl_gguf_value_float(g, i, &d) == PL_OK) h += d > 0;
        else if (pl_gguf_value_str(g, i, &s) == PL_OK) h += s.len ? (uint8_t)s.ptr[s.len - 1] : 0;
        else if (pl_gguf_value_arr(g, i, &a) == PL_OK) h += walk_arr(&a, 0);
    }
    for (int64_t i = 0; i < pl_gguf_n_tensors(g); i++) {
        const pl_gguf_tensor *t = pl_gguf_tensor_at(g, i);
        assert_ptr_equal(pl_gguf_find_tensor(g, t->name), t);
        assert_true(t->offset + t->nbytes + pl_gguf_data_offset(g) <= pl_gguf_file_size(g));
        const uint8_t *p = t->data;
        h += p[0] + p[t->nbytes - 1];
    }
    return h;
}

static void test_fuzz(void **state) {
    (void)state;
    float f[64] = {0};
    uint8_t q8[34 * 2] = {0};
    int64_t ne_a[2] = {8, 2}, ne_b[2] = {32, 2}, ne_c[1] = {4};
    const char *toks[] = {"<unk>", "<s>", "</s>", "a", "bb", "ccc", "\xe2\x96\x81the"};
    int32_t types[7] = {2, 3, 3, 1, 1, 1, 1};
    enc nest = {0};
    e32(&nest, PL_GGUF_ARRAY), e64(&nest, 2);
    e32(&nest, PL_GGUF_STRING), e64(&nest, 2), estr(&nest, "x"), estr(&nest, "yz");
    e32(&nest, PL_GGUF_UINT16), e64(&nest, 3), e32(&nest, 0x00020001), e32(&nest, 3);
    nest.n -= 2; /* three u16 = 6 bytes */
    pl_gguf_writer *w = pl_gguf_writer_create();
    assert_int_equal(pl_gguf_writer_add_str(w, "general.architecture", "llama"), PL_OK);
    assert_int_equal(pl_gguf_writer_add_u32(w, "llama.block_count", 1), PL_OK);
    assert_int_equal(pl_gguf_writer_add_f32(w, "llama.eps", 1e-5f), PL_OK);
    assert_int_equal(pl_gguf_writer_add_bool(w, "x.flag", 1), PL_OK);
    assert_int_equal(pl_gguf_writer_add_str_arr(w, "tokenizer.ggml.tokens", toks, 7), PL_OK);
    assert_int_equal(pl_gguf_writer_add_arr(w, "tokenizer.ggml.token_type", PL_GGUF_INT32, types, 7),
                     PL_OK);
    assert_int_equal(pl_gguf_writer_add_raw(w, "x.nested", PL_GGUF_ARRAY, nest.b, nest.n), PL_OK);
    assert_int_equal(pl_gguf_writer_add_tensor(w, "a", PL_DT_F32, 2, ne_a, f), PL_OK);
    assert_int_equal(pl_gguf_writer_add_tensor(w, "b", PL_DT_Q8_0, 2, ne_b, q8), PL_OK);
    assert_int_equal(pl_gguf_writer_add_tensor(w, "c", PL_DT_F16, 1, ne_c, f), PL_OK);
    char good[128];
    snprintf(good, sizeof good, "%s", tmp_path());
    assert_int_equal(pl_gguf_writer_write(w, good), PL_OK);
    pl_gguf_writer_destroy(w);
    size_t n;
    uint8_t *b = slurp(good, &n), *c = malloc(n);
    pl_gguf *g = open_ok(good);
    size_t head = pl_gguf_data_offset(g); /* mutate the header, metadata and tensor table */
    walk(g);
    pl_gguf_close(g);

    char path[128];
    snprintf(path, sizeof path, "%s", tmp_path());
    static const uint64_t interesting[] = {0, 1, 2, 3, 4, 5, 9, 12, 13, 31, 32, 255, 0xffffffff,
                                           1ULL << 32, 1ULL << 62, UINT64_MAX, UINT64_MAX - 31};
    pl_rng rng;
    pl_rng_seed(&rng, 1234);
    int n_ok = 0, n_bad = 0;
    for (int it = 0; it < 3000; it++) {
        memcpy(c, b, n);
        size_t len = n;
        int muts = 1 + (int)pl_rng_below(&rng, 3);
        for (int m = 0; m < muts; m++) {
            size_t at = (size_t)pl_rng_below(&rng, head);
            switch (pl_rng_below(&rng, 4)) {
            case 0: c[at] = (uint8_t)pl_rng_next(&rng); break;
            case 1: c[at] ^= (uint8_t)(1u << pl_rng_below(&rng, 8)); break;
            case 2:
                if (at + 8 <= n)
                    put64(c + at, interesting[pl_rng_below(&rng, sizeof interesting / 8)]);
                break;
            default:
                if (at + 4 <= n)
                    put32(c + at, (uint32_t)interesting[pl_rng_below(&rng, sizeof interesting / 8)]);
            }
        }
        if (pl_rng_below(&rng, 8) == 0) len = (size_t)pl_rng_below(&rng, n + 1);
        FILE *fp = fopen(path, "wb");
        assert_non_null(fp);
        assert_int_equal(fwrite(c, 1, len, fp), len);
        fclose(fp);
        pl_status st = pl_gguf_open(path, &g);
        if (st == PL_OK) {
            walk(g);
            pl_gguf_close(g);
            n_ok++;
        } else {
            if (st != PL_ERR_FORMAT && st != PL_ERR_UNSUPPORTED)
                print_error("iteration %d: %s: %s\n", it, pl_status_name(st), pl_last_error());
            assert_true(st == PL_ERR_FORMAT || st == PL_ERR_UNSUPPORTED);
            assert_null(g);
            assert_int_equal(strncmp(pl_last_error(), path, strlen(path)), 0);
            assert_null(strchr(pl_last_error(), '\n'));
            n_bad++;
        }
    }
    assert_true(n_ok > 100 && n_bad > 1000); /* both paths were exercised */
    free(c);
    free(b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_header),
        cmocka_unit_test(test_truncated),
        cmocka_unit_test(test_bad_values),
        cmocka_unit_test(test_bad_tensors),
        cmocka_unit_test(test_io_errors),
        cmocka_unit_test(test_fuzz),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
