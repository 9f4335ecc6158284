/* `flint generate`: one prompt through the target on the CPU backend, token by token through the
 * paged KV cache. Generated text goes to stdout as it is produced (or one JSON object with
 * --json); timings go to stderr. Speculative decoding arrives with verifier/engine.h; until then
 * this is the plain target-only loop that the speculative path must equal. */
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
#include "sampler/sampler.h"
#include "target/target.h"

#ifndef FLINT_DEFAULT_MODEL
#define FLINT_DEFAULT_MODEL "models/flint-tiny"
#endif

typedef struct gen_options {
    const char *model_dir;
    const char *prompt;
    const char *system;
    int chat;
    const char *chat_template; /* override: chatml | qwen3 | llama3 | llama2 */
    int max_tokens;
    int ignore_eos;
    int json;
    int threads;
    flint_sampling_params sp;
} gen_options;

static void usage(FILE *f) {
    fprintf(f,
            "usage: flint generate [MODEL_DIR] --prompt TEXT [options]\n"
            "\n"
            "MODEL_DIR defaults to " FLINT_DEFAULT_MODEL ".\n"
            "  --prompt TEXT          the prompt (raw text, or the user message with --chat)\n"
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
        else if (!strcmp(a, "--json")) o->json = 1;
        else if (!strcmp(a, "--ignore-eos")) o->ignore_eos = 1;
        else if (a[0] == '-' && a[1] == '-') {
            if (!(v = flint_arg_value(cmd, argc, argv, &i))) return -1;
            if (!strcmp(a, "--prompt")) o->prompt = v;
            else if (!strcmp(a, "--system")) o->system = v;
            else if (!strcmp(a, "--chat-template")) o->chat_template = v;
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

static int is_eos(const flint_target_config *c, int32_t eos_tok, int32_t id) {
    if (id == eos_tok) return 1;
    for (int i = 0; i < c->n_eos; i++)
        if (c->eos_token_ids[i] == id) return 1;
    return 0;
}

int flint_cmd_generate(int argc, char **argv) {
    gen_options o;
    if (parse(argc, argv, &o)) {
        fprintf(stderr, "(flint generate --help lists the options)\n");
        return 2;
    }
    flint_err err = {0};
    int rc = 1;
    flint_tokenizer *tok = NULL;
    flint_target *t = NULL;
    flint_kv_alloc *kv = NULL;
    int32_t *prompt = NULL, *out_ids = NULL, *blocks = NULL;
    float *logits = NULL;
    char *text = NULL;
    size_t text_len = 0, text_cap = 0;
    flint_sampler_scratch sc = {0};
    int n_prompt = 0, n_out = 0;
    const char *finish = "length";

    double t0 = now_ms();
    if (!(tok = flint_tokenizer_open_dir(o.model_dir, &err))) goto fail;
    if (encode_prompt(&o, tok, &prompt, &n_prompt, &err)) goto fail;
    if (n_prompt == 0) {
        flint_err_set(&err, FLINT_ERR_INVALID, "the prompt encodes to no tokens and the model adds no BOS");
        goto fail;
    }
    flint_target_config cfg;
    if (flint_target_config_load(o.model_dir, &cfg, &err)) goto fail;
    if ((long)n_prompt + o.max_tokens > cfg.max_position_embeddings) {
        flint_err_set(&err, FLINT_ERR_INVALID,
                      "prompt (%d tokens) + --max-tokens (%d) exceeds the model's context of %d tokens", n_prompt,
                      o.max_tokens, cfg.max_position_embeddings);
        goto fail;
    }
    flint_target_options to;
    flint_target_options_default(&to);
    to.max_seqs = 1;
    to.max_len = n_prompt + o.max_tokens;
    to.n_threads = o.threads;
    if (!(t = flint_target_open(o.model_dir, &to, &err))) goto fail;
    const int V = cfg.vocab_size, bs = flint_target_kv_block_size(t);
    int n_blocks = (to.max_len + bs - 1) / bs;
    kv = flint_kv_alloc_new(flint_target_kv_blocks(t));
    blocks = flint_xmalloc(sizeof(int32_t) * (size_t)n_blocks);
    for (int i = 0; i < n_blocks; i++) {
        blocks[i] = flint_kv_alloc_take(kv);
        FLINT_ASSERT(blocks[i] >= 0); /* the pool was sized for this sequence */
    }
    logits = flint_xmalloc(sizeof(float) * (size_t)V);
    out_ids = flint_xmalloc(sizeof(int32_t) * (size_t)o.max_tokens);
    flint_sampler_scratch_init(&sc, V);
    double t_load = now_ms();

    /* prefill in chunks of the reserved row count */
    int max_rows = to.max_rows;
    int32_t *pos = flint_xmalloc(sizeof(int32_t) * (size_t)max_rows);
    int32_t *seq = flint_xcalloc((size_t)max_rows, sizeof(int32_t));
    const int32_t *tables[1] = {blocks};
    for (int start = 0; start < n_prompt; start += max_rows) {
        int n = n_prompt - start < max_rows ? n_prompt - start : max_rows;
        for (int i = 0; i < n; i++) pos[i] = start + i;
        int32_t last = n - 1;
        int want = start + n == n_prompt;
        flint_target_batch b = {.n_rows = n, .tokens = prompt + start, .pos = pos, .row_seq = seq, .n_seqs = 1,
                                .block_tables = tables, .n_logit_rows = want, .logit_rows = &last,
                                .logits = logits};
        if (flint_target_forward(t, &b, &err)) {
            free(pos);
            free(seq);
            goto fail;
        }
    }
    free(pos);
    free(seq);
    double t_prefill = now_ms();

    flint_detok dt;
    flint_detok_init(&dt, tok, 1);
    char piece[4096];
    int32_t eos_tok = flint_tokenizer_eos_id(tok);
    for (;;) {
        int32_t p = n_prompt + n_out;
        int32_t id = flint_sampler_sample(&o.sp, logits, V, p, &sc);
        out_ids[n_out++] = id;
        if (!o.ignore_eos && is_eos(&cfg, eos_tok, id)) {
            finish = "stop";
            break;
        }
        int w = flint_detok_push(&dt, id, piece, sizeof piece, &err);
        if (w < 0) goto fail;
        if (o.json) {
            if (text_len + (size_t)w + 1 > text_cap) {
                text_cap = (text_len + (size_t)w + 1) * 2;
                text = flint_xrealloc(text, text_cap);
            }
            memcpy(text + text_len, piece, (size_t)w);
            text_len += (size_t)w;
        } else {
            fwrite(piece, 1, (size_t)w, stdout);
            fflush(stdout);
        }
        if (n_out == o.max_tokens) break;
        int32_t zero = 0, row = 0;
        flint_target_batch b = {.n_rows = 1, .tokens = &id, .pos = &p, .row_seq = &zero, .n_seqs = 1,
                                .block_tables = tables, .n_logit_rows = 1, .logit_rows = &row, .logits = logits};
        if (flint_target_forward(t, &b, &err)) goto fail;
    }
    {
        int w = flint_detok_flush(&dt, piece, sizeof piece, &err);
        if (w < 0) goto fail;
        if (o.json) {
            text = flint_xrealloc(text, text_len + (size_t)w + 1);
            memcpy(text + text_len, piece, (size_t)w);
            text_len += (size_t)w;
            text[text_len] = 0;
        } else {
            fwrite(piece, 1, (size_t)w, stdout);
            fputc('\n', stdout);
        }
    }
    double t_end = now_ms();
    double prefill_ms = t_prefill - t_load, decode_ms = t_end - t_prefill;
    /* the first token comes from the prefill; the remaining n_out - 1 from decode steps */
    double decode_tps = n_out > 1 ? (n_out - 1) / (decode_ms / 1e3) : 0;
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
        char *s = cJSON_PrintUnformatted(j);
        puts(s);
        free(s);
        cJSON_Delete(j);
    }
    fprintf(stderr, "flint: prompt %d tokens in %.1f ms (%.1f tok/s); generated %d tokens, %.1f tok/s (%s)\n",
            n_prompt, prefill_ms, prefill_ms > 0 ? n_prompt / (prefill_ms / 1e3) : 0, n_out, decode_tps, finish);
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "flint generate: %s\n", err.msg);
done:
    flint_sampler_scratch_free(&sc);
    free(text);
    free(logits);
    free(out_ids);
    free(blocks);
    free(prompt);
    flint_kv_alloc_free(kv);
    flint_target_close(t);
    flint_tokenizer_close(tok);
    return rc;
}
