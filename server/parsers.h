/* Output parsers of the chat API (vLLM's --reasoning-parser and --tool-call-parser): they split
 * the model's text into reasoning, content and tool calls, incrementally, so streamed deltas and
 * the final message agree whatever the chunking. Text that may still turn into a tag is held
 * back until it resolves. Malformed tool-call text degrades to plain content, never an error. */
#ifndef FLINT_SERVER_PARSERS_H
#define FLINT_SERVER_PARSERS_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "core/sbuf.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The parsers append to core/sbuf.h buffers. */

/* ==== reasoning: Qwen3 <think>...</think> ====
 * Output that starts with "<think>" is reasoning up to "</think>"; the newlines right after
 * "</think>" are dropped; the rest is content. Output that does not start with "<think>" is all
 * content (e.g. enable_thinking false). */
typedef struct flint_reasoning_parser flint_reasoning_parser;

flint_reasoning_parser *flint_reasoning_new(void);
void flint_reasoning_free(flint_reasoning_parser *p);
void flint_reasoning_feed(flint_reasoning_parser *p, const char *s, size_t n, flint_sbuf *reasoning,
                          flint_sbuf *content);
/* End of output: release anything held back. */
void flint_reasoning_finish(flint_reasoning_parser *p, flint_sbuf *reasoning, flint_sbuf *content);

/* ==== tool calls: Hermes / Qwen format ====
 * <tool_call>\n{"name": F, "arguments": {...}}\n</tool_call>, any number, anywhere in the text.
 * Each complete, well-formed call is appended to `calls` as {"id", "type": "function",
 * "function": {"name", "arguments": JSON text}}; the text outside calls is content. A call whose
 * JSON does not parse, lacks a string "name", or is never closed is given back as content. */
typedef struct flint_tool_parser flint_tool_parser;

flint_tool_parser *flint_tool_parser_new(const char *id_prefix);
void flint_tool_parser_free(flint_tool_parser *p);
void flint_tool_feed(flint_tool_parser *p, const char *s, size_t n, flint_sbuf *content, cJSON *calls);
void flint_tool_finish(flint_tool_parser *p, flint_sbuf *content, cJSON *calls);
int flint_tool_count(const flint_tool_parser *p); /* calls emitted so far */

#ifdef __cplusplus
}
#endif
#endif
