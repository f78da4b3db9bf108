/* Fuzz target: the structured-output compilers and matcher. The first byte picks the input kind
 * (JSON schema, regex, GBNF grammar, choice list split at NULs), the rest is its text. A compile
 * either fails with a message or gives an automaton; then a walk of up to 24 steps over the
 * stories260K vocabulary picks allowed tokens (chosen by later input bytes) and checks that every
 * token the mask allows is accepted by the automaton (advance returns 1) and that the mask
 * allows end-of-generation exactly in accepting states. */
#include "constrain/cons_internal.h"
#include "fuzz_util.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static pl_tokenizer *g_tok;
static pl_cons_registry *g_reg;

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    g_tok = fuzz_load_tokenizer("models/stories260K.gguf", "fuzz_constrain");
    g_reg = pl_cons_registry_create(g_tok);
    if (!g_reg) abort();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > 4096) return 0;
    static const pl_constraint_kind KINDS[] = {PL_CONSTRAINT_JSON_SCHEMA, PL_CONSTRAINT_REGEX,
                                               PL_CONSTRAINT_GRAMMAR, PL_CONSTRAINT_CHOICE};
    pl_constraint_kind kind = KINDS[data[0] & 3];
    int walk_seed = data[0] >> 2;
    char *text = malloc(size);
    if (!text) return 0;
    memcpy(text, data + 1, size - 1);
    text[size - 1] = 0;
    const char *choices[16];
    int32_t n_choices = 0;
    for (size_t i = 0; i < size - 1 && n_choices < 16;) { /* NUL-separated choices */
        choices[n_choices++] = text + i;
        i += strlen(text + i) + 1;
    }
    pl_cons *c = NULL;
    pl_status st = pl_cons_acquire(g_reg, kind, text, choices, n_choices, &c);
    if (st != PL_OK) {
        if (!pl_last_error()[0]) abort(); /* a failure always names the problem */
        free(text);
        return 0;
    }
    const pl_grammar *g = pl_cons_grammar(c);
    (void)pl_grammar_matches(g, text, strlen(text));
    pl_gstate s = {0}, t = {0};
    pl_gscratch *scr = pl_gscratch_create();
    int32_t V = pl_tokenizer_n_vocab(g_tok);
    char piece[256];
    if (scr && pl_cons_start(c, &s) == PL_OK) {
        for (int step = 0; step < 24; step++) {
            int32_t n_allowed;
            const uint64_t *m = pl_cons_mask(g_reg, c, &s, &n_allowed);
            if (!m || n_allowed == 0) break;
            /* every allowed token is accepted; EOS iff accepting */
            int32_t pick = -1, k = 0, want = (int32_t)((unsigned)(walk_seed + 31 * step) % (unsigned)n_allowed);
            for (int32_t id = 0; id < V; id++) {
                if (!(m[id >> 6] >> (id & 63) & 1)) {
                    if (pl_tokenizer_is_eog(g_tok, id) && pl_gstate_accepting(&s)) abort();
                    continue;
                }
                if (k++ == want) pick = id;
                if (pl_tokenizer_is_eog(g_tok, id)) {
                    if (!pl_gstate_accepting(&s)) abort();
                    continue;
                }
                size_t n = pl_token_to_piece(g_tok, id, piece, sizeof piece, 0);
                if (pl_gstate_copy(&t, &s) != PL_OK) goto out;
                int r = pl_gstate_advance(g, scr, &t, (const uint8_t *)piece, n);
                if (r == 0) abort(); /* the mask allowed a token the automaton rejects */
                if (r < 0) goto out;
            }
            if (pick < 0 || pl_tokenizer_is_eog(g_tok, pick)) break;
            if (pl_cons_advance(g_reg, c, &s, pick) != 1) break;
        }
    }
out:
    pl_gstate_free(&s);
    pl_gstate_free(&t);
    pl_gscratch_destroy(scr);
    pl_cons_release(g_reg, c);
    free(text);
    return 0;
}
