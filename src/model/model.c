/* model/model — loading: architecture hyper-parameters from GGUF metadata and binding every
 * weight tensor (presence, shape and type checked). The forward pass is in forward.c. */
#include "model/model.h"
#include "base/buf.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

/* Read "<arch>.<key>" as an integer; `def` < 0 means required. */
static pl_status get_arch_int(const pl_gguf *g, const char *arch, const char *key, int64_t def,
                              int64_t lo, int64_t hi, int32_t *out) {
    char full[128];
    snprintf(full, sizeof full, "%s.%s", arch, key);
    int64_t v;
    if (pl_gguf_find_key(g, full) < 0) {
        if (def < 0) return pl_fail(PL_ERR_FORMAT, "missing metadata key '%s'", full);
        v = def;
    } else {
        PL_TRY(pl_gguf_get_int(g, full, &v));
    }
    if (v < lo || v > hi)
        return pl_fail(PL_ERR_FORMAT, "metadata '%s' = %lld is out of range [%lld, %lld]", full,
                       (long long)v, (long long)lo, (long long)hi);
    *out = (int32_t)v;
    return PL_OK;
}

static pl_status get_arch_float(const pl_gguf *g, const char *arch, const char *key, double def,
                                double lo, double hi, float *out) {
    char full[128];
    snprintf(full, sizeof full, "%s.%s", arch, key);
    double v = def;
    if (pl_gguf_find_key(g, full) >= 0) PL_TRY(pl_gguf_get_float(g, full, &v));
    if (!(v >= lo && v <= hi))
        return pl_fail(PL_ERR_FORMAT, "metadata '%s' = %g is out of range [%g, %g]", full, v, lo,
                       hi);
    *out = (float)v;
    return PL_OK;
}

/* bert: LayerNorm epsilon, the pooling type, and non-causal attention (no RoPE). */
static pl_status read_bert_hparams(const pl_gguf *g, pl_model_hparams *hp) {
    const char *a = hp->arch_name;
    char key[128];
    snprintf(key, sizeof key, "%s.attention.layer_norm_epsilon", a);
    if (pl_gguf_find_key(g, key) < 0)
        return pl_fail(PL_ERR_FORMAT, "missing metadata key '%s'", key);
    PL_TRY(get_arch_float(g, a, "attention.layer_norm_epsilon", 1e-12, 0, 1, &hp->norm_eps));
    snprintf(key, sizeof key, "%s.attention.causal", a);
    int causal = 0;
    if (pl_gguf_find_key(g, key) >= 0) PL_TRY(pl_gguf_get_bool(g, key, &causal));
    if (causal)
        return pl_fail(PL_ERR_UNSUPPORTED, "'%s' is true: pagellm runs bert with bidirectional "
                       "attention only", key);
    int32_t pool = 0;
    PL_TRY(get_arch_int(g, a, "pooling_type", -1, 0, 4, &pool));
    if (pool < PL_POOL_MEAN || pool > PL_POOL_LAST)
        return pl_fail(PL_ERR_UNSUPPORTED, "'%s.pooling_type' = %d is not supported (1 mean, "
                       "2 cls, 3 last; 0 none and 4 rank are not)", a, pool);
    hp->pooling = (pl_pooling)pool;
    hp->rope.n_rot = 0; /* absolute positions: nothing is rotated */
    return PL_OK;
}

