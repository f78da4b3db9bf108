/* Fuzz target: the GGUF reader. The input bytes are a GGUF file (put in a memfd, opened through
 * /proc/self/fd so pl_gguf_open maps it like a real file); every key, value (nested arrays too)
 * and tensor of an accepted file is walked, and a refused file must come with a message.
 * An accepted file is also copied with the GGUF writer (every key by copy_kv, every tensor) and
 * read back: the copy must be accepted and hold the same keys, values and tensors. */
#include "base/status.h"
#include "gguf/gguf.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static int g_fd = -1, g_fd2 = -1;
static char g_path[64], g_path2[64];

static volatile uint64_t g_sink;

static void walk_arr(const pl_gguf_arr *a, int depth) {
    uint64_t n = a->count < 64 ? a->count : 64; /* the reader checked all; sample the front */
    for (uint64_t i = 0; i < n; i++) {
        switch (a->type) {
        case PL_GGUF_STRING: {
            pl_gguf_str s = pl_gguf_arr_str(a, i);
            if (s.len) g_sink += (unsigned char)s.ptr[0] + (unsigned char)s.ptr[s.len - 1];
            break;
        }
        case PL_GGUF_ARRAY: {
            pl_gguf_arr sub = pl_gguf_arr_arr(a, i);
            if (depth < 300) walk_arr(&sub, depth + 1);
            break;
        }
        case PL_GGUF_FLOAT32:
        case PL_GGUF_FLOAT64: g_sink += (uint64_t)(pl_gguf_arr_float(a, i) != 0); break;
        default: g_sink += (uint64_t)pl_gguf_arr_int(a, i); break;
        }
    }
}

