#!/usr/bin/env python3
"""Golden fixtures for flint's C drafter, from the PyTorch reference drafter (drafter/train/dspark.py).

A small random DSpark drafter is built over the tiny Qwen3 golden target (tests/fixtures/golden/qwen3)
and written in three checkpoint forms:
  dense/        DeepSpec dense format (Qwen3DSparkModel), embedding/LM head shared with the target
  spec_full/    speculators format, full vocabulary, sample_from_anchor true (twin of dense/)
  spec_reduced/ speculators format, reduced draft vocabulary (d2t offsets), own lm_head rows
  spec_fillin/  speculators format without sample_from_anchor (the 1+N fill-in layout)
reference.json holds, for a prompt and several anchor positions: the base logits U of every slot,
the Markov-corrected logits and confidences along the greedy chain, and the greedy drafts, for the
dense drafter (anchor-first) and for the fill-in twin. Run on CPU (fp32):
  python3 tools/make_drafter_golden.py --out tests/fixtures/drafter
"""
import argparse
import json
import os
import sys

import torch
from safetensors.torch import save_file

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from drafter.train.dspark import DSpark, DSparkConfig  # noqa: E402
from drafter.train.export import load_target, save_drafter  # noqa: E402

ROOT = os.path.join(os.path.dirname(__file__), "..")


def round6(t):
    return [float(f"{v:.7g}") for v in t.flatten().tolist()]


def greedy_chain(m, U, hfin, anchor, first_slot, n):
    """Markov loop along the argmax path: returns corrected logits, confidences and drafts."""
    prev = torch.tensor([anchor])
    Ls, cs, xs = [], [], []
    for k in range(n):
        s = first_slot + k
        L = m.markov_logits(U[:, s], prev)
        c = m.confidence_logit(hfin[:, s], prev)
        x = int(L.argmax(-1).item())
        Ls.append(L[0])
        cs.append(float(torch.sigmoid(c)[0].item()) if c is not None else 1.0)
        xs.append(x)
        prev = torch.tensor([x])
    return torch.stack(Ls), cs, xs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "fixtures", "drafter"))
    ap.add_argument("--target", default=os.path.join(ROOT, "tests", "fixtures", "golden", "qwen3"))
    a = ap.parse_args()
    torch.manual_seed(1234)
    target, tcj = load_target(a.target)
    tc = target.cfg
    dcfg = DSparkConfig(vocab_size=tc.vocab_size, hidden_size=tc.hidden_size, intermediate_size=tc.intermediate_size,
                        num_hidden_layers=2, num_attention_heads=tc.num_attention_heads,
                        num_key_value_heads=tc.num_key_value_heads, head_dim=tc.head_dim, mask_token_id=tc.vocab_size - 3,
                        target_layer_ids=[0, 1], num_target_layers=tc.num_hidden_layers, rms_norm_eps=tc.rms_norm_eps,
                        rope_theta=tc.rope_theta, block_size=5, markov_rank=16, enable_confidence_head=True,
                        confidence_head_with_markov=True)
    m = DSpark(dcfg)
    with torch.no_grad():  # larger weights than the training init, so every path matters
        for name, p in m.named_parameters():
            if p.dim() >= 1 and "norm" not in name:
                p.normal_(0, 0.25)
            elif "norm" in name:
                p.uniform_(0.5, 1.5)
    m.set_shared_embedding(target.embed_weight.detach())
    # bf16-round every trainable weight so the checkpoint (bf16) and this reference agree
    with torch.no_grad():
        for n_, p in m.named_parameters():
            if p.requires_grad:
                p.copy_(p.to(torch.bfloat16).float())
    m.eval()

    out = a.out
    dense = os.path.join(out, "dense")
    cj, names, shapes = save_drafter(m, tcj, dense, head_copies=False)

    # speculators twins: same tensors, another config; reduced vocab keeps the rows in `keep`
    sd = {k: v for k, v in m.state_dict().items() if k not in ("embed_tokens.weight", "lm_head.weight")}
    tl = {k: cj[k] for k in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                             "num_key_value_heads", "head_dim", "rms_norm_eps", "vocab_size", "hidden_act",
                             "max_position_embeddings", "rope_parameters", "attention_bias") if k in cj}
    tl["model_type"] = "qwen3"
    base = {"speculators_model_type": "dspark", "architectures": ["DSparkSpeculator"], "transformer_layer_config": tl,
            "block_size": dcfg.block_size, "target_hidden_size": tc.hidden_size,
            "aux_hidden_state_layer_ids": [i + 1 for i in dcfg.target_layer_ids], "mask_token_id": dcfg.mask_token_id,
            "markov_rank": dcfg.markov_rank, "markov_head_type": "vanilla", "enable_confidence_head": True,
            "confidence_head_with_markov": True}

    def write(d, cfg, tensors):
        os.makedirs(d, exist_ok=True)
        # lm_head rows are the target's fp32 embedding: kept in f32 so the twins stay exact
        save_file({k: (v.detach().float() if k == "lm_head.weight" else v.detach().to(torch.bfloat16)).contiguous()
                   if v.is_floating_point() else v.contiguous()
                   for k, v in tensors.items()}, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2)

    write(os.path.join(out, "spec_full"), dict(base, draft_vocab_size=tc.vocab_size, sample_from_anchor=True), sd)
    keep = torch.tensor([v for v in range(tc.vocab_size) if v % 3 != 1])  # drop a third of the vocabulary
    red = dict(sd)
    red["lm_head.weight"] = m.lm_head.weight[keep]
    red["markov_head.markov_w2.weight"] = sd["markov_head.markov_w2.weight"][keep]
    red["d2t"] = (keep - torch.arange(len(keep))).to(torch.int64)
    write(os.path.join(out, "spec_reduced"), dict(base, draft_vocab_size=len(keep), sample_from_anchor=True), red)
    write(os.path.join(out, "spec_fillin"), dict(base, draft_vocab_size=tc.vocab_size), sd)

    # reference: a 24-token prompt, taps from the target, anchors at several positions
    g = torch.Generator().manual_seed(7)
    prompt = torch.randint(0, tc.vocab_size - 4, (1, 24), generator=g)
    with torch.no_grad():
        _, taps = target(prompt, taps=tuple(dcfg.target_layer_ids))
        cache = m.new_cache(1, 64, "cpu")
        m.write_context(cache, taps, torch.arange(24).view(1, 24))
        cases = []
        for P in (1, 9, 23):
            anchor = int(prompt[0, P].item())
            U, hfin = m.draft_block(cache, torch.tensor([anchor]), torch.tensor([P]))
            L, cs, xs = greedy_chain(m, U, hfin, anchor, 0, dcfg.block_size)
            Lf, csf, xsf = greedy_chain(m, U, hfin, anchor, 1, dcfg.block_size - 1)  # fill-in reading
            cases.append({"pos": P, "anchor": anchor, "base_logits": round6(U[0]), "logits": round6(L),
                          "confidence": cs, "drafts": xs, "fillin_logits": round6(Lf), "fillin_confidence": csf,
                          "fillin_drafts": xsf})
    ref = {"prompt": prompt[0].tolist(), "tap_layers": dcfg.target_layer_ids, "block_size": dcfg.block_size,
           "vocab_size": tc.vocab_size, "reduced_keep": keep.tolist(), "cases": cases}
    with open(os.path.join(out, "reference.json"), "w") as f:
        json.dump(ref, f)
    print(f"wrote {out}: drafter tensors {len(names)}; {len(cases)} anchor cases")


if __name__ == "__main__":
    main()
