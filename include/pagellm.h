/* pagellm.h — the embeddable C API of pagellm: an LLM inference engine with a paged KV cache,
 * continuous batching, preemption, parallel sampling, beam search and automatic prefix caching.
 *
 * Threads. One thread drives the engine (pl_engine_step or pl_engine_run). Any thread may add
 * requests, abort them and poll their outputs while it does: those calls only touch the
 * engine's inbox and the request's output channel (a mutex and a condition variable each).
 *
 * Outputs arrive as deltas: each poll returns what was produced since the previous poll (new
 * token ids, a text delta that never ends inside a UTF-8 character or a possible stop string,
 * their log-probabilities) and, once, the finish reason of each completion. Beam search and
 * best_of > n deliver their completions only when the request finishes (the ranking is not
 * known before). A finished request's output must still be polled (or the request released)
 * to free it.
 *
 * Example (tests/e2e/test_install.sh compiles and runs it against the installed library, as
 * the body of main() after #include <stdio.h> and <pagellm.h>; link with
 * `pkg-config --static --libs pagellm`):
 *
 *     pl_engine_config cfg;
 *     pl_engine_config_default(&cfg);
 *     cfg.model_path = "stories260K.gguf";
 *     pl_engine *e;
 *     if (pl_engine_create(&cfg, &e) != PL_OK) { fprintf(stderr, "%s\n", pl_last_error()); return 1; }
 *     pl_request_params p;
 *     pl_request_params_default(&p);
 *     p.max_tokens = 32;
 *     p.sampling.temperature = 0;
 *     uint64_t id;
 *     pl_engine_add_request(e, "Once upon a time", NULL, 0, &p, &id);
 *     pl_engine_run(e);                          // or pl_engine_step() in a loop
 *     pl_request_output *out;
 *     while (pl_engine_poll(e, id, 0, &out) == PL_OK) {
 *         for (int i = 0; i < out->n_deltas; i++) fwrite(out->deltas[i].text, 1,
 *                                                       out->deltas[i].text_len, stdout);
 *         int done = out->finished;
 *         pl_request_output_destroy(out);
 *         if (done) break;
 *     }
 *     pl_engine_destroy(e);
 */
#ifndef PAGELLM_H
#define PAGELLM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- status ------------------------------------------------------------------------------- */

/* Every call that can fail returns a pl_status and leaves a message naming the problem (file,
 * key, field or parameter; what was expected; what was found) for the calling thread. */
typedef enum {
    PL_OK = 0,
    PL_ERR_INVALID_ARG,   /* a parameter or flag is out of range or malformed */
    PL_ERR_IO,            /* open/read/mmap failed */
    PL_ERR_FORMAT,        /* a file's contents are malformed (bad magic, truncated, out of bounds) */
    PL_ERR_UNSUPPORTED,   /* well-formed but not supported: architecture, tensor type, tokenizer */
    PL_ERR_NOT_FOUND,     /* a key, tensor, model, token or request that should exist does not */
    PL_ERR_NOMEM,         /* an allocation failed or a budget is too small */
    PL_ERR_CAPACITY,      /* a bounded resource (KV blocks, queue) is full; retry may succeed */
    PL_ERR_INTERNAL,
    PL_ERR_TIMEOUT,       /* a wait ended with nothing new (pl_engine_poll) */
} pl_status;

/* The calling thread's message for its last failure. */
const char *pl_last_error(void);
void pl_clear_error(void);
/* "ok", "invalid argument", ... */
const char *pl_status_name(pl_status st);

/* ---- limits: what the engine accepts (the server and CLI check against the same values) --- */

enum {
    PL_MAX_LOGPROBS = 20,     /* logprobs / prompt_logprobs: top-k per position */
    PL_MAX_BEST_OF = 64,      /* n and best_of (beam width) */
    PL_MAX_STOP_STRINGS = 64, /* stop strings per request */
    PL_MAX_LOGIT_BIAS = 1024, /* logit_bias entries per request */
    PL_MAX_SPECULATIVE_TOKENS = 16, /* num_speculative_tokens */
    PL_MAX_FORCE_TOKENS = 64, /* ids of force_end's open and close sequences */
};

