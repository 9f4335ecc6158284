/* server/ without a socket: the request parser (every field's type and range, each refusal naming
 * its param, strict UTF-8), the constant-time key comparison, JSON escaping, and the shapes of the
 * SSE chunks, usage and error objects (parsed back with cJSON). The HTTP behaviour end to end is
 * tests/test_server.py. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "server/server_internal.h"
#include "test.h"

static int parse(flint_api_kind kind, const char *body, flint_api_request *r, flint_api_error *e) {
    return flint_server_request_parse(kind, body, strlen(body), r, e);
}

/* A body that must be refused with status 400 naming `param`. */
static void refused(flint_api_kind kind, const char *body, const char *param) {
    flint_api_request r;
    flint_api_error e;
    int rc = parse(kind, body, &r, &e);
    CHECKF(rc == -1 && e.status == 400 && !strcmp(e.param, param ? param : ""),
           "%s -> rc %d status %d param '%s' (want '%s'): %s", body, rc, e.status, e.param, param ? param : "",
           e.message);
    flint_server_request_free(&r);
}

static void test_parse_ok(void) {
    flint_api_request r;
    flint_api_error e;
    CHECK(parse(FLINT_API_CHAT,
                "{\"model\":\"m\",\"messages\":[{\"role\":\"developer\",\"content\":\"be brief\"},"
                "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"hel\"},{\"type\":\"text\",\"text\":\"lo\"}]},"
                "{\"role\":\"assistant\",\"content\":null},{\"role\":\"user\",\"content\":\"again\"}],"
                "\"max_tokens\":5,\"max_completion_tokens\":7,\"temperature\":0.5,\"top_p\":0.9,\"top_k\":-1,"
                "\"min_p\":0.1,\"seed\":-3,\"stop\":[\"a\",\"bc\"],\"stream\":true,\"n\":1,\"logprobs\":false,"
                "\"stream_options\":{\"include_usage\":true,\"continuous_usage_stats\":true,\"token_by_token\":true},"
                "\"speculative\":{\"enabled\":true,\"max_draft_tokens\":3},\"user\":\"ignored\",\"ignore_eos\":true}",
                &r, &e) == 0);
    CHECKF(e.message[0] == 0, "%s", e.message);
    CHECK(r.model && !strcmp(r.model, "m"));
    CHECK(r.n_msgs == 4 && !strcmp(r.msgs[0].role, "system") && !strcmp(r.msgs[1].content, "hello"));
    CHECK(!strcmp(r.msgs[2].content, "") && !strcmp(r.msgs[3].content, "again"));
    CHECK(r.max_tokens == 7); /* max_completion_tokens wins */
    CHECK(r.params.sampling.temperature == 0.5f && r.params.sampling.top_p == 0.9f && r.params.sampling.top_k == 0);
    CHECK(r.params.sampling.min_p == 0.1f && r.has_seed && r.params.sampling.seed == (uint64_t)(int64_t)-3);
    CHECK(r.params.n_stop == 2 && !strcmp(r.params.stop[1], "bc"));
    CHECK(r.stream && r.include_usage && r.continuous_usage && r.token_by_token == 1);
    CHECK(r.params.speculative == 1 && r.params.max_draft == 3 && r.params.ignore_eos == 1);
    flint_server_request_free(&r);

    CHECK(parse(FLINT_API_COMPLETION, "{\"prompt\":\"hi\"}", &r, &e) == 0);
    CHECK(r.prompt && !strcmp(r.prompt, "hi") && r.max_tokens == 0 && !r.stream && !r.has_seed);
    CHECK(r.params.sampling.temperature == 1.0f && r.token_by_token == -1 && r.params.speculative == 1 &&
          r.dynamic_draft == -1);
    flint_server_request_free(&r);
    CHECK(parse(FLINT_API_COMPLETION, "{\"prompt\":[\"one\"],\"stop\":\"x\",\"speculative\":false}", &r, &e) == 0);
    CHECK(r.prompt && !strcmp(r.prompt, "one") && r.params.n_stop == 1 && r.params.speculative == 0);
    flint_server_request_free(&r);
    CHECK(parse(FLINT_API_COMPLETION, "{\"prompt\":[1,2,3],\"speculative\":{\"max_draft_tokens\":0}}", &r, &e) == 0);
    CHECK(r.n_prompt_ids == 3 && r.prompt_ids[2] == 3 && r.params.speculative == 0);
    flint_server_request_free(&r);
    /* speculative.dynamic: absent -1 (the server pins seeded sampled requests), else as given */
    CHECK(parse(FLINT_API_COMPLETION, "{\"prompt\":\"x\",\"speculative\":{\"dynamic\":false}}", &r, &e) == 0);
    CHECK(r.dynamic_draft == 0 && r.params.speculative == 1);
    flint_server_request_free(&r);
    CHECK(parse(FLINT_API_COMPLETION, "{\"prompt\":[[7,8]],\"model\":null,\"max_tokens\":null}  \n", &r, &e) == 0);
    CHECK(r.n_prompt_ids == 2 && r.prompt_ids[0] == 7 && !r.model && r.max_tokens == 0);
    flint_server_request_free(&r);
    CHECK(parse(FLINT_API_COMPLETION, "{\"prompt\":\"x\",\"logprobs\":3}", &r, &e) == 0);
    CHECK(r.params.logprobs == 1 && r.params.top_logprobs == 3);
    flint_server_request_free(&r);
    CHECK(parse(FLINT_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":true,"
                                "\"top_logprobs\":5}", &r, &e) == 0);
    CHECK(r.params.logprobs == 1 && r.params.top_logprobs == 5);
    flint_server_request_free(&r);
    CHECK(parse(FLINT_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"assistant\","
                                "\"content\":null,\"reasoning_content\":\"r\",\"tool_calls\":[{\"id\":\"c\",\"type\":"
                                "\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]},{\"role\":\"tool\","
                                "\"content\":\"42\",\"tool_call_id\":\"c\"}],\"tools\":[{\"type\":\"function\",\"function\":"
                                "{\"name\":\"f\"}}],\"tool_choice\":\"auto\",\"chat_template_kwargs\":{\"enable_thinking\":false}}",
                &r, &e) == 0);
    CHECKF(e.message[0] == 0, "%s", e.message);
    CHECK(r.tools && !r.tool_choice_none && r.enable_thinking == 0 && r.n_msgs == 3);
    CHECK(r.msgs[1].tool_calls && !strcmp(r.msgs[1].reasoning_content, "r") && !strcmp(r.msgs[2].role, "tool"));
    flint_server_request_free(&r);
    /* found by the fuzzer: a seed above INT64_MAX (but below 2^64) was cast through int64 */
    CHECK(parse(FLINT_API_COMPLETION, "{\"prompt\":\"x\",\"seed\":9999999999999999992}", &r, &e) == 0);
    CHECK(r.has_seed && r.params.sampling.seed == 10000000000000000000ull);
    flint_server_request_free(&r);
    /* U+1F600 and U+00E9 are fine */
    CHECK(parse(FLINT_API_COMPLETION, "{\"prompt\":\"\xF0\x9F\x98\x80 caf\xC3\xA9\"}", &r, &e) == 0);
    flint_server_request_free(&r);
}

