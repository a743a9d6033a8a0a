#!/usr/bin/env bash
# Checks deploy/prometheus/ with the real tools (README: Operations,
# "Prometheus rules and alerts"); tests/run.sh runs it after the cargo tests.
#
# 1. promtool check config on prometheus.yml (which checks both rule files),
#    and on its commented Kubernetes job, uncommented in a temporary copy;
# 2. promtool check rules on both rule files;
# 3. promtool test rules deploy/prometheus/tests/*.yml;
# 4. every alert has a severity label, summary, description and a
#    runbook_url naming a heading of README.md, and a unit test in which it
#    fires and one in which it stays quiet;
# 5. the unit tests can fail: each mutation below breaks one rule in a
#    temporary copy, and promtool test rules must then fail.
# Needs promtool (Debian's prometheus package) and python3. Exits non-zero
# on the first failure.
set -euo pipefail
cd "$(dirname "$0")/../.."

dir=deploy/prometheus
log() { printf -- '-- %s\n' "$*"; }
fail() { printf 'FAILED: %s\n' "$*" >&2; exit 1; }

type -P promtool >/dev/null || fail "promtool is required (apt-get install prometheus)"
type -P python3 >/dev/null || fail "python3 is required"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/tokenclock-prometheus-rules.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

log "promtool check config $dir/prometheus.yml"
promtool check config "$dir/prometheus.yml"

