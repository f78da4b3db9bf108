/* model/step_batch — everything one forward step needs, and nothing more.
 *
 * The scheduler and KV manager decide; the runner fills this; the forward pass reads it. It holds
 * physical block ids and slots only: no sequence groups, no sharing, no prefix hashes.
 *
 * Tokens are flat, sequence after sequence. Sequence i owns tokens [seq_start[i], seq_start[i+1])
 * which are its next q_len tokens at positions context_lens[i] - q_len ... context_lens[i] - 1
 * (context_lens counts the tokens in the cache once this step's K/V are written). Token t's K/V
 * go to physical slot slot_mapping[t] = block * block_size + offset. Logits are computed only for
 * the rows listed in logit_rows, in that order.
 */
#ifndef PL_MODEL_STEP_BATCH_H
#define PL_MODEL_STEP_BATCH_H

#include <stdint.h>

typedef struct {
    int32_t n_tokens;
    const int32_t *token_ids;     /* [n_tokens] */
    const int32_t *positions;     /* [n_tokens] RoPE position of each token */
    const int64_t *slot_mapping;  /* [n_tokens] physical KV slot; < 0 = do not store */
    int32_t n_seqs;
    const int32_t *seq_start;     /* [n_seqs + 1] */
    const int32_t *context_lens;  /* [n_seqs] */
    const int32_t *block_tables;  /* [n_seqs][max_blocks] */
    int32_t max_blocks;
    int32_t n_logits;
    const int32_t *logit_rows;    /* [n_logits] token indices whose logits are wanted */
    /* KV cache groups (kv/manager.h; a mixed model whose window layers keep tables of their
     * own): the window layers' slots and tables, laid out as the two above, or NULL (every
     * layer uses those). With them the KV store holds n_layers / 2 tensors: the i-th global
     * layer and the i-th window layer share tensor i (a block id belongs to one group). */
    const int64_t *slot_mapping_w;
    const int32_t *block_tables_w;
    /* LoRA (model/lora.h): each sequence's adapter (NULL: the base model), or NULL: none. */
    const struct pl_lora *const *seq_lora; /* [n_seqs] */
} pl_step_batch;

#endif
