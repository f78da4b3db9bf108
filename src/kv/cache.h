/* kv/cache — the one door to the KV cache (issue 32).
 *
 * A pl_kv_cache is made from the layout (paged, contiguous, vAttention; pagellm.h), the byte
 * budget and the model's shape, and owns everything the layout needs: the KV bytes (kv_store.h,
 * plus a swap store), the block manager (manager.h) and, for vAttention, the slots and page pool
 * (vattn.h). Each layout is a table of operations inside cache.c (can admit, blocks a prompt
 * takes, where a reservation goes, prepare the step, stats); nothing outside src/kv/ tests the
 * layout or reads a pool field: the scheduler asks the questions below and gets "fits now",
 * "later" or "never", as vLLM v1's allocate_slots() answers "blocks or None".
 *
 * Sequences. A sequence holds one block table, or with KV cache groups (a mixed model whose
 * layers are half windowed, half global, paged layout) two over the one pool: t for
 * the global layers (never released) and w for the window layers (released behind the window).
 *
 * Layer kinds (any other mixed model: gemma3's five window layers to one global, gemma4's
 * kinds with shapes of their own; paged): two pools of one block size, as
 * llama.cpp's iswa cache. The window pool has ceil((S W + B) / block_size) + 2 S blocks (S =
 * max_num_seqs, B = max_num_batched_tokens: what its sequences can hold at once, each its last
 * W positions and its uncomputed tokens; cache.c says why), and the rest of the budget goes to
 * the full pool, when that window pool is smaller than what the budget would give every layer
 * (else one table per sequence, nothing released). t lives in the full pool, w in the window
 * pool, under the same protocol. Every scalar question (admit blocks, headroom, free, capacity,
 * request blocks, append needed) is answered in the full pool's blocks: the window pool never
 * decides (should it lack, allocation answers PL_ERR_CAPACITY and append_needed "not now").
 * Block copies name a window-pool block b as the store's full block count + b (kv_store.h).
 * Every sequence call takes both (w unused without groups) and keeps them in step following the
 * protocol of manager.h: allocated together with one cached length, appended all or none,
 * committed, truncated, forked, freed and swapped together. The window group hashes with its own
 * extra key (key ^ PL_KV_WINDOW_KEY): its blocks hold other layers than the global group's
 * blocks of the same tokens. Block counts are the sum over the tables.
 *
 * Invariants: those of manager.h; with groups a sequence's two tables always hold the same
 * tokens; the store's block ids are the manager's (vAttention: virtual pages of the slots).
 * One thread (the engine's) calls everything here except pl_kv_cache_samples' reader side,
 * which the engine copies under its own lock.
 */
#ifndef PL_KV_CACHE_H
#define PL_KV_CACHE_H

#include "pagellm.h"

#include "base/status.h"
#include "kv/kv_store.h"
#include "kv/manager.h"

#include <stdbool.h>
#include <stdint.h>

#define PL_KV_WINDOW_KEY 0x5f3759df9e3779b9ull
#define PL_KV_MAX_TENSORS 1024 /* store tensors with layer kinds (the model's PL_MAX_LAYERS) */

typedef struct pl_kv_cache pl_kv_cache;

/* The model's shape as the cache needs it. */
typedef struct {
    int32_t n_layers, n_kv_heads, head_dim; /* n_layers: the layers that keep K/V (gemma4's
                                               shared-KV layers keep none) */
    const pl_kv_shape *layer_shapes; /* [n_layers] each layer's KV heads and head size when
                                        they differ (gemma4), else NULL: n_kv_heads, head_dim */
    int32_t kv_window;       /* every layer windowed: the window (model.h pl_model_kv_window) */
    int32_t mixed_window;    /* a mixed model, as many windowed layers as global ones: their
                                window (KV cache groups on the paged layout), else 0 */
    int32_t kinds_window;    /* any other mixed model (gemma3's 5 : 1, gemma4's kinds of their
                                own shapes): the window (layer kinds on the paged layout), else 0 */
    const uint8_t *tensor_window; /* [n_layers] with kinds_window: 1 where store tensor i is a
                                     window layer's */
    int embedding;           /* an embedding model: nothing kept between steps (2 nominal blocks) */
    const char *arch_name;   /* for messages */
} pl_kv_cache_shape;

