/* jinja/lexer — template source to tokens, with Jinja2's whitespace control as transformers
 * configures it: newlines normalized and one trailing newline dropped (keep_trailing_newline
 * off); `{%-`/`-%}` (and `{{-`, `-}}`, `{#-`, `-#}`) strip all whitespace on that side;
 * trim_blocks drops the first newline after a block or comment tag; lstrip_blocks drops spaces
 * and tabs between the start of a line and a block or comment tag (`{%+` keeps them). */
#include "jinja/jj.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    jj_ctx *c;
    const char *s;
    size_t n, pos;
    int line;
    jj_token *t;
    size_t nt, cap;
} lx;

static void emit(lx *L, jj_token tk) {
    if (L->nt == L->cap) {
        size_t cap = L->cap ? L->cap * 2 : 256;
        jj_token *nt = jj_alloc(L->c, cap * sizeof *nt);
        if (L->nt) memcpy(nt, L->t, L->nt * sizeof *nt);
        L->t = nt;
        L->cap = cap;
    }
    L->t[L->nt++] = tk;
}

static void count_lines(lx *L, size_t from, size_t to) {
    for (size_t i = from; i < to; i++) L->line += L->s[i] == '\n';
}

/* Python's splitlines separators become "\n"; one trailing newline goes. */
static char *normalize(jj_ctx *c, const char *src, size_t len, size_t *out_len) {
    char *d = jj_alloc(c, len + 1);
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)src[i];
        if (ch == '\r') {
            if (i + 1 < len && src[i + 1] == '\n') i++;
            d[o++] = '\n';
        } else if (ch == '\v' || ch == '\f' || (ch >= 0x1c && ch <= 0x1e)) {
            d[o++] = '\n';
        } else if (ch == 0xC2 && i + 1 < len && (unsigned char)src[i + 1] == 0x85) {
            d[o++] = '\n';
            i++;
        } else if (ch == 0xE2 && i + 2 < len && (unsigned char)src[i + 1] == 0x80 &&
                   ((unsigned char)src[i + 2] == 0xA8 || (unsigned char)src[i + 2] == 0xA9)) {
            d[o++] = '\n';
            i += 2;
        } else d[o++] = (char)ch;
    }
    if (o && d[o - 1] == '\n') o--;
    d[o] = '\0';
    *out_len = o;
    return d;
}

