/* kernels/attention_avx2 — the attention tile (see attention_impl.h) with AVX2 + FMA + F16C.
 *
 * The same plan as attention_avx512.c with 8 lanes: head_dim in chunks of 8 and, when head_dim
 * is 4 mod 8, a last chunk of 4 loaded zero-extended. Four query vectors share each key chunk
 * (left-over vectors take four keys at a time), the four accumulators are summed with one tree
 * (reduce4), exp is a polynomial, and p·V keeps up to 8 accumulators in registers while the
 * values stream past. bf16, q8_0 and q4_0 rows are widened or dequantized in registers by load8. Each vector's arithmetic is independent of its neighbours in the chunk.
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

AI void scores_4q(const pl_attn_tile *t, int32_t v, int32_t j0, int32_t nk, int KT) {
    const int32_t hd = t->head_dim, full = hd & ~7;
    const float *q0 = t->q + (size_t)v * hd, *q1 = q0 + hd, *q2 = q1 + hd, *q3 = q2 + hd;
    const __m128 scale = _mm_set1_ps(t->scale);
    for (int32_t j = j0; j < nk; j++) {
        const void *k = t->krow[j];
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int32_t d = 0; d < full; d += 8) {
            __m256 kc = load8(k, d, 1, KT);
            a0 = _mm256_fmadd_ps(load8(q0, d, 1, 0), kc, a0);
            a1 = _mm256_fmadd_ps(load8(q1, d, 1, 0), kc, a1);
            a2 = _mm256_fmadd_ps(load8(q2, d, 1, 0), kc, a2);
            a3 = _mm256_fmadd_ps(load8(q3, d, 1, 0), kc, a3);
        }
        if (hd & 7) {
            __m256 kc = load8(k, full, 0, KT);
            a0 = _mm256_fmadd_ps(load8(q0, full, 0, 0), kc, a0);
            a1 = _mm256_fmadd_ps(load8(q1, full, 0, 0), kc, a1);
            a2 = _mm256_fmadd_ps(load8(q2, full, 0, 0), kc, a2);
            a3 = _mm256_fmadd_ps(load8(q3, full, 0, 0), kc, a3);
        }
        float r[4];
        _mm_storeu_ps(r, _mm_mul_ps(reduce4(a0, a1, a2, a3), scale));
        for (int i = 0; i < 4; i++) t->s[(size_t)(v + i) * PL_ATTN_KT + j] = r[i];
    }
}

AI void scores_1q(const pl_attn_tile *t, int32_t v, int32_t j0, int32_t nk, int KT) {
    const int32_t hd = t->head_dim, full = hd & ~7;
    const float *q = t->q + (size_t)v * hd;
    const __m128 scale = _mm_set1_ps(t->scale);
    for (int32_t j = j0; j < nk; j += 4) {
        const void *k0 = t->krow[j];
        const void *k1 = j + 1 < nk ? t->krow[j + 1] : k0; /* padding: computed, not used */
        const void *k2 = j + 2 < nk ? t->krow[j + 2] : k0;
        const void *k3 = j + 3 < nk ? t->krow[j + 3] : k0;
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int32_t d = 0; d < full; d += 8) {
            __m256 qc = load8(q, d, 1, 0);
            a0 = _mm256_fmadd_ps(qc, load8(k0, d, 1, KT), a0);
            a1 = _mm256_fmadd_ps(qc, load8(k1, d, 1, KT), a1);
            a2 = _mm256_fmadd_ps(qc, load8(k2, d, 1, KT), a2);
            a3 = _mm256_fmadd_ps(qc, load8(k3, d, 1, KT), a3);
        }
        if (hd & 7) {
            __m256 qc = load8(q, full, 0, 0);
            a0 = _mm256_fmadd_ps(qc, load8(k0, full, 0, KT), a0);
            a1 = _mm256_fmadd_ps(qc, load8(k1, full, 0, KT), a1);
            a2 = _mm256_fmadd_ps(qc, load8(k2, full, 0, KT), a2);
            a3 = _mm256_fmadd_ps(qc, load8(k3, full, 0, KT), a3);
        }
        float r[4];
        _mm_storeu_ps(r, _mm_mul_ps(reduce4(a0, a1, a2, a3), scale));
        for (int i = 0; i < 4 && j + i < nk; i++) t->s[(size_t)v * PL_ATTN_KT + j + i] = r[i];
    }
}

/* e^x for x <= 0: inputs below -87.3 are clamped (e^-87.3 ~ 1e-38 stands in for smaller values,
 * an absolute error far below anything visible next to the tile maximum's e^0 = 1); degree-7
 * Taylor polynomial on |r| <= ln2/2; 2^n built in the exponent field (n >= -126). */
