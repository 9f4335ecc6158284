#!/usr/bin/env python3
"""Lab: replay draft-length policies at batch 1 over acceptance traces (tools/lab/accept_trace.c).

Why: the dynamic gate (verifier/schedule.c) is judged against fixed draft lengths on a few prompts
whose answers move between stretches that are hard and easy to draft. A trace holds, for every
position p of a prompt's greedy continuation, the drafts a(p) a K-draft anchored there accepts;
a step drafting k accepts min(a(p), k). With the GPU's measured step times the replay gives each
policy's tokens per ms over the same text as `flint bench --tokens` times it, in seconds.

The `gate` policy mirrors flint_engine_pick_k at n = 1 (the first 8 drafting steps at K, then
the k with the most tokens per ms if that beats not drafting, probes while not drafting, every 4
steps where that is a close call, deep steps while drafting k < K), with the estimates of
flint_engine_observe_acceptance, its modelled times taken as the real ones (the offsets learned);
the others are session 39's gate and the variants tried in session 40 (docs/benchmarks.md).
A trace: build-m/lab_accept_trace models/flint-tiny models/flint-tiny-dspark --prompts 24 --len 400
(60 s on 2 cores). Step times (ms, H200, the embedded pair, session 40): plain
0.200, drafting k 0.2655 + 0.0064 k (fixed K = 1..7 measured 0.272..0.310), a drafting step right
after a plain one +0.025 (it encodes the held rows: probes took 0.32-0.35), a plain one right
after a drafting one +0.010.

    python3 tools/lab/gate_sim.py TRACE [--warmup 16] [--tokens 120] [--prompts 8] [--first 0] [--carry]
"""
import argparse
import collections

K = 7
T0, TK0, TK1, UP, DOWN = 0.200, 0.2655, 0.0064, 0.025, 0.010


def t_draft(k):
    return TK0 + TK1 * k


class Gate:
    """flint_engine_pick_k at n = 1 (np = 1: a probe is a whole drafting step) and its estimates."""

    def __init__(self, decay=0.98, probe_cap=True, init_steps=8, optimism=0.0, probe_every=None, zprobe=None, konly=False, deep_every=8, ucb=None, kmargin=None):
        self.decay, self.probe_cap, self.init_steps = decay, probe_cap, init_steps
        self.optimism, self.probe_every, self.zprobe = optimism, probe_every, zprobe
        self.konly, self.deep_every = konly, deep_every
        self.ucb, self.kmargin = ucb, kmargin
        self.s1 = self.s2 = 0.0  # decayed sums of the accepted count and its square
        self.cnt = 0.0
        self.pcnt, self.pdraft, self.pacc = [0.0] * K, [0.0] * K, [0.0] * K
        self.steps = self.last_draft = self.obs_steps = self.last_deep = 0
        self.probe_ms = t_draft(K) + UP

    def E(self, k):
        e = 1.0
        for j in range(k):
            if self.pcnt[j] > 0:
                e += self.pacc[j] / self.pcnt[j]
        return e

    def pick(self):
        self.steps += 1
        t_without = T0
        best, k_best, t_with = 0.0, K, 0.0
        for k in range(1, K + 1):
            if self.konly and k < K:
                continue
            rate = (self.E(k) + self.optimism) / t_draft(k)
            if t_with == 0.0 or rate >= best:
                best, k_best, t_with = rate, k, t_draft(k)
        kind, k_step = "draft", K
        se = 0.0
        if self.cnt > 1:
            mean = self.s1 / self.cnt
            se = (max(self.s2 / self.cnt - mean * mean, 0.25) / self.cnt) ** 0.5
        if self.kmargin is not None and k_best < K:
            # a shorter draft only where it beats K by more than kmargin standard errors of E
            if (best - (self.E(K) + self.kmargin * se) / t_draft(K)) <= 0:
                best, k_best, t_with = self.E(K) / t_draft(K), K, t_draft(K)
        if self.cnt >= 24 or self.obs_steps >= self.init_steps:
            ratio = best * t_without
            if self.ucb is not None:
                ratio = (best + self.ucb * se / t_with) * t_without
            if ratio > 1.0:
                k_step = k_best
                if k_best < K:
                    extra = t_draft(K) - t_draft(k_best)
                    md = max(self.deep_every, extra / (0.01 * t_with))
                    md = min(md, 512)
                    if self.steps - self.last_deep >= int(md):
                        kind, self.last_deep = "deep", self.steps
            else:
                mm = (self.probe_ms - t_without - t_without * (self.E(K) - 1.0)) / (0.01 * t_without)
                if self.probe_cap and mm > 4.0 + self.cnt:
                    mm = 4.0 + self.cnt
                if self.probe_every:
                    mm = self.probe_every
                if self.zprobe is not None and self.cnt > 1:
                    mean = self.s1 / self.cnt
                    var = max(self.s2 / self.cnt - mean * mean, 0.25)
                    se = (var / self.cnt) ** 0.5
                    z = (1.0 / ratio - 1.0) * self.E(k_best) / se  # the bar's distance in s.e.
                    if z <= self.zprobe:
                        mm = 4
                m = 4 if mm < 4 else 512 if mm > 512 else int(mm)
                if self.steps - self.last_draft < m:
                    k_step, kind = 0, "plain"
                else:
                    kind = "probe"
        if k_step > 0:
            self.last_draft = self.steps
        return k_step, kind

    def observe(self, cap, acc):
        d = self.decay
        self.obs_steps += 1
        self.cnt = d * self.cnt + 1.0
        self.s1 = d * self.s1 + acc
        self.s2 = d * self.s2 + acc * acc
        for j in range(cap):
            self.pcnt[j] = d * self.pcnt[j] + 1.0
            self.pdraft[j] = d * self.pdraft[j] + 1.0
            self.pacc[j] = d * self.pacc[j] + (acc > j)