static void test_parse_refused(void) {
    const flint_api_kind C = FLINT_API_CHAT, P = FLINT_API_COMPLETION;
    refused(P, "", NULL);
    refused(P, "{\"prompt\": \"x\"", NULL);          /* malformed JSON */
    refused(P, "{\"prompt\": \"x\"} trailing", NULL);
    refused(P, "[\"prompt\"]", NULL);                /* not an object */
    refused(P, "{}", "prompt");                      /* missing fields */
    refused(C, "{\"prompt\":\"x\"}", "messages");
    refused(C, "{\"messages\":[]}", "messages");
    refused(C, "{\"messages\":[{\"content\":\"x\"}]}", "messages[0].role");
    refused(C, "{\"messages\":[{\"role\":\"user\"}]}", "messages[0].content");
    refused(C, "{\"messages\":[{\"role\":\"wizard\",\"content\":\"x\"}]}", "messages[0].role");
    refused(C, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]}", "messages[0].content");
    refused(C, "{\"messages\":\"hi\"}", "messages"); /* wrong types */
    refused(C, "{\"messages\":[\"hi\"]}", "messages[0]");
    refused(P, "{\"prompt\":5}", "prompt");
    refused(P, "{\"prompt\":[\"a\",\"b\"]}", "prompt");
    refused(P, "{\"prompt\":[1,-2]}", "prompt");
    refused(P, "{\"prompt\":[]}", "prompt");
    refused(P, "{\"prompt\":\"x\",\"model\":3}", "model");
    refused(P, "{\"prompt\":\"x\",\"max_tokens\":\"9\"}", "max_tokens");
    refused(P, "{\"prompt\":\"x\",\"max_tokens\":1.5}", "max_tokens");
    refused(P, "{\"prompt\":\"x\",\"max_tokens\":0}", "max_tokens"); /* max_tokens <= 0 */
    refused(P, "{\"prompt\":\"x\",\"max_tokens\":-4}", "max_tokens");
    refused(C, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_completion_tokens\":0}",
            "max_completion_tokens");
    refused(P, "{\"prompt\":\"x\",\"n\":2}", "n"); /* n > 1 */
    refused(P, "{\"prompt\":\"x\",\"temperature\":\"hot\"}", "temperature");
    refused(P, "{\"prompt\":\"x\",\"temperature\":-1}", "temperature");
    refused(P, "{\"prompt\":\"x\",\"top_p\":0}", "top_p");
    refused(P, "{\"prompt\":\"x\",\"top_p\":1.5}", "top_p");
    refused(P, "{\"prompt\":\"x\",\"top_k\":2.5}", "top_k");
    refused(P, "{\"prompt\":\"x\",\"min_p\":2}", "min_p");
    refused(P, "{\"prompt\":\"x\",\"seed\":\"1\"}", "seed");
    refused(P, "{\"prompt\":\"x\",\"seed\":1e20}", "seed");
    refused(P, "{\"prompt\":\"x\",\"seed\":1.5}", "seed");
    refused(P, "{\"prompt\":\"x\",\"stream\":1}", "stream");
    refused(P, "{\"prompt\":\"x\",\"stream_options\":{\"include_usage\":true}}", "stream_options");
    refused(P, "{\"prompt\":\"x\",\"stream\":true,\"stream_options\":{\"include_usage\":1}}", "include_usage");
    refused(P, "{\"prompt\":\"x\",\"stop\":\"\"}", "stop");
    refused(P, "{\"prompt\":\"x\",\"stop\":[1]}", "stop");
    refused(P, "{\"prompt\":\"x\",\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\",\"f\",\"g\",\"h\",\"i\"]}", "stop");
    refused(P, "{\"prompt\":\"x\",\"speculative\":3}", "speculative");
    refused(P, "{\"prompt\":\"x\",\"speculative\":{\"enabled\":\"no\"}}", "speculative.enabled");
    refused(P, "{\"prompt\":\"x\",\"speculative\":{\"max_draft_tokens\":99}}", "speculative.max_draft_tokens");
    refused(P, "{\"prompt\":\"x\",\"speculative\":{\"dynamic\":1}}", "speculative.dynamic");
    refused(P, "{\"prompt\":\"x\",\"speculative\":{\"k\":1}}", "speculative");
    refused(P, "{\"prompt\":\"x\",\"logprobs\":30}", "logprobs");
    refused(P, "{\"prompt\":\"x\",\"logprobs\":\"3\"}", "logprobs");
    refused(C, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":1}", "logprobs");
    refused(C, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_logprobs\":2}", "top_logprobs");
    refused(C, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":true,\"top_logprobs\":21}",
            "top_logprobs");
    refused(P, "{\"prompt\":\"x\",\"presence_penalty\":0.5}", "presence_penalty");
    refused(P, "{\"prompt\":\"x\",\"echo\":true}", "echo");
    refused(P, "{\"prompt\":\"x\",\"best_of\":2}", "best_of");
    refused(C, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{}]}", "tools");
    refused(C, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":{}}", "tools");
    refused(C, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":\"required\"}", "tool_choice");
    refused(C, "{\"messages\":[{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[1]}]}",
            "messages[0].tool_calls");
    refused(C, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"chat_template_kwargs\":"
               "{\"enable_thinking\":1}}", "enable_thinking");
    refused(P, "{\"prompt\":\"x\",\"ignore_eos\":\"yes\"}", "ignore_eos");
    /* invalid UTF-8: a stray continuation byte, an overlong form, a surrogate, past U+10FFFF, cut short */
    refused(P, "{\"prompt\":\"\x80\"}", NULL);
    refused(P, "{\"prompt\":\"\xC0\xAF\"}", NULL);
    refused(P, "{\"prompt\":\"\xED\xA0\x80\"}", NULL);
    refused(P, "{\"prompt\":\"\xF4\x90\x80\x80\"}", NULL);
    refused(P, "{\"prompt\":\"\xE2\x82\"}", NULL);
    refused(P, "{\"prompt\":\"\\ud800\"}", NULL); /* a lone surrogate escape: cJSON refuses it */
}

