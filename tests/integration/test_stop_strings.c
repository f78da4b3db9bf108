/* Stop strings that cross token boundaries, through the public engine API with stories260K.
 *
 * The greedy continuation of "Once upon a time" tokenizes (`pagellm generate --json`, then
 * `pagellm detokenize` of growing prefixes) as
 *   ',' ' there' ' was' ' a' ' little' ' g' 'ir' 'l' ' named' ' Lily' '.' ' She' ' lo' 'ved'
 *   ' to' ' play' ' ' 'out' 's' 'id' 'e' ' in' ...
 * so "girl" spans three tokens and starts inside ' g', " named Lily" spans two whole tokens,
 * "amed Li" starts inside ' named' and ends inside ' Lily', "tside i" spans six. Every request
 * streams: after every engine step the text delivered so far must be a prefix of the final
 * expected text, so a byte of a stop string that was streamed and then "taken back" (deltas are
 * append-only) makes the test fail. n > 1 runs seeded sampling, picks stop strings straddling
 * token boundaries of each completion from a run without stops, and predicts where each
 * completion ends from that run's text and token boundaries alone. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "engine_util.h"

static const char *MODEL = PL_SHARED_DIR "/models/stories260K.gguf";
static const char *REF = ", there was a little girl named Lily. She loved to play outside in the "
                         "park. One day, she saw a big, red ball. She wanted to play with it,";
static const int32_t REF_IDS[48] = {432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338,
                                    401, 396, 267, 337, 410, 408, 419, 292, 411, 322, 265, 282,
                                    295, 433, 426, 385, 328, 432, 358, 394, 261, 370, 432, 352,
                                    266, 268, 388, 426, 338, 391, 266, 267, 337, 335, 312, 432};

static pl_engine *make_engine(void) {
    pl_engine_config c;
    pl_engine_config_default(&c);
    c.model_path = MODEL;
    c.kv_cache_memory = 16 << 20;
    c.threads = 2;
    pl_engine *e;
    if (pl_engine_create(&c, &e) != PL_OK) fail_msg("engine: %s", pl_last_error());
    return e;
}

/* Step until all n requests finished. After every step, completion k of request i must have
 * streamed a prefix of want[i][k] (when want is given); bnd[k][t] records the text length once
 * completion k of request 0 had t tokens (when bnd is given). */
static void run_streaming(pl_engine *e, const uint64_t *ids, result *res, int n, int n_comp,
                          const char *(*want)[RES_MAX_N], size_t (*bnd)[RES_MAX_TOK + 1]) {
    for (;;) {
        int all = 1;
        for (int i = 0; i < n; i++) {
            collect(e, ids[i], &res[i]);
            all &= res[i].finished;
            for (int k = 0; k < n_comp; k++) {
                if (want && (res[i].text_len[k] > strlen(want[i][k]) ||
                             memcmp(res[i].text[k], want[i][k], res[i].text_len[k]) != 0))
                    fail_msg("request %d completion %d streamed \"%s\", not a prefix of \"%s\"", i,
                             k, res[i].text[k], want[i][k]);
                if (bnd && i == 0) bnd[k][res[i].n_ids[k]] = res[i].text_len[k];
            }
        }
        if (all) break;
        if (pl_engine_step(e) != PL_OK) fail_msg("step: %s", pl_last_error());
    }
}

typedef struct {
    const char *stops[3];
    int include;
    const char *text;  /* the whole expected output */
    int32_t n_ids;     /* tokens generated: up to the one that completes the stop string */
    pl_finish_reason finish;
} stop_case;

static void test_stop_across_tokens_greedy(void **state) {
    (void)state;
    static const stop_case cases[] = {
        {{" named Lily"}, 0, ", there was a little girl", 10, PL_FINISH_STOP},
        {{"amed Li"}, 0, ", there was a little girl n", 10, PL_FINISH_STOP},
        {{"girl"}, 0, ", there was a little ", 8, PL_FINISH_STOP},
        {{"tside i"}, 0, ", there was a little girl named Lily. She loved to play ou", 22,
         PL_FINISH_STOP},
        {{"amed Li"}, 1, ", there was a little girl named Li", 10, PL_FINISH_STOP},
        {{"girl"}, 1, ", there was a little girl", 8, PL_FINISH_STOP},
        {{"tside i"}, 1, ", there was a little girl named Lily. She loved to play outside i",
         22, PL_FINISH_STOP},
        /* Held while they could still match ("girl", "Lily"), released when they cannot. */
        {{"girls", "Lily!", "play outside!"}, 0, NULL, 48, PL_FINISH_LENGTH},
        /* Two complete in the same token: the one that starts first wins. */
        {{"Lily", "named Lily"}, 0, ", there was a little girl ", 10, PL_FINISH_STOP},
        /* The first to complete wins even when listed last. */
        {{"d Lily.", "with it", "irl n"}, 0, ", there was a little g", 9, PL_FINISH_STOP},
    };
    enum { N = sizeof cases / sizeof cases[0] };
    pl_engine *e = make_engine();
    static result r[N];
    memset(r, 0, sizeof r);
    const char *want[N][RES_MAX_N];
    uint64_t id[N];
    for (int i = 0; i < N; i++) {
        pl_request_params p;
        pl_request_params_default(&p);
        p.sampling.temperature = 0;
        p.max_tokens = 48;
        p.ignore_eos = 1;
        p.stop = cases[i].stops;
        p.n_stop = cases[i].stops[2] ? 3 : cases[i].stops[1] ? 2 : 1;
        p.include_stop_str_in_output = cases[i].include;
        want[i][0] = cases[i].text ? cases[i].text : REF;
        assert_int_equal(pl_engine_add_request(e, "Once upon a time", NULL, 0, &p, &id[i]), PL_OK);
    }
    run_streaming(e, id, r, N, 1, want, NULL);
    for (int i = 0; i < N; i++) {
        print_message("stop \"%s\"%s -> \"%s\" (%d tokens)\n", cases[i].stops[0],
                      cases[i].include ? " (included)" : "", r[i].text[0], r[i].n_ids[0]);
        assert_string_equal(r[i].text[0], want[i][0]);
        assert_int_equal(r[i].finish[0], cases[i].finish);
        assert_int_equal(r[i].n_ids[0], cases[i].n_ids);
        assert_memory_equal(r[i].ids[0], REF_IDS, (size_t)cases[i].n_ids * sizeof(int32_t));
    }
    pl_engine_destroy(e);
}

