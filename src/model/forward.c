/* model/forward — the batched forward pass over one step batch, read top to bottom:
 *
 *   x = embed(tokens)                                   (gemma2/3: * sqrt(dim))
 *   for each layer:
 *       h = rmsnorm(x) * attn_norm
 *       q, k, v = Wq h (+bq), Wk h (+bk), Wv h (+bv)
 *       (qwen3, gemma3: q, k = rmsnorm per head * q_norm, k_norm)
 *       rope(q, k)                   (gemma3: the window layers' own base; mistral3: then q
 *                                     scaled by its position's attention temperature)
 *       write k, v into their KV slots;  a = attention(q, cache)  (paged, or contiguous for a
 *                                       head-major store: kv/kv_store.h)
 *                      (the layer's window; gemma2: scores soft-capped, queries scaled by hp)
 *                      (gpt-oss: a sink logit per head in the softmax's denominator)
 *       x += Wo a (+bo)                                 (gemma2: rmsnorm(Wo a) * attn_post_norm)
 *       h = rmsnorm(x) * ffn_norm
 *       x += Wdown (silu(Wgate h) * Wup h)   (gemma2: gelu; rmsnorm(...) * ffn_post_norm)
 *            MoE (qwen3moe, Mixtral): x += sum over the token's top-k experts e of
 *            w_e * Wdown_e (silu(Wgate_e h) * Wup_e h)   (model/moe.c)
 *            (gpt-oss: router and experts with biases, w = softmax over the top-k logits, the
 *             clamped SwiGLU swiglu_oai)
 *   (LoRA: a sequence's adapter adds scale B (A h) to each adapted W h on its rows: lora.h)
 *       gemma4: layers of two kinds (window, full) with their own head sizes and KV heads;
 *       v = rmsnorm(v) without weight; queries not scaled; the last shared_kv_layers compute
 *       only q and attend to an earlier layer's cache; after the FFN, with per-layer
 *       embeddings, x += rmsnorm(Wproj (gelu(Wgate x) * ple[l])) * post_norm, where ple[l] is
 *       the layer's slice of (rmsnorm(Wple x0 / sqrt(dim)) + tok_ple * sqrt(pld)) / sqrt(2);
 *       then x *= layer_output_scale when present. Its MoE variant: the FFN is the sum of
 *       rmsnorm(dense FFN(rmsnorm(x) * ffn_norm)) * post_ffw_norm_1 and
 *       rmsnorm(experts(rmsnorm(x) * pre_ffw_norm_2)) * post_ffw_norm_2 (GeGLU experts, each
 *       output times its down scale, routed on rmsnorm(x) * router scale / sqrt(dim))
 *   logits = Wout (rmsnorm(x[logit rows]) * output_norm)   (gemma2: cap * tanh(logits / cap))
 *
 * Tensor parallel (a sharded model, model.h): each rank holds some heads and FFN rows (MoE:
 * some rows of every expert, the router whole), so Wo a, Wdown(...) and the experts' weighted
 * sum are partial sums that the reduce hook adds up over ranks before the residual
 * add (and before the Gemma post-norms, which are not linear: gemma4's MoE layers reduce the dense
 * FFN and the experts apart, each before its own norm); x is then the same on every rank.
 * gemma4's per-layer embeddings are whole on every rank, computed alike from the same x.
 * Each rank computes the logits of its vocabulary rows, which the gather hook assembles on
 * rank 0 (where gemma2's final soft-capping is applied).
 *   pooled = l2normalize(pool(rmsnorm(x[a whole input's rows]) * output_norm))   (embeddings)
 *
 * Every matmul covers all tokens of the step at once, so each weight is read once per step.
 * All scratch is allocated in pl_forward_ctx_create; a step allocates nothing.
 */
#include "model/model.h"
#include "base/buf.h"

#include "kernels/attention.h"
#include "model/forward_internal.h"
#include "model/lora.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static size_t max_scratch(const pl_model *m, int64_t B) {
    const pl_model_hparams *hp = &m->hp;
    size_t s = pl_matmul_scratch_size(m->output.type, hp->dim, B);
    if (m->ple_model_proj.data) {
        size_t z = pl_matmul_scratch_size(m->ple_model_proj.type, hp->dim, B);
        if (z > s) s = z;
    }
    for (int32_t l = 0; l < hp->n_layers; l++) {
        const pl_layer_weights *L = &m->layers[l];
        const pl_weight *ws[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up,
                                 &L->w_down, &L->ple_gate, &L->ple_proj};
        for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++) {
            if (!ws[i]->data) continue;
            size_t z = pl_matmul_scratch_size(ws[i]->type, ws[i]->cols, B);
            if (z > s) s = z;
        }
        /* MoE: only the router multiplies through this scratch; the experts convert their
         * gathered rows into each part's own (moe.c, pl_moe_scratch_alloc) */
        if (!L->exp_gate) continue;
        size_t z = pl_matmul_scratch_size(L->gate_inp.type, L->gate_inp.cols, B);
        if (z > s) s = z;
    }
    return s;
}

