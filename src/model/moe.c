/* model/moe — a layer's mixture-of-experts FFN (issue 34), computed as llama.cpp's
 * build_moe_ffn: route every token to its top-k experts, group the tokens by expert, run each
 * active expert's SwiGLU FFN once over all its tokens, and add each token's expert outputs,
 * weighted, in expert-id order.
 *
 * The tokens go in passes of at most MOE_CHUNK (one pass for a default prefill chunk or decode
 * step), each in phases that are one pool job apiece:
 *   route    per token: router logits, softmax, top k, weights              (parallel by token)
 *   group    counting sort of the (token, choice) pairs by expert           (serial, O(T k + E))
 *   gather   each pair's row of h into the expert's contiguous block of x   (parallel by pair)
 *   gate/up  one flat list of units (expert, rows [r0, r1) of its gate and up) over all active
 *            experts; then each unit's per-expert scale, bias and SwiGLU (gemma4: GeGLU)
 *            on its rows                                                    (work stealing)
 *   down     the same list over the down matrices' rows, into x (times the per-expert scale,
 *            + bias)                                                        (work stealing)
 *   sum      acc[t] = sum over t's experts in id order of w * y             (parallel by token)
 * The parts claim units from their own contiguous share of the list and steal the back half of
 * the fullest other share when theirs is done (pl_steal_next), so no thread idles behind one
 * busy expert, and each active expert's weights are read once per pass. A unit is a whole
 * expert (its activations converted once) when there are at least 2 active experts per thread;
 * with fewer (decode of a few tokens, few experts) experts are cut into row blocks of a multiple
 * of 32 rows so every thread has work. Each unit runs pl_matmul on the calling thread (no
 * pool) with its part's own activation scratch.
 *
 * Invariant: every value is the matmul kernels' value for its (row, token), whatever the units
 * or the thread that ran them (kernels/matmul.h: results do not depend on the rows a call covers
 * or on B), the SwiGLU and biases are elementwise, and a token's sum has one order; so the
 * output is bitwise the same for any thread count and any other tokens in the step.
 * All scratch is allocated in pl_moe_scratch_alloc; a pass allocates nothing. Gemma 4's layers
 * (experts beside a dense FFN, model.h) route on an input of their own, kept in moe_acc's rows
 * until their pass's sum overwrites them.
 */
#include "model/forward_internal.h"

#include "base/buf.h"
#include "base/status.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* tokens per pass: bounds the gathered rows' scratch; 1024 and 2048 measured no faster for a
 * 2048-token prefill (docs/BENCHMARKS.md, "Mixtures of experts") */
enum { MOE_CHUNK = 512 };
enum { SMALL_T = 4 };     /* passes of at most this many tokens route, gather and sum inline */
enum { MAX_SPLIT = 16 };  /* row blocks per expert at most */
enum { ROW_ALIGN = 32 };  /* row blocks start at multiples of this (repacked weights: 16) */

typedef struct pl_moe_unit {
    int32_t e;      /* expert */
    int32_t r0, r1; /* its rows */
} pl_moe_unit;

static size_t act_bytes(const pl_layer_weights *L, const pl_model_hparams *hp, int64_t T) {
    size_t a = pl_matmul_scratch_size(L->exp_gate[0].type, hp->dim, T);
    size_t b = pl_matmul_scratch_size(L->exp_up[0].type, hp->dim, T);
    size_t d = pl_matmul_scratch_size(L->exp_down[0].type, hp->expert_ffn, T);
    a = a > b ? a : b;
    return (a > d ? a : d) + 64;
}

