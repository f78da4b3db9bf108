/* bench/dataset — benchmark workloads: synthetic ShareGPT-/Alpaca-like, fixed, or a ShareGPT
 * JSON file. See bench.h. */
#include "bench/bench.h"

#include "base/rng.h"
#include "tokenizer/tokenizer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { DEFAULT_MAX_IN = 1024, DEFAULT_MAX_OUT = 1024, FILE_DEFAULT_MAX_TOTAL = 2048, MIN_LEN = 4 };

/* ---- parsing ---- */

pl_status pl_dataset_parse(const char *s, pl_dataset_spec *out) {
    memset(out, 0, sizeof *out);
    if (!s || !*s) return pl_fail(PL_ERR_INVALID_ARG, "--dataset: empty");
    if (!strcmp(s, "sharegpt")) {
        out->kind = PL_DS_SHAREGPT;
        return PL_OK;
    }
    if (!strcmp(s, "alpaca")) {
        out->kind = PL_DS_ALPACA;
        return PL_OK;
    }
    if (!strncmp(s, "fixed:", 6)) {
        char *end;
        long in = strtol(s + 6, &end, 10), o = 0;
        int good = end != s + 6 && *end == ':';
        if (good) {
            const char *p = end + 1;
            o = strtol(p, &end, 10);
            good = end != p && !*end;
        }
        if (!good || in < 1 || o < 1 || in > (1 << 24) || o > (1 << 24))
            return pl_fail(PL_ERR_INVALID_ARG, "--dataset: '%s' is not fixed:IN:OUT with IN and OUT "
                           "in [1, 16777216]", s);
        out->kind = PL_DS_FIXED;
        out->fixed_in = (int32_t)in;
        out->fixed_out = (int32_t)o;
        return PL_OK;
    }
    if (!strcmp(s, "chat")) {
        out->kind = PL_DS_CHAT;
        return PL_OK;
    }
    size_t n = strlen(s);
    if (n > 5 && !strcmp(s + n - 5, ".json")) {
        out->kind = PL_DS_FILE;
        out->path = s;
        return PL_OK;
    }
    return pl_fail(PL_ERR_INVALID_ARG, "--dataset: '%s' is not sharegpt, alpaca, fixed:IN:OUT, chat "
                   "or a FILE.json", s);
}

/* ---- length distributions ---- */

void pl_dataset_dists(pl_dataset_kind kind, const pl_dataset_opts *o, pl_length_dist *in,
                      pl_length_dist *out) {
    int32_t hi_in = o && o->max_in > 0 ? o->max_in : DEFAULT_MAX_IN;
    int32_t hi_out = o && o->max_out > 0 ? o->max_out : DEFAULT_MAX_OUT;
    if (kind == PL_DS_ALPACA) { /* paper: mean input 19.31, output 58.45, short tails */
        *in = (pl_length_dist){19.31, 0.5, MIN_LEN, hi_in};
        *out = (pl_length_dist){58.45, 0.9, MIN_LEN, hi_out};
    } else { /* ShareGPT, paper: mean input 161.31, output 337.99, long tails */
        *in = (pl_length_dist){161.31, 1.2, MIN_LEN, hi_in};
        *out = (pl_length_dist){337.99, 1.0, MIN_LEN, hi_out};
    }
    if (in->hi < in->lo) in->hi = in->lo;
    if (out->hi < out->lo) out->hi = out->lo;
}

/* E[clamp(exp(mu + sigma Z), lo, hi)] by the midpoint rule over z in [-8, 8]. */
static double clamped_mean(double mu, double sigma, double lo, double hi) {
    enum { K = 3200 };
    const double a = -8.0, h = 16.0 / K;
    double sum = 0, wsum = 0;
    for (int i = 0; i < K; i++) {
        double z = a + (i + 0.5) * h, w = exp(-0.5 * z * z);
        double x = exp(mu + sigma * z);
        sum += w * (x < lo ? lo : x > hi ? hi : x);
        wsum += w;
    }
    return sum / wsum;
}

double pl_length_dist_mu(const pl_length_dist *d) {
    double lo = -20, hi = 20;
    for (int it = 0; it < 200 && hi - lo > 1e-12; it++) {
        double mid = 0.5 * (lo + hi);
        if (clamped_mean(mid, d->sigma, d->lo, d->hi) < d->mean) lo = mid;
        else hi = mid;
    }
    return 0.5 * (lo + hi);
}

