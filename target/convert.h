/* Conversion of foreign checkpoints into the Hugging Face directory form that flint loads
 * (DESIGN.md section 3): config.json, model.safetensors, tokenizer.json, tokenizer_config.json.
 * `flint convert` (cli/cmd_convert.c) is the command-line face of this header. */
#ifndef FLINT_TARGET_CONVERT_H
#define FLINT_TARGET_CONVERT_H

#include "../core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A llama2.c checkpoint (legacy version-0 export, or the version-1 fp32 export with the "ak42"
 * header) plus its tokenizer.bin, written as a LlamaForCausalLM directory in float32:
 * - wq/wk rows are permuted per head from llama2.c's interleaved RoPE pairs (2i, 2i+1) to
 *   Hugging Face's rotate_half pairs (i, i + head_dim/2), as convert_llama_weights_to_hf does;
 * - tokenizer.json is the legacy Llama-2 form (Prepend/Replace normalizer, byte-fallback BPE),
 *   with merges derived from the piece scores as transformers' SentencePieceExtractor does.
 * out_dir is created when missing; files already there are replaced. Every input is validated
 * (sizes against the header, the tokenizer's vocabulary against the model's); errors name the
 * file. */
int flint_convert_llama2c(const char *weights_path, const char *tokenizer_path, const char *out_dir, flint_err *err);

#ifdef __cplusplus
}
#endif
#endif