pl_status pl_moe_scratch_alloc(pl_forward_ctx *c) {
    const pl_model *m = c->m;
    const pl_model_hparams *hp = &m->hp;
    const size_t T = (size_t)c->max_tokens, ne = (size_t)hp->n_expert,
                 k = (size_t)hp->n_expert_used, dim = (size_t)hp->dim, ef = (size_t)hp->expert_ffn;
    const size_t Tc = T < MOE_CHUNK ? T : MOE_CHUNK, N = Tc * k;
    size_t act = 0;
    for (int32_t l = 0; l < hp->n_layers; l++)
        if (m->layers[l].exp_gate) {
            size_t z = act_bytes(&m->layers[l], hp, (int64_t)Tc);
            act = z > act ? z : act;
        }
    c->moe_act_bytes = (act + 63) / 64 * 64;
    c->moe_probs = malloc(Tc * ne * sizeof(float));
    c->moe_sel = malloc(N * sizeof(int32_t));
    c->moe_w = malloc(N * sizeof(float));
    c->moe_start = malloc((ne + 1) * sizeof(int32_t));
    c->moe_tok = malloc(N * sizeof(int32_t));
    c->moe_tw = malloc(N * sizeof(float));
    c->moe_pos = malloc(N * sizeof(int32_t));
    c->moe_x = malloc(N * dim * sizeof(float));
    c->moe_g = malloc(N * ef * sizeof(float));
    c->moe_u = malloc(N * ef * sizeof(float));
    c->moe_acc = malloc(T * dim * sizeof(float));
    c->moe_units = malloc(ne * MAX_SPLIT * sizeof *c->moe_units);
    c->moe_act = malloc((size_t)c->n_parts * c->moe_act_bytes);
    if (!c->moe_probs || !c->moe_sel || !c->moe_w || !c->moe_start || !c->moe_tok ||
        !c->moe_tw || !c->moe_pos || !c->moe_x || !c->moe_g || !c->moe_u || !c->moe_acc ||
        !c->moe_units || !c->moe_act)
        return pl_fail(PL_ERR_NOMEM, "forward: out of memory for %d tokens of MoE scratch",
                       c->max_tokens);
    return PL_OK;
}

void pl_moe_scratch_free(pl_forward_ctx *c) {
    PL_FREE_ALL(c->moe_probs, c->moe_sel, c->moe_w, c->moe_start, c->moe_tok, c->moe_tw,
                c->moe_pos, c->moe_x, c->moe_g, c->moe_u, c->moe_acc, c->moe_units, c->moe_act);
}

typedef struct {
    pl_forward_ctx *c;
    const pl_layer_weights *L;
    const float *h;  /* the pass's first normed row */
    float *acc;      /* the pass's first output row */
    int64_t n;       /* tokens in the pass */
    int64_t n_units;
    pl_steal_slot *steal; /* NULL: each part takes its pl_split_range share of the units */
} moe_job;

/* Routing of token t (llama.cpp's softmax gating and norm_w): probabilities = softmax(router
 * logits); the k highest (the lower expert id first on a tie); their weights divided by their
 * sum (clamped below at 2^-14, GGML's guard). gpt-oss (softmax_weight): the k highest logits,
 * their weights the softmax over those k. */
static void route_token(const pl_model_hparams *hp, float *p, int32_t *sel, float *w) {
    const int32_t ne = hp->n_expert, k = hp->n_expert_used;
    const int sw = hp->moe_softmax_weight;
    float mx = p[0], sum = 0, wsum = 0;
    for (int32_t e = 1; e < ne; e++) mx = p[e] > mx ? p[e] : mx;
    for (int32_t e = 0; !sw && e < ne; e++) sum += (p[e] = expf(p[e] - mx));
    for (int32_t e = 0; !sw && e < ne; e++) p[e] /= sum;
    for (int32_t j = 0; j < k; j++) { /* k small: selection by repeated scans */
        int32_t best = -1;
        for (int32_t e = 0; e < ne; e++) {
            int taken = 0;
            for (int32_t i = 0; i < j && !taken; i++) taken = sel[i] == e;
            if (!taken && (best < 0 || p[e] > p[best])) best = e;
        }
        sel[j] = best;
        wsum += (w[j] = sw ? expf(p[best] - mx) : p[best]); /* sw: mx is the first chosen */
    }
    if (!sw && wsum < 6.103515625e-5f) wsum = 6.103515625e-5f;
    for (int32_t j = 0; j < k; j++) w[j] /= wsum;
}

static void route_job(void *ctx, int ith, int nth) {
    const moe_job *j = ctx;
    const pl_model_hparams *hp = &j->c->m->hp;
    const int64_t ne = hp->n_expert, k = hp->n_expert_used;
    int64_t t0, t1;
    pl_split_range(j->n, ith, nth, 1, &t0, &t1);
    for (int64_t t = t0; t < t1; t++)
        route_token(hp, j->c->moe_probs + t * ne, j->c->moe_sel + t * k, j->c->moe_w + t * k);
}

/* The (token, choice) pairs grouped by expert (counting sort: within an expert, tokens in
 * order) into moe_start / moe_tok / moe_tw, moe_pos[t k + j] the place of token t's choice j. */
