/* engine/request — see request.h: the lifetime of sequences and sequence groups. */
#include "engine/request.h"
#include "base/buf.h"

#include "base/status.h"
#include "engine/output.h"
#include "model/lora.h"

#include <stdlib.h>
#include <string.h>

pl_seq *pl_seq_create(pl_seq_group *g, int32_t index, const int32_t *tokens, int32_t n) {
    pl_seq *q = calloc(1, sizeof *q);
    if (!q) return NULL;
    q->group = g;
    q->index = index;
    q->out_cap = g->params.max_tokens + 1;
    q->cap = g->n_prompt + q->out_cap;
    q->tokens = malloc((size_t)q->cap * sizeof *q->tokens);
    q->logprobs = malloc((size_t)q->out_cap * sizeof *q->logprobs);
    if (g->params.logprobs >= 0)
        q->top = malloc((size_t)q->out_cap * (size_t)(n_top_of(g) + 1) * sizeof *q->top);
    q->text_cap = 256;
    q->text = malloc(q->text_cap);
    if (g->params.force_end.n_close) q->forced = calloc((size_t)q->out_cap, 1);
    if (!q->tokens || !q->logprobs || !q->text || (g->params.logprobs >= 0 && !q->top) ||
        (g->params.force_end.n_close && !q->forced)) {
        PL_FREE_ALL(q->tokens, q->logprobs, q->top, q->text, q->forced, q);
        return NULL;
    }
    memcpy(q->tokens, tokens, (size_t)n * sizeof *tokens);
    q->n_tokens = n;
    q->stop_token = -1;
    q->logits_row = -1;
    q->pending_from = n - g->n_prompt;
    return q;
}

void pl_seq_destroy(pl_seq *q) {
    if (!q) return;
    pl_gstate_free(&q->cstate);
    PL_FREE_ALL(q->tokens, q->logprobs, q->top, q->text, q->forced, q);
}

/* A copy of q's tokens, logprobs, text and RNG (not its blocks). */
pl_seq *pl_seq_clone(pl_seq *q, int32_t index) {
    pl_seq_group *g = q->group;
    pl_seq *c = pl_seq_create(g, index, q->tokens, q->n_tokens);
    if (!c) return NULL;
    int32_t n_out = q->n_tokens - g->n_prompt;
    memcpy(c->logprobs, q->logprobs, (size_t)n_out * sizeof *q->logprobs);
    if (q->top)
        memcpy(c->top, q->top, (size_t)n_out * (size_t)(n_top_of(g) + 1) * sizeof *q->top);
    if (q->forced) memcpy(c->forced, q->forced, (size_t)n_out);
    c->rng = q->rng;
    c->cum_logprob = q->cum_logprob;
    c->n_computed = q->n_computed;
    c->status = q->status;
    c->detok = q->detok;
    if (pl_array_reserve(&c->text, &c->text_cap, q->text_len + 1, 1)) {
        pl_seq_destroy(c);
        return NULL;
    }
    memcpy(c->text, q->text, q->text_len);
    c->text_len = q->text_len;
    c->text_sent = q->text_sent;
    c->text_safe = q->text_safe;
    c->pending_from = q->pending_from;
    if (q->cstate.n && pl_gstate_copy(&c->cstate, &q->cstate) != PL_OK) {
        pl_seq_destroy(c);
        return NULL;
    }
    return c;
}

int pl_group_add_seq(pl_seq_group *g, pl_seq *q) {
    if (pl_array_reserve(&g->seqs, &g->seqs_cap, (size_t)g->n_seqs + 1, sizeof *g->seqs)) return -1;
    g->seqs[g->n_seqs++] = q;
    return 0;
}

void pl_group_destroy(pl_seq_group *g) {
    if (!g) return;
    for (int32_t i = 0; i < g->n_seqs; i++) pl_seq_destroy(g->seqs[i]);
    for (int32_t i = 0; i < g->n_beam_done; i++) pl_seq_destroy(g->beam_done[i]);
    free(g->seqs);
    free(g->beam_done);
    for (int32_t i = 0; g->stop_copy && i < g->params.n_stop; i++) free(g->stop_copy[i]);
    PL_FREE_ALL(g->stop_copy, g->stop_ids_copy, g->logit_bias_copy, g->force_copy, g->prompt,
                g->prompt_top);
    if (g->chan) pl_out_channel_unref(g->chan);
    if (g->cons) pl_cons_release(g->cons_reg, g->cons);
    pl_lora_unref(g->lora);
    free(g);
}

/* Copy the caller's stop strings, stop ids and logit_bias into the group. */
pl_status pl_group_copy_stops(pl_seq_group *g) {
    pl_request_params *p = &g->params;
    if (p->n_stop) {
        g->stop_copy = calloc((size_t)p->n_stop, sizeof *g->stop_copy);
        if (!g->stop_copy) return pl_fail(PL_ERR_NOMEM, "out of memory");
        for (int32_t i = 0; i < p->n_stop; i++) {
            if (!p->stop[i]) return pl_fail(PL_ERR_INVALID_ARG, "stop string %d is NULL", i);
            if (!(g->stop_copy[i] = strdup(p->stop[i]))) {
                p->n_stop = i;
                return pl_fail(PL_ERR_NOMEM, "out of memory");
            }
        }
        p->stop = (const char *const *)g->stop_copy;
    }
    if (p->n_stop_token_ids) {
        g->stop_ids_copy = malloc((size_t)p->n_stop_token_ids * sizeof(int32_t));
        if (!g->stop_ids_copy) return pl_fail(PL_ERR_NOMEM, "out of memory");
        memcpy(g->stop_ids_copy, p->stop_token_ids, (size_t)p->n_stop_token_ids * sizeof(int32_t));
        p->stop_token_ids = g->stop_ids_copy;
    }
    if (p->force_end.n_close) {
        pl_force_end *f = &p->force_end;
        g->force_copy = malloc((size_t)(f->n_open + f->n_close) * sizeof(int32_t));
        if (!g->force_copy) return pl_fail(PL_ERR_NOMEM, "out of memory");
        memcpy(g->force_copy, f->open, (size_t)f->n_open * sizeof(int32_t));
        memcpy(g->force_copy + f->n_open, f->close, (size_t)f->n_close * sizeof(int32_t));
        f->open = g->force_copy;
        f->close = g->force_copy + f->n_open;
    }
    if (p->sampling.n_logit_bias) {
        size_t bytes = (size_t)p->sampling.n_logit_bias * sizeof *g->logit_bias_copy;
        g->logit_bias_copy = malloc(bytes);
        if (!g->logit_bias_copy) return pl_fail(PL_ERR_NOMEM, "out of memory");
        memcpy(g->logit_bias_copy, p->sampling.logit_bias, bytes);
        p->sampling.logit_bias = g->logit_bias_copy;
    }
    return PL_OK;
}

