#!/usr/bin/env bash
# The test command of the README: install dependencies, build, run every test labelled cpu.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
cmake -B build -S . -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$(nproc)"
ctest --test-dir build -L cpu --output-on-failure -j"$(nproc)"
# server: the request parser's libFuzzer target for a bounded time, then the server tests again
# under AddressSanitizer + UBSan (a second build tree; the 60 s load test stays in the main run)
bash tests/fuzz/run.sh build 60
cmake -B build/asan -S . -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFLINT_SANITIZE=ON -DFLINT_CUDA=OFF >/dev/null
cmake --build build/asan -j"$(nproc)" --target flint test_server_unit
UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 ctest --test-dir build/asan -L server -LE slow --output-on-failure -j"$(nproc)"
