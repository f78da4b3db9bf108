/* model/lora — see lora.h. Checks follow llama.cpp's llama_adapter_lora_init (general.type,
 * architecture, adapter.type, pairs complete, shapes against the base tensor, A's rank equal to
 * B's), plus what pagellm cannot compute, each refused naming the tensor. */
#include "model/lora.h"
#include "model/forward_internal.h"

#include "base/buf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const pl_lora_target_names[PL_LORA_N_TARGETS] = {
    "attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"};

static const pl_weight *base_weight(const pl_model *m, int32_t l, pl_lora_target t) {
    const pl_layer_weights *L = &m->layers[l];
    const pl_weight *w[PL_LORA_N_TARGETS] = {&L->wq, &L->wk, &L->wv, &L->wo,
                                             &L->w_gate, &L->w_up, &L->w_down};
    return w[t];
}

static uint64_t next_uid = 1;
static pthread_mutex_t uid_mu = PTHREAD_MUTEX_INITIALIZER;

void pl_lora_ref(pl_lora *a) { atomic_fetch_add(&a->refs, 1); }

void pl_lora_unref(pl_lora *a) {
    if (!a || atomic_fetch_sub(&a->refs, 1) != 1) return;
    pl_gguf_close(a->file);
    free(a->layers);
    free(a);
}

uint64_t pl_lora_cache_key(const pl_lora *a) {
    return a ? (a->uid * 0x9E3779B97F4A7C15ull) ^ 0x4C6F5241ull : 0;
}

static pl_status check_str(const pl_gguf *g, const char *path, const char *key, const char *want,
                           const char *what) {
    pl_gguf_str s = {0};
    if (pl_gguf_get_str(g, key, &s) != PL_OK || !pl_gguf_str_eq(s, want))
        return pl_fail(PL_ERR_INVALID_ARG, "lora %s: %s '%.*s' is not %s (%s '%s')", path, key,
                       (int)(s.len > 64 ? 64 : s.len), s.ptr ? s.ptr : "", what, key, want);
    return PL_OK;
}

/* Which layer and target `base` (a base tensor's name) is; -1 when it is not adaptable. */
static int parse_target(const pl_model *m, const char *base, int32_t *layer) {
    int l, n = 0;
    char tname[32];
    if (sscanf(base, "blk.%d.%31[a-z_].weight%n", &l, tname, &n) != 2 || base[n] != 0 || l < 0 ||
        l >= m->hp.n_layers)
        return -1;
    for (int t = 0; t < PL_LORA_N_TARGETS; t++)
        if (!strcmp(tname, pl_lora_target_names[t])) {
            *layer = l;
            return t;
        }
    return -1;
}

static int ends_with(const char *s, const char *suf) {
    size_t n = strlen(s), k = strlen(suf);
    return n >= k && !strcmp(s + n - k, suf);
}