/* logit_bias values are in [-PL_LOGIT_BIAS_LIMIT, PL_LOGIT_BIAS_LIMIT] (OpenAI's range). */
#define PL_LOGIT_BIAS_LIMIT 100.0f

/* ---- sampling ----------------------------------------------------------------------------- */

/* One logit_bias entry: `bias` is added to token `id`'s logit (OpenAI semantics). */
typedef struct {
    int32_t id;
    float bias;
} pl_logit_bias;

/* Applied in vLLM's order: logit_bias added to the raw logits first (so it steers greedy too),
 * then penalties, then temperature, then the top-k, top-p and min-p masks, then a draw from the
 * request's own RNG. Reported log-probabilities stay those of the raw logits. */
typedef struct {
    float temperature;        /* 0 = greedy (1) */
    int32_t top_k;            /* <= 0: off (0) */
    float top_p;              /* 1: off (1) */
    float min_p;              /* 0: off (0) */
    float repetition_penalty; /* 1: off (1) */
    float presence_penalty;   /* 0: off (0) */
    float frequency_penalty;  /* 0: off (0) */
    const pl_logit_bias *logit_bias; /* [n_logit_bias] (copied at add; NULL: none) */
    int32_t n_logit_bias;     /* <= PL_MAX_LOGIT_BIAS; an id given twice gets both biases */
} pl_sampling_params;

void pl_sampling_params_default(pl_sampling_params *p);
/* PL_ERR_INVALID_ARG with a message naming the parameter when one is out of range (the engine
 * checks this too when a request is added, and also that logit_bias ids are below the model's
 * vocabulary size, which this call does not know). */
pl_status pl_sampling_params_validate(const pl_sampling_params *p);

/* A token and its log-probability (log-softmax of the raw logits). */
typedef struct {
    int32_t id;
    float logprob;
} pl_token_logprob;

/* ---- the engine --------------------------------------------------------------------------- */

typedef enum { PL_PREEMPT_RECOMPUTE = 0, PL_PREEMPT_SWAP = 1 } pl_preemption_mode;

/* How sequences get KV memory. PAGED: blocks on demand, shared (PagedAttention). CONTIGUOUS: the
 * paper's Orca baselines, for benchmarks: each sequence reserves one contiguous run of blocks at
 * admission, as much as pl_reserve_policy says; nothing is shared (prefix caching is turned off,
 * requests with n/best_of > 1 or beam search are refused) and preemption is by recompute only. */
/* VATTENTION (issue 12): vAttention's layout. Each running sequence owns a request slot, one
 * virtually contiguous region per layer's K and V inside one address-space reservation, and
 * physical pages (kv_page_size) are mapped under it as it grows, from a pool bounded by
 * kv_cache_memory; a background thread maps ahead of the step (docs/DESIGN.md). Nothing is
 * shared, as with CONTIGUOUS; preemption is by recompute. */
typedef enum {
    PL_KV_LAYOUT_PAGED = 0,
    PL_KV_LAYOUT_CONTIGUOUS = 1,
    PL_KV_LAYOUT_VATTENTION = 2,
} pl_kv_layout_mode;
/* What the paged KV cache stores (vLLM's --kv-cache-dtype). bf16 rounds to nearest even; q8_0
 * and q4_0 store each 32 values of one head's K or V row as GGML blocks (an f16 scale, then
 * int8 or 4-bit quants) and need head_dim to be a multiple of 32, as llama.cpp's -ctk/-ctv. */
typedef enum {
    PL_KV_CACHE_F16 = 0,
    PL_KV_CACHE_F32 = 1,
    PL_KV_CACHE_BF16 = 2,
    PL_KV_CACHE_Q8_0 = 3,
    PL_KV_CACHE_Q4_0 = 4,
} pl_kv_cache_dtype;

/* How F16 weight matrices are kept at load (--f16-weights). BF16: each rounded to the nearest
 * bf16 (3 of f16's 10 mantissa bits dropped; lossy, docs/ACCURACY.md) so that prefill runs
 * AVX-512 BF16's vdpbf16ps, twice the f32 FMA rate; needs the avx512 kernel level (a CPU with
 * AVX512-BF16), refused otherwise. The token embedding lookup keeps its f16 rows. DEFAULT: as
 * the environment variable PAGELLM_F16_WEIGHTS says (f16 or bf16; unset: f16). */
