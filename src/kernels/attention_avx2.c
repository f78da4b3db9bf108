/* kernels/attention_avx2 — the attention tile (see attention_impl.h) with AVX2 + FMA + F16C:
 * the skeleton of attention_tile.h at 8 lanes, with the loads, the reduction and the softmax of
 * this instruction set.
 *
 * head_dim in chunks of 8 and, when head_dim is 4 mod 8, a last chunk of 4 loaded
 * zero-extended. bf16, q8_0 and q4_0 rows are widened or dequantized in registers by load8. The
 * four score accumulators are summed with one tree (reduce4); exp is a polynomial.
 */
#include "kernels/attention_impl.h"

#include "kernels/attention_q.h"
#include "kernels/quant.h"
#include "kernels/simd.h"

#include <immintrin.h>
#include <math.h>


/* 8 elements of a row at d (FULL) or 4 elements zero-extended to 8 (!FULL; never quantized:
 * quantized rows are whole 32-element blocks). KT is a compile-time constant at every call. */
AI __m256 load8(const void *row, int32_t d, int FULL, int KT) {
    if (KT == PL_KT_F16) {
        const uint16_t *h = (const uint16_t *)row + d;
        if (FULL) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)h));
        return _mm256_insertf128_ps(_mm256_setzero_ps(), _mm_cvtph_ps(_mm_loadl_epi64((const __m128i *)h)), 0);
    }
    if (KT == PL_KT_BF16) {
        const uint16_t *h = (const uint16_t *)row + d;
        __m128i x = FULL ? _mm_loadu_si128((const __m128i *)h) : _mm_loadl_epi64((const __m128i *)h);
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(x), 16));
    }
    if (KT == PL_KT_Q8_0) {
        const uint8_t *b = (const uint8_t *)row + (size_t)(d >> 5) * sizeof(pl_block_q8_0);
        __m256i q = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(b + 2 + (d & 31))));
        return _mm256_mul_ps(_mm256_cvtepi32_ps(q), _mm256_set1_ps(f16_at(b)));
    }
    if (KT == PL_KT_Q4_0) { /* byte j holds element j (low nibble) and j + 16 (high) */
        const uint8_t *b = (const uint8_t *)row + (size_t)(d >> 5) * sizeof(pl_block_q4_0);
        __m128i x = _mm_loadl_epi64((const __m128i *)(b + 2 + (d & 15)));
        if (d & 16) x = _mm_srli_epi16(x, 4);
        __m256i q = _mm256_sub_epi32(_mm256_cvtepu8_epi32(_mm_and_si128(x, _mm_set1_epi8(15))),
                                     _mm256_set1_epi32(8));
        return _mm256_mul_ps(_mm256_cvtepi32_ps(q), _mm256_set1_ps(f16_at(b)));
    }
    const float *f = (const float *)row + d;
    if (FULL) return _mm256_loadu_ps(f);
    return _mm256_insertf128_ps(_mm256_setzero_ps(), _mm_loadu_ps(f), 0);
}

/* Value row j's 8 elements at d: as load8, with a quantized row's scale from t->vd. */
AI __m256 vload8(const pl_attn_tile *t, int32_t j, int32_t d, int FULL, int KT) {
    if (KT != PL_KT_Q8_0 && KT != PL_KT_Q4_0) return load8(t->vrow[j], d, FULL, KT);
    const __m256 sc = _mm256_set1_ps(t->vd[j * (t->head_dim / PL_QK) + (d >> 5)]);
    if (KT == PL_KT_Q8_0) {
        const uint8_t *b = (const uint8_t *)t->vrow[j] + (size_t)(d >> 5) * sizeof(pl_block_q8_0);
        __m256i q = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(b + 2 + (d & 31))));
        return _mm256_mul_ps(_mm256_cvtepi32_ps(q), sc);
    }
    const uint8_t *b = (const uint8_t *)t->vrow[j] + (size_t)(d >> 5) * sizeof(pl_block_q4_0);
    __m128i x = _mm_loadl_epi64((const __m128i *)(b + 2 + (d & 15)));
    if (d & 16) x = _mm_srli_epi16(x, 4);
    __m256i q = _mm256_sub_epi32(_mm256_cvtepu8_epi32(_mm_and_si128(x, _mm_set1_epi8(15))),
                                 _mm256_set1_epi32(8));
    return _mm256_mul_ps(_mm256_cvtepi32_ps(q), sc);
}

AI void store8(float *y, __m256 x, int FULL) {
    if (FULL) _mm256_storeu_ps(y, x);
    else _mm_storeu_ps(y, _mm256_castps256_ps128(x));
}

