#!/usr/bin/env python3
"""Which SASS instructions a kernel executes most (Nsight Compute source page, SASS view).

Reads `ncu --import R --page source --csv --print-source sass` output for one profiled launch
(SourceCounters section), sums executed warp instructions and stall samples by opcode, and lists
the hottest instructions in address order with their neighbours' opcodes: where a kernel's
instruction count goes when it is issue- or latency-bound rather than memory-bound.

  python3 tools/ncu_sass_ops.py src.csv [--top 40]
"""
import argparse
import collections
import csv
import re


def num(x):
    try:
        return float(str(x).replace(",", ""))
    except ValueError:
        return 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=40)
    a = ap.parse_args()
    with open(a.csv, newline="") as f:
        lines = [l for l in f if l.startswith('"')]
    head = next((i for i, l in enumerate(lines) if l.startswith('"Address"')), 0)
    lines = lines[head:]
    rows = list(csv.DictReader(lines))
    if not rows:
        raise SystemExit("no rows")
    keys = list(rows[0].keys())
    k_src = next(k for k in keys if k.strip().lower() == "source")
    k_ex = next(k for k in keys if k.strip().lower() == "instructions executed")
    k_st = next((k for k in keys if k.lower().startswith("warp stall sampling (all")), None)
    k_addr = next((k for k in keys if "address" in k.lower()), None)
    ops = collections.defaultdict(lambda: [0.0, 0.0])
    total = stall = 0.0
    seq = []
    for r in rows:
        src = r[k_src].strip()
        ins = re.sub(r"^@!?U?P[T0-9]+\s+", "", src)
        op = ins.split(" ")[0].rstrip(";") if ins else "?"
        ex, st = num(r[k_ex]), num(r[k_st]) if k_st else 0.0
        ops[op][0] += ex
        ops[op][1] += st
        total += ex
        stall += st
        seq.append((r.get(k_addr, ""), src, ex, st))
    print(f"executed warp instructions {total:.0f}, stall samples {stall:.0f}")
    print(f"{'opcode':24s} {'executed':>12s} {'%':>6s} {'stall %':>8s}")
    for op, (ex, st) in sorted(ops.items(), key=lambda kv: -kv[1][0])[:a.top]:
        print(f"{op:24s} {ex:12.0f} {100*ex/max(total,1):6.1f} {100*st/max(stall,1):8.1f}")
    print("\nhottest instructions by stall samples:")
    for addr, src, ex, st in sorted(seq, key=lambda s: -s[3])[:a.top]:
        print(f"  {addr:>8s} {ex:10.0f} {100*st/max(stall,1):5.1f}%  {src[:90]}")


if __name__ == "__main__":
    main()
