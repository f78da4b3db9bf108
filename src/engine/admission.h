/* engine/admission — a request becomes a sequence group, or an error with a message: the
 * parameters are checked and normalised, the prompt tokenized (or its ids checked), the
 * constraint compiled, and the fit checks made (the model's context, the step's budget, and the
 * KV cache: the most blocks the request may need at its peak against what the cache can ever
 * give, asked of kv/cache.h). Runs in the caller's thread and touches no engine state, so it is
 * tested without an engine (tests/unit/test_admission.c).
 *
 * pl_request_params_default (pagellm.h) is defined here too.
 *
 * Invariants: a group it returns has one WAITING sequence holding the prompt (n_prompt >= 1),
 * n_live 1, its arrival time set, its own copies of the stop strings and ids, and no id yet
 * (the inbox gives it one); on error nothing is left allocated. */
#ifndef PL_ENGINE_ADMISSION_H
#define PL_ENGINE_ADMISSION_H

#include "pagellm.h"

#include "constrain/constrain.h"
#include "engine/request.h"
#include "kv/cache.h"
#include "model/lora.h"
#include "tokenizer/tokenizer.h"

typedef struct {
    const pl_tokenizer *tok;      /* tokenizes text prompts and detokenizes outputs */
    int32_t n_vocab;
    int32_t max_model_len;
    int32_t max_num_seqs;         /* best_of bound */
    int32_t max_num_batched_tokens; /* an embedding input runs in one step */
    int32_t k_spec;               /* speculative tokens per step (0: none) */
    int32_t pooling;              /* the pooling embeddings use (0: none: no embeddings) */
    int embedding_model;          /* the model computes embeddings only (no KV kept) */
    const char *arch_name;        /* for messages */
    const pl_kv_cache *kv;        /* the fit checks ask it */
    pl_cons_registry *cons;       /* compiled constraints (NULL: structured output refused) */
    pl_lora_set *loras;           /* LoRA adapters by name (params.lora) */
} pl_admission;

/* A group for the prompt `text` (NUL-terminated) or, when text is NULL, the token ids ids[n_ids],
 * with a copy of *params. */
pl_status pl_admit(const pl_admission *a, const char *text, const int32_t *ids, size_t n_ids,
                   const pl_request_params *params, pl_seq_group **out);

#endif