/* Lane i of the result is the sum of a_i: pairs, then pairs of pairs, then low + high half. */
AI __m128 reduce4(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
    __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
    return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

static float hmax8(__m256 x) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

/* Online softmax step of vector v over its 32-score row (4 registers); returns alpha. */
static float softmax_update(const pl_attn_tile *t, int32_t v) {
    const int32_t nv = t->nvis[v], lo = t->nlo[v];
    float *s = t->s + (size_t)v * PL_ATTN_KT;
    const __m256 ninf = _mm256_set1_ps(-INFINITY);
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    __m256 x[4], keep[4];
    __m256 mx = ninf;
    for (int c = 0; c < 4; c++) { /* keys lo <= idx < nv */
        __m256i idx = _mm256_add_epi32(lane, _mm256_set1_epi32(8 * c));
        __m256i in = _mm256_andnot_si256(_mm256_cmpgt_epi32(_mm256_set1_epi32(lo), idx),
                                         _mm256_cmpgt_epi32(_mm256_set1_epi32(nv), idx));
        keep[c] = _mm256_castsi256_ps(in);
        x[c] = _mm256_blendv_ps(ninf, _mm256_loadu_ps(s + 8 * c), keep[c]);
        mx = _mm256_max_ps(mx, x[c]);
    }
    float m_new = fmaxf(t->m[v], hmax8(mx));
    float alpha = expf(t->m[v] - m_new);
    const __m256 mn = _mm256_set1_ps(m_new);
    __m256 sum = _mm256_setzero_ps();
    for (int c = 0; c < 4; c++) {
        __m256 p = _mm256_and_ps(exp8(_mm256_sub_ps(x[c], mn)), keep[c]);
        _mm256_storeu_ps(s + 8 * c, p);
        sum = _mm256_add_ps(sum, p);
    }
    t->m[v] = m_new;
    t->l[v] = t->l[v] * alpha + hsum8(sum);
    return alpha;
}

/* The operations the tile skeleton (attention_tile.h) runs on: 8 lanes; a last chunk of 4 is
 * loaded zero-extended (tail_t 0) and stored as 4. */
#define W 8
#define ATTN_GQA3 1 /* 2 keys x 3 chains, the key chunk and the queries from memory fit 16 registers */
#define TAIL_FULL 1
#define HAS_TAIL(hd, tl) ((hd) & 7)
#define PL_ATTN_TILE_FN pl_attn_tile_avx2
typedef __m256 vec;
typedef int tail_t; /* 1: 8 lanes, 0: 4 */

AI tail_t tail_of(int32_t hd) { (void)hd; return 0; }
AI vec v_zero(void) { return _mm256_setzero_ps(); }
AI vec v_set1(float x) { return _mm256_set1_ps(x); }
AI vec v_mul(vec a, vec b) { return _mm256_mul_ps(a, b); }
AI vec v_fmadd(vec a, vec b, vec c) { return _mm256_fmadd_ps(a, b, c); }
AI vec q_load(const float *p) { return load8(p, 0, 1, PL_KT_F32); }
AI vec q_load_tail(const float *p, tail_t tl) { return load8(p, 0, tl, PL_KT_F32); }
AI vec k_load(const void *row, int32_t d, int KT) { return load8(row, d, 1, KT); }
AI vec k_load_tail(const void *row, int32_t d, tail_t tl, int KT) { return load8(row, d, tl, KT); }
AI vec v_load(const pl_attn_tile *t, int32_t j, int32_t d, tail_t tl, int KT) {
    return vload8(t, j, d, tl, KT);
}
AI vec v_load_some(const pl_attn_tile *t, int32_t j, int32_t d, tail_t tl, int KT) {
    return vload8(t, j, d, tl, KT);
}
AI vec acc_load(const float *p, tail_t tl) { return load8(p, 0, tl, PL_KT_F32); }
AI void acc_store(float *p, vec x, tail_t tl) { store8(p, x, tl); }

/* p·V's chunks at once for NG vectors: 8-12 FMA chains where 16 registers allow */
#define PV_CH(NG) ((NG) == 1 ? 8 : (NG) <= 3 ? 4 : (NG) == 4 ? 2 : 1)
#define PV_MAXACC 12
#define SC_KB(NQ) 2
#include "kernels/attention_tile.h"

void pl_attn_f32_to_f16_avx2(const float *x, uint16_t *y, int32_t n) {
    int32_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(y + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i + 4 <= n; i += 4)
        _mm_storel_epi64((__m128i *)(y + i), _mm_cvtps_ph(_mm_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
}
