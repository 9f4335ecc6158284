/* Reasoning and tool-call output parsers: fixed cases, malformed tool calls degrading to content,
 * and streaming equivalence: any chunking of the text gives the same reasoning, content and calls
 * as feeding it whole. */
#include <stdlib.h>
#include <string.h>

#include "server/parsers.h"
#include "test.h"

typedef struct {
    flint_sbuf r, c;
    cJSON *calls;
} result;

static void run_reasoning(const char *s, const int *cuts, int n_cuts, result *out) {
    memset(out, 0, sizeof *out);
    flint_reasoning_parser *p = flint_reasoning_new();
    size_t at = 0, len = strlen(s);
    for (int i = 0; i <= n_cuts; i++) {
        size_t to = i < n_cuts ? (size_t)cuts[i] : len;
        if (to > len) to = len;
        if (to < at) to = at;
        flint_reasoning_feed(p, s + at, to - at, &out->r, &out->c);
        at = to;
    }
    flint_reasoning_finish(p, &out->r, &out->c);
    flint_reasoning_free(p);
}

static void run_tools(const char *s, const int *cuts, int n_cuts, result *out) {
    memset(out, 0, sizeof *out);
    out->calls = cJSON_CreateArray();
    flint_tool_parser *p = flint_tool_parser_new("call");
    size_t at = 0, len = strlen(s);
    for (int i = 0; i <= n_cuts; i++) {
        size_t to = i < n_cuts ? (size_t)cuts[i] : len;
        if (to > len) to = len;
        if (to < at) to = at;
        flint_tool_feed(p, s + at, to - at, &out->c, out->calls);
        at = to;
    }
    flint_tool_finish(p, &out->c, out->calls);
    flint_tool_parser_free(p);
}

static const char *str(const flint_sbuf *t) { return t->p ? t->p : ""; }

static void free_result(result *r) {
    flint_sbuf_free(&r->r);
    flint_sbuf_free(&r->c);
    cJSON_Delete(r->calls);
}

static void test_reasoning(void) {
    result r;
    run_reasoning("<think>\nstep one\n</think>\n\nThe answer is 4.", NULL, 0, &r);
    CHECK(!strcmp(str(&r.r), "\nstep one\n") && !strcmp(str(&r.c), "The answer is 4."));
    free_result(&r);
    run_reasoning("Plain answer <think>not reasoning</think>", NULL, 0, &r);
    CHECK(!strcmp(str(&r.r), "") && !strcmp(str(&r.c), "Plain answer <think>not reasoning</think>"));
    free_result(&r);
    run_reasoning("<think>unfinished thought", NULL, 0, &r);
    CHECK(!strcmp(str(&r.r), "unfinished thought") && !strcmp(str(&r.c), ""));
    free_result(&r);
    run_reasoning("<thi", NULL, 0, &r); /* a prefix of the tag at the very end is content */
    CHECK(!strcmp(str(&r.c), "<thi") && !strcmp(str(&r.r), ""));
    free_result(&r);
    run_reasoning("", NULL, 0, &r);
    CHECK(!strcmp(str(&r.c), "") && !strcmp(str(&r.r), ""));
    free_result(&r);
}

static void test_tools(void) {
    result r;
    run_tools("Let me check.<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Zürich\", \"days\": 2}}\n"
              "</tool_call>",
              NULL, 0, &r);
    CHECK(!strcmp(str(&r.c), "Let me check.") && cJSON_GetArraySize(r.calls) == 1);
    cJSON *c0 = cJSON_GetArrayItem(r.calls, 0), *fn = cJSON_GetObjectItem(c0, "function");
    CHECK(!strcmp(cJSON_GetObjectItem(fn, "name")->valuestring, "get_weather"));
    CHECK(!strcmp(cJSON_GetObjectItem(fn, "arguments")->valuestring, "{\"city\": \"Zürich\", \"days\": 2}"));
    CHECK(!strcmp(cJSON_GetObjectItem(c0, "type")->valuestring, "function"));
    CHECK(!strcmp(cJSON_GetObjectItem(c0, "id")->valuestring, "call_0"));
    free_result(&r);
    run_tools("<tool_call>{\"name\": \"a\", \"arguments\": \"{\\\"x\\\": 1}\"}</tool_call>"
              "<tool_call>{\"name\": \"b\"}</tool_call> done",
              NULL, 0, &r);
    CHECK(cJSON_GetArraySize(r.calls) == 2 && !strcmp(str(&r.c), " done"));
    fn = cJSON_GetObjectItem(cJSON_GetArrayItem(r.calls, 0), "function");
    CHECK(!strcmp(cJSON_GetObjectItem(fn, "arguments")->valuestring, "{\"x\": 1}"));
    fn = cJSON_GetObjectItem(cJSON_GetArrayItem(r.calls, 1), "function");
    CHECK(!strcmp(cJSON_GetObjectItem(fn, "arguments")->valuestring, "{}"));
    free_result(&r);
    /* malformed: bad JSON, no name, never closed -> content, no calls */
    const char *bad[] = {"x <tool_call>{not json}</tool_call> y", "<tool_call>{\"arguments\": {}}</tool_call>",
                         "<tool_call>{\"name\": \"f\", \"arguments\": {", "<tool_call>[1,2]</tool_call>"};
    for (int i = 0; i < 4; i++) {
        run_tools(bad[i], NULL, 0, &r);
        CHECKF(cJSON_GetArraySize(r.calls) == 0 && !strcmp(str(&r.c), bad[i]), "malformed case %d: content '%s'", i,
               str(&r.c));
        free_result(&r);
    }
    run_tools("a < b and <tool_ is not a tag", NULL, 0, &r);
    CHECK(!strcmp(str(&r.c), "a < b and <tool_ is not a tag") && cJSON_GetArraySize(r.calls) == 0);
    free_result(&r);
}

