"""Reference speculative loop (golden reference for flint's verifier), batched but exact per row.

Per row and step (docs/DESIGN.md section 4, research/dspark.md sections 4.1 and 8.1):
 1. draft: one drafter backbone forward on [anchor, MASK*(K-1)] at positions P..P+K-1 over the
    cached context (< P); Markov loop k = 0..K-1: L_k = U_k + W2 W1[prev] (prev = anchor, then the
    drafted token), c_k = sigmoid(conf), x_k ~ q_k = softmax(L_k / T) (argmax when T = 0).
 2. verify: one target forward over [anchor, x_0..x_{K-1}] at positions P..P+K (position-addressed
    KV cache; rows past the committed prefix are simply overwritten later).
 3. accept left to right with prob min(1, p_k(x_k)/q_k(x_k)), p = softmax(logits/T) then top-p;
    at the first rejection emit from normalize(max(0, p_k - q_k)) (p_k when that mass <= 1e-8);
    all accepted: bonus from p_K. Greedy: accept while x_k == argmax p_k, emit argmax.
    An accepted EOS ends the row there (no extra token).
 4. commit: the drafter context gets the target taps of rows P..P+K (only < new P is ever read);
    P += accepted + 1; the emitted token is the next anchor.
Randomness is counter-based: uniforms are a hash of (seed, row key, absolute position, purpose,
index), so a row's output does not depend on the batch it ran in.
AL = tokens emitted per verify step (bonus/correction counted; the prefill token is not).
"""
import math

import torch

from .common import log

M32 = 0xFFFFFFFF
DRAFT, ACCEPT, EMIT = 1, 2, 3


def _mul32(x, c):
    lo, hi = x & 0xFFFF, x >> 16
    return (lo * c + (((hi * c) & 0xFFFF) << 16)) & M32


def _mix32(x):
    x = x ^ (x >> 16)
    x = _mul32(x, 0x7FEB352D)
    x = x ^ (x >> 15)
    x = _mul32(x, 0x846CA68B)
    return x ^ (x >> 16)


def uniform(seed, keys, pos, purpose, n=None):
    """keys [B] (int64), pos [B] or [B,m] -> float64 uniforms in (0,1) of shape pos.shape (+ [n])."""
    h = _mix32(torch.full_like(keys, (seed ^ 0x9E3779B9) & M32))
    h = _mix32(h ^ (keys & M32))
    h = h.view(-1, *([1] * (pos.dim() - 1)))
    h = _mix32(h ^ (pos & M32))
    h = _mix32(h ^ purpose)
    if n is not None:
        h = _mix32(h.unsqueeze(-1) ^ torch.arange(n, device=h.device))
    return (h.double() + 0.5) / 4294967296.0


def gumbel(seed, keys, pos, purpose, n):
    u = uniform(seed, keys, pos, purpose, n)
    return (-torch.log(-torch.log(u))).float()


def target_probs(logits, temperature, top_p):
    """Processed target distribution p: temperature, then top-p (smallest set reaching top_p)."""
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    if top_p < 1.0:
        sp, si = probs.sort(dim=-1, descending=True)
        cum = sp.cumsum(-1)
        sp = sp.masked_fill((cum - sp) >= top_p, 0.0)
        probs = torch.zeros_like(probs).scatter_(-1, si, sp)
        probs = probs / probs.sum(-1, keepdim=True)
    return probs


def sample_from(probs, g):
    return (torch.log(probs) + g).argmax(-1)


def accept_greedy(tlogits, drafts):
    """tlogits [B,K+1,V], drafts [B,K] -> (n accepted [B], emitted extra token [B])."""
    K = drafts.shape[1]
    am = tlogits.argmax(-1)
    n = (drafts == am[:, :K]).int().cumprod(-1).sum(-1)
    return n, am.gather(1, n.view(-1, 1)).squeeze(1)


