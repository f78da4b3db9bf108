/* engine/scheduler — see scheduler.h for the policy. */
#include "engine/scheduler.h"
#include "base/buf.h"
#include "model/lora.h"

#include <stdlib.h>
#include <string.h>

/* ---- queues, each sorted by (arrival, id) ---- */

static int older(const pl_seq_group *a, const pl_seq_group *b) {
    return a->arrival < b->arrival || (a->arrival == b->arrival && a->id < b->id);
}

static void q_insert(pl_group_queue *q, pl_seq_group *g) {
    pl_seq_group *at = q->tail;
    while (at && older(g, at)) at = at->prev;
    /* insert after `at` (NULL: at the head) */
    g->prev = at;
    g->next = at ? at->next : q->head;
    if (g->next) g->next->prev = g;
    else q->tail = g;
    if (at) at->next = g;
    else q->head = g;
    q->n++;
    g->queue = q;
}

static void q_remove(pl_group_queue *q, pl_seq_group *g) {
    if (g->prev) g->prev->next = g->next;
    else q->head = g->next;
    if (g->next) g->next->prev = g->prev;
    else q->tail = g->prev;
    g->next = g->prev = NULL;
    g->queue = NULL;
    q->n--;
}

/* ---- growable result arrays ---- */


pl_status pl_scheduler_init(pl_scheduler *s, const pl_scheduler_config *cfg, pl_kv_cache *kv) {
    memset(s, 0, sizeof *s);
    if (cfg->max_num_seqs < 1 || cfg->max_num_batched_tokens < cfg->max_num_seqs ||
        cfg->max_logit_rows < cfg->max_num_seqs)
        return pl_fail(PL_ERR_INVALID_ARG,
                       "max-num-batched-tokens (%d) must be at least max-num-seqs (%d) >= 1",
                       cfg->max_num_batched_tokens, cfg->max_num_seqs);
    s->cfg = *cfg;
    s->kv = kv;
    return PL_OK;
}

void pl_scheduler_destroy(pl_scheduler *s) { memset(s, 0, sizeof *s); }

void pl_sched_output_destroy(pl_sched_output *o) {
    PL_FREE_ALL(o->items, o->swap_out, o->swap_in, o->cow, o->refused);
    memset(o, 0, sizeof *o);
}

int32_t pl_group_max_seqs(const pl_seq_group *g) {
    int32_t m = g->params.best_of > g->params.n ? g->params.best_of : g->params.n;
    return m > g->n_live ? m : g->n_live;
}

void pl_scheduler_add(pl_scheduler *s, pl_seq_group *g) { q_insert(&s->waiting, g); }

void pl_scheduler_remove(pl_scheduler *s, pl_seq_group *g) {
    (void)s; /* g->queue is one of its queues */
    if (g->queue) q_remove(g->queue, g);
}

void pl_scheduler_stats(const pl_scheduler *s, pl_engine_stats *out) {
    out->running = s->running.n;
    out->waiting = s->waiting.n;
    out->swapped = s->swapped.n;
    out->preemptions = s->preemptions;
    out->swaps_out = s->swaps_out;
    out->spec_off_steps = s->spec_off_steps;
}

int pl_scheduler_has_work(const pl_scheduler *s) {
    return s->waiting.n + s->running.n + s->swapped.n > 0;
}

const pl_group_queue *pl_scheduler_queue(const pl_scheduler *s, pl_seq_status which) {
    switch (which) {
    case PL_SEQ_WAITING: return &s->waiting;
    case PL_SEQ_RUNNING: return &s->running;
    case PL_SEQ_SWAPPED: return &s->swapped;
    default: return NULL;
    }
}

/* ---- per-step bookkeeping ---- */

