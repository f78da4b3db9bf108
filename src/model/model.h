/* model/model — a loaded model: hyper-parameters per architecture, weights bound to the GGUF
 * mapping, its tokenizer, and the batched forward pass over a step batch.
 *
 * Supported architectures, each computed as llama.cpp computes it (checked on random models,
 * tests/data/archs): `llama` (Llama 1/2/3, TinyLlama, Mistral, SmolLM: GQA, rope.freq_base,
 * rope.dimension_count, RMSNorm epsilon, tied embeddings when output.weight is absent; RoPE
 * scaling none / linear / yarn from `rope.scaling.*`, rope.scaling.attn_factor, Llama 3.1's
 * rope_freqs.weight factors; Mistral-style files with `llama.attention.sliding_window`, applied
 * to every layer: see docs/DESIGN.md for why pagellm applies it where llama.cpp's llama
 * architecture ignores it), `qwen2` (Q/K/V biases, NEOX RoPE), `gemma2` (embeddings scaled by
 * sqrt(dim), GeGLU with GGML's gelu, RMSNorms after the attention and the FFN outputs, attention
 * and final logit soft-capping, the window on the layers of attention.sliding_window_pattern
 * (even layers by default), queries scaled as llama.cpp decides, output tied to the
 * embeddings), `gemma3` (gemma2's layout without attention soft-capping, plus per-head Q/K
 * RMSNorms; the window on the layers of sliding_window_pattern, five of six by default, which
 * rotate with rope.freq_base_swa and no scaling; output.weight when present; the final
 * soft-cap only when its key is), `gemma4` (gemma3's layout with window and full layers of
 * their own head sizes and KV heads (per-layer arrays), the pattern from its array, V RMS-normed
 * without weight, unscaled queries, rope_freqs on the full layers, layer_output_scale, the final
 * soft-cap 30 unless the key says; the small variants' per-layer token embeddings and the
 * shared-KV layers that read an earlier layer's cache: see pl_model_kv_tensor),
 * `qwen3` (per-head Q/K RMSNorms before NEOX RoPE, no biases),
 * `qwen3moe` (qwen3's attention, a mixture-of-experts FFN), llama with `llama.expert_count` > 0
 * (Mixtral: llama's attention, the same MoE FFN),
 * `gpt-oss` (OpenAI's open-weight MoE: Q/K/V and output biases, attention sinks, the window on
 * even layers (sliding_window_pattern, default 2), YaRN RoPE, NEOX; experts with biases, the
 * router's bias, softmax over the chosen experts' logits, the clamped SwiGLU; its FFN norm is
 * post_attention_norm; expert weights typically mxfp4),
 * `mistral3` (Mistral 3 / Ministral 3 text: llama's graph plus the attention temperature of
 * attention.temperature_scale and the rope.scaling.yarn_* keys), `phi3` (fused attn_qkv and gate/up ffn_up tensors bound as row views, NEOX RoPE,
 * LongRoPE factors; its sliding_window ignored as llama.cpp does) and `bert` (an embedding
 * model: absolute positions, token type 0 added, LayerNorm after the embeddings and after each
 * sub-layer, biases everywhere, GELU, bidirectional attention over the request's own tokens, no
 * KV cache; pooled by `bert.pooling_type` mean / cls / last, or rank: a reranker whose
 * classification head cls / cls.output scores the CLS state).
 * Anything else is refused with a message naming the architecture, and so is a metadata value
 * pagellm does not implement (a RoPE scaling type, gemma2's rope.freq_base_swa, a fused QKV bias,
 * mistral3's optional output and FFN biases,
 * a value_length unlike the key_length); keys llama.cpp ignores are ignored (logged) as it does.
 * Every tensor's presence, shape and type is checked at load; a weight type the kernels cannot
 * multiply is refused naming the tensor and the type.
 *
 * Weights stay memory-mapped (no copy); only 1-D tensors (norms, biases) are converted to f32.
 * A model is immutable after load and can be shared; per-step scratch lives in pl_forward_ctx.
 */
