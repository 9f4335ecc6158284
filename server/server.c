/* The server's lifecycle (see server.h): options and their defaults, the socket, the two threads,
 * the load -> ready transition, the periodic tick, and shutdown.
 *
 * Shutdown on SIGTERM/SIGINT: stop accepting (the listening socket closes), answer new requests on
 * open connections with 503, let in-flight requests finish for shutdown_grace_s, then cancel the
 * rest (streams get an SSE error event and [DONE]); once nothing is in flight, stop the engine
 * thread, give the last bytes a moment to leave, and return 0. A second signal cancels at once. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>
#include <event2/http.h>
#include <event2/thread.h>

#include "core/log.h"
#include "server/server_internal.h"

void flint_server_options_default(flint_server_options *o) {
    memset(o, 0, sizeof *o);
    o->host = "127.0.0.1";
    o->port = 8000;
    o->max_num_seqs = 64;
    o->prefill_chunk = 512;
    o->enable_prefix_caching = 1;
    o->max_queue = 256;
    o->http_timeout_s = 30;
    o->max_body_bytes = (size_t)8 << 20;
    o->max_header_bytes = (size_t)16 << 10;
    o->stream_buffer_bytes = (size_t)1 << 20;
    o->log_interval_s = 10;
    o->shutdown_grace_s = 30;
}

double flint_server_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ==== loop callbacks ==== */

static void became_ready(flint_server *s) {
    s->ready = 1;
    s->chat = FLINT_CHAT_NONE;
    if (s->o.chat_template) flint_chat_parse_format(s->o.chat_template, &s->chat); /* validated at open */
    else if (s->tok) s->chat = flint_chat_detect(flint_tokenizer_chat_template(s->tok));
    flint_log_info("ready: serving %s as '%s' (max_model_len %d, %s, chat template %s) on http://%s:%d",
                   s->o.model_dir, s->served_name, s->max_model_len,
                   s->has_drafter ? "speculative" : "no drafter", flint_chat_format_name(s->chat), s->o.host, s->port);
}

static void on_wake(evutil_socket_t fd, short what, void *arg) {
    flint_server *s = arg;
    int st = atomic_load(&s->state);
    if (!s->ready && st == FLINT_SRV_READY) became_ready(s);
    if (st == FLINT_SRV_FAILED && s->exit_status == 0) {
        s->exit_status = -1;
        if (!s->ready) { /* the model never loaded: nothing can be in flight */
            flint_log_error("cannot load the model: %s", s->load_err.msg);
            flint_server_begin_shutdown(s, 1);
        } else {
            flint_log_error("the engine failed (%s); shutting down", s->load_err.msg);
            flint_server_begin_shutdown(s, 1);
        }
    }
    flint_server_on_wake(s);
}

static void on_tick(evutil_socket_t fd, short what, void *arg) {
    flint_server *s = arg;
    flint_server_check_clients(s);
    flint_server_metrics_log_tick(s);
}

static void on_signal(evutil_socket_t sig, short what, void *arg) {
    flint_server *s = arg;
    flint_log_info("%s received", sig == SIGTERM ? "SIGTERM" : "SIGINT");
    flint_server_begin_shutdown(s, 0);
}

static void on_stop(evutil_socket_t fd, short what, void *arg) { flint_server_begin_shutdown(arg, 0); }

static void on_grace(evutil_socket_t fd, short what, void *arg) {
    flint_server *s = arg;
    flint_log_warn("shutdown: %d request(s) still running after %.0f s; cancelling them", s->n_inflight,
                   s->o.shutdown_grace_s);
    flint_server_cancel_all(s, FLINT_CANCEL_SHUTDOWN);
}

void flint_server_maybe_exit(flint_server *s) {
    if (!s->draining || s->n_inflight > 0) return;
    if (s->grace_ev) evtimer_del(s->grace_ev);
    flint_server_engine_stop(s);
    /* replies already handed to libevent still sit in socket buffers: let them go out */
    struct timeval tv = {0, 200000};
    event_base_loopexit(s->base, &tv);
}

void flint_server_begin_shutdown(flint_server *s, int failed) {
    if (s->draining) {
        if (!failed) { /* a second signal: no more grace */
            flint_log_warn("shutdown: cancelling %d request(s) now", s->n_inflight);
            flint_server_cancel_all(s, FLINT_CANCEL_SHUTDOWN);
        }
        return;
    }
    s->draining = 1;
    if (s->bound) {
        evhttp_del_accept_socket(s->http, s->bound); /* closes the listening socket */
        s->bound = NULL;
    }
    if (s->n_inflight > 0) {
        flint_log_info("shutdown: waiting up to %.0f s for %d request(s)", s->o.shutdown_grace_s, s->n_inflight);
        struct timeval tv = {(time_t)s->o.shutdown_grace_s,
                             (suseconds_t)((s->o.shutdown_grace_s - (double)(time_t)s->o.shutdown_grace_s) * 1e6)};
        evtimer_add(s->grace_ev, &tv);
    }
    flint_server_maybe_exit(s);
}

