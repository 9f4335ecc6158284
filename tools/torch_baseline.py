#!/usr/bin/env python3
"""Plain PyTorch baseline for flint's target verify step (issue #7).

`flint bench` on the GPU compares its CUDA engine against what stock PyTorch does with the same
shapes, measured in the same session. This script is that baseline: a Qwen3 decoder written as
HF Qwen3ForCausalLM computes it (RMSNorm, per-head q/k RMSNorm, NeoX RoPE, GQA, SwiGLU, tied or
untied LM head) with random bf16 weights, a static KV cache [layers][batch][kv_heads][max_len]
[head_dim] pre-filled with random values up to the context length, and one "verify step": q new
tokens per sequence at positions ctx..ctx+q-1 attend causally to the cache and to themselves
(SDPA, explicit mask), write their K/V into the cache, and end with the LM head over all q rows.
Each (batch, q) step is captured in a CUDA graph; the median of N replays is reported.

  python3 tools/torch_baseline.py --shape qwen3-8b --context 1024 --batch-sizes 1,8,32,64 \\
      --q 1,8 [--replays 50] [--json OUT]

Columns: median ms; achieved TB/s = (weight + KV bytes read) / time; TFLOP/s = (2 * params *
rows + attention flops) / time; x-floor = time / memory floor at 4.3 TB/s and time / compute
floor at 790 TFLOP/s. "params" and the weight bytes count every stored parameter once (the
embedding table included, as the floors quoted in issue #7 do: 3.85 ms at batch 1, 6.06 ms at
batch 64 for qwen3-8b at context 1024). GQA runs without copying K/V: the query heads that share
a KV head are folded into the query length (rows ordered group-major).

  python3 tools/torch_baseline.py --check

runs on the CPU in fp32 without graphs: a tiny model (flint-tiny's shape, and an untied variant)
prefills a random cache through the step itself, then runs a verify step (batch 2, q 3) and a
decode step (q 1), and compares every logit row with an uncached full-sequence forward that uses
its own attention (explicit softmax, repeated KV heads).
"""
import argparse
import json
import math
import os
import statistics
import time

import torch
import torch.nn.functional as F

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MEM_BW = 4.3e12      # bytes/s, H200 HBM3e as used by the floors
PEAK_FLOPS = 790e12  # dense bf16 tensor-core FLOP/s, as used by the floors

SHAPES = {
    "qwen3-8b": dict(hidden=4096, layers=36, heads=32, kv_heads=8, head_dim=128,
                     inter=12288, vocab=151936, tied=False, eps=1e-6, theta=1e6),
    "qwen3-0.6b": dict(hidden=1024, layers=28, heads=16, kv_heads=8, head_dim=128,
                       inter=3072, vocab=151936, tied=True, eps=1e-6, theta=1e6),
}


def load_shape(name):
    """Shape dict for a named model; flint-tiny is read from models/flint-tiny/config.json."""
    if name in SHAPES:
        return dict(SHAPES[name])
    if name != "flint-tiny":
        raise SystemExit(f"unknown shape {name!r}: qwen3-8b, qwen3-0.6b or flint-tiny")
    with open(os.path.join(REPO, "models", "flint-tiny", "config.json")) as f:
        c = json.load(f)
    theta = c.get("rope_theta") or c.get("rope_parameters", {}).get("rope_theta", 10000.0)
    return dict(hidden=c["hidden_size"], layers=c["num_hidden_layers"],
                heads=c["num_attention_heads"], kv_heads=c["num_key_value_heads"],
                head_dim=c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"],
                inter=c["intermediate_size"], vocab=c["vocab_size"],
                tied=bool(c.get("tie_word_embeddings", False)),
                eps=c.get("rms_norm_eps", 1e-6), theta=float(theta))


# ---------------------------------------------------------------- weights and cache

def _rand(shape, std, dtype, device, gen):
    return torch.randn(shape, dtype=dtype, device=device, generator=gen).mul_(std)


def _norm_weight(n, dtype, device, gen):
    return _rand((n,), 0.1, dtype, device, gen).add_(1.0)


def make_layer(cfg, dtype, device, gen):
    """One decoder layer; q/k/v and gate/up are stored fused (same math as separate Linears)."""
    h, d = cfg["hidden"], cfg["head_dim"]
    qkv_out = (cfg["heads"] + 2 * cfg["kv_heads"]) * d
    r = lambda shape, fan_in: _rand(shape, fan_in ** -0.5, dtype, device, gen)
    n = lambda size: _norm_weight(size, dtype, device, gen)
    return dict(attn_norm=n(h), wqkv=r((qkv_out, h), h), q_norm=n(d), k_norm=n(d),
                wo=r((h, cfg["heads"] * d), cfg["heads"] * d), mlp_norm=n(h),
                wgu=r((2 * cfg["inter"], h), h), wd=r((h, cfg["inter"]), cfg["inter"]))