def run(trace, policy, warmup, tokens):
    """One prompt: tokens per ms over the window [warmup, warmup + tokens) of emitted tokens."""
    p, emitted, prev = 0, 1, "plain"  # the prefill emitted the first anchor
    t_win = tok_win = steps_win = 0.0
    start = None
    gate = policy() if callable(policy) else None
    hist = collections.Counter()
    while True:
        if start is None and emitted >= warmup:
            start = emitted
        if start is not None and emitted - start >= tokens:
            break
        if p >= len(trace):
            raise SystemExit("trace too short: raise accept_trace's --len")
        if gate is None:
            k, kind = policy, "draft" if policy else "plain"
        else:
            k, kind = gate.pick()
        cap = K if kind in ("deep", "probe") else k
        if cap > 0:
            acc = min(trace[p], cap)
            ms = t_draft(cap) + (UP if prev == "plain" else 0.0)
            if gate:
                gate.observe(cap, acc)
            prev = "draft"
        else:
            acc = 0
            ms = T0 + (DOWN if prev == "draft" else 0.0)
            prev = "plain"
        p += acc + 1
        if start is not None:
            t_win += ms
            tok_win += acc + 1
            steps_win += 1
            hist[kind if kind != "draft" else "k%d" % k] += 1
        emitted += acc + 1
    return tok_win, t_win, steps_win, hist


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--warmup", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=120)
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--first", type=int, default=0)
    ap.add_argument("--carry", action="store_true",
                    help="one gate over all the prompts, as a server's engine (flint bench --keep-engines)")
    a = ap.parse_args()
    traces = collections.defaultdict(list)
    for line in open(a.trace):
        r, p, acc = map(int, line.split())
        traces[r].append(acc)
    rs = sorted(traces)[a.first:a.first + a.prompts]
    policies = [("K=0", 0)] + [("K=%d" % k, k) for k in (1, 3, 5, 7)] + [
        ("gate", lambda: Gate(zprobe=2)),            # verifier/schedule.c now (close_call)
        ("gate s39", lambda: Gate()),                # before: probes every ~4 + dyn_cnt steps
        # tried in session 40, not kept
        ("decay .9", lambda: Gate(zprobe=2, decay=0.9)),
        ("decay .995", lambda: Gate(zprobe=2, decay=0.995)),
        ("probe 4", lambda: Gate(probe_every=4)),
        ("optim .2", lambda: Gate(optimism=0.2)),
        ("ucb 2", lambda: Gate(ucb=2)),
        ("ucb2 km2", lambda: Gate(zprobe=2, ucb=2, kmargin=2)),
        ("K only", lambda: Gate(zprobe=2, konly=True)),
    ]
    base = best = None
    for name, pol in policies:
        tok = ms = steps = 0.0
        hist = collections.Counter()
        per = []
        shared = pol() if a.carry and callable(pol) else None
        for r in rs:
            t, m, s, h = run(traces[r], (lambda: shared) if shared else pol, a.warmup, a.tokens)
            tok, ms, steps = tok + t, ms + m, steps + s
            hist.update(h)
            per.append(t / s)
        rate = tok / ms
        base = base or rate
        if not callable(pol):
            best = max(best or 0, rate)
        print("%-10s %5.2fx %s tokens/step %.2f  per prompt %s  %s" % (
            name, rate / base, "(%.3f of the best fixed K)" % (rate / best) if callable(pol) else " " * 26,
            tok / steps, " ".join("%.2f" % x for x in per),
            " ".join("%s:%d" % kv for kv in sorted(hist.items())) if callable(pol) else ""))


if __name__ == "__main__":
    main()
