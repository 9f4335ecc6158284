"""Consistency checks the recipe runs (and a test can call): the packed training forward of the
drafter equals its cached inference path, and the acceptance rule emits exactly p.
`python3 -m drafter.train.selftest` runs them on random weights (CPU, seconds)."""
import math

import torch

from .common import log
from .dspark import DSpark, DSparkConfig
from .qwen3 import Qwen3, TargetConfig
from .specloop import _chi2_crit, check_acceptance_rule, plain_generate, spec_generate


@torch.no_grad()
def check_train_infer_consistency(target, drafter, ids, prompt_len, device="cpu", tol=1e-4):
    """For one sequence, the block logits of every anchor computed by the packed training forward
    (all anchors at once, flex-style mask) must equal the inference path (context cache written
    row by row, one block forward at position P). Returns the max abs difference of hfin."""
    target.eval()
    drafter.eval()
    ids = ids.to(device).view(1, -1)
    S = ids.shape[1]
    taps_ids = list(drafter.cfg.target_layer_ids)
    _, taps = target(ids, taps=taps_ids)
    lm = torch.zeros(1, S, dtype=torch.bool, device=device)
    lm[0, prompt_len:] = True
    g = torch.Generator(device=device).manual_seed(0)
    o = drafter.train_blocks(ids, lm, taps, g)
    cache = drafter.new_cache(1, S + drafter.cfg.block_size + 1, device)
    drafter.write_context(cache, taps, torch.arange(S, device=device).view(1, S))
    worst = 0.0
    for a in range(o["anchors"].shape[1]):
        if not bool(o["keep"][0, a]):
            continue
        P = o["anchors"][0, a].view(1)
        _, hf = drafter.draft_block(cache, ids[0, P], P)
        worst = max(worst, float((hf[0] - o["hfin"][0, a]).abs().max()))
    log(f"train/infer consistency: {int(o['keep'].sum())} anchors, max |hfin diff| = {worst:.3g}")
    assert worst < tol, worst
    return worst


def greedy_reference(target, prompts, eos_ids, max_new, device):
    """Target-only greedy outputs and top1 - top2 logit gaps (shared by the drafters' checks)."""
    return plain_generate(target, prompts, list(range(len(prompts))), temperature=0.0, max_new=max_new,
                          eos_ids=eos_ids, device=device, record_gap=True)


def check_greedy_lossless(target, drafter, prompts, eos_ids, max_new, device, K=7, tie_gap=1e-3, reference=None):
    """Speculative greedy output must equal target-only greedy output. A divergence is tolerated
    only at a near-tie of the target (top1 - top2 logit gap < tie_gap, where different kernels may
    break the tie differently); it is reported either way."""
    plain, gaps = reference or greedy_reference(target, prompts, eos_ids, max_new, device)
    spec = spec_generate(target, drafter, prompts, list(range(len(prompts))), K=K, temperature=0.0, max_new=max_new,
                         eos_ids=eos_ids, device=device)["outputs"]
    equal, ties, bad = 0, 0, []
    for i, (a, b) in enumerate(zip(plain, spec)):
        if a == b:
            equal += 1
            continue
        j = next((k for k in range(min(len(a), len(b))) if a[k] != b[k]), min(len(a), len(b)))
        gap = gaps[i][j] if j < len(gaps[i]) else float("inf")
        if gap < tie_gap:
            ties += 1
        else:
            bad.append({"prompt": i, "first_diff": j, "gap": gap})
    res = {"prompts": len(prompts), "identical": equal, "near_tie_divergences": ties, "failures": bad}
    log("greedy lossless check:", res)
    assert not bad, f"speculative greedy != target greedy: {bad}"
    return res


