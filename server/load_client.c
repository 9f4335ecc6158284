/* The load generator's HTTP client: keep-alive HTTP/1.1 connections on bufferevents, a response
 * parser (status line, headers, Content-Length / chunked / until-close bodies) and an SSE parser
 * that timestamps every event as it arrives. Written out rather than using evhttp's client so that
 * every byte of the stream is seen and checked (framing, [DONE], nothing after it), which is what
 * makes `flint load` a protocol test as well as a benchmark. */
#include <errno.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "server/load_internal.h"

void flint_dvec_push(flint_dvec *d, double x) {
    if (d->n == d->cap) {
        d->cap = d->cap ? d->cap * 2 : 64;
        d->v = flint_xrealloc(d->v, sizeof(double) * (size_t)d->cap);
    }
    d->v[d->n++] = x;
}

static void fail(lreq *q, const char *msg) {
    if (!q->err[0]) snprintf(q->err, sizeof q->err, "%s", msg);
}

/* ==== SSE ==== */

static void on_event(lconn *c, const char *data, size_t n, double now) {
    lreq *q = c->req;
    if (q->done_seen) { /* nothing may follow [DONE] */
        q->after_done = 1;
        fail(q, "data after [DONE]");
        return;
    }
    if (n == 6 && !memcmp(data, "[DONE]", 6)) {
        q->done_seen = 1;
        return;
    }
    cJSON *j = cJSON_ParseWithLength(data, n);
    if (!j) {
        fail(q, "an SSE event is not JSON");
        return;
    }
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(j, "error");
    if (e) {
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(e, "message");
        char msg[160];
        snprintf(msg, sizeof msg, "stream error: %.140s", cJSON_IsString(m) ? m->valuestring : "?");
        fail(q, msg);
        cJSON_Delete(j);
        return;
    }
    const cJSON *choices = cJSON_GetObjectItemCaseSensitive(j, "choices");
    const cJSON *usage = cJSON_GetObjectItemCaseSensitive(j, "usage");
    int got_tokens = 0, ntok = 0;
    if (cJSON_IsObject(usage)) {
        const cJSON *ct = cJSON_GetObjectItemCaseSensitive(usage, "completion_tokens");
        const cJSON *pt = cJSON_GetObjectItemCaseSensitive(usage, "prompt_tokens");
        if (cJSON_IsNumber(pt)) q->prompt_tokens = pt->valueint;
        if (cJSON_IsArray(choices) && cJSON_GetArraySize(choices) == 0) { /* the final usage chunk */
            q->usage_seen = 1;
            if (cJSON_IsNumber(ct)) q->completion_tokens = ct->valueint;
        } else if (cJSON_IsNumber(ct)) { /* continuous usage: the running count */
            ntok = ct->valueint - q->last_running;
            if (ntok < 0) fail(q, "the running completion_tokens went down");
            q->last_running = ct->valueint;
            got_tokens = ntok > 0;
        }
    }
    const cJSON *ch = cJSON_IsArray(choices) ? cJSON_GetArrayItem(choices, 0) : NULL;
    if (ch) {
        const cJSON *delta = cJSON_GetObjectItemCaseSensitive(ch, "delta");
        const cJSON *t = delta ? cJSON_GetObjectItemCaseSensitive(delta, "content")
                               : cJSON_GetObjectItemCaseSensitive(ch, "text");
        const cJSON *fr = cJSON_GetObjectItemCaseSensitive(ch, "finish_reason");
        if (cJSON_IsString(t) && t->valuestring[0]) {
            flint_sbuf_adds(&q->text, t->valuestring);
            got_tokens |= 1;
        }
        if (cJSON_IsString(fr)) {
            q->n_finish++;
            snprintf(q->finish, sizeof q->finish, "%s", fr->valuestring);
        }
    }
    if (got_tokens) {
        if (q->t_first == 0) q->t_first = now;
        else {
            double gap = now - q->t_last_chunk;
            flint_dvec_push(&q->itl, gap);
            for (int i = 0; i < ntok; i++) flint_dvec_push(&q->itl_tok, gap / ntok);
        }
        q->t_last_chunk = now;
        q->n_chunks++;
    }
    cJSON_Delete(j);
}

