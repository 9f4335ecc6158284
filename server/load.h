/* `flint load`: an HTTP load generator for an OpenAI-compatible server (flint's or any other),
 * in the manner of `vllm bench serve`: real prompts (ShareGPT, Spec-Bench or any file of prompts),
 * a closed loop of N concurrent clients or an open loop of Poisson arrivals, and per request the
 * time to first token, time per output token, inter-token latency (per SSE chunk, and per token
 * from the running usage counts), end-to-end latency, goodput under SLOs, and the acceptance of
 * speculative decoding from the deltas of the server's /metrics counters. Every stream is also
 * checked for well-formed SSE (one finish_reason, a usage chunk, [DONE] last, nothing after it),
 * so the generator doubles as a protocol test under load.
 *
 * It lives in server/ beside the server it exercises because it shares its libevent linkage; it
 * uses only HTTP and never the engine. One thread runs one libevent loop for every connection. */
#ifndef FLINT_SERVER_LOAD_H
#define FLINT_SERVER_LOAD_H

#include <stdint.h>

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct flint_load_options {
    const char *url;            /* http://HOST:PORT */
    const char *dataset;        /* "sharegpt" | "spec_bench" (looked up in data_dir) | a file path */
    const char *data_dir;       /* where named datasets live (default: the source tree's evals/data) */
    const char *endpoint;       /* "chat" (default) | "completions" */
    const char *model;          /* NULL: the first of GET /v1/models */
    const char *api_key;        /* sent as Authorization: Bearer */
    int concurrency;            /* closed loop: clients each sending one request after another (16) */
    double request_rate;        /* > 0: open loop, Poisson arrivals per second (concurrency then caps in-flight) */
    double duration_s;          /* stop sending after this long, then wait for the last replies (60) */
    int num_requests;           /* > 0: stop after this many requests instead (or whichever is first) */
    int max_tokens;             /* per request (128) */
    int max_prompt_chars;       /* skip longer prompts; 0 = keep all (default 0) */
    float temperature;          /* 0 (greedy) */
    uint64_t seed;              /* request i is sent with seed + i */
    int ignore_eos;             /* ask for exactly max_tokens (vLLM's extension) */
    int stream;                 /* 1: SSE (default); 0: plain JSON replies */
    double slo_ttft_ms, slo_tpot_ms, slo_e2el_ms; /* goodput: a request counts when every set SLO holds */
    double timeout_s;           /* per request (600) */
    const char *output;         /* write the report as JSON here (NULL: stdout table only) */
    const char *save_requests;  /* write one JSON line per request (body sent, text received) */
    int quiet;                  /* no table on stdout */
} flint_load_options;

void flint_load_options_default(flint_load_options *o);

typedef struct flint_load_result {
    int completed, failed;
} flint_load_result;

/* Run the load and report. Returns 0 when the run happened (whatever the requests did; see
 * res), -1 with err when it could not start (no server, no prompts, bad options). */
int flint_load_run(const flint_load_options *o, flint_load_result *res, flint_err *err);

#ifdef __cplusplus
}
#endif
#endif