pl_status pl_forward_ctx_create(const pl_model *m, int32_t max_tokens, int32_t max_logits,
                                pl_threadpool *tp, pl_forward_ctx **out) {
    *out = NULL;
    if (max_tokens < 1 || max_logits < 1 || max_logits > max_tokens)
        return pl_fail(PL_ERR_INVALID_ARG, "forward: max_tokens %d / max_logits %d invalid",
                       max_tokens, max_logits);
    const pl_model_hparams *hp = &m->hp;
    pl_forward_ctx *c = calloc(1, sizeof *c);
    if (!c) return pl_fail(PL_ERR_NOMEM, "forward: out of memory");
    c->m = m;
    c->tp = tp;
    c->max_tokens = max_tokens;
    c->max_logits = max_logits;
    size_t T = (size_t)max_tokens;
    size_t qd = (size_t)hp->n_heads * hp->head_dim, kvd = (size_t)hp->n_kv_heads * hp->head_dim;
    c->x = malloc(T * hp->dim * sizeof(float));
    c->h = malloc(T * hp->dim * sizeof(float));
    c->q = malloc(T * qd * sizeof(float));
    c->k = malloc(T * kvd * sizeof(float));
    c->v = malloc(T * kvd * sizeof(float));
    c->att = malloc(T * qd * sizeof(float));
    const size_t ffn = (size_t)(hp->expert_ffn > hp->ffn_dim ? hp->expert_ffn : hp->ffn_dim);
    c->gate = malloc(T * ffn * sizeof(float));
    c->up = malloc(T * ffn * sizeof(float));
    /* the window layers' own angles follow the shared ones (gemma3's, gemma4's rope_swa) */
    c->rope_cs = malloc(T * (size_t)((hp->rope.n_rot > 0 ? hp->rope.n_rot : 1) +
                                     (hp->has_rope_swa ? hp->rope_swa.n_rot : 0)) *
                        sizeof(float));
    if (hp->per_layer_dim > 0) {
        const size_t n = (size_t)hp->n_layers * (size_t)hp->per_layer_dim;
        c->ple = malloc(T * n * sizeof(float));
        c->ple_tok = malloc(n * sizeof(float));
        c->ple_g = malloc(T * (size_t)hp->per_layer_dim * sizeof(float));
        if (!c->ple || !c->ple_tok || !c->ple_g) {
            pl_forward_ctx_destroy(c);
            return pl_fail(PL_ERR_NOMEM, "forward: out of memory for %d tokens of per-layer "
                           "embeddings", max_tokens);
        }
    }
    c->mm_scratch = malloc(max_scratch(m, max_tokens) + 64);
    if (m->shard.size > 1 &&
        !(c->lg = malloc((size_t)max_logits * (size_t)m->shard.n_vocab * sizeof(float)))) {
        pl_forward_ctx_destroy(c);
        return pl_fail(PL_ERR_NOMEM, "forward: out of memory for %d logits rows", max_logits);
    }
    /* bert: one row of attention scores per thread part. */
    c->n_parts = pl_threadpool_size(tp);
    if (hp->pooling != PL_POOL_NONE)
        c->scores = malloc((size_t)c->n_parts * T * sizeof(float));
    if (hp->n_expert > 0) {
        pl_status st = pl_moe_scratch_alloc(c); /* model/moe.c */
        if (st != PL_OK) {
            pl_forward_ctx_destroy(c);
            return st;
        }
    }
    if (!c->x || !c->h || !c->q || !c->k || !c->v || !c->att || !c->gate || !c->up ||
        !c->rope_cs || !c->mm_scratch || (hp->pooling != PL_POOL_NONE && !c->scores)) {
        pl_forward_ctx_destroy(c);
        return pl_fail(PL_ERR_NOMEM, "forward: out of memory for %d tokens of scratch",
                       max_tokens);
    }
    *out = c;
    return PL_OK;
}