/* The KV memory figures the paper's comparisons need, sampled at every step that runs the
 * model, after scheduling (see pl_kv_cache_sample). */
typedef struct {
    uint64_t kv_samples;                 /* steps sampled */
    double peak_kv_usage, mean_kv_usage; /* blocks used / blocks total: highest, mean */
    double peak_waste, mean_waste;       /* waste as above: highest; 1 - sum tokens / sum used
                                            slots over the samples (memory-weighted mean) */
    double mean_token_fraction;          /* tokens stored / all slots of the pool, mean */
    double mean_reserved;                /* contiguous: of the used slots, those reserved for
                                            tokens still to come (sum / sum); the rest of the
                                            waste is internal fragmentation */
    int32_t peak_blocks_used;
    int32_t peak_batch_seqs;             /* most sequences in one step (decodes + prefills) */
    int64_t block_refs;                  /* now: blocks held counting shared ones per holder */
    double mean_sharing_saved;           /* 1 - sum blocks used / sum block refs over the
                                            samples: memory saved by sharing (0 if none) */
} pl_kv_samples;

/* The layouts by name, for flags and reports (the table of operations in cache.c is the one
 * list): "paged", "contiguous", "vattention". parse returns 0, or -1 for an unknown name;
 * pl_kv_layout_names is "paged, contiguous or vattention" for messages. */
int pl_kv_layout_parse(const char *name, pl_kv_layout_mode *out);
const char *pl_kv_layout_mode_name(pl_kv_layout_mode m);
const char *pl_kv_layout_names(void);
/* Sequences of this layout may share blocks (prefix cache, fork, swap): the paged one. */
int pl_kv_layout_mode_shares(pl_kv_layout_mode m);
/* A vAttention layout: slots of mapped pages (--kv-page-size and the mapper thread apply). */
int pl_kv_layout_mode_maps_pages(pl_kv_layout_mode m);
/* The contiguous layouts' reserve policies by name: "max", "pow2", "oracle" (parse as above). */
int pl_kv_reserve_parse(const char *name, pl_reserve_policy *out);
/* How a configuration allocates: the layout's name, or for the contiguous layout its reserve
 * policy's ("max", "pow2", "oracle"). */
const char *pl_kv_allocation_name(const pl_engine_config *c);

/* The layout checks of an engine configuration (unknown layout, reserve policy, what the
 * contiguous and vAttention layouts refuse: swapping, speculation, page sizes). */
pl_status pl_kv_cache_check_config(const pl_engine_config *c);

/* Bytes of one block of the paged pool for this configuration (one KV cache group's layers). */
size_t pl_kv_cache_bytes_per_block(const pl_engine_config *c, const pl_kv_cache_shape *shape);

/* Make the cache for budget bytes (minus the draft model's share: draft_bytes_per_block > 0
 * gives the draft as many tokens as the cache, pl_kv_cache_draft_bytes says how many bytes).
 * cfg is read for the KV options and receives what the layout decides: block_size (vAttention:
 * tokens per page), kv_page_size, enable_prefix_caching (0 when nothing is shared).
 * max_model_len bounds a sequence. (Under tensor parallelism the step message carries both
 * tables of KV cache groups and layer kinds to the workers: parallel/step_msg.c.) */
pl_status pl_kv_cache_create(pl_engine_config *cfg, const pl_kv_cache_shape *shape,
                             int32_t max_model_len, size_t draft_bytes_per_block,
                             pl_kv_cache **out);
/* Bookkeeping only, no bytes (tests driving the scheduler and decoder with a fake model): the
 * layout follows mc->policy. */
pl_status pl_kv_cache_create_blocks(const pl_kv_manager_config *mc, pl_kv_cache **out);
/* Tables still live must be freed first. NULL is a no-op. */
void pl_kv_cache_destroy(pl_kv_cache *c);

