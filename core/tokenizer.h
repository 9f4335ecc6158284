/* Hugging Face tokenizer.json, exactly: byte-level BPE (GPT-2, Qwen2/Qwen3 pre-tokenizer regexes
 * through PCRE2 with UTF and UCP; NFC through utf8proc), added and special tokens, and
 * SentencePiece-style BPE with byte fallback (Llama-2 family). Encoding must equal the
 * `tokenizers` package token for token (tests/test_tokenizer.c checks thousands of real texts). */
#ifndef FLINT_CORE_TOKENIZER_H
#define FLINT_CORE_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct flint_tokenizer flint_tokenizer;

/* Load a tokenizer.json file. */
flint_tokenizer *flint_tokenizer_open(const char *tokenizer_json, flint_err *err);
/* Load DIR/tokenizer.json and, when present, DIR/tokenizer_config.json (bos/eos tokens,
 * add_bos_token, chat_template). */
flint_tokenizer *flint_tokenizer_open_dir(const char *dir, flint_err *err);
void flint_tokenizer_close(flint_tokenizer *t);

int flint_tokenizer_vocab_size(const flint_tokenizer *t); /* model vocab + added tokens (max id + 1) */
/* id of an exact token string (vocab or added token), -1 if none */
int32_t flint_tokenizer_token_id(const flint_tokenizer *t, const char *token);
/* raw vocabulary string of an id (byte-level form, e.g. "Ġthe"), NULL if out of range */
const char *flint_tokenizer_token_str(const flint_tokenizer *t, int32_t id);
int flint_tokenizer_is_special(const flint_tokenizer *t, int32_t id);
/* BOS/EOS from tokenizer_config.json (or the post-processor); -1 when the model has none. */
int32_t flint_tokenizer_bos_id(const flint_tokenizer *t);
int32_t flint_tokenizer_eos_id(const flint_tokenizer *t);
/* The chat_template string of tokenizer_config.json, NULL if none. */
const char *flint_tokenizer_chat_template(const flint_tokenizer *t);

/* Encode UTF-8 text. add_special = 1 applies the post-processor (e.g. BOS for Llama-2), as HF's
 * encode(add_special_tokens=True). Special/added tokens inside the text are matched as HF does.
 * *ids is malloc'd (caller frees); *n receives the count. Invalid UTF-8 is an error. */
int flint_tokenizer_encode(const flint_tokenizer *t, const char *text, size_t len, int add_special, int32_t **ids,
                           int *n, flint_err *err);

/* Decode ids to UTF-8 as HF's decode(ids, skip_special_tokens=skip_special). *out is malloc'd and
 * NUL-terminated. Invalid byte sequences become U+FFFD as in HF. */
int flint_tokenizer_decode(const flint_tokenizer *t, const int32_t *ids, int n, int skip_special, char **out,
                           size_t *out_len, flint_err *err);

/* Incremental decoder for streaming: push one token at a time, get back only complete UTF-8
 * characters; the concatenation of every push plus the final flush equals
 * flint_tokenizer_decode of the whole sequence. */
typedef struct flint_detok {
    const flint_tokenizer *tok;
    int skip_special;
    int n_tokens;            /* tokens pushed so far */
    unsigned char pend[16];  /* bytes of an unfinished UTF-8 character */
    int n_pend;
} flint_detok;

void flint_detok_init(flint_detok *d, const flint_tokenizer *t, int skip_special);
/* Appends at most cap-1 bytes to out (NUL-terminated); returns the number of bytes written, or -1
 * with err when cap is too small (cap >= 64 plus the longest token is always enough). */
int flint_detok_push(flint_detok *d, int32_t id, char *out, size_t cap, flint_err *err);
/* Emit whatever is pending at the end of a stream (as U+FFFD where incomplete). */
int flint_detok_flush(flint_detok *d, char *out, size_t cap, flint_err *err);

#ifdef __cplusplus
}
#endif
#endif
