"""flint's model-pair recipe: corpus + decontamination -> tokenizer -> target -> drafter data ->
DSpark and DFlash drafters -> export -> acceptance eval from the exported files -> model cards.

    python3 -m drafter.train.recipe --data .traindata --out models            # one H200, ~11.5 min
    python3 -m drafter.train.recipe --data .traindata --out /tmp/smoke --device cpu --smoke

Stages stop by wall clock (--budget scales them; the step counts reached are logged, and
--target-steps/--dspark-steps/--dflash-steps replay them exactly). Finished stages leave a marker in
the work dir and are skipped when the command is run again (--until STAGE stops early, --force
STAGE redoes one), so the run can also be split over several calls.
"""
import argparse
import json
import os
import re
import shutil

import numpy as np
import torch

from . import corpus as C
from .common import Timer, env_info, load_json, log, log_close, log_to, save_json, seed_all
from .dspark import DSparkConfig
from .qwen3 import TargetConfig, spread_taps

STAGES = ["corpus", "tokenizer", "target", "regen", "dspark", "dflash", "eval", "cards"]
TARGET_DIR, DSPARK_DIR, DFLASH_DIR = "flint-tiny", "flint-tiny-dspark", "flint-tiny-dflash"

FULL = dict(
    vocab=8192, d=256, ff=768, layers=10, heads=4, kv=2, hd=64, seq=512, batch=256, lr=2.5e-3, wd=0.1, warmup=100,
    mixture={"gsm8k": 0.30, "sharegpt": 0.04, "code": 0.66},
    n_taps=4, draft_layers=3, markov_rank=64, block=7,
    code_bytes=60e6, per_pkg_bytes=8e6, tok_bytes=40e6, gsm_limit=0, sg_limit=0,
    gsm_regen=2000, sg_regen=1000, sg_heldout=100, regen_prompt_max=256,
    n_sampled=8, regen_temp=1.0, regen_top_p=0.95, regen_max_new=256, regen_batch=8192,
    d_lr=2e-3, d_warmup=50, anchor_budget=16384, max_anchors=512, val_frac=0.03,
    eval_gsm=200, eval_mt=80, eval_max_new=256, eval_top_p=0.95, lossless_prompts=16, sampling_check_rows=4000, K=7,
    budget=690.0, frac={"target": 0.48, "dspark": 0.40, "dflash": 0.09},
    log_every=100, size_cap_mb=36.0,
)
SMOKE = dict(FULL)
SMOKE.update(
    vocab=1024, d=64, ff=128, layers=4, heads=2, kv=1, hd=32, seq=128, batch=16, lr=3e-3, warmup=5,
    n_taps=2, draft_layers=2, markov_rank=16,
    code_bytes=1.5e6, per_pkg_bytes=0.3e6, tok_bytes=3e6, gsm_limit=800, sg_limit=400,
    gsm_regen=40, sg_regen=16, sg_heldout=16, regen_prompt_max=96,
    n_sampled=1, regen_max_new=24, regen_batch=64,
    d_lr=3e-3, d_warmup=5, anchor_budget=256, val_frac=0.1,
    eval_gsm=6, eval_mt=4, eval_max_new=24, lossless_prompts=4, sampling_check_rows=600,
    budget=40.0, frac={"target": 0.2, "dspark": 0.15, "dflash": 0.1}, log_every=10, size_cap_mb=0,
)


# ------------------------------------------------------------------ helpers
class Ctx:
    def __init__(self, args):
        self.args = args
        self.S = dict(SMOKE if args.smoke else FULL)
        for kv in args.set or []:
            k, v = kv.split("=", 1)
            old = self.S[k]
            if isinstance(old, bool):
                self.S[k] = v.lower() in ("1", "true", "yes")
            elif isinstance(old, (int, float)):
                self.S[k] = type(old)(float(v))
            elif isinstance(old, dict):
                self.S[k] = json.loads(v)
            else:
                self.S[k] = v
        self.out = os.path.abspath(args.out)
        self.work = os.path.abspath(args.work or os.path.join("/tmp/flint-train-work", os.path.basename(self.out.rstrip("/")) or "out"))
        self.big = os.path.join(self.work, "big")  # bulky intermediates (not needed after the target stage)
        self.device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.seed = args.seed
        self.reports = {}
        budget = args.budget or self.S["budget"]
        self.secs = {k: budget * f for k, f in self.S["frac"].items()}
        for k in ("target", "dspark", "dflash"):
            v = getattr(args, f"{k}_seconds")
            if v:
                self.secs[k] = v

    def p(self, *a):
        return os.path.join(self.out, *a)

    def w(self, *a):
        return os.path.join(self.work, *a)

    @property
    def gpu(self):
        return torch.device(self.device).type == "cuda"


