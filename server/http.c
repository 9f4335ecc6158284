/* The HTTP side, all on the libevent loop thread: routing, authentication, turning a parsed
 * request into a job for the engine thread, and delivering what the engine produced (SSE chunks,
 * or one JSON object at the end).
 *
 * A stream's lifecycle, and the libevent rules it follows (style.md section 4):
 *   accepted -> reply_start (headers) -> chunks as engine output arrives -> final chunk, usage
 *   chunk, [DONE] -> reply_end exactly once, also when the client has gone.
 * When the peer disconnects while we still own the request, libevent detaches it from the
 * connection (evcon becomes NULL, the request is not freed), calls our closecb, and turns later
 * chunk calls into no-ops; reply_end (or send_reply) then frees it. So every job ends in exactly
 * one of those calls, made only after the engine thread has marked the job done, and the
 * closecb only marks the job and asks the engine to cancel it (slot and KV free at the next
 * step). A client that reads too slowly is cancelled once its unsent bytes pass
 * stream_buffer_bytes; the engine never waits for it. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "core/log.h"
#include "server/server_internal.h"

/* ==== replies ==== */

static const char *reason_phrase(int status) {
    switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 413: return "Payload Too Large";
    case 429: return "Too Many Requests";
    case 499: return "Client Closed Request";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    default: return "Error";
    }
}

static void reply(struct evhttp_request *req, int status, const char *content_type, const char *body, size_t n) {
    struct evkeyvalq *h = evhttp_request_get_output_headers(req);
    evhttp_add_header(h, "Content-Type", content_type);
    struct evbuffer *b = evbuffer_new();
    if (b) evbuffer_add(b, body, n);
    evhttp_send_reply(req, status, reason_phrase(status), b);
    if (b) evbuffer_free(b);
}

static const char *req_path(struct evhttp_request *req) {
    const struct evhttp_uri *u = evhttp_request_get_evhttp_uri(req);
    const char *p = u ? evhttp_uri_get_path(u) : NULL;
    return p && p[0] ? p : "/";
}

static void peer(struct evhttp_request *req, char *out, size_t cap) {
    struct evhttp_connection *c = evhttp_request_get_connection(req);
    char *addr = NULL;
    ev_uint16_t port = 0;
    if (c) evhttp_connection_get_peer(c, &addr, &port);
    snprintf(out, cap, "%s:%u", addr ? addr : "?", (unsigned)port);
}

/* An error before the request became a job: the reply, the metric and the request's log line. */
static void reply_error(flint_server *s, struct evhttp_request *req, const flint_api_error *e) {
    flint_sbuf b = {0};
    flint_server_error_body(&b, e);
    struct evkeyvalq *h = evhttp_request_get_output_headers(req);
    if (e->status == 429 || e->status == 503) evhttp_add_header(h, "Retry-After", "1");
    if (e->status == 401) evhttp_add_header(h, "WWW-Authenticate", "Bearer");
    if (s->draining) evhttp_add_header(h, "Connection", "close");
    char who[80];
    peer(req, who, sizeof who);
    flint_log_info("%s %s %s %d %s", who, evhttp_request_get_command(req) == EVHTTP_REQ_GET ? "GET" : "POST",
                   req_path(req), e->status, e->message);
    reply(req, e->status, "application/json", b.p, b.n);
    flint_sbuf_free(&b);
    flint_server_metrics_rejected(s, e->status);
}

/* ==== ids and seeds ==== */

