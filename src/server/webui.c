/* server/webui — serve the embedded page (webui.h); the bytes come from the generated
 * webui_assets.c in the build folder. */
#include "server/webui.h"
#include "server/server_internal.h"

#include <string.h>

const pl_webui_asset *pl_webui_find(const char *url) {
    if (!url) return NULL;
    if (!strcmp(url, "/")) url = "/index.html";
    for (size_t i = 0; i < pl_webui_n_assets; i++)
        if (!strcmp(url, pl_webui_assets[i].path)) return &pl_webui_assets[i];
    return NULL;
}

int pl_srv_webui(pl_server *s, struct MHD_Connection *c, const char *url, enum MHD_Result *res) {
    if (s->cfg.no_webui) return 0;
    const pl_webui_asset *a = pl_webui_find(url);
    if (!a) return 0;
    struct MHD_Response *r = MHD_create_response_from_buffer(a->len, (void *)a->data,
                                                             MHD_RESPMEM_PERSISTENT);
    if (!r) {
        *res = MHD_NO;
        return 1;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, a->content_type);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    /* The page loads nothing from elsewhere; say so, so a regression shows in the console. */
    MHD_add_response_header(r, "Content-Security-Policy",
                            "default-src 'self'; style-src 'self' 'unsafe-inline'; "
                            "img-src 'self' data:; connect-src 'self'");
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    *res = MHD_queue_response(c, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return 1;
}
