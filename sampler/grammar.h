/* Structured output: the OpenAI `response_format` ({"type": "json_object"} or {"type":
 * "json_schema", "json_schema": {"name", "schema", "strict"}}) as a token-level grammar mask.
 *
 * Why a byte automaton plus a vocabulary trie: tokens cut JSON anywhere (`":"`, `},{"`, half of a
 * UTF-8 character), so the grammar runs on bytes and a token is allowed when all of its bytes
 * are; the mask is a depth-first walk over a trie of every token's bytes carrying the automaton
 * state, so one failing prefix prunes every token that shares it.
 *
 * The engine, for a constrained request: masks the target's logits at every verify row with the
 * state reached along the draft (disallowed -> -inf) before the lossless acceptance, advances the
 * committed state only along emitted tokens, and lets EOS through only when the value is
 * complete. With the target masked and renormalised, speculative acceptance against an unmasked
 * draft stays exact (tests/test_grammar.c checks it by chi-square).
 *
 * What is generated (choices made so that every response is valid and every generation ends):
 *  - Compact JSON only: no whitespace outside strings, so a response cannot spin in whitespace.
 *  - Strings: at most 64 characters unless maxLength says otherwise (max(64, minLength) when only
 *    minLength is given; maxLength above 65535 is treated as 65535). Escapes \" \\ \/ \b \f \n
 *    \r \t \uXXXX are allowed (surrogates only as a well-formed pair, no \u0000); other
 *    characters raw, as well-formed UTF-8; raw control characters never.
 *  - Numbers: -?(0|[1-9]d*)(.d+)?([eE][+-]?d{1,2})? with at most 15 digits before the exponent;
 *    integers without fraction or exponent.
 *  - Arrays: at most 8 items unless maxItems (max(8, minItems) when only minItems is given).
 *  - Objects with "properties": the properties in schema order, each optional one present or
 *    skipped, required ones always present; never any other property (whatever
 *    additionalProperties says: leaving extras out is always valid).
 *  - Free-form values (json_object, {}, an object without "properties", an array without
 *    "items"): objects of at most 16 keys (duplicates not prevented), arrays of at most 8 items,
 *    at most 16 nested containers.
 *  - enum / const: exactly the compact serialisation of each value (strings escaped minimally:
 *    \" \\ \b \f \n \r \t, other controls \u00XX, everything else raw; integral numbers below
 *    1e15 without a fraction, others in the shortest %g form that reads back exactly).
 *
 * Supported schema keywords: type (a name or a list), properties, required,
 * additionalProperties (accepted, extras never generated), items (a schema, true or false),
 * minItems, maxItems, minLength, maxLength, enum, const, anyOf, boolean schemas (true; false is
 * refused). Annotations are ignored: title, description, default, examples, $schema, $id,
 * $comment, $defs, definitions, deprecated, readOnly, writeOnly. Anything else ($ref, pattern,
 * format, minimum, oneOf, allOf, not, patternProperties, prefixItems, ...) is refused with an
 * error naming the keyword and where it is. enum/const may sit beside type, minLength, maxLength,
 * minItems and maxItems (values failing those are dropped); anyOf only beside annotations.
 * "strict" is accepted and has no effect: the grammar is always enforced.
 *
 * The grammar sees the bytes a token adds in the middle of a sequence
 * (flint_tokenizer_token_bytes): a SentencePiece "▁{" is " {" and so never allowed, because a
 * leading space is whitespace outside a string. Special tokens are never allowed, except EOS and
 * EOS only where the value is complete; after EOS only EOS is allowed, so a mask is never empty.
 * Non-special added tokens (Qwen3's <think>, <tool_call>) count as the text they spell.
 *
 * Engine use, one speculative step of a constrained request (committed state S, draft x[0..k)):
 *     copy S into st[0]; valid = 1
 *     for i in 0..k:                                   (k + 1 verify rows)
 *         flint_grammar_mask(g, st[i], allowed, V); logits[i][v] = -inf where !allowed[v]
 *         if i < k: st[i+1] = st[i]; if valid && advance(st[i+1], x[i]) fails: valid = 0
 *     (rows after a refused draft token keep the last state's mask: that token has p = 0, is
 *     rejected, and later rows are never read)
 *     n = flint_accept_draft(sp, k, x, q, masked logits, ...)       (q unmasked, as drawn)
 *     S = st[n]; advance(S, out[n])  (the emitted token: always allowed); stop at EOS.
 * Do not cut the draft at its first refused token instead (making that row the bonus row): that
 * biases the output; and the acceptance test itself must read the masked target
 * (tests/test_grammar.c shows both by chi-square). A drafter may be masked too, if the q passed
 * to flint_accept_draft is the masked, renormalised q the draft was drawn from.
 *
 * Thread safety: a vocab and a grammar are read-only once built and may be shared by any number
 * of threads; a state belongs to its caller. The mask walk recurses once per byte of the longest
 * token (~600 B of stack a level: under 100 KB for Qwen3). */
