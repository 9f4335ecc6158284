/* `flint generate`: one prompt through the engine (verifier/engine.h), with speculative decoding
 * when --speculative-config names a drafter. Generated text goes to stdout as it is produced (or
 * one JSON object with --json); timings and acceptance statistics go to stderr. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "core/chat.h"
#include "core/log.h"
#include "core/tokenizer.h"
#include "target/target.h"
#include "sampler/sampler.h"
#include "verifier/engine.h"

#ifndef FLINT_DEFAULT_MODEL
#define FLINT_DEFAULT_MODEL "models/flint-tiny"
#endif

typedef struct gen_options {
    const char *model_dir;
    const char *prompt;
    const char *system;
    int chat;
    const char *chat_template; /* override: chatml | qwen3 | llama3 | llama2 */
    const char *spec_config;   /* vLLM-style JSON */
    int max_tokens;
    int ignore_eos;
    int json;
    int threads;
    int device;
    int enforce_eager;
    const char *cuda_graph_sizes;
    int tensor_parallel_size;
    flint_sampling_params sp;
} gen_options;

static void usage(FILE *f) {
    fprintf(f,
            "usage: flint generate [MODEL_DIR] --prompt TEXT [options]\n"
            "\n"
            "MODEL_DIR defaults to " FLINT_DEFAULT_MODEL ".\n"
            "  --prompt TEXT          the prompt (raw text, or the user message with --chat)\n"
            "  --speculative-config J {\"model\": DRAFTER_DIR, \"method\": \"dspark\", \"num_speculative_tokens\": K,\n"
            "                         \"draft_sample_method\": \"probabilistic\" | \"greedy\"}\n"
            "  --chat                 wrap the prompt in the model's chat template\n"
            "  --system TEXT          a system message (with --chat)\n"
            "  --chat-template NAME   force chatml | qwen3 | llama3 | llama2\n"
            "  --max-tokens N         tokens to generate (default 128)\n"
            "  --temperature T        0 = greedy (default 0.8)\n"
            "  --top-p P              nucleus sampling (default 1.0 = off)\n"
            "  --top-k K              keep the K most likely tokens (default 0 = off)\n"
            "  --min-p P              drop tokens below P x the top probability (default 0 = off)\n"
            "  --seed S               RNG seed (default 0); the output depends only on it\n"
            "  --ignore-eos           keep generating past end-of-sequence tokens\n"
            "  --threads N            CPU threads (default: every core)\n"
            "  --device D             cpu (default) or cuda: where the target model runs\n"
            "  --enforce-eager        cuda: launch every kernel instead of replaying captured CUDA graphs\n"
            "  --cuda-graph-sizes L   cuda: row counts the captured forwards are padded to, e.g. 1,2,4,8\n"
            "  --tensor-parallel-size N  cuda: shard the target over GPUs 0..N-1 through NCCL (default 1)\n"
            "  --json                 print one JSON object with text, token ids and timings\n"
            "  --log-level L          error | warn | info | debug\n");
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int parse(int argc, char **argv, gen_options *o) {
    const char *cmd = "generate";
    int have_model = 0;
    memset(o, 0, sizeof *o);
    o->model_dir = FLINT_DEFAULT_MODEL;
    o->max_tokens = 128;
    flint_sampling_params_default(&o->sp);
    o->sp.temperature = 0.8f;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            exit(0);
        } else if (!strcmp(a, "--chat")) o->chat = 1;
        else if (!strcmp(a, "--enforce-eager")) o->enforce_eager = 1;
        else if (!strcmp(a, "--json")) o->json = 1;
        else if (!strcmp(a, "--ignore-eos")) o->ignore_eos = 1;
        else if (a[0] == '-' && a[1] == '-') {
            if (!(v = flint_arg_value(cmd, argc, argv, &i))) return -1;
            if (!strcmp(a, "--prompt")) o->prompt = v;
            else if (!strcmp(a, "--system")) o->system = v;
            else if (!strcmp(a, "--chat-template")) o->chat_template = v;
            else if (!strcmp(a, "--speculative-config")) o->spec_config = v;
            else if (!strcmp(a, "--max-tokens")) {
                if (flint_arg_int(cmd, a, v, 1, 1 << 24, &o->max_tokens)) return -1;
            } else if (!strcmp(a, "--temperature")) {
                if (flint_arg_float(cmd, a, v, 0, 100, &o->sp.temperature)) return -1;
            } else if (!strcmp(a, "--top-p")) {
                if (flint_arg_float(cmd, a, v, 1e-9, 1, &o->sp.top_p)) return -1;
            } else if (!strcmp(a, "--top-k")) {
                if (flint_arg_int(cmd, a, v, 0, 1 << 30, &o->sp.top_k)) return -1;
            } else if (!strcmp(a, "--min-p")) {
                if (flint_arg_float(cmd, a, v, 0, 1, &o->sp.min_p)) return -1;
            } else if (!strcmp(a, "--seed")) {
                if (flint_arg_u64(cmd, a, v, &o->sp.seed)) return -1;
            } else if (!strcmp(a, "--threads")) {
                if (flint_arg_int(cmd, a, v, 0, 4096, &o->threads)) return -1;
            } else if (!strcmp(a, "--tensor-parallel-size")) {
                if (flint_arg_int(cmd, a, v, 1, 64, &o->tensor_parallel_size)) return -1;
            } else if (!strcmp(a, "--cuda-graph-sizes")) {
                if (flint_arg_graph_sizes(cmd, v)) return -1;
                o->cuda_graph_sizes = v;
            } else if (!strcmp(a, "--device")) {
                if (strcmp(v, "cpu") && strcmp(v, "cuda")) {
                    fprintf(stderr, "flint generate: --device must be cpu or cuda (got '%s')\n", v);
                    return -1;
                }
                o->device = !strcmp(v, "cuda") ? FLINT_TARGET_CUDA : FLINT_TARGET_CPU;
            } else if (!strcmp(a, "--log-level")) {
                flint_log_level lv;
                if (flint_log_parse_level(v, &lv)) {
                    fprintf(stderr, "flint generate: unknown log level '%s'\n", v);
                    return -1;
                }
                flint_log_set_level(lv);
            } else {
                fprintf(stderr, "flint generate: unknown option %s\n", a);
                return -1;
            }
        } else if (!have_model) {
            o->model_dir = a;
            have_model = 1;
        } else {
            fprintf(stderr, "flint generate: unexpected argument '%s'\n", a);
            return -1;
        }
    }
    if (!o->prompt) {
        fprintf(stderr, "flint generate: --prompt is required\n");
        return -1;
    }
    if (o->system && !o->chat) {
        fprintf(stderr, "flint generate: --system needs --chat\n");
        return -1;
    }
    return 0;
}