static void test_utf8_and_secret(void) {
    CHECK(flint_server_utf8_valid("", 0) && flint_server_utf8_valid("abc", 3));
    CHECK(flint_server_utf8_valid("\xE2\x82\xAC", 3) && !flint_server_utf8_valid("\xE0\x80\x80", 3));
    CHECK(flint_server_utf8_valid("\xF4\x8F\xBF\xBF", 4) && !flint_server_utf8_valid("\xF8\x88\x80\x80\x80", 5));
    CHECK(flint_server_secret_equal("key-1", 5, "key-1"));
    CHECK(!flint_server_secret_equal("key-2", 5, "key-1"));
    CHECK(!flint_server_secret_equal("key", 3, "key-1"));
    CHECK(!flint_server_secret_equal("key-1x", 6, "key-1"));
    CHECK(!flint_server_secret_equal("", 0, "key-1"));
}

static void test_json(void) {
    flint_sbuf b = {0};
    const char s[] = "a\"b\\c\n\t\x01 \xC3\xA9";
    flint_sbuf_add_json_str(&b, s, sizeof s - 1);
    CHECKF(!strcmp(b.p, "\"a\\\"b\\\\c\\n\\t\\u0001 \xC3\xA9\""), "%s", b.p);
    cJSON *j = cJSON_Parse(b.p);
    CHECK(cJSON_IsString(j) && !strcmp(j->valuestring, s));
    cJSON_Delete(j);
    flint_sbuf_free(&b);

    flint_api_error e;
    flint_api_error_set(&e, 404, "invalid_request_error", "model_not_found", "model", "no \"%s\"", "x");
    flint_server_error_body(&b, &e);
    j = cJSON_Parse(b.p);
    const cJSON *err = cJSON_GetObjectItem(j, "error");
    CHECK(err && !strcmp(cJSON_GetObjectItem(err, "message")->valuestring, "no \"x\""));
    CHECK(!strcmp(cJSON_GetObjectItem(err, "type")->valuestring, "invalid_request_error"));
    CHECK(!strcmp(cJSON_GetObjectItem(err, "param")->valuestring, "model"));
    CHECK(!strcmp(cJSON_GetObjectItem(err, "code")->valuestring, "model_not_found"));
    cJSON_Delete(j);
    flint_sbuf_free(&b);
}

