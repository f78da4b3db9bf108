/* kernels/attention_impl — internal to kernels/attention*.c: the unit of work that the ISA files
 * implement.
 *
 * The driver in attention.c turns one (sequence, KV head, query-row tile) work item into chunks of
 * at most PL_ATTN_MAXQ query vectors (a vector is one query row of one head of the GQA group) and
 * streams the sequence's cache positions through them in tiles of PL_ATTN_KT positions. Tiles are
 * aligned to position 0 and independent of the block size: the driver gathers the K and V row of
 * every position of the tile through the block table and calls one tile function, which
 *
 *   - computes the scores s = scale * q·k of every vector against the tile's keys it may see
 *     (keys nlo[v] .. nvis[v] - 1: a causal prefix, minus the keys that left a sliding window;
 *     a vector that sees none, nlo[v] >= nvis[v], is left untouched). With a q8_0 or q4_0
 *     cache the query is quantized to q8_0 first, as llama.cpp's CPU flash attention does, and
 *     q·k = sum over 32-blocks b, in order, of (float)isum_b * (dq_b * dk_b) with isum_b the
 *     exact integer dot product: the same bits on every instruction set,
 *   - updates the online softmax: m' = max(m, max s), alpha = exp(m - m'),
 *     p = exp(s - m'), l' = alpha * l + sum p, acc' = alpha * acc + sum_j p_j v_j (keys in order).
 *
 * Invariant every tile function keeps: the arithmetic applied to one vector depends only on that
 * vector's query, its nvis and the keys/values, never on which other vectors share the chunk or
 * on nq. Keys outside [nlo[v], nvis[v]) add nothing to vector v: not even a zero product, so a
 * vector's result is the same whatever keys its neighbours see. Vectors are in row order, so
 * both nlo and nvis grow with v and the vectors that see anything are one contiguous run.
 * This is what makes outputs bitwise independent of the thread count, of the batch, of the
 * prefill chunking and of the block size.
 */
#ifndef PL_KERNELS_ATTENTION_IMPL_H
#define PL_KERNELS_ATTENTION_IMPL_H

#include "kernels/dtype.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>

enum {
    PL_ATTN_KT = 32,         /* cache positions per tile */
    PL_ATTN_MAXQ = 32,       /* query vectors per chunk */
    PL_ATTN_MAX_HEAD_DIM = 512, /* Gemma 4's full layers */
};

/* How a cache row is stored (the tile functions are compiled once per kind). Quantized rows are
 * head_dim / 32 GGML blocks (a multiple of 32 is required) and are dequantized in registers as
 * they are loaded: value = (float)q * (float)scale, the same product on every instruction set. */
enum {
    PL_KT_F32 = 0,
    PL_KT_F16 = 1,
    PL_KT_BF16 = 2,
    PL_KT_Q8_0 = 3,  /* pl_block_q8_0[head_dim / 32] */
    PL_KT_Q4_0 = 4,  /* pl_block_q4_0[head_dim / 32] */
};

typedef struct {
    int32_t nq;              /* query vectors in the chunk, 1..PL_ATTN_MAXQ */
    int32_t nk;              /* positions in this tile, 1..PL_ATTN_KT */
    int32_t head_dim;        /* multiple of 4 (of 32 when quantized), <= PL_ATTN_MAX_HEAD_DIM */
    int32_t kt;              /* PL_KT_*: how cache rows are stored */
    float scale;             /* applied to q·k */
    float softcap;           /* > 0: scores become softcap * tanh(score / softcap) (Gemma 2) */
    const int32_t *nlo;      /* [nq] first key of the tile vector v sees: 0 without a window */
    const int32_t *nvis;     /* [nq] end of the keys vector v sees: 0..nk */
    const float *q;          /* [nq][head_dim]; bf16 cache: rounded to bf16 (as llama.cpp) */
    const int8_t *qq;        /* q8_0 / q4_0 cache: q as q8_0, quants [nq][head_dim] ... */
    const float *qd;         /* ... scales [nq][head_dim / 32] (f16 values) ... */
    const int32_t *qsum;     /* ... and sums of the quants of each block [nq][head_dim / 32] */
    float *vd;               /* q8_0 / q4_0 scratch: the tile's V scales [PL_ATTN_KT][hd / 32] */
    const void *const *krow; /* [nk] key rows (head_dim elements each) */
    const void *const *vrow; /* [nk] value rows */
    float *m;                /* [nq] running max of the scores (-inf before the first key) */
    float *l;                /* [nq] running sum of exp(s - m) */
    float *acc;              /* [nq][head_dim] running sum of p * v */
    float *s;                /* scratch [nq][PL_ATTN_KT]: scores, then probabilities */
} pl_attn_tile;

