/* Unit tests for src/gguf on well-formed files: the shared models' known facts, typed getters,
 * string and nested arrays, the writer (byte-identical rewrite of a real quantized model), and
 * GGUF v2. Malformed files are in test_gguf_malformed.c. */
#include "gguf_test_util.h"

#include <dirent.h>

/* ---- the shared models ---- */

static void test_stories260k(void **state) {
    (void)state;
    pl_gguf *g = open_ok(STORIES);
    assert_int_equal(pl_gguf_version(g), 3);
    assert_int_equal(pl_gguf_alignment(g), 32);
    assert_int_equal(pl_gguf_file_size(g), 1185376);
    assert_string_equal(pl_gguf_path(g), STORIES);
    assert_int_equal(pl_gguf_n_kv(g), 19);
    assert_int_equal(pl_gguf_n_tensors(g), 48);
    assert_int_equal(pl_gguf_data_offset(g) % 32, 0);

    pl_gguf_str s;
    assert_int_equal(pl_gguf_get_str(g, "general.architecture", &s), PL_OK);
    assert_str(s, "llama");
    int64_t v;
    assert_int_equal(pl_gguf_get_int(g, "llama.block_count", &v), PL_OK);
    assert_int_equal(v, 5);
    assert_int_equal(pl_gguf_get_int(g, "llama.embedding_length", &v), PL_OK);
    assert_int_equal(v, 64);
    assert_int_equal(pl_gguf_get_int(g, "llama.attention.head_count_kv", &v), PL_OK);
    assert_int_equal(v, 4);
    double eps;
    assert_int_equal(pl_gguf_get_float(g, "llama.attention.layer_norm_rms_epsilon", &eps), PL_OK);
    assert_true(eps > 0.99e-5 && eps < 1.01e-5);

    pl_gguf_arr a;
    assert_int_equal(pl_gguf_get_arr(g, "tokenizer.ggml.tokens", &a), PL_OK);
    assert_int_equal(a.type, PL_GGUF_STRING);
    assert_int_equal(a.count, 512);
    assert_ptr_equal(a.file, g);
    assert_str(pl_gguf_arr_str(&a, 0), "<unk>");
    assert_str(pl_gguf_arr_str(&a, 1), "<s>");
    assert_str(pl_gguf_arr_str(&a, 2), "</s>");
    /* Random access in any order agrees with a sequential walk of the encoded strings. */
    const uint8_t *p = a.data;
    for (uint64_t i = 0; i < a.count; i++) {
        pl_gguf_str e = pl_gguf_arr_str(&a, i);
        assert_int_equal(e.len, get64(p));
        assert_ptr_equal(e.ptr, (const char *)p + 8);
        p += 8 + e.len;
    }
    assert_int_equal(pl_gguf_get_arr(g, "tokenizer.ggml.scores", &a), PL_OK);
    assert_int_equal(a.type, PL_GGUF_FLOAT32);
    assert_int_equal(a.count, 512);
    assert_int_equal(pl_gguf_get_arr(g, "tokenizer.ggml.token_type", &a), PL_OK);
    assert_int_equal(a.type, PL_GGUF_INT32);
    assert_int_equal(pl_gguf_arr_int(&a, 1), 3); /* <s> is a control token */
    assert_int_equal(pl_gguf_arr_float(&a, 1), 3.0);

    const pl_gguf_tensor *t = pl_gguf_find_tensor(g, "token_embd.weight");
    assert_non_null(t);
    assert_string_equal(t->name, "token_embd.weight");
    assert_int_equal(t->type, PL_DT_F32);
    assert_int_equal(t->n_dims, 2);
    assert_int_equal(t->ne[0], 64);
    assert_int_equal(t->ne[1], 512);
    assert_int_equal(t->ne[2], 1);
    assert_int_equal(t->nbytes, 64 * 512 * 4);
    assert_ptr_equal(pl_gguf_tensor_at(g, 0), t);
    t = pl_gguf_find_tensor(g, "blk.4.ffn_down.weight");
    assert_non_null(t);
    assert_int_equal(t->ne[0], 172);
    assert_int_equal(t->ne[1], 64);
    assert_null(pl_gguf_find_tensor(g, "blk.5.ffn_down.weight"));
    assert_null(pl_gguf_find_tensor(g, "token_embd"));
    assert_int_equal(pl_gguf_find_key(g, "general.name"), 5);
    assert_int_equal(pl_gguf_find_key(g, "general.nam"), -1);
    pl_gguf_close(g);
}

