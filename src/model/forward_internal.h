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
    /* MoE (hp.n_expert > 0): routing and the experts' gathered rows */
    float *moe_probs;    /* [max_tokens][n_expert] router softmax */
    int32_t *moe_sel;    /* [max_tokens][n_expert_used] chosen experts */
    float *moe_w;        /* [max_tokens][n_expert_used] their normalized weights */
    int32_t *moe_start;  /* [n_expert + 1] each expert's first entry in moe_tok */
    int32_t *moe_tok;    /* [max_tokens * n_expert_used] tokens grouped by expert */
    float *moe_tw;       /* [max_tokens * n_expert_used] their weights */
    float *moe_x;        /* [max_tokens][dim] one expert's gathered input rows */
    float *moe_acc;      /* [max_tokens][dim] the weighted sum of the experts' outputs */
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

/* Pool rows x[0..n)[dim] (mean, first or last) into out[dim] and L2-normalize it (forward_bert.c). */
void pl_pool_rows(int pooling, const float *x, int32_t n, int64_t dim, float *out);

#endif
