#!/usr/bin/env bash
# Makes the venv tests/it/otel.rs runs tests/otel/receiver.py with:
# target/venv-otel, with the official OpenTelemetry proto definitions,
# pinned. Run by tests/run.sh; a failure fails the run (the otel tests
# fail, never skip, without it).
set -euo pipefail
cd "$(dirname "$0")/../.."
venv=target/venv-otel
tools=(opentelemetry-proto==1.45.2)
stamp="$venv/.installed"
if [ -x "$venv/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "${tools[*]}" ]; then
  exit 0
fi
python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check "${tools[@]}"
printf '%s' "${tools[*]}" > "$stamp"
