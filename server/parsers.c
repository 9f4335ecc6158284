/* Reasoning and tool-call output parsers (see parsers.h). Both are small state machines over a
 * pending buffer: text is released once it can no longer be the start of a tag. */
#include "server/parsers.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"
#include "core/status.h"

/* Length of the longest suffix of s[0..n) that is a proper prefix of tag. */
static size_t partial_tag(const char *s, size_t n, const char *tag) {
    size_t tl = strlen(tag);
    for (size_t k = tl - 1 < n ? tl - 1 : n; k > 0; k--)
        if (!memcmp(s + n - k, tag, k)) return k;
    return 0;
}

static void consume(flint_sbuf *pend, size_t k) {
    memmove(pend->p, pend->p + k, pend->n - k);
    pend->n -= k;
    pend->p[pend->n] = 0;
}

/* ==== reasoning ==== */

enum { R_START, R_THINK, R_AFTER, R_CONTENT };

struct flint_reasoning_parser {
    int state;
    flint_sbuf pend;
};

flint_reasoning_parser *flint_reasoning_new(void) { return flint_xcalloc(1, sizeof(flint_reasoning_parser)); }

void flint_reasoning_free(flint_reasoning_parser *p) {
    if (!p) return;
    flint_sbuf_free(&p->pend);
    free(p);
}

static void reasoning_run(flint_reasoning_parser *p, flint_sbuf *r, flint_sbuf *c, int final) {
    flint_sbuf *q = &p->pend;
    for (;;) {
        if (p->state == R_START) {
            static const char open[] = "<think>";
            size_t m = q->n < 7 ? q->n : 7;
            if (q->n >= 7 && !memcmp(q->p, open, 7)) {
                consume(q, 7);
                p->state = R_THINK;
                continue;
            }
            if (!final && (q->n == 0 || !memcmp(q->p, open, m))) return; /* could still be "<think>" */
            p->state = R_CONTENT;
            continue;
        }
        if (p->state == R_THINK) {
            char *end = q->n ? strstr(q->p, "</think>") : NULL;
            if (end) {
                flint_sbuf_add(r, q->p, (size_t)(end - q->p));
                consume(q, (size_t)(end - q->p) + 8);
                p->state = R_AFTER;
                continue;
            }
            size_t hold = final ? 0 : partial_tag(q->p, q->n, "</think>");
            flint_sbuf_add(r, q->p, q->n - hold);
            consume(q, q->n - hold);
            return;
        }
        if (p->state == R_AFTER) { /* drop the newlines that separate reasoning from the answer */
            size_t k = 0;
            while (k < q->n && q->p[k] == '\n') k++;
            consume(q, k);
            if (q->n == 0 && !final) return;
            p->state = R_CONTENT;
            continue;
        }
        flint_sbuf_add(c, q->p, q->n);
        flint_sbuf_clear(q);
        return;
    }
}

void flint_reasoning_feed(flint_reasoning_parser *p, const char *s, size_t n, flint_sbuf *r, flint_sbuf *c) {
    flint_sbuf_add(&p->pend, s, n);
    reasoning_run(p, r, c, 0);
}

void flint_reasoning_finish(flint_reasoning_parser *p, flint_sbuf *r, flint_sbuf *c) {
    if (!p->pend.p) flint_sbuf_add(&p->pend, "", 0);
    reasoning_run(p, r, c, 1);
}

/* ==== tool calls ==== */

struct flint_tool_parser {
    int in_call;
    int count;
    char prefix[32];
    flint_sbuf pend;
};

flint_tool_parser *flint_tool_parser_new(const char *id_prefix) {
    flint_tool_parser *p = flint_xcalloc(1, sizeof *p);
    snprintf(p->prefix, sizeof p->prefix, "%s", id_prefix ? id_prefix : "call");
    return p;
}

void flint_tool_parser_free(flint_tool_parser *p) {
    if (!p) return;
    flint_sbuf_free(&p->pend);
    free(p);
}

int flint_tool_count(const flint_tool_parser *p) { return p->count; }

/* The JSON between the tags: {"name": string, "arguments": object | string}. */
static cJSON *make_call(flint_tool_parser *p, const char *s, size_t n) {
    char *txt = flint_xmalloc(n + 1);
    memcpy(txt, s, n);
    txt[n] = 0;
    cJSON *j = cJSON_Parse(txt);
    free(txt);
    const cJSON *name = j ? cJSON_GetObjectItemCaseSensitive(j, "name") : NULL;
    if (!cJSON_IsObject(j) || !cJSON_IsString(name) || !name->valuestring[0]) {
        cJSON_Delete(j);
        return NULL;
    }
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(j, "arguments");
    if (!args) args = cJSON_GetObjectItemCaseSensitive(j, "parameters");
    char *arg_text = !args ? flint_xstrdup("{}")
                     : cJSON_IsString(args) ? flint_xstrdup(args->valuestring) : flint_json_dumps_py(args);
    cJSON *call = cJSON_CreateObject(), *fn;
    char id[64];
    snprintf(id, sizeof id, "%s_%d", p->prefix, p->count);
    cJSON_AddStringToObject(call, "id", id);
    cJSON_AddStringToObject(call, "type", "function");
    fn = cJSON_AddObjectToObject(call, "function");
    cJSON_AddStringToObject(fn, "name", name->valuestring);
    cJSON_AddStringToObject(fn, "arguments", arg_text);
    free(arg_text);
    cJSON_Delete(j);
    p->count++;
    return call;
}

static void tool_run(flint_tool_parser *p, flint_sbuf *c, cJSON *calls, int final) {
    static const char open[] = "<tool_call>", close[] = "</tool_call>";
    flint_sbuf *q = &p->pend;
    for (;;) {
        if (!p->in_call) {
            char *at = q->n ? strstr(q->p, open) : NULL;
            if (at) {
                flint_sbuf_add(c, q->p, (size_t)(at - q->p));
                consume(q, (size_t)(at - q->p));
                p->in_call = 1;
                continue;
            }
            size_t hold = final ? 0 : partial_tag(q->p, q->n, open);
            flint_sbuf_add(c, q->p, q->n - hold);
            consume(q, q->n - hold);
            return;
        }
        /* q starts with "<tool_call>" */
        char *end = strstr(q->p + strlen(open), close);
        if (!end) {
            if (final) { /* never closed: give the text back */
                flint_sbuf_add(c, q->p, q->n);
                flint_sbuf_clear(q);
                p->in_call = 0;
            }
            return;
        }
        size_t body = strlen(open), total = (size_t)(end - q->p) + strlen(close);
        cJSON *call = make_call(p, q->p + body, (size_t)(end - q->p) - body);
        if (call) cJSON_AddItemToArray(calls, call);
        else flint_sbuf_add(c, q->p, total); /* malformed: plain content */
        consume(q, total);
        p->in_call = 0;
    }
}

void flint_tool_feed(flint_tool_parser *p, const char *s, size_t n, flint_sbuf *c, cJSON *calls) {
    flint_sbuf_add(&p->pend, s, n);
    tool_run(p, c, calls, 0);
}

void flint_tool_finish(flint_tool_parser *p, flint_sbuf *c, cJSON *calls) {
    if (!p->pend.p) flint_sbuf_add(&p->pend, "", 0);
    tool_run(p, c, calls, 1);
}