static pl_status read_hparams(const pl_gguf *g, pl_model_hparams *hp) {
    pl_gguf_str arch;
    if (pl_gguf_get_str(g, "general.architecture", &arch) != PL_OK)
        return pl_fail(PL_ERR_FORMAT, "missing metadata key 'general.architecture'");
    snprintf(hp->arch_name, sizeof hp->arch_name, "%.*s", (int)(arch.len < 31 ? arch.len : 31),
             arch.ptr);
    if (pl_gguf_str_eq(arch, "llama")) hp->arch = PL_ARCH_LLAMA;
    else if (pl_gguf_str_eq(arch, "qwen2")) hp->arch = PL_ARCH_QWEN2;
    else if (pl_gguf_str_eq(arch, "bert")) hp->arch = PL_ARCH_BERT;
    else
        return pl_fail(PL_ERR_UNSUPPORTED,
                       "architecture '%.*s' is not supported (supported: llama, qwen2, bert)",
                       (int)(arch.len > 64 ? 64 : arch.len), arch.ptr);
    const char *a = hp->arch_name;
    PL_TRY(get_arch_int(g, a, "embedding_length", -1, 1, 1 << 16, &hp->dim));
    PL_TRY(get_arch_int(g, a, "block_count", -1, 1, 1024, &hp->n_layers));
    PL_TRY(get_arch_int(g, a, "feed_forward_length", -1, 1, 1 << 20, &hp->ffn_dim));
    PL_TRY(get_arch_int(g, a, "attention.head_count", -1, 1, 1024, &hp->n_heads));
    PL_TRY(get_arch_int(g, a, "attention.head_count_kv", hp->n_heads, 1, hp->n_heads,
                        &hp->n_kv_heads));
    PL_TRY(get_arch_int(g, a, "context_length", 2048, 1, 1 << 24, &hp->n_ctx_train));
    if (hp->n_heads % hp->n_kv_heads)
        return pl_fail(PL_ERR_FORMAT, "%d attention heads are not a multiple of %d KV heads",
                       hp->n_heads, hp->n_kv_heads);
    if (hp->dim % hp->n_heads)
        return pl_fail(PL_ERR_FORMAT, "embedding length %d is not a multiple of %d heads",
                       hp->dim, hp->n_heads);
    PL_TRY(get_arch_int(g, a, "attention.key_length", hp->dim / hp->n_heads, 1, 1024,
                        &hp->head_dim));
    if (hp->head_dim % 4)
        return pl_fail(PL_ERR_UNSUPPORTED, "head dimension %d is not a multiple of 4",
                       hp->head_dim);
    if (hp->arch == PL_ARCH_BERT) return read_bert_hparams(g, hp);
    PL_TRY(get_arch_float(g, a, "attention.layer_norm_rms_epsilon", 1e-5, 0, 1, &hp->norm_eps));
    hp->rope.mode = hp->arch == PL_ARCH_QWEN2 ? PL_ROPE_NEOX : PL_ROPE_NORM;
    PL_TRY(get_arch_int(g, a, "rope.dimension_count", hp->head_dim, 2, hp->head_dim,
                        &hp->rope.n_rot));
    if (hp->rope.n_rot % 2)
        return pl_fail(PL_ERR_FORMAT, "rope.dimension_count %d is odd", hp->rope.n_rot);
    PL_TRY(get_arch_float(g, a, "rope.freq_base", 10000.0, 1e-3, 1e12, &hp->rope.freq_base));
    hp->rope.freq_scale = 1.0f;
    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.type", a);
    pl_gguf_str stype = {"none", 4};
    if (pl_gguf_find_key(g, key) >= 0) PL_TRY(pl_gguf_get_str(g, key, &stype));
    float factor = 1.0f;
    PL_TRY(get_arch_float(g, a, "rope.scaling.factor", 1.0, 0, 1e6, &factor));
    if (pl_gguf_str_eq(stype, "linear")) {
        if (factor > 0) hp->rope.freq_scale = 1.0f / factor;
    } else if (!pl_gguf_str_eq(stype, "none")) {
        return pl_fail(PL_ERR_UNSUPPORTED, "rope scaling type '%.*s' is not supported",
                       (int)(stype.len > 32 ? 32 : stype.len), stype.ptr);
    }
    return PL_OK;
}

/* Find a tensor with the given shape; required unless `optional`. */
static pl_status find_tensor(const pl_gguf *g, const char *name, int64_t ne0, int64_t ne1,
                             int optional, const pl_gguf_tensor **out) {
    const pl_gguf_tensor *t = pl_gguf_find_tensor(g, name);
    *out = t;
    if (!t) return optional ? PL_OK : pl_fail(PL_ERR_FORMAT, "missing tensor '%s'", name);
    int64_t n1 = t->ne[1] * t->ne[2] * t->ne[3];
    if (t->ne[0] != ne0 || n1 != ne1)
        return pl_fail(PL_ERR_FORMAT,
                       "tensor '%s' has shape [%lld, %lld], expected [%lld, %lld]", name,
                       (long long)t->ne[0], (long long)n1, (long long)ne0, (long long)ne1);
    return PL_OK;
}