/* Prompt text -> ids: through the chat template with --chat (special tokens already in the
 * text), else with the tokenizer's own special tokens (e.g. BOS). */
static int encode_prompt(const gen_options *o, const flint_tokenizer *tok, int32_t **ids, int *n, flint_err *err) {
    if (!o->chat) return flint_tokenizer_encode(tok, o->prompt, strlen(o->prompt), 1, ids, n, err);
    flint_chat_format f = flint_chat_detect(flint_tokenizer_chat_template(tok));
    if (o->chat_template && flint_chat_parse_format(o->chat_template, &f))
        return flint_err_set(err, FLINT_ERR_INVALID, "unknown chat template '%s' (chatml, qwen3, llama3, llama2)",
                             o->chat_template);
    flint_chat_msg msgs[2];
    int nm = 0;
    if (o->system) msgs[nm++] = (flint_chat_msg){"system", o->system};
    msgs[nm++] = (flint_chat_msg){"user", o->prompt};
    int32_t bos = flint_tokenizer_bos_id(tok), eos = flint_tokenizer_eos_id(tok);
    char *text = flint_chat_render(f, msgs, nm, NULL, bos >= 0 ? flint_tokenizer_token_str(tok, bos) : NULL,
                                   eos >= 0 ? flint_tokenizer_token_str(tok, eos) : NULL, err);
    if (!text) return -1;
    int rc = flint_tokenizer_encode(tok, text, strlen(text), 0, ids, n, err);
    free(text);
    return rc;
}


