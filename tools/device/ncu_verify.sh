#!/usr/bin/env bash
# Per-kernel GPU time (Nsight Compute, one metric, caches and clocks left alone) of one captured
# qwen3-8b dummy verify step at batch NCU_BATCH (default 1) for each q in NCU_QS (default "1 8"),
# summed by kernel (tools/ncu_steps.py): where a batch-1 verify of 8 rows spends more than one of 1
# row (#7); at NCU_BATCH=64, where the 512-row forward goes (session 29).
#   OUT=/tmp/out bash tools/device/ncu_verify.sh   (binaries in .devbin, as gpu_session.sh)
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/common.sh
for q in ${NCU_QS:-1 8}; do
    timeout 250 "$ncu" --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv \
        --log-file "$OUT/ncu_b${NCU_BATCH:-1}_q$q.csv" .devbin/flint bench --device cuda --load-format dummy --model-shape qwen3-8b \
        --context 1024 --batch-sizes "${NCU_BATCH:-1}" --q "$q" --steps 1 --warmup 0 --baseline none > "$OUT/ncu_q$q.log" 2>&1
    echo "batch ${NCU_BATCH:-1}, q = $q: ncu exit $?"
    python3 tools/ncu_steps.py "$OUT/ncu_b${NCU_BATCH:-1}_q$q.csv" --last 1 --top 40
done
