#!/usr/bin/env bash
# flint eval / ab / bench end to end on stories260K (converted at test time, a real Llama-2 model
# with a Llama-2 chat template) with two random DSpark drafters (acceptance near 0 at T = 0, a
# little at high temperature; every code path runs):
# - eval: two runs with one seed give identical JSON apart from "timing"; --batch-size 1, 3 and
#   16 give identical JSON (the per-prompt output hashes included); another seed changes outputs;
#   per-category breakdown, multi-turn MT-Bench, several datasets, --no-chat; the JSON fields;
# - SVGs are well-formed XML with the expected elements (and render to PNG when rsvg-convert is
#   installed);
# - ab: both arms' reports; an A/A run (one drafter on both arms) gives identical outputs, zero
#   differences and "no significant difference" for two seeds;
# - bench: the grid, K = 0 baseline with speed-up 1, synthetic rates 1 and 0 giving AL K + 1 and 1,
#   AL -> rate conversion, --rounds (pooled rounds, the engine's host time per step);
# - bad input: exit status 1 with a one-line message (2 for usage errors).
# Runs in about 20 s on 2 cores; --threads 1 keeps OpenMP from fighting other jobs for the cores.
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
  if [ "$got" -ne "$want" ]; then bad "$* -> exit $got, want $want; stderr: $(head -c 400 "$tmp/err")"; return; fi
  if ! grep -q -- "$pat" "$tmp/err"; then bad "$* -> stderr lacks '$pat': $(head -c 400 "$tmp/err")"; return; fi
  ok
}
run() { "$@" >"$tmp/out" 2>"$tmp/err" && ok || bad "$*: $(tail -c 600 "$tmp/err")"; }
py() { python3 - "$@" && ok || bad "python check $1"; }

M="$tmp/s260"
"$FLINT" convert llama2c --weights "$SRC/models/stories260K/stories260K.bin" \
  --tokenizer "$SRC/models/stories260K/tok512.bin" --out "$M" >/dev/null 2>"$tmp/err" || { echo "convert failed"; cat "$tmp/err"; exit 1; }
python3 "$SRC/tools/make_random_drafter.py" "$M" "$tmp/d0" --seed 0 >/dev/null || exit 1
python3 "$SRC/tools/make_random_drafter.py" "$M" "$tmp/d1" --seed 1 >/dev/null || exit 1
SC0="{\"model\": \"$tmp/d0\", \"num_speculative_tokens\": 4}"
E=(--threads 1 --log-level warn)

# ---- eval: determinism and batch-size invariance ----
common=(--dataset gsm8k,mt_bench --num-prompts 10 --max-tokens 40 --temperature 1.5 --top-p 0.95 --seed 11 "${E[@]}")
run "$FLINT" eval "$M" --speculative-config "$SC0" "${common[@]}" --batch-size 4 --output "$tmp/e1.json"
grep -q "mean AL" "$tmp/out" && ok || bad "eval prints no report"
run "$FLINT" eval "$M" --speculative-config "$SC0" "${common[@]}" --batch-size 4 --output "$tmp/e2.json" --quiet
[ ! -s "$tmp/out" ] && ok || bad "--quiet still prints"
run "$FLINT" eval "$M" --speculative-config "$SC0" "${common[@]}" --batch-size 1 --output "$tmp/e3.json" --quiet
run "$FLINT" eval "$M" --speculative-config "$SC0" "${common[@]}" --batch-size 16 --output "$tmp/e4.json" --quiet
run "$FLINT" eval "$M" --speculative-config "$SC0" "${common[@]/11/12}" --batch-size 4 --output "$tmp/e5.json" --quiet
py "$tmp" <<'PY'
import json, sys
d = sys.argv[1]
def load(n):
    j = json.load(open(f"{d}/{n}.json")); t = j.pop("timing"); assert "wall_s" in t and "datasets" in t; return j
