/* Request bodies of POST /v1/chat/completions and /v1/completions: strict UTF-8, JSON, and every
 * field's type and range checked, so the rest of the server only sees a well-formed request. A bad
 * request becomes an OpenAI error object naming the field (param), never a crash: this file is
 * what tests/fuzz/fuzz_request.c feeds arbitrary bytes to. It knows no libevent and no engine
 * (limits that need the model, such as the context length, are checked by http.c).
 *
 * Unknown fields are ignored, as vLLM does, so newer clients keep working; known fields that ask
 * for something flint does not do (n > 1, penalties) are refused rather than
 * silently dropped. */
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/server_internal.h"

/* ==== small pieces shared with the other files ==== */

int flint_api_error_set(flint_api_error *e, int status, const char *type, const char *code, const char *param,
                        const char *fmt, ...) {
    e->status = status;
    e->type = type;
    e->code = code;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return -1;
}

#define BAD(param, ...) flint_api_error_set(e, 400, "invalid_request_error", NULL, param, __VA_ARGS__)

int flint_server_utf8_valid(const char *str, size_t n) {
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        int len;
        unsigned cp;
        if (c >= 0xC2 && c <= 0xDF) len = 2, cp = c & 0x1F;
        else if (c >= 0xE0 && c <= 0xEF) len = 3, cp = c & 0x0F;
        else if (c >= 0xF0 && c <= 0xF4) len = 4, cp = c & 0x07;
        else return 0; /* continuation byte, overlong lead (C0, C1) or F5..FF */
        if (i + (size_t)len > n) return 0;
        for (int k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return 0;
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
            (cp >= 0xD800 && cp <= 0xDFFF))
            return 0;
        i += (size_t)len;
    }
    return 1;
}

int flint_server_secret_equal(const char *given, size_t given_len, const char *secret) {
    size_t n = strlen(secret);
    /* Walk the secret's length whatever was given, so the time tells nothing about how much of
     * the given key matched; a length difference is folded into the same accumulator. */
    volatile unsigned char diff = (unsigned char)(given_len != n);
    for (size_t i = 0; i < n; i++) {
        unsigned char g = i < given_len ? (unsigned char)given[i] : 0;
        diff |= (unsigned char)(g ^ (unsigned char)secret[i]);
    }
    return diff == 0;
}

/* ==== typed field access ==== */

static const cJSON *field(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return v && !cJSON_IsNull(v) ? v : NULL; /* null means "not given", as in the OpenAI API */
}

static int is_integer(const cJSON *v) {
    return cJSON_IsNumber(v) && isfinite(v->valuedouble) && v->valuedouble == floor(v->valuedouble);
}

static int get_bool(const cJSON *o, const char *key, int *out, flint_api_error *e) {
    const cJSON *v = field(o, key);
    if (!v) return 0;
    if (!cJSON_IsBool(v)) return BAD(key, "'%s' must be a boolean", key);
    *out = cJSON_IsTrue(v);
    return 0;
}

static int get_number(const cJSON *o, const char *key, double lo, double hi, int *given, double *out,
                      flint_api_error *e) {
    const cJSON *v = field(o, key);
    if (given) *given = v != NULL;
    if (!v) return 0;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) return BAD(key, "'%s' must be a number", key);
    if (v->valuedouble < lo || v->valuedouble > hi)
        return BAD(key, "'%s' must be between %g and %g (got %g)", key, lo, hi, v->valuedouble);
    *out = v->valuedouble;
    return 0;
}

static int get_int(const cJSON *o, const char *key, double lo, double hi, int *given, int64_t *out,
                   flint_api_error *e) {
    const cJSON *v = field(o, key);
    if (given) *given = v != NULL;
    if (!v) return 0;
    if (!is_integer(v)) return BAD(key, "'%s' must be an integer", key);
    if (v->valuedouble < lo || v->valuedouble > hi)
        return BAD(key, "'%s' must be between %.0f and %.0f (got %.0f)", key, lo, hi, v->valuedouble);
    *out = (int64_t)v->valuedouble; /* callers' ranges stay within int64 */
    return 0;
}