static uint64_t mix64(uint64_t x) { /* splitmix64 finaliser */
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static uint64_t next_random(flint_server *s) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return mix64(((uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec) ^ mix64(++s->next_id));
}

/* ==== building a job ==== */

static int build_prompt(flint_server *s, const flint_api_request *r, int32_t **ids, int *n, flint_api_error *e) {
    flint_err err = {0};
    if (r->prompt_ids) {
        for (int i = 0; i < r->n_prompt_ids; i++)
            if (r->prompt_ids[i] >= s->vocab)
                return flint_api_error_set(e, 400, "invalid_request_error", NULL, "prompt",
                                           "token id %d is outside the vocabulary (%d)", r->prompt_ids[i], s->vocab);
        *ids = flint_xmalloc(sizeof(int32_t) * (size_t)r->n_prompt_ids);
        memcpy(*ids, r->prompt_ids, sizeof(int32_t) * (size_t)r->n_prompt_ids);
        *n = r->n_prompt_ids;
        return 0;
    }
    if (!s->tok)
        return flint_api_error_set(e, 400, "invalid_request_error", NULL, r->kind == FLINT_API_CHAT ? "messages" : "prompt",
                                   "this model has no tokenizer.json: only token-id prompts are accepted");
    if (r->kind == FLINT_API_COMPLETION) {
        if (flint_tokenizer_encode(s->tok, r->prompt, strlen(r->prompt), 1, ids, n, &err))
            return flint_api_error_set(e, 400, "invalid_request_error", NULL, "prompt", "%s", err.msg);
        return 0;
    }
    if (s->chat == FLINT_CHAT_NONE)
        return flint_api_error_set(e, 400, "invalid_request_error", NULL, "messages",
                                   "this model has no chat template flint knows; use /v1/completions or start the "
                                   "server with --chat-template");
    int32_t bos = flint_tokenizer_bos_id(s->tok), eos = flint_tokenizer_eos_id(s->tok);
    flint_chat_options co;
    flint_chat_options_default(&co);
    if (r->enable_thinking >= 0) co.enable_thinking = r->enable_thinking;
    if (r->tools && !r->tool_choice_none) co.tools = r->tools;
    char *text = flint_chat_render(s->chat, r->msgs, r->n_msgs, &co,
                                   bos >= 0 ? flint_tokenizer_token_str(s->tok, bos) : NULL,
                                   eos >= 0 ? flint_tokenizer_token_str(s->tok, eos) : NULL, &err);
    if (!text) return flint_api_error_set(e, 400, "invalid_request_error", NULL, "messages", "%s", err.msg);
    /* the rendered text already holds the template's special tokens (BOS included) */
    int rc = flint_tokenizer_encode(s->tok, text, strlen(text), 0, ids, n, &err);
    free(text);
    if (rc) return flint_api_error_set(e, 400, "invalid_request_error", NULL, "messages", "%s", err.msg);
    return 0;
}

static int check_limits(flint_server *s, const flint_api_request *r, int n_prompt, int *max_tokens,
                        flint_api_error *e) {
    const char *param = r->kind == FLINT_API_CHAT ? "messages" : "prompt";
    if (n_prompt < 1)
        return flint_api_error_set(e, 400, "invalid_request_error", NULL, param, "the prompt is empty");
    int L = s->max_model_len;
    if (n_prompt >= L)
        return flint_api_error_set(e, 400, "invalid_request_error", "context_length_exceeded", param,
                                   "This model's maximum context length is %d tokens. However, your prompt has %d "
                                   "tokens, which leaves no room for the completion.", L, n_prompt);
    *max_tokens = r->max_tokens ? r->max_tokens : L - n_prompt; /* absent: the rest of the context, as vLLM */
    if ((long)n_prompt + *max_tokens > L)
        return flint_api_error_set(e, 400, "invalid_request_error", "context_length_exceeded",
                                   "max_tokens", "This model's maximum context length is %d tokens. However, you "
                                   "requested %ld tokens (%d in the prompt, %d for the completion). Please reduce "
                                   "the prompt or max_tokens.", L, (long)n_prompt + *max_tokens, n_prompt, *max_tokens);
    return 0;
}

static void list_insert(flint_server *s, flint_server_job *j) {
    j->prev = NULL;
    j->next = s->jobs;
    if (s->jobs) s->jobs->prev = j;
    s->jobs = j;
    s->n_inflight++;
}

static void list_remove(flint_server *s, flint_server_job *j) {
    if (j->prev) j->prev->next = j->next;
    else s->jobs = j->next;
    if (j->next) j->next->prev = j->prev;
    s->n_inflight--;
}

static void on_conn_close(struct evhttp_connection *evcon, void *arg) {
    flint_server_job *j = arg;
    /* libevent is freeing the connection; our request was detached from it (it stays ours) */
    j->evcon = NULL;
    j->gone = 1;
    if (!j->done) flint_server_engine_cancel(j->srv, j, FLINT_CANCEL_CLIENT_GONE);
}

static void start_job(flint_server *s, struct evhttp_request *req, flint_api_request *r, int32_t *ids, int n,
                      int max_tokens, const char *path) {
    flint_server_job *j = flint_xcalloc(1, sizeof *j);
    j->srv = s;
    uint64_t rnd = next_random(s);
    snprintf(j->id, sizeof j->id, "%s-%016llx%08llx", r->kind == FLINT_API_CHAT ? "chatcmpl" : "cmpl",
             (unsigned long long)rnd, (unsigned long long)(mix64(rnd) >> 32));
    j->kind = r->kind;
    j->stream = r->stream;
    j->include_usage = r->stream && r->include_usage;
    j->continuous_usage = r->stream && r->continuous_usage;
    j->token_by_token = r->stream && s->tok && (r->token_by_token >= 0 ? r->token_by_token : s->o.stream_token_by_token);
    j->prompt = ids;
    j->n_prompt = n;
    j->params = r->params;
    j->params.max_tokens = max_tokens;
    if (!r->has_seed) j->params.sampling.seed = next_random(s); /* unseeded requests differ, as in OpenAI */
    /* a seeded sampled request keeps its tokens whatever runs beside it: under dynamic draft
     * lengths the K it drafts is then fixed (greedy output never depends on K) */
    j->params.fixed_draft = r->dynamic_draft >= 0 ? !r->dynamic_draft
                                                  : r->has_seed && j->params.sampling.temperature > 0.0f;
    for (int i = 0; i < r->params.n_stop; i++) {
        j->stop_store[i] = flint_xstrdup(r->params.stop[i]);
        j->params.stop[i] = j->stop_store[i];
    }
    if (r->params.response_format) {
        j->response_format_store = flint_xstrdup(r->params.response_format);
        j->params.response_format = j->response_format_store;
    }
    j->created = (int64_t)time(NULL);
    j->t_arrival = flint_server_now();
    j->prompt_tokens = n;
    snprintf(j->path, sizeof j->path, "%s", path);
    j->req = req;
    j->evcon = evhttp_request_get_connection(req);
    atomic_init(&j->cancel, 0);
    if (j->evcon) evhttp_connection_set_closecb(j->evcon, on_conn_close, j);
    if (j->token_by_token) {
        flint_detok_init(&j->dt, s->tok, j->params.skip_special);
        j->dt_live = 1;
    }
    if (j->kind == FLINT_API_CHAT && s->o.reasoning_parser) j->rp = flint_reasoning_new();
    if (j->kind == FLINT_API_CHAT && s->o.tool_call_parser && r->tools && !r->tool_choice_none) {
        char prefix[32];
        snprintf(prefix, sizeof prefix, "call_%012llx", (unsigned long long)(mix64(rnd ^ 0x5bd1e995) >> 16));
        j->tp = flint_tool_parser_new(prefix);
        j->calls = cJSON_CreateArray();
        j->tool_forced = r->tool_forced;
    }
    if ((j->rp || j->tp) && j->token_by_token) { /* parsed output goes out as the parsers release it */
        j->token_by_token = 0;
        flint_detok_free(&j->dt);
        j->dt_live = 0;
    }
    j->carry_tokens = j->token_by_token || j->params.logprobs;
    list_insert(s, j);
    if (j->stream) {
        /* Headers go out now: the client sees the stream open, and libevent watches the socket
         * for a close while we write. */
        struct evkeyvalq *h = evhttp_request_get_output_headers(req);
        evhttp_add_header(h, "Content-Type", "text/event-stream");
        evhttp_add_header(h, "Cache-Control", "no-cache");
        evhttp_add_header(h, "X-Accel-Buffering", "no");
        evhttp_add_header(h, "X-Request-Id", j->id);
        evhttp_send_reply_start(req, 200, "OK");
        j->started = 1;
        j->t_sent = flint_server_now();
        /* Bound the kernel's share of a stream's backlog too: without this, send-buffer
         * autotuning can swallow megabytes for a client that never reads, and the stream buffer
         * limit below would only ever see what the kernel refused. */
        struct bufferevent *bev = j->evcon ? evhttp_connection_get_bufferevent(j->evcon) : NULL;
        evutil_socket_t fd = bev ? bufferevent_getfd(bev) : -1;
        int sndbuf = s->o.stream_buffer_bytes > (1 << 30) ? 1 << 30 : (int)s->o.stream_buffer_bytes;
        if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
    }
    flint_server_engine_submit(s, j);
}

static void handle_completion(flint_server *s, struct evhttp_request *req, flint_api_kind kind, const char *path) {
    flint_api_error e;
    flint_api_request r;
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t len = evbuffer_get_length(in);
    const char *body = len ? (const char *)evbuffer_pullup(in, -1) : NULL;
    int32_t *ids = NULL;
    int n = 0, max_tokens = 0;
    int rc = flint_server_request_parse(kind, body, len, &r, &e);
    if (rc == 0 && r.model && strcmp(r.model, s->served_name))
        rc = flint_api_error_set(&e, 404, "invalid_request_error", "model_not_found", "model",
                                 "The model `%.200s` does not exist (this server serves `%.200s`).", r.model,
                                 s->served_name);
    if (rc == 0 && r.tools && !r.tool_choice_none && !s->o.tool_call_parser)
        rc = flint_api_error_set(&e, 400, "invalid_request_error", NULL, "tools",
                                 "'tools' needs a server started with --tool-call-parser (e.g. hermes)");
    if (rc == 0) rc = build_prompt(s, &r, &ids, &n, &e);
    if (rc == 0) rc = check_limits(s, &r, n, &max_tokens, &e);
    /* Admission: the engine's slots plus a bounded queue in front of them; beyond that the
     * client hears at once rather than waiting behind an unbounded backlog. */
    if (rc == 0 && s->n_inflight >= s->o.max_num_seqs + s->o.max_queue)
        rc = flint_api_error_set(&e, 429, "rate_limit_error", "queue_full", NULL,
                                 "the server is at capacity (%d requests running or queued); retry later",
                                 s->n_inflight);
    if (rc) {
        free(ids);
        reply_error(s, req, &e);
    } else {
        start_job(s, req, &r, ids, n, max_tokens, path);
    }
    flint_server_request_free(&r);
}

/* ==== simple endpoints ==== */

static void handle_models(flint_server *s, struct evhttp_request *req) {
    flint_sbuf b = {0};
    flint_sbuf_adds(&b, "{\"object\":\"list\",\"data\":[{\"id\":");
    flint_sbuf_add_json_str(&b, s->served_name, strlen(s->served_name));
    flint_sbuf_addf(&b, ",\"object\":\"model\",\"created\":%lld,\"owned_by\":\"flint\",\"root\":", (long long)s->t_start);
    flint_sbuf_add_json_str(&b, s->o.model_dir, strlen(s->o.model_dir));
    flint_sbuf_addf(&b, ",\"parent\":null,\"max_model_len\":%d,\"speculative\":{\"enabled\":%s,"
                        "\"num_speculative_tokens\":%d,\"dynamic_draft\":%s}}]}\n", s->max_model_len,
                    s->has_drafter ? "true" : "false", s->K, s->dynamic_draft ? "true" : "false");
    reply(req, 200, "application/json", b.p, b.n);
    flint_sbuf_free(&b);
}

static int authorized(flint_server *s, struct evhttp_request *req, flint_api_error *e) {
    if (!s->o.api_key) return 1;
    const char *h = evhttp_find_header(evhttp_request_get_input_headers(req), "Authorization");
    if (!h) {
        flint_api_error_set(e, 401, "invalid_request_error", "invalid_api_key", NULL,
                            "missing API key: send the header 'Authorization: Bearer KEY'");
        return 0;
    }
    const char *key = h;
    if (!strncasecmp(key, "Bearer ", 7)) key += 7;
    else key = "";
    while (*key == ' ') key++;
    if (!flint_server_secret_equal(key, strlen(key), s->o.api_key)) {
        flint_api_error_set(e, 401, "invalid_request_error", "invalid_api_key", NULL, "incorrect API key provided");
        return 0;
    }
    return 1;
}

void flint_server_http_request(struct evhttp_request *req, void *arg) {
    flint_server *s = arg;
    const char *path = req_path(req);
    enum evhttp_cmd_type cmd = evhttp_request_get_command(req);
    flint_api_error e = {0};
    if (!strcmp(path, "/health")) {
        int ok = s->ready && !s->draining;
        const char *body = ok ? "{\"status\":\"ok\"}\n"
                           : s->draining ? "{\"status\":\"shutting down\"}\n" : "{\"status\":\"loading\"}\n";
        reply(req, ok ? 200 : 503, "application/json", body, strlen(body));
        return;
    }
    if (!strcmp(path, "/metrics")) {
        flint_sbuf b = {0};
        flint_server_metrics_render(s, &b);
        reply(req, 200, "text/plain; version=0.0.4; charset=utf-8", b.p, b.n);
        flint_sbuf_free(&b);
        return;
    }
    int is_chat = !strcmp(path, "/v1/chat/completions"), is_cmpl = !strcmp(path, "/v1/completions");
    int is_models = !strcmp(path, "/v1/models");
    if (!is_chat && !is_cmpl && !is_models) {
        flint_api_error_set(&e, 404, "invalid_request_error", "not_found", NULL, "no route %.200s", path);
        reply_error(s, req, &e);
        return;
    }
    if (!authorized(s, req, &e)) {
        reply_error(s, req, &e);
        return;
    }
    if ((is_models && cmd != EVHTTP_REQ_GET) || (!is_models && cmd != EVHTTP_REQ_POST)) {
        flint_api_error_set(&e, 405, "invalid_request_error", "method_not_allowed", NULL, "%s takes %s", path,
                            is_models ? "GET" : "POST");
        reply_error(s, req, &e);
        return;
    }
    if (s->draining || !s->ready) {
        flint_api_error_set(&e, 503, "service_unavailable", s->draining ? "shutting_down" : "model_not_ready", NULL,
                            s->draining ? "the server is shutting down" : "the model is still loading; retry later");
        reply_error(s, req, &e);
        return;
    }
    if (is_models) handle_models(s, req);
    else handle_completion(s, req, is_chat ? FLINT_API_CHAT : FLINT_API_COMPLETION, path);
}

/* ==== delivering engine output ==== */

static void send_chunk(flint_server_job *j, const flint_sbuf *b) {
    if (!j->evcon || !b->n) return;
    struct evbuffer *eb = evbuffer_new();
    if (!eb) return;
    evbuffer_add(eb, b->p, b->n);
    evhttp_send_reply_chunk(j->req, eb);
    evbuffer_free(eb);
    j->t_sent = flint_server_now();
}

static size_t unsent_bytes(flint_server_job *j) {
    struct bufferevent *bev = j->evcon ? evhttp_connection_get_bufferevent(j->evcon) : NULL;
    return bev ? evbuffer_get_length(bufferevent_get_output(bev)) : 0;
}

/* ==== logprobs ==== */

static void lp_number(flint_sbuf *b, float v) {
    flint_sbuf_addf(b, "%.6g", isfinite(v) && v > -9999.0f ? (double)v : -9999.0); /* JSON has no -inf */
}

/* A token's text as the client sees it (special tokens included), for the logprobs objects. */
static const char *token_text(flint_server *s, int32_t id, char **owned, size_t *len) {
    flint_err err = {0};
    *owned = NULL;
    *len = 0;
    if (!s->tok || flint_tokenizer_decode(s->tok, &id, 1, 0, owned, len, &err)) return "";
    return *owned;
}

static void chat_lp_entry(flint_server *s, flint_sbuf *b, int32_t id, float lp) {
    char *t;
    size_t n;
    const char *text = token_text(s, id, &t, &n);
    flint_sbuf_adds(b, "{\"token\":");
    flint_sbuf_add_json_str(b, text, n);
    flint_sbuf_adds(b, ",\"logprob\":");
    lp_number(b, lp);
    flint_sbuf_adds(b, ",\"bytes\":[");
    for (size_t i = 0; i < n; i++) flint_sbuf_addf(b, i ? ",%u" : "%u", (unsigned char)text[i]);
    flint_sbuf_adds(b, "]");
    free(t);
}

/* The choice's logprobs object for tokens [a, b) of j->tok: chat {"content": [...]}, completions
 * {"tokens", "token_logprobs", "top_logprobs", "text_offset"} (text offsets run across chunks). */
static void logprobs_json(flint_server *s, flint_server_job *j, int a, int b, flint_sbuf *out) {
    const flint_tokbuf *t = &j->tok;
    int K = t->n_top;
    out->n = 0;
    if (j->kind == FLINT_API_CHAT) {
        flint_sbuf_adds(out, "{\"content\":[");
        for (int i = a; i < b; i++) {
            if (i > a) flint_sbuf_adds(out, ",");
            chat_lp_entry(s, out, t->ids[i], t->with_lp ? t->lp[i] : 0);
            flint_sbuf_adds(out, ",\"top_logprobs\":[");
            for (int k = 0; k < K; k++) {
                if (k) flint_sbuf_adds(out, ",");
                chat_lp_entry(s, out, t->top_ids[(size_t)i * K + k], t->top_lp[(size_t)i * K + k]);
                flint_sbuf_adds(out, "}");
            }
            flint_sbuf_adds(out, "]}");
        }
        flint_sbuf_adds(out, "],\"refusal\":null}");
        return;
    }
    flint_sbuf_adds(out, "{\"tokens\":[");
    for (int i = a; i < b; i++) {
        char *o;
        size_t n;
        const char *text = token_text(s, t->ids[i], &o, &n);
        if (i > a) flint_sbuf_adds(out, ",");
        flint_sbuf_add_json_str(out, text, n);
        free(o);
    }
    flint_sbuf_adds(out, "],\"token_logprobs\":[");
    for (int i = a; i < b; i++) {
        if (i > a) flint_sbuf_adds(out, ",");
        lp_number(out, t->with_lp ? t->lp[i] : 0);
    }
    flint_sbuf_adds(out, "],\"top_logprobs\":");
    if (K == 0) flint_sbuf_adds(out, "null");
    else {
        flint_sbuf_adds(out, "[");
        for (int i = a; i < b; i++) {
            flint_sbuf_adds(out, i > a ? ",{" : "{");
            for (int k = 0; k < K; k++) {
                char *o;
                size_t n;
                const char *text = token_text(s, t->top_ids[(size_t)i * K + k], &o, &n);
                if (k) flint_sbuf_adds(out, ",");
                flint_sbuf_add_json_str(out, text, n);
                flint_sbuf_adds(out, ":");
                lp_number(out, t->top_lp[(size_t)i * K + k]);
                free(o);
            }
            flint_sbuf_adds(out, "}");
        }
        flint_sbuf_adds(out, "]");
    }
    flint_sbuf_adds(out, ",\"text_offset\":[");
    for (int i = a; i < b; i++) {
        char *o;
        size_t n;
        token_text(s, t->ids[i], &o, &n);
        flint_sbuf_addf(out, i > a ? ",%zu" : "%zu", j->lp_offset);
        j->lp_offset += n;
        free(o);
    }
    flint_sbuf_adds(out, "]}");
}

/* ==== output parsers ==== */

void flint_server_parse_output(flint_server_job *j, const char *text, size_t n, int final, flint_sbuf *reasoning,
                               flint_sbuf *content) {
    flint_sbuf mid = {0};
    flint_sbuf *to_tools = j->tp ? &mid : content;
    if (j->rp) {
        if (n) flint_reasoning_feed(j->rp, text, n, reasoning, to_tools);
        if (final) flint_reasoning_finish(j->rp, reasoning, to_tools);
    } else if (n) {
        flint_sbuf_add(to_tools, text, n);
    }
    if (j->tp) {
        /* a forced call (tool_choice required / named) is bare JSON: the tags are added here */
        static const char open_tag[] = "<tool_call>\n", close_tag[] = "\n</tool_call>";
        if (j->tool_forced == 1 && (mid.n || final)) {
            flint_tool_feed(j->tp, open_tag, sizeof open_tag - 1, content, j->calls);
            j->tool_forced = 2;
        }
        if (mid.n) flint_tool_feed(j->tp, mid.p, mid.n, content, j->calls);
        if (final && j->tool_forced) flint_tool_feed(j->tp, close_tag, sizeof close_tag - 1, content, j->calls);
        if (final) flint_tool_finish(j->tp, content, j->calls);
    }
    flint_sbuf_free(&mid);
}

static const char *finish_name(const flint_server_job *j) {
    if (j->finish == FLINT_FINISH_STOP && j->calls && cJSON_GetArraySize(j->calls) > 0) return "tool_calls";
    return flint_server_finish_name(j->finish);
}

/* Streamed chat with output parsers: what the parsers released since the last chunk. */
static void write_parsed(flint_server *s, flint_server_job *j, flint_sbuf *out, int final) {
    flint_sbuf r = {0}, c = {0};
    flint_server_parse_output(j, j->text.p, j->text.n, final, &r, &c);
    int n_calls = j->calls ? cJSON_GetArraySize(j->calls) : 0, lp = j->params.logprobs;
    if (r.n || c.n || n_calls > j->n_calls_sent || (final && lp && j->tok.n)) {
        flint_sbuf lpj = {0};
        if (lp) logprobs_json(s, j, 0, j->tok.n, &lpj);
        flint_server_sse_chat_parts(out, j, s->served_name, !j->sent_role, r.p, r.n, c.p, c.n, j->calls, j->n_calls_sent,
                                    NULL, lp ? lpj.p : NULL, j->include_usage ? j->continuous_usage : -1,
                                    j->completion_tokens);
        flint_sbuf_free(&lpj);
        j->sent_role = 1;
        j->n_calls_sent = n_calls;
        j->tok.n = 0;
    }
    j->sent_bytes += j->text.n;
    j->text.n = 0;
    flint_sbuf_free(&r);
    flint_sbuf_free(&c);
}

/* ==== streaming ==== */

/* The text and tokens that arrived since the last write, as SSE chunks: one chunk per delivery,
 * or, token by token, one per token whose text is not empty (a token without text of its own
 * rides with the next one). Per-token text boundaries come from a second incremental
 * detokenizer over the same ids: the engine's text is always a prefix of that decoding (stop
 * strings only cut or hold text back), so token i ends at min(its decoded end, the engine text so
 * far). With logprobs, each chunk carries those of its tokens; tokens that arrived without text
 * wait for the next chunk (or, token by token, get a chunk of their own at the end). */
static void write_pending(flint_server *s, flint_server_job *j, flint_sbuf *out, int final) {
    if (j->rp || j->tp) {
        write_parsed(s, j, out, final);
        return;
    }
    int usage = j->include_usage ? j->continuous_usage : -1, lp = j->params.logprobs;
    flint_sbuf lpj = {0};
    if (!j->token_by_token) {
        if (j->text.n || (final && lp && j->tok.n)) {
            if (lp) logprobs_json(s, j, 0, j->tok.n, &lpj);
            flint_server_sse_chunk(out, j, s->served_name, j->text.p, j->text.n, !j->sent_role, NULL,
                                   lp ? lpj.p : NULL, usage, j->completion_tokens);
            j->sent_role = 1;
            j->sent_bytes += j->text.n;
            j->tok.n = 0;
        }
        j->text.n = 0;
        flint_sbuf_free(&lpj);
        return;
    }
    size_t avail_end = j->sent_bytes + j->text.n, cur = j->sent_bytes;
    int first = 0; /* the first token not yet in a chunk */
    for (int i = 0; i < j->tok.n; i++) {
        flint_err err = {0};
        int w = flint_detok_push(&j->dt, j->tok.ids[i], s->piece, sizeof s->piece, &err);
        if (w > 0) j->raw_bytes += (size_t)w;
        size_t end = i == j->tok.n - 1 ? avail_end : (j->raw_bytes < avail_end ? j->raw_bytes : avail_end);
        int last_lp = lp && i == j->tok.n - 1;
        if (end <= cur && !last_lp) continue;
        if (lp) logprobs_json(s, j, first, i + 1, &lpj);
        flint_server_sse_chunk(out, j, s->served_name, j->text.p + (cur - j->sent_bytes), end > cur ? end - cur : 0,
                               !j->sent_role, NULL, lp ? lpj.p : NULL, usage, j->sent_completion_tokens + i + 1);
        j->sent_role = 1;
        cur = end > cur ? end : cur;
        first = i + 1;
    }
    j->sent_completion_tokens += j->tok.n;
    j->sent_bytes = avail_end;
    j->text.n = 0;
    j->tok.n = 0;
    flint_sbuf_free(&lpj);
}

static void job_error(const flint_server_job *j, flint_api_error *e) {
    if (j->status)
        flint_api_error_set(e, j->status, j->status >= 500 ? "server_error" : "invalid_request_error", NULL, NULL,
                            "%s", j->err);
    else if (j->cancel_reason == FLINT_CANCEL_SLOW_CLIENT)
        flint_api_error_set(e, 503, "server_error", "slow_client", NULL,
                            "the client read the stream too slowly (more than the stream buffer limit unsent); "
                            "the request was cancelled");
    else if (j->cancel_reason == FLINT_CANCEL_SHUTDOWN)
        flint_api_error_set(e, 503, "service_unavailable", "shutting_down",
                            NULL, "the server is shutting down; the request was cancelled");
    else
        flint_api_error_set(e, 499, "invalid_request_error", "cancelled", NULL, "the request was cancelled");
}

static void finish_job(flint_server *s, flint_server_job *j) {
    if (j->evcon) evhttp_connection_set_closecb(j->evcon, NULL, NULL);
    int failed = j->status != 0 || j->finish == FLINT_FINISH_CANCELLED;
    int status = 200;
    flint_api_error e = {0};
    if (failed) {
        job_error(j, &e);
        status = e.status;
    }
    flint_sbuf b = {0};
    if (j->stream) {
        if (j->evcon) {
            if (failed) {
                flint_server_sse_error(&b, &e);
            } else {
                write_pending(s, j, &b, 1);
                flint_server_sse_chunk(&b, j, s->served_name, "", 0, !j->sent_role, finish_name(j), NULL,
                                       j->include_usage ? j->continuous_usage : -1, j->completion_tokens);
                if (j->include_usage) flint_server_sse_usage(&b, j, s->served_name, s->K);
                flint_sbuf_adds(&b, "data: [DONE]\n\n");
            }
            send_chunk(j, &b);
        }
        evhttp_send_reply_end(j->req); /* frees the request, also when the client has gone */
    } else if (failed) {
        flint_server_error_body(&b, &e);
        reply(j->req, status, "application/json", b.p, b.n);
    } else {
        flint_sbuf lpj = {0};
        if (j->params.logprobs) logprobs_json(s, j, 0, j->tok.n, &lpj);
        if (j->rp || j->tp) {
            flint_sbuf r = {0}, c = {0};
            flint_server_parse_output(j, j->text.p, j->text.n, 1, &r, &c);
            flint_server_chat_body_parts(&b, j, s->served_name, r.p, r.n, c.p ? c.p : "", c.n, j->calls,
                                         finish_name(j), j->params.logprobs ? lpj.p : NULL, s->K);
            flint_sbuf_free(&r);
            flint_sbuf_free(&c);
        } else {
            flint_server_response_body(&b, j, s->served_name, j->text.p ? j->text.p : "", j->text.n,
                                       j->params.logprobs ? lpj.p : NULL, s->K);
        }
        flint_sbuf_free(&lpj);
        evhttp_add_header(evhttp_request_get_output_headers(j->req), "X-Request-Id", j->id);
        reply(j->req, 200, "application/json", b.p, b.n);
    }
    flint_sbuf_free(&b);
    j->req = NULL;

    flint_server_metrics_job_done(s, j);
    double now = flint_server_now();
    flint_log_info("%s %s %d%s prompt=%d completion=%d finish=%s ttft=%.1fms e2e=%.1fms al=%.2f%s%s", j->id, j->path,
                   status, j->stream ? " stream" : "", j->prompt_tokens, j->completion_tokens,
                   failed ? "error" : finish_name(j),
                   j->t_first > 0 ? (j->t_first - j->t_arrival) * 1e3 : 0.0,
                   ((j->t_done > 0 ? j->t_done : now) - j->t_arrival) * 1e3, flint_spec_stats_mean_al(&j->stats),
                   failed ? " " : "", failed ? e.message : "");
    list_remove(s, j);
    flint_server_job_free(j);
    flint_server_maybe_exit(s);
}

static void deliver(flint_server *s, flint_server_job *j) {
    if (j->done) {
        finish_job(s, j);
        return;
    }
    if (!j->stream) return; /* the text accumulates until the end */
    if (!j->evcon || j->muted) {
        j->text.n = 0;
        j->tok.n = 0;
        return;
    }
    flint_sbuf b = {0};
    write_pending(s, j, &b, 0);
    send_chunk(j, &b);
    flint_sbuf_free(&b);
    size_t unsent = unsent_bytes(j);
    if (unsent > s->o.stream_buffer_bytes) {
        flint_log_warn("%s: client is not reading (%zu bytes unsent); cancelling", j->id, unsent);
        j->muted = 1;
        flint_server_engine_cancel(s, j, FLINT_CANCEL_SLOW_CLIENT);
    }
}

void flint_server_on_wake(flint_server *s) {
    int n = 0;
    pthread_mutex_lock(&s->out_mu);
    for (flint_server_job *j = s->ready_head; j; j = j->ready_next) {
        if (n == s->batch_cap) {
            s->batch_cap = s->batch_cap ? s->batch_cap * 2 : 64;
            s->batch = flint_xrealloc(s->batch, sizeof *s->batch * (size_t)s->batch_cap);
        }
        s->batch[n++] = j;
        j->on_ready = 0;
        /* move what the engine wrote into the loop's fields */
        if (j->out_text.n) flint_sbuf_add(&j->text, j->out_text.p, j->out_text.n);
        j->out_text.n = 0;
        flint_tokbuf_move(&j->tok, &j->out_tok);
        if (j->out_prompt_tokens) j->prompt_tokens = j->out_prompt_tokens;
        j->cached_tokens = j->out_cached_tokens;
        j->completion_tokens = j->out_completion_tokens;
        j->t_first = j->out_t_first;
        if (j->out_done) {
            j->done = 1;
            j->finish = j->out_finish;
            j->status = j->out_status;
            snprintf(j->err, sizeof j->err, "%s", j->out_err);
            j->stats = j->out_stats;
            j->t_done = j->out_t_done;
        }
    }
    s->ready_head = NULL;
    pthread_mutex_unlock(&s->out_mu);
    for (int i = 0; i < n; i++) deliver(s, s->batch[i]);
}

/* A client that closed its socket while its request is waiting or being generated: libevent
 * notices only when it next writes or reads, so the tick peeks at the socket. A stream writes
 * every step and is noticed by libevent itself; this covers queued and non-streamed requests.
 * A stream that has nothing to send yet (queued, or a long prompt still prefilling) gets an SSE
 * comment every half timeout: libevent re-arms a streaming connection's timeout only when it
 * writes, so without them the stream would be closed before its first token. Clients skip
 * comment lines (the SSE format; the openai SDK does). */
void flint_server_check_clients(flint_server *s) {
    double now = flint_server_now(), beat = s->o.http_timeout_s / 2.0;
    static const flint_sbuf ping = {(char *)": keep-alive\n\n", 14, 0};
    for (flint_server_job *j = s->jobs; j; j = j->next) {
        if (j->done || j->gone || !j->evcon || atomic_load(&j->cancel)) continue;
        if (j->started && now - j->t_sent >= beat && unsent_bytes(j) == 0) send_chunk(j, &ping);
        struct bufferevent *bev = evhttp_connection_get_bufferevent(j->evcon);
        evutil_socket_t fd = bev ? bufferevent_getfd(bev) : -1;
        if (fd < 0) continue;
        char c;
        ssize_t r = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
            j->gone = 1;
            flint_server_engine_cancel(s, j, FLINT_CANCEL_CLIENT_GONE);
        }
    }
}