/* Bind the pair of tensor a (whose name ends in .lora_a). */
static pl_status bind_pair(pl_lora *ad, const pl_model *m, const pl_gguf_tensor *ta,
                           float scale, int32_t max_rank) {
    const char *path = ad->path;
    char base[256], bname[272];
    size_t n = strlen(ta->name) - strlen(".lora_a");
    if (n >= sizeof base)
        return pl_fail(PL_ERR_UNSUPPORTED, "lora %s: tensor name '%s' is too long", path, ta->name);
    memcpy(base, ta->name, n);
    base[n] = 0;
    snprintf(bname, sizeof bname, "%s.lora_b", base);
    const pl_gguf_tensor *tb = pl_gguf_find_tensor(ad->file, bname);
    if (!tb)
        return pl_fail(PL_ERR_FORMAT, "lora %s: the pair of '%s' lacks '%s'", path, ta->name, bname);
    const pl_gguf_tensor *tw = pl_gguf_find_tensor(m->file, base);
    if (!tw)
        return pl_fail(PL_ERR_INVALID_ARG, "lora %s: tensor '%s' does not exist in the base model "
                       "(an adapter of another model?)", path, base);
    if (ta->n_dims != 2 || tb->n_dims != 2 || tw->n_dims != 2 || tw->ne[0] != ta->ne[0] ||
        tw->ne[1] != tb->ne[1])
        return pl_fail(PL_ERR_INVALID_ARG, "lora %s: tensor '%s': lora_a [%lld, %lld] and lora_b "
                       "[%lld, %lld] do not fit the base tensor [%lld, %lld] (an adapter of "
                       "another model?)", path, base, (long long)ta->ne[0], (long long)ta->ne[1],
                       (long long)tb->ne[0], (long long)tb->ne[1], (long long)tw->ne[0],
                       (long long)tw->ne[1]);
    if (ta->ne[1] != tb->ne[0])
        return pl_fail(PL_ERR_INVALID_ARG, "lora %s: tensor '%s': lora_a's rank %lld is not "
                       "lora_b's %lld", path, base, (long long)ta->ne[1], (long long)tb->ne[0]);
    int32_t layer = 0;
    int t = parse_target(m, base, &layer);
    const pl_weight *w = t >= 0 ? base_weight(m, layer, (pl_lora_target)t) : NULL;
    if (!w || !w->data || w->cols != tw->ne[0] || w->rows != tw->ne[1])
        return pl_fail(PL_ERR_UNSUPPORTED, "lora %s: tensor '%s': adapting it is not supported "
                       "(only the attention and dense FFN matrices of the layers)", path, base);
    const pl_gguf_tensor *ab[2] = {ta, tb};
    for (int i = 0; i < 2; i++)
        if (ab[i]->type != PL_DT_F32 && ab[i]->type != PL_DT_F16 && ab[i]->type != PL_DT_BF16)
            return pl_fail(PL_ERR_UNSUPPORTED, "lora %s: tensor '%s' is %s (f32, f16 or bf16 "
                           "supported)", path, ab[i]->name, pl_dtype_name(ab[i]->type));
    const int64_t rank = ta->ne[1];
    if (rank > max_rank)
        return pl_fail(PL_ERR_INVALID_ARG, "lora %s: tensor '%s' has rank %lld, above "
                       "--max-lora-rank %d", path, base, (long long)rank, max_rank);
    pl_lora_pair *p = &ad->layers[layer][t];
    p->a = (pl_weight){.data = ta->data, .type = ta->type, .rows = rank, .cols = ta->ne[0]};
    p->b = (pl_weight){.data = tb->data, .type = tb->type, .rows = tb->ne[1], .cols = rank};
    p->scale = ad->alpha != 0 ? scale * ad->alpha / (float)rank : scale;
    if (rank > ad->max_rank) ad->max_rank = (int32_t)rank;
    ad->n_pairs++;
    return PL_OK;
}

static pl_status load_tensors(pl_lora *ad, const pl_model *m, float scale, int32_t max_rank) {
    const char *path = ad->path;
    for (int64_t i = 0; i < pl_gguf_n_tensors(ad->file); i++) {
        const pl_gguf_tensor *t = pl_gguf_tensor_at(ad->file, i);
        if (ends_with(t->name, ".lora_a")) {
            PL_TRY(bind_pair(ad, m, t, scale, max_rank));
        } else if (ends_with(t->name, ".lora_b")) {
            char a[272];
            snprintf(a, sizeof a, "%.*s.lora_a", (int)(strlen(t->name) - 7), t->name);
            if (!pl_gguf_find_tensor(ad->file, a))
                return pl_fail(PL_ERR_FORMAT, "lora %s: the pair of '%s' lacks '%s'", path,
                               t->name, a);
        } else if (!ends_with(t->name, "_norm.weight")) { /* llama.cpp skips norms too */
            return pl_fail(PL_ERR_FORMAT, "lora %s: tensor '%s' is neither .lora_a nor .lora_b",
                           path, t->name);
        }
    }
    if (ad->n_pairs == 0)
        return pl_fail(PL_ERR_FORMAT, "lora %s: no .lora_a / .lora_b tensor pairs", path);
    return PL_OK;
}

pl_status pl_lora_load(const pl_model *m, const char *path, float scale, int32_t max_rank,
                       pl_lora **out) {
    *out = NULL;
    if (strlen(path) >= sizeof ((pl_lora *)0)->path)
        return pl_fail(PL_ERR_INVALID_ARG, "lora: path '%.64s...' is too long", path);
    if (m->hp.pooling != PL_POOL_NONE || m->shard.size > 1)
        return pl_fail(PL_ERR_UNSUPPORTED, "lora %s: adapters need a whole generation model (not "
                       "an embedding model, not tensor parallel)", path);
    pl_lora *ad = calloc(1, sizeof *ad);
    if (!ad) return pl_fail(PL_ERR_NOMEM, "lora %s: out of memory", path);
    atomic_init(&ad->refs, 1);
    snprintf(ad->path, sizeof ad->path, "%s", path);
    ad->n_layers = m->hp.n_layers;
    pl_status st = pl_gguf_open(path, &ad->file);
    if (st == PL_OK) st = check_str(ad->file, path, "general.type", "adapter", "an adapter");
    if (st == PL_OK) st = check_str(ad->file, path, "adapter.type", "lora", "a LoRA adapter");
    if (st == PL_OK)
        st = check_str(ad->file, path, "general.architecture", m->hp.arch_name,
                       "the base model's architecture");
    if (st == PL_OK && pl_gguf_find_key(ad->file, "adapter.alora.invocation_tokens") >= 0)
        st = pl_fail(PL_ERR_UNSUPPORTED, "lora %s: activated LoRA (adapter.alora.*) is not "
                     "supported", path);
    double alpha = 0;
    if (st == PL_OK && pl_gguf_find_key(ad->file, "adapter.lora.alpha") >= 0)
        st = pl_gguf_get_float(ad->file, "adapter.lora.alpha", &alpha);
    ad->alpha = (float)alpha;
    if (st == PL_OK && !(ad->layers = calloc((size_t)m->hp.n_layers, sizeof *ad->layers)))
        st = pl_fail(PL_ERR_NOMEM, "lora %s: out of memory", path);
    if (st == PL_OK) st = load_tensors(ad, m, scale, max_rank);
    if (st != PL_OK) {
        pl_lora_unref(ad);
        return st;
    }
    pthread_mutex_lock(&uid_mu);
    ad->uid = next_uid++;
    pthread_mutex_unlock(&uid_mu);
    *out = ad;
    return PL_OK;
}

