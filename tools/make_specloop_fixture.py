#!/usr/bin/env python3
"""Reference fixture for tests/test_spec_embedded.c (reference part): what the PyTorch reference
speculative loop (drafter/train/specloop.py, spec_generate) does on the embedded pair, so that
flint's engine can be checked against the same algorithm on the same prompts (issue #4: flint's
mean AL on the first 50 GSM8K test prompts at T = 0, K = 7 equals the reference's within 2 %).

Runs on the CPU in fp32: no GPU time was left in the session that wrote the fixture. The models
are 10M + 3.7M parameters, but the loop runs one prompt at a time and syncs with the host every
step, so it took 31 minutes of wall clock on the shared 2-core development machine (mostly
waiting for other jobs' CPU). The models are loaded from the exported files in models/
(drafter/train/export.py), exactly as the recipe's eval stage does.

    python3 tools/make_specloop_fixture.py            # writes tests/fixtures/specloop/gsm8k_k7_t0.json

Prompts: the first 50 questions of evals/data/gsm8k.jsonl (the GSM8K test split, same order) as
one ChatML user turn with the generation prompt (drafter/train/corpus.py chat_prompt, which equals
the chat_template of models/flint-tiny/tokenizer_config.json; checked against transformers'
apply_chat_template below), encoded with models/flint-tiny/tokenizer.json.

Each prompt runs alone (batch 1, DeepSpec's eval setting), so the per-prompt histogram of
accepted drafts is exact and no padding is involved. Greedy (T = 0), K = 7, up to MAX_NEW new
tokens, stopping at <|im_end|> or <|endoftext|> (the recipe's eos_ids).

The fixture holds, per prompt: the question, prompt ids, output ids (the first token comes from
the prefill; an EOS that ended the row is included), verify steps, emitted tokens (accepted
drafts + bonus/correction; an accepted EOS ends a step without one), accepted drafts, the
histogram of accepted counts, and whether the row hit MAX_NEW; plus pooled AL as summarize()
computes it (emitted / steps), and the target-only greedy outputs' agreement with the
speculative ones (the reference's own lossless check).
"""
import argparse
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import torch  # noqa: E402

from drafter.train import corpus as C  # noqa: E402
from drafter.train.export import load_drafter, load_target  # noqa: E402
from drafter.train.specloop import plain_generate, spec_generate, summarize  # noqa: E402

N_PROMPTS, K, MAX_NEW, SEED = 50, 7, 256, 1234


def write_fixture(fx, path):
    """The summary fields indented, then one compact line per prompt (readable diffs, small file)."""
    head = {k: v for k, v in fx.items() if k != "prompts"}
    text = json.dumps(head, indent=1)[:-2] + ',\n "prompts": [\n'
    text += ",\n".join("  " + json.dumps(r, ensure_ascii=False, separators=(",", ":")) for r in fx["prompts"])
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text + "\n ]\n}\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "tests/fixtures/specloop/gsm8k_k7_t0.json"))
    ap.add_argument("--target", default=os.path.join(ROOT, "models/flint-tiny"))
    ap.add_argument("--drafter", default=os.path.join(ROOT, "models/flint-tiny-dspark"))
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)

    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    tok = Tokenizer.from_file(os.path.join(a.target, "tokenizer.json"))
    hft = AutoTokenizer.from_pretrained(a.target)
    eos = [tok.token_to_id(C.IM_END), tok.token_to_id(C.EOT)]
    pad = tok.token_to_id(C.EOT)
    with open(os.path.join(ROOT, "evals/data/gsm8k.jsonl"), encoding="utf-8") as f:
        questions = [json.loads(line)["turns"][0] for line in f][:N_PROMPTS]
    prompts = []
    for q in questions:
        text = C.chat_prompt(q)
        hf_text = hft.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True, tokenize=False)
        assert text == hf_text, (text, hf_text)
        ids = hft(text, add_special_tokens=False)["input_ids"]
        prompts.append(list(ids))

    target, _ = load_target(a.target, "cpu", torch.float32)
    drafter, _ = load_drafter(a.drafter, target_embed=target.embed_weight, device="cpu", dtype=torch.float32)

    t0 = time.time()
    rows, pooled = [], {"outputs": [], "steps": [], "emitted": [], "hist": [0] * (K + 1),
                        "conf_sum": [0.0] * K, "conf_hit": [0.0] * K, "conf_n": [0] * K}
    for i, p in enumerate(prompts):
        r = spec_generate(target, drafter, [p], [i], K=K, temperature=0.0, max_new=MAX_NEW, eos_ids=eos, seed=SEED,
                          device="cpu", cache_dtype=torch.float32, pad_id=pad)
        plain = plain_generate(target, [p], [i], temperature=0.0, max_new=MAX_NEW, eos_ids=eos, seed=SEED,
                               device="cpu", cache_dtype=torch.float32, pad_id=pad)[0]
        out, hist = r["outputs"][0], r["hist"]
        for k in pooled:
            if k == "outputs":
                pooled[k].append(out)
            elif k in ("steps", "emitted"):
                pooled[k].append(r[k][0])
            else:
                pooled[k] = [x + y for x, y in zip(pooled[k], r[k])]
        rows.append({
            "question": questions[i],
            "prompt_ids": p,
            "output_ids": out,
            "steps": r["steps"][0],
            "emitted": r["emitted"][0],
            "accepted": sum(j * h for j, h in enumerate(hist)),
            "hist": hist,
            "hit_max_new": len(out) >= MAX_NEW and out[-1] not in eos,
            "plain_equal": plain == out,
        })
        print(f"prompt {i}: {len(p)} prompt tokens, {len(out)} out, steps {r['steps'][0]}, "
              f"AL {r['emitted'][0] / max(r['steps'][0], 1):.3f}, plain equal {plain == out}", flush=True)
    s = summarize(pooled, K)
    secs = time.time() - t0
    fx = {
        "about": "tools/make_specloop_fixture.py: drafter/train/specloop.py spec_generate on models/flint-tiny + "
                 "models/flint-tiny-dspark, CPU fp32, batch 1 per prompt, greedy",
        "target": os.path.relpath(a.target, ROOT),
        "drafter": os.path.relpath(a.drafter, ROOT),
        "dataset": "evals/data/gsm8k.jsonl (first %d)" % N_PROMPTS,
        "K": K, "temperature": 0.0, "max_new": MAX_NEW, "eos_ids": eos, "seed": SEED,
        "torch": torch.__version__, "threads": a.threads, "seconds": round(secs, 1),
        "al": s["al"],
        "al_definition": "emitted / steps pooled over prompts (summarize); emitted = accepted drafts + the bonus or "
                         "correction token of each verify step, none after an accepted EOS",
        "steps": s["steps"], "tokens": s["tokens"], "accepted": sum(r["accepted"] for r in rows),
        "accepted_hist": s["accepted_hist"], "accept_per_pos": s["accept_per_pos"],
        "hit_max_new": sum(r["hit_max_new"] for r in rows),
        "plain_equal": sum(r["plain_equal"] for r in rows),
        "prompts": rows,
    }
    write_fixture(fx, a.out)
    print(f"AL {s['al']:.4f} over {s['steps']} steps, {fx['accepted']} accepted, {fx['hit_max_new']} rows hit "
          f"max_new, reference spec == plain on {fx['plain_equal']}/{len(rows)}; {secs:.1f} s -> {a.out}")


if __name__ == "__main__":
    main()
