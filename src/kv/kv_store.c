/* kv/kv_store — see kv_store.h.
 *
 * One mapping holds, layer after layer, that layer's K array then its V array, each
 * num_blocks × pl_kv_block_bytes(layout) bytes (even, and the mapping is page-aligned, so every
 * row is aligned for its element type: 4 bytes for f32, 2 for the others). Anonymous stores are private zero-filled memory;
 * file-backed stores are a MAP_SHARED mapping of a file created (or truncated) at `path` and sized
 * with ftruncate, so the kernel pages swapped-out blocks to that file. The file is left in place
 * when the store is freed; whoever chose the path removes it.
 */
#include "kv/kv_store.h"

#include "kernels/attention_contig.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* a * b, or 0 if that overflows size_t. Both are > 0. */
static size_t mul_checked(size_t a, size_t b) {
    size_t r;
    return __builtin_mul_overflow(a, b, &r) ? 0 : r;
}

size_t pl_kv_bytes_per_block(const pl_kv_layout *l, int32_t n_layers) {
    if (n_layers <= 0) return 0;
    return mul_checked(pl_kv_block_bytes(l), 2 * (size_t)n_layers);
}

static const char *dtype_label(pl_dtype t) { return pl_dtype_name((uint32_t)t); }

/* l with shape sh (NULL: l itself). */
static pl_kv_layout with_shape(const pl_kv_layout *l, const pl_kv_shape *sh) {
    pl_kv_layout r = *l;
    if (sh) {
        r.n_kv_heads = sh->n_kv_heads;
        r.head_dim = sh->head_dim;
    }
    return r;
}

size_t pl_kv_bytes_per_block_shaped(const pl_kv_layout *l, int32_t n_layers,
                                    const pl_kv_shape *shapes) {
    if (!shapes) return pl_kv_bytes_per_block(l, n_layers);
    if (n_layers <= 0) return 0;
    size_t sum = 0;
    for (int32_t i = 0; i < n_layers; i++) {
        pl_kv_layout li = with_shape(l, &shapes[i]);
        size_t b = pl_kv_bytes_per_block(&li, 1);
        if (!b || __builtin_add_overflow(sum, b, &sum)) return 0;
    }
    return sum;
}

pl_status pl_kv_layout_check(const pl_kv_layout *l) {
    const char *why = pl_kv_layout_problem(l);
    if (why)
        return pl_fail(PL_ERR_UNSUPPORTED, "KV cache dtype %s with head_dim %d: %s",
                       dtype_label(l->dtype), l->head_dim, why);
    return PL_OK;
}

static pl_status check_layout(const pl_kv_layout *l, int32_t n_layers) {
    PL_TRY(pl_kv_layout_check(l));
    if (l->block_size <= 0)
        return pl_fail(PL_ERR_INVALID_ARG, "KV cache: block size must be > 0, found %d",
                       l->block_size);
    if (l->n_kv_heads <= 0)
        return pl_fail(PL_ERR_INVALID_ARG, "KV cache: n_kv_heads must be > 0, found %d",
                       l->n_kv_heads);
    if (l->num_blocks <= 0)
        return pl_fail(PL_ERR_INVALID_ARG, "KV cache: num_blocks must be > 0, found %lld",
                       (long long)l->num_blocks);
    if (n_layers <= 0)
        return pl_fail(PL_ERR_INVALID_ARG, "KV cache: n_layers must be > 0, found %d", n_layers);
    return PL_OK;
}

pl_status pl_kv_store_init(pl_kv_store *s, const pl_kv_layout *layout, int32_t n_layers,
                           const char *path) {
    return pl_kv_store_init_shaped(s, layout, n_layers, NULL, path);
}

/* The blocks of layer i: num_blocks, or a window-kind tensor's num_blocks_w. */
static int64_t layer_blocks(const pl_kv_layout *l, const uint8_t *kinds, int64_t nbw, int32_t i) {
    return kinds && kinds[i] ? nbw : l->num_blocks;
}

