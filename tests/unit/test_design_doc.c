/* docs/DESIGN.md names only files and functions that exist (issue 32: the design had drifted,
 * naming folders and modules that were gone).
 *
 * Every `backticked` span of the document is read as one of:
 * - a path whose first folder is one of this repository's (src, tests, scripts, bench, docs,
 *   cmake, include) or a module of src/ (engine/output.h): it must exist, from the top of the
 *   repository, or from src/ or tests/;
 * - a bare file name (decoder.c, matmul_wt_tiles.h): some file of the repository has that name;
 * - a pl_ identifier (pl_kv_cache_prepare_step, pl_admit()): it stands in some source file of
 *   src/ or include/ as a whole word.
 * Braces expand (kv/cache.{h,c}, matmul_{scalar,avx2}.c), `*` and <...> match any part of one
 * name (test_<module>.c). Anything else (flags, fields, other projects' paths such as vLLM's
 * core/block_pool.py) is not checked; the few bare file names of other projects that the document
 * cites as models are listed below. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <ctype.h>
#include <fnmatch.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#ifndef PL_SOURCE_DIR
#error "PL_SOURCE_DIR: the repository's top folder"
#endif

/* Other projects' files the document cites by bare name (its "Learn from" list). */
static const char *const CITED[] = {"run.c", "dict.c", "sds.c", "ae.c", "ggml-cpu.c"};
static const char *const TOP_DIRS[] = {"src", "tests", "scripts", "bench", "docs", "cmake",
                                       "include"};
static const char *const FILE_EXTS[] = {".c", ".h", ".md", ".sh", ".py", ".mjs", ".js", ".cmake"};

/* Every file of the repository's folders, relative to the top ("src/engine/engine.c"), and the
 * text of src/ and include/'s .c and .h files, one after another. */
static char **files;
static size_t n_files, cap_files;
static char *sources;
static size_t sources_len;

/* The file's bytes, NUL-terminated (NULL if it cannot be read whole). */
static char *read_all(const char *path, size_t *len) {
    struct stat st;
    FILE *f = stat(path, &st) == 0 ? fopen(path, "rb") : NULL;
    char *s = f ? malloc((size_t)st.st_size + 1) : NULL;
    size_t n = s ? fread(s, 1, (size_t)st.st_size, f) : 0;
    if (f) fclose(f);
    if (s && n != (size_t)st.st_size) {
        free(s);
        return NULL;
    }
    if (s) s[n] = '\0';
    if (s && len) *len = n;
    return s;
}

static int ends_with(const char *s, const char *tail) {
    size_t a = strlen(s), b = strlen(tail);
    return a >= b && !strcmp(s + a - b, tail);
}

static int add_file(const char *path, const struct stat *st, int type, struct FTW *ftw) {
    (void)st;
    (void)ftw;
    if (type != FTW_F) return 0;
    const char *rel = path + strlen(PL_SOURCE_DIR) + 1;
    if (n_files == cap_files) {
        cap_files = cap_files ? 2 * cap_files : 1024;
        files = realloc(files, cap_files * sizeof *files);
        assert_non_null(files);
    }
    files[n_files++] = strdup(rel);
    if ((!strncmp(rel, "src/", 4) || !strncmp(rel, "include/", 8)) &&
        (ends_with(rel, ".c") || ends_with(rel, ".h"))) {
        size_t n;
        char *text = read_all(path, &n);
        assert_non_null(text);
        sources = realloc(sources, sources_len + n + 2);
        assert_non_null(sources);
        memcpy(sources + sources_len, text, n);
        sources_len += n;
        sources[sources_len++] = '\n';
        sources[sources_len] = '\0';
        free(text);
    }
    return 0;
}

static void load_tree(void) {
    for (size_t i = 0; i < sizeof TOP_DIRS / sizeof *TOP_DIRS; i++) {
        char dir[4096];
        snprintf(dir, sizeof dir, "%s/%s", PL_SOURCE_DIR, TOP_DIRS[i]);
        assert_int_equal(nftw(dir, add_file, 16, FTW_PHYS), 0);
    }
}

/* A name pattern: <...> becomes * (fnmatch). */
static void to_glob(const char *s, char *out, size_t cap) {
    size_t k = 0;
    for (; *s && k + 1 < cap; s++) {
        if (*s == '<') {
            const char *e = strchr(s, '>');
            if (e) {
                out[k++] = '*';
                s = e;
                continue;
            }
        }
        out[k++] = *s;
    }
    out[k] = '\0';
}

/* Some file matches pattern p: whole relative path (with a prefix tried: "", "src/", "tests/"),
 * or, bare, its base name. */
static int exists(const char *p, int bare) {
    char g[1024];
    to_glob(p, g, sizeof g);
    size_t gl = strlen(g);
    int dir = gl > 1 && g[gl - 1] == '/';
    if (dir) g[--gl] = '\0';
    for (size_t i = 0; i < n_files; i++) {
        const char *f = files[i];
        if (bare) {
            const char *b = strrchr(f, '/');
            if (!fnmatch(g, b ? b + 1 : f, 0)) return 1;
            continue;
        }
        static const char *const PREFIXES[] = {"", "src/", "tests/"};
        for (int k = 0; k < 3; k++) {
            size_t pl = strlen(PREFIXES[k]);
            if (strncmp(f, PREFIXES[k], pl)) continue;
            const char *rest = f + pl;
            if (!fnmatch(g, rest, FNM_PATHNAME)) return 1;
            /* a folder: some file below it */
            char dirpat[1100];
            snprintf(dirpat, sizeof dirpat, "%s/*", g);
            if (!fnmatch(dirpat, rest, 0)) return 1;
        }
    }
    return 0;
}

