/* kernels/attention — see attention.h; the tile contract is in attention_impl.h.
 *
 * This file holds the parts that are the same for every instruction set: the K/V slot write, the
 * block copy, the work split over threads, the driver that walks one work item's positions tile
 * by tile through the block table, the scalar tile function, and the plain scalar reference.
 *
 * Work items are (sequence, KV head, tile of PL_ATTN_MAXQ / group query rows). Their shape
 * depends only on the sequence (its q_len) and the model (GQA ratio), never on the thread count;
 * threads take items from a shared counter, a prefill's costliest (last) row tiles first. Each
 * item is computed by one thread from start to end, and the tile functions treat every query
 * vector independently (attention_impl.h), so an output row gets the same arithmetic whatever
 * thread computes it and whatever else is in the batch.
 *
 * No heap and no per-context scratch: one item's state (its queries, accumulators, one tile of
 * scores) is ~70 KB of stack.
 */
#include "kernels/attention.h"

#include "base/fp16.h"
#include "base/status.h"
#include "kernels/attention_impl.h"
#include "kernels/cpu.h"
#include "kernels/quant.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>

/* ---------------------------------------------------------------- layout helpers */

static int is_quantized(pl_dtype t) { return t == PL_DT_Q8_0 || t == PL_DT_Q4_0; }

static void check_layout(const pl_kv_layout *l) {
    PL_ASSERT(l->dtype == PL_DT_F16 || l->dtype == PL_DT_F32 || l->dtype == PL_DT_BF16 ||
              is_quantized(l->dtype));
    PL_ASSERT(l->block_size > 0 && l->n_kv_heads > 0 && l->num_blocks > 0);
    PL_ASSERT(l->head_dim > 0 && l->head_dim % 4 == 0 && l->head_dim <= PL_ATTN_MAX_HEAD_DIM);
    PL_ASSERT(!is_quantized(l->dtype) || l->head_dim % PL_QK == 0);
}

const char *pl_kv_layout_problem(const pl_kv_layout *l) {
    if (l->dtype != PL_DT_F16 && l->dtype != PL_DT_F32 && l->dtype != PL_DT_BF16 &&
        !is_quantized(l->dtype))
        return "the KV cache dtype must be f32, f16, bf16, q8_0 or q4_0";
    if (l->head_dim <= 0 || l->head_dim % 4 != 0 || l->head_dim > PL_ATTN_MAX_HEAD_DIM)
        return "head_dim must be a multiple of 4 in 4..512";
    if (is_quantized(l->dtype) && l->head_dim % PL_QK != 0)
        return "a q8_0 or q4_0 KV cache quantizes each head's K and V rows in groups of 32 "
               "elements: head_dim must be a multiple of 32 (use f16, bf16 or f32)";
    return NULL;
}

size_t pl_kv_row_bytes(const pl_kv_layout *l) {
    if (pl_kv_layout_problem(l)) return 0;
    return pl_dtype_row_size(l->dtype, l->head_dim);
}

size_t pl_kv_block_bytes(const pl_kv_layout *l) {
    return pl_kv_row_bytes(l) * (size_t)l->n_kv_heads * (size_t)l->block_size;
}

static int kind_of(pl_dtype t) {
    switch (t) {
    case PL_DT_F16: return PL_KT_F16;
    case PL_DT_BF16: return PL_KT_BF16;
    case PL_DT_Q8_0: return PL_KT_Q8_0;
    case PL_DT_Q4_0: return PL_KT_Q4_0;
    default: return PL_KT_F32;
    }
}

/* Bytes of a row of a checked layout, without pl_kv_row_bytes's validation (the hot path). */
static size_t row_bytes(const pl_kv_layout *l) {
    const size_t hd = (size_t)l->head_dim;
    switch (l->dtype) {
    case PL_DT_F32: return 4 * hd;
    case PL_DT_Q8_0: return hd / PL_QK * sizeof(pl_block_q8_0);
    case PL_DT_Q4_0: return hd / PL_QK * sizeof(pl_block_q4_0);
    default: return 2 * hd; /* f16, bf16 */
    }
}

/* Byte offset of (block, kv head, offset in block) in one layer's K or V array. */
static size_t row_offset(const pl_kv_layout *l, int64_t block, int32_t head, int32_t off) {
    return (((size_t)block * (size_t)l->n_kv_heads + (size_t)head) * (size_t)l->block_size +
            (size_t)off) *
           row_bytes(l);
}