void flint_server_cancel_all(flint_server *s, flint_cancel_reason why) {
    for (flint_server_job *j = s->jobs; j; j = j->next)
        if (!j->done) flint_server_engine_cancel(s, j, why);
}

void flint_server_job_free(flint_server_job *j) {
    flint_reasoning_free(j->rp);
    flint_tool_parser_free(j->tp);
    cJSON_Delete(j->calls);
    if (j->dt_live) flint_detok_free(&j->dt);
    for (int i = 0; i < FLINT_MAX_STOP; i++) free(j->stop_store[i]);
    free(j->response_format_store);
    free(j->prompt);
    flint_tokbuf_free(&j->out_tok);
    flint_tokbuf_free(&j->tok);
    flint_sbuf_free(&j->out_text);
    flint_sbuf_free(&j->text);
    free(j);
}

/* ==== libevent's own error pages ====
 * libevent 2.1 (Debian 12) answers some requests itself, before any handler runs: a body over
 * evhttp's limit (413), a disallowed method (405), a malformed request line or headers (400). It
 * writes an HTML page, and 2.1 has no hook for it (evhttp_set_errorcb arrived in 2.2). Clients
 * of an OpenAI API parse error bodies as JSON, so every connection's output buffer carries a
 * callback that, while such a page still waits unsent in the buffer, swaps it for an error
 * object with the same status. It only ever touches a buffer that holds exactly one complete
 * libevent error page (status line first, the page's fixed HTML ending last). */
