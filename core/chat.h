/* Chat templates for the model families flint serves: ChatML (Qwen2/Qwen3), Llama-3 and Llama-2.
 * Rather than a Jinja interpreter, each family's template is written out in C and chosen from the
 * chat_template string of tokenizer_config.json (or forced by an option). Output is text that
 * already holds the special tokens; encode it with add_special = 0. */
#ifndef FLINT_CORE_CHAT_H
#define FLINT_CORE_CHAT_H

#include <stddef.h>

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    FLINT_CHAT_NONE = 0, /* no template known */
    FLINT_CHAT_CHATML,   /* <|im_start|>role\ncontent<|im_end|>\n (Qwen2 and plain ChatML) */
    FLINT_CHAT_QWEN3,    /* ChatML plus Qwen3's <think> handling of assistant turns */
    FLINT_CHAT_LLAMA3,   /* <|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|> */
    FLINT_CHAT_LLAMA2,   /* <s>[INST] <<SYS>>..<</SYS>> user [/INST] answer </s> */
} flint_chat_format;

struct cJSON;

typedef struct flint_chat_msg {
    const char *role;    /* system | user | assistant | tool */
    const char *content;
    const char *reasoning_content;  /* assistant, optional (Qwen3 renders it in <think>) */
    const struct cJSON *tool_calls; /* assistant, optional: [{"type": "function", "function":
                                     * {"name": ..., "arguments": "JSON text" | object}}] */
} flint_chat_msg;

typedef struct flint_chat_options {
    int add_generation_prompt; /* default 1 */
    int enable_thinking;       /* Qwen3: 0 adds an empty <think></think> block; default 1 */
    const struct cJSON *tools; /* OpenAI `tools` array, or NULL; ChatML/Qwen3 families only */
} flint_chat_options;

void flint_chat_options_default(flint_chat_options *o);
/* "chatml" | "qwen3" | "llama3" | "llama2"; -1 on an unknown name. */
int flint_chat_parse_format(const char *name, flint_chat_format *out);
const char *flint_chat_format_name(flint_chat_format f);
/* Recognise the family from a tokenizer_config.json chat_template string (NULL -> NONE). */
flint_chat_format flint_chat_detect(const char *chat_template);

/* Render messages; returns a malloc'd string or NULL with err (unknown role, role order the
 * family cannot express, FLINT_CHAT_NONE). bos/eos are the tokenizer's strings, used by the
 * Llama families (may be NULL for ChatML). */
char *flint_chat_render(flint_chat_format f, const flint_chat_msg *msgs, int n, const flint_chat_options *o,
                        const char *bos, const char *eos, flint_err *err);

#ifdef __cplusplus
}
#endif
#endif