/* ---------------------------------------------------------------- K/V write and block copy */

static void f32_to_f16_row(const float *x, uint16_t *y, int32_t n) {
    switch (pl_cpu_isa()) {
    case PL_ISA_AVX512: pl_attn_f32_to_f16_avx512(x, y, n); return;
    case PL_ISA_AVXVNNI:
    case PL_ISA_AVX2: pl_attn_f32_to_f16_avx2(x, y, n); return;
    case PL_ISA_SCALAR: break;
    }
    for (int32_t i = 0; i < n; i++) y[i] = pl_f32_to_f16(x[i]);
}

/* Quantized rows round as llama.cpp's CPU backend does when it stores K/V (ggml_set_rows with
 * the type's from_float): q8_0 as its x86 quantize_row_q8_0 (multiplier 127 / amax, round half
 * to even), q4_0 as quantize_row_q4_0_ref, bf16 round to nearest even. */
static void write_row(const pl_kv_layout *l, void *cache, size_t off, const float *x) {
    char *dst = (char *)cache + off;
    switch (l->dtype) {
    case PL_DT_F16: f32_to_f16_row(x, (uint16_t *)dst, l->head_dim); return;
    case PL_DT_BF16:
        for (int32_t i = 0; i < l->head_dim; i++) ((pl_bf16 *)dst)[i] = pl_f32_to_bf16(x[i]);
        return;
    case PL_DT_Q8_0: pl_quantize_q8_0_act(x, (pl_block_q8_0 *)dst, l->head_dim); return;
    case PL_DT_Q4_0: pl_quantize_q4_0_ref(x, (pl_block_q4_0 *)dst, l->head_dim); return;
    default: memcpy(dst, x, (size_t)l->head_dim * sizeof(float)); return;
    }
}

void pl_kv_write(const pl_kv_layout *l, void *k_cache, void *v_cache, const float *k,
                 const float *v, const int64_t *slot_mapping, int32_t n_tokens) {
    check_layout(l);
    const int64_t n_slots = l->num_blocks * l->block_size;
    const size_t token_elems = (size_t)l->n_kv_heads * (size_t)l->head_dim;
    for (int32_t t = 0; t < n_tokens; t++) {
        int64_t slot = slot_mapping[t];
        if (slot < 0) continue;
        PL_ASSERT(slot < n_slots);
        int64_t block = slot / l->block_size;
        int32_t off = (int32_t)(slot % l->block_size);
        for (int32_t h = 0; h < l->n_kv_heads; h++) {
            size_t o = row_offset(l, block, h, off);
            size_t src = (size_t)t * token_elems + (size_t)h * (size_t)l->head_dim;
            write_row(l, k_cache, o, k + src);
            write_row(l, v_cache, o, v + src);
        }
    }
}

void pl_kv_copy_blocks_between(const pl_kv_layout *src_l, const void *src_k, const void *src_v,
                               const pl_kv_layout *dst_l, void *dst_k, void *dst_v,
                               const int32_t *src, const int32_t *dst, int32_t n) {
    check_layout(src_l);
    check_layout(dst_l);
    PL_ASSERT(src_l->dtype == dst_l->dtype && src_l->block_size == dst_l->block_size &&
              src_l->n_kv_heads == dst_l->n_kv_heads && src_l->head_dim == dst_l->head_dim);
    const size_t bb = pl_kv_block_bytes(src_l);
    for (int32_t i = 0; i < n; i++) {
        PL_ASSERT(src[i] >= 0 && src[i] < src_l->num_blocks);
        PL_ASSERT(dst[i] >= 0 && dst[i] < dst_l->num_blocks);
        const char *sk = (const char *)src_k + (size_t)src[i] * bb;
        const char *sv = (const char *)src_v + (size_t)src[i] * bb;
        char *dk = (char *)dst_k + (size_t)dst[i] * bb;
        char *dv = (char *)dst_v + (size_t)dst[i] * bb;
        if (dk != sk) memcpy(dk, sk, bb); /* the same block onto itself is a no-op */
        if (dv != sv) memcpy(dv, sv, bb);
    }
}