def accept_sample(p, q, drafts, u, emit_noise):
    """Lossless speculative sampling for one verify step.
    p [B,K+1,V] processed target probs (row k predicts the slot-k token; row K = bonus),
    q [B,K,V] draft probs, drafts [B,K], u [B,K] acceptance uniforms,
    emit_noise(n) -> Gumbel noise [B,V] for the emitted token at slot n.
    Returns (n accepted [B], extra token [B])."""
    B, K = drafts.shape
    px = p[:, :K].gather(2, drafts.unsqueeze(-1)).squeeze(-1)
    qx = q.gather(2, drafts.unsqueeze(-1)).squeeze(-1).clamp_min(1e-8)
    ok = (u * qx.double()) < px.double()
    n = ok.int().cumprod(-1).sum(-1)
    rows = torch.arange(B, device=p.device)
    pn = p[rows, n]  # [B,V]
    qn = torch.cat([q, torch.zeros_like(q[:, :1])], dim=1)[rows, n]  # zeros for the bonus row
    r = (pn - qn).clamp_min(0.0)
    mass = r.sum(-1, keepdim=True)
    r = torch.where(mass > 1e-8, r / mass.clamp_min(1e-30), pn)
    extra = sample_from(r, emit_noise(n))
    return n, extra


def _pad(prompts, pad_id, device):
    T = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), T), pad_id, dtype=torch.long, device=device)
    for i, p in enumerate(prompts):
        ids[i, : len(p)] = torch.tensor(p, dtype=torch.long)
    return ids


def _pick(logits, keys, pos, temperature, top_p, seed, greedy_rows):
    """Next token per row at absolute position pos: argmax for greedy rows, else a Gumbel-max draw
    from the processed target distribution with EMIT noise keyed by (seed, row key, pos)."""
    am = logits.argmax(-1)
    if greedy_rows is True:
        return am
    p = target_probs(logits, temperature, top_p)
    smp = sample_from(p, gumbel(seed, keys, pos, EMIT, p.shape[-1]))
    return smp if greedy_rows is False else torch.where(greedy_rows, am, smp)


def _trim(row, eos_ids, max_new):
    row = row[:max_new]
    for i, t in enumerate(row):
        if t in eos_ids:
            return row[: i + 1]
    return row


def _select_cache(c, keep):
    c["k"] = c["k"][:, keep].contiguous()
    c["v"] = c["v"][:, keep].contiguous()


@torch.no_grad()
def plain_generate(target, prompts, keys, *, temperature=0.0, top_p=1.0, max_new=256, eos_ids=(), seed=0,
                   device="cpu", cache_dtype=torch.float32, pad_id=0, record_gap=False, autocast=False,
                   greedy_rows=None, check_every=16):
    """Target-only decoding (the K = 0 loop), batched. greedy_rows: per-row bools (default: all rows
    greedy iff temperature == 0). Returns token lists (each cut after its first EOS), and with
    record_gap also the top1 - top2 logit gap at every position (near-tie diagnosis).
    Bookkeeping stays on the device; the host syncs only every check_every steps."""
    B = len(prompts)
    if greedy_rows is None:
        g = temperature == 0
    else:
        g = torch.tensor(list(greedy_rows), dtype=torch.bool, device=device)
        g = True if bool(g.all()) else (False if not bool(g.any()) else g)
    lens = torch.tensor([len(p) for p in prompts], device=device)
    lmax = max(len(p) for p in prompts)
    cache = target.new_cache(B, lmax + max_new + 2, device, cache_dtype)
    ids = _pad(prompts, pad_id, device)
    keys = torch.as_tensor(keys, dtype=torch.long, device=device)
    eos = torch.tensor(list(eos_ids) or [-1], device=device)
    ac = torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16, enabled=autocast)
    with ac:
        h, _ = target.forward_cached(ids, torch.arange(lmax, device=device).expand(B, -1).contiguous(), cache, kv_len=lmax)
    last = target.logits(h[torch.arange(B, device=device), lens - 1]).float()
    tok = _pick(last, keys, lens, temperature, top_p, seed, g)
    buf = torch.full((B, max_new), -1, dtype=torch.long, device=device)
    gbuf = torch.zeros(B, max_new, device=device) if record_gap else None
    fin = torch.zeros(B, dtype=torch.bool, device=device)
    ridx = torch.arange(B, device=device)
    P = lens.clone()  # position of tok
    pmax = lmax  # host-side max(P) (all rows advance together)
    for step in range(max_new):
        buf[ridx, step] = tok
        if record_gap:
            t2 = last.topk(2, dim=-1).values
            gbuf[ridx, step] = t2[:, 0] - t2[:, 1]
        fin = fin | torch.isin(tok, eos)
        if step + 1 == max_new:
            break
        if (step + 1) % check_every == 0:
            n_alive = int((~fin).sum())
            if n_alive == 0:
                break
            if n_alive <= fin.numel() // 2:
                keep = (~fin).nonzero().squeeze(1)
                _select_cache(cache, keep)
                tok, P, keys, fin, ridx = tok[keep], P[keep], keys[keep], fin[keep], ridx[keep]
                if isinstance(g, torch.Tensor):
                    g = g[keep]
                pmax = int(P.max())
        with ac:
            h, _ = target.forward_cached(tok.view(-1, 1), P.view(-1, 1), cache, kv_len=pmax + 1)
        last = target.logits(h[:, 0]).float()
        tok = _pick(last, keys, P + 1, temperature, top_p, seed, g)
        P = P + 1
        pmax += 1
    rows = buf.tolist()
    outs = [_trim([t for t in r if t >= 0], eos_ids, max_new) for r in rows]
    if record_gap:
        gl = gbuf.tolist()
        return outs, [gl[i][: len(outs[i])] for i in range(B)]
    return outs