static pl_status init_all(pl_kv_store *s, const pl_kv_layout *layout, int32_t n_layers,
                          const pl_kv_shape *shapes, const uint8_t *kinds, int64_t nbw,
                          const char *path) {
    memset(s, 0, sizeof *s);
    PL_TRY(check_layout(layout, n_layers));
    if (kinds && nbw <= 0)
        return pl_fail(PL_ERR_INVALID_ARG, "KV cache: the window kind's num_blocks must be > 0, "
                       "found %lld", (long long)nbw);
    for (int32_t i = 0; shapes && i < n_layers; i++) {
        pl_kv_layout li = with_shape(layout, &shapes[i]);
        pl_status st = check_layout(&li, n_layers);
        if (st != PL_OK) {
            pl_error_prefix("KV cache layer %d", i);
            return st;
        }
    }
    const size_t block_bytes = pl_kv_block_bytes(layout);
    const size_t per_block = pl_kv_bytes_per_block_shaped(layout, n_layers, shapes);
    size_t total = per_block ? mul_checked(per_block, (size_t)layout->num_blocks) : 0;
    if (kinds) { /* each tensor its kind's blocks */
        total = 0;
        for (int32_t i = 0; i < n_layers && (i == 0 || total); i++) {
            pl_kv_layout li = with_shape(layout, shapes ? &shapes[i] : NULL);
            size_t b = mul_checked(pl_kv_bytes_per_block(&li, 1),
                                   (size_t)layer_blocks(layout, kinds, nbw, i));
            if (!b || __builtin_add_overflow(total, b, &total)) total = 0;
        }
    }
    if (total == 0 || (uint64_t)total > (uint64_t)INT64_MAX)
        return pl_fail(PL_ERR_NOMEM,
                       "KV cache budget: %lld blocks x %d layers x K+V x %zu bytes per block "
                       "(%d tokens x %d KV heads x %d dims, %s) overflows the address space",
                       (long long)layout->num_blocks, n_layers, block_bytes, layout->block_size,
                       layout->n_kv_heads, layout->head_dim, dtype_label(layout->dtype));

    void *base;
    if (path) {
        int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd < 0)
            return pl_fail(PL_ERR_IO, "KV swap file '%s': cannot create: %s", path,
                           strerror(errno));
        if (ftruncate(fd, (off_t)total) != 0) {
            int e = errno;
            close(fd);
            return pl_fail(PL_ERR_IO,
                           "KV swap file '%s': cannot size it to the budget of %zu bytes "
                           "(%lld blocks x %zu bytes): %s",
                           path, total, (long long)layout->num_blocks, per_block, strerror(e));
        }
        base = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        int e = errno;
        close(fd); /* the mapping keeps the file open */
        if (base == MAP_FAILED)
            return pl_fail(PL_ERR_NOMEM,
                           "KV swap file '%s': cannot map the budget of %zu bytes "
                           "(%lld blocks x %zu bytes): %s",
                           path, total, (long long)layout->num_blocks, per_block, strerror(e));
    } else {
        base = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (base == MAP_FAILED)
            return pl_fail(PL_ERR_NOMEM,
                           "KV cache budget of %zu bytes (%lld blocks x %zu bytes per block, "
                           "%d layers) cannot be allocated: %s",
                           total, (long long)layout->num_blocks, per_block, n_layers,
                           strerror(errno));
    }
    s->layout = *layout;
    s->n_layers = n_layers;
    s->layer_bytes = block_bytes * (size_t)layout->num_blocks;
    s->base = base;
    s->mapped_bytes = total;
    s->file_backed = path != NULL;
    if (shapes || kinds) {
        s->shapes = malloc((size_t)n_layers * sizeof *s->shapes);
        s->layer_off = malloc((size_t)n_layers * sizeof *s->layer_off);
        s->kinds = kinds ? malloc((size_t)n_layers) : NULL;
        if (!s->shapes || !s->layer_off || (kinds && !s->kinds)) {
            pl_kv_store_destroy(s);
            return pl_fail(PL_ERR_NOMEM, "KV cache: out of memory for %d layer shapes", n_layers);
        }
        if (kinds) memcpy(s->kinds, kinds, (size_t)n_layers);
        s->num_blocks_w = kinds ? nbw : 0;
        size_t off = 0;
        for (int32_t i = 0; i < n_layers; i++) {
            s->shapes[i] = shapes ? shapes[i]
                                  : (pl_kv_shape){layout->n_kv_heads, layout->head_dim};
            pl_kv_layout li = with_shape(layout, &s->shapes[i]);
            s->layer_off[i] = off;
            off += 2 * pl_kv_block_bytes(&li) * (size_t)layer_blocks(layout, kinds, nbw, i);
        }
    }
    return PL_OK;
}

