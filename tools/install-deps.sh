#!/usr/bin/env bash
# Debian packages flint builds and tests with. Run as root (or with sudo) on a fresh Debian machine.
#   libcjson-dev     JSON (config.json, tokenizer.json, API bodies)
#   libpcre2-dev     pre-tokenizer regexes (UTF + UCP)
#   libutf8proc-dev  NFC normalisation for tokenizers
#   libxxhash-dev    prefix-cache block hashes
#   libevent-dev     the HTTP server
#   python3          fixture scripts and the GPT-2 tokenizer converter used by tests (+ numpy, safetensors below)
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO=sudo
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends build-essential cmake pkg-config \
  libcjson-dev libpcre2-dev libutf8proc-dev libxxhash-dev libevent-dev python3 >/dev/null
echo "flint: build dependencies installed"
# evals: rsvg-convert (librsvg2-bin) renders the eval / ab / bench SVG plots to PNG in
# tests/test_evals_cli.sh; optional (the test parses the SVGs as XML either way)
$SUDO apt-get install -y -qq --no-install-recommends librsvg2-bin >/dev/null || echo "flint: librsvg2-bin not installed (optional)"
# server: clang + its runtime libraries build the libFuzzer target of the request parser
# (tests/fuzz/run.sh); curl and the openai Python SDK are the real clients of tests/test_server.py
$SUDO apt-get install -y -qq --no-install-recommends clang libclang-rt-14-dev curl python3-pip >/dev/null
if ! python3 -c "import openai" 2>/dev/null; then
  python3 -m pip install -q openai 2>/dev/null || python3 -m pip install -q --break-system-packages openai
fi
# numpy and safetensors: tools/make_random_drafter.py writes the random drafters the server and
# eval tests load (Debian's python3-numpy for /usr/bin/python3; pip for safetensors, which Debian
# does not package, and for both when the python3 on PATH is another interpreter)
$SUDO apt-get install -y -qq --no-install-recommends python3-numpy >/dev/null || echo "flint: python3-numpy not installed"
for mod in numpy safetensors; do
  if ! python3 -c "import $mod" 2>/dev/null; then
    python3 -m pip install -q "$mod" 2>/dev/null || python3 -m pip install -q --break-system-packages "$mod"
  fi
done