typedef enum {
    PL_F16_WEIGHTS_DEFAULT = 0,
    PL_F16_WEIGHTS_F16 = 1,
    PL_F16_WEIGHTS_BF16 = 2,
} pl_f16_weights;

/* "f16", "f32", "bf16", "q8_0", "q4_0"; NULL for an unknown value. */
const char *pl_kv_cache_dtype_name(pl_kv_cache_dtype t);

typedef enum {
    PL_RESERVE_MAX = 0,    /* the maximum model length */
    PL_RESERVE_POW2 = 1,   /* the next power of two >= prompt + max_tokens */
    PL_RESERVE_ORACLE = 2, /* exactly prompt + max_tokens */
} pl_reserve_policy;

typedef struct {
    const char *model_path;          /* GGUF file */
    int32_t block_size;              /* tokens per KV block: power of two 1..256 (16); with
                                        kv_layout vattention a block is a page, and
                                        pl_engine_get_config gives its tokens */
    uint64_t kv_cache_memory;        /* KV budget in bytes; sets the number of blocks. 0 (the
                                        default): kv_cache_memory_fraction if set, else 1 GiB */
    double kv_cache_memory_fraction; /* (0, 1]: the KV budget is this fraction of the available
                                        RAM (MemAvailable in /proc/meminfo) after the weights
                                        (vLLM's --gpu-memory-utilization on a CPU); used only when
                                        kv_cache_memory is 0 (0: off) */
    pl_kv_cache_dtype kv_cache_dtype; /* f16 (default), f32, bf16, q8_0 or q4_0 */
    pl_f16_weights f16_weights;      /* F16 matrices kept as f16 or converted to bf16 (above);
                                        the draft model's too */
    int kv_cache_f32;                /* 1: f32 KV whatever kv_cache_dtype says (older name) */
    uint64_t swap_space;             /* swap pool bytes (0 = none) */
    const char *swap_path;           /* swap pool file (NULL = anonymous memory) */
    pl_preemption_mode preemption_mode;
    int32_t max_num_seqs;            /* sequences in one step (128) */
    int32_t max_num_batched_tokens;  /* tokens in one step (512) */
    int32_t max_model_len;           /* prompt + output limit (0 = the model's context) */
    int enable_prefix_caching;       /* automatic prefix caching (1) */
    int threads;                     /* worker threads (0 = one per core) */
    int32_t max_waiting;             /* inbox + waiting queue bound; 0 = unbounded */
    pl_kv_layout_mode kv_layout;     /* paged (default) or contiguous (a benchmark baseline) */
    pl_reserve_policy reserve;       /* contiguous only: how much a sequence reserves (max) */
    uint64_t kv_page_size;           /* vattention: bytes of one physical page, 4096 (0 = this),
                                        65536 or 2 MiB (huge pages; an error if the system has
                                        none reserved) */
    int vattn_no_overlap;            /* vattention ablations: 1 turns off mapping the next */
    int vattn_no_deferred_reclaim;   /* step's pages in the background / keeping a finished */
    int vattn_no_eager;              /* request's pages for the next one / pre-mapping a free
                                        slot before a request arrives */
    int vattn_share;                 /* vattention: pages of a memfd, so a request's sequences
                                        (n, best_of, beam) map their common pages once (slower
                                        mapping, one memory map per page) */
    int kv_groups_off;               /* 1: a mixed model (some layers with a sliding window)
                                        keeps every block, as one table per sequence; 0: its
                                        window layers' blocks are released (KV cache groups,
                                        or gemma3 / gemma4's layer kinds: a pool per kind) */
    /* Speculative decoding (vLLM's flags): one proposer, or none. */
    const char *speculative_model;   /* draft GGUF sharing the target's vocabulary (NULL: none) */
    int speculative_ngram;           /* 1: prompt-lookup proposals (n-gram match in the
                                        sequence's own tokens) */
    int32_t num_speculative_tokens;  /* proposals per sequence and step, 1..16 (0: 4 when a
                                        proposer is set) */
    int32_t ngram_min, ngram_max;    /* n-gram lengths tried, longest first (0: 1 and 4) */
    int32_t speculative_max_batch;   /* no speculation in a step that decodes more sequences
                                        than this (0: the measured default, 4; < 0: never off);
                                        pl_engine_get_config shows the speculative fields with
                                        their defaults resolved */
    int32_t pooling;                 /* embeddings from a generation model (llama.cpp's
                                        --pooling): 1 mean, 2 first token, 3 last token of the
                                        final-normed hidden states; 0 (default): none, the model
                                        then serves generation only. An embedding model (bert)
                                        pools as its GGUF says unless this is set. */
    int32_t tensor_parallel_size;    /* > 1: this process is rank 0 of an MPI job of that many
                                        processes, each holding a shard of every layer (issue 13;
                                        pl_tp_init first; the others run pl_tp_worker_run on the
                                        same config). The KV budget is per rank. 0 or 1: one
                                        process, no MPI. */
    int32_t max_lora_rank;           /* > 0: LoRA adapters of rank up to this can be loaded
                                        (pl_engine_load_lora; vLLM's --max-lora-rank); 0: none.
                                        Not with tensor_parallel_size > 1. */
} pl_engine_config;

