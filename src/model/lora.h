/* model/lora — LoRA adapters: loading and checking them against a base model, the set an engine
 * serves (names, reference counts), and adding their low-rank products in the forward pass.
 *
 * File format: a GGUF as llama.cpp's convert_lora_to_gguf.py writes it: general.type "adapter",
 * adapter.type "lora", general.architecture the base model's, adapter.lora.alpha (absent or 0:
 * no alpha scaling), and for each adapted matrix W (`blk.N.attn_q.weight`, ...) the pair
 * `W.lora_a` [ne0 = W's columns, ne1 = rank] and `W.lora_b` [ne0 = rank, ne1 = W's rows], f32,
 * f16 or bf16. Its output is W x + scale * B (A x), scale = user scale * alpha / rank (the
 * pair's rank; the user scale alone when alpha is 0), as llama.cpp's build_lora_mm. Adaptable:
 * attn_q, attn_k, attn_v, attn_output, ffn_gate, ffn_up, ffn_down of every layer; anything else
 * (token_embd, output, fused phi3 tensors, MoE experts, aLoRA) is refused naming the tensor.
 *
 * Invariants: an adapter is immutable once loaded and freed when its last reference goes (the
 * set holds one while it is listed, each request one while it runs), so unloading one that
 * running requests use never pulls its weights from under them. Its A and B matrices are views
 * into its mapped GGUF (pl_weight rows layout). uid is unique per load in a process: the prefix
 * cache keys blocks by it, so two adapters (or one reloaded from another file) share no KV.
 */
#ifndef PL_MODEL_LORA_H
#define PL_MODEL_LORA_H

#include "model/model.h"

#include <pthread.h>
#include <stdatomic.h>

typedef enum {
    PL_LORA_Q, PL_LORA_K, PL_LORA_V, PL_LORA_O, PL_LORA_GATE, PL_LORA_UP, PL_LORA_DOWN,
    PL_LORA_N_TARGETS
} pl_lora_target;

/* GGUF names of the targets: "attn_q", ..., "ffn_down". */
extern const char *const pl_lora_target_names[PL_LORA_N_TARGETS];

typedef struct {
    pl_weight a;          /* [rank x cols of W] (data NULL: this matrix is not adapted) */
    pl_weight b;          /* [rows of W x rank] */
    float scale;          /* user scale * alpha / rank, or the user scale when alpha is 0 */
} pl_lora_pair;

typedef struct pl_lora {
    char name[128];
    char path[1024];
    uint64_t uid;         /* unique per load (prefix-cache key) */
    float alpha;          /* adapter.lora.alpha (0: none) */
    int32_t n_layers;
    int32_t max_rank;     /* the largest pair's rank */
    int32_t n_pairs;
    pl_lora_pair (*layers)[PL_LORA_N_TARGETS]; /* [n_layers] */
    pl_gguf *file;
    atomic_int refs;
} pl_lora;

/* Load `path` as an adapter of m with user scale `scale`; every failure names the file and the
 * key or tensor (PL_ERR_FORMAT malformed, PL_ERR_UNSUPPORTED a tensor, type or model it cannot
 * adapt, PL_ERR_INVALID_ARG another base model, shape or a rank above max_rank). One reference. */
pl_status pl_lora_load(const pl_model *m, const char *path, float scale, int32_t max_rank,
                       pl_lora **out);
void pl_lora_ref(pl_lora *a);
void pl_lora_unref(pl_lora *a);   /* NULL is fine */
/* The prefix-cache key of requests under a (0 for the base model). */
uint64_t pl_lora_cache_key(const pl_lora *a);

/* The adapters an engine serves, by name; any thread. */
typedef struct {
    pthread_mutex_t mu;
    const pl_model *model;
    int32_t max_rank;     /* 0: adapters are off */
    pl_lora **items;
    int32_t n, cap;
    uint64_t acquired;    /* references handed to requests so far (metrics) */
} pl_lora_set;

void pl_lora_set_init(pl_lora_set *s, const pl_model *m, int32_t max_rank);
void pl_lora_set_destroy(pl_lora_set *s);
/* Load and list an adapter under `name` (1..127 bytes): PL_ERR_INVALID_ARG when the name is in
 * use or adapters are off, else pl_lora_load's errors. */
pl_status pl_lora_set_add(pl_lora_set *s, const char *name, const char *path, float scale);
/* Unlist it (PL_ERR_NOT_FOUND naming it); running requests keep their reference. */
pl_status pl_lora_set_remove(pl_lora_set *s, const char *name);
/* A new reference to the adapter named `name`, or NULL. */
pl_lora *pl_lora_set_acquire(pl_lora_set *s, const char *name);
/* Copies of up to cap listed adapters' names and paths (out may be NULL when cap is 0); returns
 * how many are listed; *acquired (if not NULL) the references handed out so far. */
int32_t pl_lora_set_list(pl_lora_set *s, pl_lora_info *out, int32_t cap, uint64_t *acquired);

/* Forward pass: scratch for adapters of rank <= max_rank (allocated once, at engine start). */
pl_status pl_forward_lora_enable(pl_forward_ctx *c, int32_t max_rank);
/* y[t][0..rows) += scale B (A x[t]) for every token t of a sequence whose adapter adapts target
 * `tgt` of `layer` (b->seq_lora; x has stride `in`, y stride ldy). Each adapter's rows, wherever
 * its sequences sit in the batch, are one product (gathered unless already one run), so its A
 * and B are read once per step; each row's result is independent of the others (bitwise). */
void pl_lora_apply(pl_forward_ctx *c, const pl_step_batch *b, int32_t layer, pl_lora_target tgt,
                   const float *x, int64_t in, float *y, int64_t ldy);

#endif
