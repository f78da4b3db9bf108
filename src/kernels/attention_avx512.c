/* kernels/attention_avx512 — the attention tile (see attention_impl.h) with AVX-512.
 *
 * head_dim is walked in chunks of 16 lanes; a tail of 4, 8 or 12 uses masked loads (zeros in the
 * unused lanes add nothing). f16 rows are widened with vcvtph2ps as they are loaded, bf16 rows by
 * a shift, q8_0 / q4_0 rows dequantized in registers (int8 or nibble -> f32, times the block's
 * scale); quantized rows are whole 32-element blocks, so they never take a masked tail.
 *
 *   scores:  four query vectors at a time share each key chunk (one load and conversion serves
 *            four FMAs), and three left over (a GQA group of 3 in decode) likewise; other
 *            left-over vectors take four keys at a time instead. Both reduce the four
 *            16-lane accumulators with the same tree (reduce4), so a score's bits do not depend
 *            on which path computed it.
 *   softmax: the 32 scores of a vector are two registers; exp is a degree-7 polynomial after
 *            range reduction, scaled with vscalefps.
 *   p·V:     for each head_dim chunk, up to 8 vector accumulators stay in registers while the
 *            tile's values stream past: one value load and conversion serves 8 FMAs, each with
 *            p broadcast from memory.
 * Every vector gets exactly its own sequence of operations (keys in order, fixed trees), never
 * one that depends on its neighbours in the chunk.
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

/* Scores of NQ (3 or 4) query vectors q[0..NQ) against the first nk keys: one key chunk load
 * and conversion serves NQ FMAs. NQ = 3 is a GQA group of 3 (a decode's work item): its fourth
 * sum is a zero register, which leaves the others' trees as they are. */
AI void scores_nq(const pl_attn_tile *t, int32_t v, int32_t j0, int32_t nk, int KT, const int NQ) {
    const int32_t hd = t->head_dim, full = hd & ~15;
    const __mmask16 mk = tail_mask(hd);
    const float *q0 = t->q + (size_t)v * hd, *q1 = q0 + hd, *q2 = q1 + hd, *q3 = q2 + hd;
    const __m128 scale = _mm_set1_ps(t->scale);
    for (int32_t j = j0; j < nk; j++) {
        const void *k = t->krow[j];
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int32_t d = 0; d < full; d += 16) {
            __m512 kc = load16(k, d, KT);
            a0 = _mm512_fmadd_ps(_mm512_loadu_ps(q0 + d), kc, a0);
            a1 = _mm512_fmadd_ps(_mm512_loadu_ps(q1 + d), kc, a1);
            a2 = _mm512_fmadd_ps(_mm512_loadu_ps(q2 + d), kc, a2);
            if (NQ > 3) a3 = _mm512_fmadd_ps(_mm512_loadu_ps(q3 + d), kc, a3);
        }
        if (mk) {
            __m512 kc = load16_mask(k, full, mk, KT);
            a0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mk, q0 + full), kc, a0);
            a1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mk, q1 + full), kc, a1);
            a2 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mk, q2 + full), kc, a2);
            if (NQ > 3) a3 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mk, q3 + full), kc, a3);
        }
        float r[4];
        _mm_storeu_ps(r, _mm_mul_ps(reduce4(a0, a1, a2, a3), scale));
        for (int i = 0; i < NQ; i++) t->s[(size_t)(v + i) * PL_ATTN_KT + j] = r[i];
    }
}

/* Scores of one query vector against its nk keys, four keys at a time. */
AI void scores_1q(const pl_attn_tile *t, int32_t v, int32_t j0, int32_t nk, int KT) {
    const int32_t hd = t->head_dim, full = hd & ~15;
    const __mmask16 mk = tail_mask(hd);
    const float *q = t->q + (size_t)v * hd;
    const __m128 scale = _mm_set1_ps(t->scale);
    for (int32_t j = j0; j < nk; j += 4) {
        const void *k0 = t->krow[j];
        const void *k1 = j + 1 < nk ? t->krow[j + 1] : k0; /* padding: computed, not used */
        const void *k2 = j + 2 < nk ? t->krow[j + 2] : k0;
        const void *k3 = j + 3 < nk ? t->krow[j + 3] : k0;
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int32_t d = 0; d < full; d += 16) {
            __m512 qc = _mm512_loadu_ps(q + d);
            a0 = _mm512_fmadd_ps(qc, load16(k0, d, KT), a0);
            a1 = _mm512_fmadd_ps(qc, load16(k1, d, KT), a1);
            a2 = _mm512_fmadd_ps(qc, load16(k2, d, KT), a2);
            a3 = _mm512_fmadd_ps(qc, load16(k3, d, KT), a3);
        }
        if (mk) {
            __m512 qc = _mm512_maskz_loadu_ps(mk, q + full);
            a0 = _mm512_fmadd_ps(qc, load16_mask(k0, full, mk, KT), a0);
            a1 = _mm512_fmadd_ps(qc, load16_mask(k1, full, mk, KT), a1);
            a2 = _mm512_fmadd_ps(qc, load16_mask(k2, full, mk, KT), a2);
            a3 = _mm512_fmadd_ps(qc, load16_mask(k3, full, mk, KT), a3);
        }
        float r[4];
        _mm_storeu_ps(r, _mm_mul_ps(reduce4(a0, a1, a2, a3), scale));
        for (int i = 0; i < 4 && j + i < nk; i++) t->s[(size_t)v * PL_ATTN_KT + j + i] = r[i];
    }
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

/* a[i] += p_ij v_j for keys [j0, j1), each only for the vectors that see it (LO: the keys may
 * lie below some vector's window start; else only the causal end is checked). */