a, b, c, e, f = (load(n) for n in ("e1", "e2", "e3", "e4", "e5"))
assert a == b, "two runs with one seed differ"
assert a == c, "--batch-size 1 differs from 4"
assert a == e, "--batch-size 16 differs from 4"
hashes = lambda j: [p["output_hash"] for ds in j["datasets"] for p in ds["per_prompt"]]
assert hashes(a) != hashes(f), "another seed gave the same outputs"
assert [ds["name"] for ds in a["datasets"]] == ["gsm8k", "mt_bench"]
g, m = a["datasets"]
s = g["summary"]
for k in ("mean_acceptance_length", "mean_acceptance_length_ci", "acceptance_rate_per_position",
          "conditional_acceptance_rate_per_position", "draft_acceptance_rate", "output_tokens", "speculative"):
    assert k in s, k
assert len(s["acceptance_rate_per_position"]) == 4 and len(s["speculative"]["acceptance_histogram"]) == 5
sp = s["speculative"]
assert abs(s["mean_acceptance_length"] - (1 + sp["num_accepted_draft_tokens"] / sp["num_spec_steps"])) < 1e-9
lo, hi = s["mean_acceptance_length_ci"]; assert lo <= s["mean_acceptance_length"] <= hi
assert sum(sp["acceptance_histogram"]) == sp["num_spec_steps"]
assert s["prompts"] == 10 and len(g["per_prompt"]) == 10
assert [p["seed"] for p in g["per_prompt"]] == list(range(11, 21)), "seed is not --seed + record"
assert len(m["categories"]) == 1 and m["categories"][0]["name"] == "writing"   # first 10 MT-Bench = writing
assert a["config"]["chat_template"] == "llama2" and a["config"]["num_speculative_tokens"] == 4
pooled = sum(p["accepted"] for p in g["per_prompt"]); assert pooled == sp["num_accepted_draft_tokens"]
print("eval deterministic, batch-size invariant, seed-sensitive")
PY
[ -s "$tmp/e1.md" ] && grep -q "## gsm8k" "$tmp/e1.md" && ok || bad "eval markdown"

# per category (Spec-Bench slice), multi-turn, raw prompts
run "$FLINT" eval "$M" --speculative-config "$SC0" --dataset "spec_bench:qa,spec_bench:math_reasoning" \
  --num-prompts 3 --max-tokens 24 "${E[@]}" --output "$tmp/cat.json" --quiet
run "$FLINT" eval "$M" --speculative-config "$SC0" --dataset mt_bench --num-prompts 3 --max-tokens 24 --multi-turn \
  "${E[@]}" --output "$tmp/mt.json" --quiet
run "$FLINT" eval "$M" --speculative-config "$SC0" --dataset mt_bench --num-prompts 3 --max-tokens 24 \
  "${E[@]}" --output "$tmp/mt1.json" --quiet
run "$FLINT" eval "$M" --speculative-config "$SC0" --dataset humaneval --num-prompts 2 --max-tokens 8 --no-chat \
  "${E[@]}" --output "$tmp/raw.json" --quiet
py "$tmp" <<'PY'
import json, sys
d = sys.argv[1]
c = json.load(open(f"{d}/cat.json"))
assert [x["name"] for x in c["datasets"]] == ["spec_bench:qa", "spec_bench:math_reasoning"]
assert c["datasets"][0]["per_prompt"][0]["seed"] == 240  # qa starts at record 240 of spec_bench.jsonl; seed 0
mt = json.load(open(f"{d}/mt.json"))["datasets"][0]["per_prompt"]
one = json.load(open(f"{d}/mt1.json"))["datasets"][0]["per_prompt"]
assert all(p["turns"] == 2 for p in mt), [p["turns"] for p in mt]
assert all(p["turns"] == 1 for p in one)
assert all(a["output_tokens"] > b["output_tokens"] for a, b in zip(mt, one))
assert all(a["prompt_tokens"] == b["prompt_tokens"] for a, b in zip(mt, one))
raw = json.load(open(f"{d}/raw.json"))
assert raw["config"]["chat_template"] == "none"
print("categories, multi-turn, raw prompts")
PY

