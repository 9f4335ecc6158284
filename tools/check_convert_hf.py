#!/usr/bin/env python3
"""Reference run of a converted model directory with Hugging Face transformers.

Why it exists: `flint convert llama2c` writes a LlamaForCausalLM directory; this script is the
independent check that the directory is right (transformers loads it and, with --llama2c, its
logits equal a NumPy port of llama2.c's run.c on the original checkpoint), and it produces the
golden fixture for flint's own forward pass: greedy token ids from BOS plus the first step's
logits, as JSON.

  python3 tools/check_convert_hf.py DIR [--n 64] [--out golden.json] [--llama2c stories260K.bin]

Runs on CPU or GPU (float32, TF32 off, eager attention, so the numbers do not depend on the
kernel picked). Greedy decoding stops at EOS as generate() does, unless --ignore-eos.
"""
import argparse
import json
import struct
import sys

import numpy as np


def llama2c_reference(path, ids):
    """run.c's forward in NumPy on the original checkpoint: logits for each position of `ids`.
    Interleaved-pair RoPE, as llama2.c trains and runs it; this is what the converted (permuted)
    weights must reproduce under HF's rotate_half RoPE."""
    raw = open(path, "rb").read()
    magic = struct.unpack_from("<I", raw, 0)[0]
    if magic == 0x616B3432:
        raise SystemExit("--llama2c: only the legacy (version 0) export is supported here")
    dim, hidden, n_layers, n_heads, n_kv, vocab, seq_len = struct.unpack_from("<7i", raw, 0)
    shared = vocab > 0
    vocab = abs(vocab)
    hs = dim // n_heads
    kv_dim = hs * n_kv
    f = np.frombuffer(raw, dtype="<f4", offset=28).astype(np.float64)
    o = 0

    def take(*shape):
        nonlocal o
        n = int(np.prod(shape))
        a = f[o:o + n].reshape(shape)
        o += n
        return a

    tok = take(vocab, dim)
    rms_att = take(n_layers, dim)
    wq = take(n_layers, dim, dim)
    wk = take(n_layers, kv_dim, dim)
    wv = take(n_layers, kv_dim, dim)
    wo = take(n_layers, dim, dim)
    rms_ffn = take(n_layers, dim)
    w1 = take(n_layers, hidden, dim)
    w2 = take(n_layers, dim, hidden)
    w3 = take(n_layers, hidden, dim)
    rms_final = take(dim)
    take(seq_len, hs // 2)
    take(seq_len, hs // 2)
    wcls = tok if shared else take(vocab, dim)

    def rmsnorm(x, w):
        return w * x / np.sqrt(np.mean(x * x) + 1e-5)

    def rope(v, pos):
        v = v.copy()
        for i in range(0, v.shape[0], 2):
            hd = i % hs
            freq = 1.0 / 10000.0 ** (hd / hs)
            c, s = np.cos(pos * freq), np.sin(pos * freq)
            v0, v1 = v[i], v[i + 1]
            v[i], v[i + 1] = v0 * c - v1 * s, v0 * s + v1 * c
        return v

    kc = np.zeros((n_layers, len(ids), kv_dim))
    vc = np.zeros((n_layers, len(ids), kv_dim))
    out = []
    for pos, t in enumerate(ids):
        x = tok[t].copy()
        for l in range(n_layers):
            xb = rmsnorm(x, rms_att[l])
            q = rope(wq[l] @ xb, pos)
            kc[l, pos] = rope(wk[l] @ xb, pos)
            vc[l, pos] = wv[l] @ xb
            att_out = np.zeros(dim)
            for h in range(n_heads):
                kvh = h // (n_heads // n_kv)
                qh = q[h * hs:(h + 1) * hs]
                k = kc[l, :pos + 1, kvh * hs:(kvh + 1) * hs]
                sc = k @ qh / np.sqrt(hs)
                p = np.exp(sc - sc.max())
                p /= p.sum()
                att_out[h * hs:(h + 1) * hs] = p @ vc[l, :pos + 1, kvh * hs:(kvh + 1) * hs]
            x = x + wo[l] @ att_out
            xb = rmsnorm(x, rms_ffn[l])
            h1, h3 = w1[l] @ xb, w3[l] @ xb
            x = x + w2[l] @ (h1 / (1 + np.exp(-h1)) * h3)
        out.append(wcls @ rmsnorm(x, rms_final))
    return np.array(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir", help="converted model directory")
    ap.add_argument("--n", type=int, default=64, help="new tokens to generate (default 64)")
    ap.add_argument("--out", help="write the result as JSON here")
    ap.add_argument("--device", default=None, help="cpu | cuda (default: cuda when available)")
    ap.add_argument("--ignore-eos", action="store_true", help="keep generating past EOS")
    ap.add_argument("--all-logits", action="store_true", help="also save the logits of every step")
    ap.add_argument("--llama2c", help="original llama2.c checkpoint: compare against a NumPy run.c")
    ap.add_argument("--tol", type=float, default=1e-4, help="max |logit difference| allowed with --llama2c")
    a = ap.parse_args()

    import torch
    import transformers
    from transformers import AutoTokenizer, LlamaForCausalLM

    dev = a.device or ("cuda" if torch.cuda.is_available() else "cpu")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    try:  # transformers >= 4.56 says dtype; older releases only know torch_dtype
        model = LlamaForCausalLM.from_pretrained(a.dir, dtype=torch.float32, attn_implementation="eager")
    except TypeError:
        model = LlamaForCausalLM.from_pretrained(a.dir, torch_dtype=torch.float32, attn_implementation="eager")
    model = model.float().to(dev).eval()
    tok = AutoTokenizer.from_pretrained(a.dir)
    bos = model.config.bos_token_id
    inp = torch.tensor([[bos]], device=dev)
    gen_kw = dict(do_sample=False, max_new_tokens=a.n, attention_mask=torch.ones_like(inp),
                  return_dict_in_generate=True, output_logits=True, pad_token_id=model.config.eos_token_id)
    if a.ignore_eos:
        model.generation_config.eos_token_id = None
        gen_kw["eos_token_id"] = None
    with torch.no_grad():
        g = model.generate(inp, **gen_kw)
    ids = g.sequences[0, 1:].tolist()
    steps = [l[0].float().cpu().numpy() for l in g.logits]
    first = steps[0]
    top = np.argsort(-first)[:5]

    print(f"transformers {transformers.__version__}, torch {torch.__version__}, device {dev}")
    print(f"generated {len(ids)} tokens from BOS ({bos}): {ids}")
    print("text:", repr(tok.decode(ids, skip_special_tokens=True)))
    print("first-step logits: top5", [(int(i), round(float(first[i]), 6)) for i in top],
          f"min {first.min():.6f} max {first.max():.6f} mean {first.mean():.6f}")

    result = {
        "model_dir": a.dir,
        "input_ids": [bos],
        "generated_ids": ids,
        "stopped_at_eos": (not a.ignore_eos) and len(ids) < a.n,
        "text": tok.decode(ids, skip_special_tokens=True),
        "first_step_logits": [float(x) for x in first],
        "reference": {"transformers": transformers.__version__, "torch": torch.__version__, "device": dev,
                      "dtype": "float32", "attn_implementation": "eager", "greedy": True,
                      "ignore_eos": a.ignore_eos},
    }
    if a.all_logits:
        result["step_logits"] = [[float(x) for x in s] for s in steps]

    rc = 0
    if a.llama2c:
        # one full forward of [BOS] + ids (minus the last) must give every step's logits
        seq = [bos] + ids[:-1]
        ref = llama2c_reference(a.llama2c, seq)
        with torch.no_grad():
            hf = model(torch.tensor([seq], device=dev)).logits[0].double().cpu().numpy()
        d_full = float(np.abs(hf - ref).max())
        d_gen = float(max(np.abs(s - r).max() for s, r in zip(steps, ref)))
        greedy_ref = ref.argmax(-1).tolist()
        same = greedy_ref == ids
        print(f"llama2.c reference: max |logit diff| {d_full:.3g} (forward), {d_gen:.3g} (generate); "
              f"greedy ids {'equal' if same else 'DIFFER'}")
        result["llama2c_check"] = {"max_abs_logit_diff": d_full, "greedy_equal": same}
        if d_full > a.tol or d_gen > a.tol or not same:
            rc = 1
    if a.out:
        with open(a.out, "w") as fh:
            json.dump(result, fh, indent=1)
            fh.write("\n")
        print("wrote", a.out)
    return rc


if __name__ == "__main__":
    sys.exit(main())
