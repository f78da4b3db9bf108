/* cli/generate_batch — `pagellm generate --input F --output F`: an offline batch through the
 * engine, results in input order, progress on stderr. */
#ifndef PL_CLI_GENERATE_BATCH_H
#define PL_CLI_GENERATE_BATCH_H

#include "pagellm.h"
#include "server/server.h"

#include <jansson.h>

/* Each input line is a self-contained request in the shape of OpenAI's completions API (with
 * vLLM's extras, `prompt_ids`, `beam_width`, and `parse_special`), with the API's defaults
 * (max_tokens 16, temperature 1, parse_special false). A bad line gets {"index": i, "error": "..."} and the batch goes on. Returns the
 * exit code: 0 when every line succeeded, 1 otherwise. */
int pl_gen_batch(pl_engine *e, const char *input, const char *output, int verbose);

/* Shared with the single-prompt path. */
json_t *pl_gen_choice_json(const pl_server_choice *c, int with_logprobs);
json_t *pl_gen_prompt_logprobs_json(const pl_request_output *o);

#endif