static void group_by_expert(pl_forward_ctx *c, int64_t n) {
    const int32_t ne = c->m->hp.n_expert, k = c->m->hp.n_expert_used;
    int32_t *start = c->moe_start;
    memset(start, 0, (size_t)(ne + 1) * sizeof *start);
    for (int64_t i = 0; i < n * k; i++) start[c->moe_sel[i] + 1]++;
    for (int32_t e = 0; e < ne; e++) start[e + 1] += start[e];
    for (int64_t i = 0; i < n * k; i++) { /* start[e] advances to its end, then shifts back */
        int32_t at = start[c->moe_sel[i]]++;
        c->moe_tok[at] = (int32_t)(i / k);
        c->moe_tw[at] = c->moe_w[i];
        c->moe_pos[i] = at;
    }
    for (int32_t e = ne; e > 0; e--) start[e] = start[e - 1];
    start[0] = 0;
}

static void gather_job(void *ctx, int ith, int nth) {
    const moe_job *j = ctx;
    const int64_t dim = j->c->m->hp.dim;
    int64_t i0, i1;
    pl_split_range(j->n * j->c->m->hp.n_expert_used, ith, nth, 1, &i0, &i1);
    for (int64_t i = i0; i < i1; i++)
        memcpy(j->c->moe_x + i * dim, j->h + (int64_t)j->c->moe_tok[i] * dim,
               (size_t)dim * sizeof(float));
}

/* Experts with at least one token in the pass (after group_by_expert). */
static int32_t active_experts(const pl_forward_ctx *c) {
    int32_t active = 0;
    for (int32_t e = 0; e < c->m->hp.n_expert; e++) active += c->moe_start[e + 1] > c->moe_start[e];
    return active;
}

/* The units of every active expert: whole experts when each thread gets at least two, else
 * each expert cut into `split` blocks of rows (multiples of ROW_ALIGN). */
static int64_t plan_units(pl_forward_ctx *c, int64_t rows, int nth) {
    const int32_t ne = c->m->hp.n_expert, active = active_experts(c);
    int64_t split = nth > 1 && active < 2 * nth ? (2 * nth + active - 1) / active : 1;
    if (split > MAX_SPLIT) split = MAX_SPLIT;
    int64_t block = (rows + split - 1) / split;
    block = split > 1 ? (block + ROW_ALIGN - 1) / ROW_ALIGN * ROW_ALIGN : rows;
    int64_t n = 0;
    for (int32_t e = 0; e < ne; e++) {
        if (c->moe_start[e + 1] == c->moe_start[e]) continue;
        for (int64_t r = 0; r < rows; r += block)
            c->moe_units[n++] = (pl_moe_unit){e, (int32_t)r, (int32_t)(r + block < rows ? r + block : rows)};
    }
    return n;
}

/* Rows [r0, r1) of w as a weight of their own (a repacked weight's rows are interleaved in
 * groups of 16, a group 16 times its own row size; r0 is a multiple of ROW_ALIGN). */
static pl_weight weight_rows(const pl_weight *w, int64_t r0, int64_t r1) {
    pl_weight v = *w;
    size_t row = pl_dtype_row_size(w->type, w->cols);
    if (w->layout == PL_WLAYOUT_X16) {
        pl_weight group = {.type = w->type, .rows = 16, .cols = w->cols};
        row = pl_matmul_repack_size(&group) / 16;
    }
    v.data = (const char *)w->data + (size_t)r0 * row;
    v.rows = r1 - r0;
    return v;
}

/* Rows [r0, r0 + w) of the n outputs y (stride `stride`) times expert e's scale s[e] (s NULL:
 * none; llama.cpp's per-expert scale multiplies the expert's matmul output). */
static void scale_rows(const float *s, int64_t e, float *y, int64_t n, int64_t stride, int64_t w) {
    for (int64_t i = 0; s && i < n; i++)
        for (int64_t r = 0; r < w; r++) y[i * stride + r] *= s[e];
}

/* Unit u of the gate/up phase: expert e's gate and up rows [r0, r1) over its tokens, then the
 * per-expert scales, the biases (gpt-oss) and the SwiGLU (gemma4: GeGLU) on those rows. */
