#!/usr/bin/env bash
# The CUDA test suite on the GPU machine, in one call (the `device` tool runs it from the
# repository root; $OUT comes back). Needs nothing carried: it builds the kernel lab there with
# the standalone project tests/kernels/CMakeLists.txt (the kernels, their C references and
# core/status.c; no cJSON, PCRE2 or utf8proc, which that machine lacks), then runs
#   1. test_cuda_ops: every kernel of target/ops_cuda.h against its C reference, batch
#      invariance (GEMM, attention), then the GEMM and attention timing lab;
#   2. test_cuda_ops --quick under compute-sanitizer memcheck (small shapes, no guard bytes),
#      when the tool is there and time is left;
# and prints the table and a summary. About 1-2 minutes; everything stops by 230 s.
#   bash tools/device/cuda_tests.sh       ->  $OUT/cuda_tests.log, $OUT/memcheck.log, $OUT/build.log
# Build fallbacks, in order: cmake; nvcc + gcc by hand; a binary built on the CPU machine and
# carried in .devbin/test_cuda_ops (cmake -S tests/kernels -B build-k && cmake --build build-k,
# then cp build-k/test_cuda_ops .devbin/; carry [".devbin"]).
# Reproduce a run: FLINT_SEED=<the seed it printed> bash tools/device/cuda_tests.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/out}
B=${BUILD_DIR:-build-cuda}
mkdir -p "$OUT"
[ -d /usr/local/cuda/bin ] && export PATH="/usr/local/cuda/bin:$PATH"
t0=$(date +%s)
deadline=$((t0 + 230))
left() { echo $((deadline - $(date +%s))); }

echo "== machine"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>&1 | head -4
nvcc --version 2>&1 | tail -1
jobs=$(nproc 2>/dev/null || echo 8)

echo "== build"
bin="" how=""
: > "$OUT/build.log"
if command -v cmake >/dev/null && command -v nvcc >/dev/null &&
   cmake -S tests/kernels -B "$B" -DCMAKE_CUDA_ARCHITECTURES=90a -DCMAKE_BUILD_TYPE=Release \
         -DCMAKE_CUDA_COMPILER="$(command -v nvcc)" >> "$OUT/build.log" 2>&1 &&
   cmake --build "$B" -j"$jobs" --target test_cuda_ops >> "$OUT/build.log" 2>&1; then
    bin=$B/test_cuda_ops how=cmake
else
    echo "cmake build failed; the end of $OUT/build.log:"
    tail -15 "$OUT/build.log"
    if command -v nvcc >/dev/null; then
        echo "trying nvcc + gcc directly"
        d=$B/direct inc="$(dirname "$(dirname "$(command -v nvcc)")")/include"
        mkdir -p "$d"
        if nvcc -O3 -arch=sm_90a -DFLINT_SM90A -I. -c target/ops_cuda.cu -o "$d/ops_cuda.o" >> "$OUT/build.log" 2>&1 &&
           nvcc -O3 -arch=sm_90a -DFLINT_SM90A -I. -c target/attn_cuda.cu -o "$d/attn_cuda.o" >> "$OUT/build.log" 2>&1 &&
           nvcc -O3 -arch=sm_90a -DFLINT_SM90A -I. -c target/gemm_cuda.cu -o "$d/gemm_cuda.o" >> "$OUT/build.log" 2>&1 &&
           nvcc -O3 -arch=sm_90a -DFLINT_SM90A -I. -c target/gemm_tss_cuda.cu -o "$d/gemm_tss_cuda.o" >> "$OUT/build.log" 2>&1 &&
           gcc -O2 -std=c11 -D_GNU_SOURCE -ffp-contract=off -I. -Itests -I"$inc" -c tests/kernels/test_cuda_ops.c -o "$d/test.o" >> "$OUT/build.log" 2>&1 &&
           gcc -O2 -std=c11 -D_GNU_SOURCE -I. -Itests -I"$inc" -c tests/kernels/lab_cuda_ops.c -o "$d/lab.o" >> "$OUT/build.log" 2>&1 &&
           gcc -O2 -std=c11 -D_GNU_SOURCE -I. -Itests -I"$inc" -c tests/kernels/cuda_test_util.c -o "$d/util.o" >> "$OUT/build.log" 2>&1 &&
           gcc -O2 -std=c11 -D_GNU_SOURCE -ffp-contract=off -I. -c target/ops_cpu.c -o "$d/ops_cpu.o" >> "$OUT/build.log" 2>&1 &&
           gcc -O2 -std=c11 -D_GNU_SOURCE -I. -c core/status.c -o "$d/status.o" >> "$OUT/build.log" 2>&1 &&
           nvcc -arch=sm_90a "$d/test.o" "$d/lab.o" "$d/util.o" "$d/ops_cuda.o" "$d/attn_cuda.o" "$d/gemm_cuda.o" "$d/gemm_tss_cuda.o" "$d/ops_cpu.o" "$d/status.o" -o "$d/test_cuda_ops" -lm >> "$OUT/build.log" 2>&1; then
            bin=$d/test_cuda_ops how="nvcc+gcc (cmake failed)"
        else
            tail -15 "$OUT/build.log"
        fi
    fi
    if [ -z "$bin" ] && [ -x .devbin/test_cuda_ops ]; then
        bin=.devbin/test_cuda_ops how="prebuilt .devbin/test_cuda_ops (no build here)"
    fi
