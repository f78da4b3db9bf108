/* engine/engine_parts — the parts an engine owns, for tests and tools that check each part
 * through the API of the module that owns it (struct pl_engine itself is private to src/engine:
 * engine_internal.h). Each returns the engine's own object, never NULL for a created engine,
 * valid until pl_engine_destroy; read it on the engine thread between steps. Only the KV cache
 * comes back writable, because kv/vattn.h's checks lock inside it; callers only read. */
#ifndef PL_ENGINE_ENGINE_PARTS_H
#define PL_ENGINE_ENGINE_PARTS_H

#include "pagellm.h"

#include "engine/scheduler.h"
#include "engine/spec.h"
#include "kv/cache.h"
#include "model/model.h"

pl_kv_cache *pl_engine_kv_cache(const pl_engine *e);         /* kv/cache.h */
const pl_scheduler *pl_engine_scheduler(const pl_engine *e); /* pl_scheduler_queue */
const pl_spec *pl_engine_spec(const pl_engine *e);           /* pl_spec_draft_manager */
const pl_model *pl_engine_model(const pl_engine *e);         /* model/model.h (hp) */

#endif