void pl_engine_config_default(pl_engine_config *c);

/* Structured output: the completion's text must match a constraint, enforced while decoding
 * (tokens that cannot continue a match are masked before sampling; end-of-generation only where
 * the text so far is a complete match). Compiled in pl_engine_add_request, which returns
 * PL_ERR_INVALID_ARG with a message naming the problem ("json_schema: at '#/properties/x': ...",
 * "regex: column 3: ...", "grammar: line 2: ...") for an invalid one. Not with beam search. */
typedef enum {
    PL_CONSTRAINT_NONE = 0,
    PL_CONSTRAINT_JSON_SCHEMA,  /* constraint_text: a JSON schema (docs/SERVER.md: the subset) */
    PL_CONSTRAINT_JSON_OBJECT,  /* any JSON object (constraint_text unused) */
    PL_CONSTRAINT_REGEX,        /* constraint_text: a regular expression; the whole text matches */
    PL_CONSTRAINT_CHOICE,       /* exactly one of constraint_choices */
    PL_CONSTRAINT_GRAMMAR,      /* constraint_text: a GBNF grammar (llama.cpp's syntax), rule root */
} pl_constraint_kind;

/* A forced end of a region (a thinking budget, issue 33). The region is open after the last
 * occurrence of `open` in the output not followed by a complete `close` (or from the first output
 * token when open_in_prompt says the prompt left it open and the output has neither). Once
 * `after` output tokens were generated inside it, the next tokens are close's ids in place of
 * sampled ones, one per step (a tail of the output that already spells a prefix of close is
 * completed, not repeated). A forced token takes the sampled token's path: it is appended, its
 * K/V computed by the next step, stop checks, detokenization and structured output see it, and
 * its logprob is the model's for it, flagged in pl_completion_delta.forced. Active when n_close
 * > 0; then open and close are 1..PL_MAX_FORCE_TOKENS ids of the vocabulary and after >= 0.
 * Refused with beam search; with speculative decoding a forced token is verified like a
 * sampled one (a proposal stands only if it equals the forced id). */
typedef struct {
    const int32_t *open;             /* the opening tag's ids (copied at add) */
    int32_t n_open;
    const int32_t *close;            /* the closing tag's ids (copied at add) */
    int32_t n_close;
    int32_t after;                   /* output tokens allowed inside the region (the budget) */
    int open_in_prompt;              /* 1: the region is open when the output starts */
} pl_force_end;