/* ---- the set ---- */

void pl_lora_set_init(pl_lora_set *s, const pl_model *m, int32_t max_rank) {
    memset(s, 0, sizeof *s);
    pthread_mutex_init(&s->mu, NULL);
    s->model = m;
    s->max_rank = max_rank;
}

void pl_lora_set_destroy(pl_lora_set *s) {
    for (int32_t i = 0; i < s->n; i++) pl_lora_unref(s->items[i]);
    free(s->items);
    pthread_mutex_destroy(&s->mu);
    memset(s, 0, sizeof *s);
}

static int32_t find_locked(const pl_lora_set *s, const char *name) {
    for (int32_t i = 0; i < s->n; i++)
        if (!strcmp(s->items[i]->name, name)) return i;
    return -1;
}

pl_status pl_lora_set_add(pl_lora_set *s, const char *name, const char *path, float scale) {
    if (s->max_rank <= 0)
        return pl_fail(PL_ERR_INVALID_ARG, "lora '%s': adapters are off (--enable-lora, "
                       "--max-lora-rank)", name);
    if (!name[0] || strlen(name) >= sizeof ((pl_lora *)0)->name)
        return pl_fail(PL_ERR_INVALID_ARG, "lora: a name of 1 to 127 bytes is needed, got '%.64s'",
                       name);
    pthread_mutex_lock(&s->mu);
    int in_use = find_locked(s, name) >= 0;
    pthread_mutex_unlock(&s->mu);
    if (in_use) return pl_fail(PL_ERR_INVALID_ARG, "lora '%s': the name is in use", name);
    pl_lora *a;
    PL_TRY(pl_lora_load(s->model, path, scale, s->max_rank, &a));
    snprintf(a->name, sizeof a->name, "%s", name);
    pl_status st = PL_OK;
    pthread_mutex_lock(&s->mu);
    if (find_locked(s, name) >= 0) { /* another thread took it while this one loaded */
        st = pl_fail(PL_ERR_INVALID_ARG, "lora '%s': the name is in use", name);
    } else if (s->n == s->cap) {
        int32_t cap = s->cap ? 2 * s->cap : 4;
        pl_lora **p = realloc(s->items, (size_t)cap * sizeof *p);
        if (!p) st = pl_fail(PL_ERR_NOMEM, "lora '%s': out of memory", name);
        else s->items = p, s->cap = cap;
    }
    if (st == PL_OK) s->items[s->n++] = a;
    pthread_mutex_unlock(&s->mu);
    if (st != PL_OK) pl_lora_unref(a);
    return st;
}

pl_status pl_lora_set_remove(pl_lora_set *s, const char *name) {
    pthread_mutex_lock(&s->mu);
    int32_t i = find_locked(s, name);
    pl_lora *a = i >= 0 ? s->items[i] : NULL;
    if (a) memmove(s->items + i, s->items + i + 1, (size_t)(--s->n - i) * sizeof *s->items);
    pthread_mutex_unlock(&s->mu);
    if (!a) return pl_fail(PL_ERR_NOT_FOUND, "lora '%s': no adapter of that name is loaded", name);
    pl_lora_unref(a);
    return PL_OK;
}

pl_lora *pl_lora_set_acquire(pl_lora_set *s, const char *name) {
    pthread_mutex_lock(&s->mu);
    int32_t i = find_locked(s, name);
    pl_lora *a = i >= 0 ? s->items[i] : NULL;
    if (a) pl_lora_ref(a);
    s->acquired += a != NULL;
    pthread_mutex_unlock(&s->mu);
    return a;
}

