/* model/forward_internal — the forward pass's scratch, shared by forward.c (decoder models)
 * and forward_bert.c (embedding models). Not a public contract: only src/model/ includes it.
 * Every buffer is allocated once in pl_forward_ctx_create; a step allocates nothing. */
#ifndef PL_MODEL_FORWARD_INTERNAL_H
#define PL_MODEL_FORWARD_INTERNAL_H

#include "model/model.h"

struct pl_forward_ctx {
    const pl_model *m;
    pl_threadpool *tp;
    int32_t max_tokens, max_logits;
    float *x;        /* [max_tokens][dim] residual stream */
    float *h;        /* [max_tokens][dim] normed input of a sub-layer */
    float *q;        /* [max_tokens][n_heads*hd] */
    float *k, *v;    /* [max_tokens][n_kv*hd] */
    float *att;      /* [max_tokens][n_heads*hd] attention output */
    float *gate;     /* [max_tokens][ffn] */
    float *up;       /* [max_tokens][ffn] */
    float *rope_cs;  /* [max_tokens][n_rot/2][2] */
    void *mm_scratch;/* quantized activations for matmul */
    int n_parts;     /* thread parts of the pool */
    float *scores;   /* bert: [n_parts][max_tokens] one attention score row per part */
    pl_forward_tp tpc; /* tensor parallel collectives (model.h); zero for a whole model */
    float *lg;       /* sharded: [max_logits][shard.n_vocab] this rank's logits columns */
    /* MoE (hp.n_expert > 0; model/moe.c): routing, the experts' gathered rows, the units of
     * work; Tc = min(max_tokens, moe.c's pass of MOE_CHUNK tokens), N = Tc * n_expert_used */
    float *moe_probs;    /* [Tc][n_expert] router logits, then softmax */
    int32_t *moe_sel;    /* [Tc][n_expert_used] chosen experts */
    float *moe_w;        /* [Tc][n_expert_used] their normalized weights */
    int32_t *moe_start;  /* [n_expert + 1] each expert's first entry in moe_tok */
    int32_t *moe_tok;    /* [N] tokens grouped by expert */
    float *moe_tw;       /* [N] their weights */
    int32_t *moe_pos;    /* [Tc][n_expert_used] where each choice's entry is in moe_tok */
    float *moe_x;        /* [N][dim] the entries' input rows, then the experts' outputs */
    float *moe_g, *moe_u;/* [N][expert_ffn] gate (then SwiGLU) and up */
    float *moe_acc;      /* [max_tokens][dim] the weighted sum of the experts' outputs */
    struct pl_moe_unit *moe_units; /* [n_expert * MAX_SPLIT] the phase's units */
    void *moe_act;       /* [n_parts][moe_act_bytes] each part's converted activations */
    size_t moe_act_bytes;
    double moe_bytes;    /* expert weight bytes read so far (pl_forward_moe_bytes) */
    /* LoRA adapters (model/lora.h; NULL until pl_forward_lora_enable) */
    int32_t lora_max_rank;
    float *lora_r;       /* [max_tokens][lora_max_rank] A x */
    float *lora_y;       /* [max_tokens][max(dim, n_heads*hd, ffn)] B (A x) */
    float *lora_x;       /* [max_tokens][the same] one adapter's input rows, gathered */
    void *lora_mm;       /* their activations converted for matmul */
    /* gemma4's per-layer embeddings (hp.per_layer_dim > 0) */
    float *ple;          /* [max_tokens][n_layers * pld] every layer's input of every token */
    float *ple_tok;      /* [n_layers * pld] one token's per_layer_token_embd row */
    float *ple_g;        /* [max_tokens][pld] the gate of one layer */
};

/* The MoE FFN (model/moe.c): its scratch, allocated once (PL_ERR_NOMEM) and freed (NULLs
 * allowed), and layer L's FFN on the normed rows c->h[T][dim] into c->moe_acc[T][dim]. */
pl_status pl_moe_scratch_alloc(pl_forward_ctx *c);
void pl_moe_scratch_free(pl_forward_ctx *c);
void pl_moe_ffn(pl_forward_ctx *c, const pl_layer_weights *L, int64_t T);
/* A layer with a dense FFN beside its experts (gemma4; model.h): pl_moe_ffn reads c->x itself
 * (the experts through moe_pre_norm, the router through gate_inp_s); then, with the dense
 * FFN's output in c->h, c->h = rmsnorm(c->h) * shexp_post_norm + rmsnorm(c->moe_acc) *
 * moe_post_norm (the norms here, after the tensor-parallel reduce of both sums). */
void pl_moe_add_shared(pl_forward_ctx *c, const pl_layer_weights *L, int64_t T);

/* Pool rows x[0..n)[dim] (mean, first or last) into out[dim] and L2-normalize it (forward_bert.c). */
void pl_pool_rows(int pooling, const float *x, int32_t n, int64_t dim, float *out);

#endif