enum { NC = 3, MAXT = 40 };

/* Where completion `text` (token boundaries bnd[0..n]) ends under stops, token by token: the
 * first token that completes an occurrence ends it, at the earliest-starting occurrence that
 * this token completes. Returns the tokens generated; *cut = the text length kept. */
static int32_t predict(const char *text, const size_t *bnd, int32_t n, const char *const *stops,
                       int n_stops, int include, size_t *cut, int *stopped) {
    for (int32_t t = 0; t < n; t++) {
        size_t best = (size_t)-1, best_end = 0;
        for (int s = 0; s < n_stops; s++) {
            size_t sl = strlen(stops[s]);
            for (size_t at = 0; at + sl <= bnd[t + 1]; at++)
                if (at + sl > bnd[t] && !memcmp(text + at, stops[s], sl) && at < best) {
                    best = at;
                    best_end = at + sl;
                }
        }
        if (best != (size_t)-1) {
            *cut = include ? best_end : best;
            *stopped = 1;
            return t + 1;
        }
    }
    *cut = bnd[n];
    *stopped = 0;
    return n;
}

static void test_stop_across_tokens_parallel(void **state) {
    (void)state;
    pl_engine *e = make_engine();
    pl_request_params p;
    pl_request_params_default(&p);
    p.sampling.temperature = 0.8f;
    p.has_seed = 1;
    p.seed = 7;
    p.n = NC;
    p.max_tokens = MAXT;
    p.ignore_eos = 1;
    static result ref, got[2];
    static size_t bnd[RES_MAX_N][RES_MAX_TOK + 1];
    memset(&ref, 0, sizeof ref);
    memset(got, 0, sizeof got);
    uint64_t id;
    assert_int_equal(pl_engine_add_request(e, "Lily and Tom", NULL, 0, &p, &id), PL_OK);
    run_streaming(e, &id, &ref, 1, NC, NULL, bnd);
    /* One stop per completion: the last byte of a token of >= 2 bytes, the next token, and the
     * first byte of the one after (three tokens, starting inside one), from token 4 on. */
    char stop_buf[NC][64];
    const char *stops[NC];
    for (int k = 0; k < NC; k++) {
        assert_int_equal(ref.n_ids[k], MAXT);
        assert_int_equal(bnd[k][MAXT], ref.text_len[k]);
        int32_t j = 4;
        while (j + 2 < MAXT && !(bnd[k][j] - bnd[k][j - 1] >= 2 && bnd[k][j + 1] > bnd[k][j] &&
                                  bnd[k][j + 2] > bnd[k][j + 1] &&
                                  bnd[k][j + 2] - bnd[k][j] < 40))
            j++;
        assert_true(j + 2 < MAXT);
        size_t from = bnd[k][j] - 1, len = bnd[k][j + 1] + 1 - from;
        memcpy(stop_buf[k], ref.text[k] + from, len);
        stop_buf[k][len] = '\0';
        stops[k] = stop_buf[k];
        print_message("completion %d: \"%s\"; stop \"%s\"\n", k, ref.text[k], stops[k]);
    }
    static char want_buf[2][NC][RES_MAX_TOK * 8];
    const char *want[2][RES_MAX_N];
    int32_t want_n[2][NC];
    int want_stop[2][NC];
    uint64_t ids[2];
    for (int inc = 0; inc < 2; inc++) {
        for (int k = 0; k < NC; k++) {
            size_t cut;
            want_n[inc][k] = predict(ref.text[k], bnd[k], MAXT, stops, NC, inc, &cut,
                                     &want_stop[inc][k]);
            memcpy(want_buf[inc][k], ref.text[k], cut);
            want_buf[inc][k][cut] = '\0';
            want[inc][k] = want_buf[inc][k];
        }
        p.stop = stops;
        p.n_stop = NC;
        p.include_stop_str_in_output = inc;
        assert_int_equal(pl_engine_add_request(e, "Lily and Tom", NULL, 0, &p, &ids[inc]), PL_OK);
    }
    run_streaming(e, ids, got, 2, NC, want, NULL);
    for (int inc = 0; inc < 2; inc++)
        for (int k = 0; k < NC; k++) {
            print_message("include %d, completion %d -> \"%s\"\n", inc, k, got[inc].text[k]);
            assert_string_equal(got[inc].text[k], want[inc][k]);
            assert_int_equal(got[inc].n_ids[k], want_n[inc][k]);
            assert_memory_equal(got[inc].ids[k], ref.ids[k],
                                (size_t)want_n[inc][k] * sizeof(int32_t));
            assert_int_equal(got[inc].finish[k],
                             want_stop[inc][k] ? PL_FINISH_STOP : PL_FINISH_LENGTH);
        }
    /* Each completion's own stop string ends it at the latest where it was taken from. */
    for (int k = 0; k < NC; k++) assert_int_equal(got[0].finish[k], PL_FINISH_STOP);
    pl_engine_destroy(e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stop_across_tokens_greedy),
        cmocka_unit_test(test_stop_across_tokens_parallel),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
