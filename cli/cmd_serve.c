/* `flint serve`: the OpenAI-compatible HTTP server (server/server.h). Parses the flags into
 * flint_server_options (whose defaults live in server.c), runs the server until SIGTERM/SIGINT and
 * exits 0 after a clean shutdown, 1 when the model cannot be loaded or the socket bound, 2 for bad
 * usage. FLINT_API_KEY is read here as the one environment variable flint knows (the issue asks
 * for it: keys do not belong in process listings); --api-key wins over it. */
#ifdef FLINT_HAVE_server

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "core/json.h"
#include "core/log.h"
#include "server/server.h"

#ifndef FLINT_DEFAULT_MODEL
#define FLINT_DEFAULT_MODEL "models/flint-tiny"
#endif
/* The embedded default drafter sits beside the default model; used only when it exists. */
#define FLINT_DEFAULT_DRAFTER FLINT_DEFAULT_MODEL "-dspark"

static void usage(FILE *f, const flint_server_options *d) {
    fprintf(f,
            "usage: flint serve [MODEL_DIR] [options]\n"
            "\n"
            "Serves the OpenAI API (POST /v1/chat/completions, /v1/completions; GET /v1/models, /health,\n"
            "/metrics) with speculative decoding. MODEL_DIR defaults to " FLINT_DEFAULT_MODEL " (with the drafter\n"
            FLINT_DEFAULT_DRAFTER ", K = 7, when that directory exists).\n"
            "\n"
            "  --speculative-config J   {\"model\": DRAFTER_DIR, \"method\": \"dspark\", \"num_speculative_tokens\": K,\n"
            "                           \"draft_sample_method\": \"probabilistic\" | \"greedy\"}; 'none' = no drafter\n"
            "  --host ADDR              address to listen on (default %s)\n"
            "  --port N                 port (default %d; 0 = any free port, logged)\n"
            "  --served-model-name N    the model name clients use (default: MODEL_DIR as given; flint-tiny for the\n"
            "                           embedded default)\n"
            "  --max-num-seqs N         requests decoded together (default %d)\n"
            "  --max-model-len N        prompt + output limit (default: the model's context)\n"
            "  --prefill-chunk N        prompt tokens prefilled per engine step (default %d)\n"
            "  --no-enable-prefix-caching  recompute every prompt (default: reuse cached KV of shared prefixes)\n"
            "  --max-queue N            requests waiting beyond --max-num-seqs before 429 (default %d)\n"
            "  --api-key KEY            require 'Authorization: Bearer KEY' on /v1/* (or set FLINT_API_KEY)\n"
            "  --chat-template NAME     force chatml | qwen3 | llama3 | llama2 (default: from the tokenizer config)\n"
            "  --reasoning-parser NAME  qwen3: <think>...</think> output becomes message.reasoning_content\n"
            "  --tool-call-parser NAME  hermes: accept `tools`; <tool_call> output becomes message.tool_calls\n"
            "  --stream-token-by-token  one SSE event per token even when a step emits several\n"
            "  --timeout S              close a connection idle for S s while its request is read or its reply\n"
            "                           written (default %d)\n"
            "  --max-body-bytes N       request body limit, 413 above (default %zu)\n"
            "  --max-header-bytes N     request header limit (default %zu)\n"
            "  --stream-buffer-bytes N  unsent bytes a stream may queue before it is cancelled (default %zu)\n"
            "  --shutdown-timeout S     on SIGTERM, time in-flight requests get to finish (default %.0f)\n"
            "  --log-interval S         speculative summary line every S s at info level (default %.0f; 0 = off)\n"
            "  --threads N              engine CPU threads (default: every core but one)\n"
            "  --device D               cpu (default) or cuda: where the target model runs\n"
            "  --gpu-memory-utilization F  cuda: size the KV pool so that F of the GPU's memory is in use (0-1;\n"
            "                           default: room for --max-num-seqs requests of --max-model-len)\n"
            "  --enforce-eager          cuda: launch every kernel instead of replaying captured CUDA graphs\n"
            "  --cuda-graph-sizes LIST  cuda: row counts the captured forwards are padded to, e.g. 1,2,4,8,16,32,64\n"
            "                           (larger forwards run eagerly; default 1..8, 12, 16, 24, ... 512)\n"
            "  --tensor-parallel-size N cuda: shard the target over GPUs 0..N-1 through NCCL (default 1)\n"
            "  --log-level L            error | warn | info | debug (default info)\n",
            d->host, d->port, d->max_num_seqs, d->prefill_chunk, d->max_queue, d->http_timeout_s, d->max_body_bytes,
            d->max_header_bytes, d->stream_buffer_bytes, d->shutdown_grace_s, d->log_interval_s);
}