/* A field flint does not implement: accepted only at its neutral value. */
static int neutral_number(const cJSON *o, const char *key, double neutral, flint_api_error *e) {
    const cJSON *v = field(o, key);
    if (!v) return 0;
    if (!cJSON_IsNumber(v)) return BAD(key, "'%s' must be a number", key);
    if (v->valuedouble != neutral) return BAD(key, "'%s' is not supported by this server (only %g)", key, neutral);
    return 0;
}

/* ==== chat messages ==== */

static char *keep(flint_api_request *r, char *s) {
    r->owned = flint_xrealloc(r->owned, sizeof(char *) * (size_t)(r->n_owned + 1));
    r->owned[r->n_owned++] = s;
    return s;
}

/* content: a string, an array of {"type": "text", "text": ...} parts (joined), or null for an
 * assistant turn that only called tools. */
static int message_content(flint_api_request *r, const cJSON *m, const char *role, int idx, const char **out,
                           flint_api_error *e) {
    char param[64];
    snprintf(param, sizeof param, "messages[%d].content", idx);
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(m, "content");
    if (!c || cJSON_IsNull(c)) {
        if (strcmp(role, "assistant")) return BAD(param, "'%s' is required", param);
        *out = "";
        return 0;
    }
    if (cJSON_IsString(c)) {
        *out = c->valuestring;
        return 0;
    }
    if (!cJSON_IsArray(c)) return BAD(param, "'%s' must be a string or an array of text parts", param);
    flint_sbuf b = {0};
    const cJSON *part;
    int k = 0;
    cJSON_ArrayForEach(part, c) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(part, "text");
        if (!cJSON_IsObject(part) || !cJSON_IsString(type)) {
            flint_sbuf_free(&b);
            return BAD(param, "'%s[%d]' must be an object with a 'type'", param, k);
        }
        if (strcmp(type->valuestring, "text")) {
            flint_sbuf_free(&b);
            return BAD(param, "'%s[%d]': content type '%.40s' is not supported (text only)", param, k,
                       type->valuestring);
        }
        if (!cJSON_IsString(text)) {
            flint_sbuf_free(&b);
            return BAD(param, "'%s[%d].text' must be a string", param, k);
        }
        flint_sbuf_adds(&b, text->valuestring);
        k++;
    }
    flint_sbuf_add(&b, "", 1); /* NUL */
    *out = keep(r, b.p);
    return 0;
}

static int parse_messages(flint_api_request *r, const cJSON *root, flint_api_error *e) {
    const cJSON *ms = cJSON_GetObjectItemCaseSensitive(root, "messages");
    if (!ms || cJSON_IsNull(ms)) return BAD("messages", "'messages' is required");
    if (!cJSON_IsArray(ms)) return BAD("messages", "'messages' must be an array");
    int n = cJSON_GetArraySize(ms);
    if (n < 1) return BAD("messages", "'messages' must not be empty");
    if (n > 100000) return BAD("messages", "too many messages (%d)", n);
    r->msgs = flint_xcalloc((size_t)n, sizeof *r->msgs);
    const cJSON *m;
    int i = 0;
    cJSON_ArrayForEach(m, ms) {
        char param[64];
        snprintf(param, sizeof param, "messages[%d]", i);
        if (!cJSON_IsObject(m)) return BAD(param, "'%s' must be an object", param);
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        snprintf(param, sizeof param, "messages[%d].role", i);
        if (!role || cJSON_IsNull(role)) return BAD(param, "'%s' is required", param);
        if (!cJSON_IsString(role)) return BAD(param, "'%s' must be a string", param);
        const char *rs = role->valuestring;
        if (!strcmp(rs, "developer")) rs = "system"; /* OpenAI's newer name for the system turn */
        if (strcmp(rs, "system") && strcmp(rs, "user") && strcmp(rs, "assistant") && strcmp(rs, "tool"))
            return BAD(param, "'%s': unknown role '%.40s' (system, developer, user, assistant, tool)", param, rs);
        r->msgs[i].role = rs;
        if (message_content(r, m, rs, i, &r->msgs[i].content, e)) return -1;
        if (!strcmp(rs, "assistant")) { /* history of an agent loop: earlier reasoning and tool calls */
            const cJSON *rc = field(m, "reasoning_content"), *tc = field(m, "tool_calls");
            snprintf(param, sizeof param, "messages[%d].reasoning_content", i);
            if (rc && !cJSON_IsString(rc)) return BAD(param, "'%s' must be a string", param);
            r->msgs[i].reasoning_content = rc ? rc->valuestring : NULL;
            snprintf(param, sizeof param, "messages[%d].tool_calls", i);
            if (tc && !cJSON_IsArray(tc)) return BAD(param, "'%s' must be an array", param);
            const cJSON *call;
            if (tc)
                cJSON_ArrayForEach(call, tc) {
                    const cJSON *fn = cJSON_GetObjectItemCaseSensitive(call, "function");
                    const cJSON *name = fn ? cJSON_GetObjectItemCaseSensitive(fn, "name") : NULL;
                    if (!cJSON_IsObject(call) || !cJSON_IsObject(fn) || !cJSON_IsString(name))
                        return BAD(param, "'%s' entries must be {\"type\": \"function\", \"function\": {\"name\", "
                                   "\"arguments\"}}", param);
                }
            r->msgs[i].tool_calls = tc && tc->child ? tc : NULL;
        }
        i++;
    }
    r->n_msgs = n;
    return 0;
}