def encode_text(tok, texts):
    """Encode plain text segments, special-token strings inside them kept as text."""
    tok.encode_special_tokens = True
    out = [e.ids for e in tok.encode_batch(list(texts))]
    tok.encode_special_tokens = False
    return out


_SPECIAL_RE = re.compile("(" + "|".join(re.escape(s) for s in (C.EOT, C.IM_START, C.IM_END, C.MASK)) + ")")


def encode_chat(tok, formatted_list):
    """Encode ChatML strings: special tokens -> their ids, the text between them as text (equal to
    HF tokenization of the same string when the content holds no special-token strings)."""
    segs_all, plan = [], []
    for s in formatted_list:
        parts = [x for x in _SPECIAL_RE.split(s) if x != ""]
        row = []
        for x in parts:
            if _SPECIAL_RE.fullmatch(x):
                row.append(("s", tok.token_to_id(x)))
            else:
                row.append(("t", len(segs_all)))
                segs_all.append(x)
        plan.append(row)
    enc = encode_text(tok, segs_all) if segs_all else []
    res = []
    for row in plan:
        ids = []
        for kind, v in row:
            ids.extend([v] if kind == "s" else enc[v])
        res.append(ids)
    return res


def target_cfg(ctx, vocab):
    S = ctx.S
    return TargetConfig(vocab_size=vocab, hidden_size=S["d"], intermediate_size=S["ff"], num_hidden_layers=S["layers"],
                        num_attention_heads=S["heads"], num_key_value_heads=S["kv"], head_dim=S["hd"],
                        max_position_embeddings=2048, rope_theta=10000.0)


def drafter_cfg(ctx, tcj, arm):
    S = ctx.S
    dspark = arm == "dspark"
    return DSparkConfig(vocab_size=tcj["vocab_size"], hidden_size=tcj["hidden_size"],
                        intermediate_size=tcj["intermediate_size"], num_hidden_layers=S["draft_layers"],
                        num_attention_heads=tcj["num_attention_heads"], num_key_value_heads=tcj["num_key_value_heads"],
                        head_dim=tcj["head_dim"], mask_token_id=ctx.reports["tokenizer"]["specials"][C.MASK],
                        target_layer_ids=spread_taps(tcj["num_hidden_layers"], S["n_taps"]),
                        num_target_layers=tcj["num_hidden_layers"], rms_norm_eps=tcj["rms_norm_eps"],
                        rope_theta=tcj.get("rope_theta", 10000.0), block_size=S["block"],
                        markov_rank=S["markov_rank"] if dspark else 0, enable_confidence_head=dspark,
                        confidence_head_with_markov=dspark, num_anchors=S["max_anchors"])


