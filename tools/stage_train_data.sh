#!/usr/bin/env bash
# Copy exactly the data files the training recipe (drafter/train/recipe.py) reads from the shared
# data folder into an ignored folder of the repo, so they travel with the working tree to the GPU
# machine. Checks every file against the sha256 listed in its PROVENANCE.md.
#   usage: bash tools/stage_train_data.sh [SRC=../shared/data] [DST=.traindata]
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=${1:-../shared/data}
DST=${2:-.traindata}
[ -d "$SRC" ] || { echo "no data folder $SRC" >&2; exit 1; }

FILES=(
  gsm8k/PROVENANCE.md gsm8k/train.jsonl gsm8k/test.jsonl
  sharegpt/PROVENANCE.md sharegpt/sg_90k_part1_html_cleaned_lang_first_sampled_sorted.json
  sharegpt/ShareGPT_V3_filtered_1000.json sharegpt/ShareGPT_V3_filtered_500.json
  mt_bench/PROVENANCE.md mt_bench/question.jsonl
  humaneval/PROVENANCE.md humaneval/HumanEval.jsonl.gz
  mbpp/PROVENANCE.md mbpp/sanitized-mbpp.json
  spec_bench/PROVENANCE.md spec_bench/question.jsonl
  deepspec_eval/PROVENANCE.md eagle_bench/PROVENANCE.md
)
for f in "$SRC"/deepspec_eval/*.jsonl "$SRC"/eagle_bench/*/question.jsonl; do
  FILES+=("${f#"$SRC"/}")
done

bad=0
for f in "${FILES[@]}"; do
  [ -f "$SRC/$f" ] || { echo "missing $SRC/$f" >&2; exit 1; }
  mkdir -p "$DST/$(dirname "$f")"
  install -m 644 "$SRC/$f" "$DST/$f"
  case "$f" in *PROVENANCE.md) continue ;; esac
  sum=$(sha256sum "$DST/$f" | cut -d' ' -f1)
  prov="$SRC/${f%%/*}/PROVENANCE.md"
  if grep -q "$sum" "$prov"; then echo "ok    $f"; else echo "WARN  $f: sha256 $sum not listed in $prov"; bad=1; fi
done
echo "staged ${#FILES[@]} files into $DST: $(du -sh "$DST" | cut -f1)"
[ $bad = 0 ] || echo "some files do not match their PROVENANCE.md checksums" >&2