AI void pv_some(const pl_attn_tile *t, int32_t v, __m512 *a, int32_t j0, int32_t j1, int32_t d,
                __mmask16 mk, int NG, int KT, int LO) {
    const float *p = t->s + (size_t)v * PL_ATTN_KT;
    for (int32_t j = j0; j < j1; j++) {
        __m512 vc = KT == PL_KT_Q8_0 || KT == PL_KT_Q4_0 ? vload16(t, j, d, mk, KT)
                                                          : load16_mask(t->vrow[j], d, mk, KT);
#pragma GCC unroll 8
        for (int i = 0; i < NG; i++)
            if ((!LO || j >= t->nlo[v + i]) && j < t->nvis[v + i])
                a[i] = _mm512_fmadd_ps(_mm512_set1_ps(p[i * PL_ATTN_KT + j]), vc, a[i]);
    }
}

/* acc[v..v+NG) = alpha * acc + sum_j p_j v_j over the head_dim chunk at d (mask mk). Keys that
 * every vector sees run unconditionally; the rest only for the vectors that see them. */
AI void pv_chunk(const pl_attn_tile *t, int32_t v, const float *alpha, const pl_attn_range *r,
                 int32_t d, __mmask16 mk, int NG, int KT) {
    const int32_t hd = t->head_dim;
    const int32_t lmin = r->lmin, lmax = r->lmax, nmin = r->nmin, nmax = r->nmax;
    /* keys [lmax, nmin) are seen by all NG vectors: unconditional; the others per vector */
    const int32_t ulo = lmax < nmin ? lmax : nmax, uhi = lmax < nmin ? nmin : nmax;
    __m512 a[8];
#pragma GCC unroll 8
    for (int i = 0; i < NG; i++)
        a[i] = _mm512_mul_ps(_mm512_maskz_loadu_ps(mk, t->acc + (size_t)(v + i) * hd + d),
                             _mm512_set1_ps(alpha[v + i]));
    const float *p = t->s + (size_t)v * PL_ATTN_KT;
    pv_some(t, v, a, lmin, ulo, d, mk, NG, KT, 1);
    for (int32_t j = ulo; j < uhi; j++) {
        __m512 vc = vload16(t, j, d, mk, KT);
#pragma GCC unroll 8
        for (int i = 0; i < NG; i++)
            a[i] = _mm512_fmadd_ps(_mm512_set1_ps(p[i * PL_ATTN_KT + j]), vc, a[i]);
    }
    if (lmax < nmin) pv_some(t, v, a, uhi, nmax, d, mk, NG, KT, 0); /* j >= every nlo */
#pragma GCC unroll 8
    for (int i = 0; i < NG; i++) _mm512_mask_storeu_ps(t->acc + (size_t)(v + i) * hd + d, mk, a[i]);
}

AI void pv_group(const pl_attn_tile *t, int32_t v, const float *alpha, int NG, int KT) {
    const int32_t hd = t->head_dim, full = hd & ~15;
    const pl_attn_range r = pl_attn_range_of(t, v, NG);
    for (int32_t d = 0; d < full; d += 16) pv_chunk(t, v, alpha, &r, d, 0xFFFF, NG, KT);
    if (hd & 15) pv_chunk(t, v, alpha, &r, full, tail_mask(hd), NG, KT);
}

AI void tile_impl(const pl_attn_tile *t, int KT) {
    int32_t v0, v1; /* the vectors that see a key of this tile (attention_impl.h) */
    pl_attn_seeing(t, &v0, &v1);
    int32_t v = v0;
    if (KT == PL_KT_Q8_0 || KT == PL_KT_Q4_0) {
        scores_q(t, v0, v1, KT == PL_KT_Q4_0); /* integer dot products (attention_q.h) */
    } else {
        for (; v + 4 <= v1; v += 4) scores_nq(t, v, t->nlo[v], t->nvis[v + 3], KT, 4);
        if (v + 3 == v1) { /* a GQA group of 3 (decode): one key load for all three */
            scores_nq(t, v, t->nlo[v], t->nvis[v + 2], KT, 3);
            v += 3;
        }
        for (; v < v1; v++) scores_1q(t, v, t->nlo[v], t->nvis[v], KT);
    }

    pl_attn_softcap_tile(t, v0, v1);
    float alpha[PL_ATTN_MAXQ];
    for (v = v0; v < v1; v++) alpha[v] = softmax_update(t, v);
    if (KT == PL_KT_Q8_0 || KT == PL_KT_Q4_0) v_scales(t, v0, v1, KT == PL_KT_Q4_0);

    for (v = v0; v < v1;) {
        int32_t left = v1 - v;
        if (left >= 8) { pv_group(t, v, alpha, 8, KT); v += 8; }
        else if (left >= 4) { pv_group(t, v, alpha, 4, KT); v += 4; }
        else if (left == 3) { pv_group(t, v, alpha, 3, KT); v += 3; } /* GQA 3: one V load */
        else if (left >= 2) { pv_group(t, v, alpha, 2, KT); v += 2; }
        else { pv_group(t, v, alpha, 1, KT); v += 1; }
    }
}

void pl_attn_tile_avx512(const pl_attn_tile *t) {
    switch (t->kt) {
    case PL_KT_F16: tile_impl(t, PL_KT_F16); return;
    case PL_KT_BF16: tile_impl(t, PL_KT_BF16); return;
    case PL_KT_Q8_0: tile_impl(t, PL_KT_Q8_0); return;
    case PL_KT_Q4_0: tile_impl(t, PL_KT_Q4_0); return;
    default: tile_impl(t, PL_KT_F32); return;
    }
}

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
