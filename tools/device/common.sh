# Sourced by the device scripts (tools/device/*.sh) after they cd to the repository root: $OUT made,
# the carried libraries (.devlibs) on the library path, and $ncu, Nsight Compute where installed
# (empty otherwise).
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$PWD/.devlibs/lib:${LD_LIBRARY_PATH:-}"
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
