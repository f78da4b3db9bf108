/* model/forward_bert — an embedding model's step (architecture `bert`), read top to bottom:
 *
 *   x = layernorm(tok_embd[token] + type_embd[0] + pos_embd[position])
 *   for each layer:
 *       q, k, v = Wq x + bq, Wk x + bk, Wv x + bv
 *       a = softmax(q k^T / sqrt(hd)) v      over the sequence's own tokens, both directions
 *       x = layernorm(x + Wo a + bo)         (attn_output_norm)
 *       x = layernorm(x + Wdown gelu(Wup x + bup) + bdown)   (layer_output_norm)
 *   out[seq] = l2normalize(pool(x[seq's tokens]))   mean | first (CLS) | last
 *              (the caller's pooling if set, else the model's pooling_type)
 *   rank (a cross-encoder): out[seq] = cls_out tanh(cls x[seq's CLS] + cls_b) + cls_out_b,
 *              the classification head's raw scores (n_cls_out of them), not normalized
 *
 * There is no KV cache: every sequence is a whole input computed in one step, so attention reads
 * the step's own K and V rows. Each (token, head) pair is computed from its sequence alone, and
 * the matmuls and norms are row-independent, so a sequence's embedding is bitwise the same
 * whatever else shares its step.
 */
#include "model/forward_internal.h"

#include <math.h>
#include <string.h>

typedef struct {
    pl_forward_ctx *c;
    const pl_step_batch *b;
    int32_t n_heads, hd;
    float scale;
} attn_job;