# SVG: well-formed, expected elements
py "$tmp/e1.svg" <<'PY'
import sys, xml.etree.ElementTree as ET
ns = "{http://www.w3.org/2000/svg}"
r = ET.parse(sys.argv[1]).getroot()
assert r.tag == ns + "svg"
lines = r.findall(f".//{ns}polyline")
assert len(lines) == 4, len(lines)           # 2 datasets x (of steps, conditional)
# K = 4 positions; conditional rates after a position nobody reached are undefined and left out
assert all(len(l.get("points").split()) == 4 for l in lines if not l.get("stroke-dasharray"))
texts = "".join(t.text or "" for t in r.iter(ns + "text"))
assert "Per-position acceptance" in texts and "gsm8k" in texts and "draft position" in texts
print("eval SVG ok")
PY
if command -v rsvg-convert >/dev/null; then
  rsvg-convert "$tmp/e1.svg" -o "$tmp/e1.png" && [ -s "$tmp/e1.png" ] && ok || bad "rsvg-convert eval svg"
fi

# ---- ab ----
AB=(--dataset mt_bench --num-prompts 16 --max-tokens 32 --temperature 2 --speculative-config '{"num_speculative_tokens": 3}' "${E[@]}")
run "$FLINT" ab "$M" --drafter-a "$tmp/d0" --drafter-b "$tmp/d1" "${AB[@]}" --batch-size 5 --output "$tmp/ab"
grep -q -E "^(B \(d1\) better|A \(d0\) better|no significant difference)" "$tmp/out" && ok || bad "ab verdict line"
for f in ab.json report.md acceptance.svg; do [ -s "$tmp/ab/$f" ] && ok || bad "ab wrote no $f"; done
run "$FLINT" ab "$M" --drafter-a "$tmp/d0" --drafter-b "$tmp/d0" "${AB[@]}" --seed 1 --output "$tmp/aa1" --quiet
run "$FLINT" ab "$M" --drafter-a "$tmp/d0" --drafter-b "$tmp/d0" "${AB[@]}" --seed 2 --output "$tmp/aa2" --quiet
py "$tmp" <<'PY'
import json, sys, xml.etree.ElementTree as ET
d = sys.argv[1]
j = json.load(open(f"{d}/ab/ab.json"))
assert [a["label"] for a in j["arms"]] == ["d0", "d1"]
p = j["overall"]["paired"]
for k in ("mean_difference", "mean_difference_ci", "sign_test", "wilcoxon", "significant"):
    assert k in p, k
assert j["verdict"] and "timing" in j and "a" in j["timing"] and "b" in j["timing"]
diffs = [q["difference"] for q in j["per_prompt"] if q["difference"] is not None]
assert abs(sum(diffs) / len(diffs) - p["mean_difference"]) < 1e-9
assert len(j["datasets"][0]["categories"]) == 2      # writing, roleplay
for n in ("aa1", "aa2"):
    a = json.load(open(f"{d}/{n}/ab.json"))
    assert a["verdict"].startswith("no significant difference"), a["verdict"]
    assert all(q["same_output"] for q in a["per_prompt"]), "A/A arms differ"
    assert all(q["difference"] in (0, None) for q in a["per_prompt"])
assert json.load(open(f"{d}/aa1/ab.json"))["per_prompt"][0]["seed"] == 1
r = ET.parse(f"{d}/ab/acceptance.svg").getroot()
assert len(r.findall(".//{http://www.w3.org/2000/svg}polyline")) == 4
md = open(f"{d}/ab/report.md").read()
assert "Wilcoxon" in md and "## Speed" in md and "by category" in md
print("ab reports, A/A identical")
PY

# ---- bench ----
SCB="{\"model\": \"$tmp/d0\"}"
BE=(--context 48 --warmup 1 --steps 4 "${E[@]}")
run "$FLINT" bench "$M" --speculative-config "$SCB" --batch-sizes 1,3 --draft-lengths 2,4 --synthetic-acceptance 2.5 \
  "${BE[@]}" --output "$tmp/b1.json"
