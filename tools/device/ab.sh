#!/usr/bin/env bash
# Same-call A/B of several flint builds on the GPU machine: each round runs every build through the
# same points (the qwen3-8b verify table, the embedded pair, the speculative step at qwen3-8b size
# with its phase profile), rounds alternate so that drift hits every build alike, and one line per
# build and point comes out. Builds: .devbin/<name> (or unpacked from .devbin/bins.tar.xz: ship
# several stripped builds as one xz archive, docs/device.md). Session 24 made its decisions this way.
#   AB_BINS="flint_old flint" OUT=/tmp/out bash tools/device/ab.sh
# AB_ROUNDS (2), AB_STEPS (verify, embedded, spec8b: which parts), AB_VERIFY_BATCHES (1,8),
# AB_EMB_BATCHES (1,8), AB_SPEC_BATCHES (1,8), AB_DEVICE (cuda; cpu for a dry run of the script),
# AB_MAXLEN (the qwen3-8b runs' --max-model-len; unset: the bench's own, just enough for its context).
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/common.sh
[ -f .devbin/bins.tar.xz ] && tar -C .devbin -xJf .devbin/bins.tar.xz
BINS=${AB_BINS:-flint}
ROUNDS=${AB_ROUNDS:-2}
STEPS=${AB_STEPS:-"verify embedded spec8b"}
DEV=${AB_DEVICE:-cuda}
ML=()
[ -n "${AB_MAXLEN:-}" ] && ML=(--max-model-len "$AB_MAXLEN")
has() { case " $STEPS " in *" $1 "*) return 0 ;; esac; return 1; }
if has spec8b && [ ! -f /tmp/d8b/model.safetensors ]; then
    python3 tools/make_random_drafter.py qwen3-8b /tmp/d8b --layers 5 --taps 1,9,17,25,33 --markov-rank 64 \
        --dtype f16 > "$OUT/ab_drafter.log" 2>&1 || tail -5 "$OUT/ab_drafter.log"
fi
# table rows of `flint bench`: the lines that start with two integers (batch, q or K)
rows() { grep -E '^\s+[0-9]+\s+[0-9]+\s'; }
for r in $(seq 1 "$ROUNDS"); do
    list=$BINS
    [ $((r % 2)) -eq 0 ] && list=$(echo "$BINS" | tr ' ' '\n' | tac | tr '\n' ' ') # every other round reversed
    for b in $list; do
        bin=.devbin/$b
        [ -x "$bin" ] || { echo "$b: no $bin"; continue; }
        if has verify; then
            timeout 200 "$bin" bench --device "$DEV" --load-format dummy --model-shape "${AB_SHAPE:-qwen3-8b}" \
                --context 1024 --batch-sizes "${AB_VERIFY_BATCHES:-1,8}" --q 1,8 --steps 30 --baseline none "${ML[@]}" 2>&1 |
                rows | awk -v b="$b" -v r="$r" '{printf "verify  %-12s round %s  batch %3s q %s  %s ms\n", b, r, $1, $2, $4}'
        fi
        if has embedded; then
            timeout 200 "$bin" bench models/flint-tiny --device "$DEV" --context 128 --dataset gsm8k --warmup 10 \
                --steps 60 --batch-sizes "${AB_EMB_BATCHES:-1,8}" --draft-lengths 7 \
                --speculative-config '{"model": "models/flint-tiny-dspark"}' 2>&1 |
                rows | awk -v b="$b" -v r="$r" '{printf "emb     %-12s round %s  batch %3s K %s  %s ms  host %s us\n", b, r, $1, $2, $5, $NF}'
        fi
        if has spec8b; then
            timeout 300 "$bin" bench --device "$DEV" --load-format dummy --model-shape qwen3-8b \
                --speculative-config '{"model": "/tmp/d8b", "num_speculative_tokens": 7}' --synthetic-acceptance 3.41 \
                --batch-sizes "${AB_SPEC_BATCHES:-1,8}" --draft-lengths 7 --context 1024 --warmup 3 --steps 20 --profile "${ML[@]}" 2>&1 |
                sed -n '/step profile/,/host us per step/p' | rows | awk -v b="$b" -v r="$r" \
                '$2 == 7 {printf "spec8b  %-12s round %s  batch %3s K 7  step %s  draft %s  verify %s ms\n", b, r, $1, $3, $4, $5}'
        fi
    done
done
