/* engine/decoder — see decoder.h. What happens to a step's logits: the decoding algorithms as operations on
 * sequences (the paper's section 4.4):
 *
 *   - sampling (n, best_of): after the prompt's logits, the one prompt sequence is forked into
 *     best_of sequences that share every prompt block (ref counts; the partly filled last block
 *     is copied on write by the KV manager when a sibling first appends);
 *   - beam search: every step the 2W best (beam, token) candidates by cumulative log-probability
 *     become children; the best W unfinished ones continue, reusing their parent's sequence for
 *     the first child and forking it (sharing all blocks) for the others; parents with no child
 *     are freed, so their blocks return to the pool unless a survivor shares them (Figure 9);
 *   - stopping: EOS (unless ignore_eos), stop token ids, stop strings, max_tokens, the model
 *     length; nothing but the length limits before min_tokens.
 *
 * Streamed outputs (sampling with best_of == n) leave as deltas every step; best_of > n and beam
 * search deliver their n best completions when the request ends.
 */
#include "engine/decoder.h"
#include "base/buf.h"

#include "base/status.h"
#include "base/clock.h"
#include "kv/cache.h"
#include "engine/stop.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int streams(const pl_seq_group *g);

/* A decoder-owned buffer of at least `bytes` (grown, never shrunk): beam search's per-step
 * arrays, so a step allocates only when a request needs more than any before it. */
static void *scratch(pl_decoder *d, int slot, size_t bytes) {
    if (d->scratch_cap[slot] < bytes) {
        void *p = realloc(d->scratch[slot], bytes);
        if (!p) return NULL;
        d->scratch[slot] = p;
        d->scratch_cap[slot] = bytes;
    }
    return d->scratch[slot];
}

pl_status pl_decoder_init(pl_decoder *d, const pl_decoder_config *c) {
    const pl_tokenizer *tok = c->tok;
    const int32_t n_vocab = c->n_vocab, max_items = c->max_items;
    *d = (pl_decoder){.tok = tok, .kv = c->kv, .drop = c->drop, .drop_ctx = c->drop_ctx,
                      .n_vocab = n_vocab, .max_model_len = c->max_model_len, .embd = c->embd,
                      .n_embd = c->n_embd, .max_finished = max_items};
    d->step_groups = malloc((size_t)max_items * sizeof *d->step_groups);
    d->finished = malloc((size_t)max_items * sizeof *d->finished);
    d->work = malloc((size_t)n_vocab * sizeof *d->work);
    d->eog_ids = malloc((size_t)n_vocab * sizeof *d->eog_ids);
    d->piece_cap = PL_DETOK_CAP(pl_tokenizer_max_piece_len(tok));
    d->piece = malloc(d->piece_cap);
    d->sampler = pl_sampler_create(n_vocab);
    d->cons = pl_cons_registry_create(tok);
    if (!d->step_groups || !d->finished || !d->work || !d->eog_ids || !d->piece || !d->sampler || !d->cons) {
        pl_decoder_destroy(d);
        return pl_fail(PL_ERR_NOMEM, "out of memory for the decoder (vocab %d)", n_vocab);
    }
    for (int32_t i = 0; i < n_vocab; i++)
        if (pl_tokenizer_is_eog(tok, i)) d->eog_ids[d->n_eog++] = i;
    return PL_OK;
}

void pl_decoder_stats(const pl_decoder *d, pl_engine_stats *s) {
    s->prompt_tokens = d->prompt_tokens;
    s->generation_tokens = d->generation_tokens;
    s->constrained_tokens = d->constrained_tokens;
    s->constrain_seconds = d->constrain_seconds;
    pl_cons_stats cs;
    pl_cons_get_stats(d->cons, &cs);
    s->constrain_mask_misses = cs.mask_misses;
    s->requests_finished = d->requests_finished;
    s->spec_drafts = d->spec_drafts;
    s->spec_draft_tokens = d->spec_draft_tokens;
    s->spec_accepted_tokens = d->spec_accepted_tokens;
}

void pl_decoder_destroy(pl_decoder *d) {
    pl_sampler_destroy(d->sampler);
    pl_cons_registry_destroy(d->cons);
    PL_FREE_ALL(d->step_groups, d->finished, d->work, d->eog_ids, d->piece);
    for (int i = 0; i < PL_DECODER_SCRATCH; i++) free(d->scratch[i]);
    memset(d, 0, sizeof *d);
}

/* ---- text and stopping ---- */

/* Out of memory marks the group: the decoder ends it with an error after this step's sampling
 * (one failure policy: a failed allocation fails the request, never the process). */
static void text_append(pl_seq *q, const char *s, size_t n) {
    if (pl_array_reserve(&q->text, &q->text_cap, q->text_len + n + 1, 1)) {
        q->group->oom = 1;
        return;
    }
    memcpy(q->text + q->text_len, s, n);
    q->text_len += n;
}

static int is_stop_id(const pl_seq_group *g, int32_t id) {
    for (int32_t i = 0; i < g->params.n_stop_token_ids; i++)
        if (g->params.stop_token_ids[i] == id) return 1;
    return 0;
}