typedef struct {
    int32_t tokens_left;  /* max_num_batched_tokens budget */
    int32_t seqs_left;    /* max_num_seqs budget */
    int32_t rows_left;    /* logit rows */
    int preempted;        /* some group was preempted this step */
    int stalled;          /* a resumed group could not run yet: admit nothing new */
    int32_t spec_spare;   /* tokens (and rows) speculation may take beyond one per decode */
    int32_t dec_left;     /* decoding sequences not yet scheduled this step */
    int starved;          /* a prefill chunk got fewer slots than tokens (sliding window) */
} budget;

/* A sliding-window cache allocates prefill slots chunk by chunk (kv/manager.h), so that a long
 * sequence, recomputed after preemption, never holds more than its window and one chunk. */
static int lazy_prefill(const pl_scheduler *s) {
    return pl_kv_cache_lazy_prefill(s->kv);
}

static pl_status add_item(pl_scheduler *s, pl_seq *q, int32_t n, int all_logits) {
    if (pl_array_reserve(&s->out->items, &s->out->items_cap, (size_t)s->out->n_items + 1, sizeof *s->out->items))
        return pl_fail(PL_ERR_NOMEM, "scheduler: out of memory");
    pl_sched_item *it = &s->out->items[s->out->n_items++];
    it->seq = q;
    it->start = q->n_computed;
    it->n = n;
    it->sample = q->n_computed + n == q->n_tokens;
    it->all_logits = all_logits;
    it->n_spec = 0;
    s->out->n_tokens += n;
    return PL_OK;
}

static pl_status push_copies(pl_block_copy **arr, int32_t *n, size_t *cap,
                             const pl_block_copy *src, int32_t k) {
    if (pl_array_reserve(arr, cap, (size_t)*n + (size_t)k, sizeof **arr))
        return pl_fail(PL_ERR_NOMEM, "scheduler: out of memory");
    memcpy(*arr + *n, src, (size_t)k * sizeof *src);
    *n += k;
    return PL_OK;
}

/* Slots for the next *n prompt tokens of q: those it lacks are appended, as many as the free
 * blocks allow (*n shrinks to what has a slot; the window frees blocks as others advance). */
/* Slots for n_new more tokens of q in every table, their copies-on-write queued. */
static pl_status append_seq(pl_scheduler *s, pl_seq *q, int32_t n_new) {
    pl_block_copy cow[2];
    PL_TRY(pl_kv_cache_append(s->kv, &q->table, &q->table_w, n_new, cow));
    for (int j = 0; j < 2; j++)
        if (cow[j].src >= 0) PL_TRY(push_copies(&s->out->cow, &s->out->n_cow, &s->out->cap_cow, &cow[j], 1));
    return PL_OK;
}

static pl_status prefill_slots(pl_scheduler *s, pl_seq *q, int32_t *n, budget *b) {
    int32_t have = q->table.n_tokens - q->n_computed, want = *n - have;
    if (want <= 0) return PL_OK;
    while (want > 0 && !pl_kv_cache_can_append(s->kv, &q->table, &q->table_w, want)) want--;
    if (want < *n - have) b->starved = 1;
    *n = have + want;
    if (want == 0) return PL_OK;
    return append_seq(s, q, want);
}

static int32_t live_tables(const pl_scheduler *s, pl_seq_group *g, pl_block_table **out) {
    int32_t k = 0;
    for (int32_t i = 0; i < g->n_seqs; i++)
        if (g->seqs[i]->status != PL_SEQ_FINISHED)
            k += pl_kv_cache_tables(s->kv, &g->seqs[i]->table, &g->seqs[i]->table_w, out + k);
    return k;
}

/* A group decodes when every live sequence has exactly its newest token left to compute; else
 * it is (re)filling its prompt. Sequences of a group always change state together (they sample
 * in the same step), so a group is never half decoding. */
static int group_decodes(const pl_seq_group *g) {
    int any = 0;
    for (int32_t i = 0; i < g->n_seqs; i++) {
        const pl_seq *q = g->seqs[i];
        if (q->status != PL_SEQ_RUNNING) continue;
        if (q->n_tokens - q->n_computed != 1) return 0;
        any = 1;
    }
    return any;
}

