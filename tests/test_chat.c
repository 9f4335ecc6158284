/* Chat templates: Qwen3 against renders of the real Jinja template (tools/make_chat_fixture.py);
 * Llama-3 and Llama-2 against their reference layouts; detection and errors. */
#include <stdlib.h>
#include <string.h>

#include "core/chat.h"
#include "core/json.h"
#include "test.h"

static void test_qwen3_fixture(void) {
    flint_err err = {0};
    cJSON *j = flint_json_load_file(FLINT_SOURCE_DIR "/tests/fixtures/chat/qwen3.json", 1 << 20, &err);
    CHECKF(j != NULL, "%s", err.msg);
    if (!j) return;
    const cJSON *cases = cJSON_GetObjectItem(j, "cases"), *c;
    int n_cases = 0;
    cJSON_ArrayForEach(c, cases) {
        const cJSON *msgs = cJSON_GetObjectItem(c, "messages"), *m;
        flint_chat_msg mm[16];
        memset(mm, 0, sizeof mm);
        int n = 0;
        cJSON_ArrayForEach(m, msgs) {
            mm[n].role = cJSON_GetObjectItem(m, "role")->valuestring;
            mm[n].content = cJSON_GetObjectItem(m, "content")->valuestring;
            const cJSON *rc = cJSON_GetObjectItem(m, "reasoning_content");
            mm[n].reasoning_content = rc ? rc->valuestring : NULL;
            mm[n].tool_calls = cJSON_GetObjectItem(m, "tool_calls");
            n++;
        }
        flint_chat_options o;
        flint_chat_options_default(&o);
        o.tools = cJSON_GetObjectItem(c, "tools");
        o.add_generation_prompt = cJSON_IsTrue(cJSON_GetObjectItem(c, "add_generation_prompt"));
        o.enable_thinking = cJSON_IsTrue(cJSON_GetObjectItem(c, "enable_thinking"));
        char *got = flint_chat_render(FLINT_CHAT_QWEN3, mm, n, &o, NULL, "<|im_end|>", &err);
        const char *want = cJSON_GetObjectItem(c, "text")->valuestring;
        CHECKF(got && !strcmp(got, want), "case %d:\n--- want\n%s\n--- got\n%s", n_cases, want, got ? got : "(null)");
        free(got);
        n_cases++;
    }
    CHECK(n_cases >= 36);
    cJSON_Delete(j);
}

static void test_llama(void) {
    flint_err err = {0};
    flint_chat_options o;
    flint_chat_options_default(&o);
    flint_chat_msg m[] = {{"system", "Be kind."}, {"user", " Hi "}, {"assistant", "Hello!"}, {"user", "Bye"}};
    char *s = flint_chat_render(FLINT_CHAT_LLAMA2, m, 4, &o, "<s>", "</s>", &err);
    CHECK(s && !strcmp(s, "<s>[INST] <<SYS>>\nBe kind.\n<</SYS>>\n\nHi [/INST] Hello! </s><s>[INST] Bye [/INST]"));
    free(s);
    s = flint_chat_render(FLINT_CHAT_LLAMA3, m, 4, &o, "<|begin_of_text|>", "<|eot_id|>", &err);
    CHECK(s && !strcmp(s, "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe kind.<|eot_id|>"
                          "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                          "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
                          "<|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|>"
                          "<|start_header_id|>assistant<|end_header_id|>\n\n"));
    free(s);
    flint_chat_msg bad[] = {{"user", "a"}, {"user", "b"}};
    s = flint_chat_render(FLINT_CHAT_LLAMA2, bad, 2, &o, "<s>", "</s>", &err);
    CHECK(!s && strstr(err.msg, "alternate"));
    flint_chat_msg badrole[] = {{"wizard", "a"}};
    s = flint_chat_render(FLINT_CHAT_CHATML, badrole, 1, &o, NULL, NULL, &err);
    CHECK(!s && strstr(err.msg, "wizard"));
    s = flint_chat_render(FLINT_CHAT_NONE, m, 1, &o, NULL, NULL, &err);
    CHECK(!s && strstr(err.msg, "--chat-template"));
}

static void test_detect(void) {
    CHECK(flint_chat_detect(NULL) == FLINT_CHAT_NONE);
    CHECK(flint_chat_detect("{{ '<|im_start|>' + m }}") == FLINT_CHAT_CHATML);
    CHECK(flint_chat_detect("<|im_start|> .. </think>") == FLINT_CHAT_QWEN3);
    CHECK(flint_chat_detect("<|start_header_id|>") == FLINT_CHAT_LLAMA3);
    CHECK(flint_chat_detect("[INST]") == FLINT_CHAT_LLAMA2);
    flint_chat_format f;
    CHECK(flint_chat_parse_format("llama3", &f) == 0 && f == FLINT_CHAT_LLAMA3);
    CHECK(flint_chat_parse_format("qwen3", &f) == 0 && f == FLINT_CHAT_QWEN3);
    CHECK(flint_chat_parse_format("nope", &f) == -1);
    /* the real Qwen3 tokenizer_config.json */
    flint_err err = {0};
    cJSON *j = flint_json_load_file(FLINT_SHARED_DIR "/tokenizers/qwen3/tokenizer_config.json", 1 << 22, &err);
    CHECKF(j != NULL, "%s", err.msg);
    if (j) {
        CHECK(flint_chat_detect(cJSON_GetObjectItem(j, "chat_template")->valuestring) == FLINT_CHAT_QWEN3);
        cJSON_Delete(j);
    }
}

int main(void) {
    test_qwen3_fixture();
    test_llama();
    test_detect();
    return test_report("test_chat");
}
