#!/usr/bin/env python3
"""A random-weight DSpark drafter (DeepSpec dense format) for any target directory: the shapes
and config fields are real, the weights are noise, so acceptance is near zero. For tests of the
speculative machinery on targets that have no trained drafter (e.g. the converted stories260K).
Embedding and LM head are left out (shared with the target). numpy + safetensors only.

  python3 tools/make_random_drafter.py TARGET_DIR OUT_DIR [--layers 1] [--block 7] [--taps 1,3]
      [--markov-rank 16] [--seed 0] [--dtype f32|f16]

TARGET_DIR may instead be a synthetic shape of `--load-format dummy` (qwen3-8b, qwen3-0.6b; the
numbers of target/config.c): the drafter for `flint bench --load-format dummy --model-shape NAME
--speculative-config '{"model": OUT_DIR}'`, e.g. DSpark's qwen3-8b drafter shape:
  python3 tools/make_random_drafter.py qwen3-8b /tmp/d8b --layers 5 --taps 1,9,17,25,33 \
      --markov-rank 64 --dtype f16       (2.3 GB)
"""
import argparse
import json
import os

import numpy as np
from safetensors.numpy import save_file


# target/config.c's synthetic shapes (flint_target_shape_config)
SHAPE_BASE = {"vocab_size": 151936, "head_dim": 128, "max_position_embeddings": 40960, "rms_norm_eps": 1e-6,
              "rope_theta": 1000000.0}
SHAPES = {"qwen3-8b": {"hidden_size": 4096, "intermediate_size": 12288, "num_hidden_layers": 36,
                       "num_attention_heads": 32, "num_key_value_heads": 8},
          "qwen3-0.6b": {"hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 28,
                         "num_attention_heads": 16, "num_key_value_heads": 8}}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("target")
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=1)
    ap.add_argument("--block", type=int, default=7)
    ap.add_argument("--taps", default=None, help="comma-separated target layer ids (default: spread)")
    ap.add_argument("--markov-rank", type=int, default=16)
    ap.add_argument("--mask-token-id", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dtype", default="f32", choices=["f32", "f16"], help="f16 halves the file of a large shape")
    a = ap.parse_args()
    if a.target in SHAPES:
        t = dict(SHAPE_BASE, **SHAPES[a.target])
    else:
        t = json.load(open(os.path.join(a.target, "config.json")))
    L, H, V = t["num_hidden_layers"], t["hidden_size"], t["vocab_size"]
    nh, nkv = t["num_attention_heads"], t.get("num_key_value_heads", t["num_attention_heads"])
    hd = t.get("head_dim") or H // nh
    I = t["intermediate_size"]
    taps = [int(x) for x in a.taps.split(",")] if a.taps else sorted({max(0, L // 4), max(0, L - 2)})
    rng = np.random.default_rng(a.seed)

    dt = np.float16 if a.dtype == "f16" else np.float32

    def w(*shape, std=0.05):
        return (rng.standard_normal(shape, dtype=np.float32) * std).astype(dt)

    sd = {"fc.weight": w(H, H * len(taps)), "hidden_norm.weight": np.ones(H, np.float32),
          "norm.weight": np.ones(H, np.float32),
          "markov_head.markov_w1.weight": w(V, a.markov_rank), "markov_head.markov_w2.weight": w(V, a.markov_rank),
          "confidence_head.proj.weight": w(1, H + a.markov_rank), "confidence_head.proj.bias": np.zeros(1, np.float32)}
    for i in range(a.layers):
        p = f"layers.{i}."
        sd.update({p + "input_layernorm.weight": np.ones(H, np.float32),
                   p + "post_attention_layernorm.weight": np.ones(H, np.float32),
                   p + "self_attn.q_proj.weight": w(nh * hd, H), p + "self_attn.k_proj.weight": w(nkv * hd, H),
                   p + "self_attn.v_proj.weight": w(nkv * hd, H), p + "self_attn.o_proj.weight": w(H, nh * hd),
                   p + "self_attn.q_norm.weight": np.ones(hd, np.float32),
                   p + "self_attn.k_norm.weight": np.ones(hd, np.float32),
                   p + "mlp.gate_proj.weight": w(I, H), p + "mlp.up_proj.weight": w(I, H),
                   p + "mlp.down_proj.weight": w(H, I)})
    cfg = {"architectures": ["Qwen3DSparkModel"], "model_type": "qwen3", "hidden_size": H, "intermediate_size": I,
           "num_hidden_layers": a.layers, "num_attention_heads": nh, "num_key_value_heads": nkv, "head_dim": hd,
           "vocab_size": V, "rms_norm_eps": t.get("rms_norm_eps", 1e-6),
           "rope_theta": t.get("rope_theta", (t.get("rope_parameters") or {}).get("rope_theta", 10000.0)),
           "max_position_embeddings": t["max_position_embeddings"], "hidden_act": "silu", "attention_bias": False,
           "tie_word_embeddings": False, "num_target_layers": L, "block_size": a.block,
           "mask_token_id": a.mask_token_id if a.mask_token_id is not None else 0, "target_layer_ids": taps,
           "markov_rank": a.markov_rank, "markov_head_type": "vanilla", "enable_confidence_head": True,
           "confidence_head_with_markov": True, "layer_types": ["full_attention"] * a.layers}
    os.makedirs(a.out, exist_ok=True)
    save_file(sd, os.path.join(a.out, "model.safetensors"))
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    print(f"wrote random DSpark drafter for {a.target} to {a.out} (taps {taps}, block {a.block})")


if __name__ == "__main__":
    main()