void pl_kv_copy_blocks(const pl_kv_layout *l, const void *src_k, const void *src_v, void *dst_k,
                       void *dst_v, const int32_t *src, const int32_t *dst, int32_t n) {
    pl_kv_copy_blocks_between(l, src_k, src_v, l, dst_k, dst_v, src, dst, n);
}

/* ---------------------------------------------------------------- scalar tile */

/* Element d of a cache row, as the vector kernels widen or dequantize it. */
static float load_elem(const void *row, int32_t d, int kt) {
    switch (kt) {
    case PL_KT_F16: return pl_f16_to_f32(((const uint16_t *)row)[d]);
    case PL_KT_BF16: return pl_bf16_to_f32(((const pl_bf16 *)row)[d]);
    case PL_KT_Q8_0: {
        const pl_block_q8_0 *b = (const pl_block_q8_0 *)row + d / PL_QK;
        return (float)b->qs[d % PL_QK] * pl_f16_to_f32(b->d);
    }
    case PL_KT_Q4_0: {
        const pl_block_q4_0 *b = (const pl_block_q4_0 *)row + d / PL_QK;
        int j = d % PL_QK, byte = b->qs[j % (PL_QK / 2)];
        int q = (j < PL_QK / 2 ? byte & 15 : byte >> 4) - 8;
        return (float)q * pl_f16_to_f32(b->d);
    }
    default: return ((const float *)row)[d];
    }
}

/* Quant b of element d of a q8_0 / q4_0 key row, as an integer. */
static int key_quant(const void *row, int32_t d, int kt) {
    if (kt == PL_KT_Q8_0) return ((const pl_block_q8_0 *)row)[d / PL_QK].qs[d % PL_QK];
    const pl_block_q4_0 *b = (const pl_block_q4_0 *)row + d / PL_QK;
    int j = d % PL_QK, byte = b->qs[j % (PL_QK / 2)];
    return (j < PL_QK / 2 ? byte & 15 : byte >> 4) - 8;
}

/* q·k of query vector v and key row k: floats, or exact integer block sums (attention_impl.h). */
static float dot_scalar(const pl_attn_tile *t, int32_t v, const void *k) {
    const int32_t hd = t->head_dim;
    if (t->kt == PL_KT_Q8_0 || t->kt == PL_KT_Q4_0) {
        int32_t isum[PL_ATTN_MAX_HEAD_DIM / PL_QK];
        const int8_t *q = t->qq + (size_t)v * hd;
        for (int32_t b = 0; b < hd / PL_QK; b++) {
            isum[b] = 0;
            for (int32_t d = PL_QK * b; d < PL_QK * (b + 1); d++)
                isum[b] += q[d] * key_quant(k, d, t->kt);
        }
        float dk[PL_ATTN_MAX_HEAD_DIM / PL_QK];
        for (int32_t b = 0; b < hd / PL_QK; b++)
            dk[b] = pl_f16_to_f32(t->kt == PL_KT_Q8_0 ? ((const pl_block_q8_0 *)k)[b].d
                                                      : ((const pl_block_q4_0 *)k)[b].d);
        return pl_attn_q_combine(isum, t->qd + (size_t)v * (hd / PL_QK), dk, hd / PL_QK);
    }
    const float *q = t->q + (size_t)v * hd;
    float dot = 0.0f;
    for (int32_t d = 0; d < hd; d++) dot += q[d] * load_elem(k, d, t->kt);
    return dot;
}

static void attn_tile_scalar(const pl_attn_tile *t) {
    const int32_t hd = t->head_dim;
    for (int32_t v = 0; v < t->nq; v++) {
        const int32_t nv = t->nvis[v], lo = t->nlo[v];
        if (lo >= nv) continue;
        float *s = t->s + (size_t)v * PL_ATTN_KT;
        float *acc = t->acc + (size_t)v * hd;
        float smax = -INFINITY;
        for (int32_t j = lo; j < nv; j++) {
            s[j] = pl_attn_softcap(dot_scalar(t, v, t->krow[j]) * t->scale, t->softcap);
            smax = fmaxf(smax, s[j]);
        }
        float m_new = fmaxf(t->m[v], smax);
        float alpha = expf(t->m[v] - m_new);
        float sum = 0.0f;
        for (int32_t j = lo; j < nv; j++) {
            s[j] = expf(s[j] - m_new);
            sum += s[j];
        }
        t->m[v] = m_new;
        t->l[v] = t->l[v] * alpha + sum;
        for (int32_t d = 0; d < hd; d++) acc[d] *= alpha;
        for (int32_t j = lo; j < nv; j++)
            for (int32_t d = 0; d < hd; d++) acc[d] += s[j] * load_elem(t->vrow[j], d, t->kt);
    }
}

