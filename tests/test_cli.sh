#!/usr/bin/env bash
# End-to-end checks of the flint binary: stories260K converted and generated greedily must equal
# Hugging Face transformers token for token (tests/fixtures/stories260K/hf_greedy.json, made by
# tools/check_convert_hf.py); bad input gives one clear message and exit status 1 (2 for usage).
set -u
FLINT="$1"; SRC="$2"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
pass=0; fail=0
ok()   { pass=$((pass+1)); }
bad()  { fail=$((fail+1)); echo "FAIL: $*" >&2; }
# expect STATUS PATTERN -- command...: exit status and a stderr line matching PATTERN
expect() {
  local want="$1" pat="$2"; shift 3
  "$@" >"$tmp/out" 2>"$tmp/err"; local got=$?
  if [ "$got" -ne "$want" ]; then bad "$* -> exit $got, want $want; stderr: $(head -c 300 "$tmp/err")"; return; fi
  if ! grep -q -- "$pat" "$tmp/err"; then bad "$* -> stderr lacks '$pat': $(head -c 300 "$tmp/err")"; return; fi
  ok
}

# --- stories260K: convert, then greedy 199 tokens from BOS equal transformers' ---
"$FLINT" convert llama2c --weights "$SRC/models/stories260K/stories260K.bin" \
  --tokenizer "$SRC/models/stories260K/tok512.bin" --out "$tmp/s260" >/dev/null 2>"$tmp/err" \
  && ok || bad "convert: $(cat "$tmp/err")"
"$FLINT" generate "$tmp/s260" --prompt "" --temperature 0 --max-tokens 199 --ignore-eos --json \
  >"$tmp/gen.json" 2>"$tmp/err" && ok || bad "generate: $(cat "$tmp/err")"
python3 - "$tmp/gen.json" "$SRC/tests/fixtures/stories260K/hf_greedy.json" <<'PY' && ok || bad "stories260K greedy differs from transformers"
import json, sys
got = json.load(open(sys.argv[1]))["token_ids"]
want = json.load(open(sys.argv[2]))["generated_ids"]
n = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), None)
print(f"stories260K: {len(got)} tokens, transformers {len(want)}, first difference at {n}")
sys.exit(0 if got == want and len(got) == 199 else 1)
PY
# text comes out as text on stdout, timings on stderr
"$FLINT" generate "$tmp/s260" --prompt "Once upon a time" --max-tokens 40 --seed 3 >"$tmp/out" 2>"$tmp/err" \
  && grep -q "tok/s" "$tmp/err" && [ -s "$tmp/out" ] && ok || bad "plain generate output"
# the same seed gives the same text
"$FLINT" generate "$tmp/s260" --prompt "Once upon a time" --max-tokens 40 --seed 3 >"$tmp/out2" 2>/dev/null
cmp -s "$tmp/out" "$tmp/out2" && ok || bad "seeded generate is not reproducible"

# --- bad input ---
expect 1 "config.json" -- "$FLINT" generate "$tmp/nope" --prompt hi
mkdir -p "$tmp/m1"; cp "$tmp/s260"/* "$tmp/m1/"
sed -i 's/LlamaForCausalLM/MistralForCausalLM/' "$tmp/m1/config.json"
expect 1 "MistralForCausalLM" -- "$FLINT" generate "$tmp/m1" --prompt hi
mkdir -p "$tmp/m2"; cp "$tmp/s260"/* "$tmp/m2/"
python3 - "$tmp/m2/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["intermediate_size"] = 100; json.dump(c, open(sys.argv[1], "w"))
PY
expect 1 "mlp" -- "$FLINT" generate "$tmp/m2" --prompt hi
mkdir -p "$tmp/m3"; cp "$tmp/s260"/* "$tmp/m3/"
head -c 5000 "$tmp/s260/model.safetensors" > "$tmp/m3/model.safetensors"
expect 1 "model.safetensors" -- "$FLINT" generate "$tmp/m3" --prompt hi
mkdir -p "$tmp/m4"; cp "$tmp/s260"/* "$tmp/m4/"
printf '\x10\x00\x00\x00\x00\x00\x00\x00{"a": not json }' > "$tmp/m4/model.safetensors"
expect 1 "model.safetensors" -- "$FLINT" generate "$tmp/m4" --prompt hi
mkdir -p "$tmp/m5"; cp "$tmp/s260"/* "$tmp/m5/"; rm "$tmp/m5/model.safetensors"
expect 1 "safetensors" -- "$FLINT" generate "$tmp/m5" --prompt hi
expect 1 "context" -- "$FLINT" generate "$tmp/s260" --prompt hi --max-tokens 100000
# GPU-only options on a CPU target: a clear refusal, not a crash
expect 1 "tensor parallelism runs on GPUs" -- "$FLINT" generate "$tmp/s260" --prompt hi --tensor-parallel-size 2
expect 2 "tensor-parallel-size expects" -- "$FLINT" generate "$tmp/s260" --prompt hi --tensor-parallel-size 0
expect 2 "gpu-memory-utilization expects" -- "$FLINT" serve "$tmp/s260" --gpu-memory-utilization 1.5
expect 2 "must be ascending" -- "$FLINT" serve "$tmp/s260" --cuda-graph-sizes 8,4
expect 2 "cuda-graph-sizes expects" -- "$FLINT" generate "$tmp/s260" --prompt hi --cuda-graph-sizes 1,x
expect 1 "CUDA graph size" -- "$FLINT" generate "$tmp/s260" --prompt hi --cuda-graph-sizes 1,2,60000
expect 1 "needs device cuda" -- "$FLINT" serve "$tmp/s260" --gpu-memory-utilization 0.5 --port 0
expect 2 "temperature" -- "$FLINT" generate "$tmp/s260" --prompt hi --temperature -1
expect 2 "unknown option" -- "$FLINT" generate "$tmp/s260" --prompt hi --frobnicate 1
expect 2 "prompt" -- "$FLINT" generate "$tmp/s260"
expect 2 "unknown command" -- "$FLINT" frobnicate
expect 1 "missing.bin" -- "$FLINT" convert llama2c --weights "$tmp/missing.bin" --tokenizer "$SRC/models/stories260K/tok512.bin" --out "$tmp/x"

echo "test_cli: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