pl_status pl_kv_store_init_shaped(pl_kv_store *s, const pl_kv_layout *layout, int32_t n_layers,
                                  const pl_kv_shape *shapes, const char *path) {
    return init_all(s, layout, n_layers, shapes, NULL, 0, path);
}

pl_status pl_kv_store_init_kinds(pl_kv_store *s, const pl_kv_layout *layout, int32_t n_layers,
                                 const pl_kv_shape *shapes, const uint8_t *kinds,
                                 int64_t num_blocks_w, const char *path) {
    return init_all(s, layout, n_layers, shapes, kinds, num_blocks_w, path);
}

void pl_kv_store_destroy(pl_kv_store *s) {
    if (s->base && s->mapped_bytes) munmap(s->base, s->mapped_bytes);
    free(s->seq_kv);
    free(s->shapes);
    free(s->layer_off);
    free(s->kinds);
    memset(s, 0, sizeof *s);
}

pl_kv_layout pl_kv_store_layer_layout(const pl_kv_store *s, int32_t layer) {
    PL_ASSERT(layer >= 0 && layer < s->n_layers);
    pl_kv_layout l = with_shape(&s->layout, s->shapes ? &s->shapes[layer] : NULL);
    l.num_blocks = layer_blocks(&s->layout, s->kinds, s->num_blocks_w, layer);
    return l;
}

void *pl_kv_store_k(const pl_kv_store *s, int32_t layer) {
    PL_ASSERT(s->base && layer >= 0 && layer < s->n_layers);
    if (s->shapes) return (char *)s->base + s->layer_off[layer];
    return (char *)s->base + (size_t)layer * 2 * s->layer_bytes;
}

void *pl_kv_store_v(const pl_kv_store *s, int32_t layer) {
    PL_ASSERT(s->base && layer >= 0 && layer < s->n_layers);
    if (s->shapes) {
        pl_kv_layout li = pl_kv_store_layer_layout(s, layer);
        return (char *)s->base + s->layer_off[layer] +
               pl_kv_block_bytes(&li) * (size_t)li.num_blocks;
    }
    return (char *)s->base + ((size_t)layer * 2 + 1) * s->layer_bytes;
}

/* Copy pairs in the layers of one kind (kind < 0: every layer). */
static void copy_layers(const pl_kv_store *src, pl_kv_store *dst, int kind,
                        const int32_t *src_blocks, const int32_t *dst_blocks, int32_t n) {
    for (int32_t layer = 0; layer < src->n_layers; layer++) {
        if (kind >= 0 && src->kinds[layer] != kind) continue;
        pl_kv_layout sl = pl_kv_store_layer_layout(src, layer);
        pl_kv_layout dl = pl_kv_store_layer_layout(dst, layer);
        pl_kv_copy_blocks_between(&sl, pl_kv_store_k(src, layer), pl_kv_store_v(src, layer),
                                  &dl, pl_kv_store_k(dst, layer), pl_kv_store_v(dst, layer),
                                  src_blocks, dst_blocks, n);
    }
}

void pl_kv_store_copy(const pl_kv_store *src, pl_kv_store *dst, const int32_t *src_blocks,
                      const int32_t *dst_blocks, int32_t n) {
    PL_ASSERT(src->n_layers == dst->n_layers && !src->head_major && !dst->head_major);
    PL_ASSERT(!src->kinds == !dst->kinds);
    if (!src->kinds) {
        copy_layers(src, dst, -1, src_blocks, dst_blocks, n);
        return;
    }
    /* two pools: an id at or past the store's num_blocks is a window-kind block, less that */
    const int64_t ns = src->layout.num_blocks, nd = dst->layout.num_blocks;
    int32_t s[2][64], d[2][64], k[2] = {0, 0};
    for (int32_t i = 0; i <= n; i++) {
        for (int kind = 0; kind < 2; kind++)
            if (k[kind] && (i == n || k[kind] == 64)) {
                copy_layers(src, dst, kind, s[kind], d[kind], k[kind]);
                k[kind] = 0;
            }
        if (i == n) break;
        const int w = src_blocks[i] >= ns;
        PL_ASSERT(w == (dst_blocks[i] >= nd));
        s[w][k[w]] = (int32_t)(src_blocks[i] - (w ? ns : 0));
        d[w][k[w]++] = (int32_t)(dst_blocks[i] - (w ? nd : 0));
    }
}

