/* server/webui — the web page `pagellm serve` shows at GET / (chat playground, KV cache view).
 *
 * What it owns: the files of src/server/webui/ (plain HTML, CSS and JS, no framework, nothing
 * fetched from elsewhere), compiled into the binary at build time: cmake/embed_files.cmake turns
 * each file into a byte array of a generated C file in the build folder (nothing generated is
 * committed). The page talks to the server only through its public API (/v1/chat/completions,
 * /v1/chat/render, /v1/kv/blocks, /v1/models), sending the API key as a bearer token.
 *
 * Invariants: asset paths are "/" + the file name, index.html is also "/"; every asset ends
 * with a NUL byte that `len` does not count; the table is sorted by path.
 */
#ifndef PL_SERVER_WEBUI_H
#define PL_SERVER_WEBUI_H

#include <stddef.h>

typedef struct {
    const char *path;           /* "/index.html", "/app.js", ... */
    const char *content_type;   /* from the extension */
    const unsigned char *data;  /* [len + 1] */
    size_t len;
} pl_webui_asset;

extern const pl_webui_asset pl_webui_assets[];
extern const size_t pl_webui_n_assets;

/* The asset for a URL path ("/" means /index.html), or NULL. */
const pl_webui_asset *pl_webui_find(const char *url);

#endif