/* prompt: a string, a list of exactly one string, or token ids (a list of integers, or a list
 * holding one such list). Batched prompts are refused: one prompt per request. */
static int parse_ids(flint_api_request *r, const cJSON *a, flint_api_error *e) {
    int n = cJSON_GetArraySize(a);
    if (n < 1) return BAD("prompt", "'prompt' must not be an empty list");
    if (n > 10000000) return BAD("prompt", "'prompt' is too long");
    r->prompt_ids = flint_xmalloc(sizeof(int32_t) * (size_t)n);
    const cJSON *v;
    cJSON_ArrayForEach(v, a) {
        if (!is_integer(v) || v->valuedouble < 0 || v->valuedouble > INT32_MAX)
            return BAD("prompt", "token ids in 'prompt' must be non-negative integers");
        r->prompt_ids[r->n_prompt_ids++] = (int32_t)v->valuedouble;
    }
    return 0;
}

static int parse_prompt(flint_api_request *r, const cJSON *root, flint_api_error *e) {
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(root, "prompt");
    if (!p || cJSON_IsNull(p)) return BAD("prompt", "'prompt' is required");
    if (cJSON_IsString(p)) {
        r->prompt = p->valuestring;
        return 0;
    }
    if (!cJSON_IsArray(p)) return BAD("prompt", "'prompt' must be a string, a list of one string or token ids");
    const cJSON *first = p->child;
    if (first && cJSON_IsString(first)) {
        if (cJSON_GetArraySize(p) != 1)
            return BAD("prompt", "only one prompt per request is supported (got %d)", cJSON_GetArraySize(p));
        r->prompt = first->valuestring;
        return 0;
    }
    if (first && cJSON_IsArray(first)) {
        if (cJSON_GetArraySize(p) != 1)
            return BAD("prompt", "only one prompt per request is supported (got %d)", cJSON_GetArraySize(p));
        return parse_ids(r, first, e);
    }
    return parse_ids(r, p, e);
}

/* ==== the request ==== */

static int parse_stop(flint_api_request *r, const cJSON *root, flint_api_error *e) {
    const cJSON *s = field(root, "stop");
    if (!s) return 0;
    if (cJSON_IsString(s)) {
        if (!s->valuestring[0]) return BAD("stop", "'stop' strings must not be empty");
        r->params.stop[r->params.n_stop++] = s->valuestring;
        return 0;
    }
    if (!cJSON_IsArray(s)) return BAD("stop", "'stop' must be a string or a list of strings");
    if (cJSON_GetArraySize(s) > FLINT_MAX_STOP) return BAD("stop", "at most %d stop strings", FLINT_MAX_STOP);
    const cJSON *v;
    cJSON_ArrayForEach(v, s) {
        if (!cJSON_IsString(v)) return BAD("stop", "'stop' must be a string or a list of strings");
        if (!v->valuestring[0]) return BAD("stop", "'stop' strings must not be empty");
        r->params.stop[r->params.n_stop++] = v->valuestring;
    }
    return 0;
}