static void gate_up_unit(const moe_job *j, const pl_moe_unit *u, void *act) {
    pl_forward_ctx *c = j->c;
    const pl_layer_weights *L = j->L;
    const pl_model_hparams *hp = &c->m->hp;
    const int64_t dim = hp->dim, ef = hp->expert_ffn, e = u->e, r0 = u->r0, w = u->r1 - u->r0;
    const int64_t s0 = c->moe_start[e], n = c->moe_start[e + 1] - s0;
    const float *x = c->moe_x + s0 * dim;
    float *g = c->moe_g + s0 * ef, *up = c->moe_u + s0 * ef;
    if (w == ef) { /* the whole expert: its tokens converted once for both */
        const pl_weight *gu[2] = {&L->exp_gate[e], &L->exp_up[e]};
        float *out[2] = {g, up};
        pl_matmul_multi(NULL, gu, out, 2, x, n, act);
    } else {
        pl_weight gv = weight_rows(&L->exp_gate[e], r0, u->r1);
        pl_weight uv = weight_rows(&L->exp_up[e], r0, u->r1);
        pl_matmul(NULL, &gv, x, n, g + r0, ef, act);
        pl_matmul(NULL, &uv, x, n, up + r0, ef, act);
    }
    /* elementwise: the rows' values do not depend on how they are cut */
    const int64_t rows = w == ef ? 1 : n, len = w == ef ? n * ef : w;
    scale_rows(L->exp_gate_s, e, g + r0, n, ef, w);
    scale_rows(L->exp_up_s, e, up + r0, n, ef, w);
    for (int64_t i = 0; L->exp_gate_b && i < n; i++) { /* gpt-oss: the experts' biases */
        pl_add_bias(g + i * ef + r0, L->exp_gate_b + e * ef + r0, 1, w);
        pl_add_bias(up + i * ef + r0, L->exp_up_b + e * ef + r0, 1, w);
    }
    for (int64_t i = 0; i < rows; i++) {
        float *gi = g + i * ef + r0, *ui = up + i * ef + r0;
        if (hp->swiglu_limit > 0)
            pl_swiglu_oai(gi, ui, len, hp->swiglu_alpha, hp->swiglu_limit);
        else if (hp->moe_geglu)
            pl_geglu(NULL, gi, ui, 1, len);
        else
            pl_swiglu(NULL, gi, ui, 1, len);
    }
}

/* Unit u of the down phase: expert e's down rows [r0, r1) over its tokens into x (times its
 * scale, + bias). */
static void down_unit(const moe_job *j, const pl_moe_unit *u, void *act) {
    pl_forward_ctx *c = j->c;
    const pl_layer_weights *L = j->L;
    const int64_t dim = c->m->hp.dim, ef = c->m->hp.expert_ffn, e = u->e, r0 = u->r0;
    const int64_t s0 = c->moe_start[e], n = c->moe_start[e + 1] - s0;
    float *y = c->moe_x + s0 * dim;
    pl_weight dv = weight_rows(&L->exp_down[e], r0, u->r1);
    pl_matmul(NULL, &dv, c->moe_g + s0 * ef, n, y + r0, dim, act);
    scale_rows(L->exp_down_s, e, y + r0, n, dim, u->r1 - r0);
    for (int64_t i = 0; L->exp_down_b && i < n; i++)
        pl_add_bias(y + i * dim + r0, L->exp_down_b + e * dim + r0, 1, u->r1 - r0);
}

static void run_units(const moe_job *j, int ith, int nth,
                      void (*unit)(const moe_job *, const pl_moe_unit *, void *)) {
    void *act = (char *)j->c->moe_act + (size_t)ith * j->c->moe_act_bytes;
    int64_t u0, u1;
    if (!j->steal) {
        pl_split_range(j->n_units, ith, nth, 1, &u0, &u1);
        for (int64_t u = u0; u < u1; u++) unit(j, &j->c->moe_units[u], act);
        return;
    }
    while (pl_steal_next(j->steal, ith, nth, &u0, &u1))
        for (int64_t u = u0; u < u1; u++) unit(j, &j->c->moe_units[u], act);
}

static void gate_up_job(void *ctx, int ith, int nth) { run_units(ctx, ith, nth, gate_up_unit); }
static void down_job(void *ctx, int ith, int nth) { run_units(ctx, ith, nth, down_unit); }

/* acc[t] = sum over token t's experts, in id order, of weight * output (0 + the first ...). */
static void sum_job(void *ctx, int ith, int nth) {
    const moe_job *j = ctx;
    const pl_forward_ctx *c = j->c;
    const int64_t dim = c->m->hp.dim, k = c->m->hp.n_expert_used;
    int64_t t0, t1;
    pl_split_range(j->n, ith, nth, 1, &t0, &t1);
    for (int64_t t = t0; t < t1; t++) {
        int32_t *pos = c->moe_pos + t * k; /* token t's places, sorted: expert order */
        for (int64_t a = 1; a < k; a++) {
            int32_t p = pos[a];
            int64_t b = a;
            for (; b > 0 && pos[b - 1] > p; b--) pos[b] = pos[b - 1];
            pos[b] = p;
        }
        float *acc = j->acc + t * dim;
        memset(acc, 0, (size_t)dim * sizeof(float));
        for (int64_t a = 0; a < k; a++) {
            const float *y = c->moe_x + (int64_t)pos[a] * dim, w = c->moe_tw[pos[a]];
            for (int64_t d = 0; d < dim; d++) acc[d] += w * y[d];
        }
    }
}