# Debian's promtool and prometheus are built without Kubernetes service
# discovery ("field kubernetes_sd_configs not found"), so the copy discovers
# one static target instead; the rest of the job (its relabel rules) is
# checked as written.
log "promtool check config: the commented Kubernetes job (discovery made static) in place of the static one"
cp "$dir"/*.rules.yml "$tmp/"
python3 - "$dir/prometheus.yml" "$tmp/prometheus-kubernetes.yml" <<'EOF'
import sys
lines = open(sys.argv[1]).read().split("\n")
start = next(i for i, l in enumerate(lines) if l.strip() == "- job_name: tokenclock")
end = next(i for i, l in enumerate(lines) if l.strip() == "# - job_name: tokenclock")
job = [l.replace("  # ", "  ", 1) for l in lines[end:] if l.startswith("  #")]
job = [l for l in job if l.strip()]
at = next(i for i, l in enumerate(job) if l.strip() == "kubernetes_sd_configs:")
assert job[at + 1].strip() == "- role: pod", job[at + 1]
assert any("prometheus_io_scrape" in l for l in job), "no scrape annotation rule"
indent = job[at][: len(job[at]) - len(job[at].lstrip())]
job[at : at + 2] = [indent + "static_configs:", indent + "  - targets: ['127.0.0.1:9464']"]
open(sys.argv[2], "w").write("\n".join(lines[:start] + job) + "\n")
EOF
promtool check config "$tmp/prometheus-kubernetes.yml"

log "promtool check rules"
promtool check rules "$dir/recording.rules.yml" "$dir/alerts.rules.yml"

log "promtool test rules $dir/tests/*.yml"
promtool test rules "$dir"/tests/*.yml

log "every alert: severity, summary, description, runbook_url to a README heading, a firing and a quiet test"
python3 - "$dir/alerts.rules.yml" "$dir/tests/alerts_test.yml" README.md <<'EOF'
import re, sys
rules, tests, readme = (open(p).read() for p in sys.argv[1:4])

def slug(heading):
    # GitHub's anchors: lower case, punctuation other than - and _ dropped,
    # spaces to -.
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")

anchors = {slug(m.group(1)) for m in re.finditer(r"^#+ (.+)$", readme, re.M)}
blocks = re.split(r"^\s*- alert: ", rules, flags=re.M)[1:]
assert blocks, "no alert found"
problems = []
for block in blocks:
    name = block.split("\n", 1)[0].strip()
    body = re.split(r"^\s*- (record|alert):|^  - name:", block, flags=re.M)[0]
    for key in ("severity", "summary", "description", "runbook_url"):
        if not re.search(rf"^\s+{key}: \S", body, re.M):
            problems.append(f"{name}: no {key}")
    m = re.search(r'runbook_url: "README\.md#([^"]+)"', body)
    if not m:
        problems.append(f"{name}: runbook_url is not README.md#anchor")
    elif m.group(1) not in anchors:
        problems.append(f"{name}: README.md has no heading #{m.group(1)}")
    # Its unit tests: one that expects it firing, one that expects it quiet.
    cases = re.findall(
        rf"- alertname: {name}\n\s+eval_time: \S+\n\s+exp_alerts:(.*)", tests)
    if not any(c.strip() == "" for c in cases):
        problems.append(f"{name}: no test expects it to fire")
    if not any(c.strip() == "[]" for c in cases):
        problems.append(f"{name}: no test expects it to stay quiet")
    # Beside the bad series, each test's input holds a good one; promtool
    # compares the exact list of alerts, so a good series that fired would
    # fail the test too.
if problems:
    sys.exit("\n".join(problems))
print(f"{len(blocks)} alerts checked")
EOF

log "the unit tests can fail: each mutation breaks one rule and promtool test rules must fail"
# file % text in it % replacement % unit test that must then fail
mutations=(
  "alerts.rules.yml%ratio_rate1h < (1 - 14.4 * 0.01)%ratio_rate1h < (1 - 24 * 0.01)%alerts_test.yml"
  "alerts.rules.yml%ratio_rate5m < (1 - 14.4 * 0.01)%ratio_rate5m < 2%alerts_test.yml"
  "alerts.rules.yml%ratio_rate6h < (1 - 6 * 0.01)%ratio_rate6h < (1 - 12 * 0.01)%alerts_test.yml"
  "alerts.rules.yml%ratio_rate30m < (1 - 6 * 0.01)%ratio_rate30m < 2%alerts_test.yml"
  "alerts.rules.yml%ratio_rate1h < (1 - 14.4 * 0.01)%ratio_rate1h < 2%alerts_test.yml"
  "alerts.rules.yml%ratio_rate6h < (1 - 6 * 0.01)%ratio_rate6h < 2%alerts_test.yml"
  "alerts.rules.yml%p99_5m > 2%p99_5m > 0.5%alerts_test.yml"
  "alerts.rules.yml%outcome=~\"upstream_error|timeout\"%outcome=\"upstream_error\"%alerts_test.yml"
  "alerts.rules.yml%[10m]))
          > 0.2%[10m]))
          > 0.5%alerts_test.yml"
  "alerts.rules.yml%
          or
          (tokenclock_parse_errors_total unless tokenclock_parse_errors_total offset 10m)%%alerts_test.yml"
  "alerts.rules.yml%tokenclock_connections_refused_total{listener=\"proxy\"}[10m]%tokenclock_connections_refused_total[10m]%alerts_test.yml"
  "alerts.rules.yml%sum by (job, instance) (increase(tokenclock_requests_refused_total[10m]))
          + %%alerts_test.yml"
  "alerts.rules.yml%increase(tokenclock_records_dropped_total[10m]) > 0%increase(tokenclock_records_dropped_total[10m]) > 10%alerts_test.yml"
  "alerts.rules.yml%increase(tokenclock_otel_spans_dropped_total[10m]) > 0%increase(tokenclock_otel_spans_dropped_total[10m]) > 100%alerts_test.yml"
  "alerts.rules.yml%increase(tokenclock_log_lines_dropped_total[10m]) > 0%rate(tokenclock_log_lines_dropped_total{reason=\"write_error\"}[10m]) > 0%alerts_test.yml"
  "alerts.rules.yml%up{job=~\".*tokenclock.*\"} == 0%up == 0%alerts_test.yml"
  "alerts.rules.yml%idle_closed_total[30m]) > 0
        for: 1h%idle_closed_total[30m]) > 0
        for: 0m%alerts_test.yml"
  "alerts.rules.yml%expr: tokenclock_upstream_healthy == 0
        for: 2m%expr: tokenclock_upstream_healthy == 0
        for: 0m%alerts_test.yml"
  "recording.rules.yml%histogram_quantile(0.99, sum by (le, model)%histogram_quantile(0.99, sum by (le, model, instance)%recording_test.yml"
  "recording.rules.yml%histogram_quantile(0.5,%histogram_quantile(0.6,%recording_test.yml"
  "recording.rules.yml%(rate(tokenclock_slo_requests_total{result=\"met\"}[5m])) or 0 *%(rate(tokenclock_slo_requests_total{result=\"met\"}[5m])) and 0 *%recording_test.yml"
  "recording.rules.yml%sum by (model, outcome) (rate(tokenclock_requests_total[5m]))%sum by (model) (rate(tokenclock_requests_total{outcome=\"ok\"}[5m]))%recording_test.yml"
)
n=0
for mutation in "${mutations[@]}"; do
  IFS='%' read -r -d '' file old new test < <(printf '%s\0' "$mutation") || true
  test=${test%$'\n'}
  rm -rf "$tmp/m" && mkdir -p "$tmp/m/tests"
  cp "$dir"/*.rules.yml "$tmp/m/" && cp "$dir"/tests/*.yml "$tmp/m/tests/"
  python3 - "$tmp/m/$file" "$old" "$new" <<'EOF' || fail "mutation no longer applies to $file: $old"
import sys
path, old, new = sys.argv[1:4]
text = open(path).read()
if text.count(old) < 1:
    sys.exit(1)
open(path, "w").write(text.replace(old, new, 1))
EOF
  promtool check rules "$tmp/m/$file" >/dev/null || fail "mutation makes $file invalid, not wrong: $old -> $new"
  if promtool test rules "$tmp/m/tests/$test" >/dev/null 2>&1; then
    fail "tests/$test still passes with $file: $old -> $new"
  fi
  n=$((n + 1))
done
log "$n mutations, each caught"
echo "deploy/prometheus: OK"
