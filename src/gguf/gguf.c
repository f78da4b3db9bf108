/* gguf/gguf — the GGUF reader: see gguf.h.
 *
 * Layout (v2 and v3 are identical on disk; v3 only announced that big-endian files exist):
 *   "GGUF" u32 version, u64 n_tensors, u64 n_kv,
 *   n_kv × { string key, u32 type, value },
 *   n_tensors × { string name, u32 n_dims, u64 ne[n_dims], u32 type, u64 offset },
 *   zero padding to `general.alignment`, then the data section (offsets are relative to it).
 * A string is u64 length + bytes; an array is u32 element type + u64 count + the elements.
 *
 * Parsing walks a cursor over the mapping; every read first checks the bytes left, and every
 * count is bounded by the bytes left (each element needs at least one byte) before anything is
 * allocated for it. String arrays get an offsets table (O(1) access); nested arrays get their
 * children stored contiguously in `arrs` (O(1) access).
 */
#include "gguf/gguf.h"
#include "base/buf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

enum {
    GGUF_DEFAULT_ALIGNMENT = 32,
    GGUF_MAX_DEPTH = 256, /* arrays nested deeper than this are refused (stack safety) */
    GGUF_MIN_KV_BYTES = 8 + 1 + 4 + 1,          /* key length, 1 key byte, type, 1 value byte */
    GGUF_MIN_TENSOR_BYTES = 8 + 1 + 4 + 8 + 4 + 8, /* name, n_dims, one dim, type, offset */
    GGUF_ARR_HEADER_BYTES = 4 + 8,                 /* element type, count */
};

typedef struct {
    pl_gguf_str key;   /* into the mapping */
    pl_gguf_type type;
    size_t val_off;    /* file offset of the value (string: its length; array: its header) */
    size_t val_end;    /* file offset one past the value */
    uint32_t arr;      /* ARRAY: index into arrs */
} gguf_kv;

typedef struct {
    pl_gguf_type type; /* element type */
    uint64_t count;    /* elements */
    size_t data_off;   /* file offset of the first element */
    uint64_t first;    /* STRING: index into offs of element 0; ARRAY: index into arrs of child 0 */
} gguf_arr;

typedef struct {
    const char **keys; /* hashed names (NULL = empty slot), [cap] */
    size_t *lens;      /* their lengths, [cap] */
    int64_t *idx;      /* what they map to, [cap] */
    size_t cap;        /* power of two, >= 2 × entries */
} name_index;

struct pl_gguf {
    char *path;                /* copy of the path given to open */
    const uint8_t *base;       /* the mapping, [size] */
    size_t size;               /* file size in bytes */
    uint32_t version;          /* 2 or 3 */
    size_t alignment;          /* general.alignment or 32 */
    size_t data_start;         /* file offset of the data section */
    int64_t n_kv;
    gguf_kv *kvs;              /* [n_kv] */
    name_index kv_index;       /* key -> kv index */
    int64_t n_tensors;
    pl_gguf_tensor *tensors;   /* [n_tensors] */
    char *names;               /* all tensor names, NUL-separated */
    name_index tensor_index;   /* name -> tensor index */
    gguf_arr *arrs;            /* every parsed array, [n_arrs] */
    size_t n_arrs, cap_arrs;
    uint64_t *offs;            /* file offsets of string-array elements, [n_offs] */
    size_t n_offs, cap_offs;
};

/* ---- little-endian decoding ---- */

static uint16_t le16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t le32(const uint8_t *p) { return (uint32_t)le16(p) | (uint32_t)le16(p + 2) << 16; }
static uint64_t le64(const uint8_t *p) { return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32; }