# ------------------------------------------------------------------ stage: corpus
def stage_corpus(ctx):
    S, data = ctx.S, ctx.args.data
    ev = C.load_eval_prompts(data)
    idx = C.EvalIndex(ev)
    by_set = {}
    for name, _, _ in ev:
        by_set[name] = by_set.get(name, 0) + 1
    log("eval index:", idx.summary(), by_set)

    def filt(items, text_of, segs_of, short, label):
        keep, dropped = [], []
        for it in items:
            h = idx.hits(text_of(it), segs_of(it), short=short)
            if h:
                dropped.append({"doc": label(it), "eval_ids": h})
            else:
                keep.append(it)
        return keep, dropped

    gsm = C.load_gsm8k_train(data)
    if S["gsm_limit"]:
        gsm = gsm[: S["gsm_limit"]]
    gsm_k, gsm_d = filt(list(enumerate(gsm)), lambda x: x[1][0] + "\n" + x[1][1], lambda x: [x[1][0]], True,
                        lambda x: f"gsm8k_train:{x[0]}")
    sg = C.load_sharegpt(data)
    if S["sg_limit"]:
        sg = sg[: S["sg_limit"]]
    sg_k, sg_d = filt(list(enumerate(sg)), lambda x: x[1], lambda x: [x[1]], True, lambda x: f"sharegpt:{x[0]}")
    code, pkgs, skipped = C.collect_code(S["code_bytes"], S["per_pkg_bytes"], ctx.seed)
    code_k, code_d = filt(code, lambda x: x[2], lambda x: [], False, lambda x: f"{x[0]}:{x[1]}")
    for d in code_d:
        pk = d["doc"].split(":", 1)[0]
        if pk in pkgs:
            pkgs[pk]["files"] -= 1
    log(f"decontamination: dropped gsm8k {len(gsm_d)}/{len(gsm)}, sharegpt {len(sg_d)}/{len(sg)}, code {len(code_d)}/{len(code)}")
    for d in (gsm_d + sg_d + code_d)[:30]:
        log("  dropped", d)

    # splits: prompts for the drafter data are held out from target training
    g_regen, g_target = C.split_ids(len(gsm_k), ctx.seed, S["gsm_regen"])
    s_regen, s_held, s_target = C.split_ids(len(sg_k), ctx.seed + 1, S["sg_regen"], S["sg_heldout"])
    code_held = [d for d in code_k if int(C.hashlib.sha1(f"{d[0]}:{d[1]}".encode()).hexdigest(), 16) % 100 == 0]
    code_train = [d for d in code_k if int(C.hashlib.sha1(f"{d[0]}:{d[1]}".encode()).hexdigest(), 16) % 100 != 0]
    parts = {
        "gsm_target": [gsm_k[i][1] for i in sorted(g_target)],
        "gsm_regen": [gsm_k[i][1] for i in sorted(g_regen)],
        "sg_target": [sg_k[i][1] for i in sorted(s_target)],
        "sg_regen": [sg_k[i][1] for i in sorted(s_regen)],
        "sg_heldout": [sg_k[i][1] for i in sorted(s_held)],
        "code_train": code_train,
        "code_heldout": code_held,
    }

    # the proof: every training document (target corpus and drafter prompts) re-checked
    t = Timer()
    verify = {}
    for name, items in parts.items():
        if name.endswith("heldout"):
            continue
        n_hit = 0
        for it in items:
            if name.startswith("gsm"):
                h = idx.hits(it[0] + "\n" + it[1], [it[0]], short=True)
            elif name.startswith("sg"):
                h = idx.hits(it, [it], short=True)
            else:
                h = idx.hits(it[2], [], short=False)
            n_hit += bool(h)
        verify[name] = {"docs": len(items), "eval_prompts_found": n_hit}
    found = sum(v["eval_prompts_found"] for v in verify.values())
    log(f"decontamination verify ({t():.1f}s): {verify}")
    report = {
        "eval_sets": by_set, "index": idx.summary(),
        "method": ("eval prompts (all turns) normalized (NFKC, lowercase, [a-z0-9]+ words); a training "
                   "document is contaminated if it contains any eval word 13-gram (degenerate n-grams of <= 2 "
                   "distinct words skipped), or, for chat sources, the whole word sequence of a 6-12-word eval "
                   "prompt, or equals an eval prompt after normalization (sha1)"),
        "dropped": {"gsm8k_train": gsm_d, "sharegpt": sg_d, "code": code_d},
        "verify": verify, "eval_prompts_found_in_training": found, "pass": found == 0,
    }
    os.makedirs(ctx.big, exist_ok=True)
    save_json(ctx.w("dedup_report.json"), report)
    if found:
        raise SystemExit(f"FAIL: {found} training documents contain held-out eval prompts")
    with open(os.path.join(ctx.big, "corpus.json"), "w", encoding="utf-8") as f:
        json.dump(parts, f, ensure_ascii=False)
    sizes = {k: len(v) for k, v in parts.items()}
    code_bytes = sum(len(d[2].encode()) for d in code_train)
    log(f"corpus parts {sizes}; code train {code_bytes/1e6:.1f} MB from {len(pkgs)} packages")
    return {"parts": sizes, "code_train_bytes": code_bytes, "packages": pkgs, "skipped_packages": skipped,
            "dedup": {k: report[k] for k in ("index", "verify", "eval_prompts_found_in_training", "pass")},
            "dropped_counts": {k: len(v) for k, v in report["dropped"].items()}, "eval_sets": by_set}


def load_parts(ctx):
    with open(os.path.join(ctx.big, "corpus.json"), encoding="utf-8") as f:
        return json.load(f)


