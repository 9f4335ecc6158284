/* The server's state, shared by its files and by the tests and fuzz target; not an interface
 * (cli/ includes only server.h). Ownership is the whole design here, so every field group below
 * says which thread may touch it:
 *   loop    the libevent loop thread (every evhttp object, the in-flight list, the histograms)
 *   engine  the engine thread (the engine, the sid -> job table, the waiting FIFO)
 *   in_mu / out_mu / snap_mu   either thread, holding that mutex
 * A job is allocated and freed by the loop thread. The engine thread holds it from submission
 * until it marks the job done under out_mu, and never touches it afterwards; the loop thread
 * frees a job only after it has seen that mark. */
#ifndef FLINT_SERVER_INTERNAL_H
#define FLINT_SERVER_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "core/chat.h"
#include "core/sbuf.h"
#include "core/status.h"
#include "core/tokenizer.h"
#include "server/parsers.h"
#include "server/server.h"
#include "verifier/engine.h"

struct event_base;
struct event;
struct evhttp;
struct evhttp_bound_socket;
struct evhttp_request;
struct evhttp_connection;

/* growable byte buffer: core/sbuf.h */

/* Emitted tokens with their log-probabilities (when asked for): ids[n], lp[n],
 * top_ids / top_lp [n][n_top]. */
typedef struct flint_tokbuf {
    int32_t *ids, *top_ids;
    float *lp, *top_lp;
    int n, cap, n_top, with_lp;
} flint_tokbuf;

/* Append n tokens; lp / top arrays may be NULL (no logprobs). */
void flint_tokbuf_push(flint_tokbuf *b, int n, const int32_t *ids, const float *lp, int n_top, const int32_t *top_ids,
                       const float *top_lp);
void flint_tokbuf_move(flint_tokbuf *to, flint_tokbuf *from); /* append, then empty `from` */
void flint_tokbuf_free(flint_tokbuf *b);

/* ==== request parsing (request.c: pure, no libevent, fuzzed by tests/fuzz) ==== */

typedef enum { FLINT_API_CHAT = 0, FLINT_API_COMPLETION = 1 } flint_api_kind;

/* An OpenAI-style error: {"error": {"message", "type", "param", "code"}} with an HTTP status. */
typedef struct flint_api_error {
    int status;
    const char *type;  /* "invalid_request_error", ... (static string) */
    const char *code;  /* static string or NULL */
    char param[64];    /* the offending field, "" for none */
    char message[512];
} flint_api_error;

int flint_api_error_set(flint_api_error *e, int status, const char *type, const char *code, const char *param,
                        const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 6, 7)))
#endif
    ;

typedef struct flint_api_request {
    flint_api_kind kind;
    cJSON *root;              /* owns the strings that the fields below point into */
    const char *model;        /* NULL when absent */
    /* chat */
    flint_chat_msg *msgs;
    int n_msgs;
    char **owned;             /* joined content parts */
    int n_owned;
    /* completions: text, or token ids */
    const char *prompt;
    int32_t *prompt_ids;
    int n_prompt_ids;
    int max_tokens;           /* 0 when absent: the rest of the context */
    int has_seed;
    int dynamic_draft;        /* speculative.dynamic: 0 pins the request to the fixed K, 1 lets the
                               * scheduler choose; -1 (absent): pinned when seeded and sampled */
    flint_request_params params; /* sampling, stop (pointers into root), speculative, ignore_eos */
    int stream;
    int include_usage;        /* stream_options.include_usage */
    int continuous_usage;     /* stream_options.continuous_usage_stats (vLLM): usage on every chunk */
    int token_by_token;       /* stream_options.token_by_token: -1 = the server's default */
    /* logprobs: params.logprobs / params.top_logprobs (chat: logprobs + top_logprobs; completions:
     * logprobs = N) */
    /* chat: tools (a non-empty array, into root) and tool_choice "none"; chat_template_kwargs */
    const cJSON *tools;
    int tool_choice_none;
    int tool_forced;              /* tool_choice "required" or named: the output is one forced call */
    const char *tool_choice_name; /* the named function, NULL for "required" */
    int enable_thinking;      /* chat_template_kwargs.enable_thinking; -1 = the template's default */
} flint_api_request;

