"""Drafter training against the frozen target (features computed on the fly): every valid anchor of
each regenerated sequence, length-bucketed batches with a budget of anchors per step, bf16 autocast,
fused AdamW, warmup + cosine, wall-clock stop with a logged, reproducible step count."""
import numpy as np
import torch

from .common import Timer, log, sync
from .dspark import DSpark, expected_al
from .train_target import lr_at, plan_steps


def make_batches(seqs, anchor_budget, rng, chunk=64):
    """Length-bucketed batches: shuffle, sort within chunks of ~chunk batches, cut by anchor budget."""
    order = rng.permutation(len(seqs)).tolist()
    resp = [max(1, len(s[0]) - s[1]) for s in seqs]
    tot = [len(s[0]) for s in seqs]
    per_chunk = max(1, int(chunk * anchor_budget / max(1, np.mean(resp))))
    batches = []
    for c in range(0, len(order), per_chunk):
        part = sorted(order[c : c + per_chunk], key=lambda i: tot[i])
        cur, acc = [], 0
        for i in part:
            if cur and acc + resp[i] > anchor_budget:
                batches.append(cur)
                cur, acc = [], 0
            cur.append(i)
            acc += resp[i]
        if cur:
            batches.append(cur)
    rng.shuffle(batches)
    return batches


def collate(seqs, idx, pad_id, device):
    S = max(len(seqs[i][0]) for i in idx)
    ids = torch.full((len(idx), S), pad_id, dtype=torch.long)
    lm = torch.zeros(len(idx), S, dtype=torch.bool)
    for r, i in enumerate(idx):
        t, pl = seqs[i][0], seqs[i][1]
        ids[r, : len(t)] = torch.from_numpy(np.asarray(t, dtype=np.int64))
        lm[r, pl : len(t)] = True
    return ids.to(device), lm.to(device)


def _step_metrics(target, drafter, seqs, idx, pad_id, device, gen, alphas, max_anchors, with_metrics=True):
    ids, lm = collate(seqs, idx, pad_id, device)
    dt = torch.device(device).type
    amp = dt == "cuda"  # bf16 autocast on the GPU; plain fp32 on CPU (CPU bf16 matmuls are slow)
    with torch.no_grad(), torch.autocast(device_type=dt, dtype=torch.bfloat16, enabled=amp):
        th, taps = target(ids, taps=list(drafter.cfg.target_layer_ids))
    with torch.autocast(device_type=dt, dtype=torch.bfloat16, enabled=amp):
        return drafter.train_loss(ids, lm, taps, th, gen, alphas=alphas, max_anchors=max_anchors,
                                  with_metrics=with_metrics)


