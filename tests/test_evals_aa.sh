#!/usr/bin/env bash
# A/A calibration of `flint ab` on real engine runs (label slow, two to three minutes on 2 cores): the
# same random drafter on both arms, 100 repetitions with different seeds; arm B gets its own seeds
# (--seed-b) so the two arms sample independently and the per-prompt AL differences are pure
# noise, at temperature 2 where the random drafter does get drafts accepted. At least 95 of the
# 100 verdicts must be "no significant difference" (the nominal false-positive rate is at most 5%;
# tests/test_evals_stats.c checks the same on synthetic data over 2000 repetitions).
set -u
FLINT="$1"; SRC="$2"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
M="$tmp/s260"
"$FLINT" convert llama2c --weights "$SRC/models/stories260K/stories260K.bin" \
  --tokenizer "$SRC/models/stories260K/tok512.bin" --out "$M" >/dev/null 2>"$tmp/err" || { cat "$tmp/err"; exit 1; }
python3 "$SRC/tools/make_random_drafter.py" "$M" "$tmp/d0" --seed 0 >/dev/null || exit 1
reps=100; sig=0; errs=0
for r in $(seq 1 $reps); do
  if ! "$FLINT" ab "$M" --drafter-a "$tmp/d0" --drafter-b "$tmp/d0" --dataset sharegpt --num-prompts 40 \
      --max-tokens 48 --temperature 2 --speculative-config '{"num_speculative_tokens": 2}' --seed $((r * 1000)) \
      --seed-b $((r * 1000 + 500000)) --bootstrap 1000 --batch-size 40 --threads 1 --log-level warn --quiet \
      --output "$tmp/ab" >"$tmp/out" 2>"$tmp/err"; then
    errs=$((errs+1)); cat "$tmp/err" >&2; continue
  fi
  grep -q "^no significant difference" "$tmp/out" || { sig=$((sig+1)); echo "repetition $r: $(cat "$tmp/out")"; }
done
echo "A/A on real runs: $sig of $reps repetitions called significant, $errs errors"
[ "$errs" -eq 0 ] && [ "$sig" -le 5 ]