/* Validate and parse a request body (UTF-8, JSON, field types and ranges). Returns 0, or -1 with
 * e filled (status 400). The request must be freed either way. */
int flint_server_request_parse(flint_api_kind kind, const char *body, size_t len, flint_api_request *r,
                               flint_api_error *e);
void flint_server_request_free(flint_api_request *r);
/* Strict UTF-8 (no overlong forms, surrogates or code points above U+10FFFF). */
int flint_server_utf8_valid(const char *s, size_t n);
/* Constant-time equality for secrets: the time depends only on the length of `secret`. */
int flint_server_secret_equal(const char *given, size_t given_len, const char *secret);

/* ==== jobs ==== */

typedef enum {
    FLINT_CANCEL_NONE = 0,
    FLINT_CANCEL_CLIENT_GONE, /* the client closed the connection: nobody to tell */
    FLINT_CANCEL_SLOW_CLIENT, /* the stream's unsent bytes passed stream_buffer_bytes */
    FLINT_CANCEL_SHUTDOWN,    /* the grace period after SIGTERM ran out */
} flint_cancel_reason;

typedef struct flint_server flint_server;
typedef struct flint_server_job flint_server_job;

struct flint_server_job {
    /* ---- loop, before submission; read-only afterwards ---- */
    flint_server *srv;
    char id[48];
    flint_api_kind kind;
    int stream, include_usage, continuous_usage, token_by_token;
    int32_t *prompt;
    int n_prompt;
    flint_request_params params;
    char *stop_store[FLINT_MAX_STOP];
    char *response_format_store;
    int64_t created;
    double t_arrival;
    int carry_tokens;                 /* the engine thread passes token ids (token by token or logprobs) */

    /* ---- either thread: loop -> engine cancel request (the engine polls it every step) ---- */
    atomic_int cancel;

    /* ---- out_mu: what the engine produced and the loop has not taken yet ---- */
    flint_sbuf out_text;
    flint_tokbuf out_tok;             /* only when token by token or logprobs */
    int out_prompt_tokens, out_completion_tokens, out_cached_tokens;
    int out_done;                     /* the engine is finished with this job */
    flint_finish_reason out_finish;
    int out_status;                   /* != 0: the engine refused it (HTTP status) */
    char out_err[256];
    flint_spec_stats out_stats;
    double out_t_first, out_t_done;   /* first token, finish (monotonic clock, engine side) */
    int on_ready;
    flint_server_job *ready_next;

    /* ---- engine ---- */
    int sid;
    int cancel_sent;
    flint_server_job *eng_next;       /* in_mu queue, then the engine's waiting FIFO */

    /* ---- loop ---- */
    struct evhttp_request *req;
    struct evhttp_connection *evcon;  /* NULL once libevent closed the connection */
    int started;                      /* stream: reply_start sent */
    double t_sent;                    /* stream: when bytes last went out (keep-alive comments) */
    int muted;                        /* stream: stop writing (slow client) */
    int gone;                         /* the client left */
    flint_cancel_reason cancel_reason;
    flint_sbuf text;                  /* non-stream: the whole text; stream: text not yet sent */
    flint_tokbuf tok;                 /* tokens not yet sent (token by token, logprobs) */
    size_t lp_offset;                 /* completions logprobs: text_offset of the next token */
    int prompt_tokens, completion_tokens, sent_completion_tokens, cached_tokens;
    int done;
    flint_finish_reason finish;
    int status;
    char err[256];
    flint_spec_stats stats;
    double t_first, t_done;
    int sent_role;
    flint_reasoning_parser *rp;       /* chat output parsers (--reasoning-parser, --tool-call-parser) */
    flint_tool_parser *tp;
    int tool_forced;             /* 1: a forced call whose opening tag is not fed yet, 2: fed */
    cJSON *calls;                     /* tool calls parsed so far */
    int n_calls_sent;
    flint_detok dt;                   /* token by token: text boundaries between tokens */
    size_t raw_bytes, sent_bytes;     /* token by token: detokenized / engine text bytes so far */
    int dt_live;
    char path[32];
    flint_server_job *prev, *next;    /* the in-flight list */
};