/* Write g again with the writer and compare what is read back. */
static void round_trip(const pl_gguf *g) {
    pl_gguf_writer *w = pl_gguf_writer_create();
    if (!w) abort();
    for (int64_t i = 0; i < pl_gguf_n_kv(g); i++)
        if (pl_gguf_writer_copy_kv(w, g, i) != PL_OK) {
            fprintf(stderr, "copy_kv %lld: %s\n", (long long)i, pl_last_error());
            abort();
        }
    for (int64_t i = 0; i < pl_gguf_n_tensors(g); i++) {
        const pl_gguf_tensor *t = pl_gguf_tensor_at(g, i);
        if (pl_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data) != PL_OK) {
            fprintf(stderr, "add_tensor %s: %s\n", t->name, pl_last_error());
            abort();
        }
    }
    if (pl_gguf_writer_write(w, g_path2) != PL_OK) {
        fprintf(stderr, "write: %s\n", pl_last_error());
        abort();
    }
    pl_gguf_writer_destroy(w);
    pl_gguf *c;
    if (pl_gguf_open(g_path2, &c) != PL_OK) {
        fprintf(stderr, "the writer's copy is refused: %s\n", pl_last_error());
        abort();
    }
    if (pl_gguf_n_kv(c) != pl_gguf_n_kv(g) || pl_gguf_n_tensors(c) != pl_gguf_n_tensors(g) ||
        pl_gguf_alignment(c) != pl_gguf_alignment(g))
        abort();
    for (int64_t i = 0; i < pl_gguf_n_kv(g); i++) {
        pl_gguf_str a = pl_gguf_key_at(g, i), b = pl_gguf_key_at(c, i);
        size_t la, lb;
        const void *ra = pl_gguf_value_raw(g, i, &la), *rb = pl_gguf_value_raw(c, i, &lb);
        if (a.len != b.len || memcmp(a.ptr, b.ptr, a.len) != 0 ||
            pl_gguf_type_at(g, i) != pl_gguf_type_at(c, i) || la != lb || memcmp(ra, rb, la) != 0)
            abort();
    }
    for (int64_t i = 0; i < pl_gguf_n_tensors(g); i++) {
        const pl_gguf_tensor *a = pl_gguf_tensor_at(g, i), *b = pl_gguf_tensor_at(c, i);
        if (strcmp(a->name, b->name) != 0 || a->type != b->type || a->n_dims != b->n_dims ||
            memcmp(a->ne, b->ne, sizeof a->ne) != 0 || a->nbytes != b->nbytes ||
            memcmp(a->data, b->data, a->nbytes) != 0)
            abort();
    }
    pl_gguf_close(c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (g_fd < 0) {
        g_fd = memfd_create("fuzz_gguf", 0);
        if (g_fd < 0) abort();
        snprintf(g_path, sizeof g_path, "/proc/self/fd/%d", g_fd);
        g_fd2 = memfd_create("fuzz_gguf_copy", 0);
        if (g_fd2 < 0) abort();
        snprintf(g_path2, sizeof g_path2, "/proc/self/fd/%d", g_fd2);
    }
    if (ftruncate(g_fd, 0) != 0) abort();
    if (size && pwrite(g_fd, data, size, 0) != (ssize_t)size) abort();

    pl_gguf *g = NULL;
    pl_status st = pl_gguf_open(g_path, &g);
    if (st != PL_OK) {
        if (g) abort();
        const char *msg = pl_last_error();
        if (!msg || !*msg) abort(); /* every refusal says why */
        return 0;
    }
    if (pl_gguf_file_size(g) != size) abort();
    /* The data section may start past the end of a file without tensors (alignment padding). */
    if (pl_gguf_n_tensors(g) > 0 && pl_gguf_data_offset(g) > size) abort();
    size_t align = pl_gguf_alignment(g);
    if (align == 0 || (align & (align - 1))) abort();
    for (int64_t i = 0; i < pl_gguf_n_kv(g); i++) {
        pl_gguf_str key = pl_gguf_key_at(g, i);
        if (key.len == 0 || memchr(key.ptr, 0, key.len)) abort();
        char *k = pl_gguf_str_dup(key);
        if (!k || pl_gguf_find_key(g, k) != i) abort(); /* keys are unique */
        pl_gguf_type t = pl_gguf_type_at(g, i);
        (void)pl_gguf_type_name(t);
        size_t raw_len = 0;
        const uint8_t *raw = pl_gguf_value_raw(g, i, &raw_len);
        if (!raw || raw_len == 0) abort();
        g_sink += raw[0] + raw[raw_len - 1]; /* inside the mapping */
        int64_t iv;
        double fv;
        pl_gguf_str sv;
        pl_gguf_arr av;
        if (pl_gguf_value_int(g, i, &iv) == PL_OK) g_sink += (uint64_t)iv;
        if (pl_gguf_value_float(g, i, &fv) == PL_OK) g_sink += (uint64_t)(fv != 0);
        if (pl_gguf_value_str(g, i, &sv) == PL_OK && sv.len) g_sink += (unsigned char)sv.ptr[sv.len - 1];
        if (pl_gguf_value_arr(g, i, &av) == PL_OK) walk_arr(&av, 0);
        uint64_t uv;
        int bv;
        (void)pl_gguf_get_int(g, k, &iv);
        (void)pl_gguf_get_uint(g, k, &uv);
        (void)pl_gguf_get_float(g, k, &fv);
        (void)pl_gguf_get_bool(g, k, &bv);
        (void)pl_gguf_get_str(g, k, &sv);
        if (pl_gguf_get_arr(g, k, &av) == PL_OK && av.count) walk_arr(&av, 0);
        free(k);
    }
    for (int64_t i = 0; i < pl_gguf_n_tensors(g); i++) {
        const pl_gguf_tensor *t = pl_gguf_tensor_at(g, i);
        if (!t || pl_gguf_find_tensor(g, t->name) != t) abort();
        if (t->n_dims < 1 || t->n_dims > 4) abort();
        const uint8_t *d = t->data;
        size_t start = pl_gguf_data_offset(g) + (size_t)t->offset;
        if (start > size || t->nbytes > size - start) abort();
        if (t->nbytes) g_sink += d[0] + d[t->nbytes - 1]; /* inside the mapping */
    }
    round_trip(g);
    pl_gguf_close(g);
    return 0;
}