void pl_forward_ctx_destroy(pl_forward_ctx *c) {
    if (!c) return;
    pl_moe_scratch_free(c);
    PL_FREE_ALL(c->x, c->h, c->q, c->k, c->v, c->att, c->gate, c->up, c->rope_cs, c->mm_scratch,
                c->scores, c->lg, c->lora_r, c->lora_y, c->lora_x, c->lora_mm, c->ple, c->ple_tok,
                c->ple_g, c);
}

void pl_forward_set_tp(pl_forward_ctx *c, const pl_forward_tp *tp) { c->tpc = *tp; }

static void matmul(pl_forward_ctx *c, const pl_weight *w, const float *x, int64_t B, float *y) {
    pl_matmul(c->tp, w, x, B, y, w->rows, c->mm_scratch);
}

static pl_status check_batch(const pl_forward_ctx *c, const pl_kv_store *kv,
                             const pl_step_batch *b) {
    const pl_model_hparams *hp = &c->m->hp;
    if (b->n_tokens < 1 || b->n_tokens > c->max_tokens)
        return pl_fail(PL_ERR_INVALID_ARG, "forward: %d tokens (capacity %d)", b->n_tokens,
                       c->max_tokens);
    if (b->n_logits < 0 || b->n_logits > c->max_logits)
        return pl_fail(PL_ERR_INVALID_ARG, "forward: %d logit rows (capacity %d)", b->n_logits,
                       c->max_logits);
    /* KV cache groups pair the i-th window and global layer in tensor i; layer kinds (a store
     * of two pools) keep a tensor per layer */
    const int pairs = b->block_tables_w && !kv->kinds;
    int32_t tensors = pairs ? hp->n_layers / 2 : pl_model_kv_tensors(hp);
    if (b->block_tables_w && !b->slot_mapping_w)
        return pl_fail(PL_ERR_INVALID_ARG, "forward: KV cache groups need window slots");
    if (pairs && (hp->n_layers % 2 || hp->kv_shaped))
        return pl_fail(PL_ERR_INVALID_ARG, "forward: KV cache groups need window slots, an even "
                       "layer count and one KV shape for all layers");
    if (kv->n_layers != tensors)
        return pl_fail(PL_ERR_INVALID_ARG, "forward: KV store shape does not match the model");
    for (int32_t t = 0; t < tensors; t++) {
        const pl_kv_layout lay = pl_kv_store_layer_layout(kv, t);
        const pl_kv_shape want = pl_model_layer_shape(hp, t);
        if (lay.n_kv_heads != want.n_kv_heads || lay.head_dim != want.head_dim)
            return pl_fail(PL_ERR_INVALID_ARG, "forward: KV store layer %d has %d KV heads of "
                           "%d, the model %d of %d", t, lay.n_kv_heads, lay.head_dim,
                           want.n_kv_heads, want.head_dim);
    }
    for (int32_t t = 0; t < b->n_tokens; t++)
        if (b->token_ids[t] < 0 || b->token_ids[t] >= hp->n_vocab)
            return pl_fail(PL_ERR_INVALID_ARG, "token id %d is out of range [0, %d)",
                           b->token_ids[t], hp->n_vocab);
    PL_ASSERT(b->seq_start[0] == 0 && b->seq_start[b->n_seqs] == b->n_tokens);
    for (int32_t i = 0; i < b->n_logits; i++)
        PL_ASSERT(b->logit_rows[i] >= 0 && b->logit_rows[i] < b->n_tokens);
    return PL_OK;
}

/* mistral3's attention temperature (llama.cpp's llm_graph_input_attn_temp): the queries of
 * position p times 1 + scale * ln(floor(p / floor_scale) + 1), computed in double as llama.cpp
 * does and rounded to float. */
static void scale_queries_by_position(const pl_model_hparams *hp, const int32_t *positions,
                                      float *q, int64_t T) {
    const int64_t qd = (int64_t)hp->n_heads * hp->head_dim;
    for (int64_t t = 0; t < T; t++) {
        const float s = (float)(log(floor((float)positions[t] / (float)hp->attn_temp_floor) + 1.0) *
                                    hp->attn_temp_scale + 1.0);
        for (int64_t i = 0; i < qd; i++) q[t * qd + i] *= s;
    }
}