static void seq_finish(pl_decoder *d, pl_seq *q, pl_finish_reason why) {
    if (q->status == PL_SEQ_FINISHED) return;
    if (!q->stop_str) text_append(q, d->piece, pl_detok_flush(&q->detok, d->piece, d->piece_cap));
    q->text_safe = q->text_len;
    q->finish = why;
    q->status = PL_SEQ_FINISHED;
    pl_kv_cache_free(d->kv, &q->table, &q->table_w);
    if (d->drop) d->drop(d->drop_ctx, q);
    q->group->n_live--;
}

/* The text and stop checks after token id was appended to q (vLLM's stop checker order). */
static void check_stop(pl_decoder *d, pl_seq *q, int32_t id) {
    pl_seq_group *g = q->group;
    const pl_request_params *p = &g->params;
    int32_t n_out = q->n_tokens - g->n_prompt;
    int eos = !p->ignore_eos && pl_tokenizer_is_eog(d->tok, id);
    int stop_id = is_stop_id(g, id);
    if (n_out >= p->min_tokens && (eos || stop_id)) {
        if (p->include_stop_str_in_output) {
            text_append(q, d->piece, pl_detok_push(&q->detok, id, d->piece, d->piece_cap));
        }
        q->stop_token = id;
        seq_finish(d, q, PL_FINISH_STOP);
        return;
    }
    size_t n = pl_detok_push(&q->detok, id, d->piece, d->piece_cap);
    text_append(q, d->piece, n);
    if (p->n_stop > 0) {
        pl_stop_result r = pl_stop_scan(q->text, q->text_len, n, p->stop, p->n_stop);
        if (r.found && n_out >= p->min_tokens) {
            q->text_len = p->include_stop_str_in_output ? r.match_at + r.match_len : r.match_at;
            q->stop_str = p->stop[r.which];
            seq_finish(d, q, PL_FINISH_STOP);
            return;
        }
        q->text_safe = r.found ? r.match_at : r.safe_len;
    } else {
        q->text_safe = q->text_len;
    }
    if (n_out >= p->max_tokens || q->n_tokens >= d->max_model_len) seq_finish(d, q, PL_FINISH_LENGTH);
}

/* Append token id (with its raw logprob and top list) to q. */
static void seq_push(pl_decoder *d, pl_seq *q, int32_t id, float lp, const pl_token_logprob *top) {
    pl_seq_group *g = q->group;
    int32_t k = q->n_tokens - g->n_prompt;
    PL_ASSERT(q->n_tokens < q->cap && k < q->out_cap);
    q->tokens[q->n_tokens++] = id;
    q->logprobs[k] = lp;
    if (q->top && top) {
        size_t w = (size_t)n_top_of(g) + 1;
        memcpy(q->top + (size_t)k * w, top, w * sizeof *top);
    }
    q->cum_logprob += lp;
    d->generation_tokens++;
    if (g->first_token == 0) g->first_token = pl_clock_now();
}

/* The raw log-probability of id and, when asked, the top list (top n, then id) of q's logits. */
static float token_logprobs(pl_decoder *d, const pl_seq_group *g, const float *logits,
                            int32_t id, pl_token_logprob *top) {
    int32_t k = n_top_of(g);
    float lp = 0;
    pl_top_logprobs(d->sampler, logits, g->params.logprobs >= 0 ? k : 0, top, id, &lp);
    if (g->params.logprobs >= 0) {
        top[k].id = id;
        top[k].logprob = lp;
    }
    return lp;
}

/* Structured output: mask the tokens q's constraint does not allow (EOS only in an accepting
 * state). 0 when q cannot go on: it finished (no token can continue the match; rare, e.g. a
 * vocabulary that cannot spell what the constraint needs) or its group is marked (no memory). */
static int constrain(pl_decoder *d, pl_seq *q, float *work) {
    int32_t n_allowed = 0;
    const uint64_t *m = pl_cons_mask(d->cons, q->group->cons, &q->cstate, &n_allowed);
    if (!m) {
        q->group->oom = 1;
        q->group->cons_ambiguous = strstr(pl_last_error(), "ambiguous") != NULL;
        return 0;
    }
    if (n_allowed == 0) {
        seq_finish(d, q, PL_FINISH_STOP);
        return 0;
    }
    const int32_t V = d->n_vocab;
    for (int32_t w = 0; w * 64 < V; w++) {
        uint64_t off = ~m[w];
        while (off) {
            int32_t id = w * 64 + __builtin_ctzll(off);
            off &= off - 1;
            if (id < V) work[id] = -INFINITY;
        }
    }
    return 1;
}

static int any_finite(const float *x, int32_t n) {
    for (int32_t i = 0; i < n; i++)
        if (x[i] > -INFINITY) return 1;
    return 0;
}

/* Whether ids[0..n) end with pat[0..m) at position `at` (the match is ids[at - m .. at)). */
static int ends_with(const int32_t *ids, int32_t at, const int32_t *pat, int32_t m) {
    return at >= m && !memcmp(ids + at - m, pat, (size_t)m * sizeof *pat);
}

