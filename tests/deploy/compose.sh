#!/usr/bin/env bash
# Checks deploy/compose.yaml (README: Operations, "Compose") without a
# container engine, which the build machines do not have; tests/run.sh runs it
# and counts it as one test.
#
# 1. tests/deploy/compose_check.py: the services' wiring (mounts exist, names
#    and ports agree, images pinned), promtool check config on Prometheus's
#    config with the rules laid out as mounted, and `tokenclock check-config`
#    on tokenclock's settings from the environment (with the release binary,
#    when it has been built);
# 2. the check can fail: each mutation below breaks the wiring in a copy.
set -euo pipefail
cd "$(dirname "$0")/../.."

# shellcheck source=tests/deploy/venv.sh
. tests/deploy/venv.sh
py="$deploy_venv/bin/python"
type -P promtool >/dev/null || fail "promtool is required (Debian: prometheus)"
bin=target/release/tokenclock
[ -x "$bin" ] || { log "no $bin: check-config of the environment skipped"; bin=; }

log "compose_check.py deploy"
"$py" tests/deploy/compose_check.py deploy $bin

tmp=$(mktemp -d "${TMPDIR:-/tmp}/tokenclock-compose.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
log "the check can fail: each mutation breaks the wiring and compose_check.py must fail"
# file % text in it % replacement
mutations=(
  "compose/prometheus.yml%tokenclock:9464%tokenclock:9465"
  "compose.yaml%TOKENCLOCK_METRICS_LISTEN: \"0.0.0.0:9464\"%TOKENCLOCK_METRICS_LISTEN: \"127.0.0.1:9464\""
  "compose.yaml%TOKENCLOCK_UPSTREAM: \"http://sim:8000\"%TOKENCLOCK_UPSTREAM: \"http://sim:9000\""
  "compose.yaml%- http://tokenclock:8080%- http://tokenclock:8000"
  "compose.yaml%./grafana/tokenclock.json%./grafana/missing.json"
  "compose.yaml%prom/prometheus:v3.5.0%prom/prometheus:latest"
  "compose.yaml%      - ./prometheus/alerts.rules.yml:/etc/prometheus/alerts.rules.yml:ro
%"
  "compose/grafana/datasource.yaml%http://prometheus:9090%http://prometheus:9091"
  "compose/grafana/dashboards.yaml%path: /var/lib/grafana/dashboards%path: /var/lib/grafana/other"
  "compose/prometheus.yml%job_name: tokenclock%job_name: sidecars"
)
# Only tokenclock itself can refuse this one: a log format it does not know.
[ -z "$bin" ] || mutations+=("compose.yaml%      TOKENCLOCK_METRICS_LISTEN: \"0.0.0.0:9464\"
%      TOKENCLOCK_METRICS_LISTEN: \"0.0.0.0:9464\"
      TOKENCLOCK_LOG_FORMAT: \"yaml\"
")
n=0
for mutation in "${mutations[@]}"; do
  IFS='%' read -r -d '' file old new < <(printf '%s\0' "$mutation") || true
  rm -rf "$tmp/deploy" && cp -r deploy "$tmp/deploy"
  python3 - "$tmp/deploy/$file" "$old" "$new" <<'PY' || fail "mutation no longer applies to $file: $old"
import sys
path, old, new = sys.argv[1:]
text = open(path).read()
if old not in text:
    sys.exit(1)
open(path, "w").write(text.replace(old, new, 1))
PY
  if out=$("$py" tests/deploy/compose_check.py "$tmp/deploy" $bin); then
    fail "mutation not caught: $file: $old -> $new"
  fi
  n=$((n + 1))
  log "caught: ${out%%$'\n'*}"
done
log "$n mutations, each caught"
echo "deploy/compose.yaml: OK"