/* gemma4's per-layer inputs of the step's tokens into c->ple (llama.cpp's
 * project_per_layer_inputs): the scaled embeddings x projected by per_layer_model_proj and
 * scaled by 1/sqrt(dim), each layer's slice RMS-normed with per_layer_proj_norm, plus the
 * token's per_layer_token_embd row times sqrt(pld), all times 1/sqrt(2). */
static void ple_inputs(pl_forward_ctx *c, const pl_step_batch *b, int64_t T) {
    const pl_model *m = c->m;
    const pl_model_hparams *hp = &m->hp;
    const int64_t pld = hp->per_layer_dim, n = hp->n_layers * pld;
    matmul(c, &m->ple_model_proj, c->x, T, c->ple);
    const float ps = 1.0f / sqrtf((float)hp->dim), es = sqrtf((float)pld);
    const float is = 1.0f / sqrtf(2.0f);
    for (int64_t i = 0; i < T * n; i++) c->ple[i] *= ps;
    pl_rmsnorm(c->tp, c->ple, c->ple, m->ple_proj_norm, T * hp->n_layers, pld, hp->norm_eps);
    const size_t row = pl_dtype_row_size(m->ple_embd.type, n);
    for (int64_t t = 0; t < T; t++) {
        pl_dequantize_row(m->ple_embd.type,
                          (const char *)m->ple_embd.data + (size_t)b->token_ids[t] * row,
                          c->ple_tok, n);
        float *p = c->ple + t * n;
        for (int64_t i = 0; i < n; i++) p[i] = (p[i] + c->ple_tok[i] * es) * is;
    }
}

/* gemma4's per-layer embedding of layer l, added to the residual x (after the FFN). */
static void ple_layer(pl_forward_ctx *c, const pl_layer_weights *L, int32_t l, int64_t T) {
    const pl_model_hparams *hp = &c->m->hp;
    const int64_t pld = hp->per_layer_dim, n = hp->n_layers * pld;
    matmul(c, &L->ple_gate, c->x, T, c->ple_g);
    pl_gelu(c->tp, c->ple_g, T * pld);
    for (int64_t t = 0; t < T; t++) {
        const float *p = c->ple + t * n + (int64_t)l * pld;
        float *g = c->ple_g + t * pld;
        for (int64_t i = 0; i < pld; i++) g[i] *= p[i];
    }
    matmul(c, &L->ple_proj, c->ple_g, T, c->h);
    pl_rmsnorm(c->tp, c->h, c->h, L->ple_post_norm, T, hp->dim, hp->norm_eps);
    pl_add(c->x, c->h, T * hp->dim);
}

pl_status pl_model_forward(pl_forward_ctx *c, pl_kv_store *kv, const pl_step_batch *b,
                           float *logits) {
    return pl_model_forward_pooled(c, kv, b, logits, NULL);
}