#ifndef PL_MODEL_MODEL_H
#define PL_MODEL_MODEL_H

#include "pagellm.h"
#include "base/status.h"
#include "base/threadpool.h"
#include "gguf/gguf.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "kv/kv_store.h"
#include "model/step_batch.h"
#include "tokenizer/tokenizer.h"

enum { PL_MAX_LAYERS = 1024 }; /* block_count above this is refused at load */

typedef enum {
    PL_ARCH_LLAMA = 1, PL_ARCH_QWEN2 = 2, PL_ARCH_BERT = 3, PL_ARCH_GEMMA2 = 4, PL_ARCH_PHI3 = 5,
    PL_ARCH_QWEN3 = 6, PL_ARCH_MISTRAL3 = 7, PL_ARCH_GEMMA3 = 8, PL_ARCH_QWEN3MOE = 9,
    PL_ARCH_GPT_OSS = 10, PL_ARCH_GEMMA4 = 11
} pl_arch;

/* qwen3 and qwen3moe share the attention: per-head Q/K RMSNorms, NEOX RoPE, no biases. */
static inline int pl_arch_is_qwen3(pl_arch a) { return a == PL_ARCH_QWEN3 || a == PL_ARCH_QWEN3MOE; }

/* The Gemma families' shared traits: embeddings scaled by sqrt(dim), GeGLU, RMSNorms after the
 * attention and FFN outputs. */
static inline int pl_arch_is_gemma(pl_arch a) {
    return a == PL_ARCH_GEMMA2 || a == PL_ARCH_GEMMA3 || a == PL_ARCH_GEMMA4;
}

/* How an embedding model turns its last hidden states into one vector (llama.cpp's numbering
 * of `<arch>.pooling_type`). NONE: a generation model (no embeddings). */
typedef enum {
    PL_POOL_NONE = 0, PL_POOL_MEAN = 1, PL_POOL_CLS = 2, PL_POOL_LAST = 3,
    PL_POOL_RANK = 4 /* a cross-encoder (bert with a classification head): a score per pair */
} pl_pooling;