# ------------------------------------------------------------------ stage: tokenizer
def stage_tokenizer(ctx):
    from .tok import save_tokenizer, special_ids, train_tokenizer

    S = ctx.S
    parts = load_parts(ctx)
    gsm_docs = [C.chat_pair(q, a) for q, a in parts["gsm_target"]]
    sg_docs = [C.chat_user_only(p) for p in parts["sg_target"]]
    code_docs = [d[2] for d in parts["code_train"]]

    def texts():
        yield from gsm_docs
        yield from sg_docs
        n = 0
        for d in code_docs:
            if n > S["tok_bytes"]:
                break
            n += len(d)
            yield d

    t = Timer()
    tok = train_tokenizer(texts(), S["vocab"])
    sp = special_ids(tok)
    V = tok.get_vocab_size()
    save_tokenizer(tok, ctx.p(TARGET_DIR), model_max_length=2048)
    log(f"tokenizer: vocab {V} ({t():.1f}s), specials {sp}")

    # check: HF loads it, and its chat template == our ChatML strings
    from transformers import AutoTokenizer

    hft = AutoTokenizer.from_pretrained(ctx.p(TARGET_DIR))
    q = parts["gsm_regen"][0][0]
    s_hf = hft.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True, tokenize=False)
    assert s_hf == C.chat_prompt(q), (s_hf, C.chat_prompt(q))
    ids_hf = hft(s_hf, add_special_tokens=True)["input_ids"]
    assert ids_hf == encode_chat(tok, [s_hf])[0], "HF and recipe tokenization differ"
    assert hft.eos_token_id == sp[C.IM_END] and hft.pad_token_id == sp[C.EOT] and hft.bos_token_id is None

    # token streams
    t = Timer()
    eot = sp[C.EOT]
    streams = {}
    for name, docs, chat in (("gsm8k", gsm_docs, True), ("sharegpt", sg_docs, True), ("code", code_docs, False)):
        enc = encode_chat(tok, docs) if chat else encode_text(tok, docs)
        arr = np.fromiter((x for e in enc for x in e + [eot]), dtype=np.uint16)
        np.save(os.path.join(ctx.big, f"tok_{name}.npy"), arr)
        streams[name] = {"docs": len(docs), "tokens": int(len(arr)), "bytes": int(sum(len(d.encode()) for d in docs))}
    for name in streams:
        streams[name]["bytes_per_token"] = round(streams[name]["bytes"] / max(1, streams[name]["tokens"]), 3)
    log(f"token streams ({t():.1f}s): {streams}")
    return {"vocab_size": V, "specials": sp, "streams": streams, "hf_check": "AutoTokenizer loads; chat template and ids match"}


def load_tok(ctx):
    from .tok import load_tokenizer

    return load_tokenizer(ctx.p(TARGET_DIR))