typedef void (*pl_attn_tile_fn)(const pl_attn_tile *t);

/* Gemma 2's attention logit soft-capping of a score, as llama.cpp without flash attention:
 * scaled by 1 / cap, tanh, scaled by cap (a no-op when cap is 0). */
static inline float pl_attn_softcap(float s, float cap) {
    return cap > 0 ? cap * tanhf(s * (1.0f / cap)) : s;
}

/* The soft-capping of the scores of vectors [v0, v1) of a tile (the keys each sees), before
 * their softmax update. */
static inline void pl_attn_softcap_tile(const pl_attn_tile *t, int32_t v0, int32_t v1) {
    if (!(t->softcap > 0)) return;
    for (int32_t v = v0; v < v1; v++)
        for (int32_t j = t->nlo[v]; j < t->nvis[v]; j++)
            t->s[(size_t)v * PL_ATTN_KT + j] =
                pl_attn_softcap(t->s[(size_t)v * PL_ATTN_KT + j], t->softcap);
}

/* The vectors that see a key of the tile: [*v0, *v1) (empty when *v0 == *v1). */
static inline void pl_attn_seeing(const pl_attn_tile *t, int32_t *v0, int32_t *v1) {
    int32_t a = 0, b;
    while (a < t->nq && t->nlo[a] >= t->nvis[a]) a++;
    b = a;
    while (b < t->nq && t->nlo[b] < t->nvis[b]) b++;
    *v0 = a;
    *v1 = b;
}

/* The keys vectors [v, v + n) see in a tile: the smallest and largest nlo and nvis. */
typedef struct {
    int32_t lmin, lmax, nmin, nmax;
} pl_attn_range;

static inline pl_attn_range pl_attn_range_of(const pl_attn_tile *t, int32_t v, int n) {
    pl_attn_range r = {t->nlo[v], t->nlo[v], t->nvis[v], t->nvis[v]};
    for (int i = 1; i < n; i++) {
        r.nmin = t->nvis[v + i] < r.nmin ? t->nvis[v + i] : r.nmin;
        r.nmax = t->nvis[v + i] > r.nmax ? t->nvis[v + i] : r.nmax;
        r.lmin = t->nlo[v + i] < r.lmin ? t->nlo[v + i] : r.lmin;
        r.lmax = t->nlo[v + i] > r.lmax ? t->nlo[v + i] : r.lmax;
    }
    return r;
}

/* sum_b (float)isum_b * (qd_b * dk_b), blocks in order: the quantized score before scaling. */
static inline float pl_attn_q_combine(const int32_t *isum, const float *qd, const float *dk,
                                      int32_t nb) {
    float s = 0.0f;
    for (int32_t b = 0; b < nb; b++) s += (float)isum[b] * (qd[b] * dk[b]);
    return s;
}

/* out = acc / l for a row whose scores' running max is m and sum of e^(s - m) is l; with an
 * attention sink (a logit in the denominator only, llama.cpp's soft_max sinks) the max takes
 * the sink in too: M = max(m, sink), out = acc e^(m - M) / (l e^(m - M) + e^(sink - M)). */
static inline void pl_attn_finish_row(float *out, const float *acc, float m, float l,
                                      const float *sink, int32_t hd) {
    float scale = 1.0f / l;
    if (sink) {
        const float mx = m > *sink ? m : *sink, em = expf(m - mx);
        scale = em / (l * em + expf(*sink - mx));
    }
    for (int32_t d = 0; d < hd; d++) out[d] = sink ? acc[d] * scale : acc[d] / l;
}

/* Shared by the paged driver (attention.c) and the contiguous one (attention_contig.c), so the
 * two compute a query row with the same arithmetic: the tile function of pl_cpu_isa(), the
 * storage kind (PL_KT_*) of a KV dtype, and a query put into the form the key type wants
 * (bf16-rounded, or q8_0 quants qq, scales qd and block sums qsum). */
pl_attn_tile_fn pl_attn_tile_for_isa(void);
int pl_attn_kind(pl_dtype t);
void pl_attn_prepare_query(int kt, float *q, int8_t *qq, float *qd, int32_t *qsum, int32_t hd);

void pl_attn_tile_avx2(const pl_attn_tile *t);
void pl_attn_tile_avx512(const pl_attn_tile *t);

/* f32 -> f16 rows (round to nearest even), used by pl_kv_write. */
void pl_attn_f32_to_f16_avx2(const float *x, uint16_t *y, int32_t n);
void pl_attn_f32_to_f16_avx512(const float *x, uint16_t *y, int32_t n);

#endif