/* ---------------------------------------------------------------- driver */

typedef struct {
    const pl_kv_layout *l;
    const pl_attn_args *a;
    pl_attn_tile_fn tile_fn;
    int32_t group;           /* query heads per KV head */
    int32_t item_rows;       /* query rows per work item */
    int64_t n_items;
    atomic_int_fast64_t next; /* next unclaimed work item */
} attn_ctx;

static int32_t seq_q_len(const pl_attn_args *a, int32_t i) {
    return a->seq_start[i + 1] - a->seq_start[i];
}

static int64_t seq_items(const attn_ctx *c, int32_t i) {
    int64_t tiles = (seq_q_len(c->a, i) + c->item_rows - 1) / c->item_rows;
    return tiles * c->l->n_kv_heads;
}

/* The query in the form llama.cpp's CPU flash attention gives it for the key type (its
 * vec_dot_type): bf16 keys get a bf16-rounded query; q8_0 and q4_0 keys a q8_0 one, rounded as
 * the cache rows are (pl_quantize_q8_0_act). f32 and f16 keys take the query as it is. */
static void prepare_query(int kt, float *q, int8_t *qq, float *qd, int32_t *qsum, int32_t hd) {
    if (kt == PL_KT_BF16)
        for (int32_t d = 0; d < hd; d++) q[d] = pl_bf16_to_f32(pl_f32_to_bf16(q[d]));
    if (kt == PL_KT_Q8_0 || kt == PL_KT_Q4_0) {
        pl_block_q8_0 blk[PL_ATTN_MAX_HEAD_DIM / PL_QK];
        pl_quantize_q8_0_act(q, blk, hd);
        for (int32_t b = 0; b < hd / PL_QK; b++) {
            memcpy(qq + PL_QK * b, blk[b].qs, PL_QK);
            qd[b] = pl_f16_to_f32(blk[b].d);
            qsum[b] = 0;
            for (int j = 0; j < PL_QK; j++) qsum[b] += blk[b].qs[j];
        }
    }
}

/* Row pointers of cache positions [t0, t0 + nk) of KV head g through the block table. Positions
 * below `first` (the first one any query of the chunk sees: below it the blocks may be freed)
 * are never looked up: they get the row of `first`, which no vector reads as theirs. */
static void gather_tile(const pl_kv_layout *l, const pl_attn_args *a, const int32_t *btab,
                        int32_t g, int32_t t0, int32_t nk, int32_t first, const void **krow,
                        const void **vrow) {
    const int32_t bs = l->block_size, skip = first > t0 ? first - t0 : 0;
    int32_t bi = (t0 + skip) / bs, off = (t0 + skip) % bs;
    for (int32_t j = skip; j < nk; j++) {
        int32_t b = btab[bi];
        PL_ASSERT(b >= 0 && b < l->num_blocks);
        size_t o = row_offset(l, b, g, off);
        krow[j] = (const char *)a->k_cache + o;
        vrow[j] = (const char *)a->v_cache + o;
        if (++off == bs) { off = 0; bi++; }
    }
    for (int32_t j = 0; j < skip && skip < nk; j++) {
        krow[j] = krow[skip];
        vrow[j] = vrow[skip];
    }
}

/* Ask for the next tile's rows while this one computes: every block is a new page, where the
 * hardware prefetchers start cold, so without this the kernel waits on DRAM latency. */
static void prefetch_rows(const void *const *rows, int32_t nk, size_t row_bytes) {
    for (int32_t j = 0; j < nk; j++)
        for (size_t b = 0; b < row_bytes; b += 64) __builtin_prefetch((const char *)rows[j] + b);
}

/* Ask L2 for the rows of KV head g at cache positions [t0, t0 + nk), the tile after next: a
 * block's rows of one head are one run of bytes, so this is a few streams where prefetch_rows
 * (one tile ahead, into L1) is a line each. */
