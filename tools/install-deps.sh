#!/usr/bin/env bash
# Debian packages flint builds and tests with. Run as root (or with sudo) on a fresh Debian machine.
#   libcjson-dev     JSON (config.json, tokenizer.json, API bodies)
#   libpcre2-dev     pre-tokenizer regexes (UTF + UCP)
#   libutf8proc-dev  NFC normalisation for tokenizers
#   libxxhash-dev    prefix-cache block hashes
#   libevent-dev     the HTTP server
#   python3          fixture scripts and the GPT-2 tokenizer converter used by tests
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO=sudo
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends build-essential cmake pkg-config \
  libcjson-dev libpcre2-dev libutf8proc-dev libxxhash-dev libevent-dev python3 >/dev/null
echo "flint: build dependencies installed"