static _Thread_local int g_rewriting;

static void libevent_page_cb(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg) {
    flint_server *s = arg;
    static const char tail[] = "</BODY></HTML>\n";
    size_t n = evbuffer_get_length(buf);
    if (g_rewriting || info->n_added == 0 || n < 64 || n > 1024) return;
    char page[1025];
    if (evbuffer_copyout(buf, page, n) != (ev_ssize_t)n) return;
    page[n] = '\0';
    int status = 0, vmaj = 0, vmin = 0;
    if (sscanf(page, "HTTP/%d.%d %d ", &vmaj, &vmin, &status) != 3 || status < 400 || status > 599) return;
    if (memcmp(page + n - (sizeof tail - 1), tail, sizeof tail - 1) || !strstr(page, "<HTML><HEAD>\n<TITLE>")) return;

    flint_api_error e = {0};
    if (status == 413)
        flint_api_error_set(&e, 413, "invalid_request_error", "request_too_large", NULL,
                            "the request body is larger than this server's limit of %zu bytes (--max-body-bytes)",
                            s->o.max_body_bytes);
    else if (status == 405 || status == 501)
        flint_api_error_set(&e, status, "invalid_request_error", "method_not_allowed", NULL,
                            "this server takes GET and POST only");
    else
        flint_api_error_set(&e, status, "invalid_request_error", NULL, NULL,
                            "malformed HTTP request (request line, headers or body framing)");
    flint_sbuf b = {0};
    flint_server_error_body(&b, &e);
    g_rewriting = 1;
    evbuffer_drain(buf, n);
    evbuffer_add_printf(buf,
                        "HTTP/%d.%d %d %s\r\nContent-Type: application/json\r\nConnection: close\r\n"
                        "Content-Length: %zu\r\n\r\n",
                        vmaj, vmin, status, reason_phrase(status), b.n);
    evbuffer_add(buf, b.p, b.n);
    g_rewriting = 0;
    flint_sbuf_free(&b);
    flint_log_info("%d %s (answered by libevent before routing)", status, e.message);
    flint_server_metrics_rejected(s, status);
}

struct bufferevent *flint_server_http_bev(struct event_base *base, void *arg) {
    struct bufferevent *bev = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);
    if (bev) evbuffer_add_cb(bufferevent_get_output(bev), libevent_page_cb, arg);
    return bev;
}