AI __m256 exp8(__m256 x) {
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.0f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.0f / 5040);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
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

/* a[i] += p_ij v_j for keys [j0, j1), each only for the vectors that see it (LO: the keys may
 * lie below some vector's window start; else only the causal end is checked). */
AI void pv_some(const pl_attn_tile *t, int32_t v, __m256 *a, int32_t j0, int32_t j1, int32_t d,
                int FULL, int NG, int KT, int LO) {
    const float *p = t->s + (size_t)v * PL_ATTN_KT;
    for (int32_t j = j0; j < j1; j++) {
        __m256 vc = vload8(t, j, d, FULL, KT);
#pragma GCC unroll 8
        for (int i = 0; i < NG; i++)
            if ((!LO || j >= t->nlo[v + i]) && j < t->nvis[v + i])
                a[i] = _mm256_fmadd_ps(_mm256_set1_ps(p[i * PL_ATTN_KT + j]), vc, a[i]);
    }
}

AI void pv_chunk(const pl_attn_tile *t, int32_t v, const float *alpha, const pl_attn_range *r,
                 int32_t d, int FULL, int NG, int KT) {
    const int32_t hd = t->head_dim;
    const int32_t lmin = r->lmin, lmax = r->lmax, nmin = r->nmin, nmax = r->nmax;
    /* keys [lmax, nmin) are seen by all NG vectors: unconditional; the others per vector */
    const int32_t ulo = lmax < nmin ? lmax : nmax, uhi = lmax < nmin ? nmin : nmax;
    __m256 a[8];
#pragma GCC unroll 8
    for (int i = 0; i < NG; i++)
        a[i] = _mm256_mul_ps(load8(t->acc + (size_t)(v + i) * hd, d, FULL, 0), _mm256_set1_ps(alpha[v + i]));
    const float *p = t->s + (size_t)v * PL_ATTN_KT;
    pv_some(t, v, a, lmin, ulo, d, FULL, NG, KT, 1);
    for (int32_t j = ulo; j < uhi; j++) {
        __m256 vc = vload8(t, j, d, FULL, KT);
#pragma GCC unroll 8
        for (int i = 0; i < NG; i++)
            a[i] = _mm256_fmadd_ps(_mm256_set1_ps(p[i * PL_ATTN_KT + j]), vc, a[i]);
    }
    if (lmax < nmin) pv_some(t, v, a, uhi, nmax, d, FULL, NG, KT, 0); /* j >= every nlo */
#pragma GCC unroll 8
    for (int i = 0; i < NG; i++) store8(t->acc + (size_t)(v + i) * hd + d, a[i], FULL);
}

AI void pv_group(const pl_attn_tile *t, int32_t v, const float *alpha, int NG, int KT) {
    const int32_t hd = t->head_dim, full = hd & ~7;
    const pl_attn_range r = pl_attn_range_of(t, v, NG);
    for (int32_t d = 0; d < full; d += 8) pv_chunk(t, v, alpha, &r, d, 1, NG, KT);
    if (hd & 7) pv_chunk(t, v, alpha, &r, full, 0, NG, KT);
}

AI void tile_impl(const pl_attn_tile *t, int KT) {
    int32_t v0, v1; /* the vectors that see a key of this tile (attention_impl.h) */
    pl_attn_seeing(t, &v0, &v1);
    int32_t v = v0;
    if (KT == PL_KT_Q8_0 || KT == PL_KT_Q4_0) {
        scores_q(t, v0, v1, KT == PL_KT_Q4_0); /* integer dot products (attention_q.h) */
    } else {
        for (; v + 4 <= v1; v += 4) scores_4q(t, v, t->nlo[v], t->nvis[v + 3], KT);
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

void pl_attn_tile_avx2(const pl_attn_tile *t) {
    switch (t->kt) {
    case PL_KT_F16: tile_impl(t, PL_KT_F16); return;
    case PL_KT_BF16: tile_impl(t, PL_KT_BF16); return;
    case PL_KT_Q8_0: tile_impl(t, PL_KT_Q8_0); return;
    case PL_KT_Q4_0: tile_impl(t, PL_KT_Q4_0); return;
    default: tile_impl(t, PL_KT_F32); return;
    }
}

void pl_attn_f32_to_f16_avx2(const float *x, uint16_t *y, int32_t n) {
    int32_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(y + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i + 4 <= n; i += 4)
        _mm_storel_epi64((__m128i *)(y + i), _mm_cvtps_ph(_mm_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
}