/* Blocks the group's decoding sequences need for their newest tokens' slots. A sequence whose
 * newest token already has a slot (a prompt whose last token alone was left after a prefix-cache
 * hit) needs none. */
static int32_t decode_blocks_needed(const pl_scheduler *s, const pl_seq_group *g) {
    int32_t need = 0;
    for (int32_t i = 0; i < g->n_seqs; i++) {
        const pl_seq *q = g->seqs[i];
        if (q->status == PL_SEQ_RUNNING && q->table.n_tokens < q->n_tokens)
            need += pl_kv_cache_append_needed(s->kv, &q->table, &q->table_w,
                                                  q->n_tokens - q->table.n_tokens);
    }
    return need;
}

/* How many proposals decoding sequence q may carry this step: within the spare token and row
 * budget, its max_tokens and its table, and only while the pool keeps two blocks (a new one and
 * a copy-on-write) for every decode still to schedule, of its own group (`rest`, which may have
 * just been swapped in) or of the others (speculation never preempts anyone and never leaves a
 * group half scheduled). 0 = decode as usual. */
static int32_t spec_room(const pl_scheduler *s, const pl_seq *q, const budget *b, int32_t rest) {
    const pl_seq_group *g = q->group;
    if (!s->cfg.spec.propose || b->spec_spare < 1 || g->params.use_beam_search || !g->prefilled)
        return 0;
    int32_t k = s->cfg.spec.k < b->spec_spare ? s->cfg.spec.k : b->spec_spare;
    if (k > b->tokens_left - 1) k = b->tokens_left - 1;
    if (k > b->rows_left - 1) k = b->rows_left - 1;
    int32_t out_left = g->params.max_tokens - (q->n_tokens - g->n_prompt) - 1;
    int32_t slots_left = q->table.capacity * q->table.block_size - q->n_tokens;
    if (k > out_left) k = out_left;
    if (k > slots_left) k = slots_left;
    if (k < 1) return 0;
    int32_t extra = pl_kv_cache_append_needed(s->kv, &q->table, &q->table_w,
                                              q->n_tokens + k - q->table.n_tokens);
    int32_t later = b->dec_left > rest ? b->dec_left : rest;
    if (pl_kv_cache_headroom(s->kv) - extra < 2 * later) return 0;
    return k;
}

/* Slots and items for a decoding group (slots for the newest tokens are already guaranteed to
 * be available; speculative proposals take only what is left over). */
static pl_status add_decodes(pl_scheduler *s, pl_seq_group *g, budget *b) {
    int32_t rest = 0;
    for (int32_t i = 0; i < g->n_seqs; i++) rest += g->seqs[i]->status == PL_SEQ_RUNNING;
    for (int32_t i = 0; i < g->n_seqs; i++) {
        pl_seq *q = g->seqs[i];
        if (q->status != PL_SEQ_RUNNING) continue;
        if (b->dec_left > 0) b->dec_left--;
        rest--;
        int32_t k = spec_room(s, q, b, rest);
        if (k > 0) k = s->cfg.spec.propose(s->cfg.spec.ctx, q, k);
        q->n_spec = k;
        if (q->table.n_tokens < q->n_tokens + k)
            PL_TRY(append_seq(s, q, q->n_tokens + k - q->table.n_tokens));
        PL_TRY(add_item(s, q, 1 + k, 0));
        s->out->items[s->out->n_items - 1].n_spec = k;
        s->out->items[s->out->n_items - 1].sample = 1;
        b->tokens_left -= 1 + k;
        b->rows_left -= 1 + k;
        b->spec_spare -= k;
    }
    return PL_OK;
}