static const struct {
    const char *file;
    pl_dtype q_type;   /* type of blk.0.attn_q.weight */
    int64_t file_type; /* general.file_type */
} synth[] = {
    {"synth-tiny-f32.gguf", PL_DT_F32, 0},     {"synth-tiny-f16.gguf", PL_DT_F16, 1},
    {"synth-tiny-bf16.gguf", PL_DT_BF16, 32},  {"synth-tiny-q8_0.gguf", PL_DT_Q8_0, 7},
    {"synth-tiny-q4_0.gguf", PL_DT_Q4_0, 2},   {"synth-tiny-q4_k_m.gguf", PL_DT_Q4_K, 15},
    {"synth-tiny-q5_k_m.gguf", PL_DT_Q5_K, 17}, {"synth-tiny-q6_k.gguf", PL_DT_Q6_K, 18},
};

static void test_synth_models(void **state) {
    (void)state;
    char path[512];
    for (size_t m = 0; m < sizeof synth / sizeof synth[0]; m++) {
        snprintf(path, sizeof path, "%s/%s", MODELS, synth[m].file);
        pl_gguf *g = open_ok(path);
        int64_t v;
        assert_int_equal(pl_gguf_get_int(g, "llama.block_count", &v), PL_OK);
        assert_int_equal(v, 4);
        assert_int_equal(pl_gguf_get_int(g, "llama.embedding_length", &v), PL_OK);
        assert_int_equal(v, 256);
        assert_int_equal(pl_gguf_get_int(g, "general.file_type", &v), PL_OK);
        assert_int_equal(v, synth[m].file_type);
        const pl_gguf_tensor *t = pl_gguf_find_tensor(g, "token_embd.weight");
        assert_non_null(t);
        assert_int_equal(t->ne[0], 256);
        assert_int_equal(t->ne[1], 512);
        t = pl_gguf_find_tensor(g, "blk.0.attn_q.weight");
        assert_non_null(t);
        assert_int_equal(t->type, synth[m].q_type);
        assert_int_equal(t->ne[0], 256);
        assert_int_equal(t->ne[1], 256);
        assert_int_equal(t->nbytes, pl_dtype_row_size(t->type, 256) * 256);
        t = pl_gguf_find_tensor(g, "blk.3.ffn_down.weight");
        assert_non_null(t);
        assert_int_equal(t->ne[0], 768);
        assert_int_equal(t->ne[1], 256);
        t = pl_gguf_find_tensor(g, "output_norm.weight");
        assert_non_null(t);
        assert_int_equal(t->type, PL_DT_F32);
        assert_int_equal(t->n_dims, 1);
        /* Every tensor lies in the file, aligned, and no two overlap. */
        const uint8_t *base =
            (const uint8_t *)pl_gguf_tensor_at(g, 0)->data - pl_gguf_tensor_at(g, 0)->offset;
        size_t sum = 0;
        for (int64_t i = 0; i < pl_gguf_n_tensors(g); i++) {
            const pl_gguf_tensor *ti = pl_gguf_tensor_at(g, i);
            assert_ptr_equal(pl_gguf_find_tensor(g, ti->name), ti);
            assert_int_equal(ti->offset % 32, 0);
            assert_ptr_equal((const uint8_t *)ti->data, base + ti->offset);
            assert_true(pl_gguf_data_offset(g) + ti->offset + ti->nbytes <= pl_gguf_file_size(g));
            sum += ti->nbytes;
            for (int64_t j = 0; j < i; j++) {
                const pl_gguf_tensor *tj = pl_gguf_tensor_at(g, j);
                assert_true(ti->offset >= tj->offset + tj->nbytes ||
                            tj->offset >= ti->offset + ti->nbytes);
            }
        }
        assert_true(sum <= pl_gguf_file_size(g) - pl_gguf_data_offset(g));
        pl_gguf_close(g);
    }
}