def make_weights(cfg, dtype, device, seed=0):
    gen = torch.Generator(device=device).manual_seed(seed)
    embed = _rand((cfg["vocab"], cfg["hidden"]), 1.0, dtype, device, gen)
    lm_head = embed if cfg["tied"] else _rand((cfg["vocab"], cfg["hidden"]),
                                              cfg["hidden"] ** -0.5, dtype, device, gen)
    layers = [make_layer(cfg, dtype, device, gen) for _ in range(cfg["layers"])]
    return dict(embed=embed, lm_head=lm_head, final_norm=_norm_weight(cfg["hidden"], dtype, device, gen),
                layers=layers)


def param_count(cfg):
    """Every stored parameter once (a tied LM head is the embedding table)."""
    h, d, inter = cfg["hidden"], cfg["head_dim"], cfg["inter"]
    per_layer = (h * (cfg["heads"] + 2 * cfg["kv_heads"]) * d + cfg["heads"] * d * h
                 + 3 * h * inter + 2 * h + 2 * d)
    tables = cfg["vocab"] * h * (1 if cfg["tied"] else 2)
    return cfg["layers"] * per_layer + tables + h


def make_cache(cfg, batch, max_len, dtype, device, seed=1):
    """K and V caches [layers][batch][kv_heads][max_len][head_dim], filled with random values."""
    gen = torch.Generator(device=device).manual_seed(seed)
    shape = (cfg["layers"], batch, cfg["kv_heads"], max_len, cfg["head_dim"])
    return _rand(shape, 1.0, dtype, device, gen), _rand(shape, 1.0, dtype, device, gen)


# ---------------------------------------------------------------- model pieces

def rms_norm(x, w, eps):
    """HF Qwen3RMSNorm: normalise in fp32, cast back, then scale."""
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return w * xf.to(x.dtype)


def rope_table(cfg, max_len, device):
    """cos/sin [max_len][head_dim] in fp32 for NeoX (rotate-half) RoPE."""
    d = cfg["head_dim"]
    inv_freq = 1.0 / (cfg["theta"] ** (torch.arange(0, d, 2, dtype=torch.float32, device=device) / d))
    ang = torch.outer(torch.arange(max_len, dtype=torch.float32, device=device), inv_freq)
    ang = torch.cat([ang, ang], dim=-1)
    return ang.cos(), ang.sin()


def apply_rope(x, cos, sin):
    """x [b, n, heads, d]; cos/sin [n, d] already in x's dtype."""
    half = x.shape[-1] // 2
    rot = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos[:, None, :] + rot * sin[:, None, :]


def qkv_heads(x, layer, cfg, cos, sin):
    """Project, per-head RMSNorm q and k, RoPE: q [b,n,H,d], k and v [b,n,Hkv,d]."""
    b, n, _ = x.shape
    d, hq, hkv = cfg["head_dim"], cfg["heads"], cfg["kv_heads"]
    q, k, v = F.linear(x, layer["wqkv"]).split([hq * d, hkv * d, hkv * d], dim=-1)
    q = rms_norm(q.view(b, n, hq, d), layer["q_norm"], cfg["eps"])
    k = rms_norm(k.view(b, n, hkv, d), layer["k_norm"], cfg["eps"])
    return apply_rope(q, cos, sin), apply_rope(k, cos, sin), v.view(b, n, hkv, d)


def mlp(x, layer):
    g, u = F.linear(x, layer["wgu"]).chunk(2, dim=-1)
    return F.linear(F.silu(g) * u, layer["wd"])