/* Free a job and everything it owns (http.c). */
void flint_server_job_free(flint_server_job *j);


/* ==== the server ==== */

typedef enum { FLINT_SRV_LOADING = 0, FLINT_SRV_READY, FLINT_SRV_FAILED } flint_srv_state;

/* Prometheus histogram with fixed bounds (seconds). */
#define FLINT_HIST_MAX 32
typedef struct flint_hist {
    const double *bounds;
    int n;
    int64_t counts[FLINT_HIST_MAX + 1]; /* per bucket (not cumulative); the last is +Inf */
    double sum;
    int64_t count;
} flint_hist;

void flint_hist_init(flint_hist *h, const double *bounds, int n);
void flint_hist_observe(flint_hist *h, double v);

/* What the engine thread publishes after every step (snap_mu). */
typedef struct flint_engine_snapshot {
    flint_spec_stats pooled;
    int kv_free, kv_total;
    int running;  /* sessions in the engine */
    int64_t prefix_queries, prefix_hits; /* prompt tokens looked up in / found in the prefix cache */
    int prefix_blocks;                   /* blocks held by the prefix cache */
    int waiting;  /* jobs in the engine thread's FIFO, not yet in the engine */
    int64_t steps;
    flint_target_graph_info graphs; /* CUDA: captured forward graphs */
    size_t device_bytes;            /* CUDA: the target's one device allocation */
    flint_host_time host;           /* the engine's own time in its steps */
} flint_engine_snapshot;

struct flint_server {
    flint_server_options o;
    flint_engine_options eo;
    char *drafter_dir_owned;
    char *served_name;

    /* ---- loop ---- */
    struct event_base *base;
    struct evhttp *http;
    struct evhttp_bound_socket *bound;
    struct event *wake_ev, *sigterm_ev, *sigint_ev, *tick_ev, *grace_ev;
    int port;
    int ready;                    /* loop's view of the engine state */
    const flint_tokenizer *tok;   /* the engine's; immutable after load, encode/decode are reentrant */
    flint_chat_format chat;
    int max_model_len, K, has_drafter, dynamic_draft, vocab; /* copied by the engine thread before READY */
    struct event *stop_ev;
    flint_server_job **batch;     /* on_wake scratch */
    int batch_cap;
    char piece[8192];             /* token-by-token detokenizer output */
    flint_server_job *jobs;       /* in flight: submitted, not yet finished */
    int n_inflight;
    int draining;                 /* SIGTERM seen: no new requests */
    int exit_status;
    uint64_t next_id;
    double t_start, t_last_log;
    flint_spec_stats last_log_stats;
    /* metrics (loop) */
    flint_hist h_ttft, h_tpot, h_e2e;
    int64_t n_finished[4];        /* [0] error, then by flint_finish_reason: stop, length, cancelled */
    int64_t n_rejected[8];        /* refused before reaching the engine, by status (see metrics.c) */
    int64_t prompt_tokens_total, generation_tokens_total;

    /* ---- engine ---- */
    pthread_t thread;
    int thread_started;
    flint_engine *engine;

    /* ---- shared ---- */
    atomic_int state;             /* flint_srv_state */
    flint_err load_err;           /* written before state becomes FAILED */
    pthread_mutex_t in_mu;
    pthread_cond_t in_cv;
    flint_server_job *in_head, *in_tail; /* submitted, not yet seen by the engine thread */
    int stop_engine;
    pthread_mutex_t out_mu;
    flint_server_job *ready_head;
    pthread_mutex_t snap_mu;
    flint_engine_snapshot snap;
};