/* Every .gguf under models/ and testdata/vocab/ opens. */
static void test_every_shared_file_opens(void **state) {
    (void)state;
    const char *dirs[] = {MODELS, PL_SHARED_DIR "/testdata/vocab"};
    int n = 0;
    for (int d = 0; d < 2; d++) {
        DIR *dir = opendir(dirs[d]);
        assert_non_null(dir);
        struct dirent *e;
        while ((e = readdir(dir))) {
            size_t l = strlen(e->d_name);
            if (l < 5 || strcmp(e->d_name + l - 5, ".gguf")) continue;
            char path[1024];
            snprintf(path, sizeof path, "%s/%s", dirs[d], e->d_name);
            pl_gguf *g = open_ok(path);
            pl_gguf_arr a;
            assert_int_equal(pl_gguf_get_arr(g, "tokenizer.ggml.tokens", &a), PL_OK);
            assert_true(a.count >= 512);
            pl_gguf_close(g);
            n++;
        }
        closedir(dir);
    }
    assert_true(n >= 11);
}

/* ---- getters ---- */

static void test_getter_type_errors(void **state) {
    (void)state;
    pl_gguf *g = open_ok(STORIES);
    int64_t i;
    uint64_t u;
    double f;
    int b;
    pl_gguf_str s;
    pl_gguf_arr a;
    assert_int_equal(pl_gguf_get_int(g, "no.such.key", &i), PL_ERR_NOT_FOUND);
    assert_non_null(strstr(pl_last_error(), "'no.such.key'"));
    assert_int_equal(pl_gguf_get_arr(g, "no.such.key", &a), PL_ERR_NOT_FOUND);
    assert_int_equal(pl_gguf_get_bool(g, "llama.block_count", &b), PL_ERR_FORMAT);
    assert_string_equal(pl_last_error(), "metadata key 'llama.block_count' has type u32, expected bool");
    assert_int_equal(pl_gguf_get_str(g, "llama.block_count", &s), PL_ERR_FORMAT);
    assert_non_null(strstr(pl_last_error(), "expected string"));
    assert_int_equal(pl_gguf_get_arr(g, "general.name", &a), PL_ERR_FORMAT);
    assert_non_null(strstr(pl_last_error(), "has type string, expected array"));
    assert_int_equal(pl_gguf_get_int(g, "llama.attention.layer_norm_rms_epsilon", &i), PL_ERR_FORMAT);
    assert_non_null(strstr(pl_last_error(), "has type f32"));
    assert_int_equal(pl_gguf_get_float(g, "tokenizer.ggml.tokens", &f), PL_ERR_FORMAT);
    assert_int_equal(pl_gguf_get_uint(g, "general.architecture", &u), PL_ERR_FORMAT);
    /* Integers convert to float; u32 max stays unsigned. */
    assert_int_equal(pl_gguf_get_float(g, "llama.block_count", &f), PL_OK);
    assert_true(f == 5.0);
    assert_int_equal(pl_gguf_get_int(g, "tokenizer.ggml.seperator_token_id", &i), PL_OK);
    assert_int_equal(i, 4294967295LL);
    assert_int_equal(pl_gguf_get_uint(g, "tokenizer.ggml.seperator_token_id", &u), PL_OK);
    assert_int_equal(u, 4294967295ULL);
    /* By index. */
    int64_t k = pl_gguf_find_key(g, "tokenizer.ggml.model");
    assert_true(k >= 0);
    assert_int_equal(pl_gguf_type_at(g, k), PL_GGUF_STRING);
    assert_str(pl_gguf_key_at(g, k), "tokenizer.ggml.model");
    assert_int_equal(pl_gguf_value_str(g, k, &s), PL_OK);
    assert_str(s, "llama");
    assert_int_equal(pl_gguf_value_int(g, k, &i), PL_ERR_FORMAT);
    assert_int_equal(pl_gguf_value_arr(g, k, &a), PL_ERR_FORMAT);
    char *dup = pl_gguf_str_dup(s);
    assert_string_equal(dup, "llama");
    free(dup);
    assert_string_equal(pl_gguf_type_name(PL_GGUF_FLOAT64), "f64");
    assert_string_equal(pl_gguf_type_name((pl_gguf_type)77), "unknown");
    pl_gguf_close(g);
}