/* force_end: the id to put in place of q's next sampled token, or -1. Read from the output
 * alone (no state to keep through preemption, recompute, forks or speculation): the last
 * complete open or close tag decides whether the region is open; inside it, once `after` tokens
 * were generated, the close tag is written, continuing a prefix of it the output already ends
 * with. */
static int32_t forced_next(const pl_seq *q) {
    const pl_seq_group *g = q->group;
    const pl_force_end *f = &g->params.force_end;
    if (!f->n_close) return -1;
    const int32_t *out = q->tokens + g->n_prompt;
    const int32_t n_out = q->n_tokens - g->n_prompt;
    int32_t start = -1; /* first output position inside the open region */
    for (int32_t at = n_out; at > 0 && start < 0; at--) {
        if (ends_with(out, at, f->close, f->n_close)) return -1;
        if (ends_with(out, at, f->open, f->n_open)) start = at;
    }
    if (start < 0) {
        if (!f->open_in_prompt) return -1;
        start = 0;
    }
    if (n_out - start < f->after) return -1;
    /* the longest proper prefix of close the region's tail already spells */
    int32_t m = f->n_close - 1 < n_out - start ? f->n_close - 1 : n_out - start;
    while (m > 0 && !ends_with(out, n_out, f->close, m)) m--;
    return f->close[m];
}

/* Sample q's next token from its logits row (or take the one force_end puts there) and apply
 * the stop checks. */
static void sample_seq(pl_decoder *d, pl_seq *q, const float *logits) {
    pl_seq_group *g = q->group;
    const int32_t V = d->n_vocab;
    float *work = d->work;
    int32_t n_out = q->n_tokens - g->n_prompt;
    int32_t forced = forced_next(q);
    if (forced >= 0) {
        pl_token_logprob top[1025];
        float lp = g->params.logprobs >= 0 || !streams(g) ? token_logprobs(d, g, logits, forced, top)
                                                          : NAN;
        seq_push(d, q, forced, lp, top);
        q->forced[n_out] = 1;
        if (g->cons) {
            int r = pl_cons_advance(d->cons, g->cons, &q->cstate, forced);
            if (r != 1) {
                g->oom = 1;
                g->cons_ambiguous = r < 0 && strstr(pl_last_error(), "ambiguous") != NULL;
                g->cons_forced = r >= 0;
            }
            d->constrained_tokens++;
        }
        check_stop(d, q, forced);
        return;
    }
    memcpy(work, logits, (size_t)V * sizeof *work);
    double t0 = g->cons ? pl_clock_now() : 0;
    if (g->cons && !constrain(d, q, work)) return;
    if (g->cons) d->constrain_seconds += pl_clock_now() - t0;
    if (n_out < g->params.min_tokens) { /* EOS and stop ids cannot be chosen yet */
        if (!g->params.ignore_eos)
            for (int32_t i = 0; i < d->n_eog; i++) work[d->eog_ids[i]] = -INFINITY;
        for (int32_t i = 0; i < g->params.n_stop_token_ids; i++)
            work[g->params.stop_token_ids[i]] = -INFINITY;
        if (g->cons && !any_finite(work, V)) { /* only EOS was allowed */
            seq_finish(d, q, PL_FINISH_STOP);
            return;
        }
    }
    int32_t id = pl_sample(d->sampler, &g->params.sampling, work, g->prompt, g->n_prompt,
                           q->tokens + g->n_prompt, n_out, &q->rng);
    /* The chosen token's log-probability costs a pass over the vocabulary: only when asked or
     * when best_of ranks by it (as vLLM, the cumulative log-probability is NaN otherwise). */
    pl_token_logprob top[1025];
    float lp = g->params.logprobs >= 0 || !streams(g) ? token_logprobs(d, g, logits, id, top) : NAN;
    seq_push(d, q, id, lp, top);
    if (g->cons) {
        t0 = pl_clock_now();
        if (pl_cons_advance(d->cons, g->cons, &q->cstate, id) != 1) {
            g->oom = 1;
            g->cons_ambiguous = strstr(pl_last_error(), "ambiguous") != NULL;
        }
        d->constrain_seconds += pl_clock_now() - t0;
        d->constrained_tokens++;
    }
    check_stop(d, q, id);
}

/* Speculative decoding's verification (issue 15). Row j of q's logits saw the proposals before
 * j; it is sampled exactly as a normal decode would sample that position (same sampler, the
 * sequence's own RNG, penalties over the tokens accepted so far) and the proposal stands while
 * the sampled token equals it. Greedy: the longest prefix equal to the target's argmax plus the
 * target's next token. Sampling: both proposers propose one token (q is a point mass), for which
 * the rejection rule (accept with min(1, p/q) = p(d), else draw from (p - q)+ normalised = p
 * without d) is the same law as "draw x ~ p, accept iff x == d, else emit x"; drawing it that
 * way makes a seeded request's tokens identical with and without speculation, so they never
 * depend on batch composition or on speculation turning off. Then the table is rolled back to
 * the computed tokens and only those are committed to the prefix cache. */