/* Preempt running group g, all its sequences together. */
static pl_status preempt(pl_scheduler *s, pl_seq_group *g) {
    pl_block_table *tabs[g->n_seqs > 0 ? 2 * g->n_seqs : 1];
    int32_t nt = live_tables(s, g, tabs);
    q_remove(&s->running, g);
    s->preemptions++;
    if (s->cfg.spec.drop)
        for (int32_t i = 0; i < g->n_seqs; i++) s->cfg.spec.drop(s->cfg.spec.ctx, g->seqs[i]);
    if (s->cfg.mode == PL_PREEMPT_SWAP && pl_kv_cache_can_swap_out(s->kv, tabs, nt) == PL_ALLOC_OK) {
        /* Room for every block was reserved when the step began (reserve_output). */
        pl_sched_output *o = s->out;
        int32_t n_map = 0;
        pl_status st = pl_kv_cache_swap_out(s->kv, tabs, nt, o->swap_out + o->n_swap_out,
                                      (int32_t)o->cap_swap_out - o->n_swap_out, &n_map);
        if (st != PL_OK) {
            q_insert(&s->running, g);
            return st;
        }
        o->n_swap_out += n_map;
        for (int32_t i = 0; i < g->n_seqs; i++)
            if (g->seqs[i]->status == PL_SEQ_RUNNING) g->seqs[i]->status = PL_SEQ_SWAPPED;
        q_insert(&s->swapped, g);
        s->swaps_out++;
        return PL_OK;
    }
    /* Recompute: drop the KV; the sequences re-prefill prompt ++ output when readmitted. */
    g->lead = NULL;
    for (int32_t i = 0; i < g->n_seqs; i++) {
        pl_seq *q = g->seqs[i];
        if (q->status == PL_SEQ_FINISHED) continue;
        pl_kv_cache_free(s->kv, &q->table, &q->table_w);
        q->n_computed = 0;
        q->status = PL_SEQ_WAITING;
    }
    q_insert(&s->waiting, g);
    return PL_OK;
}

/* Make room for the newest token of every sequence of decoding group g, preempting the youngest
 * running groups as needed. *runs = 0 if g itself had to be preempted. */
static pl_status ensure_decode_slots(pl_scheduler *s, pl_seq_group *g, budget *b, int *runs) {
    for (;;) {
        if (decode_blocks_needed(s, g) <= pl_kv_cache_blocks_free(s->kv)) {
            *runs = 1;
            return PL_OK;
        }
        pl_seq_group *victim = s->running.tail;
        b->preempted = 1;
        PL_TRY(preempt(s, victim));
        if (victim == g) {
            *runs = 0;
            return PL_OK;
        }
    }
}

static pl_status schedule_decodes(pl_scheduler *s, budget *b) {
    for (pl_seq_group *g = s->running.head; g; g = g->next) {
        if (!group_decodes(g)) continue;
        int runs;
        PL_TRY(ensure_decode_slots(s, g, b, &runs));
        if (!runs) break; /* g was the youngest: nothing younger remains */
        PL_TRY(add_decodes(s, g, b));
    }
    return PL_OK;
}

/* Prefill chunks for a group that is (re)filling prompts; their slots exist (allocate_prompt
 * reserved them; with a sliding window prefill_slots adds them chunk by chunk). A group of several sequences (after a recomputation) must reach its sampling
 * point in one step, so that all its sequences sample together: when the remainders do not all
 * fit, each sequence advances but keeps its last token for a later step. */