static int is_ws(char ch) { return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\f' || ch == '\v'; }
static int is_name0(char ch) { return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_'; }
static int is_digit(char ch) { return ch >= '0' && ch <= '9'; }

static int hexval(char h) {
    if (h >= '0' && h <= '9') return h - '0';
    if (h >= 'a' && h <= 'f') return h - 'a' + 10;
    if (h >= 'A' && h <= 'F') return h - 'A' + 10;
    return -1;
}

/* A string literal's body decoded as Python's unicode-escape codec does. */
static void decode_string(lx *L, const char *p, size_t n, jj_token *tk) {
    jj_buf b = {0};
    jj_buf_put(L->c, &b, "", 0);
    for (size_t i = 0; i < n; i++) {
        if (p[i] != '\\' || i + 1 >= n) { jj_buf_put(L->c, &b, p + i, 1); continue; }
        char e = p[++i];
        const char *map = "\\\\''\"\"a\ab\bf\fn\nr\rt\tv\v";
        const char *m = strchr(map, e);
        if (m && ((m - map) % 2) == 0) { jj_buf_put(L->c, &b, m + 1, 1); continue; }
        if (e == '\n') continue;
        if (e >= '0' && e <= '7') {
            unsigned u = 0;
            int k = 0;
            while (k < 3 && i < n && p[i] >= '0' && p[i] <= '7') { u = u * 8 + (unsigned)(p[i] - '0'); i++; k++; }
            i--;
            jj_put_utf8(L->c, &b, u);
            continue;
        }
        int digits = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
        if (digits) {
            unsigned u = 0;
            if (i + (size_t)digits >= n)
                jj_fail(L->c, "line %d: truncated \\%c escape in a string", L->line, e);
            for (int k = 1; k <= digits; k++) {
                int h = hexval(p[i + (size_t)k]);
                if (h < 0) jj_fail(L->c, "line %d: truncated \\%c escape in a string", L->line, e);
                u = u * 16 + (unsigned)h;
            }
            if (u > 0x10FFFF) jj_fail(L->c, "line %d: illegal Unicode character in a string", L->line);
            i += (size_t)digits;
            jj_put_utf8(L->c, &b, u);
            continue;
        }
        jj_buf_put(L->c, &b, p + i - 1, 2);
    }
    tk->p = b.p;
    tk->n = b.len;
}

static const char *ops[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<",
                            ">", "=", "(", ")", "[", "]", "{", "}", ",", ".", ":", "|", NULL};

/* Tokens inside a tag up to its closer; returns the position after the closer and whether it
 * had '-' (strip) or '+'. */
static void lex_tag(lx *L, int block, int *strip_after, int *plus) {
    const char *s = L->s;
    int depth = 0;
    for (;;) {
        while (L->pos < L->n && is_ws(s[L->pos])) {
            if (s[L->pos] == '\n') L->line++;
            L->pos++;
        }
        if (L->pos >= L->n) jj_fail(L->c, "line %d: unexpected end of template, the tag is not closed", L->line);
        const char *p = s + L->pos;
        size_t left = L->n - L->pos;
        const char *cl = block ? "%}" : "}}";
        if (depth == 0) {
            int m = (p[0] == '-' || p[0] == '+') && left >= 3 && !memcmp(p + 1, cl, 2);
            if (m || (left >= 2 && !memcmp(p, cl, 2))) {
                *strip_after = m && p[0] == '-';
                *plus = m && p[0] == '+';
                L->pos += m ? 3 : 2;
                emit(L, (jj_token){block ? TK_BLOCK_END : TK_VAR_END, L->line, NULL, 0, 0, 0});
                return;
            }
        }
        jj_token tk = {0, L->line, p, 0, 0, 0};
        if (is_name0(*p)) {
            size_t k = 1;
            while (k < left && (is_name0(p[k]) || is_digit(p[k]))) k++;
            tk.t = TK_NAME;
            tk.n = k;
        } else if (is_digit(*p)) {
            int after_dot = L->nt && L->t[L->nt - 1].t == TK_OP && L->t[L->nt - 1].p[0] == '.';
            size_t k = 0;
            char num[80];
            size_t o = 0;
            int isf = 0;
            while (k < left && (is_digit(p[k]) || (p[k] == '_' && k + 1 < left && is_digit(p[k + 1])))) {
                if (p[k] != '_' && o < 70) num[o++] = p[k];
                k++;
            }
            if (!after_dot && k + 1 < left && p[k] == '.' && is_digit(p[k + 1])) {
                isf = 1;
                num[o++] = p[k++];
                while (k < left && (is_digit(p[k]) || (p[k] == '_' && k + 1 < left && is_digit(p[k + 1])))) {
                    if (p[k] != '_' && o < 70) num[o++] = p[k];
                    k++;
                }
            }
            if (!after_dot && k < left && (p[k] == 'e' || p[k] == 'E')) {
                size_t q = k + 1;
                if (q < left && (p[q] == '+' || p[q] == '-')) q++;
                if (q < left && is_digit(p[q])) {
                    isf = 1;
                    num[o++] = 'e';
                    if (p[k + 1] == '-') num[o++] = '-';
                    k = q;
                    while (k < left && is_digit(p[k])) { if (o < 78) num[o++] = p[k]; k++; }
                }
            }
            num[o] = '\0';
            tk.n = k;
            if (isf) { tk.t = TK_FLOAT; tk.f = strtod(num, NULL); }
            else {
                char *end;
                tk.t = TK_INT;
                if (o > 18) jj_fail(L->c, "line %d: integer literal too large", L->line);
                tk.i = strtoll(num, &end, 10);
            }
        } else if (*p == '\'' || *p == '"') {
            size_t k = 1;
            while (k < left && p[k] != *p) k += p[k] == '\\' ? 2 : 1;
            if (k >= left) jj_fail(L->c, "line %d: unterminated string", L->line);
            tk.t = TK_STRING;
            decode_string(L, p + 1, k - 1, &tk);
            count_lines(L, L->pos, L->pos + k);
            L->pos += k + 1;
            emit(L, tk);
            continue;
        } else {
            for (int i = 0; ops[i]; i++) {
                size_t ol = strlen(ops[i]);
                if (left >= ol && !memcmp(p, ops[i], ol)) {
                    tk.t = TK_OP;
                    tk.p = ops[i];
                    tk.n = ol;
                    break;
                }
            }
            if (!tk.t) jj_fail(L->c, "line %d: unexpected character '%c'", L->line, *p);
            if (strchr("([{", *p)) depth++;
            if (strchr(")]}", *p) && depth > 0) depth--;
            L->pos += tk.n;
            emit(L, tk);
            continue;
        }
        L->pos += tk.n;
        emit(L, tk);
    }
}

static void emit_data(lx *L, const char *p, size_t n, int line) {
    if (n) emit(L, (jj_token){TK_DATA, line, p, n, 0, 0});
}

/* Position of "{% WORD" (spaces, optional -/+) at p, with its end in *end; for raw blocks. */
static int match_tag_word(const char *s, size_t n, size_t p, const char *word, size_t *end,
                          int *strip_before, int *strip_after) {
    if (p + 2 > n || s[p] != '{' || s[p + 1] != '%') return 0;
    size_t q = p + 2;
    *strip_before = q < n && s[q] == '-';
    if (q < n && (s[q] == '-' || s[q] == '+')) q++;
    while (q < n && is_ws(s[q])) q++;
    size_t wl = strlen(word);
    if (q + wl > n || memcmp(s + q, word, wl)) return 0;
    q += wl;
    while (q < n && is_ws(s[q])) q++;
    *strip_after = q < n && s[q] == '-';
    if (q < n && (s[q] == '-' || s[q] == '+')) q++;
    if (q + 2 > n || s[q] != '%' || s[q + 1] != '}') return 0;
    *end = q + 2;
    return 1;
}

jj_token *jj_lex(jj_ctx *c, const char *src, size_t len, size_t *ntok) {
    lx L = {c, NULL, 0, 0, 1, NULL, 0, 0};
    L.s = normalize(c, src, len, &L.n);
    const char *s = L.s;
    int lstrip_next = 0, trim_next = 0, line_starting = 1;
    while (L.pos < L.n) {
        size_t start = L.pos;
        /* what the previous tag's end asks of this text */
        if (lstrip_next) {
            while (start < L.n && is_ws(s[start])) { line_starting = s[start] == '\n'; start++; }
        } else if (trim_next && start < L.n && s[start] == '\n') {
            start++;
            line_starting = 1;
        }
        lstrip_next = trim_next = 0;
        count_lines(&L, L.pos, start);
        size_t q = start;
        while (q + 1 < L.n && !(s[q] == '{' && (s[q + 1] == '{' || s[q + 1] == '%' || s[q + 1] == '#'))) q++;
        if (q + 1 >= L.n) {
            emit_data(&L, s + start, L.n - start, L.line);
            break;
        }
        char kind = s[q + 1], mod = q + 2 < L.n ? s[q + 2] : 0;
        size_t text_end = q;
        if (mod == '-') {
            while (text_end > start && is_ws(s[text_end - 1])) text_end--;
        } else if (mod != '+' && kind != '{') {
            size_t l = text_end;
            while (l > start && (s[l - 1] == ' ' || s[l - 1] == '\t')) l--;
            if ((l > start && s[l - 1] == '\n') || (l == start && line_starting)) text_end = l;
        }
        emit_data(&L, s + start, text_end - start, L.line);
        count_lines(&L, start, q);
        L.pos = q + 2 + (mod == '-' || mod == '+');
        int strip_after = 0, plus = 0;
        if (kind == '#') {
            size_t e = L.pos;
            while (e + 1 < L.n && !(s[e] == '#' && s[e + 1] == '}')) e++;
            if (e + 1 >= L.n) jj_fail(c, "line %d: unterminated comment", L.line);
            strip_after = e > L.pos && s[e - 1] == '-';
            count_lines(&L, L.pos, e);
            L.pos = e + 2;
            lstrip_next = strip_after;
            trim_next = !strip_after;
            line_starting = 0;
            continue;
        }
        size_t rend;
        int sb, sa;
        if (kind == '%' && match_tag_word(s, L.n, q, "raw", &rend, &sb, &sa)) {
            size_t e = rend, eend = 0;
            int esb = 0, esa = 0;
            while (e < L.n && !match_tag_word(s, L.n, e, "endraw", &eend, &esb, &esa)) e++;
            if (e >= L.n) jj_fail(c, "line %d: missing endraw", L.line);
            size_t b = rend, t = e;
            if (sa) while (b < t && is_ws(s[b])) b++;
            else if (b < t && s[b] == '\n') b++;
            if (esb) while (t > b && is_ws(s[t - 1])) t--;
            emit_data(&L, s + b, t - b, L.line);
            count_lines(&L, L.pos, eend);
            L.pos = eend;
            lstrip_next = esa;
            trim_next = !esa;
            line_starting = 0;
            continue;
        }
        emit(&L, (jj_token){kind == '%' ? TK_BLOCK_BEGIN : TK_VAR_BEGIN, L.line, NULL, 0, 0, 0});
        lex_tag(&L, kind == '%', &strip_after, &plus);
        lstrip_next = strip_after;
        trim_next = kind == '%' && !strip_after && !plus;
        line_starting = 0;
    }
    emit(&L, (jj_token){TK_EOF, L.line, NULL, 0, 0, 0});
    *ntok = L.nt;
    return L.t;
}
