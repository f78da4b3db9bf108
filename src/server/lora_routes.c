/* server/lora_routes — LoRA adapters over HTTP (vLLM's shapes): the adapters' entries in
 * /v1/models (each with `parent` the base model), `model: NAME` resolved to an adapter, and
 * POST /v1/load_lora_adapter {"lora_name", "lora_path"} / /v1/unload_lora_adapter {"lora_name"},
 * which answer vLLM's plain-text "Success: ..." and only when runtime updating is allowed
 * (--allow-runtime-lora-updating or VLLM_ALLOW_RUNTIME_LORA_UPDATING=true; otherwise 404 as
 * vLLM, which does not mount them). The adapters themselves live in the engine (model/lora.h). */
#include "server/server_internal.h"

#include <stdlib.h>
#include <string.h>

/* A snapshot of the loaded adapters (malloc'ed, *n of them; NULL and 0 when none or no memory). */
static pl_lora_info *list(pl_server *s, int32_t *n) {
    *n = 0;
    int32_t k = pl_engine_list_loras(s->eng, NULL, 0);
    pl_lora_info *v = k > 0 ? malloc((size_t)k * sizeof *v) : NULL;
    if (!v) return NULL;
    int32_t m = pl_engine_list_loras(s->eng, v, k);
    *n = m < k ? m : k;
    return v;
}

static json_t *adapter_json(pl_server *s, const pl_lora_info *a) {
    return json_pack("{s:s, s:s, s:I, s:s, s:s, s:s, s:i, s:[]}", "id", a->name, "object", "model",
                     "created", (json_int_t)s->created, "owned_by", "pagellm", "root", a->path,
                     "parent", s->model_name, "max_model_len", s->max_model_len, "permission");
}

int pl_srv_lora_models(pl_server *s, json_t *data) {
    int32_t n;
    pl_lora_info *v = list(s, &n);
    int bad = 0;
    for (int32_t i = 0; i < n && !bad; i++) bad = json_array_append_new(data, adapter_json(s, &v[i]));
    free(v);
    return bad ? -1 : 0;
}

json_t *pl_srv_lora_model(pl_server *s, const char *name) {
    int32_t n;
    pl_lora_info *v = list(s, &n);
    json_t *o = NULL;
    for (int32_t i = 0; i < n && !o; i++)
        if (!strcmp(v[i].name, name)) o = adapter_json(s, &v[i]);
    free(v);
    return o;
}

int pl_srv_resolve_model(pl_server *s, const char *name, const char **lora, const char *param,
                         pl_server_error *err) {
    *lora = NULL;
    if (!name || !strcmp(name, s->model_name)) return 0;
    int32_t n;
    pl_lora_info *v = list(s, &n);
    int found = 0;
    for (int32_t i = 0; i < n && !found; i++) found = !strcmp(v[i].name, name);
    free(v);
    if (!found) return pl_srv_model_not_found(s, name, param, err);
    *lora = name;
    return 0;
}

json_t *pl_server_parse_lora_body(const char *body, size_t len, int need_path, const char **name,
                                  const char **path, pl_server_error *err) {
    json_t *o = pl_server_parse_json(body, len, err);
    if (!o) return NULL;
    json_t *nm = json_object_get(o, "lora_name"), *p = json_object_get(o, "lora_path");
    int bad = 0;
    if (!json_is_string(nm) || !json_string_length(nm) || json_string_length(nm) > 127 ||
        strlen(json_string_value(nm)) != json_string_length(nm))
        bad = pl_server_fail(err, 400, "lora_name", nm ? "invalid_value" : "missing_required_parameter",
                             "'lora_name' must be a string of 1 to 127 bytes without NUL");
    else if (need_path && (!json_is_string(p) || !json_string_length(p) ||
                           strlen(json_string_value(p)) != json_string_length(p)))
        bad = pl_server_fail(err, 400, "lora_path", p ? "invalid_type" : "missing_required_parameter",
                             "'lora_path' must be a non-empty string without NUL");
    if (bad) {
        json_decref(o);
        return NULL;
    }
    *name = json_string_value(nm);
    *path = need_path ? json_string_value(p) : NULL;
    return o;
}

static enum MHD_Result lora_route(pl_server *s, struct MHD_Connection *c, pl_conn_ctx *x, int load) {
    pl_server_error err;
    if (!s->cfg.allow_runtime_lora) {
        pl_server_fail(&err, 404, NULL, "not_found", "runtime LoRA updating is off: start the "
                       "server with --allow-runtime-lora-updating (or "
                       "VLLM_ALLOW_RUNTIME_LORA_UPDATING=true)");
        return pl_srv_send_error(c, &err);
    }
    const char *name = NULL, *path = NULL;
    char msg[256];
    json_t *root = pl_server_parse_lora_body(x->body ? x->body : "", x->len, load, &name, &path, &err);
    int rc = !root ? -1
             : !strcmp(name, s->model_name)
                 ? pl_server_fail(&err, 400, "lora_name", "invalid_value", "'lora_name' '%s' is the "
                                  "base model's name", name)
                 : 0;
    if (!rc) {
        pl_status st = load ? pl_engine_load_lora(s->eng, name, path, 1.0f)
                            : pl_engine_unload_lora(s->eng, name);
        if (st == PL_ERR_NOMEM) rc = pl_server_nomem(&err);
        else if (st != PL_OK)
            rc = pl_server_fail(&err, st == PL_ERR_NOT_FOUND || st == PL_ERR_IO ? 404 : 400,
                                load ? "lora_path" : "lora_name", "invalid_value", "%s",
                                pl_last_error());
        else
            snprintf(msg, sizeof msg, "Success: LoRA adapter '%s' %s successfully.", name,
                     load ? "added" : "removed");
    }
    json_decref(root);
    if (rc) return pl_srv_send_error(c, &err);
    return pl_srv_send_text(c, MHD_HTTP_OK, "text/plain; charset=utf-8", strdup(msg));
}

enum MHD_Result pl_srv_load_lora(pl_server *s, struct MHD_Connection *c, pl_conn_ctx *x) {
    return lora_route(s, c, x, 1);
}

enum MHD_Result pl_srv_unload_lora(pl_server *s, struct MHD_Connection *c, pl_conn_ctx *x) {
    return lora_route(s, c, x, 0);
}
