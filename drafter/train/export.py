"""Checkpoint files: the target as a Hugging Face Qwen3ForCausalLM directory, the drafters in the
DeepSpec dense format (research/dspark.md 5.1): config.json = the target's config + DSpark fields,
one model.safetensors in BF16 with the state-dict names of Qwen3DSparkModel (no "model." prefix).
"""
import json
import os

import torch
from safetensors.torch import load_file, save_file

from .dspark import DSpark, DSparkConfig
from .qwen3 import Qwen3, TargetConfig


def round_bf16_(module):
    """Round every parameter through bf16 in place, so in-memory == exported numerics."""
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(p.to(torch.bfloat16).to(p.dtype))


# ------------------------------------------------------------------ target (HF directory)
def save_target(model: Qwen3, out_dir, eos_id, pad_id):
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    c = model.cfg
    hcfg = Qwen3Config(vocab_size=c.vocab_size, hidden_size=c.hidden_size, intermediate_size=c.intermediate_size,
                       num_hidden_layers=c.num_hidden_layers, num_attention_heads=c.num_attention_heads,
                       num_key_value_heads=c.num_key_value_heads, head_dim=c.head_dim, rms_norm_eps=c.rms_norm_eps,
                       rope_theta=c.rope_theta, max_position_embeddings=c.max_position_embeddings,
                       tie_word_embeddings=True, attention_bias=False, use_sliding_window=False,
                       bos_token_id=None, eos_token_id=eos_id, pad_token_id=pad_id)
    hf = Qwen3ForCausalLM(hcfg)
    sd = {k: v.detach().float().cpu() for k, v in model.state_dict().items()}
    missing, unexpected = hf.load_state_dict(sd, strict=False)
    assert not unexpected, unexpected
    assert set(missing) <= {"lm_head.weight"}, missing
    hf.tie_weights()
    hf = hf.to(torch.bfloat16)
    hf.generation_config = GenerationConfig(bos_token_id=None, eos_token_id=eos_id, pad_token_id=pad_id,
                                            do_sample=False, max_new_tokens=256)
    os.makedirs(out_dir, exist_ok=True)
    hf.save_pretrained(out_dir)
    # plain top-level rope_theta too, as the Qwen3 hub configs have it (older readers, flint)
    p = os.path.join(out_dir, "config.json")
    with open(p) as f:
        cj = json.load(f)
    cj["rope_theta"] = c.rope_theta
    cj["architectures"] = ["Qwen3ForCausalLM"]
    with open(p, "w") as f:
        json.dump(cj, f, indent=2)
        f.write("\n")
    return cj


def _safetensors_files(d):
    return sorted(os.path.join(d, f) for f in os.listdir(d) if f.endswith(".safetensors"))


def load_target(d, device="cpu", dtype=torch.float32):
    with open(os.path.join(d, "config.json")) as f:
        cj = json.load(f)
    theta = cj.get("rope_theta") or (cj.get("rope_parameters") or {}).get("rope_theta", 10000.0)
    cfg = TargetConfig(vocab_size=cj["vocab_size"], hidden_size=cj["hidden_size"],
                       intermediate_size=cj["intermediate_size"], num_hidden_layers=cj["num_hidden_layers"],
                       num_attention_heads=cj["num_attention_heads"], num_key_value_heads=cj["num_key_value_heads"],
                       head_dim=cj["head_dim"], rms_norm_eps=cj["rms_norm_eps"], rope_theta=theta,
                       max_position_embeddings=cj["max_position_embeddings"], tie_word_embeddings=True)
    m = Qwen3(cfg)
    sd = {}
    for fp in _safetensors_files(d):
        sd.update(load_file(fp))
    sd.pop("lm_head.weight", None)
    m.load_state_dict({k: v.to(torch.float32) for k, v in sd.items()}, strict=True)
    return m.to(device=device, dtype=dtype).eval(), cj