int flint_cmd_generate(int argc, char **argv) {
    gen_options o;
    if (parse(argc, argv, &o)) {
        fprintf(stderr, "(flint generate --help lists the options)\n");
        return 2;
    }
    flint_err err = {0};
    int rc = 1;
    flint_engine *e = NULL;
    char *drafter_dir = NULL, *text = NULL;
    int32_t *prompt = NULL, *out_ids = NULL;
    size_t text_len = 0;
    int n_prompt = 0, n_out = 0;
    const char *finish = "length";
    flint_spec_stats stats = {0};

    double t0 = now_ms();
    flint_engine_options eo;
    flint_engine_options_default(&eo);
    eo.model_dir = o.model_dir;
    eo.max_seqs = 1;
    eo.n_threads = o.threads;
    eo.device = o.device;
    eo.enforce_eager = o.enforce_eager;
    eo.tensor_parallel_size = o.tensor_parallel_size;
    if (o.cuda_graph_sizes && flint_graph_sizes_parse(o.cuda_graph_sizes, &eo, &err)) goto fail;
    if (o.spec_config && flint_spec_config_parse(o.spec_config, &eo, &drafter_dir, &err)) goto fail;
    if (!(e = flint_engine_open(&eo, &err))) goto fail;
    const flint_tokenizer *tok = flint_engine_tokenizer(e);
    if (!tok) {
        flint_err_set(&err, FLINT_ERR_INVALID, "%s has no tokenizer.json", o.model_dir);
        goto fail;
    }
    if (encode_prompt(&o, tok, &prompt, &n_prompt, &err)) goto fail;
    if (n_prompt == 0) {
        flint_err_set(&err, FLINT_ERR_INVALID, "the prompt encodes to no tokens and the model adds no BOS");
        goto fail;
    }
    if ((long)n_prompt + o.max_tokens > flint_engine_max_model_len(e)) {
        flint_err_set(&err, FLINT_ERR_INVALID,
                      "prompt (%d tokens) + --max-tokens (%d) exceeds the model's context of %d tokens", n_prompt,
                      o.max_tokens, flint_engine_max_model_len(e));
        goto fail;
    }
    flint_request_params rp;
    flint_request_params_default(&rp);
    rp.sampling = o.sp;
    rp.max_tokens = o.max_tokens;
    rp.ignore_eos = o.ignore_eos;
    rp.fixed_draft = 1; /* the output depends on --seed alone, as the help says */
    if (flint_engine_add(e, prompt, n_prompt, &rp, &err) < 0) goto fail;
    out_ids = flint_xmalloc(sizeof(int32_t) * (size_t)o.max_tokens);
    double t_load = now_ms(), t_first = 0;
    while (flint_engine_active(e) > 0) {
        const flint_step_event *ev;
        int n;
        if (flint_engine_step(e, &ev, &n, &err)) goto fail;
        for (int i = 0; i < n; i++) {
            if (n_out == 0 && ev[i].n_tokens > 0) t_first = now_ms();
            memcpy(out_ids + n_out, ev[i].tokens, sizeof(int32_t) * (size_t)ev[i].n_tokens);
            n_out += ev[i].n_tokens;
            if (o.json) {
                text = flint_xrealloc(text, text_len + ev[i].text_len + 1);
                memcpy(text + text_len, ev[i].text, ev[i].text_len);
                text_len += ev[i].text_len;
                text[text_len] = 0;
            } else {
                fwrite(ev[i].text, 1, ev[i].text_len, stdout);
                fflush(stdout);
            }
            if (ev[i].finish) {
                finish = flint_finish_reason_name(ev[i].finish);
                stats = *ev[i].stats;
            }
        }
    }
    if (!o.json) fputc('\n', stdout);
    double t_end = now_ms();
    double prefill_ms = t_first - t_load, decode_ms = t_end - t_first;
    /* the first token comes from the prefill; the rest from decode or speculative steps */
    double decode_tps = n_out > 1 && decode_ms > 0 ? (n_out - 1) / (decode_ms / 1e3) : 0;
    int K = flint_engine_num_speculative_tokens(e);
    if (o.json) {
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "text", text ? text : "");
        cJSON_AddNumberToObject(j, "prompt_tokens", n_prompt);
        cJSON_AddNumberToObject(j, "completion_tokens", n_out);
        cJSON *ids = cJSON_AddArrayToObject(j, "token_ids");
        for (int i = 0; i < n_out; i++) cJSON_AddItemToArray(ids, cJSON_CreateNumber(out_ids[i]));
        cJSON_AddStringToObject(j, "finish_reason", finish);
        cJSON_AddNumberToObject(j, "seed", (double)o.sp.seed);
        cJSON *tm = cJSON_AddObjectToObject(j, "timings");
        cJSON_AddNumberToObject(tm, "load_ms", t_load - t0);
        cJSON_AddNumberToObject(tm, "prefill_ms", prefill_ms);
        cJSON_AddNumberToObject(tm, "decode_ms", decode_ms);
        cJSON_AddNumberToObject(tm, "prefill_tokens_per_s", prefill_ms > 0 ? n_prompt / (prefill_ms / 1e3) : 0);
        cJSON_AddNumberToObject(tm, "decode_tokens_per_s", decode_tps);
        if (flint_engine_has_drafter(e)) cJSON_AddItemToObject(j, "speculative", flint_spec_stats_json(&stats, K));
        char *s = cJSON_PrintUnformatted(j);
        puts(s);
        free(s);
        cJSON_Delete(j);
    }
    fprintf(stderr, "flint: prompt %d tokens in %.1f ms (%.1f tok/s); generated %d tokens, %.1f tok/s (%s)\n",
            n_prompt, prefill_ms, prefill_ms > 0 ? n_prompt / (prefill_ms / 1e3) : 0, n_out, decode_tps, finish);
    if (flint_engine_has_drafter(e)) {
        fprintf(stderr, "flint: speculative K=%d: %lld steps, mean acceptance length %.3f, draft acceptance rate "
                        "%.3f, accepted per position", K, (long long)stats.steps, flint_spec_stats_mean_al(&stats),
                flint_spec_stats_acceptance_rate(&stats));
        for (int i = 0; i < K; i++)
            fprintf(stderr, " %.3f", stats.steps ? (double)stats.accepted_per_pos[i] / (double)stats.steps : 0.0);
        fputc('\n', stderr);
    }
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "flint generate: %s\n", err.msg);
done:
    free(text);
    free(out_ids);
    free(prompt);
    free(drafter_dir);
    flint_engine_close(e);
    return rc;
}
