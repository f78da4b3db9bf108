/* kernels/attention_tile — the attention tile (attention_impl.h) once for every vector width:
 * internal to attention_avx2.c and attention_avx512.c, each of which includes it once after
 * defining its vector width and the operations below as static inline functions (AI).
 *
 * The plan, the same at every width:
 *   scores:  four query vectors at a time share each key chunk (one load and conversion serves
 *            four FMAs), and three left over (a GQA group of 3 in decode) likewise where
 *            ATTN_GQA3 says so; other left-over vectors take four keys at a time instead. Both
 *            reduce the four accumulators with the same tree (reduce4), so a score's bits do not
 *            depend on which path computed it. q8_0 / q4_0 keys: integer dot products
 *            (attention_q.h).
 *   softmax: the ISA's softmax_update (32 scores in 32 / W registers, exp as a polynomial).
 *   p·V:     for each head_dim chunk, up to 8 vector accumulators stay in registers while the
 *            tile's values stream past: one value load and conversion serves 8 FMAs.
 * head_dim is walked in chunks of W lanes; a last chunk of head_dim % W lanes (a multiple of 4;
 * never for quantized rows, which are whole 32-element blocks) is loaded by the *_tail
 * operations, whose unused lanes are zero, and stored by acc_store with the same tail.
 *
 * What the including file defines:
 *   W                        lanes per vector (a power of two)
 *   vec, tail_t              the vector type; the chunk's extent (TAIL_FULL: all W lanes)
 *   ATTN_GQA3                1: three left-over query vectors share a key load (scores_nq 3)
 *   SC_KB(NQ)                keys scores_nq takes at once for NQ (3, 4) query vectors (at most 4)
 *   PV_CH(NG), PV_MAXACC     head_dim chunks p·V takes at once for NG vectors (NG x PV_CH(NG)
 *                            accumulators, at most PV_MAXACC)
 *   PL_ATTN_TILE_FN          the name of the tile function to define
 *   tail_of(hd)              the tail of the last chunk of a head_dim with hd % W != 0
 *   HAS_TAIL(hd, tl)         whether head_dim hd (whose tail_of is tl) ends in a partial chunk
 *   v_zero, v_set1, v_mul, v_fmadd
 *   q_load(p), q_load_tail(p, tl)              a query chunk (f32)
 *   k_load(row, d, KT), k_load_tail(row, d, tl, KT)   a key chunk, converted to f32
 *   v_load(t, j, d, tl, KT)   value row j's chunk at d (the keys every vector sees)
 *   v_load_some(t, j, d, tl, KT)   the same for the keys only some vectors see
 *   acc_load(p, tl), acc_store(p, x, tl)       an accumulator row's chunk
 *   reduce4(a0, a1, a2, a3)  __m128 whose lane i is the sum of the lanes of a_i (a fixed tree)
 *   softmax_update(t, v)     vector v's online softmax step over its scores; returns alpha
 */
#ifndef PL_KERNELS_ATTENTION_TILE_H
#define PL_KERNELS_ATTENTION_TILE_H

/* Scores of NQ (3 or 4) query vectors q[0..NQ) against keys [j0, nk): one key chunk load and
 * conversion serves NQ FMAs, and SC_KB(NQ) keys at a time give the loop that many times NQ
 * independent FMA chains (one key at a time waited on the FMA latency: NQ FMAs per 4 cycles).
 * NQ = 3 is a GQA group of 3 (a decode's work item): its fourth sum is a zero register, which
 * leaves the others' trees as they are; each key's sums are the same whatever SC_KB. */