grep -q "speed-up" "$tmp/out" && ok || bad "bench prints no table"
run "$FLINT" bench "$M" --speculative-config "$SCB" --batch-sizes 2 --draft-lengths 3 --synthetic-per-position 1,1,1 \
  "${BE[@]}" --output "$tmp/b2.json" --quiet
run "$FLINT" bench "$M" --speculative-config "$SCB" --batch-sizes 2 --draft-lengths 3 --synthetic-per-position 0,0,0 \
  "${BE[@]}" --output "$tmp/b3.json" --quiet
run "$FLINT" bench "$M" --speculative-config "$SCB" --batch-sizes 2 --draft-lengths 1 "${BE[@]}" --output "$tmp/b4.json" --quiet
# interleaved rounds: the sweep twice (K = 0, 1, then 1, 0), each point's steps pooled
run "$FLINT" bench "$M" --speculative-config "$SCB" --batch-sizes 2 --draft-lengths 1 --synthetic-per-position 1 \
  "${BE[@]}" --rounds 2 --output "$tmp/b5.json"
grep -q "^2 rounds, every other one in reverse order" "$tmp/out" && ok || bad "bench --rounds 2: no rounds line"
# the same with other prompts each round (--vary-prompts)
run "$FLINT" bench "$M" --speculative-config "$SCB" --batch-sizes 2 --draft-lengths 1 --synthetic-per-position 1 \
  "${BE[@]}" --rounds 2 --vary-prompts --output "$tmp/b6.json"
grep -q "^2 rounds, .*each round on other prompts" "$tmp/out" && ok || bad "bench --vary-prompts: no rounds line"
# the same text for every K (--tokens): warm-up to 3 tokens a session, then 8 more each; every
# draft accepted, so K = 3 takes 2 timed steps of 4 tokens a session, K = 0 eight of one
run "$FLINT" bench "$M" --speculative-config "$SCB" --batch-sizes 2 --draft-lengths 3 --synthetic-per-position 1,1,1 \
  --context 48 --warmup 3 --tokens 8 "${E[@]}" --output "$tmp/b7.json"
grep -q "the same text for every K: tokens 3 to 11 of each session" "$tmp/out" && ok || bad "bench --tokens: no window line"
expect 2 "--tokens expects an integer" -- "$FLINT" bench "$M" --tokens 0
expect 2 "--tokens times the engine's steps" -- "$FLINT" bench --device cuda --load-format dummy --model-shape qwen3-8b --tokens 8
expect 2 "--keep-engines keeps the engines" -- "$FLINT" bench --device cuda --load-format dummy --model-shape qwen3-8b --keep-engines
# each K's engine kept over the rounds (--keep-engines): the same grid, the rounds line says so
run "$FLINT" bench "$M" --speculative-config "$SCB" --batch-sizes 2 --draft-lengths 1 --synthetic-per-position 1 \
  "${BE[@]}" --rounds 3 --keep-engines --output "$tmp/b8.json"
grep -q "^3 rounds, .*each K's engine kept over the rounds" "$tmp/out" && ok || bad "bench --keep-engines: no rounds line"
# a given cost model where a draft pass costs 1000 s: once the gate has its estimates (8 drafting
# steps, in the warm-up) the timed steps skip the drafter but for a probe at most
run "$FLINT" bench "$M" --speculative-config "{\"model\": \"$tmp/d0\", \"dynamic_draft\": true, \"dynamic_cost\": {\"fixed_ms\": 1, \"draft_ms\": 1e6}}" \
  --batch-sizes 2 --draft-lengths 4 --context 48 --warmup 12 --steps 16 "${E[@]}"
