/* kernels/attention_avx512 — the attention tile (see attention_impl.h) with AVX-512: the
 * skeleton of attention_tile.h at 16 lanes, with the loads, the reduction and the softmax of
 * this instruction set.
 *
 * head_dim is walked in chunks of 16 lanes; a tail of 4, 8 or 12 uses masked loads (zeros in the
 * unused lanes add nothing). f16 rows are widened with vcvtph2ps as they are loaded, bf16 rows by
 * a shift, q8_0 / q4_0 rows dequantized in registers (int8 or nibble -> f32, times the block's
 * scale); quantized rows are whole 32-element blocks, so they never take a masked tail. The 32
 * scores of a vector are two registers in the softmax; exp is a degree-7 polynomial after range
 * reduction, scaled with vscalefps. Every vector gets exactly its own sequence of operations
 * (keys in order, fixed trees), never one that depends on its neighbours in the chunk.
 */
#include "kernels/attention_impl.h"

#include "kernels/attention_q.h"
#include "kernels/quant.h"
#include "kernels/simd.h"

#include <immintrin.h>
#include <math.h>


AI __mmask16 tail_mask(int32_t hd) { return (__mmask16)((1u << (hd % 16)) - 1u); }

/* 16 elements of a row starting at d; KT is a compile-time constant at every call site. A
 * quantized row's 16 elements are one half of a 32-element block (d is a multiple of 16). */
AI __m512 load16(const void *row, int32_t d, int KT) {
    if (KT == PL_KT_F16) return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)row + d)));
    if (KT == PL_KT_BF16) {
        __m256i x = _mm256_loadu_si256((const __m256i *)((const uint16_t *)row + d));
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(x), 16));
    }
    if (KT == PL_KT_Q8_0) {
        const uint8_t *b = (const uint8_t *)row + (size_t)(d >> 5) * sizeof(pl_block_q8_0);
        __m512i q = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(b + 2 + (d & 31))));
        return _mm512_mul_ps(_mm512_cvtepi32_ps(q), _mm512_set1_ps(f16_at(b)));
    }
    if (KT == PL_KT_Q4_0) { /* byte j holds element j (low nibble) and j + 16 (high) */
        const uint8_t *b = (const uint8_t *)row + (size_t)(d >> 5) * sizeof(pl_block_q4_0);
        __m128i x = _mm_loadu_si128((const __m128i *)(b + 2));
        if (d & 16) x = _mm_srli_epi16(x, 4);
        __m512i q = _mm512_sub_epi32(_mm512_cvtepu8_epi32(_mm_and_si128(x, _mm_set1_epi8(15))),
                                     _mm512_set1_epi32(8));
        return _mm512_mul_ps(_mm512_cvtepi32_ps(q), _mm512_set1_ps(f16_at(b)));
    }
    return _mm512_loadu_ps((const float *)row + d);
}

/* Value row j's 16 elements at d: as load16, with a quantized row's scale from t->vd. */
AI __m512 vload16(const pl_attn_tile *t, int32_t j, int32_t d, __mmask16 mk, int KT);

/* A masked tail (head_dim % 16 of 4, 8 or 12): float types only, quantized rows have none. */
AI __m512 load16_mask(const void *row, int32_t d, __mmask16 mk, int KT) {
    if (KT == PL_KT_F16) return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mk, (const uint16_t *)row + d));
    if (KT == PL_KT_BF16) {
        __m256i x = _mm256_maskz_loadu_epi16(mk, (const uint16_t *)row + d);
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(x), 16));
    }
    if (KT == PL_KT_Q8_0 || KT == PL_KT_Q4_0) return _mm512_maskz_mov_ps(mk, load16(row, d, KT));
    return _mm512_maskz_loadu_ps(mk, (const float *)row + d);
}

AI __m512 vload16(const pl_attn_tile *t, int32_t j, int32_t d, __mmask16 mk, int KT) {
    if (KT != PL_KT_Q8_0 && KT != PL_KT_Q4_0)
        return mk == 0xFFFF ? load16(t->vrow[j], d, KT) : load16_mask(t->vrow[j], d, mk, KT);
    const __m512 sc = _mm512_set1_ps(t->vd[j * (t->head_dim / PL_QK) + (d >> 5)]);
    __m512i q;
    if (KT == PL_KT_Q8_0) {
        const uint8_t *b = (const uint8_t *)t->vrow[j] + (size_t)(d >> 5) * sizeof(pl_block_q8_0);
        q = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(b + 2 + (d & 31))));
    } else {
        const uint8_t *b = (const uint8_t *)t->vrow[j] + (size_t)(d >> 5) * sizeof(pl_block_q4_0);
        __m128i x = _mm_loadu_si128((const __m128i *)(b + 2));
        if (d & 16) x = _mm_srli_epi16(x, 4);
        q = _mm512_sub_epi32(_mm512_cvtepu8_epi32(_mm_and_si128(x, _mm_set1_epi8(15))),
                             _mm512_set1_epi32(8));
    }
    return _mm512_mul_ps(_mm512_cvtepi32_ps(q), sc); /* quantized rows have no tail: mk full */
}

/* Horizontal sums of four registers: lane i of the result is the sum of a_i. Each sum is
 * (q0 + q2) + (q1 + q3) over 128-bit quarters, then (w0 + w1) + (w2 + w3) inside the quarter. */