# ------------------------------------------------------------------ stage: target
def stage_target(ctx):
    from .export import load_target, save_target
    from .train_target import doc_loss, train_target

    S = ctx.S
    sp = ctx.reports["tokenizer"]["specials"]
    V = ctx.reports["tokenizer"]["vocab_size"]
    streams = {n: np.load(os.path.join(ctx.big, f"tok_{n}.npy")) for n in ("gsm8k", "sharegpt", "code")}
    cfg = target_cfg(ctx, V)
    model, info = train_target(cfg, streams, S["mixture"], seq_len=S["seq"], batch=S["batch"], lr=S["lr"], wd=S["wd"],
                               seconds=ctx.secs["target"], device=ctx.device, seed=ctx.seed, warmup=S["warmup"],
                               fixed_steps=ctx.args.target_steps, log_every=S["log_every"])
    for n, a in streams.items():
        info.setdefault("passes", {})[n] = round(info["tokens_seen"] * info["mixture"].get(n, 0) / max(1, len(a)), 2)
    log(f"target: {info['steps']} steps in {info['seconds']:.0f}s, passes over sources {info['passes']}")
    save_target(model, ctx.p(TARGET_DIR), eos_id=sp[C.IM_END], pad_id=sp[C.EOT])
    del model

    # reload: our loader and HF transformers
    from transformers import AutoTokenizer, Qwen3ForCausalLM

    mine, _ = load_target(ctx.p(TARGET_DIR), ctx.device)
    hf = Qwen3ForCausalLM.from_pretrained(ctx.p(TARGET_DIR), dtype=torch.float32).to(ctx.device).eval()
    tok = load_tok(ctx)
    parts = load_parts(ctx)
    test = C.load_gsm8k_test(ctx.args.data)
    probe = encode_chat(tok, [C.chat_pair(q, a) for q, a in test[:4]])
    with torch.no_grad():
        diff = 0.0
        for ids in probe:
            x = torch.tensor([ids[:256]], device=ctx.device)
            a = hf(x).logits.float()
            h, _ = mine(x)
            diff = max(diff, float((a - mine.logits(h)).abs().max()))
    log(f"target: HF Qwen3ForCausalLM reload max |logit diff| vs recipe model = {diff:.3g}")
    assert diff < 1e-3, diff
    hft = AutoTokenizer.from_pretrained(ctx.p(TARGET_DIR))
    mt = C.load_mt_bench(ctx.args.data)
    sample_prompts = [test[0][0], test[1][0], mt[0][2], "Write a Python function that returns the n-th Fibonacci number."]
    samples = []
    for q in sample_prompts:
        ids = hft.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True, return_tensors="pt",
                                      return_dict=True)["input_ids"].to(ctx.device)
        with torch.no_grad():
            out = hf.generate(ids, max_new_tokens=160 if not ctx.args.smoke else 16, do_sample=False)
        samples.append({"prompt": q, "output": hft.decode(out[0, ids.shape[1]:], skip_special_tokens=True)})
        log(f"target sample: {q[:60]!r} -> {samples[-1]['output'][:200]!r}")
    del hf

    # held-out losses (nats/token) and predictive entropy
    def pairs(items, limit):
        docs = encode_chat(tok, [C.chat_pair(q, a) for q, a in items[:limit]])
        plen = [len(x) for x in encode_chat(tok, [C.chat_prompt(q) for q, _ in items[:limit]])]
        return list(zip(docs, plen))

    lim = 400 if not ctx.args.smoke else 40
    code_h = encode_text(tok, [d[2] for d in parts["code_heldout"][:lim]])
    sg_h = encode_chat(tok, [C.chat_user_only(p) for p in parts["sg_heldout"][:lim]])
    losses = {
        "gsm8k_test_answers": doc_loss(mine, pairs(test, lim), ctx.device, autocast=ctx.gpu),
        "gsm8k_train_heldout_answers": doc_loss(mine, pairs(parts["gsm_regen"], lim), ctx.device, autocast=ctx.gpu),
        "gsm8k_train_seen_answers": doc_loss(mine, pairs(parts["gsm_target"], lim), ctx.device, autocast=ctx.gpu),
        "sharegpt_heldout_prompts": doc_loss(mine, [(x, 0) for x in sg_h], ctx.device, autocast=ctx.gpu),
        "code_heldout": doc_loss(mine, [(x, 0) for x in code_h], ctx.device, autocast=ctx.gpu),
    }
    for k, v in losses.items():
        log(f"target held-out {k}: nll {v['nll']:.3f} entropy {v['entropy']:.3f} ({v['tokens']} tokens)")
    info.update({"hf_reload_max_logit_diff": diff, "samples": samples, "heldout": losses,
                 "params": sum(p.numel() for p in mine.parameters()), "config": cfg.to_dict()})
    info.pop("loss_history", None)
    return info