static int32_t draw_len(pl_rng *r, const pl_length_dist *d, double mu) {
    double x = exp(mu + d->sigma * pl_rng_normal(r));
    if (!(x < d->hi)) return d->hi; /* also catches inf */
    long v = lround(x);
    return v < d->lo ? d->lo : v > d->hi ? d->hi : (int32_t)v;
}

/* ---- building requests ---- */

static void fill_random(pl_rng *r, int32_t *ids, int32_t n, int32_t first, int32_t n_vocab) {
    uint64_t span = n_vocab > first ? (uint64_t)(n_vocab - first) : 1;
    for (int32_t i = 0; i < n; i++) ids[i] = first + (int32_t)pl_rng_below(r, span);
}

/* Clamp a request to max_total (prompt first keeps at least prefix + 1 tokens). */
static void fit_total(int32_t *in, int32_t *out, int32_t min_in, int32_t max_total) {
    if (max_total <= 0) return;
    if (*in > max_total - 1) *in = max_total - 1 > min_in ? max_total - 1 : min_in;
    if (*in + *out > max_total) *out = max_total - *in;
    if (*out < 1) *out = 1;
}

static pl_status alloc_requests(pl_dataset *d, int32_t n) {
    d->req = calloc((size_t)n, sizeof *d->req);
    if (!d->req) return pl_fail(PL_ERR_NOMEM, "dataset: out of memory for %d requests", n);
    d->n = n;
    return PL_OK;
}

static pl_status make_synthetic(const pl_dataset_spec *spec, int32_t n, uint64_t seed,
                                const pl_dataset_opts *o, pl_dataset *d) {
    pl_length_dist din, dout;
    pl_dataset_dists(spec->kind, o, &din, &dout);
    double mu_in = pl_length_dist_mu(&din), mu_out = pl_length_dist_mu(&dout);
    pl_rng rl, ri;
    pl_rng_seed(&rl, seed);
    pl_rng_seed(&ri, seed ^ 0x5eed1d5ull);
    int32_t pre = o->shared_prefix > 0 ? o->shared_prefix : 0;
    int32_t *prefix = pre ? malloc((size_t)pre * sizeof *prefix) : NULL;
    if (pre && !prefix) return pl_fail(PL_ERR_NOMEM, "dataset: out of memory");
    if (pre) fill_random(&ri, prefix, pre, o->first_id, o->n_vocab);
    PL_TRY(alloc_requests(d, n));
    pl_status st = PL_OK;
    for (int32_t i = 0; i < n && st == PL_OK; i++) {
        int32_t in, out;
        if (spec->kind == PL_DS_FIXED) {
            in = spec->fixed_in;
            out = spec->fixed_out;
        } else {
            in = draw_len(&rl, &din, mu_in);
            out = draw_len(&rl, &dout, mu_out);
        }
        in += pre;
        fit_total(&in, &out, pre + 1, o->max_total);
        pl_bench_request *q = &d->req[i];
        q->in_len = in;
        q->out_len = out;
        if (!(q->prompt = malloc((size_t)in * sizeof *q->prompt))) {
            st = pl_fail(PL_ERR_NOMEM, "dataset: out of memory for a %d-token prompt", in);
            break;
        }
        int32_t k = pre < in ? pre : in;
        if (k) memcpy(q->prompt, prefix, (size_t)k * sizeof *prefix);
        fill_random(&ri, q->prompt + k, in - k, o->first_id, o->n_vocab);
    }
    free(prefix);
    if (st != PL_OK) pl_dataset_destroy(d);
    return st;
}

/* ---- ShareGPT files ---- */

static const char *turn_text(json_t *conv, size_t i) {
    json_t *t = json_array_get(conv, i);
    json_t *v = json_is_object(t) ? json_object_get(t, "value") : NULL;
    return json_is_string(v) ? json_string_value(v) : NULL;
}