static void prefetch_ahead(const pl_kv_layout *l, const pl_attn_args *a, const int32_t *btab, int32_t g,
                           int32_t t0, int32_t nk) {
    const int32_t bs = l->block_size;
    const size_t rb = row_bytes(l);
    for (int32_t p = t0, end = t0 + nk; p < end;) {
        const int32_t off = p % bs, n = bs - off < end - p ? bs - off : end - p;
        const size_t o = row_offset(l, btab[p / bs], g, off);
        for (size_t b = 0; b < (size_t)n * rb; b += 64) {
            __builtin_prefetch((const char *)a->k_cache + o + b, 0, 2);
            __builtin_prefetch((const char *)a->v_cache + o + b, 0, 2);
        }
        p += n;
    }
}

/* The first cache position a query at pos sees: pos - W + 1 with a window W, else 0. */
static int32_t win_start(int32_t W, int32_t pos) {
    return W > 0 && pos - W + 1 > 0 ? pos - W + 1 : 0;
}

static int32_t tile_len(int32_t t0, int32_t last) {
    return last + 1 - t0 < PL_ATTN_KT ? last + 1 - t0 : PL_ATTN_KT;
}


/* Query rows [r0, r1) of sequence i, KV head g. */
static void run_item(const attn_ctx *c, int32_t i, int32_t g, int32_t r0, int32_t r1) {
    const pl_kv_layout *l = c->l;
    const pl_attn_args *a = c->a;
    const int32_t hd = l->head_dim, G = c->group;
    const int32_t q_len = seq_q_len(a, i), ctx_len = a->context_lens[i];
    const int32_t *btab = a->block_tables + (size_t)i * (size_t)a->max_blocks;
    const int32_t row_base = a->seq_start[i];
    const size_t row_stride = (size_t)a->n_heads * (size_t)hd;
    const size_t row_bytes = pl_kv_row_bytes(l);
    const int32_t W = a->window;

    _Alignas(64) float qbuf[PL_ATTN_MAXQ * PL_ATTN_MAX_HEAD_DIM];
    _Alignas(64) float acc[PL_ATTN_MAXQ * PL_ATTN_MAX_HEAD_DIM];
    _Alignas(64) float s[PL_ATTN_MAXQ * PL_ATTN_KT];
    int8_t qq[PL_ATTN_MAXQ * PL_ATTN_MAX_HEAD_DIM];           /* q8_0 / q4_0 cache only */
    float qd[PL_ATTN_MAXQ * PL_ATTN_MAX_HEAD_DIM / PL_QK];
    int32_t qsum[PL_ATTN_MAXQ * PL_ATTN_MAX_HEAD_DIM / PL_QK];
    float vd[PL_ATTN_KT * PL_ATTN_MAX_HEAD_DIM / PL_QK];
    float m[PL_ATTN_MAXQ], lsum[PL_ATTN_MAXQ];
    int32_t pos[PL_ATTN_MAXQ], nvis[PL_ATTN_MAXQ], nlo[PL_ATTN_MAXQ];
    const void *rows[2][2][PL_ATTN_KT]; /* [this tile, next tile][K, V][position] */

    pl_attn_tile t = {.head_dim = hd, .kt = kind_of(l->dtype), .scale = a->scale,
                      .softcap = a->softcap,
                      .nlo = nlo, .nvis = nvis, .q = qbuf, .qq = qq, .qd = qd, .qsum = qsum, .vd = vd, .m = m, .l = lsum,
                      .acc = acc, .s = s};

    const int32_t n_vec = (r1 - r0) * G; /* vector v: row r0 + v / G, head g * G + v % G */
    for (int32_t v0 = 0; v0 < n_vec; v0 += PL_ATTN_MAXQ) {
        const int32_t nq = n_vec - v0 < PL_ATTN_MAXQ ? n_vec - v0 : PL_ATTN_MAXQ;
        for (int32_t v = 0; v < nq; v++) {
            int32_t r = r0 + (v0 + v) / G, h = g * G + (v0 + v) % G;
            memcpy(qbuf + (size_t)v * hd, a->q + (size_t)(row_base + r) * row_stride +
                   (size_t)h * hd, (size_t)hd * sizeof(float));
            prepare_query(t.kt, qbuf + (size_t)v * hd, qq + (size_t)v * hd,
                          qd + (size_t)v * (hd / PL_QK), qsum + (size_t)v * (hd / PL_QK), hd);
            pos[v] = ctx_len - q_len + r;
            m[v] = -INFINITY;
            lsum[v] = 0.0f;
        }
        memset(acc, 0, (size_t)nq * hd * sizeof(float));
        /* vectors are in row order: the last sees the latest position, the first the earliest;
         * tiles stay aligned to position 0 with or without a window (the determinism) */
        const int32_t last = pos[nq - 1], first = win_start(W, pos[0]);
        const int32_t tfirst = first - first % PL_ATTN_KT;
        t.nq = nq;
        int cur = 0;
        gather_tile(l, a, btab, g, tfirst, tile_len(tfirst, last), first, rows[0][0], rows[0][1]);
        for (int32_t t0 = tfirst; t0 <= last; t0 += PL_ATTN_KT, cur ^= 1) {
            const int32_t nk = tile_len(t0, last), t1 = t0 + PL_ATTN_KT;
            if (t1 <= last) {
                const int32_t nk1 = tile_len(t1, last);
                gather_tile(l, a, btab, g, t1, nk1, first, rows[cur ^ 1][0], rows[cur ^ 1][1]);
                prefetch_rows(rows[cur ^ 1][0], nk1, row_bytes);
                prefetch_rows(rows[cur ^ 1][1], nk1, row_bytes);
                if (t1 + PL_ATTN_KT <= last)
                    prefetch_ahead(l, a, btab, g, t1 + PL_ATTN_KT, tile_len(t1 + PL_ATTN_KT, last));
            }
            for (int32_t v = 0; v < nq; v++) {
                int32_t n = pos[v] + 1 - t0, lo = win_start(W, pos[v]) - t0;
                nvis[v] = n < 0 ? 0 : n > nk ? nk : n;
                nlo[v] = lo < 0 ? 0 : lo > nk ? nk : lo;
            }
            t.nk = nk;
            t.krow = rows[cur][0];
            t.vrow = rows[cur][1];
            c->tile_fn(&t);
        }
        for (int32_t v = 0; v < nq; v++) {
            int32_t r = r0 + (v0 + v) / G, h = g * G + (v0 + v) % G;
            float *out = a->out + (size_t)(row_base + r) * row_stride + (size_t)h * hd;
            pl_attn_finish_row(out, acc + (size_t)v * hd, m[v], lsum[v],
                               a->sinks ? &a->sinks[h] : NULL, hd);
        }
    }
}

