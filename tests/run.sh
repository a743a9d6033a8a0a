#!/usr/bin/env bash
# The test command (README): installs what the tests need, checks formatting
# and lints, then runs every test suite. Works on a fresh Debian machine.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '\n== %s\n' "$*"; }

# Programs the tests run, as `command:debian-package`.
need=()
for tool in kill:procps; do
  type -P "${tool%%:*}" >/dev/null 2>&1 || need+=("${tool#*:}")
done
if [ ${#need[@]} -gt 0 ]; then
  log "installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need[@]}" >/dev/null
fi

log "cargo fmt --check"
cargo fmt --all -- --check

log "cargo clippy"
cargo clippy --locked --all-targets -- -D warnings

log "cargo test --release"
mkdir -p target
out=target/test-output.txt
set +e
cargo test --release --locked 2>&1 | tee "$out"
status=${PIPESTATUS[0]}
set -e
passed=$(grep -Eo '[0-9]+ passed' "$out" | awk '{s += $1} END {print s + 0}')
failed=$(grep -Eo '[0-9]+ failed' "$out" | awk '{s += $1} END {print s + 0}')
echo
echo "tests: $passed passed, $failed failed"
exit "$status"