static void sse_feed(lconn *c, const char *p, size_t n, double now) {
    for (size_t i = 0; i < n; i++) {
        if (p[i] != '\n') {
            flint_sbuf_add(&c->line, p + i, 1);
            continue;
        }
        size_t len = c->line.n;
        if (len && c->line.p[len - 1] == '\r') len--;
        if (len == 0) { /* blank line: the event is complete */
            if (c->data.n) on_event(c, c->data.p, c->data.n, now);
            c->data.n = 0;
        } else if (len >= 5 && !memcmp(c->line.p, "data:", 5)) {
            size_t off = len > 5 && c->line.p[5] == ' ' ? 6 : 5;
            if (c->data.n) flint_sbuf_add(&c->data, "\n", 1);
            flint_sbuf_add(&c->data, c->line.p + off, len - off);
        } else if (c->line.p[0] != ':') {
            fail(c->req, "an SSE line is neither data: nor a comment");
        }
        c->line.n = 0;
    }
}

static void body_feed(lconn *c, const char *p, size_t n, double now) {
    if (c->req->sse && c->req->status == 200) sse_feed(c, p, n, now);
    else flint_sbuf_add(&c->req->raw, p, n);
}

/* ==== the response ==== */

void flint_load_conn_close(lconn *c) {
    if (c->bev) bufferevent_free(c->bev);
    flint_sbuf_free(&c->line);
    flint_sbuf_free(&c->data);
    free(c);
}

static void finish_request(lconn *c) {
    lrun *r = c->run;
    lreq *q = c->req;
    if (c->line.n || c->data.n) fail(q, "the stream ended inside an event");
    c->req = NULL;
    c->st = C_IDLE;
    c->line.n = c->data.n = 0;
    if (q->timeout_ev) event_del(q->timeout_ev);
    flint_load_request_done(r, c, q);
}

/* A request cannot complete: fail it and drop the connection. */
static void abort_conn(lconn *c, const char *why) {
    lrun *r = c->run;
    lreq *q = c->req;
    c->req = NULL;
    flint_load_conn_close(c);
    if (q) {
        if (q->timeout_ev) event_del(q->timeout_ev);
        fail(q, why);
        flint_load_request_done(r, NULL, q);
    }
}

static int parse_header(lconn *c, char *line) {
    char *colon = strchr(line, ':');
    if (!colon) return -1;
    *colon = 0;
    char *v = colon + 1;
    while (*v == ' ' || *v == '\t') v++;
    if (!strcasecmp(line, "Content-Length")) c->left = strtol(v, NULL, 10);
    else if (!strcasecmp(line, "Transfer-Encoding") && strcasestr(v, "chunked")) c->chunked = 1;
    else if (!strcasecmp(line, "Connection") && !strcasecmp(v, "close")) c->keep_alive = 0;
    else if (!strcasecmp(line, "Content-Type") && strcasestr(v, "text/event-stream")) c->req->sse = 1;
    return 0;
}

