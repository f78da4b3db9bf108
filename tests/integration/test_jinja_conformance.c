/* The chat-template conformance suite: every case of $PL_SHARED_DIR/testdata/chat-templates
 * (17 real templates x the contexts of conversations.json, rendered by Python's jinja2 exactly as
 * transformers does, expected.json) through src/jinja, byte for byte; a case whose reference
 * raised must fail here too, with a message that contains the reference's. strftime_now is fixed
 * to 26 Jul 2024 as the reference was. Prints each failure and ends with "N passed, N failed". */
#include "jinja/jinja.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *p = malloc((size_t)n + 1);
    if (p && fread(p, 1, (size_t)n, f) != (size_t)n) { free(p); p = NULL; }
    fclose(f);
    if (p) { p[n] = '\0'; *len = (size_t)n; }
    return p;
}

/* The first byte where a and b differ, for the report. */
static size_t diff_at(const char *a, const char *b) {
    size_t i = 0;
    while (a[i] && a[i] == b[i]) i++;
    return i;
}

int main(void) {
    const char *shared = getenv("PL_SHARED_DIR") ? getenv("PL_SHARED_DIR") : PL_SHARED_DIR;
    char dir[1024], path[1200];
    snprintf(dir, sizeof dir, "%s/testdata/chat-templates", shared);
    snprintf(path, sizeof path, "%s/expected.json", dir);
    json_error_t jerr;
    json_t *exp = json_load_file(path, 0, &jerr);
    if (!exp) {
        fprintf(stderr, "%s: %s\n", path, jerr.text);
        printf("0 passed, 1 failed\n");
        return 1;
    }
    json_t *cases = json_object_get(exp, "cases");
    int64_t now;
    if (pl_jinja_parse_date("2024-07-26", &now) != PL_OK) return 1;
    pl_jinja_options opts = {.now = now};
    int passed = 0, failed = 0;
    size_t i;
    json_t *cs;
    json_array_foreach(cases, i, cs) {
        const char *tname = json_string_value(json_object_get(cs, "template"));
        const char *cname = json_string_value(json_object_get(cs, "case"));
        const char *want = json_string_value(json_object_get(cs, "output"));
        const char *want_err = json_string_value(json_object_get(cs, "error"));
        snprintf(path, sizeof path, "%s/%s", dir, tname);
        size_t tlen;
        char *src = slurp(path, &tlen);
        char *ctx = json_dumps(json_object_get(cs, "context"), JSON_PRESERVE_ORDER | JSON_COMPACT);
        pl_jinja *t = NULL;
        char *out = NULL;
        pl_status st = src ? pl_jinja_compile(src, tlen, &t) : PL_ERR_IO;
        if (st == PL_OK) st = pl_jinja_render(t, ctx, strlen(ctx), &opts, &out, NULL);
        int ok;
        if (want_err) {
            ok = st == PL_ERR_INVALID_ARG && strstr(pl_last_error(), want_err);
            if (!ok)
                printf("FAIL %s / %s: want the error \"%s\", got %s\n", tname, cname, want_err,
                       st == PL_OK ? "a rendering" : pl_last_error());
        } else {
            ok = st == PL_OK && want && !strcmp(out, want);
            if (!ok && st != PL_OK) printf("FAIL %s / %s: %s\n", tname, cname, pl_last_error());
            else if (!ok) {
                size_t d = diff_at(out, want);
                printf("FAIL %s / %s: differs at byte %zu\n  got  [%.80s]\n  want [%.80s]\n", tname,
                       cname, d, out + (d > 20 ? d - 20 : 0), want + (d > 20 ? d - 20 : 0));
            }
        }
        passed += ok;
        failed += !ok;
        free(out);
        free(ctx);
        free(src);
        pl_jinja_free(t);
    }
    json_decref(exp);
    printf("%d passed, %d failed\n", passed, failed);
    return failed || passed == 0;
}