static pl_status bind_weight(const pl_gguf *g, const char *name, int64_t cols, int64_t rows,
                             pl_weight *w) {
    const pl_gguf_tensor *t;
    PL_TRY(find_tensor(g, name, cols, rows, 0, &t));
    if (!pl_dtype_can_matmul(t->type))
        return pl_fail(PL_ERR_UNSUPPORTED, "tensor '%s' has type %s, which pagellm cannot compute "
                       "(supported: f32, f16, bf16, q8_0, q4_0, q4_K, q5_K, q6_K)",
                       name, pl_dtype_name(t->type));
    w->data = t->data;
    w->type = t->type;
    w->rows = rows;
    w->cols = cols;
    return PL_OK;
}

/* A 1-D tensor (norm weight, bias) converted to a malloc'ed f32 array. */
static pl_status load_vector(const pl_gguf *g, const char *name, int64_t n, int optional,
                             float **out) {
    const pl_gguf_tensor *t;
    *out = NULL;
    PL_TRY(find_tensor(g, name, n, 1, optional, &t));
    if (!t) return PL_OK;
    if (t->type != PL_DT_F32 && t->type != PL_DT_F16 && t->type != PL_DT_BF16)
        return pl_fail(PL_ERR_UNSUPPORTED, "tensor '%s' has type %s; expected f32, f16 or bf16",
                       name, pl_dtype_name(t->type));
    float *v = malloc((size_t)n * sizeof(float));
    if (!v) return pl_fail(PL_ERR_NOMEM, "tensor '%s': out of memory", name);
    pl_dequantize_row(t->type, t->data, v, n);
    *out = v;
    return PL_OK;
}

/* ---- tensor-parallel slices (pl_model_shard) ---- */

/* Rows [r0, r0 + n) of w: a view into the mapping (rows are contiguous). */
static void slice_rows(pl_weight *w, int64_t r0, int64_t n) {
    w->data = (const char *)w->data + (size_t)r0 * pl_dtype_row_size(w->type, w->cols);
    w->rows = n;
}

/* Columns [c0, c0 + n) of every row of w, copied into a buffer the model owns; the mapped pages
 * of the whole tensor are then released (they were read once, for the copy). */
static pl_status slice_cols(pl_model *m, const char *name, pl_weight *w, int64_t c0, int64_t n) {
    int64_t bs = pl_dtype_block_size(w->type);
    if (c0 % bs || n % bs)
        return pl_fail(PL_ERR_UNSUPPORTED, "tensor-parallel-size %d: tensor '%s' (%s, blocks of "
                       "%lld values per row) would be cut into slices of %lld of its %lld "
                       "columns, which is not a whole number of quantization blocks",
                       m->shard.size, name, pl_dtype_name(w->type), (long long)bs, (long long)n,
                       (long long)w->cols);
    size_t src_row = pl_dtype_row_size(w->type, w->cols), dst_row = pl_dtype_row_size(w->type, n);
    size_t off = pl_dtype_row_size(w->type, c0), bytes = (size_t)w->rows * dst_row;
    void **owned = realloc(m->owned, (size_t)(m->n_owned + 1) * sizeof *owned);
    if (!owned) return pl_fail(PL_ERR_NOMEM, "tensor '%s': out of memory", name);
    m->owned = owned;
    char *dst = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!dst) return pl_fail(PL_ERR_NOMEM, "tensor '%s': out of memory for its slice", name);
    m->owned[m->n_owned++] = dst;
    m->owned_bytes += bytes;
    const char *src = w->data;
    for (int64_t r = 0; r < w->rows; r++)
        memcpy(dst + (size_t)r * dst_row, src + (size_t)r * src_row + off, dst_row);
    /* Pages wholly inside the tensor leave this process's resident set (page cache keeps them). */
    long pg = sysconf(_SC_PAGESIZE);
    uintptr_t a = ((uintptr_t)src + (uintptr_t)pg - 1) / (uintptr_t)pg * (uintptr_t)pg;
    uintptr_t e = ((uintptr_t)src + (size_t)w->rows * src_row) / (uintptr_t)pg * (uintptr_t)pg;
    if (pg > 0 && e > a) madvise((void *)a, e - a, MADV_DONTNEED);
    w->data = dst;
    w->cols = n;
    return PL_OK;
}