static void test_scalar_types(void **state) {
    (void)state;
    pl_gguf_writer *w = pl_gguf_writer_create();
    uint8_t u8 = 200, i8 = (uint8_t)-5, u16[2] = {0x34, 0x12}, i16[2] = {0xfe, 0xff};
    uint8_t u64[8], i64[8], f64[8], b[1] = {1};
    put64(u64, (1ULL << 63) + 1);
    put64(i64, (uint64_t)-7);
    double d = -2.5;
    uint64_t db;
    memcpy(&db, &d, 8);
    put64(f64, db);
    assert_int_equal(pl_gguf_writer_add_raw(w, "t.u8", PL_GGUF_UINT8, &u8, 1), PL_OK);
    assert_int_equal(pl_gguf_writer_add_raw(w, "t.i8", PL_GGUF_INT8, &i8, 1), PL_OK);
    assert_int_equal(pl_gguf_writer_add_raw(w, "t.u16", PL_GGUF_UINT16, u16, 2), PL_OK);
    assert_int_equal(pl_gguf_writer_add_raw(w, "t.i16", PL_GGUF_INT16, i16, 2), PL_OK);
    assert_int_equal(pl_gguf_writer_add_raw(w, "t.u64", PL_GGUF_UINT64, u64, 8), PL_OK);
    assert_int_equal(pl_gguf_writer_add_raw(w, "t.i64", PL_GGUF_INT64, i64, 8), PL_OK);
    assert_int_equal(pl_gguf_writer_add_raw(w, "t.f64", PL_GGUF_FLOAT64, f64, 8), PL_OK);
    assert_int_equal(pl_gguf_writer_add_raw(w, "t.b", PL_GGUF_BOOL, b, 1), PL_OK);
    assert_int_equal(pl_gguf_writer_add_i32(w, "t.i32", -123456), PL_OK);
    assert_int_equal(pl_gguf_writer_add_u64(w, "t.small_u64", 77), PL_OK);
    assert_int_equal(pl_gguf_writer_add_f32(w, "t.f32", 0.25f), PL_OK);
    assert_int_equal(pl_gguf_writer_add_bool(w, "t.false", 0), PL_OK);
    assert_int_equal(pl_gguf_writer_add_str(w, "t.empty", ""), PL_OK);
    assert_int_equal(pl_gguf_writer_add_u32(w, "t.u8", 1), PL_ERR_INVALID_ARG); /* duplicate */
    assert_int_equal(pl_gguf_writer_add_u32(w, "", 1), PL_ERR_INVALID_ARG);
    const char *p = tmp_path();
    assert_int_equal(pl_gguf_writer_write(w, p), PL_OK);
    pl_gguf_writer_destroy(w);

    pl_gguf *g = open_ok(p);
    assert_int_equal(pl_gguf_n_tensors(g), 0);
    int64_t i;
    uint64_t u;
    double f;
    int bv;
    pl_gguf_str s;
    assert_int_equal(pl_gguf_get_int(g, "t.u8", &i), PL_OK);
    assert_int_equal(i, 200);
    assert_int_equal(pl_gguf_get_int(g, "t.i8", &i), PL_OK);
    assert_int_equal(i, -5);
    assert_int_equal(pl_gguf_get_uint(g, "t.i8", &u), PL_ERR_FORMAT);
    assert_non_null(strstr(pl_last_error(), "non-negative"));
    assert_int_equal(pl_gguf_get_int(g, "t.u16", &i), PL_OK);
    assert_int_equal(i, 0x1234);
    assert_int_equal(pl_gguf_get_int(g, "t.i16", &i), PL_OK);
    assert_int_equal(i, -2);
    assert_int_equal(pl_gguf_get_int(g, "t.u64", &i), PL_ERR_FORMAT); /* > INT64_MAX */
    assert_non_null(strstr(pl_last_error(), "does not fit"));
    assert_int_equal(pl_gguf_get_uint(g, "t.u64", &u), PL_OK);
    assert_true(u == (1ULL << 63) + 1);
    assert_int_equal(pl_gguf_get_int(g, "t.i64", &i), PL_OK);
    assert_int_equal(i, -7);
    assert_int_equal(pl_gguf_get_float(g, "t.f64", &f), PL_OK);
    assert_true(f == -2.5);
    assert_int_equal(pl_gguf_get_float(g, "t.i64", &f), PL_OK);
    assert_true(f == -7.0);
    assert_int_equal(pl_gguf_get_bool(g, "t.b", &bv), PL_OK);
    assert_int_equal(bv, 1);
    assert_int_equal(pl_gguf_get_bool(g, "t.false", &bv), PL_OK);
    assert_int_equal(bv, 0);
    assert_int_equal(pl_gguf_get_int(g, "t.b", &i), PL_ERR_FORMAT);
    assert_int_equal(pl_gguf_get_int(g, "t.i32", &i), PL_OK);
    assert_int_equal(i, -123456);
    assert_int_equal(pl_gguf_get_uint(g, "t.small_u64", &u), PL_OK);
    assert_int_equal(u, 77);
    assert_int_equal(pl_gguf_get_float(g, "t.f32", &f), PL_OK);
    assert_true(f == 0.25);
    assert_int_equal(pl_gguf_get_str(g, "t.empty", &s), PL_OK);
    assert_int_equal(s.len, 0);
    assert_true(pl_gguf_str_eq(s, ""));
    char *dup = pl_gguf_str_dup(s);
    assert_string_equal(dup, "");
    free(dup);
    pl_gguf_close(g);
}