typedef struct {
    pl_arch arch;
    char arch_name[32];
    int32_t n_vocab;
    int32_t n_ctx_train;  /* trained context length */
    int32_t n_ctx_orig;   /* rope.scaling.original_context_length (default n_ctx_train) */
    int32_t dim;          /* embedding length */
    int32_t n_layers;
    int32_t n_heads;
    int32_t n_kv_heads;
    int32_t head_dim;
    int32_t ffn_dim;
    float norm_eps;
    pl_rope_params rope;  /* mode, n_rot, freq_base, freq_scale, freq_factors */
    /* gemma3: the window layers rotate with their own base (rope.freq_base_swa, default 10000)
     * and no scaling, as llama.cpp's get_rope_freq_base/scale; has_rope_swa 0: every layer
     * uses rope. */
    int32_t has_rope_swa;
    pl_rope_params rope_swa;
    /* mistral3 (Llama 4's attention temperature tuning): after RoPE the queries at position p
     * are scaled by 1 + attn_temp_scale * ln(floor(p / attn_temp_floor) + 1); 0: none. */
    float attn_temp_scale;
    int32_t attn_temp_floor;  /* rope.scaling.original_context_length */
    pl_pooling pooling;   /* embedding models (bert): how hidden states are pooled; else NONE */
    float attn_scale;     /* applied to q·k: 1/sqrt(head_dim) unless the architecture says */
    float attn_softcap;   /* gemma2: scores = cap * tanh(score / cap) before softmax; 0: none */
    float final_softcap;  /* gemma2: logits = cap * tanh(logit / cap); 0: none */
    /* Sliding-window attention: `<arch>.attention.sliding_window` (0 or absent: none). Layer l
     * attends to its last sliding_window positions when swa_layers[l] (kernels/attention.h),
     * to all of them otherwise. Set for every layer when the key is set, unless the
     * architecture defines its own pattern (e.g. alternating local / global layers). */
    int32_t sliding_window;
    uint8_t swa_layers[PL_MAX_LAYERS];
    /* Mixture of experts (qwen3moe; llama with `llama.expert_count` > 0, Mixtral): each layer's
     * FFN is n_expert SwiGLU experts of width expert_ffn; a token goes through the
     * n_expert_used of highest softmax(router logits), weighted by those probabilities divided
     * by their sum (llama.cpp's norm_w). n_expert 0: a dense FFN of ffn_dim. */
    int32_t n_expert, n_expert_used, expert_ffn;
    /* gpt-oss (llama.cpp's LLAMA_EXPERT_GATING_FUNC_TYPE_SOFTMAX_WEIGHT and swiglu_oai): the
     * top-k by raw router logits (bias added), their weights the softmax over those k logits,
     * unnormalized otherwise; the experts' SwiGLU clamped: gate min(g, limit), up clamped to
     * [-limit, limit], out = g sigmoid(alpha g) (up + 1), alpha 1.702, limit 7. */
    int32_t moe_softmax_weight;
    float swiglu_alpha, swiglu_limit; /* limit 0: the plain SwiGLU */
    /* gemma4's MoE variant: the experts' GeGLU (not SwiGLU); see pl_layer_weights' shared FFN */
    int32_t moe_geglu;
    /* gemma4 (0 elsewhere). Its window and full layers have their own KV heads and head sizes
     * (kv_shaped: layer l's are kv_shapes[l]; n_kv_heads / head_dim are then the largest, which
     * size the scratch), the window layers their own rotated dims (rope_swa.n_rot). The last
     * n_kv_shared layers compute no K/V: they read the store tensor of pl_model_kv_tensor (the
     * last earlier layer of their kind), so the KV store has n_layers - n_kv_shared tensors.
     * per_layer_dim > 0: the small variants' per-layer token embeddings, that many values per
     * layer and token. ffn_dim is the widest layer's (the FFN width may vary per layer). */
    int32_t kv_shaped;
    int32_t n_kv_shared;
    int32_t per_layer_dim;
    pl_kv_shape kv_shapes[PL_MAX_LAYERS];
} pl_model_hparams;

/* The attention window of layer l: hp->sliding_window if the layer uses it, else 0 (full). */
static inline int32_t pl_model_layer_window(const pl_model_hparams *hp, int32_t l) {
    return hp->sliding_window > 0 && hp->swa_layers[l] ? hp->sliding_window : 0;
}

/* The smallest window over all layers if every layer has one, else 0: a block whose tokens all
 * left it is read by no layer again (the KV manager may free it). */
int32_t pl_model_kv_window(const pl_model_hparams *hp);

/* Layer l's KV heads and head size (gemma4's differ by layer kind). */
static inline pl_kv_shape pl_model_layer_shape(const pl_model_hparams *hp, int32_t l) {
    return hp->kv_shaped ? hp->kv_shapes[l] : (pl_kv_shape){hp->n_kv_heads, hp->head_dim};
}

/* The shapes of the store tensors (pl_kv_store_init_shaped), or NULL when every layer has
 * n_kv_heads heads of head_dim. */
static inline const pl_kv_shape *pl_model_kv_shapes(const pl_model_hparams *hp) {
    return hp->kv_shaped ? hp->kv_shapes : NULL;
}

/* The KV store tensors the model needs: one per layer that computes K/V. */
static inline int32_t pl_model_kv_tensors(const pl_model_hparams *hp) {
    return hp->n_layers - hp->n_kv_shared;
}

/* The store tensor layer l reads (without KV cache groups): its own, or for a gemma4 layer that
 * shares KV the last layer of its kind that has its own (llama.cpp's reuse rule: the last KV
 * layer for a full layer, the one before it for a window layer; the loader checks the kinds). */
static inline int32_t pl_model_kv_tensor(const pl_model_hparams *hp, int32_t l) {
    const int32_t n = pl_model_kv_tensors(hp);
    return l < n ? l : n - (hp->swa_layers[l] ? 2 : 1);
}