static int parse_speculative(flint_api_request *r, const cJSON *root, flint_api_error *e) {
    const cJSON *s = field(root, "speculative");
    if (!s) return 0;
    if (cJSON_IsBool(s)) { /* "speculative": false, the short form people ask for */
        r->params.speculative = cJSON_IsTrue(s);
        return 0;
    }
    if (!cJSON_IsObject(s)) return BAD("speculative", "'speculative' must be an object or a boolean");
    const cJSON *it;
    cJSON_ArrayForEach(it, s) {
        if (!strcmp(it->string, "enabled")) {
            if (!cJSON_IsBool(it)) return BAD("speculative.enabled", "'speculative.enabled' must be a boolean");
            r->params.speculative = cJSON_IsTrue(it);
        } else if (!strcmp(it->string, "max_draft_tokens") || !strcmp(it->string, "num_speculative_tokens")) {
            if (!is_integer(it) || it->valuedouble < 0 || it->valuedouble > FLINT_MAX_DRAFT)
                return BAD("speculative.max_draft_tokens", "'speculative.%s' must be an integer in 0..%d",
                           it->string, FLINT_MAX_DRAFT);
            int k = (int)it->valuedouble;
            if (k == 0) r->params.speculative = 0; /* 0 drafts = plain decoding */
            else r->params.max_draft = k;
        } else if (!strcmp(it->string, "dynamic")) {
            if (!cJSON_IsBool(it)) return BAD("speculative.dynamic", "'speculative.dynamic' must be a boolean");
            r->dynamic_draft = cJSON_IsTrue(it);
        } else {
            return BAD("speculative", "unknown key 'speculative.%.40s' (enabled, max_draft_tokens, dynamic)",
                       it->string);
        }
    }
    return 0;
}

static const cJSON *tool_by_name(const cJSON *tools, const char *name) {
    const cJSON *it;
    cJSON_ArrayForEach(it, tools) {
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(it, "function"), "name");
        if (cJSON_IsString(n) && !strcmp(n->valuestring, name)) return it;
    }
    return NULL;
}

/* tool_choice "required" or a named function: the output is forced, through the same grammar as
 * response_format, to one call object {"name": F, "arguments": {...}} (F the named function, or
 * any of the tools), with each function's "parameters" as the schema of its arguments. The
 * server wraps it in <tool_call> tags for the Hermes parser, so streamed deltas, ids and the final
 * message come out exactly as for a call the model chose itself (vLLM forces a JSON form too). */
static int force_tool_schema(flint_api_request *r, flint_api_error *e) {
    if (r->params.response_format)
        return BAD("tool_choice", "tool_choice \"required\" or a named function cannot be combined with response_format");
    cJSON *alts = cJSON_CreateArray();
    const cJSON *it;
    cJSON_ArrayForEach(it, r->tools) {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(it, "function");
        const char *name = cJSON_GetObjectItemCaseSensitive(fn, "name")->valuestring;
        if (r->tool_choice_name && strcmp(name, r->tool_choice_name)) continue;
        const cJSON *params = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
        cJSON *o = cJSON_CreateObject(), *props = cJSON_CreateObject(), *nm = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "type", "object");
        cJSON_AddStringToObject(nm, "const", name);
        cJSON_AddItemToObject(props, "name", nm);
        if (cJSON_IsObject(params)) {
            cJSON_AddItemToObject(props, "arguments", cJSON_Duplicate(params, 1));
        } else {
            cJSON *any = cJSON_CreateObject();
            cJSON_AddStringToObject(any, "type", "object");
            cJSON_AddItemToObject(props, "arguments", any);
        }
        cJSON_AddItemToObject(o, "properties", props);
        const char *req[] = {"name", "arguments"};
        cJSON_AddItemToObject(o, "required", cJSON_CreateStringArray(req, 2));
        cJSON_AddBoolToObject(o, "additionalProperties", 0);
        cJSON_AddItemToArray(alts, o);
    }
    cJSON *schema;
    if (cJSON_GetArraySize(alts) == 1) {
        schema = cJSON_DetachItemFromArray(alts, 0);
        cJSON_Delete(alts);
    } else {
        schema = cJSON_CreateObject();
        cJSON_AddItemToObject(schema, "anyOf", alts);
    }
    cJSON *rf = cJSON_CreateObject(), *js = cJSON_CreateObject();
    cJSON_AddStringToObject(rf, "type", "json_schema");
    cJSON_AddStringToObject(js, "name", "tool_call");
    cJSON_AddItemToObject(js, "schema", schema);
    cJSON_AddItemToObject(rf, "json_schema", js);
    r->params.response_format = keep(r, cJSON_PrintUnformatted(rf));
    cJSON_Delete(rf);
    return 0;
}