/* What the cache is made of (the runner reads and writes the bytes; tests check the parts). */
pl_kv_store *pl_kv_cache_store(pl_kv_cache *c);
pl_kv_store *pl_kv_cache_swap_store(pl_kv_cache *c); /* NULL: no swap pool */
pl_kv_manager *pl_kv_cache_manager(pl_kv_cache *c);
const pl_kv_manager *pl_kv_cache_manager_c(const pl_kv_cache *c);
struct pl_vattn *pl_kv_cache_vattn(pl_kv_cache *c); /* NULL unless vAttention */
uint64_t pl_kv_cache_draft_bytes(const pl_kv_cache *c);
/* Every part's consistency (manager.h pl_kv_manager_check, vattn.h pl_vattn_check). */
pl_status pl_kv_cache_check(const pl_kv_cache *c);

/* Shape. */
int32_t pl_kv_cache_block_size(const pl_kv_cache *c);
int32_t pl_kv_cache_num_blocks(const pl_kv_cache *c);      /* primary blocks (physical) */
int32_t pl_kv_cache_max_blocks_per_seq(const pl_kv_cache *c);
int32_t pl_kv_cache_window(const pl_kv_cache *c);          /* sliding window (0: none) */
int pl_kv_cache_grouped(const pl_kv_cache *c);             /* two tables per sequence */
/* The most block copies one swap can produce: the primary blocks of every pool. */
int32_t pl_kv_cache_copy_blocks(const pl_kv_cache *c);
/* The manager of the window tables (layer kinds: the window pool's; else the one manager). */
const pl_kv_manager *pl_kv_cache_window_manager_c(const pl_kv_cache *c);
/* The same, writable: tests take window blocks through it to drive the window pool short. */
pl_kv_manager *pl_kv_cache_window_manager(pl_kv_cache *c);
/* Prefill is lazy (slots chunk by chunk: a sliding window on the paged layout). */
int pl_kv_cache_lazy_prefill(const pl_kv_cache *c);
/* Sequences may share blocks (fork, prefix cache, swap, a recomputed group's prompt). */
int pl_kv_cache_shares(const pl_kv_cache *c);
const char *pl_kv_cache_layout_name(const pl_kv_cache *c); /* "paged", "contiguous", ... */

/* Questions of admission. */
int32_t pl_kv_cache_blocks_free(const pl_kv_cache *c);
/* Free blocks beyond the watermark (may be negative). */
int32_t pl_kv_cache_headroom(const pl_kv_cache *c);
/* Blocks the cache can ever give one request (all of them but the watermark). */
int32_t pl_kv_cache_capacity(const pl_kv_cache *c);
/* A sequence of n_tokens (+1 to come) can never fit its table. */
bool pl_kv_cache_too_long(const pl_kv_cache *c, int32_t n_tokens);
/* The most blocks a request may need at its peak: the prompt once, then each of n_seqs
 * sequences' own output blocks plus a copied partial block (speculating k_spec tokens ahead);
 * a contiguous or vAttention layout: its reservation. For the admission checks of requests. */
int64_t pl_kv_cache_request_blocks(const pl_kv_cache *c, int32_t n_prompt, int32_t max_tokens,
                                   int64_t n_seqs, int32_t k_spec);
/* Blocks admitting a waiting sequence of tokens[n] takes: lazy prefill, the hits its window
 * reaches and a first chunk of `first` tokens; paged, every block less the prefix hits a table
 * holds now, its first n_given from another sequence; contiguous, its reservation for
 * final_tokens. Not const: hashing uses the pool's scratch. */
int32_t pl_kv_cache_admit_blocks(pl_kv_cache *c, const int32_t *tokens, int32_t n, uint64_t key,
                                 int32_t first, int32_t final_tokens, int32_t n_given);
/* Can `need` blocks (from pl_kv_cache_admit_blocks) be admitted: OK now (keeping the
 * watermark, and with a place for a contiguous run or a vAttention slot), LATER, or NEVER. */
pl_alloc_status pl_kv_cache_can_admit(const pl_kv_cache *c, int32_t need);
/* Prompt tokens cached for every table of a sequence (the smaller hit of two groups; vAttention:
 * the full pages a running slot holds, with --vattn-share). */
int32_t pl_kv_cache_probe(pl_kv_cache *c, const int32_t *tokens, int32_t n, uint64_t key);

