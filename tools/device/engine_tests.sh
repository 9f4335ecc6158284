#!/usr/bin/env bash
# The engine's CUDA tests on the GPU machine, from binaries built on the CPU machine (that machine
# cannot configure the main project: no cJSON/PCRE2/utf8proc headers). Before calling `device`:
#   cmake --build build --target flint test_target_cuda && cp build/flint build/tests/test_target_cuda .devbin/
# and carry [".devbin", ".devlibs"] (docs/device.md makes .devlibs; add libcudart.so.13 there too). Runs, from the repository root:
#   1. test_target_cuda: CUDA vs CPU logits and taps (flint-tiny, golden Qwen3 and Llama), GPU batch
#      invariance, greedy speculation == target-only with the target on the GPU (K 1..7, batch
#      1/2/8/32/64);
#   2. flint generate --device cuda on the embedded pair, with and without speculation.
#   bash tools/device/engine_tests.sh   ->  $OUT/test_target_cuda.log, $OUT/generate.log
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$PWD/.devlibs/lib:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -2
echo "== test_target_cuda"
timeout 240 .devbin/test_target_cuda "$PWD" > "$OUT/test_target_cuda.log" 2>&1
rc=$?
cat "$OUT/test_target_cuda.log"
echo "== flint generate --device cuda"
q="Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. How many clips did Natalia sell altogether in April and May?"
{
  for dev in cpu cuda; do
    echo "-- $dev, target only"
    timeout 60 .devbin/flint generate --device $dev --chat --prompt "$q" --temperature 0 --max-tokens 128 2>&1 | tail -2
    echo "-- $dev, K = 7"
    timeout 60 .devbin/flint generate --device $dev --chat --prompt "$q" --temperature 0 --max-tokens 128 --speculative-config '{"model": "models/flint-tiny-dspark", "num_speculative_tokens": 7}' 2>&1 | tail -3
  done
} > "$OUT/generate.log" 2>&1
cat "$OUT/generate.log"
echo "== summary: test_target_cuda exit $rc"
exit $rc
