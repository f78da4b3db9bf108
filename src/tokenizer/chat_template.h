/* tokenizer/chat_template — turning a list of chat messages into the prompt text a model expects.
 *
 * A GGUF carries its Jinja chat template in `tokenizer.chat_template`. pagellm does not run Jinja:
 * like llama.cpp's built-in templates, it RECOGNISES the template by distinctive substrings and
 * applies a hand-written formatter for that family. Families (name for --chat-template in quotes):
 *
 *   "chatml"        <|im_start|>ROLE\nCONTENT<|im_end|>\n ...  prompt <|im_start|>assistant\n
 *                   (Qwen, OpenHermes, ...)
 *   "llama2"        Meta's Llama 2 chat:
 *                   BOS[INST] <<SYS>>\nSYS\n<</SYS>>\n\nUSER [/INST] ANSWER EOS
 *                   BOS[INST] USER [/INST]
 *                   (contents stripped, as the official template does)
 *   "llama2-nosys"  [INST] without a <<SYS>> block (Mistral-7B-Instruct v0.1/v0.2 era): a system
 *                   message is put as "SYS\n" in front of the next user message; no BOS between
 *                   turns: BOS[INST] SYS\nUSER [/INST]ANSWEREOS[INST] USER [/INST]
 *   "llama3"        BOS<|start_header_id|>ROLE<|end_header_id|>\n\nCONTENT<|eot_id|> ... (trimmed)
 *   "mistral-v1"    BOS [INST] SYS\n\nUSER [/INST] ANSWEREOS [INST] USER [/INST]
 *   "mistral-v3"    BOS[INST] SYS\n\nUSER[/INST] ANSWEREOS[INST] USER[/INST]  (answers trimmed)
 *   "mistral-v3-tekken"  BOS[INST]SYS\n\nUSER[/INST]ANSWEREOS[INST]USER[/INST]
 *   "mistral-v7"    BOS[SYSTEM_PROMPT] SYS[/SYSTEM_PROMPT][INST] USER[/INST] ANSWEREOS ...
 *   "mistral-v7-tekken"  the same without the spaces after [SYSTEM_PROMPT], [INST] and [/INST]
 *   "zephyr"        <|ROLE|>\nCONTENTEOS\n ...  prompt <|assistant|>\n
 *   "phi3"          <|ROLE|>\nCONTENT<|end|>\n ...  prompt <|assistant|>\n
 *   "gemma"         BOS<start_of_turn>user\nCONTENT<end_of_turn>\n<start_of_turn>model\n...
 *                   (contents trimmed; the assistant role is called "model"; Gemma has no system
 *                   role: system text is put in front of the next user turn followed by "\n\n")
 *
 * Detection (pl_chat_classify) follows llama.cpp's llm_chat_detect_template for these families:
 * an exact family name; "<|im_start|>" -> chatml; "[INST]" (or a template starting "mistral") ->
 * "[SYSTEM_PROMPT]" v7, "[AVAILABLE_TOOLS]" or "' [INST] ' + system_message" -> v1 (" [INST]"),
 * v3-tekken ("\"[INST]\"") or v3, else "<<SYS>>" -> llama2, else llama2-nosys;
 * "<|assistant|>" and "<|end|>" -> phi3; "<|user|>" with "eos_token" or "<|endoftext|>" ->
 * zephyr; "<start_of_turn>" -> gemma; "<|start_header_id|>" and "<|end_header_id|>" -> llama3.
 * Templates of other families that merely share a marker (Phi-4's <|im_sep|>, SmolVLM's
 * <end_of_utterance>, ChatGLM's [gMASK]) are NOT claimed: they classify as unknown.
 *
 * FALLBACK: a file without a template, or with one that is not recognised, is formatted as
 * ChatML (PL_CHAT_FALLBACK), which is what llama.cpp falls back to. pl_chat_detect applies the
 * fallback; pl_chat_classify tells whether it was needed (so the caller can warn).
 *
 * BOS: the text produced is meant to be tokenized with parse_special = 1 and add_special = 0, so
 * it must contain the BOS token exactly where the model's own template puts it. Decision: the
 * output equals what the family's official Jinja template renders, including `bos_token` where
 * that template writes it. Families whose templates start with bos_token (llama2, llama2-nosys,
 * llama3, all mistral variants, gemma) begin with bos_text; Meta's llama2 also repeats it before
 * every later [INST]. chatml (Qwen), zephyr and phi3 (Phi-3.5 / Phi-3-medium) templates do not
 * write it, so neither do we. bos_text NULL or "" means: write no BOS anywhere (e.g. a vocabulary
 * without one). eos_text (llama2, llama2-nosys, mistral, zephyr: the end of an answer) defaults to
 * "</s>" when NULL.
 *
 * Roles: "system", "user" and "assistant" only; anything else is refused with a message naming
 * the role and the message index. An empty message list is refused. add_generation_prompt adds
 * the opening of the assistant's turn where the family has one (chatml, llama3, zephyr, phi3,
 * gemma); the [INST] families end a user turn with [/INST], which already is that opening.
 *
 * Differences from llama.cpp's formatter, on purpose: llama2 follows the official Meta template
 * (" ANSWER " between [/INST] and EOS, stripped contents, BOS before every [INST]) where
 * llama.cpp's legacy code writes "[/INST]ANSWER</s>"; gemma joins several system messages with
 * "\n\n" and keeps a trailing system message as a last user turn instead of dropping it;
 * HuggingFaceH4/zephyr-7b-beta's template (<|user|> ... eos_token, no literal "</s>") is
 * recognised as zephyr, where llama.cpp takes it for GLM-Edge.
 */
