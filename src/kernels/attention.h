/* kernels/attention — PagedAttention on the CPU, the fused K/V slot write and the fused block copy.
 *
 * KV cache layout (one layer; K and V alike), `dtype` f32, f16, bf16, q8_0 or q4_0:
 *
 *     cache[num_blocks][n_kv_heads][block_size][row]
 *
 * where a row is one token's head_dim values of one KV head in the dtype's GGML row format: f32,
 * f16 or bf16 values, or head_dim / 32 q8_0 / q4_0 blocks (an f16 scale per 32 elements of one
 * head's row, then the quants; head_dim must be a multiple of 32 for those, as llama.cpp
 * requires). Rows are quantized when written (pl_kv_write) and dequantized in registers by the
 * attention kernels; nothing holds an f32 copy of the cache. Block copies copy bytes.
 *
 * so the keys of one KV head inside one block are one contiguous block_size × head_dim tile: a
 * (sequence, KV head) work item streams its tiles block by block, and every query head of the
 * GQA group is served from the same read of a tile. A token at physical slot s lives in block
 * s / block_size at offset s % block_size.
 *
 * Queries: the step's tokens are laid out flat, sequence after sequence: q[n_tokens][n_heads]
 * [head_dim]. Sequence i owns rows [seq_start[i], seq_start[i+1]) (q_len_i rows) and has
 * context_lens[i] tokens in the cache after this step's writes, so its query j sits at position
 * p = context_lens[i] - q_len_i + j and attends causally to cache positions 0..p, found through
 * block_tables[i * max_blocks + p / block_size]. Decode is q_len = 1; a prefill chunk q_len > 1.
 * Softmax is computed online (running max and sum), so no per-context scratch is needed.
 *
 * Sliding window (pl_attn_args.window = W > 0): the query at position p sees only positions
 * p' with p - W < p' <= p (llama.cpp's LLAMA_SWA_TYPE_STANDARD: masked when p - p' >= W); W = 0
 * is full causal attention. Tiles wholly before the window are skipped, and the kernels never
 * look up the block-table entry of a block whose positions are all before p - W + 1 for the
 * sequence's first query of the step (such entries may name blocks already returned to the
 * pool, kv/manager.h): the caller may leave anything there.
 *
 * Supported: head_dim a multiple of 4 up to 512 (of 32 for q8_0 / q4_0), any block size, any GQA ratio
 * (n_heads a multiple of n_kv_heads). Inputs from the engine (slots and block ids in range,
 * q_len <= context_len <= max_blocks * block_size) are checked with PL_ASSERT.
 *
 * Determinism: for a given instruction set (pl_cpu_isa()), an output row is bitwise the same
 * whatever the thread count, whatever else is in the batch, however the prompt was split into
 * prefill chunks (row j of a chunk = a decode at that position) and whatever the block size:
 * positions are streamed in tiles aligned to position 0, not to blocks, with or without a window
 * (a window only decides which tiles a row visits and which of a tile's keys it sees; a key it
 * does not see adds nothing, not even a zero product). Different instruction
 * sets differ in the last bits (all stay within 1e-5 of a double-precision reference).
 */
#ifndef PL_KERNELS_ATTENTION_H
#define PL_KERNELS_ATTENTION_H

#include "base/threadpool.h"
#include "kernels/dtype.h"

#include <stddef.h>
#include <stdint.h>

typedef struct {
    pl_dtype dtype;      /* PL_DT_F32, F16, BF16, Q8_0 or Q4_0 */
    int32_t block_size;  /* tokens per block */
    int32_t n_kv_heads;
    int32_t head_dim;
    int64_t num_blocks;
} pl_kv_layout;

/* NULL if the kernels can serve dtype and head_dim of l, else what is wrong (a sentence for the
 * caller to prefix with the values). */
const char *pl_kv_layout_problem(const pl_kv_layout *l);
/* Bytes of one token's row of one KV head (0 if pl_kv_layout_problem). */
size_t pl_kv_row_bytes(const pl_kv_layout *l);
/* Bytes of one block of K (or V) for one layer (0 if pl_kv_layout_problem). */
size_t pl_kv_block_bytes(const pl_kv_layout *l);

/* Write k[t], v[t] ([n_tokens][n_kv_heads][head_dim] f32) into their slots; slot < 0 skips. An
 * f16 or bf16 cache gets the values rounded to nearest even (bit-exact with base/fp16.h); q8_0
 * and q4_0 rows are quantized as llama.cpp's CPU backend quantizes its K/V cache rows (q8_0:
 * d = f16(amax / 127), q = round-half-even(x * 127 / amax); q4_0: quantize_row_q4_0_ref). */
void pl_kv_write(const pl_kv_layout *l, void *k_cache, void *v_cache, const float *k,
                 const float *v, const int64_t *slot_mapping, int32_t n_tokens);

typedef struct {
    const float *q;               /* [n_tokens][n_heads][head_dim] */
    float *out;                   /* [n_tokens][n_heads][head_dim] */
    int32_t n_heads;
    float scale;                  /* usually 1/sqrt(head_dim) */
    int32_t n_seqs;
    const int32_t *seq_start;     /* [n_seqs + 1] */
    const int32_t *context_lens;  /* [n_seqs] */
    const int32_t *block_tables;  /* [n_seqs][max_blocks] physical block ids */
    int32_t max_blocks;
    const void *k_cache;
    const void *v_cache;
    int32_t window;               /* 0: full causal; W > 0: position p sees p' with p - p' < W */
    float softcap;                /* > 0: scores = softcap * tanh(scale * q·k / softcap) before
                                     the softmax (Gemma 2's attention logit soft-capping) */
    const float *sinks;           /* [n_heads] or NULL: gpt-oss's attention sinks, a learned
                                     logit per head that joins the softmax's denominator (and
                                     adds no value): out = sum_j e^(s_j) v_j / (sum_j e^(s_j) +
                                     e^(sink)). Applied where each row is finished, from its
                                     running max and sum, so no tile kernel knows of it. */
} pl_attn_args;

/* Threaded, vectorised (per pl_cpu_isa()). Work is split by (sequence, KV head, query tile); a
 * decode of one sequence therefore uses up to n_kv_heads threads. */
void pl_paged_attention(pl_threadpool *tp, const pl_kv_layout *l, const pl_attn_args *a);
/* Scalar reference (single thread, online softmax in float). */
void pl_paged_attention_ref(const pl_kv_layout *l, const pl_attn_args *a);

/* Copy whole blocks src[i] -> dst[i] (i < n) of one layer's K and V caches in one call: copy-on-
 * write inside one pool, or swapping between two pools with the same layout (dst_* may belong to
 * a different pool than src_*). */
void pl_kv_copy_blocks(const pl_kv_layout *l, const void *src_k, const void *src_v, void *dst_k,
                       void *dst_v, const int32_t *src, const int32_t *dst, int32_t n);
/* The same between two pools whose layouts differ only in num_blocks (a swap pool is usually
 * smaller or larger than the primary one): src ids are checked against src_l, dst ids against
 * dst_l. */
void pl_kv_copy_blocks_between(const pl_kv_layout *src_l, const void *src_k, const void *src_v,
                               const pl_kv_layout *dst_l, void *dst_k, void *dst_v,
                               const int32_t *src, const int32_t *dst, int32_t n);

#endif
