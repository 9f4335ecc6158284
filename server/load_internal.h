/* The load generator's state, shared by load.c (prompts, scheduling, statistics, report) and
 * load_client.c (connections, HTTP/1.1 responses, SSE). Everything runs on one libevent thread. */
#ifndef FLINT_SERVER_LOAD_INTERNAL_H
#define FLINT_SERVER_LOAD_INTERNAL_H

#include <stdio.h>
#include <sys/socket.h>

#include "server/load.h"
#include "server/server_internal.h" /* flint_sbuf */

struct event_base;
struct event;
struct bufferevent;

typedef struct flint_dvec {
    double *v;
    int n, cap;
} flint_dvec;

void flint_dvec_push(flint_dvec *d, double x);

typedef struct lrun lrun;

/* One request and everything observed about it. */
typedef struct lreq {
    int idx, prompt_idx;
    char *body;
    size_t body_len;
    double t_send, t_first, t_done;
    double t_last_chunk;
    int status;
    int sse;                    /* the reply is text/event-stream */
    int n_chunks;               /* SSE events that carried text or tokens */
    int n_finish;               /* chunks with a finish_reason */
    char finish[16];
    int done_seen, after_done, usage_seen;
    int prompt_tokens, completion_tokens;
    int last_running;           /* completion tokens in the last continuous usage */
    flint_sbuf text, raw;
    char err[200];              /* "" while fine */
    flint_dvec itl, itl_tok;    /* chunk gaps, per-token gaps (s) */
    struct event *timeout_ev;
} lreq;

typedef enum { C_CONNECTING, C_IDLE, C_STATUS, C_HEADERS, C_LEN, C_CHUNK_SIZE, C_CHUNK_DATA, C_CHUNK_END,
               C_TRAILERS, C_EOF } lstate;

typedef struct lconn {
    lrun *run;
    struct bufferevent *bev;
    lstate st;
    lreq *req;
    long left;                  /* body or chunk bytes still to come */
    int chunked, keep_alive;
    flint_sbuf line, data;      /* SSE line and event data being assembled */
    struct lconn *next_idle;
} lconn;

struct lrun {
    const flint_load_options *o;
    struct event_base *base;
    struct sockaddr_storage addr;
    socklen_t addrlen;
    char host[256];
    int port;
    char model[512];
    const char *path;           /* /v1/chat/completions or /v1/completions */
    char **prompts;
    int n_prompts;
    int issued, inflight, completed, failed, waiting_arrivals, retrying;
    int stopping;
    double t_start, t_end;
    lconn *idle;
    struct event *arrival_ev, *stop_ev, *rss_ev;
    FILE *save;
    /* results of successful requests */
    flint_dvec ttft, tpot, e2el, itl, itl_tok;
    int64_t out_tokens, in_tokens;
    int good;
    /* failures by reason */
    char fail_reason[16][96];
    int fail_count[16], n_fail_reasons;
    flint_dvec rss_mb;
};

/* load_client.c */
/* Send the next request on c (NULL: a new connection); with none left, c is closed. */
int flint_load_start_request(lrun *r, lconn *c);
void flint_load_conn_close(lconn *c);
int flint_load_http_get(lrun *r, const char *path, flint_sbuf *body, flint_err *err); /* blocking, for setup */
/* load.c */
/* A request ended (q->err says how); c is its connection when still usable, else NULL. Records
 * the result, frees q, and reuses or closes c. */
void flint_load_request_done(lrun *r, lconn *c, lreq *q);
lreq *flint_load_next_request(lrun *r);                   /* NULL when no more should be sent */

#endif
