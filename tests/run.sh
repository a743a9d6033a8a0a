#!/usr/bin/env bash
# The test command (README): installs what the tests need, checks formatting
# and lints, then runs every test suite. Works on a fresh machine.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '\n== %s\n' "$*"; }

need_apt=()
for tool in curl:curl; do
  command -v "${tool%%:*}" >/dev/null 2>&1 || need_apt+=("${tool#*:}")
done
if [ ${#need_apt[@]} -gt 0 ]; then
  log "installing ${need_apt[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

log "cargo fmt --check"
cargo fmt --all -- --check

log "cargo clippy"
cargo clippy --locked --all-targets -- -D warnings

log "cargo test --release"
cargo test --release --locked
