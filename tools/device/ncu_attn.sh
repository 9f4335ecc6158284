#!/usr/bin/env bash
# A per-source-line profile of the attention kernels at batch 1, verify of 8 rows, context 1024
# (session 18): ncu's warp-state and source counters for one split and one merge launch of an eager
# qwen3-8b dummy run, then the details page and the SASS-level source table as CSV under $OUT.
#   OUT=/tmp/out bash tools/device/ncu_attn.sh   (binaries in .devbin, as gpu_session.sh)
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/common.sh
echo "ncu: $ncu"
timeout 300 $ncu -f --clock-control none -k 'regex:attn_tc_kernel|attn_merge_kernel' --launch-skip 100 --launch-count 2 \
  --section WarpStateStats --section SourceCounters --section LaunchStats --section Occupancy --section SpeedOfLight \
  --section MemoryWorkloadAnalysis -o $OUT/attn .devbin/flint bench --device cuda --load-format dummy --model-shape qwen3-8b \
  --context 1024 --batch-sizes 1 --q 8 --steps 3 --warmup 1 --enforce-eager --baseline none > $OUT/run.log 2>&1
echo "rc $?"; tail -5 $OUT/run.log
$ncu --import $OUT/attn.ncu-rep --page details > $OUT/attn_details.txt 2>&1
$ncu --import $OUT/attn.ncu-rep --page source --csv --print-source sass > $OUT/attn_src.csv 2>&1
ls -la $OUT; grep -E "attn|Duration|Registers|Achieved Occupancy|Block Size|Grid Size|Shared Memory Config|Dynamic Shared" $OUT/attn_details.txt | head -40