typedef struct {
    pl_sampling_params sampling;     /* temperature, top_k, top_p, min_p, penalties */
    int has_seed;
    uint64_t seed;
    int32_t n;                       /* completions returned (1) */
    int32_t best_of;                 /* completions generated; the n best are returned (= n) */
    int use_beam_search;             /* beam search with beam width best_of */
    float length_penalty;            /* beam score = cum_logprob / len^length_penalty (1) */
    int early_stopping;              /* beam: 0 = heuristic, 1 = stop at best_of finished */
    int32_t max_tokens;              /* (16) */
    int32_t min_tokens;              /* EOS and stop ids are ignored before this many (0) */
    int ignore_eos;
    const char *const *stop;         /* stop strings (copied at add) */
    int32_t n_stop;
    const int32_t *stop_token_ids;   /* (copied at add) */
    int32_t n_stop_token_ids;
    int include_stop_str_in_output;
    int skip_special_tokens;         /* (1) */
    int32_t logprobs;                /* top-k log-probabilities per output token (-1 = none) */
    int32_t prompt_logprobs;         /* per prompt token (-1 = none) */
    int add_special;                 /* text prompts: add BOS as the model says (1) */
    int parse_special;               /* text prompts: match CONTROL tokens' text as those tokens
                                        (0); USER_DEFINED tokens always match */
    uint64_t cache_salt;             /* extra prefix-cache key (0) */
    const char *lora;                /* the LoRA adapter to run under, by its loaded name (read
                                        during add only; NULL: the base model). Its KV blocks
                                        are cached under the adapter: never shared with the base
                                        model's or another adapter's */
    pl_constraint_kind constraint;   /* structured output (NONE) */
    const char *constraint_text;     /* schema, regex or grammar (read during add only) */
    const char *const *constraint_choices; /* CHOICE: the strings (read during add only) */
    int32_t n_constraint_choices;
    pl_force_end force_end;          /* a forced end of a region, e.g. a thinking budget (off:
                                        n_close = 0) */
    int embedding;                   /* 1: an embedding request (0). Only when the engine has a
                                        pooling type (pl_engine_pooling: an embedding model such
                                        as bert, or config.pooling): the whole input runs in one
                                        step, prefill only, nothing stays in the KV cache, and
                                        the finished output carries the pooled, L2-normalized
                                        vector. Only the tokenization fields above apply
                                        (add_special, parse_special). An embedding model (bert)
                                        serves nothing else. */
} pl_request_params;

void pl_request_params_default(pl_request_params *p);

typedef enum {
    PL_FINISH_NONE = 0,   /* still running */
    PL_FINISH_STOP,       /* EOS, a stop token id or a stop string */
    PL_FINISH_LENGTH,     /* max_tokens or max_model_len */
    PL_FINISH_ABORT,      /* aborted */
    PL_FINISH_ERROR,      /* refused or failed (message in pl_request_output.error) */
} pl_finish_reason;

const char *pl_finish_reason_name(pl_finish_reason r); /* "stop", "length", "abort", "error" */

typedef struct {
    int32_t index;               /* which completion: 0 .. n-1 */
    int32_t n_tokens;            /* new tokens in this delta */
    int32_t *token_ids;          /* [n_tokens] */
    char *text;                  /* the text delta (UTF-8, NUL-terminated) */
    size_t text_len;
    int32_t n_top;               /* log-probabilities per token: top n_top (+ chosen), or 0 */
    float *token_logprobs;       /* [n_tokens] logprob of each chosen token, or NULL */
    pl_token_logprob *top;       /* [n_tokens][n_top + 1]: top n_top, then the chosen token */
    uint8_t *forced;             /* [n_tokens]: 1 where force_end put the token in place of a
                                    sampled one; NULL when the request has no force_end */
    pl_finish_reason finish;     /* set in the delta that ends the completion */
    int32_t stop_token;          /* the stop token id that ended it, or -1 */
    char *stop_str;              /* the stop string that ended it, or NULL */
    double cumulative_logprob;   /* of the whole completion so far; NaN unless logprobs were
                                    asked or best_of / beam search ranked by it */
} pl_completion_delta;

typedef struct {
    uint64_t id;
    int32_t n_deltas;
    pl_completion_delta *deltas;
    int finished;                /* every completion has finished */
    char *error;                 /* when a completion finished with PL_FINISH_ERROR */
    int32_t n_prompt_tokens;
    int32_t *prompt_ids;         /* [n_prompt_tokens] in the first output only, else NULL */
    int32_t n_cached_tokens;     /* prompt tokens found in the prefix cache */
    int32_t n_prompt_top;        /* prompt logprobs: top n per position (0 = not asked) */
    pl_token_logprob *prompt_top;/* [n_prompt_tokens][n_prompt_top + 1], position 0 unused */
    int32_t n_output_tokens;     /* total over completions so far */
    double arrival_time, first_token_time, finish_time; /* seconds (monotonic clock) */
    double first_scheduled_time;  /* when a step first ran it (0: never, e.g. aborted waiting);
                                     times are set in the finished output only */
    int32_t n_embd;              /* embedding requests: the vector's length (finished output) */
    float *embedding;            /* [n_embd] pooled and L2-normalized, or NULL */
} pl_request_output;

