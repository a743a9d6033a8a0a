#!/usr/bin/env bash
# venv.sh NAME PACKAGE...: makes target/venv-NAME with exactly these
# packages (pinned), unless it already has them. The Python tools the tests
# run live in such venvs: tests/otel/venv.sh, tests/clients/venv.sh and
# tests/deploy/venv.sh call this. Needs python3 with the venv module
# (Debian: python3-venv; tests/run.sh installs it). Fails if pip does.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=target/venv-$1
shift
stamp="$venv/.installed"
if [ -x "$venv/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$*" ]; then
  exit 0
fi
python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check "$@"
printf '%s' "$*" > "$stamp"