/* The JSON of one "data: {...}\n\n" event. */
static cJSON *event_json(const flint_sbuf *b, size_t *off) {
    const char *p = b->p + *off;
    if (strncmp(p, "data: ", 6)) return NULL;
    const char *end = strstr(p, "\n\n");
    if (!end) return NULL;
    *off = (size_t)(end + 2 - b->p);
    return cJSON_ParseWithLength(p + 6, (size_t)(end - p - 6));
}

static void test_chunks(void) {
    flint_server_job j;
    memset(&j, 0, sizeof j);
    snprintf(j.id, sizeof j.id, "chatcmpl-1");
    j.kind = FLINT_API_CHAT;
    j.created = 123;
    j.prompt_tokens = 4;
    j.completion_tokens = 3;
    j.finish = FLINT_FINISH_LENGTH;
    j.stats.steps = 2;
    j.stats.draft_tokens = 6;
    j.stats.accepted = 1;
    j.stats.hist[0] = 1;
    j.stats.hist[1] = 1;
    j.stats.accepted_per_pos[0] = 1;
    flint_sbuf b = {0};
    flint_server_sse_chunk(&b, &j, "m", "Hi", 2, 1, NULL, NULL, 0, 1);
    flint_server_sse_chunk(&b, &j, "m", " there", 6, 0, NULL, "{\"content\":[]}", 1, 3);
    flint_server_sse_chunk(&b, &j, "m", "", 0, 0, "length", NULL, 0, 3);
    flint_server_sse_usage(&b, &j, "m", 3);
    size_t off = 0;
    cJSON *c1 = event_json(&b, &off), *c2 = event_json(&b, &off), *c3 = event_json(&b, &off), *c4 = event_json(&b, &off);
    CHECK(c1 && c2 && c3 && c4 && off == b.n);
    if (c1 && c2 && c3 && c4) {
        CHECK(!strcmp(cJSON_GetObjectItem(c1, "object")->valuestring, "chat.completion.chunk"));
        CHECK(!strcmp(cJSON_GetObjectItem(c1, "id")->valuestring, "chatcmpl-1"));
        const cJSON *d1 = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(c1, "choices"), 0), "delta");
        CHECK(!strcmp(cJSON_GetObjectItem(d1, "role")->valuestring, "assistant"));
        CHECK(!strcmp(cJSON_GetObjectItem(d1, "content")->valuestring, "Hi"));
        CHECK(cJSON_IsNull(cJSON_GetObjectItem(c1, "usage")));
        CHECK(cJSON_GetObjectItem(cJSON_GetObjectItem(c2, "usage"), "completion_tokens")->valueint == 3);
        CHECK(cJSON_IsObject(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(c2, "choices"), 0), "logprobs")));
        const cJSON *ch3 = cJSON_GetArrayItem(cJSON_GetObjectItem(c3, "choices"), 0);
        CHECK(!strcmp(cJSON_GetObjectItem(ch3, "finish_reason")->valuestring, "length"));
        CHECK(cJSON_GetObjectItem(ch3, "delta")->child == NULL); /* an empty delta {} */
        CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(c4, "choices")) == 0);
        const cJSON *u = cJSON_GetObjectItem(c4, "usage");
        CHECK(cJSON_GetObjectItem(u, "total_tokens")->valueint == 7);
        CHECK(cJSON_GetObjectItem(cJSON_GetObjectItem(u, "prompt_tokens_details"), "cached_tokens")->valueint == 0);
        const cJSON *sp = cJSON_GetObjectItem(u, "speculative");
        CHECK(sp && cJSON_GetObjectItem(sp, "num_spec_steps")->valueint == 2);
        CHECK(cJSON_GetObjectItem(sp, "mean_acceptance_length")->valuedouble == 1.5);
        CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(sp, "acceptance_histogram")) == 4);
        CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(sp, "accepted_per_position")) == 3);
    }
    cJSON_Delete(c1);
    cJSON_Delete(c2);
    cJSON_Delete(c3);
    cJSON_Delete(c4);
    flint_sbuf_free(&b);

    j.kind = FLINT_API_COMPLETION;
    flint_server_response_body(&b, &j, "m", "ab\"c", 4, NULL, 3);
    cJSON *r = cJSON_Parse(b.p);
    CHECK(r && !strcmp(cJSON_GetObjectItem(r, "object")->valuestring, "text_completion"));
    const cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItem(r, "choices"), 0);
    CHECK(ch && !strcmp(cJSON_GetObjectItem(ch, "text")->valuestring, "ab\"c"));
    CHECK(!strcmp(cJSON_GetObjectItem(ch, "finish_reason")->valuestring, "length"));
    CHECK(cJSON_GetObjectItem(cJSON_GetObjectItem(r, "usage"), "speculative") != NULL);
    cJSON_Delete(r);
    flint_sbuf_free(&b);

    flint_api_error e;
    flint_api_error_set(&e, 503, "service_unavailable", "shutting_down", NULL, "bye");
    flint_server_sse_error(&b, &e);
    off = 0;
    cJSON *ev = event_json(&b, &off);
    CHECK(ev && cJSON_GetObjectItem(ev, "error") && !strcmp(b.p + off, "data: [DONE]\n\n"));
    cJSON_Delete(ev);
    flint_sbuf_free(&b);
}

