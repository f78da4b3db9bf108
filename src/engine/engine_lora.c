/* engine/engine_lora — the public LoRA calls (pagellm.h): the engine's adapter set
 * (model/lora.h) seen from any thread. Requests take their adapter's reference in pl_admit. */
#include "engine/engine_internal.h"

pl_status pl_engine_load_lora(pl_engine *e, const char *name, const char *path, float scale) {
    return pl_lora_set_add(&e->loras, name, path, scale);
}

pl_status pl_engine_unload_lora(pl_engine *e, const char *name) {
    return pl_lora_set_remove(&e->loras, name);
}

int32_t pl_engine_list_loras(pl_engine *e, pl_lora_info *out, int32_t cap) {
    return pl_lora_set_list(&e->loras, out, cap, NULL);
}