AI void scores_nq(const pl_attn_tile *t, int32_t v, int32_t j0, int32_t nk, int KT, const int NQ) {
    const int32_t hd = t->head_dim, full = hd & ~(W - 1);
    const tail_t tl = tail_of(hd);
    const float *q0 = t->q + (size_t)v * hd, *q1 = q0 + hd, *q2 = q1 + hd, *q3 = q2 + hd;
    const __m128 scale = _mm_set1_ps(t->scale);
    const int KB = SC_KB(NQ);
    for (int32_t j = j0; j < nk; j += KB) {
        const void *k[4];
        vec a[4][4];
#pragma GCC unroll 4
        for (int b = 0; b < KB; b++) {
            k[b] = j + b < nk ? t->krow[j + b] : t->krow[j]; /* padding: computed, not used */
            a[b][0] = a[b][1] = a[b][2] = a[b][3] = v_zero();
        }
        for (int32_t d = 0; d < full; d += W) {
#pragma GCC unroll 4
            for (int b = 0; b < KB; b++) {
                vec kc = k_load(k[b], d, KT);
                a[b][0] = v_fmadd(q_load(q0 + d), kc, a[b][0]);
                a[b][1] = v_fmadd(q_load(q1 + d), kc, a[b][1]);
                a[b][2] = v_fmadd(q_load(q2 + d), kc, a[b][2]);
                if (NQ > 3) a[b][3] = v_fmadd(q_load(q3 + d), kc, a[b][3]);
            }
        }
        if (HAS_TAIL(hd, tl)) {
#pragma GCC unroll 4
            for (int b = 0; b < KB; b++) {
                vec kc = k_load_tail(k[b], full, tl, KT);
                a[b][0] = v_fmadd(q_load_tail(q0 + full, tl), kc, a[b][0]);
                a[b][1] = v_fmadd(q_load_tail(q1 + full, tl), kc, a[b][1]);
                a[b][2] = v_fmadd(q_load_tail(q2 + full, tl), kc, a[b][2]);
                if (NQ > 3) a[b][3] = v_fmadd(q_load_tail(q3 + full, tl), kc, a[b][3]);
            }
        }
#pragma GCC unroll 4
        for (int b = 0; b < KB; b++) {
            if (j + b >= nk) break;
            float r[4];
            _mm_storeu_ps(r, _mm_mul_ps(reduce4(a[b][0], a[b][1], a[b][2], a[b][3]), scale));
            for (int i = 0; i < NQ; i++) t->s[(size_t)(v + i) * PL_ATTN_KT + j + b] = r[i];
        }
    }
}

/* Scores of one query vector against keys [j0, nk), four keys at a time. */
AI void scores_1q(const pl_attn_tile *t, int32_t v, int32_t j0, int32_t nk, int KT) {
    const int32_t hd = t->head_dim, full = hd & ~(W - 1);
    const tail_t tl = tail_of(hd);
    const float *q = t->q + (size_t)v * hd;
    const __m128 scale = _mm_set1_ps(t->scale);
    for (int32_t j = j0; j < nk; j += 4) {
        const void *k0 = t->krow[j];
        const void *k1 = j + 1 < nk ? t->krow[j + 1] : k0; /* padding: computed, not used */
        const void *k2 = j + 2 < nk ? t->krow[j + 2] : k0;
        const void *k3 = j + 3 < nk ? t->krow[j + 3] : k0;
        vec a0 = v_zero(), a1 = a0, a2 = a0, a3 = a0;
        for (int32_t d = 0; d < full; d += W) {
            vec qc = q_load(q + d);
            a0 = v_fmadd(qc, k_load(k0, d, KT), a0);
            a1 = v_fmadd(qc, k_load(k1, d, KT), a1);
            a2 = v_fmadd(qc, k_load(k2, d, KT), a2);
            a3 = v_fmadd(qc, k_load(k3, d, KT), a3);
        }
        if (HAS_TAIL(hd, tl)) {
            vec qc = q_load_tail(q + full, tl);
            a0 = v_fmadd(qc, k_load_tail(k0, full, tl, KT), a0);
            a1 = v_fmadd(qc, k_load_tail(k1, full, tl, KT), a1);
            a2 = v_fmadd(qc, k_load_tail(k2, full, tl, KT), a2);
            a3 = v_fmadd(qc, k_load_tail(k3, full, tl, KT), a3);
        }
        float r[4];
        _mm_storeu_ps(r, _mm_mul_ps(reduce4(a0, a1, a2, a3), scale));
        for (int i = 0; i < 4 && j + i < nk; i++) t->s[(size_t)v * PL_ATTN_KT + j + i] = r[i];
    }
}

/* a[c NG + i] += p_ij v_j for keys [j0, j1) and the CH chunks at d, each key only for the
 * vectors that see it (LO: the keys may lie below some vector's window start; else only the
 * causal end is checked). */
AI void pv_some(const pl_attn_tile *t, int32_t v, vec *a, int32_t j0, int32_t j1, int32_t d,
                tail_t tl, int NG, int CH, int KT, int LO) {
    const float *p = t->s + (size_t)v * PL_ATTN_KT;
    for (int32_t j = j0; j < j1; j++) {
#pragma GCC unroll 8
        for (int c = 0; c < CH; c++) {
            vec vc = v_load_some(t, j, d + c * W, tl, KT);
#pragma GCC unroll 8
            for (int i = 0; i < NG; i++)
                if ((!LO || j >= t->nlo[v + i]) && j < t->nvis[v + i])
                    a[c * NG + i] = v_fmadd(v_set1(p[i * PL_ATTN_KT + j]), vc, a[c * NG + i]);
        }
    }
}