static void on_read(struct bufferevent *bev, void *arg) {
    lconn *c = arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    double now = flint_server_now();
    for (;;) {
        if (!c->req) { /* bytes nobody asked for */
            if (evbuffer_get_length(in)) abort_conn(c, "unexpected data");
            return;
        }
        char *line;
        size_t n;
        switch (c->st) {
        case C_STATUS:
            if (!(line = evbuffer_readln(in, &n, EVBUFFER_EOL_CRLF))) return;
            if (sscanf(line, "HTTP/%*d.%*d %d", &c->req->status) != 1) {
                free(line);
                abort_conn(c, "bad status line");
                return;
            }
            free(line);
            c->left = -1;
            c->chunked = 0;
            c->keep_alive = 1;
            c->st = C_HEADERS;
            break;
        case C_HEADERS:
            if (!(line = evbuffer_readln(in, &n, EVBUFFER_EOL_CRLF))) return;
            if (n == 0) {
                free(line);
                c->st = c->chunked ? C_CHUNK_SIZE : c->left >= 0 ? C_LEN : C_EOF;
                if (c->st == C_LEN && c->left == 0) {
                    finish_request(c);
                    return;
                }
                break;
            }
            parse_header(c, line);
            free(line);
            break;
        case C_LEN: {
            size_t avail = evbuffer_get_length(in);
            if (!avail) return;
            size_t take = avail < (size_t)c->left ? avail : (size_t)c->left;
            body_feed(c, (const char *)evbuffer_pullup(in, (ev_ssize_t)take), take, now);
            evbuffer_drain(in, take);
            c->left -= (long)take;
            if (c->left == 0) {
                finish_request(c);
                return;
            }
            break;
        }
        case C_CHUNK_SIZE:
            if (!(line = evbuffer_readln(in, &n, EVBUFFER_EOL_CRLF))) return;
            c->left = strtol(line, NULL, 16);
            free(line);
            if (c->left < 0) {
                abort_conn(c, "bad chunk size");
                return;
            }
            c->st = c->left == 0 ? C_TRAILERS : C_CHUNK_DATA;
            break;
        case C_CHUNK_DATA: {
            size_t avail = evbuffer_get_length(in);
            if (!avail) return;
            size_t take = avail < (size_t)c->left ? avail : (size_t)c->left;
            body_feed(c, (const char *)evbuffer_pullup(in, (ev_ssize_t)take), take, now);
            evbuffer_drain(in, take);
            c->left -= (long)take;
            if (c->left == 0) c->st = C_CHUNK_END;
            break;
        }
        case C_CHUNK_END:
            if (!(line = evbuffer_readln(in, &n, EVBUFFER_EOL_CRLF))) return;
            free(line);
            c->st = C_CHUNK_SIZE;
            break;
        case C_TRAILERS:
            if (!(line = evbuffer_readln(in, &n, EVBUFFER_EOL_CRLF))) return;
            free(line);
            if (n == 0) {
                finish_request(c);
                return;
            }
            break;
        case C_EOF: {
            size_t avail = evbuffer_get_length(in);
            if (!avail) return;
            body_feed(c, (const char *)evbuffer_pullup(in, -1), avail, now);
            evbuffer_drain(in, avail);
            return;
        }
        default:
            return;
        }
    }
}

static void send_request(lconn *c) {
    lrun *r = c->run;
    lreq *q = c->req;
    struct evbuffer *out = bufferevent_get_output(c->bev);
    evbuffer_add_printf(out, "POST %s HTTP/1.1\r\nHost: %s:%d\r\nContent-Type: application/json\r\n"
                             "Content-Length: %zu\r\n", r->path, r->host, r->port, q->body_len);
    if (r->o->stream) evbuffer_add_printf(out, "Accept: text/event-stream\r\n");
    if (r->o->api_key) evbuffer_add_printf(out, "Authorization: Bearer %s\r\n", r->o->api_key);
    evbuffer_add(out, "\r\n", 2);
    evbuffer_add(out, q->body, q->body_len);
    c->st = C_STATUS;
    q->t_send = flint_server_now();
}

static void on_event_cb(struct bufferevent *bev, short what, void *arg) {
    lconn *c = arg;
    if (what & BEV_EVENT_CONNECTED) {
        if (c->req) send_request(c);
        else c->st = C_IDLE;
        return;
    }
    if ((what & BEV_EVENT_EOF) && c->req && c->st == C_EOF) {
        lrun *r = c->run;
        lreq *q = c->req;
        c->req = NULL;
        flint_load_conn_close(c);
        if (q->timeout_ev) event_del(q->timeout_ev);
        flint_load_request_done(r, NULL, q);
        return;
    }
    char why[128];
    snprintf(why, sizeof why, "connection %s%s%s", what & BEV_EVENT_EOF ? "closed by the server" : "error",
             what & BEV_EVENT_ERROR ? ": " : "", what & BEV_EVENT_ERROR ? strerror(EVUTIL_SOCKET_ERROR()) : "");
    if (c->req) abort_conn(c, why);
    else { /* an idle keep-alive connection the server closed: forget it */
        lrun *r = c->run;
        for (lconn **pp = &r->idle; *pp; pp = &(*pp)->next_idle)
            if (*pp == c) {
                *pp = c->next_idle;
                break;
            }
        flint_load_conn_close(c);
    }
}

