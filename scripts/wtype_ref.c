/* scripts/wtype_ref.c — reference continuations from llama.cpp's library, in the format of
 * ../shared/testdata/reference/NAME.json (see its README): for each case the prompt ids, the greedy
 * ids and, at every generated position, the top-5 ids with log-softmax of the raw logits; CPU,
 * f32 KV cache, no flash attention, the prompt in one batch, then one token per decode. With a KV
 * type (f16, bf16, q8_0, q4_0: llama.cpp's -ctk/-ctv) the cache is that type and flash attention
 * is on (llama.cpp needs it for a quantized V cache; its CPU flash attention then converts Q to
 * the K type's dot-product type: q8_0 for q8_0 and q4_0 K, bf16 for bf16, f16 for f16).
 * Built and run by scripts/make_wtype_refs.sh and scripts/make_kv_refs.sh against $LLAMA_CPP;
 * never part of pagellm.
 *   wtype_ref MODEL.gguf NAME [KV_TYPE] [--long] [--lora ADAPTER.gguf] > NAME.json
 * With --lora (scripts/make_arch_refs.sh) the adapter is applied at scale 1
 * (llama_adapter_lora_init, llama_set_adapters_lora) on every context.
 * The prompts are fixed pseudo-random ids (BOS 1 then ids in [3, n_vocab)), lengths 6, 18, 41;
 * with --long (scripts/make_arch_refs.sh: long enough for sliding windows) 6, 41, 100 in a
 * 256-token context. */
#include "llama.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { N_GEN = 32, TOP = 5 };

static void quiet(enum ggml_log_level level, const char *text, void *user) {
    (void)user;
    if (level >= GGML_LOG_LEVEL_ERROR) fputs(text, stderr);
}

int main(int argc, char **argv) {
    static const struct { const char *name; enum ggml_type t; } kv_types[] = {
        {"f32", GGML_TYPE_F32}, {"f16", GGML_TYPE_F16}, {"bf16", GGML_TYPE_BF16},
        {"q8_0", GGML_TYPE_Q8_0}, {"q4_0", GGML_TYPE_Q4_0}};
    const char *lora_path = NULL;
    if (argc > 4 && !strcmp(argv[argc - 2], "--lora")) {
        lora_path = argv[argc - 1];
        argc -= 2;
    }
    int kv = 0, lng = argc > 3 && !strcmp(argv[argc - 1], "--long");
    if (lng) argc--;
    if (argc == 4)
        for (kv = 4; kv > 0 && strcmp(argv[3], kv_types[kv].name); kv--) {}
    if ((argc != 3 && argc != 4) || (argc == 4 && strcmp(argv[3], kv_types[kv].name))) {
        fprintf(stderr, "usage: wtype_ref MODEL.gguf NAME [f32|f16|bf16|q8_0|q4_0] [--long] "
                        "[--lora ADAPTER.gguf]\n");
        return 2;
    }
    llama_log_set(quiet, NULL);
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    struct llama_model *model = llama_model_load_from_file(argv[1], mp);
    if (!model) return 1;
    struct llama_adapter_lora *lora = lora_path ? llama_adapter_lora_init(model, lora_path) : NULL;
    float lora_scale = 1.0f;
    if (lora_path && !lora) return 1;
    const struct llama_vocab *vocab = llama_model_get_vocab(model);
    int n_vocab = llama_vocab_n_tokens(vocab);
    static const int short_lens[3] = {6, 18, 41}, long_lens[3] = {6, 41, 100};
    const int *lens = lng ? long_lens : short_lens;
    uint32_t rng = 12345;
    printf("{\n \"model\": \"%s\",\n \"reference\": \"libllama CPU, %s KV cache%s, greedy, every "
           "step, log-softmax of raw logits\",\n \"top_k\": %d,\n \"cases\": [\n", argv[2],
           kv_types[kv].name, kv ? " (flash attention)" : "", TOP);
    for (int c = 0; c < 3; c++) {
        struct llama_context_params cp = llama_context_default_params();
        cp.n_ctx = lng ? 256 : 128;
        cp.n_batch = cp.n_ctx;
        cp.n_threads = cp.n_threads_batch = 2;
        cp.type_k = cp.type_v = kv_types[kv].t;
        cp.flash_attn_type = kv ? LLAMA_FLASH_ATTN_TYPE_ENABLED : LLAMA_FLASH_ATTN_TYPE_DISABLED;
        struct llama_context *ctx = llama_init_from_model(model, cp);
        if (!ctx) return 1;
        if (lora && llama_set_adapters_lora(ctx, &lora, 1, &lora_scale)) return 1;
        llama_token prompt[128], gen[N_GEN];
        prompt[0] = 1;
        for (int i = 1; i < lens[c]; i++) {
            rng = rng * 1103515245u + 12345u;
            prompt[i] = 3 + (int)((rng >> 8) % (uint32_t)(n_vocab - 3));
        }
        printf("  {\n   \"name\": \"rand%d\",\n   \"prompt_tokens\": [", c);
        for (int i = 0; i < lens[c]; i++) printf("%s%d", i ? ", " : "", prompt[i]);
        printf("],\n");
        struct llama_batch batch = llama_batch_get_one(prompt, lens[c]);
        char steps[N_GEN][512];
        for (int s = 0; s < N_GEN; s++) {
            if (llama_decode(ctx, batch)) return 1;
            const float *lg = llama_get_logits_ith(ctx, -1);
            double mx = -INFINITY, sum = 0;
            for (int v = 0; v < n_vocab; v++) mx = lg[v] > mx ? lg[v] : mx;
            for (int v = 0; v < n_vocab; v++) sum += exp((double)lg[v] - mx);
            double lse = mx + log(sum);
            int top[TOP];
            for (int k = 0; k < TOP; k++) {
                int best = -1;
                for (int v = 0; v < n_vocab; v++) {
                    int used = 0;
                    for (int q = 0; q < k; q++) used |= top[q] == v;
                    if (!used && (best < 0 || lg[v] > lg[best])) best = v;
                }
                top[k] = best;
            }
            int n = snprintf(steps[s], sizeof steps[s], "    {\"id\": %d, \"top\": [", top[0]);
            for (int k = 0; k < TOP; k++)
                n += snprintf(steps[s] + n, sizeof steps[s] - (size_t)n, "%s[%d, %.6f]", k ? ", " : "",
                              top[k], lg[top[k]] - lse);
            snprintf(steps[s] + n, sizeof steps[s] - (size_t)n, "]}");
            gen[s] = top[0];
            batch = llama_batch_get_one(&gen[s], 1);
        }
        printf("   \"greedy_tokens\": [");
        for (int s = 0; s < N_GEN; s++) printf("%s%d", s ? ", " : "", gen[s]);
        printf("],\n   \"steps\": [\n");
        for (int s = 0; s < N_GEN; s++) printf("%s%s\n", steps[s], s + 1 < N_GEN ? "," : "");
        printf("   ]\n  }%s\n", c < 2 ? "," : "");
        llama_free(ctx);
    }
    printf(" ]\n}\n");
    llama_model_free(model);
    return 0;
}
