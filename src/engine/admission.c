/* engine/admission — a request becomes a sequence group (see admission.h for the contract). */
#include "engine/admission.h"
#include "base/clock.h"
#include "engine/scheduler.h"
#include "model/model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void pl_request_params_default(pl_request_params *p) {
    memset(p, 0, sizeof *p);
    pl_sampling_params_default(&p->sampling);
    p->n = 1;
    p->best_of = 0; /* = n */
    p->length_penalty = 1.0f;
    p->max_tokens = 16;
    p->skip_special_tokens = 1;
    p->logprobs = -1;
    p->prompt_logprobs = -1;
    p->add_special = 1;
    p->parse_special = 0;
}

static pl_status check_params(const pl_admission *a, pl_request_params *p) {
    if (p->n < 1 || p->n > PL_MAX_BEST_OF)
        return pl_fail(PL_ERR_INVALID_ARG, "n must be in [1, %d], got %d", PL_MAX_BEST_OF, p->n);
    if (p->best_of == 0) p->best_of = p->n;
    if (p->best_of < p->n || p->best_of > PL_MAX_BEST_OF)
        return pl_fail(PL_ERR_INVALID_ARG, "best_of must be in [n, %d], got %d", PL_MAX_BEST_OF,
                       p->best_of);
    if (p->best_of > a->max_num_seqs)
        return pl_fail(PL_ERR_INVALID_ARG, "best_of %d exceeds max-num-seqs %d", p->best_of,
                       a->max_num_seqs);
    if (p->max_tokens < 1)
        return pl_fail(PL_ERR_INVALID_ARG, "max_tokens must be at least 1, got %d", p->max_tokens);
    if (!pl_kv_cache_shares(a->kv) && (p->best_of > 1 || p->use_beam_search))
        return pl_fail(PL_ERR_INVALID_ARG, "kv-layout %s holds one sequence per request "
                       "(no sharing): n, best_of and beam search need kv-layout paged "
                       "(or vattention with --vattn-share)",
                       pl_kv_cache_layout_name(a->kv));
    if (p->min_tokens < 0 || p->min_tokens > p->max_tokens)
        return pl_fail(PL_ERR_INVALID_ARG, "min_tokens must be in [0, max_tokens], got %d",
                       p->min_tokens);
    if (p->logprobs < -1 || p->logprobs > PL_MAX_LOGPROBS)
        return pl_fail(PL_ERR_INVALID_ARG, "logprobs must be in [0, %d], got %d", PL_MAX_LOGPROBS,
                       p->logprobs);
    if (p->prompt_logprobs < -1 || p->prompt_logprobs > PL_MAX_LOGPROBS)
        return pl_fail(PL_ERR_INVALID_ARG, "prompt_logprobs must be in [0, %d], got %d",
                       PL_MAX_LOGPROBS, p->prompt_logprobs);
    if (!isfinite(p->length_penalty))
        return pl_fail(PL_ERR_INVALID_ARG, "length_penalty must be finite");
    if (p->n_stop < 0 || p->n_stop > PL_MAX_STOP_STRINGS || (p->n_stop && !p->stop))
        return pl_fail(PL_ERR_INVALID_ARG, "at most %d stop strings", PL_MAX_STOP_STRINGS);
    if (p->n_stop_token_ids < 0 || p->n_stop_token_ids > 1024 ||
        (p->n_stop_token_ids && !p->stop_token_ids))
        return pl_fail(PL_ERR_INVALID_ARG, "at most 1024 stop token ids");
    for (int32_t i = 0; i < p->n_stop_token_ids; i++)
        if (p->stop_token_ids[i] < 0 || p->stop_token_ids[i] >= a->n_vocab)
            return pl_fail(PL_ERR_INVALID_ARG, "stop token id %d is out of range [0, %d)",
                           p->stop_token_ids[i], a->n_vocab);
    for (int32_t i = 0; i < p->sampling.n_logit_bias && p->sampling.logit_bias; i++)
        if (p->sampling.logit_bias[i].id < 0 || p->sampling.logit_bias[i].id >= a->n_vocab)
            return pl_fail(PL_ERR_INVALID_ARG, "logit_bias: token id %d is out of range [0, %d)",
                           p->sampling.logit_bias[i].id, a->n_vocab);
    if (p->use_beam_search && p->sampling.n_logit_bias)
        return pl_fail(PL_ERR_INVALID_ARG, "logit_bias is not supported with beam search");
    if (p->constraint != PL_CONSTRAINT_NONE && p->use_beam_search)
        return pl_fail(PL_ERR_INVALID_ARG, "structured output is not supported with beam search");
    if (p->constraint < PL_CONSTRAINT_NONE || p->constraint > PL_CONSTRAINT_GRAMMAR)
        return pl_fail(PL_ERR_INVALID_ARG, "unknown constraint kind %d", (int)p->constraint);
    const pl_force_end *f = &p->force_end;
    if (f->n_close || f->close || f->n_open || f->open || f->after || f->open_in_prompt) {
        if (f->n_close < 1 || f->n_close > PL_MAX_FORCE_TOKENS || !f->close)
            return pl_fail(PL_ERR_INVALID_ARG, "force_end.close must hold 1 to %d token ids, got "
                           "%d", PL_MAX_FORCE_TOKENS, f->close ? f->n_close : 0);
        if (f->n_open < 1 || f->n_open > PL_MAX_FORCE_TOKENS || !f->open)
            return pl_fail(PL_ERR_INVALID_ARG, "force_end.open must hold 1 to %d token ids, got "
                           "%d", PL_MAX_FORCE_TOKENS, f->open ? f->n_open : 0);
        for (int32_t i = 0; i < f->n_open + f->n_close; i++) {
            int32_t id = i < f->n_open ? f->open[i] : f->close[i - f->n_open];
            if (id < 0 || id >= a->n_vocab)
                return pl_fail(PL_ERR_INVALID_ARG, "force_end.%s[%d]: token id %d is out of "
                               "range [0, %d)", i < f->n_open ? "open" : "close",
                               i < f->n_open ? i : i - f->n_open, id, a->n_vocab);
        }
        if (f->after < 0)
            return pl_fail(PL_ERR_INVALID_ARG, "force_end.after must be >= 0, got %d", f->after);
        if (p->use_beam_search)
            return pl_fail(PL_ERR_INVALID_ARG, "force_end is not supported with beam search");
    }
    if (p->use_beam_search) {
        /* Beam search is deterministic: the sampling parameters do not apply (as in vLLM,
         * which requires them neutral; pagellm simply ignores them). */
        pl_sampling_params_default(&p->sampling);
        p->sampling.temperature = 0;
    }
    return pl_sampling_params_validate(&p->sampling);
}

