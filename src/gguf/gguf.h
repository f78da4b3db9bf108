/* gguf/gguf — reading GGUF files (v2 and v3) and writing them (for tools and tests).
 *
 * The reader memory-maps the file and parses the header, every metadata key/value (all value
 * types, arrays nested to any depth) and the tensor table. Every count, string length, array
 * length, dimension, offset and size is checked against the file before it is used: a malformed
 * file yields PL_ERR_FORMAT with a message naming the field and what was wrong, never a read out
 * of bounds. Tensor data offsets must respect `general.alignment` (default 32; a u32 power of
 * two). Also refused as malformed: empty keys or keys with a NUL byte, duplicate keys or tensor
 * names, bools other than 0/1, arrays nested more than 256 deep, unknown tensor type ids, n_dims
 * outside 1..4, zero dimensions, ne[0] not a multiple of the type's block size, sizes that
 * overflow. Versions other than 2 and 3, and big-endian files, give PL_ERR_UNSUPPORTED. Types
 * that pagellm cannot compute are accepted here (the model loader decides).
 *
 * Strings returned by the reader (pl_gguf_str) point into the mapping and are NOT NUL-terminated;
 * they live as long as the pl_gguf. Tensor names are NUL-terminated copies.
 * Integer and float getters convert between numeric widths and reject other types with a message
 * naming the key, the expected and the found type.
 */
#ifndef PL_GGUF_GGUF_H
#define PL_GGUF_GGUF_H

#include "base/status.h"
#include "kernels/dtype.h"

#include <stddef.h>
#include <stdint.h>

typedef enum {
    PL_GGUF_UINT8 = 0,
    PL_GGUF_INT8 = 1,
    PL_GGUF_UINT16 = 2,
    PL_GGUF_INT16 = 3,
    PL_GGUF_UINT32 = 4,
    PL_GGUF_INT32 = 5,
    PL_GGUF_FLOAT32 = 6,
    PL_GGUF_BOOL = 7,
    PL_GGUF_STRING = 8,
    PL_GGUF_ARRAY = 9,
    PL_GGUF_UINT64 = 10,
    PL_GGUF_INT64 = 11,
    PL_GGUF_FLOAT64 = 12,
} pl_gguf_type;

typedef struct {
    const char *ptr; /* not NUL-terminated */
    uint64_t len;
} pl_gguf_str;

/* An array value: `count` elements of `type`. For fixed-size types, `data` points at the packed
 * little-endian elements (possibly unaligned: read them with the accessors). */
typedef struct {
    const struct pl_gguf *file;
    pl_gguf_type type;
    uint64_t count;
    const void *data;
    uint32_t index; /* internal: which parsed array this is */
} pl_gguf_arr;

typedef struct {
    char *name;        /* NUL-terminated copy */
    pl_dtype type;
    int n_dims;        /* 1..4 */
    int64_t ne[4];     /* ne[0] is the innermost (row) length; unused dims are 1 */
    uint64_t offset;   /* relative to the start of the data section */
    size_t nbytes;
    const void *data;  /* into the mapping */
} pl_gguf_tensor;

typedef struct pl_gguf pl_gguf;

pl_status pl_gguf_open(const char *path, pl_gguf **out);
void pl_gguf_close(pl_gguf *g);

uint32_t pl_gguf_version(const pl_gguf *g);
size_t pl_gguf_alignment(const pl_gguf *g);
const char *pl_gguf_path(const pl_gguf *g);
size_t pl_gguf_file_size(const pl_gguf *g);
size_t pl_gguf_data_offset(const pl_gguf *g); /* file offset of the (aligned) data section */

/* Metadata. Keys are looked up by exact name. */
int64_t pl_gguf_n_kv(const pl_gguf *g);
pl_gguf_str pl_gguf_key_at(const pl_gguf *g, int64_t i);
pl_gguf_type pl_gguf_type_at(const pl_gguf *g, int64_t i);
int64_t pl_gguf_find_key(const pl_gguf *g, const char *key); /* -1 if absent */
const char *pl_gguf_type_name(pl_gguf_type t);

/* Getters: PL_ERR_NOT_FOUND if the key is absent (message names it), PL_ERR_FORMAT if it has an
 * incompatible type or the value does not fit. */