def train_drafter(target, dcfg, seqs, val_seqs, *, arm, seconds, device, seed, lr, anchor_budget, pad_id,
                  fixed_steps=None, warmup=50, max_anchors=512, log_every=100, calib_steps=12):
    torch.manual_seed(seed)
    alphas = (0.1, 0.9, 1.0) if arm == "dspark" else (1.0, 0.0, 0.0)
    drafter = DSpark(dcfg, embed_weight=target.embed_weight.detach()).to(device)
    with torch.no_grad():  # start at the target's logit scale (the LM head is the target's tied embedding)
        drafter.norm.weight.copy_(target.model.norm.weight)
    drafter.train()
    params = [p for p in drafter.parameters() if p.requires_grad]
    fused = torch.device(device).type == "cuda"
    opt = torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.0, fused=fused)
    n_tr = sum(p.numel() for p in params)
    log(f"{arm}: {n_tr/1e6:.2f}M trainable params ({dcfg.num_hidden_layers} layers, markov rank {dcfg.markov_rank}, "
        f"confidence {dcfg.enable_confidence_head}), loss alphas {alphas}, {len(seqs)} train / {len(val_seqs)} val seqs")
    rng = np.random.RandomState(seed)
    gen = torch.Generator(device=device).manual_seed(seed)
    batches, bi, epoch = make_batches(seqs, anchor_budget, rng), 0, 0
    total = fixed_steps or 10**9
    timer = Timer()
    t_calib = None
    step, hist = 0, []
    while step < total:
        if fixed_steps is None and step == 3:
            sync(device)
            t_calib = timer()
        if fixed_steps is None and step == calib_steps:
            sync(device)
            step_s = (timer() - t_calib) / (calib_steps - 3)
            total = plan_steps(seconds, timer(), step_s, step)
            log(f"{arm}: {step_s*1000:.1f} ms/step ({len(batches)} batches/epoch) -> planned {total} steps "
                f"(~{total/len(batches):.1f} epochs)")
        if bi >= len(batches):
            batches, bi, epoch = make_batches(seqs, anchor_budget, rng), 0, epoch + 1
        for gp in opt.param_groups:
            gp["lr"] = lr_at(step, total if total < 10**9 else 10**6, lr, warmup, floor=0.05)
        do_log = (step + 1) % log_every == 0 or step + 1 == total or step == 0
        loss, m = _step_metrics(target, drafter, seqs, batches[bi], pad_id, device, gen, alphas, max_anchors, do_log)
        bi += 1
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        step += 1
        if do_log:
            rec = _fmt(m)
            rec["step"] = step
            hist.append(rec)
            log(f"{arm} step {step}/{total} ep {epoch} " + " ".join(f"{k} {v}" for k, v in rec.items() if k != "step")
                + f" lr {opt.param_groups[0]['lr']:.2e} t {timer():.0f}s")
        if fixed_steps is None and timer() > seconds * 1.08:
            log(f"{arm}: wall-clock guard hit at step {step} (planned {total})")
            break
    sync(device)
    train_s = timer()
    drafter.eval()
    val = evaluate_drafter(target, drafter, val_seqs, device, pad_id, alphas, anchor_budget, max_anchors, seed)
    log(f"{arm}: validation {val}")
    info = {"arm": arm, "steps": step, "planned_steps": total, "epochs": epoch + bi / max(1, len(batches)),
            "seconds": train_s, "lr": lr, "warmup": warmup, "anchor_budget": anchor_budget,
            "max_anchors": max_anchors, "alphas": list(alphas), "trainable_params": n_tr,
            "final_train": hist[-1] if hist else None, "history": hist, "val": val}
    return drafter, info


def _fmt(m):
    out = {}
    for k in ("loss", "ce", "l1", "bce"):
        if k in m:
            out[k] = round(float(m[k].detach() if torch.is_tensor(m[k]) else m[k]), 4)
    if "accept_by_slot" in m:
        out["accept_by_slot"] = [round(a, 3) for a in m["accept_by_slot"]]
        out["tau_est"] = round(expected_al(m["accept_by_slot"]), 3)
    if "top1_by_slot" in m:
        out["top1_by_slot"] = [round(a, 3) for a in m["top1_by_slot"]]
    return out


@torch.no_grad()
def evaluate_drafter(target, drafter, seqs, device, pad_id, alphas, anchor_budget, max_anchors, seed):
    """Teacher-forced validation metrics over held-out prompts (all their anchors)."""
    if not seqs:
        return {}
    rng = np.random.RandomState(seed + 1)
    gen = torch.Generator(device=device).manual_seed(seed + 1)
    sums, n = {}, 0
    for idx in make_batches(seqs, anchor_budget, rng):
        _, m = _step_metrics(target, drafter, seqs, idx, pad_id, device, gen, alphas, max_anchors)
        f = _fmt(m)
        w = m["n_slots"]
        for k, v in f.items():
            if isinstance(v, list):
                sums[k] = [a + b * w for a, b in zip(sums.get(k, [0.0] * len(v)), v)]
            else:
                sums[k] = sums.get(k, 0.0) + v * w
        n += w
    out = {k: ([round(x / n, 4) for x in v] if isinstance(v, list) else round(v / n, 4)) for k, v in sums.items()}
    if "accept_by_slot" in out:
        out["tau_est"] = round(expected_al(out["accept_by_slot"]), 3)
    out["slots"] = n
    return out