/* Chat tools: an array of {"type": "function", "function": {"name", "description"?, "parameters"?}},
 * handed to the chat template; tool_choice "auto" (default), "none", "required" or a named function
 * (the last two force a call, see force_tool_schema). Whether the server can
 * parse tool calls (--tool-call-parser) is checked by http.c. */
static int parse_tools(flint_api_request *r, const cJSON *root, flint_api_error *e) {
    const cJSON *t = field(root, "tools"), *it;
    if (t) {
        if (!cJSON_IsArray(t)) return BAD("tools", "'tools' must be an array");
        cJSON_ArrayForEach(it, t) {
            const cJSON *type = cJSON_GetObjectItemCaseSensitive(it, "type");
            const cJSON *fn = cJSON_GetObjectItemCaseSensitive(it, "function");
            const cJSON *name = fn ? cJSON_GetObjectItemCaseSensitive(fn, "name") : NULL;
            if (!cJSON_IsObject(it) || !cJSON_IsString(type) || strcmp(type->valuestring, "function") ||
                !cJSON_IsObject(fn) || !cJSON_IsString(name) || !name->valuestring[0])
                return BAD("tools", "'tools' entries must be {\"type\": \"function\", \"function\": {\"name\": ...}}");
        }
        r->tools = t->child ? t : NULL;
    }
    const cJSON *c = field(root, "tool_choice");
    if (c) {
        const char *named = NULL;
        if (cJSON_IsObject(c)) {
            const cJSON *type = cJSON_GetObjectItemCaseSensitive(c, "type");
            const cJSON *fn = cJSON_GetObjectItemCaseSensitive(c, "function");
            const cJSON *name = cJSON_IsObject(fn) ? cJSON_GetObjectItemCaseSensitive(fn, "name") : NULL;
            if (!cJSON_IsString(type) || strcmp(type->valuestring, "function") || !cJSON_IsString(name))
                return BAD("tool_choice", "a named tool_choice is {\"type\": \"function\", \"function\": {\"name\": ...}}");
            named = name->valuestring;
        } else if (!cJSON_IsString(c) || (strcmp(c->valuestring, "auto") && strcmp(c->valuestring, "none") &&
                                          strcmp(c->valuestring, "required"))) {
            return BAD("tool_choice", "tool_choice must be \"auto\", \"none\", \"required\" or a named function");
        }
        r->tool_choice_none = cJSON_IsString(c) && !strcmp(c->valuestring, "none");
        if (named || (cJSON_IsString(c) && !strcmp(c->valuestring, "required"))) {
            if (!r->tools) return BAD("tool_choice", "tool_choice %s needs a non-empty 'tools'", named ? "(a named function)" : "\"required\"");
            if (named && !tool_by_name(r->tools, named))
                return BAD("tool_choice", "tool_choice names '%.100s', which is not in 'tools'", named);
            r->tool_forced = 1;
            r->tool_choice_name = named;
        }
    }
    const cJSON *kw = field(root, "chat_template_kwargs");
    if (kw) {
        if (!cJSON_IsObject(kw)) return BAD("chat_template_kwargs", "'chat_template_kwargs' must be an object");
        int think = -1;
        if (get_bool(kw, "enable_thinking", &think, e)) return -1;
        r->enable_thinking = think;
    }
    return 0;
}

/* Chat: "logprobs": bool and "top_logprobs": 0..20. Completions: "logprobs": N (0..20) asks for
 * the sampled token's log-probability and the N most likely ones. */