void pl_request_output_destroy(pl_request_output *o);

typedef struct {
    int32_t running, waiting, swapped;   /* sequence groups */
    int32_t blocks_total, blocks_used, blocks_cached, swap_total, swap_used;
    double kv_usage;                     /* blocks_used / blocks_total */
    double waste;                        /* 1 - tokens stored / used block capacity */
    int64_t tokens_stored;
    uint64_t prefix_queries, prefix_hits;/* prompt tokens */
    uint64_t preemptions, swaps_out;     /* swaps_out: groups swapped out to the swap pool */
    int32_t sliding_window;              /* the window behind which blocks are released (every
                                            layer windowed, KV cache groups, layer kinds), or 0 */
    uint64_t window_freed_blocks;        /* blocks returned to the pool because their tokens
                                            left the sliding window of every layer (layer kinds:
                                            of the window layers) */
    int32_t window_blocks_total;         /* layer kinds (Gemma 3 / 4): the window layers' own
                                            pool (blocks_total is the full layers'), else 0 */
    int32_t window_blocks_used;          /* layer kinds: the window pool's blocks referenced by
                                            sequences (kv_usage is the full pool's), else 0 */
    double window_kv_usage;              /* window_blocks_used / window_blocks_total, else 0 */
    int32_t blocks_all_full;             /* layer kinds: the blocks the same budget holds with
                                            every layer keeping every block, else 0 */
    uint64_t prompt_tokens, generation_tokens; /* computed / generated so far */
    uint64_t requests_finished, steps;
    double step_seconds;                 /* wall time spent in pl_engine_step that ran the model
                                            (its KV snapshots included), summed over `steps` */
    double step_cpu_seconds;             /* the engine thread's CPU time in those steps (its
                                            own share only: worker threads not counted) */
    uint64_t spec_drafts;                /* speculating sequence-steps (proposals verified) */
    uint64_t spec_draft_tokens;          /* proposals made (vLLM: num_draft_tokens) */
    uint64_t spec_accepted_tokens;       /* proposals accepted (vLLM: num_accepted_tokens) */
    uint64_t spec_off_steps;             /* steps that decoded too many sequences to speculate */
    uint64_t constrained_tokens;         /* tokens sampled under a structured-output constraint */
    double constrain_seconds;            /* engine-thread time masking logits and advancing the
                                            constraints' automata for them */
    uint64_t constrain_mask_misses;      /* allowed-token sets computed (not found in the cache) */
    uint64_t kv_pictures;                /* KV pictures published (pl_engine_kv_snapshot) */
    double kv_picture_seconds;           /* engine-thread time spent publishing them */
    /* kv-layout vattention only (else 0). Pages are physical pages of kv_page_size bytes. */
    uint64_t vattn_pages_mapped_sync;    /* mapped on the critical path (at a step's start) */
    uint64_t vattn_pages_mapped_bg;      /* mapped by the background mapper thread */
    uint64_t vattn_pages_unmapped;       /* given back (either thread) */
    uint64_t vattn_slots_acquired;       /* requests given a slot */
    uint64_t vattn_slots_reused;         /* of those, slots that still had pages mapped */
    double vattn_map_seconds;            /* engine-thread time mapping / unmapping in steps */
    int64_t vattn_pages_committed;       /* pages mapped now (needed + cached) */
    int32_t lora_adapters;               /* LoRA adapters loaded now */
    uint64_t lora_requests;              /* requests admitted under an adapter so far */
} pl_engine_stats;

typedef struct pl_engine pl_engine;

pl_status pl_engine_create(const pl_engine_config *c, pl_engine **out);
void pl_engine_destroy(pl_engine *e);