/* Blocks the request may need at its peak: the prompt once, then every sequence's own output
 * blocks plus a copied partial block. More than the pool minus the watermark can never run. */
static pl_status check_fits(const pl_admission *a, const pl_seq_group *g) {
    int32_t total = g->n_prompt + g->params.max_tokens;
    if (total > a->max_model_len)
        return pl_fail(PL_ERR_INVALID_ARG, "this model's maximum context length is %d tokens, "
                       "but %d were requested (%d in the prompt, %d for the completion)",
                       a->max_model_len, total, g->n_prompt, g->params.max_tokens);
    int64_t seqs = pl_group_max_seqs(g);
    int64_t need = pl_kv_cache_request_blocks(a->kv, g->n_prompt, g->params.max_tokens, seqs,
                                              a->k_spec);
    int64_t have = pl_kv_cache_capacity(a->kv);
    if (need > have)
        return pl_fail(PL_ERR_INVALID_ARG, "the request may need %lld KV blocks (%d prompt "
                       "tokens, %d max tokens, %lld sequences) but the cache has %lld",
                       (long long)need, g->n_prompt, g->params.max_tokens, (long long)seqs,
                       (long long)have);
    return PL_OK;
}

/* Generation requests need a generation model, embedding requests a model with a pooling type.
 * An embedding request keeps only its tokenization fields (the rest is reset to defaults). */
static pl_status check_kind(const pl_admission *a, pl_request_params *p) {
    if (p->embedding && a->pooling == PL_POOL_NONE)
        return pl_fail(PL_ERR_INVALID_ARG, "this model (architecture %s) cannot compute "
                       "embeddings: it has no pooling type (an embedding model, e.g. bert, has "
                       "'%s.pooling_type'; a generation model needs --pooling)", a->arch_name,
                       a->arch_name);
    if (!p->embedding && a->embedding_model)
        return pl_fail(PL_ERR_INVALID_ARG, "this model (architecture %s) is an embedding model: "
                       "it computes embeddings only and cannot generate text", a->arch_name);
    if (p->embedding) {
        int add_special = p->add_special, parse_special = p->parse_special;
        pl_request_params_default(p);
        p->max_tokens = 1; /* nothing is generated; the scheduler reserves for prompt + 1 */
        p->embedding = 1;
        p->add_special = add_special;
        p->parse_special = parse_special;
    }
    return PL_OK;
}

/* An embedding input runs whole in one step: it must fit the model and the step's budget (and a
 * generation model's KV pool, where it holds blocks for that step). */