static int parse_logprobs(flint_api_request *r, const cJSON *root, flint_api_error *e) {
    const cJSON *v = field(root, "logprobs");
    int64_t n = 0;
    int given = 0;
    if (r->kind == FLINT_API_CHAT) {
        if (get_bool(root, "logprobs", &r->params.logprobs, e) ||
            get_int(root, "top_logprobs", 0, FLINT_MAX_TOP_LOGPROBS, &given, &n, e))
            return -1;
        if (given && n > 0 && !r->params.logprobs)
            return BAD("top_logprobs", "'top_logprobs' needs 'logprobs': true");
        r->params.top_logprobs = (int)n;
        return 0;
    }
    if (!v) return 0;
    if (cJSON_IsBool(v)) {
        r->params.logprobs = cJSON_IsTrue(v);
        return 0;
    }
    if (get_int(root, "logprobs", 0, FLINT_MAX_TOP_LOGPROBS, &given, &n, e)) return -1;
    r->params.logprobs = 1;
    r->params.top_logprobs = (int)n;
    return 0;
}

static int parse_stream_options(flint_api_request *r, const cJSON *root, flint_api_error *e) {
    const cJSON *so = field(root, "stream_options");
    if (!so) return 0;
    if (!cJSON_IsObject(so)) return BAD("stream_options", "'stream_options' must be an object");
    if (!r->stream) return BAD("stream_options", "'stream_options' is only allowed when 'stream' is true");
    int tbt = -1;
    if (get_bool(so, "include_usage", &r->include_usage, e) ||
        get_bool(so, "continuous_usage_stats", &r->continuous_usage, e) || get_bool(so, "token_by_token", &tbt, e))
        return -1;
    r->token_by_token = tbt;
    return 0;
}

/* Fields that ask for features flint does not have: refused unless at their neutral value. */
static int parse_unsupported(flint_api_request *r, const cJSON *root, flint_api_error *e) {
    if (neutral_number(root, "presence_penalty", 0, e) || neutral_number(root, "frequency_penalty", 0, e) ||
        neutral_number(root, "repetition_penalty", 1, e) || neutral_number(root, "min_tokens", 0, e))
        return -1;
    const cJSON *v;
    if ((v = field(root, "best_of")) && !(is_integer(v) && v->valuedouble == 1))
        return BAD("best_of", "only best_of = 1 is supported");
    if ((v = field(root, "echo"))) {
        if (!cJSON_IsBool(v)) return BAD("echo", "'echo' must be a boolean");
        if (cJSON_IsTrue(v)) return BAD("echo", "'echo' is not supported by this server");
    }
    if ((v = field(root, "suffix")) && !(cJSON_IsString(v) && !v->valuestring[0]))
        return BAD("suffix", "'suffix' is not supported by this server");
    if ((v = field(root, "logit_bias")) && !(cJSON_IsObject(v) && !v->child))
        return BAD("logit_bias", "'logit_bias' is not supported by this server");
    if ((v = field(root, "response_format"))) {
        const cJSON *t = cJSON_IsObject(v) ? cJSON_GetObjectItemCaseSensitive(v, "type") : NULL;
        if (!cJSON_IsString(t))
            return BAD("response_format", "'response_format' must be an object with a string 'type'");
        if (!strcmp(t->valuestring, "json_object") || !strcmp(t->valuestring, "json_schema"))
            /* compiled by the engine at admission; a schema it cannot handle is a 400 there */
            r->params.response_format = keep(r, cJSON_PrintUnformatted(v));
        else if (strcmp(t->valuestring, "text"))
            return BAD("response_format", "response_format type must be text, json_object or json_schema");
    }
    if (r->tool_forced && force_tool_schema(r, e)) return -1;
    return 0;
}