/* ==== open / run / close ==== */

static int check_options(const flint_server_options *o, flint_err *err) {
    if (!o->model_dir) return flint_err_set(err, FLINT_ERR_INVALID, "no model directory");
    if (o->port < 0 || o->port > 65535) return flint_err_set(err, FLINT_ERR_INVALID, "port %d out of range", o->port);
    if (o->max_num_seqs < 1 || o->max_num_seqs > 4096)
        return flint_err_set(err, FLINT_ERR_INVALID, "max_num_seqs %d out of range 1..4096", o->max_num_seqs);
    if (o->max_queue < 0) return flint_err_set(err, FLINT_ERR_INVALID, "max_queue must be >= 0");
    if (o->http_timeout_s < 1) return flint_err_set(err, FLINT_ERR_INVALID, "the HTTP timeout must be >= 1 s");
    if (o->max_body_bytes < 1024 || o->max_header_bytes < 1024 || o->stream_buffer_bytes < 1024)
        return flint_err_set(err, FLINT_ERR_INVALID, "body, header and stream buffer limits must be >= 1024 bytes");
    if (o->api_key && !o->api_key[0]) return flint_err_set(err, FLINT_ERR_INVALID, "the API key is empty");
    if (o->reasoning_parser && strcmp(o->reasoning_parser, "qwen3") && strcmp(o->reasoning_parser, "deepseek_r1"))
        return flint_err_set(err, FLINT_ERR_INVALID, "unknown reasoning parser '%s' (qwen3)", o->reasoning_parser);
    if (o->tool_call_parser && strcmp(o->tool_call_parser, "hermes") && strcmp(o->tool_call_parser, "qwen3"))
        return flint_err_set(err, FLINT_ERR_INVALID, "unknown tool call parser '%s' (hermes)", o->tool_call_parser);
    flint_chat_format f;
    if (o->chat_template && flint_chat_parse_format(o->chat_template, &f))
        return flint_err_set(err, FLINT_ERR_INVALID, "unknown chat template '%s' (chatml, qwen3, llama3, llama2)",
                             o->chat_template);
    return 0;
}