/* Entries [off, off + n) of a loaded vector moved to its front (a bias of sliced rows). */
static void slice_vector(float *v, int64_t off, int64_t n) {
    if (v) memmove(v, v + off, (size_t)n * sizeof(float));
}

/* bert: embeddings (token, position, token type 0), LayerNorms, and every bias. */
static pl_status bind_bert_weights(pl_model *m) {
    const pl_gguf *g = m->file;
    pl_model_hparams *hp = &m->hp;
    const int64_t dim = hp->dim, ff = hp->ffn_dim;
    PL_TRY(bind_weight(g, "position_embd.weight", dim, hp->n_ctx_train, &m->pos_embd));
    const pl_gguf_tensor *tt = pl_gguf_find_tensor(g, "token_types.weight");
    if (tt) {
        if (tt->ne[0] != dim || tt->ne[1] < 1 || tt->ne[2] != 1 || tt->ne[3] != 1 ||
            (tt->type != PL_DT_F32 && tt->type != PL_DT_F16 && tt->type != PL_DT_BF16))
            return pl_fail(PL_ERR_FORMAT, "tensor 'token_types.weight' must be f32/f16/bf16 of "
                           "shape [%lld, n_types]", (long long)dim);
        if (!(m->type_embd = malloc((size_t)dim * sizeof(float))))
            return pl_fail(PL_ERR_NOMEM, "out of memory");
        pl_dequantize_row(tt->type, tt->data, m->type_embd, dim); /* type 0: sentence A */
    }
    PL_TRY(load_vector(g, "token_embd_norm.weight", dim, 0, &m->embd_norm));
    PL_TRY(load_vector(g, "token_embd_norm.bias", dim, 0, &m->embd_norm_b));
    m->layers = calloc((size_t)hp->n_layers, sizeof *m->layers);
    if (!m->layers) return pl_fail(PL_ERR_NOMEM, "out of memory for %d layers", hp->n_layers);
    for (int32_t l = 0; l < hp->n_layers; l++) {
        pl_layer_weights *L = &m->layers[l];
        char n[96];
#define NAME(s) (snprintf(n, sizeof n, "blk.%d." s, l), n)
        PL_TRY(bind_weight(g, NAME("attn_q.weight"), dim, dim, &L->wq));
        PL_TRY(bind_weight(g, NAME("attn_k.weight"), dim, dim, &L->wk));
        PL_TRY(bind_weight(g, NAME("attn_v.weight"), dim, dim, &L->wv));
        PL_TRY(bind_weight(g, NAME("attn_output.weight"), dim, dim, &L->wo));
        PL_TRY(load_vector(g, NAME("attn_q.bias"), dim, 1, &L->bq));
        PL_TRY(load_vector(g, NAME("attn_k.bias"), dim, 1, &L->bk));
        PL_TRY(load_vector(g, NAME("attn_v.bias"), dim, 1, &L->bv));
        PL_TRY(load_vector(g, NAME("attn_output.bias"), dim, 1, &L->bo));
        PL_TRY(load_vector(g, NAME("attn_output_norm.weight"), dim, 0, &L->attn_out_norm));
        PL_TRY(load_vector(g, NAME("attn_output_norm.bias"), dim, 0, &L->attn_out_norm_b));
        PL_TRY(bind_weight(g, NAME("ffn_up.weight"), dim, ff, &L->w_up));
        PL_TRY(load_vector(g, NAME("ffn_up.bias"), ff, 1, &L->b_up));
        PL_TRY(bind_weight(g, NAME("ffn_down.weight"), ff, dim, &L->w_down));
        PL_TRY(load_vector(g, NAME("ffn_down.bias"), dim, 1, &L->b_down));
        PL_TRY(load_vector(g, NAME("layer_output_norm.weight"), dim, 0, &L->out_norm));
        PL_TRY(load_vector(g, NAME("layer_output_norm.bias"), dim, 0, &L->out_norm_b));
#undef NAME
    }
    return PL_OK;
}

