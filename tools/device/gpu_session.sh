#!/usr/bin/env bash
# One device call that covers the GPU work of a session from binaries built on the CPU machine
# (the GPU machine cannot configure the main project: no cJSON/PCRE2/utf8proc headers). Before
# calling `device`, build and copy (carry [".devbin", ".devlibs"]; docs/device.md):
#   cmake --build build --target flint test_target_cuda [test_sampler_cuda test_drafter_cuda]
#   cmake --build build-k     # the kernel lab, tests/kernels
#   cp build/flint build/tests/{test_target_cuda,...} build-k/test_cuda_ops .devbin/
# Runs what is there, in this order, each under a timeout, then prints a summary:
#   test_cuda_ops (kernels vs C references + GEMM/attention lab; labsmall: the small-M GEMM's
#   launch tuning alone; lablarge: the warpgroup tilings at 96..512 rows; labss: tools/lab/lab_ss.cu
#   against cuBLAS, from .devbin/lab_ss built with the command in its header), test_sampler_cuda,
#   test_drafter_cuda, test_target_cuda, test_tp_cuda, `flint bench --load-format dummy` (graphs,
#   with the PyTorch baseline run by flint bench itself; benchab: the GEMMs' PDL off; benchwg:
#   the wgmma GEMM off (the mma.sync block tiles for M > 32);
#   benchkp: the other kernels' PDL off; bench2: tensor parallel over 2 GPUs; embedded / embsplit /
#   embedkp / embdyn: the embedded pair at fixed K (one graph per drafting step), with the step as
#   separate launches (--split-step), with the other kernels' PDL off, under dynamic K
#   (EMB_BATCHES, EMB_ROUNDS; EMB_VARY=1: each round on other prompts; EMB_SAME_TEXT=1: every K
#   over the same tokens of each answer, engines kept over the rounds); spec8b: qwen3-8b with a
#   random drafter; eager: --enforce-eager). NVLink multicast stays off (NCCL_NVLS_ENABLE=0) for every step.
#   STEPS="kernels target bench" bash tools/device/gpu_session.sh  ->  $OUT/*.log
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$PWD/.devlibs/lib:${LD_LIBRARY_PATH:-}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# flint loads NCCL at run time (dlopen): use the one PyTorch ships when the system has none
if ! ldconfig -p 2>/dev/null | grep -q libnccl.so.2; then
    nccl_dir=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null)
    [ -f "$nccl_dir/libnccl.so.2" ] || nccl_dir=$(dirname "$(find / -name libnccl.so.2 2>/dev/null | head -1)" 2>/dev/null)
    [ -n "$nccl_dir" ] && export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$nccl_dir" && echo "NCCL from $nccl_dir"
fi
BIN=${BIN:-.devbin} # another build of the binaries (A/B of two branches in one call)
STEPS=${STEPS:-"kernels memcheck sampler drafter target tp bench spec8b eager"}
SHAPE_ARGS=${SHAPE_ARGS:-"--model-shape qwen3-8b --context 1024 --batch-sizes 1,8,32,64 --q 1,8"}
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>&1 | head -2
summary=""
step() { # name timeout log command...
    local name=$1 t=$2 log=$3
    shift 3
    case " $STEPS " in *" $name "*) ;; *) return 0 ;; esac
    if [ ! -x "$1" ] && [ "$1" != python3 ]; then summary+=$(printf '%-10s %s\n' "$name" "skipped: no $1")$'\n'; return 0; fi
    echo "== $name: $*"
    local t0=$(date +%s)
    timeout "$t" "$@" > "$OUT/$log" 2>&1
    local rc=$?
    cat "$OUT/$log"
    summary+=$(printf '%-10s exit %d in %d s' "$name" "$rc" "$(( $(date +%s) - t0 ))")$'\n'
}
# shellcheck disable=SC2086
step kernels 200 kernels.log $BIN/test_cuda_ops ${KERNEL_ARGS:-}
step labsmall 120 labsmall.log $BIN/test_cuda_ops --lab-small
step lablarge 200 lablarge.log $BIN/test_cuda_ops --lab-large
step labss 200 labss.log $BIN/lab_ss
san=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null | head -1)
[ -n "$san" ] && step memcheck 150 memcheck.log "$san" --tool memcheck --print-limit 20 --error-exitcode 3 \
    $BIN/test_cuda_ops --quick --no-lab
step sampler 120 sampler.log $BIN/test_sampler_cuda
step drafter 180 drafter.log $BIN/test_drafter_cuda "$PWD"
step target 420 target.log $BIN/test_target_cuda "$PWD"
step tp 240 tp.log $BIN/test_tp_cuda "$PWD"
# shellcheck disable=SC2086
step bench 300 bench.log $BIN/flint bench --device cuda --load-format dummy $SHAPE_ARGS --steps 30 \
    --output "$OUT/bench.json"
# the same table with the GEMMs' programmatic dependent launch off (A/B)
# shellcheck disable=SC2086
step benchab 300 benchab.log $BIN/flint bench --device cuda --load-format dummy $SHAPE_ARGS --steps 30 \
    --gemm-pdl 0 --baseline none --output "$OUT/benchab.json"
# the same table with the other kernels' programmatic dependent launch off (A/B)
# shellcheck disable=SC2086
step benchkp 300 benchkp.log $BIN/flint bench --device cuda --load-format dummy $SHAPE_ARGS --steps 30 \
    --kernel-pdl 0 --baseline none --output "$OUT/benchkp.json"