/* ---- arrays ---- */


static void test_arrays(void **state) {
    (void)state;
    pl_gguf_writer *w = pl_gguf_writer_create();
    /* [["a", "bc"], [], ["xyz"]] */
    enc s2 = {0};
    e32(&s2, PL_GGUF_ARRAY), e64(&s2, 3);
    e32(&s2, PL_GGUF_STRING), e64(&s2, 2), estr(&s2, "a"), estr(&s2, "bc");
    e32(&s2, PL_GGUF_STRING), e64(&s2, 0);
    e32(&s2, PL_GGUF_STRING), e64(&s2, 1), estr(&s2, "xyz");
    assert_int_equal(pl_gguf_writer_add_raw(w, "n.strs", PL_GGUF_ARRAY, s2.b, s2.n), PL_OK);
    /* [[[1, 2], [3]], [[-4]]] of i32, three levels deep */
    enc i3 = {0};
    e32(&i3, PL_GGUF_ARRAY), e64(&i3, 2);
    e32(&i3, PL_GGUF_ARRAY), e64(&i3, 2);
    e32(&i3, PL_GGUF_INT32), e64(&i3, 2), e32(&i3, 1), e32(&i3, 2);
    e32(&i3, PL_GGUF_INT32), e64(&i3, 1), e32(&i3, 3);
    e32(&i3, PL_GGUF_ARRAY), e64(&i3, 1);
    e32(&i3, PL_GGUF_INT32), e64(&i3, 1), e32(&i3, (uint32_t)-4);
    assert_int_equal(pl_gguf_writer_add_raw(w, "n.ints", PL_GGUF_ARRAY, i3.b, i3.n), PL_OK);
    const char *strs[] = {"hello", "", "wörld"};
    assert_int_equal(pl_gguf_writer_add_str_arr(w, "a.strs", strs, 3), PL_OK);
    assert_int_equal(pl_gguf_writer_add_str_arr(w, "a.none", strs, 0), PL_OK);
    float fl[3] = {1.5f, -2.0f, 3.25f};
    assert_int_equal(pl_gguf_writer_add_arr(w, "a.f32", PL_GGUF_FLOAT32, fl, 3), PL_OK);
    uint8_t bools[3] = {1, 0, 1};
    assert_int_equal(pl_gguf_writer_add_arr(w, "a.bool", PL_GGUF_BOOL, bools, 3), PL_OK);
    assert_int_equal(pl_gguf_writer_add_arr(w, "a.bad", PL_GGUF_STRING, strs, 3),
                     PL_ERR_INVALID_ARG);
    const char *p = tmp_path();
    assert_int_equal(pl_gguf_writer_write(w, p), PL_OK);
    pl_gguf_writer_destroy(w);

    pl_gguf *g = open_ok(p);
    pl_gguf_arr a, x, y;
    assert_int_equal(pl_gguf_get_arr(g, "n.strs", &a), PL_OK);
    assert_int_equal(a.type, PL_GGUF_ARRAY);
    assert_int_equal(a.count, 3);
    x = pl_gguf_arr_arr(&a, 2);
    assert_int_equal(x.type, PL_GGUF_STRING);
    assert_int_equal(x.count, 1);
    assert_str(pl_gguf_arr_str(&x, 0), "xyz");
    x = pl_gguf_arr_arr(&a, 0);
    assert_int_equal(x.count, 2);
    assert_str(pl_gguf_arr_str(&x, 1), "bc");
    assert_str(pl_gguf_arr_str(&x, 0), "a");
    assert_int_equal(pl_gguf_arr_arr(&a, 1).count, 0);

    assert_int_equal(pl_gguf_get_arr(g, "n.ints", &a), PL_OK);
    assert_int_equal(a.count, 2);
    x = pl_gguf_arr_arr(&a, 1);
    assert_int_equal(x.type, PL_GGUF_ARRAY);
    y = pl_gguf_arr_arr(&x, 0);
    assert_int_equal(y.type, PL_GGUF_INT32);
    assert_int_equal(pl_gguf_arr_int(&y, 0), -4);
    x = pl_gguf_arr_arr(&a, 0);
    y = pl_gguf_arr_arr(&x, 1);
    assert_int_equal(pl_gguf_arr_int(&y, 0), 3);
    y = pl_gguf_arr_arr(&x, 0);
    assert_int_equal(y.count, 2);
    assert_int_equal(pl_gguf_arr_int(&y, 1), 2);

    assert_int_equal(pl_gguf_get_arr(g, "a.strs", &a), PL_OK);
    assert_str(pl_gguf_arr_str(&a, 2), "wörld");
    assert_str(pl_gguf_arr_str(&a, 1), "");
    assert_str(pl_gguf_arr_str(&a, 0), "hello");
    assert_int_equal(pl_gguf_get_arr(g, "a.none", &a), PL_OK);
    assert_int_equal(a.count, 0);
    assert_int_equal(pl_gguf_get_arr(g, "a.f32", &a), PL_OK);
    assert_true(pl_gguf_arr_float(&a, 0) == 1.5 && pl_gguf_arr_float(&a, 2) == 3.25);
    assert_int_equal(pl_gguf_get_arr(g, "a.bool", &a), PL_OK);
    assert_int_equal(pl_gguf_arr_int(&a, 0), 1);
    assert_int_equal(pl_gguf_arr_int(&a, 1), 0);
    pl_gguf_close(g);
}