static void test_streaming_equivalence(void) {
    const char *texts[] = {
        "<think>\nI think, therefore </thin k> I am\n</think>\n\nDone <tool_call>\n{\"name\": \"f\", \"arguments\": "
        "{\"s\": \"</tool\"}}\n</tool_call> after",
        "plain text with < and <t and <tool_call>{broken</tool_call> tail",
        "<think></think>x<tool_call>{\"name\": \"g\", \"arguments\": {\"emoji\": \"🎉\"}}</tool_call>"
        "<tool_call>{\"name\": \"h\", \"arguments\": {}}</tool_call>",
        "<think>never closed <tool_call>{\"name\": \"z\"}</tool_call>"};
    unsigned x = 7;
    for (int t = 0; t < 4; t++) {
        result whole_r, whole_t;
        run_reasoning(texts[t], NULL, 0, &whole_r);
        run_tools(str(&whole_r.c), NULL, 0, &whole_t);
        for (int trial = 0; trial < 300; trial++) {
            int cuts[12], n = 1 + trial % 12;
            size_t len = strlen(texts[t]);
            for (int i = 0; i < n; i++) x = x * 1103515245u + 12345u, cuts[i] = (int)((x >> 8) % (len + 1));
            for (int i = 1; i < n; i++) /* sorted cut points */
                for (int j = i; j > 0 && cuts[j] < cuts[j - 1]; j--) {
                    int tmp = cuts[j];
                    cuts[j] = cuts[j - 1];
                    cuts[j - 1] = tmp;
                }
            /* reasoning and tools chained per chunk, as the server does */
            flint_reasoning_parser *rp = flint_reasoning_new();
            flint_tool_parser *tp = flint_tool_parser_new("call");
            flint_sbuf r = {0}, c = {0}, content = {0};
            cJSON *calls = cJSON_CreateArray();
            size_t at = 0;
            for (int i = 0; i <= n; i++) {
                size_t to = i < n ? (size_t)cuts[i] : len;
                flint_sbuf_clear(&c);
                flint_reasoning_feed(rp, texts[t] + at, to - at, &r, &c);
                flint_tool_feed(tp, c.p ? c.p : "", c.n, &content, calls);
                at = to;
            }
            flint_sbuf_clear(&c);
            flint_reasoning_finish(rp, &r, &c);
            flint_tool_feed(tp, c.p ? c.p : "", c.n, &content, calls);
            flint_tool_finish(tp, &content, calls);
            char *a = cJSON_PrintUnformatted(calls), *b = cJSON_PrintUnformatted(whole_t.calls);
            CHECKF(!strcmp(str(&r), str(&whole_r.r)) && !strcmp(str(&content), str(&whole_t.c)) && !strcmp(a, b),
                   "text %d trial %d: streaming differs", t, trial);
            free(a);
            free(b);
            cJSON_Delete(calls);
            flint_sbuf_free(&r);
            flint_sbuf_free(&c);
            flint_sbuf_free(&content);
            flint_reasoning_free(rp);
            flint_tool_parser_free(tp);
        }
        free_result(&whole_r);
        free_result(&whole_t);
    }
}

int main(void) {
    test_reasoning();
    test_tools();
    test_streaming_equivalence();
    return test_report("test_parsers");
}