flint_server *flint_server_open(const flint_server_options *opts, flint_err *err) {
    if (check_options(opts, err)) return NULL;
    flint_server *s = flint_xcalloc(1, sizeof *s);
    s->o = *opts;
    pthread_mutex_init(&s->in_mu, NULL);
    pthread_cond_init(&s->in_cv, NULL);
    pthread_mutex_init(&s->out_mu, NULL);
    pthread_mutex_init(&s->snap_mu, NULL);
    atomic_init(&s->state, FLINT_SRV_LOADING);
    s->served_name = flint_xstrdup(opts->served_model_name ? opts->served_model_name : opts->model_dir);
    s->t_start = (double)time(NULL);
    flint_server_metrics_init(s);

    flint_engine_options_default(&s->eo);
    s->eo.model_dir = s->o.model_dir;
    s->eo.max_seqs = s->o.max_num_seqs;
    s->eo.max_model_len = s->o.max_model_len;
    s->eo.prefill_chunk = s->o.prefill_chunk;
    s->eo.enable_prefix_caching = s->o.enable_prefix_caching;
    /* Every core but one by default: the loop thread needs one, and OpenMP teams that share their
     * cores with it spin in barriers (measured: 7x slower steps on a 2-core machine). */
    s->eo.n_threads = s->o.threads;
    s->eo.device = s->o.device;
    s->eo.enforce_eager = s->o.enforce_eager;
    if (s->o.cuda_graph_sizes && flint_graph_sizes_parse(s->o.cuda_graph_sizes, &s->eo, err)) goto fail;
    s->eo.tensor_parallel_size = s->o.tensor_parallel_size;
    s->eo.gpu_memory_utilization = s->o.gpu_memory_utilization;
    if (s->eo.n_threads == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        s->eo.n_threads = n > 2 ? (int)n - 1 : 1;
    }
    if (s->o.spec_config && flint_spec_config_parse(s->o.spec_config, &s->eo, &s->drafter_dir_owned, err)) goto fail;

    /* event_active() from the engine thread needs libevent's locking, set before the base exists */
    if (evthread_use_pthreads()) {
        flint_err_set(err, FLINT_ERR_INTERNAL, "libevent: no pthreads support");
        goto fail;
    }
    signal(SIGPIPE, SIG_IGN); /* a client that vanished must not kill the server on write */
    if (!(s->base = event_base_new()) || !(s->http = evhttp_new(s->base))) {
        flint_err_set(err, FLINT_ERR_INTERNAL, "libevent: cannot create the event loop");
        goto fail;
    }
    evhttp_set_timeout(s->http, s->o.http_timeout_s);
    evhttp_set_max_headers_size(s->http, (ev_ssize_t)s->o.max_header_bytes);
    evhttp_set_max_body_size(s->http, (ev_ssize_t)s->o.max_body_bytes);
    evhttp_set_allowed_methods(s->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST);
    /* over-limit bodies: read the rest before closing, so the client sees the 413 */
    evhttp_set_flags(s->http, EVHTTP_SERVER_LINGERING_CLOSE);
    evhttp_set_gencb(s->http, flint_server_http_request, s);
    evhttp_set_bevcb(s->http, flint_server_http_bev, s);
    if (!(s->bound = evhttp_bind_socket_with_handle(s->http, s->o.host, (ev_uint16_t)s->o.port))) {
        flint_err_set(err, FLINT_ERR_IO, "cannot listen on %s:%d (address in use, or not an address of this host)",
                      s->o.host, s->o.port);
        goto fail;
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    s->port = s->o.port;
    if (getsockname(evhttp_bound_socket_get_fd(s->bound), (struct sockaddr *)&ss, &sl) == 0)
        s->port = ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
                                           : ntohs(((struct sockaddr_in *)&ss)->sin_port);
    s->wake_ev = event_new(s->base, -1, 0, on_wake, s);
    s->stop_ev = event_new(s->base, -1, 0, on_stop, s);
    s->tick_ev = event_new(s->base, -1, EV_PERSIST, on_tick, s);
    s->grace_ev = evtimer_new(s->base, on_grace, s);
    s->sigterm_ev = evsignal_new(s->base, SIGTERM, on_signal, s);
    s->sigint_ev = evsignal_new(s->base, SIGINT, on_signal, s);
    if (!s->wake_ev || !s->stop_ev || !s->tick_ev || !s->grace_ev || !s->sigterm_ev || !s->sigint_ev) {
        flint_err_set(err, FLINT_ERR_INTERNAL, "libevent: cannot create events");
        goto fail;
    }
    struct timeval tick = {0, 100000};
    event_add(s->tick_ev, &tick);
    event_add(s->sigterm_ev, NULL);
    event_add(s->sigint_ev, NULL);
    flint_log_info("listening on http://%s:%d (loading %s)", s->o.host, s->port, s->o.model_dir);
    if (flint_server_engine_start(s, err)) goto fail;
    return s;
fail:
    flint_server_close(s);
    return NULL;
}

int flint_server_run(flint_server *s, flint_err *err) {
    event_base_dispatch(s->base);
    flint_server_engine_stop(s);
    if (s->exit_status) {
        if (err) *err = s->load_err;
        return -1;
    }
    flint_log_info("shutdown complete");
    return 0;
}

void flint_server_stop(flint_server *s) { event_active(s->stop_ev, 0, 0); }

int flint_server_port(const flint_server *s) { return s->port; }

void flint_server_close(flint_server *s) {
    if (!s) return;
    flint_server_engine_stop(s);
    /* jobs still listed here own libevent requests that evhttp_free frees with its connections */
    while (s->jobs) {
        flint_server_job *j = s->jobs;
        s->jobs = j->next;
        flint_server_job_free(j);
    }
    if (s->http) evhttp_free(s->http);
    struct event *evs[] = {s->wake_ev, s->stop_ev, s->tick_ev, s->grace_ev, s->sigterm_ev, s->sigint_ev};
    for (size_t i = 0; i < sizeof evs / sizeof evs[0]; i++)
        if (evs[i]) event_free(evs[i]);
    if (s->base) event_base_free(s->base);
    flint_engine_close(s->engine);
    free(s->drafter_dir_owned);
    free(s->served_name);
    free(s->batch);
    pthread_mutex_destroy(&s->in_mu);
    pthread_cond_destroy(&s->in_cv);
    pthread_mutex_destroy(&s->out_mu);
    pthread_mutex_destroy(&s->snap_mu);
    free(s);
}