/* ---- writer ---- */

static void test_writer_roundtrip(void **state) {
    (void)state;
    pl_gguf *src = open_ok(Q4KM);
    pl_gguf_writer *w = pl_gguf_writer_create();
    for (int64_t i = 0; i < pl_gguf_n_kv(src); i++)
        assert_int_equal(pl_gguf_writer_copy_kv(w, src, i), PL_OK);
    for (int64_t i = 0; i < pl_gguf_n_tensors(src); i++) {
        const pl_gguf_tensor *t = pl_gguf_tensor_at(src, i);
        assert_int_equal(pl_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data),
                         PL_OK);
    }
    assert_int_equal(pl_gguf_writer_copy_kv(w, src, 0), PL_ERR_INVALID_ARG); /* duplicate */
    const pl_gguf_tensor *t0 = pl_gguf_tensor_at(src, 0);
    assert_int_equal(pl_gguf_writer_add_tensor(w, t0->name, t0->type, 2, t0->ne, t0->data),
                     PL_ERR_INVALID_ARG);
    const char *p = tmp_path();
    assert_int_equal(pl_gguf_writer_write(w, p), PL_OK);
    pl_gguf_writer_destroy(w);

    pl_gguf *g = open_ok(p);
    assert_int_equal(pl_gguf_version(g), 3);
    assert_int_equal(pl_gguf_n_kv(g), pl_gguf_n_kv(src));
    for (int64_t i = 0; i < pl_gguf_n_kv(g); i++) {
        pl_gguf_str a = pl_gguf_key_at(g, i), b = pl_gguf_key_at(src, i);
        assert_int_equal(a.len, b.len);
        assert_memory_equal(a.ptr, b.ptr, a.len);
        assert_int_equal(pl_gguf_type_at(g, i), pl_gguf_type_at(src, i));
        size_t la, lb;
        const void *ra = pl_gguf_value_raw(g, i, &la), *rb = pl_gguf_value_raw(src, i, &lb);
        assert_int_equal(la, lb);
        assert_memory_equal(ra, rb, la);
    }
    assert_int_equal(pl_gguf_n_tensors(g), pl_gguf_n_tensors(src));
    for (int64_t i = 0; i < pl_gguf_n_tensors(g); i++) {
        const pl_gguf_tensor *a = pl_gguf_tensor_at(g, i), *b = pl_gguf_tensor_at(src, i);
        assert_string_equal(a->name, b->name);
        assert_int_equal(a->type, b->type);
        assert_int_equal(a->n_dims, b->n_dims);
        assert_memory_equal(a->ne, b->ne, sizeof a->ne);
        assert_int_equal(a->nbytes, b->nbytes);
        assert_int_equal(a->offset % 32, 0);
        assert_memory_equal(a->data, b->data, a->nbytes);
    }
    /* Same layout rules as llama.cpp's writer: the whole file is identical. */
    size_t na, nb;
    uint8_t *fa = slurp(p, &na), *fb = slurp(Q4KM, &nb);
    assert_int_equal(na, nb);
    assert_memory_equal(fa, fb, na);
    free(fa);
    free(fb);
    pl_gguf_close(g);
    pl_gguf_close(src);
}