static pl_status verify_seq(pl_decoder *d, pl_seq *q) {
    const int32_t V = d->n_vocab, k = q->n_spec, n0 = q->n_tokens;
    int32_t draft[PL_MAX_SPECULATIVE_TOKENS];
    PL_ASSERT(k <= PL_MAX_SPECULATIVE_TOKENS);
    memcpy(draft, q->tokens + n0, (size_t)k * sizeof *draft);
    int32_t acc = 0;
    for (int32_t j = 0; j <= k; j++) {
        sample_seq(d, q, d->logits + (size_t)(q->logits_row + j) * V);
        int hit = j < k && q->tokens[n0 + j] == draft[j];
        acc += hit;
        if (!hit || q->status == PL_SEQ_FINISHED) break;
    }
    q->n_spec = 0;
    d->spec_drafts++;
    d->spec_draft_tokens += (uint64_t)k;
    d->spec_accepted_tokens += (uint64_t)acc;
    if (q->status == PL_SEQ_FINISHED) return PL_OK; /* its blocks went back at the finish */
    q->n_computed = q->n_tokens - 1;
    PL_TRY(pl_kv_cache_truncate(d->kv, &q->table, &q->table_w, q->n_computed));
    return pl_kv_cache_commit(d->kv, &q->table, &q->table_w, q->tokens, q->n_computed);
}

/* Derive sequence i's RNG from the request seed (i = 0 uses the seed itself, so n = 1 requests
 * reproduce `generate --seed`). */
static void seed_seq(pl_seq *q, const pl_seq_group *g, uint64_t fallback) {
    uint64_t s = g->params.has_seed ? g->params.seed : fallback;
    pl_rng_seed(&q->rng, q->index == 0 ? s : s ^ (0x9e3779b97f4a7c15ULL * (uint64_t)q->index));
}

/* After the prompt's logits: fork the prompt sequence into best_of sequences, then sample each. */
static pl_status first_sample(pl_decoder *d, pl_seq_group *g, const float *logits) {
    pl_seq *parent = g->seqs[0];
    int32_t k = pl_group_max_seqs(g);
    for (int32_t i = 1; i < k; i++) {
        pl_seq *c = pl_seq_clone(parent, i);
        if (!c || pl_group_add_seq(g, c)) {
            pl_seq_destroy(c);
            return pl_fail(PL_ERR_NOMEM, "request %llu: out of memory forking sequences",
                           (unsigned long long)g->id);
        }
        seed_seq(c, g, pl_rng_next(&parent->rng));
        pl_status st = pl_kv_cache_fork(d->kv, &parent->table, &parent->table_w, &c->table,
                                        &c->table_w);
        if (st != PL_OK) return st;
        g->n_live++;
    }
    for (int32_t i = 0; i < k; i++) sample_seq(d, g->seqs[i], logits);
    return PL_OK;
}

/* ---- beam search (vLLM v0's rules, themselves Hugging Face's) ---- */

typedef struct {
    pl_seq *parent;
    int32_t parent_rank; /* position of the parent among the live beams (tie order) */
    int32_t token;
    float lp;            /* raw logprob of token */
    double cum;          /* parent cum + lp */
    int finished;        /* the child ends here (EOS / stop id / length) */
    pl_finish_reason why;
    double score;        /* cum / len^length_penalty */
} beam_cand;

/* Beam score: cumulative logprob over (prompt + output length)^length_penalty, where a final
 * EOS does not count towards the length (as vLLM v0 and Hugging Face). */
static double beam_score(double cum, int32_t len, int ends_eos, float length_penalty) {
    if (ends_eos) len--;
    if (len < 1) len = 1;
    return cum / pow((double)len, (double)length_penalty);
}

static int cmp_cand(const void *a, const void *b) {
    const beam_cand *x = a, *y = b;
    if (x->cum != y->cum) return x->cum > y->cum ? -1 : 1;
    if (x->parent_rank != y->parent_rank) return x->parent_rank - y->parent_rank;
    return (x->token > y->token) - (x->token < y->token);
}

static int cmp_score(const void *a, const void *b) {
    const beam_cand *x = a, *y = b;
    if (x->score != y->score) return x->score > y->score ? -1 : 1;
    return cmp_cand(a, b);
}

static double seq_beam_score(const pl_decoder *d, const pl_seq *q) {
    int ends = q->n_tokens > q->group->n_prompt &&
               pl_tokenizer_is_eog(d->tok, q->tokens[q->n_tokens - 1]);
    return beam_score(q->cum_logprob, q->n_tokens, ends, q->group->params.length_penalty);
}

static int cmp_done(const void *a, const void *b, void *ctx) {
    const pl_decoder *d = ctx;
    double x = seq_beam_score(d, *(pl_seq *const *)a), y = seq_beam_score(d, *(pl_seq *const *)b);
    return x > y ? -1 : x < y ? 1 : 0;
}

