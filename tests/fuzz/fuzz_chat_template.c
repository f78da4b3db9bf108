/* Fuzz target: chat-template detection and rendering (src/tokenizer/chat_template.h).
 *
 * Input: one control byte, then NUL-separated fields: the template source, bos_text, eos_text,
 * then (role, content) pairs. A one-byte role is mapped to system/user/assistant (so most inputs
 * reach the formatters); longer roles are passed as they are (and must be refused unless they
 * are one of the three). Control bits: 0 add_generation_prompt; 1 use a family chosen by bits
 * 4-7 instead of detecting it from the template; 2 bos_text NULL; 3 eos_text NULL.
 * Checked: detection never gives UNKNOWN after the fallback and agrees with classify; a family's
 * name maps back to it; success gives a NUL-terminated text that is valid UTF-8 when every input
 * is; a message content without surrounding whitespace appears in the text as it is (families
 * only trim contents, none drops a message); ChatML's text is exactly the documented layout;
 * failure gives no text and a message. */
#include "base/status.h"
#include "tokenizer/chat_template.h"
#include "fuzz_util.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_FIELDS = 67 };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    unsigned ctl = data[0];
    /* A NUL-terminated copy, so every field is a C string (the template keeps its length). */
    char *buf = malloc(size);
    memcpy(buf, data + 1, size - 1);
    buf[size - 1] = '\0';
    const char *field[MAX_FIELDS];
    size_t flen[MAX_FIELDS];
    int nf = 0;
    for (size_t i = 0; i < size && nf < MAX_FIELDS;) {
        field[nf] = buf + i;
        flen[nf] = strlen(buf + i);
        i += flen[nf] + 1;
        nf++;
    }

    pl_chat_format cls = pl_chat_classify(field[0], flen[0]);
    pl_chat_format det = pl_chat_detect(field[0], flen[0]);
    if (cls < PL_CHAT_UNKNOWN || cls >= PL_CHAT_COUNT || det <= PL_CHAT_UNKNOWN || det >= PL_CHAT_COUNT)
        abort();
    if (cls != PL_CHAT_UNKNOWN ? det != cls : det != PL_CHAT_FALLBACK) abort();
    pl_chat_format by_name;
    if (pl_chat_format_by_name(field[0], &by_name) == PL_OK) {
        if (strcmp(pl_chat_format_name(by_name), field[0]) != 0) abort();
    } else {
        const char *msg = pl_last_error();
        if (!msg || !*msg) abort();
    }
    pl_chat_format f = (ctl & 2) ? (pl_chat_format)((ctl >> 4) % PL_CHAT_COUNT) : det;
    if (strcmp(pl_chat_format_name(f), "unknown") == 0 && f != PL_CHAT_UNKNOWN) abort();

    const char *bos = nf > 1 && !(ctl & 4) ? field[1] : NULL;
    const char *eos = nf > 2 && !(ctl & 8) ? field[2] : NULL;
    int all_utf8 = (!bos || valid_utf8(bos, strlen(bos))) && (!eos || valid_utf8(eos, strlen(eos)));
    pl_chat_message msgs[MAX_FIELDS / 2];
    size_t n = 0;
    static const char *const roles[] = {"system", "user", "assistant"};
    for (int i = 3; i + 1 < nf; i += 2) {
        msgs[n].role = flen[i] == 1 ? roles[(unsigned char)field[i][0] % 3] : field[i];
        msgs[n].content = field[i + 1];
        all_utf8 &= valid_utf8(field[i + 1], flen[i + 1]);
        n++;
    }
    char *out = (char *)1;
    pl_status st = pl_chat_apply(f, msgs, n, ctl & 1, bos, eos, &out);
    if (st == PL_OK) {
        if (!out) abort();
        size_t olen = strlen(out);
        if (all_utf8 && !valid_utf8(out, olen)) abort();
        for (size_t i = 0; i < n; i++) {
            const char *m = msgs[i].content;
            size_t ml = strlen(m);
            if (ml && !strchr(" \t\n\r\v\f", m[0]) && !strchr(" \t\n\r\v\f", m[ml - 1]) &&
                !strstr(out, m)) {
                fprintf(stderr, "%s: message %zu's content is missing\n", pl_chat_format_name(f), i);
                abort();
            }
        }
        if (f == PL_CHAT_CHATML || f == PL_CHAT_UNKNOWN) { /* UNKNOWN is formatted as ChatML */
            size_t cap = 32, k = 0;
            for (size_t i = 0; i < n; i++) cap += strlen(msgs[i].role) + strlen(msgs[i].content) + 32;
            char *want = malloc(cap);
            for (size_t i = 0; i < n; i++)
                k += (size_t)snprintf(want + k, cap - k, "<|im_start|>%s\n%s<|im_end|>\n",
                                      msgs[i].role, msgs[i].content);
            if (ctl & 1) snprintf(want + k, cap - k, "<|im_start|>assistant\n");
            if (strcmp(out, want) != 0) abort();
            free(want);
        }
        free(out);
    } else {
        if (out) abort();
        const char *msg = pl_last_error();
        if (!msg || !*msg) abort();
        int bad_role = 0;
        for (size_t i = 0; i < n; i++)
            bad_role |= strcmp(msgs[i].role, "system") && strcmp(msgs[i].role, "user") &&
                        strcmp(msgs[i].role, "assistant");
        if (st == PL_ERR_INVALID_ARG && n > 0 && !bad_role) abort(); /* nothing to refuse */
    }
    free(buf);
    return 0;
}