typedef struct {
    float *attn_norm;                 /* [dim] */
    pl_weight wq, wk, wv, wo;         /* [n_heads*hd x dim], [n_kv*hd x dim] x2, [dim x n_heads*hd] */
    float *bq, *bk, *bv;              /* qwen2 biases or NULL */
    float *q_norm, *k_norm;           /* qwen3, gemma3: per-head RMSNorm weights [head_dim] of
                                         Q and K before RoPE, or NULL */
    float *ffn_norm;                  /* [dim] */
    pl_weight w_gate, w_up, w_down;   /* [ffn x dim] x2, [dim x ffn] (bert: no gate) */
    /* bert only (NULL otherwise): output and FFN biases, the post-sub-layer LayerNorms. */
    float *bo, *b_up, *b_down;        /* [dim], [ffn], [dim] (gpt-oss: bo) */
    float *attn_out_norm, *attn_out_norm_b;   /* [dim] x2 */
    float *out_norm, *out_norm_b;     /* [dim] x2 */
    /* gemma2, gemma3 (NULL otherwise): RMSNorms of the attention and FFN outputs. */
    float *attn_post_norm, *ffn_post_norm; /* [dim] x2 */
    /* gemma4's per-layer embedding (hp.per_layer_dim > 0, else unbound): the gate
     * [pld x dim], the projection [dim x pld] and its norm [dim]; its optional output scale
     * (1 value, or NULL). */
    pl_weight ple_gate, ple_proj;
    float *ple_post_norm;
    float *out_scale;
    /* MoE (hp.n_expert > 0; w_gate/w_up/w_down unused): the router [n_expert x dim] and each
     * expert's matrices, slices of the GGUF 3-D tensors ffn_{gate,up,down}_exps: exp_gate[e],
     * exp_up[e] [expert_ffn x dim], exp_down[e] [dim x expert_ffn] (one allocation of 3
     * n_expert weights at exp_gate). */
    pl_weight gate_inp;
    pl_weight *exp_gate, *exp_up, *exp_down;
    /* gpt-oss (NULL otherwise): the router's bias [n_expert], the experts' biases
     * [n_expert][expert_ffn] x2 and [n_expert][dim] (one allocation at exp_gate_b), the
     * attention sinks [n_heads]; its attention output bias is bo. */
    float *gate_inp_b, *exp_gate_b, *exp_up_b, *exp_down_b;
    float *attn_sinks;
    /* Per-expert scales [n_expert] (NULL: 1): each expert's gate / up / down output times its
     * value (llama.cpp's ffn_{gate,up,down}_exps.scale; gemma4 has down's). */
    float *exp_gate_s, *exp_up_s, *exp_down_s;
    /* A dense FFN beside the experts (gemma4's MoE layers: w_gate/w_up/w_down bound with
     * exp_gate): h = rmsnorm(x) * ffn_norm through the dense FFN, normed by shexp_post_norm;
     * the experts take rmsnorm(x) * moe_pre_norm, their sum normed by moe_post_norm; the FFN's
     * output is the sum of the two. The router then reads rmsnorm(x) * gate_inp_s (gemma4's
     * router scale [dim], already divided by sqrt(dim)) instead of the experts' input. */
    float *shexp_post_norm, *moe_pre_norm, *moe_post_norm, *gate_inp_s;
} pl_layer_weights;

/* Tensor parallelism (issue 13): which slice of every layer this process holds. A shard of
 * `size` > 1 holds, of each layer, the attention heads [rank * n/size, (rank + 1) * n/size) of
 * Q and the KV heads likewise of K and V (rows of wq/wk/wv), the matching columns of wo, the
 * FFN rows [rank * f/size, ...) of gate/up and the same columns of down, and of the output
 * layer the vocabulary rows [vocab0, vocab0 + n_vocab) (vocab0 = n_vocab_total * rank / size);
 * norms and the token embeddings are whole (a lookup touches only the rows it reads). hp then counts the LOCAL heads and FFN width (so scratch, the KV
 * layout and attention follow it unchanged); the full counts are kept here. Row slices are
 * views into the mapping; column slices are copied once (rows are contiguous in GGUF) and the
 * mapped pages of the whole tensor released, so a rank's resident weights are its slices.
 * Mixtures of experts (issue 34) shard every expert as a dense FFN: each rank holds all experts,
 * rows [rank * ef/size, ...) of each one's gate/up (and their biases) and the same columns of
 * its down; the router is whole on every rank (each routes every token alike), and an expert's
 * down bias and gpt-oss's attention output bias are added once, on rank 0 (NULL elsewhere);
 * gpt-oss's attention sinks follow their heads. hp.expert_ffn is then the local width too. */