/* Keep the W best finished hypotheses. */
static void beam_done_add(pl_decoder *d, pl_seq_group *g, pl_seq *q) {
    if (pl_array_reserve(&g->beam_done, &g->beam_done_cap, (size_t)g->n_beam_done + 1,
                         sizeof *g->beam_done)) {
        g->oom = 1;
        pl_seq_destroy(q);
        return;
    }
    g->beam_done[g->n_beam_done++] = q;
    qsort_r(g->beam_done, (size_t)g->n_beam_done, sizeof *g->beam_done, cmp_done, d);
    int32_t W = pl_group_max_seqs(g);
    while (g->n_beam_done > W) pl_seq_destroy(g->beam_done[--g->n_beam_done]);
}

/* A running beam with tables that no kept child continues (it is dropped at the end of the
 * step), or NULL. */
static pl_seq *dropped_beam(pl_seq_group *g, const beam_cand *run, int32_t keep) {
    for (int32_t i = 0; i < g->n_seqs; i++) {
        pl_seq *q = g->seqs[i];
        int kept = 0;
        for (int32_t j = 0; j < keep && !kept; j++) kept = run[j].parent == q;
        if (!kept && q->table.live) return q;
    }
    return NULL;
}

static pl_status beam_step(pl_decoder *d, pl_seq_group *g) {
    const int32_t V = d->n_vocab;
    const pl_request_params *p = &g->params;
    const int32_t W = pl_group_max_seqs(g), K = 2 * W < V ? 2 * W : V;
    int32_t n_beams = 0;
    for (int32_t i = 0; i < g->n_seqs; i++)
        if (g->seqs[i]->status == PL_SEQ_RUNNING && g->seqs[i]->logits_row >= 0) n_beams++;
    /* Before min_tokens, EOS and the stop ids cannot be chosen (as the sampler masks them): ask
     * for that many more of the top tokens and skip them. */
    const int32_t n_masked = (p->ignore_eos ? 0 : d->n_eog) + p->n_stop_token_ids;
    const int32_t K_top = K + n_masked < V ? K + n_masked : V;
    beam_cand *cand = scratch(d, SCR_CAND, (size_t)(n_beams * K) * sizeof *cand);
    pl_token_logprob *top = scratch(d, SCR_TOP, (size_t)K_top * sizeof *top);
    if (!cand || !top) return pl_fail(PL_ERR_NOMEM, "beam search: out of memory");
    int32_t nc = 0, rank = 0;
    for (int32_t i = 0; i < g->n_seqs; i++) {
        pl_seq *q = g->seqs[i];
        if (q->status != PL_SEQ_RUNNING || q->logits_row < 0) continue;
        const float *lg = d->logits + (size_t)q->logits_row * V;
        int32_t n_out = q->n_tokens - g->n_prompt, masking = n_out < p->min_tokens;
        pl_top_logprobs(d->sampler, lg, masking ? K_top : K, top, -1, NULL);
        for (int32_t k = 0, taken = 0; k < (masking ? K_top : K) && taken < K; k++) {
            if (masking && ((!p->ignore_eos && pl_tokenizer_is_eog(d->tok, top[k].id)) ||
                            is_stop_id(g, top[k].id)))
                continue;
            taken++;
            beam_cand *c = &cand[nc++];
            c->parent = q;
            c->parent_rank = rank;
            c->token = top[k].id;
            c->lp = top[k].logprob;
            c->cum = q->cum_logprob + top[k].logprob;
            int eos = !p->ignore_eos && pl_tokenizer_is_eog(d->tok, c->token);
            int stop = (eos || is_stop_id(g, c->token)) && n_out + 1 >= p->min_tokens;
            c->finished = stop || n_out + 1 >= p->max_tokens || q->n_tokens + 1 >= d->max_model_len;
            c->why = stop ? PL_FINISH_STOP : PL_FINISH_LENGTH;
            c->score = beam_score(c->cum, q->n_tokens + 1,
                                  pl_tokenizer_is_eog(d->tok, c->token), p->length_penalty);
        }
        rank++;
    }
    /* The 2W best children by cumulative logprob. */
    qsort(cand, (size_t)nc, sizeof *cand, cmp_cand);
    if (nc > 2 * W) nc = 2 * W;

    /* Finished children become hypotheses; the others are ranked by score. */
    beam_cand *run = scratch(d, SCR_RUN, (size_t)(nc > 0 ? nc : 1) * sizeof *run);
    if (!run) return pl_fail(PL_ERR_NOMEM, "beam search: out of memory");
    int32_t n_run = 0;
    for (int32_t i = 0; i < nc; i++) {
        if (!cand[i].finished) {
            run[n_run++] = cand[i];
            continue;
        }
        pl_seq *h = pl_seq_clone(cand[i].parent, -1);
        if (!h) {
            g->oom = 1;
            continue;
        }
        h->status = PL_SEQ_FINISHED;
        seq_push(d, h, cand[i].token, cand[i].lp, NULL);
        h->finish = cand[i].why;
        if (cand[i].why == PL_FINISH_STOP) h->stop_token = cand[i].token;
        beam_done_add(d, g, h);
    }
    qsort(run, (size_t)n_run, sizeof *run, cmp_score);
    int stop;
    if (n_run == 0) stop = 1;
    else if (g->n_beam_done < W) stop = 0;
    else if (p->early_stopping) stop = 1;
    else {
        /* Heuristic: stop when the best running beam cannot beat the worst kept hypothesis. */
        double worst = seq_beam_score(d, g->beam_done[W - 1]);
        stop = worst >= run[0].score;
    }
    int32_t keep = stop ? 0 : (n_run < W ? n_run : W);

    /* Materialise the kept children: the first child of a parent takes over the parent; later
     * children fork it before it appends (sharing every block), into the tables of a beam no
     * kept child continues when there is one (vAttention then remaps only the pages that differ,
     * where a fresh fork maps the whole history and the dropped beam unmaps it). Nothing else of
     * the group changes until every fork exists: a failure undoes the forks and fails the step
     * (the engine then ends the step's requests with the error). */
    pl_seq **next = scratch(d, SCR_NEXT, (size_t)(keep > 0 ? keep : 1) * sizeof *next);
    uint8_t *used = scratch(d, SCR_USED, (size_t)(rank > 0 ? rank : 1));
    if (!next || !used) return pl_fail(PL_ERR_NOMEM, "beam search: out of memory");
    memset(used, 0, (size_t)(rank > 0 ? rank : 1));
    pl_status st = PL_OK;
    int32_t made = 0;
    for (; made < keep; made++) {
        beam_cand *c = &run[made];
        if (!used[c->parent_rank]) {
            used[c->parent_rank] = 1;
            next[made] = NULL; /* takes over the parent, below */
            continue;
        }
        pl_seq *f = pl_seq_clone(c->parent, 0);
        if (!f) {
            st = pl_fail(PL_ERR_NOMEM, "beam search: out of memory");
            break;
        }
        pl_seq *gone = dropped_beam(g, run, keep);
        if (gone) { /* its tables move to f (it is dropped below, holding none) */
            f->table = gone->table, f->table_w = gone->table_w;
            memset(&gone->table, 0, sizeof gone->table);
            memset(&gone->table_w, 0, sizeof gone->table_w);
        }
        if ((st = (gone ? pl_kv_cache_refork : pl_kv_cache_fork)(
                 d->kv, &c->parent->table, &c->parent->table_w, &f->table, &f->table_w)) != PL_OK) {
            pl_seq_destroy(f);
            break;
        }
        next[made] = f;
    }
    if (st == PL_OK && pl_array_reserve(&g->seqs, &g->seqs_cap, (size_t)keep, sizeof *g->seqs))
        st = pl_fail(PL_ERR_NOMEM, "beam search: out of memory");
    if (st != PL_OK) {
        for (int32_t i = 0; i < made; i++)
            if (next[i]) {
                pl_kv_cache_free(d->kv, &next[i]->table, &next[i]->table_w);
                pl_seq_destroy(next[i]);
            }
        return st;
    }
    for (int32_t i = 0; i < keep; i++) {
        beam_cand *c = &run[i];
        if (!next[i]) next[i] = c->parent;
        seq_push(d, next[i], c->token, c->lp, NULL);
    }
    /* Parents without children are dropped: their blocks go back unless a child shares them. */
    for (int32_t i = 0; i < g->n_seqs; i++) {
        pl_seq *q = g->seqs[i];
        int kept = 0;
        for (int32_t j = 0; j < keep; j++) kept |= next[j] == q;
        if (!kept) {
            pl_kv_cache_free(d->kv, &q->table, &q->table_w);
            pl_seq_destroy(q);
        }
    }
    for (int32_t i = 0; i < keep; i++) {
        next[i]->index = i;
        next[i]->status = PL_SEQ_RUNNING;
        g->seqs[i] = next[i];
    }
    g->n_seqs = keep;
    g->n_live = keep;
    return PL_OK;
}