static pl_status make_from_file(const pl_dataset_spec *spec, int32_t n, uint64_t seed,
                                const pl_dataset_opts *o, pl_dataset *d) {
    if (!o->tok)
        return pl_fail(PL_ERR_INVALID_ARG, "dataset %s: counting tokens needs a tokenizer",
                       spec->path);
    json_error_t jerr;
    json_t *root = json_load_file(spec->path, 0, &jerr);
    if (!root)
        return pl_fail(PL_ERR_IO, "dataset %s: line %d: %s", spec->path, jerr.line, jerr.text);
    if (!json_is_array(root)) {
        json_decref(root);
        return pl_fail(PL_ERR_INVALID_ARG, "dataset %s: expected a JSON list of conversations",
                       spec->path);
    }
    size_t total = json_array_size(root);
    size_t *perm = malloc((total ? total : 1) * sizeof *perm);
    pl_status st = perm ? alloc_requests(d, n) : pl_fail(PL_ERR_NOMEM, "dataset: out of memory");
    int32_t max_in = o->max_in > 0 ? o->max_in : DEFAULT_MAX_IN;
    int32_t max_total = o->max_total > 0 ? o->max_total : FILE_DEFAULT_MAX_TOTAL;
    pl_rng r;
    pl_rng_seed(&r, seed);
    for (size_t i = 0; perm && i < total; i++) perm[i] = i;
    for (size_t i = total; perm && i > 1; i--) { /* Fisher-Yates */
        size_t j = (size_t)pl_rng_below(&r, i), t = perm[i - 1];
        perm[i - 1] = perm[j];
        perm[j] = t;
    }
    int32_t got = 0;
    for (size_t i = 0; st == PL_OK && i < total && got < n; i++) {
        json_t *c = json_object_get(json_array_get(root, perm[i]), "conversations");
        if (!json_is_array(c) || json_array_size(c) < 2) continue;
        const char *q = turn_text(c, 0), *a = turn_text(c, 1);
        if (!q || !a) continue;
        int32_t *ids = NULL, *aids = NULL;
        size_t nq = 0, na = 0;
        if (pl_tokenize(o->tok, q, strlen(q), 1, 0, &ids, &nq) != PL_OK ||
            pl_tokenize(o->tok, a, strlen(a), 0, 0, &aids, &na) != PL_OK) {
            free(ids);
            continue; /* not UTF-8: skip */
        }
        free(aids);
        if (nq < MIN_LEN || na < MIN_LEN || nq > (size_t)max_in || nq + na > (size_t)max_total ||
            (o->max_out > 0 && na > (size_t)o->max_out)) {
            free(ids);
            continue;
        }
        d->req[got++] = (pl_bench_request){(int32_t)nq, (int32_t)na, ids};
    }
    free(perm);
    json_decref(root);
    if (st == PL_OK && got < n)
        st = pl_fail(PL_ERR_INVALID_ARG, "dataset %s: only %d usable conversations (prompt %d..%d "
                     "tokens, total <= %d), %d asked", spec->path, got, MIN_LEN, max_in, max_total, n);
    if (st != PL_OK) pl_dataset_destroy(d);
    return st;
}

pl_status pl_dataset_make(const pl_dataset_spec *spec, int32_t n, uint64_t seed,
                          const pl_dataset_opts *o, pl_dataset *out) {
    memset(out, 0, sizeof *out);
    if (n < 1) return pl_fail(PL_ERR_INVALID_ARG, "dataset: need at least 1 request, got %d", n);
    if (spec->kind != PL_DS_FILE && o->n_vocab <= o->first_id)
        return pl_fail(PL_ERR_INVALID_ARG, "dataset: vocabulary of %d ids leaves none above %d",
                       o->n_vocab, o->first_id);
    if (o->shared_prefix < 0) return pl_fail(PL_ERR_INVALID_ARG, "dataset: negative shared prefix");
    if (o->max_total > 0 && o->shared_prefix >= o->max_total)
        return pl_fail(PL_ERR_INVALID_ARG, "dataset: a %d-token shared prefix leaves no room "
                       "within %d tokens", o->shared_prefix, o->max_total);
    if (spec->kind == PL_DS_CHAT)
        return pl_fail(PL_ERR_INVALID_ARG, "--dataset chat: conversations wait for each answer, "
                       "which only bench throughput does (with --request-rate)");
    if (spec->kind == PL_DS_FILE) return make_from_file(spec, n, seed, o, out);
    return make_synthetic(spec, n, seed, o, out);
}

void pl_dataset_destroy(pl_dataset *d) {
    for (int32_t i = 0; d->req && i < d->n; i++) free(d->req[i].prompt);
    free(d->req);
    memset(d, 0, sizeof *d);
}

/* ---- chatbot conversations ---- */

enum { CHAT_MIN_TURNS = 2, CHAT_MAX_TURNS = 6, CHAT_MAX_LEN = 256 };

