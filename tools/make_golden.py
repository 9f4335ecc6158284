#!/usr/bin/env python3
"""Golden fixtures for the target model's CPU forward (tests/test_target.c).

flint's forward must agree with Hugging Face transformers, so this script builds two tiny
random-initialised models with fixed seeds, saves them with save_pretrained, and records what
transformers computes for a few prompts:

  qwen3/  Qwen3ForCausalLM, float32 on disk, tied embeddings, head_dim (32) != hidden / heads (16)
  llama/  LlamaForCausalLM, bfloat16 on disk, untied lm_head (exercises the bf16 -> f32 conversion)

Each directory gets a reference.json with:
  prompts       token-id lists of lengths 1, 7, 33, 100
  logits        the logits of the last prompt position (and of every position of the 7-token
                prompt), 7 significant digits
  taps          the residual stream after each layer (HF hidden_states[l + 1]) at the last
                position of the 7-token prompt
  greedy        a 64-step greedy continuation per prompt (manual argmax loop, no EOS stopping)
  min_margin    the smallest top-1 / top-2 logit gap met on the greedy paths (a near tie would
                make the token-for-token comparison fragile; the script refuses gaps < 1e-4)

The references are computed by a float64 copy of the model from the exact weights stored on disk
(for the bf16 model, the bf16-rounded weights), so they carry less rounding than any fp32 run.
HF still does RMSNorm, softmax and the RoPE cos/sin tables in float32 inside a float64 model;
flint computes in fp32 throughout. The float32 HF greedy paths are checked to agree with the
float64 ones.

Deterministic (fixed seeds, CPU, eager attention). Runs on CPU in well under a minute; a GPU is
not needed (and not used, so the output does not depend on the machine):

    python3 tools/make_golden.py --out tests/fixtures/golden
"""
import argparse
import json
import os
import shutil

import torch
import transformers
from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

PROMPT_LENGTHS = [1, 7, 33, 100]
ALL_POSITIONS_PROMPT = 1  # index into PROMPT_LENGTHS: the 7-token prompt keeps every position
GREEDY_STEPS = 64
# Larger than HF's 0.02 so logits are spread and greedy paths are non-trivial. The layers get more
# than the embedding: with tied embeddings a weak residual update makes every path repeat one token.
EMBED_STD = 0.1
LAYER_STD = 0.2


def qwen3_model():
    cfg = Qwen3Config(
        vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32, tie_word_embeddings=True,
        rms_norm_eps=1e-6, rope_theta=1e6, max_position_embeddings=512, attention_bias=False,
        use_sliding_window=False, bos_token_id=None, eos_token_id=[1, 2], hidden_act="silu",
    )
    return "qwen3", cfg, Qwen3ForCausalLM, torch.float32, 1234


def llama_model():
    cfg = LlamaConfig(
        vocab_size=384, hidden_size=96, intermediate_size=256, num_hidden_layers=2,
        num_attention_heads=6, num_key_value_heads=2, tie_word_embeddings=False,
        rms_norm_eps=1e-5, rope_theta=10000.0, max_position_embeddings=256, attention_bias=False,
        mlp_bias=False, bos_token_id=1, eos_token_id=2, hidden_act="silu",
    )
    return "llama", cfg, LlamaForCausalLM, torch.bfloat16, 5678


def build(cfg, cls, disk_dtype, seed):
    torch.manual_seed(seed)
    cfg._attn_implementation = "eager"
    model = cls(cfg).float().eval()
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim >= 2:
                std = EMBED_STD if name.endswith("embed_tokens.weight") else LAYER_STD
                p.copy_(torch.randn(p.shape, generator=g) * std)
            else:  # norm weights: around 1, but not 1, so the multiply is exercised
                p.copy_(1.0 + torch.randn(p.shape, generator=g) * 0.2)
            # what is stored on disk is exactly what the reference computes with
            p.copy_(p.to(disk_dtype).float())
    return model


def fmt(x):
    return float("%.7g" % x)


def last_logits(model, ids):
    with torch.no_grad():
        out = model(torch.tensor([ids]), use_cache=False)
    return out.logits[0]


