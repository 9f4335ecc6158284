#!/usr/bin/env bash
# Golden fixtures that need PyTorch / transformers, made on the GPU machine (the `device` tool runs
# this from the repository root; $OUT comes back). Needs the flint binary built here and its
# libraries carried: .devbin/flint and .devlibs/lib (see docs/device.md).
#   bash tools/device/fixtures.sh   ->  $OUT/fixtures.tar.gz (tests/fixtures/{golden,drafter,stories260K,chat})
set -euo pipefail
export LD_LIBRARY_PATH="$PWD/.devlibs/lib:${LD_LIBRARY_PATH:-}"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
OUT=${OUT:-/tmp/out}
work=$(mktemp -d)
python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__, "cuda", torch.cuda.is_available())'
mkdir -p "$work/tests/fixtures/stories260K"
.devbin/flint convert llama2c --weights models/stories260K/stories260K.bin --tokenizer models/stories260K/tok512.bin --out "$work/s260"
python3 tools/check_convert_hf.py "$work/s260" --n 199 --ignore-eos --llama2c models/stories260K/stories260K.bin \
  --out "$work/tests/fixtures/stories260K/hf_greedy.json"
python3 tools/make_golden.py --out "$work/tests/fixtures/golden"
python3 tools/make_drafter_golden.py --out "$work/tests/fixtures/drafter" \
  --target "$work/tests/fixtures/golden/qwen3"
tar -C "$work" -czf "$OUT/fixtures.tar.gz" tests
ls -la "$OUT"