pl_status pl_chat_make(int32_t n_conv, uint64_t seed, const pl_dataset_opts *o,
                       pl_chat_dataset *out) {
    memset(out, 0, sizeof *out);
    if (n_conv < 1)
        return pl_fail(PL_ERR_INVALID_ARG, "dataset chat: need at least 1 conversation, got %d",
                       n_conv);
    if (o->n_vocab <= o->first_id)
        return pl_fail(PL_ERR_INVALID_ARG, "dataset chat: vocabulary of %d ids leaves none above %d",
                       o->n_vocab, o->first_id);
    int32_t hi_out = o->max_out > 0 && o->max_out < CHAT_MAX_LEN ? o->max_out : CHAT_MAX_LEN;
    pl_length_dist du = {40, 0.8, MIN_LEN, CHAT_MAX_LEN}, da = {80, 0.8, MIN_LEN, hi_out};
    if (da.hi < da.lo) da.lo = da.hi;
    double mu_u = pl_length_dist_mu(&du), mu_a = pl_length_dist_mu(&da);
    pl_rng rl, ri;
    pl_rng_seed(&rl, seed);
    pl_rng_seed(&ri, seed ^ 0xc4a7ull);
    if (!(out->conv = calloc((size_t)n_conv, sizeof *out->conv)))
        return pl_fail(PL_ERR_NOMEM, "dataset chat: out of memory for %d conversations", n_conv);
    out->n = n_conv;
    for (int32_t i = 0; i < n_conv; i++) {
        pl_conversation *c = &out->conv[i];
        int32_t t = CHAT_MIN_TURNS + (int32_t)pl_rng_below(&rl, CHAT_MAX_TURNS - CHAT_MIN_TURNS + 1);
        c->user_len = calloc((size_t)t, sizeof *c->user_len);
        c->out_len = calloc((size_t)t, sizeof *c->out_len);
        c->user = calloc((size_t)t, sizeof *c->user);
        if (!c->user_len || !c->out_len || !c->user) goto nomem;
        c->n_turns = t;
        for (int32_t k = 0; k < t; k++) {
            c->user_len[k] = draw_len(&rl, &du, mu_u);
            c->out_len[k] = draw_len(&rl, &da, mu_a);
            if (!(c->user[k] = malloc((size_t)c->user_len[k] * sizeof **c->user))) goto nomem;
            fill_random(&ri, c->user[k], c->user_len[k], o->first_id, o->n_vocab);
        }
    }
    return PL_OK;
nomem:
    pl_chat_destroy(out);
    return pl_fail(PL_ERR_NOMEM, "dataset chat: out of memory");
}

void pl_chat_destroy(pl_chat_dataset *d) {
    for (int32_t i = 0; d->conv && i < d->n; i++) {
        pl_conversation *c = &d->conv[i];
        for (int32_t k = 0; c->user && k < c->n_turns; k++) free(c->user[k]);
        free(c->user);
        free(c->user_len);
        free(c->out_len);
    }
    free(d->conv);
    memset(d, 0, sizeof *d);
}

pl_status pl_chat_answer(pl_chat_history *h, const int32_t *ids, int32_t n) {
    if (n < 0) return pl_fail(PL_ERR_INVALID_ARG, "chat history: negative length");
    if (h->n + n > h->cap) {
        int32_t cap = h->cap ? h->cap : 256;
        while (cap < h->n + n) cap *= 2;
        int32_t *p = realloc(h->ids, (size_t)cap * sizeof *p);
        if (!p) return pl_fail(PL_ERR_NOMEM, "chat history: out of memory for %d tokens", cap);
        h->ids = p;
        h->cap = cap;
    }
    if (n) memcpy(h->ids + h->n, ids, (size_t)n * sizeof *ids);
    h->n += n;
    return PL_OK;
}

pl_status pl_chat_turn(pl_chat_history *h, const pl_conversation *c, int32_t k,
                       int32_t max_prompt, const int32_t **prompt, int32_t *n_prompt) {
    if (k < 0 || k >= c->n_turns || max_prompt < 1)
        return pl_fail(PL_ERR_INVALID_ARG, "chat: turn %d of %d, prompt limit %d", k, c->n_turns,
                       max_prompt);
    PL_TRY(pl_chat_answer(h, c->user[k], c->user_len[k])); /* the user turn joins the history */
    int32_t n = h->n < max_prompt ? h->n : max_prompt;
    *prompt = h->ids + (h->n - n);
    *n_prompt = n;
    return PL_OK;
}

void pl_chat_history_free(pl_chat_history *h) {
    free(h->ids);
    memset(h, 0, sizeof *h);
}