typedef struct {
    int32_t rank, size;            /* 0, 1 when not sharded */
    int32_t n_heads, n_kv_heads;   /* the model's full counts */
    int32_t ffn_dim, expert_ffn;
    int32_t vocab0, n_vocab;       /* this rank's rows of the output layer (all of them when
                                      PAGELLM_TP_OUTPUT=rank0: a benchmark of the alternative,
                                      rank 0 alone computing whole logits rows) */
} pl_model_shard;

typedef struct {
    pl_gguf *file;
    pl_model_hparams hp;           /* sharded: local n_heads, n_kv_heads, ffn_dim */
    pl_model_shard shard;
    void **owned;                  /* [n_owned] copied column slices, freed with the model */
    int32_t n_owned;
    size_t owned_bytes;            /* their total size */
    size_t released_bytes;         /* mapped tensor bytes let go after their repacking */
    int f16_as_bf16;               /* F16 matrices converted to bf16 at load (pl_f16_weights) */
    pl_tokenizer *tok;
    pl_weight tok_embd;         /* [n_vocab x dim] rows dequantized on lookup */
    float *output_norm;         /* [dim] */
    pl_weight output;           /* [n_vocab x dim]; = tok_embd when tied; a shard's vocabulary
                                   rows only (shard.n_vocab) */
    float *rope_freqs;          /* [n_rot/2] or NULL */
    /* gemma4 with per-layer embeddings (hp.per_layer_dim > 0): per_layer_token_embd
     * [n_vocab x n_layers * pld] (rows dequantized on lookup), per_layer_model_proj
     * [n_layers * pld x dim], per_layer_proj_norm [pld]. ones: [head_dim] of 1 (gemma4's V
     * RMSNorm has no weight). */
    pl_weight ple_embd, ple_model_proj;
    float *ple_proj_norm;
    float *ones;
    pl_layer_weights *layers;   /* [n_layers] */
    /* bert only: */
    pl_weight pos_embd;         /* [n_ctx_train x dim] absolute position embeddings */
    float *type_embd;           /* [dim] token type 0's embedding, or NULL */
    float *embd_norm, *embd_norm_b; /* [dim] LayerNorm after the embeddings */
    /* bert with pooling rank (a reranker): the classification head on the CLS state,
     * score = cls_out tanh(cls x + cls_b) + cls_out_b; either layer may be absent (data NULL). */
    pl_weight cls, cls_out;     /* [dim x dim], [n_cls_out x dim] */
    float *cls_b, *cls_out_b;   /* [dim], [n_cls_out] or NULL */
    int32_t n_cls_out;          /* scores per pair (the head's outputs; 1 for a reranker) */
} pl_model;

pl_status pl_model_load(const char *path, pl_model **out);
/* Load shard `rank` of `size` (see pl_model_shard; size 1 = pl_model_load). Refuses, naming the
 * numbers, a size that does not divide the KV heads or the FFN width, a column slice that does
 * not fall on the weight type's quantization blocks (an expert's down columns too), and
 * bert (an embedding model); a mixture of experts also needs size to divide its experts'
 * width, gemma4 every layer's KV heads and FFN width (hp.kv_shapes then hold the local KV
 * heads). gemma4's per-layer embedding matrices stay whole on every rank. */
pl_status pl_model_load_shard(const char *path, int32_t rank, int32_t size, pl_model **out);
/* The same with F16 matrices kept or converted to bf16 (pagellm.h's pl_f16_weights; the others
 * take DEFAULT): each converted in one copy (pl_matmul_f16_to_bf16, x16 where the level repacks
 * bf16), its mapped pages released before the next, as a repacking. BF16 below the avx512 level,
 * or a PAGELLM_F16_WEIGHTS that is not f16 / bf16, is refused naming it. */