pl_status pl_model_forward_pooled(pl_forward_ctx *c, pl_kv_store *kv, const pl_step_batch *b,
                                  float *logits, const pl_pool_request *pool) {
    PL_TRY(check_batch(c, kv, b));
    for (int32_t i = 0; pool && i < pool->n; i++)
        PL_ASSERT(pool->out && pool->seqs[i] >= 0 && pool->seqs[i] < b->n_seqs);
    const pl_model *m = c->m;
    const pl_model_hparams *hp = &m->hp;
    const int64_t T = b->n_tokens, dim = hp->dim;

    for (int64_t t = 0; t < T; t++)
        pl_dequantize_row(m->tok_embd.type,
                          (const char *)m->tok_embd.data +
                              (size_t)b->token_ids[t] * pl_dtype_row_size(m->tok_embd.type, dim),
                          c->x + t * dim, dim);
    if (pl_arch_is_gemma(hp->arch)) { /* llama.cpp: ggml_scale(inp, sqrtf(n_embd)) */
        const float s = sqrtf((float)dim);
        for (int64_t i = 0; i < T * dim; i++) c->x[i] *= s;
    }
    if (hp->per_layer_dim > 0) ple_inputs(c, b, T);
    float *rope_cs_swa = c->rope_cs + T * hp->rope.n_rot;
    pl_rope_cache(&hp->rope, b->positions, T, c->rope_cs);
    if (hp->has_rope_swa) pl_rope_cache(&hp->rope_swa, b->positions, T, rope_cs_swa);

    pl_attn_args attn = {
        .q = c->q, .out = c->att, .n_heads = hp->n_heads,
        .scale = hp->attn_scale, .softcap = hp->attn_softcap, .n_seqs = b->n_seqs,
        .seq_start = b->seq_start, .context_lens = b->context_lens,
        .block_tables = b->block_tables, .max_blocks = b->max_blocks,
    };
    int32_t n_win = 0, n_glob = 0; /* KV cache groups: layers of each kind so far */
    for (int32_t l = 0; l < hp->n_layers; l++) {
        const pl_layer_weights *L = &m->layers[l];
        const int32_t window = pl_model_layer_window(hp, l);
        const int grouped_w = b->block_tables_w && window > 0;
        const int32_t tensor = !b->block_tables_w || kv->kinds ? pl_model_kv_tensor(hp, l)
                               : window > 0 ? n_win++ : n_glob++;
        const pl_kv_shape shp = pl_model_layer_shape(hp, l);
        const int32_t hd = shp.head_dim, nkv = shp.n_kv_heads;
        const int64_t qd = (int64_t)hp->n_heads * hd, kvd = (int64_t)nkv * hd;
        const int own_kv = l < pl_model_kv_tensors(hp); /* gemma4's shared layers: Q only */
        pl_rmsnorm(c->tp, c->h, c->x, L->attn_norm, T, dim, hp->norm_eps);
        const pl_weight *qkv[3] = {&L->wq, &L->wk, &L->wv};
        float *qkv_out[3] = {c->q, c->k, c->v};
        pl_matmul_multi(c->tp, qkv, qkv_out, !own_kv ? 1 : L->wv.data ? 3 : 2, c->h, T,
                        c->mm_scratch);
        pl_lora_apply(c, b, l, PL_LORA_Q, c->h, dim, c->q, qd); /* each adapter on its rows */
        if (own_kv) {
            pl_lora_apply(c, b, l, PL_LORA_K, c->h, dim, c->k, kvd);
            if (L->wv.data) pl_lora_apply(c, b, l, PL_LORA_V, c->h, dim, c->v, kvd);
            else memcpy(c->v, c->k, (size_t)(T * kvd) * sizeof(float)); /* gemma4: V = K */
        }
        if (L->bq) pl_add_bias(c->q, L->bq, T, qd);
        if (L->bk) pl_add_bias(c->k, L->bk, T, kvd);
        if (L->bv) pl_add_bias(c->v, L->bv, T, kvd);
        if (L->q_norm) pl_rmsnorm(c->tp, c->q, c->q, L->q_norm, T * hp->n_heads, hd,
                                  hp->norm_eps);
        if (L->k_norm) pl_rmsnorm(c->tp, c->k, c->k, L->k_norm, T * nkv, hd, hp->norm_eps);
        if (own_kv && hp->arch == PL_ARCH_GEMMA4) /* V: an RMSNorm without weight */
            pl_rmsnorm(c->tp, c->v, c->v, m->ones, T * nkv, hd, hp->norm_eps);
        const int rope_swa = hp->has_rope_swa && hp->swa_layers[l];
        const pl_rope_params *rope = rope_swa ? &hp->rope_swa : &hp->rope;
        const float *cs = rope_swa ? rope_cs_swa : c->rope_cs;
        pl_rope_apply(rope, cs, c->q, T, hp->n_heads, hd);
        if (own_kv) pl_rope_apply(rope, cs, c->k, T, nkv, hd);
        if (hp->attn_temp_scale != 0) scale_queries_by_position(hp, b->positions, c->q, T);

        attn.block_tables = grouped_w ? b->block_tables_w : b->block_tables;
        attn.window = window;
        attn.sinks = L->attn_sinks;
        /* a layer that shares an earlier layer's KV (gemma4) writes nothing, only attends */
        PL_TRY(pl_kv_store_attention(c->tp, kv, tensor, own_kv ? c->k : NULL, c->v,
                                     grouped_w ? b->slot_mapping_w : b->slot_mapping,
                                     b->n_tokens, &attn));

        matmul(c, &L->wo, c->att, T, c->h);
        pl_lora_apply(c, b, l, PL_LORA_O, c->att, qd, c->h, dim);
        if (L->bo) pl_add_bias(c->h, L->bo, T, dim); /* gpt-oss */
        if (c->tpc.reduce) PL_TRY(c->tpc.reduce(c->tpc.ud, c->h, T * dim)); /* every rank's heads */
        if (L->attn_post_norm)
            pl_rmsnorm(c->tp, c->h, c->h, L->attn_post_norm, T, dim, hp->norm_eps);
        pl_add(c->x, c->h, T * dim);

        const int shexp = L->exp_gate && L->w_down.data; /* gemma4: experts and a dense FFN */
        if (shexp) pl_moe_ffn(c, L, T); /* from x, through its own norms: model/moe.c */
        pl_rmsnorm(c->tp, c->h, c->x, L->ffn_norm, T, dim, hp->norm_eps);
        if (L->exp_gate && !shexp) {
            pl_moe_ffn(c, L, T); /* model/moe.c */
            if (c->tpc.reduce) /* every rank's rows of the experts */
                PL_TRY(c->tpc.reduce(c->tpc.ud, c->moe_acc, T * dim));
            pl_add(c->x, c->moe_acc, T * dim);
            continue;
        }
        const pl_weight *gate_up[2] = {&L->w_gate, &L->w_up};
        float *gate_up_out[2] = {c->gate, c->up};
        pl_matmul_multi(c->tp, gate_up, gate_up_out, 2, c->h, T, c->mm_scratch);
        pl_lora_apply(c, b, l, PL_LORA_GATE, c->h, dim, c->gate, L->w_up.rows);
        pl_lora_apply(c, b, l, PL_LORA_UP, c->h, dim, c->up, L->w_up.rows);
        if (pl_arch_is_gemma(hp->arch)) /* the layer's width: gemma4's may vary */
            pl_geglu(c->tp, c->gate, c->up, T, L->w_up.rows);
        else
            pl_swiglu(c->tp, c->gate, c->up, T, hp->ffn_dim);
        matmul(c, &L->w_down, c->gate, T, c->h);
        pl_lora_apply(c, b, l, PL_LORA_DOWN, c->gate, L->w_up.rows, c->h, dim);
        if (c->tpc.reduce) PL_TRY(c->tpc.reduce(c->tpc.ud, c->h, T * dim)); /* every rank's FFN */
        if (shexp && c->tpc.reduce) /* ... and experts, before their norm */
            PL_TRY(c->tpc.reduce(c->tpc.ud, c->moe_acc, T * dim));
        if (shexp) pl_moe_add_shared(c, L, T);
        if (L->ffn_post_norm)
            pl_rmsnorm(c->tp, c->h, c->h, L->ffn_post_norm, T, dim, hp->norm_eps);
        pl_add(c->x, c->h, T * dim);
        if (hp->per_layer_dim > 0) ple_layer(c, L, l, T);
        if (L->out_scale)
            for (int64_t i = 0; i < T * dim; i++) c->x[i] *= L->out_scale[0];
    }

    if (b->n_logits > 0 && (logits || c->tpc.gather)) { /* a rank without logits skips them */
        /* Gather the rows that need logits, norm them, and project to the vocabulary. */
        for (int32_t i = 0; i < b->n_logits; i++)
            memmove(c->h + (int64_t)i * dim, c->x + (int64_t)b->logit_rows[i] * dim,
                    (size_t)dim * sizeof(float));
        pl_rmsnorm(c->tp, c->h, c->h, m->output_norm, b->n_logits, dim, hp->norm_eps);
        if (c->tpc.gather) { /* this rank's vocabulary columns, gathered on rank 0 */
            matmul(c, &m->output, c->h, b->n_logits, c->lg);
            PL_TRY(c->tpc.gather(c->tpc.ud, c->lg, b->n_logits, logits));
        } else {
            matmul(c, &m->output, c->h, b->n_logits, logits);
        }
        if (logits && hp->final_softcap > 0) { /* as llama.cpp: scale by 1/cap, tanh, scale by cap */
            const float cap = hp->final_softcap, inv = 1.0f / cap;
            for (int64_t i = 0; i < (int64_t)b->n_logits * hp->n_vocab; i++)
                logits[i] = cap * tanhf(logits[i] * inv);
        }
    }
    /* Embeddings: a whole input's normed last hidden states, pooled (llama.cpp's --pooling). */
    for (int32_t i = 0; pool && i < pool->n; i++) {
        int32_t s = pool->seqs[i], s0 = b->seq_start[s], n = b->seq_start[s + 1] - s0;
        pl_rmsnorm(c->tp, c->h, c->x + (int64_t)s0 * dim, m->output_norm, n, dim, hp->norm_eps);
        pl_pool_rows(pool->pooling, c->h, n, dim, pool->out + (int64_t)i * dim);
    }
    return PL_OK;
}
