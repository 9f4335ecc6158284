#!/usr/bin/env bash
# Build the request-parser fuzz target with clang + libFuzzer (ASan, UBSan) and run it for a
# bounded time. The parser is compiled here with instrumentation; the rest (core, the engine's
# defaults) comes from an existing gcc build's static libraries.
#   bash tests/fuzz/run.sh BUILD_DIR [SECONDS]
set -euo pipefail
BUILD="$1"; SECONDS_MAX="${2:-60}"
SRC="$(cd "$(dirname "$0")/../.." && pwd)"
OUT="$BUILD/fuzz"
mkdir -p "$OUT/corpus"
CC="${FUZZ_CC:-clang}"
# a build with the CUDA backend: its static libraries hold nvcc objects that need the CUDA runtime
CUDA_LIBS=""
CUDART="$(sed -n 's/^CUDA_cudart_LIBRARY:FILEPATH=//p' "$BUILD/CMakeCache.txt" 2>/dev/null || true)"
CUDA_DIR="$(dirname "${CUDART:-.}")"
if [ -n "$CUDART" ] && ls "$BUILD"/CMakeFiles/flint_target.dir/target/*.cu.o >/dev/null 2>&1; then
  CUDA_LIBS="-L$CUDA_DIR -Wl,-rpath,$CUDA_DIR -lcudart -lstdc++"
fi
"$CC" -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -D_GNU_SOURCE -I"$SRC" \
  "$SRC/tests/fuzz/fuzz_request.c" "$SRC/server/request.c" "$SRC/server/tokbuf.c" "$SRC/server/response.c" \
  "$BUILD/libflint_verifier.a" "$BUILD/libflint_drafter.a" "$BUILD/libflint_target.a" \
  "$BUILD/libflint_sampler.a" "$BUILD/libflint_core.a" \
  $(pkg-config --libs libcjson libpcre2-8 libutf8proc libxxhash) $CUDA_LIBS -lgomp -lpthread -lm -o "$OUT/fuzz_request"
# new inputs go to the build tree; the checked-in seeds are read only
"$OUT/fuzz_request" -max_total_time="$SECONDS_MAX" -dict="$SRC/tests/fuzz/request.dict" -max_len=4096 \
  -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$OUT/" "$OUT/corpus" "$SRC/tests/fuzz/corpus" 2>&1 | tail -25
echo "fuzz_request: ran ${SECONDS_MAX} s without a crash"