static void test_writer_alignment_and_errors(void **state) {
    (void)state;
    float data[3 * 64];
    for (int i = 0; i < 3 * 64; i++) data[i] = (float)i * 0.5f;
    int64_t ne[2] = {64, 3}, ne1[1] = {5}, bad[2] = {100, 2}, zero[2] = {64, 0};
    pl_gguf_writer *w = pl_gguf_writer_create();
    pl_gguf_writer_set_alignment(w, 256);
    assert_int_equal(pl_gguf_writer_add_tensor(w, "a", PL_DT_F32, 1, ne1, data), PL_OK);
    assert_int_equal(pl_gguf_writer_add_tensor(w, "b", PL_DT_F32, 2, ne, data), PL_OK);
    assert_int_equal(pl_gguf_writer_add_tensor(w, "c", PL_DT_Q4_K, 2, bad, data), PL_ERR_INVALID_ARG);
    assert_non_null(strstr(pl_last_error(), "block"));
    assert_int_equal(pl_gguf_writer_add_tensor(w, "c", PL_DT_F32, 2, zero, data), PL_ERR_INVALID_ARG);
    assert_int_equal(pl_gguf_writer_add_tensor(w, "c", PL_DT_F32, 5, ne, data), PL_ERR_INVALID_ARG);
    assert_int_equal(pl_gguf_writer_add_tensor(w, "", PL_DT_F32, 2, ne, data), PL_ERR_INVALID_ARG);
    assert_int_equal(pl_gguf_writer_add_tensor(w, "c", (pl_dtype)4, 2, ne, data), PL_ERR_INVALID_ARG);
    assert_int_equal(pl_gguf_writer_add_u32(w, "general.alignment", 64), PL_ERR_INVALID_ARG);
    const char *p = tmp_path();
    assert_int_equal(pl_gguf_writer_write(w, p), PL_OK);
    pl_gguf_writer_destroy(w);
    pl_gguf *g = open_ok(p);
    assert_int_equal(pl_gguf_alignment(g), 256);
    assert_int_equal(pl_gguf_data_offset(g) % 256, 0);
    const pl_gguf_tensor *b = pl_gguf_find_tensor(g, "b");
    assert_non_null(b);
    assert_int_equal(b->offset, 256);
    assert_memory_equal(b->data, data, sizeof data);
    assert_memory_equal(pl_gguf_find_tensor(g, "a")->data, data, 5 * sizeof(float));
    pl_gguf_close(g);

    w = pl_gguf_writer_create();
    pl_gguf_writer_set_alignment(w, 3);
    assert_int_equal(pl_gguf_writer_write(w, tmp_path()), PL_ERR_INVALID_ARG);
    assert_non_null(strstr(pl_last_error(), "power of two"));
    pl_gguf_writer_destroy(w);
    w = pl_gguf_writer_create();
    assert_int_equal(pl_gguf_writer_write(w, "/nonexistent-dir/x.gguf"), PL_ERR_IO);
    pl_gguf_writer_destroy(w);
}

