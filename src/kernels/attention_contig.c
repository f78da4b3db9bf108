/* kernels/attention_contig — see attention_contig.h. A key's address is base + position x
 * stride: no table, no pages, no gather. */
#include "kernels/attention_contig.h"

#include "base/status.h"
#include "kernels/attention_impl.h"
#include "kernels/quant.h"

#include <stdatomic.h>
#include <string.h>

typedef struct {
    const pl_kv_layout *l;
    const pl_contig_attn_args *a;
    pl_attn_tile_fn tile_fn;
    int32_t group, item_rows;
    int64_t n_items;
    atomic_int_fast64_t next;
} contig_ctx;

static int32_t q_len_of(const pl_contig_attn_args *a, int32_t i) {
    return a->seq_start[i + 1] - a->seq_start[i];
}

static int64_t items_of(const contig_ctx *c, int32_t i) {
    return (int64_t)(q_len_of(c->a, i) + c->item_rows - 1) / c->item_rows * c->l->n_kv_heads;
}

static int32_t first_seen(int32_t window, int32_t pos) {
    return window > 0 && pos - window + 1 > 0 ? pos - window + 1 : 0;
}

/* Query rows [r0, r1) of sequence i against KV head g of its tensors. */
static void attend(const contig_ctx *c, int32_t i, int32_t g, int32_t r0, int32_t r1) {
    const pl_contig_attn_args *a = c->a;
    const int32_t hd = c->l->head_dim, G = c->group, W = a->window;
    const size_t stride = a->token_stride;
    const char *kb = (const char *)a->k[i] + (size_t)g * a->head_stride;
    const char *vb = (const char *)a->v[i] + (size_t)g * a->head_stride;
    const int32_t first_pos = a->context_lens[i] - q_len_of(a, i);
    const size_t row_stride = (size_t)a->n_heads * (size_t)hd;

    _Alignas(64) float qbuf[PL_ATTN_MAXQ * PL_ATTN_MAX_HEAD_DIM];
    _Alignas(64) float acc[PL_ATTN_MAXQ * PL_ATTN_MAX_HEAD_DIM];
    _Alignas(64) float s[PL_ATTN_MAXQ * PL_ATTN_KT];
    int8_t qq[PL_ATTN_MAXQ * PL_ATTN_MAX_HEAD_DIM];
    float qd[PL_ATTN_MAXQ * PL_ATTN_MAX_HEAD_DIM / PL_QK];
    int32_t qsum[PL_ATTN_MAXQ * PL_ATTN_MAX_HEAD_DIM / PL_QK];
    float vd[PL_ATTN_KT * PL_ATTN_MAX_HEAD_DIM / PL_QK];
    float m[PL_ATTN_MAXQ], lsum[PL_ATTN_MAXQ];
    int32_t pos[PL_ATTN_MAXQ], nvis[PL_ATTN_MAXQ], nlo[PL_ATTN_MAXQ];
    const void *krow[PL_ATTN_KT], *vrow[PL_ATTN_KT];
    pl_attn_tile t = {.head_dim = hd, .kt = pl_attn_kind(c->l->dtype), .scale = a->scale,
                      .softcap = a->softcap, .nlo = nlo, .nvis = nvis, .q = qbuf, .qq = qq,
                      .qd = qd, .qsum = qsum, .vd = vd, .krow = krow, .vrow = vrow, .m = m,
                      .l = lsum, .acc = acc, .s = s};

    const int32_t n_vec = (r1 - r0) * G; /* vector v: row r0 + v / G, head g x G + v % G */
    for (int32_t v0 = 0; v0 < n_vec; v0 += PL_ATTN_MAXQ) {
        const int32_t nq = n_vec - v0 < PL_ATTN_MAXQ ? n_vec - v0 : PL_ATTN_MAXQ;
        for (int32_t v = 0; v < nq; v++) {
            const int32_t r = r0 + (v0 + v) / G, h = g * G + (v0 + v) % G;
            memcpy(qbuf + (size_t)v * hd,
                   a->q + (size_t)(a->seq_start[i] + r) * row_stride + (size_t)h * hd,
                   (size_t)hd * sizeof(float));
            pl_attn_prepare_query(t.kt, qbuf + (size_t)v * hd, qq + (size_t)v * hd,
                                  qd + (size_t)v * (hd / PL_QK), qsum + (size_t)v * (hd / PL_QK),
                                  hd);
            pos[v] = first_pos + r;
            m[v] = -INFINITY;
            lsum[v] = 0.0f;
        }
        memset(acc, 0, (size_t)nq * hd * sizeof(float));
        const int32_t last = pos[nq - 1], lo0 = first_seen(W, pos[0]);
        t.nq = nq;
        for (int32_t t0 = lo0 - lo0 % PL_ATTN_KT; t0 <= last; t0 += PL_ATTN_KT) {
            const int32_t nk = last + 1 - t0 < PL_ATTN_KT ? last + 1 - t0 : PL_ATTN_KT;
            for (int32_t j = 0; j < nk; j++) {
                /* keys before the window are never read: they point at the first seen one */
                const size_t p = (size_t)(t0 + j < lo0 ? lo0 : t0 + j);
                krow[j] = kb + p * stride;
                vrow[j] = vb + p * stride;
            }
            for (int32_t v = 0; v < nq; v++) {
                const int32_t n = pos[v] + 1 - t0, lo = first_seen(W, pos[v]) - t0;
                nvis[v] = n < 0 ? 0 : n > nk ? nk : n;
                nlo[v] = lo < 0 ? 0 : lo > nk ? nk : lo;
            }
            t.nk = nk;
            c->tile_fn(&t);
        }
        for (int32_t v = 0; v < nq; v++) {
            const int32_t r = r0 + (v0 + v) / G, h = g * G + (v0 + v) % G;
            float *out = a->out + (size_t)(a->seq_start[i] + r) * row_stride + (size_t)h * hd;
            pl_attn_finish_row(out, acc + (size_t)v * hd, m[v], lsum[v],
                               a->sinks ? &a->sinks[h] : NULL, hd);
        }
    }
}