static int parse_size(const char *flag, const char *v, size_t *out) {
    int n;
    if (flint_arg_int("serve", flag, v, 1024, 1L << 30, &n)) return -1;
    *out = (size_t)n;
    return 0;
}

static int parse(int argc, char **argv, flint_server_options *o, int *have_model) {
    const char *cmd = "serve";
    float f;
    *have_model = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            flint_server_options d;
            flint_server_options_default(&d);
            usage(stdout, &d);
            exit(0);
        } else if (!strcmp(a, "--stream-token-by-token")) {
            o->stream_token_by_token = 1;
        } else if (!strcmp(a, "--no-enable-prefix-caching") || !strcmp(a, "--enable-prefix-caching")) {
            o->enable_prefix_caching = !strcmp(a, "--enable-prefix-caching");
        } else if (!strcmp(a, "--enforce-eager")) {
            o->enforce_eager = 1;
        } else if (!strcmp(a, "--enable-auto-tool-choice")) {
            /* vLLM's flag, accepted for compatible command lines: --tool-call-parser enables tools */
        } else if (a[0] == '-' && a[1] == '-') {
            if (!(v = flint_arg_value(cmd, argc, argv, &i))) return -1;
            if (!strcmp(a, "--speculative-config")) o->spec_config = v;
            else if (!strcmp(a, "--host")) o->host = v;
            else if (!strcmp(a, "--served-model-name")) o->served_model_name = v;
            else if (!strcmp(a, "--api-key")) o->api_key = v;
            else if (!strcmp(a, "--chat-template")) o->chat_template = v;
            else if (!strcmp(a, "--reasoning-parser")) o->reasoning_parser = v;
            else if (!strcmp(a, "--tool-call-parser")) o->tool_call_parser = v;
            else if (!strcmp(a, "--port")) {
                if (flint_arg_int(cmd, a, v, 0, 65535, &o->port)) return -1;
            } else if (!strcmp(a, "--max-num-seqs")) {
                if (flint_arg_int(cmd, a, v, 1, 4096, &o->max_num_seqs)) return -1;
            } else if (!strcmp(a, "--max-model-len")) {
                if (flint_arg_int(cmd, a, v, 2, 1 << 24, &o->max_model_len)) return -1;
            } else if (!strcmp(a, "--prefill-chunk")) {
                if (flint_arg_int(cmd, a, v, 1, 1 << 20, &o->prefill_chunk)) return -1;
            } else if (!strcmp(a, "--max-queue")) {
                if (flint_arg_int(cmd, a, v, 0, 1 << 20, &o->max_queue)) return -1;
            } else if (!strcmp(a, "--timeout")) {
                if (flint_arg_int(cmd, a, v, 1, 86400, &o->http_timeout_s)) return -1;
            } else if (!strcmp(a, "--max-body-bytes")) {
                if (parse_size(a, v, &o->max_body_bytes)) return -1;
            } else if (!strcmp(a, "--max-header-bytes")) {
                if (parse_size(a, v, &o->max_header_bytes)) return -1;
            } else if (!strcmp(a, "--stream-buffer-bytes")) {
                if (parse_size(a, v, &o->stream_buffer_bytes)) return -1;
            } else if (!strcmp(a, "--shutdown-timeout")) {
                if (flint_arg_float(cmd, a, v, 0, 86400, &f)) return -1;
                o->shutdown_grace_s = f;
            } else if (!strcmp(a, "--log-interval")) {
                if (flint_arg_float(cmd, a, v, 0, 86400, &f)) return -1;
                o->log_interval_s = f;
            } else if (!strcmp(a, "--device")) {
                if (strcmp(v, "cpu") && strcmp(v, "cuda")) {
                    fprintf(stderr, "flint serve: --device must be cpu or cuda (got '%s')\n", v);
                    return -1;
                }
                o->device = !strcmp(v, "cuda");
            } else if (!strcmp(a, "--tensor-parallel-size")) {
                if (flint_arg_int(cmd, a, v, 1, 64, &o->tensor_parallel_size)) return -1;
            } else if (!strcmp(a, "--cuda-graph-sizes")) {
                if (flint_arg_graph_sizes(cmd, v)) return -1;
                o->cuda_graph_sizes = v;
            } else if (!strcmp(a, "--gpu-memory-utilization")) {
                if (flint_arg_float(cmd, a, v, 0, 0.99f, &o->gpu_memory_utilization)) return -1;
            } else if (!strcmp(a, "--threads")) {
                if (flint_arg_int(cmd, a, v, 0, 4096, &o->threads)) return -1;
            } else if (!strcmp(a, "--debug-load-delay-ms")) { /* tests: a window in which /health is 503 */
                if (flint_arg_int(cmd, a, v, 0, 600000, &o->debug_load_delay_ms)) return -1;
            } else if (!strcmp(a, "--log-level")) {
                flint_log_level lv;
                if (flint_log_parse_level(v, &lv)) {
                    fprintf(stderr, "flint serve: unknown log level '%s'\n", v);
                    return -1;
                }
                flint_log_set_level(lv);
            } else {
                fprintf(stderr, "flint serve: unknown option %s\n", a);
                return -1;
            }
        } else if (!*have_model) {
            o->model_dir = a;
            *have_model = 1;
        } else {
            fprintf(stderr, "flint serve: unexpected argument '%s'\n", a);
            return -1;
        }
    }
    return 0;
}