int32_t pl_lora_set_list(pl_lora_set *s, pl_lora_info *out, int32_t cap, uint64_t *acquired) {
    pthread_mutex_lock(&s->mu);
    int32_t n = s->n;
    if (acquired) *acquired = s->acquired;
    for (int32_t i = 0; i < n && i < cap; i++) {
        snprintf(out[i].name, sizeof out[i].name, "%s", s->items[i]->name);
        snprintf(out[i].path, sizeof out[i].path, "%s", s->items[i]->path);
    }
    pthread_mutex_unlock(&s->mu);
    return n;
}

/* ---- the forward pass ---- */

pl_status pl_forward_lora_enable(pl_forward_ctx *c, int32_t max_rank) {
    const pl_model_hparams *hp = &c->m->hp;
    int64_t out = hp->dim, qd = (int64_t)hp->n_heads * hp->head_dim;
    out = qd > out ? qd : out;
    out = hp->ffn_dim > out ? hp->ffn_dim : out;
    const size_t T = (size_t)c->max_tokens;
    /* activations for A (cols <= out) or B (cols = rank), in the widest conversion (f16/bf16) */
    const int64_t cols = out > max_rank ? out : max_rank;
    size_t mm = pl_matmul_scratch_size(PL_DT_F16, cols, (int64_t)T);
    size_t mb = pl_matmul_scratch_size(PL_DT_BF16, cols, (int64_t)T);
    c->lora_r = malloc(T * (size_t)max_rank * sizeof(float));
    c->lora_y = malloc(T * (size_t)out * sizeof(float));
    c->lora_x = malloc(T * (size_t)out * sizeof(float));
    c->lora_mm = malloc((mm > mb ? mm : mb) + 64);
    if (!c->lora_r || !c->lora_y || !c->lora_x || !c->lora_mm) {
        PL_FREE_ALL(c->lora_r, c->lora_y, c->lora_x, c->lora_mm);
        c->lora_r = c->lora_y = c->lora_x = NULL;
        c->lora_mm = NULL;
        return pl_fail(PL_ERR_NOMEM, "forward: out of memory for LoRA scratch of rank %d",
                       max_rank);
    }
    c->lora_max_rank = max_rank;
    return PL_OK;
}

void pl_lora_apply(pl_forward_ctx *c, const pl_step_batch *b, int32_t layer, pl_lora_target tgt,
                   const float *x, int64_t in, float *y, int64_t ldy) {
    if (!b->seq_lora) return;
    const int32_t *st = b->seq_start;
    for (int32_t s = 0; s < b->n_seqs; s++) {
        const pl_lora *a = b->seq_lora[s];
        const pl_lora_pair *p = a ? &a->layers[layer][tgt] : NULL;
        if (!p || !p->a.data) continue;
        int seen = 0; /* each adapter once, at its first sequence */
        for (int32_t k = 0; k < s && !seen; k++) seen = b->seq_lora[k] == a;
        if (seen) continue;
        PL_ASSERT(c->lora_r && p->a.rows <= c->lora_max_rank && p->a.cols == in);
        /* Its rows: sequences s.. under a, read in place when they are one run, else gathered. */
        int64_t rows = 0, end = st[s];
        int run = 1;
        for (int32_t k = s; k < b->n_seqs; k++) {
            if (b->seq_lora[k] != a) continue;
            run &= st[k] == end;
            end = st[k + 1];
            rows += st[k + 1] - st[k];
        }
        const float *xa = x + st[s] * in;
        if (!run) {
            xa = c->lora_x;
            for (int32_t k = s, r = 0; k < b->n_seqs; k++) {
                if (b->seq_lora[k] != a) continue;
                memcpy(c->lora_x + (int64_t)r * in, x + st[k] * in,
                       (size_t)((st[k + 1] - st[k]) * in) * sizeof(float));
                r += st[k + 1] - st[k];
            }
        }
        const int64_t out = p->b.rows;
        pl_matmul(c->tp, &p->a, xa, rows, c->lora_r, p->a.rows, c->lora_mm);
        pl_matmul(c->tp, &p->b, c->lora_r, rows, c->lora_y, out, c->lora_mm);
        const float *d = c->lora_y; /* row by row in the gathering order */
        for (int32_t k = s; k < b->n_seqs; k++) {
            if (b->seq_lora[k] != a) continue;
            for (int64_t t = st[k]; t < st[k + 1]; t++, d += out)
                for (int64_t o = 0; o < out; o++) y[t * ldy + o] += p->scale * d[o];
        }
    }
}