def greedy(model, ids, steps):
    """Manual argmax loop (full recompute each step, no EOS stop); returns tokens and min margin."""
    seq = list(ids)
    toks, margin = [], float("inf")
    for _ in range(steps):
        lg = last_logits(model, seq)[-1]
        top = torch.topk(lg, 2)
        margin = min(margin, float(top.values[0] - top.values[1]))
        t = int(top.indices[0])
        toks.append(t)
        seq.append(t)
    return toks, margin


def taps_at(model, ids, pos):
    """Residual stream after each decoder layer (output-of-layer convention), via hooks."""
    got = []
    hooks = [layer.register_forward_hook(lambda m, i, o: got.append((o[0] if isinstance(o, tuple) else o)[0, pos]))
             for layer in model.model.layers]
    with torch.no_grad():
        model(torch.tensor([ids]), use_cache=False)
    for h in hooks:
        h.remove()
    return [[fmt(v) for v in t.tolist()] for t in got]


def make(out_root, spec):
    name, cfg, cls, disk_dtype, seed = spec
    model = build(cfg, cls, disk_dtype, seed)
    d = os.path.join(out_root, name)
    if os.path.isdir(d):
        shutil.rmtree(d)
    os.makedirs(d)
    model.to(disk_dtype).save_pretrained(d, safe_serialization=True)
    for extra in ("generation_config.json",):
        if os.path.exists(os.path.join(d, extra)):
            os.remove(os.path.join(d, extra))

    ref64 = build(cfg, cls, disk_dtype, seed).double()
    ref32 = build(cfg, cls, disk_dtype, seed)
    g = torch.Generator().manual_seed(seed + 2)
    prompts = [torch.randint(0, cfg.vocab_size, (n,), generator=g).tolist() for n in PROMPT_LENGTHS]

    cases = []
    min_margin = float("inf")
    for i, p in enumerate(prompts):
        lg = last_logits(ref64, p)
        rows = list(range(len(p))) if i == ALL_POSITIONS_PROMPT else [len(p) - 1]
        toks, margin = greedy(ref64, p, GREEDY_STEPS)
        toks32, _ = greedy(ref32, p, GREEDY_STEPS)
        if toks32 != toks:
            raise SystemExit(f"{name}: prompt {i}: float32 and float64 greedy paths differ; pick other seeds")
        min_margin = min(min_margin, margin)
        case = {
            "prompt": p,
            "logit_positions": rows,
            "logits": [[fmt(v) for v in lg[r].tolist()] for r in rows],
            "greedy": toks,
        }
        if i == ALL_POSITIONS_PROMPT:
            case["tap_position"] = len(p) - 1
            case["taps"] = taps_at(ref64, p, len(p) - 1)
        cases.append(case)
    if min_margin < 1e-4:
        raise SystemExit(f"{name}: a greedy step has a top-2 gap of {min_margin:g}; pick other seeds")

    ref = {
        "model": name,
        "generated_by": "tools/make_golden.py (transformers %s, torch %s)" % (transformers.__version__,
                                                                            torch.__version__.split("+")[0]),
        "reference_dtype": "float64",
        "disk_dtype": str(disk_dtype).replace("torch.", ""),
        "greedy_steps": GREEDY_STEPS,
        "min_margin": fmt(min_margin),
        "cases": cases,
    }
    with open(os.path.join(d, "reference.json"), "w") as f:
        json.dump(ref, f, separators=(",", ":"))
        f.write("\n")
    size = sum(os.path.getsize(os.path.join(d, x)) for x in os.listdir(d))
    print(f"{d}: {size / 1e6:.2f} MB, min greedy margin {min_margin:.4g}")
    if size > 2_000_000:
        raise SystemExit(f"{d} is larger than 2 MB")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="tests/fixtures/golden", help="output folder (default %(default)s)")
    args = ap.parse_args()
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)  # one reduction order whatever the machine
    for spec in (qwen3_model(), llama_model()):
        make(args.out, spec)


if __name__ == "__main__":
    main()