pl_status pl_model_load_with(const char *path, int32_t rank, int32_t size, pl_f16_weights f16,
                             pl_model **out);
void pl_model_destroy(pl_model *m);

/* Scratch for forward steps of up to max_tokens tokens and max_logits logit rows. */
typedef struct pl_forward_ctx pl_forward_ctx;

pl_status pl_forward_ctx_create(const pl_model *m, int32_t max_tokens, int32_t max_logits,
                                pl_threadpool *tp, pl_forward_ctx **out);
/* A sharded model's collectives (all ranks call them in the same order; a failure, a rank gone,
 * fails the step):
 *  - reduce: after the attention output projection and after the FFN down projection (and
 *    the experts' weighted sum: in gemma4's MoE layers, beside the dense FFN's, apart), x[n]
 *    (n = tokens x dim) becomes the sum of every rank's x (the same bits on every rank: parallel/
 *    sums in rank order);
 *  - gather: part[rows][shard.n_vocab] are this rank's logits columns; rank 0 receives the whole
 *    rows into logits[rows][n_vocab_total] (other ranks pass logits = NULL to the forward pass).
 * Both NULL: a whole model, nothing to combine. */
typedef struct {
    pl_status (*reduce)(void *ud, float *x, int64_t n);
    pl_status (*gather)(void *ud, const float *part, int32_t rows, float *logits);
    void *ud;
} pl_forward_tp;
void pl_forward_set_tp(pl_forward_ctx *c, const pl_forward_tp *tp);
void pl_forward_ctx_destroy(pl_forward_ctx *c);
/* Bytes of expert weights (gate, up and down of every active expert, GGUF's sizes) that the
 * MoE passes of the steps run on c have read since its creation: a step reads only its
 * tokens' experts, each once per pass (bench model's GB/s at batch > 1). 0 for dense models. */
double pl_forward_moe_bytes(const pl_forward_ctx *c);

/* Run one step: write every token's K/V into its slot of `kv`, and put the logits of the rows
 * in b->logit_rows into logits[n_logits][n_vocab]. The store's layout must match the model
 * (n_layers, n_kv_heads, head_dim). */
pl_status pl_model_forward(pl_forward_ctx *c, pl_kv_store *kv, const pl_step_batch *b,
                           float *logits);

/* Embeddings from a generation model (llama.cpp's --pooling): the sequences of a step batch, each
 * a whole input (positions from 0), whose final-normed hidden states are pooled and
 * L2-normalized into out[i][dim]. They get no logits rows. */
typedef struct {
    int32_t n;                /* sequences to pool */
    const int32_t *seqs;      /* [n] sequence indices of the batch */
    int32_t pooling;          /* pl_pooling: mean, first token, last token */
    float *out;               /* [n][dim] */
} pl_pool_request;

/* pl_model_forward, plus the pooled embeddings of pool (NULL: none). */
pl_status pl_model_forward_pooled(pl_forward_ctx *c, pl_kv_store *kv, const pl_step_batch *b,
                                  float *logits, const pl_pool_request *pool);

/* An embedding model's step (hp.pooling != NONE; forward_bert.c): every sequence of b is a whole
 * input, attended bidirectionally over its own tokens (the KV cache is not used: slot_mapping,
 * context_lens and block tables are ignored). out[i][dim] receives sequence i's pooled hidden
 * state (pooling, or the model's own when 0), L2-normalized. A sequence's result depends on its
 * tokens only, never on the others in the batch (bitwise). */
pl_status pl_model_embed(pl_forward_ctx *c, const pl_step_batch *b, int32_t pooling, float *out);
/* Floats per sequence pl_model_embed writes: n_cls_out for a reranker (pooling rank: the
 * classification head's raw outputs, not normalized), else dim. */
int32_t pl_model_embed_dim(const pl_model *m);

#endif