/* ---- outputs ---- */

static int streams(const pl_seq_group *g) {
    return !g->params.use_beam_search && pl_group_max_seqs(g) == g->params.n;
}

/* Push what q produced since its last delta (everything, when it finished). */
static void emit_seq(pl_seq_group *g, pl_seq *q, int32_t index) {
    int32_t n_out = q->n_tokens - g->n_prompt;
    size_t upto = q->status == PL_SEQ_FINISHED ? q->text_len : q->text_safe;
    if (upto < q->text_sent) upto = q->text_sent;
    if (n_out == q->pending_from && upto == q->text_sent && q->status != PL_SEQ_FINISHED) return;
    int32_t from = q->pending_from, k = n_out - from, w = n_top_of(g) + 1;
    pl_completion_delta d = {
        .index = index, .n_tokens = k, .token_ids = q->tokens + g->n_prompt + from,
        .text = q->text + q->text_sent, .text_len = upto - q->text_sent,
        .n_top = q->top ? n_top_of(g) : 0,
        .token_logprobs = q->top ? q->logprobs + from : NULL,
        .top = q->top ? q->top + (size_t)from * (size_t)w : NULL,
        .forced = q->forced ? q->forced + from : NULL,
        .finish = q->status == PL_SEQ_FINISHED ? q->finish : PL_FINISH_NONE,
        .stop_token = q->stop_token, .stop_str = (char *)q->stop_str,
        .cumulative_logprob = q->cum_logprob,
    };
    if (pl_out_push(g->chan, &d, d.n_top)) g->oom = 1; /* the channel fails the request */
    q->pending_from = n_out;
    q->text_sent = upto;
}

