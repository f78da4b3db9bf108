/* gguf/gguf_write — the GGUF v3 writer: see gguf.h.
 *
 * Metadata values are encoded into small owned buffers when added; tensors only remember the
 * caller's pointer, so a file of several hundred MB is streamed from the caller's memory at
 * write time and never held twice. Layout: header, key/values, tensor infos, zero padding to the
 * alignment, then each tensor's data padded with zeros to the alignment.
 */
#include "gguf/gguf.h"
#include "base/buf.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { WRITER_DEFAULT_ALIGNMENT = 32 };

typedef struct {
    uint8_t *p;  /* bytes, [cap] */
    size_t n;    /* used */
    size_t cap;
} bytes;

typedef struct {
    char *key;         /* NUL-terminated copy */
    pl_gguf_type type;
    bytes val;         /* the encoded value (what follows the u32 type in the file) */
} wkv;

typedef struct {
    char *name;        /* NUL-terminated copy */
    pl_dtype type;
    int n_dims;        /* 1..4 */
    int64_t ne[4];     /* unused dims are 1 */
    const void *data;  /* the caller's, [nbytes]; read at write time */
    size_t nbytes;
    uint64_t offset;   /* in the data section, assigned at write time */
} wtensor;

struct pl_gguf_writer {
    uint32_t alignment;      /* power of two */
    uint32_t bad_alignment;  /* nonzero: an invalid value given to set_alignment (reported at write) */
    wkv *kvs;                /* [n_kv] */
    size_t n_kv, cap_kv;
    wtensor *ts;             /* [n_t] */
    size_t n_t, cap_t;
};

/* ---- byte buffers ---- */

static int put(bytes *b, const void *src, size_t n) {
    if (n > SIZE_MAX - b->n) return 0;
    if (pl_array_reserve(&b->p, &b->cap, b->n + n, 1)) return 0;
    if (n) memcpy(b->p + b->n, src, n);
    b->n += n;
    return 1;
}