/* The sequence holding token t (seq_start is increasing). */
static int32_t seq_of(const pl_step_batch *b, int32_t t) {
    int32_t lo = 0, hi = b->n_seqs - 1;
    while (lo < hi) {
        int32_t mid = (lo + hi + 1) / 2;
        if (b->seq_start[mid] <= t) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

static void attn_part(void *p, int ith, int nth) {
    attn_job *j = p;
    pl_forward_ctx *c = j->c;
    const int32_t H = j->n_heads, hd = j->hd, qd = H * hd;
    float *sc = c->scores + (size_t)ith * (size_t)c->max_tokens;
    int64_t i0, i1;
    pl_split_range((int64_t)j->b->n_tokens * H, ith, nth, 1, &i0, &i1);
    for (int64_t it = i0; it < i1; it++) {
        int32_t t = (int32_t)(it / H), h = (int32_t)(it % H);
        int32_t s = seq_of(j->b, t);
        int32_t s0 = j->b->seq_start[s], s1 = j->b->seq_start[s + 1];
        const float *q = c->q + (size_t)t * qd + (size_t)h * hd;
        float mx = -INFINITY;
        for (int32_t u = s0; u < s1; u++) {
            const float *k = c->k + (size_t)u * qd + (size_t)h * hd;
            float d = 0;
            for (int32_t i = 0; i < hd; i++) d += q[i] * k[i];
            sc[u - s0] = d * j->scale;
            if (sc[u - s0] > mx) mx = sc[u - s0];
        }
        double sum = 0;
        for (int32_t u = 0; u < s1 - s0; u++) {
            sc[u] = expf(sc[u] - mx);
            sum += sc[u];
        }
        float inv = (float)(1.0 / sum);
        float *o = c->att + (size_t)t * qd + (size_t)h * hd;
        for (int32_t i = 0; i < hd; i++) o[i] = 0;
        for (int32_t u = s0; u < s1; u++) {
            const float *v = c->v + (size_t)u * qd + (size_t)h * hd;
            float w = sc[u - s0] * inv;
            for (int32_t i = 0; i < hd; i++) o[i] += w * v[i];
        }
    }
}

static void matmul_bias(pl_forward_ctx *c, const pl_weight *w, const float *bias, const float *x,
                        int64_t T, float *y) {
    pl_matmul(c->tp, w, x, T, y, w->rows, c->mm_scratch);
    if (bias) pl_add_bias(y, bias, T, w->rows);
}

void pl_pool_rows(int pooling, const float *x, int32_t n, int64_t dim, float *out) {
    switch (pooling) {
    case PL_POOL_CLS: memcpy(out, x, (size_t)dim * sizeof(float)); break;
    case PL_POOL_LAST: memcpy(out, x + (size_t)(n - 1) * dim, (size_t)dim * sizeof(float)); break;
    default: {
        const float w = 1.0f / (float)n;
        for (int64_t i = 0; i < dim; i++) {
            double sum = 0;
            for (int32_t u = 0; u < n; u++) sum += (double)(x[(size_t)u * dim + i] * w);
            out[i] = (float)sum;
        }
    }
    }
    double ss = 0;
    for (int64_t i = 0; i < dim; i++) ss += (double)out[i] * out[i];
    double norm = ss > 0 ? 1.0 / sqrt(ss) : 0.0;
    for (int64_t i = 0; i < dim; i++) out[i] = (float)(out[i] * norm);
}

int32_t pl_model_embed_dim(const pl_model *m) {
    return m->hp.pooling == PL_POOL_RANK ? m->n_cls_out : m->hp.dim;
}

/* pooling rank: the classification head over each sequence's first (CLS) state, as llama.cpp's
 * bert: tanh(cls x + cls_b), then cls.output (each layer only if present). Row-independent. */
static pl_status rank_head(pl_forward_ctx *c, const pl_step_batch *b, float *out) {
    const pl_model *m = c->m;
    const int64_t dim = m->hp.dim, S = b->n_seqs;
    float *x = c->h; /* [S x dim] (S <= T) */
    for (int64_t s = 0; s < S; s++)
        memcpy(x + s * dim, c->x + (size_t)b->seq_start[s] * dim, (size_t)dim * sizeof(float));
    if (m->cls.data) {
        matmul_bias(c, &m->cls, m->cls_b, x, S, c->q);
        for (int64_t i = 0; i < S * dim; i++) x[i] = tanhf(c->q[i]);
    }
    if (m->cls_out.data) matmul_bias(c, &m->cls_out, m->cls_out_b, x, S, out);
    else memcpy(out, x, (size_t)(S * dim) * sizeof(float));
    return PL_OK;
}

pl_status pl_model_embed(pl_forward_ctx *c, const pl_step_batch *b, int32_t pooling_override,
                         float *out) {
    const pl_model *m = c->m;
    const pl_model_hparams *hp = &m->hp;
    if (hp->pooling == PL_POOL_NONE)
        return pl_fail(PL_ERR_UNSUPPORTED, "model '%s' has no pooling type: no embeddings",
                       hp->arch_name);
    if (b->n_tokens < 1 || b->n_tokens > c->max_tokens || b->n_seqs < 1)
        return pl_fail(PL_ERR_INVALID_ARG, "embed: %d tokens in %d sequences (capacity %d)",
                       b->n_tokens, b->n_seqs, c->max_tokens);
    PL_ASSERT(b->seq_start[0] == 0 && b->seq_start[b->n_seqs] == b->n_tokens);
    const int64_t T = b->n_tokens, dim = hp->dim, ff = hp->ffn_dim;
    const size_t emb_row = pl_dtype_row_size(m->tok_embd.type, dim);
    const size_t pos_row = pl_dtype_row_size(m->pos_embd.type, dim);
    for (int64_t t = 0; t < T; t++) {
        int32_t id = b->token_ids[t], pos = b->positions[t];
        if (id < 0 || id >= hp->n_vocab)
            return pl_fail(PL_ERR_INVALID_ARG, "token id %d is out of range [0, %d)", id,
                           hp->n_vocab);
        if (pos < 0 || pos >= hp->n_ctx_train)
            return pl_fail(PL_ERR_INVALID_ARG, "position %d is out of range [0, %d)", pos,
                           hp->n_ctx_train);
        float *x = c->x + t * dim, *p = c->h + t * dim;
        pl_dequantize_row(m->tok_embd.type, (const char *)m->tok_embd.data + (size_t)id * emb_row,
                          x, dim);
        pl_dequantize_row(m->pos_embd.type, (const char *)m->pos_embd.data + (size_t)pos * pos_row,
                          p, dim);
        if (m->type_embd) pl_add(x, m->type_embd, dim);
        pl_add(x, p, dim);
    }
    pl_layernorm(c->tp, c->x, c->x, m->embd_norm, m->embd_norm_b, T, dim, hp->norm_eps);

    attn_job aj = {c, b, hp->n_heads, hp->head_dim, 1.0f / sqrtf((float)hp->head_dim)};
    for (int32_t l = 0; l < hp->n_layers; l++) {
        const pl_layer_weights *L = &m->layers[l];
        const pl_weight *qkv[3] = {&L->wq, &L->wk, &L->wv};
        float *qkv_out[3] = {c->q, c->k, c->v};
        pl_matmul_multi(c->tp, qkv, qkv_out, 3, c->x, T, c->mm_scratch);
        if (L->bq) pl_add_bias(c->q, L->bq, T, dim);
        if (L->bk) pl_add_bias(c->k, L->bk, T, dim);
        if (L->bv) pl_add_bias(c->v, L->bv, T, dim);
        pl_threadpool_run_n(c->tp, T * hp->n_heads >= 8 ? c->n_parts : 1, attn_part, &aj);

        matmul_bias(c, &L->wo, L->bo, c->att, T, c->h);
        pl_add(c->h, c->x, T * dim);
        pl_layernorm(c->tp, c->x, c->h, L->attn_out_norm, L->attn_out_norm_b, T, dim,
                     hp->norm_eps);

        matmul_bias(c, &L->w_up, L->b_up, c->x, T, c->up);
        pl_gelu(c->tp, c->up, T * ff);
        matmul_bias(c, &L->w_down, L->b_down, c->up, T, c->h);
        pl_add(c->h, c->x, T * dim);
        pl_layernorm(c->tp, c->x, c->h, L->out_norm, L->out_norm_b, T, dim, hp->norm_eps);
    }
    /* a reranker always scores: its head is what it was trained for */
    const int pooling = hp->pooling == PL_POOL_RANK ? PL_POOL_RANK
                        : pooling_override ? pooling_override : (int)hp->pooling;
    if (pooling == PL_POOL_RANK) return rank_head(c, b, out);
    for (int32_t s = 0; s < b->n_seqs; s++)
        pl_pool_rows(pooling, c->x + (size_t)b->seq_start[s] * dim,
                     b->seq_start[s + 1] - b->seq_start[s], dim, out + (size_t)s * dim);
    return PL_OK;
}
