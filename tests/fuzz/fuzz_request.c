/* libFuzzer target for the request parser (server/request.c), the code every byte a client sends
 * reaches first. The first input byte picks the endpoint (odd: chat, even: completions), the rest
 * is the body. A parsed chat request is also rendered with every chat template family and its
 * strings escaped back to JSON; a refused one must produce a 400 whose error body is valid JSON.
 * Built and run by tests/fuzz/run.sh (clang -fsanitize=fuzzer,address,undefined). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "core/chat.h"
#include "server/server_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    flint_api_kind kind = (data[0] & 1) ? FLINT_API_CHAT : FLINT_API_COMPLETION;
    flint_api_request r;
    flint_api_error e;
    flint_sbuf b = {0};
    if (flint_server_request_parse(kind, (const char *)data + 1, size - 1, &r, &e) == 0) {
        FLINT_ASSERT(r.max_tokens >= 0 && r.params.n_stop <= FLINT_MAX_STOP);
        for (int i = 0; i < r.params.n_stop; i++) FLINT_ASSERT(r.params.stop[i] && r.params.stop[i][0]);
        if (kind == FLINT_API_CHAT) {
            FLINT_ASSERT(r.n_msgs >= 1);
            static const flint_chat_format fmts[] = {FLINT_CHAT_CHATML, FLINT_CHAT_QWEN3, FLINT_CHAT_LLAMA3,
                                                     FLINT_CHAT_LLAMA2};
            flint_chat_options co;
            flint_chat_options_default(&co);
            co.tools = r.tools;
            if (r.enable_thinking >= 0) co.enable_thinking = r.enable_thinking;
            for (size_t f = 0; f < sizeof fmts / sizeof fmts[0]; f++) {
                flint_err err = {0};
                char *t = flint_chat_render(fmts[f], r.msgs, r.n_msgs, &co, "<s>", "</s>", &err);
                free(t);
            }
            for (int i = 0; i < r.n_msgs; i++) {
                FLINT_ASSERT(r.msgs[i].role && r.msgs[i].content);
                flint_sbuf_add_json_str(&b, r.msgs[i].content, strlen(r.msgs[i].content));
            }
        } else {
            FLINT_ASSERT(r.prompt || r.n_prompt_ids > 0);
            if (r.prompt) flint_sbuf_add_json_str(&b, r.prompt, strlen(r.prompt));
        }
    } else {
        FLINT_ASSERT(e.status == 400 && e.message[0]);
        flint_server_error_body(&b, &e);
        cJSON *j = cJSON_Parse(b.p);
        FLINT_ASSERT(j != NULL); /* the error object is valid JSON whatever the input was */
        cJSON_Delete(j);
    }
    flint_sbuf_free(&b);
    flint_server_request_free(&r);
    return 0;
}