def verify_mask(cfg, start, q, dtype, device):
    """Additive mask [1,1,group*q,start+q]: row (g, i) sees keys 0..start+i. None when q == 1.

    The key dimension is allocated padded to a multiple of 16 so the memory-efficient SDPA
    kernel can use the mask without copying it."""
    if q == 1:
        return None
    group, keys = cfg["heads"] // cfg["kv_heads"], start + q
    pos = torch.arange(start, start + q, device=device).repeat(group)        # row -> position
    allowed = torch.arange(keys, device=device)[None, :] <= pos[:, None]
    padded = torch.zeros(1, 1, group * q, -(-keys // 16) * 16, dtype=dtype, device=device)
    padded[..., :keys].masked_fill_(~allowed, float("-inf"))
    return padded[..., :keys]


def cached_attention(q, k, v, kc, vc, start, mask):
    """Write k/v at start.. into this layer's cache [b,Hkv,L,d] and attend over 0..start+n-1.

    Query heads sharing a KV head are folded into the query length, so SDPA sees
    [b, Hkv, group*n, d] against the cache slice as is (no repeated K/V)."""
    b, n, hq, d = q.shape
    hkv = k.shape[2]
    g = hq // hkv
    kc[:, :, start:start + n] = k.transpose(1, 2)
    vc[:, :, start:start + n] = v.transpose(1, 2)
    qg = q.view(b, n, hkv, g, d).permute(0, 2, 3, 1, 4).reshape(b, hkv, g * n, d)
    o = F.scaled_dot_product_attention(qg, kc[:, :, :start + n], vc[:, :, :start + n], attn_mask=mask)
    return o.view(b, hkv, g, n, d).permute(0, 3, 1, 2, 4).reshape(b, n, hq * d)


def verify_step(w, cfg, tokens, cos, sin, kcache, vcache, start, mask):
    """q = tokens.shape[1] tokens per sequence at start..start+q-1 -> logits [b, q, vocab].

    cos/sin are the rows for those positions; kcache/vcache [layers][b][Hkv][L][d] are updated."""
    x = w["embed"][tokens]
    for li, layer in enumerate(w["layers"]):
        q, k, v = qkv_heads(rms_norm(x, layer["attn_norm"], cfg["eps"]), layer, cfg, cos, sin)
        x = x + F.linear(cached_attention(q, k, v, kcache[li], vcache[li], start, mask), layer["wo"])
        x = x + mlp(rms_norm(x, layer["mlp_norm"], cfg["eps"]), layer)
    return F.linear(rms_norm(x, w["final_norm"], cfg["eps"]), w["lm_head"])


def reference_forward(w, cfg, tokens):
    """Uncached full-sequence forward with its own attention (explicit softmax, repeated KV)."""
    b, n = tokens.shape
    cos, sin = rope_table(cfg, n, tokens.device)
    cos, sin = cos.to(w["embed"].dtype), sin.to(w["embed"].dtype)
    g = cfg["heads"] // cfg["kv_heads"]
    causal = torch.ones(n, n, dtype=torch.bool, device=tokens.device).tril()
    x = w["embed"][tokens]
    for layer in w["layers"]:
        q, k, v = qkv_heads(rms_norm(x, layer["attn_norm"], cfg["eps"]), layer, cfg, cos, sin)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))                       # [b, heads, n, d]
        k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
        s = (q @ k.transpose(-1, -2)) / math.sqrt(cfg["head_dim"])
        p = s.masked_fill(~causal, float("-inf")).softmax(-1)
        x = x + F.linear((p @ v).transpose(1, 2).reshape(b, n, -1), layer["wo"])
        x = x + mlp(rms_norm(x, layer["mlp_norm"], cfg["eps"]), layer)
    return F.linear(rms_norm(x, w["final_norm"], cfg["eps"]), w["lm_head"])


# ---------------------------------------------------------------- --check (CPU, fp32)

def check_shape(name, cfg, batch=2, ctx=5, q=3):
    """Prefill via the step, verify q tokens, decode 1; compare with reference_forward."""
    torch.manual_seed(0)
    dev, dt = torch.device("cpu"), torch.float32
    w = make_weights(cfg, dt, dev)
    n = ctx + q + 1
    kc, vc = make_cache(cfg, batch, n + 4, dt, dev)          # garbage beyond what is written
    cos, sin = rope_table(cfg, n + 4, dev)
    tokens = torch.randint(0, cfg["vocab"], (batch, n))
    ref = reference_forward(w, cfg, tokens)
    worst = 0.0
    for start, m in ((0, ctx), (ctx, q), (ctx + q, 1)):
        sl = slice(start, start + m)
        out = verify_step(w, cfg, tokens[:, sl], cos[sl], sin[sl], kc, vc, start,
                          verify_mask(cfg, start, m, dt, dev))
        err = ((out - ref[:, sl]).abs().max() / ref[:, sl].abs().max()).item()
        print(f"  {name}: step at {start:2d}, q={m}: max |diff| / max |logit| = {err:.2e}")
        worst = max(worst, err)
    return worst


def run_check(shape):
    cfg = load_shape(shape)
    cases = [(shape, cfg), (shape + " (untied)", dict(cfg, tied=not cfg["tied"]))]
    worst = max(check_shape(name, c) for name, c in cases)
    ok = worst < 1e-4
    print(f"check {'passed' if ok else 'FAILED'}: worst relative error {worst:.2e} (limit 1e-4)")
    return ok


# ---------------------------------------------------------------- GPU timing