grep -q -E "^ +2 +4 +K0: 1[56] .*\(probes [01], deep [0-9]+\)" "$tmp/out" && ok || bad "dynamic_cost: the dear drafter was not skipped"
py "$tmp" <<'PY'
import json, sys, xml.etree.ElementTree as ET
d = sys.argv[1]
b = json.load(open(f"{d}/b1.json"))["rows"]
assert [(r["batch"], r["k"]) for r in b] == [(1, 0), (3, 0), (1, 2), (3, 2), (1, 4), (3, 4)]
for r in b:
    assert r["median_step_ms"] > 0 and r["tokens_per_s_total"] > 0
    assert abs(r["tokens_per_s_per_user"] * r["batch"] - r["tokens_per_s_total"]) < 1e-6 * r["tokens_per_s_total"]
    if r["k"] == 0: assert r["speedup_vs_no_speculation"] == 1 and r["measured_acceptance_length"] == 1
    else:
        rates = r["synthetic_conditional_rates"]; K = r["k"]
        assert len(set(rates)) == 1 and abs(sum(rates[0] ** i for i in range(K + 1)) - 2.5) < 1e-9
        assert abs(r["expected_acceptance_length"] - 2.5) < 1e-9
full = json.load(open(f"{d}/b2.json"))["rows"][1]
none = json.load(open(f"{d}/b3.json"))["rows"][1]
assert full["measured_acceptance_length"] == 4 and full["tokens_per_step"] == 8, full
assert none["measured_acceptance_length"] == 1 and none["tokens_per_step"] == 2, none
real = json.load(open(f"{d}/b4.json"))
assert real["config"]["acceptance"] == "real" and len(real["rows"]) == 2
two = json.load(open(f"{d}/b5.json"))
assert two["config"]["rounds"] == 2 and [(r["batch"], r["k"]) for r in two["rows"]] == [(2, 0), (2, 1)], two
assert two["config"]["vary_prompts"] is False, two["config"]
six = json.load(open(f"{d}/b6.json"))
assert six["config"]["vary_prompts"] is True and six["rows"][1]["tokens_per_step"] == 4, six
sev = json.load(open(f"{d}/b7.json"))
assert sev["config"]["timed_tokens"] == 8 and sev["config"]["warmup_tokens"] == 3, sev["config"]
assert "timed_steps" not in sev["config"], sev["config"]
z, k3 = sev["rows"]
assert (z["timed_steps"], z["tokens_per_step"]) == (8, 2) and (k3["timed_steps"], k3["tokens_per_step"]) == (2, 8), sev
assert abs(k3["speedup_vs_no_speculation"] - (8 / k3["mean_step_ms"]) / (2 / z["mean_step_ms"])) < 1e-6, k3
assert two["rows"][1]["timed_steps"] == 2 * 4, two["rows"][1]   # two rounds of --steps 4
assert two["config"]["keep_engines"] is False, two["config"]
kept = json.load(open(f"{d}/b8.json"))
assert kept["config"]["keep_engines"] is True and kept["config"]["rounds"] == 3, kept["config"]
assert [(r["timed_steps"], r["tokens_per_step"]) for r in kept["rows"]] == [(12, 2), (12, 4)], kept["rows"]
k1 = two["rows"][1]   # every draft accepted in both rounds: 2 tokens a request a step
assert k1["measured_acceptance_length"] == 2 and k1["tokens_per_step"] == 4, k1
for r in two["rows"] + real["rows"]:   # the engine's host time, on the CPU the whole step
    assert 0 < r["host_us_per_step"] <= 1e3 * r["mean_step_ms"] * 1.05, r
    # per step the host's part of the step's wall time, so its median is at most the step's
    assert 0 < r["host_us_median"] <= 1e3 * r["median_step_ms"] * 1.05, r
r = ET.parse(f"{d}/b1.svg").getroot()
assert len(r.findall(".//{http://www.w3.org/2000/svg}polyline")) == 3   # K = 0, 2, 4
print("bench grid, baseline, synthetic acceptance")
PY