/* acc[v..v+NG) = alpha * acc + sum_j p_j v_j over the CH head_dim chunks at d (extent tl; CH > 1
 * only for whole chunks). Keys that every vector sees run unconditionally; the rest only for the
 * vectors that see them. Each accumulator adds its keys in order, whatever CH: CH chunks at once
 * only give the loop CH x NG independent FMA chains (a decode's GQA group of 3 alone waited on
 * the FMA latency, 3 FMAs per 4 cycles). */
AI void pv_chunk(const pl_attn_tile *t, int32_t v, const float *alpha, const pl_attn_range *r,
                 int32_t d, tail_t tl, int NG, int CH, int KT) {
    const int32_t hd = t->head_dim;
    const int32_t lmin = r->lmin, lmax = r->lmax, nmin = r->nmin, nmax = r->nmax;
    /* keys [lmax, nmin) are seen by all NG vectors: unconditional; the others per vector */
    const int32_t ulo = lmax < nmin ? lmax : nmax, uhi = lmax < nmin ? nmin : nmax;
    vec a[PV_MAXACC];
#pragma GCC unroll 16
    for (int c = 0; c < CH; c++)
#pragma GCC unroll 8
        for (int i = 0; i < NG; i++)
            a[c * NG + i] = v_mul(acc_load(t->acc + (size_t)(v + i) * hd + d + c * W, tl), v_set1(alpha[v + i]));
    const float *p = t->s + (size_t)v * PL_ATTN_KT;
    pv_some(t, v, a, lmin, ulo, d, tl, NG, CH, KT, 1);
    for (int32_t j = ulo; j < uhi; j++) {
        if (CH == 1) { /* NG up to 8: the broadcasts where they are used */
            vec vc = v_load(t, j, d, tl, KT);
#pragma GCC unroll 8
            for (int i = 0; i < NG; i++) a[i] = v_fmadd(v_set1(p[i * PL_ATTN_KT + j]), vc, a[i]);
            continue;
        }
        vec pj[8]; /* CH > 1: each broadcast serves CH chunks */
#pragma GCC unroll 8
        for (int i = 0; i < NG; i++) pj[i] = v_set1(p[i * PL_ATTN_KT + j]);
#pragma GCC unroll 16
        for (int c = 0; c < CH; c++) {
            vec vc = v_load(t, j, d + c * W, tl, KT);
#pragma GCC unroll 8
            for (int i = 0; i < NG; i++) a[c * NG + i] = v_fmadd(pj[i], vc, a[c * NG + i]);
        }
    }
    if (lmax < nmin) pv_some(t, v, a, uhi, nmax, d, tl, NG, CH, KT, 0); /* j >= every nlo */
#pragma GCC unroll 16
    for (int c = 0; c < CH; c++)
#pragma GCC unroll 8
        for (int i = 0; i < NG; i++) acc_store(t->acc + (size_t)(v + i) * hd + d + c * W, a[c * NG + i], tl);
}

AI void pv_group(const pl_attn_tile *t, int32_t v, const float *alpha, int NG, int KT) {
    const int32_t hd = t->head_dim, full = hd & ~(W - 1);
    const pl_attn_range r = pl_attn_range_of(t, v, NG);
    const int CH = PV_CH(NG);
    int32_t d = 0;
    if (CH > 1)
        for (; d + CH * W <= full; d += CH * W) pv_chunk(t, v, alpha, &r, d, TAIL_FULL, NG, CH, KT);
    for (; d < full; d += W) pv_chunk(t, v, alpha, &r, d, TAIL_FULL, NG, 1, KT);
    if (hd & (W - 1)) pv_chunk(t, v, alpha, &r, full, tail_of(hd), NG, 1, KT);
}

AI void tile_impl(const pl_attn_tile *t, int KT) {
    int32_t v0, v1; /* the vectors that see a key of this tile (attention_impl.h) */
    pl_attn_seeing(t, &v0, &v1);
    int32_t v = v0;
    if (KT == PL_KT_Q8_0 || KT == PL_KT_Q4_0) {
        scores_q(t, v0, v1, KT == PL_KT_Q4_0); /* integer dot products (attention_q.h) */
    } else {
        for (; v + 4 <= v1; v += 4) scores_nq(t, v, t->nlo[v], t->nvis[v + 3], KT, 4);
        if (ATTN_GQA3 && v + 3 == v1) { /* a GQA group of 3 (decode): one key load for all three */
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

void PL_ATTN_TILE_FN(const pl_attn_tile *t) {
    switch (t->kt) {
    case PL_KT_F16: tile_impl(t, PL_KT_F16); return;
    case PL_KT_BF16: tile_impl(t, PL_KT_BF16); return;
    case PL_KT_Q8_0: tile_impl(t, PL_KT_Q8_0); return;
    case PL_KT_Q4_0: tile_impl(t, PL_KT_Q4_0); return;
    default: tile_impl(t, PL_KT_F32); return;
    }
}

#endif