@torch.no_grad()
def spec_generate(target, drafter, prompts, keys, *, K=7, temperature=0.0, top_p=1.0, max_new=256, eos_ids=(),
                  seed=0, device="cpu", cache_dtype=torch.float32, pad_id=0):
    """Speculative decoding with the DSpark/DFlash drafter. Returns dict: outputs, per-row steps and
    emitted counts, accepted-count histogram, confidence calibration sums. One host sync per step."""
    greedy = temperature == 0
    B = len(prompts)
    V = target.cfg.vocab_size
    taps = list(drafter.cfg.target_layer_ids)
    lens_l = [len(p) for p in prompts]
    lens = torch.tensor(lens_l, device=device)
    lmax = max(lens_l)
    Tmax = lmax + max_new + 2 * K + 4
    tcache = target.new_cache(B, Tmax, device, cache_dtype)
    dcache = drafter.new_cache(B, Tmax, device, cache_dtype)
    ids = _pad(prompts, pad_id, device)
    kk = torch.as_tensor(keys, dtype=torch.long, device=device)
    eos_t = torch.tensor(list(eos_ids) or [-1], device=device)
    pos0 = torch.arange(lmax, device=device).expand(B, -1).contiguous()
    h, tp = target.forward_cached(ids, pos0, tcache, taps=taps, kv_len=lmax)
    drafter.write_context(dcache, tp, pos0)
    last = target.logits(h[torch.arange(B, device=device), lens - 1]).float()
    anchor = _pick(last, kk, lens, temperature, top_p, seed, greedy)
    P = lens.clone()
    outs = [[int(t)] for t in anchor.tolist()]
    steps, emitted = [0] * B, [0] * B
    hist = [0] * (K + 1)  # accepted drafts per step
    conf_sum, conf_hit, conf_n = [0.0] * K, [0.0] * K, [0] * K
    ridx = list(range(B))  # physical row -> logical row
    alive = [not (outs[r][0] in eos_ids or max_new <= 1) for r in range(B)]
    Ph = list(lens_l)  # host mirror of P
    arK = torch.arange(K, device=device)
    while any(alive):
        if sum(alive) <= len(alive) // 2:  # compaction
            keep_l = [i for i, a in enumerate(alive) if a]
            keep = torch.tensor(keep_l, device=device)
            _select_cache(tcache, keep)
            _select_cache(dcache, keep)
            anchor, P, kk = anchor[keep], P[keep], kk[keep]
            ridx = [ridx[i] for i in keep_l]
            Ph = [Ph[i] for i in keep_l]
            alive = [True] * len(keep_l)
        pmax = max(Ph)
        U, hfin = drafter.draft_block(dcache, anchor, P, K, Tc=pmax)
        if not greedy:
            dnoise = gumbel(seed, kk, P.view(-1, 1) + 1 + arK, DRAFT, V)  # [b,K,V]
        prev = anchor
        drafts, qs, confs = [], [], []
        for k in range(K):
            Lk = drafter.markov_logits(U[:, k], prev)
            c = drafter.confidence_logit(hfin[:, k], prev)
            if c is not None:
                confs.append(torch.sigmoid(c))
            if greedy:
                xk = Lk.argmax(-1)
            else:
                qk = torch.softmax(Lk.float() / temperature, -1)
                xk = sample_from(qk, dnoise[:, k])
                qs.append(qk)
            drafts.append(xk)
            prev = xk
        drafts = torch.stack(drafts, 1)
        vids = torch.cat([anchor.view(-1, 1), drafts], 1)
        vpos = P.view(-1, 1) + torch.arange(K + 1, device=device)
        h, tp = target.forward_cached(vids, vpos, tcache, taps=taps, kv_len=pmax + K + 1)
        tl = target.logits(h).float()
        if greedy:
            n, extra = accept_greedy(tl, drafts)
        else:
            p = target_probs(tl, temperature, top_p)
            u = uniform(seed, kk, P.view(-1, 1) + 1 + arK, ACCEPT)
            n, extra = accept_sample(p, torch.stack(qs, 1), drafts, u,
                                     lambda nn_: gumbel(seed, kk, P + nn_ + 1, EMIT, V))
        drafter.write_context(dcache, tp, vpos)
        is_eos = torch.isin(drafts, eos_t) & (arK.view(1, -1) < n.view(-1, 1))
        has_eos = is_eos.any(1)
        n_used = torch.where(has_eos, is_eos.int().argmax(1) + 1, n)
        packed = [n.double().view(-1, 1), n_used.double().view(-1, 1), extra.double().view(-1, 1),
                  has_eos.double().view(-1, 1), drafts.double()]
        if confs:
            packed.append(torch.stack(confs, 1).double())
        rows = torch.cat(packed, 1).tolist()  # the one host sync of the step
        for i, row in enumerate(rows):
            if not alive[i]:
                continue
            r = ridx[i]
            a, ex, he = int(row[1]), int(row[2]), bool(row[3])
            d = [int(x) for x in row[4 : 4 + K]]
            new = d[:a] + ([] if he else [ex])
            outs[r].extend(new)
            steps[r] += 1
            emitted[r] += len(new)
            hist[a] += 1
            if confs:
                for k in range(min(a + 1, K)):
                    conf_sum[k] += row[4 + K + k]
                    conf_hit[k] += 1.0 if a > k else 0.0
                    conf_n[k] += 1
            if he or ex in eos_ids or len(outs[r]) >= max_new:  # accepted EOS, or EOS emitted as the extra token
                alive[i] = False
            else:
                Ph[i] += int(row[0]) + 1
        alive_t = torch.tensor(alive, device=device)
        P = torch.where(alive_t, P + n + 1, P)
        anchor = extra
    outs = [o[:max_new] for o in outs]
    return {"outputs": outs, "steps": steps, "emitted": emitted, "hist": hist,
            "conf_sum": conf_sum, "conf_hit": conf_hit, "conf_n": conf_n}