/* GGUF v2 has the same layout as v3 (v1 used 32-bit counts and lengths; v3 only added the
 * possibility of big-endian files, which show up as a byte-swapped version). */
static void test_v2_and_endianness(void **state) {
    (void)state;
    size_t n;
    uint8_t *b = slurp(STORIES, &n);
    put32(b + 4, 2);
    pl_gguf *g = open_ok(spill(b, n));
    assert_int_equal(pl_gguf_version(g), 2);
    assert_int_equal(pl_gguf_n_tensors(g), 48);
    pl_gguf_arr a;
    assert_int_equal(pl_gguf_get_arr(g, "tokenizer.ggml.tokens", &a), PL_OK);
    assert_str(pl_gguf_arr_str(&a, 1), "<s>");
    pl_gguf_close(g);
    b[4] = 0, b[7] = 3; /* version 3, big-endian */
    expect_bad(b, n, PL_ERR_UNSUPPORTED, "big-endian");
    free(b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stories260k),
        cmocka_unit_test(test_synth_models),
        cmocka_unit_test(test_every_shared_file_opens),
        cmocka_unit_test(test_getter_type_errors),
        cmocka_unit_test(test_scalar_types),
        cmocka_unit_test(test_arrays),
        cmocka_unit_test(test_writer_roundtrip),
        cmocka_unit_test(test_writer_alignment_and_errors),
        cmocka_unit_test(test_v2_and_endianness),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
