/* Chat templates written out in C (see chat.h). Each renderer mirrors the family's reference
 * Jinja template for plain text messages; tests compare them with the templates' outputs. */
#include "chat.h"

#include <cjson/cJSON.h>

#include "json.h"
#include "sbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef flint_sbuf sbuf;
static void sb_put(sbuf *b, const char *s, size_t n) { flint_sbuf_add(b, s, n); }
static void sb_str(sbuf *b, const char *s) { flint_sbuf_adds(b, s); }

/* Jinja's |trim: strip ASCII whitespace at both ends. */
static void sb_trimmed(sbuf *b, const char *s) {
    const char *e = s + strlen(s);
    while (s < e && strchr(" \t\r\n", *s)) s++;
    while (e > s && strchr(" \t\r\n", e[-1])) e--;
    sb_put(b, s, (size_t)(e - s));
}

void flint_chat_options_default(flint_chat_options *o) {
    o->add_generation_prompt = 1;
    o->enable_thinking = 1;
    o->tools = NULL;
}

int flint_chat_parse_format(const char *name, flint_chat_format *out) {
    if (!strcmp(name, "chatml") || !strcmp(name, "qwen2")) *out = FLINT_CHAT_CHATML;
    else if (!strcmp(name, "qwen3")) *out = FLINT_CHAT_QWEN3;
    else if (!strcmp(name, "llama3")) *out = FLINT_CHAT_LLAMA3;
    else if (!strcmp(name, "llama2")) *out = FLINT_CHAT_LLAMA2;
    else return -1;
    return 0;
}

const char *flint_chat_format_name(flint_chat_format f) {
    switch (f) {
    case FLINT_CHAT_CHATML: return "chatml";
    case FLINT_CHAT_QWEN3: return "qwen3";
    case FLINT_CHAT_LLAMA3: return "llama3";
    case FLINT_CHAT_LLAMA2: return "llama2";
    default: return "none";
    }
}

flint_chat_format flint_chat_detect(const char *t) {
    if (!t) return FLINT_CHAT_NONE;
    if (strstr(t, "<|im_start|>")) return strstr(t, "</think>") ? FLINT_CHAT_QWEN3 : FLINT_CHAT_CHATML;
    if (strstr(t, "<|start_header_id|>")) return FLINT_CHAT_LLAMA3;
    if (strstr(t, "[INST]")) return FLINT_CHAT_LLAMA2;
    return FLINT_CHAT_NONE;
}

static int known_role(const char *r) {
    return !strcmp(r, "system") || !strcmp(r, "user") || !strcmp(r, "assistant") || !strcmp(r, "tool");
}

/* ChatML (Qwen2 style) and Qwen3's template. Qwen3 adds: a system message that is not first is
 * rendered like a user turn; assistant turns split "<think>..</think>" reasoning from content and
 * keep the reasoning only after the last real user query; tool results are wrapped in a user
 * turn as <tool_response> blocks. The generation prompt opens an assistant turn. */
static int is_tool_wrapper(const char *c) {
    size_t n = strlen(c), a = strlen("<tool_response>"), z = strlen("</tool_response>");
    return n >= a + z && !strncmp(c, "<tool_response>", a) && !strcmp(c + n - z, "</tool_response>");
}

static void put_strip_nl(sbuf *b, const char *s, size_t n, int left, int right) {
    while (left && n && *s == '\n') s++, n--;
    while (right && n && s[n - 1] == '\n') n--;
    sb_put(b, s, n);
}

/* The Hermes-style tool preamble of the Qwen2.5/Qwen3 templates: the system message (if any),
 * then every tool as |tojson inside <tools></tools>, then the <tool_call> instructions. */
static void render_tools(sbuf *b, const flint_chat_msg *m, int n, const cJSON *tools) {
    sb_str(b, "<|im_start|>system\n");
    if (n > 0 && !strcmp(m[0].role, "system")) {
        sb_str(b, m[0].content);
        sb_str(b, "\n\n");
    }
    sb_str(b, "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided "
              "with function signatures within <tools></tools> XML tags:\n<tools>");
    const cJSON *t;
    cJSON_ArrayForEach(t, tools) {
        char *j = flint_json_dumps_py(t);
        sb_str(b, "\n");
        sb_str(b, j);
        free(j);
    }
    sb_str(b, "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
              "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
              "<args-json-object>}\n</tool_call><|im_end|>\n");
}

