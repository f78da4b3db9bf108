/* tokenizer/spm — SentencePiece tokenization as llama.cpp does it (llm_tokenizer_spm_session).
 *
 * The text (spaces already escaped to U+2581) starts as one symbol per UTF-8 character. Every
 * pair of neighbours whose concatenation is a token is a candidate; the candidate with the
 * highest score (ties: the leftmost) is merged, and the new neighbours become candidates, until
 * none is left. Candidates made stale by an earlier merge are skipped when popped.
 *
 * Each final symbol is a token, except an unmerged character the vocabulary lacks: it falls back
 * to its bytes as <0xNN> tokens. (llama.cpp looks such a symbol up in its "reverse merge" map
 * first, but a merged symbol is always a token and single characters never are merge results,
 * so that lookup cannot succeed and is not needed.)
 */
#include "tokenizer/bigram_queue.h"
#include "tokenizer/tok_internal.h"

#include <stdlib.h>

typedef pl_tok_sym sym;

static int try_add(const pl_tokenizer *t, const sym *s, pl_bigram_queue *h, int left, int right) {
    if (left < 0 || right < 0) return 1;
    size_t size = s[left].n + s[right].n; /* neighbours are contiguous in the text */
    int32_t id = pl_tok_map_get(&t->tok_map, s[left].text, size);
    if (id < 0) return 1;
    return pl_bigram_push(h, (pl_bigram){left, right, t->score[id], size});
}

pl_status pl_tok_spm(const pl_tokenizer *t, const char *text, size_t len, pl_tok_ids *out) {
    if (len == 0) return PL_OK;
    sym *s = malloc(len * sizeof *s);
    pl_bigram_queue h = {0};
    pl_status st = PL_OK;
    if (!s) return pl_fail(PL_ERR_NOMEM, "tokenize: out of memory");

    int n = pl_tok_split_chars(text, len, s);
    for (int i = 1; i < n; i++)
        if (!try_add(t, s, &h, i - 1, i)) goto oom;

    while (h.n > 0) {
        pl_bigram b = pl_bigram_pop(&h);
        if (!pl_tok_sym_merge(s, b.left, b.right, b.size)) continue; /* stale */
        if (!try_add(t, s, &h, s[b.left].prev, b.left) || !try_add(t, s, &h, b.left, s[b.left].next))
            goto oom;
    }

    for (int i = 0; i != -1 && st == PL_OK; i = s[i].next) {
        int32_t id = pl_tok_map_get(&t->tok_map, s[i].text, s[i].n);
        if (id >= 0) {
            st = pl_tok_ids_push(out, id);
            continue;
        }
        for (size_t j = 0; j < s[i].n && st == PL_OK; j++) {
            uint8_t byte = (uint8_t)s[i].text[j];
            int32_t bid = t->byte_tok[byte] >= 0 ? t->byte_tok[byte] : t->unk;
            if (bid < 0) {
                st = pl_fail(PL_ERR_UNSUPPORTED,
                             "tokenize: byte 0x%02X has no token (no <0x%02X> and no unknown token)",
                             byte, byte);
                break;
            }
            st = pl_tok_ids_push(out, bid);
        }
    }
    free(s);
    free(h.v);
    return st;
oom:
    free(s);
    free(h.v);
    return pl_fail(PL_ERR_NOMEM, "tokenize: out of memory");
}
