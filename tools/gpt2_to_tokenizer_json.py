#!/usr/bin/env python3
"""Turn OpenAI's GPT-2 encoder.json + vocab.bpe into a standard Hugging Face tokenizer.json.

Why: shared/tokenizers/gpt2 holds the original OpenAI files (see its PROVENANCE.md), but flint
reads only tokenizer.json. The output has the same shape as the `gpt2` tokenizer.json on the
Hugging Face hub: ByteLevel pre-tokenizer (GPT-2 regex, no prefix space), ByteLevel decoder and
post-processor, <|endoftext|> (id 50256) as a special added token, merges as "a b" strings (the
older tokenizers encoding; Qwen3's file uses [a, b] pairs, so flint's tests see both).

Standard library only: the test suite runs this at build time where `tokenizers` may be absent.

usage: gpt2_to_tokenizer_json.py ENCODER_JSON VOCAB_BPE OUT_TOKENIZER_JSON
"""
import json
import os
import sys


def convert(encoder_path, bpe_path):
    with open(encoder_path, encoding="utf-8") as f:
        encoder = json.load(f)
    merges = []
    with open(bpe_path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            line = line.rstrip("\n")
            # tokenizers skips the "#version" header; a blank final line is not a merge.
            if line.startswith("#version") or line == "":
                continue
            parts = line.split(" ")
            if len(parts) != 2:
                raise ValueError(f"{bpe_path}:{lineno}: expected 'left right', got {line!r}")
            merges.append(line)

    eot = "<|endoftext|>"
    if encoder.get(eot) != 50256:
        raise ValueError(f"{encoder_path}: {eot} is not id 50256")
    vocab = dict(sorted(encoder.items(), key=lambda kv: kv[1]))
    byte_level = {"add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {"id": 50256, "content": eot, "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": False, "special": True}
        ],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", **byte_level},
        "post_processor": {"type": "ByteLevel", **byte_level},
        "decoder": {"type": "ByteLevel", **byte_level},
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": "",
            "end_of_word_suffix": "",
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": vocab,
            "merges": merges,
        },
    }


def main(argv):
    if len(argv) != 4 or argv[1] in ("-h", "--help"):
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    tok = convert(argv[1], argv[2])
    out = argv[3]
    tmp = out + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False, separators=(",", ":"))
    os.replace(tmp, out)  # never leave a half-written file for the build to pick up
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
