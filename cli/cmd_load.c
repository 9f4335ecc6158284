/* `flint load`: the HTTP load generator (server/load.h) against a running server. Prints a table,
 * writes the JSON report with --output. Exit status: 0 when every request succeeded, 1 when the
 * run could not start or some request failed (the report says which and why), 2 for bad usage. */
#ifdef FLINT_HAVE_server

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "core/log.h"
#include "server/load.h"

static void usage(FILE *f, const flint_load_options *d) {
    fprintf(f,
            "usage: flint load --url URL [options]\n"
            "\n"
            "  --url URL               the server (default %s)\n"
            "  --dataset D             sharegpt | spec_bench (from %s) or a file: a JSON array or JSON\n"
            "                          lines of ShareGPT / Spec-Bench records, {\"prompt\": ...} or strings\n"
            "                          (default %s)\n"
            "  --endpoint E            chat | completions (default %s)\n"
            "  --model NAME            the model field (default: the first of GET /v1/models)\n"
            "  --concurrency N         closed loop: N clients, each sending its next request on a reply (default %d);\n"
            "                          with --request-rate, the cap on requests in flight\n"
            "  --request-rate R        open loop: Poisson arrivals, R per second\n"
            "  --duration S            send for S seconds, then wait for the replies (default %.0f)\n"
            "  --num-requests N        stop after N requests (or at --duration, whichever is first)\n"
            "  --max-tokens N          per request (default %d)\n"
            "  --max-prompt-chars N    skip prompts longer than N characters (default: keep all)\n"
            "  --temperature T         (default 0); request i is sent with seed S + i (a flint server\n"
            "                          drafts seeded sampled requests at its fixed K: reproducible)\n"
            "  --seed S                (default 0)\n"
            "  --ignore-eos            ask for exactly --max-tokens tokens\n"
            "  --no-stream             plain JSON replies instead of SSE\n"
            "  --goodput SLOS          e.g. ttft:500,tpot:50,e2el:10000 (milliseconds)\n"
            "  --api-key KEY           sent as Authorization: Bearer KEY\n"
            "  --timeout S             per request (default %.0f)\n"
            "  --output FILE           the report as JSON\n"
            "  --save-requests FILE    one JSON line per request: body sent, text received, timings\n"
            "  --quiet                 no table\n",
            d->url, d->data_dir, d->dataset, d->endpoint, d->concurrency, d->duration_s, d->max_tokens,
            d->timeout_s);
}

static int parse_goodput(const char *v, flint_load_options *o) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", v);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        char *colon = strchr(tok, ':'), *end;
        if (!colon) return -1;
        *colon = 0;
        double ms = strtod(colon + 1, &end);
        if (*end || ms <= 0) return -1;
        if (!strcmp(tok, "ttft")) o->slo_ttft_ms = ms;
        else if (!strcmp(tok, "tpot")) o->slo_tpot_ms = ms;
        else if (!strcmp(tok, "e2el")) o->slo_e2el_ms = ms;
        else return -1;
    }
    return 0;
}

int flint_cmd_load(int argc, char **argv) {
    const char *cmd = "load";
    flint_load_options o;
    flint_load_options_default(&o);
    flint_log_set_level(FLINT_LOG_INFO);
    float f;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout, &o);
            return 0;
        } else if (!strcmp(a, "--ignore-eos")) o.ignore_eos = 1;
        else if (!strcmp(a, "--no-stream")) o.stream = 0;
        else if (!strcmp(a, "--quiet")) o.quiet = 1;
        else if (a[0] == '-' && a[1] == '-') {
            if (!(v = flint_arg_value(cmd, argc, argv, &i))) goto bad;
            if (!strcmp(a, "--url")) o.url = v;
            else if (!strcmp(a, "--dataset")) o.dataset = v;
            else if (!strcmp(a, "--endpoint")) o.endpoint = v;
            else if (!strcmp(a, "--model")) o.model = v;
            else if (!strcmp(a, "--api-key")) o.api_key = v;
            else if (!strcmp(a, "--output")) o.output = v;
            else if (!strcmp(a, "--save-requests")) o.save_requests = v;
            else if (!strcmp(a, "--concurrency")) {
                if (flint_arg_int(cmd, a, v, 1, 100000, &o.concurrency)) goto bad;
            } else if (!strcmp(a, "--request-rate")) {
                if (flint_arg_float(cmd, a, v, 1e-6, 1e6, &f)) goto bad;
                o.request_rate = f;
            } else if (!strcmp(a, "--duration")) {
                if (flint_arg_float(cmd, a, v, 0.001, 1e6, &f)) goto bad;
                o.duration_s = f;
            } else if (!strcmp(a, "--num-requests")) {
                if (flint_arg_int(cmd, a, v, 1, 1 << 30, &o.num_requests)) goto bad;
            } else if (!strcmp(a, "--max-tokens")) {
                if (flint_arg_int(cmd, a, v, 1, 1 << 24, &o.max_tokens)) goto bad;
            } else if (!strcmp(a, "--max-prompt-chars")) {
                if (flint_arg_int(cmd, a, v, 0, 1 << 30, &o.max_prompt_chars)) goto bad;
            } else if (!strcmp(a, "--temperature")) {
                if (flint_arg_float(cmd, a, v, 0, 100, &o.temperature)) goto bad;
            } else if (!strcmp(a, "--seed")) {
                if (flint_arg_u64(cmd, a, v, &o.seed)) goto bad;
            } else if (!strcmp(a, "--timeout")) {
                if (flint_arg_float(cmd, a, v, 0.001, 1e6, &f)) goto bad;
                o.timeout_s = f;
            } else if (!strcmp(a, "--goodput")) {
                if (parse_goodput(v, &o)) {
                    fprintf(stderr, "flint load: --goodput takes ttft:MS,tpot:MS,e2el:MS (any of them)\n");
                    goto bad;
                }
            } else {
                fprintf(stderr, "flint load: unknown option %s\n", a);
                goto bad;
            }
        } else {
            fprintf(stderr, "flint load: unexpected argument '%s'\n", a);
            goto bad;
        }
    }
    flint_err err = {0};
    flint_load_result res;
    if (flint_load_run(&o, &res, &err)) {
        fprintf(stderr, "flint load: %s\n", err.msg);
        return 1;
    }
    return res.failed ? 1 : 0;
bad:
    fprintf(stderr, "(flint load --help lists the options)\n");
    return 2;
}

#endif /* FLINT_HAVE_server */
