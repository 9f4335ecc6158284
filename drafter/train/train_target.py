"""Target pre-training: windows sampled from per-source token streams with fixed mixture weights,
bf16 autocast, fused AdamW, warmup + cosine. The stage stops by wall clock: after a short
calibration the step count is fixed (and logged) so that a rerun with --target-steps N is the same
computation."""
import math

import numpy as np
import torch
import torch.nn.functional as F

from .common import Timer, log, sync
from .qwen3 import Qwen3


def lr_at(step, total, peak, warmup, floor=0.1):
    if step < warmup:
        return peak * (step + 1) / warmup
    t = min(1.0, (step - warmup) / max(1, total - warmup))
    return peak * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * t)))


def plan_steps(seconds, elapsed, step_s, done_steps, margin=0.97):
    return done_steps + max(1, int((seconds - elapsed) * margin / max(step_s, 1e-6)))


class Sampler:
    """Random windows of seq_len + 1 tokens from several streams held on the device."""

    def __init__(self, streams, weights, seq_len, device, seed):
        names = [n for n in streams if len(streams[n]) > seq_len + 2 and weights.get(n, 0) > 0]
        self.names = names
        self.w = torch.tensor([weights[n] for n in names], dtype=torch.float64)
        self.w /= self.w.sum()
        self.base, self.span = [], []
        parts, at = [], 0
        for n in names:
            a = streams[n]
            parts.append(torch.from_numpy(a.astype(np.int64)))
            self.base.append(at)
            self.span.append(len(a) - seq_len - 1)
            at += len(a)
        self.data = torch.cat(parts).to(device)
        self.base_t = torch.tensor(self.base, dtype=torch.long)
        self.span_t = torch.tensor(self.span, dtype=torch.long)
        self.T = seq_len
        self.g = torch.Generator().manual_seed(seed)
        self.ar = torch.arange(seq_len + 1, device=device)

    def batch(self, B):
        src = torch.multinomial(self.w, B, replacement=True, generator=self.g)
        off = (torch.rand(B, generator=self.g, dtype=torch.float64) * self.span_t[src].double()).long()
        start = (self.base_t[src] + off).to(self.data.device)
        w = self.data[start.view(B, 1) + self.ar]
        return w[:, :-1], w[:, 1:]


def train_target(cfg, streams, weights, *, seq_len, batch, lr, wd, seconds, device, seed, warmup=100,
                 fixed_steps=None, calib_steps=12, log_every=100):
    torch.manual_seed(seed)
    model = Qwen3(cfg).to(device)
    model.train()
    fused = torch.device(device).type == "cuda"
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": wd}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=lr, betas=(0.9, 0.95), eps=1e-8, fused=fused)
    sampler = Sampler(streams, weights, seq_len, device, seed)
    log(f"target: {sum(p.numel() for p in model.parameters())/1e6:.2f}M params; sources {sampler.names} "
        f"weights {[round(float(x), 3) for x in sampler.w]}; tokens {[len(streams[n]) for n in sampler.names]}")
    dt = torch.device(device).type
    total = fixed_steps or 10**9
    timer = Timer()
    t_calib = None
    step = 0
    hist = []
    ema = None
    while step < total:
        if fixed_steps is None and step == 3:
            sync(device)
            t_calib = timer()
        if fixed_steps is None and step == calib_steps:
            sync(device)
            step_s = (timer() - t_calib) / (calib_steps - 3)
            total = plan_steps(seconds, timer(), step_s, step)
            log(f"target: {step_s*1000:.1f} ms/step, {batch*seq_len/step_s/1e6:.2f}M tok/s -> planned {total} steps")
        for gp in opt.param_groups:
            gp["lr"] = lr_at(step, total if total < 10**9 else 10**6, lr, warmup)
        x, y = sampler.batch(batch)
        with torch.autocast(device_type=dt, dtype=torch.bfloat16, enabled=dt == "cuda"):
            h, _ = model(x)
            logits = model.logits(h)
        loss = F.cross_entropy(logits.float().view(-1, cfg.vocab_size), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        if step % log_every == 0 or step == total or step == 1:
            lv = float(loss.item())
            ema = lv if ema is None else 0.9 * ema + 0.1 * lv
            hist.append((step, lv))
            log(f"target step {step}/{total} loss {lv:.4f} lr {opt.param_groups[0]['lr']:.2e} t {timer():.0f}s")
        if fixed_steps is None and timer() > seconds * 1.08:
            log(f"target: wall-clock guard hit at step {step} (planned {total})")
            break
    sync(device)
    info = {"steps": step, "planned_steps": total, "seconds": timer(), "batch": batch, "seq_len": seq_len,
            "tokens_seen": step * batch * seq_len, "lr": lr, "weight_decay": wd, "warmup": warmup,
            "final_train_loss": hist[-1][1] if hist else None, "loss_history": hist,
            "mixture": {n: float(w) for n, w in zip(sampler.names, sampler.w)}}
    model.eval()
    return model, info


@torch.no_grad()
def doc_loss(model, docs, device, batch=64, max_len=512, autocast=True):
    """docs: list of (token ids, loss_start). Mean NLL (nats/token) and mean predictive entropy
    over positions >= loss_start (predicting those tokens)."""
    tot, ent, n = 0.0, 0.0, 0
    dt = torch.device(device).type
    docs = [(d[:max_len], s) for d, s in docs if s < min(len(d), max_len)]
    docs.sort(key=lambda x: len(x[0]))
    for i in range(0, len(docs), batch):
        chunk = docs[i : i + batch]
        L = max(len(d) for d, _ in chunk)
        ids = torch.zeros(len(chunk), L, dtype=torch.long)
        m = torch.zeros(len(chunk), L, dtype=torch.bool)
        for r, (d, s) in enumerate(chunk):
            ids[r, : len(d)] = torch.tensor(d)
            m[r, max(s, 1) : len(d)] = True
        ids, m = ids.to(device), m.to(device)
        with torch.autocast(device_type=dt, dtype=torch.bfloat16, enabled=autocast):
            h, _ = model(ids)
            lg = model.logits(h)
        lp = torch.log_softmax(lg.float()[:, :-1], -1)
        nll = -lp.gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)
        e = -(lp.exp() * lp).sum(-1)
        mm = m[:, 1:]
        tot += float(nll[mm].sum())
        ent += float(e[mm].sum())
        n += int(mm.sum())
    return {"nll": tot / max(n, 1), "entropy": ent / max(n, 1), "tokens": n, "docs": len(docs)}