static pl_status check_embed_fits(const pl_admission *a, const pl_seq_group *g) {
    const int32_t bs = pl_kv_cache_block_size(a->kv);
    int64_t have = pl_kv_cache_capacity(a->kv);
    if (!a->embedding_model && (g->n_prompt + 1 + bs - 1) / bs > have)
        return pl_fail(PL_ERR_INVALID_ARG, "the input needs %d KV blocks for its step but the "
                       "cache has %lld", (g->n_prompt + 1 + bs - 1) / bs, (long long)have);
    if (g->n_prompt > a->max_model_len)
        return pl_fail(PL_ERR_INVALID_ARG, "this model's maximum context length is %d tokens, "
                       "but the input has %d", a->max_model_len, g->n_prompt);
    if (g->n_prompt > a->max_num_batched_tokens)
        return pl_fail(PL_ERR_INVALID_ARG, "the input has %d tokens, more than one step computes "
                       "(max-num-batched-tokens %d); an embedding input runs in one step",
                       g->n_prompt, a->max_num_batched_tokens);
    return PL_OK;
}

pl_status pl_admit(const pl_admission *a, const char *text, const int32_t *ids, size_t n_ids,
                   const pl_request_params *params, pl_seq_group **out) {
    *out = NULL;
    pl_seq_group *g = calloc(1, sizeof *g);
    if (!g) return pl_fail(PL_ERR_NOMEM, "out of memory");
    g->params = *params;
    pl_status st = check_kind(a, &g->params);
    g->embed = !params->embedding ? 0
               : a->embedding_model ? PL_EMBED_LOCAL : PL_EMBED_PAGED;
    if (st == PL_OK) st = check_params(a, &g->params);
    if (st != PL_OK) g->params.n_stop = 0; /* nothing copied yet: pl_group_destroy frees none */
    if (st == PL_OK) st = pl_group_copy_stops(g);
    if (st == PL_OK && params->lora && !(g->lora = pl_lora_set_acquire(a->loras, params->lora)))
        st = pl_fail(PL_ERR_NOT_FOUND, "lora: no adapter named '%.200s' is loaded", params->lora);
    g->params.lora = NULL; /* the caller's: not kept (g->lora is the reference) */
    if (st == PL_OK && g->params.constraint != PL_CONSTRAINT_NONE) {
        /* Compiled here, in the caller's thread, so that a bad one is an error with a message;
         * requests with the same constraint share the compiled automaton and its mask cache. */
        g->cons_reg = a->cons;
        st = pl_cons_acquire(g->cons_reg, g->params.constraint, g->params.constraint_text,
                             g->params.constraint_choices, g->params.n_constraint_choices,
                             &g->cons);
    }
    g->params.constraint_text = NULL; /* the caller's: not kept */
    g->params.constraint_choices = NULL;
    if (st == PL_OK && text) {
        size_t n = 0;
        st = pl_tokenize(a->tok, text, strlen(text), g->params.add_special,
                         g->params.parse_special, &g->prompt, &n);
        if (st == PL_OK && n > (size_t)INT32_MAX) st = pl_fail(PL_ERR_INVALID_ARG, "prompt too long");
        g->n_prompt = (int32_t)n;
    } else if (st == PL_OK) {
        if (n_ids > (size_t)a->max_model_len) {
            st = pl_fail(PL_ERR_INVALID_ARG, "this model's maximum context length is %d tokens, "
                         "but the prompt has %zu", a->max_model_len, n_ids);
        } else if ((g->prompt = malloc((n_ids ? n_ids : 1) * sizeof(int32_t))) == NULL) {
            st = pl_fail(PL_ERR_NOMEM, "out of memory");
        } else {
            g->n_prompt = (int32_t)n_ids;
            for (size_t i = 0; i < n_ids && st == PL_OK; i++) {
                if (ids[i] < 0 || ids[i] >= a->n_vocab)
                    st = pl_fail(PL_ERR_INVALID_ARG, "token id %d at position %zu is out of range "
                                 "[0, %d)", ids[i], i, a->n_vocab);
                g->prompt[i] = ids[i];
            }
        }
    }
    if (st == PL_OK && g->n_prompt == 0) st = pl_fail(PL_ERR_INVALID_ARG, "the prompt is empty");
    if (st == PL_OK) st = g->embed ? check_embed_fits(a, g) : check_fits(a, g);
    pl_seq *q = NULL;
    if (st == PL_OK && (q = pl_seq_create(g, 0, g->prompt, g->n_prompt)) != NULL &&
        pl_group_add_seq(g, q)) {
        pl_seq_destroy(q);
        q = NULL;
    }
    if (st == PL_OK && !q) st = pl_fail(PL_ERR_NOMEM, "out of memory");
    if (st == PL_OK && g->cons) st = pl_cons_start(g->cons, &q->cstate);
    if (st != PL_OK) {
        pl_group_destroy(g);
        return st;
    }
    g->n_live = 1;
    g->arrival = pl_clock_now();
    pl_detok_init(&q->detok, a->tok, g->params.skip_special_tokens, 0);
    q->detok.no_clean = g->cons != NULL;
    *out = g;
    return PL_OK;
}