static void attn_job(void *p, int ith, int nth) {
    (void)ith;
    (void)nth;
    attn_ctx *c = p;
    const int32_t n_kv = c->l->n_kv_heads;
    int32_t seq = 0;
    int64_t base = 0; /* first item of `seq`; claimed indices only grow, so the cursor does too */
    for (;;) {
        int64_t idx = atomic_fetch_add_explicit(&c->next, 1, memory_order_relaxed);
        if (idx >= c->n_items) return;
        while (idx >= base + seq_items(c, seq)) base += seq_items(c, seq++);
        /* a prefill's last row tiles see the most positions: hand them out first */
        int64_t k = idx - base, n_tiles = seq_items(c, seq) / n_kv;
        int32_t tile = (int32_t)(n_tiles - 1 - k / n_kv), g = (int32_t)(k % n_kv);
        int32_t r0 = tile * c->item_rows, r1 = r0 + c->item_rows;
        int32_t q_len = seq_q_len(c->a, seq);
        run_item(c, seq, g, r0, r1 < q_len ? r1 : q_len);
    }
}

static void check_args(const pl_kv_layout *l, const pl_attn_args *a) {
    check_layout(l);
    PL_ASSERT(a->n_heads > 0 && a->n_heads % l->n_kv_heads == 0);
    PL_ASSERT(a->n_seqs >= 0 && (a->n_seqs == 0 || a->max_blocks > 0));
    PL_ASSERT(a->window >= 0);
    PL_ASSERT(a->seq_start[0] >= 0);
    for (int32_t i = 0; i < a->n_seqs; i++) {
        int32_t q_len = seq_q_len(a, i);
        PL_ASSERT(q_len >= 0);
        PL_ASSERT(a->context_lens[i] >= q_len);
        PL_ASSERT((int64_t)a->context_lens[i] <= (int64_t)a->max_blocks * l->block_size);
    }
}