static int put_u32(bytes *b, uint32_t v) {
    uint8_t x[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    return put(b, x, 4);
}

static int put_u64(bytes *b, uint64_t v) { return put_u32(b, (uint32_t)v) && put_u32(b, (uint32_t)(v >> 32)); }

static int put_str(bytes *b, const char *s, size_t n) { return put_u64(b, n) && put(b, s, n); }

static size_t fixed_size(pl_gguf_type t) {
    static const size_t sizes[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return (unsigned)t <= PL_GGUF_FLOAT64 ? sizes[t] : 0;
}

static pl_status nomem(void) { return pl_fail(PL_ERR_NOMEM, "GGUF writer: out of memory"); }

/* ---- lifetime ---- */

pl_gguf_writer *pl_gguf_writer_create(void) {
    pl_gguf_writer *w = calloc(1, sizeof *w);
    if (w) w->alignment = WRITER_DEFAULT_ALIGNMENT;
    return w;
}

void pl_gguf_writer_destroy(pl_gguf_writer *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n_kv; i++) {
        free(w->kvs[i].key);
        free(w->kvs[i].val.p);
    }
    for (size_t i = 0; i < w->n_t; i++) free(w->ts[i].name);
    free(w->kvs);
    free(w->ts);
    free(w);
}

/* ---- metadata ---- */

static wkv *find_kv(pl_gguf_writer *w, const char *key, size_t n) {
    for (size_t i = 0; i < w->n_kv; i++)
        if (strlen(w->kvs[i].key) == n && !memcmp(w->kvs[i].key, key, n)) return &w->kvs[i];
    return NULL;
}

static int is_alignment_key(const char *key, size_t n) {
    return n == 17 && !memcmp(key, "general.alignment", 17);
}

/* Adds key (n bytes) with an already-encoded value; takes ownership of val on success and
 * on failure. */
static pl_status add_kv(pl_gguf_writer *w, const char *key, size_t n, pl_gguf_type type,
                        bytes *val) {
    pl_status st = PL_OK;
    if (n == 0 || memchr(key, 0, n))
        st = pl_fail(PL_ERR_INVALID_ARG, "GGUF writer: empty key or key with a NUL byte");
    else if (find_kv(w, key, n))
        st = pl_fail(PL_ERR_INVALID_ARG, "GGUF writer: duplicate key '%.*s'", (int)n, key);
    else if (pl_array_reserve(&w->kvs, &w->cap_kv, w->n_kv + 1, sizeof *w->kvs)) {
        st = nomem();
    }
    char *k = st == PL_OK ? malloc(n + 1) : NULL;
    if (st == PL_OK && !k) st = nomem();
    if (st != PL_OK) {
        free(val->p);
        return st;
    }
    memcpy(k, key, n);
    k[n] = '\0';
    w->kvs[w->n_kv++] = (wkv){k, type, *val};
    /* The data layout follows a valid general.alignment (an invalid one is written as given,
     * which is how tests make malformed files). */
    if (is_alignment_key(key, n) && type == PL_GGUF_UINT32 && val->n == 4) {
        uint32_t a = (uint32_t)val->p[0] | (uint32_t)val->p[1] << 8 | (uint32_t)val->p[2] << 16 |
                     (uint32_t)val->p[3] << 24;
        if (a && !(a & (a - 1))) w->alignment = a;
    }
    return PL_OK;
}

static pl_status add_scalar(pl_gguf_writer *w, const char *key, pl_gguf_type t, uint64_t bits) {
    bytes b = {0};
    size_t n = fixed_size(t);
    uint8_t byte = (uint8_t)bits;
    int ok = n == 8 ? put_u64(&b, bits) : n == 4 ? put_u32(&b, (uint32_t)bits) : put(&b, &byte, 1);
    if (!ok) {
        free(b.p);
        return nomem();
    }
    if (is_alignment_key(key, strlen(key)) && (t != PL_GGUF_UINT32 || !bits || (bits & (bits - 1)))) {
        free(b.p);
        return pl_fail(PL_ERR_INVALID_ARG,
                       "GGUF writer: general.alignment must be a u32 power of two");
    }
    return add_kv(w, key, strlen(key), t, &b);
}

void pl_gguf_writer_set_alignment(pl_gguf_writer *w, uint32_t alignment) {
    if (!alignment || (alignment & (alignment - 1))) {
        w->bad_alignment = alignment ? alignment : UINT32_MAX;
        return;
    }
    wkv *kv = find_kv(w, "general.alignment", 17);
    if (kv) {
        kv->type = PL_GGUF_UINT32;
        kv->val.n = 0;
        if (!put_u32(&kv->val, alignment)) w->bad_alignment = alignment;
        else w->alignment = alignment;
    } else if (alignment != WRITER_DEFAULT_ALIGNMENT) {
        if (add_scalar(w, "general.alignment", PL_GGUF_UINT32, alignment) != PL_OK)
            w->bad_alignment = alignment;
    } else {
        w->alignment = alignment;
    }
}

pl_status pl_gguf_writer_add_u32(pl_gguf_writer *w, const char *key, uint32_t v) {
    return add_scalar(w, key, PL_GGUF_UINT32, v);
}

pl_status pl_gguf_writer_add_i32(pl_gguf_writer *w, const char *key, int32_t v) {
    return add_scalar(w, key, PL_GGUF_INT32, (uint32_t)v);
}

pl_status pl_gguf_writer_add_u64(pl_gguf_writer *w, const char *key, uint64_t v) {
    return add_scalar(w, key, PL_GGUF_UINT64, v);
}

pl_status pl_gguf_writer_add_f32(pl_gguf_writer *w, const char *key, float v) {
    uint32_t bits;
    memcpy(&bits, &v, sizeof bits);
    return add_scalar(w, key, PL_GGUF_FLOAT32, bits);
}

pl_status pl_gguf_writer_add_bool(pl_gguf_writer *w, const char *key, int v) {
    return add_scalar(w, key, PL_GGUF_BOOL, v ? 1 : 0);
}

pl_status pl_gguf_writer_add_str(pl_gguf_writer *w, const char *key, const char *v) {
    bytes b = {0};
    if (!v) return pl_fail(PL_ERR_INVALID_ARG, "GGUF writer: NULL string for key '%s'", key);
    if (!put_str(&b, v, strlen(v))) {
        free(b.p);
        return nomem();
    }
    return add_kv(w, key, strlen(key), PL_GGUF_STRING, &b);
}

pl_status pl_gguf_writer_add_raw(pl_gguf_writer *w, const char *key, pl_gguf_type type,
                                 const void *value, size_t len) {
    bytes b = {0};
    if (!put(&b, value, len)) {
        free(b.p);
        return nomem();
    }
    return add_kv(w, key, strlen(key), type, &b);
}

pl_status pl_gguf_writer_copy_kv(pl_gguf_writer *w, const pl_gguf *src, int64_t i) {
    if (i < 0 || i >= pl_gguf_n_kv(src))
        return pl_fail(PL_ERR_INVALID_ARG, "GGUF writer: key index %lld out of range",
                       (long long)i);
    size_t len;
    const void *raw = pl_gguf_value_raw(src, i, &len);
    pl_gguf_str key = pl_gguf_key_at(src, i);
    bytes b = {0};
    if (!put(&b, raw, len)) {
        free(b.p);
        return nomem();
    }
    return add_kv(w, key.ptr, (size_t)key.len, pl_gguf_type_at(src, i), &b);
}

pl_status pl_gguf_writer_add_arr(pl_gguf_writer *w, const char *key, pl_gguf_type type,
                                 const void *data, uint64_t count) {
    size_t each = fixed_size(type);
    if (!each)
        return pl_fail(PL_ERR_INVALID_ARG,
                       "GGUF writer: key '%s': add_arr takes fixed-size elements, not %s", key,
                       pl_gguf_type_name(type));
    if (count > SIZE_MAX / each || (count && !data))
        return pl_fail(PL_ERR_INVALID_ARG, "GGUF writer: key '%s': bad array data/count", key);
    bytes b = {0};
    if (!put_u32(&b, type) || !put_u64(&b, count) || !put(&b, data, (size_t)count * each)) {
        free(b.p);
        return nomem();
    }
    return add_kv(w, key, strlen(key), PL_GGUF_ARRAY, &b);
}

pl_status pl_gguf_writer_add_str_arr(pl_gguf_writer *w, const char *key, const char *const *strs,
                                     uint64_t count) {
    bytes b = {0};
    int ok = put_u32(&b, PL_GGUF_STRING) && put_u64(&b, count);
    for (uint64_t i = 0; ok && i < count; i++) {
        if (!strs[i]) {
            free(b.p);
            return pl_fail(PL_ERR_INVALID_ARG, "GGUF writer: key '%s': string %llu is NULL", key,
                           (unsigned long long)i);
        }
        ok = put_str(&b, strs[i], strlen(strs[i]));
    }
    if (!ok) {
        free(b.p);
        return nomem();
    }
    return add_kv(w, key, strlen(key), PL_GGUF_ARRAY, &b);
}

/* ---- tensors ---- */

pl_status pl_gguf_writer_add_tensor(pl_gguf_writer *w, const char *name, pl_dtype type,
                                    int n_dims, const int64_t *ne, const void *data) {
    if (!name || !*name)
        return pl_fail(PL_ERR_INVALID_ARG, "GGUF writer: a tensor needs a name");
    if (!pl_dtype_valid(type))
        return pl_fail(PL_ERR_INVALID_ARG, "GGUF writer: tensor '%s': unknown type %u", name,
                       (unsigned)type);
    if (n_dims < 1 || n_dims > 4)
        return pl_fail(PL_ERR_INVALID_ARG, "GGUF writer: tensor '%s': n_dims %d not in 1..4",
                       name, n_dims);
    wtensor t = {.type = type, .n_dims = n_dims, .ne = {1, 1, 1, 1}, .data = data};
    size_t rows = 1;
    for (int d = 0; d < n_dims; d++) {
        if (ne[d] <= 0)
            return pl_fail(PL_ERR_INVALID_ARG, "GGUF writer: tensor '%s': ne[%d] = %lld", name,
                           d, (long long)ne[d]);
        t.ne[d] = ne[d];
        if (d > 0) {
            if ((uint64_t)ne[d] > SIZE_MAX / rows)
                return pl_fail(PL_ERR_INVALID_ARG, "GGUF writer: tensor '%s' is too large", name);
            rows *= (size_t)ne[d];
        }
    }
    size_t row = pl_dtype_row_size(type, ne[0]);
    if (!row)
        return pl_fail(PL_ERR_INVALID_ARG,
                       "GGUF writer: tensor '%s': ne[0] = %lld is not a multiple of %s's block "
                       "size %lld",
                       name, (long long)ne[0], pl_dtype_name(type),
                       (long long)pl_dtype_block_size(type));
    if (rows > SIZE_MAX / row)
        return pl_fail(PL_ERR_INVALID_ARG, "GGUF writer: tensor '%s' is too large", name);
    t.nbytes = row * rows;
    if (!data) return pl_fail(PL_ERR_INVALID_ARG, "GGUF writer: tensor '%s': no data", name);
    for (size_t i = 0; i < w->n_t; i++)
        if (!strcmp(w->ts[i].name, name))
            return pl_fail(PL_ERR_INVALID_ARG, "GGUF writer: duplicate tensor '%s'", name);
    if (pl_array_reserve(&w->ts, &w->cap_t, w->n_t + 1, sizeof *w->ts)) return nomem();
    if (!(t.name = strdup(name))) return nomem();
    w->ts[w->n_t++] = t;
    return PL_OK;
}

/* ---- output ---- */

static int write_zeros(FILE *f, size_t n) {
    static const uint8_t zeros[256];
    while (n) {
        size_t k = n < sizeof zeros ? n : sizeof zeros;
        if (fwrite(zeros, 1, k, f) != k) return 0;
        n -= k;
    }
    return 1;
}

static size_t pad_to(uint64_t pos, size_t a) { return (size_t)((a - pos % a) % a); }

/* Header, metadata and tensor infos (offsets assigned here). */
static pl_status encode_head(pl_gguf_writer *w, bytes *h) {
    uint64_t off = 0;
    for (size_t i = 0; i < w->n_t; i++) {
        w->ts[i].offset = off;
        off += w->ts[i].nbytes;
        off += pad_to(off, w->alignment);
    }
    int ok = put(h, "GGUF", 4) && put_u32(h, 3) && put_u64(h, w->n_t) && put_u64(h, w->n_kv);
    for (size_t i = 0; ok && i < w->n_kv; i++) {
        const wkv *kv = &w->kvs[i];
        ok = put_str(h, kv->key, strlen(kv->key)) && put_u32(h, kv->type) &&
             put(h, kv->val.p, kv->val.n);
    }
    for (size_t i = 0; ok && i < w->n_t; i++) {
        const wtensor *t = &w->ts[i];
        ok = put_str(h, t->name, strlen(t->name)) && put_u32(h, (uint32_t)t->n_dims);
        for (int d = 0; ok && d < t->n_dims; d++) ok = put_u64(h, (uint64_t)t->ne[d]);
        ok = ok && put_u32(h, t->type) && put_u64(h, t->offset);
    }
    return ok ? PL_OK : nomem();
}

pl_status pl_gguf_writer_write(pl_gguf_writer *w, const char *path) {
    if (w->bad_alignment)
        return pl_fail(PL_ERR_INVALID_ARG,
                       "GGUF writer: alignment %u is not a power of two (or could not be set)",
                       w->bad_alignment == UINT32_MAX ? 0 : w->bad_alignment);
    bytes h = {0};
    pl_status st = encode_head(w, &h);
    if (st != PL_OK) {
        free(h.p);
        return st;
    }
    FILE *f = fopen(path, "wb");
    if (!f) {
        int e = errno;
        free(h.p);
        return pl_fail(PL_ERR_IO, "%s: cannot create: %s", path, strerror(e));
    }
    int ok = fwrite(h.p, 1, h.n, f) == h.n && write_zeros(f, pad_to(h.n, w->alignment));
    free(h.p);
    for (size_t i = 0; ok && i < w->n_t; i++) {
        const wtensor *t = &w->ts[i];
        ok = fwrite(t->data, 1, t->nbytes, f) == t->nbytes &&
             write_zeros(f, pad_to(t->nbytes, w->alignment));
    }
    int e = errno;
    if (fclose(f) != 0 && ok) {
        ok = 0;
        e = errno;
    }
    if (!ok) {
        unlink(path);
        return pl_fail(PL_ERR_IO, "%s: write failed: %s", path, strerror(e));
    }
    return PL_OK;
}