static pl_status schedule_prefills(pl_scheduler *s, pl_seq_group *g, budget *b) {
    if (group_decodes(g)) return PL_OK;
    /* After a recomputation the others share the lead's prompt blocks: they start once the
     * lead has computed them (in an earlier step), and nobody samples before. */
    int wait = g->lead && g->lead->n_computed < g->lead_tokens;
    if (!wait) g->lead = NULL;
    int want_prompt_lp = g->params.prompt_logprobs >= 0 && !g->prefilled;
    int32_t live = 0, total = 0;
    for (int32_t i = 0; i < g->n_seqs; i++) {
        const pl_seq *q = g->seqs[i];
        if (q->status != PL_SEQ_RUNNING) continue;
        live++;
        total += q->n_tokens - q->n_computed;
    }
    int all_complete = !wait && (live == 1 || (total <= b->tokens_left && live <= b->rows_left &&
                                               (!want_prompt_lp || total <= b->rows_left)));
    if (all_complete && live > 1 && lazy_prefill(s)) { /* all their slots, or nobody samples */
        int32_t blocks = 0;
        for (int32_t i = 0; i < g->n_seqs; i++)
            if (g->seqs[i]->status == PL_SEQ_RUNNING)
                blocks += pl_kv_cache_append_needed(s->kv, &g->seqs[i]->table,
                                                    &g->seqs[i]->table_w,
                                                    g->seqs[i]->n_tokens - g->seqs[i]->table.n_tokens);
        all_complete = blocks <= pl_kv_cache_blocks_free(s->kv);
    }
    for (int32_t i = 0; i < g->n_seqs; i++) {
        pl_seq *q = g->seqs[i];
        int32_t left = q->n_tokens - q->n_computed;
        if (q->status != PL_SEQ_RUNNING || left < 1 || (wait && q != g->lead)) continue;
        int32_t n = all_complete ? left : left - 1;
        if (n > b->tokens_left) n = b->tokens_left;
        if (want_prompt_lp && n > b->rows_left) n = b->rows_left;
        PL_TRY(prefill_slots(s, q, &n, b));
        int completes = n == left;
        if (completes && !want_prompt_lp && !g->embed && b->rows_left < 1) {
            n--; /* leave the last token (and its logits row) for the next step */
            completes = 0;
        }
        if (n < 1) continue;
        PL_TRY(add_item(s, q, n, want_prompt_lp));
        b->tokens_left -= n;
        b->rows_left -= want_prompt_lp ? n : g->embed ? 0 : completes;
    }
    return PL_OK;
}

static pl_status schedule_swapped(pl_scheduler *s, budget *b) {
    while (s->swapped.head) {
        pl_seq_group *g = s->swapped.head;
        pl_block_table *tabs[g->n_seqs > 0 ? 2 * g->n_seqs : 1];
        int32_t nt = live_tables(s, g, tabs), ns = nt / (pl_kv_cache_grouped(s->kv) ? 2 : 1);
        if (ns > b->seqs_left || ns > b->tokens_left || ns > b->rows_left) break;
        if (pl_kv_cache_can_swap_in(s->kv, tabs, nt) != PL_ALLOC_OK) break;
        pl_sched_output *o = s->out;
        int32_t n_map = 0;
        PL_TRY(pl_kv_cache_swap_in(s->kv, tabs, nt, o->swap_in + o->n_swap_in,
                             (int32_t)o->cap_swap_in - o->n_swap_in, &n_map));
        o->n_swap_in += n_map;
        q_remove(&s->swapped, g);
        for (int32_t i = 0; i < g->n_seqs; i++)
            if (g->seqs[i]->status == PL_SEQ_SWAPPED) g->seqs[i]->status = PL_SEQ_RUNNING;
        q_insert(&s->running, g);
        b->seqs_left -= ns;
        /* Decodes need a slot for their newest token now; if the pool cannot give one the
         * group waits in running for the next step's decode pass. */
        if (group_decodes(g)) {
            if (decode_blocks_needed(s, g) <= pl_kv_cache_blocks_free(s->kv)) PL_TRY(add_decodes(s, g, b));
            else b->stalled = 1; /* it runs first next step; a newcomer must not overtake it */
            continue;
        }
        PL_TRY(schedule_prefills(s, g, b));
    }
    return PL_OK;
}

static pl_status refuse(pl_scheduler *s, pl_seq_group *g) {
    if (pl_array_reserve(&s->out->refused, &s->out->cap_refused, (size_t)s->out->n_refused + 1, sizeof *s->out->refused))
        return pl_fail(PL_ERR_NOMEM, "scheduler: out of memory");
    q_remove(&s->waiting, g);
    s->out->refused[s->out->n_refused++] = g;
    return PL_OK;
}