# ------------------------------------------------------------------ drafter (DeepSpec dense)
def drafter_config_json(dcfg: DSparkConfig, target_cj):
    cj = {k: v for k, v in target_cj.items() if k not in ("architectures", "transformers_version")}
    cj.update({
        "architectures": ["Qwen3DSparkModel"],
        "num_target_layers": dcfg.num_target_layers,
        "num_hidden_layers": dcfg.num_hidden_layers,
        "block_size": dcfg.block_size,
        "tie_word_embeddings": False,
        "layer_types": ["full_attention"] * dcfg.num_hidden_layers,
        "mask_token_id": dcfg.mask_token_id,
        "target_layer_ids": list(dcfg.target_layer_ids),
        "num_anchors": dcfg.num_anchors,
        "enable_confidence_head": bool(dcfg.enable_confidence_head),
        "markov_rank": dcfg.markov_rank,
        "dtype": "bfloat16",
    })
    cj.pop("torch_dtype", None)
    if dcfg.enable_confidence_head:
        cj["confidence_head_with_markov"] = bool(dcfg.confidence_head_with_markov and dcfg.markov_rank > 0)
    if dcfg.markov_rank > 0:
        cj["markov_head_type"] = dcfg.markov_head_type
    return cj


def save_drafter(drafter: DSpark, target_cj, out_dir, head_copies=False):
    """Writes config.json and model.safetensors. head_copies=False leaves out embed_tokens.weight and
    lm_head.weight (bit-identical to the target's tied embedding; loaders alias the target's)."""
    os.makedirs(out_dir, exist_ok=True)
    cj = drafter_config_json(drafter.cfg, target_cj)
    sd = {}
    for k, v in drafter.state_dict().items():
        if not head_copies and k in ("embed_tokens.weight", "lm_head.weight"):
            continue
        sd[k] = v.detach().to(torch.bfloat16).cpu().contiguous().clone()
    save_file(sd, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cj, f, indent=2)
        f.write("\n")
    return cj, sorted(sd.keys()), {k: list(v.shape) for k, v in sd.items()}


def load_drafter(d, target_embed=None, device="cpu", dtype=torch.float32):
    with open(os.path.join(d, "config.json")) as f:
        cj = json.load(f)
    assert cj["architectures"] == ["Qwen3DSparkModel"], cj["architectures"]
    theta = cj.get("rope_theta") or (cj.get("rope_parameters") or {}).get("rope_theta", 10000.0)
    dcfg = DSparkConfig(vocab_size=cj["vocab_size"], hidden_size=cj["hidden_size"],
                        intermediate_size=cj["intermediate_size"], num_hidden_layers=cj["num_hidden_layers"],
                        num_attention_heads=cj["num_attention_heads"], num_key_value_heads=cj["num_key_value_heads"],
                        head_dim=cj["head_dim"], mask_token_id=cj["mask_token_id"],
                        target_layer_ids=list(cj["target_layer_ids"]), num_target_layers=cj["num_target_layers"],
                        rms_norm_eps=cj["rms_norm_eps"], rope_theta=theta, block_size=cj["block_size"],
                        markov_rank=cj.get("markov_rank", 0), markov_head_type=cj.get("markov_head_type", "vanilla"),
                        enable_confidence_head=cj.get("enable_confidence_head", False),
                        confidence_head_with_markov=cj.get("confidence_head_with_markov", False),
                        num_anchors=cj.get("num_anchors", 512))
    m = DSpark(dcfg)
    sd = {k: v.to(torch.float32) for k, v in load_file(os.path.join(d, "model.safetensors")).items()}
    for k in ("embed_tokens.weight", "lm_head.weight"):
        if k not in sd:
            assert target_embed is not None, f"{k} absent: pass the target's embedding"
            sd[k] = target_embed.detach().float().cpu()
    m.load_state_dict(sd, strict=True)
    m.embed_tokens.weight.requires_grad_(False)
    m.lm_head.weight.requires_grad_(False)
    return m.to(device=device, dtype=dtype).eval(), cj