AI __m128 reduce4(__m512 a0, __m512 a1, __m512 a2, __m512 a3) {
    __m512 x = _mm512_add_ps(_mm512_shuffle_f32x4(a0, a1, 0x44), _mm512_shuffle_f32x4(a0, a1, 0xEE));
    __m512 y = _mm512_add_ps(_mm512_shuffle_f32x4(a2, a3, 0x44), _mm512_shuffle_f32x4(a2, a3, 0xEE));
    __m512 z = _mm512_add_ps(_mm512_shuffle_f32x4(x, y, 0x88), _mm512_shuffle_f32x4(x, y, 0xDD));
    z = _mm512_add_ps(z, _mm512_permute_ps(z, 0xB1));
    z = _mm512_add_ps(z, _mm512_permute_ps(z, 0x4E));
    const __m512i idx = _mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
    return _mm512_castps512_ps128(_mm512_permutexvar_ps(idx, z));
}

/* Online softmax step of vector v: scores -> probabilities in place; returns alpha. */
static float softmax_update(const pl_attn_tile *t, int32_t v) {
    const int32_t nv = t->nvis[v], lo = t->nlo[v]; /* keys lo <= j < nv, 0 <= lo < nv <= 32 */
    float *s = t->s + (size_t)v * PL_ATTN_KT;
    const uint32_t keep = (nv >= 32 ? 0xFFFFFFFFu : (1u << nv) - 1u) & ~((1u << lo) - 1u);
    __mmask16 m0 = (__mmask16)(keep & 0xFFFF), m1 = (__mmask16)(keep >> 16);
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    __m512 s0 = _mm512_mask_loadu_ps(ninf, m0, s), s1 = _mm512_mask_loadu_ps(ninf, m1, s + 16);
    float m_new = fmaxf(t->m[v], _mm512_reduce_max_ps(_mm512_max_ps(s0, s1)));
    float alpha = expf(t->m[v] - m_new);
    const __m512 mn = _mm512_set1_ps(m_new);
    __m512 p0 = _mm512_maskz_mov_ps(m0, exp16(_mm512_sub_ps(s0, mn)));
    __m512 p1 = _mm512_maskz_mov_ps(m1, exp16(_mm512_sub_ps(s1, mn)));
    _mm512_storeu_ps(s, p0);
    _mm512_storeu_ps(s + 16, p1);
    t->m[v] = m_new;
    t->l[v] = t->l[v] * alpha + _mm512_reduce_add_ps(_mm512_add_ps(p0, p1));
    return alpha;
}

/* The operations the tile skeleton (attention_tile.h) runs on: 16 lanes; a last chunk of 4, 8
 * or 12 lanes is loaded and stored under a mask. */
#define W 16
#define ATTN_GQA3 1
#define TAIL_FULL 0xFFFF
#define HAS_TAIL(hd, tl) (tl)
#define PL_ATTN_TILE_FN pl_attn_tile_avx512
typedef __m512 vec;
typedef __mmask16 tail_t;

AI tail_t tail_of(int32_t hd) { return tail_mask(hd); }
AI vec v_zero(void) { return _mm512_setzero_ps(); }
AI vec v_set1(float x) { return _mm512_set1_ps(x); }
AI vec v_mul(vec a, vec b) { return _mm512_mul_ps(a, b); }
AI vec v_fmadd(vec a, vec b, vec c) { return _mm512_fmadd_ps(a, b, c); }
AI vec q_load(const float *p) { return _mm512_loadu_ps(p); }
AI vec q_load_tail(const float *p, tail_t tl) { return _mm512_maskz_loadu_ps(tl, p); }
AI vec k_load(const void *row, int32_t d, int KT) { return load16(row, d, KT); }
AI vec k_load_tail(const void *row, int32_t d, tail_t tl, int KT) {
    return load16_mask(row, d, tl, KT);
}
AI vec v_load(const pl_attn_tile *t, int32_t j, int32_t d, tail_t tl, int KT) {
    return vload16(t, j, d, tl, KT);
}
AI vec v_load_some(const pl_attn_tile *t, int32_t j, int32_t d, tail_t tl, int KT) {
    return KT == PL_KT_Q8_0 || KT == PL_KT_Q4_0 ? vload16(t, j, d, tl, KT)
                                                : load16_mask(t->vrow[j], d, tl, KT);
}
AI vec acc_load(const float *p, tail_t tl) { return _mm512_maskz_loadu_ps(tl, p); }
AI void acc_store(float *p, vec x, tail_t tl) { _mm512_mask_storeu_ps(p, tl, x); }

/* p·V's chunks at once for NG vectors: 8-16 FMA chains (head_dim 64 is 4 chunks) */
#define PV_CH(NG) ((NG) <= 4 ? 4 : 2)
#define PV_MAXACC 16
#define SC_KB(NQ) 4
#include "kernels/attention_tile.h"

void pl_attn_f32_to_f16_avx512(const float *x, uint16_t *y, int32_t n) {
    int32_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(y + i),
                            _mm512_cvtps_ph(_mm512_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    if (i < n) {
        __mmask16 mk = (__mmask16)((1u << (n - i)) - 1u);
        _mm256_mask_storeu_epi16(y + i, mk, _mm512_cvtps_ph(_mm512_maskz_loadu_ps(mk, x + i),
                                                            _MM_FROUND_TO_NEAREST_INT));
    }
}