# the same table with the wgmma GEMM off (A/B)
# shellcheck disable=SC2086
step benchwg 300 benchwg.log $BIN/flint bench --device cuda --load-format dummy $SHAPE_ARGS --steps 30 \
    --gemm-wgmma 0 --baseline none --output "$OUT/benchwg.json"
# shellcheck disable=SC2086
step bench2 300 bench2.log $BIN/flint bench --device cuda --load-format dummy $SHAPE_ARGS --steps 20 \
    --tensor-parallel-size 2 --baseline none --output "$OUT/bench2.json"
# the whole speculative step at qwen3-8b size: random target + a random DSpark-shaped drafter (5
# layers, taps 1,9,17,25,33), acceptance forced to a mean AL of 3.41, K = 0 measured in the same run
if case " $STEPS " in *" spec8b "*|*" ncu "*) true ;; *) false ;; esac; then
    [ -f /tmp/d8b/model.safetensors ] || python3 tools/make_random_drafter.py qwen3-8b /tmp/d8b --layers 5 \
        --taps 1,9,17,25,33 --markov-rank 64 --dtype f16 > "$OUT/spec8b_make.log" 2>&1
fi
step spec8b 400 spec8b.log $BIN/flint bench --device cuda --load-format dummy --model-shape qwen3-8b \
    --speculative-config '{"model": "/tmp/d8b", "num_speculative_tokens": 7}' --synthetic-acceptance 3.41 \
    --batch-sizes ${SPEC_BATCHES:-1,8,32,64} --draft-lengths ${SPEC_KS:-1,3,5,7} --context 1024 --warmup 3 --steps 10 \
    ${SPEC_EXTRA:-} --output "$OUT/spec8b.json"
# the embedded pair with real acceptance (GSM8K questions as context): fixed draft lengths, then
# dynamic ones (#8: within 3% of the best fixed K at every batch)
# (EMB_SAME_TEXT=1: every K times the same text, tokens 16..136 of each answer, and each K's engine
# is kept over the rounds as a server keeps it: the fair judge of the dynamic draft length, session 40)
EMB_WINDOW="--warmup 10 --steps 60"
[ -n "${EMB_SAME_TEXT:-}" ] && EMB_WINDOW="--warmup 16 --tokens 120 --keep-engines"
EMB_ARGS="models/flint-tiny --device cuda --batch-sizes ${EMB_BATCHES:-1,8,32,64} --context 128 --dataset gsm8k \
$EMB_WINDOW --rounds ${EMB_ROUNDS:-1}${EMB_VARY:+ --vary-prompts}"
# shellcheck disable=SC2086
step embedded 300 embedded.log $BIN/flint bench $EMB_ARGS --speculative-config '{"model": "models/flint-tiny-dspark"}' \
    --draft-lengths 1,3,5,7 --output "$OUT/embedded.json"
# the same with drafting steps as separate launches instead of one graph (#8's A/B)
# shellcheck disable=SC2086
step embsplit 300 embsplit.log $BIN/flint bench $EMB_ARGS --speculative-config '{"model": "models/flint-tiny-dspark"}' \
    --draft-lengths 1,3,5,7 --split-step --output "$OUT/embsplit.json"
# shellcheck disable=SC2086
step embedkp 300 embedkp.log $BIN/flint bench $EMB_ARGS --speculative-config '{"model": "models/flint-tiny-dspark"}' \
    --draft-lengths 1,3,5,7 --kernel-pdl 0 --output "$OUT/embedkp.json"
# shellcheck disable=SC2086
step embdyn 300 embdyn.log $BIN/flint bench $EMB_ARGS --speculative-config \
    '{"model": "models/flint-tiny-dspark", "num_speculative_tokens": 7, "dynamic_draft": true}' --draft-lengths 7 \
    --output "$OUT/embdyn.json"
# per-kernel GPU times of a few eager steps (Nsight Compute, one metric, caches and clocks left
# alone): NCU_ARGS are flint's arguments (default: the batch-1 K = 7 step at qwen3-8b size),
# NCU_OPTS ncu's (default: kernel durations into $OUT/ncu.csv; tools/ncu_steps.py sums them by
# forward)
ncu_bin=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
# shellcheck disable=SC2086
[ -n "$ncu_bin" ] && step ncu 500 ncu.log "$ncu_bin" --clock-control none --cache-control none \
    ${NCU_OPTS:---metrics gpu__time_duration.sum --csv --log-file "$OUT/ncu.csv"} $BIN/flint ${NCU_ARGS:-bench --device cuda \
    --load-format dummy --model-shape qwen3-8b --speculative-config '{"model": "/tmp/d8b", "num_speculative_tokens": 7}' \
    --synthetic-acceptance 3.41 --batch-sizes 1 --draft-lengths 7 --context 1024 --warmup 0 --steps 2 --enforce-eager}
# shellcheck disable=SC2086
step eager 150 eager.log $BIN/flint bench --device cuda --load-format dummy $SHAPE_ARGS --steps 10 \
    --enforce-eager --baseline none
echo "== summary"
printf '%s' "$summary"
grep -hE ' FAIL$|^FAIL|failed' "$OUT"/*.log 2>/dev/null | head -20