def summarize(res, K):
    """AL (pooled and per-prompt mean), per-position acceptance and confidence calibration."""
    steps, em, hist = sum(res["steps"]), sum(res["emitted"]), res["hist"]
    reach = [sum(hist[i:]) for i in range(K + 1)]  # steps with >= i accepted drafts
    per_pos = [reach[i + 1] / max(steps, 1) for i in range(K)]
    cond = [reach[i + 1] / max(reach[i], 1) for i in range(K)]
    per_prompt = [e / s for e, s in zip(res["emitted"], res["steps"]) if s > 0]
    out = {
        "al": em / max(steps, 1),
        "al_mean_per_prompt": sum(per_prompt) / max(len(per_prompt), 1),
        "al_ci95_per_prompt": 1.96 * _std(per_prompt) / math.sqrt(max(len(per_prompt), 1)),
        "steps": steps,
        "tokens": em,
        "accepted_hist": hist,
        "accept_per_pos": per_pos,
        "accept_cond_per_pos": cond,
    }
    if res["conf_n"][0]:
        out["confidence_mean"] = [s / max(n, 1) for s, n in zip(res["conf_sum"], res["conf_n"])]
        out["confidence_actual"] = [h / max(n, 1) for h, n in zip(res["conf_hit"], res["conf_n"])]
    return out