/* A sequence's final length: prompt + max output tokens (what contiguous layouts reserve for). */
static int32_t final_tokens(const pl_seq_group *g) {
    int64_t f = (int64_t)g->n_prompt + g->params.max_tokens;
    return f > INT32_MAX ? INT32_MAX : (int32_t)f;
}

/* An embedding request runs whole in this step or waits (FCFS): it holds no KV blocks, so it
 * is never preempted, and the decoder finishes it after this step. */
static pl_status admit_embed(pl_scheduler *s, pl_seq_group *g, budget *b, int *admitted) {
    pl_seq *q = g->seqs[0];
    *admitted = 0;
    if (q->n_tokens > b->tokens_left || b->seqs_left < 1) return PL_OK;
    q->n_computed = 0;
    q->status = PL_SEQ_RUNNING;
    q_remove(&s->waiting, g);
    q_insert(&s->running, g);
    b->seqs_left--;
    b->tokens_left -= q->n_tokens;
    *admitted = 1;
    return add_item(s, q, q->n_tokens, 0);
}

/* Prompt blocks the waiting sequences of g share when it comes back after a recomputation
 * (paged layout, whole prefill): the prompt's full blocks, computed once by the first of them
 * (the lead) and shared by the others, as its first admission computed the prompt once and
 * forked. Counting every sequence's prompt as its own would need more than the group held: a
 * group that fitted while sharing could never come back. 0: nothing shared (one sequence, a
 * first admission, lazy prefill, which admits by windows and chunks, a prompt under a block). */
static int32_t shared_prompt_blocks(const pl_scheduler *s, const pl_seq_group *g) {
    if (lazy_prefill(s) || !pl_kv_cache_shares(s->kv) || !g->prefilled || g->embed)
        return 0;
    int32_t waiting = 0;
    for (int32_t i = 0; i < g->n_seqs; i++) waiting += g->seqs[i]->status == PL_SEQ_WAITING;
    return waiting > 1 ? g->n_prompt / pl_kv_cache_block_size(s->kv) : 0;
}

/* Blocks admitting g's waiting sequences takes from the free blocks (lazy prefill: the hits
 * their windows reach and a first chunk of `first` tokens; paged: every block less the prefix
 * hits some table holds, and less the shared prompt for all but the lead); *too_long if one
 * can never fit its table. */
static int32_t admit_need(pl_scheduler *s, const pl_seq_group *g, uint64_t key, int32_t first,
                          int32_t *too_long) {
    pl_kv_cache *kv = s->kv;
    int32_t need = 0, shared = shared_prompt_blocks(s, g), lead = 1;
    for (int32_t i = 0; i < g->n_seqs; i++) {
        const pl_seq *q = g->seqs[i];
        if (q->status != PL_SEQ_WAITING) continue;
        need += pl_kv_cache_admit_blocks(kv, q->tokens, q->n_tokens, key, first, final_tokens(g),
                                         lead ? 0 : shared);
        lead = 0;
        *too_long |= pl_kv_cache_too_long(kv, q->n_tokens);
    }
    return need;
}

/* Takes blocks for every waiting sequence of g, or for none: the count that admitted g (admit_need)
 * cannot know every prefix hit that survives the allocations before it (a new block of one
 * sequence may evict a cached block the next would hit), and a group left half allocated in the
 * waiting queue held blocks that nothing running would free (issue 31: two windowed groups
 * waited for each other forever). On a full pool (PL_ERR_CAPACITY) what was taken goes back and
 * *admitted = 0: g waits at the head for the next step; another failure is the step's. */