#ifndef FLINT_SAMPLER_GRAMMAR_H
#define FLINT_SAMPLER_GRAMMAR_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "core/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The per-tokenizer part: every token's bytes in a trie. Build it once per model (~0.1 s and
 * ~8 MB for Qwen3's 151k tokens) and compile every request's grammar against it. */
typedef struct flint_grammar_vocab flint_grammar_vocab;

flint_grammar_vocab *flint_grammar_vocab_build(const flint_tokenizer *tok, flint_err *err);
/* From explicit token byte strings (tests, or a vocabulary without a tokenizer.json): bytes[i]
 * of lens[i] bytes for id i (NULL or length 0: the id never appears); special[i] != 0 (special
 * may be NULL) marks ids that are never allowed except as EOS. */
flint_grammar_vocab *flint_grammar_vocab_from_bytes(int n_vocab, const char *const *bytes, const size_t *lens,
                                                    const uint8_t *special, flint_err *err);
void flint_grammar_vocab_free(flint_grammar_vocab *v);
int flint_grammar_vocab_size(const flint_grammar_vocab *v);

typedef struct flint_grammar flint_grammar;

/* Compile the whole response_format object (JSON text). "json_object" and "json_schema" only:
 * "text" or anything malformed, unsupported or unsatisfiable is -1/NULL with a message in err
 * (FLINT_ERR_INVALID for bad input, FLINT_ERR_UNSUPPORTED for keywords flint does not do).
 * eos_id must be a token of the vocabulary. The vocab must outlive the grammar. */
flint_grammar *flint_grammar_compile_vocab(const char *response_format_json, const flint_grammar_vocab *vocab,
                                           int32_t eos_id, flint_err *err);
/* The same with a private vocab built from tok (convenient; pays the vocab build every call). */
flint_grammar *flint_grammar_compile(const char *response_format_json, const flint_tokenizer *tok, int32_t eos_id,
                                     flint_err *err);
void flint_grammar_free(flint_grammar *g);

/* ---- per-request state: a fixed-size, plain-bytes blob (memcpy copies it; no pointers inside).
 * A state is the set of partial parses still alive (anyOf and number/integer overlaps keep
 * several; at most 16 are kept, the first in a fixed order, which only narrows what may follow
 * and never lets anything invalid through). A few KB. Unused bytes are kept zero, so states
 * reached the same way compare equal with memcmp (usable as a cache key). */
size_t flint_grammar_state_size(const flint_grammar *g);
void flint_grammar_state_init(const flint_grammar *g, void *state);
/* Take one token: 0, or -1 with the state unchanged when the mask forbids it. */
int flint_grammar_advance(const flint_grammar *g, void *state, int32_t token);
/* allowed[0..n_vocab) = 1 for every token advance would take, else 0 (ids beyond the
 * vocabulary: 0). Returns how many are allowed (never 0). */
int flint_grammar_mask(const flint_grammar *g, const void *state, uint8_t *allowed, int n_vocab);
/* Whether the text so far is a complete value (EOS allowed), or EOS was taken. */
int flint_grammar_complete(const flint_grammar *g, const void *state);
/* Whether EOS was taken. */
int flint_grammar_finished(const flint_grammar *g, const void *state);

#ifdef __cplusplus
}
#endif
#endif
