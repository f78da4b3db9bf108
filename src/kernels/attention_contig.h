/* kernels/attention_contig — attention over contiguous K/V tensors: no block table, no pages.
 *
 * What an ordinary inference engine writes when each request's KV cache is one array: sequence
 * i's K (and V) of one layer is one strided tensor whose row of position p and KV head g is at
 *
 *     (char *)k[i] + g x head_stride + p x token_stride
 *
 * (a row is one token's head_dim values of one KV head in the dtype's row format, exactly as
 * kernels/attention.h stores it: f32, f16, bf16, or head_dim / 32 q8_0 / q4_0 blocks):
 * token-major [token][kv_head][row] (token_stride = n_kv_heads x row_bytes, head_stride =
 * row_bytes) or head-major [kv_head][capacity][row] (token_stride = row_bytes, head_stride =
 * capacity x row_bytes, or any distance between the heads' arrays), as the caller stores it.
 * The kernel reads only through a->k[i] and a->v[i]; where those arrays live (a contiguous
 * reservation, or a vAttention slot whose pages the OS maps on demand) is not its business. The
 * vAttention and contiguous layouts call it as is (kv/kv_store.h pl_kv_store_attention).
 *
 * Queries, positions, causality, sliding window and soft-capping are those of pl_attn_args
 * (attention.h); of the layout only dtype, n_kv_heads and head_dim are read.
 *
 * Equality with the paged kernel: both stream positions in tiles of PL_ATTN_KT aligned to
 * position 0 and hand each tile to the same per-ISA tile function (attention_impl.h), so for a
 * given pl_cpu_isa() an output row is bitwise the paged kernel's for the same K/V values, and
 * bitwise the same whatever the thread count or the batch (tests/unit/test_attention_contig.c).
 */
#ifndef PL_KERNELS_ATTENTION_CONTIG_H
#define PL_KERNELS_ATTENTION_CONTIG_H

#include "base/threadpool.h"
#include "kernels/attention.h"

#include <stdint.h>

typedef struct {
    const float *q;               /* [n_tokens][n_heads][head_dim] */
    float *out;                   /* [n_tokens][n_heads][head_dim] */
    int32_t n_heads;
    float scale;
    int32_t n_seqs;
    const int32_t *seq_start;     /* [n_seqs + 1] */
    const int32_t *context_lens;  /* [n_seqs] */
    const void *const *k;         /* [n_seqs] sequence i's K tensor */
    const void *const *v;         /* [n_seqs] its V tensor */
    size_t head_stride;           /* bytes from a KV head's row of a token to the next head's */
    size_t token_stride;          /* bytes from a token's row to the next token's, same head */
    int32_t window;               /* as pl_attn_args */
    float softcap;
    const float *sinks;           /* as pl_attn_args: [n_heads] or NULL */
} pl_contig_attn_args;

/* Threaded and vectorised per pl_cpu_isa(); work is split by (sequence, KV head, query tile). */
void pl_contig_attention(pl_threadpool *tp, const pl_kv_layout *l, const pl_contig_attn_args *a);

#endif