static int cmp_cum(const void *a, const void *b) {
    double x = (*(pl_seq *const *)a)->cum_logprob, y = (*(pl_seq *const *)b)->cum_logprob;
    return x > y ? -1 : x < y ? 1 : 0;
}

/* Beam hypotheses carry no streamed text: decode it whole, as the continuation of the prompt
 * (so a leading space stays), then apply the stop strings. */
static void finalize_text(pl_decoder *d, pl_seq *q) {
    pl_seq_group *g = q->group;
    int32_t n_out = q->n_tokens - g->n_prompt;
    if (q->stop_token >= 0 && !g->params.include_stop_str_in_output) n_out--;
    pl_detok_stream ds;
    pl_detok_init(&ds, d->tok, g->params.skip_special_tokens, 0);
    q->text_len = q->text_sent = 0;
    for (int32_t i = 0; i < n_out; i++)
        text_append(q, d->piece, pl_detok_push(&ds, q->tokens[g->n_prompt + i], d->piece,
                                               d->piece_cap));
    text_append(q, d->piece, pl_detok_flush(&ds, d->piece, d->piece_cap));
    if (g->params.n_stop > 0) {
        pl_stop_result r = pl_stop_scan(q->text, q->text_len, q->text_len, g->params.stop,
                                        g->params.n_stop);
        if (r.found) {
            q->text_len = g->params.include_stop_str_in_output ? r.match_at + r.match_len
                                                               : r.match_at;
            q->stop_str = g->params.stop[r.which];
            q->finish = PL_FINISH_STOP;
        }
    }
}

void pl_decoder_finish_group(pl_decoder *d, pl_seq_group *g, pl_finish_reason why,
                             const char *error) {
    for (int32_t i = 0; i < g->n_seqs; i++)
        if (g->seqs[i]->status != PL_SEQ_FINISHED) seq_finish(d, g->seqs[i], why);
    g->finished_at = pl_clock_now();
    if (!g->emitted_prompt) {
        /* A failure marks the channel, whose finish then reports it. */
        pl_out_set_prompt(g->chan, g->prompt, g->n_prompt, g->n_cached_tokens, g->prompt_top,
                          g->prompt_top ? g->params.prompt_logprobs : 0);
        g->emitted_prompt = 1;
    }
    if (why == PL_FINISH_ERROR || why == PL_FINISH_ABORT) {
        /* Nothing ranked: close every completion with the reason. */
        for (int32_t i = 0; i < g->params.n; i++) {
            pl_seq *q = i < g->n_seqs && streams(g) ? g->seqs[i] : NULL;
            if (q) {
                emit_seq(g, q, i);
            } else {
                pl_completion_delta d = {.index = i, .text = "", .finish = why, .stop_token = -1};
                pl_out_push(g->chan, &d, 0); /* a failure marks the channel: finish fails */
            }
        }
    } else if (g->params.use_beam_search) {
        int32_t n = g->n_beam_done < g->params.n ? g->n_beam_done : g->params.n;
        for (int32_t i = 0; i < n; i++) {
            finalize_text(d, g->beam_done[i]);
            emit_seq(g, g->beam_done[i], i);
        }
    } else if (!streams(g)) {
        qsort(g->seqs, (size_t)g->n_seqs, sizeof *g->seqs, cmp_cum);
        for (int32_t i = 0; i < g->params.n && i < g->n_seqs; i++) emit_seq(g, g->seqs[i], i);
    } else {
        for (int32_t i = 0; i < g->n_seqs; i++) emit_seq(g, g->seqs[i], g->seqs[i]->index);
    }
    pl_out_finish(g->chan, error, g->arrival, g->first_scheduled, g->first_token, g->finished_at);
    d->requests_finished++;
    /* at most one per group of the step (or the one the engine ends now): max_items */
    PL_ASSERT(d->n_finished < d->max_finished);
    d->finished[d->n_finished++] = g;
}

int32_t pl_decoder_take_finished(pl_decoder *d, pl_seq_group ***out) {
    int32_t n = d->n_finished;
    *out = d->finished;
    d->n_finished = 0;
    return n;
}

/* ---- the step's logits ---- */

static void prompt_logprobs(pl_decoder *d, pl_seq_group *g, const pl_sched_item *it, int32_t row0) {
    const int32_t V = d->n_vocab, k = g->params.prompt_logprobs, w = k + 1;
    if (!g->prompt_top) {
        g->prompt_top = calloc((size_t)g->n_prompt * (size_t)w, sizeof *g->prompt_top);
        if (!g->prompt_top) return;
    }
    for (int32_t j = 0; j < it->n; j++) {
        int32_t pos = it->start + j + 1; /* row j predicts the token at pos */
        if (pos >= g->n_prompt) break;
        pl_token_logprob *dst = g->prompt_top + (size_t)pos * (size_t)w;
        float lp;
        pl_top_logprobs(d->sampler, d->logits + (size_t)(row0 + j) * V, k, dst, g->prompt[pos], &lp);
        dst[k].id = g->prompt[pos];
        dst[k].logprob = lp;
    }
}