static void contig_job(void *p, int ith, int nth) {
    (void)ith, (void)nth;
    contig_ctx *c = p;
    const int32_t n_kv = c->l->n_kv_heads;
    int32_t seq = 0;
    int64_t base = 0;
    for (;;) {
        const int64_t idx = atomic_fetch_add_explicit(&c->next, 1, memory_order_relaxed);
        if (idx >= c->n_items) return;
        while (idx >= base + items_of(c, seq)) base += items_of(c, seq++);
        const int64_t k = idx - base;
        const int32_t r0 = (int32_t)(k / n_kv) * c->item_rows, q_len = q_len_of(c->a, seq);
        attend(c, seq, (int32_t)(k % n_kv), r0,
               r0 + c->item_rows < q_len ? r0 + c->item_rows : q_len);
    }
}

void pl_contig_attention(pl_threadpool *tp, const pl_kv_layout *l, const pl_contig_attn_args *a) {
    PL_ASSERT(pl_kv_layout_problem(l) == NULL && l->n_kv_heads > 0);
    PL_ASSERT(a->n_heads > 0 && a->n_heads % l->n_kv_heads == 0 && a->window >= 0);
    PL_ASSERT(a->n_seqs >= 0 && a->seq_start[0] >= 0);
    const size_t rb = pl_kv_row_bytes(l); /* rows may not overlap: a head's or a token's */
    PL_ASSERT(a->token_stride >= rb && a->head_stride >= rb &&
              (a->token_stride >= rb * (size_t)l->n_kv_heads ||
               a->head_stride >= a->token_stride));
    contig_ctx c = {.l = l, .a = a, .tile_fn = pl_attn_tile_for_isa(),
                    .group = a->n_heads / l->n_kv_heads};
    c.item_rows = c.group >= PL_ATTN_MAXQ ? 1 : PL_ATTN_MAXQ / c.group;
    for (int32_t i = 0; i < a->n_seqs; i++) {
        PL_ASSERT(q_len_of(a, i) >= 0 && a->context_lens[i] >= q_len_of(a, i));
        PL_ASSERT(q_len_of(a, i) == 0 || (a->k[i] && a->v[i]));
        c.n_items += items_of(&c, i);
    }
    atomic_init(&c.next, 0);
    if (c.n_items == 0) return;
    const int64_t nth = pl_threadpool_size(tp);
    pl_threadpool_run_n(tp, (int)(c.n_items < nth ? c.n_items : nth), contig_job, &c);
}
