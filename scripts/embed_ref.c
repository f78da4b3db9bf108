/* scripts/embed_ref.c — embedding references from llama.cpp's library for
 * tests/integration/test_embeddings.c: for each input text, llama.cpp's token ids (add_special,
 * no special parsing) and its pooled embedding (a context with embeddings on and the model's own
 * pooling type; CPU, no flash attention), L2-normalized in double as llama.cpp's
 * common_embd_normalize(…, 2) does. Texts come one per line on stdin ("\n" in a line stands for a
 * newline); a line starting with "tok:" is tokenized only (no embedding).
 * Built and run by scripts/make_embed_refs.sh against $LLAMA_CPP; never part of pagellm.
 *   embed_ref MODEL.gguf "MKMODEL FLAGS" [mean|cls|last] < inputs.txt > refs.json
 * (the flags that made MODEL are recorded in the JSON, for the test to make the same file; ""
 * for a model used as is). The optional pooling overrides the model's, as llama.cpp's --pooling
 * does for a generation model; the KV cache is then f32.
 * A reranker (pooling_type rank): each line is "query<TAB>document"; the pair is tokenized as
 * llama-server's format_prompt_rerank does ([BOS] query [EOS] [SEP] document [EOS] as the
 * vocabulary's add_bos / add_eos / add_sep say; EOS falls back to SEP) and its "score" is the
 * n_cls_out raw outputs of the classification head (llama_get_embeddings_seq).
 */
#include "llama.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void quiet(enum ggml_log_level level, const char *text, void *user) {
    (void)user;
    if (level >= GGML_LOG_LEVEL_ERROR) fputs(text, stderr);
}

/* A JSON string: UTF-8 as is, quotes, backslashes and control characters escaped. */
static void json_str(const char *s) {
    putchar('"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c == '\n') printf("\\n");
        else if (c == '\t') printf("\\t");
        else if (c < 0x20) printf("\\u%04x", c);
        else putchar(c);
    }
    putchar('"');
}

/* "\n" in an input line stands for a newline, "\t" for a tab. */
static void unescape(char *s) {
    char *w = s;
    for (char *r = s; *r; r++) {
        if (r[0] == '\\' && (r[1] == 'n' || r[1] == 't')) {
            *w++ = r[1] == 'n' ? '\n' : '\t';
            r++;
        } else {
            *w++ = *r;
        }
    }
    *w = 0;
}