/* Assistant tool calls as the templates write them after the content. */
static void render_tool_calls(sbuf *b, const cJSON *calls, int have_content) {
    const cJSON *c;
    int first = 1;
    cJSON_ArrayForEach(c, calls) {
        if (!first || have_content) sb_str(b, "\n");
        first = 0;
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(c, "function");
        if (!cJSON_IsObject(f)) f = c;
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(f, "name");
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(f, "arguments");
        sb_str(b, "<tool_call>\n{\"name\": \"");
        sb_str(b, cJSON_IsString(name) ? name->valuestring : "");
        sb_str(b, "\", \"arguments\": ");
        if (cJSON_IsString(args)) {
            sb_str(b, args->valuestring);
        } else {
            char *j = flint_json_dumps_py(args);
            sb_str(b, j);
            free(j);
        }
        sb_str(b, "}\n</tool_call>");
    }
}

static void render_chatml(sbuf *b, const flint_chat_msg *m, int n, const flint_chat_options *o, int qwen3) {
    int last_query = n - 1;
    for (int i = n - 1; i >= 0; i--)
        if (!strcmp(m[i].role, "user") && !is_tool_wrapper(m[i].content)) {
            last_query = i;
            break;
        }
    int tools = o->tools && cJSON_GetArraySize(o->tools) > 0;
    if (tools) render_tools(b, m, n, o->tools);
    for (int i = 0; i < n; i++) {
        const char *c = m[i].content;
        if (tools && i == 0 && !strcmp(m[i].role, "system")) continue; /* folded into the tools block */
        if (!strcmp(m[i].role, "tool")) {
            int first = i == 0 || strcmp(m[i - 1].role, "tool");
            int last = i == n - 1 || strcmp(m[i + 1].role, "tool");
            if (first) sb_str(b, "<|im_start|>user");
            sb_str(b, "\n<tool_response>\n");
            sb_str(b, c);
            sb_str(b, "\n</tool_response>");
            if (last) sb_str(b, "<|im_end|>\n");
            continue;
        }
        if (!qwen3 || strcmp(m[i].role, "assistant")) {
            sb_str(b, "<|im_start|>");
            sb_str(b, m[i].role);
            sb_str(b, "\n");
            sb_str(b, c);
            if (!strcmp(m[i].role, "assistant") && m[i].tool_calls) render_tool_calls(b, m[i].tool_calls, c[0] != 0);
            sb_str(b, "<|im_end|>\n");
            continue;
        }
        /* Qwen3 assistant turn */
        const char *content = c, *rs = "", *re = "";
        const char *end_think = strstr(c, "</think>");
        if (m[i].reasoning_content) {
            rs = m[i].reasoning_content;
            re = rs + strlen(rs);
        } else if (end_think) {
            const char *lastend = end_think, *p;
            while ((p = strstr(lastend + 1, "</think>"))) lastend = p;
            content = lastend + strlen("</think>");
            while (*content == '\n') content++;
            /* reasoning = text before the first </think>, after the last <think> in it */
            rs = c;
            re = end_think;
            for (p = c; (p = strstr(p, "<think>")) && p < end_think; p++) rs = p + strlen("<think>");
        }
        sb_str(b, "<|im_start|>assistant\n");
        int has_reasoning = 0;
        {
            const char *a = rs, *z = re;
            while (a < z && *a == '\n') a++;
            while (z > a && z[-1] == '\n') z--;
            has_reasoning = z > a;
        }
        if (i > last_query && (i == n - 1 || has_reasoning)) {
            sb_str(b, "<think>\n");
            put_strip_nl(b, rs, (size_t)(re - rs), 1, 1);
            sb_str(b, "\n</think>\n\n");
            put_strip_nl(b, content, strlen(content), 1, 0);
        } else {
            sb_str(b, content);
        }
        if (m[i].tool_calls) render_tool_calls(b, m[i].tool_calls, content[0] != 0);
        sb_str(b, "<|im_end|>\n");
    }
    if (o->add_generation_prompt) {
        sb_str(b, "<|im_start|>assistant\n");
        if (qwen3 && !o->enable_thinking) sb_str(b, "<think>\n\n</think>\n\n");
    }
}

