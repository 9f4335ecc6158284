#!/usr/bin/env python3
"""Per-kernel GPU time of a profiled flint run, summed per forward.

Reads the CSV that tools/device/gpu_session.sh's `ncu` step writes (ncu --csv --metrics
gpu__time_duration.sum), cuts the kernel sequence into forwards at each embedding kernel (every
target forward and every drafter draft starts with one; a drafter encode stays inside the target
forward before it), and prints for the last N forwards the total and the kernels grouped by name
and grid, largest first. Times are ncu's: kernels run one at a time, so launch overlap and the
gaps between kernels are not in them.

  python3 tools/ncu_steps.py OUT/ncu.csv [--last 2] [--top 20] [--totals] [--pick 3,9]
"""
import argparse
import collections
import csv
import sys


def load(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(line for line in f if line.startswith('"')))
    kernels = []
    for r in rows:
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        scale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}
        unit = scale.get(r["Metric Unit"])
        if unit is None:
            sys.exit(f"ncu_steps: unknown time unit {r['Metric Unit']!r}")
        name = r["Kernel Name"].split("(")[0].split("<")[0]
        kernels.append((name, r["Grid Size"], float(r["Metric Value"].replace(",", "")) * unit))
    return kernels


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("csv")
    ap.add_argument("--last", type=int, default=2, help="forwards to print (default 2)")
    ap.add_argument("--top", type=int, default=20, help="kernel groups per forward (default 20)")
    ap.add_argument("--totals", action="store_true", help="first one line per forward: its index, kernels, us")
    ap.add_argument("--pick", default="", help="comma-separated forward indices (from --totals) to detail instead")
    a = ap.parse_args()
    ks = load(a.csv)
    starts = [i for i, k in enumerate(ks) if k[0] == "embed_kernel"]
    if not starts:
        sys.exit("ncu_steps: no embed_kernel in the profile (not a flint run?)")
    spans = list(zip(starts, starts[1:] + [len(ks)]))
    if a.totals:
        for i, (s, e) in enumerate(spans):
            print(f"  forward {i:4d} at kernel {s:6d}: {e - s:4d} kernels, {sum(k[2] for k in ks[s:e]):9.1f} us")
    picked = [spans[int(i)] for i in a.pick.split(",") if i] if a.pick else (spans[-a.last:] if a.last > 0 else [])
    for s, e in picked:
        total = collections.defaultdict(float)
        count = collections.Counter()
        for name, grid, us in ks[s:e]:
            total[(name, grid)] += us
            count[(name, grid)] += 1
        print(f"== forward at kernel {s}: {e - s} kernels, {sum(total.values()):.1f} us")
        print(f"  {'us':>9} {'n':>4} {'us each':>8}  kernel grid")
        for key, us in sorted(total.items(), key=lambda kv: -kv[1])[: a.top]:
            print(f"  {us:9.1f} {count[key]:4d} {us / count[key]:8.1f}  {key[0]} {key[1]}")


if __name__ == "__main__":
    main()