int main(int argc, char **argv) {
    if (argc != 3 && argc != 4) {
        fprintf(stderr,
                "usage: embed_ref MODEL.gguf \"MKMODEL FLAGS\" [mean|cls|last] < inputs.txt\n");
        return 2;
    }
    llama_log_set(quiet, NULL);
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    struct llama_model *model = llama_model_load_from_file(argv[1], mp);
    if (!model) return 1;
    const struct llama_vocab *vocab = llama_model_get_vocab(model);
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 512;
    cp.n_batch = cp.n_ubatch = 512;
    cp.n_threads = cp.n_threads_batch = 2;
    cp.embeddings = true;
    cp.pooling_type = LLAMA_POOLING_TYPE_UNSPECIFIED; /* the model's */
    if (argc == 4) {
        cp.pooling_type = !strcmp(argv[3], "mean")  ? LLAMA_POOLING_TYPE_MEAN
                          : !strcmp(argv[3], "cls") ? LLAMA_POOLING_TYPE_CLS
                                                    : LLAMA_POOLING_TYPE_LAST;
        cp.type_k = cp.type_v = GGML_TYPE_F32;
    }
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    struct llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) return 1;
    const int n_embd = llama_model_n_embd(model);
    printf("{\n \"reference\": \"libllama CPU, embeddings on, the model's pooling, no flash "
           "attention, L2-normalized\",\n \"mkmodel\": ");
    json_str(argv[2]);
    printf(",\n \"pooling_type\": %d,\n \"cases\": [", (int)llama_pooling_type(ctx));
    char line[8192];
    int n_cases = 0;
    const int rank = llama_pooling_type(ctx) == LLAMA_POOLING_TYPE_RANK;
    while (rank && fgets(line, sizeof line, stdin)) {
        line[strcspn(line, "\n")] = 0;
        char *doc = strchr(line, '\t');
        if (!doc) return 1;
        *doc++ = 0;
        llama_token ids[1024];
        int nq = llama_tokenize(vocab, line, (int32_t)strlen(line), ids + 1, 500, false, false);
        if (nq < 0) return 1;
        llama_token eos = llama_vocab_eos(vocab);
        if (eos == LLAMA_TOKEN_NULL) eos = llama_vocab_sep(vocab);
        int n = 0;
        if (llama_vocab_get_add_bos(vocab)) ids[n++] = llama_vocab_bos(vocab);
        memmove(ids + n, ids + 1, (size_t)nq * sizeof *ids);
        n += nq;
        if (llama_vocab_get_add_eos(vocab)) ids[n++] = eos;
        if (llama_vocab_get_add_sep(vocab)) ids[n++] = llama_vocab_sep(vocab);
        int nd = llama_tokenize(vocab, doc, (int32_t)strlen(doc), ids + n, 500, false, false);
        if (nd < 0) return 1;
        n += nd;
        if (llama_vocab_get_add_eos(vocab)) ids[n++] = eos;
        printf("%s\n  {\"query\": ", n_cases++ ? "," : "");
        json_str(line);
        printf(", \"document\": ");
        json_str(doc);
        printf(", \"ids\": [");
        for (int i = 0; i < n; i++) printf("%s%d", i ? ", " : "", ids[i]);
        struct llama_batch b = llama_batch_init(n, 0, 1);
        for (int i = 0; i < n; i++) {
            b.token[i] = ids[i];
            b.pos[i] = i;
            b.n_seq_id[i] = 1;
            b.seq_id[i][0] = 0;
            b.logits[i] = 1;
        }
        b.n_tokens = n;
        if (llama_encode(ctx, b) != 0) return 1;
        const float *e = llama_get_embeddings_seq(ctx, 0);
        if (!e) return 1;
        printf("], \"score\": [");
        for (uint32_t i = 0; i < llama_model_n_cls_out(model); i++)
            printf("%s%.8g", i ? ", " : "", e[i]);
        printf("]}");
        llama_batch_free(b);
    }
    while (!rank && fgets(line, sizeof line, stdin)) {
        line[strcspn(line, "\n")] = 0;
        int tok_only = !strncmp(line, "tok:", 4);
        char *text = line + (tok_only ? 4 : 0);
        unescape(text);
        llama_token ids[1024];
        int n = llama_tokenize(vocab, text, (int32_t)strlen(text), ids, 1024, true, false);
        if (n < 0) return 1;
        printf("%s\n  {\"text\": ", n_cases++ ? "," : "");
        json_str(text);
        printf(", \"ids\": [");
        for (int i = 0; i < n; i++) printf("%s%d", i ? ", " : "", ids[i]);
        printf("]");
        if (!tok_only) {
            struct llama_batch b = llama_batch_init(n, 0, 1);
            for (int i = 0; i < n; i++) {
                b.token[i] = ids[i];
                b.pos[i] = i;
                b.n_seq_id[i] = 1;
                b.seq_id[i][0] = 0;
                b.logits[i] = 1;
            }
            b.n_tokens = n;
            llama_memory_t mem = llama_get_memory(ctx);
            if (mem) llama_memory_clear(mem, true);
            /* BERT has no KV memory and is encoded; a generation model is decoded. */
            if ((mem ? llama_decode(ctx, b) : llama_encode(ctx, b)) != 0) return 1;
            const float *e = llama_get_embeddings_seq(ctx, 0);
            if (!e) return 1;
            double ss = 0;
            for (int i = 0; i < n_embd; i++) ss += (double)e[i] * e[i];
            double norm = ss > 0 ? 1.0 / sqrt(ss) : 0;
            printf(", \"embedding\": [");
            for (int i = 0; i < n_embd; i++) printf("%s%.8g", i ? ", " : "", (float)(e[i] * norm));
            printf("]");
            llama_batch_free(b);
        }
        printf("}");
    }
    printf("\n ]\n}\n");
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