void pl_paged_attention(pl_threadpool *tp, const pl_kv_layout *l, const pl_attn_args *a) {
    check_args(l, a);
    attn_ctx c = {.l = l, .a = a, .group = a->n_heads / l->n_kv_heads,
                  .tile_fn = pl_attn_tile_for_isa()};
    c.item_rows = c.group >= PL_ATTN_MAXQ ? 1 : PL_ATTN_MAXQ / c.group;
    for (int32_t i = 0; i < a->n_seqs; i++) c.n_items += seq_items(&c, i);
    atomic_init(&c.next, 0);
    if (c.n_items == 0) return;
    int64_t nth = pl_threadpool_size(tp);
    pl_threadpool_run_n(tp, (int)(c.n_items < nth ? c.n_items : nth), attn_job, &c);
}

/* ---------------------------------------------------------------- scalar reference */

/* One query row of one head, position by position: the textbook online softmax. */
void pl_paged_attention_ref(const pl_kv_layout *l, const pl_attn_args *a) {
    check_args(l, a);
    const int32_t hd = l->head_dim, G = a->n_heads / l->n_kv_heads, bs = l->block_size;
    const int kt = kind_of(l->dtype);
    float acc[PL_ATTN_MAX_HEAD_DIM], qf[PL_ATTN_MAX_HEAD_DIM], qd[PL_ATTN_MAX_HEAD_DIM / PL_QK];
    int32_t qsum[PL_ATTN_MAX_HEAD_DIM / PL_QK];
    int8_t qq[PL_ATTN_MAX_HEAD_DIM];
    pl_attn_tile t = {.head_dim = hd, .kt = kt, .q = qf, .qq = qq, .qd = qd}; /* for dot_scalar */
    for (int32_t i = 0; i < a->n_seqs; i++) {
        const int32_t q_len = seq_q_len(a, i), ctx_len = a->context_lens[i];
        const int32_t *btab = a->block_tables + (size_t)i * (size_t)a->max_blocks;
        for (int32_t r = 0; r < q_len; r++) {
            const int32_t pos = ctx_len - q_len + r;
            const size_t row = (size_t)(a->seq_start[i] + r) * (size_t)a->n_heads;
            for (int32_t h = 0; h < a->n_heads; h++) {
                memcpy(qf, a->q + (row + (size_t)h) * hd, (size_t)hd * sizeof(float));
                prepare_query(kt, qf, qq, qd, qsum, hd);
                float m = -INFINITY, sum = 0.0f;
                memset(acc, 0, sizeof acc);
                for (int32_t p = win_start(a->window, pos); p <= pos; p++) {
                    int32_t b = btab[p / bs];
                    PL_ASSERT(b >= 0 && b < l->num_blocks);
                    size_t o = row_offset(l, b, h / G, p % bs);
                    const void *k = (const char *)a->k_cache + o;
                    const void *v = (const char *)a->v_cache + o;
                    float s = pl_attn_softcap(dot_scalar(&t, 0, k) * a->scale, a->softcap);
                    float m_new = fmaxf(m, s);
                    float alpha = expf(m - m_new), w = expf(s - m_new);
                    sum = sum * alpha + w;
                    for (int32_t d = 0; d < hd; d++)
                        acc[d] = acc[d] * alpha + w * load_elem(v, d, kt);
                    m = m_new;
                }
                pl_attn_finish_row(a->out + (row + (size_t)h) * hd, acc, m, sum,
                           a->sinks ? &a->sinks[h] : NULL, hd);
            }
        }
    }
}

/* ---------------------------------------------------------------- for the contiguous kernel */

pl_attn_tile_fn pl_attn_tile_for_isa(void) {
    switch (pl_cpu_isa()) {
    case PL_ISA_AVX512: return pl_attn_tile_avx512;
    case PL_ISA_AVXVNNI:
    case PL_ISA_AVX2: return pl_attn_tile_avx2;
    case PL_ISA_SCALAR: break;
    }
    return attn_tile_scalar;
}

int pl_attn_kind(pl_dtype t) { return kind_of(t); }

void pl_attn_prepare_query(int kt, float *q, int8_t *qq, float *qd, int32_t *qsum, int32_t hd) {
    prepare_query(kt, q, qq, qd, qsum, hd);
}