/* The head-major view of a layer of layout l: one block holding every slot of the store. */
static pl_kv_layout one_block(const pl_kv_layout *l) {
    pl_kv_layout o = *l;
    o.block_size = (int32_t)(l->num_blocks * l->block_size);
    o.num_blocks = 1;
    return o;
}

/* Sequence i's K and V tensors of a head-major layer of layout l: KV head 0's rows from its
 * first slot. */
static pl_status seq_tensors(pl_kv_store *s, const pl_kv_layout *l, const pl_attn_args *a,
                             const char *kc, const char *vc) {
    if (a->n_seqs > s->seq_kv_cap) {
        const void **p = realloc(s->seq_kv, 2 * (size_t)a->n_seqs * sizeof *p);
        if (!p) return pl_fail(PL_ERR_NOMEM, "kv store: out of memory for %d sequences",
                               (int)a->n_seqs);
        s->seq_kv = p;
        s->seq_kv_cap = a->n_seqs;
    }
    const int32_t bs = l->block_size;
    const size_t rb = pl_kv_row_bytes(l);
    for (int32_t i = 0; i < a->n_seqs; i++) {
        const int32_t *btab = a->block_tables + (size_t)i * (size_t)a->max_blocks;
        const int32_t nb = (a->context_lens[i] + bs - 1) / bs;
        s->seq_kv[i] = s->seq_kv[a->n_seqs + i] = NULL;
        if (nb == 0) continue;
        PL_ASSERT(nb <= a->max_blocks && btab[0] >= 0 && btab[nb - 1] < l->num_blocks);
        if (btab[nb - 1] != btab[0] + nb - 1) /* e.g. a contiguous reservation outgrown */
            return pl_fail(PL_ERR_INTERNAL, "kv store: sequence %d's %d blocks are not one run "
                           "(%d .. %d): a head-major layout reads one array per sequence",
                           (int)i, (int)nb, (int)btab[0], (int)btab[nb - 1]);
        s->seq_kv[i] = kc + (size_t)btab[0] * (size_t)bs * rb;
        s->seq_kv[a->n_seqs + i] = vc + (size_t)btab[0] * (size_t)bs * rb;
    }
    return PL_OK;
}

pl_status pl_kv_store_attention(pl_threadpool *tp, pl_kv_store *s, int32_t tensor,
                                const float *k, const float *v, const int64_t *slot_mapping,
                                int32_t n_tokens, pl_attn_args *a) {
    void *kc = pl_kv_store_k(s, tensor), *vc = pl_kv_store_v(s, tensor);
    const pl_kv_layout l = pl_kv_store_layer_layout(s, tensor); /* the tensor's own shape */
    a->k_cache = kc;
    a->v_cache = vc;
    if (!s->head_major) {
        if (k) pl_kv_write(&l, kc, vc, k, v, slot_mapping, n_tokens);
        pl_paged_attention(tp, &l, a);
        return PL_OK;
    }
    const pl_kv_layout one = one_block(&l); /* the same slot numbers, the same write */
    if (k) pl_kv_write(&one, kc, vc, k, v, slot_mapping, n_tokens);
    PL_TRY(seq_tensors(s, &l, a, kc, vc));
    const size_t rb = pl_kv_row_bytes(&l);
    pl_contig_attn_args ca = {
        .q = a->q, .out = a->out, .n_heads = a->n_heads, .scale = a->scale, .n_seqs = a->n_seqs,
        .seq_start = a->seq_start, .context_lens = a->context_lens, .k = s->seq_kv,
        .v = s->seq_kv + a->n_seqs, .window = a->window, .softcap = a->softcap, .sinks = a->sinks,
        .head_stride = (size_t)one.block_size * rb, .token_stride = rb,
    };
    pl_contig_attention(tp, &l, &ca);
    return PL_OK;
}