static int is_top_or_module(const char *first, size_t n) {
    if (n == 0 || first[0] == '.') return 0; /* ../shared: outside the repository */
    for (size_t i = 0; i < sizeof TOP_DIRS / sizeof *TOP_DIRS; i++)
        if (strlen(TOP_DIRS[i]) == n && !strncmp(first, TOP_DIRS[i], n)) return 1;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/src/%.*s", PL_SOURCE_DIR, (int)n, first);
    struct stat st;
    return stat(dir, &st) == 0 && S_ISDIR(st.st_mode);
}

static int has_file_ext(const char *s) {
    for (size_t i = 0; i < sizeof FILE_EXTS / sizeof *FILE_EXTS; i++)
        if (ends_with(s, FILE_EXTS[i])) return 1;
    return 0;
}

/* The pl_ identifiers of the sources, sorted (built once). */
static char **words;
static size_t n_words;

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void index_words(void) {
    size_t cap = 0;
    for (size_t i = 0; i + 3 < sources_len; i++) {
        if (i > 0 && (isalnum((unsigned char)sources[i - 1]) || sources[i - 1] == '_')) continue;
        if (strncmp(sources + i, "pl_", 3)) continue;
        size_t n = 0;
        while (isalnum((unsigned char)sources[i + n]) || sources[i + n] == '_') n++;
        if (n_words == cap) {
            cap = cap ? 2 * cap : 4096;
            words = realloc(words, cap * sizeof *words);
            assert_non_null(words);
        }
        words[n_words++] = strndup(sources + i, n);
        i += n;
    }
    qsort(words, n_words, sizeof *words, cmp_str);
}

static int word_in_sources(const char *w) {
    return bsearch(&w, words, n_words, sizeof *words, cmp_str) != NULL;
}

static int missing;

/* Check one span after brace expansion. */
static void check_one(const char *s, int line) {
    if (!strncmp(s, "pl_", 3)) {
        char id[256];
        size_t k = 0;
        while (s[k] && (isalnum((unsigned char)s[k]) || s[k] == '_') && k + 1 < sizeof id)
            id[k] = s[k], k++;
        id[k] = '\0';
        if (s[k] && strcmp(s + k, "()")) return; /* not an identifier alone */
        if (id[k - 1] == '_') return;            /* a prefix ("the pl_ names") */
        if (!word_in_sources(id)) {
            fprintf(stderr, "docs/DESIGN.md:%d: `%s` is in no source file\n", line, s);
            missing++;
        }
        return;
    }
    if (strchr(s, ' ')) return;
    const char *slash = strchr(s, '/');
    if (slash) {
        if (!is_top_or_module(s, (size_t)(slash - s))) return; /* another project's path */
        if (!exists(s, 0)) {
            fprintf(stderr, "docs/DESIGN.md:%d: `%s` does not exist\n", line, s);
            missing++;
        }
        return;
    }
    if (!has_file_ext(s)) return;
    for (size_t i = 0; i < sizeof CITED / sizeof *CITED; i++)
        if (!strcmp(s, CITED[i])) return;
    if (!exists(s, 1)) {
        fprintf(stderr, "docs/DESIGN.md:%d: no file is named `%s`\n", line, s);
        missing++;
    }
}

/* Expand the first {a,b,...} of s and recurse; check what has none left. */
static void expand(const char *s, int line) {
    const char *open = strchr(s, '{'), *close = open ? strchr(open, '}') : NULL;
    if (!open || !close) {
        check_one(s, line);
        return;
    }
    char buf[1024];
    for (const char *alt = open + 1; alt <= close;) {
        const char *end = alt;
        while (end < close && *end != ',') end++;
        snprintf(buf, sizeof buf, "%.*s%.*s%s", (int)(open - s), s, (int)(end - alt), alt,
                 close + 1);
        expand(buf, line);
        alt = end + 1;
    }
}

static void test_design_names_what_exists(void **state) {
    (void)state;
    load_tree();
    assert_true(n_files > 100 && sources_len > 100000);
    index_words();
    char path[4096];
    snprintf(path, sizeof path, "%s/docs/DESIGN.md", PL_SOURCE_DIR);
    char *doc = read_all(path, NULL);
    assert_non_null(doc);
    int line = 1, spans = 0;
    for (char *p = doc; *p; p++) {
        if (*p == '\n') line++;
        if (*p != '`') continue;
        char *end = p + 1;
        while (*end && *end != '`' && *end != '\n') end++;
        if (*end != '`') continue; /* an unclosed tick on this line: not a span */
        char span[1024];
        snprintf(span, sizeof span, "%.*s", (int)(end - p - 1), p + 1);
        expand(span, line);
        spans++;
        p = end;
    }
    assert_true(spans > 300); /* the document was read */
    /* the check can fail: names that do not exist are reported */
    int before = missing;
    fprintf(stderr, "three made-up names, which must be reported:\n");
    check_one("src/engine/no_such_file.c", 0);
    check_one("pl_no_such_function", 0);
    check_one("no_such_file.h", 0);
    assert_int_equal(missing - before, 3);
    missing = before;
    free(doc);
    for (size_t i = 0; i < n_files; i++) free(files[i]);
    free(files);
    free(sources);
    for (size_t i = 0; i < n_words; i++) free(words[i]);
    free(words);
    assert_int_equal(missing, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_design_names_what_exists)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