/* The chat output parsers as the server drives them: text in arbitrary pieces -> reasoning,
 * content and tool calls, then the streamed delta and the final message built from them. */
static void test_output_parsers(void) {
    flint_server_job j;
    memset(&j, 0, sizeof j);
    snprintf(j.id, sizeof j.id, "chatcmpl-2");
    j.kind = FLINT_API_CHAT;
    j.finish = FLINT_FINISH_STOP;
    j.rp = flint_reasoning_new();
    j.tp = flint_tool_parser_new("call_x");
    j.calls = cJSON_CreateArray();
    const char *out = "<think>\nweigh it</think>\n\nSure. <tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                      "{\"city\": \"Paris\"}}\n</tool_call>";
    flint_sbuf r = {0}, c = {0};
    for (size_t i = 0, n = strlen(out); i < n; i += 3) /* three bytes at a time, tags split anywhere */
        flint_server_parse_output(&j, out + i, n - i < 3 ? n - i : 3, 0, &r, &c);
    flint_server_parse_output(&j, NULL, 0, 1, &r, &c);
    CHECKF(r.p && !strcmp(r.p, "\nweigh it"), "reasoning '%s'", r.p ? r.p : "");
    CHECKF(c.p && !strcmp(c.p, "Sure. "), "content '%s'", c.p ? c.p : "");
    CHECK(cJSON_GetArraySize(j.calls) == 1);
    flint_sbuf b = {0};
    flint_server_sse_chat_parts(&b, &j, "m", 1, r.p, r.n, c.p, c.n, j.calls, 0, NULL, NULL, -1, 0);
    size_t off = 0;
    cJSON *ev = event_json(&b, &off);
    const cJSON *d = ev ? cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(ev, "choices"), 0), "delta") : NULL;
    CHECK(d && !strcmp(cJSON_GetObjectItem(d, "reasoning_content")->valuestring, "\nweigh it"));
    const cJSON *tc = d ? cJSON_GetArrayItem(cJSON_GetObjectItem(d, "tool_calls"), 0) : NULL;
    CHECK(tc && cJSON_GetObjectItem(tc, "index")->valueint == 0 && !strcmp(cJSON_GetObjectItem(tc, "id")->valuestring, "call_x_0"));
    const cJSON *fn = tc ? cJSON_GetObjectItem(tc, "function") : NULL;
    CHECK(fn && !strcmp(cJSON_GetObjectItem(fn, "name")->valuestring, "get_weather"));
    cJSON *args = fn ? cJSON_Parse(cJSON_GetObjectItem(fn, "arguments")->valuestring) : NULL;
    CHECK(args && !strcmp(cJSON_GetObjectItem(args, "city")->valuestring, "Paris"));
    cJSON_Delete(args);
    cJSON_Delete(ev);
    flint_sbuf_free(&b);
    flint_server_chat_body_parts(&b, &j, "m", r.p, r.n, "", 0, j.calls, "tool_calls", NULL, 0);
    cJSON *body = cJSON_Parse(b.p);
    const cJSON *ch = body ? cJSON_GetArrayItem(cJSON_GetObjectItem(body, "choices"), 0) : NULL;
    const cJSON *msg = ch ? cJSON_GetObjectItem(ch, "message") : NULL;
    CHECK(msg && cJSON_IsNull(cJSON_GetObjectItem(msg, "content"))); /* only tool calls: content null */
    CHECK(msg && cJSON_GetArraySize(cJSON_GetObjectItem(msg, "tool_calls")) == 1);
    CHECK(msg && !cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(msg, "tool_calls"), 0), "index"));
    CHECK(ch && !strcmp(cJSON_GetObjectItem(ch, "finish_reason")->valuestring, "tool_calls"));
    cJSON_Delete(body);
    flint_sbuf_free(&b);
    flint_sbuf_free(&r);
    flint_sbuf_free(&c);
    flint_reasoning_free(j.rp);
    flint_tool_parser_free(j.tp);
    cJSON_Delete(j.calls);
}

static void test_hist(void) {
    static const double bounds[] = {0.1, 1.0};
    flint_hist h;
    flint_hist_init(&h, bounds, 2);
    flint_hist_observe(&h, 0.05);
    flint_hist_observe(&h, 0.1); /* le is inclusive */
    flint_hist_observe(&h, 0.5);
    flint_hist_observe(&h, 7);
    CHECK(h.counts[0] == 2 && h.counts[1] == 1 && h.counts[2] == 1 && h.count == 4);
}

int main(void) {
    test_parse_ok();
    test_parse_refused();
    test_utf8_and_secret();
    test_json();
    test_chunks();
    test_output_parsers();
    test_hist();
    return test_report("test_server_unit");
}