#ifndef PL_TOKENIZER_CHAT_TEMPLATE_H
#define PL_TOKENIZER_CHAT_TEMPLATE_H

#include "base/status.h"

#include <stddef.h>

typedef struct {
    const char *role;    /* "system", "user" or "assistant" (NUL-terminated) */
    const char *content; /* NUL-terminated UTF-8 */
} pl_chat_message;

typedef enum {
    PL_CHAT_UNKNOWN = 0,
    PL_CHAT_CHATML,
    PL_CHAT_LLAMA2,
    PL_CHAT_LLAMA2_NOSYS,
    PL_CHAT_LLAMA3,
    PL_CHAT_MISTRAL_V1,
    PL_CHAT_MISTRAL_V3,
    PL_CHAT_MISTRAL_V3_TEKKEN,
    PL_CHAT_MISTRAL_V7,
    PL_CHAT_MISTRAL_V7_TEKKEN,
    PL_CHAT_ZEPHYR,
    PL_CHAT_PHI3,
    PL_CHAT_GEMMA,
    PL_CHAT_COUNT, /* one past the last format */
} pl_chat_format;

#define PL_CHAT_FALLBACK PL_CHAT_CHATML

/* The family of a template (len bytes, need not be NUL-terminated; NULL or len 0 = no
 * template): PL_CHAT_UNKNOWN when it is not recognised. A template that is exactly a family name
 * ("llama3") gives that family. */
pl_chat_format pl_chat_classify(const char *tmpl, size_t len);
/* pl_chat_classify with the fallback applied: never PL_CHAT_UNKNOWN. */
pl_chat_format pl_chat_detect(const char *tmpl, size_t len);

/* A family by its name (the quoted names above); PL_ERR_INVALID_ARG naming the name and listing
 * the valid ones otherwise. */
pl_status pl_chat_format_by_name(const char *name, pl_chat_format *out);
/* "chatml", "llama3", ...; "unknown" for PL_CHAT_UNKNOWN and out-of-range values. */
const char *pl_chat_format_name(pl_chat_format f);
/* 1 if the family's text starts with bos_text (see BOS above). */
int pl_chat_format_adds_bos(pl_chat_format f);

/* Format n messages. *out is malloc'ed and NUL-terminated (free it). PL_CHAT_UNKNOWN is
 * formatted as the fallback. Errors: PL_ERR_INVALID_ARG for n == 0, a NULL role or content, or a
 * role other than system/user/assistant; PL_ERR_NOMEM. On error *out is NULL. */
pl_status pl_chat_apply(pl_chat_format f, const pl_chat_message *msgs, size_t n,
                        int add_generation_prompt, const char *bos_text, const char *eos_text,
                        char **out);

#endif