# ---- bad input ----
printf '{"turns": ["fine"]}\n{"turns": ["also fine"]}\n{"turns": ["broken"\n' > "$tmp/bad.jsonl"
printf '{"turns": ["fine"]}\n{"text": "no turns"}\n' > "$tmp/noturns.jsonl"
mkdir -p "$tmp/dbad"; cp "$tmp/d0"/* "$tmp/dbad/"
python3 -c "import json,sys; p=sys.argv[1]; c=json.load(open(p)); c['hidden_size']=48; json.dump(c, open(p,'w'))" "$tmp/dbad/config.json"
X=(--max-tokens 8 --num-prompts 2 "${E[@]}")
expect 1 "unknown dataset 'gsm9k'" -- "$FLINT" eval "$M" --speculative-config "$SC0" --dataset gsm9k "${X[@]}"
expect 1 "bad.jsonl:3: malformed JSON" -- "$FLINT" eval "$M" --speculative-config "$SC0" --dataset "$tmp/bad.jsonl" "${X[@]}"
expect 1 "noturns.jsonl:2: the record has neither" -- "$FLINT" eval "$M" --speculative-config "$SC0" --dataset "$tmp/noturns.jsonl" "${X[@]}"
expect 1 "nope.jsonl" -- "$FLINT" eval "$M" --speculative-config "$SC0" --dataset "$tmp/nope.jsonl" "${X[@]}"
python3 -c "import json; print(json.dumps({'prompt': 'word ' * 3000}))" > "$tmp/long.jsonl"
expect 1 "every prompt of long is longer than the context" -- "$FLINT" eval "$M" --speculative-config "$SC0" --dataset "$tmp/long.jsonl" "${X[@]}"
expect 1 "no category 'poetry'" -- "$FLINT" eval "$M" --speculative-config "$SC0" --dataset spec_bench:poetry "${X[@]}"
expect 1 "hidden_size 48" -- "$FLINT" eval "$M" --speculative-config "{\"model\": \"$tmp/dbad\"}" --dataset gsm8k "${X[@]}"
expect 1 "hidden_size 48" -- "$FLINT" ab "$M" --drafter-a "$tmp/d0" --drafter-b "$tmp/dbad" --dataset gsm8k --output "$tmp/abx" "${X[@]}"
expect 1 "hidden_size 48" -- "$FLINT" bench "$M" --speculative-config "{\"model\": \"$tmp/dbad\"}" --batch-sizes 1 --draft-lengths 1 "${E[@]}"
expect 1 "not a JSON object" -- "$FLINT" eval "$M" --speculative-config '{"model": ' --dataset gsm8k "${X[@]}"
expect 1 "unknown key" -- "$FLINT" eval "$M" --speculative-config "{\"model\": \"$tmp/d0\", \"k\": 3}" --dataset gsm8k "${X[@]}"
expect 1 "dynamic_cost must be an object" -- "$FLINT" eval "$M" --speculative-config "{\"model\": \"$tmp/d0\", \"dynamic_cost\": 3}" --dataset gsm8k "${X[@]}"
expect 1 "dynamic_cost.row_ms: must be a number" -- "$FLINT" eval "$M" --speculative-config "{\"model\": \"$tmp/d0\", \"dynamic_cost\": {\"row_ms\": -1}}" --dataset gsm8k "${X[@]}"
expect 1 "dynamic_cost.fixed: unknown key" -- "$FLINT" eval "$M" --speculative-config "{\"model\": \"$tmp/d0\", \"dynamic_cost\": {\"fixed\": 1}}" --dataset gsm8k "${X[@]}"
expect 1 "needs a verify cost" -- "$FLINT" eval "$M" --speculative-config "{\"model\": \"$tmp/d0\", \"dynamic_cost\": {\"draft_ms\": 5}}" --dataset gsm8k "${X[@]}"
expect 1 "must not name a \"model\"" -- "$FLINT" ab "$M" --drafter-a "$tmp/d0" --drafter-b "$tmp/d1" --speculative-config "$SC0" --dataset gsm8k --output "$tmp/abx" "${X[@]}"
expect 1 "config.json" -- "$FLINT" eval "$tmp/nomodel" --speculative-config "$SC0" --dataset gsm8k "${X[@]}"
expect 1 "exceed the model's context" -- "$FLINT" bench "$M" --speculative-config "$SCB" --batch-sizes 1 --draft-lengths 1 --context 500 "${E[@]}"
expect 2 "--temperature expects a number" -- "$FLINT" eval "$M" --dataset gsm8k --temperature hot
expect 2 "--batch-size expects an integer" -- "$FLINT" eval "$M" --dataset gsm8k --batch-size 0
expect 2 "unknown option --bogus" -- "$FLINT" eval "$M" --dataset gsm8k --bogus
expect 2 "--dataset is required" -- "$FLINT" eval "$M"
expect 2 "--max-tokens needs a value" -- "$FLINT" eval "$M" --dataset gsm8k --max-tokens
expect 2 "--multi-turn needs the chat template" -- "$FLINT" eval "$M" --dataset mt_bench --multi-turn --no-chat
expect 2 "unexpected argument" -- "$FLINT" eval "$M" extra --dataset gsm8k
expect 2 "--drafter-a and --drafter-b are required" -- "$FLINT" ab "$M" --drafter-a "$tmp/d0" --dataset gsm8k --output "$tmp/abx"
expect 2 "--output DIR is required" -- "$FLINT" ab "$M" --drafter-a "$tmp/d0" --drafter-b "$tmp/d1" --dataset gsm8k
expect 2 "unknown option --drafter-a" -- "$FLINT" eval "$M" --dataset gsm8k --drafter-a "$tmp/d0"
expect 2 "exclude each other" -- "$FLINT" bench "$M" --synthetic-acceptance 2 --synthetic-per-position 0.5
expect 2 "gives 2 rates but --draft-lengths goes up to 3" -- "$FLINT" bench "$M" --draft-lengths 1,3 --synthetic-per-position 0.5,0.5
expect 2 "--batch-sizes lists 2 twice" -- "$FLINT" bench "$M" --batch-sizes 2,2
expect 2 "--synthetic-per-position expects" -- "$FLINT" bench "$M" --synthetic-per-position 0.5,1.5
expect 2 "add --device cuda" -- "$FLINT" bench --load-format dummy --model-shape qwen3-8b
expect 2 "unknown model shape 'qwen9'" -- "$FLINT" bench --load-format dummy --model-shape qwen9 --device cuda
expect 2 "go together" -- "$FLINT" bench --load-format dummy --device cuda
expect 2 "--device expects cpu or cuda" -- "$FLINT" bench --device tpu
expect 2 "--load-format expects auto or dummy" -- "$FLINT" bench --load-format gguf
expect 2 "goes with --load-format dummy" -- "$FLINT" bench "$M" --max-model-len 4096
expect 2 "is past qwen3-8b's 40960 positions" -- "$FLINT" bench --load-format dummy --model-shape qwen3-8b \
    --device cuda --max-model-len 50000
# the engine on a dummy shape (with a drafter) needs a GPU: refused cleanly on this machine
expect 1 "device cuda was asked for" -- "$FLINT" bench --load-format dummy --model-shape qwen3-0.6b --device cuda \
    --speculative-config "{\"model\": \"$tmp/d0\"}" --batch-sizes 1 --draft-lengths 1
# one line of error output for user errors
"$FLINT" eval "$M" --speculative-config "$SC0" --dataset gsm9k "${X[@]}" 2>"$tmp/err" >/dev/null
[ "$(wc -l < "$tmp/err")" -eq 1 ] && ok || bad "error is not one line: $(cat "$tmp/err")"
"$FLINT" eval --help | grep -q -- "--dataset" && ok || bad "eval --help"
"$FLINT" ab --help | grep -q -- "--drafter-a" && ok || bad "ab --help"
"$FLINT" bench --help | grep -q -- "--synthetic-acceptance" && ok || bad "bench --help"

echo "test_evals_cli: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