static size_t type_size(pl_gguf_type t) {
    static const size_t sizes[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return (unsigned)t <= PL_GGUF_FLOAT64 ? sizes[t] : 0;
}

const char *pl_gguf_type_name(pl_gguf_type t) {
    static const char *names[] = {"u8",     "i8",    "u16", "i16", "u32", "i32", "f32",
                                  "bool",   "string", "array", "u64", "i64", "f64"};
    return (unsigned)t <= PL_GGUF_FLOAT64 ? names[t] : "unknown";
}

/* Printable rendering of bytes for messages (at most ~60 chars, non-printables as \xNN). */
static const char *show(char *buf, size_t cap, const void *p, size_t len) {
    const uint8_t *s = p;
    size_t o = 0;
    for (size_t i = 0; i < len && o + 8 < cap; i++) {
        if (o > 60) {
            o += (size_t)snprintf(buf + o, cap - o, "...");
            break;
        }
        if (s[i] >= 0x20 && s[i] < 0x7f && s[i] != '\'' && s[i] != '\\') buf[o++] = (char)s[i];
        else o += (size_t)snprintf(buf + o, cap - o, "\\x%02x", s[i]);
    }
    buf[o] = '\0';
    return buf;
}

/* ---- name index: open addressing on FNV-1a ---- */

static uint64_t fnv1a(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
    return h;
}

static void index_free(name_index *x) {
    PL_FREE_ALL(x->keys, x->lens, x->idx);
    memset(x, 0, sizeof *x);
}

static int index_init(name_index *x, size_t n) {
    x->cap = 8;
    while (x->cap < 2 * n) x->cap *= 2;
    x->keys = calloc(x->cap, sizeof *x->keys);
    x->lens = calloc(x->cap, sizeof *x->lens);
    x->idx = calloc(x->cap, sizeof *x->idx);
    return x->keys && x->lens && x->idx;
}

/* Returns the index stored for s, or -1 (and, if add >= 0, stores add for s). */
static int64_t index_put(name_index *x, const char *s, size_t n, int64_t add) {
    if (!x->cap) return -1;
    size_t mask = x->cap - 1, i = (size_t)fnv1a(s, n) & mask;
    for (; x->keys[i]; i = (i + 1) & mask)
        if (x->lens[i] == n && !memcmp(x->keys[i], s, n)) return x->idx[i];
    if (add >= 0) {
        x->keys[i] = s;
        x->lens[i] = n;
        x->idx[i] = add;
    }
    return -1;
}

/* ---- the cursor ---- */

typedef struct {
    pl_gguf *g;
    size_t pos;      /* next byte to read */
    char what[256];  /* what is being parsed, for messages: "metadata key 'x'" */
} reader;

static size_t left(const reader *r) { return r->g->size - r->pos; }

static pl_status need(reader *r, uint64_t n, const char *field) {
    if (n <= left(r)) return PL_OK;
    return pl_fail(PL_ERR_FORMAT,
                   "%s: file is truncated: %s at offset %zu needs %llu bytes, only %zu remain "
                   "before the end of the file (%zu bytes)",
                   r->what, field, r->pos, (unsigned long long)n, left(r), r->g->size);
}

static pl_status rd_u32(reader *r, uint32_t *v, const char *field) {
    PL_TRY(need(r, 4, field));
    *v = le32(r->g->base + r->pos);
    r->pos += 4;
    return PL_OK;
}

static pl_status rd_u64(reader *r, uint64_t *v, const char *field) {
    PL_TRY(need(r, 8, field));
    *v = le64(r->g->base + r->pos);
    r->pos += 8;
    return PL_OK;
}

/* A count of items that need at least `each` bytes apiece must fit in what is left. */
static pl_status check_count(reader *r, uint64_t count, uint64_t each, const char *field) {
    if (count <= left(r) / each) return PL_OK;
    return pl_fail(PL_ERR_FORMAT,
                   "%s: %s %llu exceeds the file: each needs at least %llu bytes and only %zu "
                   "remain before the end of the file (%zu bytes)",
                   r->what, field, (unsigned long long)count, (unsigned long long)each, left(r),
                   r->g->size);
}

/* A string: u64 length then bytes. `field` names it in messages ("key", "string 17"). */
static pl_status rd_str(reader *r, pl_gguf_str *s, const char *field) {
    uint64_t len;
    char f[96];
    snprintf(f, sizeof f, "the length of %s", field);
    PL_TRY(rd_u64(r, &len, f));
    if (len > left(r))
        return pl_fail(PL_ERR_FORMAT,
                       "%s: %s length %llu exceeds the file: only %zu bytes remain before the "
                       "end of the file (%zu bytes)",
                       r->what, field, (unsigned long long)len, left(r), r->g->size);
    s->ptr = (const char *)r->g->base + r->pos;
    s->len = len;
    r->pos += (size_t)len;
    return PL_OK;
}

static pl_status rd_type(reader *r, pl_gguf_type *t, const char *field) {
    uint32_t v;
    PL_TRY(rd_u32(r, &v, field));
    if (v > PL_GGUF_FLOAT64)
        return pl_fail(PL_ERR_FORMAT, "%s: %s %u at offset %zu is not a GGUF value type (0..12)",
                       r->what, field, v, r->pos - 4);
    *t = (pl_gguf_type)v;
    return PL_OK;
}

static pl_status check_bools(reader *r, const uint8_t *p, uint64_t n) {
    for (uint64_t i = 0; i < n; i++)
        if (p[i] > 1)
            return pl_fail(PL_ERR_FORMAT, "%s: bool %llu has value %u (expected 0 or 1)", r->what,
                           (unsigned long long)i, p[i]);
    return PL_OK;
}

/* ---- values ---- */

static pl_status grow(void *arrp, size_t *cap, size_t need_n, size_t elem) {
    if (pl_array_reserve(arrp, cap, need_n, elem))
        return pl_fail(PL_ERR_NOMEM, "out of memory growing the GGUF index to %zu entries", need_n);
    return PL_OK;
}

/* Parses an array (its header and elements) at the cursor into arrs[slot]. */
static pl_status parse_array(reader *r, size_t slot, int depth) {
    pl_gguf *g = r->g;
    if (depth > GGUF_MAX_DEPTH)
        return pl_fail(PL_ERR_FORMAT, "%s: arrays nested more than %d deep", r->what,
                       GGUF_MAX_DEPTH);
    pl_gguf_type t;
    uint64_t count;
    PL_TRY(rd_type(r, &t, "array element type"));
    PL_TRY(rd_u64(r, &count, "array length"));
    gguf_arr a = {t, count, r->pos, 0};
    if (t == PL_GGUF_STRING) {
        PL_TRY(check_count(r, count, 8, "array length (strings)"));
        PL_TRY(grow(&g->offs, &g->cap_offs, g->n_offs + count, sizeof *g->offs));
        a.first = g->n_offs;
        g->n_offs += count;
        for (uint64_t i = 0; i < count; i++) {
            char f[48];
            snprintf(f, sizeof f, "string %llu", (unsigned long long)i);
            g->offs[a.first + i] = r->pos;
            pl_gguf_str s;
            PL_TRY(rd_str(r, &s, f));
        }
    } else if (t == PL_GGUF_ARRAY) {
        PL_TRY(check_count(r, count, GGUF_ARR_HEADER_BYTES, "array length (arrays)"));
        if (g->n_arrs + count > UINT32_MAX)
            return pl_fail(PL_ERR_FORMAT, "%s: more than 2^32 arrays in one file", r->what);
        PL_TRY(grow(&g->arrs, &g->cap_arrs, g->n_arrs + count, sizeof *g->arrs));
        a.first = g->n_arrs;
        g->n_arrs += count;
        for (uint64_t i = 0; i < count; i++) PL_TRY(parse_array(r, a.first + i, depth + 1));
    } else {
        size_t each = type_size(t);
        PL_TRY(check_count(r, count, each, "array length"));
        if (t == PL_GGUF_BOOL) PL_TRY(check_bools(r, g->base + r->pos, count));
        r->pos += (size_t)count * each;
    }
    g->arrs[slot] = a;
    return PL_OK;
}

static pl_status parse_value(reader *r, gguf_kv *kv) {
    pl_gguf *g = r->g;
    kv->val_off = r->pos;
    if (kv->type == PL_GGUF_STRING) {
        pl_gguf_str s;
        PL_TRY(rd_str(r, &s, "string value"));
    } else if (kv->type == PL_GGUF_ARRAY) {
        if (g->n_arrs >= UINT32_MAX)
            return pl_fail(PL_ERR_FORMAT, "%s: more than 2^32 arrays in one file", r->what);
        PL_TRY(grow(&g->arrs, &g->cap_arrs, g->n_arrs + 1, sizeof *g->arrs));
        kv->arr = (uint32_t)g->n_arrs++;
        PL_TRY(parse_array(r, kv->arr, 1));
    } else {
        PL_TRY(need(r, type_size(kv->type), "the value"));
        if (kv->type == PL_GGUF_BOOL) PL_TRY(check_bools(r, g->base + r->pos, 1));
        r->pos += type_size(kv->type);
    }
    kv->val_end = r->pos;
    return PL_OK;
}

/* ---- header, metadata, tensor table ---- */

static pl_status parse_header(reader *r, uint64_t *n_tensors, uint64_t *n_kv) {
    pl_gguf *g = r->g;
    char buf[64];
    if (g->size == 0) return pl_fail(PL_ERR_FORMAT, "file is empty (0 bytes), not a GGUF model");
    if (g->size < 4 || memcmp(g->base, "GGUF", 4))
        return pl_fail(PL_ERR_FORMAT, "not a GGUF file (magic is '%s', expected 'GGUF')",
                       show(buf, sizeof buf, g->base, g->size < 4 ? g->size : 4));
    r->pos = 4;
    snprintf(r->what, sizeof r->what, "header");
    PL_TRY(rd_u32(r, &g->version, "the version"));
    uint32_t v = g->version, swapped = __builtin_bswap32(v);
    if (v != 2 && v != 3) {
        if (swapped >= 1 && swapped <= 3)
            return pl_fail(PL_ERR_UNSUPPORTED,
                           "big-endian GGUF file (version %u, byte-swapped) is not supported; "
                           "convert it to little-endian",
                           swapped);
        if (v == 1)
            return pl_fail(PL_ERR_UNSUPPORTED,
                           "GGUF version 1 is not supported (only versions 2 and 3 are); "
                           "re-convert the model with a current llama.cpp");
        return pl_fail(PL_ERR_UNSUPPORTED,
                       "GGUF version %u is not supported (only versions 2 and 3 are)", v);
    }
    PL_TRY(rd_u64(r, n_tensors, "the tensor count"));
    PL_TRY(rd_u64(r, n_kv, "the metadata count"));
    PL_TRY(check_count(r, *n_kv, GGUF_MIN_KV_BYTES, "metadata count"));
    PL_TRY(check_count(r, *n_tensors, GGUF_MIN_TENSOR_BYTES, "tensor count"));
    return PL_OK;
}

static pl_status parse_kvs(reader *r) {
    pl_gguf *g = r->g;
    char buf[96];
    g->kvs = calloc(g->n_kv ? (size_t)g->n_kv : 1, sizeof *g->kvs);
    if (!g->kvs || !index_init(&g->kv_index, (size_t)g->n_kv))
        return pl_fail(PL_ERR_NOMEM, "out of memory for %lld metadata entries",
                       (long long)g->n_kv);
    for (int64_t i = 0; i < g->n_kv; i++) {
        gguf_kv *kv = &g->kvs[i];
        snprintf(r->what, sizeof r->what, "metadata entry %lld (of %lld)", (long long)i,
                 (long long)g->n_kv);
        PL_TRY(rd_str(r, &kv->key, "key"));
        if (kv->key.len == 0) return pl_fail(PL_ERR_FORMAT, "%s: the key is empty", r->what);
        if (memchr(kv->key.ptr, 0, (size_t)kv->key.len))
            return pl_fail(PL_ERR_FORMAT, "%s: the key contains a NUL byte", r->what);
        snprintf(r->what, sizeof r->what, "metadata key '%s'",
                 show(buf, sizeof buf, kv->key.ptr, (size_t)kv->key.len));
        if (index_put(&g->kv_index, kv->key.ptr, (size_t)kv->key.len, i) >= 0)
            return pl_fail(PL_ERR_FORMAT, "%s: duplicate key (entry %lld)", r->what,
                           (long long)i);
        PL_TRY(rd_type(r, &kv->type, "value type"));
        PL_TRY(parse_value(r, kv));
    }
    return PL_OK;
}

static pl_status parse_alignment(pl_gguf *g) {
    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    int64_t i = pl_gguf_find_key(g, "general.alignment");
    if (i < 0) return PL_OK;
    if (g->kvs[i].type != PL_GGUF_UINT32)
        return pl_fail(PL_ERR_FORMAT, "metadata key 'general.alignment' has type %s, expected u32",
                       pl_gguf_type_name(g->kvs[i].type));
    uint32_t a = le32(g->base + g->kvs[i].val_off);
    if (a == 0 || (a & (a - 1)))
        return pl_fail(PL_ERR_FORMAT,
                       "metadata key 'general.alignment' is %u; the alignment must be a power "
                       "of two",
                       a);
    g->alignment = a;
    return PL_OK;
}

/* One tensor info; its name (pointing into the mapping) goes to *name. */
static pl_status parse_tensor(reader *r, int64_t i, pl_gguf_str *name) {
    pl_gguf *g = r->g;
    pl_gguf_tensor *t = &g->tensors[i];
    char buf[96];
    snprintf(r->what, sizeof r->what, "tensor %lld (of %lld)", (long long)i,
             (long long)g->n_tensors);
    PL_TRY(rd_str(r, name, "name"));
    if (name->len == 0 || memchr(name->ptr, 0, (size_t)name->len))
        return pl_fail(PL_ERR_FORMAT, "%s: the name is empty or contains a NUL byte", r->what);
    snprintf(r->what, sizeof r->what, "tensor %lld '%s'", (long long)i,
             show(buf, sizeof buf, name->ptr, (size_t)name->len));
    if (index_put(&g->tensor_index, name->ptr, (size_t)name->len, i) >= 0)
        return pl_fail(PL_ERR_FORMAT, "%s: duplicate tensor name", r->what);
    uint32_t n_dims, type;
    PL_TRY(rd_u32(r, &n_dims, "n_dims"));
    if (n_dims < 1 || n_dims > 4)
        return pl_fail(PL_ERR_FORMAT, "%s: n_dims is %u, expected 1 to 4 dimensions", r->what,
                       n_dims);
    t->n_dims = (int)n_dims;
    int64_t nelem = 1;
    for (int d = 0; d < 4; d++) {
        uint64_t ne = 1;
        if (d < (int)n_dims) PL_TRY(rd_u64(r, &ne, "a dimension"));
        if (ne == 0 || ne > (uint64_t)INT64_MAX)
            return pl_fail(PL_ERR_FORMAT, "%s: dimension %d is %llu (must be 1 to 2^63-1)",
                           r->what, d, (unsigned long long)ne);
        if ((uint64_t)nelem > (uint64_t)INT64_MAX / ne)
            return pl_fail(PL_ERR_FORMAT, "%s: the element count overflows 64 bits (dimension %d is %llu)",
                           r->what, d, (unsigned long long)ne);
        nelem *= (int64_t)ne;
        t->ne[d] = (int64_t)ne;
    }
    PL_TRY(rd_u32(r, &type, "the type"));
    if (!pl_dtype_valid(type))
        return pl_fail(PL_ERR_FORMAT, "%s: unknown tensor type id %u", r->what, type);
    t->type = (pl_dtype)type;
    int64_t block = pl_dtype_block_size(t->type);
    if (t->ne[0] % block)
        return pl_fail(PL_ERR_FORMAT,
                       "%s: row length ne[0] = %lld is not a multiple of the block size %lld of "
                       "type %s",
                       r->what, (long long)t->ne[0], (long long)block, pl_dtype_name(type));
    size_t row = pl_dtype_row_size(t->type, t->ne[0]);
    uint64_t rows = (uint64_t)(nelem / t->ne[0]);
    if (row == 0 || rows > SIZE_MAX / row)
        return pl_fail(PL_ERR_FORMAT, "%s: the byte size overflows (%lld elements of type %s)",
                       r->what, (long long)nelem, pl_dtype_name(type));
    t->nbytes = row * (size_t)rows;
    PL_TRY(rd_u64(r, &t->offset, "the data offset"));
    if (t->offset % g->alignment)
        return pl_fail(PL_ERR_FORMAT, "%s: data offset %llu is not a multiple of the alignment %zu",
                       r->what, (unsigned long long)t->offset, g->alignment);
    return PL_OK;
}

static pl_status parse_tensors(reader *r) {
    pl_gguf *g = r->g;
    size_t n = (size_t)g->n_tensors;
    pl_gguf_str *names = calloc(n ? n : 1, sizeof *names);
    g->tensors = calloc(n ? n : 1, sizeof *g->tensors);
    if (!names || !g->tensors || !index_init(&g->tensor_index, n)) {
        free(names);
        return pl_fail(PL_ERR_NOMEM, "out of memory for %zu tensors", n);
    }
    pl_status st = PL_OK;
    size_t total = 0;
    for (size_t i = 0; i < n && st == PL_OK; i++) {
        st = parse_tensor(r, (int64_t)i, &names[i]);
        total += (size_t)names[i].len + 1;
    }
    if (st == PL_OK && !(g->names = malloc(total ? total : 1)))
        st = pl_fail(PL_ERR_NOMEM, "out of memory for tensor names");
    /* NUL-terminated copies (the index keeps pointing into the mapping). */
    for (size_t i = 0, o = 0; st == PL_OK && i < n; i++) {
        memcpy(g->names + o, names[i].ptr, (size_t)names[i].len);
        g->names[o + names[i].len] = '\0';
        g->tensors[i].name = g->names + o;
        o += (size_t)names[i].len + 1;
    }
    free(names);
    return st;
}

/* Data section: aligned start, then each tensor inside the file. */
static pl_status place_data(pl_gguf *g, size_t infos_end) {
    size_t a = g->alignment;
    g->data_start = infos_end + (a - infos_end % a) % a; /* cannot overflow: infos_end <= size */
    for (int64_t i = 0; i < g->n_tensors; i++) {
        pl_gguf_tensor *t = &g->tensors[i];
        uint64_t room = g->size > g->data_start ? g->size - g->data_start : 0;
        char buf[96];
        if (t->offset > room || t->nbytes > room - t->offset)
            return pl_fail(PL_ERR_FORMAT,
                           "tensor %lld '%s': offset %llu + %zu bytes is beyond the end of the "
                           "file (%zu bytes; the data section starts at %zu)",
                           (long long)i, show(buf, sizeof buf, t->name, strlen(t->name)),
                           (unsigned long long)t->offset, t->nbytes,
                           g->size, g->data_start);
        t->data = g->base + g->data_start + t->offset;
    }
    return PL_OK;
}

static pl_status map_file(pl_gguf *g, const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return pl_fail(PL_ERR_IO, "cannot open: %s", strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return pl_fail(PL_ERR_IO, "cannot stat: %s", strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return pl_fail(PL_ERR_IO, "not a regular file%s", S_ISDIR(st.st_mode) ? " (a directory)" : "");
    }
    g->size = (size_t)st.st_size;
    if (g->size > 0) {
        void *p = mmap(NULL, g->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            int e = errno;
            close(fd);
            return pl_fail(PL_ERR_IO, "cannot map %zu bytes: %s", g->size, strerror(e));
        }
        g->base = p;
    }
    close(fd);
    return PL_OK;
}

static pl_status parse(pl_gguf *g) {
    reader r = {.g = g};
    uint64_t n_tensors, n_kv;
    PL_TRY(parse_header(&r, &n_tensors, &n_kv));
    g->n_kv = (int64_t)n_kv;
    g->n_tensors = (int64_t)n_tensors;
    PL_TRY(parse_kvs(&r));
    PL_TRY(parse_alignment(g));
    PL_TRY(parse_tensors(&r));
    return place_data(g, r.pos);
}

pl_status pl_gguf_open(const char *path, pl_gguf **out) {
    *out = NULL;
    pl_gguf *g = calloc(1, sizeof *g);
    if (!g || !(g->path = strdup(path))) {
        free(g);
        return pl_fail(PL_ERR_NOMEM, "%s: out of memory", path);
    }
    pl_status st = map_file(g, path);
    if (st == PL_OK) st = parse(g);
    if (st != PL_OK) {
        pl_error_prefix("%s", path);
        pl_gguf_close(g);
        return st;
    }
    *out = g;
    return PL_OK;
}

void pl_gguf_close(pl_gguf *g) {
    if (!g) return;
    if (g->base) munmap((void *)g->base, g->size);
    index_free(&g->kv_index);
    index_free(&g->tensor_index);
    PL_FREE_ALL(g->kvs, g->tensors, g->names, g->arrs, g->offs, g->path, g);
}

/* ---- simple accessors ---- */

uint32_t pl_gguf_version(const pl_gguf *g) { return g->version; }
size_t pl_gguf_alignment(const pl_gguf *g) { return g->alignment; }
const char *pl_gguf_path(const pl_gguf *g) { return g->path; }
size_t pl_gguf_file_size(const pl_gguf *g) { return g->size; }
size_t pl_gguf_data_offset(const pl_gguf *g) { return g->data_start; }
int64_t pl_gguf_n_kv(const pl_gguf *g) { return g->n_kv; }
int64_t pl_gguf_n_tensors(const pl_gguf *g) { return g->n_tensors; }

pl_gguf_str pl_gguf_key_at(const pl_gguf *g, int64_t i) {
    PL_ASSERT(i >= 0 && i < g->n_kv);
    return g->kvs[i].key;
}

pl_gguf_type pl_gguf_type_at(const pl_gguf *g, int64_t i) {
    PL_ASSERT(i >= 0 && i < g->n_kv);
    return g->kvs[i].type;
}

int64_t pl_gguf_find_key(const pl_gguf *g, const char *key) {
    return index_put((name_index *)&g->kv_index, key, strlen(key), -1);
}

const pl_gguf_tensor *pl_gguf_tensor_at(const pl_gguf *g, int64_t i) {
    PL_ASSERT(i >= 0 && i < g->n_tensors);
    return &g->tensors[i];
}

const pl_gguf_tensor *pl_gguf_find_tensor(const pl_gguf *g, const char *name) {
    int64_t i = index_put((name_index *)&g->tensor_index, name, strlen(name), -1);
    return i < 0 ? NULL : &g->tensors[i];
}

int pl_gguf_str_eq(pl_gguf_str a, const char *s) {
    size_t n = strlen(s);
    return a.len == n && (n == 0 || !memcmp(a.ptr, s, n));
}

char *pl_gguf_str_dup(pl_gguf_str a) {
    if (a.len >= SIZE_MAX) return NULL;
    char *s = malloc((size_t)a.len + 1);
    if (!s) return NULL;
    if (a.len) memcpy(s, a.ptr, (size_t)a.len);
    s[a.len] = '\0';
    return s;
}

/* ---- typed values ---- */

static int is_int_type(pl_gguf_type t) {
    return t <= PL_GGUF_INT32 || t == PL_GGUF_UINT64 || t == PL_GGUF_INT64;
}

/* An integer or bool element at p (u64 values above INT64_MAX wrap: callers check). */
static int64_t elem_int(pl_gguf_type t, const uint8_t *p) {
    switch (t) {
    case PL_GGUF_UINT8: case PL_GGUF_BOOL: return p[0];
    case PL_GGUF_INT8: return (int8_t)p[0];
    case PL_GGUF_UINT16: return le16(p);
    case PL_GGUF_INT16: return (int16_t)le16(p);
    case PL_GGUF_UINT32: return le32(p);
    case PL_GGUF_INT32: return (int32_t)le32(p);
    case PL_GGUF_UINT64: case PL_GGUF_INT64: return (int64_t)le64(p);
    default: PL_ASSERT(!"not an integer type"); return 0;
    }
}

static double elem_float(pl_gguf_type t, const uint8_t *p) {
    if (t == PL_GGUF_FLOAT32) {
        uint32_t u = le32(p);
        float f;
        memcpy(&f, &u, sizeof f);
        return f;
    }
    if (t == PL_GGUF_FLOAT64) {
        uint64_t u = le64(p);
        double d;
        memcpy(&d, &u, sizeof d);
        return d;
    }
    if (t == PL_GGUF_UINT64) return (double)(uint64_t)elem_int(t, p);
    return (double)elem_int(t, p);
}

static pl_status wrong_type(const pl_gguf *g, int64_t i, const char *expected) {
    char buf[96];
    return pl_fail(PL_ERR_FORMAT, "metadata key '%s' has type %s, expected %s",
                   show(buf, sizeof buf, g->kvs[i].key.ptr, (size_t)g->kvs[i].key.len),
                   pl_gguf_type_name(g->kvs[i].type), expected);
}

static pl_status lookup(const pl_gguf *g, const char *key, int64_t *i) {
    *i = pl_gguf_find_key(g, key);
    if (*i < 0) return pl_fail(PL_ERR_NOT_FOUND, "metadata key '%s' is missing", key);
    return PL_OK;
}

pl_status pl_gguf_value_int(const pl_gguf *g, int64_t i, int64_t *out) {
    PL_ASSERT(i >= 0 && i < g->n_kv);
    const gguf_kv *kv = &g->kvs[i];
    if (!is_int_type(kv->type)) return wrong_type(g, i, "an integer");
    int64_t v = elem_int(kv->type, g->base + kv->val_off);
    char buf[96];
    if (kv->type == PL_GGUF_UINT64 && v < 0)
        return pl_fail(PL_ERR_FORMAT, "metadata key '%s': value %llu does not fit in int64",
                       show(buf, sizeof buf, kv->key.ptr, (size_t)kv->key.len),
                       (unsigned long long)v);
    *out = v;
    return PL_OK;
}

pl_status pl_gguf_value_float(const pl_gguf *g, int64_t i, double *out) {
    PL_ASSERT(i >= 0 && i < g->n_kv);
    const gguf_kv *kv = &g->kvs[i];
    if (!is_int_type(kv->type) && kv->type != PL_GGUF_FLOAT32 && kv->type != PL_GGUF_FLOAT64)
        return wrong_type(g, i, "a number");
    *out = elem_float(kv->type, g->base + kv->val_off);
    return PL_OK;
}

pl_status pl_gguf_value_str(const pl_gguf *g, int64_t i, pl_gguf_str *out) {
    PL_ASSERT(i >= 0 && i < g->n_kv);
    const gguf_kv *kv = &g->kvs[i];
    if (kv->type != PL_GGUF_STRING) return wrong_type(g, i, "string");
    out->len = le64(g->base + kv->val_off);
    out->ptr = (const char *)g->base + kv->val_off + 8;
    return PL_OK;
}

static pl_gguf_arr make_arr(const pl_gguf *g, size_t index) {
    const gguf_arr *a = &g->arrs[index];
    pl_gguf_arr r = {g, a->type, a->count, g->base + a->data_off, (uint32_t)index};
    return r;
}

pl_status pl_gguf_value_arr(const pl_gguf *g, int64_t i, pl_gguf_arr *out) {
    PL_ASSERT(i >= 0 && i < g->n_kv);
    if (g->kvs[i].type != PL_GGUF_ARRAY) return wrong_type(g, i, "array");
    *out = make_arr(g, g->kvs[i].arr);
    return PL_OK;
}

static pl_status value_uint(const pl_gguf *g, int64_t i, uint64_t *out) {
    const gguf_kv *kv = &g->kvs[i];
    if (!is_int_type(kv->type)) return wrong_type(g, i, "a non-negative integer");
    int64_t v = elem_int(kv->type, g->base + kv->val_off);
    if (kv->type != PL_GGUF_UINT64 && v < 0) {
        char buf[96];
        return pl_fail(PL_ERR_FORMAT, "metadata key '%s' is %lld, expected a non-negative integer",
                       show(buf, sizeof buf, kv->key.ptr, (size_t)kv->key.len), (long long)v);
    }
    *out = (uint64_t)v;
    return PL_OK;
}

static pl_status value_bool(const pl_gguf *g, int64_t i, int *out) {
    if (g->kvs[i].type != PL_GGUF_BOOL) return wrong_type(g, i, "bool");
    *out = g->base[g->kvs[i].val_off] != 0;
    return PL_OK;
}

/* Each pl_gguf_get_*: the key's index (or "missing key"), then the typed value at it. */
#define GET_BY_KEY(fn, type, value_at)                                    \
    pl_status fn(const pl_gguf *g, const char *key, type *out) {         \
        int64_t i;                                                        \
        PL_TRY(lookup(g, key, &i));                                       \
        return value_at(g, i, out);                                       \
    }
GET_BY_KEY(pl_gguf_get_int, int64_t, pl_gguf_value_int)
GET_BY_KEY(pl_gguf_get_uint, uint64_t, value_uint)
GET_BY_KEY(pl_gguf_get_float, double, pl_gguf_value_float)
GET_BY_KEY(pl_gguf_get_bool, int, value_bool)
GET_BY_KEY(pl_gguf_get_str, pl_gguf_str, pl_gguf_value_str)
GET_BY_KEY(pl_gguf_get_arr, pl_gguf_arr, pl_gguf_value_arr)
#undef GET_BY_KEY

/* ---- array elements ---- */

int64_t pl_gguf_arr_int(const pl_gguf_arr *a, uint64_t i) {
    PL_ASSERT(i < a->count && (is_int_type(a->type) || a->type == PL_GGUF_BOOL));
    return elem_int(a->type, (const uint8_t *)a->data + i * type_size(a->type));
}

double pl_gguf_arr_float(const pl_gguf_arr *a, uint64_t i) {
    PL_ASSERT(i < a->count && (is_int_type(a->type) || a->type == PL_GGUF_FLOAT32 ||
                               a->type == PL_GGUF_FLOAT64));
    return elem_float(a->type, (const uint8_t *)a->data + i * type_size(a->type));
}

pl_gguf_str pl_gguf_arr_str(const pl_gguf_arr *a, uint64_t i) {
    PL_ASSERT(i < a->count && a->type == PL_GGUF_STRING);
    const pl_gguf *g = a->file;
    uint64_t off = g->offs[g->arrs[a->index].first + i];
    pl_gguf_str s = {(const char *)g->base + off + 8, le64(g->base + off)};
    return s;
}

pl_gguf_arr pl_gguf_arr_arr(const pl_gguf_arr *a, uint64_t i) {
    PL_ASSERT(i < a->count && a->type == PL_GGUF_ARRAY);
    return make_arr(a->file, (size_t)(a->file->arrs[a->index].first + i));
}

const void *pl_gguf_value_raw(const pl_gguf *g, int64_t i, size_t *len) {
    PL_ASSERT(i >= 0 && i < g->n_kv);
    *len = g->kvs[i].val_end - g->kvs[i].val_off;
    return g->base + g->kvs[i].val_off;
}
