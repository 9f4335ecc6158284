/* Response bodies in the OpenAI shapes: completion objects, SSE chunks, the usage object with
 * usage.speculative, and error objects. Chunks are written by hand rather than built as cJSON
 * trees: their shape is fixed, a busy server writes thousands per second, and the only variable
 * parts are the text (escaped here) and numbers. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/server_internal.h"

/* ==== objects ==== */

const char *flint_server_finish_name(flint_finish_reason r) {
    return r == FLINT_FINISH_LENGTH ? "length" : "stop";
}

static void error_object(flint_sbuf *b, const flint_api_error *e) {
    flint_sbuf_adds(b, "{\"error\":{\"message\":");
    flint_sbuf_add_json_str(b, e->message, strlen(e->message));
    flint_sbuf_adds(b, ",\"type\":");
    flint_sbuf_add_json_str(b, e->type ? e->type : "invalid_request_error",
                            strlen(e->type ? e->type : "invalid_request_error"));
    flint_sbuf_adds(b, ",\"param\":");
    if (e->param[0]) flint_sbuf_add_json_str(b, e->param, strlen(e->param));
    else flint_sbuf_adds(b, "null");
    flint_sbuf_adds(b, ",\"code\":");
    if (e->code) flint_sbuf_add_json_str(b, e->code, strlen(e->code));
    else flint_sbuf_adds(b, "null");
    flint_sbuf_adds(b, "}}");
}

void flint_server_error_body(flint_sbuf *b, const flint_api_error *e) {
    error_object(b, e);
    flint_sbuf_adds(b, "\n");
}

void flint_server_sse_error(flint_sbuf *b, const flint_api_error *e) {
    flint_sbuf_adds(b, "data: ");
    error_object(b, e);
    flint_sbuf_adds(b, "\n\ndata: [DONE]\n\n");
}

void flint_server_usage_json(flint_sbuf *b, int prompt_tokens, int completion_tokens, int cached_tokens,
                             const flint_spec_stats *spec, int K) {
    flint_sbuf_addf(b, "{\"prompt_tokens\":%d,\"completion_tokens\":%d,\"total_tokens\":%d", prompt_tokens,
                    completion_tokens, prompt_tokens + completion_tokens);
    if (cached_tokens >= 0) flint_sbuf_addf(b, ",\"prompt_tokens_details\":{\"cached_tokens\":%d}", cached_tokens);
    if (spec) {
        cJSON *j = flint_spec_stats_json(spec, K);
        char *s = cJSON_PrintUnformatted(j);
        flint_sbuf_adds(b, ",\"speculative\":");
        flint_sbuf_adds(b, s ? s : "null");
        free(s);
        cJSON_Delete(j);
    }
    flint_sbuf_adds(b, "}");
}

static void head(flint_sbuf *b, const flint_server_job *j, const char *model, int chunk) {
    const char *object = j->kind == FLINT_API_CHAT ? (chunk ? "chat.completion.chunk" : "chat.completion")
                                                   : "text_completion";
    flint_sbuf_addf(b, "{\"id\":\"%s\",\"object\":\"%s\",\"created\":%lld,\"model\":", j->id, object,
                    (long long)j->created);
    flint_sbuf_add_json_str(b, model, strlen(model));
}

/* The end of a streamed chunk after its delta: logprobs, finish_reason, optional usage. */
static void chunk_tail(flint_sbuf *b, const flint_server_job *j, const char *finish, const char *logprobs, int usage,
                       int completion_tokens) {
    flint_sbuf_adds(b, "\"logprobs\":");
    flint_sbuf_adds(b, logprobs ? logprobs : "null");
    flint_sbuf_adds(b, ",\"finish_reason\":");
    if (finish) flint_sbuf_addf(b, "\"%s\"", finish);
    else flint_sbuf_adds(b, "null");
    flint_sbuf_adds(b, "}]");
    if (usage == 0) flint_sbuf_adds(b, ",\"usage\":null");
    else if (usage > 0) {
        flint_sbuf_adds(b, ",\"usage\":");
        flint_server_usage_json(b, j->prompt_tokens, completion_tokens, -1, NULL, 0);
    }
    flint_sbuf_adds(b, "}\n\n");
}

void flint_server_sse_chunk(flint_sbuf *b, const flint_server_job *j, const char *model, const char *text,
                            size_t n, int role, const char *finish, const char *logprobs, int usage,
                            int completion_tokens) {
    flint_sbuf_adds(b, "data: ");
    head(b, j, model, 1);
    flint_sbuf_adds(b, ",\"choices\":[{\"index\":0,");
    if (j->kind == FLINT_API_CHAT) {
        flint_sbuf_adds(b, "\"delta\":{");
        if (role) flint_sbuf_adds(b, "\"role\":\"assistant\"");
        if (n || role || !finish) { /* the finishing chunk may carry an empty delta {} */
            flint_sbuf_adds(b, role ? ",\"content\":" : "\"content\":");
            flint_sbuf_add_json_str(b, text, n);
        }
        flint_sbuf_adds(b, "},");
    } else {
        flint_sbuf_adds(b, "\"text\":");
        flint_sbuf_add_json_str(b, text, n);
        flint_sbuf_adds(b, ",");
    }
    chunk_tail(b, j, finish, logprobs, usage, completion_tokens);
}

