/* The HTTP server (DESIGN.md sections 2 and 7): an OpenAI-compatible API over libevent's evhttp,
 * streaming with SSE, Prometheus /metrics, and the speculative statistics of every request.
 *
 * Two threads own everything: the libevent loop thread owns every evhttp object (sockets,
 * requests, replies); the engine thread owns the engine (verifier/engine.h) and runs continuous
 * batching. Requests cross to the engine through a mutexed queue; emitted text comes back through
 * a second one plus an event_active() wake-up of the loop. The engine never touches a socket, so
 * a slow client can never stall the batch.
 *
 * The command (`flint serve`) fills the options, opens the server and runs it until SIGTERM or
 * SIGINT; every default lives in flint_server_options_default. */
#ifndef FLINT_SERVER_SERVER_H
#define FLINT_SERVER_SERVER_H

#include <stddef.h>

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct flint_server_options {
    const char *model_dir;
    const char *spec_config;       /* --speculative-config JSON (vLLM's shape); NULL: no drafter */
    const char *host;              /* "127.0.0.1" */
    int port;                      /* 8000; 0 picks a free port (logged) */
    const char *served_model_name; /* NULL: model_dir as given (as vLLM does) */
    const char *api_key;           /* NULL: no authentication on /v1/... */
    const char *chat_template;     /* NULL: detect from tokenizer_config.json; else chatml|qwen3|llama3|llama2 */
    const char *reasoning_parser;  /* NULL | "qwen3": <think>...</think> becomes message.reasoning_content */
    const char *tool_call_parser;  /* NULL | "hermes": requests may carry `tools`; <tool_call> becomes tool_calls */
    int max_num_seqs;              /* engine slots: requests decoded together (64) */
    int max_model_len;             /* 0: the model's context */
    int prefill_chunk;             /* prompt rows per engine step (512) */
    int enable_prefix_caching;     /* reuse cached KV blocks of shared prompt prefixes (1) */
    int max_queue;                 /* requests waiting in front of the slots before 429 (256) */
    int threads;                   /* engine CPU threads; 0 = every core but one (the loop's) */
    int device;                    /* where the target runs: FLINT_TARGET_CPU (0) or FLINT_TARGET_CUDA (1) */
    int enforce_eager;             /* CUDA: no captured graphs */
    const char *cuda_graph_sizes;  /* CUDA: the captured forwards' row counts, "1,2,4,..." (NULL: default) */
    int tensor_parallel_size;      /* CUDA: shard the target over this many GPUs (NCCL); 1 = one GPU */
    float gpu_memory_utilization;  /* CUDA: KV pool sized to this fraction of the device (0 = default pool) */
    int stream_token_by_token;     /* one SSE event per token even when a step emits several (0) */
    int http_timeout_s;            /* a connection silent (reading) or stuck (writing) this long is closed (30) */
    size_t max_body_bytes;         /* request body limit, 413 above (8 MiB) */
    size_t max_header_bytes;       /* request header limit (16 KiB) */
    size_t stream_buffer_bytes;    /* unsent bytes a stream may queue before it is cancelled (1 MiB) */
    double log_interval_s;         /* periodic speculative summary line at info level (10; 0 = off) */
    double shutdown_grace_s;       /* SIGTERM: in-flight requests may finish for this long, then are cancelled (30) */
    int debug_load_delay_ms;       /* tests only: hold the engine load this long (checks 503 before ready) */
} flint_server_options;

void flint_server_options_default(flint_server_options *o);

typedef struct flint_server flint_server;

/* Bind the socket and start the engine thread, which loads the model (until it has, /health and
 * /v1/... answer 503). Returns NULL with err when the socket cannot be bound or the options are
 * invalid. */
flint_server *flint_server_open(const flint_server_options *o, flint_err *err);
/* Run the event loop until SIGTERM/SIGINT (stop accepting, let in-flight requests finish within
 * the grace period, cancel the rest, flush) or a model load failure. Returns 0 after a clean
 * shutdown, -1 with err when the model could not be loaded or the engine failed. */
int flint_server_run(flint_server *s, flint_err *err);
/* Ask a running server to shut down as on SIGTERM; safe from any thread. */
void flint_server_stop(flint_server *s);
/* The port actually bound (useful with port 0). */
int flint_server_port(const flint_server *s);
void flint_server_close(flint_server *s);

#ifdef __cplusplus
}
#endif
#endif
