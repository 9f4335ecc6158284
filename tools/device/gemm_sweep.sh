#!/usr/bin/env bash
# The GEMM tilings at a few row counts, every listed variant at every listed shape (test_cuda_ops
# --lab-gemm: one tiling, weights rotated past L2, 20 back-to-back launches), one line each, then
# each shape's fastest. Session 33 found better picks for 17..64 rows this way (gemm_tc_pick);
# the dispatch's own choice is the variant gemm_tc_pick names for that M x N x K. Variant indices:
# tc_variants in target/gemm_cuda.cu (2: tc m4 n1 u2 p1, 21: tcw 128, 22: TCW_64_S2, 23: TCW_64,
# 25: TSS_128, 27: TSS_64, 28: TSS_64_B2, ...).
#   SWEEP_M="32 64" SWEEP_SHAPES="4096x4096 4096x12288" SWEEP_V="2 22 23 27 28" \
#       bash tools/device/gemm_sweep.sh      (BIN: where test_cuda_ops is, .devbin by default)
# Shapes are N x K (qwen3-8b's O 4096x4096, QKV 6144x4096, down 4096x12288, gate-up 24576x4096).
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/common.sh
[ -f .devbin/bins.tar.xz ] && tar -C .devbin -xJf .devbin/bins.tar.xz
BIN=${BIN:-.devbin}
[ -x "$BIN/test_cuda_ops" ] || { echo "no $BIN/test_cuda_ops"; exit 1; }
MS=${SWEEP_M:-"32 64"}
SHAPES=${SWEEP_SHAPES:-"4096x4096 6144x4096 4096x12288 24576x4096"}
VS=${SWEEP_V:-"1 2 8 22 23 27 28 29"}
: > "$OUT/sweep.log"
for m in $MS; do
    for shape in $SHAPES; do
        n=${shape%x*} k=${shape#*x}
        for v in $VS; do
            timeout 60 "$BIN/test_cuda_ops" --lab-gemm "$v" "$m" "$n" "$k" 2>&1 | tail -1 | tee -a "$OUT/sweep.log"
        done
    done
done
echo "== fastest per shape"
# lines: "<tiling> M m N n K k: t us, f TFLOP/s"
awk '/ us, / { key = $0; sub(/^.* M /, "M ", key); sub(/:.*/, "", key); t = $0; sub(/^.*: /, "", t); sub(/ us.*/, "", t);
               name = $0; sub(/ M [0-9]+ N .*/, "", name);
               if (!(key in best) || t + 0 < best[key]) { best[key] = t + 0; who[key] = name } }
     END { for (k in best) printf "%-28s %8.1f us  %s\n", k, best[k], who[k] }' "$OUT/sweep.log" | sort -k2,2n -k4,4n -k6,6n