int flint_cmd_serve(int argc, char **argv) {
    flint_server_options o;
    flint_server_options_default(&o);
    o.model_dir = FLINT_DEFAULT_MODEL;
    flint_log_set_level(FLINT_LOG_INFO); /* one line per request is part of the contract */
    int have_model;
    if (parse(argc, argv, &o, &have_model)) {
        fprintf(stderr, "(flint serve --help lists the options)\n");
        return 2;
    }
    const char *env_key = getenv("FLINT_API_KEY");
    if (!o.api_key && env_key && env_key[0]) o.api_key = env_key;
    char default_spec[1024];
    if (o.spec_config && !strcmp(o.spec_config, "none")) {
        o.spec_config = NULL;
    } else if (!o.spec_config && !have_model && flint_file_exists(FLINT_DEFAULT_DRAFTER "/config.json")) {
        snprintf(default_spec, sizeof default_spec,
                 "{\"model\": \"%s\", \"method\": \"dspark\", \"num_speculative_tokens\": 7, "
                 "\"draft_sample_method\": \"probabilistic\"}", FLINT_DEFAULT_DRAFTER);
        o.spec_config = default_spec;
    }
    /* the embedded default answers to its short name, not to the build tree's absolute path */
    if (!have_model && !o.served_model_name) o.served_model_name = "flint-tiny";
    flint_err err = {0};
    flint_server *s = flint_server_open(&o, &err);
    if (!s) {
        fprintf(stderr, "flint serve: %s\n", err.msg);
        return 1;
    }
    int rc = flint_server_run(s, &err);
    flint_server_close(s);
    if (rc) {
        fprintf(stderr, "flint serve: %s\n", err.msg);
        return 1;
    }
    return 0;
}

#endif /* FLINT_HAVE_server */