def _two_sample_chi2(a, b, min_count=5):
    """Two-sample chi-square on categorical counts (rare categories pooled)."""
    from collections import Counter

    ca, cb = Counter(a), Counter(b)
    cats = [c for c in set(ca) | set(cb) if ca[c] + cb[c] >= min_count]
    rest_a = sum(v for c, v in ca.items() if c not in cats)
    rest_b = sum(v for c, v in cb.items() if c not in cats)
    rows = [(ca[c], cb[c]) for c in cats] + ([(rest_a, rest_b)] if rest_a + rest_b > 0 else [])
    na, nb = sum(x for x, _ in rows), sum(y for _, y in rows)
    k1, k2 = math.sqrt(nb / na), math.sqrt(na / nb)
    stat = sum((x * k1 - y * k2) ** 2 / (x + y) for x, y in rows if x + y > 0)
    return stat, len(rows) - 1


def check_sampling_lossless(target, drafter, prompt, eos_ids, device, rows=2000, positions=3, temperature=1.0,
                            top_p=0.95, K=7, seed=99):
    """Speculative sampling must reproduce the target's distribution: the tokens at output positions
    1..positions over `rows` independent draws (different row keys) of one prompt, speculative vs
    target-only, compared with a two-sample chi-square (p = 1e-4). Position 0 is the prefill token."""
    keys = list(range(rows))
    prompts = [prompt] * rows
    spec = spec_generate(target, drafter, prompts, keys, K=K, temperature=temperature, top_p=top_p,
                         max_new=positions + 1, eos_ids=eos_ids, device=device, seed=seed)["outputs"]
    plain = plain_generate(target, prompts, [k + 10**6 for k in keys], temperature=temperature, top_p=top_p,
                           max_new=positions + 1, eos_ids=eos_ids, device=device, seed=seed)
    res = {"rows": rows, "positions": {}}
    ok = True
    for j in range(1, positions + 1):
        a = [o[j] if len(o) > j else -1 for o in spec]
        b = [o[j] if len(o) > j else -1 for o in plain]
        stat, df = _two_sample_chi2(a, b)
        crit = _chi2_crit(max(df, 1))
        res["positions"][j] = {"chi2": round(stat, 2), "df": df, "crit_p1e-4": round(crit, 2), "pass": stat < crit}
        ok = ok and stat < crit
    res["pass"] = ok
    log("sampling lossless check:", res)
    assert ok, f"speculative sampling distribution differs from the target's: {res}"
    return res


def _random_pair(device="cpu", seed=0):
    torch.manual_seed(seed)
    tc = TargetConfig(vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=4,
                      num_attention_heads=2, num_key_value_heads=1, head_dim=32)
    t = Qwen3(tc).to(device).eval()
    dc = DSparkConfig(vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, head_dim=32, mask_token_id=299,
                      target_layer_ids=[1, 2], num_target_layers=4, markov_rank=16, enable_confidence_head=True)
    d = DSpark(dc, embed_weight=t.embed_weight).to(device).eval()
    for p in d.parameters():  # make the random drafter non-trivial
        if p.requires_grad:
            p.data.normal_(0, 0.2 if p.dim() > 1 else 1.0)
    return t, d


def run_all(device="cpu"):
    t, d = _random_pair(device)
    ids = torch.randint(0, 290, (40,))
    out = {"train_infer_max_diff": check_train_infer_consistency(t, d, ids, 12, device)}
    prompts = [torch.randint(0, 290, (n,)).tolist() for n in (5, 9, 17, 3)]
    out["greedy_lossless"] = check_greedy_lossless(t, d, prompts, eos_ids=[298], max_new=30, device=device)
    out["sampling_lossless"] = check_sampling_lossless(t, d, prompts[1], [298], device, rows=3000, top_p=0.9)
    with torch.no_grad():  # EOS in the middle of outputs (as accepted draft and as correction/bonus token)
        t.model.embed_tokens.weight[298] *= 3.0
    many = [torch.randint(0, 290, (n,)).tolist() for n in range(3, 40)]
    out["greedy_lossless_eos"] = check_greedy_lossless(t, d, many, eos_ids=[298], max_new=40, device=device)
    out["acceptance_rule"] = check_acceptance_rule(device=device)
    return out


if __name__ == "__main__":
    run_all()
