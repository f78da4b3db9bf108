/* kv/kv_store — the bytes of a KV cache pool: for every layer one K and one V array indexed by
 * physical block, in the layout documented in kernels/attention.h.
 *
 * A store is sized once (from a byte budget or a block count) and never grows. The primary pool
 * is anonymous memory; a swap pool may instead be a file-backed shared mapping (`path`), so
 * swapped-out blocks can live on disk. Everything about which block belongs to whom lives in
 * kv/block_pool and kv/manager; the store only knows bytes.
 *
 * Inside the mapping, layer after layer: that layer's K array, then its V array, each
 * layer_bytes long (page-aligned base; every row starts on a multiple of its element size: 4 for
 * f32, 2 for f16 / bf16 and for q8_0 / q4_0 blocks of 34 / 18 bytes, whose f16 scale is read
 * as such). The bytes per block follow the dtype (kernels/attention.h). Anonymous
 * stores start zero-filled. A file-backed store creates or truncates `path`, sizes it with
 * ftruncate and maps it MAP_SHARED; the file is left in place on free (whoever named it removes
 * it). Init refuses, with a message naming the budget (blocks x bytes per block, layers, dtype),
 * layouts the kernels cannot serve and budgets that overflow or cannot be mapped.
 *
 * Two orders inside a layer's array, the same bytes and the same slot numbers (slot = block x
 * block_size + offset):
 *   paged       [block][kv_head][block_size][row] (kernels/attention.h), read through block
 *               tables by pl_paged_attention;
 *   head-major  [kv_head][slot][row]: the paged order with one block holding every slot. A
 *               sequence whose blocks are consecutive (the contiguous and vAttention layouts: a
 *               reservation, a slot's pages) is, for each KV head, one run of rows starting at
 *               its first slot, read by the contiguous kernel (kernels/attention_contig.h)
 *               without its block table. Blocks are not byte ranges there: no block copies.
 *
 * Per-layer shapes (Gemma 4: window and full layers with their own KV heads and head sizes): a
 * store made with `shapes` gives layer i the layout's dtype, block size and block count with
 * shapes[i]'s n_kv_heads and head_dim, and its K and V arrays exactly that layer's size; a block
 * id still names the same slot of every layer. Without shapes every layer has the layout's.
 *
 * Two pools (pl_kv_store_init_kinds, Gemma 3 / 4 with their window layers' blocks released):
 * the window-kind tensors have a block count of their own, and a block id names a slot of
 * every tensor of its kind only.
 */
#ifndef PL_KV_KV_STORE_H
#define PL_KV_KV_STORE_H

#include "base/status.h"
#include "kernels/attention.h"

#include <stddef.h>
#include <stdint.h>

/* One layer's K/V shape when layers differ. */
typedef struct {
    int32_t n_kv_heads, head_dim;
} pl_kv_shape;

typedef struct {
    pl_kv_layout layout;   /* dtype, block_size, n_kv_heads, head_dim, num_blocks */
    int32_t n_layers;
    size_t layer_bytes;    /* bytes of K (or V) of one layer: num_blocks × block bytes (a
                              store with shapes: unused) */
    void *base;            /* one mapping holding every layer's K then V */
    size_t mapped_bytes;
    int file_backed;
    int head_major;        /* 1: [kv_head][slot][row], attended by the contiguous kernel */
    const void **seq_kv;   /* head-major: scratch for the sequences' K and V tensors */
    int32_t seq_kv_cap;    /* sequences seq_kv holds */
    pl_kv_shape *shapes;   /* [n_layers] per-layer shapes (owned), or NULL: all the layout's */
    size_t *layer_off;     /* with shapes: [n_layers] byte offset of each layer's K array */
    uint8_t *kinds;        /* two pools (layer kinds): [n_layers] 1 = a window-kind tensor of
                              num_blocks_w blocks, 0 = layout.num_blocks; NULL: one pool */
    int64_t num_blocks_w;
} pl_kv_store;

/* PL_ERR_UNSUPPORTED with a message naming the dtype and head_dim when the kernels cannot serve
 * that layout (e.g. q8_0 with a head_dim that is not a multiple of 32). */
pl_status pl_kv_layout_check(const pl_kv_layout *l);
/* Bytes one block costs across all layers, K and V (0 if that overflows or the layout is not
 * served). The dtype sets it: per 32 values f32 128 bytes, f16/bf16 64, q8_0 34, q4_0 18. */
size_t pl_kv_bytes_per_block(const pl_kv_layout *l, int32_t n_layers);
/* The same with per-layer shapes (NULL: pl_kv_bytes_per_block). */
size_t pl_kv_bytes_per_block_shaped(const pl_kv_layout *l, int32_t n_layers,
                                    const pl_kv_shape *shapes);
/* num_blocks in layout is taken as given; path NULL = anonymous memory. */
pl_status pl_kv_store_init(pl_kv_store *s, const pl_kv_layout *layout, int32_t n_layers,
                           const char *path);
/* pl_kv_store_init with per-layer shapes ([n_layers], copied; NULL: the layout's). */
pl_status pl_kv_store_init_shaped(pl_kv_store *s, const pl_kv_layout *layout, int32_t n_layers,
                                  const pl_kv_shape *shapes, const char *path);
/* The same with two pools of one block size (kv/cache.h's layer kinds): tensor i has
 * num_blocks_w blocks where kinds[i] (the window kind's pool), layout->num_blocks elsewhere.
 * Block copies (pl_kv_store_copy) then name a window-kind block b as num_blocks + b. */
pl_status pl_kv_store_init_kinds(pl_kv_store *s, const pl_kv_layout *layout, int32_t n_layers,
                                 const pl_kv_shape *shapes, const uint8_t *kinds,
                                 int64_t num_blocks_w, const char *path);
/* Layer `layer`'s layout (the store's, with that layer's shape and block count). */
pl_kv_layout pl_kv_store_layer_layout(const pl_kv_store *s, int32_t layer);
void pl_kv_store_destroy(pl_kv_store *s);
void *pl_kv_store_k(const pl_kv_store *s, int32_t layer);
void *pl_kv_store_v(const pl_kv_store *s, int32_t layer);
/* One layer's attention of a step (`tensor`: the store's layer): writes the step's K/V rows
 * (k, v: [n_tokens][n_kv_heads][head_dim], the tensor's own shape; k NULL: nothing written,
 * a layer reading an earlier layer's KV, Gemma 4) to their slots, then attends a->q over the
 * cache into a->out. A paged store runs pl_paged_attention with a's block tables; a head-major one
 * takes each sequence's tensor at its first block and runs pl_contig_attention (PL_ERR_INTERNAL
 * naming the sequence if its blocks are not one consecutive run). a->k_cache and a->v_cache are
 * set here. PL_ERR_NOMEM if the sequences' scratch cannot grow. */
pl_status pl_kv_store_attention(pl_threadpool *tp, pl_kv_store *s, int32_t tensor,
                                const float *k, const float *v, const int64_t *slot_mapping,
                                int32_t n_tokens, pl_attn_args *a);
/* Copy block pairs in every layer (copy-on-write within a store, or swap between stores whose
 * layouts differ at most in num_blocks; ids are checked against each store's own count). Paged
 * stores only. Two pools: a pair of ids >= each store's layout.num_blocks is a window-kind
 * pair (less those counts), copied in the window-kind tensors; the others in the rest. */
void pl_kv_store_copy(const pl_kv_store *src, pl_kv_store *dst, const int32_t *src_blocks,
                      const int32_t *dst_blocks, int32_t n);

#endif
