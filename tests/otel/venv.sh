#!/usr/bin/env bash
# Makes the venv tests/it/otel.rs runs tests/otel/receiver.py with:
# target/venv-otel, with the official OpenTelemetry proto definitions,
# pinned. Run by tests/run.sh; a failure fails the run (the otel tests
# fail, never skip, without it).
set -euo pipefail
exec bash "$(dirname "$0")/../venv.sh" otel opentelemetry-proto==1.45.2