# ------------------------------------------------------------------ stage: regen
def stage_regen(ctx):
    from .export import load_target
    from .regen import regenerate, save_regen
    from .train_target import doc_loss

    S = ctx.S
    sp = ctx.reports["tokenizer"]["specials"]
    tok = load_tok(ctx)
    parts = load_parts(ctx)
    target, _ = load_target(ctx.p(TARGET_DIR), ctx.device)
    g_prompts = encode_chat(tok, [C.chat_prompt(q) for q, _ in parts["gsm_regen"]])
    s_all = encode_chat(tok, [C.chat_prompt(p) for p in parts["sg_regen"]])
    s_prompts = [x for x in s_all if len(x) <= S["regen_prompt_max"]]
    prompts = g_prompts + s_prompts
    src = [0] * len(g_prompts) + [1] * len(s_prompts)
    t = Timer()
    seqs = regenerate(target, prompts, n_sampled=S["n_sampled"], temperature=S["regen_temp"], top_p=S["regen_top_p"],
                      max_new=S["regen_max_new"], eos_ids=[sp[C.IM_END], sp[C.EOT]], seed=ctx.seed, device=ctx.device,
                      batch=S["regen_batch"], pad_id=sp[C.EOT], autocast=ctx.gpu)
    secs = t()
    save_regen(os.path.join(ctx.work, "regen.npz"), seqs, [src[i] for i, _, _, _ in seqs])
    resp = [len(r) for _, _, _, r in seqs]
    eos_frac = float(np.mean([bool(r) and r[-1] in (sp[C.IM_END], sp[C.EOT]) for _, _, _, r in seqs]))
    # the target's entropy on its own answers (what bounds T = 1 acceptance)
    sub = [(p + r, len(p)) for i, s, p, r in seqs[:: max(1, len(seqs) // 600)]]
    ent = {"greedy": doc_loss(target, [(p + r, len(p)) for i, s, p, r in seqs if s == 0][:300], ctx.device, autocast=ctx.gpu),
           "sampled": doc_loss(target, [(p + r, len(p)) for i, s, p, r in seqs if s > 0][:300], ctx.device, autocast=ctx.gpu),
           "all": doc_loss(target, sub, ctx.device, autocast=ctx.gpu)}
    info = {"prompts": {"gsm8k_train_heldout": len(g_prompts), "sharegpt_heldout": len(s_prompts),
                        "sharegpt_dropped_too_long": len(s_all) - len(s_prompts)},
            "samples_per_prompt": {"greedy": 1, "sampled": S["n_sampled"], "temperature": S["regen_temp"],
                                   "top_p": S["regen_top_p"]},
            "sequences": len(seqs), "response_tokens": int(sum(resp)), "mean_response_tokens": float(np.mean(resp)),
            "ended_with_eos": eos_frac, "max_new_tokens": S["regen_max_new"], "seconds": secs,
            "target_on_own_answers": ent}
    log(f"regen: {info}")
    return info


# ------------------------------------------------------------------ stages: drafters
def stage_drafter(ctx, arm):
    from .export import load_drafter, load_target, round_bf16_, save_drafter
    from .regen import load_regen
    from .train_drafter import train_drafter

    S = ctx.S
    sp = ctx.reports["tokenizer"]["specials"]
    target, tcj = load_target(ctx.p(TARGET_DIR), ctx.device)
    for p in target.parameters():
        p.requires_grad_(False)
    seqs = load_regen(os.path.join(ctx.work, "regen.npz"))
    # validation = every sample of a held-out 3% of the prompts
    keys = sorted({(m[2], m[0]) for _, _, m in seqs})
    rs = np.random.RandomState(ctx.seed + 7)
    val_keys = set(map(tuple, [keys[i] for i in rs.permutation(len(keys))[: max(1, int(S["val_frac"] * len(keys)))]]))
    tr = [s for s in seqs if (s[2][2], s[2][0]) not in val_keys]
    va = [s for s in seqs if (s[2][2], s[2][0]) in val_keys]
    dcfg = drafter_cfg(ctx, tcj, arm)
    drafter, info = train_drafter(target, dcfg, tr, va, arm=arm, seconds=ctx.secs[arm], device=ctx.device,
                                  seed=ctx.seed + (11 if arm == "dspark" else 13), lr=S["d_lr"],
                                  anchor_budget=S["anchor_budget"], pad_id=sp[C.EOT],
                                  fixed_steps=getattr(ctx.args, f"{arm}_steps"), warmup=S["d_warmup"],
                                  max_anchors=S["max_anchors"], log_every=S["log_every"])
    out = ctx.p(DSPARK_DIR if arm == "dspark" else DFLASH_DIR)
    drafter = drafter.float()
    round_bf16_(drafter)
    cj, names, shapes = save_drafter(drafter, tcj, out, head_copies=ctx.args.head_copies)
    # export self-consistency: reloaded file == in-memory (bf16-rounded) drafter, bit for bit
    re_d, _ = load_drafter(out, target_embed=target.embed_weight, device=ctx.device)
    sd_a, sd_b = drafter.state_dict(), re_d.state_dict()
    wdiff = max(float((sd_a[k].float() - sd_b[k].float()).abs().max()) for k in sd_a)
    with torch.no_grad():
        ids = torch.tensor([va[0][0][:200].tolist()], device=ctx.device)
        _, taps = target(ids, taps=list(dcfg.target_layer_ids))
        cache_a, cache_b = drafter.new_cache(1, 256, ctx.device), re_d.new_cache(1, 256, ctx.device)
        pos = torch.arange(ids.shape[1], device=ctx.device).view(1, -1)
        drafter.eval().write_context(cache_a, taps, pos)
        re_d.write_context(cache_b, taps, pos)
        P = torch.tensor([ids.shape[1] - 1], device=ctx.device)
        ua, _ = drafter.draft_block(cache_a, ids[0, -1:], P)
        ub, _ = re_d.draft_block(cache_b, ids[0, -1:], P)
        odiff = float((ua - ub).abs().max())
    log(f"{arm}: exported to {out}; reload max |weight diff| {wdiff:.3g}, max |logit diff| {odiff:.3g}")
    assert wdiff == 0.0 and odiff < 1e-5, (wdiff, odiff)
    info.update({"export": {"dir": out, "config": cj, "tensors": shapes, "reload_weight_diff": wdiff,
                            "reload_logit_diff": odiff, "head_copies": bool(ctx.args.head_copies)},
                 "config": dcfg.to_dict(), "file_params": int(sum(int(np.prod(s)) for s in shapes.values()))})
    info.pop("history", None)
    return info


# ------------------------------------------------------------------ stage: eval
def stage_eval(ctx):
    from .export import load_drafter, load_target
    from .selftest import check_greedy_lossless, check_sampling_lossless, check_train_infer_consistency, greedy_reference
    from .specloop import check_acceptance_rule, spec_generate, summarize

    S = ctx.S
    if ctx.gpu:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    sp = ctx.reports["tokenizer"]["specials"]
    eos = [sp[C.IM_END], sp[C.EOT]]
    tok = load_tok(ctx)
    target, _ = load_target(ctx.p(TARGET_DIR), ctx.device)  # everything below runs from the exported files
    drafters = {arm: load_drafter(ctx.p(d), target_embed=target.embed_weight, device=ctx.device)[0]
                for arm, d in (("dspark", DSPARK_DIR), ("dflash", DFLASH_DIR))}
    gsm = C.load_gsm8k_test(ctx.args.data)[: S["eval_gsm"]]
    mt = C.load_mt_bench(ctx.args.data)[: S["eval_mt"]]
    sets = {"gsm8k": encode_chat(tok, [C.chat_prompt(q) for q, _ in gsm]),
            "mt_bench": encode_chat(tok, [C.chat_prompt(t) for _, _, t in mt])}
    res = {"checks": {}, "runs": {}}
    res["checks"]["acceptance_rule"] = check_acceptance_rule(device="cpu")
    probe = sets["gsm8k"][0] + encode_text(tok, ["Natalia sold 48/2 = <<48/2=24>>24 clips in May."])[0]
    res["checks"]["train_infer_consistency"] = {
        arm: check_train_infer_consistency(target, d, torch.tensor(probe), len(sets["gsm8k"][0]), ctx.device)
        for arm, d in drafters.items()}
    n = S["lossless_prompts"]
    lp = sets["gsm8k"][: n // 2] + sets["mt_bench"][: n - n // 2]
    ref = greedy_reference(target, lp, eos, S["eval_max_new"], ctx.device)
    res["checks"]["greedy_lossless"] = {arm: check_greedy_lossless(target, d, lp, eos, S["eval_max_new"], ctx.device,
                                                                   K=S["K"], reference=ref)
                                        for arm, d in drafters.items()}
    res["checks"]["sampling_lossless"] = {arm: check_sampling_lossless(target, d, sets["gsm8k"][0], eos, ctx.device,
                                                                       rows=S["sampling_check_rows"], top_p=S["eval_top_p"],
                                                                       K=S["K"])
                                          for arm, d in drafters.items()}
    for arm, d in drafters.items():
        for set_name, prompts in sets.items():
            for temp in (0.0, 1.0):
                t = Timer()
                top_p = 1.0 if temp == 0 else S["eval_top_p"]
                r = spec_generate(target, d, prompts, list(range(len(prompts))), K=S["K"], temperature=temp, top_p=top_p,
                                  max_new=S["eval_max_new"], eos_ids=eos, seed=ctx.seed, device=ctx.device,
                                  pad_id=sp[C.EOT])
                s = summarize(r, S["K"])
                s.update({"seconds": t(), "prompts": len(prompts), "temperature": temp, "top_p": top_p,
                          "max_new_tokens": S["eval_max_new"], "K": S["K"],
                          "example_output": tok.decode(r["outputs"][0], skip_special_tokens=False)[:400]})
                res["runs"][f"{arm}/{set_name}/T{temp:g}"] = s
                log(f"eval {arm} {set_name} T={temp:g}: AL {s['al']:.3f} (per-prompt {s['al_mean_per_prompt']:.3f} "
                    f"+-{s['al_ci95_per_prompt']:.3f}) cond-accept {[round(x, 2) for x in s['accept_cond_per_pos']]} "
                    f"{s['seconds']:.1f}s")
    g = res["runs"]
    res["goals"] = {
        "dspark_gsm8k_T0_al>=4.5": g["dspark/gsm8k/T0"]["al"] >= 4.5,
        "dspark_gsm8k_T1_al>=3.5": g["dspark/gsm8k/T1"]["al"] >= 3.5,
        "dspark_beats_dflash_all": all(g[f"dspark/{s}/T{t}"]["al"] > g[f"dflash/{s}/T{t}"]["al"]
                                       for s in sets for t in ("0", "1")),
    }
    log("goals:", res["goals"])
    return res


# ------------------------------------------------------------------ stage: cards
def stage_cards(ctx):
    from .cards import write_cards

    return write_cards(ctx)


# ------------------------------------------------------------------ driver
def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help="folder with the staged data (tools/stage_train_data.sh)")
    ap.add_argument("--out", required=True, help="output folder (gets flint-tiny, flint-tiny-dspark, flint-tiny-dflash)")
    ap.add_argument("--work", help="work folder for intermediates and stage markers (default /tmp/flint-train-work/NAME)")
    ap.add_argument("--device", help="cuda or cpu (default: cuda when available)")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, seconds per stage (CPU test)")
    ap.add_argument("--budget", type=float, help="seconds for the time-limited stages together scale (default 690 full)")
    ap.add_argument("--target-seconds", type=float)
    ap.add_argument("--dspark-seconds", type=float)
    ap.add_argument("--dflash-seconds", type=float)
    ap.add_argument("--target-steps", type=int, help="replay a run: fixed step count instead of wall clock")
    ap.add_argument("--dspark-steps", type=int)
    ap.add_argument("--dflash-steps", type=int)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--until", choices=STAGES, help="stop after this stage")
    ap.add_argument("--force", default="", help="comma-separated stages to redo even if done")
    ap.add_argument("--fresh", action="store_true", help="delete the work folder first (no resume)")
    ap.add_argument("--head-copies", action="store_true",
                    help="store embed_tokens/lm_head copies in the drafter files (over the size cap at full size)")
    ap.add_argument("--set", action="append", help="override a size/setting, e.g. --set draft_layers=4")
    args = ap.parse_args(argv)
    ctx = Ctx(args)
    if not ctx.gpu and "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(1)  # tiny CPU matmuls: OpenMP hand-offs cost more than they give
    if args.fresh and os.path.isdir(ctx.work):
        shutil.rmtree(ctx.work)
    os.makedirs(ctx.work, exist_ok=True)
    os.makedirs(ctx.out, exist_ok=True)
    # a work folder resumes only the run it belongs to (same settings and seed)
    key = {"settings": ctx.S, "seed": ctx.seed, "smoke": bool(args.smoke), "head_copies": bool(args.head_copies)}
    kp = ctx.w("run_key.json")
    if os.path.exists(kp) and load_json(kp) != json.loads(json.dumps(key)):
        raise SystemExit(f"{ctx.work} holds a run with other settings: use --fresh or another --work")
    save_json(kp, key)
    log_to(ctx.w("recipe_log.txt"))
    log(f"recipe: out {ctx.out} work {ctx.work} device {ctx.device} smoke {args.smoke} seconds {ctx.secs}")
    log("env:", env_info())
    log("settings:", ctx.S)
    force = set(x for x in args.force.split(",") if x)
    total = Timer()
    for st in STAGES:
        marker = ctx.w(f"done_{st}.json")
        if os.path.exists(marker) and st not in force:
            ctx.reports[st] = load_json(marker)
            log(f"== stage {st}: done earlier in {ctx.work}, skipped (--fresh or --force {st} to redo)")
        else:
            seed_all(ctx.seed)
            lp = ctx.w(f"log_{st}.txt")
            if os.path.exists(lp):
                os.remove(lp)
            log_to(lp)
            log(f"== stage {st}")
            t = Timer()
            fn = {"corpus": stage_corpus, "tokenizer": stage_tokenizer, "target": stage_target, "regen": stage_regen,
                  "dspark": lambda c: stage_drafter(c, "dspark"), "dflash": lambda c: stage_drafter(c, "dflash"),
                  "eval": stage_eval, "cards": stage_cards}[st]
            rep = fn(ctx)
            rep["stage_seconds"] = t()
            ctx.reports[st] = rep
            save_json(marker, rep)
            log(f"== stage {st} finished in {rep['stage_seconds']:.1f}s")
            log_close(lp)
        if args.until == st:
            break
    log(f"recipe finished in {total():.0f}s")
    log_close()


if __name__ == "__main__":
    main()