pl_status pl_gguf_get_int(const pl_gguf *g, const char *key, int64_t *out);   /* any integer type */
pl_status pl_gguf_get_uint(const pl_gguf *g, const char *key, uint64_t *out); /* non-negative int */
pl_status pl_gguf_get_float(const pl_gguf *g, const char *key, double *out);  /* float or int */
pl_status pl_gguf_get_bool(const pl_gguf *g, const char *key, int *out);
pl_status pl_gguf_get_str(const pl_gguf *g, const char *key, pl_gguf_str *out);
pl_status pl_gguf_get_arr(const pl_gguf *g, const char *key, pl_gguf_arr *out);
/* Same getters by index (for iterating all keys, e.g. `inspect`). */
pl_status pl_gguf_value_int(const pl_gguf *g, int64_t i, int64_t *out);
pl_status pl_gguf_value_float(const pl_gguf *g, int64_t i, double *out);
pl_status pl_gguf_value_str(const pl_gguf *g, int64_t i, pl_gguf_str *out);
pl_status pl_gguf_value_arr(const pl_gguf *g, int64_t i, pl_gguf_arr *out);
/* The encoded bytes of value i as stored in the file (after the u32 type: a scalar, a u64-length
 * string, or an array header plus elements); `len` receives their size. */
const void *pl_gguf_value_raw(const pl_gguf *g, int64_t i, size_t *len);

/* Array element accessors; i < arr->count is the caller's precondition (asserted). */
int64_t pl_gguf_arr_int(const pl_gguf_arr *a, uint64_t i);     /* integer or bool element */
double pl_gguf_arr_float(const pl_gguf_arr *a, uint64_t i);    /* float or integer element */
pl_gguf_str pl_gguf_arr_str(const pl_gguf_arr *a, uint64_t i); /* string element, O(1) */
pl_gguf_arr pl_gguf_arr_arr(const pl_gguf_arr *a, uint64_t i); /* nested array element, O(1) */

/* Tensors. */
int64_t pl_gguf_n_tensors(const pl_gguf *g);
const pl_gguf_tensor *pl_gguf_tensor_at(const pl_gguf *g, int64_t i);
const pl_gguf_tensor *pl_gguf_find_tensor(const pl_gguf *g, const char *name); /* NULL if absent */

/* 1 if the string equals the NUL-terminated s. */
int pl_gguf_str_eq(pl_gguf_str a, const char *s);
/* malloc'ed NUL-terminated copy (NULL on allocation failure). */
char *pl_gguf_str_dup(pl_gguf_str a);

/* ---- Writer: builds a GGUF v3 file in memory-bounded steps (tools and tests). ---- */
typedef struct pl_gguf_writer pl_gguf_writer;

pl_gguf_writer *pl_gguf_writer_create(void);
void pl_gguf_writer_destroy(pl_gguf_writer *w);
void pl_gguf_writer_set_alignment(pl_gguf_writer *w, uint32_t alignment);
pl_status pl_gguf_writer_add_u32(pl_gguf_writer *w, const char *key, uint32_t v);
pl_status pl_gguf_writer_add_i32(pl_gguf_writer *w, const char *key, int32_t v);
pl_status pl_gguf_writer_add_u64(pl_gguf_writer *w, const char *key, uint64_t v);
pl_status pl_gguf_writer_add_f32(pl_gguf_writer *w, const char *key, float v);
pl_status pl_gguf_writer_add_bool(pl_gguf_writer *w, const char *key, int v);
pl_status pl_gguf_writer_add_str(pl_gguf_writer *w, const char *key, const char *v);
/* Copy a whole value (any type, including nested arrays) from another file's key i. */
pl_status pl_gguf_writer_copy_kv(pl_gguf_writer *w, const pl_gguf *src, int64_t i);
/* Array of `count` fixed-size elements of `type` (data packed little-endian), or of strings. */
pl_status pl_gguf_writer_add_arr(pl_gguf_writer *w, const char *key, pl_gguf_type type,
                                 const void *data, uint64_t count);
pl_status pl_gguf_writer_add_str_arr(pl_gguf_writer *w, const char *key, const char *const *strs,
                                     uint64_t count);
/* A value of `type` given already encoded (the bytes that follow the u32 type in the file, as
 * pl_gguf_value_raw returns them); not validated until the file is read back. Used for nested
 * arrays and by tests to build malformed files. */
pl_status pl_gguf_writer_add_raw(pl_gguf_writer *w, const char *key, pl_gguf_type type,
                                 const void *value, size_t len);
/* Tensor: data (nbytes = row size × rows) is copied when written, not at add time: the pointer
 * must stay valid until pl_gguf_writer_write returns. */
pl_status pl_gguf_writer_add_tensor(pl_gguf_writer *w, const char *name, pl_dtype type,
                                    int n_dims, const int64_t *ne, const void *data);
pl_status pl_gguf_writer_write(pl_gguf_writer *w, const char *path);

#endif