/* An embedding request after its one step: the prompt (usage), the vector, the end. */
static void finish_embed(pl_decoder *d, pl_seq_group *g) {
    pl_seq *q = g->seqs[0];
    PL_ASSERT(d->embd && q->logits_row >= 0);
    g->prefilled = 1;
    int bad = pl_out_set_prompt(g->chan, g->prompt, g->n_prompt, 0, NULL, 0);
    g->emitted_prompt = 1;
    if (!bad) bad = pl_out_set_embedding(g->chan, d->embd + (size_t)q->logits_row * d->n_embd,
                                         d->n_embd);
    q->logits_row = -1;
    pl_decoder_finish_group(d, g, bad ? PL_FINISH_ERROR : PL_FINISH_STOP,
                            bad ? "out of memory while decoding" : NULL);
}

pl_status pl_decoder_update_from_output(pl_decoder *d, const pl_sched_output *s,
                                        const float *logits, const int32_t *item_row) {
    d->logits = logits;
    d->item_row = item_row;
    const int32_t V = d->n_vocab;
    uint64_t mark = ++d->steps; /* never 0, the mark of a group that never sampled */
    /* 1. The K/V of the scheduled tokens exist now: commit them (prefix cache), note rows. */
    for (int32_t i = 0; i < s->n_items; i++) {
        const pl_sched_item *it = &s->items[i];
        pl_seq *q = it->seq;
        pl_seq_group *g = q->group;
        if (it->start < g->n_prompt)
            d->prompt_tokens += (uint64_t)((it->start + it->n < g->n_prompt ? it->start + it->n
                                                                             : g->n_prompt) -
                                           it->start);
        if (it->n_spec > 0) { /* verified below: only accepted tokens count as computed */
            q->logits_row = d->item_row[i];
            g->step_mark = mark;
            continue;
        }
        q->n_computed = it->start + it->n;
        if (g->embed) { /* nothing of it is kept or shared: its vector is the whole result */
            q->logits_row = d->item_row[i];
            g->step_mark = mark;
            continue;
        }
        PL_TRY(pl_kv_cache_commit(d->kv, &q->table, &q->table_w, q->tokens, q->n_computed));
        if (it->all_logits && d->item_row[i] >= 0) prompt_logprobs(d, g, it, d->item_row[i]);
        q->logits_row = it->sample ? d->item_row[i] + (it->all_logits ? it->n - 1 : 0) : -1;
        if (it->sample) g->step_mark = mark;
    }
    /* 2. Sample, group by group (a group's sequences always sample in the same step). The
     *    groups are listed first: finishing one frees its sequences, which later items name. */
    int32_t n_groups = 0;
    for (int32_t i = 0; i < s->n_items; i++) {
        pl_seq_group *g = s->items[i].seq->group;
        if (g->step_mark != mark) continue;
        g->step_mark = 0; /* once per group */
        d->step_groups[n_groups++] = g;
    }
    for (int32_t gi = 0; gi < n_groups; gi++) {
        pl_seq_group *g = d->step_groups[gi];
        if (g->embed) {
            finish_embed(d, g);
            continue;
        }
        pl_status st = PL_OK;
        if (g->params.use_beam_search) {
            st = beam_step(d, g);
        } else if (!g->prefilled) {
            st = first_sample(d, g, d->logits + (size_t)g->seqs[0]->logits_row * V);
        } else {
            for (int32_t j = 0; j < g->n_seqs; j++) {
                pl_seq *q = g->seqs[j];
                if (q->status != PL_SEQ_RUNNING || q->logits_row < 0) continue;
                if (q->n_spec == 0) sample_seq(d, q, d->logits + (size_t)q->logits_row * V);
                else if ((st = verify_seq(d, q)) != PL_OK) break;
            }
        }
        if (st == PL_ERR_NOMEM) g->oom = 1; /* this request fails below; the others go on */
        else if (st != PL_OK) return st;
        for (int32_t j = 0; j < g->n_seqs; j++) g->seqs[j]->logits_row = -1;
        if (!g->prefilled) {
            g->prefilled = 1;
            if (pl_out_set_prompt(g->chan, g->prompt, g->n_prompt, g->n_cached_tokens,
                                  g->prompt_top, g->prompt_top ? g->params.prompt_logprobs : 0))
                g->oom = 1;
            g->emitted_prompt = 1;
        }
        if (g->oom) {
            pl_decoder_finish_group(d, g, PL_FINISH_ERROR, g->cons_ambiguous
                ? "structured output: the constraint became too ambiguous (too many parses at once)"
                : g->cons_forced
                ? "structured output: the constraint does not allow the tokens force_end wrote"
                : "out of memory while decoding");
            continue;
        }
        if (g->n_live == 0) {
            pl_decoder_finish_group(d, g, PL_FINISH_STOP, NULL);
            continue;
        }
        if (streams(g))
            for (int32_t j = 0; j < g->n_seqs; j++) emit_seq(g, g->seqs[j], g->seqs[j]->index);
    }
    return PL_OK;
}
