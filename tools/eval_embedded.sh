#!/usr/bin/env bash
# The committed acceptance reports of the embedded model pair, in one command:
#
#   tools/eval_embedded.sh [--flint build/flint] [--out docs/evals] [--threads N] [--batch-size B]
#
# With the settings of the model cards: K = 7, probabilistic drafts, max 256 tokens per turn, seed 0,
# at temperature 0 (greedy) and at temperature 1.0 / top-p 0.95:
#   gsm8k_t0, gsm8k_t1        flint eval, first 100 GSM8K test prompts, DSpark drafter
#   mt_bench_t0, mt_bench_t1  flint eval, the 80 MT-Bench first turns, DSpark drafter
#   ab_gsm8k_t0/, ab_gsm8k_t1/  flint ab, DSpark (A) vs DFlash (B) drafter, the same 100 GSM8K prompts
# Each eval writes NAME.json, NAME.md and NAME.svg; each A/B writes ab.json, report.md and
# acceptance.svg in its directory; README.md indexes them. Run from anywhere; paths in the
# reports are relative to the repository root.
set -euo pipefail
cd "$(dirname "$0")/.."
FLINT=build/flint OUT=docs/evals THREADS=0 BATCH=16
while [ $# -gt 0 ]; do
  case "$1" in
    --flint) FLINT="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --threads) THREADS="$2"; shift 2 ;;
    --batch-size) BATCH="$2"; shift 2 ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "eval_embedded.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
MODEL=models/flint-tiny DSPARK=models/flint-tiny-dspark DFLASH=models/flint-tiny-dflash
for d in "$MODEL" "$DSPARK" "$DFLASH"; do
  [ -f "$d/config.json" ] || { echo "eval_embedded.sh: $d/config.json is missing (the embedded models are not in models/ yet)" >&2; exit 1; }
done
[ -x "$FLINT" ] || { echo "eval_embedded.sh: $FLINT is not built (cmake -B build -S . && cmake --build build)" >&2; exit 1; }
mkdir -p "$OUT"

K=7 MAXT=256
common=(--max-tokens $MAXT --seed 0 --batch-size "$BATCH" --threads "$THREADS" --quiet)
t0=(--temperature 0)
t1=(--temperature 1.0 --top-p 0.95)
spec() { echo "{\"model\": \"$1\", \"method\": \"$2\", \"num_speculative_tokens\": $K, \"draft_sample_method\": \"probabilistic\"}"; }

set -x
"$FLINT" eval "$MODEL" --speculative-config "$(spec $DSPARK dspark)" --dataset gsm8k --num-prompts 100 "${t0[@]}" "${common[@]}" --output "$OUT/gsm8k_t0.json"
"$FLINT" eval "$MODEL" --speculative-config "$(spec $DSPARK dspark)" --dataset gsm8k --num-prompts 100 "${t1[@]}" "${common[@]}" --output "$OUT/gsm8k_t1.json"
"$FLINT" eval "$MODEL" --speculative-config "$(spec $DSPARK dspark)" --dataset mt_bench "${t0[@]}" "${common[@]}" --output "$OUT/mt_bench_t0.json"
"$FLINT" eval "$MODEL" --speculative-config "$(spec $DSPARK dspark)" --dataset mt_bench "${t1[@]}" "${common[@]}" --output "$OUT/mt_bench_t1.json"
abspec="{\"num_speculative_tokens\": $K, \"draft_sample_method\": \"probabilistic\"}"
"$FLINT" ab "$MODEL" --drafter-a "$DSPARK" --drafter-b "$DFLASH" --label-a dspark --label-b dflash \
  --speculative-config "$abspec" --dataset gsm8k --num-prompts 100 "${t0[@]}" "${common[@]}" --output "$OUT/ab_gsm8k_t0"
"$FLINT" ab "$MODEL" --drafter-a "$DSPARK" --drafter-b "$DFLASH" --label-a dspark --label-b dflash \
  --speculative-config "$abspec" --dataset gsm8k --num-prompts 100 "${t1[@]}" "${common[@]}" --output "$OUT/ab_gsm8k_t1"
set +x

# the index: one line per report, numbers read back from the JSON
python3 - "$OUT" <<'PY'
import json, os, sys
out = sys.argv[1]
rows = []
for name in ("gsm8k_t0", "gsm8k_t1", "mt_bench_t0", "mt_bench_t1"):
    j = json.load(open(os.path.join(out, name + ".json")))
    s = j["datasets"][0]["summary"]; c = j["config"]
    lo, hi = s["mean_acceptance_length_ci"]
    rows.append(f"| [{name}]({name}.md) ([svg]({name}.svg)) | {j['datasets'][0]['name']} | {s['prompts']} | "
                f"{c['temperature']:g} | {s['mean_acceptance_length']:.3f} [{lo:.3f}, {hi:.3f}] | "
                f"{s['draft_acceptance_rate']:.3f} | " + " ".join(f"{x:.2f}" for x in s["acceptance_rate_per_position"]) + " |")
ab = []
for name in ("ab_gsm8k_t0", "ab_gsm8k_t1"):
    j = json.load(open(os.path.join(out, name, "ab.json")))
    ab.append(f"| [{name}]({name}/report.md) | {j['config']['temperature']:g} | {j['verdict']} |")
with open(os.path.join(out, "README.md"), "w") as f:
    f.write("# Acceptance of the embedded model pair\n\n"
            "Made by `tools/eval_embedded.sh` (flint eval / flint ab; K = 7, probabilistic drafts, "
            "max 256 tokens, seed 0; temperature 1 runs use top-p 0.95). AL = 1 + accepted drafts / "
            "verify steps (bonus token counted), pooled over prompts, with a 95% bootstrap interval "
            "over prompts.\n\n"
            "| report | dataset | prompts | T | mean AL [95% CI] | draft acceptance | acceptance per position |\n"
            "|---|---|---|---|---|---|---|\n" + "\n".join(rows) + "\n\n"
            "## DSpark (A) vs DFlash (B), GSM8K 100 prompts\n\n| report | T | verdict |\n|---|---|---|\n"
            + "\n".join(ab) + "\n")
print(f"wrote {out}/README.md")
PY