/* Tensor parallelism over MPI (docs/DISTRIBUTED.md). Every process of `mpirun -np n` calls
 * pl_tp_init(n) first (it initialises MPI and checks the job has n processes; PL_ERR_UNSUPPORTED
 * in a build without MPI). Then rank 0 creates its engine with tensor_parallel_size = n and uses
 * it as any engine; every other rank calls pl_tp_worker_run with the same config, which serves
 * rank 0's steps and returns when rank 0's engine is destroyed (or with the failure that ended
 * it). A worker whose f16_weights (or PAGELLM_F16_WEIGHTS) resolves to another mode than rank
 * 0's refuses, naming both, and every rank fails. MPI is finalized at exit. */
pl_status pl_tp_init(int32_t n);
int32_t pl_tp_rank(void);           /* 0 before pl_tp_init */
pl_status pl_tp_worker_run(const pl_engine_config *c);

/* Add a request: text (tokenized with the model's tokenizer) or token ids (text NULL).
 * Validates everything (parameters, ids, length against max_model_len and the KV pool) and
 * returns PL_ERR_INVALID_ARG with a message naming the problem, PL_ERR_CAPACITY when the
 * waiting queue is full, PL_ERR_NOT_FOUND naming params.lora when no adapter of that name is
 * loaded. */
pl_status pl_engine_add_request(pl_engine *e, const char *text, const int32_t *ids, size_t n_ids,
                                const pl_request_params *p, uint64_t *id);
/* LoRA adapters (GGUF as llama.cpp's convert_lora_to_gguf writes them; config.max_lora_rank >
 * 0), any thread. load: check `path` against the model and list it under `name`
 * (PL_ERR_INVALID_ARG for a name in use, another base model, a shape or rank; PL_ERR_FORMAT,
 * PL_ERR_UNSUPPORTED naming the tensor); its output is W x + scale * alpha / rank * B (A x).
 * unload: unlist it (PL_ERR_NOT_FOUND naming it); requests running under it finish under it.
 * list: copies of up to cap entries; returns how many are loaded. */
typedef struct {
    char name[128];
    char path[1024];
} pl_lora_info;
pl_status pl_engine_load_lora(pl_engine *e, const char *name, const char *path, float scale);
pl_status pl_engine_unload_lora(pl_engine *e, const char *name);
int32_t pl_engine_list_loras(pl_engine *e, pl_lora_info *out, int32_t cap);

/* Abort: finished with PL_FINISH_ABORT at the next step; its blocks are freed then. */
void pl_engine_abort(pl_engine *e, uint64_t id);
/* Forget a request: abort it if running and drop its outputs (for clients that went away). */
void pl_engine_release(pl_engine *e, uint64_t id);

/* One iteration: admit, schedule, run one forward step, sample, emit outputs. */
pl_status pl_engine_step(pl_engine *e);
/* Step until no request is waiting, running or swapped. */
pl_status pl_engine_run(pl_engine *e);
int pl_engine_has_work(pl_engine *e);
/* Block until work arrives or timeout_ms passes (< 0: forever). For an engine thread's idle loop. */
void pl_engine_wait_for_work(pl_engine *e, int timeout_ms);

/* What request `id` produced since the last poll. timeout_ms 0: do not wait; > 0 wait up to that
 * for something new; < 0 wait until something new. PL_ERR_NOT_FOUND for an unknown or already
 * fully consumed request, PL_ERR_TIMEOUT when the wait ended with nothing new, PL_ERR_NOMEM
 * when the output could not be allocated (nothing is lost: poll again). The output belongs to the
 * caller (pl_request_output_destroy). After the output with finished = 1 the request is gone. */
pl_status pl_engine_poll(pl_engine *e, uint64_t id, int timeout_ms, pl_request_output **out);

void pl_engine_get_stats(pl_engine *e, pl_engine_stats *s);

/* ---- a picture of the KV cache, for monitoring (GET /v1/kv/blocks, the web UI) ----
 *
 * The engine thread publishes it at the end of a step, and only while someone asked for one in
 * the last two seconds: one byte per block copied into the back half of a double buffer, then
 * swapped in under a short lock. Readers copy the front half under that lock; the step never
 * waits for a reader's JSON or socket. */
