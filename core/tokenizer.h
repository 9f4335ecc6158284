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

/* Load a tokenizer.json file. A model, normalizer, pre-tokenizer, post-processor or decoder flint
 * does not implement is refused with a message naming it (never approximated). */
flint_tokenizer *flint_tokenizer_open(const char *tokenizer_json, flint_err *err);
/* Load DIR/tokenizer.json and, when present, DIR/tokenizer_config.json: bos_token / eos_token
 * (strings or {"content": ...}), chat_template (a string, or the [{name, template}] list whose
 * "default" is taken; DIR/chat_template.jinja when the config has none), and add_bos_token /
 * add_eos_token, which rebuild the post-processor as transformers does for the Llama and Gemma
 * tokenizer classes (and only for those). */
flint_tokenizer *flint_tokenizer_open_dir(const char *dir, flint_err *err);
void flint_tokenizer_close(flint_tokenizer *t);

int flint_tokenizer_vocab_size(const flint_tokenizer *t); /* model vocab + added tokens (max id + 1) */
/* id of an exact token string (vocab or added token), -1 if none */
int32_t flint_tokenizer_token_id(const flint_tokenizer *t, const char *token);
/* raw vocabulary string of an id (byte-level form, e.g. "Ġthe"; an added token's content), NULL
 * if no token has that id */
const char *flint_tokenizer_token_str(const flint_tokenizer *t, int32_t id);
/* whether decode(skip_special=1) drops the id: its string is a special added token */
int flint_tokenizer_is_special(const flint_tokenizer *t, int32_t id);
/* The exact bytes id adds to decoded text in the middle of a sequence (not as the first token,
 * whose leading space SentencePiece-style decoders drop): byte-level tokens through the byte
 * table reversed, "▁" as a space, <0xNN> as the raw byte NN (possibly part of a UTF-8
 * character; decode's U+FFFD repair does not apply), added and special tokens as their content
 * (check flint_tokenizer_is_special). Copies min(len, cap) bytes to out, no NUL, and returns
 * len (retry with a larger buffer when len > cap); 0 for an id no token owns; -1 for an id out of
 * range or out of memory. */
int flint_tokenizer_token_bytes(const flint_tokenizer *t, int32_t id, char *out, size_t cap);
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
 * NUL-terminated. Invalid byte sequences become U+FFFD as in HF; ids no token has are skipped,
 * as HF does. */
int flint_tokenizer_decode(const flint_tokenizer *t, const int32_t *ids, int n, int skip_special, char **out,
                           size_t *out_len, flint_err *err);

/* Incremental decoder for streaming: push one token at a time, get back only complete UTF-8
 * characters; the concatenation of every push plus the final flush equals
 * flint_tokenizer_decode of the whole sequence, byte for byte. Exactness has a price in one
 * place: HF decodes a run of byte-fallback tokens (<0xE4><0xBD><0xA0>...) as one string when the
 * whole run is valid UTF-8 and as one U+FFFD per byte otherwise, so such a run is held back until
 * a token that is not a byte ends it (or flush).
 * The state lives inside the struct (about 2.5 KB; it may be moved, the moved-to copy carrying
 * on); only a long byte-fallback run or a very long piece of text spills to the heap, which
 * flush or flint_detok_free gives back. The fields below are laid out here only because callers
 * allocate flint_detok; they are private to core/tokenizer_decode.c. */
#define FLINT_DETOK_MAX_STEPS 8 /* decoder steps a tokenizer may have */
typedef struct flint_detok_buf_ {
    char *heap; /* NULL while the bytes fit in `in` */
    uint32_t n, cap;
    char in[96];
} flint_detok_buf_;
typedef struct flint_detok_step_ {
    flint_detok_buf_ asm_, hold;
    long tokens;
    int lead_left, emitted, assembling;
} flint_detok_step_;

typedef struct flint_detok {
    const flint_tokenizer *tok;
    int skip_special;
    int n_tokens; /* tokens pushed so far */
    int finished;
    flint_detok_step_ step[FLINT_DETOK_MAX_STEPS + 1];
    flint_detok_buf_ out;
} flint_detok;

void flint_detok_init(flint_detok *d, const flint_tokenizer *t, int skip_special);
/* Appends at most cap-1 bytes to out (NUL-terminated, cut only between characters); returns the
 * number of bytes written, or -1 with err (out of memory, cap < 8). Text that does not fit stays
 * queued and comes out first on the next push or flush; cap >= 64 plus the longest token never
 * leaves anything queued except after a long byte-fallback run. */
int flint_detok_push(flint_detok *d, int32_t id, char *out, size_t cap, flint_err *err);
/* Ends the stream: emits everything still held (incomplete characters as U+FFFD, as HF) and
 * leaves d ready for a new stream. When the rest does not fit in cap-1 bytes it writes nothing
 * and returns -1 with err; the state is kept, so a call with a larger buffer succeeds. */
int flint_detok_flush(flint_detok *d, char *out, size_t cap, flint_err *err);
/* Drops a stream abandoned before its flush (stop string, cancel), giving back any heap spill;
 * d is then ready for a new stream. Safe to call any time. */
void flint_detok_free(flint_detok *d);

#ifdef __cplusplus
}
#endif
#endif