static pl_status admit_group(pl_scheduler *s, pl_seq_group *g, uint64_t key, int32_t first,
                             int *admitted) {
    pl_kv_cache *kv = s->kv;
    const int32_t bs = pl_kv_cache_block_size(kv), shared = shared_prompt_blocks(s, g);
    pl_seq *lead = NULL;
    pl_status st = PL_OK;
    unsigned char took[g->n_seqs > 0 ? g->n_seqs : 1]; /* allocated in this call */
    memset(took, 0, sizeof took);
    for (int32_t i = 0; i < g->n_seqs; i++) {
        pl_seq *q = g->seqs[i];
        if (q->status != PL_SEQ_WAITING) continue;
        int32_t cached = 0;
        if (lead && pl_kv_cache_probe(kv, q->tokens, q->n_tokens, key) < shared * bs) {
            /* the prompt blocks are the lead's, to compute: q computes the rest after */
            st = pl_kv_cache_allocate_shared(kv, &lead->table, shared, &q->table, q->n_tokens);
            cached = shared * bs;
        } else {
            st = pl_kv_cache_allocate(kv, &q->table, &q->table_w, q->tokens, q->n_tokens, key,
                                      first, final_tokens(g), &cached);
        }
        if (st != PL_OK) break;
        if (lead) g->lead = lead, g->lead_tokens = cached;
        if (shared && !lead) lead = q;
        q->n_computed = cached;
        q->status = PL_SEQ_RUNNING;
        took[i] = 1;
        if (!g->prefilled && i == 0) g->n_cached_tokens = cached;
    }
    *admitted = st == PL_OK;
    for (int32_t j = 0; j < g->n_seqs && st != PL_OK; j++) {
        pl_seq *q = g->seqs[j];
        if (!took[j]) continue;
        pl_kv_cache_free(kv, &q->table, &q->table_w);
        q->n_computed = 0;
        q->status = PL_SEQ_WAITING;
    }
    if (st == PL_OK) return PL_OK;
    g->lead = NULL;
    return st == PL_ERR_CAPACITY ? PL_OK : st;
}

static pl_status schedule_waiting(pl_scheduler *s, budget *b) {
    pl_kv_cache *kv = s->kv;
    while (s->waiting.head && b->tokens_left > 0) {
        pl_seq_group *g = s->waiting.head;
        if (g->embed == PL_EMBED_LOCAL) {
            int admitted;
            PL_TRY(admit_embed(s, g, b, &admitted));
            if (!admitted) break;
            continue;
        }
        uint64_t key = g->params.cache_salt ^ pl_lora_cache_key(g->lora); /* adapters share no KV */
        if ((g->params.prompt_logprobs >= 0 && !g->prefilled) || g->embed)
            key = 0x8000000000000000ull | g->id; /* private: every prompt row must be computed */
        /* Lazy prefill (sliding window): slots for the cached tokens the window reaches and a
         * first chunk of the token budget, or of one window when the free blocks do not hold
         * that, so any length is admitted with about two windows of blocks (a recomputed
         * sequence longer than the pool included); later chunks get theirs as the window frees
         * blocks. */
        int32_t bs = pl_kv_cache_block_size(kv), win = (pl_kv_cache_window(kv) + bs - 1) / bs * bs;
        int32_t too_long = 0, first = b->tokens_left;
        int32_t need = admit_need(s, g, key, first, &too_long);
        if (lazy_prefill(s) && first > win && need > pl_kv_cache_headroom(kv))
            need = admit_need(s, g, key, first = win, &too_long);
        pl_alloc_status fit = pl_kv_cache_can_admit(kv, need);
        if (too_long || fit == PL_ALLOC_NEVER) {
            PL_TRY(refuse(s, g));
            continue;
        }
        /* (a contiguous layout needs one run, its groups hold one sequence: fragmentation) */
        if (fit != PL_ALLOC_OK) break;
        if (pl_group_max_seqs(g) > b->seqs_left) break;
        /* A generation model's embedding input runs whole in one step, or waits. */
        if (g->embed && g->seqs[0]->n_tokens > b->tokens_left) break;
        int admitted;
        PL_TRY(admit_group(s, g, key, first, &admitted));
        if (!admitted) break;
        q_remove(&s->waiting, g);
        q_insert(&s->running, g);
        b->seqs_left -= pl_group_max_seqs(g);
        if (group_decodes(g)) PL_TRY(add_decodes(s, g, b));
        else PL_TRY(schedule_prefills(s, g, b));
    }
    return PL_OK;
}