static pl_status bind_weights(pl_model *m) {
    const pl_gguf *g = m->file;
    pl_model_hparams *hp = &m->hp;
    const pl_model_shard *sh = &m->shard;
    /* Full shapes as stored, and this rank's slice of heads and FFN rows (all of them at 1). */
    const int64_t dim = hp->dim, q_dim = (int64_t)sh->n_heads * hp->head_dim;
    const int64_t kv_dim = (int64_t)sh->n_kv_heads * hp->head_dim, ff = sh->ffn_dim;
    const int64_t q_loc = q_dim / sh->size, kv_loc = kv_dim / sh->size, ff_loc = ff / sh->size;
    const int64_t r = sh->rank;

    const pl_gguf_tensor *emb = pl_gguf_find_tensor(g, "token_embd.weight");
    if (!emb) return pl_fail(PL_ERR_FORMAT, "missing tensor 'token_embd.weight'");
    hp->n_vocab = (int32_t)emb->ne[1];
    if (emb->ne[1] > INT32_MAX || emb->ne[1] < 1)
        return pl_fail(PL_ERR_FORMAT, "token_embd.weight has %lld rows", (long long)emb->ne[1]);
    PL_TRY(bind_weight(g, "token_embd.weight", dim, hp->n_vocab, &m->tok_embd));
    if (hp->arch == PL_ARCH_BERT) return bind_bert_weights(m);
    PL_TRY(load_vector(g, "output_norm.weight", dim, 0, &m->output_norm));
    if (pl_gguf_find_tensor(g, "output.weight"))
        PL_TRY(bind_weight(g, "output.weight", dim, hp->n_vocab, &m->output));
    else
        m->output = m->tok_embd; /* tied embeddings */
    PL_TRY(load_vector(g, "rope_freqs.weight", hp->rope.n_rot / 2, 1, &m->rope_freqs));
    hp->rope.freq_factors = m->rope_freqs;
    /* PAGELLM_TP_OUTPUT=rank0 (benchmarks): the output layer stays whole, for rank 0 alone */
    const char *how = getenv("PAGELLM_TP_OUTPUT");
    int split = sh->size > 1 && !(how && !strcmp(how, "rank0"));
    m->shard.vocab0 = split ? (int32_t)((int64_t)hp->n_vocab * r / sh->size) : 0;
    m->shard.n_vocab = split ? (int32_t)((int64_t)hp->n_vocab * (r + 1) / sh->size) -
                                   m->shard.vocab0
                             : hp->n_vocab;
    if (split) slice_rows(&m->output, m->shard.vocab0, m->shard.n_vocab);

    m->layers = calloc((size_t)hp->n_layers, sizeof *m->layers);
    if (!m->layers) return pl_fail(PL_ERR_NOMEM, "out of memory for %d layers", hp->n_layers);
    for (int32_t l = 0; l < hp->n_layers; l++) {
        pl_layer_weights *L = &m->layers[l];
        char n[96];
#define NAME(s) (snprintf(n, sizeof n, "blk.%d." s, l), n)
        PL_TRY(load_vector(g, NAME("attn_norm.weight"), dim, 0, &L->attn_norm));
        PL_TRY(bind_weight(g, NAME("attn_q.weight"), dim, q_dim, &L->wq));
        PL_TRY(bind_weight(g, NAME("attn_k.weight"), dim, kv_dim, &L->wk));
        PL_TRY(bind_weight(g, NAME("attn_v.weight"), dim, kv_dim, &L->wv));
        PL_TRY(bind_weight(g, NAME("attn_output.weight"), q_dim, dim, &L->wo));
        int bias_optional = hp->arch != PL_ARCH_QWEN2;
        PL_TRY(load_vector(g, NAME("attn_q.bias"), q_dim, bias_optional, &L->bq));
        PL_TRY(load_vector(g, NAME("attn_k.bias"), kv_dim, bias_optional, &L->bk));
        PL_TRY(load_vector(g, NAME("attn_v.bias"), kv_dim, bias_optional, &L->bv));
        PL_TRY(load_vector(g, NAME("ffn_norm.weight"), dim, 0, &L->ffn_norm));
        PL_TRY(bind_weight(g, NAME("ffn_gate.weight"), dim, ff, &L->w_gate));
        PL_TRY(bind_weight(g, NAME("ffn_up.weight"), dim, ff, &L->w_up));
        PL_TRY(bind_weight(g, NAME("ffn_down.weight"), ff, dim, &L->w_down));
        if (sh->size > 1) {
            slice_rows(&L->wq, r * q_loc, q_loc);
            slice_rows(&L->wk, r * kv_loc, kv_loc);
            slice_rows(&L->wv, r * kv_loc, kv_loc);
            slice_vector(L->bq, r * q_loc, q_loc);
            slice_vector(L->bk, r * kv_loc, kv_loc);
            slice_vector(L->bv, r * kv_loc, kv_loc);
            PL_TRY(slice_cols(m, NAME("attn_output.weight"), &L->wo, r * q_loc, q_loc));
            slice_rows(&L->w_gate, r * ff_loc, ff_loc);
            slice_rows(&L->w_up, r * ff_loc, ff_loc);
            PL_TRY(slice_cols(m, NAME("ffn_down.weight"), &L->w_down, r * ff_loc, ff_loc));
        }
#undef NAME
    }
    return PL_OK;
}

