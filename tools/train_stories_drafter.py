#!/usr/bin/env python3
"""A small trained DSpark drafter for the converted stories260K (a real pretrained Llama-2 target),
so the CPU tests of the speculative step run with real acceptance (several drafts accepted per
step), not the near-zero acceptance of a random drafter. CPU, about two minutes; deterministic
for a fixed seed and thread count. Uses the project's PyTorch DSpark (drafter/train/dspark.py).

  build/flint convert llama2c --weights models/stories260K/stories260K.bin \\
      --tokenizer models/stories260K/tok512.bin --out /tmp/s260
  python3 tools/train_stories_drafter.py /tmp/s260 tests/fixtures/stories_dspark [--steps 600]

Data: the target's own samples (T = 1) from BOS, 200 tokens each: the drafter learns the
target's distribution, as DSpark's recipe regenerates responses with the target.
"""
import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from drafter.train.dspark import DSpark, DSparkConfig, expected_al  # noqa: E402
from drafter.train.export import save_drafter  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("target")
    ap.add_argument("out")
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--seqs", type=int, default=384)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    torch.set_num_threads(1)
    from transformers import LlamaForCausalLM
    tgt = LlamaForCausalLM.from_pretrained(a.target, torch_dtype=torch.float32).eval()
    tcj = json.load(open(os.path.join(a.target, "config.json")))
    taps = [1, 3]
    t0 = time.time()
    with torch.no_grad():
        seqs = []
        for i in range(0, a.seqs, 64):
            g = tgt.generate(torch.ones(64, 1, dtype=torch.long), do_sample=True, temperature=1.0, top_k=0,
                             max_new_tokens=199, min_new_tokens=199, pad_token_id=0)
            seqs.append(g)
        ids = torch.cat(seqs)[: a.seqs]
        out = tgt(ids, output_hidden_states=True)
        hs = out.hidden_states
        tap_feats = torch.cat([hs[l + 1] for l in taps], dim=-1)
        final = hs[-1]
    print(f"data: {ids.shape[0]} sequences x {ids.shape[1]} tokens in {time.time() - t0:.1f} s", flush=True)
    cfg = DSparkConfig(vocab_size=tcj["vocab_size"], hidden_size=tcj["hidden_size"],
                       intermediate_size=tcj["intermediate_size"], num_hidden_layers=2,
                       num_attention_heads=tcj["num_attention_heads"], num_key_value_heads=tcj["num_key_value_heads"],
                       head_dim=tcj["hidden_size"] // tcj["num_attention_heads"], mask_token_id=0,
                       target_layer_ids=taps, num_target_layers=tcj["num_hidden_layers"],
                       rms_norm_eps=tcj["rms_norm_eps"], rope_theta=tcj.get("rope_theta", 10000.0), block_size=7,
                       markov_rank=32, enable_confidence_head=True, confidence_head_with_markov=True)
    m = DSpark(cfg, embed_weight=tgt.model.embed_tokens.weight.detach())
    with torch.no_grad():
        m.norm.weight.copy_(tgt.model.norm.weight)
    opt = torch.optim.AdamW([p for p in m.parameters() if p.requires_grad], lr=3e-3, weight_decay=0.0)
    gen = torch.Generator().manual_seed(a.seed)
    loss_mask = torch.ones_like(ids)
    loss_mask[:, 0] = 0
    B = 16
    t0 = time.time()
    for step in range(a.steps):
        idx = torch.randint(0, ids.shape[0], (B,), generator=gen)
        lr = 3e-3 * min(1.0, (step + 1) / 30) * (0.1 + 0.9 * (1 - step / a.steps))
        for g_ in opt.param_groups:
            g_["lr"] = lr
        loss, mt = m.train_loss(ids[idx], loss_mask[idx], tap_feats[idx], final[idx], gen, max_anchors=48)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step()
        if step % 100 == 0 or step == a.steps - 1:
            acc = mt.get("accept_by_slot", [])
            print(f"step {step}: loss {loss.item():.3f} ce {mt['ce'].item():.3f} expected AL(T=1) "
                  f"{expected_al(acc):.2f} top1 {[round(x, 2) for x in mt['top1_by_slot']]}", flush=True)
    print(f"trained {a.steps} steps in {time.time() - t0:.1f} s")
    m.eval()
    save_drafter(m, tcj, a.out, head_copies=False)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