fi
if [ -z "$bin" ]; then
    echo "no test binary: nothing was run"
    exit 1
fi
build_s=$(( $(date +%s) - t0 ))
echo "built with $how in ${build_s} s"

echo "== kernels vs C references, batch invariance, timing lab"
t=$(left); [ "$t" -gt 150 ] && t=150
timeout "$t" "$bin" > "$OUT/cuda_tests.log" 2>&1
rc=$?
cat "$OUT/cuda_tests.log"
case $rc in
    0) tests="all passed" ;;
    124) tests="TIMED OUT after ${t} s" ;;
    1) tests="FAILED" ;;
    *) tests="CRASHED (exit $rc)" ;;
esac
counts=$(grep -E '^test_cuda_ops: [0-9]+ passed' "$OUT/cuda_tests.log" | tail -1 | sed 's/^test_cuda_ops: //')
seed=$(grep -oE 'seed [0-9]+' "$OUT/cuda_tests.log" | head -1)

echo "== memcheck (test_cuda_ops --quick under compute-sanitizer)"
mc="not run"
mrc=0
san=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null | head -1)
t=$(left)
if [ -z "$san" ]; then
    mc="compute-sanitizer not found"
elif [ "$t" -lt 30 ]; then
    mc="skipped: ${t} s left"
else
    [ "$t" -gt 90 ] && t=90
    timeout "$t" "$san" --tool memcheck --print-limit 20 --error-exitcode 3 "$bin" --quick --no-lab \
        > "$OUT/memcheck.log" 2>&1
    mrc=$?
    summary=$(grep -E 'ERROR SUMMARY' "$OUT/memcheck.log" | tail -1 | sed 's/^=* *//')
    case $mrc in
        0) mc="clean (${summary:-no summary line})" ;;
        3) mc="MEMORY ERRORS: ${summary}"; grep -E '^=+ (Invalid|Program hit|  at |    by )' "$OUT/memcheck.log" | head -20 ;;
        124) mc="timed out after ${t} s (not an error)"; mrc=0 ;;
        1) mc="tests failed under memcheck, ${summary:-no summary line}" ;;
        *) if grep -qiE 'not supported|unable to|LibraryNotLoaded' "$OUT/memcheck.log"; then
               mc="compute-sanitizer could not run here (exit $mrc; see memcheck.log)"; mrc=0
           else
               mc="exit $mrc, ${summary:-no summary line}"
           fi
           tail -5 "$OUT/memcheck.log" ;;
    esac
fi

echo "== summary"
printf '%-10s %s\n' build "$how, ${build_s} s"
printf '%-10s %s\n' kernels "$tests${counts:+: $counts}${seed:+ ($seed)}"
grep -E ' FAIL$' "$OUT/cuda_tests.log" | sed 's/^/  failed:  /'
printf '%-10s %s\n' memcheck "$mc"
printf '%-10s %s\n' wall "$(( $(date +%s) - t0 )) s"
[ "$rc" -eq 0 ] && [ "$mrc" -eq 0 ]