def _std(x):
    if len(x) < 2:
        return 0.0
    m = sum(x) / len(x)
    return math.sqrt(sum((v - m) ** 2 for v in x) / (len(x) - 1))


def _chi2_crit(df, z=3.719):  # Wilson-Hilferty quantile, z = 3.719 -> p = 1e-4
    a = 2.0 / (9.0 * df)
    return df * (1 - a + z * math.sqrt(a)) ** 3


def check_acceptance_rule(trials=200000, V=6, K=3, seed=1234, device="cpu"):
    """Synthetic check that accept_sample emits exactly p: a context-free chain with fixed p_k, q_k
    (q with zeros where p > 0 and p with zeros where q > 0). Chi-square of the first and second
    emitted tokens against p_0 and p_1. Returns a dict; raises AssertionError on failure."""
    g = torch.Generator().manual_seed(seed)
    p = torch.rand(K + 1, V, generator=g) ** 2
    q = torch.rand(K, V, generator=g) ** 2
    p[:, 0] = 0.0  # the draft may propose tokens the target never emits
    q[:, 1] = 0.0  # and never propose tokens the target does emit
    p, q = p / p.sum(-1, keepdim=True), q / q.sum(-1, keepdim=True)
    keys = torch.arange(trials, dtype=torch.long)
    P = torch.zeros(trials, dtype=torch.long)
    drafts = torch.stack([sample_from(q[k].expand(trials, V), gumbel(seed, keys, P + k + 1, DRAFT, V)) for k in range(K)], 1)
    u = uniform(seed, keys, P.view(-1, 1) + 1 + torch.arange(K), ACCEPT)
    pb = p.unsqueeze(0).expand(trials, K + 1, V)
    qb = q.unsqueeze(0).expand(trials, K, V)
    n, extra = accept_sample(pb, qb, drafts, u, lambda nn_: gumbel(seed, keys, P + nn_ + 1, EMIT, V))
    seq = torch.cat([drafts, extra.view(-1, 1)], 1)
    first = torch.where(n >= 1, drafts[:, 0], extra)
    has2 = n >= 1
    second = torch.where(n >= 2, drafts[:, 1], extra)[has2]
    res = {}
    for name, tok, pk in (("first", first, p[0]), ("second", second, p[1])):
        cnt = torch.bincount(tok, minlength=V).double()
        exp = pk.double() * cnt.sum()
        m = exp > 0
        assert cnt[~m].sum() == 0, f"{name}: emitted a token with p = 0"
        chi2 = float((((cnt - exp) ** 2)[m] / exp[m]).sum())
        crit = _chi2_crit(int(m.sum()) - 1)
        res[name] = {"chi2": chi2, "crit_p1e-4": crit, "n": int(cnt.sum()), "pass": chi2 < crit}
    mean_acc = float(n.double().mean())
    # analytic expected accepted count for this context-free chain: sum_k prod_{i<=k} (1 - TV_i)
    a = (1 - 0.5 * (p[:K] - q).abs().sum(-1)).double()
    res["mean_accepted"] = mean_acc
    res["mean_accepted_expected"] = float(torch.cumprod(a, 0).sum())
    res["pass"] = res["first"]["pass"] and res["second"]["pass"] and abs(mean_acc - res["mean_accepted_expected"]) < 0.02
    del seq
    log("acceptance-rule check:", res)
    assert res["pass"], f"acceptance rule check failed: {res}"
    return res