static void on_timeout(evutil_socket_t fd, short what, void *arg) {
    lconn *c = arg;
    abort_conn(c, "timed out");
}

int flint_load_start_request(lrun *r, lconn *c) {
    lreq *q = flint_load_next_request(r);
    if (!q) {
        if (c) flint_load_conn_close(c);
        return 0;
    }
    int fresh = c == NULL;
    if (fresh) {
        c = flint_xcalloc(1, sizeof *c);
        c->run = r;
        c->bev = bufferevent_socket_new(r->base, -1, BEV_OPT_CLOSE_ON_FREE);
        bufferevent_setcb(c->bev, on_read, NULL, on_event_cb, c);
        bufferevent_enable(c->bev, EV_READ | EV_WRITE);
        c->st = C_CONNECTING;
    }
    c->req = q;
    q->timeout_ev = evtimer_new(r->base, on_timeout, c);
    struct timeval tv = {(time_t)r->o->timeout_s, 0};
    evtimer_add(q->timeout_ev, &tv);
    if (fresh) {
        if (bufferevent_socket_connect(c->bev, (struct sockaddr *)&r->addr, (int)r->addrlen)) {
            abort_conn(c, "cannot connect");
            return -1;
        }
    } else {
        send_request(c);
    }
    return 0;
}

/* ==== blocking GET for setup and /metrics scrapes ==== */

int flint_load_http_get(lrun *r, const char *path, flint_sbuf *body, flint_err *err) {
    int fd = socket(r->addr.ss_family, SOCK_STREAM, 0);
    if (fd < 0) return flint_err_set(err, FLINT_ERR_IO, "socket: %s", strerror(errno));
    struct timeval tv = {10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (connect(fd, (struct sockaddr *)&r->addr, r->addrlen)) {
        close(fd);
        return flint_err_set(err, FLINT_ERR_IO, "cannot connect to %s:%d: %s", r->host, r->port, strerror(errno));
    }
    char req[1024];
    int n = snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: %s:%d\r\nConnection: close\r\n%s%s%s\r\n", path,
                     r->host, r->port, r->o->api_key ? "Authorization: Bearer " : "",
                     r->o->api_key ? r->o->api_key : "", r->o->api_key ? "\r\n" : "");
    if (write(fd, req, (size_t)n) != n) {
        close(fd);
        return flint_err_set(err, FLINT_ERR_IO, "cannot send to %s:%d", r->host, r->port);
    }
    flint_sbuf all = {0};
    char buf[65536];
    ssize_t k;
    while ((k = read(fd, buf, sizeof buf)) > 0) flint_sbuf_add(&all, buf, (size_t)k);
    close(fd);
    int status = 0;
    char *hdr_end = all.p ? strstr(all.p, "\r\n\r\n") : NULL;
    if (!hdr_end || sscanf(all.p, "HTTP/%*d.%*d %d", &status) != 1) {
        flint_sbuf_free(&all);
        return flint_err_set(err, FLINT_ERR_IO, "GET %s: no HTTP response", path);
    }
    body->n = 0;
    flint_sbuf_add(body, hdr_end + 4, all.n - (size_t)(hdr_end + 4 - all.p));
    flint_sbuf_free(&all);
    if (status != 200) return flint_err_set(err, FLINT_ERR_IO, "GET %s: HTTP %d: %.200s", path, status, body->p);
    return 0;
}
