#!/usr/bin/env bash
# #8: what a drafter costs an engine that does not draft. The embedded pair, the dynamic engine
# forced to K = 0 by a given cost model (drafting costs 1e6 ms) against the drafter-free K = 0, in
# interleaved rounds (one engine after the other drifts by a few percent): step times, host time
# by part and phases (--profile), then per-kernel GPU times of eager steps of both (ncu, one
# process: tools/ncu_steps.py --totals lists the forwards, --pick details two of them).
#   BIN=.devbin K0_BATCHES=8,64 bash tools/device/k0gap.sh  ->  $OUT/k0*.log
set -uo pipefail
cd "$(dirname "$0")/../.."
BIN=${BIN:-.devbin}
. tools/device/common.sh
SPEC='{"model": "models/flint-tiny-dspark", "num_speculative_tokens": 7, "dynamic_draft": true, "dynamic_cost": {"fixed_ms": 1, "row_ms": 0, "draft_ms": 1000000}}'
ARGS="models/flint-tiny --device cuda --context 128 --dataset gsm8k"
# shellcheck disable=SC2086
timeout 200 $BIN/flint bench $ARGS --batch-sizes ${K0_BATCHES:-8,64} --warmup 10 --steps 50 --rounds 4 --profile \
    --speculative-config "$SPEC" --draft-lengths 7 > "$OUT/k0prof.log" 2>&1
echo "k0prof rc $?"; sed -n 3,12p "$OUT/k0prof.log"; grep -A 14 "step profile" "$OUT/k0prof.log"
[ -n "$ncu" ] || { echo "no ncu"; exit 0; }
# one process: the drafter-free engine's forwards first, then the dynamic one's (K = 0 after warm-up)
# shellcheck disable=SC2086
timeout 200 "$ncu" --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv \
    --log-file "$OUT/k0ncu.csv" $BIN/flint bench $ARGS --batch-sizes ${K0_NCU_BATCH:-64} --warmup 10 --steps 3 \
    --enforce-eager --speculative-config "$SPEC" --draft-lengths 7 > "$OUT/k0ncu.log" 2>&1
echo "ncu rc $?"
python3 tools/ncu_steps.py "$OUT/k0ncu.csv" --totals --last 0