double flint_server_now(void); /* monotonic seconds */

/* http.c */
struct evhttp_request;
void flint_server_http_request(struct evhttp_request *req, void *arg); /* the evhttp generic callback */
struct bufferevent;
struct event_base;
/* evhttp_set_bevcb: connections whose libevent-made error pages become OpenAI error objects */
struct bufferevent *flint_server_http_bev(struct event_base *base, void *arg);
void flint_server_on_wake(flint_server *s);      /* engine output is ready (loop thread) */
void flint_server_check_clients(flint_server *s); /* tick: notice clients that left */
void flint_server_cancel_all(flint_server *s, flint_cancel_reason why);
/* Run text through a job's output parsers (final: the output ended); appends to reasoning,
 * content and j->calls. Loop thread; no socket involved (tests drive it directly). */
void flint_server_parse_output(flint_server_job *j, const char *text, size_t n, int final, flint_sbuf *reasoning,
                               flint_sbuf *content);
/* server.c */
void flint_server_begin_shutdown(flint_server *s, int failed);
void flint_server_maybe_exit(flint_server *s);   /* after a job finished while draining */

/* engine_loop.c */
int flint_server_engine_start(flint_server *s, flint_err *err);
void flint_server_engine_stop(flint_server *s);     /* after every job is done: join the thread */
void flint_server_engine_submit(flint_server *s, flint_server_job *j);
void flint_server_engine_cancel(flint_server *s, flint_server_job *j, flint_cancel_reason why);
void flint_server_wake_loop(flint_server *s);       /* from the engine thread */

/* response.c */
void flint_server_error_body(flint_sbuf *b, const flint_api_error *e);
void flint_server_usage_json(flint_sbuf *b, int prompt_tokens, int completion_tokens, int cached_tokens,
                             const flint_spec_stats *spec, int K);
/* One SSE event "data: {chunk}\n\n" of a streamed job. text may be empty; finish NULL while
 * running; role adds the assistant role to a chat delta; logprobs: the choice's logprobs object
 * (JSON text) or NULL; usage: -1 none, 0 "usage": null, 1 the running counts
 * (continuous_usage_stats). */
void flint_server_sse_chunk(flint_sbuf *b, const flint_server_job *j, const char *model, const char *text,
                            size_t n, int role, const char *finish, const char *logprobs, int usage,
                            int completion_tokens);
void flint_server_sse_usage(flint_sbuf *b, const flint_server_job *j, const char *model, int K);
void flint_server_sse_error(flint_sbuf *b, const flint_api_error *e);
void flint_server_response_body(flint_sbuf *b, const flint_server_job *j, const char *model, const char *text,
                                size_t n, const char *logprobs, int K);
/* A chat chunk with what the output parsers split out: reasoning_content, content, and tool calls
 * [first_call, n_calls) of `calls` (each with its index); finish may be NULL. */
void flint_server_sse_chat_parts(flint_sbuf *b, const flint_server_job *j, const char *model, int role,
                                 const char *reasoning, size_t rn, const char *content, size_t cn, const cJSON *calls,
                                 int first_call, const char *finish, const char *logprobs, int usage,
                                 int completion_tokens);
/* The non-streamed chat body when output parsers ran (content may be NULL: JSON null). */
void flint_server_chat_body_parts(flint_sbuf *b, const flint_server_job *j, const char *model, const char *reasoning,
                                  size_t rn, const char *content, size_t cn, const cJSON *calls, const char *finish,
                                  const char *logprobs, int K);
const char *flint_server_finish_name(flint_finish_reason r);

/* metrics.c */
void flint_server_metrics_init(flint_server *s);
void flint_server_metrics_render(flint_server *s, flint_sbuf *b);
void flint_server_metrics_job_done(flint_server *s, const flint_server_job *j);
void flint_server_metrics_rejected(flint_server *s, int status);
void flint_server_metrics_log_tick(flint_server *s);
void flint_server_engine_snapshot(flint_server *s, flint_engine_snapshot *out);

#endif