def capture(step):
    """Warm up on a side stream, then capture step() in a CUDA graph (PyTorch docs recipe)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = step()
    return graph, out


def time_replays(graph, replays, warmup=5):
    for _ in range(warmup):
        graph.replay()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(replays)]
    for a, b in events:
        a.record()
        graph.replay()
        b.record()
    torch.cuda.synchronize()
    return statistics.median(a.elapsed_time(b) for a, b in events)


def point_costs(cfg, batch, ctx, q, nparams):
    """(bytes read, flops) of one verify step: all weights + the K/V of ctx+q positions."""
    kv_bytes = 2 * cfg["layers"] * batch * cfg["kv_heads"] * (ctx + q) * cfg["head_dim"] * 2
    keys = sum(ctx + i + 1 for i in range(q))                 # keys attended, summed over rows
    attn_flops = 4 * cfg["layers"] * batch * cfg["heads"] * cfg["head_dim"] * keys
    return 2 * nparams + kv_bytes, 2 * nparams * batch * q + attn_flops


def bench_point(w, cfg, kcache, vcache, rope, batch, ctx, q, replays):
    dev = kcache.device
    tokens = torch.randint(0, cfg["vocab"], (batch, q), device=dev)   # static input buffer
    cos, sin = (t[ctx:ctx + q].to(torch.bfloat16) for t in rope)
    mask = verify_mask(cfg, ctx, q, torch.bfloat16, dev)
    kc, vc = kcache[:, :batch], vcache[:, :batch]
    graph, out = capture(lambda: verify_step(w, cfg, tokens, cos, sin, kc, vc, ctx, mask))
    ms = time_replays(graph, replays)
    assert torch.isfinite(out).all(), "non-finite logits"
    del graph, out
    return ms


def run_bench(args):
    assert torch.cuda.is_available(), "the benchmark needs a CUDA device (use --check on CPU)"
    t0 = time.time()
    cfg, dev = load_shape(args.shape), torch.device("cuda")
    batches, qs = [int(x) for x in args.batch_sizes.split(",")], [int(x) for x in args.q.split(",")]
    max_len = args.context + max(qs)
    w = make_weights(cfg, torch.bfloat16, dev)
    kcache, vcache = make_cache(cfg, max(batches), max_len, torch.bfloat16, dev)
    rope = rope_table(cfg, max_len, dev)
    nparams = param_count(cfg)
    print(f"# {args.shape}: {nparams / 1e9:.3f} B params ({2 * nparams / 1e9:.2f} GB bf16), "
          f"KV cache {2 * kcache.numel() * 2 / 1e9:.2f} GB, context {args.context}, "
          f"{torch.cuda.get_device_name()}, torch {torch.__version__}, setup {time.time() - t0:.1f} s")
    print(f"{'batch':>5} {'q':>3} {'ms':>8} {'TB/s':>6} {'TFLOP/s':>8} {'mem floor':>9} "
          f"{'x mem':>6} {'cmp floor':>9} {'x cmp':>6}")
    rows = []
    for b in batches:
        for q in qs:
            ms = bench_point(w, cfg, kcache, vcache, rope, b, args.context, q, args.replays)
            nbytes, flops = point_costs(cfg, b, args.context, q, nparams)
            mem_ms, cmp_ms = nbytes / MEM_BW * 1e3, flops / PEAK_FLOPS * 1e3
            rows.append(dict(batch=b, q=q, ms=ms, tb_s=nbytes / ms / 1e9, tflop_s=flops / ms / 1e9,
                             bytes=nbytes, flops=flops, mem_floor_ms=mem_ms, compute_floor_ms=cmp_ms))
            r = rows[-1]
            print(f"{b:5d} {q:3d} {ms:8.3f} {r['tb_s']:6.2f} {r['tflop_s']:8.1f} {mem_ms:9.3f} "
                  f"{ms / mem_ms:6.2f} {cmp_ms:9.3f} {ms / cmp_ms:6.2f}", flush=True)
    print(f"# total {time.time() - t0:.1f} s")
    if args.json:
        meta = dict(shape=args.shape, config=cfg, params=nparams, context=args.context,
                    replays=args.replays, device=torch.cuda.get_device_name(), torch=torch.__version__,
                    mem_bw=MEM_BW, peak_flops=PEAK_FLOPS)
        with open(args.json, "w") as f:
            json.dump(dict(meta=meta, points=rows), f, indent=1)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--shape", help="qwen3-8b (default), qwen3-0.6b or flint-tiny (--check default)")
    p.add_argument("--context", type=int, default=1024)
    p.add_argument("--batch-sizes", default="1,8,32,64")
    p.add_argument("--q", default="1,8", help="verify tokens per sequence, comma-separated")
    p.add_argument("--replays", type=int, default=50)
    p.add_argument("--json", help="write the points to this file")
    p.add_argument("--check", action="store_true",
                   help="CPU fp32 consistency check of the cache path (default shape flint-tiny)")
    args = p.parse_args()
    if args.check:
        raise SystemExit(0 if run_check(args.shape or "flint-tiny") else 1)
    args.shape = args.shape or "qwen3-8b"
    run_bench(args)


if __name__ == "__main__":
    main()