void flint_server_sse_usage(flint_sbuf *b, const flint_server_job *j, const char *model, int K) {
    flint_sbuf_adds(b, "data: ");
    head(b, j, model, 1);
    flint_sbuf_adds(b, ",\"choices\":[],\"usage\":");
    flint_server_usage_json(b, j->prompt_tokens, j->completion_tokens, j->cached_tokens, &j->stats, K);
    flint_sbuf_adds(b, "}\n\n");
}

void flint_server_response_body(flint_sbuf *b, const flint_server_job *j, const char *model, const char *text,
                                size_t n, const char *logprobs, int K) {
    head(b, j, model, 0);
    flint_sbuf_adds(b, ",\"choices\":[{\"index\":0,");
    if (j->kind == FLINT_API_CHAT) {
        flint_sbuf_adds(b, "\"message\":{\"role\":\"assistant\",\"content\":");
        flint_sbuf_add_json_str(b, text, n);
        flint_sbuf_adds(b, "},");
    } else {
        flint_sbuf_adds(b, "\"text\":");
        flint_sbuf_add_json_str(b, text, n);
        flint_sbuf_adds(b, ",");
    }
    flint_sbuf_adds(b, "\"logprobs\":");
    flint_sbuf_adds(b, logprobs ? logprobs : "null");
    flint_sbuf_addf(b, ",\"finish_reason\":\"%s\"}],\"usage\":", flint_server_finish_name(j->finish));
    flint_server_usage_json(b, j->prompt_tokens, j->completion_tokens, j->cached_tokens, &j->stats, K);
    flint_sbuf_adds(b, "}\n");
}

/* ==== chat output split by the parsers (reasoning, content, tool calls) ==== */

static void tool_calls_json(flint_sbuf *b, const cJSON *calls, int first, int with_index) {
    flint_sbuf_adds(b, "[");
    int n = cJSON_GetArraySize(calls);
    for (int i = first; i < n; i++) {
        const cJSON *c = cJSON_GetArrayItem(calls, i);
        char *s = cJSON_PrintUnformatted(c);
        if (i > first) flint_sbuf_adds(b, ",");
        if (with_index && s && s[0] == '{') flint_sbuf_addf(b, "{\"index\":%d,%s", i, s + 1);
        else flint_sbuf_adds(b, s ? s : "null");
        free(s);
    }
    flint_sbuf_adds(b, "]");
}

void flint_server_sse_chat_parts(flint_sbuf *b, const flint_server_job *j, const char *model, int role,
                                 const char *reasoning, size_t rn, const char *content, size_t cn, const cJSON *calls,
                                 int first_call, const char *finish, const char *logprobs, int usage,
                                 int completion_tokens) {
    flint_sbuf_adds(b, "data: ");
    head(b, j, model, 1);
    flint_sbuf_adds(b, ",\"choices\":[{\"index\":0,\"delta\":{");
    int any = 0;
    if (role) {
        flint_sbuf_adds(b, "\"role\":\"assistant\"");
        any = 1;
    }
    if (rn) {
        flint_sbuf_adds(b, any ? ",\"reasoning_content\":" : "\"reasoning_content\":");
        flint_sbuf_add_json_str(b, reasoning, rn);
        any = 1;
    }
    if (cn || (role && !rn)) {
        flint_sbuf_adds(b, any ? ",\"content\":" : "\"content\":");
        flint_sbuf_add_json_str(b, content ? content : "", cn);
        any = 1;
    }
    if (calls && cJSON_GetArraySize(calls) > first_call) {
        flint_sbuf_adds(b, any ? ",\"tool_calls\":" : "\"tool_calls\":");
        tool_calls_json(b, calls, first_call, 1);
    }
    flint_sbuf_adds(b, "},");
    chunk_tail(b, j, finish, logprobs, usage, completion_tokens);
}

void flint_server_chat_body_parts(flint_sbuf *b, const flint_server_job *j, const char *model, const char *reasoning,
                                  size_t rn, const char *content, size_t cn, const cJSON *calls, const char *finish,
                                  const char *logprobs, int K) {
    head(b, j, model, 0);
    flint_sbuf_adds(b, ",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":");
    int n_calls = calls ? cJSON_GetArraySize(calls) : 0;
    if (content && (cn || !n_calls)) flint_sbuf_add_json_str(b, content, cn);
    else flint_sbuf_adds(b, "null"); /* an answer that is only tool calls has content null, as OpenAI's */
    if (rn) {
        flint_sbuf_adds(b, ",\"reasoning_content\":");
        flint_sbuf_add_json_str(b, reasoning, rn);
    }
    if (n_calls) {
        flint_sbuf_adds(b, ",\"tool_calls\":");
        tool_calls_json(b, calls, 0, 0);
    }
    flint_sbuf_adds(b, "},\"logprobs\":");
    flint_sbuf_adds(b, logprobs ? logprobs : "null");
    flint_sbuf_addf(b, ",\"finish_reason\":\"%s\"}],\"usage\":", finish);
    flint_server_usage_json(b, j->prompt_tokens, j->completion_tokens, j->cached_tokens, &j->stats, K);
    flint_sbuf_adds(b, "}\n");
}