/* Speculation's share of the step: what the token and row budgets leave after one token per
 * decoding sequence, or nothing when more sequences decode than spec.max_batch (a large batch is
 * already bound by compute, not by reading the weights, and proposals would only slow it). */
static void spec_budget(pl_scheduler *s, budget *b) {
    int32_t n_dec = 0;
    for (pl_seq_group *g = s->running.head; g; g = g->next)
        if (group_decodes(g))
            for (int32_t i = 0; i < g->n_seqs; i++) n_dec += g->seqs[i]->status == PL_SEQ_RUNNING;
    b->dec_left = n_dec;
    b->spec_spare = 0;
    if (!s->cfg.spec.propose || s->cfg.spec.k < 1 || n_dec == 0) return;
    if (n_dec > s->cfg.spec.max_batch) {
        s->spec_off_steps++;
        return;
    }
    int32_t t = b->tokens_left - n_dec, r = b->rows_left - n_dec;
    b->spec_spare = t < r ? t : r;
    if (b->spec_spare < 0) b->spec_spare = 0;
}

static pl_status schedule(pl_scheduler *s) {
    budget b = {s->cfg.max_num_batched_tokens, s->cfg.max_num_seqs, s->cfg.max_logit_rows, 0, 0, 0, 0, 0};
    for (pl_seq_group *g = s->running.head; g; g = g->next) b.seqs_left -= pl_group_max_seqs(g);
    spec_budget(s, &b);
    PL_TRY(schedule_decodes(s, &b));
    for (pl_seq_group *g = s->running.head; g && b.tokens_left > 0; g = g->next)
        PL_TRY(schedule_prefills(s, g, &b));
    if (!b.preempted) PL_TRY(schedule_swapped(s, &b));
    if (!b.preempted && !b.stalled && !s->swapped.head) PL_TRY(schedule_waiting(s, &b));
    /* Every running group is a windowed prefill short of blocks and nothing else runs: the
     * youngest yields its blocks (nothing of it is in this step's output), so the others go on. */
    pl_sched_output *o = s->out;
    if (b.starved && o->n_items == 0 && o->n_swap_in == 0 && o->n_swap_out == 0 && o->n_cow == 0 &&
        s->running.tail)
        PL_TRY(preempt(s, s->running.tail));
    return PL_OK;
}

/* Room for the worst case of one step, taken before any state changes: every item has a token
 * of the budget and makes at most one copy-on-write per table (two with KV cache groups), and
 * no block moves twice in one step. Once
 * this succeeds, a step's block copies can no longer be lost to a failed allocation (the KV
 * manager would have moved blocks whose copies nobody performs). */
static pl_status reserve_output(pl_scheduler *s, pl_sched_output *o) {
    size_t items = (size_t)s->cfg.max_num_batched_tokens + (size_t)s->cfg.max_num_seqs;
    size_t blocks = (size_t)pl_kv_cache_copy_blocks(s->kv); /* every pool's */
    if (pl_array_reserve(&o->items, &o->items_cap, items, sizeof *o->items) ||
        pl_array_reserve(&o->cow, &o->cap_cow, 2 * items, sizeof *o->cow) || /* 2 groups */
        pl_array_reserve(&o->swap_out, &o->cap_swap_out, blocks, sizeof *o->swap_out) ||
        pl_array_reserve(&o->swap_in, &o->cap_swap_in, blocks, sizeof *o->swap_in))
        return pl_fail(PL_ERR_NOMEM, "scheduler: out of memory");
    return PL_OK;
}

pl_status pl_scheduler_schedule(pl_scheduler *s, pl_sched_output *out) {
    out->n_items = out->n_tokens = 0;
    out->n_swap_out = out->n_swap_in = out->n_cow = out->n_refused = 0;
    PL_TRY(reserve_output(s, out));
    s->out = out;
    pl_status st = schedule(s);
    s->out = NULL;
    return st;
}