/* The shard's local head and FFN counts; the full ones stay in m->shard. */
static pl_status shard_hparams(pl_model *m, int32_t rank, int32_t size) {
    pl_model_hparams *hp = &m->hp;
    m->shard = (pl_model_shard){.rank = rank, .size = size, .n_heads = hp->n_heads,
                                .n_kv_heads = hp->n_kv_heads, .ffn_dim = hp->ffn_dim};
    if (size == 1) return PL_OK;
    if (hp->arch != PL_ARCH_LLAMA && hp->arch != PL_ARCH_QWEN2)
        return pl_fail(PL_ERR_UNSUPPORTED, "tensor parallelism supports the llama and qwen2 "
                       "architectures, not '%s'", hp->arch_name);
    if (hp->n_kv_heads % size)
        return pl_fail(PL_ERR_INVALID_ARG, "tensor-parallel-size %d does not divide the model's "
                       "%d KV heads (each rank holds whole KV heads: use a divisor of %d)", size,
                       hp->n_kv_heads, hp->n_kv_heads);
    if (hp->ffn_dim % size)
        return pl_fail(PL_ERR_INVALID_ARG, "tensor-parallel-size %d does not divide the model's "
                       "FFN width %d", size, hp->ffn_dim);
    hp->n_heads /= size;
    hp->n_kv_heads /= size;
    hp->ffn_dim /= size;
    return PL_OK;
}

pl_status pl_model_load(const char *path, pl_model **out) {
    return pl_model_load_shard(path, 0, 1, out);
}

pl_status pl_model_load_shard(const char *path, int32_t rank, int32_t size, pl_model **out) {
    *out = NULL;
    PL_ASSERT(size >= 1 && rank >= 0 && rank < size);
    pl_model *m = calloc(1, sizeof *m);
    if (!m) return pl_fail(PL_ERR_NOMEM, "out of memory");
    pl_status st = pl_gguf_open(path, &m->file);
    if (st == PL_OK) st = read_hparams(m->file, &m->hp);
    if (st == PL_OK) st = shard_hparams(m, rank, size);
    if (st == PL_OK) st = bind_weights(m);
    if (st == PL_OK) st = pl_tokenizer_load(m->file, &m->tok);
    if (st == PL_OK && pl_tokenizer_n_vocab(m->tok) != m->hp.n_vocab)
        st = pl_fail(PL_ERR_FORMAT, "the vocabulary has %d tokens but token_embd.weight has %d "
                     "rows", pl_tokenizer_n_vocab(m->tok), m->hp.n_vocab);
    if (st != PL_OK) {
        if (!m->file || strncmp(pl_last_error(), path, strlen(path)) != 0)
            pl_error_prefix("%s", path);
        pl_model_destroy(m);
        return st;
    }
    *out = m;
    return PL_OK;
}

void pl_model_destroy(pl_model *m) {
    if (!m) return;
    if (m->layers) {
        for (int32_t l = 0; l < m->hp.n_layers; l++) {
            pl_layer_weights *L = &m->layers[l];
            PL_FREE_ALL(L->attn_norm, L->ffn_norm, L->bq, L->bk, L->bv, L->bo, L->b_up, L->b_down,
                        L->attn_out_norm, L->attn_out_norm_b, L->out_norm, L->out_norm_b);
        }
        free(m->layers);
    }
    for (int32_t i = 0; i < m->n_owned; i++) free(m->owned[i]);
    PL_FREE_ALL(m->output_norm, m->rope_freqs, m->type_embd, m->embd_norm, m->embd_norm_b,
                m->owned);
    pl_tokenizer_destroy(m->tok);
    pl_gguf_close(m->file);
    free(m);
}