typedef enum {
    PL_KV_BLOCK_FREE = 0,    /* primary or swap block: ref 0, holds nothing */
    PL_KV_BLOCK_CACHED = 1,  /* primary: ref 0 but still holds a prefix-cache hash (can be hit) */
    PL_KV_BLOCK_USED = 2,    /* primary: held by exactly one block table */
    PL_KV_BLOCK_SHARED = 3,  /* primary: held by several (ref > 1: n / beams / prefix hits) */
    PL_KV_BLOCK_SWAPPED = 4, /* swap pool: holds a swapped-out sequence's block */
} pl_kv_block_state;

typedef struct {
    uint64_t request_id;         /* the request (sequence group) */
    int32_t index;               /* the sequence's index in its request */
    int32_t swapped;             /* 1: block ids are in the swap pool */
    int32_t n_tokens;            /* tokens that have a slot */
    int32_t n_blocks;            /* ids at block_ids[first_block ..) of the snapshot */
    int64_t first_block;
    int32_t n_window_blocks;     /* layer kinds: its window table's ids (in the window pool, or in
                                    that pool's swap pool when swapped; -1 where released by the
                                    window) at block_ids[first_block + n_blocks ..) */
} pl_kv_seq_blocks;

typedef struct {
    uint64_t version;            /* publications so far (0: none yet) */
    uint64_t steps;              /* engine steps that ran the model when it was taken */
    int32_t block_size;
    int32_t n_blocks, n_swap_blocks;
    int32_t n_window_blocks;     /* layer kinds (Gemma 3 / 4): the window layers' own pool, whose
                                    blocks leave as they slide out of every window; else 0 (the
                                    blocks above are then the full layers' pool) */
    int32_t n_window_swap_blocks;/* layer kinds: that pool's swap blocks (its share of
                                    --swap-space), else 0 */
    uint8_t *states;             /* [n_blocks + n_swap_blocks + n_window_blocks +
                                    n_window_swap_blocks] pl_kv_block_state: primary, then swap,
                                    then the window pool's primary and swap blocks */
    int32_t n_seqs;              /* sequences holding blocks (tables asked, else 0) */
    pl_kv_seq_blocks *seqs;      /* [n_seqs] running then swapped, oldest request first */
    int32_t *block_ids;          /* every sequence's block ids, concatenated */
    int has_tables;              /* seqs / block_ids were filled */
} pl_kv_snapshot;

/* Copy the latest KV picture into *out (pl_kv_snapshot_destroy it). Asks the engine thread to keep
 * publishing (with per-sequence block tables too when with_tables) for the next two seconds; if
 * the latest picture is older than the engine's state it waits up to timeout_ms for a fresh one
 * (an engine idling in pl_engine_wait_for_work publishes at once) and else returns the latest.
 * PL_ERR_NOMEM only. */
pl_status pl_engine_kv_snapshot(pl_engine *e, int with_tables, int timeout_ms, pl_kv_snapshot *out);
void pl_kv_snapshot_destroy(pl_kv_snapshot *s);

/* The loaded model's tokenizer and facts, for front ends (chat templates, /tokenize). */
const struct pl_tokenizer *pl_engine_tokenizer(const pl_engine *e);
int32_t pl_engine_max_model_len(const pl_engine *e);
/* The configuration in effect: defaults applied and kv_cache_memory resolved to the budget in
 * bytes that was divided into blocks (model_path and swap_path point at the caller's strings). */
const pl_engine_config *pl_engine_get_config(const pl_engine *e);
int32_t pl_engine_n_vocab(const pl_engine *e);
/* The pooling embedding requests get (1 mean, 2 cls = first token, 3 last: llama.cpp's
 * numbering): config.pooling if set, else an embedding model's `<arch>.pooling_type`, else 0 (no
 * embeddings); and the length of the embeddings. 4 (rank): a reranker (a bert cross-encoder),
 * whose "embedding" of a [CLS] query [SEP] document [SEP] input is its n_embd relevance scores
 * (the classification head's raw outputs; n_embd is 1 for a reranker). */
int32_t pl_engine_pooling(const pl_engine *e);
int32_t pl_engine_n_embd(const pl_engine *e);
/* 1 for an embedding model (bert): it serves embedding requests only and has no KV cache. */
int pl_engine_embedding_only(const pl_engine *e);

#ifdef __cplusplus
}
#endif

#endif