int flint_server_request_parse(flint_api_kind kind, const char *body, size_t len, flint_api_request *r,
                               flint_api_error *e) {
    memset(r, 0, sizeof *r);
    r->kind = kind;
    r->token_by_token = -1;
    r->dynamic_draft = -1;
    r->enable_thinking = -1;
    flint_request_params_default(&r->params);
    r->params.sampling.temperature = 1.0f; /* the OpenAI default */
    memset(e, 0, sizeof *e);
    if (!body || len == 0) return BAD(NULL, "the request body is empty; send a JSON object");
    if (!flint_server_utf8_valid(body, len)) return BAD(NULL, "the request body is not valid UTF-8");
    const char *end = NULL;
    r->root = cJSON_ParseWithLengthOpts(body, len, &end, 0);
    if (!r->root) {
        const char *at = cJSON_GetErrorPtr();
        long off = at && at >= body && at <= body + len ? (long)(at - body) : -1;
        return BAD(NULL, "the request body is not valid JSON (near byte %ld)", off);
    }
    for (const char *p = end; p && p < body + len; p++)
        if (*p != ' ' && *p != '\t' && *p != '\r' && *p != '\n')
            return BAD(NULL, "the request body has data after the JSON value (byte %ld)", (long)(p - body));
    const cJSON *root = r->root;
    if (!cJSON_IsObject(root)) return BAD(NULL, "the request body must be a JSON object");

    const cJSON *model = field(root, "model");
    if (model) {
        if (!cJSON_IsString(model)) return BAD("model", "'model' must be a string");
        r->model = model->valuestring;
    }
    if (kind == FLINT_API_CHAT ? parse_messages(r, root, e) || parse_tools(r, root, e) : parse_prompt(r, root, e))
        return -1;

    int64_t v = 0;
    int given = 0;
    /* max_completion_tokens is OpenAI's newer name and wins when both are given */
    if (get_int(root, "max_tokens", -1e18, 1e18, &given, &v, e)) return -1;
    if (given) {
        if (v < 1) return BAD("max_tokens", "'max_tokens' must be at least 1 (got %lld)", (long long)v);
        r->max_tokens = v > INT_MAX ? INT_MAX : (int)v;
    }
    if (get_int(root, "max_completion_tokens", -1e18, 1e18, &given, &v, e)) return -1;
    if (given) {
        if (v < 1)
            return BAD("max_completion_tokens", "'max_completion_tokens' must be at least 1 (got %lld)", (long long)v);
        r->max_tokens = v > INT_MAX ? INT_MAX : (int)v;
    }
    if (get_int(root, "n", -1e18, 1e18, &given, &v, e)) return -1;
    if (given && v != 1) return BAD("n", "only n = 1 is supported (got %lld)", (long long)v);

    flint_sampling_params *sp = &r->params.sampling;
    double d;
    if (get_number(root, "temperature", 0, 100, &given, &d, e)) return -1;
    if (given) sp->temperature = (float)d;
    if (get_number(root, "top_p", 0, 1, &given, &d, e)) return -1;
    if (given) {
        if (d <= 0) return BAD("top_p", "'top_p' must be greater than 0");
        sp->top_p = (float)d;
    }
    if (get_int(root, "top_k", -1, 1e9, &given, &v, e)) return -1;
    if (given) sp->top_k = v < 0 ? 0 : (int)v; /* -1 is vLLM's "off" */
    if (get_number(root, "min_p", 0, 1, &given, &d, e)) return -1;
    if (given) sp->min_p = (float)d;
    /* seed: any 64-bit integer; negative values wrap (JSON numbers are doubles: exact to 2^53) */
    const cJSON *sv = field(root, "seed");
    if (sv) {
        if (!is_integer(sv) || sv->valuedouble < -9223372036854775808.0 || sv->valuedouble >= 18446744073709551616.0)
            return BAD("seed", "'seed' must be a 64-bit integer");
        r->has_seed = 1;
        sp->seed = sv->valuedouble < 0 ? (uint64_t)(int64_t)sv->valuedouble : (uint64_t)sv->valuedouble;
    }
    if (get_bool(root, "stream", &r->stream, e) || parse_stream_options(r, root, e) || parse_stop(r, root, e) ||
        parse_speculative(r, root, e) || get_bool(root, "ignore_eos", &r->params.ignore_eos, e) ||
        get_bool(root, "skip_special_tokens", &r->params.skip_special, e) || parse_logprobs(r, root, e) ||
        parse_unsupported(r, root, e))
        return -1;
    return 0;
}

void flint_server_request_free(flint_api_request *r) {
    for (int i = 0; i < r->n_owned; i++) free(r->owned[i]);
    free(r->owned);
    free(r->msgs);
    free(r->prompt_ids);
    cJSON_Delete(r->root);
    memset(r, 0, sizeof *r);
}
