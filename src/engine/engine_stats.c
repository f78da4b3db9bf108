/* engine/engine_stats — the stats snapshot: after every step the engine thread gathers what each
 * stage exports (pl_scheduler_stats, pl_decoder_stats, pl_kv_cache_stats, pl_kv_view_stats, the
 * step loop's counters, the KV memory samples) into one copy under stats_mu, which any thread
 * reads (pl_engine_get_stats, pl_engine_get_kv_samples). See engine_internal.h. */
#include "engine/engine_internal.h"

#include <string.h>

void pl_engine_snapshot_stats(pl_engine *e) {
    pl_engine_stats s;
    memset(&s, 0, sizeof s);
    pl_scheduler_stats(&e->sched, &s);
    pl_decoder_stats(&e->decoder, &s);
    pl_kv_cache_stats(e->kv, &s);
    pl_kv_view_stats(&e->kv_view, &s);
    s.steps = e->steps.n;
    s.step_seconds = e->steps.seconds;
    s.step_cpu_seconds = e->steps.cpu_seconds;
    pl_engine_kv_samples ks;
    pl_kv_cache_samples(e->kv, &ks);
    pl_inbox_lock(&e->inbox); /* the groups taken since the last snapshot are in it now */
    pthread_mutex_lock(&e->stats_mu);
    e->snapshot = s;
    e->snapshot_samples = ks;
    pl_inbox_reset_taken_locked(&e->inbox);
    pthread_mutex_unlock(&e->stats_mu);
    pl_inbox_unlock(&e->inbox);
}

void pl_engine_get_kv_samples(pl_engine *e, pl_engine_kv_samples *out) {
    pthread_mutex_lock(&e->stats_mu);
    *out = e->snapshot_samples;
    pthread_mutex_unlock(&e->stats_mu);
}

/* Any thread: the snapshot of the last step, plus requests still in the inbox or taken since.
 * Both read under the inbox lock (then stats_mu, as pl_engine_snapshot_stats), so a request
 * moving from the inbox to the scheduler is counted once, never zero times. */
void pl_engine_get_stats(pl_engine *e, pl_engine_stats *s) {
    pl_inbox_lock(&e->inbox);
    pthread_mutex_lock(&e->stats_mu);
    *s = e->snapshot;
    pthread_mutex_unlock(&e->stats_mu);
    s->waiting += pl_inbox_waiting_locked(&e->inbox);
    pl_inbox_unlock(&e->inbox);
    s->lora_adapters = pl_lora_set_list(&e->loras, NULL, 0, &s->lora_requests);
}
