#!/usr/bin/env bash
# Where the 512-row tss GEMMs stall (session 37): one b64 q 8 qwen3-8b dummy verify under ncu, first
# listing the kernels (tools/ncu_steps.py), then, for the last forward's first-layer QKV, O,
# gate-up, down and its LM head one launch each with warp-state and source counters: the details
# page, the SASS source page as CSV and tools/ncu_sass_ops.py's summary (opcodes and the hottest
# instructions; the consumers' full-stage wait is the `@!P BRA` after SYNCS.PHASECHK.TRANS64.TRYWAIT).
#   OUT=/tmp/out bash tools/device/ncu_tss.sh   (binaries in .devbin, as gpu_session.sh; ~40 s)
# NCU_TSS_KERNELS picks among "qkv o gu down lm" (default all; the device tool brings back only
# so many files, so ask for two or three when the source CSVs are wanted).
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/common.sh
B=(bench --device cuda --load-format dummy --model-shape qwen3-8b --context 1024 --batch-sizes 64 --q 8 --steps 1
   --warmup 0 --baseline none)
timeout 120 "$ncu" --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv \
    --log-file "$OUT/tss_list.csv" .devbin/flint "${B[@]}" > "$OUT/tss_list.log" 2>&1
n=$(grep -c 'gemm_tss_kernel' "$OUT/tss_list.csv")
echo "tss launches: $n (a forward: 36 layers x 4 + the LM head)"
python3 tools/ncu_steps.py "$OUT/tss_list.csv" --last 1 --top 8
for k in ${NCU_TSS_KERNELS:-qkv o gu down lm}; do
    case $k in qkv) skip=$((n - 145)) ;; o) skip=$((n - 144)) ;; gu) skip=$((n - 143)) ;; down) skip=$((n - 142)) ;;
        lm) skip=$((n - 1)) ;; *) echo "unknown kernel $k"; continue ;; esac
    timeout 150 "$ncu" -f --clock-control none -k 'regex:gemm_tss' --launch-skip "$skip" --launch-count 1 \
        --section WarpStateStats --section SourceCounters --section SpeedOfLight --section LaunchStats \
        -o "$OUT/tss_$k" .devbin/flint "${B[@]}" > "$OUT/tss_$k.log" 2>&1
    "$ncu" --import "$OUT/tss_$k.ncu-rep" --page details > "$OUT/tss_${k}_details.txt" 2>&1
    "$ncu" --import "$OUT/tss_$k.ncu-rep" --page source --csv --print-source sass > "$OUT/tss_${k}_src.csv" 2>&1
    rm -f "$OUT/tss_$k.ncu-rep"
    echo "== $k: $(grep -E 'Duration|Grid Size' "$OUT/tss_${k}_details.txt" | tr -s ' ' | tr '\n' ' ')"
    python3 tools/ncu_sass_ops.py "$OUT/tss_${k}_src.csv" --top 12 2>&1 | head -40
done
