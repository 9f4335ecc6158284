#!/usr/bin/env bash
# The test command of the README: install dependencies, build, run every test labelled cpu.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
cmake -B build -S . -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$(nproc)"
ctest --test-dir build -L cpu --output-on-failure -j"$(nproc)"