/* A sequence's tables. */
int32_t pl_kv_cache_tables(const pl_kv_cache *c, pl_block_table *t, pl_block_table *w,
                           pl_block_table **out); /* out[0] = t, out[1] = w with groups */
/* Prompt tables for tokens[n]: slots for the cached tokens and at most max_new more (lazy
 * prefill) or all of them (reserving for final_tokens in a contiguous layout). */
pl_status pl_kv_cache_allocate(pl_kv_cache *c, pl_block_table *t, pl_block_table *w,
                               const int32_t *tokens, int32_t n, uint64_t key, int32_t max_new,
                               int32_t final_tokens, int32_t *n_cached);
/* t for n tokens, its first n_shared blocks those of lead (manager.h pl_kv_allocate_shared;
 * not with groups, which always come with lazy prefill). */
pl_status pl_kv_cache_allocate_shared(pl_kv_cache *c, const pl_block_table *lead,
                                      int32_t n_shared, pl_block_table *t, int32_t n);
int32_t pl_kv_cache_append_needed(const pl_kv_cache *c, const pl_block_table *t,
                                  const pl_block_table *w, int32_t n_new);
bool pl_kv_cache_can_append(const pl_kv_cache *c, const pl_block_table *t,
                            const pl_block_table *w, int32_t n_new);
/* Slots for n_new more tokens in every table, all or none; cow[2] receives each table's
 * copy-on-write pair ({-1, -1} when none). */
pl_status pl_kv_cache_append(pl_kv_cache *c, pl_block_table *t, pl_block_table *w,
                             int32_t n_new, pl_block_copy cow[2]);
pl_status pl_kv_cache_truncate(pl_kv_cache *c, pl_block_table *t, pl_block_table *w,
                               int32_t n_keep);
pl_status pl_kv_cache_commit(pl_kv_cache *c, pl_block_table *t, pl_block_table *w,
                             const int32_t *tokens, int32_t n_computed);
pl_status pl_kv_cache_fork(pl_kv_cache *c, const pl_block_table *pt, const pl_block_table *pw,
                           pl_block_table *t, pl_block_table *w);
/* Live tables t/w, about to be dropped, become a fork of pt/pw instead (a beam step's child
 * takes a dropped beam's tables): vAttention keeps t's slot and remaps only the pages that are
 * not pt's already; the paged layout frees t and forks. On failure t is freed. */
pl_status pl_kv_cache_refork(pl_kv_cache *c, const pl_block_table *pt, const pl_block_table *pw,
                             pl_block_table *t, pl_block_table *w);
void pl_kv_cache_free(pl_kv_cache *c, pl_block_table *t, pl_block_table *w);

/* Swapping a group's live tables (manager.h). */
pl_alloc_status pl_kv_cache_can_swap_out(const pl_kv_cache *c, pl_block_table *const *tables,
                                         int32_t n);
pl_alloc_status pl_kv_cache_can_swap_in(const pl_kv_cache *c, pl_block_table *const *tables,
                                        int32_t n);
pl_status pl_kv_cache_swap_out(pl_kv_cache *c, pl_block_table *const *tables, int32_t n,
                               pl_block_copy *map, int32_t cap, int32_t *n_map);
pl_status pl_kv_cache_swap_in(pl_kv_cache *c, pl_block_table *const *tables, int32_t n,
                              pl_block_copy *map, int32_t cap, int32_t *n_map);

/* Before the forward pass of a step: vAttention maps the pages the step lacks. */
pl_status pl_kv_cache_prepare_step(pl_kv_cache *c);

/* Statistics. pl_kv_cache_stats fills the KV fields of s (blocks, swap, usage, waste, tokens,
 * prefix cache, sliding window, vAttention pages); pl_kv_cache_sample takes one memory sample
 * (a step that runs n_seqs sequences, its blocks all allocated); pl_kv_cache_samples sums them
 * up with the block refs of now. */
void pl_kv_cache_stats(const pl_kv_cache *c, pl_engine_stats *s);
void pl_kv_cache_sample(pl_kv_cache *c, int32_t n_seqs);
void pl_kv_cache_samples(const pl_kv_cache *c, pl_kv_samples *out);

#endif