/* One phase of units over the pool: each part steals when its share is done. */
static void run_phase(pl_forward_ctx *c, moe_job *j, pl_job_fn fn) {
    pl_steal_slot slots[PL_STEAL_MAX];
    const int nth = pl_threadpool_size(c->tp);
    j->steal = NULL;
    if (nth > 1 && nth <= PL_STEAL_MAX) {
        pl_steal_init(slots, nth, j->n_units);
        j->steal = slots;
    }
    pl_threadpool_run(c->tp, fn, j);
}

/* The weight bytes of the pass's active experts (gate, up, down; GGUF's sizes). */
static double expert_bytes(const pl_forward_ctx *c, const pl_layer_weights *L) {
    const pl_weight *w[3] = {&L->exp_gate[0], &L->exp_up[0], &L->exp_down[0]};
    double per = 0;
    for (int i = 0; i < 3; i++) per += (double)w[i]->rows * (double)pl_dtype_row_size(w[i]->type, w[i]->cols);
    return per * active_experts(c);
}

double pl_forward_moe_bytes(const pl_forward_ctx *c) { return c->moe_bytes; }

/* A pass over tokens [t0, t0 + n) of c->h into c->moe_acc, the router reading route[n][dim]. */
static void moe_pass(pl_forward_ctx *c, const pl_layer_weights *L, const float *route,
                     int64_t t0, int64_t n) {
    const pl_model_hparams *hp = &c->m->hp;
    const int64_t dim = hp->dim;
    const int nth = pl_threadpool_size(c->tp);
    pl_threadpool *small = n <= SMALL_T ? NULL : c->tp; /* a few tokens: inline */
    moe_job j = {.c = c, .L = L, .h = c->h + t0 * dim, .acc = c->moe_acc + t0 * dim, .n = n};
    pl_matmul(c->tp, &L->gate_inp, route, n, c->moe_probs, hp->n_expert, c->mm_scratch);
    if (L->gate_inp_b) pl_add_bias(c->moe_probs, L->gate_inp_b, n, hp->n_expert);
    pl_threadpool_run(small, route_job, &j);
    group_by_expert(c, n);
    c->moe_bytes += expert_bytes(c, L);
    pl_threadpool_run(small, gather_job, &j);
    j.n_units = plan_units(c, hp->expert_ffn, nth);
    run_phase(c, &j, gate_up_job);
    j.n_units = plan_units(c, dim, nth);
    run_phase(c, &j, down_job);
    pl_threadpool_run(small, sum_job, &j);
}

void pl_moe_ffn(pl_forward_ctx *c, const pl_layer_weights *L, int64_t T) {
    const pl_model_hparams *hp = &c->m->hp;
    const int64_t dim = hp->dim;
    const float *route = c->h;
    if (L->gate_inp_s) { /* gemma4: the router reads x through its own scale, kept in moe_acc:
                            a pass reads its rows there before its sum overwrites them */
        pl_rmsnorm(c->tp, c->moe_acc, c->x, L->gate_inp_s, T, dim, hp->norm_eps);
        route = c->moe_acc;
    }
    if (L->moe_pre_norm) pl_rmsnorm(c->tp, c->h, c->x, L->moe_pre_norm, T, dim, hp->norm_eps);
    for (int64_t t0 = 0; t0 < T; t0 += MOE_CHUNK)
        moe_pass(c, L, route + t0 * dim, t0, T - t0 < MOE_CHUNK ? T - t0 : MOE_CHUNK);
}

void pl_moe_add_shared(pl_forward_ctx *c, const pl_layer_weights *L, int64_t T) {
    const pl_model_hparams *hp = &c->m->hp;
    pl_rmsnorm(c->tp, c->moe_acc, c->moe_acc, L->moe_post_norm, T, hp->dim, hp->norm_eps);
    pl_rmsnorm(c->tp, c->h, c->h, L->shexp_post_norm, T, hp->dim, hp->norm_eps);
    pl_add(c->h, c->moe_acc, T * hp->dim);
}
