#!/usr/bin/env bash
# One command for the whole model-pair recipe (see drafter/train/recipe.py):
#   bash drafter/train/run.sh OUTDIR [recipe args...]
# Environment: DATA (default .traindata, staged by tools/stage_train_data.sh), WORK (work folder,
# default /tmp/flint-train-work/NAME), PACK (if set: a folder that receives OUTDIR as a tar split in
# 15 MiB parts, for transports with a per-file size limit; rebuild with `cat PACK/models.tar.part* | tar x`).
set -euo pipefail
cd "$(dirname "$0")/../.."
[ $# -ge 1 ] || { echo "usage: bash drafter/train/run.sh OUTDIR [recipe args...]" >&2; exit 2; }
OUT=$1; shift
DATA=${DATA:-.traindata}
args=(--data "$DATA" --out "$OUT")
[ -n "${WORK:-}" ] && args+=(--work "$WORK")
export PYTHONUNBUFFERED=1
python3 -m drafter.train.recipe "${args[@]}" "$@"
if [ -n "${PACK:-}" ]; then
  mkdir -p "$PACK"
  tar -C "$(dirname "$OUT")" -cf - "$(basename "$OUT")" | split -b 15m -d - "$PACK/models.tar.part"
  ls -l "$PACK"
fi