static void render_llama3(sbuf *b, const flint_chat_msg *m, int n, const flint_chat_options *o, const char *bos) {
    if (bos) sb_str(b, bos);
    for (int i = 0; i < n; i++) {
        sb_str(b, "<|start_header_id|>");
        sb_str(b, !strcmp(m[i].role, "tool") ? "ipython" : m[i].role);
        sb_str(b, "<|end_header_id|>\n\n");
        sb_trimmed(b, m[i].content);
        sb_str(b, "<|eot_id|>");
    }
    if (o->add_generation_prompt) sb_str(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

/* Llama-2: the system prompt is folded into the first user turn; turns must alternate
 * user/assistant after it, as the reference template enforces. */
static int render_llama2(sbuf *b, const flint_chat_msg *m, int n, const char *bos, const char *eos,
                         flint_err *err) {
    const char *sys = NULL;
    int start = 0;
    if (n > 0 && !strcmp(m[0].role, "system")) {
        sys = m[0].content;
        start = 1;
    }
    for (int i = start; i < n; i++) {
        int expect_user = ((i - start) % 2) == 0;
        if (strcmp(m[i].role, expect_user ? "user" : "assistant"))
            return flint_err_set(err, FLINT_ERR_INVALID,
                                 "llama2 chat template: messages must alternate user/assistant after an "
                                 "optional system message (message %d is '%s')", i, m[i].role);
        if (expect_user) {
            if (bos) sb_str(b, bos);
            sb_str(b, "[INST] ");
            if (sys && i == start) {
                sb_str(b, "<<SYS>>\n");
                sb_str(b, sys);
                sb_str(b, "\n<</SYS>>\n\n");
            }
            sb_trimmed(b, m[i].content);
            sb_str(b, " [/INST]");
        } else {
            sb_str(b, " ");
            sb_trimmed(b, m[i].content);
            sb_str(b, " ");
            if (eos) sb_str(b, eos);
        }
    }
    return 0;
}

char *flint_chat_render(flint_chat_format f, const flint_chat_msg *msgs, int n, const flint_chat_options *o,
                        const char *bos, const char *eos, flint_err *err) {
    flint_chat_options def;
    if (!o) {
        flint_chat_options_default(&def);
        o = &def;
    }
    for (int i = 0; i < n; i++) {
        if (!msgs[i].role || !known_role(msgs[i].role)) {
            flint_err_set(err, FLINT_ERR_INVALID, "message %d: unknown role '%s'", i,
                          msgs[i].role ? msgs[i].role : "(null)");
            return NULL;
        }
        if (!msgs[i].content) {
            flint_err_set(err, FLINT_ERR_INVALID, "message %d: missing content", i);
            return NULL;
        }
    }
    sbuf b = {0};
    sb_str(&b, "");
    switch (f) {
    case FLINT_CHAT_CHATML: render_chatml(&b, msgs, n, o, 0); break;
    case FLINT_CHAT_QWEN3: render_chatml(&b, msgs, n, o, 1); break;
    case FLINT_CHAT_LLAMA3:
        if (o->tools && cJSON_GetArraySize(o->tools) > 0) {
            free(b.p);
            flint_err_set(err, FLINT_ERR_UNSUPPORTED, "tools are supported with the ChatML/Qwen chat templates only");
            return NULL;
        }
        render_llama3(&b, msgs, n, o, bos);
        break;
    case FLINT_CHAT_LLAMA2:
        if (o->tools && cJSON_GetArraySize(o->tools) > 0) {
            free(b.p);
            flint_err_set(err, FLINT_ERR_UNSUPPORTED, "tools are supported with the ChatML/Qwen chat templates only");
            return NULL;
        }
        if (render_llama2(&b, msgs, n, bos, eos, err) != 0) {
            free(b.p);
            return NULL;
        }
        break;
    default:
        free(b.p);
        flint_err_set(err, FLINT_ERR_UNSUPPORTED,
                      "no chat template: the model's tokenizer_config.json has none flint recognises "
                      "(choose one with --chat-template chatml|llama3|llama2)");
        return NULL;
    }
    return b.p;
}
